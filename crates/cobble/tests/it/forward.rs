//! Log forwarding against real receivers started by the tests: HTTP servers that decode
//! Loki push requests and OTLP/HTTP JSON, and syslog servers that parse RFC 5424 messages,
//! octet-counted over TCP and one per datagram over UDP.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cobble_client::Method;

use crate::fixture::{Daemon, free_port, raw, wait_for};

const HEALTHY: u8 = 0;
/// Each request is answered after ten seconds.
const SLOW: u8 = 1;

/// An HTTP receiver that records every request's path and JSON body and answers 204.
#[derive(Clone)]
struct HttpReceiver {
    port: u16,
    requests: Arc<Mutex<Vec<(String, serde_json::Value)>>>,
    /// Requests read, answered or not.
    arrived: Arc<AtomicUsize>,
    mode: Arc<AtomicU8>,
}

impl HttpReceiver {
    /// A receiver on a port nobody listens on yet (the receiver is down).
    fn down() -> HttpReceiver {
        HttpReceiver {
            port: free_port(),
            requests: Arc::default(),
            arrived: Arc::default(),
            mode: Arc::new(AtomicU8::new(HEALTHY)),
        }
    }

    fn start() -> HttpReceiver {
        let receiver = HttpReceiver::down();
        receiver.listen();
        receiver
    }

    /// Starts listening on the receiver's port.
    fn listen(&self) {
        let listener = TcpListener::bind(("127.0.0.1", self.port)).expect("receiver port");
        let receiver = self.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let receiver = receiver.clone();
                std::thread::spawn(move || receiver.serve(conn));
            }
        });
    }

    fn serve(&self, conn: TcpStream) {
        let mut writer = conn.try_clone().unwrap();
        let mut reader = BufReader::new(conn);
        loop {
            let mut request_line = String::new();
            if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
                return;
            }
            let path = request_line
                .split_whitespace()
                .nth(1)
                .unwrap_or_default()
                .to_owned();
            let mut length = 0;
            loop {
                let mut header = String::new();
                if reader.read_line(&mut header).unwrap_or(0) == 0 {
                    return;
                }
                let header = header.trim_end();
                if header.is_empty() {
                    break;
                }
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
            self.arrived.fetch_add(1, Ordering::SeqCst);
            if self.mode.load(Ordering::SeqCst) == SLOW {
                std::thread::sleep(Duration::from_secs(10));
            }
            let json = serde_json::from_slice(&body).expect("JSON body");
            self.requests.lock().unwrap().push((path, json));
            if writer
                .write_all(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n")
                .is_err()
            {
                return;
            }
        }
    }

    fn requests(&self) -> Vec<(String, serde_json::Value)> {
        self.requests.lock().unwrap().clone()
    }

    /// Every line received as Loki streams: (stream labels, line), in arrival order.
    fn loki_lines(&self) -> Vec<(BTreeMap<String, String>, String)> {
        let mut lines = Vec::new();
        for (path, body) in self.requests() {
            assert_eq!(path, "/loki/api/v1/push");
            for stream in body["streams"].as_array().expect("streams") {
                let labels: BTreeMap<String, String> =
                    serde_json::from_value(stream["stream"].clone()).expect("stream labels");
                for value in stream["values"].as_array().expect("values") {
                    let nanos: i128 = value[0].as_str().unwrap().parse().expect("nanoseconds");
                    assert!(nanos > 1_600_000_000_000_000_000, "{nanos}");
                    lines.push((labels.clone(), value[1].as_str().unwrap().to_owned()));
                }
            }
        }
        lines
    }
}

/// A syslog receiver on TCP (octet counting) and UDP (one message per datagram) ports.
pub(crate) struct SyslogReceiver {
    pub(crate) tcp_port: u16,
    udp_port: u16,
    pub(crate) tcp_messages: Arc<Mutex<Vec<String>>>,
    udp_messages: Arc<Mutex<Vec<String>>>,
}

