//! The client against a fake daemon that speaks exec's protocol over a unix socket.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::ws::{Message as WsMessage, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Notify;

use super::*;
use crate::ClientConfig;

/// What the fake daemon saw, and what it should answer.
#[derive(Default)]
struct Fake {
    /// The body of `POST /v1/exec`.
    request: Mutex<Option<serde_json::Value>>,
    /// Text frames received on `control`, in order.
    control: Mutex<Vec<String>>,
    /// Whether `control` ended with a close frame.
    control_closed_cleanly: Mutex<Option<bool>>,
    /// The order websockets were opened in.
    opened: Mutex<Vec<String>>,
    /// Told when the command "exits" (stdio has answered).
    exited: Notify,
    exited_flag: Mutex<bool>,
    /// Told when control has ended, one way or the other.
    control_ended: Notify,
    /// The exit code to report.
    exit_code: i64,
    /// The change error to report.
    change_err: String,
}

type Shared = Arc<Fake>;

fn envelope_error(status: StatusCode, message: &str) -> Response {
    let body = serde_json::json!({
        "type": "error",
        "status-code": status.as_u16(),
        "status": status.canonical_reason(),
        "result": {"message": message},
    });
    (status, axum::Json(body)).into_response()
}

async fn exec(State(fake): State<Shared>, body: Bytes) -> Response {
    let value: serde_json::Value = serde_json::from_slice(&body).unwrap();
    if value["command"][0] == "missing" {
        return envelope_error(
            StatusCode::BAD_REQUEST,
            "cannot find executable \"missing\"",
        );
    }
    *fake.request.lock().unwrap() = Some(value);
    let body = serde_json::json!({
        "type": "async", "status-code": 202, "status": "Accepted",
        "change": "1",
        "result": {"environment": {"PATH": "/bin"}, "task-id": "2", "working-dir": "/"},
    });
    (StatusCode::ACCEPTED, axum::Json(body)).into_response()
}

async fn websocket(
    State(fake): State<Shared>,
    Path((task, name)): Path<(String, String)>,
    upgrade: WebSocketUpgrade,
) -> Response {
    if task != "2" || !["control", "stdio", "stderr"].contains(&name.as_str()) {
        return envelope_error(StatusCode::NOT_FOUND, "cannot find task \"x\"");
    }
    fake.opened.lock().unwrap().push(name.clone());
    upgrade.on_upgrade(move |socket| async move {
        match name.as_str() {
            "control" => serve_control(fake, socket).await,
            "stdio" => serve_stdio(fake, socket).await,
            _ => serve_stderr(socket).await,
        }
    })
}

async fn serve_control(fake: Shared, mut socket: WebSocket) {
    let mut clean = false;
    while let Some(frame) = socket.recv().await {
        match frame {
            Ok(WsMessage::Text(text)) => fake.control.lock().unwrap().push(text.to_string()),
            Ok(WsMessage::Close(_)) => {
                clean = true;
                break;
            }
            Ok(_) => {}
            Err(_) => break,
        }
    }
    *fake.control_closed_cleanly.lock().unwrap() = Some(clean);
    fake.control_ended.notify_one();
}

/// Reads the input to its end, then answers it upper-cased, in two frames, and ends.
async fn serve_stdio(fake: Shared, mut socket: WebSocket) {
    let mut input = Vec::new();
    while let Some(Ok(frame)) = socket.recv().await {
        match frame {
            WsMessage::Binary(data) => input.extend_from_slice(&data),
            WsMessage::Text(text) if text.as_str() == END_MESSAGE => break,
            _ => {}
        }
    }
    let output = input.to_ascii_uppercase();
    let (first, second) = output.split_at(output.len() / 2);
    for part in [first, second] {
        let _ = socket
            .send(WsMessage::Binary(Bytes::copy_from_slice(part)))
            .await;
    }
    let _ = socket.send(WsMessage::text(END_MESSAGE)).await;
    *fake.exited_flag.lock().unwrap() = true;
    fake.exited.notify_waiters();
    // Like the daemon, keep the connection until the client goes.
    while let Some(Ok(_)) = socket.recv().await {}
}

