//! Transition tables for one-shots and the services ordered after them. Time is a plain
//! `Instant` advanced by hand.

use std::sync::Arc;

use crate::services::machine::harness::{Harness, secs, spawns, start_done, stop_done};
use crate::services::machine::types::*;

fn oneshot() -> Harness {
    Harness::with_policy(Policy {
        oneshot: true,
        ..Policy::default()
    })
}

/// A service ordered after the one-shot "setup", which it `requires:` too if `required`.
fn after_setup(required: bool) -> Harness {
    Harness::with_policy(Policy {
        after_oneshots: vec![OneshotDep {
            name: "setup".into(),
            required,
        }],
        ..Policy::default()
    })
}

fn setup(state: OneshotState) -> Event {
    Event::Oneshots(Arc::new(Oneshots::from([("setup".to_owned(), state)])))
}

fn failed() -> OneshotState {
    OneshotState::Failed("exited with code 1".into())
}

#[test]
fn a_oneshot_start_is_done_when_its_run_exits_0_however_quickly_and_stays_completed() {
    let mut h = oneshot();
    let actions = h.start(10);
    assert!(spawns(&actions));
    assert_eq!(start_done(&actions), None, "answered at the run's end");
    assert_eq!(h.m.phase(), Phase::Running { pid: 10 });
    assert_eq!(h.m.status(), Status::Active);
    assert_eq!(h.m.oneshot_state(), Some(OneshotState::Running));
    // No okay delay: nothing is due while it runs.
    assert!(h.at(5.0).tick().is_empty());

    let actions = h.at(5.2).step(Event::Exited { pid: 10, code: 0 });
    assert_eq!(start_done(&actions), Some(&StartOutcome::Started));
    assert!(
        actions.contains(&Action::Log("Service \"svc\" completed in 5.2s".into())),
        "{actions:?}"
    );
    assert!(
        !actions
            .iter()
            .any(|a| matches!(a, Action::Log(l) if l.contains("unexpectedly")))
    );
    assert_eq!(h.m.phase(), Phase::Completed);
    assert_eq!(h.m.status(), Status::Inactive);
    assert_eq!(h.m.wanted(), Wanted::Stopped);
    assert_eq!(h.m.completion(), Some(secs(5.2)));
    assert_eq!(h.m.oneshot_state(), Some(OneshotState::Completed));
    // Never restarted: no deadline, nothing on later ticks.
    assert_eq!(h.m.deadline(), None);
    assert!(h.at(100.0).tick().is_empty());

    // A quick exit is a completion too (a daemon's would fail its start).
    let mut h = oneshot();
    h.start(11);
    let actions = h.at(0.01).step(Event::Exited { pid: 11, code: 0 });
    assert_eq!(start_done(&actions), Some(&StartOutcome::Started));
    assert_eq!(h.m.phase(), Phase::Completed);
}

#[test]
fn a_failed_oneshot_fails_its_start_with_its_output_then_backs_off_and_retries() {
    let mut h = oneshot();
    h.start(10);
    let actions = h.at(0.3).step(Event::Exited { pid: 10, code: 3 });
    assert_eq!(
        start_done(&actions),
        Some(&StartOutcome::Failed {
            error: "service start attempt: exited with code 3, will restart".into(),
            with_output: true,
        })
    );
    assert!(matches!(h.m.phase(), Phase::Backoff { .. }));
    assert_eq!(
        h.m.oneshot_state(),
        Some(OneshotState::Failed("exited with code 3".into()))
    );
    // The retry is a restart: nobody waits on it; its success completes the service.
    let actions = h.at(1.0).tick();
    assert!(spawns(&actions));
    h.step(Event::Spawned { pid: 11 });
    assert_eq!(h.m.oneshot_state(), Some(OneshotState::Running));
    let actions = h.at(2.0).step(Event::Exited { pid: 11, code: 0 });
    assert_eq!(start_done(&actions), None);
    assert_eq!(h.m.phase(), Phase::Completed);
    assert_eq!(h.m.backoff_num(), 0);

    // on-failure: ignore leaves it in error.
    let mut h = Harness::with_policy(Policy {
        oneshot: true,
        on_failure: ExitAction::Ignore,
        ..Policy::default()
    });
    h.start(10);
    h.at(0.3).step(Event::Exited { pid: 10, code: 1 });
    assert_eq!(h.m.status(), Status::Error);
    // A spawn that fails fails the start as for any service.
    let mut h = oneshot();
    h.step(Event::Start(h.m.policy().clone()));
    let actions = h.step(Event::SpawnFailed {
        error: "cannot start service: exec: \"nope\": executable file not found in $PATH".into(),
    });
    assert!(matches!(
        start_done(&actions),
        Some(StartOutcome::Failed { .. })
    ));
    assert!(matches!(h.m.oneshot_state(), Some(OneshotState::Failed(why)) if why.contains("nope")));
}

