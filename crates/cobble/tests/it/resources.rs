//! What a service may use and what it uses, on real processes: `rlimits:` set before the
//! service runs (and on commands run in its context), a limit the kernel refuses failing
//! the start with its reason, `resources:` enforced through a cgroup (an OOM kill at
//! `memory-max` reported as such and restarted), accounting that agrees with `/proc`, and a
//! stop that ends what double-forked out of reach of everything but the cgroup.
//!
//! Where this machine gives the daemon no cgroup, the tests of `resources:` check that the
//! daemon says so instead (the layer is still accepted, never a silent no-op).

use std::fs;
use std::path::Path;
use std::time::Duration;

use cobble_client::Method;

use crate::fixture::{Daemon, Test, act, details_of, main_pid, raw, rt, service, wait_for};

/// The line a service wrote to `path`, once it has written all of it.
fn written(path: &Path) -> String {
    wait_for(
        "the service to write its line",
        Duration::from_secs(10),
        || fs::read_to_string(path).is_ok_and(|t| t.ends_with('\n')),
    );
    fs::read_to_string(path).unwrap()
}

/// `VmRSS` of `pid` in bytes, from `/proc/<pid>/status`.
fn vm_rss(pid: u32) -> u64 {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib * 1024
}

/// Whether the daemon told that this service's `resources:` are not enforced here; then the
/// test checks only that it said so.
fn not_enforced_here(d: &Daemon, name: &str) -> bool {
    let details = details_of(d, name);
    if details.resources_not_enforced.is_empty() {
        return false;
    }
    eprintln!(
        "resources not enforced on this machine: {}",
        details.resources_not_enforced
    );
    let reason = service(d, name).reason.unwrap_or_default();
    assert!(
        reason.contains(&details.resources_not_enforced),
        "the reason says it too: {reason}"
    );
    d.wait_log("not enforced");
    true
}

#[test]
fn rlimits_reach_the_service_its_exec_check_and_an_exec_in_its_context() {
    let root = tempfile::tempdir().unwrap();
    let seen = root.path().join("seen");
    let layer = format!(
        "services:\n  svc:\n    override: replace\n    \
         command: /bin/sh -c 'echo $(ulimit -n) $(ulimit -Hn) $(ulimit -c) > {s}; exec sleep 1000'\n    \
         rlimits:\n      nofile: \"1000:2000\"\n      core: 0\n\
         checks:\n  limited:\n    override: replace\n    period: 3s\n    threshold: 1\n    \
         exec:\n      service-context: svc\n      command: /bin/sh -c 'test $(ulimit -n) = 1000 && test $(ulimit -Hn) = 2000'\n",
        s = seen.display()
    );
    let d = Daemon::hold(&[("001-base", &layer)]);
    let change = act(&d, "start", &["svc"]);
    assert_eq!(change.status, "Done", "{change:?}");
    assert_eq!(written(&seen), "1000 2000 0\n");

    Test::daemon(&d)
        .args(&[
            "exec",
            "--context",
            "svc",
            "--",
            "/bin/sh",
            "-c",
            "echo $(ulimit -n) $(ulimit -Hn)",
        ])
        .stdout("1000 2000\n")
        .run();
    // Without a context, an exec gets the daemon's limits.
    let plain = Test::daemon(&d)
        .args(&["exec", "--", "/bin/sh", "-c", "ulimit -n"])
        .any_stdout()
        .run();
    assert_ne!(plain.stdout, "1000\n");

    // The check passes only under the service's limits: it has succeeded, never failed.
    let check = || {
        let (_, body) = raw(&d, Method::GET, "/v1/checks?names=limited", None);
        let body: serde_json::Value = serde_json::from_str(&body).unwrap();
        body["result"][0].clone()
    };
    // A check's timeout is at most its period: 3 s (the default timeout) leaves a busy
    // machine time to run the shell, so a failure can only be the limits'.
    wait_for("the exec check to pass", Duration::from_secs(20), || {
        check()["successes"].as_u64().unwrap_or(0) >= 2
    });
    let check = check();
    assert_eq!(check["status"], "up", "{check}");
    assert_eq!(check["failures"].as_u64().unwrap_or(0), 0, "{check}");
}

