//! The watchdog of a `readiness: notify` service, on real processes: one that stops pinging
//! while it still runs and serves its port is aborted, explained and restarted; one that
//! pings in time is never touched. The services hard-code their interval rather than read
//! `WATCHDOG_USEC`, so these tests pin the supervision side alone.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::fixture::{Daemon, Test, act, details_of, free_port, lines, service, times, wait_for};

/// A service that says READY=1 with its port open, pings every 0.2 s, and on its first run
/// stops pinging after `pings` pings (writing the time of the last to `last-ping`) but keeps
/// running and serving. It writes each run's number to `runs`, and on SIGABRT the run and the
/// time to `aborted` before it exits with 134, as a process the signal kills does.
fn pinger(dir: &Path, port: u16, pings: u32) -> PathBuf {
    let path = dir.join("pinger.py");
    let file = |name: &str| dir.join(name).display().to_string();
    fs::write(
        &path,
        format!(
            "import os, signal, socket, time\n\
             runs = open('{runs}', 'a+')\n\
             runs.seek(0)\n\
             run = len(runs.read().split()) + 1\n\
             runs.write('%d\\n' % run)\n\
             runs.close()\n\
             def aborted(signum, frame):\n    \
                 with open('{aborted}', 'a') as f:\n        \
                     f.write('%d %f\\n' % (run, time.time()))\n    \
                 os._exit(134)\n\
             signal.signal(signal.SIGABRT, aborted)\n\
             server = socket.socket()\n\
             server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
             server.bind(('127.0.0.1', {port}))\n\
             server.listen()\n\
             address = os.environ['NOTIFY_SOCKET']\n\
             if address.startswith('@'):\n    address = '\\0' + address[1:]\n\
             notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)\n\
             notify.sendto(b'READY=1', address)\n\
             sent = 0\n\
             while run > 1 or sent < {pings}:\n    \
                 time.sleep(0.2)\n    \
                 notify.sendto(b'WATCHDOG=1', address)\n    \
                 sent += 1\n    \
                 if sent % 5 == 0:\n        \
                     open('{pinged}', 'w').write('%d %d\\n' % (run, sent))\n\
             open('{last}', 'w').write('%f\\n' % time.time())\n\
             while True:\n    \
                 time.sleep(1)\n",
            runs = file("runs"),
            aborted = file("aborted"),
            pinged = file("pinged"),
            last = file("last-ping"),
        ),
    )
    .unwrap();
    path
}

fn layer(script: &Path) -> String {
    format!(
        "services:\n  wd:\n    override: replace\n    command: python3 {}\n    \
         readiness: notify\n    watchdog: 1s\n    kill-delay: 1s\n    backoff-delay: 100ms\n",
        script.display()
    )
}

#[test]
fn a_service_that_stops_pinging_while_its_port_stays_open_is_aborted_explained_and_restarted() {
    let root = tempfile::tempdir().unwrap();
    let port = free_port();
    let script = pinger(root.path(), port, 5);
    let d = Daemon::hold(&[("001-base", &layer(&script))]);
    let change = act(&d, "start", &["wd"]);
    assert_eq!(change.status, "Done", "{change:?}");
    std::net::TcpStream::connect(("127.0.0.1", port)).expect("its port is open");

    let aborted = root.path().join("aborted");
    wait_for("SIGABRT", Duration::from_secs(15), || {
        !lines(&aborted).is_empty()
    });
    let last_ping = times(&root.path().join("last-ping"))[0];
    let line = lines(&aborted).remove(0);
    let (run, at) = line.split_once(' ').unwrap();
    assert_eq!(run, "1", "the run that stopped pinging");
    let after = at.parse::<f64>().unwrap() - last_ping;
    // Not before its interval ran out, and within the interval and the kill delay.
    assert!(
        (0.9..=2.5).contains(&after),
        "aborted {after:.2}s after the last ping"
    );

    let reason = "watchdog timeout after 1s, last ping ";
    d.wait_log(&format!("Service \"wd\" {reason}"));
    d.wait_log("sending SIGABRT");
    // Restarted by its on-failure action (restart, the default); the new run pings in time.
    wait_for("the second run, ready", Duration::from_secs(15), || {
        let details = details_of(&d, "wd");
        details.start_count == 2
            && service(&d, "wd").current == "active"
            && details.watchdog.is_some_and(|w| w.last_ping.is_some())
    });
    let details = details_of(&d, "wd");
    assert_eq!(details.last_exit_code, Some(134), "{details:?}");
    assert!(
        details.last_exit_cause.starts_with(reason),
        "{}",
        details.last_exit_cause
    );
    let watchdog = details.watchdog.clone().unwrap();
    assert_eq!(watchdog.interval, "1s");
    assert!(watchdog.deadline.is_some(), "{watchdog:?}");
    // The service's own log says why it was ended, where its last words are.
    assert!(
        details
            .last_output
            .iter()
            .any(|l| l.contains(&format!("cobble: {reason}"))),
        "{details:?}"
    );
    let output = Test::daemon(&d)
        .args(&["why", "wd"])
        .stdout_contains(&format!("Last exit:      code 134 ({reason}"))
        .run();
    assert!(
        output
            .stdout
            .contains("Watchdog:       every 1s, last ping "),
        "{}",
        output.stdout
    );
    std::net::TcpStream::connect(("127.0.0.1", port)).expect("its port is open again");
}

#[test]
fn a_service_that_pings_in_time_is_never_touched() {
    let root = tempfile::tempdir().unwrap();
    let script = pinger(root.path(), free_port(), u32::MAX);
    let d = Daemon::hold(&[("001-base", &layer(&script))]);
    let change = act(&d, "start", &["wd"]);
    assert_eq!(change.status, "Done", "{change:?}");
    // 25 pings: five seconds, five intervals.
    let pinged = root.path().join("pinged");
    wait_for("25 pings", Duration::from_secs(30), || {
        lines(&pinged).first().is_some_and(|l| l == "1 25")
    });
    let details = details_of(&d, "wd");
    assert_eq!(details.start_count, 1, "{details:?}");
    assert_eq!(service(&d, "wd").current, "active");
    assert!(lines(&root.path().join("aborted")).is_empty());
    assert!(!d.log().contains("watchdog timeout"), "{}", d.log());
}
