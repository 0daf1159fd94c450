//! The checks group: what health checks cost the daemon, and whether they make it write.
//!
//! Each case is a fresh daemon whose only layer holds `N` checks with `period: 1s`. After a
//! warm-up (the checks' first runs and their `perform-check` changes), the harness measures
//! over one window, all at once:
//!
//! - the daemon's CPU time (utime + stime of `/proc/PID/stat`), as a share of one core, and
//!   the CPU time of the children it reaped (exec probes);
//! - `GET /v1/health` latency: one request every `--health-interval-ms`, sequential, each on a
//!   new connection;
//! - how often the state was written: a second thread stats `$PEBBLE/.pebble.state` and its
//!   journal every [`STATE_POLL`] and counts changes of inode, size, mtime or ctime (the
//!   daemon appends a record to the journal, or now and then renames a new state file into
//!   place, at most once per 100 ms, so a 5 ms poll sees every write);
//! - at the end, `VmRSS` and the checks' own counters from `GET /v1/checks`.
//!
//! The first case has no checks at all, so the health requests' own share of the daemon's
//! CPU can be subtracted. TCP checks dial a loopback listener that the harness opens (a third thread accepts and
//! drops the connections), so 1000 checks a second do not mean 1000 process spawns a second.

use std::fs;
use std::io::ErrorKind;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use tokio::time::MissedTickBehavior;

use crate::daemon::{Daemon, Rss};
use crate::report::{cpu_share, millis, plain_table, rss_mib};
use crate::stats::Samples;

/// How often the state file is looked at.
const STATE_POLL: Duration = Duration::from_millis(5);
/// The backlog of the loopback listener: 1000 checks may dial it in the same millisecond.
const LISTEN_BACKLOG: u32 = 4096;
/// The failure threshold of every check.
pub(crate) const THRESHOLD: u32 = 3;

/// What the checks group runs.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// The numbers of TCP checks, one case each.
    pub tcp_counts: Vec<usize>,
    /// The number of exec checks (`true`) in the exec case; 0 skips it.
    pub exec_count: usize,
    /// The measurement window of each case.
    pub window: Duration,
    /// The pause after launch before the window opens.
    pub warmup: Duration,
    /// The pause between `GET /v1/health` requests.
    pub health_interval: Duration,
    /// The pause between attempts to reach a launching daemon.
    pub poll_launch: Duration,
}

/// The probe of a case's passing checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Probe {
    /// `tcp: {host: 127.0.0.1, port}` against the harness's listener.
    Tcp(u16),
    /// `exec: {command: "true"}`.
    ExecTrue,
}

/// A layer of `count` passing checks named `chk-0000`..., each with `period: 1s`, plus, when
/// `failing`, one `exec: {command: "false"}` check named `failing` that fails every run.
fn checks_layer(count: usize, probe: Probe, failing: bool) -> String {
    let mut yaml = String::from("summary: cobble-bench checks\nchecks:\n");
    let header = |yaml: &mut String, name: &str| {
        yaml.push_str(&format!(
            "  {name}:\n    override: replace\n    period: 1s\n    timeout: 500ms\n    \
             threshold: {THRESHOLD}\n"
        ));
    };
    for i in 0..count {
        header(&mut yaml, &check_name(i));
        match probe {
            Probe::Tcp(port) => {
                yaml.push_str(&format!(
                    "    tcp:\n      host: 127.0.0.1\n      port: {port}\n"
                ));
            }
            Probe::ExecTrue => yaml.push_str("    exec:\n      command: \"true\"\n"),
        }
    }
    if failing {
        header(&mut yaml, "failing");
        yaml.push_str("    exec:\n      command: \"false\"\n");
    }
    yaml
}

/// The name of the `i`th check of [`checks_layer`].
fn check_name(i: usize) -> String {
    format!("chk-{i:04}")
}

/// What one case measured.
struct Measured {
    label: String,
    window: Duration,
    cpu: Duration,
    children_cpu: Duration,
    rss: Rss,
    health: Samples,
    unhealthy: usize,
    writes_warmup: u64,
    writes: u64,
    checks_up: usize,
    checks: usize,
    failures: u64,
}

