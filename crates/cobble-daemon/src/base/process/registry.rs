//! The record of running process groups, so a daemon never starts a service twice.
//!
//! Services run in their own process groups and survive the daemon if it is killed with
//! SIGKILL. Each spawn rewrites `$PEBBLE/.cobble-processes` so that the daemon's death at any
//! instant leaves the old records or the new, with [`Durability::Process`]: no fsync, because
//! the file only has to survive the daemon process, not the machine: if the machine goes down,
//! so do the processes. Records that fit in a page are rewritten in place with one write (see
//! [`ProcessRegistry::save`]), larger ones renamed over the old file. An exit only forgets its
//! group in memory ([`ProcessRegistry::forget_unsaved`]); the next spawn, or the daemon's exit,
//! writes the file without it. At start-up, before anything is
//! spawned, the next daemon ends every group its predecessor left running, and every process
//! that carries a recorded instance's invocation ID (see [`super::members`]) wherever it was
//! re-parented. A pid is trusted only if its start time still matches the recorded one, so a
//! recycled pid is never killed, and a group counts as running only while something in it is
//! not a zombie, so an exited leader that nobody reaped is not taken for a live service.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use cobble_sys::process::{self, Signal};
use serde::{Deserialize, Serialize};

use super::members;
use crate::atomic::{self, Durability};

/// The file name under `$PEBBLE`.
pub const FILE_NAME: &str = ".cobble-processes";

/// One recorded process group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Record {
    /// The group leader's pid (and so the group id).
    pub pid: u32,
    /// The leader's start time in clock ticks since boot (`/proc/<pid>/stat` field 22).
    pub start_time: u64,
    /// The instance's invocation ID, in the environment of each of its processes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invocation: Option<String>,
}

/// The on-disk record of live process groups, keyed by service name.
#[derive(Debug)]
pub(crate) struct ProcessRegistry {
    path: Option<PathBuf>,
    records: BTreeMap<String, Record>,
    /// The file as last written, open for rewriting in place, and its length.
    file: Option<(std::fs::File, usize)>,
}

/// The most bytes rewritten in place: one page, which a write copies into the page cache
/// whole or not at all, even when the daemon is killed in the middle of it.
const IN_PLACE_MAX: usize = 4096;

impl ProcessRegistry {
    /// A registry kept in `dir`, or only in memory when `dir` is `None`.
    pub(crate) fn new(dir: Option<&Path>) -> ProcessRegistry {
        ProcessRegistry {
            path: dir.map(|d| d.join(FILE_NAME)),
            records: BTreeMap::new(),
            file: None,
        }
    }

    /// Records the group of a freshly spawned service, and its invocation ID.
    pub(crate) fn record(&mut self, service: &str, pid: u32, invocation: Option<&str>) {
        let Some(start_time) = process::process_start_time(pid) else {
            return; // already gone
        };
        self.records.insert(
            service.to_owned(),
            Record {
                pid,
                start_time,
                invocation: invocation.map(str::to_owned),
            },
        );
        self.save();
    }

    /// Forgets a service's group once its leader has exited.
    pub(crate) fn forget(&mut self, service: &str, pid: u32) {
        if self.records.get(service).is_some_and(|r| r.pid == pid) {
            self.records.remove(service);
            self.save();
        }
    }

    /// Forgets a group once its leader has exited, without rewriting the file: the next
    /// write leaves it out. Until then the file holds a stale record, which is harmless: the
    /// next daemon ends only a pid whose start time still matches.
    pub(crate) fn forget_unsaved(&mut self, name: &str, pid: u32) {
        if self.records.get(name).is_some_and(|r| r.pid == pid) {
            self.records.remove(name);
        }
    }

    /// Writes the records as they are now, leaving out the groups forgotten since the last
    /// write. Blocking. While they fit in a page, the file is rewritten in place with one
    /// write at its start, padded with spaces to its previous length: a write of one page is
    /// never torn by the daemon's death, and it costs a fraction of a new file renamed over
    /// the old one (which every exec request paid before its command ran). Larger records,
    /// and a write that fails, take the atomic rename.
    pub(crate) fn save(&mut self) {
        let Some(path) = &self.path else {
            return;
        };
        let mut bytes = serde_json::to_vec(&self.records).expect("records serialise");
        if let Some((file, len)) = &mut self.file {
            use std::os::unix::fs::FileExt;
            let padded = bytes.len().max(*len);
            if padded <= IN_PLACE_MAX {
                bytes.resize(padded, b' ');
                if matches!(file.write_at(&bytes, 0), Ok(n) if n == padded) {
                    *len = padded;
                    return;
                }
                bytes.truncate(bytes.trim_ascii_end().len());
            }
        }
        self.file = None;
        // Process durability: see the module documentation.
        if let Err(e) = atomic::write_atomic(path, &bytes, 0o600, Durability::Process) {
            tracing::warn!("Cannot record service processes in {}: {e}", path.display());
            return;
        }
        self.file = std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .ok()
            .map(|file| (file, bytes.len()));
    }
}

