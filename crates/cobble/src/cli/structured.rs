//! `--format json` and `--format yaml`: the bytes Pebble's CLI writes, which are Go's
//! `encoding/json` and `gopkg.in/yaml.v3` applied to its client's structs.
//!
//! A command builds a [`Value`] shaped like the Go struct it prints: fields in declaration
//! order, `omitempty` already applied by the builder (Go's JSON and YAML omit different
//! things: `omitzero` times, `time.Duration` as nanoseconds in JSON and as `1h0m0s` in YAML),
//! maps with their keys sorted. [`Value::to_json`] and [`Value::to_yaml`] then lay it out.
//!
//! What the two encoders must match:
//!
//! - JSON is compact, one line, with Go's escapes: `<`, `>` and `&` as `\u003c`, `\u003e`,
//!   `\u0026`, U+2028 and U+2029 escaped, control characters as `\n`, `\r`, `\t`, `\b`, `\f`
//!   or `\u00XX`.
//! - YAML is yaml.v3's block layout with its 4-space indent, which yaml.v3 applies by
//!   rounding up to the next multiple of four: a mapping inside a sequence item starts two
//!   columns after the dash, and anything nested under one of its keys goes to the next
//!   multiple of four (`tasks:` at column 6 puts its items at column 8). Strings take the
//!   scalar style yaml.v3 picks (the same rules `cobble plan` follows); times are plain.

use std::fmt::Write as _;

use clap::ValueEnum;

use cobble_client::identities::Identity;
use cobble_client::types::{ChangeInfo, CheckInfo, NoticeInfo, TaskInfo};
use cobble_plan::duration::{format_duration, parse_duration};

use super::{Output, write_all};

/// The `--format` of the commands that offer one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub(super) enum Format {
    /// The command's own text.
    #[default]
    Text,
    /// One line of JSON.
    Json,
    /// YAML.
    Yaml,
}

impl Format {
    /// Whether the command prints its own text.
    pub(super) fn is_text(self) -> bool {
        self == Format::Text
    }

    /// Prints `value` as JSON (and a newline) or YAML; text formats are the command's own.
    pub(super) fn write(self, out: &mut Output, value: &Value) -> anyhow::Result<()> {
        match self {
            Format::Json => write_all(out, &(value.to_json() + "\n")),
            Format::Yaml => write_all(out, &value.to_yaml()),
            Format::Text => unreachable!("text is written by each command"),
        }
    }
}

/// A value as Go's encoders see it.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Value {
    /// `nil`: `null` in both.
    Null,
    Bool(bool),
    Int(i64),
    /// A number written as the daemon wrote it (a float, say).
    Number(String),
    Str(String),
    /// A `time.Time`, already in Go's RFC 3339 form ([`go_time`]): quoted in JSON, plain in
    /// YAML.
    Time(String),
    /// A slice.
    Seq(Vec<Value>),
    /// A struct (fields in order) or a map (keys sorted).
    Map(Vec<(String, Value)>),
}

impl Value {
    /// `json.Marshal`'s bytes, without the newline Pebble prints after them.
    pub(super) fn to_json(&self) -> String {
        let mut out = String::new();
        write_json(&mut out, self);
        out
    }

    /// `yaml.Marshal`'s text (it ends in a newline).
    pub(super) fn to_yaml(&self) -> String {
        let mut out = String::new();
        match self {
            Value::Map(entries) if !entries.is_empty() => yaml_entries(&mut out, entries, 0),
            Value::Seq(items) if !items.is_empty() => yaml_items(&mut out, items, 0),
            other => {
                out.push_str(&yaml_scalar(other).unwrap_or_default());
                out.push('\n');
            }
        }
        out
    }

    /// A string slice.
    pub(super) fn strings(items: &[String]) -> Value {
        Value::Seq(items.iter().cloned().map(Value::Str).collect())
    }

    /// A `map[string]string`, keys sorted.
    pub(super) fn string_map<'a>(map: impl IntoIterator<Item = (&'a String, &'a String)>) -> Value {
        let mut entries: Vec<(String, Value)> = map
            .into_iter()
            .map(|(k, v)| (k.clone(), Value::Str(v.clone())))
            .collect();
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        Value::Map(entries)
    }
}

