//! `cobble-bench`: measures a release build of cobble the way the Pebble figures in
//! `BENCHMARKS.md` were measured, and prints a Markdown table beside them.
//!
//! # Theory of operation
//!
//! Every measurement runs a real `cobble run --hold` on a fresh temporary `$PEBBLE`
//! ([`daemon::Daemon`]) and talks to it over its unix socket with `cobble-client`, opening a
//! new connection per request as the Python `ops` client does. The harness itself is one
//! thread (a current-thread tokio runtime), so on a small machine it competes with the daemon
//! for as little CPU as possible.
//!
//! - **Launch**: from just before `spawn` until the first `GET /v1/system-info` that
//!   succeeds, polling every `--poll-launch-us`; with no layers and with 100 services.
//! - **Memory**: `VmRSS`, `RssAnon` and `RssFile` from `/proc/PID/status`, `Pss` from
//!   `/proc/PID/smaps_rollup`, and `memory.current` of a cgroup of the daemon's own where the
//!   harness can make one ([`cgroup`]); each `--settle-ms` after the daemon's last request.
//!   With no services, with 100 services in the plan but not started, and with those 100
//!   running after a replan; each idle (no request but the one that saw the daemon answer, or
//!   the replan) and warm (after [`WARM_ROUNDS`] rounds of the requests a charm typically
//!   sends, [`WARM_PATHS`]).
//! - **Latency**: `--requests` sequential `GET /v1/services` and `GET /v1/plan?format=yaml`
//!   (what ops sends), each on a new connection, after a short unmeasured warm-up; with the
//!   100 services not started and running. The daemon's CPU time (utime + stime) across each
//!   series, divided by the requests, is its CPU per request.
//! - **Replan**: 100 independent `startup: enabled` services, `POST /v1/services` with
//!   `replan`, then `GET /v1/services` every `--poll-replan-us` until all are active; the
//!   replan change's own end is followed concurrently with `/v1/changes/{id}/wait`. Each of
//!   the `--rounds` rounds uses a fresh daemon.
//! - **Start one**: stop `svc-000`, then time `start` of it until its change is ready (this
//!   includes the 1 s okay delay that Pebble also has).
//! - **Idle CPU**: utime + stime from `/proc/PID/stat` across `--idle-cpu-secs` with 100
//!   services running and no requests; once before the latency series, and once more after
//!   the `GET /v1/metrics` ones (nothing may go on reading `/proc` once they end).
//! - **Metrics**: `GET /v1/metrics` with 100 services running, back to back (the services'
//!   accounting is read at most once a second, and served from that reading in between) and
//!   10 requests 1.1 s apart (each reads all 100 services anew).
//!
//! Those are the `core` group. More groups have their own tables; `--only` picks groups
//! (all by default):
//!
//! - `scale`: launch until the socket answers, and `GET /v1/services`, with `--scale`
//!   services (1000 and 3000) in the plan, not started, and the time each further service
//!   adds; with `--pebble PATH`, that Pebble's launches alternate with cobble's on the same
//!   layers, and the launch rows compare against its medians.
//! - `checks` ([`checks`]): daemon CPU, RSS, `GET /v1/health` latency and state-file writes
//!   with 100 and 1000 checks at a 1 s period.
//! - `watch` ([`watch`]): `requires-paths` → process spawned latency, and the cost of
//!   1000 services waiting on 1000 paths.
//! - `exec` ([`exec`]): the round trip of `exec true` through `cobble-client`, every step on
//!   a new connection.
//! - `notices` ([`notices`]): notify-to-long-poller wake latency through ops, 1000 waiting
//!   pollers, and the state writes of a check flapping every second.
//! - `slow` ([`slow`]): `GET /v1/health` over `--http` while 600 and 2000 slow clients send
//!   their request heads a byte a second.
//! - `restarts` ([`restarts`]): a client opening 200 connections a second to an HTTP service
//!   restarted 20 times, its port held by cobble, bound by the service under cobble, and
//!   (with `--pebble PATH`) bound by the service under that Pebble.
//!
//! Every daemon runs a private copy of the binary, so a rebuild during the run changes
//! nothing. Daemons are stopped with SIGTERM (once they catch it) and waited for; afterwards
//! every process carrying the run's marker variable is killed and reported, so no `sleep`
//! outlives the harness.
//!
//! # Layout
//!
//! - [`daemon`]: the daemon fixture, the benchmark layer and `/proc` readings.
//! - [`cgroup`]: a cgroup per daemon for `memory.current`.
//! - [`stats`]: median and p99 of repeated measurements.
//! - [`report`]: the table, with Pebble's figures and the targets.
//! - [`checks`], [`watch`], [`exec`]: the checks, path-watching and exec groups.
//! - [`forward`]: the log-forwarding group.
#![forbid(unsafe_code)]

mod cgroup;
mod checks;
mod daemon;
mod durability;
mod exec;
mod forward;
mod logs;
mod notices;
mod report;
mod restarts;
mod slow;
mod stats;
mod watch;

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail, ensure};
use clap::{Parser, ValueEnum};
use cobble_client::{Client, Method};
use tempfile::TempDir;

use crate::daemon::{Daemon, Memory, service_name, sleepers_layer, sweep_leftovers};
use crate::report::{Row, Target, Unit, secs};
use crate::stats::Samples;

/// How long a daemon may take to answer its first request.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a replan or a start may take before the harness gives up.
const CHANGE_TIMEOUT: Duration = Duration::from_secs(300);
/// Unmeasured requests before each latency series, to fault in code and allocator pages.
const WARMUP_REQUESTS: usize = 50;