async fn serve_stderr(mut socket: WebSocket) {
    let _ = socket
        .send(WsMessage::Binary(Bytes::from_static(b"oops\n")))
        .await;
    let _ = socket.send(WsMessage::text(END_MESSAGE)).await;
    while let Some(Ok(_)) = socket.recv().await {}
}

async fn wait_change(State(fake): State<Shared>) -> Response {
    loop {
        let notified = fake.exited.notified();
        if *fake.exited_flag.lock().unwrap() {
            break;
        }
        notified.await;
    }
    let mut change = serde_json::json!({
        "id": "1", "kind": "exec", "summary": "Execute command", "status": "Done",
        "ready": true, "spawn-time": "2026-01-01T00:00:00Z",
        "tasks": [{
            "id": "2", "kind": "exec", "summary": "Execute command", "status": "Done",
            "progress": {"label": "", "done": 1, "total": 1},
            "spawn-time": "2026-01-01T00:00:00Z",
            "data": {"exit-code": fake.exit_code},
        }],
    });
    if !fake.change_err.is_empty() {
        change["err"] = fake.change_err.clone().into();
        change["status"] = "Error".into();
    }
    let body = serde_json::json!({
        "type": "sync", "status-code": 200, "status": "OK", "result": change,
    });
    axum::Json(body).into_response()
}

/// Serves the fake on a fresh socket; the directory keeps the socket alive.
async fn serve(fake: Fake) -> (Client, Shared, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join(".pebble.socket");
    let listener = tokio::net::UnixListener::bind(&socket).unwrap();
    let fake = Arc::new(fake);
    let router = Router::new()
        .route("/v1/exec", post(exec))
        .route("/v1/tasks/{task}/websocket/{name}", get(websocket))
        .route("/v1/changes/{id}/wait", get(wait_change))
        .with_state(fake.clone());
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    let client = Client::new(ClientConfig::socket(&socket)).unwrap();
    (client, fake, dir)
}

async fn read_all(output: &mut ExecOutput) -> Vec<u8> {
    let mut data = Vec::new();
    output.read_to_end(&mut data).await.unwrap();
    data
}

#[tokio::test]
async fn input_output_and_exit_code_travel_the_websockets() {
    let (client, fake, _dir) = serve(Fake {
        exit_code: 3,
        ..Fake::default()
    })
    .await;
    let mut options = ExecOptions::new(["cat"]);
    options.split_stderr = true;
    options.timeout = Some(Duration::from_millis(1500));
    let mut process = client.exec(&options).await.unwrap();
    assert_eq!(process.change_id(), "1");
    assert_eq!(process.task_id(), "2");

    let mut stdin = process.stdin.take().unwrap();
    stdin.write_all(b"hello ").await.unwrap();
    stdin.write_all(b"world").await.unwrap();
    stdin.shutdown().await.unwrap();
    let mut stdout = process.stdout.take().unwrap();
    let mut stderr = process.stderr.take().unwrap();
    assert_eq!(read_all(&mut stdout).await, b"HELLO WORLD");
    assert_eq!(read_all(&mut stderr).await, b"oops\n");
    assert_eq!(process.wait().await.unwrap(), 3);

    assert_eq!(
        *fake.opened.lock().unwrap(),
        ["control", "stdio", "stderr"],
        "Pebble's clients open control first"
    );
    assert_eq!(
        fake.request.lock().unwrap().clone().unwrap(),
        serde_json::json!({
            "command": ["cat"], "environment": {}, "timeout": "1.5s", "terminal": false,
            "interactive": false, "split-stderr": true, "width": 0, "height": 0,
        })
    );
}

