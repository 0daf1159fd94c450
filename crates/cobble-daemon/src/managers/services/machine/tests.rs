//! The property test of the whole machine: random event sequences, with an invariant
//! checked after every step.

use super::*;
use crate::checks::Firing;

/// The level-triggered invariant, checked after every step of random event sequences: a
/// service that is wanted running is always spawning, starting, running, backing off with a
/// deadline, waiting on named paths, or being restarted; a service a client stopped is never
/// spawned again until a client starts it; and no restart caused by a check happens, or
/// stays armed as a backoff, while that check is up.
mod invariant {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    #[derive(Debug, Clone)]
    enum Op {
        Start {
            ignore_failures: bool,
            /// The policy requires the check "ready" to pass before spawning.
            requires: bool,
            /// The policy has a start grace, says when it is ready and has a watchdog.
            grace: bool,
            /// 0: a daemon; 1: a one-shot; 2: after the one-shot "setup", requiring it;
            /// 3: after it alone.
            shape: u8,
            /// A client's start (autostart's and replan's otherwise).
            again: bool,
        },
        /// The one-shot "setup" now stands here (0: completed, 1: running, 2: failed,
        /// 3: inactive).
        Setup {
            state: u8,
        },
        Stop,
        AbortStart,
        /// The pending spawn finishes (spawns run off the machine and take a while).
        SpawnDone,
        Exit {
            code: i32,
        },
        StaleExit,
        Advance {
            millis: u64,
        },
        PathChanged {
            which: usize,
            exists: bool,
            initial: bool,
        },
        MissingNamed,
        /// Check `which` goes down or fires again.
        CheckFires {
            which: usize,
        },
        /// Check `which` is up again.
        CheckUp {
            which: usize,
        },
        /// Check `which` succeeds (it passes, unless it is down).
        CheckPasses {
            which: usize,
        },
        /// The running process says it is ready.
        Ready,
        /// The running process says this to its watchdog.
        Watchdog(WatchdogSaid),
    }

