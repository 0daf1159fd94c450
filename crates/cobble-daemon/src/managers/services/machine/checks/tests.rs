//! Transition tables for what the checks do. Time is a plain `Instant` advanced by hand.

use crate::checks::Firing;
use crate::services::machine::harness::{Harness, secs, signals, spawns, start_done, stop_done};
use crate::services::machine::types::*;
use crate::services::machine::*;

/// A harness whose service has passed the okay delay and runs as `pid` 10.
fn running() -> Harness {
    let mut h = Harness::new();
    h.start(10);
    h.at(1.0).tick();
    assert_eq!(h.m.phase(), Phase::Running { pid: 10 });
    h
}

// --- requires-checks ------------------------------------------------------------------------

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

// --- start-grace ----------------------------------------------------------------------------

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

// --- restart streaks ------------------------------------------------------------------------

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

// --- on-check-failure -----------------------------------------------------------------------

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

// --- re-execution ---------------------------------------------------------------------------

#[test]
fn a_handed_over_machine_keeps_where_its_checks_actions_stand() {
    let mut h = running();
    h.at(5.0).check_failed(ExitAction::Restart);
    back_up(&mut h, 10, 11);
    h.at(6.0).check_failed(ExitAction::Restart);
    back_up(&mut h, 11, 12);
    // Held until 7 s by the streak's spacing.
    assert!(!term(&h.at(6.5).check_failed(ExitAction::Restart)));
    let carried =
        h.m.carried(h.now)
            .expect("a running service is handed over");
    let mut adopted = Harness::with_policy(h.m.policy().clone());
    adopted.t0 = h.t0;
    adopted.now = h.now;
    adopted.firings = h.firings;
    adopted.m = Machine::adopted("svc", 7, h.m.policy().clone(), &carried, h.now);
    assert_eq!(adopted.m.streaks(), h.m.streaks());
    assert_eq!(adopted.m.held(), h.m.held());
    assert_eq!(adopted.m.deadline(), h.m.deadline());
    // The checks as they stand, told again: the firing it acted on is not acted on again.
    let firing = Firing::from([("chk".to_owned(), adopted.firings)]);
    assert_eq!(adopted.step(Event::Checks(signals(firing))), vec![]);
    // The held restart happens when it would have.
    assert_eq!(adopted.at(6.9).tick(), vec![]);
    assert!(adopted.at(7.0).tick().contains(&Action::Signal {
        pid: 12,
        signal: GroupSignal::Term
    }));
    assert_eq!(adopted.m.streaks()["chk"].restarts, 3);
}
