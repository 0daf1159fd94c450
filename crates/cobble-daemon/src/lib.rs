//! The cobble daemon: everything behind `cobble run`, as a library with one entry point, [`run`].
//!
//! cobble is a service manager for containers that speaks Pebble's contract (layers, the HTTP
//! API on a unix socket, the CLI) and supervises services level-triggered: for every service
//! it keeps what is wanted and what is, and a pure state machine decides what to do next.
//!
//! # Layout
//!
//! The modules stand in tiers, each folder one tier; a module uses only its own tier and the
//! ones below it, and the module graph has no cycles (a test, `module_graph`, checks both).
//! Every module is re-exported at the crate root for the crate's own use, so a path names the
//! module, not its tier; outside the crate only [`run`], [`run_embedded`], their options and
//! the few items re-exported below are visible. These docs are for the daemon's maintainers:
//! read them with `cargo doc -p cobble-daemon --document-private-items`. See
//! `docs/architecture.md` for the whole tree and the path of one request.
//!
//! **Base** (`base/`): what every manager may use.
//!
//! - [`atomic`]: replacing a file through a temporary file and a rename, with the durability
//!   each caller asks for (state file, process registry, pushed files).
//! - [`go_json`]: JSON request bodies decoded as Pebble's Go decoder decodes them, with its
//!   error words.
//! - [`http_client`]: the outgoing HTTP client of http checks and log forwarding, with Go's
//!   defaults.
//! - [`lock`]: one daemon per `$PEBBLE`, an exclusive lock taken before anything else.
//! - [`sink`]: the daemon's own stdout and stderr, written by dedicated threads from bounded
//!   queues, so a stalled log pipe never blocks the daemon.
//! - [`daemon_log`]: the daemon's own log in Pebble's layout, `<time> [pebble] message`,
//!   request lines and security events, written through [`sink`]. (A service's output is
//!   [`logs`], a manager.)
//! - [`process`]: spawning and tracking OS processes: launching services, exec checks and
//!   exec commands (path lookup, user, group, pipes or a terminal), the registry of running
//!   process groups, and which processes belong to one run of a service.
//! - [`watch`]: path watching for `requires-paths`, `on-file-change` and failure hints.
//! - [`tls`]: the daemon's identity key and certificates, and the HTTPS server's
//!   configuration.
//! - [`tls_handoff`]: an `--https` connection taken out of the server with its session's
//!   sending keys, so that a re-execution's new program can answer on it.
//!
//! **Managers** (`managers/`): each owns one part of what the daemon knows or does.
//!
//! - [`state`]: changes, tasks, notices, warnings and identities; their JSON rendering; and
//!   their persistence in Pebble's state format, durable before a client hears of them.
//! - [`layers`]: the plan manager; the current plan is published on a `watch` channel, and
//!   the listening sockets it names (`sockets:`) are held before a change is answered.
//! - [`logs`]: all of a service's output: the reader of its pipe, the bounded ring and its
//!   followers, the persisted files, forwarding to the plan's `log-targets` (Loki,
//!   OpenTelemetry, syslog) without ever waiting on a receiver, and reading it back for
//!   `/v1/logs`.
//! - [`checks`]: health checks (http, tcp, exec), their perform/recover changes, the
//!   snapshot `/v1/health` reads, and the failure actions they trigger.
//! - [`services`]: the supervisor. [`services::machine`] is the pure per-service state machine;
//!   [`services::ServiceManager`] is the handle to the actor that owns the machines and their
//!   processes; [`services::changes`] turns API requests into changes and runs their lanes.
//! - [`exec`]: one-off commands for clients (`POST /v1/exec`), their websockets and their
//!   terminals.
//! - [`files`]: the files API (pull, push, list, make-dirs, remove): Go-compatible errors,
//!   streamed multipart and atomic writes.
//! - [`identities`]: who a client is (local, basic, TLS certificate) and what it may do.
//!
//! **Views** (`views/`): answers that join several managers.
//!
//! - [`listing`]: `GET /v1/services`: the plan, the supervisor's reports and the checks
//!   joined, with the reason each service is where it is.
//! - [`metrics`]: the OpenMetrics text of `/v1/metrics`.
//!
//! **Then** [`api`]: HTTP transport only; handlers extract, call one manager or view, and wrap
//! the result in Pebble's envelope. **And last** [`daemon`]: start-up (directories, plan,
//! state), the listeners, autostart, signals and the orderly shutdown that stops services in
//! reverse order; [`daemon::systemd`] speaks `sd_notify` (ready, stopping, and a watchdog
//! that only a supervisor that answers keeps fed) under a systemd `Type=notify` unit.

#![forbid(unsafe_code)]
// The docs describe the daemon's insides, which are crate-private: links into them are meant.
#![allow(rustdoc::private_intra_doc_links)]

mod base;
mod managers;
mod views;

mod api;
mod daemon;

pub(crate) use base::{
    atomic, daemon_log, go_json, http_client, lock, process, sink, tls, tls_handoff, watch,
};
pub(crate) use managers::{checks, exec, files, identities, layers, logs, services, state};
pub(crate) use views::{listing, metrics};

