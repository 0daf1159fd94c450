//! `okay`: acknowledge the notices `notices` listed, so that it lists only newer ones.

use clap::Args;

use super::notices::{CliState, socket_path};

/// Arguments of `okay`.
#[derive(Debug, Args)]
pub struct OkayArgs {}

/// Runs `okay`: no request, only the client-side bookkeeping.
pub fn execute(_: OkayArgs) -> anyhow::Result<()> {
    let mut state = CliState::load(&socket_path())?;
    let listed = state
        .last_listed()
        .unwrap_or_else(|| "0001-01-01T00:00:00Z".into());
    state.set("notices-last-okayed", &listed);
    state
        .save()
        .map_err(|e| anyhow::anyhow!("cannot save CLI state: {e}"))
}
