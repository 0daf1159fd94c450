//! `pull <remote-path> <local-path>`: copies a file from the daemon's side.

use clap::Args;
use cobble_client::Client;

use super::blocking_io::BlockingWriter;
use super::{Output, go_path_error};

/// Arguments of `pull`.
#[derive(Debug, Args)]
pub(super) struct PullArgs {
    /// The file to fetch.
    #[arg(value_name = "remote-path")]
    remote_path: String,
    /// Where to write it locally.
    #[arg(value_name = "local-path")]
    local_path: String,
}

/// Runs `pull`. On failure the local file is removed, as it may hold part of the content.
pub(super) async fn execute(
    args: PullArgs,
    client: &Client,
    _out: &mut Output,
) -> anyhow::Result<()> {
    let file = std::fs::File::create(&args.local_path)
        .map_err(|e| anyhow::anyhow!(go_path_error("open", &args.local_path, &e)))?;
    let mut file = BlockingWriter(file);
    match client.pull(&args.remote_path, &mut file).await {
        Ok(_) => Ok(()),
        Err(e) => {
            drop(file);
            let _ = std::fs::remove_file(&args.local_path);
            Err(e.into())
        }
    }
}
