//! Transition tables for the service machine. Time is a plain `Instant` advanced by hand.

use super::*;
use crate::checks::Firing;

/// The signals of checks of which these are down, and none passes.
fn signals(firing: Firing) -> Arc<CheckSignals> {
    Arc::new(CheckSignals {
        firing,
        ..CheckSignals::default()
    })
}

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

struct Harness {
    m: Machine,
    t0: Instant,
    now: Instant,
    /// The firing number of the next check failure.
    firings: u64,
}

impl Harness {
    fn new() -> Harness {
        let t0 = Instant::now();
        Harness {
            m: Machine::new("svc", 7),
            t0,
            now: t0,
            firings: 0,
        }
    }

    fn with_policy(policy: Policy) -> Harness {
        let mut h = Harness::new();
        h.m.policy = policy;
        h
    }

    fn at(&mut self, s: f64) -> &mut Harness {
        self.now = self.t0 + secs(s);
        self
    }

    fn step(&mut self, event: Event) -> Vec<Action> {
        self.m.step(self.now, event)
    }

    /// Explicit start that spawns `pid`.
    fn start(&mut self, pid: u32) -> Vec<Action> {
        let policy = self.m.policy.clone();
        let mut actions = self.step(Event::Start(policy));
        if actions.contains(&Action::Spawn) {
            actions.extend(self.step(Event::Spawned { pid }));
        }
        actions
    }

    fn tick(&mut self) -> Vec<Action> {
        self.step(Event::Tick)
    }

    /// Check "chk", whose `on-check-failure` is `action`, fires (again).
    fn check_failed(&mut self, action: ExitAction) -> Vec<Action> {
        self.m.policy.on_check_failure.insert("chk".into(), action);
        self.firings += 1;
        let firing = Firing::from([("chk".to_owned(), self.firings)]);
        self.step(Event::Checks(signals(firing)))
    }

    /// No check is down any more.
    fn checks_up(&mut self) -> Vec<Action> {
        self.step(Event::Checks(Arc::default()))
    }
}

fn start_done(actions: &[Action]) -> Option<&StartOutcome> {
    actions.iter().find_map(|a| match a {
        Action::StartDone(o) => Some(o),
        _ => None,
    })
}

fn stop_done(actions: &[Action]) -> Option<&StopOutcome> {
    actions.iter().find_map(|a| match a {
        Action::StopDone(o) => Some(o),
        _ => None,
    })
}

#[test]
fn never_started_is_inactive_and_stop_says_so() {
    let mut h = Harness::new();
    assert_eq!(h.m.status(), Status::Inactive);
    assert_eq!(h.m.deadline(), None);
    let actions = h.step(Event::Stop);
    assert_eq!(stop_done(&actions), Some(&StopOutcome::NeverStarted));
}

#[test]
fn start_waits_for_the_okay_delay() {
    let mut h = Harness::new();
    let actions = h.start(10);
    assert_eq!(actions, vec![Action::Spawn]);
    assert_eq!(h.m.status(), Status::Active);
    assert!(matches!(h.m.phase(), Phase::Starting { pid: 10, .. }));
    assert_eq!(h.m.deadline(), Some(h.t0 + OKAY_DELAY));

    assert!(h.at(0.999).tick().is_empty());
    let actions = h.at(1.0).tick();
    assert_eq!(start_done(&actions), Some(&StartOutcome::Started));
    assert_eq!(h.m.phase(), Phase::Running { pid: 10 });
    assert_eq!(h.m.wanted(), Wanted::Running);
}

#[test]
fn start_of_a_started_service_is_a_no_op() {
    let mut h = Harness::new();
    h.start(10);
    let actions = h.start(11);
    assert_eq!(
        actions,
        vec![Action::StartDone(StartOutcome::AlreadyStarted)]
    );
    assert!(matches!(h.m.phase(), Phase::Starting { pid: 10, .. }));
}

#[test]
fn quick_exit_fails_the_start_and_backs_off() {
    let mut h = Harness::new();
    h.start(10);
    let actions = h.at(0.2).step(Event::Exited { pid: 10, code: 1 });
    assert_eq!(
        start_done(&actions),
        Some(&StartOutcome::Failed {
            error: "service start attempt: exited quickly with code 1, will restart".into(),
            with_output: true,
        })
    );
    let Phase::Backoff { until } = h.m.phase() else {
        panic!("expected backoff, got {:?}", h.m.phase());
    };
    let delay = until - h.now;
    assert!(delay >= secs(0.5) && delay <= secs(0.55), "{delay:?}");
    assert_eq!(h.m.status(), Status::Backoff);
    assert_eq!(h.m.last_exit(), Some(1));
}

#[test]
fn an_exit_on_its_own_ends_what_the_process_left_whatever_the_exit_action() {
    for (action, running) in [
        (ExitAction::Restart, false),
        (ExitAction::Ignore, false),
        (ExitAction::Shutdown, false),
        (ExitAction::Restart, true),
    ] {
        let mut h = Harness::with_policy(Policy {
            on_failure: action,
            kill_delay: secs(3.0),
            ..Policy::default()
        });
        h.start(10);
        if running {
            h.at(1.0).tick();
        }
        let actions = h.at(2.0).step(Event::Exited { pid: 10, code: 1 });
        assert!(
            actions.contains(&Action::EndRemains {
                pid: 10,
                kill_delay: secs(3.0)
            }),
            "{action:?}: {actions:?}"
        );
    }
    // A stop ends the group itself: no second ending once the process is gone.
    let mut h = Harness::new();
    h.start(10);
    h.at(1.0).tick();
    h.step(Event::Stop);
    let actions = h.step(Event::Exited { pid: 10, code: 143 });
    assert!(
        actions.contains(&Action::EndGroup { pid: 10 }),
        "{actions:?}"
    );
    assert!(
        !actions
            .iter()
            .any(|a| matches!(a, Action::EndRemains { .. })),
        "{actions:?}"
    );
}

#[test]
fn quick_exit_with_ignore_reports_the_action() {
    let mut h = Harness::with_policy(Policy {
        on_failure: ExitAction::Ignore,
        ..Policy::default()
    });
    h.start(10);
    let actions = h.step(Event::Exited { pid: 10, code: 3 });
    assert_eq!(
        start_done(&actions),
        Some(&StartOutcome::Failed {
            error: "service start attempt: exited quickly with code 3, will ignore".into(),
            with_output: true,
        })
    );
    assert_eq!(h.m.phase(), Phase::Exited);
    assert_eq!(h.m.status(), Status::Error);
    assert_eq!(h.m.wanted(), Wanted::Stopped);
}

#[test]
fn exit_zero_with_ignore_is_stopped() {
    let mut h = Harness::with_policy(Policy {
        on_success: ExitAction::Ignore,
        ..Policy::default()
    });
    h.start(10);
    h.at(1.0).tick();
    h.at(5.0).step(Event::Exited { pid: 10, code: 0 });
    assert_eq!(h.m.phase(), Phase::Stopped);
    assert_eq!(h.m.status(), Status::Inactive);
}

#[test]
fn shutdown_actions_map_to_exit_codes() {
    let cases = [
        (ExitAction::Shutdown, ExitAction::Restart, 0, 0),
        (ExitAction::Restart, ExitAction::Shutdown, 1, 10),
        (ExitAction::FailureShutdown, ExitAction::Restart, 0, 10),
        (ExitAction::Restart, ExitAction::SuccessShutdown, 2, 0),
    ];
    for (on_success, on_failure, code, want) in cases {
        let mut h = Harness::with_policy(Policy {
            on_success,
            on_failure,
            ..Policy::default()
        });
        h.start(10);
        h.at(1.0).tick();
        let actions = h.at(2.0).step(Event::Exited { pid: 10, code });
        assert!(
            actions.contains(&Action::Shutdown(want)),
            "{on_success:?}/{on_failure:?} code {code}: {actions:?}"
        );
        assert_eq!(h.m.phase(), Phase::Exited);
    }
}

