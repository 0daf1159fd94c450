//! `tasks [change-id]` / `tasks --last=<kind>`: the tasks of one change, then each task's log.

use clap::Args;
use cobble_client::types::ChangeInfo;
use cobble_client::{ChangeSelector, Client};

use super::format::{quote, tabulate};
use super::structured::{self, Format};
use super::times::TimeFormatter;
use super::{Output, write_all};

/// The rule between task logs: seventy dots.
const LOG_RULE: &str = "......................................................................";

/// Arguments of `tasks`.
#[derive(Debug, Args)]
pub(super) struct TasksArgs {
    /// Display absolute times (in RFC 3339 format). Otherwise, display relative times up to
    /// 60 days, then YYYY-MM-DD.
    #[arg(long)]
    abs_time: bool,
    /// Output format
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Select the last change of the given kind (start, stop, replan, ...). A question mark
    /// at the end of the kind means to do nothing (instead of returning an error) if no
    /// change of that kind is found.
    #[arg(long, value_name = "kind")]
    last: Option<String>,
    /// The change ID.
    #[arg(value_name = "change-id")]
    id: Option<String>,
}

/// Runs `tasks`.
pub(super) async fn execute(
    args: TasksArgs,
    client: &Client,
    out: &mut Output,
) -> anyhow::Result<()> {
    let Some(id) = change_id(client, args.id, args.last).await? else {
        return Ok(());
    };
    let change = client.change(&id).await?;
    if !args.format.is_text() {
        return args
            .format
            .write(out, &structured::change(&change, args.format));
    }
    write_all(out, &render(&change, &TimeFormatter::new(args.abs_time)))
}

/// The change to show: the given ID, or the latest of `--last`'s kind. `None` means a
/// `--last=kind?` that found nothing, which is not an error.
async fn change_id(
    client: &Client,
    id: Option<String>,
    last: Option<String>,
) -> anyhow::Result<Option<String>> {
    let id = id.filter(|id| !id.is_empty());
    let last = last.filter(|last| !last.is_empty());
    let kind = match (id, last) {
        (None, None) => anyhow::bail!("please provide change ID or type with --last=<type>"),
        (Some(_), Some(_)) => anyhow::bail!("cannot use change ID and type together"),
        (Some(id), None) => return Ok(Some(id)),
        (None, Some(kind)) => kind,
    };
    let (kind, optional) = match kind.strip_suffix('?') {
        Some(kind) => (kind.to_string(), true),
        None => (kind, false),
    };
    let changes = client.changes(ChangeSelector::All, None).await?;
    if changes.is_empty() {
        return if optional {
            Ok(None)
        } else {
            anyhow::bail!("no changes found")
        };
    }
    match latest_of_kind(changes, &kind) {
        Some(change) => Ok(Some(change.id)),
        None if optional => Ok(None),
        None => anyhow::bail!("no changes of type {} found", quote(&kind)),
    }
}

fn latest_of_kind(mut changes: Vec<ChangeInfo>, kind: &str) -> Option<ChangeInfo> {
    super::changes::sort_by_spawn_time(&mut changes);
    changes.into_iter().rev().find(|c| c.kind == kind)
}

/// `Status  Spawn  Ready  Summary`, then for each task with a log: a blank line, the rule,
/// the task summary, a blank line and the log lines; then a final blank line.
fn render(change: &ChangeInfo, times: &TimeFormatter) -> String {
    let mut rows = vec![vec![
        "Status".to_string(),
        "Spawn".into(),
        "Ready".into(),
        "Summary".into(),
    ]];
    for task in &change.tasks {
        let mut summary = task.summary.clone();
        if task.status == "Doing" && task.progress.total > 1 {
            let percent = task.progress.done as f64 / task.progress.total as f64 * 100.0;
            summary = format!("{summary} ({percent:.2}%)");
        }
        rows.push(vec![
            task.status.clone(),
            times.format(&task.spawn_time),
            task.ready_time
                .as_deref()
                .map_or_else(|| "-".to_string(), |t| times.format(t)),
            summary,
        ]);
    }
    let mut text = tabulate(&rows);
    for task in change.tasks.iter().filter(|t| !t.log.is_empty()) {
        text.push('\n');
        text.push_str(LOG_RULE);
        text.push('\n');
        text.push_str(&task.summary);
        text.push_str("\n\n");
        for line in &task.log {
            text.push_str(line);
            text.push('\n');
        }
    }
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use cobble_client::types::{TaskInfo, TaskProgress};

    fn task(summary: &str, status: &str, log: &[&str], done: u64, total: u64) -> TaskInfo {
        TaskInfo {
            id: "1".into(),
            kind: "start".into(),
            summary: summary.into(),
            status: status.into(),
            log: log.iter().map(|l| l.to_string()).collect(),
            progress: TaskProgress {
                label: String::new(),
                done,
                total,
            },
            spawn_time: "2016-04-21T01:02:03Z".into(),
            ready_time: Some("2016-04-21T01:02:04Z".into()),
            data: None,
        }
    }

    #[test]
    fn tasks_then_logs() {
        let change = ChangeInfo {
            id: "3".into(),
            kind: "start".into(),
            summary: "Start service \"a\" and 1 more".into(),
            status: "Error".into(),
            tasks: vec![
                task("Start service \"a\"", "Done", &[], 1, 1),
                task(
                    "Start service \"b\"",
                    "Error",
                    &[
                        "2016-04-21T01:02:04Z ERROR cannot start service: exited quickly with code 1",
                    ],
                    1,
                    1,
                ),
                task("Fetch", "Doing", &[], 50, 100),
            ],
            ready: true,
            err: String::new(),
            spawn_time: "2016-04-21T01:02:03Z".into(),
            ready_time: None,
            data: None,
        };
        let times = TimeFormatter::at(true, jiff::ZonedDateTime::now());
        let expected = format!(
            "Status  Spawn                 Ready                 Summary\n\
             Done    2016-04-21T01:02:03Z  2016-04-21T01:02:04Z  Start service \"a\"\n\
             Error   2016-04-21T01:02:03Z  2016-04-21T01:02:04Z  Start service \"b\"\n\
             Doing   2016-04-21T01:02:03Z  2016-04-21T01:02:04Z  Fetch (50.00%)\n\
             \n{LOG_RULE}\nStart service \"b\"\n\n\
             2016-04-21T01:02:04Z ERROR cannot start service: exited quickly with code 1\n\
             \n"
        );
        assert_eq!(render(&change, &times), expected);
    }

    #[test]
    fn latest_of_kind_uses_spawn_time() {
        let mk = |id: &str, kind: &str, spawn: &str| ChangeInfo {
            id: id.into(),
            kind: kind.into(),
            summary: String::new(),
            status: "Done".into(),
            tasks: vec![],
            ready: true,
            err: String::new(),
            spawn_time: spawn.into(),
            ready_time: None,
            data: None,
        };
        let changes = vec![
            mk("9", "start", "2024-01-01T00:00:09Z"),
            mk("10", "start", "2024-01-01T00:00:10Z"),
            mk("11", "stop", "2024-01-01T00:00:11Z"),
        ];
        assert_eq!(latest_of_kind(changes.clone(), "start").unwrap().id, "10");
        assert!(latest_of_kind(changes, "replan").is_none());
    }
}
