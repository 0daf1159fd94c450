//! Access control by peer credentials, and the daemon as PID 1 of a container.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::fixture::{COBBLE, Daemon, wait_for};

const NOBODY: u32 = 65534;

/// Runs the CLI as `nobody` against `daemon`.
fn as_nobody(daemon: &Daemon, args: &[&str]) -> std::process::Output {
    Command::new(COBBLE)
        .args(args)
        .env("PEBBLE", daemon.pebble_dir())
        .env_remove("PEBBLE_SOCKET")
        .uid(NOBODY)
        .gid(NOBODY)
        .stdin(Stdio::null())
        .output()
        .expect("run cobble as nobody")
}

#[test]
fn other_users_may_read_but_not_act() {
    let d = Daemon::hold(&[(
        "001-base",
        "services:\n  s:\n    override: replace\n    command: sleep 1000\n",
    )]);
    // Let `nobody` reach the socket (its mode is 0666; the directories must be traversable).
    for dir in [d.scratch(), d.pebble_dir().as_path()] {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let read = as_nobody(&d, &["services"]);
    assert!(read.status.success(), "{read:?}");
    assert!(String::from_utf8_lossy(&read.stdout).contains("s  "));
    let write = as_nobody(&d, &["start", "s"]);
    assert_eq!(write.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&write.stderr),
        "error: access denied\n"
    );
    let plan = as_nobody(&d, &["plan"]);
    assert_eq!(
        String::from_utf8_lossy(&plan.stderr),
        "error: access denied\n"
    );
}

#[test]
fn runs_as_pid_1_reaping_orphans_and_stopping_on_sigterm() {
    let root = tempfile::tempdir().unwrap();
    let pebble = root.path().join("pebble");
    let pidfile = root.path().join("orphan.pid");
    std::fs::create_dir_all(pebble.join("layers")).unwrap();
    std::fs::write(
        pebble.join("layers/001-base.yaml"),
        format!(
            "services:\n  s:\n    override: replace\n    startup: enabled\n    command: /bin/sh -c '(sleep 2 & echo $! > {}); sleep 1000'\n",
            pidfile.display()
        ),
    )
    .unwrap();
    let mut unshare = Command::new("unshare")
        .args(["--fork", "--pid", "--mount-proc", COBBLE, "run"])
        .env("PEBBLE", &pebble)
        .env_remove("PEBBLE_SOCKET")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("unshare");
    // The daemon is unshare's only child; inside its namespace it is PID 1.
    let children = format!("/proc/{}/task/{}/children", unshare.id(), unshare.id());
    let mut daemon_pid = 0u32;
    wait_for("daemon process", Duration::from_secs(10), || {
        daemon_pid = std::fs::read_to_string(&children)
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse().ok())
            .unwrap_or(0);
        daemon_pid != 0
    });
    wait_for("orphan pid file", Duration::from_secs(10), || {
        std::fs::read_to_string(&pidfile).is_ok_and(|s| !s.trim().is_empty())
    });
    // The orphaned `sleep 2` is re-parented to the namespace's PID 1: the daemon.
    let sleeping_child = || {
        children_of(daemon_pid)
            .iter()
            .any(|pid| comm_of(*pid).as_deref() == Some("sleep"))
    };
    wait_for(
        "orphan adopted by the daemon",
        Duration::from_secs(10),
        sleeping_child,
    );
    wait_for("orphan reaped", Duration::from_secs(10), || {
        !sleeping_child() && crate::supervision::zombies_of(daemon_pid) == 0
    });
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(daemon_pid as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(status) = unshare.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "daemon did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(0));
}

/// Direct children of a process.
fn children_of(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

fn comm_of(pid: u32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .ok()
        .map(|c| c.trim().to_owned())
}
