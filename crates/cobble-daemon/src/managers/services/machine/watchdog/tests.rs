//! Transition tables for the watchdog. Time is a plain `Instant` advanced by hand.

use crate::services::machine::harness::{Harness, secs, spawns, start_done, stop_done};
use crate::services::machine::types::*;

/// A `readiness: notify` service with a 5 s watchdog and a 3 s kill delay, started at 0 as
/// pid 10 and ready at 1.
fn ready() -> Harness {
    let mut h = Harness::with_policy(Policy {
        notify: true,
        watchdog: Some(secs(5.0)),
        kill_delay: secs(3.0),
        ..Policy::default()
    });
    h.start(10);
    h.at(1.0).step(Event::Ready { pid: 10 });
    h
}

fn said(h: &mut Harness, said: WatchdogSaid) -> Vec<Action> {
    h.step(Event::Watchdog { pid: 10, said })
}

fn signals(actions: &[Action]) -> Vec<GroupSignal> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Signal { signal, .. } => Some(*signal),
            _ => None,
        })
        .collect()
}

#[test]
fn the_first_interval_starts_at_ready_and_each_ping_starts_the_next() {
    let mut h = Harness::with_policy(Policy {
        notify: true,
        watchdog: Some(secs(5.0)),
        ..Policy::default()
    });
    h.start(10);
    // Not ready: only the ready timeout is a deadline, and a ping starts nothing.
    assert_eq!(h.m.deadline(), Some(h.t0 + READY_TIMEOUT));
    assert_eq!(
        h.at(0.5).step(Event::Watchdog {
            pid: 10,
            said: WatchdogSaid::Ping
        }),
        []
    );
    assert_eq!(h.m.watchdog().unwrap().last_ping, None);
    h.at(2.0).step(Event::Ready { pid: 10 });
    assert_eq!(h.m.deadline(), Some(h.t0 + secs(7.0)));
    said(h.at(6.0), WatchdogSaid::Ping);
    assert_eq!(h.m.deadline(), Some(h.t0 + secs(11.0)));
    assert_eq!(h.m.watchdog().unwrap().last_ping, Some(h.t0 + secs(6.0)));
    assert_eq!(h.at(10.9).tick(), []);
    assert_eq!(h.m.phase(), Phase::Running { pid: 10 });
}

#[test]
fn a_missed_deadline_aborts_the_group_then_kills_it_then_backs_off_as_a_failure() {
    let mut h = ready();
    said(h.at(2.0), WatchdogSaid::Ping);
    let reason = "watchdog timeout after 5s, last ping 5s ago";
    let actions = h.at(7.0).tick();
    assert_eq!(
        actions,
        [
            Action::Log(format!("Service \"svc\" {reason}, sending SIGABRT")),
            Action::OutputNote(reason.into()),
            Action::Signal {
                pid: 10,
                signal: GroupSignal::Abort
            },
        ]
    );
    assert_eq!(start_done(&actions), None, "the start was over at READY=1");
    // On its way back: listed as backing off, with the reason.
    assert_eq!(h.m.status(), Status::Backoff);
    assert_eq!(h.m.failing_for_watchdog(), Some(reason));
    assert_eq!(h.m.deadline(), Some(h.t0 + secs(10.0)), "the kill delay");
    assert_eq!(signals(&h.at(10.0).tick()), [GroupSignal::Kill]);
    let actions = h.at(10.1).step(Event::Exited { pid: 10, code: 137 });
    assert!(
        actions.contains(&Action::Log(
            "Service \"svc\" ended after its watchdog failure with code 137".into()
        )),
        "{actions:?}"
    );
    assert!(
        actions.contains(&Action::EndGroup { pid: 10 }),
        "{actions:?}"
    );
    let Phase::Backoff { until } = h.m.phase() else {
        panic!("{:?}", h.m.phase());
    };
    assert_eq!(h.m.backoff_num(), 1);
    assert_eq!(h.m.last_exit(), Some(137));
    assert_eq!(h.m.last_exit_cause(), Some(reason));
    assert_eq!(h.m.watchdog(), None);
    // The restart is a run of its own: ready again, watched again from then.
    h.now = until;
    assert!(spawns(&h.tick()));
    h.step(Event::Spawned { pid: 11 });
    assert_eq!(h.m.status(), Status::Starting);
    assert_eq!(h.m.watchdog().unwrap().ready_at, None);
    let back = h.now + secs(0.5);
    h.now = back;
    h.step(Event::Ready { pid: 11 });
    assert_eq!(h.m.deadline(), Some(back + secs(5.0)));
    // Until the next exit, the last one's cause is still there to read.
    assert_eq!(h.m.last_exit_cause(), Some(reason));
}

