//! Self-healing on real processes: services that are wanted running keep coming back.
//!
//! Tests wait on events (a line a service writes, a line in the daemon's log) with generous
//! timeouts, and prove that something did not happen by waiting for a later event that must
//! follow it. None asserts how fast anything happens: speed is for the benchmarks.

use std::fs;
use std::path::Path;
use std::time::Duration;

use crate::fixture::{Daemon, act, client, lines, rt, service, wait_for};

const LONG: Duration = Duration::from_secs(20);

/// A service that needs `dir/cert.pem`: it records each launch in `launches`, fails like the
/// webhook of the founding case when the file is missing, and otherwise records `serving` and
/// runs. Nothing launches it again while it runs, so once `serving` is there the file holds
/// every launch it will ever have.
fn webhook_layer(dir: &Path, launches: &Path, extra: &str) -> String {
    let script = launches.with_extension("sh");
    fs::write(
        &script,
        format!(
            "echo launch >> {launches}\n\
             test -f {cert} || {{ echo \"Error: open {cert}: no such file or directory\"; exit 255; }}\n\
             echo serving >> {launches}\nexec sleep 1000\n",
            launches = launches.display(),
            cert = dir.join("cert.pem").display(),
        ),
    )
    .unwrap();
    format!(
        "services:\n  webhook:\n    override: replace\n    command: /bin/sh {}\n{extra}",
        script.display()
    )
}

/// Waits until the webhook of [`webhook_layer`] serves; returns every line it recorded.
fn wait_until_serving(launches: &Path) -> Vec<String> {
    wait_for("webhook serving", LONG, || {
        lines(launches).last().is_some_and(|l| l == "serving")
    });
    lines(launches)
}

#[test]
fn requires_paths_waits_then_starts_when_the_path_appears() {
    let root = tempfile::tempdir().unwrap();
    let certs = root.path().join("certs");
    let launches = root.path().join("launches");
    let layer = webhook_layer(
        &certs,
        &launches,
        &format!(
            "    requires-paths: [{}]\n",
            certs.join("cert.pem").display()
        ),
    );
    let d = Daemon::hold(&[("001-base", &layer)]);
    // Start succeeds at once: nothing to wait an okay delay for.
    let change = act(&d, "start", &["webhook"]);
    assert_eq!(change.status, "Done", "{change:?}");
    assert!(
        change.tasks[0].log[0].contains("is waiting for"),
        "{change:?}"
    );
    let waiting = service(&d, "webhook");
    assert_eq!(waiting.current, "waiting");
    assert_eq!(
        waiting.reason.as_deref(),
        Some(format!("waiting for {}", certs.join("cert.pem").display()).as_str())
    );
    // The certificate directory does not even exist yet.
    fs::create_dir_all(&certs).unwrap();
    fs::write(certs.join("cert.pem"), "cert").unwrap();
    assert_eq!(
        wait_until_serving(&launches),
        ["launch", "serving"],
        "launched once, and only once the path was there"
    );
    assert_eq!(service(&d, "webhook").current, "active");
}

#[test]
fn a_missing_path_named_in_failure_output_ends_the_backoff_when_it_appears() {
    let root = tempfile::tempdir().unwrap();
    let certs = root.path().join("certs");
    let launches = root.path().join("launches");
    // A backoff far longer than the test waits: only the hint can bring the retry.
    let layer = webhook_layer(
        &certs,
        &launches,
        "    backoff-delay: 1h\n    backoff-limit: 1h\n",
    );
    let d = Daemon::hold(&[("001-base", &layer)]);
    let change = act(&d, "start", &["webhook"]);
    assert_eq!(change.status, "Error");
    assert!(
        change.err.contains("exited quickly with code 255"),
        "{}",
        change.err
    );
    wait_for("backoff", LONG, || {
        service(&d, "webhook").current == "backoff"
    });
    let reason = service(&d, "webhook").reason.unwrap_or_default();
    assert!(reason.contains("after exit code 255"), "{reason}");
    assert!(reason.contains("retrying as soon as"), "{reason}");
    fs::create_dir_all(&certs).unwrap();
    fs::write(certs.join("cert.pem"), "cert").unwrap();
    assert_eq!(
        wait_until_serving(&launches),
        ["launch", "launch", "serving"]
    );
    assert_eq!(service(&d, "webhook").current, "active");
}

