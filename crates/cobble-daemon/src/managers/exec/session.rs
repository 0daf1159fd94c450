//! One execution, from its websockets to its exit code.
//!
//! [`Session::run`] waits for the I/O websockets, launches the command, and then owns its
//! process: it waits for the exit while acting on timeouts, aborts, the daemon's shutdown
//! and control commands, and never signals the process once it has been reaped (its pid
//! could belong to someone else by then). Relaying runs beside it in separate tasks, one
//! per direction, so a client that does not read, or a command that does not read its
//! stdin, never holds up the other direction:
//!
//! - output (a pipe, or the terminal) to `stdio` and `stderr`, in binary frames, then the
//!   `end` frame. On the unix socket a pipe's bytes are spliced, a frame for what waits in
//!   the pipe (up to 1 MiB); otherwise frames of up to 128 KiB are read and written
//!   ([`super::ws`]). From pipes the relay goes on to end of file, so output
//!   written just before the exit is never lost, even when a background process keeps the
//!   pipe open (as Pebble, the task then waits for it). From a terminal it stops once the
//!   command has exited and the terminal has been quiet for [`TERMINAL_DRAIN_IDLE`]: a
//!   background job of an interactive shell must not hold the session open.
//! - `stdio` to stdin, until the client's `end` frame closes it (on a terminal in
//!   interactive mode, `end` becomes the terminal's end-of-file character instead). This
//!   task outlives the session until the client closes the websocket, so a client still
//!   writing after the command has exited is not cut off.
//! - `control` to the session, as events; a control websocket that drops without a close
//!   frame kills the command.

use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, BytesMut};
use cobble_client::types::ExecCommand;
use cobble_plan::ContextOptions;
use cobble_sys::process;
use cobble_sys::pty::{Master, WindowSize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::pipe;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::setup::Prepared;
use super::ws::{Event, Reader, Socket, Writer, close_code};
use super::{CONNECT_TIMEOUT, Channel, Registration};
use crate::go_json::{self, GoField, GoStruct, GoType, INT, STRING};
use crate::process::launch::{self, Launch, Wiring};
use crate::process::launcher::{Group, Launcher};
use crate::state::{StateStore, TaskStatus};

/// The most bytes of output per websocket frame read from a terminal (or from a pipe, on a
/// connection that cannot take spliced bytes).
const CHUNK: usize = 128 * 1024;
/// The most bytes of output per websocket frame spliced from a pipe: as much as a grown pipe
/// holds.
const SPLICED_CHUNK: usize = launch::EXEC_PIPE_SIZE;
/// Once the command has exited, how long a quiet terminal is read before its relay ends.
pub(super) const TERMINAL_DRAIN_IDLE: Duration = Duration::from_millis(100);
/// The most bytes of a control command sent as a binary message.
const MAX_COMMAND: usize = 64 * 1024;
/// A control command as Pebble decodes it (`json.NewDecoder(r).Decode`): the first value of
/// the message, bounded as request bodies are (Go's depth limit, in its words).
const CONTROL_COMMAND: GoType = GoType::Struct(&GoStruct {
    name: "cmdstate.execCommand",
    fields: &[
        GoField::new("Command", "command", STRING),
        GoField::new(
            "Signal",
            "signal",
            GoType::Ptr(&GoType::Struct(&GoStruct {
                name: "cmdstate.execSignalArgs",
                fields: &[GoField::new("Name", "name", STRING)],
            })),
        ),
        GoField::new(
            "Resize",
            "resize",
            GoType::Ptr(&GoType::Struct(&GoStruct {
                name: "cmdstate.execResizeArgs",
                fields: &[
                    GoField::new("Width", "width", INT),
                    GoField::new("Height", "height", INT),
                ],
            })),
        ),
    ],
});
/// A stream's command (`end`) as Pebble reads it (`json.Unmarshal` into an anonymous struct):
/// the whole message is one value.
const IO_COMMAND: GoType = GoType::Struct(&GoStruct {
    name: "",
    fields: &[GoField::new("Command", "command", STRING)],
});
/// How long closing the control websocket may take.
const CLOSE_WAIT: Duration = Duration::from_secs(1);

/// The state of one execution.
pub(super) struct Session {
    pub task_id: u64,
    pub change_id: u64,
    pub state: StateStore,
    pub prepared: Prepared,
    /// Websockets as the client connects them.
    pub sockets: mpsc::UnboundedReceiver<(Channel, Socket)>,
    pub registration: Registration,
    /// The daemon's shutdown.
    pub shutdown: CancellationToken,
    /// Where relays that outlive the session run.
    pub tasks: TaskTracker,
    /// Starts the command (recorded before it runs, where the daemon keeps a record).
    pub launcher: Launcher,
}

/// Why an execution failed: the task's error, and its exit code if it has one.
struct Failure {
    message: String,
    exit_code: Option<i32>,
}

impl Failure {
    fn new(message: impl Into<String>, exit_code: Option<i32>) -> Failure {
        Failure {
            message: message.into(),
            exit_code,
        }
    }
}

/// What ended a command before it exited by itself.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stop {
    TimedOut,
    Aborted,
    Shutdown,
}

