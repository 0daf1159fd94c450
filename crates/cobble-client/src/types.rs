//! The JSON wire types of the Pebble API, in one place.
//!
//! Field order is declaration order and matches Pebble's Go structs, because Go clients and
//! byte-level transcript comparisons see the order. Optional fields are omitted when empty,
//! exactly where Go's `omitempty` omits them.
//!
//! Request bodies decode the way Go's `encoding/json` decodes them: a missing key and an
//! explicit `null` both leave a field at its zero value. Pebble's Go client relies on it: it
//! marshals a nil slice as `null`, so `pebble replan` sends `{"action":"replan","services":null}`.
//! Every field of a request type therefore carries `#[serde(default, deserialize_with =
//! "null_as_default")]` (an `Option` field already reads `null` as `None`), and the test
//! `request_bodies_read_null_as_go_does` names each request type so a new one is checked too.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};

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
    /// When a warning last repeated, on answers that are not errors, once there is one.
    #[serde(
        rename = "latest-warning",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub latest_warning: Option<String>,
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
    /// The `--https` address the daemon listens on, if any.
    #[serde(
        rename = "https-address",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub https_address: String,
    /// The Pebble release whose contract the daemon implements (Pebble's own version, for
    /// Pebble).
    pub version: String,
    /// cobble's own version; absent from Pebble.
    #[serde(
        rename = "cobble-version",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub cobble_version: String,
}

/// One entry of `GET /v1/services`.
///
/// It is written through [`ServiceInfoRef`], the one place that decides the entry's JSON.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ServiceInfo {
    /// The service's name in the plan.
    pub name: String,
    /// `enabled` or `disabled`.
    pub startup: String,
    /// `active`, `inactive`, `backoff` or `error`; or `waiting` (cobble extension) while
    /// `requires-paths` are missing.
    pub current: String,
    /// RFC 3339 time the `current` status was entered; absent for a service never started.
    #[serde(rename = "current-since", default)]
    pub current_since: Option<String>,
    /// RFC 3339 time of the next run its `schedule:` names (cobble extension); absent for a
    /// service without a schedule.
    #[serde(default)]
    pub scheduled: Option<String>,
    /// Why the service is not simply running (cobble extension; Pebble clients ignore it):
    /// `waiting for /etc/certs/cert.pem`, `backing off until ... after exit code 255`, ...
    #[serde(default)]
    pub reason: Option<String>,
    /// What the supervisor knows about the service, with `GET /v1/services?details=true`
    /// (cobble extension, used by `cobble why`).
    #[serde(default)]
    pub details: Option<ServiceDetails>,
}

impl ServiceInfo {
    /// The same entry, borrowed.
    pub fn borrowed(&self) -> ServiceInfoRef<'_> {
        ServiceInfoRef {
            name: &self.name,
            startup: &self.startup,
            current: &self.current,
            current_since: self.current_since.as_deref(),
            scheduled: self.scheduled.as_deref(),
            reason: self.reason.as_deref(),
            details: self.details.as_ref(),
        }
    }
}

impl Serialize for ServiceInfo {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.borrowed().serialize(serializer)
    }
}

/// A [`ServiceInfo`] made of borrowed parts, with the same JSON: a server listing thousands
/// of services writes each entry from the data it already holds, copying no string.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ServiceInfoRef<'a> {
    /// See [`ServiceInfo::name`].
    pub name: &'a str,
    /// See [`ServiceInfo::startup`].
    pub startup: &'a str,
    /// See [`ServiceInfo::current`].
    pub current: &'a str,
    /// See [`ServiceInfo::current_since`].
    #[serde(rename = "current-since", skip_serializing_if = "Option::is_none")]
    pub current_since: Option<&'a str>,
    /// See [`ServiceInfo::scheduled`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scheduled: Option<&'a str>,
    /// See [`ServiceInfo::reason`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<&'a str>,
    /// See [`ServiceInfo::details`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub details: Option<&'a ServiceDetails>,
}

