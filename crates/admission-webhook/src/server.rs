//! The HTTPS server: `POST /apply-poddefault`, plus `/healthz` and `/readyz`, over
//! HTTP/1.1 with keep-alive.
//!
//! The listener opens only once a certificate is loaded (see [`crate::certs`]), so a TCP
//! check that connects knows TLS works. A port that cannot be bound ends the program with
//! an error (the Go webhook exits 0 then, which looks like success to a supervisor). A
//! socket passed by a service manager (see [`crate::activation`]) listens from the start,
//! but nothing is accepted from it before a certificate loads either.
//!
//! Where the Go webhook answers garbage with garbage, this one says what is wrong: a
//! Content-Type other than exactly `application/json` gets 415 (Go: an empty 200), a body
//! that is no AdmissionReview gets 400 (Go: a panic and a dropped connection). The API
//! server fails the call either way. Only HTTP/1.1 is offered (Go also offers HTTP/2; the
//! API server speaks both).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::certs::CurrentCert;
use crate::cluster::Source;
use crate::review;

/// A client has this long to finish its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// The API server sends pods well under this.
const MAX_BODY: usize = 32 << 20;

/// What every connection shares.
pub struct Webhook {
    pub source: Arc<dyn Source>,
}

/// Binds `:port` on every interface: IPv6 and IPv4 where the host has IPv6, IPv4 alone
/// where it does not.
pub async fn bind(port: u16) -> std::io::Result<TcpListener> {
    match TcpListener::bind(("::", port)).await {
        Ok(listener) => Ok(listener),
        Err(err) if err.kind() == std::io::ErrorKind::AddrInUse => Err(err),
        Err(_) => TcpListener::bind(("0.0.0.0", port)).await,
    }
}

/// The TLS settings: the current certificate for every name, no client certificates, and
/// only HTTP/1.1 offered.
pub fn tls_config(
    current: Arc<CurrentCert>,
    provider: Arc<rustls::crypto::CryptoProvider>,
) -> Result<rustls::ServerConfig, rustls::Error> {
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_cert_resolver(current);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// How long a stopping webhook waits for the requests it holds.
const DRAIN: Duration = Duration::from_secs(3);
/// How long a stopping webhook waits for the first request of a connection it accepted and
/// has read nothing from yet: the client sent it, or is about to.
const FIRST_REQUEST_WAIT: Duration = Duration::from_secs(1);

/// Accepts connections until `stop` resolves, then stops accepting and lets the requests in
/// hand finish (for at most [`DRAIN`]): each connection serves the request it is reading or
/// answering, or the first one of a connection that has not sent it yet, and closes instead
/// of waiting for another. Under a service manager that holds the listening socket, what
/// arrives after that waits in the socket's backlog for the next run, so a restart (a
/// certificate rotation, say) fails no admission.
pub async fn serve(
    listener: TcpListener,
    tls: TlsAcceptor,
    webhook: Arc<Webhook>,
    stop: impl Future<Output = ()>,
) {
    let (stopping_tx, stopping) = tokio::sync::watch::channel(false);
    let mut connections = tokio::task::JoinSet::new();
    tokio::pin!(stop);
    loop {
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) => {
                    // Out of descriptors and the like: wait a moment rather than spin.
                    tracing::warn!("cannot accept a connection: {err}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            () = &mut stop => break,
        };
        connections.spawn(connection(
            tcp,
            peer,
            tls.clone(),
            webhook.clone(),
            stopping.clone(),
        ));
    }
    drop(listener);
    let _ = stopping_tx.send(true);
    let held = connections.len();
    let drained = tokio::time::timeout(DRAIN, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::info!(
            "stopping with {} of {held} connections still open after {DRAIN:?}",
            connections.len()
        );
    }
}

/// Serves one connection until it closes, or, once the webhook is stopping, until the
/// request in hand (or a first one on its way) is answered.
async fn connection(
    tcp: tokio::net::TcpStream,
    peer: SocketAddr,
    tls: TlsAcceptor,
    webhook: Arc<Webhook>,
    mut stopping: tokio::sync::watch::Receiver<bool>,
) {
    let _ = tcp.set_nodelay(true);
    let stream = match tokio::time::timeout(HANDSHAKE_TIMEOUT, tls.accept(tcp)).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(err)) => return tracing::debug!("TLS handshake with {peer} failed: {err}"),
        Err(_) => return tracing::debug!("TLS handshake with {peer} timed out"),
    };
    let first_request = Arc::new(tokio::sync::Notify::new());
    let service = {
        let first_request = first_request.clone();
        hyper::service::service_fn(move |request| {
            first_request.notify_one();
            let webhook = webhook.clone();
            async move { Ok::<_, Infallible>(handle(request, &webhook, peer).await) }
        })
    };
    let served =
        hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service);
    tokio::pin!(served);
    let done = tokio::select! {
        done = served.as_mut() => Some(done),
        _ = stopping.wait_for(|stopping| *stopping) => None,
    };
    let done = match done {
        Some(done) => done,
        None => {
            // Stopping. A connection that has not sent its first request yet gets a moment
            // to (hyper would close it at once), then every connection finishes the request
            // in hand and closes.
            let early = tokio::select! {
                done = served.as_mut() => Some(done),
                _ = tokio::time::timeout(FIRST_REQUEST_WAIT, first_request.notified()) => None,
            };
            match early {
                Some(done) => done,
                None => {
                    served.as_mut().graceful_shutdown();
                    served.await
                }
            }
        }
    };
    if let Err(err) = done {
        tracing::debug!("connection from {peer}: {err}");
    }
}

async fn handle(
    request: Request<Incoming>,
    webhook: &Webhook,
    peer: SocketAddr,
) -> Response<Full<Bytes>> {
    match request.uri().path() {
        "/apply-poddefault" => apply_poddefault(request, webhook, peer).await,
        "/healthz" => text(StatusCode::OK, "ok"),
        "/readyz" if webhook.source.is_ready() => text(StatusCode::OK, "ok"),
        "/readyz" => text(
            StatusCode::SERVICE_UNAVAILABLE,
            "the PodDefault cache has not synced with the API server yet",
        ),
        // Go's http.NotFound.
        _ => text(StatusCode::NOT_FOUND, "404 page not found\n"),
    }
}

async fn apply_poddefault(
    request: Request<Incoming>,
    webhook: &Webhook,
    peer: SocketAddr,
) -> Response<Full<Bytes>> {
    let content_type = request.headers().get(CONTENT_TYPE).cloned();
    let body = match Limited::new(request.into_body(), MAX_BODY).collect().await {
        Ok(body) => body.to_bytes(),
        Err(err) => {
            return text(
                StatusCode::BAD_REQUEST,
                &format!("cannot read the body: {err}"),
            );
        }
    };
    // Exactly this value, as the Go webhook (the API server sends nothing else).
    if content_type.as_ref().and_then(|v| v.to_str().ok()) != Some("application/json") {
        let got = content_type
            .as_ref()
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .unwrap_or_default();
        tracing::error!("contentType={got}, expect application/json");
        return text(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            &format!("contentType={got}, expect application/json"),
        );
    }
    match review::review(&body, webhook.source.as_ref()).await {
        Ok(answer) => {
            let json = serde_json::to_vec(&answer).expect("a review serialises");
            let mut response = Response::new(Full::new(Bytes::from(json)));
            response
                .headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            response
        }
        Err(err) => {
            tracing::error!("bad AdmissionReview from {peer}: {err}");
            text(StatusCode::BAD_REQUEST, &err.to_string())
        }
    }
}

fn text(status: StatusCode, body: &str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body.to_owned())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}
