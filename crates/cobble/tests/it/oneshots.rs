//! One-shots (`type: oneshot`) on real processes: a start that runs its command to
//! completion, a completion that stays until a start, a restart, a stop or a changed
//! configuration, and services ordered after one-shots that start once they have completed
//! (SONiC's `start` script and its daemons).

use std::fs;
use std::path::Path;
use std::time::Duration;

use cobble_client::Method;

use crate::fixture::{Daemon, Test, act, details_of, lines, raw, service, times, wait_for};

/// A bound no loaded machine reaches; no test asserts how fast anything happens.
const LONG: Duration = Duration::from_secs(60);

/// The daemons ordered after the one-shot `start`, as on a SONiC switch.
const DAEMONS: usize = 12;

/// A SONiC-shaped layer: `rsyslogd`, the one-shot `start` after it, running `start_script`,
/// and twelve daemons after `start` that require it, each appending its start time to
/// `starts` and its name to `launches`.
fn sonic_layer(root: &Path, start_script: &str) -> String {
    let mut layer = format!(
        "services:\n  rsyslogd:\n    override: replace\n    startup: enabled\n    command: sleep 1000\n  \
         start:\n    override: replace\n    type: oneshot\n    startup: enabled\n    after: [rsyslogd]\n    \
         backoff-delay: 1h\n    backoff-limit: 1h\n    command: /bin/sh -c '{start_script}'\n"
    );
    for n in 1..=DAEMONS {
        layer.push_str(&format!(
            "  daemon{n}:\n    override: replace\n    startup: enabled\n    after: [start]\n    requires: [start]\n    \
             command: /bin/sh -c 'date +%s.%N >> {starts}; echo daemon{n} >> {launches}; exec sleep 1000'\n",
            starts = root.join("starts").display(),
            launches = root.join("launches").display(),
        ));
    }
    layer
}

/// The autostart change, once it is ready.
fn autostart(d: &Daemon) -> serde_json::Value {
    let mut found = serde_json::Value::Null;
    wait_for("the autostart change to be ready", LONG, || {
        let (_, body) = raw(d, Method::GET, "/v1/changes?select=all", None);
        let body: serde_json::Value = serde_json::from_str(&body).unwrap();
        match body["result"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["kind"] == "autostart" && c["ready"] == true)
        {
            Some(change) => {
                found = change.clone();
                true
            }
            None => false,
        }
    });
    found
}

/// The time of day, in seconds, of the daemon log's line at `at` (`2026-12-04T23:12:15.123Z
/// [pebble] ...`): for the figures a test prints, never for an assertion.
fn log_seconds(log: &str, at: usize) -> f64 {
    let start = log[..at].rfind('\n').map_or(0, |i| i + 1);
    let time = &log[start + 11..start + 23];
    let parts: Vec<f64> = time.split(':').map(|p| p.parse().unwrap_or(0.0)).collect();
    parts[0] * 3600.0 + parts[1] * 60.0 + parts[2]
}

/// How long after the daemon logged `start`'s completion it logged the last launch.
fn logged_gap(log: &str) -> f64 {
    let completed = log_seconds(log, position(log, "Service \"start\" completed in "));
    let last = (1..=DAEMONS)
        .map(|n| {
            log_seconds(
                log,
                position(log, &format!("Service \"daemon{n}\" starting: ")),
            )
        })
        .fold(f64::MIN, f64::max);
    (last - completed) * 1000.0
}

/// Where in the daemon log `text` first appears.
fn position(log: &str, text: &str) -> usize {
    log.find(text)
        .unwrap_or_else(|| panic!("the daemon log does not say {text:?}:\n{log}"))
}

/// Every daemon's launch line comes after `start`'s completion in the daemon log `log`.
fn assert_launched_after_start_completed(log: &str) {
    let completed = position(log, "Service \"start\" completed in ");
    for n in 1..=DAEMONS {
        let launched = position(log, &format!("Service \"daemon{n}\" starting: "));
        assert!(
            completed < launched,
            "daemon{n} launched before start completed:\n{log}"
        );
    }
}

