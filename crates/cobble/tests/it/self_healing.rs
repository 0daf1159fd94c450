//! Self-healing on real processes: services that are wanted running keep coming back.
//!
//! Each test states the bound it asserts; the bounds are generous multiples of what the
//! mechanism needs (inotify wake-ups are milliseconds), so they pin behaviour, not speed.

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::fixture::{Daemon, act, client, lines, rt, service, wait_for};

const LONG: Duration = Duration::from_secs(20);

/// A service that needs `dir/cert.pem`: it records each launch, fails like the webhook of the
/// founding case when the file is missing, and otherwise runs.
fn webhook_layer(dir: &Path, launches: &Path, extra: &str) -> String {
    let script = launches.with_extension("sh");
    fs::write(
        &script,
        format!(
            "echo launch >> {launches}\n\
             test -f {cert} || {{ echo \"Error: open {cert}: no such file or directory\"; exit 255; }}\n\
             echo serving\nexec sleep 1000\n",
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

#[test]
fn requires_paths_waits_then_starts_within_a_second_of_the_path_appearing() {
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
    assert_eq!(lines(&launches).len(), 0);
    // The certificate directory does not even exist yet.
    fs::create_dir_all(&certs).unwrap();
    fs::write(certs.join("cert.pem"), "cert").unwrap();
    let appeared = Instant::now();
    wait_for("webhook launched", LONG, || lines(&launches).len() == 1);
    assert!(
        appeared.elapsed() < Duration::from_secs(1),
        "{:?}",
        appeared.elapsed()
    );
    assert_eq!(service(&d, "webhook").current, "active");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(lines(&launches).len(), 1, "zero failed launches");
}

#[test]
fn a_missing_path_named_in_failure_output_ends_the_backoff_when_it_appears() {
    let root = tempfile::tempdir().unwrap();
    let certs = root.path().join("certs");
    let launches = root.path().join("launches");
    // A long backoff: without the hint the retry would come 20 s later.
    let layer = webhook_layer(
        &certs,
        &launches,
        "    backoff-delay: 20s\n    backoff-limit: 60s\n",
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
    let appeared = Instant::now();
    wait_for("second launch", LONG, || lines(&launches).len() == 2);
    assert!(
        appeared.elapsed() < Duration::from_secs(2),
        "{:?}",
        appeared.elapsed()
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
    std::os::unix::fs::PermissionsExt::set_mode(
        &mut fs::metadata(&binary).unwrap().permissions(),
        0o755,
    );
    fs::set_permissions(&binary, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    wait_for("service up", LONG, || service(&d, "s").current == "active");
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
    let launches = root.path().join("launches");
    let quiet_launches = root.path().join("quiet");
    let layer = format!(
        "services:\n  web:\n    override: replace\n    command: /bin/sh -c 'echo launch >> {l}; exec sleep 1000'\n    \
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
    assert_eq!(lines(&launches).len(), 1);
    // A torn rotation: cert in place, key 300 ms later; one restart.
    fs::write(&cert, "B").unwrap();
    std::thread::sleep(Duration::from_millis(300));
    fs::write(&key, "B").unwrap();
    wait_for("one restart", LONG, || lines(&launches).len() == 2);
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        lines(&launches).len(),
        2,
        "the burst caused exactly one restart"
    );
    assert_eq!(service(&d, "web").current, "active");
    // ignore: the workload reloads by itself.
    fs::write(&conf, "B").unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(lines(&quiet_launches).len(), 1);
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
    let restarted = Instant::now();
    d.restart(&["--hold"]);
    // S4: the API answers within a second, leftovers ended first.
    assert!(
        restarted.elapsed() < Duration::from_secs(1),
        "{:?}",
        restarted.elapsed()
    );
    // Ended before the new daemon even listened.
    wait_for("old process gone", Duration::from_secs(10), || {
        !Path::new(&format!("/proc/{old}")).exists()
            || fs::read_to_string(format!("/proc/{old}/stat")).is_ok_and(|s| s.contains(") Z"))
    });
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
