//! Service output, from the pipe to every place it goes: one pipeline per service.
//!
//! - [`capture`]: the reader of a service's output pipe. It splits each read into lines and
//!   hands them, a read at a time, to every destination; none of them may block it.
//! - [`lines`]: cutting a stream into lines where Pebble's log parser cuts them, and
//!   formatting them in Pebble's layout, `<time> [<service>] <line>`.
//! - [`ring`]: the bounded in-memory log of each service ([`ServiceLog`]), and the followers
//!   that read it without missing lines.
//! - [`persist`]: the files of services with `persist-logs: true`, written by one thread
//!   from a bounded queue.
//! - [`forward`]: the plan's `log-targets` (Loki, OpenTelemetry, syslog), one sender task
//!   per target, fed from bounded queues.
//! - [`read`]: reading the output of several services back for `/v1/logs`, merged in time
//!   order, and following it as it is written.
//!
//! What the capture does per line it does per read where it can (one lock, one timestamp,
//! one copy), because a service that writes as fast as it can produces millions of short
//! lines a second. The daemon's stdout under `--verbose`, the persisted files and the log
//! targets are handed to it as values, so two daemons in one process share nothing.

pub(crate) mod capture;
pub(crate) mod forward;
pub(crate) mod lines;
pub(crate) mod persist;
pub(crate) mod read;
pub(crate) mod ring;

pub(crate) use read::{Follow, Line, lost_message, older_than_rings, recent};
pub(crate) use ring::ServiceLog;
