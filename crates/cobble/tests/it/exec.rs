//! Exec over raw websockets, as Pebble's protocol has them: `POST /v1/exec`, then
//! `ws://localhost/v1/tasks/<id>/websocket/{control,stdio,stderr}` on the daemon's unix
//! socket. Binary frames carry data, `{"command":"end"}` text frames end a stream in either
//! direction, and `control` carries signals and terminal resizes.

use std::time::Duration;

use cobble_client::Method;
use cobble_client::types::ChangeInfo;
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::UnixStream;
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_tungstenite::{WebSocketStream, client_async};

use crate::fixture::{Daemon, client, free_port, rt, wait_for};

/// Bounds every wait on the daemon; nothing here should come close.
const LONG: Duration = Duration::from_secs(20);

type Ws = WebSocketStream<UnixStream>;

/// POSTs an exec request; returns the status and the envelope.
async fn post_exec(daemon: &Daemon, body: &Value) -> (u16, Value) {
    let response = client(daemon)
        .raw_request(
            Method::POST,
            "/v1/exec",
            Some(serde_json::to_vec(body).unwrap()),
        )
        .await
        .expect("request");
    let envelope = serde_json::from_slice(&response.body).expect("JSON envelope");
    (response.status_code, envelope)
}

/// An accepted exec: its change and task.
struct Exec {
    change: String,
    task: String,
    result: Value,
}

async fn start(daemon: &Daemon, body: Value) -> Exec {
    let (status, envelope) = post_exec(daemon, &body).await;
    assert_eq!(status, 202, "{body}: {envelope}");
    assert_eq!(envelope["type"], "async");
    Exec {
        change: envelope["change"].as_str().expect("change").to_owned(),
        task: envelope["result"]["task-id"]
            .as_str()
            .expect("task-id")
            .to_owned(),
        result: envelope["result"].clone(),
    }
}

/// Opens websocket `id` of task `task`.
async fn connect(daemon: &Daemon, task: &str, id: &str) -> Result<Ws, tungstenite::Error> {
    let socket = daemon.pebble_dir().join(".pebble.socket");
    let stream = UnixStream::connect(&socket).await.expect("socket");
    let url = format!("ws://localhost/v1/tasks/{task}/websocket/{id}");
    client_async(url, stream).await.map(|(ws, _)| ws)
}

/// The HTTP status with which a websocket connect is refused.
async fn refused(daemon: &Daemon, task: &str, id: &str) -> u16 {
    match connect(daemon, task, id).await {
        Ok(_) => panic!("websocket {id} of task {task} connected"),
        Err(tungstenite::Error::Http(response)) => response.status().as_u16(),
        Err(e) => panic!("websocket {id} of task {task}: {e}"),
    }
}

