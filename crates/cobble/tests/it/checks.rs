//! Health checks end to end: real loopback TCP and HTTP servers and real commands against a
//! real daemon; the perform/recover changes, `/v1/checks`, `/v1/health` (also over `--http`
//! under load), failure actions, metrics, bad input, and the CLI commands.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::time::Duration;

use cobble_client::types::{ChangeInfo, CheckInfo};
use cobble_client::{Client, ClientConfig, Method};

use crate::fixture::{Daemon, Test, free_port, raw, wait_for};

const LONG: Duration = Duration::from_secs(20);

fn client(daemon: &Daemon) -> Client {
    Client::new(ClientConfig::socket(
        daemon.pebble_dir().join(".pebble.socket"),
    ))
    .expect("client")
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

fn checks(daemon: &Daemon) -> Vec<CheckInfo> {
    let c = client(daemon);
    rt().block_on(c.checks("", &[])).expect("checks")
}

fn check(daemon: &Daemon, name: &str) -> CheckInfo {
    checks(daemon)
        .into_iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no check {name}"))
}

fn change(daemon: &Daemon, id: &str) -> ChangeInfo {
    let c = client(daemon);
    rt().block_on(c.change(id)).expect("change")
}

/// (status, body) of a raw request over the socket.
/// A loopback HTTP server answering every GET with the current status and a two-line body.
struct HttpServer {
    url: String,
    status: Arc<AtomicU16>,
}

impl HttpServer {
    fn start() -> HttpServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/health", listener.local_addr().unwrap());
        let status = Arc::new(AtomicU16::new(200));
        let shared = status.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    match stream.read(&mut byte) {
                        Ok(1) => head.push(byte[0]),
                        _ => break,
                    }
                }
                let code = shared.load(Ordering::SeqCst);
                let body = "boom\nline2\n";
                let _ = write!(
                    stream,
                    "HTTP/1.1 {code} X\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        HttpServer { url, status }
    }
}

