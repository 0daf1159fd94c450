//! The daemon's own log, in Pebble's layout, and Pebble's security events.
//!
//! Every line on stderr is `<time> [pebble] <message>`: the time in UTC with milliseconds
//! (`2006-01-02T15:04:05.000Z`), then `DEBUG ` before debug messages, which appear only with
//! `PEBBLE_DEBUG=1`. The name in brackets is Pebble's, not cobble's, because log scrapers and
//! black-box tests written for Pebble match on it.
//!
//! Security events follow the OWASP logging vocabulary as Pebble applies it: an ordinary log
//! line whose message is one JSON object with `type`, `datetime`, `level`, `event`,
//! `description` and `appid`, in that order. [`security`] is the one way to log them. Most
//! are WARN; a request refused to somebody (`authz_fail` naming a user) is CRITICAL.
//!
//! Every API request but the polled `GET`s Pebble leaves out (`/v1/changes/{id}`,
//! `/v1/system-info`, `/v1/health`) is logged as Pebble's request line:
//! `POST /v1/services 1.205077ms 202 (http+unix)`, the TCP peer's address first over
//! `--http` and `--https`, the time taken in Go's duration format. With `PEBBLE_DEBUG=1` a
//! request over the unix socket is also logged with the peer's pid and uid, at debug level,
//! as Pebble does. A [`RequestLine`] holds only what the request's task copies cheaply; its
//! text is built on the writer thread ([`crate::sink::Record`]).
//!
//! Formatting is kept apart from writing: [`format_line`] builds a line; the tracing layer that
//! [`init`] installs calls it and hands each line to [`stderr`], a bounded queue written by
//! its own thread ([`crate::sink::Sink`]), so a stalled stderr never blocks the thread that
//! logs. The daemon's two streams are made here, with the line each writes in place of the
//! lines it had to drop: [`stderr`] for the daemon log, [`stdout`] for service output under
//! `--verbose`.

use std::fmt::{self, Write as _};
use std::net::SocketAddr;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use jiff::Timestamp;
use serde::Serialize;
use tracing::field::{Field, Visit};
use tracing::level_filters::LevelFilter;
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, MakeWriter};
use tracing_subscriber::registry::LookupSpan;

use cobble_client::time::{format_utc_millis, format_utc_secs};

use crate::sink::Sink;

/// The name in brackets on every line, and the `appid` of security events.
const APP_ID: &str = "pebble";

/// One log line for `message` at the present time, newline included, for text written
/// outside `tracing` (the output queues' notices, panics).
pub(crate) fn line_now(message: &str) -> String {
    let mut line = String::with_capacity(32 + message.len());
    format_line(&mut line, Timestamp::now(), false, message);
    line
}

/// Appends one log line, newline included, to `out`.
pub(crate) fn format_line(out: &mut String, time: Timestamp, debug: bool, message: &str) {
    out.push_str(&format_utc_millis(time));
    out.push_str(" [");
    out.push_str(APP_ID);
    out.push_str("] ");
    if debug {
        out.push_str("DEBUG ");
    }
    out.push_str(message);
    // A message that already ends its line does not get an empty one after it.
    if !message.ends_with('\n') {
        out.push('\n');
    }
}

/// The tracing event format: the message, then any other fields as ` key=value`.
struct DaemonFormat;

impl<S, N> FormatEvent<S, N> for DaemonFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut message = MessageText::default();
        event.record(&mut message);
        message.text.push_str(&message.fields);
        let mut line = String::with_capacity(32 + message.text.len());
        let debug = *event.metadata().level() == Level::DEBUG;
        format_line(&mut line, Timestamp::now(), debug, &message.text);
        writer.write_str(&line)
    }
}

#[derive(Default)]
struct MessageText {
    text: String,
    fields: String,
}

impl Visit for MessageText {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.text.push_str(value);
        } else {
            let _ = write!(self.fields, " {}={value:?}", field.name());
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.text, "{value:?}");
        } else {
            let _ = write!(self.fields, " {}={value:?}", field.name());
        }
    }
}

