//! The state file in Pebble's own shape, so that Pebble and cobble can take over each
//! other's `$PEBBLE`.
//!
//! `.pebble.state` is one JSON object, as Pebble (v1.7 to v1.32) writes it:
//!
//! ```text
//! { "data":    { "identities": {...}, "patch-level": 2, "patch-sublevel": 0, ... },
//!   "changes": { "<id>": { "id", "kind", "summary", "status", "data", "task-ids",
//!                          "spawn-time", "ready-time", "last-recorded-notice-status" } },
//!   "tasks":   { "<id>": { "id", "kind", "summary", "status", "data", "log", "change",
//!                          "spawn-time", "ready-time", ... } },
//!   "notices": [ { "id", "user-id", "type", "key", "first-occurred", "last-occurred",
//!                  "last-repeated", "occurrences", "last-data", "repeat-after",
//!                  "expire-after" } ],
//!   "last-change-id", "last-task-id", "last-lane-id", "last-notice-id" }
//! ```
//!
//! IDs are decimal strings, statuses Pebble's numbers (0 Default ... 10 Wait), times RFC 3339
//! with nanoseconds, a task's `doing-time` nanoseconds, a notice's durations Go duration
//! strings. What cobble keeps in its own fields maps onto Pebble's as Pebble's managers store
//! it: the services of a change are its `data.service-names`, a check change's check name its
//! `data.notice-data.check-name`, a task's API data its `data.api-data`, a start or stop
//! task's service its `data.service-request.Name`, a check task's `data.check-details.name`
//! (Pebble needs it for every unfinished check change it finds). Identities are in
//! `data.identities` (Pebble v1.28 on); a file from an earlier release has them at the top
//! level, where cobble reads them and, for such a file, also writes them back. Pebble v1.7 to
//! v1.15 kept warnings in a top-level `warnings` list: cobble reads them as warning notices.
//!
//! Everything else is carried: unknown top-level fields and `data` entries
//! ([`super::CarriedState`]), unknown fields and data of changes and tasks ([`Carried`]), notices of
//! types cobble does not know, unknown fields of identities. They are written back as they
//! were read, so Pebble finds them again.
//!
//! cobble's own bookkeeping is one `data` entry Pebble ignores and carries:
//! `cobble-generation`, which names the journal that continues the file (see
//! [`super::journal`]).
//!
//! A state file of an earlier cobble (its own shape, `last_change_id` and so on) is read too.
//! Anything else (not JSON, not an object, a Pebble newer than cobble knows) is refused with
//! an error that names the file; nothing is ever read as empty state.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Deserialize, Serialize, Serializer};
use serde_json::{Map, Value};

use super::notices::{Notice, NoticeType};
use super::{Carried, Change, SmallMap, StateData, Task, TaskStatus};
use crate::identities::{Access, Identity};

/// The highest Pebble patch level cobble knows the meaning of (Pebble v1.28 to v1.32 write
/// 2: identities under `data`).
pub(crate) const PATCH_LEVEL: u64 = 2;

/// The `data` entry holding cobble's journal generation.
const GENERATION_KEY: &str = "cobble-generation";

/// How long a legacy warning is kept when its file does not say (Pebble's default).
const LEGACY_WARNING_EXPIRE: Duration = Duration::from_secs(28 * 24 * 3600);

/// Why a state file's content could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    /// Not JSON, or not the shape of a state file.
    #[error("{0}")]
    Malformed(String),
    /// Written by a Pebble that migrated its state past what cobble knows.
    #[error(
        "written by a newer Pebble (patch level {0}; cobble reads up to {PATCH_LEVEL}): run the \
         release that wrote it, or move the file aside to start without its state"
    )]
    Future(u64),
}

fn malformed(what: impl std::fmt::Display) -> DecodeError {
    DecodeError::Malformed(what.to_string())
}

