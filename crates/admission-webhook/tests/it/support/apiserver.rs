//! A fake Kubernetes API server over HTTPS on 127.0.0.1, enough for the webhook: discovery
//! of `kubeflow.org/v1alpha1`, PodDefault lists per namespace and cluster-wide, and watches.
//! It checks a bearer token, can answer 500 on demand, and can go down and come back on the
//! same port. Shared by the integration tests and the benchmark (through `#[path]`).

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt as _, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::{broadcast, watch};
use tokio_rustls::TlsAcceptor;

#[path = "pki.rs"]
mod pki;
pub(crate) use pki::{Ca, Leaf};

const TOKEN: &str = "test-service-account-token";

pub(crate) struct FakeApiServer {
    pub addr: SocketAddr,
    pub ca: Ca,
    state: Arc<State>,
    tls: TlsAcceptor,
    stop: Option<watch::Sender<bool>>,
}

struct State {
    /// (namespace, name) → object.
    objects: Mutex<BTreeMap<(String, String), Value>>,
    resource_version: AtomicU64,
    fail_500: AtomicBool,
    /// Every event so far with its resource version, for watches that start from one.
    history: Mutex<Vec<(u64, String)>>,
    events: broadcast::Sender<(u64, String)>,
    lists: AtomicU64,
    watches: AtomicU64,
}

impl FakeApiServer {
    pub(crate) async fn start() -> FakeApiServer {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let ca = Ca::new("fake-apiserver-ca");
        let leaf = ca.leaf();
        let certs = vec![rustls::pki_types::CertificateDer::from(leaf.der.clone())];
        let key: rustls::pki_types::PrivateKeyDer<'static> =
            rustls::pki_types::pem::PemObject::from_pem_slice(leaf.key_pem.as_bytes()).unwrap();
        let mut config = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .unwrap();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut server = FakeApiServer {
            addr,
            ca,
            state: Arc::new(State {
                objects: Mutex::default(),
                resource_version: AtomicU64::new(100),
                fail_500: AtomicBool::new(false),
                history: Mutex::default(),
                events: broadcast::channel(1024).0,
                lists: AtomicU64::new(0),
                watches: AtomicU64::new(0),
            }),
            tls: TlsAcceptor::from(Arc::new(config)),
            stop: None,
        };
        server.serve(listener);
        server
    }

    fn serve(&mut self, listener: TcpListener) {
        let (stop, stopped) = watch::channel(false);
        self.stop = Some(stop);
        let state = self.state.clone();
        let tls = self.tls.clone();
        tokio::spawn(async move {
            let mut stopped_accept = stopped.clone();
            loop {
                let tcp = tokio::select! {
                    accepted = listener.accept() => match accepted {
                        Ok((tcp, _)) => tcp,
                        Err(_) => continue,
                    },
                    _ = stopped_accept.changed() => return,
                };
                let state = state.clone();
                let tls = tls.clone();
                let mut stopped = stopped.clone();
                tokio::spawn(async move {
                    let Ok(stream) = tls.accept(tcp).await else {
                        return;
                    };
                    let service = hyper::service::service_fn(move |request| {
                        let state = state.clone();
                        async move { Ok::<_, Infallible>(handle(request, &state).await) }
                    });
                    let connection = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service);
                    tokio::select! {
                        _ = connection => {}
                        // Going down drops every connection, kept-alive ones included.
                        _ = stopped.changed() => {}
                    }
                });
            }
        });
    }

    /// Closes the listener and every connection: clients get "connection refused".
    pub(crate) async fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(true);
            stop.closed().await;
        }
    }

    /// Listens again on the same address.
    pub(crate) async fn restart(&mut self) {
        let listener = TcpListener::bind(self.addr).await.unwrap();
        self.serve(listener);
    }

    /// Every request answers 500 while on.
    pub(crate) fn fail_with_500(&self, on: bool) {
        self.state.fail_500.store(on, Ordering::SeqCst);
    }

    pub(crate) fn lists(&self) -> u64 {
        self.state.lists.load(Ordering::SeqCst)
    }

    pub(crate) fn watches(&self) -> u64 {
        self.state.watches.load(Ordering::SeqCst)
    }

    /// Creates or replaces a PodDefault (an object with metadata.name and .namespace).
    pub(crate) fn put(&self, mut object: Value) {
        // One change at a time, seen whole by lists and watches.
        let mut history = self.state.history.lock().unwrap();
        let rv = self.state.resource_version.fetch_add(1, Ordering::SeqCst) + 1;
        object["apiVersion"] = json!("kubeflow.org/v1alpha1");
        object["kind"] = json!("PodDefault");
        object["metadata"]["resourceVersion"] = json!(rv.to_string());
        let key = (
            object["metadata"]["namespace"].as_str().unwrap().to_owned(),
            object["metadata"]["name"].as_str().unwrap().to_owned(),
        );
        let kind = match self
            .state
            .objects
            .lock()
            .unwrap()
            .insert(key, object.clone())
        {
            Some(_) => "MODIFIED",
            None => "ADDED",
        };
        let event = json!({"type": kind, "object": object}).to_string();
        history.push((rv, event.clone()));
        let _ = self.state.events.send((rv, event));
    }

    /// A kubeconfig that reaches this server with its CA and token.
    pub(crate) fn write_kubeconfig(&self, path: &Path) {
        use base64::Engine as _;
        let ca = base64::engine::general_purpose::STANDARD.encode(&self.ca.pem);
        let text = format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: fake\nclusters:\n- name: fake\n  cluster:\n    server: https://127.0.0.1:{port}\n    certificate-authority-data: {ca}\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\nusers:\n- name: fake\n  user:\n    token: {TOKEN}\n",
            port = self.addr.port()
        );
        std::fs::write(path, text).unwrap();
    }

    /// A service account directory (token, ca.crt, namespace) and the environment that makes
    /// the webhook use it as in a pod.
    pub(crate) fn write_service_account(&self, dir: &Path) -> Vec<(String, String)> {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join("token"), TOKEN).unwrap();
        std::fs::write(dir.join("ca.crt"), &self.ca.pem).unwrap();
        std::fs::write(dir.join("namespace"), "kubeflow").unwrap();
        vec![
            ("KUBERNETES_SERVICE_HOST".into(), "127.0.0.1".into()),
            (
                "KUBERNETES_SERVICE_PORT".into(),
                self.addr.port().to_string(),
            ),
            (
                "ADMISSION_WEBHOOK_SERVICE_ACCOUNT_DIR".into(),
                dir.display().to_string(),
            ),
        ]
    }
}

