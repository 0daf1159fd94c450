//! What the supervisor reports about the services it has started: for `GET /v1/services`,
//! metrics and `cobble why`.
//!
//! Listing services is a hot path (clients poll it, and a plan may hold thousands of
//! services), so the report costs only what is listed:
//!
//! - Only started services are reported. A service the supervisor never started is
//!   `inactive` with nothing more to say; the API reads it from the plan alone.
//! - `current-since` is rendered once per status change and kept by the actor, not on every
//!   request.
//! - The details behind `cobble why` (the last lines of output, backoff figures) are
//!   gathered only when asked for; the one-line reason is worked out from the machine.
//!
//! The report reads the service's [`Machine`], and beside it only what the actor keeps that
//! is no part of the lifecycle ([`Tracked`]).

use std::sync::Arc;

use jiff::Timestamp;
use tokio::time::Instant;

use super::LAST_LOG_LINES;
use super::machine::{Machine, OneshotState, Phase, Status};
use crate::logs::ServiceLog;
use cobble_client::time::{format_rfc3339_nano, format_rfc3339_secs};

/// What the supervisor reports about a service it has started.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ServiceStatus {
    /// The service's name.
    pub name: String,
    /// Its status.
    pub current: Status,
    /// When the status was entered, rendered as RFC 3339 with nanoseconds.
    pub since: Option<Arc<str>>,
    /// Why it is not simply running, if it is not.
    pub reason: Option<String>,
    /// Processes spawned for it by this daemon.
    pub start_count: u64,
    /// Its main process, while one runs.
    pub pid: Option<u32>,
    /// Why it is where it is, for `cobble why`; only when asked for.
    pub details: Option<ServiceDetails>,
}

/// What the supervisor knows about one service beyond its status.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ServiceDetails {
    /// Exit code of the last process.
    pub last_exit: Option<i32>,
    /// What killed the last process, when the kernel did (the OOM killer).
    pub last_exit_cause: Option<String>,
    /// What of its `resources:` is not enforced, and why.
    pub unenforced: Option<String>,
    /// What it uses; filled in by [`crate::services::ServiceManager::usage`], not by the
    /// actor.
    pub usage: Option<crate::process::Usage>,
    /// The last lines of its output.
    pub last_output: Vec<String>,
    /// Backoffs since the last reset.
    pub backoff_count: u32,
    /// The current backoff delay, before jitter.
    pub backoff_delay: std::time::Duration,
    /// When the backoff ends, if backing off.
    pub backoff_until: Option<Timestamp>,
    /// The missing `requires-paths`, if waiting.
    pub waiting_for: Vec<String>,
    /// Paths the last failure output named as missing; their appearance ends the backoff.
    pub hints: Vec<String>,
    /// The `requires-checks` that do not pass, if waiting for them.
    pub waiting_checks: Vec<String>,
    /// Until when `start-grace` holds check actions, while it does.
    pub grace_until: Option<Timestamp>,
    /// Checks whose action is held, each until when.
    pub held: Vec<(String, Timestamp)>,
    /// Checks that are down and have restarted the service in their current streak: how
    /// many times, and when the next restart may follow.
    pub check_restarts: Vec<(String, u32, Timestamp)>,
    /// Its watchdog, when its policy has one.
    pub watchdog: Option<WatchdogStatus>,
    /// A one-shot's last completion (exit code 0): when, and how long it ran; until it is
    /// stopped.
    pub completed: Option<(Timestamp, std::time::Duration)>,
    /// The one-shots of `after:` it waits for, each with where it stands.
    pub waiting_oneshots: Vec<(String, String)>,
    /// The listening sockets held for it; filled in by
    /// [`crate::services::ServiceManager::with_process_details`], not by the actor.
    pub sockets: Vec<crate::process::sockets::SocketReport>,
}

/// Where a service's watchdog stands.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct WatchdogStatus {
    /// The interval: its run's (which `WATCHDOG_USEC=` may have changed), or the policy's
    /// between runs; `None` once the run turned it off.
    pub interval: Option<std::time::Duration>,
    /// The last `WATCHDOG=1` of the running process.
    pub last_ping: Option<Timestamp>,
    /// When the running process has failed unless it pings before; `None` before it is
    /// ready, while it is not running and once it turned the watchdog off.
    pub deadline: Option<Timestamp>,
}

/// A `current-since` rendered for the instant it was rendered from.
#[derive(Debug, Default)]
pub(super) struct RenderedSince(Option<(Timestamp, Arc<str>)>);

