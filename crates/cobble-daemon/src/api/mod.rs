//! The HTTP API: Pebble's endpoints on the unix socket, and the open ones over `--http`.
//!
//! Transport only: each handler extracts its input, calls one manager and maps the result into
//! Pebble's envelope (`{"type","status-code","status","change"?,"result"}`). Access is decided
//! per route by the extractor its handler takes ([`Metrics`], [`Read`], [`Admin`], or none for
//! open endpoints), from the peer and its credentials: see [`access`]. Refused requests, and
//! the admin actions Pebble audits, are logged as security events.

mod access;
mod changes;
mod checks;
mod exec;
mod files;
mod health;
pub(crate) mod identities;
mod layers;
mod logs;
mod metrics;
mod notices;
mod pairing;
#[cfg(test)]
mod payload_tests;
mod plan;
mod query;
pub(crate) mod reexec;
pub(crate) mod request_log;
pub(crate) mod serve;
mod services;
mod signals;
mod system;

use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use cobble_client::types::{Envelope, ErrorResult};
use serde::Serialize;

use crate::checks::CheckManager;
use crate::exec::ExecManager;
use crate::layers::PlanManager;
use crate::services::ServiceManager;
use crate::services::changes::ServiceChanges;
use crate::state::notices::LatestWarning;
use crate::state::{Recorded, StateStore};

/// Largest request body accepted; layers and service lists are small.
pub(crate) const MAX_BODY: usize = 4 * 1024 * 1024;

/// Everything the handlers call into.
pub(crate) struct ApiState {
    pub plan: PlanManager,
    pub services: ServiceManager,
    pub service_changes: ServiceChanges,
    /// The scheduled services' next runs, for the listing.
    pub schedules: crate::services::scheduler::Scheduler,
    pub checks: CheckManager,
    pub exec: ExecManager,
    pub forward: crate::logs::forward::LogForwarder,
    /// The persisted service logs, read back when a ring lacks the older lines.
    pub log_files: crate::logs::persist::LogFiles,
    pub state: StateStore,
    pub boot_id: String,
    /// `$PEBBLE`: where a push's temporary file is named when it is on the target's file
    /// system, so that one a killed daemon leaves is swept at the next start.
    pub pebble_dir: std::path::PathBuf,
    pub http_address: Option<String>,
    pub https_address: Option<String>,
    /// Where `POST /v1/cobble/reexec` hands its requests to the daemon.
    pub reexec: reexec::ReexecRequests,
    /// The listeners' connections: whether they drain, before a re-execution.
    pub connections: Arc<serve::OpenConnections>,
}

pub(crate) type Shared = Arc<ApiState>;

pub(crate) use access::{Admin, Handable, Metrics, Peer, Read, Transport};

/// An error response in Pebble's envelope.
#[derive(Debug)]
pub(crate) struct ApiError {
    pub status: StatusCode,
    pub message: String,
    pub kind: &'static str,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
            kind: "",
        }
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }

    pub(crate) fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, message)
    }

    pub(crate) fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, message)
    }

    pub(crate) fn unauthorized() -> ApiError {
        ApiError {
            kind: "login-required",
            ..ApiError::new(StatusCode::UNAUTHORIZED, "access denied")
        }
    }

    pub(crate) fn with_kind(mut self, kind: &'static str) -> ApiError {
        self.kind = kind;
        self
    }

    /// A request's `action` that its endpoint does not know, quoted as Go's `%q` quotes it.
    pub(crate) fn invalid_action(action: &str) -> ApiError {
        ApiError::bad_request(format!("invalid action {}", cobble_plan::go_quote(action)))
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        envelope(
            "error",
            self.status,
            None,
            ErrorResult {
                message: self.message,
                kind: self.kind.into(),
                value: None,
            },
        )
    }
}

/// A `sync` response carrying `result`.
pub(crate) fn sync<T: Serialize>(result: T) -> Response {
    envelope("sync", StatusCode::OK, None, result)
}

/// A `sync` 200 answer whose `result` `write_result` writes as JSON itself (about `size`
/// bytes of it): for the service listing, which writes its own. The envelope around it is
/// byte for byte the one [`sync`] writes.
pub(crate) fn sync_json(write_result: impl FnOnce(&mut Vec<u8>), size: usize) -> Response {
    let mut bytes = Vec::with_capacity(128 + size);
    write_sync_envelope(&mut bytes, write_result, latest_warning("sync"));
    json_response(StatusCode::OK, bytes)
}

