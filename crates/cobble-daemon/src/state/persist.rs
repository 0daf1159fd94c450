//! Coalesced, atomic persistence of the state file.
//!
//! The persister waits for the store's version to move, lets a short window pass so that a
//! burst of mutations (a change and its tasks, a check tick) becomes one write, then writes the
//! whole state to a temporary file in the same directory, fsyncs it, renames it over
//! `.pebble.state` and fsyncs the directory. A crash at any instant leaves either the old file
//! or the new one. Failed writes are retried on the next mutation or after a short delay.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::{StateData, StateStore};

/// How long mutations are gathered before one write.
pub const COALESCE_WINDOW: Duration = Duration::from_millis(100);
/// Delay before retrying a failed write.
const RETRY_DELAY: Duration = Duration::from_secs(3);

#[derive(Debug, thiserror::Error)]
pub enum PersistError {
    #[error("cannot read state file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot parse state file {path}: {source}")]
    Parse {
        path: PathBuf,
        source: serde_json::Error,
    },
}

/// Loads the state file, or empty state if there is none.
pub fn load(path: &Path) -> Result<StateData, PersistError> {
    match fs::read(path) {
        Ok(bytes) if bytes.is_empty() => Ok(StateData::default()),
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|source| PersistError::Parse {
            path: path.to_owned(),
            source,
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(StateData::default()),
        Err(source) => Err(PersistError::Read {
            path: path.to_owned(),
            source,
        }),
    }
}

/// Writes `bytes` to `path` atomically: temp file, fsync, rename, fsync of the directory.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{file_name}.{}~", std::process::id()));
    let result = (|| {
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        fs::rename(&tmp, path)?;
        fs::File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Writes the store to disk whenever it changes, coalescing bursts.
pub struct Persister {
    store: StateStore,
    path: PathBuf,
}

impl Persister {
    pub fn new(store: StateStore, path: PathBuf) -> Persister {
        Persister { store, path }
    }

    /// Writes the current state now (used at shutdown).
    pub async fn flush(&self) -> std::io::Result<()> {
        let bytes = self.store.snapshot_json();
        let path = self.path.clone();
        tokio::task::spawn_blocking(move || write_atomic(&path, &bytes))
            .await
            .map_err(std::io::Error::other)?
    }

    /// Runs until `cancel` fires, then writes one last time.
    pub async fn run(self, cancel: CancellationToken) {
        let mut version: watch::Receiver<u64> = self.store.subscribe();
        let mut written = *version.borrow_and_update();
        loop {
            tokio::select! {
                _ = cancel.cancelled() => break,
                changed = version.changed() => if changed.is_err() { break },
            }
            tokio::select! {
                _ = cancel.cancelled() => break,
                _ = tokio::time::sleep(COALESCE_WINDOW) => {}
            }
            let current = *version.borrow_and_update();
            if current == written {
                continue;
            }
            match self.flush().await {
                Ok(()) => {
                    written = current;
                    // A write follows every burst of activity; once it is done, hand the
                    // heap that burst freed back to the kernel.
                    cobble_sys::memory::trim_heap();
                }
                Err(e) => {
                    tracing::warn!("Cannot write state file {}: {e}", self.path.display());
                    tokio::time::sleep(RETRY_DELAY).await;
                    version.mark_changed();
                }
            }
        }
        if *version.borrow() != written
            && let Err(e) = self.flush().await
        {
            tracing::warn!("Cannot write state file {}: {e}", self.path.display());
        }
    }
}