/// The fields of one Go struct, in declaration order, with its `omitempty` rules spelled out.
#[derive(Debug, Default)]
#[must_use]
pub(super) struct Fields(Vec<(String, Value)>);

impl Fields {
    pub(super) fn new() -> Fields {
        Fields::default()
    }

    /// A field that is always there.
    pub(super) fn field(mut self, name: &str, value: Value) -> Fields {
        self.0.push((name.to_owned(), value));
        self
    }

    /// A string field, left out when empty.
    pub(super) fn str_omitempty(self, name: &str, value: &str) -> Fields {
        if value.is_empty() {
            self
        } else {
            self.field(name, Value::Str(value.to_owned()))
        }
    }

    /// A string field that is always there.
    pub(super) fn str(self, name: &str, value: &str) -> Fields {
        self.field(name, Value::Str(value.to_owned()))
    }

    /// A field left out when `value` is `None`.
    pub(super) fn some(self, name: &str, value: Option<Value>) -> Fields {
        match value {
            Some(value) => self.field(name, value),
            None => self,
        }
    }

    /// Fields of an embedded struct, inlined.
    pub(super) fn inline(mut self, other: Value) -> Fields {
        if let Value::Map(entries) = other {
            self.0.extend(entries);
        }
        self
    }

    pub(super) fn build(self) -> Value {
        Value::Map(self.0)
    }
}

/// A time as the daemon sent it, in the form Go's `time.Time` marshals to after parsing it:
/// RFC 3339 with as many fractional digits as needed (none when whole), `Z` for UTC, and the
/// offset it was written with otherwise. Text that is not a time is kept.
pub(super) fn go_time(rfc3339: &str) -> String {
    use jiff::fmt::temporal::{DateTimeParser, PiecesOffset};
    let Ok(timestamp) = rfc3339.parse::<jiff::Timestamp>() else {
        return rfc3339.to_owned();
    };
    let offset = DateTimeParser::new()
        .parse_pieces(rfc3339)
        .ok()
        .and_then(|p| match p.offset() {
            Some(PiecesOffset::Numeric(n)) => Some(n.offset()),
            _ => None,
        })
        .unwrap_or(jiff::tz::Offset::UTC);
    let zoned = timestamp.to_zoned_datetime(jiff::tz::TimeZone::fixed(offset));
    let mut out = zoned.strftime("%Y-%m-%dT%H:%M:%S").to_string();
    let nanos = zoned.subsec_nanosecond();
    if nanos != 0 {
        let digits = format!("{nanos:09}");
        out.push('.');
        out.push_str(digits.trim_end_matches('0'));
    }
    if offset == jiff::tz::Offset::UTC {
        out.push('Z');
    } else {
        out.push_str(&zoned.strftime("%:z").to_string());
    }
    out
}

fn write_json(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Int(n) => {
            let _ = write!(out, "{n}");
        }
        Value::Number(n) => out.push_str(n),
        Value::Str(s) | Value::Time(s) => json_string(out, s),
        Value::Seq(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_json(out, item);
            }
            out.push(']');
        }
        Value::Map(entries) => {
            out.push('{');
            for (i, (key, item)) in entries.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                json_string(out, key);
                out.push(':');
                write_json(out, item);
            }
            out.push('}');
        }
    }
}

/// A string as Go's `json.Marshal` writes it (HTML-safe).
pub(super) fn json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// yaml.v3's indentation for a block nested under a key at column `column`.
fn nested(column: usize) -> usize {
    4 * ((column + 4) / 4)
}

/// A scalar's text, or `None` for a value that is a block (a non-empty map or sequence).
fn yaml_scalar(value: &Value) -> Option<String> {
    Some(match value {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Int(n) => n.to_string(),
        Value::Number(n) => n.clone(),
        Value::Str(s) => cobble_plan::yaml_scalar(s),
        Value::Time(s) => s.clone(),
        Value::Seq(items) if items.is_empty() => "[]".into(),
        Value::Map(entries) if entries.is_empty() => "{}".into(),
        Value::Seq(_) | Value::Map(_) => return None,
    })
}

