//! Transition tables for a service's own process. Time is a plain `Instant` advanced by hand.

use tokio::time::Instant;

use crate::services::machine::harness::{Harness, secs, spawns, start_done, stop_done};
use crate::services::machine::types::*;
use crate::services::machine::*;

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
fn a_running_machine_handed_over_goes_on_where_it_was() {
    let mut h = Harness::new();
    h.start(10);
    h.at(1.0).tick();
    // A quick exit later: backoff 1, then running again since 3 s.
    h.at(2.0).step(Event::Exited { pid: 10, code: 1 });
    let Phase::Backoff { until } = h.m.phase() else {
        panic!("expected backoff, got {:?}", h.m.phase());
    };
    h.now = until;
    let actions = h.tick();
    assert!(spawns(&actions));
    h.step(Event::Spawned { pid: 11 });
    let spawned = h.now;
    h.now = spawned + secs(1.0);
    h.tick();
    assert_eq!(h.m.phase(), Phase::Running { pid: 11 });
    let carried =
        h.m.carried(h.now)
            .expect("a running machine is handed over");
    assert_eq!(carried.pid(), Some(11));
    assert_eq!(carried.backoff_num, 1);
    assert_eq!(carried.running_for, Some(secs(1.0)));
    assert_eq!(carried.last_exit, Some(1));
    // The new program's clock starts elsewhere: the same durations from its now.
    let later = h.now + secs(1000.0);
    let adopted = Machine::adopted("svc", 9, h.m.policy.clone(), &carried, later);
    assert_eq!(adopted.phase(), Phase::Running { pid: 11 });
    assert_eq!(adopted.status(), Status::Active);
    assert_eq!(adopted.backoff_num(), 1);
    assert_eq!(
        adopted.deadline().map(|d| d - later),
        h.m.deadline().map(|d| d - h.now),
        "the backoff resets after the same time"
    );
    // Its exit is handled as the old machine's would be: backoff 2.
    let mut adopted = adopted;
    let actions = adopted.step(later, Event::Exited { pid: 11, code: 1 });
    assert!(
        actions.iter().any(|a| matches!(a, Action::Log(_))),
        "{actions:?}"
    );
    assert!(matches!(adopted.phase(), Phase::Backoff { .. }));
    assert_eq!(adopted.backoff_num(), 2);
}

#[test]
fn a_machine_being_spawned_is_not_handed_over() {
    let mut h = Harness::new();
    assert_eq!(h.m.carried(h.now), None, "never started");
    let policy = h.m.policy.clone();
    h.step(Event::Start(policy));
    assert_eq!(h.m.carried(h.now), None, "being spawned");
}

#[test]
fn a_restart_ending_its_process_is_handed_over_and_the_new_program_restarts_it() {
    let mut h = Harness::new();
    h.start(10);
    h.at(1.0).tick();
    // A file change's restart ends the process; the new program starts it again once it
    // has exited, as the old one would have.
    h.step(Event::FileChanged(FileAction::Restart));
    h.at(2.0).tick();
    assert!(matches!(h.m.phase(), Phase::Terminating { .. }));
    let carried = h.m.carried(h.now).expect("handed over");
    assert!(matches!(
        carried.phase,
        CarriedPhase::Stopping {
            pid: 10,
            killing: false,
            after: AfterExit::Respawn,
            ..
        }
    ));
    let (mut adopted, at) = handed_over(&h);
    assert_eq!(adopted.wanted(), Wanted::Running);
    assert_eq!(adopted.status(), h.m.status());
    let actions = adopted.step(at, Event::Exited { pid: 10, code: 0 });
    assert!(actions.contains(&Action::Spawn), "{actions:?}");
    assert_eq!(adopted.wanted(), Wanted::Running);
}