#[test]
fn backoff_restarts_straight_to_running_and_grows_to_the_limit() {
    let mut h = Harness::new();
    h.start(1);
    h.at(1.0).tick();
    let mut t = 2.0;
    let mut delays = Vec::new();
    for pid in 1..=8 {
        h.at(t).step(Event::Exited { pid, code: 2 });
        let Phase::Backoff { until } = h.m.phase() else {
            panic!("expected backoff");
        };
        delays.push((until - h.now).as_secs_f64());
        h.now = until;
        assert_eq!(h.tick(), vec![Action::Spawn]);
        h.step(Event::Spawned { pid: pid + 1 });
        assert_eq!(h.m.phase(), Phase::Running { pid: pid + 1 });
        t = (h.now - h.t0).as_secs_f64() + 1.0;
    }
    let expected = [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0];
    for (got, want) in delays.iter().zip(expected) {
        assert!(*got >= want && *got <= want * 1.1, "{delays:?}");
    }
    assert_eq!(h.m.backoff_num(), 8);
}

#[test]
fn running_for_the_backoff_limit_resets_backoff() {
    let mut h = Harness::new();
    h.start(1);
    h.at(1.0).tick();
    h.at(2.0).step(Event::Exited { pid: 1, code: 1 });
    let Phase::Backoff { until } = h.m.phase() else {
        panic!()
    };
    h.now = until;
    h.tick();
    h.step(Event::Spawned { pid: 2 });
    let restarted = h.now;
    assert_eq!(h.m.deadline(), Some(restarted + secs(30.0)));
    h.now = restarted + secs(30.0);
    h.tick();
    assert_eq!(h.m.backoff_num(), 0);
    h.now += secs(1.0);
    h.step(Event::Exited { pid: 2, code: 1 });
    let Phase::Backoff { until } = h.m.phase() else {
        panic!()
    };
    assert!(
        until - h.now <= secs(0.55),
        "backoff restarted from the first delay"
    );
}

#[test]
fn spawn_failure_on_explicit_start_fails_the_start_and_keeps_retrying() {
    let mut h = Harness::new();
    let actions = h.step(Event::Start(Policy::default()));
    assert_eq!(actions, vec![Action::Spawn]);
    let error = "cannot start service: fork/exec /nope: no such file or directory";
    let actions = h.step(Event::SpawnFailed {
        error: error.into(),
    });
    assert_eq!(
        start_done(&actions),
        Some(&StartOutcome::Failed {
            error: error.into(),
            with_output: false,
        })
    );
    // Pebble stops here for good; the binary may yet appear, so cobble backs off.
    assert!(matches!(h.m.phase(), Phase::Backoff { .. }));
    assert_eq!(h.m.wanted(), Wanted::Running);
    assert!(h.m.deadline().is_some());
}

#[test]
fn spawn_failure_without_a_restart_policy_stops() {
    let mut h = Harness::with_policy(Policy {
        on_failure: ExitAction::Ignore,
        ..Policy::default()
    });
    h.step(Event::Start(h.m.policy.clone()));
    h.step(Event::SpawnFailed {
        error: "boom".into(),
    });
    assert_eq!(h.m.phase(), Phase::Stopped);
    assert_eq!(h.m.wanted(), Wanted::Stopped);
}

#[test]
fn spawn_failure_during_backoff_restart_backs_off_again() {
    // Regression: Pebble leaves the service in backoff with no timer armed.
    let mut h = Harness::new();
    h.start(1);
    h.at(1.0).tick();
    h.at(2.0).step(Event::Exited { pid: 1, code: 1 });
    let Phase::Backoff { until } = h.m.phase() else {
        panic!()
    };
    h.now = until;
    h.tick();
    h.step(Event::SpawnFailed {
        error: "boom".into(),
    });
    assert!(matches!(h.m.phase(), Phase::Backoff { .. }));
    assert!(h.m.deadline().is_some_and(|d| d > h.now));
    assert_eq!(h.m.backoff_num(), 2);
}

#[test]
fn stop_sends_sigterm_then_sigkill_then_gives_up() {
    let mut h = Harness::with_policy(Policy {
        kill_delay: secs(2.0),
        ..Policy::default()
    });
    h.start(10);
    h.at(1.0).tick();
    let actions = h.at(3.0).step(Event::Stop);
    assert_eq!(
        actions,
        vec![Action::Signal {
            pid: 10,
            signal: GroupSignal::Term
        }]
    );
    assert_eq!(h.m.status(), Status::Inactive);
    assert!(h.at(4.9).tick().is_empty());
    let actions = h.at(5.0).tick();
    assert_eq!(
        actions,
        vec![Action::Signal {
            pid: 10,
            signal: GroupSignal::Kill
        }]
    );
    assert!(matches!(h.m.phase(), Phase::Killing { .. }));
    let actions = h.at(10.0).tick();
    assert_eq!(
        stop_done(&actions),
        Some(&StopOutcome::Failed(
            "process still running after SIGTERM and SIGKILL".into()
        ))
    );
    assert_eq!(h.m.phase(), Phase::Stopped);
}

#[test]
fn stop_completes_when_the_process_exits() {
    let mut h = Harness::new();
    h.start(10);
    h.at(1.0).tick();
    h.at(2.0).step(Event::Stop);
    let actions = h.at(2.1).step(Event::Exited { pid: 10, code: -1 });
    assert_eq!(stop_done(&actions), Some(&StopOutcome::Stopped));
    assert_eq!(h.m.phase(), Phase::Stopped);
    assert_eq!(h.m.wanted(), Wanted::Stopped);
}

#[test]
fn stop_during_the_okay_delay_fails_the_start() {
    let mut h = Harness::new();
    h.start(10);
    let actions = h.at(0.5).step(Event::Stop);
    assert_eq!(
        start_done(&actions),
        Some(&StartOutcome::Failed {
            error: "stopped before the 1s okay delay".into(),
            with_output: false
        })
    );
    assert!(matches!(h.m.phase(), Phase::Terminating { .. }));
}

#[test]
fn stop_in_other_phases() {
    // backoff -> stopped at once
    let mut h = Harness::new();
    h.start(1);
    h.step(Event::Exited { pid: 1, code: 1 });
    assert_eq!(stop_done(&h.step(Event::Stop)), Some(&StopOutcome::Stopped));
    assert_eq!(h.m.phase(), Phase::Stopped);
    // stopped -> already stopped
    assert_eq!(
        stop_done(&h.step(Event::Stop)),
        Some(&StopOutcome::AlreadyStopped)
    );
    // exited -> stopped, "had already exited"
    let mut h = Harness::with_policy(Policy {
        on_failure: ExitAction::Ignore,
        ..Policy::default()
    });
    h.start(1);
    h.step(Event::Exited { pid: 1, code: 1 });
    assert_eq!(
        stop_done(&h.step(Event::Stop)),
        Some(&StopOutcome::HadExited)
    );
    assert_eq!(h.m.phase(), Phase::Stopped);
    // terminating -> already stopping
    let mut h = Harness::new();
    h.start(1);
    h.step(Event::Stop);
    assert_eq!(
        stop_done(&h.step(Event::Stop)),
        Some(&StopOutcome::AlreadyStopping)
    );
}

#[test]
fn start_while_terminating_is_refused() {
    let mut h = Harness::new();
    h.start(1);
    h.at(1.0).tick();
    h.step(Event::Stop);
    let actions = h.step(Event::Start(Policy::default()));
    assert_eq!(
        start_done(&actions),
        Some(&StartOutcome::Failed {
            error: "cannot start service while terminating".into(),
            with_output: false
        })
    );
    h.at(6.0).tick();
    let actions = h.step(Event::Start(Policy::default()));
    assert_eq!(
        start_done(&actions),
        Some(&StartOutcome::Failed {
            error: "cannot start service while killing".into(),
            with_output: false
        })
    );
}

