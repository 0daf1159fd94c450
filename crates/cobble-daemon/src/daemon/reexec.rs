//! Re-executing the daemon in place (`POST /v1/cobble/reexec`, `cobble reexec`).
//!
//! # Theory of operation
//!
//! The daemon replaces its program with `execve`, so it keeps its pid (PID 1 of a container
//! stays PID 1) and its children, the services. What the new program needs beyond that is
//! handed over explicitly: the descriptors it keeps (the directory lock, the unix socket's
//! and the TCP listeners, each running service's output pipe and notify socket, the held
//! `sockets:`, the asking client's connection) lose their close-on-exec flag, and a
//! [`Handover`] document in a memory file says what each is, with where each service's
//! machine stands, what each service's log holds and where each check stands; its
//! descriptor is named by [`cobble_sys::reexec::HANDOVER_ENV`]. The state goes through the
//! state file: the persister writes it one last time and stops, and the new program loads
//! it as any daemon does (without a state file, `PEBBLE_PERSIST=never`, it goes in the
//! document, [`Handover::state`]), but leaves the handed-over checks' tasks, and the tasks of the
//! handed-over service changes, as they stood. The plan
//! goes in the document, layer by layer as [`cobble_plan::Layer::to_yaml`] prints each
//! (those added through the API too), and the new program runs it instead of reading the
//! layers directory, which a daemon reads at start-up only.
//!
//! Every service this daemon started is handed over, with or without a process: running
//! (a one-shot's run too), within its okay delay or not ready yet, backing off, waiting for missing
//! `requires-paths`, for one-shots or for `requires-checks`, a one-shot completed, or left down;
//! and so is one whose process is being ended (SIGTERM sent and its kill-delay not out, or SIGKILL
//! sent), with what follows the exit: stopped after a client's stop, or, still wanted running, a
//! restart for a check or a file change, or the `on-failure` action after a failed start or a
//! watchdog's failure. Its machine's timers (the okay delay or the time left to say `READY=1`, the
//! kill-delay or the wait after SIGKILL, the backoff, the backoff's reset, a coalesced file change,
//! a check's restart streak or held action) go as durations from the handover, which is stamped on
//! the monotonic clock, kept by `execve`: the new program counts them from that instant, so the
//! swap's own time is not added. What the new program can derive it derives from the plan: the
//! paths to watch (each reported as it is once watched, so a path created during the swap ends a
//! wait), where each one-shot stands for what waits for it, and the cgroup of a run with
//! `resources:`, found by its path from the service's name and its invocation ID.
//!
//! The services' changes in progress are handed over too, each with its tasks by lane
//! ([`crate::services::changes::CarriedChange`]); their tasks stay in the state file as
//! they stood. The new program takes each change up where it stood: a task in progress waits
//! for the start or stop its service was in the middle of, which the supervisor answers as
//! the old program would have (it registers the waiters as it adopts the service, before
//! anything more happens to it), and records it as the old program would have; the tasks
//! not begun run as any do. A task the old program began as it got ready (its request held
//! by the supervisor, which no longer acts on a handed-over service) is begun again.
//!
//! Every check is handed over too: its status, streak (failures, successes, whether it is
//! recovering), counters, last error, its perform-check or recover-check change and task
//! (left in progress), and how long until its next run, counted from when the new program
//! takes it. A stopped or disabled check stays inactive with its record.
//!
//! Sockets are handed over open rather than bound again, so that nothing sent or connected
//! during the swap is refused: a client waits in a held socket's queue, a datagram in a
//! notify socket. A watchdog's moments (its ready time, last ping and current interval) go
//! as how long before the handover they were, so its deadline is the one the old program
//! would have acted on.
//!
//! In order:
//!
//! 1. **The candidate is asked first.** It is run as a child with [`PROBE_ARG`] and `$PEBBLE`,
//!    reads the plan it would be handed (on its standard input) and the state file it would
//!    start from, and must answer, within
//!    [`PROBE_TIMEOUT`], with its version and the handover formats it reads. A missing file,
//!    one that is not executable or not for this machine, a build that does not know the
//!    probe or does not read the format this daemon would write ([`FORMAT`], or
//!    [`HTTPS_FORMAT`] for a client that asked over `--https`), and one that crashes or
//!    exits at once are refused with the reason, and nothing else has happened.
//! 2. **Exec sessions in progress are waited for** up to [`CHANGE_WAIT`] (their websockets
//!    end with the process), then the request is refused, naming them; a check's change
//!    (`perform-check`, `recover-check`) and a service change (`start`, `stop`, `restart`,
//!    `autostart`, `replan`) are not waited for: each is handed over (5).
//! 3. **The listeners pause.** They stop accepting (the kernel queues new connections, which
//!    the new program accepts) and every connection finishes the request it is answering and
//!    closes; answers that wait (a notices long poll, a logs follower) end as their timeout
//!    or end of stream would end them. The daemon waits for that up to [`DRAIN_WAIT`].
//! 4. **What cannot be handed over refuses the request**, checked once no request can start
//!    anything more: an exec session in progress, a daemon that `cobble enter` runs for one
//!    command; a plan changed since the probe is probed again. Then
//!    each log target's sender finishes the request it is making (so that nothing is sent
//!    twice) and parks, its undelivered batch put back in its queue, up to [`FORWARD_WAIT`];
//!    the notify sockets' readers stop between two datagrams, and the supervisor handles what
//!    they had read (so that what a service said is in its machine when it is taken, and what
//!    it says later waits in its socket); then the supervisor is asked to hand over its
//!    services once none is being spawned (a spawn takes moments; one still under way after
//!    [`SPAWN_WAIT`] refuses, naming it), and refuses, for a candidate that does not read
//!    [`ENDINGS_FORMAT`], one whose process is being ended by anything but a client's stop.
//!    On a refusal, the readers (which read what waits in their
//!    sockets before the services' deadlines are acted on again), the senders and the
//!    listeners start again.
//! 5. **The services and the checks are taken over**: the supervisor stops acting on the
//!    services (their timers, exits, paths, one-shots and checks wait for the new program), and
//!    each output reader stops between two reads, handing back its pipe and the line it had
//!    begun. Each check's runner stops between two runs (a run in flight is dropped, and is due
//!    at once in the new program), its change and task left in progress. The service changes
//!    being carried out go into the document with their lanes. Each service's output log, the
//!    held sockets and what each log target holds (taken once the output readers have stopped,
//!    so every line they read is in it) go into the document; the persister writes the state
//!    and stops; the daemon's own log and the service log files are flushed.
//! 6. **`execve`**. Just before it, an `--https` asker's connection is taken out of the HTTPS
//!    server with its TLS session's sending half ([`crate::tls_handoff`]), which the document
//!    carries ([`HTTPS_FORMAT`]). If it fails, the flags are set back, the readers (of output and
//!    of notify sockets), the log targets' senders, the checks (as they stood), the persister and
//!    the listeners start again, and the client is told why (an `--https` one on its session, as
//!    its server gave the connection up). If it succeeds, the new program adopts the descriptors,
//!    registers the services' pids with its reaper before it starts (an exit during the swap waits
//!    as a zombie), holds the handed sockets before it binds anything the plan names, starts as a
//!    daemon does (with the plan it was handed, and the state file; its log targets queueing what
//!    the old ones held before any new line) but neither ends leftovers nor autostarts, runs each
//!    check on from where it stood (same change and task, next run when it was due), follows the
//!    services from where their machines stood (acting on the checks as they stand: a firing the
//!    old program had not acted on is acted on, a wait for checks that pass now ends; the paths
//!    they watch compared with how the old program last saw them, so that a file changed during
//!    the swap is a change), takes up the service changes where they stood, reads their notify
//!    sockets again (what was sent during the swap first), serves the listeners it was handed,
//!    and answers the waiting client on its connection with both versions. Had the exec failed
//!    instead, the old program follows its services again, its path watches armed anew (compared
//!    with what it last acted on) and what waits for one-shots told where they stand, for what
//!    happened meanwhile was not acted on.
//!
//! **A new program that fails to take over** (it cannot read the document or adopt a
//! descriptor, a start-up step fails, or it panics, before it follows the services) executes
//! back into the old program ([`fall_back`]): the old program keeps a descriptor on its own
//! image (opened on `/proc/self/exe` at start-up) across the exec, named by
//! [`cobble_sys::reexec::PREVIOUS_IMAGE_ENV`]; the new one, first thing, copies every
//! descriptor it was handed ([`cobble_sys::reexec::Reserve`]), so that whatever it has
//! adopted or closed since, it can put each back under its number, rewind the document and
//! execute the old image with it, telling it why in
//! [`cobble_sys::reexec::TAKEOVER_FAILED_ENV`]. The old program takes over as a new one does
//! and answers the waiting client with that error. The services' output readers start last,
//! once nothing else can fail, so that no line is read by a program that then gives up. A
//! crash by a signal (`SIGSEGV`, an abort) does the same from a signal handler armed with
//! everything it needs made beforehand ([`cobble_sys::reexec::arm_crash_fallback`]); only
//! `SIGKILL` cannot be caught. The probe (step 1) catches a binary that crashes at once.
//!
//! **After a panic** of one of the daemon's watched tasks (see `Managers` in the daemon's
//! module), the daemon re-executes itself the same way ([`Cause::Panicked`]), with no client
//! waiting: the program it runs now, executed through a descriptor opened on
//! `/proc/self/exe` at start-up (`execveat`), which names the very file the running image was
//! loaded from even once the path on disk was replaced or removed; so no probe is needed, and
//! a panic never turns into an upgrade nobody asked for. The handover carries the times of
//! the recent panics: the [`PANIC_LIMIT`]th within [`PANIC_WINDOW`] ends the daemon as before
//! (its services stopped, exit code 1), as does a panic of the service manager, which alone
//! could hand the services over, or any refusal of the steps above. A state persister that
//! panicked has its last write made by a new one.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::Read;
use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::api::{ApiError, Handable};

/// The argument that makes `cobble` answer as a re-execution's candidate (see [`probe`]).
pub const PROBE_ARG: &str = "__reexec-probe";
/// The handover format this daemon writes: 3 hands over the plan, services that are not running too
/// (backing off, waiting, a one-shot completed, being stopped), notify sockets, watchdogs, held
/// `sockets:` (descriptors a reader of 2 would leave open and bind over), what log targets hold and
/// the service changes in progress; 2 running services only (and had the new program load the
/// layers directory); 1 none.
pub(crate) const FORMAT: u32 = 3;
/// The format written instead of [`FORMAT`] when the client asked over `--https`: 3 with the
/// session's keys in [`Reply::tls`], which a reader of 3 would ignore and answer in
/// cleartext. So a build that reads 3 and not 4 can still be executed into when asked over
/// the unix socket.
pub(crate) const HTTPS_FORMAT: u32 = 4;
/// The format written instead when a service is being ended for another reason than a
/// client's stop ([`CarriedService::ending`]): 4 and that, which a reader of 4 would take
/// for a client's stop and leave the service stopped. A candidate that does not read it
/// refuses such a service instead.
pub(crate) const ENDINGS_FORMAT: u32 = 5;
/// The format written instead when there is no state file (`PEBBLE_PERSIST=never`): 5 with
/// the state itself in [`Handover::state`], which a reader of 5 would not look at, and so
/// start with no changes, notices or identities.
pub(crate) const STATE_FORMAT: u32 = 6;
/// The handover formats this build reads.
const READS: &[u32] = &[1, 2, FORMAT, HTTPS_FORMAT, ENDINGS_FORMAT, STATE_FORMAT];
/// The largest handover document read.
const MAX_DOCUMENT: u64 = 64 << 20;
/// How long the candidate may take to answer the probe.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);
/// The most of the probe's output read.
const MAX_PROBE_OUTPUT: u64 = 64 * 1024;
/// How long a re-execution waits for changes in progress that cannot be handed over (exec
/// sessions) to be ready.
pub(crate) const CHANGE_WAIT: Duration = Duration::from_secs(10);
/// The kinds of change that are not waited for: those that last as long as a check runs,
/// handed over with their checks, and the services' changes, handed over with their services
/// and taken up by the new program where they stood.
const HANDED_CHANGES: &[&str] = &[
    "perform-check",
    "recover-check",
    "start",
    "stop",
    "restart",
    "autostart",
    "replan",
];
/// How long a log target's sender may take to finish the request it is making.
const FORWARD_WAIT: Duration = Duration::from_secs(11);
/// How long a re-execution waits for services' processes being spawned (moments, unless
/// something a spawn waits for hangs), the API's listeners paused.
const SPAWN_WAIT: Duration = Duration::from_secs(5);
/// How long the listeners' connections have to finish their requests.
pub(crate) const DRAIN_WAIT: Duration = Duration::from_secs(5);

