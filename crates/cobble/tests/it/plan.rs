//! `add` and `plan` against a daemon.

use crate::fixture::{Daemon, Test};

#[test]
fn add_then_plan() {
    let daemon = Daemon::hold(&[]);
    let layer = daemon.scratch().join("layer.yaml");
    std::fs::write(
        &layer,
        "services:\n  srv1:\n    override: replace\n    command: sleep 300\n    startup: enabled\n",
    )
    .unwrap();
    let path = layer.display().to_string();

    Test::daemon(&daemon)
        .args(&["add", "base", &path])
        .stdout(&format!(
            "Layer \"base\" added successfully from \"{path}\"\n"
        ))
        .run();

    // yaml.v3 layout: four-space indents, fields in Go struct order.
    Test::daemon(&daemon)
        .args(&["plan"])
        .stdout(
            "services:\n    srv1:\n        startup: enabled\n        override: replace\n        command: sleep 300\n",
        )
        .run();

    // --combine merges into the layer with the same label.
    std::fs::write(
        &layer,
        "services:\n  srv1:\n    override: merge\n    command: sleep 301\n",
    )
    .unwrap();
    Test::daemon(&daemon)
        .args(&["add", "--combine", "base", &path])
        .stdout(&format!(
            "Layer \"base\" added successfully from \"{path}\"\n"
        ))
        .run();
    Test::daemon(&daemon)
        .args(&["plan"])
        .stdout_contains("command: sleep 301\n")
        .run();
}

#[test]
fn version_shows_the_server_and_json_has_only_pebbles_keys() {
    let daemon = Daemon::hold(&[]);
    let version = env!("CARGO_PKG_VERSION");
    Test::daemon(&daemon)
        .args(&["version"])
        .stdout(&format!(
            "client  v1.32.1\nserver  v1.32.1\ncobble  {version}\n"
        ))
        .run();
    Test::daemon(&daemon)
        .args(&["version", "--format", "json"])
        .stdout("{\"client\":\"v1.32.1\",\"server\":\"v1.32.1\"}\n")
        .run();
    Test::daemon(&daemon)
        .args(&["version", "--format", "yaml"])
        .stdout("client: v1.32.1\nserver: v1.32.1\n")
        .run();
    Test::daemon(&daemon)
        .args(&["version", "--client", "--format", "json"])
        .stdout("{\"client\":\"v1.32.1\"}\n")
        .run();
}

#[test]
fn daemon_exits_zero_on_sigterm() {
    let mut daemon = Daemon::hold(&[]);
    assert_eq!(daemon.stop(), Some(0), "daemon log:\n{}", daemon.log());
}
