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
//! most so many in all, on each.
//!
//! # Fair admission
//!
//! A cap alone lets whoever holds the connections keep everyone else out: six hundred
//! clients sending a header byte a second would hold `--http`'s every slot, and the
//! kubelet's probe of `/v1/health` would be closed unread, again and again, until the pod
//! is restarted. So a connection holds its slot only while it is worth more than a newcomer:
//!
//! - **Every connection is waiting or busy** ([`Slot`]). It waits from its accept, or from
//!   the end of its last answer, until its request is complete (the head, and the body when
//!   it is one read before routing); then it is busy until the answer has gone out.
//! - **A newcomer over the cap evicts the connection that has waited longest**, which is
//!   closed unanswered: a slow client has been waiting since it connected, a probe is
//!   complete a moment after its connect, so the probe gets in and the slowest client goes.
//!   Busy connections are never evicted.
//! - **When every slot is busy**, a newcomer gets a slot of a small reserve
//!   ([`RESERVE_CONNECTIONS`]) that answers `GET /v1/health` and nothing else (503 `too many
//!   connections`), one request per connection. The reserve is evicted the same way, and its
//!   requests are answered at once, so `/v1/health` is always answered. Only when the
//!   reserve is busy too is a connection closed unread.
//! - **Deadlines** ([`Limits`]): a waiting connection that has sent nothing of its next
//!   request is closed after the idle timeout (idle keep-alive connections); once the first
//!   byte of a request has arrived, the request must be complete within the header timeout
//!   (a client sending its headers a byte at a time, or a small body so). The timers only
//!   run while a connection waits: a handler that takes long (a change's `wait`) or a
//!   connection upgraded to a websocket (exec) is not cut by them.
//!
//! Accept errors such as `EMFILE` make the loop wait a second and go on (axum's listener
//! does that), never end it.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::response::Response;
use axum::serve::Listener;
use hyper::body::{Body as HttpBody, Frame, Incoming, SizeHint};
use hyper::upgrade::Upgraded;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpStream, UnixStream};
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::request_log::{self, Logged};
use super::{Handable, Peer, Transport};
use crate::exec::ws::Connection;
use crate::tls_handoff::HandableTls;

/// Who is on the other end of an accepted connection.
pub(crate) trait PeerOf {
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
            handable: Some(Handable::Unix(std::os::fd::AsRawFd::as_raw_fd(self))),
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
pub(crate) struct Limits {
    /// How long a connection may stay without a byte of a new request, after its accept or
    /// its last answer (`COBBLE_IDLE_TIMEOUT`, a Go duration; `0` for no limit).
    pub idle: Option<Duration>,
    /// How long a request may take to arrive whole once its first byte has
    /// (`COBBLE_HEADER_TIMEOUT`, a Go duration; `0` for no limit). Never longer than `idle`.
    pub header: Option<Duration>,
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
            // A request head is a few hundred bytes, sent in one write by every client;
            // ten seconds is ages for it, and short enough that a slow client frees its
            // slot soon even when nobody needs it.
            header: Some(Duration::from_secs(10)),
            per_uid: 64,
            http_total: 256,
        }
    }
}

