//! The slow group: `GET /v1/health` over `--http` while many slow clients hold connections.
//!
//! Each slow client connects to the daemon's `--http` port and sends a request head one byte
//! a second, never finishing it; when the daemon has closed it, it connects again at its next
//! tick (as a slowloris tool does). Once every slow client has connected and sent a few bytes, the
//! harness probes `GET /v1/health` every `--slow-probe-interval-ms` on a connection of its
//! own, as the kubelet probes a pod: each probe is timed from its connect until the whole
//! answer is read, and one that is closed unanswered or takes longer than
//! [`PROBE_TIMEOUT`] counts as failed. Reported per number of slow clients: the probes'
//! median and p99 (target: p99 under 100 ms, every probe answered), how many failed, how
//! many times the daemon closed a slow client, and the daemon's CPU and RSS meanwhile.
//!
//! The harness raises its own soft descriptor limit to the hard one (it holds a descriptor
//! per slow client); the daemon raises its own as it starts.

use std::cell::Cell;
use std::fmt::Write as _;
use std::rc::Rc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::daemon::Daemon;
use crate::report::{self, Row, Target, Unit};
use crate::stats::Samples;

/// How long the daemon may take to answer its first request.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);
/// A probe slower than this failed (the kubelet's default `timeoutSeconds` is 1 s; this is
/// only so that a lost probe does not hang the run).
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);
/// The probe latency every probe should stay under.
const PROBE_TARGET: Duration = Duration::from_millis(100);
/// What a slow client sends, a byte at a time (and then `x` forever).
const SLOW_HEAD: &[u8] = b"GET /v1/health HTTP/1.1\r\nHost: localhost\r\nX-Slow: ";

/// What the slow group runs.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// Numbers of slow clients, one daemon each.
    pub clients: Vec<usize>,
    /// Probes per case.
    pub probes: usize,
    /// The pause between probes.
    pub probe_interval: Duration,
    /// How long the slow clients run before the first probe.
    pub warmup: Duration,
    /// The pause between attempts to reach a launching daemon.
    pub poll_launch: Duration,
}

/// What one case measured.
struct Case {
    clients: usize,
    probes: Samples,
    failed: usize,
    first_failure: Option<String>,
    closed: usize,
    cpu: Duration,
    window: Duration,
    rss_kib: u64,
}

/// Runs the group and returns its Markdown.
pub(crate) async fn run(
    cobble: &std::path::Path,
    token: &str,
    settings: &Settings,
) -> Result<String> {
    ensure!(settings.probes > 0, "at least one probe");
    let most = settings.clients.iter().copied().max().unwrap_or(0);
    let limit = raise_nofile().context("cannot raise the descriptor limit")?;
    ensure!(
        limit > most as u64 + 64,
        "{most} slow clients need more descriptors than the hard limit of {limit}"
    );
    let mut cases = Vec::new();
    for &clients in &settings.clients {
        eprintln!("==> slow: {clients} slow clients");
        cases.push(run_case(cobble, token, settings, clients).await?);
    }
    let mut rows = Vec::new();
    let mut out = String::new();
    for case in &cases {
        rows.push(
            Row::distribution(
                &format!(
                    "GET /v1/health over --http, {} slow clients (new connection per probe)",
                    case.clients
                ),
                Unit::Millis,
                &case.probes,
            )
            .target(Target::below(PROBE_TARGET.as_secs_f64())),
        );
        rows.push(
            Row::single(
                &format!("  its p99, {} slow clients", case.clients),
                Unit::Millis,
                case.probes.p99().as_secs_f64(),
            )
            .target(Target::below(PROBE_TARGET.as_secs_f64())),
        );
        rows.push(Row::single(
            &format!(
                "  daemon CPU per second of the window, {} slow clients",
                case.clients
            ),
            Unit::Millis,
            case.cpu.as_secs_f64() / case.window.as_secs_f64().max(1e-9),
        ));
        rows.push(Row::single(
            &format!("  daemon RSS at the end, {} slow clients", case.clients),
            Unit::MiB,
            case.rss_kib as f64 / 1024.0,
        ));
    }
    out.push_str(&report::markdown(&rows));
    out.push('\n');
    for case in &cases {
        let _ = writeln!(
            out,
            "- {} slow clients: {} of {} probes answered 200 within {PROBE_TIMEOUT:?}{}; the \
             daemon closed a slow client {} times over the run.",
            case.clients,
            case.probes.len(),
            case.probes.len() + case.failed,
            case.first_failure
                .as_ref()
                .map_or(String::new(), |f| format!(" (first failure: {f})")),
            case.closed,
        );
    }
    if cases.iter().any(|c| c.failed > 0) || report::any_missed(&rows) {
        out.push_str("\nSome targets were missed (marked **MISSED**, or probes unanswered).\n");
    } else {
        out.push_str("\nAll targets met.\n");
    }
    Ok(out)
}

