//! Processes a service leaves in the background end with it: children of a main process that
//! exited, double-forked daemons in sessions of their own, and, when the daemon itself exits,
//! everything it ever started. Each process is found through `/proc` by an argument no other
//! test uses.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::fixture::{Daemon, act, service, wait_for};

/// Live processes (zombies have no command line) with `arg` among their arguments.
fn processes_with(arg: &str) -> Vec<u32> {
    fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|cmdline| cmdline.split(|&b| b == 0).any(|a| a == arg.as_bytes()))
        })
        .collect()
}

fn parent_of(pid: u32) -> Option<u32> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// Writes an executable shell script.
fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    fs::write(&path, format!("#!/bin/sh\n{body}")).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// A daemon in a session of its own, orphaned, whose environment is empty: no process group,
/// tree or environment ties it to its service. It notes a SIGTERM in `mark`.
fn hidden_daemon(dir: &Path, token: &str, mark: &Path) -> PathBuf {
    let orphan = script(
        dir,
        "orphan.sh",
        &format!(
            "trap 'echo term > {mark}; exit 0' TERM\nsleep {token} &\nwait\n",
            mark = mark.display()
        ),
    );
    script(
        dir,
        "hidden.sh",
        &format!(
            "setsid sh -c 'env -i /bin/sh {} & exit 0'\nexec sleep {token}1\n",
            orphan.display()
        ),
    )
}

#[test]
fn fifty_children_of_an_exited_main_process_do_not_survive_it() {
    let scripts = tempfile::tempdir().unwrap();
    let token = "7001.5";
    let main = script(
        scripts.path(),
        "fifty.sh",
        &format!("for i in $(seq 50); do sleep {token} & done\nsleep 3\n"),
    );
    let layer = format!(
        "services:\n  bg:\n    override: replace\n    command: {}\n    on-success: ignore\n    kill-delay: 2s\n",
        main.display()
    );
    let d = Daemon::hold(&[("001-base", &layer)]);
    act(&d, "start", &["bg"]);
    wait_for("fifty children", Duration::from_secs(10), || {
        processes_with(token).len() == 50
    });
    wait_for("main process exited", Duration::from_secs(10), || {
        service(&d, "bg").current != "active"
    });
    act(&d, "stop", &["bg"]);
    wait_for("no child left", Duration::from_secs(10), || {
        processes_with(token).is_empty()
    });
}

#[test]
fn a_double_forked_daemon_in_its_own_session_ends_on_stop() {
    let scripts = tempfile::tempdir().unwrap();
    let token = "7002.5";
    let main = script(
        scripts.path(),
        "double.sh",
        &format!("setsid sh -c 'sleep {token} & exit 0'\nexec sleep {token}1\n"),
    );
    let layer = format!(
        "services:\n  db:\n    override: replace\n    command: {}\n",
        main.display()
    );
    let d = Daemon::hold(&[("001-base", &layer)]);
    act(&d, "start", &["db"]);
    wait_for("the double-forked daemon", Duration::from_secs(10), || {
        processes_with(token).len() == 1
    });
    // Orphaned: the daemon, as subreaper, is its parent now, not the service.
    let daemonized = processes_with(token)[0];
    assert_eq!(parent_of(daemonized), Some(d.pid()));
    act(&d, "stop", &["db"]);
    wait_for("nothing of db left", Duration::from_secs(10), || {
        processes_with(token).is_empty() && processes_with(&format!("{token}1")).is_empty()
    });
}

#[test]
fn nothing_a_service_started_survives_the_daemon() {
    let scripts = tempfile::tempdir().unwrap();
    let token = "7003.5";
    let mark = scripts.path().join("terminated");
    let main = hidden_daemon(scripts.path(), token, &mark);
    let layer = format!(
        "services:\n  hidden:\n    override: replace\n    command: {}\n",
        main.display()
    );
    let mut d = Daemon::hold(&[("001-base", &layer)]);
    act(&d, "start", &["hidden"]);
    wait_for("the hidden daemon", Duration::from_secs(10), || {
        processes_with(token).len() == 1
    });
    assert_eq!(d.stop(), Some(0));
    assert_eq!(processes_with(token), Vec::<u32>::new());
    assert_eq!(
        fs::read_to_string(&mark).ok().as_deref(),
        Some("term\n"),
        "ended with SIGTERM first"
    );
}

