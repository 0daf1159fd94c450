use std::os::unix::process::CommandExt;

use cobble_sys::SysError;
use cobble_sys::process::{self, Signal};
use cobble_sys::reaper::{self, ExitStatus};

use crate::{exit_of, group_members, sh, wait_for};

#[tokio::test]
async fn signal_group_kills_the_whole_group() {
    let mut cmd = sh("sleep 60 & sleep 60 & wait");
    cmd.process_group(0);
    let spawned = reaper::spawn(&mut cmd).unwrap();
    let pgid = spawned.pid;
    wait_for("sh and both sleeps", || group_members(pgid).len() >= 3).await;
    let grandchildren: Vec<u32> = group_members(pgid)
        .into_iter()
        .filter(|&p| p != pgid)
        .collect();
    assert!(process::group_alive(pgid));

    process::signal_group(pgid, Signal::SIGKILL).unwrap();
    assert_eq!(exit_of(spawned).await, ExitStatus::Signaled(9));
    // The sleeps were orphaned by sh's death, adopted by us and reaped.
    wait_for("the group to be gone", || !process::group_alive(pgid)).await;
    for pid in grandchildren {
        assert_eq!(process::proc_stat(pid), None, "pid {pid} survived");
    }
    // Signalling a group that no longer exists is not an error.
    process::signal_group(pgid, Signal::SIGTERM).unwrap();
}

#[tokio::test]
async fn signal_pid_hits_only_the_leader() {
    let mut cmd = sh("sleep 60 & wait");
    cmd.process_group(0);
    let spawned = reaper::spawn(&mut cmd).unwrap();
    let pgid = spawned.pid;
    wait_for("sh and its sleep", || group_members(pgid).len() >= 2).await;

    process::signal_pid(pgid, Signal::SIGKILL).unwrap();
    assert_eq!(exit_of(spawned).await, ExitStatus::Signaled(9));
    assert!(
        process::group_alive(pgid),
        "the sleep should survive its leader"
    );

    process::signal_group(pgid, Signal::SIGKILL).unwrap();
    wait_for("the group to be gone", || !process::group_alive(pgid)).await;

    // The leader is gone now: Pebble reports this error to the client.
    let err = process::signal_pid(pgid, Signal::SIGTERM).unwrap_err();
    assert_eq!(cobble_sys::os_error_text(&err), "no such process");
}

#[test]
fn parse_signal_accepts_exactly_pebbles_names() {
    let names = [
        "SIGHUP",
        "SIGINT",
        "SIGQUIT",
        "SIGILL",
        "SIGTRAP",
        "SIGABRT",
        "SIGBUS",
        "SIGFPE",
        "SIGKILL",
        "SIGUSR1",
        "SIGSEGV",
        "SIGUSR2",
        "SIGPIPE",
        "SIGALRM",
        "SIGTERM",
        "SIGSTKFLT",
        "SIGCHLD",
        "SIGCONT",
        "SIGSTOP",
        "SIGTSTP",
        "SIGTTIN",
        "SIGTTOU",
        "SIGURG",
        "SIGXCPU",
        "SIGXFSZ",
        "SIGVTALRM",
        "SIGPROF",
        "SIGWINCH",
        "SIGIO",
        "SIGPWR",
        "SIGSYS",
    ];
    for (i, name) in names.iter().enumerate() {
        let sig = process::parse_signal(name).unwrap();
        assert_eq!(sig as i32, i as i32 + 1, "{name}");
        assert_eq!(sig.as_str(), *name);
    }
    for bad in [
        "HUP",
        "sighup",
        "SigHup",
        "SIGIOT",
        "SIGPOLL",
        "SIGCLD",
        "SIGRTMIN",
        "SIGRTMIN+1",
        "9",
        "",
        " SIGHUP",
        "SIGHUP ",
        "FOO",
    ] {
        let err = process::parse_signal(bad).unwrap_err();
        assert!(matches!(&err, SysError::InvalidSignal(name) if name == bad));
        assert_eq!(err.to_string(), format!("invalid signal name {bad:?}"));
    }
    assert_eq!(
        process::parse_signal("FOO").unwrap_err().to_string(),
        r#"invalid signal name "FOO""#
    );
}

#[tokio::test]
async fn start_time_identifies_a_process() {
    let ours = std::process::id();
    let start = process::process_start_time(ours).expect("we exist");
    assert_eq!(process::process_start_time(ours), Some(start));

    let mut cmd = sh("sleep 60");
    cmd.process_group(0);
    let spawned = reaper::spawn(&mut cmd).unwrap();
    let child = process::proc_stat(spawned.pid).expect("child exists");
    assert!(child.start_time >= start);
    assert_eq!(child.pgrp, spawned.pid);
    assert_eq!(child.ppid, ours);

    process::signal_group(spawned.pid, Signal::SIGKILL).unwrap();
    let pid = spawned.pid;
    exit_of(spawned).await;
    assert_eq!(process::process_start_time(pid), None);
}

#[tokio::test]
async fn descendants_include_children_that_left_the_group() {
    // One grandchild stays in the group, one escapes into its own session.
    let mut cmd = sh("sleep 100 & setsid sleep 100 & wait");
    cmd.process_group(0);
    let spawned = reaper::spawn(&mut cmd).unwrap();
    let leader = spawned.pid;
    // Until both exist and the second has left the group: `setsid` forks, then leaves.
    let escaped_from = |found: &[u32]| -> Vec<u32> {
        found
            .iter()
            .copied()
            .filter(|p| process::proc_stat(*p).is_some_and(|s| s.pgrp != leader))
            .collect()
    };
    let mut found = Vec::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while found.len() < 2 || escaped_from(&found).is_empty() {
        assert!(std::time::Instant::now() < deadline, "{found:?}");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        found = process::descendants(leader);
    }
    assert_eq!(found.len(), 2, "{found:?}");
    assert_eq!(escaped_from(&found).len(), 1, "{found:?}");
    // The leader first: killed after its children, its `wait` could return and it could
    // exit on its own before the signal reached it.
    for pid in [&leader].into_iter().chain(found.iter()) {
        let _ = process::signal_pid(*pid, Signal::SIGKILL);
    }
    assert_eq!(exit_of(spawned).await, ExitStatus::Signaled(9));
    assert!(process::descendants(u32::MAX - 1).is_empty());
}
