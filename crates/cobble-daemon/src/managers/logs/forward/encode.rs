//! What each kind of receiver is sent for a batch of entries, in the shapes Pebble sends.
//!
//! - Loki: one push-API stream per service (and label set), labelled with the target's
//!   labels plus `pebble_service`; each value is `[unix nanoseconds, line]`.
//! - OpenTelemetry: OTLP/HTTP JSON, one `resourceLogs` per service whose resource attributes
//!   are `service.name` then the labels sorted by name, with one scope named `pebble`.
//! - Syslog: RFC 5424 messages, priority 13 (user, notice), the service as APP-NAME, and
//!   the labels as structured data with the ID `pebble@28978`.

use std::sync::Arc;

use serde::Serialize;

use super::queue::{Entry, Labels};

/// The automatic Loki label naming the service.
pub(crate) const LOKI_SERVICE_LABEL: &str = "pebble_service";
/// The automatic OpenTelemetry resource attribute naming the service.
pub(crate) const OTEL_SERVICE_ATTRIBUTE: &str = "service.name";
/// The structured-data ID of syslog labels: Canonical's private enterprise number.
pub(crate) const SYSLOG_SD_ID: &str = "pebble@28978";
/// The instrumentation scope of OpenTelemetry records.
const OTEL_SCOPE: &str = "pebble";
/// Syslog priority: facility 1 (user-level) times 8, plus severity 5 (notice).
const SYSLOG_PRIORITY: u8 = 13;

/// Entries grouped by service and label set, in order of first appearance.
fn streams(entries: &[Entry]) -> Vec<(&Arc<str>, &Arc<Labels>, Vec<&Entry>)> {
    let mut groups: Vec<(&Arc<str>, &Arc<Labels>, Vec<&Entry>)> = Vec::new();
    for entry in entries {
        let found = groups.iter_mut().find(|(service, labels, _)| {
            **service == entry.service && Arc::ptr_eq(labels, &entry.labels)
        });
        match found {
            Some((_, _, members)) => members.push(entry),
            None => groups.push((&entry.service, &entry.labels, vec![entry])),
        }
    }
    groups.sort_by(|a, b| a.0.cmp(b.0));
    groups
}

fn unix_nanos(entry: &Entry) -> String {
    entry.time.as_nanosecond().to_string()
}

#[derive(Serialize)]
struct LokiPush<'a> {
    streams: Vec<LokiStream<'a>>,
}

#[derive(Serialize)]
struct LokiStream<'a> {
    stream: Labels,
    values: Vec<(String, &'a str)>,
}

/// A Loki push request body.
pub(crate) fn loki(entries: &[Entry]) -> Vec<u8> {
    let push = LokiPush {
        streams: streams(entries)
            .into_iter()
            .map(|(service, labels, members)| {
                let mut stream = (**labels).clone();
                stream.insert(LOKI_SERVICE_LABEL.to_owned(), service.to_string());
                LokiStream {
                    stream,
                    values: members
                        .iter()
                        .map(|e| (unix_nanos(e), e.message.as_str()))
                        .collect(),
                }
            })
            .collect(),
    };
    serde_json::to_vec(&push).unwrap_or_default()
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct OtlpLogs<'a> {
    resource_logs: Vec<ResourceLogs<'a>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ResourceLogs<'a> {
    resource: Resource<'a>,
    scope_logs: Vec<ScopeLogs<'a>>,
}

#[derive(Serialize)]
struct Resource<'a> {
    attributes: Vec<KeyValue<'a>>,
}

#[derive(Serialize)]
struct KeyValue<'a> {
    key: &'a str,
    value: AnyValue<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct AnyValue<'a> {
    string_value: &'a str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ScopeLogs<'a> {
    scope: Scope,
    log_records: Vec<LogRecord<'a>>,
}

