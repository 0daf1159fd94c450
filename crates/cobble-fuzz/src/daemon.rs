//! Targets that need a running daemon: request bodies (and queries) of every endpoint, and
//! the control frames of exec's websockets.
//!
//! One real daemon serves every input of a process: started in this process on a temporary
//! directory with `--hold`, reached over its unix socket like any client. When the process
//! runs as root it first becomes `nobody`, so that whatever a request asks (a layer's command,
//! an exec, a file removal) runs without privileges; the daemon then sees its own uid on the
//! socket, which makes every request an admin's, as root's would be.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use arbitrary::{Arbitrary, Unstructured};
use cobble_client::{Client, ClientConfig, Method};
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

/// A request the daemon has not answered in this time is hung. Generous: a `wait` may
/// legitimately last until a start's okay delay or an exec's websocket timeout has passed.
const ANSWER: Duration = Duration::from_secs(20);

struct Harness {
    dir: PathBuf,
    socket: PathBuf,
    client: Client,
    runtime: tokio::runtime::Runtime,
    stop: tokio_util::sync::CancellationToken,
    daemon: Mutex<Option<std::thread::JoinHandle<i32>>>,
}

static HARNESS: OnceLock<Harness> = OnceLock::new();

/// Stops the daemon (which stops what it started) and removes its directory. Targets must
/// not run afterwards in this process.
pub fn shutdown() {
    let Some(h) = HARNESS.get() else {
        return;
    };
    h.stop.cancel();
    let daemon = h.daemon.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Some(daemon) = daemon {
        let _ = daemon.join();
    }
    let _ = std::fs::remove_dir_all(&h.dir);
}

const LAYER: &str = "\
services:
    quick:
        override: replace
        command: true
        on-success: ignore
    sleeper:
        override: replace
        command: sleep 20
    failing:
        override: replace
        command: sh -c 'exit 3'
        backoff-delay: 50ms
checks:
    chk:
        override: replace
        period: 5s
        exec:
            command: 'true'
";

fn harness() -> &'static Harness {
    HARNESS.get_or_init(|| {
        drop_privileges();
        let dir = tempfile::Builder::new()
            .prefix("cobble-fuzz-daemon.")
            .tempdir()
            .expect("a daemon directory")
            .keep();
        std::fs::create_dir_all(dir.join("layers")).expect("layers/");
        std::fs::create_dir_all(dir.join("files")).expect("files/");
        std::fs::write(dir.join("layers/001-base.yaml"), LAYER).expect("a layer");
        let socket = dir.join(".pebble.socket");
        let opts = cobble_daemon::RunOptions {
            pebble_dir: dir.clone(),
            socket_path: socket.clone(),
            create_dirs: true,
            hold: true,
            persist: true,
            ..Default::default()
        };
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let stop = tokio_util::sync::CancellationToken::new();
        let embedding = cobble_daemon::Embedding {
            ready: Some(ready_tx),
            stop: stop.clone(),
            silent: true,
        };
        let daemon = std::thread::spawn(move || cobble_daemon::run_embedded(opts, embedding));
        ready_rx.blocking_recv().expect("the daemon starts");
        // The daemon's hook logs panics to its (silenced) log; a failed property must show.
        std::panic::set_hook(Box::new(|info| eprintln!("{info}")));
        let client = Client::new(ClientConfig::socket(&socket)).expect("a client");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        Harness {
            dir,
            socket,
            client,
            runtime,
            stop,
            daemon: Mutex::new(Some(daemon)),
        }
    })
}

/// As root, become `nobody` (and its group, with no supplementary groups) for good.
fn drop_privileges() {
    use nix::unistd::{Gid, Uid, setgid, setgroups, setuid};
    if !Uid::effective().is_root() {
        return;
    }
    setgroups(&[]).expect("setgroups");
    setgid(Gid::from_raw(65534)).expect("setgid nobody");
    setuid(Uid::from_raw(65534)).expect("setuid nobody");
}

