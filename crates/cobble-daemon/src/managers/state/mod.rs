//! Changes and tasks: the API's record of what was asked and what happened.
//!
//! The store is a plain data structure behind one mutex, shared by the code that creates and
//! advances changes (the service manager's change runners) and the API (listing, waiting,
//! aborting). Critical sections are short and never await. Every mutation bumps a version
//! (under the lock) published on a `watch` channel, which both wakes
//! `/v1/changes/{id}/wait` and tells the persister there is something to write. The
//! persister coalesces bursts into one write (see [`persist`]), so the file is never
//! rewritten once per event.
//!
//! Change, task and notice IDs count up across restarts; changes left unfinished by a previous
//! daemon are closed at load so nothing waits on them forever.
//!
//! Notices ([`notices`]) live in the same data: every change's status change records a
//! `change-update` notice in the same critical section, and a second channel, bumped only
//! when a notice is new or repeated, wakes the long-pollers of `GET /v1/notices`.
//!
//! # On disk
//!
//! Two files in `$PEBBLE`, one format for both directions of a swap with Pebble:
//!
//! - `.pebble.state`, the checkpoint: the whole state in Pebble's own JSON shape
//!   ([`format`](mod@format)), so that Pebble (v1.7 on) and cobble can each start on what the other
//!   wrote. Written atomically and durably (temporary file, fsync, rename, fsync of the
//!   directory). What Pebble writes that cobble does not use is carried and written back;
//!   cobble's own fields map onto what Pebble's managers store, and cobble's one piece of
//!   bookkeeping, the journal generation, is a `data` entry Pebble carries.
//! - `.pebble.state.journal`, cobble's own file, which Pebble never reads: the records of
//!   what changed since the checkpoint, appended and flushed with `fdatasync`, each framed
//!   with a checksum and a sequence number, after a header that describes the checkpoint it
//!   continues ([`journal`]). It makes a durable answer cost one small append rather than a
//!   rewrite of the whole state; it is folded into the checkpoint when it grows, and at every
//!   clean stop, so a stopped daemon leaves the whole state in `.pebble.state` alone.
//!
//! No other state file is needed: everything cobble keeps fits Pebble's shape.
//!
//! # What a client is told is on disk
//!
//! A change or notice ID, or a change of identities, is answered only once the state file
//! holds it: the group commit of [`StateStore::durable`], many requests to one write. The API
//! answers a change ID only through a [`Recorded`], which only [`StateStore::recorded`] makes
//! after the write, and the managers that act for a client record first and act after (a
//! service action or an exec is carried out only once its change is on disk). When the write
//! fails (a full or read-only disk), every request waiting on it fails at once with the
//! cause, what it created is taken back ([`StateStore::discard_change`],
//! [`StateStore::add_notice_recorded`], [`StateStore::change_identities_recorded`]), and its
//! client may retry safely; reads, health, checks and running services go on, and the first
//! request after the disk heals succeeds. Notice long-pollers are answered only with notices
//! the state file holds, so none sees a notice before its `notify` could have been answered.
//!
//! # Damage
//!
//! At load, what is intact is used and what is not is detected ([`persist::load`]): a state
//! file that is empty or unreadable, a journal line that fails its checksum or sequence, a
//! state file older than its journal stop the daemon with the file named, what is known to be
//! lost and how to start anyway; a last record torn by a crash (never acknowledged) is left
//! out with a warning. Nothing is ever read as empty state in silence.

pub mod format;
mod identities;
mod journal;
pub mod notices;
mod persist;
mod smallmap;

pub use identities::IdentitiesError;
pub use notices::{Notice, NoticeFilter, NoticeType, Occurrence};
pub use persist::{COALESCE_WINDOW, FlushError, PersistError, Persister, load, write_state_file};
pub use smallmap::SmallMap;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use cobble_client::time::{format_rfc3339_nano, format_rfc3339_secs};
use cobble_client::types::{ChangeInfo, TaskInfo, TaskProgress};
use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// At most this many log entries are kept per task; older ones are dropped.
pub const MAX_TASK_LOG: usize = 10;
/// Ready changes older than this are pruned.
pub const READY_CHANGE_TTL: Duration = Duration::from_secs(7 * 24 * 3600);
/// Changes still not ready after this long are aborted.
pub const ABORT_TTL: Duration = Duration::from_secs(14 * 24 * 3600);
/// At most this many ready changes are kept.
pub const MAX_READY_CHANGES: usize = 1000;
/// How far past [`MAX_READY_CHANGES`] the history may grow before a new change prunes it,
/// so that pruning (a sort of every change) runs once per this many changes, not each time.
const PRUNE_SLACK: usize = 100;
/// Kinds of change that may legitimately stay unfinished for ever; never aborted by age.
pub const LONG_LIVED_KINDS: [&str; 2] = ["perform-check", "recover-check"];

/// The status of a task, and the derived status of a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TaskStatus {
    Default,
    Hold,
    Do,
    Doing,
    Done,
    Abort,
    Undo,
    Undoing,
    Undone,
    Error,
    Wait,
}