/// Writes a `sync` 200 envelope with the result `write_result` writes and `latest_warning`.
fn write_sync_envelope(
    out: &mut Vec<u8>,
    write_result: impl FnOnce(&mut Vec<u8>),
    latest_warning: Option<String>,
) {
    out.extend_from_slice(br#"{"type":"sync","status-code":200,"status":"OK","result":"#);
    write_result(out);
    if let Some(warning) = latest_warning {
        out.extend_from_slice(br#","latest-warning":"#);
        serde_json::to_writer(&mut *out, &warning).expect("strings serialise");
    }
    out.push(b'}');
}

/// A `sync` response with another status than 200 (`/v1/health` answers 502 that way).
pub(crate) fn sync_with_status<T: Serialize>(status: StatusCode, result: T) -> Response {
    envelope("sync", status, None, result)
}

/// An `async` response for a change (`"result": null`). It takes a [`Recorded`] ID, which
/// only the store makes once the change is on disk: no handler can answer with a change ID
/// that a crash could lose.
pub(crate) fn async_change(change_id: Recorded<u64>) -> Response {
    async_change_with(change_id, ())
}

/// An `async` response for a change that also carries a result (exec's task ID).
pub(crate) fn async_change_with<T: Serialize>(change_id: Recorded<u64>, result: T) -> Response {
    envelope(
        "async",
        StatusCode::ACCEPTED,
        Some(change_id.get().to_string()),
        result,
    )
}

fn envelope<T: Serialize>(
    kind: &str,
    status: StatusCode,
    change: Option<String>,
    result: T,
) -> Response {
    let body = Envelope {
        kind: kind.into(),
        status_code: status.as_u16(),
        status: status.canonical_reason().unwrap_or("").into(),
        change,
        result,
        latest_warning: latest_warning(kind),
    };
    let mut bytes = Vec::with_capacity(128);
    serde_json::to_writer(&mut bytes, &body).expect("responses serialise");
    json_response(status, bytes)
}

/// A response with this JSON body.
fn json_response(status: StatusCode, bytes: Vec<u8>) -> Response {
    let mut response = (status, bytes).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

tokio::task_local! {
    /// The warnings of the daemon whose request is being answered (see
    /// [`with_latest_warning`]).
    static WARNINGS: Arc<LatestWarning>;
}

/// Answers a request with its daemon's warnings at hand, so that every envelope built for it
/// carries that daemon's `latest-warning` and no other's.
async fn with_latest_warning(
    State(api): State<Shared>,
    request: Request,
    next: axum::middleware::Next,
) -> Response {
    WARNINGS
        .scope(api.state.latest_warning(), next.run(request))
        .await
}

/// The `latest-warning` of an answer: the time a warning last repeated, on every answer but
/// an error, once there is a warning.
pub(crate) fn latest_warning(kind: &str) -> Option<String> {
    if kind == "error" {
        return None;
    }
    WARNINGS
        .try_with(|warnings| warnings.get())
        .ok()
        .flatten()
        .map(cobble_client::time::format_rfc3339_nano)
}

/// How much of a body over [`MAX_BODY`] is read and thrown away before the 400 goes out.
///
/// A connection closed with unread data in it is reset: the client, still sending, gets a
/// broken pipe and never reads the answer. Reading on lets it finish sending and read why it
/// was refused; past this bound the daemon stops paying for it and the connection closes.
const DRAIN_LIMIT: usize = 64 * 1024 * 1024;

/// Decodes a JSON request body as Pebble does (see [`crate::go_json`]), with its error wording
/// (`<context>: <reason>`).
pub(crate) async fn json_body<T: crate::go_json::GoPayload>(
    body: Body,
    context: &str,
) -> Result<T, ApiError> {
    let bytes = read_body(body, MAX_BODY)
        .await
        .map_err(|e| ApiError::bad_request(format!("{context}: {e}")))?;
    crate::go_json::decode(&bytes).map_err(|e| ApiError::bad_request(format!("{context}: {e}")))
}

/// Why a request body could not be read.
#[derive(Debug, thiserror::Error)]
enum BodyError {
    #[error("request body too large")]
    TooLarge,
    #[error("{0}")]
    Read(axum::Error),
}

/// Reads a body of at most `limit` bytes; a longer one is drained (up to [`DRAIN_LIMIT`])
/// and refused.
async fn read_body(body: Body, limit: usize) -> Result<Bytes, BodyError> {
    use futures_util::StreamExt;
    let mut stream = body.into_data_stream();
    let mut bytes = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(BodyError::Read)?;
        if bytes.len() + chunk.len() <= limit {
            bytes.extend_from_slice(&chunk);
            continue;
        }
        let mut seen = bytes.len() + chunk.len();
        drop(bytes);
        while seen <= limit + DRAIN_LIMIT {
            match stream.next().await {
                Some(Ok(chunk)) => seen += chunk.len(),
                _ => break,
            }
        }
        return Err(BodyError::TooLarge);
    }
    Ok(Bytes::from(bytes))
}

/// The router, shared by the unix socket and `--http` (whose peers have no uid).
pub(crate) fn router(state: Shared) -> Router {
    let endpoints = Router::new()
        .route("/v1/system-info", get(system::system_info))
        .route("/v1/health", get(health::health))
        .route(
            "/v1/checks",
            get(checks::get_checks).post(checks::post_checks),
        )
        .route(
            "/v1/checks/refresh",
            axum::routing::post(checks::post_checks_refresh),
        )
        .route("/v1/metrics", get(metrics::get_metrics))
        .route(
            "/v1/services",
            get(services::get_services).post(services::post_services),
        )
        .route(
            "/v1/services/{name}",
            get(services::not_implemented).post(services::not_implemented_admin),
        )
        .route("/v1/plan", get(plan::get_plan))
        .route("/v1/layers", axum::routing::post(layers::post_layers))
        .route("/v1/signals", axum::routing::post(signals::post_signals))
        .route("/v1/changes", get(changes::get_changes))
        .route(
            "/v1/changes/{id}",
            get(changes::get_change).post(changes::post_change),
        )
        .route("/v1/changes/{id}/wait", get(changes::wait_change))
        .route("/v1/files", get(files::get_files).post(files::post_files))
        .route(
            "/v1/identities",
            get(identities::get_identities).post(identities::post_identities),
        )
        .route("/v1/logs", get(logs::get_logs))
        .route(
            "/v1/notices",
            get(notices::get_notices).post(notices::post_notices),
        )
        .route("/v1/notices/{id}", get(notices::get_notice))
        .route("/v1/pairing", axum::routing::post(pairing::post_pairing))
        .route("/v1/exec", axum::routing::post(exec::post_exec))
        .route(
            "/v1/cobble/reexec",
            axum::routing::post(reexec::post_reexec),
        )
        .route(
            "/v1/tasks/{task_id}/websocket/{websocket}",
            get(exec::get_task_websocket),
        )
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::middleware::from_fn(read_small_bodies_first))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            with_latest_warning,
        ))
        .with_state(state);
    // A router's own layers run once a route is chosen; this one must run before.
    Router::new()
        .fallback_service(endpoints)
        .layer(axum::middleware::from_fn(head_is_not_get))
}

