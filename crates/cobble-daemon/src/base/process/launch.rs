//! Launching the commands cobble runs for others: services, exec checks and exec requests.
//!
//! All of them get the same treatment: the program found like Go's `exec.LookPath` (clients
//! match on its error text), the daemon's environment plus their own, their user, group and
//! working directory, and every signal at its default with none blocked and the descriptor
//! limit the daemon was started with, whatever the daemon inherited (`cobble_sys::inherit`). Exits arrive through the reaper. What differs is the [`Wiring`]:
//! services and exec checks run in a process group of their own (so a stop or a timeout
//! reaches their children), with stdin from `/dev/null` and one pipe carrying both stdout
//! and stderr in the order they were written; exec requests run in a session of their own,
//! with stdin and output on pipes or on a terminal, as Pebble runs them. Those on pipes are
//! started without a fork of the daemon (`cobble_sys::vspawn`): they come in bursts, and
//! copying the daemon for each was most of what an `exec true` cost it.
//!
//! Launching blocks (it looks up users, stats `PATH` entries and forks): call it from a
//! blocking task, never on a runtime worker. Most callers launch through
//! [`super::launcher`] or [`super::supervise`], which record the command's group first.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::Mutex;

use cobble_plan::ContextOptions;
use cobble_sys::pty::{self, Master, WindowSize};
use cobble_sys::reaper::{self, ExitStatus};

use super::cgroup::ServiceCgroup;
use tokio::net::unix::pipe;
use tokio::sync::oneshot;

/// The buffer an exec's pipe grows to (Linux's default `pipe-max-size`) once a stream fills
/// the default 64 KiB ([`grow_exec_pipe`]). With the default, a stream through a command
/// such as `cat` moves in small steps, each a wake-up of the command and of the relay; a
/// larger buffer lets each side move more per wake-up. Pipes start at the default because
/// an unprivileged user's pipes share a budget (`pipe-user-pages-soft`, 64 MiB): asked for
/// up front, 1 MiB per pipe spent it with about twenty concurrent execs, after which every
/// new pipe of that user, services' included, got 8 KiB. The kernel allocates the pages
/// only as they fill.
pub(crate) const EXEC_PIPE_SIZE: usize = 1024 * 1024;

/// What a pipe holds before anything grows it.
pub(crate) const DEFAULT_PIPE_BYTES: usize = 64 * 1024;

/// What to run, and as whom. Every launch starts as [`Launch::new`] from the context the
/// command runs in; what only some kinds of command have is set on top of it, so a field
/// that changes how commands start is added here once.
#[derive(Debug, Clone, Default)]
pub(crate) struct Launch {
    /// Program and arguments; the program is looked up in the daemon's `PATH` unless it has
    /// a slash.
    pub argv: Vec<String>,
    /// The environment added to the daemon's, the user and group (validated as Pebble
    /// validates them), the working directory (the daemon's when empty) and the limits set
    /// on the process before it runs (`rlimits:`): a service's own, an exec check's merged
    /// with its `service-context`, or those an exec request's set-up worked out.
    pub context: ContextOptions,
    /// Set `HOME` and `USER` from the target user when the environment does not (services).
    pub user_environment: bool,
    /// Start from an empty environment rather than the daemon's: the context's environment
    /// is complete (exec builds it whole, the daemon's included).
    pub clear_environment: bool,
    /// The cgroup the process runs in, entered before it runs (services with `resources:`).
    pub cgroup: Option<ServiceCgroup>,
    /// Listening sockets passed as descriptors 3 and on, named in `LISTEN_FDNAMES`, with
    /// `LISTEN_FDS` and `LISTEN_PID` set as `sd_listen_fds(3)` reads them (services with
    /// `sockets:`; never exec checks or exec requests).
    pub passed_fds: Vec<PassedFd>,
    /// Variables set to the command's own pid, which exists only once it is forked
    /// (`WATCHDOG_PID`).
    pub pid_variables: Vec<&'static str>,
}

/// A listening socket passed to a command.
#[derive(Debug, Clone)]
pub(crate) struct PassedFd {
    /// Its name in `LISTEN_FDNAMES`.
    pub name: String,
    /// The daemon's descriptor, which the daemon keeps open across runs.
    pub fd: Arc<OwnedFd>,
}

