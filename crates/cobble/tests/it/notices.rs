//! Notices end to end: a watcher that long-polls as Juju's agent does, custom notices through
//! the client and the CLI, persistence across a restart, and refused input.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use cobble_client::types::NoticeInfo;
use cobble_client::{Client, ClientConfig, Method, NoticesOptions, NotifyOptions};

use crate::fixture::{Daemon, Test, raw, rt, wait_for};

const LONG: Duration = Duration::from_secs(20);

fn client(daemon: &Daemon) -> Client {
    Client::new(ClientConfig::socket(
        daemon.pebble_dir().join(".pebble.socket"),
    ))
    .expect("client")
}

fn notify(daemon: &Daemon, key: &str, data: &[(&str, &str)]) -> String {
    let options = NotifyOptions {
        key: key.into(),
        data: data
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        repeat_after: None,
    };
    rt().block_on(client(daemon).notify(&options))
        .expect("notify")
}

fn all_notices(daemon: &Daemon) -> Vec<NoticeInfo> {
    let options = NoticesOptions {
        all_users: true,
        ..Default::default()
    };
    rt().block_on(client(daemon).notices(&options))
        .expect("notices")
}

/// What Juju's agent turns a notice into.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Event {
    Custom(String),
    CheckFailed(String),
    CheckRecovered(String),
}

/// A watcher in the manner of Juju's container agent: long-polls with the last-repeated time
/// of the previous batch as `after`, maps each notice to a charm event (a check change's
/// status read when its notice arrives), and fails if a notice ever comes back unrepeated.
struct Watcher {
    events: mpsc::Receiver<(Event, Instant)>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Watcher {
    fn start(daemon: &Daemon) -> Watcher {
        let client = client(daemon);
        let (tx, events) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::spawn(move || {
            rt().block_on(async move {
                let mut after: Option<String> = None;
                let mut seen = HashSet::new();
                while !stopping.load(Ordering::SeqCst) {
                    let options = NoticesOptions {
                        after: after.clone(),
                        ..Default::default()
                    };
                    let batch = client
                        .wait_notices(&options, Duration::from_millis(500))
                        .await
                        .expect("long-poll");
                    let arrived = Instant::now();
                    for notice in &batch {
                        assert!(
                            seen.insert((notice.id.clone(), notice.last_repeated.clone())),
                            "notice returned twice: {notice:?}"
                        );
                        if let Some(event) = map(&client, notice).await {
                            let _ = tx.send((event, arrived));
                        }
                    }
                    if let Some(last) = batch.last() {
                        after = Some(last.last_repeated.clone());
                    }
                }
            });
        });
        Watcher {
            events,
            stop,
            thread: Some(thread),
        }
    }

    /// The next event, within `LONG`.
    fn next(&self) -> (Event, Instant) {
        self.events.recv_timeout(LONG).expect("an event in time")
    }

    /// Stops the loop and returns the events it had not handed out.
    fn finish(mut self) -> Vec<Event> {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            thread.join().expect("the watcher saw no notice twice");
        }
        self.events.try_iter().map(|(e, _)| e).collect()
    }
}

async fn map(client: &Client, notice: &NoticeInfo) -> Option<Event> {
    match notice.kind.as_str() {
        "custom" => Some(Event::Custom(notice.key.clone())),
        "change-update" => {
            let change = client.change(&notice.key).await.ok()?;
            let check = notice.last_data.get("check-name")?.clone();
            match (change.kind.as_str(), change.status.as_str()) {
                ("perform-check", "Error") => Some(Event::CheckFailed(check)),
                ("recover-check", "Done") => Some(Event::CheckRecovered(check)),
                _ => None,
            }
        }
        _ => None,
    }
}

