//! The typed client: one async method per API call, all going through [`Client::request`].

use std::time::{Duration, Instant};

use hyper::Method;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::ClientConfig;
use crate::error::Error;
use crate::transport::{self, Endpoint, RawResponse};
use crate::types::{
    ChangeAction, ChangeInfo, ErrorResult, LayersRequest, ServiceInfo, ServicesAction,
    SignalsRequest, SystemInfo,
};
use crate::types::{
    CheckInfo, ChecksAction, ChecksActionResult, HealthInfo, RefreshCheckRequest,
    RefreshCheckResult,
};

/// How long one `/v1/changes/{id}/wait` long-poll may last before the client asks again.
///
/// Short slices keep a dead daemon from holding a request open forever; each expiry is a 504
/// that [`Client::wait_change`] simply retries.
const WAIT_SLICE: Duration = Duration::from_secs(30);

/// Which changes `GET /v1/changes` returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ChangeSelector {
    /// Changes that are not ready yet (the daemon's default).
    #[default]
    InProgress,
    /// Changes that are ready (done, errored, held or undone).
    Ready,
    /// Every change the daemon still remembers.
    All,
}

impl ChangeSelector {
    /// The query value: `in-progress`, `ready` or `all`.
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeSelector::InProgress => "in-progress",
            ChangeSelector::Ready => "ready",
            ChangeSelector::All => "all",
        }
    }
}

/// A decoded response envelope that was not an error.
#[derive(Debug, Clone, PartialEq)]
pub struct Response {
    /// `sync` or `async`.
    pub kind: String,
    /// The HTTP status code the envelope reports.
    pub status_code: u16,
    /// The change ID of an async response.
    pub change: Option<String>,
    /// The payload; `Value::Null` when absent.
    pub result: Value,
    /// When a warning last repeated on the daemon, if it said.
    pub latest_warning: Option<String>,
}

/// The envelope as it arrives, tolerant of missing fields so that errors can be reported.
#[derive(serde::Deserialize)]
struct WireEnvelope {
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(rename = "status-code", default)]
    status_code: u16,
    #[serde(default)]
    status: String,
    #[serde(default)]
    change: Option<String>,
    #[serde(default)]
    result: Option<Value>,
    #[serde(rename = "latest-warning", default)]
    latest_warning: Option<String>,
}

/// Decodes a JSON envelope, turning an error envelope into [`Error::Api`].
pub fn decode_envelope(http_status: u16, body: &[u8]) -> Result<Response, Error> {
    let envelope: WireEnvelope = serde_json::from_slice(body).map_err(|e| {
        Error::Protocol(format!(
            "cannot decode {:?}: {e}",
            String::from_utf8_lossy(body)
        ))
    })?;
    let status_code = if envelope.status_code == 0 {
        http_status
    } else {
        envelope.status_code
    };
    if envelope.kind == "error" {
        let server_error = || Error::Protocol(format!("server error: {:?}", envelope.status));
        let detail: ErrorResult = envelope
            .result
            .map(serde_json::from_value)
            .transpose()
            .map_err(|_| server_error())?
            .ok_or_else(server_error)?;
        if detail.message.is_empty() {
            return Err(server_error());
        }
        return Err(Error::Api {
            status_code,
            kind: detail.kind,
            message: detail.message,
            value: detail.value,
        });
    }
    Ok(Response {
        kind: envelope.kind,
        status_code,
        change: envelope.change,
        result: envelope.result.unwrap_or(Value::Null),
        latest_warning: envelope.latest_warning,
    })
}

/// An async client for the Pebble API that cobble serves.
///
/// Cheap to clone; every call opens its own connection. Clones share what the daemon last
/// said about warnings ([`Client::latest_warning`]).
#[derive(Debug, Clone)]
pub struct Client {
    endpoint: Endpoint,
    latest_warning: std::sync::Arc<std::sync::Mutex<Option<String>>>,
}

impl Client {
    /// Creates a client; fails only for an unusable `base_url`.
    pub fn new(config: ClientConfig) -> Result<Self, Error> {
        Ok(Client {
            endpoint: Endpoint::from_config(&config)?,
            latest_warning: Default::default(),
        })
    }

