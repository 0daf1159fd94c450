//! The `workloads:` and `pairing:` sections, and the values Pebble accepts and only fails on
//! later. Every expected text here was read from Pebble v1.32.1 given the same layers.

use cobble_plan::{Layer, PairingMode, Plan, PlanError, Startup};

use crate::{dedent, parse, plan};

/// The layer of the side-by-side run, whose plan Pebble printed as [`PEBBLE_PLAN`].
const LAYER: &str = r#"
    summary: base
    services:
        svc:
            override: replace
            command: /bin/sh -c 'id; env | sort; sleep 1000'
            workload: wl
            startup: enabled
            environment:
                B: svc
                C: "3"
        odd:
            override: replace
            command: /bin/sleep 1000
            startup: enable
    workloads:
        wl:
            override: replace
            user-id: 65534
            group-id: 65534
            environment:
                A: wl
                B: wl
                X: "yes"
        other:
            override: merge
            user: nobody
    pairing:
        mode: single
    log-targets:
        lt:
            override: replace
            type: loki
            location: "loki:3100"
            services: [all]
            labels:
                "bad label": x
"#;

/// `pebble plan` of Pebble v1.32.1 for [`LAYER`], byte for byte.
const PEBBLE_PLAN: &str = r#"services:
    odd:
        startup: enable
        override: replace
        command: /bin/sleep 1000
    svc:
        startup: enabled
        override: replace
        command: /bin/sh -c 'id; env | sort; sleep 1000'
        workload: wl
        environment:
            B: svc
            C: "3"
log-targets:
    lt:
        type: loki
        location: loki:3100
        services:
            - all
        override: replace
        labels:
            bad label: x
workloads:
    other:
        override: merge
        user: nobody
    wl:
        override: replace
        environment:
            A: wl
            B: wl
            X: "yes"
        user-id: 65534
        group-id: 65534
pairing:
    mode: single
"#;

#[test]
fn the_plan_prints_workloads_and_pairing_as_pebble_does() {
    let plan = plan(&[LAYER]).unwrap();
    assert_eq!(plan.to_yaml(), PEBBLE_PLAN);
    assert_eq!(plan.pairing, PairingMode::Single);
}

#[test]
fn a_service_runs_with_its_workload_and_its_own_environment_on_top() {
    let plan = plan(&[LAYER]).unwrap();
    let run = plan.service_to_run("svc").unwrap();
    assert_eq!((run.user_id, run.group_id), (Some(65534), Some(65534)));
    let env: Vec<(&str, &str)> = run
        .environment
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(env, [("A", "wl"), ("B", "svc"), ("C", "3"), ("X", "yes")]);
    // The plan itself keeps what the layers said.
    assert_eq!(plan.services["svc"].user_id, None);
    // Without a workload the service is borrowed as it is.
    assert!(matches!(
        plan.service_to_run("odd"),
        Some(std::borrow::Cow::Borrowed(_))
    ));
    assert!(plan.service_to_run("nope").is_none());
}

#[test]
fn a_service_context_inherits_the_workload() {
    let plan = plan(&[LAYER]).unwrap();
    let merged = plan
        .merge_service_context("svc", cobble_plan::ContextOptions::default())
        .unwrap();
    assert_eq!(merged.user_id, Some(65534));
    assert_eq!(merged.group_id, Some(65534));
    assert_eq!(merged.environment["A"], "wl");
    assert_eq!(merged.environment["B"], "svc");
}

#[test]
fn workloads_merge_and_replace_across_layers() {
    let plan = plan(&[
        LAYER,
        r#"
        workloads:
            wl:
                override: merge
                user: nobody
                environment:
                    A: again
            other:
                override: replace
                user-id: 0
        pairing:
            mode: multiple
        "#,
        "pairing: {}\n",
    ])
    .unwrap();
    let wl = &plan.workloads["wl"];
    assert_eq!(wl.override_, "replace");
    assert_eq!(wl.user, "nobody");
    assert_eq!(wl.user_id, Some(65534));
    assert_eq!(wl.environment["A"], "again");
    assert_eq!(wl.environment["X"], "yes");
    let other = &plan.workloads["other"];
    assert_eq!(
        (other.override_.as_str(), other.user.as_str(), other.user_id),
        ("replace", "", Some(0))
    );
    // The last layer that sets a mode wins; one that sets none changes nothing.
    assert_eq!(plan.pairing, PairingMode::Multiple);
}