#[test]
fn a_limit_the_kernel_refuses_fails_the_start_with_its_reason() {
    // Above `fs.nr_open`: refused even to root.
    let layer = "services:\n  svc:\n    override: replace\n    command: sleep 1000\n    \
                 rlimits:\n      nofile: 2000000000\n";
    let d = Daemon::hold(&[("001-base", layer)]);
    let change = act(&d, "start", &["svc"]);
    assert_eq!(change.status, "Error", "{change:?}");
    let refusal = "cannot set rlimit nofile to 2000000000: operation not permitted";
    assert!(change.err.contains(refusal), "{change:?}");
    let log = change.tasks[0].log.join("\n");
    assert!(log.contains(refusal), "{log}");
    wait_for("why to give the reason", Duration::from_secs(10), || {
        service(&d, "svc")
            .reason
            .is_some_and(|r| r.contains(refusal) && r.starts_with("backing off"))
    });
    Test::daemon(&d)
        .args(&["why", "svc"])
        .stdout_contains(refusal)
        .run();
}

#[test]
fn a_service_past_memory_max_is_oom_killed_reported_as_such_and_restarted() {
    let layer = "services:\n  leaky:\n    override: replace\n    \
                 command: python3 -c 'import time; b = bytearray(256 * 1024 * 1024); time.sleep(1000)'\n    \
                 backoff-delay: 100ms\n    \
                 resources:\n      memory-max: 48M\n";
    let d = Daemon::hold(&[("001-base", layer)]);
    rt().block_on(crate::fixture::client(&d).services_action("start", &["leaky".to_owned()]))
        .unwrap();
    wait_for("the first run to end", Duration::from_secs(20), || {
        details_of(&d, "leaky").last_exit_code.is_some()
            || !details_of(&d, "leaky").resources_not_enforced.is_empty()
    });
    if not_enforced_here(&d, "leaky") {
        return;
    }
    let cause = "killed by the OOM killer at memory-max 48M";
    let details = details_of(&d, "leaky");
    assert_eq!(details.last_exit_code, Some(137), "{details:?}");
    assert_eq!(details.last_exit_cause, cause);
    d.wait_log(&format!(
        "Service \"leaky\" stopped unexpectedly with code 137 ({cause})"
    ));
    // In the service's own log, and in why.
    assert!(
        details.last_output.iter().any(|l| l.contains(cause)),
        "{details:?}"
    );
    Test::daemon(&d)
        .args(&["why", "leaky"])
        .stdout_contains(&format!("Last exit:      code 137 ({cause})"))
        .run();
    // on-failure (restart, the default) brings it back like any other exit.
    wait_for("a restart", Duration::from_secs(20), || {
        details_of(&d, "leaky").start_count >= 3
    });
}

#[test]
fn accounting_agrees_with_proc_for_a_service_holding_known_memory() {
    let root = tempfile::tempdir().unwrap();
    let marker = root.path().join("pid");
    // 96 MiB written to, so resident; then the pid, then sleep.
    let layer = format!(
        "services:\n  hog:\n    override: replace\n    \
         command: python3 -c 'import os, time; b = bytearray(96 * 1024 * 1024); b[::4096] = b\"x\" * len(b[::4096]); open(\"{m}\", \"w\").write(str(os.getpid())); time.sleep(1000)'\n  \
         capped:\n    override: replace\n    \
         command: python3 -c 'import os, time; b = bytearray(32 * 1024 * 1024); b[::4096] = b\"x\" * len(b[::4096]); open(\"{m}2\", \"w\").write(str(os.getpid())); time.sleep(1000)'\n    \
         resources:\n      memory-max: 256M\n      pids-max: 64\n",
        m = marker.display()
    );
    let d = Daemon::hold(&[("001-base", &layer)]);
    act(&d, "start", &["hog", "capped"]);
    for (name, marker) in [
        ("hog", marker.clone()),
        ("capped", root.path().join("pid2")),
    ] {
        let pid = main_pid(&marker);
        let usage = details_of(&d, name).usage.expect("usage in the details");
        let rss = vm_rss(pid);
        let off = (usage.memory_bytes as f64 - rss as f64).abs() / rss as f64;
        assert!(
            off <= 0.10,
            "{name}: cobble says {} bytes, /proc says {rss} ({off:.3} off)",
            usage.memory_bytes
        );
        assert_eq!(usage.processes, 1, "{name}: {usage:?}");
        let fds = fs::read_dir(format!("/proc/{pid}/fd")).unwrap().count() as u64;
        assert_eq!(usage.open_fds, fds, "{name}: {usage:?}");
        assert!(usage.cpu_seconds > 0.0, "{name}: writing 96 MiB takes CPU");
        if name == "capped" && details_of(&d, name).resources_not_enforced.is_empty() {
            let cgroup = Path::new(&usage.cgroup);
            let procs = fs::read_to_string(cgroup.join("cgroup.procs")).unwrap();
            assert_eq!(procs.trim(), pid.to_string(), "{}", cgroup.display());
            assert!(usage.cgroup_memory_bytes.unwrap() >= 32 * 1024 * 1024);
        }
    }
    // The same figures, by service, in the metrics.
    let (status, body) = raw(&d, Method::GET, "/v1/metrics", None);
    assert_eq!(status, 200);
    for family in [
        "cobble_service_memory_bytes",
        "cobble_service_cpu_seconds_total",
        "cobble_service_processes",
        "cobble_service_open_fds",
    ] {
        for name in ["hog", "capped"] {
            let sample = format!("{family}{{service=\"{name}\"}} ");
            assert!(body.contains(&sample), "{sample} in\n{body}");
        }
    }
    let memory: u64 = body
        .lines()
        .find_map(|l| l.strip_prefix("cobble_service_memory_bytes{service=\"hog\"} "))
        .unwrap()
        .parse()
        .unwrap();
    assert!(memory >= 96 * 1024 * 1024, "{memory}");
}