impl TaskStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Default => "Default",
            TaskStatus::Hold => "Hold",
            TaskStatus::Do => "Do",
            TaskStatus::Doing => "Doing",
            TaskStatus::Done => "Done",
            TaskStatus::Abort => "Abort",
            TaskStatus::Undo => "Undo",
            TaskStatus::Undoing => "Undoing",
            TaskStatus::Undone => "Undone",
            TaskStatus::Error => "Error",
            TaskStatus::Wait => "Wait",
        }
    }

    /// Done, Undone, Hold and Error are final.
    pub fn is_ready(self) -> bool {
        matches!(
            self,
            TaskStatus::Done | TaskStatus::Undone | TaskStatus::Hold | TaskStatus::Error
        )
    }
}

/// A task: one step of a change, such as starting one service.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Task {
    pub id: u64,
    pub change_id: u64,
    /// `start`, `stop`, ...
    pub kind: String,
    pub summary: String,
    pub status: TaskStatus,
    /// Entries already formatted as `<time> INFO|ERROR <message>`.
    pub log: Vec<String>,
    pub spawn_time: Timestamp,
    pub ready_time: Option<Timestamp>,
    /// The service this task acts on, if any.
    pub service: Option<String>,
    /// What the API shows as the task's `data` (Pebble's `api-data`), such as an exec's
    /// `exit-code`.
    #[serde(default, skip_serializing_if = "SmallMap::is_empty")]
    pub data: SmallMap<serde_json::Value>,
    /// What Pebble wrote for the task that cobble does not use, written back unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub carried: Option<Box<Carried>>,
}

/// A change: a client request and the tasks carrying it out.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Change {
    pub id: u64,
    pub kind: String,
    pub summary: String,
    pub task_ids: Vec<u64>,
    pub spawn_time: Timestamp,
    pub ready_time: Option<Timestamp>,
    /// Services the change is about (`for=` filter of `GET /v1/changes`).
    pub service_names: Vec<String>,
    /// The status of a change without tasks.
    pub status_without_tasks: TaskStatus,
    /// The check a `perform-check` or `recover-check` change is about, which its
    /// change-update notices carry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check_name: Option<String>,
    /// The status the last change-update notice was recorded for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_notice_status: Option<TaskStatus>,
    /// What Pebble wrote for the change that cobble does not use, written back unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub carried: Option<Box<Carried>>,
}

/// Fields of a change or a task in Pebble's state file that cobble does not use (`clean`,
/// `lanes`, `doing-time`, a task's `exec-setup` or `check-details`, ...): kept as they were
/// read, and written back, so that Pebble finds them again after a rollback.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Carried {
    /// Top-level fields, by name.
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub fields: serde_json::Map<String, serde_json::Value>,
    /// Entries of its `data`, by key.
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub data: serde_json::Map<String, serde_json::Value>,
}

/// What Pebble's state file holds that cobble does not use, kept from the file cobble read
/// and written back with every checkpoint (see [`format`](mod@format)). Nothing here changes while the
/// daemon runs, so the journal never records it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CarriedState {
    /// Top-level fields (`last-lane-id`, and any a later Pebble adds).
    pub fields: serde_json::Map<String, serde_json::Value>,
    /// Entries of `data` (`patch-level`, `start-of-operation-time`, ...).
    pub data: serde_json::Map<String, serde_json::Value>,
    /// Notices of types cobble does not know, as they were.
    pub notices: Vec<serde_json::Value>,
    /// Fields of identities that cobble does not know, by identity name.
    pub identities: BTreeMap<String, serde_json::Map<String, serde_json::Value>>,
    /// Whether identities are also written where Pebble before v1.28 reads them (the top
    /// level), because the file came from such a release.
    pub legacy_identities: bool,
}

/// Which changes `GET /v1/changes` lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Select {
    InProgress,
    Ready,
    All,
}

/// How far the state file reaches.
#[derive(Debug, Clone)]
struct Durable {
    /// The store version the file holds.
    version: u64,
    last_change_id: u64,
    last_task_id: u64,
    last_notice_id: u64,
    /// How many notice wakes the file holds: waiters of `GET /v1/notices` are woken only up
    /// to here, so that none sees a notice before it is on disk.
    notice_wakes: u64,
    /// Whether a persister is attached; without one nothing is waited for.
    persisted: bool,
    /// The last write that failed, while no later one succeeded.
    failure: Option<Failure>,
}

/// A write that failed: everything up to `through` that was not already durable is not.
#[derive(Debug, Clone)]
struct Failure {
    /// The store version the failed write would have made durable.
    through: u64,
    /// Why, as the write's error says it (`write <path>: no space left on device`).
    cause: Arc<str>,
}

/// Why a mutation could not be made durable: the state file could not be written. The
/// text is the write's error; callers say what was not recorded (`cannot record change:
/// ...`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NotRecorded(Arc<str>);

/// A value (a change or notice ID) that a client may be told, because what it names is on
/// disk: only [`StateStore::recorded`] makes one, after the write. The API answers with IDs
/// through this type alone, so no handler can answer before the write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "a recorded ID is for telling a client"]
pub struct Recorded<T>(T);

impl<T> Recorded<T> {
    /// The value vouched for.
    pub fn get(&self) -> &T {
        &self.0
    }

    pub fn into_inner(self) -> T {
        self.0
    }
}