/// The websockets connected so far.
#[derive(Default)]
struct Sockets {
    control: Option<Socket>,
    stdio: Option<Socket>,
    stderr: Option<Socket>,
}

/// What the control websocket's reader reports.
enum ControlEvent {
    /// A text (or binary) frame, to be decoded as an [`ExecCommand`].
    Command(String),
    /// The websocket ended; `abnormal` when it dropped without a close frame.
    Closed { abnormal: bool },
}

impl Session {
    /// Runs the execution to its end and records the outcome in the task.
    pub(super) async fn run(mut self) {
        // An abort that came first has held the task already.
        if self.state.task_status(self.task_id) != Some(TaskStatus::Do) {
            return;
        }
        self.state.set_task_status(self.task_id, TaskStatus::Doing);
        let abort = self.state.abort_token(self.change_id);
        let outcome = self.execute(&abort).await;
        // From here on a websocket connect is told the execution is over.
        self.registration.remove();
        match outcome {
            Ok(code) => {
                self.state
                    .set_task_data(self.task_id, "exit-code", code.into());
                self.state.set_task_status(self.task_id, TaskStatus::Done);
            }
            Err(failure) => {
                if let Some(code) = failure.exit_code {
                    self.state
                        .set_task_data(self.task_id, "exit-code", code.into());
                }
                self.state.fail_task(self.task_id, &failure.message);
            }
        }
    }

