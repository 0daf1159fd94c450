//! What the supervisor does to processes, behind one trait so the actor can be tested with
//! scripted ones.
//!
//! Every operation may block (forking, user lookups, `/proc` walks, the registry file), so
//! the actor runs them on the blocking pool and gets their results back as messages. The
//! real implementation, [`OsProcesses`], spawns a service through [`crate::command`], records
//! its group in the [`ProcessRegistry`] between fork and exec (so the command never runs
//! unrecorded), and stops groups together with every process that left them
//! ([`super::members`]).

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use cobble_plan::Service;
use futures_util::future::BoxFuture;
use jiff::Timestamp;
use tokio::net::unix::pipe;

use super::logbuf::{LineSplitter, ServiceLog, Split, format_lines};
use super::machine::GroupSignal;
use super::members::{self, INVOCATION_VARIABLE};
use super::registry::ProcessRegistry;
use crate::command::{self, Launch, LaunchError, Wiring};
use crate::logfwd::ServiceTap;
use crate::output::Sink;
use cobble_sys::process::{self as sys, Signal};

/// A process of a service outside its main process's reach by group signal (or, once the
/// main process is gone, any process left of it), with its start time (so a recycled pid is
/// never signalled).
pub type Escaped = (u32, u64);

/// A spawned service process.
pub struct Spawned {
    pub pid: u32,
    /// Resolves with the exit code (-1 when the status was lost, which is never expected).
    pub exit: BoxFuture<'static, i32>,
    /// Its merged stdout and stderr, when there is a pipe to read.
    pub output: Option<pipe::Receiver>,
}

/// Why a service did not spawn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpawnError {
    /// These `requires-paths` do not exist: wait for them, do not fail.
    Missing(Vec<String>),
    /// The start fails with this text (`cannot start service: ...`).
    Failed(String),
}

/// Everything the supervisor does to processes. Every method may block.
pub trait Processes: Send + Sync + 'static {
    /// Spawns service `name` unless one of its `requires-paths` is missing, and records its
    /// group so the next daemon can find it.
    fn spawn(&self, name: &str, config: &Service) -> Result<Spawned, SpawnError>;
    /// Sends `signal` to the group led by `pid` and to every other process of its instance
    /// (descendants that left the group, orphans); returns those processes.
    fn signal_group(&self, pid: u32, signal: GroupSignal) -> Vec<Escaped>;
    /// SIGKILLs whatever is left of the group led by `pid`, the `escaped` descendants that
    /// are still the same processes and every other process still attributed to it, and
    /// forgets the instance.
    fn end_group(&self, pid: u32, escaped: &[Escaped]);
    /// The main process `pid` has exited on its own: sends `signal` to what is left of its
    /// instance (its group and the processes that left it) and returns those processes;
    /// none when nothing is left.
    fn signal_remains(&self, pid: u32, signal: GroupSignal) -> Vec<Escaped>;
    /// Sends `signal` (a name such as `SIGHUP`) to one process.
    fn signal_process(&self, pid: u32, signal: &str) -> Result<(), String>;
    /// Service `name`'s process `pid` has exited: forget its group.
    fn forget(&self, name: &str, pid: u32);
    /// Which of `paths` do not exist.
    fn missing(&self, paths: Vec<String>) -> Vec<String>;
}

/// The real processes: spawned through the reaper, recorded in `$PEBBLE/.cobble-processes`.
pub struct OsProcesses {
    registry: Mutex<ProcessRegistry>,
    /// The instances whose processes may still run, by main process.
    instances: Mutex<HashMap<u32, Instance>>,
    /// Instances whose main process exited and whose remains are being ended, taken out of
    /// `instances` so that a new instance whose main process got the same pid is not taken
    /// for them.
    ending: Mutex<HashMap<u32, Instance>>,
    /// Makes invocation IDs unique to this daemon.
    invocation_prefix: String,
    /// Invocations so far.
    invocations: AtomicU64,
}

/// What names the processes of one run of a service.
#[derive(Debug, Clone)]
struct Instance {
    /// The main process's start time.
    start_time: u64,
    /// The value of [`INVOCATION_VARIABLE`] in its environment.
    invocation: String,
}

/// Instances kept before the ones whose group has gone are dropped (an instance is
/// forgotten when it is ended; this bounds those never ended, such as aborted starts).
const INSTANCES_KEPT: usize = 256;

impl OsProcesses {
    pub fn new(registry: ProcessRegistry) -> OsProcesses {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        OsProcesses {
            registry: Mutex::new(registry),
            instances: Mutex::new(HashMap::new()),
            ending: Mutex::new(HashMap::new()),
            invocation_prefix: format!("{:x}{:08x}", now.as_secs(), std::process::id()),
            invocations: AtomicU64::new(0),
        }
    }

