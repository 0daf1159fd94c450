//! Schedules: services the daemon starts by itself at the times their `schedule:` names.
//!
//! One task owns every scheduled service's next run. It sleeps on tokio's clock until the
//! earliest one, but the wall clock in the daemon's local time zone decides what the next run
//! is ([`cobble_plan::Schedule::next_after`] is pure and works on civil times): after each
//! wake it reads the wall clock again, and no sleep is longer than [`RECHECK`], so a wall
//! clock stepped while it slept is noticed. At a due time the service is started as `start`
//! would start it, through a change ([`ScheduledRuns::start`]), unless a run of it is still
//! going (its change is not ready, or the service is starting, running or backing off): then
//! the due run is skipped, logged and remembered for `cobble why`. Either way the next run
//! is the first time the schedule names after now, so runs missed while the daemon was not
//! running, or while it slept, are not made up, and a schedule added or changed runs nothing
//! at once.
//!
//! A spread event (`~`) falls at a point of its window that a hash of the service's name and
//! the window picks: services sharing a window spread out, and the point is the same after
//! a restart of the daemon.
//!
//! What it knows is published on a watch channel ([`Scheduler::statuses`]) for the listing
//! and `cobble why`; none of it is persisted.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use cobble_plan::{Plan, Schedule};
use futures_util::future::BoxFuture;
use jiff::Timestamp;
use jiff::tz::TimeZone;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// The longest the scheduler sleeps before it reads the wall clock again.
const RECHECK: Duration = Duration::from_secs(30);

/// The wall clock and the time zone schedules are read in. The daemon's is the system's;
/// tests give one that follows tokio's paused clock.
pub(crate) trait WallClock: Send + Sync + 'static {
    /// Now, on the wall clock.
    fn now(&self) -> Timestamp;
    /// The zone whose civil times a schedule names.
    fn zone(&self) -> &TimeZone;
    /// Reads what [`WallClock::zone`] needs, off the runtime's workers; awaited before the
    /// first schedule is read.
    fn prepare(self: Arc<Self>) -> BoxFuture<'static, ()> {
        Box::pin(async {})
    }
}

/// The system's clock and local time zone (`TZ`, else `/etc/localtime`). The zone is read
/// when the plan first has a schedule, so a daemon without one never reads it.
pub(crate) struct SystemClock(OnceLock<TimeZone>);

impl SystemClock {
    pub(crate) fn new() -> SystemClock {
        SystemClock(OnceLock::new())
    }
}

impl WallClock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }

    fn zone(&self) -> &TimeZone {
        // Prepared before any schedule is read; reading it here is only a fallback.
        self.0.get_or_init(TimeZone::system)
    }

    fn prepare(self: Arc<Self>) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            if self.0.get().is_none() {
                let clock = self.clone();
                let _ = tokio::task::spawn_blocking(move || {
                    clock.0.get_or_init(TimeZone::system);
                })
                .await;
            }
        })
    }
}

/// What a scheduled run does, and what the scheduler asks of the services: the daemon's is
/// [`super::changes::ServiceChanges`]; tests script it.
pub(crate) trait ScheduledRuns: Send + Sync + 'static {
    /// Starts `name` as `start` would, in a change that says it is the schedule's; the
    /// change's ID, or why it could not be made.
    fn start(&self, name: String, schedule: String) -> BoxFuture<'static, Result<u64, String>>;
    /// Waits until the change is ready; how it ended.
    fn outcome(&self, change_id: u64) -> BoxFuture<'static, RunOutcome>;
    /// The services that are starting, running or backing off.
    fn active(&self) -> BoxFuture<'static, Vec<String>>;
}

/// How a scheduled run's change ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RunOutcome {
    /// Not ready yet.
    Running,
    /// Every task done.
    Done,
    /// The change's error, or why no change could be made.
    Error(String),
}

/// A scheduled run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LastRun {
    /// When it was started.
    pub at: Timestamp,
    /// Its change; `None` when none could be made.
    pub change_id: Option<u64>,
    pub outcome: RunOutcome,
}

/// What the scheduler knows of one scheduled service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ScheduleStatus {
    /// The schedule, as the plan has it.
    pub schedule: String,
    /// The next run; `None` only past the end of the calendar.
    pub next: Option<Timestamp>,
    /// The last run started by the schedule since the daemon started.
    pub last_run: Option<LastRun>,
    /// The last due time skipped because a run was still going.
    pub last_skip: Option<Timestamp>,
    /// Due times skipped so far.
    pub skips: u64,
    /// Runs the schedule has started so far (a change made for each).
    pub runs: u64,
}

/// Every scheduled service's status, by name.
pub(crate) type ScheduleStatuses = Arc<BTreeMap<String, ScheduleStatus>>;