/// Why a service is where it is (cobble extension).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ServiceDetails {
    /// Exit code of the last process.
    #[serde(
        rename = "last-exit-code",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub last_exit_code: Option<i32>,
    /// The last lines of its output.
    #[serde(rename = "last-output", default, skip_serializing_if = "Vec::is_empty")]
    pub last_output: Vec<String>,
    /// Processes spawned by this daemon.
    #[serde(rename = "start-count")]
    pub start_count: u64,
    /// Backoffs since the last reset.
    #[serde(rename = "backoff-count")]
    pub backoff_count: u32,
    /// The current backoff delay before jitter, as a Go duration (`"4s"`).
    #[serde(
        rename = "backoff-delay",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub backoff_delay: String,
    /// When the current backoff ends.
    #[serde(
        rename = "backoff-until",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub backoff_until: Option<String>,
    /// Missing `requires-paths` the service waits for.
    #[serde(rename = "waiting-for", default, skip_serializing_if = "Vec::is_empty")]
    pub waiting_for: Vec<String>,
    /// Paths the last failure output named as missing; their appearance ends the backoff.
    #[serde(
        rename = "missing-paths",
        default,
        skip_serializing_if = "Vec::is_empty"
    )]
    pub missing_paths: Vec<String>,
    /// Checks named in `on-check-failure` that are down.
    #[serde(
        rename = "failing-checks",
        default,
        skip_serializing_if = "Vec::is_empty"
    )]
    pub failing_checks: Vec<FailingCheck>,
    /// `requires-checks` that have not succeeded yet, while the service waits for them.
    #[serde(
        rename = "waiting-for-checks",
        default,
        skip_serializing_if = "Vec::is_empty"
    )]
    pub waiting_for_checks: Vec<String>,
    /// Until when `start-grace` holds the actions of failing checks.
    #[serde(
        rename = "start-grace-until",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub start_grace_until: Option<String>,
    /// Check actions held (by the start grace or a check's restart backoff), and until when.
    #[serde(
        rename = "held-actions",
        default,
        skip_serializing_if = "Vec::is_empty"
    )]
    pub held_actions: Vec<HeldAction>,
    /// Restarts caused by checks that are still down, and when the next may follow.
    #[serde(
        rename = "check-restarts",
        default,
        skip_serializing_if = "Vec::is_empty"
    )]
    pub check_restarts: Vec<CheckRestarts>,
    /// What killed the last process, when the kernel did (`killed by the OOM killer at
    /// memory-max 64M`).
    #[serde(
        rename = "last-exit-cause",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub last_exit_cause: String,
    /// What of the service's `resources:` is not enforced, and why.
    #[serde(
        rename = "resources-not-enforced",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub resources_not_enforced: String,
    /// What the service uses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<ServiceUsage>,
    /// Its watchdog, when it has one (`watchdog:` with `readiness: notify`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watchdog: Option<WatchdogDetails>,
    /// The listening sockets held for it (`sockets:`), by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sockets: Vec<HeldSocketDetails>,
    /// Its `schedule:`, when it has one: the next run, the last and how it went.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<ScheduleDetails>,
    /// A one-shot's last completion (`type: oneshot`), until it is stopped.
    #[serde(
        rename = "last-completion",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub last_completion: Option<Completion>,
    /// The one-shots of `after:` the service waits for, each with where it stands.
    #[serde(
        rename = "waiting-for-oneshots",
        default,
        skip_serializing_if = "Vec::is_empty"
    )]
    pub waiting_for_oneshots: Vec<WaitingOneshot>,
}

/// Where a scheduled service's runs stand (cobble extension).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ScheduleDetails {
    /// The schedule, as the plan has it.
    pub schedule: String,
    /// RFC 3339 time of the next run.
    #[serde(rename = "next-run", default, skip_serializing_if = "Option::is_none")]
    pub next_run: Option<String>,
    /// RFC 3339 time the last run was started by the schedule (since the daemon started).
    #[serde(rename = "last-run", default, skip_serializing_if = "Option::is_none")]
    pub last_run: Option<String>,
    /// The ID of the last run's change.
    #[serde(
        rename = "last-change-id",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub last_change_id: String,
    /// How the last run's change went: `running`, `done`, or `error` with
    /// [`ScheduleDetails::last_error`].
    #[serde(
        rename = "last-outcome",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub last_outcome: String,
    /// The last run's error.
    #[serde(
        rename = "last-error",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub last_error: String,
    /// RFC 3339 time of the last run skipped because the one before was still going.
    #[serde(rename = "last-skip", default, skip_serializing_if = "Option::is_none")]
    pub last_skip: Option<String>,
    /// Runs skipped so far.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub skips: u64,
}

/// The last completion of a one-shot (cobble extension).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Completion {
    /// Its exit code: 0, which is what makes a run a completion.
    #[serde(rename = "exit-code")]
    pub exit_code: i32,
    /// When it exited.
    pub at: String,
    /// How long it ran, as a Go duration (`"1.5s"`).
    #[serde(rename = "ran-for")]
    pub ran_for: String,
}

/// A one-shot a service waits for (cobble extension).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WaitingOneshot {
    /// The one-shot.
    pub name: String,
    /// Where it stands: `running`, `not started`, or `failed: exited with code 1`.
    pub state: String,
}

/// A listening socket held for a service (cobble extension).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HeldSocketDetails {
    /// Its name, as the service gets it in `LISTEN_FDNAMES`.
    pub name: String,
    /// Where it listens, as the plan says.
    pub listen: String,
    /// Why it is not held (it could not be bound), or why a change to it could not be
    /// applied; empty while it is held as the plan says.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub error: String,
    /// The `tcp` checks that probe it: they succeed while the service is down.
    #[serde(rename = "probed-by", default, skip_serializing_if = "Vec::is_empty")]
    pub probed_by: Vec<String>,
}