    async fn execute(&mut self, abort: &CancellationToken) -> Result<i32, Failure> {
        let mut sockets = self.wait_for_io(abort).await?;
        let (child, group) = self.launch().await?;
        let pid = group.pid();
        let master = child.terminal;
        tracing::debug!("Exec {}: started PID {pid}", self.task_id);
        let master = master.map(Arc::new);
        // Set when the command has exited (a terminal's relay then drains and stops) and
        // when the session is over (relays that outlive it let go of the command's stdin).
        let exited = CancellationToken::new();
        let finished = CancellationToken::new();

        let stdio = sockets.stdio.take().expect("waited for stdio");
        let mut relays: Vec<JoinHandle<()>> = Vec::new();
        let output = match (&master, child.output) {
            (Some(master), _) => Output::Terminal {
                master: master.clone(),
                exited: exited.clone(),
            },
            (None, Some(output)) => Output::pipe(output),
            (None, None) => unreachable!("a command without a terminal has an output pipe"),
        };
        relays.push(tokio::spawn(relay(output, stdio.writer)));
        if let (Some(stderr), Some(socket)) = (child.stderr, sockets.stderr.take()) {
            relays.push(tokio::spawn(relay(Output::pipe(stderr), socket.writer)));
            // Nothing comes in on stderr, but the socket lives until the client closes it.
            self.tasks
                .spawn(drain(socket.reader, self.shutdown.clone()));
        }
        let stdin = match (&master, child.stdin) {
            (Some(master), _) if self.prepared.interactive => Stdin::Terminal(master.clone()),
            (_, Some(pipe)) => Stdin::Pipe { pipe, grown: false },
            _ => Stdin::Closed,
        };
        self.tasks.spawn(relay_stdin(
            stdio.reader,
            stdin,
            finished.clone(),
            self.shutdown.clone(),
        ));

        let (events_tx, mut events) = mpsc::unbounded_channel();
        let mut control = sockets
            .control
            .take()
            .map(|socket| self.watch_control(socket, &events_tx, &finished));

        let timeout = tokio::time::sleep(self.prepared.timeout.unwrap_or(Duration::MAX));
        tokio::pin!(timeout);
        let has_timeout = self.prepared.timeout.is_some();
        let mut stop = None;
        let mut exit = child.exit;
        let status = loop {
            tokio::select! {
                status = &mut exit => break status,
                () = &mut timeout, if has_timeout && stop.is_none() => {
                    stop = Some(Stop::TimedOut);
                    group.kill();
                }
                () = abort.cancelled(), if stop.is_none() => {
                    stop = Some(Stop::Aborted);
                    group.kill();
                }
                () = self.shutdown.cancelled(), if stop.is_none() => {
                    stop = Some(Stop::Shutdown);
                    group.kill();
                }
                Some(event) = events.recv() => self.control(event, &group, master.as_deref()),
                Some((channel, socket)) = self.sockets.recv() => {
                    // Only control may connect after the command has started.
                    if channel == Channel::Control && control.is_none() {
                        control = Some(self.watch_control(socket, &events_tx, &finished));
                    }
                }
            }
        };
        exited.cancel();
        tracing::debug!("Exec {}: PID {pid} exited", self.task_id);
        group.exited();

        // Every byte of output reaches the client before the task is ready, unless the
        // change is aborted or the daemon stops first.
        let relayed = futures_util::future::join_all(relays.iter_mut());
        tokio::select! {
            _ = relayed => {}
            () = abort.cancelled() => {}
            () = self.shutdown.cancelled() => {}
        }
        for relay in &relays {
            relay.abort();
        }
        if let Some(writer) = control {
            let _ = tokio::time::timeout(CLOSE_WAIT, writer.close(close_code::NORMAL)).await;
        }
        finished.cancel();

        let stop = stop.or_else(|| {
            if abort.is_cancelled() {
                Some(Stop::Aborted)
            } else if self.shutdown.is_cancelled() {
                Some(Stop::Shutdown)
            } else {
                None
            }
        });
        match stop {
            None => Ok(status.map(|s| s.code()).unwrap_or(-1)),
            Some(Stop::TimedOut) => {
                let timeout = self.prepared.timeout.unwrap_or_default();
                let nanos = i64::try_from(timeout.as_nanos()).unwrap_or(i64::MAX);
                Err(Failure::new(
                    format!(
                        "timed out after {}: context deadline exceeded",
                        cobble_plan::format_duration(nanos)
                    ),
                    Some(-1),
                ))
            }
            Some(Stop::Aborted) => Err(Failure::new("aborted: context canceled", Some(-1))),
            Some(Stop::Shutdown) => {
                Err(Failure::new("daemon stopping: context canceled", Some(-1)))
            }
        }
    }

    /// Waits until `stdio` (and `stderr` when split) are connected; `control` may come with
    /// them or later.
    async fn wait_for_io(&mut self, abort: &CancellationToken) -> Result<Sockets, Failure> {
        let mut sockets = Sockets::default();
        let deadline = tokio::time::sleep(CONNECT_TIMEOUT);
        tokio::pin!(deadline);
        while sockets.stdio.is_none() || (self.prepared.split_stderr && sockets.stderr.is_none()) {
            tokio::select! {
                Some((channel, socket)) = self.sockets.recv() => match channel {
                    Channel::Control => sockets.control = Some(socket),
                    Channel::Stdio => sockets.stdio = Some(socket),
                    Channel::Stderr => sockets.stderr = Some(socket),
                },
                () = &mut deadline => {
                    tracing::info!(
                        "Exec {}: timeout waiting for websocket connections: context deadline exceeded",
                        self.task_id
                    );
                    return Err(Failure::new(
                        format!(
                            "exec {}: timeout waiting for websocket connections: context deadline exceeded",
                            self.task_id
                        ),
                        None,
                    ));
                }
                () = abort.cancelled() => return Err(Failure::new("aborted: context canceled", None)),
                () = self.shutdown.cancelled() => {
                    return Err(Failure::new("daemon stopping: context canceled", None));
                }
            }
        }
        Ok(sockets)
    }

