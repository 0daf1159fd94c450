//! Signalling processes and process groups, signal names, and `/proc`.
//!
//! # Theory of operation
//!
//! Services run in their own process group (the daemon sets
//! `process_group(0)`, so the group id is the leader's pid). Stopping a service
//! signals the whole group ([`signal_group`]), so helpers it forked go too;
//! `/v1/signals` signals only the leader ([`signal_pid`]), as Pebble does.
//! [`group_alive`] answers "is anything of this service left?"; zombies count
//! as alive until the reaper collects them, which it does promptly.
//!
//! Pids arrive here as `u32` (what `std::process` uses) and are checked before
//! they reach `kill(2)`, where 0, -1 and negative values have broadcast
//! meanings: `kill(0)` would signal the daemon's own group and `kill(-1)`
//! every process we may signal. Such ids are rejected with `InvalidInput`, as
//! is 1: init's pid and group, which in a container is the daemon itself.
//!
//! [`process_start_time`] reads the kernel's start time of a process, which,
//! together with the pid, identifies a process across pid reuse: a restarted
//! daemon can recognise process groups it started before it crashed.

use std::io;

use nix::errno::Errno;
use nix::unistd::Pid;

use crate::SysError;

pub use nix::sys::signal::Signal;

/// Sends `sig` to every process in the process group `pgid` (`killpg`).
///
/// A group that no longer exists (`ESRCH`) is `Ok(())`: the caller wanted it
/// gone, and Pebble only logs that case. `pgid` 0 and 1 are refused: 0 means
/// our own group, and 1 is init's group, which in a container is the daemon's.
pub fn signal_group(pgid: u32, sig: Signal) -> io::Result<()> {
    let pgid = checked_pid(pgid, 2)?;
    match nix::sys::signal::killpg(pgid, sig) {
        Ok(()) | Err(Errno::ESRCH) => Ok(()),
        Err(errno) => Err(errno.into()),
    }
}

/// Sends `sig` to the single process `pid` (`kill`), as Pebble's
/// `/v1/signals` does for a service's leader.
///
/// Unlike [`signal_group`], `ESRCH` is returned as an error, because Pebble
/// reports it to the client (`no such process`, see [`crate::os_error_text`]).
/// `pid` 0 (our own process group) and 1 (init: in a container, the daemon
/// itself; never a service) are refused.
pub fn signal_pid(pid: u32, sig: Signal) -> io::Result<()> {
    let pid = checked_pid(pid, 2)?;
    nix::sys::signal::kill(pid, sig).map_err(io::Error::from)
}

/// Whether any process (including a zombie not yet reaped) is still in process
/// group `pgid`: `kill(-pgid, 0)` succeeds. `EPERM` also means the group
/// exists (its members changed credentials). Invalid ids give `false`.
pub fn group_alive(pgid: u32) -> bool {
    let Ok(pgid) = checked_pid(pgid, 2) else {
        return false;
    };
    matches!(
        nix::sys::signal::killpg(pgid, None),
        Ok(()) | Err(Errno::EPERM)
    )
}

/// Parses a signal name as Pebble's `/v1/signals` does (`unix.SignalNum`):
/// exactly one of the 31 classic Linux names, upper-case, with the `SIG`
/// prefix (`"SIGHUP"`, `"SIGTERM"`). `"HUP"`, `"sighup"`, numbers, aliases
/// such as `SIGIOT`/`SIGPOLL`/`SIGCLD`, and real-time signals are all invalid:
/// `invalid signal name "HUP"`. (Pebble's CLI, not its API, adds the `SIG`
/// prefix and insists on upper case before sending.)
pub fn parse_signal(name: &str) -> Result<Signal, SysError> {
    // nix's FromStr on Linux accepts exactly the names in Go's x/sys
    // signalList (SIGHUP..SIGSYS, including SIGSTKFLT and SIGPWR, no aliases);
    // tests pin that.
    name.parse::<Signal>()
        .map_err(|_| SysError::InvalidSignal(name.to_owned()))
}

/// A few fields of `/proc/<pid>/stat`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcStat {
    /// Field 3: `R`, `S`, `D`, `Z` (zombie), `T`, ...
    pub state: char,
    /// Field 4: parent pid.
    pub ppid: u32,
    /// Field 5: process group id.
    pub pgrp: u32,
    /// Field 6: session id.
    pub session: u32,
    /// Field 22: start time after boot, in clock ticks (`sysconf(_SC_CLK_TCK)`).
    pub start_time: u64,
}