/// How many panics of the daemon's managers within [`PANIC_WINDOW`] end the daemon (its
/// services stopped) instead of re-executing it once more: a crash loop.
pub(crate) const PANIC_LIMIT: usize = 3;
/// See [`PANIC_LIMIT`].
pub(crate) const PANIC_WINDOW: Duration = Duration::from_secs(60);

/// What `cobble __reexec-probe` prints: this build's version and the formats it reads.
#[derive(Debug, Serialize, Deserialize)]
struct ProbeAnswer {
    #[serde(rename = "cobble-version")]
    version: String,
    #[serde(rename = "handover-formats")]
    formats: Vec<u32>,
}

/// The probe's answer for the daemon of `pebble_dir`: one line of JSON, once this build has
/// read what it would start from (the plan `input` carries, as a handover's
/// [`Handover::plan`] does, or else the layers directory; the state file, unless
/// `PEBBLE_PERSIST=never`), or why it cannot.
pub fn probe_answer(pebble_dir: &Path, input: impl Read) -> Result<String, String> {
    let mut carried = Vec::new();
    input
        .take(MAX_DOCUMENT)
        .read_to_end(&mut carried)
        .map_err(|e| format!("cannot read the plan handed over: {e}"))?;
    if carried.iter().all(u8::is_ascii_whitespace) {
        cobble_plan::Plan::load_dir(&pebble_dir.join("layers"))
            .map_err(|e| format!("cannot load plan: {e}"))?;
    } else {
        let layers: Vec<CarriedLayer> = serde_json::from_slice(&carried)
            .map_err(|e| format!("cannot read the plan handed over: {e}"))?;
        carried_plan(&layers)?;
    }
    // Without a state file (`PEBBLE_PERSIST=never`) the state is handed over in the
    // document, and whatever file there is would not be read.
    if std::env::var_os("PEBBLE_PERSIST").is_none_or(|v| v != "never") {
        let state = pebble_dir.join(".pebble.state");
        crate::state::load(&state).map_err(|e| e.to_string())?;
    }
    Ok(serde_json::to_string(&ProbeAnswer {
        version: crate::VERSION.to_owned(),
        formats: READS.to_vec(),
    })
    .expect("the probe's answer serialises"))
}

/// What the daemon hands its new program.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Handover {
    /// [`FORMAT`], [`HTTPS_FORMAT`] or [`ENDINGS_FORMAT`].
    pub format: u32,
    /// The version of cobble that wrote it.
    pub old_version: String,
    /// The boot ID `/v1/system-info` reports, random when the daemon is PID 1: kept.
    pub boot_id: String,
    /// The directory lock's open file.
    pub lock: RawFd,
    /// The API's unix socket, listening.
    pub unix: RawFd,
    /// `--http`'s listener.
    pub http: Option<RawFd>,
    /// `--https`'s listener.
    pub https: Option<RawFd>,
    /// The client waiting for the answer.
    pub reply: Option<Reply>,
    /// What each service's output log held.
    #[serde(default)]
    pub logs: Vec<CarriedLog>,
    /// The services started and not stopped since.
    #[serde(default)]
    pub services: Vec<CarriedService>,
    /// The plan, layer by layer (those added through the API too); none from a format that
    /// had the new program load the layers directory.
    #[serde(default)]
    pub plan: Option<Vec<CarriedLayer>>,
    /// When the document was written, on the monotonic clock (which the exec keeps), in
    /// nanoseconds: what the services' durations count from.
    #[serde(default)]
    pub handed_at_ns: Option<u64>,
    /// When the daemon's managers panicked lately (nanoseconds since the epoch), each panic
    /// having re-executed the daemon: counted towards [`PANIC_LIMIT`].
    #[serde(default)]
    pub panics: Vec<i128>,
    /// The listening sockets held for services (`sockets:`).
    #[serde(default)]
    pub sockets: Vec<CarriedSocket>,
    /// What each log target held, not yet sent.
    #[serde(default)]
    pub forwarding: Vec<CarriedTarget>,
    /// Every check of the plan: its status, counters and change.
    #[serde(default)]
    pub checks: Vec<crate::checks::CarriedCheck>,
    /// The service changes in progress (start, stop, restart, autostart, replan), each with
    /// its tasks by lane: the new program takes them up where they stood.
    #[serde(default)]
    pub changes: Vec<crate::services::changes::CarriedChange>,
    /// The paths the services watch, each as they last acted on it: the new program acts on
    /// what changed since (a certificate replaced during the swap restarts its service).
    /// Without it (a document from before), each path is taken as the new program finds it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<CarriedPath>,
    /// Under `PEBBLE_PERSIST=never` ([`STATE_FORMAT`]): the state, as a state file would
    /// hold it, which the new program starts from instead of a file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// What else a later format may carry, kept so that this one reads it without error.
    #[serde(flatten)]
    pub rest: BTreeMap<String, serde_json::Value>,
}

/// A service, handed over: where its machine stands (durations counted from the handover),
/// and its process and its output's pipe, if it has a process.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct CarriedService {
    pub name: String,
    /// Its process (format 2 had one for every service).
    pub pid: Option<u32>,
    /// Where its lifecycle stands.
    #[serde(default)]
    pub phase: CarriedPhaseName,
    /// The running process is a one-shot's run, which completes it when it exits with 0.
    #[serde(default)]
    pub oneshot_run: bool,
    /// The read end of its output's pipe (none once the process closed it).
    pub output: Option<RawFd>,
    /// The start of a line read from the pipe but not finished yet.
    #[serde(default)]
    pub unfinished: Vec<u8>,
    /// Its run's invocation ID (`COBBLE_INVOCATION_ID`).
    pub invocation: Option<String>,
    pub start_count: u64,
    /// When its status last changed, in nanoseconds since the epoch.
    pub since_ns: Option<i128>,
    pub backoff_num: u32,
    pub backoff_ns: u64,
    pub reset_in_ns: Option<u64>,
    pub running_ns: Option<u64>,
    pub last_exit: Option<i32>,
    /// When a start's okay delay ends (starting), its backoff does (backoff), or a stop's
    /// kill-delay (stopping) or its wait after SIGKILL (killing).
    #[serde(default)]
    pub due_in_ns: Option<u64>,
    /// Starting, it has not said `READY=1` yet (`readiness: notify`): `due_in_ns` is when
    /// its start fails for it.
    #[serde(default)]
    pub ready_signal: bool,
    /// A start waits for more than the spawn (a one-shot's run, the one-shots it is
    /// ordered after).
    #[serde(default)]
    pub start_pending: bool,
    /// What killed the last process, when the kernel did: its pid and the cause.
    #[serde(default)]
    pub exit_cause: Option<(u32, String)>,
    #[serde(default)]
    pub spawn_error: Option<String>,
    /// Paths the last failure output named as missing.
    #[serde(default)]
    pub hints: Vec<String>,
    /// The missing `requires-paths` it waits for.
    #[serde(default)]
    pub waiting_for: Vec<String>,
    /// The one-shots of `after:` it waits for.
    #[serde(default)]
    pub waiting_oneshots: Vec<String>,
    /// A one-shot's last completion: how long it ran, and when (nanoseconds since the
    /// epoch).
    #[serde(default)]
    pub completion_ns: Option<u64>,
    #[serde(default)]
    pub completed_at_ns: Option<i128>,
    /// A coalesced `on-file-change` action not done yet.
    #[serde(default)]
    pub file_change: Option<CarriedFileChange>,
    /// What of its `resources:` was not enforced at its last spawn, and why.
    #[serde(default)]
    pub unenforced: Option<String>,
    /// Its `on-check-failure` checks last seen down, with the firing number acted on.
    #[serde(default)]
    pub checks_down: BTreeMap<String, u64>,
    /// Per check that stays down, the restarts it caused, the delay before the next and the
    /// nanoseconds until the next may follow.
    #[serde(default)]
    pub streaks: BTreeMap<String, (u32, u64, u64)>,
    /// Its checks whose action is held, each for how many nanoseconds still.
    #[serde(default)]
    pub held_ns: BTreeMap<String, u64>,
    /// The `requires-checks` that do not pass, while it waits for them.
    #[serde(default)]
    pub waiting_checks: Vec<String>,
    /// The check whose action caused its backoff, if one did.
    #[serde(default)]
    pub backoff_check: Option<String>,
    /// Its run's watchdog.
    #[serde(default)]
    pub watchdog: Option<WatchdogDoc>,
    /// Its notify socket, under `readiness: notify`.
    #[serde(default)]
    pub notify: Option<NotifyDoc>,
    /// Stopped, a client stopped it (rather than its policy).
    #[serde(default)]
    pub stopped_by_client: bool,
    /// Being ended (stopping, killing) for another reason than a client's stop, and so
    /// still wanted running: what follows its exit ([`ENDINGS_FORMAT`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ending: Option<CarriedEnding>,
    /// The configuration it runs, or last ran if it is down, as a one-service layer
    /// document, when the plan has changed it since.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ran: Option<String>,
}

/// Where a run's watchdog stands, each moment in nanoseconds before the handover.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct WatchdogDoc {
    /// None: turned off for the run (`WATCHDOG_USEC=0`).
    pub interval_ns: Option<u64>,
    pub ready_ago_ns: Option<u64>,
    pub last_ping_ago_ns: Option<u64>,
    pub since_ago_ns: Option<u64>,
}

/// A `readiness: notify` service's socket and what its running instance said on it.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct NotifyDoc {
    /// `$NOTIFY_SOCKET`, as the service was given it.
    pub address: String,
    /// The bound socket, with what was sent to it during the swap.
    pub fd: RawFd,
    pub status: Option<String>,
    #[serde(default)]
    pub reloading: bool,
    #[serde(default)]
    pub stopping: bool,
}

/// The lines one log target held, not yet sent, oldest first.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct CarriedTarget {
    pub target: String,
    pub entries: Vec<CarriedEntry>,
    /// Its counters, which the new program counts on from (none from a document before).
    #[serde(default)]
    pub sent: u64,
    #[serde(default)]
    pub dropped: u64,
}

/// A line on its way to a log target, with the labels it was written under.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct CarriedEntry {
    /// When it was written, in nanoseconds since the epoch.
    pub time_ns: i128,
    pub service: String,
    pub message: String,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

/// What the log targets held, as this program's forwarder queues it (by target).
pub(super) fn carried_forwarding(
    targets: Vec<CarriedTarget>,
) -> BTreeMap<String, crate::logs::forward::Carried> {
    targets
        .into_iter()
        .map(|t| {
            let entries = t
                .entries
                .into_iter()
                .filter_map(|e| {
                    Some(crate::logs::forward::queue::Entry {
                        time: jiff::Timestamp::from_nanosecond(e.time_ns).ok()?,
                        service: e.service.into(),
                        message: e.message,
                        labels: std::sync::Arc::new(e.labels),
                    })
                })
                .collect();
            let carried = crate::logs::forward::Carried {
                entries,
                sent: t.sent,
                dropped: t.dropped,
            };
            (t.target, carried)
        })
        .collect()
}