impl ProcessRegistry {
    /// Ends every group still recorded (SIGTERM, then SIGKILL after `grace`) and forgets
    /// them; returns their services. For a daemon that must exit without its supervisor.
    /// Blocking.
    pub(crate) fn end_all(&mut self, grace: Duration) -> Vec<String> {
        let records = std::mem::take(&mut self.records);
        self.save();
        end_groups(records, grace)
    }
}

/// Ends the process groups a previous daemon left running (SIGTERM, then SIGKILL after
/// `grace`), and returns the services they belonged to. Runs before anything is spawned.
/// Blocking: it polls `/proc` until the groups are gone.
pub(crate) fn end_leftovers(dir: &Path, grace: Duration) -> Vec<String> {
    let path = dir.join(FILE_NAME);
    let Ok(bytes) = std::fs::read(&path) else {
        return Vec::new();
    };
    let records: BTreeMap<String, Record> = serde_json::from_slice(&bytes).unwrap_or_default();
    let ended = end_groups(records, grace);
    let _ = std::fs::remove_file(&path);
    ended
}

/// SIGTERM to every recorded group that is still the recorded process and to every process
/// carrying a recorded invocation ID, SIGKILL to what is left after `grace`; returns the
/// services that had anything left.
fn end_groups(records: BTreeMap<String, Record>, grace: Duration) -> Vec<String> {
    let invocations: Vec<String> = records
        .values()
        .filter_map(|r| r.invocation.clone())
        .collect();
    let tagged = members::tagged(&invocations);
    // Each with whether its group is the recorded one: only then is the group signalled
    // (a service found by its invocation ID alone may have had its leader's pid recycled).
    let alive: Vec<(String, Record, bool)> = records
        .into_iter()
        .filter_map(|(service, r)| {
            let own_group = recorded_group_running(&r);
            let tagged_member = r.invocation.as_ref().is_some_and(|id| {
                let entry = format!("{}={id}", members::INVOCATION_VARIABLE);
                tagged
                    .iter()
                    .any(|&(pid, _)| process::environ_has(pid, &entry))
            });
            (own_group || tagged_member).then_some((service, r, own_group))
        })
        .collect();
    for (service, record, own_group) in &alive {
        tracing::info!(
            "Service \"{service}\" still running (pid {}); stopping it",
            record.pid
        );
        if *own_group {
            let _ = process::signal_group(record.pid, Signal::SIGTERM);
        }
    }
    for &(pid, _) in &tagged {
        let _ = process::signal_pid(pid, Signal::SIGTERM);
    }
    let tagged_running = || {
        tagged
            .iter()
            .any(|&(pid, start)| process_running(pid, start))
    };
    let groups_running = || {
        alive
            .iter()
            .any(|(_, r, own_group)| *own_group && group_running(r.pid))
    };
    let running = || groups_running() || tagged_running();
    let deadline = std::time::Instant::now() + grace;
    while running() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    for (_, record, own_group) in &alive {
        if *own_group && group_running(record.pid) {
            let _ = process::signal_group(record.pid, Signal::SIGKILL);
        }
    }
    for &(pid, start) in &tagged {
        if process_running(pid, start) {
            let _ = process::signal_pid(pid, Signal::SIGKILL);
        }
    }
    // SIGKILL takes effect asynchronously: nothing may start before the groups are gone.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while running() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    alive.into_iter().map(|(service, ..)| service).collect()
}

/// Whether the group `record` names still runs: its leader is still the recorded process
/// (the same start time: the pid was not recycled) and something of the group is not a
/// zombie. A leader that exited without being reaped keeps its pid, and so its group's id,
/// from being reused, so its group is still the recorded one; but a group of zombies alone
/// runs nothing, and one whose leader is a zombie runs only if another member does.
fn recorded_group_running(record: &Record) -> bool {
    process::proc_stat(record.pid).is_some_and(|stat| {
        stat.start_time == record.start_time && (stat.state != 'Z' || group_running(record.pid))
    })
}

