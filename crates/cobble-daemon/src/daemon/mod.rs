//! Start-up, serving and shutdown of the daemon.
//!
//! Start-up prepares `$PEBBLE` (creating it with `--create-dirs`, locking it so that one
//! daemon alone serves it, seeding it from `PEBBLE_COPY_ONCE`), loads the layers once, loads
//! the state file, writes it back (durably, while it becomes the subreaper and starts the
//! managers) and, once it is written, starts the listeners. Unless `--hold`, it then
//! autostarts the enabled services. It
//! runs until SIGTERM, SIGINT or SIGQUIT, or until a service action asks for a shutdown;
//! either way it stops every running service in reverse dependency order, ends whatever
//! process it started that is still running, writes the state one last time and returns the
//! exit code. Start-up and shutdown are logged as security
//! events. Under systemd it says when it is ready and when it stops, and feeds the watchdog
//! while the supervisor answers (see [`systemd`]).
//!
//! An admin may ask it to replace its program in place, keeping its process, its running
//! services, its listeners and its state (see [`reexec`]); the new program starts from what
//! it is handed.
//!
//! A daemon whose supervisor, check manager or persister has stopped (a bug: a panic) would
//! go on answering `/v1/health` while nothing is supervised. So the daemon watches those
//! tasks. If one panics, it logs the panic and re-executes itself, keeping its services (see
//! [`reexec`]); if one ends otherwise, or that cannot be done (the service manager panicked,
//! what runs cannot be handed over, a third panic within a minute), it logs why, stops every
//! service and exits with [`MANAGER_FAILED_EXIT_CODE`], so that the container is restarted.

pub(crate) mod reexec;
pub(crate) mod systemd;

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use cobble_plan::{Plan, service_args_layer};
use tokio::net::{TcpListener, UnixListener};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::api::reexec::ReexecAsk;
use crate::api::serve::{ConnectionCap, Limits, OpenConnections, Timeouts};
use crate::api::{self, ApiState};
use crate::checks::CheckManager;
use crate::daemon_log::{self, SecurityEvent};
use crate::exec::ExecManager;
use crate::layers::PlanManager;
use crate::lock::{self, DirLock, LockError};
use crate::logs::forward::LogForwarder;
use crate::logs::persist::LogFiles;
use crate::process::OsProcesses;
use crate::process::launcher::Launcher;
use crate::process::members;
use crate::process::registry::{self, ProcessRegistry};
use crate::services::ServiceManager;
use crate::services::changes::{ActionError, ServiceChange, ServiceChanges};
use crate::services::scheduler::{Scheduler, SystemClock};
use crate::state::{self, Persister, StateData, StateStore};
use reexec::{answer_reexec, reexec_now};

use crate::{Embedding, RunOptions};

/// How often old changes are pruned.
const PRUNE_INTERVAL: Duration = Duration::from_secs(10 * 60);
/// Extra time allowed for services to stop at shutdown, beyond the longest kill-delay.
const STOP_GRACE: Duration = Duration::from_millis(5_100);

/// How many exec checks' commands are launched at once.
const CHECK_LAUNCHES: usize = 2;
/// The exit code when one of the daemon's managers stopped unexpectedly.
pub const MANAGER_FAILED_EXIT_CODE: i32 = 1;

