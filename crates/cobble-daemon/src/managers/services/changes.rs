//! Service actions as changes: `POST /v1/services` and the daemon's own autostart and shutdown.
//!
//! An action is resolved against the plan into lanes of start and stop tasks (only `requires`
//! keeps services in one lane; lanes run concurrently), recorded as a change, and carried out
//! by one runner per lane that asks the [`ServiceManager`] to start or stop one service at a
//! time. A failed task holds the rest of its lane; other lanes go on. Start tasks of a restart
//! or replan begin once every stop task has finished.
//!
//! A re-execution hands the changes in progress to the new program ([`CarriedChange`]: each
//! change's lanes of tasks), whose tasks the state file keeps as they stood: the new program
//! takes each up where it stood ([`ServiceChanges::resume`]): a task in progress waits for the
//! start or stop its service was in the middle of (handed over with the service) and is
//! recorded as the old program would have recorded it; the tasks not begun run as any do.

use std::collections::BTreeSet;
use std::sync::Arc;

use cobble_plan::Plan;
use futures_util::FutureExt;
use futures_util::future::{Shared, join_all};
use tokio::sync::{oneshot, watch};

use super::machine::{StartOutcome, StopOutcome};
use super::{LAST_LOG_LINES, ServiceManager, StartReply};
use crate::checks::CheckManager;
use crate::state::{NotRecorded, Recorded, StateStore, TaskStatus};

/// The change of services a client asks for with `POST /v1/services` (its `action`), or the
/// daemon's own autostart; each is also the kind of the change that carries it out. Parsed
/// from its wire name once at the API's edge. (What a service does when it exits is the
/// plan's `cobble_plan::ServiceAction`.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ServiceChange {
    /// Start the named services and what they require.
    Start,
    /// Stop the named services and what requires them.
    Stop,
    /// Stop only the named services, then start them and what they require.
    Restart,
    /// Start the `startup: enabled` services.
    Autostart,
    /// Restart services whose configuration changed and start the enabled ones.
    Replan,
}

impl ServiceChange {
    /// The action of a wire name; `None` for a name Pebble does not know.
    pub(crate) fn from_name(name: &str) -> Option<ServiceChange> {
        match name {
            "start" => Some(ServiceChange::Start),
            "stop" => Some(ServiceChange::Stop),
            "restart" => Some(ServiceChange::Restart),
            "autostart" => Some(ServiceChange::Autostart),
            "replan" => Some(ServiceChange::Replan),
            _ => None,
        }
    }

    /// The wire name, which is also the kind of the action's change.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ServiceChange::Start => "start",
            ServiceChange::Stop => "stop",
            ServiceChange::Restart => "restart",
            ServiceChange::Autostart => "autostart",
            ServiceChange::Replan => "replan",
        }
    }

    /// The name as change summaries open with it (`Start service "x"`), title-cased the way
    /// Go's `strings.Title` does.
    fn title(self) -> &'static str {
        match self {
            ServiceChange::Start => "Start",
            ServiceChange::Stop => "Stop",
            ServiceChange::Restart => "Restart",
            ServiceChange::Autostart => "Autostart",
            ServiceChange::Replan => "Replan",
        }
    }
}

impl std::fmt::Display for ServiceChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a service action was refused before any change was made, worded as Pebble words it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(crate) enum ActionError {
    /// An action that needs names got none. Holds the action as the client spelled it:
    /// Pebble checks for names before it checks that it knows the action.
    #[error("must specify services for {0} action")]
    NoServices(String),
    /// `replan` or `autostart` with names.
    #[error("{0} accepts no service names")]
    NamesNotAccepted(ServiceChange),
    /// `autostart` with no `startup: enabled` service.
    #[error("no default services")]
    NoDefaultServices,
    /// The services could not be ordered (an unknown name, a cycle).
    #[error("cannot {action} services: {error}")]
    Order {
        action: ServiceChange,
        error: cobble_plan::PlanError,
    },
    /// The change could not be written to the state file, so nothing was done.
    #[error("cannot record change: {0}")]
    NotRecorded(NotRecorded),
}

/// Whether a task starts or stops its service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Start,
    Stop,
}

