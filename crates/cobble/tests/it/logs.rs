//! `GET /v1/logs` and `cobble logs` against a real daemon, through the clients Pebble's users
//! have: the Go client's query and NDJSON format (through our client and raw requests) and the
//! CLI.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use cobble_client::types::LogEntry;
use cobble_client::{LogsOptions, Method};

use crate::fixture::{COBBLE, Daemon, Test, client, raw, rt, wait_for};

const LONG: Duration = Duration::from_secs(30);

/// Services that print one line per trigger file the test creates, so the order in which the
/// daemon reads their lines is the order the test chose.
fn stepped_layer(dir: &Path) -> String {
    let d = dir.display();
    let script = |name: &str, steps: &str| {
        format!(
            "for i in {steps}; do while [ ! -e {d}/{name}$i ]; do sleep 0.01; done; \
             echo \"{name}$i <&>\"; done; exec sleep 1000"
        )
    };
    format!(
        "services:\n  alpha:\n    override: replace\n    startup: enabled\n    command: sh -c '{}'\n  beta:\n    override: replace\n    startup: enabled\n    command: sh -c '{}'\n",
        script("a", "1 2 3"),
        script("b", "1 2"),
    )
}

fn logs(daemon: &Daemon, services: &[&str], n: Option<i64>) -> Vec<LogEntry> {
    let options = LogsOptions {
        services: services.iter().map(|s| s.to_string()).collect(),
        n,
        follow: false,
    };
    let mut entries = Vec::new();
    rt().block_on(client(daemon).logs(&options, |e| {
        entries.push(e);
        Ok::<_, cobble_client::Error>(())
    }))
    .expect("logs");
    entries
}

fn messages(entries: &[LogEntry]) -> Vec<String> {
    entries.iter().map(|e| e.message.clone()).collect()
}

#[test]
fn n_services_and_time_order_across_services() {
    let scratch = tempfile::tempdir().unwrap();
    let daemon = Daemon::start(&[("001-logs", &stepped_layer(scratch.path()))], &[]);
    for step in ["a1", "b1", "a2", "b2", "a3"] {
        std::fs::write(scratch.path().join(step), "").unwrap();
        let want = format!("{step} <&>");
        wait_for(&format!("line {step}"), LONG, || {
            messages(&logs(&daemon, &[], Some(-1))).contains(&want)
        });
    }
    let all = ["a1 <&>", "b1 <&>", "a2 <&>", "b2 <&>", "a3 <&>"];
    assert_eq!(messages(&logs(&daemon, &[], Some(-1))), all);
    // The default is 30; `n` counts across services.
    assert_eq!(messages(&logs(&daemon, &[], None)), all);
    assert_eq!(messages(&logs(&daemon, &[], Some(3))), all[2..]);
    assert!(logs(&daemon, &[], Some(0)).is_empty());
    assert_eq!(
        messages(&logs(&daemon, &["beta"], Some(-1))),
        ["b1 <&>", "b2 <&>"]
    );
    assert_eq!(
        messages(&logs(&daemon, &["beta", "alpha"], Some(2))),
        ["b2 <&>", "a3 <&>"]
    );
    // Unknown services are left out, as Pebble leaves them out.
    assert!(logs(&daemon, &["nope"], Some(-1)).is_empty());
    assert_eq!(logs(&daemon, &["nope", "beta"], Some(-1)).len(), 2);

    // The raw answer: JSON lines, no envelope, HTML characters unescaped, Go's time format.
    let (status, body) = raw(&daemon, Method::GET, "/v1/logs?services=beta&n=1", None);
    assert_eq!(status, 200);
    let line = body.strip_suffix('\n').expect("one line");
    assert!(!line.contains('\n'));
    assert!(
        crate::fixture::glob_matches(
            r#"{"time":"20??-??-??T??:??:??*Z","service":"beta","message":"b2 <&>"}"#,
            line
        ),
        "{line}"
    );
    let response = rt()
        .block_on(client(&daemon).raw_request(Method::GET, "/v1/logs", None))
        .unwrap();
    assert_eq!(
        response.content_type.as_deref(),
        Some("application/x-ndjson")
    );

    // The CLI prints Pebble's layout, or JSON lines.
    Test::daemon(&daemon)
        .args(&["logs", "-n", "2"])
        .stdout_glob(
            "20??-??-??T??:??:??.???Z [beta] b2 <&>\n20??-??-??T??:??:??.???Z [alpha] a3 <&>\n",
        )
        .run();
    Test::daemon(&daemon)
        .args(&["logs", "--format", "json", "-n", "all", "beta"])
        .stdout_glob(
            "{\"time\":\"*\",\"service\":\"beta\",\"message\":\"b1 <&>\"}\n{\"time\":\"*\",\"service\":\"beta\",\"message\":\"b2 <&>\"}\n",
        )
        .run();
}