/// `GET /v1/metrics` requests spaced out so that each reads every service anew.
const FRESH_METRICS: u32 = 10;

/// The space between them: more than the daemon's one-second accounting interval.
const FRESH_GAP: Duration = Duration::from_millis(1100);

/// The requests a charm typically sends through ops, one round of the warm-up before a
/// "warm" memory reading. `{service}` is the first service of the plan, `{dir}` is `$PEBBLE`.
const WARM_PATHS: &[&str] = &[
    "/v1/system-info",
    "/v1/services",
    "/v1/services?names={service}",
    "/v1/plan?format=yaml",
    "/v1/checks",
    "/v1/health",
    "/v1/changes?select=all",
    "/v1/files?action=list&path={dir}",
];

/// Rounds of [`WARM_PATHS`] before a "warm" memory reading.
const WARM_ROUNDS: usize = 50;

/// Pebble v1.12.0 on a 2-core, 24 GiB machine (see BENCHMARKS.md).
mod pebble {
    /// Idle RSS with no services, MiB.
    pub(crate) const RSS_EMPTY_MIB: f64 = 8.7;
    /// Idle RSS with 100 services, MiB.
    pub(crate) const RSS_100_MIB: f64 = 31.8;
    /// From launch until the socket answers, seconds.
    pub(crate) const LAUNCH_S: f64 = 6.9e-3;
    /// `GET /v1/services` with 100 services, new connection per request, seconds.
    pub(crate) const GET_SERVICES_S: f64 = 0.34e-3;
    /// `GET /v1/plan` with 100 services, new connection per request, seconds.
    pub(crate) const GET_PLAN_S: f64 = 0.85e-3;
    /// Replan of 100 independent services, seconds (it starts them one after another).
    pub(crate) const REPLAN_100_S: f64 = 101.0;
    /// Start of one service, seconds.
    pub(crate) const START_ONE_S: f64 = 1.03;
    /// `GET /v1/services` with this many services in the plan, not started, seconds.
    pub(crate) fn get_services_not_started_s(services: usize) -> Option<f64> {
        match services {
            1000 => Some(1.04e-3),
            3000 => Some(2.4e-3),
            _ => None,
        }
    }
}

/// The replan target, seconds.
const REPLAN_TARGET_S: f64 = 2.0;

