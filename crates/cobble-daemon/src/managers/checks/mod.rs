//! Health checks: http, tcp and exec probes run on a period, their status, and the
//! `on-check-failure` actions they trigger.
//!
//! # Theory of operation
//!
//! The [`CheckManager`] is an actor that owns one runner task per active check. It watches the
//! plan, so a layer that adds, changes or removes a check takes effect at once, without a
//! replan; it also starts and stops checks on request and routes `refresh` requests.
//!
//! Each runner owns everything about one check's current run: the probe, its period and
//! timeout, and the failure streak. The streak logic is pure ([`machine::CheckRun`]): a result
//! goes in, effects come out (log a failure on the task, hit the threshold, recover), and the
//! runner records them as Pebble does, with one long-lived change per phase:
//!
//! - while healthy the check runs under a `perform-check` change (`Doing`); each failure
//!   below the threshold adds an ERROR entry to its task log;
//! - at the threshold the perform change goes to `Error`, the failure action fires once (the
//!   services whose `on-check-failure` names the check act on it) and a `recover-check`
//!   change starts;
//! - the first success completes the recover change and starts a new perform change.
//!
//! Nothing is written per successful run: counters live in memory, and the state store only
//! sees what Pebble records (failures, transitions), so the persister is not woken per tick.
//!
//! # The published snapshot
//!
//! Every runner publishes its check's status into one shared snapshot, a `watch` channel the
//! manager and the runners write and anyone may read. `GET /v1/checks`, `/v1/health` and
//! `/v1/metrics` read it directly from the handle: they never wait for the actor, a probe in
//! flight or the state store, which keeps `/v1/health` fast under load (Kubernetes probes
//! give up after one second). A generation number per check keeps a runner that is being
//! replaced from overwriting its successor's entry.
//!
//! # Layout
//!
//! - `manager` — the actor: plan changes, start/stop, refresh, and handing the checks over
//!   to a re-executed daemon.
//! - [`carry`] — what a re-execution hands over of each check.
//! - `runner` — one check's loop, and the recording of its changes and tasks.
//! - [`machine`] — the pure failure-streak state machine.
//! - `checker` — the probe trait, [`CheckError`], and building a probe from a check's
//!   configuration (including the `service-context` merge); `http`, `tcp` and `exec` are the
//!   three probes.

pub(crate) mod carry;
mod checker;
mod exec;
pub(crate) mod http;
pub(crate) mod machine;
mod manager;
mod runner;
mod tcp;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use cobble_plan::{CheckLevel, Plan};
use tokio::sync::watch;
use tokio::time::Instant;

pub(crate) use carry::CarriedCheck;
pub(crate) use checker::CheckError;
pub(crate) use manager::{CheckAction, CheckManager, CheckManagerError};

/// The status `GET /v1/checks` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CheckStatus {
    /// Running, with fewer consecutive failures than the threshold.
    Up,
    /// Running, with at least threshold consecutive failures.
    Down,
    /// Not running: stopped, or `startup: disabled` and never started.
    Inactive,
}

impl CheckStatus {
    /// The API spelling.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            CheckStatus::Up => "up",
            CheckStatus::Down => "down",
            CheckStatus::Inactive => "inactive",
        }
    }
}

/// One check as the snapshot holds it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CheckView {
    /// The check's name in the plan.
    pub name: String,
    /// Its level (for filtering and health).
    pub level: CheckLevel,
    /// Whether `startup` is enabled (unset counts as enabled).
    pub startup_enabled: bool,
    /// Up, down or inactive.
    pub status: CheckStatus,
    /// Successes since the check started or last recovered.
    pub successes: u64,
    /// Consecutive failures; kept when the check is stopped.
    pub failures: u32,
    /// Consecutive failures that make the check down.
    pub threshold: u32,
    /// The perform-check or recover-check change driving the check; `None` when inactive.
    pub change_id: Option<u64>,
    /// The change that drove the check before `change_id`: the perform-check that failed
    /// into the current recover-check, or the recover-check that recovered into the current
    /// perform-check. Kept when the check stops; `None` for a fresh start.
    pub prev_change_id: Option<u64>,
    /// Successful runs since the daemon started (for metrics).
    pub success_count: u64,
    /// Failed runs since the daemon started (for metrics).
    pub failure_count: u64,
    /// Times the failure action fired since the daemon started: at the threshold, and again
    /// for every further `threshold` consecutive failures while the check stays down.
    pub action_count: u64,
    /// The last failure's message.
    pub last_error: Option<String>,
    /// When the check went down (hit its threshold); `None` while up.
    pub down_since: Option<jiff::Timestamp>,
    /// When the check last succeeded in this run; `None` before its first success.
    pub last_success: Option<Instant>,
    /// Which run owns this entry; bumped whenever the manager starts or stops the check.
    pub(crate) generation: u64,
}

