//! The command-line reference, generated from the clap definitions so that it cannot drift
//! from what the binary parses: `help --man` (Pebble's hidden flag: the whole program as one
//! manual page in section 8), `help --man COMMAND` (one command's page) and `help --markdown`
//! (`docs/reference/cli.md`, which a test compares with this output; `scripts/gen-docs`
//! writes both).
//!
//! Every subcommand and every argument clap knows is listed, hidden ones too (marked so), in
//! the order of the `help --all` categories, then any command no category names.

use clap::{Arg, ArgAction, Command};

use super::help::CATEGORIES;

/// The commands in the reference's order: by category, then the rest by name.
fn commands(root: &Command) -> Vec<&Command> {
    let mut listed: Vec<&Command> = CATEGORIES
        .iter()
        .flat_map(|(_, _, names)| names.iter())
        .filter_map(|name| root.find_subcommand(name))
        .collect();
    let mut rest: Vec<&Command> = root
        .get_subcommands()
        .filter(|sub| !listed.iter().any(|c| c.get_name() == sub.get_name()))
        .collect();
    rest.sort_by_key(|c| c.get_name());
    listed.extend(rest);
    listed
}

/// The arguments a user types for `command`: not clap's own help flag, and not the global
/// options the root lists once for every command.
fn arguments(command: &Command) -> impl Iterator<Item = &Arg> {
    command.get_arguments().filter(|arg| {
        !matches!(arg.get_action(), ArgAction::Help | ArgAction::HelpShort)
            && (!arg.is_global_set() || is_root(command))
    })
}

/// Whether `command` is the program itself rather than one of its subcommands.
fn is_root(command: &Command) -> bool {
    command.get_subcommands().next().is_some()
}

