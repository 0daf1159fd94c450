//! `warnings [--all] [--abs-time] [--format=...] [--unicode=...] [--verbose]`: the warnings
//! the daemon has recorded (notices of type `warning`), oldest repeat first.
//!
//! As with `notices`, the newest warning listed is remembered in `cli.json`, and `okay`
//! acknowledges up to it; without `--all`, only warnings repeated since are listed. After
//! any command, the CLI says when the daemon has a warning newer than the last one listed
//! ([`hint_new_warnings`]).

use clap::{Args, ValueEnum};
use cobble_client::types::NoticeInfo;
use cobble_client::{Client, NoticesOptions};
use cobble_plan::duration::parse_duration;

use super::format::tabulate;
use super::notices::{CliState, WARNINGS_LAST_LISTED, WARNINGS_LAST_OKAYED, socket_path};
use super::structured::{self, Fields, Format, Value};
use super::times::TimeFormatter;
use super::{Output, program_name, write_all};

/// What `help warnings` says beyond the summary.
pub(super) const LONG_ABOUT: &str = "Lists what the daemon has warned about, oldest first. \
    'okay' acknowledges the warnings listed so far: they are left out of later lists until \
    they repeat, which a warning does at most once a day. Warnings are forgotten a week after \
    they last happened. --all lists acknowledged warnings too.";

/// `--unicode`: whether a little Unicode may be used. Pebble accepts it here, and uses none.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub(super) enum Unicode {
    #[default]
    Auto,
    Never,
    Always,
}

/// Arguments of `warnings`.
#[derive(Debug, Args)]
pub(super) struct WarningsArgs {
    /// Show all warnings
    #[arg(long)]
    all: bool,
    /// Display absolute times (in RFC 3339 format). Otherwise, display relative times up to
    /// 60 days, then YYYY-MM-DD.
    #[arg(long)]
    abs_time: bool,
    /// Output format
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Use a little bit of Unicode to improve legibility.
    #[arg(long, value_enum, default_value_t = Unicode::Auto)]
    unicode: Unicode,
    /// Show more information (text format only)
    #[arg(long)]
    verbose: bool,
}

/// Runs `warnings`.
pub(super) async fn execute(
    args: WarningsArgs,
    client: &Client,
    out: &mut Output,
) -> anyhow::Result<()> {
    let mut state = if args.all {
        None
    } else {
        Some(CliState::load(&socket_path())?)
    };
    let options = NoticesOptions {
        types: vec!["warning".into()],
        after: state.as_ref().and_then(|s| s.time(WARNINGS_LAST_OKAYED)),
        ..Default::default()
    };
    let warnings = client
        .notices(&options)
        .await
        .map_err(|e| anyhow::anyhow!("cannot get notices: {e}"))?;
    if let (Some(state), Some(last)) = (state.as_mut(), warnings.last()) {
        state.set(WARNINGS_LAST_LISTED, &last.last_repeated);
        state
            .save()
            .map_err(|e| anyhow::anyhow!("cannot save CLI state: {e}"))?;
    }
    if !args.format.is_text() {
        let list = warnings.iter().map(structured::notice).collect();
        let value = Fields::new().field("warnings", Value::Seq(list)).build();
        return args.format.write(out, &value);
    }
    if warnings.is_empty() {
        let okayed = state.as_ref().and_then(|s| s.time(WARNINGS_LAST_OKAYED));
        if okayed.is_none() {
            eprintln!("No warnings.");
        } else {
            eprintln!("No further warnings.");
        }
        return Ok(());
    }
    let times = TimeFormatter::new(args.abs_time);
    write_all(
        out,
        &text(&warnings, &times, args.verbose, term_width().min(100)),
    )
}

