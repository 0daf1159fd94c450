//! The self-healing scenarios (S2, S5 to S10) on real processes, with their bounds. S1 is
//! the founding case (tests/compat/test_founding_case.py and self_healing.rs), S3 the
//! on-file-change tests and S4 the crashed-daemon test in self_healing.rs. The times of S8
//! and S9 are scaled down (a database ready after 3 s rather than 20 s, a slow starter that
//! binds after 4 s rather than 40 s); their shape is the reference's.

use std::fs;
use std::path::Path;
use std::time::Duration;

use crate::fixture::{
    Daemon, act, client, details_of, free_port, lines, rt, service, times, wait_check_runs,
    wait_for,
};

/// Past this, a request is held, not answered, whatever the machine's load.
const HELD: Duration = Duration::from_secs(30);

fn metrics(d: &Daemon) -> String {
    let c = client(d);
    let raw = rt()
        .block_on(c.raw_request(cobble_client::Method::GET, "/v1/metrics", None))
        .unwrap();
    String::from_utf8_lossy(&raw.body).into_owned()
}

fn metric(d: &Daemon, line_prefix: &str) -> Option<u64> {
    metrics(d)
        .lines()
        .find_map(|l| l.strip_prefix(line_prefix)?.trim().parse().ok())
}

/// S2: the check stays down after the restart it triggered. Pebble restarts once; cobble
/// keeps restarting with growing delays while the check is down, and stops once it is up.
#[test]
fn s2_check_actions_refire_while_the_check_stays_down() {
    let root = tempfile::tempdir().unwrap();
    let healthy = root.path().join("healthy");
    let starts = root.path().join("starts");
    fs::write(&healthy, "").unwrap();
    let layer = format!(
        "services:\n  svc:\n    override: replace\n    command: /bin/sh -c 'echo start $(date +%s.%N) >> {starts}; exec sleep 1000'\n    \
         on-check-failure:\n      ok: restart\n\
         checks:\n  ok:\n    override: replace\n    period: 1s\n    threshold: 2\n    exec:\n      command: test -f {healthy}\n",
        starts = starts.display(),
        healthy = healthy.display(),
    );
    let d = Daemon::hold(&[("001-base", &layer)]);
    act(&d, "start", &["svc"]);
    fs::remove_file(&healthy).unwrap();
    // The scenario allows 60 s of outage for three restarts.
    wait_for("three restarts", Duration::from_secs(60), || {
        times(&starts).len() >= 4
    });
    let t = times(&starts);
    for gap in t.windows(2).map(|w| w[1] - w[0]) {
        assert!(gap >= 0.5, "restarts closer than the backoff floor: {t:?}");
    }
    assert!(
        metric(&d, "cobble_check_action_count{check=\"ok\"}").unwrap_or(0) >= 3,
        "{}",
        metrics(&d)
    );
    let reason = service(&d, "svc").reason.unwrap_or_default();
    assert!(reason.contains("check ok failing since"), "{reason}");
    fs::write(&healthy, "").unwrap();
    // Up at its next run; then no more restarts, however often it passes. The supervisor
    // hears of the recovery after the check's own report says it: the streak is over once
    // the service's details have nothing left to say of it.
    wait_for("check up", Duration::from_secs(60), || {
        metrics(&d).contains("pebble_check_up{check=\"ok\"} 1")
    });
    wait_for("the streak over", Duration::from_secs(60), || {
        let details = details_of(&d, "svc");
        details.check_restarts.is_empty() && service(&d, "svc").current == "active"
    });
    // Counted by the daemon when it spawns: a run's own line may come later.
    let settled = details_of(&d, "svc").start_count;
    wait_check_runs(&d, "ok", 3);
    assert_eq!(
        details_of(&d, "svc").start_count,
        settled,
        "restarted after the check recovered"
    );
}