#[test]
fn autostart_and_replan_leave_a_completed_oneshot_completed_start_runs_it_again_stop_forgets() {
    let mut h = oneshot();
    h.start(10);
    h.at(1.0).step(Event::Exited { pid: 10, code: 0 });
    let policy = h.m.policy().clone();
    let actions = h.step(Event::Ensure(policy.clone()));
    assert_eq!(
        actions,
        vec![Action::StartDone(StartOutcome::AlreadyCompleted)]
    );
    assert_eq!(h.m.phase(), Phase::Completed);

    // A client's start runs it again.
    let actions = h.at(2.0).start(11);
    assert!(spawns(&actions));
    assert_eq!(h.m.phase(), Phase::Running { pid: 11 });
    // A second start meanwhile waits for the same run's end.
    let actions = h.step(Event::Start(policy.clone()));
    assert_eq!(actions, vec![]);
    let actions = h.at(3.0).step(Event::Exited { pid: 11, code: 0 });
    assert_eq!(start_done(&actions), Some(&StartOutcome::Started));
    assert_eq!(h.m.completion(), Some(secs(1.0)));

    // Stop forgets the completion; autostart runs it again then.
    let actions = h.step(Event::Stop);
    assert_eq!(stop_done(&actions), Some(&StopOutcome::HadExited));
    assert_eq!(h.m.completion(), None);
    assert_eq!(h.m.oneshot_state(), Some(OneshotState::Inactive));
    let actions = h.step(Event::Ensure(policy));
    assert!(spawns(&actions));
}

#[test]
fn a_stop_during_a_run_fails_the_start_that_waits_for_it() {
    let mut h = oneshot();
    h.start(10);
    let actions = h.at(0.5).step(Event::Stop);
    assert_eq!(
        start_done(&actions),
        Some(&StartOutcome::Failed {
            error: "stopped before it completed".into(),
            with_output: false,
        })
    );
    assert!(matches!(h.m.phase(), Phase::Terminating { .. }));
    let actions = h.step(Event::Exited { pid: 10, code: -1 });
    assert_eq!(stop_done(&actions), Some(&StopOutcome::Stopped));
    assert_eq!(h.m.phase(), Phase::Stopped);
    assert_eq!(h.m.completion(), None);
}

#[test]
fn a_service_after_a_running_oneshot_waits_and_its_start_is_carried_out_on_completion() {
    let mut h = after_setup(true);
    h.step(setup(OneshotState::Running));
    let actions = h.start(20);
    assert!(!spawns(&actions));
    assert_eq!(
        start_done(&actions),
        None,
        "the start waits for setup's run"
    );
    assert_eq!(h.m.phase(), Phase::Waiting);
    assert_eq!(h.m.status(), Status::Waiting);
    assert_eq!(
        h.m.waiting_oneshots(),
        &[("setup".to_owned(), OneshotState::Running)]
    );
    assert!(actions.contains(&Action::Log(
        "Service \"svc\" waiting for one-shot \"setup\" to complete".into()
    )));
    // Nothing is due while it waits, however long.
    assert_eq!(h.m.deadline(), None);

    let actions = h.at(30.0).step(setup(OneshotState::Completed));
    assert_eq!(actions, vec![Action::Spawn]);
    assert_eq!(h.m.phase(), Phase::Spawning { restart: false });
    h.step(Event::Spawned { pid: 20 });
    // The start it was asked for: the okay delay, then done.
    let actions = h.at(31.0).tick();
    assert_eq!(start_done(&actions), Some(&StartOutcome::Started));
    assert!(h.m.waiting_oneshots().is_empty());
}