/// What the log targets hold now, their senders parked.
fn queued_forwarding(daemon: &super::Daemon) -> Vec<CarriedTarget> {
    daemon
        .forwarder
        .queued()
        .into_iter()
        .map(|(target, carried)| CarriedTarget {
            target,
            sent: carried.sent,
            dropped: carried.dropped,
            entries: carried
                .entries
                .into_iter()
                .map(|e| CarriedEntry {
                    time_ns: e.time.as_nanosecond(),
                    service: e.service.to_string(),
                    message: e.message,
                    labels: (*e.labels).clone(),
                })
                .collect(),
        })
        .collect()
}

/// A watched path, as the services last acted on it.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct CarriedPath {
    pub path: String,
    /// What it named then; `None` when it did not exist.
    pub fingerprint: Option<crate::watch::Fingerprint>,
}

impl CarriedPath {
    /// The document's paths from the supervisor's baseline (the plan's paths are text; a
    /// path that is not, which nothing watches, is left out).
    fn carried(baseline: crate::watch::Baseline) -> Vec<CarriedPath> {
        baseline
            .into_iter()
            .filter_map(|(path, fingerprint)| {
                Some(CarriedPath {
                    path: path.into_os_string().into_string().ok()?,
                    fingerprint,
                })
            })
            .collect()
    }

    fn baseline(paths: Vec<CarriedPath>) -> crate::watch::Baseline {
        paths
            .into_iter()
            .map(|p| (PathBuf::from(p.path), p.fingerprint))
            .collect()
    }
}

/// A listening socket held for a service.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct CarriedSocket {
    pub service: String,
    pub socket: String,
    pub fd: RawFd,
}

/// Where a handed-over service's lifecycle stands (see [`crate::services::machine::CarriedPhase`]).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum CarriedPhaseName {
    #[default]
    Running,
    Starting,
    Backoff,
    Waiting,
    Completed,
    Exited,
    /// Its process is being ended (a client's stop, unless [`CarriedService::ending`] says
    /// otherwise): SIGTERM sent, SIGKILL due.
    Stopping,
    /// Its process is being ended: SIGKILL sent.
    Killing,
    /// Stopped after it ran (see [`CarriedService::stopped_by_client`]).
    Stopped,
}

/// Why a service being ended, and still wanted running, is ended: what follows its exit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum CarriedEnding {
    /// Its `on-check-failure: restart` for this check: it backs off while the check is down.
    CheckRestart(String),
    /// An `on-file-change` restart: it is started again at once.
    Respawn,
    /// A start that failed (it never said `READY=1`): its `on-failure` action follows.
    Failed,
    /// Its watchdog's failure: its `on-failure` action follows.
    Watchdog,
}

/// An `on-file-change` action due `in_ns` from the handover: a restart, or `signal`.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct CarriedFileChange {
    pub in_ns: u64,
    pub signal: Option<String>,
}

impl CarriedService {
    fn new(
        taken: &crate::services::Taken,
        output: Option<&crate::logs::capture::Detached>,
        invocation: Option<String>,
    ) -> CarriedService {
        use crate::services::machine::{AfterExit, CarriedPhase, FileAction};
        let ns = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let c = &taken.carried;
        let mut ready_signal = false;
        let mut stopped_by_client = false;
        let mut ending = None;
        let (phase, oneshot_run, due_in) = match c.phase {
            CarriedPhase::Running { oneshot_run, .. } => {
                (CarriedPhaseName::Running, oneshot_run, None)
            }
            CarriedPhase::Starting {
                okay_in,
                ready_signal: signal,
                ..
            } => {
                ready_signal = signal;
                (CarriedPhaseName::Starting, false, Some(okay_in))
            }
            CarriedPhase::Stopping {
                killing,
                due_in,
                ref after,
                ..
            } => {
                ending = match after {
                    AfterExit::Stop => None,
                    AfterExit::CheckRestart(check) => {
                        Some(CarriedEnding::CheckRestart(check.clone()))
                    }
                    AfterExit::Respawn => Some(CarriedEnding::Respawn),
                    AfterExit::Failed => Some(CarriedEnding::Failed),
                    AfterExit::Watchdog => Some(CarriedEnding::Watchdog),
                };
                let name = if killing {
                    CarriedPhaseName::Killing
                } else {
                    CarriedPhaseName::Stopping
                };
                (name, false, Some(due_in))
            }
            CarriedPhase::Backoff { until_in } => {
                (CarriedPhaseName::Backoff, false, Some(until_in))
            }
            CarriedPhase::Waiting => (CarriedPhaseName::Waiting, false, None),
            CarriedPhase::Completed => (CarriedPhaseName::Completed, false, None),
            CarriedPhase::Exited => (CarriedPhaseName::Exited, false, None),
            CarriedPhase::Stopped { by_client } => {
                stopped_by_client = by_client;
                (CarriedPhaseName::Stopped, false, None)
            }
        };
        CarriedService {
            name: taken.name.clone(),
            pid: c.pid(),
            phase,
            oneshot_run,
            output: output.map(|d| d.reader.as_raw_fd()),
            unfinished: output.map(|d| d.unfinished.clone()).unwrap_or_default(),
            invocation,
            start_count: taken.start_count,
            since_ns: taken.since.map(|t| t.as_nanosecond()),
            backoff_num: c.backoff_num,
            backoff_ns: ns(c.backoff_time),
            reset_in_ns: c.reset_in.map(ns),
            running_ns: c.running_for.map(ns),
            last_exit: c.last_exit,
            due_in_ns: due_in.map(ns),
            ready_signal,
            start_pending: c.start_pending,
            exit_cause: c.exit_cause.clone(),
            spawn_error: c.spawn_error.clone(),
            hints: c.hints.clone(),
            waiting_for: c.waiting_for.clone(),
            waiting_oneshots: c.waiting_oneshots.clone(),
            completion_ns: c.completion.map(ns),
            completed_at_ns: taken.completed_at.map(|t| t.as_nanosecond()),
            file_change: c
                .file_change
                .as_ref()
                .map(|(due_in, action)| CarriedFileChange {
                    in_ns: ns(*due_in),
                    signal: match action {
                        FileAction::Restart => None,
                        FileAction::Signal(signal) => Some(signal.clone()),
                    },
                }),
            unenforced: taken.unenforced.clone(),
            watchdog: c.watchdog.as_ref().map(|w| WatchdogDoc {
                interval_ns: w.interval.map(ns),
                ready_ago_ns: w.ready_ago.map(ns),
                last_ping_ago_ns: w.last_ping_ago.map(ns),
                since_ago_ns: w.since_ago.map(ns),
            }),
            notify: taken.notify.as_ref().map(|n| NotifyDoc {
                address: n.address.clone(),
                fd: n.fd,
                status: n.status.clone(),
                reloading: n.reloading,
                stopping: n.stopping,
            }),
            checks_down: c.checks_down.clone(),
            streaks: c
                .streaks
                .iter()
                .map(|(check, (n, delay, next))| (check.clone(), (*n, ns(*delay), ns(*next))))
                .collect(),
            held_ns: c.held.iter().map(|(k, d)| (k.clone(), ns(*d))).collect(),
            waiting_checks: c.waiting_checks.clone(),
            backoff_check: c.backoff_check.clone(),
            stopped_by_client,
            ending,
            ran: taken.ran.as_ref().map(|config| config.to_layer_yaml()),
        }
    }

    /// Where its machine stands; `None` for a document that contradicts itself (a process
    /// running without a pid).
    fn carried(&self) -> Option<crate::services::machine::Carried> {
        use crate::services::machine::{AfterExit, CarriedPhase, FileAction};
        let due_in = Duration::from_nanos(self.due_in_ns.unwrap_or(0));
        let phase = match self.phase {
            CarriedPhaseName::Running => CarriedPhase::Running {
                pid: self.pid?,
                oneshot_run: self.oneshot_run,
            },
            CarriedPhaseName::Starting => CarriedPhase::Starting {
                pid: self.pid?,
                okay_in: due_in,
                ready_signal: self.ready_signal,
            },
            CarriedPhaseName::Stopping | CarriedPhaseName::Killing => CarriedPhase::Stopping {
                pid: self.pid?,
                killing: self.phase == CarriedPhaseName::Killing,
                due_in,
                after: match &self.ending {
                    None => AfterExit::Stop,
                    Some(CarriedEnding::CheckRestart(check)) => {
                        AfterExit::CheckRestart(check.clone())
                    }
                    Some(CarriedEnding::Respawn) => AfterExit::Respawn,
                    Some(CarriedEnding::Failed) => AfterExit::Failed,
                    Some(CarriedEnding::Watchdog) => AfterExit::Watchdog,
                },
            },
            CarriedPhaseName::Backoff => CarriedPhase::Backoff { until_in: due_in },
            CarriedPhaseName::Waiting => CarriedPhase::Waiting,
            CarriedPhaseName::Completed => CarriedPhase::Completed,
            CarriedPhaseName::Exited => CarriedPhase::Exited,
            CarriedPhaseName::Stopped => CarriedPhase::Stopped {
                by_client: self.stopped_by_client,
            },
        };
        Some(crate::services::machine::Carried {
            phase,
            backoff_num: self.backoff_num,
            backoff_time: Duration::from_nanos(self.backoff_ns),
            reset_in: self.reset_in_ns.map(Duration::from_nanos),
            running_for: self.running_ns.map(Duration::from_nanos),
            last_exit: self.last_exit,
            exit_cause: self.exit_cause.clone(),
            spawn_error: self.spawn_error.clone(),
            hints: self.hints.clone(),
            waiting_for: self.waiting_for.clone(),
            waiting_oneshots: self.waiting_oneshots.clone(),
            completion: self.completion_ns.map(Duration::from_nanos),
            file_change: self.file_change.as_ref().map(|change| {
                let action = match &change.signal {
                    None => FileAction::Restart,
                    Some(signal) => FileAction::Signal(signal.clone()),
                };
                (Duration::from_nanos(change.in_ns), action)
            }),
            watchdog: self.watchdog.as_ref().map(|w| {
                let d = |ns: Option<u64>| ns.map(Duration::from_nanos);
                crate::services::machine::CarriedWatchdog {
                    interval: d(w.interval_ns),
                    ready_ago: d(w.ready_ago_ns),
                    last_ping_ago: d(w.last_ping_ago_ns),
                    since_ago: d(w.since_ago_ns),
                }
            }),
            checks_down: self.checks_down.clone(),
            streaks: self
                .streaks
                .iter()
                .map(|(check, (n, delay, next))| {
                    let (delay, next) = (Duration::from_nanos(*delay), Duration::from_nanos(*next));
                    (check.clone(), (*n, delay, next))
                })
                .collect(),
            held: self
                .held_ns
                .iter()
                .map(|(k, d)| (k.clone(), Duration::from_nanos(*d)))
                .collect(),
            waiting_checks: self.waiting_checks.clone(),
            backoff_check: self.backoff_check.clone(),
            start_pending: self.start_pending,
        })
    }
}

/// One layer of the plan, handed over as the document that reads back as it.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct CarriedLayer {
    pub order: u64,
    pub label: String,
    pub yaml: String,
}

