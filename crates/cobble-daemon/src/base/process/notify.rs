//! `readiness: notify`: the socket a service tells its readiness on, and what it says.
//!
//! Each service that says when it is ready gets a unix datagram socket of its own, in the
//! abstract namespace (no file to create, own or clean up, and reachable whatever user the
//! service runs as), named `@cobble-notify/<daemon pid>/<random>` and given to the service
//! as `$NOTIFY_SOCKET`, as systemd does. What arrives there is read with the kernel's word
//! on who sent it ([`cobble_sys::notify`]); whether that sender is one of the service's own
//! processes is for [`super::Processes::belongs`] to say, since the socket's name can be
//! read from `/proc/net/unix` by anyone.
//!
//! The messages are newline-separated `KEY=VALUE` assignments (sd_notify(3)). cobble acts on
//! `READY=1`, `RELOADING=1`, `STOPPING=1`, `STATUS=...`, `MAINPID=...` and the watchdog's
//! `WATCHDOG=1`, `WATCHDOG=trigger` and `WATCHDOG_USEC=<microseconds>`, and ignores the rest
//! (`ERRNO=`, file-descriptor store messages, a `WATCHDOG=` or `WATCHDOG_USEC=` it cannot
//! read, as systemd ignores them, and anything unknown), as a client of the protocol may send
//! what its manager does not use.
//!
//! What systemd accepts is accepted, and what it ignores is ignored ([`read`]): a message of
//! up to [`DATAGRAM_MAX`] bytes, with a trailing NUL or none; a longer one, or one with a NUL
//! inside, is ignored whole; a line that is not UTF-8 is skipped. `BARRIER=1`, which
//! `sd_notify_barrier` and `systemd-notify` send alone with the write end of a pipe and then
//! wait for the pipe to close, says nothing: the descriptor was let go when the datagram was
//! read, after every datagram before it, which answers the barrier.

use std::io;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::SocketAddr;

use cobble_sys::notify::{Received, pass_credentials, recv_with_sender};
use tokio::io::Interest;
use tokio::net::UnixDatagram;

/// The environment variable that names the socket in the service's environment.
pub(crate) const NOTIFY_SOCKET: &str = "NOTIFY_SOCKET";

/// The longest message read, as systemd's (`PIPE_BUF`); sd_notify messages are a few dozen
/// bytes.
pub(crate) const DATAGRAM_MAX: usize = 4096;

/// A service's notify socket.
#[derive(Debug)]
pub(crate) struct NotifySocket {
    /// The address as `$NOTIFY_SOCKET` gives it (`@` for the abstract namespace).
    address: String,
    socket: UnixDatagram,
}

impl NotifySocket {
    /// Binds a socket under a name no other socket has. Needs a runtime.
    pub(crate) fn bind() -> io::Result<NotifySocket> {
        let name = format!(
            "cobble-notify/{}/{:016x}",
            std::process::id(),
            cobble_client::random::random_u64()
        );
        let address = SocketAddr::from_abstract_name(name.as_bytes())?;
        let socket = std::os::unix::net::UnixDatagram::bind_addr(&address)?;
        socket.set_nonblocking(true)?;
        pass_credentials(&socket)?;
        Ok(NotifySocket {
            address: format!("@{name}"),
            socket: UnixDatagram::from_std(socket)?,
        })
    }

    /// The socket a predecessor bound at `address` and handed over as `fd` (see
    /// `daemon::reexec`): what was sent to it during the swap is still queued on it. Needs a
    /// runtime.
    pub(crate) fn adopt(fd: std::os::fd::OwnedFd, address: String) -> io::Result<NotifySocket> {
        let socket = std::os::unix::net::UnixDatagram::from(fd);
        socket.set_nonblocking(true)?;
        pass_credentials(&socket)?;
        Ok(NotifySocket {
            address,
            socket: UnixDatagram::from_std(socket)?,
        })
    }

    /// The socket's descriptor, for a re-execution to keep across `execve`.
    pub(crate) fn raw_fd(&self) -> std::os::fd::RawFd {
        std::os::fd::AsRawFd::as_raw_fd(&self.socket)
    }

    /// What the service is given as `$NOTIFY_SOCKET`.
    pub(crate) fn address(&self) -> &str {
        &self.address
    }

    /// The next datagram if one is queued, as [`NotifySocket::recv`] reads it; `WouldBlock`
    /// if none is.
    pub(crate) fn recv_queued(&self, buf: &mut [u8]) -> io::Result<Received> {
        recv_with_sender(&self.socket, buf)
    }

