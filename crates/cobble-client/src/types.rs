//! The JSON wire types of the Pebble API, in one place.
//!
//! Field order is declaration order and matches Pebble's Go structs, because Go clients and
//! byte-level transcript comparisons see the order. Optional fields are omitted when empty,
//! exactly where Go's `omitempty` omits them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The envelope around every JSON response.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Envelope<T> {
    /// `sync`, `async` or `error`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The HTTP status code, repeated in the body.
    #[serde(rename = "status-code")]
    pub status_code: u16,
    /// Go's `http.StatusText` of `status_code`.
    pub status: String,
    /// The change ID of an async response.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change: Option<String>,
    /// The payload; for async service actions it is an explicit `null`.
    pub result: T,
}

/// The `result` of an error response.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ErrorResult {
    /// The human-readable message, in Pebble's wording.
    pub message: String,
    /// The machine-readable kind (`no-default-services`, `not-found`, ...), or empty.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
    /// Extra structured detail, for the few errors that carry any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<serde_json::Value>,
}

/// `GET /v1/system-info`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SystemInfo {
    /// A unique ID of this boot of the machine.
    #[serde(rename = "boot-id")]
    pub boot_id: String,
    /// The `--http` address the daemon listens on, if any.
    #[serde(
        rename = "http-address",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub http_address: String,
    /// The daemon's version.
    pub version: String,
}

/// One entry of `GET /v1/services`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServiceInfo {
    /// The service's name in the plan.
    pub name: String,
    /// `enabled` or `disabled`.
    pub startup: String,
    /// `active`, `inactive`, `backoff` or `error`.
    pub current: String,
    /// RFC 3339 time the `current` status was entered; absent for a service never started.
    #[serde(
        rename = "current-since",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub current_since: Option<String>,
}

/// Body of `POST /v1/services`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ServicesAction {
    /// `start`, `stop`, `restart`, `replan` or `autostart`.
    pub action: String,
    /// The services to act on; empty for `replan` and `autostart`.
    #[serde(default)]
    pub services: Vec<String>,
}

/// Body of `POST /v1/layers`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LayersRequest {
    /// Always `add`.
    pub action: String,
    /// Merge into an existing layer with the same label instead of appending.
    #[serde(default)]
    pub combine: bool,
    /// Allow the label to name a layer inside a layers subdirectory.
    #[serde(default)]
    pub inner: bool,
    /// The layer's label.
    pub label: String,
    /// Always `yaml`.
    pub format: String,
    /// The layer itself, as YAML text.
    pub layer: String,
}

/// Body of `POST /v1/signals`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SignalsRequest {
    /// The signal name, such as `SIGHUP`.
    pub signal: String,
    /// The running services to signal.
    pub services: Vec<String>,
}

/// Body of `POST /v1/changes/{id}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChangeAction {
    /// Always `abort`.
    pub action: String,
}

/// A change, as `GET /v1/changes` returns it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChangeInfo {
    /// The change's ID, a decimal number as a string.
    pub id: String,
    /// What the change does: `start`, `stop`, `replan`, `exec`, ...
    pub kind: String,
    /// A one-line description, such as `Start service "svc" and 1 more`.
    pub summary: String,
    /// `Do`, `Doing`, `Done`, `Error`, `Hold`, `Abort`, `Undo`, `Undoing`, `Undone` or `Wait`.
    pub status: String,
    /// The change's tasks, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tasks: Vec<TaskInfo>,
    /// Whether the change has finished (done, errored, held or undone).
    pub ready: bool,
    /// `cannot perform the following tasks:` and one line per failed task, or empty.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub err: String,
    /// RFC 3339 time the change was created, in the daemon's local zone.
    #[serde(rename = "spawn-time")]
    pub spawn_time: String,
    /// RFC 3339 time the change became ready, once it has.
    #[serde(
        rename = "ready-time",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub ready_time: Option<String>,
    /// Extra data some kinds of change carry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<BTreeMap<String, serde_json::Value>>,
}

/// A task of a change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskInfo {
    /// The task's ID.
    pub id: String,
    /// What the task does: `start`, `stop`, `exec`, ...
    pub kind: String,
    /// A one-line description, such as `Start service "svc"`.
    pub summary: String,
    /// The same statuses as a change has.
    pub status: String,
    /// Up to 10 entries, each `<RFC 3339 time> INFO|ERROR <message>`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub log: Vec<String>,
    /// How far the task has got.
    pub progress: TaskProgress,
    /// RFC 3339 time the task was created.
    #[serde(rename = "spawn-time")]
    pub spawn_time: String,
    /// RFC 3339 time the task finished, once it has.
    #[serde(
        rename = "ready-time",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub ready_time: Option<String>,
    /// The task's API data, such as `exit-code` for exec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<BTreeMap<String, serde_json::Value>>,
}

/// Progress of a task; service tasks are 0 or 1 of 1.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TaskProgress {
    /// What is being counted; usually empty.
    pub label: String,
    /// Units done.
    pub done: u64,
    /// Units in all.
    pub total: u64,
}
