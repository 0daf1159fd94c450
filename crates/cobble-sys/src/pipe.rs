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
use std::os::fd::AsRawFd;
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

/// How many bytes wait to be read in the pipe `fd` belongs to (`FIONREAD`). Whoever is the
/// pipe's only reader can then move exactly that many without waiting.
pub fn pending_bytes(fd: impl std::os::fd::AsFd) -> io::Result<usize> {
    let mut pending: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int through the pointer, which points at a live int.
    let rc = unsafe { libc::ioctl(fd.as_fd().as_raw_fd(), libc::FIONREAD, &raw mut pending) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(usize::try_from(pending).unwrap_or(0))
}

/// Moves up to `len` bytes from the pipe `from` to `to` (a socket, say) inside the kernel,
/// without waiting on either (`splice` with `SPLICE_F_NONBLOCK`): the pages of a pipe go to
/// a socket by reference, never through this process. Returns how many bytes moved; 0 only
/// when the pipe is at its end. `WouldBlock` when the pipe is empty or `to` is full (for a
/// socket, that takes `O_NONBLOCK` on it too).
pub fn splice(
    from: impl std::os::fd::AsFd,
    to: impl std::os::fd::AsFd,
    len: usize,
) -> io::Result<usize> {
    let flags = libc::SPLICE_F_NONBLOCK | libc::SPLICE_F_MOVE | libc::SPLICE_F_MORE;
    // SAFETY: both descriptors are borrowed for the call, and null offsets are what pipes
    // and sockets take.
    let moved = unsafe {
        libc::splice(
            from.as_fd().as_raw_fd(),
            std::ptr::null_mut(),
            to.as_fd().as_raw_fd(),
            std::ptr::null_mut(),
            len,
            flags,
        )
    };
    usize::try_from(moved).map_err(|_| io::Error::last_os_error())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;

    #[test]
    fn pending_bytes_counts_what_waits_in_a_pipe() {
        let (reader, mut writer) = io::pipe().unwrap();
        assert_eq!(pending_bytes(&reader).unwrap(), 0);
        writer.write_all(b"hello").unwrap();
        assert_eq!(pending_bytes(&reader).unwrap(), 5);
    }

    #[test]
    fn splice_moves_a_pipes_bytes_to_a_socket_and_says_when_it_is_at_its_end() {
        let (reader, mut writer) = io::pipe().unwrap();
        let (near, mut far) = UnixStream::pair().unwrap();
        writer.write_all(b"spliced").unwrap();
        // Only what was asked for moves; the rest stays in the pipe.
        assert_eq!(splice(&reader, &near, 3).unwrap(), 3);
        assert_eq!(pending_bytes(&reader).unwrap(), 4);
        assert_eq!(splice(&reader, &near, 64).unwrap(), 4);
        let mut got = [0u8; 7];
        far.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"spliced");
        // Empty, with a writer: nothing to move yet.
        let err = splice(&reader, &near, 64).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
        drop(writer);
        assert_eq!(splice(&reader, &near, 64).unwrap(), 0);
    }

    #[test]
    fn a_pipe_grows_to_the_size_asked_for() {
        let (reader, _writer) = io::pipe().unwrap();
        assert_eq!(set_pipe_size(&reader, 256 * 1024).unwrap(), 256 * 1024);
        assert_eq!(pipe_size(&_writer).unwrap(), 256 * 1024);
    }
}