#[test]
fn a_run_that_never_pinged_is_timed_from_ready_to_the_tenth_of_a_second() {
    let mut h = ready();
    let actions = h.at(6.25).tick();
    let reason = "watchdog timeout after 5s, no ping since it was ready 5.3s ago";
    assert!(
        actions.contains(&Action::OutputNote(reason.into())),
        "{actions:?}"
    );
    assert_eq!(h.m.last_exit_cause(), Some(reason));
}

#[test]
fn a_ping_handled_before_a_late_tick_still_counts() {
    let mut h = ready();
    // The deadline was 6; the executor handles the ping before the tick.
    said(h.at(6.5), WatchdogSaid::Ping);
    assert_eq!(h.tick(), []);
    assert_eq!(h.m.deadline(), Some(h.t0 + secs(11.5)));
}

#[test]
fn a_trigger_is_a_failure_at_once() {
    let mut h = ready();
    let actions = said(h.at(2.0), WatchdogSaid::Trigger);
    assert!(
        actions.contains(&Action::OutputNote(
            "watchdog triggered by the service".into()
        )),
        "{actions:?}"
    );
    assert_eq!(signals(&actions), [GroupSignal::Abort]);
    assert_eq!(
        h.m.last_exit_cause(),
        Some("watchdog triggered by the service")
    );
    assert_eq!(h.m.status(), Status::Backoff);
}

#[test]
fn a_trigger_before_ready_fails_the_start_with_the_reason() {
    let mut h = Harness::with_policy(Policy {
        notify: true,
        watchdog: Some(secs(5.0)),
        ..Policy::default()
    });
    h.start(10);
    let actions = said(h.at(1.0), WatchdogSaid::Trigger);
    assert_eq!(
        start_done(&actions),
        Some(&StartOutcome::Failed {
            error: "watchdog triggered by the service".into(),
            with_output: true
        })
    );
    assert_eq!(signals(&actions), [GroupSignal::Abort]);
    h.at(1.5).step(Event::Exited { pid: 10, code: 134 });
    assert!(matches!(h.m.phase(), Phase::Backoff { .. }));
}

#[test]
fn a_new_interval_starts_now_and_zero_turns_the_watchdog_off_for_the_run() {
    let mut h = ready();
    let actions = said(h.at(3.0), WatchdogSaid::Interval(secs(2.0)));
    assert_eq!(
        actions,
        [Action::Log(
            "Service \"svc\" set its watchdog interval to 2s".into()
        )]
    );
    assert_eq!(h.m.deadline(), Some(h.t0 + secs(5.0)));
    said(h.at(4.0), WatchdogSaid::Ping);
    assert_eq!(h.m.deadline(), Some(h.t0 + secs(6.0)));
    let actions = said(h.at(5.0), WatchdogSaid::Interval(secs(0.0)));
    assert_eq!(
        actions,
        [Action::Log(
            "Service \"svc\" turned its watchdog off for this run".into()
        )]
    );
    assert_eq!(h.m.watchdog().unwrap().interval, None);
    // Only the backoff reset is left to wait for; nothing fails the service any more.
    assert_eq!(h.m.deadline(), Some(h.t0 + secs(30.0)));
    assert!(signals(&h.at(600.0).tick()).is_empty());
    // The next run has the policy's interval again.
    h.at(601.0).step(Event::Exited { pid: 10, code: 1 });
    let Phase::Backoff { until } = h.m.phase() else {
        panic!("{:?}", h.m.phase());
    };
    h.now = until;
    h.tick();
    h.step(Event::Spawned { pid: 11 });
    assert_eq!(h.m.watchdog().unwrap().interval, Some(secs(5.0)));
}

#[test]
fn a_new_interval_before_ready_holds_from_ready() {
    let mut h = Harness::with_policy(Policy {
        notify: true,
        watchdog: Some(secs(5.0)),
        ..Policy::default()
    });
    h.start(10);
    said(h.at(0.5), WatchdogSaid::Interval(secs(2.0)));
    h.at(1.0).step(Event::Ready { pid: 10 });
    assert_eq!(h.m.deadline(), Some(h.t0 + secs(3.0)));
}