/// S5: an orphaned grandchild in its own session keeps the port and ignores SIGTERM. A
/// restart must end it and let the new instance bind the port.
#[test]
fn s5_restart_ends_escaped_grandchildren_that_hold_the_port() {
    let root = tempfile::tempdir().unwrap();
    let port = free_port();
    let binds = root.path().join("binds");
    let server = root.path().join("server.py");
    fs::write(
        &server,
        format!(
            "import os, signal, socket, sys, time\n\
             signal.signal(signal.SIGTERM, signal.SIG_IGN)\n\
             s = socket.socket()\n\
             try:\n    s.bind(('127.0.0.1', {port}))\nexcept OSError:\n    sys.exit(0)  # port busy: exit 0, like the Go webhook\n\
             s.listen()\n\
             open('{binds}', 'a').write(f'{{os.getpid()}}\\n')\n\
             time.sleep(1000)\n",
            binds = binds.display()
        ),
    )
    .unwrap();
    let layer = format!(
        "services:\n  web:\n    override: replace\n    command: /bin/sh -c 'setsid python3 {} & wait'\n    kill-delay: 1s\n    backoff-delay: 100ms\n",
        server.display()
    );
    let d = Daemon::hold(&[("001-base", &layer)]);
    act(&d, "start", &["web"]);
    wait_for("first bind", Duration::from_secs(10), || {
        lines(&binds).len() == 1
    });
    let old: u32 = lines(&binds)[0].parse().unwrap();
    let c = client(&d);
    rt().block_on(async {
        let id = c
            .services_action("restart", &["web".to_owned()])
            .await
            .unwrap();
        c.wait_change(&id, Some(Duration::from_secs(30)))
            .await
            .unwrap();
    });
    wait_for("second bind", Duration::from_secs(15), || {
        lines(&binds).len() == 2
    });
    let new: u32 = lines(&binds)[1].parse().unwrap();
    assert_ne!(old, new);
    wait_for("old instance gone", Duration::from_secs(20), || {
        !Path::new(&format!("/proc/{old}")).exists()
    });
    assert_eq!(crate::supervision::zombies_of(d.pid()), 0);
}

/// S6: a crash loop follows 0.5, 1, 2, 4, 8 s (+ up to 10 % jitter) with the default
/// backoff, never stops, and the start count matches the starts observed. The daemon says
/// each delay as it decides it, and no restart comes before its delay; how late after it a
/// restart lands is the machine's speed (the timer's exactness is the state machine's
/// tests', on paused time).
#[test]
fn s6_crash_loop_follows_the_default_backoff_and_never_gives_up() {
    let root = tempfile::tempdir().unwrap();
    let starts = root.path().join("starts");
    let layer = format!(
        "services:\n  s:\n    override: replace\n    command: /bin/sh -c 'echo start $(date +%s.%N) >> {}; sleep 1; exit 2'\n",
        starts.display()
    );
    let d = Daemon::hold(&[("001-base", &layer)]);
    act(&d, "start", &["s"]);
    // 21.5 s of runs and delays at the least.
    wait_for("six starts", Duration::from_secs(90), || {
        times(&starts).len() >= 6
    });
    let t = times(&starts);
    let expected = [0.5, 1.0, 2.0, 4.0, 8.0];
    for (i, gap) in t.windows(2).map(|w| w[1] - w[0]).take(5).enumerate() {
        let delay = gap - 1.0; // each run lasts one second at the least
        assert!(
            delay >= expected[i] - 0.05,
            "delay {i} was {delay:.3}s, before its {}s; starts {t:?}",
            expected[i]
        );
    }
    for (i, said) in ["500ms", "1s", "2s", "4s", "8s"].iter().enumerate() {
        d.wait_log(&format!(
            "Service \"s\" on-failure action is \"restart\", waiting ~{said} before restart (backoff {})",
            i + 1
        ));
    }
    let observed = times(&starts).len() as u64;
    let counted = metric(&d, "pebble_service_start_count{service=\"s\"}").unwrap();
    assert!(
        counted == observed || counted == observed + 1,
        "start count {counted}, observed {observed}"
    );
    let status = service(&d, "s").current;
    assert!(status == "backoff" || status == "active", "{status}");
}

/// S7: drift — the check targets a port nobody listens on. The manager keeps re-firing the
/// restart with backoff and says why; a service a client stopped stays stopped.
#[test]
fn s7_drift_keeps_refiring_and_is_explained_and_client_stops_are_final() {
    let port = free_port();
    let layer = format!(
        "services:\n  web:\n    override: replace\n    command: sleep 1000\n    on-check-failure:\n      up: restart\n\
         checks:\n  up:\n    override: replace\n    period: 300ms\n    threshold: 2\n    tcp:\n      host: 127.0.0.1\n      port: {port}\n"
    );
    let d = Daemon::hold(&[("001-base", &layer)]);
    act(&d, "start", &["web"]);
    wait_for("restarts", Duration::from_secs(15), || {
        metric(&d, "pebble_service_start_count{service=\"web\"}").unwrap_or(0) >= 3
    });
    let reason = service(&d, "web").reason.unwrap_or_default();
    assert!(reason.contains("check up failing since"), "{reason}");
    assert!(reason.contains("refused"), "{reason}");
    // A client's stop is final, however often the check fails.
    let c = client(&d);
    rt().block_on(async {
        let id = c
            .services_action("stop", &["web".to_owned()])
            .await
            .unwrap();
        c.wait_change(&id, Some(Duration::from_secs(30)))
            .await
            .unwrap();
    });
    let stopped_at = metric(&d, "pebble_service_start_count{service=\"web\"}").unwrap();
    wait_check_runs(&d, "up", 4);
    assert_eq!(service(&d, "web").current, "inactive");
    assert_eq!(
        metric(&d, "pebble_service_start_count{service=\"web\"}").unwrap(),
        stopped_at
    );
}