#[test]
fn a_service_that_requires_a_failed_oneshot_waits_without_failing_and_starts_on_its_retry() {
    let mut h = after_setup(true);
    h.step(setup(failed()));
    let actions = h.start(20);
    assert!(!spawns(&actions));
    assert_eq!(
        start_done(&actions),
        Some(&StartOutcome::Waiting {
            missing: vec!["one-shot \"setup\" to complete".into()],
        })
    );
    assert_eq!(h.m.status(), Status::Waiting);
    assert_eq!(h.m.wanted(), Wanted::Running);
    // Its retry runs, fails again, runs: still waiting, logged once, nothing answered.
    for state in [OneshotState::Running, failed(), OneshotState::Running] {
        let actions = h.step(setup(state));
        assert_eq!(actions, vec![], "{actions:?}");
        assert_eq!(h.m.status(), Status::Waiting);
    }
    // Completed: launched at once, as a restart (its start was answered already).
    let actions = h.at(10.0).step(setup(OneshotState::Completed));
    assert_eq!(actions, vec![Action::Spawn]);
    h.step(Event::Spawned { pid: 21 });
    assert_eq!(h.m.phase(), Phase::Running { pid: 21 });

    // A start that waits for a run is answered that it waits once the run fails.
    let mut h = after_setup(true);
    h.step(setup(OneshotState::Running));
    h.start(20);
    let actions = h.step(setup(failed()));
    assert_eq!(
        start_done(&actions),
        Some(&StartOutcome::Waiting {
            missing: vec!["one-shot \"setup\" to complete".into()],
        })
    );
    assert_eq!(h.m.waiting_oneshots(), &[("setup".to_owned(), failed())]);
}

#[test]
fn after_alone_waits_only_while_the_oneshot_runs() {
    for state in [failed(), OneshotState::Inactive, OneshotState::Completed] {
        let mut h = after_setup(false);
        h.step(setup(state.clone()));
        let actions = h.start(20);
        assert!(spawns(&actions), "{state:?}");
    }
    let mut h = after_setup(false);
    h.step(setup(OneshotState::Running));
    assert!(!spawns(&h.start(20)));
    let actions = h.step(setup(failed()));
    assert_eq!(actions, vec![Action::Spawn]);
    // A required one-shot that never ran holds it back; answered that it waits.
    let mut h = after_setup(true);
    let actions = h.start(20);
    assert!(!spawns(&actions));
    assert!(matches!(
        start_done(&actions),
        Some(StartOutcome::Waiting { .. })
    ));
}

#[test]
fn a_stop_or_an_abort_ends_the_wait_and_answers_the_start() {
    let mut h = after_setup(true);
    h.step(setup(OneshotState::Running));
    h.start(20);
    let actions = h.step(Event::Stop);
    assert!(matches!(
        start_done(&actions),
        Some(StartOutcome::Failed { .. })
    ));
    assert_eq!(stop_done(&actions), Some(&StopOutcome::Stopped));
    assert_eq!(h.m.phase(), Phase::Stopped);
    // Stopped: a completion later launches nothing.
    assert_eq!(h.step(setup(OneshotState::Completed)), vec![]);

    let mut h = after_setup(true);
    h.step(setup(OneshotState::Running));
    h.start(20);
    let actions = h.step(Event::AbortStart);
    assert!(matches!(
        start_done(&actions),
        Some(StartOutcome::Failed { .. })
    ));
    assert_eq!(h.step(setup(OneshotState::Completed)), vec![]);
}

#[test]
fn a_oneshot_that_waits_on_another_counts_as_running_until_its_start_is_answered() {
    // A chain: this one-shot is after "setup" and requires it.
    let mut h = Harness::with_policy(Policy {
        oneshot: true,
        after_oneshots: vec![OneshotDep {
            name: "setup".into(),
            required: true,
        }],
        ..Policy::default()
    });
    h.step(setup(OneshotState::Running));
    h.start(30);
    assert_eq!(h.m.oneshot_state(), Some(OneshotState::Running));
    h.step(setup(failed()));
    assert!(matches!(h.m.oneshot_state(), Some(OneshotState::Failed(_))));
    let actions = h.step(setup(OneshotState::Completed));
    assert_eq!(actions, vec![Action::Spawn]);
    h.step(Event::Spawned { pid: 31 });
    assert_eq!(h.m.oneshot_state(), Some(OneshotState::Running));
    h.at(2.0).step(Event::Exited { pid: 31, code: 0 });
    assert_eq!(h.m.oneshot_state(), Some(OneshotState::Completed));
}

