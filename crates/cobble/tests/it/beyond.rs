//! What no Pebble can express, on real processes and real checks: services that wait for
//! checks (`requires-checks`), slow starters that are not killed (`start-grace`), restarts
//! for a check that stays down spaced out, and services that say when they are ready
//! (`readiness: notify`). The self-healing scenarios S8 and S9 built on them are in
//! `scenarios.rs`.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cobble_client::Method;

use crate::fixture::{
    Daemon, act, client, details_of, main_pid, raw, rt, service, times, wait_check_runs, wait_for,
};

/// A script that sends its arguments, each one assignment, to `$NOTIFY_SOCKET` as one
/// datagram, as `systemd-notify` does.
fn notify_script(dir: &Path) -> PathBuf {
    let path = dir.join("notify.py");
    fs::write(
        &path,
        "import os, socket, sys\n\
         address = os.environ['NOTIFY_SOCKET']\n\
         if address.startswith('@'):\n    address = '\\0' + address[1:]\n\
         s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)\n\
         s.sendto('\\n'.join(sys.argv[1:]).encode(), address)\n",
    )
    .unwrap();
    path
}

/// The environment of process `pid`.
fn environment(pid: u32) -> Vec<String> {
    fs::read(format!("/proc/{pid}/environ"))
        .unwrap_or_default()
        .split(|b| *b == 0)
        .map(|e| String::from_utf8_lossy(e).into_owned())
        .collect()
}

#[test]
fn a_notify_service_is_started_when_it_says_it_is_ready_and_not_before() {
    let root = tempfile::tempdir().unwrap();
    let notify = notify_script(root.path());
    let ready_at = root.path().join("ready-at");
    let layer = format!(
        "services:\n  svc:\n    override: replace\n    readiness: notify\n    \
         command: /bin/sh -c 'sleep 1; python3 {n} \"STATUS=warming up\"; sleep 1; date +%s.%N > {r}; python3 {n} READY=1 \"STATUS=serving\"; exec sleep 1000'\n  \
         plain:\n    override: replace\n    command: /bin/sh -c 'echo $$ > {p}; exec sleep 1000'\n",
        n = notify.display(),
        r = ready_at.display(),
        p = root.path().join("plain-pid").display(),
    );
    let d = Daemon::hold(&[("001-base", &layer)]);
    let c = client(&d);
    let id = rt()
        .block_on(c.services_action("start", &["svc".to_owned()]))
        .unwrap();
    // Past the okay delay, before READY=1: starting, the change still waits, and what it
    // said of itself is in the notes.
    wait_for("its status text", Duration::from_secs(10), || {
        service(&d, "svc")
            .reason
            .is_some_and(|r| r.contains("says \"warming up\""))
    });
    let info = service(&d, "svc");
    assert_eq!(info.current, "starting");
    assert!(
        info.reason
            .as_deref()
            .unwrap()
            .starts_with("starting: waiting for READY=1 until "),
        "{info:?}"
    );
    let change = rt().block_on(c.change(&id)).unwrap();
    assert!(!change.ready, "done before READY=1: {change:?}");

    let change = rt()
        .block_on(c.wait_change(&id, Some(Duration::from_secs(30))))
        .unwrap();
    assert_eq!(change.status, "Done", "{change:?}");
    let ready = times(&ready_at);
    assert_eq!(ready.len(), 1, "READY=1 was sent");
    let info = service(&d, "svc");
    assert_eq!(info.current, "active");
    assert_eq!(info.reason.as_deref(), Some("says \"serving\""));
    d.wait_log("Service \"svc\" is ready");

    // Only a service that says when it is ready is given a socket to say it on.
    act(&d, "start", &["plain"]);
    let plain = main_pid(&root.path().join("plain-pid"));
    assert!(
        !environment(plain)
            .iter()
            .any(|e| e.starts_with("NOTIFY_SOCKET=")),
        "{:?}",
        environment(plain)
    );
}