    /// The `latest-warning` of the last answer that carried one: when a warning last
    /// repeated on the daemon (RFC 3339), for the CLI's hint that there are new warnings.
    pub fn latest_warning(&self) -> Option<String> {
        self.latest_warning
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Sends one request and returns the raw response, whatever its status and body.
    ///
    /// `path_and_query` is like `/v1/logs?n=10`; `body` is sent as `application/json`.
    pub async fn raw_request(
        &self,
        method: Method,
        path_and_query: &str,
        body: Option<Vec<u8>>,
    ) -> Result<RawResponse, Error> {
        transport::send(&self.endpoint, method, path_and_query, body).await
    }

    /// Where the daemon is, for the modules that stream requests themselves.
    pub(crate) fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// Sends one request and decodes its envelope; error envelopes become [`Error::Api`].
    pub async fn request(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, &str)],
        body: Option<&Value>,
    ) -> Result<Response, Error> {
        let body = body
            .map(serde_json::to_vec)
            .transpose()
            .map_err(|e| Error::Protocol(format!("cannot encode request: {e}")))?;
        let raw = self
            .raw_request(method, &with_query(path, query), body)
            .await?;
        let response = decode_envelope(raw.status_code, &raw.body)?;
        if let Some(latest) = &response.latest_warning {
            *self
                .latest_warning
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = Some(latest.clone());
        }
        Ok(response)
    }

    /// `GET` a sync endpoint and decode its `result`.
    pub async fn get<T: DeserializeOwned>(
        &self,
        path: &str,
        query: &[(&str, &str)],
    ) -> Result<T, Error> {
        let response = self.request(Method::GET, path, query, None).await?;
        sync_result(response)
    }

    /// `POST` a JSON body to a sync endpoint and decode its `result`.
    pub async fn post<B: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<T, Error> {
        let response = self.post_value(path, body).await?;
        sync_result(response)
    }

    /// `POST` a JSON body to an async endpoint and return the change ID.
    pub async fn post_async<B: Serialize + ?Sized>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<String, Error> {
        let response = self.post_value(path, body).await?;
        if response.kind != "async" {
            return Err(Error::Protocol(format!(
                "expected async response for \"POST\" on {path:?}, got {:?}",
                response.kind
            )));
        }
        response
            .change
            .filter(|id| !id.is_empty())
            .ok_or_else(|| Error::Protocol("async response without change reference".into()))
    }

    async fn post_value<B: Serialize + ?Sized>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<Response, Error> {
        let body = serde_json::to_value(body)
            .map_err(|e| Error::Protocol(format!("cannot encode request: {e}")))?;
        self.request(Method::POST, path, &[], Some(&body)).await
    }

    /// `GET /v1/system-info`: the daemon's version and boot ID.
    pub async fn system_info(&self) -> Result<SystemInfo, Error> {
        self.get("/v1/system-info", &[]).await
    }

    /// `POST /v1/cobble/reexec`: re-executes the daemon in place with `binary` (the binary
    /// it was started from when empty); answers once the new program has taken over.
    pub async fn reexec(&self, binary: &str) -> Result<crate::types::ReexecResult, Error> {
        let body = crate::types::ReexecRequest {
            binary: binary.to_owned(),
        };
        self.post("/v1/cobble/reexec", &body).await
    }

    /// `GET /v1/services`: the named services (all when `names` is empty), sorted by name.
    /// Unknown names are silently left out by the daemon.
    pub async fn services(&self, names: &[String]) -> Result<Vec<ServiceInfo>, Error> {
        let names = names.join(",");
        self.get("/v1/services", &[("names", &names)]).await
    }

    /// `POST /v1/services` with any action (`start`, `stop`, `restart`, `replan`,
    /// `autostart`); returns the ID of the change that carries it out.
    pub async fn services_action(&self, action: &str, names: &[String]) -> Result<String, Error> {
        let body = ServicesAction {
            action: action.to_string(),
            services: names.to_vec(),
        };
        self.post_async("/v1/services", &body).await
    }

    /// Starts the named services and their requirements; returns the change ID.
    pub async fn start(&self, names: &[String]) -> Result<String, Error> {
        self.services_action("start", names).await
    }

    /// Stops the named services and their dependents; returns the change ID.
    pub async fn stop(&self, names: &[String]) -> Result<String, Error> {
        self.services_action("stop", names).await
    }

    /// Restarts the named services; returns the change ID.
    pub async fn restart(&self, names: &[String]) -> Result<String, Error> {
        self.services_action("restart", names).await
    }

    /// Restarts services whose configuration changed and starts `startup: enabled` ones;
    /// returns the change ID.
    pub async fn replan(&self) -> Result<String, Error> {
        self.services_action("replan", &[]).await
    }

    /// Starts the `startup: enabled` services; fails with kind `no-default-services` when
    /// there are none. Returns the change ID.
    pub async fn autostart(&self) -> Result<String, Error> {
        self.services_action("autostart", &[]).await
    }

    /// `GET /v1/changes/{id}`.
    pub async fn change(&self, id: &str) -> Result<ChangeInfo, Error> {
        self.get(&format!("/v1/changes/{}", escape(id)), &[]).await
    }

    /// `GET /v1/changes`, optionally only those concerning one service. The daemon returns
    /// them in no particular order.
    pub async fn changes(
        &self,
        select: ChangeSelector,
        for_service: Option<&str>,
    ) -> Result<Vec<ChangeInfo>, Error> {
        let mut query = vec![("select", select.as_str())];
        if let Some(service) = for_service {
            query.push(("for", service));
        }
        self.get("/v1/changes", &query).await
    }

    /// Waits until the change is ready and returns it, whatever its final status; a change
    /// that failed is returned with `err` set, not as an `Err`.
    ///
    /// Uses the `/v1/changes/{id}/wait` long-poll in slices, retrying each 504. With a
    /// `timeout`, the 504 [`Error::Api`] of the last slice is returned once it has passed.
    pub async fn wait_change(
        &self,
        id: &str,
        timeout: Option<Duration>,
    ) -> Result<ChangeInfo, Error> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let path = format!("/v1/changes/{}/wait", escape(id));
        loop {
            let slice = match deadline {
                // Never send a zero timeout: the daemon reads it as "wait forever".
                Some(deadline) => deadline
                    .saturating_duration_since(Instant::now())
                    .clamp(Duration::from_millis(1), WAIT_SLICE),
                None => WAIT_SLICE,
            };
            let timeout = format!("{:.3}s", slice.as_secs_f64());
            match self.get(&path, &[("timeout", &timeout)]).await {
                Err(e) if e.status_code() == Some(504) => {
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        return Err(e);
                    }
                }
                other => return other,
            }
        }
    }

    /// `POST /v1/changes/{id}` `{"action":"abort"}`; returns the change as it is now.
    pub async fn abort_change(&self, id: &str) -> Result<ChangeInfo, Error> {
        let body = ChangeAction {
            action: "abort".into(),
        };
        self.post(&format!("/v1/changes/{}", escape(id)), &body)
            .await
    }

    /// `POST /v1/layers`: adds (or, with `combine`, merges into the layer of the same label)
    /// a layer given as YAML text. `inner` allows a label inside a layers subdirectory.
    pub async fn add_layer(
        &self,
        label: &str,
        yaml: &str,
        combine: bool,
        inner: bool,
    ) -> Result<(), Error> {
        let body = LayersRequest {
            action: "add".into(),
            combine,
            inner,
            label: label.into(),
            format: "yaml".into(),
            layer: yaml.into(),
        };
        let _: Value = self.post("/v1/layers", &body).await?;
        Ok(())
    }

    /// `GET /v1/plan?format=yaml`: the combined plan as YAML text.
    pub async fn plan_yaml(&self) -> Result<String, Error> {
        self.get("/v1/plan", &[("format", "yaml")]).await
    }

    /// `POST /v1/signals`: sends a signal such as `SIGHUP` to the named running services.
    pub async fn send_signal(&self, signal: &str, names: &[String]) -> Result<(), Error> {
        let body = SignalsRequest {
            signal: signal.into(),
            services: names.to_vec(),
        };
        let _: Value = self.post("/v1/signals", &body).await?;
        Ok(())
    }

    /// `GET /v1/checks`: the checks at `level` (`""`, `alive` or `ready`; exact match) with
    /// the given names (all when empty), sorted by name.
    pub async fn checks(&self, level: &str, names: &[String]) -> Result<Vec<CheckInfo>, Error> {
        let names = names.join(",");
        let mut query = Vec::new();
        if !level.is_empty() {
            query.push(("level", level));
        }
        if !names.is_empty() {
            query.push(("names", names.as_str()));
        }
        self.get("/v1/checks", &query).await
    }

    /// `POST /v1/checks` with `start`: returns the checks that were started (not those
    /// already running).
    pub async fn start_checks(&self, names: &[String]) -> Result<Vec<String>, Error> {
        self.checks_action("start", names).await
    }

    /// `POST /v1/checks` with `stop`: returns the checks that were stopped.
    pub async fn stop_checks(&self, names: &[String]) -> Result<Vec<String>, Error> {
        self.checks_action("stop", names).await
    }

    async fn checks_action(&self, action: &str, names: &[String]) -> Result<Vec<String>, Error> {
        let body = ChecksAction {
            action: action.into(),
            checks: names.to_vec(),
        };
        let result: ChecksActionResult = self.post("/v1/checks", &body).await?;
        Ok(result.changed)
    }

    /// `POST /v1/checks/refresh`: runs a check now and returns it with the run's error.
    pub async fn refresh_check(&self, name: &str) -> Result<RefreshCheckResult, Error> {
        let body = RefreshCheckRequest { name: name.into() };
        self.post("/v1/checks/refresh", &body).await
    }

    /// `GET /v1/health`: whether the matching checks are healthy. The daemon answers an
    /// unhealthy result with status 502 but a normal body, which this returns as `false`.
    pub async fn health(&self, level: &str, names: &[String]) -> Result<bool, Error> {
        let names = names.join(",");
        let mut query = Vec::new();
        if !level.is_empty() {
            query.push(("level", level));
        }
        if !names.is_empty() {
            query.push(("names", names.as_str()));
        }
        let info: HealthInfo = self.get("/v1/health", &query).await?;
        Ok(info.healthy)
    }
}

