//! `--format json` and `--format yaml`, and the text forms Pebble prints as YAML, byte for
//! byte as Pebble v1.32.1 printed them for the same state (the fixtures were typed from its
//! output side by side with cobble's; `*` stands for times and counts that vary).

use crate::fixture::{Daemon, Test, act, wait_for};
use std::time::Duration;

/// A time as Go marshals it: RFC 3339 with a fraction, in UTC (the tests run with `TZ=UTC`).
const T: &str = "????-??-??T??:??:??.*Z";

const LAYER: &str = "\
services:
  srv:
    override: replace
    command: sleep 1000
  never:
    override: replace
    command: sleep 1000
checks:
  chk:
    override: replace
    period: 1h
    threshold: 1
    exec:
      command: sh -c 'echo oops >&2; exit 3'
  idle:
    override: replace
    startup: disabled
    level: alive
    tcp:
      port: 1
";

fn daemon() -> Daemon {
    Daemon::hold(&[("001-base", LAYER)])
}

#[test]
fn tasks_and_changes_print_the_go_clients_change() {
    let d = daemon();
    // The check's perform-check change is 1; the start is 2.
    act(&d, "start", &["srv"]);
    let start_yaml = format!(
        "id: \"2\"\n\
         kind: start\n\
         summary: Start service \"srv\"\n\
         status: Done\n\
         tasks:\n    \
             - id: \"2\"\n      \
               kind: start\n      \
               summary: Start service \"srv\"\n      \
               status: Done\n      \
               progress:\n        \
                 label: \"\"\n        \
                 done: 1\n        \
                 total: 1\n      \
               spawn-time: {T}\n      \
               ready-time: {T}\n\
         ready: true\n\
         spawn-time: {T}\n\
         ready-time: {T}\n"
    );
    Test::daemon(&d)
        .args(&["tasks", "2", "--format", "yaml"])
        .stdout_glob(&start_yaml)
        .run();
    let start_json = format!(
        r#"{{"id":"2","kind":"start","summary":"Start service \"srv\"","status":"Done","tasks":[{{"id":"2","kind":"start","summary":"Start service \"srv\"","status":"Done","progress":{{"label":"","done":1,"total":1}},"spawn-time":"{T}","ready-time":"{T}"}}],"ready":true,"spawn-time":"{T}","ready-time":"{T}"}}"#
    ) + "\n";
    Test::daemon(&d)
        .args(&["tasks", "2", "--format=json"])
        .stdout_glob(&start_json)
        .run();
    // A change not ready has no ready-time; a task under way is done 1 of 1.
    let perform = format!(
        r#"{{"changes":[{{"id":"1","kind":"perform-check","summary":"Perform exec check \"chk\"","status":"Doing","tasks":[{{"id":"1","kind":"perform-check","summary":"Perform exec check \"chk\"","status":"Doing","progress":{{"label":"","done":1,"total":1}},"spawn-time":"{T}"}}],"ready":false,"spawn-time":"{T}"}},"#
    );
    Test::daemon(&d)
        .args(&["changes", "--format", "json"])
        .stdout_glob(&format!("{perform}*\n"))
        .run();
    // An exec task's data is raw JSON: itself in JSON, and its bytes in YAML.
    Test::daemon(&d).args(&["exec", "true"]).run();
    Test::daemon(&d)
        .args(&["tasks", "--last=exec", "--format", "json"])
        .stdout_glob(
            r#"{"id":"3","kind":"exec",*"data":{"exit-code":0}}],"ready":true,*}
"#,
        )
        .run();
    Test::daemon(&d)
        .args(&["tasks", "--last=exec", "--format", "yaml"])
        .stdout_contains("\n      data:\n        exit-code:\n            - 48\nready: true\n")
        .run();
}

#[test]
fn no_changes_is_an_empty_list_or_a_note_on_stderr() {
    let d = Daemon::hold(&[]);
    Test::daemon(&d)
        .args(&["changes", "--format", "json"])
        .stdout("{\"changes\":[]}\n")
        .run();
    Test::daemon(&d)
        .args(&["changes", "--format", "yaml"])
        .stdout("changes: []\n")
        .run();
    Test::daemon(&d)
        .args(&["changes"])
        .stderr("no changes found\n")
        .run();
}