#[test]
fn checks_of_every_type_run_under_hold_and_cycle_through_perform_and_recover() {
    let http = HttpServer::start();
    let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
    let tcp_port = tcp.local_addr().unwrap().port();
    let scratch = tempfile::tempdir().unwrap();
    let flag = scratch.path().join("flag");
    // Periods of 1s: a check's timeout is its period, so a run slowed by a busy machine
    // does not fail a check that only the test means to fail.
    let layer = format!(
        r#"
services:
  svc:
    override: replace
    command: sleep 1000
    environment:
      CONTEXT_VAR: from-service
checks:
  web:
    override: replace
    level: ready
    period: 1s
    threshold: 2
    http:
      url: {url}
      headers:
        X-Probe: cobble
  port:
    override: replace
    level: alive
    period: 1s
    threshold: 1
    tcp:
      port: {tcp_port}
      host: 127.0.0.1
  cmd:
    override: replace
    period: 1s
    threshold: 1
    exec:
      command: /bin/sh -c 'test "$CONTEXT_VAR" = from-service && test "$OWN" = yes && test ! -f {flag}'
      service-context: svc
      environment:
        OWN: "yes"
"#,
        url = http.url,
        flag = flag.display()
    );
    let d = Daemon::hold(&[("001-checks", &layer)]);

    // Everything starts up, with a perform-check change each, services untouched (--hold).
    let all = checks(&d);
    let names: Vec<&str> = all.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["cmd", "port", "web"]);
    for c in &all {
        assert_eq!((c.status.as_str(), c.startup.as_str()), ("up", "enabled"));
        let ch = change(&d, &c.change_id);
        assert_eq!(
            (ch.kind.as_str(), ch.status.as_str()),
            ("perform-check", "Doing")
        );
    }
    assert_eq!(
        change(&d, &check(&d, "web").change_id).summary,
        "Perform HTTP check \"web\""
    );
    wait_for("every check to succeed", LONG, || {
        checks(&d).iter().all(|c| c.successes >= Some(2))
    });
    assert_eq!(
        rt().block_on(client(&d).services(&[])).unwrap()[0].current,
        "inactive"
    );

    // Filters.
    let c = client(&d);
    let alive = rt().block_on(c.checks("alive", &[])).unwrap();
    assert_eq!(alive.len(), 1);
    assert_eq!(alive[0].name, "port");
    let named = rt()
        .block_on(c.checks("", &["web".into(), "cmd".into()]))
        .unwrap();
    assert_eq!(named.len(), 2);

    // HTTP failure: below the threshold first, then down with a recover change.
    let web_perform = check(&d, "web").change_id;
    http.status.store(500, Ordering::SeqCst);
    wait_for("web to go down", LONG, || check(&d, "web").status == "down");
    let web = check(&d, "web");
    assert!(web.failures >= 2, "{web:?}");
    let failed = change(&d, &web_perform);
    assert_eq!(failed.status, "Error");
    assert!(
        failed.err.starts_with(
            "cannot perform the following tasks:\n- Perform HTTP check \"web\" (non-2xx status code 500; boom\nline2)"
        ),
        "{}",
        failed.err
    );
    assert_eq!(change(&d, &web.change_id).kind, "recover-check");
    let (status, body) = raw(&d, Method::GET, "/v1/health", None);
    assert_eq!(
        (status, body.as_str()),
        (
            502,
            r#"{"type":"sync","status-code":502,"status":"Bad Gateway","result":{"healthy":false}}"#
        )
    );
    let (status, _) = raw(&d, Method::GET, "/v1/health?level=alive", None);
    assert_eq!(status, 200, "alive does not include ready checks");
    let (status, _) = raw(&d, Method::GET, "/v1/health?names=port,cmd", None);
    assert_eq!(status, 200);

    // Recovery: the recover change completes and a new perform change starts.
    let web_recover = web.change_id.clone();
    http.status.store(200, Ordering::SeqCst);
    wait_for("web to recover", LONG, || check(&d, "web").status == "up");
    assert_eq!(change(&d, &web_recover).status, "Done");
    let web = check(&d, "web");
    assert_eq!(change(&d, &web.change_id).kind, "perform-check");
    assert_eq!(web.failures, 0);
    let (status, body) = raw(&d, Method::GET, "/v1/health", None);
    assert_eq!(
        (status, body.as_str()),
        (
            200,
            r#"{"type":"sync","status-code":200,"status":"OK","result":{"healthy":true}}"#
        )
    );

    // Exec failure (threshold 1) with its exit status.
    let cmd_perform = check(&d, "cmd").change_id;
    std::fs::write(&flag, "").unwrap();
    wait_for("cmd to go down", LONG, || check(&d, "cmd").status == "down");
    assert_eq!(
        change(&d, &cmd_perform).err,
        "cannot perform the following tasks:\n- Perform exec check \"cmd\" (exit status 1)"
    );

    // TCP failure: the port closes.
    let port_perform = check(&d, "port").change_id;
    drop(tcp);
    wait_for("port to go down", LONG, || {
        check(&d, "port").status == "down"
    });
    let err = change(&d, &port_perform).err;
    assert!(err.contains("connect: connection refused"), "{err}");
}

#[test]
fn layer_changes_apply_without_a_replan_and_start_stop_refresh_work() {
    let d = Daemon::hold(&[(
        "001-checks",
        "checks:\n  a:\n    override: replace\n    period: 10s\n    exec:\n      command: \"true\"\n",
    )]);
    let a = check(&d, "a");
    assert_eq!((a.status.as_str(), a.successes), ("up", Some(0)));

    let c = client(&d);
    let rt = rt();
    rt.block_on(c.add_layer(
        "more",
        "checks:\n  b:\n    override: replace\n    startup: disabled\n    tcp:\n      port: 1\n  a:\n    override: merge\n    threshold: 7\n",
        false,
        false,
    ))
    .unwrap();
    let b = check(&d, "b");
    assert_eq!(
        (b.status.as_str(), b.startup.as_str(), b.change_id.as_str()),
        ("inactive", "disabled", "")
    );
    let a2 = check(&d, "a");
    assert_eq!(a2.threshold, 7);
    assert_ne!(a2.change_id, a.change_id, "a changed check restarts");
    wait_for("the old change to finish", LONG, || {
        change(&d, &a.change_id).status == "Done"
    });

    assert_eq!(
        rt.block_on(c.stop_checks(&["b".into(), "a".into()]))
            .unwrap(),
        ["a"]
    );
    let stopped = check(&d, "a");
    assert_eq!(
        (stopped.status.as_str(), stopped.change_id.as_str()),
        ("inactive", "")
    );
    assert_eq!(
        rt.block_on(c.start_checks(&["a".into(), "b".into()]))
            .unwrap(),
        ["a", "b"]
    );
    assert_eq!(
        rt.block_on(c.start_checks(&["a".into()])).unwrap(),
        Vec::<String>::new()
    );

    // Refresh runs at once; a closed port fails with the dial error.
    let refreshed = rt.block_on(c.refresh_check("a")).unwrap();
    assert_eq!(
        (refreshed.info.successes, refreshed.error.as_str()),
        (Some(1), "")
    );
    let refreshed = rt.block_on(c.refresh_check("b")).unwrap();
    assert_eq!(refreshed.info.failures, 1);
    assert!(
        refreshed.error.contains("connect: connection refused"),
        "{}",
        refreshed.error
    );
}

