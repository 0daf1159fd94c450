//! The supervisor's actor: one task owns every service's machine, its process and its
//! output log. It feeds each machine the events that concern it (requests, process exits,
//! deadlines, path changes, the checks) and performs the actions the machine
//! returns, handing everything that may block to the blocking pool ([`ProcessJobs`]), whose
//! results come back as [`Done`] messages.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;

use cobble_plan::{Plan, Service};
use jiff::Timestamp;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::machine::{
    self, Action, Event, Machine, OneshotState, Oneshots, StartOutcome, StopOutcome, WatchdogSaid,
};
use super::messages::{Request, StartReply};
use super::policy::policy;
use super::status::{self, ServiceStatus};
use super::{LAST_LOG_LINES, hints};
use crate::checks::CheckSignals;
use crate::logs::ServiceLog;
use crate::logs::capture::{self, Destinations};
use crate::logs::persist;
use crate::process::notify::{self, NotifyField, NotifySocket};

mod notify_reader;
use crate::process::{Escaped, Processes, SpawnError, Spawned};
use crate::watch::{Baseline, PathEvent, PathWatcher};

/// How long an exit waits for the output reader to reach end of file.
const OUTPUT_DRAIN: std::time::Duration = std::time::Duration::from_millis(250);

/// Results of the work the actor hands to other tasks.
enum Done {
    /// A spawn finished.
    Spawn {
        name: String,
        result: Result<Spawned, SpawnError>,
        /// What of the service's `resources:` is not enforced, and why.
        unenforced: Option<String>,
    },
    /// A process exited (its output drained); `missing` are the paths its last output named
    /// that do not exist.
    Exit {
        name: String,
        pid: u32,
        code: i32,
        missing: Vec<String>,
        /// What killed it, when the kernel did.
        killed_by: Option<String>,
    },
    /// A group was signalled; these descendants had left it.
    Signalled {
        name: String,
        pid: u32,
        escaped: Vec<Escaped>,
    },
    /// A notify message came from `sender`, which is (`belongs`) or is not one of the
    /// processes of the instance led by `leader`.
    Notify {
        name: String,
        leader: u32,
        sender: u32,
        belongs: bool,
        fields: Vec<NotifyField>,
        /// Counts it among its reader's messages in flight until it is handled.
        permit: notify_reader::InFlight,
    },
    /// The reader of a handed-over notify socket has handed on everything queued in it.
    CaughtUp { name: String },
}

/// Starts the actor's task; returns where its requests go and the task.
pub(super) fn spawn(
    plan: watch::Receiver<Arc<Plan>>,
    checks: watch::Receiver<Arc<CheckSignals>>,
    processes: Arc<dyn Processes>,
    output: Destinations,
    shutdown: mpsc::UnboundedSender<i32>,
) -> (mpsc::UnboundedSender<Request>, JoinHandle<()>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let (done_tx, done_rx) = mpsc::unbounded_channel();
    let (paths_tx, paths_rx) = mpsc::unbounded_channel();
    let actor = Actor {
        plan,
        output,
        shutdown,
        services: BTreeMap::new(),
        done_tx,
        next_seed: cobble_client::random::random_u64(),
        watcher: PathWatcher::spawn(paths_tx),
        watched: BTreeSet::new(),
        seen: Baseline::new(),
        baseline: Baseline::new(),
        watches_stale: false,
        jobs: ProcessJobs::new(processes),
        checks: checks.borrow().clone(),
        held_signals: Vec::new(),
        oneshots: Arc::default(),
        expected: BTreeMap::new(),
        held_requests: Vec::new(),
        held_takeover: None,
    };
    // The checks as they are at the start are the actor's: their runners may wait for it.
    actor.checks.acted();
    (tx, tokio::spawn(actor.run(rx, done_rx, paths_rx, checks)))
}

/// One supervised service.
struct Slot {
    /// Its lifecycle.
    machine: Machine,
    /// The configuration stored at the last explicit start; restarts use it.
    config: Arc<Service>,
    /// Its recent output.
    log: ServiceLog,
    /// The file its output also goes to, under `persist-logs: true`.
    file: persist::Switch,
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
    /// Descendants of the process being stopped that had left its process group.
    escaped: Vec<Escaped>,
    /// What a service with `readiness: notify` has said, and where it says it.
    notify: Notify,
    /// What of its `resources:` was not enforced at its last spawn, and why.
    unenforced: Option<String>,
    /// The reader of the live process's output: what stops it, and its task, which hands
    /// the pipe back when stopped (for a re-execution).
    output: Option<Output>,
    /// Handed to a new program (a re-execution under way): this program no longer acts on
    /// its process.
    carried: bool,
    /// When a one-shot last completed, until it is stopped.
    completed_at: Option<Timestamp>,
}

/// The reader of a process's output.
type Output = (
    tokio_util::sync::CancellationToken,
    JoinHandle<Option<capture::Detached>>,
);

/// A `readiness: notify` service's socket and what it said on it.
struct Notify {
    /// The socket's address, once it has one (bound at its first spawn).
    address: Option<String>,
    /// The socket, once bound, and its reader while it runs (stopped while a re-execution
    /// takes the socket over).
    socket: Option<Arc<NotifySocket>>,
    reader: Option<notify_reader::Running>,
    /// Handed over by a re-execution, its reader has not yet handed on what was sent during
    /// the swap: the service's deadlines (its watchdog's) wait for that, so that a ping sent
    /// in time is not taken for a missed one.
    catching_up: bool,
    /// The main process of the running instance, for the socket's reader (0: none,
    /// [`notify_reader::SPAWNING`] while one is being spawned).
    leader: watch::Sender<u32>,
    /// The last `STATUS=` text of the running instance.
    status: Option<String>,
    /// It said `RELOADING=1` and not `READY=1` since.
    reloading: bool,
    /// It said `STOPPING=1`.
    stopping: bool,
    /// A message from a process not its own was logged for this instance.
    refusal_logged: bool,
}

impl Default for Notify {
    fn default() -> Self {
        Notify {
            address: None,
            socket: None,
            reader: None,
            catching_up: false,
            leader: watch::Sender::new(0),
            status: None,
            reloading: false,
            stopping: false,
            refusal_logged: false,
        }
    }
}