/// Handle to the scheduler's task.
#[derive(Clone)]
pub(crate) struct Scheduler {
    statuses: watch::Receiver<ScheduleStatuses>,
    /// The plan the statuses were last brought up to.
    taken: watch::Receiver<Option<Arc<Plan>>>,
    /// The daemon's plan, as the actor is told of it.
    plan: watch::Receiver<Arc<Plan>>,
    stop: CancellationToken,
}

impl Scheduler {
    /// Starts the scheduler on the plan's schedules.
    pub(crate) fn spawn(
        plan: watch::Receiver<Arc<Plan>>,
        runs: Arc<dyn ScheduledRuns>,
        clock: Arc<dyn WallClock>,
    ) -> (Scheduler, JoinHandle<()>) {
        let (publish, statuses) = watch::channel(ScheduleStatuses::default());
        let (took, taken) = watch::channel(None);
        let stop = CancellationToken::new();
        let (done_tx, done_rx) = mpsc::unbounded_channel();
        let handle = Scheduler {
            statuses,
            taken,
            plan: plan.clone(),
            stop: stop.clone(),
        };
        let actor = Actor {
            plan,
            took,
            runs,
            clock,
            entries: BTreeMap::new(),
            publish,
            done_tx,
            done_rx,
            stop: stop.clone(),
        };
        let task = tokio::spawn(actor.run());
        (handle, task)
    }

    /// What the scheduler knows now.
    pub(crate) fn statuses(&self) -> ScheduleStatuses {
        self.statuses.borrow().clone()
    }

    /// What the scheduler knows once it has taken `plan`, so that a listing read right after
    /// a layer was added shows the next runs of the schedules it gave. A plan without a
    /// schedule is not waited for, nor one the daemon has already replaced.
    pub(crate) async fn statuses_for(&self, plan: &Arc<Plan>) -> ScheduleStatuses {
        if plan.services.values().any(|s| !s.schedule.is_empty()) {
            let mut taken = self.taken.clone();
            // An error means the scheduler has stopped: what it knew is all there is.
            let _ = taken
                .wait_for(|taken| {
                    taken.as_ref().is_some_and(|t| Arc::ptr_eq(t, plan))
                        || !Arc::ptr_eq(&self.plan.borrow(), plan)
                })
                .await;
        }
        self.statuses()
    }

    /// Starts no more runs (the daemon is stopping its services).
    pub(crate) fn stop(&self) {
        self.stop.cancel();
    }

    /// A handle whose statuses never change, for views tested without a daemon.
    #[cfg(test)]
    pub(crate) fn fixed(statuses: ScheduleStatuses) -> Scheduler {
        let (tx, statuses) = watch::channel(statuses);
        std::mem::forget(tx);
        let (tx, taken) = watch::channel(None);
        std::mem::forget(tx);
        let (tx, plan) = watch::channel(Arc::new(Plan::default()));
        std::mem::forget(tx);
        Scheduler {
            statuses,
            taken,
            plan,
            stop: CancellationToken::new(),
        }
    }
}

/// One scheduled service.
struct Entry {
    schedule: Schedule,
    /// The change of the run in progress, until it is ready.
    running: Option<u64>,
    status: ScheduleStatus,
}

struct Actor {
    plan: watch::Receiver<Arc<Plan>>,
    /// Told each plan once the statuses published reflect it.
    took: watch::Sender<Option<Arc<Plan>>>,
    runs: Arc<dyn ScheduledRuns>,
    clock: Arc<dyn WallClock>,
    entries: BTreeMap<String, Entry>,
    publish: watch::Sender<ScheduleStatuses>,
    done_tx: mpsc::UnboundedSender<(String, u64, RunOutcome)>,
    done_rx: mpsc::UnboundedReceiver<(String, u64, RunOutcome)>,
    stop: CancellationToken,
}

