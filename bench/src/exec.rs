//! The exec group: what running commands through the daemon costs.
//!
//! - **Round trip through `cobble-client`.** What a client does to run a command and learn its
//!   exit code: `POST /v1/exec`, the `control` and `stdio` websockets (and `stderr` when it is
//!   kept apart, as ops keeps it by default), the end of the input, the output read to its
//!   end, and `/v1/changes/{id}/wait` for the exit code. Every step opens a new connection, as
//!   ops and Pebble's Go client do.
//! - **Round trip through ops.** The same through the real Python `ops` client
//!   (`bench/ops_exec.py`, run with `--python`, by default the compatibility suite's
//!   `.venv`): `Client.exec(["true"]).wait_output()`, as charm code does it. Skipped, with the
//!   reason, when that Python cannot import ops.
//! - **Throughput.** `--exec-mib` MiB through `cat` (stdin to stdout) through the daemon,
//!   against the same bytes through a local `cat` on two pipes, the two alternating for
//!   `--exec-rounds` runs each and their medians compared; and the daemon's RSS growth while
//!   it relays them (the highest `VmRSS` sampled every 20 ms, minus the reading before).
//! - **Concurrency.** `--exec-concurrent` `exec true` round trips started at once, each timed
//!   from the common start to its exit code, ten bursts in a row; meanwhile `GET /v1/health`
//!   is sent every 2 ms from a thread of its own (another client, as an agent polling health
//!   is) and timed.
//!
//! Each part runs against one daemon (`cobble run --hold`, no layers) after a short unmeasured
//! warm-up.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use cobble_client::{Client, ExecOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::daemon::Daemon;
use crate::report::{self, Row, Target, Unit};
use crate::stats::{Samples, python_samples};

/// The round-trip target through cobble-client, seconds.
const ROUND_TRIP_TARGET_S: f64 = 3e-3;
/// Pebble v1.12.0's `exec true` round trip through ops 3.9.0 on this kind of machine, seconds.
const PEBBLE_OPS_ROUND_TRIP_S: f64 = 14.1e-3;
/// The relayed bytes may take at most this many times as long as a local pipe.
const THROUGHPUT_RATIO_TARGET: f64 = 1.5;
/// The daemon's RSS may grow by less than this while relaying, MiB.
const RELAY_RSS_GROWTH_TARGET_MIB: f64 = 8.0;
/// `/v1/health` p99 while execs run, seconds.
const HEALTH_P99_TARGET_S: f64 = 5e-3;
/// Unmeasured round trips before each series.
const WARMUP: usize = 20;
/// How long the daemon may take to answer its first request.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// What the exec group runs.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// Round trips per series.
    pub runs: usize,
    /// The pause between attempts to reach a launching daemon.
    pub poll_launch: Duration,
    /// The Python that runs the ops round trips.
    pub python: PathBuf,
    /// MiB to push through `cat`.
    pub mib: usize,
    /// Runs of `cat` each way (local, through the daemon), alternating.
    pub rounds: usize,
    /// Round trips started at once.
    pub concurrent: usize,
}

/// Runs the group and returns its Markdown table.
pub(crate) async fn run(cobble: &Path, token: &str, settings: &Settings) -> Result<String> {
    ensure!(settings.runs > 0, "--exec-runs must be positive");
    let mut daemon = Daemon::spawn(cobble, None, token)?;
    daemon
        .wait_answer(settings.poll_launch, ANSWER_TIMEOUT)
        .await?;
    let mut rows = Vec::new();
    for (what, split_stderr) in [
        ("stdout and stderr merged: 2 websockets", false),
        ("stderr apart, as ops: 3 websockets", true),
    ] {
        eprintln!("==> exec true, {what} ({} runs)", settings.runs);
        let mut samples = Samples::default();
        let mut cpu_before = Duration::ZERO;
        for i in 0..WARMUP + settings.runs {
            if i == WARMUP {
                cpu_before = daemon.cpu_time()?;
            }
            let took = round_trip(daemon.client(), split_stderr).await?;
            if i >= WARMUP {
                samples.push(took);
            }
        }
        let cpu = daemon.cpu_time()?.saturating_sub(cpu_before) / settings.runs as u32;
        rows.push(
            Row::distribution(
                &format!(
                    "`exec true` round trip, {what}, new connection each (daemon CPU {:.3} ms each)",
                    cpu.as_secs_f64() * 1e3
                ),
                Unit::Millis,
                &samples,
            )
            .target(Target::below(ROUND_TRIP_TARGET_S)),
        );
    }
    let mut notes = String::new();
    eprintln!("==> exec true through ops ({} runs)", settings.runs);
    match ops_round_trips(
        &settings.python,
        &daemon.dir().join(".pebble.socket"),
        settings.runs,
    ) {
        Ok(samples) => rows.push(
            Row::distribution(
                "`exec true` round trip through ops (`exec().wait_output()`)",
                Unit::Millis,
                &samples,
            )
            .pebble(PEBBLE_OPS_ROUND_TRIP_S)
            .target(Target::at_most(PEBBLE_OPS_ROUND_TRIP_S / 2.0)),
        ),
        Err(e) => notes.push_str(&format!("The ops round trip was skipped: {e:#}.\n\n")),
    }
    eprintln!("==> {} MiB through cat", settings.mib);
    rows.extend(throughput(&daemon, settings.mib, settings.rounds).await?);
    eprintln!("==> {} concurrent exec true", settings.concurrent);
    rows.extend(concurrent(&daemon, settings.concurrent).await?);
    daemon.stop_clean()?;
    Ok(format!("{}{notes}", report::markdown(&rows)))
}