/// Whether request lines are logged: [`REQUESTS_OFF`], [`REQUESTS_ON`], or
/// [`REQUESTS_DEBUG`] (with the debug line before each).
static REQUESTS: AtomicU8 = AtomicU8::new(REQUESTS_OFF);
const REQUESTS_OFF: u8 = 0;
const REQUESTS_ON: u8 = 1;
const REQUESTS_DEBUG: u8 = 2;

/// The unix socket's path, which debug request lines name.
static SOCKET_PATH: OnceLock<String> = OnceLock::new();

/// Records the unix socket's path for the debug request lines.
pub(crate) fn set_socket_path(path: &std::path::Path) {
    let _ = SOCKET_PATH.set(path.display().to_string());
}

/// Whether API requests are logged (the logger is installed and not silent).
pub(crate) fn logs_requests() -> bool {
    REQUESTS.load(Ordering::Relaxed) != REQUESTS_OFF
}

/// Installs the daemon logger on stderr (once; later calls are no-ops); a silent logger
/// writes nothing at all.
pub(crate) fn init(debug: bool, silent: bool) {
    let requests = match (silent, debug) {
        (true, _) => REQUESTS_OFF,
        (false, true) => REQUESTS_DEBUG,
        (false, false) => REQUESTS_ON,
    };
    REQUESTS.store(requests, Ordering::Relaxed);
    let level = match (silent, debug) {
        (true, _) => LevelFilter::OFF,
        (false, true) => LevelFilter::DEBUG,
        (false, false) => LevelFilter::INFO,
    };
    let _ = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(StderrLines)
        .event_format(DaemonFormat)
        .try_init();
    // A panic message goes through the same queue: the default hook writes to stderr
    // directly and would block a panicking worker on a stalled stream.
    std::panic::set_hook(Box::new(|info| {
        stderr().text(line_now(&format!("panic: {info}")).as_bytes());
        if let Some(location) = info.location()
            && let Ok(mut last) = LAST_PANIC.lock()
        {
            *last = Some(location.to_string());
        }
        // What the daemon asked a panic to do besides (a new program that panics before it
        // has taken over executes back into its predecessor).
        if let Some(action) = ON_PANIC.get() {
            action(info);
        }
    }));
}

/// What a panic does after it is logged, set once by the daemon.
static ON_PANIC: OnceLock<fn(&std::panic::PanicHookInfo<'_>)> = OnceLock::new();

/// Has every panic, once logged, call `action` (the first call only sets it).
pub(crate) fn on_panic(action: fn(&std::panic::PanicHookInfo<'_>)) {
    let _ = ON_PANIC.set(action);
}

/// Where the latest panic happened (`file:line:column`).
static LAST_PANIC: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

/// Where the latest panic happened, for the line that reports a task ended by it.
pub(crate) fn last_panic_location() -> Option<String> {
    LAST_PANIC.lock().ok()?.clone()
}

/// Hands each formatted event to the stderr queue as one piece.
struct StderrLines;

/// One event's text, queued on stderr when the formatter is done with it.
#[derive(Default)]
struct EventText(Vec<u8>);

impl std::io::Write for EventText {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for EventText {
    fn drop(&mut self) {
        if !self.0.is_empty() {
            stderr().text(&self.0);
        }
    }
}

impl<'a> MakeWriter<'a> for StderrLines {
    type Writer = EventText;

    fn make_writer(&'a self) -> EventText {
        EventText::default()
    }
}

/// Who made a request, as Pebble names them in security events: the identity's name when
/// an identity matched, else the peer's uid on the unix socket.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct User {
    name: Option<String>,
    uid: Option<u32>,
}

impl User {
    /// The user an identity names.
    pub(crate) fn named(name: String) -> User {
        User {
            name: Some(name),
            uid: None,
        }
    }

    /// A local user no identity names (or nobody known, over TCP).
    pub(crate) fn uid(uid: Option<u32>) -> User {
        User { name: None, uid }
    }
}

impl fmt::Display for User {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.name, self.uid) {
            (Some(name), _) => f.write_str(name),
            (None, Some(uid)) => write!(f, "{uid}"),
            (None, None) => f.write_str("<unknown>"),
        }
    }
}

