//! The path-watching group: how fast a service waiting on `requires-paths` starts once its
//! paths exist, and what watching many paths costs an idle daemon.
//!
//! "Spawned" is when the service's own process runs: its command is
//! `/bin/bash -c 'echo ${EPOCHREALTIME/./} > DIR/started; exec sleep 100000'`, and bash's
//! `EPOCHREALTIME` is CLOCK_REALTIME in microseconds, read without forking. The harness takes
//! CLOCK_REALTIME right after it creates the last required path; the latency is the
//! difference. Because bash's own start-up is inside that figure, the group also measures
//! the floor: the same script spawned straight from the harness, from just before `spawn()`.
//!
//! - **Two paths**: a service with `requires-paths: [D/a, D/b]` is started through the API
//!   (it goes to `waiting`); the harness creates `D/a`, then `D/b` 10 ms later, and waits for
//!   `D/started`. Then it stops the service, deletes the files and starts it again.
//! - **1000 paths**: 1000 services, each requiring `R/dNNNN/ready` in its own directory, none
//!   of which exists; all started (all `waiting`). Idle CPU and RSS over a window, against a
//!   daemon with no layers; then, for a few of them, `mkdir R/dNNNN` and create `ready`, and
//!   time until that service's process runs.

use std::fmt::Write as _;
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail, ensure};
use cobble_client::Client;

use crate::daemon::{Daemon, Rss, TOKEN_VAR};
use crate::report::{cpu_share, millis, plain_table, rss_mib};
use crate::stats::Samples;

/// How long a service may take to write its timestamp after its paths appear.
const SPAWN_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a start or stop change may take.
const CHANGE_TIMEOUT: Duration = Duration::from_secs(60);
/// Pause between looks at the timestamp file.
const TIMESTAMP_POLL: Duration = Duration::from_micros(100);
/// Pause after a start, so the daemon has armed its watches before the paths appear.
const ARM_PAUSE: Duration = Duration::from_millis(20);
/// Pause between creating the first and the last required path.
const BETWEEN_PATHS: Duration = Duration::from_millis(10);

/// What the path-watching group runs.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// Runs of the two-path latency (and of the floor).
    pub runs: usize,
    /// Services (and paths) in the many-paths case.
    pub paths: usize,
    /// Latency runs in the many-paths case.
    pub many_runs: usize,
    /// The idle window for CPU time.
    pub idle: Duration,
    /// Pause before reading RSS.
    pub settle: Duration,
    /// The pause between attempts to reach a launching daemon.
    pub poll_launch: Duration,
}

/// The shell script a service runs: write its start time to `stamp`, then sleep.
fn script(stamp: &Path, then_sleep: bool) -> String {
    let mut script = format!("echo ${{EPOCHREALTIME/./}} > {}", stamp.display());
    if then_sleep {
        script.push_str("; exec sleep 100000");
    }
    script
}

/// One service entry of a layer: bash writes its start time to `stamp` once `paths` exist.
fn service_yaml(yaml: &mut String, name: &str, paths: &[PathBuf], stamp: &Path, token: &str) {
    let _ = write!(
        yaml,
        "  {name}:\n    override: replace\n    command: \"/bin/bash -c '{}'\"\n    \
         requires-paths:\n",
        script(stamp, true)
    );
    for path in paths {
        let _ = writeln!(yaml, "      - {}", path.display());
    }
    let _ = write!(
        yaml,
        "    environment:\n      {TOKEN_VAR}: {token}\n      LC_ALL: C\n"
    );
}

/// The many-paths layer: `count` services `w-0000`..., each requiring `root/dNNNN/ready`.
fn many_layer(root: &Path, count: usize, token: &str) -> String {
    let mut yaml = String::from("summary: cobble-bench path watching\nservices:\n");
    for i in 0..count {
        let dir = many_dir(root, i);
        service_yaml(
            &mut yaml,
            &many_name(i),
            &[dir.join("ready")],
            &dir.join("started"),
            token,
        );
    }
    yaml
}

fn many_name(i: usize) -> String {
    format!("w-{i:04}")
}

fn many_dir(root: &Path, i: usize) -> PathBuf {
    root.join(format!("d{i:04}"))
}

