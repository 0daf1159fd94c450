//! A daemon started the way `nohup` or a careless parent starts it (signals ignored and
//! blocked, a low descriptor limit) passes none of the signals on to what it runs, and gives
//! each command the descriptor limit it was started with while it runs with more itself.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use crate::fixture::{COBBLE, Daemon, Test, wait_for};

const LONG: Duration = Duration::from_secs(20);

/// The soft descriptor limit the daemon is started with.
const SOFT_LIMIT: u64 = 1000;

/// A program that starts `cobble` with `SIGHUP` and `SIGUSR1` ignored (as `nohup` leaves
/// `SIGHUP`), `SIGUSR2` and `SIGTERM` blocked, and a soft descriptor limit of
/// [`SOFT_LIMIT`], then becomes it.
fn careless_parent(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("careless-parent");
    fs::write(
        &path,
        format!(
            "#!/usr/bin/env python3\n\
             import os, resource, signal, sys\n\
             signal.signal(signal.SIGHUP, signal.SIG_IGN)\n\
             signal.signal(signal.SIGUSR1, signal.SIG_IGN)\n\
             signal.pthread_sigmask(signal.SIG_BLOCK, {{signal.SIGUSR2, signal.SIGTERM}})\n\
             hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]\n\
             resource.setrlimit(resource.RLIMIT_NOFILE, ({SOFT_LIMIT}, hard))\n\
             os.execv({COBBLE:?}, [{COBBLE:?}] + sys.argv[1:])\n"
        ),
    )
    .unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// (SigIgn, SigBlk) from lines of `/proc/<pid>/status`.
fn masks(status: &str) -> Option<(u64, u64)> {
    let mask = |name: &str| {
        let line = status.lines().find(|l| l.starts_with(name))?;
        u64::from_str_radix(line.split_whitespace().nth(1)?, 16).ok()
    };
    Some((mask("SigIgn:")?, mask("SigBlk:")?))
}

/// The soft `Max open files` of `/proc/<pid>/limits` text.
fn soft_limit(limits: &str) -> Option<u64> {
    limits
        .lines()
        .find(|l| l.starts_with("Max open files"))?
        .split_whitespace()
        .nth(3)?
        .parse()
        .ok()
}

/// What the command the daemon ran reported about itself: (SigIgn, SigBlk, soft limit).
fn report(text: &str) -> Option<(u64, u64, u64)> {
    let (ignored, blocked) = masks(text)?;
    Some((ignored, blocked, soft_limit(text)?))
}

/// The command each test runs: `exec`, so that nothing stands between the daemon's spawn and
/// the process that reads its own status.
const REPORT: &str = "exec cat /proc/self/status /proc/self/limits";

#[test]
fn services_exec_and_exec_checks_start_with_no_signal_ignored_or_blocked() {
    let scratch = tempfile::tempdir().unwrap();
    let parent = careless_parent(scratch.path());
    let service_out = scratch.path().join("service");
    let check_out = scratch.path().join("check");
    let hups = scratch.path().join("hups");
    let ready = scratch.path().join("ready");
    let layer = format!(
        r#"
services:
  report:
    override: replace
    startup: enabled
    on-success: ignore
    command: /bin/sh -c '{REPORT} > {service_out}'
  trapper:
    override: replace
    startup: enabled
    command: /bin/sh -c 'trap "echo hup >> {hups}" HUP; echo > {ready}; while :; do sleep 0.1; done'
checks:
  report:
    override: replace
    period: 200ms
    exec:
      command: /bin/sh -c '{REPORT} > {check_out}'
"#,
        service_out = service_out.display(),
        check_out = check_out.display(),
        hups = hups.display(),
        ready = ready.display(),
    );
    let mut d = Daemon::start_as(&parent, &[("001-layer", &layer)], &[], &[]);
    let daemon_status = fs::read_to_string(format!("/proc/{}/status", d.pid())).unwrap();
    let daemon_limits = fs::read_to_string(format!("/proc/{}/limits", d.pid())).unwrap();
    assert_eq!(
        masks(&daemon_status).map(|(_, blocked)| blocked),
        Some(0),
        "the daemon clears its own mask:\n{daemon_status}"
    );
    assert!(
        soft_limit(&daemon_limits).unwrap() > SOFT_LIMIT,
        "the daemon raises its own limit:\n{daemon_limits}"
    );

    let clean = Some((0, 0, SOFT_LIMIT));
    let read = |path: &Path| report(&fs::read_to_string(path).unwrap_or_default());
    wait_for("the service's report", LONG, || {
        read(&service_out).is_some()
    });
    assert_eq!(read(&service_out), clean, "the service");
    wait_for("the exec check's report", LONG, || {
        read(&check_out).is_some()
    });
    assert_eq!(read(&check_out), clean, "the exec check");

    let (program, args) = REPORT
        .strip_prefix("exec ")
        .unwrap()
        .split_once(' ')
        .unwrap();
    let args: Vec<&str> = args.split(' ').collect();
    // On pipes (started without a fork of the daemon) and on a terminal (forked).
    for terminal in [&[][..], &["-t"][..]] {
        let out = Test::daemon(&d)
            .args(&["exec"])
            .args(terminal)
            .args(&["--", program])
            .args(&args)
            .any_stdout()
            .run();
        assert_eq!(
            report(&out.stdout),
            clean,
            "exec {terminal:?}:\n{}",
            out.stdout
        );
    }

    // What `nohup` broke: a shell service can trap SIGHUP, and `cobble signal` reaches it.
    wait_for("the trapper to be ready", LONG, || ready.exists());
    Test::daemon(&d).args(&["signal", "HUP", "trapper"]).run();
    wait_for("SIGHUP to be trapped", LONG, || hups.exists());

    // Started with SIGTERM blocked, the daemon still stops on it.
    assert_eq!(d.stop(), Some(0), "stopped by SIGTERM");
}
