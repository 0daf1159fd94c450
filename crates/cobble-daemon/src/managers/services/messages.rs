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
    /// (each) and change nothing.
    TakeOver {
        reply: oneshot::Sender<Result<Vec<Taken>, Vec<String>>>,
    },
    /// The re-execution did not happen: follow the services taken over again, their output
    /// read from the pipes given back.
    Resume {
        services: Vec<(String, Option<crate::logs::capture::Detached>)>,
    },
    /// Follow the services a predecessor handed over.
    Adopt {
        services: Vec<Adoption>,
        reply: oneshot::Sender<()>,
    },
    /// Answered at once: proof that the actor takes requests.
    Ping {
        reply: oneshot::Sender<()>,
    },
    /// Stops the actor from taking anything more, as a bug that blocks it would.
    #[cfg(test)]
    Wedge,
}