#[test]
fn start_from_backoff_resets_and_spawns_now() {
    let mut h = Harness::new();
    h.start(1);
    h.at(1.0).tick();
    for pid in 1..4 {
        h.step(Event::Exited { pid, code: 1 });
        let Phase::Backoff { until } = h.m.phase() else {
            panic!()
        };
        h.now = until;
        h.tick();
        h.step(Event::Spawned { pid: pid + 1 });
    }
    h.step(Event::Exited { pid: 4, code: 1 });
    assert_eq!(h.m.backoff_num(), 4);
    let actions = h.start(20);
    assert_eq!(actions, vec![Action::Spawn]);
    assert_eq!(h.m.backoff_num(), 0);
    assert!(matches!(h.m.phase(), Phase::Starting { pid: 20, .. }));
}

#[test]
fn abort_start_kills_the_group() {
    let mut h = Harness::new();
    h.start(10);
    let actions = h.step(Event::AbortStart);
    assert!(actions.contains(&Action::Signal {
        pid: 10,
        signal: GroupSignal::Kill
    }));
    assert_eq!(h.m.phase(), Phase::Stopped);
    // The exit that follows is stale and changes nothing.
    assert!(h.step(Event::Exited { pid: 10, code: -1 }).is_empty());
    assert_eq!(h.m.phase(), Phase::Stopped);
}

#[test]
fn exits_of_other_pids_are_ignored() {
    let mut h = Harness::new();
    h.start(10);
    assert!(h.step(Event::Exited { pid: 99, code: 1 }).is_empty());
    assert!(matches!(h.m.phase(), Phase::Starting { pid: 10, .. }));
}

#[test]
fn next_backoff_sequence() {
    let p = Policy::default();
    let mut d = Duration::ZERO;
    let mut seq = Vec::new();
    for _ in 0..9 {
        d = next_backoff(&p, d);
        seq.push(d.as_secs_f64());
    }
    assert_eq!(seq, [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]);
}

// --- on-check-failure ---------------------------------------------------------------------

/// A harness whose service has passed the okay delay and runs as `pid` 10.
fn running() -> Harness {
    let mut h = Harness::new();
    h.start(10);
    h.at(1.0).tick();
    assert_eq!(h.m.phase(), Phase::Running { pid: 10 });
    h
}

/// Signals in which these checks pass and none is down.
fn passing(checks: &[&str]) -> Arc<CheckSignals> {
    Arc::new(CheckSignals {
        passing: checks.iter().map(|c| c.to_string()).collect(),
        ..CheckSignals::default()
    })
}

fn requiring(checks: &[&str]) -> Harness {
    Harness::with_policy(Policy {
        requires_checks: checks.iter().map(|c| c.to_string()).collect(),
        ..Policy::default()
    })
}

fn spawns(actions: &[Action]) -> bool {
    actions.contains(&Action::Spawn)
}

#[test]
fn requires_checks_waits_without_failing_the_start_and_spawns_when_the_last_passes() {
    let mut h = requiring(&["db", "cache"]);
    let actions = h.start(10);
    assert!(!spawns(&actions), "{actions:?}");
    assert_eq!(
        start_done(&actions),
        Some(&StartOutcome::Waiting {
            missing: vec!["check \"db\"".into(), "check \"cache\"".into()]
        })
    );
    assert!(actions.contains(&Action::Log(
        "Service \"svc\" waiting for checks \"db\" and \"cache\" to succeed".into()
    )));
    assert_eq!(
        (h.m.phase(), h.m.status()),
        (Phase::Waiting, Status::Waiting)
    );
    assert_eq!(h.m.waiting_checks(), ["db", "cache"]);
    assert_eq!(h.m.deadline(), None, "no poll: the checks' signals wake it");

    // One passes: still waiting, for the other alone, and it says so once.
    let actions = h.at(2.0).step(Event::Checks(passing(&["db"])));
    assert!(!spawns(&actions), "{actions:?}");
    assert_eq!(h.m.waiting_checks(), ["cache"]);
    assert_eq!(
        h.at(2.5).step(Event::Checks(passing(&["db"]))),
        vec![],
        "the same signals again change nothing"
    );

    // The last one passes: spawned at once, straight to running (the start was answered).
    let actions = h.at(3.0).step(Event::Checks(passing(&["db", "cache"])));
    assert_eq!(actions, vec![Action::Spawn]);
    h.step(Event::Spawned { pid: 11 });
    assert_eq!(h.m.phase(), Phase::Running { pid: 11 });
    assert!(h.m.waiting_checks().is_empty());
}

#[test]
fn requires_checks_that_pass_already_do_not_hold_the_start() {
    let mut h = requiring(&["db"]);
    h.step(Event::Checks(passing(&["db"])));
    let actions = h.start(10);
    assert!(spawns(&actions), "{actions:?}");
    h.at(1.0).tick();
    assert_eq!(h.m.phase(), Phase::Running { pid: 10 });
}

#[test]
fn a_stop_ends_the_wait_for_checks_and_a_later_pass_starts_nothing() {
    let mut h = requiring(&["db"]);
    h.start(10);
    let actions = h.at(1.0).step(Event::Stop);
    assert_eq!(stop_done(&actions), Some(&StopOutcome::Stopped));
    assert_eq!(h.m.status(), Status::Inactive);
    assert!(h.m.waiting_checks().is_empty());
    assert!(!spawns(&h.at(2.0).step(Event::Checks(passing(&["db"])))));
    assert_eq!(h.m.phase(), Phase::Stopped);
}

#[test]
fn required_checks_then_required_paths_are_waited_for_in_turn() {
    let mut h = requiring(&["db"]);
    h.start(10);
    assert!(spawns(&h.at(1.0).step(Event::Checks(passing(&["db"])))));
    // The spawn finds a required path missing: now it waits for that.
    h.step(Event::PathsMissing {
        missing: vec!["/certs/cert.pem".into()],
    });
    assert_eq!(h.m.phase(), Phase::Waiting);
    assert_eq!(h.m.waiting_for(), ["/certs/cert.pem"]);
    assert!(h.m.waiting_checks().is_empty());
    assert_eq!(
        h.at(2.0)
            .step(Event::PathAppeared("/certs/cert.pem".into())),
        vec![Action::Spawn]
    );
}

#[test]
fn a_required_check_that_fails_later_does_nothing_unless_on_check_failure_names_it() {
    let mut h = requiring(&["db"]);
    h.step(Event::Checks(passing(&["db"])));
    h.start(10);
    h.at(1.0).tick();
    let down = signals(Firing::from([("db".to_owned(), 1)]));
    assert_eq!(h.at(5.0).step(Event::Checks(down)), vec![]);
    assert_eq!(h.m.phase(), Phase::Running { pid: 10 });
}

#[test]
fn a_restart_for_a_required_check_waits_for_it_to_pass_again() {
    let mut h = requiring(&["db"]);
    h.m.policy
        .on_check_failure
        .insert("db".into(), ExitAction::Restart);
    h.step(Event::Checks(passing(&["db"])));
    h.start(10);
    h.at(1.0).tick();
    let down = signals(Firing::from([("db".to_owned(), 1)]));
    let actions = h.at(5.0).step(Event::Checks(down));
    assert!(actions.contains(&Action::Signal {
        pid: 10,
        signal: GroupSignal::Term
    }));
    h.at(5.1).step(Event::Exited { pid: 10, code: 143 });
    let Phase::Backoff { until } = h.m.phase() else {
        panic!("{:?}", h.m.phase());
    };
    // The backoff runs out while the check is still down: the service waits for it,
    // instead of starting a process that needs it.
    h.now = until;
    assert!(!spawns(&h.tick()));
    assert_eq!(
        (h.m.phase(), h.m.waiting_checks()),
        (Phase::Waiting, &["db".to_owned()][..])
    );
    assert_eq!(
        h.at(9.0).step(Event::Checks(passing(&["db"]))),
        vec![Action::Spawn]
    );
}

