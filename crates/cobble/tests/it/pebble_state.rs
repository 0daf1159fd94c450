//! Taking over a `$PEBBLE` that Pebble wrote, and handing it back: cobble starts on state
//! files real Pebble releases wrote (fixtures made by running Pebble v1.32.1 and v1.12.0,
//! and one written by hand in the shape of v1.15 to v1.27, with warnings and top-level
//! identities), keeps what a client sees, and continues the IDs; what cobble then writes is
//! Pebble's shape again. Where a real Pebble v1.32.1 is installed (`COBBLE_TEST_PEBBLE`, or
//! `/opt/pebble/bin/pebble-v1.32.1`), it is started on what cobble wrote.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cobble_client::Method;
use jiff::Timestamp;
use serde_json::Value;

use crate::fixture::{Daemon, raw, wait_for};

fn fixture(name: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/state")
        .join(name);
    serde_json::from_str(&fs::read_to_string(&path).expect("fixture")).expect("fixture JSON")
}

/// Every time in `value`, moved so that the latest is now: the fixtures' notices and
/// changes would otherwise expire with age.
fn recent(mut value: Value) -> Value {
    fn times(v: &Value, out: &mut Vec<Timestamp>) {
        match v {
            Value::String(s) => out.extend(s.parse::<Timestamp>()),
            Value::Array(a) => a.iter().for_each(|v| times(v, out)),
            Value::Object(m) => m.values().for_each(|v| times(v, out)),
            _ => {}
        }
    }
    fn shift(v: &mut Value, by: jiff::SignedDuration) {
        match v {
            Value::String(s) => {
                if let Ok(t) = s.parse::<Timestamp>() {
                    *s = (t + by).to_string();
                }
            }
            Value::Array(a) => a.iter_mut().for_each(|v| shift(v, by)),
            Value::Object(m) => m.values_mut().for_each(|v| shift(v, by)),
            _ => {}
        }
    }
    let mut all = Vec::new();
    times(&value, &mut all);
    if let Some(latest) = all.into_iter().max() {
        let by = Timestamp::now().duration_since(latest) - jiff::SignedDuration::from_secs(5);
        shift(&mut value, by);
    }
    value
}

/// A daemon started on `$PEBBLE` holding `state` as `.pebble.state`.
fn daemon_on(state: &Value) -> Daemon {
    let bytes = serde_json::to_vec(state).unwrap();
    Daemon::start_with_files(
        &[(".pebble.state", &bytes)],
        &[("001-svc", LAYER)],
        &["--hold"],
    )
}

const LAYER: &str = "services:\n  svc:\n    override: replace\n    command: sleep 1000\n";

fn get(daemon: &Daemon, path: &str) -> Value {
    let (status, body) = raw(daemon, Method::GET, path, None);
    assert_eq!(status, 200, "{path}: {body}");
    serde_json::from_str::<Value>(&body).unwrap()["result"].take()
}

fn post(daemon: &Daemon, path: &str, body: &str) -> Value {
    let (status, answer) = raw(daemon, Method::POST, path, Some(body));
    assert!(status == 200 || status == 202, "{path}: {answer}");
    serde_json::from_str(&answer).unwrap()
}

fn ids(list: &Value) -> Vec<u64> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|v| v["id"].as_str().unwrap().parse().unwrap())
        .collect()
}