/// Runs the checks group and returns its Markdown section body (table and notes).
pub(crate) async fn run(cobble: &Path, token: &str, settings: &Settings) -> Result<String> {
    let listener = Listener::open()?;
    let port = listener.port;
    // The baseline: the same health requests against a daemon with no checks at all.
    let mut cases = vec![("No checks (the health requests alone)".to_string(), None, 0)];
    for &n in &settings.tcp_counts {
        cases.push((
            format!("{n} tcp checks, all passing"),
            Some(checks_layer(n, Probe::Tcp(port), false)),
            n,
        ));
    }
    if settings.exec_count > 0 {
        let n = settings.exec_count;
        cases.push((
            format!("{n} exec checks (`true`), all passing"),
            Some(checks_layer(n, Probe::ExecTrue, false)),
            n,
        ));
    }
    if let Some(&n) = settings.tcp_counts.first() {
        cases.push((
            format!("{n} tcp checks + 1 exec check failing every run (threshold {THRESHOLD})"),
            Some(checks_layer(n, Probe::Tcp(port), true)),
            n + 1,
        ));
    }
    let mut results = Vec::new();
    for (label, layer, expected) in cases {
        eprintln!(
            "==> checks: {label} ({} s window)",
            settings.window.as_secs()
        );
        results.push(measure(cobble, token, settings, label, layer.as_deref(), expected).await?);
    }
    let accepted = listener.close();
    Ok(render(&results, settings, accepted))
}

/// Launches a daemon with `layer` and measures it over one window.
async fn measure(
    cobble: &Path,
    token: &str,
    settings: &Settings,
    label: String,
    layer: Option<&str>,
    expected: usize,
) -> Result<Measured> {
    let mut daemon = Daemon::spawn(cobble, layer, token)?;
    let writes = WriteCounter::start(daemon.dir().join(".pebble.state"));
    daemon
        .wait_answer(settings.poll_launch, Duration::from_secs(10))
        .await?;
    tokio::time::sleep(settings.warmup).await;
    let client = daemon.client();

    let writes_before = writes.count();
    let cpu_before = daemon.cpu_time()?;
    let children_before = daemon.children_cpu_time()?;
    let opened = Instant::now();
    let mut health = Samples::default();
    let mut unhealthy = 0;
    let mut ticker = tokio::time::interval(settings.health_interval);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    while opened.elapsed() < settings.window {
        ticker.tick().await;
        let started = Instant::now();
        let healthy = client.health("", &[]).await?;
        health.push(started.elapsed());
        if !healthy {
            unhealthy += 1;
        }
    }
    let window = opened.elapsed();
    let cpu = daemon.cpu_time()?.saturating_sub(cpu_before);
    let children_cpu = daemon.children_cpu_time()?.saturating_sub(children_before);
    let writes_after = writes.count();
    let rss = daemon.rss()?;
    let checks = client.checks("", &[]).await?;
    let _ = writes.stop();
    daemon.stop_clean()?;

    let measured = Measured {
        label,
        window,
        cpu,
        children_cpu,
        rss,
        health,
        unhealthy,
        writes_warmup: writes_before,
        writes: writes_after - writes_before,
        checks_up: checks.iter().filter(|c| c.status == "up").count(),
        checks: checks.len(),
        failures: checks.iter().map(|c| c.failures).sum(),
    };
    ensure!(
        measured.checks == expected,
        "the daemon lists {} checks, expected {expected}",
        measured.checks
    );
    eprintln!(
        "    cpu {}, {} health requests, {} state writes ({} in warm-up), {}/{} up",
        cpu_share(measured.cpu, measured.window),
        measured.health.len(),
        measured.writes,
        measured.writes_warmup,
        measured.checks_up,
        measured.checks
    );
    Ok(measured)
}

/// The section: one table row per case, then notes.
fn render(results: &[Measured], settings: &Settings, accepted: u64) -> String {
    let rows: Vec<Vec<String>> = results
        .iter()
        .map(|m| {
            let per_min = m.writes as f64 * 60.0 / m.window.as_secs_f64();
            vec![
                m.label.clone(),
                cpu_share(m.cpu, m.window),
                cpu_share(m.children_cpu, m.window),
                rss_mib(m.rss),
                millis(m.health.median()),
                millis(m.health.p99()),
                millis(m.health.max()),
                m.health.len().to_string(),
                format!("{} ({per_min:.1}/min)", m.writes),
                format!("{}/{}", m.checks_up, m.checks),
            ]
        })
        .collect();
    let mut out = plain_table(
        &[
            "Case (period 1 s)",
            "Daemon CPU (% of a core)",
            "Reaped children CPU",
            "VmRSS (anon + file)",
            "GET /v1/health median",
            "p99",
            "max",
            "n",
            "State-file writes in window",
            "Checks up at end",
        ],
        &rows,
    );
    out.push_str(&format!(
        "\nWindow {:.1} s per case after {} s of warm-up; one `GET /v1/health` every {} ms, \
         each on a new connection. The loopback listener accepted {accepted} connections in \
         all.\n",
        results
            .first()
            .map(|m| m.window.as_secs_f64())
            .unwrap_or_default(),
        settings.warmup.as_secs(),
        settings.health_interval.as_millis(),
    ));
    for m in results {
        out.push_str(&format!(
            "\n- {}: {} state-file writes during warm-up, {} unhealthy answers, {} failures \
             counted by the checks at the end.",
            m.label, m.writes_warmup, m.unhealthy, m.failures
        ));
    }
    out.push('\n');
    out
}