fn graced(grace: f64) -> Harness {
    let mut h = Harness::with_policy(Policy {
        start_grace: Some(secs(grace)),
        ..Policy::default()
    });
    h.m.policy
        .on_check_failure
        .insert("chk".into(), ExitAction::Restart);
    h.start(10);
    h.at(1.0).tick();
    assert_eq!(h.m.phase(), Phase::Running { pid: 10 });
    h
}

fn term(actions: &[Action]) -> bool {
    actions.contains(&Action::Signal {
        pid: 10,
        signal: GroupSignal::Term,
    })
}

#[test]
fn start_grace_holds_a_failing_checks_action_until_it_runs_out() {
    let mut h = graced(10.0);
    let actions = h.at(3.0).check_failed(ExitAction::Restart);
    assert!(!term(&actions), "{actions:?}");
    assert_eq!(
        actions,
        vec![Action::Log(
            "Service \"svc\" on-check-failure action for check \"chk\" held by start-grace for 7s"
                .into()
        )]
    );
    assert_eq!(h.m.held().get("chk"), Some(&(h.t0 + secs(10.0))));
    assert_eq!(h.m.grace_until(h.now), Some(h.t0 + secs(10.0)));
    assert_eq!(h.m.deadline(), Some(h.t0 + secs(10.0)));
    // The grace runs out with the check still down: the action is taken then.
    assert!(term(&h.at(10.0).tick()));
    assert!(h.m.held().is_empty());
}

#[test]
fn start_grace_ends_for_a_check_that_succeeded_since_the_start() {
    let mut h = graced(10.0);
    // The check succeeded at 2 s, after the start at 0 s, then failed into its threshold.
    h.m.policy
        .on_check_failure
        .insert("chk".into(), ExitAction::Restart);
    let signals = Arc::new(CheckSignals {
        firing: Firing::from([("chk".to_owned(), 1)]),
        last_success: BTreeMap::from([("chk".to_owned(), h.t0 + secs(2.0))]),
        ..CheckSignals::default()
    });
    assert!(term(&h.at(4.0).step(Event::Checks(signals))));
}

#[test]
fn a_success_before_the_start_does_not_end_the_grace() {
    let mut h = Harness::with_policy(Policy {
        start_grace: Some(secs(10.0)),
        ..Policy::default()
    });
    h.m.policy
        .on_check_failure
        .insert("chk".into(), ExitAction::Restart);
    h.at(5.0).start(10);
    h.at(6.0).tick();
    let signals = Arc::new(CheckSignals {
        firing: Firing::from([("chk".to_owned(), 1)]),
        last_success: BTreeMap::from([("chk".to_owned(), h.t0 + secs(4.0))]),
        ..CheckSignals::default()
    });
    assert!(!term(&h.at(8.0).step(Event::Checks(signals))));
    assert_eq!(h.m.held().get("chk"), Some(&(h.t0 + secs(15.0))));
}

#[test]
fn a_check_up_during_the_grace_drops_the_held_action() {
    let mut h = graced(10.0);
    h.at(3.0).check_failed(ExitAction::Restart);
    assert!(h.at(8.0).checks_up().is_empty());
    assert!(h.m.held().is_empty());
    assert!(!term(&h.at(10.0).tick()));
    assert_eq!(h.m.phase(), Phase::Running { pid: 10 });
}

#[test]
fn without_start_grace_a_slow_starter_is_restarted_at_the_first_firing() {
    let mut h = running();
    assert!(term(&h.at(3.0).check_failed(ExitAction::Restart)));
}

/// Runs the service back up after a check's restart: the exit, the backoff, the spawn.
fn back_up(h: &mut Harness, pid: u32, next: u32) {
    h.step(Event::Exited { pid, code: 143 });
    if let Phase::Backoff { until } = h.m.phase() {
        h.now = until;
        assert!(spawns(&h.tick()));
    }
    h.step(Event::Spawned { pid: next });
    assert_eq!(h.m.phase(), Phase::Running { pid: next });
}

#[test]
fn restarts_for_a_check_that_stays_down_are_spaced_by_the_backoff_schedule() {
    let mut h = running();
    // First firing at 5 s: restarted at once; the next may follow 0.5 s later.
    assert!(term(&h.at(5.0).check_failed(ExitAction::Restart)));
    assert_eq!(h.m.streaks()["chk"].restarts, 1);
    assert_eq!(h.m.streaks()["chk"].next_at, h.t0 + secs(5.5));
    back_up(&mut h, 10, 11);
    // Fires again at 6 s: past 5.5 s, so restarted; the spacing doubles to 1 s.
    let actions = h.at(6.0).check_failed(ExitAction::Restart);
    assert!(actions.contains(&Action::Signal {
        pid: 11,
        signal: GroupSignal::Term
    }));
    assert_eq!(h.m.streaks()["chk"].next_at, h.t0 + secs(7.0));
    back_up(&mut h, 11, 12);
    // Third firing at 7 s (at the spacing): restarted, next after 2 s more.
    assert!(
        h.at(7.0)
            .check_failed(ExitAction::Restart)
            .contains(&Action::Signal {
                pid: 12,
                signal: GroupSignal::Term
            })
    );
    assert_eq!(h.m.streaks()["chk"].next_at, h.t0 + secs(9.0));
    back_up(&mut h, 12, 13);
    // A firing at 8 s is too early: held until 9 s, even though the process runs fine.
    let actions = h.at(8.0).check_failed(ExitAction::Restart);
    assert_eq!(
        actions,
        vec![Action::Log(
            "Service \"svc\" on-check-failure action for check \"chk\" held by the check's restart backoff for 1s"
                .into()
        )]
    );
    assert_eq!(h.m.deadline(), Some(h.t0 + secs(9.0)));
    let actions = h.at(9.0).tick();
    assert!(actions.contains(&Action::Signal {
        pid: 13,
        signal: GroupSignal::Term
    }));
    assert_eq!(h.m.streaks()["chk"].restarts, 4);
    back_up(&mut h, 13, 14);
    // Running for the whole backoff limit does not reset the streak: the process was
    // never the problem.
    h.at(45.0).tick();
    assert_eq!(h.m.backoff_num(), 0);
    assert_eq!(h.m.streaks()["chk"].restarts, 4);
    // The check comes up: the streak is over, and the next failure acts at once.
    h.at(46.0).checks_up();
    assert!(h.m.streaks().is_empty());
    assert!(
        h.at(46.5)
            .check_failed(ExitAction::Restart)
            .contains(&Action::Signal {
                pid: 14,
                signal: GroupSignal::Term
            })
    );
}

#[test]
fn a_held_restart_is_dropped_when_the_check_comes_up() {
    let mut h = running();
    h.at(5.0).check_failed(ExitAction::Restart);
    back_up(&mut h, 10, 11);
    h.at(6.0).check_failed(ExitAction::Restart);
    back_up(&mut h, 11, 12);
    assert!(!term(&h.at(6.5).check_failed(ExitAction::Restart)));
    assert!(!h.m.held().is_empty());
    h.at(6.8).checks_up();
    assert!(h.m.held().is_empty());
    assert_eq!(h.at(7.5).tick(), vec![]);
    assert_eq!(h.m.phase(), Phase::Running { pid: 12 });
}

fn notifying() -> Harness {
    Harness::with_policy(Policy {
        notify: true,
        ..Policy::default()
    })
}

