//! The per-service lifecycle as a pure state machine.
//!
//! [`Machine::step`] takes the current time and one [`Event`] and returns the [`Action`]s the
//! executor must perform: spawn the process, signal its group, resolve a waiting start or stop
//! request, shut the daemon down. It does no IO and reads no clock, so every transition is
//! table-tested with plain `Instant`s. Timers are not armed anywhere: the machine exposes its
//! next [`Machine::deadline`] and the executor feeds [`Event::Tick`] once that instant passes.
//! Every deadline is re-read from the phase when it fires, so a timer never acts on the
//! state it was armed in; the same holds for checks: the machine is told which checks are
//! down *now* ([`Event::Checks`]) and acts on a firing only while its check is still down.
//!
//! The policy is all here too, so the executor only performs: which paths the service cares
//! about ([`Machine::watched_paths`]) and what a change of one means
//! ([`Machine::path_events`]), what the failure output named as missing, when the leftovers of
//! a stopped process group must go ([`Action::EndGroup`]). Spawning happens off the machine
//! and may take a while; `Spawning` is a real phase that a stop can meet.
//!
//! The phases and their observable texts follow Pebble's service state machine (okay delay,
//! backoff with jitter and reset, SIGTERM then SIGKILL then give up). Where Pebble lets a
//! workload stay dead, the machine is level-triggered instead: a service that is wanted
//! running is always starting, running, backing off with a deadline, or waiting for named
//! paths. Spawn failures back off and retry like quick exits (the start still fails with
//! Pebble's text); a restart whose process survives SIGKILL backs off rather than stopping;
//! a missing `requires-paths` path makes the service wait instead of failing; a path named in
//! failure output, once it appears, ends the backoff early; a check-caused backoff ends when
//! the check is up again; and `on-file-change` actions are coalesced over
//! [`FILE_CHANGE_DEBOUNCE`](types::FILE_CHANGE_DEBOUNCE).
//!
//! Checks gate and pace the service too, each from the signals the check manager publishes
//! ([`CheckSignals`]): a service with `requires-checks` is not spawned until each of those
//! checks passes (it waits, like a missing required path, and spawns the moment the last one
//! passes); `start-grace` holds a check's action after a start until that check has succeeded
//! once since the start or the grace has run out; and the restarts one check causes while it
//! stays down are spaced by the service's backoff schedule, growing until the check is up.
//!
//! A `readiness: notify` service with a `watchdog` is watched once it is ready: each
//! `WATCHDOG=1` pushes its deadline one interval on, and a deadline that passes (read when its
//! tick comes, so a ping the executor handled first still counts, as systemd lets everything
//! else run before its watchdog) or a `WATCHDOG=trigger` is a failure of the service: SIGABRT,
//! then SIGKILL after the kill delay, then its `on-failure` action, with the reason kept as
//! the cause of its exit.
//!
//! # Layout
//!
//! - `types`: the constants, the [`Policy`], the [`Phase`]s, [`Event`]s and [`Action`]s.
//! - here: the [`Machine`], what it reports, [`Machine::step`]'s dispatch, and the helpers
//!   every kind of transition uses (terminating, backing off).
//! - `service`: the process's own transitions: start (or wait for `requires-checks`), spawn,
//!   ready, stop, exit, and its timers.
//! - `checks`: what the checks do: `on-check-failure` actions, held by `start-grace` or spaced
//!   by a check's restart streak, and the end of a wait for `requires-checks`.
//! - `paths`: `requires-paths`, missing paths named by failure output, `on-file-change`.
//! - `watchdog`: what a service says to its watchdog, and a deadline it missed.
//! - `oneshot`: a one-shot's completion or failure, and the wait of the services ordered
//!   after one-shots.
//!
//! Each has its transition tables beside it (`tests` under it, on the shared `harness`);
//! `tests` here holds the property test of the whole machine.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::checks::CheckSignals;

mod checks;
mod oneshot;
mod paths;
mod service;
mod types;
mod watchdog;

pub(crate) use types::{
    Action, AfterExit, Event, ExitAction, FileAction, GroupSignal, OneshotDep, OneshotState,
    Oneshots, Phase, Policy, StartOutcome, Status, StopOutcome, Streak, Wanted, Watchdog,
    WatchdogSaid,
};