#[test]
fn a_failed_start_ending_its_process_is_handed_over_and_its_on_failure_follows() {
    let mut h = Harness::new();
    h.start(10);
    h.at(1.0).tick();
    // Ended as a failure (a failed start, a watchdog's): `on-failure` (restart, by
    // default) follows the exit in the new program, whatever the code.
    h.m.after_exit = AfterExit::Watchdog;
    h.m.phase = Phase::Killing {
        pid: 10,
        give_up_at: h.now + secs(5.0),
    };
    let (mut adopted, at) = handed_over(&h);
    assert!(matches!(adopted.phase(), Phase::Killing { pid: 10, .. }));
    assert_eq!(adopted.deadline(), Some(at + secs(5.0)));
    adopted.step(at, Event::Exited { pid: 10, code: 0 });
    assert!(matches!(adopted.phase(), Phase::Backoff { .. }));
    assert_eq!(adopted.backoff_num(), 1);
}

#[test]
fn a_stop_waiting_out_its_kill_delay_is_handed_over_and_finished_by_the_new_program() {
    let mut h = Harness::new();
    h.start(10);
    h.at(1.0).tick();
    h.step(Event::Stop);
    // Half the (5 s) kill-delay waited out by the old program.
    h.at(3.5);
    let (mut adopted, at) = handed_over(&h);
    assert!(matches!(
        adopted.phase(),
        Phase::Terminating { pid: 10, .. }
    ));
    assert_eq!(adopted.status(), Status::Inactive);
    assert_eq!(adopted.deadline(), Some(at + secs(2.5)));
    let actions = adopted.step(at + secs(2.5), Event::Tick);
    assert!(actions.contains(&Action::Signal {
        pid: 10,
        signal: GroupSignal::Kill
    }));
    // Killing is handed over too, with the time left before the stop gives up.
    let carried = adopted.carried(at + secs(3.0)).expect("handed over");
    assert_eq!(
        carried.phase,
        CarriedPhase::Stopping {
            pid: 10,
            killing: true,
            due_in: FAIL_DELAY - secs(0.5),
            after: AfterExit::Stop,
        }
    );
    let actions = adopted.step(at + secs(3.0), Event::Exited { pid: 10, code: -9 });
    assert_eq!(stop_done(&actions), Some(&StopOutcome::Stopped));
    assert_eq!(adopted.phase(), Phase::Stopped);
    // Stopped by a client: nothing restarts it.
    assert_eq!(adopted.wanted(), Wanted::Stopped);
}

#[test]
fn a_start_waiting_on_a_oneshot_run_is_handed_over_waiting() {
    let mut h = Harness::with_policy(Policy {
        oneshot: true,
        ..Policy::default()
    });
    h.start(10);
    let carried = h.m.carried(h.now).expect("handed over");
    assert!(carried.start_pending);
    let (mut adopted, at) = handed_over(&h);
    assert!(adopted.start_pending());
    let actions = adopted.step(at + secs(2.0), Event::Exited { pid: 10, code: 0 });
    assert_eq!(start_done(&actions), Some(&StartOutcome::Started));
    assert_eq!(adopted.phase(), Phase::Completed);
}

/// The machine a new program makes of `h`'s, handed over at `h.now`, with its clock
/// elsewhere: the instant it took over at.
fn handed_over(h: &Harness) -> (Machine, Instant) {
    let carried = h.m.carried(h.now).expect("handed over");
    let at = h.now + secs(1000.0);
    (
        Machine::adopted("svc", 9, h.m.policy.clone(), &carried, at),
        at,
    )
}

#[test]
fn an_exit_left_down_handed_over_stays_down() {
    let mut h = Harness::with_policy(Policy {
        on_failure: ExitAction::Ignore,
        ..Policy::default()
    });
    h.start(10);
    h.at(1.0).tick();
    h.at(2.0).step(Event::Exited { pid: 10, code: 4 });
    assert_eq!(h.m.status(), Status::Error);
    let (adopted, _) = handed_over(&h);
    assert_eq!(
        (adopted.phase(), adopted.status(), adopted.last_exit()),
        (Phase::Exited, Status::Error, Some(4))
    );
    assert_eq!(adopted.wanted(), Wanted::Stopped);
    assert_eq!(adopted.deadline(), None);
}