#[test]
fn a_daemon_is_no_oneshot_and_what_follows_a_daemon_is_unchanged() {
    let mut h = Harness::new();
    h.start(10);
    assert_eq!(h.m.oneshot_state(), None);
    // A quick exit 0 of a daemon fails its start, as in Pebble.
    let actions = h.at(0.2).step(Event::Exited { pid: 10, code: 0 });
    assert!(matches!(
        start_done(&actions),
        Some(StartOutcome::Failed { error, .. }) if error.contains("exited quickly with code 0")
    ));
    // Without one-shots in its `after:`, the reports of one-shots change nothing.
    let mut h = Harness::new();
    h.step(setup(OneshotState::Running));
    assert!(spawns(&h.start(10)));
}

/// The machine a new program makes of `h`'s, handed over at `h.now`, and the instant it
/// took over at.
fn handed_over(h: &Harness) -> (crate::services::machine::Machine, tokio::time::Instant) {
    let carried = h.m.carried(h.now).expect("handed over");
    let at = h.now + secs(1000.0);
    let machine =
        crate::services::machine::Machine::adopted("svc", 9, h.m.policy.clone(), &carried, at);
    (machine, at)
}

#[test]
fn a_completion_handed_over_keeps_autostart_and_replan_from_running_it_again() {
    let mut h = oneshot();
    h.start(10);
    h.at(1.5).step(Event::Exited { pid: 10, code: 0 });
    assert_eq!(h.m.phase(), Phase::Completed);
    let (mut adopted, at) = handed_over(&h);
    assert_eq!(adopted.phase(), Phase::Completed);
    assert_eq!(adopted.oneshot_state(), Some(OneshotState::Completed));
    assert_eq!(adopted.completion(), Some(secs(1.5)));
    let policy = adopted.policy().clone();
    let actions = adopted.step(at, Event::Ensure(policy.clone()));
    assert_eq!(start_done(&actions), Some(&StartOutcome::AlreadyCompleted));
    assert!(!spawns(&actions));
    // A client's start runs it again, as before.
    assert!(spawns(&adopted.step(at, Event::Start(policy))));
}

#[test]
fn a_oneshot_run_handed_over_completes_when_it_exits_0() {
    let mut h = oneshot();
    // Its first run fails and its start is answered; the retry runs on its own.
    h.start(10);
    h.at(0.5).step(Event::Exited { pid: 10, code: 1 });
    let Phase::Backoff { until } = h.m.phase() else {
        panic!("expected backoff, got {:?}", h.m.phase());
    };
    h.now = until;
    assert!(spawns(&h.tick()));
    h.step(Event::Spawned { pid: 11 });
    assert_eq!(h.m.oneshot_state(), Some(OneshotState::Running));
    let (mut adopted, at) = handed_over(&h);
    assert_eq!(adopted.oneshot_state(), Some(OneshotState::Running));
    adopted.step(at + secs(2.0), Event::Exited { pid: 11, code: 0 });
    assert_eq!(adopted.phase(), Phase::Completed);
    assert_eq!(adopted.oneshot_state(), Some(OneshotState::Completed));
}

#[test]
fn a_wait_for_oneshots_handed_over_goes_on_and_ends_with_their_completion() {
    let mut h = after_setup(true);
    h.step(setup(failed()));
    let actions = h.start(10);
    assert!(matches!(
        start_done(&actions),
        Some(StartOutcome::Waiting { .. })
    ));
    h.step(setup(OneshotState::Running));
    assert_eq!(h.m.status(), Status::Waiting);
    let (mut adopted, at) = handed_over(&h);
    assert_eq!(adopted.status(), Status::Waiting);
    // Told where the one-shots stand now: still waiting, then released.
    let actions = adopted.step(at, setup(OneshotState::Running));
    assert!(!spawns(&actions));
    assert_eq!(
        adopted.waiting_oneshots(),
        [("setup".to_owned(), OneshotState::Running)]
    );
    let actions = adopted.step(at, setup(OneshotState::Completed));
    assert!(spawns(&actions));
    assert_eq!(start_done(&actions), None, "its start was answered before");
}
