//! `--no-wait` on the service actions.

use std::time::Duration;

use crate::fixture::{Daemon, Test, wait_for};
use crate::services::{TWO_SLEEPERS, current};

fn change_id(stdout: &str) -> String {
    let id = stdout.strip_suffix('\n').unwrap_or(stdout);
    assert!(
        !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()),
        "not a change ID: {stdout:?}"
    );
    id.to_string()
}

#[test]
fn no_wait_prints_the_change_id() {
    let daemon = Daemon::hold(&[("001-base", TWO_SLEEPERS)]);

    let output = Test::daemon(&daemon)
        .args(&["start", "--no-wait", "srv2"])
        .any_stdout()
        .run();
    let id = change_id(&output.stdout);
    // The start task stays Doing for the okay delay after the service is already active.
    wait_for(
        "the start change to be done",
        Duration::from_secs(10),
        || {
            let tasks = Test::daemon(&daemon)
                .args(&["tasks", &id])
                .any_stdout()
                .run();
            tasks
                .stdout
                .lines()
                .nth(1)
                .is_some_and(|l| l.starts_with("Done "))
        },
    );
    assert_eq!(current(&daemon, "srv2"), "active");
    Test::daemon(&daemon)
        .args(&["tasks", "--abs-time", &id])
        .stdout_glob("Status  Spawn                 Ready                 Summary\n*Start service \"srv2\"\n\n")
        .run();

    for action in ["restart", "stop"] {
        let output = Test::daemon(&daemon)
            .args(&[action, "--no-wait", "srv2"])
            .any_stdout()
            .run();
        change_id(&output.stdout);
    }
    for action in ["replan", "autostart"] {
        let output = Test::daemon(&daemon)
            .args(&[action, "--no-wait"])
            .any_stdout()
            .run();
        change_id(&output.stdout);
    }
}
