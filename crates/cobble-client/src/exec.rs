//! Running a command on the daemon's side: `POST /v1/exec` and the task's websockets.
//!
//! # Theory of operation
//!
//! [`Client::exec`] asks the daemon to run a command, then opens the task's websockets in the
//! order Pebble's clients do: `control`, `stdio`, and `stderr` when stderr is kept apart. The
//! daemon starts the process once the data websockets are connected.
//!
//! - Data travels in binary frames; the text frame `{"command":"end"}` ends a stream, in both
//!   directions. [`ExecStdin`] sends what is written to it and `end` when it is shut down or
//!   dropped, so a command reading its input always sees an end. [`ExecOutput`] reads until the
//!   daemon's `end`.
//! - [`ExecControl`] sends `signal` and `resize` messages on `control`. [`ExecProcess::wait`]
//!   closes `control` cleanly once the command has finished. A `control` connection that is
//!   dropped without a close frame tells the daemon the client is gone, and the daemon kills
//!   the command: dropping an [`ExecProcess`] before `wait` abandons the command.
//! - The exit code comes from the change: [`ExecProcess::wait`] follows it to the end (for at
//!   most the command's timeout plus a second) and reads the task's `exit-code`.
//!
//! As with pipes, the caller reads `stdout` (and `stderr`) to their end, or the daemon stops
//! reading the command's output once its buffers are full.

use std::collections::BTreeMap;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream::SplitSink;
use futures_util::{SinkExt, Stream, StreamExt};
use hyper::Method;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{mpsc, oneshot};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_util::sync::PollSender;

use crate::client::{Client, decode_envelope};
use crate::error::Error;
use crate::transport::{self, Connection};
use crate::types::{ExecCommand, ExecRequest, ExecResize, ExecResult, ExecSignal};

/// The text frame that ends a data stream, in either direction.
const END_MESSAGE: &str = r#"{"command":"end"}"#;

/// How long opening one websocket may take, as in Pebble's Go client.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// How many chunks of input may wait to be sent before writers are held back.
const STDIN_QUEUE: usize = 8;

/// How much longer than the command's own timeout [`ExecProcess::wait`] waits for its change,
/// so that the daemon's timeout, with its error, comes first.
const WAIT_MARGIN: Duration = Duration::from_secs(1);

type Websocket = WebSocketStream<Box<dyn Connection>>;

/// What to run, and how.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ExecOptions {
    /// The program and its arguments; the program is looked up in the daemon's `PATH`.
    pub command: Vec<String>,
    /// A service whose environment, working directory, user and group are the defaults.
    pub service_context: String,
    /// Variables added to the daemon's (or the service context's) environment.
    pub environment: BTreeMap<String, String>,
    /// The working directory; empty for the user's home directory, else `/`.
    pub working_dir: String,
    /// Kill the command after this long; the exit code is then -1 and the change fails.
    pub timeout: Option<Duration>,
    /// The uid to run as.
    pub user_id: Option<u32>,
    /// The user name to run as.
    pub user: String,
    /// The gid to run as.
    pub group_id: Option<u32>,
    /// The group name to run as.
    pub group: String,
    /// Run under a pseudo-terminal instead of pipes.
    pub terminal: bool,
    /// Feed stdin to the pseudo-terminal (terminal mode only).
    pub interactive: bool,
    /// The terminal's initial width in columns (0 for the daemon's default).
    pub width: u32,
    /// The terminal's initial height in rows (0 for the daemon's default).
    pub height: u32,
    /// Keep stderr apart (a third websocket) instead of merging it into stdout.
    pub split_stderr: bool,
}

impl ExecOptions {
    /// Options that run `command` with every other setting at its default.
    pub fn new<I, S>(command: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        ExecOptions {
            command: command.into_iter().map(Into::into).collect(),
            ..ExecOptions::default()
        }
    }

    /// The request body these options make.
    pub fn to_request(&self) -> ExecRequest {
        ExecRequest {
            command: self.command.clone(),
            service_context: self.service_context.clone(),
            environment: self.environment.clone(),
            working_dir: self.working_dir.clone(),
            timeout: self.timeout.map(go_duration).unwrap_or_default(),
            user_id: self.user_id,
            user: self.user.clone(),
            group_id: self.group_id,
            group: self.group.clone(),
            terminal: self.terminal,
            interactive: self.interactive,
            split_stderr: self.split_stderr,
            width: self.width.into(),
            height: self.height.into(),
        }
    }
}

