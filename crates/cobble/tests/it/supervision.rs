//! Supervision on real processes: the okay delay, quick exits, backoff and its reset,
//! kill-delay escalation, process groups, ordering and lanes, autostart, shutdown order and
//! exit codes, orphan reaping, and state that survives a restart.
//!
//! Behavioural timings are asserted only as lower bounds (a delay is at least as long as it
//! should be), which no slow machine can break; whatever must not happen is proved by a later
//! event that has to follow it. How fast anything happens is for the benchmark harness.

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::fixture::{Daemon, client, lines, rt, times, wait_for};

const LONG: Duration = Duration::from_secs(20);

fn current(daemon: &Daemon, service: &str) -> String {
    let c = client(daemon);
    rt().block_on(async { c.services(&[service.to_owned()]).await })
        .expect("services")
        .into_iter()
        .next()
        .map(|s| s.current)
        .unwrap_or_default()
}

/// Runs `action` on `names` and waits for its change; returns (change, elapsed).
fn act(
    daemon: &Daemon,
    action: &str,
    names: &[&str],
) -> (cobble_client::types::ChangeInfo, Duration) {
    let c = client(daemon);
    let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
    rt().block_on(async {
        let started = Instant::now();
        let id = c.services_action(action, &names).await.expect("action");
        let change = c.wait_change(&id, Some(LONG)).await.expect("wait");
        (change, started.elapsed())
    })
}

fn pid_alive(pid: i32) -> bool {
    // A zombie still answers kill(0); count it as gone only once reaped.
    Path::new(&format!("/proc/{pid}")).exists()
}

#[test]
fn start_waits_for_the_okay_delay() {
    let d = Daemon::hold(&[(
        "001-base",
        "services:\n  s:\n    override: replace\n    command: sleep 1000\n",
    )]);
    let (change, elapsed) = act(&d, "start", &["s"]);
    assert_eq!(change.status, "Done");
    assert!(elapsed >= Duration::from_millis(950), "{elapsed:?}");
    assert_eq!(current(&d, "s"), "active");
}

#[test]
fn quick_exit_errors_with_the_last_output_and_keeps_retrying() {
    let d = Daemon::hold(&[(
        "001-base",
        "services:\n  s:\n    override: replace\n    command: /bin/sh -c 'echo first line; echo boom >&2; exit 3'\n",
    )]);
    let (change, _) = act(&d, "start", &["s"]);
    assert_eq!(change.status, "Error");
    assert_eq!(
        change.err,
        "cannot perform the following tasks:\n- Start service \"s\" (service start attempt: exited quickly with code 3, will restart)"
    );
    let log = &change.tasks[0].log;
    assert!(
        log[0].ends_with("INFO Most recent service output:\n    first line\n    boom"),
        "{log:?}"
    );
    // The restart policy goes on: the service is backing off or briefly active again.
    let status = current(&d, "s");
    assert!(status == "backoff" || status == "active", "{status}");
}

/// Pebble writes the heading even when the service wrote nothing, with its indent.
#[test]
fn quick_exit_without_output_still_has_the_heading_in_the_task_log() {
    let d = Daemon::hold(&[(
        "001-base",
        "services:\n  s:\n    override: replace\n    command: /bin/sh -c 'exit 1'\n    on-failure: ignore\n",
    )]);
    let (change, _) = act(&d, "start", &["s"]);
    assert_eq!(change.status, "Error");
    let log = &change.tasks[0].log;
    assert_eq!(log.len(), 2, "{log:?}");
    assert!(
        log[0].ends_with(" INFO Most recent service output:\n    "),
        "{log:?}"
    );
    assert!(
        log[1].ends_with(" ERROR service start attempt: exited quickly with code 1, will ignore"),
        "{log:?}"
    );
}