#[test]
fn a_notify_service_is_starting_until_it_says_it_is_ready() {
    let mut h = notifying();
    let actions = h.start(10);
    assert_eq!(start_done(&actions), None);
    assert_eq!(h.m.status(), Status::Starting);
    // Past the okay delay and still not ready: still starting, the start still waits.
    assert_eq!(start_done(&h.at(5.0).tick()), None);
    assert_eq!(h.m.status(), Status::Starting);
    // Another process's word is not its.
    assert_eq!(h.at(6.0).step(Event::Ready { pid: 99 }), vec![]);
    let actions = h.at(7.0).step(Event::Ready { pid: 10 });
    assert_eq!(start_done(&actions), Some(&StartOutcome::Started));
    assert_eq!(
        (h.m.phase(), h.m.status()),
        (Phase::Running { pid: 10 }, Status::Active)
    );
    // Once running, READY=1 again (after a reload) changes nothing.
    assert_eq!(h.at(8.0).step(Event::Ready { pid: 10 }), vec![]);
}

#[test]
fn a_notify_service_that_exits_before_it_is_ready_has_failed_to_start_and_backs_off() {
    let mut h = notifying();
    h.start(10);
    let actions = h.at(3.0).step(Event::Exited { pid: 10, code: 1 });
    assert_eq!(
        start_done(&actions),
        Some(&StartOutcome::Failed {
            error: "service start attempt: exited quickly with code 1, will restart".into(),
            with_output: true
        })
    );
    assert!(matches!(h.m.phase(), Phase::Backoff { .. }));
}

#[test]
fn a_notify_service_that_never_says_it_is_ready_fails_its_start_and_is_retried() {
    let mut h = notifying();
    h.start(10);
    let timeout = READY_TIMEOUT.as_secs_f64();
    assert_eq!(h.m.deadline(), Some(h.t0 + READY_TIMEOUT));
    let actions = h.at(timeout).tick();
    assert_eq!(
        start_done(&actions),
        Some(&StartOutcome::Failed {
            error: "service did not say it was ready (READY=1) within 1m30s".into(),
            with_output: true
        })
    );
    assert!(actions.contains(&Action::Signal {
        pid: 10,
        signal: GroupSignal::Term
    }));
    // On its way back: listed as backing off, and its on-failure action follows the exit.
    assert_eq!(h.m.status(), Status::Backoff);
    h.at(timeout + 0.1)
        .step(Event::Exited { pid: 10, code: 143 });
    let Phase::Backoff { until } = h.m.phase() else {
        panic!("{:?}", h.m.phase());
    };
    // The restart, too, is starting until it says it is ready.
    h.now = until;
    assert!(spawns(&h.tick()));
    h.step(Event::Spawned { pid: 11 });
    assert_eq!(h.m.status(), Status::Starting);
    h.step(Event::Ready { pid: 11 });
    assert_eq!(h.m.phase(), Phase::Running { pid: 11 });
}

#[test]
fn a_notify_service_stopped_before_it_is_ready_says_so() {
    let mut h = notifying();
    h.start(10);
    let actions = h.at(2.0).step(Event::Stop);
    assert_eq!(
        start_done(&actions),
        Some(&StartOutcome::Failed {
            error: "stopped before it said it was ready".into(),
            with_output: false
        })
    );
}

#[test]
fn a_notify_service_whose_policy_ignores_failures_stays_down_after_the_timeout() {
    let mut h = Harness::with_policy(Policy {
        notify: true,
        on_failure: ExitAction::Ignore,
        ..Policy::default()
    });
    h.start(10);
    let timeout = READY_TIMEOUT.as_secs_f64();
    h.at(timeout).tick();
    h.at(timeout + 0.1)
        .step(Event::Exited { pid: 10, code: 143 });
    assert_eq!((h.m.phase(), h.m.status()), (Phase::Exited, Status::Error));
}

#[test]
fn check_failure_restart_while_running_terminates_then_backs_off() {
    let mut h = running();
    let actions = h.at(5.0).check_failed(ExitAction::Restart);
    assert_eq!(
        actions,
        vec![
            Action::Log(
                "Service \"svc\" on-check-failure action is \"restart\", terminating process before restarting"
                    .into()
            ),
            Action::Signal {
                pid: 10,
                signal: GroupSignal::Term
            },
        ]
    );
    assert!(matches!(h.m.phase(), Phase::Terminating { pid: 10, .. }));
    // On its way back up, so listed as backing off already, never as inactive.
    assert_eq!(h.m.status(), Status::Backoff);
    assert_eq!(h.m.restarting_for_check(), Some("chk"));
    // The exit that follows is not a stop: it goes through backoff and restarts.
    let actions = h.at(5.1).step(Event::Exited { pid: 10, code: 143 });
    assert_eq!(stop_done(&actions), None);
    let Phase::Backoff { until } = h.m.phase() else {
        panic!("expected backoff, got {:?}", h.m.phase());
    };
    assert_eq!(h.m.status(), Status::Backoff);
    assert!(until - h.now >= secs(0.5) && until - h.now <= secs(0.55));
    assert_eq!(h.m.wanted(), Wanted::Running);
    h.now = until;
    assert_eq!(h.tick(), vec![Action::Spawn]);
}

#[test]
fn the_same_firing_reported_again_does_nothing() {
    let mut h = running();
    h.at(5.0).check_failed(ExitAction::Restart);
    h.at(5.1).step(Event::Exited { pid: 10, code: 143 });
    let phase = h.m.phase();
    // The firing map changed for another reason (another check); "chk" has not fired again.
    let firing = Firing::from([("chk".to_owned(), h.firings), ("other".to_owned(), 1)]);
    assert!(h.at(5.2).step(Event::Checks(signals(firing))).is_empty());
    assert_eq!(h.m.phase(), phase);
}

#[test]
fn a_check_up_again_during_its_restart_brings_the_service_back_without_backoff() {
    let mut h = running();
    h.at(5.0).check_failed(ExitAction::Restart);
    assert!(h.at(5.05).checks_up().is_empty(), "SIGTERM is already sent");
    let actions = h.at(5.1).step(Event::Exited { pid: 10, code: 143 });
    assert!(actions.contains(&Action::Spawn), "{actions:?}");
    assert!(actions.contains(&Action::EndGroup { pid: 10 }));
    h.step(Event::Spawned { pid: 11 });
    assert_eq!(h.m.phase(), Phase::Running { pid: 11 });
}

#[test]
fn a_backoff_a_check_caused_ends_when_the_check_is_up_again() {
    let mut h = running();
    h.at(5.0).check_failed(ExitAction::Restart);
    h.at(5.1).step(Event::Exited { pid: 10, code: 143 });
    assert!(matches!(h.m.phase(), Phase::Backoff { .. }));
    let actions = h.at(5.2).checks_up();
    assert_eq!(
        actions,
        vec![
            Action::Log("Service \"svc\" check \"chk\" is up again, restarting now".into()),
            Action::Spawn
        ]
    );
    h.step(Event::Spawned { pid: 11 });
    assert_eq!(h.m.phase(), Phase::Running { pid: 11 });
    // The old backoff deadline is gone with the phase: nothing happens at it.
    assert!(h.at(6.0).tick().is_empty());
}

#[test]
fn a_check_up_does_not_end_a_backoff_it_did_not_cause() {
    let mut h = running();
    h.at(5.0).step(Event::Exited { pid: 10, code: 1 });
    h.at(5.1).check_failed(ExitAction::Restart);
    assert!(matches!(h.m.phase(), Phase::Backoff { .. }));
    assert!(h.at(5.2).checks_up().is_empty());
    assert!(matches!(h.m.phase(), Phase::Backoff { .. }));
}

