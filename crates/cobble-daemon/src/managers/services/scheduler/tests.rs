//! The scheduler on paused time: a wall clock that follows tokio's, scripted runs, and the
//! plan on a watch channel. Times are UTC, so no offset changes; `next_run` is tested
//! across them apart.

use std::collections::BTreeSet;
use std::sync::Mutex;

use cobble_plan::Service;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::*;

/// A wall clock that follows tokio's paused clock from `base`, plus whatever the test jumps.
struct PausedClock {
    base: Timestamp,
    origin: Instant,
    jumped: Mutex<Duration>,
    zone: TimeZone,
}

impl PausedClock {
    fn at(base: &str) -> Arc<PausedClock> {
        Arc::new(PausedClock {
            base: base.parse().unwrap(),
            origin: Instant::now(),
            jumped: Mutex::new(Duration::ZERO),
            zone: TimeZone::UTC,
        })
    }

    /// Moves the wall clock on without tokio's (a suspended machine, a stepped clock).
    fn jump(&self, by: Duration) {
        *self.jumped.lock().unwrap() += by;
    }
}

impl WallClock for PausedClock {
    fn now(&self) -> Timestamp {
        let elapsed = self.origin.elapsed() + *self.jumped.lock().unwrap();
        self.base + jiff::SignedDuration::try_from(elapsed).unwrap()
    }

    fn zone(&self) -> &TimeZone {
        &self.zone
    }
}

/// Runs that stay going (the service active, and its change not ready unless the test says
/// `ready_at_once`) until the test ends them.
#[derive(Default)]
struct Script {
    /// (service, wall time, change ID) of every start.
    starts: Vec<(String, Timestamp, u64)>,
    active: BTreeSet<String>,
    ends: BTreeMap<u64, oneshot::Sender<RunOutcome>>,
    ready_at_once: bool,
}

struct ScriptedRuns {
    clock: Arc<PausedClock>,
    script: Mutex<Script>,
}

impl ScriptedRuns {
    fn new(clock: Arc<PausedClock>) -> Arc<ScriptedRuns> {
        Arc::new(ScriptedRuns {
            clock,
            script: Mutex::new(Script::default()),
        })
    }

    fn starts(&self) -> Vec<String> {
        self.script
            .lock()
            .unwrap()
            .starts
            .iter()
            .map(|(name, at, _)| format!("{name} {at}"))
            .collect()
    }

    /// Ends the run of change `id`: the service stops and the change is ready.
    fn end(&self, id: u64, outcome: RunOutcome) {
        let mut script = self.script.lock().unwrap();
        let name = script.starts[usize::try_from(id).unwrap() - 1].0.clone();
        script.active.remove(&name);
        if let Some(end) = script.ends.remove(&id) {
            let _ = end.send(outcome);
        }
    }
}

impl ScheduledRuns for ScriptedRuns {
    fn start(&self, name: String, schedule: String) -> BoxFuture<'static, Result<u64, String>> {
        let mut script = self.script.lock().unwrap();
        assert!(!schedule.is_empty());
        let id = script.starts.len() as u64 + 1;
        script.starts.push((name.clone(), self.clock.now(), id));
        script.active.insert(name);
        Box::pin(async move { Ok(id) })
    }

    fn outcome(&self, change_id: u64) -> BoxFuture<'static, RunOutcome> {
        let mut script = self.script.lock().unwrap();
        if script.ready_at_once {
            return Box::pin(async { RunOutcome::Done });
        }
        let (tx, rx) = oneshot::channel();
        script.ends.insert(change_id, tx);
        Box::pin(async move { rx.await.unwrap_or(RunOutcome::Error("dropped".into())) })
    }

    fn active(&self) -> BoxFuture<'static, Vec<String>> {
        let active = self.script.lock().unwrap().active.iter().cloned().collect();
        Box::pin(async move { active })
    }
}

fn plan(schedules: &[(&str, &str)]) -> Arc<Plan> {
    let mut plan = Plan::default();
    for (name, schedule) in schedules {
        plan.services.insert(
            (*name).into(),
            Service {
                name: (*name).into(),
                command: "/bin/job".into(),
                schedule: (*schedule).into(),
                ..Service::default()
            },
        );
    }
    Arc::new(plan)
}

struct Harness {
    clock: Arc<PausedClock>,
    runs: Arc<ScriptedRuns>,
    plan: watch::Sender<Arc<Plan>>,
    scheduler: Scheduler,
}

impl Harness {
    fn new(at: &str, schedules: &[(&str, &str)]) -> Harness {
        let clock = PausedClock::at(at);
        let runs = ScriptedRuns::new(clock.clone());
        let (plan, plan_rx) = watch::channel(plan(schedules));
        let (scheduler, _task) = Scheduler::spawn(plan_rx, runs.clone(), clock.clone());
        Harness {
            clock,
            runs,
            plan,
            scheduler,
        }
    }