/// One task of a lane.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct LaneTask {
    task_id: u64,
    service: String,
    /// Runs a completed one-shot again: a service a client's start or restart names (not
    /// one started because a named service requires it, nor autostart's or replan's).
    again: bool,
}

/// A change being carried out, handed to a re-executed daemon: its tasks by lane.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct CarriedChange {
    pub id: u64,
    pub stop: Vec<Vec<LaneTask>>,
    pub start: Vec<Vec<LaneTask>>,
}

impl CarriedChange {
    /// Its tasks' IDs.
    pub(crate) fn task_ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.stop
            .iter()
            .chain(&self.start)
            .flatten()
            .map(|task| task.task_id)
    }
}

/// The answers of the starts and stops a handed-over service was in the middle of, by
/// service: each may answer the tasks of more than one change.
#[derive(Default)]
struct Resumed {
    start: std::collections::BTreeMap<String, Shared<oneshot::Receiver<StartReply>>>,
    stop: std::collections::BTreeMap<String, Shared<oneshot::Receiver<StopOutcome>>>,
}

/// An action resolved against the plan, not yet recorded.
struct Resolved {
    action: ServiceChange,
    /// The services the change names; the first names it in its summary.
    names: Vec<String>,
    stop_lanes: Vec<Vec<String>>,
    start_lanes: Vec<Vec<String>>,
}

/// A change recorded for an action, with its tasks by lane, not yet carried out.
struct Pending {
    change_id: u64,
    stop: Vec<Vec<LaneTask>>,
    start: Vec<Vec<LaneTask>>,
}

/// Records the changes clients (and autostart) ask for and runs them.
#[derive(Clone)]
pub(crate) struct ServiceChanges {
    plan: watch::Receiver<Arc<Plan>>,
    state: StateStore,
    manager: ServiceManager,
    /// A replan also starts the enabled checks that are not running, as Pebble's does.
    checks: CheckManager,
    /// The changes being carried out, by ID: what a re-execution hands over.
    running: Arc<std::sync::Mutex<std::collections::BTreeMap<u64, CarriedChange>>>,
}

impl ServiceChanges {
    pub(crate) fn new(
        plan: watch::Receiver<Arc<Plan>>,
        state: StateStore,
        manager: ServiceManager,
        checks: CheckManager,
    ) -> ServiceChanges {
        ServiceChanges {
            plan,
            state,
            manager,
            checks,
            running: Arc::default(),
        }
    }

    /// The changes being carried out, for a re-execution to hand over.
    pub(crate) fn carried(&self) -> Vec<CarriedChange> {
        self.running
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .values()
            .cloned()
            .collect()
    }

    /// Takes up the changes a predecessor handed over (see the module's documentation):
    /// `in_flight` holds what each handed-over service was in the middle of.
    pub(crate) fn resume(
        &self,
        changes: Vec<CarriedChange>,
        in_flight: Vec<(String, super::InFlight)>,
    ) {
        let mut resumed = Resumed::default();
        for (name, waiters) in in_flight {
            if let Some(start) = waiters.start {
                resumed.start.insert(name.clone(), start.shared());
            }
            if let Some(stop) = waiters.stop {
                resumed.stop.insert(name, stop.shared());
            }
        }
        let resumed = Arc::new(resumed);
        for change in changes {
            let this = self.clone();
            let resumed = resumed.clone();
            tokio::spawn(async move {
                this.run_resumed(change.id, change.stop, change.start, Some(&resumed))
                    .await;
            });
        }
    }

    /// The current plan.
    pub(crate) fn plan(&self) -> Arc<Plan> {
        self.plan.borrow().clone()
    }

    /// Carries out `action` on `names` for a client: records the change, and once the
    /// state file holds it, starts carrying it out in the background and returns its ID.
    /// Recorded first, done after: when the state file cannot be written the change is
    /// taken back before any of it was done, and the client's retry is safe.
    pub(crate) async fn act(
        &self,
        action: ServiceChange,
        names: Vec<String>,
    ) -> Result<Recorded<u64>, ActionError> {
        let resolved = self.resolve(action, names).await?;
        if action == ServiceChange::Replan {
            // Pebble's replan also starts the enabled checks that are not running, and makes
            // their changes before its own, which therefore has the next ID after theirs. A
            // replan whose change then cannot be recorded leaves them running, as a refused
            // retry or a `POST /v1/checks` start on a failing disk would.
            self.checks.replan().await;
        }
        let pending = self.record(resolved);
        let change_id = pending.change_id;
        match self.state.recorded(change_id).await {
            Ok(recorded) => {
                self.spawn_run(pending);
                Ok(recorded)
            }
            Err(e) => {
                self.state.discard_change(change_id);
                Err(ActionError::NotRecorded(e))
            }
        }
    }

