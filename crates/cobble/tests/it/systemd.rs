//! Under systemd (`Type=notify`): what the daemon sends on a real datagram socket given as
//! `NOTIFY_SOCKET`, a path or an abstract name. `READY=1` once the API answers, `WATCHDOG=1`
//! at half of `WATCHDOG_USEC`, no socket-activation standby (Pebble stops its services and
//! exits 42 after about 5 s of nothing to do), `STOPPING=1` at shutdown and no ping after it.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixDatagram;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::fixture::{Daemon, free_port};

const LONG: Duration = Duration::from_secs(60);

/// What arrived on the socket, in order, with when; and, for `READY=1`, whether `--http`
/// answered `/v1/health` right then.
struct Received {
    at: Instant,
    state: String,
    health_answered: bool,
}

/// Receives on `socket` on a thread of its own, passing each datagram on as it comes, until
/// the receiver is dropped.
fn receive(socket: UnixDatagram, http: Option<String>) -> mpsc::Receiver<Received> {
    let (tx, rx) = mpsc::channel();
    socket
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    std::thread::spawn(move || {
        let mut buf = [0u8; 512];
        loop {
            let n = match socket.recv(&mut buf) {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(e) if e.kind() == std::io::ErrorKind::TimedOut => continue,
                Err(_) => return,
            };
            let at = Instant::now();
            let state = String::from_utf8_lossy(&buf[..n]).into_owned();
            let health_answered =
                state == "READY=1" && http.as_deref().is_some_and(health_over_http);
            if tx
                .send(Received {
                    at,
                    state,
                    health_answered,
                })
                .is_err()
            {
                return;
            }
        }
    });
    rx
}

fn health_over_http(address: &str) -> bool {
    let Ok(mut s) = TcpStream::connect(address) else {
        return false;
    };
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = s.write_all(b"GET /v1/health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    answer.starts_with("HTTP/1.1 200")
}

fn next(rx: &mpsc::Receiver<Received>) -> Received {
    rx.recv_timeout(LONG).expect("a notification in time")
}

/// Everything the (exited) daemon sent that has not been read yet: a marker sent to the
/// socket now comes after all of it.
fn rest(
    rx: &mpsc::Receiver<Received>,
    send_marker: impl FnOnce(&UnixDatagram, &[u8]),
) -> Vec<String> {
    send_marker(&UnixDatagram::unbound().unwrap(), b"END");
    let mut rest = Vec::new();
    loop {
        let got = next(rx).state;
        if got == "END" {
            return rest;
        }
        rest.push(got);
    }
}

#[test]
fn ready_watchdog_at_half_the_period_no_standby_and_stopping() {
    let scratch = tempfile::tempdir().unwrap();
    let path = scratch.path().join("notify");
    let address = format!("127.0.0.1:{}", free_port());
    let rx = receive(UnixDatagram::bind(&path).unwrap(), Some(address.clone()));
    let layer =
        "services:\n  srv:\n    override: replace\n    startup: enabled\n    command: sleep 1000\n";
    let mut d = Daemon::start_with_env(
        &[("001-layer", layer)],
        &["--http", &address],
        &[
            ("NOTIFY_SOCKET", path.to_str().unwrap()),
            // A ping every 100 ms.
            ("WATCHDOG_USEC", "200000"),
        ],
    );
    let ready = next(&rx);
    assert_eq!(ready.state, "READY=1");
    assert!(ready.health_answered, "READY=1 before the API answered");
    // Past Pebble's 5 s standby, pings and nothing else; the daemon and its service live on.
    let mut pings = 0;
    let last = loop {
        let got = next(&rx);
        assert_eq!(got.state, "WATCHDOG=1");
        pings += 1;
        if pings == 65 {
            break got.at;
        }
    };
    assert!(
        last - ready.at >= Duration::from_millis(6000),
        "65 pings in {:?}: faster than one per 100 ms",
        last - ready.at
    );
    assert!(
        crate::fixture::service(&d, "srv").current == "active",
        "the service was stopped"
    );
    assert_eq!(d.stop(), Some(0));
    // Pings may have been sent up to the shutdown; none after STOPPING=1.
    let after = rest(&rx, |socket, marker| {
        socket.send_to(marker, &path).unwrap();
    });
    let stopping = after
        .iter()
        .position(|s| s == "STOPPING=1")
        .unwrap_or_else(|| panic!("no STOPPING=1: {after:?}"));
    assert!(
        after[..stopping].iter().all(|s| s == "WATCHDOG=1") && after.len() == stopping + 1,
        "{after:?}"
    );
}

#[test]
fn an_abstract_notify_socket_is_told_too() {
    use std::os::linux::net::SocketAddrExt;
    let name = format!("cobble-it-notify-{}", std::process::id());
    let address = std::os::unix::net::SocketAddr::from_abstract_name(&name).unwrap();
    let rx = receive(UnixDatagram::bind_addr(&address).unwrap(), None);
    let mut d = Daemon::start_with_env(&[], &["--hold"], &[("NOTIFY_SOCKET", &format!("@{name}"))]);
    assert_eq!(next(&rx).state, "READY=1");
    assert_eq!(d.stop(), Some(0));
    let after = rest(&rx, |socket, marker| {
        socket.send_to_addr(marker, &address).unwrap();
    });
    assert_eq!(after, ["STOPPING=1"], "no WATCHDOG_USEC, no pings");
}
