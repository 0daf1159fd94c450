//! Coalesced, durable persistence of the state file.
//!
//! The persister waits for the store's version to move, lets a short window pass so that a
//! burst of mutations (a change and its tasks, a check tick) becomes one write (or no window
//! when a request waits for durability: group commit), then appends a record of what the
//! burst touched to the journal and flushes it (`fdatasync`; see [`super::journal`]). Once
//! the journal has grown past a few times the state's size, the write is a checkpoint
//! instead: the whole state through [`crate::atomic`] with machine durability (temporary
//! file in the same directory, fsync, rename over `.pebble.state`, fsync of the directory),
//! then a fresh journal. A crash at any instant leaves the old file or the new one, and a
//! journal that continues it or is ignored. A failed write fails the requests waiting on it
//! at once (see [`Persister::run`]); it is retried after a short delay, or at once when a
//! request waits, and the write after a failure is a checkpoint.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::{StateData, StateStore, journal};
use crate::atomic::{self, AtomicError, Durability};

/// How long mutations are gathered before one write.
pub(super) const COALESCE_WINDOW: Duration = Duration::from_millis(100);
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
        source: super::format::DecodeError,
    },
    /// Something acknowledged is gone or cannot be read; the message says what, and how to
    /// start anyway.
    #[error("{message}")]
    Damaged { message: String },
}