/// Where a service's watchdog stands (cobble extension).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WatchdogDetails {
    /// The interval, as a Go duration (`"30s"`): the running process's, which it may have
    /// changed with `WATCHDOG_USEC=`, or the layer's between runs; `"0s"` once the running
    /// process turned the watchdog off with `WATCHDOG_USEC=0`.
    pub interval: String,
    /// When the running process last said `WATCHDOG=1`.
    #[serde(rename = "last-ping", default, skip_serializing_if = "Option::is_none")]
    pub last_ping: Option<String>,
    /// When the running process has failed unless it pings before (absent before `READY=1`,
    /// between runs and while the watchdog is off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<String>,
}

/// What a service uses (cobble extension), read at most once a second.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ServiceUsage {
    /// Resident memory of its processes, summed.
    #[serde(rename = "memory-bytes")]
    pub memory_bytes: u64,
    /// CPU time (user + system) of all its runs since the daemon started, in seconds.
    #[serde(rename = "cpu-seconds")]
    pub cpu_seconds: f64,
    /// Its processes.
    pub processes: u64,
    /// Open file descriptors of its processes, summed.
    #[serde(rename = "open-fds")]
    pub open_fds: u64,
    /// Memory charged to its cgroup (resident memory and page cache), when it has one.
    #[serde(
        rename = "cgroup-memory-bytes",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub cgroup_memory_bytes: Option<u64>,
    /// Its cgroup, when it has one.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cgroup: String,
}

/// A check action that waits (cobble extension).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HeldAction {
    /// The check whose action waits.
    pub check: String,
    /// Until when.
    pub until: String,
}

/// The restarts one check caused while it stayed down (cobble extension).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CheckRestarts {
    /// The check.
    pub check: String,
    /// Restarts it caused since it went down.
    pub restarts: u32,
    /// The earliest time of the next one.
    #[serde(rename = "next-after")]
    pub next_after: String,
}

/// A down check that acts on a service (cobble extension).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FailingCheck {
    pub name: String,
    /// Consecutive failures.
    pub failures: u32,
    pub threshold: u32,
    /// When it went down.
    #[serde(
        rename = "down-since",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub down_since: Option<String>,
    /// The last failure's message.
    #[serde(
        rename = "last-error",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub last_error: String,
    /// Times its failure action fired.
    #[serde(rename = "action-count")]
    pub action_count: u64,
}

/// Body of `POST /v1/services`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ServicesAction {
    /// `start`, `stop`, `restart`, `replan` or `autostart`.
    #[serde(default, deserialize_with = "null_as_default")]
    pub action: String,
    /// The services to act on; empty for `replan` and `autostart`.
    #[serde(default, deserialize_with = "null_as_default")]
    pub services: Vec<String>,
}

/// Body of `POST /v1/layers`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LayersRequest {
    /// Always `add`.
    #[serde(default, deserialize_with = "null_as_default")]
    pub action: String,
    /// Merge into an existing layer with the same label instead of appending.
    #[serde(default, deserialize_with = "null_as_default")]
    pub combine: bool,
    /// Allow the label to name a layer inside a layers subdirectory.
    #[serde(default, deserialize_with = "null_as_default")]
    pub inner: bool,
    /// The layer's label.
    #[serde(default, deserialize_with = "null_as_default")]
    pub label: String,
    /// Always `yaml`.
    #[serde(default, deserialize_with = "null_as_default")]
    pub format: String,
    /// The layer itself, as YAML text.
    #[serde(default, deserialize_with = "null_as_default")]
    pub layer: String,
}

/// Body of `POST /v1/signals`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SignalsRequest {
    /// The signal name, such as `SIGHUP`.
    #[serde(default, deserialize_with = "null_as_default")]
    pub signal: String,
    /// The running services to signal.
    #[serde(default, deserialize_with = "null_as_default")]
    pub services: Vec<String>,
}

/// Body of `POST /v1/cobble/reexec` (cobble's own endpoint).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReexecRequest {
    /// The program to re-execute the daemon with; empty for the binary the daemon was
    /// started from, as it is on disk now.
    #[serde(default, deserialize_with = "null_as_default")]
    pub binary: String,
}

/// What `POST /v1/cobble/reexec` answers, once the new program has taken over.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReexecResult {
    /// The version of cobble that ran before.
    #[serde(rename = "old-version")]
    pub old_version: String,
    /// The version of cobble that runs now.
    #[serde(rename = "new-version")]
    pub new_version: String,
    /// The program that runs now.
    pub binary: String,
    /// The daemon's process ID, the same before and after.
    pub pid: u32,
}

/// Body of `POST /v1/changes/{id}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChangeAction {
    /// Always `abort`.
    #[serde(default, deserialize_with = "null_as_default")]
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

