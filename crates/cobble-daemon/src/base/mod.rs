//! The base tier: what every manager may use and that uses no manager. Atomic file
//! replacement, JSON request bodies read as Go reads them, the daemon's outgoing HTTP client, the daemon directory's lock, the daemon's own log and its stdout and stderr,
//! spawning and tracking OS processes, path watching and TLS.

pub mod atomic;
pub mod go_json;
pub mod http_client;
pub mod lock;
pub mod logging;
pub mod output;
pub mod process;
pub mod tls;
pub mod watch;