impl Limits {
    /// The defaults, with what the environment sets; a value that does not parse is
    /// logged and ignored.
    pub(crate) fn from_env() -> Limits {
        let mut limits = Limits::default();
        for (name, value) in [
            ("COBBLE_IDLE_TIMEOUT", &mut limits.idle),
            ("COBBLE_HEADER_TIMEOUT", &mut limits.header),
        ] {
            if let Some(text) = env(name) {
                match cobble_plan::parse_duration(&text) {
                    Ok(0) => *value = None,
                    Ok(nanos) if nanos > 0 => *value = Some(Duration::from_nanos(nanos as u64)),
                    Ok(_) => tracing::warn!("Ignoring {name}: negative: {text:?}"),
                    Err(e) => tracing::warn!("Ignoring {name}: {e}"),
                }
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

    /// The deadlines a connection is held to.
    pub(crate) fn timeouts(&self) -> Timeouts {
        let header = match (self.header, self.idle) {
            (Some(header), Some(idle)) => Some(header.min(idle)),
            (header, _) => header,
        };
        Timeouts {
            idle: self.idle,
            header,
        }
    }
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// The deadlines of a waiting connection (see [`Limits`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Timeouts {
    /// From the accept or the last answer to the first byte of the next request.
    pub idle: Option<Duration>,
    /// From a request's first byte to the request complete.
    pub header: Option<Duration>,
}

/// How many connections a listener admits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ConnectionCap {
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

/// Connections a listener admits beyond its cap when every admitted one is busy: they are
/// answered `/v1/health` only, and closed after one answer.
pub(crate) const RESERVE_CONNECTIONS: usize = 16;

/// The routers a listener serves: everything, and what its reserve answers.
#[derive(Clone)]
pub(crate) struct Routers {
    /// The API.
    pub api: Router,
    /// `/v1/health` alone, for connections admitted to the reserve.
    pub reserve: Router,
}

/// Where a connection is, packed in one word: the phase in the top two bits, an instant in
/// milliseconds after the admission's start below.
const PHASE_SHIFT: u32 = 62;
const WAITING_IDLE: u64 = 0;
const WAITING_REQUEST: u64 = 1;
const BUSY: u64 = 2;
const TIME_MASK: u64 = (1 << PHASE_SHIFT) - 1;

/// One connection's place in its listener's admission: whether it waits for a request (and
/// since when) or is busy answering one, and whether it was evicted. Shared by the
/// connection's task, its I/O (which notices a request's first byte) and its requests
/// (which are complete, and then answered).
#[derive(Debug)]
pub(crate) struct Slot {
    /// The admission's start, which the times are counted from.
    base: Instant,
    /// Phase and time, see [`PHASE_SHIFT`].
    state: AtomicU64,
    /// Set once another connection took this one's place.
    evicted: AtomicBool,
    /// Wakes the connection's task once evicted.
    evict: Notify,
}

/// A slot's phase, unpacked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Waiting for the first byte of a request since this instant.
    Idle(Instant),
    /// Waiting for the rest of a request whose first byte came at this instant.
    Request(Instant),
    /// Answering a request.
    Busy,
}

impl Slot {
    fn new(base: Instant) -> Arc<Slot> {
        let slot = Slot {
            base,
            state: AtomicU64::new(0),
            evicted: AtomicBool::new(false),
            evict: Notify::new(),
        };
        slot.set(WAITING_IDLE);
        Arc::new(slot)
    }

    fn pack(&self, phase: u64) -> u64 {
        let millis = Instant::now()
            .saturating_duration_since(self.base)
            .as_millis() as u64;
        (phase << PHASE_SHIFT) | (millis & TIME_MASK)
    }

    fn set(&self, phase: u64) {
        self.state.store(self.pack(phase), Ordering::Release);
    }

    fn phase(&self) -> Phase {
        let state = self.state.load(Ordering::Acquire);
        let at = self.base + Duration::from_millis(state & TIME_MASK);
        match state >> PHASE_SHIFT {
            WAITING_IDLE => Phase::Idle(at),
            WAITING_REQUEST => Phase::Request(at),
            _ => Phase::Busy,
        }
    }

    /// Since when the connection has waited (in the admission's milliseconds), or `None`
    /// when it is busy.
    fn waiting_since(&self) -> Option<u64> {
        let state = self.state.load(Ordering::Acquire);
        (state >> PHASE_SHIFT != BUSY).then_some(state & TIME_MASK)
    }

    /// Bytes arrived: the first of a request, if the connection was idle.
    fn on_bytes(&self) {
        let state = self.state.load(Ordering::Acquire);
        if state >> PHASE_SHIFT == WAITING_IDLE {
            let _ = self.state.compare_exchange(
                state,
                self.pack(WAITING_REQUEST),
                Ordering::AcqRel,
                Ordering::Relaxed,
            );
        }
    }

    /// The request is complete: the connection is busy until its answer is out.
    fn on_request_complete(&self) {
        self.set(BUSY);
    }

    /// The answer is out: the connection waits for its next request.
    fn on_answered(&self) {
        self.set(WAITING_IDLE);
    }

    /// When the connection must be closed unless it makes progress, as it is now.
    fn deadline(&self, timeouts: Timeouts) -> Option<Instant> {
        match self.phase() {
            Phase::Idle(since) => timeouts.idle.map(|t| since + t),
            Phase::Request(since) => timeouts.header.map(|t| since + t),
            Phase::Busy => None,
        }
    }

    fn evict(&self) {
        self.evicted.store(true, Ordering::Release);
        self.evict.notify_one();
    }

    fn is_evicted(&self) -> bool {
        self.evicted.load(Ordering::Acquire)
    }
}

/// The connections of one admission key (a uid, or everyone).
type Pool = Vec<Arc<Slot>>;

/// The pools of a listener's connections, by admission key.
type Pools = Arc<Mutex<HashMap<Option<u32>, Pool>>>;

/// Open connections per admission key, shared by a listener's connection tasks.
#[derive(Debug)]
struct Admission {
    cap: ConnectionCap,
    exempt: [u32; 2],
    base: Instant,
    open: Pools,
    /// The reserve's connections (under the key `None`).
    reserve: Pools,
}

/// Where an accepted connection was admitted.
#[derive(Debug)]
enum Admitted {
    /// Among the listener's connections, served the whole API.
    Full(Ticket),
    /// In the reserve, served `/v1/health` once.
    Reserve(Ticket),
    /// Nowhere: every slot is busy.
    Refused,
}

/// Whether an admission took another connection's place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Taken {
    Free,
    Evicted,
}

/// An admitted connection; the slot is freed when it is dropped.
#[derive(Debug)]
struct Ticket {
    slot: Arc<Slot>,
    /// Where it is counted; `None` for an exempt uid, which nothing counts.
    pool: Option<(Option<u32>, Pools)>,
    taken: Taken,
}

impl Admission {
    fn new(cap: ConnectionCap) -> Admission {
        Admission {
            cap,
            exempt: [0, cobble_sys::current_uid()],
            base: Instant::now(),
            open: Arc::default(),
            reserve: Arc::default(),
        }
    }