/// Errors that keep the daemon from starting.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DaemonError {
    #[error("cannot create directory {path}: {source}")]
    CreateDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("directory {} does not exist", cobble_plan::go_quote(&.0.to_string_lossy()))]
    MissingDir(PathBuf),
    #[error("cannot copy {from} to {to}: {source}")]
    CopyOnce {
        from: PathBuf,
        to: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Lock(#[from] LockError),
    #[error("{0}")]
    Plan(#[from] cobble_plan::PlanError),
    /// The layers directory's plan, as Pebble's overlord words its failure to load it.
    #[error("cannot load plan: {0}")]
    LoadPlan(cobble_plan::PlanError),
    #[error("{0}")]
    State(#[from] state::PersistError),
    #[error("cannot use --https with PEBBLE_PERSIST=never: identity key requires persistent state")]
    HttpsWithoutPersist,
    #[error("{0}")]
    Tls(#[from] crate::tls::TlsError),
    #[error("cannot apply identities: {0}")]
    Identities(crate::identities::RequestError),
    #[error("cannot start reaper: {0}")]
    Reaper(std::io::Error),
    #[error("{0}")]
    Handover(String),
    #[error("{}", listen_error(*listener, address, source))]
    Listen {
        listener: Listener,
        address: String,
        source: std::io::Error,
    },
}

/// Which of the daemon's listeners could not listen.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Listener {
    /// The API's unix socket.
    Unix,
    /// `--http`.
    Http,
    /// `--https`.
    Https,
}

/// Pebble's words for a listener that cannot listen, around Go's for the failed call
/// (`listen tcp 1.2.3.4:1: bind: cannot assign requested address`).
fn listen_error(listener: Listener, address: &str, source: &std::io::Error) -> String {
    let network = match listener {
        Listener::Unix => "unix",
        Listener::Http | Listener::Https => "tcp",
    };
    let cause = if source.raw_os_error().is_some() {
        format!(
            "listen {network} {address}: bind: {}",
            cobble_sys::os_error_text(source)
        )
    } else {
        source.to_string()
    };
    let quoted = cobble_plan::go_quote(address);
    match listener {
        Listener::Unix => format!("when trying to listen on {address}: {cause}"),
        Listener::Http => format!("cannot listen on {quoted}: {cause}"),
        Listener::Https => format!("cannot TLS listen on {quoted}: {cause}"),
    }
}

/// Runs the daemon to completion and returns its exit code. The persisted service logs go to
/// `log_files`; what is still queued for them when this returns is for the caller to flush.
///
/// The phases, in order: `load` the directory, plan and state; `end_leftovers` (and become
/// the subreaper); `start_managers` on a worker while this thread makes the state file's
/// `first_write`; `listen` on every address once both are done; `serve` the API;
/// `autostart`; wait for a stop; `shut_down`.
pub(crate) async fn run(
    opts: RunOptions,
    embedding: Embedding,
    log_files: LogFiles,
) -> Result<i32, DaemonError> {
    // Catch stop signals from the very start: a SIGTERM that arrives while the daemon is
    // still starting must stop it in order, not kill it with its services left behind.
    let mut stop_signals = StopSignals::new();
    // Caught now: one that arrived during a re-execution, pending since, is delivered.
    cobble_sys::inherit::unblock_stop_signals();
    let notifier = systemd::Notifier::from_env();
    let watchdog_interval = if notifier.is_enabled() {
        systemd::watchdog_interval(std::env::var("WATCHDOG_USEC").ok().as_deref()).unwrap_or_else(
            |e| {
                tracing::warn!("Not pinging the systemd watchdog: {e}");
                None
            },
        )
    } else {
        None
    };
    // What a predecessor handed over, when this program was re-executed into. Until it has
    // taken over, it can execute back into the predecessor (see `reexec::fall_back`).
    let mut handover = match opts.handover_fd {
        Some(fd) => {
            reexec::arm_fallback(fd);
            Some(reexec::read(fd).map_err(DaemonError::Handover)?)
        }
        None => None,
    };
    // The program running now, which a panic re-executes even once its file is replaced.
    let image = cobble_sys::reexec::open_own_image().ok();
    // Held until the daemon returns: it alone may end leftovers, write the state and bind or
    // remove the socket.
    let Loaded {
        lock,
        plan,
        store,
        persister,
        identities,
    } = load(&opts, handover.as_ref())?;
    // The handed-over services' exits are registered before the reaper starts.
    let carried = reexec::adopt_exits(
        handover
            .as_mut()
            .map(|h| std::mem::take(&mut h.services))
            .unwrap_or_default(),
    );
    // The held sockets are taken before the plan's are bound: the same open sockets.
    let held = reexec::adopt_sockets(
        handover
            .as_mut()
            .map(|h| std::mem::take(&mut h.sockets))
            .unwrap_or_default(),
    );
    let forwarded = handover
        .as_mut()
        .map(|h| reexec::carried_forwarding(std::mem::take(&mut h.forwarding)))
        .unwrap_or_default();
    let plan = end_leftovers(&opts, plan, &store, handover.is_some())?;
    let boot_id = match &handover {
        Some(handover) => handover.boot_id.clone(),
        None => boot_id(),
    };
    let (reexec_tx, mut reexec_requests) = mpsc::channel(1);
    // The state file's fsyncs wait on the disk: everything else start-up needs before the
    // socket is made meanwhile, on a worker. That includes the API's routes and the log's
    // writer thread (which the first line below would start), so that the socket, once
    // bound, is served at once.
    let carried_checks = handover
        .as_mut()
        .map(|h| std::mem::take(&mut h.checks))
        .unwrap_or_default();
    let starting = {
        let opts = opts.clone();
        let boot_id = boot_id.clone();
        tokio::spawn(async move {
            let (daemon, plan) = start_managers(
                &opts,
                plan,
                store,
                log_files,
                held,
                forwarded,
                carried_checks,
            )
            .await?;
            let api = build_api(&opts, &daemon, plan, boot_id, reexec_tx);
            daemon_log::start_stderr();
            Ok::<_, DaemonError>((daemon, api))
        })
    };
    let written = persister.map(first_write);
    let (mut daemon, api) = starting
        .await
        .expect("starting the managers does not panic")?;
    if let Some(handover) = handover.as_mut() {
        let logs = std::mem::take(&mut handover.logs);
        daemon
            .services
            .carry_logs(logs.into_iter().map(reexec::CarriedLog::entries).collect())
            .await;
    }
    let listening = listen(&opts, written, &mut daemon, handover.as_ref()).await?;
    reexec::injected_takeover_fault(handover.as_ref().and_then(|h| h.reply.as_ref()))
        .map_err(DaemonError::Handover)?;
    // Last, once nothing else can fail: from here on the services' output is read, and
    // what is read is this program's.
    if !carried.is_empty() {
        // The handed-over services' output is forwarded from its first line read here.
        daemon.forwarder.ready().await;
    }
    let handed_at = handover.as_ref().and_then(|h| h.handed_at_ns);
    let paths = handover
        .as_mut()
        .map(|h| std::mem::take(&mut h.paths))
        .unwrap_or_default();
    let in_flight = reexec::adopt_services(&daemon, carried, handed_at, paths).await;
    // The services' changes go on where they stood: what their services were in the middle
    // of is answered as it would have been, and the tasks not begun run as any do.
    let changes = handover
        .as_mut()
        .map(|h| std::mem::take(&mut h.changes))
        .unwrap_or_default();
    daemon.service_changes.resume(changes, in_flight);
    // Taken over: a failure from now on is this program's, and what the log targets were
    // handed is sent.
    reexec::disarm_fallback();
    daemon.forwarder.resume();
    let reply = handover.as_mut().and_then(|h| h.reply.take());
    if let Some(handover) = &handover {
        match cobble_sys::reexec::takeover_failure() {
            Some(why) => {
                // No client waits after a panic: the daemon's own program was executed.
                let own = reexec::own_binary().map(|b| b.to_string_lossy().into_owned());
                let binary = reply
                    .as_ref()
                    .map(|r| r.binary.clone())
                    .or(own)
                    .unwrap_or_default();
                let binary = binary.as_str();
                tracing::info!(
                    "{}; cobble {} took over again.",
                    reexec::takeover_failed(binary, why),
                    crate::VERSION
                );
            }
            None => tracing::info!(
                "Re-executed daemon: cobble {} (was {}).",
                crate::VERSION,
                handover.old_version
            ),
        }
    } else {
        // Logged before the first request is served, as Pebble logs them before it serves: a
        // client that has connected sees its request's line after these.
        daemon_log::security(SecurityEvent::Startup {
            uid: cobble_sys::current_uid(),
        });
        log_listening(&opts);
        tracing::info!("Started daemon.");
    }
    let mut servers = serve(listening, api, &daemon);
    if let Some(reply) = reply {
        answer_reexec(reply, handover.as_ref().map(|h| h.old_version.clone()));
    }
    // Every listener is bound and served: systemd may take the unit as started.
    notifier.notify("READY=1");
    let watchdog = watchdog_interval.map(|interval| {
        let services = daemon.services.clone();
        tokio::spawn(systemd::run_watchdog(
            notifier.clone(),
            interval,
            move || {
                let services = services.clone();
                async move { services.ping().await }
            },
        ))
    });
    if let Some(identities) = identities.filter(|_| handover.is_none()) {
        log_identities(&identities);
    }
    let embedded = embedding.ready.is_some();
    // A re-executed daemon's services are as its predecessor left them.
    if !opts.hold && handover.is_none() {
        autostart(&daemon, embedded).await;
    }
    if let Some(ready) = embedding.ready {
        let _ = ready.send(());
    }

    let kept = Kept {
        lock: lock.fd(),
        boot_id,
        embedded,
        image,
    };
    // The panics that re-executed the daemon lately, towards its crash-loop limit.
    let mut panics = handover.map(|h| h.panics).unwrap_or_default();
    let (code, supervisor_alive) = loop {
        tokio::select! {
            code = stop_signals.wait(&mut daemon.shutdown_requests) => break (code, true),
            () = embedding.stop.cancelled() => break (0, true),
            (manager, why, panicked) = daemon.managers.first_to_end() => {
                let supervisor_alive = manager != Manager::Services;
                if !panicked {
                    tracing::info!(
                        "Cannot continue: the {manager} stopped: {why}; stopping services"
                    );
                    break (MANAGER_FAILED_EXIT_CODE, supervisor_alive);
                }
                // A panic: the daemon starts its program again, keeping its services, unless
                // they cannot be handed over or it panics in a loop.
                let now = jiff::Timestamp::now().as_nanosecond();
                let window = reexec::PANIC_WINDOW.as_nanos() as i128;
                panics.retain(|at| now.saturating_sub(*at) < window);
                panics.push(now);
                tracing::error!("The {manager} stopped: {why}");
                let refused = if panics.len() >= reexec::PANIC_LIMIT {
                    format!(
                        "{} panics within {}s",
                        panics.len(),
                        reexec::PANIC_WINDOW.as_secs()
                    )
                } else if !supervisor_alive {
                    "its services cannot be handed over without it".to_owned()
                } else {
                    tracing::info!("Re-executing daemon after a panic, keeping its services.");
                    let cause = reexec::Cause::Panicked(&panics);
                    // Returns only when the daemon did not re-execute.
                    let (why, stop) = reexec_now(
                        &opts,
                        &kept,
                        &mut daemon,
                        &mut servers,
                        &mut stop_signals,
                        cause,
                    )
                    .await;
                    if let Some(code) = stop {
                        tracing::info!("{}", why.message);
                        break (code, true);
                    }
                    why.message
                };
                tracing::info!(
                    "Cannot continue: the {manager} stopped: {refused}; stopping services"
                );
                break (MANAGER_FAILED_EXIT_CODE, supervisor_alive);
            }
            Some(ask) = reexec_requests.recv() => {
                // Returns only when the daemon did not re-execute.
                let cause = reexec::Cause::Asked(&ask);
                let (why, stop) =
                    reexec_now(&opts, &kept, &mut daemon, &mut servers, &mut stop_signals, cause)
                        .await;
                tracing::info!("{}", why.message);
                let _ = ask.refused.send(why);
                if let Some(code) = stop {
                    break (code, true);
                }
            }
        }
    };
    drop(lock);
    daemon_log::security(SecurityEvent::Shutdown {
        uid: cobble_sys::current_uid(),
    });
    // systemd stops watching over a unit that is stopping.
    if let Some(watchdog) = watchdog {
        watchdog.abort();
    }
    notifier.notify("STOPPING=1");
    shut_down(daemon, servers, supervisor_alive).await;
    let _ = std::fs::remove_file(&opts.socket_path);
    Ok(code)
}

/// Logs the TCP addresses the API is served on, as Pebble does between its start-up event
/// and `Started daemon.`: the address as the option gave it (`":4000"`), Go-quoted.
fn log_listening(opts: &RunOptions) {
    if let Some(address) = &opts.http {
        tracing::info!(
            "HTTP API server listening on {}.",
            cobble_plan::go_quote(address)
        );
    }
    if let Some(address) = &opts.https {
        tracing::info!(
            "HTTPS API server listening on {}.",
            cobble_plan::go_quote(address)
        );
    }
}

/// The state file's first write, and the persister that made it.
type FirstWrite = (Persister, Result<u64, state::FlushError>);

/// Writes the whole state to the state file, on this thread (see `run`, and `load` for why
/// it may block it). Clients and tests take the state file as the sign of a started daemon,
/// so it is there before the socket is, even when nothing has happened yet.
fn first_write(mut persister: Persister) -> FirstWrite {
    let written = persister.flush_blocking();
    (persister, written)
}

/// What `load` prepared.
struct Loaded {
    /// The directory's lock, held until the daemon returns.
    lock: DirLock,
    plan: Plan,
    store: StateStore,
    /// What makes the state file's first write (none under `PEBBLE_PERSIST=never`).
    persister: Option<Persister>,
    /// The `--identities` applied, to be logged once the daemon has started.
    identities: Option<BTreeMap<String, Option<crate::identities::Identity>>>,
}

/// The first phase: refuses options that cannot work, prepares and locks `$PEBBLE` (or
/// takes the lock a predecessor handed over), loads the layers and the state (applying
/// `--identities`).
///
/// Blocking, on the thread that calls `run`: `run` is the future the runtime's `block_on`
/// drives on the thread that started the daemon, no worker, and waiting here (for the lock,
/// see `lock`, or the disk) holds up nothing but start-up, which needs what this loads
/// first. (The lock taken on a blocking-pool thread cost a thread's start and two
/// hand-overs before anything else could begin.)
fn load(opts: &RunOptions, handover: Option<&reexec::Handover>) -> Result<Loaded, DaemonError> {
    // Refused before anything is created: a key that dies with the process identifies nobody.
    if opts.https.is_some() && !opts.persist {
        return Err(DaemonError::HttpsWithoutPersist);
    }
    let lock = match handover {
        Some(handover) => cobble_sys::reexec::adopt(handover.lock)
            .map(DirLock::adopt)
            .map_err(|e| DaemonError::Handover(format!("cannot adopt directory lock: {e}")))?,
        None => prepare_dir(opts)?,
    };
    // A daemon killed while it replaced the state file, the registry or a pushed file left
    // its temporary file behind (where the file system cannot give it no name).
    let leftovers = crate::atomic::remove_leftovers(&opts.pebble_dir);
    if !leftovers.is_empty() {
        tracing::info!("Removed leftover temporary files {}", leftovers.join(", "));
    }
    // A re-executed daemon runs the plan its predecessor ran, layers added through the API
    // included; the layers directory is read at start-up only.
    let plan = match handover.and_then(|h| h.plan.as_deref()) {
        Some(layers) => reexec::carried_plan(layers).map_err(DaemonError::Handover)?,
        None => {
            let layers_dir = opts.pebble_dir.join("layers");
            let mut plan = Plan::load_dir(&layers_dir).map_err(DaemonError::LoadPlan)?;
            if !opts.service_args.is_empty() {
                let layer = service_args_layer(&plan, &opts.service_args)?;
                plan = plan.add_layer(layer, false, false)?;
            }
            plan
        }
    };
    let state_path = opts.pebble_dir.join(".pebble.state");
    let mut data = match handover.and_then(|h| h.state.as_deref()) {
        // A predecessor without a state file handed its state over.
        Some(carried) => state::format::decode(carried.as_bytes()).map_err(|e| {
            DaemonError::Handover(format!("cannot read the state handed over: {e}"))
        })?,
        None if opts.persist => state::load(&state_path)?,
        None => StateData::default(),
    };
    let identities = match &opts.identities {
        Some(identities) => {
            let action = crate::identities::Action::Replace;
            let changes = crate::identities::decode_request(action, identities)
                .map_err(DaemonError::Identities)?;
            data.apply_identities(action, changes.clone())
                .map_err(DaemonError::Identities)?;
            Some(changes)
        }
        None => None,
    };
    // The checks a predecessor handed over go on with their changes' tasks, and its
    // services' changes are taken up where their tasks stood.
    let keep: Vec<u64> = handover
        .map(|h| {
            let checks = h
                .checks
                .iter()
                .filter(|c| c.running)
                .filter_map(|c| c.task_id);
            let changes = h.changes.iter().flat_map(|c| c.task_ids());
            checks.chain(changes).collect()
        })
        .unwrap_or_default();
    let store = StateStore::keeping(data, &keep);
    let persister = opts
        .persist
        .then(|| Persister::new(store.clone(), state_path));
    Ok(Loaded {
        lock,
        plan,
        store,
        persister,
        identities,
    })
}

/// The second phase, blocking as `load` is: becomes the subreaper, takes the plan over
/// (logging its problems), and ends what a killed predecessor left running (SIGTERM, then
/// SIGKILL after the plan's longest kill-delay; it polls `/proc` until they are gone), before
/// anything starts, so that no service ever runs twice. A re-executed daemon's processes are
/// its own.
fn end_leftovers(
    opts: &RunOptions,
    plan: Plan,
    store: &StateStore,
    reexecuted: bool,
) -> Result<PlanManager, DaemonError> {
    cobble_sys::reaper::start().map_err(DaemonError::Reaper)?;
    let plan = PlanManager::new(plan);
    let loaded = plan.plan();
    let grace = longest_plan_kill_delay(&loaded);
    if !loaded.workloads.is_empty() {
        tokio::task::spawn_blocking(move || crate::layers::log_unresolved_workloads(&loaded));
    }
    if !opts.persist || reexecuted {
        return Ok(plan);
    }
    let ended = registry::end_leftovers(&opts.pebble_dir, grace);
    if !ended.is_empty() {
        tracing::info!("Stopped leftover processes of {}", ended.join(", "));
        // The daemon before this one ended without stopping its services (it was killed,
        // or crashed): something the operator should hear of, in `cobble warnings`.
        store.add_warning(&format!(
            "stopped leftover processes of {}, left running by the previous daemon",
            ended.join(", ")
        ));
    }
    Ok(plan)
}

/// The managers, and what the daemon keeps to serve and to stop them (the plan manager is
/// the API's alone, see `start_managers`).
struct Daemon {
    store: StateStore,
    processes: Arc<OsProcesses>,
    checks: CheckManager,
    forwarder: LogForwarder,
    services: ServiceManager,
    service_changes: ServiceChanges,
    /// Starts the services that have a schedule at its times.
    schedules: Scheduler,
    log_files: LogFiles,
    /// The tasks the daemon cannot live without.
    managers: Managers,
    /// Exit codes of the shutdowns services' actions ask for.
    shutdown_requests: mpsc::UnboundedReceiver<i32>,
    /// Stops the servers and the persister.
    cancel: CancellationToken,
    /// Stops the persister alone (a child of `cancel`), before a re-execution.
    persist_stop: CancellationToken,
    /// The state file, for a persister started again after a failed re-execution.
    state_path: PathBuf,
}

/// The third phase, on a worker (see `run`): starts the managers (checks run from the plan
/// whatever the services do, even under `--hold`). The plan manager comes back apart:
/// adding layers is the API's.
async fn start_managers(
    opts: &RunOptions,
    mut plan: PlanManager,
    store: StateStore,
    log_files: LogFiles,
    held: Vec<(String, String, std::os::fd::OwnedFd)>,
    forwarded: BTreeMap<String, crate::logs::forward::Carried>,
    carried_checks: Vec<crate::checks::CarriedCheck>,
) -> Result<(Daemon, PlanManager), DaemonError> {
    let (shutdown_tx, shutdown_requests) = mpsc::unbounded_channel();
    let state_dir = opts.persist.then(|| opts.pebble_dir.clone());
    let processes = Arc::new(OsProcesses::new(
        ProcessRegistry::new(state_dir.as_deref()),
        state_dir.as_deref(),
    ));
    // Exec checks' commands are recorded while they run, as services' are, and launched
    // a few at a time: a plan full of exec checks due together queues short jobs instead of
    // taking the cores from the runtime's workers.
    if !held.is_empty() {
        let current = plan.subscribe().borrow().clone();
        processes.sockets().adopt(&current, held);
    }
    let check_launcher = Launcher::new(CHECK_LAUNCHES).recording(processes.clone());
    let (checks, checks_task) = CheckManager::spawn(
        plan.subscribe(),
        store.clone(),
        check_launcher,
        carried_checks,
    );
    plan.hold_sockets(processes.clone()).await;
    let (forwarder, forward_tap) = LogForwarder::spawn(plan.subscribe(), forwarded);
    let (services, services_task) = ServiceManager::spawn(
        plan.subscribe(),
        checks.signals(),
        processes.clone(),
        crate::logs::capture::Destinations {
            files: Some(log_files.clone()),
            stdout: opts.verbose.then(daemon_log::stdout),
            forward: forward_tap,
        },
        shutdown_tx,
    );
    let service_changes = ServiceChanges::new(
        plan.subscribe(),
        store.clone(),
        services.clone(),
        checks.clone(),
    );
    let (schedules, _schedules_task) = Scheduler::spawn(
        plan.subscribe(),
        Arc::new(service_changes.clone()),
        Arc::new(SystemClock::new()),
    );
    let mut managers = Managers::default();
    managers.watch(Manager::Services, services_task);
    managers.watch(Manager::Checks, checks_task);
    {
        let store = store.clone();
        tokio::spawn(async move {
            let mut interval = tokio::time::interval(PRUNE_INTERVAL);
            loop {
                interval.tick().await;
                store.prune(jiff::Timestamp::now());
            }
        });
    }
    let cancel = CancellationToken::new();
    let daemon = Daemon {
        store,
        processes,
        checks,
        forwarder,
        services,
        service_changes,
        schedules,
        log_files,
        managers,
        shutdown_requests,
        persist_stop: cancel.child_token(),
        cancel,
        state_path: opts.pebble_dir.join(".pebble.state"),
    };
    Ok((daemon, plan))
}

/// Every address the daemon serves, bound.
struct Listeners {
    unix: UnixListener,
    http: Option<TcpListener>,
    https: Option<TcpListener>,
}

/// What is handed to a new program besides the listeners.
struct Kept {
    /// The directory lock's descriptor.
    lock: std::os::fd::RawFd,
    boot_id: String,
    /// The daemon runs under another command (`cobble enter`), which waits for it.
    embedded: bool,
    /// The program running now, open (see `reexec::Cause::Panicked`).
    image: Option<std::os::fd::OwnedFd>,
}

/// The third phase: binds every listener. Clients take the socket as the sign of a ready
/// daemon, so it comes last, once the state file's first write is done and the persister
/// runs.
async fn listen(
    opts: &RunOptions,
    first_write: Option<FirstWrite>,
    daemon: &mut Daemon,
    handover: Option<&reexec::Handover>,
) -> Result<(Listeners, Option<Arc<rustls::ServerConfig>>), DaemonError> {
    let https = match &opts.https {
        Some(address) => {
            let dir = opts.pebble_dir.clone();
            let (key, identity) = tokio::task::spawn_blocking(move || {
                // Without its key the daemon has no identity to serve, as in Pebble; without
                // its certificate it starts, and handshakes try again (see `tls`).
                let key = crate::tls::identity_key(&dir)?;
                let identity = crate::tls::identity_certificate(&dir, &key);
                Ok::<_, crate::tls::TlsError>((key, identity))
            })
            .await
            .map_err(|e| crate::tls::TlsError::Load(e.to_string()))??;
            let config = crate::tls::server_config(&opts.pebble_dir, key, identity)?;
            let listener = match handover.and_then(|h| h.https) {
                Some(fd) => adopt_tcp(fd, address, Listener::Https)?,
                None => bind_tcp(address, Listener::Https).await?,
            };
            Some((listener, config))
        }
        None => None,
    };
    if let Some((persister, written)) = first_write {
        if let Err(e) = written {
            let state_path = opts.pebble_dir.join(".pebble.state");
            tracing::warn!("Cannot write state file {}: {e}", state_path.display());
        }
        daemon.managers.watch(
            Manager::Persister,
            tokio::spawn(reexec::injected_panic(
                persister.run(daemon.persist_stop.clone()),
            )),
        );
    }
    let unix = match handover {
        Some(handover) => adopt_unix(handover.unix, &opts.socket_path)?,
        None => bind_unix(&opts.socket_path)?,
    };
    daemon_log::set_socket_path(&opts.socket_path);
    let http = match &opts.http {
        Some(address) => match handover.and_then(|h| h.http) {
            Some(fd) => Some(adopt_tcp(fd, address, Listener::Http)?),
            None => Some(bind_tcp(address, Listener::Http).await?),
        },
        None => None,
    };
    let (https, tls) = match https {
        Some((listener, config)) => (Some(listener), Some(config)),
        None => (None, None),
    };
    Ok((Listeners { unix, http, https }, tls))
}

/// The unix socket's listener a predecessor handed over.
fn adopt_unix(fd: std::os::fd::RawFd, path: &Path) -> Result<UnixListener, DaemonError> {
    let err = |source| DaemonError::Listen {
        listener: Listener::Unix,
        address: path.display().to_string(),
        source,
    };
    let listener =
        std::os::unix::net::UnixListener::from(cobble_sys::reexec::adopt(fd).map_err(err)?);
    listener.set_nonblocking(true).map_err(err)?;
    UnixListener::from_std(listener).map_err(err)
}

/// A TCP listener a predecessor handed over.
fn adopt_tcp(
    fd: std::os::fd::RawFd,
    address: &str,
    listener: Listener,
) -> Result<TcpListener, DaemonError> {
    let err = |source| DaemonError::Listen {
        listener,
        address: address.to_owned(),
        source,
    };
    let tcp = std::net::TcpListener::from(cobble_sys::reexec::adopt(fd).map_err(err)?);
    tcp.set_nonblocking(true).map_err(err)?;
    TcpListener::from_std(tcp).map_err(err)
}

/// What the servers serve: the API's routes, the exec manager behind them, and the record
/// of their connections.
struct Api {
    routers: api::serve::Routers,
    exec: ExecManager,
    open: Arc<OpenConnections>,
}

/// Builds the API's routes over the managers (before `listen`, see `run`).
fn build_api(
    opts: &RunOptions,
    daemon: &Daemon,
    plan: PlanManager,
    boot_id: String,
    reexec: mpsc::Sender<ReexecAsk>,
) -> Api {
    let exec = ExecManager::new(daemon.store.clone()).recording(daemon.processes.clone());
    let open = Arc::new(OpenConnections::default());
    let api_state = Arc::new(ApiState {
        plan,
        services: daemon.services.clone(),
        service_changes: daemon.service_changes.clone(),
        schedules: daemon.schedules.clone(),
        checks: daemon.checks.clone(),
        exec: exec.clone(),
        forward: daemon.forwarder.clone(),
        log_files: daemon.log_files.clone(),
        state: daemon.store.clone(),
        boot_id,
        pebble_dir: opts.pebble_dir.clone(),
        http_address: opts.http.clone(),
        https_address: opts.https.clone(),
        reexec,
        connections: open.clone(),
    });
    let routers = api::serve::Routers {
        api: api::router(api_state.clone()),
        reserve: api::reserve_router(api_state),
    };
    Api {
        routers,
        exec,
        open,
    }
}

/// The fourth phase: serves the API on every listener; returns the servers.
fn serve(
    (listeners, tls): (Listeners, Option<Arc<rustls::ServerConfig>>),
    api: Api,
    daemon: &Daemon,
) -> Servers {
    let Api {
        routers,
        exec,
        open,
    } = api;
    let limits = Limits::from_env();
    let mut servers = Servers {
        exec,
        routers,
        limits,
        timeouts: limits.timeouts(),
        tls,
        open,
        running: None,
    };
    servers.start(listeners, &daemon.cancel);
    servers
}

/// The servers of every listener, and the exec manager, whose commands end with the daemon.
struct Servers {
    exec: ExecManager,
    routers: api::serve::Routers,
    limits: Limits,
    timeouts: Timeouts,
    /// `--https`'s configuration.
    tls: Option<Arc<rustls::ServerConfig>>,
    /// The connections of every listener.
    open: Arc<OpenConnections>,
    /// The servers' tasks, while they serve.
    running: Option<Running>,
}

/// The servers' tasks, each of which gives its listener back when paused.
struct Running {
    /// Pauses them (a child of the daemon's token, which stops them for good).
    pause: CancellationToken,
    unix: JoinHandle<UnixListener>,
    http: Option<JoinHandle<TcpListener>>,
    https: Option<JoinHandle<TcpListener>>,
}

impl Servers {
    /// Serves the API on `listeners`.
    fn start(&mut self, listeners: Listeners, cancel: &CancellationToken) {
        self.open.set_draining(false);
        let pause = cancel.child_token();
        let unix = tokio::spawn(api::serve::serve(
            listeners.unix,
            self.routers.clone(),
            pause.clone(),
            ConnectionCap::PerUid(self.limits.per_uid),
            self.timeouts,
            self.open.clone(),
        ));
        let https = match (listeners.https, &self.tls) {
            (Some(tcp), Some(config)) => Some(tokio::spawn(api::serve::serve_tls(
                tcp,
                config.clone(),
                self.routers.clone(),
                pause.clone(),
                ConnectionCap::Total(self.limits.http_total),
                self.timeouts,
                self.open.clone(),
            ))),
            _ => None,
        };
        let http = listeners.http.map(|tcp| {
            tokio::spawn(api::serve::serve(
                tcp,
                self.routers.clone(),
                pause.clone(),
                ConnectionCap::Total(self.limits.http_total),
                self.timeouts,
                self.open.clone(),
            ))
        });
        self.running = Some(Running {
            pause,
            unix,
            http,
            https,
        });
    }

    /// Stops accepting and asks every connection to finish its request and close; returns
    /// the listeners, open (new connections wait in their queues). `None` when a server
    /// task ended otherwise (a panic), or the servers were not running.
    async fn pause(&mut self) -> Option<Listeners> {
        let running = self.running.take()?;
        self.open.set_draining(true);
        running.pause.cancel();
        let unix = running.unix.await.ok();
        let http = match running.http {
            Some(task) => Some(task.await.ok()),
            None => None,
        };
        let https = match running.https {
            Some(task) => Some(task.await.ok()),
            None => None,
        };
        Some(Listeners {
            unix: unix?,
            http: http.map(|l| l.ok_or(())).transpose().ok()?,
            https: https.map(|l| l.ok_or(())).transpose().ok()?,
        })
    }
}

/// Starts the `startup: enabled` services; with `wait` (a command run under `enter --run`
/// expects the services up, not starting) returns once their change is ready.
///
/// Pebble's `run` asks its own daemon for this over the socket, so its log shows the
/// request (`POST /v1/services ... 202 (http+unix)`, or 400 with nothing to start), then,
/// once the change is ready, the wait for it and `Started default services with change N.`.
/// cobble acts directly and logs the same lines at the same points: scripts, and Pebble's own
/// integration tests, wait for them to know that the daemon has finished starting.
async fn autostart(daemon: &Daemon, wait: bool) {
    let asked = std::time::Instant::now();
    let result = daemon
        .service_changes
        .act_now(ServiceChange::Autostart, Vec::new())
        .await;
    let status = match &result {
        Ok(_) => 202,
        Err(ActionError::NotRecorded(_)) => 500,
        Err(_) => 400,
    };
    log_own_request(
        axum::http::Method::POST,
        "/v1/services".into(),
        asked,
        status,
    );
    let change = match result {
        Ok(change) => change,
        Err(e) => {
            tracing::info!("Cannot start default services: {e}");
            return;
        }
    };
    let store = daemon.store.clone();
    let waited = async move {
        let asked = std::time::Instant::now();
        store.wait_ready(change).await;
        let target = format!("/v1/changes/{change}/wait");
        log_own_request(axum::http::Method::GET, target, asked, 200);
        tracing::info!("Started default services with change {change}.");
    };
    if wait {
        waited.await;
    } else {
        tokio::spawn(waited);
    }
}

/// Logs the `--identities` the daemon applied at start-up as Pebble's `run` logs them: it
/// sends them to its own daemon as a `replace` once the daemon has started, so its log has
/// that request's security events and its line. cobble applies them before it serves anyone
/// (see `load`) and logs the same lines at the same point.
fn log_identities(changes: &BTreeMap<String, Option<crate::identities::Identity>>) {
    let asked = std::time::Instant::now();
    let user = daemon_log::User::uid(Some(cobble_sys::current_uid()));
    api::identities::log_request(&user, crate::identities::Action::Replace, changes);
    log_own_request(
        axum::http::Method::POST,
        "/v1/identities".into(),
        asked,
        200,
    );
}

/// Logs a request the daemon makes of itself, as Pebble's client makes it over the socket.
fn log_own_request(
    method: axum::http::Method,
    target: String,
    asked: std::time::Instant,
    status: u16,
) {
    daemon_log::request(daemon_log::RequestLine {
        at: jiff::Timestamp::now(),
        method,
        target,
        elapsed: asked.elapsed(),
        status,
        transport: api::Transport::Unix.as_str(),
        remote: daemon_log::Remote::Unix {
            pid: i32::try_from(std::process::id()).ok(),
            uid: Some(cobble_sys::current_uid()),
        },
    });
}

/// The last phase: ends exec's commands, stops every service in reverse order (or, when
/// nobody supervises them any more, ends every recorded process group), ends whatever else
/// the daemon started, flushes forwarding, stops the servers and lets the persister write
/// the state one last time.
async fn shut_down(daemon: Daemon, servers: Servers, supervisor_alive: bool) {
    // Commands run for clients end with the daemon; they are not services to stop in order.
    servers.exec.shutdown().await;
    // No scheduled run may start while the services are being stopped.
    daemon.schedules.stop();
    let longest_kill_delay = longest_kill_delay(&daemon.service_changes);
    let processes = daemon.processes;
    if supervisor_alive {
        if tokio::time::timeout(
            longest_kill_delay + STOP_GRACE,
            daemon.service_changes.stop_all(),
        )
        .await
        .is_err()
        {
            tracing::info!("Cannot stop running services: timeout stopping running services");
        }
    } else {
        // Nobody supervises the services any more: end every recorded process group.
        let processes = processes.clone();
        let ended = tokio::task::spawn_blocking(move || processes.end_all(longest_kill_delay))
            .await
            .unwrap_or_default();
        if !ended.is_empty() {
            tracing::info!("Stopped {}", ended.join(", "));
        }
    }
    // The daemon's exit ends everything it started: orphans that no stop could attribute to
    // a service are its children still (it is their subreaper, or PID 1).
    let swept = tokio::task::spawn_blocking(move || members::end_descendants(longest_kill_delay))
        .await
        .unwrap_or_default();
    if swept > 0 {
        tracing::info!("Stopped {swept} leftover processes");
    }
    let _ = tokio::task::spawn_blocking(move || {
        processes.save_registry();
        processes.remove_cgroups();
    })
    .await;
    // The services' last words go out too, within the forwarder's final-flush bound.
    daemon.forwarder.shutdown().await;
    daemon.cancel.cancel();
    let mut servers = servers;
    let listeners = servers.pause().await;
    // Each connection answers the request in progress, within a bound.
    let _ = tokio::time::timeout(Duration::from_secs(1), servers.open.at_most(0)).await;
    drop(listeners);
    let (store, state_path) = (daemon.store.clone(), daemon.state_path.clone());
    if !daemon.managers.wait_persister().await {
        // It panicked: the state is written one last time as it would have written it.
        if let Err(e) = Persister::new(store, state_path).flush().await {
            tracing::warn!("Cannot write state file: {e}");
        }
    }
}

/// The longest kill-delay among services (at least the default), to bound the final stop.
fn longest_kill_delay(actions: &ServiceChanges) -> Duration {
    longest_plan_kill_delay(&actions.plan())
}

fn longest_plan_kill_delay(plan: &Plan) -> Duration {
    plan.services
        .values()
        .map(|s| s.kill_delay())
        .max()
        .unwrap_or_default()
        .max(Duration::from_secs(5))
}

/// The tasks the daemon cannot live without.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Manager {
    Services,
    Checks,
    Persister,
}

impl std::fmt::Display for Manager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Manager::Services => "service manager",
            Manager::Checks => "check manager",
            Manager::Persister => "state persister",
        })
    }
}

