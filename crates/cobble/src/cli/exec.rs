//! `exec <command> [<args>...]`: runs a command on the daemon's side, wired to this terminal,
//! and exits with the command's exit code.
//!
//! # Theory of operation
//!
//! The modes follow Pebble: a remote pseudo-terminal (`-t`) when stdout is a terminal, and
//! interactive input (`-i`) when stdin is one too; `-T` and `-I` turn them off. With a remote
//! terminal and a local one on stdin, the local terminal goes into raw mode, so keys such as
//! Ctrl-C and Ctrl-D travel as bytes and the remote terminal acts on them; [`RawMode`] puts it
//! back on every way out. stderr is kept apart from stdout unless both go to the same place.
//!
//! Blocking reads and writes stay off the runtime: stdin is read by a thread of its own (it
//! may never see an end, and the process exits without waiting for it), and stdout and stderr
//! are written by threads fed through bounded queues. The runtime itself only moves frames
//! and handles signals: a window-size change becomes a `resize` message (terminal mode), and
//! SIGINT, SIGTERM and the other signals Pebble forwards become `signal` messages, so Ctrl-C
//! on a terminal that is not raw reaches the command rather than ending `exec`. SIGHUP is
//! forwarded too, and then `exec` leaves with status 0, as ssh does.
//!
//! The exit code is the command's; a change that failed (the command timed out) is an error.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Read, Write};
use std::os::fd::AsFd;
use std::process::ExitCode;
use std::time::Duration;

use bytes::Bytes;
use clap::Args;
use cobble_client::{Client, ExecControl, ExecOptions, ExecOutput};
use cobble_sys::terminal::{RawMode, window_size};
use nix::sys::signal::Signal;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::{mpsc, oneshot};

/// How much of stdin is read at a time.
const STDIN_CHUNK: usize = 32 * 1024;
/// Chunks of output waiting for a slow stdout or stderr before the daemon is held back.
const OUTPUT_QUEUE: usize = 16;

/// What `help exec` says beyond the summary.
pub(super) const LONG_ABOUT: &str = "Runs a command on the daemon's side and waits for it to finish. \
    What is typed or piped into stdin here is the command's input, and its output and errors \
    come out here. The exit status is the command's.\n\n\
    Put \"--\" before the command when its arguments look like options of exec, for example:\n\n    \
    cobble exec --timeout 10s -- echo -n foo bar";

/// Arguments of `exec`.
#[derive(Debug, Args)]
pub(super) struct ExecArgs {
    /// Working directory to run command in
    #[arg(
        short = 'w',
        value_name = "dir",
        default_value = "",
        hide_default_value = true
    )]
    working_dir: String,
    /// Environment variable to set (in 'FOO=bar' format)
    #[arg(long = "env", value_name = "env")]
    env: Vec<String>,
    /// User ID to run command as
    #[arg(long = "uid", value_name = "uid")]
    user_id: Option<u32>,
    /// Username to run command as (user's UID must match uid if both present)
    #[arg(
        long,
        value_name = "user",
        default_value = "",
        hide_default_value = true
    )]
    user: String,
    /// Group ID to run command as
    #[arg(long = "gid", value_name = "gid")]
    group_id: Option<u32>,
    /// Group name to run command as (group's GID must match gid if both present)
    #[arg(
        long,
        value_name = "group",
        default_value = "",
        hide_default_value = true
    )]
    group: String,
    /// Timeout after which to terminate command
    #[arg(long, value_name = "duration", value_parser = parse_timeout)]
    timeout: Option<Duration>,
    /// Inherit the context of the named service (overridden by -w, --env, --uid/user, --gid/group)
    #[arg(
        long,
        value_name = "service",
        default_value = "",
        hide_default_value = true
    )]
    context: String,
    /// Allocate remote pseudo-terminal and connect stdout to it (default if stdout is a TTY)
    #[arg(short = 't')]
    terminal: bool,
    /// Disable remote pseudo-terminal allocation
    #[arg(short = 'T')]
    no_terminal: bool,
    /// Interactive mode: connect stdin to the pseudo-terminal (default if stdin and stdout are TTYs)
    #[arg(short = 'i')]
    interactive: bool,
    /// Disable interactive mode and use a pipe for stdin
    #[arg(short = 'I')]
    non_interactive: bool,
    /// The command to run (options after it are its own).
    #[arg(value_name = "command", required = true)]
    command: String,
    /// The command's arguments.
    #[arg(
        value_name = "args",
        num_args = 0..,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        hide = true
    )]
    args: Vec<String>,
}

