//! What the supervisor does to processes, behind one trait so the actor can be tested with
//! scripted ones.
//!
//! Every operation may block (forking, user lookups, `/proc` walks, the registry file), so
//! the actor runs them on the blocking pool and gets their results back as messages. The
//! real implementation, [`OsProcesses`], spawns a service through [`super::launch`], records
//! its group in the [`ProcessRegistry`] between fork and exec (so the command never runs
//! unrecorded), and stops groups together with every process that left them
//! ([`super::members`]).

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use cobble_plan::Service;
use futures_util::future::BoxFuture;
use tokio::net::unix::pipe;

use super::cgroup::{Cgroups, ServiceCgroup};
use super::launch::{self, Launch, LaunchError, Wiring};
use super::members::{self, INVOCATION_VARIABLE};
use super::registry::ProcessRegistry;
use super::sockets::HeldSockets;
use cobble_sys::notify::Sender;
use cobble_sys::process::{self as sys, Signal};
use cobble_sys::reaper;

/// Signals the supervisor sends to a service's process group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GroupSignal {
    Term,
    Kill,
    /// SIGABRT: what a missed watchdog sends first, as systemd's `WatchdogSignal=` does.
    Abort,
}

impl GroupSignal {
    /// The signal sent: the one place that says it, for every way a group is signalled.
    fn signal(self) -> Signal {
        match self {
            GroupSignal::Term => Signal::SIGTERM,
            GroupSignal::Kill => Signal::SIGKILL,
            GroupSignal::Abort => Signal::SIGABRT,
        }
    }
}

/// A process of a service outside its main process's reach by group signal (or, once the
/// main process is gone, any process left of it), with its start time (so a recycled pid is
/// never signalled).
pub(crate) type Escaped = (u32, u64);

/// A spawned service process.
pub(crate) struct Spawned {
    pub pid: u32,
    /// Resolves with the exit code (-1 when the status was lost, which is never expected).
    pub exit: BoxFuture<'static, i32>,
    /// Its merged stdout and stderr, when there is a pipe to read.
    pub output: Option<pipe::Receiver>,
}

/// What a service uses (or has used), as far as the daemon can tell.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Usage {
    /// Resident memory of its processes, summed (pages shared between them count in each).
    pub memory_bytes: u64,
    /// CPU time (user + system) of every run of it since the daemon started: the runs that
    /// ended, with the children they waited for, and the processes of the current one.
    pub cpu: Duration,
    /// Its processes now.
    pub processes: u64,
    /// The open file descriptors of its processes now, summed.
    pub open_fds: u64,
    /// Memory charged to its cgroup (resident memory and page cache), where it has one.
    pub cgroup_memory_bytes: Option<u64>,
    /// Its cgroup, where it has one.
    pub cgroup: Option<PathBuf>,
}

/// A launch that failed: why, and the pid its group had been recorded under when it got as
/// far as a fork (the record is forgotten again).
#[derive(Debug)]
pub(crate) struct Abandoned {
    pub error: LaunchError,
    pub recorded: Option<u32>,
}

/// Why a service did not spawn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SpawnError {
    /// These `requires-paths` do not exist: wait for them, do not fail.
    Missing(Vec<String>),
    /// The start fails with this text (`cannot start service: ...`).
    Failed(String),
}

/// Everything the supervisor does to processes. Every method may block.
pub(crate) trait Processes: Send + Sync + 'static {
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
    /// What each service uses, given as its name and its main process if one runs.
    fn usage(&self, targets: &[(String, Option<u32>)]) -> Vec<Usage> {
        vec![Usage::default(); targets.len()]
    }
    /// Why the main process `pid`, which has exited, was killed, when it was by something
    /// other than a signal sent to it (the OOM killer at the service's `memory-max`).
    fn killed_by(&self, pid: u32) -> Option<String> {
        let _ = pid;
        None
    }
    /// The listening sockets held for service `name` (`sockets:`). May wait for a bind under
    /// way.
    fn held_sockets(&self, name: &str) -> Vec<super::sockets::SocketReport> {
        let _ = name;
        Vec::new()
    }
    /// What of `config`'s `resources:` cannot be enforced here, and why.
    fn unenforced(&self, config: &Service) -> Option<String> {
        let _ = config;
        None
    }
}

/// The real processes: spawned through the reaper, recorded in `$PEBBLE/.cobble-processes`.
pub(crate) struct OsProcesses {
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
    /// The cgroups of services with `resources:`, found when the first such service starts.
    cgroups: OnceLock<Cgroups>,
    /// Names this daemon's cgroup directory (see [`Cgroups::tag_for`]).
    cgroups_tag: String,
    /// CPU time of the runs of each service that have ended.
    cpu_done: Mutex<HashMap<String, Duration>>,
    /// Services whose unenforced resources the daemon log has told of, with what it said.
    told: Mutex<HashSet<(String, String)>>,
    /// The listening sockets held for services across their runs.
    sockets: HeldSockets,
}