/// A security event, named and described as Pebble logs it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum SecurityEvent<'a> {
    /// The daemon, run by `uid`, is starting.
    Startup { uid: u32 },
    /// The daemon, run by `uid`, is shutting down.
    Shutdown { uid: u32 },
    /// An admin is adding a layer through the API.
    AddLayer { user: &'a User, label: &'a str },
    /// An admin is writing a file through the API.
    PushFile { user: &'a User, path: &'a str },
    /// An admin is reading a file through the API.
    PullFile { user: &'a User, path: &'a str },
    /// A request by somebody was refused for lack of access.
    AuthzFail { user: &'a User, path: &'a str },
    /// A client certificate equal to the `cert` identity `name`'s failed verification as a
    /// self-signed client certificate.
    CertificateNotVerified { name: &'a str, error: &'a str },
    /// An admin is stopping a health check.
    MonitorDisabled { user: &'a User, check: &'a str },
    /// An admin is running a command through the exec API.
    Exec { user: &'a User, command: &'a str },
    /// An admin added an identity.
    UserCreated {
        user: &'a User,
        name: &'a str,
        access: &'a str,
    },
    /// An admin changed an identity.
    UserUpdated {
        user: &'a User,
        name: &'a str,
        access: &'a str,
    },
    /// An admin removed an identity.
    UserDeleted { user: &'a User, name: &'a str },
}

impl SecurityEvent<'_> {
    /// The event's level: CRITICAL for a refusal, WARN for everything else.
    fn level(&self) -> &'static str {
        match self {
            SecurityEvent::AuthzFail { .. } => "CRITICAL",
            _ => "WARN",
        }
    }

    /// The event with its argument (`name:arg`), and the description.
    fn text(&self) -> (String, String) {
        match *self {
            SecurityEvent::Startup { uid } => {
                (format!("sys_startup:{uid}"), "Starting daemon".into())
            }
            SecurityEvent::Shutdown { uid } => {
                (format!("sys_shutdown:{uid}"), "Shutting down daemon".into())
            }
            SecurityEvent::AddLayer { user, label } => (
                format!("authz_admin:{user},add_layer"),
                format!("Adding layer {label}"),
            ),
            SecurityEvent::PushFile { user, path } => (
                format!("authz_admin:{user},push_file"),
                format!("Pushing file {path}"),
            ),
            SecurityEvent::PullFile { user, path } => (
                format!("authz_admin:{user},pull_file"),
                format!("Pulling file {path}"),
            ),
            SecurityEvent::AuthzFail { user, path } => (
                format!("authz_fail:{user},{path}"),
                format!("User {user} not authorized to access {path}"),
            ),
            SecurityEvent::CertificateNotVerified { name, error } => (
                format!("authz_fail:{name}"),
                format!(
                    "client certificate matched stored identity but failed self-signed verification: {error}"
                ),
            ),
            SecurityEvent::MonitorDisabled { user, check } => (
                format!("sys_monitor_disabled:{user},{check}"),
                format!("Stopping check {check}"),
            ),
            SecurityEvent::Exec { user, command } => (
                format!("authz_admin:{user},exec"),
                format!("Executing command {command}"),
            ),
            SecurityEvent::UserCreated { user, name, access } => (
                format!("user_created:{user},{name},{access}"),
                format!("Creating {access} user {name}"),
            ),
            SecurityEvent::UserUpdated { user, name, access } => (
                format!("user_updated:{user},{name},{access}"),
                format!("Updating {access} user {name}"),
            ),
            SecurityEvent::UserDeleted { user, name } => (
                format!("user_deleted:{user},{name}"),
                format!("Deleting user {name}"),
            ),
        }
    }
}

/// The JSON object of a security event; parsers depend on the field order.
#[derive(Serialize)]
struct SecurityRecord<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    datetime: String,
    level: &'static str,
    event: &'a str,
    description: &'a str,
    appid: &'static str,
}

