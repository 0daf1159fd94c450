//! A listening socket passed as a service manager passes it (descriptor 3, `LISTEN_FDS`,
//! `LISTEN_PID`, `LISTEN_FDNAMES`): used instead of `-webhookPort`, accepted from only once
//! the certificates load, ignored when meant for another pid, refused when it is not there
//! or does not listen.

use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use tokio::net::TcpStream;

use crate::support::*;

/// A socket listening on an ephemeral port of 127.0.0.1, as a service manager holds it.
fn held_socket() -> (OwnedFd, u16) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    (OwnedFd::from(listener), port)
}

/// How many connections wait in the accept queue of the socket listening on
/// 127.0.0.1:`port` (for a listening socket, `/proc/net/tcp`'s rx_queue is that queue).
fn accept_queue(port: u16) -> Option<u32> {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    let local = format!("0100007F:{port:04X}");
    table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.get(1) != Some(&local.as_str()) || fields.get(3) != Some(&"0A") {
            return None;
        }
        let (_tx, rx) = fields.get(4)?.split_once(':')?;
        u32::from_str_radix(rx, 16).ok()
    })
}

/// Polls `condition` until it holds (bounded by `STARTUP`).
async fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + STARTUP;
    while !condition() {
        assert!(Instant::now() < deadline, "{what}: not within {STARTUP:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_passed_socket_holds_connections_until_the_certificates_load_then_serves_them() {
    let scratch = Scratch::new();
    let certs = scratch.path("certs");
    let (socket, port) = held_socket();
    let webhook = Webhook::start_with_socket(
        &strs(&cert_args(&certs)),
        &[],
        &scratch.home(),
        socket,
        "https",
        None,
    );
    webhook.wait_for_log(
        "using listening socket \"https\" (fd 3) passed by the service manager",
        STARTUP,
    );
    webhook.wait_for_log("waiting for a valid certificate and key", STARTUP);

    // The kernel takes the connection (the socket listens); the webhook leaves it queued.
    let tcp = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let ca = scratch.ca.pem.clone();
    let pending = tokio::spawn(async move { Client::handshake(tcp, &ca).await });
    wait_until("the connection waits in the backlog", || {
        accept_queue(port) == Some(1)
    })
    .await;
    assert!(
        !pending.is_finished(),
        "a TLS handshake without certificates"
    );
    assert_eq!(webhook.count_log("serving webhooks on"), 0);

    // Once they load, the waiting connection is accepted and answered.
    write_pair(&certs, &scratch.a);
    let mut client = tokio::time::timeout(STARTUP, pending)
        .await
        .expect("the waiting connection was not served")
        .unwrap()
        .unwrap();
    assert_eq!(client.peer, scratch.a.der);
    let (status, body) = client.request("GET", "/healthz", "", vec![]).await;
    assert_eq!((status.as_u16(), &body[..]), (200, &b"ok"[..]));
    assert_eq!(webhook.port(STARTUP), port, "serving on the passed socket");
    assert_eq!(accept_queue(port), Some(0));

    // And new connections, an AdmissionReview among them.
    let mut client = Client::connect(port, &scratch.ca.pem).await.unwrap();
    let pod = notebook_pod();
    let denied = outcome(&pod, &client.review(&review("v1", "1", &pod)).await).unwrap_err();
    assert!(
        denied.starts_with("cannot find a Kubernetes configuration"),
        "{denied}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sockets_passed_to_another_pid_are_ignored_and_the_port_is_bound() {
    let scratch = Scratch::new();
    let certs = scratch.path("certs");
    write_pair(&certs, &scratch.a);
    let (socket, held) = held_socket();
    // The test's own pid is never the webhook's.
    let other = std::process::id();
    let webhook = Webhook::start_with_socket(
        &strs(&cert_args(&certs)),
        &[],
        &scratch.home(),
        socket,
        "https",
        Some(other),
    );
    webhook.wait_for_log(
        &format!("ignoring the sockets in LISTEN_FDS: LISTEN_PID is {other}, not this process"),
        STARTUP,
    );
    let port = webhook.port(STARTUP);
    assert_ne!(port, held);
    let client = Client::connect_when_ready(port, &scratch.ca.pem, STARTUP).await;
    assert_eq!(client.peer, scratch.a.der);
    assert_eq!(webhook.count_log("using listening socket"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_socket_name_nobody_passed_is_an_error_naming_what_was_passed() {
    let scratch = Scratch::new();
    let mut args = cert_args(&scratch.path("certs"));
    args.push("-listen-fd-name=webhook".into());
    let (socket, _) = held_socket();
    let mut webhook =
        Webhook::start_with_socket(&strs(&args), &[], &scratch.home(), socket, "https", None);
    assert_eq!(webhook.wait_exit(STARTUP).code(), Some(1));
    webhook.wait_for_log(
        "no passed socket is named \"webhook\" (-listen-fd-name): the service manager passed 1 socket: fd 3 \"https\"",
        STARTUP,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_passed_socket_that_is_no_listening_tcp_socket_is_refused() {
    let scratch = Scratch::new();
    let args = cert_args(&scratch.path("certs"));
    let peer = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let connected = std::net::TcpStream::connect(peer.local_addr().unwrap()).unwrap();
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    for (socket, why) in [
        (
            OwnedFd::from(connected),
            "it is not listening (the service manager must bind and listen on it)",
        ),
        (OwnedFd::from(udp), "fd 3 is not a valid tcp socket"),
    ] {
        let mut webhook =
            Webhook::start_with_socket(&strs(&args), &[], &scratch.home(), socket, "web", None);
        assert_eq!(webhook.wait_exit(STARTUP).code(), Some(1), "{why}");
        webhook.wait_for_log(
            &format!("cannot use the passed socket \"web\" (fd 3): {why}"),
            STARTUP,
        );
    }
}