impl Notify {
    /// A new instance led by `pid` runs: what the last one said no longer holds.
    fn new_instance(&mut self, pid: u32) {
        self.leader.send_replace(pid);
        self.status = None;
        self.reloading = false;
        self.stopping = false;
        self.refusal_logged = false;
    }
}

impl Slot {
    /// What the supervisor reports of this service: its machine, and what is kept beside it.
    fn status(&mut self, name: &str, with_details: bool) -> ServiceStatus {
        let tracked = status::Tracked {
            since: self.since,
            rendered_since: &mut self.rendered_since,
            start_count: self.start_count,
            unenforced: self.unenforced.as_deref(),
            log: &self.log,
            said_status: self.notify.status.as_deref(),
            reloading: self.notify.reloading,
            stopping: self.notify.stopping,
            completed_at: self.completed_at,
        };
        status::status(name, &self.machine, tracked, with_details)
    }
}

struct Actor {
    plan: watch::Receiver<Arc<Plan>>,
    /// Where service output goes besides each service's ring.
    output: Destinations,
    shutdown: mpsc::UnboundedSender<i32>,
    services: BTreeMap<String, Slot>,
    /// Where the tasks the actor starts report back.
    done_tx: mpsc::UnboundedSender<Done>,
    next_seed: u64,
    /// Watches the paths services wait for, react to, or were missing.
    watcher: PathWatcher,
    /// The set last given to the watcher.
    watched: BTreeSet<PathBuf>,
    /// Each watched path's fingerprint as the services last acted on it (from its last
    /// event): handed over by a re-execution, and the baseline of one that did not happen.
    seen: Baseline,
    /// What the next watched set compares the paths it newly watches with: the fingerprints
    /// acted on before a re-execution (by the predecessor, or by this program before one
    /// that did not happen), so that what changed meanwhile is acted on as a change.
    baseline: Baseline,
    /// A machine stepped since the watched set was last computed.
    watches_stale: bool,
    /// Spawning and signalling, run on the blocking pool.
    jobs: ProcessJobs,
    /// The checks as last published.
    checks: Arc<CheckSignals>,
    /// Signals to a service whose process is being spawned, sent once it has a pid (or has
    /// failed to get one). Pebble spawns while it holds its lock, so no client of it can
    /// see a service that is active but has no process to signal.
    held_signals: Vec<HeldSignal>,
    /// Where each one-shot stands, as last handed to the services ordered after them.
    oneshots: Arc<Oneshots>,
    /// One-shots a change is about to start, with how many changes are: until the change
    /// has asked for them, what is ordered after them counts them as under way.
    expected: BTreeMap<String, usize>,
    /// Starts and stops asked of services handed to a new program (a change's next task,
    /// asked while the re-execution got ready): taken up again if it does not happen.
    held_requests: Vec<Request>,
    /// A take-over asked while a service was being spawned: answered once none is (a
    /// spawn takes moments, and what comes of it, a process starting, is handed over).
    held_takeover: Option<(TakeOverReply, bool)>,
}

/// The answer to [`Request::TakeOver`].
type TakeOverReply = oneshot::Sender<Result<super::TakenOver, Vec<String>>>;

/// A `/v1/signals` request that waits for a spawn to finish.
struct HeldSignal {
    names: Vec<String>,
    signal: String,
    reply: oneshot::Sender<Result<(), String>>,
}

/// How many of the supervisor's process jobs run at once.
const PROCESS_JOBS: usize = 2;

/// The supervisor's blocking work (spawning, signalling, the registry), run on the blocking
/// pool at most [`PROCESS_JOBS`] at a time, in the order it was asked for. A replan of a
/// hundred services queues a hundred short jobs instead of starting a hundred threads, each of
/// which would leave the daemon a stack and a malloc arena to carry.
#[derive(Clone)]
struct ProcessJobs {
    processes: Arc<dyn Processes>,
    permits: Arc<tokio::sync::Semaphore>,
}

impl ProcessJobs {
    fn new(processes: Arc<dyn Processes>) -> ProcessJobs {
        ProcessJobs {
            processes,
            permits: Arc::new(tokio::sync::Semaphore::new(PROCESS_JOBS)),
        }
    }

    /// Runs `job` off the actor; the handle resolves with its result (`None` if it panicked).
    fn run<R: Send + 'static>(
        &self,
        job: impl FnOnce(&dyn Processes) -> R + Send + 'static,
    ) -> JoinHandle<Option<R>> {
        let processes = self.processes.clone();
        let permits = self.permits.clone();
        tokio::spawn(async move {
            let _permit = permits.acquire_owned().await.ok()?;
            tokio::task::spawn_blocking(move || job(&*processes))
                .await
                .ok()
        })
    }
}

