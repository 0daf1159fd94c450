//! Request bodies byte for byte as Pebble's Go client (`github.com/canonical/pebble/client`)
//! writes them, sent to a real daemon.
//!
//! That client marshals a nil slice as `null` (its list fields have no `omitempty`), sends
//! `user-id`/`group-id` as `null` when unset, escapes `<`, `>` and `&` as `\u003c`..., and
//! ends the bodies it writes with `json.Encoder` with a newline. Go's own decoder reads
//! `null` as the zero value, so `pebble replan` sends `"services":null` and expects it to mean
//! "no services".

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use cobble_client::Method;
use serde_json::Value;

use crate::fixture::{Daemon, client, rt, service, wait_for};

const LONG: Duration = Duration::from_secs(20);

const LAYER: &str = "\
services:
  svc:
    override: replace
    command: sleep 1000
    startup: enabled
checks:
  chk:
    override: replace
    startup: disabled
    exec:
      command: 'true'
";

/// POSTs `body` as `application/json` and returns the status and the decoded envelope.
fn post(daemon: &Daemon, path: &str, body: &str) -> (u16, Value) {
    let response = rt()
        .block_on(client(daemon).raw_request(Method::POST, path, Some(body.as_bytes().to_vec())))
        .expect("request");
    let envelope: Value = serde_json::from_slice(&response.body).expect("JSON envelope");
    (response.status_code, envelope)
}

/// The `result.message` of an error envelope.
fn message(envelope: &Value) -> &str {
    envelope["result"]["message"].as_str().unwrap_or_default()
}

/// POSTs a service action and waits (bounded) for its change to be ready.
fn service_action(daemon: &Daemon, body: &str) {
    let (status, envelope) = post(daemon, "/v1/services", body);
    assert_eq!(status, 202, "{body}: {envelope}");
    let id = envelope["change"].as_str().expect("change ID").to_owned();
    let change = rt()
        .block_on(client(daemon).wait_change(&id, Some(LONG)))
        .expect("wait");
    assert_eq!(change.status, "Done", "{body}: {change:?}");
}

fn current(daemon: &Daemon) -> String {
    service(daemon, "svc").current
}

