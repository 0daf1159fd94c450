//! A service's output channel: one pipe that carries both stdout and stderr.
//!
//! # Theory of operation
//!
//! Pebble gives each service one log: stdout and stderr are written into the
//! same ring buffer, in the order the service wrote them. The faithful way to
//! keep that order is to give the child *one* pipe on both fds, so the kernel
//! serialises the writes; two pipes read by two tasks would interleave lines
//! in whatever order the tasks happen to run.
//!
//! The pipe comes from `std::io::pipe`, whose fds are close-on-exec, so only
//! the fds that `Command` installs as 1 and 2 reach the child. The read end is
//! switched to non-blocking and registered with tokio.
//!
//! The reader sees EOF only when *every* copy of the write end is closed: the
//! child's, any descendants' that inherited it, and the two held by the
//! `Command` the `Stdio` values were given to. Drop the `Command` after
//! spawning, or EOF never comes.

use std::io;
use std::process::Stdio;

use tokio::net::unix::pipe;

/// Creates a pipe for a child's merged output. Returns the async read end and
/// two `Stdio`s for the write end, to pass to `Command::stdout` and
/// `Command::stderr`.
///
/// Must be called within a tokio runtime with IO enabled (the read end is
/// registered with its reactor).
pub fn merged_pipe() -> io::Result<(pipe::Receiver, Stdio, Stdio)> {
    let (reader, writer) = io::pipe()?;
    let stderr_writer = writer.try_clone()?;
    let receiver = pipe::Receiver::from_owned_fd(reader.into())?;
    Ok((receiver, Stdio::from(writer), Stdio::from(stderr_writer)))
}