/// The lifecycle of one service.
#[derive(Debug, Clone)]
pub(crate) struct Machine {
    /// The service name, for messages.
    name: String,
    /// Where the lifecycle is.
    phase: Phase,
    /// What a client last asked for.
    wanted: Wanted,
    /// The policy stored at the last explicit start; restarts after backoff keep using it.
    policy: Policy,
    /// Backoffs since the last reset.
    backoff_num: u32,
    /// The last backoff delay (before jitter); zero after a reset.
    backoff_time: Duration,
    /// When a process that is still running resets the backoff; armed at every spawn.
    reset_at: Option<Instant>,
    /// What follows when the terminating process exits.
    after_exit: AfterExit,
    /// The missing `requires-paths` while waiting.
    waiting_for: Vec<String>,
    /// Paths the last failure output named as missing; their appearance ends the backoff.
    hints: Vec<String>,
    /// The checks of `on-check-failure` last seen down, with the firing number acted on.
    checks_down: BTreeMap<String, u64>,
    /// The check whose action caused the current backoff, if one did.
    backoff_check: Option<String>,
    /// A coalesced file-change action and when it is due.
    file_change: Option<(Instant, FileAction)>,
    /// The last stop came from a client; nothing but a client's start runs it again.
    client_stopped: bool,
    /// Exit code of the last process, if any.
    last_exit: Option<i32>,
    /// What killed the last process, when the kernel did ([`Event::KilledBy`]), with its pid.
    exit_cause: Option<(u32, String)>,
    /// Why the last spawn failed, until a spawn succeeds.
    spawn_error: Option<String>,
    /// The checks as last reported.
    checks: Arc<CheckSignals>,
    /// The `requires-checks` that do not pass, while waiting for them.
    waiting_checks: Vec<String>,
    /// When the live process was spawned: the start `start-grace` counts from.
    spawned_at: Option<Instant>,
    /// The watchdog of the live process, when its policy has one; until its exit.
    watchdog: Option<Watchdog>,
    /// Per check of `on-check-failure`, the restarts it caused while it stayed down.
    streaks: BTreeMap<String, Streak>,
    /// Checks whose action is held (by the start grace or a streak's spacing) until
    /// [`Machine::hold_until`] has passed; acted on then if still down.
    held: BTreeMap<String, Instant>,
    /// An explicit start waits for more than the spawn: for a one-shot's run to end, or for
    /// the one-shots the service is ordered after to complete. Resolved by that end.
    start_pending: bool,
    /// The live process is a one-shot's run (its policy was a one-shot's when it was
    /// spawned).
    oneshot_run: bool,
    /// The one-shots as last reported.
    oneshots: Arc<Oneshots>,
    /// The one-shots of `after:` that hold the service back, while it waits for them.
    waiting_oneshots: Vec<(String, OneshotState)>,
    /// How long the last run of a one-shot ran, once it completed; forgotten by a stop.
    completion: Option<Duration>,
    /// State of the jitter generator (xorshift64*).
    rng: u64,
}

