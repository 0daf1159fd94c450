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
//! The data websockets are framed here (with [`crate::wire`]), not by a websocket library:
//! input is masked as it is copied into the frame that carries it, and output is read
//! straight from the connection into the caller's buffer. `control` goes through
//! tokio-tungstenite. The handshakes are [`transport::upgrade`]'s.
//!
//! As with pipes, the caller reads `stdout` (and `stderr`) to their end, or the daemon stops
//! reading the command's output once its buffers are full.

use std::collections::BTreeMap;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use futures_util::{SinkExt, StreamExt};
use hyper::Method;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::sync::{mpsc, oneshot};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::Role;

use crate::client::Client;
use crate::error::Error;
use crate::transport::{self, Connection};
use crate::types::{ExecCommand, ExecRequest, ExecResize, ExecResult, ExecSignal};
use crate::wire::{self, Header, MAX_HEADER, Opcode};

/// The text frame that ends a data stream, in either direction.
const END_MESSAGE: &str = r#"{"command":"end"}"#;

/// How long opening one websocket may take, as in Pebble's Go client.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// The most input one frame carries; a larger write is taken in parts.
const MAX_INPUT_FRAME: usize = 1024 * 1024;
/// How much the output reader asks of its connection at a time, when it reads for itself
/// (a frame's payload goes straight into the caller's buffer).
const OUTPUT_READ_CHUNK: usize = 16 * 1024;
/// How much [`ExecOutput::next_chunk`] reads at most.
const CHUNK: usize = 128 * 1024;
/// The longest text message a data stream takes (its only command is `end`).
const MAX_TEXT: usize = 64 * 1024;

/// How much longer than the command's own timeout [`ExecProcess::wait`] waits for its change,
/// so that the daemon's timeout, with its error, comes first.
const WAIT_MARGIN: Duration = Duration::from_secs(1);

type Websocket = WebSocketStream<Box<dyn Connection>>;
type ReadSide = Box<dyn AsyncRead + Send + Unpin>;
type WriteSide = Box<dyn AsyncWrite + Send + Unpin>;

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

        let (control, read_past) = self.task_websocket(&task_id, "control").await?;
        let control =
            WebSocketStream::from_partially_read(control, read_past.to_vec(), Role::Client, None)
                .await;
        let (stdio, read_past) = self.task_websocket(&task_id, "stdio").await?;
        let (stdio_read, stdio_write) = tokio::io::split(stdio);
        let stderr = if options.split_stderr {
            let (stderr, read_past) = self.task_websocket(&task_id, "stderr").await?;
            Some(ExecOutput::new(Box::new(stderr), read_past))
        } else {
            None
        };

        Ok(ExecProcess {
            stdin: Some(ExecStdin::new(Box::new(stdio_write))),
            stdout: Some(ExecOutput::new(Box::new(stdio_read), read_past)),
            stderr,
            control: ExecControl::spawn(control),
            client: self.clone(),
            change_id,
            task_id,
            timeout: options.timeout,
        })
    }

    /// Opens one of a task's websockets: the connection, and what the daemon sent past its
    /// answer to the handshake.
    async fn task_websocket(
        &self,
        task_id: &str,
        name: &str,
    ) -> Result<(Box<dyn Connection>, BytesMut), Error> {
        let failed = |reason: String| Error::Websocket {
            name: name.to_string(),
            reason,
        };
        let path = format!("/v1/tasks/{task_id}/websocket/{name}");
        tokio::time::timeout(
            HANDSHAKE_TIMEOUT,
            transport::upgrade(self.endpoint(), &path),
        )
        .await
        .map_err(|_| failed("websocket: handshake timed out".into()))?
        .map_err(failed)
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

/// The command's input: an [`AsyncWrite`] whose writes are sent as they come, each as a
/// binary frame (masked, as a client's frames are).
///
/// Shutting it down, or dropping it, sends the end of the input; the daemon then closes the
/// command's stdin (or, in interactive terminal mode, types the end-of-file character).
pub struct ExecStdin {
    io: Option<WriteSide>,
    /// Framed bytes not written yet.
    out: BytesMut,
    /// The `end` frame is in `out` (or gone out).
    ended: bool,
    masks: MaskKeys,
}

impl std::fmt::Debug for ExecStdin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecStdin")
            .field("unsent", &self.out.len())
            .field("ended", &self.ended)
            .finish()
    }
}

