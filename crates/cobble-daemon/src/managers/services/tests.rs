//! The service manager actor, in process: scripted processes stand in for real ones, so the
//! tests drive exits and signals themselves and run on paused time where timing is the point.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cobble_plan::{Plan, Service, ServiceAction};
use tokio::sync::{Notify, mpsc, oneshot, watch};
use tokio::time::Instant;

use super::machine::{GroupSignal, StartOutcome, StopOutcome};
use super::{ServiceManager, StartReply};
use crate::checks::{CheckSignals, Firing};
use crate::process::{Escaped, Processes, SpawnError, Spawned};

/// What the scripted processes did, for the tests to look at.
#[derive(Default)]
struct Record {
    /// Pids handed out, with the (paused) time of each spawn.
    spawns: Vec<(u32, Instant)>,
    /// Spawns begun (a held spawn counts before it is released).
    spawning: usize,
    /// Group signals sent, in order.
    signals: Vec<(u32, GroupSignal)>,
    /// Groups ended after their process was done with.
    ended: Vec<u32>,
    /// Main processes whose remains were signalled after they exited on their own.
    remains: Vec<u32>,
    /// Signals sent through `/v1/signals`, in order.
    process_signals: Vec<(u32, String)>,
    /// How to finish each live process.
    exits: BTreeMap<u32, oneshot::Sender<i32>>,
}

/// Processes that exist only in this table. SIGTERM ends one with code 143.
struct Scripted {
    record: Mutex<Record>,
    /// Woken at every spawn and signal.
    changed: Notify,
    /// While set, a spawn waits for the test to release it (a slow fork).
    hold_spawns: Mutex<Option<std::sync::mpsc::Receiver<()>>>,
}

impl Scripted {
    fn new() -> Arc<Scripted> {
        Arc::new(Scripted {
            record: Mutex::new(Record::default()),
            changed: Notify::new(),
            hold_spawns: Mutex::new(None),
        })
    }

    fn record(&self) -> std::sync::MutexGuard<'_, Record> {
        self.record.lock().unwrap()
    }

    /// Ends process `pid` with `code`.
    fn exit(&self, pid: u32, code: i32) {
        let sender = self.record().exits.remove(&pid).expect("a live process");
        let _ = sender.send(code);
    }

    fn spawn_times(&self) -> Vec<Instant> {
        self.record().spawns.iter().map(|(_, at)| *at).collect()
    }

    fn last_pid(&self) -> u32 {
        self.record().spawns.last().expect("a spawn").0
    }

    /// Waits (on real time; the scripted side never sleeps) until `done` holds.
    async fn until(&self, what: &str, done: impl Fn(&Record) -> bool) {
        let wait = async {
            loop {
                let changed = self.changed.notified();
                if done(&self.record()) {
                    return;
                }
                changed.await;
            }
        };
        if tokio::time::timeout(Duration::from_secs(60), wait)
            .await
            .is_err()
        {
            panic!("timed out waiting until {what}");
        }
    }
}

impl Processes for Scripted {
    fn spawn(&self, _name: &str, config: &Service) -> Result<Spawned, SpawnError> {
        self.record().spawning += 1;
        self.changed.notify_waiters();
        if let Some(gate) = self.hold_spawns.lock().unwrap().as_ref() {
            let _ = gate.recv();
        }
        let missing = self.missing(config.requires_paths.clone());
        if !missing.is_empty() {
            return Err(SpawnError::Missing(missing));
        }
        let (exit_tx, exit_rx) = oneshot::channel();
        let pid = {
            let mut record = self.record();
            let pid = 100 + record.spawns.len() as u32;
            record.spawns.push((pid, Instant::now()));
            record.exits.insert(pid, exit_tx);
            pid
        };
        self.changed.notify_waiters();
        Ok(Spawned {
            pid,
            exit: Box::pin(async move { exit_rx.await.unwrap_or(-1) }),
            output: None,
        })
    }

