//! The state journal: what changed since the last full write of the state file.
//!
//! Rewriting the whole state costs in proportion to it (up to a thousand ready changes, half
//! a megabyte), and a request that is answered only once its change is on disk would pay that
//! every time. So between full writes (checkpoints) the persister appends one record per batch
//! to `<state file>.journal` and flushes it with `fdatasync`: the changes touched since the
//! last write, whole and with their tasks, the changes removed, and the last IDs. A record
//! costs in proportion to what the batch touched. Notices added, repeated or pruned are
//! recorded the same way, and the identities, which are few, whole when they changed.
//!
//! A checkpoint writes the full state under a new generation, then starts a fresh journal
//! whose first line names that generation. At load, the journal is replayed over the state
//! file only when the generations match: a journal of an older generation was superseded by
//! the checkpoint that a crash interrupted before the fresh journal existed, and everything in
//! it is in the state file already. A line that does not end the file with a newline, or that
//! does not parse, was torn by a crash before its flush returned, so nobody was told about
//! what it holds: replay stops there. A daemon never appends after a torn line, because its
//! first write is always a checkpoint.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::notices::Notice;
use super::{Change, StateData, Task};
use crate::identities::Identity;

/// What was touched since the last write; what the next record holds.
#[derive(Debug, Default)]
pub struct Dirty {
    changes: BTreeSet<u64>,
    notices: BTreeSet<u64>,
    identities: bool,
}

impl Dirty {
    /// Notes that change `id` (or one of its tasks) was created, changed or removed.
    pub fn touch(&mut self, id: u64) {
        self.changes.insert(id);
    }

    /// Notes that notice `id` was added, repeated or removed.
    pub fn touch_notice(&mut self, id: u64) {
        self.notices.insert(id);
    }

    /// Notes that the identities changed; a record then holds all of them (they are few).
    pub fn touch_identities(&mut self) {
        self.identities = true;
    }

    pub fn clear(&mut self) {
        *self = Dirty::default();
    }

    fn is_empty(&self) -> bool {
        self.changes.is_empty() && self.notices.is_empty() && !self.identities
    }
}

/// Where the journal of the state file `state` lives.
pub fn path_for(state: &Path) -> PathBuf {
    let mut name = state.file_name().unwrap_or_default().to_owned();
    name.push(".journal");
    state.with_file_name(name)
}

#[derive(Serialize, Deserialize)]
struct Header {
    generation: u64,
}

/// The first line of the journal that continues the state file of `generation`.
pub fn header(generation: u64) -> Vec<u8> {
    line(&Header { generation })
}

#[derive(Serialize)]
struct RecordOut<'a> {
    last_change_id: u64,
    last_task_id: u64,
    changes: Vec<EntryOut<'a>>,
    removed: Vec<u64>,
    #[serde(skip_serializing_if = "is_zero")]
    last_notice_id: u64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    notices: Vec<&'a Notice>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    removed_notices: Vec<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    identities: Option<&'a BTreeMap<String, Identity>>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

#[derive(Serialize)]
struct EntryOut<'a> {
    change: &'a Change,
    tasks: Vec<&'a Task>,
}

#[derive(Deserialize)]
struct Record {
    last_change_id: u64,
    last_task_id: u64,
    #[serde(default)]
    changes: Vec<Entry>,
    #[serde(default)]
    removed: Vec<u64>,
    #[serde(default)]
    last_notice_id: u64,
    #[serde(default)]
    notices: Vec<Notice>,
    #[serde(default)]
    removed_notices: Vec<u64>,
    /// All the identities, when they changed.
    #[serde(default)]
    identities: Option<BTreeMap<String, Identity>>,
}

#[derive(Deserialize)]
struct Entry {
    change: Change,
    tasks: Vec<Task>,
}

/// The record of what changed since the last write, newline included, and forgets it; None
/// when nothing did.
pub fn take_record(d: &mut StateData) -> Option<Vec<u8>> {
    if d.dirty.is_empty() {
        return None;
    }
    let dirty = std::mem::take(&mut d.dirty);
    let mut record = RecordOut {
        last_change_id: d.last_change_id,
        last_task_id: d.last_task_id,
        changes: Vec::new(),
        removed: Vec::new(),
        last_notice_id: d.last_notice_id,
        notices: Vec::new(),
        removed_notices: Vec::new(),
        identities: dirty.identities.then_some(&d.identities),
    };
    for id in dirty.notices {
        match d.notices.get(&id) {
            Some(notice) => record.notices.push(notice),
            None => record.removed_notices.push(id),
        }
    }
    for id in dirty.changes {
        match d.changes.get(&id) {
            Some(change) => record.changes.push(EntryOut {
                change,
                tasks: change
                    .task_ids
                    .iter()
                    .filter_map(|t| d.tasks.get(t))
                    .collect(),
            }),
            None => record.removed.push(id),
        }
    }
    Some(line(&record))
}

fn line(value: &impl Serialize) -> Vec<u8> {
    let mut bytes = serde_json::to_vec(value).expect("journal records serialise");
    bytes.push(b'\n');
    bytes
}

/// Applies the journal `bytes` to `d`, loaded from the state file, if it continues it.
pub fn replay(d: &mut StateData, bytes: &[u8]) {
    let mut lines = bytes.split_inclusive(|&b| b == b'\n');
    let continues = lines
        .next()
        .and_then(complete)
        .and_then(|l| serde_json::from_slice::<Header>(l).ok())
        .is_some_and(|h| h.generation == d.generation);
    if !continues {
        return;
    }
    for l in lines {
        let Some(record) = complete(l).and_then(|l| serde_json::from_slice::<Record>(l).ok())
        else {
            break;
        };
        apply(d, record);
    }
}

/// A line without its newline, if it has one.
fn complete(line: &[u8]) -> Option<&[u8]> {
    line.strip_suffix(b"\n")
}

fn apply(d: &mut StateData, record: Record) {
    d.last_change_id = d.last_change_id.max(record.last_change_id);
    d.last_task_id = d.last_task_id.max(record.last_task_id);
    d.last_notice_id = d.last_notice_id.max(record.last_notice_id);
    for id in record.removed_notices {
        d.notices.remove(&id);
    }
    for notice in record.notices {
        d.notices.insert(notice.id, notice);
    }
    if let Some(identities) = record.identities {
        d.identities = identities;
    }
    for id in record.removed {
        if let Some(change) = d.changes.remove(&id) {
            for task in change.task_ids {
                d.tasks.remove(&task);
            }
        }
    }
    for entry in record.changes {
        if let Some(old) = d.changes.get(&entry.change.id) {
            for task in &old.task_ids {
                d.tasks.remove(task);
            }
        }
        for task in entry.tasks {
            d.tasks.insert(task.id, task);
        }
        d.changes.insert(entry.change.id, entry.change);
    }
}
