//! Life under systemd: the `sd_notify` protocol, written with the standard library alone.
//!
//! With `NOTIFY_SOCKET` in its environment (a `Type=notify` unit), the daemon tells systemd
//! how it is doing, one datagram per state, as Pebble does:
//!
//! - `READY=1` once its API is served (every listener bound and accepting), before it
//!   autostarts anything; systemd then considers the unit started;
//! - `STOPPING=1` as soon as its shutdown begins (Pebble sends it once it has stopped its
//!   services and listeners; systemd takes it as "deactivating" either way);
//! - `WATCHDOG=1` every half of `WATCHDOG_USEC` (set by systemd for `WatchdogSec=`), but only
//!   while the supervisor answers ([`run_watchdog`]): each ping follows a round trip through
//!   the service manager's request queue, so a supervisor that is stuck stops the pings and
//!   systemd restarts the daemon. (Pebble pings from a timer of its own, whatever the rest
//!   of it does.) The pings end when the shutdown begins.
//!
//! `NOTIFY_SOCKET` is a socket path (`/run/systemd/notify`) or, with a leading `@`, a name in
//! the abstract namespace; any other value is ignored, as Pebble ignores it. A
//! `WATCHDOG_USEC` that is not a positive number is logged and the pings are not sent
//! (Pebble refuses to start). Sending never blocks the daemon: the socket is non-blocking,
//! and a datagram systemd's queue has no room for is dropped.
//!
//! Pebble also has a socket-activation standby, inherited from snapd: with `NOTIFY_SOCKET`
//! naming an existing file, once 5 s have passed since it started (checked again after 10,
//! 20, ... up to every 5 minutes), every change is done and cleaned up and no HTTP request is
//! in flight, it stops every running service, sends `STOPPING=1` and exits with code 42, to
//! be started again by systemd when a client connects to its socket (or with code 0, when
//! stopping the services left a change behind). The daemon never does that: it is
//! not socket-activated (it binds its own socket), so nothing would start it again, and
//! stopping healthy services because nobody is calling the API is what it exists to avoid.
//! It never exits 42.

use std::ffi::OsStr;
use std::future::Future;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;
use std::time::Duration;

/// Where the notifications go.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Target {
    /// A socket file.
    Path(PathBuf),
    /// A name in the abstract namespace (`@` in `NOTIFY_SOCKET`, left out here).
    Abstract(Vec<u8>),
}

/// Sends `sd_notify` states to systemd, or nothing when not under it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Notifier {
    target: Option<Target>,
}

impl Notifier {
    /// From the daemon's `NOTIFY_SOCKET`.
    pub(crate) fn from_env() -> Notifier {
        Notifier::new(std::env::var_os("NOTIFY_SOCKET").as_deref())
    }

    /// From a value of `NOTIFY_SOCKET`.
    pub(crate) fn new(value: Option<&OsStr>) -> Notifier {
        let bytes = value.map(OsStrExt::as_bytes).unwrap_or_default();
        let target = match bytes {
            [] => None,
            [b'@', name @ ..] => Some(Target::Abstract(name.to_vec())),
            [b'/', ..] => Some(Target::Path(PathBuf::from(OsStr::from_bytes(bytes)))),
            _ => {
                tracing::info!(
                    "Ignoring NOTIFY_SOCKET: neither a path nor an abstract name: {:?}",
                    String::from_utf8_lossy(bytes)
                );
                None
            }
        };
        Notifier { target }
    }

    /// Whether there is a socket to notify.
    pub(crate) fn is_enabled(&self) -> bool {
        self.target.is_some()
    }

    /// Sends `state` (`READY=1`, say) in one datagram. A failure is logged, never fatal:
    /// systemd may be gone, or its queue full.
    pub(crate) fn notify(&self, state: &str) {
        let Some(target) = &self.target else {
            return;
        };
        if let Err(e) = send(target, state.as_bytes()) {
            tracing::debug!("Cannot notify systemd of {state}: {e}");
        }
    }
}

fn send(target: &Target, datagram: &[u8]) -> std::io::Result<()> {
    let socket = UnixDatagram::unbound()?;
    socket.set_nonblocking(true)?;
    match target {
        Target::Path(path) => socket.send_to(datagram, path)?,
        Target::Abstract(name) => {
            use std::os::linux::net::SocketAddrExt;
            let address = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
            socket.send_to_addr(datagram, &address)?
        }
    };
    Ok(())
}

/// The pause between watchdog pings for a `WATCHDOG_USEC` value: half of it, as Pebble (and
/// `sd_watchdog_enabled`'s documentation) does. `Ok(None)` when it is unset or empty (no
/// watchdog); an error naming the value when it is not a positive number of microseconds.
pub(crate) fn watchdog_interval(value: Option<&str>) -> Result<Option<Duration>, String> {
    let Some(text) = value.filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    match text.trim().parse::<f64>() {
        Ok(usec) if usec.is_finite() && usec >= 2.0 => {
            Ok(Some(Duration::from_micros((usec / 2.0) as u64)))
        }
        _ => Err(format!("cannot parse WATCHDOG_USEC: {text:?}")),
    }
}