/// As PID 1 of a PID namespace the kernel would SIGKILL what is left once the daemon is gone;
/// the daemon ends it first, with SIGTERM.
#[test]
fn as_pid_one_the_daemon_ends_everything_with_sigterm_first() {
    let scripts = tempfile::tempdir().unwrap();
    let token = "7004.5";
    let mark = scripts.path().join("terminated");
    let main = hidden_daemon(scripts.path(), token, &mark);
    let init = script(
        scripts.path(),
        "init.sh",
        &format!(
            "exec unshare --pid --fork --mount-proc {} \"$@\"\n",
            crate::fixture::COBBLE
        ),
    );
    let layer = format!(
        "services:\n  hidden:\n    override: replace\n    command: {}\n",
        main.display()
    );
    let mut d = Daemon::start_as(&init, &[("001-base", &layer)], &["--hold"], &[]);
    act(&d, "start", &["hidden"]);
    wait_for("the hidden daemon", Duration::from_secs(10), || {
        processes_with(token).len() == 1
    });
    // `unshare` does not pass SIGTERM on: send it to the daemon, PID 1 inside.
    let inner = fs::read_to_string(format!("/proc/{}/task/{}/children", d.pid(), d.pid()))
        .unwrap()
        .split_whitespace()
        .next()
        .expect("the daemon under unshare")
        .parse::<i32>()
        .unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(inner),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert_eq!(d.wait_exit(Duration::from_secs(15)), Some(0));
    assert_eq!(processes_with(token), Vec::<u32>::new());
    assert_eq!(
        fs::read_to_string(&mark).ok().as_deref(),
        Some("term\n"),
        "ended with SIGTERM first"
    );
}

#[test]
fn a_double_forked_daemon_is_ended_by_the_successor_of_a_killed_daemon() {
    let scripts = tempfile::tempdir().unwrap();
    let token = "7005.5";
    let main = script(
        scripts.path(),
        "double.sh",
        &format!("setsid sh -c 'sleep {token} & exit 0'\nexec sleep {token}1\n"),
    );
    let layer = format!(
        "services:\n  db:\n    override: replace\n    command: {}\n",
        main.display()
    );
    let mut d = Daemon::hold(&[("001-base", &layer)]);
    act(&d, "start", &["db"]);
    wait_for("the double-forked daemon", Duration::from_secs(10), || {
        processes_with(token).len() == 1
    });
    d.kill();
    // Nothing ended it: it was re-parented away from the dead daemon.
    assert_eq!(processes_with(token).len(), 1);
    d.restart(&["--hold"]);
    wait_for("nothing of db left", Duration::from_secs(10), || {
        processes_with(token).is_empty() && processes_with(&format!("{token}1")).is_empty()
    });
}

/// A service's exit forgets its group in memory only; the daemon's exit writes the record of
/// process groups without it, so that the next daemon has nothing stale to look for.
#[test]
fn a_clean_exit_leaves_no_process_group_recorded() {
    let layer = "services:\n  sleeper:\n    override: replace\n    command: sleep 1000\n";
    let mut d = Daemon::hold(&[("001-base", layer)]);
    act(&d, "start", &["sleeper"]);
    let record = d.pebble_dir().join(".cobble-processes");
    let text = fs::read_to_string(&record).unwrap();
    assert!(text.contains("\"sleeper\""), "{text}");
    assert_eq!(d.stop(), Some(0));
    // Records rewritten in place are padded with spaces to the file's previous length.
    assert_eq!(fs::read_to_string(&record).unwrap().trim_end(), "{}");
}