fn sync_result<T: DeserializeOwned>(response: Response) -> Result<T, Error> {
    if response.kind != "sync" {
        return Err(Error::Protocol(format!(
            "expected sync response, got {:?}",
            response.kind
        )));
    }
    serde_json::from_value(response.result)
        .map_err(|e| Error::Protocol(format!("cannot unmarshal: {e}")))
}

/// Appends `?k=v&...` with percent-encoded values. `,` (name lists) and `/` (file paths) stay
/// as they are: both are plain characters in a query.
pub(crate) fn with_query(path: &str, query: &[(&str, &str)]) -> String {
    let mut out = path.to_string();
    for (i, (key, value)) in query.iter().enumerate() {
        out.push(if i == 0 { '?' } else { '&' });
        out.push_str(&percent_encode(key, b",/"));
        out.push('=');
        out.push_str(&percent_encode(value, b",/"));
    }
    out
}

/// Percent-encodes a path segment (a change ID).
pub(crate) fn escape(text: &str) -> String {
    percent_encode(text, b"")
}

/// Percent-encodes everything but RFC 3986 unreserved characters and the bytes in `keep`.
fn percent_encode(text: &str, keep: &[u8]) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-_.~".contains(&byte) || keep.contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sync_envelope_decodes_result() {
        let body = br#"{"type":"sync","status-code":200,"status":"OK","result":{"boot-id":"b","version":"v1"}}"#;
        let response = decode_envelope(200, body).unwrap();
        let info: SystemInfo = sync_result(response).unwrap();
        assert_eq!(info.version, "v1");
        assert_eq!(info.boot_id, "b");
    }

    #[test]
    fn async_envelope_keeps_change_id() {
        let body = br#"{"type":"async","status-code":202,"status":"Accepted","change":"42","result":null}"#;
        let response = decode_envelope(202, body).unwrap();
        assert_eq!(response.kind, "async");
        assert_eq!(response.change.as_deref(), Some("42"));
        assert_eq!(response.result, Value::Null);
    }

    #[test]
    fn error_envelope_becomes_api_error() {
        let body = br#"{"type":"error","status-code":400,"status":"Bad Request","result":{"message":"no default services","kind":"no-default-services"}}"#;
        match decode_envelope(400, body) {
            Err(Error::Api {
                status_code,
                kind,
                message,
                value,
            }) => {
                assert_eq!(status_code, 400);
                assert_eq!(kind, "no-default-services");
                assert_eq!(message, "no default services");
                assert_eq!(value, None);
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn error_envelope_value_is_kept() {
        let body = br#"{"type":"error","status-code":500,"status":"Internal Server Error","result":{"message":"m","value":{"a":1}}}"#;
        let Err(Error::Api { kind, value, .. }) = decode_envelope(500, body) else {
            panic!("expected api error");
        };
        assert_eq!(kind, "");
        assert_eq!(value, Some(serde_json::json!({"a": 1})));
    }

    #[test]
    fn error_envelope_without_message_reports_status() {
        let body =
            br#"{"type":"error","status-code":500,"status":"Internal Server Error","result":{}}"#;
        let err = decode_envelope(500, body).unwrap_err();
        assert_eq!(err.to_string(), r#"server error: "Internal Server Error""#);
    }

    #[test]
    fn missing_status_code_falls_back_to_http_status() {
        let body = br#"{"type":"error","result":{"message":"could not foo"}}"#;
        let err = decode_envelope(404, body).unwrap_err();
        assert_eq!(err.status_code(), Some(404));
        assert_eq!(err.to_string(), "could not foo");
    }

    #[test]
    fn non_json_body_is_a_protocol_error() {
        let err = decode_envelope(502, b"Bad Gateway").unwrap_err();
        assert!(matches!(err, Error::Protocol(_)));
        assert!(
            err.to_string()
                .starts_with(r#"cannot decode "Bad Gateway": "#)
        );
    }

    #[test]
    fn sync_result_rejects_async() {
        let response = decode_envelope(
            202,
            br#"{"type":"async","status-code":202,"change":"1","result":null}"#,
        )
        .unwrap();
        let err = sync_result::<Value>(response).unwrap_err();
        assert_eq!(err.to_string(), r#"expected sync response, got "async""#);
    }

    #[test]
    fn query_values_are_escaped() {
        assert_eq!(
            with_query("/v1/services", &[("names", "a,b c")]),
            "/v1/services?names=a,b%20c"
        );
        assert_eq!(
            with_query("/v1/changes", &[("select", "all"), ("for", "svc")]),
            "/v1/changes?select=all&for=svc"
        );
        assert_eq!(with_query("/v1/plan", &[]), "/v1/plan");
    }
}