#[test]
fn a_juju_style_watcher_sees_each_event_once() {
    let scratch = tempfile::tempdir().unwrap();
    let up = scratch.path().join("up");
    std::fs::write(&up, "").unwrap();
    // A run's timeout is its period at most: one long enough that `test -e` meets it on a
    // loaded machine, since with a threshold of 1 a single late run is a failure (an event).
    let layer = format!(
        "checks:\n  probe:\n    override: replace\n    period: 1s\n    threshold: 1\n    \
         exec:\n      command: test -e {}\n",
        up.display()
    );
    let daemon = Daemon::start(&[("001-checks", &layer)], &[]);
    let watcher = Watcher::start(&daemon);

    // A notify from another client wakes the waiting poll.
    let sent = Instant::now();
    notify(&daemon, "example.com/wake", &[("n", "1")]);
    let (event, arrived) = watcher.next();
    assert_eq!(event, Event::Custom("example.com/wake".into()));
    eprintln!("notify to watcher wake-up: {:?}", arrived - sent);

    for streak in 0..2 {
        std::fs::remove_file(&up).unwrap();
        assert_eq!(watcher.next().0, Event::CheckFailed("probe".into()));
        // Down long enough for the failure action to fire again (each streak fires it at
        // the threshold, then again): still no new event.
        let fired = format!(
            "cobble_check_action_count{{check=\"probe\"}} {}\n",
            2 * (streak + 1)
        );
        wait_for("the failure action to fire again", LONG, || {
            raw(&daemon, Method::GET, "/v1/metrics", None)
                .1
                .contains(&fired)
        });
        std::fs::write(&up, "").unwrap();
        assert_eq!(watcher.next().0, Event::CheckRecovered("probe".into()));
    }
    notify(&daemon, "example.com/last", &[]);
    assert_eq!(watcher.next().0, Event::Custom("example.com/last".into()));
    assert_eq!(watcher.finish(), [], "no event beyond one per streak");
}