/// Everything the state file holds.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct StateData {
    pub last_change_id: u64,
    pub last_task_id: u64,
    pub changes: BTreeMap<u64, Change>,
    pub tasks: BTreeMap<u64, Task>,
    /// Named identities and their access, by name (see [`crate::identities`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub identities: BTreeMap<String, crate::identities::Identity>,
    #[serde(default)]
    pub last_notice_id: u64,
    /// Notices by ID.
    #[serde(default)]
    pub notices: BTreeMap<u64, Notice>,
    /// How many times a notice was added or repeated; its moves wake notice waiters.
    #[serde(skip)]
    pub notice_wakes: u64,
    /// Bumped by every mutation, under the lock: what a write covers and when a notice last
    /// changed are told in these numbers.
    #[serde(skip)]
    version: u64,
    /// Which journal continues this state (see [`journal`]).
    #[serde(default)]
    pub generation: u64,
    /// What the state file held that cobble does not use; never part of a journal record.
    #[serde(skip)]
    pub carried: CarriedState,
    /// Changes touched since the persister last wrote; never part of the file.
    #[serde(skip)]
    dirty: journal::Dirty,
}

/// Errors of store operations, worded as Pebble's API words them.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum StateError {
    #[error("cannot find change with id \"{0}\"")]
    NoSuchChange(String),
    #[error("cannot abort change {0} with nothing pending")]
    NothingPending(u64),
    #[error("cannot record change: {0}")]
    NotRecorded(NotRecorded),
}

/// The shared store of changes and tasks. Cheap to clone.
#[derive(Clone)]
pub struct StateStore {
    inner: Arc<Inner>,
}

struct Inner {
    data: Mutex<StateData>,
    /// Bumped on every mutation.
    version: watch::Sender<u64>,
    /// Bumped when a notice is added or repeated (not for an occurrence `repeat-after`
    /// holds back), so that long-pollers wake only when there may be something for them.
    notice_wakes: watch::Sender<u64>,
    /// What the state file holds, as the persister last wrote it.
    durable: watch::Sender<Durable>,
    /// Someone waits for durability: the persister writes without its coalescing window.
    urgent: tokio::sync::Notify,
    /// Cancelled when a change is aborted; runners watch these. Not persisted.
    abort_tokens: Mutex<BTreeMap<u64, CancellationToken>>,
}

impl StateStore {
    /// A store holding `data` (fresh or loaded from disk).
    pub fn new(mut data: StateData) -> StateStore {
        close_unfinished(&mut data);
        notices::prune(&mut data, Timestamp::now());
        for warning in data
            .notices
            .values()
            .filter(|n| n.kind == NoticeType::Warning)
        {
            notices::note_warning(warning.last_repeated);
        }
        let (version, _) = watch::channel(0);
        let durable = Durable {
            version: 0,
            last_change_id: data.last_change_id,
            last_task_id: data.last_task_id,
            last_notice_id: data.last_notice_id,
            notice_wakes: data.notice_wakes,
            persisted: false,
            failure: None,
        };
        StateStore {
            inner: Arc::new(Inner {
                data: Mutex::new(data),
                version,
                notice_wakes: watch::Sender::new(0),
                durable: watch::Sender::new(durable),
                urgent: tokio::sync::Notify::new(),
                abort_tokens: Mutex::new(BTreeMap::new()),
            }),
        }
    }

