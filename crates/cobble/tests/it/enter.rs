//! `enter`: the daemon started in-process for one subcommand, then stopped; Pebble's rules for
//! which subcommands it runs and with which flags.

use std::fs;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tempfile::TempDir;

use cobble_client::ChangeSelector;

use crate::fixture::{COBBLE, Test, rt, wait_for};

const LAYER: &str = "\
services:
  svc:
    override: replace
    command: sleep 1000
    startup: enabled
";

/// A run of `enter` on a `$PEBBLE` that holds one layer with an enabled service, and that
/// directory, which outlives the run.
fn enter() -> (Test, TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let layers = dir.path().join("layers");
    fs::create_dir_all(&layers).unwrap();
    fs::write(layers.join("001-base.yaml"), LAYER).unwrap();
    let test = Test::new()
        .env("PEBBLE", dir.path().to_str().unwrap())
        .args(&["enter"]);
    (test, dir)
}

#[test]
fn services_runs_against_a_daemon_that_starts_nothing_and_logs_nothing() {
    let (test, dir) = enter();
    let dir = dir.path().to_path_buf();
    test.args(&["services"])
        .stdout("Service  Startup  Current   Since\nsvc      enabled  inactive  -\n")
        .run();
    assert!(
        !dir.join(".pebble.socket").exists(),
        "the daemon stopped and removed its socket"
    );
    assert!(
        dir.join(".pebble.state").exists(),
        "state is kept by default"
    );
}

#[test]
fn plan_and_ls_run_too() {
    let (test, _dir) = enter();
    test.args(&["plan"])
        .stdout_contains("        command: sleep 1000\n")
        .run();
    let (test, dir) = enter();
    let layers = dir.path().join("layers");
    test.args(&["ls", layers.to_str().unwrap()])
        .stdout("001-base.yaml\n")
        .run();
}

#[test]
fn verbose_shows_the_daemon_log() {
    let (test, _dir) = enter();
    test.args(&["-v", "services"])
        .any_stdout()
        .stderr_contains("[pebble] Started daemon.\n")
        .run();
}

/// `PEBBLE_VERBOSE=1 enter exec`: the daemon's log on stderr, with Pebble's line for each
/// request the command makes; without the variable, nothing.
#[test]
fn exec_with_pebble_verbose_logs_its_requests() {
    let (test, _dir) = enter();
    let output = test
        .env("PEBBLE_VERBOSE", "1")
        .args(&["exec", "echo", "hi"])
        .stdout("hi\n")
        .stderr_contains("[pebble] Started daemon.\n")
        .run();
    let requests: Vec<&str> = output
        .stderr
        .lines()
        .filter_map(|line| line.split_once(" [pebble] ").map(|(_, m)| m))
        .filter(|m| m.ends_with(" (http+unix)"))
        .collect();
    let shape: Vec<String> = requests
        .iter()
        .map(|m| {
            let words: Vec<&str> = m.split(' ').collect();
            let duration = words[2];
            let nanos = cobble_plan::parse_duration(duration).expect(duration);
            assert_eq!(cobble_plan::format_duration(nanos), duration, "{m}");
            // The task and change IDs vary; the rest is Pebble's.
            let target = words[1]
                .split('/')
                .map(|part| {
                    if part.bytes().all(|b| b.is_ascii_digit()) && !part.is_empty() {
                        "N"
                    } else {
                        part
                    }
                })
                .collect::<Vec<_>>()
                .join("/");
            format!(
                "{} {} {}",
                words[0],
                target.split('?').next().unwrap(),
                words[3]
            )
        })
        .collect();
    assert_eq!(
        shape,
        [
            "POST /v1/exec 202",
            "GET /v1/tasks/N/websocket/control 200",
            "GET /v1/tasks/N/websocket/stdio 200",
            "GET /v1/tasks/N/websocket/stderr 200",
            "GET /v1/changes/N/wait 200",
        ],
        "{}",
        output.stderr
    );

    let (test, _dir) = enter();
    test.args(&["exec", "echo", "hi"]).stdout("hi\n").run();
}

#[test]
fn persist_never_leaves_no_state_file() {
    for subcommand in [&["services"][..], &["exec", "echo", "hello world"]] {
        let (test, dir) = enter();
        test.env("PEBBLE_PERSIST", "never")
            .args(subcommand)
            .any_stdout()
            .run();
        assert!(
            !dir.path().join(".pebble.state").exists(),
            "{subcommand:?} left a state file"
        );
    }
}

#[test]
fn subcommands_and_flags_that_do_not_fit_are_refused() {
    let refused = [
        (&["changes"][..], "subcommand \"changes\" is not supported"),
        (
            &["--run", "services"],
            "cannot provide --run before \"services\" subcommand",
        ),
        (
            &["--run", "help"],
            "cannot provide --run before \"help\" subcommand",
        ),
        (
            &["stop", "svc"],
            "must use --run before \"stop\" subcommand",
        ),
        (
            &["--verbose", "exec", "true"],
            "cannot provide -v/--verbose before \"exec\" subcommand",
        ),
    ];
    for (args, message) in refused {
        let (test, _dir) = enter();
        test.args(args)
            .stderr(&format!("error: enter: {message}\n"))
            .status(1)
            .run();
    }
}

#[test]
fn a_daemon_that_cannot_start_gives_its_error_and_status() {
    let (test, dir) = enter();
    fs::write(dir.path().join("layers/002-bad.yaml"), "services: [").unwrap();
    test.args(&["services"])
        .stderr_glob("cannot run daemon: cannot load plan: cannot parse layer \"bad\"*\n")
        .status(1)
        .run();
}

#[test]
fn help_needs_no_daemon() {
    Test::new()
        .args(&["enter", "help"])
        .stdout_contains("Usage: cobble <command> [<options>...]")
        .run();
}

/// `start` leaves the daemon running, with the service up, until the daemon is told to stop.
#[test]
fn start_keeps_the_daemon_until_it_is_stopped() {
    let (_, dir) = enter();
    let mut child = Command::new(COBBLE)
        .args(["enter", "start", "svc"])
        .env("PEBBLE", dir.path())
        .env_remove("PEBBLE_SOCKET")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let client = cobble_client::Client::new(cobble_client::ClientConfig::socket(
        dir.path().join(".pebble.socket"),
    ))
    .unwrap();
    // The subcommand is over once its change is.
    wait_for(
        "the start change to be ready",
        Duration::from_secs(20),
        || {
            rt().block_on(client.changes(ChangeSelector::All, None))
                .is_ok_and(|c| c.iter().any(|c| c.kind == "start" && c.status == "Done"))
        },
    );
    let services = rt().block_on(client.services(&[])).unwrap();
    assert_eq!(services[0].current, "active");
    assert_eq!(child.try_wait().unwrap(), None, "enter is still running");
    kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "enter did not stop");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(0));
}
