//! The logs group: what capturing service output costs the service, and what a follower of
//! `/v1/logs` gets during a burst.
//!
//! - Throughput: `bench/logs_produce.py` writes 100-byte lines as fast as it can for
//!   `secs`, piped to `cat > /dev/null` (the baseline) and as a service of a daemon (not
//!   `--verbose`), the two alternating for `rounds` runs each. The ratio of the median byte
//!   rates is how much slower the daemon makes the service; the daemon's CPU over the window
//!   (and per GB carried) and its RSS after are reported too.
//! - The same with a `--verbose` daemon, as Juju runs it: each line is also copied to the
//!   daemon's stdout, a pipe the harness drains as a container runtime would. Also reported:
//!   the share of the producer's lines that reached stdout (the rest were dropped and
//!   counted because stdout did not keep up).
//! - Follower: a service prints `count` short numbered lines (`seq`) at once while
//!   `bench/logs_follow.py` follows it over the unix socket; the fraction of lines it received
//!   and the markers it got for the rest.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};

use crate::daemon::{Daemon, Rss, TOKEN_VAR};
use crate::report::{self, Row, Target, Unit};

/// How long the daemon may take to answer its first request.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// What the logs group runs.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// How long the producer writes.
    pub secs: u64,
    /// How many times the producer runs each way (piped, then as a service).
    pub rounds: usize,
    /// Lines in the follower's burst.
    pub burst: usize,
    /// The Python that runs the producer and the follower.
    pub python: std::path::PathBuf,
    /// The pause between attempts to reach a launching daemon.
    pub poll_launch: Duration,
}

