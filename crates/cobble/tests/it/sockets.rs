//! Held listening sockets (`sockets:`): bound when the plan names them, passed to each run as
//! systemd passes them (`LISTEN_FDS`, `LISTEN_PID`, `LISTEN_FDNAMES`), kept across stops,
//! restarts and crashes so that clients wait instead of being refused, and closed when the
//! plan lets them go. Also what a service with a `watchdog` is told of it.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::time::Duration;

use cobble_client::types::HeldSocketDetails;

use crate::fixture::{Daemon, Test, act, details_of, free_port, lines, running, service, wait_for};

const LONG: Duration = Duration::from_secs(20);

/// A server that accepts on the socket passed as fd 3 and answers each connection with its
/// pid; each run first writes `pid LISTEN_PID LISTEN_FDS LISTEN_FDNAMES` to `record`.
fn server(dir: &Path, record: &Path) -> String {
    let script = dir.join("server.py");
    std::fs::write(
        &script,
        "import os, socket, sys\n\
         env = os.environ\n\
         with open(sys.argv[1], 'a') as f:\n\
         \x20   f.write(' '.join([str(os.getpid()), env.get('LISTEN_PID', '-'), \
         env.get('LISTEN_FDS', '-'), env.get('LISTEN_FDNAMES', '-')]) + '\\n')\n\
         s = socket.socket(fileno=3)\n\
         while True:\n\
         \x20   c, _ = s.accept()\n\
         \x20   c.recv(100)\n\
         \x20   c.sendall(('%d\\n' % os.getpid()).encode())\n\
         \x20   c.close()\n",
    )
    .unwrap();
    format!("python3 {} {}", script.display(), record.display())
}

/// Connects to `address` and sends a request; the answer is read later.
fn connect(address: SocketAddr) -> TcpStream {
    let mut stream = TcpStream::connect(address).expect("the kernel accepts for a held socket");
    stream.set_read_timeout(Some(LONG)).unwrap();
    stream.write_all(b"hello\n").unwrap();
    stream
}

/// The pid of the run that answered `stream`.
fn answer(mut stream: TcpStream) -> u32 {
    let mut text = String::new();
    if let Err(e) = stream.read_to_string(&mut text) {
        panic!("no answer: {e}");
    }
    text.trim()
        .parse()
        .unwrap_or_else(|_| panic!("answer {text:?}"))
}

fn layer(command: &str, port: u16) -> String {
    format!(
        "services:\n  web:\n    override: replace\n    command: {command}\n    \
         backoff-delay: 1s\n    sockets:\n      http:\n        listen: 127.0.0.1:{port}\n"
    )
}

/// The founding promise of held sockets: a client that comes while the service is down
/// (stopped, restarting, or killed) waits in the backlog and is served by the next run.
#[test]
fn a_held_socket_outlives_stops_restarts_and_crashes_of_its_service() {
    let port = free_port();
    let address: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let record = scratch.path().join("runs");
    let d = Daemon::hold(&[("001-web", &layer(&server(scratch.path(), &record), port))]);

    // Held from the moment the plan names it: before the service has ever run.
    let early = connect(address);
    act(&d, "start", &["web"]);
    let first = answer(early);
    let runs = lines(&record);
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(
        runs[0],
        format!("{first} {first} 1 http"),
        "LISTEN_PID is the run's own pid"
    );

    // Stopped: still held, so a client waits, and the next start serves it.
    act(&d, "stop", &["web"]);
    let waiting = connect(address);
    act(&d, "start", &["web"]);
    let second = answer(waiting);
    assert_ne!(second, first);

    // Restarted.
    act(&d, "restart", &["web"]);
    let third = answer(connect(address));
    assert_ne!(third, second);

    // Killed: the daemon restarts it after its backoff, and a client that came meanwhile is
    // served by the new run.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(third as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    // Connected once the killed run is gone, within the backoff before the next: a client
    // of a run that dies holding its connection loses it, as under any supervisor.
    wait_for("the killed run to go", LONG, || !running(third));
    let during = connect(address);
    let fourth = answer(during);
    assert_ne!(fourth, third);
    assert_eq!(lines(&record).len(), 4);

    // An exec in the service's context gets none of it.
    Test::daemon(&d)
        .args(&[
            "exec",
            "--context",
            "web",
            "--",
            "sh",
            "-c",
            "echo ${LISTEN_FDS:-none}; [ -e /proc/$$/fd/3 ] && echo fd 3 open || echo fd 3 closed",
        ])
        .stdout("none\nfd 3 closed\n")
        .run();
}