    /// Launches the command (on a new terminal if asked).
    async fn launch(&self) -> Result<(launch::Child, Group), Failure> {
        let prepared = &self.prepared;
        let launch = Launch {
            clear_environment: true,
            ..Launch::new(
                prepared.argv.clone(),
                ContextOptions {
                    environment: prepared.environment.clone(),
                    user_id: prepared.ids.map(|(uid, _)| uid),
                    group_id: prepared.ids.map(|(_, gid)| gid),
                    working_dir: prepared.working_dir.clone(),
                    rlimits: prepared.rlimits.clone(),
                    ..ContextOptions::default()
                },
            )
        };
        let wiring = if prepared.terminal {
            Wiring::Terminal {
                size: prepared.size.unwrap_or(WindowSize {
                    width: 0,
                    height: 0,
                }),
                owner: prepared.ids,
                interactive: prepared.interactive,
                split_stderr: prepared.split_stderr,
            }
        } else {
            Wiring::Pipes {
                split_stderr: prepared.split_stderr,
            }
        };
        self.launcher
            .launch(format!("exec task {}", self.task_id), launch, wiring)
            .await
            .map_err(|e| Failure::new(e.to_string(), Some(-1)))
    }

    /// Starts reading the control websocket; returns the half the session closes at the end.
    fn watch_control(
        &self,
        socket: Socket,
        events: &mpsc::UnboundedSender<ControlEvent>,
        finished: &CancellationToken,
    ) -> Writer {
        self.tasks.spawn(read_control(
            socket.reader,
            events.clone(),
            finished.clone(),
            self.shutdown.clone(),
        ));
        socket.writer
    }

    /// Acts on a control event while the command runs.
    fn control(&self, event: ControlEvent, group: &Group, master: Option<&Master>) {
        let id = self.task_id;
        let pid = group.pid();
        let text = match event {
            ControlEvent::Closed { abnormal: false } => return,
            ControlEvent::Closed { abnormal: true } => {
                // The client is gone without saying so: nobody is left to stop the command.
                tracing::debug!("Exec {id}: control websocket dropped; killing PID {pid}");
                group.kill();
                return;
            }
            ControlEvent::Command(text) => text,
        };
        let command: ExecCommand = match go_json::decode_as(text.as_bytes(), &CONTROL_COMMAND) {
            Ok(command) => command,
            Err(e) => {
                tracing::info!("Exec {id}: cannot decode control websocket command: {e}");
                return;
            }
        };
        match (command.command.as_str(), master) {
            ("resize", Some(master)) => {
                let Some(resize) = command.resize else {
                    tracing::info!(
                        "Exec {id}: control command \"resize\" requires terminal width and height"
                    );
                    return;
                };
                let (width, height) = (resize.width, resize.height);
                let size = WindowSize {
                    width: u16::try_from(width).unwrap_or(0),
                    height: u16::try_from(height).unwrap_or(0),
                };
                match master.resize(size) {
                    Ok(()) => {
                        tracing::debug!("Exec {id}: PID {pid} terminal resized to {width}x{height}")
                    }
                    Err(e) => tracing::info!(
                        "Exec {id}: control command \"resize\" cannot set terminal size to \
                         {width}x{height}: {}",
                        cobble_sys::os_error_text(&e)
                    ),
                }
            }
            ("signal", _) => {
                let Some(signal) = command.signal else {
                    tracing::info!("Exec {id}: control command \"signal\" requires signal name");
                    return;
                };
                let name = signal.name;
                let Ok(sig) = process::parse_signal(&name) else {
                    tracing::info!("Exec {id}: invalid signal name {name:?}");
                    return;
                };
                match group.signal(sig) {
                    Ok(()) => tracing::info!("Exec {id}: forwarded signal {name} to PID {pid}"),
                    Err(e) => tracing::info!(
                        "Exec {id}: control command \"signal\" cannot forward {name} to PID \
                         {pid}: {}",
                        cobble_sys::os_error_text(&e)
                    ),
                }
            }
            (other, _) => {
                tracing::info!("Exec {id}: invalid control websocket command {other:?}")
            }
        }
    }
}

fn end_message() -> String {
    serde_json::to_string(&ExecCommand::end()).expect("a command serialises")
}