impl Launch {
    /// `argv`, run with `context`'s environment, identity, directory and limits.
    pub(crate) fn new(argv: Vec<String>, context: ContextOptions) -> Launch {
        Launch {
            argv,
            context,
            ..Launch::default()
        }
    }
}

/// How a command's stdin, stdout and stderr are connected, and the session it runs in.
#[derive(Debug, Default)]
pub(crate) enum Wiring {
    /// Services and exec checks: stdin from `/dev/null`, stdout and stderr on one pipe, a
    /// process group of its own.
    #[default]
    Merged,
    /// Exec checks: as [`Wiring::Merged`], but in a session of their own (and so a process
    /// group of their own), started without a fork of the daemon (`cobble_sys::vspawn`): they
    /// come every period, many at a time.
    Probe,
    /// Exec without a terminal: a session of its own, stdin from a pipe, stdout on a pipe,
    /// stderr on a pipe of its own or on stdout's.
    Pipes {
        /// Whether stderr gets its own pipe.
        split_stderr: bool,
    },
    /// Exec on a new terminal: stdout (and stderr unless split) on the pty's slave. When
    /// interactive, stdin is the slave too and it becomes the session's controlling terminal;
    /// otherwise stdin is a pipe, as Pebble does it.
    Terminal {
        /// The terminal's first size.
        size: WindowSize,
        /// Who owns the slave: the command's uid and gid, when it runs as another user.
        owner: Option<(u32, u32)>,
        /// Whether stdin is the terminal.
        interactive: bool,
        /// Whether stderr gets a pipe of its own.
        split_stderr: bool,
    },
}

/// A launched command.
pub(crate) struct Child {
    pub pid: u32,
    /// Resolves with the exit status.
    pub exit: oneshot::Receiver<ExitStatus>,
    /// The read end of its stdout (and of its stderr, unless that has its own pipe); none
    /// when a terminal carries it. End of file comes once every process holding the write
    /// end (the command and any descendant it passed it to) is gone.
    pub output: Option<pipe::Receiver>,
    /// The read end of its stderr, when stderr has a pipe of its own.
    pub stderr: Option<pipe::Receiver>,
    /// The write end of its stdin, when stdin is a pipe.
    pub stdin: Option<pipe::Sender>,
    /// The daemon's side of its terminal, when it runs on one.
    pub terminal: Option<Master>,
}

/// Why a command could not be launched, worded like Go's `os/exec` where clients see it.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LaunchError {
    #[error("empty command")]
    Empty,
    /// `exec: "x": executable file not found in $PATH`.
    #[error("{0}")]
    NotFound(String),
    /// The user or group is unknown or inconsistent.
    #[error("{0}")]
    User(String),
    #[error("cannot create pipe: {0}")]
    Pipe(std::io::Error),
    #[error("cannot open terminal: {0}")]
    Terminal(std::io::Error),
    /// A limit or the cgroup could not be set before the command ran: `cannot set rlimit
    /// nofile to 1048576: operation not permitted`.
    #[error("{0}")]
    Setup(String),
    /// `fork/exec /path: no such file or directory`, and the like.
    #[error("fork/exec {}: {}", .path.display(), cobble_sys::os_error_text(.error))]
    Fork {
        path: PathBuf,
        error: std::io::Error,
    },
}

/// Launches `launch` wired as `wiring` says. Blocking; needs a tokio runtime context for the
/// pipes.
pub(crate) fn spawn_wired(launch: &Launch, wiring: Wiring) -> Result<Child, LaunchError> {
    launch_command(launch, wiring, None::<fn(u32)>)
}

/// Launches `launch` wired as `wiring` says, but lets the command start only once
/// `before_exec` has run with its pid (see [`reaper::spawn_gated`]): where the daemon records
/// its pid so that the next daemon can find the process after a SIGKILL. Blocking; needs a
/// tokio runtime context for the pipes.
pub(crate) fn spawn_recorded(
    launch: &Launch,
    wiring: Wiring,
    before_exec: impl FnOnce(u32) + Send,
) -> Result<Child, LaunchError> {
    launch_command(launch, wiring, Some(before_exec))
}