/// Watches the [`Manager`] tasks.
#[derive(Default)]
struct Managers {
    tasks: Vec<(Manager, JoinHandle<()>)>,
    /// A persister was watched (none is under `PEBBLE_PERSIST=never`).
    persisted: bool,
}

impl Managers {
    fn watch(&mut self, name: Manager, task: JoinHandle<()>) {
        self.persisted |= name == Manager::Persister;
        self.tasks.push((name, task));
    }

    /// Waits until one of them ends and says which, why (a panic's message and where it
    /// happened, or that it returned: a manager returns only when its inputs are gone), and
    /// whether it panicked.
    async fn first_to_end(&mut self) -> (Manager, String, bool) {
        if self.tasks.is_empty() {
            return std::future::pending().await;
        }
        let (result, index, _) =
            futures_util::future::select_all(self.tasks.iter_mut().map(|(_, task)| task)).await;
        let (name, _) = self.tasks.remove(index);
        let panicked = result.as_ref().is_err_and(|e| e.is_panic());
        let why = match result {
            Ok(()) => "it returned".to_owned(),
            Err(e) if e.is_panic() => {
                let panic = e.into_panic();
                let message = panic
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "unknown panic".to_owned());
                match daemon_log::last_panic_location() {
                    Some(location) => format!("panic at {location}: {message}"),
                    None => format!("panic: {message}"),
                }
            }
            Err(e) => e.to_string(),
        };
        (name, why, panicked)
    }

    /// Takes the persister's task out of the watch (to stop it before a re-execution).
    fn take_persister(&mut self) -> Option<JoinHandle<()>> {
        let index = self
            .tasks
            .iter()
            .position(|(name, _)| *name == Manager::Persister)?;
        Some(self.tasks.remove(index).1)
    }

    /// At shutdown the persister writes the state one last time once cancelled; wait for it.
    /// False when one was watched and is gone (it ended before, a panic), so that nothing
    /// wrote the state last.
    async fn wait_persister(self) -> bool {
        let mut waited = false;
        for (name, task) in self.tasks {
            if name == Manager::Persister {
                waited = task.await.is_ok();
            }
        }
        waited || !self.persisted
    }
}

