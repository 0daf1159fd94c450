//! One check's loop: probe every period, feed the result to the streak machine, record what
//! it says in the check's change, and publish the check's status.
//!
//! The first probe runs one full period after the check starts (Pebble's ticker), so a new
//! check reports `up` with no successes. A tick missed because a probe ran long is taken at
//! once and the schedule continues on the original grid, like Go's ticker; each perform or
//! recover change starts a grid of its own, as each of Pebble's tasks does, and a refresh
//! starts the period again. The runner ends
//! when its cancel token fires (stop, plan change) or when a client aborts its change; either
//! way its current task is marked done.

use std::sync::Arc;

use cobble_plan::Check;
use tokio::sync::{mpsc, oneshot};
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use super::carry::Detached;
use super::checker::{self, CheckError, Checker};
use super::machine::{CheckRun, Effect};
use super::{CheckStatus, CheckView, Publisher};
use crate::state::{StateStore, TaskStatus};

/// Change and task kind while the check is healthy.
pub(super) const PERFORM_CHECK: &str = "perform-check";
/// Change and task kind after the check hit its threshold.
pub(super) const RECOVER_CHECK: &str = "recover-check";

/// What every runner shares.
pub(super) struct Shared {
    /// Where changes and tasks are recorded.
    pub store: StateStore,
    /// The snapshot the API reads, and the firing map the supervisor acts on.
    pub publisher: Publisher,
}

/// The reply to a refresh: the check after the run, and the run's error if it failed.
pub(super) type RefreshReply = (CheckView, Option<CheckError>);

/// A request to probe now, out of schedule.
pub(super) struct RefreshRequest {
    pub reply: oneshot::Sender<RefreshReply>,
}

/// Creates a change of `kind` for `config` with its one task already `Doing`; returns
/// (change, task).
pub(super) fn new_check_change(store: &StateStore, kind: &str, config: &Check) -> (u64, u64) {
    let verb = if kind == RECOVER_CHECK {
        "Recover"
    } else {
        "Perform"
    };
    let summary = format!(
        "{verb} {} check \"{}\"",
        checker::type_name(config),
        config.name
    );
    let change = store.new_check_change(kind, &summary, &config.name);
    let task = store.add_task(change, kind, &summary, None);
    store.set_task_status(task, TaskStatus::Doing);
    (change, task)
}

/// One run of one check.
pub(super) struct Runner {
    /// The check's name.
    pub name: String,
    /// Its configuration, service context merged.
    pub config: Arc<Check>,
    /// Its probe.
    pub checker: Arc<dyn Checker>,
    /// The snapshot generation this run owns.
    pub generation: u64,
    /// The failure streak.
    pub run: CheckRun,
    /// The change currently driving the check.
    pub change_id: u64,
    /// The change that drove it before, once the check has failed or recovered.
    pub prev_change_id: Option<u64>,
    /// That change's one task.
    pub task_id: u64,
    /// When its first run is due: a period after a fresh start, or when it was due for a
    /// check a re-execution handed over.
    pub first_due: Instant,
    /// Store and snapshot.
    pub shared: Arc<Shared>,
}

