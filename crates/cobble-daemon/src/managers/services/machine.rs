//! The per-service lifecycle as a pure state machine.
//!
//! [`Machine::step`] takes the current time and one [`Event`] and returns the [`Action`]s the
//! executor must perform: spawn the process, signal its group, resolve a waiting start or stop
//! request, shut the daemon down. It does no IO and reads no clock, so every transition is
//! table-tested with plain `Instant`s. Timers are not armed anywhere: the machine exposes its
//! next [`Machine::deadline`] and the executor feeds [`Event::Tick`] once that instant passes.
//! Every deadline is re-read from the phase when it fires, so a timer never acts on the
//! state it was armed in; the same holds for checks: the machine is told which checks are
//! down *now* ([`Event::Checks`]) and acts on a firing only while its check is still down.
//!
//! The policy is all here too, so the executor only performs: which paths the service cares
//! about ([`Machine::watched_paths`]) and what a change of one means
//! ([`Machine::path_events`]), what the failure output named as missing, when the leftovers of
//! a stopped process group must go ([`Action::EndGroup`]). Spawning happens off the machine
//! and may take a while; `Spawning` is a real phase that a stop can meet.
//!
//! The phases and their observable texts follow Pebble's service state machine (okay delay,
//! backoff with jitter and reset, SIGTERM then SIGKILL then give up). Where Pebble lets a
//! workload stay dead, the machine is level-triggered instead: a service that is wanted
//! running is always starting, running, backing off with a deadline, or waiting for named
//! paths. Spawn failures back off and retry like quick exits (the start still fails with
//! Pebble's text); a restart whose process survives SIGKILL backs off rather than stopping;
//! a missing `requires-paths` path makes the service wait instead of failing; a path named in
//! failure output, once it appears, ends the backoff early; a check-caused backoff ends when
//! the check is up again; and `on-file-change` actions are coalesced over
//! [`FILE_CHANGE_DEBOUNCE`].
//!
//! Checks gate and pace the service too, each from the signals the check manager publishes
//! ([`CheckSignals`]): a service with `requires-checks` is not spawned until each of those
//! checks passes (it waits, like a missing required path, and spawns the moment the last one
//! passes); `start-grace` holds a check's action after a start until that check has succeeded
//! once since the start or the grace has run out; and the restarts one check causes while it
//! stays down are spaced by the service's backoff schedule, growing until the check is up.

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
}

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
    /// Wanted running, but a `requires-paths` path is missing or a `requires-checks` check
    /// does not pass yet (a cobble extension; Pebble clients pass unknown statuses through).
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
enum AfterExit {
    /// A client stopped it: stopped.
    Stop,
    /// This check's action restarted it: back off while the check is down, then restart.
    CheckRestart(String),
    /// A file change restarted it: spawn again at once.
    Respawn,
    /// It failed to start (it never said it was ready): its `on-failure` action follows.
    Failed,
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
    /// Wanted running, but some `requires-paths` are missing ([`Machine::waiting_for`]) or
    /// some `requires-checks` do not pass ([`Machine::waiting_checks`]).
    Waiting,
    /// Not running: stopped by request, or ended with nothing more to do.
    Stopped,
    /// Exited and its policy left it down (ignore with a failure, or a shutdown action).
    Exited,
}

/// Input to the machine.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Event {
    /// An explicit start with the policy of the configuration being started.
    Start(Policy),
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
}

/// How a start request ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StartOutcome {
    /// The process survived the okay delay.
    Started,
    /// The service was already starting or running; nothing was done.
    AlreadyStarted,
    /// The start failed. `with_output` asks for the service's last output lines in the task log.
    Failed { error: String, with_output: bool },
    /// The service waits for these: missing `requires-paths`, or `requires-checks` written
    /// `check "name"`; it starts once they exist or pass.
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
    /// Stop the daemon with this exit code.
    Shutdown(i32),
    /// A line for the daemon log.
    Log(String),
}