/// S10: a service floods stdout while the API keeps answering, memory stays bounded, and
/// SIGTERM stops both services in reverse dependency order, each by its own TERM handler
/// (not killed at the end of the kill-delay).
#[test]
fn s10_log_flood_stays_bounded_and_shutdown_is_orderly() {
    let root = tempfile::tempdir().unwrap();
    let done = root.path().join("done");
    let order = root.path().join("order");
    // About 200 MB of 1 KiB lines, as fast as the writer can.
    let layer = format!(
        "services:\n  flood:\n    override: replace\n    startup: enabled\n    \
         command: /bin/sh -c 'trap \"echo flood >> {order}; exit 0\" TERM; yes $(head -c 1000 /dev/zero | tr \"\\\\0\" x) | head -c 200000000; echo done > {done}; while true; do sleep 0.05; done'\n  \
         app:\n    override: replace\n    startup: enabled\n    requires: [flood]\n    after: [flood]\n    \
         command: /bin/sh -c 'trap \"echo app >> {order}; exit 0\" TERM; while true; do sleep 0.05; done'\n",
        order = order.display(),
        done = done.display(),
    );
    let mut d = Daemon::start(&[("001-base", &layer)], &[]);
    // The API answers all along: each request while the flood lasts is answered, not held
    // (a daemon busy with the flood's lines would hold it for as long as the flood).
    let c = client(&d);
    let rt = rt();
    loop {
        let flooded = done.exists();
        let services = rt
            .block_on(async { tokio::time::timeout(HELD, c.services(&[])).await })
            .unwrap_or_else(|_| panic!("held for {HELD:?} during the flood"))
            .unwrap();
        assert_eq!(services.len(), 2);
        if flooded {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let rss_kib: u64 = fs::read_to_string(format!("/proc/{}/status", d.pid()))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap();
    assert!(
        rss_kib < 64 * 1024,
        "daemon RSS {rss_kib} KiB after a 200 MB flood"
    );
    wait_for("app active", Duration::from_secs(10), || {
        service(&d, "app").current == "active"
    });
    assert_eq!(d.stop(), Some(0));
    // Each line is written by the service's TERM handler: neither was killed.
    assert_eq!(lines(&order), ["app", "flood"]);
}

/// A server that binds `port` `delay` seconds after it starts, noting each bind in `binds`,
/// and accepts connections until it is ended.
pub(crate) fn slow_server(root: &Path, name: &str, port: u16, delay: f64) -> std::path::PathBuf {
    let path = root.join(format!("{name}.py"));
    fs::write(
        &path,
        format!(
            "import os, socket, time\n\
             open('{pid}', 'w').write(str(os.getpid()))\n\
             time.sleep({delay})\n\
             s = socket.socket()\n\
             s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
             s.bind(('127.0.0.1', {port}))\n\
             s.listen()\n\
             open('{binds}', 'a').write(f'bind {{time.time()}}\\n')\n\
             while True:\n    c, _ = s.accept()\n    c.close()\n",
            binds = root.join(format!("{name}-binds")).display(),
            pid = root.join(format!("{name}-pid")).display(),
        ),
    )
    .unwrap();
    path
}

/// S8: a dependency that is not ready yet, then flaps. `app` and `app-restarts` require and
/// come after `db`, and wait for its ready check: neither is launched before the check
/// passes, and both are once it does. When `db` crashes later, each
/// follows the documented policy: `requires-checks` gates starts only, so `app` runs on;
/// `app-restarts`, whose `on-check-failure` names the check, is restarted and waits for it
/// again before its next launch.
#[test]
fn s8_dependents_start_once_the_dependency_is_ready_and_follow_the_policy_when_it_crashes() {
    let root = tempfile::tempdir().unwrap();
    let port = free_port();
    let db = slow_server(root.path(), "db", port, 3.0);
    let app = |name: &str, extra: &str| {
        format!(
            "  {name}:\n    override: replace\n    \
             command: /bin/sh -c 'echo start $(date +%s.%N) >> {starts}; exec sleep 1000'\n    \
             requires: [db]\n    after: [db]\n    requires-checks: [db-ready]\n{extra}",
            starts = root.path().join(format!("{name}-starts")).display()
        )
    };
    let layer = format!(
        "services:\n  db:\n    override: replace\n    command: python3 {db}\n    backoff-delay: 100ms\n{}{}\
         checks:\n  db-ready:\n    override: replace\n    level: ready\n    period: 500ms\n    threshold: 1\n    \
         tcp:\n      port: {port}\n      host: 127.0.0.1\n",
        app("app", ""),
        app(
            "app-restarts",
            "    on-check-failure:\n      db-ready: restart\n"
        ),
        db = db.display()
    );
    let d = Daemon::hold(&[("001-base", &layer)]);
    let starts = |name: &str| times(&root.path().join(format!("{name}-starts")));
    let binds = || times(&root.path().join("db-binds"));
    // The start returns at once: the dependents wait, which is no failure.
    let change = act(&d, "start", &["app", "app-restarts"]);
    assert_eq!(change.status, "Done", "{change:?}");
    for name in ["app", "app-restarts"] {
        assert_eq!(service(&d, name).current, "waiting");
    }
    wait_for("both dependents", Duration::from_secs(20), || {
        !starts("app").is_empty() && !starts("app-restarts").is_empty()
    });
    let ready = binds()[0];
    for name in ["app", "app-restarts"] {
        let first = starts(name)[0];
        assert!(
            first >= ready,
            "{name} started at {first}, before db listened at {ready}"
        );
    }

    // db crashes once.
    let db_pid: i32 = fs::read_to_string(root.path().join("db-pid"))
        .unwrap()
        .parse()
        .unwrap();
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &db_pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    wait_for("db back", Duration::from_secs(20), || binds().len() == 2);
    wait_for("app-restarts back", Duration::from_secs(20), || {
        starts("app-restarts").len() == 2
    });
    let back = binds()[1];
    assert!(
        starts("app-restarts")[1] >= back,
        "app-restarts launched before db was ready again: {:?} vs {back}",
        starts("app-restarts")
    );
    wait_check_runs(&d, "db-ready", 2);
    assert_eq!(starts("app").len(), 1, "app was restarted");
    assert_eq!(
        starts("app-restarts").len(),
        2,
        "no failed launch in between"
    );
    assert_eq!(service(&d, "app").current, "active");
}

/// A slow starter under a liveness check: it binds `port` 4 s after it starts, the check
/// looks every 0.5 s and is down after 2 failures, and restarts the service.
fn slow_starter(root: &Path, port: u16, grace: &str) -> String {
    let server = slow_server(root, "slow", port, 4.0);
    format!(
        "services:\n  slow:\n    override: replace\n    \
         command: /bin/sh -c 'echo start $(date +%s.%N) >> {starts}; exec python3 {server}'\n    \
         on-check-failure:\n      up: restart\n{grace}\
         checks:\n  up:\n    override: replace\n    level: alive\n    period: 500ms\n    threshold: 2\n    \
         tcp:\n      port: {port}\n      host: 127.0.0.1\n",
        starts = root.join("starts").display(),
        server = server.display(),
    )
}

/// S9: a slow starter with a start grace is not restarted before its first success: the
/// check comes up at about 4 s and the service was launched once.
#[test]
fn s9_a_slow_starter_with_a_start_grace_is_not_killed() {
    let root = tempfile::tempdir().unwrap();
    let d = Daemon::hold(&[(
        "001-base",
        &slow_starter(root.path(), free_port(), "    start-grace: 10s\n"),
    )]);
    act(&d, "start", &["slow"]);
    let c = client(&d);
    // Down after 1 s, held by the grace, and then up once the port opens.
    wait_for("the check down", Duration::from_secs(10), || {
        rt().block_on(c.checks("", &[])).unwrap()[0].status == "down"
    });
    // Held for as long as the grace lasts.
    wait_for("the action held", Duration::from_secs(10), || {
        service(&d, "slow")
            .reason
            .is_some_and(|r| r.contains("check action held: up until "))
    });
    wait_for("the check up", Duration::from_secs(15), || {
        rt().block_on(c.checks("", &[])).unwrap()[0].status == "up"
    });
    wait_check_runs(&d, "up", 2);
    assert_eq!(times(&root.path().join("starts")).len(), 1, "restarted");
    assert_eq!(times(&root.path().join("slow-binds")).len(), 1);
}

/// S9's control: without a grace the same starter is restarted before it ever binds, again
/// and again, which is why the grace exists.
#[test]
fn s9_control_without_a_grace_the_slow_starter_is_restarted_before_it_binds() {
    let root = tempfile::tempdir().unwrap();
    let d = Daemon::hold(&[("001-base", &slow_starter(root.path(), free_port(), ""))]);
    act(&d, "start", &["slow"]);
    wait_for("three launches", Duration::from_secs(20), || {
        times(&root.path().join("starts")).len() >= 3
    });
    assert!(
        times(&root.path().join("slow-binds")).is_empty(),
        "it bound once: a restart came late enough"
    );
}