    /// Subscribes to mutations.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.inner.version.subscribe()
    }

    fn lock(&self) -> MutexGuard<'_, StateData> {
        self.inner.data.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `f` on the data and publishes the mutation.
    fn mutate<R>(&self, f: impl FnOnce(&mut StateData) -> R) -> R {
        let (result, version, wakes) = {
            let mut d = self.lock();
            d.version += 1;
            let before = d.notice_wakes;
            let result = f(&mut d);
            (
                result,
                d.version,
                (d.notice_wakes != before).then_some(d.notice_wakes),
            )
        };
        self.publish(version, wakes);
        result
    }

    /// Tells who watches that the data reached `version`, and the notice waiters that
    /// notices moved (at once without a persister; with one, once the write holds them).
    fn publish(&self, version: u64, wakes: Option<u64>) {
        self.inner.version.send_if_modified(|v| {
            let newer = version > *v;
            *v = (*v).max(version);
            newer
        });
        if let Some(wakes) = wakes
            && !self.inner.durable.borrow().persisted
        {
            self.inner.notice_wakes.send_replace(wakes);
        }
    }

    /// The current data as the state file holds it.
    pub fn snapshot_json(&self) -> Vec<u8> {
        format::encode(&self.lock())
    }

    /// Serialises the current data under the next journal generation, with what it covers:
    /// every mutation up to the version and the last IDs. The journal starts over from here.
    fn checkpoint(&self) -> (Durable, u64, journal::Base, Vec<u8>) {
        let mut data = self.lock();
        data.generation += 1;
        data.dirty.clear();
        let covers = covers(&data);
        let bytes = format::encode(&data);
        (covers, data.generation, journal::Base::of(&data), bytes)
    }

    /// The journal record of what changed since the last write (None if nothing did), with
    /// what the journal covers once it is appended.
    fn journal_record(&self, seq: u64) -> (Durable, Option<Vec<u8>>) {
        let mut data = self.lock();
        (covers(&data), journal::take_record(&mut data, seq))
    }

    /// Returns once every mutation made so far is in the state file: the group commit a
    /// mutating request awaits before it tells the client a change ID. Many waiters share
    /// one write. Returns at once when no persister runs (`--dry`-like daemons, tests).
    /// Fails when the write that should have held them failed (a full or read-only disk):
    /// the caller then undoes what it did and tells its client why.
    pub async fn durable(&self) -> Result<(), NotRecorded> {
        let version = self.lock().version;
        self.wait_version(version).await
    }

    /// Waits for [`StateStore::durable`], then vouches for `value`: the only way to make a
    /// [`Recorded`].
    pub async fn recorded<T>(&self, value: T) -> Result<Recorded<T>, NotRecorded> {
        self.durable().await?;
        Ok(Recorded(value))
    }

    /// Returns once the state file holds store version `version`, or fails when a write
    /// that should have held it failed.
    async fn wait_version(&self, version: u64) -> Result<(), NotRecorded> {
        let mut durable = self.inner.durable.subscribe();
        let outcome = |d: &Durable| {
            if !d.persisted || d.version >= version {
                return Some(Ok(()));
            }
            match &d.failure {
                Some(f) if f.through >= version => Some(Err(NotRecorded(f.cause.clone()))),
                _ => None,
            }
        };
        // A failure already published for this version is the answer: a request made
        // while the disk refuses writes is refused at once, and the next write attempt
        // (which it asks for) is what may heal it.
        if let Some(done) = outcome(&durable.borrow_and_update()) {
            return done;
        }
        self.inner.urgent.notify_one();
        loop {
            // The persister detaches (persisted false) when it stops: nobody waits forever.
            if durable.changed().await.is_err() {
                return Ok(());
            }
            if let Some(done) = outcome(&durable.borrow_and_update()) {
                return done;
            }
        }
    }

    /// The changes `GET /v1/changes` lists, once the IDs they show are in the state file
    /// (a check's change made in the background shows IDs no request waited for). Serialise
    /// the listing at once: it holds the store.
    pub async fn list_changes(
        &self,
        select: Select,
        for_service: Option<&str>,
    ) -> ChangesListing<'_> {
        self.durable_ids().await;
        self.changes_listing(select, for_service)
    }

    /// The change with the API's ID `id`, once the IDs it shows are in the state file.
    pub async fn get_change(&self, id: &str) -> Result<ChangeInfo, StateError> {
        let change = self.change_info_str(id)?;
        self.durable_ids().await;
        Ok(change)
    }

    /// Aborts the change (see [`StateStore::abort`]) and returns it once the abort is in the
    /// state file. An abort is carried out as it is recorded (its runners are told at once),
    /// so while the disk refuses writes it is refused up front; a write that fails after
    /// leaves it in memory, written once the disk takes it, and says so.
    pub async fn abort_change(&self, change_id: u64) -> Result<ChangeInfo, StateError> {
        if let Some(e) = self.write_failure() {
            return Err(StateError::NotRecorded(e));
        }
        let info = self.abort(change_id)?;
        self.durable().await.map_err(StateError::NotRecorded)?;
        Ok(info)
    }

    /// The live notices matching `filter` (see `notices`), once the IDs they show are in
    /// the state file.
    pub async fn list_notices(&self, filter: &NoticeFilter) -> Vec<Notice> {
        let notices = self.notices(filter);
        self.durable_ids().await;
        notices
    }

    /// A live notice by ID, once the IDs it shows are in the state file.
    pub async fn get_notice(&self, id: u64) -> Option<Notice> {
        let notice = self.notice(id)?;
        self.durable_ids().await;
        Some(notice)
    }

    /// `value`, once every ID handed out so far is in the state file: for a manager whose
    /// answers show IDs of changes it made in the background (a check's current change).
    pub async fn showing_ids<T>(&self, value: T) -> T {
        self.durable_ids().await;
        value
    }

    /// Returns once every change, task and notice ID handed out so far is in the state file,
    /// so a response that shows IDs never shows one a restarted daemon would give out again.
    /// Writes nothing when they already are (the usual case: IDs are made by mutating
    /// requests, which waited). While the disk refuses writes it returns at once: reads go
    /// on answering, and what they show of background work (a check's new change) is on
    /// disk as soon as the disk takes it.
    async fn durable_ids(&self) {
        let (change, task, notice) = {
            let d = self.lock();
            (d.last_change_id, d.last_task_id, d.last_notice_id)
        };
        let done = |d: &Durable| {
            !d.persisted
                || d.failure.is_some()
                || (d.last_change_id >= change
                    && d.last_task_id >= task
                    && d.last_notice_id >= notice)
        };
        let mut durable = self.inner.durable.subscribe();
        if done(&durable.borrow()) {
            return;
        }
        self.inner.urgent.notify_one();
        let _ = durable.wait_for(done).await;
    }

    /// Why the last write of the state file failed, while none succeeded since.
    pub fn write_failure(&self) -> Option<NotRecorded> {
        let durable = self.inner.durable.borrow();
        durable
            .failure
            .as_ref()
            .filter(|_| durable.persisted)
            .map(|f| NotRecorded(f.cause.clone()))
    }

    /// Creates a change with no tasks yet.
    pub fn new_change(&self, kind: &str, summary: &str, service_names: Vec<String>) -> u64 {
        self.create_change(kind, summary, service_names, None)
    }

    /// Creates a health check's change, whose notices name the check.
    pub fn new_check_change(&self, kind: &str, summary: &str, check_name: &str) -> u64 {
        self.create_change(kind, summary, Vec::new(), Some(check_name.to_owned()))
    }

    fn create_change(
        &self,
        kind: &str,
        summary: &str,
        service_names: Vec<String>,
        check_name: Option<String>,
    ) -> u64 {
        let id = self.mutate(|d| {
            d.last_change_id += 1;
            let id = d.last_change_id;
            d.changes.insert(
                id,
                Change {
                    id,
                    kind: kind.into(),
                    summary: summary.into(),
                    task_ids: Vec::new(),
                    spawn_time: Timestamp::now(),
                    ready_time: None,
                    service_names,
                    status_without_tasks: TaskStatus::Hold,
                    check_name,
                    last_notice_status: None,
                    carried: None,
                },
            );
            notices::observe_change(d, id, Timestamp::now());
            d.dirty.touch(id);
            // The periodic prune alone would let a busy daemon (a charm that execs often)
            // hold ten minutes of churn; past the cap and some slack, prune now, so the
            // history, and the memory it takes, stays bounded by count.
            if d.changes.len() > MAX_READY_CHANGES + PRUNE_SLACK {
                prune(d, Timestamp::now());
            }
            id
        });
        self.inner
            .abort_tokens
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, CancellationToken::new());
        id
    }

    /// Creates a change that is already Done (a replan with nothing to do).
    pub fn new_done_change(&self, kind: &str, summary: &str) -> u64 {
        let id = self.new_change(kind, summary, Vec::new());
        self.mutate(|d| {
            if let Some(c) = d.changes.get_mut(&id) {
                c.status_without_tasks = TaskStatus::Done;
                c.ready_time = Some(c.spawn_time);
            }
            notices::observe_change(d, id, Timestamp::now());
            d.dirty.touch(id);
        });
        id
    }

    /// Adds a task to a change.
    pub fn add_task(
        &self,
        change_id: u64,
        kind: &str,
        summary: &str,
        service: Option<&str>,
    ) -> u64 {
        self.mutate(|d| {
            d.last_task_id += 1;
            let id = d.last_task_id;
            d.tasks.insert(
                id,
                Task {
                    id,
                    change_id,
                    kind: kind.into(),
                    summary: summary.into(),
                    status: TaskStatus::Do,
                    log: Vec::new(),
                    spawn_time: Timestamp::now(),
                    ready_time: None,
                    service: service.map(str::to_owned),
                    data: SmallMap::new(),
                    carried: None,
                },
            );
            if let Some(c) = d.changes.get_mut(&change_id) {
                c.task_ids.push(id);
            }
            notices::observe_change(d, change_id, Timestamp::now());
            d.dirty.touch(change_id);
            id
        })
    }

    /// The token cancelled when `change_id` is aborted.
    pub fn abort_token(&self, change_id: u64) -> CancellationToken {
        self.inner
            .abort_tokens
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(change_id)
            .or_default()
            .clone()
    }

    /// Sets a task's status, stamping ready times of the task and, if it became ready, its change.
    pub fn set_task_status(&self, task_id: u64, status: TaskStatus) {
        self.mutate(|d| {
            let Some(task) = d.tasks.get_mut(&task_id) else {
                return;
            };
            task.status = status;
            if status.is_ready() && task.ready_time.is_none() {
                task.ready_time = Some(Timestamp::now());
            }
            let change_id = task.change_id;
            refresh_ready_time(d, change_id);
            notices::observe_change(d, change_id, Timestamp::now());
            d.dirty.touch(change_id);
        });
        self.forget_token_if_ready(task_id);
    }

    fn forget_token_if_ready(&self, task_id: u64) {
        let ready_change = {
            let d = self.lock();
            d.tasks.get(&task_id).and_then(|t| {
                d.changes
                    .get(&t.change_id)
                    .filter(|c| c.ready_time.is_some())
                    .map(|c| c.id)
            })
        };
        if let Some(id) = ready_change {
            self.inner
                .abort_tokens
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&id);
        }
    }

    /// Appends an INFO entry to a task's log.
    pub fn task_info(&self, task_id: u64, message: &str) {
        self.task_log(task_id, "INFO", message);
    }

    /// Appends an ERROR entry to a task's log; these make up the change's `err`.
    pub fn task_error(&self, task_id: u64, message: &str) {
        self.task_log(task_id, "ERROR", message);
    }

    fn task_log(&self, task_id: u64, level: &str, message: &str) {
        let entry = format!(
            "{} {level} {message}",
            format_rfc3339_secs(Timestamp::now())
        );
        self.mutate(|d| {
            if let Some(task) = d.tasks.get_mut(&task_id) {
                task.log.push(entry);
                if task.log.len() > MAX_TASK_LOG {
                    let excess = task.log.len() - MAX_TASK_LOG;
                    task.log.drain(..excess);
                }
                let change_id = task.change_id;
                d.dirty.touch(change_id);
            }
        });
    }

    /// The status of a task.
    pub fn task_status(&self, task_id: u64) -> Option<TaskStatus> {
        self.lock().tasks.get(&task_id).map(|t| t.status)
    }

    /// Sets one entry of a task's `data`.
    pub fn set_task_data(&self, task_id: u64, key: &str, value: serde_json::Value) {
        self.mutate(|d| {
            if let Some(task) = d.tasks.get_mut(&task_id) {
                task.data.insert(key.to_owned(), value);
                let change_id = task.change_id;
                d.dirty.touch(change_id);
            }
        });
    }

    /// A task's kind and the change it belongs to.
    pub fn task_kind(&self, task_id: u64) -> Option<(String, u64)> {
        self.lock()
            .tasks
            .get(&task_id)
            .map(|t| (t.kind.clone(), t.change_id))
    }

    /// A change as the API shows it.
    pub fn change_info(&self, change_id: u64) -> Option<ChangeInfo> {
        let d = self.lock();
        d.changes.get(&change_id).map(|c| render_change(&d, c))
    }

    /// Parses an API change ID and returns the change.
    fn change_info_str(&self, id: &str) -> Result<ChangeInfo, StateError> {
        id.parse::<u64>()
            .ok()
            .and_then(|n| self.change_info(n))
            .ok_or_else(|| StateError::NoSuchChange(id.to_owned()))
    }

    /// Lists changes, newest last.
    pub fn changes(&self, select: Select, for_service: Option<&str>) -> Vec<ChangeInfo> {
        let d = self.lock();
        listed(&d, select, for_service)
            .map(|c| render_change(&d, c))
            .collect()
    }

    /// The same list, rendered one change at a time as it is serialised. Rendered whole, a
    /// history of a thousand changes takes a couple of megabytes of small blocks for each
    /// listing, which the allocator then keeps for reuse; one at a time, the blocks of one
    /// change are reused by the next. The store stays locked until the listing is dropped:
    /// serialise it at once, and hold it across no await.
    fn changes_listing(&self, select: Select, for_service: Option<&str>) -> ChangesListing<'_> {
        ChangesListing {
            data: self.lock(),
            select,
            for_service: for_service.map(str::to_owned),
        }
    }

    /// Whether a change is ready (None if unknown).
    pub fn is_ready(&self, change_id: u64) -> Option<bool> {
        let d = self.lock();
        d.changes
            .get(&change_id)
            .map(|c| change_status(&d, c).is_ready())
    }

    /// Waits until a change is ready (returns at once for an unknown change).
    pub async fn wait_ready(&self, change_id: u64) {
        let mut versions = self.subscribe();
        while self.is_ready(change_id) == Some(false) {
            if versions.changed().await.is_err() {
                // The store outlives every waiter; a closed channel means nothing changes.
                std::future::pending::<()>().await;
            }
        }
    }

    /// Aborts a change: pending tasks are held, running ones are asked to stop. Nothing
    /// waits for the write: a client is answered through [`StateStore::abort_change`].
    pub fn abort(&self, change_id: u64) -> Result<ChangeInfo, StateError> {
        let result = self.mutate(|d| {
            let Some(change) = d.changes.get(&change_id) else {
                return Err(StateError::NoSuchChange(change_id.to_string()));
            };
            if change_status(d, change).is_ready() {
                return Err(StateError::NothingPending(change_id));
            }
            for id in change.task_ids.clone() {
                if let Some(task) = d.tasks.get_mut(&id) {
                    match task.status {
                        TaskStatus::Do => {
                            task.status = TaskStatus::Hold;
                            task.ready_time = Some(Timestamp::now());
                        }
                        TaskStatus::Doing => task.status = TaskStatus::Abort,
                        _ => {}
                    }
                }
            }
            refresh_ready_time(d, change_id);
            notices::observe_change(d, change_id, Timestamp::now());
            d.dirty.touch(change_id);
            Ok(())
        });
        result?;
        self.abort_token(change_id).cancel();
        Ok(self.change_info(change_id).expect("change exists"))
    }

    /// Drops old ready changes and aborts ancient unfinished ones.
    pub fn prune(&self, now: Timestamp) {
        self.mutate(|d| prune(d, now));
    }

    /// Records an occurrence of a notice; returns its ID. Nobody is told the ID: a caller
    /// that tells a client uses [`StateStore::add_notice_recorded`].
    pub fn add_notice(&self, occurrence: Occurrence) -> u64 {
        let warning = occurrence.kind == NoticeType::Warning;
        self.mutate(|d| {
            let (id, _) = notices::add(d, occurrence, Timestamp::now());
            if warning && let Some(notice) = d.notices.get(&id) {
                notices::note_warning(notice.last_repeated);
            }
            id
        })
    }

    /// Records a warning for the user (Pebble's `Warnf`): a public `warning` notice whose key
    /// is the message, repeating at most once a day. `cobble warnings` lists it.
    pub fn add_warning(&self, message: &str) -> u64 {
        self.add_notice(Occurrence {
            user_id: None,
            kind: NoticeType::Warning,
            key: message.to_owned(),
            data: BTreeMap::new(),
            repeat_after: notices::WARNING_REPEAT_AFTER,
        })
    }

    /// Records an occurrence of a notice and returns its ID once it is on disk. When the
    /// state file cannot be written, the occurrence is taken back (the notice is as it was,
    /// or gone if it was new; its ID is never given again) and the request fails, so that a
    /// client's retry counts once.
    pub async fn add_notice_recorded(
        &self,
        occurrence: Occurrence,
    ) -> Result<Recorded<u64>, NotRecorded> {
        let (id, before, after) = self.mutate(|d| {
            let before = notices::find(d, &occurrence).cloned();
            let (id, _) = notices::add(d, occurrence, Timestamp::now());
            (id, before, d.notices.get(&id).cloned())
        });
        match self.durable().await {
            Ok(()) => Ok(Recorded(id)),
            Err(e) => {
                self.mutate(|d| {
                    // Another occurrence since then is someone else's: it stays.
                    if d.notices.get(&id) == after.as_ref() {
                        match before {
                            Some(notice) => d.notices.insert(id, notice),
                            None => d.notices.remove(&id),
                        };
                        d.dirty.touch_notice(id);
                    }
                });
                Err(e)
            }
        }
    }

    /// Takes back a change that was created but could not be recorded, before anything
    /// was done for it: it goes with its tasks and its change-update notice. Its ID is
    /// never given again.
    pub fn discard_change(&self, change_id: u64) {
        self.mutate(|d| {
            if let Some(change) = d.changes.remove(&change_id) {
                for task in change.task_ids {
                    d.tasks.remove(&task);
                }
                d.dirty.touch(change_id);
            }
            let key = change_id.to_string();
            let updates: Vec<u64> = d
                .notices
                .values()
                .filter(|n| n.kind == NoticeType::ChangeUpdate && n.key == key)
                .map(|n| n.id)
                .collect();
            for id in updates {
                d.notices.remove(&id);
                d.dirty.touch_notice(id);
            }
        });
        self.inner
            .abort_tokens
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&change_id);
    }

    /// The live notices matching `filter`, ordered by last-repeated time.
    fn notices(&self, filter: &NoticeFilter) -> Vec<Notice> {
        notices::list(&self.lock(), filter, Timestamp::now())
    }

    /// A live notice by ID.
    fn notice(&self, id: u64) -> Option<Notice> {
        notices::get(&self.lock(), id, Timestamp::now())
    }

    /// Waits until some notice matches `filter`, then returns the matching ones. Returns at
    /// once if some already match. Wakes only when a notice is added or repeated, and
    /// answers only with notices as the state file holds them: an answer tells a client of
    /// a notice as surely as the answer to its `notify` does, so it never comes first. The
    /// caller bounds the wait with its timeout. A notice and what it names (a change's ID)
    /// are recorded together, so what it returns shows only IDs in the state file.
    pub async fn wait_notices(&self, filter: &NoticeFilter) -> Vec<Notice> {
        let mut wakes = self.inner.notice_wakes.subscribe();
        let mut versions = self.subscribe();
        loop {
            // Marked seen before the check: an addition after it is not missed.
            wakes.borrow_and_update();
            versions.borrow_and_update();
            let (found, newest) = {
                let d = self.lock();
                let found = notices::list(&d, filter, Timestamp::now());
                let newest = found.iter().map(|n| n.changed_at).max().unwrap_or(0);
                (found, newest)
            };
            if !found.is_empty() {
                if self.wait_version(newest).await.is_ok() {
                    return found;
                }
                // The disk refuses writes: what it holds may still be told; an occurrence
                // it does not hold is being taken back, or waits for the disk.
                let on_disk = self.inner.durable.borrow().version;
                let held: Vec<Notice> = found
                    .into_iter()
                    .filter(|n| n.changed_at <= on_disk)
                    .collect();
                if !held.is_empty() {
                    return held;
                }
                if versions.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
                continue;
            }
            if wakes.changed().await.is_err() {
                // The store outlives every waiter; a closed channel means nothing changes.
                std::future::pending::<()>().await;
            }
        }
    }
}

