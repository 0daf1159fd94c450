//! Exec: one-off commands run for a client, with their I/O on websockets.
//!
//! # Theory of operation
//!
//! `POST /v1/exec` is answered at once: [`setup::prepare`] validates the request and works
//! out the command's environment, identity and directory, then [`ExecManager::start`]
//! records an `exec` change with one task and starts a [`session`] for it. The answer
//! carries the task's ID, under which the client then opens the command's websockets:
//! `control` (optional), `stdio`, and `stderr` when stderr is split.
//!
//! A websocket connects through [`ExecManager::connect`], which hands out a [`Claim`] on
//! one of the execution's channels (each may be taken once); the HTTP layer completes the
//! upgrade and delivers the socket through the claim. The session waits up to
//! [`CONNECT_TIMEOUT`] for the I/O channels, then launches the command in a session of its
//! own (on a terminal if asked) and relays: binary frames carry data, the text frame
//! `{"command":"end"}` ends a stream in either direction, and `control` carries `signal`
//! and `resize` commands. When the command has exited and its output has been relayed to
//! the end, the task records the exit code in its data and becomes ready; the control
//! websocket is closed.
//!
//! No command outlives what it belongs to: a timeout, an abort of the change, a control
//! websocket that drops without a close, and the daemon's shutdown all kill the command's
//! process group. Exits arrive through the reaper like every other child's.
//!
//! The environment a command runs with is in the API's answer and in the session's memory
//! while it launches; it is never part of the persisted state, which keeps the state file
//! small however many commands run.

mod session;
pub(crate) mod setup;
pub(crate) mod ws;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use cobble_client::types::{ExecRequest, ExecResult};
use cobble_plan::{Plan, go_quote};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::process::OsProcesses;
use crate::process::launcher::Launcher;
use crate::state::{Recorded, StateStore};
pub(crate) use setup::SetupError;

/// How long a command waits for its I/O websockets before its task fails.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the daemon's shutdown waits for killed commands to be reaped.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(2);
/// How many of the execs' blocking jobs (validating a request, launching a command) run at
/// once. A burst of execs then queues short jobs on two threads of the blocking pool instead
/// of starting a thread for each, whose forks and lookups would take the cores from the
/// runtime's workers (and leave the daemon a stack and a malloc arena per thread).
const BLOCKING_JOBS: usize = 2;

/// The read buffer of the `stdio` websocket, which carries stdin.
const STDIN_READ_BUFFER: usize = 128 * 1024;
/// The read buffer of the `control` and `stderr` websockets, which carry small commands at
/// most (a larger frame takes more reads).
const COMMAND_READ_BUFFER: usize = 4 * 1024;

/// One of an execution's websockets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Channel {
    /// Signals and terminal resizes from the client; closed by the daemon at the end.
    Control,
    /// Stdin from the client; stdout (with stderr unless split) to it.
    Stdio,
    /// Stderr to the client, when split.
    Stderr,
}

impl Channel {
    fn parse(id: &str) -> Option<Channel> {
        match id {
            "control" => Some(Channel::Control),
            "stdio" => Some(Channel::Stdio),
            "stderr" => Some(Channel::Stderr),
            _ => None,
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// An accepted exec: its change, and the API's answer.
#[derive(Debug)]
pub(crate) struct Started {
    /// The `exec` change, on disk.
    pub change_id: Recorded<u64>,
    /// What `POST /v1/exec` answers.
    pub result: ExecResult,
}

/// Why a websocket cannot connect, worded as Pebble words it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ConnectError {
    /// No task has this ID (404).
    #[error("cannot find task {}", go_quote(.0))]
    NoTask(String),
    /// The task is not an exec (400).
    #[error("{} tasks do not have websockets", go_quote(.0))]
    NoWebsockets(String),
    /// The execution has no such websocket, such as `stderr` when stderr is not split (404).
    #[error("cannot find {websocket} websocket for task {}", go_quote(.task))]
    NoWebsocket { websocket: String, task: String },
    /// The websocket is already connected (500).
    #[error("cannot connect to websocket {}: websocket {} already connected", go_quote(.0), go_quote(.0))]
    AlreadyConnected(String),
    /// The execution is over, so nothing will use the websocket; the change's error, if it
    /// failed (Pebble answers that with a 500, and an empty 200 otherwise).
    #[error(
        "cannot connect to websocket {}: {}",
        go_quote(.websocket),
        .error.as_deref().unwrap_or("the exec has already finished")
    )]
    Finished {
        websocket: String,
        error: Option<String>,
    },
}

