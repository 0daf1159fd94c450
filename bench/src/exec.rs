//! The exec group: the round trip of `exec true` through `cobble-client`.
//!
//! One round trip is what a client does to run a command and learn its exit code:
//! `POST /v1/exec`, the `control` and `stdio` websockets (and `stderr` when it is kept apart,
//! as ops keeps it by default), the end of the input, the output read to its end, and
//! `/v1/changes/{id}/wait` for the exit code. Every step opens a new connection, as ops and
//! Pebble's Go client do. Each series runs against one daemon (`cobble run --hold`, no layers)
//! after a short unmeasured warm-up.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use cobble_client::{Client, ExecOptions};
use tokio::io::AsyncReadExt;

use crate::daemon::Daemon;
use crate::report::{self, Row, Target, Unit};
use crate::stats::Samples;

/// The round-trip target, seconds.
const ROUND_TRIP_TARGET_S: f64 = 3e-3;
/// Unmeasured round trips before each series.
const WARMUP: usize = 20;
/// How long the daemon may take to answer its first request.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// What the exec group runs.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Round trips per series.
    pub runs: usize,
    /// The pause between attempts to reach a launching daemon.
    pub poll_launch: Duration,
}

/// Runs the group and returns its Markdown table.
pub async fn run(cobble: &std::path::Path, token: &str, settings: &Settings) -> Result<String> {
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
        for i in 0..WARMUP + settings.runs {
            let took = round_trip(daemon.client(), split_stderr).await?;
            if i >= WARMUP {
                samples.push(took);
            }
        }
        rows.push(
            Row::distribution(
                &format!("`exec true` round trip, {what}, new connection each"),
                Unit::Millis,
                &samples,
            )
            .target(Target::below(ROUND_TRIP_TARGET_S)),
        );
    }
    daemon.stop_clean()?;
    Ok(report::markdown(&rows))
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