/// What a re-execution hands over of a service's machine: where its lifecycle stands (its
/// process, if it has one), where its backoff stands, and the times it keeps, as durations
/// from the moment of the handover.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Carried {
    pub phase: CarriedPhase,
    pub backoff_num: u32,
    pub backoff_time: Duration,
    /// When the running process resets the backoff, from now.
    pub reset_in: Option<Duration>,
    /// How long the process has run.
    pub running_for: Option<Duration>,
    pub last_exit: Option<i32>,
    /// What killed the last process, when the kernel did, with its pid.
    pub exit_cause: Option<(u32, String)>,
    /// Why the last spawn failed, until a spawn succeeds.
    pub spawn_error: Option<String>,
    /// Paths the last failure output named as missing, while backing off.
    pub hints: Vec<String>,
    /// The missing `requires-paths`, while waiting.
    pub waiting_for: Vec<String>,
    /// The one-shots of `after:` that hold the service back, while waiting.
    pub waiting_oneshots: Vec<String>,
    /// How long a completed one-shot's last run ran.
    pub completion: Option<Duration>,
    /// A coalesced `on-file-change` action, due this long from now.
    pub file_change: Option<(Duration, FileAction)>,
    /// The checks of `on-check-failure` last seen down, with the firing number acted on.
    pub checks_down: BTreeMap<String, u64>,
    /// Per check that stays down, the restarts it caused: how many, the delay before the
    /// next, and how long until the next may follow.
    pub streaks: BTreeMap<String, (u32, Duration, Duration)>,
    /// Checks whose action is held, each for how long still.
    pub held: BTreeMap<String, Duration>,
    /// The `requires-checks` that do not pass, while waiting.
    pub waiting_checks: Vec<String>,
    /// The check whose action caused the current backoff, if one did.
    pub backoff_check: Option<String>,
    /// Its run's watchdog, when it has one.
    pub watchdog: Option<CarriedWatchdog>,
    /// A start waits for more than the spawn: a one-shot's run to end, or the one-shots the
    /// service is ordered after to complete.
    pub start_pending: bool,
}

/// Where a run's watchdog stands ([`Watchdog`]), its moments as how long before the handover
/// they were: the new program's deadline is the one this program would have acted on.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CarriedWatchdog {
    /// `None`: the service turned it off for this run.
    pub interval: Option<Duration>,
    pub ready_ago: Option<Duration>,
    pub last_ping_ago: Option<Duration>,
    pub since_ago: Option<Duration>,
}

/// Where a handed-over machine's lifecycle stands.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum CarriedPhase {
    /// Its process runs: a one-shot's run (`oneshot_run`), which completes it when it exits
    /// with code 0, or a daemon's.
    Running { pid: u32, oneshot_run: bool },
    /// Its process runs within the okay delay of its start, which ends `okay_in` from now;
    /// or, for a service that says when it is ready (`ready_signal`), it has not said so
    /// yet, and has until `okay_in` from now to.
    Starting {
        pid: u32,
        okay_in: Duration,
        ready_signal: bool,
    },
    /// Its process is being ended: SIGTERM (or the watchdog's signal) was sent, and SIGKILL
    /// follows `due_in` from now; or (`killing`) SIGKILL was sent, and the ending gives up
    /// `due_in` from now. `after` says what follows the exit: a client's stop
    /// ([`AfterExit::Stop`]), or, the service still wanted running, a check's or a file
    /// change's restart, a start that failed or a watchdog's failure.
    Stopping {
        pid: u32,
        killing: bool,
        due_in: Duration,
        after: AfterExit,
    },
    /// Backing off: it is spawned again `until_in` from now.
    Backoff { until_in: Duration },
    /// Wanted running, and waiting for missing `requires-paths` or one-shots of `after:`.
    Waiting,
    /// A one-shot whose last run completed.
    Completed,
    /// Exited, and left down by its policy.
    Exited,
    /// Stopped after it ran: by a client (`by_client`), or down by its policy.
    Stopped { by_client: bool },
}

impl Carried {
    /// Its process, if it has one.
    pub(crate) fn pid(&self) -> Option<u32> {
        match self.phase {
            CarriedPhase::Running { pid, .. }
            | CarriedPhase::Starting { pid, .. }
            | CarriedPhase::Stopping { pid, .. } => Some(pid),
            _ => None,
        }
    }
}

