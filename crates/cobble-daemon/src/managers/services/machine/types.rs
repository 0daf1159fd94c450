//! The machine's vocabulary: its timing constants, the policy it decides by, the phases a
//! service goes through, the events it takes and the actions it returns.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::checks::CheckSignals;

/// How long a freshly started process must survive before its start counts as successful.
pub(crate) const OKAY_DELAY: Duration = Duration::from_secs(1);

/// How long a service with `readiness: notify` has to send `READY=1` after it is spawned;
/// one that has not by then has failed to start.
pub(crate) const READY_TIMEOUT: Duration = Duration::from_secs(90);

/// How long to wait after SIGKILL before giving up on a process.
pub(crate) const FAIL_DELAY: Duration = Duration::from_secs(5);

/// The daemon's exit code when an `on-check-failure: shutdown` action stops it.
pub(crate) const CHECK_FAILURE_EXIT_CODE: i32 = 11;

/// File changes within this window after the first one trigger one action.
pub(crate) const FILE_CHANGE_DEBOUNCE: Duration = Duration::from_millis(500);

/// What to do when the process exits (from `on-success` / `on-failure`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ExitAction {
    Restart,
    Shutdown,
    SuccessShutdown,
    FailureShutdown,
    Ignore,
}

impl ExitAction {
    /// The action's name as it appears in layers and messages.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ExitAction::Restart => "restart",
            ExitAction::Shutdown => "shutdown",
            ExitAction::SuccessShutdown => "success-shutdown",
            ExitAction::FailureShutdown => "failure-shutdown",
            ExitAction::Ignore => "ignore",
        }
    }
}

/// The part of a service's configuration the lifecycle depends on.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Policy {
    /// Action after the process exits with code 0.
    pub on_success: ExitAction,
    /// Action after the process exits with a non-zero code.
    pub on_failure: ExitAction,
    /// First backoff delay.
    pub backoff_delay: Duration,
    /// Factor between consecutive backoff delays.
    pub backoff_factor: f64,
    /// Cap of the backoff delay, and how long a process must run before backoff resets.
    pub backoff_limit: Duration,
    /// Time between SIGTERM and SIGKILL when stopping.
    pub kill_delay: Duration,
    /// `on-check-failure`: what a firing of each named check does.
    pub on_check_failure: BTreeMap<String, ExitAction>,
    /// `on-file-change`, without its `ignore` entries: what a change of each path does.
    pub on_file_change: BTreeMap<String, FileAction>,
    /// `requires-checks`: checks that must pass before the process is spawned.
    pub requires_checks: Vec<String>,
    /// `start-grace`: how long after a start a check's failures wait for its first success.
    pub start_grace: Option<Duration>,
    /// `readiness: notify`: a start succeeds when the service sends `READY=1`, not when it
    /// has survived the okay delay.
    pub notify: bool,
    /// `watchdog` (with `readiness: notify`): once ready, the service must say `WATCHDOG=1`
    /// at least once per this interval, or it has failed.
    pub watchdog: Option<Duration>,
    /// `type: oneshot`: a start runs the command to completion, and an exit with code 0
    /// leaves the service completed rather than restarting it.
    pub oneshot: bool,
    /// The one-shots of its `after:`: it is not spawned while one of them runs, nor, for
    /// one it `requires:` too, until that one has completed.
    pub after_oneshots: Vec<OneshotDep>,
}

/// A one-shot a service is ordered after.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OneshotDep {
    /// The one-shot.
    pub name: String,
    /// Whether the service `requires:` it too: then only its completion lets the service
    /// start.
    pub required: bool,
}

/// Where a one-shot stands, as the services ordered after it see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum OneshotState {
    /// Its last run exited with code 0, and it has not been stopped since.
    Completed,
    /// A run is under way, or about to be (waiting, spawning, or named by a change that
    /// will start it).
    Running,
    /// Its last run failed (`exited with code 1`), and it is retrying or left down.
    Failed(String),
    /// Not started, or stopped.
    Inactive,
}

/// The one-shots the supervisor knows of, by name.
pub(crate) type Oneshots = BTreeMap<String, OneshotState>;

impl Policy {
    /// Whether the service's lifecycle depends on checks at all.
    pub(crate) fn uses_checks(&self) -> bool {
        !self.on_check_failure.is_empty() || !self.requires_checks.is_empty()
    }
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            on_success: ExitAction::Restart,
            on_failure: ExitAction::Restart,
            backoff_delay: Duration::from_millis(500),
            backoff_factor: 2.0,
            backoff_limit: Duration::from_secs(30),
            kill_delay: Duration::from_secs(5),
            on_check_failure: BTreeMap::new(),
            on_file_change: BTreeMap::new(),
            requires_checks: Vec::new(),
            start_grace: None,
            notify: false,
            watchdog: None,
            oneshot: false,
            after_oneshots: Vec::new(),
        }
    }
}