/// A duration as Go's `time.ParseDuration` reads it: whole or fractional seconds.
fn go_duration(duration: Duration) -> String {
    let seconds = duration.as_secs();
    let nanos = duration.subsec_nanos();
    if nanos == 0 {
        return format!("{seconds}s");
    }
    let fraction = format!("{nanos:09}");
    format!("{seconds}.{}s", fraction.trim_end_matches('0'))
}

/// A command running on the daemon's side.
///
/// Take the streams out of `stdin`, `stdout` and `stderr`, and a [`ExecControl`] with
/// [`ExecProcess::control`], before [`ExecProcess::wait`] consumes the process.
#[must_use = "a command whose process is dropped before `wait` is killed by the daemon"]
#[derive(Debug)]
pub struct ExecProcess {
    /// The command's input. Shutting it down (or dropping it) ends the input.
    pub stdin: Option<ExecStdin>,
    /// The command's output, with its stderr unless `split_stderr` was set.
    pub stdout: Option<ExecOutput>,
    /// The command's stderr, when `split_stderr` was set.
    pub stderr: Option<ExecOutput>,
    control: ExecControl,
    client: Client,
    change_id: String,
    task_id: String,
    timeout: Option<Duration>,
}

impl ExecProcess {
    /// The ID of the `exec` change.
    pub fn change_id(&self) -> &str {
        &self.change_id
    }

    /// The ID of the task whose websockets carry the command.
    pub fn task_id(&self) -> &str {
        &self.task_id
    }

    /// A handle that sends signals and terminal sizes to the command.
    pub fn control(&self) -> ExecControl {
        self.control.clone()
    }

    /// Waits for the command to finish and returns its exit code.
    ///
    /// A change that failed (the command could not start, or timed out) is an
    /// [`Error::Change`] with the change's error. Output that is still on its way is not
    /// waited for: read `stdout` and `stderr` to their end for that.
    pub async fn wait(self) -> Result<i32, Error> {
        let limit = self.timeout.map(|t| t + WAIT_MARGIN);
        let change = self.client.wait_change(&self.change_id, limit).await;
        self.control.close().await;
        let change = change?;
        if !change.err.is_empty() {
            return Err(Error::Change(change.err));
        }
        let task = change.tasks.first().ok_or_else(|| {
            Error::Protocol("expected exec change to contain at least one task".into())
        })?;
        task.data
            .as_ref()
            .and_then(|data| data.get("exit-code"))
            .and_then(serde_json::Value::as_i64)
            .and_then(|code| i32::try_from(code).ok())
            .ok_or_else(|| {
                Error::Protocol("cannot get exit code: no exit-code in task data".into())
            })
    }
}

impl Client {
    /// `POST /v1/exec`: starts a command and connects its websockets.
    ///
    /// Fails with the daemon's error when it refuses the command (`cannot find executable
    /// "x"`, an unknown user, a bad working directory), and when a websocket cannot be opened.
    /// Must be called inside a tokio runtime: the input and the control messages are sent by
    /// tasks spawned on it.
    pub async fn exec(&self, options: &ExecOptions) -> Result<ExecProcess, Error> {
        let body = serde_json::to_value(options.to_request())
            .map_err(|e| Error::Protocol(format!("cannot encode JSON payload: {e}")))?;
        let response = self
            .request(Method::POST, "/v1/exec", &[], Some(&body))
            .await?;
        let change_id = response
            .change
            .filter(|id| !id.is_empty())
            .ok_or_else(|| Error::Protocol("async response without change reference".into()))?;
        let result: ExecResult = serde_json::from_value(response.result)
            .map_err(|e| Error::Protocol(format!("cannot unmarshal JSON response: {e}")))?;
        let task_id = result.task_id;

        let control = self.task_websocket(&task_id, "control").await?;
        let stdio = self.task_websocket(&task_id, "stdio").await?;
        let stderr = if options.split_stderr {
            Some(self.task_websocket(&task_id, "stderr").await?)
        } else {
            None
        };

        let (stdio_sink, stdio_stream) = stdio.split();
        Ok(ExecProcess {
            stdin: Some(ExecStdin::spawn(stdio_sink)),
            stdout: Some(ExecOutput::new(stdio_stream)),
            stderr: stderr.map(ExecOutput::new),
            control: ExecControl::spawn(control),
            client: self.clone(),
            change_id,
            task_id,
            timeout: options.timeout,
        })
    }