#[test]
fn spawn_failure_is_reported_like_go() {
    let d = Daemon::hold(&[(
        "001-base",
        "services:\n  a:\n    override: replace\n    command: /no/such/binary\n  b:\n    override: replace\n    command: no-such-binary-anywhere\n",
    )]);
    let (change, _) = act(&d, "start", &["a"]);
    assert!(
        change.err.ends_with(
            "(cannot start service: fork/exec /no/such/binary: no such file or directory)"
        ),
        "{}",
        change.err
    );
    let (change, _) = act(&d, "start", &["b"]);
    assert!(
        change.err.ends_with(
            "(cannot start service: exec: \"no-such-binary-anywhere\": executable file not found in $PATH)"
        ),
        "{}",
        change.err
    );
    // Pebble leaves it inactive for good; cobble keeps retrying in case the binary appears.
    assert_eq!(current(&d, "a"), "backoff");
}

#[test]
fn backoff_grows_to_the_limit_and_resets_after_a_long_run() {
    let root = tempfile::tempdir().unwrap();
    let starts = root.path().join("starts");
    let count = root.path().join("count");
    // Runs 1-4 and 6 exit after 0.1 s; run 5 lasts longer than the backoff limit.
    let script = format!(
        "n=$(($(cat {c} 2>/dev/null || echo 0)+1)); echo $n > {c}; echo $n $(date +%s.%N) >> {s}; \
         if [ $n -eq 5 ]; then sleep 1.5; else sleep 0.1; fi; exit 2",
        c = count.display(),
        s = starts.display()
    );
    let layer = format!(
        "services:\n  s:\n    override: replace\n    command: /bin/sh -c '{script}'\n    \
         backoff-delay: 200ms\n    backoff-factor: 2\n    backoff-limit: 1s\n"
    );
    let d = Daemon::hold(&[("001-base", &layer)]);
    act(&d, "start", &["s"]);
    wait_for("seven starts", LONG, || times(&starts).len() >= 7);
    // The delays the daemon chose, from its log: they grow to the limit, and a run longer
    // than the limit resets them.
    let chosen: Vec<String> = d
        .log()
        .lines()
        .filter_map(|l| l.split_once("Service \"s\" on-failure action is \"restart\", waiting ~"))
        .map(|(_, rest)| rest.to_owned())
        .take(6)
        .collect();
    assert_eq!(
        chosen,
        [
            "200ms before restart (backoff 1)",
            "400ms before restart (backoff 2)",
            "800ms before restart (backoff 3)",
            "1s before restart (backoff 4)",
            "200ms before restart (backoff 1)",
            "400ms before restart (backoff 2)",
        ],
        "{}",
        d.log()
    );
    // And each delay is waited: the gap between starts is at least run time + delay.
    let t = times(&starts);
    let gaps: Vec<f64> = t.windows(2).map(|w| w[1] - w[0]).collect();
    let expected_delay = [0.2, 0.4, 0.8, 1.0, 0.2, 0.4];
    let run_time = [0.1, 0.1, 0.1, 0.1, 1.5, 0.1];
    for (i, gap) in gaps.iter().take(6).enumerate() {
        let least = run_time[i] + expected_delay[i];
        assert!(
            *gap >= least - 0.05,
            "gap {i} was {gap:.3}s, expected at least {least:.3}s; all gaps {gaps:?}"
        );
    }
}

#[test]
fn stop_escalates_to_sigkill_after_the_kill_delay() {
    let d = Daemon::hold(&[(
        "001-base",
        "services:\n  s:\n    override: replace\n    command: /bin/sh -c 'trap \"\" TERM; sleep 1000'\n    kill-delay: 1s\n",
    )]);
    act(&d, "start", &["s"]);
    let (change, elapsed) = act(&d, "stop", &["s"]);
    // The process ignores SIGTERM: only the SIGKILL can have stopped it.
    assert_eq!(change.status, "Done", "{change:?}");
    assert!(elapsed >= Duration::from_millis(950), "{elapsed:?}");
    assert_eq!(current(&d, "s"), "inactive");
}