impl Machine {
    /// What a re-execution can hand over of this machine: a process running or starting
    /// (past its spawn; within its okay delay or not ready yet), a process being ended
    /// (waiting out its kill-delay, or after SIGKILL) with what follows its exit, a backoff,
    /// a wait for missing paths, one-shots or checks, a one-shot's completion, or an exit left
    /// down, with where its checks' actions stand, its watchdog's deadline and whether a start
    /// waits for its answer. `None` for a spawn under way.
    pub(crate) fn carried(&self, now: Instant) -> Option<Carried> {
        let wanted = self.wanted == Wanted::Running;
        // A client's stop, or an ending after which the service runs again (or its
        // `on-failure` decides).
        let stopping = match self.after_exit {
            AfterExit::Stop => self.wanted == Wanted::Stopped,
            _ => wanted,
        };
        let phase = match self.phase {
            Phase::Running { pid } if wanted => CarriedPhase::Running {
                pid,
                oneshot_run: self.oneshot_run,
            },
            Phase::Starting {
                pid,
                okay_at,
                ready_signal,
            } if wanted => CarriedPhase::Starting {
                pid,
                okay_in: okay_at.saturating_duration_since(now),
                ready_signal,
            },
            Phase::Terminating { pid, kill_at } if stopping => CarriedPhase::Stopping {
                pid,
                killing: false,
                due_in: kill_at.saturating_duration_since(now),
                after: self.after_exit.clone(),
            },
            Phase::Killing { pid, give_up_at } if stopping => CarriedPhase::Stopping {
                pid,
                killing: true,
                due_in: give_up_at.saturating_duration_since(now),
                after: self.after_exit.clone(),
            },
            Phase::Backoff { until } if wanted => CarriedPhase::Backoff {
                until_in: until.saturating_duration_since(now),
            },
            Phase::Waiting if wanted => CarriedPhase::Waiting,
            Phase::Completed => CarriedPhase::Completed,
            Phase::Exited => CarriedPhase::Exited,
            Phase::Stopped => CarriedPhase::Stopped {
                by_client: self.client_stopped,
            },
            _ => return None,
        };
        let ago = |at: Option<Instant>| at.map(|at| now.saturating_duration_since(at));
        let left = |at: Instant| at.saturating_duration_since(now);
        Some(Carried {
            phase,
            backoff_num: self.backoff_num,
            backoff_time: self.backoff_time,
            reset_in: self.reset_at.map(|at| at.saturating_duration_since(now)),
            running_for: self.spawned_at.map(|at| now.saturating_duration_since(at)),
            last_exit: self.last_exit,
            exit_cause: self.exit_cause.clone(),
            spawn_error: self.spawn_error.clone(),
            hints: self.hints.clone(),
            waiting_for: self.waiting_for.clone(),
            waiting_oneshots: self
                .waiting_oneshots
                .iter()
                .map(|(name, _)| name.clone())
                .collect(),
            completion: self.completion,
            file_change: self
                .file_change
                .as_ref()
                .map(|(at, action)| (at.saturating_duration_since(now), action.clone())),
            watchdog: self.watchdog.map(|w| CarriedWatchdog {
                interval: w.interval,
                ready_ago: ago(w.ready_at),
                last_ping_ago: ago(w.last_ping),
                since_ago: ago(w.since),
            }),
            checks_down: self.checks_down.clone(),
            streaks: self
                .streaks
                .iter()
                .map(|(check, s)| (check.clone(), (s.restarts, s.delay, left(s.next_at))))
                .collect(),
            held: self
                .held
                .iter()
                .map(|(check, at)| (check.clone(), left(*at)))
                .collect(),
            waiting_checks: self.waiting_checks.clone(),
            backoff_check: self.backoff_check.clone(),
            start_pending: self.start_pending,
        })
    }