/// SIGTERM, SIGINT and SIGQUIT, caught from start-up on.
struct StopSignals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    quit: tokio::signal::unix::Signal,
}

impl StopSignals {
    fn new() -> StopSignals {
        let catch = |kind| signal(kind).expect("signal handler");
        StopSignals {
            term: catch(SignalKind::terminate()),
            int: catch(SignalKind::interrupt()),
            quit: catch(SignalKind::quit()),
        }
    }

    /// Waits for a stop signal or a shutdown requested by a service action; returns the exit
    /// code.
    async fn wait(&mut self, shutdown: &mut mpsc::UnboundedReceiver<i32>) -> i32 {
        tokio::select! {
            _ = self.term.recv() => { tracing::info!("Exiting on terminated signal."); 0 }
            _ = self.int.recv() => { tracing::info!("Exiting on interrupt signal."); 0 }
            _ = self.quit.recv() => { tracing::info!("Exiting on quit signal."); 0 }
            Some(code) = shutdown.recv() => {
                // Pebble's words when its daemon stops itself: a service's action asked for
                // it, which gives no error as the reason.
                tracing::info!("Server exiting! Reason: <nil>");
                code
            }
        }
    }
}

/// Creates or checks `$PEBBLE` and locks it; then seeds it from `PEBBLE_COPY_ONCE` when it
/// is empty. Nothing in the directory is touched before the lock is held.
fn prepare_dir(opts: &RunOptions) -> Result<DirLock, DaemonError> {
    let dir = &opts.pebble_dir;
    let seed = opts.copy_once.as_ref().filter(|source| source.exists());
    if !dir.is_dir() {
        if seed.is_none() && !opts.create_dirs {
            return Err(DaemonError::MissingDir(dir.clone()));
        }
        std::fs::create_dir_all(dir).map_err(|source| DaemonError::CreateDir {
            path: dir.clone(),
            source,
        })?;
        if seed.is_none() {
            let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
        }
    }
    let held = lock::lock(dir, lock::GRACE)?;
    if let Some(source) = seed
        && is_empty_but_the_lock(dir)
    {
        copy_tree(source, dir).map_err(|source_err| DaemonError::CopyOnce {
            from: source.clone(),
            to: dir.clone(),
            source: source_err,
        })?;
    }
    if opts.create_dirs
        && let Some(parent) = opts.socket_path.parent()
        && !parent.as_os_str().is_empty()
    {
        std::fs::create_dir_all(parent).map_err(|source| DaemonError::CreateDir {
            path: parent.to_owned(),
            source,
        })?;
    }
    Ok(held)
}