/// The log message of `event` happening at `time`.
pub(crate) fn security_message(time: Timestamp, event: &SecurityEvent<'_>) -> String {
    let (name, description) = event.text();
    let record = SecurityRecord {
        kind: "security",
        datetime: format_utc_secs(time),
        level: event.level(),
        event: &name,
        description: &description,
        appid: APP_ID,
    };
    let json = serde_json::to_string(&record).expect("a record of strings serialises");
    // Go's encoder escapes the two JavaScript line terminators even with HTML escaping off;
    // a consumer splitting on them must see the same line Pebble would write.
    if json.contains(['\u{2028}', '\u{2029}']) {
        json.replace('\u{2028}', "\\u2028")
            .replace('\u{2029}', "\\u2029")
    } else {
        json
    }
}

/// Logs a security event as one line of the daemon log.
pub(crate) fn security(event: SecurityEvent<'_>) {
    let message = security_message(Timestamp::now(), &event);
    tracing::info!("{message}");
}

/// The peer of a logged request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Remote {
    /// The unix socket, with the peer's credentials.
    Unix { pid: Option<i32>, uid: Option<u32> },
    /// TCP, with the peer's address.
    Tcp(Option<SocketAddr>),
}

/// One API request, for its line in the daemon log.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RequestLine {
    /// When it was answered.
    pub at: Timestamp,
    /// `GET`, `POST`, ...
    pub method: axum::http::Method,
    /// The path and query, as the client sent them.
    pub target: String,
    /// From the request's arrival at the router to its answer (for a streamed body, to the
    /// body's end).
    pub elapsed: Duration,
    /// The status answered; a websocket upgrade counts as 200, as in Pebble (which hands
    /// the connection over without writing a status of its own).
    pub status: u16,
    /// `http+unix`, `http` or `https`.
    pub transport: &'static str,
    pub remote: Remote,
}

/// Whether Pebble logs a request: every one but the `GET`s clients poll, so that polling
/// does not fill the log (`GET /v1/changes/{id}`, `/v1/system-info`, `/v1/health`).
pub(crate) fn request_is_logged(method: &axum::http::Method, path: &str) -> bool {
    if method != axum::http::Method::GET {
        return true;
    }
    let polled_change =
        path.starts_with("/v1/changes/") && path.bytes().filter(|&b| b == b'/').count() == 3;
    !(polled_change || path == "/v1/system-info" || path == "/v1/health")
}

/// Queues `line` for the daemon log, if requests are logged.
pub(crate) fn request(line: RequestLine) {
    if logs_requests() {
        stderr().record(line);
    }
}

impl RequestLine {
    /// `METHOD target duration status (transport)`, the message of the line.
    fn message(&self, out: &mut Vec<u8>) {
        let nanos = i64::try_from(self.elapsed.as_nanos()).unwrap_or(i64::MAX);
        out.extend_from_slice(self.method.as_str().as_bytes());
        out.push(b' ');
        out.extend_from_slice(self.target.as_bytes());
        out.push(b' ');
        out.extend_from_slice(cobble_plan::format_duration(nanos).as_bytes());
        // A status is three digits.
        let status = self.status.min(999);
        out.extend_from_slice(&[
            b' ',
            b'0' + (status / 100) as u8,
            b'0' + (status / 10 % 10) as u8,
            b'0' + (status % 10) as u8,
            b' ',
            b'(',
        ]);
        out.extend_from_slice(self.transport.as_bytes());
        out.push(b')');
    }

    /// Appends the log's text for this request: the line itself, after the debug line when
    /// that is on. Built straight into the writer's buffer.
    fn write_to(&self, out: &mut Vec<u8>, debug: bool) {
        use std::io::Write as _;
        let start = |out: &mut Vec<u8>, debug: bool| {
            cobble_client::time::append_utc_millis(out, self.at);
            out.extend_from_slice(b" [");
            out.extend_from_slice(APP_ID.as_bytes());
            out.extend_from_slice(if debug { b"] DEBUG " } else { b"] " });
        };
        match self.remote {
            Remote::Unix { pid, uid } => {
                if debug {
                    start(out, true);
                    let _ = write!(
                        out,
                        "pid={};uid={};socket={}; ",
                        pid.unwrap_or(0),
                        uid.unwrap_or(0),
                        SOCKET_PATH.get().map_or("", String::as_str)
                    );
                    self.message(out);
                    out.push(b'\n');
                }
                start(out, false);
            }
            Remote::Tcp(addr) => {
                start(out, false);
                if let Some(addr) = addr {
                    let _ = write!(out, "{} ", go_peer_address(addr));
                }
            }
        }
        self.message(out);
        out.push(b'\n');
    }

