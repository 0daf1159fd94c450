//! `help [--all] [command...]` and the summary printed when no command is given.

use std::io::Write;

use clap::{Args, CommandFactory};

use super::{Cli, program_name, write_all};

/// Commands by category, in the order the summary lists them.
pub(super) const CATEGORIES: &[(&str, &str, &[&str])] = &[
    (
        "Run",
        "run the service manager",
        &["run", "enter", "demo", "reexec"],
    ),
    (
        "Info",
        "help and version information",
        &["help", "version", "completion"],
    ),
    (
        "Plan",
        "view and change configuration",
        &["add", "plan", "replan"],
    ),
    (
        "Services",
        "manage services",
        &[
            "services",
            "logs",
            "start",
            "restart",
            "signal",
            "why",
            "stop",
            "autostart",
        ],
    ),
    (
        "Changes",
        "manage changes and their tasks",
        &["changes", "tasks"],
    ),
    (
        "Checks",
        "manage health checks",
        &["checks", "check", "health", "start-checks", "stop-checks"],
    ),
    (
        "Identities",
        "manage who may use the API",
        &[
            "identities",
            "identity",
            "add-identities",
            "update-identities",
            "remove-identities",
        ],
    ),
    (
        "Files",
        "work with files and execute commands",
        &["push", "pull", "ls", "mkdir", "rm", "exec"],
    ),
    (
        "Notices",
        "manage notices and warnings",
        &["warnings", "okay", "notices", "notice", "notify"],
    ),
];

/// Arguments of `help`.
#[derive(Debug, Args)]
pub(super) struct HelpArgs {
    /// Show a short summary of all commands.
    #[arg(long)]
    all: bool,
    /// Generate the manpage.
    #[arg(long, hide = true)]
    man: bool,
    /// Generate the Markdown command-line reference (docs/reference/cli.md).
    #[arg(long, hide = true)]
    markdown: bool,
    /// The command to show help for.
    #[arg(value_name = "command")]
    commands: Vec<String>,
}

/// Runs `help`.
pub(super) fn execute(args: HelpArgs) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    if args.man || args.markdown {
        return print_reference(&args, &mut out);
    }
    if args.all {
        if !args.commands.is_empty() {
            anyhow::bail!("help accepts a command, or '--all', but not both.");
        }
        return print_long(&mut out);
    }
    let Some(name) = args.commands.first() else {
        return print_short(&mut out);
    };
    let mut command = Cli::command().name(program_name());
    command.build();
    let Some(sub) = command.find_subcommand_mut(name) else {
        let mut message = format!(
            "unknown command {}, see '{} help'.",
            super::format::quote(name),
            program_name()
        );
        if let Some(hint) = super::command_hint(name) {
            message = format!("{message}\n{hint}");
        }
        anyhow::bail!(message);
    };
    let help = sub.render_long_help().to_string();
    write_all(&mut out, &help)
}

/// `help --man [command]` and `help --markdown`: the references generated from the clap
/// definitions (see [`super::reference`]).
fn print_reference(args: &HelpArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let mut root = Cli::command().name(program_name());
    root.build();
    if args.markdown {
        return write_all(out, &super::reference::markdown(&root));
    }
    let command = match args.commands.as_slice() {
        [] => None,
        [name] => Some(root.find_subcommand(name).ok_or_else(|| {
            anyhow::anyhow!(
                "unknown command {}, see '{} help'.",
                super::format::quote(name),
                program_name()
            )
        })?),
        _ => anyhow::bail!("too many arguments for command"),
    };
    let page = super::reference::man_page(&root, program_name(), command, &man_date());
    write_all(out, &page)
}

/// The page's date, as go-flags writes it ("1 December 2026"): `SOURCE_DATE_EPOCH` when set,
/// for reproducible builds, else today.
fn man_date() -> String {
    let now = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
        .and_then(|secs| jiff::Timestamp::from_second(secs).ok())
        .unwrap_or_else(jiff::Timestamp::now);
    now.strftime("%-d %B %Y").to_string()
}

fn header() -> String {
    let program = program_name();
    format!(
        "{program} runs and supervises the services of a container, and answers Pebble's\n\
         API and commands.\n\
         \n\
         Usage: {program} <command> [<options>...]\n\
         \n\
         Commands can be classified as follows:\n"
    )
}

fn footer() -> String {
    let program = program_name();
    format!(
        "\n\
         The PEBBLE environment variable sets the daemon directory (default\n\
         {dir}); PEBBLE_SOCKET sets the API socket (default\n\
         $PEBBLE/.pebble.socket).\n\
         \n\
         For more information about a command, run '{program} help <command>'.\n",
        dir = cobble_client::DEFAULT_PEBBLE_DIR
    )
}

/// What a bare `cobble` (or `cobble --help`) prints: categories right-aligned, then hints.
pub(super) fn print_short(out: &mut dyn Write) -> anyhow::Result<()> {
    let width = CATEGORIES
        .iter()
        .map(|(label, _, _)| label.len())
        .max()
        .unwrap_or(0)
        + 2;
    let mut text = header();
    text.push('\n');
    for (label, _, commands) in CATEGORIES {
        text.push_str(&format!("{label:>width$}: {}\n", commands.join(", ")));
    }
    text.push_str(&footer());
    text.push_str(&format!(
        "For a short summary of all commands, run '{} help --all'.\n",
        program_name()
    ));
    write_all(out, &text)
}

/// `help --all`: every command with its one-line summary, by category.
fn print_long(out: &mut dyn Write) -> anyhow::Result<()> {
    let command = Cli::command();
    let width = CATEGORIES
        .iter()
        .flat_map(|(_, _, commands)| commands.iter())
        .map(|name| name.len())
        .max()
        .unwrap_or(0);
    let mut text = header();
    for (label, description, commands) in CATEGORIES {
        text.push_str(&format!("\n  {label} ({description}):\n"));
        for name in *commands {
            let summary = command
                .find_subcommand(name)
                .and_then(|c| c.get_about())
                .map(|about| about.to_string())
                .unwrap_or_default();
            text.push_str(&format!("    {name:<width$}  {summary}\n"));
        }
    }
    text.push_str(&footer());
    write_all(out, &text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_command_is_in_a_category_and_exists() {
        let command = Cli::command();
        let listed: Vec<&str> = CATEGORIES
            .iter()
            .flat_map(|(_, _, commands)| commands.iter().copied())
            .collect();
        for name in &listed {
            assert!(
                command.find_subcommand(name).is_some(),
                "{name} is not a command"
            );
        }
        for sub in command.get_subcommands().filter(|c| !c.is_hide_set()) {
            assert!(
                listed.contains(&sub.get_name()),
                "{} is not listed",
                sub.get_name()
            );
        }
    }

    #[test]
    fn short_help_aligns_labels() {
        let mut out = Vec::new();
        print_short(&mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.contains(
                "
         Run: run, enter, demo, reexec
"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "
    Services: services, logs, start,"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "
  Identities: identities, identity,"
            ),
            "{text}"
        );
    }
}