/// Benchmarks a cobble binary: memory, launch time, API latency, replan and start.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// The cobble binary to measure.
    #[arg(long, value_name = "PATH", default_value = "target/release/cobble")]
    cobble: PathBuf,
    /// Sequential requests per latency series.
    #[arg(long, value_name = "N", default_value_t = 2000)]
    requests: usize,
    /// Launches per launch-time series.
    #[arg(long, value_name = "N", default_value_t = 20)]
    launches: usize,
    /// Fresh daemons with 100 services to replan (and with none, for idle memory).
    #[arg(long, value_name = "N", default_value_t = 5)]
    rounds: usize,
    /// Starts of one service to time.
    #[arg(long, value_name = "N", default_value_t = 5)]
    starts: usize,
    /// How many services the large plan has.
    #[arg(long, value_name = "N", default_value_t = 100)]
    services: usize,
    /// Pause after the last request before reading RSS, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 1000)]
    settle_ms: u64,
    /// How long to measure CPU time with the services running and no requests, in seconds.
    #[arg(long, value_name = "S", default_value_t = 10)]
    idle_cpu_secs: u64,
    /// Pause between attempts to reach a launching daemon, in microseconds.
    #[arg(long, value_name = "US", default_value_t = 200)]
    poll_launch_us: u64,
    /// Pause between `GET /v1/services` while waiting for a replan, in microseconds.
    #[arg(long, value_name = "US", default_value_t = 2000)]
    poll_replan_us: u64,
    /// Numbers of services (in the plan, not started) for the `GET /v1/services` scale rows.
    #[arg(
        long,
        value_name = "N,N",
        value_delimiter = ',',
        default_value = "1000,3000"
    )]
    scale: Vec<usize>,
    /// A Pebble binary launched side by side with cobble in the `scale` group's launch rows
    /// (alternating, on the same layers), whose medians the rows then compare against; and
    /// the third case of the `restarts` group.
    #[arg(long, value_name = "PATH")]
    pebble: Option<PathBuf>,
    /// Run only these groups (comma-separated or repeated); all of them by default.
    #[arg(long, value_name = "GROUP", value_delimiter = ',')]
    only: Vec<Group>,
    /// Numbers of tcp checks (period 1 s), one daemon each.
    #[arg(
        long,
        value_name = "N,N",
        value_delimiter = ',',
        default_value = "100,1000"
    )]
    checks: Vec<usize>,
    /// Number of exec checks (`true`, period 1 s) in one more case; 0 skips it.
    #[arg(long, value_name = "N", default_value_t = 100)]
    exec_checks: usize,
    /// Measurement window of each checks case, in seconds.
    #[arg(long, value_name = "S", default_value_t = 30)]
    checks_secs: u64,
    /// Pause after launch before each checks window, in seconds.
    #[arg(long, value_name = "S", default_value_t = 3)]
    checks_warmup_secs: u64,
    /// Pause between `GET /v1/health` requests under check load, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 10)]
    health_interval_ms: u64,
    /// Runs of the two-path `requires-paths` latency.
    #[arg(long, value_name = "N", default_value_t = 100)]
    path_runs: usize,
    /// Services, each waiting on its own path, in the many-paths case.
    #[arg(long, value_name = "N", default_value_t = 1000)]
    watch_paths: usize,
    /// Latency runs in the many-paths case.
    #[arg(long, value_name = "N", default_value_t = 10)]
    watch_runs: usize,
    /// Idle CPU window with the paths watched (and with an empty daemon), in seconds.
    #[arg(long, value_name = "S", default_value_t = 30)]
    watch_idle_secs: u64,
    /// Round trips of `exec true` per exec series.
    #[arg(long, value_name = "N", default_value_t = 1000)]
    exec_runs: usize,
    /// The Python (with ops installed) that runs the ops exec round trips.
    #[arg(long, value_name = "PATH", default_value = ".venv/bin/python")]
    python: PathBuf,
    /// MiB pushed through `cat` in the exec throughput row.
    #[arg(long, value_name = "N", default_value_t = 100)]
    exec_mib: usize,
    /// Runs of the exec throughput each way (a local `cat`, `cat` through the daemon).
    #[arg(long, value_name = "N", default_value_t = 5)]
    exec_rounds: usize,
    /// `exec true` round trips started at once.
    #[arg(long, value_name = "N", default_value_t = 50)]
    exec_concurrent: usize,
    /// Starts of one service timed in the durability group.
    #[arg(long, value_name = "N", default_value_t = 50)]
    durable_starts: usize,
    /// Concurrent clients sending mutating requests in the durability group.
    #[arg(long, value_name = "N", default_value_t = 16)]
    durable_clients: usize,
    /// The load window of the durability group, in seconds.
    #[arg(long, value_name = "S", default_value_t = 10)]
    durable_secs: u64,
    /// How long the logs group's producer writes, in seconds.
    #[arg(long, value_name = "S", default_value_t = 10)]
    logs_secs: u64,
    /// How many times the logs group's producer runs each way, alternating.
    #[arg(long, value_name = "N", default_value_t = 3)]
    logs_rounds: usize,
    /// Lines in the logs group's burst.
    #[arg(long, value_name = "N", default_value_t = 200_000)]
    logs_burst: usize,
    /// Measured notify-to-poller wake-ups per key mode (notices group).
    #[arg(long, value_name = "N", default_value_t = 200)]
    notice_runs: usize,
    /// Concurrent waiting long-pollers (notices group).
    #[arg(long, value_name = "N", default_value_t = 1000)]
    notice_pollers: usize,
    /// Sequential `GET /v1/health` requests while the pollers wait (notices group).
    #[arg(long, value_name = "N", default_value_t = 1000)]
    notice_health: usize,
    /// CPU window with the pollers waiting, and the flapping check's window, in seconds.
    #[arg(long, value_name = "S", default_value_t = 20)]
    notice_secs: u64,
    /// Lines per second the forward group's service writes.
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    forward_rate: usize,
    /// How long the forward group's service writes, in seconds.
    #[arg(long, value_name = "S", default_value_t = 10)]
    forward_secs: u64,
    /// Numbers of slow clients on `--http`, one daemon each (slow group).
    #[arg(
        long,
        value_name = "N,N",
        value_delimiter = ',',
        default_value = "600,2000"
    )]
    slow_clients: Vec<usize>,
    /// `GET /v1/health` probes per slow-clients case.
    #[arg(long, value_name = "N", default_value_t = 100)]
    slow_probes: usize,
    /// The pause between probes, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 100)]
    slow_probe_interval_ms: u64,
    /// How long the slow clients run before the first probe, in seconds.
    #[arg(long, value_name = "S", default_value_t = 5)]
    slow_warmup_secs: u64,
    /// Restarts of the service per restarts case, alternately by the API and by SIGKILL.
    #[arg(long, value_name = "N", default_value_t = 20)]
    restarts: usize,
    /// Rounds the restarts group's restarts are split into (one daemon per case each; the
    /// cases take turns, reversed every other round).
    #[arg(long, value_name = "N", default_value_t = 2)]
    restart_rounds: usize,
    /// The time between two connections of the restarts group's client, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 5)]
    restart_interval_ms: u64,
    /// The pause after each restart has completed, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 300)]
    restart_settle_ms: u64,
}

/// A group of measurements that can run alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Group {
    /// Memory, launch, latency, replan, start, idle CPU, shutdown.
    Core,
    /// Launch and `GET /v1/services` with large plans.
    Scale,
    /// Health checks under load.
    Checks,
    /// `requires-paths` watching.
    Watch,
    /// `exec true` round trips.
    Exec,
    /// The cost of answering change IDs only once they are durable.
    Durability,
    /// Service output: capture cost, and a follower during a burst.
    Logs,
    /// Notice long-polls: wake latency, many waiting pollers, a flapping check.
    Notices,
    /// Service output forwarded to a Loki receiver.
    Forward,
    /// `/v1/health` over `--http` while many slow clients hold connections.
    Slow,
    /// An HTTP service restarted under load: its port held, or bound by the service.
    Restarts,
}