/// Writes a rendered scalar after `key: ` or `- `: a literal block's lines go at `column`.
fn yaml_write_scalar(out: &mut String, rendered: &str, column: usize) {
    let Some(body) = rendered.strip_prefix('|') else {
        out.push_str(rendered);
        out.push('\n');
        return;
    };
    let (header, lines) = body.split_once('\n').unwrap_or((body, ""));
    out.push('|');
    out.push_str(header);
    out.push('\n');
    for line in lines.strip_suffix('\n').unwrap_or(lines).split('\n') {
        if !line.is_empty() {
            out.extend(std::iter::repeat_n(' ', column));
            out.push_str(line);
        }
        out.push('\n');
    }
}

/// The entries of a mapping whose keys are at `column`; the first key's indentation is
/// written by the caller when the mapping is a sequence item (after its `- `).
fn yaml_entries(out: &mut String, entries: &[(String, Value)], column: usize) {
    for (i, (key, value)) in entries.iter().enumerate() {
        if i > 0 || !out.ends_with("- ") {
            out.extend(std::iter::repeat_n(' ', column));
        }
        out.push_str(&yaml_key(key));
        out.push(':');
        match yaml_scalar(value) {
            Some(rendered) => {
                out.push(' ');
                yaml_write_scalar(out, &rendered, nested(column));
            }
            None => {
                out.push('\n');
                match value {
                    Value::Map(inner) => yaml_entries(out, inner, nested(column)),
                    Value::Seq(items) => yaml_items(out, items, nested(column)),
                    _ => unreachable!("only blocks have no scalar form"),
                }
            }
        }
    }
}

/// The items of a sequence whose dashes are at `column`.
fn yaml_items(out: &mut String, items: &[Value], column: usize) {
    for item in items {
        out.extend(std::iter::repeat_n(' ', column));
        out.push_str("- ");
        match yaml_scalar(item) {
            Some(rendered) => yaml_write_scalar(out, &rendered, column + 2),
            None => match item {
                Value::Map(entries) => yaml_entries(out, entries, column + 2),
                Value::Seq(inner) => {
                    // A sequence directly in a sequence starts on the dash's line too.
                    let mut nested_out = String::new();
                    yaml_items(&mut nested_out, inner, column + 2);
                    out.push_str(nested_out.trim_start());
                }
                _ => unreachable!("only blocks have no scalar form"),
            },
        }
    }
}

/// A mapping key: block styles cannot be keys, so a multi-line key is double-quoted.
fn yaml_key(key: &str) -> String {
    let rendered = cobble_plan::yaml_scalar(key);
    if rendered.starts_with('|') {
        let mut quoted = String::new();
        json_string(&mut quoted, key);
        return quoted;
    }
    rendered
}

/// Go's `encoding/json` bytes of a `json.RawMessage` as a `[]byte` looks to yaml.v3: a
/// sequence of byte values (which is how Pebble prints a task's `data` in YAML).
pub(super) fn raw_json_bytes(value: &serde_json::Value) -> Value {
    let bytes = serde_json::to_vec(value).expect("JSON values serialise");
    Value::Seq(
        bytes
            .into_iter()
            .map(|b| Value::Int(i64::from(b)))
            .collect(),
    )
}

/// A JSON value from the daemon as a Go `json.RawMessage` re-marshals it: the same data,
/// compact, in the daemon's key order.
pub(super) fn raw_json(value: &serde_json::Value) -> Value {
    match value {
        serde_json::Value::Null => Value::Null,
        serde_json::Value::Bool(b) => Value::Bool(*b),
        serde_json::Value::Number(n) => match n.as_i64() {
            Some(i) => Value::Int(i),
            // Floats and large numbers keep the daemon's digits.
            None => Value::Number(n.to_string()),
        },
        serde_json::Value::String(s) => Value::Str(s.clone()),
        serde_json::Value::Array(items) => Value::Seq(items.iter().map(raw_json).collect()),
        serde_json::Value::Object(map) => {
            Value::Map(map.iter().map(|(k, v)| (k.clone(), raw_json(v))).collect())
        }
    }
}

