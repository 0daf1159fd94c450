//! `cobble reexec`: the daemon re-executed in place keeps its pid, its listeners and its
//! state, answers through the swap, and a binary that cannot take over changes nothing.

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use crate::fixture::{
    COBBLE, Daemon, Test, act, details_of, free_port, lines, raw, service, times, wait_check_runs,
    wait_for,
};

const LAYER: &str = "services:\n  s:\n    override: replace\n    command: sleep 1000\n";

/// Runs `cobble reexec` against `daemon` with `args`; returns its exit code, stdout and
/// stderr, the latter on one line (its words joined by single spaces, as the error is wrapped).
fn reexec(daemon: &Daemon, args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(COBBLE)
        .arg("reexec")
        .args(args)
        .env("PEBBLE", daemon.pebble_dir())
        .env_remove("PEBBLE_SOCKET")
        .output()
        .expect("run cobble reexec");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr)
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" "),
    )
}

/// Everything `cobble logs` has of `service`.
fn all_logs(daemon: &Daemon, service: &str) -> String {
    Test::daemon(daemon)
        .args(&["logs", service, "-n", "all"])
        .any_stdout()
        .run()
        .stdout
}

/// The body of `GET path`, which must answer 200.
fn get(daemon: &Daemon, path: &str) -> String {
    let (status, body) = raw(daemon, cobble_client::Method::GET, path, None);
    assert_eq!(status, 200, "GET {path}: {body}");
    body
}

/// What a client sees of the state: every change and task, every notice (and warning).
fn visible_state(daemon: &Daemon) -> (String, String) {
    (
        get(daemon, "/v1/changes?select=all"),
        get(daemon, "/v1/notices?users=all"),
    )
}

/// `/v1/system-info`'s boot ID.
fn boot_id(daemon: &Daemon) -> String {
    let value: serde_json::Value = serde_json::from_str(&get(daemon, "/v1/system-info")).unwrap();
    value["result"]["boot-id"].as_str().unwrap().to_owned()
}

/// The daemon's children: its services' processes.
fn children(daemon: &Daemon) -> Vec<u32> {
    let mut pids: Vec<u32> = std::fs::read_dir(format!("/proc/{}/task", daemon.pid()))
        .unwrap()
        .filter_map(Result::ok)
        .filter_map(|task| std::fs::read_to_string(task.path().join("children")).ok())
        .flat_map(|text| {
            text.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect();
    pids.sort_unstable();
    pids
}

/// The daemon's children whose command line contains `needle`: a service's processes, without
/// the check commands the daemon runs meanwhile (a check every 100 ms is often caught).
fn children_running(daemon: &Daemon, needle: &str) -> Vec<u32> {
    children(daemon)
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|cmdline| String::from_utf8_lossy(&cmdline).contains(needle))
        })
        .collect()
}

/// Adds `yaml` to the plan with `cobble add` as layer `label`, combined into the layer of
/// that label when `combine`.
fn add_layer(d: &Daemon, label: &str, yaml: &str, combine: bool) {
    let file = d.scratch().join(format!("added-{label}.yaml"));
    std::fs::write(&file, yaml).unwrap();
    let mut args = vec!["add"];
    if combine {
        args.push("--combine");
    }
    args.extend([label, file.to_str().unwrap()]);
    Test::daemon(d).args(&args).any_stdout().run();
}

/// A script at `dir/name` with `body`, executable.
fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

