//! Service supervision.
//!
//! The [`ServiceManager`] is an actor: one task owns every service's [`machine::Machine`], its
//! process and its output log, and is driven through a cloneable handle with typed messages.
//! Requests (start, stop, signal, status), process exits and deadlines all become events of
//! the pure machine; the actor performs the actions it returns (spawn, signal the group,
//! resolve the waiting request) and sleeps until the earliest deadline of any service.
//!
//! Paths feed the machines too: the [`PathWatcher`] watches every path some service cares
//! about (`requires-paths` of waiting services, `on-file-change` keys, and paths that failure
//! output named as missing), and its reports become `PathsReady`, `FileChanged` and
//! `RetryNow` events. Each spawned process group is recorded in the [`registry`], so a daemon
//! restarted after a crash can end its predecessor's processes before starting anything.
//!
//! Changes and tasks are not the engine: [`changes`] turns an API request into a change whose
//! runners ask the actor to start or stop one service at a time and record what happened.

pub mod changes;
pub mod hints;
pub mod logbuf;
pub mod machine;
pub(crate) mod process;
pub mod registry;
pub mod status;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cobble_plan::{Plan, Service, ServiceAction};
use jiff::Timestamp;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use crate::watch::{PathEvent, PathWatcher};
use logbuf::ServiceLog;
use machine::{
    Action, Event, ExitAction, FileAction, GroupSignal, Machine, Phase, Policy, StartOutcome,
    StopOutcome,
};
use registry::ProcessRegistry;
pub use status::{ServiceDetails, ServiceStatus};

/// How long an exit waits for the output reader to reach end of file.
const OUTPUT_DRAIN: std::time::Duration = std::time::Duration::from_millis(250);

/// Lines of output copied into the task log when a start fails.
pub const LAST_LOG_LINES: usize = 20;

/// The reply to a start request: the outcome and, for failures that ask for it, the service's
/// most recent output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartReply {
    pub outcome: StartOutcome,
    pub output: Vec<String>,
}

enum Request {
    Start {
        name: String,
        reply: oneshot::Sender<StartReply>,
    },
    Stop {
        name: String,
        reply: oneshot::Sender<StopOutcome>,
    },
    AbortStart {
        name: String,
    },
    Statuses {
        names: Vec<String>,
        details: bool,
        reply: oneshot::Sender<Vec<ServiceStatus>>,
    },
    Signal {
        names: Vec<String>,
        signal: String,
        reply: oneshot::Sender<Result<(), String>>,
    },
    Outdated {
        reply: oneshot::Sender<Vec<String>>,
    },
    Active {
        reply: oneshot::Sender<Vec<String>>,
    },
    CheckFailed {
        check: String,
    },
}

/// Handle to the service manager actor. Cheap to clone.
#[derive(Clone)]
pub struct ServiceManager {
    tx: mpsc::UnboundedSender<Request>,
}

/// The manager's error when its task has gone (the daemon is shutting down).
const GONE: &str = "service manager is not running";

impl ServiceManager {
    /// Starts the actor. `shutdown` receives the exit code when a service's action asks the
    /// daemon to stop.
    ///
    /// `state_dir` holds the record of live process groups (none with `PEBBLE_PERSIST=never`).
    pub fn spawn(
        plan: watch::Receiver<Arc<Plan>>,
        verbose: bool,
        shutdown: mpsc::UnboundedSender<i32>,
        state_dir: Option<&Path>,
    ) -> ServiceManager {
        let (tx, rx) = mpsc::unbounded_channel();
        let (exits_tx, exits_rx) = mpsc::unbounded_channel();
        let (paths_tx, paths_rx) = mpsc::unbounded_channel();
        let actor = Actor {
            plan,
            verbose,
            shutdown,
            services: BTreeMap::new(),
            exits_tx,
            next_seed: seed(),
            watcher: PathWatcher::spawn(paths_tx),
            watched: BTreeSet::new(),
            registry: ProcessRegistry::new(state_dir),
        };
        tokio::spawn(actor.run(rx, exits_rx, paths_rx));
        ServiceManager { tx }
    }