    /// Lets paused time run on by `secs` seconds (the scheduler's sleeps end on the way).
    async fn pass(&self, secs: u64) {
        tokio::time::sleep(Duration::from_secs(secs)).await;
        // And lets the scheduler take what woke it.
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    fn status(&self, name: &str) -> ScheduleStatus {
        self.scheduler.statuses()[name].clone()
    }
}

fn ts(text: &str) -> Timestamp {
    text.parse().unwrap()
}

#[tokio::test(start_paused = true)]
async fn every_boundary_starts_one_run_at_that_time() {
    let h = Harness::new("2026-12-04T10:00:30Z", &[("job", "00:00-24:00/1440")]);
    h.runs.script.lock().unwrap().ready_at_once = true;
    h.pass(1).await;
    assert_eq!(h.status("job").next, Some(ts("2026-12-04T10:01:00Z")));
    for minute in 1..=3 {
        h.pass(60).await;
        // The run ended before the next boundary.
        let id = minute;
        h.runs.end(id, RunOutcome::Done);
    }
    assert_eq!(
        h.runs.starts(),
        [
            "job 2026-12-04T10:01:00Z",
            "job 2026-12-04T10:02:00Z",
            "job 2026-12-04T10:03:00Z"
        ]
    );
    let status = h.status("job");
    assert_eq!(status.next, Some(ts("2026-12-04T10:04:00Z")));
    assert_eq!(status.skips, 0);
    assert_eq!(status.runs, 3);
    assert_eq!(
        status.last_run,
        Some(LastRun {
            at: ts("2026-12-04T10:03:00Z"),
            change_id: Some(3),
            outcome: RunOutcome::Done
        })
    );
}

#[tokio::test(start_paused = true)]
async fn a_run_still_going_at_the_next_boundary_skips_it() {
    let h = Harness::new("2026-12-04T10:00:30Z", &[("job", "00:00-24:00/1440")]);
    // The first run takes 90 s: its change is not ready and the service runs.
    h.pass(31).await;
    assert_eq!(h.runs.starts(), ["job 2026-12-04T10:01:00Z"]);
    assert_eq!(
        h.status("job").last_run.unwrap().outcome,
        RunOutcome::Running
    );
    h.pass(60).await;
    let status = h.status("job");
    assert_eq!(h.runs.starts().len(), 1, "{:?}", h.runs.starts());
    assert_eq!(status.last_skip, Some(ts("2026-12-04T10:02:00Z")));
    assert_eq!(status.skips, 1);
    assert_eq!(status.next, Some(ts("2026-12-04T10:03:00Z")));
    h.runs.end(1, RunOutcome::Done);
    h.pass(0).await;
    assert_eq!(h.status("job").last_run.unwrap().outcome, RunOutcome::Done);
    h.pass(60).await;
    assert_eq!(
        h.runs.starts(),
        ["job 2026-12-04T10:01:00Z", "job 2026-12-04T10:03:00Z"]
    );

    // A change that is ready while the service still runs (a daemon's start is done once
    // it has run for the okay delay): the run is still going.
    h.runs.script.lock().unwrap().ready_at_once = true;
    h.runs.end(2, RunOutcome::Done);
    h.pass(60).await;
    assert_eq!(h.runs.starts().len(), 3);
    h.pass(60).await;
    assert_eq!(h.runs.starts().len(), 3);
    assert_eq!(h.status("job").last_skip, Some(ts("2026-12-04T10:05:00Z")));
    assert_eq!(h.status("job").skips, 2);
    assert_eq!(h.status("job").runs, 3);
    h.runs.end(3, RunOutcome::Done);
    h.pass(60).await;
    assert_eq!(h.runs.starts()[3], "job 2026-12-04T10:06:00Z");
}

#[tokio::test(start_paused = true)]
async fn runs_missed_are_not_made_up() {
    let h = Harness::new("2026-12-04T10:00:30Z", &[("job", "00:00-24:00/1440")]);
    h.runs.script.lock().unwrap().ready_at_once = true;
    h.pass(1).await;
    // The wall clock moves on ten minutes at once (the machine slept): one run, at the
    // first wake, and the next boundary after it; not ten.
    h.clock.jump(Duration::from_secs(600));
    h.pass(RECHECK.as_secs()).await;
    let starts = h.runs.starts();
    assert_eq!(starts.len(), 1, "{starts:?}");
    assert!(
        starts[0].as_str() > "job 2026-12-04T10:10:30Z",
        "{starts:?}"
    );
    assert_eq!(h.status("job").next, Some(ts("2026-12-04T10:12:00Z")));
    assert_eq!(h.status("job").skips, 0);

    // A daemon started after its schedule's times knows nothing of them: the first run is
    // the next time.
    let later = Harness::new("2026-12-04T10:30:10Z", &[("job", "10:00,,00:00-24:00/48")]);
    later.pass(1).await;
    assert!(later.runs.starts().is_empty());
    assert_eq!(later.status("job").next, Some(ts("2026-12-04T11:00:00Z")));
}

#[tokio::test(start_paused = true)]
async fn adding_or_changing_a_schedule_runs_nothing_at_once() {
    let h = Harness::new("2026-12-04T10:00:59Z", &[("job", "10:00"), ("plain", "")]);
    h.runs.script.lock().unwrap().ready_at_once = true;
    h.pass(0).await;
    // No schedule, no entry; today's 10:00 has gone.
    assert!(!h.scheduler.statuses().contains_key("plain"));
    assert_eq!(h.status("job").next, Some(ts("2026-12-05T10:00:00Z")));
    // Changed to every minute, and a schedule added, a moment before a boundary: the first
    // run of each is that boundary, nothing now.
    h.plan.send_replace(plan(&[
        ("job", "00:00-24:00/1440"),
        ("plain", "00:00-24:00/720"),
    ]));
    h.pass(0).await;
    assert!(h.runs.starts().is_empty());
    assert_eq!(h.status("job").next, Some(ts("2026-12-04T10:01:00Z")));
    assert_eq!(h.status("plain").next, Some(ts("2026-12-04T10:02:00Z")));
    h.pass(1).await;
    assert_eq!(h.runs.starts(), ["job 2026-12-04T10:01:00Z"]);
    // A plan change that leaves a schedule as it was keeps what it knows.
    h.plan
        .send_replace(plan(&[("job", "00:00-24:00/1440"), ("other", "")]));
    h.pass(0).await;
    assert!(h.status("job").last_run.is_some());
    assert!(!h.scheduler.statuses().contains_key("plain"));
    // Removed: no more runs.
    h.plan.send_replace(plan(&[("job", "")]));
    h.pass(600).await;
    assert_eq!(h.runs.starts().len(), 1);
    assert!(h.scheduler.statuses().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_stopped_scheduler_starts_nothing() {
    let h = Harness::new("2026-12-04T10:00:30Z", &[("job", "00:00-24:00/1440")]);
    h.pass(1).await;
    h.scheduler.stop();
    h.pass(120).await;
    assert!(h.runs.starts().is_empty());
}

#[test]
fn next_run_in_a_zone_with_summer_time() {
    // Central Europe: 02:00 becomes 03:00 on 2026-03-29, 03:00 becomes 02:00 on 2026-10-25.
    let zone = TimeZone::posix("CET-1CEST,M3.5.0,M10.5.0/3").unwrap();
    let daily = Schedule::parse("02:30").unwrap();
    // The skipped 02:30 is taken as 03:30 summer time, 01:30 UTC.
    assert_eq!(
        next_run(&daily, "job", ts("2026-03-28T12:00:00Z"), &zone),
        Some(ts("2026-03-29T01:30:00Z"))
    );
    // The repeated 02:30 runs once, at its first occurrence (summer time, 00:30 UTC).
    assert_eq!(
        next_run(&daily, "job", ts("2026-10-24T12:00:00Z"), &zone),
        Some(ts("2026-10-25T00:30:00Z"))
    );
    assert_eq!(
        next_run(&daily, "job", ts("2026-10-25T00:30:00Z"), &zone),
        Some(ts("2026-10-26T01:30:00Z"))
    );
    // Every minute through the repeated hour: from 02:59 summer time the next civil minute
    // is 03:00, which comes after the repeated hour; the repeated minutes are not run again.
    let minutely = Schedule::parse("00:00-24:00/1440").unwrap();
    assert_eq!(
        next_run(&minutely, "job", ts("2026-10-25T00:59:00Z"), &zone),
        Some(ts("2026-10-25T02:00:00Z"))
    );
    // Through the skipped hour: 01:59 winter time, then 03:00 summer time.
    assert_eq!(
        next_run(&minutely, "job", ts("2026-03-29T00:59:00Z"), &zone),
        Some(ts("2026-03-29T01:00:00Z"))
    );
}

#[test]
fn a_spread_run_falls_in_its_window_at_a_point_fixed_per_service() {
    let schedule = Schedule::parse("9:00~11:00").unwrap();
    let after = ts("2026-12-04T00:00:00Z");
    let a = next_run(&schedule, "a", after, &TimeZone::UTC).unwrap();
    let b = next_run(&schedule, "b", after, &TimeZone::UTC).unwrap();
    for t in [a, b] {
        assert!(
            t >= ts("2026-12-04T09:00:00Z") && t < ts("2026-12-04T11:00:00Z"),
            "{t}"
        );
    }
    assert_ne!(a, b);
    assert_eq!(next_run(&schedule, "a", after, &TimeZone::UTC), Some(a));
    // After its run, the next is tomorrow's window.
    let next = next_run(&schedule, "a", a, &TimeZone::UTC).unwrap();
    assert!(next >= ts("2026-12-05T09:00:00Z"), "{next}");
}