    /// The log's text for this request (see [`RequestLine::write_to`]).
    #[cfg(test)]
    pub(crate) fn text(&self, debug: bool) -> String {
        let mut out = Vec::with_capacity(128 + self.target.len());
        self.write_to(&mut out, debug);
        String::from_utf8_lossy(&out).into_owned()
    }
}

/// A TCP peer's address as Go's server names it: an IPv4 client of a dual-stack listener
/// (`--http :4000` listens on `[::]`) reaches it as `::ffff:127.0.0.1`, which Go writes as
/// the IPv4 address it is (`127.0.0.1:54321`).
fn go_peer_address(addr: SocketAddr) -> SocketAddr {
    match addr {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(v4.into(), v6.port()),
            None => addr,
        },
        SocketAddr::V4(_) => addr,
    }
}

impl crate::sink::Record for RequestLine {
    fn write(&self, out: &mut Vec<u8>) {
        self.write_to(out, REQUESTS.load(Ordering::Relaxed) == REQUESTS_DEBUG);
    }

    fn len_hint(&self) -> usize {
        80 + self.target.len()
    }
}

/// The daemon's stdout: service output under `--verbose`.
pub(crate) fn stdout() -> &'static Sink {
    static STDOUT: OnceLock<Sink> = OnceLock::new();
    STDOUT.get_or_init(|| {
        Sink::spawn("stdout", std::io::stdout(), |n| {
            let message = format!("Dropped {n} lines of service output: stdout was not keeping up");
            // In the daemon log too, where operators look for the daemon's own troubles.
            tracing::info!("{message}");
            line_now(&message).into_bytes()
        })
        .expect("cannot start the stdout writer thread")
    })
}

/// The daemon's stderr: its own log, with the request lines as records.
pub(crate) fn stderr() -> &'static Sink<RequestLine> {
    static STDERR: OnceLock<Sink<RequestLine>> = OnceLock::new();
    STDERR.get_or_init(|| {
        Sink::spawn("stderr", std::io::stderr(), |n| {
            line_now(&format!("Dropped {n} log lines: stderr was not keeping up")).into_bytes()
        })
        .expect("cannot start the stderr writer thread")
    })
}

/// Starts the stderr writer's thread now rather than at the first line, unless the log is
/// silent: start-up does it while it waits on the disk (see `daemon::run`).
pub(crate) fn start_stderr() {
    if logs_requests() {
        stderr();
    }
}

/// Writes out what is queued on both streams before the daemon exits, giving a stalled
/// stream at most `timeout` each.
pub(crate) fn flush_all(timeout: Duration) {
    stdout().flush(timeout);
    stderr().flush(timeout);
}

#[cfg(test)]
mod tests {
    use std::io;
    use std::sync::{Arc, Mutex};

    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn line(time: &str, debug: bool, message: &str) -> String {
        let mut out = String::new();
        format_line(&mut out, ts(time), debug, message);
        out
    }

    #[test]
    fn a_line_is_pebbles_time_name_and_message() {
        assert_eq!(
            line("2024-06-28T02:20:03.3469Z", false, "Started daemon."),
            "2024-06-28T02:20:03.346Z [pebble] Started daemon.\n"
        );
        assert_eq!(
            line("2024-06-28T02:20:03Z", true, "socket ready"),
            "2024-06-28T02:20:03.000Z [pebble] DEBUG socket ready\n"
        );
    }

    #[test]
    fn a_message_ending_in_a_newline_is_not_given_another() {
        assert_eq!(
            line(
                "2024-06-28T02:20:03Z",
                false,
                "Exiting on terminated signal.\n"
            ),
            "2024-06-28T02:20:03.000Z [pebble] Exiting on terminated signal.\n"
        );
    }