    fn registry(&self) -> std::sync::MutexGuard<'_, ProcessRegistry> {
        self.registry.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn instances(&self) -> std::sync::MutexGuard<'_, HashMap<u32, Instance>> {
        self.instances.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn ending(&self) -> std::sync::MutexGuard<'_, HashMap<u32, Instance>> {
        self.ending.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The live processes of the instance whose main process `pid` is alive (itself
    /// excluded).
    fn members(&self, pid: u32) -> Vec<(u32, sys::ProcStat)> {
        let instance = self.instances().get(&pid).cloned();
        match instance {
            Some(instance) => self.members_of(pid, Some(instance)),
            // Gone before it was recorded: its tree is all that is known.
            None => sys::descendants(pid)
                .into_iter()
                .filter_map(|child| Some((child, sys::proc_stat(child)?)))
                .filter(|(_, stat)| stat.state != 'Z')
                .collect(),
        }
    }

    /// The live processes of `instance`, led by `pid` (itself excluded); none for an
    /// instance no longer known, whose pid may belong to another process by now.
    fn members_of(&self, pid: u32, instance: Option<Instance>) -> Vec<(u32, sys::ProcStat)> {
        match instance {
            Some(instance) => members::members(pid, instance.start_time, &instance.invocation)
                .into_iter()
                .collect(),
            None => Vec::new(),
        }
    }

    /// Records the process group of a command that is no service's (an exec's) under `name`,
    /// so that a daemon killed while it runs leaves nothing its successor cannot end.
    /// Blocking.
    pub fn record(&self, name: &str, pid: u32) {
        self.registry().record(name, pid, None);
    }

    /// Forgets a group recorded with [`OsProcesses::record`] once its leader has exited,
    /// leaving the file to the next write (see [`ProcessRegistry::forget_unsaved`]): an exec
    /// pays one write, not two. Blocks while a write is under way.
    pub fn forget_recorded(&self, name: &str, pid: u32) {
        self.registry().forget_unsaved(name, pid);
    }

    /// Writes the registry without the groups forgotten since the last write, for a daemon
    /// on its way out: its successor then has no stale record to check. Blocking.
    pub fn save_registry(&self) {
        self.registry().save();
    }

    /// Ends every group still recorded (SIGTERM, then SIGKILL after `grace`), for a daemon
    /// that must exit without its supervisor. Blocking.
    pub fn end_all(&self, grace: std::time::Duration) -> Vec<String> {
        self.registry().end_all(grace)
    }
}

impl Processes for OsProcesses {
    fn spawn(&self, name: &str, config: &Service) -> Result<Spawned, SpawnError> {
        let missing = self.missing(config.requires_paths.clone());
        if !missing.is_empty() {
            return Err(SpawnError::Missing(missing));
        }
        let (base, extra) = config
            .parse_command()
            .map_err(|e| SpawnError::Failed(e.to_string()))?;
        let argv: Vec<String> = base.into_iter().chain(extra).collect();
        if argv.is_empty() {
            return Err(SpawnError::Failed(format!(
                "cannot start service: no command for service \"{name}\""
            )));
        }
        let invocation = format!(
            "{}{:08x}",
            self.invocation_prefix,
            self.invocations.fetch_add(1, Ordering::Relaxed)
        );
        let mut environment = config.environment.clone();
        environment.insert(INVOCATION_VARIABLE.to_owned(), invocation.clone());
        let launch = Launch {
            argv,
            environment,
            working_dir: config.working_dir.clone(),
            user_id: config.user_id,
            user: config.user.clone(),
            group_id: config.group_id,
            group: config.group.clone(),
            user_environment: true,
            clear_environment: false,
        };
        tracing::info!("Service \"{name}\" starting: {}", config.command);
        // Recorded before the command may start: a daemon killed at any instant leaves no
        // service process that its successor cannot find.
        let mut recorded = None;
        let spawned = command::spawn_recorded(&launch, Wiring::Merged, |pid| {
            self.registry().record(name, pid, Some(&invocation));
            recorded = Some(pid);
            if let Some(start_time) = sys::process_start_time(pid) {
                let mut instances = self.instances();
                if instances.len() >= INSTANCES_KEPT {
                    instances.retain(|&leader, _| sys::group_alive(leader));
                }
                instances.insert(
                    pid,
                    Instance {
                        start_time,
                        invocation: invocation.clone(),
                    },
                );
            }
        });
        let child = spawned.map_err(|e| {
            if let Some(pid) = recorded {
                self.registry().forget(name, pid);
                self.instances().remove(&pid);
            }
            SpawnError::Failed(match e {
                // Pebble words user errors without the prefix.
                LaunchError::User(text) => text,
                other => format!("cannot start service: {other}"),
            })
        })?;
        let exit = child.exit;
        Ok(Spawned {
            pid: child.pid,
            exit: Box::pin(async move { exit.await.map(|s| s.code()).unwrap_or(-1) }),
            output: child.output,
        })
    }

