//! Edges of the daemon's contract: one daemon per directory, nothing left behind by an
//! interrupted write, and HTTP answers a careless or hostile client can still read.

use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::process::{Child, Stdio};
use std::time::Duration;

use crate::fixture::{COBBLE, Daemon, has_file_open_in, service, wait_for};

/// Waits (bounded) for `child` to exit; kills it if it does not, so that a daemon that
/// should have refused to start fails the test instead of hanging it.
fn wait_for_exit(child: &mut Child) -> Option<i32> {
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while std::time::Instant::now() < deadline {
        if let Some(exit) = child.try_wait().expect("try_wait") {
            return exit.code();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("the second daemon kept running");
}

const SLEEPER: &str = "services:\n  sleeper:\n    override: replace\n    command: sleep 987.125\n    startup: enabled\n";

/// A second `cobble run` on a served directory refuses to start and touches nothing: the
/// first daemon's service keeps its process, its socket stays, and a socket asked for
/// elsewhere is not created.
#[test]
fn a_second_daemon_on_a_served_directory_exits_and_touches_nothing() {
    let daemon = Daemon::start(&[("001-sleeper", SLEEPER)], &[]);
    wait_for("sleeper to run", Duration::from_secs(30), || {
        service(&daemon, "sleeper").current == "active"
    });
    let dir = daemon.pebble_dir();
    let socket = dir.join(".pebble.socket");
    let sleeper_pids = || {
        let out = std::process::Command::new("pgrep")
            .args(["-f", "^sleep 987.125$"])
            .output()
            .expect("pgrep");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let pids_before = sleeper_pids();
    let socket_before = std::fs::metadata(&socket).unwrap().ino();

    let elsewhere = daemon.scratch().join("other.socket");
    for socket_env in [None, Some(&elsewhere)] {
        let mut command = std::process::Command::new(COBBLE);
        command
            .arg("run")
            .env("PEBBLE", &dir)
            .env_remove("PEBBLE_SOCKET")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if let Some(path) = socket_env {
            command.env("PEBBLE_SOCKET", path);
        }
        let mut second = command.spawn().expect("second daemon");
        let status = wait_for_exit(&mut second);
        let mut stderr = String::new();
        second
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        assert_eq!(status, Some(1), "{stderr}");
        let expected = format!("another daemon is already running on {}", dir.display());
        assert!(stderr.contains(&expected), "{stderr}");
    }

    assert!(!elsewhere.exists(), "the second daemon created its socket");
    assert_eq!(std::fs::metadata(&socket).unwrap().ino(), socket_before);
    assert!(!pids_before.is_empty());
    assert_eq!(sleeper_pids(), pids_before, "the sleeper was restarted");
    let info = service(&daemon, "sleeper");
    assert_eq!(info.current, "active");
}

/// The lock dies with its daemon: a killed daemon does not keep the next one out.
#[test]
fn a_killed_daemon_does_not_keep_the_next_one_out() {
    let mut daemon = Daemon::hold(&[]);
    daemon.kill();
    daemon.restart(&["--hold"]);
    daemon.stop();
}

/// A daemon killed in the middle of a large push leaves nothing beside the target, and the
/// next daemon removes the temporary files a killed one left in `$PEBBLE`.
#[test]
fn a_push_cut_by_a_killed_daemon_leaves_no_temporary_file() {
    let mut daemon = Daemon::hold(&[]);
    let dir = daemon.scratch().join("target");
    std::fs::create_dir(&dir).unwrap();
    let target = dir.join("big.bin");
    std::fs::write(&target, "old content").unwrap();
    let boundary = "0123456789abcdef0123456789abcdef";
    let path = target.display().to_string();
    let head = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"request\"\r\n\r\n\
         {{\"action\":\"write\",\"files\":[{{\"path\":\"{path}\"}}]}}\r\n--{boundary}\r\n\
         Content-Disposition: form-data; name=\"files\"; filename=\"{path}\"\r\n\r\n"
    );
    let mut stream = UnixStream::connect(daemon.pebble_dir().join(".pebble.socket")).unwrap();
    // Announced as 200 MB; the daemon dies long before that.
    write!(
        stream,
        "POST /v1/files HTTP/1.1\r\nHost: localhost\r\n\
         Content-Type: multipart/form-data; boundary={boundary}\r\n\
         Content-Length: 200000000\r\n\r\n{head}"
    )
    .unwrap();
    let block = vec![b'x'; 1024 * 1024];
    stream.write_all(&block).unwrap();
    wait_for("the push to open its file", Duration::from_secs(10), || {
        has_file_open_in(daemon.pid(), &dir)
    });
    // The daemon reads as it writes, so once these are sent most of them are on disk.
    for _ in 0..32 {
        stream.write_all(&block).unwrap();
    }
    daemon.kill();
    drop(stream);
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["big.bin"]);
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "old content");

    // What a daemon killed where the file system cannot hide its temporary files leaves.
    let pebble = daemon.pebble_dir();
    for name in [
        ".pebble.state.1234~",
        ".cobble-processes.99~",
        "big.bin.42~",
    ] {
        std::fs::write(pebble.join(name), "partial").unwrap();
    }
    std::fs::write(pebble.join("mine~"), "a user's file").unwrap();
    daemon.restart(&["--hold"]);
    let mut names: Vec<String> = std::fs::read_dir(&pebble)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with('~'))
        .collect();
    names.sort();
    assert_eq!(names, ["mine~"]);
}

/// Sends `request` on a fresh connection to `daemon`, closes the sending side, and returns
/// everything the daemon answered.
fn exchange(daemon: &Daemon, request: &[u8]) -> String {
    exchange_with(daemon, request, true)
}

