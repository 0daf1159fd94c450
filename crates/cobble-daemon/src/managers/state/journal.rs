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
//! The journal is cobble's own file; Pebble never reads it. Every line is framed as
//! `<crc32, 8 hex digits> <sequence number> <JSON>\n`, the checksum taken over what follows
//! it. The first line (sequence 0) is the header: the generation of the checkpoint the
//! journal continues, and a description of that checkpoint (its length and checksum, how
//! many changes, notices and identities it held, its last IDs). The state file names its
//! generation too (`data.cobble-generation`, see [`super::format`]). So at load:
//!
//! - the journal is replayed over the state file when both name the same generation and
//!   the file is still the bytes the header describes;
//! - a journal of an older generation was superseded by a checkpoint that a crash
//!   interrupted before it removed the journal: everything in it is in the state file;
//! - the same generation but other bytes means another program (Pebble, after a rollback)
//!   rewrote the state file after cobble stopped: the state file is newer, the journal is
//!   not used, and the log says what it held;
//! - a state file that is missing, empty or unreadable while the header describes what it
//!   held is known to have lost that much, and a journal line that is complete but fails
//!   its checksum or its sequence is damage: see [`super::persist::load`] for what the daemon
//!   then does;
//! - a last line without its newline was torn by a crash before its flush returned, so
//!   nobody was told about what it holds: replay stops there, and the log says so. A daemon
//!   never appends after a torn line, because its first write is always a checkpoint.
//!
//! What the framing cannot see is a journal cut exactly at a line's end: it reads as a
//! shorter journal. Journals of earlier cobble releases (unframed lines, a header with the
//! generation alone) are still replayed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::notices::Notice;
use super::{Change, StateData, Task};
use crate::identities::Identity;

/// What was touched since the last write; what the next record holds.
#[derive(Debug, Default)]
pub(super) struct Dirty {
    changes: BTreeSet<u64>,
    notices: BTreeSet<u64>,
    identities: bool,
}

impl Dirty {
    /// Notes that change `id` (or one of its tasks) was created, changed or removed.
    pub(super) fn touch(&mut self, id: u64) {
        self.changes.insert(id);
    }

    /// Notes that notice `id` was added, repeated or removed.
    pub(super) fn touch_notice(&mut self, id: u64) {
        self.notices.insert(id);
    }

    /// Notes that the identities changed; a record then holds all of them (they are few).
    pub(super) fn touch_identities(&mut self) {
        self.identities = true;
    }

    pub(super) fn clear(&mut self) {
        *self = Dirty::default();
    }

    fn is_empty(&self) -> bool {
        self.changes.is_empty() && self.notices.is_empty() && !self.identities
    }
}

/// Where the journal of the state file `state` lives.
pub(super) fn path_for(state: &Path) -> PathBuf {
    let mut name = state.file_name().unwrap_or_default().to_owned();
    name.push(".journal");
    state.with_file_name(name)
}

/// The checkpoint a journal continues, as its header describes it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(super) struct Base {
    /// The state file's length and checksum.
    pub len: u64,
    pub crc: u32,
    pub changes: usize,
    pub notices: usize,
    pub identities: usize,
    pub last_change_id: u64,
    pub last_task_id: u64,
    pub last_notice_id: u64,
}

impl Base {
    /// What a checkpoint of `d` holds (its bytes' length and checksum are added when they
    /// are known).
    pub(super) fn of(d: &StateData) -> Base {
        Base {
            changes: d.changes.len(),
            notices: d.notices.len(),
            identities: d.identities.len(),
            last_change_id: d.last_change_id,
            last_task_id: d.last_task_id,
            last_notice_id: d.last_notice_id,
            ..Base::default()
        }
    }

    /// Whether losing it loses something a client was told.
    pub(super) fn holds_something(&self) -> bool {
        self.changes + self.notices + self.identities > 0
    }

    /// "3 changes, 1 notice and 2 identities".
    pub(super) fn describe(&self) -> String {
        let n = |count: usize, one: &str, many: &str| {
            format!("{count} {}", if count == 1 { one } else { many })
        };
        format!(
            "{}, {} and {}",
            n(self.changes, "change", "changes"),
            n(self.notices, "notice", "notices"),
            n(self.identities, "identity", "identities")
        )
    }
}

/// The header of a journal of this format.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Header {
    /// This format's number, 2.
    pub journal: u32,
    pub generation: u64,
    pub base: Base,
}

/// The header of an earlier cobble's journal.
#[derive(Deserialize)]
struct OldHeader {
    generation: u64,
}

/// The first line of the journal that continues the checkpoint `base` of `generation`.
pub(super) fn header(generation: u64, base: Base) -> Vec<u8> {
    let header = Header {
        journal: 2,
        generation,
        base,
    };
    frame(0, &serde_json::to_vec(&header).expect("headers serialise"))
}

