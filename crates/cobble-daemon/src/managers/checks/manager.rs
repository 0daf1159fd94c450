//! The check manager actor: which checks run, with which configuration.
//!
//! The actor applies every new plan (and, before any request, a plan it has not seen yet):
//!
//! - a running check whose merged configuration is unchanged keeps running, streak and
//!   change intact;
//! - a changed running check is stopped and started afresh (new change; its streak and its
//!   lifetime counters start again, as Pebble drops a modified check's data), except that a
//!   running check changed from enabled to `startup: disabled` keeps running as it was (a
//!   later start runs the plan's configuration);
//! - a removed check is stopped and forgotten;
//! - a check that is not running, new or not, starts if enabled (so, as in Pebble, any plan
//!   change, even a layer with only a summary, starts again an enabled check that a client
//!   stopped), otherwise it is listed as inactive, afresh (without the failures and changes
//!   of a run a client stopped), as Pebble lists it after any plan change.

use std::collections::BTreeMap;
use std::sync::Arc;

use cobble_plan::{Check, Plan};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::carry::{CarriedCheck, Detached};
use super::checker::{self, CheckError, Checker};
use super::machine::CheckRun;
use super::runner::{
    PERFORM_CHECK, RefreshReply, RefreshRequest, Runner, Shared, new_check_change,
};
use super::{CheckLevel, CheckSignals, CheckStatus, CheckView, Publisher, Snapshot};
use crate::process::launcher::Launcher;
use crate::state::{NotRecorded, StateStore, TaskStatus};

/// Builds the probe of a check (service context already merged).
pub(crate) type CheckerFactory = Arc<dyn Fn(&Check) -> Arc<dyn Checker> + Send + Sync>;

/// Errors of check requests, worded as Pebble words them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum CheckManagerError {
    /// Some names are not checks of the plan (sorted).
    #[error("cannot find checks in plan: {}", .0.join(", "))]
    NotFound(Vec<String>),
    /// `refresh` of a check that is not in the plan.
    #[error("cannot find check with name \"{0}\"")]
    NoSuchCheck(String),
    /// The daemon is shutting down.
    #[error("check manager is not running")]
    Gone,
    /// The state file could not be written.
    #[error("cannot record change: {0}")]
    NotRecorded(NotRecorded),
}

/// An action of `POST /v1/checks`, parsed from its wire name once at the API's edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CheckAction {
    /// Start the named checks that are not running.
    Start,
    /// Stop the named checks that are running.
    Stop,
}

impl CheckAction {
    /// The action of a wire name; `None` for a name Pebble does not know.
    pub(crate) fn from_name(name: &str) -> Option<CheckAction> {
        match name {
            "start" => Some(CheckAction::Start),
            "stop" => Some(CheckAction::Stop),
            _ => None,
        }
    }

    /// The wire name.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            CheckAction::Start => "start",
            CheckAction::Stop => "stop",
        }
    }
}

impl std::fmt::Display for CheckAction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

enum Request {
    Act {
        action: CheckAction,
        names: Vec<String>,
        reply: oneshot::Sender<Result<Vec<String>, CheckManagerError>>,
    },
    Refresh {
        name: String,
        reply: oneshot::Sender<Result<RefreshReply, CheckManagerError>>,
    },
    Replan {
        reply: oneshot::Sender<Vec<String>>,
    },
    Sync {
        reply: oneshot::Sender<()>,
    },
    TakeOver {
        reply: oneshot::Sender<Vec<CarriedCheck>>,
    },
    Resume {
        checks: Vec<CarriedCheck>,
    },
}

/// Handle to the check manager. Cheap to clone. Reads (`checks`, `healthy`) come from the
/// published snapshot and never wait for the actor unless a new plan has not been applied.
#[derive(Clone)]
#[must_use]
pub(crate) struct CheckManager {
    tx: mpsc::UnboundedSender<Request>,
    snapshot: watch::Receiver<Snapshot>,
    signals: watch::Receiver<Arc<CheckSignals>>,
    plan: watch::Receiver<Arc<Plan>>,
    /// Where the checks' changes are, for answers that show their IDs.
    store: StateStore,
}

