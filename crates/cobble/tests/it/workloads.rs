//! Layers Pebble v1.32 accepts beyond services, checks and log targets, against a real
//! daemon: the `workloads:` section and a service's `workload:`, the `pairing:` section and
//! `POST /v1/pairing`, and the values Pebble takes and only fails on later. Expected texts
//! are Pebble v1.32.1's, read from it given the same layers.

use std::time::Duration;

use cobble_client::Method;

use crate::fixture::{Daemon, Test, client, free_port, raw, rt, wait_for};

const LONG: Duration = Duration::from_secs(20);

fn is_root() -> bool {
    nix::unistd::getuid().is_root()
}

/// The user and group a workload runs as here: `nobody` when the tests may switch users,
/// otherwise the tests' own (then only the environment shows the workload).
fn workload_ids() -> (u32, u32) {
    if is_root() {
        (65534, 65534)
    } else {
        (
            nix::unistd::getuid().as_raw(),
            nix::unistd::getgid().as_raw(),
        )
    }
}

/// A layer with two workloads, a service in one of them and an exec check in its context.
fn layer() -> String {
    let (uid, gid) = workload_ids();
    format!(
        r#"
services:
  svc:
    override: replace
    command: /bin/sh -c 'echo "ids=$(id -u):$(id -g) A=$A B=$B C=$C"; exec sleep 1000'
    startup: enabled
    workload: web
    environment:
      B: svc
      C: "3"
  plain:
    override: replace
    command: sleep 1000
    startup: enabled
workloads:
  web:
    override: replace
    user-id: {uid}
    group-id: {gid}
    environment:
      A: web
      B: web
  other:
    override: replace
    user-id: {uid}
    group-id: {gid}
    environment:
      A: other
checks:
  as-svc:
    override: replace
    period: 100ms
    threshold: 1
    exec:
      command: /bin/sh -c 'test "$(id -u)" = {uid} && test "$A" = web && test "$B" = svc'
      service-context: svc
      working-dir: /
"#
    )
}

/// The `ids=... A=... B=... C=...` lines `svc` has written.
fn reports(daemon: &Daemon) -> Vec<String> {
    let out = Test::daemon(daemon)
        .args(&["logs", "svc", "-n", "all"])
        .any_stdout()
        .run();
    out.stdout
        .lines()
        .filter_map(|l| l.split_once("] ").map(|(_, m)| m.to_owned()))
        .filter(|m| m.starts_with("ids="))
        .collect()
}

fn start_count(daemon: &Daemon) -> u64 {
    let (_, body) = raw(
        daemon,
        Method::GET,
        "/v1/services?names=svc&details=true",
        None,
    );
    let envelope: serde_json::Value = serde_json::from_str(&body).unwrap();
    envelope["result"][0]["details"]["start-count"]
        .as_u64()
        .unwrap_or(0)
}

#[test]
fn a_service_runs_as_its_workload_and_its_context_inherits_it() {
    let (uid, gid) = workload_ids();
    let daemon = Daemon::start(&[("001-base", &layer())], &[]);
    wait_for("svc to report", LONG, || !reports(&daemon).is_empty());
    assert_eq!(
        reports(&daemon),
        [format!("ids={uid}:{gid} A=web B=svc C=3")],
        "the workload's user, group and environment, the service's environment on top"
    );
    // An exec in the service's context runs as the service runs.
    Test::daemon(&daemon)
        .args(&[
            "exec",
            "--context",
            "svc",
            // nobody's home does not exist, and that is where an exec starts by default.
            "-w",
            "/",
            "--",
            "/bin/sh",
            "-c",
            "echo $(id -u):$(id -g) $A $B $C",
        ])
        .stdout(&format!("{uid}:{gid} web svc 3\n"))
        .run();
    // So does an exec check with the service as its context: it passes only so.
    wait_for("the exec check to pass twice", LONG, || {
        let checks = rt()
            .block_on(client(&daemon).checks("", &["as-svc".to_owned()]))
            .unwrap();
        checks[0].successes.unwrap_or(0) >= 2 && checks[0].failures == 0
    });
    // The plan shows the section as Pebble prints it.
    let out = Test::daemon(&daemon).args(&["plan"]).any_stdout().run();
    assert!(
        out.stdout.ends_with(&format!(
            "workloads:\n    other:\n        override: replace\n        environment:\n            A: other\n        user-id: {uid}\n        group-id: {gid}\n    web:\n        override: replace\n        environment:\n            A: web\n            B: web\n        user-id: {uid}\n        group-id: {gid}\n"
        )),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains("        startup: enabled\n        override: replace\n        command: /bin/sh -c 'echo \"ids=$(id -u):$(id -g) A=$A B=$B C=$C\"; exec sleep 1000'\n        workload: web\n        environment:\n"),
        "{}",
        out.stdout
    );
}