/// Pebble's number for a status.
pub(crate) fn status_number(status: TaskStatus) -> u64 {
    match status {
        TaskStatus::Default => 0,
        TaskStatus::Hold => 1,
        TaskStatus::Do => 2,
        TaskStatus::Doing => 3,
        TaskStatus::Done => 4,
        TaskStatus::Abort => 5,
        TaskStatus::Undo => 6,
        TaskStatus::Undoing => 7,
        TaskStatus::Undone => 8,
        TaskStatus::Error => 9,
        TaskStatus::Wait => 10,
    }
}

fn status_from_number(n: u64) -> Result<TaskStatus, DecodeError> {
    Ok(match n {
        0 => TaskStatus::Default,
        1 => TaskStatus::Hold,
        2 => TaskStatus::Do,
        3 => TaskStatus::Doing,
        4 => TaskStatus::Done,
        5 => TaskStatus::Abort,
        6 => TaskStatus::Undo,
        7 => TaskStatus::Undoing,
        8 => TaskStatus::Undone,
        9 => TaskStatus::Error,
        10 => TaskStatus::Wait,
        _ => return Err(malformed(format!("unknown status {n}"))),
    })
}

// ---------------------------------------------------------------------------------------
// Writing.

/// The state in Pebble's shape: what a checkpoint writes.
pub(crate) fn encode(d: &StateData) -> Vec<u8> {
    serde_json::to_vec(&StateOut(d)).expect("state serialises")
}

/// A decimal ID as Pebble writes IDs: a JSON string.
struct Id(u64);

impl Serialize for Id {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&self.0)
    }
}

/// IDs as a list of strings.
struct Ids<'a>(&'a [u64]);

impl Serialize for Ids<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(|&id| Id(id)))
    }
}

struct StateOut<'a>(&'a StateData);

impl Serialize for StateOut<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let d = self.0;
        let c = &d.carried;
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("data", &DataOut(d))?;
        map.serialize_entry("changes", &ChangesOut(d))?;
        map.serialize_entry("tasks", &TasksOut(d))?;
        if !d.notices.is_empty() || !c.notices.is_empty() {
            map.serialize_entry("notices", &NoticesOut(d))?;
        }
        if c.legacy_identities && !d.identities.is_empty() {
            map.serialize_entry("identities", &IdentitiesOut(d))?;
        }
        map.serialize_entry("last-change-id", &d.last_change_id)?;
        map.serialize_entry("last-task-id", &d.last_task_id)?;
        if !c.fields.contains_key("last-lane-id") {
            map.serialize_entry("last-lane-id", &0)?;
        }
        map.serialize_entry("last-notice-id", &d.last_notice_id)?;
        for (key, value) in &c.fields {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

struct DataOut<'a>(&'a StateData);

impl Serialize for DataOut<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let d = self.0;
        let carried = &d.carried.data;
        let mut map = s.serialize_map(None)?;
        if !d.identities.is_empty() {
            map.serialize_entry("identities", &IdentitiesOut(d))?;
        }
        // A state cobble made itself is at Pebble v1.32's level, so that release takes
        // it as its own.
        if !carried.contains_key("patch-level") {
            map.serialize_entry("patch-level", &PATCH_LEVEL)?;
            map.serialize_entry("patch-sublevel", &0)?;
        }
        for (key, value) in carried {
            map.serialize_entry(key, value)?;
        }
        map.serialize_entry(GENERATION_KEY, &d.generation)?;
        map.end()
    }
}

struct IdentitiesOut<'a>(&'a StateData);

impl Serialize for IdentitiesOut<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let d = self.0;
        let mut map = s.serialize_map(Some(d.identities.len()))?;
        for (name, identity) in &d.identities {
            let extra = d.carried.identities.get(name);
            map.serialize_entry(name, &IdentityOut { identity, extra })?;
        }
        map.end()
    }
}

struct IdentityOut<'a> {
    identity: &'a Identity,
    extra: Option<&'a Map<String, Value>>,
}

