//! `enter [--run] [<subcommand> ...]`: cobble as a container's entrypoint that runs one
//! command against a daemon of its own.
//!
//! # Theory of operation
//!
//! Without a subcommand, `enter` is `run` with the same flags. With one, the daemon runs in
//! this process, on a thread of its own, with `run`'s flags and environment; the subcommand
//! runs once the daemon is ready, talking to it over its socket like any client; then the
//! daemon is stopped and `enter` exits with the subcommand's status (for `exec`, the remote
//! command's exit code).
//!
//! Each supported subcommand decides, as in Pebble, whether the default services start
//! (`--run`, required by `stop`, refused by `plan`, `services`, `ls`, `version` and `help`),
//! whether the daemon's log is silenced (everything but `start` and `stop`, unless `-v` or
//! `PEBBLE_VERBOSE=1`, which also copy service output; `exec` refuses `-v` but not the
//! variable), and whether
//! the daemon keeps running after a successful subcommand (`start` and `stop`). `help` needs
//! no daemon at all. `PEBBLE_PERSIST=never` and the other variables `run` reads apply as they
//! do to `run`.

use std::process::ExitCode;
use std::sync::mpsc as std_mpsc;
use std::thread::JoinHandle;

use clap::{Args, CommandFactory, FromArgMatches};
use cobble_client::{Client, ClientConfig};
use cobble_daemon::{Embedding, RunOptions};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::run::{RunArgs, daemon_status};
use super::{
    Cli, Command, dispatch, exec, finish, help, program_name, report_parse_error, run, run_command,
    version,
};

/// What `help enter` says beyond the summary.
pub(super) const LONG_ABOUT: &str = "Makes cobble a container's entrypoint that can also run one \
    command. Without a subcommand, enter does what run does, with the same options. With one, \
    it starts the daemon, runs the subcommand against it, stops the daemon and exits with the \
    subcommand's status.\n\n\
    Supported subcommands:\n\n  \
    help      (1)(2)\n  \
    version   (1)(2)\n  \
    plan      (1)(2)\n  \
    services  (1)(2)\n  \
    ls        (1)(2)\n  \
    exec      (2)\n  \
    start     (3)\n  \
    stop      (3)\n\n\
    (1) Services are not started.\n\
    (2) No logs unless -v/--verbose or PEBBLE_VERBOSE=1 is used (exec refuses \
    -v/--verbose, but not PEBBLE_VERBOSE=1).\n\
    (3) Services continue running after the subcommand succeeds.";

/// Arguments of `enter`.
#[derive(Debug, Args)]
pub(super) struct EnterArgs {
    #[command(flatten)]
    run_args: RunArgs,
    /// Start default services before executing subcommand
    #[arg(long)]
    run: bool,
    /// The subcommand to run, then its own arguments and options.
    #[arg(value_name = "subcommand", num_args = 0.., trailing_var_arg = true)]
    subcommand: Vec<String>,
}

/// How `enter` runs one subcommand.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Needs {
    /// No daemon log unless `-v`.
    silence_log: bool,
    /// `-v`/`--verbose` is refused.
    prohibit_verbose: bool,
    /// The subcommand runs without a daemon.
    no_daemon: bool,
    /// The daemon keeps running after the subcommand succeeds.
    keep_daemon: bool,
    /// `--run` is required.
    require_autostart: bool,
    /// `--run` is refused.
    prohibit_autostart: bool,
}

/// What each supported subcommand needs; `None` for the others.
fn needs(command: &Command) -> Option<Needs> {
    let needs = match command {
        Command::Exec(_) => Needs {
            silence_log: true,
            prohibit_verbose: true,
            ..Needs::default()
        },
        Command::Help(_) => Needs {
            no_daemon: true,
            ..Needs::default()
        },
        Command::Ls(_) | Command::Plan(_) | Command::Services(_) | Command::Version(_) => Needs {
            silence_log: true,
            prohibit_autostart: true,
            ..Needs::default()
        },
        Command::Start(_) => Needs {
            keep_daemon: true,
            ..Needs::default()
        },
        Command::Stop(_) => Needs {
            keep_daemon: true,
            require_autostart: true,
            ..Needs::default()
        },
        _ => return None,
    };
    Some(needs)
}

