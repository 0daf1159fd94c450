//! The durability group: what it costs that a change ID is only answered once the state file
//! holds it (group commit: write and fsync before the answer, many requests per write).
//!
//! - The start of one service (`sleep`), one at a time: how long `POST /v1/services` takes to
//!   answer with the change ID, and how long until the change is ready. Each start is
//!   followed by an unmeasured stop.
//! - Load: `clients` connections each sending `stop` of its own (inactive) service as fast
//!   as the daemon answers, for `window`: requests answered per second, state writes per
//!   second and the answer latency. A state write is a full rewrite (a rename onto
//!   `.pebble.state`, counted with inotify) or a record appended to `.pebble.state.journal`
//!   (its lines, counted every 50 ms; records appended in the 50 ms before a full rewrite
//!   starts a fresh journal are missed, so the count errs low).

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use cobble_client::{Client, ClientConfig};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};

use crate::daemon::{Daemon, service_name, sleepers_layer};
use crate::report::{self, Row, Unit};
use crate::stats::Samples;

/// How long the daemon may take to answer its first request.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);
/// Unmeasured starts before the series.
const WARMUP: usize = 3;

/// What the durability group runs.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// Measured starts.
    pub starts: usize,
    /// Concurrent clients in the load case.
    pub clients: usize,
    /// The load window.
    pub window: Duration,
    /// The pause between attempts to reach a launching daemon.
    pub poll_launch: Duration,
}

/// Runs the group and returns its Markdown.
pub(crate) async fn run(
    cobble: &std::path::Path,
    token: &str,
    settings: &Settings,
) -> Result<String> {
    ensure!(
        settings.starts > 0 && settings.clients > 0,
        "nothing to measure"
    );
    let layer = sleepers_layer(settings.clients.max(1), token);
    let mut daemon = Daemon::spawn(cobble, Some(&layer), token)?;
    daemon
        .wait_answer(settings.poll_launch, ANSWER_TIMEOUT)
        .await?;
    let mut rows = Vec::new();

    eprintln!("==> start of one service ({} runs)", settings.starts);
    let client = daemon.client();
    let name = vec![service_name(0)];
    let (mut answered, mut ready) = (Samples::default(), Samples::default());
    for i in 0..WARMUP + settings.starts {
        let started = Instant::now();
        let id = client.start(&name).await.context("cannot start")?;
        let answer = started.elapsed();
        client
            .wait_change(&id, Some(ANSWER_TIMEOUT))
            .await
            .context("cannot wait for the start")?;
        let done = started.elapsed();
        if i >= WARMUP {
            answered.push(answer);
            ready.push(done);
        }
        let id = client.stop(&name).await.context("cannot stop")?;
        client.wait_change(&id, Some(ANSWER_TIMEOUT)).await?;
    }
    rows.push(Row::distribution(
        "`start` of one service: `POST /v1/services` answered (change ID durable)",
        Unit::Millis,
        &answered,
    ));
    rows.push(Row::distribution(
        "`start` of one service: change ready",
        Unit::Millis,
        &ready,
    ));

    eprintln!(
        "==> {} clients sending stop for {:?}",
        settings.clients, settings.window
    );
    let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)?;
    inotify.add_watch(daemon.dir(), AddWatchFlags::IN_MOVED_TO)?;
    let socket = daemon.dir().join(".pebble.socket");
    let deadline = Instant::now() + settings.window;
    let started = Instant::now();
    let tasks: Vec<_> = (0..settings.clients)
        .map(|i| {
            let client = Client::new(ClientConfig::socket(socket.clone()));
            let names = vec![service_name(i)];
            async move {
                let client = client?;
                let mut latencies = Samples::default();
                while Instant::now() < deadline {
                    let sent = Instant::now();
                    client.stop(&names).await.context("cannot stop")?;
                    latencies.push(sent.elapsed());
                }
                anyhow::Ok(latencies)
            }
        })
        .collect();
    let mut writes = 0usize;
    let mut records = JournalRecords::new(daemon.dir().join(".pebble.state.journal"));
    let results;
    {
        let all = futures_util::future::join_all(tasks);
        tokio::pin!(all);
        let mut tick = tokio::time::interval(Duration::from_millis(50));
        loop {
            tokio::select! {
                done = &mut all => { results = done; break; }
                _ = tick.tick() => {
                    writes += state_renames(&inotify);
                    records.sample();
                }
            }
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    writes += state_renames(&inotify);
    records.sample();
    writes += records.total();
    let mut latencies = Samples::default();
    for result in results {
        for value in result?.values().iter().copied() {
            latencies.push(value);
        }
    }
    let requests = latencies.len();
    rows.push(Row::distribution(
        &format!(
            "{} clients sending `stop`: answer latency ({:.0} requests/s, {:.0} state writes/s, {:.1} requests per write)",
            settings.clients,
            requests as f64 / elapsed,
            writes as f64 / elapsed,
            requests as f64 / writes.max(1) as f64
        ),
        Unit::Millis,
        &latencies,
    ));
    daemon.stop_clean()?;
    Ok(report::markdown(&rows))
}

/// Records appended to the state journal, followed by sampling its lines.
pub(crate) struct JournalRecords {
    path: std::path::PathBuf,
    /// Records the journal held when counting began.
    baseline: usize,
    /// Records in journals since replaced by a full rewrite.
    earlier: usize,
    /// Records in the current journal at the last sample.
    current: usize,
}

impl JournalRecords {
    pub(crate) fn new(path: std::path::PathBuf) -> JournalRecords {
        let mut records = JournalRecords {
            path,
            baseline: 0,
            earlier: 0,
            current: 0,
        };
        records.sample();
        records.baseline = records.current;
        records
    }

    pub(crate) fn sample(&mut self) {
        let lines = std::fs::read(&self.path)
            .map(|bytes| bytes.iter().filter(|&&b| b == b'\n').count())
            .unwrap_or(0);
        // The first line is the journal's header.
        let now = lines.saturating_sub(1);
        if now < self.current {
            // A full rewrite started a fresh journal.
            self.earlier += self.current;
        }
        self.current = now;
    }

    pub(crate) fn total(&self) -> usize {
        (self.earlier + self.current).saturating_sub(self.baseline)
    }
}

/// Renames onto `.pebble.state` reported since the last call.
pub(crate) fn state_renames(inotify: &Inotify) -> usize {
    let mut count = 0;
    while let Ok(events) = inotify.read_events() {
        if events.is_empty() {
            break;
        }
        count += events
            .iter()
            .filter(|e| e.name.as_deref() == Some(std::ffi::OsStr::new(".pebble.state")))
            .count();
    }
    count
}