/// Regression: `pebble replan` and `pebble autostart` failed with "invalid type: null,
/// expected a sequence".
#[test]
fn service_actions_with_null_services() {
    let daemon = Daemon::hold(&[("001-gostyle", LAYER)]);

    service_action(&daemon, r#"{"action":"autostart","services":null}"#);
    assert_eq!(current(&daemon), "active");

    service_action(&daemon, r#"{"action":"stop","services":["svc"]}"#);
    assert_eq!(current(&daemon), "inactive");

    service_action(&daemon, r#"{"action":"replan","services":null}"#);
    wait_for("svc to be active again", LONG, || {
        current(&daemon) == "active"
    });

    // A start without names is refused for what it asks, not for how it is written.
    let (status, envelope) = post(
        &daemon,
        "/v1/services",
        r#"{"action":"start","services":null}"#,
    );
    assert_eq!(status, 400);
    assert_eq!(message(&envelope), "must specify services for start action");
}

#[test]
fn checks_with_null_names() {
    let daemon = Daemon::hold(&[("001-gostyle", LAYER)]);
    let (status, envelope) = post(&daemon, "/v1/checks", r#"{"action":"start","checks":null}"#);
    assert_eq!(status, 400);
    assert_eq!(message(&envelope), "must specify checks for start action");

    let (status, envelope) = post(
        &daemon,
        "/v1/checks",
        r#"{"action":"start","checks":["chk"]}"#,
    );
    assert_eq!(status, 200, "{envelope}");
    assert_eq!(envelope["result"]["changed"], serde_json::json!(["chk"]));

    let (status, envelope) = post(&daemon, "/v1/checks/refresh", r#"{"name":"chk"}"#);
    assert_eq!(status, 200, "{envelope}");
}

#[test]
fn signals_with_null_services() {
    let daemon = Daemon::start(&[("001-gostyle", LAYER)], &[]);
    wait_for("svc to start", LONG, || current(&daemon) == "active");

    let (status, envelope) = post(
        &daemon,
        "/v1/signals",
        "{\"signal\":\"SIGHUP\",\"services\":null}\n",
    );
    assert_eq!(status, 400);
    assert_eq!(message(&envelope), "must specify one or more services");

    let (status, envelope) = post(
        &daemon,
        "/v1/signals",
        "{\"signal\":\"SIGCONT\",\"services\":[\"svc\"]}\n",
    );
    assert_eq!(status, 200, "{envelope}");
}

#[test]
fn add_layer_and_abort_as_go_writes_them() {
    let daemon = Daemon::hold(&[]);
    let body = "{\"action\":\"add\",\"combine\":false,\"inner\":false,\"label\":\"go\",\
                \"format\":\"yaml\",\"layer\":\"services:\\n  svc:\\n    override: replace\\n    \
                command: sh -c \\\"sleep 1000 \\u0026\\u0026 true\\\"\\n\"}\n";
    let (status, envelope) = post(&daemon, "/v1/layers", body);
    assert_eq!(status, 200, "{envelope}");
    let plan = rt().block_on(client(&daemon).plan_yaml()).expect("plan");
    assert!(plan.contains("sleep 1000 && true"), "{plan}");

    service_action(&daemon, r#"{"action":"start","services":["svc"]}"#);
    let (status, envelope) = post(&daemon, "/v1/changes/1", "{\"action\":\"abort\"}\n");
    assert_eq!(status, 400);
    assert_eq!(
        message(&envelope),
        "cannot abort change 1 with nothing pending"
    );
}

#[test]
fn make_dirs_and_remove_as_go_writes_them() {
    let daemon = Daemon::hold(&[]);
    let dir = daemon.scratch().join("made/by/go");
    let path = dir.display();

    let body = format!(
        "{{\"action\":\"make-dirs\",\"dirs\":[{{\"path\":\"{path}\",\"make-parents\":true,\
         \"permissions\":\"\",\"user-id\":null,\"user\":\"\",\"group-id\":null,\"group\":\"\"}}]}}\n"
    );
    let (status, envelope) = post(&daemon, "/v1/files", &body);
    assert_eq!(status, 200, "{envelope}");
    assert_eq!(
        envelope["result"],
        serde_json::json!([{ "path": path.to_string() }])
    );
    assert!(dir.is_dir());

    let body = format!(
        "{{\"action\":\"remove\",\"paths\":[{{\"path\":\"{path}\",\"recursive\":false}}]}}\n"
    );
    let (status, envelope) = post(&daemon, "/v1/files", &body);
    assert_eq!(status, 200, "{envelope}");
    assert!(!dir.exists());

    for body in [
        "{\"action\":\"make-dirs\",\"dirs\":null}\n",
        "{\"action\":\"remove\",\"paths\":null}\n",
    ] {
        let (status, envelope) = post(&daemon, "/v1/files", body);
        assert_eq!(status, 200, "{body}: {envelope}");
        assert_eq!(envelope["result"], serde_json::json!([]), "{body}");
    }
}

/// Sends a multipart push whose `request` part is `metadata` and whose one file part holds
/// `content`, and returns the status and the decoded envelope.
fn push(daemon: &Daemon, metadata: &str, filename: &str, content: &str) -> (u16, Value) {
    let boundary = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789ab";
    let body = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"request\"\r\n\
         Content-Type: application/json\r\n\r\n{metadata}\r\n--{boundary}\r\n\
         Content-Disposition: form-data; name=\"files\"; filename=\"{filename}\"\r\n\
         Content-Type: application/octet-stream\r\n\r\n{content}\r\n--{boundary}--\r\n"
    );
    let mut stream = UnixStream::connect(daemon.pebble_dir().join(".pebble.socket")).unwrap();
    write!(
        stream,
        "POST /v1/files HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\
         Content-Type: multipart/form-data; boundary={boundary}\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let status = response[9..12].parse().expect("status code");
    let (_, json) = response.split_once("\r\n\r\n").expect("response head");
    (status, serde_json::from_str(json).expect("JSON envelope"))
}

#[test]
fn push_as_go_writes_it() {
    let daemon = Daemon::hold(&[]);
    let target = daemon.scratch().join("pushed/by/go.txt");
    let path = target.display();

    let metadata = format!(
        "{{\"action\":\"write\",\"files\":[{{\"path\":\"{path}\",\"make-dirs\":true,\
         \"permissions\":\"\",\"user-id\":null,\"user\":\"\",\"group-id\":null,\"group\":\"\"}}]}}\n"
    );
    let (status, envelope) = push(&daemon, &metadata, &path.to_string(), "from go");
    assert_eq!(status, 200, "{envelope}");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "from go");

    let (status, envelope) = push(
        &daemon,
        "{\"action\":\"write\",\"files\":null}\n",
        &path.to_string(),
        "x",
    );
    assert_eq!(status, 400);
    assert_eq!(message(&envelope), "must specify one or more files");
}