/// `--timeout` as Go's `time.ParseDuration` reads it; zero means none.
fn parse_timeout(text: &str) -> Result<Duration, String> {
    let nanos = cobble_plan::parse_duration(text).map_err(|e| e.to_string())?;
    u64::try_from(nanos)
        .map(Duration::from_nanos)
        .map_err(|_| format!("time: invalid duration {}", cobble_plan::go_quote(text)))
}

/// Runs `exec` on its own and exits with the command's status.
pub(super) fn execute(args: ExecArgs) -> ExitCode {
    let outcome = Client::new(cobble_client::ClientConfig::from_env())
        .map_err(anyhow::Error::from)
        .and_then(|client| run(args, &client));
    match outcome {
        Ok(code) => ExitCode::from(exit_status(code)),
        Err(err) => super::finish(Err(err)),
    }
}

/// The status a process exits with for an exit code, as the kernel keeps it: the low 8 bits
/// (so a timed-out command's -1 is 255, as with Pebble).
pub(super) fn exit_status(code: i32) -> u8 {
    (code & 0xff) as u8
}

/// Whether the remote side gets a terminal, and whether stdin feeds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Modes {
    terminal: bool,
    interactive: bool,
}

/// Pebble's defaults: a terminal when stdout is one, interactive when stdin is one as well.
fn modes(args: &ExecArgs, stdin_is_tty: bool, stdout_is_tty: bool) -> anyhow::Result<Modes> {
    if args.terminal && args.no_terminal {
        anyhow::bail!("cannot use -t and -T at the same time");
    }
    if args.interactive && args.non_interactive {
        anyhow::bail!("cannot use -i and -I at the same time");
    }
    let terminal = if args.terminal || args.no_terminal {
        args.terminal
    } else {
        stdout_is_tty
    };
    let interactive = if args.interactive || args.non_interactive {
        args.interactive
    } else {
        stdin_is_tty && stdout_is_tty
    };
    Ok(Modes {
        terminal,
        interactive,
    })
}

/// The remote environment: this terminal's `TERM`, then each `--env` (`KEY` alone is empty).
fn environment(term: Option<String>, assignments: &[String]) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    if let Some(term) = term {
        env.insert("TERM".to_string(), term);
    }
    for assignment in assignments {
        let (key, value) = assignment.split_once('=').unwrap_or((assignment, ""));
        env.insert(key.to_string(), value.to_string());
    }
    env
}

/// Whether stdout and stderr lead to the same file or terminal, so the daemon may merge them.
fn same_destination() -> bool {
    let target = |fd: u32| std::fs::read_link(format!("/proc/self/fd/{fd}")).ok();
    matches!((target(1), target(2)), (Some(out), Some(err)) if out == err)
}

