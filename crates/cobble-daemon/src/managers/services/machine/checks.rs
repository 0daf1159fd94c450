//! The transitions the checks cause: `on-check-failure` actions as checks fire and come up
//! again, held by `start-grace` or spaced by a check's restart streak, and the backoff of a
//! restart a check caused.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::types::{AfterExit, CHECK_FAILURE_EXIT_CODE, Streak, Wanted};
use super::{Action, CheckSignals, ExitAction, Machine, Phase, format_secs, next_backoff};

impl Machine {
    /// Compares the checks that are down now with the ones last seen: a new firing of a check
    /// in `on-check-failure` performs its action (against the phase as it is now), a check
    /// that is no longer down ends the backoff it caused and its restart streak; a service
    /// waiting for its `requires-checks` is spawned once they all pass.
    pub(super) fn on_checks(
        &mut self,
        now: Instant,
        signals: &Arc<CheckSignals>,
        actions: &mut Vec<Action>,
    ) {
        self.checks = signals.clone();
        let policy: Vec<(String, ExitAction)> = self
            .policy
            .on_check_failure
            .iter()
            .map(|(check, action)| (check.clone(), *action))
            .collect();
        for (check, action) in policy {
            match signals.firing.get(&check) {
                Some(&number) => {
                    if self.checks_down.insert(check.clone(), number) != Some(number) {
                        self.on_check_failed(now, &check, action, actions);
                    }
                }
                None => {
                    if self.checks_down.remove(&check).is_some() {
                        self.on_check_up(&check, actions);
                    }
                }
            }
        }
        // Checks no longer in the policy are forgotten.
        let policy = &self.policy.on_check_failure;
        self.checks_down
            .retain(|check, _| policy.contains_key(check));
        self.streaks.retain(|check, _| policy.contains_key(check));
        self.held.retain(|check, _| policy.contains_key(check));
        if self.phase == Phase::Waiting && !self.waiting_checks.is_empty() {
            self.respawn(actions);
        }
    }

    /// Until when the action of `check`'s firing is held: by the start grace while the check
    /// has not succeeded since the process started, or by the spacing of its restart streak.
    fn hold_until(&self, now: Instant, check: &str, action: ExitAction) -> Option<Instant> {
        if !matches!(self.phase, Phase::Running { .. }) {
            return None;
        }
        let succeeded_since_start = match (self.spawned_at, self.checks.last_success.get(check)) {
            (Some(start), Some(success)) => *success >= start,
            _ => false,
        };
        let grace = self.grace_until(now).filter(|_| !succeeded_since_start);
        let spacing = self
            .streaks
            .get(check)
            .map(|streak| streak.next_at)
            .filter(|at| action == ExitAction::Restart && now < *at);
        grace.into_iter().chain(spacing).max()
    }