/// A check that failed into recovery: the recover-check change has logged nothing yet, so
/// `check` and `checks` show the failure from the change before it (`prev-change-id`).
#[test]
fn checks_and_check_show_the_previous_changes_log_while_recovering() {
    let d = daemon();
    Test::daemon(&d)
        .args(&["check", "--refresh", "chk", "--format", "json"])
        .stdout_glob(
            r#"{"name":"chk","startup":"enabled","status":"down","successes":0,"failures":1,"threshold":1,"change-id":"2","prev-change-id":"1","error":"exit status 3; oops","logs":"????-??-??T??:??:??Z ERROR exit status 3; oops\n"}
"#,
        )
        .run();
    Test::daemon(&d)
        .args(&["check", "chk"])
        .stdout_glob(
            "name: chk\nstartup: enabled\nstatus: down\nsuccesses: 0\nfailures: 1\nthreshold: 1\n\
             change-id: \"2\"\nprev-change-id: \"1\"\n\
             logs: |\n    ????-??-??T??:??:??Z ERROR exit status 3; oops\n",
        )
        .run();
    Test::daemon(&d)
        .args(&["checks"])
        .stdout(
            "Check  Level  Startup   Status    Successes  Failures  Change\n\
             chk    -      enabled   down      0          1/1       2 (exit status 3; oops)\n\
             idle   alive  disabled  inactive  -          -         -\n",
        )
        .run();
    Test::daemon(&d)
        .args(&["checks", "--format", "yaml"])
        .stdout(
            "checks:\n    chk:\n        name: chk\n        startup: enabled\n        status: down\n        \
             successes: 0\n        failures: 1\n        threshold: 1\n        change-id: \"2\"\n        \
             prev-change-id: \"1\"\n    idle:\n        name: idle\n        level: alive\n        \
             startup: disabled\n        status: inactive\n        successes: 0\n        \
             failures: 0\n        threshold: 3\n",
        )
        .run();
    Test::daemon(&d)
        .args(&["checks", "--format", "json", "idle"])
        .stdout(
            "{\"checks\":{\"idle\":{\"name\":\"idle\",\"level\":\"alive\",\"startup\":\"disabled\",\"status\":\"inactive\",\"successes\":0,\"failures\":0,\"threshold\":3}}}\n",
        )
        .run();
    // The API answers prev-change-id itself.
    let (_, body) =
        crate::fixture::raw(&d, cobble_client::Method::GET, "/v1/checks?names=chk", None);
    assert!(
        body.contains(r#""change-id":"2","prev-change-id":"1"}"#),
        "{body}"
    );
    // JSON and YAML say "unhealthy" in the output and exit 0; only text exits 1.
    Test::daemon(&d)
        .args(&["health", "--format", "yaml"])
        .stdout("healthy: false\n")
        .run();
    Test::daemon(&d)
        .args(&["health", "--format", "json"])
        .stdout("{\"healthy\":false}\n")
        .run();
    Test::daemon(&d)
        .args(&["health"])
        .stdout("unhealthy\n")
        .status(1)
        .run();
}

#[test]
fn services_print_a_map_by_name() {
    let d = daemon();
    act(&d, "start", &["srv"]);
    Test::daemon(&d)
        .args(&["services", "--format", "yaml"])
        .stdout_glob(&format!(
            "services:\n    never:\n        name: never\n        startup: disabled\n        current: inactive\n    \
             srv:\n        name: srv\n        startup: disabled\n        current: active\n        current-since: {T}\n"
        ))
        .run();
}

#[test]
fn notices_and_notice_print_the_go_clients_notice() {
    let d = Daemon::hold(&[]);
    let config = tempfile::tempdir().unwrap();
    let xdg = config.path().to_str().unwrap();
    Test::daemon(&d)
        .env("XDG_CONFIG_HOME", xdg)
        .args(&["notify", "--repeat-after=1h", "example.com/a", "k=v<&>"])
        .any_stdout()
        .run();
    let uid = nix::unistd::getuid().as_raw();
    let notice = format!(
        r#"{{"id":"1","user-id":{uid},"type":"custom","key":"example.com/a","first-occurred":"{T}","last-occurred":"{T}","last-repeated":"{T}","occurrences":1,"last-data":{{"k":"v\u003c\u0026\u003e"}},"repeat-after":"1h0m0s","expire-after":"168h0m0s"}}"#
    );
    Test::daemon(&d)
        .env("XDG_CONFIG_HOME", xdg)
        .args(&["notice", "1", "--format", "json"])
        .stdout_glob(&format!("{notice}\n"))
        .run();
    Test::daemon(&d)
        .env("XDG_CONFIG_HOME", xdg)
        .args(&["notices", "--format", "json"])
        .stdout_glob(&format!("{{\"notices\":[{notice}]}}\n"))
        .run();
    Test::daemon(&d)
        .env("XDG_CONFIG_HOME", xdg)
        .args(&["notice", "custom", "example.com/a"])
        .stdout_glob(&format!(
            "id: \"1\"\nuser-id: {uid}\ntype: custom\nkey: example.com/a\nfirst-occurred: {T}\n\
             last-occurred: {T}\nlast-repeated: {T}\noccurrences: 1\nlast-data:\n    k: v<&>\n\
             repeat-after: 1h0m0s\nexpire-after: 168h0m0s\n"
        ))
        .run();
    // Listing them (in any format) is what `okay` acknowledges.
    Test::daemon(&d)
        .env("XDG_CONFIG_HOME", xdg)
        .args(&["okay"])
        .run();
    Test::daemon(&d)
        .env("XDG_CONFIG_HOME", xdg)
        .args(&["notices", "--format", "yaml"])
        .stdout("notices: []\n")
        .run();
}

#[test]
fn identities_print_the_go_clients_identity() {
    let d = Daemon::hold(&[]);
    let file = d.scratch().join("ids.yaml");
    std::fs::write(
        &file,
        "identities:\n  bob:\n    access: read\n    local:\n      user-id: 1000\n  \
         web:\n    access: metrics\n    basic:\n      password: \"$6$saltsalt$JcVDtuB6d1BHhCd5RPBh8g8xX/1CbY8EU2PN0MTaj2/Mypw4P./C6dN4j0HALhzBDTocyW1Jm.gYaTPjFGCV40\"\n",
    )
    .unwrap();
    Test::daemon(&d)
        .args(&["add-identities", "--from", file.to_str().unwrap()])
        .stdout("Added 2 new identities.\n")
        .run();
    Test::daemon(&d)
        .args(&["identity", "bob"])
        .stdout("access: read\nlocal:\n    user-id: 1000\n")
        .run();
    Test::daemon(&d)
        .args(&["identity", "web", "--format", "yaml"])
        .stdout("access: metrics\nbasic:\n    password: '*****'\n")
        .run();
    Test::daemon(&d)
        .args(&["identity", "bob", "--format", "json"])
        .stdout("{\"access\":\"read\",\"local\":{\"user-id\":1000}}\n")
        .run();
    Test::daemon(&d)
        .args(&["identities", "--format", "json"])
        .stdout(
            "{\"identities\":{\"bob\":{\"access\":\"read\",\"local\":{\"user-id\":1000}},\"web\":{\"access\":\"metrics\",\"basic\":{\"password\":\"*****\"}}}}\n",
        )
        .run();
}

#[test]
fn ls_prints_pebbles_file_entries() {
    let d = Daemon::hold(&[]);
    let dir = d.scratch().join("files");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("a.txt"), "hello").unwrap();
    std::fs::create_dir(dir.join("sub")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.join("a.txt"), std::fs::Permissions::from_mode(0o640)).unwrap();
    std::fs::set_permissions(dir.join("sub"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let (uid, gid) = (
        nix::unistd::getuid().as_raw(),
        nix::unistd::getgid().as_raw(),
    );
    let user = nix::unistd::User::from_uid(uid.into())
        .unwrap()
        .unwrap()
        .name;
    let group = nix::unistd::Group::from_gid(gid.into())
        .unwrap()
        .unwrap()
        .name;
    let path = dir.display().to_string();
    let time = "????-??-??T??:??:??Z";
    Test::daemon(&d)
        .args(&["ls", &path, "--format", "json"])
        .stdout_glob(&format!(
            "{{\"files\":[{{\"path\":\"{path}/a.txt\",\"name\":\"a.txt\",\"type\":\"file\",\"size\":5,\"permissions\":\"640\",\"last-modified\":\"{time}\",\"user-id\":{uid},\"user\":\"{user}\",\"group-id\":{gid},\"group\":\"{group}\"}},\
             {{\"path\":\"{path}/sub\",\"name\":\"sub\",\"type\":\"directory\",\"permissions\":\"755\",\"last-modified\":\"{time}\",\"user-id\":{uid},\"user\":\"{user}\",\"group-id\":{gid},\"group\":\"{group}\"}}]}}\n"
        ))
        .run();
    Test::daemon(&d)
        .args(&["ls", &format!("{path}/*.txt"), "--format", "yaml"])
        .stdout_glob(&format!(
            "files:\n    - path: {path}/a.txt\n      name: a.txt\n      type: file\n      size: 5\n      \
             permissions: \"640\"\n      last-modified: \"{time}\"\n      user-id: {uid}\n      \
             user: {user}\n      group-id: {gid}\n      group: {group}\n"
        ))
        .run();
}

#[test]
fn a_format_pebble_does_not_offer_is_refused_in_its_words() {
    Test::new()
        .args(&["tasks", "1", "--format", "xml"])
        .stderr("error: Invalid value `xml' for option `--format'. Allowed values are: text, json or yaml\n")
        .status(1)
        .run();
}

/// Waits until `text` is in what the daemon answers for `path`.
fn wait_body(d: &Daemon, path: &str, text: &str) {
    wait_for(
        &format!("{path} to hold {text}"),
        Duration::from_secs(15),
        || {
            crate::fixture::raw(d, cobble_client::Method::GET, path, None)
                .1
                .contains(text)
        },
    );
}

/// A warning the daemon records (processes a killed daemon left running), listed by
/// `warnings`, announced after every other command until listed, acknowledged by `okay`.
#[test]
fn warnings_are_listed_hinted_at_and_acknowledged() {
    let config = tempfile::tempdir().unwrap();
    let xdg = config.path().to_str().unwrap();
    let mut d = Daemon::hold(&[("001-base", LAYER)]);
    Test::daemon(&d)
        .env("XDG_CONFIG_HOME", xdg)
        .args(&["warnings"])
        .stderr("No warnings.\n")
        .run();
    Test::daemon(&d)
        .env("XDG_CONFIG_HOME", xdg)
        .args(&["warnings", "--format", "json"])
        .stdout("{\"warnings\":[]}\n")
        .run();
    Test::daemon(&d)
        .env("XDG_CONFIG_HOME", xdg)
        .args(&["okay", "--warnings"])
        .stderr("error: no warnings have been listed; try 'cobble warnings'\n")
        .status(1)
        .run();
    Test::daemon(&d)
        .env("XDG_CONFIG_HOME", xdg)
        .args(&["okay"])
        .stderr("error: no notices or warnings have been listed; try 'cobble notices' or 'cobble warnings'\n")
        .status(1)
        .run();
    // No warning yet: answers carry no latest-warning.
    let (_, body) = crate::fixture::raw(&d, cobble_client::Method::GET, "/v1/services", None);
    assert!(!body.contains("latest-warning"), "{body}");

    act(&d, "start", &["srv"]);
    d.kill();
    d.restart(&["--hold"]);
    wait_body(
        &d,
        "/v1/notices?types=warning",
        "stopped leftover processes of srv",
    );

    // Every answer but an error now says when the latest warning was.
    let (_, body) = crate::fixture::raw(&d, cobble_client::Method::GET, "/v1/services", None);
    assert!(body.contains(r#","latest-warning":"20"#), "{body}");
    let (_, body) = crate::fixture::raw(&d, cobble_client::Method::GET, "/v1/changes/999", None);
    assert!(!body.contains("latest-warning"), "{body}");

    let hint = "WARNING: There are new warnings. See 'cobble warnings'.\n";
    Test::daemon(&d)
        .env("XDG_CONFIG_HOME", xdg)
        .args(&["services"])
        .any_stdout()
        .stderr(hint)
        .run();
    let message = "stopped leftover processes of srv, left running by the previous daemon";
    Test::daemon(&d)
        .env("XDG_CONFIG_HOME", xdg)
        .args(&["warnings", "--abs-time"])
        .stdout_glob(&format!(
            "last-occurrence:  ????-??-??T??:??:??Z\nwarning: |\n  {message}\n"
        ))
        .run();
    // Listed: no more hint.
    Test::daemon(&d)
        .env("XDG_CONFIG_HOME", xdg)
        .args(&["services"])
        .any_stdout()
        .run();
    Test::daemon(&d)
        .env("XDG_CONFIG_HOME", xdg)
        .args(&["warnings", "--verbose", "--abs-time", "--unicode=never"])
        .stdout_glob(&format!(
            "first-occurrence:  ????-??-??T??:??:??Z\nlast-occurrence:   ????-??-??T??:??:??Z\n\
             last-repeated:     ????-??-??T??:??:??Z\nrepeats-after:     1d00h\n\
             expires-after:     7d00h\nwarning: |\n  {message}\n"
        ))
        .run();
    Test::daemon(&d)
        .env("XDG_CONFIG_HOME", xdg)
        .args(&["warnings", "--format", "yaml"])
        .stdout_glob(&format!(
            "warnings:\n    - id: \"*\"\n      user-id: null\n      type: warning\n      key: {message}\n      \
             first-occurred: {T}\n      last-occurred: {T}\n      last-repeated: {T}\n      \
             occurrences: 1\n      repeat-after: 24h0m0s\n      expire-after: 168h0m0s\n"
        ))
        .run();
    Test::daemon(&d)
        .env("XDG_CONFIG_HOME", xdg)
        .args(&["okay", "--warnings"])
        .run();
    Test::daemon(&d)
        .env("XDG_CONFIG_HOME", xdg)
        .args(&["warnings"])
        .stderr("No further warnings.\n")
        .run();
    Test::daemon(&d)
        .env("XDG_CONFIG_HOME", xdg)
        .args(&["warnings", "--all", "--abs-time"])
        .stdout_glob("last-occurrence:  *\nwarning: |\n  *\n")
        .run();
}
