//! `check [--refresh] <check>`: one check's details as YAML.

use clap::Args;
use cobble_client::Client;
use serde::Serialize;

use super::{Output, write_all};

/// Arguments of `check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Run the check immediately.
    #[arg(long)]
    refresh: bool,
    /// The check to show.
    #[arg(required = true, value_name = "check")]
    check: String,
}

/// The fields Pebble's `check` prints, in its order.
#[derive(Debug, Serialize)]
struct CheckDetails {
    name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    level: String,
    startup: String,
    status: String,
    failures: u64,
    threshold: u64,
    #[serde(rename = "change-id", skip_serializing_if = "String::is_empty")]
    change_id: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    error: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    logs: String,
}

/// Runs `check`.
pub async fn execute(args: CheckArgs, client: &Client, out: &mut Output) -> anyhow::Result<()> {
    let (info, error) = if args.refresh {
        let result = client.refresh_check(&args.check).await?;
        (result.info, result.error)
    } else {
        let checks = client.checks("", std::slice::from_ref(&args.check)).await?;
        let Some(info) = checks.into_iter().next() else {
            anyhow::bail!("cannot find check \"{}\"", args.check);
        };
        (info, String::new())
    };
    let mut logs = String::new();
    if !error.is_empty() && !info.change_id.is_empty() {
        let change = client.change(&info.change_id).await?;
        if let Some(task) = change.tasks.first() {
            for entry in &task.log {
                logs.push_str(entry);
                logs.push('\n');
            }
        }
    }
    let details = CheckDetails {
        name: info.name,
        level: info.level,
        startup: info.startup,
        status: info.status,
        failures: info.failures,
        threshold: info.threshold,
        change_id: info.change_id,
        error,
        logs,
    };
    write_all(out, &serde_saphyr::to_string(&details)?)
}