fn launch_command(
    launch: &Launch,
    wiring: Wiring,
    before_exec: Option<impl FnOnce(u32) + Send>,
) -> Result<Child, LaunchError> {
    // What must happen between fork and exec: the caller's record, then the cgroup and the
    // limits. Only then is the spawn gated; a setup that fails keeps the command from running
    // and is the launch's error.
    let gated = before_exec.is_some() || launch.sets_up_child() || launch.execs_itself();
    let failed = Mutex::new(None::<String>);
    let setup = gated.then(|| {
        let failed = &failed;
        move |pid: u32| -> std::io::Result<()> {
            if let Some(before_exec) = before_exec {
                before_exec(pid);
            }
            prepare_child(launch, pid).map_err(|text| {
                *failed.lock().unwrap_or_else(|e| e.into_inner()) = Some(text);
                std::io::Error::other("refused at the gate")
            })
        }
    });
    let result = start_command(launch, wiring, setup);
    match failed.into_inner().unwrap_or_else(|e| e.into_inner()) {
        Some(text) => Err(LaunchError::Setup(text)),
        None => result,
    }
}

impl Launch {
    /// Whether the daemon sets the child up while it waits at its gate: its limits, its
    /// cgroup.
    fn sets_up_child(&self) -> bool {
        !self.context.rlimits.is_empty() || self.cgroup.is_some()
    }

    /// Whether the child execs the command itself, from an image the daemon prepared: to pass
    /// it descriptors, or its own pid (see [`cobble_sys::activation`]).
    fn execs_itself(&self) -> bool {
        !self.passed_fds.is_empty() || !self.pid_variables.is_empty()
    }

    /// The image the child execs when [`Launch::execs_itself`]: the program at `path`, the
    /// whole environment it would get from `Command` (the daemon's unless cleared, then
    /// `environment`), and the socket-activation variables.
    fn exec_image(
        &self,
        path: &Path,
        environment: &BTreeMap<String, String>,
    ) -> Result<cobble_sys::activation::ExecImage, LaunchError> {
        let mut full: BTreeMap<OsString, OsString> = if self.clear_environment {
            BTreeMap::new()
        } else {
            std::env::vars_os().collect()
        };
        full.extend(
            environment
                .iter()
                .map(|(k, v)| (OsString::from(k), OsString::from(v))),
        );
        let mut pid_variables = self.pid_variables.clone();
        if !self.passed_fds.is_empty() {
            let names: Vec<&str> = self.passed_fds.iter().map(|p| p.name.as_str()).collect();
            full.insert(
                "LISTEN_FDS".into(),
                self.passed_fds.len().to_string().into(),
            );
            full.insert("LISTEN_FDNAMES".into(), names.join(":").into());
            pid_variables.push("LISTEN_PID");
        }
        let argv: Vec<OsString> = self.argv.iter().map(OsString::from).collect();
        let fds = self.passed_fds.iter().map(|p| p.fd.as_raw_fd()).collect();
        cobble_sys::activation::ExecImage::new(
            path,
            &argv,
            full.into_iter().collect(),
            &pid_variables,
            fds,
        )
        .map_err(|error| LaunchError::Fork {
            path: path.to_owned(),
            error,
        })
    }
}

/// Puts the child `pid`, waiting at its gate, in the launch's cgroup and sets its limits.
fn prepare_child(launch: &Launch, pid: u32) -> Result<(), String> {
    if let Some(cgroup) = &launch.cgroup {
        cgroup.attach(pid).map_err(|e| {
            format!(
                "cannot enter cgroup {}: {}",
                cgroup.path().display(),
                cobble_sys::os_error_text(&e)
            )
        })?;
    }
    for (resource, value) in &launch.context.rlimits {
        let raw = |v: Option<cobble_plan::LimitValue>| v.map(|v| v.as_raw());
        cobble_sys::limits::set_rlimit(pid, resource.name(), raw(value.soft), raw(value.hard))
            .map_err(|e| {
                format!(
                    "cannot set rlimit {resource} to {value}: {}",
                    cobble_sys::os_error_text(&e)
                )
            })?;
    }
    Ok(())
}

