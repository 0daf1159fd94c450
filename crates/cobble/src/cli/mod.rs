//! The command line: parsing, dispatch, and Pebble's conventions for output and errors.
//!
//! # Theory of operation
//!
//! Arguments are parsed with clap, after `run`'s go-flags style `--args SERVICE ARGS... ;`
//! groups have been taken out by hand (clap has no notion of a terminator that closes a
//! group of values). Parse errors are reworded the way go-flags words them and exit with 1.
//!
//! `run` hands over to the daemon, which builds its own runtime, so `main` itself never runs
//! inside one. Every other command gets a current-thread tokio runtime, talks to the daemon
//! only through [`cobble_client::Client`], and writes to a buffered stdout.
//!
//! Errors are printed as `error: <message>` on stderr with exit code 1, like Pebble; API
//! errors are word-wrapped as Pebble wraps them. A closed stdout (`cobble services | head`)
//! is not an error.
//!
//! # Layout
//!
//! One module per command (`run`, `add`, `plan`, `services`, ...); `wait` holds what the
//! service actions share (send, then follow the change), `format` and `times` the output
//! conventions, `help` the command summary.

mod add;
mod autostart;
mod blocking_io;
mod changes;
mod check;
mod check_actions;
mod checks;
mod completion;
mod debug;
mod demo;
mod enter;
mod exec;
mod format;
mod health;
mod help;
mod identities;
mod logs;
mod ls;
mod mkdir;
mod notice;
mod notices;
mod notify;
mod okay;
mod plan;
mod pull;
mod push;
mod reexec;
mod reference;
mod replan;
mod restart;
mod rm;
mod run;
mod services;
mod signal;
mod start;
mod stop;
mod structured;
mod tasks;
mod times;
mod version;
mod wait;
mod warnings;
mod why;

use std::io::Write;
use std::process::ExitCode;
use std::sync::OnceLock;

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use cobble_client::{Client, ClientConfig};

/// The length of `error: `, which continuation lines of wrapped errors are indented by.
const ERROR_PREFIX: &str = "error: ";

/// The top level: an optional command, and the hidden `--version` Pebble accepts anywhere.
#[derive(Debug, Parser)]
#[command(
    name = "cobble",
    about = "A service manager for containers",
    disable_help_subcommand = true,
    disable_version_flag = true
)]
struct Cli {
    /// Print the client and server versions and exit.
    #[arg(long, global = true, hide = true)]
    version: bool,

    /// The command to run; without one, a summary of commands is printed.
    #[command(subcommand)]
    command: Option<Command>,
}

