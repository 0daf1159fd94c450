//! An async Rust client for the Pebble-compatible HTTP API that cobble serves, and the JSON
//! wire types that the daemon and the client share.
//!
//! # Theory of operation
//!
//! Every call opens a new HTTP/1.1 connection to the daemon's unix socket (or to a TCP
//! address when `PEBBLE_BASEURL` is set), sends one request with `Host: localhost`, reads the
//! whole response and decodes Pebble's envelope:
//!
//! - `sync` responses yield their `result`, deserialized into the method's return type;
//! - `async` responses (service actions) yield the ID of the change that carries them out,
//!   which [`Client::wait_change`] then follows to the end;
//! - `error` responses become [`Error::Api`], with the daemon's status code, kind and message.
//!
//! A new connection per request is what ops does. It keeps the client stateless, so a daemon
//! that restarts between two calls is invisible to it.
//!
//! # Layout
//!
//! - [`types`]: the wire types, field for field and in Go's field order.
//! - [`ClientConfig`] and [`EnvPaths`]: where the daemon is, from Pebble's environment variables.
//! - [`Client`]: one async method per API call, plus [`Client::get`], [`Client::post`],
//!   [`Client::request`] and [`Client::raw_request`] for endpoints without a typed method.
//! - [`Client::push`], [`Client::pull`], [`Client::list_files`], [`Client::make_dir`] and
//!   [`Client::remove_path`] (module `files`): the files API, streamed both ways, with
//!   [`PushOptions`] and [`MakeDirOptions`].
//! - [`Client::exec`] (module `exec`): runs a command on the daemon's side and hands back an
//!   [`ExecProcess`] with its input, output, control handle ([`ExecControl`]) and exit code.
//! - [`Client::logs`] (module `logs`): service output, streamed and optionally followed, with
//!   [`LogsOptions`].
//! - [`Client::notify`], [`Client::notices`], [`Client::wait_notices`] and [`Client::notice`]
//!   (module `notices`): custom notices and the long-poll watchers use, with
//!   [`NoticesOptions`] and [`NotifyOptions`].
//! - [`wire`]: websocket frame headers and masking, for both sides of exec's data streams.
//! - [`time`]: Go's time formats as Pebble's clients see them, for the daemon's answers and
//!   logs and the CLI's output alike.
//! - [`random`]: the one source of unpredictable numbers (multipart boundaries, masking
//!   keys, temporary names).
//! - [`Error`]: one error type, with messages worded like Pebble's Go client.
//!
//! # Example
//!
//! ```no_run
//! use cobble_client::{Client, ClientConfig};
//!
//! # async fn demo() -> Result<(), cobble_client::Error> {
//! let client = Client::new(ClientConfig::from_env())?;
//! let change_id = client.start(&["web".to_string()]).await?;
//! let change = client.wait_change(&change_id, None).await?;
//! if !change.err.is_empty() {
//!     eprintln!("start failed: {}", change.err);
//! }
//! for service in client.services(&[]).await? {
//!     println!("{} is {}", service.name, service.current);
//! }
//! # Ok(())
//! # }
//! ```
#![forbid(unsafe_code)]

mod client;
mod config;
mod error;
mod exec;
mod files;
pub mod identities;
mod logs;
mod notices;
pub mod random;
pub mod time;
mod transport;
pub mod types;
pub mod wire;

pub use client::{ChangeSelector, Client, Response, decode_envelope};

/// The Pebble release whose contract cobble implements. `GET /v1/system-info` reports it as
/// `version`, and `cobble version` as the client's and server's version, because clients
/// compare that version with Pebble releases ("at least v1.17" must hold). cobble's own
/// version is [`COBBLE_VERSION`].
pub const PEBBLE_VERSION: &str = "v1.32.1";

/// cobble's own version, reported beside [`PEBBLE_VERSION`] (`cobble-version` in
/// `/v1/system-info`).
pub const COBBLE_VERSION: &str = env!("CARGO_PKG_VERSION");
pub use config::{ClientConfig, DEFAULT_PEBBLE_DIR, EnvPaths, SOCKET_FILE_NAME};
pub use error::Error;
pub use exec::{ExecControl, ExecOptions, ExecOutput, ExecProcess, ExecStdin};
pub use files::{MakeDirOptions, PushOptions};
pub use hyper::Method;
pub use logs::LogsOptions;
pub use notices::{NoticesOptions, NotifyOptions};
pub use transport::RawResponse;