    /// Opens one of a task's websockets.
    async fn task_websocket(&self, task_id: &str, name: &str) -> Result<Websocket, Error> {
        let failed = |reason: String| Error::Websocket {
            name: name.to_string(),
            reason,
        };
        let path = format!("/v1/tasks/{task_id}/websocket/{name}");
        let open = async {
            let (connection, url) = transport::dial(self.endpoint(), &path)
                .await
                .map_err(|e| failed(e.to_string()))?;
            let (websocket, _) = tokio_tungstenite::client_async(url, connection)
                .await
                .map_err(|e| failed(handshake_error(e)))?;
            Ok(websocket)
        };
        tokio::time::timeout(HANDSHAKE_TIMEOUT, open)
            .await
            .map_err(|_| failed("websocket: handshake timed out".into()))?
    }
}

/// Why a handshake failed: the daemon's own message when it answered with an error envelope.
fn handshake_error(err: tungstenite::Error) -> String {
    match err {
        tungstenite::Error::Http(response) => {
            let status = response.status().as_u16();
            let message = response
                .body()
                .as_deref()
                .and_then(|body| decode_envelope(status, body).err())
                .and_then(|e| match e {
                    Error::Api { message, .. } => Some(message),
                    _ => None,
                });
            message.unwrap_or_else(|| format!("websocket: bad handshake (HTTP {status})"))
        }
        other => other.to_string(),
    }
}

/// A request to the task that owns the `control` websocket.
#[derive(Debug)]
struct ControlRequest {
    /// The message to send, or `None` to close the websocket cleanly.
    message: Option<ExecCommand>,
    /// Told once the message is sent (the "ticket").
    done: oneshot::Sender<Result<(), Error>>,
}

/// Sends signals and terminal sizes to a running command. Cheap to clone.
#[derive(Debug, Clone)]
pub struct ExecControl {
    requests: mpsc::Sender<ControlRequest>,
}

impl ExecControl {
    fn spawn(websocket: Websocket) -> Self {
        let (requests, inbox) = mpsc::channel(8);
        tokio::spawn(run_control(websocket, inbox));
        ExecControl { requests }
    }

    /// Sends a signal such as `SIGINT` to the command's process.
    pub async fn signal(&self, name: &str) -> Result<(), Error> {
        self.send(Some(ExecCommand {
            command: "signal".into(),
            signal: Some(ExecSignal { name: name.into() }),
            resize: None,
        }))
        .await
    }

    /// Tells the command's terminal its new size (terminal mode only).
    pub async fn resize(&self, width: u32, height: u32) -> Result<(), Error> {
        self.send(Some(ExecCommand {
            command: "resize".into(),
            signal: None,
            resize: Some(ExecResize {
                width: width.into(),
                height: height.into(),
            }),
        }))
        .await
    }

    /// Closes the websocket with a close frame, so the daemon does not take the client for gone.
    async fn close(&self) {
        let _ = self.send(None).await;
    }

    async fn send(&self, message: Option<ExecCommand>) -> Result<(), Error> {
        let closed = || Error::Websocket {
            name: "control".into(),
            reason: "websocket closed".into(),
        };
        let (done, ticket) = oneshot::channel();
        self.requests
            .send(ControlRequest { message, done })
            .await
            .map_err(|_| closed())?;
        ticket.await.map_err(|_| closed())?
    }
}

/// Owns the `control` websocket: sends what is asked, and reads what comes in so that the
/// daemon's close is answered. When every handle is gone without a clean close, the
/// connection is dropped as it is, which the daemon reads as a vanished client.
async fn run_control(mut websocket: Websocket, mut inbox: mpsc::Receiver<ControlRequest>) {
    let mut open = true;
    loop {
        let request = if open {
            tokio::select! {
                request = inbox.recv() => request,
                incoming = websocket.next() => {
                    if !matches!(incoming, Some(Ok(message)) if !message.is_close()) {
                        open = false;
                    }
                    continue;
                }
            }
        } else {
            inbox.recv().await
        };
        let Some(ControlRequest { message, done }) = request else {
            return;
        };
        let Some(message) = message else {
            if open {
                let _ = websocket.close(None).await;
            }
            let _ = done.send(Ok(()));
            return;
        };
        let outcome = if open {
            let text = serde_json::to_string(&message).expect("control messages serialize");
            websocket
                .send(Message::text(text))
                .await
                .map_err(|e| Error::Websocket {
                    name: "control".into(),
                    reason: e.to_string(),
                })
        } else {
            Err(Error::Websocket {
                name: "control".into(),
                reason: "websocket closed".into(),
            })
        };
        let _ = done.send(outcome);
    }
}

