//! The receiving end of the sd_notify protocol: a unix datagram socket on which the kernel
//! names the sender of every datagram.
//!
//! A service with `readiness: notify` says it is ready by sending `READY=1` to the socket
//! named in its `$NOTIFY_SOCKET`. Anyone who can reach the socket can send to it, so the
//! daemon decides what a datagram is worth by who sent it: with `SO_PASSCRED` set, the
//! kernel attaches the sender's pid, uid and gid (`SCM_CREDENTIALS`), which an
//! unprivileged sender cannot forge.
//!
//! A sender may pass file descriptors along (`SCM_RIGHTS`): `sd_notify_barrier` (what
//! `systemd-notify` does after each message) passes the write end of a pipe and waits for
//! it to close, and `FDSTORE=1` passes descriptors to keep. cobble keeps none, and never
//! takes them in: the control buffer has room for the credentials only, which the kernel
//! puts first, so it installs no descriptor in the daemon and lets go of every one passed
//! when the datagram is read. That is what answers a barrier, and no datagram can make the
//! daemon hold a descriptor or run out of them.

use std::io;
use std::mem::{MaybeUninit, size_of};
use std::os::fd::{AsFd, AsRawFd};

use nix::sys::socket::{self, sockopt};

/// Who sent a datagram, as the kernel vouches for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sender {
    /// The sending process, as seen from the receiver's pid namespace (0 when it is not
    /// visible there).
    pub pid: u32,
    /// Its user.
    pub uid: u32,
    /// Its group.
    pub gid: u32,
}

/// One datagram received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Received {
    /// How many of its bytes are in the buffer.
    pub len: usize,
    /// It was longer than the buffer: the rest is lost.
    pub truncated: bool,
    /// Who sent it (`None` when the kernel attached no credentials).
    pub sender: Option<Sender>,
    /// Descriptors (or other control data) came with it, and were let go unread.
    pub dropped_control: bool,
}

/// Asks the kernel to attach the sender's credentials to every datagram `socket` receives.
pub fn pass_credentials(socket: &impl AsFd) -> io::Result<()> {
    socket::setsockopt(socket, sockopt::PassCred, &true).map_err(io::Error::from)
}

/// The control buffer: room for one `SCM_CREDENTIALS` message and nothing more, aligned as
/// a `cmsghdr` must be.
#[repr(C, align(8))]
struct Control([u8; CONTROL_LEN]);

// SAFETY: CMSG_SPACE only computes a size from its argument.
const CONTROL_LEN: usize = unsafe { libc::CMSG_SPACE(size_of::<libc::ucred>() as u32) } as usize;

/// Receives one datagram into `buf` without waiting (`WouldBlock` when none is queued).
/// A datagram longer than `buf` is cut to it and said to be truncated; descriptors passed
/// with it are never installed (see the module's documentation).
pub fn recv_with_sender(socket: &impl AsFd, buf: &mut [u8]) -> io::Result<Received> {
    let mut control = MaybeUninit::<Control>::zeroed();
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: msghdr is plain data; all-zero is a valid empty header.
    let mut header: libc::msghdr = unsafe { std::mem::zeroed() };
    header.msg_iov = &raw mut iov;
    header.msg_iovlen = 1;
    header.msg_control = control.as_mut_ptr().cast();
    header.msg_controllen = CONTROL_LEN as _;
    let received = loop {
        // SAFETY: `header` points at `iov` (which covers `buf`) and at `control`, both alive
        // and writable for the lengths given, for the duration of the call.
        let n = unsafe {
            libc::recvmsg(
                socket.as_fd().as_raw_fd(),
                &raw mut header,
                libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC,
            )
        };
        if n >= 0 {
            break n as usize;
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(error);
        }
    };
    let mut sender = None;
    let mut dropped_control = header.msg_flags & libc::MSG_CTRUNC != 0;
    // SAFETY: the kernel filled `header.msg_control` with `msg_controllen` bytes of control
    // messages (or cut them, setting MSG_CTRUNC, with each header's length saying what is
    // there); the CMSG macros walk them within those bounds.
    unsafe {
        let mut message = libc::CMSG_FIRSTHDR(&raw const header);
        while !message.is_null() {
            let (level, kind, len) = (
                (*message).cmsg_level,
                (*message).cmsg_type,
                (*message).cmsg_len as usize,
            );
            let whole = libc::CMSG_LEN(size_of::<libc::ucred>() as u32) as usize;
            if level == libc::SOL_SOCKET && kind == libc::SCM_CREDENTIALS && len >= whole {
                let credentials = libc::CMSG_DATA(message)
                    .cast::<libc::ucred>()
                    .read_unaligned();
                sender = Some(Sender {
                    pid: u32::try_from(credentials.pid).unwrap_or(0),
                    uid: credentials.uid,
                    gid: credentials.gid,
                });
            } else {
                // Descriptors cannot fit; anything else is not asked for.
                dropped_control = true;
            }
            message = libc::CMSG_NXTHDR(&raw const header, message);
        }
    }
    Ok(Received {
        len: received.min(buf.len()),
        truncated: header.msg_flags & libc::MSG_TRUNC != 0,
        sender,
        dropped_control,
    })
}

