//! The serving certificate: loaded when it appears, reloaded when it changes, kept when a
//! change is broken.
//!
//! The Go webhook reads its pair once at start and exits with code 255 when a file is
//! missing, so a certificate pushed a moment later is never seen. Here a watcher thread
//! owns the files instead:
//! - a missing or invalid pair is logged once and waited for, never fatal;
//! - the directories that hold the files (or, while they do not exist yet, their nearest
//!   existing ancestors) are watched with inotify, so an atomic rename, an in-place write
//!   or the kubelet's `..data` symlink swap is seen at once; a 1 s poll backs the events up
//!   (a missed event, a file system without inotify);
//! - a new pair is used only if both files parse and the key matches the certificate; until
//!   then the previous pair keeps serving (a cert written before its key is such a moment);
//! - each pair that loads bumps a generation on a `watch` channel: the server opens its
//!   listener on the first, so a TCP connect succeeding means TLS works.
//!
//! Reads are blocking, which is why this is a thread and not a task.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use notify::{RecursiveMode, Watcher};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

/// How often the files are read even without an event.
const POLL: Duration = Duration::from_secs(1);
/// How long to wait for more events after one, so a burst is one reload.
const SETTLE: Duration = Duration::from_millis(50);

/// The pair in use, shared with every TLS handshake.
#[derive(Debug, Default)]
pub struct CurrentCert {
    pair: RwLock<Option<Arc<CertifiedKey>>>,
}

impl CurrentCert {
    pub fn get(&self) -> Option<Arc<CertifiedKey>> {
        self.pair.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn set(&self, pair: Arc<CertifiedKey>) {
        *self.pair.write().unwrap_or_else(|e| e.into_inner()) = Some(pair);
    }
}

impl ResolvesServerCert for CurrentCert {
    /// The same pair for every server name, as the Go webhook.
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.get()
    }
}

/// Reads and checks one pair: a PEM chain (leaf first) and a PKCS#1, PKCS#8 or SEC1 key
/// that belongs to the leaf.
pub fn load_pair(
    cert: &[u8],
    key: &[u8],
    provider: &CryptoProvider,
) -> Result<CertifiedKey, String> {
    let chain = CertificateDer::pem_slice_iter(cert)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("cannot parse the certificate: {e}"))?;
    if chain.is_empty() {
        return Err("cannot parse the certificate: no certificate found".into());
    }
    let key = PrivateKeyDer::from_pem_slice(key)
        .map_err(|e| format!("cannot parse the private key: {e}"))?;
    CertifiedKey::from_der(chain, key, provider)
        .map_err(|e| format!("cannot use the certificate and key: {e}"))
}

/// Starts the watcher thread. `generation` goes up by one for every pair that is loaded.
pub fn spawn_watcher(
    cert: PathBuf,
    key: PathBuf,
    current: Arc<CurrentCert>,
    provider: Arc<CryptoProvider>,
    generation: tokio::sync::watch::Sender<u64>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("cert-watcher".into())
        .spawn(move || {
            CertWatcher {
                cert,
                key,
                current,
                provider,
                generation,
                loaded: None,
                last_problem: None,
            }
            .run()
        })
}

struct CertWatcher {
    cert: PathBuf,
    key: PathBuf,
    current: Arc<CurrentCert>,
    provider: Arc<CryptoProvider>,
    generation: tokio::sync::watch::Sender<u64>,
    /// The bytes of the pair in use, to skip reloads that change nothing.
    loaded: Option<(Vec<u8>, Vec<u8>)>,
    /// The last problem logged, so a lasting one is logged once.
    last_problem: Option<String>,
}

