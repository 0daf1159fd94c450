//! `checks [--level=alive|ready] [check...]`: the status table of the plan's health checks.

use clap::Args;
use cobble_client::Client;
use cobble_client::types::CheckInfo;

use super::format::tabulate;
use super::structured::{self, Fields, Format, Value};
use super::{Output, program_name, write_all};

/// Longest "last log" text shown in the `Change` column.
const MAX_LOG: usize = 70;

/// Arguments of `checks`.
#[derive(Debug, Args)]
pub(super) struct ChecksArgs {
    /// Check level to filter for
    #[arg(long, value_parser = ["alive", "ready"])]
    level: Option<String>,
    /// Output format
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Only these checks (all when none are given).
    #[arg(value_name = "check")]
    checks: Vec<String>,
}

/// Runs `checks`.
pub(super) async fn execute(
    args: ChecksArgs,
    client: &Client,
    out: &mut Output,
) -> anyhow::Result<()> {
    let level = args.level.as_deref().unwrap_or("");
    let checks = client.checks(level, &args.checks).await?;
    if !args.format.is_text() {
        let mut by_name: Vec<(String, Value)> = checks
            .iter()
            .map(|c| (c.name.clone(), structured::check(c)))
            .collect();
        by_name.sort_by(|a, b| a.0.cmp(&b.0));
        let value = Fields::new().field("checks", Value::Map(by_name)).build();
        return args.format.write(out, &value);
    }
    if checks.is_empty() {
        if args.checks.is_empty() && level.is_empty() {
            eprintln!("Plan has no health checks.");
        } else {
            eprintln!("No matching health checks.");
        }
        return Ok(());
    }
    let mut rows = vec![
        [
            "Check",
            "Level",
            "Startup",
            "Status",
            "Successes",
            "Failures",
            "Change",
        ]
        .map(String::from)
        .to_vec(),
    ];
    for check in &checks {
        let change = change_column(client, check).await;
        rows.push(row(check, change));
    }
    write_all(out, &tabulate(&rows))
}

fn row(check: &CheckInfo, change: String) -> Vec<String> {
    let inactive = check.status == "inactive";
    let level = if check.level.is_empty() {
        "-".to_string()
    } else {
        check.level.clone()
    };
    let successes = match check.successes {
        // A daemon too old to count them.
        None => "?".to_string(),
        Some(_) if inactive => "-".to_string(),
        Some(n) => n.to_string(),
    };
    let failures = if inactive {
        "-".to_string()
    } else {
        format!("{}/{}", check.failures, check.threshold)
    };
    vec![
        check.name.clone(),
        level,
        check.startup.clone(),
        check.status.clone(),
        successes,
        failures,
        change,
    ]
}

/// The change ID, with the last task-log message while the check is failing: from the
/// current change, or from the previous one when the current has logged nothing yet (a
/// recover-check change that has just begun).
async fn change_column(client: &Client, check: &CheckInfo) -> String {
    if check.change_id.is_empty() {
        return "-".into();
    }
    if check.failures == 0 {
        return check.change_id.clone();
    }
    let mut log_change = check.change_id.as_str();
    let mut log = match last_log(client, log_change).await {
        Ok(log) => log,
        Err(e) => return format!("{} ({e})", check.change_id),
    };
    if log.is_empty() && !check.prev_change_id.is_empty() {
        log_change = &check.prev_change_id;
        log = match last_log(client, log_change).await {
            Ok(log) => log,
            Err(e) => return format!("{} ({e})", check.change_id),
        };
    }
    if log.is_empty() {
        return check.change_id.clone();
    }
    format!("{} ({})", check.change_id, shorten(&log, log_change))
}

/// The last failure in a change's first task, without its prefix; empty when there is
/// none. The last failure, not cobble's INFO notes about re-fired actions.
async fn last_log(client: &Client, change_id: &str) -> Result<String, cobble_client::Error> {
    let change = client.change(change_id).await?;
    Ok(change
        .tasks
        .first()
        .and_then(|t| t.log.iter().rev().find(|e| e.contains(" ERROR ")))
        .map(|entry| last_log_text(entry))
        .unwrap_or_default())
}

/// A task-log entry without its `<time> <LEVEL> ` prefix, on one line.
fn last_log_text(entry: &str) -> String {
    let mut parts = entry.splitn(3, ' ');
    let text = match (parts.next(), parts.next(), parts.next()) {
        (Some(_), Some(_), Some(rest)) => rest,
        _ => entry,
    };
    text.replace('\n', "\\n")
}

/// Cuts a long message to [`MAX_LOG`] bytes, pointing at `tasks` for the rest.
fn shorten(log: &str, change_id: &str) -> String {
    if log.len() <= MAX_LOG {
        return log.to_owned();
    }
    let for_more = format!("... run \"{} tasks {change_id}\" for more", program_name());
    let mut keep = MAX_LOG.saturating_sub(for_more.len());
    while !log.is_char_boundary(keep) {
        keep -= 1;
    }
    format!("{}{for_more}", &log[..keep])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(name: &str, level: &str, status: &str, failures: u64, change: &str) -> CheckInfo {
        CheckInfo {
            name: name.into(),
            level: level.into(),
            startup: "enabled".into(),
            status: status.into(),
            successes: Some(2),
            failures,
            threshold: 3,
            change_id: change.into(),
            prev_change_id: String::new(),
        }
    }

    /// Pebble v1.32.1's `checks` table, with its `Successes` column.
    #[test]
    fn rows_show_dashes_for_unset_and_inactive() {
        let mut old = info("chk3", "ready", "up", 0, "4");
        old.successes = None;
        let rows = vec![
            [
                "Check",
                "Level",
                "Startup",
                "Status",
                "Successes",
                "Failures",
                "Change",
            ]
            .map(String::from)
            .to_vec(),
            row(
                &info("chk1", "alive", "up", 1, "3"),
                "3 (exit status 1)".into(),
            ),
            row(&info("chk2", "", "inactive", 0, ""), "-".into()),
            row(&old, "4".into()),
        ];
        assert_eq!(
            tabulate(&rows),
            "Check  Level  Startup  Status    Successes  Failures  Change\n\
             chk1   alive  enabled  up        2          1/3       3 (exit status 1)\n\
             chk2   -      enabled  inactive  -          -         -\n\
             chk3   ready  enabled  up        ?          0/3       4\n"
        );
    }

    #[test]
    fn log_text_drops_the_prefix_and_long_text_is_cut() {
        assert_eq!(
            last_log_text("2024-01-01T00:00:00Z ERROR exit status 1; a\nb"),
            "exit status 1; a\\nb"
        );
        let long = "x".repeat(100);
        let short = shorten(&long, "7");
        assert_eq!(short.len(), MAX_LOG);
        assert!(short.ends_with("tasks 7\" for more"), "{short}");
    }
}