    fn signal_group(&self, pid: u32, signal: GroupSignal) -> Vec<Escaped> {
        let sig = match signal {
            GroupSignal::Term => Signal::SIGTERM,
            GroupSignal::Kill => Signal::SIGKILL,
        };
        // Processes that left the group (setsid, setpgid, orphans) would survive the group
        // signal: find them first (once the leader dies its tree is gone).
        let escaped: Vec<Escaped> = self
            .members(pid)
            .into_iter()
            .filter(|(_, stat)| stat.pgrp != pid)
            .map(|(child, stat)| (child, stat.start_time))
            .collect();
        if let Err(e) = sys::signal_group(pid, sig) {
            tracing::info!("Cannot send {sig} to process group {pid}: {e}");
        }
        for &(child, _) in &escaped {
            let _ = sys::signal_pid(child, sig);
        }
        escaped
    }

    fn end_group(&self, pid: u32, escaped: &[Escaped]) {
        let ending = self.ending().remove(&pid);
        let instance = match ending {
            Some(instance) => Some(instance),
            None => self.instances().remove(&pid),
        };
        let leader_start = instance.as_ref().map(|i| i.start_time);
        let now = self.members_of(pid, instance);
        // Once its last member is gone a group's id may be reused: signal it only while a
        // member is seen (or for a group this daemon knows nothing more of).
        let group_seen = match leader_start {
            None => true,
            Some(start) => {
                sys::process_start_time(pid) == Some(start)
                    || now.iter().any(|(_, stat)| stat.pgrp == pid)
            }
        };
        if group_seen {
            let _ = sys::signal_group(pid, Signal::SIGKILL);
        }
        for &(child, start_time) in escaped {
            if sys::process_start_time(child) == Some(start_time) {
                let _ = sys::signal_pid(child, Signal::SIGKILL);
            }
        }
        for (child, _) in now {
            let _ = sys::signal_pid(child, Signal::SIGKILL);
        }
    }

    fn signal_remains(&self, pid: u32, signal: GroupSignal) -> Vec<Escaped> {
        let sig = match signal {
            GroupSignal::Term => Signal::SIGTERM,
            GroupSignal::Kill => Signal::SIGKILL,
        };
        let instance = self.instances().remove(&pid);
        let remains = self.members_of(pid, instance.clone());
        if remains.is_empty() {
            return Vec::new();
        }
        if let Some(instance) = instance {
            self.ending().insert(pid, instance);
        }
        // A member still in the group keeps its id from being reused, so the group signal
        // reaches this instance only.
        if remains.iter().any(|(_, stat)| stat.pgrp == pid) {
            let _ = sys::signal_group(pid, sig);
        }
        for (child, _) in &remains {
            let _ = sys::signal_pid(*child, sig);
        }
        remains
            .into_iter()
            .map(|(child, stat)| (child, stat.start_time))
            .collect()
    }

    fn signal_process(&self, pid: u32, signal: &str) -> Result<(), String> {
        let sig = sys::parse_signal(signal).map_err(|e| e.to_string())?;
        sys::signal_pid(pid, sig).map_err(|e| e.to_string())
    }

    fn forget(&self, name: &str, pid: u32) {
        // A stale record is harmless (see `forget_unsaved`), and rewriting the file at every
        // exit made stopping many services at once wait on as many renames.
        self.registry().forget_unsaved(name, pid);
    }

