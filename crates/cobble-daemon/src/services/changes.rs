//! Service actions as changes: `POST /v1/services` and the daemon's own autostart and shutdown.
//!
//! An action is resolved against the plan into lanes of start and stop tasks (only `requires`
//! keeps services in one lane; lanes run concurrently), recorded as a change, and carried out
//! by one runner per lane that asks the [`ServiceManager`] to start or stop one service at a
//! time. A failed task holds the rest of its lane; other lanes go on. Start tasks of a restart
//! or replan begin once every stop task has finished.

use std::collections::BTreeSet;
use std::sync::Arc;

use cobble_plan::Plan;
use futures_util::future::join_all;
use tokio::sync::watch;

use super::machine::{StartOutcome, StopOutcome};
use super::{ServiceManager, StartReply};
use crate::state::{StateStore, Status};

/// Why a service action was refused before any change was made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ActionError {
    /// A 400 with this message.
    #[error("{0}")]
    BadRequest(String),
    /// `autostart` with no `startup: enabled` service.
    #[error("no default services")]
    NoDefaultServices,
}

/// Whether a task starts or stops its service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Start,
    Stop,
}

/// One task of a lane.
#[derive(Debug, Clone)]
struct LaneTask {
    task_id: u64,
    service: String,
}

/// Creates changes for service actions and runs them.
#[derive(Clone)]
pub struct ServiceActions {
    plan: watch::Receiver<Arc<Plan>>,
    state: StateStore,
    manager: ServiceManager,
}

impl ServiceActions {
    pub fn new(
        plan: watch::Receiver<Arc<Plan>>,
        state: StateStore,
        manager: ServiceManager,
    ) -> ServiceActions {
        ServiceActions {
            plan,
            state,
            manager,
        }
    }

    /// The current plan.
    pub fn plan(&self) -> Arc<Plan> {
        self.plan.borrow().clone()
    }