/// The case that started it: a check keeps failing and its action keeps restarting the
/// service with growing backoff; the check passes while the service backs off. No restart
/// may follow once the check is up, and the service must not sit out the old backoff.
#[test]
fn no_restart_follows_once_the_check_is_up() {
    let mut h = running();
    let mut t = 1.5;
    let mut pid = 10;
    for _ in 0..5 {
        h.at(t).check_failed(ExitAction::Restart);
        h.at(t + 0.05).step(Event::Exited { pid, code: 143 });
        let Phase::Backoff { until } = h.m.phase() else {
            panic!("expected backoff, got {:?}", h.m.phase());
        };
        h.now = until;
        assert_eq!(h.tick(), vec![Action::Spawn]);
        pid += 1;
        h.step(Event::Spawned { pid });
        t = (until - h.t0).as_secs_f64() + 0.5;
    }
    // One more restart, and the check passes while the service backs off from it.
    h.at(t).check_failed(ExitAction::Restart);
    h.at(t + 0.05).step(Event::Exited { pid, code: 143 });
    let Phase::Backoff { until } = h.m.phase() else {
        panic!("expected backoff");
    };
    assert!(h.at(t + 0.1).checks_up().contains(&Action::Spawn));
    pid += 1;
    h.step(Event::Spawned { pid });
    // Past the old backoff deadline and far beyond: the service just runs.
    for later in [until, until + secs(8.0), until + secs(60.0)] {
        h.now = later;
        let actions = h.tick();
        assert!(
            !actions
                .iter()
                .any(|a| matches!(a, Action::Signal { .. } | Action::Spawn)),
            "{actions:?}"
        );
    }
    assert_eq!(h.m.phase(), Phase::Running { pid });
}

#[test]
fn a_stop_while_spawning_is_applied_to_what_the_spawn_produces() {
    // The spawn succeeds: the new process is stopped at once.
    let mut h = Harness::new();
    assert_eq!(h.step(Event::Start(Policy::default())), vec![Action::Spawn]);
    assert!(
        h.step(Event::Stop).is_empty(),
        "answered once the spawn is done"
    );
    let actions = h.step(Event::Spawned { pid: 7 });
    assert_eq!(
        start_done(&actions),
        Some(&StartOutcome::Failed {
            error: "stopped before the 1s okay delay".into(),
            with_output: false
        })
    );
    assert!(actions.contains(&Action::Signal {
        pid: 7,
        signal: GroupSignal::Term
    }));
    let actions = h.step(Event::Exited { pid: 7, code: 143 });
    assert_eq!(stop_done(&actions), Some(&StopOutcome::Stopped));
    assert_eq!(h.m.phase(), Phase::Stopped);

    // The spawn fails: stopped, and nothing retries.
    let mut h = Harness::new();
    h.step(Event::Start(Policy::default()));
    h.step(Event::Stop);
    let actions = h.step(Event::SpawnFailed {
        error: "cannot start service: boom".into(),
    });
    assert_eq!(stop_done(&actions), Some(&StopOutcome::Stopped));
    assert_eq!(h.m.phase(), Phase::Stopped);
    assert_eq!(h.m.deadline(), None);

    // Paths are missing: stopped, not waiting.
    let mut h = Harness::new();
    h.step(Event::Start(Policy::default()));
    h.step(Event::Stop);
    let actions = h.step(Event::PathsMissing {
        missing: vec!["/a".into()],
    });
    assert_eq!(stop_done(&actions), Some(&StopOutcome::Stopped));
    assert_eq!(h.m.phase(), Phase::Stopped);
    assert_eq!(h.m.watched_paths().count(), 0);
}

/// A path both required and watched for changes: its appearance starts the service, and the
/// same change must not restart it again once the debounce window closes.
#[test]
fn a_required_path_that_appears_starts_the_service_once() {
    let mut h = Harness::with_policy(Policy {
        on_file_change: [("/certs/cert.pem".to_owned(), FileAction::Restart)].into(),
        ..Policy::default()
    });
    h.step(Event::Start(h.m.policy.clone()));
    h.step(Event::PathsMissing {
        missing: vec!["/certs/cert.pem".into()],
    });
    let events = h.m.path_events("/certs/cert.pem", true, false);
    assert_eq!(
        events,
        vec![
            Event::PathAppeared("/certs/cert.pem".into()),
            Event::FileChanged(FileAction::Restart)
        ]
    );
    let mut actions = Vec::new();
    for event in events {
        actions.extend(h.at(1.0).step(event));
    }
    assert_eq!(actions, vec![Action::Spawn]);
    h.step(Event::Spawned { pid: 3 });
    for t in [1.5, 2.0, 10.0] {
        assert!(h.at(t).tick().is_empty(), "restarted again at {t} s");
    }
    assert_eq!(h.m.phase(), Phase::Running { pid: 3 });
}

/// Ticks can come late; what a process achieved by the time of the next event counts.
#[test]
fn an_exit_after_a_late_tick_counts_the_time_the_process_ran() {
    // Past the okay delay, no tick yet: the start succeeded, the exit is an ordinary one.
    let mut h = Harness::new();
    h.start(1);
    let actions = h.at(1.5).step(Event::Exited { pid: 1, code: 1 });
    assert_eq!(start_done(&actions), Some(&StartOutcome::Started));
    assert!(matches!(h.m.phase(), Phase::Backoff { .. }));

    // Ran past the backoff limit, no tick yet: the next backoff starts from the first delay.
    let mut h = Harness::new();
    h.start(1);
    h.at(1.0).tick();
    for (t, pid) in [(2.0, 1), (4.0, 2), (7.0, 3)] {
        h.at(t).step(Event::Exited { pid, code: 1 });
        let Phase::Backoff { until } = h.m.phase() else {
            panic!()
        };
        h.now = until;
        h.tick();
        h.step(Event::Spawned { pid: pid + 1 });
    }
    assert_eq!(h.m.backoff_num(), 3);
    h.now += secs(31.0);
    h.step(Event::Exited { pid: 4, code: 1 });
    assert_eq!(h.m.backoff_num(), 1, "reset before this failure");
    assert_eq!(h.m.backoff_time(), secs(0.5));
}

#[test]
fn watched_paths_follow_the_phase() {
    let mut h = Harness::with_policy(Policy {
        on_file_change: [("/etc/app.conf".to_owned(), FileAction::Restart)].into(),
        ..Policy::default()
    });
    assert_eq!(h.m.watched_paths().count(), 0, "not wanted running");
    h.start(1);
    assert_eq!(h.m.watched_paths().collect::<Vec<_>>(), ["/etc/app.conf"]);
    assert_eq!(
        h.m.path_events("/etc/app.conf", false, false),
        vec![Event::FileChanged(FileAction::Restart)],
        "a deletion is a change too"
    );
    assert!(
        h.m.path_events("/etc/app.conf", true, true).is_empty(),
        "being watched is no change"
    );
    h.at(0.5).step(Event::Exited { pid: 1, code: 1 });
    h.step(Event::MissingNamed(vec![
        "/etc/app.conf".into(),
        "/x".into(),
    ]));
    let watched: Vec<&str> = h.m.watched_paths().collect();
    assert_eq!(watched, ["/etc/app.conf", "/x", "/etc/app.conf"]);
    h.step(Event::Stop);
    assert_eq!(h.m.watched_paths().count(), 0, "stopped by a client");
}

#[test]
fn check_failure_restart_escalates_to_sigkill_and_then_keeps_trying() {
    let mut h = running();
    h.at(5.0).check_failed(ExitAction::Restart);
    let actions = h.at(10.0).tick();
    assert!(actions.contains(&Action::Signal {
        pid: 10,
        signal: GroupSignal::Kill
    }));
    let actions = h.at(15.0).tick();
    assert_eq!(stop_done(&actions), None, "no client waits for this stop");
    // Pebble ends up stopped here and never restarts; the service is still wanted running.
    assert!(
        matches!(h.m.phase(), Phase::Backoff { .. }),
        "{:?}",
        h.m.phase()
    );
    assert_eq!(h.m.wanted(), Wanted::Running);
}