/// Signals the machine sends to the service's process group.
pub(crate) use crate::process::GroupSignal;

/// The status reported by `GET /v1/services`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Status {
    Active,
    Inactive,
    Backoff,
    Error,
    /// Spawned, and waiting for the service to say it is ready (`readiness: notify`; a cobble
    /// extension).
    Starting,
    /// Wanted running, but a `requires-paths` path is missing, a `requires-checks` check
    /// does not pass yet or a one-shot it is ordered after has not completed (a cobble
    /// extension; Pebble clients pass unknown statuses through).
    Waiting,
}

impl Status {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Status::Active => "active",
            Status::Inactive => "inactive",
            Status::Backoff => "backoff",
            Status::Error => "error",
            Status::Waiting => "waiting",
            Status::Starting => "starting",
        }
    }
}

/// What an `on-file-change` entry does once its debounce window closes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FileAction {
    /// Restart the service now (no backoff: the change is the fix, not a failure).
    Restart,
    /// Send this signal (a name such as `SIGHUP`) to the main process.
    Signal(String),
}

/// What follows once a terminating process has exited.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AfterExit {
    /// A client stopped it: stopped.
    Stop,
    /// This check's action restarted it: back off while the check is down, then restart.
    CheckRestart(String),
    /// A file change restarted it: spawn again at once.
    Respawn,
    /// It failed to start (it never said it was ready): its `on-failure` action follows.
    Failed,
    /// Its watchdog ran out or it triggered it: its `on-failure` action follows, whatever
    /// code the ended process exits with.
    Watchdog,
}

/// Whether the service is wanted running. Explicit start, restart, replan and autostart want it
/// running; an explicit stop, or an exit whose policy is not to restart, wants it stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wanted {
    Running,
    Stopped,
}

/// Where the service is in its lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Never started by this daemon.
    Idle,
    /// The executor is spawning the process; `Spawned`, `SpawnFailed` or `PathsMissing`
    /// follows. A client's stop meanwhile is applied to whatever the spawn produces.
    Spawning {
        /// Whether this is a backoff restart rather than an explicit start.
        restart: bool,
    },
    /// Alive, within the okay delay of an explicit start; or, for a service that says when
    /// it is ready (`ready_signal`), spawned and not ready yet, for at most
    /// [`READY_TIMEOUT`] (`okay_at`).
    Starting {
        pid: u32,
        okay_at: Instant,
        ready_signal: bool,
    },
    /// Alive and past the okay delay (or restarted after backoff).
    Running { pid: u32 },
    /// SIGTERM sent; SIGKILL follows at `kill_at`.
    Terminating { pid: u32, kill_at: Instant },
    /// SIGKILL sent; give up at `give_up_at`.
    Killing { pid: u32, give_up_at: Instant },
    /// Waiting to restart at `until`.
    Backoff { until: Instant },
    /// Wanted running, but some `requires-paths` are missing
    /// ([`Machine::waiting_for`](super::Machine::waiting_for)) or some `requires-checks` do not
    /// pass ([`Machine::waiting_checks`](super::Machine::waiting_checks)).
    Waiting,
    /// Not running: stopped by request, or ended with nothing more to do.
    Stopped,
    /// A one-shot whose last run exited with code 0: done until it is started again or
    /// stopped (systemd's `RemainAfterExit=yes`).
    Completed,
    /// Exited and its policy left it down (ignore with a failure, or a shutdown action).
    Exited,
}

/// Input to the machine.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Event {
    /// An explicit start with the policy of the configuration being started.
    Start(Policy),
    /// Autostart or replan asks for the service: as [`Event::Start`], except that a
    /// completed one-shot stays completed.
    Ensure(Policy),
    /// An explicit stop.
    Stop,
    /// A start change was aborted by a client.
    AbortStart,
    /// The executor spawned the process.
    Spawned { pid: u32 },
    /// The executor could not spawn the process.
    SpawnFailed { error: String },
    /// The process (group leader) exited with this code.
    Exited { pid: u32, code: i32 },
    /// The process `pid`, whose exit follows, was killed by the kernel rather than by a
    /// signal anyone sent (`killed by the OOM killer at memory-max 64M`).
    KilledBy { pid: u32, cause: String },
    /// Time passed; the machine acts on every deadline at or before `now`.
    Tick,
    /// The checks as they stand now. A check of the service's `on-check-failure` whose
    /// firing number is new fires its action; one that is no longer down is up again; a
    /// waiting service whose `requires-checks` all pass now is spawned.
    Checks(Arc<CheckSignals>),
    /// The one-shots as they stand now: a service waiting for the ones it is ordered after
    /// starts once none holds it back.
    Oneshots(Arc<Oneshots>),
    /// The executor did not spawn because these `requires-paths` are missing.
    PathsMissing { missing: Vec<String> },
    /// A `requires-paths` path the service waits for exists now.
    PathAppeared(String),
    /// The output of the process that just failed named these paths, which do not exist.
    MissingNamed(Vec<String>),
    /// A path the last failure output named as missing appeared: end the backoff now.
    RetryNow,
    /// A watched `on-file-change` path changed.
    FileChanged(FileAction),
    /// The process `pid` (or one of its own) said it is ready (`READY=1`).
    Ready { pid: u32 },
    /// The process `pid` (or one of its own) said something to its watchdog.
    Watchdog { pid: u32, said: WatchdogSaid },
}

