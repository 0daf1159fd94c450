//! `mkdir [-p] [-m mode] <path>`: creates a directory on the daemon's side.

use clap::Args;
use cobble_client::{Client, MakeDirOptions};

use super::Output;
use super::push::{OwnerArgs, parse_mode};

/// Arguments of `mkdir`.
#[derive(Debug, Args)]
pub(super) struct MkdirArgs {
    /// Create parent directories as needed
    #[arg(short = 'p')]
    make_parents: bool,
    /// Set permissions (e.g. 0644)
    #[arg(short = 'm', value_name = "mode")]
    permissions: Option<String>,
    #[command(flatten)]
    owner: OwnerArgs,
    /// The directory to create.
    #[arg(value_name = "path")]
    path: String,
}

/// Runs `mkdir`.
pub(super) async fn execute(
    args: MkdirArgs,
    client: &Client,
    _out: &mut Output,
) -> anyhow::Result<()> {
    let permissions = args
        .permissions
        .as_deref()
        .map(|text| parse_mode(text, "directory"))
        .transpose()?
        .filter(|mode| *mode != 0);
    let options = MakeDirOptions {
        path: args.path,
        make_parents: args.make_parents,
        permissions,
        user_id: args.owner.user_id,
        user: args.owner.user,
        group_id: args.owner.group_id,
        group: args.owner.group,
    };
    client.make_dir(&options).await?;
    Ok(())
}