#[test]
fn a_replan_restarts_a_service_whose_workload_changes() {
    let daemon = Daemon::start(&[("001-base", &layer())], &[]);
    wait_for("svc to report", LONG, || reports(&daemon).len() == 1);
    let plain_since = crate::fixture::service(&daemon, "plain").current_since;
    assert_eq!(start_count(&daemon), 1);
    // The workloads themselves are fixed; moving the service to another one is a change.
    let update = daemon.scratch().join("move.yaml");
    std::fs::write(
        &update,
        "services:\n  svc:\n    override: merge\n    workload: other\n",
    )
    .unwrap();
    Test::daemon(&daemon)
        .args(&["add", "move", update.to_str().unwrap()])
        .any_stdout()
        .run();
    Test::daemon(&daemon).args(&["replan"]).run();
    wait_for("svc to report from its new workload", LONG, || {
        reports(&daemon).len() == 2
    });
    let (uid, gid) = workload_ids();
    assert_eq!(
        reports(&daemon)[1],
        format!("ids={uid}:{gid} A=other B=svc C=3")
    );
    assert_eq!(start_count(&daemon), 2);
    // A service whose configuration is the same is left running.
    assert_eq!(
        crate::fixture::service(&daemon, "plain").current_since,
        plain_since
    );
}

#[test]
fn the_workloads_loaded_at_start_cannot_change() {
    let daemon = Daemon::hold(&[("001-base", &layer())]);
    let before = Test::daemon(&daemon)
        .args(&["plan"])
        .any_stdout()
        .run()
        .stdout;
    let change = daemon.scratch().join("change.yaml");
    for yaml in [
        "workloads:\n  web:\n    override: merge\n    environment:\n      A: changed\n",
        "workloads:\n  new:\n    override: replace\n",
    ] {
        std::fs::write(&change, yaml).unwrap();
        Test::daemon(&daemon)
            .args(&["add", "change", change.to_str().unwrap()])
            .stderr("error: cannot change immutable section \"workloads\"\n")
            .status(1)
            .run();
    }
    // The same section again is no change.
    let (uid, _) = workload_ids();
    std::fs::write(
        &change,
        format!("workloads:\n  web:\n    override: merge\n    user-id: {uid}\n"),
    )
    .unwrap();
    Test::daemon(&daemon)
        .args(&["add", "same", change.to_str().unwrap()])
        .any_stdout()
        .run();
    assert_eq!(
        Test::daemon(&daemon)
            .args(&["plan"])
            .any_stdout()
            .run()
            .stdout,
        before
    );
}

#[test]
fn workload_mistakes_are_refused_with_pebbles_words() {
    let daemon = Daemon::hold(&[("001-base", &layer())]);
    let path = daemon.scratch().join("bad.yaml");
    let cases = [
        (
            "services:\n  s:\n    override: replace\n    command: x\n    workload: nope\n",
            "error: workload \"nope\": not defined for service \"s\"\n",
        ),
        (
            "services:\n  s:\n    override: replace\n    command: x\n    workload: web\n    user: root\n",
            "error: plan service \"s\" cannot have user information and a workload at the same\n       time\n",
        ),
        (
            "workloads:\n  w: ~\n",
            "error: cannot parse layer YAML: workload \"w\": cannot have a null value\n",
        ),
        (
            "workloads:\n  w:\n    override: bogus\n",
            "error: workload \"w\": has an invalid \"override\" policy: \"bogus\"\n",
        ),
    ];
    for (yaml, stderr) in cases {
        std::fs::write(&path, yaml).unwrap();
        Test::daemon(&daemon)
            .args(&["add", "bad", path.to_str().unwrap()])
            .stderr(stderr)
            .status(1)
            .run();
    }
}

