//! `services`, `start`, `stop`, `restart`, `signal`, `replan` and `autostart` against a
//! daemon running `sleep` services.

use std::time::Duration;

use cobble_client::Method;

use crate::fixture::{Daemon, Test, act, raw, wait_for};

/// One service that autostarts, one that does not.
pub(crate) const TWO_SLEEPERS: &str = "\
services:
  srv1:
    override: replace
    command: sleep 300
    startup: enabled
  srv2:
    override: replace
    command: sleep 300
";

const ONLY_DISABLED: &str = "\
services:
  srv2:
    override: replace
    command: sleep 300
";

/// The `Current` column of one service.
pub(crate) fn current(daemon: &Daemon, service: &str) -> String {
    let output = Test::daemon(daemon)
        .args(&["services", service])
        .any_stdout()
        .run();
    let line = output.stdout.lines().nth(1).unwrap_or_default().to_string();
    line.split_whitespace()
        .nth(2)
        .unwrap_or_default()
        .to_string()
}

#[test]
fn services_table_before_anything_started() {
    let daemon = Daemon::hold(&[("001-base", TWO_SLEEPERS)]);
    Test::daemon(&daemon)
        .args(&["services"])
        .stdout(
            "Service  Startup   Current   Since\n\
             srv1     enabled   inactive  -\n\
             srv2     disabled  inactive  -\n",
        )
        .run();
    Test::daemon(&daemon)
        .args(&["services", "srv2"])
        .stdout("Service  Startup   Current   Since\nsrv2     disabled  inactive  -\n")
        .run();
    Test::daemon(&daemon)
        .args(&["services", "nope"])
        .stderr("No matching services.\n")
        .run();
}

#[test]
fn services_with_an_empty_plan() {
    let daemon = Daemon::hold(&[]);
    Test::daemon(&daemon)
        .args(&["services"])
        .stderr("Plan has no services.\n")
        .run();
}

#[test]
fn services_as_json() {
    let daemon = Daemon::hold(&[("001-base", TWO_SLEEPERS)]);
    Test::daemon(&daemon)
        .args(&["services", "--format", "json", "srv2"])
        .stdout(
            "{\"services\":{\"srv2\":{\"name\":\"srv2\",\"startup\":\"disabled\",\"current\":\"inactive\"}}}\n",
        )
        .run();
}

#[test]
fn start_stop_restart_a_sleep_service() {
    let daemon = Daemon::hold(&[("001-base", TWO_SLEEPERS)]);

    Test::daemon(&daemon).args(&["start", "srv2"]).run();
    Test::daemon(&daemon)
        .args(&["services"])
        .stdout_glob(
            "Service  Startup   Current   Since\n\
             srv1     enabled   inactive  -\n\
             srv2     disabled  active    today at *\n",
        )
        .run();
    Test::daemon(&daemon)
        .args(&["services", "--abs-time", "srv2"])
        .stdout_glob(
            "Service  Startup   Current  Since\nsrv2     disabled  active   ????-??-??T??:??:??Z\n",
        )
        .run();

    Test::daemon(&daemon).args(&["restart", "srv2"]).run();
    assert_eq!(current(&daemon, "srv2"), "active");

    Test::daemon(&daemon).args(&["stop", "srv2"]).run();
    Test::daemon(&daemon)
        .args(&["services", "srv2"])
        .stdout_glob(
            "Service  Startup   Current   Since\nsrv2     disabled  inactive  today at *\n",
        )
        .run();
}

#[test]
fn start_of_an_unknown_service_fails() {
    let daemon = Daemon::hold(&[("001-base", TWO_SLEEPERS)]);
    Test::daemon(&daemon)
        .args(&["start", "nope"])
        .stderr("error: cannot start services: service \"nope\" does not exist\n")
        .status(1)
        .run();
}

#[test]
fn start_failure_prints_the_change_error() {
    let layer = "services:\n  bad:\n    override: replace\n    command: /bin/false\n";
    let daemon = Daemon::hold(&[("001-base", layer)]);
    Test::daemon(&daemon)
        .args(&["start", "bad"])
        // Pebble's reason reads "cannot start service: exited quickly with code 1"; the
        // daemon's wording is its own business, the layout around it is the CLI's.
        .stderr_glob(
            "error: cannot perform the following tasks:\n\
             - Start service \"bad\" (*exited quickly with code 1*)\n",
        )
        .status(1)
        .run();
}

#[test]
fn signal_a_running_service() {
    let daemon = Daemon::hold(&[("001-base", TWO_SLEEPERS)]);
    Test::daemon(&daemon).args(&["start", "srv2"]).run();
    Test::daemon(&daemon)
        .args(&["signal", "TERM", "srv2"])
        .run();
    // `sleep` dies of SIGTERM; the default on-failure restart takes it through backoff.
    wait_for("srv2 to leave active", Duration::from_secs(20), || {
        current(&daemon, "srv2") != "active"
    });
}