/// Every command, named as in Pebble.
#[derive(Debug, Subcommand)]
enum Command {
    /// Run the service manager environment
    Run(run::RunArgs),
    /// Dynamically add a layer to the plan's layers
    Add(add::AddArgs),
    /// Show the plan with layers combined
    Plan(plan::PlanArgs),
    /// Ensure running services match the current plan
    Replan(wait::WaitArgs),
    /// Start a service and its dependencies
    Start(start::StartArgs),
    /// Stop a service and its dependents
    Stop(stop::StopArgs),
    /// Restart a service
    Restart(restart::RestartArgs),
    /// Start services set to start by default
    Autostart(wait::WaitArgs),
    /// Query the status of configured services
    Services(services::ServicesArgs),
    /// List system changes
    Changes(changes::ChangesArgs),
    /// List a change's tasks
    Tasks(tasks::TasksArgs),
    /// Fetch service logs
    Logs(logs::LogsArgs),
    /// Send a signal to one or more running services
    Signal(signal::SignalArgs),
    /// Query the status of configured health checks
    Checks(checks::ChecksArgs),
    /// Query the details of a configured health check
    Check(check::CheckArgs),
    /// Query health of checks
    Health(health::HealthArgs),
    /// Start one or more checks
    StartChecks(check_actions::ChecksActionArgs),
    /// Stop one or more checks
    StopChecks(check_actions::ChecksActionArgs),
    /// Show version details
    Version(version::VersionArgs),
    /// Show help about a command
    Help(help::HelpArgs),
    /// Transfer a file to the remote system
    Push(push::PushArgs),
    /// Retrieve a file from the remote system
    Pull(pull::PullArgs),
    /// List path contents
    Ls(ls::LsArgs),
    /// Create a directory
    Mkdir(mkdir::MkdirArgs),
    /// Remove a file or directory.
    Rm(rm::RmArgs),
    /// List identities
    Identities(identities::IdentitiesArgs),
    /// Show a single identity
    Identity(identities::IdentityArgs),
    /// Add new identities
    AddIdentities(identities::FromArgs),
    /// Update or replace identities
    UpdateIdentities(identities::UpdateArgs),
    /// Remove identities
    RemoveIdentities(identities::FromArgs),
    /// Run the daemon on an embedded demo layer
    Demo(demo::DemoArgs),
    /// Explain why a service is where it is
    Why(why::WhyArgs),
    /// Re-execute the daemon in place, keeping its process and listeners
    Reexec(reexec::ReexecArgs),
    /// List notices
    Notices(notices::NoticesArgs),
    /// Fetch a single notice
    Notice(notice::NoticeArgs),
    /// Record a custom notice
    Notify(notify::NotifyArgs),
    /// Acknowledge notices and warnings
    Okay(okay::OkayArgs),
    /// List warnings
    #[command(long_about = warnings::LONG_ABOUT)]
    Warnings(warnings::WarningsArgs),
    /// Run debug commands
    #[command(hide = true, long_about = debug::LONG_ABOUT)]
    Debug(debug::DebugArgs),
    /// Print a shell completion script
    Completion(completion::CompletionArgs),
    /// Execute a remote command and wait for it to finish
    #[command(long_about = exec::LONG_ABOUT)]
    Exec(exec::ExecArgs),
    /// Run subcommand under a container environment
    #[command(long_about = enter::LONG_ABOUT)]
    Enter(enter::EnterArgs),
}

/// The handover document's descriptor, when a daemon re-executed itself into this program.
static HANDOVER: OnceLock<Option<i32>> = OnceLock::new();

/// What [`HANDOVER`] holds, for `run`.
fn handover() -> Option<i32> {
    HANDOVER.get().copied().flatten()
}

/// The name the binary was invoked as (`cobble`, or `pebble` through a symlink), used where
/// Pebble's messages name the program.
pub(crate) fn program_name() -> &'static str {
    static NAME: OnceLock<String> = OnceLock::new();
    NAME.get_or_init(|| {
        std::env::args_os()
            .next()
            .as_deref()
            .map(std::path::Path::new)
            .and_then(|p| p.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| "cobble".into())
    })
}

/// The whole command line, from arguments to exit code.
pub(crate) fn main() -> ExitCode {
    // First, while no other thread runs: a daemon that re-executed itself into this program
    // named its handover here, and nothing this program starts may inherit the name.
    HANDOVER.get_or_init(cobble_sys::reexec::take_handover_env);
    cobble_sys::nss::use_builtin_sources_when_static();
    let argv: Vec<String> = std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    // A daemon about to re-execute into this binary asks it first whether it can take over.
    if argv.get(1).map(String::as_str) == Some(cobble_daemon::REEXEC_PROBE_ARG) && argv.len() == 3 {
        let pebble_dir = std::path::Path::new(&argv[2]);
        return match cobble_daemon::reexec_probe_answer(pebble_dir, std::io::stdin().lock()) {
            Ok(answer) => {
                println!("{answer}");
                ExitCode::SUCCESS
            }
            Err(why) => {
                eprintln!("error: {why}");
                ExitCode::FAILURE
            }
        };
    }

    let (argv, service_args) = run::extract_service_args(&argv);
    if asks_for_top_level_help(&argv) {
        // Pebble answers a bare `--help` with the command summary, not a flag list.
        return finish(help::print_short(&mut std::io::stdout()));
    }
    if let Some(args) = run_args_alone(&argv) {
        return run::execute(args, service_args);
    }
    let command = Cli::command().name(program_name());
    let cli = match command
        .try_get_matches_from(&argv)
        .and_then(|m| Cli::from_arg_matches(&m))
    {
        Ok(cli) => cli,
        Err(err) => return report_parse_error(err),
    };

    if cli.version {
        // Pebble's `--version` is the client's version alone.
        return finish(version::print_client_only(structured::Format::Text));
    }
    let Some(command) = cli.command else {
        return finish(help::print_short(&mut std::io::stdout()));
    };
    match command {
        Command::Run(args) => run::execute(args, service_args),
        Command::Demo(args) => demo::execute(args),
        Command::Exec(args) => exec::execute(args),
        Command::Enter(args) => enter::execute(args, service_args),
        Command::Help(args) => finish(help::execute(args)),
        Command::Completion(args) => finish(completion::execute(args)),
        Command::Okay(args) => finish(okay::execute(args)),
        Command::Debug(args) => finish(debug::execute(args)),
        Command::Version(args) if args.client => finish(version::print_client_only(args.format)),
        other => run_client(move |client, out| Box::pin(dispatch(other, client, out))),
    }
}