impl SyslogReceiver {
    pub(crate) fn start() -> SyslogReceiver {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
        let receiver = SyslogReceiver {
            tcp_port: listener.local_addr().unwrap().port(),
            udp_port: udp.local_addr().unwrap().port(),
            tcp_messages: Arc::default(),
            udp_messages: Arc::default(),
        };
        let tcp_messages = receiver.tcp_messages.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let messages = tcp_messages.clone();
                std::thread::spawn(move || read_octet_counted(conn, &messages));
            }
        });
        let udp_messages = receiver.udp_messages.clone();
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 65536];
            while let Ok(n) = udp.recv(&mut buf) {
                let message = String::from_utf8(buf[..n].to_vec()).expect("UTF-8 datagram");
                udp_messages.lock().unwrap().push(message);
            }
        });
        receiver
    }
}

/// Parses `MSG-LEN SP SYSLOG-MSG` frames (RFC 6587 octet counting) until the peer closes.
fn read_octet_counted(conn: TcpStream, messages: &Mutex<Vec<String>>) {
    let mut reader = BufReader::new(conn);
    loop {
        let mut length = Vec::new();
        if reader.read_until(b' ', &mut length).unwrap_or(0) == 0 {
            return;
        }
        let digits = std::str::from_utf8(&length[..length.len() - 1]).unwrap();
        let length: usize = digits
            .parse()
            .unwrap_or_else(|_| panic!("bad frame length {digits:?}"));
        let mut message = vec![0; length];
        reader.read_exact(&mut message).expect("whole frame");
        messages
            .lock()
            .unwrap()
            .push(String::from_utf8(message).expect("UTF-8 frame"));
    }
}

/// One sample of `/v1/metrics`, such as `cobble_log_forward_sent_total{target="a"}`.
fn metric(daemon: &Daemon, sample: &str) -> Option<u64> {
    let (status, text) = raw(daemon, Method::GET, "/v1/metrics", None);
    assert_eq!(status, 200);
    text.lines()
        .find_map(|line| line.strip_prefix(sample)?.trim().parse().ok())
}

fn add_layer(daemon: &Daemon, label: &str, yaml: &str) -> (u16, String) {
    let body = serde_json::json!({
        "action": "add", "label": label, "combine": true, "format": "yaml", "layer": yaml,
    });
    raw(daemon, Method::POST, "/v1/layers", Some(&body.to_string()))
}

fn plan(daemon: &Daemon) -> String {
    raw(daemon, Method::GET, "/v1/plan?format=yaml", None).1
}

