//! `stop <service>...`: stops the named services through one change.

use clap::Args;
use cobble_client::Client;

use super::Output;
use super::wait::{WaitArgs, service_action};

/// Arguments of `stop`.
#[derive(Debug, Args)]
pub(super) struct StopArgs {
    #[command(flatten)]
    wait: WaitArgs,
    /// The services to stop.
    #[arg(required = true, value_name = "service")]
    services: Vec<String>,
}

/// Runs `stop`.
pub(super) async fn execute(
    args: StopArgs,
    client: &Client,
    out: &mut Output,
) -> anyhow::Result<()> {
    service_action(client, out, "stop", &args.services, args.wait).await
}
