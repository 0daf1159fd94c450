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
        let cancel = cancel.clone();
        connections.spawn(async move {
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