/// The Go client's `Change`, as `changes` and `tasks` print it. (The change's own `data` is
/// private to the Go client, so it is never printed.)
pub(super) fn change(change: &ChangeInfo, format: Format) -> Value {
    let tasks: Vec<Value> = change.tasks.iter().map(|t| task(t, format)).collect();
    Fields::new()
        .str("id", &change.id)
        .str("kind", &change.kind)
        .str("summary", &change.summary)
        .str("status", &change.status)
        .some("tasks", (!tasks.is_empty()).then_some(Value::Seq(tasks)))
        .field("ready", Value::Bool(change.ready))
        .str_omitempty("err", &change.err)
        .field("spawn-time", Value::Time(go_time(&change.spawn_time)))
        .some("ready-time", change.ready_time.as_deref().map(time))
        .build()
}

/// The Go client's `Task`. Its `data` is raw JSON: re-marshalled as it is in JSON, and a list
/// of byte values in YAML.
pub(super) fn task(task: &TaskInfo, format: Format) -> Value {
    let data = task.data.as_ref().filter(|d| !d.is_empty()).map(|data| {
        Value::Map(
            data.iter()
                .map(|(key, value)| {
                    let value = match format {
                        Format::Yaml => raw_json_bytes(value),
                        _ => raw_json(value),
                    };
                    (key.clone(), value)
                })
                .collect(),
        )
    });
    Fields::new()
        .str("id", &task.id)
        .str("kind", &task.kind)
        .str("summary", &task.summary)
        .str("status", &task.status)
        .some(
            "log",
            (!task.log.is_empty()).then(|| Value::strings(&task.log)),
        )
        .field(
            "progress",
            Fields::new()
                .str("label", &task.progress.label)
                .field("done", int(task.progress.done))
                .field("total", int(task.progress.total))
                .build(),
        )
        .field("spawn-time", Value::Time(go_time(&task.spawn_time)))
        .some("ready-time", task.ready_time.as_deref().map(time))
        .some("data", data)
        .build()
}

/// The Go client's `CheckInfo`.
pub(super) fn check(check: &CheckInfo) -> Value {
    Fields::new()
        .str("name", &check.name)
        .str_omitempty("level", &check.level)
        .str("startup", &check.startup)
        .str("status", &check.status)
        .some("successes", check.successes.map(int))
        .field("failures", int(check.failures))
        .field("threshold", int(check.threshold))
        .str_omitempty("change-id", &check.change_id)
        .str_omitempty("prev-change-id", &check.prev_change_id)
        .build()
}

/// The Go client's `Notice`: durations as Go writes them (`1h0m0s`), left out when zero.
pub(super) fn notice(notice: &NoticeInfo) -> Value {
    let duration = |text: &Option<String>| {
        text.as_deref()
            .and_then(|t| parse_duration(t).ok())
            .filter(|nanos| *nanos != 0)
            .map(|nanos| Value::Str(format_duration(nanos)))
    };
    Fields::new()
        .str("id", &notice.id)
        .field(
            "user-id",
            notice.user_id.map_or(Value::Null, |u| int(u64::from(u))),
        )
        .str("type", &notice.kind)
        .str("key", &notice.key)
        .field("first-occurred", time(&notice.first_occurred))
        .field("last-occurred", time(&notice.last_occurred))
        .field("last-repeated", time(&notice.last_repeated))
        .field("occurrences", int(notice.occurrences))
        .some(
            "last-data",
            (!notice.last_data.is_empty()).then(|| Value::string_map(&notice.last_data)),
        )
        .some("repeat-after", duration(&notice.repeat_after))
        .some("expire-after", duration(&notice.expire_after))
        .build()
}

/// The Go client's `Identity`.
pub(super) fn identity(identity: &Identity) -> Value {
    Fields::new()
        .str("access", &identity.access)
        .some(
            "local",
            identity.local.as_ref().map(|local| {
                Fields::new()
                    .field(
                        "user-id",
                        local.user_id.map_or(Value::Null, |u| int(u64::from(u))),
                    )
                    .build()
            }),
        )
        .some(
            "basic",
            identity
                .basic
                .as_ref()
                .map(|basic| Fields::new().str("password", &basic.password).build()),
        )
        .some(
            "cert",
            identity
                .cert
                .as_ref()
                .map(|cert| Fields::new().str("pem", &cert.pem).build()),
        )
        .build()
}

/// A time the daemon sent, as a Go `time.Time`.
fn time(rfc3339: &str) -> Value {
    Value::Time(go_time(rfc3339))
}