    /// Carries out `action` on `names` for the daemon itself (its autostart): nobody is told
    /// the change, so it runs at once and reaches the state file when the disk takes it.
    pub(crate) async fn act_now(
        &self,
        action: ServiceChange,
        names: Vec<String>,
    ) -> Result<u64, ActionError> {
        let resolved = self.resolve(action, names).await?;
        let pending = self.record(resolved);
        let change_id = pending.change_id;
        self.spawn_run(pending);
        Ok(change_id)
    }

    /// Starts `name` and what it requires as `start` would, for its schedule: recorded with a
    /// summary that says the schedule started it, carried out at once (nobody waits for the
    /// state file); the change's ID.
    pub(crate) async fn start_scheduled(
        &self,
        name: &str,
        schedule: &str,
    ) -> Result<u64, ActionError> {
        let resolved = self
            .resolve(ServiceChange::Start, vec![name.to_owned()])
            .await?;
        let count: usize = resolved.start_lanes.iter().map(Vec::len).sum();
        let mut summary = format!("Start service {name:?} on its schedule {schedule:?}");
        if count > 1 {
            summary.push_str(&format!(" and {} more", count - 1));
        }
        let pending = self.record_as(resolved, Some(summary));
        let change_id = pending.change_id;
        self.spawn_run(pending);
        Ok(change_id)
    }

    /// Resolves `action` against the plan into the services it names and its lanes.
    async fn resolve(
        &self,
        action: ServiceChange,
        names: Vec<String>,
    ) -> Result<Resolved, ActionError> {
        let plan = self.plan.borrow().clone();
        let mut names = names;
        let cannot = |error| ActionError::Order { action, error };
        match action {
            ServiceChange::Replan | ServiceChange::Autostart if !names.is_empty() => {
                return Err(ActionError::NamesNotAccepted(action));
            }
            ServiceChange::Replan => {}
            ServiceChange::Autostart => {
                // Pebble's default services: the enabled ones and those they require, in
                // start order. The first names the change.
                let enabled = plan.default_services();
                if enabled.is_empty() {
                    return Err(ActionError::NoDefaultServices);
                }
                let lanes = plan.lanes(&plan.start_order(&enabled).map_err(cannot)?);
                names = lanes.into_iter().flatten().collect();
            }
            ServiceChange::Start | ServiceChange::Stop | ServiceChange::Restart => {
                if names.is_empty() {
                    return Err(ActionError::NoServices(action.as_str().to_owned()));
                }
            }
        }
        let (stop_lanes, start_lanes) = match action {
            ServiceChange::Start | ServiceChange::Autostart => (
                Vec::new(),
                plan.lanes(&plan.start_order(&names).map_err(cannot)?),
            ),
            ServiceChange::Stop => (
                plan.lanes(&plan.stop_order(&names).map_err(cannot)?),
                Vec::new(),
            ),
            ServiceChange::Restart => {
                let stop = plan.lanes(&plan.stop_order(&names).map_err(cannot)?);
                let requested: BTreeSet<&String> = names.iter().collect();
                let stop = stop
                    .into_iter()
                    .map(|lane| {
                        lane.into_iter()
                            .filter(|n| requested.contains(n))
                            .collect::<Vec<_>>()
                    })
                    .filter(|lane| !lane.is_empty())
                    .collect();
                (stop, plan.lanes(&plan.start_order(&names).map_err(cannot)?))
            }
            ServiceChange::Replan => {
                let outdated = self.manager.outdated().await;
                let stop = plan.lanes(&plan.stop_order(&outdated).map_err(cannot)?);
                let mut start: BTreeSet<String> = outdated.into_iter().collect();
                start.extend(plan.default_services());
                let start: Vec<String> = start.into_iter().collect();
                let start = plan.lanes(&plan.start_order(&start).map_err(cannot)?);
                let mut replanned: BTreeSet<String> = BTreeSet::new();
                replanned.extend(stop.iter().flatten().cloned());
                replanned.extend(start.iter().flatten().cloned());
                names = replanned.into_iter().collect();
                (stop, start)
            }
        };
        Ok(Resolved {
            action,
            names,
            stop_lanes,
            start_lanes,
        })
    }