#[test]
fn a_missing_binary_is_retried_until_it_appears() {
    let root = tempfile::tempdir().unwrap();
    let binary = root.path().join("server");
    let layer = format!(
        "services:\n  s:\n    override: replace\n    command: {}\n    backoff-delay: 100ms\n    backoff-limit: 400ms\n",
        binary.display()
    );
    let d = Daemon::hold(&[("001-base", &layer)]);
    let change = act(&d, "start", &["s"]);
    assert!(
        change.err.contains("no such file or directory"),
        "Pebble's error text is kept: {}",
        change.err
    );
    assert_eq!(service(&d, "s").current, "backoff");
    fs::write(&binary, "#!/bin/sh\nexec sleep 1000\n").unwrap();
    fs::set_permissions(&binary, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    wait_for("service up", LONG, || service(&d, "s").current == "active");
}

/// The daemon's log lines that report an `on-file-change` restart of `service`.
fn file_change_restarts(d: &Daemon, service: &str) -> usize {
    let line = format!(
        "Service \"{service}\" on-file-change action is \"restart\", terminating process before restarting"
    );
    d.log().lines().filter(|l| l.ends_with(&line)).count()
}

#[test]
fn on_file_change_restarts_once_per_burst_and_ignore_does_nothing() {
    let root = tempfile::tempdir().unwrap();
    let cert = root.path().join("cert.pem");
    let key = root.path().join("key.pem");
    let conf = root.path().join("app.conf");
    fs::write(&cert, "A").unwrap();
    fs::write(&key, "A").unwrap();
    fs::write(&conf, "A").unwrap();
    // Each launch records what it found, so a restart in the middle of a rotation shows.
    let launches = root.path().join("launches");
    let quiet_launches = root.path().join("quiet");
    let layer = format!(
        "services:\n  web:\n    override: replace\n    command: /bin/sh -c 'echo $(cat {cert}) $(cat {key}) >> {l}; exec sleep 1000'\n    \
         on-file-change:\n      {cert}: restart\n      {key}: restart\n  \
         quiet:\n    override: replace\n    command: /bin/sh -c 'echo launch >> {q}; exec sleep 1000'\n    \
         on-file-change:\n      {conf}: ignore\n",
        l = launches.display(),
        q = quiet_launches.display(),
        cert = cert.display(),
        key = key.display(),
        conf = conf.display(),
    );
    let d = Daemon::hold(&[("001-base", &layer)]);
    act(&d, "start", &["web", "quiet"]);
    assert_eq!(lines(&launches), ["A A"]);
    // A rotation: cert and key replaced in one burst (how long a burst may last is pinned by
    // the state machine's tests, under paused time), and the ignored file changed with them.
    fs::write(&cert, "B").unwrap();
    fs::write(&key, "B").unwrap();
    fs::write(&conf, "B").unwrap();
    wait_for("the restart after the rotation", LONG, || {
        lines(&launches).last().is_some_and(|l| l == "B B")
    });
    // A later change is a barrier: the daemon sees file events in order, so any restart the
    // rotation caused (of web, or of quiet) is due before the one the barrier causes.
    fs::write(&cert, "C").unwrap();
    wait_for("the restart after the barrier", LONG, || {
        lines(&launches).last().is_some_and(|l| l == "C B")
    });
    assert_eq!(
        lines(&launches),
        ["A A", "B B", "C B"],
        "the rotation caused exactly one restart"
    );
    assert_eq!(file_change_restarts(&d, "web"), 2, "{}", d.log());
    assert_eq!(service(&d, "web").current, "active");
    // ignore: the workload reloads by itself.
    assert_eq!(file_change_restarts(&d, "quiet"), 0, "{}", d.log());
    assert_eq!(lines(&quiet_launches), ["launch"]);
}

#[test]
fn on_file_change_follows_a_kubernetes_symlink_swap_and_can_signal() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path();
    fs::create_dir(dir.join("..v1")).unwrap();
    fs::write(dir.join("..v1/tls.crt"), "v1").unwrap();
    std::os::unix::fs::symlink("..v1", dir.join("..data")).unwrap();
    std::os::unix::fs::symlink("..data/tls.crt", dir.join("tls.crt")).unwrap();
    let hups = dir.join("hups");
    let layer = format!(
        "services:\n  web:\n    override: replace\n    command: /bin/sh -c 'trap \"echo hup >> {h}\" HUP; while true; do sleep 0.05; done'\n    \
         on-file-change:\n      {crt}: SIGHUP\n",
        h = hups.display(),
        crt = dir.join("tls.crt").display(),
    );
    let d = Daemon::hold(&[("001-base", &layer)]);
    act(&d, "start", &["web"]);
    fs::create_dir(dir.join("..v2")).unwrap();
    fs::write(dir.join("..v2/tls.crt"), "v2").unwrap();
    std::os::unix::fs::symlink("..v2", dir.join("..data_tmp")).unwrap();
    fs::rename(dir.join("..data_tmp"), dir.join("..data")).unwrap();
    wait_for("SIGHUP delivered", LONG, || lines(&hups).len() == 1);
}

