//! Which processes belong to a service instance, including the ones that left its tree.
//!
//! A service runs in a process group of its own, so signalling the group reaches the helpers
//! it forks. Two kinds of process escape that: a descendant that moved to another group or
//! session (`setsid`, `setpgid`), and an orphan whose parent exited. The daemon is the child
//! subreaper, so every orphan becomes its child, wherever in a service's tree it was born;
//! what is lost is which service it came from. Without a cgroup to ask (cgroup v2 is not
//! always mounted, nor writable, in a container), an instance's members are found by what a
//! process keeps from its birth:
//!
//! - the descendants of the main process, while it lives, whatever their group;
//! - the daemon's orphaned children still in the instance's process group (a group id is
//!   never reused while a member lives, so the group alone names the instance);
//! - the daemon's orphaned children whose environment carries the instance's
//!   [`INVOCATION_VARIABLE`] (it survives `setsid`, double forks and `exec`, like the
//!   invocation ID systemd gives its units),
//!
//! and everything below each of them. What clears its environment (`env -i`) *and* leaves
//! the group *and* is orphaned is found by none of these: it ends with the daemon
//! ([`end_descendants`]), which ends every process it ever started, attributed or not.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use cobble_sys::process::{self as sys, ProcStat, Signal};
use cobble_sys::reaper;

/// The environment variable that names a service instance in its processes.
pub(crate) const INVOCATION_VARIABLE: &str = "COBBLE_INVOCATION_ID";

/// The daemon's children that it did not start itself (or has reaped the starter of):
/// orphans re-parented to it. A child the daemon started itself and has not reaped (the main
/// process of this or another service, a command run for a client) is no orphan; leaving
/// them out without a look at `/proc` keeps stopping every service at once from reading
/// every other service's status and environment. Blocking: it reads `/proc`.
pub(crate) fn orphans() -> Vec<u32> {
    reaper::without_awaited(sys::children(std::process::id()))
}

/// Every live process (zombies left out) of the instance whose main process is `leader`
/// (started at `leader_start`) and whose invocation ID is `invocation`, but the main
/// process itself, with its `/proc` status; `orphans` are the daemon's orphans as
/// [`orphans`] lists them (one listing serves a caller that asks about many services).
/// Blocking: it reads `/proc`.
pub(crate) fn members_among(
    leader: u32,
    leader_start: u64,
    invocation: &str,
    orphans: &[u32],
) -> BTreeMap<u32, ProcStat> {
    let mut roots = Vec::new();
    let leader_now = sys::process_start_time(leader);
    if leader_now == Some(leader_start) {
        roots.extend(sys::descendants(leader));
    }
    // A main process's pid (and group id) can only be reused once its group is empty: a
    // process that has it now leads some other group, whose members are not this instance's.
    let group_is_ours = leader_now.is_none_or(|start| start == leader_start);
    let entry = format!("{INVOCATION_VARIABLE}={invocation}");
    for &child in orphans {
        if child == leader {
            continue;
        }
        let Some(stat) = sys::proc_stat(child) else {
            continue;
        };
        if stat.state != 'Z'
            && ((group_is_ours && stat.pgrp == leader) || sys::environ_has(child, &entry))
        {
            roots.push(child);
            roots.extend(sys::descendants(child));
        }
    }
    roots
        .into_iter()
        .filter(|&pid| pid != leader)
        .filter_map(|pid| Some((pid, sys::proc_stat(pid)?)))
        .filter(|(_, stat)| stat.state != 'Z')
        .collect()
}

/// Ends every process this one started, directly or not, attributed to a service or not:
/// SIGTERM to all, SIGKILL after `grace` to what is left, and returns once none is left
/// (or after a few more seconds) with how many there were. For a daemon on its way out:
/// as the subreaper (or PID 1 of a container) its descendants include every orphan that
/// ever left a service. Blocking.
pub(crate) fn end_descendants(grace: Duration) -> usize {
    let me = std::process::id();
    let living = || -> Vec<(u32, u64)> {
        sys::descendants(me)
            .into_iter()
            .filter_map(|pid| {
                let stat = sys::proc_stat(pid)?;
                (stat.state != 'Z').then_some((pid, stat.start_time))
            })
            .collect()
    };
    let first = living();
    if first.is_empty() {
        return 0;
    }
    for &(pid, _) in &first {
        let _ = sys::signal_pid(pid, Signal::SIGTERM);
    }
    let mut seen: BTreeMap<u32, u64> = first.into_iter().collect();
    let wait = |until: Instant, seen: &mut BTreeMap<u32, u64>| loop {
        let now = living();
        seen.extend(now.iter().copied());
        if now.is_empty() || Instant::now() >= until {
            return now;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let left = wait(Instant::now() + grace, &mut seen);
    // A process forked after the SIGTERM went out is as much the daemon's as the others.
    for (pid, start_time) in left {
        if sys::process_start_time(pid) == Some(start_time) {
            let _ = sys::signal_pid(pid, Signal::SIGKILL);
        }
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let now = living();
        if now.is_empty() || Instant::now() >= deadline {
            break;
        }
        seen.extend(now.iter().copied());
        for (pid, _) in now {
            let _ = sys::signal_pid(pid, Signal::SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    seen.len()
}

/// Every live process but this one whose environment carries one of `invocations`, with its
/// start time: what a killed predecessor's services left, wherever it was re-parented.
/// Blocking: it reads `/proc`.
pub(crate) fn tagged(invocations: &[String]) -> Vec<(u32, u64)> {
    if invocations.is_empty() {
        return Vec::new();
    }
    let entries: Vec<String> = invocations
        .iter()
        .map(|id| format!("{INVOCATION_VARIABLE}={id}"))
        .collect();
    let me = std::process::id();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != me)
        .filter(|&pid| entries.iter().any(|entry| sys::environ_has(pid, entry)))
        .filter_map(|pid| {
            let stat = sys::proc_stat(pid)?;
            (stat.state != 'Z').then_some((pid, stat.start_time))
        })
        .collect()
}
