//! One check's failure streak as a pure state machine.
//!
//! [`CheckRun::record`] takes the result of one probe and returns the [`Effect`]s the runner
//! must record. The rules are Pebble's: a check stays up until `threshold` consecutive
//! failures; reaching it fires the failure action once and moves the check from its
//! perform-check change to a recover-check change; failures while recovering are only
//! logged; the first success completes the recovery and starts a new perform phase with one
//! success on the clock.
//!
//! Where Pebble fires the action once per failure streak, cobble fires it again
//! ([`Effect::Refire`]) each time another `threshold` of consecutive failures accumulates
//! while the check stays down: a restart that did not fix the workload is followed by
//! another, paced by the service's own backoff. The first success stops the firing.

use super::CheckError;

/// Which kind of change drives the check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// `perform-check`: healthy, or failing below the threshold.
    Perform,
    /// `recover-check`: the threshold was hit; waiting for a success.
    Recover,
}

/// What the runner must record after a probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Effect {
    /// An ERROR entry in the current task's log.
    LogError(String),
    /// An INFO entry in the current task's log.
    LogInfo(String),
    /// The threshold was hit: the perform task fails with `error` as its last log entry, the
    /// failure action fires, and a recover-check change starts.
    ThresholdHit { error: String },
    /// The check recovered: the recover task is done and a perform-check change starts.
    Recovered,
    /// Still down after another `threshold` consecutive failures: the failure action fires
    /// again (recorded in the recover task's log).
    Refire {
        /// Consecutive failures so far.
        failures: u32,
    },
}

/// The counters of one run of a check (from its start, or its last configuration change).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CheckRun {
    /// Current phase.
    pub phase: Phase,
    /// Consecutive failures.
    pub failures: u32,
    /// Successes since the run started or last recovered.
    pub successes: u64,
    /// Consecutive failures that make the check down (at least 1).
    pub threshold: u32,
}

impl CheckRun {
    /// A fresh run: up, no successes, no failures.
    pub(crate) fn new(threshold: u32) -> CheckRun {
        CheckRun {
            phase: Phase::Perform,
            failures: 0,
            successes: 0,
            threshold: threshold.max(1),
        }
    }

    /// Whether the check counts as down.
    pub(crate) fn is_down(&self) -> bool {
        self.failures >= self.threshold
    }

    /// Records one probe result.
    pub(crate) fn record(&mut self, result: Result<(), &CheckError>) -> Vec<Effect> {
        match (self.phase, result) {
            (Phase::Perform, Ok(())) => {
                self.successes += 1;
                if self.failures == 0 {
                    return Vec::new();
                }
                let failures = std::mem::take(&mut self.failures);
                let noun = if failures == 1 { "failure" } else { "failures" };
                vec![Effect::LogInfo(format!(
                    "succeeded after {failures} {noun}"
                ))]
            }
            (Phase::Perform, Err(error)) => {
                self.failures += 1;
                if self.failures >= self.threshold {
                    self.phase = Phase::Recover;
                    // The failing task's last entry is the error with its details, as
                    // Pebble (since v1.29) returns it for its task runner to log.
                    vec![Effect::ThresholdHit {
                        error: error.log_text(),
                    }]
                } else {
                    vec![Effect::LogError(error.log_text())]
                }
            }
            (Phase::Recover, Err(error)) => {
                self.failures += 1;
                let mut effects = vec![Effect::LogError(error.log_text())];
                if self.failures.is_multiple_of(self.threshold) {
                    effects.push(Effect::Refire {
                        failures: self.failures,
                    });
                }
                effects
            }
            (Phase::Recover, Ok(())) => {
                self.phase = Phase::Perform;
                self.failures = 0;
                self.successes = 1;
                vec![Effect::Recovered]
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fail(message: &str, details: &str) -> CheckError {
        CheckError {
            message: message.into(),
            details: details.into(),
        }
    }

    #[test]
    fn successes_count_without_effects() {
        let mut run = CheckRun::new(3);
        for _ in 0..5 {
            assert!(run.record(Ok(())).is_empty());
        }
        assert_eq!(run.successes, 5);
        assert!(!run.is_down());
    }

    #[test]
    fn failures_below_threshold_log_with_details_and_reset_on_success() {
        let mut run = CheckRun::new(3);
        let error = fail("exit status 1", "details");
        assert_eq!(
            run.record(Err(&error)),
            vec![Effect::LogError("exit status 1; details".into())]
        );
        assert_eq!(
            run.record(Err(&fail("exit status 1", ""))),
            vec![Effect::LogError("exit status 1".into())]
        );
        assert_eq!(run.failures, 2);
        assert!(!run.is_down());
        assert_eq!(
            run.record(Ok(())),
            vec![Effect::LogInfo("succeeded after 2 failures".into())]
        );
        assert_eq!(run.failures, 0);
        run.record(Err(&error));
        assert_eq!(
            run.record(Ok(())),
            vec![Effect::LogInfo("succeeded after 1 failure".into())]
        );
    }

    #[test]
    fn threshold_fires_once_then_recovery_logs_until_success() {
        let mut run = CheckRun::new(2);
        run.record(Ok(()));
        let error = fail("check timed out after 1s", "");
        run.record(Err(&error));
        assert_eq!(
            run.record(Err(&fail("exit status 2", "last line"))),
            vec![Effect::ThresholdHit {
                error: "exit status 2; last line".into()
            }]
        );
        assert!(run.is_down());
        assert_eq!(run.phase, Phase::Recover);
        // Successes are kept while down.
        assert_eq!(run.successes, 1);
        for n in 3..6 {
            let mut want = vec![Effect::LogError("exit status 2; last line".into())];
            if n % 2 == 0 {
                // Another threshold's worth of failures: the action fires again.
                want.push(Effect::Refire { failures: n });
            }
            assert_eq!(run.record(Err(&fail("exit status 2", "last line"))), want);
            assert_eq!(run.failures, n);
        }
        assert_eq!(run.record(Ok(())), vec![Effect::Recovered]);
        assert_eq!(run.phase, Phase::Perform);
        assert_eq!((run.failures, run.successes), (0, 1));
        assert!(!run.is_down());
        // A new streak fires the action again.
        run.record(Err(&error));
        assert!(matches!(
            run.record(Err(&error)).as_slice(),
            [Effect::ThresholdHit { .. }]
        ));
    }

    #[test]
    fn the_action_refires_every_threshold_while_down_and_stops_on_success() {
        let mut run = CheckRun::new(3);
        let error = fail("connection refused", "");
        let mut fired = Vec::new();
        for _ in 0..10 {
            for effect in run.record(Err(&error)) {
                match effect {
                    Effect::ThresholdHit { .. } => fired.push(run.failures),
                    Effect::Refire { failures } => fired.push(failures),
                    _ => {}
                }
            }
        }
        assert_eq!(fired, [3, 6, 9]);
        assert_eq!(run.record(Ok(())), vec![Effect::Recovered]);
        for _ in 0..2 {
            assert_eq!(
                run.record(Err(&error)).len(),
                1,
                "below the threshold again"
            );
        }
    }

    #[test]
    fn threshold_of_one_goes_down_on_the_first_failure() {
        let mut run = CheckRun::new(1);
        assert!(matches!(
            run.record(Err(&fail("x", ""))).as_slice(),
            [Effect::ThresholdHit { .. }]
        ));
        assert!(run.is_down());
    }
}