/// Every route of [`router`] as `(METHOD, path)`, with its path parameters as the router
/// spells them (`/v1/changes/{id}`). Read from this file's own `.route(` calls, so that what
/// lists the API (the API reference's test, the fuzzer) cannot fall behind the router.
pub fn routes() -> Vec<(&'static str, &'static str)> {
    const SOURCE: &str = include_str!("mod.rs");
    let body = SOURCE
        .split("fn router(")
        .nth(1)
        .and_then(|rest| rest.split("\n}\n").next())
        .unwrap_or_default();
    let mut routes = Vec::new();
    // `.route("/v1/x", get(a).post(b))`: the path, then the methods up to the next route.
    for chunk in body.split(".route(").skip(1) {
        let Some(path) = chunk.split('"').nth(1).filter(|p| p.starts_with("/v1/")) else {
            continue;
        };
        let handlers = chunk.split(".fallback(").next().unwrap_or_default();
        for (method, name) in [
            ("GET", "get"),
            ("POST", "post"),
            ("PUT", "put"),
            ("DELETE", "delete"),
        ] {
            let called = [
                format!("({name}("),
                format!(".{name}("),
                format!("routing::{name}("),
                format!(" {name}("),
            ]
            .iter()
            .any(|call| handlers.contains(call.as_str()));
            if called {
                routes.push((method, path));
            }
        }
    }
    routes
}