/// Why the state could not be written.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FlushError {
    #[error(transparent)]
    Write(#[from] AtomicError),
    /// The blocking write panicked or the runtime is shutting down.
    #[error("cannot run state write: {0}")]
    Join(#[from] tokio::task::JoinError),
}

/// The journal is folded into a checkpoint once it is larger than this many times the state
/// file (and than [`CHECKPOINT_MIN`]): replaying it at start-up stays cheap, and the
/// checkpoints' cost is spread over many records.
const CHECKPOINT_RATIO: u64 = 4;
/// Journals smaller than this are never folded while the daemon runs.
const CHECKPOINT_MIN: u64 = 1024 * 1024;

/// Loads the state file and replays its journal over it, or empty state if there is none.
///
/// What is intact is used; what is not is detected, and never passed over in silence:
///
/// - A state file that is empty or cannot be read as one stops the daemon
///   ([`PersistError::Damaged`]), with what its journal says it held and how to start anyway:
///   move the file aside. A missing state file with a journal (the file moved aside, or lost)
///   starts from what the journal holds, with the IDs it knew of, and the log says what the
///   state file held that is gone.
/// - A journal line that is complete but damaged stops the daemon, naming the record and how
///   to start with what comes before it (cut the journal there) or without the journal
///   (move it aside). A last line cut short by a crash was never acknowledged: it is left
///   out, and the log says so.
/// - A journal the state file has outgrown (another program rewrote the file since) is not
///   used, and the log says how much it held.
pub fn load(path: &Path) -> Result<StateData, PersistError> {
    let journal_path = journal::path_for(path);
    let state = read_optional(path)?;
    let journal = read_optional(&journal_path)?;
    let opening = journal.as_deref().map(journal::open);
    let header = match &opening {
        Some(journal::Opening::Header(h)) => Some(h),
        _ => None,
    };
    let held = |h: Option<&journal::Header>| match h {
        Some(h) => format!(
            "; its journal {} continues a state file of {} bytes that held {}",
            journal_path.display(),
            h.base.len,
            h.base.describe()
        ),
        None => String::new(),
    };
    let damaged = |problem: String| PersistError::Damaged {
        message: format!(
            "cannot load state file {}: {problem}{}. To start anyway, move it aside (mv {0} \
             {0}.damaged): the daemon then starts with what the journal holds, if anything",
            path.display(),
            held(header),
        ),
    };
    let mut data = match state {
        None => {
            let Some(h) = header else {
                if let Some(
                    journal::Opening::Empty | journal::Opening::Torn | journal::Opening::Damaged,
                ) = opening
                {
                    return Err(PersistError::Damaged {
                        message: format!(
                            "cannot load state: state file {} is missing and its journal {} \
                             is damaged. To start afresh, move the journal aside (mv {1} \
                             {1}.damaged)",
                            path.display(),
                            journal_path.display()
                        ),
                    });
                }
                if let Some(journal::Opening::Old(_)) = opening {
                    tracing::warn!(
                        "State file {} is missing; its journal {} is not used",
                        path.display(),
                        journal_path.display()
                    );
                }
                return Ok(StateData::default());
            };
            if h.base.holds_something() {
                tracing::warn!(
                    "State file {} is missing: lost what it held ({}); starting with what \
                     its journal {} holds",
                    path.display(),
                    h.base.describe(),
                    journal_path.display()
                );
            }
            // No ID it gave out is given again.
            StateData {
                generation: h.generation,
                last_change_id: h.base.last_change_id,
                last_task_id: h.base.last_task_id,
                last_notice_id: h.base.last_notice_id,
                ..StateData::default()
            }
        }
        Some(bytes) if bytes.is_empty() => return Err(damaged("it is empty".into())),
        Some(bytes) => {
            let data = super::format::decode(&bytes).map_err(|source| match source {
                super::format::DecodeError::Future(_) => PersistError::Parse {
                    path: path.to_owned(),
                    source,
                },
                source => damaged(format!("it cannot be parsed ({source})")),
            })?;
            if let Some(h) = header
                && h.generation == data.generation
                && (h.base.len != bytes.len() as u64 || h.base.crc != journal::crc32(&bytes))
            {
                // Rewritten since cobble's checkpoint: by Pebble after a rollback, most
                // likely. The file is the newer state.
                tracing::warn!(
                    "State file {} was rewritten by another program after cobble last wrote \
                     it; what its journal {} recorded after that ({} bytes) is not used",
                    path.display(),
                    journal_path.display(),
                    journal.as_ref().map_or(0, Vec::len)
                );
                return Ok(data);
            }
            data
        }
    };
    let Some(bytes) = journal else {
        return Ok(data);
    };
    let continues = match opening.expect("read with the journal") {
        // A journal is created whole (see `append`): one that is empty or whose first line
        // is cut was damaged afterwards.
        journal::Opening::Empty | journal::Opening::Torn | journal::Opening::Damaged => {
            return Err(PersistError::Damaged {
                message: format!(
                    "cannot load state journal {}: it is empty or its first line is damaged, \
                     so what it recorded since the state file was written is unknown. To \
                     start from the state file alone, move the journal aside (mv {0} \
                     {0}.damaged)",
                    journal_path.display()
                ),
            });
        }
        journal::Opening::Old(generation) => generation == data.generation,
        journal::Opening::Header(h) if h.generation > data.generation => {
            return Err(PersistError::Damaged {
                message: format!(
                    "cannot load state file {}: it is older than the state its journal {} \
                     continues (generation {} of {}, which held {}); was it restored from \
                     an older copy? To start from this state file, move the journal aside \
                     (mv {1} {1}.damaged)",
                    path.display(),
                    journal_path.display(),
                    data.generation,
                    h.generation,
                    h.base.describe()
                ),
            });
        }
        journal::Opening::Header(h) => h.generation == data.generation,
    };
    if !continues {
        return Ok(data);
    }
    match journal::replay(&mut data, &bytes) {
        Ok(replayed) => {
            if let Some((offset, len)) = replayed.torn {
                tracing::warn!(
                    "State journal {} ends in a record cut short at byte {offset} ({len} \
                     bytes): a write a crash interrupted before it was acknowledged; left out",
                    journal_path.display()
                );
            }
            Ok(data)
        }
        Err(damage) => Err(PersistError::Damaged {
            message: format!(
                "cannot load state journal {}: record {} (at byte {}) is damaged, and the {} \
                 bytes from there on cannot be used. To start with the state file and the \
                 records before it, cut the journal there (truncate -s {2} {0}); to start \
                 from the state file alone, move the journal aside (mv {0} {0}.damaged)",
                journal_path.display(),
                damage.record,
                damage.offset,
                damage.rest
            ),
        }),
    }
}

/// A file's content, or None when it does not exist.
fn read_optional(path: &Path) -> Result<Option<Vec<u8>>, PersistError> {
    match fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
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
pub(super) fn write_state_file(path: &Path, bytes: &[u8]) -> Result<(), AtomicError> {
    atomic::write_atomic(path, bytes, STATE_FILE_MODE, Durability::Machine)
}

/// Writes the store to disk whenever it changes: after a short window that coalesces a
/// burst, or at once when someone waits for durability ([`StateStore::durable`]), batching
/// whatever arrived meanwhile into the same write (group commit).
pub(crate) struct Persister {
    store: StateStore,
    path: PathBuf,
    /// The journal, open for appending, while the last write left it usable; without one the
    /// next write is a checkpoint.
    journal: Option<Journal>,
    /// How many times the file has been written, so that tests can count writes.
    writes: watch::Sender<u64>,
    _attached: Attached,
}

/// The open journal of the current generation.
struct Journal {
    /// Open for appending once the first record is written; until then the journal on disk
    /// (if any) is an older generation's, which a load ignores.
    file: Option<File>,
    path: PathBuf,
    /// The header naming the generation, written with the first record.
    header: Vec<u8>,
    /// Its length.
    len: u64,
    /// The length of the header alone: more than that means records since the checkpoint.
    header_len: u64,
    /// The length of the state file it continues.
    state_len: u64,
    /// The sequence number of the next record.
    seq: u64,
}

impl Journal {
    fn wants_checkpoint(&self) -> bool {
        self.len > CHECKPOINT_MIN.max(CHECKPOINT_RATIO * self.state_len)
    }
}

/// While it lives, waiters for durability wait for this persister's writes.
struct Attached(StateStore);

impl Drop for Attached {
    fn drop(&mut self) {
        self.0.inner.durable.send_modify(|d| d.persisted = false);
    }
}

impl Persister {
    pub(crate) fn new(store: StateStore, path: PathBuf) -> Persister {
        store.inner.durable.send_modify(|d| d.persisted = true);
        Persister {
            store: store.clone(),
            path,
            journal: None,
            writes: watch::Sender::new(0),
            _attached: Attached(store),
        }
    }

    /// The number of completed writes, updated as each one completes.
    #[cfg(test)]
    pub(crate) fn writes(&self) -> watch::Receiver<u64> {
        self.writes.subscribe()
    }

    /// Writes the whole state now and starts a fresh journal (at start-up and shutdown);
    /// returns the store version the file now holds.
    pub(crate) async fn flush(&mut self) -> Result<u64, FlushError> {
        self.journal = None;
        let (covers, generation, base, bytes) = self.store.checkpoint();
        let path = self.path.clone();
        let journal =
            tokio::task::spawn_blocking(move || write_checkpoint(&path, generation, base, &bytes))
                .await??;
        self.journal = Some(journal);
        Ok(self.written(covers))
    }

    /// [`flush`](Self::flush) on the calling thread, which it blocks: the daemon's first
    /// write, made on a blocking-pool thread of its own while the rest of start-up goes on.
    pub(crate) fn flush_blocking(&mut self) -> Result<u64, FlushError> {
        self.journal = None;
        let (covers, generation, base, bytes) = self.store.checkpoint();
        self.journal = Some(write_checkpoint(&self.path, generation, base, &bytes)?);
        Ok(self.written(covers))
    }

    /// Makes every mutation so far durable: a journal record, or a checkpoint when the
    /// journal is due for one (or unusable).
    async fn commit(&mut self) -> Result<u64, FlushError> {
        let Some(journal) = self.journal.take().filter(|j| !j.wants_checkpoint()) else {
            return self.flush().await;
        };
        let (covers, record) = self.store.journal_record(journal.seq);
        let Some(record) = record else {
            // Mutations that touched no change (of a task since removed, say): nothing to
            // write, and nothing left that is not durable.
            self.journal = Some(journal);
            return Ok(self.covered(covers));
        };
        let journal = tokio::task::spawn_blocking(move || append(journal, &record)).await??;
        self.journal = Some(journal);
        Ok(self.written(covers))
    }

    /// Counts a completed write and releases who waited for what it covers.
    fn written(&self, covers: super::Durable) -> u64 {
        self.writes.send_modify(|n| *n += 1);
        self.covered(covers)
    }

    /// Releases who waited for what `covers` says is durable, and wakes the notice waiters
    /// up to the notices it holds.
    fn covered(&self, covers: super::Durable) -> u64 {
        self.store.inner.durable.send_modify(|d| {
            d.version = d.version.max(covers.version);
            d.last_change_id = d.last_change_id.max(covers.last_change_id);
            d.last_task_id = d.last_task_id.max(covers.last_task_id);
            d.last_notice_id = d.last_notice_id.max(covers.last_notice_id);
            d.notice_wakes = d.notice_wakes.max(covers.notice_wakes);
            d.failure = None;
        });
        self.store.inner.notice_wakes.send_if_modified(|w| {
            let newer = covers.notice_wakes > *w;
            *w = (*w).max(covers.notice_wakes);
            newer
        });
        covers.version
    }

    /// Tells who waits for what a failed write would have covered that it is not on disk.
    fn failed(&self, through: u64, cause: &str) {
        self.store.inner.durable.send_modify(|d| {
            d.failure = Some(super::Failure {
                through,
                cause: cause.into(),
            });
        });
    }

    /// Runs until `cancel` fires, then writes one last time.
    ///
    /// A write that fails (a full or read-only disk) fails every request waiting on it at
    /// once; nothing waits for the disk. The next write is tried after [`RETRY_DELAY`], or
    /// at once when a request waits for one, so that the first request after the disk
    /// heals succeeds. The log says it once when writes start failing and once when they
    /// work again, not at every retry.
    pub(crate) async fn run(mut self, cancel: CancellationToken) {
        let mut version: watch::Receiver<u64> = self.store.subscribe();
        let mut written = self.store.inner.durable.borrow().version;
        let mut failing: Option<String> = None;
        // Mutations made before this subscription count too.
        version.mark_changed();
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
            let checkpoint = self.journal.as_ref().is_none_or(Journal::wants_checkpoint);
            let through = self.store.lock().version;
            match self.commit().await {
                Ok(covered) => {
                    written = covered;
                    if failing.take().is_some() {
                        tracing::warn!(
                            "State file {} written again; requests that change state are \
                             accepted again",
                            self.path.display()
                        );
                    }
                    // After a burst that rewrote the whole state, hand the heap it freed
                    // back to the kernel. Records are small: trimming after each would
                    // cost more than it returns.
                    if checkpoint {
                        cobble_sys::memory::trim_heap();
                    }
                }
                Err(e) => {
                    let cause = e.to_string();
                    self.failed(through, &cause);
                    if failing.is_none() {
                        tracing::warn!(
                            "Cannot write state file {}: {cause}; requests that change state \
                             are refused until it can be written",
                            self.path.display()
                        );
                    }
                    failing = Some(cause);
                    tokio::select! {
                        _ = cancel.cancelled() => break,
                        _ = tokio::time::sleep(RETRY_DELAY) => {}
                        _ = self.store.inner.urgent.notified() => {}
                    }
                    version.mark_changed();
                }
            }
        }
        // A daemon that stops cleanly leaves the whole state in the state file.
        let journaled = self.journal.as_ref().is_some_and(|j| j.len > j.header_len);
        if (*version.borrow() > written || journaled)
            && let Err(e) = self.flush().await
        {
            tracing::warn!("Cannot write state file {}: {e}", self.path.display());
        }
    }
}

/// Writes the whole state, and prepares the journal that continues it. The journal itself is
/// written with its first record: a checkpoint that nothing follows (a daemon starting, one
/// with nothing new) costs one durable write, not two.
fn write_checkpoint(
    path: &Path,
    generation: u64,
    base: journal::Base,
    bytes: &[u8],
) -> Result<Journal, AtomicError> {
    write_state_file(path, bytes)?;
    // The old generation's journal is ignored from now on; removed so it takes no space
    // (no flush: should it come back after a crash, it is still ignored).
    let journal_path = journal::path_for(path);
    match fs::remove_file(&journal_path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(AtomicError::path("remove", &journal_path, e)),
    }
    let base = journal::Base {
        len: bytes.len() as u64,
        crc: journal::crc32(bytes),
        ..base
    };
    let header = journal::header(generation, base);
    Ok(Journal {
        file: None,
        path: journal_path,
        len: header.len() as u64,
        header_len: header.len() as u64,
        header,
        state_len: bytes.len() as u64,
        seq: 1,
    })
}

/// Appends a record to the journal and flushes it to disk. The data's flush is enough:
/// the file's length, which an append changes, is flushed with it. The first record of a
/// generation creates the journal, header and record together, atomically and durably (a
/// temporary file renamed over the older journal, the directory flushed), so that a journal
/// that exists always begins with a whole header: an empty one, or one whose first line is
/// cut, is damage, never a crash. A crash before the rename leaves the older journal, which
/// a load ignores.
fn append(mut journal: Journal, record: &[u8]) -> Result<Journal, AtomicError> {
    let path = journal.path.clone();
    let at = |op| {
        let path = path.clone();
        move |e| AtomicError::path(op, &path, e)
    };
    match &mut journal.file {
        Some(file) => {
            file.write_all(record).map_err(at("write"))?;
            file.sync_data().map_err(at("sync"))?;
        }
        None => {
            let mut first = Vec::with_capacity(journal.header.len() + record.len());
            first.extend_from_slice(&journal.header);
            first.extend_from_slice(record);
            atomic::write_atomic(&journal.path, &first, STATE_FILE_MODE, Durability::Machine)?;
            let file = OpenOptions::new()
                .append(true)
                .open(&journal.path)
                .map_err(at("open"))?;
            journal.file = Some(file);
        }
    }
    journal.len += record.len() as u64;
    journal.seq += 1;
    Ok(journal)
}