    #[test]
    fn the_current_time_has_go_s_millisecond_layout() {
        let mut out = String::new();
        format_line(&mut out, Timestamp::now(), false, "x");
        let stamp = out.split(' ').next().unwrap().as_bytes();
        // 2006-01-02T15:04:05.000Z
        assert_eq!(stamp.len(), 24, "{out}");
        for (i, b) in stamp.iter().enumerate() {
            let expected_digit = !matches!(i, 4 | 7 | 10 | 13 | 16 | 19 | 23);
            assert_eq!(b.is_ascii_digit(), expected_digit, "byte {i} of {out}");
        }
        assert_eq!(&stamp[19..20], b".");
        assert_eq!(&stamp[23..], b"Z");
        assert!(out.ends_with(" [pebble] x\n"), "{out}");
    }

    #[test]
    fn a_security_event_is_one_json_object_in_pebbles_field_order() {
        let message = security_message(
            ts("2025-10-06T09:12:26.508Z"),
            &SecurityEvent::Startup { uid: 0 },
        );
        assert_eq!(
            message,
            r#"{"type":"security","datetime":"2025-10-06T09:12:26Z","level":"WARN","event":"sys_startup:0","description":"Starting daemon","appid":"pebble"}"#
        );
    }

    #[test]
    fn events_name_their_argument_and_describe_the_action() {
        let admin = &User::uid(Some(1000));
        let cases = [
            (
                SecurityEvent::Shutdown { uid: 42 },
                "sys_shutdown:42",
                "Shutting down daemon",
            ),
            (
                SecurityEvent::AddLayer {
                    user: admin,
                    label: "web",
                },
                "authz_admin:1000,add_layer",
                "Adding layer web",
            ),
            (
                SecurityEvent::PushFile {
                    user: admin,
                    path: "/etc/app.conf",
                },
                "authz_admin:1000,push_file",
                "Pushing file /etc/app.conf",
            ),
            (
                SecurityEvent::PullFile {
                    user: admin,
                    path: "/etc/app.conf",
                },
                "authz_admin:1000,pull_file",
                "Pulling file /etc/app.conf",
            ),
            (
                SecurityEvent::Exec {
                    user: admin,
                    command: "/bin/sh",
                },
                "authz_admin:1000,exec",
                "Executing command /bin/sh",
            ),
            (
                SecurityEvent::AuthzFail {
                    user: &User::named("alice".into()),
                    path: "/v1/services",
                },
                "authz_fail:alice,/v1/services",
                "User alice not authorized to access /v1/services",
            ),
            (
                SecurityEvent::CertificateNotVerified {
                    name: "bob",
                    error: "x509: certificate specifies an incompatible key usage",
                },
                "authz_fail:bob",
                "client certificate matched stored identity but failed self-signed verification: x509: certificate specifies an incompatible key usage",
            ),
            (
                SecurityEvent::MonitorDisabled {
                    user: admin,
                    check: "ready",
                },
                "sys_monitor_disabled:1000,ready",
                "Stopping check ready",
            ),
        ];
        for (event, name, description) in cases {
            let message = security_message(Timestamp::UNIX_EPOCH, &event);
            let value: serde_json::Value = serde_json::from_str(&message).unwrap();
            assert_eq!(value["event"], name, "{message}");
            assert_eq!(value["description"], description, "{message}");
            let level = if name.starts_with("authz_fail:alice") {
                "CRITICAL"
            } else {
                "WARN"
            };
            assert_eq!(value["level"], level, "{message}");
        }
    }

