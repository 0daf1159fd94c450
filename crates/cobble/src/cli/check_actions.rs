//! `start-checks <check>...` and `stop-checks <check>...`: start or stop health checks.

use clap::Args;
use cobble_client::Client;

use super::{Output, write_all};

/// Arguments of `start-checks` and `stop-checks`.
#[derive(Debug, Args)]
pub(super) struct ChecksActionArgs {
    /// The checks to act on.
    #[arg(required = true, value_name = "check")]
    checks: Vec<String>,
}

/// Runs `start-checks`.
pub(super) async fn start(
    args: ChecksActionArgs,
    client: &Client,
    out: &mut Output,
) -> anyhow::Result<()> {
    let changed = client.start_checks(&args.checks).await?;
    write_all(out, &summary(&changed, "started"))
}

/// Runs `stop-checks`.
pub(super) async fn stop(
    args: ChecksActionArgs,
    client: &Client,
    out: &mut Output,
) -> anyhow::Result<()> {
    let changed = client.stop_checks(&args.checks).await?;
    write_all(out, &summary(&changed, "stopped"))
}

fn summary(changed: &[String], verb: &str) -> String {
    if changed.is_empty() {
        format!("Checks already {verb}.\n")
    } else {
        format!("Checks {verb}: {}\n", changed.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summaries_match_pebble() {
        assert_eq!(summary(&[], "started"), "Checks already started.\n");
        assert_eq!(
            summary(&["a".into(), "b".into()], "stopped"),
            "Checks stopped: a, b\n"
        );
    }
}
