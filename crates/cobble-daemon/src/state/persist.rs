//! Coalesced, atomic persistence of the state file.
//!
//! The persister waits for the store's version to move, lets a short window pass so that a
//! burst of mutations (a change and its tasks, a check tick) becomes one write (or no window
//! when a request waits for durability: group commit), then writes the
//! whole state through [`crate::atomic`] with machine durability (temporary file in the same
//! directory, fsync, rename over `.pebble.state`, fsync of the directory). A crash at any
//! instant leaves either the old file or the new one. Failed writes are retried on the next
//! mutation or after a short delay.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::{StateData, StateStore};
use crate::atomic::{self, AtomicError, Durability};

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

/// Why the state could not be written.
#[derive(Debug, thiserror::Error)]
pub enum FlushError {
    #[error(transparent)]
    Write(#[from] AtomicError),
    /// The blocking write panicked or the runtime is shutting down.
    #[error("cannot run state write: {0}")]
    Join(#[from] tokio::task::JoinError),
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

/// The state file's mode, as Pebble creates it: it holds task logs, which may quote service
/// output.
const STATE_FILE_MODE: u32 = 0o600;

/// Writes `bytes` to `path` atomically and durably. What a client was told (a change ID) is
/// in this file, so it must survive a machine crash, not only the daemon's.
pub fn write_state_file(path: &Path, bytes: &[u8]) -> Result<(), AtomicError> {
    atomic::write_atomic(path, bytes, STATE_FILE_MODE, Durability::Machine)
}

/// Writes the store to disk whenever it changes: after a short window that coalesces a
/// burst, or at once when someone waits for durability ([`StateStore::durable`]), batching
/// whatever arrived meanwhile into the same write (group commit).
pub struct Persister {
    store: StateStore,
    path: PathBuf,
    /// How many times the file has been written, so that tests can count writes.
    writes: watch::Sender<u64>,
    _attached: Attached,
}

/// While it lives, waiters for durability wait for this persister's writes.
struct Attached(StateStore);

impl Drop for Attached {
    fn drop(&mut self) {
        self.0.inner.durable.send_modify(|d| d.persisted = false);
    }
}

impl Persister {
    pub fn new(store: StateStore, path: PathBuf) -> Persister {
        store.inner.durable.send_modify(|d| d.persisted = true);
        Persister {
            store: store.clone(),
            path,
            writes: watch::Sender::new(0),
            _attached: Attached(store),
        }
    }

    /// The number of completed writes, updated as each one completes.
    pub fn writes(&self) -> watch::Receiver<u64> {
        self.writes.subscribe()
    }

    /// Writes the current state now (at start-up and shutdown); returns the store version
    /// the file now holds.
    pub async fn flush(&self) -> Result<u64, FlushError> {
        let (covers, bytes) = self.store.snapshot();
        let path = self.path.clone();
        tokio::task::spawn_blocking(move || write_state_file(&path, &bytes)).await??;
        self.writes.send_modify(|n| *n += 1);
        self.store.inner.durable.send_modify(|d| {
            d.version = d.version.max(covers.version);
            d.last_change_id = d.last_change_id.max(covers.last_change_id);
            d.last_task_id = d.last_task_id.max(covers.last_task_id);
            d.last_notice_id = d.last_notice_id.max(covers.last_notice_id);
        });
        Ok(covers.version)
    }

    /// Runs until `cancel` fires, then writes one last time.
    pub async fn run(self, cancel: CancellationToken) {
        let mut version: watch::Receiver<u64> = self.store.subscribe();
        let mut written = self.store.inner.durable.borrow().version;
        loop {
            tokio::select! {
                _ = cancel.cancelled() => break,
                changed = version.changed() => if changed.is_err() { break },
            }
            // A waiting request cuts the window short; what arrives while this write runs
            // goes into the next one.
            tokio::select! {
                _ = cancel.cancelled() => break,
                _ = tokio::time::sleep(COALESCE_WINDOW) => {}
                _ = self.store.inner.urgent.notified() => {}
            }
            let current = *version.borrow_and_update();
            if current <= written {
                continue;
            }
            match self.flush().await {
                Ok(covered) => {
                    written = covered;
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
        if *version.borrow() > written
            && let Err(e) = self.flush().await
        {
            tracing::warn!("Cannot write state file {}: {e}", self.path.display());
        }
    }
}