impl ExecStdin {
    fn new(io: WriteSide) -> Self {
        ExecStdin {
            io: Some(io),
            out: BytesMut::new(),
            ended: false,
            masks: MaskKeys::new(),
        }
    }

    /// Appends a frame to `out`.
    fn frame(&mut self, opcode: Opcode, payload: &[u8]) {
        let key = self.masks.next();
        let mut header = [0u8; MAX_HEADER];
        let used = Header {
            fin: true,
            opcode,
            mask: Some(key),
            len: payload.len() as u64,
        }
        .encode(&mut header);
        self.out.reserve(used + payload.len());
        self.out.extend_from_slice(&header[..used]);
        let start = self.out.len();
        self.out.extend_from_slice(payload);
        wire::apply_mask(&mut self.out[start..], key, 0);
    }

    /// Writes out what is framed.
    fn poll_send(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let io = self.io.as_mut().ok_or_else(gone)?;
        while !self.out.is_empty() {
            let n = ready!(Pin::new(&mut *io).poll_write(cx, &self.out))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.out.advance(n);
        }
        Pin::new(io).poll_flush(cx)
    }

    fn end(&mut self) {
        if !self.ended {
            self.ended = true;
            self.frame(Opcode::Text, END_MESSAGE.as_bytes());
        }
    }
}

fn gone() -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, "exec input is closed")
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
        if self.ended {
            return Poll::Ready(Err(gone()));
        }
        // One frame waits at most: a writer is held back while the daemon does not read.
        ready!(self.poll_send(cx))?;
        let n = buf.len().min(MAX_INPUT_FRAME);
        self.frame(Opcode::Binary, &buf[..n]);
        // Start sending now; what does not go out yet goes with the next call.
        if let Poll::Ready(Err(e)) = self.poll_send(cx) {
            return Poll::Ready(Err(e));
        }
        Poll::Ready(Ok(n))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.poll_send(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.end();
        self.poll_send(cx)
    }
}

impl Drop for ExecStdin {
    /// Sends what is left, and the end of the input, from a task of its own.
    fn drop(&mut self) {
        self.end();
        let (Some(mut io), Ok(runtime)) = (self.io.take(), tokio::runtime::Handle::try_current())
        else {
            return;
        };
        let out = std::mem::take(&mut self.out);
        runtime.spawn(async move {
            use tokio::io::AsyncWriteExt;
            let _ = io.write_all(&out).await;
            let _ = io.flush().await;
        });
    }
}

/// Masking keys: unpredictable enough for their purpose (RFC 6455, section 10.3), cheap to
/// make for every frame.
struct MaskKeys(u64);

impl MaskKeys {
    fn new() -> Self {
        MaskKeys(crate::random::random_u64() | 1)
    }

    /// The next key (xorshift64*).
    fn next(&mut self) -> [u8; 4] {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let word = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D);
        ((word >> 32) as u32).to_ne_bytes()
    }
}

/// The command's output (or its stderr): an [`AsyncRead`] that ends at the daemon's `end`.
///
/// A frame's payload is read straight into the caller's buffer; only headers, and what a
/// read brings past them, pass through a buffer of its own.
pub struct ExecOutput {
    io: ReadSide,
    /// Read from the connection, not yet taken.
    buf: BytesMut,
    /// The frame being read: its opcode (a continuation's is its message's) and the payload
    /// bytes still to come.
    frame: Option<(Opcode, u64)>,
    /// The data message in progress, which continuation frames continue.
    message: Option<Opcode>,
    /// A text message being gathered.
    text: Vec<u8>,
    ended: bool,
}

impl std::fmt::Debug for ExecOutput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecOutput")
            .field("buffered", &self.buf.len())
            .field("ended", &self.ended)
            .finish()
    }
}

impl ExecOutput {
    fn new(io: ReadSide, read_past: BytesMut) -> Self {
        ExecOutput {
            io,
            buf: read_past,
            frame: None,
            message: None,
            text: Vec::new(),
            ended: false,
        }
    }