    /// Admits a connection from `uid`: into its pool, evicting the connection there that has
    /// waited longest if the pool is full; else into the reserve, the same way; else not.
    fn admit(&self, uid: Option<u32>) -> Admitted {
        let (key, cap) = match self.cap {
            ConnectionCap::PerUid(_) if uid.is_some_and(|uid| self.exempt.contains(&uid)) => {
                return Admitted::Full(Ticket {
                    slot: Slot::new(self.base),
                    pool: None,
                    taken: Taken::Free,
                });
            }
            ConnectionCap::PerUid(cap) => (uid, cap),
            ConnectionCap::Total(cap) => (None, cap),
        };
        if let Some(ticket) = self.admit_into(&self.open, key, cap) {
            return Admitted::Full(ticket);
        }
        match self.admit_into(&self.reserve, None, RESERVE_CONNECTIONS) {
            Some(ticket) => Admitted::Reserve(ticket),
            None => Admitted::Refused,
        }
    }

    fn admit_into(&self, pools: &Pools, key: Option<u32>, cap: usize) -> Option<Ticket> {
        let slot = Slot::new(self.base);
        let mut open = pools.lock().unwrap_or_else(|e| e.into_inner());
        let pool = open.entry(key).or_default();
        let mut taken = Taken::Free;
        if pool.len() >= cap {
            let (index, _) = pool
                .iter()
                .enumerate()
                .filter_map(|(i, s)| Some((i, s.waiting_since()?)))
                .min_by_key(|&(_, since)| since)?;
            pool.swap_remove(index).evict();
            taken = Taken::Evicted;
        }
        pool.push(slot.clone());
        Some(Ticket {
            slot,
            pool: Some((key, pools.clone())),
            taken,
        })
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let Some((key, pools)) = &self.pool else {
            return;
        };
        let mut open = pools.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(pool) = open.get_mut(key) {
            // An evicted slot is gone already.
            if let Some(index) = pool.iter().position(|s| Arc::ptr_eq(s, &self.slot)) {
                pool.swap_remove(index);
            }
            if pool.is_empty() {
                open.remove(key);
            }
        }
    }
}

/// What a listener counts, for its log lines: once per power of two, so that a flood cannot
/// fill the log.
#[derive(Debug, Default)]
struct Counters {
    evicted: u64,
    reserved: u64,
    refused: u64,
}

impl Counters {
    fn count(&mut self, admitted: &Admitted, peer: &Peer, cap: ConnectionCap) {
        let from = || {
            peer.uid
                .map_or_else(|| "over TCP".to_owned(), |uid| format!("from uid {uid}"))
        };
        let bump = |n: &mut u64| {
            *n += 1;
            n.is_power_of_two()
        };
        match admitted {
            Admitted::Full(ticket) | Admitted::Reserve(ticket)
                if ticket.taken == Taken::Evicted && bump(&mut self.evicted) =>
            {
                tracing::info!(
                    "Closed the connection that waited longest to admit one {} over the limit of {cap} ({} so far)",
                    from(),
                    self.evicted
                );
            }
            _ => {}
        }
        match admitted {
            Admitted::Reserve(_) if bump(&mut self.reserved) => tracing::warn!(
                "Every connection is busy: admitted one {} to answer /v1/health only ({} so far)",
                from(),
                self.reserved
            ),
            Admitted::Refused if bump(&mut self.refused) => tracing::warn!(
                "Refused a connection {} over the limit of {cap} ({} refused so far)",
                from(),
                self.refused
            ),
            _ => {}
        }
    }
}

/// The connections open on every listener, counted so that a re-execution (and the
/// shutdown) can wait for them to be answered and closed; and whether they are draining, so
/// that answers that wait (a notices long poll, a logs follower) end early.
#[derive(Debug)]
pub(crate) struct OpenConnections {
    count: AtomicUsize,
    changed: Notify,
    draining: tokio::sync::watch::Sender<bool>,
}

impl Default for OpenConnections {
    fn default() -> OpenConnections {
        OpenConnections {
            count: AtomicUsize::new(0),
            changed: Notify::new(),
            draining: tokio::sync::watch::Sender::new(false),
        }
    }
}

impl OpenConnections {
    /// Starts or ends a drain.
    pub(crate) fn set_draining(&self, draining: bool) {
        self.draining.send_replace(draining);
    }