#[test]
fn check_failure_restarts_a_service_down_by_its_policy_but_not_one_a_client_stopped() {
    // on-success: ignore left it stopped: not a client's stop, so a failing check restarts it.
    let mut h = Harness::with_policy(Policy {
        on_success: ExitAction::Ignore,
        ..Policy::default()
    });
    h.start(10);
    h.at(1.0).tick();
    h.at(2.0).step(Event::Exited { pid: 10, code: 0 });
    assert_eq!(h.m.phase(), Phase::Stopped);
    h.at(3.0).check_failed(ExitAction::Restart);
    assert!(matches!(h.m.phase(), Phase::Backoff { .. }));
    assert_eq!(h.m.wanted(), Wanted::Running);
    // A client's stop is final.
    h.at(3.1).step(Event::Stop);
    assert!(h.at(4.0).check_failed(ExitAction::Restart).is_empty());
    assert_eq!(h.m.phase(), Phase::Stopped);
}

#[test]
fn check_failure_restart_in_backoff_waits_for_the_current_backoff() {
    let mut h = running();
    h.at(2.0).step(Event::Exited { pid: 10, code: 1 });
    let before = h.m.phase();
    assert!(matches!(before, Phase::Backoff { .. }));
    let actions = h.at(2.1).check_failed(ExitAction::Restart);
    assert_eq!(
        actions,
        vec![Action::Log(
            "Service \"svc\" on-check-failure action is \"restart\", waiting for current backoff"
                .into()
        )]
    );
    assert_eq!(h.m.phase(), before);
    assert_eq!(h.m.backoff_num(), 1);
}

#[test]
fn check_failure_restart_after_exit_backs_off() {
    let mut h = Harness::with_policy(Policy {
        on_failure: ExitAction::Ignore,
        ..Policy::default()
    });
    h.start(10);
    h.at(1.0).tick();
    h.at(2.0).step(Event::Exited { pid: 10, code: 1 });
    assert_eq!(h.m.phase(), Phase::Exited);
    let actions = h.at(3.0).check_failed(ExitAction::Restart);
    assert!(
        actions.contains(&Action::Log(
            "Service \"svc\" on-check-failure action is \"restart\", waiting ~500ms before restart (backoff 1)"
                .into()
        )),
        "{actions:?}"
    );
    assert!(matches!(h.m.phase(), Phase::Backoff { .. }));
    assert_eq!(h.m.wanted(), Wanted::Running);
}

#[test]
fn check_failure_shutdown_actions_stop_the_daemon() {
    let cases = [
        (ExitAction::Shutdown, 11, "failure"),
        (ExitAction::SuccessShutdown, 0, "success"),
    ];
    for (action, code, kind) in cases {
        let mut h = running();
        let actions = h.at(2.0).check_failed(action);
        assert_eq!(
            actions,
            vec![
                Action::Log(format!(
                    "Service \"svc\" on-check-failure action is \"{}\", triggering {kind} shutdown",
                    action.as_str()
                )),
                Action::Shutdown(code),
            ]
        );
        assert_eq!(h.m.phase(), Phase::Running { pid: 10 });
    }
    // An exited service shuts the daemon down too.
    let mut h = Harness::with_policy(Policy {
        on_failure: ExitAction::Ignore,
        ..Policy::default()
    });
    h.start(10);
    h.at(1.0).tick();
    h.at(2.0).step(Event::Exited { pid: 10, code: 1 });
    let actions = h.at(3.0).check_failed(ExitAction::Shutdown);
    assert!(actions.contains(&Action::Shutdown(CHECK_FAILURE_EXIT_CODE)));
}

#[test]
fn check_failure_ignore_does_nothing() {
    let mut h = running();
    assert!(h.at(2.0).check_failed(ExitAction::Ignore).is_empty());
    assert_eq!(h.m.phase(), Phase::Running { pid: 10 });
}

#[test]
fn check_failure_is_ignored_unless_running_backing_off_or_exited() {
    let actions = [
        ExitAction::Restart,
        ExitAction::Shutdown,
        ExitAction::SuccessShutdown,
    ];
    for action in actions {
        // Never started.
        let mut h = Harness::new();
        assert!(h.check_failed(action).is_empty());
        assert_eq!(h.m.phase(), Phase::Idle);
        // Within the okay delay.
        let mut h = Harness::new();
        h.start(10);
        assert!(h.at(0.5).check_failed(action).is_empty());
        assert!(matches!(h.m.phase(), Phase::Starting { .. }));
        // Stopping, and stopped.
        let mut h = running();
        h.at(2.0).step(Event::Stop);
        assert!(h.at(2.1).check_failed(action).is_empty());
        assert!(matches!(h.m.phase(), Phase::Terminating { .. }));
        h.at(2.2).step(Event::Exited { pid: 10, code: 0 });
        assert_eq!(h.m.phase(), Phase::Stopped);
        assert!(h.at(3.0).check_failed(action).is_empty());
        assert_eq!(h.m.phase(), Phase::Stopped);
    }
}

#[test]
fn missing_required_paths_make_a_start_wait_not_fail() {
    let mut h = Harness::new();
    assert_eq!(h.step(Event::Start(Policy::default())), vec![Action::Spawn]);
    let actions = h.step(Event::PathsMissing {
        missing: vec!["/certs/cert.pem".into()],
    });
    assert_eq!(
        start_done(&actions),
        Some(&StartOutcome::Waiting {
            missing: vec!["/certs/cert.pem".into()]
        })
    );
    assert_eq!(h.m.phase(), Phase::Waiting);
    assert_eq!(h.m.status(), Status::Waiting);
    assert_eq!(h.m.waiting_for(), ["/certs/cert.pem"]);
    assert_eq!(
        h.m.deadline(),
        None,
        "waiting on a named condition, not a timer"
    );
    // The path appears: spawn at once, straight to running (nobody waits on an okay delay).
    assert_eq!(
        h.m.path_events("/certs/cert.pem", true, true),
        vec![Event::PathAppeared("/certs/cert.pem".into())]
    );
    assert!(h.m.path_events("/certs/cert.pem", false, false).is_empty());
    assert!(h.m.path_events("/elsewhere", true, false).is_empty());
    assert_eq!(
        h.step(Event::PathAppeared("/certs/cert.pem".into())),
        vec![Action::Spawn]
    );
    h.step(Event::Spawned { pid: 5 });
    assert_eq!(h.m.phase(), Phase::Running { pid: 5 });
    assert!(h.m.waiting_for().is_empty());
}

#[test]
fn stop_while_waiting_stops_and_paths_appearing_later_do_nothing() {
    let mut h = Harness::new();
    h.step(Event::Start(Policy::default()));
    h.step(Event::PathsMissing {
        missing: vec!["/a".into()],
    });
    assert_eq!(stop_done(&h.step(Event::Stop)), Some(&StopOutcome::Stopped));
    assert_eq!(h.m.phase(), Phase::Stopped);
    assert!(h.m.path_events("/a", true, false).is_empty());
    assert!(h.step(Event::PathAppeared("/a".into())).is_empty());
    assert_eq!(h.m.phase(), Phase::Stopped);
}