#[derive(Serialize)]
struct Scope {
    name: &'static str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct LogRecord<'a> {
    time_unix_nano: String,
    body: AnyValue<'a>,
}

/// An OTLP/HTTP JSON logs request body.
pub(crate) fn opentelemetry(entries: &[Entry]) -> Vec<u8> {
    let body = OtlpLogs {
        resource_logs: streams(entries)
            .into_iter()
            .map(|(service, labels, members)| {
                let mut attributes = vec![KeyValue {
                    key: OTEL_SERVICE_ATTRIBUTE,
                    value: AnyValue {
                        string_value: service,
                    },
                }];
                attributes.extend(labels.iter().map(|(key, value)| KeyValue {
                    key,
                    value: AnyValue {
                        string_value: value,
                    },
                }));
                ResourceLogs {
                    resource: Resource { attributes },
                    scope_logs: vec![ScopeLogs {
                        scope: Scope { name: OTEL_SCOPE },
                        log_records: members
                            .iter()
                            .map(|e| LogRecord {
                                time_unix_nano: unix_nanos(e),
                                body: AnyValue {
                                    string_value: &e.message,
                                },
                            })
                            .collect(),
                    }],
                }
            })
            .collect(),
    };
    serde_json::to_vec(&body).unwrap_or_default()
}

/// One RFC 5424 message, without framing.
pub(crate) fn syslog_message(entry: &Entry, hostname: &str) -> String {
    use std::fmt::Write;
    let mut out = format!(
        "<{SYSLOG_PRIORITY}>1 {} {hostname} {} - - [{SYSLOG_SD_ID}",
        rfc3339_nanos(entry.time),
        entry.service
    );
    for (key, value) in entry.labels.iter() {
        let _ = write!(out, " {key}=\"");
        for c in value.chars() {
            if matches!(c, '"' | '\\' | ']') {
                out.push('\\');
            }
            out.push(c);
        }
        out.push('"');
    }
    out.push_str("] ");
    out.push_str(&entry.message);
    out
}

/// Messages framed by octet counting (RFC 6587), as a stream transport carries them.
pub(crate) fn syslog_octet_counted(entries: &[Entry], hostname: &str) -> Vec<u8> {
    let mut out = Vec::new();
    for entry in entries {
        let message = syslog_message(entry, hostname);
        out.extend_from_slice(format!("{} ", message.len()).as_bytes());
        out.extend_from_slice(message.as_bytes());
    }
    out
}

/// UTC RFC 3339 with as many fractional digits as needed, as Go's `RFC3339Nano` writes it.
fn rfc3339_nanos(time: jiff::Timestamp) -> String {
    let seconds = time.strftime("%Y-%m-%dT%H:%M:%S").to_string();
    let nanos = time.subsec_nanosecond();
    if nanos == 0 {
        return format!("{seconds}Z");
    }
    let fraction = format!("{nanos:09}");
    format!("{seconds}.{}Z", fraction.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(service: &str, nanos: i128, message: &str, labels: &Arc<Labels>) -> Entry {
        Entry {
            time: jiff::Timestamp::from_nanosecond(nanos).unwrap(),
            service: service.into(),
            message: message.into(),
            labels: labels.clone(),
        }
    }

    fn labels(pairs: &[(&str, &str)]) -> Arc<Labels> {
        Arc::new(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    #[test]
    fn loki_streams_per_service_with_the_service_label() {
        let a = labels(&[("env", "prod")]);
        let b = labels(&[]);
        let body = loki(&[
            entry("svc2", 1_700_000_000_000_000_001, "two", &b),
            entry("svc1", 1_700_000_000_000_000_002, "one", &a),
            entry("svc2", 1_700_000_000_000_000_003, "three", &b),
        ]);
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"streams": [
                {"stream": {"env": "prod", "pebble_service": "svc1"},
                 "values": [["1700000000000000002", "one"]]},
                {"stream": {"pebble_service": "svc2"},
                 "values": [["1700000000000000001", "two"], ["1700000000000000003", "three"]]},
            ]})
        );
    }

    #[test]
    fn otlp_resource_per_service_with_service_name_first() {
        let l = labels(&[("zone", "a"), ("app", "x")]);
        let body = opentelemetry(&[entry("web", 5, "hello", &l)]);
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"resourceLogs": [{
                "resource": {"attributes": [
                    {"key": "service.name", "value": {"stringValue": "web"}},
                    {"key": "app", "value": {"stringValue": "x"}},
                    {"key": "zone", "value": {"stringValue": "a"}},
                ]},
                "scopeLogs": [{"scope": {"name": "pebble"},
                               "logRecords": [{"timeUnixNano": "5", "body": {"stringValue": "hello"}}]}],
            }]})
        );
    }

    #[test]
    fn syslog_frames_like_rfc_5424_with_octet_counting() {
        let l = labels(&[("version", "0.0.1"), ("env", "a\"b]c\\")]);
        let none = labels(&[]);
        let t = 1_703_998_800_123_456_789; // 2023-12-31T05:00:00.123456789Z
        let framed = syslog_octet_counted(
            &[
                entry("svc1", t, "hello", &l),
                entry("svc4", t - 123_456_789 + 500_000_000, "multi\nline", &none),
            ],
            "host1",
        );
        let first = r#"<13>1 2023-12-31T05:00:00.123456789Z host1 svc1 - - [pebble@28978 env="a\"b\]c\\" version="0.0.1"] hello"#;
        let second = "<13>1 2023-12-31T05:00:00.5Z host1 svc4 - - [pebble@28978] multi\nline";
        assert_eq!(
            String::from_utf8(framed).unwrap(),
            format!("{} {first}{} {second}", first.len(), second.len())
        );
    }
}