/// Sends one request and checks the answer: in time, never a 5xx (but the two of Pebble's
/// contract: `/v1/health`'s 502 for a failing check, and a change wait's 504 when its
/// timeout passes), and an envelope whose `status-code` is the HTTP status (the metrics
/// text and the lines of `/v1/logs` are not enveloped).
fn request(h: &Harness, method: Method, path: &str, body: Option<Vec<u8>>) -> (u16, Value) {
    let what = format!("{method} {path}");
    let raw = crate::watchdog::guard("a daemon request", ANSWER + Duration::from_secs(5), || {
        h.runtime.block_on(async {
            tokio::time::timeout(ANSWER, h.client.raw_request(method, path, body)).await
        })
    });
    let raw = match raw {
        Ok(Ok(raw)) => raw,
        Ok(Err(e)) => panic!("{what}: no answer: {e}"),
        Err(_) => panic!("{what}: no answer in {ANSWER:?}"),
    };
    let status = raw.status_code;
    let health = path.starts_with("/v1/health") && status == 502;
    let wait = path.contains("/wait") && status == 504;
    assert!(
        status < 500 || health || wait,
        "{what}: {status} {}",
        String::from_utf8_lossy(&raw.body)
    );
    if path.starts_with("/v1/metrics") && status == 200 {
        return (status, Value::Null);
    }
    // Logs are lines of JSON, one object per log line (none at all is no lines).
    if path.starts_with("/v1/logs") && status == 200 {
        for line in raw.body.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            let entry: Value = serde_json::from_slice(line)
                .unwrap_or_else(|e| panic!("{what}: a log line that is not JSON ({e}): {line:?}"));
            assert!(entry["service"].is_string(), "{what}: log line {entry}");
        }
        return (status, Value::Null);
    }
    let envelope: Value = serde_json::from_slice(&raw.body).unwrap_or_else(|e| {
        panic!(
            "{what}: {status} with a body that is not JSON ({e}): {:?}",
            raw.body
        )
    });
    assert_eq!(
        envelope["status-code"].as_u64(),
        Some(u64::from(status)),
        "{what}: envelope {envelope}"
    );
    assert!(
        matches!(envelope["type"].as_str(), Some("sync" | "async" | "error")),
        "{what}: envelope {envelope}"
    );
    if let Some(id) = envelope["change"].as_str().and_then(|id| id.parse().ok()) {
        LAST_CHANGE.store(id, Ordering::Relaxed);
    }
    (status, envelope)
}

/// The daemon still answers a plain request.
fn alive(h: &Harness) {
    let (status, _) = request(h, Method::GET, "/v1/system-info", None);
    assert_eq!(status, 200, "the daemon stopped answering");
}

// ---------------------------------------------------------------------------------------------
// Request bodies

/// Requests no route takes, beside the router's own (see [`endpoints`]).
const UNROUTED: &[(&str, &str)] = &[
    ("PUT", "/v1/services"),
    ("DELETE", "/v1/files"),
    ("POST", "/v1/plan"),
    ("GET", "/v1/nothing-here"),
];

/// Every route of the daemon's router, as it lists them itself, and [`UNROUTED`].
fn endpoints() -> &'static [(&'static str, &'static str)] {
    static ENDPOINTS: OnceLock<Vec<(&'static str, &'static str)>> = OnceLock::new();
    ENDPOINTS.get_or_init(|| {
        let mut all = cobble_daemon::api_routes();
        all.extend_from_slice(UNROUTED);
        all
    })
}

/// `path` with its parameters filled: a recent change, a service, a task's websocket.
fn fill_path(u: &mut Unstructured<'_>, path: &str) -> arbitrary::Result<String> {
    let mut path = path.replace(
        "/v1/changes/{id}",
        &format!("/v1/changes/{}", last_change()),
    );
    for (param, choices) in [
        ("{id}", &["1", "2", "0", "x"][..]),
        ("{name}", &["quick", "nope"][..]),
        ("{task_id}", &["1", "2", "999"][..]),
        ("{websocket}", &["control", "stdio", "stderr", "other"][..]),
    ] {
        if path.contains(param) {
            path = path.replace(param, u.choose(choices)?);
        }
    }
    Ok(path)
}