#[test]
fn what_another_process_or_a_service_without_a_watchdog_says_is_ignored() {
    let mut h = ready();
    for said in [WatchdogSaid::Trigger, WatchdogSaid::Ping] {
        assert_eq!(h.at(2.0).step(Event::Watchdog { pid: 99, said }), []);
    }
    assert_eq!(h.m.deadline(), Some(h.t0 + secs(6.0)));

    let mut h = Harness::with_policy(Policy {
        notify: true,
        ..Policy::default()
    });
    h.start(10);
    h.at(1.0).step(Event::Ready { pid: 10 });
    for s in [
        WatchdogSaid::Ping,
        WatchdogSaid::Interval(secs(1.0)),
        WatchdogSaid::Trigger,
    ] {
        assert_eq!(said(&mut h, s), []);
    }
    assert_eq!(h.m.watchdog(), None);
    assert_eq!(h.m.phase(), Phase::Running { pid: 10 });
    assert_eq!(
        h.m.deadline(),
        Some(h.t0 + secs(30.0)),
        "the backoff reset only"
    );
}

#[test]
fn a_watchdog_failure_is_a_failure_whatever_the_exit_code() {
    // The service caught SIGABRT and exited 0: its on-failure action still decides.
    let mut h = ready();
    h.m.policy.on_failure = ExitAction::Ignore;
    h.at(6.0).tick();
    h.at(6.1).step(Event::Exited { pid: 10, code: 0 });
    assert_eq!((h.m.phase(), h.m.status()), (Phase::Exited, Status::Error));

    let mut h = ready();
    h.m.policy.on_failure = ExitAction::Shutdown;
    h.at(6.0).tick();
    let actions = h.at(6.1).step(Event::Exited { pid: 10, code: 0 });
    assert!(actions.contains(&Action::Shutdown(10)), "{actions:?}");
}

#[test]
fn a_stop_while_the_watchdog_ends_the_process_is_a_stop() {
    let mut h = ready();
    h.at(6.0).tick();
    assert_eq!(
        stop_done(&h.at(6.5).step(Event::Stop)),
        Some(&StopOutcome::AlreadyStopping)
    );
    h.at(7.0).step(Event::Exited { pid: 10, code: 134 });
    assert_eq!(
        (h.m.phase(), h.m.status()),
        (Phase::Stopped, Status::Inactive)
    );
}

#[test]
fn a_service_that_pings_in_time_for_minutes_is_never_touched() {
    let mut h = ready();
    let mut t = 1.0;
    while t < 600.0 {
        t += 2.5;
        said(h.at(t), WatchdogSaid::Ping);
        // Ticks come whenever the executor likes; none finds a missed deadline.
        let actions = h.at(t + 2.4).tick();
        assert!(signals(&actions).is_empty(), "at {t}: {actions:?}");
    }
    assert_eq!(h.m.phase(), Phase::Running { pid: 10 });
    assert_eq!(h.m.backoff_num(), 0);
}

#[test]
fn a_handed_over_watchdog_keeps_its_deadline_and_what_it_last_heard() {
    use crate::services::machine::Machine;
    let mut h = ready();
    said(h.at(3.0), WatchdogSaid::Ping);
    let deadline = h.m.deadline();
    assert_eq!(deadline, Some(h.t0 + secs(8.0)));
    // Handed over at 4.5, taken by the new program as of that same moment.
    let handed_at = h.t0 + secs(4.5);
    let carried =
        h.m.carried(handed_at)
            .expect("a running service with a watchdog");
    let mut m = Machine::adopted("svc", 1, h.m.policy().clone(), &carried, handed_at);
    assert_eq!(m.deadline(), deadline);
    assert_eq!(m.watchdog(), h.m.watchdog());
    // Silent since: acted on at that deadline, with the last ping it had heard.
    assert_eq!(m.step(h.t0 + secs(7.9), Event::Tick), []);
    let actions = m.step(h.t0 + secs(8.0), Event::Tick);
    assert!(
        actions.contains(&Action::Log(
            "Service \"svc\" watchdog timeout after 5s, last ping 5s ago, sending SIGABRT".into()
        )),
        "{actions:?}"
    );
    // A run that turned its watchdog off keeps it off.
    let mut h = ready();
    said(h.at(2.0), WatchdogSaid::Interval(std::time::Duration::ZERO));
    let carried = h.m.carried(h.now).unwrap();
    let m = Machine::adopted("svc", 1, h.m.policy().clone(), &carried, h.now);
    assert_eq!(m.watchdog().unwrap().interval, None);
    assert_eq!(m.watchdog().unwrap().deadline(), None);
    assert_eq!(m.deadline(), h.m.deadline());
}
