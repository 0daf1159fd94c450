//! The store: the state's data behind one mutex, the versions that wake waiters and the
//! persister, and the group commit by which what a client is told is on disk first.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use cobble_client::time::format_rfc3339_secs;
use cobble_client::types::ChangeInfo;
use jiff::Timestamp;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::*;

/// How far the state file reaches.
#[derive(Debug, Clone)]
pub(super) struct Durable {
    /// The store version the file holds.
    pub(super) version: u64,
    pub(super) last_change_id: u64,
    pub(super) last_task_id: u64,
    pub(super) last_notice_id: u64,
    /// How many notice wakes the file holds: waiters of `GET /v1/notices` are woken only up
    /// to here, so that none sees a notice before it is on disk.
    pub(super) notice_wakes: u64,
    /// Whether a persister is attached; without one nothing is waited for.
    pub(super) persisted: bool,
    /// The last write that failed, while no later one succeeded.
    pub(super) failure: Option<Failure>,
}

/// A write that failed: everything up to `through` that was not already durable is not.
#[derive(Debug, Clone)]
pub(super) struct Failure {
    /// The store version the failed write would have made durable.
    pub(super) through: u64,
    /// Why, as the write's error says it (`write <path>: no space left on device`).
    pub(super) cause: Arc<str>,
}

/// Why a mutation could not be made durable: the state file could not be written. The
/// text is the write's error; callers say what was not recorded (`cannot record change:
/// ...`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct NotRecorded(Arc<str>);

/// A value (a change or notice ID) that a client may be told, because what it names is on
/// disk: only [`StateStore::recorded`] makes one, after the write. The API answers with IDs
/// through this type alone, so no handler can answer before the write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "a recorded ID is for telling a client"]
pub(crate) struct Recorded<T>(T);

impl<T> Recorded<T> {
    /// The value vouched for.
    pub(crate) fn get(&self) -> &T {
        &self.0
    }
}

/// Errors of store operations, worded as Pebble's API words them.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum StateError {
    #[error("cannot find change with id \"{0}\"")]
    NoSuchChange(String),
    #[error("cannot abort change {0} with nothing pending")]
    NothingPending(u64),
    #[error("cannot record change: {0}")]
    NotRecorded(NotRecorded),
}

/// The shared store of changes and tasks. Cheap to clone.
#[derive(Clone)]
pub(crate) struct StateStore {
    pub(super) inner: Arc<Inner>,
}

pub(super) struct Inner {
    pub(super) data: Mutex<StateData>,
    /// Bumped on every mutation.
    pub(super) version: watch::Sender<u64>,
    /// Bumped when a notice is added or repeated (not for an occurrence `repeat-after`
    /// holds back), so that long-pollers wake only when there may be something for them.
    pub(super) notice_wakes: watch::Sender<u64>,
    /// What the state file holds, as the persister last wrote it.
    pub(super) durable: watch::Sender<Durable>,
    /// Someone waits for durability: the persister writes without its coalescing window.
    pub(super) urgent: tokio::sync::Notify,
    /// Cancelled when a change is aborted; runners watch these. Not persisted.
    pub(super) abort_tokens: Mutex<BTreeMap<u64, CancellationToken>>,
    /// When a warning last repeated.
    pub(super) latest_warning: Arc<notices::LatestWarning>,
}

impl StateStore {
    /// A store holding `data` (fresh or loaded from disk).
    #[cfg(test)]
    pub(crate) fn new(data: StateData) -> StateStore {
        StateStore::keeping(data, &[])
    }