/// `--name VALUE`, `-s, --name`, or `<name>` for a positional.
fn arg_name(arg: &Arg) -> String {
    let value = arg
        .get_value_names()
        .map(|names| names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
        .unwrap_or_else(|| vec![arg.get_id().to_string()]);
    if arg.is_positional() {
        let dots = if takes_many(arg) { "..." } else { "" };
        return value
            .iter()
            .map(|v| format!("<{v}>{dots}"))
            .collect::<Vec<_>>()
            .join(" ");
    }
    let mut name = match (arg.get_short(), arg.get_long()) {
        (Some(s), Some(l)) => format!("-{s}, --{l}"),
        (Some(s), None) => format!("-{s}"),
        (None, Some(l)) => format!("--{l}"),
        (None, None) => arg.get_id().to_string(),
    };
    if takes_value(arg) {
        name.push_str(&format!(" <{}>", value.join(" ")));
    }
    name
}

fn takes_value(arg: &Arg) -> bool {
    matches!(arg.get_action(), ArgAction::Set | ArgAction::Append)
}

fn takes_many(arg: &Arg) -> bool {
    matches!(arg.get_action(), ArgAction::Append)
        || arg.get_num_args().is_some_and(|n| n.max_values() > 1)
}

/// The argument's help text, with its choices, default and environment variable.
fn arg_help(arg: &Arg) -> String {
    let mut text = arg
        .get_long_help()
        .or_else(|| arg.get_help())
        .map(|h| h.to_string())
        .unwrap_or_default();
    let choices: Vec<String> = arg
        .get_possible_values()
        .iter()
        .filter(|v| !v.is_hide_set())
        .map(|v| v.get_name().to_string())
        .collect();
    if takes_value(arg) && !choices.is_empty() {
        push_sentence(&mut text, &format!("One of: {}.", choices.join(", ")));
    }
    let defaults: Vec<String> = arg
        .get_default_values()
        .iter()
        .map(|v| v.to_string_lossy().into_owned())
        .collect();
    if takes_value(arg) && !defaults.is_empty() {
        push_sentence(&mut text, &format!("Default: {}.", defaults.join(", ")));
    }
    if let Some(env) = arg.get_env() {
        push_sentence(
            &mut text,
            &format!("Environment: {}.", env.to_string_lossy()),
        );
    }
    if arg.is_required_set() {
        push_sentence(&mut text, "Required.");
    }
    if arg.is_hide_set() {
        push_sentence(&mut text, "Hidden.");
    }
    text
}

fn push_sentence(text: &mut String, sentence: &str) {
    if !text.is_empty() {
        // clap drops the final period of a one-paragraph help text.
        if !text.ends_with(['.', ':', ')', '!', '?']) {
            text.push('.');
        }
        text.push(' ');
    }
    text.push_str(sentence);
}

fn about(command: &Command) -> String {
    command
        .get_about()
        .map(|a| a.to_string())
        .unwrap_or_default()
}

fn long_about(command: &Command) -> Option<String> {
    command.get_long_about().map(|a| a.to_string())
}

/// `cobble services [options] [<service>...]`: the command's usage line without clap's prefix.
fn usage(program: &str, command: &Command) -> String {
    let mut line = format!("{program} {}", command.get_name());
    if arguments(command).any(|a| !a.is_positional()) {
        line.push_str(" [<options>...]");
    }
    for arg in arguments(command).filter(|a| a.is_positional()) {
        let name = arg_name(arg);
        if arg.is_required_set() {
            line.push_str(&format!(" {name}"));
        } else {
            line.push_str(&format!(" [{name}]"));
        }
    }
    line
}

// ---------------------------------------------------------------------------------------------
// Markdown

/// The whole CLI reference as Markdown (`docs/reference/cli.md`).
pub(super) fn markdown(root: &Command) -> String {
    let program = "cobble";
    let mut out = String::from(
        "# Command-line reference\n\n\
         <!-- Generated by `scripts/gen-docs` from the binary's own definitions \
         (`cobble help --markdown`); do not edit. -->\n\n\
         Every command of `cobble` with every option, its default and the environment \
         variable that sets it, generated from the definitions the binary parses. Invoked \
         as `pebble` (a symlink or a copy), the binary behaves the same and names itself \
         `pebble`. Commands and options that Pebble does not have are described in \
         [extensions](../extensions.md). Environment: `PEBBLE` is the daemon directory \
         (default `/var/lib/pebble/default`), `PEBBLE_SOCKET` the API socket (default \
         `$PEBBLE/.pebble.socket`).\n\n",
    );
    for (label, description, names) in CATEGORIES {
        out.push_str(&format!("- {label} ({description}): "));
        let links: Vec<String> = names
            .iter()
            .map(|name| format!("[`{name}`](#{program}-{name})"))
            .collect();
        out.push_str(&links.join(", "));
        out.push('\n');
    }
    let others: Vec<String> = commands(root)
        .into_iter()
        .filter(|c| !CATEGORIES.iter().any(|(_, _, n)| n.contains(&c.get_name())))
        .map(|c| format!("[`{0}`](#{program}-{0})", c.get_name()))
        .collect();
    if !others.is_empty() {
        out.push_str(&format!("- Other: {}\n", others.join(", ")));
    }
    let global: Vec<&Arg> = arguments(root).collect();
    if !global.is_empty() {
        out.push_str("\nOptions every command accepts:\n\n");
        out.push_str(&markdown_table(&global));
    }
    for command in commands(root) {
        let name = command.get_name();
        out.push_str(&format!("\n## {program} {name}\n\n"));
        if command.is_hide_set() {
            out.push_str("Hidden: not listed by `help`.\n\n");
        }
        out.push_str(&format!("{}\n\n", markdown_text(&about(command))));
        if let Some(long) = long_about(command) {
            out.push_str(&format!("{}\n\n", markdown_text(&long)));
        }
        out.push_str(&format!("```\n{}\n```\n", usage(program, command)));
        let args: Vec<&Arg> = arguments(command).collect();
        if !args.is_empty() {
            out.push('\n');
            out.push_str(&markdown_table(&args));
        }
    }
    out
}

fn markdown_table(args: &[&Arg]) -> String {
    let mut out = String::from("| Argument | Description |\n|---|---|\n");
    for arg in args {
        out.push_str(&format!(
            "| `{}` | {} |\n",
            arg_name(arg),
            markdown_cell(&arg_help(arg))
        ));
    }
    out
}

/// Help text as Markdown: indented lines become a code block, and the line breaks of the
/// text are kept (two trailing spaces), so that lists such as `enter`'s footnotes read as
/// they do in `help`.
fn markdown_text(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let is_code = |line: &str| line.starts_with("  ");
    let mut out = String::new();
    let mut in_code = false;
    for (i, line) in lines.iter().enumerate() {
        let code = is_code(line);
        if code && !in_code {
            out.push_str("```\n");
            in_code = true;
        } else if !code && in_code && !line.is_empty() {
            out.push_str("```\n\n");
            in_code = false;
        }
        if in_code && line.is_empty() {
            continue;
        }
        if code {
            out.push_str(line.strip_prefix("    ").unwrap_or(line));
        } else {
            out.push_str(line);
            let next = lines.get(i + 1).copied().unwrap_or_default();
            if !line.is_empty() && !next.is_empty() && !is_code(next) {
                out.push_str("  ");
            }
        }
        out.push('\n');
    }
    if in_code {
        out.push_str("```\n");
    }
    out.trim_end().to_string()
}

fn markdown_cell(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}

// ---------------------------------------------------------------------------------------------
// roff

/// The manual page: the whole program (`command` is `None`), as Pebble's `help --man`
/// writes it, or one command. Section 8, as Pebble's.
pub(super) fn man_page(
    root: &Command,
    program: &str,
    command: Option<&Command>,
    date: &str,
) -> String {
    let mut out = String::new();
    let title = match command {
        Some(c) => format!("{program}-{}", c.get_name()),
        None => program.to_string(),
    };
    out.push_str(&format!(".TH {} 8 \"{}\"\n", roff(&title), roff(date)));
    out.push_str(".SH NAME\n");
    match command {
        Some(c) => out.push_str(&format!("{} \\- {}\n", roff(&title), roff(&about(c)))),
        None => out.push_str(&format!(
            "{} \\- a service manager for containers, a drop-in replacement for Pebble\n",
            roff(program)
        )),
    }
    out.push_str(".SH SYNOPSIS\n");
    match command {
        Some(c) => out.push_str(&format!("\\fB{}\\fP\n", roff(&usage(program, c)))),
        None => out.push_str(&format!(
            "\\fB{}\\fP <command> [<options>...]\n",
            roff(program)
        )),
    }
    out.push_str(".SH DESCRIPTION\n");
    match command {
        Some(c) => {
            out.push_str(&roff_text(&about(c)));
            if let Some(long) = long_about(c) {
                out.push_str(".PP\n");
                out.push_str(&roff_text(&long));
            }
            push_man_options(&mut out, &arguments(c).collect::<Vec<_>>());
        }
        None => {
            out.push_str(&roff_text(&format!(
                "{program} runs and supervises the services of a container and answers \
                 Pebble's API on a unix socket; every other command is a client of that API. \
                 The PEBBLE environment variable sets the daemon directory (default \
                 /var/lib/pebble/default); PEBBLE_SOCKET sets the API socket (default \
                 $PEBBLE/.pebble.socket)."
            )));
            out.push_str(".SH COMMANDS\n");
            for c in commands(root) {
                out.push_str(&format!(".SS {}\n", roff(c.get_name())));
                out.push_str(&roff_text(&about(c)));
                if let Some(long) = long_about(c) {
                    out.push_str(".PP\n");
                    out.push_str(&roff_text(&long));
                }
                out.push_str(&format!(
                    ".PP\n\\fBUsage\\fP: {}\n",
                    roff(&usage(program, c))
                ));
                for arg in arguments(c) {
                    push_man_arg(&mut out, arg);
                }
            }
        }
    }
    out
}

fn push_man_options(out: &mut String, args: &[&Arg]) {
    if args.is_empty() {
        return;
    }
    out.push_str(".SH OPTIONS\n");
    for arg in args {
        push_man_arg(out, arg);
    }
}

fn push_man_arg(out: &mut String, arg: &Arg) {
    out.push_str(&format!(
        ".TP\n\\fB{}\\fP\n{}",
        roff(&arg_name(arg)),
        roff_text(&arg_help(arg))
    ));
}

/// Text escaped for roff: backslashes and hyphens, and a leading dot or quote neutralised.
fn roff(text: &str) -> String {
    let escaped = text.replace('\\', "\\e").replace('-', "\\-");
    if escaped.starts_with('.') || escaped.starts_with('\'') {
        format!("\\&{escaped}")
    } else {
        escaped
    }
}

/// Paragraphs of help text as roff: blank lines become `.PP`, indented lines literal.
fn roff_text(text: &str) -> String {
    let mut out = String::new();
    let mut in_code = false;
    for line in text.lines() {
        let code = line.starts_with("  ");
        if code && !in_code {
            out.push_str(".PP\n.nf\n");
            in_code = true;
        } else if !code && in_code && !line.is_empty() {
            out.push_str(".fi\n");
            in_code = false;
        }
        if line.is_empty() {
            if !in_code {
                out.push_str(".PP\n");
            }
            continue;
        }
        out.push_str(&roff(if code { line.trim_start() } else { line }));
        out.push('\n');
    }
    if in_code {
        out.push_str(".fi\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn root() -> Command {
        let mut command = super::super::Cli::command().name("cobble");
        command.build();
        command
    }

    #[test]
    fn every_command_and_every_argument_is_in_the_markdown_reference() {
        let root = root();
        let text = markdown(&root);
        for command in root.get_subcommands() {
            let heading = format!("\n## cobble {}\n", command.get_name());
            let start = text
                .find(&heading)
                .unwrap_or_else(|| panic!("no {heading:?}"));
            let end = text[start + 1..]
                .find("\n## ")
                .map_or(text.len(), |i| start + 1 + i);
            let section = &text[start..end];
            for arg in arguments(command) {
                let name = format!("`{}`", arg_name(arg));
                assert!(section.contains(&name), "{name} missing under {heading:?}");
            }
        }
    }

    #[test]
    fn the_man_page_has_a_section_per_command_in_section_8() {
        let root = root();
        let page = man_page(&root, "pebble", None, "1 December 2026");
        assert!(
            page.starts_with(".TH pebble 8 \"1 December 2026\"\n"),
            "{page}"
        );
        for command in root.get_subcommands() {
            assert!(
                page.contains(&format!("\n.SS {}\n", roff(command.get_name()))),
                "{}",
                command.get_name()
            );
        }
        assert!(
            !page.contains(".TP\n.TP\n"),
            "no doubled .TP, as Pebble's fix-up ensures"
        );
        let services = root.find_subcommand("services").unwrap();
        let one = man_page(&root, "cobble", Some(services), "1 December 2026");
        assert!(
            one.contains(".SH OPTIONS\n.TP\n\\fB\\-\\-abs\\-time\\fP\n"),
            "{one}"
        );
    }

    #[test]
    fn roff_escapes_what_troff_would_read_as_requests() {
        assert_eq!(roff(".hidden"), "\\&.hidden");
        assert_eq!(roff("a-b\\c"), "a\\-b\\ec");
    }
}