async fn run_case(
    cobble: &std::path::Path,
    token: &str,
    settings: &Settings,
    clients: usize,
) -> Result<Case> {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.local_addr()?.port()
    };
    let address = format!("127.0.0.1:{port}");
    let mut daemon = Daemon::spawn_with_args(cobble, None, token, &["--http", &address])?;
    daemon
        .wait_answer(settings.poll_launch, ANSWER_TIMEOUT)
        .await?;
    // The probe must be answered over TCP before the slow clients start.
    probe(&address).await.context("the first probe")?;

    let stop = Rc::new(Cell::new(false));
    let closed = Rc::new(Cell::new(0usize));
    let connected = Rc::new(Cell::new(0usize));
    let local = tokio::task::LocalSet::new();
    let result = local
        .run_until(async {
            let mut tasks = Vec::with_capacity(clients);
            for _ in 0..clients {
                tasks.push(tokio::task::spawn_local(slow_client(
                    address.clone(),
                    stop.clone(),
                    closed.clone(),
                    connected.clone(),
                )));
            }
            let warm_until = Instant::now() + settings.warmup;
            while connected.get() < clients || Instant::now() < warm_until {
                tokio::time::sleep(Duration::from_millis(50)).await;
                ensure!(
                    Instant::now() < warm_until + Duration::from_secs(60),
                    "only {} of {clients} slow clients connected",
                    connected.get()
                );
            }
            let cpu_before = daemon.cpu_time()?;
            let started = Instant::now();
            let mut probes = Samples::default();
            let mut failed = 0;
            let mut first_failure = None;
            for _ in 0..settings.probes {
                let at = Instant::now();
                match probe(&address).await {
                    Ok(took) => probes.push(took),
                    Err(e) => {
                        failed += 1;
                        first_failure.get_or_insert_with(|| format!("{e:#}"));
                    }
                }
                let next = at + settings.probe_interval;
                tokio::time::sleep(next.saturating_duration_since(Instant::now())).await;
            }
            let window = started.elapsed();
            let cpu = daemon.cpu_time()? - cpu_before;
            let rss_kib = daemon.rss()?.total_kib;
            stop.set(true);
            for task in tasks {
                task.abort();
            }
            Ok(Case {
                clients,
                probes,
                failed,
                first_failure,
                closed: closed.get(),
                cpu,
                window,
                rss_kib,
            })
        })
        .await;
    daemon.stop_clean()?;
    result
}

/// One slow client, until `stop`: once a second it sends the next byte of [`SLOW_HEAD`], or,
/// when the daemon has closed it (counted in `closed`), connects again (as slowloris tools
/// do: one action per client per tick, so that a closed client comes back at once but
/// never in a loop). `connected` counts first connects.
async fn slow_client(
    address: String,
    stop: Rc<Cell<bool>>,
    closed: Rc<Cell<usize>>,
    connected: Rc<Cell<usize>>,
) {
    let mut first = true;
    let mut stream: Option<(TcpStream, usize)> = None;
    while !stop.get() {
        match &mut stream {
            None => {
                if let Ok(s) = TcpStream::connect(&address).await {
                    if std::mem::take(&mut first) {
                        connected.set(connected.get() + 1);
                    }
                    stream = Some((s, 0));
                }
            }
            Some((s, sent)) => {
                let mut buf = [0u8; 256];
                let open = match s.try_read(&mut buf) {
                    Ok(0) => false,
                    Ok(_) => true,
                    Err(e) => e.kind() == std::io::ErrorKind::WouldBlock,
                };
                let byte = SLOW_HEAD.get(*sent).copied().unwrap_or(b'x');
                *sent += 1;
                if !open || s.write_all(&[byte]).await.is_err() {
                    closed.set(closed.get() + 1);
                    stream = None;
                    continue;
                }
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// One `GET /v1/health` on a new connection; how long until the whole answer was read.
async fn probe(address: &str) -> Result<Duration> {
    let started = Instant::now();
    let answer = tokio::time::timeout(PROBE_TIMEOUT, async {
        let mut stream = TcpStream::connect(address).await?;
        stream
            .write_all(b"GET /v1/health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            .await?;
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await?;
        anyhow::Ok(answer)
    })
    .await
    .context("no answer in time")??;
    let took = started.elapsed();
    ensure!(
        answer.starts_with(b"HTTP/1.1 200"),
        "answered {:?}",
        String::from_utf8_lossy(&answer[..answer.len().min(40)])
    );
    Ok(took)
}

/// Raises this process's soft descriptor limit to its hard limit; returns the limit.
fn raise_nofile() -> Result<u64> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    if soft < hard {
        setrlimit(Resource::RLIMIT_NOFILE, hard, hard)?;
    }
    Ok(hard)
}