fn start_command(
    launch: &Launch,
    wiring: Wiring,
    before_exec: Option<impl FnOnce(u32) -> std::io::Result<()> + Send>,
) -> Result<Child, LaunchError> {
    let program = launch.argv.first().ok_or(LaunchError::Empty)?;
    let path = look_path(program).map_err(LaunchError::NotFound)?;
    let mut cmd = Command::new(&path);
    cmd.arg0(program).args(&launch.argv[1..]);
    let context = &launch.context;
    let ids = cobble_sys::user::normalize_uid_gid(
        context.user_id,
        &context.user,
        context.group_id,
        &context.group,
    )
    .map_err(|e| LaunchError::User(e.to_string()))?;
    let switch = ids
        .filter(|&(uid, gid)| uid != cobble_sys::current_uid() || gid != cobble_sys::current_gid());
    // Limits and the cgroup are set on the child by the daemon while it waits at its gate,
    // which the kernel lets a daemon without `CAP_SYS_RESOURCE` do only while the child is
    // still its own user: the child takes its user, and then its directory, once the gate
    // has opened.
    let after_gate = launch.sets_up_child();
    let mut environment = context.environment.clone();
    if let (Some((uid, _)), true) = (ids, launch.user_environment) {
        add_user_environment(&mut environment, uid);
    }
    // Exec requests without a terminal and exec checks, the kinds that come in bursts:
    // started without copying the daemon (see `cobble_sys::vspawn`).
    let unforked = match &wiring {
        Wiring::Pipes { split_stderr } if launch.clear_environment => Some((false, *split_stderr)),
        Wiring::Probe => Some((true, false)),
        _ => None,
    };
    if let Some((stdin_null, split_stderr)) = unforked {
        // The child gets a whole environment: the command's, on the daemon's unless cleared.
        let mut whole: BTreeMap<OsString, OsString> = if launch.clear_environment {
            BTreeMap::new()
        } else {
            std::env::vars_os().collect()
        };
        whole.extend(environment.into_iter().map(|(k, v)| (k.into(), v.into())));
        return spawn_unforked(
            launch,
            path,
            whole.into_iter().collect(),
            Unforked {
                ids: switch,
                ids_after_gate: after_gate,
                stdin_null,
                split_stderr,
            },
            before_exec,
        );
    }
    let mut after = reaper::AfterGate::default();
    if launch.execs_itself() {
        after.exec = Some(launch.exec_image(&path, &environment)?);
    }
    if after_gate {
        after.ids = switch;
        if !context.working_dir.is_empty() {
            after.working_dir = Some(
                std::ffi::CString::new(context.working_dir.as_bytes()).map_err(|_| {
                    LaunchError::Fork {
                        path: PathBuf::from(&context.working_dir),
                        error: std::io::Error::from(std::io::ErrorKind::InvalidInput),
                    }
                })?,
            );
        }
    } else {
        if !context.working_dir.is_empty() {
            cmd.current_dir(&context.working_dir);
        }
        if let Some((uid, gid)) = switch {
            cmd.uid(uid).gid(gid);
        }
    }
    if launch.clear_environment {
        cmd.env_clear();
    }
    cmd.envs(&environment);

    let pipes = wire(&mut cmd, wiring)?;
    let spawned = match before_exec {
        // The gate resets what the command inherits itself, before it waits.
        Some(before_exec) => reaper::spawn_gated_then(&mut cmd, after, before_exec),
        None => {
            cobble_sys::inherit::on_exec(&mut cmd);
            reaper::spawn(&mut cmd)
        }
    }
    .map_err(|error| LaunchError::Fork {
        path: path.clone(),
        error,
    })?;
    // The command holds the daemon's copies of the pipes' child ends (and of a terminal's
    // slave): drop them, or the readers never see end of file.
    drop(cmd);
    Ok(Child {
        pid: spawned.pid,
        exit: spawned.exit,
        output: pipes.output,
        stderr: pipes.stderr,
        stdin: pipes.stdin,
        terminal: pipes.terminal,
    })
}

/// How [`spawn_unforked`] wires a command.
struct Unforked {
    /// The uid and gid to switch to, if any.
    ids: Option<(u32, u32)>,
    /// Whether it switches only once its gate has opened.
    ids_after_gate: bool,
    /// Stdin from `/dev/null` (exec checks) rather than a pipe (exec requests).
    stdin_null: bool,
    /// Stderr on a pipe of its own.
    split_stderr: bool,
}

