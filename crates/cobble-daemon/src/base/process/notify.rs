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

use std::io;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::SocketAddr;

use cobble_sys::notify::{Sender, pass_credentials, recv_with_sender};
use tokio::io::Interest;
use tokio::net::UnixDatagram;

/// The environment variable that names the socket in the service's environment.
pub(crate) const NOTIFY_SOCKET: &str = "NOTIFY_SOCKET";

/// The longest datagram read whole; sd_notify messages are a few dozen bytes.
const DATAGRAM_MAX: usize = 4096;

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

    /// What the service is given as `$NOTIFY_SOCKET`.
    pub(crate) fn address(&self) -> &str {
        &self.address
    }

    /// The next datagram, as text, and who sent it (`None`: the kernel did not say, and the
    /// datagram is worth nothing).
    pub(crate) async fn recv(&self) -> io::Result<(String, Option<Sender>)> {
        let mut buf = [0u8; DATAGRAM_MAX];
        loop {
            self.socket.readable().await?;
            match self.socket.try_io(Interest::READABLE, || {
                recv_with_sender(&self.socket, &mut buf)
            }) {
                Ok((len, sender)) => {
                    return Ok((String::from_utf8_lossy(&buf[..len]).into_owned(), sender));
                }
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

/// The assignments of one message that cobble acts on, in order.
pub(crate) fn parse(message: &str) -> Vec<NotifyField> {
    message
        .split('\n')
        .filter_map(|line| {
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
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fields_cobble_acts_on_are_read_in_order_and_the_rest_ignored() {
        assert_eq!(
            parse("STATUS=loading cache\nWATCHDOG=1\nREADY=1\nERRNO=2\nbogus\nREADY=0\n"),
            [
                NotifyField::Status("loading cache".into()),
                NotifyField::WatchdogPing,
                NotifyField::Ready
            ]
        );
        assert_eq!(
            parse(
                "WATCHDOG=trigger\nWATCHDOG_USEC=20000000\nWATCHDOG_USEC=0\nWATCHDOG=2\nWATCHDOG_USEC=-1\nWATCHDOG_USEC=soon"
            ),
            [
                NotifyField::WatchdogTrigger,
                NotifyField::WatchdogUsec(20_000_000),
                NotifyField::WatchdogUsec(0)
            ]
        );
        assert_eq!(
            parse("RELOADING=1\nMONOTONIC_USEC=1\nSTOPPING=1\nMAINPID=42"),
            [
                NotifyField::Reloading,
                NotifyField::Stopping,
                NotifyField::MainPid("42".into())
            ]
        );
        assert_eq!(parse("STATUS="), [NotifyField::Status(String::new())]);
        assert!(parse("").is_empty());
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
        let (text, sender) = socket.recv().await.unwrap();
        assert_eq!(text, "READY=1");
        assert_eq!(sender.unwrap().pid, std::process::id());
    }
}
