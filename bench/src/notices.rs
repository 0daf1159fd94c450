//! The notices group: how fast a notice reaches a waiting long-poller, what many waiting
//! pollers cost, and how many state writes a flapping check causes.
//!
//! - Wake latency: `bench/ops_notify.py` (run with `--python`) starts a raw long-poll on its
//!   own connection, then records a custom notice through ops; from just before `notify`
//!   until the poller's first response byte. Once with one key repeated (what a charm's
//!   recurring event looks like) and once with a new key each time (a new notice ID, which
//!   must be durable before any poller is shown it).
//! - Many pollers: `pollers` concurrent long-polls waiting on a key nobody records: the
//!   daemon's RSS and CPU over `window`, `GET /v1/health` latency meanwhile, then the time
//!   from one `notify` of that key until every poller has its answer.
//! - A flapping check: an exec check with a 1 s period that fails every other second
//!   (threshold 1), so every run changes a change's status: state-file writes (renames onto
//!   `.pebble.state`, counted with inotify) and change-update occurrences per second.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use cobble_client::types::NoticeInfo;
use cobble_client::{Method, NoticesOptions, NotifyOptions};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};

use crate::daemon::Daemon;
use crate::durability::{JournalRecords, state_renames};
use crate::report::{self, Row, Target, Unit};
use crate::stats::{Samples, python_samples};

/// How long the daemon may take to answer its first request.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);
/// Pebble v1.12.0's median notify-to-poller latency on the reference machine, seconds.
const PEBBLE_WAKE_S: f64 = 5.4e-3;
/// The wake latency target, seconds.
const WAKE_TARGET_S: f64 = 2.5e-3;
/// The `/v1/health` p99 target with the pollers waiting, seconds.
const HEALTH_TARGET_S: f64 = 5e-3;
/// The key the many pollers wait on.
const IDLE_KEY: &str = "bench.example.com/idle";

/// What the notices group runs.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// Measured wake-ups per key mode.
    pub runs: usize,
    /// Concurrent long-pollers in the many-pollers case.
    pub pollers: usize,
    /// Sequential `GET /v1/health` requests while they wait.
    pub health_requests: usize,
    /// The CPU window with the pollers waiting, and the flapping check's window.
    pub window: Duration,
    /// A Python with ops, for the wake latency.
    pub python: PathBuf,
    /// The pause between attempts to reach a launching daemon.
    pub poll_launch: Duration,
}

/// Runs the group and returns its Markdown.
pub(crate) async fn run(cobble: &Path, token: &str, settings: &Settings) -> Result<String> {
    ensure!(
        settings.runs > 0 && settings.pollers > 0,
        "nothing to measure"
    );
    let mut rows = Vec::new();
    let mut notes = String::new();

    let mut daemon = Daemon::spawn(cobble, None, token)?;
    daemon
        .wait_answer(settings.poll_launch, ANSWER_TIMEOUT)
        .await?;
    let socket = daemon.dir().join(".pebble.socket");
    for (mode, what) in [("same", "one key repeated"), ("new", "a new key each time")] {
        eprintln!(
            "==> notify through ops to a long-poller, {what} ({} runs)",
            settings.runs
        );
        match wake_latencies(&settings.python, &socket, settings.runs, mode) {
            Ok(samples) => rows.push(
                Row::distribution(
                    &format!("notice wake latency: ops `notify` → waiting poller ({what})"),
                    Unit::Millis,
                    &samples,
                )
                .pebble(PEBBLE_WAKE_S)
                .target(Target::below(WAKE_TARGET_S)),
            ),
            Err(e) => notes.push_str(&format!("The {what} wake latency was skipped: {e:#}.\n\n")),
        }
    }
    daemon.stop_clean()?;

    let mut daemon = Daemon::spawn(cobble, None, token)?;
    daemon
        .wait_answer(settings.poll_launch, ANSWER_TIMEOUT)
        .await?;
    rows.extend(many_pollers(&daemon, settings).await?);
    daemon.stop_clean()?;

    let layer = "checks:\n  flap:\n    override: replace\n    period: 1s\n    threshold: 1\n    \
                 exec:\n      command: /bin/sh -c 'test $(( $(date +%s) % 2 )) -eq 0'\n";
    let mut daemon = Daemon::spawn(cobble, Some(layer), token)?;
    daemon
        .wait_answer(settings.poll_launch, ANSWER_TIMEOUT)
        .await?;
    rows.extend(flapping_check(&daemon, settings.window).await?);
    daemon.stop_clean()?;
    Ok(format!("{}{notes}", report::markdown(&rows)))
}