    #[test]
    fn line_terminators_in_a_description_are_escaped_like_go() {
        let message = security_message(
            Timestamp::UNIX_EPOCH,
            &SecurityEvent::AddLayer {
                user: &User::uid(Some(0)),
                label: "a\u{2028}b<&>",
            },
        );
        assert!(
            message.contains(r#""description":"Adding layer a\u2028b<&>""#),
            "{message}"
        );
    }

    fn request(method: &str, target: &str, nanos: u64, remote: Remote) -> RequestLine {
        RequestLine {
            at: ts("2026-12-01T20:21:23.395Z"),
            method: method.parse().unwrap(),
            target: target.into(),
            elapsed: Duration::from_nanos(nanos),
            status: 202,
            transport: match remote {
                Remote::Unix { .. } => "http+unix",
                Remote::Tcp(_) => "http",
            },
            remote,
        }
    }

    #[test]
    fn a_request_line_is_pebbles() {
        let unix = Remote::Unix {
            pid: Some(2430),
            uid: Some(0),
        };
        assert_eq!(
            request("POST", "/v1/services", 1_810_531, unix).text(false),
            "2026-12-01T20:21:23.395Z [pebble] POST /v1/services 1.810531ms 202 (http+unix)\n"
        );
        assert_eq!(
            request(
                "GET",
                "/v1/metrics",
                58_307,
                Remote::Tcp(Some("127.0.0.1:41128".parse().unwrap()))
            )
            .text(false),
            "2026-12-01T20:21:23.395Z [pebble] 127.0.0.1:41128 GET /v1/metrics 58.307µs 202 (http)\n"
        );
        assert_eq!(
            request("GET", "/v1/changes/2/wait", 1_004_404_658, unix).text(false),
            "2026-12-01T20:21:23.395Z [pebble] GET /v1/changes/2/wait 1.004404658s 202 (http+unix)\n"
        );
    }

    #[test]
    fn an_ipv4_peer_of_a_dual_stack_listener_is_named_as_go_names_it() {
        let line = |peer: &str| {
            request(
                "GET",
                "/v1/services",
                52_000,
                Remote::Tcp(Some(peer.parse().unwrap())),
            )
            .text(false)
        };
        assert_eq!(
            line("[::ffff:127.0.0.1]:41128"),
            "2026-12-01T20:21:23.395Z [pebble] 127.0.0.1:41128 GET /v1/services 52µs 202 (http)\n"
        );
        // A real IPv6 peer keeps Go's brackets.
        assert_eq!(
            line("[::1]:41128"),
            "2026-12-01T20:21:23.395Z [pebble] [::1]:41128 GET /v1/services 52µs 202 (http)\n"
        );
    }

    #[test]
    fn with_debug_a_unix_request_is_also_logged_with_its_peer() {
        let unix = Remote::Unix {
            pid: Some(2430),
            uid: Some(0),
        };
        let text = request("POST", "/v1/exec", 35_628_159, unix).text(true);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(
            glob_like(
                lines[0],
                "2026-12-01T20:21:23.395Z [pebble] DEBUG pid=2430;uid=0;socket=",
                "; POST /v1/exec 35.628159ms 202 (http+unix)"
            ),
            "{text}"
        );
        assert_eq!(
            lines[1],
            "2026-12-01T20:21:23.395Z [pebble] POST /v1/exec 35.628159ms 202 (http+unix)"
        );
    }

    fn glob_like(line: &str, start: &str, end: &str) -> bool {
        line.starts_with(start) && line.ends_with(end)
    }

    #[test]
    fn polled_gets_are_not_logged() {
        let get = axum::http::Method::GET;
        let post = axum::http::Method::POST;
        assert!(!request_is_logged(&get, "/v1/changes/12"));
        assert!(!request_is_logged(&get, "/v1/system-info"));
        assert!(!request_is_logged(&get, "/v1/health"));
        assert!(request_is_logged(&get, "/v1/changes/12/wait"));
        assert!(request_is_logged(&get, "/v1/changes"));
        assert!(request_is_logged(&post, "/v1/changes/12"));
        assert!(request_is_logged(&post, "/v1/health"));
        assert!(request_is_logged(&get, "/v1/services"));
    }

    /// A writer that keeps what the tracing layer writes.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn the_tracing_layer_writes_formatted_lines() {
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(Level::DEBUG)
            .with_writer(move || writer.clone())
            .event_format(DaemonFormat)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!("Started daemon.");
            tracing::debug!(pid = 7, "reaped");
            security(SecurityEvent::Startup { uid: 0 });
        });
        let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(lines[0].ends_with("Z [pebble] Started daemon."), "{text}");
        assert!(
            lines[1].ends_with("Z [pebble] DEBUG reaped pid=7"),
            "{text}"
        );
        let (_, json) = lines[2].split_once(" [pebble] ").unwrap();
        let value: serde_json::Value = serde_json::from_str(json).unwrap();
        assert_eq!(value["event"], "sys_startup:0");
    }
}