/// Round trips through ops, timed by the Python script.
fn ops_round_trips(python: &Path, socket: &Path, runs: usize) -> Result<Samples> {
    let socket = socket.to_string_lossy();
    python_samples(python, "ops_exec.py", &[&socket, &runs.to_string()], runs)
}

/// `mib` MiB through `cat` in the daemon and through a local `cat`, alternating for `rounds`
/// runs each (one run of each lasts about a tenth of a second, and where the scheduler puts
/// the processes moves a single run's rate by half), and the daemon's largest growth.
async fn throughput(daemon: &Daemon, mib: usize, rounds: usize) -> Result<Vec<Row>> {
    ensure!(rounds > 0, "--exec-rounds must be positive");
    let chunk = vec![b'x'; 64 * 1024];
    let total = mib * 1024 * 1024;
    let (mut locals, mut relays) = (Samples::default(), Samples::default());
    let (mut cpu, mut growth_kib, mut before) = (Duration::ZERO, 0, 0);
    for _ in 0..rounds {
        let local = {
            let chunk = chunk.clone();
            tokio::task::spawn_blocking(move || local_cat(&chunk, total)).await??
        };
        locals.push(local);
        let run = relay_cat(daemon, &chunk, total).await?;
        relays.push(run.took);
        cpu += run.cpu;
        growth_kib = growth_kib.max(run.growth_kib);
        before = run.before_kib;
    }
    let rate = |d: Duration| mib as f64 / d.as_secs_f64();
    let rates = |samples: &Samples| {
        samples
            .values()
            .iter()
            .map(|&d| format!("{:.0}", rate(d)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let (local, relayed) = (locals.median(), relays.median());
    Ok(vec![
        Row::single(
            &format!(
                "{mib} MiB through `cat` via the daemon, medians of {rounds} alternating runs (via the daemon {} MiB/s, daemon CPU {} ms each; a local pipe {} MiB/s), time relative to the local pipe",
                rates(&relays),
                (cpu / rounds as u32).as_millis(),
                rates(&locals),
            ),
            Unit::Ratio,
            relayed.as_secs_f64() / local.as_secs_f64(),
        )
        .target(Target::at_most(THROUGHPUT_RATIO_TARGET)),
        Row::single(
            &format!(
                "Daemon RSS growth while relaying {mib} MiB, largest of {rounds} runs (from {:.1} MiB)",
                before as f64 / 1024.0
            ),
            Unit::MiB,
            growth_kib as f64 / 1024.0,
        )
        .target(Target::below(RELAY_RSS_GROWTH_TARGET_MIB)),
    ])
}

/// What one run of `cat` through the daemon gave.
struct Relayed {
    took: Duration,
    cpu: Duration,
    /// The daemon's RSS before, and its highest growth while relaying.
    before_kib: u64,
    growth_kib: u64,
}

/// `total` bytes through `cat` run by the daemon, written and read by this task.
async fn relay_cat(daemon: &Daemon, chunk: &[u8], total: usize) -> Result<Relayed> {
    let before = daemon.rss()?.total_kib;
    let cpu_before = daemon.cpu_time()?;
    let peak = std::sync::atomic::AtomicU64::new(before);
    let done = tokio::sync::Notify::new();
    let started = Instant::now();
    let mut process = daemon
        .client()
        .exec(&ExecOptions::new(["cat"]))
        .await
        .context("cannot exec cat")?;
    let mut stdin = process.stdin.take().context("no stdin")?;
    let mut stdout = process.stdout.take().context("no stdout")?;
    let write = async {
        for _ in 0..total / chunk.len() {
            stdin.write_all(chunk).await?;
        }
        stdin.shutdown().await?;
        anyhow::Ok(())
    };
    let read = async {
        let mut buf = vec![0u8; 256 * 1024];
        let mut got = 0usize;
        loop {
            let n = stdout.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            got += n;
        }
        done.notify_one();
        anyhow::Ok(got)
    };
    // Stops as soon as the output has ended: a sampler that finished its 20 ms pause first
    // would add up to 20 ms to the time measured (about a fifth of a 100 MiB run).
    let sample = async {
        loop {
            if let Ok(rss) = daemon.rss() {
                peak.fetch_max(rss.total_kib, std::sync::atomic::Ordering::Relaxed);
            }
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(20)) => {}
                () = done.notified() => break,
            }
        }
    };
    let (written, got, ()) = tokio::join!(write, read, sample);
    written?;
    let got = got?;
    let code = process.wait().await.context("cannot wait for cat")?;
    let took = started.elapsed();
    let cpu = daemon.cpu_time()?.saturating_sub(cpu_before);
    ensure!(
        got == total && code == 0,
        "cat relayed {got} of {total} bytes, exit {code}"
    );
    Ok(Relayed {
        took,
        cpu,
        before_kib: before,
        growth_kib: peak
            .load(std::sync::atomic::Ordering::Relaxed)
            .saturating_sub(before),
    })
}

/// `total` bytes through a local `cat`: written by one thread, read by this one.
fn local_cat(chunk: &[u8], total: usize) -> Result<Duration> {
    let started = Instant::now();
    let mut child = std::process::Command::new("cat")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .context("cannot run cat")?;
    let mut stdin = child.stdin.take().context("no stdin")?;
    let chunk = chunk.to_vec();
    let writer = std::thread::spawn(move || -> std::io::Result<()> {
        for _ in 0..total / chunk.len() {
            stdin.write_all(&chunk)?;
        }
        Ok(())
    });
    let mut stdout = child.stdout.take().context("no stdout")?;
    let mut buf = vec![0u8; 256 * 1024];
    let mut got = 0;
    loop {
        let n = stdout.read(&mut buf)?;
        if n == 0 {
            break;
        }
        got += n;
    }
    writer.join().expect("writer thread")?;
    // This process has no reaper: wait for its own child.
    child.wait()?;
    let took = started.elapsed();
    ensure!(got == total, "local cat relayed {got} of {total} bytes");
    Ok(took)
}

/// Bursts of concurrent round trips: the `/v1/health` samples of all of them make the p99
/// (one burst lasts tens of milliseconds, a handful of probes).
const BURSTS: usize = 10;
/// The pause between `/v1/health` probes while a burst runs.
const PROBE_INTERVAL: Duration = Duration::from_millis(2);

/// [`BURSTS`] times `n` round trips started at once, and `/v1/health` meanwhile.
async fn concurrent(daemon: &Daemon, n: usize) -> Result<Vec<Row>> {
    let mut finished = Samples::default();
    let mut health = Samples::default();
    for _ in 0..BURSTS {
        let (burst_finished, burst_health) = burst(daemon, n).await?;
        for &took in burst_finished.values() {
            finished.push(took);
        }
        for &took in burst_health.values() {
            health.push(took);
        }
    }
    Ok(vec![
        Row::distribution(
            &format!(
                "{n} concurrent `exec true` (stderr apart), {BURSTS} bursts: each one's time from its burst's start to its exit code"
            ),
            Unit::Millis,
            &finished,
        ),
        Row::distribution(
            &format!("GET /v1/health while {n} execs run"),
            Unit::Millis,
            &health,
        ),
        Row::single(
            &format!("GET /v1/health p99 while {n} execs run"),
            Unit::Millis,
            health.p99().as_secs_f64(),
        )
        .target(Target::below(HEALTH_P99_TARGET_S)),
    ])
}

/// `n` round trips started at once; returns each one's time to its exit code and the
/// `/v1/health` latencies sampled until the last has finished.
async fn burst(daemon: &Daemon, n: usize) -> Result<(Samples, Samples)> {
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..n {
        let client = daemon.client().clone();
        tasks.spawn(async move {
            round_trip(&client, true).await?;
            anyhow::Ok(started.elapsed())
        });
    }
    // The probe is another client, as an agent polling health is: a thread of its own with
    // its own runtime, so what it times is the daemon's answer, not its turn on this
    // harness's single thread among the burst's websockets.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let probe = {
        let client = daemon.client().clone();
        let stop = stop.clone();
        std::thread::spawn(move || -> Result<Samples> {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            runtime.block_on(async {
                let mut health = Samples::default();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let began = Instant::now();
                    let healthy = client.health("", &[]).await?;
                    health.push(began.elapsed());
                    ensure!(healthy, "unhealthy");
                    tokio::time::sleep(PROBE_INTERVAL).await;
                }
                Ok(health)
            })
        })
    };
    let mut finished = Samples::default();
    let mut failed = None;
    while let Some(result) = tasks.join_next().await {
        match result? {
            Ok(took) => finished.push(took),
            Err(e) => failed = Some(e),
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let health = probe
        .join()
        .map_err(|_| anyhow::anyhow!("the health probe panicked"))??;
    if let Some(e) = failed {
        return Err(e);
    }
    ensure!(finished.len() == n, "{} of {n} completed", finished.len());
    Ok((finished, health))
}

/// Runs `true` once and waits for its exit code; returns how long that took.
async fn round_trip(client: &Client, split_stderr: bool) -> Result<Duration> {
    let mut options = ExecOptions::new(["true"]);
    options.split_stderr = split_stderr;
    let started = Instant::now();
    let mut process = client.exec(&options).await.context("cannot exec true")?;
    drop(process.stdin.take());
    let mut sink = Vec::new();
    if let Some(mut stdout) = process.stdout.take() {
        stdout.read_to_end(&mut sink).await?;
    }
    if let Some(mut stderr) = process.stderr.take() {
        stderr.read_to_end(&mut sink).await?;
    }
    let code = process.wait().await.context("cannot wait for true")?;
    let took = started.elapsed();
    ensure!(code == 0, "true exited with {code}");
    Ok(took)
}