/// [`exchange`], closing the sending side only if `half_close` (the request then has to
/// ask for `Connection: close`).
fn exchange_with(daemon: &Daemon, request: &[u8], half_close: bool) -> String {
    let mut stream = UnixStream::connect(daemon.pebble_dir().join(".pebble.socket")).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    stream.write_all(request).expect("send request");
    if half_close {
        stream.shutdown(std::net::Shutdown::Write).unwrap();
    }
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).expect("read answer");
    String::from_utf8_lossy(&answer).into_owned()
}

#[test]
fn a_negative_wait_timeout_is_refused() {
    let daemon = Daemon::hold(&[("001-sleeper", SLEEPER)]);
    let c = crate::fixture::client(&daemon);
    let id = crate::fixture::rt()
        .block_on(c.services_action("start", &["sleeper".to_owned()]))
        .expect("start");
    // Asked at once, while the start is still in progress.
    let (status, body) = crate::fixture::raw(
        &daemon,
        cobble_client::Method::GET,
        &format!("/v1/changes/{id}/wait?timeout=-1s"),
        None,
    );
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains(r#""message":"invalid timeout: duration \"-1s\" is negative""#),
        "{body}"
    );
}

/// A push with `boundary`, of one file `path` holding `content`.
fn push_with_boundary(boundary: &str, path: &str, content: &str) -> Vec<u8> {
    let body = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"request\"\r\n\r\n\
         {{\"action\":\"write\",\"files\":[{{\"path\":\"{path}\"}}]}}\r\n--{boundary}\r\n\
         Content-Disposition: form-data; name=\"files\"; filename=\"{path}\"\r\n\r\n\
         {content}\r\n--{boundary}--\r\n"
    );
    format!(
        "POST /v1/files HTTP/1.1\r\nHost: localhost\r\n\
         Content-Type: multipart/form-data; boundary=\"{boundary}\"\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Pebble's rule for multipart boundaries: at least 32 characters, and no upper bound (RFC
/// 2046's 70 is not enforced by Go's reader).
#[test]
fn multipart_boundaries_of_32_characters_or_more_are_taken_as_pebble_takes_them() {
    let daemon = Daemon::hold(&[]);
    let shortest = "b".repeat(32);
    let long = "b".repeat(200);
    for boundary in [
        shortest.as_str(),
        "a boundary with spaces in it, 32+",
        long.as_str(),
    ] {
        let target = daemon.scratch().join(format!("pushed-{}", boundary.len()));
        let path = target.display().to_string();
        let answer = exchange(&daemon, &push_with_boundary(boundary, &path, "content"));
        assert!(
            answer.starts_with("HTTP/1.1 200 OK"),
            "{boundary:?}: {answer}"
        );
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "content");
    }
    let too_short = "b".repeat(31);
    for boundary in ["b", too_short.as_str()] {
        let path = daemon.scratch().join("never").display().to_string();
        let answer = exchange(&daemon, &push_with_boundary(boundary, &path, "content"));
        assert!(answer.starts_with("HTTP/1.1 400 Bad Request"), "{answer}");
        assert!(
            answer.contains(&format!(r#""message":"invalid boundary \"{boundary}\"""#)),
            "{answer}"
        );
        assert!(!daemon.scratch().join("never").exists());
    }
}

/// A body over the limit is answered with a 400 the client can read, not a reset while it
/// is still sending.
#[test]
fn a_body_over_the_limit_gets_a_readable_400() {
    let daemon = Daemon::hold(&[]);
    let mut body = String::from(r#"{"action":"start","services":[""#);
    body.push_str(&"a".repeat(6 * 1024 * 1024));
    body.push_str(r#""]}"#);
    let request = format!(
        "POST /v1/services HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
         Connection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let answer = exchange_with(&daemon, request.as_bytes(), false);
    assert!(answer.starts_with("HTTP/1.1 400 Bad Request"), "{answer}");
    assert!(answer.contains("request body too large"), "{answer}");
}

/// Pipelined requests from a client that has closed its sending side all get an answer.
#[test]
fn pipelined_requests_of_a_half_closed_client_are_all_answered() {
    let daemon = Daemon::hold(&[]);
    let one = "GET /v1/health HTTP/1.1\r\nHost: localhost\r\n\r\n";
    let answer = exchange(&daemon, one.repeat(3).as_bytes());
    assert_eq!(answer.matches("HTTP/1.1 200 OK").count(), 3, "{answer}");
}

#[test]
fn head_is_not_allowed_on_an_endpoint_as_in_pebble() {
    let daemon = Daemon::hold(&[]);
    // A known path: 405, with the headers of Pebble's error and no body.
    let answer = exchange(
        &daemon,
        b"HEAD /v1/system-info HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    assert!(
        answer.starts_with("HTTP/1.1 405 Method Not Allowed\r\n"),
        "{answer}"
    );
    assert!(
        answer.contains("content-type: application/json\r\n"),
        "{answer}"
    );
    assert!(
        answer.ends_with("\r\n\r\n"),
        "a body came with HEAD: {answer}"
    );
    // An unknown path is still not found, and GET still works.
    let answer = exchange(
        &daemon,
        b"HEAD /v1/nothing HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    assert!(answer.starts_with("HTTP/1.1 404 Not Found\r\n"), "{answer}");
    let (status, body) =
        crate::fixture::raw(&daemon, cobble_client::Method::GET, "/v1/system-info", None);
    assert_eq!(status, 200, "{body}");
    // Another method still names itself.
    let answer = exchange(
        &daemon,
        b"PUT /v1/system-info HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    );
    assert!(
        answer.contains(r#""message":"method \"PUT\" not allowed""#),
        "{answer}"
    );
}
