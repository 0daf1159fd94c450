//! Serving the router on a listener, one HTTP/1 connection per task.
//!
//! This is axum's own serve loop with three differences.
//!
//! Connections support half-closure. A client may send its requests, pipelined or not, then
//! shut down its sending side and wait for the answers (`curl` with a request file, scripts
//! using `shutdown(SHUT_WR)`). A server that closes on that end of input drops the answers
//! still owed; cobble answers every request it has read before it closes.
//!
//! Connections are admitted before anything is read from them ([`ConnectionCap`]): on the
//! unix socket at most so many per peer uid, root and the daemon's own uid exempt, so that
//! local users cannot exhaust the daemon's descriptors and lock out its owner; on `--http`
//! and `--https` (which have no uid to go by, and which Juju exposes on every interface) at
//! most so many in all, on each. A connection over its cap is closed unread.
//!
//! A connection must deliver a complete request head within the idle timeout of being
//! accepted or of its last response ([`Limits::idle`]): an idle keep-alive connection and
//! a client sending its headers a byte at a time are both closed. The timer only runs while
//! hyper waits for a head: a handler that takes long (a change's `wait`) or a connection
//! upgraded to a websocket (exec) is not cut by it. Accept errors such as `EMFILE` make the
//! loop wait a second and go on (axum's listener does that), never end it.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::response::Response;
use axum::routing::future::RouteFuture;
use axum::serve::Listener;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpStream, UnixStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::request_log::{self, Logged};
use super::{Peer, Transport};

/// Who is on the other end of an accepted connection.
pub trait PeerOf {
    fn peer(&self) -> Peer;
}

impl PeerOf for UnixStream {
    fn peer(&self) -> Peer {
        let cred = self.peer_cred().ok();
        Peer {
            uid: cred.map(|c| c.uid()),
            pid: cred.and_then(|c| c.pid()),
            transport: Transport::Unix,
            cert: None,
            addr: None,
        }
    }
}

impl PeerOf for TcpStream {
    fn peer(&self) -> Peer {
        Peer::http(self.peer_addr().ok())
    }
}

/// The tuning knobs of every listener, from the environment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// How long a connection may go without a complete request head
    /// (`COBBLE_IDLE_TIMEOUT`, a Go duration; `0` for no limit).
    pub idle: Option<Duration>,
    /// Connections per peer uid on the unix socket, root and the daemon's uid exempt
    /// (`COBBLE_MAX_CONNECTIONS_PER_UID`).
    pub per_uid: usize,
    /// Connections in all on `--http` (`COBBLE_MAX_HTTP_CONNECTIONS`).
    pub http_total: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            // Longer than the 90 s a Go client keeps an idle connection, so that the
            // server never closes one a client is about to reuse.
            idle: Some(Duration::from_secs(120)),
            per_uid: 64,
            http_total: 256,
        }
    }
}

impl Limits {
    /// The defaults, with what the environment sets; a value that does not parse is
    /// logged and ignored.
    pub fn from_env() -> Limits {
        let mut limits = Limits::default();
        if let Some(text) = env("COBBLE_IDLE_TIMEOUT") {
            match cobble_plan::parse_duration(&text) {
                Ok(0) => limits.idle = None,
                Ok(nanos) if nanos > 0 => limits.idle = Some(Duration::from_nanos(nanos as u64)),
                Ok(_) => tracing::warn!("Ignoring COBBLE_IDLE_TIMEOUT: negative: {text:?}"),
                Err(e) => tracing::warn!("Ignoring COBBLE_IDLE_TIMEOUT: {e}"),
            }
        }
        for (name, value) in [
            ("COBBLE_MAX_CONNECTIONS_PER_UID", &mut limits.per_uid),
            ("COBBLE_MAX_HTTP_CONNECTIONS", &mut limits.http_total),
        ] {
            if let Some(text) = env(name) {
                match text.parse::<usize>() {
                    Ok(n) if n > 0 => *value = n,
                    _ => tracing::warn!("Ignoring {name}: not a positive number: {text:?}"),
                }
            }
        }
        limits
    }
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// How many connections a listener admits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectionCap {
    /// At most this many per peer uid; root and the daemon's own uid are never refused.
    PerUid(usize),
    /// At most this many in all.
    Total(usize),
}