    /// The machine of a service a re-executed daemon's predecessor handed over
    /// ([`Machine::carried`]) at the instant `at`, under `policy`. A service that waits for
    /// one-shots learns where they stand from the next [`Event::Oneshots`].
    pub(crate) fn adopted(
        name: impl Into<String>,
        seed: u64,
        policy: Policy,
        carried: &Carried,
        at: Instant,
    ) -> Machine {
        let mut machine = Machine::new(name, seed);
        machine.wanted = Wanted::Running;
        machine.phase = match carried.phase {
            CarriedPhase::Running { pid, oneshot_run } => {
                machine.oneshot_run = oneshot_run;
                Phase::Running { pid }
            }
            CarriedPhase::Starting {
                pid,
                okay_in,
                ready_signal,
            } => Phase::Starting {
                pid,
                okay_at: at + okay_in,
                ready_signal,
            },
            CarriedPhase::Stopping {
                pid,
                killing,
                due_in,
                ref after,
            } => {
                // A client's stop: once the process is down, the service is stopped. Any
                // other ending: it is still wanted running.
                if *after == AfterExit::Stop {
                    machine.wanted = Wanted::Stopped;
                    machine.client_stopped = true;
                }
                machine.after_exit = after.clone();
                if killing {
                    Phase::Killing {
                        pid,
                        give_up_at: at + due_in,
                    }
                } else {
                    Phase::Terminating {
                        pid,
                        kill_at: at + due_in,
                    }
                }
            }
            CarriedPhase::Backoff { until_in } => Phase::Backoff {
                until: at + until_in,
            },
            CarriedPhase::Waiting => Phase::Waiting,
            CarriedPhase::Completed => {
                machine.wanted = Wanted::Stopped;
                Phase::Completed
            }
            CarriedPhase::Exited => {
                machine.wanted = Wanted::Stopped;
                Phase::Exited
            }
            CarriedPhase::Stopped { by_client } => {
                machine.wanted = Wanted::Stopped;
                machine.client_stopped = by_client;
                Phase::Stopped
            }
        };
        machine.policy = policy;
        machine.backoff_num = carried.backoff_num;
        machine.backoff_time = carried.backoff_time;
        machine.reset_at = carried.reset_in.map(|d| at + d);
        machine.spawned_at = carried.running_for.map(|d| at.checked_sub(d).unwrap_or(at));
        machine.last_exit = carried.last_exit;
        machine.exit_cause.clone_from(&carried.exit_cause);
        machine.spawn_error.clone_from(&carried.spawn_error);
        machine.hints.clone_from(&carried.hints);
        machine.waiting_for.clone_from(&carried.waiting_for);
        // Where each stands is not known yet: the supervisor says, once it has them all.
        machine.waiting_oneshots = carried
            .waiting_oneshots
            .iter()
            .map(|name| (name.clone(), OneshotState::Inactive))
            .collect();
        machine.completion = carried.completion;
        machine.file_change = carried
            .file_change
            .as_ref()
            .map(|(due_in, action)| (at + *due_in, action.clone()));
        // The watchdog goes on where it stood, if the policy still asks for one.
        let ago = |ago: Option<Duration>| ago.map(|d| at.checked_sub(d).unwrap_or(at));
        machine.watchdog = machine.new_watchdog().map(|fresh| match &carried.watchdog {
            Some(w) => Watchdog {
                interval: w.interval,
                ready_at: ago(w.ready_ago),
                last_ping: ago(w.last_ping_ago),
                since: ago(w.since_ago),
            },
            None => fresh,
        });
        machine.checks_down = carried.checks_down.clone();
        machine.streaks = carried
            .streaks
            .iter()
            .map(|(check, (restarts, delay, next_in))| {
                let streak = Streak {
                    restarts: *restarts,
                    delay: *delay,
                    next_at: at + *next_in,
                };
                (check.clone(), streak)
            })
            .collect();
        machine.held = carried
            .held
            .iter()
            .map(|(check, until)| (check.clone(), at + *until))
            .collect();
        machine.waiting_checks.clone_from(&carried.waiting_checks);
        machine.backoff_check.clone_from(&carried.backoff_check);
        machine.start_pending = carried.start_pending;
        machine
    }

    /// A machine for a service that has never been started. `seed` drives the backoff jitter.
    pub(crate) fn new(name: impl Into<String>, seed: u64) -> Machine {
        Machine {
            name: name.into(),
            phase: Phase::Idle,
            wanted: Wanted::Stopped,
            policy: Policy::default(),
            backoff_num: 0,
            backoff_time: Duration::ZERO,
            reset_at: None,
            after_exit: AfterExit::Stop,
            waiting_for: Vec::new(),
            hints: Vec::new(),
            checks_down: BTreeMap::new(),
            backoff_check: None,
            file_change: None,
            client_stopped: false,
            last_exit: None,
            exit_cause: None,
            spawn_error: None,
            checks: Arc::default(),
            waiting_checks: Vec::new(),
            spawned_at: None,
            watchdog: None,
            streaks: BTreeMap::new(),
            held: BTreeMap::new(),
            start_pending: false,
            oneshot_run: false,
            oneshots: Arc::default(),
            waiting_oneshots: Vec::new(),
            completion: None,
            rng: seed | 1,
        }
    }

