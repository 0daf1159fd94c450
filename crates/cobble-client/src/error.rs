//! The one error type of the client.
//!
//! Messages follow Pebble's Go client, because scripts and humans compare them: an API error
//! displays as the daemon's message alone, and a failure to reach the daemon reads
//! `cannot communicate with server: Get "http://localhost/v1/...": <reason>`.

use std::path::Path;

use serde_json::Value;

/// Everything that can go wrong talking to the daemon.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The daemon answered with an error envelope (`"type":"error"`).
    #[error("{message}")]
    Api {
        /// The HTTP status code of the response, such as 400 or 504.
        status_code: u16,
        /// The machine-readable error kind (`no-default-services`, `not-found`, ...);
        /// empty when the daemon gave none.
        kind: String,
        /// The human-readable message, already in Pebble's wording.
        message: String,
        /// Extra structured detail some errors carry.
        value: Option<Value>,
    },

    /// The daemon could not be reached, or the connection broke before a full response.
    #[error("cannot communicate with server: {request}: {reason}")]
    Connection {
        /// The request that failed, Go style: `Get "http://localhost/v1/services?names="`.
        request: String,
        /// Why it failed, such as `socket "/var/lib/pebble/default/.pebble.socket" not found`.
        reason: String,
        /// The underlying IO or HTTP error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },

    /// The daemon answered, but not with what the API promises (bad JSON, wrong envelope type).
    #[error("{0}")]
    Protocol(String),

    /// The client configuration cannot be used, such as an unsupported base URL.
    #[error("{0}")]
    Config(String),

    /// One of an exec task's websockets could not be opened, or is closed.
    #[error("cannot connect to {name:?} websocket: {reason}")]
    Websocket {
        /// `control`, `stdio` or `stderr`.
        name: String,
        /// Why, such as the daemon's refusal of the handshake.
        reason: String,
    },

    /// The change that carried out a request failed; this is its `err`, such as
    /// `cannot perform the following tasks:` and the failed task with its error.
    #[error("{0}")]
    Change(String),
}

impl Error {
    /// The `kind` of an API error, or `None` for any other error.
    pub fn api_kind(&self) -> Option<&str> {
        match self {
            Error::Api { kind, .. } => Some(kind),
            _ => None,
        }
    }

    /// The HTTP status code of an API error, or `None` for any other error.
    pub fn status_code(&self) -> Option<u16> {
        match self {
            Error::Api { status_code, .. } => Some(*status_code),
            _ => None,
        }
    }

    /// Builds a connection error for a failure to open the connection at all.
    pub(crate) fn dial(request: String, target: &DialTarget<'_>, source: std::io::Error) -> Self {
        let reason = match target {
            DialTarget::Unix(path) if source.kind() == std::io::ErrorKind::NotFound => {
                format!("socket {:?} not found", path.display().to_string())
            }
            DialTarget::Unix(path) => format!(
                "dial unix {}: connect: {}",
                path.display(),
                go_style_io_error(&source)
            ),
            DialTarget::Tcp(addr) => {
                format!("dial tcp {addr}: connect: {}", go_style_io_error(&source))
            }
        };
        Error::Connection {
            request,
            reason,
            source: Box::new(source),
        }
    }

    /// Builds a connection error for a failure after the connection was open.
    pub(crate) fn broken(
        request: String,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Error::Connection {
            request,
            reason: source.to_string(),
            source: Box::new(source),
        }
    }
}

/// Where a connection was being opened, for the wording of [`Error::Connection`].
pub(crate) enum DialTarget<'a> {
    Unix(&'a Path),
    Tcp(&'a str),
}

/// Formats an IO error like Go's `syscall.Errno`: lowercase, no "(os error N)" suffix.
fn go_style_io_error(err: &std::io::Error) -> String {
    let text = err.to_string();
    let text = match text.find(" (os error ") {
        Some(at) => &text[..at],
        None => &text,
    };
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_socket_reads_like_pebble() {
        let err = Error::dial(
            r#"Get "http://localhost/v1/services?names=""#.into(),
            &DialTarget::Unix(Path::new("/tmp/p/.pebble.socket")),
            std::io::Error::from(std::io::ErrorKind::NotFound),
        );
        assert_eq!(
            err.to_string(),
            r#"cannot communicate with server: Get "http://localhost/v1/services?names=": socket "/tmp/p/.pebble.socket" not found"#
        );
    }

    #[test]
    fn refused_connection_reads_like_go() {
        let err = Error::dial(
            r#"Get "http://localhost/v1/system-info""#.into(),
            &DialTarget::Unix(Path::new("/tmp/s")),
            std::io::Error::from_raw_os_error(111),
        );
        assert_eq!(
            err.to_string(),
            r#"cannot communicate with server: Get "http://localhost/v1/system-info": dial unix /tmp/s: connect: connection refused"#
        );
    }

    #[test]
    fn api_error_displays_message_only() {
        let err = Error::Api {
            status_code: 400,
            kind: "no-default-services".into(),
            message: "no default services".into(),
            value: None,
        };
        assert_eq!(err.to_string(), "no default services");
        assert_eq!(err.api_kind(), Some("no-default-services"));
        assert_eq!(err.status_code(), Some(400));
    }
}
