//! What a log target's `location` and `labels` must look like for its type.
//!
//! Pebble accepts any location and any label name and finds out later, when every request
//! to the receiver fails or every batch is rejected. cobble accepts them too (a layer Pebble
//! takes is never refused), but works out when the plan is combined which targets can never
//! deliver and why: the plan keeps that ([`crate::Plan::log_target_problems`]), the daemon
//! logs it and sends nothing to such a target, and the services whose logs it would carry
//! say so in their notes.

use crate::LogTarget;

/// How a syslog target is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyslogTransport {
    /// RFC 5424 messages framed by octet counting (RFC 6587) on one connection.
    Tcp,
    /// One RFC 5424 message per datagram.
    Udp,
}

/// The `host:port` and transport of a syslog location such as `tcp://logs:514`; `None` when
/// it has another form.
pub fn syslog_address(location: &str) -> Option<(SyslogTransport, &str)> {
    let (scheme, rest) = location.split_once("://")?;
    let transport = match scheme.to_ascii_lowercase().as_str() {
        "tcp" => SyslogTransport::Tcp,
        "udp" => SyslogTransport::Udp,
        _ => return None,
    };
    let address = rest.strip_suffix('/').unwrap_or(rest);
    let (host, port) = address.rsplit_once(':')?;
    let host_ok = !host.is_empty() && !host.contains(['/', '?', '#', '@', ' ']);
    let port_ok = !port.is_empty() && port.parse::<u16>().is_ok();
    (host_ok && port_ok).then_some((transport, address))
}

/// Why an HTTP location cannot be used, if it cannot.
fn http_location_problem(location: &str) -> Option<String> {
    let Some((scheme, rest)) = location.split_once("://") else {
        return Some("missing scheme, must be \"http\" or \"https\"".to_owned());
    };
    if !matches!(scheme.to_ascii_lowercase().as_str(), "http" | "https") {
        return Some(format!(
            "unsupported scheme {}, must be \"http\" or \"https\"",
            crate::go_quote(scheme)
        ));
    }
    let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host = host.rsplit_once('@').map_or(host, |(_, h)| h);
    if host.is_empty() || host.starts_with(':') {
        return Some("missing host".to_owned());
    }
    None
}

/// Whether `name` is a label name Loki accepts (Prometheus' `[a-zA-Z_][a-zA-Z0-9_]*`).
fn is_loki_label(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Whether `name` is an RFC 5424 PARAM-NAME: 1 to 32 printable US-ASCII characters other
/// than `=`, space, `]` and `"`.
fn is_syslog_param_name(name: &str) -> bool {
    (1..=32).contains(&name.len())
        && name
            .bytes()
            .all(|b| (33..=126).contains(&b) && !matches!(b, b'=' | b']' | b'"'))
}

/// Why a combined target, whose type is known and whose location is set, can never deliver
/// anything; `None` when it can.
pub(crate) fn problem(target: &LogTarget) -> Option<String> {
    let location = match target.type_.as_str() {
        "syslog" => syslog_address(&target.location).is_none().then(|| {
            format!(
                "invalid syslog server location {}, must be in form \"tcp://host:port\" or \"udp://host:port\"",
                crate::go_quote(&target.location)
            )
        }),
        _ => http_location_problem(&target.location).map(|reason| {
            format!(
                "invalid location URL {}: {reason}",
                crate::go_quote(&target.location)
            )
        }),
    };
    if location.is_some() {
        return location;
    }
    let valid: fn(&str) -> bool = match target.type_.as_str() {
        "loki" => is_loki_label,
        "syslog" => is_syslog_param_name,
        _ => |label: &str| !label.is_empty(),
    };
    target
        .labels
        .keys()
        .find(|label| !valid(label))
        .map(|label| {
            format!(
                "invalid label name {} for type {}",
                crate::go_quote(label),
                crate::go_quote(&target.type_)
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(kind: &str, location: &str, labels: &[&str]) -> LogTarget {
        LogTarget {
            name: "t".into(),
            type_: kind.into(),
            location: location.into(),
            labels: labels.iter().map(|l| (l.to_string(), "v".into())).collect(),
            ..LogTarget::default()
        }
    }

    #[test]
    fn locations_by_type() {
        let ok = [
            ("loki", "http://10.1.77.205:3100/loki/api/v1/push"),
            ("loki", "HTTPS://user:pw@loki.example/push"),
            ("opentelemetry", "http://collector:4318"),
            ("syslog", "tcp://logs.example:514"),
            ("syslog", "udp://127.0.0.1:5514"),
            ("syslog", "tcp://[::1]:514"),
        ];
        for (kind, location) in ok {
            assert_eq!(problem(&target(kind, location, &[])), None, "{location}");
        }
        let bad = [
            (
                "loki",
                "ftp://loki:3100/push",
                "invalid location URL \"ftp://loki:3100/push\": unsupported scheme \"ftp\", must be \"http\" or \"https\"",
            ),
            (
                "loki",
                "loki:3100/push",
                "invalid location URL \"loki:3100/push\": missing scheme, must be \"http\" or \"https\"",
            ),
            (
                "opentelemetry",
                "http:///v1",
                "invalid location URL \"http:///v1\": missing host",
            ),
            (
                "syslog",
                "http://logs:514",
                "invalid syslog server location \"http://logs:514\", must be in form \"tcp://host:port\" or \"udp://host:port\"",
            ),
            (
                "syslog",
                "tcp://logs",
                "invalid syslog server location \"tcp://logs\", must be in form \"tcp://host:port\" or \"udp://host:port\"",
            ),
            (
                "syslog",
                "logs:514",
                "invalid syslog server location \"logs:514\", must be in form \"tcp://host:port\" or \"udp://host:port\"",
            ),
        ];
        for (kind, location, message) in bad {
            let found = problem(&target(kind, location, &[]));
            assert_eq!(found.as_deref(), Some(message));
        }
    }

    #[test]
    fn label_names_by_type() {
        assert_eq!(
            problem(&target("loki", "http://l/", &["juju_model", "_x", "A9"])),
            None
        );
        for label in ["juju-model", "9lives", "a.b", ""] {
            let found = problem(&target("loki", "http://l/", &[label]));
            assert_eq!(
                found,
                Some(format!("invalid label name \"{label}\" for type \"loki\""))
            );
        }
        assert_eq!(
            problem(&target("opentelemetry", "http://c", &["k8s.pod.name"])),
            None
        );
        assert_eq!(
            problem(&target("syslog", "tcp://h:1", &["juju-model.x"])),
            None
        );
        for label in ["a b", "a=b", "a]", "q\"", &"x".repeat(33)] {
            assert!(problem(&target("syslog", "tcp://h:1", &[label])).is_some());
        }
    }
}