#[test]
fn cobble_takes_over_what_pebble_v1_32_wrote() {
    let state = recent(fixture("pebble-v1.32.1-stopped.json"));
    let mut d = daemon_on(&state);
    let changes = get(&d, "/v1/changes?select=all");
    assert_eq!(ids(&changes), [1, 2, 3, 4, 5]);
    let exec = changes
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["kind"] == "exec")
        .unwrap();
    assert_eq!(exec["status"], "Done");
    assert_eq!(exec["tasks"][0]["data"]["exit-code"], 0);
    let check = &changes[0];
    assert_eq!(check["status"], "Error");
    assert_eq!(
        check["tasks"][0]["log"][0]
            .as_str()
            .unwrap()
            .split_once(' ')
            .unwrap()
            .1,
        "ERROR exit status 1"
    );
    let for_svc = get(&d, "/v1/changes?select=all&for=svc");
    assert_eq!(ids(&for_svc), [2, 5]);
    let notices = get(&d, "/v1/notices?users=all&types=custom");
    assert_eq!(notices[0]["key"], "example.com/thing");
    assert_eq!(notices[0]["occurrences"], 2);
    assert_eq!(notices[0]["repeat-after"], "1h0m0s");
    assert_eq!(notices[0]["last-data"]["k"], "v2");
    let identities = get(&d, "/v1/identities");
    assert_eq!(identities["alice"]["access"], "admin");
    assert_eq!(identities["alice"]["local"]["user-id"], 1000);
    assert_eq!(identities["bob"]["basic"]["password"], "*****");
    // New IDs continue above the old ones.
    let change = post(
        &d,
        "/v1/services",
        r#"{"action":"start","services":["svc"]}"#,
    );
    assert_eq!(change["change"], "6");
    let notice = post(
        &d,
        "/v1/notices",
        r#"{"action":"add","type":"custom","key":"example.com/new"}"#,
    );
    assert!(
        notice["result"]["id"]
            .as_str()
            .unwrap()
            .parse::<u64>()
            .unwrap()
            > 6,
        "{notice}"
    );
    d.stop();
    // What cobble leaves is Pebble's shape, with what Pebble wrote that cobble does not use.
    let written: Value =
        serde_json::from_slice(&fs::read(d.pebble_dir().join(".pebble.state")).unwrap()).unwrap();
    // The start, and the stop of every service at shutdown.
    assert_eq!(written["last-change-id"], 7);
    assert_eq!(written["last-lane-id"], 2);
    assert_eq!(written["data"]["patch-level"], 2);
    assert!(written["data"]["start-of-operation-time"].is_string());
    assert_eq!(
        written["data"]["identities"]["alice"]["local"]["user-id"],
        1000
    );
    assert_eq!(written["tasks"]["2"]["lanes"], serde_json::json!([1]));
    assert_eq!(
        written["tasks"]["6"]["data"]["service-request"]["Name"],
        "svc"
    );
    assert_eq!(written["changes"]["6"]["data"]["service-names"][0], "svc");
}

#[test]
fn cobble_takes_over_a_killed_pebble_and_closes_what_it_left_running() {
    let state = recent(fixture("pebble-v1.32.1-killed.json"));
    let d = daemon_on(&state);
    let changes = get(&d, "/v1/changes?select=all");
    let recover = changes
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "3")
        .unwrap();
    assert_eq!(recover["kind"], "recover-check");
    assert_eq!(recover["ready"], true, "{recover}");
    assert_eq!(get(&d, "/v1/identities")["certy"]["access"], "metrics");
    assert_eq!(
        post(
            &d,
            "/v1/services",
            r#"{"action":"start","services":["svc"]}"#
        )["change"],
        "4"
    );
}

#[test]
fn cobble_takes_over_older_pebble_releases() {
    let d = daemon_on(&recent(fixture("pebble-v1.12.0-stopped.json")));
    assert_eq!(ids(&get(&d, "/v1/changes?select=all")), [1, 2]);
    assert_eq!(
        get(&d, "/v1/notices?users=all&types=custom")[0]["key"],
        "example.com/old"
    );
    drop(d);
    let d = daemon_on(&recent(fixture("pebble-v1.15-shape.json")));
    let warnings = get(&d, "/v1/notices?users=all&types=warning");
    assert_eq!(warnings[0]["key"], "disk almost full");
    assert_eq!(get(&d, "/v1/identities")["ops"]["access"], "admin");
    assert_eq!(ids(&get(&d, "/v1/changes?select=all")), [7, 8]);
    assert_eq!(
        post(
            &d,
            "/v1/services",
            r#"{"action":"start","services":["svc"]}"#
        )["change"],
        "9"
    );
}