/// The plan as layers to hand over; refuses one that would not read back as itself (which
/// would be a bug of [`cobble_plan::Layer::to_yaml`], but a plan that changed across a
/// re-execution would silently change what runs).
fn carry_plan(plan: &cobble_plan::Plan) -> Result<Vec<CarriedLayer>, String> {
    let layers: Vec<CarriedLayer> = plan
        .layers
        .iter()
        .map(|layer| CarriedLayer {
            order: layer.order,
            label: layer.label.clone(),
            yaml: layer.to_yaml(),
        })
        .collect();
    match carried_plan(&layers) {
        Ok(again) if again == *plan => Ok(layers),
        Ok(_) => Err("the plan does not read back as itself".to_owned()),
        Err(e) => Err(format!("the plan does not read back ({e})")),
    }
}

/// The plan a handover carries.
pub(crate) fn carried_plan(layers: &[CarriedLayer]) -> Result<cobble_plan::Plan, String> {
    let layers = layers
        .iter()
        .map(|l| {
            // Read under a neutral label: the daemon's own layers have the reserved prefix
            // (`pebble-service-args`) that a client's may not.
            let mut layer = cobble_plan::Layer::parse(l.order, "handed-over", &l.yaml)
                .map_err(|e| format!("cannot load plan: layer {:?}: {e}", l.label))?;
            layer.label.clone_from(&l.label);
            Ok(layer)
        })
        .collect::<Result<Vec<_>, String>>()?;
    cobble_plan::Plan::from_layers(layers).map_err(|e| format!("cannot load plan: {e}"))
}
/// A handed-over service, with its process's exit from the reaper when it has a process.
pub(super) type CarriedExit = (
    CarriedService,
    Option<tokio::sync::oneshot::Receiver<cobble_sys::reaper::ExitStatus>>,
);

/// Registers the handed-over services' processes with the reaper, before it starts (so that
/// an exit during the swap, waiting as a zombie, is reported); returns their exits.
pub(super) fn adopt_exits(services: Vec<CarriedService>) -> Vec<CarriedExit> {
    services
        .into_iter()
        .map(|s| {
            let exit = s.pid.map(cobble_sys::reaper::adopt);
            (s, exit)
        })
        .collect()
}

/// Has the supervisor follow the handed-over services: their records, their pipes, their
/// machines, counted from `handed_at_ns` (the handover's instant on the monotonic clock),
/// and the paths they watch, compared with how the predecessor last saw them (`paths`);
/// returns the starts and stops they were in the middle of.
pub(super) async fn adopt_services(
    daemon: &super::Daemon,
    services: Vec<CarriedExit>,
    handed_at_ns: Option<u64>,
    paths: Vec<CarriedPath>,
) -> Vec<(String, crate::services::InFlight)> {
    if services.is_empty() {
        return Vec::new();
    }
    // The swap's own time has passed for every timer the services had.
    let swap = handed_at_ns
        .map(|at| cobble_sys::reexec::monotonic_now().saturating_sub(Duration::from_nanos(at)))
        .unwrap_or_default();
    let now = tokio::time::Instant::now();
    let at = now.checked_sub(swap).unwrap_or(now);
    let processes = daemon.processes.clone();
    let plan = daemon.service_changes.plan();
    let records: Vec<(String, u32, Option<String>, cobble_plan::Resources)> = services
        .iter()
        .filter_map(|(s, _)| {
            let resources = plan
                .service_to_run(&s.name)
                .map(|config| config.resources)
                .unwrap_or_default();
            Some((s.name.clone(), s.pid?, s.invocation.clone(), resources))
        })
        .collect();
    let gone: BTreeMap<u32, bool> = tokio::task::spawn_blocking(move || {
        records
            .iter()
            .map(|(name, pid, invocation, resources)| {
                processes.adopt(name, *pid, invocation.as_deref(), resources);
                (*pid, cobble_sys::process::proc_stat(*pid).is_none())
            })
            .collect()
    })
    .await
    .unwrap_or_default();
    let mut adoptions = Vec::new();
    for (service, exit) in services {
        let Some(carried) = service.carried() else {
            tracing::warn!(
                "Cannot follow service \"{}\": its handover names no process",
                service.name
            );
            continue;
        };
        let reader = service.output.and_then(|fd| {
            let fd = cobble_sys::reexec::adopt(fd).ok()?;
            tokio::net::unix::pipe::Receiver::from_owned_fd(fd).ok()
        });
        let notify = service.notify.as_ref().and_then(|n| {
            let socket = cobble_sys::reexec::adopt(n.fd)
                .inspect_err(|e| {
                    tracing::warn!(
                        "Cannot take over the notify socket of service \"{}\": {}",
                        service.name,
                        cobble_sys::os_error_text(e)
                    );
                })
                .ok()?;
            Some(crate::services::AdoptedNotify {
                socket,
                address: n.address.clone(),
                status: n.status.clone(),
                reloading: n.reloading,
                stopping: n.stopping,
            })
        });
        match service.pid {
            Some(pid) => tracing::info!("Service \"{}\" (pid {pid}) carried over.", service.name),
            None => tracing::info!(
                "Service \"{}\" ({}) carried over.",
                service.name,
                serde_json::to_value(service.phase)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default()
            ),
        }
        let gone = service
            .pid
            .and_then(|pid| gone.get(&pid).copied())
            .unwrap_or(false);
        let ran = service.ran.as_deref().and_then(|yaml| {
            cobble_plan::Service::from_layer_yaml(yaml)
                .inspect_err(|e| {
                    tracing::warn!(
                        "Service \"{}\" handed over the configuration it last ran, which cannot be read ({e}): it has the plan's",
                        service.name
                    );
                })
                .ok()
        });
        adoptions.push(crate::services::Adoption {
            name: service.name.clone(),
            carried,
            at,
            start_count: service.start_count,
            since: service
                .since_ns
                .and_then(|ns| jiff::Timestamp::from_nanosecond(ns).ok()),
            completed_at: service
                .completed_at_ns
                .and_then(|ns| jiff::Timestamp::from_nanosecond(ns).ok()),
            unenforced: service.unenforced,
            reader,
            unfinished: service.unfinished,
            exit: exit.map(|exit| -> futures_util::future::BoxFuture<'static, i32> {
                Box::pin(async move { exit.await.map(|s| s.code()).unwrap_or(-1) })
            }),
            gone,
            notify,
            ran,
        });
    }
    daemon
        .services
        .adopt(adoptions, CarriedPath::baseline(paths))
        .await
}

/// Takes the held sockets' descriptors a predecessor handed over, each once, for the
/// supervisor to hold before it binds anything.
pub(super) fn adopt_sockets(
    sockets: Vec<CarriedSocket>,
) -> Vec<(String, String, std::os::fd::OwnedFd)> {
    sockets
        .into_iter()
        .filter_map(|s| match cobble_sys::reexec::adopt(s.fd) {
            Ok(fd) => Some((s.service, s.socket, fd)),
            Err(e) => {
                tracing::warn!(
                    "Cannot take over socket \"{}\" of service \"{}\": {}",
                    s.socket,
                    s.service,
                    cobble_sys::os_error_text(&e)
                );
                None
            }
        })
        .collect()
}

/// The lines one service's output log held, oldest first: when each was written (nanoseconds
/// since the epoch) and its text.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct CarriedLog {
    pub service: String,
    pub lines: Vec<(i128, String)>,
}

impl CarriedLog {
    /// The lines as the new program's log takes them.
    pub(crate) fn entries(self) -> (String, Vec<crate::logs::ring::LogEntry>) {
        let entries = self
            .lines
            .into_iter()
            .filter_map(|(ns, line)| {
                let time = jiff::Timestamp::from_nanosecond(ns).ok()?;
                Some(crate::logs::ring::LogEntry { time, line })
            })
            .collect();
        (self.service, entries)
    }
}

/// What every service's output log holds.
async fn carried_logs(daemon: &super::Daemon) -> Vec<CarriedLog> {
    let names: Vec<String> = daemon
        .service_changes
        .plan()
        .services
        .keys()
        .cloned()
        .collect();
    daemon
        .services
        .logs(names)
        .await
        .into_iter()
        .map(|(service, log)| {
            // The newest lines, within the bound: a ring holds about 100 KiB, more only
            // while a follower lags, and no follower is left by now.
            let mut lines = Vec::new();
            let mut bytes = 0;
            for entry in log.last_entries(None).into_iter().rev() {
                bytes += entry.line.len();
                if bytes > MAX_CARRIED_LOG {
                    break;
                }
                lines.push((entry.time.as_nanosecond(), entry.line));
            }
            lines.reverse();
            CarriedLog { service, lines }
        })
        .collect()
}

/// The most of one service's output log a re-execution carries over, in bytes of text.
const MAX_CARRIED_LOG: usize = 128 * 1024;

/// The client that asked for the re-execution, answered by the new program.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Reply {
    /// Its connection.
    pub fd: RawFd,
    /// The program executed.
    pub binary: String,
    /// When it asked, in nanoseconds since the epoch, for the request's line in the log.
    pub asked_ns: i128,
    /// Its credentials, for the request's line in the debug log.
    pub uid: Option<u32>,
    pub pid: Option<i32>,
    /// Over `--https` ([`HTTPS_FORMAT`]): the session's sending half, which the answer is
    /// sealed with, and the client's address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<crate::tls_handoff::Sealer>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addr: Option<std::net::SocketAddr>,
}

/// Reads the handover document from `fd`.
pub(crate) fn read(fd: RawFd) -> Result<Handover, String> {
    let bytes = cobble_sys::reexec::read_handover(fd, MAX_DOCUMENT)
        .map_err(|e| format!("cannot read handover document: {e}"))?;
    let handover: Handover = serde_json::from_slice(&bytes)
        .map_err(|e| format!("cannot read handover document: {e}"))?;
    if !READS.contains(&handover.format) {
        return Err(format!(
            "cannot read handover document of format {} (this build reads {READS:?})",
            handover.format
        ));
    }
    Ok(handover)
}

/// The binary the daemon was started from, as it was named when it started.
pub(crate) fn own_binary() -> Option<&'static Path> {
    static BINARY: OnceLock<Option<PathBuf>> = OnceLock::new();
    BINARY
        .get_or_init(|| {
            let path = std::env::current_exe().ok()?;
            // A binary replaced on disk since it started is shown with this suffix; the
            // name is what a re-execution runs again, as it is on disk now.
            let text = path.to_string_lossy();
            Some(match text.strip_suffix(" (deleted)") {
                Some(name) => PathBuf::from(name),
                None => path,
            })
        })
        .as_deref()
}

/// The program a re-execution runs: `binary`, absolute, or the daemon's own.
pub(crate) fn resolve(binary: &str) -> Result<PathBuf, ApiError> {
    if binary.is_empty() {
        return own_binary().map(Path::to_owned).ok_or_else(|| {
            ApiError::bad_request("cannot re-execute: the daemon's own binary is unknown")
        });
    }
    let path = PathBuf::from(binary);
    if !path.is_absolute() {
        return Err(ApiError::bad_request(format!(
            "cannot re-execute: binary path {} is not absolute",
            cobble_plan::go_quote(binary)
        )));
    }
    Ok(path)
}