/// Reads `/proc/<pid>/stat`. `None` if the process does not exist (or the
/// file cannot be parsed).
pub fn proc_stat(pid: u32) -> Option<ProcStat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_proc_stat(&text)
}

/// Every descendant of `pid` that is still alive, found through
/// `/proc/<pid>/task/<tid>/children`, parents before children. A snapshot: processes forking
/// at the same time may be missed, so callers that kill trees walk again later.
pub fn descendants(pid: u32) -> Vec<u32> {
    let mut found = Vec::new();
    let mut queue = vec![pid];
    while let Some(parent) = queue.pop() {
        for child in children(parent) {
            if !found.contains(&child) && found.len() < 10_000 {
                found.push(child);
                queue.push(child);
            }
        }
    }
    found
}

/// The children of `pid` (of every one of its threads: a child belongs to the thread that
/// forked it, or to any thread once it was re-parented), zombies included. Empty if `pid`
/// does not exist.
pub fn children(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for task in tasks.flatten() {
        let text = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        found.extend(
            text.split_whitespace()
                .filter_map(|c| c.parse::<u32>().ok()),
        );
    }
    found
}

/// Whether the environment `pid` was started with (`/proc/<pid>/environ`) holds exactly the
/// entry `entry` (`NAME=value`). `false` when it cannot be read: the process is gone, a
/// zombie, or not ours to inspect (another user's, without `CAP_SYS_PTRACE`).
pub fn environ_has(pid: u32, entry: &str) -> bool {
    let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else {
        return false;
    };
    environ.split(|&b| b == 0).any(|e| e == entry.as_bytes())
}

/// The process's start time in clock ticks since boot (field 22 of
/// `/proc/<pid>/stat`), or `None` if it does not exist. Stable for the life of
/// the process, so `(pid, start_time)` names one process even if the pid is
/// later reused.
pub fn process_start_time(pid: u32) -> Option<u64> {
    proc_stat(pid).map(|stat| stat.start_time)
}

/// Parses the contents of `/proc/<pid>/stat`. Field 2 (`comm`) is in
/// parentheses and may itself contain spaces and `)`, so fields are counted
/// from the *last* `)`.
fn parse_proc_stat(text: &str) -> Option<ProcStat> {
    let after_comm = &text[text.rfind(')')? + 1..];
    // fields[0] is field 3 (state), so field N is fields[N - 3].
    let fields: Vec<&str> = after_comm.split_ascii_whitespace().collect();
    let field = |n: usize| fields.get(n - 3).copied();
    let mut state = field(3)?.chars();
    let stat = ProcStat {
        state: state.next()?,
        ppid: field(4)?.parse().ok()?,
        pgrp: field(5)?.parse().ok()?,
        session: field(6)?.parse().ok()?,
        start_time: field(22)?.parse().ok()?,
    };
    state.next().is_none().then_some(stat)
}

/// Converts a pid from `u32`, refusing values below `min` and values that
/// would turn negative (broadcast meanings in `kill(2)`).
fn checked_pid(pid: u32, min: u32) -> io::Result<Pid> {
    match i32::try_from(pid) {
        Ok(raw) if pid >= min => Ok(Pid::from_raw(raw)),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("invalid process id {pid}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_stat_with_awkward_comm() {
        let text = "4242 (a) b (c)) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 \
                    987654 1000 100 18446744073709551615\n";
        let stat = parse_proc_stat(text).unwrap();
        assert_eq!(
            stat,
            ProcStat {
                state: 'S',
                ppid: 1,
                pgrp: 4242,
                session: 4242,
                start_time: 987654,
            }
        );
        assert_eq!(parse_proc_stat("12 (x) Z 1"), None);
        assert_eq!(parse_proc_stat("garbage"), None);
    }

    #[test]
    fn broadcast_pids_are_refused() {
        for pgid in [0, 1, u32::MAX, i32::MAX as u32 + 1] {
            let err = signal_group(pgid, Signal::SIGTERM).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "pgid {pgid}");
            assert!(!group_alive(pgid));
        }
        for pid in [0, 1, u32::MAX] {
            let err = signal_pid(pid, Signal::SIGTERM).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "pid {pid}");
        }
    }
}