impl CertWatcher {
    fn run(mut self) {
        let (events_tx, events) = mpsc::channel();
        let mut watcher = match notify::recommended_watcher(move |_event| {
            let _ = events_tx.send(());
        }) {
            Ok(watcher) => Some(watcher),
            Err(err) => {
                tracing::warn!("cannot watch the certificate files, polling them: {err}");
                None
            }
        };
        let mut watched = HashSet::new();
        loop {
            if let Some(watcher) = watcher.as_mut() {
                self.update_watches(watcher, &mut watched);
            }
            self.reload();
            match events.recv_timeout(POLL) {
                Ok(()) => while events.recv_timeout(SETTLE).is_ok() {},
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    // The watcher died: keep polling.
                    watcher = None;
                    std::thread::sleep(POLL);
                }
            }
            if self.generation.is_closed() {
                return;
            }
        }
    }

    /// Watches the directories that matter now; directories that appear later are added on
    /// the next round, which always rereads the files after adding watches.
    fn update_watches(&self, watcher: &mut impl Watcher, watched: &mut HashSet<PathBuf>) {
        let wanted: HashSet<PathBuf> = [&self.cert, &self.key]
            .into_iter()
            .flat_map(|path| watch_dirs(path))
            .collect();
        for dir in watched.difference(&wanted) {
            let _ = watcher.unwatch(dir);
        }
        watched.retain(|dir| wanted.contains(dir));
        for dir in wanted {
            if !watched.contains(&dir) && watcher.watch(&dir, RecursiveMode::NonRecursive).is_ok() {
                watched.insert(dir);
            }
        }
    }

    fn reload(&mut self) {
        let read = |path: &Path| {
            std::fs::read(path).map_err(|e| format!("open {}: {}", path.display(), io_text(&e)))
        };
        let pair = read(&self.cert).and_then(|cert| Ok((cert, read(&self.key)?)));
        let (cert, key) = match pair {
            Ok(pair) => pair,
            Err(problem) => return self.problem(problem),
        };
        if self.loaded.as_ref() == Some(&(cert.clone(), key.clone())) {
            self.last_problem = None;
            return;
        }
        match load_pair(&cert, &key, &self.provider) {
            Ok(pair) => {
                self.current.set(Arc::new(pair));
                let first = self.loaded.is_none();
                self.loaded = Some((cert, key));
                self.last_problem = None;
                tracing::info!(
                    "{} certificate {} and key {}",
                    if first { "loaded" } else { "reloaded" },
                    self.cert.display(),
                    self.key.display()
                );
                self.generation.send_modify(|g| *g += 1);
            }
            Err(problem) => self.problem(problem),
        }
    }

    fn problem(&mut self, problem: String) {
        if self.last_problem.as_ref() == Some(&problem) {
            return;
        }
        if self.loaded.is_some() {
            tracing::warn!(
                "{problem}; keeping the previous certificate and watching for a new one"
            );
        } else {
            tracing::warn!("{problem}; waiting for a valid certificate and key");
        }
        self.last_problem = Some(problem);
    }
}

/// The directories whose changes can change what `path` reads: its parent (or, while that
/// does not exist, the nearest ancestor that does), and the parent of what it resolves to
/// through symlinks.
fn watch_dirs(path: &Path) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    let mut dir = path.parent();
    while let Some(d) = dir {
        let d = if d.as_os_str().is_empty() {
            Path::new(".")
        } else {
            d
        };
        if d.is_dir() {
            dirs.push(d.to_path_buf());
            break;
        }
        dir = d.parent();
    }
    if let Some(parent) = std::fs::canonicalize(path)
        .ok()
        .as_deref()
        .and_then(Path::parent)
    {
        dirs.push(parent.to_path_buf());
    }
    dirs
}

/// An IO error in the words Go uses, which is what people search for
/// ("no such file or directory", not "No such file or directory (os error 2)").
fn io_text(err: &std::io::Error) -> String {
    let text = err.to_string();
    let text = text.split(" (os error").next().unwrap_or(&text);
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_errors_read_like_go() {
        let err = std::fs::read("/nonexistent/x").unwrap_err();
        assert_eq!(io_text(&err), "no such file or directory");
    }

    #[test]
    fn watches_the_nearest_existing_directory() {
        let dir = tempfile::tempdir().unwrap();
        let cert = dir.path().join("a/b/cert.pem");
        assert_eq!(watch_dirs(&cert), vec![dir.path().to_path_buf()]);
        std::fs::create_dir_all(dir.path().join("a/b")).unwrap();
        assert_eq!(watch_dirs(&cert), vec![dir.path().join("a/b")]);
    }
}