const KEYS: &[&str] = &[
    "action",
    "services",
    "names",
    "signal",
    "layer",
    "label",
    "combine",
    "inner",
    "format",
    "level",
    "checks",
    "command",
    "environment",
    "working-dir",
    "timeout",
    "user-id",
    "user",
    "group-id",
    "group",
    "terminal",
    "interactive",
    "split-stderr",
    "width",
    "height",
    "service-context",
    "paths",
    "path",
    "make-dirs",
    "permissions",
    "recursive",
    "files",
    "select",
    "for",
    "pattern",
    "itself",
    "ready",
    "id",
];

const WORDS: &[&str] = &[
    "start",
    "stop",
    "restart",
    "replan",
    "autostart",
    "add",
    "abort",
    "make-dirs",
    "remove",
    "read",
    "write",
    "list",
    "quick",
    "sleeper",
    "failing",
    "nope",
    "chk",
    "alive",
    "ready",
    "yaml",
    "json",
    "all",
    "in-progress",
    "SIGHUP",
    "SIGUSR1",
    "SIGTERM",
    "SIGSTOP",
    "SIGCONT",
    "HUP",
    "sigterm",
    "SIGNOPE",
    "1s",
    "-1s",
    "0",
    "1h",
    "10ms",
    "bogus",
    "",
    "true",
    "cat",
    "sleep",
    "0.2",
    "/",
    "relative",
    "/nonexistent-cobble-fuzz/x",
    "services:\n    quick:\n        override: merge\n        command: sleep 0.1\n",
    "services:\n    extra:\n        override: replace\n        command: true\n",
    "checks:\n    chk:\n        override: merge\n        period: 1s\n",
    "services: [",
    "\u{0}",
    "é",
];

/// A JSON value shaped like the API's request bodies: objects with the API's keys, values
/// from its vocabulary, paths inside the daemon's scratch directory.
fn gen_value(u: &mut Unstructured<'_>, h: &Harness, depth: u32) -> arbitrary::Result<Value> {
    let scratch = h.dir.join("files");
    let kind = if depth > 2 {
        u.int_in_range(0..=5)?
    } else {
        u.int_in_range(0..=8)?
    };
    Ok(match kind {
        0 => Value::Null,
        1 => Value::Bool(u.arbitrary()?),
        2 => json!(i64::arbitrary(u)?),
        3 => json!(f64::arbitrary(u)?.clamp(-1e300, 1e300)),
        4 => Value::from(*u.choose(WORDS)?),
        5 => {
            let name = u.choose(&["a", "b/c", "../x", "", "d/"])?;
            Value::from(format!("{}/{name}", scratch.display()))
        }
        6 => Value::from(<&str>::arbitrary(u)?),
        7 => {
            let mut items = Vec::new();
            for _ in 0..u.int_in_range(0..=3)? {
                items.push(gen_value(u, h, depth + 1)?);
            }
            Value::Array(items)
        }
        _ => gen_object(u, h, depth + 1)?,
    })
}

fn gen_object(u: &mut Unstructured<'_>, h: &Harness, depth: u32) -> arbitrary::Result<Value> {
    let mut map = serde_json::Map::new();
    for _ in 0..u.int_in_range(0..=5)? {
        let key = (*u.choose(KEYS)?).to_owned();
        map.insert(key, gen_value(u, h, depth)?);
    }
    Ok(Value::Object(map))
}

