//! Start-up, serving and shutdown of the daemon.
//!
//! Start-up prepares `$PEBBLE` (creating it with `--create-dirs`, seeding it from
//! `PEBBLE_COPY_ONCE`), loads the layers once, loads the state file, becomes the subreaper and
//! starts the managers and the listeners. Unless `--hold`, it then autostarts the enabled
//! services. It runs until SIGTERM, SIGINT or SIGQUIT, or until a service action asks for a
//! shutdown; either way it stops every running service in reverse dependency order, writes the
//! state one last time and returns the exit code.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use cobble_plan::{Plan, service_args_layer};
use tokio::net::{TcpListener, UnixListener};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::RunOptions;
use crate::api::{self, ApiState, Peer};
use crate::checks::CheckManager;
use crate::layers::PlanManager;
use crate::services::changes::{ActionError, ServiceAction, ServiceActions};
use crate::services::{ServiceManager, registry};
use crate::state::{self, Persister, StateData, StateStore};

/// How often old changes are pruned.
const PRUNE_INTERVAL: Duration = Duration::from_secs(10 * 60);
/// Extra time allowed for services to stop at shutdown, beyond the longest kill-delay.
const STOP_GRACE: Duration = Duration::from_millis(5_100);

/// Errors that keep the daemon from starting.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("cannot create directory {path}: {source}")]
    CreateDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("directory {0} does not exist (use --create-dirs to create it)")]
    MissingDir(PathBuf),
    #[error("cannot copy {from} to {to}: {source}")]
    CopyOnce {
        from: PathBuf,
        to: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Plan(#[from] cobble_plan::PlanError),
    #[error("{0}")]
    State(#[from] state::PersistError),
    #[error("cannot start reaper: {0}")]
    Reaper(std::io::Error),
    #[error("cannot listen on {address}: {source}")]
    Listen {
        address: String,
        source: std::io::Error,
    },
}

/// Runs the daemon to completion and returns its exit code.
pub async fn run(opts: RunOptions) -> Result<i32, DaemonError> {
    // Catch stop signals from the very start: a SIGTERM that arrives while the daemon is
    // still starting must stop it in order, not kill it with its services left behind.
    let mut stop_signals = StopSignals::new();
    prepare_dir(&opts)?;
    let layers_dir = opts.pebble_dir.join("layers");
    let mut plan = Plan::load_dir(&layers_dir)?;
    if !opts.service_args.is_empty() {
        let layer = service_args_layer(&plan, &opts.service_args)?;
        plan = plan.add_layer(layer, false, false)?;
    }
    let state_path = opts.pebble_dir.join(".pebble.state");
    let data = if opts.persist {
        state::load(&state_path)?
    } else {
        StateData::default()
    };
    cobble_sys::reaper::start().map_err(DaemonError::Reaper)?;

    let store = StateStore::new(data);
    let plan = PlanManager::new(plan);
    let (shutdown_tx, mut shutdown_rx) = mpsc::unbounded_channel();
    // A daemon killed with SIGKILL leaves its services running: end them before anything
    // starts, so no service ever runs twice.
    let state_dir = opts.persist.then_some(opts.pebble_dir.as_path());
    if let Some(dir) = state_dir {
        let ended = registry::end_leftovers(dir, longest_plan_kill_delay(&plan.plan())).await;
        if !ended.is_empty() {
            tracing::info!("Stopped leftover processes of {}", ended.join(", "));
        }
    }
    let services = ServiceManager::spawn(plan.subscribe(), opts.verbose, shutdown_tx, state_dir);
    let actions = ServiceActions::new(plan.subscribe(), store.clone(), services.clone());
    // Checks run from the plan whatever the services do, even under --hold.
    let checks = {
        let services = services.clone();
        CheckManager::spawn(
            plan.subscribe(),
            store.clone(),
            Arc::new(move |check: &str| services.check_failed(check)),
        )
    };

    let cancel = CancellationToken::new();
    let persister = opts.persist.then(|| {
        tokio::spawn(Persister::new(store.clone(), state_path.clone()).run(cancel.clone()))
    });
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

    let unix = bind_unix(&opts.socket_path)?;
    let tcp = match &opts.http {
        Some(address) => Some(bind_tcp(address).await?),
        None => None,
    };
    let api_state = Arc::new(ApiState {
        plan,
        services: services.clone(),
        actions: actions.clone(),
        checks,
        state: store.clone(),
        boot_id: boot_id(),
        http_address: opts.http.clone(),
    });
    let router = api::router(api_state);
    let mut servers = Vec::new();
    {
        let cancel = cancel.clone();
        let service = router.clone().into_make_service_with_connect_info::<Peer>();
        servers.push(tokio::spawn(async move {
            let _ = axum::serve(unix, service)
                .with_graceful_shutdown(cancel.cancelled_owned())
                .await;
        }));
    }
    if let Some(tcp) = tcp {
        let cancel = cancel.clone();
        let service = router.into_make_service_with_connect_info::<Peer>();
        servers.push(tokio::spawn(async move {
            let _ = axum::serve(tcp, service)
                .with_graceful_shutdown(cancel.cancelled_owned())
                .await;
        }));
    }
    tracing::info!("Started daemon.");

    if !opts.hold {
        match actions.act(ServiceAction::Autostart, Vec::new()).await {
            Ok(change) => tracing::debug!("Autostart change {change} created"),
            Err(ActionError::NoDefaultServices) => {
                tracing::debug!("Cannot autostart: no default services")
            }
            Err(e) => tracing::info!("Cannot autostart: {e}"),
        }
    }

    let code = stop_signals.wait(&mut shutdown_rx).await;
    let longest_kill_delay = longest_kill_delay(&actions);
    if tokio::time::timeout(longest_kill_delay + STOP_GRACE, actions.stop_all())
        .await
        .is_err()
    {
        tracing::info!("Timed out stopping services");
    }
    cancel.cancel();
    for server in servers {
        let _ = tokio::time::timeout(Duration::from_secs(1), server).await;
    }
    if let Some(persister) = persister {
        let _ = persister.await;
    }
    let _ = std::fs::remove_file(&opts.socket_path);
    tracing::info!("Server exiting!");
    Ok(code)
}

/// The longest kill-delay among services (at least the default), to bound the final stop.
fn longest_kill_delay(actions: &ServiceActions) -> Duration {
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
            Some(code) = shutdown.recv() => code,
        }
    }
}

