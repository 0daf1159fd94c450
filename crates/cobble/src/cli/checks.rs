//! `checks [--level=alive|ready] [check...]`: the status table of the plan's health checks.

use clap::Args;
use cobble_client::Client;
use cobble_client::types::CheckInfo;

use super::format::tabulate;
use super::{Output, program_name, write_all};

/// Longest "last log" text shown in the `Change` column.
const MAX_LOG: usize = 70;

/// Arguments of `checks`.
#[derive(Debug, Args)]
pub struct ChecksArgs {
    /// Check level to filter for.
    #[arg(long, value_parser = ["alive", "ready"])]
    level: Option<String>,
    /// Only these checks (all when none are given).
    #[arg(value_name = "check")]
    checks: Vec<String>,
}

/// Runs `checks`.
pub async fn execute(args: ChecksArgs, client: &Client, out: &mut Output) -> anyhow::Result<()> {
    let level = args.level.as_deref().unwrap_or("");
    let checks = client.checks(level, &args.checks).await?;
    if checks.is_empty() {
        if args.checks.is_empty() && level.is_empty() {
            eprintln!("Plan has no health checks.");
        } else {
            eprintln!("No matching health checks.");
        }
        return Ok(());
    }
    let mut rows = vec![vec![
        "Check".to_string(),
        "Level".into(),
        "Startup".into(),
        "Status".into(),
        "Failures".into(),
        "Change".into(),
    ]];
    for check in &checks {
        let change = change_column(client, check).await;
        rows.push(row(check, change));
    }
    write_all(out, &tabulate(&rows))
}

fn row(check: &CheckInfo, change: String) -> Vec<String> {
    let level = if check.level.is_empty() {
        "-".to_string()
    } else {
        check.level.clone()
    };
    let failures = if check.status == "inactive" {
        "-".to_string()
    } else {
        format!("{}/{}", check.failures, check.threshold)
    };
    vec![
        check.name.clone(),
        level,
        check.startup.clone(),
        check.status.clone(),
        failures,
        change,
    ]
}

/// The change ID, with the last task-log message while the check is failing.
async fn change_column(client: &Client, check: &CheckInfo) -> String {
    if check.change_id.is_empty() {
        return "-".into();
    }
    if check.failures == 0 {
        return check.change_id.clone();
    }
    match client.change(&check.change_id).await {
        Err(e) => format!("{} ({e})", check.change_id),
        Ok(change) => {
            // The last failure, not cobble's INFO notes about re-fired actions.
            let last = change
                .tasks
                .first()
                .and_then(|t| t.log.iter().rev().find(|e| e.contains(" ERROR ")))
                .map(|entry| last_log_text(entry))
                .unwrap_or_default();
            if last.is_empty() {
                check.change_id.clone()
            } else {
                format!("{} ({})", check.change_id, shorten(&last, &check.change_id))
            }
        }
    }
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
            successes: 0,
            failures,
            threshold: 3,
            change_id: change.into(),
        }
    }

    #[test]
    fn rows_show_dashes_for_unset_and_inactive() {
        let rows = vec![
            vec![
                "Check".to_string(),
                "Level".into(),
                "Startup".into(),
                "Status".into(),
                "Failures".into(),
                "Change".into(),
            ],
            row(
                &info("chk1", "alive", "up", 1, "3"),
                "3 (exit status 1)".into(),
            ),
            row(&info("chk2", "", "inactive", 0, ""), "-".into()),
        ];
        assert_eq!(
            tabulate(&rows),
            "Check  Level  Startup  Status    Failures  Change\n\
             chk1   alive  enabled  up        1/3       3 (exit status 1)\n\
             chk2   -      enabled  inactive  -         -\n"
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