impl Serialize for IdentityOut<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let i = self.identity;
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("access", i.access.as_str())?;
        if let Some(uid) = i.local {
            map.serialize_entry("local", &serde_json::json!({ "user-id": uid }))?;
        }
        if let Some(hash) = &i.basic {
            map.serialize_entry("basic", &serde_json::json!({ "password": hash }))?;
        }
        if let Some(der) = &i.cert {
            let pem = crate::identities::der_to_pem(der);
            map.serialize_entry("cert", &serde_json::json!({ "pem": pem }))?;
        }
        for (key, value) in self.extra.into_iter().flatten() {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

struct ChangesOut<'a>(&'a StateData);

impl Serialize for ChangesOut<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let changes = &self.0.changes;
        let mut map = s.serialize_map(Some(changes.len()))?;
        for (id, change) in changes {
            map.serialize_entry(&Id(*id), &ChangeOut(change))?;
        }
        map.end()
    }
}

struct ChangeOut<'a>(&'a Change);

impl Serialize for ChangeOut<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let c = self.0;
        let carried = c.carried.as_deref();
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("id", &Id(c.id))?;
        map.serialize_entry("kind", &c.kind)?;
        map.serialize_entry("summary", &c.summary)?;
        // A change with tasks has its status from them (Pebble's Default); one without
        // says it, Hold being what Default means there.
        let status = match carried.and_then(|k| k.fields.get("status")) {
            Some(status) => status.clone(),
            None if c.task_ids.is_empty() && c.status_without_tasks != TaskStatus::Hold => {
                status_number(c.status_without_tasks).into()
            }
            None => 0.into(),
        };
        map.serialize_entry("status", &status)?;
        let data = ChangeDataOut(c);
        if !data.is_empty() {
            map.serialize_entry("data", &data)?;
        }
        if !c.task_ids.is_empty() {
            map.serialize_entry("task-ids", &Ids(&c.task_ids))?;
        }
        map.serialize_entry("spawn-time", &c.spawn_time)?;
        if let Some(ready) = &c.ready_time {
            map.serialize_entry("ready-time", ready)?;
        }
        if let Some(status) = c.last_notice_status.filter(|s| *s != TaskStatus::Default) {
            map.serialize_entry("last-recorded-notice-status", &status_number(status))?;
        }
        for (key, value) in carried.into_iter().flat_map(|k| &k.fields) {
            if key != "status" {
                map.serialize_entry(key, value)?;
            }
        }
        map.end()
    }
}

struct ChangeDataOut<'a>(&'a Change);

impl ChangeDataOut<'_> {
    fn carried(&self) -> Option<&Map<String, Value>> {
        self.0.carried.as_deref().map(|k| &k.data)
    }

    fn is_empty(&self) -> bool {
        let c = self.0;
        c.service_names.is_empty()
            && c.check_name.is_none()
            && self.carried().is_none_or(Map::is_empty)
    }
}

impl Serialize for ChangeDataOut<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let c = self.0;
        let carried = self.carried();
        let mut map = s.serialize_map(None)?;
        if !c.service_names.is_empty() {
            map.serialize_entry("service-names", &c.service_names)?;
        }
        if let Some(check) = &c.check_name
            && carried.is_none_or(|d| !d.contains_key("notice-data"))
        {
            map.serialize_entry("notice-data", &serde_json::json!({ "check-name": check }))?;
        }
        for (key, value) in carried.into_iter().flatten() {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

struct TasksOut<'a>(&'a StateData);

impl Serialize for TasksOut<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let d = self.0;
        let mut map = s.serialize_map(Some(d.tasks.len()))?;
        for (id, task) in &d.tasks {
            let check = d
                .changes
                .get(&task.change_id)
                .and_then(|c| c.check_name.as_deref());
            map.serialize_entry(&Id(*id), &TaskOut { task, check })?;
        }
        map.end()
    }
}

struct TaskOut<'a> {
    task: &'a Task,
    /// The check of the change it belongs to, if any.
    check: Option<&'a str>,
}