#[test]
fn a_missing_path_appearing_ends_the_backoff_early() {
    let mut h = Harness::new();
    h.start(1);
    h.at(0.1).step(Event::Exited { pid: 1, code: 255 });
    assert!(matches!(h.m.phase(), Phase::Backoff { .. }));
    h.step(Event::MissingNamed(vec!["/certs/cert.pem".into()]));
    assert_eq!(h.m.hints(), ["/certs/cert.pem"]);
    assert!(h.m.watched_paths().any(|p| p == "/certs/cert.pem"));
    assert_eq!(
        h.m.path_events("/certs/cert.pem", true, false),
        vec![Event::RetryNow]
    );
    let actions = h.at(0.2).step(Event::RetryNow);
    assert!(actions.contains(&Action::Spawn), "{actions:?}");
    h.step(Event::Spawned { pid: 2 });
    assert_eq!(h.m.phase(), Phase::Running { pid: 2 });
    assert!(h.m.hints().is_empty(), "forgotten once it runs");
    // Outside backoff it means nothing.
    assert!(h.step(Event::RetryNow).is_empty());
}

#[test]
fn file_changes_in_a_burst_restart_once_and_without_backoff() {
    let mut h = Harness::new();
    h.start(1);
    h.at(1.0).tick();
    h.at(5.0).step(Event::FileChanged(FileAction::Restart));
    h.at(5.3).step(Event::FileChanged(FileAction::Restart));
    assert_eq!(
        h.m.deadline(),
        Some(h.t0 + secs(5.5)),
        "debounced from the first"
    );
    assert!(h.at(5.4).tick().is_empty());
    let actions = h.at(5.5).tick();
    assert!(actions.contains(&Action::Signal {
        pid: 1,
        signal: GroupSignal::Term
    }));
    assert_eq!(h.m.status(), Status::Active, "it comes back at once");
    let actions = h.at(5.6).step(Event::Exited { pid: 1, code: 0 });
    assert!(
        actions.contains(&Action::Spawn),
        "respawned at once: {actions:?}"
    );
    h.step(Event::Spawned { pid: 2 });
    assert_eq!(h.m.phase(), Phase::Running { pid: 2 });
    assert_eq!(h.m.backoff_num(), 0);
    assert_eq!(
        h.m.deadline(),
        Some(h.now + secs(30.0)),
        "only the backoff reset is armed"
    );
}

#[test]
fn file_change_signals_the_main_process_and_a_restart_wins_a_burst() {
    let mut h = Harness::new();
    h.start(1);
    h.at(1.0).tick();
    h.at(2.0)
        .step(Event::FileChanged(FileAction::Signal("SIGHUP".into())));
    assert_eq!(
        h.at(2.5).tick(),
        vec![Action::SignalProcess {
            pid: 1,
            signal: "SIGHUP".into()
        }]
    );
    h.at(3.0)
        .step(Event::FileChanged(FileAction::Signal("SIGHUP".into())));
    h.at(3.1).step(Event::FileChanged(FileAction::Restart));
    h.at(3.2)
        .step(Event::FileChanged(FileAction::Signal("SIGUSR1".into())));
    let actions = h.at(3.5).tick();
    assert!(
        actions.contains(&Action::Signal {
            pid: 1,
            signal: GroupSignal::Term
        }),
        "{actions:?}"
    );
}

#[test]
fn file_changes_are_ignored_for_a_stopped_service_and_wait_for_the_okay_delay() {
    let mut h = Harness::new();
    assert!(h.step(Event::FileChanged(FileAction::Restart)).is_empty());
    assert_eq!(h.m.deadline(), None);
    h.start(1);
    h.at(0.2).step(Event::FileChanged(FileAction::Restart));
    // Due at 0.7 s, inside the okay delay: postponed until the start has its outcome.
    assert!(h.at(0.7).tick().is_empty());
    let actions = h.at(1.0).tick();
    assert_eq!(start_done(&actions), Some(&StartOutcome::Started));
    assert!(actions.contains(&Action::Signal {
        pid: 1,
        signal: GroupSignal::Term
    }));
}

#[test]
fn a_restart_whose_process_survives_sigkill_backs_off() {
    let mut h = Harness::with_policy(Policy {
        kill_delay: secs(1.0),
        ..Policy::default()
    });
    h.start(1);
    h.at(1.0).tick();
    h.at(2.0).step(Event::FileChanged(FileAction::Restart));
    h.at(2.5).tick(); // SIGTERM
    h.at(3.5).tick(); // SIGKILL
    h.at(8.5).tick(); // gave up on it
    assert!(
        matches!(h.m.phase(), Phase::Backoff { .. }),
        "{:?}",
        h.m.phase()
    );
    assert_eq!(h.m.wanted(), Wanted::Running);
}

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
            /// The policy has a start grace, and says when it is ready.
            grace: bool,
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
    }

    const CHECKS: [&str; 2] = ["alive", "ready"];
    const PATHS: [&str; 3] = ["/certs/cert.pem", "/config", "/missing"];

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            1 => (any::<bool>(), any::<bool>(), any::<bool>())
                .prop_map(|(ignore_failures, requires, grace)| Op::Start { ignore_failures, requires, grace }),
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
        fn policy(ignore_failures: bool, requires: bool, grace: bool) -> Policy {
            Policy {
                requires_checks: if requires {
                    vec![CHECKS[1].to_owned()]
                } else {
                    Vec::new()
                },
                start_grace: grace.then_some(Duration::from_secs(5)),
                notify: grace,
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
            if self.m.wanted() == Wanted::Running {
                let ok = match phase {
                    Phase::Spawning { .. }
                    | Phase::Starting { .. }
                    | Phase::Running { .. }
                    | Phase::Backoff { .. } => true,
                    // Waiting on a named condition that does not hold.
                    Phase::Waiting => {
                        !self.m.waiting_for().is_empty()
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
                    Op::Start { ignore_failures, requires, grace } => {
                        sim.feed(Event::Start(Sim::policy(ignore_failures, requires, grace)))?
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

#[test]
fn a_kernel_kill_is_named_in_the_start_failure_and_the_log_and_forgotten_at_the_next_exit() {
    let mut h = Harness::new();
    h.start(10);
    let cause = "killed by the OOM killer at memory-max 64M";
    // A word on another process is not this one's.
    h.at(0.1).step(Event::KilledBy {
        pid: 99,
        cause: cause.into(),
    });
    assert_eq!(h.m.last_exit_cause(), None);
    h.step(Event::KilledBy {
        pid: 10,
        cause: cause.into(),
    });
    let actions = h.at(0.2).step(Event::Exited { pid: 10, code: 137 });
    assert_eq!(
        start_done(&actions),
        Some(&StartOutcome::Failed {
            error: format!(
                "service start attempt: exited quickly with code 137 ({cause}), will restart"
            ),
            with_output: true,
        })
    );
    assert!(
        actions.contains(&Action::Log(format!(
            "Service \"svc\" stopped unexpectedly with code 137 ({cause})"
        ))),
        "{actions:?}"
    );
    assert_eq!(h.m.last_exit_cause(), Some(cause));
    assert_eq!(h.m.status(), Status::Backoff);
    // The restart that follows exits on its own: no cause any more.
    h.at(5.0).tick();
    h.step(Event::Spawned { pid: 11 });
    let actions = h.at(6.0).step(Event::Exited { pid: 11, code: 1 });
    assert!(
        actions.contains(&Action::Log(
            "Service \"svc\" stopped unexpectedly with code 1".into()
        )),
        "{actions:?}"
    );
    assert_eq!(h.m.last_exit_cause(), None);
}

#[test]
fn a_failed_spawn_is_remembered_until_a_spawn_succeeds() {
    let mut h = Harness::new();
    h.step(Event::Start(Policy::default()));
    h.step(Event::SpawnFailed {
        error:
            "cannot start service: cannot set rlimit nofile to 2000000000: operation not permitted"
                .into(),
    });
    assert_eq!(
        h.m.spawn_error(),
        Some(
            "cannot start service: cannot set rlimit nofile to 2000000000: operation not permitted"
        )
    );
    h.at(5.0).tick();
    h.step(Event::Spawned { pid: 12 });
    assert_eq!(h.m.spawn_error(), None);
}