#[test]
fn stop_kills_the_whole_process_group() {
    let root = tempfile::tempdir().unwrap();
    let pidfile = root.path().join("child.pid");
    let layer = format!(
        "services:\n  s:\n    override: replace\n    command: /bin/sh -c 'sleep 1000 & echo $! > {}; wait'\n",
        pidfile.display()
    );
    let d = Daemon::hold(&[("001-base", &layer)]);
    act(&d, "start", &["s"]);
    wait_for("grandchild pid", LONG, || !lines(&pidfile).is_empty());
    let grandchild: i32 = lines(&pidfile)[0].parse().unwrap();
    assert!(pid_alive(grandchild));
    act(&d, "stop", &["s"]);
    wait_for("grandchild to be gone", LONG, || !pid_alive(grandchild));
}

#[test]
fn requires_shares_a_lane_and_independent_services_start_in_parallel() {
    let root = tempfile::tempdir().unwrap();
    let log = root.path().join("order");
    let svc = |name: &str, extra: &str| {
        format!(
            "  {name}:\n    override: replace\n    command: /bin/sh -c 'echo {name} $(date +%s.%N) >> {}; sleep 1000'\n{extra}",
            log.display()
        )
    };
    let layer = format!(
        "services:\n{}{}{}{}",
        svc("db", ""),
        svc("app", "    requires: [db]\n    after: [db]\n"),
        svc("x", ""),
        svc("y", "")
    );
    let d = Daemon::hold(&[("001-base", &layer)]);
    // app pulls in db and starts after db's okay delay.
    let (change, _) = act(&d, "start", &["app"]);
    assert_eq!(change.summary, "Start service \"app\" and 1 more");
    let order = lines(&log);
    assert!(
        order[0].starts_with("db ") && order[1].starts_with("app "),
        "{order:?}"
    );
    let t = times(&log);
    assert!(
        t[1] - t[0] >= 0.9,
        "app started {:.3}s after db",
        t[1] - t[0]
    );
    // Independent services run in separate lanes: each is launched before the other's start
    // task is done (in one lane, the second would wait for the first's okay delay).
    let (change, _) = act(&d, "start", &["x", "y"]);
    assert_eq!(change.status, "Done");
    let launched = |name: &str| {
        let prefix = format!("{name} ");
        let line = lines(&log).into_iter().find(|l| l.starts_with(&prefix));
        let stamp = line.unwrap_or_else(|| panic!("{name} never launched"));
        stamp[prefix.len()..].parse::<f64>().unwrap()
    };
    let done = |name: &str| {
        let summary = format!("Start service \"{name}\"");
        let task = change.tasks.iter().find(|t| t.summary == summary).unwrap();
        let ready: jiff::Timestamp = task.ready_time.as_deref().unwrap().parse().unwrap();
        ready.as_nanosecond() as f64 / 1e9
    };
    assert!(launched("y") < done("x"), "y waited for x: {change:?}");
    assert!(launched("x") < done("y"), "x waited for y: {change:?}");
    // Stopping db stops its dependent first.
    let (change, _) = act(&d, "stop", &["db"]);
    let summaries: Vec<&str> = change.tasks.iter().map(|t| t.summary.as_str()).collect();
    assert_eq!(summaries, ["Stop service \"app\"", "Stop service \"db\""]);
}

#[test]
fn autostart_unless_held() {
    let layer = "services:\n  on:\n    override: replace\n    command: sleep 1000\n    startup: enabled\n  off:\n    override: replace\n    command: sleep 1000\n";
    let d = Daemon::start(&[("001-base", layer)], &[]);
    wait_for("autostart", LONG, || current(&d, "on") == "active");
    assert_eq!(current(&d, "off"), "inactive");
    // Held: the autostart change would be recorded before the daemon waits for signals, so
    // after a clean stop its state shows whether there was one.
    let mut held = Daemon::hold(&[("001-base", layer)]);
    assert_eq!(held.stop(), Some(0));
    held.restart(&["--hold"]);
    let changes = rt()
        .block_on(client(&held).changes(cobble_client::ChangeSelector::All, None))
        .expect("changes");
    assert_eq!(changes, [], "no autostart change");
    assert_eq!(current(&held, "on"), "inactive");
}