#[tokio::test]
async fn control_messages_are_sent_in_order_and_closed_cleanly_after_wait() {
    let (client, fake, _dir) = serve(Fake::default()).await;
    let mut options = ExecOptions::new(["sh"]);
    options.terminal = true;
    let mut process = client.exec(&options).await.unwrap();
    let control = process.control();
    control.resize(100, 30).await.unwrap();
    control.signal("SIGINT").await.unwrap();
    drop(process.stdin.take());
    let mut stdout = process.stdout.take().unwrap();
    assert_eq!(read_all(&mut stdout).await, b"");
    let ended = fake.control_ended.notified();
    assert_eq!(process.wait().await.unwrap(), 0);
    ended.await;
    assert_eq!(
        *fake.control.lock().unwrap(),
        [
            r#"{"command":"resize","resize":{"width":100,"height":30}}"#,
            r#"{"command":"signal","signal":{"name":"SIGINT"}}"#,
        ]
    );
    assert_eq!(*fake.control_closed_cleanly.lock().unwrap(), Some(true));
    assert!(
        control.signal("SIGTERM").await.is_err(),
        "a closed control refuses"
    );
}

#[tokio::test]
async fn a_dropped_process_drops_control_without_a_close_frame() {
    let (client, fake, _dir) = serve(Fake::default()).await;
    let process = client
        .exec(&ExecOptions::new(["sleep", "9"]))
        .await
        .unwrap();
    let ended = fake.control_ended.notified();
    drop(process);
    ended.await;
    assert_eq!(*fake.control_closed_cleanly.lock().unwrap(), Some(false));
}

#[tokio::test]
async fn a_dropped_stdin_still_ends_the_input() {
    let (client, _fake, _dir) = serve(Fake::default()).await;
    let mut process = client.exec(&ExecOptions::new(["cat"])).await.unwrap();
    let mut stdin = process.stdin.take().unwrap();
    stdin.write_all(b"abc").await.unwrap();
    drop(stdin);
    let mut stdout = process.stdout.take().unwrap();
    assert_eq!(read_all(&mut stdout).await, b"ABC");
    assert_eq!(process.wait().await.unwrap(), 0);
}

#[tokio::test]
async fn a_failed_change_is_its_error() {
    let err = "cannot perform the following tasks:\n- Execute command \"sleep\" (timed out after 1s: context deadline exceeded)";
    let (client, _fake, _dir) = serve(Fake {
        exit_code: -1,
        change_err: err.into(),
        ..Fake::default()
    })
    .await;
    let mut process = client.exec(&ExecOptions::new(["sleep"])).await.unwrap();
    drop(process.stdin.take());
    let mut stdout = process.stdout.take().unwrap();
    read_all(&mut stdout).await;
    let failure = process.wait().await.unwrap_err();
    assert!(matches!(failure, Error::Change(_)));
    assert_eq!(failure.to_string(), err);
}

#[tokio::test]
async fn a_refused_command_is_the_daemons_error() {
    let (client, _fake, _dir) = serve(Fake::default()).await;
    let err = client
        .exec(&ExecOptions::new(["missing"]))
        .await
        .unwrap_err();
    assert_eq!(err.status_code(), Some(400));
    assert_eq!(err.to_string(), "cannot find executable \"missing\"");
}

#[tokio::test]
async fn a_refused_handshake_names_the_websocket_and_the_reason() {
    let (client, _fake, _dir) = serve(Fake::default()).await;
    let Err(err) = client.task_websocket("9", "stdio").await else {
        panic!("the handshake succeeded");
    };
    assert_eq!(
        err.to_string(),
        "cannot connect to \"stdio\" websocket: cannot find task \"x\""
    );
}