#[test]
fn pairing_is_a_section_and_an_endpoint_that_always_refuses() {
    let daemon = Daemon::hold(&[("001-base", "pairing:\n  mode: single\n")]);
    Test::daemon(&daemon)
        .args(&["plan"])
        .stdout("pairing:\n    mode: single\n")
        .run();
    // The mode may change at any time, to a mode Pebble knows.
    let path = daemon.scratch().join("pairing.yaml");
    std::fs::write(&path, "pairing:\n  mode: sometimes\n").unwrap();
    Test::daemon(&daemon)
        .args(&["add", "p", path.to_str().unwrap()])
        .stderr("error: cannot parse layer YAML: invalid pairing mode \"sometimes\": should be\n       \"disabled\", \"single\" or \"multiple\"\n")
        .status(1)
        .run();
    std::fs::write(&path, "pairing:\n  mode: multiple\n").unwrap();
    Test::daemon(&daemon)
        .args(&["add", "p", path.to_str().unwrap()])
        .any_stdout()
        .run();
    Test::daemon(&daemon)
        .args(&["plan"])
        .stdout("pairing:\n    mode: multiple\n")
        .run();
    // No pairing window is ever open: Pebble's 401, whatever is sent, even to an admin.
    let refused = r#"{"type":"error","status-code":401,"status":"Unauthorized","result":{"message":"access denied","kind":"login-required"}}"#;
    for body in [Some(r#"{"action":"pair"}"#), Some("garbage"), None] {
        let (status, answer) = raw(&daemon, Method::POST, "/v1/pairing", body);
        assert_eq!((status, answer.as_str()), (401, refused), "{body:?}");
    }
    let (status, answer) = raw(&daemon, Method::GET, "/v1/pairing", None);
    assert_eq!(status, 405);
    assert!(
        answer.contains(r#""message":"method \"GET\" not allowed""#),
        "{answer}"
    );
}

#[test]
fn pairing_over_https_is_refused_too() {
    let port = free_port();
    let https = format!("127.0.0.1:{port}");
    let daemon = Daemon::start(
        &[("001-base", "pairing:\n  mode: multiple\n")],
        &["--hold", "--https", &https],
    );
    let dir = daemon.scratch().to_owned();
    let key = dir.join("client.key");
    let cert = dir.join("client.crt");
    // ECDSA rather than Ed25519: curl's OpenSSL reads this key's PKCS#8 form.
    let client_key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    std::fs::write(&cert, params.self_signed(&client_key).unwrap().pem()).unwrap();
    std::fs::write(&key, client_key.serialize_pem()).unwrap();
    let out = std::process::Command::new("curl")
        .args(["-sk", "-w", "\n%{http_code}", "--cert"])
        .arg(&cert)
        .arg("--key")
        .arg(&key)
        .args(["-d", r#"{"action":"pair"}"#])
        .arg(format!("https://127.0.0.1:{port}/v1/pairing"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.ends_with("\n401"), "{text}");
    assert!(text.contains(r#""message":"access denied""#), "{text}");
    // Nothing was paired.
    Test::daemon(&daemon)
        .args(&["identities"])
        .stderr("No identities.\n")
        .run();
}

/// What Pebble accepts and only fails on later boots, runs what can run, and says what
/// cannot: in the daemon log, the Notes column and `cobble why`.
#[test]
fn values_pebble_only_fails_on_later_do_not_stop_the_daemon() {
    let layer = r#"
services:
  odd:
    override: replace
    command: sleep 1000
    startup: enable
  fine:
    override: replace
    command: sleep 1000
    startup: enabled
log-targets:
  "":
    override: replace
    type: loki
    location: "loki:3100"
    services: [fine]
  labels:
    override: replace
    type: syslog
    location: udp://127.0.0.1:9
    services: [odd]
    labels:
      "bad label": x
"#;
    let daemon = Daemon::start(&[("001-base", layer)], &[]);
    daemon.wait_log(
        "Service \"odd\" has startup \"enable\", neither \"enabled\" nor \"disabled\": it is not started automatically",
    );
    daemon.wait_log(
        "Log target \"\" cannot forward logs: invalid location URL \"loki:3100\": missing scheme, must be \"http\" or \"https\"",
    );
    daemon.wait_log(
        "Log target \"labels\" cannot forward logs: invalid label name \"bad label\" for type \"syslog\"",
    );
    wait_for("fine to be active", LONG, || {
        crate::fixture::service(&daemon, "fine").current == "active"
    });
    Test::daemon(&daemon)
        .args(&["services"])
        .stdout_glob(
            "Service  Startup   Current   Since *  Notes\n\
             fine     enabled   active    today at *  logs not forwarded to \"\": invalid location URL \"loki:3100\": missing scheme, must be \"http\" or \"https\"\n\
             odd      disabled  inactive  - *  startup \"enable\" is neither \"enabled\" nor \"disabled\": not started automatically; logs not forwarded to \"labels\": invalid label name \"bad label\" for type \"syslog\"\n",
        )
        .run();
    Test::daemon(&daemon)
        .args(&["why", "odd"])
        .stdout_contains("Why:            startup \"enable\" is neither \"enabled\" nor \"disabled\": not started automatically; logs not forwarded to \"labels\"")
        .run();
    // Started by hand it runs, as under Pebble.
    Test::daemon(&daemon).args(&["start", "odd"]).run();
    assert_eq!(crate::fixture::service(&daemon, "odd").current, "active");
    // The plan prints back what the layer said.
    Test::daemon(&daemon)
        .args(&["plan"])
        .stdout_contains("    odd:\n        startup: enable\n")
        .run();
}

/// Pebble refuses to start (`cannot load plan: workload "w": user: unknown user ...`);
/// cobble starts, says so, and retries the services that run in that workload, so that the
/// user appearing later (an image that creates it at start, say) is enough.
#[test]
fn a_workload_whose_user_is_missing_does_not_stop_the_daemon() {
    let layer = "services:\n  svc:\n    override: replace\n    command: sleep 1000\n    startup: enabled\n    workload: w\nworkloads:\n  w:\n    override: replace\n    user: no-such-user\n";
    let daemon = Daemon::start(&[("001-base", layer)], &[]);
    daemon.wait_log("Workload \"w\" cannot be used yet: user: unknown user no-such-user");
    daemon
        .wait_log("Service \"svc\" cannot be started, will retry: user: unknown user no-such-user");
    wait_for("svc to back off", LONG, || {
        crate::fixture::service(&daemon, "svc").current == "backoff"
    });
}