#[test]
fn sigterm_stops_services_in_reverse_order_and_exits_zero() {
    let root = tempfile::tempdir().unwrap();
    let log = root.path().join("stopped");
    let trapped = root.path().join("trapped");
    let svc = |name: &str, extra: &str| {
        format!(
            "  {name}:\n    override: replace\n    startup: enabled\n    command: /bin/sh -c 'trap \"echo {name} >> {}; exit 0\" TERM; echo {name} >> {}; while true; do sleep 0.05; done'\n{extra}",
            log.display(),
            trapped.display()
        )
    };
    let layer = format!(
        "services:\n{}{}",
        svc("db", ""),
        svc("app", "    requires: [db]\n    after: [db]\n")
    );
    let mut d = Daemon::start(&[("001-base", &layer)], &[]);
    wait_for("both active", LONG, || {
        current(&d, "db") == "active" && current(&d, "app") == "active"
    });
    // Listed active from the spawn on: wait until each shell has set its trap, or a SIGTERM
    // that comes first ends it without a word.
    wait_for("both trapping SIGTERM", LONG, || lines(&trapped).len() == 2);
    assert_eq!(d.stop(), Some(0));
    assert_eq!(lines(&log), ["app", "db"]);
}

#[test]
fn shutdown_actions_set_the_exit_code() {
    let cases = [
        ("on-failure: shutdown", "exit 1", 10),
        ("on-success: shutdown", "exit 0", 0),
        ("on-success: failure-shutdown", "exit 0", 10),
        ("on-failure: success-shutdown", "exit 7", 0),
    ];
    for (action, exit, code) in cases {
        let layer = format!(
            "services:\n  s:\n    override: replace\n    startup: enabled\n    command: /bin/sh -c 'sleep 0.2; {exit}'\n    {action}\n"
        );
        let mut d = Daemon::start(&[("001-base", &layer)], &[]);
        assert_eq!(
            d.wait_exit(LONG),
            Some(code),
            "{action} after {exit}\n{}",
            d.log()
        );
    }
}

#[test]
fn orphans_are_adopted_and_reaped() {
    let root = tempfile::tempdir().unwrap();
    let pidfile = root.path().join("orphan.pid");
    // The subshell exits at once, orphaning its `sleep`, which the daemon (a subreaper) adopts.
    let layer = format!(
        "services:\n  s:\n    override: replace\n    command: /bin/sh -c '(sleep 3 & echo $! > {}); sleep 1000'\n",
        pidfile.display()
    );
    let d = Daemon::hold(&[("001-base", &layer)]);
    act(&d, "start", &["s"]);
    let orphan: u32 = lines(&pidfile)[0].parse().unwrap();
    assert_eq!(
        parent_of(orphan),
        Some(d.pid()),
        "orphan adopted by the daemon"
    );
    wait_for("orphan reaped", LONG, || parent_of(orphan).is_none());
    assert_eq!(zombies_of(d.pid()), 0);
}

/// The parent pid of a live (or zombie) process.
fn parent_of(pid: u32) -> Option<u32> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.rsplit_once(')')?.1;
    rest.split_whitespace().nth(1)?.parse().ok()
}

pub(crate) fn zombies_of(parent: u32) -> usize {
    fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter_map(|e| fs::read_to_string(e.path().join("stat")).ok())
        .filter(|stat| {
            // "pid (comm) S ppid ..." — comm may contain spaces, so split after the last ')'.
            let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
            let mut fields = rest.split_whitespace();
            let state = fields.next();
            let ppid = fields.next().and_then(|p| p.parse::<u32>().ok());
            state == Some("Z") && ppid == Some(parent)
        })
        .count()
}