/// The changes `select` and `for_service` pick, newest last.
fn listed<'a>(
    d: &'a StateData,
    select: Select,
    for_service: Option<&'a str>,
) -> impl Iterator<Item = &'a Change> {
    d.changes
        .values()
        .filter(move |c| {
            let ready = change_status(d, c).is_ready();
            match select {
                Select::All => true,
                Select::Ready => ready,
                Select::InProgress => !ready,
            }
        })
        .filter(move |c| for_service.is_none_or(|s| c.service_names.iter().any(|n| n == s)))
}

/// A list of changes that serialises as `GET /v1/changes` answers, from the store itself
/// (see [`StateStore::changes_listing`]).
pub struct ChangesListing<'a> {
    data: MutexGuard<'a, StateData>,
    select: Select,
    for_service: Option<String>,
}

impl Serialize for ChangesListing<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let d = &*self.data;
        serializer.collect_seq(
            listed(d, self.select, self.for_service.as_deref()).map(|c| render_change(d, c)),
        )
    }
}

/// What a write of `d` makes durable.
fn covers(d: &StateData) -> Durable {
    Durable {
        version: d.version,
        last_change_id: d.last_change_id,
        last_task_id: d.last_task_id,
        last_notice_id: d.last_notice_id,
        notice_wakes: d.notice_wakes,
        persisted: true,
        failure: None,
    }
}