/// Starts execs and connects their websockets. Cheap to clone.
#[derive(Clone)]
pub(crate) struct ExecManager {
    inner: Arc<Inner>,
}

struct Inner {
    state: StateStore,
    /// Executions that accept websockets, by task ID.
    executions: Registry,
    /// Cancelled when the daemon stops: every running command is killed.
    shutdown: CancellationToken,
    /// The sessions, and the websocket tasks that outlive them until their clients close.
    tasks: TaskTracker,
    /// Launches the commands, recording each before it runs (so that the next daemon ends
    /// those a killed daemon left running) unless the daemon keeps no state; its jobs,
    /// [`BLOCKING_JOBS`] at once, run the other blocking work of execs too.
    launcher: Launcher,
}

type Registry = Arc<Mutex<HashMap<u64, Arc<Slots>>>>;

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

impl ExecManager {
    pub(crate) fn new(state: StateStore) -> ExecManager {
        ExecManager {
            inner: Arc::new(Inner {
                state,
                executions: Registry::default(),
                shutdown: CancellationToken::new(),
                tasks: TaskTracker::new(),
                launcher: Launcher::new(BLOCKING_JOBS),
            }),
        }
    }

    /// The same manager, recording each command's process group in `processes` before it
    /// runs.
    pub(crate) fn recording(self, processes: Arc<OsProcesses>) -> ExecManager {
        let mut inner = Arc::into_inner(self.inner).expect("not shared yet");
        inner.launcher = inner.launcher.recording(processes);
        ExecManager {
            inner: Arc::new(inner),
        }
    }

    /// Validates `request` against `plan` and starts it: a change, a task, and a session
    /// that waits for the task's websockets.
    pub(crate) async fn start(
        &self,
        request: ExecRequest,
        plan: Arc<Plan>,
    ) -> Result<Started, SetupError> {
        // Looking up users and stat-ing paths block.
        let prepared = self
            .inner
            .launcher
            .jobs()
            .run(move || setup::prepare(request, &plan, &setup::Host::current()))
            .await
            .map_err(|e| SetupError::CannotCall(format!("internal error: {e}")))??;
        let state = &self.inner.state;
        let summary = format!("Execute command {}", go_quote(&prepared.argv[0]));
        let change_id = state.new_change("exec", &summary, Vec::new());
        let task_id = state.add_task(change_id, "exec", &summary, None);
        let result = ExecResult {
            environment: prepared.environment.clone(),
            task_id: task_id.to_string(),
            working_dir: prepared.working_dir.clone(),
        };
        // Recorded first, run after: a command the state file does not know of never runs.
        let change = match state.recorded(change_id).await {
            Ok(change) => change,
            Err(e) => {
                state.discard_change(change_id);
                return Err(SetupError::NotRecorded(e));
            }
        };
        let (deliver, sockets) = mpsc::unbounded_channel();
        lock(&self.inner.executions).insert(
            task_id,
            Arc::new(Slots {
                split_stderr: prepared.split_stderr,
                taken: Mutex::new([false; 3]),
                deliver,
            }),
        );
        let session = session::Session {
            task_id,
            change_id,
            state: state.clone(),
            prepared,
            sockets,
            registration: Registration {
                executions: self.inner.executions.clone(),
                task_id,
            },
            shutdown: self.inner.shutdown.clone(),
            launcher: self.inner.launcher.clone(),
            tasks: self.inner.tasks.clone(),
        };
        self.inner.tasks.spawn(session.run());
        Ok(Started {
            change_id: change,
            result,
        })
    }