#[test]
fn a_state_file_cobble_cannot_read_stops_it_with_the_file_named() {
    // Nested far past any depth a state file has: refused at serde_json's 128 levels, with
    // exit status 1 as Pebble's refusal past Go's 10 000, never a crash.
    let deep = format!(
        "{{\"data\":{}{}}}",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    for (content, wanted) in [
        (
            &b"{\"data\":{\"patch-level\":9}}"[..],
            "newer Pebble (patch level 9",
        ),
        (b"{not json", "it cannot be parsed"),
        (
            deep.as_bytes(),
            "it cannot be parsed (recursion limit exceeded",
        ),
    ] {
        let root = tempfile::tempdir().unwrap();
        let pebble = root.path().join("pebble");
        fs::create_dir_all(pebble.join("layers")).unwrap();
        let path = pebble.join(".pebble.state");
        fs::write(&path, content).unwrap();
        let output = Command::new(env!("CARGO_BIN_EXE_cobble"))
            .args(["run", "--hold"])
            .env("PEBBLE", &pebble)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains(wanted), "{stderr}");
        assert!(stderr.contains(&path.display().to_string()), "{stderr}");
        assert_eq!(fs::read(&path).unwrap(), content, "the file is left alone");
    }
}

/// Real Pebble v1.32.1, when this machine has it.
fn pebble_binary() -> Option<PathBuf> {
    let path = std::env::var_os("COBBLE_TEST_PEBBLE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/opt/pebble/bin/pebble-v1.32.1"));
    path.exists().then_some(path)
}

#[test]
fn pebble_v1_32_takes_back_what_cobble_wrote() {
    let Some(pebble) = pebble_binary() else {
        eprintln!(
            "skipped pebble_v1_32_takes_back_what_cobble_wrote: no Pebble v1.32.1 binary \
             (set COBBLE_TEST_PEBBLE)"
        );
        return;
    };
    let mut d = Daemon::hold(&[("001-svc", LAYER)]);
    post(
        &d,
        "/v1/services",
        r#"{"action":"start","services":["svc"]}"#,
    );
    let stop = post(
        &d,
        "/v1/services",
        r#"{"action":"stop","services":["svc"]}"#,
    );
    let stop = stop["change"].as_str().unwrap().to_owned();
    get(&d, &format!("/v1/changes/{stop}/wait?timeout=20s"));
    post(
        &d,
        "/v1/notices",
        r#"{"action":"add","type":"custom","key":"example.com/back"}"#,
    );
    post(
        &d,
        "/v1/identities",
        r#"{"action":"add","identities":{"carol":{"access":"read","local":{"user-id":4321}}}}"#,
    );
    d.stop();
    let dir = d.pebble_dir();
    let mut child = Command::new(&pebble)
        .args(["run", "--hold"])
        .env("PEBBLE", &dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let cli = |args: &[&str]| {
        Command::new(&pebble)
            .args(args)
            .env("PEBBLE", &dir)
            .output()
            .unwrap()
    };
    let started = Instant::now();
    wait_for("Pebble's socket", Duration::from_secs(20), || {
        cli(&["changes"]).status.success() || started.elapsed() > Duration::from_secs(19)
    });
    let changes = String::from_utf8_lossy(&cli(&["changes"]).stdout).into_owned();
    let notices = String::from_utf8_lossy(&cli(&["notices", "--users", "all"]).stdout).into_owned();
    let identities = String::from_utf8_lossy(&cli(&["identities"]).stdout).into_owned();
    let new = cli(&["notify", "example.com/after"]);
    let _ = child.kill();
    let output = child.wait_with_output().unwrap();
    let log = String::from_utf8_lossy(&output.stderr);
    assert!(
        changes.contains(&format!("{stop} ")) && changes.contains("Stop service \"svc\""),
        "{changes}\n{log}"
    );
    assert!(notices.contains("example.com/back"), "{notices}\n{log}");
    assert!(identities.contains("carol"), "{identities}\n{log}");
    let said = String::from_utf8_lossy(&new.stdout);
    let id: u64 = said
        .trim()
        .rsplit(' ')
        .next()
        .unwrap()
        .parse()
        .expect(&said);
    assert!(id >= 4, "notice IDs keep increasing: {said}");
}