    /// Starts a service and resolves once its start succeeded (the okay delay passed) or failed.
    pub async fn start(&self, name: &str) -> StartReply {
        let (reply, rx) = oneshot::channel();
        let _ = self.tx.send(Request::Start {
            name: name.into(),
            reply,
        });
        rx.await.unwrap_or(StartReply {
            outcome: StartOutcome::Failed {
                error: GONE.into(),
                with_output: false,
            },
            output: Vec::new(),
        })
    }

    /// Stops a service and resolves once it stopped (or the stop failed).
    pub async fn stop(&self, name: &str) -> StopOutcome {
        let (reply, rx) = oneshot::channel();
        let _ = self.tx.send(Request::Stop {
            name: name.into(),
            reply,
        });
        rx.await.unwrap_or(StopOutcome::Failed(GONE.into()))
    }

    /// Kills a service whose start is being aborted.
    pub fn abort_start(&self, name: &str) {
        let _ = self.tx.send(Request::AbortStart { name: name.into() });
    }

    /// Statuses of the services this daemon has started among `names` (all of them when
    /// `names` is empty), sorted by name; with the details behind `cobble why` if `details`.
    /// A service of the plan that is not listed was never started: it is `inactive`.
    pub async fn statuses(&self, names: Vec<String>, details: bool) -> Vec<ServiceStatus> {
        let (reply, rx) = oneshot::channel();
        let _ = self.tx.send(Request::Statuses {
            names,
            details,
            reply,
        });
        rx.await.unwrap_or_default()
    }

    /// Sends `signal` (a name such as `SIGHUP`) to each service's main process.
    pub async fn signal(&self, names: Vec<String>, signal: String) -> Result<(), String> {
        let (reply, rx) = oneshot::channel();
        let _ = self.tx.send(Request::Signal {
            names,
            signal,
            reply,
        });
        rx.await.unwrap_or_else(|_| Err(GONE.into()))
    }

    /// Services started by this daemon whose configuration in the plan has changed since.
    pub async fn outdated(&self) -> Vec<String> {
        let (reply, rx) = oneshot::channel();
        let _ = self.tx.send(Request::Outdated { reply });
        rx.await.unwrap_or_default()
    }

    /// A health check hit its failure threshold: every started service whose
    /// `on-check-failure` names it performs its action (see [`machine::Event::CheckFailed`]).
    /// Fire and forget; the check manager never waits on the supervisor.
    pub fn check_failed(&self, check: &str) {
        let _ = self.tx.send(Request::CheckFailed {
            check: check.into(),
        });
    }

    /// Services that are starting, running or backing off.
    pub async fn active(&self) -> Vec<String> {
        let (reply, rx) = oneshot::channel();
        let _ = self.tx.send(Request::Active { reply });
        rx.await.unwrap_or_default()
    }
}

/// One supervised service.
struct Slot {
    /// Its lifecycle.
    machine: Machine,
    /// The configuration stored at the last explicit start; restarts use it.
    config: Arc<Service>,
    /// Its recent output.
    log: ServiceLog,
    /// Requests waiting for the current start to resolve.
    start_waiters: Vec<oneshot::Sender<StartReply>>,
    /// Requests waiting for the current stop to resolve.
    stop_waiters: Vec<oneshot::Sender<StopOutcome>>,
    /// When the reported status last changed.
    since: Option<Timestamp>,
    /// `since`, as last rendered for a client.
    rendered_since: status::RenderedSince,
    /// Processes spawned.
    start_count: u64,
    /// Missing paths named by the last failure output.
    hints: Vec<String>,
    /// Descendants of the process being stopped that had left its process group, with their
    /// start times (so a recycled pid is never killed).
    escaped: Vec<(u32, u64)>,
}

struct ExitNotice {
    name: String,
    pid: u32,
    code: i32,
}