/// The method a request came with, when routing saw another one (see [`head_is_not_get`]).
#[derive(Clone)]
struct RoutedAs(Method);

/// Answers `HEAD` as Pebble does: axum would serve it with an endpoint's GET handler, but
/// Pebble's endpoints have no HEAD handler, so a known path answers 405 (`method "HEAD" not
/// allowed`, its body dropped as HEAD requires) and an unknown one 404. The request is routed
/// as TRACE, which no endpoint takes, so that the router tells which.
async fn head_is_not_get(mut request: Request, next: axum::middleware::Next) -> Response {
    if request.method() == Method::HEAD {
        request.extensions_mut().insert(RoutedAs(Method::HEAD));
        *request.method_mut() = Method::TRACE;
    }
    next.run(request).await
}

/// What a connection admitted beyond a listener's cap is served (see `serve`'s fair
/// admission): `/v1/health`, so that a probe is answered however busy the daemon is, and a
/// 503 for everything else.
pub(crate) fn reserve_router(state: Shared) -> Router {
    Router::new()
        .route("/v1/health", get(health::health))
        .fallback(too_many_connections)
        .with_state(state)
}

async fn too_many_connections() -> ApiError {
    ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "too many connections")
}

/// Bodies up to this size are read before routing.
pub(crate) const SMALL_BODY: u64 = 64 * 1024;

/// Reads a small request body completely before the request is routed.
///
/// A reply that does not need the body (an unknown path, a wrong method, access denied)
/// would otherwise go out while the client is still sending it; the connection then closes
/// under the client, which sees a broken pipe instead of the error (Python's urllib sends the
/// body after the headers). Go's server drains small unread bodies the same way. Large and
/// streamed bodies (file pushes) are left to their handlers.
async fn read_small_bodies_first(request: Request, next: axum::middleware::Next) -> Response {
    let length = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    match length {
        Some(n) if n > 0 && n <= SMALL_BODY => {
            let (parts, body) = request.into_parts();
            match axum::body::to_bytes(body, SMALL_BODY as usize).await {
                Ok(bytes) => {
                    next.run(Request::from_parts(parts, Body::from(bytes)))
                        .await
                }
                Err(_) => ApiError::bad_request("cannot read request body").into_response(),
            }
        }
        _ => next.run(request).await,
    }
}

async fn not_found() -> ApiError {
    ApiError::not_found("invalid API endpoint requested")
}

async fn method_not_allowed(method: Method, request: Request) -> ApiError {
    let method = match request.extensions().get::<RoutedAs>() {
        Some(RoutedAs(original)) => original.clone(),
        None => method,
    };
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        format!("method \"{method}\" not allowed"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_routes_are_read_from_the_router() {
        let routes = routes();
        for route in [
            ("GET", "/v1/system-info"),
            ("POST", "/v1/services"),
            ("GET", "/v1/services"),
            ("GET", "/v1/notices/{id}"),
            ("POST", "/v1/identities"),
            ("GET", "/v1/logs"),
            ("POST", "/v1/pairing"),
            ("GET", "/v1/tasks/{task_id}/websocket/{websocket}"),
        ] {
            assert!(routes.contains(&route), "{route:?} is not in {routes:?}");
        }
        assert!(routes.len() >= 25, "only {} routes", routes.len());
        assert!(!routes.contains(&("POST", "/v1/plan")));
    }

    #[test]
    fn an_envelope_written_around_a_result_is_the_one_serde_writes() {
        let result = serde_json::json!([{"name": "a\"b", "startup": "enabled"}]);
        for warning in [None, Some("2026-01-02T03:04:05.123456789Z".to_owned())] {
            let mut written = Vec::new();
            write_sync_envelope(
                &mut written,
                |out| serde_json::to_writer(out, &result).unwrap(),
                warning.clone(),
            );
            let expected = serde_json::to_vec(&Envelope {
                kind: "sync".into(),
                status_code: 200,
                status: "OK".into(),
                change: None,
                result: &result,
                latest_warning: warning,
            })
            .unwrap();
            assert_eq!(
                String::from_utf8(written).unwrap(),
                String::from_utf8(expected).unwrap()
            );
        }
    }
}
