//! The state as the API shows it: changes and tasks in Pebble's wire shape, and the changes
//! listing, rendered one change at a time as it is serialised.

use std::sync::MutexGuard;

use cobble_client::time::format_rfc3339_nano;
use cobble_client::types::{ChangeInfo, TaskInfo, TaskProgress};
use serde::Serialize;

use super::*;

/// The changes `select` and `for_service` pick, newest last.
pub(super) fn listed<'a>(
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
pub(crate) struct ChangesListing<'a> {
    pub(super) data: MutexGuard<'a, StateData>,
    pub(super) select: Select,
    pub(super) for_service: Option<String>,
}

impl Serialize for ChangesListing<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let d = &*self.data;
        serializer.collect_seq(
            listed(d, self.select, self.for_service.as_deref()).map(|c| render_change(d, c)),
        )
    }
}

/// The `err` text of a change: one line per ERROR task-log entry.
pub(super) fn change_err(d: &StateData, change: &Change) -> String {
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
pub(super) fn log_message<'a>(entry: &'a str, level: &str) -> Option<&'a str> {
    let (_, rest) = entry.split_once(' ')?;
    rest.strip_prefix(level)?.strip_prefix(' ')
}

pub(super) fn render_change(d: &StateData, c: &Change) -> ChangeInfo {
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

pub(super) fn render_task(t: &Task) -> TaskInfo {
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
