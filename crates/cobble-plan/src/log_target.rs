//! What a log target's `location` and `labels` must look like for its type.
//!
//! Pebble accepts any location and any label name and finds out later, when every request
//! to the receiver fails or every batch is rejected, and the logs are lost in silence.
//! cobble checks them when the plan is combined, so a layer that could never deliver is
//! refused with a 400 and the plan stays as it was.

use crate::{LogTarget, PlanError};

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

/// Checks a combined target whose type is known and whose location is set.
pub(crate) fn validate(name: &str, target: &LogTarget) -> Result<(), PlanError> {
    let location_problem =
        match target.type_.as_str() {
            "syslog" => syslog_address(&target.location).is_none().then(|| {
                PlanError::InvalidSyslogLocation {
                    location: target.location.clone(),
                }
            }),
            _ => http_location_problem(&target.location).map(|reason| {
                PlanError::InvalidLogTargetLocation {
                    target: name.to_owned(),
                    reason,
                }
            }),
        };
    if let Some(error) = location_problem {
        return Err(error);
    }
    let valid: fn(&str) -> bool = match target.type_.as_str() {
        "loki" => is_loki_label,
        "syslog" => is_syslog_param_name,
        _ => |label: &str| !label.is_empty(),
    };
    if let Some(label) = target.labels.keys().find(|label| !valid(label)) {
        return Err(PlanError::InvalidLogLabel {
            target: name.to_owned(),
            label: label.clone(),
            kind: target.type_.clone(),
        });
    }
    Ok(())
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
            assert_eq!(
                validate("t", &target(kind, location, &[])),
                Ok(()),
                "{location}"
            );
        }
        let bad = [
            (
                "loki",
                "ftp://loki:3100/push",
                "invalid location URL for target \"t\": unsupported scheme \"ftp\", must be \"http\" or \"https\"",
            ),
            (
                "loki",
                "loki:3100/push",
                "invalid location URL for target \"t\": missing scheme, must be \"http\" or \"https\"",
            ),
            (
                "opentelemetry",
                "http:///v1",
                "invalid location URL for target \"t\": missing host",
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
            let err = validate("t", &target(kind, location, &[])).unwrap_err();
            assert_eq!(err.to_string(), message);
        }
    }

    #[test]
    fn label_names_by_type() {
        assert_eq!(
            validate(
                "t",
                &target("loki", "http://l/", &["juju_model", "_x", "A9"])
            ),
            Ok(())
        );
        for label in ["juju-model", "9lives", "a.b", ""] {
            let err = validate("t", &target("loki", "http://l/", &[label])).unwrap_err();
            assert_eq!(
                err.to_string(),
                format!("log target \"t\": invalid label name \"{label}\" for type \"loki\"")
            );
        }
        assert_eq!(
            validate("t", &target("opentelemetry", "http://c", &["k8s.pod.name"])),
            Ok(())
        );
        assert_eq!(
            validate("t", &target("syslog", "tcp://h:1", &["juju-model.x"])),
            Ok(())
        );
        for label in ["a b", "a=b", "a]", "q\"", &"x".repeat(33)] {
            assert!(validate("t", &target("syslog", "tcp://h:1", &[label])).is_err());
        }
    }
}