    /// The next datagram, read into `buf` (a longer one is cut to it and said to be), and
    /// who sent it.
    pub(crate) async fn recv(&self, buf: &mut [u8]) -> io::Result<Received> {
        loop {
            self.socket.readable().await?;
            match self
                .socket
                .try_io(Interest::READABLE, || recv_with_sender(&self.socket, buf))
            {
                Ok(received) => return Ok(received),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
    }
}

/// One assignment of a notify message that cobble acts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum NotifyField {
    /// `READY=1`: started, or done reloading.
    Ready,
    /// `RELOADING=1`: reloading its configuration.
    Reloading,
    /// `STOPPING=1`: shutting down.
    Stopping,
    /// `STATUS=...`: a line of free text on how it is doing.
    Status(String),
    /// `MAINPID=...`: another process claims to be the main one.
    MainPid(String),
    /// `WATCHDOG=1`: still alive, the watchdog's keep-alive ping.
    WatchdogPing,
    /// `WATCHDOG=trigger`: it found itself broken; act as if the watchdog had run out.
    WatchdogTrigger,
    /// `WATCHDOG_USEC=n`: the watchdog's interval for the rest of this run, in microseconds
    /// (0 turns it off for this run).
    WatchdogUsec(u64),
}

/// What one datagram says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Message {
    /// The assignments cobble acts on, in order (perhaps none).
    Fields(Vec<NotifyField>),
    /// `BARRIER=1`, alone: answered already (see the module's documentation).
    Barrier,
    /// Ignored whole, as systemd ignores it: why.
    Ignored(&'static str),
}

/// Reads a datagram of `bytes` (`truncated`: it was longer, and the rest is lost).
pub(crate) fn read(bytes: &[u8], truncated: bool) -> Message {
    if truncated || bytes.len() > DATAGRAM_MAX {
        return Message::Ignored("longer than 4096 bytes");
    }
    let bytes = bytes.strip_suffix(b"\0").unwrap_or(bytes);
    if bytes.contains(&0) {
        return Message::Ignored("it holds a NUL byte");
    }
    let lines: Vec<&str> = bytes
        .split(|b| *b == b'\n')
        .filter(|line| !line.is_empty())
        .filter_map(|line| std::str::from_utf8(line).ok())
        .collect();
    if lines.contains(&"BARRIER=1") {
        // As systemd: nothing else may come with a barrier.
        return if lines.len() == 1 {
            Message::Barrier
        } else {
            Message::Ignored("BARRIER=1 came with other assignments")
        };
    }
    Message::Fields(lines.into_iter().filter_map(parse_line).collect())
}

/// One assignment, if cobble acts on it.
fn parse_line(line: &str) -> Option<NotifyField> {
    let (key, value) = line.split_once('=')?;
    match (key, value) {
        ("READY", "1") => Some(NotifyField::Ready),
        ("RELOADING", "1") => Some(NotifyField::Reloading),
        ("STOPPING", "1") => Some(NotifyField::Stopping),
        ("STATUS", text) => Some(NotifyField::Status(text.to_owned())),
        ("MAINPID", pid) => Some(NotifyField::MainPid(pid.to_owned())),
        ("WATCHDOG", "1") => Some(NotifyField::WatchdogPing),
        ("WATCHDOG", "trigger") => Some(NotifyField::WatchdogTrigger),
        ("WATCHDOG_USEC", usec) => usec.parse().ok().map(NotifyField::WatchdogUsec),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(message: &str) -> Vec<NotifyField> {
        match read(message.as_bytes(), false) {
            Message::Fields(fields) => fields,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_fields_cobble_acts_on_are_read_in_order_and_the_rest_ignored() {
        assert_eq!(
            fields("STATUS=loading cache\nWATCHDOG=1\nREADY=1\nERRNO=2\nbogus\nREADY=0\n"),
            [
                NotifyField::Status("loading cache".into()),
                NotifyField::WatchdogPing,
                NotifyField::Ready
            ]
        );
        assert_eq!(
            fields(
                "WATCHDOG=trigger\nWATCHDOG_USEC=20000000\nWATCHDOG_USEC=0\nWATCHDOG=2\nWATCHDOG_USEC=-1\nWATCHDOG_USEC=soon"
            ),
            [
                NotifyField::WatchdogTrigger,
                NotifyField::WatchdogUsec(20_000_000),
                NotifyField::WatchdogUsec(0)
            ]
        );
        assert_eq!(
            fields("RELOADING=1\nMONOTONIC_USEC=1\nSTOPPING=1\nMAINPID=42"),
            [
                NotifyField::Reloading,
                NotifyField::Stopping,
                NotifyField::MainPid("42".into())
            ]
        );
        assert_eq!(fields("STATUS="), [NotifyField::Status(String::new())]);
        assert!(fields("").is_empty());
        assert_eq!(fields("READY=1\0"), [NotifyField::Ready], "a trailing NUL");
    }

    #[test]
    fn what_systemd_ignores_is_ignored() {
        let mut status = b"STATUS=caf\xc3\xa9\nSTATUS=\xff\xfe\nREADY=1".to_vec();
        assert_eq!(
            read(&status, false),
            Message::Fields(vec![NotifyField::Status("café".into()), NotifyField::Ready]),
            "a line that is not UTF-8 is skipped"
        );
        assert_eq!(
            read(&status, true),
            Message::Ignored("longer than 4096 bytes")
        );
        status.resize(DATAGRAM_MAX + 1, b'x');
        assert_eq!(
            read(&status, false),
            Message::Ignored("longer than 4096 bytes")
        );
        assert_eq!(
            read(b"READY=1\0STATUS=x", false),
            Message::Ignored("it holds a NUL byte")
        );
        assert_eq!(read(b"BARRIER=1", false), Message::Barrier);
        assert_eq!(read(b"BARRIER=1\n", false), Message::Barrier);
        assert_eq!(
            read(b"READY=1\nBARRIER=1", false),
            Message::Ignored("BARRIER=1 came with other assignments")
        );
    }

    #[tokio::test]
    async fn a_message_sent_to_the_address_arrives_with_its_sender() {
        let socket = NotifySocket::bind().unwrap();
        let address = socket.address().to_owned();
        assert!(address.starts_with("@cobble-notify/"), "{address}");
        let other = NotifySocket::bind().unwrap();
        assert_ne!(other.address(), address, "each service has its own");
        let name = address.trim_start_matches('@');
        let to = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let client = std::os::unix::net::UnixDatagram::unbound().unwrap();
        client.send_to_addr(b"READY=1", &to).unwrap();
        let mut buf = [0u8; DATAGRAM_MAX];
        let received = socket.recv(&mut buf).await.unwrap();
        assert_eq!(&buf[..received.len], b"READY=1");
        assert_eq!(received.sender.unwrap().pid, std::process::id());
    }
}
