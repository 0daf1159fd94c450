//! The daemon keeps answering when what it writes to is stalled, and does not limp on when a
//! part of it has died.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::fixture::{Daemon, client, free_port, rt, service, wait_for};

/// One `GET` over a fresh connection, as Kubernetes probes and `ops` do; returns the status
/// line and how long the answer took. A frozen daemon fails the read timeout, which is long
/// enough for a busy machine: a frozen daemon never answers.
fn get(mut stream: impl Read + Write, path: &str) -> (String, Duration) {
    let began = Instant::now();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: cobble\r\nConnection: close\r\n\r\n"
    )
    .expect("send request");
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).expect("read answer");
    let took = began.elapsed();
    let text = String::from_utf8_lossy(&answer);
    (text.lines().next().unwrap_or_default().to_owned(), took)
}

fn get_tcp(port: u16, path: &str) -> (String, Duration) {
    let stream = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    get(stream, path)
}

fn get_unix(socket: &Path, path: &str) -> (String, Duration) {
    let stream = UnixStream::connect(socket).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    get(stream, path)
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// Juju's shape: `--verbose`, stdout into the container's log pipe, `--http` for probes. The
/// pipe's reader is stalled and a service floods it; the API must not notice.
#[test]
fn a_verbose_daemon_keeps_answering_while_its_stdout_is_stalled() {
    let (mut stdout_reader, stdout_writer) = std::io::pipe().expect("pipe");
    let port = free_port();
    let http = format!("127.0.0.1:{port}");
    let daemon = Daemon::start_with_stdout(
        &[(
            "001-flood",
            "services:\n  flood:\n    override: replace\n    command: yes\n    startup: enabled\n",
        )],
        &["--create-dirs", "--verbose", "--http", &http],
        &[],
        stdout_writer,
    );
    wait_for("flood to run", Duration::from_secs(30), || {
        service(&daemon, "flood").current == "active"
    });
    let socket = daemon.pebble_dir().join(".pebble.socket");
    let baseline_rss = rss_kib(daemon.pid());

    let mut latencies = Vec::new();
    let mut peak_rss = baseline_rss;
    let began = Instant::now();
    while began.elapsed() < Duration::from_secs(10) {
        let (status, took) = get_tcp(port, "/v1/health");
        assert_eq!(status, "HTTP/1.1 200 OK", "health over --http");
        latencies.push(took);
        let (status, took) = get_unix(&socket, "/v1/services");
        assert_eq!(status, "HTTP/1.1 200 OK", "services over the socket");
        latencies.push(took);
        peak_rss = peak_rss.max(rss_kib(daemon.pid()));
        std::thread::sleep(Duration::from_millis(50));
    }
    // Every request was answered inside the read timeout: a daemon frozen on its stdout
    // fails that. How fast it answers is the benchmarks' business; shown for the record.
    latencies.sort();
    eprintln!(
        "{} requests answered; p99 {:?}, max {:?}",
        latencies.len(),
        latencies[latencies.len() * 99 / 100],
        latencies.last().unwrap()
    );
    // Output is dropped, not hoarded: a stalled pipe costs at most the queue's bound.
    assert!(
        peak_rss < baseline_rss + 16 * 1024,
        "RSS grew from {baseline_rss} KiB to {peak_rss} KiB"
    );

    // Once the pipe is read again, the daemon says how many lines were lost, on stdout where
    // they were lost and in its own log.
    let drain = std::thread::spawn(move || {
        let mut seen = Vec::new();
        let mut buf = vec![0u8; 1 << 16];
        while !String::from_utf8_lossy(&seen).contains("lines of service output") {
            let n = stdout_reader.read(&mut buf).expect("read stdout");
            assert!(n > 0, "stdout closed");
            seen.extend_from_slice(&buf[..n]);
            // Keep only a tail: the flood goes on.
            if seen.len() > 1 << 20 {
                seen.drain(..seen.len() - (1 << 16));
            }
        }
        stdout_reader
    });
    let mut stdout_reader = drain.join().expect("drain thread");
    wait_for("the drop count in the log", Duration::from_secs(30), || {
        daemon.log().contains("[pebble] Dropped ")
    });
    // Keep the pipe flowing until the daemon has stopped, so its exit is not held up.
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 1 << 16];
        while matches!(stdout_reader.read(&mut buf), Ok(n) if n > 0) {}
    });
    drop(daemon);
}

/// A supervisor that dies must not leave a daemon that answers `/v1/health` while nothing is
/// supervised: the daemon stops the services and exits non-zero, so the container restarts.
#[test]
fn a_dead_supervisor_stops_the_services_and_the_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pid");
    let layer = format!(
        "services:\n  web:\n    override: replace\n    startup: enabled\n    \
         command: /bin/sh -c 'echo $$ > {}; exec sleep 1000'\n",
        pid_file.display()
    );
    let mut daemon =
        Daemon::start_with_env(&[("001-web", &layer)], &[], &[("COBBLE_TEST_FAULTS", "1")]);
    wait_for("web to run", Duration::from_secs(30), || {
        std::fs::read_to_string(&pid_file).is_ok_and(|s| s.ends_with('\n'))
    });
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();

    // The injected fault panics the service manager's actor.
    let result =
        rt().block_on(client(&daemon).send_signal(cobble_daemon::PANIC_SIGNAL, &["web".into()]));
    assert!(result.is_err(), "the request cannot succeed: {result:?}");

    assert_eq!(
        daemon.wait_exit(Duration::from_secs(30)),
        Some(cobble_daemon::MANAGER_FAILED_EXIT_CODE),
        "{}",
        daemon.log()
    );
    let log = daemon.log();
    // A panic elsewhere re-executes the daemon, keeping the services: without their
    // supervisor, they cannot be handed over.
    assert!(
        log.contains("The service manager stopped: panic at crates/cobble-daemon/src/"),
        "{log}"
    );
    assert!(log.contains(": injected fault\n"), "{log}");
    assert!(
        log.contains(
            "Cannot continue: the service manager stopped: its services cannot be handed over \
             without it; stopping services"
        ),
        "{log}"
    );
    wait_for("the service to be gone", Duration::from_secs(10), || {
        !crate::fixture::running(pid.unsigned_abs())
    });
}