/// The lifecycle of one service.
#[derive(Debug, Clone)]
pub(crate) struct Machine {
    /// The service name, for messages.
    name: String,
    /// Where the lifecycle is.
    phase: Phase,
    /// What a client last asked for.
    wanted: Wanted,
    /// The policy stored at the last explicit start; restarts after backoff keep using it.
    policy: Policy,
    /// Backoffs since the last reset.
    backoff_num: u32,
    /// The last backoff delay (before jitter); zero after a reset.
    backoff_time: Duration,
    /// When a process that is still running resets the backoff; armed at every spawn.
    reset_at: Option<Instant>,
    /// What follows when the terminating process exits.
    after_exit: AfterExit,
    /// The missing `requires-paths` while waiting.
    waiting_for: Vec<String>,
    /// Paths the last failure output named as missing; their appearance ends the backoff.
    hints: Vec<String>,
    /// The checks of `on-check-failure` last seen down, with the firing number acted on.
    checks_down: BTreeMap<String, u64>,
    /// The check whose action caused the current backoff, if one did.
    backoff_check: Option<String>,
    /// A coalesced file-change action and when it is due.
    file_change: Option<(Instant, FileAction)>,
    /// The last stop came from a client; nothing but a client's start runs it again.
    client_stopped: bool,
    /// Exit code of the last process, if any.
    last_exit: Option<i32>,
    /// What killed the last process, when the kernel did ([`Event::KilledBy`]), with its pid.
    exit_cause: Option<(u32, String)>,
    /// Why the last spawn failed, until a spawn succeeds.
    spawn_error: Option<String>,
    /// The checks as last reported.
    checks: Arc<CheckSignals>,
    /// The `requires-checks` that do not pass, while waiting for them.
    waiting_checks: Vec<String>,
    /// When the live process was spawned: the start `start-grace` counts from.
    spawned_at: Option<Instant>,
    /// Per check of `on-check-failure`, the restarts it caused while it stayed down.
    streaks: BTreeMap<String, Streak>,
    /// Checks whose action is held (by the start grace or a streak's spacing) until
    /// [`Machine::hold_until`] has passed; acted on then if still down.
    held: BTreeMap<String, Instant>,
    /// State of the jitter generator (xorshift64*).
    rng: u64,
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

impl Machine {
    /// A machine for a service that has never been started. `seed` drives the backoff jitter.
    pub(crate) fn new(name: impl Into<String>, seed: u64) -> Machine {
        Machine {
            name: name.into(),
            phase: Phase::Idle,
            wanted: Wanted::Stopped,
            policy: Policy::default(),
            backoff_num: 0,
            backoff_time: Duration::ZERO,
            reset_at: None,
            after_exit: AfterExit::Stop,
            waiting_for: Vec::new(),
            hints: Vec::new(),
            checks_down: BTreeMap::new(),
            backoff_check: None,
            file_change: None,
            client_stopped: false,
            last_exit: None,
            exit_cause: None,
            spawn_error: None,
            checks: Arc::default(),
            waiting_checks: Vec::new(),
            spawned_at: None,
            streaks: BTreeMap::new(),
            held: BTreeMap::new(),
            rng: seed | 1,
        }
    }

    pub(crate) fn phase(&self) -> Phase {
        self.phase
    }

    #[cfg(test)]
    pub(crate) fn wanted(&self) -> Wanted {
        self.wanted
    }

    pub(crate) fn backoff_num(&self) -> u32 {
        self.backoff_num
    }

    pub(crate) fn last_exit(&self) -> Option<i32> {
        self.last_exit
    }

    /// Why the last spawn failed, if the spawns since have all failed.
    pub(crate) fn spawn_error(&self) -> Option<&str> {
        self.spawn_error.as_deref()
    }

    /// What killed the last process, when the kernel did.
    pub(crate) fn last_exit_cause(&self) -> Option<&str> {
        self.exit_cause.as_ref().map(|(_, cause)| cause.as_str())
    }

    /// `code N`, with the cause when the kernel killed the process.
    fn exit_text(&self, code: i32) -> String {
        match self.last_exit_cause() {
            Some(cause) => format!("code {code} ({cause})"),
            None => format!("code {code}"),
        }
    }

    /// The missing paths a waiting service waits for.
    pub(crate) fn waiting_for(&self) -> &[String] {
        &self.waiting_for
    }

    /// Paths the last failure output named as missing (while backing off after it).
    pub(crate) fn hints(&self) -> &[String] {
        &self.hints
    }

    /// The `requires-checks` a waiting service waits for.
    pub(crate) fn waiting_checks(&self) -> &[String] {
        &self.waiting_checks
    }

    /// The checks as the machine last saw them.
    pub(crate) fn checks(&self) -> &Arc<CheckSignals> {
        &self.checks
    }

    /// Until when the start grace holds check actions, while it does.
    pub(crate) fn grace_until(&self, now: Instant) -> Option<Instant> {
        let until = self.spawned_at? + self.policy.start_grace?;
        (now < until).then_some(until)
    }

    /// Checks whose action is held, each until when.
    pub(crate) fn held(&self) -> &BTreeMap<String, Instant> {
        &self.held
    }

    /// The restart streaks of the checks that are down.
    pub(crate) fn streaks(&self) -> &BTreeMap<String, Streak> {
        &self.streaks
    }

    /// Every path the service cares about now: the `requires-paths` it waits for, the paths
    /// its failure output named while it backs off, and its `on-file-change` paths while it
    /// is wanted running.
    pub(crate) fn watched_paths(&self) -> impl Iterator<Item = &str> {
        let waiting = self.waiting_for.iter();
        let hints = self
            .hints
            .iter()
            .filter(|_| matches!(self.phase, Phase::Backoff { .. }));
        let files = self
            .policy
            .on_file_change
            .keys()
            .filter(|_| self.wanted == Wanted::Running);
        waiting.chain(hints).chain(files).map(String::as_str)
    }

    /// What the watcher's report on a path means for this service, as events to feed it:
    /// `initial` is the state found when the path was newly watched (which can end a wait,
    /// but is no change of the file), otherwise it changed.
    pub(crate) fn path_events(&self, path: &str, exists: bool, initial: bool) -> Vec<Event> {
        let mut events = Vec::new();
        if exists && self.phase == Phase::Waiting && self.waiting_for.iter().any(|p| p == path) {
            events.push(Event::PathAppeared(path.to_owned()));
        }
        if exists
            && matches!(self.phase, Phase::Backoff { .. })
            && self.hints.iter().any(|p| p == path)
        {
            events.push(Event::RetryNow);
        }
        if let Some(action) = self.policy.on_file_change.get(path).filter(|_| !initial) {
            events.push(Event::FileChanged(action.clone()));
        }
        events
    }

    /// The current backoff delay before jitter (zero before the first backoff).
    pub(crate) fn backoff_time(&self) -> Duration {
        self.backoff_time
    }

