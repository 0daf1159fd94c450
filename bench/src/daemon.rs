//! A `cobble run` daemon under test: a fixture that owns a temporary `$PEBBLE`, the daemon
//! process and a client for its socket, and that leaves nothing running when it goes away.
//!
//! Every daemon (and, through the layer's `environment`, every service it starts) carries
//! [`TOKEN_VAR`] set to the harness run's token. After each daemon stops, [`sweep_leftovers`]
//! looks through `/proc/*/environ` for that token, so a `sleep` that escaped the daemon's
//! orderly shutdown is found, killed and reported rather than silently left behind.

use std::fmt::Write as _;
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use cobble_client::{Client, ClientConfig};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tempfile::TempDir;

use crate::cgroup::Cgroup;

/// The environment variable that marks the daemons and services of one harness run.
pub(crate) const TOKEN_VAR: &str = "COBBLE_BENCH_TOKEN";

/// How long to wait for the daemon to install its SIGTERM handler before signalling it anyway.
const HANDLER_TIMEOUT: Duration = Duration::from_secs(2);

/// How long the daemon may take to stop all services and exit after SIGTERM before it is
/// killed. Cobble's own bound is the longest kill-delay (5 s) plus 5.1 s of grace.
const STOP_TIMEOUT: Duration = Duration::from_secs(15);

/// A layer of `count` independent services that sleep for a day, named `svc-000`...
///
/// The services have no `requires`, `before` or `after`, so nothing forces an order between
/// them: a replan may start them all at once.
pub(crate) fn sleepers_layer(count: usize, token: &str) -> String {
    let mut yaml = String::from("summary: cobble-bench sleepers\nservices:\n");
    for i in 0..count {
        let _ = write!(
            yaml,
            "  {name}:\n    override: replace\n    summary: sleeper {i}\n    \
             command: sleep 100000\n    startup: enabled\n    \
             environment:\n      {TOKEN_VAR}: {token}\n",
            name = service_name(i),
        );
    }
    yaml
}

/// The name of the `i`th service of [`sleepers_layer`].
pub(crate) fn service_name(i: usize) -> String {
    format!("svc-{i:03}")
}

/// A running `cobble run --hold` on a temporary `$PEBBLE`.
///
/// Dropping it stops the daemon (SIGTERM, then SIGKILL if it hangs) and sweeps leftovers;
/// [`Daemon::stop`] does the same and reports what it found.
#[must_use = "dropping a Daemon stops it at once"]
pub(crate) struct Daemon {
    /// The daemon process; `None` once it has been stopped and waited for.
    child: Option<Child>,
    /// Its PID, for `/proc` and signals.
    pid: Pid,
    /// A client for the daemon's unix socket.
    client: Client,
    /// The instant just before the daemon was spawned.
    spawned_at: Instant,
    /// Where the daemon's stdout and stderr go, shown when something fails.
    log_path: PathBuf,
    /// The marker value of [`TOKEN_VAR`] for this harness run.
    token: String,
    /// `$PEBBLE`; removed when the fixture is dropped, after the daemon has stopped.
    dir: TempDir,
    /// The cgroup the daemon runs in, if it has its own; removed after the daemon stopped.
    cgroup: Option<Cgroup>,
}

impl Daemon {
    /// Creates `$PEBBLE` with `layer` (if any) as `layers/001-bench.yaml` and spawns
    /// `cobble run --hold` on it, without waiting for it to answer.
    pub(crate) fn spawn(cobble: &Path, layer: Option<&str>, token: &str) -> Result<Daemon> {
        Daemon::spawn_in(cobble, layer, token, None)
    }

    /// Like [`Daemon::spawn`], and the daemon runs in `cgroup`, which it owns from now on.
    ///
    /// The daemon enters the cgroup before it execs: a small shell writes its own PID to
    /// `cgroup.procs` and then execs cobble in the same process, so every page cobble touches
    /// is charged to the cgroup. The shell's start-up is inside the time since spawn, so
    /// launch times are measured without a cgroup.
    pub(crate) fn spawn_in(
        cobble: &Path,
        layer: Option<&str>,
        token: &str,
        cgroup: Option<Cgroup>,
    ) -> Result<Daemon> {
        Ok(Daemon::launch(cobble, layer, token, cgroup, false, &[])?.0)
    }

    /// Like [`Daemon::spawn`], with more arguments for `run` (`--http ADDRESS`, say).
    pub(crate) fn spawn_with_args(
        cobble: &Path,
        layer: Option<&str>,
        token: &str,
        args: &[&str],
    ) -> Result<Daemon> {
        Ok(Daemon::launch(cobble, layer, token, None, false, args)?.0)
    }