/// A count (Go's `int`).
pub(super) fn int(n: u64) -> Value {
    Value::Int(i64::try_from(n).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(text: &str) -> Value {
        Value::Str(text.into())
    }

    #[test]
    fn json_escapes_like_go() {
        let value = s("<a & b>\n\u{2028}\u{1}\u{8}\"\\é");
        assert_eq!(
            value.to_json(),
            r#""\u003ca \u0026 b\u003e\n\u2028\u0001\b\"\\é""#
        );
    }

    #[test]
    fn json_is_compact_in_field_order() {
        let value = Fields::new()
            .str("b", "x")
            .field("a", Value::Int(-3))
            .field("l", Value::Seq(vec![]))
            .field("m", Value::Map(vec![]))
            .field("n", Value::Null)
            .field("t", Value::Bool(true))
            .build();
        assert_eq!(
            value.to_json(),
            r#"{"b":"x","a":-3,"l":[],"m":{},"n":null,"t":true}"#
        );
    }

    /// The layout of `pebble changes --format yaml`, as Pebble v1.32.1 printed it.
    #[test]
    fn yaml_nests_like_yaml_v3() {
        let task = Fields::new()
            .str("id", "1")
            .str("status", "Error")
            .field(
                "log",
                Value::strings(&["2026-12-01T20:25:39Z ERROR exit status 1; boom".into()]),
            )
            .field(
                "progress",
                Fields::new()
                    .str("label", "")
                    .field("done", Value::Int(1))
                    .build(),
            )
            .field(
                "spawn-time",
                Value::Time("2026-12-01T20:25:38.60156477Z".into()),
            )
            .field(
                "data",
                Fields::new()
                    .field("exit-code", raw_json_bytes(&serde_json::json!(0)))
                    .build(),
            )
            .build();
        let change = Fields::new()
            .str("id", "1")
            .field("tasks", Value::Seq(vec![task]))
            .field("ready", Value::Bool(true))
            .str(
                "err",
                "cannot perform the following tasks:\n- Perform (boom)",
            )
            .build();
        let value = Fields::new()
            .field("changes", Value::Seq(vec![change]))
            .build();
        assert_eq!(
            value.to_yaml(),
            "changes:\n    \
                 - id: \"1\"\n      \
                   tasks:\n        \
                     - id: \"1\"\n          \
                       status: Error\n          \
                       log:\n            \
                         - 2026-12-01T20:25:39Z ERROR exit status 1; boom\n          \
                       progress:\n            \
                         label: \"\"\n            \
                         done: 1\n          \
                       spawn-time: 2026-12-01T20:25:38.60156477Z\n          \
                       data:\n            \
                         exit-code:\n                \
                             - 48\n      \
                   ready: true\n      \
                   err: |-\n        \
                     cannot perform the following tasks:\n        \
                     - Perform (boom)\n"
        );
    }

    #[test]
    fn yaml_maps_in_maps_and_blocks_at_the_top() {
        let value = Fields::new()
            .field(
                "checks",
                Fields::new()
                    .field(
                        "chk",
                        Fields::new()
                            .str("name", "chk")
                            .str("change-id", "4")
                            .build(),
                    )
                    .build(),
            )
            .str("logs", "a\nb\n")
            .field("user-id", Value::Null)
            .field("empty", Value::Seq(vec![]))
            .build();
        assert_eq!(
            value.to_yaml(),
            "checks:\n    chk:\n        name: chk\n        change-id: \"4\"\n\
             logs: |\n    a\n    b\nuser-id: null\nempty: []\n"
        );
        assert_eq!(Value::Map(vec![]).to_yaml(), "{}\n");
    }

    #[test]
    fn go_time_trims_fractions_and_names_utc_z() {
        assert_eq!(
            go_time("2026-12-01T20:25:38.601564770Z"),
            "2026-12-01T20:25:38.60156477Z"
        );
        assert_eq!(go_time("2026-12-01T20:25:38+00:00"), "2026-12-01T20:25:38Z");
        assert_eq!(
            go_time("2026-12-01T20:25:38.5+02:00"),
            "2026-12-01T20:25:38.5+02:00"
        );
        assert_eq!(go_time("not a time"), "not a time");
    }
}