/// CLOCK_REALTIME in nanoseconds.
fn now_ns() -> Result<i128> {
    Ok(SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .context("clock before 1970")?
        .as_nanos() as i128)
}

/// Waits for bash to write its timestamp to `stamp` and returns it in nanoseconds.
fn read_stamp(stamp: &Path) -> Result<i128> {
    let started = Instant::now();
    loop {
        if let Ok(text) = fs::read_to_string(stamp)
            && let Some(line) = text.strip_suffix('\n')
        {
            let micros: i128 = line
                .trim()
                .parse()
                .with_context(|| format!("bad timestamp {line:?} in {}", stamp.display()))?;
            return Ok(micros * 1000);
        }
        if started.elapsed() > SPAWN_TIMEOUT {
            bail!("{} not written within {SPAWN_TIMEOUT:?}", stamp.display());
        }
        std::thread::sleep(TIMESTAMP_POLL);
    }
}

/// Turns "created at" and "process wrote" instants into a latency; a process that ran
/// before its path existed is an error.
fn latency(created_ns: i128, stamp_ns: i128) -> Result<Duration> {
    // The stamp has microsecond resolution: allow it to read up to 1 µs early.
    ensure!(
        stamp_ns + 1000 >= created_ns,
        "the process ran {} µs before its last path existed",
        (created_ns - stamp_ns) / 1000
    );
    Ok(Duration::from_nanos(
        u64::try_from((stamp_ns - created_ns).max(0)).unwrap_or(u64::MAX),
    ))
}

/// Latencies from "last required path created" to "service process running".
///
/// The reference instant is taken just *before* the harness creates the path: the path
/// appears somewhere inside that `open(O_CREAT)` call, and on a loaded machine the harness
/// can be preempted inside or right after it for milliseconds, long enough for the daemon to
/// spawn the service first. Measuring from before the call is therefore an upper bound that
/// includes the call itself, whose duration is kept alongside.
#[derive(Debug, Default)]
struct Spawns {
    /// From just before creating the path until the process's timestamp.
    latency: Samples,
    /// How long creating the path took.
    create: Samples,
    /// Runs in which the process's timestamp fell before the create call returned.
    inside_create: usize,
}

impl Spawns {
    /// Creates `path`, waits for the service to write `stamp`, and records the latency.
    fn record(&mut self, path: &Path, stamp: &Path) -> Result<()> {
        let before = now_ns()?;
        File::create(path)?;
        let after = now_ns()?;
        let stamp_ns = read_stamp(stamp)?;
        self.latency.push(latency(before, stamp_ns)?);
        self.create.push(Duration::from_nanos(
            u64::try_from(after - before).unwrap_or(0),
        ));
        if stamp_ns < after {
            self.inside_create += 1;
        }
        Ok(())
    }
}