#[test]
fn a_long_poll_returns_an_empty_list_when_its_timeout_passes() {
    let daemon = Daemon::start(&[], &[]);
    let (status, body) = raw(
        &daemon,
        Method::GET,
        "/v1/notices?types=custom&timeout=50ms",
        None,
    );
    assert_eq!(
        (status, body.contains(r#""result":[]"#)),
        (200, true),
        "{body}"
    );
    // What already matches is returned at once, however long the timeout (an hour's wait
    // would hang the test).
    notify(&daemon, "example.com/now", &[]);
    let (status, body) = raw(
        &daemon,
        Method::GET,
        "/v1/notices?types=custom&timeout=1h",
        None,
    );
    assert_eq!(status, 200);
    assert!(body.contains("example.com/now"), "{body}");
}

#[test]
fn notices_and_their_ids_survive_a_restart() {
    let mut daemon = Daemon::start(&[], &[]);
    let first = notify(&daemon, "example.com/kept", &[("k", "v")]);
    let before = all_notices(&daemon);
    daemon.stop();
    daemon.restart(&[]);
    let after = all_notices(&daemon);
    let kept = |list: &[NoticeInfo]| -> Vec<NoticeInfo> {
        list.iter()
            .filter(|n| n.kind == "custom")
            .cloned()
            .collect()
    };
    assert_eq!(kept(&after), kept(&before));
    let second = notify(&daemon, "example.com/new", &[]);
    let highest = before
        .iter()
        .map(|n| n.id.parse::<u64>().unwrap())
        .max()
        .unwrap();
    assert!(
        second.parse::<u64>().unwrap() > highest,
        "{first} then {second}"
    );
}

/// Method, path and body of a raw request.
type Request = (Method, String, Option<String>);

#[test]
fn bad_requests_are_refused_in_pebbles_words_and_change_nothing() {
    let daemon = Daemon::start(&[], &[]);
    notify(&daemon, "example.com/existing", &[]);
    let before = all_notices(&daemon);
    let big = format!(r#"{{"x":"{}"}}"#, "a".repeat(4096));
    let long_key = format!("example.com/{}", "k".repeat(250));
    let post = |body: &str| {
        (
            Method::POST,
            "/v1/notices".to_string(),
            Some(body.to_string()),
        )
    };
    let get = |path: &str| (Method::GET, path.to_string(), None);
    let cases: Vec<(Request, u16, String)> = vec![
        (
            post(r#"{"action":"remove","type":"custom","key":"a.com/b"}"#),
            400,
            r#"invalid action \"remove\""#.into(),
        ),
        (
            post(r#"{"action":"add","type":"warning","key":"a.com/b"}"#),
            400,
            r#"invalid type \"warning\" (can only add \"custom\" notices)"#.into(),
        ),
        (
            post(r#"{"action":"add","type":"custom","key":"Bad/Key"}"#),
            400,
            r#"invalid key \"Bad/Key\" (must be in \"example.com/path\" format)"#.into(),
        ),
        (
            post(&format!(
                r#"{{"action":"add","type":"custom","key":"{long_key}"}}"#
            )),
            400,
            "key must be 256 bytes or less".into(),
        ),
        (
            post(r#"{"action":"add","type":"custom","key":"a.com/b","repeat-after":"soon"}"#),
            400,
            r#"invalid repeat-after: time: invalid duration \"soon\""#.into(),
        ),
        (
            post(&format!(
                r#"{{"action":"add","type":"custom","key":"a.com/b","data":{big}}}"#
            )),
            400,
            "total size of data must be 4096 bytes or less".into(),
        ),
        (
            post(r#"{"action":"add","type":"custom","key":"a.com/b","data":{"n":1}}"#),
            400,
            "cannot decode notice data: json: cannot unmarshal number into Go value of type string"
                .into(),
        ),
        (
            get("/v1/notices?timeout=forever"),
            400,
            r#"invalid timeout: time: invalid duration \"forever\""#.into(),
        ),
        (
            get("/v1/notices?users=some"),
            400,
            r#"invalid \"users\" filter: must be \"all\""#.into(),
        ),
        (
            get("/v1/notices?users=all&user-id=0"),
            400,
            r#"cannot use both \"users\" and \"user-id\" parameters"#.into(),
        ),
        (
            get("/v1/notices?user-id=1,2"),
            400,
            r#"invalid \"user-id\" filter: must only include one \"user-id\""#.into(),
        ),
        (
            get("/v1/notices/999"),
            404,
            r#"cannot find notice with ID \"999\""#.into(),
        ),
        (
            get("/v1/notices/x"),
            404,
            r#"cannot find notice with ID \"x\""#.into(),
        ),
    ];
    for ((method, path, body), status, message) in cases {
        let (got_status, got_body) = raw(&daemon, method.clone(), &path, body.as_deref());
        assert_eq!(got_status, status, "{method} {path}: {got_body}");
        assert!(
            got_body.contains(&format!(r#""message":"{message}""#)),
            "{method} {path}: {got_body}"
        );
    }
    // Unknown types only: nothing can match, and that is no error.
    let (status, body) = raw(&daemon, Method::GET, "/v1/notices?types=frob", None);
    assert_eq!(
        (status, body.contains(r#""result":[]"#)),
        (200, true),
        "{body}"
    );
    assert_eq!(all_notices(&daemon), before, "nothing changed");
}

#[test]
fn the_cli_records_lists_fetches_and_acknowledges() {
    let daemon = Daemon::start(&[], &[]);
    let config = tempfile::tempdir().unwrap();
    let cfg = config.path().display().to_string();
    let cli = |args: &[&str]| {
        Test::daemon(&daemon)
            .env("XDG_CONFIG_HOME", &cfg)
            .args(args)
    };
    cli(&["notify", "example.com/cli", "a=1", "b=x=y"])
        .stdout("Recorded notice 1\n")
        .run();
    cli(&["notify", "--repeat-after", "1h", "example.com/cli"])
        .stdout("Recorded notice 1\n")
        .run();
    cli(&["notify", "example.com/cli", "novalue"])
        .stdout("")
        .stderr("error: data args must be in \"name=value\" format, not \"novalue\"\n")
        .status(1)
        .run();
    let uid = cobble_sys_uid();
    cli(&["notices", "--abs-time", "--type", "custom"])
        .stdout_glob(&format!(
            "ID   User  Type    Key              First                 Repeated              Occurrences\n\
             1    {uid:<4}  custom  example.com/cli  *Z  *Z  2\n"
        ))
        .run();
    cli(&["notice", "custom", "example.com/cli"])
        .stdout_glob(&format!(
            "id: \"1\"\nuser-id: {uid}\ntype: custom\nkey: example.com/cli\n\
             first-occurred: *Z\nlast-occurred: *Z\nlast-repeated: *Z\noccurrences: 2\n\
             repeat-after: 1h0m0s\nexpire-after: 168h0m0s\n"
        ))
        .run();
    cli(&["notice", "2"])
        .stderr("error: cannot find notice with ID \"2\"\n")
        .status(1)
        .run();
    // Acknowledged: listed no more until it repeats.
    cli(&["okay"]).run();
    cli(&["notices", "--type", "custom"])
        .stderr("No matching notices.\n")
        .run();
    cli(&["notices", "--type", "custom", "--timeout", "50ms"])
        .stderr("No matching notices after waiting 50ms.\n")
        .run();
    cli(&["notify", "example.com/cli", "c=3"])
        .stdout("Recorded notice 1\n")
        .run();
    cli(&["notices", "--type", "custom", "--timeout", "10s"])
        .stdout_contains("example.com/cli")
        .run();
    let state = std::fs::read_to_string(config.path().join("pebble/cli.json")).unwrap();
    let socket = daemon.pebble_dir().join(".pebble.socket");
    assert!(
        state.contains(&format!(
            "\"{}\":{{\"notices-last-listed\":",
            socket.display()
        )),
        "{state}"
    );
}

/// The uid this test runs as, which owns the notices it records.
fn cobble_sys_uid() -> u32 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|uid| uid.parse().ok())
        .unwrap()
}