/// Runs `binary` as a candidate, handing it `plan` (a [`Handover::plan`] as JSON) to read,
/// and returns the version and the handover formats it reports; refuses, with the reason,
/// one that cannot take over, or that does not read the handover `format` it would be
/// handed.
pub(crate) async fn probe(
    binary: &Path,
    pebble_dir: &Path,
    plan: &[u8],
    format: u32,
) -> Result<(String, Vec<u32>), ApiError> {
    let shown = cobble_plan::go_quote(&binary.to_string_lossy());
    let refuse = |why: String| ApiError::bad_request(format!("cannot re-execute {shown}: {why}"));
    let mut cmd = Command::new(binary);
    cmd.arg(PROBE_ARG)
        .arg(pebble_dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cobble_sys::inherit::on_exec(&mut cmd);
    let spawned = {
        let binary = binary.to_owned();
        tokio::task::spawn_blocking(move || {
            if std::fs::metadata(&binary).is_ok_and(|meta| meta.is_dir()) {
                return Err("is a directory".to_owned());
            }
            check_format(&binary)?;
            cobble_sys::reaper::spawn(&mut cmd).map_err(|e| cobble_sys::os_error_text(&e))
        })
        .await
        .map_err(|e| refuse(e.to_string()))?
    };
    let mut spawned = spawned.map_err(refuse)?;
    let pid = spawned.pid;
    let stdin = spawned.stdin.take();
    let stdout = spawned.stdout.take();
    let stderr = spawned.stderr.take();
    let plan = plan.to_vec();
    let read = tokio::task::spawn_blocking(move || {
        // Written on a thread of its own: a candidate that does not read its input (one
        // that fails first) must not hold up the reading of what it says.
        let writer = stdin.map(|mut stdin| {
            std::thread::spawn(move || {
                use std::io::Write;
                // A candidate that exits without reading it closes the pipe: not an error
                // here, its exit says what went wrong.
                let _ = stdin.write_all(&plan);
            })
        });
        let mut out = Vec::new();
        let mut err = Vec::new();
        if let Some(stdout) = stdout {
            let _ = stdout.take(MAX_PROBE_OUTPUT).read_to_end(&mut out);
        }
        if let Some(stderr) = stderr {
            let _ = stderr.take(MAX_PROBE_OUTPUT).read_to_end(&mut err);
        }
        if let Some(writer) = writer {
            let _ = writer.join();
        }
        (out, err)
    });
    let answered = tokio::time::timeout(PROBE_TIMEOUT, async {
        let status = spawned.exit.await.ok();
        let (out, err) = read.await.unwrap_or_default();
        (status, out, err)
    })
    .await;
    let Ok((status, out, err)) = answered else {
        if let Ok(kill) = cobble_sys::process::parse_signal("SIGKILL") {
            let _ = cobble_sys::process::signal_pid(pid, kill);
        }
        return Err(refuse(format!(
            "it did not answer within {}s",
            PROBE_TIMEOUT.as_secs()
        )));
    };
    let first_error_line = String::from_utf8_lossy(&err)
        .lines()
        .find(|l| !l.trim().is_empty())
        .map(|l| format!(": {}", l.trim()))
        .unwrap_or_default();
    match status {
        Some(status) if status.success() => {}
        Some(cobble_sys::reaper::ExitStatus::Signaled(signal)) => {
            return Err(refuse(format!(
                "it was killed by signal {signal} when asked whether it can take over"
            )));
        }
        Some(status) => {
            return Err(refuse(format!(
                "it cannot take over (asked with {PROBE_ARG}, it exited with status {}{first_error_line})",
                status.code()
            )));
        }
        None => return Err(refuse("its exit was not seen".to_owned())),
    }
    let text = String::from_utf8_lossy(&out);
    let Some(answer) = text
        .lines()
        .find_map(|line| serde_json::from_str::<ProbeAnswer>(line.trim()).ok())
    else {
        return Err(refuse(format!(
            "it cannot take over (asked with {PROBE_ARG}, it did not answer as cobble does): \
             not cobble, or a cobble too old to be re-executed into"
        )));
    };
    if !answer.formats.contains(&format) {
        let over = if format == HTTPS_FORMAT {
            " for a client that asks over HTTPS"
        } else {
            ""
        };
        return Err(refuse(format!(
            "cobble {} reads handover formats {:?}, and this daemon writes format {format}{over}",
            answer.version, answer.formats
        )));
    }
    Ok((answer.version, answer.formats))
}

/// Refuses a file `execve` would refuse as `ENOEXEC`: neither a script nor an executable
/// for this machine. The probe cannot tell: the C library's `execvp`, which runs it, gives a
/// file the kernel refuses to the shell instead, and the shell then fails in its own words.
fn check_format(binary: &Path) -> Result<(), String> {
    let head = |path: &Path| -> Option<Vec<u8>> {
        let mut bytes = Vec::new();
        std::fs::File::open(path)
            .ok()?
            .take(20)
            .read_to_end(&mut bytes)
            .ok()?;
        Some(bytes)
    };
    // Unreadable (execute-only) files are left to the kernel.
    let Some(theirs) = head(binary) else {
        return Ok(());
    };
    if theirs.starts_with(b"#!") {
        return Ok(());
    }
    let elf = |bytes: &[u8]| bytes.len() >= 20 && bytes.starts_with(b"\x7fELF");
    if !elf(&theirs) {
        return Err("exec format error".to_owned());
    }
    let ours = Path::new("/proc/self/exe");
    if let Some(ours) = head(ours).filter(|b| elf(b)) {
        // Class, byte order and machine.
        let kind = |b: &[u8]| (b[4], b[5], u16::from_le_bytes([b[18], b[19]]));
        if kind(&theirs) != kind(&ours) {
            return Err("exec format error (built for another architecture)".to_owned());
        }
    }
    Ok(())
}

/// The program's arguments, as it was started with them.
pub(crate) fn own_args() -> Vec<OsString> {
    std::env::args_os().collect()
}

/// The environment the new program gets: this one, and the handover's descriptor.
pub(crate) fn environment(handover_fd: RawFd) -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> = std::env::vars_os()
        .filter(|(k, _)| k != cobble_sys::reexec::HANDOVER_ENV)
        .collect();
    env.push((
        cobble_sys::reexec::HANDOVER_ENV.into(),
        handover_fd.to_string().into(),
    ));
    env
}

/// The answer the new program writes on the asking client's connection: a whole HTTP/1.1
/// response after which the connection closes.
pub(crate) fn reply_bytes(result: &cobble_client::types::ReexecResult) -> Vec<u8> {
    let body = serde_json::to_vec(&cobble_client::types::Envelope {
        kind: "sync".into(),
        status_code: 200,
        status: "OK".into(),
        change: None,
        result,
        latest_warning: None,
    })
    .expect("responses serialise");
    let mut bytes = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    bytes.extend_from_slice(&body);
    bytes
}