/// Runs the group and returns its Markdown section body.
pub(crate) async fn run(cobble: &Path, token: &str, settings: &Settings) -> Result<String> {
    eprintln!(
        "==> watch: floor, bash spawned by the harness ({} runs)",
        settings.runs
    );
    let floor = floor(token, settings.runs)?;
    eprintln!("==> watch: 2 required paths ({} runs)", settings.runs);
    let (two, status) = two_paths(cobble, token, settings).await?;
    eprintln!(
        "==> watch: {} services waiting on {} paths",
        settings.paths, settings.paths
    );
    let many = many_paths(cobble, token, settings).await?;
    eprintln!("==> watch: empty daemon for comparison");
    let mut empty = Daemon::spawn(cobble, None, token)?;
    empty
        .wait_answer(settings.poll_launch, Duration::from_secs(10))
        .await?;
    let (empty_cpu, empty_window) = idle_cpu(&empty, settings.idle).await?;
    let empty_rss = empty.rss()?;
    empty.stop_clean()?;

    let n = settings.paths;
    let latency_rows = [
        (
            "Floor: harness spawns the same bash script directly (spawn → timestamp)",
            &floor,
        ),
        (
            "Last of 2 `requires-paths` created → service process running",
            &two.latency,
        ),
        (
            &*format!("1 of {n} watched paths created (with its directory) → its service running"),
            &many.latency.latency,
        ),
    ]
    .iter()
    .map(|(what, samples)| {
        vec![
            (*what).to_string(),
            millis(samples.median()),
            millis(samples.p99()),
            millis(samples.max()),
            samples.len().to_string(),
        ]
    })
    .collect::<Vec<_>>();
    let mut out = plain_table(&["Latency", "median", "p99", "worst", "n"], &latency_rows);
    out.push('\n');
    let cost_rows = vec![
        vec![
            "No layers (idle daemon)".to_string(),
            cpu_share(empty_cpu, empty_window),
            rss_mib(empty_rss),
        ],
        vec![
            format!("{n} services in the plan, not started"),
            "–".to_string(),
            rss_mib(many.rss_planned),
        ],
        vec![
            format!("{n} services `waiting` on {n} missing paths in {n} missing directories"),
            cpu_share(many.cpu, many.window),
            rss_mib(many.rss_waiting),
        ],
    ];
    out.push_str(&plain_table(
        &[
            "Daemon",
            &format!("Idle CPU over {} s (% of a core)", settings.idle.as_secs()),
            "VmRSS (anon + file)",
        ],
        &cost_rows,
    ));
    let _ = write!(
        out,
        "\nThe two-path service's status while waiting: `{status}`. Latencies include bash's \
         start-up (see the floor row) and the harness's own create call, timed from just \
         before it: median {} (max {}) for the two-path runs, median {} (max {}) for the \
         {n}-path runs. The process's timestamp fell inside the create call (the harness was \
         preempted there) in {} of {} and {} of {} runs.\n",
        millis(two.create.median()),
        millis(two.create.max()),
        millis(many.latency.create.median()),
        millis(many.latency.create.max()),
        two.inside_create,
        two.latency.len(),
        many.latency.inside_create,
        many.latency.latency.len(),
    );
    Ok(out)
}

/// Spawns the timestamp script straight from the harness `runs` times: the part of every
/// latency that is bash starting, not the daemon.
fn floor(token: &str, runs: usize) -> Result<Samples> {
    let dir = tempfile::Builder::new()
        .prefix("cobble-bench-floor-")
        .tempdir()?;
    let stamp = dir.path().join("started");
    let mut samples = Samples::default();
    for _ in 0..runs {
        let _ = fs::remove_file(&stamp);
        let before = now_ns()?;
        let mut child = Command::new("/bin/bash")
            .args(["-c", &script(&stamp, false)])
            .env(TOKEN_VAR, token)
            .env("LC_ALL", "C")
            .stdin(Stdio::null())
            .spawn()
            .context("cannot run /bin/bash")?;
        let stamp_ns = read_stamp(&stamp);
        child.wait()?;
        samples.push(latency(before, stamp_ns?)?);
    }
    Ok(samples)
}

/// Starts `names` and waits for the change to be done.
async fn start(client: &Client, names: &[String]) -> Result<()> {
    let id = client.start(names).await?;
    let change = client.wait_change(&id, Some(CHANGE_TIMEOUT)).await?;
    ensure!(
        change.status == "Done",
        "start ended {}: {}",
        change.status,
        change.err
    );
    Ok(())
}

/// The two-path latency; also returns the service's status while it waited.
async fn two_paths(cobble: &Path, token: &str, settings: &Settings) -> Result<(Spawns, String)> {
    let work = tempfile::Builder::new()
        .prefix("cobble-bench-paths-")
        .tempdir()?;
    let (a, b, stamp) = (
        work.path().join("a"),
        work.path().join("b"),
        work.path().join("started"),
    );
    let mut layer = String::from("summary: cobble-bench requires-paths\nservices:\n");
    service_yaml(&mut layer, "waiter", &[a.clone(), b.clone()], &stamp, token);
    let mut daemon = Daemon::spawn(cobble, Some(&layer), token)?;
    daemon
        .wait_answer(settings.poll_launch, Duration::from_secs(10))
        .await?;
    let client = daemon.client();
    let names = vec!["waiter".to_string()];
    let mut samples = Spawns::default();
    let mut status = String::new();
    for run in 0..settings.runs {
        start(client, &names).await?;
        let info = client.services(&names).await?;
        let current = info.first().map(|s| s.current.clone()).unwrap_or_default();
        ensure!(
            current != "active",
            "run {run}: the service is active before its paths exist"
        );
        if run == 0 {
            status = current;
        }
        tokio::time::sleep(ARM_PAUSE).await;
        File::create(&a)?;
        std::thread::sleep(BETWEEN_PATHS);
        samples.record(&b, &stamp)?;

        let id = client.stop(&names).await?;
        let change = client.wait_change(&id, Some(CHANGE_TIMEOUT)).await?;
        ensure!(change.status == "Done", "stop ended {}", change.status);
        for path in [&a, &b, &stamp] {
            fs::remove_file(path)?;
        }
    }
    daemon.stop_clean()?;
    Ok((samples, status))
}

