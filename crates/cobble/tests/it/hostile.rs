//! Hostile input through the real daemon: bodies nested past Go's limit, layers nested past
//! yaml.v3's or whose aliases expand past what it expands. Each gets Pebble v1.32.1's status
//! and words, and the daemon goes on answering.

use cobble_client::Method;
use serde_json::{Value, json};

use crate::fixture::{Daemon, Test, raw};

/// The status and the result's message of a request.
fn answer(d: &Daemon, method: Method, path: &str, body: &str) -> (u16, String) {
    let (status, text) = raw(d, method, path, Some(body));
    let body: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    let message = body["result"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    (status, message)
}

/// The daemon still answers, and is the same process.
fn still_answers(d: &Daemon, pid: u32) {
    let (status, _) = raw(d, Method::GET, "/v1/health", None);
    assert_eq!(status, 200);
    assert_eq!(d.pid(), pid);
    assert!(crate::fixture::running(pid), "the daemon is gone");
}

#[test]
fn bodies_nested_past_gos_limit_are_refused_in_its_words() {
    let d = Daemon::hold(&[]);
    let pid = d.pid();
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let notice =
        format!(r#"{{"action": "add", "type": "custom", "key": "a.com/b", "data": {deep}}}"#);
    assert_eq!(
        answer(&d, Method::POST, "/v1/notices", &notice),
        (
            400,
            "cannot decode request body: invalid character '[' exceeded max depth".to_owned()
        )
    );
    let services = format!(r#"{{"action": "start", "services": {deep}}}"#);
    assert_eq!(
        answer(&d, Method::POST, "/v1/services", &services),
        (
            400,
            "cannot decode data from request body: invalid character '[' exceeded max depth"
                .to_owned()
        )
    );
    // Within the limit, the type speaks, as in Go.
    let within = format!(
        r#"{{"action": "start", "services": {}{}}}"#,
        "[".repeat(9_999),
        "]".repeat(9_999)
    );
    assert_eq!(
        answer(&d, Method::POST, "/v1/services", &within),
        (
            400,
            "cannot decode data from request body: json: cannot unmarshal array into Go struct field .services of type string".to_owned()
        )
    );
    still_answers(&d, pid);
}

/// Nine levels, each a flow sequence of nine aliases of the one before.
fn billion_laughs() -> String {
    let mut yaml = "      a: &a [\"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\"]\n".to_owned();
    for (prev, level) in ('a'..='h').zip('b'..='i') {
        let aliases = vec![format!("*{prev}"); 9].join(", ");
        yaml.push_str(&format!("      {level}: &{level} [{aliases}]\n"));
    }
    yaml
}

fn add_layer(d: &Daemon, yaml: &str) -> (u16, String) {
    let body = json!({"action": "add", "label": "hostile", "format": "yaml", "layer": yaml});
    answer(d, Method::POST, "/v1/layers", &body.to_string())
}

#[test]
fn layers_that_expand_or_nest_past_yaml_v3s_limits_are_refused_at_once_in_its_words() {
    let d = Daemon::hold(&[]);
    let pid = d.pid();
    let environment = format!(
        "services:\n  bomb:\n    override: replace\n    command: sleep 1\n    environment:\n{}",
        billion_laughs()
    );
    let errors: String = (5..=13)
        .map(|line| format!("\n  line {line}: cannot unmarshal !!seq into string"))
        .collect();
    assert_eq!(
        add_layer(&d, &environment),
        (
            400,
            format!(
                "cannot parse layer YAML: cannot parse layer \"hostile\" section \"services\": yaml: unmarshal errors:{errors}"
            )
        )
    );
    // Where cobble's own field would take every expansion, yaml.v3's rule refuses it.
    let own_field = environment.replace("environment:", "rlimits:");
    assert_eq!(
        add_layer(&d, &own_field),
        (
            400,
            "cannot parse layer YAML: cannot parse layer \"hostile\" section \"services\": yaml: document contains excessive aliasing".to_owned()
        )
    );
    let deep = format!("summary: {}", "[".repeat(100_000));
    assert_eq!(
        add_layer(&d, &deep),
        (
            400,
            "cannot parse layer YAML: cannot parse layer \"hostile\": yaml: exceeded max depth of 10000"
                .to_owned()
        )
    );
    still_answers(&d, pid);
    // Nothing of it reached the plan.
    let (_, plan) = raw(&d, Method::GET, "/v1/plan?format=yaml", None);
    assert!(!plan.contains("bomb"), "{plan}");
}

#[test]
fn a_layers_directory_layer_nested_past_yaml_v3s_limit_stops_the_start_in_its_words() {
    let test = Test::new();
    let layers = test.pebble_dir().join("layers");
    std::fs::create_dir_all(&layers).unwrap();
    std::fs::write(
        layers.join("001-hostile.yaml"),
        format!("{}x\n", "- ".repeat(10_001)),
    )
    .unwrap();
    test.args(&["run"])
        .stderr_contains("cannot parse layer \"hostile\": yaml: exceeded max depth of 10000")
        .status(1)
        .run();
}