/// A notice, as `GET /v1/notices` and `GET /v1/notices/{id}` return it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NoticeInfo {
    /// The notice's ID, a decimal number as a string.
    pub id: String,
    /// The uid of the user the notice belongs to; `null` for a public notice.
    #[serde(rename = "user-id")]
    pub user_id: Option<u32>,
    /// `custom`, `change-update` or `warning`.
    #[serde(rename = "type")]
    pub kind: String,
    /// What the notice is about: a `domain.com/path` key, a change ID or a message.
    pub key: String,
    /// RFC 3339 UTC time of the first occurrence.
    #[serde(rename = "first-occurred")]
    pub first_occurred: String,
    /// RFC 3339 UTC time of the last occurrence.
    #[serde(rename = "last-occurred")]
    pub last_occurred: String,
    /// RFC 3339 UTC time the notice was last recorded anew or allowed to repeat.
    #[serde(rename = "last-repeated")]
    pub last_repeated: String,
    /// How many times the notice occurred.
    pub occurrences: u64,
    /// The data of the last occurrence.
    #[serde(
        rename = "last-data",
        default,
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub last_data: BTreeMap<String, String>,
    /// How long after the last repeat an occurrence counts as a repeat again (Go duration).
    #[serde(
        rename = "repeat-after",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub repeat_after: Option<String>,
    /// How long after the last occurrence the notice is dropped (Go duration).
    #[serde(
        rename = "expire-after",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub expire_after: Option<String>,
}

/// Body of `POST /v1/notices`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AddNoticeRequest {
    /// Always `add`.
    #[serde(default, deserialize_with = "null_as_default")]
    pub action: String,
    /// Always `custom`: clients may add no other type.
    #[serde(rename = "type", default, deserialize_with = "null_as_default")]
    pub kind: String,
    /// A `domain.com/path` key.
    #[serde(default, deserialize_with = "null_as_default")]
    pub key: String,
    /// A Go duration; an occurrence within it of the last repeat does not repeat the notice.
    #[serde(
        rename = "repeat-after",
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub repeat_after: String,
    /// The occurrence's data: an object of strings (anything else is refused by the daemon).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<serde_json::Value>,
}

/// Result of `POST /v1/notices`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AddedNotice {
    /// The notice's ID.
    pub id: String,
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

/// One entry of `GET /v1/files?action=list`, in the field order of Pebble's `fileInfoResult`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileInfo {
    /// The entry's full absolute path (cleaned, like Go's `path.Join`).
    pub path: String,
    /// The last element of `path` (`/` for the root).
    pub name: String,
    /// `file`, `directory`, `symlink`, `socket`, `named-pipe`, `device` or `unknown`.
    #[serde(rename = "type")]
    pub file_type: String,
    /// Size in bytes; present for regular files only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// The permission bits as three octal digits (`644`); setuid, setgid and sticky are left out.
    pub permissions: String,
    /// Modification time, RFC 3339 in whole seconds, in the daemon's local zone.
    #[serde(rename = "last-modified")]
    pub last_modified: String,
    /// Owner uid; always sent (Go emits `null` only when the platform has no owner).
    #[serde(rename = "user-id")]
    pub user_id: Option<u32>,
    /// Owner name, or empty when the uid has no passwd entry.
    #[serde(default)]
    pub user: String,
    /// Group gid.
    #[serde(rename = "group-id")]
    pub group_id: Option<u32>,
    /// Group name, or empty when the gid has no group entry.
    #[serde(default)]
    pub group: String,
}

/// The per-path outcome of a files request: `{"path"}` or `{"path","error"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileResult {
    /// The path exactly as the request named it.
    pub path: String,
    /// Why this path failed; `kind` is `not-found`, `permission-denied` or `generic-file-error`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorResult>,
}

/// One file of a multipart write (`POST /v1/files`, part `request`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WriteFilesItem {
    /// Absolute path of the file to write; the file part's `filename` must equal it.
    #[serde(default, deserialize_with = "null_as_default")]
    pub path: String,
    /// Create missing parent directories (mode 0755).
    #[serde(
        rename = "make-dirs",
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "is_false"
    )]
    pub make_dirs: bool,
    /// Three octal digits; empty means 0644.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub permissions: String,
    /// Owner uid.
    #[serde(rename = "user-id", default, skip_serializing_if = "Option::is_none")]
    pub user_id: Option<u32>,
    /// Owner name.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub user: String,
    /// Group gid (only with a user).
    #[serde(rename = "group-id", default, skip_serializing_if = "Option::is_none")]
    pub group_id: Option<u32>,
    /// Group name (only with a user).
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub group: String,
}