#[test]
fn sonic_daemons_start_once_the_start_script_has_completed_with_nothing_failing() {
    let root = tempfile::tempdir().unwrap();
    let done = root.path().join("start-done");
    let script = format!("sleep 1.5; date +%s.%N > {}", done.display());
    let d = Daemon::start(&[("001-sonic", &sonic_layer(root.path(), &script))], &[]);
    let change = autostart(&d);
    assert_eq!(change["status"], "Done", "{change:#}");
    // Listed active from their spawn on; launched once they have written their line.
    wait_for("the twelve daemons to run", LONG, || {
        lines(&root.path().join("launches")).len() >= DAEMONS
    });
    // Each launched once, none failed.
    assert_eq!(lines(&root.path().join("launches")).len(), DAEMONS);
    for n in 1..=DAEMONS {
        assert_eq!(service(&d, &format!("daemon{n}")).current, "active");
    }
    for n in 1..=DAEMONS {
        let details = details_of(&d, &format!("daemon{n}"));
        assert_eq!(details.start_count, 1, "daemon{n}: {details:?}");
        assert_eq!(details.backoff_count, 0, "daemon{n}: {details:?}");
    }
    // The order, as the daemon recorded it: start's completion, then every launch.
    d.wait_log("Service \"daemon");
    let log = d.log();
    assert_launched_after_start_completed(&log);
    // Nothing failed and nothing was logged as an error while they waited.
    for line in log.lines() {
        let lower = line.to_ascii_lowercase();
        assert!(
            !lower.contains("error") && !lower.contains("fail") && !lower.contains("unexpectedly"),
            "an error line in the daemon log: {line}\n{log}"
        );
    }
    let start = service(&d, "start");
    assert_eq!(start.current, "inactive");
    assert_eq!(start.reason.as_deref(), Some("completed"));
    let completion = details_of(&d, "start")
        .last_completion
        .expect("a completion");
    assert_eq!(completion.exit_code, 0);
    // The gap between start's exit and the last launch, for the record (the promise is
    // 100 ms; it is measured, not asserted).
    let exited = times(&done)[0];
    let last = times(&root.path().join("starts"))
        .into_iter()
        .fold(f64::MIN, f64::max);
    eprintln!(
        "the last of {DAEMONS} daemons launched {:.0} ms after start's exit ({:.0} ms between the daemon's lines)",
        (last - exited) * 1000.0,
        logged_gap(&log)
    );
}

#[test]
fn sonic_daemons_wait_while_the_start_script_fails_and_run_once_a_retry_completes() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path();
    let counter = dir.join("runs");
    // Runs 1 and 2 fail naming a file that does not exist yet, which ends the (hour-long)
    // backoff the moment the test creates it; run 3 completes.
    let script = format!(
        "n=$(cat {c} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {c}; \
         if [ $n -lt 3 ]; then cat {d}/go$n; exit 1; fi; sleep 1.5; date +%s.%N > {d}/start-done",
        c = counter.display(),
        d = dir.display(),
    );
    let d = Daemon::start(&[("001-sonic", &sonic_layer(dir, &script))], &[]);
    // The first run failed: the autostart's task for start says so; the daemons' tasks are
    // done, for they wait.
    let change = autostart(&d);
    assert_eq!(change["status"], "Error", "{change:#}");
    let tasks = change["tasks"].as_array().unwrap();
    for task in tasks {
        let summary = task["summary"].as_str().unwrap();
        if summary == "Start service \"start\"" {
            assert_eq!(task["status"], "Error", "{task:#}");
            let log = task["log"].to_string();
            assert!(log.contains("exited with code 1"), "{log}");
            assert!(log.contains("go1: No such file or directory"), "{log}");
        } else if summary.starts_with("Start service \"daemon") {
            assert_eq!(task["status"], "Done", "{task:#}");
            assert!(
                task["log"]
                    .to_string()
                    .contains("waiting for one-shot \\\"start\\\" to complete"),
                "{task:#}"
            );
        }
    }
    for run in 1..=2 {
        wait_for(&format!("run {run} of start to fail"), LONG, || {
            lines(&counter) == [run.to_string()] && service(&d, "start").current == "backoff"
        });
        for n in 1..=DAEMONS {
            let name = format!("daemon{n}");
            let info = service(&d, &name);
            assert_eq!(info.current, "waiting", "{name}: {info:?}");
            assert_eq!(
                info.reason.as_deref(),
                Some("waiting for one-shot \"start\" to complete (failed: exited with code 1)"),
                "{name}"
            );
        }
        assert!(
            lines(&dir.join("launches")).is_empty(),
            "launched while start failed"
        );
        // `cobble why` names the failed one-shot and its exit.
        Test::daemon(&d)
            .args(&["why", "daemon7"])
            .stdout_contains(
                "Waiting for:    one-shot start to complete (failed: exited with code 1)\n",
            )
            .run();
        fs::write(dir.join(format!("go{run}")), "").unwrap();
    }
    wait_for("the twelve daemons to run", LONG, || {
        lines(&dir.join("launches")).len() >= DAEMONS
    });
    assert_eq!(lines(&counter), ["3"]);
    assert_eq!(lines(&dir.join("launches")).len(), DAEMONS);
    d.wait_log("Service \"daemon");
    let log = d.log();
    assert_launched_after_start_completed(&log);
    let exited = times(&dir.join("start-done"))[0];
    let last = times(&dir.join("starts"))
        .into_iter()
        .fold(f64::MIN, f64::max);
    eprintln!(
        "the last of {DAEMONS} daemons launched {:.0} ms after the third run's exit ({:.0} ms between the daemon's lines)",
        (last - exited) * 1000.0,
        logged_gap(&log)
    );
}

