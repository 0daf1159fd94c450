//! The forward group: a service writing `rate` lines a second for `window`, forwarded to a
//! Loki receiver the harness runs itself.
//!
//! The producer (Python) writes lines `SEQ NANOS` in bursts every 10 ms, `NANOS` being the
//! wall clock when the line was written. The receiver decodes each push request and takes,
//! for every line, the delay from that instant to the request's arrival: the end-to-end
//! delay through the daemon's output reader, its queue, the batching (1 s or 100 lines) and
//! the request. Reported: the delay's median and p99, the lines received against those
//! written, the daemon's drop count, and the daemon's CPU over the window; then the daemon's
//! CPU with the same service and no log target, for what the forwarding itself costs.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, ensure};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

use crate::daemon::{Daemon, TOKEN_VAR};
use crate::report::{self, Row, Unit};
use crate::stats::Samples;

/// How long the daemon may take to answer its first request.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the last batches may take to arrive after the producer stops.
const DRAIN: Duration = Duration::from_secs(5);

/// What the forward group runs.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// Lines per second.
    pub rate: usize,
    /// How long the producer writes.
    pub window: Duration,
    /// The pause between attempts to reach a launching daemon.
    pub poll_launch: Duration,
}

/// What the receiver saw.
#[derive(Default)]
struct Received {
    delays: Samples,
    lines: usize,
    requests: usize,
}