/// The `request` part of a multipart write.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WriteFilesRequest {
    /// Always `write`.
    #[serde(default, deserialize_with = "null_as_default")]
    pub action: String,
    /// The files whose content follows, one `files` part each.
    #[serde(default, deserialize_with = "null_as_default")]
    pub files: Vec<WriteFilesItem>,
}

/// One directory of `{"action":"make-dirs"}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MakeDirsItem {
    /// Absolute path of the directory to create.
    #[serde(default, deserialize_with = "null_as_default")]
    pub path: String,
    /// Create missing parents too (with the same mode and owner); an existing directory is
    /// then not an error.
    #[serde(
        rename = "make-parents",
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "is_false"
    )]
    pub make_parents: bool,
    /// Three octal digits; empty means 0755.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub permissions: String,
    /// Owner uid.
    #[serde(rename = "user-id", default, skip_serializing_if = "Option::is_none")]
    pub user_id: Option<u32>,
    /// Owner name.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub user: String,
    /// Group gid (only with a user).
    #[serde(rename = "group-id", default, skip_serializing_if = "Option::is_none")]
    pub group_id: Option<u32>,
    /// Group name (only with a user).
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub group: String,
}

/// One path of `{"action":"remove"}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RemovePathsItem {
    /// Absolute path to remove.
    #[serde(default, deserialize_with = "null_as_default")]
    pub path: String,
    /// Remove a directory and everything below it; a missing path is then not an error.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "is_false"
    )]
    pub recursive: bool,
}

/// The JSON body of `POST /v1/files` (`make-dirs` or `remove`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FilesRequest {
    /// `make-dirs` or `remove` (`write` must use multipart).
    #[serde(default, deserialize_with = "null_as_default")]
    pub action: String,
    /// The directories of a `make-dirs` request.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub dirs: Vec<MakeDirsItem>,
    /// The paths of a `remove` request.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub paths: Vec<RemovePathsItem>,
}

/// One entry of `GET /v1/checks`, and the `info` of a refresh.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CheckInfo {
    /// The check's name in the plan.
    pub name: String,
    /// `alive`, `ready`, or empty when unset.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub level: String,
    /// `enabled` or `disabled` (unset reads as enabled).
    pub startup: String,
    /// `up`, `down` or `inactive`.
    pub status: String,
    /// Successes since the check started or last recovered; `None` from a daemon too old
    /// to count them (before Pebble v1.23).
    #[serde(default)]
    pub successes: Option<u64>,
    /// Consecutive failures.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub failures: u64,
    /// Consecutive failures that make the check down.
    pub threshold: u64,
    /// The perform-check or recover-check change driving the check; absent when inactive.
    #[serde(
        rename = "change-id",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub change_id: String,
    /// The change that drove the check before the current one: the perform-check that
    /// failed into the current recover-check, or the recover-check that recovered into the
    /// current perform-check. Clients read its log when the current change has none yet.
    #[serde(
        rename = "prev-change-id",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub prev_change_id: String,
}

/// Body of `POST /v1/checks`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChecksAction {
    /// `start` or `stop`.
    #[serde(default, deserialize_with = "null_as_default")]
    pub action: String,
    /// The checks to act on.
    #[serde(default, deserialize_with = "null_as_default")]
    pub checks: Vec<String>,
}

/// Result of `POST /v1/checks`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChecksActionResult {
    /// The checks whose state changed, sorted.
    pub changed: Vec<String>,
}

/// Body of `POST /v1/checks/refresh`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RefreshCheckRequest {
    /// The check to run now.
    #[serde(default, deserialize_with = "null_as_default")]
    pub name: String,
}

/// Result of `POST /v1/checks/refresh`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RefreshCheckResult {
    /// The check after the run.
    pub info: CheckInfo,
    /// Why the run failed (`message; details`), empty if it succeeded.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub error: String,
}

/// Result of `GET /v1/health` (with status 200, or 502 when unhealthy).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HealthInfo {
    /// False when any matching check is down.
    pub healthy: bool,
}