impl RenderedSince {
    /// `at`, rendered; again only if `at` is not what was rendered last.
    fn render(&mut self, at: Timestamp) -> Arc<str> {
        match &self.0 {
            Some((rendered_at, text)) if *rendered_at == at => text.clone(),
            _ => {
                let text: Arc<str> = format_rfc3339_nano(at).into();
                self.0 = Some((at, text.clone()));
                text
            }
        }
    }
}

/// What the actor keeps of a started service beside its machine, which the report needs
/// too. None of it is the lifecycle, so none of it is the machine's: the wall-clock time of
/// the last status change (the machine reads no clock), what the spawns the actor performs
/// came to (how many, what they left unenforced), the output, and what a `readiness: notify`
/// service last said of itself on the socket the actor reads (the machine hears `READY=1`
/// alone).
pub(super) struct Tracked<'a> {
    /// When the reported status last changed.
    pub(super) since: Option<Timestamp>,
    /// `since`, as last rendered for a client.
    pub(super) rendered_since: &'a mut RenderedSince,
    /// Processes spawned.
    pub(super) start_count: u64,
    /// What of its `resources:` was not enforced at its last spawn, and why.
    pub(super) unenforced: Option<&'a str>,
    /// Its recent output.
    pub(super) log: &'a ServiceLog,
    /// The last `STATUS=` text of its running instance.
    pub(super) said_status: Option<&'a str>,
    /// It said `RELOADING=1` and not `READY=1` since.
    pub(super) reloading: bool,
    /// It said `STOPPING=1`.
    pub(super) stopping: bool,
    /// When a one-shot last completed, until it is stopped.
    pub(super) completed_at: Option<Timestamp>,
}

/// What the supervisor reports of the started service `name`, with details if
/// `with_details`.
pub(super) fn status(
    name: &str,
    machine: &Machine,
    tracked: Tracked<'_>,
    with_details: bool,
) -> ServiceStatus {
    ServiceStatus {
        name: name.to_owned(),
        current: machine.status(),
        since: tracked.since.map(|at| tracked.rendered_since.render(at)),
        reason: reason(machine, &tracked),
        start_count: tracked.start_count,
        pid: machine.pid(),
        details: with_details.then(|| details(machine, &tracked)),
    }
}

/// What the supervisor knows about a started service.
fn details(machine: &Machine, tracked: &Tracked<'_>) -> ServiceDetails {
    let now = Instant::now();
    ServiceDetails {
        last_exit: machine.last_exit(),
        last_exit_cause: machine.last_exit_cause().map(str::to_owned),
        unenforced: tracked.unenforced.map(str::to_owned),
        usage: None,
        last_output: tracked.log.last_lines(LAST_LOG_LINES),
        backoff_count: machine.backoff_num(),
        backoff_delay: machine.backoff_time(),
        backoff_until: backoff_until(machine),
        waiting_for: machine.waiting_for().to_vec(),
        hints: machine.hints().to_vec(),
        waiting_checks: machine.waiting_checks().to_vec(),
        grace_until: machine.grace_until(now).map(|at| timestamp(now, at)),
        held: machine
            .held()
            .iter()
            .map(|(check, at)| (check.clone(), timestamp(now, *at)))
            .collect(),
        check_restarts: machine
            .streaks()
            .iter()
            .map(|(check, streak)| {
                (
                    check.clone(),
                    streak.restarts,
                    timestamp(now, streak.next_at),
                )
            })
            .collect(),
        watchdog: watchdog(machine, now),
        completed: tracked.completed_at.zip(machine.completion()),
        waiting_oneshots: machine
            .waiting_oneshots()
            .iter()
            .map(|(name, state)| (name.clone(), oneshot_state_text(state)))
            .collect(),
        sockets: Vec::new(),
    }
}

/// Where the service's watchdog stands, if its policy has one.
fn watchdog(machine: &Machine, now: Instant) -> Option<WatchdogStatus> {
    let interval = machine.policy().watchdog?;
    let Some(run) = machine.watchdog() else {
        return Some(WatchdogStatus {
            interval: Some(interval),
            last_ping: None,
            deadline: None,
        });
    };
    let running = matches!(machine.phase(), Phase::Running { .. });
    Some(WatchdogStatus {
        interval: run.interval,
        last_ping: run.last_ping.map(|at| timestamp(now, at)),
        deadline: run
            .deadline()
            .filter(|_| running)
            .map(|at| timestamp(now, at)),
    })
}

