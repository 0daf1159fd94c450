//! `replan`: brings the running services in line with the plan (restarts those whose
//! configuration changed, starts `startup: enabled` ones).

use cobble_client::Client;

use super::Output;
use super::wait::{WaitArgs, service_action};

/// Runs `replan`.
pub(super) async fn execute(
    args: WaitArgs,
    client: &Client,
    out: &mut Output,
) -> anyhow::Result<()> {
    service_action(client, out, "replan", &[], args).await
}