    /// Returns once the connections are draining: an answer that waits should end now, as
    /// its wait would end (a long poll's timeout, a follower's end of stream).
    pub(crate) async fn drained(&self) {
        let mut draining = self.draining.subscribe();
        let _ = draining.wait_for(|d| *d).await;
    }

    /// Counts a connection open until the guard is dropped.
    fn opened(self: &Arc<Self>) -> OpenGuard {
        self.count.fetch_add(1, Ordering::SeqCst);
        OpenGuard(self.clone())
    }

    /// How many are open.
    pub(crate) fn count(&self) -> usize {
        self.count.load(Ordering::SeqCst)
    }

    /// Returns once at most `n` connections are open.
    pub(crate) async fn at_most(&self, n: usize) {
        loop {
            let notified = self.changed.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            if self.count() <= n {
                return;
            }
            notified.await;
        }
    }
}

/// One open connection, counted while it lives.
struct OpenGuard(Arc<OpenConnections>);

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.count.fetch_sub(1, Ordering::SeqCst);
        self.0.changed.notify_waiters();
    }
}

/// Serves `routers` on `listener` until `cancel`, admitting connections fairly under `cap`
/// and holding them to `timeouts`; then stops accepting, tells each connection to finish the
/// request in progress and close, and returns the listener, open: connections not accepted
/// yet wait in its queue. `open` counts the connections until they close.
pub(crate) async fn serve<L>(
    mut listener: L,
    routers: Routers,
    cancel: CancellationToken,
    cap: ConnectionCap,
    timeouts: Timeouts,
    open: Arc<OpenConnections>,
) -> L
where
    L: Listener,
    L::Io: PeerOf,
{
    let admission = Admission::new(cap);
    let mut counters = Counters::default();
    loop {
        let io = tokio::select! {
            (io, _) = listener.accept() => io,
            () = cancel.cancelled() => break,
        };
        let peer = io.peer();
        let admitted = admission.admit(peer.uid);
        counters.count(&admitted, &peer, cap);
        let (ticket, router, keep_alive) = match admitted {
            Admitted::Full(ticket) => (ticket, routers.api.clone(), true),
            Admitted::Reserve(ticket) => (ticket, routers.reserve.clone(), false),
            // Closed unread.
            Admitted::Refused => continue,
        };
        let service = PeerService {
            router,
            peer,
            slot: ticket.slot.clone(),
        };
        let cancel = cancel.clone();
        let counted = open.opened();
        tokio::spawn(async move {
            let _counted = counted;
            let slot = ticket.slot.clone();
            let _ticket = ticket;
            serve_connection(io, service, cancel, &slot, timeouts, keep_alive).await;
        });
    }
    listener
}