impl Actor {
    async fn run(
        mut self,
        mut requests: mpsc::UnboundedReceiver<Request>,
        mut done: mpsc::UnboundedReceiver<Done>,
        mut paths: mpsc::UnboundedReceiver<PathEvent>,
        mut checks: watch::Receiver<Arc<CheckSignals>>,
    ) {
        loop {
            // A service handed to a new program is that program's to act on.
            let deadline = self
                .services
                .values()
                // A service handed to a new program is that program's to time.
                .filter(|s| !s.notify.catching_up && !s.carried)
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
                    #[cfg(test)]
                    Some(Request::Wedge) => std::future::pending::<()>().await,
                    Some(request) => self.handle(request),
                    None => break,
                },
                Some(result) = done.recv() => {
                    self.finished(result);
                    self.release_signals();
                    if self.held_takeover.is_some() && !self.any_spawning() {
                        let (reply, endings) = self.held_takeover.take().expect("held");
                        self.answer_take_over(reply, endings);
                    }
                }
                Some(event) = paths.recv() => self.path_changed(event),
                Ok(()) = checks.changed() => {
                    self.checks = checks.borrow_and_update().clone();
                    self.checks_changed();
                    self.checks.acted();
                }
                () = sleep => {
                    let now = Instant::now();
                    let due: Vec<String> = self
                        .services
                        .iter()
                        .filter(|(_, s)| !s.notify.catching_up && !s.carried)
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

    /// Gives the watcher the paths the machines care about now, if they changed. Only a
    /// machine's step can change them, so reads (statuses, say) cost nothing here.
    fn update_watches(&mut self) {
        if !std::mem::take(&mut self.watches_stale) {
            return;
        }
        let wanted: BTreeSet<PathBuf> = self
            .services
            .values()
            .flat_map(|slot| slot.machine.watched_paths())
            .map(PathBuf::from)
            .collect();
        // The baseline is for this set alone: a path watched again later is new.
        let baseline = std::mem::take(&mut self.baseline);
        if wanted != self.watched {
            // Nobody waits for the watches to be armed; the watcher looks once they are.
            drop(self.watcher.set_from(wanted.clone(), baseline));
            self.seen.retain(|path, _| wanted.contains(path));
            self.watched = wanted;
        }
    }

    /// A watched path changed: each machine says what that means for its service.
    fn path_changed(&mut self, event: PathEvent) {
        // Acted on, unless services are handed over (their new program acts on it), or the
        // path is no longer watched (an event from before the watched set changed).
        if self.watched.contains(&event.path) && !self.services.values().any(|s| s.carried) {
            self.seen.insert(event.path.clone(), event.fingerprint);
        }
        let path = event.path.to_string_lossy();
        let events: Vec<(String, Event)> = self
            .services
            .iter()
            .flat_map(|(name, slot)| {
                slot.machine
                    .path_events(&path, event.exists, event.initial)
                    .into_iter()
                    .map(move |e| (name.clone(), e))
            })
            .collect();
        for (name, event) in events {
            self.feed(&name, event);
        }
    }

    /// The checks changed: every service whose lifecycle depends on checks compares.
    fn checks_changed(&mut self) {
        let names: Vec<String> = self
            .services
            .iter()
            .filter(|(_, slot)| slot.machine.policy().uses_checks())
            .map(|(name, _)| name.clone())
            .collect();
        for name in names {
            self.feed(&name, Event::Checks(self.checks.clone()));
        }
    }

    /// Work handed off earlier has finished.
    fn finished(&mut self, done: Done) {
        match done {
            Done::Spawn {
                name,
                result,
                unenforced,
            } => {
                if let Some(slot) = self.services.get_mut(&name) {
                    slot.unenforced = unenforced;
                }
                self.spawned(&name, result)
            }
            Done::Exit {
                name,
                pid,
                code,
                missing,
                killed_by,
            } => {
                // A process handed to a new program is that program's to follow.
                if self.services.get(&name).is_some_and(|slot| slot.carried) {
                    return;
                }
                if let Some(cause) = killed_by {
                    if let Some(slot) = self.services.get(&name) {
                        // In the service's own log, where its last words are.
                        slot.log.push(Timestamp::now(), format!("cobble: {cause}"));
                    }
                    self.feed(&name, Event::KilledBy { pid, cause });
                }
                if let Some(slot) = self.services.get(&name) {
                    slot.notify.leader.send_if_modified(|leader| {
                        let led = *leader == pid;
                        if led {
                            *leader = 0;
                        }
                        led
                    });
                }
                self.feed(&name, Event::Exited { pid, code });
                if !missing.is_empty() {
                    self.feed(&name, Event::MissingNamed(missing));
                }
            }
            Done::Notify {
                name,
                leader,
                sender,
                belongs,
                fields,
                permit,
            } => {
                self.notified(&name, leader, sender, belongs, fields);
                drop(permit);
            }
            Done::CaughtUp { name } => {
                if let Some(slot) = self.services.get_mut(&name) {
                    slot.notify.catching_up = false;
                }
            }
            Done::Signalled { name, pid, escaped } => {
                let Some(slot) = self.services.get_mut(&name) else {
                    return;
                };
                if slot.machine.pid() == Some(pid) {
                    // Still being stopped: they go with the rest of the group.
                    for child in escaped {
                        if !slot.escaped.contains(&child) {
                            slot.escaped.push(child);
                        }
                    }
                } else if !escaped.is_empty() {
                    // The process is gone already and its group was ended without these.
                    end_group(&self.jobs, pid, escaped);
                }
            }
        }
    }

    /// A spawn finished: track the process, or tell the machine why there is none.
    fn spawned(&mut self, name: &str, result: Result<Spawned, SpawnError>) {
        let Some(slot) = self.services.get_mut(name) else {
            return;
        };
        if result.is_err() {
            slot.notify.leader.send_replace(0);
        }
        let spawned = match result {
            Ok(spawned) => spawned,
            Err(SpawnError::Missing(missing)) => {
                return self.feed(name, Event::PathsMissing { missing });
            }
            Err(SpawnError::Failed(error)) => {
                tracing::info!("Service \"{name}\" {error}");
                return self.feed(name, Event::SpawnFailed { error });
            }
        };
        slot.start_count += 1;
        let pid = spawned.pid;
        slot.notify.new_instance(pid);
        let output_done = spawned
            .output
            .map(|reader| self.read_output(name, reader, Vec::new()));
        let Some(slot) = self.services.get(name) else {
            return;
        };
        let log = slot.log.clone();
        self.watch_exit(name, pid, spawned.exit, output_done, log);
        self.feed(name, Event::Spawned { pid });
    }

    /// Starts the reader of `name`'s output on `reader`, after `unfinished` (the start of a
    /// line an earlier reader left); returns what tells when it has finished.
    fn read_output(
        &mut self,
        name: &str,
        reader: tokio::net::unix::pipe::Receiver,
        unfinished: Vec<u8>,
    ) -> oneshot::Receiver<()> {
        let (finished_tx, finished) = oneshot::channel();
        let Some(slot) = self.services.get_mut(name) else {
            return finished;
        };
        let detach = tokio_util::sync::CancellationToken::new();
        let copy = capture::copy_output(
            reader,
            name.to_owned(),
            self.output
                .outputs(name, slot.log.clone(), slot.file.clone()),
            unfinished,
            detach.clone(),
        );
        let task = tokio::spawn(async move {
            let detached = copy.await;
            drop(finished_tx);
            detached
        });
        slot.output = Some((detach, task));
        finished
    }

    /// What a service said on its notify socket, if it was the service that said it.
    fn notified(
        &mut self,
        name: &str,
        leader: u32,
        sender: u32,
        belongs: bool,
        fields: Vec<NotifyField>,
    ) {
        let Some(slot) = self.services.get_mut(name) else {
            return;
        };
        if slot.machine.pid() != Some(leader) {
            return; // about an instance that is gone
        }
        if !belongs {
            if !std::mem::replace(&mut slot.notify.refusal_logged, true) {
                tracing::info!(
                    "Service \"{name}\" notify message from pid {sender} ignored: not one of the service's processes"
                );
            }
            return;
        }
        let mut ready = false;
        // Said after READY=1 whatever their order in the message: a ping in the message that
        // says it is ready is the first of its run.
        let mut watchdog = Vec::new();
        for field in fields {
            match field {
                NotifyField::Ready => {
                    slot.notify.reloading = false;
                    ready = true;
                }
                NotifyField::Reloading => slot.notify.reloading = true,
                NotifyField::Stopping => slot.notify.stopping = true,
                NotifyField::Status(text) => {
                    slot.notify.status = (!text.is_empty()).then_some(text);
                }
                NotifyField::MainPid(pid) => {
                    if pid != leader.to_string() {
                        tracing::info!(
                            "Service \"{name}\" sent MAINPID={pid}, which is ignored: cobble follows the process it started ({leader}) and its process group"
                        );
                    }
                }
                NotifyField::WatchdogPing => watchdog.push(WatchdogSaid::Ping),
                NotifyField::WatchdogTrigger => watchdog.push(WatchdogSaid::Trigger),
                NotifyField::WatchdogUsec(usec) => watchdog.push(WatchdogSaid::Interval(
                    std::time::Duration::from_micros(usec),
                )),
            }
        }
        if ready {
            self.feed(name, Event::Ready { pid: leader });
        }
        for said in watchdog {
            self.feed(name, Event::Watchdog { pid: leader, said });
        }
    }

    /// Reports the exit of `pid` once its output is in its log, with the paths that output
    /// named as missing.
    fn watch_exit(
        &self,
        name: &str,
        pid: u32,
        exit: futures_util::future::BoxFuture<'static, i32>,
        output_done: Option<oneshot::Receiver<()>>,
        log: ServiceLog,
    ) {
        let done = self.done_tx.clone();
        let jobs = self.jobs.clone();
        let name = name.to_owned();
        tokio::spawn(async move {
            let code = exit.await;
            // Let the reader drain what the process wrote before it exited; a child that
            // keeps the pipe open only costs a short wait.
            if let Some(output_done) = output_done {
                let _ = tokio::time::timeout(OUTPUT_DRAIN, output_done).await;
            }
            let named = hints::missing_paths(&log.last_lines(LAST_LOG_LINES));
            let forget = name.clone();
            let (missing, killed_by) = jobs
                .run(move |processes| {
                    let killed_by = processes.killed_by(pid);
                    processes.forget(&forget, pid);
                    (processes.missing(named), killed_by)
                })
                .await
                .ok()
                .flatten()
                .unwrap_or_default();
            let _ = done.send(Done::Exit {
                name,
                pid,
                code,
                missing,
                killed_by,
            });
        });
    }

    fn handle(&mut self, request: Request) {
        // A start or stop of a service handed to a new program is that program's to answer
        // (the change's task, in progress in the state file, is taken up by it); it waits
        // here in case the re-execution does not happen.
        let carried = |name: &String| self.services.get(name).is_some_and(|slot| slot.carried);
        if let Request::Start { name, .. } | Request::Stop { name, .. } = &request
            && carried(name)
        {
            self.held_requests.push(request);
            return;
        }
        match request {
            Request::Start { name, again, reply } => self.start(name, again, reply),
            Request::Expect { names, expect } => {
                for name in names {
                    if expect {
                        *self.expected.entry(name.clone()).or_default() += 1;
                    } else if let Some(count) = self.expected.get_mut(&name) {
                        *count -= 1;
                        if *count == 0 {
                            self.expected.remove(&name);
                        }
                    }
                    self.oneshot_changed(&name);
                }
            }
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
            Request::Ping { reply } => {
                let _ = reply.send(());
            }
            #[cfg(test)]
            Request::Wedge => {}
            Request::Statuses {
                names,
                details,
                reply,
            } => {
                let _ = reply.send(self.statuses(&names, details));
            }
            Request::Signal {
                names,
                signal,
                reply,
            } => {
                injected_fault(&signal);
                let held = HeldSignal {
                    names,
                    signal,
                    reply,
                };
                if self.spawning(&held.names) {
                    self.held_signals.push(held);
                } else {
                    let _ = held.reply.send(self.signal(&held.names, &held.signal));
                }
            }
            Request::Outdated { reply } => {
                let plan = self.plan.borrow().clone();
                // Compared as they run, workload applied: a service whose workload changed
                // is outdated too.
                let outdated = self
                    .services
                    .iter()
                    .filter(|(name, slot)| {
                        plan.service_to_run(name)
                            .is_some_and(|config| runs_differently(&config, &slot.config))
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
                                | machine::Status::Starting
                                | machine::Status::Backoff
                                | machine::Status::Waiting
                        )
                    })
                    .map(|(name, _)| name.clone())
                    .collect();
                let _ = reply.send(active);
            }
            Request::PauseNotify { reply } => {
                // Stopped between two datagrams: what comes meanwhile waits in the socket.
                let paused = self
                    .services
                    .values_mut()
                    .filter_map(|slot| slot.notify.reader.take())
                    .map(|running| {
                        running.stop.cancel();
                        super::PausedReader {
                            task: running.task,
                            in_flight: running.in_flight,
                            messages: notify_reader::IN_FLIGHT as u32,
                        }
                    })
                    .collect();
                let _ = reply.send(paused);
            }
            Request::ResumeNotify => {
                for (name, slot) in &mut self.services {
                    if slot.notify.socket.is_some() && slot.notify.reader.is_none() {
                        // What was said while it was stopped is read before its deadlines.
                        slot.notify.catching_up = true;
                        start_notify_reader(name, &mut slot.notify, &self.done_tx, &self.jobs);
                    }
                }
            }
            Request::TakeOver { endings, reply } => {
                if self.any_spawning() {
                    self.held_takeover = Some((reply, endings));
                } else {
                    self.answer_take_over(reply, endings);
                }
            }
            Request::Spawning { reply } => {
                let _ = reply.send(self.being_spawned().cloned().collect());
            }
            Request::Resume { services } => {
                let names: Vec<String> = services.iter().map(|(name, _)| name.clone()).collect();
                for (name, detached) in services {
                    let Some(slot) = self.services.get_mut(&name) else {
                        continue;
                    };
                    slot.carried = false;
                    // An exit reaped while the service was handed over was not acted on:
                    // its group is gone, how it ended is not known.
                    let gone = slot
                        .machine
                        .pid()
                        .filter(|&pid| !cobble_sys::process::group_alive(pid));
                    if let Some(pid) = gone {
                        self.feed(&name, Event::Exited { pid, code: -1 });
                    }
                    if let Some(detached) = detached {
                        // The exit's watcher keeps the end of the reader it had, which
                        // came when that reader stopped.
                        drop(self.read_output(&name, detached.reader, detached.unfinished));
                    }
                }
                for held in std::mem::take(&mut self.held_requests) {
                    self.handle(held);
                }
                // What the paths and the one-shots did meanwhile was not acted on: the
                // watches are armed anew, each comparing its path with what was acted on
                // (a change meanwhile is one), and what waits for one-shots hears where
                // they stand.
                drop(self.watcher.set(BTreeSet::new()));
                self.watched.clear();
                self.baseline = self.seen.clone();
                self.watches_stale = true;
                for name in &names {
                    self.oneshot_changed(name);
                    self.tell_where_oneshots_stand(name);
                }
            }
            Request::Adopt {
                services,
                paths,
                reply,
            } => {
                // The paths the adopted services watch are compared with what the
                // predecessor acted on when the watches are armed, after this request.
                self.baseline.extend(paths);
                let mut in_flight = Vec::new();
                let adopted: Vec<String> = services
                    .into_iter()
                    .filter_map(|adoption| self.adopt(adoption, &mut in_flight))
                    .collect();
                // The one-shots as they stand now reach what is ordered after them: a
                // service that waits for them goes on waiting, or starts.
                for name in &adopted {
                    self.oneshot_changed(name);
                }
                for name in &adopted {
                    self.tell_where_oneshots_stand(name);
                }
                // The checks, handed over too, as they stand: a firing the predecessor had not
                // acted on is acted on, a service waiting for its checks starts once they pass.
                for name in &adopted {
                    let uses_checks = self
                        .services
                        .get(name)
                        .is_some_and(|slot| slot.machine.policy().uses_checks());
                    if uses_checks {
                        self.perform(name, Event::Checks(self.checks.clone()), None);
                    }
                }
                let _ = reply.send(in_flight);
            }
            Request::Carry { logs, reply } => {
                for (name, lines) in logs {
                    let Some(config) = self
                        .plan
                        .borrow()
                        .service_to_run(&name)
                        .map(std::borrow::Cow::into_owned)
                    else {
                        continue;
                    };
                    let slot = self.slot(&name, Arc::new(config));
                    for line in lines {
                        slot.log.push(line.time, line.line);
                    }
                }
                let _ = reply.send(());
            }
            Request::Logs { names, reply } => {
                let logs = self
                    .services
                    .iter()
                    .filter(|(name, _)| names.contains(name))
                    .map(|(name, slot)| (name.clone(), slot.log.clone()))
                    .collect();
                let _ = reply.send(logs);
            }
        }
    }

    /// The statuses of the started services among `names` (all of them when `names` is
    /// empty), sorted by name, with details if `with_details`.
    fn statuses(&mut self, names: &[String], with_details: bool) -> Vec<ServiceStatus> {
        if names.is_empty() {
            return self
                .services
                .iter_mut()
                .map(|(name, slot)| slot.status(name, with_details))
                .collect();
        }
        // Sorted and without repeats, as the listing must be.
        let wanted: BTreeSet<&str> = names.iter().map(String::as_str).collect();
        wanted
            .into_iter()
            .filter_map(|name| Some(self.services.get_mut(name)?.status(name, with_details)))
            .collect()
    }

    fn start(&mut self, name: String, again: bool, reply: oneshot::Sender<StartReply>) {
        let plan = self.plan.borrow().clone();
        let Some(config) = plan.service_to_run(&name).map(std::borrow::Cow::into_owned) else {
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
        self.slot(&name, config.clone());
        let file = self.output.file(&name, config.persist_logs == Some(true));
        let slot = self.services.get_mut(&name).expect("made above");
        slot.config = config.clone();
        slot.file.set(file);
        let policy = policy(&config, &plan);
        // A machine whose old policy did not follow the checks decides the start against
        // them as they are now; the same holds for the one-shots it is ordered after.
        let oneshots = !policy.after_oneshots.is_empty();
        if policy.uses_checks() && !Arc::ptr_eq(slot.machine.checks(), &self.checks) {
            self.feed(&name, Event::Checks(self.checks.clone()));
        }
        if oneshots {
            self.feed(&name, Event::Oneshots(self.oneshots.clone()));
        }
        let event = if again {
            Event::Start(policy)
        } else {
            Event::Ensure(policy)
        };
        self.perform(&name, event, Some(reply));
    }

    /// Answers a take-over: nothing is handed over to an asker that has gone (it waited
    /// too long for a spawn), and what is handed over just as it goes is taken back.
    fn answer_take_over(&mut self, reply: TakeOverReply, endings: bool) {
        if reply.is_closed() {
            return;
        }
        if let Err(Ok(taken)) = reply.send(self.take_over(endings)) {
            for taken in taken.services {
                if let Some(slot) = self.services.get_mut(&taken.name) {
                    slot.carried = false;
                    slot.output = taken.output;
                }
            }
        }
    }

    /// Hands every service that was started over for a re-execution (see
    /// [`Request::TakeOver`]): running, starting, being ended (by a client's stop, or for
    /// another reason when `endings`), backing off, waiting, a one-shot completed, or down
    /// since (stopped, or left down by its policy), with its record.
    fn take_over(&mut self, endings: bool) -> Result<super::TakenOver, Vec<String>> {
        let now = Instant::now();
        // The same instant on the clock the new program reads (the monotonic one, which the
        // exec keeps): what the carried durations count from.
        let handed_at = cobble_sys::reexec::monotonic_now();
        let plan = self.plan.borrow().clone();
        let mut why = Vec::new();
        let mut carried = Vec::new();
        for (name, slot) in &self.services {
            let shown = cobble_plan::go_quote(name);
            let status = slot.machine.status();
            // Never started: the new program knows it from the plan alone.
            if slot.machine.phase() == machine::Phase::Idle {
                continue;
            }
            let to_run = plan.service_to_run(name);
            // The plan has changed it since it started: it goes over with the configuration
            // it runs (or last ran), which is what this program would go on with (its
            // restarts, its policy) until a replan.
            let changed = to_run.as_deref() != Some(slot.config.as_ref());
            // Down (stopped, or left down by its policy): handed over with its record (since
            // when, its starts, its last exit); one the plan no longer has is left behind.
            let down = matches!(
                slot.machine.phase(),
                machine::Phase::Stopped | machine::Phase::Exited
            );
            let Some(state) = slot.machine.carried(now) else {
                let what = match slot.machine.phase() {
                    machine::Phase::Spawning { .. } => "being started".to_owned(),
                    machine::Phase::Terminating { .. } | machine::Phase::Killing { .. } => {
                        "being stopped".to_owned()
                    }
                    _ => status.as_str().to_owned(),
                };
                why.push(format!("service {shown} is {what}"));
                continue;
            };
            if let machine::CarriedPhase::Stopping { after, .. } = &state.phase
                && !endings
            {
                let why_ended = match after {
                    machine::AfterExit::Stop => None,
                    machine::AfterExit::CheckRestart(check) => Some(format!(
                        "restarted for check {}",
                        cobble_plan::go_quote(check)
                    )),
                    machine::AfterExit::Respawn => Some("restarted after a file change".into()),
                    machine::AfterExit::Failed => Some("ended after a failed start".into()),
                    machine::AfterExit::Watchdog => Some("ended by its watchdog".into()),
                };
                if let Some(why_ended) = why_ended {
                    why.push(format!(
                        "service {shown} is being {why_ended}, which the new program (a cobble \
                         too old for that) cannot take over"
                    ));
                    continue;
                }
            }
            if down && to_run.is_none() {
                continue;
            }
            carried.push((name.clone(), state, changed));
        }
        if !why.is_empty() {
            return Err(why);
        }
        let services = carried
            .into_iter()
            .filter_map(|(name, carried, changed)| {
                let slot = self.services.get_mut(&name)?;
                slot.carried = true;
                let ran = changed.then(|| slot.config.clone());
                // Its readiness socket (its reader stopped already, see
                // [`Request::PauseNotify`]) and what the running instance said on it.
                let notify = slot
                    .notify
                    .socket
                    .as_ref()
                    .zip(slot.notify.address.as_ref())
                    .map(|(socket, address)| super::TakenNotify {
                        address: address.clone(),
                        fd: socket.raw_fd(),
                        status: slot.notify.status.clone(),
                        reloading: slot.notify.reloading,
                        stopping: slot.notify.stopping,
                    });
                Some(super::Taken {
                    name,
                    carried,
                    start_count: slot.start_count,
                    since: slot.since,
                    completed_at: slot.completed_at,
                    unenforced: slot.unenforced.clone(),
                    handed_at,
                    output: slot.output.take(),
                    notify,
                    ran,
                })
            })
            .collect();
        Ok(super::TakenOver {
            services,
            paths: self.seen.clone(),
        })
    }

    /// Tells service `name`, if it is ordered after one-shots, where they stand now: after a
    /// re-execution, or one given up, it did not hear what they did meanwhile.
    fn tell_where_oneshots_stand(&mut self, name: &str) {
        let after_oneshots = self
            .services
            .get(name)
            .is_some_and(|slot| !slot.machine.policy().after_oneshots.is_empty());
        if after_oneshots {
            self.perform(name, Event::Oneshots(self.oneshots.clone()), None);
        }
    }

    /// Follows a service a predecessor handed over: its machine where it stood, and its
    /// process, if it has one; returns its name once it has its slot. What it was in the
    /// middle of (a start, a stop) goes to `in_flight`, to be answered as it would have been:
    /// its waiters are there before anything more happens to the service.
    fn adopt(
        &mut self,
        adoption: super::Adoption,
        in_flight: &mut Vec<(String, super::InFlight)>,
    ) -> Option<String> {
        let super::Adoption {
            name,
            carried,
            at,
            start_count,
            since,
            completed_at,
            unenforced,
            reader,
            unfinished,
            exit,
            gone,
            notify,
            ran,
        } = adoption;
        let plan = self.plan.borrow().clone();
        // What it runs or last ran, when the plan has changed it since: so that it goes on
        // (restarts, policy) as it would have, and a replan sees what changed.
        let config = ran.or_else(|| plan.service_to_run(&name).map(std::borrow::Cow::into_owned));
        let Some(config) = config.map(Arc::new) else {
            match carried.pid() {
                Some(pid) => tracing::warn!(
                    "Cannot follow service \"{name}\" (pid {pid}): it is not in the plan"
                ),
                None => tracing::warn!("Cannot follow service \"{name}\": it is not in the plan"),
            }
            return None;
        };
        let seed = {
            self.next_seed = self.next_seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
            self.next_seed
        };
        self.watches_stale = true;
        let file = self.output.file(&name, config.persist_logs == Some(true));
        let (done_tx, jobs) = (self.done_tx.clone(), self.jobs.clone());
        let slot = self.slot(&name, config.clone());
        slot.machine = Machine::adopted(name.clone(), seed, policy(&config, &plan), &carried, at);
        slot.config = config;
        slot.file.set(file);
        slot.start_count = start_count;
        slot.since = since;
        slot.completed_at = completed_at;
        slot.unenforced = unenforced;
        if let Some(waiters) = self.in_flight(&name) {
            in_flight.push((name.clone(), waiters));
        }
        let (Some(pid), Some(exit)) = (carried.pid(), exit) else {
            return Some(name);
        };
        let slot = self.services.get_mut(&name)?;
        slot.notify.new_instance(pid);
        if let Some(notify) = notify {
            match NotifySocket::adopt(notify.socket, notify.address.clone()) {
                Ok(socket) => {
                    slot.notify.address = Some(notify.address);
                    slot.notify.socket = Some(Arc::new(socket));
                    slot.notify.status = notify.status;
                    slot.notify.reloading = notify.reloading;
                    slot.notify.stopping = notify.stopping;
                    slot.notify.catching_up = true;
                    start_notify_reader(&name, &mut slot.notify, &done_tx, &jobs);
                }
                Err(e) => tracing::warn!(
                    "Service \"{name}\" notify socket cannot be read after the re-execution: {}",
                    cobble_sys::os_error_text(&e)
                ),
            }
        }
        let output_done = reader.map(|reader| self.read_output(&name, reader, unfinished));
        let log = self.services.get(&name)?.log.clone();
        self.watch_exit(&name, pid, exit, output_done, log);
        if gone {
            // Reaped before this program could follow it: it exited, how is not known.
            self.feed(&name, Event::Exited { pid, code: -1 });
        }
        Some(name)
    }

    /// Waiters for the start or the stop the adopted service `name` is in the middle of: a
    /// start within its okay delay, not ready yet or waiting for a one-shot, or a client's
    /// stop waiting out its kill-delay; `None` for one in the middle of neither.
    fn in_flight(&mut self, name: &str) -> Option<super::InFlight> {
        let slot = self.services.get_mut(name)?;
        let mut in_flight = super::InFlight::default();
        match slot.machine.phase() {
            machine::Phase::Terminating { .. } | machine::Phase::Killing { .. } => {
                let (tx, rx) = oneshot::channel();
                slot.stop_waiters.push(tx);
                in_flight.stop = Some(rx);
            }
            machine::Phase::Starting { .. } => {
                let (tx, rx) = oneshot::channel();
                slot.start_waiters.push(tx);
                in_flight.start = Some(rx);
            }
            _ if slot.machine.start_pending() => {
                let (tx, rx) = oneshot::channel();
                slot.start_waiters.push(tx);
                in_flight.start = Some(rx);
            }
            _ => return None,
        }
        Some(in_flight)
    }

    /// The slot of `name`, made with `config` if the service has none yet.
    fn slot(&mut self, name: &str, config: Arc<Service>) -> &mut Slot {
        let seed = {
            self.next_seed = self.next_seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
            self.next_seed
        };
        let name = name.to_owned();
        self.services.entry(name.clone()).or_insert_with(|| Slot {
            machine: Machine::new(name.clone(), seed),
            config: config.clone(),
            log: ServiceLog::new(),
            file: persist::Switch::default(),
            start_waiters: Vec::new(),
            stop_waiters: Vec::new(),
            since: None,
            rendered_since: status::RenderedSince::default(),
            start_count: 0,
            escaped: Vec::new(),
            notify: Notify::default(),
            unenforced: None,
            output: None,
            carried: false,
            completed_at: None,
        })
    }

    /// Where the service `name` stands as a one-shot (`None` for a daemon, or a service not
    /// started and not expected).
    fn oneshot_state(&self, name: &str) -> Option<OneshotState> {
        if self.expected.contains_key(name) {
            return Some(OneshotState::Running);
        }
        self.services.get(name)?.machine.oneshot_state()
    }

    /// The one-shot `name` may stand elsewhere now: if it does, the services ordered after
    /// it hear of it, and so on down a chain of one-shots.
    fn oneshot_changed(&mut self, name: &str) {
        let mut changed = vec![name.to_owned()];
        while let Some(name) = changed.pop() {
            let state = self.oneshot_state(&name);
            if self.oneshots.get(&name) == state.as_ref() {
                continue;
            }
            let oneshots = Arc::make_mut(&mut self.oneshots);
            match state {
                Some(state) => oneshots.insert(name.clone(), state),
                None => oneshots.remove(&name),
            };
            let after: Vec<String> = self
                .services
                .iter()
                .filter(|(_, slot)| {
                    slot.machine
                        .policy()
                        .after_oneshots
                        .iter()
                        .any(|dep| dep.name == name)
                })
                .map(|(name, _)| name.clone())
                .collect();
            for service in after {
                self.step(&service, Event::Oneshots(self.oneshots.clone()), None);
                changed.push(service);
            }
        }
    }

    /// Feeds one event to a service's machine and performs the resulting actions.
    fn feed(&mut self, name: &str, event: Event) {
        self.perform(name, event, None);
    }

    /// Feeds `event` and performs the actions, then tells the services ordered after the
    /// service where it stands if that changed.
    fn perform(&mut self, name: &str, event: Event, request: Option<oneshot::Sender<StartReply>>) {
        self.step(name, event, request);
        self.oneshot_changed(name);
    }

    /// Feeds `event` and performs the actions. A start outcome decided by this very step
    /// (already started, cannot start while stopping) answers `request` only; otherwise the
    /// request waits with the others for the start to resolve.
    fn step(&mut self, name: &str, event: Event, mut request: Option<oneshot::Sender<StartReply>>) {
        let Some(slot) = self.services.get_mut(name) else {
            return;
        };
        if slot.carried {
            // Handed to a new program: what happens to it now is that program's to act on.
            return;
        }
        self.watches_stale = true;
        let before = slot.machine.status();
        let mut actions = slot.machine.step(Instant::now(), event);
        // A start is answered after the step's other actions: the start's task fails (and
        // says so in the daemon log) only once the exit that failed it is logged, with the
        // action it takes, as in Pebble.
        actions.sort_by_key(|action| matches!(action, Action::StartDone(_)));
        for action in actions {
            match action {
                Action::Spawn => {
                    // What the new instance says before its spawn is known here waits for
                    // it, rather than be taken for a stranger's.
                    slot.notify.leader.send_replace(notify_reader::SPAWNING);
                    let mut config = slot.config.clone();
                    let done = self.done_tx.clone();
                    let notify =
                        slot.machine.policy().notify.then(|| {
                            notify_socket(name, &mut slot.notify, &self.done_tx, &self.jobs)
                        });
                    let name = name.to_owned();
                    match notify {
                        Some(Err(e)) => {
                            let result = Err(SpawnError::Failed(format!(
                                "cannot start service: cannot create its notify socket: {e}"
                            )));
                            let _ = done.send(Done::Spawn {
                                name,
                                result,
                                unenforced: None,
                            });
                            continue;
                        }
                        Some(Ok(address)) => {
                            let mut with_socket = (*config).clone();
                            with_socket
                                .environment
                                .insert(notify::NOTIFY_SOCKET.to_owned(), address);
                            config = Arc::new(with_socket);
                        }
                        None => {}
                    }
                    drop(self.jobs.run(move |processes| {
                        let result = processes.spawn(&name, &config);
                        // After the spawn, which is when the cgroups are first tried.
                        let unenforced = processes.unenforced(&config);
                        let _ = done.send(Done::Spawn {
                            name,
                            result,
                            unenforced,
                        });
                    }));
                }
                Action::Signal { pid, signal } => {
                    let done = self.done_tx.clone();
                    let name = name.to_owned();
                    drop(self.jobs.run(move |processes| {
                        let escaped = processes.signal_group(pid, signal);
                        let _ = done.send(Done::Signalled { name, pid, escaped });
                    }));
                }
                Action::EndGroup { pid } => {
                    let escaped = std::mem::take(&mut slot.escaped);
                    end_group(&self.jobs, pid, escaped);
                }
                Action::EndRemains { pid, kill_delay } => {
                    end_remains(&self.jobs, name, pid, kill_delay);
                }
                Action::SignalProcess { pid, signal } => {
                    // kill(2) does not block.
                    match self.jobs.processes.signal_process(pid, &signal) {
                        Ok(()) => tracing::info!("Sent {signal} to service \"{name}\""),
                        Err(e) => tracing::info!("Cannot send {signal} to service \"{name}\": {e}"),
                    }
                }
                Action::StartDone(outcome) => {
                    let output = match &outcome {
                        StartOutcome::Failed {
                            with_output: true, ..
                        // One more than shown, to know whether to mark what was cut.
                        } => slot.log.last_lines(LAST_LOG_LINES + 1),
                        _ => Vec::new(),
                    };
                    let reply = StartReply { outcome, output };
                    match request.take() {
                        Some(request) => {
                            let _ = request.send(reply);
                        }
                        None => {
                            for waiter in slot.start_waiters.drain(..) {
                                let _ = waiter.send(reply.clone());
                            }
                        }
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
                Action::OutputNote(note) => {
                    slot.log.push(Timestamp::now(), format!("cobble: {note}"));
                }
            }
        }
        if let Some(request) = request {
            slot.start_waiters.push(request);
        }
        if slot.machine.status() != before || slot.since.is_none() {
            slot.since = Some(Timestamp::now());
        }
        match (slot.machine.phase(), slot.machine.completion()) {
            (machine::Phase::Completed, Some(_)) if before != machine::Status::Inactive => {
                slot.completed_at = Some(Timestamp::now());
            }
            (_, None) => slot.completed_at = None,
            _ => {}
        }
    }

    /// Whether any of the named services is between asking for a process and having one.
    fn spawning(&self, names: &[String]) -> bool {
        names
            .iter()
            .filter_map(|name| self.services.get(name))
            .any(|slot| slot.machine.is_spawning())
    }

    /// The services between asking for a process and having one.
    fn being_spawned(&self) -> impl Iterator<Item = &String> {
        self.services
            .iter()
            .filter(|(_, slot)| slot.machine.is_spawning())
            .map(|(name, _)| name)
    }

    /// Whether any service is between asking for a process and having one.
    fn any_spawning(&self) -> bool {
        self.being_spawned().next().is_some()
    }

    /// Sends the held signals whose services have finished spawning, in the order they came.
    fn release_signals(&mut self) {
        if self.held_signals.is_empty() {
            return;
        }
        let (ready, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.held_signals)
            .into_iter()
            .partition(|held| !self.spawning(&held.names));
        self.held_signals = waiting;
        for held in ready {
            let _ = held.reply.send(self.signal(&held.names, &held.signal));
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
                Some(pid) => {
                    tracing::info!("Sending {signal} to service \"{name}\"");
                    // kill(2) does not block.
                    self.jobs.processes.signal_process(pid, signal)
                }
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

/// Fault injection for the tests of what happens when the supervisor dies: in debug builds
/// with `COBBLE_TEST_FAULTS=1` in the daemon's environment, signalling a service with
/// [`super::PANIC_SIGNAL`] panics the actor. Release builds have no such path.
#[cfg(debug_assertions)]
fn injected_fault(signal: &str) {
    if signal == super::PANIC_SIGNAL && std::env::var_os("COBBLE_TEST_FAULTS").is_some() {
        panic!("injected fault");
    }
}

#[cfg(not(debug_assertions))]
fn injected_fault(_signal: &str) {}

/// Ends what is left of a stopped process group, off the actor.
fn end_group(jobs: &ProcessJobs, pid: u32, escaped: Vec<Escaped>) {
    drop(jobs.run(move |processes| processes.end_group(pid, &escaped)));
}

/// Ends what the exited main process `pid` left running, off the actor: SIGTERM now, SIGKILL
/// after `kill_delay` to whatever is left.
fn end_remains(jobs: &ProcessJobs, name: &str, pid: u32, kill_delay: std::time::Duration) {
    let jobs = jobs.clone();
    let name = name.to_owned();
    tokio::spawn(async move {
        let remains = jobs
            .run(move |processes| processes.signal_remains(pid, machine::GroupSignal::Term))
            .await
            .ok()
            .flatten()
            .unwrap_or_default();
        if remains.is_empty() {
            return;
        }
        tracing::info!(
            "Service \"{name}\" left {} processes running; stopping them",
            remains.len()
        );
        tokio::time::sleep(kill_delay).await;
        drop(jobs.run(move |processes| processes.end_group(pid, &remains)));
    });
}

/// The address of service `name`'s notify socket: bound, with its reader started
/// ([`notify_reader`]), the first time it is asked for.
fn notify_socket(
    name: &str,
    notify: &mut Notify,
    done: &mpsc::UnboundedSender<Done>,
    jobs: &ProcessJobs,
) -> std::io::Result<String> {
    if let Some(address) = &notify.address {
        return Ok(address.clone());
    }
    let socket = Arc::new(NotifySocket::bind()?);
    let address = socket.address().to_owned();
    notify.address = Some(address.clone());
    notify.socket = Some(socket);
    start_notify_reader(name, notify, done, jobs);
    Ok(address)
}

/// Starts the reader of service `name`'s notify socket, unless it has none or one runs.
fn start_notify_reader(
    name: &str,
    notify: &mut Notify,
    done: &mpsc::UnboundedSender<Done>,
    jobs: &ProcessJobs,
) {
    let Some(socket) = notify.socket.clone() else {
        return;
    };
    if notify.reader.is_some() {
        return;
    }
    notify.reader = Some(notify_reader::start(
        name.to_owned(),
        socket,
        notify.leader.subscribe(),
        done.clone(),
        jobs.clone(),
        notify.catching_up,
    ));
}

/// Whether `new` runs the service otherwise than `old` did, so that a replan restarts it:
/// any difference but its `schedule`, which says when the daemon starts it, not how.
fn runs_differently(new: &Service, old: &Service) -> bool {
    if new.schedule == old.schedule {
        return new != old;
    }
    let mut same_schedule = new.clone();
    same_schedule.schedule.clone_from(&old.schedule);
    same_schedule != *old
}