/// Launches an exec request's command on pipes (see [`Wiring::Pipes`]), or an exec check's
/// (see [`Wiring::Probe`]), with `cobble_sys::vspawn`, gated by `before_exec` when given.
/// `environment` is the whole environment.
fn spawn_unforked(
    launch: &Launch,
    path: PathBuf,
    environment: Vec<(OsString, OsString)>,
    how: Unforked,
    before_exec: Option<impl FnOnce(u32) -> std::io::Result<()> + Send>,
) -> Result<Child, LaunchError> {
    let Unforked {
        ids,
        ids_after_gate,
        stdin_null,
        split_stderr,
    } = how;
    let (stdin_read, stdin_write) = if stdin_null {
        // Above 0, 1 and 2, which a daemon started with them closed may hand out.
        let null = OwnedFd::from(std::fs::File::open("/dev/null").map_err(LaunchError::Pipe)?);
        (null.try_clone().map_err(LaunchError::Pipe)?, None)
    } else {
        let (read, write) = std::io::pipe().map_err(LaunchError::Pipe)?;
        (OwnedFd::from(read), Some(write))
    };
    let (output_read, output_write) = std::io::pipe().map_err(LaunchError::Pipe)?;
    let output_write = OwnedFd::from(output_write);
    let (stderr_read, stderr_write) = if split_stderr {
        let (read, write) = std::io::pipe().map_err(LaunchError::Pipe)?;
        (Some(read), OwnedFd::from(write))
    } else {
        (None, output_write.try_clone().map_err(LaunchError::Pipe)?)
    };
    let spawn = cobble_sys::vspawn::Spawn {
        program: path.clone(),
        argv: launch.argv.iter().map(Into::into).collect(),
        environment,
        working_dir: (!launch.context.working_dir.is_empty())
            .then(|| launch.context.working_dir.clone().into()),
        stdio: [stdin_read, output_write, stderr_write],
        ids,
        ids_after_gate,
        new_session: true,
    };
    let spawned = cobble_sys::vspawn::spawn_gated(spawn, |pid| match before_exec {
        Some(before_exec) => before_exec(pid),
        None => Ok(()),
    })
    .map_err(|error| LaunchError::Fork { path, error })?;
    // The child's ends were dropped with `spawn`: the readers see end of file once the
    // command (and whatever it passed them to) is gone.
    let receiver = |read: std::io::PipeReader| {
        pipe::Receiver::from_owned_fd(OwnedFd::from(read)).map_err(LaunchError::Pipe)
    };
    Ok(Child {
        pid: spawned.pid,
        exit: spawned.exit,
        output: Some(receiver(output_read)?),
        stderr: stderr_read.map(receiver).transpose()?,
        stdin: stdin_write
            .map(|write| pipe::Sender::from_owned_fd(OwnedFd::from(write)))
            .transpose()
            .map_err(LaunchError::Pipe)?,
        terminal: None,
    })
}

/// The daemon's ends of a command's pipes, and of its terminal.
#[derive(Default)]
struct Pipes {
    output: Option<pipe::Receiver>,
    stderr: Option<pipe::Receiver>,
    stdin: Option<pipe::Sender>,
    terminal: Option<Master>,
}

/// Connects the command's stdin, stdout and stderr and sets its session up; returns the
/// daemon's ends.
fn wire(cmd: &mut Command, wiring: Wiring) -> Result<Pipes, LaunchError> {
    if let Wiring::Terminal {
        size,
        owner,
        interactive,
        split_stderr,
    } = wiring
    {
        let pty = pty::open(size, owner).map_err(LaunchError::Terminal)?;
        let mut pipes =
            wire_terminal(cmd, &pty.slave, interactive, split_stderr).map_err(LaunchError::Pipe)?;
        pipes.terminal = Some(pty.master);
        return Ok(pipes);
    }
    wire_pipes(cmd, wiring).map_err(LaunchError::Pipe)
}

/// [`wire`] for a command on the terminal whose slave side is `slave`. The command holds
/// copies of it; the daemon's own is closed on return.
fn wire_terminal(
    cmd: &mut Command,
    slave: &OwnedFd,
    interactive: bool,
    split_stderr: bool,
) -> std::io::Result<Pipes> {
    let mut pipes = Pipes::default();
    if interactive {
        pty::attach(cmd, slave)?;
    } else {
        // A controlling terminal is set through stdin, which is a pipe here: the command
        // gets a session, and the terminal only as its output.
        pty::new_session(cmd);
        cmd.stdout(Stdio::from(slave.try_clone()?))
            .stderr(Stdio::from(slave.try_clone()?));
        pipes.stdin = Some(stdin_pipe(cmd)?);
    }
    if split_stderr {
        pipes.stderr = Some(stderr_pipe(cmd)?);
    }
    Ok(pipes)
}