/// The longest request head (request line and headers) the daemon reads, as Go's server
/// reads one (`http.DefaultMaxHeaderBytes` and its 4 KiB of slack); a longer one is answered
/// `431 Request Header Fields Too Large`, as Pebble answers it. The buffer grows only as the
/// head does.
const MAX_HEAD: usize = (1 << 20) + 4096;
/// The most header fields a request may have (Go counts none, only bytes): past it, `431`,
/// as for a head too long. Each parse of a head sets aside room for this many, about 64 KiB.
const MAX_HEADERS: usize = 1000;

/// Serves one HTTP/1 connection until it closes, it is evicted, it misses a deadline, or
/// `cancel` and the request in progress is answered.
async fn serve_connection<I>(
    io: I,
    service: PeerService,
    cancel: CancellationToken,
    slot: &Arc<Slot>,
    timeouts: Timeouts,
    keep_alive: bool,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .half_close(true)
        .keep_alive(keep_alive)
        .timer(TokioTimer::new())
        .max_header_size(MAX_HEAD)
        // Room for a whole head of the longest kind, and what follows it in the same read.
        .max_buf_size(MAX_HEAD + 64 * 1024)
        .max_headers(MAX_HEADERS)
        // The deadlines are the slot's, below.
        .header_read_timeout(None);
    let conn = builder
        .serve_connection(TokioIo::new(Tracked::new(io, slot.clone())), service)
        .with_upgrades();
    let mut conn = std::pin::pin!(conn);
    let cancelled = cancel.cancelled();
    let mut cancelled = std::pin::pin!(cancelled);
    let evicted = slot.evict.notified();
    let mut evicted = std::pin::pin!(evicted);
    let sleep = tokio::time::sleep_until(Instant::now());
    let mut sleep = std::pin::pin!(sleep);
    let mut armed: Option<Instant> = None;
    // One poll function rather than a `select!` loop: the deadline is read again after the
    // connection has made progress in the same poll, so a request's first byte moves it
    // without a wake-up of its own.
    let ended = std::future::poll_fn(|cx| {
        if conn.as_mut().poll(cx).is_ready() || slot.is_evicted() {
            return Poll::Ready(true);
        }
        if evicted.as_mut().poll(cx).is_ready() {
            return Poll::Ready(true);
        }
        if cancelled.as_mut().poll(cx).is_ready() {
            return Poll::Ready(false);
        }
        loop {
            let deadline = slot.deadline(timeouts);
            if deadline != armed {
                armed = deadline;
                if let Some(at) = deadline {
                    sleep.as_mut().reset(at);
                }
            }
            let Some(at) = armed else {
                // Busy, or no limits: the request's completion and answer come through
                // `conn`, which polls again.
                return Poll::Pending;
            };
            ready!(sleep.as_mut().poll(cx));
            if slot.deadline(timeouts) == Some(at) {
                return Poll::Ready(true);
            }
            // It made progress meanwhile: arm the new deadline.
        }
    })
    .await;
    if ended {
        return;
    }
    conn.as_mut().graceful_shutdown();
    let _ = conn.await;
}

