//! The receiving end of the sd_notify protocol: a unix datagram socket on which the kernel
//! names the sender of every datagram.
//!
//! A service with `readiness: notify` says it is ready by sending `READY=1` to the socket
//! named in its `$NOTIFY_SOCKET`. Anyone who can reach the socket can send to it, so the
//! daemon decides what a datagram is worth by who sent it: with `SO_PASSCRED` set, the
//! kernel attaches the sender's pid, uid and gid (`SCM_CREDENTIALS`), which an
//! unprivileged sender cannot forge.

use std::io::{self, IoSliceMut};
use std::os::fd::{AsFd, AsRawFd};

use nix::sys::socket::{self, ControlMessageOwned, MsgFlags, UnixAddr, sockopt};

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

/// Asks the kernel to attach the sender's credentials to every datagram `socket` receives.
pub fn pass_credentials(socket: &impl AsFd) -> io::Result<()> {
    socket::setsockopt(socket, sockopt::PassCred, &true).map_err(io::Error::from)
}

/// Receives one datagram into `buf` without waiting (`WouldBlock` when none is queued):
/// how many bytes it holds (a longer one is cut to `buf`), and who sent it (`None` when the
/// kernel attached no credentials).
pub fn recv_with_sender(socket: &impl AsFd, buf: &mut [u8]) -> io::Result<(usize, Option<Sender>)> {
    let mut iov = [IoSliceMut::new(buf)];
    let mut space = nix::cmsg_space!(libc::ucred);
    let message = socket::recvmsg::<UnixAddr>(
        socket.as_fd().as_raw_fd(),
        &mut iov,
        Some(&mut space),
        MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_CMSG_CLOEXEC,
    )?;
    let mut sender = None;
    for control in message.cmsgs()? {
        if let ControlMessageOwned::ScmCredentials(credentials) = control {
            sender = Some(Sender {
                pid: u32::try_from(credentials.pid()).unwrap_or(0),
                uid: credentials.uid(),
                gid: credentials.gid(),
            });
        }
    }
    Ok((message.bytes, sender))
}

#[cfg(test)]
mod tests {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixDatagram};

    use super::*;

    #[test]
    fn a_datagram_comes_with_its_senders_credentials() {
        let name = format!("cobble-sys-test/{}", std::process::id());
        let address = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let receiver = UnixDatagram::bind_addr(&address).unwrap();
        pass_credentials(&receiver).unwrap();
        let mut buf = [0u8; 64];
        let err = recv_with_sender(&receiver, &mut buf).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock);

        let sender = UnixDatagram::unbound().unwrap();
        sender
            .send_to_addr(b"READY=1\nSTATUS=up", &address)
            .unwrap();
        let (len, from) = recv_with_sender(&receiver, &mut buf).unwrap();
        assert_eq!(&buf[..len], b"READY=1\nSTATUS=up");
        let from = from.expect("credentials");
        assert_eq!(from.pid, std::process::id());
        assert_eq!(from.uid, nix::unistd::getuid().as_raw());
        assert_eq!(from.gid, nix::unistd::getgid().as_raw());
    }
}