/// The arguments of `run`, when the command line is `run` and flags that `run` alone takes,
/// parsed by a parser of `run` alone. Building the whole command line's parser (every
/// command's arguments and help) is most of what the client's code does before the daemon
/// starts: 110 KiB of code and its allocations, in every daemon's memory for its whole life.
/// `None` for anything else, and for any line that parser refuses (`--help`, `--version`, a
/// misspelt flag), which the whole parser then reads as it always did.
fn run_args_alone(argv: &[String]) -> Option<run::RunArgs> {
    if argv.get(1).map(String::as_str) != Some("run") {
        return None;
    }
    let command = <run::RunArgs as clap::Args>::augment_args(clap::Command::new("run"));
    let matches = command.try_get_matches_from(&argv[1..]).ok()?;
    run::RunArgs::from_arg_matches(&matches).ok()
}

/// `cobble --help` or `cobble -h`, with no command.
fn asks_for_top_level_help(argv: &[String]) -> bool {
    let words = argv.get(1..).unwrap_or_default();
    !words.iter().any(|w| !w.starts_with('-')) && words.iter().any(|w| w == "-h" || w == "--help")
}

type Output = std::io::BufWriter<std::io::Stdout>;
type CommandFuture<'a> = std::pin::Pin<Box<dyn Future<Output = anyhow::Result<()>> + 'a>>;

/// Runs a client command on a current-thread runtime and turns its outcome into an exit code.
fn run_client<F>(body: F) -> ExitCode
where
    F: for<'a> FnOnce(&'a Client, &'a mut Output) -> CommandFuture<'a>,
{
    let outcome = Client::new(ClientConfig::from_env())
        .map_err(anyhow::Error::from)
        .and_then(|client| {
            run_command(&client, body)?;
            // After a command that worked, as in Pebble.
            warnings::hint_new_warnings(&client);
            Ok(())
        });
    finish(outcome)
}

/// Runs a client command with `client` on a current-thread runtime, stdout buffered.
fn run_command<F>(client: &Client, body: F) -> anyhow::Result<()>
where
    F: for<'a> FnOnce(&'a Client, &'a mut Output) -> CommandFuture<'a>,
{
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut out = std::io::BufWriter::new(std::io::stdout());
    let result = runtime.block_on(body(client, &mut out));
    // Whatever was written before a failure is still shown, as Pebble does.
    let flushed = out.flush();
    result?;
    flushed?;
    Ok(())
}