/// How long a TLS client may take over its handshake before its connection is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// [`serve`] over TLS (`--https`): each connection's handshake runs in its own task, so a
/// slow client holds up nobody else; the client certificate, if one a `cert` identity can
/// vouch for, goes with every request of the connection. Connections are admitted under
/// `cap` before the handshake (a connection in its handshake waits, and may be evicted),
/// and held to `timeouts` as in [`serve`].
pub(crate) async fn serve_tls(
    listener: tokio::net::TcpListener,
    config: Arc<rustls::ServerConfig>,
    routers: Routers,
    cancel: CancellationToken,
    cap: ConnectionCap,
    timeouts: Timeouts,
    open: Arc<OpenConnections>,
) -> tokio::net::TcpListener {
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    let admission = Admission::new(cap);
    let mut counters = Counters::default();
    loop {
        let (tcp, addr) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::debug!("Cannot accept HTTPS connection: {e}");
                    // Out of descriptors, say: let some close before trying again.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = cancel.cancelled() => break,
        };
        let peer = Peer {
            uid: None,
            pid: None,
            transport: Transport::Https,
            cert: None,
            addr: Some(addr),
            handable: None,
        };
        let admitted = admission.admit(None);
        counters.count(&admitted, &peer, cap);
        let (ticket, router, keep_alive) = match admitted {
            Admitted::Full(ticket) => (ticket, routers.api.clone(), true),
            Admitted::Reserve(ticket) => (ticket, routers.reserve.clone(), false),
            Admitted::Refused => continue,
        };
        let acceptor = acceptor.clone();
        let cancel = cancel.clone();
        let counted = open.opened();
        tokio::spawn(async move {
            let _counted = counted;
            let slot = ticket.slot.clone();
            let _ticket = ticket;
            let handshake = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp));
            let tls = tokio::select! {
                done = handshake => match done {
                    Ok(Ok(tls)) => tls,
                    _ => return,
                },
                () = slot.evict.notified() => return,
            };
            let cert = crate::tls::client_cert(tls.get_ref().1.peer_certificates());
            let tls = HandableTls::new(tls);
            let service = PeerService {
                router,
                peer: Peer {
                    cert,
                    handable: Some(Handable::Tls(tls.clone())),
                    ..peer
                },
                slot: slot.clone(),
            };
            serve_connection(tls, service, cancel, &slot, timeouts, keep_alive).await;
        });
    }
    listener
}

/// The connection a websocket upgrade took over, for exec: the unix socket itself when it
/// is one, so that its relay can splice on it. Exec is for admins, and plain HTTP grants no
/// more than metrics, so the connection is the unix socket's or a TLS one.
pub(crate) fn upgraded_connection(upgraded: Upgraded) -> Connection {
    match upgraded.downcast::<TokioIo<Tracked<UnixStream>>>() {
        Ok(parts) => Connection::Unix {
            stream: parts.io.into_inner().into_inner(),
            read_ahead: parts.read_buf,
        },
        Err(upgraded) => Connection::Other(upgraded),
    }
}

/// A connection's I/O, telling its [`Slot`] when bytes arrive. What a websocket upgrade
/// takes over (see [`upgraded_connection`], which unwraps a unix socket's for exec).
#[derive(Debug)]
pub(crate) struct Tracked<I> {
    io: I,
    slot: Arc<Slot>,
}

impl<I> Tracked<I> {
    fn new(io: I, slot: Arc<Slot>) -> Tracked<I> {
        Tracked { io, slot }
    }