impl std::fmt::Display for ConnectionCap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnectionCap::PerUid(n) => write!(f, "{n} connections per user"),
            ConnectionCap::Total(n) => write!(f, "{n} connections"),
        }
    }
}

/// Open connections per admission key, shared by a listener's connection tasks.
#[derive(Debug)]
struct Admission {
    cap: ConnectionCap,
    exempt: [u32; 2],
    open: Arc<Mutex<HashMap<Option<u32>, usize>>>,
}

/// An admitted connection; the slot is freed when it is dropped.
#[derive(Debug)]
struct Ticket {
    key: Option<u32>,
    open: Arc<Mutex<HashMap<Option<u32>, usize>>>,
}

impl Admission {
    fn new(cap: ConnectionCap) -> Admission {
        Admission {
            cap,
            exempt: [0, cobble_sys::current_uid()],
            open: Arc::default(),
        }
    }

    /// A ticket for a connection from `peer`, or `None` when its cap is reached.
    fn admit(&self, uid: Option<u32>) -> Option<Ticket> {
        let (key, cap) = match self.cap {
            ConnectionCap::PerUid(_) if uid.is_some_and(|uid| self.exempt.contains(&uid)) => {
                (uid, usize::MAX)
            }
            ConnectionCap::PerUid(cap) => (uid, cap),
            ConnectionCap::Total(cap) => (None, cap),
        };
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let count = open.entry(key).or_default();
        if *count >= cap {
            return None;
        }
        *count += 1;
        Some(Ticket {
            key,
            open: self.open.clone(),
        })
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(count) = open.get_mut(&self.key) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.key);
            }
        }
    }
}

/// Serves `router` on `listener` until `cancel`, admitting connections up to `cap` and
/// closing those idle past `idle`; then lets each connection finish the request in progress,
/// and returns once all have closed.
pub async fn serve<L>(
    mut listener: L,
    router: Router,
    cancel: CancellationToken,
    cap: ConnectionCap,
    idle: Option<Duration>,
) where
    L: Listener,
    L::Io: PeerOf,
{
    let admission = Admission::new(cap);
    let mut refused: u64 = 0;
    let connections = TaskTracker::new();
    loop {
        let io = tokio::select! {
            (io, _) = listener.accept() => io,
            () = cancel.cancelled() => break,
        };
        let peer = io.peer();
        let Some(ticket) = admission.admit(peer.uid) else {
            // Closed unread. Logged once per power of two so a flood cannot fill the log.
            refused += 1;
            if refused.is_power_of_two() {
                let from = peer
                    .uid
                    .map_or_else(|| "over TCP".to_owned(), |uid| format!("from uid {uid}"));
                tracing::warn!(
                    "Refused a connection {from} over the limit of {cap} ({refused} refused so far)"
                );
            }
            continue;
        };
        let service = PeerService {
            router: router.clone(),
            peer,
        };
        let cancel = cancel.clone();
        connections.spawn(async move {
            let _ticket = ticket;
            serve_connection(io, service, cancel, idle).await;
        });
    }
    drop(listener);
    connections.close();
    connections.wait().await;
}

/// Serves one HTTP/1 connection until it closes, it stays idle past `idle`, or `cancel` and
/// the request in progress is answered.
async fn serve_connection<I>(
    io: I,
    service: PeerService,
    cancel: CancellationToken,
    idle: Option<Duration>,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .half_close(true)
        .timer(TokioTimer::new())
        .header_read_timeout(idle);
    let conn = builder
        .serve_connection(TokioIo::new(io), service)
        .with_upgrades();
    let mut conn = std::pin::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => return,
        () = cancel.cancelled() => conn.as_mut().graceful_shutdown(),
    }
    let _ = conn.await;
}

