use cobble_plan::PlanError;

use crate::{plan, strings};

fn names(list: &[&str]) -> Vec<String> {
    strings(list)
}

const DEPS: &str = r#"
    services:
        srv1:
            override: replace
            command: cmd
            after: [srv2, srv4]
            before: [srv3, srv5]
            requires: [srv2, srv3]
        srv2:
            override: replace
            command: cmd
            before: [srv3]
        srv3:
            override: replace
            command: cmd
        srv4:
            override: replace
            command: cmd
        srv5:
            override: replace
            command: cmd
"#;

#[test]
fn start_pulls_in_requires_and_sorts_by_after_before() {
    let plan = plan(&[DEPS]).unwrap();
    assert_eq!(
        plan.start_order(&names(&["srv1"])).unwrap(),
        names(&["srv2", "srv1", "srv3"])
    );
    assert_eq!(
        plan.start_order(&names(&["srv2"])).unwrap(),
        names(&["srv2"])
    );
    assert_eq!(
        plan.start_order(&names(&["srv3"])).unwrap(),
        names(&["srv3"])
    );
    assert_eq!(plan.start_order(&[]).unwrap(), Vec::<String>::new());
}

#[test]
fn stop_pulls_in_dependents_and_reverses() {
    let plan = plan(&[DEPS]).unwrap();
    assert_eq!(
        plan.stop_order(&names(&["srv1"])).unwrap(),
        names(&["srv1"])
    );
    assert_eq!(
        plan.stop_order(&names(&["srv2"])).unwrap(),
        names(&["srv1", "srv2"])
    );
    assert_eq!(
        plan.stop_order(&names(&["srv3"])).unwrap(),
        names(&["srv3", "srv1"])
    );
}

#[test]
fn unknown_service_is_an_error() {
    let plan = plan(&[DEPS]).unwrap();
    for result in [
        plan.start_order(&names(&["srv1", "nope"])),
        plan.stop_order(&names(&["nope"])),
    ] {
        let err = result.unwrap_err();
        assert_eq!(
            err,
            PlanError::ServiceNotFound {
                name: "nope".into()
            }
        );
        assert_eq!(err.to_string(), "service \"nope\" does not exist");
    }
}

