#![forbid(unsafe_code)]
#![warn(missing_docs)]
//! The Pebble-compatible configuration model: layers, the plan they combine into, and the
//! rules for ordering services.
//!
//! This crate is pure: no async, no clocks, no processes. Its only IO is reading layer files
//! in [`Plan::load_dir`]. Everything the daemon knows about configuration comes from here, in
//! the exact shapes and words Pebble uses, so that layer YAML, `GET /v1/plan` output and error
//! messages stay drop-in compatible.
//!
//! # Layout
//!
//! Data flows one way: YAML text → [`Layer`] → [`Plan`] → orders, lanes and YAML out.
//!
//! - `layer` — [`Layer::parse`] turns one YAML document into a [`Layer`]: strict decoding
//!   (unknown and duplicate keys are errors) into private mirror structs, then conversion to
//!   the public types with the per-layer checks Pebble makes (reserved names, command syntax,
//!   allowed actions, non-zero check durations, log-target labels). Errors name the layer,
//!   the section and the line.
//! - `service`, `check` — [`Service`], [`Check`] and [`LogTarget`], the entries of a layer,
//!   with their merge rules. "Unset" is represented explicitly (empty string, `None`, empty
//!   collection, an `Unknown`/`Unset` variant) because merging depends on it; defaults are
//!   applied by accessors such as [`Service::backoff_delay`] and never stored, which is why
//!   the plan prints back only what layers said.
//! - `plan` — [`Plan::from_layers`] sorts layers by order and combines them: per entry,
//!   `override: replace` swaps the whole entry and `override: merge` takes set scalars,
//!   appends lists and merges maps per key. The result is validated as a whole (commands
//!   present, exactly one check type, referenced services exist, no before/after cycles). A
//!   plan is an immutable value: [`Plan::add_layer`] returns a new plan, so a rejected layer
//!   changes nothing. [`service_args_layer`] builds the `pebble run --args` layer.
//! - `workload` — [`Workload`] and [`PairingMode`], the `workloads:` and `pairing:`
//!   sections, which Pebble adds as plan extensions and which follow their own rules: a
//!   workload's `override` is checked when layers are combined, and the workloads cannot
//!   change once the daemon has loaded its layers ([`Plan::add_layer`] refuses it).
//!   [`Plan::service_to_run`] is a service with its workload applied.
//! - `order` — [`Plan::start_order`] and [`Plan::stop_order`] pick the services involved
//!   through `requires` and sort them by `after`/`before`; [`Plan::lanes`] groups them into
//!   the chains the daemon runs concurrently (only `requires` shares a lane).
//! - `emit` — [`Plan::to_yaml`], the plan printed the way Pebble prints it (Go yaml.v3).
//! - `layers_dir` — [`Plan::load_dir`]: `$PEBBLE/layers`, with `NNN-label.d/` sub-directories.
//! - [`duration`] — Go's `time.ParseDuration` and `Duration.String()`, used for every
//!   duration in layers and in the API.
//! - `limits` — [`Rlimit`], [`RlimitValue`] and [`Resources`]: the `rlimits:` and
//!   `resources:` of a service (cobble extensions), parsed from their text and printed back
//!   in one spelling.
//! - `context` — [`Plan::merge_service_context`]: a command run in a service's context
//!   (exec checks, `POST /v1/exec`) inherits its environment, identity and directory.
//! - [`schedule`] — [`Schedule`], a service's `schedule:` in snapd's timer string format,
//!   and the next time it names after a given wall-clock time.
//! - `shell` — [`shell_split`] / [`shell_join`], the command-line word rules Pebble uses for
//!   `command`; [`Service::parse_command`] adds the `[ default args ]` group on top.
//! - `error` — [`PlanError`].
//!
//! Errors are one enum, [`PlanError`], whose messages are Pebble's. The daemon adds its own
//! prefix where Pebble's API does (for example `cannot parse layer YAML: `).

mod check;
mod context;
pub mod duration;
mod emit;
mod error;
pub mod fields;
mod layer;
mod layers_dir;
mod limits;
mod log_target;
mod order;
mod pebble_errors;
mod plan;
pub mod schedule;
mod service;
mod shell;
mod simple_yaml;
mod sockets;
mod workload;

pub use check::{
    Check, CheckLevel, DEFAULT_CHECK_PERIOD, DEFAULT_CHECK_THRESHOLD, DEFAULT_CHECK_TIMEOUT,
    ExecCheck, HttpCheck, LogTarget, TcpCheck,
};
pub use context::ContextOptions;
pub use duration::{DurationError, GoDuration, format_duration, go_quote, parse_duration};
pub use emit::scalar as yaml_scalar;
pub use error::{CommandError, PlanError};
pub use layer::Layer;
pub use layers_dir::read_layers;
pub use limits::{
    CountLimit, CpuMax, DEFAULT_CPU_PERIOD_US, LimitValue, MemoryLimit, Resources, Rlimit,
    RlimitValue, Rlimits,
};
pub use log_target::{SyslogTransport, syslog_address};
pub use plan::{Plan, SERVICE_ARGS_LABEL, service_args_layer};
pub use schedule::{Occurrence, Schedule};
pub use service::{
    DEFAULT_BACKOFF_DELAY, DEFAULT_BACKOFF_FACTOR, DEFAULT_BACKOFF_LIMIT, DEFAULT_KILL_DELAY,
    FileChangeAction, Override, Readiness, SIGNAL_NAMES, Service, ServiceAction, ServiceType,
    Startup, command_string,
};
pub use shell::{ShellError, shell_join, shell_quote, shell_split};
pub use sockets::{HeldProbe, HeldSocket, ListenAddress};
pub use workload::{PairingMode, Workload};
