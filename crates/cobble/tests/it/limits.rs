//! Listener limits: idle and slow clients are cut, other users cannot take every connection,
//! and the daemon keeps accepting when it runs out of descriptors.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::fixture::{Daemon, act, client, free_port, rt, service, wait_for};

const NOBODY: u32 = 65534;

fn socket(d: &Daemon) -> std::path::PathBuf {
    d.pebble_dir().join(".pebble.socket")
}

/// Reads until the server closes the connection; `false` if it is still open after 15 s.
fn closed_by_server(stream: &mut impl Read) -> bool {
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => {} // the read timeout: keep waiting until the deadline
        }
    }
    false
}

fn health_over_unix(d: &Daemon) -> bool {
    let Ok(mut s) = UnixStream::connect(socket(d)) else {
        return false;
    };
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    if s.write_all(b"GET /v1/health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    answer.starts_with("HTTP/1.1 200")
}

#[test]
fn idle_connections_are_closed_after_the_idle_timeout() {
    let d = Daemon::start_with_env(&[], &["--hold"], &[("COBBLE_IDLE_TIMEOUT", "1s")]);
    // Never a byte sent.
    let mut fresh = UnixStream::connect(socket(&d)).unwrap();
    fresh
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    // Idle after an answered request on a kept-alive connection.
    let mut kept = UnixStream::connect(socket(&d)).unwrap();
    kept.write_all(b"GET /v1/health HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    // The answer comes whenever the machine gets to it; only the wait for the close polls.
    kept.set_read_timeout(Some(Duration::from_secs(15)))
        .unwrap();
    let mut head = [0u8; 12];
    kept.read_exact(&mut head).unwrap();
    kept.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    assert_eq!(&head, b"HTTP/1.1 200");
    assert!(
        closed_by_server(&mut fresh),
        "a silent connection stayed open"
    );
    assert!(
        closed_by_server(&mut kept),
        "an idle connection stayed open"
    );
}

#[test]
fn a_client_sending_its_headers_slowly_is_cut() {
    let d = Daemon::start_with_env(&[], &["--hold"], &[("COBBLE_IDLE_TIMEOUT", "1s")]);
    let mut slow = UnixStream::connect(socket(&d)).unwrap();
    slow.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    slow.write_all(b"GET /v1/health HTTP/1.1\r\n").unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut buf = [0u8; 512];
    let mut cut = false;
    for n in 0.. {
        if Instant::now() > deadline {
            break;
        }
        // A header line every 100 ms (between reads that wait that long), never the end.
        if slow
            .write_all(format!("X-Slow-{n}: x\r\n").as_bytes())
            .is_err()
        {
            cut = true;
            break;
        }
        match slow.read(&mut buf) {
            Ok(0) => {
                cut = true;
                break;
            }
            Ok(_) => {} // whatever comes before the close
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                cut = true;
                break;
            }
            Err(_) => {}
        }
    }
    assert!(cut, "a slow header sender kept its connection");
    assert!(health_over_unix(&d));
}

#[test]
fn a_long_poll_outlives_the_idle_timeout() {
    let layer = "services:\n  stubborn:\n    override: replace\n    command: /bin/sh -c \"trap '' TERM; while :; do sleep 0.1; done\"\n    kill-delay: 3s\n";
    let d = Daemon::start_with_env(
        &[("001-base", layer)],
        &["--hold"],
        &[("COBBLE_IDLE_TIMEOUT", "1s")],
    );
    act(&d, "start", &["stubborn"]);
    let c = client(&d);
    let change = rt().block_on(async {
        let id = c
            .services_action("stop", &["stubborn".to_owned()])
            .await
            .unwrap();
        // Three seconds of kill-delay: three idle timeouts of waiting for the answer.
        c.wait_change(&id, Some(Duration::from_secs(30)))
            .await
            .expect("the wait was answered")
    });
    assert!(change.ready, "{change:?}");
    assert_eq!(service(&d, "stubborn").current, "inactive");
}

/// Opens `count` connections to `path` as `nobody` and holds them; prints how many are still
/// open once at most `cap` are (or after 10 s), then waits for its stdin to close.
fn hold_connections_as_nobody(
    path: &std::path::Path,
    count: usize,
    cap: usize,
) -> std::process::Child {
    let program = r#"
import select, socket, sys, time
path, count, cap = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
socks = []
for _ in range(count):
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    socks.append(s)
open_ = set(socks)
deadline = time.time() + 10
while time.time() < deadline and len(open_) > cap:
    readable, _, _ = select.select(list(open_), [], [], 0.2)
    for s in readable:
        if s.recv(1) == b"":
            open_.discard(s)
print(len(open_), flush=True)
sys.stdin.read()
"#;
    Command::new("python3")
        .args(["-c", program])
        .arg(path)
        .arg(count.to_string())
        .arg(cap.to_string())
        .uid(NOBODY)
        .gid(NOBODY)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 as nobody")
}

#[test]
fn other_users_cannot_take_every_connection_from_root() {
    let layer = "services:\n  s:\n    override: replace\n    command: sleep 1000\n";
    let d = Daemon::start_with_env(
        &[("001-base", layer)],
        &["--hold"],
        &[("COBBLE_MAX_CONNECTIONS_PER_UID", "8")],
    );
    // Let `nobody` reach the socket (its mode is 0666; the directories must be traversable).
    for dir in [d.scratch(), d.pebble_dir().as_path()] {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let mut holder = hold_connections_as_nobody(&socket(&d), 100, 8);
    let mut line = String::new();
    BufReader::new(holder.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "8", "connections nobody kept open");
    // Root is exempt: more connections than the cap, all answered.
    let roots: Vec<UnixStream> = (0..20)
        .map(|_| UnixStream::connect(socket(&d)).unwrap())
        .collect();
    assert!(health_over_unix(&d));
    act(&d, "start", &["s"]);
    assert_eq!(service(&d, "s").current, "active");
    drop(roots);
    drop(holder.stdin.take());
    let _ = holder.wait();
}

#[test]
fn the_http_listener_caps_its_connections_in_all() {
    let port = free_port();
    let address = format!("127.0.0.1:{port}");
    let d = Daemon::start_with_env(
        &[],
        &["--hold", "--http", &address],
        &[("COBBLE_MAX_HTTP_CONNECTIONS", "8")],
    );
    let mut streams: Vec<TcpStream> = (0..20)
        .map(|_| TcpStream::connect(&address).unwrap())
        .collect();
    for s in &streams {
        s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    }
    let mut open = streams.len();
    let deadline = Instant::now() + Duration::from_secs(10);
    while open > 8 && Instant::now() < deadline {
        streams.retain_mut(|s| {
            let mut buf = [0u8; 1];
            !matches!(s.read(&mut buf), Ok(0))
        });
        open = streams.len();
    }
    assert_eq!(open, 8, "connections kept open on --http");
    // The unix socket is not held up by a full --http.
    assert!(health_over_unix(&d));
    drop(streams);
    wait_for("--http answers again", Duration::from_secs(10), || {
        let Ok(mut s) = TcpStream::connect(&address) else {
            return false;
        };
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let _ =
            s.write_all(b"GET /v1/health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
        let mut answer = String::new();
        let _ = s.read_to_string(&mut answer);
        answer.starts_with("HTTP/1.1 200")
    });
}

/// Out of descriptors, the daemon refuses nothing for good: once some are free it answers.
#[test]
fn out_of_descriptors_the_daemon_keeps_accepting() {
    let d = Daemon::start_with_env(&[], &["--hold"], &[]);
    let fds = || {
        std::fs::read_dir(format!("/proc/{}/fd", d.pid()))
            .unwrap()
            .count()
    };
    let limit = fds() + 10;
    let status = Command::new("prlimit")
        .arg(format!("--pid={}", d.pid()))
        .arg(format!("--nofile={limit}:{limit}"))
        .status()
        .expect("prlimit");
    assert!(status.success());
    // Root is exempt from the per-uid cap: these run the daemon out of descriptors.
    let held: Vec<UnixStream> = (0..30)
        .map(|_| UnixStream::connect(socket(&d)).unwrap())
        .collect();
    wait_for("the descriptor limit", Duration::from_secs(10), || {
        fds() >= limit
    });
    drop(held);
    wait_for("an answer again", Duration::from_secs(15), || {
        health_over_unix(&d)
    });
}

/// One `GET /v1/health` over TCP on a connection of its own: the status line, or why not.
fn probe_health(address: &str) -> Result<String, String> {
    let mut s = TcpStream::connect(address).map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /v1/health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .map_err(|e| format!("write: {e}"))?;
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    answer
        .lines()
        .next()
        .filter(|line| !line.is_empty())
        .map(str::to_owned)
        .ok_or_else(|| "closed unanswered".to_owned())
}

/// `count` clients that send a request head to `address` one byte every 100 ms and never
/// finish it, each connecting again as soon as it is closed, until `stop`; `rounds` counts
/// the rounds of bytes sent. Returns how many times the server closed one of them.
fn slow_clients(
    address: String,
    count: usize,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    rounds: std::sync::Arc<std::sync::atomic::AtomicUsize>,
) -> std::thread::JoinHandle<usize> {
    use std::sync::atomic::Ordering;
    std::thread::spawn(move || {
        let head = b"GET /v1/health HTTP/1.1\r\nHost: localhost\r\nX-Slow: ";
        let connect = || {
            let s = TcpStream::connect(&address).ok()?;
            s.set_nonblocking(true).ok()?;
            Some((s, 0usize))
        };
        let mut clients: Vec<Option<(TcpStream, usize)>> = (0..count).map(|_| connect()).collect();
        let mut closed = 0;
        while !stop.load(Ordering::Relaxed) {
            for client in &mut clients {
                let alive = client.as_mut().is_some_and(|(s, sent)| {
                    let mut buf = [0u8; 64];
                    let open = match s.read(&mut buf) {
                        Ok(0) => false,
                        Ok(_) => true,
                        Err(e) => e.kind() == std::io::ErrorKind::WouldBlock,
                    };
                    let byte = head.get(*sent).copied().unwrap_or(b'x');
                    *sent += 1;
                    open && s.write_all(&[byte]).is_ok()
                });
                if !alive {
                    closed += usize::from(client.is_some());
                    *client = connect();
                }
            }
            rounds.fetch_add(1, Ordering::Relaxed);
            std::thread::sleep(Duration::from_millis(100));
        }
        closed
    })
}

/// Slow clients over the cap do not keep a probe out: the probe takes the place of the one
/// that has waited longest, and is answered; slow clients come and go.
#[test]
fn slow_clients_cannot_keep_a_health_probe_out() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let port = free_port();
    let address = format!("127.0.0.1:{port}");
    let d = Daemon::start_with_env(
        &[],
        &["--hold", "--http", &address],
        &[("COBBLE_MAX_HTTP_CONNECTIONS", "8")],
    );
    let stop = Arc::new(AtomicBool::new(false));
    let rounds = Arc::new(AtomicUsize::new(0));
    let slow = slow_clients(address.clone(), 40, stop.clone(), rounds.clone());
    // Five times as many slow clients as slots, each a few bytes into its request.
    wait_for(
        "the slow clients to get going",
        Duration::from_secs(10),
        || rounds.load(Ordering::Relaxed) >= 5,
    );
    let answers: Vec<Result<String, String>> = (0..20).map(|_| probe_health(&address)).collect();
    stop.store(true, Ordering::Relaxed);
    let closed = slow.join().unwrap();
    for answer in &answers {
        assert_eq!(answer.as_deref(), Ok("HTTP/1.1 200 OK"), "{answers:?}");
    }
    assert!(closed > 0, "no slow client was ever closed");
    d.wait_log("Closed the connection that waited longest");
}

/// With every connection of a user busy answering, that user's probe is answered from the
/// reserve, and the reserve answers nothing else.
#[test]
fn with_every_connection_busy_health_is_answered_from_the_reserve() {
    let d = Daemon::start_with_env(&[], &["--hold"], &[("COBBLE_MAX_CONNECTIONS_PER_UID", "2")]);
    for dir in [d.scratch(), d.pebble_dir().as_path()] {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    // As `nobody`: two long-polls hold both of its connections busy; then, once a request
    // on a new connection is answered 503, five probes and a request for something else.
    let program = r#"
import socket, sys, time
path = sys.argv[1]
def ask(request, keep=False):
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(10)
    s.connect(path)
    s.sendall(request)
    if keep:
        return s
    answer = b""
    while True:
        try:
            chunk = s.recv(65536)
        except socket.timeout:
            return "timeout: " + answer.decode()
        if not chunk:
            return answer.decode()
        answer += chunk
def closed(s):
    s.setblocking(False)
    try:
        return s.recv(1) == b""
    except BlockingIOError:
        return False
    finally:
        s.setblocking(True)
poll = b"GET /v1/notices?timeout=30s HTTP/1.1\r\nHost: x\r\n\r\n"
other = b"GET /v1/system-info HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
polls = [ask(poll, keep=True) for _ in range(2)]
# A newcomer may evict a poll whose request the daemon has not read yet: poll again.
deadline = time.time() + 10
while time.time() < deadline and not ask(other).startswith("HTTP/1.1 503"):
    polls = [ask(poll, keep=True) if closed(p) else p for p in polls]
for _ in range(5):
    print(ask(b"GET /v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").splitlines()[0])
print(ask(other.replace(b"Connection: close\r\n", b"")).replace("\r\n", " "))
"#;
    let out = Command::new("python3")
        .args(["-c", program])
        .arg(socket(&d))
        .uid(NOBODY)
        .gid(NOBODY)
        .output()
        .expect("python3 as nobody");
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines.len(),
        6,
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for line in &lines[..5] {
        assert_eq!(*line, "HTTP/1.1 200 OK", "{text}");
    }
    assert!(lines[5].starts_with("HTTP/1.1 503"), "{text}");
    assert!(
        lines[5].contains(r#""message":"too many connections""#),
        "{text}"
    );
    // Root is not held up by it.
    assert!(health_over_unix(&d));
}