    /// Stops every service that is starting, running or backing off, in stop order, as one
    /// change; returns when they have all stopped (or failed to). Logged as Pebble logs it,
    /// and only when there is something to stop.
    pub(crate) async fn stop_all(&self) {
        let active = self.manager.active().await;
        if active.is_empty() {
            return;
        }
        tracing::info!("Stopping all running services.");
        let plan = self.plan.borrow().clone();
        let order = plan.stop_order(&active).unwrap_or(active.clone());
        let lanes: Vec<Vec<String>> = plan
            .lanes(&order)
            .into_iter()
            .map(|lane| {
                lane.into_iter()
                    .filter(|n| active.contains(n))
                    .collect::<Vec<_>>()
            })
            .filter(|lane| !lane.is_empty())
            .collect();
        let change_id = self.state.new_change(
            ServiceChange::Stop.as_str(),
            "Stop all running services",
            active,
        );
        let stop = self.add_tasks(change_id, Op::Stop, lanes, &BTreeSet::new());
        self.run_resumed(change_id, stop, Vec::new(), None).await;
    }

    /// Records the change and tasks of a resolved action.
    fn record(&self, resolved: Resolved) -> Pending {
        self.record_as(resolved, None)
    }

    /// Records the change and tasks of a resolved action, with `summary` in place of the
    /// action's own when given.
    fn record_as(&self, resolved: Resolved, summary: Option<String>) -> Pending {
        let Resolved {
            action,
            names,
            stop_lanes,
            start_lanes,
        } = resolved;
        let title = action.title();
        if stop_lanes.is_empty() && start_lanes.is_empty() {
            let change_id = self
                .state
                .new_done_change(action.as_str(), &format!("{title} - no services"));
            return Pending {
                change_id,
                stop: Vec::new(),
                start: Vec::new(),
            };
        }
        // The count is taken from the resolved lanes (dependencies included), the name from
        // the request; a replan counts the services it stops or starts.
        let count = if action == ServiceChange::Replan {
            names.len()
        } else if start_lanes.is_empty() {
            stop_lanes.iter().map(Vec::len).sum()
        } else {
            start_lanes.iter().map(Vec::len).sum()
        };
        let first = names.first().cloned().unwrap_or_default();
        let summary = summary.unwrap_or_else(|| {
            if count <= 1 {
                format!("{title} service \"{first}\"")
            } else {
                format!("{title} service \"{first}\" and {} more", count - 1)
            }
        });
        let again: BTreeSet<String> = match action {
            ServiceChange::Start | ServiceChange::Restart => names.iter().cloned().collect(),
            _ => BTreeSet::new(),
        };
        let change_id = self.state.new_change(action.as_str(), &summary, names);
        let stop = self.add_tasks(change_id, Op::Stop, stop_lanes, &BTreeSet::new());
        let start = self.add_tasks(change_id, Op::Start, start_lanes, &again);
        Pending {
            change_id,
            stop,
            start,
        }
    }

    /// Carries out a recorded change in the background.
    fn spawn_run(&self, pending: Pending) {
        if pending.stop.is_empty() && pending.start.is_empty() {
            return;
        }
        let this = self.clone();
        tokio::spawn(async move {
            this.run_resumed(pending.change_id, pending.stop, pending.start, None)
                .await
        });
    }

    fn add_tasks(
        &self,
        change_id: u64,
        op: Op,
        lanes: Vec<Vec<String>>,
        again: &BTreeSet<String>,
    ) -> Vec<Vec<LaneTask>> {
        let (kind, verb) = match op {
            Op::Start => ("start", "Start"),
            Op::Stop => ("stop", "Stop"),
        };
        lanes
            .into_iter()
            .map(|lane| {
                lane.into_iter()
                    .map(|service| LaneTask {
                        task_id: self.state.add_task(
                            change_id,
                            kind,
                            &format!("{verb} service \"{service}\""),
                            Some(&service),
                        ),
                        again: again.contains(&service),
                        service,
                    })
                    .collect()
            })
            .collect()
    }

