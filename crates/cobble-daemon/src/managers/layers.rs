//! The plan: layers loaded at startup plus those added through the API.
//!
//! The current plan is published on a `watch` channel; the service manager (and later the
//! check and log managers) read it from there, so a layer change reaches every subscriber
//! without a replan. Adding a layer validates the combined result first: a rejected layer
//! leaves the plan exactly as it was.
//!
//! What Pebble accepts but cannot work (a service `startup` of another value, a log target
//! that can never deliver) is accepted here too; the plan notes it (see
//! [`cobble_plan::Plan::notes`]) and this manager says so in the daemon log, once when the
//! daemon starts and again whenever a layer brings a new such problem.
//!
//! The listening sockets the plan names (`sockets:`) are the plan manager's to hold (see
//! [`sockets`]): held before the daemon answers, and before a layer's adding is answered.

mod sockets;

use std::sync::Arc;

use cobble_plan::{Layer, Plan, PlanError};
use tokio::sync::watch;

use crate::process::OsProcesses;

/// Owner of the current plan.
pub(crate) struct PlanManager {
    tx: watch::Sender<Arc<Plan>>,
    /// Holds the sockets the plan names, once the daemon has its processes.
    sockets: Option<sockets::SocketHolder>,
}

impl PlanManager {
    pub(crate) fn new(plan: Plan) -> PlanManager {
        log_problems(None, &plan);
        let (tx, _) = watch::channel(Arc::new(plan));
        PlanManager { tx, sockets: None }
    }

    /// Holds the sockets the plan names from now on, in `processes`; returns once those of
    /// the current plan are bound (or their failures logged).
    pub(crate) async fn hold_sockets(&mut self, processes: Arc<OsProcesses>) {
        let holder = sockets::SocketHolder::new(self.subscribe(), processes);
        holder.sync().await;
        self.sockets = Some(holder);
    }

    /// The current plan.
    pub(crate) fn plan(&self) -> Arc<Plan> {
        self.tx.borrow().clone()
    }

    /// A receiver that always sees the current plan.
    pub(crate) fn subscribe(&self) -> watch::Receiver<Arc<Plan>> {
        self.tx.subscribe()
    }

    /// Adds a parsed layer (`POST /v1/layers`), appending it or combining it into the layer
    /// with the same label. Returns once the sockets the new plan names are held, those it
    /// no longer names closed, and those that cannot be bound logged.
    pub(crate) async fn add_layer(
        &self,
        layer: Layer,
        combine: bool,
        inner: bool,
    ) -> Result<(), PlanError> {
        let mut result = Ok(());
        // The closure runs under the channel's lock, so concurrent adds are serialised.
        self.tx
            .send_if_modified(|plan| match plan.add_layer(layer, combine, inner) {
                Ok(new) => {
                    log_problems(Some(plan), &new);
                    *plan = Arc::new(new);
                    true
                }
                Err(e) => {
                    result = Err(e);
                    false
                }
            });
        if result.is_ok()
            && let Some(sockets) = &self.sockets
        {
            sockets.sync().await;
        }
        result
    }
}

/// Logs the problems of `plan` that `old` did not have (all of them without `old`).
fn log_problems(old: Option<&Plan>, plan: &Plan) {
    let empty = Plan::default();
    let old = old.unwrap_or(&empty);
    for (name, problem) in &plan.log_target_problems {
        if old.log_target_problems.get(name) != Some(problem) {
            tracing::warn!("Log target \"{name}\" cannot forward logs: {problem}");
        }
    }
    for (name, service) in &plan.services {
        if let cobble_plan::Startup::Other(text) = &service.startup {
            let was = old.services.get(name).map(|s| &s.startup);
            if was != Some(&service.startup) {
                tracing::warn!(
                    "Service \"{name}\" has startup \"{text}\", neither \"enabled\" nor \"disabled\": it is not started automatically"
                );
            }
        }
    }
}

/// Logs each workload whose user or group cannot be resolved now. Pebble refuses to start
/// with such a workload; cobble starts, and the services that run in it fail to start (and
/// are retried) until the user database has what they need. Blocking: it reads the user
/// database.
pub(crate) fn log_unresolved_workloads(plan: &Plan) {
    for (name, workload) in &plan.workloads {
        if let Err(e) = cobble_sys::user::normalize_uid_gid(
            workload.user_id,
            &workload.user,
            workload.group_id,
            &workload.group,
        ) {
            tracing::warn!("Workload \"{name}\" cannot be used yet: {e}");
        }
    }
}
