//! What the CLI does on its own, with no daemon to talk to.

use std::process::{Command, Stdio};

use crate::fixture::{COBBLE, Test};

/// The client's version is the Pebble release cobble implements, alone, as Pebble prints
/// its own; the formats print Pebble's object and nothing else.
#[test]
fn version_client_needs_no_daemon() {
    Test::new()
        .args(&["version", "--client"])
        .stdout("v1.32.1\n")
        .run();
    Test::new().args(&["--version"]).stdout("v1.32.1\n").run();
    Test::new()
        .args(&["version", "--client", "--format", "json"])
        .stdout("{\"client\":\"v1.32.1\"}\n")
        .run();
    Test::new()
        .args(&["version", "--client", "--format=yaml"])
        .stdout("client: v1.32.1\n")
        .run();
}

/// In text, a daemon that cannot be asked is `-`, and that is no error; in JSON the server
/// is left out and the error follows, as in Pebble.
#[test]
fn version_without_daemon_shows_a_dash() {
    let cobble = env!("CARGO_PKG_VERSION");
    Test::new()
        .args(&["version"])
        .stdout(&format!("client  v1.32.1\nserver  -\ncobble  {cobble}\n"))
        .run();
    Test::new()
        .args(&["version", "--format", "json"])
        .stdout("{\"client\":\"v1.32.1\"}\n")
        .stderr_glob("error: cannot communicate with server: *\n")
        .status(1)
        .run();
}

#[test]
fn no_command_prints_the_summary() {
    Test::new()
        .stdout_contains(
            "Commands can be classified as follows:\n\n         Run: run, enter, demo, reexec\n",
        )
        .run();
    Test::new()
        .args(&["--help"])
        .stdout_contains("Usage: cobble <command> [<options>...]")
        .run();
}

#[test]
fn missing_socket_is_reported_like_pebble() {
    let test = Test::new().args(&["services"]);
    let socket = test.pebble_dir().join(".pebble.socket");
    test.stderr(&format!(
        "error: cannot communicate with server: Get \"http://localhost/v1/services?names=\": socket \"{}\" not found\n",
        socket.display()
    ))
    .status(1)
    .run();
}

#[test]
fn unknown_flag_and_command() {
    Test::new()
        .args(&["services", "--frobnicate"])
        .stderr("error: unknown flag `frobnicate'\n")
        .status(1)
        .run();
    Test::new()
        .args(&["frobnicate"])
        .stderr("error: unknown command \"frobnicate\", see 'cobble help'.\n")
        .status(1)
        .run();
}

#[test]
fn start_requires_a_service() {
    Test::new()
        .args(&["start"])
        .stderr("error: the required argument `<service> (at least 1 argument)` was not provided\n")
        .status(1)
        .run();
}

#[test]
fn changes_refuses_a_change_id() {
    Test::new()
        .args(&["changes", "42"])
        .stderr("error: 'cobble changes' command expects a service name, try 'cobble tasks 42'\n")
        .status(1)
        .run();
}

#[test]
fn tasks_needs_an_id_or_last() {
    Test::new()
        .args(&["tasks"])
        .stderr("error: please provide change ID or type with --last=<type>\n")
        .status(1)
        .run();
    Test::new()
        .args(&["tasks", "--last=start", "3"])
        .stderr("error: cannot use change ID and type together\n")
        .status(1)
        .run();
}

#[test]
fn signal_name_must_be_upper_case() {
    Test::new()
        .args(&["signal", "hup", "srv1"])
        .stderr("error: signal name must be uppercase, for example HUP\n")
        .status(1)
        .run();
}

#[test]
fn run_args_needs_a_service_name() {
    Test::new()
        .args(&["run", "--args", ";"])
        .stderr("cannot run daemon: --args requires a service name\n")
        .status(1)
        .run();
    Test::new()
        .args(&["run", "--args", "a", "x", ";", "--args", "a", "y"])
        .stderr("cannot run daemon: --args provided more than once for \"a\" service\n")
        .status(1)
        .run();
}

/// Start-up failures in Pebble's words: `cannot run daemon: ` and no `error: ` before it, a
/// layer's error as the plan's, a directory that is not there quoted.
#[test]
fn a_daemon_that_cannot_start_says_why_in_pebbles_words() {
    let test = Test::new();
    let layers = test.pebble_dir().join("layers");
    std::fs::create_dir(&layers).unwrap();
    std::fs::write(layers.join("001-base.yaml"), "services:\n  a: [unclosed\n").unwrap();
    test.args(&["run"])
        .stderr(
            "cannot run daemon: cannot load plan: cannot parse layer \"base\": yaml: line 1: \
             did not find expected ',' or ']'\n",
        )
        .status(1)
        .run();

    let test = Test::new();
    let missing = test.pebble_dir().join("missing");
    test.env("PEBBLE", missing.to_str().unwrap())
        .args(&["run"])
        .stderr(&format!(
            "cannot run daemon: directory \"{}\" does not exist\n",
            missing.display()
        ))
        .status(1)
        .run();

    Test::new()
        .args(&["run", "--http", "192.0.2.1:1"])
        .stderr_glob(
            "*cannot run daemon: cannot listen on \"192.0.2.1:1\": listen tcp 192.0.2.1:1: bind: \
             cannot assign requested address\n",
        )
        .status(1)
        .run();
}

#[test]
fn add_reports_a_missing_file_like_go() {
    Test::new()
        .args(&["add", "base", "/nonexistent/layer.yaml"])
        .stderr("error: open /nonexistent/layer.yaml: no such file or directory\n")
        .status(1)
        .run();
}

/// A reader that went away (`cobble help --all | head -0`) is not an error.
#[test]
fn broken_pipe_is_success() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(COBBLE)
        .args(["help", "--all"])
        .env("PEBBLE", dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&output.stderr), "");
}

#[test]
fn a_mistyped_command_keeps_pebbles_error_and_status_and_adds_a_hint() {
    Test::new()
        .args(&["servces"])
        .stderr(
            "error: unknown command \"servces\", see 'cobble help'.\ndid you mean \"services\"?\n",
        )
        .status(1)
        .run();
    Test::new()
        .args(&["help", "chnages"])
        .stderr(
            "error: unknown command \"chnages\", see 'cobble help'.\ndid you mean \"changes\"?\n",
        )
        .status(1)
        .run();
}

/// `debug` is Pebble's hidden command: it holds no subcommand yet, needs no daemon, takes
/// whatever follows it, succeeds with no output, and is not listed.
#[test]
fn debug_is_hidden_and_does_nothing() {
    Test::new().args(&["debug"]).run();
    Test::new().args(&["debug", "state", "--x", "y"]).run();
    let all = Test::new().args(&["help", "--all"]).any_stdout().run();
    assert!(
        all.stdout
            .lines()
            .all(|l| !l.trim_start().starts_with("debug")),
        "{}",
        all.stdout
    );
    Test::new()
        .args(&["help", "debug"])
        .stdout_contains("Holds commands for debugging the daemon")
        .run();
}
