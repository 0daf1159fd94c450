//! Service supervision.
//!
//! The [`ServiceManager`] is an actor: one task owns every service's [`machine::Machine`], its
//! process and its output log, and is driven through a cloneable handle with typed messages.
//! Requests (start, stop, signal, status), process exits, deadlines, path changes and the
//! checks that are down all become events of the pure machine; the actor only performs the
//! actions it returns and sleeps until the earliest deadline of any service. It never blocks:
//! everything that touches processes or files ([`crate::process::Processes`]: spawning,
//! signalling a group and its escaped descendants, the registry) runs on the blocking pool and
//! comes back as a message, and service output goes to bounded queues ([`crate::logs`]).
//!
//! Paths feed the machines too: the [`crate::watch::PathWatcher`] watches every path some
//! machine cares about ([`machine::Machine::watched_paths`]), and each change becomes the
//! events the machine says it means ([`machine::Machine::path_events`]). Checks feed them
//! through the firing map the check manager publishes: the actor hands the map as it stands
//! to every service that acts on checks, so an action is decided against the present, never
//! against a queued report. Each spawned process group is recorded in the
//! [`crate::process::registry`] before the actor hears of it, so a daemon restarted after a
//! crash can end its predecessor's processes before starting anything.
//!
//! Changes and tasks are not the engine: [`changes`] turns an API request into a change whose
//! runners ask the actor to start or stop one service at a time and record what happened.
//!
//! # Layout
//!
//! - `handle`: [`ServiceManager`], which sends the requests and awaits each answer.
//! - `messages`: the requests and the reply to a start, which the handle and the actor share.
//! - `actor`: the task that owns the services and performs their machines' actions.
//! - [`machine`]: the pure per-service state machine, table- and property-tested.
//! - `policy`: the plan's service configuration as the machine's [`machine::Policy`].
//! - [`status`]: what `GET /v1/services` and `cobble why` report of a service.
//! - `accounting`: what services use, read on demand, at most once a second each.
//! - [`changes`]: API requests as changes and tasks, run lane by lane.
//! - [`hints`]: the paths a failed service's last output names as missing.
//! - [`scheduler`]: the services started at the times their `schedule:` names.

mod accounting;
mod actor;
pub(crate) mod changes;
mod handle;
pub(crate) mod hints;
pub(crate) mod machine;
mod messages;
mod policy;
pub(crate) mod scheduler;
pub(crate) mod status;
#[cfg(test)]
mod tests;

pub(crate) use handle::ServiceManager;
pub(crate) use messages::{
    AdoptedNotify, Adoption, InFlight, PausedReader, StartReply, Taken, TakenNotify, TakenOver,
};
pub(crate) use status::ServiceStatus;

/// Lines of output copied into the task log when a start fails.
pub(crate) const LAST_LOG_LINES: usize = 20;

/// The signal name that makes the actor panic, in debug builds with `COBBLE_TEST_FAULTS=1`
/// in the daemon's environment: for the tests of what happens when the supervisor dies.
/// Release builds have no such path.
pub const PANIC_SIGNAL: &str = "COBBLE-TEST-PANIC";