    /// Carries out `action` on `names`; returns the ID of the change once it is recorded
    /// (the change itself runs in the background).
    pub async fn act(&self, action: &str, names: Vec<String>) -> Result<u64, ActionError> {
        let plan = self.plan.borrow().clone();
        let mut names = names;
        match action {
            "replan" | "autostart" if !names.is_empty() => {
                return Err(ActionError::BadRequest(format!(
                    "{action} accepts no service names"
                )));
            }
            "replan" => {}
            "autostart" => {
                names = plan.default_services();
                if names.is_empty() {
                    return Err(ActionError::NoDefaultServices);
                }
            }
            _ if names.is_empty() => {
                return Err(ActionError::BadRequest(format!(
                    "must specify services for {action} action"
                )));
            }
            _ => {}
        }
        let cannot = |e: cobble_plan::PlanError| {
            ActionError::BadRequest(format!("cannot {action} services: {e}"))
        };
        let (stop_lanes, start_lanes) = match action {
            "start" | "autostart" => (
                Vec::new(),
                plan.lanes(&plan.start_order(&names).map_err(cannot)?),
            ),
            "stop" => (
                plan.lanes(&plan.stop_order(&names).map_err(cannot)?),
                Vec::new(),
            ),
            "restart" => {
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
            "replan" => {
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
            _ => {
                return Err(ActionError::BadRequest(format!(
                    "invalid action \"{action}\""
                )));
            }
        };
        Ok(self.record_and_run(action, names, stop_lanes, start_lanes))
    }

    /// Stops every service that is starting, running or backing off, in stop order, as one
    /// change; returns when they have all stopped (or failed to).
    pub async fn stop_all(&self) {
        let active = self.manager.active().await;
        if active.is_empty() {
            return;
        }
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
        let change_id = self
            .state
            .new_change("stop", "Stop all running services", active);
        let stop = self.add_tasks(change_id, Op::Stop, lanes);
        self.run(change_id, stop, Vec::new()).await;
    }

    fn record_and_run(
        &self,
        action: &str,
        names: Vec<String>,
        stop_lanes: Vec<Vec<String>>,
        start_lanes: Vec<Vec<String>>,
    ) -> u64 {
        let title = title_case(action);
        if stop_lanes.is_empty() && start_lanes.is_empty() {
            return self
                .state
                .new_done_change(action, &format!("{title} - no services"));
        }
        // The count is taken from the resolved lanes (dependencies included), the name from
        // the request; a replan counts the services it stops or starts.
        let count = if action == "replan" {
            names.len()
        } else if start_lanes.is_empty() {
            stop_lanes.iter().map(Vec::len).sum()
        } else {
            start_lanes.iter().map(Vec::len).sum()
        };
        let first = names.first().cloned().unwrap_or_default();
        let summary = if count <= 1 {
            format!("{title} service \"{first}\"")
        } else {
            format!("{title} service \"{first}\" and {} more", count - 1)
        };
        let change_id = self.state.new_change(action, &summary, names);
        let stop = self.add_tasks(change_id, Op::Stop, stop_lanes);
        let start = self.add_tasks(change_id, Op::Start, start_lanes);
        let this = self.clone();
        tokio::spawn(async move { this.run(change_id, stop, start).await });
        change_id
    }

    fn add_tasks(&self, change_id: u64, op: Op, lanes: Vec<Vec<String>>) -> Vec<Vec<LaneTask>> {
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
                        service,
                    })
                    .collect()
            })
            .collect()
    }

    async fn run(&self, change_id: u64, stop: Vec<Vec<LaneTask>>, start: Vec<Vec<LaneTask>>) {
        let stopped = join_all(
            stop.into_iter()
                .map(|lane| self.run_lane(change_id, Op::Stop, lane)),
        )
        .await;
        if stopped.iter().all(|ok| *ok) {
            join_all(
                start
                    .into_iter()
                    .map(|lane| self.run_lane(change_id, Op::Start, lane)),
            )
            .await;
        } else {
            for task in start.iter().flatten() {
                self.state.set_task_status(task.task_id, Status::Hold);
            }
        }
    }

    /// Runs a lane's tasks in order; returns whether all of them succeeded.
    async fn run_lane(&self, change_id: u64, op: Op, lane: Vec<LaneTask>) -> bool {
        for (i, task) in lane.iter().enumerate() {
            // An abort may have held the task already.
            if self.state.task_status(task.task_id) != Some(Status::Do) {
                self.hold(&lane[i..]);
                return false;
            }
            self.state.set_task_status(task.task_id, Status::Doing);
            let ok = match op {
                Op::Start => self.start_task(change_id, task).await,
                Op::Stop => self.stop_task(task).await,
            };
            if !ok {
                self.hold(&lane[i + 1..]);
                return false;
            }
        }
        true
    }

    fn hold(&self, tasks: &[LaneTask]) {
        for task in tasks {
            if self.state.task_status(task.task_id) == Some(Status::Do) {
                self.state.set_task_status(task.task_id, Status::Hold);
            }
        }
    }

    async fn start_task(&self, change_id: u64, task: &LaneTask) -> bool {
        let abort = self.state.abort_token(change_id);
        let start = self.manager.start(&task.service);
        tokio::pin!(start);
        let reply: StartReply = tokio::select! {
            reply = &mut start => reply,
            () = abort.cancelled() => {
                self.manager.abort_start(&task.service);
                start.await
            }
        };
        let id = task.task_id;
        match reply.outcome {
            StartOutcome::Started => {
                self.state.set_task_status(id, Status::Done);
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
                self.state.set_task_status(id, Status::Done);
                true
            }
            StartOutcome::AlreadyStarted => {
                self.state.task_info(
                    id,
                    &format!("Service \"{}\" already started.", task.service),
                );
                self.state.set_task_status(id, Status::Done);
                true
            }
            StartOutcome::Failed { error, .. } => {
                if !reply.output.is_empty() {
                    let lines: Vec<String> =
                        reply.output.iter().map(|l| format!("    {l}")).collect();
                    self.state.task_info(
                        id,
                        &format!("Most recent service output:\n{}", lines.join("\n")),
                    );
                }
                self.state.task_error(id, &error);
                self.state.set_task_status(id, Status::Error);
                false
            }
        }
    }

    async fn stop_task(&self, task: &LaneTask) -> bool {
        let id = task.task_id;
        let name = &task.service;
        let note = match self.manager.stop(name).await {
            StopOutcome::Stopped => None,
            StopOutcome::NeverStarted => {
                Some(format!("Service \"{name}\" has never been started."))
            }
            StopOutcome::AlreadyStopping => Some(format!("Service \"{name}\" already stopping.")),
            StopOutcome::AlreadyStopped => Some(format!("Service \"{name}\" already stopped.")),
            StopOutcome::HadExited => Some(format!("Service \"{name}\" had already exited.")),
            StopOutcome::Failed(error) => {
                self.state
                    .task_error(id, &format!("cannot stop service: {error}"));
                self.state.set_task_status(id, Status::Error);
                return false;
            }
        };
        if let Some(note) = note {
            self.state.task_info(id, &note);
        }
        self.state.set_task_status(id, Status::Done);
        true
    }
}

/// `start` -> `Start`, as Go's `strings.Title` does for one word.
fn title_case(word: &str) -> String {
    let mut chars = word.chars();
    chars
        .next()
        .map(|c| c.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}