/// What a service says to its watchdog (sd_notify(3)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WatchdogSaid {
    /// `WATCHDOG=1`: the keep-alive ping; the next interval starts now.
    Ping,
    /// `WATCHDOG=trigger`: it found itself broken, a failure as a missed ping is.
    Trigger,
    /// `WATCHDOG_USEC=`: the interval for the rest of this run, starting now; zero turns the
    /// watchdog off for this run, as systemd does.
    Interval(Duration),
}

/// The watchdog of one run of a service. Each run starts with the policy's interval; the
/// first interval starts at `READY=1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Watchdog {
    /// The interval of this run: the policy's until the service says another with
    /// `WATCHDOG_USEC=`; `None` once it turned the watchdog off with `WATCHDOG_USEC=0`.
    pub interval: Option<Duration>,
    /// When it said `READY=1`; `None` before, when nothing is watched yet.
    pub ready_at: Option<Instant>,
    /// Its last `WATCHDOG=1` since it was ready.
    pub last_ping: Option<Instant>,
    /// When the current interval started: at `READY=1`, the last ping or the last new
    /// interval.
    pub since: Option<Instant>,
}

impl Watchdog {
    /// The watchdog of a run that has not said it is ready yet.
    pub(crate) fn new(interval: Duration) -> Watchdog {
        Watchdog {
            interval: Some(interval),
            ready_at: None,
            last_ping: None,
            since: None,
        }
    }

    /// When the run has failed unless it pings before: `None` before `READY=1`, once the
    /// service turned the watchdog off, and for an interval without end.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        // An interval too long to add (`WATCHDOG_USEC=` near `u64::MAX`, systemd's infinity)
        // never runs out.
        self.since?.checked_add(self.interval?)
    }
}

/// How a start request ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StartOutcome {
    /// The process survived the okay delay.
    Started,
    /// The service was already starting or running; nothing was done.
    AlreadyStarted,
    /// A one-shot that has completed, asked for by autostart or replan: not run again.
    AlreadyCompleted,
    /// The start failed. `with_output` asks for the service's last output lines in the task log.
    Failed { error: String, with_output: bool },
    /// The service waits for these: missing `requires-paths`, `requires-checks` written
    /// `check "name"`, or one-shots written `one-shot "name" to complete`; it starts once
    /// they exist, pass or have completed.
    Waiting { missing: Vec<String> },
}

/// How a stop request ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StopOutcome {
    Stopped,
    NeverStarted,
    AlreadyStopping,
    AlreadyStopped,
    HadExited,
    Failed(String),
}

/// Output of the machine, performed by the executor in order.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Action {
    /// Spawn the process with the stored configuration and feed back `Spawned`/`SpawnFailed`.
    Spawn,
    /// Signal the process group led by `pid`, and its descendants that left the group.
    Signal { pid: u32, signal: GroupSignal },
    /// The process led by `pid` is done with (exited, or given up on): end whatever is left
    /// of its group and its escaped descendants, so nothing of the old instance survives it.
    EndGroup { pid: u32 },
    /// The main process `pid` exited on its own: end what is left of its instance as a stop
    /// would (SIGTERM, then SIGKILL after `kill_delay`), like systemd's
    /// `KillMode=control-group`. Nothing waits for it: the next start is not held back.
    EndRemains { pid: u32, kill_delay: Duration },
    /// Send a named signal to the main process only (`on-file-change`).
    SignalProcess { pid: u32, signal: String },
    /// Resolve the waiting start requests.
    StartDone(StartOutcome),
    /// Resolve the waiting stop requests.
    StopDone(StopOutcome),
    /// A line the daemon adds to the service's own output log (after `cobble: `), where its
    /// last words are, for a failure no output of its own explains.
    OutputNote(String),
    /// Stop the daemon with this exit code.
    Shutdown(i32),
    /// A line for the daemon log.
    Log(String),
}

/// The check-caused restarts of one failure streak of one check: each waits for the one
/// before it plus the next delay of the service's backoff schedule.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Streak {
    /// Restarts the check caused since it went down.
    pub restarts: u32,
    /// The delay before the next may follow, before it grows again.
    pub delay: Duration,
    /// When the next may happen.
    pub next_at: Instant,
}