    fn signal_group(&self, pid: u32, signal: GroupSignal) -> Vec<Escaped> {
        let exit = {
            let mut record = self.record();
            record.signals.push((pid, signal));
            record.exits.remove(&pid)
        };
        if let Some(exit) = exit {
            let _ = exit.send(if signal == GroupSignal::Term {
                143
            } else {
                137
            });
        }
        self.changed.notify_waiters();
        Vec::new()
    }

    fn end_group(&self, pid: u32, _escaped: &[Escaped]) {
        self.record().ended.push(pid);
        self.changed.notify_waiters();
    }

    fn signal_remains(&self, pid: u32, _signal: GroupSignal) -> Vec<Escaped> {
        self.record().remains.push(pid);
        self.changed.notify_waiters();
        // Every scripted process leaves one child behind.
        vec![(pid + 10_000, 0)]
    }

    fn signal_process(&self, pid: u32, signal: &str) -> Result<(), String> {
        self.record().process_signals.push((pid, signal.to_owned()));
        self.changed.notify_waiters();
        Ok(())
    }

    fn forget(&self, _name: &str, _pid: u32) {}

    fn belongs(&self, leader: u32, sender: cobble_sys::notify::Sender) -> bool {
        sender.pid == leader
    }

    fn missing(&self, paths: Vec<String>) -> Vec<String> {
        paths
            .into_iter()
            .filter(|p| !std::path::Path::new(p).exists())
            .collect()
    }
}

struct Harness {
    manager: ServiceManager,
    processes: Arc<Scripted>,
    checks: watch::Sender<Arc<CheckSignals>>,
    _plan: watch::Sender<Arc<Plan>>,
    _shutdown: mpsc::UnboundedReceiver<i32>,
}

fn service(name: &str) -> Service {
    Service {
        name: name.into(),
        command: "/bin/workload".into(),
        ..Service::default()
    }
}

impl Harness {
    fn new(services: Vec<Service>) -> Harness {
        let mut plan = Plan::default();
        for service in services {
            plan.services.insert(service.name.clone(), service);
        }
        let (plan_tx, plan_rx) = watch::channel(Arc::new(plan));
        let (checks, checks_rx) = watch::channel(Arc::<CheckSignals>::default());
        let (shutdown_tx, shutdown_rx) = mpsc::unbounded_channel();
        let processes = Scripted::new();
        let (manager, _task) = ServiceManager::spawn(
            plan_rx,
            checks_rx,
            processes.clone(),
            crate::logs::capture::Destinations::default(),
            shutdown_tx,
        );
        Harness {
            manager,
            processes,
            checks,
            _plan: plan_tx,
            _shutdown: shutdown_rx,
        }
    }

    /// Starts `name` in the background; the reply arrives on the returned channel.
    fn start(&self, name: &str) -> oneshot::Receiver<StartReply> {
        let (tx, rx) = oneshot::channel();
        let manager = self.manager.clone();
        let name = name.to_owned();
        tokio::spawn(async move {
            let _ = tx.send(manager.start(&name, true).await);
        });
        rx
    }

    async fn status(&self, name: &str) -> String {
        let statuses = self.manager.statuses(vec![name.into()], false).await;
        // Not reported: never started.
        statuses
            .first()
            .map_or("inactive", |s| s.current.as_str())
            .to_owned()
    }