/// Creates or checks `$PEBBLE`, and seeds it from `PEBBLE_COPY_ONCE` when it is empty.
fn prepare_dir(opts: &RunOptions) -> Result<(), DaemonError> {
    let dir = &opts.pebble_dir;
    if let Some(source) = &opts.copy_once
        && is_empty_or_missing(dir)
        && source.exists()
    {
        copy_tree(source, dir).map_err(|source_err| DaemonError::CopyOnce {
            from: source.clone(),
            to: dir.clone(),
            source: source_err,
        })?;
    }
    if !dir.is_dir() {
        if !opts.create_dirs {
            return Err(DaemonError::MissingDir(dir.clone()));
        }
        std::fs::create_dir_all(dir).map_err(|source| DaemonError::CreateDir {
            path: dir.clone(),
            source,
        })?;
        let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
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
    Ok(())
}

fn is_empty_or_missing(dir: &Path) -> bool {
    match std::fs::read_dir(dir) {
        Ok(mut entries) => entries.next().is_none(),
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

/// Binds the API socket with mode 0666, replacing a stale socket file.
fn bind_unix(path: &Path) -> Result<UnixListener, DaemonError> {
    let err = |source| DaemonError::Listen {
        address: path.display().to_string(),
        source,
    };
    if let Ok(meta) = std::fs::symlink_metadata(path)
        && std::os::unix::fs::FileTypeExt::is_socket(&meta.file_type())
    {
        let _ = std::fs::remove_file(path);
    }
    let listener = UnixListener::bind(path).map_err(err)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666)).map_err(err)?;
    Ok(listener)
}

/// Binds `--http`: `:4000` means every interface, like Go's listener.
async fn bind_tcp(address: &str) -> Result<TcpListener, DaemonError> {
    let err = |source| DaemonError::Listen {
        address: address.to_owned(),
        source,
    };
    if let Some(port) = address.strip_prefix(':') {
        match TcpListener::bind(format!("[::]:{port}")).await {
            Ok(listener) => return Ok(listener),
            Err(_) => {
                return TcpListener::bind(format!("0.0.0.0:{port}"))
                    .await
                    .map_err(err);
            }
        }
    }
    TcpListener::bind(address).await.map_err(err)
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