/// What the many-paths case measured.
struct Many {
    rss_planned: Rss,
    rss_waiting: Rss,
    cpu: Duration,
    window: Duration,
    latency: Spawns,
}

/// The many-paths case.
async fn many_paths(cobble: &Path, token: &str, settings: &Settings) -> Result<Many> {
    let work = tempfile::Builder::new()
        .prefix("cobble-bench-many-")
        .tempdir()?;
    let root = work.path();
    let n = settings.paths;
    let mut daemon = Daemon::spawn(cobble, Some(&many_layer(root, n, token)), token)?;
    daemon
        .wait_answer(settings.poll_launch, Duration::from_secs(10))
        .await?;
    tokio::time::sleep(settings.settle).await;
    let rss_planned = daemon.rss()?;
    let client = daemon.client();
    let names: Vec<String> = (0..n).map(many_name).collect();
    start(client, &names).await?;
    let services = client.services(&[]).await?;
    let active = services.iter().filter(|s| s.current == "active").count();
    ensure!(
        services.len() == n && active == 0,
        "{} services listed, {active} active; expected {n}, none active",
        services.len()
    );
    tokio::time::sleep(settings.settle).await;
    let (cpu, window) = idle_cpu(&daemon, settings.idle).await?;
    let rss_waiting = daemon.rss()?;

    let mut latency_samples = Spawns::default();
    for k in 0..settings.many_runs {
        let i = (k * n / settings.many_runs.max(1) + k) % n;
        let dir = many_dir(root, i);
        fs::create_dir(&dir)?;
        latency_samples.record(&dir.join("ready"), &dir.join("started"))?;
    }
    daemon.stop_clean()?;
    Ok(Many {
        rss_planned,
        rss_waiting,
        cpu,
        window,
        latency: latency_samples,
    })
}

/// The daemon's CPU time over `window` with no requests, and the window as measured.
async fn idle_cpu(daemon: &Daemon, window: Duration) -> Result<(Duration, Duration)> {
    let before = daemon.cpu_time()?;
    let started = Instant::now();
    tokio::time::sleep(window).await;
    let took = started.elapsed();
    Ok((daemon.cpu_time()?.saturating_sub(before), took))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn many_layer_gives_each_service_its_own_directory() {
        let yaml = many_layer(Path::new("/r"), 2, "t1");
        assert!(yaml.contains(
            "  w-0000:\n    override: replace\n    command: \"/bin/bash -c 'echo \
             ${EPOCHREALTIME/./} > /r/d0000/started; exec sleep 100000'\"\n    \
             requires-paths:\n      - /r/d0000/ready\n"
        ));
        assert!(yaml.contains("      - /r/d0001/ready\n"));
        assert_eq!(yaml.matches("      COBBLE_BENCH_TOKEN: t1\n").count(), 2);
    }

    #[test]
    fn latency_is_stamp_minus_creation_and_rejects_early_processes() {
        assert_eq!(
            latency(1_000_000, 3_500_000).unwrap(),
            Duration::from_micros(2500)
        );
        assert_eq!(latency(1_000_500, 1_000_000).unwrap(), Duration::ZERO);
        assert!(latency(5_000_000, 1_000_000).is_err());
    }

    #[test]
    fn the_floor_script_writes_a_timestamp() {
        let samples = floor("test", 2).unwrap();
        assert_eq!(samples.len(), 2);
        assert!(samples.max() < SPAWN_TIMEOUT);
    }
}