impl Actor {
    async fn run(mut self) {
        let plan = self.plan.borrow_and_update().clone();
        self.take_plan(&plan).await;
        loop {
            self.publish();
            let now = self.clock.now();
            let wait = self
                .entries
                .values()
                .filter_map(|e| e.status.next)
                .min()
                .map(|next| {
                    let until = next.duration_since(now);
                    Duration::try_from(until).unwrap_or_default().min(RECHECK)
                });
            tokio::select! {
                biased;
                () = self.stop.cancelled() => return,
                changed = self.plan.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    let plan = self.plan.borrow_and_update().clone();
                    self.take_plan(&plan).await;
                }
                Some((name, change_id, outcome)) = self.done_rx.recv() => {
                    self.finished(&name, change_id, outcome);
                }
                () = sleep_for(wait) => self.fire_due().await,
            }
        }
    }

    /// Takes the plan's schedules, with the time zone read first when there are any.
    async fn take_plan(&mut self, plan: &Arc<Plan>) {
        if plan.services.values().any(|s| !s.schedule.is_empty()) {
            self.clock.clone().prepare().await;
        }
        self.reconcile(plan);
        self.publish();
        self.took.send_replace(Some(plan.clone()));
    }

    /// Takes the plan's schedules: a new or changed one gets its first run at the next
    /// time it names after now; an unchanged one keeps its state; a removed one is dropped.
    fn reconcile(&mut self, plan: &Plan) {
        let now = self.clock.now();
        self.entries.retain(|name, entry| {
            plan.services
                .get(name)
                .is_some_and(|s| s.schedule == entry.status.schedule)
        });
        for (name, service) in &plan.services {
            if service.schedule.is_empty() || self.entries.contains_key(name) {
                continue;
            }
            // The plan only holds schedules its layers' parser accepted.
            let Ok(schedule) = Schedule::parse(&service.schedule) else {
                continue;
            };
            let next = next_run(&schedule, name, now, self.clock.zone());
            self.entries.insert(
                name.clone(),
                Entry {
                    schedule,
                    running: None,
                    status: ScheduleStatus {
                        schedule: service.schedule.clone(),
                        next,
                        last_run: None,
                        last_skip: None,
                        skips: 0,
                        runs: 0,
                    },
                },
            );
        }
    }

    /// Starts, or skips, every run that is due, and finds each one's next.
    async fn fire_due(&mut self) {
        let now = self.clock.now();
        let due: Vec<String> = self
            .entries
            .iter()
            .filter(|(_, e)| e.status.next.is_some_and(|next| next <= now))
            .map(|(name, _)| name.clone())
            .collect();
        if due.is_empty() {
            return;
        }
        let active = self.runs.active().await;
        for name in due {
            let Some(entry) = self.entries.get_mut(&name) else {
                continue;
            };
            let at = entry.status.next.unwrap_or(now);
            if entry.running.is_some() || active.contains(&name) {
                tracing::info!(
                    "Service {name:?} is still running: its scheduled run at {} is skipped.",
                    cobble_client::time::format_rfc3339_secs(at)
                );
                entry.status.last_skip = Some(at);
                entry.status.skips += 1;
            } else {
                let started = self
                    .runs
                    .start(name.clone(), entry.status.schedule.clone())
                    .await;
                // The start may have taken a while: now is read again below.
                let (change_id, outcome) = match started {
                    Ok(id) => {
                        entry.running = Some(id);
                        entry.status.runs += 1;
                        let runs = self.runs.clone();
                        let done = self.done_tx.clone();
                        let service = name.clone();
                        tokio::spawn(async move {
                            let outcome = runs.outcome(id).await;
                            let _ = done.send((service, id, outcome));
                        });
                        (Some(id), RunOutcome::Running)
                    }
                    Err(error) => {
                        tracing::warn!("Cannot start service {name:?} on its schedule: {error}");
                        (None, RunOutcome::Error(error))
                    }
                };
                entry.status.last_run = Some(LastRun {
                    at: now,
                    change_id,
                    outcome,
                });
            }
            let after = self.clock.now().max(at);
            entry.status.next = next_run(&entry.schedule, &name, after, self.clock.zone());
        }
    }

    fn finished(&mut self, name: &str, change_id: u64, outcome: RunOutcome) {
        let Some(entry) = self.entries.get_mut(name) else {
            return;
        };
        if entry.running == Some(change_id) {
            entry.running = None;
        }
        if let Some(run) = entry.status.last_run.as_mut()
            && run.change_id == Some(change_id)
        {
            run.outcome = outcome;
        }
    }

    fn publish(&self) {
        let statuses: BTreeMap<String, ScheduleStatus> = self
            .entries
            .iter()
            .map(|(name, e)| (name.clone(), e.status.clone()))
            .collect();
        self.publish.send_if_modified(|current| {
            if **current == statuses {
                return false;
            }
            *current = Arc::new(statuses);
            true
        });
    }
}

/// Sleeps for `wait`, or for ever when there is nothing to wait for.
async fn sleep_for(wait: Option<Duration>) {
    match wait {
        Some(wait) => tokio::time::sleep(wait).await,
        None => std::future::pending().await,
    }
}

/// The first run of `schedule` strictly after `after`, read in `zone`. A civil time that a
/// change of offset skips is taken as the same length of time after the change; one it
/// repeats, at its first occurrence; an occurrence whose instant is not after `after` (the
/// repeated hour after a clock went back) is passed over.
pub(crate) fn next_run(
    schedule: &Schedule,
    service: &str,
    after: Timestamp,
    zone: &TimeZone,
) -> Option<Timestamp> {
    let mut civil = zone.to_datetime(after);
    // Each round moves past one occurrence; an hour repeated holds at most 60 of them.
    for _ in 0..1000 {
        let occurrence = schedule.next_after(civil)?;
        let mut hasher = std::hash::DefaultHasher::new();
        (service, occurrence.start).hash(&mut hasher);
        let at = occurrence.at(hasher.finish());
        let instant = zone
            .to_ambiguous_zoned_datetime(at)
            .compatible()
            .ok()?
            .timestamp();
        if instant > after {
            return Some(instant);
        }
        civil = occurrence.start;
    }
    None
}

#[cfg(test)]
mod tests;
