//! Pseudo-terminals for exec's terminal mode, and new sessions for exec's processes.
//!
//! # Theory of operation
//!
//! A command run with a terminal gets the *slave* side of a pty as its stdin, stdout and
//! stderr, in a session of its own whose controlling terminal that slave is: then a shell
//! prints its prompt, `stty size` reports the window, and Ctrl-C at the terminal reaches the
//! foreground process group. The daemon keeps the *master* side and relays bytes between it
//! and the client's websocket.
//!
//! [`open`] creates the pair with its first window size, hands the slave to the target user
//! and group (so a command that drops privileges can still open `/dev/tty`), and makes the
//! master non-blocking for tokio. [`Master`] reads and writes it asynchronously; once every
//! holder of the slave is gone, reading the master fails with `EIO` on Linux, which
//! [`Master`] reports as end of file. [`attach`] sets a `Command` up to run on the slave:
//! one of the two `pre_exec` hooks in cobble (the other is [`crate::reaper::spawn_gated`]'s), two async-signal-safe system calls (`setsid`, then
//! `ioctl(TIOCSCTTY)`). [`new_session`] does the `setsid` alone, for exec without a
//! terminal.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::pin::Pin;
use std::process::{Command, Stdio};
use std::task::{Context, Poll, ready};

use nix::fcntl::{FcntlArg, OFlag, fcntl};
use nix::pty::{Winsize, openpty};
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A terminal's size in character cells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowSize {
    /// Columns.
    pub width: u16,
    /// Rows.
    pub height: u16,
}

impl WindowSize {
    fn winsize(self) -> Winsize {
        Winsize {
            ws_row: self.height,
            ws_col: self.width,
            ws_xpixel: 0,
            ws_ypixel: 0,
        }
    }
}

/// A new pty pair: the master for the daemon, the slave for the command.
pub struct Pty {
    /// The daemon's side, non-blocking.
    pub master: Master,
    /// The command's side; hand it to [`attach`] and drop it once the command is spawned.
    pub slave: OwnedFd,
}

/// Opens a pty of `size`. With `owner`, the slave belongs to that uid and gid. Needs a tokio
/// runtime context (the master is registered with its reactor).
pub fn open(size: WindowSize, owner: Option<(u32, u32)>) -> io::Result<Pty> {
    let pair = openpty(Some(&size.winsize()), None).map_err(io::Error::from)?;
    if let Some((uid, gid)) = owner {
        std::os::unix::fs::fchown(&pair.slave, Some(uid), Some(gid))?;
    }
    // The master must not leak into the command (std's Command closes only what it set up).
    let flags = fcntl(&pair.master, FcntlArg::F_GETFL).map_err(io::Error::from)?;
    fcntl(
        &pair.master,
        FcntlArg::F_SETFL(OFlag::from_bits_truncate(flags) | OFlag::O_NONBLOCK),
    )
    .map_err(io::Error::from)?;
    set_cloexec(pair.master.as_fd())?;
    set_cloexec(pair.slave.as_fd())?;
    // SAFETY: an `OwnedFd` owns a valid, open descriptor; it is moved into the `AsyncFd`,
    // which keeps it open and unchanged until it is dropped, and `as_raw_fd` on an `OwnedFd`
    // always returns that same descriptor.
    let fd = unsafe { AsyncFd::register(pair.master) }.map_err(io::Error::from)?;
    Ok(Pty {
        master: Master { fd },
        slave: pair.slave,
    })
}

fn set_cloexec(fd: BorrowedFd<'_>) -> io::Result<()> {
    let flags = fcntl(fd, FcntlArg::F_GETFD).map_err(io::Error::from)?;
    let flags = nix::fcntl::FdFlag::from_bits_truncate(flags) | nix::fcntl::FdFlag::FD_CLOEXEC;
    fcntl(fd, FcntlArg::F_SETFD(flags)).map_err(io::Error::from)?;
    Ok(())
}