fn is_empty_but_the_lock(dir: &Path) -> bool {
    match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .filter_map(Result::ok)
            .all(|entry| entry.file_name() == lock::LOCK_FILE),
        Err(_) => true,
    }
}

fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        let kind = entry.file_type()?;
        if kind.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else if kind.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(entry.path())?, &target)?;
        } else {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

/// How many connections the kernel may queue for each listener before the daemon accepts
/// them. The kernel caps it at `net.core.somaxconn` (4096 on current kernels), which is
/// what Go's listeners, Pebble's included, ask for; tokio asks for 1024. A burst of a few
/// thousand connects (slow clients all coming back at once) overflows a short queue, and a
/// probe whose connect is dropped there waits a second for its retransmission.
const LISTEN_BACKLOG: u32 = 65535;

/// Binds the API socket with mode 0666, replacing a stale socket file.
fn bind_unix(path: &Path) -> Result<UnixListener, DaemonError> {
    let err = |source| DaemonError::Listen {
        listener: Listener::Unix,
        address: path.display().to_string(),
        source,
    };
    if let Ok(meta) = std::fs::symlink_metadata(path)
        && std::os::unix::fs::FileTypeExt::is_socket(&meta.file_type())
    {
        let _ = std::fs::remove_file(path);
    }
    let socket = tokio::net::UnixSocket::new_stream().map_err(err)?;
    socket.bind(path).map_err(err)?;
    let listener = socket.listen(LISTEN_BACKLOG).map_err(err)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666)).map_err(err)?;
    Ok(listener)
}