    const CHECKS: [&str; 2] = ["alive", "ready"];
    const PATHS: [&str; 3] = ["/certs/cert.pem", "/config", "/missing"];

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            1 => (any::<bool>(), any::<bool>(), any::<bool>(), 0..4u8, any::<bool>())
                .prop_map(|(ignore_failures, requires, grace, shape, again)| Op::Start {
                    ignore_failures, requires, grace, shape, again,
                }),
            1 => (0..4u8).prop_map(|state| Op::Setup { state }),
            1 => Just(Op::Stop),
            1 => Just(Op::AbortStart),
            3 => Just(Op::SpawnDone),
            1 => (0..3i32).prop_map(|code| Op::Exit { code }),
            1 => Just(Op::StaleExit),
            2 => (0..40_000u64).prop_map(|millis| Op::Advance { millis }),
            1 => (0..PATHS.len(), any::<bool>(), any::<bool>())
                .prop_map(|(which, exists, initial)| Op::PathChanged { which, exists, initial }),
            1 => Just(Op::MissingNamed),
            1 => (0..CHECKS.len()).prop_map(|which| Op::CheckFires { which }),
            1 => (0..CHECKS.len()).prop_map(|which| Op::CheckUp { which }),
            1 => (0..CHECKS.len()).prop_map(|which| Op::CheckPasses { which }),
            1 => Just(Op::Ready),
            2 => prop_oneof![
                4 => Just(WatchdogSaid::Ping),
                1 => Just(WatchdogSaid::Trigger),
                1 => (0..3_000u64).prop_map(|millis| WatchdogSaid::Interval(Duration::from_millis(millis))),
            ].prop_map(Op::Watchdog),
        ]
    }

    /// How the simulated executor answers a `Spawn`.
    #[derive(Debug, Clone, Copy)]
    enum SpawnResult {
        Spawned,
        Failed,
        PathsMissing,
    }

    fn spawn_result() -> impl Strategy<Value = SpawnResult> {
        prop_oneof![
            3 => Just(SpawnResult::Spawned),
            1 => Just(SpawnResult::Failed),
            1 => Just(SpawnResult::PathsMissing),
        ]
    }

    struct Sim {
        m: Machine,
        now: Instant,
        next_pid: u32,
        spawn_results: Vec<SpawnResult>,
        spawns: usize,
        /// A `Spawn` the executor has not answered yet.
        spawn_pending: bool,
        /// The checks that are really down, with their firing numbers.
        firing: Firing,
        firings: u64,
        /// The checks that really pass.
        passing: BTreeSet<String>,
    }

    impl Sim {
        fn policy(ignore_failures: bool, requires: bool, grace: bool, shape: u8) -> Policy {
            // A one-shot does not say when it is ready (the plan refuses it).
            let grace = grace && shape != 1;
            Policy {
                oneshot: shape == 1,
                after_oneshots: match shape {
                    2 | 3 => vec![OneshotDep {
                        name: "setup".into(),
                        required: shape == 2,
                    }],
                    _ => Vec::new(),
                },
                requires_checks: if requires {
                    vec![CHECKS[1].to_owned()]
                } else {
                    Vec::new()
                },
                start_grace: grace.then_some(Duration::from_secs(5)),
                notify: grace,
                watchdog: grace.then_some(Duration::from_secs(2)),
                on_failure: if ignore_failures {
                    ExitAction::Ignore
                } else {
                    ExitAction::Restart
                },
                on_check_failure: CHECKS
                    .iter()
                    .map(|c| (c.to_string(), ExitAction::Restart))
                    .collect(),
                on_file_change: [
                    (PATHS[0].to_owned(), FileAction::Restart),
                    (PATHS[1].to_owned(), FileAction::Signal("SIGHUP".into())),
                ]
                .into(),
                ..Policy::default()
            }
        }

        /// Feeds an event as the executor would, and checks what the step did.
        fn feed(&mut self, event: Event) -> Result<Vec<Action>, TestCaseError> {
            let actions = self.m.step(self.now, event);
            for action in &actions {
                if let Action::Signal {
                    signal: GroupSignal::Abort,
                    ..
                } = action
                {
                    // The run's watchdog: a start while it runs may have changed the policy.
                    prop_assert!(
                        self.m.watchdog().is_some(),
                        "SIGABRT for a run without a watchdog"
                    );
                }
                if *action == Action::Spawn {
                    prop_assert!(!self.spawn_pending, "a second spawn while one is pending");
                    self.spawn_pending = true;
                }
                if let Action::Signal {
                    signal: GroupSignal::Term,
                    ..
                } = action
                    && let AfterExit::CheckRestart(check) = &self.m.after_exit
                {
                    prop_assert!(
                        self.firing.contains_key(check),
                        "restarted for check {check}, which is up"
                    );
                }
            }
            Ok(actions)
        }

        fn signals(&self) -> Arc<CheckSignals> {
            Arc::new(CheckSignals {
                firing: self.firing.clone(),
                passing: self.passing.clone(),
                ..CheckSignals::default()
            })
        }

        fn finish_spawn(&mut self) -> Result<Vec<Action>, TestCaseError> {
            if !self.spawn_pending {
                return self.feed(Event::Tick);
            }
            self.spawn_pending = false;
            let result = self.spawn_results[self.spawns % self.spawn_results.len()];
            self.spawns += 1;
            let event = match result {
                SpawnResult::Spawned => {
                    self.next_pid += 1;
                    Event::Spawned { pid: self.next_pid }
                }
                SpawnResult::Failed => Event::SpawnFailed {
                    error: "cannot start service: boom".into(),
                },
                SpawnResult::PathsMissing => Event::PathsMissing {
                    missing: vec![PATHS[2].into()],
                },
            };
            self.feed(event)
        }

        fn check(&self) -> Result<(), TestCaseError> {
            let phase = self.m.phase();
            prop_assert_eq!(
                matches!(phase, Phase::Spawning { .. }),
                self.spawn_pending,
                "spawning exactly while a spawn is pending"
            );
            if matches!(
                phase,
                Phase::Starting { .. }
                    | Phase::Backoff { .. }
                    | Phase::Terminating { .. }
                    | Phase::Killing { .. }
            ) {
                prop_assert!(self.m.deadline().is_some(), "{phase:?} without a deadline");
            }
            if let (Phase::Running { .. }, Some(watchdog)) = (phase, self.m.watchdog())
                && watchdog.ready_at.is_some()
                && watchdog.interval.is_some()
            {
                prop_assert!(
                    self.m.deadline().is_some_and(
                        |at| at <= watchdog.since.unwrap() + watchdog.interval.unwrap()
                    ),
                    "a watched run without its deadline"
                );
            }
            if self.m.wanted() == Wanted::Running {
                let ok = match phase {
                    Phase::Spawning { .. }
                    | Phase::Starting { .. }
                    | Phase::Running { .. }
                    | Phase::Backoff { .. } => true,
                    // Waiting on a named condition that does not hold.
                    Phase::Waiting => {
                        !self.m.waiting_for().is_empty()
                            || (!self.m.waiting_oneshots().is_empty()
                                && self.m.waiting_oneshots() == self.m.oneshots_holding())
                            || (!self.m.waiting_checks().is_empty()
                                && self
                                    .m
                                    .waiting_checks()
                                    .iter()
                                    .all(|c| !self.passing.contains(c)))
                    }
                    Phase::Terminating { .. } | Phase::Killing { .. } => {
                        self.m.after_exit != AfterExit::Stop
                    }
                    _ => false,
                };
                prop_assert!(ok, "wanted running but {phase:?}");
                prop_assert_ne!(
                    self.m.status(),
                    Status::Inactive,
                    "wanted running but listed inactive in {:?}",
                    phase
                );
            }
            prop_assert!(
                self.m.held().is_empty() || self.m.deadline().is_some(),
                "a held action without a deadline"
            );
            // A start that waits for its answer is answered by what the machine still does:
            // the service is wanted running, or a spawn under way meets the stop.
            if self.m.start_pending && !matches!(phase, Phase::Spawning { .. }) {
                prop_assert_eq!(
                    self.m.wanted(),
                    Wanted::Running,
                    "a start waits on {:?}",
                    phase
                );
            }
            if phase == Phase::Completed {
                prop_assert_eq!(self.m.status(), Status::Inactive);
                prop_assert!(
                    self.m.completion().is_some(),
                    "completed without a completion"
                );
                prop_assert_eq!(self.m.deadline().filter(|_| self.m.held().is_empty()), None);
            }
            if let (Phase::Backoff { .. }, Some(check)) = (phase, &self.m.backoff_check) {
                prop_assert!(
                    self.firing.contains_key(check),
                    "backing off for check {check}, which is up"
                );
            }
            Ok(())
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn wanted_running_is_never_silently_dead(
            ops in proptest::collection::vec(op(), 1..80),
            spawn_results in proptest::collection::vec(spawn_result(), 1..8),
        ) {
            let mut sim = Sim {
                m: Machine::new("svc", 42),
                now: Instant::now(),
                next_pid: 100,
                spawn_results,
                spawns: 0,
                spawn_pending: false,
                firing: Firing::new(),
                firings: 0,
                passing: BTreeSet::new(),
            };
            for op in ops {
                let stopped_by_client = sim.m.client_stopped;
                let is_start = matches!(op, Op::Start { .. });
                let actions = match op {
                    Op::Start { ignore_failures, requires, grace, shape, again } => {
                        let policy = Sim::policy(ignore_failures, requires, grace, shape);
                        if again {
                            sim.feed(Event::Start(policy))?
                        } else {
                            sim.feed(Event::Ensure(policy))?
                        }
                    }
                    Op::Setup { state } => {
                        let state = match state {
                            0 => OneshotState::Completed,
                            1 => OneshotState::Running,
                            2 => OneshotState::Failed("exited with code 1".into()),
                            _ => OneshotState::Inactive,
                        };
                        let oneshots = Oneshots::from([("setup".to_owned(), state)]);
                        sim.feed(Event::Oneshots(Arc::new(oneshots)))?
                    }
                    Op::Stop => sim.feed(Event::Stop)?,
                    Op::AbortStart => sim.feed(Event::AbortStart)?,
                    Op::SpawnDone => sim.finish_spawn()?,
                    Op::Exit { code } => match sim.m.pid() {
                        Some(pid) => sim.feed(Event::Exited { pid, code })?,
                        None => sim.feed(Event::Tick)?,
                    },
                    Op::StaleExit => sim.feed(Event::Exited { pid: 1, code: 1 })?,
                    Op::Advance { millis } => {
                        sim.now += Duration::from_millis(millis);
                        sim.feed(Event::Tick)?
                    }
                    Op::PathChanged { which, exists, initial } => {
                        let mut all = Vec::new();
                        for event in sim.m.path_events(PATHS[which], exists, initial) {
                            all.extend(sim.feed(event)?);
                        }
                        all
                    }
                    Op::MissingNamed => sim.feed(Event::MissingNamed(vec![PATHS[2].into()]))?,
                    Op::CheckFires { which } => {
                        sim.firings += 1;
                        sim.firing.insert(CHECKS[which].into(), sim.firings);
                        sim.passing.remove(CHECKS[which]);
                        sim.feed(Event::Checks(sim.signals()))?
                    }
                    Op::CheckUp { which } => {
                        // A check comes up by succeeding.
                        if sim.firing.remove(CHECKS[which]).is_some() {
                            sim.passing.insert(CHECKS[which].into());
                        }
                        sim.feed(Event::Checks(sim.signals()))?
                    }
                    Op::Ready => match sim.m.pid() {
                        Some(pid) => sim.feed(Event::Ready { pid })?,
                        None => sim.feed(Event::Tick)?,
                    },
                    Op::Watchdog(said) => match sim.m.pid() {
                        Some(pid) => sim.feed(Event::Watchdog { pid, said })?,
                        None => sim.feed(Event::Tick)?,
                    },
                    Op::CheckPasses { which } => {
                        if !sim.firing.contains_key(CHECKS[which]) {
                            sim.passing.insert(CHECKS[which].into());
                        }
                        sim.feed(Event::Checks(sim.signals()))?
                    }
                };
                if stopped_by_client && !is_start {
                    prop_assert!(
                        !actions.contains(&Action::Spawn),
                        "a stopped service was spawned without a start: {actions:?}"
                    );
                }
                sim.check()?;
            }
        }
    }
}