/// Runs `cmd` on the pty `slave`: it becomes stdin, stdout and stderr, and the command starts
/// in a new session whose controlling terminal it is.
pub fn attach(cmd: &mut Command, slave: &OwnedFd) -> io::Result<()> {
    cmd.stdin(Stdio::from(slave.try_clone()?))
        .stdout(Stdio::from(slave.try_clone()?))
        .stderr(Stdio::from(slave.try_clone()?));
    // SAFETY: the closure runs in the child between fork and exec, where only
    // async-signal-safe calls are allowed: setsid(2) and ioctl(2) are, and nothing here
    // allocates or takes a lock. By the time it runs, std has already installed the slave
    // as fd 0.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() == -1 {
                return Err(io::Error::last_os_error());
            }
            if libc::ioctl(0, libc::TIOCSCTTY as _, 0) == -1 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    Ok(())
}

/// Runs `cmd` in a new session (and so a new process group) of its own, without a terminal.
pub fn new_session(cmd: &mut Command) {
    // SAFETY: setsid(2) is async-signal-safe and the closure touches nothing else.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() == -1 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// The daemon's side of a pty.
pub struct Master {
    fd: AsyncFd<OwnedFd>,
}

impl Master {
    /// Sets the window size; the foreground process group gets `SIGWINCH`.
    pub fn resize(&self, size: WindowSize) -> io::Result<()> {
        let winsize = size.winsize();
        // SAFETY: TIOCSWINSZ reads one `struct winsize` through the pointer, which points to
        // a live, initialised value for the duration of the call; the fd is a pty master we
        // own.
        let rc = unsafe {
            libc::ioctl(
                self.fd.get_ref().as_raw_fd(),
                libc::TIOCSWINSZ as _,
                &winsize as *const Winsize,
            )
        };
        if rc == -1 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// The terminal's current window size.
    pub fn size(&self) -> io::Result<WindowSize> {
        let (width, height) = crate::terminal::window_size(self.fd.get_ref().as_fd())?;
        Ok(WindowSize { width, height })
    }

    /// The byte that means end of file to the terminal's line discipline (VEOF, normally
    /// Ctrl-D): written to the master, it ends a read in canonical mode.
    pub fn eof_byte(&self) -> io::Result<u8> {
        let termios = nix::sys::termios::tcgetattr(self.fd.get_ref()).map_err(io::Error::from)?;
        Ok(termios.control_chars[nix::sys::termios::SpecialCharacterIndices::VEOF as usize])
    }
}

impl Master {
    fn poll_read_shared(
        &self,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            let mut guard = ready!(self.fd.poll_read_ready(cx))?;
            let unfilled = buf.initialize_unfilled();
            match guard
                .try_io(|fd| nix::unistd::read(fd.get_ref(), unfilled).map_err(io::Error::from))
            {
                Ok(Ok(n)) => {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                // Linux reports a master whose slave is closed everywhere as EIO: the
                // terminal is gone, which is end of file.
                Ok(Err(e)) if e.raw_os_error() == Some(libc::EIO) => return Poll::Ready(Ok(())),
                Ok(Err(e)) => return Poll::Ready(Err(e)),
                Err(_would_block) => continue,
            }
        }
    }

    fn poll_write_shared(&self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        loop {
            let mut guard = ready!(self.fd.poll_write_ready(cx))?;
            match guard.try_io(|fd| nix::unistd::write(fd.get_ref(), buf).map_err(io::Error::from))
            {
                Ok(result) => return Poll::Ready(result),
                Err(_would_block) => continue,
            }
        }
    }
}

impl AsyncRead for Master {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.poll_read_shared(cx, buf)
    }
}

impl AsyncWrite for Master {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_shared(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// Reading through a shared reference, so that one task can relay output while another
/// writes input and a third resizes (as `&TcpStream` allows in std).
impl AsyncRead for &Master {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.poll_read_shared(cx, buf)
    }
}

/// Writing through a shared reference; see the `AsyncRead` impl.
impl AsyncWrite for &Master {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_shared(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
