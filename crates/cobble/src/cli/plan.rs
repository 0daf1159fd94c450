//! `plan`: prints the combined plan as the daemon renders it (YAML).

use clap::Args;
use cobble_client::Client;

use super::{Output, write_all};

/// `plan` takes no arguments.
#[derive(Debug, Args)]
pub(super) struct PlanArgs {}

/// Runs `plan`.
pub(super) async fn execute(
    _args: PlanArgs,
    client: &Client,
    out: &mut Output,
) -> anyhow::Result<()> {
    let yaml = client.plan_yaml().await?;
    write_all(out, &yaml)
}