/// Closes changes a previous daemon left unfinished: a task that was running is treated as
/// done (its process, if any, did not survive the daemon), tasks not yet begun are held.
fn close_unfinished(d: &mut StateData) {
    let now = Timestamp::now();
    let mut touched = Vec::new();
    for task in d.tasks.values_mut() {
        match task.status {
            TaskStatus::Doing | TaskStatus::Abort => {
                task.status = TaskStatus::Done;
                task.log.push(format!(
                    "{} INFO Daemon restarted; task not retried.",
                    format_rfc3339_secs(now)
                ));
            }
            TaskStatus::Do | TaskStatus::Wait | TaskStatus::Default => {
                task.status = TaskStatus::Hold
            }
            _ => continue,
        }
        task.ready_time.get_or_insert(now);
        touched.push(task.change_id);
    }
    for change_id in touched {
        refresh_ready_time(d, change_id);
        notices::observe_change(d, change_id, now);
    }
}

fn refresh_ready_time(d: &mut StateData, change_id: u64) {
    let Some(change) = d.changes.get(&change_id) else {
        return;
    };
    let ready = change_status(d, change).is_ready();
    let change = d.changes.get_mut(&change_id).expect("exists");
    if ready && change.ready_time.is_none() {
        change.ready_time = Some(Timestamp::now());
    }
}

