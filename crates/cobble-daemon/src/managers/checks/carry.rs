//! What a re-execution hands over of the checks: each check's status, streak, counters and
//! change, and for a running check the time left until its next run, so that the new program
//! goes on with the same perform-check or recover-check change and task where this one
//! stopped.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use super::machine::{CheckRun, Phase};
use super::{CheckStatus, CheckView};

/// Where a running check's runner stood when it was detached.
#[derive(Debug, Clone)]
pub(crate) struct Detached {
    pub run: CheckRun,
    pub change_id: u64,
    pub task_id: u64,
    pub prev_change_id: Option<u64>,
    /// When its next run was due.
    pub next_due: Instant,
}

/// One check of the plan, handed over: its listing, and for a running check its change's
/// task and when it runs next (durations counted from the handover).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct CarriedCheck {
    pub name: String,
    /// Whether it runs (`false`: stopped, or `startup: disabled` and never started).
    pub running: bool,
    pub startup_enabled: bool,
    /// In its recover-check change (it hit its threshold).
    #[serde(default)]
    pub recovering: bool,
    pub successes: u64,
    pub failures: u32,
    pub threshold: u32,
    pub change_id: Option<u64>,
    /// The task of `change_id`, still Doing, when the check runs.
    pub task_id: Option<u64>,
    pub prev_change_id: Option<u64>,
    pub success_count: u64,
    pub failure_count: u64,
    pub action_count: u64,
    pub last_error: Option<String>,
    /// When it went down, in nanoseconds since the epoch.
    pub down_since_ns: Option<i128>,
    /// How long before the handover it last succeeded.
    pub last_success_ago_ns: Option<u64>,
    /// How long after the handover its next run is due.
    pub next_run_in_ns: Option<u64>,
    /// The handover's instant, on the monotonic clock (which the exec keeps), in
    /// nanoseconds: what the durations count from.
    #[serde(default)]
    pub taken_at_ns: Option<u64>,
    /// The configuration a running check runs, as a one-check layer document, when it is
    /// not the plan's: a layer that disabled the check while it ran leaves it running as it
    /// was (as Pebble does), and it runs on so under the new program.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running_config: Option<String>,
}

/// The most bytes of a check's last error carried (a probe's error is already bounded).
const MAX_ERROR: usize = 4096;

fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl CarriedCheck {
    /// The check listed as `view`, whose runner, if it ran, stood at `detached`.
    pub(crate) fn new(view: &CheckView, detached: Option<&Detached>, now: Instant) -> CarriedCheck {
        let mut last_error = view.last_error.clone();
        if let Some(error) = last_error.as_mut().filter(|e| e.len() > MAX_ERROR) {
            let mut end = MAX_ERROR;
            while !error.is_char_boundary(end) {
                end -= 1;
            }
            error.truncate(end);
        }
        let mut carried = CarriedCheck {
            name: view.name.clone(),
            running: false,
            startup_enabled: view.startup_enabled,
            recovering: false,
            successes: view.successes,
            failures: view.failures,
            threshold: view.threshold,
            change_id: None,
            task_id: None,
            prev_change_id: view.prev_change_id,
            success_count: view.success_count,
            failure_count: view.failure_count,
            action_count: view.action_count,
            last_error,
            down_since_ns: view.down_since.map(|t| t.as_nanosecond()),
            last_success_ago_ns: view
                .last_success
                .map(|at| ns(now.saturating_duration_since(at))),
            next_run_in_ns: None,
            taken_at_ns: u64::try_from(cobble_sys::reexec::monotonic_now().as_nanos()).ok(),
            running_config: None,
        };
        if let Some(d) = detached {
            carried.running = true;
            carried.recovering = d.run.phase == Phase::Recover;
            carried.successes = d.run.successes;
            carried.failures = d.run.failures;
            carried.threshold = d.run.threshold;
            carried.change_id = Some(d.change_id);
            carried.task_id = Some(d.task_id);
            carried.prev_change_id = d.prev_change_id;
            carried.next_run_in_ns = Some(ns(d.next_due.saturating_duration_since(now)));
        }
        carried
    }

    /// The configuration it runs on with, when that is not the plan's: the handed-over one
    /// with `plan`'s service context merged in again (which gives the same fields back, and
    /// the context service's limits, which a layer cannot give a check).
    pub(crate) fn running_config(&self, plan: &cobble_plan::Plan) -> Option<cobble_plan::Check> {
        let yaml = self.running_config.as_deref()?;
        match cobble_plan::Check::from_layer_yaml(yaml) {
            Ok(check) => Some(super::checker::merge_service_context(plan, &check)),
            Err(e) => {
                tracing::warn!(
                    "Check \"{}\" handed over a configuration that cannot be read ({e}): it runs the plan's",
                    self.name
                );
                None
            }
        }
    }

    /// The instant of the handover as `now`'s clock tells it: the swap's own time has passed
    /// for the check's times too.
    pub(crate) fn taken_at(&self, now: Instant) -> Instant {
        let swap = self
            .taken_at_ns
            .map(|at| cobble_sys::reexec::monotonic_now().saturating_sub(Duration::from_nanos(at)))
            .unwrap_or_default();
        now.checked_sub(swap).unwrap_or(now)
    }

    /// The runner's state again, when it ran (`now`: the instant of the handover, see
    /// [`CarriedCheck::taken_at`]).
    pub(crate) fn detached(&self, now: Instant) -> Option<Detached> {
        if !self.running {
            return None;
        }
        let threshold = self.threshold.max(1);
        Some(Detached {
            run: CheckRun {
                phase: if self.recovering {
                    Phase::Recover
                } else {
                    Phase::Perform
                },
                failures: self.failures,
                successes: self.successes,
                threshold,
            },
            change_id: self.change_id?,
            task_id: self.task_id?,
            prev_change_id: self.prev_change_id,
            next_due: now + Duration::from_nanos(self.next_run_in_ns.unwrap_or(0)),
        })
    }

    /// The listing again, for the check's configured `level`, owned by `generation`.
    pub(crate) fn view(
        &self,
        level: cobble_plan::CheckLevel,
        generation: u64,
        now: Instant,
    ) -> CheckView {
        let status = if !self.running {
            CheckStatus::Inactive
        } else if self.failures >= self.threshold.max(1) {
            CheckStatus::Down
        } else {
            CheckStatus::Up
        };
        CheckView {
            name: self.name.clone(),
            level,
            startup_enabled: self.startup_enabled,
            status,
            successes: self.successes,
            failures: self.failures,
            threshold: self.threshold,
            change_id: self.change_id.filter(|_| self.running),
            prev_change_id: self.prev_change_id,
            success_count: self.success_count,
            failure_count: self.failure_count,
            action_count: self.action_count,
            last_error: self.last_error.clone(),
            down_since: self
                .down_since_ns
                .and_then(|ns| jiff::Timestamp::from_nanosecond(ns).ok()),
            last_success: self
                .last_success_ago_ns
                .map(|ago| now.checked_sub(Duration::from_nanos(ago)).unwrap_or(now)),
            generation,
        }
    }
}