async fn dispatch(command: Command, client: &Client, out: &mut Output) -> anyhow::Result<()> {
    match command {
        Command::Add(args) => add::execute(args, client, out).await,
        Command::Plan(args) => plan::execute(args, client, out).await,
        Command::Replan(args) => replan::execute(args, client, out).await,
        Command::Start(args) => start::execute(args, client, out).await,
        Command::Stop(args) => stop::execute(args, client, out).await,
        Command::Restart(args) => restart::execute(args, client, out).await,
        Command::Autostart(args) => autostart::execute(args, client, out).await,
        Command::Services(args) => services::execute(args, client, out).await,
        Command::Changes(args) => changes::execute(args, client, out).await,
        Command::Tasks(args) => tasks::execute(args, client, out).await,
        Command::Signal(args) => signal::execute(args, client, out).await,
        Command::Logs(args) => logs::execute(args, client, out).await,
        Command::Why(args) => why::execute(args, client, out).await,
        Command::Checks(args) => checks::execute(args, client, out).await,
        Command::Check(args) => check::execute(args, client, out).await,
        Command::Health(args) => health::execute(args, client, out).await,
        Command::StartChecks(args) => check_actions::start(args, client, out).await,
        Command::StopChecks(args) => check_actions::stop(args, client, out).await,
        Command::Push(args) => push::execute(args, client, out).await,
        Command::Pull(args) => pull::execute(args, client, out).await,
        Command::Ls(args) => ls::execute(args, client, out).await,
        Command::Mkdir(args) => mkdir::execute(args, client, out).await,
        Command::Rm(args) => rm::execute(args, client, out).await,
        Command::Identities(args) => identities::list(args, client, out).await,
        Command::Identity(args) => identities::show(args, client, out).await,
        Command::AddIdentities(args) => identities::add(args, client, out).await,
        Command::UpdateIdentities(args) => identities::update(args, client, out).await,
        Command::RemoveIdentities(args) => identities::remove(args, client, out).await,
        Command::Version(args) => version::execute(args, client, out).await,
        Command::Notices(args) => notices::execute(args, client, out).await,
        Command::Notice(args) => notice::execute(args, client, out).await,
        Command::Notify(args) => notify::execute(args, client, out).await,
        Command::Warnings(args) => warnings::execute(args, client, out).await,
        Command::Reexec(args) => reexec::execute(args, client, out).await,
        Command::Run(_)
        | Command::Okay(_)
        | Command::Debug(_)
        | Command::Help(_)
        | Command::Demo(_)
        | Command::Completion(_)
        | Command::Exec(_)
        | Command::Enter(_) => {
            unreachable!("handled without a client")
        }
    }
}

/// Maps a command's outcome to Pebble's exit status, printing the error if there is one.
pub(crate) fn finish(outcome: anyhow::Result<()>) -> ExitCode {
    let Err(err) = outcome else {
        return ExitCode::SUCCESS;
    };
    if is_broken_pipe(&err) {
        return ExitCode::SUCCESS;
    }
    eprintln!("{ERROR_PREFIX}{}", error_message(&err));
    ExitCode::FAILURE
}

/// The text after `error: `. API errors are reworded for a few kinds and wrapped like
/// Pebble's `errorToMessage`; other errors (such as a failed change) print as they are.
fn error_message(err: &anyhow::Error) -> String {
    match err.downcast_ref::<cobble_client::Error>() {
        Some(cobble_client::Error::Api { kind, message, .. }) => {
            let message = match kind.as_str() {
                "no-default-services" => "no default services",
                _ => message.as_str(),
            };
            format::fill(message, ERROR_PREFIX.len())
        }
        _ => err.to_string(),
    }
}

fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// Prints a parse error in go-flags' words (or clap's, where go-flags has no equivalent)
/// and returns Pebble's exit status for it; help requests print help and succeed.
fn report_parse_error(err: clap::Error) -> ExitCode {
    if matches!(
        err.kind(),
        ErrorKind::DisplayHelp | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        let _ = err.print();
        return ExitCode::SUCCESS;
    }
    eprintln!("{ERROR_PREFIX}{}", parse_error_message(&err));
    if let Some(hint) = did_you_mean(&err) {
        eprintln!("{hint}");
    }
    ExitCode::FAILURE
}

/// For a mistyped command, the line cobble adds after Pebble's error: the command closest to
/// it, when one is close (`did you mean "services"?`). Pebble's first line and exit status
/// stay as they are, so scripts that match on them see no difference.
fn did_you_mean(err: &clap::Error) -> Option<String> {
    if err.kind() != ErrorKind::InvalidSubcommand {
        return None;
    }
    let Some(ContextValue::String(typed)) = err.get(ContextKind::InvalidSubcommand) else {
        return None;
    };
    closest_command(typed).map(|name| format!("did you mean {}?", format::quote(&name)))
}