/// A change's status, derived from its tasks' with Pebble's priorities.
pub fn change_status(d: &StateData, change: &Change) -> TaskStatus {
    if change.task_ids.is_empty() {
        return change.status_without_tasks;
    }
    const ORDER: [TaskStatus; 10] = [
        TaskStatus::Abort,
        TaskStatus::Undoing,
        TaskStatus::Undo,
        TaskStatus::Doing,
        TaskStatus::Do,
        TaskStatus::Wait,
        TaskStatus::Error,
        TaskStatus::Undone,
        TaskStatus::Done,
        TaskStatus::Hold,
    ];
    let statuses: Vec<TaskStatus> = change
        .task_ids
        .iter()
        .filter_map(|id| d.tasks.get(id).map(|t| t.status))
        .collect();
    ORDER
        .into_iter()
        .find(|s| statuses.contains(s))
        .unwrap_or(TaskStatus::Hold)
}

/// The `err` text of a change: one line per ERROR task-log entry.
fn change_err(d: &StateData, change: &Change) -> String {
    let mut lines = Vec::new();
    for task in change.task_ids.iter().filter_map(|id| d.tasks.get(id)) {
        for entry in &task.log {
            if let Some(message) = log_message(entry, "ERROR") {
                lines.push(format!("- {} ({message})", task.summary));
            }
        }
    }
    if lines.is_empty() {
        String::new()
    } else {
        format!("cannot perform the following tasks:\n{}", lines.join("\n"))
    }
}

