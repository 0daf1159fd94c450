//! The daemon's own log as Pebble's log scrapers read it: the line layout, the security events
//! and the state file that exists once the daemon has started.

use cobble_client::{Client, ClientConfig, Method};

use std::time::Duration;

use crate::fixture::{Daemon, Test, act, free_port, glob_matches, rt};

/// The start of every daemon log line: `2006-01-02T15:04:05.000Z [pebble] `.
const LINE_START: &str = "????-??-??T??:??:??.???Z [pebble] ";

/// The lines of `log` that carry a security event, without their time and name.
fn security_events(log: &str) -> Vec<&str> {
    log.lines()
        .filter_map(|line| line.split_once(" [pebble] "))
        .map(|(_, message)| message)
        .filter(|message| message.starts_with(r#"{"type":"security""#))
        .collect()
}

/// The pattern of one security event as Pebble writes it.
fn event(name: &str, description: &str) -> String {
    format!(
        r#"{{"type":"security","datetime":"????-??-??T??:??:??Z","level":"WARN","event":"{name}","description":"{description}","appid":"pebble"}}"#
    )
}

#[test]
fn every_line_of_the_daemon_log_has_pebbles_layout() {
    let mut d = Daemon::start(
        &[(
            "001-base",
            "services:\n  s:\n    override: replace\n    startup: enabled\n    command: sleep 1000\n",
        )],
        &[],
    );
    act(&d, "stop", &["s"]);
    assert_eq!(d.stop(), Some(0));
    let log = d.log();
    assert!(log.contains(" [pebble] Started daemon.\n"), "{log}");
    for line in log.lines() {
        assert!(
            glob_matches(&format!("{LINE_START}*"), line),
            "not a Pebble log line: {line:?}\n{log}"
        );
    }
}

/// The messages of `log`'s lines, without their times.
fn messages(log: &str) -> Vec<&str> {
    log.lines()
        .filter_map(|line| line.split_once(" [pebble] "))
        .map(|(_, message)| message)
        .collect()
}

/// Pebble's `run` autostarts through a request to its own daemon, and scripts (Pebble's own
/// `TestIdentities` among them) wait for that request's line to know the daemon is up.
#[test]
fn run_logs_its_autostart_request_as_pebbles_run_does() {
    // Nothing to start: Pebble's request is refused, and the refusal logged.
    let d = Daemon::start(&[], &[]);
    d.wait_log("Cannot start default services: no default services\n");
    let log = d.log();
    let lines = messages(&log);
    let started = lines.iter().position(|m| *m == "Started daemon.").unwrap();
    assert!(
        glob_matches("POST /v1/services *s 400 (http+unix)", lines[started + 1]),
        "{log}"
    );
    assert_eq!(
        lines[started + 2],
        "Cannot start default services: no default services",
        "{log}"
    );

    // A service to start: the request, its wait once the change is ready, and the result.
    let d = Daemon::start(
        &[(
            "001-base",
            "services:\n  s:\n    override: replace\n    startup: enabled\n    command: sleep 1000\n",
        )],
        &[],
    );
    d.wait_log("Started default services with change 1.\n");
    let log = d.log();
    // The service's own line may come before the request's, which is logged once answered.
    let lines: Vec<&str> = messages(&log)
        .into_iter()
        .filter(|m| !m.starts_with("Service \"s\""))
        .collect();
    assert!(
        log.contains("Service \"s\" starting: sleep 1000\n"),
        "{log}"
    );
    let started = lines.iter().position(|m| *m == "Started daemon.").unwrap();
    let expected = [
        "POST /v1/services *s 202 (http+unix)",
        "GET /v1/changes/1/wait *s 200 (http+unix)",
        "Started default services with change 1.",
    ];
    for (i, pattern) in expected.iter().enumerate() {
        assert!(
            glob_matches(pattern, lines[started + 1 + i]),
            "{pattern}\n{log}"
        );
    }

    // Under --hold nothing is asked.
    let d = Daemon::hold(&[]);
    let log = d.log();
    assert!(!log.contains("/v1/services"), "{log}");
    assert!(!log.contains("default services"), "{log}");
}

#[test]
fn security_events_are_logged_as_pebble_logs_them() {
    let port = free_port();
    let layer = "checks:\n  c:\n    override: replace\n    period: 10s\n    exec:\n      command: \"true\"\n";
    let mut d = Daemon::start(
        &[("001-base", layer)],
        &["--hold", "--http", &format!("127.0.0.1:{port}")],
    );
    let uid = nix::unistd::getuid().as_raw();

    let layer_file = d.scratch().join("web.yaml");
    std::fs::write(
        &layer_file,
        "services:\n  web:\n    override: replace\n    command: sleep 1000\n",
    )
    .unwrap();
    Test::daemon(&d)
        .args(&["add", "web", &layer_file.display().to_string()])
        .any_stdout()
        .run();
    let local = d.scratch().join("local.txt");
    std::fs::write(&local, "hello").unwrap();
    let remote = d.scratch().join("remote.txt").display().to_string();
    Test::daemon(&d)
        .args(&["push", &local.display().to_string(), &remote])
        .run();
    let pulled = d.scratch().join("pulled.txt").display().to_string();
    Test::daemon(&d).args(&["pull", &remote, &pulled]).run();
    Test::daemon(&d)
        .args(&["stop-checks", "c"])
        .any_stdout()
        .run();
    // A TCP client has no credentials: the socket-only endpoints refuse it, and as nobody
    // asked, nobody is named in an event (Pebble logs refusals of somebody only).
    let http = Client::new(ClientConfig {
        socket: d.pebble_dir().join(".pebble.socket"),
        base_url: Some(format!("http://127.0.0.1:{port}")),
    })
    .unwrap();
    let refused = rt()
        .block_on(http.raw_request(Method::GET, "/v1/services", None))
        .unwrap();
    assert_eq!(refused.status_code, 401);
    assert_eq!(d.stop(), Some(0));

    let log = d.log();
    let expected = [
        event(&format!("sys_startup:{uid}"), "Starting daemon"),
        event(&format!("authz_admin:{uid},add_layer"), "Adding layer web"),
        event(
            &format!("authz_admin:{uid},push_file"),
            &format!("Pushing file {remote}"),
        ),
        event(
            &format!("authz_admin:{uid},pull_file"),
            &format!("Pulling file {remote}"),
        ),
        event(&format!("sys_monitor_disabled:{uid},c"), "Stopping check c"),
        event(&format!("sys_shutdown:{uid}"), "Shutting down daemon"),
    ]
    .join("\n");
    let actual = security_events(&log).join("\n");
    assert!(
        glob_matches(&expected, &actual),
        "security events\n--- expected ---\n{expected}\n--- actual ---\n{actual}\n--- log ---\n{log}"
    );
    for message in security_events(&log) {
        let value: serde_json::Value = serde_json::from_str(message).expect(message);
        assert!(value.is_object(), "{message}");
    }
    // Start-up is audited before the daemon announces itself.
    let startup = log.find("sys_startup").unwrap();
    assert!(startup < log.find("Started daemon.").unwrap(), "{log}");
}

/// The request lines of `log`, without their time and name.
fn request_lines(log: &str) -> Vec<&str> {
    log.lines()
        .filter_map(|line| line.split_once(" [pebble] "))
        .map(|(_, message)| message)
        .filter(|message| message.ends_with(" (http+unix)") || message.ends_with(" (http)"))
        .collect()
}

/// Splits a request line into its address (TCP only), method, target, duration, status and
/// transport, checking that the duration is written as Go writes durations.
fn request_line(message: &str) -> (Option<&str>, &str, &str, &str, &str, &str) {
    let words: Vec<&str> = message.split(' ').collect();
    let (addr, words) = match words.len() {
        6 => (Some(words[0]), &words[1..]),
        _ => (None, &words[..]),
    };
    let [method, target, duration, status, transport] = words else {
        panic!("not a request line: {message:?}");
    };
    let nanos = cobble_plan::parse_duration(duration).expect(duration);
    assert!(nanos > 0, "{message}");
    assert_eq!(
        cobble_plan::format_duration(nanos),
        *duration,
        "not Go's duration format: {message}"
    );
    (addr, method, target, duration, status, transport)
}

#[test]
fn every_request_but_the_polled_gets_is_logged_as_pebble_logs_it() {
    let port = free_port();
    let layer = "services:\n  s:\n    override: replace\n    command: sleep 1000\n";
    let d = Daemon::start(
        &[("001-base", layer)],
        &["--hold", "--http", &format!("127.0.0.1:{port}")],
    );
    Test::daemon(&d).args(&["services"]).any_stdout().run();
    Test::daemon(&d).args(&["start", "s"]).run();
    // The polled GETs Pebble leaves out of its log.
    Test::daemon(&d).args(&["version"]).any_stdout().run();
    let client = Client::new(ClientConfig::socket(d.pebble_dir().join(".pebble.socket"))).unwrap();
    let change = rt()
        .block_on(client.raw_request(Method::GET, "/v1/changes/1", None))
        .unwrap();
    assert_eq!(change.status_code, 200);
    let http = Client::new(ClientConfig {
        socket: d.pebble_dir().join(".pebble.socket"),
        base_url: Some(format!("http://127.0.0.1:{port}")),
    })
    .unwrap();
    for path in [
        "/v1/health",
        "/v1/system-info",
        "/v1/metrics",
        "/v1/nowhere?x=1",
    ] {
        rt().block_on(http.raw_request(Method::GET, path, None))
            .unwrap();
    }
    d.wait_log(" GET /v1/nowhere?x=1 ");

    let log = d.log();
    let lines: Vec<_> = request_lines(&log).into_iter().map(request_line).collect();
    let seen: Vec<(Option<&str>, &str, &str, &str, &str)> = lines
        .iter()
        .map(|&(addr, method, target, _, status, transport)| {
            (addr, method, target, status, transport)
        })
        .collect();
    let unix = |method, target, status| (None, method, target, status, "(http+unix)");
    let expected_unix = [
        unix("GET", "/v1/services?names=", "200"),
        unix("POST", "/v1/services", "202"),
    ];
    assert_eq!(&seen[..2], &expected_unix, "{log}");
    assert_eq!(seen[2].1, "GET", "{log}");
    assert!(seen[2].2.starts_with("/v1/changes/"), "{log}");
    assert!(
        seen[2].2.contains("/wait"),
        "the wait for the change is logged: {log}"
    );
    let tcp: Vec<_> = seen[3..].to_vec();
    assert_eq!(tcp.len(), 2, "{log}");
    for (entry, (target, status)) in tcp
        .iter()
        .zip([("/v1/metrics", "401"), ("/v1/nowhere?x=1", "404")])
    {
        let addr = entry.0.expect("a TCP request names its peer");
        assert!(addr.starts_with("127.0.0.1:"), "{log}");
        assert_eq!(
            (entry.1, entry.2, entry.3, entry.4),
            ("GET", target, status, "(http)"),
            "{log}"
        );
    }
    for skipped in ["/v1/system-info", "/v1/health", "/v1/changes/1 "] {
        assert!(
            !log.contains(&format!(" GET {skipped}")),
            "{skipped} is logged: {log}"
        );
    }
}

#[test]
fn with_debug_a_request_is_also_logged_with_its_peer() {
    let d = Daemon::start_with_env(&[], &["--hold"], &[("PEBBLE_DEBUG", "1")]);
    Test::daemon(&d)
        .args(&["changes"])
        .stderr("no changes found\n")
        .run();
    d.wait_log(" GET /v1/changes?select=all ");
    let socket = d.pebble_dir().join(".pebble.socket");
    let log = d.log();
    let debug = log
        .lines()
        .find(|l| l.contains(" DEBUG pid=") && l.contains(" GET /v1/changes?select=all "))
        .unwrap_or_else(|| panic!("no debug request line:\n{log}"));
    let uid = nix::unistd::getuid().as_raw();
    assert!(
        glob_matches(
            &format!(
                "{LINE_START}DEBUG pid=*;uid={uid};socket={}; GET /v1/changes?select=all * 200 (http+unix)",
                socket.display()
            ),
            debug
        ),
        "{debug}"
    );
}

#[test]
fn the_state_file_exists_as_soon_as_the_daemon_listens() {
    let d = Daemon::hold(&[]);
    let state = d.pebble_dir().join(".pebble.state");
    // The fixture returns once the socket accepts connections; nothing has happened since.
    let text = std::fs::read_to_string(&state).expect("state file after start-up");
    let value: serde_json::Value = serde_json::from_str(&text).expect("state file is JSON");
    assert!(value.is_object(), "{text}");
}

#[test]
fn no_state_file_is_written_when_persistence_is_off() {
    let mut d = Daemon::start_with_env(&[], &["--hold"], &[("PEBBLE_PERSIST", "never")]);
    assert_eq!(d.stop(), Some(0));
    assert!(!d.pebble_dir().join(".pebble.state").exists());
}

/// The index of the first of `log`'s messages that matches `pattern`, if any.
fn position(log: &str, pattern: &str) -> Option<usize> {
    messages(log)
        .iter()
        .position(|message| glob_matches(pattern, message))
}

/// Asserts that `log` has a message for each of `patterns`, in that order (others may come
/// between them).
fn assert_in_order(log: &str, patterns: &[&str]) {
    let mut from = 0;
    let lines = messages(log);
    for pattern in patterns {
        match lines[from..]
            .iter()
            .position(|message| glob_matches(pattern, message))
        {
            Some(i) => from += i + 1,
            None => panic!("no {pattern:?} in order in the log:\n{log}"),
        }
    }
}

/// Juju starts Pebble with `--http :PORT`: the address is announced between the start-up
/// event and `Started daemon.`, as given and Go-quoted, and an IPv4 client of that
/// dual-stack listener is named by its IPv4 address, as Go names it.
#[test]
fn the_http_address_is_announced_and_its_ipv4_clients_named_as_pebble_does() {
    let port = free_port();
    let address = format!(":{port}");
    let mut d = Daemon::start(&[], &["--hold", "--http", &address, "--verbose"]);
    let http = Client::new(ClientConfig {
        socket: d.pebble_dir().join(".pebble.socket"),
        base_url: Some(format!("http://127.0.0.1:{port}")),
    })
    .unwrap();
    let refused = rt()
        .block_on(http.raw_request(Method::GET, "/v1/services", None))
        .unwrap();
    assert_eq!(refused.status_code, 401);
    d.wait_log(" GET /v1/services ");
    assert_eq!(d.stop(), Some(0));
    let log = d.log();
    let uid = nix::unistd::getuid().as_raw();
    let startup = event(&format!("sys_startup:{uid}"), "Starting daemon");
    let listening = format!("HTTP API server listening on \":{port}\".");
    assert_in_order(
        &log,
        &[
            &startup,
            &listening,
            "Started daemon.",
            "127.0.0.1:* GET /v1/services * 401 (http)",
        ],
    );
    let lines = messages(&log);
    let at = position(&log, &listening).unwrap();
    assert!(glob_matches(&startup, lines[at - 1]), "{log}");
    assert_eq!(lines[at + 1], "Started daemon.", "{log}");
    assert!(!log.contains("[::ffff:"), "{log}");
}

#[test]
fn without_http_no_address_is_announced() {
    let mut d = Daemon::hold(&[]);
    assert_eq!(d.stop(), Some(0));
    assert!(!d.log().contains("API server listening"), "{}", d.log());
}

/// Pebble logs every failed task with its change and summary, the task's error as its task
/// log has it: starts that exit quickly (restarted or not), exec checks, exec requests.
#[test]
fn every_failed_task_is_logged_with_its_change_and_summary() {
    let layer = "services:
  quick:
    override: replace
    command: /bin/sh -c 'exit 3'
    backoff-delay: 1m
  once:
    override: replace
    command: /bin/sh -c 'exit 0'
    on-success: ignore
checks:
  chk:
    override: replace
    period: 1s
    threshold: 1
    exec:
      command: /bin/sh -c 'exit 1'
";
    let d = Daemon::start(&[("001-base", layer)], &["--hold"]);
    act(&d, "start", &["quick"]);
    act(&d, "start", &["once"]);
    d.wait_log("Change 1 task (Perform exec check \"chk\") failed: exit status 1\n");
    d.wait_log(
        "Change 2 task (Start service \"quick\") failed: service start attempt: exited quickly with code 3, will restart\n",
    );
    d.wait_log(
        "Change 3 task (Start service \"once\") failed: service start attempt: exited quickly with code 0, will ignore\n",
    );
    let log = d.log();
    // Each after the service's own lines about the exit, as in Pebble.
    assert_in_order(
        &log,
        &[
            "Service \"quick\" stopped unexpectedly with code 3",
            "Service \"quick\" on-failure action is \"restart\", waiting ~1m0s before restart (backoff 1)",
            "Change 2 task (Start service \"quick\") failed: *",
        ],
    );
    assert_in_order(
        &log,
        &[
            "Check \"chk\" failure 1/1: exit status 1",
            "Check \"chk\" threshold 1 hit, triggering action and recovering",
            "Change 1 task (Perform exec check \"chk\") failed: *",
        ],
    );
    // The recover change's failures are its task log's, not failed tasks.
    assert_eq!(log.matches(" task (Recover exec check").count(), 0, "{log}");
}

#[test]
fn an_exec_that_times_out_is_a_failed_task_in_the_log() {
    let d = Daemon::hold(&[]);
    Test::daemon(&d)
        .args(&["exec", "--timeout", "100ms", "--", "sleep", "10"])
        .stderr_contains("timed out")
        .status(1)
        .any_stdout()
        .run();
    d.wait_log(
        "Change 1 task (Execute command \"sleep\") failed: timed out after 100ms: context deadline exceeded\n",
    );
}

/// A daemon stopped with services running says so before it stops them; one with nothing
/// to stop does not; neither writes a line of its own at exit.
#[test]
fn stopping_the_daemon_says_it_stops_the_running_services() {
    let layer = "services:
  web:
    override: replace
    command: sleep 1000
  idle:
    override: replace
    command: sleep 1000
";
    let mut d = Daemon::start(&[("001-base", layer)], &["--hold"]);
    act(&d, "start", &["web"]);
    assert_eq!(d.stop(), Some(0));
    let log = d.log();
    let uid = nix::unistd::getuid().as_raw();
    let shutdown = event(&format!("sys_shutdown:{uid}"), "Shutting down daemon");
    assert_in_order(
        &log,
        &[
            "Exiting on terminated signal.",
            &shutdown,
            "Stopping all running services.",
            "Service \"web\" stopped",
        ],
    );
    assert_eq!(log.matches("Stopping all running services.").count(), 1);
    assert!(!log.contains("Server exiting"), "{log}");
    assert_eq!(
        messages(&log).last().copied(),
        Some("Service \"web\" stopped"),
        "{log}"
    );

    let mut d = Daemon::start(&[("001-base", layer)], &["--hold"]);
    assert_eq!(d.stop(), Some(0));
    let log = d.log();
    assert!(!log.contains("Stopping all running services."), "{log}");
    assert!(
        glob_matches(&shutdown, messages(&log).last().unwrap()),
        "{log}"
    );
}

/// A daemon that a service's action stops logs it in Pebble's words, before its shutdown
/// event.
#[test]
fn a_shutdown_asked_for_by_a_service_is_logged_as_pebble_logs_it() {
    let layer = "services:
  main:
    override: replace
    command: sleep 1000
    startup: enabled
  finisher:
    override: replace
    command: /bin/sh -c 'sleep 1.5'
    startup: enabled
    on-success: shutdown
";
    let mut d = Daemon::start(&[("001-base", layer)], &[]);
    assert_eq!(d.wait_exit(Duration::from_secs(30)), Some(0));
    let log = d.log();
    let uid = nix::unistd::getuid().as_raw();
    assert_in_order(
        &log,
        &[
            "Service \"finisher\" stopped unexpectedly with code 0",
            "Service \"finisher\" on-success action is \"shutdown\", triggering success shutdown",
            "Server exiting! Reason: <nil>",
            &event(&format!("sys_shutdown:{uid}"), "Shutting down daemon"),
            "Stopping all running services.",
            "Service \"main\" stopped",
        ],
    );
}

/// Pebble logs an identities request by what it asks for, before applying it: `replace`
/// updates (even a new name), and a refused request is logged all the same.
#[test]
fn identities_requests_are_logged_by_what_they_ask_for() {
    let d = Daemon::hold(&[]);
    let post = |body: &str| crate::fixture::raw(&d, Method::POST, "/v1/identities", Some(body)).0;
    assert_eq!(
        post(
            r#"{"action":"replace","identities":{"alice":{"access":"admin","local":{"user-id":1000}}}}"#
        ),
        200
    );
    assert_eq!(
        post(r#"{"action":"remove","identities":{"nobody":null}}"#),
        400
    );
    d.wait_log(" 400 (http+unix)");
    let log = d.log();
    let uid = nix::unistd::getuid().as_raw();
    assert_in_order(
        &log,
        &[
            &event(
                &format!("user_updated:{uid},alice,admin"),
                "Updating admin user alice",
            ),
            "POST /v1/identities * 200 (http+unix)",
            &event(
                &format!("user_deleted:{uid},nobody"),
                "Deleting user nobody",
            ),
            "POST /v1/identities * 400 (http+unix)",
        ],
    );
    assert!(!log.contains("Creating admin user alice"), "{log}");
}

/// `--identities` are applied before the daemon serves, and logged where Pebble's `run`
/// logs them: after `Started daemon.`, as the `replace` request it sends its own daemon.
#[test]
fn identities_given_at_start_up_are_logged_as_pebbles_run_logs_them() {
    let dir = tempfile::tempdir().unwrap();
    let ids = dir.path().join("ids.yaml");
    std::fs::write(
        &ids,
        "identities:\n  alice:\n    access: admin\n    local:\n      user-id: 1000\n",
    )
    .unwrap();
    let mut d = Daemon::start(&[], &["--hold", "--identities", ids.to_str().unwrap()]);
    assert_eq!(d.stop(), Some(0));
    let log = d.log();
    let uid = nix::unistd::getuid().as_raw();
    let lines = messages(&log);
    let started = position(&log, "Started daemon.").unwrap();
    assert!(
        glob_matches(
            &event(
                &format!("user_updated:{uid},alice,admin"),
                "Updating admin user alice"
            ),
            lines[started + 1]
        ),
        "{log}"
    );
    assert!(
        glob_matches("POST /v1/identities * 200 (http+unix)", lines[started + 2]),
        "{log}"
    );
}