/// A layer added through the API is answered only once the sockets it names are held, and
/// those it drops let go: a client that connects as soon as its `add` is answered is never
/// refused. Repeated, so that a daemon that bound them after answering would be caught.
#[test]
fn sockets_a_layer_adds_are_held_when_the_add_is_answered() {
    let scratch = tempfile::tempdir().unwrap();
    let d = Daemon::hold(&[]);
    let c = crate::fixture::client(&d);
    let rt = crate::fixture::rt();
    let mut previous: Option<std::path::PathBuf> = None;
    for round in 0..40 {
        let port = free_port();
        let path = scratch.path().join(format!("web-{round}.sock"));
        let yaml = format!(
            "services:\n  web:\n    override: replace\n    command: sleep 1000\n    \
             sockets:\n      http: {{listen: \"127.0.0.1:{port}\"}}\n      \
             admin: {{listen: {}}}\n",
            path.display()
        );
        rt.block_on(c.add_layer("web", &yaml, true, false))
            .expect("add");
        TcpStream::connect(("127.0.0.1", port)).unwrap_or_else(|e| {
            panic!("round {round}: 127.0.0.1:{port} refused right after the add: {e}")
        });
        std::os::unix::net::UnixStream::connect(&path).unwrap_or_else(|e| {
            panic!(
                "round {round}: {} refused right after the add: {e}",
                path.display()
            )
        });
        if let Some(old) = previous.replace(path) {
            assert!(
                !old.exists(),
                "round {round}: the dropped socket {} is still there after the add",
                old.display()
            );
        }
    }

    // A socket the added layer names that cannot be bound is told as at start-up: in the
    // daemon's log, and by the start of its service, which fails naming it.
    let squatter = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = squatter.local_addr().unwrap().port();
    let yaml = format!(
        "services:\n  web:\n    override: replace\n    command: sleep 1000\n    \
         sockets:\n      http: {{listen: \"127.0.0.1:{port}\"}}\n"
    );
    rt.block_on(c.add_layer("web", &yaml, true, false))
        .expect("add");
    let error =
        format!("cannot listen on 127.0.0.1:{port} for socket \"http\": address already in use");
    d.wait_log(&format!("Service \"web\": {error}"));
    Test::daemon(&d)
        .args(&["start", "web"])
        .stderr_contains(&format!("cannot start service: {error}"))
        .status(1)
        .run();
    assert_eq!(details_of(&d, "web").sockets[0].error, error);
}

/// A socket that cannot be bound is no silent skip: the start fails naming the address, and
/// a start once the address is free succeeds.
#[test]
fn a_socket_that_cannot_be_bound_fails_the_start_and_is_tried_again() {
    let squatter = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = squatter.local_addr().unwrap().port();
    let scratch = tempfile::tempdir().unwrap();
    let record = scratch.path().join("runs");
    let d = Daemon::hold(&[("001-web", &layer(&server(scratch.path(), &record), port))]);
    d.wait_log(&format!(
        "Service \"web\": cannot listen on 127.0.0.1:{port} for socket \"http\": address already in use"
    ));
    Test::daemon(&d)
        .args(&["start", "web"])
        .stderr_contains(&format!(
            "cannot start service: cannot listen on 127.0.0.1:{port} for socket \"http\": address already in use"
        ))
        .status(1)
        .run();
    assert!(
        lines(&record).is_empty(),
        "the service never ran without its socket"
    );
    let error =
        format!("cannot listen on 127.0.0.1:{port} for socket \"http\": address already in use");
    assert_eq!(details_of(&d, "web").sockets[0].error, error);
    drop(squatter);
    Test::daemon(&d).args(&["start", "web"]).any_stdout().run();
    let pid = answer(connect(format!("127.0.0.1:{port}").parse().unwrap()));
    assert_eq!(lines(&record).len(), 1);
    assert_eq!(service(&d, "web").current, "active", "pid {pid}");
}