/// The wall-clock time of the monotonic instant `at`, as seen from `now`.
fn timestamp(now: Instant, at: Instant) -> Timestamp {
    let wall = Timestamp::now();
    if at >= now {
        wall + at.duration_since(now)
    } else {
        wall - now.duration_since(at)
    }
}

/// When the current backoff ends, if backing off.
fn backoff_until(machine: &Machine) -> Option<Timestamp> {
    match machine.phase() {
        Phase::Backoff { until } => Some(timestamp(Instant::now(), until)),
        _ => None,
    }
}

/// One line on why a service is not simply running, for clients that want it (Pebble clients
/// ignore the field), with what a `readiness: notify` service last said of itself.
fn reason(machine: &Machine, tracked: &Tracked<'_>) -> Option<String> {
    let mut said = Vec::new();
    if tracked.reloading {
        said.push("reloading".to_owned());
    }
    if tracked.stopping {
        said.push("stopping".to_owned());
    }
    if let Some(status) = tracked.said_status {
        said.push(format!("says \"{status}\""));
    }
    let mut phase = phase_reason(machine);
    if let Some(unenforced) = tracked.unenforced {
        phase = Some(match phase {
            Some(phase) => format!("{phase}; {unenforced}"),
            None => unenforced.to_owned(),
        });
    }
    if said.is_empty() {
        return phase;
    }
    let said = said.join(", ");
    Some(match phase {
        Some(phase) => format!("{phase}; {said}"),
        None => said,
    })
}

/// Where a one-shot that holds a service back stands, in a few words.
fn oneshot_state_text(state: &OneshotState) -> String {
    match state {
        OneshotState::Completed => "completed".into(),
        OneshotState::Running => "running".into(),
        OneshotState::Failed(why) => format!("failed: {why}"),
        OneshotState::Inactive => "not started".into(),
    }
}

