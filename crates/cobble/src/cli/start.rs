//! `start <service>...`: starts the named services and their requirements through one change.

use clap::Args;
use cobble_client::Client;

use super::Output;
use super::wait::{WaitArgs, service_action};

/// Arguments of `start`.
#[derive(Debug, Args)]
pub(super) struct StartArgs {
    #[command(flatten)]
    wait: WaitArgs,
    /// The services to start.
    #[arg(required = true, value_name = "service")]
    services: Vec<String>,
}

/// Runs `start`.
pub(super) async fn execute(
    args: StartArgs,
    client: &Client,
    out: &mut Output,
) -> anyhow::Result<()> {
    service_action(client, out, "start", &args.services, args.wait).await
}