/// Body of `POST /v1/exec`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExecRequest {
    /// The program and its arguments; the program is looked up in the daemon's `PATH`.
    #[serde(default, deserialize_with = "null_as_default")]
    pub command: Vec<String>,
    /// A service whose environment, user, group and working directory the command inherits;
    /// the fields below override them.
    #[serde(
        rename = "service-context",
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub service_context: String,
    /// Variables added to the daemon's environment (and the service context's).
    #[serde(default, deserialize_with = "null_as_default")]
    pub environment: BTreeMap<String, String>,
    /// The working directory; the user's home directory when empty (or `/` without one).
    #[serde(
        rename = "working-dir",
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub working_dir: String,
    /// A Go duration (`"10s"`, `"1.500s"`) after which the command is killed; none when empty.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub timeout: String,
    /// Numeric user to run as.
    #[serde(rename = "user-id", default, skip_serializing_if = "Option::is_none")]
    pub user_id: Option<u32>,
    /// User name to run as.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub user: String,
    /// Numeric group to run as (only with a user).
    #[serde(rename = "group-id", default, skip_serializing_if = "Option::is_none")]
    pub group_id: Option<u32>,
    /// Group name to run as (only with a user).
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub group: String,
    /// Run the command on a pseudo-terminal.
    #[serde(default, deserialize_with = "null_as_default")]
    pub terminal: bool,
    /// With `terminal`: the terminal is also the command's stdin (and its controlling
    /// terminal), and the end of input arrives as the terminal's end-of-file character.
    #[serde(default, deserialize_with = "null_as_default")]
    pub interactive: bool,
    /// Send stderr on its own `stderr` websocket instead of mixing it into `stdio`.
    #[serde(rename = "split-stderr", default, deserialize_with = "null_as_default")]
    pub split_stderr: bool,
    /// The terminal's initial width in columns (with `terminal`; 0 leaves it unset).
    #[serde(default, deserialize_with = "null_as_default")]
    pub width: i64,
    /// The terminal's initial height in rows.
    #[serde(default, deserialize_with = "null_as_default")]
    pub height: i64,
}

/// The `result` of `POST /v1/exec` (a Go map, so its keys are sorted).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExecResult {
    /// The command's complete environment.
    pub environment: BTreeMap<String, String>,
    /// The exec task, whose websockets carry the command's I/O.
    #[serde(rename = "task-id")]
    pub task_id: String,
    /// The directory the command runs in.
    #[serde(rename = "working-dir")]
    pub working_dir: String,
}

/// A text frame on an exec websocket: `end` on `stdio` and `stderr` (in both directions: the
/// end of a stream), `signal` and `resize` on `control`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExecCommand {
    /// `end`, `signal` or `resize`.
    #[serde(default, deserialize_with = "null_as_default")]
    pub command: String,
    /// The signal of a `signal` command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<ExecSignal>,
    /// The size of a `resize` command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resize: Option<ExecResize>,
}

impl ExecCommand {
    /// `{"command":"end"}`: the end of a stream.
    pub fn end() -> ExecCommand {
        ExecCommand {
            command: "end".into(),
            ..ExecCommand::default()
        }
    }
}

/// The signal of an exec `signal` command.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExecSignal {
    /// A signal name such as `SIGTERM`.
    #[serde(default, deserialize_with = "null_as_default")]
    pub name: String,
}

/// The new terminal size of an exec `resize` command.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExecResize {
    /// Columns.
    #[serde(default, deserialize_with = "null_as_default")]
    pub width: i64,
    /// Rows.
    #[serde(default, deserialize_with = "null_as_default")]
    pub height: i64,
}

/// Reads `null` as `T::default()`, as Go leaves a field at its zero value for `null`; with
/// `#[serde(default)]` a missing key reads the same.
fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

fn is_zero(value: &u64) -> bool {
    *value == 0
}

fn is_false(value: &bool) -> bool {
    !value
}

#[cfg(test)]
mod tests {
    use std::fmt::Debug;

    use serde::de::{self, DeserializeOwned, Visitor};
    use serde_json::Value;

    use super::*;