/// The text form: per warning, its times aligned like a tab-separated block, then the
/// message under `warning: |`, wrapped to the terminal; `---` between warnings.
fn text(warnings: &[NoticeInfo], times: &TimeFormatter, verbose: bool, width: usize) -> String {
    let mut out = String::new();
    for (i, warning) in warnings.iter().enumerate() {
        if i > 0 {
            out.push_str("---\n");
        }
        let row = |key: &str, value: String| vec![key.to_owned(), value];
        let mut rows = Vec::new();
        if verbose {
            rows.push(row(
                "first-occurrence:",
                times.format(&warning.first_occurred),
            ));
        }
        rows.push(row(
            "last-occurrence:",
            times.format(&warning.last_occurred),
        ));
        if verbose {
            let seconds = |d: &Option<String>| {
                d.as_deref()
                    .and_then(|d| parse_duration(d).ok())
                    .unwrap_or(0) as f64
                    / 1e9
            };
            rows.push(row("last-repeated:", times.format(&warning.last_repeated)));
            rows.push(row(
                "repeats-after:",
                human_duration(seconds(&warning.repeat_after)),
            ));
            rows.push(row(
                "expires-after:",
                human_duration(seconds(&warning.expire_after)),
            ));
        }
        out.push_str(&tabulate(&rows));
        out.push_str("warning: |\n");
        for line in warning.key.trim_end().split('\n') {
            wrap_line(&mut out, line, width);
        }
    }
    out
}

/// One line of a warning's message under `  `, its own indentation kept (unless that takes
/// more than half the width), wrapped at the last space that fits or, lacking one, at the
/// width.
fn wrap_line(out: &mut String, line: &str, width: usize) {
    let line = line.trim_end();
    let body = line.trim_start();
    let mut indent = format!("  {}", &line[..line.len() - body.len()]);
    if indent.len() > width / 2 {
        indent = "    ".into();
    }
    let room = width.saturating_sub(indent.chars().count()).max(1);
    let mut text: Vec<char> = body.chars().collect();
    while text.len() > room {
        let cut = text[..=room]
            .iter()
            .rposition(|c| c.is_whitespace())
            .unwrap_or(room);
        out.push_str(&indent);
        out.extend(&text[..cut]);
        out.push('\n');
        let rest = text[cut..]
            .iter()
            .position(|c| !c.is_whitespace())
            .map_or(text.len(), |p| cut + p);
        text.drain(..rest);
    }
    out.push_str(&indent);
    out.extend(&text);
    out.push('\n');
}

/// The width of the terminal on stdout, else `COLUMNS`; 80 when under 40 or unknown.
fn term_width() -> usize {
    use std::os::fd::AsFd;
    let from_terminal = cobble_sys::terminal::window_size(std::io::stdout().as_fd())
        .ok()
        .map(|(columns, _)| usize::from(columns))
        .filter(|&c| c > 0);
    let width = from_terminal
        .or_else(|| std::env::var("COLUMNS").ok()?.parse().ok())
        .unwrap_or(0);
    if width < 40 { 80 } else { width }
}

/// A duration in seconds the way Pebble's `warnings --verbose` shows it: three or four
/// characters of the largest fitting units (`1d00h`, `7d00h`, `2m05s`, `150ms`).
fn human_duration(seconds: f64) -> String {
    const YEAR_DAYS: f64 = 365.25;
    if seconds < 60.0 {
        if seconds >= 9.995 {
            return format!("{seconds:.1}s");
        }
        if seconds >= 0.9995 {
            return format!("{seconds:.2}s");
        }
        let mut value = seconds;
        let mut unit = 'n';
        for prefix in ['m', 'µ', 'n'] {
            value *= 1000.0;
            unit = prefix;
            if value >= 0.9995 {
                break;
            }
        }
        return if value > 9.5 {
            format!("{value:3.0}{unit}s")
        } else {
            format!("{value:.1}{unit}s")
        };
    }
    let split = |value: f64, unit: f64| {
        let whole = (value / unit).floor();
        (whole, value - whole * unit)
    };
    if seconds < 600.0 {
        let (m, s) = split(seconds, 60.0);
        return format!("{m:.0}m{s:02.0}s");
    }
    let minutes = seconds / 60.0;
    if minutes < 99.95 {
        return format!("{minutes:3.1}m");
    }
    if minutes < 600.0 {
        let (h, m) = split(minutes, 60.0);
        return format!("{h:.0}h{m:02.0}m");
    }
    if minutes < 24.0 * 60.0 {
        let (h, m) = split(minutes, 60.0);
        if m < 10.0 {
            return format!("{h:.0}h{m:1.0}m");
        }
        return format!("{:3.1}h", minutes / 60.0);
    }
    let hours = minutes / 60.0;
    if hours < 10.0 * 24.0 {
        let (d, h) = split(hours, 24.0);
        return format!("{d:.0}d{h:02.0}h");
    }
    if hours < 99.95 * 24.0 {
        let (d, h) = split(hours, 24.0);
        if h < 10.0 {
            return format!("{d:.0}d{h:.0}h");
        }
        return format!("{:4.1}d", hours / 24.0);
    }
    let days = hours / 24.0;
    if days < 2.0 * YEAR_DAYS {
        return format!("{days:4.0}d");
    }
    let years = days / YEAR_DAYS;
    if years < 9.995 {
        format!("{years:4.2}y")
    } else if years < 99.95 {
        format!("{years:4.1}y")
    } else {
        format!("{years:4.0}y")
    }
}