/// A socket the plan lets go of is closed, and a unix socket's file goes with it; one whose
/// address changes moves; a unix socket gets the mode the layer asks for.
#[test]
fn sockets_the_plan_drops_are_closed_and_unix_sockets_get_their_mode() {
    let port = free_port();
    let scratch = tempfile::tempdir().unwrap();
    let path = scratch.path().join("admin.sock");
    let base = format!(
        "services:\n  web:\n    override: replace\n    command: sleep 1000\n    sockets:\n      \
         http: {{listen: \"127.0.0.1:{port}\"}}\n      admin: {{listen: {}, mode: \"0600\"}}\n",
        path.display()
    );
    // Held before the daemon answers.
    let d = Daemon::hold(&[("001-web", &base)]);
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let meta = std::fs::metadata(&path).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o7777, 0o600);
    std::os::unix::net::UnixStream::connect(&path).expect("held");
    TcpStream::connect(("127.0.0.1", port)).expect("held");

    // An address that changes is bound anew, and the old one let go; a new mode is applied
    // to the socket as it is.
    let moved_port = free_port();
    let moved = format!(
        "services:\n  web:\n    override: merge\n    sockets:\n      \
         http: {{listen: \"127.0.0.1:{moved_port}\"}}\n      admin: {{mode: \"0640\"}}\n"
    );
    let file = scratch.path().join("moved.yaml");
    std::fs::write(&file, moved).unwrap();
    Test::daemon(&d)
        .args(&["add", "001-web", "--combine", file.to_str().unwrap()])
        .any_stdout()
        .run();
    // All of it done when the add is answered.
    TcpStream::connect(("127.0.0.1", port)).expect_err("the old address is let go");
    TcpStream::connect(("127.0.0.1", moved_port)).expect("the new address is held");
    let meta = std::fs::metadata(&path).unwrap();
    assert_eq!(meta.permissions().mode() & 0o7777, 0o640);
    let port = moved_port;

    let without = "services:\n  web:\n    override: replace\n    command: sleep 1000\n";
    let file = scratch.path().join("without.yaml");
    std::fs::write(&file, without).unwrap();
    Test::daemon(&d)
        .args(&["add", "001-web", "--combine", file.to_str().unwrap()])
        .any_stdout()
        .run();
    assert!(!path.exists(), "the unix socket's file is removed");
    TcpStream::connect(("127.0.0.1", port)).expect_err("the socket is closed");
}

/// A `tcp` check of a held address succeeds while the service is down: the daemon says so.
#[test]
fn a_tcp_check_of_a_held_address_is_called_out() {
    let port = free_port();
    let yaml = format!(
        "services:\n  web:\n    override: replace\n    command: sleep 1000\n    sockets:\n      \
         http: {{listen: \":{port}\"}}\nchecks:\n  up:\n    override: replace\n    tcp: {{port: {port}}}\n"
    );
    let d = Daemon::hold(&[("001-web", &yaml)]);
    d.wait_log(&format!(
        "Check \"up\" (TCP) probes localhost:{port}, which cobble holds for service \"web\" (socket \"http\"): it succeeds while the service is down"
    ));
    // And where a user asks why the service is where it is.
    act(&d, "start", &["web"]);
    assert_eq!(
        details_of(&d, "web").sockets,
        [HeldSocketDetails {
            name: "http".into(),
            listen: format!(":{port}"),
            error: String::new(),
            probed_by: vec!["up".into()],
        }]
    );
    Test::daemon(&d)
        .args(&["why", "web"])
        .stdout_contains(&format!(
            "http on :{port}, held; tcp check \"up\" succeeds while the service is down"
        ))
        .run();
}

/// A service with a watchdog is told its interval and that the watchdog is its own, as
/// systemd tells it: `WATCHDOG_USEC`, and `WATCHDOG_PID` set to its own pid.
#[test]
fn a_watchdog_service_is_told_its_interval_and_pid() {
    let scratch = tempfile::tempdir().unwrap();
    let record = scratch.path().join("env");
    let yaml = format!(
        "services:\n  web:\n    override: replace\n    command: /bin/sh -c 'echo $$ $WATCHDOG_PID $WATCHDOG_USEC > {}; exec sleep 1000'\n    \
         readiness: notify\n    watchdog: 1500ms\n",
        record.display()
    );
    let d = Daemon::hold(&[("001-web", &yaml)]);
    let c = crate::fixture::client(&d);
    crate::fixture::rt().block_on(async {
        let _ = c.services_action("start", &["web".to_owned()]).await;
    });
    wait_for("the service's environment", LONG, || {
        lines(&record)
            .first()
            .is_some_and(|l| l.split(' ').count() == 3)
    });
    let fields: Vec<String> = lines(&record)[0].split(' ').map(str::to_owned).collect();
    assert_eq!(
        fields[0], fields[1],
        "WATCHDOG_PID is the service's own pid"
    );
    assert_eq!(fields[2], "1500000");
}
