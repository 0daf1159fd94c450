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
//! - only events that can change what the files read count: not opens and reads (its own
//!   reads among them), and in an ancestor watched while the directory is missing (`/etc`
//!   for `/etc/webhook/certs`), only the directories on the way to the files, so a busy
//!   ancestor neither delays a load nor stands in for the poll;
//! - a directory created on the way (`push(make_dirs=True)` makes the whole chain, then the
//!   file) is watched before the files are read again, and watches are added until the
//!   nearest existing directory stops changing, so a directory made while a watch was being
//!   added is not missed;
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
use std::time::{Duration, Instant};

use notify::event::{AccessKind, AccessMode};
use notify::{EventKind, RecursiveMode, Watcher};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

/// How often the files are read even without an event.
pub const POLL: Duration = Duration::from_secs(1);
/// `ADMISSION_WEBHOOK_CERT_POLL_SECONDS` sets another poll interval, in whole seconds (for
/// tests that must see a load come from an event, not from the poll).
pub const POLL_ENV: &str = "ADMISSION_WEBHOOK_CERT_POLL_SECONDS";
/// How long to wait for more events after one, so a burst (a temporary file written and
/// renamed) is one reload...
const SETTLE: Duration = Duration::from_millis(20);
/// ...but never longer than this after the first event of the burst.
const SETTLE_MAX: Duration = Duration::from_millis(100);

/// The poll interval: [`POLL`], or whole seconds from [`POLL_ENV`].
pub fn poll_interval() -> Duration {
    match std::env::var(POLL_ENV) {
        Err(_) => POLL,
        Ok(value) => match value.parse::<u64>() {
            Ok(secs) if secs > 0 => Duration::from_secs(secs),
            _ => {
                tracing::warn!(
                    "ignoring {POLL_ENV}={value:?}: not a positive number of seconds; polling every {}s",
                    POLL.as_secs()
                );
                POLL
            }
        },
    }
}

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