#[test]
fn timeouts_are_written_as_go_durations() {
    assert_eq!(go_duration(Duration::from_secs(10)), "10s");
    assert_eq!(go_duration(Duration::from_millis(1500)), "1.5s");
    assert_eq!(go_duration(Duration::from_millis(1)), "0.001s");
    assert_eq!(go_duration(Duration::from_nanos(1)), "0.000000001s");
}

/// A frame as the daemon sends it: unmasked.
fn server_frame(fin: bool, opcode: Opcode, payload: &[u8]) -> Vec<u8> {
    let mut header = [0u8; MAX_HEADER];
    let used = Header {
        fin,
        opcode,
        mask: None,
        len: payload.len() as u64,
    }
    .encode(&mut header);
    [&header[..used], payload].concat()
}

#[tokio::test]
async fn output_takes_fragments_control_frames_and_bytes_read_past_the_handshake() {
    let (mut daemon, connection) = tokio::io::duplex(1 << 16);
    let mut frames = server_frame(false, Opcode::Binary, b"hel");
    frames.extend(server_frame(true, Opcode::Ping, b"?"));
    frames.extend(server_frame(true, Opcode::Continuation, b"lo"));
    frames.extend(server_frame(false, Opcode::Text, br#"{"command":"#));
    frames.extend(server_frame(true, Opcode::Continuation, br#""end"}"#));
    frames.extend(server_frame(true, Opcode::Binary, b"after the end"));
    // The first five bytes came with the handshake's answer.
    let read_past = BytesMut::from(&frames[..5]);
    daemon.write_all(&frames[5..]).await.unwrap();
    let mut output = ExecOutput::new(Box::new(connection), read_past);
    assert_eq!(read_all(&mut output).await, b"hello");
}

#[tokio::test]
async fn a_large_frame_arrives_whole_through_small_reads_and_a_lost_connection_ends_output() {
    let (mut daemon, connection) = tokio::io::duplex(1 << 16);
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 241) as u8).collect();
    let frame = server_frame(true, Opcode::Binary, &data);
    let writer = tokio::spawn(async move {
        daemon.write_all(&frame).await.unwrap();
        // Gone without `end`.
    });
    let mut output = ExecOutput::new(Box::new(connection), BytesMut::new());
    let mut got = Vec::new();
    let mut buf = [0u8; 1000];
    loop {
        let n = output.read(&mut buf).await.unwrap();
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
    }
    writer.await.unwrap();
    assert_eq!(got, data);
}

#[tokio::test]
async fn input_goes_in_masked_binary_frames_and_ends_with_end() {
    let (mut daemon, connection) = tokio::io::duplex(1 << 16);
    let data: Vec<u8> = (0..2_500_000u32).map(|i| (i % 239) as u8).collect();
    let reader = tokio::spawn(async move {
        let mut all = Vec::new();
        daemon.read_to_end(&mut all).await.unwrap();
        all
    });
    let mut stdin = ExecStdin::new(Box::new(connection));
    stdin.write_all(&data).await.unwrap();
    stdin.shutdown().await.unwrap();
    drop(stdin);
    let wire = reader.await.unwrap();
    let (mut at, mut got, mut keys) = (0, Vec::new(), std::collections::HashSet::new());
    let mut last = None;
    while at < wire.len() {
        let (header, used) = Header::parse(&wire[at..]).unwrap().unwrap();
        let key = header.mask.expect("a client's frames are masked");
        keys.insert(key);
        let start = at + used;
        let mut payload = wire[start..start + header.len as usize].to_vec();
        wire::apply_mask(&mut payload, key, 0);
        assert!(header.fin);
        assert!(payload.len() <= MAX_INPUT_FRAME);
        if header.opcode == Opcode::Binary {
            got.extend(payload);
        } else {
            last = Some((header.opcode, payload));
        }
        at = start + header.len as usize;
    }
    assert_eq!(got, data);
    assert_eq!(last, Some((Opcode::Text, END_MESSAGE.as_bytes().to_vec())));
    assert!(keys.len() > 1, "each frame has a key of its own");
}