    pub(crate) fn phase(&self) -> Phase {
        self.phase
    }

    /// Whether an explicit start waits for more than the spawn (a one-shot's run, the
    /// one-shots the service is ordered after).
    pub(crate) fn start_pending(&self) -> bool {
        self.start_pending
    }

    #[cfg(test)]
    pub(crate) fn wanted(&self) -> Wanted {
        self.wanted
    }

    pub(crate) fn backoff_num(&self) -> u32 {
        self.backoff_num
    }

    pub(crate) fn last_exit(&self) -> Option<i32> {
        self.last_exit
    }

    /// Why the last spawn failed, if the spawns since have all failed.
    pub(crate) fn spawn_error(&self) -> Option<&str> {
        self.spawn_error.as_deref()
    }

    /// What killed the last process, when the kernel did.
    pub(crate) fn last_exit_cause(&self) -> Option<&str> {
        self.exit_cause.as_ref().map(|(_, cause)| cause.as_str())
    }

    /// The watchdog of the live process, when its policy has one.
    pub(crate) fn watchdog(&self) -> Option<&Watchdog> {
        self.watchdog.as_ref()
    }

    /// The missing paths a waiting service waits for.
    pub(crate) fn waiting_for(&self) -> &[String] {
        &self.waiting_for
    }

    /// Paths the last failure output named as missing (while backing off after it).
    pub(crate) fn hints(&self) -> &[String] {
        &self.hints
    }

    /// The `requires-checks` a waiting service waits for.
    pub(crate) fn waiting_checks(&self) -> &[String] {
        &self.waiting_checks
    }

    /// The one-shots of `after:` a waiting service waits for, and where each stands.
    pub(crate) fn waiting_oneshots(&self) -> &[(String, OneshotState)] {
        &self.waiting_oneshots
    }

    /// How long the last run of a completed one-shot ran, until it is stopped.
    pub(crate) fn completion(&self) -> Option<Duration> {
        self.completion
    }

    /// Where this service stands as a one-shot, for the services ordered after it; `None`
    /// for a daemon.
    pub(crate) fn oneshot_state(&self) -> Option<OneshotState> {
        if !self.policy.oneshot {
            return None;
        }
        let exit = || match (&self.spawn_error, self.last_exit) {
            (Some(error), _) => error.clone(),
            (None, Some(code)) => format!("exited with code {code}"),
            (None, None) => "failed".to_owned(),
        };
        Some(match self.phase {
            Phase::Completed => OneshotState::Completed,
            Phase::Spawning { .. } | Phase::Starting { .. } | Phase::Running { .. } => {
                OneshotState::Running
            }
            // Waiting for what it is ordered after: still to run while a start waits on it,
            // held back once its start was answered that it waits.
            Phase::Waiting if self.start_pending => OneshotState::Running,
            Phase::Waiting => OneshotState::Failed("itself waiting".to_owned()),
            Phase::Backoff { .. } | Phase::Exited => OneshotState::Failed(exit()),
            Phase::Terminating { .. } | Phase::Killing { .. } if self.wanted == Wanted::Running => {
                OneshotState::Running
            }
            Phase::Idle | Phase::Stopped | Phase::Terminating { .. } | Phase::Killing { .. } => {
                OneshotState::Inactive
            }
        })
    }

    /// The checks as the machine last saw them.
    pub(crate) fn checks(&self) -> &Arc<CheckSignals> {
        &self.checks
    }

    /// Until when the start grace holds check actions, while it does.
    pub(crate) fn grace_until(&self, now: Instant) -> Option<Instant> {
        let until = self.spawned_at? + self.policy.start_grace?;
        (now < until).then_some(until)
    }

    /// Checks whose action is held, each until when.
    pub(crate) fn held(&self) -> &BTreeMap<String, Instant> {
        &self.held
    }

    /// The restart streaks of the checks that are down.
    pub(crate) fn streaks(&self) -> &BTreeMap<String, Streak> {
        &self.streaks
    }