impl Serialize for TaskOut<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let t = self.task;
        let carried = t.carried.as_deref();
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("id", &Id(t.id))?;
        map.serialize_entry("kind", &t.kind)?;
        map.serialize_entry("summary", &t.summary)?;
        map.serialize_entry("status", &status_number(t.status))?;
        let data = TaskDataOut {
            task: t,
            check: self.check,
        };
        if !data.is_empty() {
            map.serialize_entry("data", &data)?;
        }
        if !t.log.is_empty() {
            map.serialize_entry("log", &t.log)?;
        }
        map.serialize_entry("change", &Id(t.change_id))?;
        map.serialize_entry("spawn-time", &t.spawn_time)?;
        if let Some(ready) = &t.ready_time {
            map.serialize_entry("ready-time", ready)?;
        }
        for (key, value) in carried.into_iter().flat_map(|k| &k.fields) {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

struct TaskDataOut<'a> {
    task: &'a Task,
    check: Option<&'a str>,
}

impl TaskDataOut<'_> {
    fn carried(&self) -> Option<&Map<String, Value>> {
        self.task.carried.as_deref().map(|k| &k.data)
    }

    /// The check details Pebble needs for a check task, unless the file had its own.
    fn check_details(&self) -> Option<&str> {
        let t = self.task;
        let is_check = t.kind == "perform-check" || t.kind == "recover-check";
        self.check.filter(|_| is_check).filter(|_| {
            self.carried()
                .is_none_or(|d| !d.contains_key("check-details"))
        })
    }

    /// The service request Pebble's start and stop tasks carry.
    fn service(&self) -> Option<&str> {
        let carried = self.carried();
        self.task
            .service
            .as_deref()
            .filter(|_| carried.is_none_or(|d| !d.contains_key("service-request")))
    }

    fn is_empty(&self) -> bool {
        self.task.data.is_empty()
            && self.check_details().is_none()
            && self.service().is_none()
            && self.carried().is_none_or(Map::is_empty)
    }
}

impl Serialize for TaskDataOut<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let t = self.task;
        let mut map = s.serialize_map(None)?;
        if !t.data.is_empty() {
            map.serialize_entry("api-data", &t.data)?;
        }
        if let Some(name) = self.service() {
            map.serialize_entry("service-request", &serde_json::json!({ "Name": name }))?;
        }
        if let Some(check) = self.check_details() {
            let details = serde_json::json!({ "name": check, "failures": 0, "successes": 0 });
            map.serialize_entry("check-details", &details)?;
        }
        for (key, value) in self.carried().into_iter().flatten() {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

struct NoticesOut<'a>(&'a StateData);

impl Serialize for NoticesOut<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let d = self.0;
        let mut seq = s.serialize_seq(Some(d.notices.len() + d.carried.notices.len()))?;
        for notice in d.notices.values() {
            seq.serialize_element(&NoticeOut(notice))?;
        }
        for notice in &d.carried.notices {
            seq.serialize_element(notice)?;
        }
        seq.end()
    }
}

struct NoticeOut<'a>(&'a Notice);

impl Serialize for NoticeOut<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let n = self.0;
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("id", &Id(n.id))?;
        map.serialize_entry("user-id", &n.user_id)?;
        map.serialize_entry("type", n.kind.as_str())?;
        map.serialize_entry("key", &n.key)?;
        map.serialize_entry("first-occurred", &n.first_occurred)?;
        map.serialize_entry("last-occurred", &n.last_occurred)?;
        map.serialize_entry("last-repeated", &n.last_repeated)?;
        map.serialize_entry("occurrences", &n.occurrences)?;
        if !n.last_data.is_empty() {
            map.serialize_entry("last-data", &n.last_data)?;
        }
        if !n.repeat_after.is_zero() {
            map.serialize_entry("repeat-after", &go_duration(n.repeat_after))?;
        }
        if !n.expire_after.is_zero() {
            map.serialize_entry("expire-after", &go_duration(n.expire_after))?;
        }
        map.end()
    }
}