    /// Carries out a change's lanes: from the start, or (`resumed`: handed over by a
    /// predecessor) from where each task stands.
    async fn run_resumed(
        &self,
        change_id: u64,
        stop: Vec<Vec<LaneTask>>,
        start: Vec<Vec<LaneTask>>,
        resumed: Option<&Resumed>,
    ) {
        self.running
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(
                change_id,
                CarriedChange {
                    id: change_id,
                    stop: stop.clone(),
                    start: start.clone(),
                },
            );
        // Aborted before it was handed over: its starts in progress are aborted here too.
        let aborted = resumed.is_some()
            && stop
                .iter()
                .chain(&start)
                .flatten()
                .any(|task| self.state.task_status(task.task_id) == Some(TaskStatus::Abort));
        if aborted {
            self.state.abort_token(change_id).cancel();
        }
        self.run(change_id, stop, start, resumed).await;
        self.running
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&change_id);
    }

    async fn run(
        &self,
        change_id: u64,
        stop: Vec<Vec<LaneTask>>,
        start: Vec<Vec<LaneTask>>,
        resumed: Option<&Resumed>,
    ) {
        // The one-shots this change starts count as under way from now until their task
        // has asked for them (or is held): what is ordered after them in another lane must
        // not take them for idle because its own lane came first.
        let plan = self.plan();
        let left = |task: &LaneTask| {
            resumed.is_none()
                || matches!(
                    self.state.task_status(task.task_id),
                    Some(TaskStatus::Do | TaskStatus::Doing | TaskStatus::Abort)
                )
        };
        let expected = Expected::new(
            self.manager.clone(),
            start
                .iter()
                .flatten()
                .filter(|task| left(task))
                .filter(|task| {
                    plan.services
                        .get(&task.service)
                        .is_some_and(|s| s.type_.is_oneshot())
                })
                .map(|task| task.service.clone())
                .collect(),
        );
        let stopped = join_all(
            stop.into_iter()
                .map(|lane| self.run_lane(change_id, Op::Stop, lane, &expected, resumed)),
        )
        .await;
        if stopped.iter().all(|ok| *ok) {
            join_all(
                start
                    .into_iter()
                    .map(|lane| self.run_lane(change_id, Op::Start, lane, &expected, resumed)),
            )
            .await;
        } else {
            for task in start.iter().flatten() {
                if self.state.task_status(task.task_id) == Some(TaskStatus::Do) {
                    self.state.set_task_status(task.task_id, TaskStatus::Hold);
                }
            }
        }
    }

    /// Runs a lane's tasks in order; returns whether all of them succeeded. A lane handed
    /// over (`resumed`) goes on past its tasks done, and takes up the one in progress.
    async fn run_lane(
        &self,
        change_id: u64,
        op: Op,
        lane: Vec<LaneTask>,
        expected: &Expected,
        resumed: Option<&Resumed>,
    ) -> bool {
        for (i, task) in lane.iter().enumerate() {
            let (in_progress, answer) = match (self.state.task_status(task.task_id), resumed) {
                (Some(TaskStatus::Do), _) => (false, None),
                (Some(TaskStatus::Done), Some(_)) => {
                    expected.release(&task.service);
                    continue;
                }
                (Some(TaskStatus::Doing | TaskStatus::Abort), Some(resumed)) => {
                    (true, Some(resumed))
                }
                // An abort may have held the task already.
                _ => {
                    self.hold(&lane[i..], expected);
                    return false;
                }
            };
            if !in_progress {
                self.state.set_task_status(task.task_id, TaskStatus::Doing);
            }
            let ok = match op {
                Op::Start => {
                    let answer = answer.and_then(|r| r.start.get(&task.service).cloned());
                    self.start_task(change_id, task, expected, answer).await
                }
                Op::Stop => {
                    let answer = answer.and_then(|r| r.stop.get(&task.service).cloned());
                    self.stop_task(task, answer).await
                }
            };
            if !ok {
                self.hold(&lane[i + 1..], expected);
                return false;
            }
        }
        true
    }

    fn hold(&self, tasks: &[LaneTask], expected: &Expected) {
        for task in tasks {
            if self.state.task_status(task.task_id) == Some(TaskStatus::Do) {
                self.state.set_task_status(task.task_id, TaskStatus::Hold);
            }
            expected.release(&task.service);
        }
    }

    /// Starts the task's service, or, handed over in progress (`answer`), waits for the start
    /// it was in the middle of; records the outcome.
    async fn start_task(
        &self,
        change_id: u64,
        task: &LaneTask,
        expected: &Expected,
        answer: Option<Shared<oneshot::Receiver<StartReply>>>,
    ) -> bool {
        let abort = self.state.abort_token(change_id);
        let start = async {
            if let Some(answer) = answer
                && let Ok(reply) = answer.await
            {
                return reply;
            }
            self.manager.start(&task.service, task.again).await
        };
        tokio::pin!(start);
        let reply: StartReply = tokio::select! {
            reply = &mut start => reply,
            () = abort.cancelled() => {
                self.manager.abort_start(&task.service);
                start.await
            }
        };
        // Answered: a one-shot stands where its own machine says from now on.
        expected.release(&task.service);
        let id = task.task_id;
        match reply.outcome {
            StartOutcome::Started => {
                self.state.set_task_status(id, TaskStatus::Done);
                true
            }
            StartOutcome::Waiting { missing } => {
                // Not an error: the service starts by itself once the paths exist.
                self.state.task_info(
                    id,
                    &format!(
                        "Service \"{}\" is waiting for {}.",
                        task.service,
                        missing.join(", ")
                    ),
                );
                self.state.set_task_status(id, TaskStatus::Done);
                true
            }
            StartOutcome::AlreadyStarted => {
                self.state.task_info(
                    id,
                    &format!("Service \"{}\" already started.", task.service),
                );
                self.state.set_task_status(id, TaskStatus::Done);
                true
            }
            StartOutcome::AlreadyCompleted => {
                self.state.task_info(
                    id,
                    &format!("Service \"{}\" already completed.", task.service),
                );
                self.state.set_task_status(id, TaskStatus::Done);
                true
            }
            StartOutcome::Failed { error, with_output } => {
                if with_output {
                    self.state.task_info(id, &most_recent_output(&reply.output));
                }
                self.state.fail_task(id, &error);
                false
            }
        }
    }

    /// Stops the task's service, or, handed over in progress (`answer`), waits for the stop
    /// it was in the middle of; records the outcome.
    async fn stop_task(
        &self,
        task: &LaneTask,
        answer: Option<Shared<oneshot::Receiver<StopOutcome>>>,
    ) -> bool {
        let id = task.task_id;
        let name = &task.service;
        let stopped = match answer {
            Some(answer) => answer.await.ok(),
            None => None,
        };
        let stopped = match stopped {
            Some(stopped) => stopped,
            None => self.manager.stop(name).await,
        };
        let note = match stopped {
            StopOutcome::Stopped => None,
            StopOutcome::NeverStarted => {
                Some(format!("Service \"{name}\" has never been started."))
            }
            StopOutcome::AlreadyStopping => Some(format!("Service \"{name}\" already stopping.")),
            StopOutcome::AlreadyStopped => Some(format!("Service \"{name}\" already stopped.")),
            StopOutcome::HadExited => Some(format!("Service \"{name}\" had already exited.")),
            StopOutcome::Failed(error) => {
                self.state
                    .fail_task(id, &format!("cannot stop service: {error}"));
                return false;
            }
        };
        if let Some(note) = note {
            self.state.task_info(id, &note);
        }
        self.state.set_task_status(id, TaskStatus::Done);
        true
    }
}