#[test]
fn a_ready_sent_by_a_process_that_is_not_the_services_is_ignored() {
    let root = tempfile::tempdir().unwrap();
    let pid_file = root.path().join("pid");
    let layer = format!(
        "services:\n  svc:\n    override: replace\n    readiness: notify\n    \
         command: /bin/sh -c 'echo $$ > {}; exec sleep 1000'\n",
        pid_file.display()
    );
    let d = Daemon::hold(&[("001-base", &layer)]);
    let c = client(&d);
    let id = rt()
        .block_on(c.services_action("start", &["svc".to_owned()]))
        .unwrap();
    let pid = main_pid(&pid_file);
    let address = environment(pid)
        .into_iter()
        .find_map(|e| e.strip_prefix("NOTIFY_SOCKET=").map(str::to_owned))
        .expect("NOTIFY_SOCKET in the service's environment");
    assert!(address.starts_with("@cobble-notify/"), "{address}");
    // The test process is no process of the service's, whatever user it runs as.
    use std::os::linux::net::SocketAddrExt;
    let to = std::os::unix::net::SocketAddr::from_abstract_name(&address.as_bytes()[1..]).unwrap();
    let sender = std::os::unix::net::UnixDatagram::unbound().unwrap();
    sender.send_to_addr(b"READY=1", &to).unwrap();
    d.wait_log("notify message from pid");
    assert!(
        d.log()
            .contains("ignored: not one of the service's processes"),
        "{}",
        d.log()
    );
    assert_eq!(service(&d, "svc").current, "starting");
    let change = rt().block_on(c.change(&id)).unwrap();
    assert!(!change.ready, "{change:?}");

    // The positive path, READY=1 from the service's own process group, is the test
    // above; the service stays starting here until it is stopped.
    let change = act(&d, "stop", &["svc"]);
    assert_eq!(change.status, "Done", "{change:?}");
}

#[test]
fn a_notify_service_that_exits_before_it_is_ready_fails_its_start() {
    let layer = "services:\n  svc:\n    override: replace\n    readiness: notify\n    \
                 command: /bin/sh -c 'echo no config; exit 3'\n    on-failure: ignore\n";
    let d = Daemon::hold(&[("001-base", layer)]);
    let change = act(&d, "start", &["svc"]);
    assert_eq!(change.status, "Error", "{change:?}");
    assert!(
        change
            .err
            .contains("service start attempt: exited quickly with code 3"),
        "{}",
        change.err
    );
}

#[test]
fn a_main_pid_other_than_its_own_is_refused_with_a_reason() {
    let root = tempfile::tempdir().unwrap();
    let notify = notify_script(root.path());
    let layer = format!(
        "services:\n  svc:\n    override: replace\n    readiness: notify\n    \
         command: /bin/sh -c 'python3 {} MAINPID=1 READY=1; exec sleep 1000'\n",
        notify.display()
    );
    let d = Daemon::hold(&[("001-base", &layer)]);
    let change = act(&d, "start", &["svc"]);
    assert_eq!(change.status, "Done", "{change:?}");
    d.wait_log("sent MAINPID=1, which is ignored");
}

/// A sender that tries what a service may send on its notify socket before it says it is
/// ready: 200 descriptors with explicit credentials, a barrier (waiting, bounded, for its
/// pipe to close), a datagram far over the limit, one with a NUL inside, a line that is not
/// UTF-8 and a flood. Each run appends `LABEL what` to `said` in `dir` as it goes; the
/// descriptors it passes are of files in `dir/passed`.
fn hostile_notify_script(dir: &Path) -> PathBuf {
    let path = dir.join("hostile.py");
    fs::create_dir_all(dir.join("passed")).unwrap();
    fs::write(dir.join("passed").join("file"), "").unwrap();
    fs::write(
        &path,
        "import array, os, select, socket, struct, sys\n\
         d, label = sys.argv[1], sys.argv[2]\n\
         def said(text):\n    open(os.path.join(d, 'said'), 'a').write(label + ' ' + text + '\\n')\n\
         address = os.environ['NOTIFY_SOCKET']\n\
         if address.startswith('@'):\n    address = '\\0' + address[1:]\n\
         s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)\n\
         s.connect(address)\n\
         rights = lambda fds: (socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array('i', fds))\n\
         creds = (socket.SOL_SOCKET, socket.SCM_CREDENTIALS, struct.pack('iII', os.getpid(), os.getuid(), os.getgid()))\n\
         passed = [os.open(os.path.join(d, 'passed', 'file'), os.O_RDONLY) for _ in range(200)]\n\
         s.sendmsg([b'STATUS=with descriptors\\nFDSTORE=1'], [rights(passed), creds])\n\
         for fd in passed:\n    os.close(fd)\n\
         r, w = os.pipe()\n\
         s.sendmsg([b'BARRIER=1'], [rights([w])])\n\
         os.close(w)\n\
         p = select.poll()\n\
         p.register(r, select.POLLHUP)\n\
         if not p.poll(60000):\n    said('barrier unanswered')\n    sys.exit(1)\n\
         said('barrier answered')\n\
         s.send(b'STATUS=' + b'x' * 100000)\n\
         s.send(b'READY=1\\0STATUS=nul')\n\
         s.send(b'STATUS=\\xff\\xfe\\nSTATUS=not utf-8')\n\
         for i in range(300):\n    s.send(b'STATUS=flood %d' % i)\n\
         s.send(b'READY=1\\nSTATUS=ready')\n\
         said('ready sent')\n\
         os.execvp('sleep', ['sleep', '1000'])\n",
    )
    .unwrap();
    path
}