/// The visible command at the smallest edit distance from `typed` (a swap of two neighbours
/// counts as one edit), if it is within a distance that still reads as a typo: one edit for
/// up to three letters, two up to eight, three beyond.
fn closest_command(typed: &str) -> Option<String> {
    let allowed = match typed.chars().count() {
        0..=3 => 1,
        4..=8 => 2,
        _ => 3,
    };
    Cli::command()
        .get_subcommands()
        .filter(|c| !c.is_hide_set())
        .map(|c| (edit_distance(typed, c.get_name()), c.get_name().to_owned()))
        .filter(|(distance, _)| *distance <= allowed)
        .min()
        .map(|(_, name)| name)
}

/// The optimal string alignment distance: insertions, deletions, substitutions and swaps of
/// two neighbouring characters, each one edit.
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

/// The hint [`did_you_mean`] gives for `name` as a command, if any (for `help NAME`).
pub(crate) fn command_hint(name: &str) -> Option<String> {
    let err = Cli::command()
        .try_get_matches_from([program_name(), name])
        .err()?;
    did_you_mean(&err)
}

fn parse_error_message(err: &clap::Error) -> String {
    let context = |kind| match err.get(kind) {
        Some(ContextValue::String(s)) => Some(s.clone()),
        Some(ContextValue::Strings(v)) => Some(v.join(", ")),
        Some(other) => Some(other.to_string()),
        None => None,
    };
    match err.kind() {
        ErrorKind::InvalidSubcommand => {
            let name = context(ContextKind::InvalidSubcommand).unwrap_or_default();
            format!(
                "unknown command {}, see '{} help'.",
                format::quote(&name),
                program_name()
            )
        }
        ErrorKind::UnknownArgument => {
            let arg = context(ContextKind::InvalidArg).unwrap_or_default();
            if arg.starts_with('-') {
                let flag = arg.split('=').next().unwrap_or(&arg);
                format!("unknown flag `{}'", flag.trim_start_matches('-'))
            } else {
                "too many arguments for command".to_string()
            }
        }
        ErrorKind::InvalidValue if err.get(ContextKind::ValidValue).is_some() => {
            let value = context(ContextKind::InvalidValue).unwrap_or_default();
            let arg = context(ContextKind::InvalidArg).unwrap_or_default();
            let flag = arg.split(' ').next().unwrap_or_default();
            let allowed = match err.get(ContextKind::ValidValue) {
                Some(ContextValue::Strings(values)) => match values.split_last() {
                    Some((last, [])) => last.clone(),
                    Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
                    None => String::new(),
                },
                _ => String::new(),
            };
            format!("Invalid value `{value}' for option `{flag}'. Allowed values are: {allowed}")
        }
        ErrorKind::MissingRequiredArgument => {
            let arg = context(ContextKind::InvalidArg).unwrap_or_default();
            let arg = match arg.strip_suffix("...") {
                Some(name) => format!("{name} (at least 1 argument)"),
                None => arg,
            };
            format!("the required argument `{arg}` was not provided")
        }
        _ => {
            let rendered = err.render().to_string();
            let first = rendered.lines().next().unwrap_or_default();
            first.trim_start_matches("error: ").to_string()
        }
    }
}

/// Writes `text` to `out`; `?` on this propagates broken pipes, which [`finish`] forgives.
pub(crate) fn write_all(out: &mut dyn Write, text: &str) -> anyhow::Result<()> {
    out.write_all(text.as_bytes())?;
    Ok(())
}