/// Every check of the plan, by name, as of the plan the manager last applied.
#[derive(Debug, Clone, Default)]
pub(crate) struct Snapshot {
    /// The checks.
    pub checks: BTreeMap<String, CheckView>,
    /// The plan they reflect; readers compare it with the current plan to tell whether a
    /// layer added a moment ago has been applied yet.
    pub(crate) plan: Option<Arc<Plan>>,
}

/// The checks that are down, each with how many times its failure action has fired since the
/// daemon started: a higher number is a new firing.
pub(crate) type Firing = BTreeMap<String, u64>;

/// What the supervisor decides by, as it stands: which checks are down and have fired, and
/// which pass. It watches this and decides every `on-check-failure` action, every
/// `requires-checks` wait and every `start-grace` against it as it is when it acts, so an
/// action is never taken for a check that is up again by then. It changes only when a check
/// goes down, fires again, comes up or passes for the first time, never per successful run.
/// Two signals are equal when they say the same of the checks, whatever their `seq`.
#[derive(Debug, Clone, Default)]
pub(crate) struct CheckSignals {
    /// The checks that are down, with their firing numbers.
    pub firing: Firing,
    /// For each check that is down, when it last succeeded before it went down; a check
    /// that never succeeded in its run has no entry.
    pub last_success: BTreeMap<String, Instant>,
    /// The checks that have succeeded since they were (re)started and are not down: what
    /// `requires-checks` waits for. A check that has never run is up with no successes, and
    /// does not pass.
    pub passing: BTreeSet<String>,
    /// Which publication these are: each change of the signals counts one up.
    pub seq: u64,
    /// Where the supervisor says which publication it has acted on.
    pub receipt: Receipt,
}

impl PartialEq for CheckSignals {
    fn eq(&self, other: &CheckSignals) -> bool {
        self.firing == other.firing
            && self.last_success == other.last_success
            && self.passing == other.passing
    }
}

impl Eq for CheckSignals {}

/// The `seq` of the last [`CheckSignals`] the supervisor has acted on (`None` until it
/// takes in its first), shared by every publication of one publisher.
#[derive(Debug, Clone)]
pub(crate) struct Receipt(Arc<watch::Sender<Option<u64>>>);

impl Default for Receipt {
    fn default() -> Receipt {
        Receipt(Arc::new(watch::Sender::new(None)))
    }
}

/// How long a check's runner waits for the supervisor to act on a failure before it fails
/// the check's task all the same (a supervisor that answers acts within milliseconds).
const ACT_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// One check's part of the [`CheckSignals`]: its firing number, its last success before it
/// went down, and whether it passes.
type Entry = (Option<u64>, Option<Instant>, bool);

impl CheckSignals {
    /// What the signals hold for check `name` now.
    fn entry(&self, name: &str) -> Entry {
        (
            self.firing.get(name).copied(),
            self.last_success.get(name).copied(),
            self.passing.contains(name),
        )
    }

    /// What they should hold for a check with this view (`None`: not in the plan).
    fn entry_of(view: Option<&CheckView>) -> Entry {
        match view {
            Some(view) => (
                firing_count(view),
                view.last_success
                    .filter(|_| view.status == CheckStatus::Down),
                view.status == CheckStatus::Up && view.successes > 0,
            ),
            None => (None, None, false),
        }
    }

    /// Sets the entries of check `name`.
    fn set(&mut self, name: &str, (firing, last_success, passing): Entry) {
        match firing {
            Some(n) => self.firing.insert(name.to_owned(), n),
            None => self.firing.remove(name),
        };
        match last_success {
            Some(at) => self.last_success.insert(name.to_owned(), at),
            None => self.last_success.remove(name),
        };
        if passing {
            self.passing.insert(name.to_owned());
        } else {
            self.passing.remove(name);
        }
    }