#[test]
fn a_reexec_keeps_the_pid_the_listeners_and_every_change_and_notice() {
    let port = free_port();
    let http = format!("127.0.0.1:{port}");
    let d = Daemon::start(&[("001-base", LAYER)], &["--hold", "--http", &http]);
    act(&d, "start", &["s"]);
    act(&d, "stop", &["s"]);
    Test::daemon(&d)
        .args(&["notify", "example.com/before", "k=v"])
        .any_stdout()
        .run();
    let before = visible_state(&d);
    let boot = boot_id(&d);
    for _ in 0..3 {
        let (code, stdout, stderr) = reexec(&d, &[]);
        assert_eq!(code, 0, "{stderr}");
        let expected = format!(
            "Re-executed daemon (pid {}) as {COBBLE}: cobble {v} (was {v}).\n",
            d.pid(),
            v = env!("CARGO_PKG_VERSION")
        );
        assert_eq!(stdout, expected);
        // The same process answers, with the same state and boot ID.
        assert_eq!(visible_state(&d), before);
        assert_eq!(boot_id(&d), boot);
        // --http is served on the listener it had.
        let mut tcp = std::net::TcpStream::connect(&http).expect("--http still listens");
        tcp.write_all(b"GET /v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut answer = String::new();
        tcp.read_to_string(&mut answer).unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }
    d.wait_log("Re-executed daemon: cobble");
    // The stop signals, kept blocked across the exec, are caught and unblocked again.
    let status = std::fs::read_to_string(format!("/proc/{}/status", d.pid())).unwrap();
    let blocked = status.lines().find(|l| l.starts_with("SigBlk:")).unwrap();
    assert_eq!(
        blocked.split_whitespace().nth(1),
        Some("0000000000000000"),
        "{status}"
    );
    // New IDs go on from the old ones, and services start under the new program.
    act(&d, "start", &["s"]);
    assert_eq!(service(&d, "s").current, "active");
    let (changes, _) = visible_state(&d);
    assert!(changes.contains(r#""id":"3""#), "{changes}");
}

#[test]
fn clients_connecting_during_the_swaps_are_answered_not_refused() {
    let d = Daemon::hold(&[("001-base", LAYER)]);
    let socket = d.pebble_dir().join(".pebble.socket");
    let stop = Arc::new(AtomicBool::new(false));
    let answered = Arc::new(AtomicU64::new(0));
    let client = {
        let (stop, answered) = (stop.clone(), answered.clone());
        std::thread::spawn(move || {
            let mut failures = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                // A new connection for each request, as ops makes them.
                let result = (|| {
                    let mut stream = UnixStream::connect(&socket)?;
                    stream.write_all(
                        b"GET /v1/services HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                    )?;
                    let mut answer = String::new();
                    stream.read_to_string(&mut answer)?;
                    Ok::<_, std::io::Error>(answer)
                })();
                match result {
                    Ok(answer) if answer.starts_with("HTTP/1.1 200") => {
                        answered.fetch_add(1, Ordering::SeqCst);
                    }
                    Ok(answer) => failures.push(format!("answered {answer:?}")),
                    Err(e) => failures.push(e.to_string()),
                }
            }
            failures
        })
    };
    for _ in 0..5 {
        let seen = answered.load(Ordering::SeqCst);
        wait_for("requests answered", Duration::from_secs(30), || {
            answered.load(Ordering::SeqCst) > seen
        });
        let (code, _, stderr) = reexec(&d, &[]);
        assert_eq!(code, 0, "{stderr}");
    }
    let seen = answered.load(Ordering::SeqCst);
    wait_for("requests answered", Duration::from_secs(30), || {
        answered.load(Ordering::SeqCst) > seen
    });
    stop.store(true, Ordering::SeqCst);
    let failures = client.join().unwrap();
    assert!(failures.is_empty(), "failed requests: {failures:?}");
}

#[test]
fn a_reexec_into_another_program_reports_it() {
    let d = Daemon::hold(&[("001-base", LAYER)]);
    // Another build, as far as the daemon can tell: a program of another name that runs
    // cobble.
    let other = script(d.scratch(), "cobble-next", &format!("exec {COBBLE} \"$@\""));
    let (code, stdout, stderr) = reexec(&d, &["--binary", other.to_str().unwrap()]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains(&format!("as {}:", other.display())),
        "{stdout}"
    );
    assert_eq!(
        std::fs::read_link(format!("/proc/{}/exe", d.pid())).unwrap(),
        Path::new(COBBLE)
    );
    // And back to the daemon's own binary, by default.
    let (code, stdout, stderr) = reexec(&d, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains(&format!("as {COBBLE}:")), "{stdout}");
}

#[test]
fn a_binary_that_cannot_take_over_changes_nothing() {
    let d = Daemon::start(&[("001-base", LAYER)], &["--hold"]);
    act(&d, "start", &["s"]);
    let pids = children(&d);
    assert_eq!(pids.len(), 1, "{pids:?}");
    let before = visible_state(&d);
    let dir = d.scratch().to_owned();
    let not_executable = dir.join("not-executable");
    std::fs::write(&not_executable, "#!/bin/sh\n").unwrap();
    // An ELF executable for another machine (AArch64 on x86-64, x86-64 elsewhere).
    let other_arch = dir.join("other-arch");
    let mut elf = vec![0u8; 64];
    elf[..4].copy_from_slice(b"\x7fELF");
    elf[4] = 2; // 64-bit
    elf[5] = 1; // little-endian
    elf[6] = 1; // version
    elf[16] = 2; // ET_EXEC
    let machine: u16 = if cfg!(target_arch = "x86_64") {
        183
    } else {
        62
    };
    elf[18..20].copy_from_slice(&machine.to_le_bytes());
    elf[20] = 1;
    std::fs::write(&other_arch, &elf).unwrap();
    std::fs::set_permissions(&other_arch, std::fs::Permissions::from_mode(0o755)).unwrap();
    let too_old = script(
        &dir,
        "too-old",
        "echo 'error: unknown command \"__reexec-probe\", see '\"'\"'pebble help'\"'\"'.' >&2; exit 1",
    );
    let other_format = script(
        &dir,
        "other-format",
        r#"echo '{"cobble-version":"9.0.0","handover-formats":[7]}'"#,
    );
    let crashes = script(&dir, "crashes", "kill -SEGV $$");
    let exits = script(&dir, "exits", "exit 0");
    let cases: Vec<(PathBuf, &str)> = vec![
        (dir.join("missing"), "no such file or directory"),
        (not_executable, "permission denied"),
        (other_arch, "exec format error"),
        (too_old, "it exited with status 1: error: unknown command"),
        (
            other_format,
            "cobble 9.0.0 reads handover formats [7], and this daemon writes format 3",
        ),
        (crashes, "it was killed by signal 11"),
        (exits, "it did not answer as cobble does"),
    ];
    for (binary, why) in cases {
        let (code, stdout, stderr) = reexec(&d, &["--binary", binary.to_str().unwrap()]);
        assert_eq!(code, 1, "{}: {stdout}", binary.display());
        let expected = format!("error: cannot re-execute \"{}\": ", binary.display());
        assert!(stderr.starts_with(&expected), "{stderr}");
        assert!(stderr.contains(why), "{}: {stderr}", binary.display());
        // Everything as it was: the service's process, the state, and the daemon answering.
        assert_eq!(service(&d, "s").current, "active");
        assert_eq!(children(&d), pids);
        assert_eq!(visible_state(&d), before);
    }
}

#[test]
fn a_service_its_check_is_restarting_is_handed_over_and_restarted_by_the_new_program() {
    // A service its failing check restarts, which takes its time to exit on SIGTERM (until
    // `release` exists, or 30 s at most, so that no process outlives a failed test): it is
    // being ended, with no change in progress, across the swap.
    let root = tempfile::tempdir().unwrap();
    let fail = root.path().join("fail");
    let release = root.path().join("release");
    let layer = format!(
        "services:\n  s:\n    override: replace\n    \
         command: sh -c 'trap \"i=0; while [ ! -e {release} ] && [ \\$i -lt 600 ]; do sleep 0.05; \
         i=\\$((i+1)); done; exit 0\" TERM; \
         while :; do sleep 0.1; done'\n    \
         kill-delay: 1h\n    on-check-failure: {{down: restart}}\n\
         checks:\n  down:\n    override: replace\n    period: 100ms\n    threshold: 1\n    \
         exec: {{command: \"test ! -e {fail}\"}}\n",
        release = release.display(),
        fail = fail.display(),
    );
    let d = Daemon::hold(&[("001-base", &layer)]);
    // The service's process: its check's commands are the daemon's children too.
    let services = |d: &Daemon| children_running(d, "while :");
    act(&d, "start", &["s"]);
    let pids = services(&d);
    let restarting = |d: &Daemon| {
        service(d, "s")
            .reason
            .is_some_and(|r| r.starts_with("restarting: check \"down\" failed"))
    };
    std::fs::write(&fail, "").unwrap();
    wait_for("the check's restart", Duration::from_secs(30), || {
        restarting(&d)
    });
    let before = details_of(&d, "s");
    // A cobble from before handover format 5 would take it for a client's stop: refused,
    // naming it, with nothing moved.
    let old = script(
        d.scratch(),
        "reads-4",
        r#"echo '{"cobble-version":"0.9.0","handover-formats":[1,2,3,4]}'"#,
    );
    let (code, _, stderr) = reexec(&d, &["--binary", old.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(
        stderr.starts_with(
            "error: cannot re-execute: service \"s\" is being restarted for check \"down\", \
             which the new program (a cobble too old for that) cannot take over;"
        ),
        "{stderr}"
    );
    assert!(restarting(&d), "{:?}", service(&d, "s").reason);
    assert_eq!(services(&d), pids);
    // This build takes it over: still being restarted for its check, same process.
    let (code, _, stderr) = reexec(&d, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert!(restarting(&d), "{:?}", service(&d, "s").reason);
    assert_eq!(services(&d), pids);
    let after = details_of(&d, "s");
    assert_eq!(
        (after.start_count, after.last_exit_code),
        (before.start_count, before.last_exit_code)
    );
    // Once the process has exited, the new program backs off while the check is down, and
    // starts it again once the check passes, as the old program would have.
    std::fs::write(&release, "").unwrap();
    d.wait_log("Service \"s\" exited after check failure, restarting");
    // (`release` stays: the next instance ends as soon as the daemon stops it.)
    std::fs::remove_file(&fail).unwrap();
    wait_for("the restart", Duration::from_secs(30), || {
        let now = services(&d);
        now.len() == 1 && now != pids && service(&d, "s").current == "active"
    });
    assert_eq!(details_of(&d, "s").start_count, before.start_count + 1);
}

/// Seconds since the epoch of an RFC 3339 time the API reports.
fn epoch_secs(time: &str) -> f64 {
    let at: jiff::Timestamp = time.parse().unwrap();
    at.as_nanosecond() as f64 / 1e9
}

#[test]
fn a_service_backing_off_keeps_its_step_and_restarts_when_its_timer_ends() {
    let root = tempfile::tempdir().unwrap();
    let runs = root.path().join("runs");
    // The first run fails at once; the second runs on.
    let layer = format!(
        "services:\n  f:\n    override: replace\n    backoff-delay: 10s\n    backoff-limit: 1h\n    \
         command: sh -c 'date +%s.%N >> {r}; if [ $(wc -l < {r}) -lt 2 ]; then exit 1; fi; exec sleep 1000'\n",
        r = runs.display()
    );
    let d = Daemon::hold(&[("001-base", &layer)]);
    let change = act(&d, "start", &["f"]);
    assert_eq!(change.status, "Error", "{change:?}");
    wait_for("the service to back off", Duration::from_secs(30), || {
        service(&d, "f").current == "backoff"
    });
    let before = service(&d, "f");
    let details = details_of(&d, "f");
    assert_eq!((details.backoff_count, details.start_count), (1, 1));
    let until = epoch_secs(details.backoff_until.as_deref().expect("backoff-until"));
    let (code, _, stderr) = reexec(&d, &[]);
    assert_eq!(code, 0, "{stderr}");
    // The same backoff, the same step, ending at the same time, not restarted meanwhile.
    // The reason names the backoff's end to the second, which its instant, compared below
    // within a bound, may cross by a hair.
    let without_until = |reason: &Option<String>| {
        let reason = reason.clone().unwrap_or_default();
        match reason.split_once(" until ") {
            Some((head, tail)) => format!("{head}{}", tail.split_once(' ').map_or("", |t| t.1)),
            None => reason,
        }
    };
    assert!(
        before
            .reason
            .as_deref()
            .unwrap_or_default()
            .starts_with("backing off until "),
        "{before:?}"
    );
    let after = service(&d, "f");
    assert_eq!(
        (
            after.current.as_str(),
            without_until(&after.reason),
            after.current_since.as_deref()
        ),
        (
            "backoff",
            without_until(&before.reason),
            before.current_since.as_deref()
        )
    );
    let kept = details_of(&d, "f");
    assert_eq!(
        (kept.backoff_count, kept.start_count, kept.last_exit_code),
        (1, 1, Some(1))
    );
    assert_eq!(kept.backoff_delay, details.backoff_delay);
    let kept_until = epoch_secs(kept.backoff_until.as_deref().expect("backoff-until"));
    assert!(
        (kept_until - until).abs() < 0.5,
        "backoff until {until}, and {kept_until} after the re-execution"
    );
    assert_eq!(lines(&runs).len(), 1, "restarted before its timer ended");
    // Restarted by the new program once the timer ends, not before.
    wait_for("the restart", Duration::from_secs(60), || {
        service(&d, "f").current == "active"
            && lines(&runs).len() == 2
            && details_of(&d, "f").start_count == 2
    });
    let restarted = times(&runs)[1];
    assert!(
        restarted >= until - 0.05,
        "restarted at {restarted}, before its backoff ended at {until}"
    );
    assert_eq!(details_of(&d, "f").backoff_count, 1);
}

#[test]
fn a_service_waiting_for_a_path_starts_once_it_appears_after_the_reexec() {
    let root = tempfile::tempdir().unwrap();
    let ready = root.path().join("ready");
    let layer = format!(
        "services:\n  w:\n    override: replace\n    requires-paths: [{}]\n    command: sleep 1000\n",
        ready.display()
    );
    let d = Daemon::hold(&[("001-base", &layer)]);
    act(&d, "start", &["w"]);
    assert_eq!(service(&d, "w").current, "waiting");
    let before = service(&d, "w");
    let (code, _, stderr) = reexec(&d, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(service(&d, "w"), before);
    assert_eq!(
        details_of(&d, "w").waiting_for,
        [ready.display().to_string()]
    );
    assert!(children(&d).is_empty());
    std::fs::write(&ready, "").unwrap();
    wait_for("the service to start", Duration::from_secs(30), || {
        service(&d, "w").current == "active" && details_of(&d, "w").start_count == 1
    });
    assert_eq!(children(&d).len(), 1);
}

/// A service restarted on a change of `app.conf`, started, with the file as it was then.
fn watching_a_file(env: &[(&str, &str)]) -> (tempfile::TempDir, PathBuf, Daemon) {
    let root = tempfile::tempdir().unwrap();
    let config = root.path().join("app.conf");
    std::fs::write(&config, "one\n").unwrap();
    let layer = format!(
        "services:\n  a:\n    override: replace\n    command: sleep 1000\n    \
         on-file-change:\n      {}: restart\n",
        config.display()
    );
    let d = Daemon::start_with_env(&[("001-base", &layer)], &["--hold"], env);
    act(&d, "start", &["a"]);
    (root, config, d)
}

/// Waits until the service of [`watching_a_file`] has been restarted for its file: a new
/// process (not one of `pids`), active, its second start.
fn wait_restarted_for_its_file(d: &Daemon, pids: &[u32]) {
    d.wait_log("Service \"a\" on-file-change action is \"restart\"");
    wait_for("the restart", Duration::from_secs(30), || {
        let now = children(d);
        now.len() == 1
            && now != pids
            && service(d, "a").current == "active"
            && details_of(d, "a").start_count == 2
    });
}

/// A program that replaces `config` (another size: a change whatever the clock's
/// granularity), then runs cobble: executed by a re-execution, it changes the file after
/// the old program has stopped looking and before the new one has started.
fn changing_on_exec(d: &Daemon, name: &str, config: &Path) -> PathBuf {
    script(
        d.scratch(),
        name,
        &format!(
            "[ \"$1\" = {probe} ] || echo 'two, longer' > {config}\nexec {COBBLE} \"$@\"",
            probe = cobble_daemon::REEXEC_PROBE_ARG,
            config = config.display()
        ),
    )
}

#[test]
fn a_file_change_after_the_reexec_restarts_the_service() {
    let (_root, config, d) = watching_a_file(&[]);
    let pids = children(&d);
    assert_eq!(pids.len(), 1, "{pids:?}");
    let (code, _, stderr) = reexec(&d, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(children(&d), pids, "the service keeps its process");
    std::fs::write(&config, "two\n").unwrap();
    wait_restarted_for_its_file(&d, &pids);
}

#[test]
fn a_file_changed_during_the_swap_restarts_the_service_under_the_new_program() {
    let (_root, config, d) = watching_a_file(&[]);
    let pids = children(&d);
    let changing = changing_on_exec(&d, "cobble-next", &config);
    let (code, _, stderr) = reexec(&d, &["--binary", changing.to_str().unwrap()]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(std::fs::read_to_string(&config).unwrap(), "two, longer\n");
    // The new program found the file other than the old one last saw it: a change.
    wait_restarted_for_its_file(&d, &pids);
    // Once: a re-execution with nothing changed restarts nothing.
    let pids = children(&d);
    let (code, _, stderr) = reexec(&d, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(children(&d), pids);
    assert_eq!(details_of(&d, "a").start_count, 2);
    assert_eq!(count_in_log(&d, "on-file-change action is \"restart\""), 1);
}

#[test]
fn a_file_changed_during_a_failed_take_over_restarts_the_service_under_the_old_program() {
    let (_root, config, d) = watching_a_file(&[("COBBLE_TEST_FAULTS", "1")]);
    let pids = children(&d);
    // Its take-over fails (see the daemon's fault hook): the old program is executed again,
    // and acts on what changed meanwhile.
    let failing = changing_on_exec(&d, "takeover-fails", &config);
    let (code, _, stderr) = reexec(&d, &["--binary", failing.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(
        stderr.contains("the new program did not take over"),
        "{stderr}"
    );
    assert_eq!(std::fs::read_to_string(&config).unwrap(), "two, longer\n");
    wait_restarted_for_its_file(&d, &pids);
}

#[test]
fn a_starting_service_is_handed_over_and_its_start_completes_under_the_new_program() {
    let d = Daemon::hold(&[("001-base", LAYER)]);
    let c = crate::fixture::client(&d);
    // The start's change waits out the okay delay, under whichever program follows it.
    let id = crate::fixture::rt()
        .block_on(c.services_action("start", &["s".to_owned()]))
        .expect("start");
    let (code, _, stderr) = reexec(&d, &[]);
    assert_eq!(code, 0, "{stderr}");
    let done = || {
        crate::fixture::rt()
            .block_on(c.change(&id))
            .expect("the start's change")
    };
    wait_for("the start's change", Duration::from_secs(30), || {
        done().ready
    });
    let change = done();
    assert_eq!(change.status, "Done", "{change:?}");
    // Recorded as it would have been without the swap: no line about a restart.
    assert!(change.tasks[0].log.is_empty(), "{change:?}");
    assert_eq!(service(&d, "s").current, "active");
    assert_eq!(children(&d).len(), 1);
    assert_eq!(details_of(&d, "s").start_count, 1);
}

/// A service that writes `n 1` to `n 2000`, a line about every millisecond, then sleeps.
const NUMBERED: &str = "services:\n  n:\n    override: replace\n    command: sh -c 'i=0; while [ $i -lt 2000 ]; do i=$((i+1)); echo \"n $i\"; sleep 0.001; done; exec sleep 1000'\n";

#[test]
fn running_services_keep_their_process_and_every_line_of_output_once() {
    let d = Daemon::hold(&[("001-base", NUMBERED)]);
    act(&d, "start", &["n"]);
    let pids = children(&d);
    assert_eq!(pids.len(), 1, "{pids:?}");
    let logs = || all_logs(&d, "n");
    for _ in 0..5 {
        let (code, _, stderr) = reexec(&d, &[]);
        assert_eq!(code, 0, "{stderr}");
        assert_eq!(children(&d), pids, "the service keeps its process");
        assert_eq!(service(&d, "n").current, "active");
    }
    wait_for("the service's last line", Duration::from_secs(120), || {
        logs().contains("[n] n 2000\n")
    });
    let numbers: Vec<u32> = logs()
        .lines()
        .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
        .collect();
    assert_eq!(numbers, (1..=2000).collect::<Vec<_>>());
    // The new program supervises it: a stop ends it, and its change completes.
    let change = act(&d, "stop", &["n"]);
    assert_eq!(change.status, "Done", "{change:?}");
    assert!(children(&d).is_empty());
}

#[test]
fn a_handed_over_service_that_dies_is_restarted_by_the_new_program() {
    let d = Daemon::hold(&[("001-base", LAYER)]);
    act(&d, "start", &["s"]);
    let pids = children(&d);
    let (code, _, stderr) = reexec(&d, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(children(&d), pids);
    std::process::Command::new("kill")
        .args(["-KILL", &pids[0].to_string()])
        .status()
        .unwrap();
    wait_for("the service restarted", Duration::from_secs(60), || {
        let now = children(&d);
        now.len() == 1 && now != pids && service(&d, "s").current == "active"
    });
    d.wait_log("Service \"s\" stopped unexpectedly with code 137");
}

#[test]
fn a_daemon_without_a_state_file_hands_its_state_over_in_memory() {
    let d = Daemon::start_with_env(
        &[("001-base", LAYER)],
        &["--hold"],
        &[("PEBBLE_PERSIST", "never")],
    );
    act(&d, "start", &["s"]);
    act(&d, "stop", &["s"]);
    act(&d, "start", &["s"]);
    Test::daemon(&d)
        .args(&["notify", "example.com/before", "k=v"])
        .any_stdout()
        .run();
    let pids = children(&d);
    let before = visible_state(&d);
    // A cobble that reads no state from the document would start with none: refused.
    let old = script(
        d.scratch(),
        "reads-5",
        r#"echo '{"cobble-version":"0.9.0","handover-formats":[1,2,3,4,5]}'"#,
    );
    let (code, _, stderr) = reexec(&d, &["--binary", old.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(
        stderr.ends_with(
            "cobble 0.9.0 reads handover formats [1, 2, 3, 4, 5], and this daemon writes format 6"
        ),
        "{stderr}"
    );
    for _ in 0..2 {
        let (code, _, stderr) = reexec(&d, &[]);
        assert_eq!(code, 0, "{stderr}");
        assert_eq!(visible_state(&d), before);
        assert_eq!(children(&d), pids);
    }
    // Still nothing on disk, and new IDs go on from the old ones.
    assert!(!d.pebble_dir().join(".pebble.state").exists());
    let change = act(&d, "stop", &["s"]);
    assert_eq!(change.id, "4", "{change:?}");
}

#[test]
fn the_plan_is_handed_over_whole_and_the_layers_directory_is_not_read_again() {
    let d = Daemon::start(
        &[("001-base", LAYER)],
        &["--hold", "--args", "s", "2000", ";"],
    );
    // Layers added through the API live in the daemon's memory only: a new one, and one
    // combined into a layer the directory had.
    add_layer(
        &d,
        "extra",
        "summary: added\nservices:\n  t:\n    override: replace\n    command: sleep 1000\n    \
         environment: {A: \"x: y\"}\nchecks:\n  up:\n    override: replace\n    \
         startup: disabled\n    exec: {command: \"true\"}\n",
        false,
    );
    let merged = "services:\n  s:\n    override: merge\n    after: [t]\n";
    add_layer(&d, "base", merged, true);
    let plan = |d: &Daemon| get(d, "/v1/plan?format=yaml");
    let before = plan(&d);
    assert!(
        before.contains("sleep 1000 [ 2000 ]") && before.contains("after:"),
        "{before}"
    );
    // A layer file broken since start-up is never read again.
    std::fs::write(d.pebble_dir().join("layers/002-broken.yaml"), "services: [").unwrap();
    for _ in 0..2 {
        let (code, _, stderr) = reexec(&d, &[]);
        assert_eq!(code, 0, "{stderr}");
        assert_eq!(plan(&d), before);
    }
    // The layers keep their labels and orders: one more combines into the API's layer.
    add_layer(&d, "extra", merged, true);
    act(&d, "start", &["s", "t"]);
    assert_eq!(service(&d, "t").current, "active");
    assert_eq!(service(&d, "s").current, "active");
}

/// Sends `request` on a new connection to `daemon`'s socket; returns the whole answer.
fn ask(socket: &Path, request: &str) -> std::io::Result<String> {
    let mut stream = UnixStream::connect(socket)?;
    stream.write_all(request.as_bytes())?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    Ok(answer)
}

#[test]
fn long_polls_and_log_followers_are_answered_whole_before_the_swap() {
    let d = Daemon::hold(&[("001-base", LAYER)]);
    let socket = d.pebble_dir().join(".pebble.socket");
    // A notices long poll: answered as its timeout would answer it, by whichever program
    // serves it, and never cut.
    let poll = {
        let socket = socket.clone();
        std::thread::spawn(move || {
            ask(
                &socket,
                "GET /v1/notices?timeout=20s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            )
        })
    };
    // A follower, whose answer's head says it is being served.
    let mut follower = UnixStream::connect(&socket).unwrap();
    follower
        .write_all(b"GET /v1/logs?follow=true HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(follower.read(&mut byte).unwrap(), 1, "the follower's head");
        head.push(byte[0]);
    }
    assert!(head.starts_with(b"HTTP/1.1 200"));
    let (code, _, stderr) = reexec(&d, &[]);
    assert_eq!(code, 0, "{stderr}");
    // The follower's stream ended whole: its last chunk, then the connection's end.
    let mut rest = String::new();
    follower
        .read_to_string(&mut rest)
        .expect("the stream ends whole");
    assert!(rest.ends_with("0\r\n\r\n"), "{rest:?}");
    let poll = poll.join().unwrap().expect("the long poll is answered");
    assert!(poll.starts_with("HTTP/1.1 200"), "{poll}");
    assert!(poll.contains(r#""result":[]"#), "{poll}");
}

#[test]
fn the_output_of_services_that_ran_before_is_still_there_after() {
    let d = Daemon::hold(&[(
        "001-base",
        "services:\n  p:\n    override: replace\n    command: sh -c 'for i in 1 2 3; do echo line $i; done; exec sleep 1000'\n",
    )]);
    act(&d, "start", &["p"]);
    let logs = || all_logs(&d, "p");
    wait_for("the service's output", Duration::from_secs(30), || {
        logs().contains("line 3")
    });
    act(&d, "stop", &["p"]);
    let before = logs();
    assert_eq!(before.lines().count(), 3, "{before}");
    for _ in 0..2 {
        let (code, _, stderr) = reexec(&d, &[]);
        assert_eq!(code, 0, "{stderr}");
        assert_eq!(logs(), before);
    }
}

#[test]
fn an_exec_that_fails_after_the_probe_puts_everything_back() {
    let d = Daemon::start_with_env(
        &[("001-base", NUMBERED)],
        &["--hold"],
        &[("COBBLE_TEST_FAULTS", "1")],
    );
    act(&d, "start", &["n"]);
    let pids = children(&d);
    let before = visible_state(&d);
    // It answers the probe as cobble does; its execve fails (see the daemon's fault hook).
    let failing = script(d.scratch(), "exec-fails", &format!("exec {COBBLE} \"$@\""));
    let (code, _, stderr) = reexec(&d, &["--binary", failing.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(
        stderr.starts_with(&format!(
            "error: cannot re-execute \"{}\": not a directory",
            failing.display()
        )),
        "{stderr}"
    );
    // The old program goes on: the service, its output, the state, the listeners.
    assert_eq!(children(&d), pids);
    assert_eq!(service(&d, "n").current, "active");
    assert_eq!(visible_state(&d), before);
    let logs = || all_logs(&d, "n");
    wait_for("the service's last line", Duration::from_secs(120), || {
        logs().contains("[n] n 2000\n")
    });
    let numbers: Vec<u32> = logs()
        .lines()
        .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
        .collect();
    assert_eq!(numbers, (1..=2000).collect::<Vec<_>>());
    // And a re-execution after it works.
    let (code, _, stderr) = reexec(&d, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(children(&d), pids);
}

/// A service that ignores SIGTERM, with a kill-delay a re-execution must not wait out.
const DEAF: &str = "services:\n  s:\n    override: replace\n    command: sh -c 'trap \"\" TERM; while :; do sleep 0.1; done'\n    kill-delay: 6s\n";

/// Asks for `action` on `names` without waiting; the change's ID.
fn act_no_wait(d: &Daemon, action: &str, names: &[&str]) -> String {
    let c = crate::fixture::client(d);
    let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
    crate::fixture::rt()
        .block_on(c.services_action(action, &names))
        .expect("the action")
}

/// The change `id`, once it is ready.
fn ready_change(d: &Daemon, id: &str) -> cobble_client::types::ChangeInfo {
    let c = crate::fixture::client(d);
    let get = || {
        crate::fixture::rt()
            .block_on(c.change(id))
            .expect("the change")
    };
    wait_for("the change to be ready", Duration::from_secs(60), || {
        get().ready
    });
    get()
}

#[test]
fn a_stop_waiting_out_its_kill_delay_completes_under_the_new_program() {
    let d = Daemon::hold(&[("001-base", DEAF)]);
    act(&d, "start", &["s"]);
    let pids = children(&d);
    assert_eq!(pids.len(), 1);
    // The stop waits out the kill-delay: SIGTERM is ignored.
    let id = act_no_wait(&d, "stop", &["s"]);
    let (code, _, stderr) = reexec(&d, &[]);
    assert_eq!(code, 0, "{stderr}");
    // Answered without waiting out the kill-delay: the stop is still in progress, the
    // process still there, followed by the new program.
    let answered = jiff::Timestamp::now();
    let c = crate::fixture::client(&d);
    let during = crate::fixture::rt()
        .block_on(c.change(&id))
        .expect("the change");
    assert_eq!(
        (during.status.as_str(), during.tasks[0].status.as_str()),
        ("Doing", "Doing"),
        "{during:?}"
    );
    assert_eq!(children(&d), pids);
    // The new program sends SIGKILL when the old deadline comes, and completes the change as
    // the old program would have: Done, no line about a restart in its task's log.
    let change = ready_change(&d, &id);
    assert_eq!(change.status, "Done", "{change:?}");
    assert_eq!(change.tasks[0].status, "Done", "{change:?}");
    assert!(change.tasks[0].log.is_empty(), "{change:?}");
    let ready = change.ready_time.as_deref().expect("its ready time");
    assert!(
        epoch_secs(ready) > answered.as_nanosecond() as f64 / 1e9,
        "{change:?}"
    );
    // Not before the kill-delay the stop began with.
    assert!(
        epoch_secs(ready) - epoch_secs(&change.spawn_time) >= 6.0,
        "{change:?}"
    );
    assert_eq!(service(&d, "s").current, "inactive");
    assert!(children(&d).is_empty());
    assert!(!Path::new(&format!("/proc/{}", pids[0])).exists());
}

#[test]
fn a_restart_whose_stop_is_in_progress_completes_with_the_service_running_again() {
    let d = Daemon::hold(&[("001-base", DEAF)]);
    act(&d, "start", &["s"]);
    let pids = children(&d);
    let id = act_no_wait(&d, "restart", &["s"]);
    let (code, _, stderr) = reexec(&d, &[]);
    assert_eq!(code, 0, "{stderr}");
    let c = crate::fixture::client(&d);
    let during = crate::fixture::rt()
        .block_on(c.change(&id))
        .expect("the change");
    let statuses = |change: &cobble_client::types::ChangeInfo| -> Vec<String> {
        change.tasks.iter().map(|t| t.status.clone()).collect()
    };
    assert_eq!(statuses(&during), ["Doing", "Do"], "{during:?}");
    // The stop completes under the new program, which then runs the start.
    let change = ready_change(&d, &id);
    assert_eq!(change.status, "Done", "{change:?}");
    assert_eq!(statuses(&change), ["Done", "Done"], "{change:?}");
    assert!(change.tasks.iter().all(|t| t.log.is_empty()), "{change:?}");
    assert_eq!(service(&d, "s").current, "active");
    let now = children(&d);
    assert_eq!(now.len(), 1);
    assert_ne!(now, pids);
    assert_eq!(details_of(&d, "s").start_count, 2);
    // Its process ends (no kill-delay to wait out when the daemon stops).
    let pid = nix::unistd::Pid::from_raw(now[0] as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL).expect("kill the service");
}

/// The pid `pid` has in its own pid namespace (the last of `NSpid`).
fn pid_in_namespace(pid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("NSpid:"))?;
    line.split_whitespace().last()?.parse().ok()
}

#[test]
fn pid_1_of_a_container_stays_pid_1_with_its_services() {
    let root = tempfile::tempdir().unwrap();
    let pebble = root.path().join("pebble");
    std::fs::create_dir_all(pebble.join("layers")).unwrap();
    std::fs::write(
        pebble.join("layers/001-base.yaml"),
        "services:\n  s:\n    override: replace\n    startup: enabled\n    command: sleep 1000\n",
    )
    .unwrap();
    let mut unshare = std::process::Command::new("unshare")
        .args(["--fork", "--pid", "--mount-proc", COBBLE, "run"])
        .env("PEBBLE", &pebble)
        .env_remove("PEBBLE_SOCKET")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("unshare");
    let children_of = |pid: u32| -> Vec<u32> {
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect()
    };
    let mut daemon = 0;
    wait_for("the daemon as PID 1", Duration::from_secs(30), || {
        daemon = children_of(unshare.id()).first().copied().unwrap_or(0);
        daemon != 0 && pid_in_namespace(daemon) == Some(1)
    });
    wait_for("the service", Duration::from_secs(30), || {
        children_of(daemon).len() == 1
    });
    let service_pid = children_of(daemon);
    let run = |args: &[&str]| {
        std::process::Command::new(COBBLE)
            .args(args)
            .env("PEBBLE", &pebble)
            .env_remove("PEBBLE_SOCKET")
            .output()
            .unwrap()
    };
    for _ in 0..2 {
        let out = run(&["reexec"]);
        assert!(out.status.success(), "{out:?}");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.starts_with("Re-executed daemon (pid 1) as "),
            "{stdout}"
        );
        assert_eq!(children_of(unshare.id()), vec![daemon]);
        assert_eq!(pid_in_namespace(daemon), Some(1));
        assert_eq!(children_of(daemon), service_pid);
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(daemon as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = unshare.try_wait().unwrap() {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the daemon did not stop"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(0));
}

#[test]
fn an_exec_session_that_outlasts_the_wait_is_named_in_the_refusal() {
    let d = Daemon::hold(&[("001-base", LAYER)]);
    let mut session = std::process::Command::new(COBBLE)
        .args(["exec", "sleep", "60"])
        .env("PEBBLE", d.pebble_dir())
        .env_remove("PEBBLE_SOCKET")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    wait_for("the exec session", Duration::from_secs(30), || {
        visible_state(&d)
            .0
            .contains(r#""kind":"exec","summary":"Execute command \"sleep\"","status":"Doing""#)
    });
    let (code, _, stderr) = reexec(&d, &[]);
    assert_eq!(code, 1);
    assert!(
        stderr.starts_with(
            "error: cannot re-execute: changes still in progress after 10s: change 1 (Execute command \"sleep\")"
        ),
        "{stderr}"
    );
    let _ = session.kill();
    let _ = session.wait();
}

#[test]
fn a_completed_oneshot_stays_completed_and_is_not_run_again_by_replan() {
    let root = tempfile::tempdir().unwrap();
    let runs = root.path().join("runs");
    let layer = format!(
        "services:\n  setup:\n    override: replace\n    type: oneshot\n    startup: enabled\n    \
         command: sh -c 'echo ran >> {}'\n",
        runs.display()
    );
    let d = Daemon::hold(&[("001-base", &layer)]);
    assert_eq!(act(&d, "start", &["setup"]).status, "Done");
    let before = service(&d, "setup");
    assert_eq!(before.reason.as_deref(), Some("completed"));
    let completion = details_of(&d, "setup").last_completion;
    assert!(completion.is_some());
    let (code, _, stderr) = reexec(&d, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(service(&d, "setup"), before);
    assert_eq!(details_of(&d, "setup").last_completion, completion);
    // Its completion keeps replan (and autostart) from running it again.
    let change = act(&d, "replan", &[]);
    assert_eq!(change.status, "Done", "{change:?}");
    assert_eq!(service(&d, "setup").reason.as_deref(), Some("completed"));
    assert_eq!(lines(&runs), ["ran"]);
    // A stop forgets it, as before the re-execution.
    act(&d, "stop", &["setup"]);
    assert_eq!(details_of(&d, "setup").last_completion, None);
}

#[test]
fn a_stopped_service_keeps_its_record_and_what_it_last_ran_though_the_plan_changed_it() {
    let d = Daemon::hold(&[(
        "001-base",
        "services:\n  s:\n    override: replace\n    command: sleep 1000\n",
    )]);
    act(&d, "start", &["s"]);
    act(&d, "stop", &["s"]);
    // The plan changes the stopped service: nothing runs it, so nothing holds the swap back.
    add_layer(
        &d,
        "base",
        "services:\n  s:\n    override: merge\n    command: sleep 2000\n",
        true,
    );
    let listed = |d: &Daemon| get(d, "/v1/services");
    let starts = |d: &Daemon| {
        get(d, "/v1/metrics")
            .lines()
            .find(|l| l.starts_with("pebble_service_start_count{service=\"s\"}"))
            .map(str::to_owned)
    };
    let before = listed(&d);
    assert!(before.contains("\"current-since\""), "{before}");
    assert_eq!(
        starts(&d).as_deref(),
        Some("pebble_service_start_count{service=\"s\"} 1")
    );
    let (code, _, stderr) = reexec(&d, &[]);
    assert_eq!(code, 0, "{stderr}");
    // Inactive since its stop, started once: as before, not as never started.
    assert_eq!(listed(&d), before);
    assert_eq!(
        starts(&d).as_deref(),
        Some("pebble_service_start_count{service=\"s\"} 1")
    );
    // It last ran what the plan has changed since: a replan stops it and starts it again
    // with the plan's configuration, as it would have (and as Pebble does).
    let replan = act(&d, "replan", &[]);
    let tasks: Vec<&str> = replan.tasks.iter().map(|t| t.summary.as_str()).collect();
    assert_eq!(
        tasks,
        ["Stop service \"s\"", "Start service \"s\""],
        "{replan:?}"
    );
    assert_eq!(
        starts(&d).as_deref(),
        Some("pebble_service_start_count{service=\"s\"} 2")
    );
    assert_eq!(running_commands(&d), ["sleep\u{0}2000\u{0}"]);
}

/// The daemon's children that have executed their command (a child between its fork and its
/// `execve` still runs the daemon's image, and its command line is the daemon's), with their
/// command lines.
fn executed_children(d: &Daemon) -> Vec<(u32, String)> {
    let image = |pid: u32| std::fs::read_link(format!("/proc/{pid}/exe")).ok();
    let daemon = image(d.pid());
    children(d)
        .into_iter()
        .filter(|&pid| image(pid).is_some_and(|exe| Some(exe) != daemon))
        .filter_map(|pid| {
            let cmdline = std::fs::read_to_string(format!("/proc/{pid}/cmdline")).ok()?;
            Some((pid, cmdline))
        })
        .collect()
}

/// The command lines of the daemon's children that have executed their command.
fn running_commands(d: &Daemon) -> Vec<String> {
    executed_children(d)
        .into_iter()
        .map(|(_, cmdline)| cmdline)
        .collect()
}

#[test]
fn a_running_service_the_plan_changed_goes_on_as_it_ran_until_a_replan() {
    let d = Daemon::hold(&[(
        "001-base",
        "services:\n  s:\n    override: replace\n    command: sleep 1000\n",
    )]);
    act(&d, "start", &["s"]);
    let pids = children(&d);
    add_layer(
        &d,
        "base",
        "services:\n  s:\n    override: merge\n    command: sleep 2000\n",
        true,
    );
    let (code, _, stderr) = reexec(&d, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(children(&d), pids);
    // Killed, it is restarted with what it ran, as the old program would have restarted it:
    // the plan's change waits for a replan.
    let [pid] = pids[..] else { panic!("{pids:?}") };
    let kill = cobble_sys::process::parse_signal("SIGKILL").unwrap();
    cobble_sys::process::signal_pid(pid, kill).unwrap();
    wait_for(
        "the restart",
        Duration::from_secs(30),
        || matches!(executed_children(&d)[..], [(now, _)] if now != pid),
    );
    assert_eq!(running_commands(&d), ["sleep\u{0}1000\u{0}"]);
    let replan = act(&d, "replan", &[]);
    let tasks: Vec<&str> = replan.tasks.iter().map(|t| t.summary.as_str()).collect();
    assert_eq!(
        tasks,
        ["Stop service \"s\"", "Start service \"s\""],
        "{replan:?}"
    );
    assert_eq!(running_commands(&d), ["sleep\u{0}2000\u{0}"]);
}

#[test]
fn a_oneshot_running_completes_under_the_new_program_and_releases_what_waits_for_it() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path();
    let counter = dir.join("runs");
    // Run 1 fails naming a file that does not exist yet, which ends its (hour-long) backoff
    // the moment the test creates it; run 2 completes once the test says so.
    let script = format!(
        "n=$(cat {c} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {c}; \
         if [ $n -lt 2 ]; then cat {d}/go; exit 1; fi; \
         while [ ! -e {d}/finish ]; do sleep 0.05; done",
        c = counter.display(),
        d = dir.display(),
    );
    let layer = format!(
        "services:\n  setup:\n    override: replace\n    type: oneshot\n    startup: enabled\n    \
         backoff-delay: 1h\n    backoff-limit: 1h\n    command: /bin/sh -c '{script}'\n  \
         app:\n    override: replace\n    startup: enabled\n    after: [setup]\n    requires: [setup]\n    \
         command: sh -c 'echo launched >> {l}; exec sleep 1000'\n",
        l = dir.join("launches").display(),
    );
    let d = Daemon::start(&[("001-base", &layer)], &[]);
    wait_for("run 1 to fail", Duration::from_secs(30), || {
        lines(&counter) == ["1"] && service(&d, "setup").current == "backoff"
    });
    wait_for("the autostart to be done", Duration::from_secs(30), || {
        !visible_state(&d).0.contains(r#""ready":false"#)
    });
    std::fs::write(dir.join("go"), "").unwrap();
    wait_for("run 2", Duration::from_secs(30), || {
        lines(&counter) == ["2"] && service(&d, "setup").current == "active"
    });
    assert_eq!(service(&d, "app").current, "waiting");
    let pids = children(&d);
    assert_eq!(pids.len(), 1, "{pids:?}");
    let (code, _, stderr) = reexec(&d, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(children(&d), pids, "the one-shot keeps its run");
    let app = service(&d, "app");
    assert_eq!(app.current, "waiting");
    assert_eq!(
        app.reason.as_deref(),
        Some("waiting for one-shot \"setup\" to complete (running)")
    );
    assert!(lines(&dir.join("launches")).is_empty());
    // Its run ends: completed under the new program, and what waited for it launches.
    std::fs::write(dir.join("finish"), "").unwrap();
    wait_for("the app to launch", Duration::from_secs(30), || {
        service(&d, "app").current == "active" && !lines(&dir.join("launches")).is_empty()
    });
    assert_eq!(service(&d, "setup").reason.as_deref(), Some("completed"));
    assert!(details_of(&d, "setup").last_completion.is_some());
    assert_eq!(lines(&dir.join("launches")), ["launched"]);
    assert_eq!(lines(&counter), ["2"]);
    d.wait_log("Service \"setup\" completed in");
}

#[test]
fn a_service_with_resources_keeps_its_cgroup_and_its_limits() {
    let layer = "services:\n  r:\n    override: replace\n    command: sleep 1000\n    \
                 resources:\n      memory-max: 64M\n      pids-max: 32\n  \
                 q:\n    override: replace\n    command: sleep 1000\n    \
                 resources:\n      pids-max: 16\n";
    let d = Daemon::hold(&[("001-base", layer)]);
    act(&d, "start", &["r"]);
    let pids = children(&d);
    assert_eq!(pids.len(), 1, "{pids:?}");
    let before = details_of(&d, "r");
    let (code, _, stderr) = reexec(&d, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(children(&d), pids, "the service keeps its process");
    let after = details_of(&d, "r");
    assert_eq!(after.resources_not_enforced, before.resources_not_enforced);
    if !before.resources_not_enforced.is_empty() {
        eprintln!(
            "resources not enforced on this machine: {}",
            before.resources_not_enforced
        );
        return;
    }
    // The new program found its cgroup by its path: the same, with the same limits.
    let cgroup = before.usage.expect("usage").cgroup;
    assert!(!cgroup.is_empty());
    assert_eq!(after.usage.expect("usage").cgroup, cgroup);
    let cgroup = Path::new(&cgroup);
    let read = |file: &str| {
        std::fs::read_to_string(cgroup.join(file))
            .unwrap_or_default()
            .trim()
            .to_owned()
    };
    assert_eq!(read("cgroup.procs"), pids[0].to_string());
    assert_eq!(read("pids.max"), "32");
    // A service with resources started by the new program leaves it be.
    act(&d, "start", &["q"]);
    assert_eq!(service(&d, "q").current, "active");
    assert_eq!(service(&d, "r").current, "active");
    assert!(children(&d).contains(&pids[0]), "{:?}", children(&d));
    assert_eq!(read("cgroup.procs"), pids[0].to_string());
    // Its stop ends it and its cgroup goes, as the new program's own would.
    act(&d, "stop", &["r"]);
    wait_for("the run's cgroup to go", Duration::from_secs(10), || {
        !cgroup.exists()
    });
}

#[test]
fn an_exec_that_fails_gives_back_the_services_waiting_and_backing_off() {
    let root = tempfile::tempdir().unwrap();
    let ready = root.path().join("ready");
    let runs = root.path().join("runs");
    let layer = format!(
        "services:\n  w:\n    override: replace\n    requires-paths: [{p}]\n    command: sleep 1000\n  \
         f:\n    override: replace\n    backoff-delay: 3s\n    backoff-limit: 1h\n    \
         command: sh -c 'echo run >> {r}; if [ $(wc -l < {r}) -lt 2 ]; then exit 1; fi; exec sleep 1000'\n",
        p = ready.display(),
        r = runs.display(),
    );
    let d = Daemon::start_with_env(
        &[("001-base", &layer)],
        &["--hold"],
        &[("COBBLE_TEST_FAULTS", "1")],
    );
    act(&d, "start", &["w", "f"]);
    wait_for(
        "the services to wait and back off",
        Duration::from_secs(30),
        || service(&d, "w").current == "waiting" && service(&d, "f").current == "backoff",
    );
    let failing = script(d.scratch(), "exec-fails", &format!("exec {COBBLE} \"$@\""));
    let (code, _, stderr) = reexec(&d, &["--binary", failing.to_str().unwrap()]);
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(service(&d, "w").current, "waiting");
    // The old program acts on them again: the backoff ends in a restart, the path in a start.
    std::fs::write(&ready, "").unwrap();
    wait_for("the services to run", Duration::from_secs(60), || {
        service(&d, "w").current == "active"
            && service(&d, "f").current == "active"
            && lines(&runs).len() == 2
    });
    assert_eq!(details_of(&d, "f").backoff_count, 1);
    assert_eq!(children(&d).len(), 2);
}

#[test]
fn an_exec_that_fails_gives_back_a_restart_whose_stop_is_in_progress() {
    let d = Daemon::start_with_env(
        &[("001-base", DEAF)],
        &["--hold"],
        &[("COBBLE_TEST_FAULTS", "1")],
    );
    act(&d, "start", &["s"]);
    let pids = children(&d);
    let id = act_no_wait(&d, "restart", &["s"]);
    let failing = script(d.scratch(), "exec-fails", &format!("exec {COBBLE} \"$@\""));
    let (code, _, stderr) = reexec(&d, &["--binary", failing.to_str().unwrap()]);
    assert_eq!(code, 1, "{stderr}");
    // The old program goes on with the change it began: the stop, then the start.
    let change = ready_change(&d, &id);
    assert_eq!(change.status, "Done", "{change:?}");
    assert!(
        change
            .tasks
            .iter()
            .all(|t| t.status == "Done" && t.log.is_empty()),
        "{change:?}"
    );
    assert_eq!(service(&d, "s").current, "active");
    let now = children(&d);
    assert_eq!(now.len(), 1);
    assert_ne!(now, pids);
    let pid = nix::unistd::Pid::from_raw(now[0] as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL).expect("kill the service");
}

/// Makes the daemon's state persister panic (see the daemon's fault hook).
fn inject_panic(daemon: &Daemon) {
    let pid = nix::unistd::Pid::from_raw(daemon.pid() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGUSR2).expect("signal the daemon");
}

/// How many times the daemon's log holds `text`.
fn count_in_log(daemon: &Daemon, text: &str) -> usize {
    daemon.log().matches(text).count()
}

#[test]
fn a_panic_re_executes_the_daemon_and_keeps_the_services() {
    let d = Daemon::start_with_env(
        &[("001-base", LAYER)],
        &["--hold"],
        &[("COBBLE_TEST_FAULTS", "1")],
    );
    act(&d, "start", &["s"]);
    Test::daemon(&d)
        .args(&["notify", "example.com/before", "k=v"])
        .any_stdout()
        .run();
    let pids = children(&d);
    assert_eq!(pids.len(), 1, "{pids:?}");
    let before = visible_state(&d);
    let boot = boot_id(&d);
    inject_panic(&d);
    wait_for("the re-execution", DEADLINE, || {
        count_in_log(&d, "Re-executed daemon: cobble") == 1
    });
    let log = d.log();
    assert!(
        log.contains(
            "The state persister stopped: panic at crates/cobble-daemon/src/daemon/reexec.rs:"
        ),
        "{log}"
    );
    assert!(log.contains(": injected fault (SIGUSR2)\n"), "{log}");
    assert!(
        log.contains("Re-executing daemon after a panic, keeping its services."),
        "{log}"
    );
    assert!(!log.contains("Cannot continue"), "{log}");
    // The same process, the same services, the same state.
    assert!(crate::fixture::running(d.pid()));
    assert_eq!(children(&d), pids);
    assert_eq!(service(&d, "s").current, "active");
    assert_eq!(visible_state(&d), before);
    assert_eq!(boot_id(&d), boot);
    // The new program writes the state as any daemon does.
    act(&d, "stop", &["s"]);
    assert!(children(&d).is_empty());
}

#[test]
fn a_panic_re_executes_the_program_running_even_once_replaced_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("cobble");
    std::fs::copy(COBBLE, &copy).unwrap();
    let d = Daemon::start_as(
        &copy,
        &[("001-base", LAYER)],
        &["--hold"],
        &[("COBBLE_TEST_FAULTS", "1")],
    );
    act(&d, "start", &["s"]);
    let pids = children(&d);
    assert_eq!(pids.len(), 1, "{pids:?}");
    // An upgrade in progress replaced the file, here with what could not take over.
    std::fs::remove_file(&copy).unwrap();
    script(dir.path(), "cobble", "exit 1");
    inject_panic(&d);
    wait_for("the re-execution", DEADLINE, || {
        count_in_log(&d, "Re-executed daemon: cobble") == 1
    });
    assert_eq!(children(&d), pids);
    assert_eq!(service(&d, "s").current, "active");
    // The very file it ran, which is no longer on disk.
    assert_eq!(
        std::fs::read_link(format!("/proc/{}/exe", d.pid())).unwrap(),
        PathBuf::from(format!("{} (deleted)", copy.display()))
    );
}

#[test]
fn three_panics_in_a_minute_end_the_daemon_with_its_services() {
    let mut d = Daemon::start_with_env(
        &[("001-base", LAYER)],
        &["--hold"],
        &[("COBBLE_TEST_FAULTS", "1")],
    );
    act(&d, "start", &["s"]);
    let pids = children(&d);
    assert_eq!(pids.len(), 1, "{pids:?}");
    for n in 1..=2 {
        inject_panic(&d);
        wait_for("the re-execution", DEADLINE, || {
            count_in_log(&d, "Re-executed daemon: cobble") == n
        });
        assert_eq!(children(&d), pids);
    }
    inject_panic(&d);
    let code = d.wait_exit(DEADLINE);
    assert_eq!(code, Some(1), "{}", d.log());
    let log = d.log();
    assert!(
        log.contains(
            "Cannot continue: the state persister stopped: 3 panics within 60s; stopping services"
        ),
        "{log}"
    );
    assert_eq!(count_in_log(&d, "Re-executed daemon: cobble"), 2, "{log}");
    assert!(!crate::fixture::running(pids[0]), "the service was stopped");
    // The persister panicked: the state is written last all the same, with the stop.
    let state = std::fs::read_to_string(d.pebble_dir().join(".pebble.state")).unwrap();
    assert!(state.contains("Stop all running services"), "{state}");
}

#[test]
fn a_panic_with_what_cannot_be_handed_over_ends_the_daemon_saying_why() {
    let mut d = Daemon::start_with_env(
        &[("001-base", LAYER)],
        &["--hold"],
        &[("COBBLE_TEST_FAULTS", "1")],
    );
    act(&d, "start", &["s"]);
    let pids = children(&d);
    assert_eq!(pids.len(), 1, "{pids:?}");
    // An exec session that outlasts the wait for changes in progress.
    let mut session = std::process::Command::new(COBBLE)
        .args(["exec", "sleep", "60"])
        .env("PEBBLE", d.pebble_dir())
        .env_remove("PEBBLE_SOCKET")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    wait_for("the exec session", Duration::from_secs(30), || {
        visible_state(&d)
            .0
            .contains(r#""summary":"Execute command \"sleep\"","status":"Doing""#)
    });
    inject_panic(&d);
    assert_eq!(d.wait_exit(DEADLINE), Some(1), "{}", d.log());
    let _ = session.kill();
    let _ = session.wait();
    let log = d.log();
    assert!(
        log.contains(
            "Cannot continue: the state persister stopped: cannot re-execute: changes still in \
             progress after 10s: change 2 (Execute command \"sleep\")"
        ),
        "{log}"
    );
    assert!(!log.contains("Re-executed daemon"), "{log}");
    assert!(!crate::fixture::running(pids[0]), "the service was stopped");
}

/// A new program that fails to take over (`takeover-fails`: with an error, `takeover-panics`:
/// with a panic, once it has adopted everything and serves; see the daemon's fault hook)
/// executes back into the old one, which takes over again and answers with why.
#[test]
fn a_new_program_that_fails_to_take_over_leaves_the_old_one_in_charge() {
    let d = Daemon::start_with_env(
        &[("001-base", NUMBERED)],
        &["--hold"],
        &[("COBBLE_TEST_FAULTS", "1")],
    );
    act(&d, "start", &["n"]);
    let pids = children(&d);
    assert_eq!(pids.len(), 1, "{pids:?}");
    let before = visible_state(&d);
    let boot = boot_id(&d);
    // Each new program's fault, what the old one says of it, and whether the new one could
    // say it executes back (one that dies of a signal cannot: its handler only executes).
    let cases = [
        ("takeover-fails", "injected fault", true),
        (
            "takeover-panics",
            "it panicked at crates/cobble-daemon/src/daemon/reexec.rs:",
            true,
        ),
        ("takeover-segfaults", "it crashed with SIGSEGV", false),
        ("takeover-aborts", "it crashed with SIGABRT", false),
    ];
    let mut said = 0;
    for (n, (name, why, says)) in cases.into_iter().enumerate() {
        let failing = script(d.scratch(), name, &format!("exec {COBBLE} \"$@\""));
        let (code, stdout, stderr) = reexec(&d, &["--binary", failing.to_str().unwrap()]);
        assert_eq!(code, 1, "{stdout}");
        let expected = format!(
            "error: cannot re-execute \"{}\": the new program did not take over: {why}",
            failing.display()
        );
        assert!(stderr.starts_with(&expected), "{stderr}\n{}", d.log());
        // The old program is in charge again: the same process and image, the same
        // services and state, answering.
        assert!(crate::fixture::running(d.pid()));
        assert_eq!(
            std::fs::read_link(format!("/proc/{}/exe", d.pid())).unwrap(),
            Path::new(COBBLE)
        );
        assert_eq!(children(&d), pids);
        assert_eq!(service(&d, "n").current, "active");
        assert_eq!(visible_state(&d), before);
        assert_eq!(boot_id(&d), boot);
        assert_eq!(count_in_log(&d, "the new program did not take over"), n + 1);
        said += usize::from(says);
        assert_eq!(
            count_in_log(&d, "; executing the previous program again."),
            said
        );
    }
    // Every line of the service's output, once, across both.
    let logs = || all_logs(&d, "n");
    wait_for("the service's last line", DEADLINE, || {
        logs().contains("[n] n 2000\n")
    });
    let numbers: Vec<u32> = logs()
        .lines()
        .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
        .collect();
    assert_eq!(numbers, (1..=2000).collect::<Vec<_>>());
    // And a re-execution after it works, as does the supervision.
    let (code, _, stderr) = reexec(&d, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(children(&d), pids);
    let change = act(&d, "stop", &["n"]);
    assert_eq!(change.status, "Done", "{change:?}");
}

/// How long a re-execution after a panic may take to be seen: the product's bound on a
/// re-execution (the drain and the change wait) with room.
const DEADLINE: Duration = Duration::from_secs(60);

/// The inode of the socket `pid` has open as `fd` (`socket:[N]`).
fn socket_inode(pid: u32, fd: u32) -> String {
    let link = std::fs::read_link(format!("/proc/{pid}/fd/{fd}")).expect("fd open");
    let text = link.to_string_lossy().into_owned();
    assert!(text.starts_with("socket:["), "{text}");
    text
}

/// Whether `pid` has the socket `inode` (`socket:[N]`) open.
fn holds_socket(pid: u32, inode: &str) -> bool {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(Result::ok)
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .any(|link| link.to_string_lossy() == inode)
}

/// The reason `cobble services` gives for `name` (with what it said on its notify socket).
fn reason(d: &Daemon, name: &str) -> String {
    service(d, name).reason.unwrap_or_default()
}

/// A `readiness: notify` service `talk` that says READY=1 once, then a STATUS= every 10 ms
/// until `dir/stop` exists, writing each send's failure to `dir/failed`, then a last STATUS=
/// that counts them; its layer.
fn talker(dir: &Path) -> String {
    let (stop, failed) = (dir.join("stop"), dir.join("failed"));
    // READY=1 once, then a STATUS= every 10 ms until told to stop, each send's failure
    // written down, then a last STATUS= that counts them.
    let talker = script(
        dir,
        "talker.py",
        &format!(
            "exec python3 -c \"$(cat <<'EOF'\n\
             import os, socket, time\n\
             address = os.environ['NOTIFY_SOCKET']\n\
             if address.startswith('@'):\n    address = '\\0' + address[1:]\n\
             s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)\n\
             s.sendto(b'READY=1\\nSTATUS=ready', address)\n\
             n = 0\n\
             while not os.path.exists('{stop}'):\n    \
                 n += 1\n    \
                 try:\n        \
                     s.sendto(b'STATUS=talking %d' % n, address)\n    \
                 except OSError as e:\n        \
                     open('{failed}', 'a').write('%d %s\\n' % (n, e))\n    \
                 time.sleep(0.01)\n\
             s.sendto(b'STATUS=done after %d' % n, address)\n\
             while True:\n    \
                 time.sleep(1)\n\
             EOF\n)\"",
            stop = stop.display(),
            failed = failed.display()
        ),
    );
    format!(
        "services:\n  talk:\n    override: replace\n    command: {}\n    readiness: notify\n",
        talker.display()
    )
}

#[test]
fn a_notify_service_stays_ready_and_its_socket_hears_everything_sent_during_the_swap() {
    let dir = tempfile::tempdir().unwrap();
    let (stop, failed) = (dir.path().join("stop"), dir.path().join("failed"));
    let layer = talker(dir.path());
    let d = Daemon::hold(&[("001-base", &layer)]);
    let change = act(&d, "start", &["talk"]);
    assert_eq!(change.status, "Done", "{change:?}");
    let pids = children(&d);
    let since = service(&d, "talk").current_since;
    wait_for("its status", Duration::from_secs(30), || {
        reason(&d, "talk").contains("says \"talking")
    });
    for _ in 0..3 {
        let (code, _, stderr) = reexec(&d, &[]);
        assert_eq!(code, 0, "{stderr}");
        // Ready still: the same run, active since it said so, nothing waited for again.
        assert_eq!(children(&d), pids);
        let after = service(&d, "talk");
        assert_eq!(after.current, "active");
        assert_eq!(after.current_since, since);
    }
    // What it says after the swaps is heard, and nothing it sent was refused.
    std::fs::write(&stop, "").unwrap();
    wait_for("its last status", Duration::from_secs(30), || {
        reason(&d, "talk").contains("says \"done after")
    });
    assert!(
        !failed.exists(),
        "sends refused: {}",
        std::fs::read_to_string(&failed).unwrap_or_default()
    );
    assert_eq!(children(&d), pids);
}

#[test]
fn a_watchdog_keeps_its_deadline_across_the_swap() {
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str| dir.path().join(name);
    // Pings every 0.2 s until told to stop, counting them in `pinged`; then writes the time
    // of its last ping and goes on running. Each run is counted in `runs`; SIGABRT writes
    // the time to `aborted`.
    let pinger = script(
        dir.path(),
        "pinger.py",
        &format!(
            "exec python3 -c \"$(cat <<'EOF'\n\
             import os, signal, socket, time\n\
             open('{runs}', 'a').write('run\\n')\n\
             def aborted(signum, frame):\n    \
                 open('{aborted}', 'a').write('%f\\n' % time.time())\n    \
                 os._exit(134)\n\
             signal.signal(signal.SIGABRT, aborted)\n\
             address = os.environ['NOTIFY_SOCKET']\n\
             if address.startswith('@'):\n    address = '\\0' + address[1:]\n\
             s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)\n\
             s.sendto(b'READY=1', address)\n\
             n = 0\n\
             while not os.path.exists('{stop}'):\n    \
                 time.sleep(0.2)\n    \
                 s.sendto(b'WATCHDOG=1', address)\n    \
                 n += 1\n    \
                 open('{pinged}', 'w').write('%d\\n' % n)\n\
             open('{last}', 'a').write('%f\\n' % time.time())\n\
             while True:\n    \
                 time.sleep(1)\n\
             EOF\n)\"",
            runs = file("runs").display(),
            aborted = file("aborted").display(),
            stop = file("stop").display(),
            pinged = file("pinged").display(),
            last = file("last-ping").display(),
        ),
    );
    let layer = format!(
        "services:\n  wd:\n    override: replace\n    command: {}\n    readiness: notify\n    \
         watchdog: 6s\n    kill-delay: 1s\n    backoff-delay: 100ms\n",
        pinger.display()
    );
    let d = Daemon::hold(&[("001-base", &layer)]);
    let change = act(&d, "start", &["wd"]);
    assert_eq!(change.status, "Done", "{change:?}");
    let pids = children(&d);
    let pinged = || {
        lines(&file("pinged"))
            .first()
            .and_then(|n| n.parse::<u32>().ok())
            .unwrap_or(0)
    };
    // Pinging through the swaps: never acted on, for longer than an interval after them.
    for _ in 0..3 {
        let (code, _, stderr) = reexec(&d, &[]);
        assert_eq!(code, 0, "{stderr}");
        assert_eq!(children(&d), pids);
    }
    let then = pinged();
    wait_for("two intervals of pings", Duration::from_secs(120), || {
        pinged() >= then + 60
    });
    assert!(!file("aborted").exists(), "aborted while it pinged");
    assert_eq!(children(&d), pids);
    assert_eq!(lines(&file("runs")).len(), 1);
    // It stops pinging, then the daemon is re-executed: the new program acts on the
    // deadline its last ping set, as the old one would have.
    std::fs::write(file("stop"), "").unwrap();
    wait_for("its last ping", Duration::from_secs(30), || {
        file("last-ping").exists()
    });
    let (code, _, stderr) = reexec(&d, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(children(&d), pids, "handed over before its deadline");
    wait_for("SIGABRT", Duration::from_secs(60), || {
        !lines(&file("aborted")).is_empty()
    });
    wait_for("the restart", Duration::from_secs(60), || {
        lines(&file("runs")).len() == 2 && service(&d, "wd").current == "active"
    });
    let log = d.log();
    let swapped = log
        .rfind("Re-executed daemon: cobble")
        .expect("re-executed");
    let timeout = log
        .find("Service \"wd\" watchdog timeout after 6s, last ping")
        .unwrap_or_else(|| panic!("{log}"));
    assert!(swapped < timeout, "acted on by the new program: {log}");
    // Not before the interval its last ping started had run out.
    let last_ping = times(&file("last-ping"))[0];
    let aborted = times(&file("aborted"))[0];
    assert!(
        aborted - last_ping >= 5.9,
        "aborted {aborted}, last ping {last_ping}: {log}"
    );
}

#[test]
fn held_sockets_are_the_same_open_sockets_after_the_swap() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let address: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let record = dir.path().join("record");
    // Accepts on fd 3 and answers each connection with its pid; each run writes
    // `pid LISTEN_FDS LISTEN_FDNAMES` to `record`.
    let server = script(
        dir.path(),
        "server.py",
        &format!(
            "exec python3 -c \"$(cat <<'EOF'\n\
             import os, socket\n\
             env = os.environ\n\
             open('{record}', 'a').write('%d %s %s\\n' % (os.getpid(), env.get('LISTEN_FDS'), env.get('LISTEN_FDNAMES')))\n\
             s = socket.socket(fileno=3)\n\
             while True:\n    \
                 c, _ = s.accept()\n    \
                 c.recv(100)\n    \
                 c.sendall(b'%d\\n' % os.getpid())\n    \
                 c.close()\n\
             EOF\n)\"",
            record = record.display()
        ),
    );
    let layer = format!(
        "services:\n  web:\n    override: replace\n    command: {}\n    sockets:\n      \
         http:\n        listen: 127.0.0.1:{port}\n",
        server.display()
    );
    let d = Daemon::hold(&[("001-base", &layer)]);
    let connect = move || {
        let mut stream =
            std::net::TcpStream::connect(address).expect("the kernel accepts for a held socket");
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        stream.write_all(b"hello\n").unwrap();
        stream
    };
    let answer = move |mut stream: std::net::TcpStream| -> u32 {
        let mut text = String::new();
        stream.read_to_string(&mut text).expect("an answer");
        text.trim().parse().unwrap_or_else(|_| panic!("{text:?}"))
    };
    act(&d, "start", &["web"]);
    let pids = children(&d);
    let inode = socket_inode(pids[0], 3);
    assert!(holds_socket(d.pid(), &inode));
    // Clients that come during the swap wait in the socket's queue and are served.
    let swapping = Arc::new(AtomicBool::new(true));
    let clients = {
        let swapping = swapping.clone();
        std::thread::spawn(move || {
            let mut answers = Vec::new();
            while swapping.load(Ordering::SeqCst) {
                answers.push(answer(connect()));
            }
            answers
        })
    };
    let (code, _, stderr) = reexec(&d, &[]);
    swapping.store(false, Ordering::SeqCst);
    assert_eq!(code, 0, "{stderr}");
    let answers = clients.join().unwrap();
    assert!(!answers.is_empty());
    assert!(answers.iter().all(|pid| *pid == pids[0]), "{answers:?}");
    assert_eq!(children(&d), pids);
    assert!(
        holds_socket(d.pid(), &inode),
        "the new program holds the same socket"
    );
    // A client that comes while the service is stopped waits through a swap for the next run.
    act(&d, "stop", &["web"]);
    let waiting = connect();
    let (code, _, stderr) = reexec(&d, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert!(holds_socket(d.pid(), &inode));
    act(&d, "start", &["web"]);
    let run = children(&d);
    assert_eq!(run.len(), 1);
    assert_ne!(run, pids);
    assert_eq!(answer(waiting), run[0]);
    assert_eq!(
        socket_inode(run[0], 3),
        inode,
        "the restarted run gets the same socket"
    );
    let runs = lines(&record);
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert_eq!(runs[1], format!("{} 1 http", run[0]));
}

/// The daemon's descriptors above stderr that are kept across `execve` (not close-on-exec).
fn inherited_fds(pid: u32) -> Vec<String> {
    let mut fds: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fdinfo"))
        .unwrap()
        .filter_map(Result::ok)
        .filter(|fd| {
            fd.file_name()
                .to_str()
                .and_then(|n| n.parse::<u32>().ok())
                .is_some_and(|n| n > 2)
        })
        .filter_map(|fd| {
            let info = std::fs::read_to_string(fd.path()).ok()?;
            let flags = info.lines().find_map(|l| l.strip_prefix("flags:"))?;
            let flags = u32::from_str_radix(flags.trim(), 8).ok()?;
            // O_CLOEXEC
            (flags & 0o2000000 == 0).then(|| fd.file_name().to_string_lossy().into_owned())
        })
        .collect();
    fds.sort();
    fds
}

#[test]
fn an_exec_that_fails_gives_back_the_notify_and_held_sockets() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let layer = format!(
        "{}  web:\n    override: replace\n    command: sleep 1000\n    sockets:\n      \
         http:\n        listen: 127.0.0.1:{port}\n",
        talker(dir.path())
    );
    let d = Daemon::start_with_env(
        &[("001-base", &layer)],
        &["--hold"],
        &[("COBBLE_TEST_FAULTS", "1")],
    );
    act(&d, "start", &["talk"]);
    let pids = children(&d);
    // What the daemon was started with (a test runner's descriptors) aside.
    let inherited = inherited_fds(d.pid());
    let failing = script(d.scratch(), "exec-fails", &format!("exec {COBBLE} \"$@\""));
    let (code, _, stderr) = reexec(&d, &["--binary", failing.to_str().unwrap()]);
    assert_eq!(code, 1, "{stderr}");
    // Every descriptor it was to hand over is its own again, close-on-exec.
    assert_eq!(inherited_fds(d.pid()), inherited);
    assert_eq!(children(&d), pids);
    // The notify socket is read again, and the held socket still queues clients.
    std::net::TcpStream::connect(("127.0.0.1", port)).expect("still held");
    std::fs::write(dir.path().join("stop"), "").unwrap();
    wait_for("its last status", Duration::from_secs(30), || {
        reason(&d, "talk").contains("says \"done after")
    });
    assert!(!dir.path().join("failed").exists());
    // And a re-execution after it hands them over.
    let (code, _, stderr) = reexec(&d, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(children(&d), pids);
    assert_eq!(service(&d, "talk").current, "active");
}

#[test]
fn forwarded_lines_go_out_once_each_across_the_swap() {
    let syslog = crate::forward::SyslogReceiver::start();
    let layer = format!(
        "{NUMBERED}log-targets:\n  central:\n    override: replace\n    type: syslog\n    \
         location: tcp://127.0.0.1:{}\n    services: [all]\n",
        syslog.tcp_port
    );
    let d = Daemon::start_with_env(
        &[("001-base", &layer)],
        &["--hold"],
        &[("COBBLE_TEST_FAULTS", "1")],
    );
    act(&d, "start", &["n"]);
    let pids = children(&d);
    for _ in 0..4 {
        let (code, _, stderr) = reexec(&d, &[]);
        assert_eq!(code, 0, "{stderr}");
        assert_eq!(children(&d), pids);
    }
    // Then a new program that fails to take over (the lines it was handed go back with the
    // handover, none of them sent), and last an exec that fails: the old program's targets
    // send again.
    for fault in ["takeover-fails", "exec-fails"] {
        let failing = script(d.scratch(), fault, &format!("exec {COBBLE} \"$@\""));
        let (code, _, stderr) = reexec(&d, &["--binary", failing.to_str().unwrap()]);
        assert_eq!(code, 1, "{stderr}");
    }
    let numbers = || -> Vec<u32> {
        syslog
            .tcp_messages
            .lock()
            .unwrap()
            .iter()
            .filter_map(|m| m.rsplit_once(" n ")?.1.trim().parse().ok())
            .collect()
    };
    wait_for("the last line forwarded", Duration::from_secs(120), || {
        numbers().contains(&2000)
    });
    // Every line once, in order: none lost with a swap, none sent again by the new program.
    assert_eq!(numbers(), (1..=2000).collect::<Vec<_>>());
    // And the target's counters went on across the swaps: every line counted once.
    let metric = |name: &str| {
        get(&d, "/v1/metrics")
            .lines()
            .find(|l| l.starts_with(&format!("{name}{{target=\"central\"}}")))
            .map(str::to_owned)
    };
    wait_for("every line counted", Duration::from_secs(30), || {
        metric("cobble_log_forward_sent_total").is_some_and(|l| l.ends_with(" 2000"))
    });
    assert_eq!(
        metric("cobble_log_forward_dropped_total").as_deref(),
        Some("cobble_log_forward_dropped_total{target=\"central\"} 0")
    );
}

#[test]
fn a_notify_service_still_starting_is_handed_over_and_its_start_completes_when_it_is_ready() {
    let dir = tempfile::tempdir().unwrap();
    // Says READY=1 only once told to: the start's change waits for it.
    let go = dir.path().join("go");
    let late = script(
        dir.path(),
        "late.py",
        &format!(
            "exec python3 -c \"$(cat <<'EOF'\n\
             import os, socket, time\n\
             address = os.environ['NOTIFY_SOCKET']\n\
             if address.startswith('@'):\n    address = '\\0' + address[1:]\n\
             while not os.path.exists('{go}'):\n    \
                 time.sleep(0.2)\n\
             socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).sendto(b'READY=1\\nSTATUS=up', address)\n\
             while True:\n    \
                 time.sleep(1)\n\
             EOF\n)\"",
            go = go.display()
        ),
    );
    let layer = format!(
        "services:\n  late:\n    override: replace\n    command: {}\n    readiness: notify\n",
        late.display()
    );
    let d = Daemon::hold(&[("001-base", &layer)]);
    Test::daemon(&d)
        .args(&["start", "--no-wait", "late"])
        .any_stdout()
        .run();
    wait_for("its process", Duration::from_secs(30), || {
        children(&d).len() == 1
    });
    let pids = children(&d);
    let c = crate::fixture::client(&d);
    let starts = crate::fixture::rt()
        .block_on(c.changes(cobble_client::ChangeSelector::InProgress, None))
        .expect("the changes");
    assert_eq!(starts.len(), 1, "{starts:?}");
    let id = starts[0].id.clone();
    // The service cannot be ready before `go` exists: the start is handed over waiting.
    let (code, _, stderr) = reexec(&d, &[]);
    assert_eq!(code, 0, "{stderr}");
    let during = crate::fixture::rt()
        .block_on(c.change(&id))
        .expect("the change");
    assert_eq!(during.status, "Doing", "{during:?}");
    assert_eq!(service(&d, "late").current, "starting");
    std::fs::write(&go, "").unwrap();
    let change = ready_change(&d, &id);
    assert_eq!(change.status, "Done", "{change:?}");
    assert!(change.tasks[0].log.is_empty(), "{change:?}");
    let log = d.log();
    let swapped = log.find("Re-executed daemon").expect("re-executed");
    let ready = log.find("Service \"late\" is ready").expect("ready");
    assert!(swapped < ready, "{log}");
    assert_eq!(children(&d), pids);
    assert_eq!(service(&d, "late").current, "active");
    assert!(
        reason(&d, "late").contains("says \"up\""),
        "{:?}",
        reason(&d, "late")
    );
}

#[test]
fn a_start_handed_over_that_fails_under_the_new_program_fails_its_change_as_it_would_have() {
    let dir = tempfile::tempdir().unwrap();
    // Never says READY=1: once told to, it says why and exits.
    let go = dir.path().join("go");
    let layer = format!(
        "services:\n  late:\n    override: replace\n    readiness: notify\n    \
         on-failure: ignore\n    \
         command: sh -c 'while [ ! -e {go} ]; do sleep 0.1; done; echo giving up; exit 3'\n",
        go = go.display()
    );
    let d = Daemon::hold(&[("001-base", &layer)]);
    let id = act_no_wait(&d, "start", &["late"]);
    wait_for("its process", Duration::from_secs(30), || {
        children(&d).len() == 1
    });
    let (code, _, stderr) = reexec(&d, &[]);
    assert_eq!(code, 0, "{stderr}");
    let c = crate::fixture::client(&d);
    let during = crate::fixture::rt()
        .block_on(c.change(&id))
        .expect("the change");
    assert_eq!(during.status, "Doing", "{during:?}");
    std::fs::write(&go, "").unwrap();
    let change = ready_change(&d, &id);
    assert_eq!(change.status, "Error", "{change:?}");
    let log = change.tasks[0].log.join("\n");
    assert!(log.contains("Most recent service output:"), "{log}");
    assert!(log.contains("giving up"), "{log}");
    assert!(!log.contains("Daemon restarted"), "{log}");
}

#[test]
fn a_start_waiting_for_a_oneshot_it_requires_completes_under_the_new_program() {
    let dir = tempfile::tempdir().unwrap();
    let go = dir.path().join("go");
    let layer = format!(
        "services:\n  prep:\n    override: replace\n    type: oneshot\n    \
         command: sh -c 'while [ ! -e {go} ]; do sleep 0.1; done'\n  \
         app:\n    override: replace\n    requires: [prep]\n    after: [prep]\n    \
         command: sleep 1000\n",
        go = go.display()
    );
    let d = Daemon::hold(&[("001-base", &layer)]);
    let id = act_no_wait(&d, "start", &["app"]);
    wait_for("the one-shot's run", Duration::from_secs(30), || {
        children(&d).len() == 1 && service(&d, "app").current == "waiting"
    });
    let (code, _, stderr) = reexec(&d, &[]);
    assert_eq!(code, 0, "{stderr}");
    let c = crate::fixture::client(&d);
    let during = crate::fixture::rt()
        .block_on(c.change(&id))
        .expect("the change");
    let statuses: Vec<&str> = during.tasks.iter().map(|t| t.status.as_str()).collect();
    assert_eq!(statuses, ["Doing", "Doing"], "{during:?}");
    // The one-shot completes under the new program, and what waits for it starts.
    std::fs::write(&go, "").unwrap();
    let change = ready_change(&d, &id);
    assert_eq!(change.status, "Done", "{change:?}");
    assert!(
        change
            .tasks
            .iter()
            .all(|t| t.status == "Done" && t.log.is_empty()),
        "{change:?}"
    );
    assert_eq!(service(&d, "app").current, "active");
    assert_eq!(children(&d).len(), 1);
}

/// A Loki receiver that holds each request while `hold` is set, then answers 204; records
/// every line it was sent (`lines`), and counts the requests that arrived.
struct HoldingReceiver {
    port: u16,
    hold: Arc<AtomicBool>,
    arrived: Arc<AtomicU64>,
    lines: Arc<std::sync::Mutex<Vec<String>>>,
}

fn holding_receiver() -> HoldingReceiver {
    use std::io::BufRead;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let hold = Arc::new(AtomicBool::new(true));
    let arrived = Arc::new(AtomicU64::new(0));
    let lines = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (h, a, l) = (hold.clone(), arrived.clone(), lines.clone());
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let (hold, arrived, lines) = (h.clone(), a.clone(), l.clone());
            std::thread::spawn(move || {
                let mut writer = conn.try_clone().unwrap();
                let mut reader = std::io::BufReader::new(conn);
                loop {
                    let mut length = 0;
                    let mut first = true;
                    loop {
                        let mut header = String::new();
                        if reader.read_line(&mut header).unwrap_or(0) == 0 {
                            return;
                        }
                        let header = header.trim_end();
                        if header.is_empty() && !first {
                            break;
                        }
                        first = false;
                        if let Some((name, value)) = header.split_once(':')
                            && name.eq_ignore_ascii_case("content-length")
                        {
                            length = value.trim().parse().unwrap();
                        }
                    }
                    let mut body = vec![0; length];
                    if reader.read_exact(&mut body).is_err() {
                        return;
                    }
                    arrived.fetch_add(1, Ordering::SeqCst);
                    wait_for("the hold released", Duration::from_secs(60), || {
                        !hold.load(Ordering::SeqCst)
                    });
                    let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
                    for stream in json["streams"].as_array().unwrap() {
                        for value in stream["values"].as_array().unwrap() {
                            lines
                                .lock()
                                .unwrap()
                                .push(value[1].as_str().unwrap().to_owned());
                        }
                    }
                    if writer
                        .write_all(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n")
                        .is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    HoldingReceiver {
        port,
        hold,
        arrived,
        lines,
    }
}

#[test]
fn a_swap_that_waits_for_a_log_target_acts_on_no_watchdog_of_a_service_that_pings() {
    let dir = tempfile::tempdir().unwrap();
    let HoldingReceiver {
        port,
        hold,
        arrived,
        lines: received,
    } = holding_receiver();
    let pinged = dir.path().join("pinged");
    let aborted = dir.path().join("aborted");
    // Pings every 0.2 s and writes a numbered line with each.
    let pinger = script(
        dir.path(),
        "pinger.py",
        &format!(
            "exec python3 -c \"$(cat <<'EOF'\n\
             import os, signal, socket, sys, time\n\
             def aborted(signum, frame):\n    \
                 open('{aborted}', 'a').write('aborted\\n')\n    \
                 os._exit(134)\n\
             signal.signal(signal.SIGABRT, aborted)\n\
             address = os.environ['NOTIFY_SOCKET']\n\
             if address.startswith('@'):\n    address = '\\0' + address[1:]\n\
             s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)\n\
             s.sendto(b'READY=1', address)\n\
             n = 0\n\
             while True:\n    \
                 time.sleep(0.2)\n    \
                 s.sendto(b'WATCHDOG=1', address)\n    \
                 n += 1\n    \
                 print('ping %d' % n, flush=True)\n    \
                 open('{pinged}', 'w').write('%d\\n' % n)\n\
             EOF\n)\"",
            aborted = aborted.display(),
            pinged = pinged.display(),
        ),
    );
    let layer = format!(
        "services:\n  wd:\n    override: replace\n    command: {}\n    readiness: notify\n    \
         watchdog: 2s\nlog-targets:\n  loki:\n    override: replace\n    type: loki\n    \
         location: http://127.0.0.1:{port}/loki/api/v1/push\n    services: [all]\n",
        pinger.display()
    );
    let d = Daemon::hold(&[("001-base", &layer)]);
    act(&d, "start", &["wd"]);
    let pids = children(&d);
    let pings = || {
        lines(&pinged)
            .first()
            .and_then(|n| n.parse::<u32>().ok())
            .unwrap_or(0)
    };
    // A request to the target is under way and held when the re-execution is asked.
    wait_for("a request held", Duration::from_secs(30), || {
        arrived.load(Ordering::SeqCst) > 0
    });
    let asked = std::thread::spawn({
        let pebble = d.pebble_dir();
        move || {
            std::process::Command::new(COBBLE)
                .arg("reexec")
                .env("PEBBLE", pebble)
                .env_remove("PEBBLE_SOCKET")
                .output()
                .expect("run cobble reexec")
        }
    });
    // Held for longer than the watchdog's interval (2 s), within the request's timeout.
    let then = pings();
    wait_for(
        "more than an interval of pings",
        Duration::from_secs(30),
        || pings() >= then + 12,
    );
    assert!(!asked.is_finished(), "the swap waits for the request");
    hold.store(false, Ordering::SeqCst);
    let out = asked.join().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let then = pings();
    wait_for("pings after the swap", Duration::from_secs(30), || {
        pings() >= then + 12
    });
    assert!(!aborted.exists(), "{}", d.log());
    assert_eq!(children(&d), pids);
    // Every line the target was sent, once, in order.
    let last = pings();
    wait_for("the lines forwarded", Duration::from_secs(30), || {
        received.lock().unwrap().contains(&format!("ping {last}"))
    });
    let numbers: Vec<u32> = received
        .lock()
        .unwrap()
        .iter()
        .filter_map(|l| l.strip_prefix("ping ")?.parse().ok())
        .collect();
    assert_eq!(numbers, (1..=numbers.len() as u32).collect::<Vec<_>>());
}

/// `GET /v1/checks`, each check's entry by name.
fn checks_listed(daemon: &Daemon) -> serde_json::Map<String, serde_json::Value> {
    let value: serde_json::Value = serde_json::from_str(&get(daemon, "/v1/checks")).unwrap();
    value["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["name"].as_str().unwrap().to_owned(), c.clone()))
        .collect()
}

/// Runs check `name` now (`POST /v1/checks/refresh`).
fn refresh(daemon: &Daemon, name: &str) {
    let (status, body) = raw(
        daemon,
        cobble_client::Method::POST,
        "/v1/checks/refresh",
        Some(&format!(r#"{{"name":"{name}"}}"#)),
    );
    assert_eq!(status, 200, "{body}");
}

/// The change `id` as `GET /v1/changes/{id}` shows it.
fn change(daemon: &Daemon, id: &str) -> serde_json::Value {
    let body = get(daemon, &format!("/v1/changes/{id}"));
    serde_json::from_str::<serde_json::Value>(&body).unwrap()["result"].clone()
}

#[test]
fn checks_keep_their_status_counters_and_changes_through_a_reexec() {
    let port = free_port();
    let http = format!("127.0.0.1:{port}");
    let mut d = Daemon::start(&[("001-base", "")], &["--hold", "--http", &http]);
    let ok = d.scratch().join("ok");
    // Long periods: the checks run when refreshed, and nothing moves between two listings.
    let layer = format!(
        "checks:\n\
         \x20 exec:\n    override: replace\n    period: 1h\n    threshold: 3\n    exec:\n      command: test -e {ok}\n\
         \x20 tcp:\n    override: replace\n    level: alive\n    period: 1h\n    tcp:\n      port: {port}\n      host: 127.0.0.1\n\
         \x20 stopped:\n    override: replace\n    period: 1h\n    exec:\n      command: \"true\"\n\
         \x20 disabled:\n    override: replace\n    startup: disabled\n    period: 1h\n    exec:\n      command: \"true\"\n\
         \x20 ticking:\n    override: replace\n    period: 1s\n    exec:\n      command: \"true\"\n",
        ok = ok.display()
    );
    std::fs::write(d.pebble_dir().join("layers/002-checks.yaml"), layer).unwrap();
    d.stop();
    d.restart(&["--hold", "--http", &http]);
    refresh(&d, "tcp");
    refresh(&d, "tcp");
    refresh(&d, "exec");
    refresh(&d, "exec");
    act_checks(&d, "stop", "stopped");
    wait_check_runs(&d, "ticking", 2);
    let before = checks_listed(&d);
    assert_eq!(before["exec"]["status"], "up");
    assert_eq!(before["exec"]["failures"], 2);
    assert_eq!(before["tcp"]["successes"], 2);
    assert_eq!(before["stopped"]["status"], "inactive");
    assert_eq!(before["disabled"]["status"], "inactive");
    let perform = before["exec"]["change-id"].as_str().unwrap().to_owned();
    let log = change(&d, &perform)["tasks"][0]["log"].clone();
    assert_eq!(log.as_array().unwrap().len(), 2, "{log}");

    let (code, _, stderr) = reexec(&d, &[]);
    assert_eq!(code, 0, "{stderr}");
    let after = checks_listed(&d);
    for name in ["exec", "tcp", "stopped", "disabled"] {
        assert_eq!(after[name], before[name], "check {name}");
    }
    // The ticking check goes on in its change, its successes counted on.
    assert_eq!(
        after["ticking"]["change-id"],
        before["ticking"]["change-id"]
    );
    assert!(
        after["ticking"]["successes"].as_u64() >= before["ticking"]["successes"].as_u64(),
        "{after:?}"
    );
    wait_check_runs(&d, "ticking", 2);
    assert_eq!(
        checks_listed(&d)["ticking"]["change-id"],
        before["ticking"]["change-id"]
    );
    // The same change, in progress, its log kept.
    let kept = change(&d, &perform);
    assert_eq!(kept["status"], "Doing", "{kept}");
    assert_eq!(kept["tasks"][0]["log"], log);

    // A third failure is the threshold: that change fails, a recover-check change follows.
    refresh(&d, "exec");
    let down = checks_listed(&d)["exec"].clone();
    assert_eq!(down["status"], "down", "{down}");
    assert_eq!(down["prev-change-id"].as_str(), Some(perform.as_str()));
    assert_eq!(change(&d, &perform)["status"], "Error");
    let recover = down["change-id"].as_str().unwrap().to_owned();
    assert_eq!(change(&d, &recover)["kind"], "recover-check");
    // Handed over again while recovering, it recovers under the next program.
    let (code, _, stderr) = reexec(&d, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(checks_listed(&d)["exec"], down);
    std::fs::write(&ok, "").unwrap();
    refresh(&d, "exec");
    let up = checks_listed(&d)["exec"].clone();
    assert_eq!(up["status"], "up", "{up}");
    assert_eq!(up["prev-change-id"].as_str(), Some(recover.as_str()));
    assert_eq!(change(&d, &recover)["status"], "Done");
    // Stopped and disabled checks stayed inactive, and start as ever.
    act_checks(&d, "start", "stopped");
    assert_eq!(checks_listed(&d)["stopped"]["status"], "up");
}

/// `POST /v1/checks` with `action` for check `name`.
fn act_checks(daemon: &Daemon, action: &str, name: &str) {
    let (status, body) = raw(
        daemon,
        cobble_client::Method::POST,
        "/v1/checks",
        Some(&format!(r#"{{"action":"{action}","checks":["{name}"]}}"#)),
    );
    assert_eq!(status, 200, "{body}");
}

#[test]
fn a_check_that_fails_after_a_reexec_restarts_its_service() {
    let mut d = Daemon::hold(&[("001-base", "")]);
    let ok = d.scratch().join("ok");
    std::fs::write(&ok, "").unwrap();
    let layer = format!(
        "services:\n\
         \x20 s:\n    override: replace\n    command: sleep 1000\n    on-check-failure:\n      chk: restart\n\
         \x20 r:\n    override: replace\n    command: sleep 1000\n    requires-checks: [chk]\n\
         checks:\n\
         \x20 chk:\n    override: replace\n    period: 1h\n    threshold: 1\n    exec:\n      command: test -e {ok}\n",
        ok = ok.display()
    );
    std::fs::write(d.pebble_dir().join("layers/002-check.yaml"), layer).unwrap();
    d.stop();
    d.restart(&["--hold"]);
    refresh(&d, "chk");
    act(&d, "start", &["s", "r"]);
    let pids = children(&d);
    assert_eq!(pids.len(), 2, "{pids:?}");
    let (code, _, stderr) = reexec(&d, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(children(&d), pids, "both services handed over");
    std::fs::remove_file(&ok).unwrap();
    refresh(&d, "chk");
    // s restarts: one of the two processes is new; r, which only waits for the check to
    // start, keeps its own.
    wait_for("s restarted by its check", Duration::from_secs(60), || {
        let now = children(&d);
        service(&d, "s").current == "active"
            && now.len() == 2
            && now.iter().filter(|p| pids.contains(p)).count() == 1
    });
    d.wait_log("Service \"s\" on-check-failure action is \"restart\"");
    assert_eq!(service(&d, "r").current, "active");
    // Handed over while its check stays down after a restart: the check's next failure
    // fires again, and s is restarted again under the next program.
    let pids = children(&d);
    let (code, _, stderr) = reexec(&d, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(children(&d), pids);
    assert_eq!(checks_listed(&d)["chk"]["status"], "down");
    refresh(&d, "chk");
    wait_for("s restarted again", Duration::from_secs(60), || {
        let now = children(&d);
        service(&d, "s").current == "active"
            && now.len() == 2
            && now.iter().filter(|p| pids.contains(p)).count() == 1
    });
    // Up again: the service is left alone.
    std::fs::write(&ok, "").unwrap();
    refresh(&d, "chk");
    assert_eq!(checks_listed(&d)["chk"]["status"], "up");
}

#[test]
fn a_service_waiting_for_its_checks_is_released_when_they_pass_after_a_reexec() {
    let mut d = Daemon::hold(&[("001-base", "")]);
    let ok = d.scratch().join("ok");
    let layer = format!(
        "services:\n\
         \x20 w:\n    override: replace\n    command: sleep 1000\n    requires-checks: [chk]\n\
         checks:\n\
         \x20 chk:\n    override: replace\n    period: 1h\n    threshold: 1\n    exec:\n      command: test -e {ok}\n",
        ok = ok.display()
    );
    std::fs::write(d.pebble_dir().join("layers/002-check.yaml"), layer).unwrap();
    d.stop();
    d.restart(&["--hold"]);
    act(&d, "start", &["w"]);
    wait_for("w waiting for its check", Duration::from_secs(30), || {
        service(&d, "w").current == "waiting"
    });
    assert!(children(&d).is_empty());
    let (code, _, stderr) = reexec(&d, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(service(&d, "w").current, "waiting");
    assert!(children(&d).is_empty());
    std::fs::write(&ok, "").unwrap();
    refresh(&d, "chk");
    wait_for(
        "w started once its check passed",
        Duration::from_secs(60),
        || service(&d, "w").current == "active" && children(&d).len() == 1,
    );
}

/// `POST /v1/cobble/reexec` over `--https`, as `curl` makes it with the admin client
/// certificate `name` of `certs` (OpenSSL's TLS, not the daemon's rustls, reads the answer):
/// curl's exit code and stderr, the status and the body.
fn reexec_over_https(
    port: u16,
    certs: &Path,
    name: &str,
    binary: &str,
) -> (i32, String, u16, serde_json::Value) {
    let file = |ext: &str| certs.join(format!("{name}.{ext}")).display().to_string();
    let out = std::process::Command::new("curl")
        .args(["-sS", "-k", "--cert", &file("crt"), "--key", &file("key")])
        .args(["-X", "POST", "-H", "Content-Type: application/json"])
        .args([
            "--data",
            &serde_json::json!({ "binary": binary }).to_string(),
        ])
        .args(["-w", "\n%{http_code}"])
        .arg(format!("https://127.0.0.1:{port}/v1/cobble/reexec"))
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run curl");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, status) = stdout.rsplit_once('\n').unwrap_or(("", &stdout));
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        status.trim().parse().unwrap_or(0),
        serde_json::from_str(body).unwrap_or(serde_json::Value::Null),
    )
}

#[test]
fn a_reexec_asked_over_https_is_answered_on_that_connection() {
    let port = free_port();
    let https = format!("127.0.0.1:{port}");
    let d = Daemon::start_with_env(
        &[("001-base", NUMBERED)],
        &["--hold", "--https", &https],
        &[("COBBLE_TEST_FAULTS", "1")],
    );
    let certs = d.scratch().join("certs");
    std::fs::create_dir(&certs).unwrap();
    let (_, _, admin) = crate::identities::client_cert(&certs, "admin", (2000, 4000));
    let (_, _, reader) = crate::identities::client_cert(&certs, "reader", (2000, 4000));
    let ids = d.scratch().join("ids.yaml");
    std::fs::write(
        &ids,
        format!(
            "identities:\n{}{}",
            crate::identities::cert_identity("admin", "admin", &admin),
            crate::identities::cert_identity("reader", "read", &reader)
        ),
    )
    .unwrap();
    Test::daemon(&d)
        .args(&["add-identities", "--from", ids.to_str().unwrap()])
        .any_stdout()
        .run();
    act(&d, "start", &["n"]);
    let pids = children(&d);
    assert_eq!(pids.len(), 1, "{pids:?}");
    let before = visible_state(&d);
    let version = env!("CARGO_PKG_VERSION");

    // Answered by the new program, on the connection the old one took the request on; the
    // TLS session ends cleanly (curl fails on a record it cannot read, or on a connection
    // cut without close_notify).
    for _ in 0..2 {
        let (code, stderr, status, body) = reexec_over_https(port, &certs, "admin", "");
        assert_eq!((code, stderr.as_str(), status), (0, "", 200), "{body}");
        assert_eq!(
            body["result"],
            serde_json::json!({
                "old-version": version,
                "new-version": version,
                "binary": COBBLE,
                "pid": d.pid(),
            })
        );
        assert_eq!(children(&d), pids);
        assert_eq!(visible_state(&d), before);
    }
    assert_eq!(count_in_log(&d, "Re-executed daemon: cobble"), 2);

    // A new program that fails to take over: the old one, executed back into, answers on
    // the same connection with why.
    let fails = script(
        d.scratch(),
        "takeover-fails",
        &format!("exec {COBBLE} \"$@\""),
    );
    let (code, stderr, status, body) =
        reexec_over_https(port, &certs, "admin", fails.to_str().unwrap());
    assert_eq!((code, stderr.as_str(), status), (0, "", 500), "{body}");
    let message = body["result"]["message"].as_str().unwrap();
    assert_eq!(
        message,
        format!(
            "cannot re-execute \"{}\": the new program did not take over: injected fault",
            fails.display()
        )
    );

    // An execve that fails: the old program, whose HTTP server gave the connection up,
    // answers on it all the same.
    let exec_fails = script(d.scratch(), "exec-fails", &format!("exec {COBBLE} \"$@\""));
    let (code, stderr, status, body) =
        reexec_over_https(port, &certs, "admin", exec_fails.to_str().unwrap());
    assert_eq!((code, stderr.as_str(), status), (0, "", 500), "{body}");
    let message = body["result"]["message"].as_str().unwrap();
    assert!(
        message.starts_with(&format!(
            "cannot re-execute \"{}\": not a directory",
            exec_fails.display()
        )),
        "{message}"
    );

    // A build that reads format 3 and not 4 would answer in cleartext: refused before
    // anything happens, as a binary that cannot take over is.
    let reads_3 = script(
        d.scratch(),
        "reads-3",
        r#"echo '{"cobble-version":"0.9.0","handover-formats":[1,2,3]}'"#,
    );
    let (code, stderr, status, body) =
        reexec_over_https(port, &certs, "admin", reads_3.to_str().unwrap());
    assert_eq!((code, stderr.as_str(), status), (0, "", 400), "{body}");
    assert_eq!(
        body["result"]["message"],
        format!(
            "cannot re-execute \"{}\": cobble 0.9.0 reads handover formats [1, 2, 3], and this \
             daemon writes format 4 for a client that asks over HTTPS",
            reads_3.display()
        )
    );
    // A reader's certificate is not an admin's.
    let (code, _, status, _) = reexec_over_https(port, &certs, "reader", "");
    assert_eq!((code, status), (0, 401));

    // Through all of it: the same process, service, state and output, every line once.
    assert_eq!(children(&d), pids);
    assert_eq!(service(&d, "n").current, "active");
    assert_eq!(visible_state(&d), before);
    let logs = || all_logs(&d, "n");
    wait_for("the service's last line", DEADLINE, || {
        logs().contains("[n] n 2000\n")
    });
    let numbers: Vec<u32> = logs()
        .lines()
        .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
        .collect();
    assert_eq!(numbers, (1..=2000).collect::<Vec<_>>());
    // HTTPS still serves, and the unix socket's re-execution still works.
    let (code, _, status, _) = reexec_over_https(port, &certs, "admin", "");
    assert_eq!((code, status), (0, 200));
    let (code, _, stderr) = reexec(&d, &[]);
    assert_eq!(code, 0, "{stderr}");
}
