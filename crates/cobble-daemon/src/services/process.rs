//! What the supervisor does to processes, behind one trait so the actor can be tested with
//! scripted ones.
//!
//! Every operation may block (forking, user lookups, `/proc` walks, the registry file), so
//! the actor runs them on the blocking pool and gets their results back as messages. The
//! real implementation, [`OsProcesses`], spawns a service through [`crate::command`], records
//! its group in the [`ProcessRegistry`] between fork and exec (so the command never runs
//! unrecorded), and stops groups
//! together with the descendants that left them.

use std::sync::Mutex;

use cobble_plan::Service;
use futures_util::future::BoxFuture;
use jiff::Timestamp;
use tokio::io::AsyncReadExt;
use tokio::net::unix::pipe;

use super::logbuf::{LineSplitter, ServiceLog};
use super::machine::GroupSignal;
use super::registry::ProcessRegistry;
use crate::command::{self, Launch, LaunchError, Wiring};
use crate::output::Sink;
use crate::state::format_utc_millis;
use cobble_sys::process::{self as sys, Signal};

/// A descendant that left its service's process group, with its start time (so a recycled
/// pid is never signalled).
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
    /// Sends `signal` to the group led by `pid` and to the descendants that left the group;
    /// returns those descendants.
    fn signal_group(&self, pid: u32, signal: GroupSignal) -> Vec<Escaped>;
    /// SIGKILLs whatever is left of the group led by `pid` and the `escaped` descendants that
    /// are still the same processes.
    fn end_group(&self, pid: u32, escaped: &[Escaped]);
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
}

impl OsProcesses {
    pub fn new(registry: ProcessRegistry) -> OsProcesses {
        OsProcesses {
            registry: Mutex::new(registry),
        }
    }

    fn registry(&self) -> std::sync::MutexGuard<'_, ProcessRegistry> {
        self.registry.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records the process group of a command that is no service's (an exec's) under `name`,
    /// so that a daemon killed while it runs leaves nothing its successor cannot end.
    /// Blocking.
    pub fn record(&self, name: &str, pid: u32) {
        self.registry().record(name, pid);
    }

    /// Forgets a group recorded with [`OsProcesses::record`] once its leader has exited,
    /// leaving the file to the next write (see [`ProcessRegistry::forget_unsaved`]): an exec
    /// pays one write, not two. Blocks while a write is under way.
    pub fn forget_recorded(&self, name: &str, pid: u32) {
        self.registry().forget_unsaved(name, pid);
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
        let launch = Launch {
            argv,
            environment: config.environment.clone(),
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
            self.registry().record(name, pid);
            recorded = Some(pid);
        });
        let child = spawned.map_err(|e| {
            if let Some(pid) = recorded {
                self.registry().forget(name, pid);
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
        // Descendants that left the group (setsid, setpgid) would survive the group signal:
        // find them first (once the leader dies they are re-parented out of its tree).
        let escaped = escaped_descendants(pid);
        if let Err(e) = sys::signal_group(pid, sig) {
            tracing::info!("Cannot send {sig} to process group {pid}: {e}");
        }
        for &(child, _) in &escaped {
            let _ = sys::signal_pid(child, sig);
        }
        escaped
    }

    fn end_group(&self, pid: u32, escaped: &[Escaped]) {
        let _ = sys::signal_group(pid, Signal::SIGKILL);
        for &(child, start_time) in escaped {
            if sys::process_start_time(child) == Some(start_time) {
                let _ = sys::signal_pid(child, Signal::SIGKILL);
            }
        }
    }

    fn signal_process(&self, pid: u32, signal: &str) -> Result<(), String> {
        let sig = sys::parse_signal(signal).map_err(|e| e.to_string())?;
        sys::signal_pid(pid, sig).map_err(|e| e.to_string())
    }

    fn forget(&self, name: &str, pid: u32) {
        self.registry().forget(name, pid);
    }

    fn missing(&self, paths: Vec<String>) -> Vec<String> {
        paths
            .into_iter()
            .filter(|p| !std::path::Path::new(p).exists())
            .collect()
    }
}

/// Descendants of `leader` outside its process group, with their start times.
fn escaped_descendants(leader: u32) -> Vec<Escaped> {
    sys::descendants(leader)
        .into_iter()
        .filter_map(|pid| {
            let stat = sys::proc_stat(pid)?;
            (stat.pgrp != leader).then_some((pid, stat.start_time))
        })
        .collect()
}

/// Copies a service's output into its log, and to the daemon's stdout with `--verbose`,
/// until end of file. Neither blocks: the log is memory, stdout a bounded queue.
pub async fn copy_output(
    mut reader: pipe::Receiver,
    name: String,
    log: ServiceLog,
    stdout: Option<&'static Sink>,
) {
    let mut splitter = LineSplitter::default();
    let mut buf = vec![0u8; 16 * 1024];
    let mut line_out = String::new();
    let mut emit = |line: String| {
        let now = Timestamp::now();
        if let Some(stdout) = stdout {
            use std::fmt::Write;
            line_out.clear();
            let _ = write!(line_out, "{} [{name}] {line}", format_utc_millis(now));
            stdout.line(line_out.as_bytes());
        }
        log.push(now, line);
    };
    loop {
        match reader.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => splitter.feed(&buf[..n], &mut emit),
        }
    }
    splitter.finish(&mut emit);
}