type Body = BoxBody<Bytes, Infallible>;

fn json_response(status: StatusCode, value: Value) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(value.to_string())).boxed());
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    response
}

fn status(code: u16, reason: &str, message: &str) -> Response<Body> {
    json_response(
        StatusCode::from_u16(code).unwrap(),
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": message, "reason": reason, "code": code}),
    )
}

async fn handle(request: Request<Incoming>, state: &State) -> Response<Body> {
    let authorized = request
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .is_some_and(|v| v.as_bytes() == format!("Bearer {TOKEN}").as_bytes());
    if !authorized {
        return status(401, "Unauthorized", "Unauthorized");
    }
    if state.fail_500.load(Ordering::SeqCst) {
        return status(500, "InternalError", "etcdserver: request timed out");
    }
    let path = request.uri().path().to_owned();
    let query = request.uri().query().unwrap_or_default().to_owned();
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    match segments.as_slice() {
        ["apis", "kubeflow.org", "v1alpha1"] => json_response(
            StatusCode::OK,
            json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "kubeflow.org/v1alpha1",
                   "resources": [{"name": "poddefaults", "singularName": "poddefault", "namespaced": true,
                                  "kind": "PodDefault", "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]}]}),
        ),
        ["apis", "kubeflow.org", "v1alpha1", "poddefaults"] if query.contains("watch=true") => {
            state.watches.fetch_add(1, Ordering::SeqCst);
            watch_stream(state, &query)
        }
        ["apis", "kubeflow.org", "v1alpha1", "poddefaults"] => list(state, None),
        [
            "apis",
            "kubeflow.org",
            "v1alpha1",
            "namespaces",
            namespace,
            "poddefaults",
        ] => list(state, Some(namespace)),
        _ => status(
            404,
            "NotFound",
            "the server could not find the requested resource",
        ),
    }
}

fn list(state: &State, namespace: Option<&str>) -> Response<Body> {
    state.lists.fetch_add(1, Ordering::SeqCst);
    let _consistent = state.history.lock().unwrap();
    // BTreeMap order is (namespace, name): by name within a namespace, as the API server.
    let items: Vec<Value> = state
        .objects
        .lock()
        .unwrap()
        .iter()
        .filter(|((ns, _), _)| namespace.is_none_or(|want| want == ns))
        .map(|(_, object)| object.clone())
        .collect();
    let rv = state.resource_version.load(Ordering::SeqCst).to_string();
    json_response(
        StatusCode::OK,
        json!({"apiVersion": "kubeflow.org/v1alpha1", "kind": "PodDefaultList",
               "metadata": {"resourceVersion": rv}, "items": items}),
    )
}

/// A watch from the query's `resourceVersion`, as an API server streams one: the events after
/// it that already happened, then each new one.
fn watch_stream(state: &State, query: &str) -> Response<Body> {
    let since: u64 = query
        .split('&')
        .find_map(|kv| kv.strip_prefix("resourceVersion="))
        .and_then(|v| v.parse().ok())
        .unwrap_or(u64::MAX);
    let (past, events) = {
        let history = state.history.lock().unwrap();
        let past: Vec<String> = history
            .iter()
            .filter(|(rv, _)| *rv > since)
            .map(|(_, event)| event.clone())
            .collect();
        (past, state.events.subscribe())
    };
    let past = futures_util::stream::iter(
        past.into_iter()
            .map(|line| Ok::<_, Infallible>(Frame::data(Bytes::from(line + "\n")))),
    );
    let live = futures_util::stream::unfold(events, |mut events| async move {
        loop {
            match events.recv().await {
                Ok((_, line)) => {
                    return Some((
                        Ok::<_, Infallible>(Frame::data(Bytes::from(line + "\n"))),
                        events,
                    ));
                }
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    });
    let stream = futures_util::StreamExt::chain(past, live);
    let mut response = Response::new(StreamBody::new(stream).boxed());
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    response
}