impl CheckManager {
    /// Applies the current plan (starting its enabled checks) and starts the actor; exec
    /// checks start their commands through `launcher`. The handle to the actor's task lets
    /// the daemon notice if it ever ends.
    /// A re-executed daemon passes the `carried` checks its predecessor handed over: they go
    /// on as they stood (see [`CheckManager::take_over`]) instead of starting afresh.
    pub(crate) fn spawn(
        plan: watch::Receiver<Arc<Plan>>,
        store: StateStore,
        launcher: Launcher,
        carried: Vec<CarriedCheck>,
    ) -> (CheckManager, JoinHandle<()>) {
        CheckManager::spawn_carrying(
            plan,
            store,
            Arc::new(move |config| checker::build(config, &launcher)),
            carried,
        )
    }

    /// [`CheckManager::spawn`] with another way to build probes (tests use scripted ones).
    #[cfg(test)]
    pub(crate) fn spawn_with(
        plan: watch::Receiver<Arc<Plan>>,
        store: StateStore,
        build: CheckerFactory,
    ) -> (CheckManager, JoinHandle<()>) {
        CheckManager::spawn_carrying(plan, store, build, Vec::new())
    }

    /// [`CheckManager::spawn`] with another way to build probes.
    pub(crate) fn spawn_carrying(
        plan: watch::Receiver<Arc<Plan>>,
        store: StateStore,
        build: CheckerFactory,
        carried: Vec<CarriedCheck>,
    ) -> (CheckManager, JoinHandle<()>) {
        let publisher = Publisher::new();
        let snapshot = publisher.subscribe();
        let signals = publisher.subscribe_signals();
        let (tx, rx) = mpsc::unbounded_channel();
        let mut actor = Actor {
            plan_rx: plan.clone(),
            shared: Arc::new(Shared {
                store: store.clone(),
                publisher,
            }),
            entries: BTreeMap::new(),
            next_generation: 0,
            build,
            carried: carried.into_iter().map(|c| (c.name.clone(), c)).collect(),
        };
        actor.sync_plan();
        let task = tokio::spawn(actor.run(rx));
        (
            CheckManager {
                tx,
                snapshot,
                signals,
                plan,
                store,
            },
            task,
        )
    }

    /// The checks that are down and how often each has fired its failure action, and the
    /// checks that pass (see [`CheckSignals`]).
    pub(crate) fn signals(&self) -> watch::Receiver<Arc<CheckSignals>> {
        self.signals.clone()
    }

    /// Every check of the current plan, sorted by name.
    pub(crate) async fn checks(&self) -> Vec<CheckView> {
        self.catch_up().await;
        self.snapshot.borrow().checks.values().cloned().collect()
    }

    /// [`CheckManager::checks`], for a client: each shows the ID of its current change,
    /// made in the background, so this returns once those IDs are in the state file.
    pub(crate) async fn checks_shown(&self) -> Vec<CheckView> {
        let checks = self.checks().await;
        self.store.showing_ids(checks).await
    }

    /// Whether every check matching `level` and `names` (empty = all) is up or inactive.
    /// Reads the snapshot only: never waits.
    pub(crate) fn healthy(&self, level: CheckLevel, names: &[String]) -> bool {
        super::healthy(&self.snapshot.borrow(), level, names)
    }

    /// Starts the named checks that are not running, or stops those that are; returns the
    /// names whose state changed, sorted. Fails without changing anything if a name is not
    /// in the plan.
    pub(crate) async fn act(
        &self,
        action: CheckAction,
        names: Vec<String>,
    ) -> Result<Vec<String>, CheckManagerError> {
        let (reply, rx) = oneshot::channel();
        self.send(Request::Act {
            action,
            names,
            reply,
        });
        rx.await.unwrap_or(Err(CheckManagerError::Gone))
    }

    /// Runs a check now. A running check records the result as any run (it may go down or
    /// recover); a stopped one only reports it. Returns the check afterwards and the error
    /// of the run, if it failed.
    pub(crate) async fn refresh(
        &self,
        name: &str,
    ) -> Result<(CheckView, Option<CheckError>), CheckManagerError> {
        let (reply, rx) = oneshot::channel();
        self.send(Request::Refresh {
            name: name.to_owned(),
            reply,
        });
        let refreshed = rx.await.unwrap_or(Err(CheckManagerError::Gone))?;
        // The run may have moved the check into a new change (a failure that hit the
        // threshold starts a recover-check change), whose ID the answer shows.
        self.store
            .durable()
            .await
            .map_err(CheckManagerError::NotRecorded)?;
        Ok(refreshed)
    }

