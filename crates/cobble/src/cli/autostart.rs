//! `autostart`: starts the services marked `startup: enabled`.
//!
//! With none, the daemon answers kind `no-default-services` and the CLI prints
//! `error: no default services`.

use cobble_client::Client;

use super::Output;
use super::wait::{WaitArgs, service_action};

/// Runs `autostart`.
pub(super) async fn execute(
    args: WaitArgs,
    client: &Client,
    out: &mut Output,
) -> anyhow::Result<()> {
    service_action(client, out, "autostart", &[], args).await
}
