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

/// Asks the kernel for a pipe buffer of `bytes` (rounded up to pages) on the pipe `fd`
/// belongs to; returns the size it now has. Fails where an unprivileged user is over the
/// limits of `/proc/sys/fs/pipe-max-size` or `pipe-user-pages-soft`; the pipe then keeps
/// its size.
pub fn set_pipe_size(fd: impl std::os::fd::AsFd, bytes: usize) -> io::Result<usize> {
    let bytes = i32::try_from(bytes).unwrap_or(i32::MAX);
    nix::fcntl::fcntl(fd.as_fd(), nix::fcntl::FcntlArg::F_SETPIPE_SZ(bytes))
        .map(|size| size as usize)
        .map_err(io::Error::from)
}

/// The size of the buffer of the pipe `fd` belongs to.
pub fn pipe_size(fd: impl std::os::fd::AsFd) -> io::Result<usize> {
    nix::fcntl::fcntl(fd.as_fd(), nix::fcntl::FcntlArg::F_GETPIPE_SZ)
        .map(|size| size as usize)
        .map_err(io::Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pipe_grows_to_the_size_asked_for() {
        let (reader, _writer) = io::pipe().unwrap();
        assert_eq!(set_pipe_size(&reader, 256 * 1024).unwrap(), 256 * 1024);
        assert_eq!(pipe_size(&_writer).unwrap(), 256 * 1024);
    }
}