fn go_duration(d: Duration) -> String {
    cobble_plan::format_duration(i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

// ---------------------------------------------------------------------------------------
// Reading.

/// Reads a state file's content: Pebble's shape (any release from v1.7), or an earlier
/// cobble's.
pub(crate) fn decode(bytes: &[u8]) -> Result<StateData, DecodeError> {
    let value: Value = serde_json::from_slice(bytes).map_err(malformed)?;
    let Value::Object(top) = value else {
        return Err(malformed("not a JSON object"));
    };
    if top.contains_key("last_change_id") {
        // An earlier cobble wrote its own shape.
        return serde_json::from_value(Value::Object(top)).map_err(malformed);
    }
    decode_pebble(top)
}

fn decode_pebble(mut top: Map<String, Value>) -> Result<StateData, DecodeError> {
    let mut d = StateData::default();
    let mut data = match top.remove("data") {
        Some(Value::Object(data)) => data,
        None | Some(Value::Null) => Map::new(),
        Some(_) => return Err(malformed("\"data\" is not an object")),
    };
    let level = match data.get("patch-level") {
        None => 0,
        Some(v) => v
            .as_u64()
            .ok_or_else(|| malformed("\"patch-level\" is not a number"))?,
    };
    if level > PATCH_LEVEL {
        return Err(DecodeError::Future(level));
    }
    d.generation = match data.remove(GENERATION_KEY) {
        None => 0,
        Some(v) => v
            .as_u64()
            .ok_or_else(|| malformed(format!("\"{GENERATION_KEY}\" is not a number")))?,
    };
    d.last_change_id = take_id_count(&mut top, "last-change-id")?;
    d.last_task_id = take_id_count(&mut top, "last-task-id")?;
    d.last_notice_id = take_id_count(&mut top, "last-notice-id")?;

    // Identities: under data from Pebble v1.28 on, at the top level before; data wins, as
    // in Pebble's own migration.
    let legacy = top.remove("identities").filter(|v| !v.is_null());
    let identities = match data.remove("identities") {
        Some(v) if !v.is_null() => Some(v),
        _ => {
            if legacy.is_some() {
                d.carried.legacy_identities = true;
            }
            legacy
        }
    };
    if level < PATCH_LEVEL && identities.is_some() {
        d.carried.legacy_identities = true;
    }
    if let Some(identities) = identities {
        decode_identities(&mut d, identities)?;
    }

    let mut tasks = match top.remove("tasks") {
        Some(Value::Object(tasks)) => tasks,
        None | Some(Value::Null) => Map::new(),
        Some(_) => return Err(malformed("\"tasks\" is not an object")),
    };
    match top.remove("changes") {
        Some(Value::Object(changes)) => {
            for (key, value) in changes {
                let change = decode_change(&key, value)?;
                d.changes.insert(change.id, change);
            }
        }
        None | Some(Value::Null) => {}
        Some(_) => return Err(malformed("\"changes\" is not an object")),
    }
    for (key, value) in std::mem::take(&mut tasks) {
        let task = decode_task(&key, value)?;
        // A task of no change is invisible in Pebble too, and pruned there.
        if d.changes.contains_key(&task.change_id) {
            d.tasks.insert(task.id, task);
        }
    }
    // A change lists only tasks that exist (Pebble would fail on one that does not).
    let tasks = &d.tasks;
    for change in d.changes.values_mut() {
        change.task_ids.retain(|id| tasks.contains_key(id));
    }

    match top.remove("notices") {
        Some(Value::Array(notices)) => {
            for value in notices {
                match decode_notice(value)? {
                    Ok(notice) => {
                        d.notices.insert(notice.id, notice);
                    }
                    Err(foreign) => d.carried.notices.push(foreign),
                }
            }
        }
        None | Some(Value::Null) => {}
        Some(_) => return Err(malformed("\"notices\" is not a list")),
    }
    if let Some(warnings) = top.remove("warnings") {
        decode_legacy_warnings(&mut d, warnings)?;
    }
    // What cobble writes by itself when it is missing is not carried: a file cobble wrote
    // reads back as the state it wrote.
    if data.get("patch-level") == Some(&PATCH_LEVEL.into())
        && data.get("patch-sublevel") == Some(&0.into())
    {
        data.remove("patch-level");
        data.remove("patch-sublevel");
    }
    if top.get("last-lane-id") == Some(&0.into()) {
        top.remove("last-lane-id");
    }
    for task in d.tasks.values_mut() {
        let check = d
            .changes
            .get(&task.change_id)
            .and_then(|c| c.check_name.as_deref());
        if let (Some(check), Some(carried)) = (check, task.carried.as_deref_mut()) {
            let default = serde_json::json!({ "name": check, "failures": 0, "successes": 0 });
            if carried.data.get("check-details") == Some(&default) {
                carried.data.remove("check-details");
            }
        }
        if task
            .carried
            .as_deref()
            .is_some_and(|k| k.fields.is_empty() && k.data.is_empty())
        {
            task.carried = None;
        }
    }
    d.carried.data = data;
    d.carried.fields = top;
    Ok(d)
}

fn take_id_count(top: &mut Map<String, Value>, key: &str) -> Result<u64, DecodeError> {
    match top.remove(key) {
        None | Some(Value::Null) => Ok(0),
        Some(v) => v
            .as_u64()
            .ok_or_else(|| malformed(format!("\"{key}\" is not a number"))),
    }
}

fn parse_id(what: &str, id: &str) -> Result<u64, DecodeError> {
    id.parse()
        .map_err(|_| malformed(format!("{what} ID {id:?} is not a number")))
}

fn take<T: serde::de::DeserializeOwned>(
    map: &mut Map<String, Value>,
    key: &str,
    what: &str,
) -> Result<Option<T>, DecodeError> {
    match map.remove(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => serde_json::from_value(v)
            .map(Some)
            .map_err(|e| malformed(format!("{what}: \"{key}\": {e}"))),
    }
}

fn object(value: Value, what: &str) -> Result<Map<String, Value>, DecodeError> {
    match value {
        Value::Object(map) => Ok(map),
        _ => Err(malformed(format!("{what} is not an object"))),
    }
}

fn carried(fields: Map<String, Value>, data: Map<String, Value>) -> Option<Box<Carried>> {
    (!fields.is_empty() || !data.is_empty()).then(|| Box::new(Carried { fields, data }))
}

fn decode_change(key: &str, value: Value) -> Result<Change, DecodeError> {
    let what = format!("change {key}");
    let mut fields = object(value, &what)?;
    let id = parse_id(
        "change",
        &take::<String>(&mut fields, "id", &what)?.unwrap_or(key.into()),
    )?;
    let kind = take(&mut fields, "kind", &what)?.unwrap_or_default();
    let summary = take(&mut fields, "summary", &what)?.unwrap_or_default();
    let status: u64 = take(&mut fields, "status", &what)?.unwrap_or(0);
    let task_ids: Vec<String> = take(&mut fields, "task-ids", &what)?.unwrap_or_default();
    let task_ids = task_ids
        .iter()
        .map(|t| parse_id("task", t))
        .collect::<Result<Vec<u64>, _>>()?;
    let spawn_time = take(&mut fields, "spawn-time", &what)?.unwrap_or(Timestamp::UNIX_EPOCH);
    let ready_time = take(&mut fields, "ready-time", &what)?;
    let notice_status: u64 = take(&mut fields, "last-recorded-notice-status", &what)?.unwrap_or(0);
    let mut data = match fields.remove("data") {
        None | Some(Value::Null) => Map::new(),
        Some(v) => object(v, &format!("{what} data"))?,
    };
    let service_names = take(&mut data, "service-names", &what)?.unwrap_or_default();
    let mut check_name = None;
    if let Some(notice_data) = data.remove("notice-data") {
        check_name = notice_data
            .get("check-name")
            .and_then(Value::as_str)
            .map(str::to_owned);
        // Only the check's name is cobble's own; anything more is carried whole.
        let only_check =
            notice_data.as_object().is_some_and(|m| m.len() == 1) && check_name.is_some();
        if !only_check {
            data.insert("notice-data".into(), notice_data);
        }
    }
    let status = status_from_number(status)?;
    let status_without_tasks = if task_ids.is_empty() {
        match status {
            TaskStatus::Default => TaskStatus::Hold,
            other => other,
        }
    } else {
        if status != TaskStatus::Default {
            fields.insert("status".into(), status_number(status).into());
        }
        TaskStatus::Hold
    };
    Ok(Change {
        id,
        kind,
        summary,
        task_ids,
        spawn_time,
        ready_time,
        service_names,
        status_without_tasks,
        check_name,
        last_notice_status: match notice_status {
            0 => None,
            n => Some(status_from_number(n)?),
        },
        carried: carried(fields, data),
    })
}

fn decode_task(key: &str, value: Value) -> Result<Task, DecodeError> {
    let what = format!("task {key}");
    let mut fields = object(value, &what)?;
    let id = parse_id(
        "task",
        &take::<String>(&mut fields, "id", &what)?.unwrap_or(key.into()),
    )?;
    let kind = take(&mut fields, "kind", &what)?.unwrap_or_default();
    let summary = take(&mut fields, "summary", &what)?.unwrap_or_default();
    let status = status_from_number(take(&mut fields, "status", &what)?.unwrap_or(0))?;
    let log = take(&mut fields, "log", &what)?.unwrap_or_default();
    let change: String = take(&mut fields, "change", &what)?.unwrap_or_default();
    // A task of no change: kept out by the caller.
    let change_id = change.parse().unwrap_or(0);
    let spawn_time = take(&mut fields, "spawn-time", &what)?.unwrap_or(Timestamp::UNIX_EPOCH);
    let ready_time = take(&mut fields, "ready-time", &what)?;
    let mut data = match fields.remove("data") {
        None | Some(Value::Null) => Map::new(),
        Some(v) => object(v, &format!("{what} data"))?,
    };
    let api_data: Option<BTreeMap<String, Value>> = match data.get("api-data") {
        Some(Value::Object(_)) => take(&mut data, "api-data", &what)?,
        _ => None,
    };
    let mut service = None;
    if let Some(Value::Object(request)) = data.get("service-request")
        && request.len() == 1
        && let Some(Value::String(name)) = request.get("Name")
    {
        service = Some(name.clone());
        data.remove("service-request");
    }
    Ok(Task {
        id,
        change_id,
        kind,
        summary,
        status,
        log,
        spawn_time,
        ready_time,
        service,
        data: SmallMap::from(api_data.unwrap_or_default()),
        carried: carried(fields, data),
    })
}

/// A notice cobble knows, or one of another type as it was.
fn decode_notice(value: Value) -> Result<Result<Notice, Value>, DecodeError> {
    let kind = match value
        .get("type")
        .and_then(Value::as_str)
        .map(NoticeType::parse)
    {
        Some(Some(kind)) => kind,
        _ => return Ok(Err(value)),
    };
    let mut fields = object(value, "notice")?;
    let raw_id: String = take(&mut fields, "id", "notice")?.unwrap_or_default();
    let what = format!("notice {raw_id}");
    let id = parse_id("notice", &raw_id)?;
    let duration = |fields: &mut Map<String, Value>, key: &str| -> Result<Duration, DecodeError> {
        let Some(text) = take::<String>(fields, key, &what)? else {
            return Ok(Duration::ZERO);
        };
        let nanos = cobble_plan::parse_duration(&text)
            .map_err(|e| malformed(format!("{what}: \"{key}\": {e}")))?;
        Ok(Duration::from_nanos(nanos.max(0) as u64))
    };
    let repeat_after = duration(&mut fields, "repeat-after")?;
    let expire_after = duration(&mut fields, "expire-after")?;
    let last_data: BTreeMap<String, String> =
        take(&mut fields, "last-data", &what)?.unwrap_or_default();
    let time = |fields: &mut Map<String, Value>, key: &str| {
        take::<Timestamp>(fields, key, &what).map(|t| t.unwrap_or(Timestamp::UNIX_EPOCH))
    };
    Ok(Ok(Notice {
        id,
        user_id: take(&mut fields, "user-id", &what)?,
        kind,
        key: take(&mut fields, "key", &what)?.unwrap_or_default(),
        first_occurred: time(&mut fields, "first-occurred")?,
        last_occurred: time(&mut fields, "last-occurred")?,
        last_repeated: time(&mut fields, "last-repeated")?,
        occurrences: take(&mut fields, "occurrences", &what)?.unwrap_or(1),
        last_data: last_data.into(),
        repeat_after,
        expire_after,
        changed_at: 0,
    }))
}

/// Pebble v1.7 to v1.15's warnings, as the warning notices later releases keep instead.
fn decode_legacy_warnings(d: &mut StateData, warnings: Value) -> Result<(), DecodeError> {
    #[derive(Deserialize)]
    #[serde(rename_all = "kebab-case")]
    struct Warning {
        message: String,
        first_added: Timestamp,
        last_added: Timestamp,
        #[serde(default)]
        expire_after: Option<String>,
        #[serde(default)]
        repeat_after: Option<String>,
    }
    let warnings: Vec<Warning> = match warnings {
        Value::Null => return Ok(()),
        v => serde_json::from_value(v).map_err(|e| malformed(format!("\"warnings\": {e}")))?,
    };
    let parse = |text: Option<String>, default: Duration| match text {
        None => Ok(default),
        Some(text) => cobble_plan::parse_duration(&text)
            .map(|n| Duration::from_nanos(n.max(0) as u64))
            .map_err(|e| malformed(format!("warning: {e}"))),
    };
    for w in warnings {
        let taken = d
            .notices
            .values()
            .any(|n| n.kind == NoticeType::Warning && n.key == w.message);
        if taken {
            continue;
        }
        d.last_notice_id += 1;
        let id = d.last_notice_id;
        d.notices.insert(
            id,
            Notice {
                id,
                user_id: None,
                kind: NoticeType::Warning,
                key: w.message,
                first_occurred: w.first_added,
                last_occurred: w.last_added,
                last_repeated: w.last_added,
                occurrences: 1,
                last_data: SmallMap::new(),
                repeat_after: parse(w.repeat_after, Duration::ZERO)?,
                expire_after: parse(w.expire_after, LEGACY_WARNING_EXPIRE)?,
                changed_at: 0,
            },
        );
    }
    Ok(())
}

fn decode_identities(d: &mut StateData, value: Value) -> Result<(), DecodeError> {
    let identities = object(value, "\"identities\"")?;
    for (name, value) in identities {
        let what = format!("identity {name:?}");
        let mut fields = object(value, &what)?;
        let access: String = take(&mut fields, "access", &what)?.unwrap_or_default();
        let access = match access.as_str() {
            "admin" => Access::Admin,
            "read" => Access::Read,
            "metrics" => Access::Metrics,
            "untrusted" => Access::Untrusted,
            other => return Err(malformed(format!("{what}: unknown access {other:?}"))),
        };
        #[derive(Deserialize)]
        struct Local {
            #[serde(rename = "user-id")]
            user_id: u32,
        }
        #[derive(Deserialize)]
        struct Basic {
            password: String,
        }
        #[derive(Deserialize)]
        struct Cert {
            pem: String,
        }
        let local: Option<Local> = take(&mut fields, "local", &what)?;
        let basic: Option<Basic> = take(&mut fields, "basic", &what)?;
        let cert: Option<Cert> = take(&mut fields, "cert", &what)?;
        let cert = match cert {
            Some(c) => Some(
                pem::parse(&c.pem)
                    .map(|b| b.into_contents())
                    .map_err(|e| malformed(format!("{what}: certificate: {e}")))?,
            ),
            None => None,
        };
        if !fields.is_empty() {
            d.carried.identities.insert(name.clone(), fields);
        }
        d.identities.insert(
            name,
            Identity {
                access,
                local: local.map(|l| l.user_id),
                basic: basic.map(|b| b.password),
                cert,
            },
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests;
