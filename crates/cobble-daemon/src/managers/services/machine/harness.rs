//! What the transition tables share: a [`Harness`] that steps one machine through time that
//! is a plain `Instant` advanced by hand, and readers of the actions a step returned.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::{Action, Event, ExitAction, Machine, Policy, StartOutcome, StopOutcome};
use crate::checks::{CheckSignals, Firing};

/// The signals of checks of which these are down, and none passes.
pub(super) fn signals(firing: Firing) -> Arc<CheckSignals> {
    Arc::new(CheckSignals {
        firing,
        ..CheckSignals::default()
    })
}

pub(super) fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

pub(super) struct Harness {
    pub(super) m: Machine,
    pub(super) t0: Instant,
    pub(super) now: Instant,
    /// The firing number of the next check failure.
    pub(super) firings: u64,
}

impl Harness {
    pub(super) fn new() -> Harness {
        let t0 = Instant::now();
        Harness {
            m: Machine::new("svc", 7),
            t0,
            now: t0,
            firings: 0,
        }
    }

    pub(super) fn with_policy(policy: Policy) -> Harness {
        let mut h = Harness::new();
        h.m.policy = policy;
        h
    }

    pub(super) fn at(&mut self, s: f64) -> &mut Harness {
        self.now = self.t0 + secs(s);
        self
    }

    pub(super) fn step(&mut self, event: Event) -> Vec<Action> {
        self.m.step(self.now, event)
    }

    /// Explicit start that spawns `pid`.
    pub(super) fn start(&mut self, pid: u32) -> Vec<Action> {
        let policy = self.m.policy.clone();
        let mut actions = self.step(Event::Start(policy));
        if actions.contains(&Action::Spawn) {
            actions.extend(self.step(Event::Spawned { pid }));
        }
        actions
    }

    pub(super) fn tick(&mut self) -> Vec<Action> {
        self.step(Event::Tick)
    }

    /// Check "chk", whose `on-check-failure` is `action`, fires (again).
    pub(super) fn check_failed(&mut self, action: ExitAction) -> Vec<Action> {
        self.m.policy.on_check_failure.insert("chk".into(), action);
        self.firings += 1;
        let firing = Firing::from([("chk".to_owned(), self.firings)]);
        self.step(Event::Checks(signals(firing)))
    }

    /// No check is down any more.
    pub(super) fn checks_up(&mut self) -> Vec<Action> {
        self.step(Event::Checks(Arc::default()))
    }
}

pub(super) fn start_done(actions: &[Action]) -> Option<&StartOutcome> {
    actions.iter().find_map(|a| match a {
        Action::StartDone(o) => Some(o),
        _ => None,
    })
}

pub(super) fn stop_done(actions: &[Action]) -> Option<&StopOutcome> {
    actions.iter().find_map(|a| match a {
        Action::StopDone(o) => Some(o),
        _ => None,
    })
}

pub(super) fn spawns(actions: &[Action]) -> bool {
    actions.contains(&Action::Spawn)
}