/// The bug this pins: a datagram with a descriptor (`systemd-notify`'s barrier) ended the
/// socket's reader, and every later run of the service was refused at its address.
#[test]
fn a_notify_socket_takes_whatever_a_service_sends_and_still_hears_ready_in_every_run() {
    let root = tempfile::tempdir().unwrap();
    let script = hostile_notify_script(root.path());
    let layer = format!(
        "services:\n  svc:\n    override: replace\n    readiness: notify\n    \
         command: python3 {} {} run\n",
        script.display(),
        root.path().display()
    );
    let d = Daemon::hold(&[("001-base", &layer)]);
    let said = root.path().join("said");
    for run in 1..=2 {
        let action = if run == 1 { "start" } else { "restart" };
        let change = act(&d, action, &["svc"]);
        assert_eq!(change.status, "Done", "run {run}: {change:?}\n{}", d.log());
        assert_eq!(
            crate::fixture::lines(&said),
            ["run barrier answered", "run ready sent"].repeat(run),
            "run {run}"
        );
        let info = service(&d, "svc");
        assert_eq!(info.current, "active");
        assert_eq!(info.reason.as_deref(), Some("says \"ready\""));
    }
    d.wait_log("ignored: longer than 4096 bytes");
    d.wait_log("ignored: it holds a NUL byte");
    let log = d.log();
    assert!(!log.contains("notify socket failed"), "{log}");
    assert_eq!(
        log.matches("ignored: longer than 4096 bytes").count(),
        2,
        "said once a run: {log}"
    );
    assert!(
        !crate::fixture::has_file_open_in(d.pid(), &root.path().join("passed")),
        "the daemon keeps no descriptor it was passed"
    );
}

/// Should the reader of a notify socket die all the same, it is started again on the same
/// socket, and what was sent meanwhile is read then.
#[test]
fn a_notify_reader_that_dies_is_started_again_on_the_same_address() {
    let root = tempfile::tempdir().unwrap();
    let notify = notify_script(root.path());
    let layer = format!(
        "services:\n  svc:\n    override: replace\n    readiness: notify\n    \
         command: /bin/sh -c 'python3 {n} {panic}=1; python3 {n} READY=1; exec sleep 1000'\n",
        n = notify.display(),
        panic = cobble_daemon::PANIC_SIGNAL
    );
    let d = Daemon::start_with_env(
        &[("001-base", &layer)],
        &["--hold"],
        &[("COBBLE_TEST_FAULTS", "1")],
    );
    let change = act(&d, "start", &["svc"]);
    assert_eq!(change.status, "Done", "{change:?}\n{}", d.log());
    d.wait_log(
        "Service \"svc\" notify socket failed: its reader panicked; reading it again in 100ms",
    );
    let change = act(&d, "restart", &["svc"]);
    assert_eq!(change.status, "Done", "{change:?}\n{}", d.log());
}

