use std::fs;
use std::path::Path;

use cobble_plan::{Plan, PlanError, read_layers};

fn write(dir: &Path, name: &str) {
    let path = dir.join(name);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    // The command names the file, to check each layer was read from the right one.
    fs::write(
        &path,
        format!("services:\n    srv:\n        override: replace\n        command: {name}\n"),
    )
    .unwrap();
}

#[test]
fn missing_directory_is_an_empty_plan() {
    let dir = tempfile::tempdir().unwrap();
    let plan = Plan::load_dir(&dir.path().join("layers")).unwrap();
    assert_eq!(plan, Plan::default());
    assert_eq!(plan.to_yaml(), "{}\n");
}

#[test]
fn files_and_sub_directories_load_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let names = [
        "001-aaa.yaml",
        "010-bbb.yaml",
        "002-dir.d/100-foo.yaml",
        "002-dir.d/090-bar.yaml",
        "008-ccc.yaml",
        "900-overlay.d/002-something.yaml",
        "900-overlay.d/001-else.yaml",
        "003-plans.d/999-final.yaml",
        "009-baz.d/009-baz.yaml",
    ];
    for name in names {
        write(dir.path(), name);
    }
    fs::write(dir.path().join("README.txt"), "ignored").unwrap();
    fs::write(dir.path().join("002-dir.d/notes.md"), "ignored").unwrap();

    let layers = read_layers(dir.path()).unwrap();
    let got: Vec<(u64, &str, &str)> = layers
        .iter()
        .map(|l| {
            (
                l.order,
                l.label.as_str(),
                l.services["srv"].command.as_str(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (1000, "aaa", "001-aaa.yaml"),
            (2090, "dir/bar", "002-dir.d/090-bar.yaml"),
            (2100, "dir/foo", "002-dir.d/100-foo.yaml"),
            (3999, "plans/final", "003-plans.d/999-final.yaml"),
            (8000, "ccc", "008-ccc.yaml"),
            (9009, "baz/baz", "009-baz.d/009-baz.yaml"),
            (10000, "bbb", "010-bbb.yaml"),
            (900001, "overlay/else", "900-overlay.d/001-else.yaml"),
            (
                900002,
                "overlay/something",
                "900-overlay.d/002-something.yaml"
            ),
        ]
    );
    let plan = Plan::load_dir(dir.path()).unwrap();
    assert_eq!(
        plan.services["srv"].command,
        "900-overlay.d/002-something.yaml"
    );
}

#[test]
fn bad_names_are_errors() {
    for name in [
        "001-l.yaml",
        "01-label.yaml",
        "0001-label.yaml",
        "001-label-.yaml",
        "001--label.yaml",
        "001-label--label.yaml",
        "001foo.yaml",
    ] {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join(name), "<ignore>").unwrap();
        let err = Plan::load_dir(dir.path()).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("invalid layer filename: \"{name}\" (must look like \"123-some-label.yaml\")")
        );
    }
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "001-foo.d/001foo.yaml");
    assert!(matches!(
        Plan::load_dir(dir.path()).unwrap_err(),
        PlanError::InvalidLayerFileName { name } if name == "001foo.yaml"
    ));
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "001foo.d/001-bar.yaml");
    assert_eq!(
        Plan::load_dir(dir.path()).unwrap_err().to_string(),
        "invalid layer sub-directory name: \"001foo.d\" (must look like \"123-some-label.d\")"
    );
    let dir = tempfile::tempdir().unwrap();
    fs::create_dir_all(dir.path().join("001-foo.d/002-bar.d")).unwrap();
    assert_eq!(
        Plan::load_dir(dir.path()).unwrap_err(),
        PlanError::NestedLayerDir
    );
}

#[test]
fn duplicate_orders_and_labels_are_errors() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["001-bar.yaml", "001-foo.yaml"],
            "invalid layer filename: \"001-foo.yaml\" not unique (have \"001-bar.yaml\" already)",
        ),
        (
            &["001-foo.yaml", "002-foo.yaml"],
            "invalid layer filename: \"002-foo.yaml\" not unique (have \"001-foo.yaml\" already)",
        ),
        (
            &["002-dir.d/001-foo.yaml", "002-dir.d/001-bar.yaml"],
            "invalid layer filename: \"001-foo.yaml\" not unique (have \"001-bar.yaml\" already)",
        ),
        (
            &["002-dir.d/001-foo.yaml", "002-dir.d/002-foo.yaml"],
            "invalid layer filename: \"002-foo.yaml\" not unique (have \"001-foo.yaml\" already)",
        ),
        (
            &["001-foo.yaml", "001-foo.d/001-bar.yaml"],
            "invalid layer filename: \"001-foo.yaml\" not unique (have \"001-foo.yaml\" already)",
        ),
    ];
    for (names, want) in cases {
        let dir = tempfile::tempdir().unwrap();
        for name in *names {
            write(dir.path(), name);
        }
        assert_eq!(Plan::load_dir(dir.path()).unwrap_err().to_string(), *want);
    }
}

#[test]
fn parse_and_validation_errors_surface() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(
        dir.path().join("001-base.yaml"),
        "services:\n    a:\n        comand: x\n",
    )
    .unwrap();
    let err = Plan::load_dir(dir.path()).unwrap_err();
    assert!(
        err.to_string().starts_with(
            "cannot parse layer \"base\" section \"services\": yaml: unmarshal errors:\n  line 2: field comand not found in type plan.Service"
        ),
        "{err}"
    );
    fs::write(
        dir.path().join("001-base.yaml"),
        "services:\n    a:\n        override: merge\n",
    )
    .unwrap();
    assert_eq!(
        Plan::load_dir(dir.path()).unwrap_err().to_string(),
        "plan must define \"command\" for service \"a\""
    );
}