#[test]
fn changes_survive_a_daemon_restart_and_ids_keep_counting() {
    let layer = "services:\n  s:\n    override: replace\n    command: sleep 1000\n";
    let mut d = Daemon::hold(&[("001-base", layer)]);
    let (first, _) = act(&d, "start", &["s"]);
    assert_eq!(d.stop(), Some(0));
    d.restart(&["--hold"]);
    let c = client(&d);
    let old = rt()
        .block_on(c.change(&first.id))
        .expect("change after restart");
    assert_eq!(old.summary, first.summary);
    assert_eq!(old.status, "Done");
    let (second, _) = act(&d, "start", &["s"]);
    assert!(second.id.parse::<u64>().unwrap() > first.id.parse::<u64>().unwrap());
}

#[test]
fn persist_never_writes_no_state_file() {
    let layer = "services:\n  s:\n    override: replace\n    command: sleep 1000\n";
    let mut d = Daemon::start_with_env(
        &[("001-base", layer)],
        &["--hold"],
        &[("PEBBLE_PERSIST", "never")],
    );
    act(&d, "start", &["s"]);
    // With persistence, a clean stop writes what is unwritten before the daemon exits.
    assert_eq!(d.stop(), Some(0));
    assert!(!d.pebble_dir().join(".pebble.state").exists());
}

#[test]
fn verbose_copies_service_output_to_stdout() {
    let d = Daemon::start(
        &[(
            "001-base",
            "services:\n  s:\n    override: replace\n    startup: enabled\n    command: /bin/sh -c 'echo hello from s; sleep 1000'\n",
        )],
        &["--verbose"],
    );
    wait_for("output line", LONG, || d.log().contains("[s] hello from s"));
    let line = d
        .log()
        .lines()
        .find(|l| l.contains("[s] hello"))
        .unwrap()
        .to_owned();
    // 2024-06-28T02:20:03.346Z [s] hello from s
    assert_eq!(
        line.len(),
        "2024-06-28T02:20:03.346Z [s] hello from s".len(),
        "{line}"
    );
    assert!(line.as_bytes()[23] == b'Z', "{line}");
}

#[test]
fn service_args_replace_the_default_arguments() {
    let d = Daemon::start(
        &[(
            "001-base",
            "services:\n  s:\n    override: replace\n    command: sleep [ 1000 ]\n",
        )],
        &["--hold", "--args", "s", "2000", ";"],
    );
    let c = client(&d);
    let plan = rt().block_on(c.plan_yaml()).unwrap();
    assert!(plan.contains("command: sleep [ 2000 ]"), "{plan}");
}

#[test]
fn sigterm_as_soon_as_the_socket_exists_stops_the_daemon_in_order() {
    // Regression: stop signals were caught only after start-up, so an early SIGTERM killed
    // the daemon outright and left autostarted services running.
    for _ in 0..5 {
        let root = tempfile::tempdir().unwrap();
        let pebble = root.path().join("pebble");
        fs::create_dir_all(pebble.join("layers")).unwrap();
        fs::write(
            pebble.join("layers/001-base.yaml"),
            "services:\n  s:\n    override: replace\n    startup: enabled\n    command: sleep 1000\n",
        )
        .unwrap();
        let mut child = std::process::Command::new(crate::fixture::COBBLE)
            .arg("run")
            .env("PEBBLE", &pebble)
            .env_remove("PEBBLE_SOCKET")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let socket = pebble.join(".pebble.socket");
        wait_for("socket file", LONG, || socket.exists());
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        let deadline = Instant::now() + LONG;
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            assert!(Instant::now() < deadline, "daemon did not stop");
            std::thread::sleep(Duration::from_millis(10));
        };
        assert_eq!(status.code(), Some(0), "{status:?}");
    }
}