/// Each case: the layer, then Pebble's exact error.
#[test]
fn bad_sections_are_refused_with_pebbles_words() {
    let parse_errors: &[(&str, &str)] = &[
        (
            "workloads:\n    w: ~\n",
            "workload \"w\": cannot have a null value",
        ),
        (
            "workloads:\n    \"\":\n        override: replace\n",
            "workload \"\": cannot have an empty name",
        ),
        (
            "pairing:\n    mode: sometimes\n",
            "invalid pairing mode \"sometimes\": should be \"disabled\", \"single\" or \"multiple\"",
        ),
        (
            "pairing:\n    mode: 5\n",
            "invalid pairing mode \"5\": should be \"disabled\", \"single\" or \"multiple\"",
        ),
    ];
    for (yaml, want) in parse_errors {
        let err = parse(0, yaml).unwrap_err();
        assert_eq!(err.to_string(), *want, "{yaml}");
    }
    // The wording of YAML decoding errors after the prefix is the YAML library's; the prefix
    // is Pebble's.
    for (yaml, prefix) in [
        (
            "workloads:\n    w:\n        override: replace\n        foo: 1\n",
            "cannot parse the \"workloads\" section: line 4: unknown field `foo`",
        ),
        (
            "pairing:\n    mode: multiple\n    extra: 1\n",
            "cannot parse the pairing section: line 3: unknown field `extra`",
        ),
        ("pairing: [a]\n", "cannot parse the pairing section: "),
    ] {
        let err = parse(0, yaml).unwrap_err().to_string();
        assert!(err.starts_with(prefix), "{err}");
    }
    let combine_errors: &[(&[&str], &str)] = &[
        (
            &["workloads:\n    w:\n        user: x\n"],
            "workload \"w\": must define an \"override\" policy",
        ),
        (
            &["workloads:\n    w:\n        override: bogus\n"],
            "workload \"w\": has an invalid \"override\" policy: \"bogus\"",
        ),
        (
            &[
                "services:\n    s:\n        override: replace\n        command: x\n        workload: nope\n",
            ],
            "workload \"nope\": not defined for service \"s\"",
        ),
        (
            &[
                "workloads:\n    w:\n        override: replace\n        user-id: 0\n",
                "services:\n    s:\n        override: replace\n        command: x\n        workload: w\n        user: root\n",
            ],
            "plan service \"s\" cannot have user information and a workload at the same time",
        ),
        (
            &[
                "workloads:\n    w:\n        override: replace\n        user-id: 0\n",
                "services:\n    s:\n        override: replace\n        command: x\n        workload: w\n        group-id: 0\n",
            ],
            "plan service \"s\" cannot have group information and a workload at the same time",
        ),
        (
            &["workloads:\n    w:\n        override: replace\n        group: root\n"],
            "workload \"w\": must specify user, not just group",
        ),
        // Pebble combines the extension sections first, so their errors come first.
        (
            &[
                "services:\n    s:\n        command: x\n",
                "workloads:\n    w:\n        user: x\n",
            ],
            "workload \"w\": must define an \"override\" policy",
        ),
    ];
    for (yamls, want) in combine_errors {
        let err = plan(yamls).unwrap_err();
        assert_eq!(err.to_string(), *want, "{yamls:?}");
    }
}

#[test]
fn sections_pebble_accepts_in_odd_shapes_are_accepted() {
    for yaml in [
        "workloads: ~\n",
        "workloads: {}\n",
        "pairing: 5\n",
        "pairing: ~\n",
        "pairing: {}\n",
        "pairing:\n    mode: ~\n",
        "workloads:\n    w:\n        override: replace\n        environment:\n            A: ~\n",
    ] {
        let layer = parse(0, yaml).unwrap_or_else(|e| panic!("{yaml}: {e}"));
        assert_eq!(layer.pairing, PairingMode::Unset, "{yaml}");
    }
}

