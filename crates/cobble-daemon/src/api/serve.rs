//! Serving the router on a listener, one HTTP/1 connection per task.
//!
//! This is axum's own serve loop with one difference: connections support half-closure. A
//! client may send its requests, pipelined or not, then shut down its sending side and wait
//! for the answers (`curl` with a request file, scripts using `shutdown(SHUT_WR)`). A server
//! that closes on that end of input drops the answers still owed; cobble answers every
//! request it has read before it closes.

use std::convert::Infallible;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::response::Response;
use axum::routing::future::RouteFuture;
use axum::serve::Listener;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpStream, UnixStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::{Peer, Transport};

/// Who is on the other end of an accepted connection.
pub trait PeerOf {
    fn peer(&self) -> Peer;
}

impl PeerOf for UnixStream {
    fn peer(&self) -> Peer {
        Peer {
            uid: self.peer_cred().ok().map(|c| c.uid()),
            transport: Transport::Unix,
            cert: None,
        }
    }
}

impl PeerOf for TcpStream {
    fn peer(&self) -> Peer {
        Peer::http()
    }
}

/// Serves `router` on `listener` until `cancel`; then lets each connection finish the
/// request in progress, and returns once all have closed.
pub async fn serve<L>(mut listener: L, router: Router, cancel: CancellationToken)
where
    L: Listener,
    L::Io: PeerOf,
{
    let connections = TaskTracker::new();
    loop {
        let io = tokio::select! {
            (io, _) = listener.accept() => io,
            () = cancel.cancelled() => break,
        };
        let service = PeerService {
            router: router.clone(),
            peer: io.peer(),
        };
        connections.spawn(serve_connection(io, service, cancel.clone()));
    }
    drop(listener);
    connections.close();
    connections.wait().await;
}

/// Serves one HTTP/1 connection until it closes, or until `cancel` and the request in
/// progress is answered.
async fn serve_connection<I>(io: I, service: PeerService, cancel: CancellationToken)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.half_close(true);
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
/// vouch for, goes with every request of the connection.
pub async fn serve_tls(
    listener: tokio::net::TcpListener,
    config: std::sync::Arc<rustls::ServerConfig>,
    router: Router,
    cancel: CancellationToken,
) {
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    let connections = TaskTracker::new();
    loop {
        let tcp = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((tcp, _)) => tcp,
                Err(e) => {
                    tracing::debug!("Cannot accept HTTPS connection: {e}");
                    // Out of descriptors, say: let some close before trying again.
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = cancel.cancelled() => break,
        };
        let acceptor = acceptor.clone();
        let router = router.clone();
        let cancel = cancel.clone();
        connections.spawn(async move {
            let Ok(Ok(tls)) = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await
            else {
                return;
            };
            let cert = crate::tls::trusted_client_cert(tls.get_ref().1.peer_certificates());
            let service = PeerService {
                router,
                peer: Peer {
                    uid: None,
                    transport: Transport::Https,
                    cert,
                },
            };
            serve_connection(tls, service, cancel).await;
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
    type Future = RouteFuture<Infallible>;

    fn call(&self, request: hyper::Request<Incoming>) -> Self::Future {
        let mut request = request.map(Body::new);
        request
            .extensions_mut()
            .insert(ConnectInfo(self.peer.clone()));
        let mut router = self.router.clone();
        tower_service::Service::call(&mut router, request)
    }
}
