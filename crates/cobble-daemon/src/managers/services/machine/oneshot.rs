//! One-shots (`type: oneshot`) and the services ordered after them: a one-shot's run
//! ends in its completion or its failure, and a service whose `after:` names one-shots waits
//! while one of them runs, and, for one it `requires:` too, until that one has completed.
//! Where each one-shot stands reaches the machines as [`Event::Oneshots`](super::Event).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::types::{ExitAction, StartOutcome, Wanted};
use super::{Action, Machine, OneshotState, Oneshots, Phase, format_secs};

impl Machine {
    /// The one-shots of `after:` that hold the service back now: one whose run is under way,
    /// and one it `requires:` that has not completed.
    pub(super) fn oneshots_holding(&self) -> Vec<(String, OneshotState)> {
        self.policy
            .after_oneshots
            .iter()
            .filter_map(|dep| {
                let state = self
                    .oneshots
                    .get(&dep.name)
                    .cloned()
                    .unwrap_or(OneshotState::Inactive);
                let holds = match state {
                    OneshotState::Completed => false,
                    OneshotState::Running => true,
                    OneshotState::Failed(_) | OneshotState::Inactive => dep.required,
                };
                holds.then(|| (dep.name.clone(), state))
            })
            .collect()
    }

    /// The one-shots changed: a service waiting for them starts once none holds it back, and
    /// an explicit start that waits is answered once one of them has failed.
    pub(super) fn on_oneshots(&mut self, oneshots: Arc<Oneshots>, actions: &mut Vec<Action>) {
        self.oneshots = oneshots;
        if self.phase == Phase::Waiting && (!self.waiting_oneshots.is_empty() || self.start_pending)
        {
            // A start that still waits for its answer is carried out as that start.
            self.hints.clear();
            self.backoff_check = None;
            self.file_change = None;
            self.spawn_unless_waiting(true, actions);
        }
    }

    /// A one-shot's run ended on its own after `ran_for`: with code 0 it has completed
    /// (unless its `on-success` shuts the daemon down), otherwise it has failed and its
    /// `on-failure` action follows, as for any service. A start waiting on the run is
    /// answered.
    pub(super) fn oneshot_exited(
        &mut self,
        now: Instant,
        pid: u32,
        code: i32,
        ran_for: Duration,
        actions: &mut Vec<Action>,
    ) {
        let pending = std::mem::take(&mut self.start_pending);
        actions.push(Action::EndRemains {
            pid,
            kill_delay: self.policy.kill_delay,
        });
        if code == 0 {
            // To the millisecond: `completed in 1.54s`, not nine digits of noise.
            let ran_for =
                Duration::from_millis(u64::try_from(ran_for.as_millis()).unwrap_or(u64::MAX));
            actions.push(Action::Log(format!(
                "Service \"{}\" completed in {}",
                self.name,
                format_secs(ran_for)
            )));
            if pending {
                actions.push(Action::StartDone(StartOutcome::Started));
            }
            self.backoff_num = 0;
            self.backoff_time = Duration::ZERO;
            self.hints.clear();
            // What was due for the run is moot once it has ended.
            self.file_change = None;
            self.held.clear();
            self.completion = Some(ran_for);
            match self.policy.on_success {
                // A successful one-shot is never restarted.
                ExitAction::Restart | ExitAction::Ignore => {
                    self.phase = Phase::Completed;
                    self.wanted = Wanted::Stopped;
                }
                action => self.apply_exit_action(now, false, action, "on-success", actions),
            }
            return;
        }
        let action = self.policy.on_failure;
        if pending {
            actions.push(Action::StartDone(StartOutcome::Failed {
                error: format!(
                    "service start attempt: exited with {}, will {}",
                    self.exit_text(code),
                    action.as_str()
                ),
                with_output: true,
            }));
        }
        actions.push(Action::Log(format!(
            "Service \"{}\" failed with {}",
            self.name,
            self.exit_text(code)
        )));
        self.apply_exit_action(now, true, action, "on-failure", actions);
    }
}

#[cfg(test)]
mod tests;
