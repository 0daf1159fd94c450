//! cobble shipped in an image under Pebble's name: a `pebble` symlink to the binary (what an
//! image that replaces Pebble puts on its `PATH` or in its entrypoint) runs the daemon and
//! every command, and the messages that name the program say `pebble`.

use std::time::Duration;

use crate::fixture::{COBBLE, Daemon, Test, service, wait_for};

const LAYER: &str = "\
services:
  svc:
    override: replace
    command: sleep 1000
    startup: enabled
";

#[test]
fn runs_and_answers_when_invoked_as_pebble() {
    let bin = tempfile::tempdir().unwrap();
    let pebble = bin.path().join("pebble");
    std::os::unix::fs::symlink(COBBLE, &pebble).unwrap();

    let daemon = Daemon::start_as(&pebble, &[("001-base", LAYER)], &[], &[]);
    wait_for("svc to start", Duration::from_secs(20), || {
        service(&daemon, "svc").current == "active"
    });
    let as_pebble = || Test::daemon(&daemon).program(&pebble);

    as_pebble()
        .args(&["services"])
        .stdout_glob("Service  Startup  Current  Since\nsvc      enabled  active   today at *\n")
        .run();
    as_pebble().args(&["stop", "svc"]).run();
    as_pebble()
        .args(&["services"])
        .stdout_glob("Service  Startup  Current   Since\nsvc      enabled  inactive  today at *\n")
        .run();
    as_pebble()
        .args(&["version"])
        .stdout_glob("client  v1.32.1\nserver  v1.32.1\ncobble  *\n")
        .run();

    // Where Pebble's messages name the program, they name it as it was invoked.
    as_pebble()
        .args(&["--help"])
        .stdout_contains("Usage: pebble <command> [<options>...]")
        .run();
    as_pebble()
        .args(&["help", "nosuch"])
        .stderr("error: unknown command \"nosuch\", see 'pebble help'.\n")
        .status(1)
        .run();
    as_pebble()
        .args(&["changes", "1"])
        .stderr("error: 'pebble changes' command expects a service name, try 'pebble tasks 1'\n")
        .status(1)
        .run();
}