fn setup_layer(runs: &Path) -> String {
    format!(
        "services:\n  setup:\n    override: replace\n    type: oneshot\n    startup: enabled\n    \
         command: /bin/sh -c 'echo run >> {}'\n",
        runs.display()
    )
}

#[test]
fn a_completed_oneshot_stays_completed_until_a_start_restart_stop_or_new_configuration() {
    let root = tempfile::tempdir().unwrap();
    let runs = root.path().join("runs");
    let d = Daemon::start(&[("001-setup", &setup_layer(&runs))], &[]);
    assert_eq!(autostart(&d)["status"], "Done");
    assert_eq!(lines(&runs).len(), 1);
    let setup = service(&d, "setup");
    assert_eq!(
        (setup.current.as_str(), setup.reason.as_deref()),
        ("inactive", Some("completed"))
    );
    let details = details_of(&d, "setup");
    let completion = details.last_completion.expect("its completion");
    assert_eq!(completion.exit_code, 0);
    assert!(!completion.at.is_empty() && !completion.ran_for.is_empty());
    Test::daemon(&d)
        .args(&["services"])
        .stdout_contains("completed")
        .run();
    Test::daemon(&d)
        .args(&["why", "setup"])
        .stdout_contains("Why:            completed\n")
        .stdout_contains("Completed:      exit code 0 at ")
        .run();

    // Replan and autostart leave it completed.
    for action in ["replan", "autostart"] {
        let change = act(&d, action, &[]);
        assert_eq!(change.status, "Done", "{action}: {change:?}");
        assert!(
            change
                .tasks
                .iter()
                .any(|t| t.log.iter().any(|l| l.contains("already completed"))),
            "{action}: {change:?}"
        );
        assert_eq!(lines(&runs).len(), 1, "{action} ran it again");
    }
    // Start and restart run it again, and are done once it has completed.
    assert_eq!(act(&d, "start", &["setup"]).status, "Done");
    assert_eq!(lines(&runs).len(), 2);
    assert_eq!(act(&d, "restart", &["setup"]).status, "Done");
    assert_eq!(lines(&runs).len(), 3);
    // Stop forgets the completion: replan runs it again.
    assert_eq!(act(&d, "stop", &["setup"]).status, "Done");
    assert_eq!(details_of(&d, "setup").last_completion, None);
    assert_eq!(service(&d, "setup").reason, None);
    assert_eq!(act(&d, "replan", &[]).status, "Done");
    assert_eq!(lines(&runs).len(), 4);
    // A changed configuration is run again by replan.
    let body = serde_json::json!({
        "action": "add", "combine": false, "label": "002-change", "format": "yaml",
        "layer": "services:\n  setup:\n    override: merge\n    environment: {MODE: fast}\n",
    });
    let (status, answer) = raw(&d, Method::POST, "/v1/layers", Some(&body.to_string()));
    assert_eq!(status, 200, "{answer}");
    assert_eq!(act(&d, "replan", &[]).status, "Done");
    assert_eq!(lines(&runs).len(), 5);
    assert_eq!(act(&d, "replan", &[]).status, "Done");
    assert_eq!(lines(&runs).len(), 5);
}