    /// Starts the enabled checks that are not running (a service replan); returns them.
    pub(crate) async fn replan(&self) -> Vec<String> {
        let (reply, rx) = oneshot::channel();
        self.send(Request::Replan { reply });
        rx.await.unwrap_or_default()
    }

    /// Hands every check over for a re-execution: each running check's runner stops between
    /// two runs (a run in flight is dropped, and due again at once), leaving its change and
    /// task in progress; returns every check as it stands. Until [`CheckManager::resume`] no
    /// check runs, and the listing stays as it was.
    pub(crate) async fn take_over(&self) -> Vec<CarriedCheck> {
        let (reply, rx) = oneshot::channel();
        self.send(Request::TakeOver { reply });
        rx.await.unwrap_or_default()
    }

    /// Runs again the checks [`CheckManager::take_over`] handed over, as they stood, after a
    /// re-execution that did not happen.
    pub(crate) fn resume(&self, checks: Vec<CarriedCheck>) {
        self.send(Request::Resume { checks });
    }

    fn send(&self, request: Request) {
        let _ = self.tx.send(request);
    }

    /// Waits for the actor to apply the current plan, if it has not yet.
    async fn catch_up(&self) {
        let current = self.plan.borrow().clone();
        let applied = self
            .snapshot
            .borrow()
            .plan
            .as_ref()
            .is_some_and(|p| Arc::ptr_eq(p, &current));
        if !applied {
            let (reply, rx) = oneshot::channel();
            self.send(Request::Sync { reply });
            let _ = rx.await;
        }
    }
}

/// One check of the plan.
struct Entry {
    /// The plan's configuration (service context merged): what a start runs. A running
    /// check may still run an earlier one (see [`Running::config`]).
    config: Arc<Check>,
    /// The runner, while the check is active.
    running: Option<Running>,
}

struct Running {
    /// The configuration it runs with: the plan's when it started. A plan that switches a
    /// running check to `startup: disabled` leaves it running with this one, as Pebble does.
    config: Arc<Check>,
    cancel: CancellationToken,
    /// Stops the runner for a re-execution (see [`super::runner::Runner::run`]).
    detach: CancellationToken,
    refresh: mpsc::UnboundedSender<RefreshRequest>,
    task: JoinHandle<Option<Detached>>,
}

impl Entry {
    fn is_running(&self) -> bool {
        // A runner ends on its own when a client aborts its change.
        self.running.as_ref().is_some_and(|r| !r.task.is_finished())
    }
}

struct Actor {
    plan_rx: watch::Receiver<Arc<Plan>>,
    shared: Arc<Shared>,
    entries: BTreeMap<String, Entry>,
    next_generation: u64,
    build: CheckerFactory,
    /// What a predecessor handed over, until the first plan is applied.
    carried: BTreeMap<String, CarriedCheck>,
}

impl Actor {
    async fn run(mut self, mut requests: mpsc::UnboundedReceiver<Request>) {
        let mut plan_open = true;
        loop {
            tokio::select! {
                changed = self.plan_rx.changed(), if plan_open => match changed {
                    Ok(()) => self.sync_plan(),
                    Err(_) => plan_open = false,
                },
                request = requests.recv() => match request {
                    Some(Request::TakeOver { reply }) => {
                        self.sync_plan();
                        let _ = reply.send(self.take_over().await);
                    }
                    Some(request) => {
                        self.sync_plan();
                        self.handle(request);
                    }
                    None => break,
                },
            }
        }
        for entry in self.entries.values() {
            if let Some(running) = &entry.running {
                running.cancel.cancel();
            }
        }
    }

    fn handle(&mut self, request: Request) {
        match request {
            Request::Act {
                action,
                names,
                reply,
            } => {
                let _ = reply.send(match action {
                    CheckAction::Start => self.start(&names),
                    CheckAction::Stop => self.stop(&names),
                });
            }
            Request::Refresh { name, reply } => self.refresh(name, reply),
            Request::Replan { reply } => {
                let names: Vec<String> = self
                    .entries
                    .iter()
                    .filter(|(_, e)| e.config.is_enabled() && !e.is_running())
                    .map(|(n, _)| n.clone())
                    .collect();
                for name in &names {
                    self.start_runner(name);
                }
                let _ = reply.send(names);
            }
            Request::Sync { reply } => {
                let _ = reply.send(());
            }
            Request::TakeOver { .. } => unreachable!("handled by run"),
            Request::Resume { checks } => {
                for carried in checks {
                    if self
                        .entries
                        .get(&carried.name)
                        .is_some_and(|e| !e.is_running())
                    {
                        self.start_runner_from(&carried.name, Some(&carried));
                    }
                }
            }
        }
    }

