//! Talking to the API server: finding a configuration, listing PodDefaults per admission
//! (the default, as strongly consistent as the Go webhook), or answering from a watch-fed
//! cache (`-cache`).
//!
//! The configuration is found as controller-runtime finds it: the `-kubeconfig` flag; else,
//! when `KUBECONFIG` is unset, the pod's service account (in-cluster); else `KUBECONFIG` or
//! `~/.kube/config`. The Go webhook loads it and builds a new client for every admission and
//! exits when that fails. Here the client is built on first use and kept (with its
//! connection pool); a failure denies that one admission and the next one tries again. The
//! service account token is reread as it rotates.
//!
//! `ADMISSION_WEBHOOK_SERVICE_ACCOUNT_DIR` moves the service account directory away from
//! `/var/run/secrets/kubernetes.io/serviceaccount`, for tests and unusual layouts.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures_util::{FutureExt as _, StreamExt as _};
use kube::api::ListParams;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Api, Client, Config};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

use crate::poddefault::PodDefault;
use crate::review::PodDefaults;

const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
const SERVICE_ACCOUNT_DIR_ENV: &str = "ADMISSION_WEBHOOK_SERVICE_ACCOUNT_DIR";
/// The API server gives a webhook 10 s by default; answer before that.
const LIST_TIMEOUT: Duration = Duration::from_secs(9);
/// How long an admission waits for the cache's first full list.
const CACHE_SYNC_WAIT: Duration = Duration::from_secs(5);

/// Finds a configuration (see the module docs). File reads happen on a blocking thread.
pub async fn load_config(kubeconfig_flag: PathBuf) -> Result<Config, String> {
    let handle = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || handle.block_on(load_config_blocking(&kubeconfig_flag)))
        .await
        .map_err(|e| format!("cannot load the Kubernetes configuration: {e}"))?
}

async fn load_config_blocking(kubeconfig_flag: &Path) -> Result<Config, String> {
    if !kubeconfig_flag.as_os_str().is_empty() {
        let kubeconfig = Kubeconfig::read_from(kubeconfig_flag).map_err(|e| {
            format!(
                "cannot read kubeconfig {}: {}",
                kubeconfig_flag.display(),
                chain(&e)
            )
        })?;
        return Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .map_err(|e| {
                format!(
                    "cannot use kubeconfig {}: {}",
                    kubeconfig_flag.display(),
                    chain(&e)
                )
            });
    }
    let in_cluster_problem = if std::env::var_os("KUBECONFIG").is_none_or(|v| v.is_empty()) {
        match in_cluster() {
            Ok(config) => return Ok(config),
            Err(problem) => Some(problem),
        }
    } else {
        None
    };
    Config::from_kubeconfig(&KubeConfigOptions::default())
        .await
        .map_err(|e| match in_cluster_problem {
            Some(in_cluster) => format!(
                "cannot find a Kubernetes configuration: {in_cluster}; and no kubeconfig: {}",
                chain(&e)
            ),
            None => format!("cannot load the kubeconfig: {}", chain(&e)),
        })
}

