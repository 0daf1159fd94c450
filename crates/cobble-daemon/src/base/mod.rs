//! The base tier: what every manager may use and that uses no manager. Atomic file
//! replacement, JSON request bodies read as Go reads them, the daemon's outgoing HTTP
//! client, the daemon directory's lock, the daemon's own log and its stdout and stderr,
//! spawning and tracking OS processes, path watching, TLS, and handing an HTTPS connection
//! to another program.

pub(crate) mod atomic;
pub(crate) mod daemon_log;
pub(crate) mod go_json;
pub(crate) mod http_client;
pub(crate) mod lock;
pub(crate) mod process;
pub(crate) mod sink;
pub(crate) mod tls;
pub(crate) mod tls_handoff;
pub(crate) mod watch;