/// Runs the command and returns its exit code. Used by `exec` and by `enter exec`.
pub(super) fn run(args: ExecArgs, client: &Client) -> anyhow::Result<i32> {
    let stdin_is_tty = std::io::stdin().is_terminal();
    let stdout_is_tty = std::io::stdout().is_terminal();
    let modes = modes(&args, stdin_is_tty, stdout_is_tty)?;

    // Dropped last, so the terminal is back to normal before any error is printed.
    let _raw = if modes.terminal && stdin_is_tty {
        Some(
            RawMode::enter(std::io::stdin().as_fd())
                .map_err(|e| anyhow::anyhow!("cannot change terminal to raw mode: {e}"))?,
        )
    } else {
        None
    };
    let (width, height) = if stdout_is_tty {
        window_size(std::io::stdout().as_fd())?
    } else {
        (0, 0)
    };
    let options = ExecOptions {
        command: std::iter::once(args.command).chain(args.args).collect(),
        service_context: args.context,
        environment: environment(std::env::var("TERM").ok(), &args.env),
        working_dir: args.working_dir,
        timeout: args.timeout.filter(|t| !t.is_zero()),
        user_id: args.user_id,
        user: args.user,
        group_id: args.group_id,
        group: args.group,
        terminal: modes.terminal,
        interactive: modes.interactive,
        width: width.into(),
        height: height.into(),
        split_stderr: !same_destination(),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(session(client, &options))
}

/// What ended the session besides the command.
enum Interruption {
    Hangup,
}

async fn session(client: &Client, options: &ExecOptions) -> anyhow::Result<i32> {
    // Catch the signals before the command starts, so none of them ends this process early.
    let (interrupted_tx, mut interrupted) = oneshot::channel();
    let signals = Signals::catch()?;

    let mut process = client.exec(options).await?;
    let control = process.control();
    let signals = tokio::spawn(signals.forward(control, options.terminal, interrupted_tx));

    if let Some(stdin) = process.stdin.take() {
        tokio::spawn(feed_stdin(stdin));
    }
    let stdout = process
        .stdout
        .take()
        .map(|output| tokio::spawn(drain(output, Destination::Stdout)));
    let stderr = process
        .stderr
        .take()
        .map(|output| tokio::spawn(drain(output, Destination::Stderr)));

    let finished = async {
        let code = process.wait().await;
        // What the command wrote before it exited is shown before exec returns.
        for pump in [stdout, stderr].into_iter().flatten() {
            let _ = pump.await;
        }
        code
    };
    let outcome = tokio::select! {
        code = finished => code.map_err(anyhow::Error::from),
        Ok(Interruption::Hangup) = &mut interrupted => {
            // The \r returns the cursor to the start of the line in raw mode.
            eprint!("SIGHUP received, exiting\r\n");
            Ok(0)
        }
    };
    signals.abort();
    outcome
}

/// Copies this process's stdin to the command, from a thread that may block on it for ever.
async fn feed_stdin(mut stdin: cobble_client::ExecStdin) {
    use tokio::io::AsyncWriteExt;

    let (chunks_tx, mut chunks) = mpsc::channel::<Vec<u8>>(1);
    std::thread::spawn(move || {
        let mut input = std::io::stdin().lock();
        let mut buffer = vec![0u8; STDIN_CHUNK];
        loop {
            match input.read(&mut buffer) {
                Ok(0) => return,
                Ok(n) => {
                    if chunks_tx.blocking_send(buffer[..n].to_vec()).is_err() {
                        return;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return,
            }
        }
    });
    while let Some(chunk) = chunks.recv().await {
        if stdin.write_all(&chunk).await.is_err() {
            return;
        }
    }
    let _ = stdin.shutdown().await;
}

/// Where a stream of the command's output goes.
#[derive(Debug, Clone, Copy)]
enum Destination {
    Stdout,
    Stderr,
}

/// Moves one output stream to its destination through a writer thread, and returns once
/// everything has been written (or the destination has failed).
async fn drain(mut output: ExecOutput, destination: Destination) {
    let (chunks_tx, mut chunks) = mpsc::channel::<Bytes>(OUTPUT_QUEUE);
    let (written_tx, written) = oneshot::channel::<()>();
    std::thread::spawn(move || {
        // Locked write by write, not for the session: the SIGHUP notice goes to stderr too.
        let mut sink: Box<dyn Write> = match destination {
            Destination::Stdout => Box::new(std::io::stdout()),
            Destination::Stderr => Box::new(std::io::stderr()),
        };
        while let Some(chunk) = chunks.blocking_recv() {
            // Flushed chunk by chunk: a prompt without a newline must show at once.
            if sink.write_all(&chunk).and_then(|()| sink.flush()).is_err() {
                break;
            }
        }
        let _ = written_tx.send(());
    });
    while let Ok(Some(chunk)) = output.next_chunk().await {
        if chunks_tx.send(chunk).await.is_err() {
            break;
        }
    }
    drop(chunks_tx);
    let _ = written.await;
}

/// The signals `exec` forwards (SIGSEGV too in Pebble, which a tokio process cannot catch).
const FORWARDED: &[Signal] = &[
    Signal::SIGHUP,
    Signal::SIGTERM,
    Signal::SIGINT,
    Signal::SIGQUIT,
    Signal::SIGABRT,
    Signal::SIGTSTP,
    Signal::SIGTTIN,
    Signal::SIGTTOU,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
    Signal::SIGCONT,
];

/// The caught signals, one stream each, merged into one queue of names.
struct Signals {
    caught: mpsc::UnboundedReceiver<&'static str>,
}

/// The name [`Signals`] gives a window-size change.
const WINDOW_CHANGE: &str = "SIGWINCH";

impl Signals {
    fn catch() -> anyhow::Result<Signals> {
        let (tx, caught) = mpsc::unbounded_channel();
        let kinds = FORWARDED
            .iter()
            .map(|&signal| (signal.as_str(), SignalKind::from_raw(signal as i32)))
            .chain([(WINDOW_CHANGE, SignalKind::window_change())]);
        for (name, kind) in kinds {
            let mut stream = signal(kind)?;
            let tx = tx.clone();
            tokio::spawn(async move {
                while stream.recv().await.is_some() {
                    if tx.send(name).is_err() {
                        return;
                    }
                }
            });
        }
        Ok(Signals { caught })
    }

    /// Forwards signals to the command until the session ends; a forwarded SIGHUP ends it.
    async fn forward(
        mut self,
        control: ExecControl,
        terminal: bool,
        interrupted: oneshot::Sender<Interruption>,
    ) {
        while let Some(name) = self.caught.recv().await {
            if name == WINDOW_CHANGE {
                if !terminal {
                    continue;
                }
                if let Ok((width, height)) = window_size(std::io::stdout().as_fd()) {
                    let _ = control.resize(width.into(), height.into()).await;
                }
                continue;
            }
            if control.signal(name).await.is_ok() && name == "SIGHUP" {
                let _ = interrupted.send(Interruption::Hangup);
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Wrapper {
        #[command(flatten)]
        exec: ExecArgs,
    }

    fn parse(words: &[&str]) -> Result<ExecArgs, clap::Error> {
        Wrapper::try_parse_from(std::iter::once("exec").chain(words.iter().copied()))
            .map(|w| w.exec)
    }

    #[test]
    fn options_after_the_command_belong_to_it() {
        let args = parse(&["-w", "/tmp", "ls", "-l", "--timeout", "x", "-t"]).unwrap();
        assert_eq!(args.working_dir, "/tmp");
        assert_eq!(args.command, "ls");
        assert_eq!(args.args, ["-l", "--timeout", "x", "-t"]);
        assert!(!args.terminal);
        let args = parse(&["--timeout", "1m30s", "--", "echo", "-n", "hi"]).unwrap();
        assert_eq!(args.timeout, Some(Duration::from_secs(90)));
        assert_eq!(args.command, "echo");
        assert_eq!(args.args, ["-n", "hi"]);
    }

    #[test]
    fn every_flag_parses() {
        let args = parse(&[
            "--env",
            "A=1",
            "--env",
            "B",
            "--uid",
            "1000",
            "--user",
            "bob",
            "--gid",
            "100",
            "--group",
            "users",
            "--context",
            "svc",
            "-t",
            "-I",
            "sh",
        ])
        .unwrap();
        assert_eq!(args.env, ["A=1", "B"]);
        assert_eq!(
            (
                args.user_id,
                args.user.as_str(),
                args.group_id,
                args.group.as_str()
            ),
            (Some(1000), "bob", Some(100), "users")
        );
        assert_eq!(args.context, "svc");
        assert!(args.terminal && args.non_interactive && !args.interactive);
    }

    #[test]
    fn a_command_is_required_and_timeouts_are_go_durations() {
        assert!(parse(&[]).is_err());
        let err = parse(&["--timeout", "10", "true"]).unwrap_err().to_string();
        assert!(
            err.contains("time: missing unit in duration \"10\""),
            "{err}"
        );
    }

    #[test]
    fn modes_default_to_the_terminals_at_hand() {
        let args = parse(&["sh"]).unwrap();
        let mode = |stdin, stdout| modes(&args, stdin, stdout).unwrap();
        let on = |terminal, interactive| Modes {
            terminal,
            interactive,
        };
        assert_eq!(mode(true, true), on(true, true));
        assert_eq!(mode(false, true), on(true, false));
        assert_eq!(mode(true, false), on(false, false));
        assert_eq!(mode(false, false), on(false, false));

        let args = parse(&["-T", "-i", "sh"]).unwrap();
        assert_eq!(modes(&args, true, true).unwrap(), on(false, true));
        let args = parse(&["-t", "-I", "sh"]).unwrap();
        assert_eq!(modes(&args, false, false).unwrap(), on(true, false));
    }

    #[test]
    fn contradicting_modes_are_refused_in_pebbles_words() {
        let args = parse(&["-t", "-T", "sh"]).unwrap();
        assert_eq!(
            modes(&args, true, true).unwrap_err().to_string(),
            "cannot use -t and -T at the same time"
        );
        let args = parse(&["-i", "-I", "sh"]).unwrap();
        assert_eq!(
            modes(&args, true, true).unwrap_err().to_string(),
            "cannot use -i and -I at the same time"
        );
    }

    #[test]
    fn environment_takes_term_then_each_assignment() {
        let env = environment(
            Some("xterm".into()),
            &["A=1=2".into(), "B".into(), "TERM=dumb".into()],
        );
        assert_eq!(
            env,
            BTreeMap::from([
                ("A".to_string(), "1=2".to_string()),
                ("B".to_string(), String::new()),
                ("TERM".to_string(), "dumb".to_string()),
            ])
        );
        assert!(environment(None, &[]).is_empty());
    }

    #[test]
    fn exit_codes_keep_their_low_byte() {
        assert_eq!(exit_status(0), 0);
        assert_eq!(exit_status(3), 3);
        assert_eq!(exit_status(-1), 255);
        assert_eq!(exit_status(256), 0);
    }
}
