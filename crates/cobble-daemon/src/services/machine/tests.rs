//! Transition tables for the service machine. Time is a plain `Instant` advanced by hand.

use super::*;

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

struct Harness {
    m: Machine,
    t0: Instant,
    now: Instant,
}

impl Harness {
    fn new() -> Harness {
        let t0 = Instant::now();
        Harness {
            m: Machine::new("svc", 7),
            t0,
            now: t0,
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
fn spawn_failure_on_explicit_start_stops_the_service() {
    let mut h = Harness::new();
    let actions = h.step(Event::Start(Policy::default()));
    assert_eq!(actions, vec![Action::Spawn]);
    let actions = h.step(Event::SpawnFailed {
        error: "cannot start service: fork/exec /nope: no such file or directory".into(),
    });
    assert_eq!(
        start_done(&actions),
        Some(&StartOutcome::Failed {
            error: "cannot start service: fork/exec /nope: no such file or directory".into(),
            with_output: false,
        })
    );
    assert_eq!(h.m.phase(), Phase::Stopped);
    assert_eq!(h.m.status(), Status::Inactive);
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