impl Args {
    fn runs(&self, group: Group) -> bool {
        self.only.is_empty() || self.only.contains(&group)
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start tokio: {e}");
            return ExitCode::FAILURE;
        }
    };
    let token = format!(
        "{}-{}",
        std::process::id(),
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default()
    );
    let result = runtime.block_on(run_groups(&args, token.clone()));
    // Whatever happened, leave no service behind.
    let leftovers = sweep_leftovers(&token);
    if !leftovers.is_empty() {
        eprintln!(
            "warning: killed leftover processes: {}",
            leftovers.join(", ")
        );
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Runs the selected groups in order, printing each one's Markdown as soon as it is done.
async fn run_groups(args: &Args, token: String) -> Result<()> {
    let bench = Bench::new(args, token)?;
    if args.runs(Group::Core) {
        let (rows, memory, notes) = bench.run_all().await?;
        println!("{}", report::markdown(&rows));
        println!("### Memory\n\n{memory}");
        for note in notes {
            println!("Note: {note}\n");
        }
        print_verdict(&rows);
    }
    if args.runs(Group::Scale) {
        let rows = bench.scale().await?;
        println!(
            "### Launch and GET /v1/services with large plans\n\n{}",
            report::markdown(&rows)
        );
        print_verdict(&rows);
    }
    let poll_launch = bench.poll_launch();
    if args.runs(Group::Checks) {
        let settings = checks::Settings {
            tcp_counts: args.checks.clone(),
            exec_count: args.exec_checks,
            window: Duration::from_secs(args.checks_secs),
            warmup: Duration::from_secs(args.checks_warmup_secs),
            health_interval: Duration::from_millis(args.health_interval_ms),
            poll_launch,
        };
        let section = checks::run(&bench.cobble, &bench.token, &settings).await?;
        println!("### Checks under load\n\n{section}");
    }
    if args.runs(Group::Watch) {
        let settings = watch::Settings {
            runs: args.path_runs,
            paths: args.watch_paths,
            many_runs: args.watch_runs,
            idle: Duration::from_secs(args.watch_idle_secs),
            settle: Duration::from_millis(args.settle_ms),
            poll_launch,
        };
        let section = watch::run(&bench.cobble, &bench.token, &settings).await?;
        println!("### Path watching\n\n{section}");
    }
    if args.runs(Group::Exec) {
        let settings = exec::Settings {
            runs: args.exec_runs,
            poll_launch,
            python: args.python.clone(),
            mib: args.exec_mib,
            rounds: args.exec_rounds,
            concurrent: args.exec_concurrent,
        };
        let section = exec::run(&bench.cobble, &bench.token, &settings).await?;
        println!("### Exec\n\n{section}");
    }
    if args.runs(Group::Durability) {
        let settings = durability::Settings {
            starts: args.durable_starts,
            clients: args.durable_clients,
            window: Duration::from_secs(args.durable_secs),
            poll_launch,
        };
        let section = durability::run(&bench.cobble, &bench.token, &settings).await?;
        println!("### Durability (group commit)\n\n{section}");
    }
    if args.runs(Group::Logs) {
        let settings = logs::Settings {
            secs: args.logs_secs,
            rounds: args.logs_rounds,
            burst: args.logs_burst,
            python: "python3".into(),
            poll_launch,
        };
        let section = logs::run(&bench.cobble, &bench.token, &settings).await?;
        println!("### Logs\n\n{section}");
    }
    if args.runs(Group::Notices) {
        let settings = notices::Settings {
            runs: args.notice_runs,
            pollers: args.notice_pollers,
            health_requests: args.notice_health,
            window: Duration::from_secs(args.notice_secs),
            python: args.python.clone(),
            poll_launch,
        };
        let section = notices::run(&bench.cobble, &bench.token, &settings).await?;
        println!("### Notices\n\n{section}");
    }
    if args.runs(Group::Forward) {
        let settings = forward::Settings {
            rate: args.forward_rate,
            window: Duration::from_secs(args.forward_secs),
            poll_launch,
        };
        let section = forward::run(&bench.cobble, &bench.token, &settings).await?;
        println!("### Log forwarding\n\n{section}");
    }
    if args.runs(Group::Slow) {
        let settings = slow::Settings {
            clients: args.slow_clients.clone(),
            probes: args.slow_probes,
            probe_interval: Duration::from_millis(args.slow_probe_interval_ms),
            warmup: Duration::from_secs(args.slow_warmup_secs),
            poll_launch,
        };
        let section = slow::run(&bench.cobble, &bench.token, &settings).await?;
        println!("### Slow clients on --http\n\n{section}");
    }
    if args.runs(Group::Restarts) {
        let settings = restarts::Settings {
            restarts: args.restarts,
            rounds: args.restart_rounds,
            interval: Duration::from_millis(args.restart_interval_ms),
            settle: Duration::from_millis(args.restart_settle_ms),
            pebble: args.pebble.clone(),
            python: "python3".into(),
            poll_launch,
        };
        let section = restarts::run(&bench.cobble, &bench.token, &settings).await?;
        println!("### Restarts with held sockets\n\n{section}");
    }
    Ok(())
}

fn print_verdict(rows: &[Row]) {
    if report::any_missed(rows) {
        println!("Some targets were missed (marked **MISSED**).\n");
    } else {
        println!("All targets met.\n");
    }
}

/// A latency series and what it cost the daemon.
struct Series {
    /// The time of each request, from just before it was sent until the whole answer was
    /// read.
    samples: Samples,
    /// The daemon's CPU time (user + system) across the series, per request.
    cpu_per_request: Duration,
}

impl Series {
    fn row(&self, what: &str) -> Row {
        Row::distribution(
            &format!(
                "{what} (daemon CPU {:.3} ms/request)",
                self.cpu_per_request.as_secs_f64() * 1e3
            ),
            Unit::Millis,
            &self.samples,
        )
    }
}

/// The settings of one harness run.
struct Bench<'a> {
    /// The command line.
    args: &'a Args,
    /// The marker value of this run's daemons and services.
    token: String,
    /// The layer with `args.services` sleepers.
    layer: String,
    /// Their names.
    names: Vec<String>,
    /// The private copy of `--cobble` that every daemon runs.
    cobble: PathBuf,
    /// The directory holding that copy; removed when the run ends.
    _copy_dir: TempDir,
    /// Where each measured daemon gets a cgroup of its own, or why it cannot.
    cgroups: std::result::Result<PathBuf, String>,
    /// How many cgroups this run has made, to name the next one.
    cgroups_made: Cell<usize>,
}