/// Runs the group and returns its Markdown.
pub(crate) async fn run(cobble: &Path, token: &str, settings: &Settings) -> Result<String> {
    let scripts = Path::new(env!("CARGO_MANIFEST_DIR"));
    let produce = scripts.join("logs_produce.py");
    let follow = scripts.join("logs_follow.py");
    let python = settings.python.display().to_string();
    let mut rows = Vec::new();

    ensure!(settings.rounds > 0, "--logs-rounds must be positive");
    let scratch = tempfile::tempdir()?;
    let count = scratch.path().join("service");
    let layer = format!(
        "services:\n  {PRODUCER}:\n    override: replace\n    command: {python} {} {} {}\n    \
         on-success: ignore\n    on-failure: ignore\n    \
         environment:\n      {TOKEN_VAR}: {token}\n  burst:\n    override: replace\n    \
         command: sh -c 'while [ ! -e {go} ]; do sleep 0.01; done; seq 1 {burst}; exec sleep 100000'\n    \
         environment:\n      {TOKEN_VAR}: {token}\n",
        produce.display(),
        settings.secs,
        count.display(),
        go = scratch.path().join("go").display(),
        burst = settings.burst,
    );
    let mut daemon = Daemon::spawn(cobble, Some(&layer), token)?;
    daemon
        .wait_answer(settings.poll_launch, ANSWER_TIMEOUT)
        .await?;
    let client = daemon.client().clone();
    // The producer is not restarted when it ends (`on-success: ignore`): each round starts
    // it afresh, and it does not run during the next round's baseline.
    //
    // The baseline's rate on this machine moves with where the scheduler puts the two
    // processes, from run to run: the two ways alternate, and the medians are compared.
    let (mut baselines, mut services) = (Vec::new(), Vec::new());
    let (mut cpus, mut cpu_per_gb) = (Vec::new(), Vec::new());
    let mut rss = None;
    for round in 1..=settings.rounds {
        eprintln!(
            "==> round {round} of {}: producer piped to cat for {} s",
            settings.rounds, settings.secs
        );
        let piped = scratch.path().join("baseline");
        let status = Command::new("/bin/sh")
            .arg("-c")
            .arg(format!(
                "{python} {} {} {} | cat > /dev/null",
                produce.display(),
                settings.secs,
                piped.display()
            ))
            .status()?;
        ensure!(status.success(), "the baseline producer failed");
        baselines.push(read_count(&piped)? as f64 / settings.secs as f64);
        std::fs::remove_file(&piped)?;

        eprintln!(
            "==> round {round} of {}: producer as a service for {} s",
            settings.rounds, settings.secs
        );
        let run = run_producer(&daemon, &count, settings.secs).await?;
        std::fs::remove_file(&count)?;
        services.push(run.rate);
        cpus.push(run.cpu.as_secs_f64() / run.window.as_secs_f64());
        cpu_per_gb.push(run.cpu.as_secs_f64() * 1e3 / (run.rate * settings.secs as f64 / 1e9));
        rss = Some(run.rss);
    }
    let baseline = median(&baselines);
    let rate = median(&services);
    let rates = |v: &[f64]| {
        v.iter()
            .map(|r| format!("{:.0}", r / 1e6))
            .collect::<Vec<_>>()
            .join(", ")
    };
    rows.push(
        Row::single(
            &format!(
                "producer slowdown as a service vs piped to `cat`, medians of {} alternating runs (service {} MB/s; piped {} MB/s)",
                settings.rounds,
                rates(&services),
                rates(&baselines)
            ),
            Unit::Ratio,
            baseline / rate,
        )
        .pebble(1.39)
        .target(Target::at_most(1.1)),
    );
    let cpu = median(&cpus);
    rows.push(Row::single(
        &format!(
            "daemon CPU while the producer writes, share of one core (median; {:.0} ms per GB carried)",
            median(&cpu_per_gb)
        ),
        Unit::Ratio,
        cpu,
    ));
    let rss = rss.expect("at least one round ran");
    rows.push(Row::memory("daemon RSS after the producer", &[rss]));

    eprintln!("==> follower during a burst of {} lines", settings.burst);
    let id = client.start(&["burst".to_string()]).await?;
    client.wait_change(&id, Some(ANSWER_TIMEOUT)).await?;
    let socket = daemon.dir().join(".pebble.socket");
    let mut follower = Command::new(&settings.python)
        .arg(&follow)
        .arg(&socket)
        .arg("burst")
        .arg(settings.burst.to_string())
        .stdout(Stdio::piped())
        .spawn()
        .context("cannot run the follower")?;
    let mut out = std::io::BufReader::new(follower.stdout.take().context("no stdout")?);
    let mut line = String::new();
    std::io::BufRead::read_line(&mut out, &mut line)?;
    ensure!(line.trim() == "ready", "the follower said {line:?}");
    std::fs::write(scratch.path().join("go"), "")?;
    line.clear();
    std::io::BufRead::read_line(&mut out, &mut line)?;
    follower.wait()?;
    let tally = parse_tally(&line).with_context(|| format!("the follower said {line:?}"))?;
    let fraction = tally.0 as f64 / settings.burst as f64;
    rows.push(
        Row::single(
            &format!(
                "follower during a burst of {} lines: fraction received, target at least 0.90 ({} lost, {} markers, {:.2} s)",
                settings.burst, tally.1, tally.2, tally.3
            ),
            Unit::Ratio,
            fraction,
        )
        .pebble(0.14),
    );
    ensure!(
        tally.0 + tally.1 == settings.burst as u64,
        "lines unaccounted for: {} received, {} lost",
        tally.0,
        tally.1
    );
    daemon.stop_clean()?;

    eprintln!(
        "==> producer as a service of a --verbose daemon for {} s",
        settings.secs
    );
    let count = scratch.path().join("verbose");
    let layer = format!(
        "services:\n  {PRODUCER}:\n    override: replace\n    command: {python} {} {} {}\n    \
         environment:\n      {TOKEN_VAR}: {token}\n",
        produce.display(),
        settings.secs,
        count.display(),
    );
    let (mut daemon, stdout) = Daemon::spawn_verbose(cobble, Some(&layer), token)?;
    // Juju's container runtime drains the daemon's stdout; so does this thread.
    let drain = std::thread::spawn(move || drain(stdout));
    daemon
        .wait_answer(settings.poll_launch, ANSWER_TIMEOUT)
        .await?;
    let ProducerRun {
        rate,
        cpu,
        window,
        rss,
    } = run_producer(&daemon, &count, settings.secs).await?;
    daemon.stop_clean()?;
    let carried = drain
        .join()
        .map_err(|_| anyhow::anyhow!("the stdout drain panicked"))??;
    // Each 100-byte line goes out behind its `<time> [producer] ` prefix.
    let prefix = "2006-01-02T15:04:05.000Z [] ".len() + PRODUCER.len();
    let expected = rate * settings.secs as f64 * (100 + prefix) as f64 / 100.0;
    rows.push(Row::single(
        &format!(
            "`--verbose` (as Juju runs it): producer slowdown as a service vs piped to `cat` ({:.0} vs {:.0} MB/s)",
            rate / 1e6,
            baseline / 1e6
        ),
        Unit::Ratio,
        baseline / rate,
    ));
    rows.push(Row::single(
        &format!(
            "`--verbose`: daemon CPU while the producer writes ({} of one core)",
            report::cpu_share(cpu, window)
        ),
        Unit::Seconds,
        cpu.as_secs_f64(),
    ));
    rows.push(Row::single(
        &format!(
            "`--verbose`: share of the producer's lines on the daemon's stdout ({:.0} MB carried)",
            carried as f64 / 1e6
        ),
        Unit::Ratio,
        carried as f64 / expected,
    ));
    rows.push(Row::memory(
        "`--verbose`: daemon RSS after the producer",
        &[rss],
    ));
    Ok(report::markdown(&rows))
}