#[test]
fn requires_chain_is_one_lane() {
    let plan = plan(&[r#"
        services:
            srv1: {override: replace, command: cmd, requires: [srv2], before: [srv2], startup: enabled}
            srv2: {override: replace, command: cmd, requires: [srv3], before: [srv3], startup: enabled}
            srv3: {override: replace, command: cmd, startup: enabled}
    "#])
    .unwrap();
    let all = names(&["srv1", "srv2", "srv3"]);
    let start = plan.start_order(&all).unwrap();
    assert_eq!(start, all);
    assert_eq!(plan.lanes(&start), vec![all.clone()]);
    let stop = plan.stop_order(&all).unwrap();
    assert_eq!(stop, names(&["srv3", "srv2", "srv1"]));
    assert_eq!(plan.lanes(&stop), vec![names(&["srv3", "srv2", "srv1"])]);
}

#[test]
fn independent_services_get_separate_lanes() {
    let plan = plan(&[r#"
        services:
            srv1: {override: replace, command: cmd}
            srv2: {override: replace, command: cmd}
            srv3: {override: replace, command: cmd}
            srv4: {override: replace, command: cmd, requires: [srv1], after: [srv1]}
    "#])
    .unwrap();
    let all = names(&["srv1", "srv2", "srv3", "srv4"]);
    let start = plan.start_order(&all).unwrap();
    assert_eq!(
        plan.lanes(&start),
        vec![names(&["srv1", "srv4"]), names(&["srv2"]), names(&["srv3"])]
    );
    let stop = plan.stop_order(&all).unwrap();
    assert_eq!(
        plan.lanes(&stop),
        vec![names(&["srv4", "srv1"]), names(&["srv2"]), names(&["srv3"])]
    );
}

#[test]
fn after_before_alone_orders_but_does_not_share_a_lane() {
    let plan = plan(&[r#"
        services:
            web: {override: replace, command: cmd, after: [db]}
            db: {override: replace, command: cmd}
    "#])
    .unwrap();
    let start = plan.start_order(&names(&["web", "db"])).unwrap();
    assert_eq!(start, names(&["db", "web"]));
    assert_eq!(plan.lanes(&start), vec![names(&["db"]), names(&["web"])]);
    // Only the services asked for take part: after/before pulls nothing in.
    assert_eq!(plan.start_order(&names(&["web"])).unwrap(), names(&["web"]));
    assert_eq!(
        plan.stop_order(&names(&["web", "db"])).unwrap(),
        names(&["web", "db"])
    );
}

#[test]
fn diamond_of_requires_is_one_lane() {
    let plan = plan(&[r#"
        services:
            app: {override: replace, command: cmd, requires: [api, worker], after: [api, worker]}
            api: {override: replace, command: cmd, requires: [db], after: [db]}
            worker: {override: replace, command: cmd, requires: [db], after: [db]}
            db: {override: replace, command: cmd}
            other: {override: replace, command: cmd}
    "#])
    .unwrap();
    let start = plan.start_order(&names(&["app", "other"])).unwrap();
    assert_eq!(start, names(&["db", "api", "worker", "app", "other"]));
    assert_eq!(
        plan.lanes(&start),
        vec![names(&["db", "api", "worker", "app"]), names(&["other"])]
    );
    let stop = plan.stop_order(&names(&["db"])).unwrap();
    assert_eq!(stop, names(&["app", "api", "worker", "db"]));
}

#[test]
fn cycle_among_selected_services_is_reported() {
    // Plans with a cycle never validate, so the loop surfaces when the layers are combined.
    let err = plan(&[r#"
        services:
            a: {override: replace, command: cmd, after: [b], requires: [b]}
            b: {override: replace, command: cmd, after: [a]}
    "#])
    .unwrap_err();
    assert_eq!(
        err,
        PlanError::OrderLoop {
            names: names(&["a", "b"])
        }
    );
    assert_eq!(err.to_string(), "services in before/after loop: a, b");
}

#[test]
fn requires_cycles_without_after_before_are_allowed() {
    let plan = plan(&[r#"
        services:
            a: {override: replace, command: cmd, requires: [b]}
            b: {override: replace, command: cmd, requires: [a]}
    "#])
    .unwrap();
    let start = plan.start_order(&names(&["a"])).unwrap();
    assert_eq!(start, names(&["a", "b"]));
    assert_eq!(plan.lanes(&start), vec![names(&["a", "b"])]);
}

#[test]
fn default_services_are_enabled_ones_sorted() {
    let plan = plan(&[r#"
        services:
            zed: {override: replace, command: cmd, startup: enabled}
            alpha: {override: replace, command: cmd, startup: enabled}
            mid: {override: replace, command: cmd, startup: disabled}
            unset: {override: replace, command: cmd}
    "#])
    .unwrap();
    assert_eq!(plan.default_services(), names(&["alpha", "zed"]));
}

#[test]
fn services_after_a_oneshot_they_require_get_lanes_of_their_own() {
    let plan = plan(&[r#"
        services:
            setup:
                override: replace
                command: cmd
                type: oneshot
            a:
                override: replace
                command: cmd
                after: [setup]
                requires: [setup]
            b:
                override: replace
                command: cmd
                after: [setup]
                requires: [setup]
            c:
                override: replace
                command: cmd
                requires: [setup]
        "#])
    .unwrap();
    let start = plan.start_order(&names(&["a", "b", "c"])).unwrap();
    assert_eq!(start[0], "setup");
    // `c` requires it without being after it: one lane, as in Pebble.
    assert_eq!(
        plan.lanes(&start),
        vec![names(&["setup", "c"]), names(&["a"]), names(&["b"])]
    );
    // A daemon in setup's place keeps Pebble's single lane.
    let daemons = plan.services.keys().cloned().collect::<Vec<_>>();
    let mut layer = plan.clone();
    layer.services.get_mut("setup").unwrap().type_ = cobble_plan::ServiceType::Unset;
    let start = layer.start_order(&daemons).unwrap();
    assert_eq!(layer.lanes(&start).len(), 1);
}