/// systemd's own sender, which follows each message with a barrier, when it is installed.
#[test]
fn systemd_notify_can_say_a_service_is_ready_in_every_run() {
    let program = Path::new("/usr/bin/systemd-notify");
    if !program.exists() {
        eprintln!("skipped: systemd-notify is not installed (Debian's systemd package)");
        return;
    }
    let layer = format!(
        "services:\n  svc:\n    override: replace\n    readiness: notify\n    \
         command: /bin/sh -c '{} --ready --status=serving; exec sleep 1000'\n",
        program.display()
    );
    let d = Daemon::hold(&[("001-base", &layer)]);
    // systemd-notify speaks as soon as it runs, which on a loaded machine can be before the
    // daemon has its pid back from the spawn: every run, many times over.
    let actions = std::iter::once("start").chain(std::iter::repeat_n("restart", 9));
    for action in actions {
        let c = client(&d);
        let change = rt()
            .block_on(async {
                let id = c.services_action(action, &["svc".to_owned()]).await?;
                c.wait_change(&id, Some(Duration::from_secs(60))).await
            })
            .unwrap_or_else(|e| panic!("{action}: {e}\n{}", d.log()));
        assert_eq!(change.status, "Done", "{action}: {change:?}\n{}", d.log());
        assert_eq!(
            service(&d, "svc").reason.as_deref(),
            Some("says \"serving\"")
        );
    }
    assert!(!d.log().contains("notify socket failed"), "{}", d.log());
}

/// A database that opens its port after `delay` (S8's server), and a check of that port.
fn db_layer(root: &Path, port: u16, delay: f64) -> String {
    let server = crate::scenarios::slow_server(root, "db", port, delay);
    format!(
        "services:\n  db:\n    override: replace\n    command: python3 {server}\n    backoff-delay: 100ms\n\
         checks:\n  db-ready:\n    override: replace\n    level: ready\n    period: 300ms\n    threshold: 1\n    \
         tcp:\n      port: {port}\n      host: 127.0.0.1\n",
        server = server.display()
    )
}

/// `app`, which requires `db` and waits for its check.
fn app_layer(root: &Path) -> String {
    format!(
        "services:\n  app:\n    override: replace\n    \
         command: /bin/sh -c 'echo start $(date +%s.%N) >> {starts}; exec sleep 1000'\n    \
         requires: [db]\n    after: [db]\n    requires-checks: [db-ready]\n",
        starts = root.join("app-starts").display()
    )
}

#[test]
fn a_service_requiring_a_check_waits_without_failing_and_starts_once_it_passes() {
    let root = tempfile::tempdir().unwrap();
    let port = crate::fixture::free_port();
    let d = Daemon::hold(&[
        ("001-database", &db_layer(root.path(), port, 2.0)),
        ("002-application", &app_layer(root.path())),
    ]);
    // The start of app (and db, which it requires) is done at once: app waits, it has not
    // failed.
    let change = act(&d, "start", &["app"]);
    assert_eq!(change.status, "Done", "{change:?}");
    let app = service(&d, "app");
    assert_eq!(app.current, "waiting");
    assert_eq!(
        app.reason.as_deref(),
        Some("waiting for check db-ready to succeed")
    );
    assert!(times(&root.path().join("app-starts")).is_empty());
    wait_for("app to start", Duration::from_secs(20), || {
        !times(&root.path().join("app-starts")).is_empty()
    });
    let bind = times(&root.path().join("db-binds"))[0];
    let start = times(&root.path().join("app-starts"))[0];
    assert!(
        start >= bind,
        "app started at {start}, before db listened at {bind}"
    );
    wait_for("app active", Duration::from_secs(20), || {
        service(&d, "app").current == "active"
    });
    assert_eq!(times(&root.path().join("app-starts")).len(), 1);
}

#[test]
fn a_layer_requiring_a_check_that_is_not_in_the_plan_is_refused_and_changes_nothing() {
    let d = Daemon::hold(&[(
        "001-base",
        "services:\n  a:\n    override: replace\n    command: sleep 1000\n",
    )]);
    let (_, before) = raw(&d, Method::GET, "/v1/plan?format=yaml", None);
    let layer = "services:\n  a:\n    override: merge\n    requires-checks: [nope]\n";
    let body = serde_json::json!({
        "action": "add", "combine": true, "label": "x", "format": "yaml", "layer": layer,
    });
    let (status, answer) = raw(&d, Method::POST, "/v1/layers", Some(&body.to_string()));
    assert_eq!(status, 400, "{answer}");
    assert!(
        answer.contains(
            r#"plan service \"a\" requires-checks names \"nope\", which is not a check of the plan"#
        ),
        "{answer}"
    );
    let (_, after) = raw(&d, Method::GET, "/v1/plan?format=yaml", None);
    assert_eq!(before, after);
}