fn percent_encode(text: &str) -> String {
    let mut out = String::new();
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The most recent change ID the daemon has given out, for paths that name one.
static LAST_CHANGE: AtomicU64 = AtomicU64::new(1);

fn last_change() -> String {
    LAST_CHANGE.load(Ordering::Relaxed).to_string()
}

/// Every endpoint, with generated queries and bodies (API-shaped JSON, arbitrary JSON
/// text, arbitrary bytes): answered in time, never with a 5xx, always with a well-formed
/// envelope, and the daemon keeps answering.
pub fn api_bodies(u: &mut Unstructured<'_>) -> arbitrary::Result<()> {
    let h = harness();
    for _ in 0..u.int_in_range(1..=4)? {
        let (method, path) = *u.choose(endpoints())?;
        let method = Method::from_bytes(method.as_bytes()).expect("a method");
        let mut path = fill_path(u, path)?;
        let mut query = Vec::new();
        for _ in 0..u.int_in_range(0..=3)? {
            let key = *u.choose(KEYS)?;
            let value = if u.ratio(1, 4)? {
                <&str>::arbitrary(u)?.to_owned()
            } else {
                match gen_value(u, h, 3)? {
                    Value::String(s) => s,
                    other => other.to_string(),
                }
            };
            query.push(format!(
                "{}={}",
                percent_encode(key),
                percent_encode(&value)
            ));
        }
        // A wait without a bound, or a log that follows, would legitimately outlast the
        // hang limit.
        if path.ends_with("/wait") || path.starts_with("/v1/notices") {
            query.retain(|q| !q.starts_with("timeout="));
            query.push("timeout=2s".into());
        }
        if path.starts_with("/v1/logs") {
            query.retain(|q| !q.starts_with("follow="));
        }
        if !query.is_empty() {
            path = format!("{path}?{}", query.join("&"));
        }
        let body = match u.int_in_range(0..=5)? {
            0 => None,
            1 => Some(take(u, 512)?),
            2 => Some(gen_value(u, h, 0)?.to_string().into_bytes()),
            _ => Some(gen_object(u, h, 0)?.to_string().into_bytes()),
        };
        request(h, method, &path, body);
    }
    alive(h);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Hostile request bodies

/// The endpoints that decode a JSON body, the key of theirs a hostile value goes under, and
/// the words before the decoder's error.
const DECODERS: &[(&str, &str, &str)] = &[
    (
        "/v1/services",
        "services",
        "cannot decode data from request body",
    ),
    (
        "/v1/checks",
        "checks",
        "cannot decode data from request body",
    ),
    (
        "/v1/changes/{id}",
        "action",
        "cannot decode data from request body",
    ),
    ("/v1/layers", "layer", "cannot decode request body"),
    ("/v1/exec", "environment", "cannot decode request body"),
    ("/v1/identities", "identities", "cannot decode request body"),
    ("/v1/notices", "data", "cannot decode request body"),
];

/// Bodies built to hurt the decoder: nesting around and past Go's limit (at the top or
/// under a payload's key, closed or cut, arrays, objects or both), arrays and strings as
/// long as the daemon takes a body, one key repeated many times, and text that is not UTF-8.
/// Each is answered in time with a 4xx in a well-formed envelope (a 5xx is a failure, see
/// [`request`]); nesting past the limit is refused in Go's words, nesting within it never is;
/// and the daemon keeps answering.
pub fn hostile_bodies(u: &mut Unstructured<'_>) -> arbitrary::Result<()> {
    use crate::hostile::{LIMIT, depth};
    let h = harness();
    let (path, key, context) = *u.choose(DECODERS)?;
    // A change that exists: the daemon looks it up before it reads the body.
    static A_CHANGE: std::sync::Once = std::sync::Once::new();
    A_CHANGE.call_once(|| {
        let start = json!({"action": "start", "services": ["quick"]}).to_string();
        let (status, envelope) = request(h, Method::POST, "/v1/services", Some(start.into_bytes()));
        assert_eq!(status, 202, "a change: {envelope}");
    });
    let path = &path.replace("{id}", &last_change());
    let at_top: bool = u.arbitrary()?;
    // The levels the payload's object adds before the hostile value.
    let outer = usize::from(!at_top);
    let mut past_limit = None;
    let value = match u.int_in_range(0..=4)? {
        0 => {
            let n = depth(u)?;
            let (open, close, per_level, first) = *u.choose(&[
                ("[", "]", 1, '['),
                ("{\"a\":", "}", 1, '{'),
                ("[{\"a\":", "}]", 2, '['),
            ])?;
            let closed: bool = u.arbitrary()?;
            if outer + n * per_level > LIMIT {
                // The byte that opens level LIMIT + 1.
                let opener = if per_level == 2 && (LIMIT - outer) % 2 == 1 {
                    '{'
                } else {
                    first
                };
                let mut text = open.repeat(n);
                if closed {
                    text.push_str(&close.repeat(n));
                }
                let body = wrap(at_top, key, &text);
                let (status, envelope) = request(h, Method::POST, path, Some(body));
                let message = envelope["result"]["message"].as_str().unwrap_or_default();
                assert_eq!(status, 400, "{path}: nesting past {LIMIT}: {envelope}");
                assert_eq!(
                    message,
                    format!("{context}: invalid character '{opener}' exceeded max depth"),
                    "{path}"
                );
                alive(h);
                return Ok(());
            }
            past_limit = Some(false);
            let mut text = open.repeat(n);
            if closed {
                text.push_str(&close.repeat(n));
            }
            text
        }
        // A long array of short values, up to about the body limit.
        1 => {
            let n = u.int_in_range(1..=400_000)?;
            let item = *u.choose(&["1", "\"x\"", "null", "[]", "{}", "\"\\u00e9\""])?;
            format!("[{}]", vec![item; n].join(","))
        }
        // A long string, around the body limit.
        2 => {
            let n = *u.choose(&[1, 1 << 20, (4 << 20) - 64, (4 << 20) + 1])?;
            let c = *u.choose(&["a", "\\n", "\\u0000", "é"])?;
            format!("\"{}\"", c.repeat(n))
        }
        // The same key, many times over (the last wins, in Go).
        3 => {
            let n = u.int_in_range(1..=100_000)?;
            let member = format!("\"{key}\":[]");
            format!("{{{}}}", vec![member; n].join(","))
        }
        // Bytes that are not UTF-8, inside a string.
        _ => {
            let bad = take(u, 16)?;
            let mut body = format!("{{\"{key}\":\"").into_bytes();
            body.extend(bad.iter().map(|b| b | 0x80));
            body.extend_from_slice(b"\"}");
            request(h, Method::POST, path, Some(body));
            alive(h);
            return Ok(());
        }
    };
    let body = wrap(at_top, key, &value);
    let (status, envelope) = request(h, Method::POST, path, Some(body));
    let message = envelope["result"]["message"].as_str().unwrap_or_default();
    if past_limit == Some(false) {
        assert!(
            !message.contains("exceeded max depth"),
            "{path}: nesting within {LIMIT} refused for its depth: {message}"
        );
    }
    // Nothing here is a valid request but a few long-but-legal ones; none may be slow to
    // refuse or leave the daemon unwell.
    assert!(status < 500, "{path}: {status} {envelope}");
    alive(h);
    Ok(())
}

/// `value` as the whole body, or under `key` in the payload's object.
fn wrap(at_top: bool, key: &str, value: &str) -> Vec<u8> {
    if at_top {
        value.as_bytes().to_vec()
    } else {
        format!("{{\"{key}\": {value}}}").into_bytes()
    }
}

// ---------------------------------------------------------------------------------------------
// Exec control frames

type Socket = tokio_tungstenite::WebSocketStream<tokio::net::UnixStream>;

async fn websocket(h: &Harness, task: &str, name: &str) -> Socket {
    let stream = tokio::net::UnixStream::connect(&h.socket)
        .await
        .expect("the daemon's socket");
    let url = format!("ws://localhost/v1/tasks/{task}/websocket/{name}");
    let (socket, _) = tokio_tungstenite::client_async(url, stream)
        .await
        .unwrap_or_else(|e| panic!("websocket {name}: {e}"));
    socket
}

/// Up to `max` raw bytes of the input.
fn take(u: &mut Unstructured<'_>, max: usize) -> arbitrary::Result<Vec<u8>> {
    let len = u.int_in_range(0..=max)?.min(u.len());
    Ok(u.bytes(len)?.to_vec())
}

fn gen_control_command(u: &mut Unstructured<'_>) -> arbitrary::Result<Value> {
    Ok(match u.int_in_range(0..=6)? {
        0 => json!({"command": "signal", "signal": {"name": *u.choose(&[
                "SIGHUP", "SIGUSR1", "SIGWINCH", "SIGCONT", "SIGSTOP", "HUP", "sigint",
                "SIGNOPE", "", "SIGRTMIN+1", "9",
            ])?}}),
        1 => json!({"command": "resize", "resize": {
            "width": u.choose(&[json!(80), json!(0), json!(65536), json!(-1), json!(u32::MAX), json!("80"), json!(1.5)])?,
            "height": u.choose(&[json!(24), json!(0), json!(1 << 20), json!(null)])?,
        }}),
        2 => json!({"command": "signal"}),
        3 => json!({"command": "resize"}),
        4 => json!({"command": *u.choose(&["end", "", "SIGNAL", "exit"])?}),
        5 => json!({"command": ["signal"], "signal": "SIGHUP"}),
        _ => json!(<&str>::arbitrary(u)?),
    })
}

fn gen_control_frame(u: &mut Unstructured<'_>) -> arbitrary::Result<Message> {
    Ok(match u.int_in_range(0..=9)? {
        0 => Message::Binary(take(u, 64)?.into()),
        1 => Message::Text(<&str>::arbitrary(u)?.to_owned().into()),
        2 => Message::Ping(b"ping".to_vec().into()),
        3 => Message::Pong(Vec::new().into()),
        4 => Message::Binary(gen_control_command(u)?.to_string().into_bytes().into()),
        _ => Message::Text(gen_control_command(u)?.to_string().into()),
    })
}

/// Exec's control websocket under generated frames (commands good and bad, text, binary,
/// pings): the command runs until it is ended, then the change finishes in time, whether the
/// end is a `SIGKILL` sent over control or control dropping without a close; and the daemon
/// keeps answering.
pub fn exec_control(u: &mut Unstructured<'_>) -> arbitrary::Result<()> {
    let h = harness();
    let terminal: bool = u.arbitrary()?;
    let split = !terminal && u.arbitrary()?;
    let mut frames = Vec::new();
    for _ in 0..u.int_in_range(0..=12)? {
        frames.push(gen_control_frame(u)?);
    }
    let kill_over_control: bool = u.arbitrary()?;
    let body = json!({
        "command": ["cat"],
        "terminal": terminal,
        "interactive": terminal,
        "split-stderr": split,
        "timeout": "30s",
    });
    let (status, envelope) = request(
        h,
        Method::POST,
        "/v1/exec",
        Some(body.to_string().into_bytes()),
    );
    assert_eq!(status, 202, "exec refused: {envelope}");
    let change = envelope["change"].as_str().expect("a change").to_owned();
    let task = envelope["result"]["task-id"]
        .as_str()
        .expect("a task")
        .to_owned();
    crate::watchdog::guard("an exec session", ANSWER + Duration::from_secs(5), || {
        h.runtime.block_on(async {
            let control = websocket(h, &task, "control").await;
            let stdio = websocket(h, &task, "stdio").await;
            let stderr = if split {
                Some(websocket(h, &task, "stderr").await)
            } else {
                None
            };
            let (mut control_tx, control_rx) = control.split();
            for frame in frames {
                if control_tx.send(frame).await.is_err() {
                    break;
                }
            }
            if kill_over_control {
                let kill = json!({"command": "signal", "signal": {"name": "SIGKILL"}});
                let _ = control_tx
                    .send(Message::Text(kill.to_string().into()))
                    .await;
                // Read what the daemon says on control until it closes.
                let mut control_rx = control_rx;
                let _ = tokio::time::timeout(ANSWER, async {
                    while let Some(Ok(_)) = control_rx.next().await {}
                })
                .await;
            } else {
                // Gone without a close: the daemon must end the command itself.
                drop(control_tx.reunite(control_rx).expect("the same socket"));
            }
            drop(stdio);
            drop(stderr);
        })
    });
    let (status, envelope) = request(
        h,
        Method::GET,
        &format!("/v1/changes/{change}/wait?timeout=15s"),
        None,
    );
    assert_eq!(status, 200, "exec's change: {envelope}");
    assert_eq!(
        envelope["result"]["ready"].as_bool(),
        Some(true),
        "exec's change is not over: {envelope}"
    );
    alive(h);
    Ok(())
}