/// Binds `--http`: `:4000` means every interface, like Go's listener.
async fn bind_tcp(address: &str, listener: Listener) -> Result<TcpListener, DaemonError> {
    let err = |source| DaemonError::Listen {
        listener,
        address: address.to_owned(),
        source,
    };
    if let Some(port) = address.strip_prefix(':') {
        match listen_tcp(&format!("[::]:{port}")).await {
            Ok(listener) => return Ok(listener),
            Err(_) => return listen_tcp(&format!("0.0.0.0:{port}")).await.map_err(err),
        }
    }
    listen_tcp(address).await.map_err(err)
}

/// Listens on the first of `address`'s resolutions that can be bound, as
/// `TcpListener::bind` does (with `SO_REUSEADDR`), with [`LISTEN_BACKLOG`].
async fn listen_tcp(address: &str) -> std::io::Result<TcpListener> {
    let mut last = None;
    for addr in tokio::net::lookup_host(address).await? {
        let socket = if addr.is_ipv4() {
            tokio::net::TcpSocket::new_v4()?
        } else {
            tokio::net::TcpSocket::new_v6()?
        };
        let listening = socket
            .set_reuseaddr(true)
            .and_then(|()| socket.bind(addr))
            .and_then(|()| socket.listen(LISTEN_BACKLOG));
        match listening {
            Ok(listener) => return Ok(listener),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "could not resolve to any addresses",
        )
    }))
}

/// The kernel's boot ID, or a random one when the daemon is PID 1 (a container's boot).
fn boot_id() -> String {
    if std::process::id() != 1
        && let Ok(id) = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
    {
        return id.trim().to_owned();
    }
    let mut bytes = [0u8; 16];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        let _ = std::io::Read::read_exact(&mut f, &mut bytes);
    }
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}