    /// The next chunk of output, or `None` at the end.
    pub async fn next_chunk(&mut self) -> io::Result<Option<Bytes>> {
        // No larger than the frame at hand: a read into it zeroes it first.
        let size = match self.frame {
            Some((Opcode::Binary, left)) => usize::try_from(left).unwrap_or(CHUNK),
            _ => self.buf.len(),
        };
        let mut chunk = BytesMut::with_capacity(size.clamp(4096, CHUNK));
        match self.read_buf(&mut chunk).await? {
            0 => Ok(None),
            _ => Ok(Some(chunk.freeze())),
        }
    }

    /// Reads more into `buf`; false at the end of the connection.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<bool>> {
        self.buf.reserve(OUTPUT_READ_CHUNK);
        let n = ready!(tokio_util::io::poll_read_buf(
            Pin::new(&mut self.io),
            cx,
            &mut self.buf
        ))?;
        Poll::Ready(Ok(n > 0))
    }

    /// Takes the next frame's header from `buf`; false when it is not all there yet.
    fn next_header(&mut self) -> io::Result<bool> {
        let protocol = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_owned());
        let Some((header, used)) =
            Header::parse(&self.buf).map_err(|e| protocol(&e.to_string()))?
        else {
            return Ok(false);
        };
        self.buf.advance(used);
        let opcode = match header.opcode {
            Opcode::Continuation => self
                .message
                .ok_or_else(|| protocol("continuation frame without a message"))?,
            data @ (Opcode::Text | Opcode::Binary) => data,
            control => control,
        };
        if !opcode.is_control() {
            self.message = (!header.fin).then_some(opcode);
        }
        self.frame = Some((opcode, header.len));
        Ok(true)
    }
}

impl AsyncRead for ExecOutput {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        loop {
            if this.ended || out.remaining() == 0 {
                return Poll::Ready(Ok(()));
            }
            let Some((opcode, left)) = this.frame else {
                if !this.next_header()? && !ready!(this.poll_fill(cx))? {
                    // The connection ended without `end`: so does the output.
                    this.ended = true;
                }
                continue;
            };
            if left == 0 {
                this.frame = None;
                if opcode == Opcode::Text && this.message.is_none() {
                    // Text frames are commands; `end` is the only one a data stream knows.
                    let text = std::mem::take(&mut this.text);
                    let command: Result<ExecCommand, _> = serde_json::from_slice(&text);
                    this.ended = command.is_ok_and(|c| c.command == "end");
                } else if opcode == Opcode::Close {
                    this.ended = true;
                }
                continue;
            }
            let left_here = usize::try_from(left).unwrap_or(usize::MAX);
            if opcode != Opcode::Binary {
                // Text, or a control frame: gathered (a ping goes unanswered: the daemon
                // sends none).
                if this.buf.is_empty() && !ready!(this.poll_fill(cx))? {
                    this.ended = true;
                    continue;
                }
                let n = left_here.min(this.buf.len());
                if opcode == Opcode::Text && this.text.len() + n <= MAX_TEXT {
                    this.text.extend_from_slice(&this.buf[..n]);
                }
                this.buf.advance(n);
                this.frame = Some((opcode, left - n as u64));
                continue;
            }
            let n = if this.buf.is_empty() {
                // Straight from the connection into the caller's buffer.
                let want = left_here.min(out.remaining());
                let unfilled = out.initialize_unfilled_to(want);
                let mut direct = ReadBuf::new(unfilled);
                ready!(Pin::new(&mut this.io).poll_read(cx, &mut direct))?;
                let n = direct.filled().len();
                if n == 0 {
                    this.ended = true;
                    continue;
                }
                out.advance(n);
                n
            } else {
                let n = left_here.min(this.buf.len()).min(out.remaining());
                out.put_slice(&this.buf[..n]);
                this.buf.advance(n);
                n
            };
            this.frame = Some((opcode, left - n as u64));
            if n > 0 {
                return Poll::Ready(Ok(()));
            }
        }
    }
}

#[cfg(test)]
mod tests;