/// What one round with the large plan measured.
#[derive(Default)]
struct Rounds {
    planned_idle: Vec<Memory>,
    planned_warm: Vec<Memory>,
    running_idle: Vec<Memory>,
    running_warm: Vec<Memory>,
    all_active: Samples,
    change_ready: Samples,
    stop_all: Samples,
}

/// What only the first round measures.
struct Details {
    services_planned: Series,
    plan_planned: Series,
    services_running: Series,
    plan_running: Series,
    idle_cpu: Duration,
    /// `GET /v1/metrics` back to back: the accounting read once a second, served between.
    metrics_running: Series,
    /// `GET /v1/metrics` more than a second apart: every one reads every service anew.
    metrics_fresh: Series,
    /// Idle again, after the scrapes: nothing goes on reading.
    idle_cpu_after_metrics: Duration,
    start_one: Samples,
}

impl<'a> Bench<'a> {
    fn new(args: &'a Args, token: String) -> Result<Bench<'a>> {
        ensure!(
            [
                args.services,
                args.rounds,
                args.requests,
                args.launches,
                args.starts
            ]
            .iter()
            .all(|&count| count > 0),
            "--services, --rounds, --requests, --launches and --starts must be positive"
        );
        ensure!(
            [
                args.path_runs,
                args.watch_paths,
                args.watch_runs,
                args.checks_secs as usize,
                args.health_interval_ms as usize,
            ]
            .iter()
            .chain(&args.checks)
            .all(|&count| count > 0),
            "--path-runs, --watch-paths, --watch-runs, --checks-secs, --health-interval-ms \
             and every --checks count must be positive"
        );
        // A rebuild of the workspace during the run (others share this target directory)
        // must not swap the binary under the measurements, so every daemon runs a copy.
        let copy_dir = tempfile::Builder::new()
            .prefix("cobble-bench-bin-")
            .tempdir()
            .context("cannot create a temporary directory")?;
        let cobble = copy_dir.path().join("cobble");
        std::fs::copy(&args.cobble, &cobble).with_context(|| {
            format!(
                "cannot copy {} (build it with `cargo build --release -p cobble`)",
                args.cobble.display()
            )
        })?;
        let layer = sleepers_layer(args.services, &token);
        let names = (0..args.services).map(service_name).collect();
        Ok(Bench {
            args,
            token,
            layer,
            names,
            cobble,
            _copy_dir: copy_dir,
            cgroups: cgroup::probe(),
            cgroups_made: Cell::new(0),
        })
    }

    /// Runs the core measurements; returns the table's rows, the memory table and notes to
    /// print under them.
    async fn run_all(&self) -> Result<(Vec<Row>, String, Vec<String>)> {
        let args = self.args;
        let size = std::fs::metadata(&self.cobble)?.len();
        let n = args.services;

        eprintln!("==> memory with no services ({} daemons)", args.rounds);
        let (mut empty_idle, mut empty_warm) = (Vec::new(), Vec::new());
        for _ in 0..args.rounds {
            let daemon = self.launch_measured(None).await?;
            self.settle().await;
            empty_idle.push(daemon.memory()?);
            self.warm_up(&daemon).await?;
            self.settle().await;
            empty_warm.push(daemon.memory()?);
            self.stop(daemon)?;
        }

        eprintln!("==> launch time ({} launches each)", args.launches);
        let (launch_empty, early_empty) = self.launch_times(None).await?;
        let (launch_large, early_large) = self.launch_times(Some(&self.layer)).await?;
        let mut notes = Vec::new();
        if early_empty + early_large > 0 {
            notes.push(format!(
                "in {} of {} launches the socket answered before the daemon caught SIGTERM \
                 (a SIGTERM then would have killed it outright); the harness waits for the \
                 handler before stopping a daemon.",
                early_empty + early_large,
                2 * args.launches
            ));
        }
        if let Err(why) = &self.cgroups {
            notes.push(format!("no `memory.current` figures: {why}."));
        }

        let mut rounds = Rounds::default();
        let mut details = None;
        for round in 0..args.rounds {
            eprintln!("==> round {}/{} with {n} services", round + 1, args.rounds);
            let first = self.round(&mut rounds, round == 0).await?;
            details = details.or(first);
        }
        let details = details.context("the first round measured no details")?;

        let rss = |readings: &[Memory]| readings.iter().map(|m| m.rss).collect::<Vec<_>>();
        let rss_pebble_target = |pebble: f64| Target::at_most(pebble / 3.0);
        let rows = vec![
            Row::single("Release binary size", Unit::MiB, size as f64 / 1048576.0),
            Row::memory("Warm RSS, 0 services", &rss(&empty_warm))
                .pebble(pebble::RSS_EMPTY_MIB)
                .target(rss_pebble_target(pebble::RSS_EMPTY_MIB)),
            Row::memory(
                &format!("Warm RSS, {n} services in plan, not started"),
                &rss(&rounds.planned_warm),
            )
            .target(rss_pebble_target(pebble::RSS_100_MIB)),
            Row::memory(
                &format!("Warm RSS, {n} services running"),
                &rss(&rounds.running_warm),
            )
            .pebble(pebble::RSS_100_MIB)
            .target(rss_pebble_target(pebble::RSS_100_MIB)),
            Row::distribution(
                "Launch → socket answers, 0 services",
                Unit::Millis,
                &launch_empty,
            )
            .pebble(pebble::LAUNCH_S)
            .target(Target::below(pebble::LAUNCH_S)),
            Row::distribution(
                &format!("Launch → socket answers, {n} services in plan"),
                Unit::Millis,
                &launch_large,
            )
            .target(Target::below(pebble::LAUNCH_S)),
            details
                .services_running
                .row(&format!(
                    "GET /v1/services, {n} running, new connection each"
                ))
                .pebble(pebble::GET_SERVICES_S)
                .target(Target::below(pebble::GET_SERVICES_S)),
            details
                .plan_running
                .row(&format!(
                    "GET /v1/plan?format=yaml, {n} running, new connection each"
                ))
                .pebble(pebble::GET_PLAN_S)
                .target(Target::below(pebble::GET_PLAN_S)),
            details
                .services_planned
                .row(&format!("GET /v1/services, {n} not started"))
                .target(Target::below(pebble::GET_SERVICES_S)),
            details
                .plan_planned
                .row(&format!("GET /v1/plan?format=yaml, {n} not started"))
                .target(Target::below(pebble::GET_PLAN_S)),
            Row::distribution(
                &format!("Replan {n} independent services → all active, every process running"),
                Unit::Seconds,
                &rounds.all_active,
            )
            .pebble(pebble::REPLAN_100_S)
            .target(Target::below(REPLAN_TARGET_S)),
            Row::distribution(
                &format!("Replan {n} independent services → change ready"),
                Unit::Seconds,
                &rounds.change_ready,
            )
            .pebble(pebble::REPLAN_100_S)
            .target(Target::below(REPLAN_TARGET_S)),
            Row::distribution(
                "Start one service → change ready",
                Unit::Seconds,
                &details.start_one,
            )
            .pebble(pebble::START_ONE_S)
            .target(Target::below(pebble::START_ONE_S)),
            Row::single(
                &format!(
                    "CPU time while idle {} s, {n} services running",
                    args.idle_cpu_secs
                ),
                Unit::Millis,
                secs(details.idle_cpu),
            ),
            details.metrics_running.row(&format!(
                "GET /v1/metrics, {n} running, new connection each (accounting read at most once a second)"
            )),
            details.metrics_fresh.row(&format!(
                "GET /v1/metrics, {n} running, {FRESH_METRICS} requests {} s apart (every one reads all {n} services)",
                FRESH_GAP.as_secs_f64()
            )),
            Row::single(
                &format!(
                    "CPU time while idle {} s, {n} services running, after the metrics requests",
                    args.idle_cpu_secs
                ),
                Unit::Millis,
                secs(details.idle_cpu_after_metrics),
            ),
            Row::distribution(
                &format!("SIGTERM → daemon exit, {n} services running"),
                Unit::Millis,
                &rounds.stop_all,
            ),
        ];
        let memory = report::memory_table(&[
            ("0 services, idle", &empty_idle),
            ("0 services, warm", &empty_warm),
            (
                &format!("{n} services in plan, not started, idle"),
                &rounds.planned_idle,
            ),
            (
                &format!("{n} services in plan, not started, warm"),
                &rounds.planned_warm,
            ),
            (
                &format!("{n} services running, after the replan"),
                &rounds.running_idle,
            ),
            (&format!("{n} services running, warm"), &rounds.running_warm),
        ]);
        Ok((rows, memory, notes))
    }

    /// `GET /v1/services` with `--scale` services in the plan, not started: one daemon per
    /// size, and the time each further service adds between the smallest and largest size.
    async fn scale(&self) -> Result<Vec<Row>> {
        let mut sizes = self.args.scale.clone();
        sizes.sort_unstable();
        sizes.dedup();
        let mut rows = Vec::new();
        let mut medians = Vec::new();
        for &n in &sizes {
            rows.extend(self.launch_at_scale(n).await?);
            eprintln!("==> GET /v1/services with {n} services in the plan");
            let daemon = self.launch(Some(&sleepers_layer(n, &self.token))).await?;
            let listed = daemon.client().services(&[]).await?.len();
            ensure!(
                listed == n,
                "the daemon lists {listed} services, expected {n}"
            );
            let series = self.latency(&daemon, "/v1/services").await?;
            self.stop(daemon)?;
            medians.push((n, series.samples.median().as_secs_f64()));
            let mut row = series.row(&format!("GET /v1/services, {n} not started"));
            if let Some(pebble) = pebble::get_services_not_started_s(n) {
                row = row.pebble(pebble).target(Target::at_most(pebble / 2.0));
            }
            rows.push(row);
        }
        if let (Some(&(low, low_s)), Some(&(high, high_s))) = (medians.first(), medians.last())
            && high > low
        {
            let per_service = |low_s: f64, high_s: f64| (high_s - low_s) / (high - low) as f64;
            let mut row = Row::single(
                &format!(
                    "GET /v1/services: time each further service adds, {low} → {high} \
                     (difference of the medians)"
                ),
                Unit::Micros,
                per_service(low_s, high_s),
            );
            if let (Some(p_low), Some(p_high)) = (
                pebble::get_services_not_started_s(low),
                pebble::get_services_not_started_s(high),
            ) {
                row = row.pebble(per_service(p_low, p_high));
            }
            rows.push(row);
        }
        Ok(rows)
    }

    /// Launch → socket answers with `n` services in the plan, `--launches` times; with
    /// `--pebble`, Pebble's launches alternate with cobble's and the row compares the
    /// medians (target: at most 0.4 of Pebble's).
    async fn launch_at_scale(&self, n: usize) -> Result<Vec<Row>> {
        eprintln!("==> launch with {n} services in the plan");
        let layer = sleepers_layer(n, &self.token);
        let mut cobble = Samples::default();
        let mut pebble = Samples::default();
        for _ in 0..self.args.launches {
            cobble.push(self.time_launch(&self.cobble, &layer).await?);
            if let Some(binary) = &self.args.pebble {
                pebble.push(self.time_launch(binary, &layer).await?);
            }
        }
        let what = format!("Launch → socket answers, {n} services in plan");
        let mut row = Row::distribution(&what, Unit::Millis, &cobble);
        if self.args.pebble.is_some() {
            let theirs = pebble.median().as_secs_f64();
            row = row.pebble(theirs).target(Target::at_most(0.4 * theirs));
        }
        Ok(vec![row])
    }

    /// One launch of `binary` on `layer`, until its socket answers; then stopped.
    async fn time_launch(&self, binary: &Path, layer: &str) -> Result<Duration> {
        let mut daemon = Daemon::spawn(binary, Some(layer), &self.token)?;
        let took = daemon
            .wait_answer(self.poll_launch(), ANSWER_TIMEOUT)
            .await?;
        self.stop(daemon)?;
        Ok(took)
    }

    /// Spawns a daemon and waits until it answers.
    async fn launch(&self, layer: Option<&str>) -> Result<Daemon> {
        let mut daemon = Daemon::spawn(&self.cobble, layer, &self.token)?;
        daemon
            .wait_answer(self.poll_launch(), ANSWER_TIMEOUT)
            .await?;
        Ok(daemon)
    }

    /// Like [`Bench::launch`], in a cgroup of the daemon's own where the harness can make
    /// one, for memory readings.
    async fn launch_measured(&self, layer: Option<&str>) -> Result<Daemon> {
        let cgroup = match &self.cgroups {
            Ok(parent) => {
                let made = self.cgroups_made.get();
                self.cgroups_made.set(made + 1);
                Some(cgroup::Cgroup::create(
                    parent,
                    &format!("cobble-bench-{}-{made}", self.token),
                )?)
            }
            Err(_) => None,
        };
        let mut daemon = Daemon::spawn_in(&self.cobble, layer, &self.token, cgroup)?;
        daemon
            .wait_answer(self.poll_launch(), ANSWER_TIMEOUT)
            .await?;
        Ok(daemon)
    }

    /// Stops a daemon; fails if it did not exit cleanly or left processes behind.
    fn stop(&self, daemon: Daemon) -> Result<Duration> {
        daemon.stop_clean()
    }

    fn poll_launch(&self) -> Duration {
        Duration::from_micros(self.args.poll_launch_us)
    }

    async fn settle(&self) {
        tokio::time::sleep(Duration::from_millis(self.args.settle_ms)).await;
    }

    /// Sends [`WARM_ROUNDS`] rounds of [`WARM_PATHS`], each on a new connection.
    async fn warm_up(&self, daemon: &Daemon) -> Result<()> {
        let dir = daemon.dir().to_string_lossy().into_owned();
        let paths: Vec<String> = WARM_PATHS
            .iter()
            .map(|p| {
                p.replace("{service}", &self.names[0])
                    .replace("{dir}", &dir)
            })
            .collect();
        for _ in 0..WARM_ROUNDS {
            for path in &paths {
                let response = daemon.client().raw_request(Method::GET, path, None).await?;
                // /v1/health may answer 502; it is a typical request all the same.
                ensure!(
                    response.status_code == 200 || path == "/v1/health",
                    "GET {path} answered {}: {}",
                    response.status_code,
                    String::from_utf8_lossy(&response.body)
                );
            }
        }
        Ok(())
    }

    /// Launches `--launches` daemons one after another and times each until it answers.
    /// Also returns in how many launches the daemon did not catch SIGTERM yet at that moment.
    async fn launch_times(&self, layer: Option<&str>) -> Result<(Samples, usize)> {
        let mut samples = Samples::default();
        let mut early = 0;
        for _ in 0..self.args.launches {
            let mut daemon = Daemon::spawn(&self.cobble, layer, &self.token)?;
            samples.push(
                daemon
                    .wait_answer(self.poll_launch(), ANSWER_TIMEOUT)
                    .await?,
            );
            if !daemon.catches_sigterm()? {
                early += 1;
            }
            self.stop(daemon)?;
        }
        Ok((samples, early))
    }

    /// One daemon with the large plan: memory idle and warm before and after a timed replan,
    /// and, in the first round, latencies, idle CPU and single starts.
    async fn round(&self, rounds: &mut Rounds, first: bool) -> Result<Option<Details>> {
        let daemon = self.launch_measured(Some(&self.layer)).await?;
        let client = daemon.client();
        let n = self.args.services;
        self.settle().await;
        rounds.planned_idle.push(daemon.memory()?);
        let listed = client.services(&[]).await?;
        ensure!(
            listed.len() == n,
            "the daemon lists {} services, expected {n}",
            listed.len()
        );
        self.warm_up(&daemon).await?;
        self.settle().await;
        rounds.planned_warm.push(daemon.memory()?);

        let planned = if first {
            Some((
                self.latency(&daemon, "/v1/services").await?,
                self.latency(&daemon, "/v1/plan?format=yaml").await?,
            ))
        } else {
            None
        };

        let (all_active, change_ready) = self.replan(&daemon, client).await?;
        eprintln!(
            "    replan: all active after {:.3} s, change ready after {:.3} s",
            all_active.as_secs_f64(),
            change_ready.as_secs_f64()
        );
        rounds.all_active.push(all_active);
        rounds.change_ready.push(change_ready);
        self.settle().await;
        rounds.running_idle.push(daemon.memory()?);
        self.warm_up(&daemon).await?;
        self.settle().await;
        rounds.running_warm.push(daemon.memory()?);

        let details = match planned {
            Some((services_planned, plan_planned)) => {
                let idle = Duration::from_secs(self.args.idle_cpu_secs);
                let before = daemon.cpu_time()?;
                tokio::time::sleep(idle).await;
                let idle_cpu = daemon.cpu_time()?.saturating_sub(before);
                let services_running = self.latency(&daemon, "/v1/services").await?;
                let plan_running = self.latency(&daemon, "/v1/plan?format=yaml").await?;
                let metrics_running = self.latency(&daemon, "/v1/metrics").await?;
                let metrics_fresh = self
                    .spaced_latency(&daemon, "/v1/metrics", FRESH_METRICS, FRESH_GAP)
                    .await?;
                self.settle().await;
                let before = daemon.cpu_time()?;
                tokio::time::sleep(idle).await;
                let idle_cpu_after_metrics = daemon.cpu_time()?.saturating_sub(before);
                Some(Details {
                    services_planned,
                    plan_planned,
                    idle_cpu,
                    services_running,
                    plan_running,
                    metrics_running,
                    metrics_fresh,
                    idle_cpu_after_metrics,
                    start_one: self.start_one(client).await?,
                })
            }
            None => None,
        };
        rounds.stop_all.push(self.stop(daemon)?);
        Ok(details)
    }

    /// Times `--requests` sequential GETs, each on a new connection, and the daemon's CPU
    /// time across them.
    /// `count` requests `gap` apart (more than the daemon's one-second accounting interval,
    /// so every `GET /v1/metrics` reads every service anew), with the daemon's CPU time per
    /// request (the idle gaps included, which cost nothing when nothing runs in them).
    async fn spaced_latency(
        &self,
        daemon: &Daemon,
        path: &str,
        count: u32,
        gap: Duration,
    ) -> Result<Series> {
        eprintln!("    {count} x GET {path}, {} s apart", gap.as_secs_f64());
        let client = daemon.client();
        let mut samples = Samples::default();
        tokio::time::sleep(gap).await;
        let cpu_before = daemon.cpu_time()?;
        for _ in 0..count {
            let started = Instant::now();
            let response = client.raw_request(Method::GET, path, None).await?;
            samples.push(started.elapsed());
            ensure!(
                response.status_code == 200,
                "GET {path} answered {}",
                response.status_code
            );
            tokio::time::sleep(gap).await;
        }
        let cpu = daemon.cpu_time()?.saturating_sub(cpu_before);
        Ok(Series {
            cpu_per_request: cpu / count,
            samples,
        })
    }

    async fn latency(&self, daemon: &Daemon, path: &str) -> Result<Series> {
        eprintln!("    {} x GET {path}", self.args.requests);
        let client = daemon.client();
        let mut samples = Samples::default();
        let mut cpu_before = Duration::ZERO;
        for i in 0..WARMUP_REQUESTS + self.args.requests {
            if i == WARMUP_REQUESTS {
                cpu_before = daemon.cpu_time()?;
            }
            let started = Instant::now();
            let response = client.raw_request(Method::GET, path, None).await?;
            let took = started.elapsed();
            ensure!(
                response.status_code == 200,
                "GET {path} answered {}: {}",
                response.status_code,
                String::from_utf8_lossy(&response.body)
            );
            if i >= WARMUP_REQUESTS {
                samples.push(took);
            }
        }
        let cpu = daemon.cpu_time()?.saturating_sub(cpu_before);
        Ok(Series {
            cpu_per_request: cpu / u32::try_from(self.args.requests).unwrap_or(u32::MAX),
            samples,
        })
    }
    /// Replans and returns (time until every service is active and its process runs, time
    /// until the change is ready), both from just before the request.
    async fn replan(&self, daemon: &Daemon, client: &Client) -> Result<(Duration, Duration)> {
        let started = Instant::now();
        let id = client.replan().await?;
        let all_active = async {
            let poll = Duration::from_micros(self.args.poll_replan_us);
            loop {
                let services = client.services(&[]).await?;
                // A service whose spawn is under way already reports `active`: count the
                // processes too, so the row is the time until every one of them runs.
                if services.len() == self.names.len()
                    && services.iter().all(|s| s.current == "active")
                    && daemon.children_running("sleep") >= self.names.len()
                {
                    return Ok::<_, anyhow::Error>(started.elapsed());
                }
                if started.elapsed() > CHANGE_TIMEOUT {
                    bail!("services not all active after {CHANGE_TIMEOUT:?}");
                }
                tokio::time::sleep(poll).await;
            }
        };
        let change_ready = async {
            let change = client.wait_change(&id, Some(CHANGE_TIMEOUT)).await?;
            ensure!(
                change.status == "Done",
                "replan ended {}: {}",
                change.status,
                change.err
            );
            Ok(started.elapsed())
        };
        let (all_active, change_ready) = tokio::join!(all_active, change_ready);
        Ok((all_active?, change_ready?))
    }

    /// Stops the first service, then times starting it until its change is ready.
    async fn start_one(&self, client: &Client) -> Result<Samples> {
        let name = vec![self.names[0].clone()];
        let mut samples = Samples::default();
        for _ in 0..self.args.starts {
            let stop = client.stop(&name).await?;
            let change = client.wait_change(&stop, Some(CHANGE_TIMEOUT)).await?;
            ensure!(change.status == "Done", "stop ended {}", change.status);

            let started = Instant::now();
            let id = client.start(&name).await?;
            let change = client.wait_change(&id, Some(CHANGE_TIMEOUT)).await?;
            let took = started.elapsed();
            ensure!(
                change.status == "Done",
                "start ended {}: {}",
                change.status,
                change.err
            );
            samples.push(took);
        }
        Ok(samples)
    }
}
