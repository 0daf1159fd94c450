//! What a command inherits from a daemon that was itself started with signals ignored and
//! blocked and a low descriptor limit: through each way of starting a command, nothing of
//! the signals, and the limit the daemon was started with.

use std::io::Read;
use std::os::fd::OwnedFd;
use std::process::{Command, Stdio};

use cobble_sys::inherit;
use cobble_sys::reaper;
use cobble_sys::vspawn;
use nix::sys::signal::{SigHandler, SigSet, SigmaskHow, Signal, pthread_sigmask};

/// The soft descriptor limit the "daemon" (this test process) starts with.
const ORIGINAL_SOFT: u64 = 1000;

/// Puts this process where `nohup` and a careless parent leave a daemon: `SIGHUP` and
/// `SIGUSR1` ignored, a low soft descriptor limit; then prepares it as the daemon prepares
/// itself, and blocks `SIGUSR2` and `SIGTERM` in this thread, as a thread of the daemon may
/// have them blocked when it spawns.
fn started_like_a_careless_parent_would() {
    for sig in [Signal::SIGHUP, Signal::SIGUSR1] {
        // SAFETY: SIG_IGN installs no handler; this test's process has no other use for
        // these signals.
        unsafe { nix::sys::signal::signal(sig, SigHandler::SigIgn) }.unwrap();
    }
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit on a struct on this stack; lowering the soft limit is
    // always allowed.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit), 0);
        assert!(
            limit.rlim_max > ORIGINAL_SOFT,
            "hard limit {}",
            limit.rlim_max
        );
        limit.rlim_cur = ORIGINAL_SOFT;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &limit), 0);
    }
    let raised = inherit::prepare_daemon().unwrap();
    assert_eq!(raised.original, ORIGINAL_SOFT);
    assert_eq!(raised.current, limit.rlim_max);
    let mut blocked = SigSet::empty();
    blocked.add(Signal::SIGUSR2);
    blocked.add(Signal::SIGTERM);
    pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&blocked), None).unwrap();
}

/// The command every test runs: it prints its own signal masks and limits. `exec`, so that
/// the shell does not stand between the spawn and what is read.
const REPORT: &str = "exec cat /proc/self/status /proc/self/limits";

/// (SigIgn, SigBlk, soft `Max open files`) from what [`REPORT`] printed.
fn parse(report: &str) -> (u64, u64, u64) {
    let mask = |name: &str| {
        let line = report
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no {name} in {report}"));
        u64::from_str_radix(line.split_whitespace().nth(1).unwrap(), 16).unwrap()
    };
    let soft = report
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3))
        .unwrap_or_else(|| panic!("no limit in {report}"))
        .parse()
        .unwrap();
    (mask("SigIgn:"), mask("SigBlk:"), soft)
}

fn assert_clean(report: &str) {
    assert_eq!(
        parse(report),
        (0, 0, ORIGINAL_SOFT),
        "no signal ignored or blocked, the original limit:\n{report}"
    );
}

fn sh() -> Command {
    let mut cmd = Command::new("/bin/sh");
    cmd.args(["-c", REPORT]).stdout(Stdio::piped());
    cmd
}

fn read_all(mut out: impl Read) -> String {
    let mut text = String::new();
    out.read_to_string(&mut text).unwrap();
    text
}

#[test]
fn a_plain_spawn_resets_what_the_daemon_inherited() {
    started_like_a_careless_parent_would();
    let mut cmd = sh();
    cmd.stdin(Stdio::null());
    inherit::on_exec(&mut cmd);
    let mut spawned = reaper::spawn(&mut cmd).unwrap();
    let report = read_all(spawned.stdout.take().unwrap());
    assert!(spawned.exit.blocking_recv().unwrap().success());
    assert_clean(&report);
}

#[test]
fn a_gated_spawn_resets_what_the_daemon_inherited() {
    started_like_a_careless_parent_would();
    let mut cmd = sh();
    let mut spawned = reaper::spawn_gated(&mut cmd, |_| Ok(())).unwrap();
    drop(cmd);
    let report = read_all(spawned.stdout.take().unwrap());
    assert!(spawned.exit.blocking_recv().unwrap().success());
    assert_clean(&report);
}

#[test]
fn a_spawn_without_a_fork_resets_what_the_daemon_inherited() {
    started_like_a_careless_parent_would();
    let (reader, writer) = std::io::pipe().unwrap();
    let writer = OwnedFd::from(writer);
    let (stdin, _keep) = std::io::pipe().unwrap();
    let spawn = vspawn::Spawn {
        program: "/bin/sh".into(),
        argv: vec!["sh".into(), "-c".into(), REPORT.into()],
        environment: Vec::new(),
        working_dir: None,
        stdio: [stdin.into(), writer.try_clone().unwrap(), writer],
        ids: None,
        ids_after_gate: false,
        new_session: true,
    };
    let spawned = vspawn::spawn_gated(spawn, |_| Ok(())).unwrap();
    let report = read_all(reader);
    assert!(spawned.exit.blocking_recv().unwrap().success());
    assert_clean(&report);
}

#[test]
fn the_daemon_clears_its_own_signal_mask() {
    let mut blocked = SigSet::empty();
    blocked.add(Signal::SIGTERM);
    blocked.add(Signal::SIGCHLD);
    pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&blocked), None).unwrap();
    inherit::prepare_daemon().unwrap();
    let mut now = SigSet::empty();
    pthread_sigmask(SigmaskHow::SIG_BLOCK, None, Some(&mut now)).unwrap();
    assert!(!now.contains(Signal::SIGTERM) && !now.contains(Signal::SIGCHLD));
    // Threads started from here on inherit it.
    let mask = std::thread::spawn(|| {
        let text = std::fs::read_to_string("/proc/thread-self/status").unwrap();
        parse_mask(&text, "SigBlk:")
    })
    .join()
    .unwrap();
    assert_eq!(mask, 0);
}

fn parse_mask(status: &str, name: &str) -> u64 {
    let line = status.lines().find(|l| l.starts_with(name)).unwrap();
    u64::from_str_radix(line.split_whitespace().nth(1).unwrap(), 16).unwrap()
}