/// What names the processes of one run of a service.
#[derive(Debug, Clone)]
struct Instance {
    /// The main process's start time.
    start_time: u64,
    /// The value of [`INVOCATION_VARIABLE`] in its environment.
    invocation: String,
    /// The cgroup it runs in, if it has one.
    cgroup: Option<ServiceCgroup>,
    /// Its `memory-max`, for the word on an OOM kill.
    memory_max: Option<cobble_plan::MemoryLimit>,
}

/// Instances kept before the ones whose group has gone are dropped (an instance is
/// forgotten when it is ended; this bounds those never ended, such as aborted starts).
const INSTANCES_KEPT: usize = 256;

impl OsProcesses {
    /// The processes of the daemon whose state directory is `state_dir` (which names the
    /// daemon's cgroups) and whose registry is `registry`.
    pub(crate) fn new(
        registry: ProcessRegistry,
        state_dir: Option<&std::path::Path>,
    ) -> OsProcesses {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        OsProcesses {
            registry: Mutex::new(registry),
            instances: Mutex::new(HashMap::new()),
            ending: Mutex::new(HashMap::new()),
            invocation_prefix: format!("{:x}{:08x}", now.as_secs(), std::process::id()),
            invocations: AtomicU64::new(0),
            cgroups: OnceLock::new(),
            cgroups_tag: Cgroups::tag_for(state_dir.unwrap_or(std::path::Path::new("/"))),
            cpu_done: Mutex::new(HashMap::new()),
            told: Mutex::new(HashSet::new()),
            sockets: HeldSockets::default(),
        }
    }

    /// The listening sockets held for services (`sockets:`).
    pub(crate) fn sockets(&self) -> &HeldSockets {
        &self.sockets
    }

    fn cgroups(&self) -> &Cgroups {
        self.cgroups
            .get_or_init(|| Cgroups::detect(&self.cgroups_tag))
    }

    /// Lets go of an instance that has ended: its cgroup goes once it is empty.
    fn retire(&self, instance: Option<Instance>) {
        if let Some(cgroup) = instance.and_then(|i| i.cgroup) {
            self.cgroups().retire(cgroup);
        }
    }

    /// Ends what is left in the services' cgroups and removes them, for a daemon on its way
    /// out. Blocking.
    pub(crate) fn remove_cgroups(&self) {
        if let Some(cgroups) = self.cgroups.get() {
            cgroups.remove_all();
        }
    }

    /// The cgroup for a run of `name` with `config`'s resources, if it has any and one can
    /// be had; says once in the daemon log what is not enforced.
    fn cgroup_for(
        &self,
        name: &str,
        config: &Service,
        invocation: &str,
    ) -> Result<Option<ServiceCgroup>, SpawnError> {
        if config.resources.is_empty() {
            return Ok(None);
        }
        let cgroup = self
            .cgroups()
            .create(name, invocation, &config.resources)
            .map_err(|e| SpawnError::Failed(format!("cannot start service: {e}")))?;
        if let Some(why) = self.cgroups().unenforced(&config.resources)
            && self
                .told
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert((name.to_owned(), why.clone()))
        {
            tracing::warn!("Service \"{name}\" {why}");
        }
        Ok(cgroup)
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
        self.members_among(pid, instance, &members::orphans())
    }

    /// [`OsProcesses::members_of`] with the daemon's orphans already listed.
    fn members_among(
        &self,
        pid: u32,
        instance: Option<Instance>,
        orphans: &[u32],
    ) -> Vec<(u32, sys::ProcStat)> {
        let Some(instance) = instance else {
            return Vec::new();
        };
        let mut members =
            members::members_among(pid, instance.start_time, &instance.invocation, orphans);
        // What left everything else behind (`env -i` and `setsid` in an orphan) is still in
        // the cgroup.
        if let Some(cgroup) = &instance.cgroup {
            for member in cgroup.procs() {
                if member != pid
                    && !members.contains_key(&member)
                    && let Some(stat) = sys::proc_stat(member).filter(|s| s.state != 'Z')
                {
                    members.insert(member, stat);
                }
            }
        }
        members.into_iter().collect()
    }