impl super::scheduler::ScheduledRuns for ServiceChanges {
    fn start(
        &self,
        name: String,
        schedule: String,
    ) -> futures_util::future::BoxFuture<'static, Result<u64, String>> {
        let this = self.clone();
        Box::pin(async move {
            this.start_scheduled(&name, &schedule)
                .await
                .map_err(|e| e.to_string())
        })
    }

    fn outcome(
        &self,
        change_id: u64,
    ) -> futures_util::future::BoxFuture<'static, super::scheduler::RunOutcome> {
        use super::scheduler::RunOutcome;
        let state = self.state.clone();
        Box::pin(async move {
            state.wait_ready(change_id).await;
            match state.change_info(change_id) {
                Some(change) if change.status == "Done" => RunOutcome::Done,
                Some(change) if !change.err.is_empty() => RunOutcome::Error(change.err),
                Some(change) => RunOutcome::Error(change.status),
                None => RunOutcome::Error("change pruned".into()),
            }
        })
    }

    fn active(&self) -> futures_util::future::BoxFuture<'static, Vec<String>> {
        let manager = self.manager.clone();
        Box::pin(async move { manager.active().await })
    }
}

/// The one-shots a change will start and has not asked for yet; each is released once,
/// when its task asks for it or is held, and the rest when the change is done with.
struct Expected {
    manager: ServiceManager,
    names: std::sync::Mutex<BTreeSet<String>>,
}

