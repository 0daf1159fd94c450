use cobble_plan::{Layer, Plan, PlanError};

use crate::dedent;

fn layer(label: &str, yaml: &str) -> Layer {
    Layer::parse(0, label, &dedent(yaml)).unwrap()
}

fn svc(command: &str) -> String {
    format!("services:\n    svc:\n        override: merge\n        command: {command}\n")
}

fn orders(plan: &Plan) -> Vec<(u64, &str)> {
    plan.layers
        .iter()
        .map(|l| (l.order, l.label.as_str()))
        .collect()
}

#[test]
fn append_assigns_next_thousand() {
    let plan = Plan::default();
    let plan = plan
        .add_layer(layer("foo", &svc("a")), false, false)
        .unwrap();
    assert_eq!(orders(&plan), [(1000, "foo")]);
    let plan = plan
        .add_layer(layer("bar", &svc("b")), false, false)
        .unwrap();
    assert_eq!(orders(&plan), [(1000, "foo"), (2000, "bar")]);
    assert_eq!(plan.services["svc"].command, "b");
}

#[test]
fn append_after_file_layers_rounds_up() {
    let base = Plan::from_layers(vec![
        Layer::parse(1000, "base", &svc("a")).unwrap(),
        Layer::parse(2005, "dir/x", &svc("b")).unwrap(),
    ])
    .unwrap();
    let plan = base
        .add_layer(layer("api", &svc("c")), false, false)
        .unwrap();
    assert_eq!(
        orders(&plan),
        [(1000, "base"), (2005, "dir/x"), (3000, "api")]
    );
    let plan = plan
        .add_layer(layer("newdir/y", &svc("d")), false, false)
        .unwrap();
    assert_eq!(orders(&plan)[3], (4001, "newdir/y"));
}

#[test]
fn duplicate_label_without_combine_fails() {
    let plan = Plan::default()
        .add_layer(layer("foo", &svc("a")), false, false)
        .unwrap();
    let err = plan
        .add_layer(layer("foo", &svc("b")), false, false)
        .unwrap_err();
    assert_eq!(
        err,
        PlanError::LayerExists {
            label: "foo".into()
        }
    );
    assert_eq!(err.to_string(), "layer \"foo\" already exists");
}

#[test]
fn combine_merges_in_place_and_keeps_position() {
    let plan = Plan::default()
        .add_layer(layer("foo", &svc("a")), false, false)
        .unwrap()
        .add_layer(
            layer(
                "bar",
                "services:\n    other:\n        override: replace\n        command: o\n",
            ),
            false,
            false,
        )
        .unwrap();
    let combined = plan
        .add_layer(
            layer(
                "foo",
                "services:\n    svc:\n        override: merge\n        environment: {A: b}\n",
            ),
            true,
            false,
        )
        .unwrap();
    assert_eq!(orders(&combined), [(1000, "foo"), (2000, "bar")]);
    let foo = &combined.layers[0];
    assert_eq!(foo.services["svc"].command, "a");
    assert_eq!(foo.services["svc"].environment["A"], "b");
    assert_eq!(combined.services["svc"].environment["A"], "b");
}

#[test]
fn combine_with_new_label_appends() {
    let plan = Plan::default()
        .add_layer(layer("foo", &svc("a")), true, false)
        .unwrap();
    assert_eq!(orders(&plan), [(1000, "foo")]);
}

#[test]
fn sub_directory_layers_need_inner_to_insert() {
    let plan = Plan::default()
        .add_layer(layer("dir/a", &svc("a")), false, false)
        .unwrap();
    assert_eq!(orders(&plan), [(1000, "dir/a")]);
    // Going after the last layer of the same directory at the end is a plain append.
    let plan = plan
        .add_layer(layer("dir/b", &svc("b")), false, false)
        .unwrap();
    assert_eq!(orders(&plan), [(1000, "dir/a"), (1001, "dir/b")]);
    let plan = plan
        .add_layer(layer("top", &svc("c")), false, false)
        .unwrap();
    assert_eq!(orders(&plan)[2], (2000, "top"));

    // Now `dir/c` would land before `top`: an insertion.
    let err = plan
        .add_layer(layer("dir/c", &svc("d")), false, false)
        .unwrap_err();
    assert_eq!(err, PlanError::InnerRequired);
    assert_eq!(
        err.to_string(),
        "cannot insert sub-directory layer without 'inner' attribute set"
    );
    let inserted = plan
        .add_layer(layer("dir/c", &svc("d")), false, true)
        .unwrap();
    assert_eq!(
        orders(&inserted),
        [
            (1000, "dir/a"),
            (1001, "dir/b"),
            (1002, "dir/c"),
            (2000, "top")
        ]
    );
    // `top` still wins for `svc`.
    assert_eq!(inserted.services["svc"].command, "c");
}

#[test]
fn failed_add_leaves_the_plan_unchanged() {
    let plan = Plan::default()
        .add_layer(layer("foo", &svc("a")), false, false)
        .unwrap();
    let before = plan.clone();
    let err = plan
        .add_layer(
            layer("bad", "services:\n    svc:\n        command: x\n"),
            false,
            false,
        )
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "layer \"bad\" must define \"override\" for service \"svc\""
    );
    let err = plan
        .add_layer(
            layer("cyc", "services:\n    x:\n        override: replace\n        command: x\n        requires: [ghost]\n"),
            false,
            false,
        )
        .unwrap_err();
    assert_eq!(err.to_string(), "service \"ghost\" does not exist");
    assert_eq!(plan, before);
}

#[test]
fn service_args_layer_label_is_accepted_by_add_layer() {
    let plan = Plan::default()
        .add_layer(layer("foo", &svc("a [ b ]")), false, false)
        .unwrap();
    let args = [("svc".to_string(), vec!["c".to_string()])].into();
    let args_layer = cobble_plan::service_args_layer(&plan, &args).unwrap();
    let plan = plan.add_layer(args_layer, false, false).unwrap();
    assert_eq!(orders(&plan)[1], (2000, "pebble-service-args"));
    assert_eq!(plan.services["svc"].command, "a [ c ]");
}
