//! What the handle and the actor say to each other: the [`Request`]s the handle sends, each
//! with the oneshot channel its answer comes back on, and the [`StartReply`] a start gets.
//! Neither side imports the other for them.

use tokio::sync::oneshot;

use super::ServiceStatus;
use super::machine::{StartOutcome, StopOutcome};
use crate::logs::ServiceLog;

/// The reply to a start request: the outcome and, for failures that ask for it, the service's
/// most recent output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StartReply {
    pub outcome: StartOutcome,
    pub output: Vec<String>,
}

/// What the actor hands over for a re-execution ([`Request::TakeOver`]).
pub(crate) struct TakenOver {
    pub services: Vec<Taken>,
    /// Each watched path's fingerprint as the services last acted on it: what changed since
    /// (during the swap, say) is for the new program to act on.
    pub paths: crate::watch::Baseline,
}

/// A service the actor hands over for a re-execution ([`Request::TakeOver`]).
pub(crate) struct Taken {
    pub name: String,
    pub carried: super::machine::Carried,
    pub start_count: u64,
    /// When its status last changed.
    pub since: Option<jiff::Timestamp>,
    /// When a one-shot last completed.
    pub completed_at: Option<jiff::Timestamp>,
    /// What of its `resources:` was not enforced at its last spawn, and why.
    pub unenforced: Option<String>,
    /// When it was taken over, on the monotonic clock: what its durations count from.
    pub handed_at: std::time::Duration,
    /// Its output's reader, which the caller stops to take the pipe.
    pub output: Option<(
        tokio_util::sync::CancellationToken,
        tokio::task::JoinHandle<Option<crate::logs::capture::Detached>>,
    )>,
    /// Its notify socket, under `readiness: notify`.
    pub notify: Option<TakenNotify>,
    /// The configuration it runs, or last ran if it is down, when the plan has changed it
    /// since.
    pub ran: Option<std::sync::Arc<cobble_plan::Service>>,
}

/// A `readiness: notify` service's socket, handed over with what its instance said on it.
pub(crate) struct TakenNotify {
    /// `$NOTIFY_SOCKET`.
    pub address: String,
    /// The bound socket, which the daemon still owns.
    pub fd: std::os::fd::RawFd,
    pub status: Option<String>,
    pub reloading: bool,
    pub stopping: bool,
}

/// A notify socket's reader told to stop ([`Request::PauseNotify`]): its task, and its
/// messages in flight, all `messages` permits of which are free once the actor has handled
/// each.
pub(crate) struct PausedReader {
    pub task: tokio::task::JoinHandle<()>,
    pub in_flight: std::sync::Arc<tokio::sync::Semaphore>,
    pub messages: u32,
}

/// A handed-over notify socket, taken by the new program.
pub(crate) struct AdoptedNotify {
    pub socket: std::os::fd::OwnedFd,
    pub address: String,
    pub status: Option<String>,
    pub reloading: bool,
    pub stopping: bool,
}

/// A service a re-executed daemon takes over ([`Request::Adopt`]).
pub(crate) struct Adoption {
    pub name: String,
    pub carried: super::machine::Carried,
    /// The instant of the handover, on this program's clock: what the carried durations
    /// count from.
    pub at: tokio::time::Instant,
    pub start_count: u64,
    pub since: Option<jiff::Timestamp>,
    pub completed_at: Option<jiff::Timestamp>,
    pub unenforced: Option<String>,
    /// Its output's pipe, and the start of a line the predecessor read but did not finish.
    pub reader: Option<tokio::net::unix::pipe::Receiver>,
    pub unfinished: Vec<u8>,
    /// Its process's exit, from the reaper (none without a process).
    pub exit: Option<futures_util::future::BoxFuture<'static, i32>>,
    /// Its process was gone (reaped) before it could be adopted: its exit is unknown.
    pub gone: bool,
    /// Its notify socket, under `readiness: notify`.
    pub notify: Option<AdoptedNotify>,
    /// The configuration it runs or last ran, when the plan has changed it since
    /// ([`Taken::ran`]).
    pub ran: Option<cobble_plan::Service>,
}

/// The start or stop a handed-over service was in the middle of (its okay delay, its
/// `READY=1`, a one-shot's run, a stop's kill-delay), answered once it ends under the new
/// program, as it would have been answered under the old one.
#[derive(Default)]
pub(crate) struct InFlight {
    pub start: Option<oneshot::Receiver<StartReply>>,
    pub stop: Option<oneshot::Receiver<StopOutcome>>,
}

/// What the handle asks of the actor.
pub(super) enum Request {
    Start {
        name: String,
        /// A client's start or restart, which runs a completed one-shot again; autostart and
        /// replan leave it completed.
        again: bool,
        reply: oneshot::Sender<StartReply>,
    },
    /// A change is about to start these one-shots (`expect`), or has asked for them or
    /// given up on them: meanwhile what is ordered after them counts them as under way.
    Expect {
        names: Vec<String>,
        expect: bool,
    },
    Stop {
        name: String,
        reply: oneshot::Sender<StopOutcome>,
    },
    AbortStart {
        name: String,
    },
    Statuses {
        names: Vec<String>,
        details: bool,
        reply: oneshot::Sender<Vec<ServiceStatus>>,
    },
    Signal {
        names: Vec<String>,
        signal: String,
        reply: oneshot::Sender<Result<(), String>>,
    },
    Outdated {
        reply: oneshot::Sender<Vec<String>>,
    },
    Active {
        reply: oneshot::Sender<Vec<String>>,
    },
    Logs {
        names: Vec<String>,
        reply: oneshot::Sender<Vec<(String, ServiceLog)>>,
    },
    /// The output of services a re-executed daemon's predecessor had started: each gets
    /// its slot, as a service started and stopped, with those lines in its log.
    Carry {
        logs: Vec<(String, Vec<crate::logs::ring::LogEntry>)>,
        reply: oneshot::Sender<()>,
    },
    /// Hand every running service over for a re-execution, or, when one cannot be, say why
    /// (each) and change nothing; answered once no service is being spawned.
    TakeOver {
        /// Whether the new program takes over a service being ended for another reason
        /// than a client's stop (a check's or file change's restart, a failed start, a
        /// watchdog's failure); if not, such a service refuses the take-over.
        endings: bool,
        reply: oneshot::Sender<Result<TakenOver, Vec<String>>>,
    },
    /// The services whose process is being spawned now, by name.
    Spawning {
        reply: oneshot::Sender<Vec<String>>,
    },
    /// Stop every notify socket's reader between two datagrams, before a take-over, so that
    /// what a service says meanwhile waits in its socket for whichever program goes on.
    PauseNotify {
        reply: oneshot::Sender<Vec<PausedReader>>,
    },
    /// Start the notify sockets' readers stopped by [`Request::PauseNotify`] again: the
    /// re-execution did not happen.
    ResumeNotify,
    /// The re-execution did not happen: follow the services taken over again, their output
    /// read from the pipes given back.
    Resume {
        services: Vec<(String, Option<crate::logs::capture::Detached>)>,
    },
    /// Follow the services a predecessor handed over; answered with the starts and stops
    /// each was in the middle of, which end under this program.
    Adopt {
        services: Vec<Adoption>,
        /// The watched paths as the predecessor last acted on them.
        paths: crate::watch::Baseline,
        reply: oneshot::Sender<Vec<(String, InFlight)>>,
    },
    /// Answered at once: proof that the actor takes requests.
    Ping {
        reply: oneshot::Sender<()>,
    },
    /// Stops the actor from taking anything more, as a bug that blocks it would.
    #[cfg(test)]
    Wedge,
}