/// Whether `pid` is still the process started at `start_time`, and not a zombie.
fn process_running(pid: u32, start_time: u64) -> bool {
    process::proc_stat(pid).is_some_and(|stat| stat.start_time == start_time && stat.state != 'Z')
}

/// Whether any member of process group `pgid` is still running. The old daemon's children
/// were re-parented elsewhere, so their zombies are not ours to reap and must not count.
fn group_running(pgid: u32) -> bool {
    if !process::group_alive(pgid) {
        return false;
    }
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return true;
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(process::proc_stat)
        .any(|stat| stat.pgrp == pgid && stat.state != 'Z')
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;

    fn spawn_group(script: &str) -> u32 {
        let mut cmd = std::process::Command::new("/bin/sh");
        cmd.args(["-c", script]).process_group(0);
        cobble_sys::reaper::spawn(&mut cmd).expect("spawn").pid
    }

    #[test]
    fn leftovers_are_ended_and_the_record_removed() {
        let dir = tempfile::tempdir().unwrap();
        let leader = spawn_group("sleep 1000 & wait");
        let mut registry = ProcessRegistry::new(Some(dir.path()));
        registry.record("web", leader, None);
        assert!(dir.path().join(FILE_NAME).exists());
        // A new daemon (here: the same test) finds and ends the group.
        let ended = end_leftovers(dir.path(), Duration::from_secs(2));
        assert_eq!(ended, ["web"]);
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while process::group_alive(leader) {
            assert!(std::time::Instant::now() < deadline, "group still alive");
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!dir.path().join(FILE_NAME).exists());
    }

    #[test]
    fn groups_that_ignore_sigterm_are_killed_after_the_grace() {
        let dir = tempfile::tempdir().unwrap();
        let leader = spawn_group("trap '' TERM; sleep 1000");
        let mut registry = ProcessRegistry::new(Some(dir.path()));
        registry.record("stubborn", leader, None);
        end_leftovers(dir.path(), Duration::from_millis(200));
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while process::group_alive(leader) {
            assert!(std::time::Instant::now() < deadline, "group still alive");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    #[test]
    fn a_recycled_pid_is_never_killed() {
        let dir = tempfile::tempdir().unwrap();
        let leader = spawn_group("sleep 1000");
        let start_time = process::process_start_time(leader).unwrap();
        let records: BTreeMap<String, Record> = [(
            "old".to_owned(),
            Record {
                pid: leader,
                start_time: start_time + 1,
                invocation: None,
            },
        )]
        .into();
        std::fs::write(
            dir.path().join(FILE_NAME),
            serde_json::to_vec(&records).unwrap(),
        )
        .unwrap();
        assert!(end_leftovers(dir.path(), Duration::from_millis(100)).is_empty());
        assert!(process::group_alive(leader));
        process::signal_group(leader, Signal::SIGKILL).unwrap();
    }

    /// A recorded group leader that has exited but was never reaped (its parent after the
    /// old daemon's death does not wait for it) is a zombie: nothing of it runs, so nothing
    /// is reported or signalled as still running.
    #[test]
    fn a_zombie_leader_is_not_taken_for_a_running_service() {
        let dir = tempfile::tempdir().unwrap();
        // `setsid` makes the background job lead a group of its own and execs the short
        // command in it; its parent becomes `sleep`, which never reaps it.
        let parent = spawn_group("setsid sh -c 'exit 3' & exec sleep 1000");
        let zombie = {
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            loop {
                let zombie = process::children(parent).into_iter().find(|&pid| {
                    process::proc_stat(pid).is_some_and(|s| s.state == 'Z' && s.pgrp == pid)
                });
                if let Some(zombie) = zombie {
                    break zombie;
                }
                assert!(std::time::Instant::now() < deadline, "no zombie leader");
                std::thread::sleep(Duration::from_millis(20));
            }
        };
        let start_time = process::process_start_time(zombie).unwrap();
        let records: BTreeMap<String, Record> = [(
            "s1".to_owned(),
            Record {
                pid: zombie,
                start_time,
                invocation: None,
            },
        )]
        .into();
        std::fs::write(
            dir.path().join(FILE_NAME),
            serde_json::to_vec(&records).unwrap(),
        )
        .unwrap();
        let ended = end_leftovers(dir.path(), Duration::from_secs(2));
        process::signal_group(parent, Signal::SIGKILL).unwrap();
        assert!(ended.is_empty(), "a zombie reported as running: {ended:?}");
    }

    /// A group whose leader is a zombie but whose other members still run is a running
    /// service: its members are ended.
    #[test]
    fn a_group_with_a_zombie_leader_and_live_members_is_ended() {
        let dir = tempfile::tempdir().unwrap();
        let parent = spawn_group("setsid sh -c 'sleep 1000 & exit 3' & exec sleep 1000");
        let (leader, member) = {
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            loop {
                let leader = process::children(parent).into_iter().find(|&pid| {
                    process::proc_stat(pid).is_some_and(|s| s.state == 'Z' && s.pgrp == pid)
                });
                let member = leader.and_then(|leader| {
                    std::fs::read_dir("/proc")
                        .unwrap()
                        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
                        .find(|&pid| {
                            pid != leader
                                && process::proc_stat(pid)
                                    .is_some_and(|s| s.pgrp == leader && s.state != 'Z')
                        })
                });
                if let (Some(leader), Some(member)) = (leader, member) {
                    break (leader, member);
                }
                assert!(std::time::Instant::now() < deadline, "no zombie leader");
                std::thread::sleep(Duration::from_millis(20));
            }
        };
        let records: BTreeMap<String, Record> = [(
            "s1".to_owned(),
            Record {
                pid: leader,
                start_time: process::process_start_time(leader).unwrap(),
                invocation: None,
            },
        )]
        .into();
        std::fs::write(
            dir.path().join(FILE_NAME),
            serde_json::to_vec(&records).unwrap(),
        )
        .unwrap();
        let ended = end_leftovers(dir.path(), Duration::from_secs(2));
        let member_left = process::proc_stat(member).is_some_and(|s| s.state != 'Z');
        process::signal_group(parent, Signal::SIGKILL).unwrap();
        assert_eq!(ended, ["s1"]);
        assert!(!member_left, "the live member was left running");
    }

    #[test]
    fn forget_removes_only_the_matching_pid() {
        let dir = tempfile::tempdir().unwrap();
        let mut registry = ProcessRegistry::new(Some(dir.path()));
        let me = std::process::id();
        registry.record("a", me, None);
        registry.forget("a", me + 1);
        assert!(registry.records.contains_key("a"));
        registry.forget("a", me);
        assert!(registry.records.is_empty());
        let on_disk: BTreeMap<String, Record> =
            serde_json::from_slice(&std::fs::read(dir.path().join(FILE_NAME)).unwrap()).unwrap();
        assert!(on_disk.is_empty());
    }

    fn record_set(registry: &ProcessRegistry) -> BTreeMap<String, Record> {
        let path = registry.path.as_ref().unwrap();
        serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
    }

    #[test]
    fn small_records_are_rewritten_in_place_and_large_ones_renamed() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        let me = std::process::id();
        let mut registry = ProcessRegistry::new(Some(dir.path()));
        registry.record("a-service-with-a-long-name", me, Some("invocation"));
        let inode = std::fs::metadata(&path).unwrap().ino();
        // Held open, so that no later file of the test can be given the same inode number.
        let _original = std::fs::File::open(&path).unwrap();
        registry.record("exec task 1", me, None);
        registry.forget("a-service-with-a-long-name", me);
        // Shorter than before: padded, still exactly the records.
        assert_eq!(
            record_set(&registry).keys().collect::<Vec<_>>(),
            ["exec task 1"]
        );
        assert_eq!(
            std::fs::metadata(&path).unwrap().ino(),
            inode,
            "rewritten in place"
        );

        for i in 0..100 {
            registry.record(&format!("service-{i}"), me, Some("an-invocation-id"));
        }
        assert!(std::fs::metadata(&path).unwrap().len() > IN_PLACE_MAX as u64);
        assert_ne!(
            std::fs::metadata(&path).unwrap().ino(),
            inode,
            "renamed over"
        );
        assert_eq!(record_set(&registry).len(), 101);
        for i in 0..100 {
            registry.forget(&format!("service-{i}"), me);
        }
        assert_eq!(record_set(&registry).len(), 1);
        assert!(std::fs::metadata(&path).unwrap().len() < IN_PLACE_MAX as u64);
    }
}