#[test]
fn a_replan_numbers_the_changes_of_the_checks_it_starts_before_its_own() {
    // As in Pebble: the stopped checks are started (their perform-check changes made) before
    // the replan's change, which takes the next ID; clients and notices see the same IDs.
    let d = Daemon::hold(&[(
        "001-checks",
        "checks:\n  a:\n    override: replace\n    period: 10s\n    exec:\n      command: \"true\"\n",
    )]);
    let c = client(&d);
    let rt = rt();
    for (layer, summary) in [
        (None, "Replan - no services"),
        (
            Some(
                "services:\n  srv:\n    override: replace\n    command: sleep 1000\n    startup: enabled\n",
            ),
            "Replan service \"srv\"",
        ),
    ] {
        if let Some(layer) = layer {
            rt.block_on(c.add_layer("srv", layer, false, false))
                .unwrap();
        }
        assert_eq!(rt.block_on(c.stop_checks(&["a".into()])).unwrap(), ["a"]);
        let replan = rt.block_on(c.replan()).unwrap();
        assert_eq!(change(&d, &replan).summary, summary);
        let started = check(&d, "a");
        assert_eq!(change(&d, &started.change_id).kind, "perform-check");
        let (check_id, replan_id): (u64, u64) =
            (started.change_id.parse().unwrap(), replan.parse().unwrap());
        assert_eq!(check_id + 1, replan_id, "{summary}");
    }
}