/// The pod's service account, as client-go's `rest.InClusterConfig`.
fn in_cluster() -> Result<Config, String> {
    let host = std::env::var("KUBERNETES_SERVICE_HOST").unwrap_or_default();
    let port = std::env::var("KUBERNETES_SERVICE_PORT").unwrap_or_default();
    if host.is_empty() || port.is_empty() {
        return Err("not running in a cluster (KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set)".into());
    }
    let dir = std::env::var_os(SERVICE_ACCOUNT_DIR_ENV)
        .map(PathBuf::from)
        .unwrap_or_else(|| SERVICE_ACCOUNT_DIR.into());
    let token = dir.join("token");
    std::fs::metadata(&token).map_err(|e| format!("cannot read {}: {e}", token.display()))?;
    let host = if host.contains(':') {
        format!("[{host}]")
    } else {
        host
    };
    let url = format!("https://{host}:{port}")
        .parse()
        .map_err(|e| format!("invalid API server address {host}:{port}: {e}"))?;
    let mut config = Config::new(url);
    let ca = dir.join("ca.crt");
    match std::fs::read(&ca) {
        Ok(pem) => {
            let certs = CertificateDer::pem_slice_iter(&pem)
                .map(|c| c.map(|c| c.to_vec()))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("cannot parse {}: {e}", ca.display()))?;
            config.root_cert = Some(certs);
            config.root_cert_file = Some(ca);
        }
        // client-go goes on with the system's roots.
        Err(e) => tracing::warn!("cannot read {}: {e}", ca.display()),
    }
    if let Ok(namespace) = std::fs::read_to_string(dir.join("namespace")) {
        config.default_namespace = namespace.trim().to_owned();
    }
    config.auth_info.token_file = Some(token.to_string_lossy().into_owned());
    Ok(config)
}

/// A lazily built client, rebuilt only while building fails.
pub struct LazyClient {
    kubeconfig: PathBuf,
    client: tokio::sync::Mutex<Option<Client>>,
}

impl LazyClient {
    pub fn new(kubeconfig: PathBuf) -> Self {
        LazyClient {
            kubeconfig,
            client: tokio::sync::Mutex::new(None),
        }
    }

    pub async fn get(&self) -> Result<Client, String> {
        let mut client = self.client.lock().await;
        if let Some(client) = client.as_ref() {
            return Ok(client.clone());
        }
        let config = load_config(self.kubeconfig.clone()).await?;
        let built = Client::try_from(config)
            .map_err(|e| format!("cannot build a Kubernetes client: {}", chain(&e)))?;
        *client = Some(built.clone());
        Ok(built)
    }
}

/// One LIST per admission.
pub struct ListPerRequest {
    client: LazyClient,
}

impl ListPerRequest {
    pub fn new(kubeconfig: PathBuf) -> Self {
        ListPerRequest {
            client: LazyClient::new(kubeconfig),
        }
    }
}

impl PodDefaults for ListPerRequest {
    fn list<'a>(
        &'a self,
        namespace: &'a str,
    ) -> Pin<Box<dyn Future<Output = Result<Vec<PodDefault>, String>> + Send + 'a>> {
        Box::pin(async move {
            let client = self.client.get().await?;
            let api: Api<PodDefault> = Api::namespaced(client, namespace);
            match tokio::time::timeout(LIST_TIMEOUT, api.list(&ListParams::default())).await {
                Ok(Ok(list)) => Ok(list.items),
                Ok(Err(err)) => Err(list_error(err)),
                Err(_) => Err(format!(
                    "timed out after {}s listing poddefaults in namespace {namespace:?}",
                    LIST_TIMEOUT.as_secs()
                )),
            }
        })
    }
}

/// The Go webhook's deny texts: the API server's message for an API error, and the REST
/// mapper's "no matches" when the PodDefault resource does not exist.
fn list_error(err: kube::Error) -> String {
    match err {
        kube::Error::Api(status) if status.code == 404 => {
            let message = "no matches for kind \"PodDefault\" in version \"kubeflow.org/v1alpha1\""
                .to_owned();
            tracing::error!("{message} (has the CRD been loaded?)");
            message
        }
        kube::Error::Api(status) if !status.message.is_empty() => status.message,
        err => chain(&err),
    }
}

/// An error and its causes, "a: b: c", without repeats.
pub fn chain(err: &dyn std::error::Error) -> String {
    let mut parts: Vec<String> = vec![err.to_string()];
    let mut source = err.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        source = cause.source();
    }
    parts.join(": ")
}

/// PodDefaults from a reflector fed by a cluster-wide watch. Faster, but weaker than a
/// LIST: a PodDefault created a moment before a pod can be missed.
pub struct Cache {
    store: Store<PodDefault>,
}

