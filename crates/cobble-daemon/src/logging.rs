//! The daemon's own log, in Pebble's layout, and Pebble's security events.
//!
//! Every line on stderr is `<time> [pebble] <message>`: the time in UTC with milliseconds
//! (`2006-01-02T15:04:05.000Z`), then `DEBUG ` before debug messages, which appear only with
//! `PEBBLE_DEBUG=1`. The name in brackets is Pebble's, not cobble's, because log scrapers and
//! black-box tests written for Pebble match on it.
//!
//! Security events follow the OWASP logging vocabulary as Pebble applies it: an ordinary log
//! line whose message is one JSON object with `type`, `datetime`, `level`, `event`,
//! `description` and `appid`, in that order. [`security`] is the one way to log them.
//!
//! Formatting is kept apart from writing: [`format_line`] builds a line; the tracing layer that
//! [`init`] installs calls it and hands each line to [`crate::output::stderr`], a bounded queue
//! written by its own thread, so a stalled stderr never blocks the thread that logs.

use std::fmt::{self, Write as _};

use jiff::Timestamp;
use serde::Serialize;
use tracing::field::{Field, Visit};
use tracing::level_filters::LevelFilter;
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, MakeWriter};
use tracing_subscriber::registry::LookupSpan;

use crate::state::{format_utc_millis, format_utc_secs};

/// The name in brackets on every line, and the `appid` of security events.
const APP_ID: &str = "pebble";

/// One log line for `message` at the present time, newline included, for text written
/// outside `tracing` (the output queues' notices, panics).
pub fn line_now(message: &str) -> String {
    let mut line = String::with_capacity(32 + message.len());
    format_line(&mut line, Timestamp::now(), false, message);
    line
}

/// Appends one log line, newline included, to `out`.
pub fn format_line(out: &mut String, time: Timestamp, debug: bool, message: &str) {
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

/// Installs the daemon logger on stderr (once; later calls are no-ops); a silent logger
/// writes nothing at all.
pub fn init(debug: bool, silent: bool) {
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
        crate::output::stderr().text(line_now(&format!("panic: {info}")).as_bytes());
    }));
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
            crate::output::stderr().text(&self.0);
        }
    }
}

impl<'a> MakeWriter<'a> for StderrLines {
    type Writer = EventText;

    fn make_writer(&'a self) -> EventText {
        EventText::default()
    }
}

/// Who made a request: the peer's uid on the unix socket, or nobody known (a TCP client).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct User(pub Option<u32>);

impl fmt::Display for User {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(uid) => write!(f, "{uid}"),
            None => f.write_str("unknown"),
        }
    }
}

/// A security event, named and described as Pebble logs it.
#[derive(Debug, Clone, Copy)]
pub enum SecurityEvent<'a> {
    /// The daemon, run by `uid`, is starting.
    Startup { uid: u32 },
    /// The daemon, run by `uid`, is shutting down.
    Shutdown { uid: u32 },
    /// An admin is adding a layer through the API.
    AddLayer { user: User, label: &'a str },
    /// An admin is writing a file through the API.
    PushFile { user: User, path: &'a str },
    /// An admin is reading a file through the API.
    PullFile { user: User, path: &'a str },
    /// A request was refused for lack of access.
    AuthzFail {
        user: User,
        method: &'a str,
        path: &'a str,
    },
    /// An admin is stopping a health check.
    MonitorDisabled { user: User, check: &'a str },
    /// An admin is running a command through the exec API.
    Exec { user: User, command: &'a str },
    /// An admin added an identity.
    UserCreated {
        user: User,
        name: &'a str,
        access: &'a str,
    },
    /// An admin changed an identity.
    UserUpdated {
        user: User,
        name: &'a str,
        access: &'a str,
    },
    /// An admin removed an identity.
    UserDeleted { user: User, name: &'a str },
}

impl SecurityEvent<'_> {
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
            SecurityEvent::AuthzFail { user, method, path } => (
                format!("authz_fail:{user},{path}"),
                format!("Access denied to {method} {path}"),
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
pub fn security_message(time: Timestamp, event: &SecurityEvent<'_>) -> String {
    let (name, description) = event.text();
    let record = SecurityRecord {
        kind: "security",
        datetime: format_utc_secs(time),
        // Pebble's vocabulary has CRITICAL too, but every event it logs is a WARN.
        level: "WARN",
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
pub fn security(event: SecurityEvent<'_>) {
    let message = security_message(Timestamp::now(), &event);
    tracing::info!("{message}");
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
        let admin = User(Some(1000));
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
                    user: User(None),
                    method: "POST",
                    path: "/v1/services",
                },
                "authz_fail:unknown,/v1/services",
                "Access denied to POST /v1/services",
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
            assert_eq!(value["level"], "WARN", "{message}");
        }
    }

    #[test]
    fn line_terminators_in_a_description_are_escaped_like_go() {
        let message = security_message(
            Timestamp::UNIX_EPOCH,
            &SecurityEvent::AddLayer {
                user: User(Some(0)),
                label: "a\u{2028}b<&>",
            },
        );
        assert!(
            message.contains(r#""description":"Adding layer a\u2028b<&>""#),
            "{message}"
        );
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