    /// Detaches every running check's runner (see [`CheckManager::take_over`]).
    async fn take_over(&mut self) -> Vec<CarriedCheck> {
        let mut detached = BTreeMap::new();
        let mut running_configs = BTreeMap::new();
        for (name, entry) in &mut self.entries {
            let Some(running) = entry.running.take() else {
                continue;
            };
            running.detach.cancel();
            if let Ok(Some(state)) = running.task.await {
                detached.insert(name.clone(), state);
                if running.config != entry.config {
                    running_configs.insert(name.clone(), running.config.to_layer_yaml());
                }
            }
        }
        let now = tokio::time::Instant::now();
        let snapshot = self.shared.publisher.borrow();
        snapshot
            .checks
            .values()
            .map(|view| {
                let mut carried = CarriedCheck::new(view, detached.get(&view.name), now);
                carried.running_config = running_configs.remove(&view.name);
                carried
            })
            .collect()
    }

    fn current_plan(&self) -> Arc<Plan> {
        self.plan_rx.borrow().clone()
    }

    /// Applies the current plan if it is not the one applied last.
    fn sync_plan(&mut self) {
        let plan = self.plan_rx.borrow_and_update().clone();
        let applied = self.shared.publisher.borrow().plan.clone();
        if applied.is_some_and(|p| Arc::ptr_eq(&p, &plan)) {
            return;
        }
        let mut to_start = Vec::new();
        let names: Vec<String> = self.entries.keys().cloned().collect();
        for name in names {
            let Some(config) = plan.checks.get(&name) else {
                self.stop_runner(&name);
                self.entries.remove(&name);
                self.shared.publisher.send_modify(|s| {
                    s.checks.remove(&name);
                });
                continue;
            };
            let merged = checker::merge_service_context(&plan, config);
            let entry = self.entries.get_mut(&name).expect("listed");
            if let Some(running) = entry.running.as_ref().filter(|_| entry.is_running()) {
                let running_unchanged = merged == *running.config;
                // Pebble: disabling a running check does not stop it; a later start runs
                // the plan's configuration.
                let disabled = !merged.is_enabled() && running.config.is_enabled();
                entry.config = Arc::new(merged);
                if running_unchanged || disabled {
                    continue;
                }
                // Pebble drops a modified check's data: its counters start again.
                self.stop_runner(&name);
                self.shared.publisher.send_modify(|s| {
                    if let Some(view) = s.checks.get_mut(&name) {
                        view.success_count = 0;
                        view.failure_count = 0;
                        view.action_count = 0;
                    }
                });
                to_start.push(name);
            } else if merged.is_enabled() {
                entry.config = Arc::new(merged);
                to_start.push(name);
            } else {
                // Pebble lists a disabled check that is not running afresh on every plan
                // change, changed or not: the streak and changes of its last run go.
                entry.config = Arc::new(merged);
                self.publish_fresh_inactive(&name);
            }
        }
        for (name, config) in &plan.checks {
            if self.entries.contains_key(name) {
                continue;
            }
            let merged = checker::merge_service_context(&plan, config);
            let enabled = merged.is_enabled();
            self.entries.insert(
                name.clone(),
                Entry {
                    config: Arc::new(merged),
                    running: None,
                },
            );
            if let Some(carried) = self.carried.remove(name) {
                // As the predecessor left it: running on, or stopped with its record.
                if carried.running {
                    self.start_runner_from(name, Some(&carried));
                } else {
                    let generation = self.generation();
                    let level = self.entries[name].config.level;
                    let at = carried.taken_at(tokio::time::Instant::now());
                    let view = carried.view(level, generation, at);
                    self.shared.publisher.send_modify(|s| {
                        s.checks.insert(name.clone(), view);
                    });
                }
            } else if enabled {
                to_start.push(name.clone());
            } else {
                self.publish_fresh_inactive(name);
            }
        }
        // A check handed over that the plan no longer has: its change ends.
        for (_, carried) in std::mem::take(&mut self.carried) {
            if let Some(task) = carried.task_id.filter(|_| carried.running) {
                self.shared.store.end_stopped_task(task);
            }
        }
        tracing::debug!(
            "Configuring check manager ({} checks, starting {})",
            plan.checks.len(),
            to_start.len()
        );
        for name in &to_start {
            self.start_runner(name);
        }
        self.shared.publisher.send_modify(|s| s.plan = Some(plan));
    }