/// Runs the group and returns its Markdown.
pub(crate) async fn run(
    cobble: &std::path::Path,
    token: &str,
    settings: &Settings,
) -> Result<String> {
    ensure!(settings.rate >= 100, "at least 100 lines a second");
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    let received = Arc::new(Mutex::new(Received::default()));
    let receiver = tokio::spawn(receive(listener, received.clone()));

    let per_burst = settings.rate / 100;
    let bursts = settings.window.as_millis() / 10;
    let producer = format!(
        "import sys, time\n\
         out = sys.stdout\n\
         start = time.monotonic()\n\
         seq = 0\n\
         for burst in range({bursts}):\n\
         \x20   wake = start + burst * 0.01\n\
         \x20   pause = wake - time.monotonic()\n\
         \x20   if pause > 0: time.sleep(pause)\n\
         \x20   for _ in range({per_burst}):\n\
         \x20       seq += 1\n\
         \x20       out.write('%d %d\\n' % (seq, time.time_ns()))\n\
         \x20   out.flush()\n\
         time.sleep(100000)\n"
    );
    let script = tempfile::NamedTempFile::new()?;
    std::fs::write(script.path(), producer)?;
    let layer = format!(
        "services:\n  producer:\n    override: replace\n    command: python3 -u {}\n    \
         environment:\n      {TOKEN_VAR}: {token}\n\
         log-targets:\n  loki:\n    override: replace\n    type: loki\n    \
         location: http://127.0.0.1:{port}/loki/api/v1/push\n    services: [all]\n",
        script.path().display()
    );
    let mut daemon = Daemon::spawn(cobble, Some(&layer), token)?;
    daemon
        .wait_answer(settings.poll_launch, ANSWER_TIMEOUT)
        .await?;
    eprintln!(
        "==> forwarding {} lines/s to a Loki receiver for {:?}",
        settings.rate, settings.window
    );
    let cpu_before = daemon.cpu_time()?;
    let started = Instant::now();
    let id = daemon
        .client()
        .start(&["producer".to_owned()])
        .await
        .context("cannot start the producer")?;
    daemon
        .client()
        .wait_change(&id, Some(ANSWER_TIMEOUT))
        .await?;
    let written = per_burst * bursts as usize;
    let deadline = started + settings.window + DRAIN;
    while Instant::now() < deadline && received.lock().unwrap().lines < written {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let window = started.elapsed();
    let cpu = daemon.cpu_time()? - cpu_before;
    let metrics = daemon
        .client()
        .raw_request(cobble_client::Method::GET, "/v1/metrics", None)
        .await?;
    let metrics = String::from_utf8_lossy(&metrics.body).into_owned();
    let dropped = metrics
        .lines()
        .find_map(|l| l.strip_prefix("cobble_log_forward_dropped_total{target=\"loki\"} "))
        .unwrap_or("?")
        .to_owned();
    daemon.stop_clean()?;
    receiver.abort();

    // The same service with no target: what reading the output costs without forwarding.
    let plain = layer
        .split("log-targets:")
        .next()
        .unwrap_or_default()
        .to_owned();
    let mut baseline = Daemon::spawn(cobble, Some(&plain), token)?;
    baseline
        .wait_answer(settings.poll_launch, ANSWER_TIMEOUT)
        .await?;
    eprintln!("==> the same service with no log target");
    let baseline_before = baseline.cpu_time()?;
    let baseline_started = Instant::now();
    let id = baseline
        .client()
        .start(&["producer".to_owned()])
        .await
        .context("cannot start the producer")?;
    baseline
        .client()
        .wait_change(&id, Some(ANSWER_TIMEOUT))
        .await?;
    tokio::time::sleep_until(
        (baseline_started + settings.window + Duration::from_millis(500)).into(),
    )
    .await;
    let baseline_window = baseline_started.elapsed();
    let baseline_cpu = baseline.cpu_time()? - baseline_before;
    baseline.stop_clean()?;

    let received = std::mem::take(&mut *received.lock().unwrap());
    let rows = vec![
        Row::distribution(
            &format!(
                "{} lines/s to Loki: end-to-end delay, written to received ({} of {written} lines received in {} requests, {dropped} dropped)",
                settings.rate, received.lines, received.requests
            ),
            Unit::Millis,
            &received.delays,
        ),
        Row::single(
            &format!(
                "{} lines/s to Loki: daemon CPU over {:.1} s, {}",
                settings.rate,
                window.as_secs_f64(),
                report::cpu_share(cpu, window)
            ),
            Unit::Seconds,
            cpu.as_secs_f64(),
        ),
        Row::single(
            &format!(
                "{} lines/s, no log target: daemon CPU over {:.1} s, {}",
                settings.rate,
                baseline_window.as_secs_f64(),
                report::cpu_share(baseline_cpu, baseline_window)
            ),
            Unit::Seconds,
            baseline_cpu.as_secs_f64(),
        ),
    ];
    Ok(report::markdown(&rows))
}

/// A minimal HTTP/1.1 server for Loki push requests: answers 204, records each line's delay.
async fn receive(listener: TcpListener, received: Arc<Mutex<Received>>) {
    while let Ok((conn, _)) = listener.accept().await {
        let received = received.clone();
        tokio::spawn(async move {
            let (read, mut write) = conn.into_split();
            let mut reader = BufReader::new(read);
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).await.unwrap_or(0) == 0 {
                    return;
                }
                let mut length = 0usize;
                loop {
                    line.clear();
                    if reader.read_line(&mut line).await.unwrap_or(0) == 0 {
                        return;
                    }
                    let header = line.trim_end();
                    if header.is_empty() {
                        break;
                    }
                    if let Some((name, value)) = header.split_once(':')
                        && name.eq_ignore_ascii_case("content-length")
                    {
                        length = value.trim().parse().unwrap_or(0);
                    }
                }
                let mut body = vec![0; length];
                if reader.read_exact(&mut body).await.is_err() {
                    return;
                }
                let now = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .unwrap_or_default()
                    .as_nanos();
                record(&body, now, &received);
                if write
                    .write_all(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n")
                    .await
                    .is_err()
                {
                    return;
                }
            }
        });
    }
}

fn record(body: &[u8], now: u128, received: &Mutex<Received>) {
    let Ok(push) = serde_json::from_slice::<serde_json::Value>(body) else {
        return;
    };
    let mut received = received.lock().unwrap();
    received.requests += 1;
    for stream in push["streams"].as_array().into_iter().flatten() {
        for value in stream["values"].as_array().into_iter().flatten() {
            let Some(written) = value[1]
                .as_str()
                .and_then(|line| line.split_once(' '))
                .and_then(|(_, nanos)| nanos.parse::<u128>().ok())
            else {
                continue;
            };
            received.lines += 1;
            let delay = now.saturating_sub(written);
            received.delays.push(Duration::from_nanos(
                u64::try_from(delay).unwrap_or(u64::MAX),
            ));
        }
    }
}