#[test]
fn a_starting_machine_handed_over_starts_when_its_okay_delay_ends() {
    let mut h = Harness::new();
    h.start(10);
    h.at(0.4);
    let (mut adopted, at) = handed_over(&h);
    assert!(matches!(adopted.phase(), Phase::Starting { pid: 10, .. }));
    assert_eq!(adopted.deadline(), Some(at + secs(0.6)));
    let actions = adopted.step(at + secs(0.6), Event::Tick);
    assert_eq!(start_done(&actions), Some(&StartOutcome::Started));
    assert_eq!(adopted.phase(), Phase::Running { pid: 10 });
}

#[test]
fn a_backoff_handed_over_keeps_its_step_and_the_time_left() {
    let mut h = Harness::new();
    h.start(10);
    h.at(1.0).tick();
    h.at(2.0).step(Event::Exited { pid: 10, code: 3 });
    h.step(Event::MissingNamed(vec!["/etc/app.conf".into()]));
    let Phase::Backoff { until } = h.m.phase() else {
        panic!("expected backoff, got {:?}", h.m.phase());
    };
    h.at(2.1);
    let left = until - h.now;
    let (mut adopted, at) = handed_over(&h);
    assert_eq!(adopted.status(), Status::Backoff);
    assert_eq!(adopted.backoff_num(), 1);
    assert_eq!(adopted.backoff_time(), h.m.backoff_time());
    assert_eq!(adopted.last_exit(), Some(3));
    assert_eq!(adopted.hints(), ["/etc/app.conf"]);
    assert_eq!(adopted.deadline(), Some(at + left));
    // Not restarted before its time, restarted at it.
    assert!(!spawns(&adopted.step(at + left - secs(0.01), Event::Tick)));
    assert!(spawns(&adopted.step(at + left, Event::Tick)));
    adopted.step(at + left, Event::Spawned { pid: 11 });
    assert_eq!(adopted.phase(), Phase::Running { pid: 11 });
    // The next failure is its second backoff.
    adopted.step(at + left + secs(1.0), Event::Exited { pid: 11, code: 3 });
    assert_eq!(adopted.backoff_num(), 2);
}

#[test]
fn a_wait_for_paths_handed_over_ends_when_they_appear() {
    let mut h = Harness::new();
    let policy = h.m.policy.clone();
    h.step(Event::Start(policy));
    h.step(Event::PathsMissing {
        missing: vec!["/run/ready".into()],
    });
    assert_eq!(h.m.status(), Status::Waiting);
    let (mut adopted, at) = handed_over(&h);
    assert_eq!(adopted.status(), Status::Waiting);
    assert_eq!(adopted.waiting_for(), ["/run/ready"]);
    assert_eq!(adopted.watched_paths().collect::<Vec<_>>(), ["/run/ready"]);
    assert_eq!(
        adopted.path_events("/run/ready", true, true),
        vec![Event::PathAppeared("/run/ready".into())]
    );
    let actions = adopted.step(at, Event::PathAppeared("/run/ready".into()));
    assert!(spawns(&actions));
    assert_eq!(start_done(&actions), None, "its start was answered before");
}

#[test]
fn a_file_change_due_when_handed_over_is_done_when_it_was_due() {
    let mut h = Harness::new();
    h.m.policy
        .on_file_change
        .insert("/etc/app.conf".into(), FileAction::Restart);
    h.start(10);
    h.at(1.0).tick();
    h.step(Event::FileChanged(FileAction::Restart));
    h.at(1.2);
    let (mut adopted, at) = handed_over(&h);
    assert_eq!(adopted.deadline(), Some(at + secs(0.3)));
    let actions = adopted.step(at + secs(0.3), Event::Tick);
    assert!(
        actions.contains(&Action::Signal {
            pid: 10,
            signal: GroupSignal::Term
        }),
        "{actions:?}"
    );
}
