//! The watchdog of a `readiness: notify` service with `watchdog:` (systemd's `WatchdogSec=`):
//! what the service says to it (sd_notify's `WATCHDOG=1`, `WATCHDOG=trigger`,
//! `WATCHDOG_USEC=`) and the deadline it missed.
//!
//! Each run gets a fresh [`Watchdog`] with the policy's interval; nothing is watched until
//! `READY=1`, which starts the first interval. Every ping starts the next one. A new interval
//! (`WATCHDOG_USEC=n`) holds for the rest of the run and starts now, as systemd's override
//! does; zero turns the watchdog off for the run (systemd arms no timer for an interval of
//! 0). A service whose policy has no watchdog is not watched, whatever it says: unlike
//! systemd, which honours `WATCHDOG=trigger` and `WATCHDOG_USEC=` without `WatchdogSec=`,
//! cobble acts only for services that asked for a watchdog in their layer.
//!
//! A missed deadline and a trigger are a failure of the service: the daemon logs the reason,
//! adds it to the service's own log, keeps it as the cause of the coming exit (where `cobble
//! why`, the reason and the details read it), sends SIGABRT to the group as systemd's default
//! `WatchdogSignal=` does, SIGKILL after the kill delay, and once the process has exited its
//! `on-failure` action follows whatever its exit code. A trigger before `READY=1` fails the
//! start that waits for it, with the reason in its task log.

use std::time::Duration;

use tokio::time::Instant;

use super::types::{AfterExit, StartOutcome};
use super::{Action, GroupSignal, Machine, Phase, Watchdog, WatchdogSaid, format_secs};

impl Machine {
    /// The watchdog a new run of the service gets, if its policy has one.
    pub(super) fn new_watchdog(&self) -> Option<Watchdog> {
        self.policy
            .watchdog
            .filter(|_| self.policy.notify)
            .map(Watchdog::new)
    }

    /// The run said it is ready at `now`: its first interval starts.
    pub(super) fn watch_from(&mut self, now: Instant) {
        if let Some(watchdog) = &mut self.watchdog {
            watchdog.ready_at = Some(now);
            watchdog.since = Some(now);
        }
    }

    /// The process `pid` said something to its watchdog.
    pub(super) fn on_watchdog(
        &mut self,
        now: Instant,
        pid: u32,
        said: WatchdogSaid,
        actions: &mut Vec<Action>,
    ) {
        let live = matches!(
            self.phase,
            Phase::Running { pid: current } | Phase::Starting { pid: current, .. } if current == pid
        );
        let Some(watchdog) = self.watchdog.as_mut().filter(|_| live) else {
            return;
        };
        match said {
            WatchdogSaid::Ping => {
                // Before READY=1 nothing is watched yet: a ping then starts nothing.
                if watchdog.ready_at.is_some() {
                    watchdog.last_ping = Some(now);
                    watchdog.since = Some(now);
                }
            }
            WatchdogSaid::Interval(interval) => {
                watchdog.interval = (!interval.is_zero()).then_some(interval);
                if watchdog.ready_at.is_some() {
                    watchdog.since = Some(now);
                }
                let what = if interval.is_zero() {
                    "turned its watchdog off for this run".to_owned()
                } else {
                    format!("set its watchdog interval to {}", format_secs(interval))
                };
                actions.push(Action::Log(format!("Service \"{}\" {what}", self.name)));
            }
            WatchdogSaid::Trigger => {
                self.watchdog_failed(
                    now,
                    pid,
                    "watchdog triggered by the service".into(),
                    actions,
                );
            }
        }
    }

    /// The tick of a running service: its watchdog's deadline, if it has passed.
    pub(super) fn on_watchdog_due(&mut self, now: Instant, pid: u32, actions: &mut Vec<Action>) {
        let Some(watchdog) = self.watchdog else {
            return;
        };
        let (Some(deadline), Some(interval), Some(ready_at)) =
            (watchdog.deadline(), watchdog.interval, watchdog.ready_at)
        else {
            return;
        };
        if now < deadline {
            return;
        }
        let reason = match watchdog.last_ping {
            Some(ping) => format!(
                "watchdog timeout after {}, last ping {} ago",
                format_secs(interval),
                format_secs(tenths(now - ping))
            ),
            None => format!(
                "watchdog timeout after {}, no ping since it was ready {} ago",
                format_secs(interval),
                format_secs(tenths(now - ready_at))
            ),
        };
        self.watchdog_failed(now, pid, reason, actions);
    }

    /// The run led by `pid` has failed for its watchdog: ended with SIGABRT first, then its
    /// `on-failure` action.
    fn watchdog_failed(
        &mut self,
        now: Instant,
        pid: u32,
        reason: String,
        actions: &mut Vec<Action>,
    ) {
        actions.push(Action::Log(format!(
            "Service \"{}\" {reason}, sending SIGABRT",
            self.name
        )));
        actions.push(Action::OutputNote(reason.clone()));
        if matches!(self.phase, Phase::Starting { .. }) {
            actions.push(Action::StartDone(StartOutcome::Failed {
                error: reason.clone(),
                with_output: true,
            }));
        }
        self.exit_cause = Some((pid, reason));
        self.end_with(now, pid, GroupSignal::Abort, AfterExit::Watchdog, actions);
    }
}

/// `d` to the nearest tenth of a second, as a reason shows how long ago a ping was.
fn tenths(d: Duration) -> Duration {
    Duration::from_millis((d.as_millis() as u64 + 50) / 100 * 100)
}

#[cfg(test)]
mod tests;
