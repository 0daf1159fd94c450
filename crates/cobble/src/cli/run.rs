//! `run`: resolves flags and Pebble's environment variables into
//! [`cobble_daemon::RunOptions`] and hands over to the daemon.
//!
//! `--args SERVICE ARGS... ;` follows go-flags' terminated options: everything after
//! `--args` up to a lone `;` (or the end of the command line) belongs to it, dashes and all,
//! so `run --args svc --port 80 \; --hold` gives `svc` the arguments `--port 80` and the
//! daemon `--hold`. Those groups are taken out before clap sees the command line.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use cobble_client::EnvPaths;
use cobble_daemon::RunOptions;

/// The option whose values run up to [`TERMINATOR`].
const ARGS_FLAG: &str = "--args";
/// What ends an `--args` group.
const TERMINATOR: &str = ";";

/// Arguments of `run`.
#[derive(Debug, Args)]
pub(super) struct RunArgs {
    /// Create the daemon directory on startup if it doesn't exist.
    #[arg(long)]
    create_dirs: bool,
    /// Do not start default services automatically.
    #[arg(long)]
    hold: bool,
    /// Start the HTTP API listening on this address (e.g., ":4000").
    #[arg(long, value_name = "ADDR")]
    http: Option<String>,
    /// Start the HTTPS API listening on this address (e.g., ":8443"); clients authenticate
    /// with the certificates of `cert` identities.
    #[arg(long, value_name = "ADDR")]
    https: Option<String>,
    /// Log all output from services to stdout.
    #[arg(short, long)]
    verbose: bool,
    /// Seed identities from this YAML file on startup (replacing identities of the same
    /// names; a null value removes one).
    #[arg(long, value_name = "FILE")]
    identities: Option<PathBuf>,
    /// Provide additional arguments to a service: --args SERVICE ARGS... ; (the ";" may be
    /// left out when nothing follows).
    #[arg(
        long = "args",
        value_name = "SERVICE ARGS... ;",
        num_args = 1..,
        allow_hyphen_values = true,
        value_terminator = ";"
    )]
    service_args: Vec<String>,
}

/// Takes the `--args ... ;` groups out of the command line of `run`, or of `enter` before its
/// subcommand (and of no other command), returning the remaining command line and the groups
/// in order.
pub(super) fn extract_service_args(argv: &[String]) -> (Vec<String>, Vec<Vec<String>>) {
    // The command is the first word that is not a flag; the top level has only value-less
    // flags (`--version`, `--help`).
    let command_at = argv.iter().skip(1).position(|a| !a.starts_with('-'));
    let Some(command_at) = command_at.map(|i| i + 1) else {
        return (argv.to_vec(), Vec::new());
    };
    // `enter` takes `run`'s flags before its subcommand; what follows belongs to the subcommand.
    let enter = match argv[command_at].as_str() {
        "run" => false,
        "enter" => true,
        _ => return (argv.to_vec(), Vec::new()),
    };

    let mut rest = argv[..=command_at].to_vec();
    let mut groups = Vec::new();
    let mut words = argv[command_at + 1..].iter();
    while let Some(word) = words.next() {
        if word == "--" {
            // After a double dash nothing is an option any more.
            rest.push(word.clone());
            rest.extend(words.by_ref().cloned());
            break;
        }
        if enter && !word.starts_with('-') {
            rest.push(word.clone());
            rest.extend(words.by_ref().cloned());
            break;
        }
        if enter && word == "--http" {
            rest.push(word.clone());
            rest.extend(words.next().cloned());
            continue;
        }
        let first = if word == ARGS_FLAG {
            None
        } else if let Some(value) = word.strip_prefix("--args=") {
            Some(value.to_string())
        } else {
            rest.push(word.clone());
            continue;
        };
        let mut group: Vec<String> = first.into_iter().collect();
        for value in words.by_ref() {
            if value == TERMINATOR {
                break;
            }
            group.push(value.clone());
        }
        groups.push(group);
    }
    (rest, groups)
}

/// Turns `--args` groups into service → arguments, refusing an empty group and a service
/// given twice, with Pebble's messages.
pub(super) fn service_args_map(
    groups: Vec<Vec<String>>,
) -> Result<BTreeMap<String, Vec<String>>, String> {
    let mut map = BTreeMap::new();
    for group in groups {
        let mut words = group.into_iter();
        let Some(service) = words.next() else {
            return Err("--args requires a service name".into());
        };
        if map.contains_key(&service) {
            return Err(format!(
                "--args provided more than once for {service:?} service"
            ));
        }
        map.insert(service, words.collect());
    }
    Ok(map)
}

/// Builds the daemon's options from flags and the environment (`env` looks a variable up).
fn options(
    args: &RunArgs,
    service_args: BTreeMap<String, Vec<String>>,
    env: impl Fn(&str) -> Option<String>,
) -> RunOptions {
    let paths = EnvPaths::from_vars(
        env("PEBBLE").map(PathBuf::from),
        env("PEBBLE_SOCKET").map(PathBuf::from),
    );
    let is_one = |name: &str| env(name).as_deref() == Some("1");
    RunOptions {
        pebble_dir: paths.pebble_dir,
        socket_path: paths.socket,
        create_dirs: args.create_dirs,
        hold: args.hold,
        http: args.http.clone().filter(|addr| !addr.is_empty()),
        https: args.https.clone().filter(|addr| !addr.is_empty()),
        verbose: args.verbose || is_one("PEBBLE_VERBOSE"),
        service_args,
        persist: env("PEBBLE_PERSIST").as_deref() != Some("never"),
        copy_once: env("PEBBLE_COPY_ONCE")
            .filter(|dir| !dir.is_empty())
            .map(PathBuf::from),
        debug: is_one("PEBBLE_DEBUG"),
        identities: None,
        handover_fd: None,
    }
}