/// The status and message of a plain GET of a websocket URL (the errors a client's
/// handshake would get, readable).
async fn get_error(daemon: &Daemon, task: &str, id: &str) -> (u16, String) {
    let response = client(daemon)
        .raw_request(
            Method::GET,
            &format!("/v1/tasks/{task}/websocket/{id}"),
            None,
        )
        .await
        .expect("request");
    let envelope: Value = serde_json::from_slice(&response.body).expect("JSON envelope");
    (
        response.status_code,
        envelope["result"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
    )
}

async fn send_bytes(ws: &mut Ws, data: &[u8]) {
    ws.send(Message::binary(data.to_vec())).await.expect("send");
}

async fn send_end(ws: &mut Ws) {
    ws.send(Message::text(r#"{"command":"end"}"#))
        .await
        .expect("send end");
}

/// Everything a stream carries up to its `end` frame.
async fn read_to_end(ws: &mut Ws) -> Vec<u8> {
    let mut data = Vec::new();
    tokio::time::timeout(LONG, async {
        loop {
            match ws.next().await {
                Some(Ok(Message::Binary(bytes))) => data.extend_from_slice(&bytes),
                Some(Ok(Message::Text(text))) => {
                    let command: Value = serde_json::from_str(&text).expect("JSON command");
                    assert_eq!(command, json!({"command": "end"}));
                    return;
                }
                Some(Ok(_)) => {}
                other => panic!("stream ended without an end frame: {other:?}"),
            }
        }
    })
    .await
    .expect("the end frame");
    data
}

/// Reads a terminal's output until `want` shows up (terminals echo and translate newlines).
async fn read_until(ws: &mut Ws, text: &mut String, want: &str) {
    read_until_fn(ws, text, |text| text.contains(want)).await;
}

/// Reads output into `text` until `done` holds for it.
async fn read_until_fn(ws: &mut Ws, text: &mut String, done: impl Fn(&str) -> bool) {
    tokio::time::timeout(LONG, async {
        while !done(text) {
            match ws.next().await {
                Some(Ok(Message::Binary(bytes))) => text.push_str(&String::from_utf8_lossy(&bytes)),
                Some(Ok(_)) => {}
                other => panic!("output ended early: {other:?}; got {text:?}"),
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("output did not come; got {text:?}"));
}

async fn wait_change(daemon: &Daemon, change: &str) -> ChangeInfo {
    client(daemon)
        .wait_change(change, Some(LONG))
        .await
        .expect("change ready")
}

fn exit_code(change: &ChangeInfo) -> Option<i64> {
    change.tasks[0].data.as_ref()?.get("exit-code")?.as_i64()
}

/// Whether process `pid` exists (and is not a zombie awaiting its reaper).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| !stat.rsplit(')').next().unwrap_or("").starts_with(" Z"))
}

fn is_root() -> bool {
    nix::unistd::getuid().is_root()
}

#[test]
fn stdin_stdout_stderr_and_the_exit_code() {
    let daemon = Daemon::hold(&[]);
    rt().block_on(async {
        let exec = start(
            &daemon,
            json!({"command": ["/bin/sh", "-c", "cat; echo oops >&2; exit 3"], "split-stderr": true}),
        )
        .await;
        let mut control = connect(&daemon, &exec.task, "control").await.unwrap();
        let mut stdio = connect(&daemon, &exec.task, "stdio").await.unwrap();
        let mut stderr = connect(&daemon, &exec.task, "stderr").await.unwrap();
        send_bytes(&mut stdio, b"hello ").await;
        send_bytes(&mut stdio, b"world\n").await;
        send_end(&mut stdio).await;
        assert_eq!(read_to_end(&mut stdio).await, b"hello world\n");
        assert_eq!(read_to_end(&mut stderr).await, b"oops\n");
        let change = wait_change(&daemon, &exec.change).await;
        assert_eq!(change.kind, "exec");
        assert_eq!(change.summary, "Execute command \"/bin/sh\"");
        assert_eq!(change.status, "Done");
        assert_eq!(change.err, "");
        assert_eq!(change.tasks[0].kind, "exec");
        assert_eq!(change.tasks[0].summary, "Execute command \"/bin/sh\"");
        assert_eq!(change.tasks[0].id, exec.task);
        assert_eq!(exit_code(&change), Some(3));
        // The daemon closes control once the command is done.
        let closed = tokio::time::timeout(LONG, async {
            loop {
                match control.next().await {
                    Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return,
                    Some(Ok(_)) => {}
                }
            }
        })
        .await;
        assert!(closed.is_ok(), "control stayed open");
    });
}

#[test]
fn the_result_has_the_environment_and_working_dir() {
    let daemon = Daemon::hold(&[]);
    rt().block_on(async {
        let exec = start(
            &daemon,
            json!({"command": ["true"], "environment": {"FOO": "bar"}, "working-dir": "/tmp"}),
        )
        .await;
        assert_eq!(exec.result["working-dir"], "/tmp");
        assert_eq!(exec.result["environment"]["FOO"], "bar");
        assert_eq!(exec.result["environment"]["LANG"], "C.UTF-8");
        let keys: Vec<&String> = exec.result.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["environment", "task-id", "working-dir"]);
        let mut stdio = connect(&daemon, &exec.task, "stdio").await.unwrap();
        assert_eq!(read_to_end(&mut stdio).await, b"");
        assert_eq!(
            exit_code(&wait_change(&daemon, &exec.change).await),
            Some(0)
        );
    });
}

#[test]
fn stderr_shares_stdio_unless_split_and_its_websocket_is_then_404() {
    let daemon = Daemon::hold(&[]);
    rt().block_on(async {
        let exec = start(
            &daemon,
            json!({"command": ["/bin/sh", "-c", "echo out; echo err >&2"]}),
        )
        .await;
        assert_eq!(refused(&daemon, &exec.task, "stderr").await, 404);
        assert_eq!(
            get_error(&daemon, &exec.task, "stderr").await,
            (
                404,
                format!("cannot find stderr websocket for task \"{}\"", exec.task)
            )
        );
        assert_eq!(
            get_error(&daemon, &exec.task, "stdout").await,
            (
                404,
                format!("cannot find stdout websocket for task \"{}\"", exec.task)
            )
        );
        let mut stdio = connect(&daemon, &exec.task, "stdio").await.unwrap();
        assert_eq!(read_to_end(&mut stdio).await, b"out\nerr\n");
        assert_eq!(
            exit_code(&wait_change(&daemon, &exec.change).await),
            Some(0)
        );
    });
}

#[test]
fn a_websocket_connects_once() {
    let daemon = Daemon::hold(&[]);
    rt().block_on(async {
        let exec = start(&daemon, json!({"command": ["cat"]})).await;
        let mut stdio = connect(&daemon, &exec.task, "stdio").await.unwrap();
        assert_eq!(refused(&daemon, &exec.task, "stdio").await, 500);
        assert_eq!(
            get_error(&daemon, &exec.task, "stdio").await,
            (
                500,
                "cannot connect to websocket \"stdio\": websocket \"stdio\" already connected"
                    .to_owned()
            )
        );
        send_end(&mut stdio).await;
        assert_eq!(read_to_end(&mut stdio).await, b"");
        wait_change(&daemon, &exec.change).await;
    });
}

#[test]
fn unknown_tasks_and_tasks_of_other_kinds_have_no_websockets() {
    let daemon = Daemon::start(
        &[(
            "001-base",
            "services:\n  s:\n    override: replace\n    startup: enabled\n    command: sleep 1000\n",
        )],
        &[],
    );
    rt().block_on(async {
        assert_eq!(
            get_error(&daemon, "999", "stdio").await,
            (404, "cannot find task \"999\"".to_owned())
        );
        assert_eq!(refused(&daemon, "999", "stdio").await, 404);
        // Task 1 starts the service.
        assert_eq!(
            get_error(&daemon, "1", "stdio").await,
            (400, "\"start\" tasks do not have websockets".to_owned())
        );
    });
}

/// Without its I/O websockets within 5 seconds the task fails, and a websocket that comes
/// later is told why at once rather than left waiting.
#[test]
fn the_connect_window_and_a_late_connect() {
    let daemon = Daemon::hold(&[]);
    rt().block_on(async {
        let exec = start(&daemon, json!({"command": ["true"], "split-stderr": true})).await;
        // Control alone does not start the command.
        let _control = connect(&daemon, &exec.task, "control").await.unwrap();
        let change = wait_change(&daemon, &exec.change).await;
        assert_eq!(change.status, "Error");
        let reason = format!(
            "exec {}: timeout waiting for websocket connections: context deadline exceeded",
            exec.task
        );
        assert_eq!(
            change.err,
            format!("cannot perform the following tasks:\n- Execute command \"true\" ({reason})")
        );
        assert_eq!(exit_code(&change), None, "the command never ran");
        let (status, message) = get_error(&daemon, &exec.task, "stdio").await;
        // Pebble's answer once the change is ready and failed: its error, as a 500.
        assert_eq!(status, 500);
        assert_eq!(message, change.err);
        assert_eq!(refused(&daemon, &exec.task, "stderr").await, 500);
    });
    daemon.wait_log("Change 1 task (Execute command \"true\") failed: exec ");
}

#[test]
fn a_connect_after_success_is_refused_promptly() {
    let daemon = Daemon::hold(&[]);
    rt().block_on(async {
        let exec = start(&daemon, json!({"command": ["true"]})).await;
        let mut stdio = connect(&daemon, &exec.task, "stdio").await.unwrap();
        read_to_end(&mut stdio).await;
        wait_change(&daemon, &exec.change).await;
        // Pebble's answer once the change is done: nothing at all, an empty 200, which a
        // websocket client takes as a failed handshake.
        let response = client(&daemon)
            .raw_request(
                Method::GET,
                &format!("/v1/tasks/{}/websocket/control", exec.task),
                None,
            )
            .await
            .expect("request");
        assert_eq!((response.status_code, response.body.len()), (200, 0));
        assert_eq!(refused(&daemon, &exec.task, "control").await, 200);
    });
}

#[test]
fn signals_go_to_the_command_through_control() {
    let daemon = Daemon::hold(&[]);
    rt().block_on(async {
        let exec = start(
            &daemon,
            json!({"command": ["/bin/sh", "-c", "echo ready; exec sleep 30"]}),
        )
        .await;
        let mut control = connect(&daemon, &exec.task, "control").await.unwrap();
        let mut stdio = connect(&daemon, &exec.task, "stdio").await.unwrap();
        let mut text = String::new();
        read_until(&mut stdio, &mut text, "ready\n").await;
        // As ops sends it: sorted keys.
        control
            .send(Message::text(
                r#"{"command": "signal", "signal": {"name": "SIGINT"}}"#,
            ))
            .await
            .unwrap();
        read_to_end(&mut stdio).await;
        let change = wait_change(&daemon, &exec.change).await;
        assert_eq!(change.status, "Done");
        assert_eq!(exit_code(&change), Some(130));
    });
    daemon.wait_log("forwarded signal SIGINT to PID");
}

/// The command's pid, from the first line of its output.
async fn read_pid(stdio: &mut Ws) -> u32 {
    let mut text = String::new();
    read_until(stdio, &mut text, "\n").await;
    text.trim().parse().expect("a pid")
}

#[test]
fn a_control_websocket_that_drops_kills_the_command() {
    let daemon = Daemon::hold(&[]);
    rt().block_on(async {
        let exec = start(
            &daemon,
            json!({"command": ["/bin/sh", "-c", "echo $$; exec sleep 1000"]}),
        )
        .await;
        let control = connect(&daemon, &exec.task, "control").await.unwrap();
        let mut stdio = connect(&daemon, &exec.task, "stdio").await.unwrap();
        let pid = read_pid(&mut stdio).await;
        assert!(alive(pid));
        // Gone without a close frame.
        drop(control);
        read_to_end(&mut stdio).await;
        let change = wait_change(&daemon, &exec.change).await;
        assert_eq!(exit_code(&change), Some(137));
        wait_for("the command to be gone", LONG, || !alive(pid));
    });
}

#[test]
fn a_control_websocket_closed_properly_leaves_the_command_running() {
    let daemon = Daemon::hold(&[]);
    rt().block_on(async {
        let exec = start(&daemon, json!({"command": ["cat"]})).await;
        let mut control = connect(&daemon, &exec.task, "control").await.unwrap();
        let mut stdio = connect(&daemon, &exec.task, "stdio").await.unwrap();
        control.close(None).await.unwrap();
        // Still running: it echoes, and ends only with its input.
        send_bytes(&mut stdio, b"still here\n").await;
        let mut text = String::new();
        read_until(&mut stdio, &mut text, "still here\n").await;
        send_end(&mut stdio).await;
        read_to_end(&mut stdio).await;
        let change = wait_change(&daemon, &exec.change).await;
        assert_eq!(exit_code(&change), Some(0));
    });
}

#[test]
fn a_timeout_kills_the_command() {
    let daemon = Daemon::hold(&[]);
    rt().block_on(async {
        let exec = start(
            &daemon,
            json!({"command": ["/bin/sh", "-c", "echo $$; sleep 1000 & wait"], "timeout": "0.300s"}),
        )
        .await;
        let mut stdio = connect(&daemon, &exec.task, "stdio").await.unwrap();
        let pid = read_pid(&mut stdio).await;
        read_to_end(&mut stdio).await;
        let change = wait_change(&daemon, &exec.change).await;
        assert_eq!(change.status, "Error");
        assert_eq!(
            change.err,
            "cannot perform the following tasks:\n- Execute command \"/bin/sh\" \
             (timed out after 300ms: context deadline exceeded)"
        );
        assert_eq!(exit_code(&change), Some(-1));
        assert!(!alive(pid));
    });
}

#[test]
fn the_daemons_shutdown_kills_running_commands() {
    let mut daemon = Daemon::hold(&[]);
    let pid = rt().block_on(async {
        let exec = start(
            &daemon,
            json!({"command": ["/bin/sh", "-c", "echo $$; exec sleep 1000"]}),
        )
        .await;
        let mut stdio = connect(&daemon, &exec.task, "stdio").await.unwrap();
        read_pid(&mut stdio).await
    });
    assert!(alive(pid));
    assert_eq!(daemon.stop(), Some(0));
    wait_for("the command to be gone", LONG, || !alive(pid));
}

#[test]
fn the_environment_stays_out_of_the_state_file() {
    let mut daemon = Daemon::hold(&[]);
    let marker = "cobble-exec-environment-marker-5d2c";
    rt().block_on(async {
        let exec = start(
            &daemon,
            json!({"command": ["/bin/sh", "-c", "echo $MARK"], "environment": {"MARK": marker}}),
        )
        .await;
        let mut stdio = connect(&daemon, &exec.task, "stdio").await.unwrap();
        assert_eq!(
            read_to_end(&mut stdio).await,
            format!("{marker}\n").as_bytes()
        );
        wait_change(&daemon, &exec.change).await;
    });
    assert_eq!(daemon.stop(), Some(0));
    let state = std::fs::read_to_string(daemon.pebble_dir().join(".pebble.state")).unwrap();
    assert!(state.contains("\"exit-code\":0"), "{state}");
    assert!(!state.contains(marker), "{state}");
}

#[test]
fn each_exec_is_a_security_event() {
    let daemon = Daemon::hold(&[]);
    rt().block_on(async {
        let exec = start(&daemon, json!({"command": ["true"]})).await;
        let mut stdio = connect(&daemon, &exec.task, "stdio").await.unwrap();
        read_to_end(&mut stdio).await;
        wait_change(&daemon, &exec.change).await;
    });
    let uid = nix::unistd::getuid().as_raw();
    let wanted = format!(
        r#""level":"WARN","event":"authz_admin:{uid},exec","description":"Executing command true","appid":"pebble"}}"#
    );
    daemon.wait_log(&wanted);
}

#[test]
fn exec_needs_an_admin() {
    let port = free_port();
    let _daemon = Daemon::start(&[], &["--hold", "--http", &format!("127.0.0.1:{port}")]);
    let tcp = cobble_client::Client::new(cobble_client::ClientConfig {
        base_url: Some(format!("http://127.0.0.1:{port}")),
        ..cobble_client::ClientConfig::socket("/nonexistent")
    })
    .unwrap();
    let response = rt()
        .block_on(tcp.raw_request(
            Method::POST,
            "/v1/exec",
            Some(br#"{"command":["true"]}"#.to_vec()),
        ))
        .unwrap();
    assert_eq!(response.status_code, 401);
    let response = rt()
        .block_on(tcp.raw_request(Method::GET, "/v1/tasks/1/websocket/stdio", None))
        .unwrap();
    assert_eq!(response.status_code, 401);
}

#[test]
fn bad_requests_are_refused_before_anything_runs() {
    let daemon = Daemon::hold(&[]);
    let scratch = daemon.scratch().to_owned();
    let file = scratch.join("a-file");
    std::fs::write(&file, "").unwrap();
    let cases = [
        (
            json!({"command": []}),
            400,
            "must specify command".to_owned(),
        ),
        (
            json!({"command": null}),
            400,
            "must specify command".to_owned(),
        ),
        (
            json!({"command": ["no-such-program-here"]}),
            400,
            "cannot find executable \"no-such-program-here\"".to_owned(),
        ),
        (
            json!({"command": ["true"], "working-dir": "relative"}),
            400,
            "cannot call exec: working directory \"relative\" is not an absolute path".to_owned(),
        ),
        (
            json!({"command": ["true"], "working-dir": "/no/such/dir"}),
            500,
            "cannot call exec: working directory \"/no/such/dir\" does not exist".to_owned(),
        ),
        (
            json!({"command": ["true"], "working-dir": file}),
            500,
            format!(
                "cannot call exec: working directory \"{}\" not a directory",
                file.display()
            ),
        ),
        (
            json!({"command": ["true"], "user": "no-such-user"}),
            400,
            "user: unknown user no-such-user".to_owned(),
        ),
        (
            json!({"command": ["true"], "user": "root", "group": "no-such-group"}),
            400,
            "group: unknown group no-such-group".to_owned(),
        ),
        (
            json!({"command": ["true"], "group-id": 0}),
            400,
            "must specify user, not just group".to_owned(),
        ),
        (
            json!({"command": ["true"], "timeout": "-1s"}),
            400,
            "invalid timeout: duration \"-1s\" is negative".to_owned(),
        ),
        (
            json!({"command": ["true"], "timeout": "soon"}),
            400,
            "invalid timeout: time: invalid duration \"soon\"".to_owned(),
        ),
        (
            json!({"command": ["true"], "interactive": true}),
            500,
            "cannot call exec: cannot use interactive mode without a terminal".to_owned(),
        ),
        (
            json!({"command": ["true"], "service-context": "nope"}),
            400,
            "context service \"nope\" not found".to_owned(),
        ),
        (
            json!({"command": ["true"], "environment": {"BIG": "x".repeat(200_000)}}),
            400,
            "cannot call exec: environment variable \"BIG\" of 200004 bytes (the most is \
             131071): argument list too long"
                .to_owned(),
        ),
    ];
    rt().block_on(async {
        for (body, status, message) in cases {
            let (got, envelope) = post_exec(&daemon, &body).await;
            assert_eq!(
                (
                    got,
                    envelope["result"]["message"].as_str().unwrap_or_default()
                ),
                (status, message.as_str()),
                "{body}"
            );
        }
        let changes = client(&daemon)
            .changes(cobble_client::ChangeSelector::All, None)
            .await
            .unwrap();
        assert!(changes.is_empty(), "{changes:?}");
    });
}

#[test]
fn a_terminal_with_a_size_that_follows_resizes_and_ends_input_with_eof() {
    let daemon = Daemon::hold(&[]);
    rt().block_on(async {
        let exec = start(
            &daemon,
            json!({
                "command": ["/bin/sh", "-c",
                    "stty size; test -t 0 && echo tty-in; (: < /dev/tty) 2>/dev/null && echo ctty; \
                     while read line; do echo \"got $line\"; stty size; done; echo eof-seen"],
                "terminal": true,
                "interactive": true,
                "width": 80,
                "height": 24,
            }),
        )
        .await;
        let mut control = connect(&daemon, &exec.task, "control").await.unwrap();
        let mut stdio = connect(&daemon, &exec.task, "stdio").await.unwrap();
        let mut text = String::new();
        read_until(&mut stdio, &mut text, "24 80").await;
        read_until(&mut stdio, &mut text, "tty-in").await;
        read_until(&mut stdio, &mut text, "ctty").await;
        control
            .send(Message::text(
                r#"{"command":"resize","resize":{"width":132,"height":43}}"#,
            ))
            .await
            .unwrap();
        // Control and input travel on different websockets: ask for the size until the
        // resize has arrived.
        let mut line = 0;
        while !text.contains("43 132") {
            line += 1;
            assert!(line < 1000, "the resize never arrived: {text:?}");
            send_bytes(&mut stdio, format!("line{line}\n").as_bytes()).await;
            // The answer, then the size on the line after it.
            let answer = format!("got line{line}\r\n");
            read_until_fn(&mut stdio, &mut text, |text| {
                text.split_once(&answer)
                    .is_some_and(|(_, size)| size.contains('\n'))
            })
            .await;
        }
        // End of input is the terminal's end-of-file character: the loop ends.
        send_end(&mut stdio).await;
        read_until(&mut stdio, &mut text, "eof-seen").await;
        read_to_end(&mut stdio).await;
        let change = wait_change(&daemon, &exec.change).await;
        assert_eq!(exit_code(&change), Some(0));
    });
}

#[test]
fn a_terminal_belongs_to_the_user_the_command_runs_as() {
    if !is_root() {
        return; // switching users needs root
    }
    let daemon = Daemon::hold(&[]);
    rt().block_on(async {
        let exec = start(
            &daemon,
            json!({
                "command": ["/bin/sh", "-c", "id -u; stat -L -c %u /proc/self/fd/1; echo \"$HOME $USER\"; pwd"],
                "terminal": true,
                "user": "daemon",
                "working-dir": "/",
            }),
        )
        .await;
        let mut stdio = connect(&daemon, &exec.task, "stdio").await.unwrap();
        let output = String::from_utf8(read_to_end(&mut stdio).await).unwrap();
        let uid = nix::unistd::User::from_name("daemon")
            .unwrap()
            .expect("a daemon user")
            .uid
            .as_raw();
        let home = nix::unistd::User::from_name("daemon")
            .unwrap()
            .unwrap()
            .dir
            .display()
            .to_string();
        assert_eq!(
            output.replace("\r\n", "\n"),
            format!("{uid}\n{uid}\n{home} daemon\n/\n")
        );
        assert_eq!(exit_code(&wait_change(&daemon, &exec.change).await), Some(0));
    });
}

#[test]
fn commands_run_in_a_session_of_their_own() {
    let daemon = Daemon::hold(&[]);
    rt().block_on(async {
        // Field 6 of /proc/<pid>/stat is the session, field 5 the process group.
        let exec = start(
            &daemon,
            json!({"command": ["/bin/sh", "-c", "echo $$; cut -d' ' -f5,6 /proc/$$/stat"]}),
        )
        .await;
        let mut stdio = connect(&daemon, &exec.task, "stdio").await.unwrap();
        let output = String::from_utf8(read_to_end(&mut stdio).await).unwrap();
        let (pid, ids) = output.trim().split_once('\n').expect("two lines");
        assert_eq!(
            ids,
            format!("{pid} {pid}"),
            "leads its group and its session"
        );
        wait_change(&daemon, &exec.change).await;
    });
}

#[test]
fn aborting_the_change_kills_the_command() {
    let daemon = Daemon::hold(&[]);
    rt().block_on(async {
        let exec = start(
            &daemon,
            json!({"command": ["/bin/sh", "-c", "echo $$; exec sleep 1000"]}),
        )
        .await;
        let mut stdio = connect(&daemon, &exec.task, "stdio").await.unwrap();
        let pid = read_pid(&mut stdio).await;
        let response = client(&daemon)
            .raw_request(
                Method::POST,
                &format!("/v1/changes/{}", exec.change),
                Some(br#"{"action":"abort"}"#.to_vec()),
            )
            .await
            .unwrap();
        assert_eq!(response.status_code, 200);
        let change = wait_change(&daemon, &exec.change).await;
        assert_eq!(change.status, "Error");
        assert_eq!(exit_code(&change), Some(-1));
        wait_for("the command to be gone", LONG, || !alive(pid));
    });
}

#[test]
fn a_terminal_without_interactive_mode_reads_stdin_from_a_pipe() {
    let daemon = Daemon::hold(&[]);
    rt().block_on(async {
        let exec = start(
            &daemon,
            json!({
                "command": ["/bin/sh", "-c",
                    "test -t 0 || echo pipe-in; test -t 1 && echo tty-out; cat; echo err >&2"],
                "terminal": true,
                "split-stderr": true,
            }),
        )
        .await;
        let mut stdio = connect(&daemon, &exec.task, "stdio").await.unwrap();
        let mut stderr = connect(&daemon, &exec.task, "stderr").await.unwrap();
        send_bytes(&mut stdio, b"piped\n").await;
        // The end of input closes the pipe: cat ends.
        send_end(&mut stdio).await;
        let output = String::from_utf8(read_to_end(&mut stdio).await).unwrap();
        // The terminal turns each newline of the output into CR LF.
        assert_eq!(output, "pipe-in\r\ntty-out\r\npiped\r\n");
        assert_eq!(read_to_end(&mut stderr).await, b"err\n");
        assert_eq!(
            exit_code(&wait_change(&daemon, &exec.change).await),
            Some(0)
        );
    });
}

#[test]
fn a_command_left_running_by_a_sigkilled_daemon_is_ended_by_the_next() {
    let mut daemon = Daemon::hold(&[]);
    let pid_file = daemon.scratch().join("exec.pid");
    let script = format!("echo $$ > {}; exec sleep 1000", pid_file.display());
    rt().block_on(async {
        let exec = start(&daemon, json!({"command": ["/bin/sh", "-c", script]})).await;
        // The command starts once its I/O websocket is there.
        let _stdio = connect(&daemon, &exec.task, "stdio").await.unwrap();
        wait_for("the command's pid", LONG, || {
            std::fs::read_to_string(&pid_file).is_ok_and(|s| s.ends_with('\n'))
        });
    });
    let pid: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    wait_for("sleep to run", LONG, || {
        std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c.starts_with(b"sleep\0"))
    });
    daemon.kill();
    assert!(
        alive(pid),
        "the command outlives a daemon killed with SIGKILL"
    );
    daemon.restart(&["--hold"]);
    let ended = (0..500).any(|_| {
        if !alive(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
        false
    });
    if !ended {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    assert!(
        ended,
        "the next daemon ended the command:\n{}",
        daemon.log()
    );
}

/// An exec's pipes start at the kernel's default size and grow once a stream fills them, so
/// that concurrent execs of an unprivileged daemon do not spend the user's pipe budget
/// (`pipe-user-pages-soft`) before they carry anything.
#[test]
fn pipes_start_at_the_default_size_and_grow_once_a_stream_fills_them() {
    const SCRIPT: &str = r#"
import fcntl, sys, time
F_GETPIPE_SZ = 1032
def grown(fd):
    deadline = time.monotonic() + 20
    while fcntl.fcntl(fd, F_GETPIPE_SZ) < 1 << 20 and time.monotonic() < deadline:
        time.sleep(0.01)
    return fcntl.fcntl(fd, F_GETPIPE_SZ)
first = (fcntl.fcntl(0, F_GETPIPE_SZ), fcntl.fcntl(1, F_GETPIPE_SZ))
sys.stdout.write("ready\n")
sys.stdout.flush()
stdin = grown(0)
data = sys.stdin.buffer.read()
sys.stdout.buffer.write(b"x" * (2 << 20))
sys.stdout.flush()
sys.stdout.write(f"\n{first[0]} {first[1]} {stdin} {len(data)} {grown(1)}\n")
"#;
    let daemon = Daemon::hold(&[]);
    rt().block_on(async {
        let exec = start(&daemon, json!({"command": ["python3", "-c", SCRIPT]})).await;
        let _control = connect(&daemon, &exec.task, "control").await.unwrap();
        let mut stdio = connect(&daemon, &exec.task, "stdio").await.unwrap();
        let mut text = String::new();
        read_until(&mut stdio, &mut text, "ready\n").await;
        // Eight frames of 64 KiB: the first fills the pipe, the second finds it full.
        for _ in 0..8 {
            send_bytes(&mut stdio, &[b'y'; 64 * 1024]).await;
        }
        send_end(&mut stdio).await;
        let output = read_to_end(&mut stdio).await;
        let summary = String::from_utf8_lossy(&output);
        let summary = summary.trim_end().rsplit('\n').next().unwrap_or_default();
        assert_eq!(
            summary, "65536 65536 1048576 524288 1048576",
            "stdin and stdout at the start, stdin once written to, the input's length, stdout once written to"
        );
        assert_eq!(exit_code(&wait_change(&daemon, &exec.change).await), Some(0));
    });
}

/// The daemon's peak resident memory, in KiB.
fn peak_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM")
}

#[test]
fn hostile_control_and_stream_messages_get_gos_words_and_cost_no_memory() {
    let daemon = Daemon::hold(&[]);
    let pid = daemon.pid();
    let deep = "[".repeat(20_000);
    rt().block_on(async {
        let exec = start(
            &daemon,
            json!({"command": ["/bin/sh", "-c", "echo ready; exec cat"]}),
        )
        .await;
        let mut control = connect(&daemon, &exec.task, "control").await.unwrap();
        let mut stdio = connect(&daemon, &exec.task, "stdio").await.unwrap();
        let mut text = String::new();
        read_until(&mut stdio, &mut text, "ready\n").await;
        // Nested past Go's limit, on control (a decoder's first value) and on stdio (a whole
        // message, as `json.Unmarshal` reads it).
        control.send(Message::text(deep.clone())).await.unwrap();
        stdio.send(Message::text(deep.clone())).await.unwrap();
        stdio
            .send(Message::text(r#"{"command": "end"} x"#))
            .await
            .unwrap();
        // Binary commands of a mebibyte each, 64 of them: each is cut at the control
        // channel's bound (64 KiB), never held whole.
        let before = peak_kib(pid);
        let chunk = vec![b' '; 1 << 20];
        for _ in 0..64 {
            control.send(Message::binary(chunk.clone())).await.unwrap();
        }
        let grown = peak_kib(pid).saturating_sub(before);
        assert!(
            grown < 16 * 1024,
            "64 MiB of control messages cost {grown} KiB"
        );
        // The channel still works.
        send_bytes(&mut stdio, b"after\n").await;
        read_until(&mut stdio, &mut text, "after\n").await;
        control
            .send(Message::text(
                r#"{"command": "signal", "signal": {"name": "SIGTERM"}}"#,
            ))
            .await
            .unwrap();
        read_to_end(&mut stdio).await;
        let change = wait_change(&daemon, &exec.change).await;
        assert_eq!(exit_code(&change), Some(143));
    });
    daemon.wait_log(
        ": cannot decode control websocket command: invalid character '[' exceeded max depth",
    );
    daemon.wait_log("Cannot decode I/O command: invalid character '[' exceeded max depth");
    daemon.wait_log("Cannot decode I/O command: invalid character 'x' after top-level value");
    // A text message past the daemon's bound closes control as too big (1009), which, like
    // a dropped control websocket, ends the command.
    rt().block_on(async {
        let exec = start(&daemon, json!({"command": ["cat"]})).await;
        let mut control = connect(&daemon, &exec.task, "control").await.unwrap();
        let _stdio = connect(&daemon, &exec.task, "stdio").await.unwrap();
        let huge = " ".repeat(4 << 20);
        let _ = control.send(Message::text(huge)).await;
        let closed = tokio::time::timeout(LONG, async {
            loop {
                match control.next().await {
                    Some(Ok(Message::Close(frame))) => return frame.map(|f| u16::from(f.code)),
                    Some(Ok(_)) => {}
                    _ => return None,
                }
            }
        })
        .await
        .expect("control closes");
        assert_eq!(closed, Some(1009));
        let change = wait_change(&daemon, &exec.change).await;
        assert_eq!(exit_code(&change), Some(137));
    });
    assert!(crate::fixture::running(pid));
}