struct Actor {
    plan: watch::Receiver<Arc<Plan>>,
    verbose: bool,
    shutdown: mpsc::UnboundedSender<i32>,
    services: BTreeMap<String, Slot>,
    exits_tx: mpsc::UnboundedSender<ExitNotice>,
    next_seed: u64,
    /// Watches the paths services wait for, react to, or were missing.
    watcher: PathWatcher,
    /// The set last given to the watcher.
    watched: BTreeSet<PathBuf>,
    /// Live process groups, on disk.
    registry: ProcessRegistry,
}

impl Actor {
    async fn run(
        mut self,
        mut requests: mpsc::UnboundedReceiver<Request>,
        mut exits: mpsc::UnboundedReceiver<ExitNotice>,
        mut paths: mpsc::UnboundedReceiver<PathEvent>,
    ) {
        loop {
            let deadline = self
                .services
                .values()
                .filter_map(|s| s.machine.deadline())
                .min();
            let sleep = async {
                match deadline {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                request = requests.recv() => match request {
                    Some(request) => self.handle(request),
                    None => break,
                },
                Some(exit) = exits.recv() => {
                    self.registry.forget(&exit.name, exit.pid);
                    self.feed(&exit.name, Event::Exited { pid: exit.pid, code: exit.code });
                }
                Some(event) = paths.recv() => self.path_changed(event),
                () = sleep => {
                    let now = Instant::now();
                    let due: Vec<String> = self
                        .services
                        .iter()
                        .filter(|(_, s)| s.machine.deadline().is_some_and(|d| d <= now))
                        .map(|(n, _)| n.clone())
                        .collect();
                    for name in due {
                        self.feed(&name, Event::Tick);
                    }
                }
            }
            self.update_watches();
        }
    }

    /// Gives the watcher the paths services care about now, if they changed.
    fn update_watches(&mut self) {
        let mut wanted = BTreeSet::new();
        for slot in self.services.values() {
            let machine = &slot.machine;
            wanted.extend(machine.waiting_for().iter().map(PathBuf::from));
            if matches!(machine.phase(), Phase::Backoff { .. }) {
                wanted.extend(slot.hints.iter().map(PathBuf::from));
            }
            if machine.wanted() == machine::Wanted::Running {
                wanted.extend(slot.config.on_file_change.keys().map(PathBuf::from));
            }
        }
        if wanted != self.watched {
            self.watcher.set(wanted.clone());
            self.watched = wanted;
        }
    }

    /// A watched path changed: wake the services that wait for it, react to it, or were
    /// missing it.
    fn path_changed(&mut self, event: PathEvent) {
        let path = event.path.to_string_lossy().into_owned();
        let mut events: Vec<(String, Event)> = Vec::new();
        for (name, slot) in &self.services {
            let machine = &slot.machine;
            if machine.waiting_for().contains(&path)
                && slot
                    .config
                    .requires_paths
                    .iter()
                    .all(|p| Path::new(p).exists())
            {
                events.push((name.clone(), Event::PathsReady));
            }
            if event.exists
                && slot.hints.contains(&path)
                && matches!(machine.phase(), Phase::Backoff { .. })
            {
                events.push((name.clone(), Event::RetryNow));
            }
            match slot.config.on_file_change.get(&path) {
                Some(cobble_plan::FileChangeAction::Restart) => {
                    events.push((name.clone(), Event::FileChanged(FileAction::Restart)));
                }
                Some(cobble_plan::FileChangeAction::Signal(signal)) => events.push((
                    name.clone(),
                    Event::FileChanged(FileAction::Signal(signal.clone())),
                )),
                Some(cobble_plan::FileChangeAction::Ignore) | None => {}
            }
        }
        for (name, event) in events {
            self.feed(&name, event);
        }
    }

    fn handle(&mut self, request: Request) {
        match request {
            Request::Start { name, reply } => self.start(name, reply),
            Request::Stop { name, reply } => match self.services.get_mut(&name) {
                None => {
                    let _ = reply.send(StopOutcome::NeverStarted);
                }
                Some(slot) => {
                    slot.stop_waiters.push(reply);
                    self.feed(&name, Event::Stop);
                }
            },
            Request::AbortStart { name } => self.feed(&name, Event::AbortStart),
            Request::Statuses {
                names,
                details,
                reply,
            } => {
                let _ = reply.send(status::statuses(&mut self.services, &names, details));
            }
            Request::Signal {
                names,
                signal,
                reply,
            } => {
                let _ = reply.send(self.signal(&names, &signal));
            }
            Request::Outdated { reply } => {
                let plan = self.plan.borrow().clone();
                let outdated = self
                    .services
                    .iter()
                    .filter(|(name, slot)| {
                        plan.services
                            .get(*name)
                            .is_some_and(|config| *config != *slot.config)
                    })
                    .map(|(name, _)| name.clone())
                    .collect();
                let _ = reply.send(outdated);
            }
            Request::Active { reply } => {
                let active = self
                    .services
                    .iter()
                    .filter(|(_, s)| {
                        matches!(
                            s.machine.status(),
                            machine::Status::Active
                                | machine::Status::Backoff
                                | machine::Status::Waiting
                        )
                    })
                    .map(|(name, _)| name.clone())
                    .collect();
                let _ = reply.send(active);
            }
            Request::CheckFailed { check } => {
                // The configuration of the last start decides, as in Pebble.
                let affected: Vec<(String, ServiceAction)> = self
                    .services
                    .iter()
                    .filter_map(|(name, slot)| {
                        let action = *slot.config.on_check_failure.get(&check)?;
                        Some((name.clone(), action))
                    })
                    .collect();
                for (name, action) in affected {
                    self.feed(
                        &name,
                        Event::CheckFailed {
                            check: check.clone(),
                            action: exit_action(action),
                        },
                    );
                }
            }
        }
    }

    fn start(&mut self, name: String, reply: oneshot::Sender<StartReply>) {
        let Some(config) = self.plan.borrow().services.get(&name).cloned() else {
            let _ = reply.send(StartReply {
                outcome: StartOutcome::Failed {
                    error: format!("cannot find service \"{name}\" in plan"),
                    with_output: false,
                },
                output: Vec::new(),
            });
            return;
        };
        let config = Arc::new(config);
        let seed = {
            self.next_seed = self.next_seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
            self.next_seed
        };
        let slot = self.services.entry(name.clone()).or_insert_with(|| Slot {
            machine: Machine::new(name.clone(), seed),
            config: config.clone(),
            log: ServiceLog::new(),
            start_waiters: Vec::new(),
            stop_waiters: Vec::new(),
            since: None,
            rendered_since: status::RenderedSince::default(),
            start_count: 0,
            hints: Vec::new(),
            escaped: Vec::new(),
        });
        slot.config = config.clone();
        slot.start_waiters.push(reply);
        self.feed(&name, Event::Start(policy(&config)));
    }

    /// Feeds one event to a service's machine and performs the resulting actions.
    fn feed(&mut self, name: &str, event: Event) {
        let Some(slot) = self.services.get_mut(name) else {
            return;
        };
        let exited = matches!(event, Event::Exited { .. });
        let before = slot.machine.status();
        let was_stopping = matches!(
            slot.machine.phase(),
            Phase::Terminating { .. } | Phase::Killing { .. }
        );
        let stopping_pid = slot.machine.pid();
        let mut pending =
            std::collections::VecDeque::from(slot.machine.step(Instant::now(), event));
        while let Some(action) = pending.pop_front() {
            let slot = self.services.get_mut(name).expect("slot exists");
            match action {
                Action::Spawn => {
                    let missing: Vec<String> = slot
                        .config
                        .requires_paths
                        .iter()
                        .filter(|p| !Path::new(p).exists())
                        .cloned()
                        .collect();
                    if !missing.is_empty() {
                        pending.extend(
                            slot.machine
                                .step(Instant::now(), Event::PathsMissing { missing }),
                        );
                        continue;
                    }
                    let result = process::spawn(name, &slot.config, &slot.log, self.verbose);
                    let event = match result {
                        Ok(process) => {
                            slot.start_count += 1;
                            self.registry.record(name, process.pid);
                            let exits = self.exits_tx.clone();
                            let notice_name = name.to_owned();
                            let pid = process.pid;
                            tokio::spawn(async move {
                                // A lost status (never expected) still counts as an exit.
                                let code = process.exit.await.map(|s| s.code()).unwrap_or(-1);
                                // Let the reader drain what the process wrote before it
                                // exited; a child that keeps the pipe open only costs a
                                // short wait.
                                let _ =
                                    tokio::time::timeout(OUTPUT_DRAIN, process.output_done).await;
                                let _ = exits.send(ExitNotice {
                                    name: notice_name,
                                    pid,
                                    code,
                                });
                            });
                            Event::Spawned { pid }
                        }
                        Err(error) => {
                            tracing::info!("Service \"{name}\" {error}");
                            Event::SpawnFailed { error }
                        }
                    };
                    pending.extend(slot.machine.step(Instant::now(), event));
                }
                Action::Signal { pid, signal } => {
                    let sig = match signal {
                        GroupSignal::Term => cobble_sys::process::Signal::SIGTERM,
                        GroupSignal::Kill => cobble_sys::process::Signal::SIGKILL,
                    };
                    // Descendants that left the group (setsid, setpgid) would survive the
                    // group signal: find them first (once the leader dies they are re-parented
                    // out of its tree), signal them too, and remember them in case the leader
                    // exits before they do.
                    let escaped = escaped_descendants(pid);
                    if let Err(e) = cobble_sys::process::signal_group(pid, sig) {
                        tracing::info!("Cannot send {sig} to service \"{name}\": {e}");
                    }
                    for (child, start_time) in escaped {
                        let _ = cobble_sys::process::signal_pid(child, sig);
                        if !slot.escaped.contains(&(child, start_time)) {
                            slot.escaped.push((child, start_time));
                        }
                    }
                }
                Action::SignalProcess { pid, signal } => {
                    let sent = cobble_sys::process::parse_signal(&signal)
                        .map_err(|e| e.to_string())
                        .and_then(|sig| {
                            cobble_sys::process::signal_pid(pid, sig).map_err(|e| e.to_string())
                        });
                    match sent {
                        Ok(()) => tracing::info!("Sent {signal} to service \"{name}\""),
                        Err(e) => tracing::info!("Cannot send {signal} to service \"{name}\": {e}"),
                    }
                }
                Action::StartDone(outcome) => {
                    let output = match &outcome {
                        StartOutcome::Failed {
                            with_output: true, ..
                        } => slot.log.last_lines(LAST_LOG_LINES),
                        _ => Vec::new(),
                    };
                    for waiter in slot.start_waiters.drain(..) {
                        let _ = waiter.send(StartReply {
                            outcome: outcome.clone(),
                            output: output.clone(),
                        });
                    }
                }
                Action::StopDone(outcome) => {
                    for waiter in slot.stop_waiters.drain(..) {
                        let _ = waiter.send(outcome.clone());
                    }
                }
                Action::Shutdown(code) => {
                    let _ = self.shutdown.send(code);
                }
                Action::Log(message) => tracing::info!("{message}"),
            }
        }
        let slot = self.services.get_mut(name).expect("slot exists");
        let still_stopping = matches!(
            slot.machine.phase(),
            Phase::Terminating { .. } | Phase::Killing { .. }
        );
        if was_stopping && !still_stopping {
            // The leader is gone (or given up on): nothing of the old instance may outlive
            // it and hold its port, so stragglers in the group and escaped descendants go.
            if let Some(pid) = stopping_pid {
                let _ =
                    cobble_sys::process::signal_group(pid, cobble_sys::process::Signal::SIGKILL);
            }
            for (child, start_time) in slot.escaped.drain(..) {
                if cobble_sys::process::process_start_time(child) == Some(start_time) {
                    let _ = cobble_sys::process::signal_pid(
                        child,
                        cobble_sys::process::Signal::SIGKILL,
                    );
                }
            }
        }
        if slot.machine.status() != before || slot.since.is_none() {
            slot.since = Some(Timestamp::now());
        }
        match (exited, slot.machine.phase()) {
            // Backing off after a failure: remember what the output said was missing.
            (true, Phase::Backoff { .. }) => {
                slot.hints = hints::missing_paths(&slot.log.last_lines(LAST_LOG_LINES))
                    .into_iter()
                    .filter(|p| !Path::new(p).exists())
                    .collect();
                if !slot.hints.is_empty() {
                    tracing::info!(
                        "Service \"{name}\" will retry as soon as {} exists",
                        slot.hints.join(", ")
                    );
                }
            }
            (_, Phase::Running { .. } | Phase::Stopped) => slot.hints.clear(),
            _ => {}
        }
    }

    /// Signals each named service's main process, reporting every failure, as Pebble does.
    fn signal(&self, names: &[String], signal: &str) -> Result<(), String> {
        let mut errors = Vec::new();
        for name in names {
            let pid = self
                .services
                .get(name)
                .filter(|s| s.machine.is_running())
                .and_then(|s| s.machine.pid());
            let result = match pid {
                None => Err("service is not running".to_owned()),
                Some(pid) => cobble_sys::process::parse_signal(signal)
                    .map_err(|e| e.to_string())
                    .and_then(|sig| {
                        tracing::info!("Sending {signal} to service \"{name}\"");
                        cobble_sys::process::signal_pid(pid, sig).map_err(|e| e.to_string())
                    }),
            };
            if let Err(e) = result {
                errors.push(format!("cannot send signal to \"{name}\": {e}"));
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors.join("; "))
        }
    }
}

/// Descendants of `leader` outside its process group, with their start times.
fn escaped_descendants(leader: u32) -> Vec<(u32, u64)> {
    cobble_sys::process::descendants(leader)
        .into_iter()
        .filter_map(|pid| {
            let stat = cobble_sys::process::proc_stat(pid)?;
            (stat.pgrp != leader).then_some((pid, stat.start_time))
        })
        .collect()
}

/// The lifecycle policy of a service's configuration.
pub fn policy(config: &Service) -> Policy {
    Policy {
        on_success: exit_action(config.on_success),
        on_failure: exit_action(config.on_failure),
        backoff_delay: config.backoff_delay(),
        backoff_factor: config.backoff_factor(),
        backoff_limit: config.backoff_limit(),
        kill_delay: config.kill_delay(),
    }
}

fn exit_action(action: ServiceAction) -> ExitAction {
    match action {
        ServiceAction::Unset | ServiceAction::Restart => ExitAction::Restart,
        ServiceAction::Shutdown => ExitAction::Shutdown,
        ServiceAction::SuccessShutdown => ExitAction::SuccessShutdown,
        ServiceAction::FailureShutdown => ExitAction::FailureShutdown,
        ServiceAction::Ignore => ExitAction::Ignore,
    }
}

fn seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    nanos ^ (u64::from(std::process::id()) << 32)
}

#[cfg(test)]
mod tests {
    /// cobble-plan validates `on-file-change` signal names without depending on cobble-sys,
    /// which sends them; the two lists must not drift apart.
    #[test]
    fn plan_signal_names_are_exactly_the_ones_that_can_be_sent() {
        for name in cobble_plan::SIGNAL_NAMES {
            assert!(
                cobble_sys::process::parse_signal(name).is_ok(),
                "{name} is valid in a layer but cannot be sent"
            );
        }
        for sig in cobble_sys::process::Signal::iterator() {
            assert!(
                cobble_plan::SIGNAL_NAMES.contains(&sig.as_str()),
                "{} can be sent but is rejected in a layer",
                sig.as_str()
            );
        }
    }
}