/// Words an IO error like Go's `*PathError`: `open /x: no such file or directory`.
pub(crate) fn go_path_error(op: &str, path: &str, err: &std::io::Error) -> String {
    let text = err.to_string();
    let text = text.split(" (os error ").next().unwrap_or_default();
    let mut chars = text.chars();
    let text: String = match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => String::new(),
    };
    format!("{op} {path}: {text}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::command()
            .try_get_matches_from(args)
            .and_then(|m| Cli::from_arg_matches(&m))
    }

    #[test]
    fn clap_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    fn words(args: &[&str]) -> Vec<String> {
        args.iter().map(|a| a.to_string()).collect()
    }

    #[test]
    fn run_alone_reads_what_the_whole_parser_reads() {
        for line in [
            &["cobble", "run"][..],
            &["cobble", "run", "--hold", "--http", ":4000", "-v"],
            &[
                "cobble",
                "run",
                "--create-dirs",
                "--identities=/tmp/ids.yaml",
                "--https",
                ":8443",
            ],
        ] {
            let alone = run_args_alone(&words(line)).expect("run's own parser reads it");
            let Some(Command::Run(whole)) = parse(line).unwrap().command else {
                panic!("the whole parser reads {line:?} as run");
            };
            assert_eq!(format!("{alone:?}"), format!("{whole:?}"), "{line:?}");
        }
    }

    #[test]
    fn run_alone_leaves_help_version_and_mistakes_to_the_whole_parser() {
        for line in [
            &["cobble", "run", "--help"][..],
            &["cobble", "run", "-h"],
            &["cobble", "run", "--version"],
            &["cobble", "run", "--frob"],
            &["cobble", "run", "extra"],
            &["cobble", "--version", "run"],
            &["cobble", "services"],
            &["cobble"],
        ] {
            assert!(run_args_alone(&words(line)).is_none(), "{line:?}");
        }
    }

    #[test]
    fn unknown_flag_is_worded_like_go_flags() {
        let err = parse(&["cobble", "services", "--frob"]).unwrap_err();
        assert_eq!(parse_error_message(&err), "unknown flag `frob'");
    }

    #[test]
    fn a_value_outside_the_choices_is_worded_like_go_flags() {
        let err = parse(&["cobble", "changes", "--format", "xml"]).unwrap_err();
        assert_eq!(
            parse_error_message(&err),
            "Invalid value `xml' for option `--format'. Allowed values are: text, json or yaml"
        );
        let err = parse(&["cobble", "checks", "--level=x"]).unwrap_err();
        assert_eq!(
            parse_error_message(&err),
            "Invalid value `x' for option `--level'. Allowed values are: alive or ready"
        );
    }

    #[test]
    fn extra_positional_is_too_many_arguments() {
        let err = parse(&["cobble", "plan", "extra"]).unwrap_err();
        assert_eq!(parse_error_message(&err), "too many arguments for command");
    }

    #[test]
    fn unknown_command_points_at_help() {
        let err = parse(&["cobble", "frobnicate"]).unwrap_err();
        let message = parse_error_message(&err);
        assert!(
            message.starts_with("unknown command \"frobnicate\", see '"),
            "{message}"
        );
        assert!(message.ends_with(" help'."), "{message}");
    }

    #[test]
    fn a_mistyped_command_gets_a_hint_after_pebbles_error() {
        let err = parse(&["cobble", "servces"]).unwrap_err();
        assert!(parse_error_message(&err).starts_with("unknown command \"servces\", see '"));
        assert_eq!(
            did_you_mean(&err).as_deref(),
            Some("did you mean \"services\"?")
        );
        let err = parse(&["cobble", "frobnicate"]).unwrap_err();
        assert_eq!(did_you_mean(&err), None, "nothing is close to frobnicate");
        assert_eq!(closest_command("chnages").as_deref(), Some("changes"));
        assert_eq!(closest_command("lgs").as_deref(), Some("logs"));
        assert_eq!(closest_command("xyz"), None);
    }

    #[test]
    fn no_default_services_kind_is_reworded() {
        let err = anyhow::Error::new(cobble_client::Error::Api {
            status_code: 400,
            kind: "no-default-services".into(),
            message: "whatever the daemon said".into(),
            value: None,
        });
        assert_eq!(error_message(&err), "no default services");
    }

    #[test]
    fn broken_pipe_is_detected_through_context() {
        let err = anyhow::Error::new(std::io::Error::from(std::io::ErrorKind::BrokenPipe))
            .context("writing table");
        assert!(is_broken_pipe(&err));
    }

    #[test]
    fn path_errors_read_like_go() {
        let err = std::io::Error::from_raw_os_error(2);
        assert_eq!(
            go_path_error("open", "/x.yaml", &err),
            "open /x.yaml: no such file or directory"
        );
    }
}