/// Pebble's hint after a command, on stderr: the daemon has a warning newer than the last
/// one `warnings` listed. Only a daemon that has warnings says when the latest was.
pub(super) fn hint_new_warnings(client: &Client) {
    let Some(latest) = client.latest_warning() else {
        return;
    };
    let Ok(latest) = latest.parse::<jiff::Timestamp>() else {
        return;
    };
    let listed = CliState::load(&socket_path())
        .ok()
        .and_then(|state| state.time(WARNINGS_LAST_LISTED))
        .and_then(|t| t.parse::<jiff::Timestamp>().ok());
    if listed.is_none_or(|listed| latest > listed) {
        eprintln!(
            "WARNING: There are new warnings. See '{} warnings'.",
            program_name()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn warning(key: &str) -> NoticeInfo {
        NoticeInfo {
            id: "1".into(),
            user_id: None,
            kind: "warning".into(),
            key: key.into(),
            first_occurred: "2026-12-01T20:00:00Z".into(),
            last_occurred: "2026-12-01T21:00:00Z".into(),
            last_repeated: "2026-12-01T20:30:00Z".into(),
            occurrences: 2,
            last_data: Default::default(),
            repeat_after: Some("24h0m0s".into()),
            expire_after: Some("168h0m0s".into()),
        }
    }

    #[test]
    fn durations_read_as_pebble_shows_them() {
        let cases = [
            (86_400.0, "1d00h"),
            (604_800.0, "7d00h"),
            (3_600.0, "60.0m"),
            (125.0, "2m05s"),
            (30.0, "30.0s"),
            (1.5, "1.50s"),
            (0.15, "150ms"),
            (0.005, "5.0ms"),
            (36_000.0, "10h0m"),
            (50_000.0, "13.9h"),
            (30.0 * 86_400.0, "30d0h"),
            (45.5 * 86_400.0, "45.5d"),
            (400.0 * 86_400.0, " 400d"),
            (3.0 * 365.25 * 86_400.0, "3.00y"),
        ];
        for (seconds, shown) in cases {
            assert_eq!(human_duration(seconds), shown, "{seconds}s");
        }
    }

    #[test]
    fn text_aligns_times_and_wraps_the_message() {
        let times = TimeFormatter::at(true, jiff::ZonedDateTime::now());
        let long = "the quick brown fox jumps over the lazy dog ".repeat(2);
        let text = text(
            &[
                warning(&format!("{long}\n    indented\n")),
                warning("short"),
            ],
            &times,
            true,
            40,
        );
        assert_eq!(
            text,
            "first-occurrence:  2026-12-01T20:00:00Z\n\
             last-occurrence:   2026-12-01T21:00:00Z\n\
             last-repeated:     2026-12-01T20:30:00Z\n\
             repeats-after:     1d00h\n\
             expires-after:     7d00h\n\
             warning: |\n  \
               the quick brown fox jumps over the\n  \
               lazy dog the quick brown fox jumps\n  \
               over the lazy dog\n      \
                   indented\n\
             ---\n\
             first-occurrence:  2026-12-01T20:00:00Z\n\
             last-occurrence:   2026-12-01T21:00:00Z\n\
             last-repeated:     2026-12-01T20:30:00Z\n\
             repeats-after:     1d00h\n\
             expires-after:     7d00h\n\
             warning: |\n  \
               short\n"
        );
    }
}