/// [`wire`] for a command without a terminal.
fn wire_pipes(cmd: &mut Command, wiring: Wiring) -> std::io::Result<Pipes> {
    let mut pipes = Pipes::default();
    match wiring {
        Wiring::Merged => {
            cmd.process_group(0).stdin(Stdio::null());
            let (output, stdout, stderr) = cobble_sys::pipe::merged_pipe()?;
            cmd.stdout(stdout).stderr(stderr);
            pipes.output = Some(output);
        }
        Wiring::Pipes { split_stderr } => {
            pty::new_session(cmd);
            pipes.stdin = Some(stdin_pipe(cmd)?);
            if split_stderr {
                let (output, stdout) = output_pipe()?;
                cmd.stdout(stdout);
                pipes.output = Some(output);
                pipes.stderr = Some(stderr_pipe(cmd)?);
            } else {
                let (output, stdout, stderr) = cobble_sys::pipe::merged_pipe()?;
                cmd.stdout(stdout).stderr(stderr);
                pipes.output = Some(output);
            }
        }
        Wiring::Terminal { .. } => unreachable!("wire opens the terminal"),
        Wiring::Probe => unreachable!("exec checks are started without a fork"),
    }
    Ok(pipes)
}

/// Gives an exec's pipe [`EXEC_PIPE_SIZE`] where the kernel allows, once a stream has filled
/// it; a pipe that keeps the default size works, only slower.
pub(crate) fn grow_exec_pipe(pipe: &impl std::os::fd::AsFd) {
    let _ = cobble_sys::pipe::set_pipe_size(pipe, EXEC_PIPE_SIZE);
}

/// A pipe for one output stream of an exec: the daemon's read end and the child's write end.
fn output_pipe() -> std::io::Result<(pipe::Receiver, Stdio)> {
    let (reader, writer) = std::io::pipe()?;
    Ok((
        pipe::Receiver::from_owned_fd(OwnedFd::from(reader))?,
        Stdio::from(writer),
    ))
}

fn stderr_pipe(cmd: &mut Command) -> std::io::Result<pipe::Receiver> {
    let (stderr, writer) = output_pipe()?;
    cmd.stderr(writer);
    Ok(stderr)
}

fn stdin_pipe(cmd: &mut Command) -> std::io::Result<pipe::Sender> {
    let (reader, writer) = std::io::pipe()?;
    cmd.stdin(Stdio::from(reader));
    pipe::Sender::from_owned_fd(OwnedFd::from(writer))
}

/// `HOME` and `USER` of user `uid`, where the environment leaves them unset or empty; a
/// user that cannot be looked up is noted in the daemon's log, as Pebble notes it.
fn add_user_environment(environment: &mut BTreeMap<String, String>, uid: u32) {
    let home_missing = environment.get("HOME").is_none_or(String::is_empty);
    let user_missing = environment.get("USER").is_none_or(String::is_empty);
    if !(home_missing || user_missing) {
        return;
    }
    match cobble_sys::user::UserDb::system().lookup_id(uid) {
        Ok(user) => {
            if home_missing {
                environment.insert("HOME".into(), user.home);
            }
            if user_missing {
                environment.insert("USER".into(), user.name);
            }
        }
        Err(e) => tracing::info!("Cannot look up user {uid}: {e}"),
    }
}

/// Whether `program` names an executable, as Go's `exec.LookPath` decides it with the
/// daemon's `PATH`: a name with a slash must itself be an executable file (relative to the
/// daemon's working directory); any other name is searched for in `PATH`.
pub(crate) fn is_executable_program(program: &str) -> bool {
    if program.contains('/') {
        is_executable(Path::new(program))
    } else {
        look_path(program).is_ok()
    }
}

/// Finds `program` like Go's `exec.LookPath` with the daemon's `PATH`.
pub(crate) fn look_path(program: &str) -> Result<PathBuf, String> {
    if program.contains('/') {
        return Ok(PathBuf::from(program));
    }
    let not_found = || format!("exec: \"{program}\": executable file not found in $PATH");
    let path_var = std::env::var_os("PATH").ok_or_else(not_found)?;
    std::env::split_paths(&path_var)
        .map(|dir| {
            if dir.as_os_str().is_empty() {
                Path::new(".").join(program)
            } else {
                dir.join(program)
            }
        })
        .find(|candidate| is_executable(candidate))
        .ok_or_else(not_found)
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}