/// Wake latencies measured by the Python script.
fn wake_latencies(python: &Path, socket: &Path, runs: usize, mode: &str) -> Result<Samples> {
    let socket = socket.to_string_lossy();
    python_samples(
        python,
        "ops_notify.py",
        &[&socket, &runs.to_string(), mode],
        runs,
    )
}

async fn many_pollers(daemon: &Daemon, settings: &Settings) -> Result<Vec<Row>> {
    let pollers = settings.pollers;
    eprintln!("==> {pollers} waiting long-pollers");
    let rss_before = daemon.rss()?;
    let options = NoticesOptions {
        keys: vec![IDLE_KEY.into()],
        ..Default::default()
    };
    let waiting: Vec<_> = (0..pollers)
        .map(|_| {
            let client = daemon.client().clone();
            let options = options.clone();
            tokio::spawn(async move {
                let notices = client
                    .wait_notices(&options, Duration::from_secs(600))
                    .await?;
                anyhow::Ok((Instant::now(), notices))
            })
        })
        .collect();
    // Let every poller connect and reach its wait.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss = daemon.rss()?;
    let cpu_before = daemon.cpu_time()?;
    tokio::time::sleep(settings.window).await;
    let cpu = daemon.cpu_time()? - cpu_before;
    let mut health = Samples::default();
    for _ in 0..settings.health_requests {
        let sent = Instant::now();
        let response = daemon
            .client()
            .raw_request(Method::GET, "/v1/health", None)
            .await?;
        ensure!(
            response.status_code == 200,
            "health answered {}",
            response.status_code
        );
        health.push(sent.elapsed());
    }
    let sent = Instant::now();
    daemon
        .client()
        .notify(&NotifyOptions {
            key: IDLE_KEY.into(),
            ..Default::default()
        })
        .await?;
    let mut last = sent;
    for poller in waiting {
        let (arrived, notices): (Instant, Vec<NoticeInfo>) = poller.await??;
        ensure!(notices.len() == 1, "a poller woke without the notice");
        last = last.max(arrived);
    }
    let mib = |kib: u64| kib as f64 / 1024.0;
    Ok(vec![
        Row::single(
            &format!(
                "{pollers} waiting long-pollers: daemon RSS (was {:.1} MiB without them)",
                mib(rss_before.total_kib)
            ),
            Unit::MiB,
            mib(rss.total_kib),
        ),
        Row::single(
            &format!(
                "{pollers} waiting long-pollers: daemon CPU over {:?} ({})",
                settings.window,
                report::cpu_share(cpu, settings.window)
            ),
            Unit::Seconds,
            cpu.as_secs_f64(),
        ),
        Row::distribution(
            &format!("`GET /v1/health` with {pollers} long-pollers waiting"),
            Unit::Millis,
            &health,
        )
        .target(Target::below(HEALTH_TARGET_S)),
        Row::single(
            &format!("one `notify` → all {pollers} pollers answered"),
            Unit::Millis,
            (last - sent).as_secs_f64(),
        ),
    ])
}

async fn flapping_check(daemon: &Daemon, window: Duration) -> Result<Vec<Row>> {
    eprintln!("==> a check flapping every second for {window:?}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let occurrences = || async {
        let options = NoticesOptions {
            types: vec!["change-update".into()],
            ..Default::default()
        };
        let notices = daemon.client().notices(&options).await?;
        anyhow::Ok(notices.iter().map(|n| n.occurrences).sum::<u64>())
    };
    let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)?;
    inotify.add_watch(daemon.dir(), AddWatchFlags::IN_MOVED_TO)?;
    let before = occurrences().await?;
    // A group commit appends a record to the journal, now and then it rewrites the file.
    let mut records = JournalRecords::new(daemon.dir().join(".pebble.state.journal"));
    let started = Instant::now();
    let mut writes = 0;
    while started.elapsed() < window {
        tokio::time::sleep(Duration::from_millis(100)).await;
        writes += state_renames(&inotify);
        records.sample();
    }
    let elapsed = started.elapsed().as_secs_f64();
    writes += state_renames(&inotify);
    records.sample();
    writes += records.total();
    let recorded = occurrences().await?.saturating_sub(before);
    Ok(vec![Row::single(
        &format!(
            "check flapping every second: state-file writes per second ({:.1} change-update occurrences/s)",
            recorded as f64 / elapsed
        ),
        Unit::Ratio,
        writes as f64 / elapsed,
    )])
}