    /// Claims websocket `websocket` of task `task_id`, if the task is an exec that still
    /// accepts it.
    pub(crate) fn connect(&self, task_id: &str, websocket: &str) -> Result<Claim, ConnectError> {
        let no_task = || ConnectError::NoTask(task_id.to_owned());
        let id: u64 = task_id.parse().map_err(|_| no_task())?;
        let (kind, change_id) = self.inner.state.task_kind(id).ok_or_else(no_task)?;
        if kind != "exec" {
            return Err(ConnectError::NoWebsockets(kind));
        }
        let slots = lock(&self.inner.executions).get(&id).cloned();
        let Some(slots) = slots else {
            // Its session is over (or belonged to an earlier daemon): answer now rather than
            // leave the client waiting for a command that will never run.
            let err = self
                .inner
                .state
                .change_info(change_id)
                .map(|c| c.err)
                .unwrap_or_default();
            return Err(ConnectError::Finished {
                websocket: websocket.to_owned(),
                error: (!err.is_empty()).then_some(err),
            });
        };
        let channel = Channel::parse(websocket)
            .filter(|&c| c != Channel::Stderr || slots.split_stderr)
            .ok_or_else(|| ConnectError::NoWebsocket {
                websocket: websocket.to_owned(),
                task: task_id.to_owned(),
            })?;
        {
            let mut taken = lock(&slots.taken);
            if taken[channel.index()] {
                return Err(ConnectError::AlreadyConnected(websocket.to_owned()));
            }
            taken[channel.index()] = true;
        }
        Ok(Claim {
            slots,
            channel,
            delivered: false,
        })
    }

    /// Kills every running command and waits (bounded) for their sessions to end.
    pub(crate) async fn shutdown(&self) {
        self.inner.shutdown.cancel();
        self.inner.tasks.close();
        if tokio::time::timeout(SHUTDOWN_WAIT, self.inner.tasks.wait())
            .await
            .is_err()
        {
            tracing::info!("Timed out waiting for exec commands to end");
        }
    }
}

/// The websockets of one execution: which exist, which are taken, and where they go.
struct Slots {
    split_stderr: bool,
    /// By [`Channel::index`].
    taken: Mutex<[bool; 3]>,
    deliver: mpsc::UnboundedSender<(Channel, ws::Socket)>,
}

/// The right to connect one websocket of an execution. Deliver the upgraded socket through
/// it; dropped undelivered (the upgrade failed), it frees the websocket for another try.
#[must_use = "a claim holds its websocket until it is delivered or dropped"]
pub(crate) struct Claim {
    slots: Arc<Slots>,
    channel: Channel,
    delivered: bool,
}

impl Claim {
    /// How many bytes the websocket should read from its connection at a time: `stdio`
    /// carries stdin in few reads, and the websockets that only carry the odd command keep
    /// a small buffer.
    pub(crate) fn read_buffer_size(&self) -> usize {
        match self.channel {
            Channel::Stdio => STDIN_READ_BUFFER,
            Channel::Control | Channel::Stderr => COMMAND_READ_BUFFER,
        }
    }

    /// Hands the upgraded socket to the execution (which drops it if it has ended since).
    pub(crate) fn deliver(mut self, socket: ws::Socket) {
        self.delivered = true;
        let _ = self.slots.deliver.send((self.channel, socket));
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        if !self.delivered {
            lock(&self.slots.taken)[self.channel.index()] = false;
        }
    }
}

/// An execution's entry in the registry; removed when the session is done with websockets
/// (or dropped, should the session end otherwise).
struct Registration {
    executions: Registry,
    task_id: u64,
}

impl Registration {
    fn remove(&self) {
        lock(&self.executions).remove(&self.task_id);
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.remove();
    }
}
