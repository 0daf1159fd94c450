//! Spawning and tracking OS processes: the one place that forks, signals and reads `/proc`
//! for the processes cobble starts for others.
//!
//! - [`launch`]: how a command is started (the program looked up like Go's `LookPath`, its
//!   user, group, environment and working directory, and its [`launch::Wiring`]: pipes, a
//!   terminal, its own process group or session). Services, exec checks and exec requests
//!   all start through it.
//! - [`launcher`]: how an exec check or an exec request gets its command: recorded, launched
//!   on the blocking pool, and owned as a [`launcher::Group`] that is killed if let go of
//!   before the command has exited.
//! - [`registry`]: the on-disk record of the process groups running, written before any
//!   command cobble starts for others may run, so a daemon killed at any instant leaves nothing its
//!   successor cannot find and end.
//! - [`members`]: which processes belong to one run of a service, including the ones that
//!   left its process group or were orphaned.
//! - [`supervise`]: what the supervisor does to processes, behind the [`Processes`] trait
//!   (the real [`OsProcesses`], or scripted ones in tests).
//! - [`sockets`]: the listening sockets held for services across their restarts, passed to
//!   each run with systemd's socket-activation protocol.
//! - [`cgroup`]: a cgroup per run of a service with `resources:`, where one can be had.
//! - [`notify`]: the socket a service with `readiness: notify` says it is ready on.
//!
//! The managers above (services, exec, checks) depend on this module; it depends on none of
//! them. Everything here may block: callers run it on the blocking pool.

pub(crate) mod cgroup;
pub(crate) mod launch;
pub(crate) mod launcher;
pub(crate) mod members;
pub(crate) mod notify;
pub(crate) mod registry;
pub(crate) mod sockets;
pub(crate) mod supervise;

pub(crate) use supervise::{
    Escaped, GroupSignal, OsProcesses, Processes, SpawnError, Spawned, Usage,
};