    /// The current backoff delay before jitter (zero before the first backoff).
    pub(crate) fn backoff_time(&self) -> Duration {
        self.backoff_time
    }

    /// The policy stored at the last explicit start.
    pub(crate) fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The check whose failure is restarting the service, while its process is being ended.
    pub(crate) fn restarting_for_check(&self) -> Option<&str> {
        match (&self.phase, &self.after_exit) {
            (Phase::Terminating { .. } | Phase::Killing { .. }, AfterExit::CheckRestart(check)) => {
                Some(check)
            }
            _ => None,
        }
    }

    /// Why the watchdog failed the service, while its process is being ended for it.
    pub(crate) fn failing_for_watchdog(&self) -> Option<&str> {
        match (&self.phase, &self.after_exit) {
            (Phase::Terminating { .. } | Phase::Killing { .. }, AfterExit::Watchdog) => {
                self.last_exit_cause()
            }
            _ => None,
        }
    }

    /// The pid of the live process, if there is one.
    pub(crate) fn pid(&self) -> Option<u32> {
        match self.phase {
            Phase::Starting { pid, .. }
            | Phase::Running { pid }
            | Phase::Terminating { pid, .. }
            | Phase::Killing { pid, .. } => Some(pid),
            _ => None,
        }
    }

    /// Whether a process has been asked for and its pid is not known yet.
    pub(crate) fn is_spawning(&self) -> bool {
        matches!(self.phase, Phase::Spawning { .. })
    }

    /// Whether the process may be signalled through `/v1/signals`.
    pub(crate) fn is_running(&self) -> bool {
        matches!(self.phase, Phase::Starting { .. } | Phase::Running { .. })
    }

    /// The status the API reports. A service that is wanted running is never `inactive`:
    /// while a check's restart ends its process it is `backoff`, as Pebble lists it once the
    /// process has exited (Pebble lists the moment before as `inactive`, which tells a client
    /// that polls the service that it was stopped); while a file change's restart does, it
    /// is `active`, for it comes back at once.
    pub(crate) fn status(&self) -> Status {
        match self.phase {
            Phase::Starting {
                ready_signal: true, ..
            } => Status::Starting,
            Phase::Spawning { .. } | Phase::Starting { .. } | Phase::Running { .. } => {
                Status::Active
            }
            Phase::Terminating { .. } | Phase::Killing { .. } => match self.after_exit {
                AfterExit::Stop => Status::Inactive,
                AfterExit::CheckRestart(_) | AfterExit::Failed | AfterExit::Watchdog => {
                    Status::Backoff
                }
                AfterExit::Respawn => Status::Active,
            },
            Phase::Idle | Phase::Stopped | Phase::Completed => Status::Inactive,
            Phase::Backoff { .. } => Status::Backoff,
            Phase::Exited => Status::Error,
            Phase::Waiting => Status::Waiting,
        }
    }