/// Refuses flags that do not go with the subcommand, in Pebble's words.
fn check_flags(needs: Needs, name: &str, run: bool, verbose: bool) -> anyhow::Result<()> {
    if needs.require_autostart && !run {
        anyhow::bail!("enter: must use --run before {name:?} subcommand");
    }
    if (needs.prohibit_autostart || needs.no_daemon) && run {
        anyhow::bail!("enter: cannot provide --run before {name:?} subcommand");
    }
    if needs.prohibit_verbose && verbose {
        anyhow::bail!("enter: cannot provide -v/--verbose before {name:?} subcommand");
    }
    Ok(())
}

/// Runs `enter`.
pub(super) fn execute(args: EnterArgs, groups: Vec<Vec<String>>) -> ExitCode {
    let Some(name) = args.subcommand.first().cloned() else {
        return run::execute(args.run_args, groups);
    };
    let argv = std::iter::once(program_name().to_string()).chain(args.subcommand.iter().cloned());
    let parsed = Cli::command()
        .name(program_name())
        .try_get_matches_from(argv)
        .and_then(|matches| Cli::from_arg_matches(&matches));
    let command = match parsed {
        Ok(Cli {
            command: Some(command),
            ..
        }) => command,
        Ok(_) => return finish(Err(anyhow::anyhow!("enter: expected a subcommand"))),
        Err(err) => return report_parse_error(err),
    };
    let Some(needs) = needs(&command) else {
        return finish(Err(anyhow::anyhow!(
            "enter: subcommand {name:?} is not supported"
        )));
    };
    if let Err(err) = check_flags(needs, &name, args.run, args.run_args.verbose_flag()) {
        return finish(Err(err));
    }
    if needs.no_daemon {
        let Command::Help(help_args) = command else {
            unreachable!("only help runs without a daemon");
        };
        return finish(help::execute(help_args));
    }

    let mut options = match args.run_args.resolve(groups) {
        Ok(options) => options,
        Err(status) => return status,
    };
    options.hold = !args.run;
    let client = match Client::new(ClientConfig::socket(&options.socket_path)) {
        Ok(client) => client,
        Err(err) => return finish(Err(err.into())),
    };
    // `PEBBLE_VERBOSE=1` shows the log too: unlike `-v`, `enter exec` accepts it.
    let silent = needs.silence_log && !options.verbose;
    let daemon = match EmbeddedDaemon::start(options, silent) {
        Ok(daemon) => daemon,
        Err(code) => return daemon_status(code),
    };

    let outcome = run_subcommand(command, &client);
    let keep = outcome.is_ok() && needs.keep_daemon;
    if !keep {
        daemon.stop();
    }
    let daemon_code = daemon.wait();
    match outcome {
        Ok(Some(code)) => ExitCode::from(exec::exit_status(code)),
        Ok(None) if keep => daemon_status(daemon_code),
        Ok(None) => ExitCode::SUCCESS,
        Err(err) => finish(Err(err)),
    }
}

/// Runs the subcommand against the daemon; `exec` gives its command's exit code.
fn run_subcommand(command: Command, client: &Client) -> anyhow::Result<Option<i32>> {
    match command {
        Command::Exec(args) => exec::run(args, client).map(Some),
        Command::Version(args) if args.client => {
            version::print_client_only(args.format).map(|()| None)
        }
        other => run_command(client, move |client, out| {
            Box::pin(dispatch(other, client, out))
        })
        .map(|()| None),
    }
}

/// The daemon, running on a thread of this process.
struct EmbeddedDaemon {
    thread: JoinHandle<i32>,
    stop: CancellationToken,
}