#[test]
fn bad_parameters_are_refused_in_pebbles_words() {
    let daemon = Daemon::hold(&[]);
    for (query, message) in [
        ("n=x", "n must be -1, 0, or a positive integer"),
        ("n=-2", "n must be -1, 0, or a positive integer"),
        (
            "follow=yes",
            "follow parameter must be \"true\" or \"false\"",
        ),
    ] {
        let (status, body) = raw(&daemon, Method::GET, &format!("/v1/logs?{query}"), None);
        assert_eq!(status, 400, "{query}");
        let envelope: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(envelope["type"], "error");
        assert_eq!(envelope["result"]["message"], message, "{query}");
    }
    Test::daemon(&daemon)
        .args(&["logs", "-n", "x"])
        .stderr("error: expected n to be a non-negative integer or \"all\", not \"x\"\n")
        .status(1)
        .run();
    Test::daemon(&daemon)
        .args(&["logs", "--format", "yaml"])
        .stderr("error: invalid output format (expected \"json\" or \"text\", not \"yaml\")\n")
        .status(1)
        .run();
}

#[test]
fn long_lines_are_split_as_pebble_splits_them() {
    let layer = "services:\n  long:\n    override: replace\n    startup: enabled\n    command: sh -c 'head -c 10000 /dev/zero | tr \"\\0\" x; echo; echo after; exec sleep 1000'\n";
    let daemon = Daemon::start(&[("001-long", layer)], &[]);
    wait_for("the line after", LONG, || {
        messages(&logs(&daemon, &["long"], Some(-1))).contains(&"after".to_owned())
    });
    let entries = logs(&daemon, &["long"], Some(-1));
    let lengths: Vec<usize> = entries.iter().map(|e| e.message.len()).collect();
    // The first piece shares Pebble's 4096-byte read with `<time> [long] `.
    let first = 4096 - 28 - "long".len();
    assert_eq!(lengths, [first, 4096, 10_000 - first - 4096, 5]);
    assert!(entries[..3].iter().all(|e| e.time == entries[0].time));
}

/// A service that prints `ready`, waits for `go`, then prints `count` numbered lines.
fn flood_layer(dir: &Path, count: u32) -> String {
    format!(
        "services:\n  flood:\n    override: replace\n    startup: enabled\n    command: sh -c 'echo ready; while [ ! -e {}/go ]; do sleep 0.01; done; seq 1 {count}; exec sleep 1000'\n",
        dir.display()
    )
}

/// Tallies a follower's lines: the numbers received, and the losses the markers announced,
/// checking that every gap is announced exactly.
#[derive(Default)]
struct Tally {
    received: u64,
    lost: u64,
    markers: u64,
    last: u64,
    pending_loss: u64,
}

impl Tally {
    fn line(&mut self, message: &str) {
        if let Some(rest) = message.strip_prefix("(... output truncated: ") {
            let n: u64 = rest
                .strip_suffix(" lines lost ...)")
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("bad marker {message:?}"));
            self.markers += 1;
            self.lost += n;
            self.pending_loss += n;
            return;
        }
        let Ok(number) = message.parse::<u64>() else {
            return;
        };
        assert_eq!(
            number,
            self.last + 1 + self.pending_loss,
            "a gap before {number} that no marker announced"
        );
        self.pending_loss = 0;
        self.last = number;
        self.received += 1;
    }

    fn accounted(&self) -> u64 {
        self.received + self.lost
    }
}