    /// Says that the supervisor has acted on these signals: every `on-check-failure` action
    /// they call for is taken (see [`Publisher::acted_on_latest`]).
    pub(crate) fn acted(&self) {
        self.receipt.0.send_if_modified(|acted| {
            if acted.is_some_and(|n| n >= self.seq) {
                return false;
            }
            *acted = Some(self.seq);
            true
        });
    }

    /// The signals of a whole snapshot.
    fn of(snapshot: &Snapshot) -> CheckSignals {
        let mut signals = CheckSignals::default();
        for (name, view) in &snapshot.checks {
            signals.set(name, CheckSignals::entry_of(Some(view)));
        }
        signals
    }
}

/// The writing end of the snapshot, and of the [`Firing`] map derived from it.
pub(crate) struct Publisher {
    snapshot: watch::Sender<Snapshot>,
    signals: watch::Sender<Arc<CheckSignals>>,
}

impl Publisher {
    pub(crate) fn new() -> Publisher {
        Publisher {
            snapshot: watch::Sender::new(Snapshot::default()),
            signals: watch::Sender::new(Arc::default()),
        }
    }

    pub(crate) fn subscribe(&self) -> watch::Receiver<Snapshot> {
        self.snapshot.subscribe()
    }

    pub(crate) fn subscribe_signals(&self) -> watch::Receiver<Arc<CheckSignals>> {
        self.signals.subscribe()
    }

    pub(crate) fn borrow(&self) -> watch::Ref<'_, Snapshot> {
        self.snapshot.borrow()
    }

    /// Changes any part of the snapshot, then brings the whole of the signals in step.
    pub(crate) fn send_modify(&self, modify: impl FnOnce(&mut Snapshot)) {
        self.snapshot.send_modify(modify);
        let mut signals = CheckSignals::of(&self.snapshot.borrow());
        self.signals.send_if_modified(|current| {
            if **current == signals {
                return false;
            }
            signals.seq = current.seq + 1;
            signals.receipt = current.receipt.clone();
            *current = Arc::new(signals);
            true
        });
    }

    /// Changes the entry of check `name` (if `modify` says it changed anything), then brings
    /// that check's signals in step. The cheap path for the runners' per-probe updates: the
    /// shared signals are copied only when this check's part of them moved.
    pub(crate) fn update_check(&self, name: &str, modify: impl FnOnce(&mut Snapshot) -> bool) {
        if !self.snapshot.send_if_modified(modify) {
            return;
        }
        let entry = CheckSignals::entry_of(self.snapshot.borrow().checks.get(name));
        self.signals.send_if_modified(|current| {
            if current.entry(name) == entry {
                return false;
            }
            let signals = Arc::make_mut(current);
            signals.set(name, entry);
            signals.seq += 1;
            true
        });
    }

    /// Waits until the supervisor has acted on the signals as they are now, as Pebble's
    /// check takes its failure action before its task fails; at once when no supervisor
    /// takes the signals in, and for at most [`ACT_WAIT`] when it does not act.
    pub(crate) async fn acted_on_latest(&self) {
        let (seq, mut acted) = {
            let signals = self.signals.borrow();
            (signals.seq, signals.receipt.0.subscribe())
        };
        if acted.borrow().is_none() {
            return;
        }
        let _ = tokio::time::timeout(
            ACT_WAIT,
            acted.wait_for(|acted| acted.is_some_and(|n| n >= seq)),
        )
        .await;
    }
}

/// The firing number of a check that is down.
fn firing_count(view: &CheckView) -> Option<u64> {
    (view.status == CheckStatus::Down).then_some(view.action_count)
}

/// Whether a check of `level` counts for a health query at `query` (`Unset` = any): `ready`
/// also covers `alive` checks, `alive` does not cover `ready` ones.
pub(crate) fn health_level_matches(query: CheckLevel, level: CheckLevel) -> bool {
    query == CheckLevel::Unset
        || query == level
        || (query == CheckLevel::Ready && level == CheckLevel::Alive)
}

/// Health of the checks matching `level` and `names` (empty = all): false when any of them is
/// down. Inactive checks and unknown names do not count.
pub(crate) fn healthy(snapshot: &Snapshot, level: CheckLevel, names: &[String]) -> bool {
    !snapshot.checks.values().any(|check| {
        check.status == CheckStatus::Down
            && health_level_matches(level, check.level)
            && (names.is_empty() || names.contains(&check.name))
    })
}

#[cfg(test)]
mod tests;