    /// Waits until `name` reports `want`, in steps of a paused millisecond (a few of them at
    /// most: the actor only has queued messages to get through).
    async fn wait_status(&self, name: &str, want: &str) {
        for _ in 0..100 {
            if self.status(name).await == want {
                return;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        panic!("{name} is {}, not {want}", self.status(name).await);
    }

    fn fire(&self, firing: &[(&str, u64)]) {
        let firing: Firing = firing.iter().map(|(c, n)| (c.to_string(), *n)).collect();
        self.checks
            .send_modify(|checks| Arc::make_mut(checks).firing = firing);
    }

    /// Only these checks pass (and none is down).
    fn pass(&self, passing: &[&str]) {
        let passing = passing.iter().map(|c| c.to_string()).collect();
        self.checks.send_replace(Arc::new(CheckSignals {
            passing,
            ..CheckSignals::default()
        }));
    }
}

#[tokio::test(start_paused = true)]
async fn a_start_resolves_after_exactly_the_okay_delay() {
    let h = Harness::new(vec![service("web")]);
    let began = Instant::now();
    let reply = h.start("web").await.unwrap();
    assert_eq!(reply.outcome, StartOutcome::Started);
    assert_eq!(Instant::now() - began, Duration::from_secs(1));
    assert_eq!(h.status("web").await, "active");
}

#[tokio::test(start_paused = true)]
async fn quick_exits_back_off_on_the_default_schedule_with_at_most_ten_percent_jitter() {
    let h = Harness::new(vec![service("web")]);
    let start = h.start("web");
    h.processes.until("spawned", |r| r.spawns.len() == 1).await;
    h.processes.exit(h.processes.last_pid(), 1);
    let reply = start.await.unwrap();
    assert_eq!(
        reply.outcome,
        StartOutcome::Failed {
            error: "service start attempt: exited quickly with code 1, will restart".into(),
            with_output: true
        }
    );
    for n in 2..=6 {
        h.processes
            .until("respawned", |r| r.spawns.len() == n)
            .await;
        h.processes.exit(h.processes.last_pid(), 1);
    }
    let times = h.processes.spawn_times();
    let gaps: Vec<f64> = times
        .windows(2)
        .map(|w| (w[1] - w[0]).as_secs_f64())
        .collect();
    for (gap, base) in gaps.iter().zip([0.5, 1.0, 2.0, 4.0, 8.0]) {
        assert!(
            *gap >= base && *gap <= base * 1.1,
            "gaps {gaps:?} do not follow 0.5, 1, 2, 4, 8 s"
        );
    }
    h.wait_status("web", "backoff").await;
}

#[tokio::test(start_paused = true)]
async fn a_check_firing_restarts_the_service_and_recovery_ends_the_backoff() {
    let mut web = service("web");
    web.on_check_failure = [("up".to_owned(), ServiceAction::Restart)].into();
    let h = Harness::new(vec![web]);
    h.start("web").await.unwrap();
    let first = h.processes.last_pid();

    h.fire(&[("up", 1)]);
    h.processes
        .until("terminated", |r| r.signals == [(first, GroupSignal::Term)])
        .await;
    h.processes.until("ended", |r| r.ended == [first]).await;
    h.wait_status("web", "backoff").await;

    // The check passes while the service backs off: it comes back now, not at the deadline.
    let recovered = Instant::now();
    h.fire(&[]);
    h.processes
        .until("respawned", |r| r.spawns.len() == 2)
        .await;
    assert_eq!(h.processes.spawn_times()[1], recovered);
    h.wait_status("web", "active").await;
}

#[tokio::test(start_paused = true)]
async fn a_service_requiring_a_check_waits_for_it_and_starts_the_moment_it_passes() {
    let mut web = service("web");
    web.requires_checks = vec!["db".into()];
    let h = Harness::new(vec![web]);
    let reply = h.start("web").await.unwrap();
    assert_eq!(
        reply.outcome,
        StartOutcome::Waiting {
            missing: vec!["check \"db\"".into()]
        }
    );
    h.wait_status("web", "waiting").await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(h.processes.record().spawns.is_empty());

    let passed = Instant::now();
    h.pass(&["db"]);
    h.processes.until("spawned", |r| r.spawns.len() == 1).await;
    assert_eq!(h.processes.spawn_times()[0], passed, "not on a poll");
    h.wait_status("web", "active").await;
}

#[tokio::test(start_paused = true)]
async fn a_start_decides_against_the_checks_as_they_are_now() {
    // The check passed before the service was ever started: the start does not wait.
    let mut web = service("web");
    web.requires_checks = vec!["db".into()];
    let h = Harness::new(vec![web]);
    h.pass(&["db"]);
    tokio::task::yield_now().await;
    let reply = h.start("web").await.unwrap();
    assert_eq!(reply.outcome, StartOutcome::Started);
}

#[tokio::test(start_paused = true)]
async fn a_firing_that_is_over_before_the_supervisor_looks_is_not_acted_on() {
    let mut web = service("web");
    web.on_check_failure = [("up".to_owned(), ServiceAction::Restart)].into();
    let h = Harness::new(vec![web]);
    h.start("web").await.unwrap();
    // Down and up again before the actor runs: it sees only the present, where the check is up.
    h.fire(&[("up", 1)]);
    h.fire(&[]);
    // Paused time only moves on once every task is idle: the actor has looked by then.
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(h.processes.record().signals.is_empty(), "restarted anyway");
    assert_eq!(h.processes.record().spawns.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_stop_during_a_slow_spawn_stops_what_the_spawn_produces() {
    let h = Harness::new(vec![service("web")]);
    let (release, gate) = std::sync::mpsc::channel();
    *h.processes.hold_spawns.lock().unwrap() = Some(gate);
    let start = h.start("web");
    h.processes.until("spawning", |r| r.spawning == 1).await;
    // The actor answers other requests while the spawn is under way.
    assert_eq!(h.status("web").await, "active");
    let stop = {
        let manager = h.manager.clone();
        tokio::spawn(async move { manager.stop("web").await })
    };
    assert_eq!(h.status("web").await, "active");
    release.send(()).unwrap();
    assert_eq!(stop.await.unwrap(), StopOutcome::Stopped);
    let reply = start.await.unwrap();
    assert_eq!(
        reply.outcome,
        StartOutcome::Failed {
            error: "stopped before the 1s okay delay".into(),
            with_output: false
        }
    );
    let pid = h.processes.last_pid();
    assert_eq!(h.processes.record().signals, [(pid, GroupSignal::Term)]);
    assert_eq!(h.status("web").await, "inactive");
}

/// A take-over waits for a spawn under way, but not for one that hangs: it gives up, naming
/// the service, and the service stays this program's to supervise. (On real time: paused
/// time does not advance while a spawn, on the blocking pool, is under way.)
#[tokio::test]
async fn a_take_over_held_by_a_spawn_that_hangs_gives_up_and_changes_nothing() {
    let h = Harness::new(vec![service("web")]);
    let (release, gate) = std::sync::mpsc::channel();
    *h.processes.hold_spawns.lock().unwrap() = Some(gate);
    let start = h.start("web");
    h.processes.until("spawning", |r| r.spawning == 1).await;
    let wait = Duration::from_millis(1500);
    let began = Instant::now();
    let refused = h.manager.take_over(true, wait).await.err();
    assert_eq!(
        refused,
        Some(vec![
            "service \"web\" is still being spawned after 1s".to_owned()
        ])
    );
    assert!(Instant::now() - began >= wait);
    // This spawn, and the restart's.
    release.send(()).unwrap();
    release.send(()).unwrap();
    assert_eq!(start.await.unwrap().outcome, StartOutcome::Started);
    // Still followed: its exit is acted on, with a restart once the backoff is over.
    h.processes.exit(h.processes.last_pid(), 1);
    h.processes
        .until("restarted", |r| r.spawns.len() == 2)
        .await;
    h.wait_status("web", "active").await;
    // And a take-over with nothing being spawned hands it over at once.
    let taken = h.manager.take_over(true, wait).await.ok().unwrap();
    let names: Vec<&str> = taken.services.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["web"]);
}

/// Regression: a service listed `active` while its spawn was under way answered a signal with
/// "service is not running". The signal now waits for the pid, as it would in Pebble, whose
/// spawn no client can see half done.
#[tokio::test]
async fn a_signal_during_a_slow_spawn_reaches_the_process_it_produces() {
    let h = Harness::new(vec![service("web"), service("db")]);
    let (release, gate) = std::sync::mpsc::channel();
    *h.processes.hold_spawns.lock().unwrap() = Some(gate);
    let start = h.start("web");
    h.processes.until("spawning", |r| r.spawning == 1).await;
    assert_eq!(h.status("web").await, "active");
    let signal = {
        let manager = h.manager.clone();
        tokio::spawn(async move { manager.signal(vec!["web".into()], "SIGHUP".into()).await })
    };
    // A service that is not starting is refused at once, held signal or not.
    assert_eq!(
        h.manager.signal(vec!["db".into()], "SIGHUP".into()).await,
        Err("cannot send signal to \"db\": service is not running".into())
    );
    assert!(h.processes.record().process_signals.is_empty());
    release.send(()).unwrap();
    assert_eq!(signal.await.unwrap(), Ok(()));
    let pid = h.processes.last_pid();
    assert_eq!(
        h.processes.record().process_signals,
        [(pid, "SIGHUP".to_owned())]
    );
    drop(start);
}

#[tokio::test]
async fn a_required_path_that_appears_starts_the_waiting_service() {
    let dir = tempfile::tempdir().unwrap();
    let cert = dir.path().join("certs/cert.pem");
    let mut web = service("web");
    web.requires_paths = vec![cert.display().to_string()];
    let h = Harness::new(vec![web]);
    let reply = h.start("web").await.unwrap();
    assert_eq!(
        reply.outcome,
        StartOutcome::Waiting {
            missing: vec![cert.display().to_string()]
        }
    );
    assert_eq!(h.status("web").await, "waiting");
    std::fs::create_dir_all(cert.parent().unwrap()).unwrap();
    std::fs::write(&cert, "cert").unwrap();
    h.processes.until("spawned", |r| r.spawns.len() == 1).await;
    h.wait_status("web", "active").await;
}

/// cobble-plan validates `on-file-change` signal names without depending on cobble-sys,
/// which sends them; the two lists must not drift apart.
#[test]
fn plan_signal_names_are_exactly_the_ones_that_can_be_sent() {
    for name in cobble_plan::SIGNAL_NAMES {
        assert!(
            cobble_sys::process::parse_signal(name).is_ok(),
            "{name} is valid in a layer but cannot be sent"
        );
    }
    for sig in cobble_sys::process::Signal::iterator() {
        assert!(
            cobble_plan::SIGNAL_NAMES.contains(&sig.as_str()),
            "{} can be sent but is rejected in a layer",
            sig.as_str()
        );
    }
}

#[tokio::test(start_paused = true)]
async fn what_an_exited_process_left_is_terminated_at_once_and_killed_after_the_kill_delay() {
    let mut web = service("web");
    web.kill_delay = Some("3s".parse().unwrap());
    web.on_success = ServiceAction::Ignore;
    let h = Harness::new(vec![web]);
    h.start("web").await.unwrap();
    let pid = h.processes.last_pid();
    h.processes.exit(pid, 0);
    h.processes
        .until("remains signalled", |r| r.remains == [pid])
        .await;
    let signalled = Instant::now();
    assert!(h.processes.record().ended.is_empty());
    h.processes.until("ended", |r| r.ended == [pid]).await;
    assert_eq!(Instant::now() - signalled, Duration::from_secs(3));
    h.wait_status("web", "inactive").await;
}

#[tokio::test(start_paused = true)]
async fn a_changed_schedule_alone_does_not_make_a_running_service_outdated() {
    let h = Harness::new(vec![service("job")]);
    let reply = h.start("job");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(reply.await.unwrap().outcome, StartOutcome::Started);
    let mut scheduled = service("job");
    scheduled.schedule = "00:00-24:00/96".into();
    let mut plan = Plan::default();
    plan.services.insert("job".into(), scheduled.clone());
    h._plan.send_replace(Arc::new(plan.clone()));
    assert!(h.manager.outdated().await.is_empty());
    // Any other change still does.
    scheduled.command = "/bin/other".into();
    plan.services.insert("job".into(), scheduled);
    h._plan.send_replace(Arc::new(plan));
    assert_eq!(h.manager.outdated().await, ["job"]);
}