#[test]
fn bad_check_requests_are_rejected_and_change_nothing() {
    let d = Daemon::hold(&[(
        "001-checks",
        "checks:\n  a:\n    override: replace\n    exec:\n      command: \"true\"\n",
    )]);
    let before = checks(&d);
    let cases: [(Method, &str, Option<&str>, u16, &str); 8] = [
        (
            Method::POST,
            "/v1/checks",
            Some(r#"{"action":"stop","checks":["a","nope","also-nope"]}"#),
            400,
            "cannot stop checks: cannot find checks in plan: also-nope, nope",
        ),
        (
            Method::POST,
            "/v1/checks",
            Some(r#"{"action":"start","checks":[]}"#),
            400,
            "must specify checks for start action",
        ),
        (
            Method::POST,
            "/v1/checks",
            Some(r#"{"action":"frob","checks":["a"]}"#),
            400,
            "invalid action \"frob\"",
        ),
        (
            Method::POST,
            "/v1/checks",
            Some("{"),
            400,
            "cannot decode data from request body: ",
        ),
        (
            Method::GET,
            "/v1/checks?level=high",
            None,
            400,
            r#"level must be "alive" or "ready""#,
        ),
        (
            Method::GET,
            "/v1/health?level=high",
            None,
            400,
            r#"level must be "alive" or "ready""#,
        ),
        (
            Method::POST,
            "/v1/checks/refresh",
            Some(r#"{"name":"nope"}"#),
            404,
            "cannot find check with name \"nope\"",
        ),
        (
            Method::POST,
            "/v1/checks/refresh",
            Some(r#"{}"#),
            400,
            "must specify check name",
        ),
    ];
    for (method, path, body, want_status, want_message) in cases {
        let (status, text) = raw(&d, method, path, body);
        assert_eq!(status, want_status, "{path} {body:?}: {text}");
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(value["type"], "error", "{text}");
        let message = value["result"]["message"].as_str().unwrap();
        assert!(message.starts_with(want_message), "{path}: {message}");
    }
    // A bad period is rejected with the layer, and the check is untouched.
    let (status, text) = raw(
        &d,
        Method::POST,
        "/v1/layers",
        Some(
            r#"{"action":"add","label":"bad","format":"yaml","layer":"checks:\n  a:\n    override: merge\n    period: 0s\n"}"#,
        ),
    );
    assert_eq!(status, 400, "{text}");
    let (status, text) = raw(
        &d,
        Method::POST,
        "/v1/layers",
        Some(
            r#"{"action":"add","label":"bad","format":"yaml","layer":"checks:\n  a:\n    override: merge\n    period: soon\n"}"#,
        ),
    );
    assert_eq!(status, 400, "{text}");
    assert_eq!(checks(&d), before);
}

#[test]
fn on_check_failure_restart_restarts_the_service() {
    let scratch = tempfile::tempdir().unwrap();
    let pids = scratch.path().join("pids");
    let flag = scratch.path().join("flag");
    let layer = format!(
        r#"
services:
  svc:
    override: replace
    command: /bin/sh -c 'echo $$ >> {pids}; exec sleep 1000'
    on-check-failure:
      chk: restart
checks:
  chk:
    override: replace
    period: 300ms
    threshold: 2
    exec:
      command: /bin/sh -c 'test ! -f {flag}'
"#,
        pids = pids.display(),
        flag = flag.display()
    );
    let d = Daemon::hold(&[("001-layer", &layer)]);
    Test::daemon(&d).args(&["start", "svc"]).run();
    let lines = || {
        std::fs::read_to_string(&pids)
            .unwrap_or_default()
            .lines()
            .count()
    };
    assert_eq!(lines(), 1);
    std::fs::write(&flag, "").unwrap();
    wait_for("the service to be restarted", LONG, || lines() == 2);
    wait_for("the service to be active again", LONG, || {
        rt().block_on(client(&d).services(&[])).unwrap()[0].current == "active"
    });
    // Still failing: where Pebble fires once per streak, cobble fires again after every
    // further `threshold` failures, so the service keeps being restarted (paced by backoff).
    wait_for("the action to fire again", LONG, || lines() >= 3);
    let (_, metrics) = raw(&d, Method::GET, "/v1/metrics", None);
    assert!(
        metrics.contains("cobble_check_action_count{check=\"chk\"} "),
        "{metrics}"
    );
    // Once the check passes, the firing stops.
    std::fs::remove_file(&flag).unwrap();
    wait_for("the check to be up", LONG, || {
        raw(&d, Method::GET, "/v1/metrics", None)
            .1
            .contains("pebble_check_up{check=\"chk\"} 1\n")
    });
    let settled = lines();
    crate::fixture::wait_check_runs(&d, "chk", 5);
    assert!(lines() <= settled + 1, "no restarts once the check is up");
    let (_, metrics) = raw(&d, Method::GET, "/v1/metrics", None);
    assert!(
        metrics.contains("pebble_service_start_count{service=\"svc\"} "),
        "{metrics}"
    );
}

/// Between a check's restart and the service's return, the service is wanted running: it is
/// listed as backing off, never as inactive, also while its old process takes its time to
/// exit.
#[test]
fn a_service_restarted_by_its_check_is_never_listed_inactive() {
    let scratch = tempfile::tempdir().unwrap();
    let pids = scratch.path().join("pids");
    let flag = scratch.path().join("flag");
    let ending = scratch.path().join("ending");
    let layer = format!(
        r#"
services:
  svc:
    override: replace
    command: /bin/sh -c 'trap "touch {ending}; sleep 1; exit 0" TERM; echo $$ >> {pids}; while :; do sleep 0.1; done'
    on-check-failure:
      chk: restart
checks:
  chk:
    override: replace
    period: 200ms
    threshold: 1
    exec:
      command: /bin/sh -c 'test ! -f {flag}'
"#,
        pids = pids.display(),
        flag = flag.display(),
        ending = ending.display(),
    );
    let d = Daemon::hold(&[("001-layer", &layer)]);
    Test::daemon(&d).args(&["start", "svc"]).run();
    let c = client(&d);
    let runtime = rt();
    let listed = || runtime.block_on(c.services(&[])).unwrap().remove(0).current;
    let mut seen = vec![listed()];
    std::fs::write(&flag, "").unwrap();
    // The old process is ending (it takes a second over it): the restart is under way.
    wait_for("the check's restart to end the process", LONG, || {
        seen.push(listed());
        ending.exists()
    });
    assert_eq!(listed(), "backoff", "while the old process ends");
    std::fs::remove_file(&flag).unwrap();
    wait_for("the service to be back", LONG, || {
        seen.push(listed());
        std::fs::read_to_string(&pids)
            .unwrap_or_default()
            .lines()
            .count()
            == 2
            && seen.last().is_some_and(|s| s == "active")
    });
    assert!(
        !seen.iter().any(|s| s == "inactive"),
        "listed inactive on its way back up: {seen:?}"
    );
    assert!(seen.iter().any(|s| s == "backoff"), "{seen:?}");
}

#[test]
fn on_check_failure_shutdown_exits_with_code_11() {
    let scratch = tempfile::tempdir().unwrap();
    let flag = scratch.path().join("flag");
    let layer = format!(
        r#"
services:
  svc:
    override: replace
    command: sleep 1000
    startup: enabled
    on-check-failure:
      chk: shutdown
checks:
  chk:
    override: replace
    period: 200ms
    threshold: 1
    exec:
      command: /bin/sh -c 'test ! -f {flag}'
"#,
        flag = flag.display()
    );
    let mut d = Daemon::start(&[("001-layer", &layer)], &[]);
    // A failure while the service is still starting would be ignored, as in Pebble: the
    // autostart is done once the service is past its start.
    wait_for("the service to be started", LONG, || {
        let (_, body) = raw(&d, Method::GET, "/v1/changes?select=all", None);
        let body: serde_json::Value = serde_json::from_str(&body).unwrap();
        body["result"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["kind"] == "autostart" && c["status"] == "Done")
    });
    std::fs::write(&flag, "").unwrap();
    let socket = d.pebble_dir().join(".pebble.socket");
    wait_for("the daemon to shut down", LONG, || !socket.exists());
    assert_eq!(d.stop(), Some(11));
}

#[test]
fn health_over_http_answers_while_fifty_clients_hammer_the_socket() {
    let port = free_port();
    let layer = r#"
services:
  svc:
    override: replace
    command: sleep 1000
checks:
  good:
    override: replace
    level: alive
    # Long enough that a busy machine cannot fail it by timeout (the timeout is the period).
    period: 1s
    exec:
      command: "true"
  bad:
    override: replace
    level: ready
    period: 100ms
    threshold: 1
    exec:
      command: /bin/sh -c 'exit 1'
"#;
    let d = Daemon::start(
        &[("001-layer", layer)],
        &["--hold", "--http", &format!("127.0.0.1:{port}")],
    );
    wait_for("bad to go down", LONG, || check(&d, "bad").status == "down");

    let socket = d.pebble_dir().join(".pebble.socket");
    let stop = Arc::new(AtomicBool::new(false));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut hammers = Vec::new();
        for i in 0..50 {
            let c = Client::new(ClientConfig::socket(&socket)).unwrap();
            let stop = stop.clone();
            hammers.push(tokio::spawn(async move {
                let mut n = 0u32;
                while !stop.load(Ordering::Relaxed) && n < 400 {
                    let path = if i % 2 == 0 {
                        "/v1/services"
                    } else {
                        "/v1/changes?select=all"
                    };
                    let response = c.raw_request(Method::GET, path, None).await.unwrap();
                    assert_eq!(response.status_code, 200);
                    n += 1;
                }
            }));
        }
        let http = Client::new(ClientConfig {
            socket: socket.clone(),
            base_url: Some(format!("http://127.0.0.1:{port}")),
        })
        .unwrap();
        for round in 0..60 {
            let (query, status, body) = if round % 2 == 0 {
                (
                    "/v1/health",
                    502,
                    r#"{"type":"sync","status-code":502,"status":"Bad Gateway","result":{"healthy":false}}"#,
                )
            } else {
                (
                    "/v1/health?level=alive",
                    200,
                    r#"{"type":"sync","status-code":200,"status":"OK","result":{"healthy":true}}"#,
                )
            };
            let response = http.raw_request(Method::GET, query, None).await.unwrap();
            assert_eq!(response.status_code, status);
            assert_eq!(String::from_utf8_lossy(&response.body), body);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        stop.store(true, Ordering::Relaxed);
        for hammer in hammers {
            hammer.await.unwrap();
        }
    });
}

#[test]
fn cli_commands_show_and_drive_checks() {
    let layer = r#"
checks:
  good:
    override: replace
    level: alive
    # Long enough that a busy machine cannot fail it by timeout (the timeout is the period).
    period: 1s
    exec:
      command: "true"
  bad:
    override: replace
    level: ready
    period: 1s
    threshold: 1
    exec:
      command: /bin/sh -c 'echo nope; exit 2'
  idle:
    override: replace
    startup: disabled
    tcp:
      port: 1
"#;
    let d = Daemon::hold(&[("001-layer", layer)]);
    // Down, and failing on in its recover change (whose last log entry the table shows).
    wait_for("bad to fail while recovering", LONG, || {
        check(&d, "bad").failures >= 2
    });
    let bad = check(&d, "bad");
    Test::daemon(&d)
        .args(&["checks"])
        .stdout_glob(&format!(
            "Check  Level  Startup   Status    Successes  Failures  Change\n\
             bad    ready  enabled   down      0          */1       {} (exit status 2; nope)\n\
             good   alive  enabled   up        *0/3       {}\n\
             idle   -      disabled  inactive  -          -         -\n",
            bad.change_id,
            check(&d, "good").change_id
        ))
        .run();
    Test::daemon(&d)
        .args(&["checks", "--level", "alive"])
        .stdout_glob("Check  Level  Startup  Status  Successes  Failures  Change\ngood   alive  enabled  up      *0/3       *\n")
        .run();
    Test::daemon(&d)
        .args(&["checks", "nothing"])
        .stderr("No matching health checks.\n")
        .stdout("")
        .run();
    Test::daemon(&d)
        .args(&["health"])
        .stdout("unhealthy\n")
        .status(1)
        .run();
    Test::daemon(&d)
        .args(&["health", "--level", "alive"])
        .stdout("healthy\n")
        .run();
    Test::daemon(&d)
        .args(&["health", "--format", "json", "good"])
        .stdout("{\"healthy\":true}\n")
        .run();
    Test::daemon(&d)
        .args(&["check", "idle"])
        .stdout("name: idle\nstartup: disabled\nstatus: inactive\nsuccesses: 0\nfailures: 0\nthreshold: 3\n")
        .run();
    Test::daemon(&d)
        .args(&["check", "missing"])
        .stderr("error: cannot find check \"missing\"\n")
        .stdout("")
        .status(1)
        .run();
    Test::daemon(&d)
        .args(&["start-checks", "idle", "good"])
        .stdout("Checks started: idle\n")
        .run();
    Test::daemon(&d)
        .args(&["start-checks", "idle"])
        .stdout("Checks already started.\n")
        .run();
    Test::daemon(&d)
        .args(&["stop-checks", "good", "idle"])
        .stdout("Checks stopped: good, idle\n")
        .run();
    Test::daemon(&d)
        .args(&["stop-checks", "nope"])
        .stderr("error: cannot stop checks: cannot find checks in plan: nope\n")
        .stdout("")
        .status(1)
        .run();
    Test::daemon(&d)
        .args(&["check", "--refresh", "good"])
        .stdout_glob("name: good\nlevel: alive\nstartup: enabled\nstatus: inactive\nsuccesses: *\nfailures: 0\nthreshold: 3\n")
        .run();
}

/// A refresh whose run hit the threshold answers with the new recover-check change's ID:
/// that change is on disk before the answer, so a SIGKILL right after it loses nothing and
/// the next daemon never gives the ID out again.
#[test]
fn a_refresh_answers_only_with_a_change_on_disk() {
    let yaml = "checks:\n  bad:\n    override: replace\n    period: 1h\n    threshold: 1\n    exec:\n      command: \"false\"\n";
    let mut d = Daemon::hold(&[("001-refresh", yaml)]);
    let c = client(&d);
    let rt = rt();
    let before = rt.block_on(c.checks("", &[])).unwrap()[0].change_id.clone();
    let refreshed = rt.block_on(c.refresh_check("bad")).unwrap();
    let id = refreshed.info.change_id.clone();
    assert_ne!(id, before, "the failure started a recover-check change");
    d.kill();
    d.restart(&["--hold"]);
    let c = client(&d);
    let kinds: Vec<(String, String)> = rt
        .block_on(c.changes(cobble_client::ChangeSelector::All, None))
        .unwrap()
        .into_iter()
        .map(|ch| (ch.id, ch.kind))
        .collect();
    assert!(
        kinds.contains(&(id.clone(), "recover-check".to_owned())),
        "change {id} lost: {kinds:?}"
    );
}

/// An exec check's command is recorded while it runs, as a service's is: a daemon SIGKILLed
/// in the middle of a run leaves it behind, and the next daemon ends it before it starts
/// anything and says so.
#[test]
fn a_check_command_a_killed_daemon_left_running_is_ended_by_the_next() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("check.pid");
    let yaml = format!(
        "checks:\n  slow:\n    override: replace\n    period: 3s\n    timeout: 3s\n    \
         exec:\n      command: /bin/sh -c 'echo $$ > {}; exec sleep 1000'\n",
        pid_file.display()
    );
    let mut d = Daemon::hold(&[("001-slow", &yaml)]);
    wait_for("the check's first run", LONG, || {
        std::fs::read_to_string(&pid_file).is_ok_and(|t| t.ends_with('\n'))
    });
    d.kill();
    let pid: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // Nothing ends it now: the daemon that ran it, and would have at its timeout, is gone.
    assert!(
        crate::fixture::running(pid),
        "the check's command ended with its daemon"
    );
    d.restart(&["--hold"]);
    d.wait_log("Stopped leftover processes of check slow");
    wait_for("the check's command to end", LONG, || {
        !crate::fixture::running(pid)
    });
}

/// `/v1/metrics` as Pebble writes it: only services this daemon has started, each with
/// whether it is active before its start count; over `--http`, only to an identity whose
/// access is exactly `metrics` (an admin's password over cleartext gets a 401).
#[test]
fn metrics_list_started_services_active_first_and_only_metrics_identities_over_http() {
    let port = free_port();
    let layer = "services:\n  a:\n    override: replace\n    command: sleep 1000\n  \
                 b:\n    override: replace\n    command: sleep 1000\n";
    let d = Daemon::start(
        &[("001-base", layer)],
        &["--hold", "--http", &format!("127.0.0.1:{port}")],
    );
    crate::fixture::act(&d, "start", &["a"]);
    let (status, metrics) = raw(&d, Method::GET, "/v1/metrics", None);
    assert_eq!(status, 200, "{metrics}");
    // Pebble's families as Pebble writes them, then cobble's accounting of the same service.
    let (pebble, cobble) = metrics
        .split_once("# HELP cobble_service_memory_bytes")
        .unwrap_or((&metrics, ""));
    assert_eq!(
        pebble,
        "# HELP pebble_service_active Whether the service is currently active (1) or not (0)\n\
         # TYPE pebble_service_active gauge\n\
         pebble_service_active{service=\"a\"} 1\n\
         \n\
         # HELP pebble_service_start_count Number of times the service has started\n\
         # TYPE pebble_service_start_count counter\n\
         pebble_service_start_count{service=\"a\"} 1\n\
         \n"
    );
    let samples: Vec<&str> = cobble
        .lines()
        .filter(|l| l.starts_with("cobble_"))
        .map(|l| l.rsplit_once(' ').unwrap().0)
        .collect();
    assert_eq!(
        samples,
        [
            "cobble_service_memory_bytes{service=\"a\"}",
            "cobble_service_cpu_seconds_total{service=\"a\"}",
            "cobble_service_processes{service=\"a\"}",
            "cobble_service_open_fds{service=\"a\"}",
        ],
        "{metrics}"
    );

    // The hash of "test" (`openssl passwd -6 -salt saltsalt test`).
    let hash = "$6$saltsalt$JcVDtuB6d1BHhCd5RPBh8g8xX/1CbY8EU2PN0MTaj2/Mypw4P./C6dN4j0HALhzBDTocyW1Jm.gYaTPjFGCV40";
    let ids = d.scratch().join("ids.yaml");
    std::fs::write(
        &ids,
        format!(
            "identities:\n  scraper:\n    access: metrics\n    basic:\n      password: \"{hash}\"\n  \
             boss:\n    access: admin\n    basic:\n      password: \"{hash}\"\n  \
             viewer:\n    access: read\n    basic:\n      password: \"{hash}\"\n"
        ),
    )
    .unwrap();
    Test::daemon(&d)
        .args(&["add-identities", "--from", ids.to_str().unwrap()])
        .any_stdout()
        .run();
    let scrape = |user: &str| {
        let output = std::process::Command::new("curl")
            .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "-u"])
            .arg(format!("{user}:test"))
            .arg(format!("http://127.0.0.1:{port}/v1/metrics"))
            .output()
            .expect("run curl");
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    assert_eq!(scrape("scraper"), "200");
    assert_eq!(scrape("boss"), "401");
    assert_eq!(scrape("viewer"), "401");
    d.wait_log(r#""event":"authz_fail:viewer,/v1/metrics""#);
    assert!(
        d.log()
            .contains(r#""level":"CRITICAL","event":"authz_fail:boss,/v1/metrics","description":"User boss not authorized to access /v1/metrics""#),
        "{}",
        d.log()
    );
}

/// In an image with no trusted certificates (chiselled, distroless), an http check runs as
/// anywhere else and an https check fails alone, in Go's words; the kubelet's liveness probe
/// of `/v1/health?level=alive` over `--http` follows the http check only. The https check is
/// on the daemon's own `--https`, whose certificate, like Pebble's, names no host: Go checks
/// the name before the authority, and Pebble v1.32.1 fails this check with these words.
#[test]
fn without_trusted_certificates_http_checks_run_and_an_https_check_fails_alone() {
    let server = HttpServer::start();
    let (http_port, https_port) = (free_port(), free_port());
    let layer = format!(
        r#"
checks:
  web:
    override: replace
    level: alive
    period: 100ms
    threshold: 1
    http:
      url: {url}
  secure:
    override: replace
    level: ready
    period: 100ms
    threshold: 1
    http:
      url: https://127.0.0.1:{https_port}/v1/health
"#,
        url = server.url
    );
    let nowhere = tempfile::tempdir().unwrap();
    let (file, dir) = (
        nowhere.path().join("ca-certificates.crt"),
        nowhere.path().join("certs"),
    );
    let d = Daemon::start_with_env(
        &[("001-layer", &layer)],
        &[
            "--hold",
            "--http",
            &format!("127.0.0.1:{http_port}"),
            "--https",
            &format!("127.0.0.1:{https_port}"),
        ],
        &[
            ("SSL_CERT_FILE", file.to_str().unwrap()),
            ("SSL_CERT_DIR", dir.to_str().unwrap()),
        ],
    );
    wait_for("secure to go down", LONG, || {
        check(&d, "secure").status == "down"
    });
    let url = format!("https://127.0.0.1:{https_port}/v1/health");
    // Any failure of it: the first run may come before the --https listener is up.
    let words = format!(
        ": Get \"{url}\": tls: failed to verify certificate: x509: cannot validate certificate for 127.0.0.1 because it doesn't contain any IP SANs"
    );
    wait_for("secure's failure in the log", LONG, || {
        d.log()
            .lines()
            .any(|line| line.contains("Check \"secure\" failure ") && line.ends_with(&words))
    });
    assert_eq!(check(&d, "web").status, "up");
    assert!(!d.log().contains("cannot build client"), "{}", d.log());

    let health = |query: &str| {
        let http = Client::new(ClientConfig {
            socket: d.pebble_dir().join(".pebble.socket"),
            base_url: Some(format!("http://127.0.0.1:{http_port}")),
        })
        .unwrap();
        rt().block_on(http.raw_request(Method::GET, query, None))
            .unwrap()
            .status_code
    };
    assert_eq!(health("/v1/health?level=alive"), 200);
    assert_eq!(health("/v1/health?level=ready"), 502);
    server.status.store(500, Ordering::SeqCst);
    wait_for("the alive probe to fail", LONG, || {
        health("/v1/health?level=alive") == 502
    });
    server.status.store(200, Ordering::SeqCst);
    wait_for("the alive probe to pass again", LONG, || {
        health("/v1/health?level=alive") == 200
    });
}