#[test]
fn starting_a_service_that_requires_a_completed_oneshot_leaves_it_completed() {
    let root = tempfile::tempdir().unwrap();
    let runs = root.path().join("runs");
    let layer = format!(
        "{}  app:\n    override: replace\n    after: [setup]\n    requires: [setup]\n    \
         command: sleep 1000\n",
        setup_layer(&runs)
    );
    let d = Daemon::start(&[("001-setup", &layer)], &[]);
    assert_eq!(autostart(&d)["status"], "Done");
    assert_eq!(lines(&runs).len(), 1);
    // The start names app only: setup's task finds it completed, as systemd's
    // RemainAfterExit leaves a one-shot that a unit requires.
    let change = act(&d, "start", &["app"]);
    assert_eq!(change.status, "Done", "{change:?}");
    assert_eq!(service(&d, "app").current, "active");
    assert_eq!(lines(&runs).len(), 1, "starting app ran setup again");
    assert_eq!(service(&d, "setup").reason.as_deref(), Some("completed"));
    // Naming the one-shot runs it again.
    assert_eq!(act(&d, "start", &["setup"]).status, "Done");
    assert_eq!(lines(&runs).len(), 2);
}

#[test]
fn a_failing_oneshot_fails_its_start_with_its_output_and_a_quick_one_is_done() {
    let layer = "services:\n  bad:\n    override: replace\n    type: oneshot\n    on-failure: ignore\n    \
                 command: /bin/sh -c 'echo cannot migrate; exit 4'\n  \
                 quick:\n    override: replace\n    type: oneshot\n    command: 'true'\n  \
                 missing:\n    override: replace\n    type: oneshot\n    on-failure: ignore\n    \
                 command: /nonexistent/migrate\n";
    let d = Daemon::hold(&[("001-base", layer)]);
    let change = act(&d, "start", &["bad"]);
    assert_eq!(change.status, "Error");
    let log = change.tasks[0].log.join("\n");
    assert!(log.contains("exited with code 4"), "{log}");
    assert!(
        log.contains("Most recent service output:\n    cannot migrate"),
        "{log}"
    );
    assert_eq!(service(&d, "bad").current, "error");
    assert_eq!(details_of(&d, "bad").last_completion, None);
    assert_eq!(act(&d, "start", &["quick"]).status, "Done");
    assert_eq!(service(&d, "quick").reason.as_deref(), Some("completed"));
    assert_eq!(act(&d, "start", &["missing"]).status, "Error");
}

#[test]
fn chains_of_oneshots_and_after_alone_wait_for_the_completion() {
    let root = tempfile::tempdir().unwrap();
    let layer = "services:\n  \
        first:\n    override: replace\n    type: oneshot\n    command: sleep 0.5\n  \
        second:\n    override: replace\n    type: oneshot\n    after: [first]\n    requires: [first]\n    command: sleep 0.5\n  \
        app:\n    override: replace\n    after: [second]\n    command: sleep 1000\n";
    let d = Daemon::hold(&[("001-base", layer)]);
    let _ = root;
    // app does not require second: started on its own it does not wait for a one-shot
    // that is not started.
    let change = act(&d, "start", &["app", "second"]);
    assert_eq!(change.status, "Done", "{change:?}");
    wait_for("app to run", LONG, || {
        service(&d, "app").current == "active"
    });
    d.wait_log("Service \"app\" starting: ");
    let log = d.log();
    let first = position(&log, "Service \"first\" completed in ");
    let second_starts = position(&log, "Service \"second\" starting: ");
    let second = position(&log, "Service \"second\" completed in ");
    let app = position(&log, "Service \"app\" starting: ");
    assert!(first < second_starts && second < app, "{log}");
    assert_eq!(service(&d, "first").reason.as_deref(), Some("completed"));
    assert_eq!(service(&d, "second").reason.as_deref(), Some("completed"));
}

#[test]
fn an_invalid_type_refuses_the_layer_naming_the_service_the_field_and_the_text() {
    let d = Daemon::hold(&[(
        "001-base",
        "services:\n  setup:\n    override: replace\n    command: sleep 1\n",
    )]);
    let (_, before) = raw(&d, Method::GET, "/v1/plan?format=yaml", None);
    let body = serde_json::json!({
        "action": "add", "combine": true, "label": "001-base", "format": "yaml",
        "layer": "services:\n  setup:\n    override: merge\n    type: one-shot\n",
    });
    let (status, answer) = raw(&d, Method::POST, "/v1/layers", Some(&body.to_string()));
    assert_eq!(status, 400, "{answer}");
    assert!(
        answer.contains(
            r#"plan service \"setup\" type \"one-shot\" invalid: must be \"daemon\" or \"oneshot\""#
        ),
        "{answer}"
    );
    let (_, after) = raw(&d, Method::GET, "/v1/plan?format=yaml", None);
    assert_eq!(before, after);
}