/// Where a command's output comes from.
enum Output {
    /// A pipe, read to end of file: output written just before the exit is never lost.
    /// It grows once a read finds it full.
    Pipe { pipe: pipe::Receiver, grown: bool },
    /// The terminal, read until it ends, or until the command has exited and the terminal
    /// has been quiet for [`TERMINAL_DRAIN_IDLE`].
    Terminal {
        master: Arc<Master>,
        exited: CancellationToken,
    },
}

impl Output {
    fn pipe(pipe: pipe::Receiver) -> Output {
        Output::Pipe { pipe, grown: false }
    }

    /// Reads the next chunk into `buf`'s spare capacity; 0 at the end of the output.
    async fn read(&mut self, buf: &mut impl BufMut) -> usize {
        let read = match self {
            Output::Pipe { pipe, grown } => {
                let read = pipe.read_buf(buf).await;
                if let Ok(n) = read {
                    grow_when_filled(pipe, grown, n);
                }
                read
            }
            Output::Terminal { master, exited } => {
                let mut reader: &Master = master;
                loop {
                    if exited.is_cancelled() {
                        match tokio::time::timeout(TERMINAL_DRAIN_IDLE, reader.read_buf(buf)).await
                        {
                            Ok(read) => break read,
                            Err(_quiet) => return 0,
                        }
                    }
                    tokio::select! {
                        read = reader.read_buf(buf) => break read,
                        // Reading is cancel-safe: nothing is lost by starting over.
                        () = exited.cancelled() => {}
                    }
                }
            }
        };
        read.unwrap_or(0)
    }
}

/// Sends a command's output to the client in binary frames, then `end`. If the client is
/// gone, the output is closed: the command's writes then fail, as they would under Pebble.
///
/// From a pipe, on a connection that takes them, the bytes are spliced: each frame carries
/// what waits in the pipe, moved to the socket by the kernel. Otherwise each chunk is read
/// into memory that is neither zeroed first nor copied after; zeroing a whole chunk before
/// each read cost more than the read itself for the short outputs most commands have.
async fn relay(mut output: Output, writer: Writer) {
    let mut buf = BytesMut::new();
    loop {
        let sent = match &mut output {
            Output::Pipe { pipe, grown } if writer.splices() => {
                splice_pending(pipe, grown, &writer).await
            }
            _ => {
                buf.clear();
                buf.reserve(CHUNK);
                match output.read(&mut (&mut buf).limit(CHUNK)).await {
                    0 => Ok(false),
                    _ => writer.binary(&buf).await.map(|()| true),
                }
            }
        };
        match sent {
            Ok(true) => {}
            Ok(false) => break,
            Err(_) => return,
        }
    }
    let _ = writer.text(&end_message()).await;
}

/// Sends what waits in `pipe` as one frame, spliced; `Ok(false)` at the end of the output
/// (or when the pipe fails), an error when the client is gone.
async fn splice_pending(
    pipe: &pipe::Receiver,
    grown: &mut bool,
    writer: &Writer,
) -> std::io::Result<bool> {
    loop {
        if pipe.readable().await.is_err() {
            return Ok(false);
        }
        let pending = match cobble_sys::pipe::pending_bytes(pipe) {
            Ok(pending) => pending,
            Err(_) => return Ok(false),
        };
        if pending == 0 {
            // The end of the output, or readiness that is out of date: a read tells which
            // (and brings anything written since the count).
            let mut probe = [0u8; 512];
            return match pipe.try_read(&mut probe) {
                Ok(0) => Ok(false),
                Ok(n) => writer.binary(&probe[..n]).await.map(|()| true),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(_) => Ok(false),
            };
        }
        grow_when_filled(pipe, grown, pending);
        writer.splice(pipe, pending.min(SPLICED_CHUNK)).await?;
        return Ok(true);
    }
}

/// Grows an output pipe, once, when `taken` bytes at a time show the command fills it.
fn grow_when_filled(pipe: &pipe::Receiver, grown: &mut bool, taken: usize) {
    if !*grown && taken >= launch::DEFAULT_PIPE_BYTES {
        launch::grow_exec_pipe(pipe);
        *grown = true;
    }
}

/// Where the client's input goes.
enum Stdin {
    /// A pipe: `end` closes it. It grows once a write finds it full.
    Pipe { pipe: pipe::Sender, grown: bool },
    /// The terminal, in interactive mode: `end` is typed as its end-of-file character.
    Terminal(Arc<Master>),
    /// Nowhere (ended, or the command stopped reading): input is discarded.
    Closed,
}