    fn missing(&self, paths: Vec<String>) -> Vec<String> {
        paths
            .into_iter()
            .filter(|p| !std::path::Path::new(p).exists())
            .collect()
    }
}

/// Copies a service's output into its log, to the daemon's stdout with `--verbose`, and to
/// the log targets that want it, until end of file. None of them blocks: the log is memory,
/// stdout and the targets bounded queues. The work is done per read, not per line, wherever
/// it can be: the log takes a read's lines at once, and they are formatted for stdout
/// straight into its queue, under one lock.
pub async fn copy_output(
    reader: pipe::Receiver,
    name: String,
    log: ServiceLog,
    stdout: Option<&'static Sink>,
    mut forward: ServiceTap,
) {
    let mut splitter = LineSplitter::for_service(&name);
    let mut grown = false;
    let mut deliver = |split: &Split<'_>| {
        if split.is_empty() {
            return;
        }
        if let Some(stdout) = stdout {
            stdout.lines_with(split.len() as u64, |queue| {
                format_lines(split, &name, queue);
            });
        }
        if forward.wanted() {
            for (time, text) in split.lines() {
                forward.line(time, &String::from_utf8_lossy(text));
            }
        }
        log.push_lines(split);
    };
    'service: loop {
        if reader.readable().await.is_err() {
            break;
        }
        // Read until the pipe is empty, not only until a read comes back short (what
        // `AsyncRead` does). A service that writes fast is usually in the middle of a write
        // when a read finds less than it asked for, and its next pages arrive while the lines
        // just read are stored. A reader that goes on reading is awake when they do, so the
        // service rarely has to wake it, and waking a reader on another CPU costs the service
        // more than a read costs the daemon.
        loop {
            // Each read counts against the task's budget, as an `AsyncRead` read does, so a
            // service that never lets its pipe empty still shares the thread.
            tokio::task::consume_budget().await;
            let n = match reader.try_read(splitter.buffer()) {
                Ok(0) => break 'service,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue 'service,
                Err(_) => break 'service,
            };
            // The lines of one read arrived together: one clock reading serves them all.
            deliver(&splitter.feed(n, Timestamp::now()));
            if !grown && splitter.reads_fill_the_largest_room() {
                // A fast service gets a larger pipe, so that it writes on while the daemon
                // stores what it read instead of waiting for the pipe to empty. Where the
                // kernel refuses, the default pipe works, only slower.
                let _ = cobble_sys::output::set_pipe_size(&reader, FAST_PIPE_BYTES);
                grown = true;
            }
        }
    }
    deliver(&splitter.finish(Timestamp::now()));
}

/// The pipe of a service whose reads fill [`LineSplitter`]'s largest room (the default is
/// 64 KiB).
const FAST_PIPE_BYTES: usize = 256 * 1024;

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::Arc;

    use tokio::sync::Notify;

    use super::*;
    use crate::logfwd::Tap;

    /// Feeds `writes` to [`copy_output`] through a real pipe, each write landing whole in
    /// an empty pipe (so each is exactly one read), and returns the pipe's size at the end.
    async fn pipe_size_after(writes: &[usize]) -> usize {
        let (reader, mut writer) = std::io::pipe().unwrap();
        let reader = pipe::Receiver::from_owned_fd(reader.into()).unwrap();
        let log = ServiceLog::new();
        let wake = Arc::new(Notify::new());
        let mut follower = log.follow(Some(0), wake.clone());
        let copy = tokio::spawn(copy_output(
            reader,
            "svc".into(),
            log.clone(),
            None,
            Tap::default().service("svc"),
        ));
        for &bytes in writes {
            let line = b"x".repeat(99);
            let mut chunk: Vec<u8> = line
                .iter()
                .copied()
                .chain([b'\n'])
                .cycle()
                .take(bytes)
                .collect();
            *chunk.last_mut().unwrap() = b'\n';
            writer.write_all(&chunk).unwrap();
            // The next write waits until the reader has taken this one's last line.
            let mut seen = 0;
            while seen < chunk.iter().filter(|&&b| b == b'\n').count() {
                let notified = wake.notified();
                let batch = follower.take(usize::MAX);
                if batch.entries.is_empty() {
                    notified.await;
                }
                seen += batch.entries.len();
            }
        }
        let size = cobble_sys::output::pipe_size(&writer).unwrap();
        drop(writer);
        copy.await.unwrap();
        size
    }

    #[tokio::test]
    async fn a_service_whose_reads_fill_the_largest_room_gets_a_larger_pipe() {
        // Each read fills its room: 4 KiB, then 8, 16, 32 and 64.
        let fast = pipe_size_after(&[4096, 8192, 16384, 32768, 65536]).await;
        assert_eq!(fast, FAST_PIPE_BYTES);
    }

    #[tokio::test]
    async fn a_service_that_writes_little_at_a_time_keeps_the_default_pipe() {
        let default = {
            let (reader, _writer) = std::io::pipe().unwrap();
            cobble_sys::output::pipe_size(&reader).unwrap()
        };
        // Every read fills its room but the last, which stops the room growing at 32 KiB.
        let slow = pipe_size_after(&[4096, 8192, 16384, 30000, 100, 100]).await;
        assert_eq!(slow, default);
    }
}