    /// Names of `names` that are not checks of the current plan, sorted, as an error.
    fn missing(&self, names: &[String]) -> Result<(), CheckManagerError> {
        let plan = self.current_plan();
        let mut missing: Vec<String> = names
            .iter()
            .filter(|n| !plan.checks.contains_key(*n))
            .cloned()
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        missing.sort();
        missing.dedup();
        Err(CheckManagerError::NotFound(missing))
    }

    fn start(&mut self, names: &[String]) -> Result<Vec<String>, CheckManagerError> {
        self.missing(names)?;
        let mut started = Vec::new();
        for name in names {
            if self.entries.get(name).is_some_and(|e| !e.is_running()) {
                self.start_runner(name);
                started.push(name.clone());
            }
        }
        started.sort();
        started.dedup();
        Ok(started)
    }

    fn stop(&mut self, names: &[String]) -> Result<Vec<String>, CheckManagerError> {
        self.missing(names)?;
        let mut stopped = Vec::new();
        for name in names {
            if self.stop_runner(name) {
                tracing::info!("Stopping check {name}");
                stopped.push(name.clone());
            }
        }
        stopped.sort();
        stopped.dedup();
        Ok(stopped)
    }

    fn refresh(
        &mut self,
        name: String,
        reply: oneshot::Sender<Result<RefreshReply, CheckManagerError>>,
    ) {
        let Some(entry) = self.entries.get(&name) else {
            let _ = reply.send(Err(CheckManagerError::NoSuchCheck(name)));
            return;
        };
        let shared = self.shared.clone();
        let current_view = move || shared.publisher.borrow().checks.get(&name).cloned();
        if let Some(running) = entry.running.as_ref().filter(|_| entry.is_running()) {
            let (inner_tx, inner_rx) = oneshot::channel();
            if running
                .refresh
                .send(RefreshRequest { reply: inner_tx })
                .is_ok()
            {
                // Wait for the runner off the actor, so a slow probe blocks nobody.
                tokio::spawn(async move {
                    let result = match inner_rx.await {
                        Ok(done) => Ok(done),
                        // Stopped meanwhile: report the check as it now is.
                        Err(_) => current_view()
                            .map(|view| (view, None))
                            .ok_or(CheckManagerError::Gone),
                    };
                    let _ = reply.send(result);
                });
                return;
            }
        }
        // Not running: probe once and report, without touching the check's record.
        let probe = (self.build)(&entry.config);
        let timeout = entry.config.timeout();
        tokio::spawn(async move {
            let result = checker::probe(&*probe, timeout).await;
            let reply_value = current_view()
                .map(|view| (view, result.err()))
                .ok_or(CheckManagerError::Gone);
            let _ = reply.send(reply_value);
        });
    }

    fn generation(&mut self) -> u64 {
        self.next_generation += 1;
        self.next_generation
    }

    /// Starts a fresh run of `name`: a new perform-check change, counters reset (lifetime
    /// metrics kept).
    fn start_runner(&mut self, name: &str) {
        self.start_runner_from(name, None);
    }