/// The message of a task-log entry of `level`.
fn log_message<'a>(entry: &'a str, level: &str) -> Option<&'a str> {
    let (_, rest) = entry.split_once(' ')?;
    rest.strip_prefix(level)?.strip_prefix(' ')
}

fn render_change(d: &StateData, c: &Change) -> ChangeInfo {
    let status = change_status(d, c);
    ChangeInfo {
        id: c.id.to_string(),
        kind: c.kind.clone(),
        summary: c.summary.clone(),
        status: status.as_str().into(),
        tasks: c
            .task_ids
            .iter()
            .filter_map(|id| d.tasks.get(id))
            .map(render_task)
            .collect(),
        ready: status.is_ready(),
        err: if status == TaskStatus::Error {
            change_err(d, c)
        } else {
            String::new()
        },
        spawn_time: format_rfc3339_nano(c.spawn_time),
        ready_time: c.ready_time.map(format_rfc3339_nano),
        data: None,
    }
}

fn render_task(t: &Task) -> TaskInfo {
    TaskInfo {
        id: t.id.to_string(),
        kind: t.kind.clone(),
        summary: t.summary.clone(),
        status: t.status.as_str().into(),
        log: t.log.clone(),
        // Pebble's progress of a task that sets none: 0/1 until it starts, 1/1 from then on.
        progress: TaskProgress {
            label: String::new(),
            done: u64::from(t.status != TaskStatus::Do),
            total: 1,
        },
        spawn_time: format_rfc3339_nano(t.spawn_time),
        ready_time: t.ready_time.map(format_rfc3339_nano),
        data: (!t.data.is_empty()).then(|| t.data.to_btree()),
    }
}

fn prune(d: &mut StateData, now: Timestamp) {
    let ready_cutoff = now - READY_CHANGE_TTL;
    let abort_cutoff = now - ABORT_TTL;
    // Drop expired ready changes, then the oldest beyond the cap.
    let mut ready: Vec<(Timestamp, u64)> = d
        .changes
        .values()
        .filter_map(|c| c.ready_time.map(|t| (t, c.id)))
        .collect();
    ready.sort();
    let excess = ready.len().saturating_sub(MAX_READY_CHANGES);
    let mut drop_ids: Vec<u64> = Vec::new();
    for (i, (time, id)) in ready.iter().enumerate() {
        if i < excess || *time < ready_cutoff {
            drop_ids.push(*id);
        }
    }
    for id in drop_ids {
        if let Some(change) = d.changes.remove(&id) {
            for task_id in change.task_ids {
                d.tasks.remove(&task_id);
            }
            d.dirty.touch(id);
        }
    }
    // Abort changes that never finished, except health checks' long-lived changes (a
    // healthy check stays in one perform-check change for as long as it runs).
    let stale: Vec<u64> = d
        .changes
        .values()
        .filter(|c| c.ready_time.is_none() && c.spawn_time < abort_cutoff)
        .filter(|c| !LONG_LIVED_KINDS.contains(&c.kind.as_str()))
        .map(|c| c.id)
        .collect();
    for id in stale {
        let task_ids = d.changes[&id].task_ids.clone();
        for task_id in task_ids {
            if let Some(task) = d.tasks.get_mut(&task_id)
                && !task.status.is_ready()
            {
                task.status = TaskStatus::Hold;
                task.ready_time = Some(now);
            }
        }
        refresh_ready_time(d, id);
        notices::observe_change(d, id, now);
        d.dirty.touch(id);
    }
    // Last, so that no change-update notice outlives the change it points at.
    notices::prune(d, now);
}

#[cfg(test)]
mod tests;