    /// What service `name` uses, with `pid` its main process if one runs and `orphans` the
    /// daemon's orphans ([`members::orphans`]).
    fn usage_of(&self, name: &str, pid: Option<u32>, orphans: &[u32]) -> Usage {
        let mut usage = Usage {
            cpu: self
                .cpu_done
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(name)
                .copied()
                .unwrap_or_default(),
            ..Usage::default()
        };
        let Some(pid) = pid else {
            return usage;
        };
        let instance = self.instances().get(&pid).cloned();
        let cgroup = instance.as_ref().and_then(|i| i.cgroup.clone());
        let mut pids = vec![pid];
        pids.extend(
            self.members_among(pid, instance, orphans)
                .into_iter()
                .map(|(p, _)| p),
        );
        let (page, ticks) = (
            cobble_sys::limits::page_size(),
            cobble_sys::limits::clock_ticks(),
        );
        let mut cpu_ticks = 0;
        for member in pids {
            let Some(stat) = cobble_sys::limits::proc_usage(member) else {
                continue;
            };
            if stat.state == 'Z' {
                continue;
            }
            usage.processes += 1;
            usage.memory_bytes += stat.rss_pages * page;
            cpu_ticks += stat.user_ticks + stat.system_ticks;
            usage.open_fds += cobble_sys::limits::open_fds(member).unwrap_or(0);
        }
        let live = match cgroup.as_ref().and_then(ServiceCgroup::cpu_time) {
            Some(time) => time,
            None => Duration::from_nanos(cpu_ticks.saturating_mul(1_000_000_000) / ticks),
        };
        usage.cpu += live;
        if let Some(cgroup) = cgroup {
            usage.cgroup_memory_bytes = cgroup.memory_bytes();
            usage.cgroup = Some(cgroup.path().to_owned());
        }
        usage
    }

    /// Spawns `launch` wired as `wiring` says, its process group recorded under `name` (with
    /// its `invocation` ID, for a service) before the command may start, so that a daemon
    /// killed at any instant leaves nothing its successor cannot find and end. `at_gate` runs
    /// then too, with the pid. A launch that fails forgets the record again. Blocking.
    pub(crate) fn spawn_recorded(
        &self,
        name: &str,
        invocation: Option<&str>,
        launch: &Launch,
        wiring: Wiring,
        at_gate: impl FnOnce(u32) + Send,
    ) -> Result<launch::Child, Abandoned> {
        let mut recorded = None;
        let spawned = launch::spawn_recorded(launch, wiring, |pid| {
            self.registry().record(name, pid, invocation);
            recorded = Some(pid);
            at_gate(pid);
        });
        spawned.map_err(|error| {
            if let Some(pid) = recorded {
                self.registry().forget(name, pid);
            }
            Abandoned { error, recorded }
        })
    }

    /// Keeps what the daemon needs to know of a service's run led by `pid` (its start time,
    /// invocation and cgroup), making room by retiring runs whose groups are gone.
    fn keep_instance(
        &self,
        pid: u32,
        invocation: &str,
        cgroup: &Option<ServiceCgroup>,
        config: &Service,
    ) {
        let Some(start_time) = sys::process_start_time(pid) else {
            return;
        };
        let mut instances = self.instances();
        let mut gone = Vec::new();
        if instances.len() >= INSTANCES_KEPT {
            instances.retain(|&leader, instance| {
                let alive = sys::group_alive(leader);
                if !alive {
                    gone.push(instance.clone());
                }
                alive
            });
        }
        instances.insert(
            pid,
            Instance {
                start_time,
                invocation: invocation.to_owned(),
                cgroup: cgroup.clone(),
                memory_max: config.resources.memory_max,
            },
        );
        drop(instances);
        for instance in gone {
            self.retire(Some(instance));
        }
    }

    /// The invocation ID of the run led by `pid`, for a re-execution that hands it over.
    pub(crate) fn invocation(&self, pid: u32) -> Option<String> {
        self.instances().get(&pid).map(|i| i.invocation.clone())
    }

    /// Takes on a service's run led by `pid` that a re-executed daemon's predecessor started
    /// (with `invocation`, under `resources`): recorded, and known as its own runs are, in
    /// the cgroup its predecessor made for it (found by its path). Blocking.
    pub(crate) fn adopt(
        &self,
        name: &str,
        pid: u32,
        invocation: Option<&str>,
        resources: &cobble_plan::Resources,
    ) {
        self.registry().record(name, pid, invocation);
        reaper::keep_cpu_time(pid);
        if let (Some(start_time), Some(invocation)) = (sys::process_start_time(pid), invocation) {
            let cgroup = if resources.is_empty() {
                None
            } else {
                self.cgroups().adopt(name, invocation)
            };
            self.instances().insert(
                pid,
                Instance {
                    start_time,
                    invocation: invocation.to_owned(),
                    memory_max: resources.memory_max,
                    cgroup,
                },
            );
        }
    }

