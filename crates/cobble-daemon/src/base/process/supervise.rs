//! What the supervisor does to processes, behind one trait so the actor can be tested with
//! scripted ones.
//!
//! Every operation may block (forking, user lookups, `/proc` walks, the registry file), so
//! the actor runs them on the blocking pool and gets their results back as messages. The
//! real implementation, [`OsProcesses`], spawns a service through [`super::launch`], records
//! its group in the [`ProcessRegistry`] between fork and exec (so the command never runs
//! unrecorded), and stops groups together with every process that left them
//! ([`super::members`]).

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use cobble_plan::Service;
use futures_util::future::BoxFuture;
use tokio::net::unix::pipe;

use super::launch::{self, Launch, LaunchError, Wiring};
use super::members::{self, INVOCATION_VARIABLE};
use super::registry::ProcessRegistry;
use cobble_sys::notify::Sender;
use cobble_sys::process::{self as sys, Signal};

/// Signals the supervisor sends to a service's process group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupSignal {
    Term,
    Kill,
}

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
    /// Whether `sender` (of a notify message) is one of the processes of the instance whose
    /// main process is `leader`: the main process, a process of its group or a member of
    /// its instance. A sender that has exited already (a `systemd-notify` that sent and
    /// left) can no longer be placed, and counts when it ran as the main process's user.
    fn belongs(&self, leader: u32, sender: Sender) -> bool;
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
        let spawned = launch::spawn_recorded(&launch, Wiring::Merged, |pid| {
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

    fn belongs(&self, leader: u32, sender: Sender) -> bool {
        if sender.pid == leader {
            return true;
        }
        if sender.pid == 0 {
            // Not in the daemon's pid namespace: nothing to go by.
            return false;
        }
        match sys::proc_stat(sender.pid) {
            // A zombie still tells its group.
            Some(stat) => {
                stat.pgrp == leader
                    || self
                        .members(leader)
                        .iter()
                        .any(|(member, _)| *member == sender.pid)
            }
            _ => {
                use std::os::unix::fs::MetadataExt;
                std::fs::metadata(format!("/proc/{leader}"))
                    .is_ok_and(|leader| leader.uid() == sender.uid)
            }
        }
    }
}