#[test]
fn loki_and_opentelemetry_receive_every_line_with_their_labels() {
    let loki = HttpReceiver::start();
    let otel = HttpReceiver::start();
    let layer = format!(
        r#"
services:
  talker:
    override: replace
    startup: enabled
    command: /bin/sh -c 'i=0; while [ $i -lt 250 ]; do i=$((i+1)); echo "line $i"; done; exec sleep 300'
    environment: {{ZONE: eu-1}}
  quiet:
    override: replace
    startup: enabled
    command: /bin/sh -c 'echo not forwarded; exec sleep 300'
log-targets:
  loki:
    override: replace
    type: loki
    location: http://127.0.0.1:{}/loki/api/v1/push
    services: [all, -quiet]
    labels: {{zone: $ZONE, unit: "u-${{ZONE}}-x"}}
  otel:
    override: replace
    type: opentelemetry
    location: http://127.0.0.1:{}
    services: [talker]
    labels: {{deployment.zone: $ZONE}}
"#,
        loki.port, otel.port
    );
    let daemon = Daemon::start(&[("001-base", &layer)], &[]);
    wait_for("250 lines at Loki", Duration::from_secs(30), || {
        loki.loki_lines().len() >= 250
    });
    let lines = loki.loki_lines();
    assert_eq!(lines.len(), 250, "no more, no less: quiet is not forwarded");
    for (i, (labels, line)) in lines.iter().enumerate() {
        assert_eq!(*line, format!("line {}", i + 1));
        let want: BTreeMap<String, String> = [
            ("pebble_service", "talker"),
            ("unit", "u-eu-1-x"),
            ("zone", "eu-1"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(*labels, want);
    }
    // At most 100 entries a request (Pebble's batch size).
    assert!(loki.requests().len() >= 3);

    wait_for(
        "250 records at the collector",
        Duration::from_secs(30),
        || {
            let records: usize = otel
                .requests()
                .iter()
                .map(|(_, body)| {
                    body["resourceLogs"][0]["scopeLogs"][0]["logRecords"]
                        .as_array()
                        .map_or(0, Vec::len)
                })
                .sum();
            records >= 250
        },
    );
    let (path, body) = &otel.requests()[0];
    assert_eq!(path, "/v1/logs");
    let resource = &body["resourceLogs"][0];
    assert_eq!(
        resource["resource"]["attributes"],
        serde_json::json!([
            {"key": "service.name", "value": {"stringValue": "talker"}},
            {"key": "deployment.zone", "value": {"stringValue": "eu-1"}},
        ])
    );
    let record = &resource["scopeLogs"][0]["logRecords"][0];
    assert_eq!(record["body"]["stringValue"], "line 1");
    assert!(record["timeUnixNano"].as_str().unwrap().len() >= 19);

    wait_for("the counters", Duration::from_secs(10), || {
        metric(&daemon, "cobble_log_forward_sent_total{target=\"loki\"}") == Some(250)
            && metric(&daemon, "cobble_log_forward_sent_total{target=\"otel\"}") == Some(250)
    });
    assert_eq!(
        metric(&daemon, "cobble_log_forward_dropped_total{target=\"loki\"}"),
        Some(0)
    );
}

#[test]
fn syslog_gets_rfc_5424_messages_over_tcp_and_udp() {
    let syslog = SyslogReceiver::start();
    let layer = format!(
        r#"
services:
  app:
    override: replace
    startup: enabled
    command: /bin/sh -c 'echo "first line"; echo "second ] line"; exec sleep 300'
    environment: {{OWNER: team "a"}}
log-targets:
  over-tcp:
    override: replace
    type: syslog
    location: tcp://127.0.0.1:{}
    services: [all]
    labels: {{owner: $OWNER, juju-unit: app/0}}
  over-udp:
    override: replace
    type: syslog
    location: udp://127.0.0.1:{}
    services: [app]
"#,
        syslog.tcp_port, syslog.udp_port
    );
    let _daemon = Daemon::start(&[("001-base", &layer)], &[]);
    wait_for(
        "two messages on each transport",
        Duration::from_secs(30),
        || {
            syslog.tcp_messages.lock().unwrap().len() >= 2
                && syslog.udp_messages.lock().unwrap().len() >= 2
        },
    );
    let check = |message: &str, structured_data: &str, text: &str| {
        // <PRI>VERSION TIMESTAMP HOSTNAME APP-NAME PROCID MSGID STRUCTURED-DATA MSG
        let fields: Vec<&str> = message.splitn(7, ' ').collect();
        assert_eq!(fields[0], "<13>1", "{message}");
        let time = fields[1];
        assert!(
            time.ends_with('Z') && time.parse::<jiff::Timestamp>().is_ok(),
            "{time}"
        );
        assert!(!fields[2].is_empty());
        assert_eq!(&fields[3..6], ["app", "-", "-"], "{message}");
        assert_eq!(fields[6], format!("{structured_data} {text}"), "{message}");
    };
    let tcp = syslog.tcp_messages.lock().unwrap().clone();
    let sd = r#"[pebble@28978 juju-unit="app/0" owner="team \"a\""]"#;
    check(&tcp[0], sd, "first line");
    check(&tcp[1], sd, "second ] line");
    let udp = syslog.udp_messages.lock().unwrap().clone();
    check(&udp[0], "[pebble@28978]", "first line");
    check(&udp[1], "[pebble@28978]", "second ] line");
}

#[test]
fn log_targets_pebble_refuses_are_refused_and_the_plan_is_unchanged() {
    let daemon = Daemon::hold(&[(
        "001-base",
        "services:\n  svc:\n    override: replace\n    command: sleep 300\n",
    )]);
    let before = plan(&daemon);
    let target = |body: &str| format!("log-targets:\n  t:\n    override: replace\n{body}");
    // Checks of one layer come back as parse errors, checks of the combined plan bare, as
    // Pebble words them.
    let cases = [
        (
            target("    type: splunk\n    location: http://x/\n"),
            "cannot parse layer YAML: log target \"t\" has unsupported type \"splunk\", must be \"loki\", \"opentelemetry\" or \"syslog\"",
        ),
        (
            target("    type: loki\n    services: [all]\n"),
            "plan must define \"location\" for log target \"t\"",
        ),
        (
            target("    location: http://x/\n"),
            "plan must define \"type\" (\"loki\", \"opentelemetry\" or \"syslog\") for log target \"t\"",
        ),
        (
            target("    type: loki\n    location: http://x/\n    labels: {pebble_x: a}\n"),
            "cannot parse layer YAML: log target \"t\": label \"pebble_x\" uses reserved prefix \"pebble_\"",
        ),
        (
            target("    type: loki\n    location: http://x/\n    services: [nope]\n"),
            "log target \"t\" specifies unknown service \"nope\"",
        ),
    ];
    for (yaml, message) in cases {
        let (status, text) = add_layer(&daemon, "bad", &yaml);
        assert_eq!(status, 400, "{yaml}: {text}");
        let body: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(body["result"]["message"], message, "{yaml}");
        assert_eq!(plan(&daemon), before, "{yaml}");
    }
    // A location or label names that cannot work are Pebble's to find out when it sends:
    // the layer is taken (the daemon says what is wrong; see the workloads tests).
    for (label, body) in [
        ("scheme", "    type: loki\n    location: ftp://x/push\n"),
        ("syslog", "    type: syslog\n    location: http://x:514\n"),
        (
            "labels",
            "    type: loki\n    location: http://x/\n    labels: {juju-unit: a}\n",
        ),
    ] {
        let (status, text) = add_layer(&daemon, label, &target(body));
        assert_eq!(status, 200, "{body}: {text}");
    }
}

#[test]
fn plan_changes_apply_to_running_services_without_a_replan() {
    let loki = HttpReceiver::start();
    let daemon = Daemon::start(
        &[(
            "001-base",
            "services:\n  ticker:\n    override: replace\n    startup: enabled\n    command: /bin/sh -c 'i=0; while true; do i=$((i+1)); echo \"tick $i\"; sleep 0.05; done'\n",
        )],
        &[],
    );
    let target = |labels: &str, services: &str| {
        format!(
            "log-targets:\n  loki:\n    override: replace\n    type: loki\n    location: http://127.0.0.1:{}/loki/api/v1/push\n    services: {services}\n    labels: {labels}\n",
            loki.port
        )
    };
    // Added while the service runs: its next lines go out.
    let (status, text) = add_layer(&daemon, "forward", &target("{v: one}", "[all]"));
    assert_eq!(status, 200, "{text}");
    wait_for("lines labelled one", Duration::from_secs(30), || {
        loki.loki_lines()
            .iter()
            .any(|(l, _)| l.get("v").is_some_and(|v| v == "one"))
    });
    // Modified: new lines carry the new labels.
    let (status, text) = add_layer(&daemon, "forward", &target("{v: two}", "[all]"));
    assert_eq!(status, 200, "{text}");
    wait_for("lines labelled two", Duration::from_secs(30), || {
        loki.loki_lines()
            .iter()
            .any(|(l, _)| l.get("v").is_some_and(|v| v == "two"))
    });
    // Every line was labelled with what was in force when it was written: one, then two.
    let labels: Vec<String> = loki
        .loki_lines()
        .iter()
        .map(|(l, _)| l["v"].clone())
        .collect();
    let switch = labels.iter().position(|v| v == "two").unwrap();
    assert!(labels[..switch].iter().all(|v| v == "one"));
    // Its services removed, in the same plan change that starts another target: from the
    // first line the new target gets, nothing goes to the old one.
    let probe = HttpReceiver::start();
    let change = format!(
        "{}  probe:\n    override: replace\n    type: loki\n    location: http://127.0.0.1:{}/loki/api/v1/push\n    services: [all]\n",
        target("{v: two}", "[-all]"),
        probe.port
    );
    let (status, text) = add_layer(&daemon, "forward", &change);
    assert_eq!(status, 200, "{text}");
    let tick = |line: &str| line.strip_prefix("tick ").unwrap().parse::<u64>().unwrap();
    wait_for("the probe's first lines", Duration::from_secs(30), || {
        !probe.loki_lines().is_empty()
    });
    let first_at_probe = tick(&probe.loki_lines()[0].1);
    // Well past a batch's delay, as the ticker counts it (20 ticks a second).
    wait_for(
        "the probe to get two more seconds of ticks",
        Duration::from_secs(30),
        || {
            probe
                .loki_lines()
                .last()
                .is_some_and(|(_, line)| tick(line) >= first_at_probe + 40)
        },
    );
    let at_loki = loki.loki_lines();
    let last_at_loki = at_loki.iter().map(|(_, line)| tick(line)).max().unwrap();
    assert!(
        last_at_loki < first_at_probe,
        "{last_at_loki} >= {first_at_probe}"
    );
    assert_eq!(
        metric(&daemon, "cobble_log_forward_sent_total{target=\"loki\"}"),
        Some(at_loki.len() as u64)
    );
    assert_eq!(
        metric(&daemon, "cobble_log_forward_queued{target=\"loki\"}"),
        Some(0)
    );
}

#[test]
fn a_receiver_that_is_down_then_slow_then_back_blocks_nothing_and_drops_are_counted() {
    let flaky = HttpReceiver::down();
    let healthy = HttpReceiver::start();
    let scratch = tempfile::tempdir().unwrap();
    let count = scratch.path().join("count");
    // About 10 000 lines a second, and a file that says how far the writer got.
    let layer = format!(
        r#"
services:
  flood:
    override: replace
    startup: enabled
    command: /bin/sh -c 'i=0; while true; do seq $i $((i+499)); i=$((i+500)); echo $i > {count}; sleep 0.05; done'
  steady:
    override: replace
    startup: enabled
    command: /bin/sh -c 'i=0; while true; do i=$((i+1)); echo "steady $i"; sleep 0.1; done'
log-targets:
  flaky:
    override: replace
    type: loki
    location: http://127.0.0.1:{}/loki/api/v1/push
    services: [flood]
  healthy:
    override: replace
    type: loki
    location: http://127.0.0.1:{}/loki/api/v1/push
    services: [steady]
"#,
        flaky.port,
        healthy.port,
        count = count.display()
    );
    let daemon = Daemon::start(&[("001-base", &layer)], &[]);
    let written = || {
        std::fs::read_to_string(&count)
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    let healthy_lines = || healthy.loki_lines().len();
    let keeps_flowing = |phase: &str| {
        // The writer is never held up by the forwarding, the API answers, and the other
        // target keeps receiving.
        let (w, h) = (written(), healthy_lines());
        wait_for(
            &format!("{phase}: the writer to go on"),
            Duration::from_secs(20),
            || written() >= w + 20_000,
        );
        wait_for(
            &format!("{phase}: the healthy target to go on"),
            Duration::from_secs(20),
            || healthy_lines() >= h + 5,
        );
        assert_eq!(raw(&daemon, Method::GET, "/v1/services", None).0, 200);
    };

    // Down: nothing listens. Lines beyond the queue's bound are dropped and counted.
    keeps_flowing("down");
    wait_for("drops while down", Duration::from_secs(30), || {
        metric(
            &daemon,
            "cobble_log_forward_dropped_total{target=\"flaky\"}",
        )
        .unwrap_or(0)
            > 0
    });
    assert_eq!(
        metric(
            &daemon,
            "cobble_log_forward_dropped_total{target=\"healthy\"}"
        ),
        Some(0)
    );

    // Slow: each request takes ten seconds.
    flaky.mode.store(SLOW, Ordering::SeqCst);
    flaky.listen();
    wait_for(
        "a request to reach the slow receiver",
        Duration::from_secs(30),
        || flaky.arrived.load(Ordering::SeqCst) > 0,
    );
    keeps_flowing("slow");
    let dropped_while_slow = metric(
        &daemon,
        "cobble_log_forward_dropped_total{target=\"flaky\"}",
    )
    .unwrap();

    // Back: delivery resumes.
    flaky.mode.store(HEALTHY, Ordering::SeqCst);
    let sent = metric(&daemon, "cobble_log_forward_sent_total{target=\"flaky\"}").unwrap();
    wait_for("delivery to resume", Duration::from_secs(60), || {
        metric(&daemon, "cobble_log_forward_sent_total{target=\"flaky\"}").unwrap() >= sent + 1000
    });
    keeps_flowing("back");
    let lines = flaky.loki_lines();
    assert!(lines.len() >= 1000);
    assert!(lines.iter().all(|(l, _)| l["pebble_service"] == "flood"));
    assert!(dropped_while_slow > 0);
    // Whatever was received arrived whole: numbered lines, none mangled.
    assert!(lines.iter().all(|(_, line)| line.parse::<u64>().is_ok()));
}