/// Why the service's phase is not simply running.
fn phase_reason(machine: &Machine) -> Option<String> {
    let exit = || {
        let cause = machine
            .last_exit_cause()
            .map_or(String::new(), |cause| format!(" ({cause})"));
        machine.last_exit().map_or(String::new(), |code| {
            format!(" after exit code {code}{cause}")
        })
    };
    match machine.phase() {
        Phase::Waiting if !machine.waiting_oneshots().is_empty() => {
            let mut waits: Vec<String> = machine
                .waiting_oneshots()
                .iter()
                .map(|(name, state)| {
                    format!(
                        "one-shot \"{name}\" to complete ({})",
                        oneshot_state_text(state)
                    )
                })
                .collect();
            if !machine.waiting_checks().is_empty() {
                let checks = machine.waiting_checks();
                let noun = if checks.len() == 1 { "check" } else { "checks" };
                waits.push(format!("{noun} {} to succeed", checks.join(", ")));
            }
            Some(format!("waiting for {}", waits.join(", ")))
        }
        Phase::Completed => Some("completed".into()),
        Phase::Waiting if !machine.waiting_checks().is_empty() => {
            let checks = machine.waiting_checks();
            let noun = if checks.len() == 1 { "check" } else { "checks" };
            Some(format!(
                "waiting for {noun} {} to succeed",
                checks.join(", ")
            ))
        }
        Phase::Waiting => Some(format!("waiting for {}", machine.waiting_for().join(", "))),
        Phase::Running { .. } if !machine.held().is_empty() => {
            let now = Instant::now();
            let held: Vec<String> = machine
                .held()
                .iter()
                .map(|(check, at)| {
                    format!("{check} until {}", format_rfc3339_secs(timestamp(now, *at)))
                })
                .collect();
            Some(format!("check action held: {}", held.join(", ")))
        }
        Phase::Backoff { .. } => {
            let until = backoff_until(machine).map_or(String::new(), |t| {
                format!(" until {}", format_rfc3339_secs(t))
            });
            let hint = if machine.hints().is_empty() {
                String::new()
            } else {
                format!(
                    "; retrying as soon as {} exists",
                    machine.hints().join(", ")
                )
            };
            let after = match machine.spawn_error() {
                Some(error) => format!(" after: {error}"),
                None => exit(),
            };
            Some(format!("backing off{until}{after}{hint}"))
        }
        Phase::Exited => Some(format!("exited{}; its policy does not restart it", exit())),
        Phase::Starting {
            okay_at,
            ready_signal: true,
            ..
        } => Some(format!(
            "starting: waiting for READY=1 until {}",
            format_rfc3339_secs(timestamp(Instant::now(), okay_at))
        )),
        Phase::Terminating { .. } | Phase::Killing { .. } => machine
            .restarting_for_check()
            .map(|check| format!("restarting: check \"{check}\" failed"))
            .or_else(|| {
                machine
                    .failing_for_watchdog()
                    .map(|cause| format!("failed: {cause}"))
            }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rendered_since_renders_again_only_when_the_instant_changes() {
        let mut since = RenderedSince::default();
        let first: Timestamp = "2024-01-01T00:00:00.5Z".parse().unwrap();
        let text = since.render(first);
        assert!(Arc::ptr_eq(&text, &since.render(first)));
        assert_eq!(*text, *format_rfc3339_nano(first));
        let second: Timestamp = "2024-01-01T00:00:01Z".parse().unwrap();
        assert_eq!(*since.render(second), *format_rfc3339_nano(second));
    }

    #[test]
    fn a_status_is_read_from_the_machine_and_what_the_actor_tracks_beside_it() {
        use crate::services::machine::{Event, Policy};

        let mut machine = Machine::new("svc", 1);
        let now = Instant::now();
        machine.step(now, Event::Start(Policy::default()));
        machine.step(
            now,
            Event::PathsMissing {
                missing: vec!["/certs/cert.pem".into()],
            },
        );
        let mut rendered_since = RenderedSince::default();
        let log = ServiceLog::new();
        let since: Timestamp = "2024-01-01T00:00:00Z".parse().unwrap();
        let tracked = Tracked {
            since: Some(since),
            rendered_since: &mut rendered_since,
            start_count: 3,
            unenforced: Some("memory-max is not enforced: no cgroup"),
            log: &log,
            said_status: Some("warming up"),
            reloading: true,
            stopping: false,
            completed_at: None,
        };
        let status = status("svc", &machine, tracked, true);
        assert_eq!(status.current, Status::Waiting);
        assert_eq!(status.since.as_deref(), Some(&*format_rfc3339_nano(since)));
        assert_eq!(status.start_count, 3);
        assert_eq!(status.pid, None);
        assert_eq!(
            status.reason.as_deref(),
            Some(
                "waiting for /certs/cert.pem; memory-max is not enforced: no cgroup; reloading, says \"warming up\""
            )
        );
        let details = status.details.expect("asked for");
        assert_eq!(details.waiting_for, ["/certs/cert.pem"]);
        assert_eq!(
            details.unenforced.as_deref(),
            Some("memory-max is not enforced: no cgroup")
        );
    }

    #[test]
    fn a_watchdog_is_reported_with_its_last_ping_and_deadline_and_a_failure_as_the_reason() {
        use crate::services::machine::{Event, Policy, WatchdogSaid};
        use std::time::Duration;

        let mut machine = Machine::new("svc", 1);
        let now = Instant::now();
        machine.step(
            now,
            Event::Start(Policy {
                notify: true,
                watchdog: Some(Duration::from_secs(30)),
                ..Policy::default()
            }),
        );
        machine.step(now, Event::Spawned { pid: 10 });
        let log = ServiceLog::new();
        let report = |machine: &Machine| {
            let mut rendered_since = RenderedSince::default();
            let tracked = Tracked {
                since: None,
                rendered_since: &mut rendered_since,
                start_count: 1,
                unenforced: None,
                log: &log,
                said_status: None,
                reloading: false,
                stopping: false,
                completed_at: None,
            };
            status("svc", machine, tracked, true)
        };
        let before = report(&machine).details.unwrap().watchdog.unwrap();
        assert_eq!(before.interval, Some(Duration::from_secs(30)));
        assert_eq!((before.last_ping, before.deadline), (None, None));

        machine.step(now, Event::Ready { pid: 10 });
        machine.step(
            now,
            Event::Watchdog {
                pid: 10,
                said: WatchdogSaid::Ping,
            },
        );
        let watched = report(&machine).details.unwrap().watchdog.unwrap();
        let (ping, deadline) = (watched.last_ping.unwrap(), watched.deadline.unwrap());
        let interval = deadline.duration_since(ping).unsigned_abs();
        assert!(
            interval.abs_diff(Duration::from_secs(30)) < Duration::from_millis(50),
            "{interval:?}"
        );

        machine.step(
            now,
            Event::Watchdog {
                pid: 10,
                said: WatchdogSaid::Trigger,
            },
        );
        let failing = report(&machine);
        assert_eq!(failing.current, Status::Backoff);
        assert_eq!(
            failing.reason.as_deref(),
            Some("failed: watchdog triggered by the service")
        );
        assert_eq!(failing.details.unwrap().watchdog.unwrap().deadline, None);
    }
}
