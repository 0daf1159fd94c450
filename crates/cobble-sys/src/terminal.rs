//! The user's side of a terminal, for `cobble exec`: its size, and raw mode.
//!
//! In terminal mode the remote pseudo-terminal does the line editing, echo and signal keys, so
//! the local terminal must pass every key through untouched (raw mode) and be put back as it
//! was whatever way the command ends. [`RawMode`] restores it when dropped, which covers a
//! normal return, an error and a panic that unwinds.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use nix::sys::termios::{self, SetArg, SpecialCharacterIndices, Termios};

/// The size of the terminal `fd` refers to, as (columns, rows).
pub fn window_size(fd: BorrowedFd<'_>) -> io::Result<(u16, u16)> {
    let mut size = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes one `winsize` through the pointer, which points at a live,
    // properly aligned local; the descriptor is borrowed, so it stays open for the call.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCGWINSZ, &mut size) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((size.ws_col, size.ws_row))
}

/// A terminal switched to raw mode; dropping it restores the settings it had.
#[must_use = "the terminal goes back to its old settings when this is dropped"]
pub struct RawMode {
    /// A duplicate of the descriptor, so the guard does not borrow the caller's.
    fd: OwnedFd,
    /// The settings to restore.
    saved: Termios,
}

impl RawMode {
    /// Puts the terminal `fd` refers to in raw mode: no echo, no line editing, no signal keys,
    /// no output processing, reads return each byte as it comes.
    pub fn enter(fd: BorrowedFd<'_>) -> io::Result<RawMode> {
        let fd = fd.try_clone_to_owned()?;
        let saved = termios::tcgetattr(&fd)?;
        let mut raw = saved.clone();
        termios::cfmakeraw(&mut raw);
        raw.control_chars[SpecialCharacterIndices::VMIN as usize] = 1;
        raw.control_chars[SpecialCharacterIndices::VTIME as usize] = 0;
        termios::tcsetattr(&fd, SetArg::TCSANOW, &raw)?;
        Ok(RawMode { fd, saved })
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        let _ = termios::tcsetattr(self.fd.as_fd(), SetArg::TCSANOW, &self.saved);
    }
}

#[cfg(test)]
mod tests {
    use nix::pty::{Winsize, openpty};
    use nix::sys::termios::LocalFlags;

    use super::*;

    fn pty(columns: u16, rows: u16) -> nix::pty::OpenptyResult {
        let size = Winsize {
            ws_row: rows,
            ws_col: columns,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        openpty(Some(&size), None).expect("openpty")
    }

    #[test]
    fn window_size_reads_the_terminal() {
        let pair = pty(132, 43);
        assert_eq!(window_size(pair.slave.as_fd()).unwrap(), (132, 43));
    }

    #[test]
    fn window_size_of_a_non_terminal_is_an_error() {
        let file = tempfile::tempfile().unwrap();
        assert!(window_size(file.as_fd()).is_err());
    }

    #[test]
    fn raw_mode_is_undone_on_drop() {
        let pair = pty(80, 25);
        let cooked = |fd: &OwnedFd| {
            let flags = termios::tcgetattr(fd).unwrap().local_flags;
            flags.contains(LocalFlags::ICANON | LocalFlags::ECHO | LocalFlags::ISIG)
        };
        assert!(cooked(&pair.slave));
        let raw = RawMode::enter(pair.slave.as_fd()).unwrap();
        let flags = termios::tcgetattr(&pair.slave).unwrap().local_flags;
        assert!(!flags.intersects(LocalFlags::ICANON | LocalFlags::ECHO | LocalFlags::ISIG));
        drop(raw);
        assert!(cooked(&pair.slave));
    }
}