impl EmbeddedDaemon {
    /// Starts the daemon and waits until it is ready; a daemon that cannot start gives its
    /// exit code (it has reported why).
    fn start(options: RunOptions, silent: bool) -> Result<EmbeddedDaemon, i32> {
        let (ready_tx, ready) = oneshot::channel();
        let stop = CancellationToken::new();
        let embedding = Embedding {
            ready: Some(ready_tx),
            stop: stop.clone(),
            silent,
        };
        let (code_tx, code) = std_mpsc::channel();
        let thread = std::thread::spawn(move || {
            let exit_code = cobble_daemon::run_embedded(options, embedding);
            let _ = code_tx.send(exit_code);
            exit_code
        });
        if ready.blocking_recv().is_err() {
            // The daemon ended before it was ready.
            return Err(code.recv().unwrap_or(1));
        }
        Ok(EmbeddedDaemon { thread, stop })
    }

    /// Asks the daemon to stop, as SIGTERM would.
    fn stop(&self) {
        self.stop.cancel();
    }

    /// Waits for the daemon to end and returns its exit code.
    fn wait(self) -> i32 {
        self.thread.join().unwrap_or(1)
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    fn command(words: &[&str]) -> Command {
        Cli::try_parse_from(std::iter::once("cobble").chain(words.iter().copied()))
            .unwrap()
            .command
            .unwrap()
    }

    #[test]
    fn supported_subcommands_as_in_pebble() {
        let exec = needs(&command(&["exec", "true"])).unwrap();
        assert!(exec.silence_log && exec.prohibit_verbose && !exec.keep_daemon);
        assert!(needs(&command(&["help"])).unwrap().no_daemon);
        for words in [&["ls", "/"][..], &["plan"], &["services"], &["version"]] {
            let n = needs(&command(words)).unwrap();
            assert!(n.silence_log && n.prohibit_autostart, "{words:?}");
        }
        let start = needs(&command(&["start", "svc"])).unwrap();
        assert!(start.keep_daemon && !start.silence_log && !start.require_autostart);
        let stop = needs(&command(&["stop", "svc"])).unwrap();
        assert!(stop.keep_daemon && stop.require_autostart);
        for words in [&["changes"][..], &["replan"], &["run"], &["enter"]] {
            assert_eq!(needs(&command(words)), None, "{words:?}");
        }
    }

    #[test]
    fn flags_that_do_not_fit_are_refused_in_pebbles_words() {
        let needs_of = |words: &[&str]| needs(&command(words)).unwrap();
        let message =
            |n, name, run, verbose| check_flags(n, name, run, verbose).unwrap_err().to_string();
        assert_eq!(
            message(needs_of(&["stop", "x"]), "stop", false, false),
            "enter: must use --run before \"stop\" subcommand"
        );
        assert_eq!(
            message(needs_of(&["plan"]), "plan", true, false),
            "enter: cannot provide --run before \"plan\" subcommand"
        );
        assert_eq!(
            message(needs_of(&["help"]), "help", true, false),
            "enter: cannot provide --run before \"help\" subcommand"
        );
        assert_eq!(
            message(needs_of(&["exec", "x"]), "exec", false, true),
            "enter: cannot provide -v/--verbose before \"exec\" subcommand"
        );
        assert!(check_flags(needs_of(&["exec", "x"]), "exec", true, false).is_ok());
        assert!(check_flags(needs_of(&["services"]), "services", false, true).is_ok());
    }

    #[test]
    fn the_subcommand_keeps_its_own_options() {
        let cli = Cli::try_parse_from([
            "cobble",
            "enter",
            "--hold",
            "--run",
            "exec",
            "--timeout",
            "1s",
            "echo",
            "-n",
            "--run",
        ])
        .unwrap();
        let Some(Command::Enter(args)) = cli.command else {
            panic!("not enter");
        };
        assert!(args.run);
        assert_eq!(
            args.subcommand,
            ["exec", "--timeout", "1s", "echo", "-n", "--run"]
        );
    }
}