#[test]
fn cobble_logs_follow_under_a_flood_gets_the_lines_and_a_marker_for_every_gap() {
    const COUNT: u32 = 200_000;
    let scratch = tempfile::tempdir().unwrap();
    let daemon = Daemon::start(&[("001-flood", &flood_layer(scratch.path(), COUNT))], &[]);
    wait_for("ready", LONG, || {
        !logs(&daemon, &["flood"], Some(-1)).is_empty()
    });
    let mut follower = Command::new(COBBLE)
        .args(["logs", "-f", "-n", "1", "flood"])
        .env("PEBBLE", daemon.pebble_dir())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(follower.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    assert!(first.ends_with(" [flood] ready"), "{first}");
    std::fs::write(scratch.path().join("go"), "").unwrap();
    let mut tally = Tally::default();
    while tally.accounted() < u64::from(COUNT) {
        let line = lines.next().expect("more lines").unwrap();
        let (_, message) = line.split_once(" [flood] ").expect("Pebble's layout");
        tally.line(message);
    }
    follower.kill().unwrap();
    follower.wait().unwrap();
    assert_eq!(tally.accounted(), u64::from(COUNT));
    assert!(
        tally.received * 10 >= u64::from(COUNT) * 9,
        "received {} of {COUNT}",
        tally.received
    );
}

#[test]
fn a_follower_that_stops_reading_is_told_exactly_how_many_lines_it_lost() {
    // Far more than a service keeps for a follower that does not read (16 MiB).
    const COUNT: u32 = 1_000_000;
    let scratch = tempfile::tempdir().unwrap();
    let daemon = Daemon::start(&[("001-flood", &flood_layer(scratch.path(), COUNT))], &[]);
    wait_for("ready", LONG, || {
        !logs(&daemon, &["flood"], Some(-1)).is_empty()
    });
    let mut socket = UnixStream::connect(daemon.pebble_dir().join(".pebble.socket")).unwrap();
    socket
        .write_all(b"GET /v1/logs?follow=true&n=1 HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    let mut reader = BufReader::new(socket);
    let mut head = String::new();
    while head != "\r\n" {
        head.clear();
        reader.read_line(&mut head).unwrap();
    }
    // Nobody reads while the service writes everything.
    std::fs::write(scratch.path().join("go"), "").unwrap();
    let (status, body) = (0..)
        .map(|_| {
            std::thread::sleep(Duration::from_millis(50));
            raw(&daemon, Method::GET, "/v1/logs?services=flood&n=1", None)
        })
        .find(|(_, body)| body.contains(&format!("\"message\":\"{COUNT}\"")))
        .unwrap();
    assert_eq!(status, 200, "{body}");
    let mut tally = Tally::default();
    let mut chunked = String::new();
    while tally.accounted() < u64::from(COUNT) {
        chunked.clear();
        reader.read_line(&mut chunked).unwrap();
        let Some(json) = chunked
            .trim_end()
            .strip_prefix('{')
            .map(|_| chunked.trim_end())
        else {
            continue; // a chunk-size line of the chunked encoding
        };
        let entry: LogEntry = serde_json::from_str(json).unwrap();
        tally.line(&entry.message);
    }
    assert_eq!(tally.accounted(), u64::from(COUNT));
    assert!(tally.markers >= 1 && tally.lost > 0, "nothing was lost");
    // Nothing but the end of the last chunk follows.
    let mut rest = [0u8; 4096];
    reader.get_mut().set_nonblocking(true).unwrap();
    let n = reader.read(&mut rest).unwrap_or(0);
    let rest = String::from_utf8_lossy(&rest[..n]);
    assert!(!rest.contains("message"), "more lines: {rest}");
}

/// A service with persistent logs that prints `<run> <i>` for i in 1..=count.
fn persisted_layer(run: &str, count: u32) -> String {
    format!(
        "services:\n  kept:\n    override: replace\n    startup: enabled\n    persist-logs: true\n    command: sh -c 'for i in $(seq 1 {count}); do echo \"{run} $i\"; done; exec sleep 1000'\n"
    )
}

#[test]
fn persistent_logs_are_rotated_and_read_back_across_daemon_restarts() {
    let env = [("COBBLE_LOGS_MAX_BYTES", "2000"), ("COBBLE_LOGS_KEEP", "2")];
    let mut daemon =
        Daemon::start_with_env(&[("001-kept", &persisted_layer("one", 300))], &[], &env);
    wait_for("the last line", LONG, || {
        messages(&logs(&daemon, &["kept"], Some(1))) == ["one 300"]
    });
    Test::daemon(&daemon)
        .args(&["plan"])
        .stdout_contains("    persist-logs: true\n")
        .run();
    assert_eq!(daemon.stop(), Some(0));
    let dir = daemon.pebble_dir().join("logs");
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(files, ["kept.log", "kept.log.1", "kept.log.2"]);
    for file in &files {
        let len = std::fs::metadata(dir.join(file)).unwrap().len();
        assert!(len <= 2000, "{file}: {len} bytes");
    }
    let last_file = std::fs::read_to_string(dir.join("kept.log")).unwrap();
    assert!(
        crate::fixture::glob_matches(
            "20??-??-??T??:??:??.???Z [kept] one 300",
            last_file.lines().last().unwrap()
        ),
        "{last_file}"
    );

    // A new daemon that has not started the service reads its last lines from the files.
    daemon.restart(&["--hold"]);
    assert_eq!(
        messages(&logs(&daemon, &["kept"], Some(2))),
        ["one 299", "one 300"]
    );
    let kept = messages(&logs(&daemon, &[], Some(-1)));
    let first: u32 = kept[0].strip_prefix("one ").unwrap().parse().unwrap();
    assert!(first > 1, "the oldest file was rotated away");
    let expected: Vec<String> = (first..=300).map(|i| format!("one {i}")).collect();
    assert_eq!(kept, expected);

    // Once it runs again, its new lines follow the old ones, none twice.
    std::fs::write(
        daemon.pebble_dir().join("layers").join("001-kept.yaml"),
        persisted_layer("two", 5),
    )
    .unwrap();
    daemon.stop();
    daemon.restart(&[]);
    wait_for("the new lines", LONG, || {
        messages(&logs(&daemon, &["kept"], Some(1))) == ["two 5"]
    });
    let all = messages(&logs(&daemon, &["kept"], Some(8)));
    assert_eq!(
        all,
        [
            "one 298", "one 299", "one 300", "two 1", "two 2", "two 3", "two 4", "two 5"
        ]
    );
}