    /// A store holding `data`, whose unfinished tasks are closed but for `keep`: a
    /// re-executed daemon's handed-over tasks (its checks', its service changes'), which go
    /// on under it and stay in progress.
    pub(crate) fn keeping(mut data: StateData, keep: &[u64]) -> StateStore {
        close_unfinished(&mut data, keep);
        notices::prune(&mut data, Timestamp::now());
        let latest_warning = Arc::new(notices::LatestWarning::default());
        for warning in data
            .notices
            .values()
            .filter(|n| n.kind == NoticeType::Warning)
        {
            latest_warning.note(warning.last_repeated);
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
                latest_warning,
            }),
        }
    }

    /// When one of this store's warnings last repeated: a handle that stays current, for the
    /// API's `latest-warning`.
    pub(crate) fn latest_warning(&self) -> Arc<notices::LatestWarning> {
        self.inner.latest_warning.clone()
    }

    /// Subscribes to mutations.
    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.inner.version.subscribe()
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, StateData> {
        self.inner.data.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `f` on the data and publishes the mutation.
    pub(super) fn mutate<R>(&self, f: impl FnOnce(&mut StateData) -> R) -> R {
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
    pub(super) fn publish(&self, version: u64, wakes: Option<u64>) {
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
    #[cfg(test)]
    pub(crate) fn snapshot_json(&self) -> Vec<u8> {
        format::encode(&self.lock())
    }

    /// Serialises the current data under the next journal generation, with what it covers:
    /// every mutation up to the version and the last IDs. The journal starts over from here.
    pub(super) fn checkpoint(&self) -> (Durable, u64, journal::Base, Vec<u8>) {
        let mut data = self.lock();
        data.generation += 1;
        data.dirty.clear();
        let covers = covers(&data);
        let bytes = format::encode(&data);
        (covers, data.generation, journal::Base::of(&data), bytes)
    }

    /// The state as a state file holds it, without a write: what a re-execution hands over
    /// when there is no state file (`PEBBLE_PERSIST=never`).
    pub(crate) fn encoded(&self) -> Vec<u8> {
        format::encode(&self.lock())
    }

    /// The journal record of what changed since the last write (None if nothing did), with
    /// what the journal covers once it is appended.
    pub(super) fn journal_record(&self, seq: u64) -> (Durable, Option<Vec<u8>>) {
        let mut data = self.lock();
        (covers(&data), journal::take_record(&mut data, seq))
    }

    /// Returns once every mutation made so far is in the state file: the group commit a
    /// mutating request awaits before it tells the client a change ID. Many waiters share
    /// one write. Returns at once when no persister runs (`--dry`-like daemons, tests).
    /// Fails when the write that should have held them failed (a full or read-only disk):
    /// the caller then undoes what it did and tells its client why.
    pub(crate) async fn durable(&self) -> Result<(), NotRecorded> {
        let version = self.lock().version;
        self.wait_version(version).await
    }

    /// Waits for [`StateStore::durable`], then vouches for `value`: the only way to make a
    /// [`Recorded`].
    pub(crate) async fn recorded<T>(&self, value: T) -> Result<Recorded<T>, NotRecorded> {
        self.durable().await?;
        Ok(Recorded(value))
    }

    /// Returns once the state file holds store version `version`, or fails when a write
    /// that should have held it failed.
    pub(super) async fn wait_version(&self, version: u64) -> Result<(), NotRecorded> {
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
    pub(crate) async fn list_changes(
        &self,
        select: Select,
        for_service: Option<&str>,
    ) -> ChangesListing<'_> {
        self.durable_ids().await;
        self.changes_listing(select, for_service)
    }

    /// The change with the API's ID `id`, once the IDs it shows are in the state file.
    pub(crate) async fn get_change(&self, id: &str) -> Result<ChangeInfo, StateError> {
        let change = self.change_info_str(id)?;
        self.durable_ids().await;
        Ok(change)
    }

    /// Aborts the change (see `mark_aborted`) and returns it once the abort is in the
    /// state file. An abort is carried out as it is recorded (its runners are told at once),
    /// so while the disk refuses writes it is refused up front; a write that fails after
    /// leaves it in memory, written once the disk takes it, and says so.
    /// Record first, act after: the runners are told to stop only once the abort is on
    /// disk. An abort the disk refuses is taken back (its tasks get the statuses they had)
    /// and the change runs on, so a client's retry is safe.
    pub(crate) async fn abort_change(&self, change_id: u64) -> Result<ChangeInfo, StateError> {
        if let Some(e) = self.write_failure() {
            return Err(StateError::NotRecorded(e));
        }
        let marked = self.mark_aborted(change_id)?;
        if let Err(e) = self.durable().await {
            self.unmark_aborted(change_id, &marked);
            return Err(StateError::NotRecorded(e));
        }
        self.abort_token(change_id).cancel();
        Ok(self.change_info(change_id).expect("change exists"))
    }

    /// The live notices matching `filter` (see `notices`), once the IDs they show are in
    /// the state file.
    pub(crate) async fn list_notices(&self, filter: &NoticeFilter) -> Vec<Notice> {
        let notices = self.notices(filter);
        self.durable_ids().await;
        notices
    }

    /// A live notice by ID, once the IDs it shows are in the state file.
    pub(crate) async fn get_notice(&self, id: u64) -> Option<Notice> {
        let notice = self.notice(id)?;
        self.durable_ids().await;
        Some(notice)
    }

    /// `value`, once every ID handed out so far is in the state file: for a manager whose
    /// answers show IDs of changes it made in the background (a check's current change).
    pub(crate) async fn showing_ids<T>(&self, value: T) -> T {
        self.durable_ids().await;
        value
    }

    /// Returns once every change, task and notice ID handed out so far is in the state file,
    /// so a response that shows IDs never shows one a restarted daemon would give out again.
    /// Writes nothing when they already are (the usual case: IDs are made by mutating
    /// requests, which waited). While the disk refuses writes it returns at once: reads go
    /// on answering, and what they show of background work (a check's new change) is on
    /// disk as soon as the disk takes it.
    pub(super) async fn durable_ids(&self) {
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
    pub(crate) fn write_failure(&self) -> Option<NotRecorded> {
        let durable = self.inner.durable.borrow();
        durable
            .failure
            .as_ref()
            .filter(|_| durable.persisted)
            .map(|f| NotRecorded(f.cause.clone()))
    }

    /// Creates a change with no tasks yet.
    pub(crate) fn new_change(&self, kind: &str, summary: &str, service_names: Vec<String>) -> u64 {
        self.create_change(kind, summary, service_names, None)
    }

    /// Creates a health check's change, whose notices name the check.
    pub(crate) fn new_check_change(&self, kind: &str, summary: &str, check_name: &str) -> u64 {
        self.create_change(kind, summary, Vec::new(), Some(check_name.to_owned()))
    }

    pub(super) fn create_change(
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
            notices::change_spawned(d, id, Timestamp::now());
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
    pub(crate) fn new_done_change(&self, kind: &str, summary: &str) -> u64 {
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
    pub(crate) fn add_task(
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
            // A task added is no change-update of its own, as in Pebble: its first status
            // change is.
            d.dirty.touch(change_id);
            id
        })
    }

    /// The token cancelled when `change_id` is aborted.
    pub(crate) fn abort_token(&self, change_id: u64) -> CancellationToken {
        self.inner
            .abort_tokens
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(change_id)
            .or_default()
            .clone()
    }

    /// Ends a stopped task as Pebble's task runner ends an aborted task that has no undo
    /// handler: Abort (if it was still running), Undo, then Done, each a status its change
    /// passes through and records.
    pub(crate) fn end_stopped_task(&self, task_id: u64) {
        if self.task_status(task_id) == Some(TaskStatus::Doing) {
            self.set_task_status(task_id, TaskStatus::Abort);
        }
        if self.task_status(task_id) == Some(TaskStatus::Abort) {
            self.set_task_status(task_id, TaskStatus::Undo);
        }
        if self
            .task_status(task_id)
            .is_some_and(|status| !status.is_ready())
        {
            self.set_task_status(task_id, TaskStatus::Done);
        }
    }

    /// Sets a task's status, stamping ready times of the task and, if it became ready, its change.
    pub(crate) fn set_task_status(&self, task_id: u64, status: TaskStatus) {
        self.mutate(|d| {
            let Some(task) = d.tasks.get_mut(&task_id) else {
                return;
            };
            if status == TaskStatus::Error && task.status == TaskStatus::Doing {
                // Pebble's task runner aborts a failing task's lanes before it marks the task
                // in error, so its change passes through Abort on the way, and records it.
                task.status = TaskStatus::Abort;
                let change_id = task.change_id;
                notices::observe_change(d, change_id, Timestamp::now());
            }
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

    pub(super) fn forget_token_if_ready(&self, task_id: u64) {
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
    pub(crate) fn task_info(&self, task_id: u64, message: &str) {
        self.task_log(task_id, "INFO", message);
    }

    /// Fails a task as Pebble's task runner fails one: the error in the task's log, the
    /// task in `Error`, and the error in the daemon's log as well
    /// (`Change 3 task (Start service "web") failed: ...`), where operators read it.
    pub(crate) fn fail_task(&self, task_id: u64, error: &str) {
        self.task_error(task_id, error);
        self.set_task_status(task_id, TaskStatus::Error);
        let task = {
            let d = self.lock();
            d.tasks
                .get(&task_id)
                .map(|t| (t.change_id, t.summary.clone()))
        };
        if let Some((change_id, summary)) = task {
            tracing::info!("Change {change_id} task ({summary}) failed: {error}");
        }
    }

    /// Appends an ERROR entry to a task's log; these make up the change's `err`.
    pub(crate) fn task_error(&self, task_id: u64, message: &str) {
        self.task_log(task_id, "ERROR", message);
    }

    pub(super) fn task_log(&self, task_id: u64, level: &str, message: &str) {
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
    pub(crate) fn task_status(&self, task_id: u64) -> Option<TaskStatus> {
        self.lock().tasks.get(&task_id).map(|t| t.status)
    }

    /// Sets one entry of a task's `data`.
    pub(crate) fn set_task_data(&self, task_id: u64, key: &str, value: serde_json::Value) {
        self.mutate(|d| {
            if let Some(task) = d.tasks.get_mut(&task_id) {
                task.data.insert(key.to_owned(), value);
                let change_id = task.change_id;
                d.dirty.touch(change_id);
            }
        });
    }

    /// A task's kind and the change it belongs to.
    pub(crate) fn task_kind(&self, task_id: u64) -> Option<(String, u64)> {
        self.lock()
            .tasks
            .get(&task_id)
            .map(|t| (t.kind.clone(), t.change_id))
    }

    /// A change as the API shows it.
    pub(crate) fn change_info(&self, change_id: u64) -> Option<ChangeInfo> {
        let d = self.lock();
        d.changes.get(&change_id).map(|c| render_change(&d, c))
    }

    /// Parses an API change ID and returns the change.
    pub(super) fn change_info_str(&self, id: &str) -> Result<ChangeInfo, StateError> {
        id.parse::<u64>()
            .ok()
            .and_then(|n| self.change_info(n))
            .ok_or_else(|| StateError::NoSuchChange(id.to_owned()))
    }

    /// Lists changes, newest last.
    #[cfg(test)]
    pub(crate) fn changes(&self, select: Select, for_service: Option<&str>) -> Vec<ChangeInfo> {
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
    pub(super) fn changes_listing(
        &self,
        select: Select,
        for_service: Option<&str>,
    ) -> ChangesListing<'_> {
        ChangesListing {
            data: self.lock(),
            select,
            for_service: for_service.map(str::to_owned),
        }
    }

    /// The changes not ready yet: their IDs, kinds and summaries, oldest first.
    pub(crate) fn in_progress(&self) -> Vec<(u64, String, String)> {
        let d = self.lock();
        listed(&d, Select::InProgress, None)
            .map(|c| (c.id, c.kind.clone(), c.summary.clone()))
            .collect()
    }

    /// Whether a change is ready (None if unknown).
    pub(crate) fn is_ready(&self, change_id: u64) -> Option<bool> {
        let d = self.lock();
        d.changes
            .get(&change_id)
            .map(|c| change_status(&d, c).is_ready())
    }

    /// Waits until a change is ready (returns at once for an unknown change).
    pub(crate) async fn wait_ready(&self, change_id: u64) {
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
    #[cfg(test)]
    pub(crate) fn abort(&self, change_id: u64) -> Result<ChangeInfo, StateError> {
        self.mark_aborted(change_id)?;
        self.abort_token(change_id).cancel();
        Ok(self.change_info(change_id).expect("change exists"))
    }

    /// The record of an abort, without telling the runners: pending tasks are held and
    /// running ones marked aborting. Returns the tasks it changed, with the status each had.
    fn mark_aborted(&self, change_id: u64) -> Result<Vec<(u64, TaskStatus)>, StateError> {
        self.mutate(|d| {
            let Some(change) = d.changes.get(&change_id) else {
                return Err(StateError::NoSuchChange(change_id.to_string()));
            };
            if change_status(d, change).is_ready() {
                return Err(StateError::NothingPending(change_id));
            }
            let mut marked = Vec::new();
            for id in change.task_ids.clone() {
                if let Some(task) = d.tasks.get_mut(&id) {
                    let was = task.status;
                    match was {
                        TaskStatus::Do => {
                            task.status = TaskStatus::Hold;
                            task.ready_time = Some(Timestamp::now());
                        }
                        TaskStatus::Doing => task.status = TaskStatus::Abort,
                        _ => continue,
                    }
                    marked.push((id, was));
                }
            }
            refresh_ready_time(d, change_id);
            notices::observe_change(d, change_id, Timestamp::now());
            d.dirty.touch(change_id);
            Ok(marked)
        })
    }

    /// Takes back an abort the disk refused: each task [`StateStore::mark_aborted`] changed
    /// and nothing changed since gets the status it had.
    fn unmark_aborted(&self, change_id: u64, marked: &[(u64, TaskStatus)]) {
        self.mutate(|d| {
            for &(id, was) in marked {
                if let Some(task) = d.tasks.get_mut(&id) {
                    match (task.status, was) {
                        (TaskStatus::Hold, TaskStatus::Do) => {
                            task.status = TaskStatus::Do;
                            task.ready_time = None;
                        }
                        (TaskStatus::Abort, TaskStatus::Doing) => task.status = TaskStatus::Doing,
                        _ => {}
                    }
                }
            }
            refresh_ready_time(d, change_id);
            notices::observe_change(d, change_id, Timestamp::now());
            d.dirty.touch(change_id);
        });
    }

    /// Drops old ready changes and aborts ancient unfinished ones.
    pub(crate) fn prune(&self, now: Timestamp) {
        self.mutate(|d| prune(d, now));
    }

    /// Records an occurrence of a notice of the daemon's own (a warning); returns its ID.
    /// Nobody is told the ID, so it is not waited for: the API can only add a notice with
    /// [`StateStore::add_notice_recorded`].
    pub(super) fn add_notice(&self, occurrence: Occurrence) -> u64 {
        let warning = occurrence.kind == NoticeType::Warning;
        self.mutate(|d| {
            let (id, _) = notices::add(d, occurrence, Timestamp::now());
            if warning && let Some(notice) = d.notices.get(&id) {
                self.inner.latest_warning.note(notice.last_repeated);
            }
            id
        })
    }

    /// Records a warning for the user (Pebble's `Warnf`): a public `warning` notice whose key
    /// is the message, repeating at most once a day. `cobble warnings` lists it.
    pub(crate) fn add_warning(&self, message: &str) -> u64 {
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
    pub(crate) async fn add_notice_recorded(
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
    pub(crate) fn discard_change(&self, change_id: u64) {
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
    pub(super) fn notices(&self, filter: &NoticeFilter) -> Vec<Notice> {
        notices::list(&self.lock(), filter, Timestamp::now())
    }

    /// A live notice by ID.
    pub(super) fn notice(&self, id: u64) -> Option<Notice> {
        notices::get(&self.lock(), id, Timestamp::now())
    }

    /// Waits until some notice matches `filter`, then returns the matching ones. Returns at
    /// once if some already match. Wakes only when a notice is added or repeated, and
    /// answers only with notices as the state file holds them: an answer tells a client of
    /// a notice as surely as the answer to its `notify` does, so it never comes first. The
    /// caller bounds the wait with its timeout. A notice and what it names (a change's ID)
    /// are recorded together, so what it returns shows only IDs in the state file.
    pub(crate) async fn wait_notices(&self, filter: &NoticeFilter) -> Vec<Notice> {
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

/// What a write of `d` makes durable.
pub(super) fn covers(d: &StateData) -> Durable {
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