/// Starts the watcher thread, which also reads the files every `poll`. `generation` goes up
/// by one for every pair that is loaded.
pub fn spawn_watcher(
    cert: PathBuf,
    key: PathBuf,
    poll: Duration,
    current: Arc<CurrentCert>,
    provider: Arc<CryptoProvider>,
    generation: tokio::sync::watch::Sender<u64>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("cert-watcher".into())
        .spawn(move || {
            // Watches and events speak of absolute paths; messages keep the flags' words.
            let targets =
                [&cert, &key].map(|path| std::path::absolute(path).unwrap_or(path.clone()));
            CertWatcher {
                targets,
                cert,
                key,
                poll,
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
    /// The two files as absolute paths.
    targets: [PathBuf; 2],
    poll: Duration,
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
        let mut watcher = match notify::recommended_watcher(move |event| {
            let _ = events_tx.send(event);
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
            let holding = self
                .targets
                .iter()
                .flat_map(|path| holding_dirs(path))
                .collect();
            match self.wait(&events, &holding) {
                Ok(()) => {}
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    // The watcher died: keep polling.
                    watcher = None;
                    watched.clear();
                    std::thread::sleep(self.poll);
                }
            }
            if self.generation.is_closed() {
                return;
            }
        }
    }

    /// Waits for an event that can change the files (then for the rest of its burst), or
    /// for the poll interval.
    fn wait(
        &self,
        events: &mpsc::Receiver<notify::Result<notify::Event>>,
        holding: &HashSet<PathBuf>,
    ) -> Result<(), RecvTimeoutError> {
        let poll_at = Instant::now() + self.poll;
        loop {
            let event = events.recv_timeout(poll_at.saturating_duration_since(Instant::now()))?;
            if matters(&self.targets, &event, holding) {
                break;
            }
        }
        let mut burst = Burst::began(Instant::now());
        loop {
            let now = Instant::now();
            let Some(left) = burst.left(now) else {
                return Ok(());
            };
            match events.recv_timeout(left) {
                Ok(event) => {
                    if matters(&self.targets, &event, holding) {
                        burst.extend(Instant::now());
                    }
                }
                Err(RecvTimeoutError::Timeout) => return Ok(()),
                Err(RecvTimeoutError::Disconnected) => return Ok(()),
            }
        }
    }

    /// Watches the directories that matter now, again and again until they stop changing:
    /// a directory made on the way while a watch was being added is then watched too (its
    /// own creation was not seen). The files are reread after this, so whatever was written
    /// into a directory before it was watched is read.
    fn update_watches(&self, watcher: &mut impl Watcher, watched: &mut HashSet<PathBuf>) {
        // Bounded by the depth of the paths; the bound only guards against a file system
        // that keeps changing under us.
        for _ in 0..64 {
            let wanted: HashSet<PathBuf> = self
                .targets
                .iter()
                .flat_map(|path| watch_dirs(path))
                .collect();
            if wanted == *watched {
                return;
            }
            for dir in watched.difference(&wanted) {
                let _ = watcher.unwatch(dir);
            }
            watched.retain(|dir| wanted.contains(dir));
            let mut added = false;
            for dir in wanted {
                if !watched.contains(&dir)
                    && watcher.watch(&dir, RecursiveMode::NonRecursive).is_ok()
                {
                    watched.insert(dir);
                    added = true;
                }
            }
            if !added {
                // A directory that cannot be watched is left to the poll.
                return;
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

/// A burst of events that matter: over [`SETTLE`] after the last of them, and never later
/// than [`SETTLE_MAX`] after the first. Events that do not matter (an open or a read, another
/// entry of a busy ancestor) are not fed to it: they neither extend the burst nor end it.
#[derive(Debug, Clone, Copy)]
struct Burst {
    quiet_from: Instant,
    settled_by: Instant,
}

impl Burst {
    fn began(now: Instant) -> Self {
        Self {
            quiet_from: now + SETTLE,
            settled_by: now + SETTLE_MAX,
        }
    }

    /// Another event that matters, at `now`.
    fn extend(&mut self, now: Instant) {
        self.quiet_from = now + SETTLE;
    }

    /// How long to wait for more events at `now`, or `None` once the burst is over.
    fn left(&self, now: Instant) -> Option<Duration> {
        let until = self.quiet_from.min(self.settled_by);
        (now < until).then(|| until - now)
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

/// Whether an event can change what the files read, or which directories to watch.
fn matters(
    targets: &[PathBuf; 2],
    event: &notify::Result<notify::Event>,
    holding: &HashSet<PathBuf>,
) -> bool {
    let event = match event {
        Ok(event) => event,
        // An overflowed queue and the like: something may have been missed.
        Err(_) => return true,
    };
    match event.kind {
        // The end of a write counts; opens and reads (the watcher's own among them) do not.
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => {}
        EventKind::Access(_) => return false,
        _ => {}
    }
    if event.paths.is_empty() || event.need_rescan() {
        return true;
    }
    event.paths.iter().any(|path| {
        // A file itself, or a directory on the way to one (made, moved or removed)...
        targets.iter().any(|file| file.starts_with(path))
            // ...or anything in a directory that holds a file or what it resolves to (a
            // temporary file renamed over it, the kubelet's `..data` swap). Other entries
            // of an ancestor watched while the directories below it are missing do not.
            || path.parent().is_some_and(|dir| holding.contains(dir))
    })
}

/// The directories whose entries can change what `path` reads: its parent, and the parent of
/// what it resolves to through symlinks.
fn holding_dirs(path: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = path.parent().map(Path::to_path_buf).into_iter().collect();
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
    fn only_events_that_can_change_the_files_matter() {
        use notify::event::{CreateKind, ModifyKind, RemoveKind, RenameMode};
        let targets = [
            PathBuf::from("/etc/webhook/certs/cert.pem"),
            PathBuf::from("/etc/webhook/certs/key.pem"),
        ];
        let holding: HashSet<PathBuf> = [PathBuf::from("/etc/webhook/certs")].into();
        let event = |kind, path: &str| Ok(notify::Event::new(kind).add_path(path.into()));
        let open = EventKind::Access(AccessKind::Open(AccessMode::Any));
        let written = EventKind::Access(AccessKind::Close(AccessMode::Write));
        let created = EventKind::Create(CreateKind::Any);
        let renamed = EventKind::Modify(ModifyKind::Name(RenameMode::To));
        for (kind, path, want) in [
            // The busy ancestor watched while /etc/webhook is missing.
            (open, "/etc/ld.so.cache", false),
            (created, "/etc/mtab.tmp", false),
            (EventKind::Remove(RemoveKind::Any), "/etc/mtab.tmp", false),
            // The directories of the push, on the way to the files.
            (created, "/etc/webhook", true),
            (created, "/etc/webhook/certs", true),
            // The push itself, and the watcher's own reads.
            (created, "/etc/webhook/certs/.cert.pem~push", true),
            (written, "/etc/webhook/certs/.cert.pem~push", true),
            (renamed, "/etc/webhook/certs/cert.pem", true),
            (open, "/etc/webhook/certs/cert.pem", false),
            // The kubelet's swap in the directory itself.
            (renamed, "/etc/webhook/certs/..data", true),
        ] {
            assert_eq!(
                matters(&targets, &event(kind, path), &holding),
                want,
                "{kind:?} {path}"
            );
        }
        assert!(matters(
            &targets,
            &Err(notify::Error::generic("queue overflow")),
            &holding
        ));
    }

    #[test]
    fn a_burst_ends_20ms_after_its_last_event_that_matters_and_100ms_after_its_first() {
        let start = Instant::now();
        let at = |ms| start + Duration::from_millis(ms);
        let burst = Burst::began(start);
        // One event alone: over 20 ms later (what arrives meanwhile and does not matter is
        // not fed to it, so it cannot keep the burst going).
        assert_eq!(burst.left(at(0)), Some(SETTLE));
        assert_eq!(burst.left(at(15)), Some(Duration::from_millis(5)));
        assert_eq!(burst.left(at(20)), None);
        // Events that matter extend it, 20 ms at a time...
        let mut burst = Burst::began(start);
        for ms in [10, 25, 40, 55, 70] {
            burst.extend(at(ms));
        }
        assert_eq!(burst.left(at(85)), Some(Duration::from_millis(5)));
        // ...but never past 100 ms after the first.
        burst.extend(at(90));
        assert_eq!(burst.left(at(95)), Some(Duration::from_millis(5)));
        assert_eq!(burst.left(at(100)), None);
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
