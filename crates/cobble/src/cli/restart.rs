//! `restart <service>...`: restarts the named services through one change.

use clap::Args;
use cobble_client::Client;

use super::Output;
use super::wait::{WaitArgs, service_action};

/// Arguments of `restart`.
#[derive(Debug, Args)]
pub(super) struct RestartArgs {
    #[command(flatten)]
    wait: WaitArgs,
    /// The services to restart.
    #[arg(required = true, value_name = "service")]
    services: Vec<String>,
}

/// Runs `restart`.
pub(super) async fn execute(
    args: RestartArgs,
    client: &Client,
    out: &mut Output,
) -> anyhow::Result<()> {
    service_action(client, out, "restart", &args.services, args.wait).await
}