/// Why the daemon re-executes.
#[derive(Clone, Copy)]
pub(super) enum Cause<'a> {
    /// A client asked, and waits for the answer.
    Asked(&'a crate::api::reexec::ReexecAsk),
    /// One of its managers panicked: the program running now starts again, keeping the
    /// services, with no client waiting. The times of its recent panics, this one's included
    /// (see [`PANIC_LIMIT`]).
    Panicked(&'a [i128]),
}

/// The error of a re-execution into `binary` whose new program did not take over, for `why`.
pub(super) fn takeover_failed(binary: &str, why: &str) -> String {
    format!(
        "cannot re-execute {}: the new program did not take over: {why}",
        cobble_plan::go_quote(binary)
    )
}

/// An error answer for the client that asked for the re-execution, as [`reply_bytes`]
/// writes a result: a 500 whose connection closes.
fn error_bytes(message: &str) -> Vec<u8> {
    let body = serde_json::to_vec(&cobble_client::types::Envelope {
        kind: "error".into(),
        status_code: 500,
        status: "Internal Server Error".into(),
        change: None,
        result: serde_json::json!({ "message": message }),
        latest_warning: None,
    })
    .expect("responses serialise");
    let mut bytes = format!(
        "HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    bytes.extend_from_slice(&body);
    bytes
}

/// Carries out a re-execution for `cause`; returns only when the daemon did not re-execute,
/// with why, having put everything back as it was.
pub(super) async fn reexec_now(
    opts: &crate::RunOptions,
    kept: &super::Kept,
    daemon: &mut super::Daemon,
    servers: &mut super::Servers,
    stop_signals: &mut super::StopSignals,
    cause: Cause<'_>,
) -> (ApiError, Option<i32>) {
    let refused = reexec_checked(opts, kept, daemon, servers, stop_signals, cause).await;
    match refused {
        Ok(never) => match never {},
        Err(refused) => refused,
    }
}

/// [`reexec_now`], whose every early return is a refusal without a stop.
async fn reexec_checked(
    opts: &crate::RunOptions,
    kept: &super::Kept,
    daemon: &mut super::Daemon,
    servers: &mut super::Servers,
    stop_signals: &mut super::StopSignals,
    cause: Cause<'_>,
) -> Result<std::convert::Infallible, (ApiError, Option<i32>)> {
    let refuse = |e: ApiError| (e, None);
    if kept.embedded {
        return Err(refuse(ApiError::bad_request(
            "cannot re-execute: the daemon is run by another command (cobble enter)",
        )));
    }
    // After a panic, the image running now, which needs no probe; else the binary asked
    // for (or the own binary as it is on disk now, which may be a newer build).
    let image = match cause {
        Cause::Panicked(_) => kept.image.as_ref().map(AsRawFd::as_raw_fd),
        Cause::Asked(_) => None,
    };
    let binary = match (cause, image) {
        (Cause::Asked(ask), _) => resolve(&ask.binary),
        (Cause::Panicked(_), _) => resolve(""),
    };
    let binary = match binary {
        Ok(binary) => binary,
        Err(e) => return Err(refuse(e)),
    };
    // The candidate reads the plan it would be handed; asked again, below, if the plan
    // changes before the listeners pause.
    let carried = |daemon: &super::Daemon| {
        carry_plan(&daemon.service_changes.plan())
            .map_err(|why| ApiError::internal(format!("cannot re-execute: {why}")))
    };
    let probed = match carried(daemon) {
        Ok(layers) => serde_json::to_vec(&layers).expect("layers serialise"),
        Err(e) => return Err(refuse(e)),
    };
    let format = match cause {
        // No state file: the state goes in the document.
        _ if !opts.persist => STATE_FORMAT,
        Cause::Asked(ask) if matches!(ask.connection, Handable::Tls(_)) => HTTPS_FORMAT,
        _ => FORMAT,
    };
    let (mut version, mut reads) = match image {
        Some(_) => (crate::VERSION.to_owned(), READS.to_vec()),
        None => match probe(&binary, &opts.pebble_dir, &probed, format).await {
            Ok(answer) => answer,
            Err(e) => return Err(refuse(e)),
        },
    };
    if let Err(e) = wait_for_changes(&daemon.store).await {
        return Err(refuse(e));
    }
    let Some(listeners) = servers.pause().await else {
        return Err(refuse(ApiError::internal(
            "cannot re-execute: the API's servers have stopped",
        )));
    };
    // Every connection but the asker's answers its request and closes; one that takes
    // longer (a long poll) is cut by the exec, as a daemon's restart would cut it.
    if tokio::time::timeout(DRAIN_WAIT, servers.open.at_most(1))
        .await
        .is_err()
    {
        tracing::info!(
            "Re-executing with {} connections still open after {}s",
            servers.open.count().saturating_sub(1),
            DRAIN_WAIT.as_secs()
        );
    }
    let mut blockers = blockers(daemon);
    let plan = match carried(daemon) {
        Ok(layers) => layers,
        Err(e) => {
            servers.start(listeners, &daemon.cancel);
            return Err(refuse(e));
        }
    };
    let handed = serde_json::to_vec(&plan).expect("layers serialise");
    if blockers.is_empty() && image.is_none() && handed != probed {
        // A layer came between the probe and the pause: the candidate must read this plan.
        match probe(&binary, &opts.pebble_dir, &handed, format).await {
            Ok(again) => (version, reads) = again,
            Err(e) => {
                servers.start(listeners, &daemon.cancel);
                return Err(refuse(e));
            }
        }
    }
    // Each log target finishes the request it is making and sends nothing more: what it
    // holds then goes to the new program, and nothing is sent twice.
    if blockers.is_empty()
        && let Err(why) = daemon.forwarder.pause(FORWARD_WAIT).await
    {
        blockers.push(why);
    }
    // What services say on their notify sockets from now on waits there for whichever
    // program goes on; what was said before is in their machines when they are taken, at
    // once (the services' deadlines, a watchdog's, go on meanwhile).
    if blockers.is_empty()
        && let Err(why) = daemon.services.pause_notify(DRAIN_WAIT).await
    {
        blockers.push(why);
    }
    let (taken, paths) = if blockers.is_empty() {
        match daemon
            .services
            .take_over(reads.contains(&ENDINGS_FORMAT), SPAWN_WAIT)
            .await
        {
            Ok(taken) => (taken.services, taken.paths),
            Err(why) => {
                blockers = why;
                Default::default()
            }
        }
    } else {
        Default::default()
    };
    if !blockers.is_empty() {
        daemon.services.resume_notify();
        daemon.forwarder.resume();
        servers.start(listeners, &daemon.cancel);
        return Err(refuse(ApiError::bad_request(format!(
            "cannot re-execute: {}; a re-execution hands over services and their \
             changes, but no other change in progress",
            blockers.join(", ")
        ))));
    }
    // Each service's output reader stops between reads: what it read is in the log, what
    // it did not waits in the pipe for the new program.
    let mut detached = Vec::new();
    let mut services = Vec::new();
    // What the services' carried durations count from.
    let handed_at = taken
        .first()
        .map_or_else(cobble_sys::reexec::monotonic_now, |t| t.handed_at);
    for mut taken in taken {
        let output = match taken.output.take() {
            Some((stop, reader)) => {
                stop.cancel();
                reader.await.ok().flatten()
            }
            None => None,
        };
        let invocation = taken
            .carried
            .pid()
            .and_then(|pid| daemon.processes.invocation(pid));
        services.push(CarriedService::new(&taken, output.as_ref(), invocation));
        detached.push((taken.name, output));
    }
    // Each check stops between two runs, its change and task in progress: what it recorded
    // goes through the state file, where it stands goes into the document.
    let checks = daemon.checks.take_over().await;
    let logs = carried_logs(daemon).await;
    // What the services' changes were doing: their services are handed over, and their
    // tasks stand in the state file as they are now.
    let changes = daemon.service_changes.carried();
    // After the output readers have stopped: every line they read is queued.
    let forwarding = queued_forwarding(daemon);
    let processes = daemon.processes.clone();
    let sockets = tokio::task::spawn_blocking(move || processes.sockets().carried())
        .await
        .unwrap_or_default()
        .into_iter()
        .map(|(service, socket, fd)| CarriedSocket {
            service,
            socket,
            fd,
        })
        .collect();
    // The state goes through the state file: written whole, and nothing written after. With
    // no state file, it goes in the document.
    let mut state = None;
    let written = if opts.persist {
        daemon.persist_stop.cancel();
        match daemon.managers.take_persister() {
            Some(persister) => {
                let _ = persister.await;
                Ok(())
            }
            // It panicked: the state is written as it would have written it.
            None => crate::state::Persister::new(daemon.store.clone(), daemon.state_path.clone())
                .flush()
                .await
                .map(|_| ())
                .map_err(|e| {
                    ApiError::internal(format!("cannot re-execute: cannot write state file: {e}"))
                }),
        }
    } else {
        String::from_utf8(daemon.store.encoded())
            .map(|encoded| state = Some(encoded))
            .map_err(|e| ApiError::internal(format!("cannot re-execute: cannot encode state: {e}")))
    };
    let log_files = daemon.log_files.clone();
    let _ = tokio::task::spawn_blocking(move || {
        log_files.flush(FLUSH_WAIT);
    })
    .await;
    // A stop signal (or a service's shutdown action) that came while the daemon got ready
    // is for this program: it stops instead, its services handed back first.
    let stop = tokio::select! {
        biased;
        code = stop_signals.wait(&mut daemon.shutdown_requests) => Some(code),
        () = std::future::ready(()) => None,
    };
    // An `--https` connection taken out of the server, which this program answers on should
    // the exec fail: its server can no longer write on it.
    let mut surrendered = None;
    let error = match (stop, written) {
        (Some(_), _) => ApiError::internal("cannot re-execute: the daemon is stopping"),
        (None, Err(e)) => e,
        (None, Ok(())) => 'exec: {
            let (reply, panics) = match cause {
                Cause::Asked(ask) => match reply_for(ask, &binary).await {
                    Ok((reply, taken)) => {
                        surrendered = taken;
                        (Some(reply), Vec::new())
                    }
                    Err(e) => break 'exec e,
                },
                Cause::Panicked(panics) => (None, panics.to_vec()),
            };
            let target = Target {
                binary: &binary,
                image,
                version: &version,
                format,
            };
            let handed = Handed {
                reply,
                logs,
                services,
                plan,
                handed_at,
                panics,
                sockets,
                forwarding,
                checks: checks.clone(),
                changes,
                state,
                paths: CarriedPath::carried(paths),
            };
            exec_into(target, kept, &listeners, handed).await
        }
    };
    if let Some(mut taken) = surrendered {
        let bytes = error_bytes(&error.message);
        tokio::task::spawn_blocking(move || {
            if let Err(e) = crate::tls_handoff::answer(&taken.socket, &mut taken.sealer, &bytes) {
                tracing::warn!("Cannot answer the re-execution's client: {e}");
            }
        });
    }
    // Still here: everything goes back as it was (the notify readers first, so that what
    // was said meanwhile is read before the services' deadlines are acted on again).
    daemon.services.resume_notify();
    daemon.services.resume(detached);
    daemon.forwarder.resume();
    daemon.checks.resume(checks);
    if opts.persist {
        restart_persister(daemon);
    }
    servers.start(listeners, &daemon.cancel);
    Err((error, stop))
}

/// How long the logs' queues may take to be written before the exec.
const FLUSH_WAIT: Duration = Duration::from_secs(1);

/// The program a re-execution runs.
struct Target<'a> {
    /// Its path.
    binary: &'a Path,
    /// The open file executed instead of the path (the image running now).
    image: Option<RawFd>,
    /// Its version.
    version: &'a str,
    /// The handover format it is handed, unless a service being ended needs
    /// [`ENDINGS_FORMAT`].
    format: u32,
}

/// The [`Reply`] for the client that asked, on its connection: an `--https` one is taken
/// out of the server here (see [`crate::tls_handoff`]), and returned too, for this program
/// to answer on should the exec fail.
async fn reply_for(
    ask: &crate::api::reexec::ReexecAsk,
    binary: &Path,
) -> Result<(Reply, Option<crate::tls_handoff::Surrendered>), ApiError> {
    let (fd, taken) = match &ask.connection {
        Handable::Unix(fd) => (*fd, None),
        Handable::Tls(tls) => {
            let tls = tls.clone();
            let taken = tokio::task::spawn_blocking(move || tls.surrender())
                .await
                .map_err(|e| e.to_string())
                .and_then(|taken| taken)
                .map_err(|why| {
                    ApiError::internal(format!(
                        "cannot re-execute: cannot hand over the HTTPS connection: {why}"
                    ))
                })?;
            (taken.socket.as_raw_fd(), Some(taken))
        }
    };
    let reply = Reply {
        fd,
        binary: binary.to_string_lossy().into_owned(),
        asked_ns: ask.asked.as_nanosecond(),
        uid: ask.uid,
        pid: ask.pid,
        // The same session's next record number in both: only one program writes.
        tls: taken.as_ref().map(|t| t.sealer.clone()),
        addr: ask.addr,
    };
    Ok((reply, taken))
}

/// What the handover document carries besides the descriptors.
struct Handed {
    reply: Option<Reply>,
    logs: Vec<CarriedLog>,
    services: Vec<CarriedService>,
    plan: Vec<CarriedLayer>,
    /// When the services were taken over, on the monotonic clock.
    handed_at: Duration,
    panics: Vec<i128>,
    sockets: Vec<CarriedSocket>,
    forwarding: Vec<CarriedTarget>,
    checks: Vec<crate::checks::CarriedCheck>,
    changes: Vec<crate::services::changes::CarriedChange>,
    state: Option<String>,
    paths: Vec<CarriedPath>,
}

/// Writes the handover document, keeps the descriptors it names across `execve` and
/// executes the target; returns only if that fails, with the descriptors' flags set back.
async fn exec_into(
    target: Target<'_>,
    kept: &super::Kept,
    listeners: &super::Listeners,
    handed: Handed,
) -> ApiError {
    let Target {
        binary,
        image,
        version,
        format,
    } = target;
    let Handed {
        reply,
        logs,
        services,
        plan,
        handed_at,
        panics,
        sockets,
        forwarding,
        checks,
        changes,
        state,
        paths,
    } = handed;
    // The lowest format that carries everything handed over.
    let format = if services.iter().any(|s| s.ending.is_some()) {
        format.max(ENDINGS_FORMAT)
    } else {
        format
    };
    let handover = Handover {
        format,
        old_version: crate::VERSION.to_owned(),
        boot_id: kept.boot_id.clone(),
        lock: kept.lock,
        unix: listeners.unix.as_raw_fd(),
        http: listeners.http.as_ref().map(AsRawFd::as_raw_fd),
        https: listeners.https.as_ref().map(AsRawFd::as_raw_fd),
        reply,
        logs,
        services,
        plan: Some(plan),
        handed_at_ns: Some(u64::try_from(handed_at.as_nanos()).unwrap_or(u64::MAX)),
        panics,
        sockets,
        forwarding,
        checks,
        changes,
        state,
        paths,
        rest: BTreeMap::new(),
    };
    let bytes = serde_json::to_vec(&handover).expect("the handover serialises");
    let shown = cobble_plan::go_quote(&binary.to_string_lossy());
    if bytes.len() as u64 > MAX_DOCUMENT {
        return ApiError::internal(format!(
            "cannot re-execute {shown}: the handover document would take {} bytes, more than \
             the {MAX_DOCUMENT} a new program reads",
            bytes.len()
        ));
    }
    let document = match cobble_sys::reexec::handover_file(&bytes) {
        Ok(file) => file,
        Err(e) => {
            return ApiError::internal(format!(
                "cannot re-execute {shown}: cannot write handover document: {e}"
            ));
        }
    };
    let mut kept_fds = vec![handover.lock, handover.unix];
    kept_fds.extend(handover.reply.as_ref().map(|r| r.fd));
    kept_fds.extend(handover.http);
    kept_fds.extend(handover.https);
    kept_fds.extend(handover.services.iter().filter_map(|s| s.output));
    kept_fds.extend(
        handover
            .services
            .iter()
            .filter_map(|s| s.notify.as_ref().map(|n| n.fd)),
    );
    kept_fds.extend(handover.sockets.iter().map(|s| s.fd));
    kept_fds.push(document.as_raw_fd());
    // The program running now, for the new one to execute back into should it fail to take
    // over.
    let previous = kept.image.as_ref().map(AsRawFd::as_raw_fd);
    kept_fds.extend(previous);
    let mut inherited = Vec::new();
    let mut failed = None;
    for fd in kept_fds {
        match cobble_sys::reexec::set_inherited(fd, true) {
            Ok(()) => inherited.push(fd),
            Err(e) => {
                failed = Some(format!("cannot keep descriptor {fd}: {e}"));
                break;
            }
        }
    }
    let failed = match failed {
        Some(failed) => failed,
        None => {
            tracing::info!(
                "Re-executing daemon as {} (cobble {version}).",
                binary.display()
            );
            let binary = injected_fault(binary);
            let mut env = environment(document.as_raw_fd());
            if let Some(previous) = previous {
                env.push((
                    cobble_sys::reexec::PREVIOUS_IMAGE_ENV.into(),
                    previous.to_string().into(),
                ));
            }
            tokio::task::spawn_blocking(move || {
                // Nothing of the daemon's own log may be lost with the exec.
                crate::daemon_log::flush_all(FLUSH_WAIT);
                match image {
                    Some(image) => cobble_sys::reexec::exec_image(image, &own_args(), &env),
                    None => cobble_sys::reexec::exec(&binary, &own_args(), &env),
                }
            })
            .await
            .map_or_else(|e| e.to_string(), |e| cobble_sys::os_error_text(&e))
        }
    };
    for fd in inherited {
        let _ = cobble_sys::reexec::set_inherited(fd, false);
    }
    drop(document);
    ApiError::internal(format!("cannot re-execute {shown}: {failed}"))
}

