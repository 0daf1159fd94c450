//! `check [--refresh] [--format=text|json|yaml] <check>`: one check's details, and while it
//! fails the log of the change that runs it (or, when that has none yet, of the change before).
//! The text format is the YAML.

use clap::Args;
use cobble_client::Client;

use super::Output;
use super::structured::{self, Fields, Format, Value};

/// Arguments of `check`.
#[derive(Debug, Args)]
pub(super) struct CheckArgs {
    /// Output format
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Run the check immediately
    #[arg(long)]
    refresh: bool,
    /// The check to show.
    #[arg(required = true, value_name = "check")]
    check: String,
}

/// Runs `check`.
pub(super) async fn execute(
    args: CheckArgs,
    client: &Client,
    out: &mut Output,
) -> anyhow::Result<()> {
    let (info, error) = if args.refresh {
        let result = client.refresh_check(&args.check).await?;
        (result.info, result.error)
    } else {
        let checks = client.checks("", std::slice::from_ref(&args.check)).await?;
        let Some(info) = checks.into_iter().next() else {
            anyhow::bail!("cannot find check {}", cobble_plan::go_quote(&args.check));
        };
        (info, String::new())
    };
    let mut logs = String::new();
    if (info.failures > 0 || !error.is_empty()) && !info.change_id.is_empty() {
        logs = task_logs(client, &info.change_id).await?;
        if logs.is_empty() && !info.prev_change_id.is_empty() {
            logs = task_logs(client, &info.prev_change_id).await?;
        }
    }
    // Pebble's `checkInfo`: the client's `CheckInfo` inlined, then `error` and `logs`.
    let value = Fields::new()
        .inline(structured::check(&info))
        .some(
            "error",
            (!error.is_empty()).then(|| Value::Str(error.clone())),
        )
        .some("logs", (!logs.is_empty()).then_some(Value::Str(logs)))
        .build();
    let format = match args.format {
        Format::Text => Format::Yaml,
        other => other,
    };
    format.write(out, &value)
}

/// Every log line of a change's first task, each ending in a newline.
async fn task_logs(client: &Client, change_id: &str) -> anyhow::Result<String> {
    let change = client
        .change(change_id)
        .await
        .map_err(|e| anyhow::anyhow!("cannot get task logs for change {change_id}: {e}"))?;
    let mut logs = String::new();
    if let Some(task) = change.tasks.first() {
        for entry in &task.log {
            logs.push_str(entry);
            logs.push('\n');
        }
    }
    Ok(logs)
}