/// The name of the producer's service.
const PRODUCER: &str = "producer";

/// What one run of the producer as a service gave.
struct ProducerRun {
    /// Its byte rate.
    rate: f64,
    /// The daemon's CPU time over `window`, from the start request to the producer's end.
    cpu: Duration,
    window: Duration,
    /// The daemon's memory afterwards.
    rss: Rss,
}

/// Starts the producer service of `daemon` and waits until it has written its byte count to
/// `count`.
async fn run_producer(daemon: &Daemon, count: &Path, secs: u64) -> Result<ProducerRun> {
    let client = daemon.client();
    let cpu_before = daemon.cpu_time()?;
    let started = Instant::now();
    // The start change waits for the okay delay; the producer runs meanwhile.
    let id = client.start(&[PRODUCER.to_string()]).await?;
    client.wait_change(&id, Some(ANSWER_TIMEOUT)).await?;
    while !count.exists() {
        if started.elapsed() > Duration::from_secs(secs + 30) {
            bail!("the producer did not finish");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let window = started.elapsed();
    let cpu = daemon.cpu_time()? - cpu_before;
    let rss = daemon.rss()?;
    Ok(ProducerRun {
        rate: read_count(count)? as f64 / secs as f64,
        cpu,
        window,
        rss,
    })
}

/// The median of `values`, which is not empty.
fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    if sorted.len().is_multiple_of(2) {
        (sorted[mid - 1] + sorted[mid]) / 2.0
    } else {
        sorted[mid]
    }
}

/// Reads `stdout` to its end, as a container runtime reads a daemon's; returns the bytes.
fn drain(mut stdout: std::process::ChildStdout) -> Result<u64> {
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0u64;
    loop {
        match std::io::Read::read(&mut stdout, &mut buf) {
            Ok(0) => return Ok(total),
            Ok(n) => total += n as u64,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
}

fn read_count(path: &Path) -> Result<u64> {
    let text = std::fs::read_to_string(path)?;
    text.trim().parse().context("bad byte count")
}

/// `(received, lost, markers, secs)` from the follower's JSON.
fn parse_tally(line: &str) -> Option<(u64, u64, u64, f64)> {
    let field = |name: &str| -> Option<&str> {
        let at = line.find(&format!("\"{name}\": "))? + name.len() + 4;
        let rest = &line[at..];
        let end = rest.find([',', '}'])?;
        Some(rest[..end].trim())
    };
    Some((
        field("received")?.parse().ok()?,
        field("lost")?.parse().ok()?,
        field("markers")?.parse().ok()?,
        field("secs")?.parse().ok()?,
    ))
}