impl Runner {
    /// Runs until `cancel` fires or the change is aborted; or, when `detach` fires, stops
    /// between two runs (a run in flight is dropped and due again at once) with its change and
    /// task left as they are, and returns where it stood, for a re-execution.
    pub(super) async fn run(
        mut self,
        cancel: CancellationToken,
        detach: CancellationToken,
        mut refreshes: mpsc::UnboundedReceiver<RefreshRequest>,
    ) -> Option<Detached> {
        let period = self.config.period();
        let timeout = self.config.timeout();
        tracing::debug!("Check \"{}\" starting with period {period:?}", self.name);
        let mut next_due = self.first_due;
        let mut ticker = tokio::time::interval_at(next_due, period);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Skip);
        let mut abort = self.shared.store.abort_token(self.change_id);
        loop {
            let refresh = tokio::select! {
                biased;
                () = cancel.cancelled() => break,
                () = detach.cancelled() => return Some(self.detached(next_due)),
                () = abort.cancelled() => {
                    self.publish_inactive();
                    break;
                }
                due = ticker.tick() => {
                    // Missed ticks are skipped: the next is a period on, or at once.
                    next_due = (due + period).max(Instant::now());
                    None
                }
                Some(request) = refreshes.recv() => {
                    // A refresh starts the period again, as Pebble's resets its ticker.
                    ticker.reset();
                    next_due = Instant::now() + period;
                    Some(request)
                }
            };
            let result = tokio::select! {
                biased;
                () = cancel.cancelled() => break,
                // The run in flight is dropped: the new program runs it at once.
                () = detach.cancelled() => return Some(self.detached(Instant::now())),
                () = abort.cancelled() => {
                    self.publish_inactive();
                    break;
                }
                result = checker::probe(&*self.checker, timeout) => result,
            };
            let change_before = self.change_id;
            if let Some((task_id, error)) = self.record(&result) {
                // Pebble takes a check's failure action before its task fails, and logs
                // them in that order.
                self.shared.publisher.acted_on_latest().await;
                self.shared.store.fail_task(task_id, &error);
            }
            if self.change_id != change_before {
                abort = self.shared.store.abort_token(self.change_id);
                // Each change runs its own ticker in Pebble: the first probe of a recover
                // (or a new perform) change is a full period after it starts.
                ticker.reset();
                next_due = Instant::now() + period;
            }
            if let Some(request) = refresh {
                let _ = request.reply.send((self.view(), result.err()));
            }
        }
        self.finish();
        None
    }

    /// Where this run stands, its next run due at `next_due`.
    fn detached(&self, next_due: Instant) -> Detached {
        tracing::debug!("Check \"{}\" detached", self.name);
        Detached {
            run: self.run.clone(),
            change_id: self.change_id,
            task_id: self.task_id,
            prev_change_id: self.prev_change_id,
            next_due,
        }
    }

    /// Records one probe result: task log, transitions, failure action, snapshot. Returns
    /// the task that failed and why, when the check went down: failed once its action is
    /// taken.
    pub(super) fn record(&mut self, result: &Result<(), CheckError>) -> Option<(u64, String)> {
        let effects = self.run.record(result.as_ref().map(|_| ()));
        if let Err(error) = result {
            tracing::info!(
                "Check \"{}\" failure {}/{}: {}",
                self.name,
                self.run.failures,
                self.run.threshold,
                error.message
            );
        }
        let store = &self.shared.store;
        let mut actions_fired = 0;
        let mut failed = None;
        for effect in effects {
            match effect {
                Effect::LogError(message) => store.task_error(self.task_id, &message),
                Effect::LogInfo(message) => store.task_info(self.task_id, &message),
                Effect::ThresholdHit { error } => {
                    tracing::info!(
                        "Check \"{}\" threshold {} hit, triggering action and recovering",
                        self.name,
                        self.run.threshold
                    );
                    failed = Some((self.task_id, error));
                    actions_fired += 1;
                    self.prev_change_id = Some(self.change_id);
                    (self.change_id, self.task_id) =
                        new_check_change(store, RECOVER_CHECK, &self.config);
                }
                Effect::Refire { failures } => {
                    // Said in the daemon's log only: the recover task's log stays Pebble's,
                    // one line per failed run.
                    tracing::info!(
                        "Check \"{}\" still failing after {failures} failures, triggering action again",
                        self.name
                    );
                    actions_fired += 1;
                }
                Effect::Recovered => {
                    store.set_task_status(self.task_id, TaskStatus::Done);
                    self.prev_change_id = Some(self.change_id);
                    (self.change_id, self.task_id) =
                        new_check_change(store, PERFORM_CHECK, &self.config);
                }
            }
        }
        let succeeded = result.is_ok();
        let down = self.run.is_down();
        let last_error = result.as_ref().err().map(|e| e.message.clone());
        self.publish(|view| {
            if succeeded {
                view.success_count += 1;
                view.last_success = Some(Instant::now());
            } else {
                view.failure_count += 1;
                view.last_error = last_error;
            }
            view.action_count += actions_fired;
            match (down, view.down_since) {
                (true, None) => view.down_since = Some(jiff::Timestamp::now()),
                (false, Some(_)) => view.down_since = None,
                _ => {}
            }
        });
        failed
    }

    /// The check as it stands, for refresh replies.
    fn view(&self) -> CheckView {
        let snapshot = self.shared.publisher.borrow();
        let mut view = snapshot
            .checks
            .get(&self.name)
            .cloned()
            .unwrap_or_else(|| CheckView {
                name: self.name.clone(),
                level: self.config.level,
                startup_enabled: self.config.is_enabled(),
                status: CheckStatus::Up,
                successes: 0,
                failures: 0,
                threshold: self.run.threshold,
                change_id: None,
                prev_change_id: None,
                success_count: 0,
                failure_count: 0,
                action_count: 0,
                last_error: None,
                down_since: None,
                last_success: None,
                generation: self.generation,
            });
        if view.generation == self.generation {
            return view;
        }
        // Replaced meanwhile: answer with this run's own numbers.
        view.status = self.status();
        view.successes = self.run.successes;
        view.failures = self.run.failures;
        view.change_id = Some(self.change_id);
        view.prev_change_id = self.prev_change_id;
        view
    }

    fn status(&self) -> CheckStatus {
        if self.run.is_down() {
            CheckStatus::Down
        } else {
            CheckStatus::Up
        }
    }

    /// Publishes this run's numbers (and `extra`) if the snapshot entry is still ours.
    fn publish(&self, extra: impl FnOnce(&mut CheckView)) {
        let status = self.status();
        // The failure action fires by publishing: the snapshot's new action count (with the
        // check down) is what the supervisor acts on.
        self.shared.publisher.update_check(&self.name, |snapshot| {
            let Some(view) = snapshot.checks.get_mut(&self.name) else {
                return false;
            };
            if view.generation != self.generation {
                return false;
            }
            view.status = status;
            view.successes = self.run.successes;
            view.failures = self.run.failures;
            view.change_id = Some(self.change_id);
            view.prev_change_id = self.prev_change_id;
            extra(view);
            true
        });
    }

    /// A client aborted the check's change: the check is no longer running.
    fn publish_inactive(&self) {
        self.shared.publisher.update_check(&self.name, |snapshot| {
            let Some(view) = snapshot.checks.get_mut(&self.name) else {
                return false;
            };
            if view.generation != self.generation {
                return false;
            }
            view.status = CheckStatus::Inactive;
            view.change_id = None;
            true
        });
    }

    /// Closes the current task, as Pebble's task runner does for a stopped check.
    fn finish(&self) {
        // Done, by way of Abort and Undo, as Pebble ends a stopped check's task.
        self.shared.store.end_stopped_task(self.task_id);
        tracing::debug!("Check \"{}\" stopped", self.name);
    }
}