    /// The wire names of `T`'s fields, as its derived `Deserialize` announces them to the
    /// deserializer; so a field added later is covered without touching the tests.
    fn field_names<T: DeserializeOwned>() -> &'static [&'static str] {
        struct Probe<'a>(&'a mut &'static [&'static str]);

        impl<'de> Deserializer<'de> for Probe<'_> {
            type Error = de::value::Error;

            fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
                Err(de::Error::custom("not a struct"))
            }

            fn deserialize_struct<V: Visitor<'de>>(
                self,
                _name: &'static str,
                fields: &'static [&'static str],
                _: V,
            ) -> Result<V::Value, Self::Error> {
                *self.0 = fields;
                Err(de::Error::custom("probed"))
            }

            serde::forward_to_deserialize_any! {
                bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
                byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map enum
                identifier ignored_any
            }
        }

        let mut fields: &'static [&'static str] = &[];
        let _ = T::deserialize(Probe(&mut fields));
        fields
    }

    /// `T` decodes `{}` and an object with every field `null` to its default.
    fn assert_reads_null_as_go_does<T>()
    where
        T: DeserializeOwned + Default + PartialEq + Debug,
    {
        let name = std::any::type_name::<T>();
        let fields = field_names::<T>();
        assert!(!fields.is_empty(), "{name}: no fields found");
        let all_null: serde_json::Map<String, Value> = fields
            .iter()
            .map(|field| (field.to_string(), Value::Null))
            .collect();
        let all_null = Value::Object(all_null);
        let decoded = serde_json::from_value::<T>(all_null.clone())
            .unwrap_or_else(|e| panic!("{name} from {all_null}: {e}"));
        assert_eq!(decoded, T::default(), "{name} from {all_null}");
        let decoded = serde_json::from_str::<T>("{}").unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(decoded, T::default(), "{name} from {{}}");
    }

    #[test]
    fn request_bodies_read_null_as_go_does() {
        assert_reads_null_as_go_does::<ServicesAction>();
        assert_reads_null_as_go_does::<LayersRequest>();
        assert_reads_null_as_go_does::<SignalsRequest>();
        assert_reads_null_as_go_does::<ChangeAction>();
        assert_reads_null_as_go_does::<WriteFilesRequest>();
        assert_reads_null_as_go_does::<WriteFilesItem>();
        assert_reads_null_as_go_does::<FilesRequest>();
        assert_reads_null_as_go_does::<MakeDirsItem>();
        assert_reads_null_as_go_does::<RemovePathsItem>();
        assert_reads_null_as_go_does::<ChecksAction>();
        assert_reads_null_as_go_does::<RefreshCheckRequest>();
        assert_reads_null_as_go_does::<ExecRequest>();
        assert_reads_null_as_go_does::<ExecCommand>();
        assert_reads_null_as_go_does::<ExecSignal>();
        assert_reads_null_as_go_does::<ExecResize>();
        assert_reads_null_as_go_does::<AddNoticeRequest>();
    }

    #[test]
    fn field_names_are_the_wire_names() {
        assert_eq!(
            field_names::<MakeDirsItem>(),
            [
                "path",
                "make-parents",
                "permissions",
                "user-id",
                "user",
                "group-id",
                "group"
            ]
        );
    }

    fn decode<T: DeserializeOwned>(body: &str) -> T {
        serde_json::from_str(body).unwrap_or_else(|e| panic!("{body}: {e}"))
    }

    /// The bodies below are what Pebble's Go client writes: `json.Marshal` for service and
    /// check actions, `json.Encoder` (a trailing newline, `&` as `\u0026`) for the rest.
    #[test]
    fn bodies_as_pebbles_go_client_writes_them() {
        for action in ["replan", "autostart", "start"] {
            let body = format!(r#"{{"action":"{action}","services":null}}"#);
            assert_eq!(
                decode::<ServicesAction>(&body),
                ServicesAction {
                    action: action.into(),
                    services: Vec::new()
                }
            );
        }
        assert_eq!(
            decode::<ChecksAction>(r#"{"action":"stop","checks":null}"#),
            ChecksAction {
                action: "stop".into(),
                checks: Vec::new()
            }
        );
        assert_eq!(
            decode::<SignalsRequest>("{\"signal\":\"SIGHUP\",\"services\":null}\n"),
            SignalsRequest {
                signal: "SIGHUP".into(),
                services: Vec::new()
            }
        );
        assert_eq!(
            decode::<ChangeAction>("{\"action\":\"abort\"}\n").action,
            "abort"
        );
        assert_eq!(
            decode::<LayersRequest>(
                "{\"action\":\"add\",\"combine\":false,\"inner\":false,\"label\":\"base\",\
                 \"format\":\"yaml\",\"layer\":\"services:\\n  a:\\n    command: x \\u0026\\u0026 y\\n\"}\n"
            ),
            LayersRequest {
                action: "add".into(),
                combine: false,
                inner: false,
                label: "base".into(),
                format: "yaml".into(),
                layer: "services:\n  a:\n    command: x && y\n".into(),
            }
        );
        assert_eq!(
            decode::<FilesRequest>(
                "{\"action\":\"make-dirs\",\"dirs\":[{\"path\":\"/d\",\"make-parents\":false,\
                 \"permissions\":\"\",\"user-id\":null,\"user\":\"\",\"group-id\":null,\"group\":\"\"}]}\n"
            ),
            FilesRequest {
                action: "make-dirs".into(),
                dirs: vec![MakeDirsItem {
                    path: "/d".into(),
                    ..MakeDirsItem::default()
                }],
                paths: Vec::new(),
            }
        );
        assert_eq!(
            decode::<FilesRequest>("{\"action\":\"remove\",\"paths\":null}\n"),
            FilesRequest {
                action: "remove".into(),
                ..FilesRequest::default()
            }
        );
        assert_eq!(
            decode::<WriteFilesRequest>(
                "{\"action\":\"write\",\"files\":[{\"path\":\"/f\",\"make-dirs\":true,\
                 \"permissions\":\"600\",\"user-id\":1000,\"user\":\"\",\"group-id\":null,\"group\":\"\"}]}\n"
            ),
            WriteFilesRequest {
                action: "write".into(),
                files: vec![WriteFilesItem {
                    path: "/f".into(),
                    make_dirs: true,
                    permissions: "600".into(),
                    user_id: Some(1000),
                    ..WriteFilesItem::default()
                }],
            }
        );
    }

    /// ops sends every optional field of an exec, `null` when unset; Go's client sends
    /// `resize: null` with a signal command.
    #[test]
    fn exec_bodies_as_ops_and_go_write_them() {
        let body = r#"{"command": ["echo", "hi"], "service-context": null, "environment": {},
            "working-dir": null, "timeout": null, "user-id": null, "user": null,
            "group-id": null, "group": null, "split-stderr": true}"#;
        assert_eq!(
            decode::<ExecRequest>(body),
            ExecRequest {
                command: vec!["echo".into(), "hi".into()],
                split_stderr: true,
                ..ExecRequest::default()
            }
        );
        assert_eq!(
            decode::<ExecCommand>(r#"{"command": "signal", "signal": {"name": "SIGINT"}}"#),
            ExecCommand {
                command: "signal".into(),
                signal: Some(ExecSignal {
                    name: "SIGINT".into()
                }),
                resize: None,
            }
        );
        assert_eq!(
            decode::<ExecCommand>(
                r#"{"command":"resize","signal":null,"resize":{"width":80,"height":24}}"#
            )
            .resize,
            Some(ExecResize {
                width: 80,
                height: 24
            })
        );
        assert_eq!(
            serde_json::to_string(&ExecCommand::end()).unwrap(),
            r#"{"command":"end"}"#
        );
    }

    #[test]
    fn exec_result_keys_are_sorted_like_a_go_map() {
        let result = ExecResult {
            environment: [("PATH".to_string(), "/bin".to_string())].into(),
            task_id: "3".into(),
            working_dir: "/root".into(),
        };
        assert_eq!(
            serde_json::to_string(&result).unwrap(),
            r#"{"environment":{"PATH":"/bin"},"task-id":"3","working-dir":"/root"}"#
        );
    }

    /// `null` is the zero value; a value of the wrong type is still an error, as in Go.
    #[test]
    fn wrong_types_are_still_refused() {
        for body in [r#"{"action":"start","services":"svc"}"#, r#"{"action":7}"#] {
            assert!(
                serde_json::from_str::<ServicesAction>(body).is_err(),
                "{body}"
            );
        }
    }

    /// The control messages as Pebble's Go client writes them, key order included.
    #[test]
    fn control_messages_as_pebbles_client_writes_them() {
        let signal = ExecCommand {
            command: "signal".into(),
            signal: Some(ExecSignal {
                name: "SIGINT".into(),
            }),
            resize: None,
        };
        assert_eq!(
            serde_json::to_string(&signal).unwrap(),
            r#"{"command":"signal","signal":{"name":"SIGINT"}}"#
        );
        let resize = ExecCommand {
            command: "resize".into(),
            signal: None,
            resize: Some(ExecResize {
                width: 120,
                height: 40,
            }),
        };
        assert_eq!(
            serde_json::to_string(&resize).unwrap(),
            r#"{"command":"resize","resize":{"width":120,"height":40}}"#
        );
    }

    #[test]
    fn service_info_is_written_in_pebbles_field_order_and_omits_empty_fields() {
        let mut info = ServiceInfo {
            name: "web".into(),
            startup: "enabled".into(),
            current: "inactive".into(),
            current_since: None,
            scheduled: None,
            reason: None,
            details: None,
        };
        assert_eq!(
            serde_json::to_string(&info).unwrap(),
            r#"{"name":"web","startup":"enabled","current":"inactive"}"#
        );
        info.current_since = Some("2024-01-01T00:00:00Z".into());
        info.scheduled = Some("2024-01-01T00:01:00Z".into());
        info.reason = Some("waiting for /x".into());
        info.details = Some(ServiceDetails {
            start_count: 2,
            ..ServiceDetails::default()
        });
        let json = serde_json::to_string(&info).unwrap();
        assert_eq!(
            json,
            r#"{"name":"web","startup":"enabled","current":"inactive","current-since":"2024-01-01T00:00:00Z","scheduled":"2024-01-01T00:01:00Z","reason":"waiting for /x","details":{"start-count":2,"backoff-count":0}}"#
        );
        assert_eq!(serde_json::from_str::<ServiceInfo>(&json).unwrap(), info);
        assert_eq!(serde_json::to_string(&info.borrowed()).unwrap(), json);
    }
}

/// One line of service output, as `GET /v1/logs` streams it (one JSON object per line).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct LogEntry {
    /// RFC 3339 time the line was read, in UTC with up to millisecond precision, trailing
    /// zeros trimmed as Go writes it (`2021-04-23T01:28:52.66Z`).
    pub time: String,
    /// The service that wrote it.
    pub service: String,
    /// The line, without its newline.
    pub message: String,
}

/// A [`LogEntry`] made of borrowed parts, with the same JSON, for the daemon's stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct LogEntryRef<'a> {
    /// See [`LogEntry::time`].
    pub time: &'a str,
    /// See [`LogEntry::service`].
    pub service: &'a str,
    /// See [`LogEntry::message`].
    pub message: &'a str,
}