    /// Forgets a group recorded with [`OsProcesses::spawn_recorded`] once its leader has exited,
    /// leaving the file to the next write (see [`ProcessRegistry::forget_unsaved`]): an exec
    /// pays one write, not two. Blocks while a write is under way.
    pub(crate) fn forget_recorded(&self, name: &str, pid: u32) {
        self.registry().forget_unsaved(name, pid);
    }

    /// Writes the registry without the groups forgotten since the last write, for a daemon
    /// on its way out: its successor then has no stale record to check. Blocking.
    pub(crate) fn save_registry(&self) {
        self.registry().save();
    }

    /// Ends every group still recorded (SIGTERM, then SIGKILL after `grace`), for a daemon
    /// that must exit without its supervisor. Blocking.
    pub(crate) fn end_all(&self, grace: Duration) -> Vec<String> {
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
        let passed_fds = self
            .sockets
            .for_service(name, config)
            .map_err(|e| SpawnError::Failed(format!("cannot start service: {e}")))?;
        let invocation = format!(
            "{}{:08x}",
            self.invocation_prefix,
            self.invocations.fetch_add(1, Ordering::Relaxed)
        );
        let cgroup = self.cgroup_for(name, config, &invocation)?;
        let mut context = config.context();
        context
            .environment
            .insert(INVOCATION_VARIABLE.to_owned(), invocation.clone());
        let mut pid_variables = Vec::new();
        if let Some(interval) = config.watchdog {
            // As systemd tells a service its watchdog: the interval, and whose it is.
            context.environment.insert(
                "WATCHDOG_USEC".to_owned(),
                interval.as_std().as_micros().to_string(),
            );
            pid_variables.push("WATCHDOG_PID");
        }
        let launch = Launch {
            user_environment: true,
            cgroup: cgroup.clone(),
            passed_fds,
            pid_variables,
            ..Launch::new(argv, context)
        };
        tracing::info!("Service \"{name}\" starting: {}", config.command);
        let spawned =
            self.spawn_recorded(name, Some(&invocation), &launch, Wiring::Merged, |pid| {
                reaper::keep_cpu_time(pid);
                self.keep_instance(pid, &invocation, &cgroup, config);
            });
        let child = spawned.map_err(|abandoned| {
            if let Some(pid) = abandoned.recorded {
                reaper::forget_cpu_time(pid);
                let instance = self.instances().remove(&pid);
                self.retire(instance);
            } else if let Some(cgroup) = cgroup.clone() {
                self.cgroups().retire(cgroup);
            }
            SpawnError::Failed(match abandoned.error {
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
        let sig = signal.signal();
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
        let now = self.members_of(pid, instance.clone());
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
        if let Some(cgroup) = instance.as_ref().and_then(|i| i.cgroup.as_ref()) {
            cgroup.kill_all();
        }
        self.retire(instance);
    }

    fn signal_remains(&self, pid: u32, signal: GroupSignal) -> Vec<Escaped> {
        let sig = signal.signal();
        let instance = self.instances().remove(&pid);
        let remains = self.members_of(pid, instance.clone());
        if remains.is_empty() {
            self.retire(instance);
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
        // The run's CPU time: its cgroup's count covers every process that was ever in it;
        // without one, the main process's with the children it waited for.
        let cgroup_time = self
            .instances()
            .get(&pid)
            .and_then(|i| i.cgroup.as_ref()?.cpu_time());
        let reaped_time = reaper::take_cpu_time(pid);
        reaper::forget_cpu_time(pid);
        if let Some(time) = cgroup_time.or(reaped_time) {
            *self
                .cpu_done
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .entry(name.to_owned())
                .or_default() += time;
        }
    }

    fn missing(&self, paths: Vec<String>) -> Vec<String> {
        paths
            .into_iter()
            .filter(|p| !std::path::Path::new(p).exists())
            .collect()
    }

    fn usage(&self, targets: &[(String, Option<u32>)]) -> Vec<Usage> {
        // One look at the daemon's children serves every service.
        let orphans = members::orphans();
        targets
            .iter()
            .map(|(name, pid)| self.usage_of(name, *pid, &orphans))
            .collect()
    }

    fn killed_by(&self, pid: u32) -> Option<String> {
        let instance = self.instances().get(&pid).cloned()?;
        let cgroup = instance.cgroup.as_ref()?;
        if cgroup.oom_kills() == 0 {
            return None;
        }
        Some(match instance.memory_max {
            Some(max) => format!("killed by the OOM killer at memory-max {max}"),
            None => "killed by the OOM killer".to_owned(),
        })
    }

    fn held_sockets(&self, name: &str) -> Vec<super::sockets::SocketReport> {
        self.sockets.report(name)
    }

    fn unenforced(&self, config: &Service) -> Option<String> {
        if config.resources.is_empty() {
            return None;
        }
        self.cgroups().unenforced(&config.resources)
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