// The few items used outside the daemon: by the CLI (the demo clears a directory only
// under the daemon's lock, and keeps its process registry), by the tests of the binary and
// by the fuzzer.
pub use api::routes as api_routes;
pub use daemon::MANAGER_FAILED_EXIT_CODE;
pub use daemon::reexec::{PROBE_ARG as REEXEC_PROBE_ARG, probe_answer as reexec_probe_answer};
pub use files::write::write_multipart;
pub use lock::{LOCK_FILE, LockError, lock as lock_dir};
pub use process::registry::FILE_NAME as PROCESS_REGISTRY_FILE;
pub use services::PANIC_SIGNAL;
pub use state::{PersistError, StateData, load as load_state};

use std::collections::BTreeMap;
use std::path::PathBuf;

/// cobble's version, reported as `cobble-version` by `/v1/system-info` (its `version` is the
/// Pebble release cobble implements, [`cobble_client::PEBBLE_VERSION`]).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Everything `cobble run` needs, already resolved from flags and environment by the CLI.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// `$PEBBLE`: the daemon directory (layers/, .pebble.state, default socket).
    pub pebble_dir: PathBuf,
    /// `$PEBBLE_SOCKET`, or `$PEBBLE/.pebble.socket`.
    pub socket_path: PathBuf,
    /// `--create-dirs`: create `$PEBBLE` (mode 0700) and `layers/` if missing.
    pub create_dirs: bool,
    /// `--hold`: do not autostart services.
    pub hold: bool,
    /// `--http ADDR`: also serve the open endpoints on this TCP address (`:4000`, `127.0.0.1:4000`).
    pub http: Option<String>,
    /// `--https ADDR`: also serve the API over TLS on this address, to clients that present
    /// certificates of `cert` identities.
    pub https: Option<String>,
    /// `-v`/`PEBBLE_VERBOSE=1`: copy service output to stdout.
    pub verbose: bool,
    /// `--args SERVICE ARGS... ;` (repeatable).
    pub service_args: BTreeMap<String, Vec<String>>,
    /// `PEBBLE_PERSIST=never` sets this to false.
    pub persist: bool,
    /// `PEBBLE_COPY_ONCE`: seed an empty `$PEBBLE` from this directory.
    pub copy_once: Option<PathBuf>,
    /// `PEBBLE_DEBUG=1`: debug logging on stderr.
    pub debug: bool,
    /// `--identities FILE`, as read: applied with `replace` semantics before the API serves.
    pub identities: Option<BTreeMap<String, Option<cobble_client::identities::Identity>>>,
    /// The handover document's descriptor, when a daemon re-executed itself into this
    /// program (`COBBLE_HANDOVER_FD`, taken out of the environment first thing).
    pub handover_fd: Option<i32>,
}

/// Hooks for running the daemon under another command, as `cobble enter` does: the command
/// waits until the daemon is ready, runs against it, then stops it.
#[derive(Debug, Default)]
pub struct Embedding {
    /// Told once the daemon serves its API and, unless `--hold`, has finished autostarting
    /// the default services. Dropped unsent when the daemon cannot start.
    pub ready: Option<tokio::sync::oneshot::Sender<()>>,
    /// Stops the daemon, as a stop signal would, once cancelled.
    pub stop: tokio_util::sync::CancellationToken,
    /// Log nothing: the command's own output is what the user wants to see.
    pub silent: bool,
}

/// Runs the daemon until it is told to stop; returns the process exit code: 0 for a normal
/// stop or a success shutdown, 10 for a failure shutdown, 11 for a check-failure shutdown,
/// 1 when the daemon cannot start.
pub fn run(opts: RunOptions) -> i32 {
    run_embedded(opts, Embedding::default())
}

/// [`run`], with the hooks of a command that runs the daemon for its own use.
pub fn run_embedded(opts: RunOptions, embedding: Embedding) -> i32 {
    // Before any thread starts: the arena limit applies to arenas made from then on, and
    // threads inherit the signal mask.
    cobble_sys::memory::tune_allocator();
    // A re-executed daemon keeps the stop signals blocked until it catches them.
    let nofile = match opts.handover_fd {
        Some(_) => cobble_sys::inherit::prepare_reexecuted_daemon(),
        None => cobble_sys::inherit::prepare_daemon(),
    };
    daemon_log::init(opts.debug, embedding.silent);
    match nofile {
        Ok(limit) if limit.current != limit.original => tracing::debug!(
            "Raised the descriptor limit from {} to {}",
            limit.original,
            limit.current
        ),
        Ok(_) => {}
        Err(e) => tracing::warn!("Cannot raise the descriptor limit: {e}"),
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start runtime: {e}");
            return 1;
        }
    };
    let log_files =
        logs::persist::LogFiles::new(logs::persist::PersistConfig::from_env(&opts.pebble_dir));
    let code = runtime.block_on(daemon::run(opts, embedding, log_files.clone()));
    // Output readers of services that outlived their stop may still be blocked; don't wait.
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    let code = match code {
        Ok(code) => code,
        Err(e) => {
            // A new program that fails to take over executes back into its predecessor,
            // every descriptor it was handed still open (see `daemon::reexec::fall_back`).
            daemon::reexec::fall_back(&e.to_string());
            // Pebble's words, with no `error: ` before them (its `run` prints this itself).
            daemon_log::stderr().text(format!("cannot run daemon: {e}\n").as_bytes());
            1
        }
    };
    // What is still queued goes out, unless the stream is stalled for good.
    log_files.flush(EXIT_FLUSH);
    daemon_log::flush_all(EXIT_FLUSH);
    code
}

/// How long the daemon's exit waits for stdout and stderr to take what is queued.
const EXIT_FLUSH: std::time::Duration = std::time::Duration::from_secs(1);