#[cfg(test)]
mod tests {
    use std::io::IoSlice;
    use std::os::fd::{AsRawFd, OwnedFd};
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixDatagram};

    use nix::sys::socket::{ControlMessage, MsgFlags, UnixCredentials, sendmsg};

    use super::*;

    fn bound(tag: &str) -> (UnixDatagram, SocketAddr) {
        let name = format!("cobble-sys-test/{}/{tag}", std::process::id());
        let address = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let receiver = UnixDatagram::bind_addr(&address).unwrap();
        pass_credentials(&receiver).unwrap();
        (receiver, address)
    }

    /// How many descriptors of this process name `path`.
    fn open_on(path: &std::path::Path) -> usize {
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter(|fd| {
                fd.as_ref()
                    .is_ok_and(|fd| std::fs::read_link(fd.path()).is_ok_and(|p| p == path))
            })
            .count()
    }

    #[test]
    fn a_datagram_comes_with_its_senders_credentials() {
        let (receiver, address) = bound("plain");
        let mut buf = [0u8; 64];
        let err = recv_with_sender(&receiver, &mut buf).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock);

        let sender = UnixDatagram::unbound().unwrap();
        sender
            .send_to_addr(b"READY=1\nSTATUS=up", &address)
            .unwrap();
        let got = recv_with_sender(&receiver, &mut buf).unwrap();
        assert_eq!(&buf[..got.len], b"READY=1\nSTATUS=up");
        assert!(!got.truncated && !got.dropped_control, "{got:?}");
        let from = got.sender.expect("credentials");
        assert_eq!(from.pid, std::process::id());
        assert_eq!(from.uid, nix::unistd::getuid().as_raw());
        assert_eq!(from.gid, nix::unistd::getgid().as_raw());
    }

    #[test]
    fn passed_descriptors_are_let_go_and_a_long_datagram_is_said_to_be_cut() {
        let (receiver, address) = bound("fds");
        let sender = UnixDatagram::unbound().unwrap();
        sender.connect_addr(&address).unwrap();
        // A barrier as sd_notify_barrier sends it: the pipe's write end, with the sender's
        // own credentials given explicitly; and as many descriptors as a message may carry.
        let (read_end, write_end) = nix::unistd::pipe().unwrap();
        let stored = tempfile::NamedTempFile::new().unwrap().into_temp_path();
        let many: Vec<OwnedFd> = (0..200)
            .map(|_| std::fs::File::open(&stored).unwrap().into())
            .collect();
        let credentials = UnixCredentials::new();
        let fds = [write_end.as_raw_fd()];
        let many_raw: Vec<i32> = many.iter().map(AsRawFd::as_raw_fd).collect();
        let send = |text: &[u8], rights: &[i32]| {
            sendmsg::<()>(
                sender.as_raw_fd(),
                &[IoSlice::new(text)],
                &[
                    ControlMessage::ScmCredentials(&credentials),
                    ControlMessage::ScmRights(rights),
                ],
                MsgFlags::empty(),
                None,
            )
            .unwrap();
        };
        send(b"BARRIER=1", &fds);
        send(b"FDSTORE=1", &many_raw);
        drop(write_end);
        drop(many);

        let mut buf = [0u8; 16];
        let got = recv_with_sender(&receiver, &mut buf).unwrap();
        assert_eq!(&buf[..got.len], b"BARRIER=1");
        assert!(got.dropped_control && !got.truncated, "{got:?}");
        assert_eq!(got.sender.unwrap().pid, std::process::id());
        // The pipe's last write end is gone: the barrier is answered.
        let mut byte = [0u8; 1];
        assert_eq!(nix::unistd::read(&read_end, &mut byte).unwrap(), 0);
        let got = recv_with_sender(&receiver, &mut buf).unwrap();
        assert!(got.dropped_control, "{got:?}");
        assert_eq!(open_on(&stored), 0, "no descriptor was installed");

        sender.send(&[b'x'; 100]).unwrap();
        let got = recv_with_sender(&receiver, &mut buf).unwrap();
        assert_eq!((got.len, got.truncated), (16, true));
        assert!(got.sender.is_some());
    }
}