#[test]
fn a_restarted_daemon_ends_the_processes_its_killed_predecessor_left() {
    let root = tempfile::tempdir().unwrap();
    let pidfile = root.path().join("pid");
    let layer = format!(
        "services:\n  s:\n    override: replace\n    startup: enabled\n    command: /bin/sh -c 'echo $$ > {}; exec sleep 1000'\n",
        pidfile.display()
    );
    let mut d = Daemon::start(&[("001-base", &layer)], &[]);
    wait_for("service up", LONG, || {
        fs::read_to_string(&pidfile).is_ok_and(|s| s.ends_with('\n'))
    });
    let old: i32 = fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    d.kill();
    assert!(
        Path::new(&format!("/proc/{old}")).exists(),
        "the service outlived its daemon"
    );
    d.restart(&["--hold"]);
    // Ended before the new daemon even listened: gone, or a zombie its new parent has not
    // reaped yet. (How soon the API answers is for the benchmarks.)
    assert!(
        !Path::new(&format!("/proc/{old}")).exists()
            || fs::read_to_string(format!("/proc/{old}/stat")).is_ok_and(|s| s.contains(") Z")),
        "the old service still runs after the new daemon listens"
    );
    assert_eq!(
        service(&d, "s").current,
        "inactive",
        "--hold: nothing started"
    );
}

#[test]
fn bad_extension_fields_are_a_400_and_leave_the_plan_unchanged() {
    let d = Daemon::hold(&[(
        "001-base",
        "services:\n  s:\n    override: replace\n    command: sleep 1000\n",
    )]);
    let c = client(&d);
    let before = rt().block_on(c.plan_yaml()).unwrap();
    let cases = [
        (
            "requires-paths: [certs/cert.pem]",
            r#"cannot parse layer YAML: plan service "s" requires-paths path "certs/cert.pem" must be absolute"#,
        ),
        (
            "on-file-change: {/etc/a: reboot}",
            r#"cannot parse layer YAML: plan service "s" on-file-change action "reboot" invalid for "/etc/a": must be "restart", "ignore" or a signal name such as "SIGHUP""#,
        ),
        (
            "on-file-change: {/etc/a: SIGNOPE}",
            r#"cannot parse layer YAML: plan service "s" on-file-change action "SIGNOPE" invalid for "/etc/a": must be "restart", "ignore" or a signal name such as "SIGHUP""#,
        ),
        (
            "on-file-change: {etc/a: restart}",
            r#"cannot parse layer YAML: plan service "s" on-file-change path "etc/a" must be absolute"#,
        ),
    ];
    for (field, want) in cases {
        let yaml = format!("services:\n  s:\n    override: merge\n    {field}\n");
        let err = rt()
            .block_on(c.add_layer("extra", &yaml, true, false))
            .unwrap_err();
        match err {
            cobble_client::Error::Api {
                status_code,
                message,
                ..
            } => {
                assert_eq!(status_code, 400, "{field}");
                assert_eq!(message, want, "{field}");
            }
            other => panic!("{field}: {other:?}"),
        }
        assert_eq!(rt().block_on(c.plan_yaml()).unwrap(), before, "{field}");
    }
}