impl RunArgs {
    /// Whether `-v`/`--verbose` was given (the flag itself, not `PEBBLE_VERBOSE`).
    pub(super) fn verbose_flag(&self) -> bool {
        self.verbose
    }

    /// The daemon's options from these flags, the `--args` groups and the process
    /// environment; a bad group is reported as Pebble reports it and gives exit code 1.
    pub(super) fn resolve(&self, groups: Vec<Vec<String>>) -> Result<RunOptions, ExitCode> {
        let service_args = service_args_map(groups).map_err(|message| {
            // Pebble reports daemon start-up failures this way, without "error: ".
            eprintln!("cannot run daemon: {message}");
            ExitCode::FAILURE
        })?;
        let mut options = options(self, service_args, |name| std::env::var(name).ok());
        if let Some(path) = &self.identities {
            let bytes = std::fs::read(path).map_err(|e| {
                eprintln!(
                    "cannot run daemon: cannot read identities file: {}",
                    super::go_path_error("open", &path.to_string_lossy(), &e)
                );
                ExitCode::FAILURE
            })?;
            let identities = super::identities::parse_identities(&bytes).map_err(|e| {
                eprintln!("cannot run daemon: {e}");
                ExitCode::FAILURE
            })?;
            options.identities = Some(identities);
        }
        Ok(options)
    }
}

/// The daemon's exit code as this process's status.
pub(super) fn daemon_status(code: i32) -> ExitCode {
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

/// Runs the daemon in this process until it stops, and exits with its code.
/// Runs the daemon, with what a re-executing predecessor handed over if it did.
pub(super) fn execute(args: RunArgs, groups: Vec<Vec<String>>) -> ExitCode {
    match args.resolve(groups) {
        Ok(options) => daemon_status(cobble_daemon::run(RunOptions {
            handover_fd: super::handover(),
            ..options
        })),
        Err(status) => status,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn words(text: &str) -> Vec<String> {
        text.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn groups_end_at_the_terminator() {
        let (rest, groups) =
            extract_service_args(&words("cobble run --args svc --port 8080 ; --hold"));
        assert_eq!(rest, words("cobble run --hold"));
        assert_eq!(groups, vec![words("svc --port 8080")]);
    }

    #[test]
    fn a_group_may_run_to_the_end() {
        let (rest, groups) =
            extract_service_args(&words("cobble run --hold --args svc --verbose --foo x"));
        assert_eq!(rest, words("cobble run --hold"));
        assert_eq!(groups, vec![words("svc --verbose --foo x")]);
    }

    #[test]
    fn several_groups_and_the_equals_form() {
        let (rest, groups) =
            extract_service_args(&words("cobble run --args a --x ; --args=b -y ; -v"));
        assert_eq!(rest, words("cobble run -v"));
        assert_eq!(groups, vec![words("a --x"), words("b -y")]);
    }

    #[test]
    fn only_run_is_touched_and_double_dash_stops() {
        let argv = words("cobble services --args a ;");
        assert_eq!(extract_service_args(&argv), (argv.clone(), vec![]));
        let (rest, groups) = extract_service_args(&words("cobble run -- --args a"));
        assert_eq!(rest, words("cobble run -- --args a"));
        assert!(groups.is_empty());
    }

    #[test]
    fn enter_gives_up_its_groups_only_before_the_subcommand() {
        let (rest, groups) = extract_service_args(&words(
            "cobble enter --http :4000 --args svc -x ; --run exec echo --args y ;",
        ));
        assert_eq!(
            rest,
            words("cobble enter --http :4000 --run exec echo --args y ;")
        );
        assert_eq!(groups, vec![words("svc -x")]);
    }

    #[test]
    fn map_refuses_empty_and_duplicate_groups() {
        assert_eq!(
            service_args_map(vec![vec![]]).unwrap_err(),
            "--args requires a service name"
        );
        assert_eq!(
            service_args_map(vec![words("a x"), words("a y")]).unwrap_err(),
            "--args provided more than once for \"a\" service"
        );
        let map = service_args_map(vec![words("a x y"), words("b")]).unwrap();
        assert_eq!(map["a"], words("x y"));
        assert!(map["b"].is_empty());
    }

    #[test]
    fn environment_resolution() {
        #[derive(Parser)]
        struct Wrapper {
            #[command(flatten)]
            run: RunArgs,
        }
        let args = Wrapper::parse_from(words("run --hold --http :4000")).run;
        let env = |name: &str| {
            match name {
                "PEBBLE" => Some("/tmp/p"),
                "PEBBLE_VERBOSE" => Some("1"),
                "PEBBLE_PERSIST" => Some("never"),
                "PEBBLE_COPY_ONCE" => Some("/seed"),
                _ => None,
            }
            .map(String::from)
        };
        let opts = options(&args, BTreeMap::new(), env);
        assert_eq!(opts.pebble_dir, PathBuf::from("/tmp/p"));
        assert_eq!(opts.socket_path, PathBuf::from("/tmp/p/.pebble.socket"));
        assert!(opts.hold && opts.verbose && !opts.persist && !opts.debug && !opts.create_dirs);
        assert_eq!(opts.http.as_deref(), Some(":4000"));
        assert_eq!(opts.copy_once, Some(PathBuf::from("/seed")));
    }
}