impl Expected {
    fn new(manager: ServiceManager, names: BTreeSet<String>) -> Expected {
        manager.expect(names.iter().cloned().collect(), true);
        Expected {
            manager,
            names: std::sync::Mutex::new(names),
        }
    }

    fn release(&self, name: &str) {
        let removed = self
            .names
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(name);
        if removed {
            self.manager.expect(vec![name.to_owned()], false);
        }
    }
}

impl Drop for Expected {
    fn drop(&mut self) {
        let names = std::mem::take(
            self.names
                .get_mut()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        self.manager.expect(names.into_iter().collect(), false);
    }
}

/// The task log's entry for the output of a service that exited during its start, as
/// Pebble writes it: `Most recent service output:` and the last [`LAST_LOG_LINES`] lines,
/// indented, with `(...)` first when there were more, the whole trimmed of surrounding
/// white space; just the indent when there was no output. `lines` holds up to one more line
/// than is shown.
fn most_recent_output(lines: &[String]) -> String {
    let joined = lines.join("\n");
    let mut shown: Vec<&str> = joined.trim().split('\n').collect();
    if shown.len() > LAST_LOG_LINES {
        shown[0] = "(...)";
    }
    let mut text = String::from("Most recent service output:");
    for line in shown {
        text.push_str("\n    ");
        text.push_str(line);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::{LAST_LOG_LINES, ServiceChange, most_recent_output};

    #[test]
    fn action_names_round_trip_and_title_case_as_go_does() {
        let all = [
            ServiceChange::Start,
            ServiceChange::Stop,
            ServiceChange::Restart,
            ServiceChange::Autostart,
            ServiceChange::Replan,
        ];
        for action in all {
            let name = action.as_str();
            assert_eq!(ServiceChange::from_name(name), Some(action));
            let mut title = name[..1].to_uppercase();
            title.push_str(&name[1..]);
            assert_eq!(action.title(), title);
        }
        assert_eq!(ServiceChange::from_name("Start"), None);
        assert_eq!(ServiceChange::from_name(""), None);
    }

    fn lines(text: &[&str]) -> Vec<String> {
        text.iter().map(|l| (*l).to_owned()).collect()
    }

    #[test]
    fn the_output_of_a_quick_exit_is_written_as_pebble_writes_it() {
        assert_eq!(
            most_recent_output(&lines(&["too-fast", "second line"])),
            "Most recent service output:\n    too-fast\n    second line"
        );
        // No output at all: the heading and the indent, as Pebble's task log has them.
        assert_eq!(most_recent_output(&[]), "Most recent service output:\n    ");
        assert_eq!(
            most_recent_output(&lines(&["", "  out  ", ""])),
            "Most recent service output:\n    out"
        );
        let many: Vec<String> = (0..=LAST_LOG_LINES).map(|i| format!("l{i}")).collect();
        let text = most_recent_output(&many);
        assert!(
            text.starts_with("Most recent service output:\n    (...)\n    l1\n"),
            "{text}"
        );
        assert!(
            text.ends_with(&format!("\n    l{LAST_LOG_LINES}")),
            "{text}"
        );
        // The heading, the mark, and the last lines.
        assert_eq!(text.lines().count(), LAST_LOG_LINES + 2);
    }
}
