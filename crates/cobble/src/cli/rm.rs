//! `rm [-r] <path>`: removes a file or directory on the daemon's side.

use clap::Args;
use cobble_client::Client;

use super::Output;

/// Arguments of `rm`.
#[derive(Debug, Args)]
pub(super) struct RmArgs {
    /// Remove all files and directories recursively in the specified path
    #[arg(short = 'r')]
    recursive: bool,
    /// The file or directory to remove.
    #[arg(value_name = "path")]
    path: String,
}

/// Runs `rm`.
pub(super) async fn execute(
    args: RmArgs,
    client: &Client,
    _out: &mut Output,
) -> anyhow::Result<()> {
    client.remove_path(&args.path, args.recursive).await?;
    Ok(())
}