/// The command's input: an [`AsyncWrite`] whose writes are sent as they come.
///
/// Shutting it down, or dropping it, sends the end of the input; the daemon then closes the
/// command's stdin (or, in interactive terminal mode, types the end-of-file character).
#[derive(Debug)]
pub struct ExecStdin {
    chunks: PollSender<Bytes>,
}

impl ExecStdin {
    fn spawn(sink: SplitSink<Websocket, Message>) -> Self {
        let (chunks, queue) = mpsc::channel(STDIN_QUEUE);
        tokio::spawn(run_stdin(sink, queue));
        ExecStdin {
            chunks: PollSender::new(chunks),
        }
    }
}

/// Sends queued input as binary frames, then `end` once the writer is gone.
async fn run_stdin(mut sink: SplitSink<Websocket, Message>, mut queue: mpsc::Receiver<Bytes>) {
    while let Some(chunk) = queue.recv().await {
        if sink.send(Message::Binary(chunk)).await.is_err() {
            return;
        }
    }
    let _ = sink.send(Message::text(END_MESSAGE)).await;
}

impl AsyncWrite for ExecStdin {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        let gone = || io::Error::new(io::ErrorKind::BrokenPipe, "exec input is closed");
        ready!(self.chunks.poll_reserve(cx)).map_err(|_| gone())?;
        self.chunks
            .send_item(Bytes::copy_from_slice(buf))
            .map_err(|_| gone())?;
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        // Every write is handed to the sending task at once; there is no buffer here.
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.chunks.close();
        Poll::Ready(Ok(()))
    }
}

/// The command's output (or its stderr): an [`AsyncRead`] that ends at the daemon's `end`.
pub struct ExecOutput {
    frames: Pin<Box<dyn Stream<Item = Result<Message, tungstenite::Error>> + Send>>,
    pending: Bytes,
    ended: bool,
}

impl std::fmt::Debug for ExecOutput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecOutput")
            .field("pending", &self.pending.len())
            .field("ended", &self.ended)
            .finish()
    }
}

impl ExecOutput {
    fn new<S>(frames: S) -> Self
    where
        S: Stream<Item = Result<Message, tungstenite::Error>> + Send + 'static,
    {
        ExecOutput {
            frames: Box::pin(frames),
            pending: Bytes::new(),
            ended: false,
        }
    }

    /// The next chunk of output as the daemon sent it, or `None` at the end.
    pub async fn next_chunk(&mut self) -> io::Result<Option<Bytes>> {
        std::future::poll_fn(|cx| self.poll_chunk(cx)).await
    }

    fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<Option<Bytes>>> {
        if !self.pending.is_empty() {
            return Poll::Ready(Ok(Some(std::mem::take(&mut self.pending))));
        }
        while !self.ended {
            match ready!(self.frames.as_mut().poll_next(cx)) {
                Some(Ok(Message::Binary(data))) if !data.is_empty() => {
                    return Poll::Ready(Ok(Some(data)));
                }
                Some(Ok(Message::Text(text))) => {
                    // Text frames are commands; `end` is the only one a data stream knows.
                    let command: Result<ExecCommand, _> = serde_json::from_str(&text);
                    if command.is_ok_and(|c| c.command == "end") {
                        self.ended = true;
                    }
                }
                Some(Ok(Message::Close(_))) | None => self.ended = true,
                Some(Ok(_)) => {}
                Some(Err(e)) => {
                    self.ended = true;
                    return Poll::Ready(Err(io::Error::other(e)));
                }
            }
        }
        Poll::Ready(Ok(None))
    }
}

impl AsyncRead for ExecOutput {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let Some(mut chunk) = ready!(this.poll_chunk(cx))? else {
            return Poll::Ready(Ok(()));
        };
        let n = chunk.len().min(buf.remaining());
        buf.put_slice(&chunk.split_to(n));
        this.pending = chunk;
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests;