    /// Starts a run of `name`: the one `carried` (handed over by a re-execution, or taken
    /// back after one that did not happen) as it stood, with its change and task, when its
    /// task is still in progress; otherwise a fresh one.
    fn start_runner_from(&mut self, name: &str, carried: Option<&CarriedCheck>) {
        let generation = self.generation();
        let Some(entry) = self.entries.get_mut(name) else {
            return;
        };
        let mut config = entry.config.clone();
        let now = tokio::time::Instant::now();
        let store = &self.shared.store;
        let carried = carried.and_then(|c| {
            let at = c.taken_at(now);
            let detached = c.detached(at)?;
            (store.task_status(detached.task_id) == Some(TaskStatus::Doing)).then(|| {
                // It runs on as it ran, which the plan may have moved on from.
                let running = c
                    .running_config(&self.current_plan())
                    .map_or(config.clone(), Arc::new);
                (c.view(running.level, generation, at), detached, running)
            })
        });
        let (run, change_id, task_id, prev_change_id, first_due) = match carried {
            Some((view, detached, running)) => {
                config = running;
                tracing::debug!("Check \"{name}\" carried over");
                self.shared.publisher.send_modify(|s| {
                    s.checks.insert(name.to_owned(), view);
                });
                (
                    detached.run,
                    detached.change_id,
                    detached.task_id,
                    detached.prev_change_id,
                    detached.next_due,
                )
            }
            None => {
                let (change_id, task_id) = new_check_change(store, PERFORM_CHECK, &config);
                let run = CheckRun::new(config.threshold());
                self.publish_fresh(name, &config, &run, change_id, generation);
                (run, change_id, task_id, None, now + config.period())
            }
        };
        let runner = Runner {
            name: name.to_owned(),
            checker: (self.build)(&config),
            config: config.clone(),
            generation,
            run,
            change_id,
            prev_change_id,
            task_id,
            first_due,
            shared: self.shared.clone(),
        };
        let cancel = CancellationToken::new();
        let detach = CancellationToken::new();
        let (refresh, refreshes) = mpsc::unbounded_channel();
        let task = tokio::spawn(runner.run(cancel.clone(), detach.clone(), refreshes));
        let entry = self.entries.get_mut(name).expect("looked up above");
        entry.running = Some(Running {
            config,
            cancel,
            detach,
            refresh,
            task,
        });
    }

    /// Lists `name` as a fresh run of `config` in `change_id`.
    fn publish_fresh(
        &self,
        name: &str,
        config: &Check,
        run: &CheckRun,
        change_id: u64,
        generation: u64,
    ) {
        self.shared.publisher.send_modify(|s| {
            let (success_count, failure_count, action_count) =
                s.checks.get(name).map_or((0, 0, 0), |v| {
                    (v.success_count, v.failure_count, v.action_count)
                });
            s.checks.insert(
                name.to_owned(),
                CheckView {
                    name: name.to_owned(),
                    level: config.level,
                    startup_enabled: config.is_enabled(),
                    status: CheckStatus::Up,
                    successes: 0,
                    failures: 0,
                    threshold: run.threshold,
                    change_id: Some(change_id),
                    prev_change_id: None,
                    success_count,
                    failure_count,
                    action_count,
                    last_error: None,
                    down_since: None,
                    last_success: None,
                    generation,
                },
            );
        });
    }

    /// Stops `name` if it runs; its counters stay on record, and it is listed with the
    /// plan's configuration (which a check disabled while running did not run), as in Pebble.
    /// Returns whether it was running.
    fn stop_runner(&mut self, name: &str) -> bool {
        let generation = self.generation();
        let Some(entry) = self.entries.get_mut(name) else {
            return false;
        };
        let was_running = entry.is_running();
        if let Some(running) = entry.running.take() {
            running.cancel.cancel();
        }
        if was_running {
            let config = entry.config.clone();
            self.shared.publisher.send_modify(|s| {
                if let Some(view) = s.checks.get_mut(name) {
                    view.level = config.level;
                    view.startup_enabled = config.is_enabled();
                    view.threshold = config.threshold();
                    view.status = CheckStatus::Inactive;
                    view.change_id = None;
                    view.generation = generation;
                }
            });
        }
        was_running
    }

    /// Lists `name` as inactive with fresh counters (a disabled check, new or changed).
    fn publish_fresh_inactive(&mut self, name: &str) {
        let generation = self.generation();
        let config = self.entries[name].config.clone();
        self.shared.publisher.send_modify(|s| {
            let (success_count, failure_count, action_count) =
                s.checks.get(name).map_or((0, 0, 0), |v| {
                    (v.success_count, v.failure_count, v.action_count)
                });
            s.checks.insert(
                name.to_owned(),
                CheckView {
                    name: name.to_owned(),
                    level: config.level,
                    startup_enabled: config.is_enabled(),
                    status: CheckStatus::Inactive,
                    successes: 0,
                    failures: 0,
                    threshold: config.threshold(),
                    change_id: None,
                    prev_change_id: None,
                    success_count,
                    failure_count,
                    action_count,
                    last_error: None,
                    down_since: None,
                    last_success: None,
                    generation,
                },
            );
        });
    }
}