impl Stdin {
    async fn write(&mut self, bytes: &[u8]) {
        let written = match self {
            Stdin::Pipe { pipe, grown } if !*grown => match pipe.try_write(bytes) {
                Ok(n) if n == bytes.len() => Ok(()),
                Ok(n) => {
                    launch::grow_exec_pipe(pipe);
                    *grown = true;
                    pipe.write_all(&bytes[n..]).await
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    launch::grow_exec_pipe(pipe);
                    *grown = true;
                    pipe.write_all(bytes).await
                }
                Err(e) => Err(e),
            },
            Stdin::Pipe { pipe, .. } => pipe.write_all(bytes).await,
            Stdin::Terminal(master) => {
                let mut writer: &Master = master;
                writer.write_all(bytes).await
            }
            Stdin::Closed => Ok(()),
        };
        if written.is_err() {
            // The command closed its stdin; the rest of the input has nowhere to go.
            *self = Stdin::Closed;
        }
    }

    async fn end(&mut self) {
        if let Stdin::Terminal(master) = self
            && let Ok(eof) = master.eof_byte()
        {
            let mut writer: &Master = master;
            let _ = writer.write_all(&[eof]).await;
        }
        *self = Stdin::Closed;
    }
}

/// Relays the client's `stdio` frames to the command's stdin until the client closes the
/// websocket (which also ends stdin), and discards input once the session is over.
async fn relay_stdin(
    mut frames: Reader,
    mut stdin: Stdin,
    finished: CancellationToken,
    shutdown: CancellationToken,
) {
    loop {
        let event = tokio::select! {
            event = frames.next() => event,
            () = finished.cancelled(), if !matches!(stdin, Stdin::Closed) => {
                stdin = Stdin::Closed;
                continue;
            }
            () = shutdown.cancelled() => return,
        };
        match event {
            Event::Data { bytes, .. } => {
                tokio::select! {
                    () = stdin.write(bytes) => {}
                    // A command that never reads its stdin must not keep this task writing.
                    () = finished.cancelled() => stdin = Stdin::Closed,
                    () = shutdown.cancelled() => return,
                }
            }
            Event::Text(text) => {
                match go_json::unmarshal_as::<ExecCommand>(text.as_bytes(), &IO_COMMAND) {
                    Ok(command) if command.command == "end" => stdin.end().await,
                    Ok(command) => tracing::info!("Invalid I/O command {:?}", command.command),
                    Err(e) => tracing::info!("Cannot decode I/O command: {e}"),
                }
            }
            Event::Closed { .. } => break,
        }
    }
    stdin.end().await;
}

/// Reads the control websocket and reports to the session until it ends. A command may come
/// as a binary message too.
async fn read_control(
    mut frames: Reader,
    events: mpsc::UnboundedSender<ControlEvent>,
    finished: CancellationToken,
    shutdown: CancellationToken,
) {
    let mut binary = Vec::new();
    loop {
        let event = tokio::select! {
            event = frames.next() => event,
            () = finished.cancelled() => return,
            () = shutdown.cancelled() => return,
        };
        let event = match event {
            Event::Text(text) => ControlEvent::Command(text),
            Event::Data { bytes, last } => {
                // Commands are short: a longer message is cut, and fails to decode.
                let room = MAX_COMMAND.saturating_sub(binary.len());
                binary.extend_from_slice(&bytes[..bytes.len().min(room)]);
                if !last {
                    continue;
                }
                ControlEvent::Command(
                    String::from_utf8_lossy(&std::mem::take(&mut binary)).into_owned(),
                )
            }
            Event::Closed { abnormal } => ControlEvent::Closed { abnormal },
        };
        let closed = matches!(event, ControlEvent::Closed { .. });
        // The session may be over; then nobody listens, and that is fine.
        let _ = events.send(event);
        if closed {
            return;
        }
    }
}

/// Reads (and discards) what a client sends on an output-only websocket until it closes.
async fn drain(mut frames: Reader, shutdown: CancellationToken) {
    loop {
        tokio::select! {
            event = frames.next() => if let Event::Closed { .. } = event {
                return;
            },
            () = shutdown.cancelled() => return,
        }
    }
}