#[test]
fn a_stop_ends_what_left_the_group_session_and_environment_but_not_the_cgroup() {
    let root = tempfile::tempdir().unwrap();
    let marker = root.path().join("escaped");
    // The escapee: orphaned (its subshell exits), in a session of its own, without the
    // service's environment. Only the cgroup still knows it.
    let layer = format!(
        "services:\n  svc:\n    override: replace\n    \
         command: /bin/sh -c '(setsid env -i /bin/sh -c \"echo \\$\\$ > {m}; exec sleep 1000\" &); exec sleep 1000'\n    \
         resources:\n      pids-max: 32\n",
        m = marker.display()
    );
    let mut d = Daemon::hold(&[("001-base", &layer)]);
    act(&d, "start", &["svc"]);
    let escaped = main_pid(&marker);
    if not_enforced_here(&d, "svc") {
        return;
    }
    let cgroup = details_of(&d, "svc").usage.unwrap().cgroup;
    assert!(!cgroup.is_empty());
    let change = act(&d, "stop", &["svc"]);
    assert_eq!(change.status, "Done", "{change:?}");
    wait_for(
        "the escaped process to end",
        Duration::from_secs(10),
        || {
            !Path::new(&format!("/proc/{escaped}")).exists()
                || fs::read_to_string(format!("/proc/{escaped}/stat"))
                    .is_ok_and(|s| s.contains(") Z "))
        },
    );
    // The run's cgroup goes with it, and the daemon's own cgroup directory with the daemon.
    wait_for("the run's cgroup to go", Duration::from_secs(10), || {
        !Path::new(&cgroup).exists()
    });
    let base = Path::new(&cgroup).parent().unwrap().to_owned();
    assert!(base.exists());
    d.stop();
    assert!(!base.exists(), "{} left behind", base.display());
}

#[test]
fn a_service_of_another_user_gets_its_limits_without_cap_sys_resource() {
    // The daemon sets the limits while the child is still its own user: a daemon without
    // CAP_SYS_RESOURCE (containers' default) may not touch another user's process.
    if !nix::unistd::getuid().is_root() {
        eprintln!("skipped: only root can start a service as another user");
        return;
    }
    let root = tempfile::tempdir().unwrap();
    fs::set_permissions(
        root.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let seen = root.path().join("seen");
    let layer = format!(
        "services:\n  svc:\n    override: replace\n    user: nobody\n    \
         working-dir: {dir}\n    \
         command: /bin/sh -c 'echo $(id -un) $(pwd) $(ulimit -n) $(ulimit -Hn) > {s}; exec sleep 1000'\n    \
         rlimits:\n      nofile: \"512:1024\"\n",
        dir = root.path().display(),
        s = seen.display()
    );
    let d = Daemon::hold(&[("001-base", &layer)]);
    let change = act(&d, "start", &["svc"]);
    assert_eq!(change.status, "Done", "{change:?}");
    assert_eq!(
        written(&seen),
        format!("nobody {} 512 1024\n", root.path().display())
    );
    Test::daemon(&d)
        .args(&[
            "exec",
            "--context",
            "svc",
            "--",
            "/bin/sh",
            "-c",
            "echo $(id -un) $(ulimit -n) $(ulimit -Hn)",
        ])
        .stdout("nobody 512 1024\n")
        .run();
}
