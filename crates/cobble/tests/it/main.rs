//! Black-box tests of the `cobble` binary: each test runs the real executable, most of them
//! against a real daemon (`cobble run`) on a temporary `$PEBBLE` directory.
//!
//! [`fixture::Test`] is a `#[must_use]` builder in the style of casey/just's tests;
//! [`fixture::Daemon`] starts a daemon, waits (bounded) for its socket, and stops it with
//! SIGTERM on drop (SIGKILL if it does not go).

mod fixture;

mod access;
mod actions;
mod background;
mod beyond;
mod changes;
mod chaos;
mod checks;
mod daemon_log;
mod demo;
mod disk;
mod docs;
mod edges;
mod enter;
mod entrypoint;
mod exec;
mod exec_cli;
mod files;
mod footprint;
mod formats;
mod forward;
mod go_client;
mod guides;
mod hostile;
mod https_identity;
mod identities;
mod inherited;
mod limits;
mod logs;
mod notices;
mod offline;
mod oneshots;
mod pebble_state;
mod plan;
mod reexec;
mod resources;
mod robustness;
mod scenarios;
mod schedule;
mod self_healing;
mod services;
mod sockets;
mod supervision;
mod systemd;
mod watchdog;
mod workloads;