    /// Acts on the held firings whose hold has ended and whose check is still down.
    pub(super) fn release_held(&mut self, now: Instant, actions: &mut Vec<Action>) {
        let due: Vec<String> = self
            .held
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(check, _)| check.clone())
            .collect();
        for check in due {
            self.held.remove(&check);
            let action = self.policy.on_check_failure.get(&check).copied();
            if let (Some(action), true) = (action, self.checks_down.contains_key(&check)) {
                self.on_check_failed(now, &check, action, actions);
            }
        }
    }

    /// Pebble's `on-check-failure` handling: only a running, backing-off or exited service
    /// reacts; one that is starting, stopping, stopped or never started ignores the failure.
    /// A restart terminates a running process and lets the exit go through backoff (so the
    /// delay grows), waits for a backoff already under way, and backs off an exited service.
    fn on_check_failed(
        &mut self,
        now: Instant,
        check: &str,
        action: ExitAction,
        actions: &mut Vec<Action>,
    ) {
        // Pebble acts only on running, backing-off and exited services. cobble also acts on a
        // service that is down for any reason but a client's stop (an exit its policy did not
        // restart); a starting service is left to its okay delay, a stopped one stays stopped.
        let down_by_policy = self.phase == Phase::Stopped && !self.client_stopped;
        if !down_by_policy
            && !matches!(
                self.phase,
                Phase::Running { .. } | Phase::Backoff { .. } | Phase::Exited | Phase::Waiting
            )
        {
            return;
        }
        if action != ExitAction::Ignore
            && let Some(until) = self.hold_until(now, check, action)
        {
            if self.held.insert(check.to_owned(), until) != Some(until) {
                let why = if self.grace_until(now) == Some(until) {
                    "start-grace"
                } else {
                    "the check's restart backoff"
                };
                actions.push(Action::Log(format!(
                    "Service \"{}\" on-check-failure action for check \"{check}\" held by {why} for {}",
                    self.name,
                    format_secs(until - now)
                )));
            }
            return;
        }
        self.held.remove(check);
        let name = &self.name;
        let on_type = "on-check-failure";
        let action_name = action.as_str();
        match action {
            ExitAction::Ignore => {}
            ExitAction::Shutdown | ExitAction::FailureShutdown => {
                actions.push(Action::Log(format!(
                    "Service \"{name}\" {on_type} action is \"{action_name}\", triggering failure shutdown"
                )));
                actions.push(Action::Shutdown(CHECK_FAILURE_EXIT_CODE));
            }
            ExitAction::SuccessShutdown => {
                actions.push(Action::Log(format!(
                    "Service \"{name}\" {on_type} action is \"{action_name}\", triggering success shutdown"
                )));
                actions.push(Action::Shutdown(0));
            }
            ExitAction::Restart => match self.phase {
                Phase::Running { pid } => {
                    actions.push(Action::Log(format!(
                        "Service \"{name}\" {on_type} action is \"{action_name}\", terminating process before restarting"
                    )));
                    let streak = self.streaks.entry(check.to_owned()).or_insert(Streak {
                        restarts: 0,
                        delay: Duration::ZERO,
                        next_at: now,
                    });
                    streak.restarts += 1;
                    streak.delay = next_backoff(&self.policy, streak.delay);
                    streak.next_at = now + streak.delay;
                    self.terminate(now, pid, AfterExit::CheckRestart(check.to_owned()), actions);
                }
                // Already on its way back: waiting paths or a backoff timer pace the restart.
                Phase::Waiting => {}
                Phase::Backoff { .. } => actions.push(Action::Log(format!(
                    "Service \"{name}\" {on_type} action is \"{action_name}\", waiting for current backoff"
                ))),
                _ => {
                    self.wanted = Wanted::Running;
                    self.back_off(now, on_type, actions);
                    self.backoff_check = Some(check.to_owned());
                }
            },
        }
    }

    /// A check is up again: a backoff that only it caused has nothing left to wait for, and
    /// its next failure streak starts its restarts from the first delay.
    fn on_check_up(&mut self, check: &str, actions: &mut Vec<Action>) {
        self.streaks.remove(check);
        self.held.remove(check);
        if matches!(self.phase, Phase::Backoff { .. })
            && self.backoff_check.as_deref() == Some(check)
        {
            actions.push(Action::Log(format!(
                "Service \"{}\" check \"{check}\" is up again, restarting now",
                self.name
            )));
            self.respawn(actions);
        }
    }

    /// After a check's restart, backs off while the check is still down; if it is up again
    /// by now, there is nothing to pace and the service comes back at once.
    pub(super) fn back_off_for_check(
        &mut self,
        now: Instant,
        check: String,
        actions: &mut Vec<Action>,
    ) {
        if self.checks_down.contains_key(&check) {
            self.back_off(now, "on-check-failure", actions);
            self.backoff_check = Some(check);
        } else {
            actions.push(Action::Log(format!(
                "Service \"{}\" check \"{check}\" is up again, restarting now",
                self.name
            )));
            self.respawn(actions);
        }
    }
}

#[cfg(test)]
mod tests;