/// In debug builds, with `COBBLE_TEST_FAULTS=1` in the daemon's environment, a binary named
/// `exec-fails` (which the probe runs as any other) is executed as a path that does not
/// exist, so that tests see a failing `execve` after a probe that passed. Release builds
/// have no such path.
#[cfg(debug_assertions)]
fn injected_fault(binary: &Path) -> PathBuf {
    if std::env::var_os("COBBLE_TEST_FAULTS").is_some()
        && binary.file_name().is_some_and(|n| n == "exec-fails")
    {
        return binary.join("injected-fault");
    }
    binary.to_owned()
}

#[cfg(not(debug_assertions))]
fn injected_fault(binary: &Path) -> PathBuf {
    binary.to_owned()
}

/// In debug builds, with `COBBLE_TEST_FAULTS=1` in the daemon's environment, `task` (the
/// state persister's) panics on SIGUSR2, so that tests see a manager panic. The signal is
/// caught from this call on, before the task first runs. Release builds have no such path.
#[cfg(debug_assertions)]
pub(super) fn injected_panic(
    task: impl Future<Output = ()> + Send + 'static,
) -> impl Future<Output = ()> + Send + 'static {
    use tokio::signal::unix::{SignalKind, signal};
    let fault = std::env::var_os("COBBLE_TEST_FAULTS")
        .is_some()
        .then(|| signal(SignalKind::user_defined2()).ok())
        .flatten();
    async move {
        match fault {
            Some(mut fault) => tokio::select! {
                () = task => {}
                _ = fault.recv() => panic!("injected fault (SIGUSR2)"),
            },
            None => task.await,
        }
    }
}

#[cfg(not(debug_assertions))]
pub(super) fn injected_panic<F: Future<Output = ()>>(task: F) -> F {
    task
}

/// Starts a persister again after a re-execution that did not happen.
fn restart_persister(daemon: &mut super::Daemon) {
    daemon.persist_stop = daemon.cancel.child_token();
    let mut persister =
        crate::state::Persister::new(daemon.store.clone(), daemon.state_path.clone());
    let stop = daemon.persist_stop.clone();
    daemon.managers.watch(
        super::Manager::Persister,
        tokio::spawn(injected_panic(async move {
            if let Err(e) = persister.flush().await {
                tracing::warn!("Cannot write state file: {e}");
            }
            persister.run(stop).await;
        })),
    );
}

/// Waits up to [`CHANGE_WAIT`] for the changes in progress that cannot be handed over (exec
/// sessions, whose websockets end with the process) to be ready; refuses, naming them, past
/// it. A check's change and a service change are not waited for: they are handed over.
async fn wait_for_changes(store: &crate::state::StateStore) -> Result<(), ApiError> {
    let deadline = tokio::time::Instant::now() + CHANGE_WAIT;
    let mut changed = store.subscribe();
    loop {
        let waited: Vec<String> = store
            .in_progress()
            .iter()
            .filter(|(_, kind, _)| !HANDED_CHANGES.contains(&kind.as_str()))
            .map(|(id, _, summary)| format!("change {id} ({summary})"))
            .collect();
        if waited.is_empty() {
            return Ok(());
        }
        if tokio::time::timeout_at(deadline, changed.changed())
            .await
            .is_err()
        {
            return Err(ApiError::bad_request(format!(
                "cannot re-execute: changes still in progress after {}s: {}",
                CHANGE_WAIT.as_secs(),
                waited.join(", ")
            )));
        }
    }
}

/// What keeps the daemon from handing over now: changes in progress that cannot be handed
/// over (exec sessions). (What of the services
/// cannot be handed over, the supervisor says when asked to hand them over.)
fn blockers(daemon: &super::Daemon) -> Vec<String> {
    let mut why = Vec::new();
    for (id, kind, summary) in daemon.store.in_progress() {
        if HANDED_CHANGES.contains(&kind.as_str()) {
            continue;
        }
        why.push(format!("change {id} ({summary}) is in progress"));
    }
    why
}

/// Answers the client that asked for the re-execution, on the connection handed over.
///
/// A program executed back into by a new one that failed to take over answers with why.
pub(super) fn answer_reexec(reply: Reply, old_version: Option<String>) {
    let result = cobble_client::types::ReexecResult {
        old_version: old_version.unwrap_or_default(),
        new_version: crate::VERSION.to_owned(),
        binary: reply.binary.clone(),
        pid: std::process::id(),
    };
    let (bytes, status) = match cobble_sys::reexec::takeover_failure() {
        Some(why) => (error_bytes(&takeover_failed(&reply.binary, why)), 500),
        None => (reply_bytes(&result), 200),
    };
    tokio::task::spawn_blocking(move || {
        let Reply {
            fd,
            asked_ns,
            uid,
            pid,
            tls,
            addr,
            ..
        } = reply;
        let fd = match cobble_sys::reexec::adopt(fd) {
            Ok(fd) => fd,
            Err(e) => {
                tracing::warn!("Cannot answer the re-execution's client: {e}");
                return;
            }
        };
        let (written, transport, remote) = match tls {
            Some(mut sealer) => {
                let socket = std::net::TcpStream::from(fd);
                (
                    crate::tls_handoff::answer(&socket, &mut sealer, &bytes),
                    crate::api::Transport::Https,
                    crate::daemon_log::Remote::Tcp(addr),
                )
            }
            None => {
                use std::io::Write;
                let stream = std::os::unix::net::UnixStream::from(fd);
                let _ = stream.set_nonblocking(false);
                let _ = stream.set_write_timeout(Some(Duration::from_secs(5)));
                let written = (&stream).write_all(&bytes);
                let _ = stream.shutdown(std::net::Shutdown::Write);
                (
                    written,
                    crate::api::Transport::Unix,
                    crate::daemon_log::Remote::Unix { pid, uid },
                )
            }
        };
        let asked =
            jiff::Timestamp::from_nanosecond(asked_ns).unwrap_or_else(|_| jiff::Timestamp::now());
        let now = jiff::Timestamp::now();
        crate::daemon_log::request(crate::daemon_log::RequestLine {
            at: now,
            method: axum::http::Method::POST,
            target: "/v1/cobble/reexec".into(),
            elapsed: now.duration_since(asked).unsigned_abs(),
            status,
            transport: transport.as_str(),
            remote,
        });
        if let Err(e) = written {
            tracing::warn!("Cannot answer the re-execution's client: {e}");
        }
    });
}

/// What a new program needs to execute back into its predecessor, until it has taken over.
struct Fallback {
    /// The predecessor's program, open.
    image: std::os::fd::OwnedFd,
    /// The handover document's descriptor.
    document: RawFd,
    /// Every descriptor handed over, as it was handed.
    reserve: cobble_sys::reexec::Reserve,
}

static FALLBACK: std::sync::Mutex<Option<Fallback>> = std::sync::Mutex::new(None);

/// Readies the new program, handed `document` by a predecessor that kept its own program
/// open for it, to execute back into that program should it fail to take over (see
/// [`fall_back`]): before anything reads or adopts what was handed over.
pub(super) fn arm_fallback(document: RawFd) {
    let Some(previous) = cobble_sys::reexec::previous_image() else {
        return;
    };
    crate::daemon_log::on_panic(on_panic);
    let image = match cobble_sys::reexec::adopt(previous) {
        Ok(image) => image,
        Err(e) => {
            tracing::warn!("Cannot keep the previous program to fall back to: {e}");
            return;
        }
    };
    match cobble_sys::reexec::Reserve::take(&[]) {
        Ok(reserve) => {
            let mut fallback = FALLBACK.lock().unwrap_or_else(|e| e.into_inner());
            let Fallback { image, reserve, .. } = fallback.insert(Fallback {
                image,
                document,
                reserve,
            });
            // A crash by signal executes back into the predecessor as a panic does, with
            // what the fallback keeps open until it is disarmed.
            use std::os::fd::AsRawFd;
            if let Err(e) = cobble_sys::reexec::arm_crash_fallback(
                image.as_raw_fd(),
                document,
                reserve,
                &own_args(),
                &environment(document),
            ) {
                tracing::warn!("Cannot fall back to the previous program after a crash: {e}");
            }
        }
        Err(e) => tracing::warn!("Cannot keep the handed-over descriptors to fall back: {e}"),
    }
}

/// The new program has taken over: nothing falls back any more.
pub(super) fn disarm_fallback() {
    cobble_sys::reexec::disarm_crash_fallback();
    if let Ok(mut fallback) = FALLBACK.lock() {
        fallback.take();
    }
}

/// A new program that failed to take over, for `why`, executes back into its predecessor
/// with the handover it was given, every descriptor as it was handed; the predecessor takes
/// over as a new program would and answers the waiting client with `why`. Returns only when
/// nothing is armed (see [`arm_fallback`]) or that `execve` fails.
pub(crate) fn fall_back(why: &str) {
    let Some(fallback) = FALLBACK.try_lock().ok().and_then(|mut f| f.take()) else {
        return;
    };
    // A crash in another thread meanwhile waits for this execve.
    cobble_sys::reexec::hold_crashes();
    use std::os::fd::AsRawFd;
    tracing::error!("Cannot take over: {why}; executing the previous program again.");
    let restored = fallback
        .reserve
        .restore()
        .and_then(|()| cobble_sys::reexec::Reserve::rewind(fallback.document));
    if let Err(e) = restored {
        cobble_sys::reexec::disarm_crash_fallback();
        tracing::error!("Cannot execute the previous program again: {e}");
        return;
    }
    let mut env = environment(fallback.document);
    env.push((
        cobble_sys::reexec::TAKEOVER_FAILED_ENV.into(),
        why.replace('\0', " ").into(),
    ));
    crate::daemon_log::flush_all(FLUSH_WAIT);
    let e = cobble_sys::reexec::exec_image(fallback.image.as_raw_fd(), &own_args(), &env);
    // Still here: a crash ends the program, before what the handler uses is closed.
    cobble_sys::reexec::disarm_crash_fallback();
    drop(fallback);
    tracing::error!(
        "Cannot execute the previous program again: {}",
        cobble_sys::os_error_text(&e)
    );
}

/// Called by the panic hook: a panic while the new program takes over executes back into
/// the predecessor (see [`fall_back`]).
fn on_panic(info: &std::panic::PanicHookInfo<'_>) {
    let armed = FALLBACK.try_lock().is_ok_and(|f| f.is_some());
    if !armed {
        return;
    }
    let payload = info
        .payload()
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| info.payload().downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_owned());
    let at = info
        .location()
        .map(|l| format!(" at {l}"))
        .unwrap_or_default();
    fall_back(&format!("it panicked{at}: {payload}"));
}