    /// The connection itself.
    pub(crate) fn into_inner(self) -> I {
        self.io
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Tracked<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        ready!(Pin::new(&mut self.io).poll_read(cx, buf))?;
        if buf.filled().len() > before {
            self.slot.on_bytes();
        }
        Poll::Ready(Ok(()))
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Tracked<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// The router, with the connection's [`Peer`] in each request's extensions (where axum's
/// `ConnectInfo` puts it), telling the connection's [`Slot`] when a request is complete and
/// when its answer is out.
#[derive(Clone)]
struct PeerService {
    router: Router,
    peer: Peer,
    slot: Arc<Slot>,
}

impl hyper::service::Service<hyper::Request<Incoming>> for PeerService {
    type Response = Response;
    type Error = Infallible;
    type Future = Logged<Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>>;

    fn call(&self, request: hyper::Request<Incoming>) -> Self::Future {
        // A small body is read before routing (see `read_small_bodies_first`): the request
        // is complete once it is. Any other is complete with its head.
        let small_body = request
            .headers()
            .get(hyper::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
            .is_some_and(|n| n > 0 && n <= super::SMALL_BODY);
        let slot = self.slot.clone();
        let mut request = if small_body {
            request.map(|body| {
                Body::new(Completing {
                    body,
                    slot: Some(slot.clone()),
                })
            })
        } else {
            slot.on_request_complete();
            request.map(Body::new)
        };
        // Begun before routing, so that the time logged includes reading the body.
        let started = request_log::start(&request, &self.peer);
        request
            .extensions_mut()
            .insert(ConnectInfo(self.peer.clone()));
        let mut router = self.router.clone();
        let answer = tower_service::Service::call(&mut router, request);
        let answer = Box::pin(async move {
            let response = answer.await?;
            Ok(response.map(|body| {
                Body::new(Answering {
                    body,
                    _answered: Answered(slot),
                })
            }))
        });
        Logged::new(answer, started)
    }
}

/// A request body that completes its request when it ends.
struct Completing {
    body: Incoming,
    slot: Option<Arc<Slot>>,
}

impl HttpBody for Completing {
    type Data = bytes::Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let frame = ready!(Pin::new(&mut self.body).poll_frame(cx));
        if (frame.is_none() || self.body.is_end_stream())
            && let Some(slot) = self.slot.take()
        {
            slot.on_request_complete();
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// Marks its connection's answer as out when dropped: hyper drops a response body once it
/// has written it, or given up on it.
struct Answered(Arc<Slot>);

impl Drop for Answered {
    fn drop(&mut self) {
        self.0.on_answered();
    }
}

/// A response body that tells its connection when the answer is out.
struct Answering {
    body: Body,
    _answered: Answered,
}

impl HttpBody for Answering {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from(uid: u32) -> Option<u32> {
        Some(uid)
    }

    fn ticket(admitted: Admitted) -> Option<Ticket> {
        match admitted {
            Admitted::Full(ticket) => Some(ticket),
            _ => None,
        }
    }

    fn busy(ticket: Ticket) -> Ticket {
        ticket.slot.on_request_complete();
        ticket
    }

    #[tokio::test(start_paused = true)]
    async fn each_uid_has_its_own_cap_and_root_and_the_daemon_have_none() {
        let admission = Admission::new(ConnectionCap::PerUid(2));
        let a: Vec<Ticket> = (0..2)
            .map(|_| busy(ticket(admission.admit(from(1000))).unwrap()))
            .collect();
        assert!(ticket(admission.admit(from(1000))).is_none());
        let b = ticket(admission.admit(from(1001))).expect("another uid has its own slots");
        let exempt: Vec<Ticket> = (0..10)
            .flat_map(|_| {
                [
                    admission.admit(from(0)),
                    admission.admit(from(cobble_sys::current_uid())),
                ]
            })
            .map(|t| ticket(t).expect("root and the daemon's uid are never refused"))
            .collect();
        drop(a.into_iter().next());
        assert!(
            ticket(admission.admit(from(1000))).is_some(),
            "a closed connection frees its slot"
        );
        drop((b, exempt));
    }

    #[tokio::test(start_paused = true)]
    async fn a_total_cap_counts_every_peer() {
        let admission = Admission::new(ConnectionCap::Total(2));
        let held =
            [admission.admit(from(0)), admission.admit(None)].map(|a| busy(ticket(a).unwrap()));
        assert!(
            ticket(admission.admit(from(0))).is_none(),
            "no exemption without a uid to go by"
        );
        drop(held);
        assert!(ticket(admission.admit(None)).is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn a_newcomer_over_the_cap_evicts_the_connection_waiting_longest() {
        let admission = Admission::new(ConnectionCap::Total(3));
        let oldest = ticket(admission.admit(None)).unwrap();
        tokio::time::advance(Duration::from_secs(1)).await;
        let answering = busy(ticket(admission.admit(None)).unwrap());
        tokio::time::advance(Duration::from_secs(1)).await;
        let newer = ticket(admission.admit(None)).unwrap();
        // The oldest has sent the first byte of a request since: it still waits, since it
        // connected (a slow client's every byte is no progress that counts).
        oldest.slot.on_bytes();
        tokio::time::advance(Duration::from_secs(1)).await;
        let probe = ticket(admission.admit(None)).expect("admitted in place of the oldest");
        assert_eq!(probe.taken, Taken::Evicted);
        assert!(oldest.slot.is_evicted());
        assert!(!answering.slot.is_evicted() && !newer.slot.is_evicted());
        // Its ticket's drop does not free a second slot.
        drop(oldest);
        tokio::time::advance(Duration::from_secs(1)).await;
        let next = ticket(admission.admit(None)).unwrap();
        assert!(newer.slot.is_evicted(), "the next oldest waiting goes next");
        assert!(!probe.slot.is_evicted() && !answering.slot.is_evicted());
        drop((answering, probe, next));
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_connection_waits_from_its_last_answer() {
        let admission = Admission::new(ConnectionCap::Total(2));
        let kept = ticket(admission.admit(None)).unwrap();
        let fresh = ticket(admission.admit(None)).unwrap();
        tokio::time::advance(Duration::from_secs(1)).await;
        kept.slot.on_request_complete();
        kept.slot.on_answered();
        let _newcomer = ticket(admission.admit(None)).unwrap();
        assert!(
            fresh.slot.is_evicted(),
            "waiting since its accept, before the answer"
        );
        assert!(!kept.slot.is_evicted());
    }

    #[tokio::test(start_paused = true)]
    async fn with_every_connection_busy_a_newcomer_gets_the_reserve_then_nothing() {
        let admission = Admission::new(ConnectionCap::Total(1));
        let _busy = busy(ticket(admission.admit(None)).unwrap());
        let reserve: Vec<Ticket> = (0..RESERVE_CONNECTIONS)
            .map(|_| match admission.admit(None) {
                Admitted::Reserve(ticket) => busy(ticket),
                other => panic!("not in the reserve: {other:?}"),
            })
            .collect();
        assert!(matches!(admission.admit(None), Admitted::Refused));
        reserve[0].slot.on_answered();
        assert!(
            matches!(admission.admit(None), Admitted::Reserve(_)),
            "a waiting reserve connection is evicted like any other"
        );
        assert!(reserve[0].slot.is_evicted());
    }

    #[tokio::test(start_paused = true)]
    async fn deadlines_follow_the_phase() {
        let timeouts = Limits {
            idle: Some(Duration::from_secs(120)),
            header: Some(Duration::from_secs(10)),
            ..Limits::default()
        }
        .timeouts();
        let start = Instant::now();
        let slot = Slot::new(start);
        assert_eq!(
            slot.deadline(timeouts),
            Some(start + Duration::from_secs(120))
        );
        tokio::time::advance(Duration::from_secs(5)).await;
        slot.on_bytes();
        let first_byte = start + Duration::from_secs(5);
        assert_eq!(
            slot.deadline(timeouts),
            Some(first_byte + Duration::from_secs(10))
        );
        tokio::time::advance(Duration::from_secs(1)).await;
        slot.on_bytes();
        assert_eq!(
            slot.deadline(timeouts),
            Some(first_byte + Duration::from_secs(10)),
            "more bytes of the same request do not move it"
        );
        slot.on_request_complete();
        assert_eq!(slot.deadline(timeouts), None);
        tokio::time::advance(Duration::from_secs(300)).await;
        slot.on_answered();
        assert_eq!(
            slot.deadline(timeouts),
            Some(Instant::now() + Duration::from_secs(120))
        );
    }

    #[test]
    fn the_header_timeout_is_never_longer_than_the_idle_timeout() {
        let limits = |idle: Option<u64>, header: Option<u64>| {
            Limits {
                idle: idle.map(Duration::from_secs),
                header: header.map(Duration::from_secs),
                ..Limits::default()
            }
            .timeouts()
            .header
            .map(|d| d.as_secs())
        };
        assert_eq!(limits(Some(120), Some(10)), Some(10));
        assert_eq!(limits(Some(1), Some(10)), Some(1));
        assert_eq!(limits(None, Some(10)), Some(10));
        assert_eq!(limits(Some(1), None), None);
    }
}
