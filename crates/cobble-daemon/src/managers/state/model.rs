//! The state's data: changes, tasks and what else the state file holds, and the rules that
//! only read or change that data (a change's derived status, closing what a previous daemon
//! left unfinished, pruning). Nothing here locks, waits or writes.

use std::collections::BTreeMap;
use std::time::Duration;

use cobble_client::time::format_rfc3339_secs;
use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use super::*;

/// At most this many log entries are kept per task; older ones are dropped.
pub(crate) const MAX_TASK_LOG: usize = 10;

/// Ready changes older than this are pruned.
pub(crate) const READY_CHANGE_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

/// Changes still not ready after this long are aborted.
pub(crate) const ABORT_TTL: Duration = Duration::from_secs(14 * 24 * 3600);

/// At most this many ready changes are kept.
pub(crate) const MAX_READY_CHANGES: usize = 1000;

/// How far past [`MAX_READY_CHANGES`] the history may grow before a new change prunes it,
/// so that pruning (a sort of every change) runs once per this many changes, not each time.
pub(super) const PRUNE_SLACK: usize = 100;

/// Kinds of change that may legitimately stay unfinished for ever; never aborted by age.
pub(crate) const LONG_LIVED_KINDS: [&str; 2] = ["perform-check", "recover-check"];

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
pub(crate) enum Select {
    InProgress,
    Ready,
    All,
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
    pub(super) version: u64,
    /// Which journal continues this state (see [`journal`]).
    #[serde(default)]
    pub generation: u64,
    /// What the state file held that cobble does not use; never part of a journal record.
    #[serde(skip)]
    pub carried: CarriedState,
    /// Changes touched since the persister last wrote; never part of the file.
    #[serde(skip)]
    pub(super) dirty: journal::Dirty,
}

/// Closes changes a previous daemon left unfinished: a task that was running is treated as
/// done (its process, if any, did not survive the daemon), tasks not yet begun are held;
/// but for the tasks `keep`, which a re-executed daemon's predecessor handed over running.
pub(super) fn close_unfinished(d: &mut StateData, keep: &[u64]) {
    let now = Timestamp::now();
    let mut touched = Vec::new();
    for task in d.tasks.values_mut() {
        if keep.contains(&task.id) {
            continue;
        }
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

pub(super) fn refresh_ready_time(d: &mut StateData, change_id: u64) {
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
pub(crate) fn change_status(d: &StateData, change: &Change) -> TaskStatus {
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

pub(super) fn prune(d: &mut StateData, now: Timestamp) {
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
