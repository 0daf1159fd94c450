//! Transition tables for what paths mean. Time is a plain `Instant` advanced by hand.

use crate::services::machine::harness::{Harness, secs, start_done, stop_done};
use crate::services::machine::types::*;

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