    /// The next instant at which the machine wants a `Tick`.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        let phase = match self.phase {
            Phase::Starting { okay_at, .. } => Some(okay_at),
            Phase::Running { .. } => {
                let watchdog = self.watchdog.as_ref().and_then(Watchdog::deadline);
                [self.reset_at, watchdog].into_iter().flatten().min()
            }
            Phase::Terminating { kill_at, .. } => Some(kill_at),
            Phase::Killing { give_up_at, .. } => Some(give_up_at),
            Phase::Backoff { until } => Some(until),
            _ => None,
        };
        let file_change = self.file_change.as_ref().map(|(at, _)| *at);
        let held = self.held.values().min().copied();
        [phase, file_change, held].into_iter().flatten().min()
    }

    /// Advances the machine by one event.
    pub(crate) fn step(&mut self, now: Instant, event: Event) -> Vec<Action> {
        let mut actions = Vec::new();
        // The outcome of a start decided by a start answers that start alone; any other
        // answers every start that waits, the one that waited for more than its spawn too.
        let answers_all = !matches!(event, Event::Start(_) | Event::Ensure(_));
        self.catch_up(now, &mut actions);
        match event {
            Event::Start(policy) => self.on_start(policy, true, &mut actions),
            Event::Ensure(policy) => self.on_start(policy, false, &mut actions),
            Event::Oneshots(oneshots) => self.on_oneshots(oneshots, &mut actions),
            Event::Stop => self.on_stop(now, &mut actions),
            Event::AbortStart => self.on_abort_start(&mut actions),
            Event::Spawned { pid } => self.on_spawned(now, pid, &mut actions),
            Event::SpawnFailed { error } => self.on_spawn_failed(now, error, &mut actions),
            Event::Exited { pid, code } => self.on_exited(now, pid, code, &mut actions),
            Event::KilledBy { pid, cause } => self.on_killed_by(pid, cause),
            Event::Tick => {
                self.on_tick(now, &mut actions);
                self.on_file_change_due(now, &mut actions);
                self.release_held(now, &mut actions);
            }
            Event::PathsMissing { missing } => self.on_paths_missing(missing, &mut actions),
            Event::PathAppeared(path) => self.on_path_appeared(path, &mut actions),
            Event::MissingNamed(paths) => self.on_missing_named(paths, &mut actions),
            Event::RetryNow => self.on_retry_now(&mut actions),
            Event::FileChanged(action) => self.on_file_changed(now, action),
            Event::Checks(signals) => self.on_checks(now, &signals, &mut actions),
            Event::Ready { pid } => self.on_ready(now, pid, &mut actions),
            Event::Watchdog { pid, said } => self.on_watchdog(now, pid, said, &mut actions),
        }
        if answers_all
            && actions
                .iter()
                .any(|action| matches!(action, Action::StartDone(_)))
        {
            self.start_pending = false;
        }
        actions
    }

    fn terminate(&mut self, now: Instant, pid: u32, after: AfterExit, actions: &mut Vec<Action>) {
        self.end_with(now, pid, GroupSignal::Term, after, actions);
    }

    /// Ends the process as a stop does, but with `signal` first; SIGKILL follows after the
    /// kill delay.
    fn end_with(
        &mut self,
        now: Instant,
        pid: u32,
        signal: GroupSignal,
        after: AfterExit,
        actions: &mut Vec<Action>,
    ) {
        actions.push(Action::Signal { pid, signal });
        self.after_exit = after;
        self.reset_at = None;
        self.phase = Phase::Terminating {
            pid,
            kill_at: now + self.policy.kill_delay,
        };
    }

    fn back_off(&mut self, now: Instant, on_type: &str, actions: &mut Vec<Action>) {
        self.after_exit = AfterExit::Stop;
        self.backoff_check = None;
        self.backoff_num += 1;
        self.backoff_time = next_backoff(&self.policy, self.backoff_time);
        let jitter = self.jitter(self.backoff_time);
        actions.push(Action::Log(format!(
            "Service \"{}\" {on_type} action is \"restart\", waiting ~{} before restart (backoff {})",
            self.name,
            format_secs(self.backoff_time),
            self.backoff_num
        )));
        self.phase = Phase::Backoff {
            until: now + self.backoff_time + jitter,
        };
    }

    /// A uniformly random 0-10 % of `base`.
    fn jitter(&mut self, base: Duration) -> Duration {
        // xorshift64*: plenty for spreading restarts, and reproducible from the seed.
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        let r = self.rng.wrapping_mul(0x2545_F491_4F6C_DD1D);
        let unit = (r >> 11) as f64 / (1u64 << 53) as f64;
        base.mul_f64(0.1 * unit)
    }
}

/// The backoff delay that follows `current` (zero means "no backoff yet").
pub(crate) fn next_backoff(policy: &Policy, current: Duration) -> Duration {
    if current.is_zero() {
        return policy.backoff_delay;
    }
    if current >= policy.backoff_limit {
        return policy.backoff_limit;
    }
    current
        .mul_f64(policy.backoff_factor)
        .min(policy.backoff_limit)
}

/// Formats a whole or fractional number of seconds the way Go prints small durations.
fn format_secs(d: Duration) -> String {
    let nanos = i64::try_from(d.as_nanos()).unwrap_or(i64::MAX);
    cobble_plan::duration::format_duration(nanos)
}

#[cfg(test)]
mod harness;
#[cfg(test)]
mod tests;