/// One line: checksum, sequence number and JSON.
pub(super) fn frame(seq: u64, json: &[u8]) -> Vec<u8> {
    let mut body = format!("{seq} ").into_bytes();
    body.extend_from_slice(json);
    let mut line = format!("{:08x} ", crc32(&body)).into_bytes();
    line.extend_from_slice(&body);
    line.push(b'\n');
    line
}

/// A framed line's sequence number and JSON, if its checksum holds.
fn unframe(line: &[u8]) -> Option<(u64, &[u8])> {
    let (crc, body) = split_at_space(line)?;
    let crc = u32::from_str_radix(std::str::from_utf8(crc).ok()?, 16).ok()?;
    if crc32(body) != crc {
        return None;
    }
    let (seq, json) = split_at_space(body)?;
    Some((std::str::from_utf8(seq).ok()?.parse().ok()?, json))
}

fn split_at_space(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let at = bytes.iter().position(|&b| b == b' ')?;
    Some((&bytes[..at], &bytes[at + 1..]))
}

/// CRC-32 (IEEE 802.3, as zlib computes it).
pub(super) fn crc32(bytes: &[u8]) -> u32 {
    const TABLE: [u32; 256] = {
        let mut table = [0u32; 256];
        let mut i = 0;
        while i < 256 {
            let mut c = i as u32;
            let mut k = 0;
            while k < 8 {
                c = if c & 1 != 0 {
                    0xEDB8_8320 ^ (c >> 1)
                } else {
                    c >> 1
                };
                k += 1;
            }
            table[i] = c;
            i += 1;
        }
        table
    };
    let mut crc = !0u32;
    for &b in bytes {
        crc = TABLE[((crc ^ b as u32) & 0xff) as usize] ^ (crc >> 8);
    }
    !crc
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

/// The record of what changed since the last write, framed as line `seq`, and forgets it;
/// None when nothing did.
pub(super) fn take_record(d: &mut StateData, seq: u64) -> Option<Vec<u8>> {
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
    Some(frame(
        seq,
        &serde_json::to_vec(&record).expect("journal records serialise"),
    ))
}

/// What the first line of a journal says.
#[derive(Debug)]
pub(super) enum Opening {
    /// The file is empty: nothing was ever appended.
    Empty,
    /// The first line has no newline: a crash cut the first write short, before anyone
    /// was told of what it held.
    Torn,
    /// The first line is complete but does not read: damage.
    Damaged,
    /// A journal of an earlier cobble, continuing `generation`.
    Old(u64),
    /// This format's header.
    Header(Header),
}

/// Reads the first line of journal `bytes`.
pub(super) fn open(bytes: &[u8]) -> Opening {
    let Some(first) = bytes.split_inclusive(|&b| b == b'\n').next() else {
        return Opening::Empty;
    };
    let Some(line) = complete(first) else {
        return Opening::Torn;
    };
    if line.first() == Some(&b'{') {
        return match serde_json::from_slice::<OldHeader>(line) {
            Ok(h) => Opening::Old(h.generation),
            Err(_) => Opening::Damaged,
        };
    }
    match unframe(line)
        .and_then(|(seq, json)| (seq == 0).then(|| serde_json::from_slice::<Header>(json).ok())?)
    {
        Some(header) => Opening::Header(header),
        None => Opening::Damaged,
    }
}

/// What a replay used.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Replayed {
    /// Records applied.
    pub records: usize,
    /// Where a last line cut short by a crash begins, and its length.
    pub torn: Option<(usize, usize)>,
}

/// A complete line that fails its checksum, its sequence or its shape.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Damage {
    /// Which record (1 for the first after the header).
    pub record: usize,
    /// Where it begins, so that the journal can be cut there.
    pub offset: usize,
    /// How many bytes from there on cannot be used.
    pub rest: usize,
}

/// Applies the records of journal `bytes` (whose header [`open`] read) to `d`.
pub(super) fn replay(d: &mut StateData, bytes: &[u8]) -> Result<Replayed, Damage> {
    let old = bytes.first() == Some(&b'{');
    let mut lines = bytes.split_inclusive(|&b| b == b'\n');
    let mut offset = lines.next().map_or(0, <[u8]>::len);
    let mut replayed = Replayed::default();
    for l in lines {
        let Some(line) = complete(l) else {
            replayed.torn = Some((offset, l.len()));
            break;
        };
        let damage = Damage {
            record: replayed.records + 1,
            offset,
            rest: bytes.len() - offset,
        };
        let json = if old {
            line
        } else {
            match unframe(line) {
                Some((seq, json)) if seq == replayed.records as u64 + 1 => json,
                _ => return Err(damage),
            }
        };
        let Ok(record) = serde_json::from_slice::<Record>(json) else {
            if old {
                // An earlier cobble's journal has no checksums to tell a tear from damage.
                break;
            }
            return Err(damage);
        };
        apply(d, record);
        replayed.records += 1;
        offset += l.len();
    }
    Ok(replayed)
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
