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
    /// Answered at once: proof that the actor takes requests.
    Ping {
        reply: oneshot::Sender<()>,
    },
    /// Stops the actor from taking anything more, as a bug that blocks it would.
    #[cfg(test)]
    Wedge,
}