#[test]
fn the_new_fields_are_shown_in_the_plan() {
    let layer = "services:\n  a:\n    override: replace\n    command: sleep 1000\n    \
                 requires-checks: [up]\n    start-grace: 1m\n    readiness: notify\n\
                 checks:\n  up:\n    override: replace\n    exec:\n      command: 'true'\n";
    let d = Daemon::hold(&[("001-base", layer)]);
    let (_, plan) = raw(&d, Method::GET, "/v1/plan?format=yaml", None);
    let plan: serde_json::Value = serde_json::from_str(&plan).unwrap();
    let text = plan["result"].as_str().unwrap();
    assert!(
        text.contains(
            "        requires-checks:\n            - up\n        start-grace: 1m0s\n        readiness: notify\n"
        ),
        "{text}"
    );
}

/// The restarts one check causes while it stays down are spaced by the service's backoff
/// schedule, even though the process runs fine between them, and end when it is up.
#[test]
fn restarts_for_a_check_that_stays_down_back_off_and_stop_when_it_is_up() {
    let root = tempfile::tempdir().unwrap();
    let healthy = root.path().join("healthy");
    let starts = root.path().join("starts");
    fs::write(&healthy, "").unwrap();
    let layer = format!(
        "services:\n  svc:\n    override: replace\n    \
         command: /bin/sh -c 'echo start $(date +%s.%N) >> {starts}; exec sleep 1000'\n    \
         on-check-failure:\n      ok: restart\n\
         checks:\n  ok:\n    override: replace\n    period: 500ms\n    threshold: 2\n    \
         exec:\n      command: test -f {healthy}\n",
        starts = starts.display(),
        healthy = healthy.display(),
    );
    let d = Daemon::hold(&[("001-base", &layer)]);
    act(&d, "start", &["svc"]);
    fs::remove_file(&healthy).unwrap();
    let outage = Instant::now();
    // While it lasts, `why` says how many restarts this outage caused and when the next
    // may come.
    wait_for("a second restart", Duration::from_secs(15), || {
        times(&starts).len() >= 3
    });
    let c = client(&d);
    let details = details_of(&d, "svc");
    let streak = details
        .check_restarts
        .first()
        .unwrap_or_else(|| panic!("{details:?}"));
    assert_eq!(streak.check, "ok");
    assert!(streak.restarts >= 2, "{streak:?}");
    assert!(!streak.next_after.is_empty());
    // A 30 s outage.
    std::thread::sleep(Duration::from_secs(30).saturating_sub(outage.elapsed()));
    fs::write(&healthy, "").unwrap();
    let during = times(&starts);
    let restarts = during.len() - 1;
    assert!(restarts >= 4, "only {restarts} restarts: {during:?}");
    let gaps: Vec<f64> = during.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(
        gaps.last().unwrap() > &(2.0 * gaps[1]),
        "the spacing did not grow: {gaps:?}"
    );
    // Up again: back from the backoff it may be in at once, then no more restarts, and
    // nothing left to say about the streak.
    wait_for("the check up", Duration::from_secs(10), || {
        rt().block_on(c.checks("", &[])).unwrap()[0].status == "up"
    });
    // The supervisor hears of the recovery after the check's own report says it: the
    // streak is over once the service's details have nothing left to say of it.
    wait_for(
        "the service active with the streak over",
        Duration::from_secs(60),
        || {
            service(&d, "svc").current == "active"
                && details_of(&d, "svc").check_restarts.is_empty()
        },
    );
    // Counted by the daemon, which counts a start when it spawns: the line the process
    // writes may come after `active` is reported.
    let settled = details_of(&d, "svc").start_count;
    wait_check_runs(&d, "ok", 6);
    let details = details_of(&d, "svc");
    assert_eq!(details.start_count, settled, "restarted after recovery");
    assert!(details.check_restarts.is_empty(), "{details:?}");
}