#[test]
fn signal_a_service_that_is_not_running_fails() {
    let daemon = Daemon::hold(&[("001-base", TWO_SLEEPERS)]);
    Test::daemon(&daemon)
        .args(&["signal", "SIGHUP", "srv2"])
        .stderr_glob("error: *srv2*\n")
        .status(1)
        .run();
}

#[test]
fn replan_starts_enabled_services() {
    let daemon = Daemon::hold(&[("001-base", TWO_SLEEPERS)]);
    Test::daemon(&daemon).args(&["replan"]).run();
    assert_eq!(current(&daemon, "srv1"), "active");
    assert_eq!(current(&daemon, "srv2"), "inactive");
}

#[test]
fn autostart_starts_enabled_services() {
    let daemon = Daemon::hold(&[("001-base", TWO_SLEEPERS)]);
    Test::daemon(&daemon).args(&["autostart"]).run();
    assert_eq!(current(&daemon, "srv1"), "active");
}

#[test]
fn autostart_names_its_change_after_the_first_service_it_starts() {
    // As Pebble's do: the enabled services and those they require, in start order.
    let layer = "\
services:
  web:
    override: replace
    command: sleep 1000
    startup: enabled
    requires: [db]
    after: [db]
  db:
    override: replace
    command: sleep 1000
";
    let daemon = Daemon::hold(&[("001-base", layer)]);
    let change = act(&daemon, "autostart", &[]);
    assert_eq!(change.summary, "Autostart service \"db\" and 1 more");
    assert_eq!(current(&daemon, "db"), "active");
}

#[test]
fn autostart_without_default_services() {
    let daemon = Daemon::hold(&[("001-base", ONLY_DISABLED)]);
    Test::daemon(&daemon)
        .args(&["autostart"])
        .stderr("error: no default services\n")
        .status(1)
        .run();
}

#[test]
fn daemon_autostarts_without_hold() {
    let daemon = Daemon::start(&[("001-base", TWO_SLEEPERS)], &[]);
    wait_for("srv1 to be active", Duration::from_secs(10), || {
        current(&daemon, "srv1") == "active"
    });
}

#[test]
fn unknown_actions_are_rejected_in_pebbles_words() {
    let d = Daemon::hold(&[("001-base", TWO_SLEEPERS)]);
    let cases: &[(Method, &str, Option<&str>, &str)] = &[
        (
            Method::POST,
            "/v1/services",
            Some(r#"{"action":"frob","services":["srv1"]}"#),
            r#"invalid action "frob""#,
        ),
        // Pebble asks for names before it looks at the action.
        (
            Method::POST,
            "/v1/services",
            Some(r#"{"action":"frob","services":[]}"#),
            "must specify services for frob action",
        ),
        (
            Method::POST,
            "/v1/services",
            Some(r#"{"action":"stop","services":[]}"#),
            "must specify services for stop action",
        ),
        (
            Method::POST,
            "/v1/services",
            Some(r#"{"action":"replan","services":["srv1"]}"#),
            "replan accepts no service names",
        ),
        (
            Method::POST,
            "/v1/services",
            Some(r#"{"action":"autostart","services":["srv1"]}"#),
            "autostart accepts no service names",
        ),
        (
            Method::POST,
            "/v1/services",
            Some(r#"{"action":"start","services":["nope"]}"#),
            r#"cannot start services: service "nope" does not exist"#,
        ),
        // Actions are quoted as Go's %q quotes them.
        (
            Method::POST,
            "/v1/services",
            Some(r#"{"action":"a\"b\n","services":["srv1"]}"#),
            r#"invalid action "a\"b\n""#,
        ),
        (
            Method::POST,
            "/v1/checks",
            Some(r#"{"action":"frob","checks":["c"]}"#),
            r#"invalid action "frob""#,
        ),
        (
            Method::POST,
            "/v1/layers",
            Some(r#"{"action":"remove","label":"x","format":"yaml","layer":""}"#),
            r#"invalid action "remove""#,
        ),
        (
            Method::GET,
            "/v1/files?action=frob",
            None,
            r#"invalid action "frob""#,
        ),
        (
            Method::POST,
            "/v1/files",
            Some(r#"{"action":"frob"}"#),
            r#"invalid action "frob""#,
        ),
    ];
    for (method, path, body, want) in cases {
        let (status, text) = raw(&d, method.clone(), path, *body);
        assert_eq!(status, 400, "{path} {body:?}: {text}");
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(value["type"], "error", "{text}");
        assert_eq!(value["result"]["message"], *want, "{path} {body:?}");
    }

    let (_, text) = raw(&d, Method::GET, "/v1/changes?select=all", None);
    let value: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        value["result"],
        serde_json::json!([]),
        "a refused action made a change"
    );

    // An unknown action on a change is refused too.
    let id = act(&d, "start", &["srv2"]).id;
    let (status, text) = raw(
        &d,
        Method::POST,
        &format!("/v1/changes/{id}"),
        Some(r#"{"action":"frob"}"#),
    );
    assert_eq!(status, 400, "{text}");
    let value: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(value["result"]["message"], r#"invalid action "frob""#);
}