    /// The policy stored at the last explicit start.
    pub(crate) fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The check whose failure is restarting the service, while its process is being ended.
    pub(crate) fn restarting_for_check(&self) -> Option<&str> {
        match (&self.phase, &self.after_exit) {
            (Phase::Terminating { .. } | Phase::Killing { .. }, AfterExit::CheckRestart(check)) => {
                Some(check)
            }
            _ => None,
        }
    }

    /// The pid of the live process, if there is one.
    pub(crate) fn pid(&self) -> Option<u32> {
        match self.phase {
            Phase::Starting { pid, .. }
            | Phase::Running { pid }
            | Phase::Terminating { pid, .. }
            | Phase::Killing { pid, .. } => Some(pid),
            _ => None,
        }
    }

    /// Whether a process has been asked for and its pid is not known yet.
    pub(crate) fn is_spawning(&self) -> bool {
        matches!(self.phase, Phase::Spawning { .. })
    }

    /// Whether the process may be signalled through `/v1/signals`.
    pub(crate) fn is_running(&self) -> bool {
        matches!(self.phase, Phase::Starting { .. } | Phase::Running { .. })
    }

    /// The status the API reports. A service that is wanted running is never `inactive`:
    /// while a check's restart ends its process it is `backoff`, as Pebble lists it once the
    /// process has exited (Pebble lists the moment before as `inactive`, which tells a client
    /// that polls the service that it was stopped); while a file change's restart does, it
    /// is `active`, for it comes back at once.
    pub(crate) fn status(&self) -> Status {
        match self.phase {
            Phase::Starting {
                ready_signal: true, ..
            } => Status::Starting,
            Phase::Spawning { .. } | Phase::Starting { .. } | Phase::Running { .. } => {
                Status::Active
            }
            Phase::Terminating { .. } | Phase::Killing { .. } => match self.after_exit {
                AfterExit::Stop => Status::Inactive,
                AfterExit::CheckRestart(_) | AfterExit::Failed => Status::Backoff,
                AfterExit::Respawn => Status::Active,
            },
            Phase::Idle | Phase::Stopped => Status::Inactive,
            Phase::Backoff { .. } => Status::Backoff,
            Phase::Exited => Status::Error,
            Phase::Waiting => Status::Waiting,
        }
    }