#[test]
fn the_workloads_loaded_at_start_cannot_change() {
    let base = plan(&[LAYER]).unwrap();
    let layer = |yaml: &str| Layer::parse(0, "more", &dedent(yaml)).unwrap();
    // Repeating the section, or merging in what it already says, changes nothing.
    let same = layer(
        r#"
        workloads:
            wl:
                override: merge
                user-id: 65534
        pairing:
            mode: disabled
        "#,
    );
    let next = base.add_layer(same, false, false).unwrap();
    assert_eq!(next.workloads, base.workloads);
    assert_eq!(next.pairing, PairingMode::Disabled);
    // Any difference is refused, with the plan as it was.
    for yaml in [
        "workloads:\n    wl:\n        override: merge\n        user-id: 0\n",
        "workloads:\n    new:\n        override: replace\n",
        // The combined entry keeps its override, and it counts.
        "workloads:\n    other:\n        override: replace\n        user: nobody\n",
    ] {
        let err = base.add_layer(layer(yaml), false, false).unwrap_err();
        assert_eq!(
            err,
            PlanError::ImmutableSection {
                section: "workloads"
            },
            "{yaml}"
        );
        assert_eq!(
            err.to_string(),
            "cannot change immutable section \"workloads\""
        );
    }
    // A plan without workloads cannot gain any.
    let err = Plan::default()
        .add_layer(
            layer("workloads:\n    w:\n        override: replace\n"),
            false,
            false,
        )
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "cannot change immutable section \"workloads\""
    );
    // A service may move to another workload: that is a change of the service.
    let moved = base
        .add_layer(
            layer("services:\n    svc:\n        override: merge\n        workload: other\n"),
            false,
            false,
        )
        .unwrap();
    assert_eq!(moved.service_to_run("svc").unwrap().user, "nobody");
}

#[test]
fn what_pebble_only_fails_on_later_is_accepted_and_noted() {
    let plan = plan(&[LAYER]).unwrap();
    assert_eq!(
        plan.services["odd"].startup,
        Startup::Other("enable".into())
    );
    assert!(!plan.services["odd"].is_enabled());
    assert_eq!(plan.default_services(), ["svc"]);
    assert_eq!(
        plan.log_target_problems["lt"],
        "invalid location URL \"loki:3100\": missing scheme, must be \"http\" or \"https\""
    );
    assert_eq!(
        plan.notes["odd"],
        "startup \"enable\" is neither \"enabled\" nor \"disabled\": not started automatically; \
         logs not forwarded to \"lt\": invalid location URL \"loki:3100\": missing scheme, must be \"http\" or \"https\""
    );
    assert_eq!(
        plan.notes["svc"],
        "logs not forwarded to \"lt\": invalid location URL \"loki:3100\": missing scheme, must be \"http\" or \"https\""
    );
    // A bad label name is a problem of its own once the location is right.
    let plan = crate::plan(&[r#"
        services:
            a: {override: replace, command: x}
        log-targets:
            "":
                override: replace
                type: loki
                location: http://loki:3100/loki/api/v1/push
                services: [all]
                labels:
                    bad-label: x
            fine:
                override: replace
                type: syslog
                location: udp://localhost:514
                services: [all]
    "#])
    .unwrap();
    assert_eq!(
        plan.log_target_problems
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect::<Vec<_>>(),
        [("", "invalid label name \"bad-label\" for type \"loki\"")]
    );
    assert_eq!(
        plan.notes["a"],
        "logs not forwarded to \"\": invalid label name \"bad-label\" for type \"loki\""
    );
    // Nothing to say about a plan that can work.
    let fine =
        crate::plan(&["services:\n    a: {override: replace, command: x, startup: disabled}\n"])
            .unwrap();
    assert!(fine.notes.is_empty() && fine.log_target_problems.is_empty());
}