/// Pings the watchdog every `interval` for as long as it runs, each time only once
/// `supervisor_answers` has resolved to `true` within `interval`; a tick whose answer does
/// not come in time sends nothing (logged once per stretch of silence).
pub(crate) async fn run_watchdog<F, Fut>(
    notifier: Notifier,
    interval: Duration,
    mut supervisor_answers: F,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut silent = false;
    loop {
        ticks.tick().await;
        let answered = tokio::time::timeout(interval, supervisor_answers())
            .await
            .unwrap_or(false);
        if answered {
            if std::mem::take(&mut silent) {
                tracing::info!("The service manager answers again: pinging the watchdog again");
            }
            notifier.notify("WATCHDOG=1");
        } else if !std::mem::replace(&mut silent, true) {
            tracing::warn!(
                "The service manager did not answer within {interval:?}: not pinging the systemd watchdog"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A datagram socket bound where a notifier sends, as systemd's.
    fn listener() -> (tempfile::TempDir, PathBuf, UnixDatagram) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let socket = UnixDatagram::bind(&path).unwrap();
        socket.set_nonblocking(true).unwrap();
        (dir, path, socket)
    }

    fn received(socket: &UnixDatagram) -> Vec<String> {
        let mut all = Vec::new();
        let mut buf = [0u8; 256];
        while let Ok(n) = socket.recv(&mut buf) {
            all.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
        all
    }

    #[test]
    fn notify_socket_values_name_a_path_an_abstract_name_or_nothing() {
        let target = |v: &str| Notifier::new(Some(OsStr::new(v))).target;
        assert_eq!(
            target("/run/systemd/notify"),
            Some(Target::Path("/run/systemd/notify".into()))
        );
        assert_eq!(target("@sd"), Some(Target::Abstract(b"sd".to_vec())));
        assert_eq!(target(""), None);
        assert_eq!(target("relative/path"), None);
        assert_eq!(Notifier::new(None).target, None);
    }

    #[test]
    fn states_arrive_as_datagrams_on_a_path_and_an_abstract_name() {
        let (_dir, path, socket) = listener();
        let notifier = Notifier::new(Some(path.as_os_str()));
        notifier.notify("READY=1");
        notifier.notify("STOPPING=1");
        assert_eq!(received(&socket), ["READY=1", "STOPPING=1"]);

        use std::os::linux::net::SocketAddrExt;
        let name = format!("cobble-test-{}", std::process::id());
        let address = std::os::unix::net::SocketAddr::from_abstract_name(&name).unwrap();
        let socket = UnixDatagram::bind_addr(&address).unwrap();
        socket.set_nonblocking(true).unwrap();
        Notifier::new(Some(OsStr::new(&format!("@{name}")))).notify("READY=1");
        assert_eq!(received(&socket), ["READY=1"]);
    }

    #[test]
    fn nobody_listening_is_no_error() {
        let dir = tempfile::tempdir().unwrap();
        Notifier::new(Some(dir.path().join("gone").as_os_str())).notify("READY=1");
    }

    #[test]
    fn the_watchdog_pings_at_half_of_watchdog_usec() {
        assert_eq!(watchdog_interval(None), Ok(None));
        assert_eq!(watchdog_interval(Some("")), Ok(None));
        assert_eq!(
            watchdog_interval(Some("30000000")),
            Ok(Some(Duration::from_secs(15)))
        );
        // Pebble parses it as a float too.
        assert_eq!(
            watchdog_interval(Some("1e6")),
            Ok(Some(Duration::from_millis(500)))
        );
        for bad in ["0", "-5", "soon", "NaN"] {
            assert_eq!(
                watchdog_interval(Some(bad)),
                Err(format!("cannot parse WATCHDOG_USEC: {bad:?}"))
            );
        }
    }

    /// The pings follow the supervisor's answers: a real service manager, a real datagram
    /// socket, paused time. Once the manager is wedged (alive, taking no request), the
    /// pings stop.
    #[tokio::test(start_paused = true)]
    async fn the_watchdog_pings_only_while_the_supervisor_answers() {
        let (_dir, path, socket) = listener();
        let (_plan_tx, plan_rx) =
            tokio::sync::watch::channel(std::sync::Arc::new(cobble_plan::Plan::default()));
        let (_firing_tx, firing_rx) =
            tokio::sync::watch::channel(std::sync::Arc::<crate::checks::CheckSignals>::default());
        let (shutdown_tx, _shutdown_rx) = tokio::sync::mpsc::unbounded_channel();
        let processes = std::sync::Arc::new(crate::process::OsProcesses::new(
            crate::process::registry::ProcessRegistry::new(None),
            None,
        ));
        let (services, _task) = crate::services::ServiceManager::spawn(
            plan_rx,
            firing_rx,
            processes,
            crate::logs::capture::Destinations::default(),
            shutdown_tx,
        );
        let interval = Duration::from_millis(500);
        let pinger = services.clone();
        let watchdog = tokio::spawn(run_watchdog(
            Notifier::new(Some(path.as_os_str())),
            interval,
            move || {
                let services = pinger.clone();
                async move { services.ping().await }
            },
        ));
        // Nothing before the first interval has passed.
        tokio::time::sleep(interval / 2).await;
        assert!(received(&socket).is_empty());
        tokio::time::sleep(interval * 3).await;
        assert_eq!(received(&socket), ["WATCHDOG=1"; 3]);

        services.wedge();
        tokio::time::sleep(interval * 10).await;
        assert!(
            received(&socket).is_empty(),
            "pinged for a wedged supervisor"
        );
        watchdog.abort();
    }
}