    /// The next instant at which the machine wants a `Tick`.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        let phase = match self.phase {
            Phase::Starting { okay_at, .. } => Some(okay_at),
            Phase::Running { .. } => self.reset_at,
            Phase::Terminating { kill_at, .. } => Some(kill_at),
            Phase::Killing { give_up_at, .. } => Some(give_up_at),
            Phase::Backoff { until } => Some(until),
            _ => None,
        };
        let file_change = self.file_change.as_ref().map(|(at, _)| *at);
        let held = self.held.values().min().copied();
        [phase, file_change, held].into_iter().flatten().min()
    }

    /// Advances the machine by one event.
    pub(crate) fn step(&mut self, now: Instant, event: Event) -> Vec<Action> {
        let mut actions = Vec::new();
        self.catch_up(now, &mut actions);
        match event {
            Event::Start(policy) => self.on_start(policy, &mut actions),
            Event::Stop => self.on_stop(now, &mut actions),
            Event::AbortStart => self.on_abort_start(&mut actions),
            Event::Spawned { pid } => self.on_spawned(now, pid, &mut actions),
            Event::SpawnFailed { error } => self.on_spawn_failed(now, error, &mut actions),
            Event::Exited { pid, code } => self.on_exited(now, pid, code, &mut actions),
            Event::KilledBy { pid, cause } => {
                if self.pid() == Some(pid) {
                    self.exit_cause = Some((pid, cause));
                }
            }
            Event::Tick => {
                self.on_tick(now, &mut actions);
                self.on_file_change_due(now, &mut actions);
                self.release_held(now, &mut actions);
            }
            Event::PathsMissing { missing } => self.on_paths_missing(missing, &mut actions),
            Event::PathAppeared(path) => {
                if self.phase == Phase::Waiting {
                    self.waiting_for.retain(|p| *p != path);
                    if self.waiting_for.is_empty() {
                        // The spawn checks every required path again.
                        self.respawn(&mut actions);
                    }
                }
            }
            Event::MissingNamed(paths) => {
                if matches!(self.phase, Phase::Backoff { .. }) && !paths.is_empty() {
                    actions.push(Action::Log(format!(
                        "Service \"{}\" will retry as soon as {} exists",
                        self.name,
                        paths.join(", ")
                    )));
                    self.hints = paths;
                }
            }
            Event::RetryNow => {
                if matches!(self.phase, Phase::Backoff { .. }) {
                    actions.push(Action::Log(format!(
                        "Service \"{}\" retrying now: a path it was missing appeared",
                        self.name
                    )));
                    self.respawn(&mut actions);
                }
            }
            Event::FileChanged(action) => self.on_file_changed(now, action),
            Event::Checks(signals) => self.on_checks(now, &signals, &mut actions),
            Event::Ready { pid } => self.on_ready(now, pid, &mut actions),
        }
        actions
    }

    /// Spawns again after backoff, waiting or a restart: straight to running, nobody waits
    /// on an okay delay. A file change still pending is moot: the new process reads the
    /// files as they are now (the change that ended a wait for a required path would
    /// otherwise restart the service a moment after it started).
    fn respawn(&mut self, actions: &mut Vec<Action>) {
        self.hints.clear();
        self.backoff_check = None;
        self.file_change = None;
        self.spawn_unless_waiting(true, actions);
    }

    /// Spawns the process, or, while some `requires-checks` do not pass, waits for them
    /// (answering an explicit start that it waits: the start has not failed).
    fn spawn_unless_waiting(&mut self, restart: bool, actions: &mut Vec<Action>) {
        let missing: Vec<String> = self
            .policy
            .requires_checks
            .iter()
            .filter(|check| !self.checks.passing.contains(*check))
            .cloned()
            .collect();
        if missing.is_empty() {
            self.waiting_checks.clear();
            self.phase = Phase::Spawning { restart };
            actions.push(Action::Spawn);
            return;
        }
        if !restart {
            actions.push(Action::StartDone(StartOutcome::Waiting {
                missing: missing.iter().map(|c| format!("check \"{c}\"")).collect(),
            }));
        }
        if self.phase != Phase::Waiting || self.waiting_checks != missing {
            actions.push(Action::Log(format!(
                "Service \"{}\" waiting for {} to succeed",
                self.name,
                quoted_checks(&missing)
            )));
        }
        self.waiting_checks = missing;
        self.phase = Phase::Waiting;
    }

    fn on_start(&mut self, policy: Policy, actions: &mut Vec<Action>) {
        // The configuration is refreshed by every explicit start, even a no-op one.
        self.policy = policy;
        self.client_stopped = false;
        match self.phase {
            Phase::Spawning { .. } | Phase::Starting { .. } | Phase::Running { .. } => {
                self.wanted = Wanted::Running;
                actions.push(Action::StartDone(StartOutcome::AlreadyStarted));
            }
            Phase::Terminating { .. } | Phase::Killing { .. } => {
                let state = if matches!(self.phase, Phase::Killing { .. }) {
                    "killing"
                } else {
                    "terminating"
                };
                actions.push(Action::StartDone(StartOutcome::Failed {
                    error: format!("cannot start service while {state}"),
                    with_output: false,
                }));
            }
            Phase::Idle
            | Phase::Backoff { .. }
            | Phase::Stopped
            | Phase::Exited
            | Phase::Waiting => {
                self.wanted = Wanted::Running;
                self.backoff_num = 0;
                self.backoff_time = Duration::ZERO;
                self.hints.clear();
                self.backoff_check = None;
                self.waiting_for.clear();
                self.file_change = None;
                self.streaks.clear();
                self.held.clear();
                self.spawn_unless_waiting(false, actions);
            }
        }
    }

    fn on_spawned(&mut self, now: Instant, pid: u32, actions: &mut Vec<Action>) {
        let Phase::Spawning { restart } = self.phase else {
            return;
        };
        self.spawn_error = None;
        if self.client_stopped {
            // Stopped while it was being spawned: stop what came of it.
            if !restart {
                actions.push(Action::StartDone(StartOutcome::Failed {
                    error: format!("stopped before the {} okay delay", format_secs(OKAY_DELAY)),
                    with_output: false,
                }));
            }
            self.terminate(now, pid, AfterExit::Stop, actions);
            return;
        }
        self.reset_at = Some(now + self.policy.backoff_limit);
        self.spawned_at = Some(now);
        self.phase = if self.policy.notify {
            // Every run, a restart's too, starts when the service says it is ready.
            Phase::Starting {
                pid,
                okay_at: now + READY_TIMEOUT,
                ready_signal: true,
            }
        } else if restart {
            Phase::Running { pid }
        } else {
            Phase::Starting {
                pid,
                okay_at: now + OKAY_DELAY,
                ready_signal: false,
            }
        };
    }

    /// The service said it is ready: a start waiting for that has succeeded.
    fn on_ready(&mut self, now: Instant, pid: u32, actions: &mut Vec<Action>) {
        let Phase::Starting {
            pid: current,
            ready_signal: true,
            ..
        } = self.phase
        else {
            return;
        };
        if current != pid {
            return;
        }
        actions.push(Action::Log(format!("Service \"{}\" is ready", self.name)));
        self.phase = Phase::Running { pid };
        actions.push(Action::StartDone(StartOutcome::Started));
        // A file change that came while it started is due now that it runs.
        if let Some((at, _)) = &mut self.file_change {
            *at = (*at).min(now);
        }
    }

    fn on_spawn_failed(&mut self, now: Instant, error: String, actions: &mut Vec<Action>) {
        let Phase::Spawning { restart } = self.phase else {
            return;
        };
        self.spawn_error = Some(error.clone());
        if !restart {
            // The start fails with Pebble's text either way.
            actions.push(Action::StartDone(StartOutcome::Failed {
                error: error.clone(),
                with_output: false,
            }));
        }
        if self.client_stopped {
            self.phase = Phase::Stopped;
            actions.push(Action::StopDone(StopOutcome::Stopped));
        } else if self.policy.on_failure == ExitAction::Restart {
            // Pebble gives up here (or, during a backoff restart, sticks in backoff with no
            // timer); a missing binary or directory may well appear, so keep retrying.
            actions.push(Action::Log(format!(
                "Service \"{}\" cannot be started, will retry: {error}",
                self.name
            )));
            self.back_off(now, "on-failure", actions);
        } else {
            self.phase = Phase::Stopped;
            self.wanted = Wanted::Stopped;
        }
    }

    fn on_stop(&mut self, now: Instant, actions: &mut Vec<Action>) {
        self.wanted = Wanted::Stopped;
        self.client_stopped = true;
        self.file_change = None;
        self.streaks.clear();
        self.held.clear();
        match self.phase {
            Phase::Idle => actions.push(Action::StopDone(StopOutcome::NeverStarted)),
            Phase::Terminating { .. } | Phase::Killing { .. } => {
                // A restart in progress becomes a plain stop, but the request does not wait.
                self.after_exit = AfterExit::Stop;
                actions.push(Action::StopDone(StopOutcome::AlreadyStopping));
            }
            Phase::Stopped => actions.push(Action::StopDone(StopOutcome::AlreadyStopped)),
            Phase::Exited => {
                self.phase = Phase::Stopped;
                actions.push(Action::StopDone(StopOutcome::HadExited));
            }
            Phase::Backoff { .. } => {
                self.phase = Phase::Stopped;
                self.hints.clear();
                self.backoff_check = None;
                actions.push(Action::Log(format!(
                    "Service \"{}\" stopped while waiting for backoff",
                    self.name
                )));
                actions.push(Action::StopDone(StopOutcome::Stopped));
            }
            Phase::Waiting => {
                self.phase = Phase::Stopped;
                self.waiting_for.clear();
                self.waiting_checks.clear();
                actions.push(Action::StopDone(StopOutcome::Stopped));
            }
            Phase::Spawning { .. } => {
                // The spawn is under way; its outcome meets the stop (see `on_spawned`), and
                // the stop request is answered then.
            }
            Phase::Starting { pid, .. } | Phase::Running { pid } => {
                if let Phase::Starting { ready_signal, .. } = self.phase {
                    let error = if ready_signal {
                        "stopped before it said it was ready".to_owned()
                    } else {
                        format!("stopped before the {} okay delay", format_secs(OKAY_DELAY))
                    };
                    actions.push(Action::StartDone(StartOutcome::Failed {
                        error,
                        with_output: false,
                    }));
                }
                self.terminate(now, pid, AfterExit::Stop, actions);
            }
        }
    }

    fn on_abort_start(&mut self, actions: &mut Vec<Action>) {
        if let Phase::Starting { pid, .. } = self.phase {
            self.phase = Phase::Stopped;
            self.wanted = Wanted::Stopped;
            self.client_stopped = true;
            actions.push(Action::Signal {
                pid,
                signal: GroupSignal::Kill,
            });
            actions.push(Action::StartDone(StartOutcome::Failed {
                error: "start aborted, sent SIGKILL to process".into(),
                with_output: false,
            }));
        }
    }

    fn on_exited(&mut self, now: Instant, pid: u32, code: i32, actions: &mut Vec<Action>) {
        if self.pid() != Some(pid) {
            return; // a stale exit, e.g. after an aborted start
        }
        self.last_exit = Some(code);
        if self
            .exit_cause
            .as_ref()
            .is_some_and(|(killed, _)| *killed != pid)
        {
            self.exit_cause = None;
        }
        self.reset_at = None;
        self.spawned_at = None;
        // A hold is for a running process; the checks act again on what comes next.
        self.held.clear();
        match self.phase {
            Phase::Starting { .. } | Phase::Running { .. } => {
                let (action, on_type) = self.exit_action(code);
                if matches!(self.phase, Phase::Starting { .. }) {
                    actions.push(Action::StartDone(StartOutcome::Failed {
                        error: format!(
                            "service start attempt: exited quickly with {}, will {}",
                            self.exit_text(code),
                            action.as_str()
                        ),
                        with_output: true,
                    }));
                }
                actions.push(Action::Log(format!(
                    "Service \"{}\" stopped unexpectedly with {}",
                    self.name,
                    self.exit_text(code)
                )));
                // The service is its main process: what it leaves behind goes with it.
                actions.push(Action::EndRemains {
                    pid,
                    kill_delay: self.policy.kill_delay,
                });
                self.apply_exit_action(now, code, action, on_type, actions);
            }
            Phase::Terminating { .. } | Phase::Killing { .. } => {
                actions.push(Action::EndGroup { pid });
                match std::mem::replace(&mut self.after_exit, AfterExit::Stop) {
                    AfterExit::CheckRestart(check) => {
                        actions.push(Action::Log(format!(
                            "Service \"{}\" exited after check failure, restarting",
                            self.name
                        )));
                        self.back_off_for_check(now, check, actions);
                    }
                    AfterExit::Respawn => {
                        actions.push(Action::Log(format!(
                            "Service \"{}\" exited after a file change, restarting",
                            self.name
                        )));
                        self.respawn(actions);
                    }
                    AfterExit::Failed => {
                        let action = self.policy.on_failure;
                        self.apply_exit_action(now, code, action, "on-failure", actions);
                    }
                    AfterExit::Stop => {
                        actions.push(Action::Log(format!("Service \"{}\" stopped", self.name)));
                        self.phase = Phase::Stopped;
                        actions.push(Action::StopDone(StopOutcome::Stopped));
                    }
                }
            }
            _ => {}
        }
    }

    /// After a check's restart, backs off while the check is still down; if it is up again
    /// by now, there is nothing to pace and the service comes back at once.
    fn back_off_for_check(&mut self, now: Instant, check: String, actions: &mut Vec<Action>) {
        if self.checks_down.contains_key(&check) {
            self.back_off(now, "on-check-failure", actions);
            self.backoff_check = Some(check);
        } else {
            actions.push(Action::Log(format!(
                "Service \"{}\" check \"{check}\" is up again, restarting now",
                self.name
            )));
            self.respawn(actions);
        }
    }

    fn exit_action(&self, code: i32) -> (ExitAction, &'static str) {
        if code == 0 {
            (self.policy.on_success, "on-success")
        } else {
            (self.policy.on_failure, "on-failure")
        }
    }

    fn apply_exit_action(
        &mut self,
        now: Instant,
        code: i32,
        action: ExitAction,
        on_type: &str,
        actions: &mut Vec<Action>,
    ) {
        let name = &self.name;
        let action_name = action.as_str();
        let exit_code = match action {
            ExitAction::Restart => {
                self.back_off(now, on_type, actions);
                return;
            }
            ExitAction::Ignore => {
                actions.push(Action::Log(format!(
                    "Service \"{name}\" {on_type} action is \"{action_name}\", not doing anything further"
                )));
                self.phase = if code == 0 {
                    Phase::Stopped
                } else {
                    Phase::Exited
                };
                self.wanted = Wanted::Stopped;
                return;
            }
            ExitAction::Shutdown if code == 0 => 0,
            ExitAction::Shutdown | ExitAction::FailureShutdown => 10,
            ExitAction::SuccessShutdown => 0,
        };
        let kind = if exit_code == 0 { "success" } else { "failure" };
        actions.push(Action::Log(format!(
            "Service \"{name}\" {on_type} action is \"{action_name}\", triggering {kind} shutdown"
        )));
        self.phase = Phase::Exited;
        self.wanted = Wanted::Stopped;
        actions.push(Action::Shutdown(exit_code));
    }

    /// Compares the checks that are down now with the ones last seen: a new firing of a check
    /// in `on-check-failure` performs its action (against the phase as it is now), a check
    /// that is no longer down ends the backoff it caused and its restart streak; a service
    /// waiting for its `requires-checks` is spawned once they all pass.
    fn on_checks(&mut self, now: Instant, signals: &Arc<CheckSignals>, actions: &mut Vec<Action>) {
        self.checks = signals.clone();
        let policy: Vec<(String, ExitAction)> = self
            .policy
            .on_check_failure
            .iter()
            .map(|(check, action)| (check.clone(), *action))
            .collect();
        for (check, action) in policy {
            match signals.firing.get(&check) {
                Some(&number) => {
                    if self.checks_down.insert(check.clone(), number) != Some(number) {
                        self.on_check_failed(now, &check, action, actions);
                    }
                }
                None => {
                    if self.checks_down.remove(&check).is_some() {
                        self.on_check_up(&check, actions);
                    }
                }
            }
        }
        // Checks no longer in the policy are forgotten.
        let policy = &self.policy.on_check_failure;
        self.checks_down
            .retain(|check, _| policy.contains_key(check));
        self.streaks.retain(|check, _| policy.contains_key(check));
        self.held.retain(|check, _| policy.contains_key(check));
        if self.phase == Phase::Waiting && !self.waiting_checks.is_empty() {
            self.respawn(actions);
        }
    }

    /// Until when the action of `check`'s firing is held: by the start grace while the check
    /// has not succeeded since the process started, or by the spacing of its restart streak.
    fn hold_until(&self, now: Instant, check: &str, action: ExitAction) -> Option<Instant> {
        if !matches!(self.phase, Phase::Running { .. }) {
            return None;
        }
        let succeeded_since_start = match (self.spawned_at, self.checks.last_success.get(check)) {
            (Some(start), Some(success)) => *success >= start,
            _ => false,
        };
        let grace = self.grace_until(now).filter(|_| !succeeded_since_start);
        let spacing = self
            .streaks
            .get(check)
            .map(|streak| streak.next_at)
            .filter(|at| action == ExitAction::Restart && now < *at);
        grace.into_iter().chain(spacing).max()
    }

    /// Acts on the held firings whose hold has ended and whose check is still down.
    fn release_held(&mut self, now: Instant, actions: &mut Vec<Action>) {
        let due: Vec<String> = self
            .held
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(check, _)| check.clone())
            .collect();
        for check in due {
            self.held.remove(&check);
            let action = self.policy.on_check_failure.get(&check).copied();
            if let (Some(action), true) = (action, self.checks_down.contains_key(&check)) {
                self.on_check_failed(now, &check, action, actions);
            }
        }
    }

    /// Pebble's `on-check-failure` handling: only a running, backing-off or exited service
    /// reacts; one that is starting, stopping, stopped or never started ignores the failure.
    /// A restart terminates a running process and lets the exit go through backoff (so the
    /// delay grows), waits for a backoff already under way, and backs off an exited service.
    fn on_check_failed(
        &mut self,
        now: Instant,
        check: &str,
        action: ExitAction,
        actions: &mut Vec<Action>,
    ) {
        // Pebble acts only on running, backing-off and exited services. cobble also acts on a
        // service that is down for any reason but a client's stop (an exit its policy did not
        // restart); a starting service is left to its okay delay, a stopped one stays stopped.
        let down_by_policy = self.phase == Phase::Stopped && !self.client_stopped;
        if !down_by_policy
            && !matches!(
                self.phase,
                Phase::Running { .. } | Phase::Backoff { .. } | Phase::Exited | Phase::Waiting
            )
        {
            return;
        }
        if action != ExitAction::Ignore
            && let Some(until) = self.hold_until(now, check, action)
        {
            if self.held.insert(check.to_owned(), until) != Some(until) {
                let why = if self.grace_until(now) == Some(until) {
                    "start-grace"
                } else {
                    "the check's restart backoff"
                };
                actions.push(Action::Log(format!(
                    "Service \"{}\" on-check-failure action for check \"{check}\" held by {why} for {}",
                    self.name,
                    format_secs(until - now)
                )));
            }
            return;
        }
        self.held.remove(check);
        let name = &self.name;
        let on_type = "on-check-failure";
        let action_name = action.as_str();
        match action {
            ExitAction::Ignore => {}
            ExitAction::Shutdown | ExitAction::FailureShutdown => {
                actions.push(Action::Log(format!(
                    "Service \"{name}\" {on_type} action is \"{action_name}\", triggering failure shutdown"
                )));
                actions.push(Action::Shutdown(CHECK_FAILURE_EXIT_CODE));
            }
            ExitAction::SuccessShutdown => {
                actions.push(Action::Log(format!(
                    "Service \"{name}\" {on_type} action is \"{action_name}\", triggering success shutdown"
                )));
                actions.push(Action::Shutdown(0));
            }
            ExitAction::Restart => match self.phase {
                Phase::Running { pid } => {
                    actions.push(Action::Log(format!(
                        "Service \"{name}\" {on_type} action is \"{action_name}\", terminating process before restarting"
                    )));
                    let streak = self.streaks.entry(check.to_owned()).or_insert(Streak {
                        restarts: 0,
                        delay: Duration::ZERO,
                        next_at: now,
                    });
                    streak.restarts += 1;
                    streak.delay = next_backoff(&self.policy, streak.delay);
                    streak.next_at = now + streak.delay;
                    self.terminate(now, pid, AfterExit::CheckRestart(check.to_owned()), actions);
                }
                // Already on its way back: waiting paths or a backoff timer pace the restart.
                Phase::Waiting => {}
                Phase::Backoff { .. } => actions.push(Action::Log(format!(
                    "Service \"{name}\" {on_type} action is \"{action_name}\", waiting for current backoff"
                ))),
                _ => {
                    self.wanted = Wanted::Running;
                    self.back_off(now, on_type, actions);
                    self.backoff_check = Some(check.to_owned());
                }
            },
        }
    }

    /// A check is up again: a backoff that only it caused has nothing left to wait for, and
    /// its next failure streak starts its restarts from the first delay.
    fn on_check_up(&mut self, check: &str, actions: &mut Vec<Action>) {
        self.streaks.remove(check);
        self.held.remove(check);
        if matches!(self.phase, Phase::Backoff { .. })
            && self.backoff_check.as_deref() == Some(check)
        {
            actions.push(Action::Log(format!(
                "Service \"{}\" check \"{check}\" is up again, restarting now",
                self.name
            )));
            self.respawn(actions);
        }
    }

    /// Applies the milestones a live process has passed by `now`, whatever the event: a
    /// process past its okay delay has started, one that ran for the backoff limit has reset
    /// its backoff. Their ticks may come late (a busy executor) or after the event that
    /// needs them: an exit at 1.5 s is the exit of a started service even if the 1 s tick
    /// has not been handled yet.
    fn catch_up(&mut self, now: Instant, actions: &mut Vec<Action>) {
        if let Phase::Starting {
            pid,
            okay_at,
            ready_signal,
        } = self.phase
            && now >= okay_at
        {
            if ready_signal {
                // Never said it was ready: a failed start, ended like a stop and then
                // handled as a failure.
                let error = format!(
                    "service did not say it was ready (READY=1) within {}",
                    format_secs(READY_TIMEOUT)
                );
                actions.push(Action::Log(format!("Service \"{}\" {error}", self.name)));
                actions.push(Action::StartDone(StartOutcome::Failed {
                    error,
                    with_output: true,
                }));
                self.terminate(now, pid, AfterExit::Failed, actions);
            } else {
                self.phase = Phase::Running { pid };
                actions.push(Action::StartDone(StartOutcome::Started));
            }
        }
        if matches!(self.phase, Phase::Running { .. }) && self.reset_at.is_some_and(|at| now >= at)
        {
            // Running for the whole backoff limit: the next failure starts from scratch.
            self.reset_at = None;
            self.backoff_num = 0;
            self.backoff_time = Duration::ZERO;
        }
    }

    fn on_tick(&mut self, now: Instant, actions: &mut Vec<Action>) {
        match self.phase {
            Phase::Terminating { pid, kill_at } if now >= kill_at => {
                actions.push(Action::Signal {
                    pid,
                    signal: GroupSignal::Kill,
                });
                self.phase = Phase::Killing {
                    pid,
                    give_up_at: now + FAIL_DELAY,
                };
            }
            Phase::Killing { pid, give_up_at } if now >= give_up_at => {
                actions.push(Action::Log(format!(
                    "Service \"{}\" still running after SIGTERM and SIGKILL",
                    self.name
                )));
                actions.push(Action::EndGroup { pid });
                if self.after_exit == AfterExit::Stop {
                    self.phase = Phase::Stopped;
                    actions.push(Action::StopDone(StopOutcome::Failed(
                        "process still running after SIGTERM and SIGKILL".into(),
                    )));
                } else {
                    // Still wanted running: keep trying rather than end up stopped.
                    self.after_exit = AfterExit::Stop;
                    self.back_off(now, "restart", actions);
                }
            }
            Phase::Backoff { until } if now >= until => self.respawn(actions),
            _ => {}
        }
    }

    fn on_paths_missing(&mut self, missing: Vec<String>, actions: &mut Vec<Action>) {
        let Phase::Spawning { restart } = self.phase else {
            return;
        };
        if self.client_stopped {
            if !restart {
                actions.push(Action::StartDone(StartOutcome::Waiting { missing }));
            }
            self.phase = Phase::Stopped;
            actions.push(Action::StopDone(StopOutcome::Stopped));
            return;
        }
        if !restart {
            actions.push(Action::StartDone(StartOutcome::Waiting {
                missing: missing.clone(),
            }));
        }
        actions.push(Action::Log(format!(
            "Service \"{}\" waiting for {}",
            self.name,
            missing.join(", ")
        )));
        self.waiting_for = missing;
        self.phase = Phase::Waiting;
    }

    fn on_file_changed(&mut self, now: Instant, action: FileAction) {
        // A process being spawned has not read its files yet: it will see this change.
        if self.wanted != Wanted::Running || matches!(self.phase, Phase::Spawning { .. }) {
            return;
        }
        self.file_change = match self.file_change.take() {
            None => Some((now + FILE_CHANGE_DEBOUNCE, action)),
            // Within the window a restart covers a signal, never the other way round.
            Some((at, pending)) => {
                let action = if pending == FileAction::Restart {
                    pending
                } else {
                    action
                };
                Some((at, action))
            }
        };
    }

    fn on_file_change_due(&mut self, now: Instant, actions: &mut Vec<Action>) {
        let Some((at, action)) = self.file_change.clone() else {
            return;
        };
        if now < at {
            return;
        }
        match (&action, self.phase) {
            // Let a start finish its okay delay first; its waiters expect an outcome.
            (_, Phase::Starting { okay_at, .. }) => {
                self.file_change = Some((okay_at, action));
                return;
            }
            (FileAction::Restart, Phase::Running { pid }) => {
                actions.push(Action::Log(format!(
                    "Service \"{}\" on-file-change action is \"restart\", terminating process before restarting",
                    self.name
                )));
                self.terminate(now, pid, AfterExit::Respawn, actions);
            }
            (FileAction::Restart, Phase::Backoff { .. }) => self.respawn(actions),
            (FileAction::Signal(signal), Phase::Running { pid }) => {
                actions.push(Action::SignalProcess {
                    pid,
                    signal: signal.clone(),
                });
            }
            _ => {}
        }
        self.file_change = None;
    }

    fn terminate(&mut self, now: Instant, pid: u32, after: AfterExit, actions: &mut Vec<Action>) {
        actions.push(Action::Signal {
            pid,
            signal: GroupSignal::Term,
        });
        self.after_exit = after;
        self.reset_at = None;
        self.phase = Phase::Terminating {
            pid,
            kill_at: now + self.policy.kill_delay,
        };
    }

    fn back_off(&mut self, now: Instant, on_type: &str, actions: &mut Vec<Action>) {
        self.after_exit = AfterExit::Stop;
        self.backoff_check = None;
        self.backoff_num += 1;
        self.backoff_time = next_backoff(&self.policy, self.backoff_time);
        let jitter = self.jitter(self.backoff_time);
        actions.push(Action::Log(format!(
            "Service \"{}\" {on_type} action is \"restart\", waiting ~{} before restart (backoff {})",
            self.name,
            format_secs(self.backoff_time),
            self.backoff_num
        )));
        self.phase = Phase::Backoff {
            until: now + self.backoff_time + jitter,
        };
    }

    /// A uniformly random 0-10 % of `base`.
    fn jitter(&mut self, base: Duration) -> Duration {
        // xorshift64*: plenty for spreading restarts, and reproducible from the seed.
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        let r = self.rng.wrapping_mul(0x2545_F491_4F6C_DD1D);
        let unit = (r >> 11) as f64 / (1u64 << 53) as f64;
        base.mul_f64(0.1 * unit)
    }
}

/// The backoff delay that follows `current` (zero means "no backoff yet").
pub(crate) fn next_backoff(policy: &Policy, current: Duration) -> Duration {
    if current.is_zero() {
        return policy.backoff_delay;
    }
    if current >= policy.backoff_limit {
        return policy.backoff_limit;
    }
    current
        .mul_f64(policy.backoff_factor)
        .min(policy.backoff_limit)
}

/// `"a"`, `"a" and "b"`, `"a", "b" and "c"`, with "check" or "checks" before them.
fn quoted_checks(checks: &[String]) -> String {
    let quoted: Vec<String> = checks.iter().map(|c| format!("\"{c}\"")).collect();
    match quoted.as_slice() {
        [one] => format!("check {one}"),
        [rest @ .., last] => format!("checks {} and {last}", rest.join(", ")),
        [] => "no check".into(),
    }
}

/// Formats a whole or fractional number of seconds the way Go prints small durations.
fn format_secs(d: Duration) -> String {
    let nanos = i64::try_from(d.as_nanos()).unwrap_or(i64::MAX);
    cobble_plan::duration::format_duration(nanos)
}

#[cfg(test)]
mod tests;