impl Cache {
    /// Starts the watch in the background. It retries with backoff for ever, building the
    /// client first if need be.
    pub fn start(kubeconfig: PathBuf) -> Cache {
        let (store, writer) = reflector::store();
        tokio::spawn(async move {
            let client = LazyClient::new(kubeconfig);
            let mut delay = Duration::from_millis(250);
            let client = loop {
                match client.get().await {
                    Ok(client) => break client,
                    Err(err) => {
                        tracing::error!("cannot start the PodDefault cache: {err}");
                        tokio::time::sleep(delay).await;
                        delay = (delay * 2).min(Duration::from_secs(30));
                    }
                }
            };
            let api: Api<PodDefault> = Api::all(client);
            reflector::reflector(writer, watcher(api, watcher::Config::default()))
                .default_backoff()
                .for_each(|event| async move {
                    if let Err(err) = event {
                        tracing::warn!("PodDefault watch: {}", chain(&err));
                    }
                })
                .await;
        });
        Cache { store }
    }

    /// Whether the first full list has arrived.
    pub fn is_synced(&self) -> bool {
        self.store
            .wait_until_ready()
            .now_or_never()
            .is_some_and(|r| r.is_ok())
    }
}

impl PodDefaults for Cache {
    fn list<'a>(
        &'a self,
        namespace: &'a str,
    ) -> Pin<Box<dyn Future<Output = Result<Vec<PodDefault>, String>> + Send + 'a>> {
        Box::pin(async move {
            match tokio::time::timeout(CACHE_SYNC_WAIT, self.store.wait_until_ready()).await {
                Ok(Ok(())) => {}
                _ => {
                    return Err(
                        "the PodDefault cache has not synced with the API server yet".into(),
                    );
                }
            }
            let mut list: Vec<PodDefault> = self
                .store
                .state()
                .iter()
                .filter(|pd| pd.ns() == namespace)
                .map(|pd| PodDefault::clone(pd))
                .collect();
            // The API server lists by name; the merge order depends on it.
            list.sort_by(|a, b| a.name().cmp(b.name()));
            Ok(list)
        })
    }
}

/// Lets the server ask a source whether it is ready to answer (`/readyz`).
pub trait Readiness {
    fn is_ready(&self) -> bool;
}

impl Readiness for ListPerRequest {
    fn is_ready(&self) -> bool {
        true
    }
}

impl Readiness for Cache {
    fn is_ready(&self) -> bool {
        self.is_synced()
    }
}

/// A source that the server can both list from and ask for readiness.
pub trait Source: PodDefaults + Readiness {}
impl<T: PodDefaults + Readiness> Source for T {}

/// Picks the source the flags ask for; with a LIST per admission, starts building its
/// client at once.
pub fn source(kubeconfig: PathBuf, cache: bool) -> Arc<dyn Source> {
    if cache {
        Arc::new(Cache::start(kubeconfig))
    } else {
        let source = Arc::new(ListPerRequest::new(kubeconfig));
        // Build the client now, while the webhook waits for its certificates, rather than
        // in the first admission; a failure is left for that admission to report and retry.
        let early = source.clone();
        tokio::spawn(async move {
            if let Err(err) = early.client.get().await {
                tracing::debug!("not ready to talk to the API server yet: {err}");
            }
        });
        source
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_error(code: u16, message: &str) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure(message, "Reason")
                .with_code(code)
                .boxed(),
        )
    }

    #[test]
    fn list_errors_read_as_the_go_webhooks() {
        assert_eq!(
            list_error(api_error(
                404,
                "the server could not find the requested resource"
            )),
            "no matches for kind \"PodDefault\" in version \"kubeflow.org/v1alpha1\""
        );
        assert_eq!(
            list_error(api_error(403, "poddefaults.kubeflow.org is forbidden")),
            "poddefaults.kubeflow.org is forbidden"
        );
    }
}