/// A thread that counts replacements of one file by polling its metadata.
struct WriteCounter {
    count: Arc<AtomicU64>,
    done: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

/// What identifies one version of the state file.
type Version = Option<(u64, u64, i64, i64, i64, i64)>;

fn version(path: &Path) -> Version {
    let m = fs::metadata(path).ok()?;
    Some((
        m.ino(),
        m.size(),
        m.mtime(),
        m.mtime_nsec(),
        m.ctime(),
        m.ctime_nsec(),
    ))
}

impl WriteCounter {
    /// Starts counting writes of the state file `path` and of its journal (a group commit
    /// appends a record there rather than replacing the file); the state file's first
    /// appearance counts as a write.
    fn start(path: PathBuf) -> WriteCounter {
        let count = Arc::new(AtomicU64::new(0));
        let done = Arc::new(AtomicBool::new(false));
        let mut journal = path.clone().into_os_string();
        journal.push(".journal");
        let journal = PathBuf::from(journal);
        let thread = {
            let (count, done) = (count.clone(), done.clone());
            std::thread::spawn(move || {
                let both = || (version(&path), version(&journal));
                let mut last = both();
                if last.0.is_some() {
                    count.fetch_add(1, Ordering::Relaxed);
                }
                while !done.load(Ordering::Relaxed) {
                    std::thread::sleep(STATE_POLL);
                    let now = both();
                    if now != last && now.0.is_some() {
                        count.fetch_add(1, Ordering::Relaxed);
                    }
                    last = now;
                }
            })
        };
        WriteCounter {
            count,
            done,
            thread,
        }
    }

    fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    fn stop(self) -> u64 {
        self.done.store(true, Ordering::Relaxed);
        let _ = self.thread.join();
        self.count.load(Ordering::Relaxed)
    }
}

/// A loopback TCP listener for the tcp checks, served by a thread that accepts and drops.
struct Listener {
    port: u16,
    done: Arc<AtomicBool>,
    accepted: Arc<AtomicU64>,
    thread: JoinHandle<()>,
}

impl Listener {
    fn open() -> Result<Listener> {
        // std's listener has a backlog of 128; tokio's socket lets us ask for more, then the
        // blocking accept loop runs on its own thread, away from the measured requests.
        let socket = tokio::net::TcpSocket::new_v4()?;
        socket.bind(SocketAddr::from(([127, 0, 0, 1], 0)))?;
        let listener: TcpListener = socket.listen(LISTEN_BACKLOG)?.into_std()?;
        listener.set_nonblocking(false)?;
        let port = listener.local_addr()?.port();
        let done = Arc::new(AtomicBool::new(false));
        let accepted = Arc::new(AtomicU64::new(0));
        let thread = {
            let (done, accepted) = (done.clone(), accepted.clone());
            std::thread::spawn(move || {
                while !done.load(Ordering::Relaxed) {
                    match listener.accept() {
                        Ok(_) => {
                            accepted.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) if e.kind() == ErrorKind::Interrupted => {}
                        Err(_) => std::thread::sleep(Duration::from_millis(1)),
                    }
                }
            })
        };
        Ok(Listener {
            port,
            done,
            accepted,
            thread,
        })
    }

    /// Stops the accept loop (waking it with one last connection) and returns how many
    /// connections it accepted.
    fn close(self) -> u64 {
        self.done.store(true, Ordering::Relaxed);
        let _ = TcpStream::connect(("127.0.0.1", self.port)).context("waking the listener");
        let _ = self.thread.join();
        self.accepted.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_layer_has_passing_and_failing_checks() {
        let yaml = checks_layer(2, Probe::Tcp(4242), true);
        assert!(yaml.starts_with("summary: cobble-bench checks\nchecks:\n"));
        assert!(yaml.contains("  chk-0000:\n    override: replace\n    period: 1s\n"));
        assert!(yaml.contains("  chk-0001:\n"));
        assert_eq!(yaml.matches("      port: 4242\n").count(), 2);
        assert!(yaml.contains("  failing:\n"));
        assert!(yaml.contains("      command: \"false\"\n"));

        let exec = checks_layer(1, Probe::ExecTrue, false);
        assert!(exec.contains("      command: \"true\"\n"));
        assert!(!exec.contains("failing"));
    }

    #[test]
    fn write_counter_sees_each_replacement() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(".pebble.state");
        let counter = WriteCounter::start(path.clone());
        for i in 0..3 {
            let tmp = dir.path().join("tmp");
            fs::write(&tmp, format!("{i}")).unwrap();
            fs::rename(&tmp, &path).unwrap();
            std::thread::sleep(STATE_POLL * 4);
        }
        assert_eq!(counter.stop(), 3);
    }
}