/// In debug builds, with `COBBLE_TEST_FAULTS=1` in the daemon's environment, a new program
/// asked for as a binary named `takeover-fails` fails to take over once it has adopted
/// everything but the services, one named `takeover-panics` panics there, and ones named
/// `takeover-segfaults` and `takeover-aborts` die there of SIGSEGV and SIGABRT; one executed
/// back into does not. Release builds have no such path.
#[cfg(debug_assertions)]
pub(super) fn injected_takeover_fault(reply: Option<&Reply>) -> Result<(), String> {
    if std::env::var_os("COBBLE_TEST_FAULTS").is_none()
        || cobble_sys::reexec::takeover_failure().is_some()
    {
        return Ok(());
    }
    let name = reply.and_then(|r| Path::new(&r.binary).file_name().map(|n| n.to_owned()));
    match name.as_ref().and_then(|n| n.to_str()) {
        Some("takeover-fails") => Err("injected fault".to_owned()),
        Some("takeover-panics") => panic!("injected fault (take-over)"),
        Some("takeover-segfaults") => {
            let segv = cobble_sys::process::parse_signal("SIGSEGV").expect("a signal");
            let _ = cobble_sys::process::signal_pid(std::process::id(), segv);
            // Delivered to whichever thread: this one waits for the handler's execve.
            loop {
                std::thread::park();
            }
        }
        Some("takeover-aborts") => std::process::abort(),
        _ => Ok(()),
    }
}

#[cfg(not(debug_assertions))]
pub(super) fn injected_takeover_fault(_: Option<&Reply>) -> Result<(), String> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_answer_names_this_build_and_its_formats() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("layers")).unwrap();
        let answer: ProbeAnswer =
            serde_json::from_str(&probe_answer(dir.path(), std::io::empty()).unwrap()).unwrap();
        assert_eq!(answer.version, crate::VERSION);
        assert_eq!(answer.formats, READS);
    }

    #[test]
    fn the_probe_refuses_what_it_could_not_start_from() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("layers")).unwrap();
        std::fs::write(dir.path().join(".pebble.state"), "").unwrap();
        let why = probe_answer(dir.path(), std::io::empty()).unwrap_err();
        assert!(why.starts_with("cannot load state file"), "{why}");
        std::fs::write(dir.path().join("layers/001-x.yaml"), "services: [").unwrap();
        let why = probe_answer(dir.path(), std::io::empty()).unwrap_err();
        assert!(why.starts_with("cannot load plan: "), "{why}");
        // Handed a plan, it reads that one, not the directory.
        std::fs::remove_file(dir.path().join(".pebble.state")).unwrap();
        let plan = br#"[{"order":1000,"label":"base","yaml":"services:\n  s:\n    override: replace\n    command: x\n"}]"#;
        assert!(probe_answer(dir.path(), &plan[..]).is_ok());
        let plan = br#"[{"order":1000,"label":"base","yaml":"services: ["}]"#;
        let why = probe_answer(dir.path(), &plan[..]).unwrap_err();
        assert!(why.starts_with("cannot load plan: layer \"base\""), "{why}");
        let why = probe_answer(dir.path(), &b"not json"[..]).unwrap_err();
        assert!(why.starts_with("cannot read the plan handed over"), "{why}");
    }

    #[test]
    fn a_handover_reads_back_and_keeps_what_a_later_format_adds() {
        let text = r#"{"format":2,"old_version":"0.1.0","boot_id":"b","lock":3,"unix":4,
            "http":null,"https":5,"reply":null,"sessions":{"web":1}}"#;
        let handover: Handover = serde_json::from_str(text).unwrap();
        assert_eq!(handover.https, Some(5));
        assert_eq!(handover.rest["sessions"]["web"], 1);
        assert!(handover.services.is_empty() && handover.logs.is_empty());
        assert!(handover.checks.is_empty() && handover.changes.is_empty());
    }

    #[test]
    fn a_service_being_stopped_or_not_ready_reads_back_with_its_deadline() {
        use crate::services::machine::{AfterExit, CarriedPhase};
        let service = |phase: &str, extra: &str| -> CarriedService {
            let text = format!(
                r#"{{"name":"s","pid":42,"phase":"{phase}","output":null,"invocation":null,
                "start_count":1,"since_ns":null,"backoff_num":0,"backoff_ns":0,
                "reset_in_ns":null,"running_ns":null,"last_exit":null,
                "due_in_ns":3000000000{extra}}}"#
            );
            serde_json::from_str(&text).unwrap()
        };
        let due_in = Duration::from_secs(3);
        let stopping = service("stopping", "").carried().unwrap();
        assert_eq!(
            stopping.phase,
            CarriedPhase::Stopping {
                pid: 42,
                killing: false,
                due_in,
                after: AfterExit::Stop,
            }
        );
        assert_eq!(stopping.pid(), Some(42));
        let killing = service("killing", "").carried().unwrap();
        assert_eq!(
            killing.phase,
            CarriedPhase::Stopping {
                pid: 42,
                killing: true,
                due_in,
                after: AfterExit::Stop,
            }
        );
        let starting = service("starting", r#","ready_signal":true,"start_pending":true"#)
            .carried()
            .unwrap();
        assert_eq!(
            starting.phase,
            CarriedPhase::Starting {
                pid: 42,
                okay_in: due_in,
                ready_signal: true
            }
        );
        assert!(starting.start_pending);
        // Written before the fields were: not ready-signalled, no start waiting.
        let starting = service("starting", "").carried().unwrap();
        assert!(matches!(
            starting.phase,
            CarriedPhase::Starting {
                ready_signal: false,
                ..
            }
        ));
        assert!(!starting.start_pending);
    }

    #[test]
    fn a_format_2_service_reads_as_running_with_its_process() {
        let text = r#"{"name":"s","pid":42,"output":7,"invocation":"i","start_count":3,
            "since_ns":null,"backoff_num":1,"backoff_ns":500000000,"reset_in_ns":null,
            "running_ns":1000000000,"last_exit":1}"#;
        let service: CarriedService = serde_json::from_str(text).unwrap();
        let carried = service.carried().unwrap();
        assert_eq!(
            carried.phase,
            crate::services::machine::CarriedPhase::Running {
                pid: 42,
                oneshot_run: false
            }
        );
        assert_eq!(carried.backoff_num, 1);
        assert_eq!(carried.running_for, Some(Duration::from_secs(1)));
    }

    #[test]
    fn a_service_without_a_process_reads_back_where_it_stood() {
        let text = r#"{"name":"s","pid":null,"phase":"backoff","output":null,
            "invocation":null,"start_count":2,"since_ns":null,"backoff_num":2,
            "backoff_ns":1000000000,"reset_in_ns":null,"running_ns":null,"last_exit":3,
            "due_in_ns":4000000000,"hints":["/etc/a"],
            "file_change":{"in_ns":100,"signal":"SIGHUP"}}"#;
        let service: CarriedService = serde_json::from_str(text).unwrap();
        let carried = service.carried().unwrap();
        assert_eq!(
            carried.phase,
            crate::services::machine::CarriedPhase::Backoff {
                until_in: Duration::from_secs(4)
            }
        );
        assert_eq!(carried.pid(), None);
        assert_eq!(carried.hints, ["/etc/a"]);
        assert_eq!(
            carried.file_change,
            Some((
                Duration::from_nanos(100),
                crate::services::machine::FileAction::Signal("SIGHUP".into())
            ))
        );
        // A running process without a pid is a document that contradicts itself.
        let text = r#"{"name":"s","phase":"running","output":null,"invocation":null,
            "start_count":1,"since_ns":null,"backoff_num":0,"backoff_ns":0,
            "reset_in_ns":null,"running_ns":null,"last_exit":null}"#;
        let service: CarriedService = serde_json::from_str(text).unwrap();
        assert!(service.carried().is_none());
    }

    #[test]
    fn format_3_carries_sockets_notify_watchdogs_and_forwarding_and_format_2_reads_without() {
        let text = r#"{"format":3,"old_version":"0.1.0","boot_id":"b","lock":3,"unix":4,
            "http":null,"https":null,"reply":null,
            "services":[{"name":"s","pid":10,"output":null,"invocation":null,"start_count":1,
              "since_ns":null,"backoff_num":0,"backoff_ns":0,"reset_in_ns":null,
              "running_ns":null,"last_exit":null,
              "watchdog":{"interval_ns":5000000000,"ready_ago_ns":3000000000,
                "last_ping_ago_ns":1000000000,"since_ago_ns":1000000000},
              "notify":{"address":"@n","fd":7,"status":"up"},"taken_at_ns":42}],
            "sockets":[{"service":"s","socket":"http","fd":8}],
            "forwarding":[{"target":"t","entries":[{"time_ns":1,"service":"s",
              "message":"m","labels":{"k":"v"}}]}]}"#;
        let handover: Handover = serde_json::from_str(text).unwrap();
        let service = &handover.services[0];
        let carried = service.carried().unwrap().watchdog.unwrap();
        assert_eq!(carried.interval, Some(Duration::from_secs(5)));
        assert_eq!(carried.last_ping_ago, Some(Duration::from_secs(1)));
        let notify = service.notify.as_ref().unwrap();
        assert_eq!((notify.fd, notify.status.as_deref()), (7, Some("up")));
        assert!(!notify.reloading && !notify.stopping);
        assert_eq!(handover.sockets[0].fd, 8);
        let forwarded = carried_forwarding(handover.forwarding);
        assert_eq!(forwarded["t"].entries[0].labels["k"], "v");
        // From a document that had no counters: counted from 0.
        assert_eq!((forwarded["t"].sent, forwarded["t"].dropped), (0, 0));
        // A format 2 document has none of them, and reads as before.
        let text = r#"{"format":2,"old_version":"0.1.0","boot_id":"b","lock":3,"unix":4,
            "http":null,"https":null,"reply":null,
            "services":[{"name":"s","pid":10,"output":null,"invocation":null,"start_count":1,
              "since_ns":null,"backoff_num":0,"backoff_ns":0,"reset_in_ns":null,
              "running_ns":null,"last_exit":null}]}"#;
        let handover: Handover = serde_json::from_str(text).unwrap();
        let service = &handover.services[0];
        assert!(service.watchdog.is_none() && service.notify.is_none());
        assert!(handover.sockets.is_empty() && handover.forwarding.is_empty());
    }

    #[test]
    fn the_reply_is_a_whole_response_that_closes_its_connection() {
        let bytes = reply_bytes(&cobble_client::types::ReexecResult {
            old_version: "1".into(),
            new_version: "2".into(),
            binary: "/b".into(),
            pid: 1,
        });
        let text = String::from_utf8(bytes).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"));
        assert!(head.contains("Connection: close"));
        assert!(head.contains(&format!("Content-Length: {}", body.len())));
        let value: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(value["result"]["old-version"], "1");
        assert_eq!(value["result"]["new-version"], "2");
    }

    #[test]
    fn the_plan_is_carried_layer_by_layer_and_reads_back_as_itself() {
        let base = cobble_plan::Layer::parse(
            1000,
            "base",
            "services:\n  s:\n    override: replace\n    command: sleep 1\n",
        )
        .unwrap();
        let plan = cobble_plan::Plan::from_layers(vec![base]).unwrap();
        let args = BTreeMap::from([("s".to_owned(), vec!["2".to_owned()])]);
        let args = cobble_plan::service_args_layer(&plan, &args).unwrap();
        let plan = plan.add_layer(args, false, false).unwrap();
        let carried = carry_plan(&plan).unwrap();
        assert_eq!(carried[1].label, cobble_plan::SERVICE_ARGS_LABEL);
        assert_eq!(carried_plan(&carried).unwrap(), plan);
        // What a build cannot read (here, a field it does not know) is refused, naming the
        // layer.
        let unknown = [CarriedLayer {
            order: 1000,
            label: "base".into(),
            yaml: "services:\n  s:\n    override: replace\n    command: x\n    bogus: 1\n".into(),
        }];
        let why = carried_plan(&unknown).unwrap_err();
        assert!(why.starts_with("cannot load plan: layer \"base\""), "{why}");
    }

    #[test]
    fn relative_binaries_are_refused() {
        assert!(resolve("cobble").is_err());
        assert_eq!(
            resolve("/usr/bin/cobble").unwrap(),
            Path::new("/usr/bin/cobble")
        );
    }
}