    /// Like [`Daemon::spawn`], as Juju runs it: `--verbose`, with its stdout (where service
    /// output is copied) on a pipe that the caller must drain.
    pub(crate) fn spawn_verbose(
        cobble: &Path,
        layer: Option<&str>,
        token: &str,
    ) -> Result<(Daemon, ChildStdout)> {
        let (daemon, stdout) = Daemon::launch(cobble, layer, token, None, true, &[])?;
        Ok((daemon, stdout.context("no stdout pipe")?))
    }

    fn launch(
        cobble: &Path,
        layer: Option<&str>,
        token: &str,
        cgroup: Option<Cgroup>,
        verbose: bool,
        args: &[&str],
    ) -> Result<(Daemon, Option<ChildStdout>)> {
        let dir = tempfile::Builder::new()
            .prefix("cobble-bench-")
            .tempdir()
            .context("cannot create a temporary $PEBBLE")?;
        let layers = dir.path().join("layers");
        fs::create_dir(&layers).context("cannot create layers directory")?;
        if let Some(yaml) = layer {
            fs::write(layers.join("001-bench.yaml"), yaml).context("cannot write layer")?;
        }
        let socket = dir.path().join(".pebble.socket");
        let log_path = dir.path().join("daemon.log");
        let log = File::create(&log_path).context("cannot create daemon log")?;

        let mut command = match &cgroup {
            None => Command::new(cobble),
            Some(cgroup) => {
                let mut shell = Command::new("/bin/sh");
                shell
                    .args(["-c", r#"echo $$ > "$0/cgroup.procs" && exec "$@""#])
                    .arg(cgroup.path())
                    .arg(cobble);
                shell
            }
        };
        command
            .args(["run", "--hold"])
            .args(args)
            .env("PEBBLE", dir.path())
            .env("PEBBLE_SOCKET", &socket)
            .env(TOKEN_VAR, token)
            .stdin(Stdio::null());
        if verbose {
            command.arg("--verbose").stdout(Stdio::piped());
        } else {
            command.stdout(log.try_clone().context("cannot share daemon log")?);
        }
        command.stderr(log);
        let spawned_at = Instant::now();
        let mut child = command
            .spawn()
            .with_context(|| format!("cannot run {}", cobble.display()))?;
        let stdout = child.stdout.take();
        let pid = Pid::from_raw(i32::try_from(child.id()).context("PID out of range")?);
        Ok((
            Daemon {
                child: Some(child),
                pid,
                client: Client::new(ClientConfig::socket(socket))?,
                spawned_at,
                log_path,
                token: token.to_string(),
                dir,
                cgroup,
            },
            stdout,
        ))
    }

    /// A client for this daemon.
    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    /// Polls `GET /v1/system-info` every `poll` until it succeeds and returns the time since
    /// spawn. Fails if the daemon exits or does not answer within `timeout`.
    ///
    /// The pause between attempts is a blocking sleep on purpose: tokio's timer has a 1 ms
    /// resolution, too coarse for a start-up that takes a few milliseconds, and nothing else
    /// runs on the harness's single thread meanwhile.
    pub(crate) async fn wait_answer(
        &mut self,
        poll: Duration,
        timeout: Duration,
    ) -> Result<Duration> {
        loop {
            if self.client.system_info().await.is_ok() {
                return Ok(self.spawned_at.elapsed());
            }
            if let Some(child) = self.child.as_mut()
                && let Some(status) = child.try_wait()?
            {
                self.child = None;
                bail!("daemon exited early ({status}); log:\n{}", self.log());
            }
            if self.spawned_at.elapsed() > timeout {
                bail!(
                    "daemon did not answer within {timeout:?}; log:\n{}",
                    self.log()
                );
            }
            std::thread::sleep(poll);
        }
    }

    /// The daemon's resident memory now, from `/proc/PID/status`.
    pub(crate) fn rss(&self) -> Result<Rss> {
        let status = fs::read_to_string(format!("/proc/{}/status", self.pid))?;
        let field = |name: &str| -> Result<u64> { kib_field(&status, name, "status") };
        Ok(Rss {
            total_kib: field("VmRSS")?,
            anon_kib: field("RssAnon")?,
            file_kib: field("RssFile")?,
        })
    }

    /// A fuller reading of the daemon's memory: [`Daemon::rss`], the proportional set size
    /// from `/proc/PID/smaps_rollup`, and `memory.current` of its cgroup if it has one.
    pub(crate) fn memory(&self) -> Result<Memory> {
        let rss = self.rss()?;
        let rollup = fs::read_to_string(format!("/proc/{}/smaps_rollup", self.pid))?;
        let field = |name: &str| -> Result<u64> { kib_field(&rollup, name, "smaps_rollup") };
        let cgroup_bytes = self.cgroup.as_ref().map(Cgroup::current).transpose()?;
        Ok(Memory {
            rss,
            pss_kib: field("Pss")?,
            pss_anon_kib: field("Pss_Anon")?,
            pss_file_kib: field("Pss_File")?,
            cgroup_bytes,
        })
    }

    /// Whether the daemon catches SIGTERM yet (its bit in `SigCgt` of `/proc/PID/status`).
    ///
    /// Cobble installs its handler only after its socket answers, so a SIGTERM sent in
    /// between kills it outright, services and all; [`Daemon::stop`] waits for this first.
    pub(crate) fn catches_sigterm(&self) -> Result<bool> {
        let status = fs::read_to_string(format!("/proc/{}/status", self.pid))?;
        let mask = status
            .lines()
            .find_map(|line| line.strip_prefix("SigCgt:"))
            .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
            .context("no SigCgt in /proc/PID/status")?;
        Ok(mask & (1 << (Signal::SIGTERM as i32 - 1)) != 0)
    }

    /// The daemon's `$PEBBLE`.
    pub(crate) fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// How many of the daemon's children run the program `comm` (so have got as far as
    /// exec'ing it), from `/proc/*/stat`.
    pub(crate) fn children_running(&self, comm: &str) -> usize {
        let Ok(entries) = fs::read_dir("/proc") else {
            return 0;
        };
        let parent = self.pid.as_raw();
        entries
            .filter_map(|entry| {
                let name = entry.ok()?.file_name();
                name.to_str()?.parse::<u32>().ok()?;
                fs::read_to_string(Path::new("/proc").join(&name).join("stat")).ok()
            })
            .filter(|stat| {
                // pid (comm) state ppid ...
                let Some((head, tail)) = stat.rsplit_once(')') else {
                    return false;
                };
                let this_comm = head.split_once('(').map_or("", |(_, c)| c);
                let ppid = tail
                    .split_whitespace()
                    .nth(1)
                    .and_then(|p| p.parse::<i32>().ok());
                this_comm == comm && ppid == Some(parent)
            })
            .count()
    }

    /// The daemon's CPU time so far (user plus system, all threads).
    pub(crate) fn cpu_time(&self) -> Result<Duration> {
        // Fields 14 and 15 of proc(5): utime and stime.
        self.stat_time(11, 12)
    }

    /// The CPU time of the daemon's children that it has waited for (cutime plus cstime):
    /// exec checks and services that have exited and been reaped.
    pub(crate) fn children_cpu_time(&self) -> Result<Duration> {
        // Fields 16 and 17 of proc(5): cutime and cstime.
        self.stat_time(13, 14)
    }

    /// The sum of two clock-tick fields of `/proc/PID/stat`, indexed from field 3 (state).
    fn stat_time(&self, first: usize, second: usize) -> Result<Duration> {
        let stat = fs::read_to_string(format!("/proc/{}/stat", self.pid))?;
        // The command name may hold spaces and parentheses; the fields after it may not.
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .context("malformed /proc/PID/stat")?
            .1
            .split_whitespace()
            .collect();
        // `fields[0]` is field 3 of proc(5) (state).
        let ticks = |i: usize| -> Result<u64> {
            fields
                .get(i)
                .and_then(|f| f.parse::<u64>().ok())
                .context("malformed /proc/PID/stat")
        };
        let total = ticks(first)? + ticks(second)?;
        let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)?
            .and_then(|hz| u64::try_from(hz).ok())
            .filter(|&hz| hz > 0)
            .unwrap_or(100);
        Ok(Duration::from_secs_f64(total as f64 / hz as f64))
    }

    /// Stops the daemon with SIGTERM, waits for it to exit (SIGKILL after [`STOP_TIMEOUT`]),
    /// then kills and reports any process of this run that is still alive.
    pub(crate) fn stop(mut self) -> Result<Stopped> {
        self.stop_in_place()
    }

    /// Stops the daemon like [`Daemon::stop`] and fails if it did not exit cleanly or left
    /// processes behind (they have been killed by then). Returns the time it took to exit.
    pub(crate) fn stop_clean(self) -> Result<Duration> {
        let stopped = self.stop()?;
        anyhow::ensure!(
            stopped.leftovers.is_empty(),
            "the daemon left processes behind (now killed): {}",
            stopped.leftovers.join(", ")
        );
        if let Some(status) = stopped.status {
            anyhow::ensure!(status.success(), "the daemon exited with {status}");
        }
        Ok(stopped.took)
    }

    fn stop_in_place(&mut self) -> Result<Stopped> {
        let Some(mut child) = self.child.take() else {
            return Ok(Stopped {
                status: None,
                took: Duration::ZERO,
                leftovers: sweep_leftovers(&self.token),
            });
        };
        let started = Instant::now();
        while started.elapsed() < HANDLER_TIMEOUT && !self.catches_sigterm().unwrap_or(true) {
            std::thread::sleep(Duration::from_micros(200));
        }
        let signalled = Instant::now();
        let _ = kill(self.pid, Signal::SIGTERM);
        let status = loop {
            if let Some(status) = child.try_wait()? {
                break status;
            }
            if signalled.elapsed() > STOP_TIMEOUT {
                let _ = child.kill();
                break child.wait()?;
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        Ok(Stopped {
            status: Some(status),
            took: signalled.elapsed(),
            leftovers: sweep_leftovers(&self.token),
        })
    }

    /// The daemon's output so far.
    fn log(&self) -> String {
        fs::read_to_string(&self.log_path).unwrap_or_default()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if self.child.is_some()
            && let Ok(stopped) = self.stop_in_place()
            && !stopped.leftovers.is_empty()
        {
            eprintln!(
                "warning: killed {} leftover process(es) of {}",
                stopped.leftovers.len(),
                self.dir.path().display()
            );
        }
    }
}

/// A reading of a process's resident memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rss {
    /// `VmRSS`: everything resident, the figure compared with Pebble's.
    pub total_kib: u64,
    /// `RssAnon`: heap, stacks and other private memory of the daemon.
    pub anon_kib: u64,
    /// `RssFile`: pages of the executable and shared libraries mapped in; clean, shared
    /// with other processes running the same files, and reclaimable.
    pub file_kib: u64,
}

/// The value of a `Name:   123 kB` line of a `/proc/PID/` file.
fn kib_field(text: &str, name: &str, file: &str) -> Result<u64> {
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .with_context(|| format!("no {name} in /proc/PID/{file}"))
}

/// A fuller reading of a daemon's memory than [`Rss`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Memory {
    /// What `/proc/PID/status` says.
    pub rss: Rss,
    /// `Pss`: resident pages, each page shared with other processes counted as its share
    /// (libc's pages, mostly); what the daemon adds to the machine's memory use.
    pub pss_kib: u64,
    /// `Pss_Anon`: the anonymous part of `Pss`.
    pub pss_anon_kib: u64,
    /// `Pss_File`: the file-backed part of `Pss`.
    pub pss_file_kib: u64,
    /// `memory.current` of the daemon's cgroup, in bytes: the daemon and its services, with
    /// kernel memory and the page cache of files they wrote.
    pub cgroup_bytes: Option<u64>,
}

/// What stopping a daemon found.
#[derive(Debug)]
pub(crate) struct Stopped {
    /// The daemon's exit status; `None` if it had already been reaped.
    pub status: Option<ExitStatus>,
    /// From SIGTERM until the daemon was reaped.
    pub took: Duration,
    /// Processes carrying the run's token that were still alive, as `PID (comm)`; they have
    /// been sent SIGKILL.
    pub leftovers: Vec<String>,
}

/// Kills every process whose environment holds `TOKEN_VAR=token` and returns them as
/// `PID (comm)`.
pub(crate) fn sweep_leftovers(token: &str) -> Vec<String> {
    let marker = format!("{TOKEN_VAR}={token}");
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|name| name.parse::<i32>().ok())
        else {
            continue;
        };
        // Zombies and other users' processes have no readable environment; skip them.
        let Ok(environ) = fs::read(entry.path().join("environ")) else {
            continue;
        };
        if environ
            .split(|&b| b == 0)
            .any(|var| var == marker.as_bytes())
        {
            let comm = fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            found.push(format!("{pid} ({})", comm.trim()));
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sleepers_layer_names_services_in_order_with_the_token() {
        let yaml = sleepers_layer(2, "t1");
        assert!(yaml.starts_with("summary: cobble-bench sleepers\nservices:\n"));
        assert!(yaml.contains("  svc-000:\n    override: replace\n"));
        assert!(yaml.contains("  svc-001:\n"));
        assert!(!yaml.contains("svc-002"));
        assert_eq!(yaml.matches("command: sleep 100000\n").count(), 2);
        assert_eq!(yaml.matches("      COBBLE_BENCH_TOKEN: t1\n").count(), 2);
    }
}