/// How long a TLS client may take over its handshake before its connection is dropped.
const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// [`serve`] over TLS (`--https`): each connection's handshake runs in its own task, so a
/// slow client holds up nobody else; the client certificate, if one a `cert` identity can
/// vouch for, goes with every request of the connection. Connections are admitted under
/// `cap` before the handshake, and idle ones closed as in [`serve`].
pub async fn serve_tls(
    listener: tokio::net::TcpListener,
    config: std::sync::Arc<rustls::ServerConfig>,
    router: Router,
    cancel: CancellationToken,
    cap: ConnectionCap,
    idle: Option<Duration>,
) {
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    let admission = Admission::new(cap);
    let connections = TaskTracker::new();
    loop {
        let (tcp, addr) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::debug!("Cannot accept HTTPS connection: {e}");
                    // Out of descriptors, say: let some close before trying again.
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = cancel.cancelled() => break,
        };
        let Some(ticket) = admission.admit(None) else {
            continue;
        };
        let acceptor = acceptor.clone();
        let router = router.clone();
        let cancel = cancel.clone();
        connections.spawn(async move {
            let _ticket = ticket;
            let Ok(Ok(tls)) = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await
            else {
                return;
            };
            let cert = crate::tls::client_cert(tls.get_ref().1.peer_certificates());
            let service = PeerService {
                router,
                peer: Peer {
                    uid: None,
                    pid: None,
                    transport: Transport::Https,
                    cert,
                    addr: Some(addr),
                },
            };
            serve_connection(tls, service, cancel, idle).await;
        });
    }
    drop(listener);
    connections.close();
    connections.wait().await;
}

/// The router, with the connection's [`Peer`] in each request's extensions (where axum's
/// `ConnectInfo` puts it).
#[derive(Clone)]
struct PeerService {
    router: Router,
    peer: Peer,
}

impl hyper::service::Service<hyper::Request<Incoming>> for PeerService {
    type Response = Response;
    type Error = Infallible;
    type Future = Logged<RouteFuture<Infallible>>;

    fn call(&self, request: hyper::Request<Incoming>) -> Self::Future {
        let mut request = request.map(Body::new);
        // Begun before routing, so that the time logged includes reading the body.
        let started = request_log::start(&request, &self.peer);
        request
            .extensions_mut()
            .insert(ConnectInfo(self.peer.clone()));
        let mut router = self.router.clone();
        Logged::new(tower_service::Service::call(&mut router, request), started)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from(uid: u32) -> Option<u32> {
        Some(uid)
    }

    #[test]
    fn each_uid_has_its_own_cap_and_root_and_the_daemon_have_none() {
        let admission = Admission::new(ConnectionCap::PerUid(2));
        let a: Vec<Ticket> = (0..2)
            .map(|_| admission.admit(from(1000)).unwrap())
            .collect();
        assert!(admission.admit(from(1000)).is_none());
        let b = admission
            .admit(from(1001))
            .expect("another uid has its own slots");
        let exempt: Vec<Ticket> = (0..10)
            .flat_map(|_| {
                [
                    admission.admit(from(0)),
                    admission.admit(from(cobble_sys::current_uid())),
                ]
            })
            .map(|t| t.expect("root and the daemon's uid are never refused"))
            .collect();
        drop(a.into_iter().next());
        assert!(
            admission.admit(from(1000)).is_some(),
            "a closed connection frees its slot"
        );
        drop((b, exempt));
    }

    #[test]
    fn a_total_cap_counts_every_peer() {
        let admission = Admission::new(ConnectionCap::Total(2));
        let held = [admission.admit(from(0)), admission.admit(None)];
        assert!(held.iter().all(Option::is_some));
        assert!(
            admission.admit(from(0)).is_none(),
            "no exemption without a uid to go by"
        );
        drop(held);
        assert!(admission.admit(None).is_some());
    }
}
