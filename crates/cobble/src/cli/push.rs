//! `push <local-path> <remote-path>`: copies a local file to the daemon's side.

use clap::Args;
use cobble_client::{Client, PushOptions};

use super::blocking_io::BlockingReader;
use super::{Output, go_path_error};

/// Who should own what `push` and `mkdir` create (`--uid`/`--user`/`--gid`/`--group`).
#[derive(Debug, Args)]
pub(super) struct OwnerArgs {
    /// Use specified user ID
    #[arg(long = "uid", value_name = "uid")]
    pub user_id: Option<u32>,
    /// Use specified username
    #[arg(long, value_name = "user", default_value = "")]
    pub user: String,
    /// Use specified group ID
    #[arg(long = "gid", value_name = "gid")]
    pub group_id: Option<u32>,
    /// Use specified group name
    #[arg(long, value_name = "group", default_value = "")]
    pub group: String,
}

/// Arguments of `push`.
#[derive(Debug, Args)]
pub(super) struct PushArgs {
    /// Create parent directories for the file
    #[arg(short = 'p')]
    make_dirs: bool,
    /// Set permissions for the file (e.g. 0644)
    #[arg(short = 'm', value_name = "mode")]
    permissions: Option<String>,
    #[command(flatten)]
    owner: OwnerArgs,
    /// The file to send.
    #[arg(value_name = "local-path")]
    local_path: String,
    /// Where to write it on the daemon's side.
    #[arg(value_name = "remote-path")]
    remote_path: String,
}

/// Runs `push`.
pub(super) async fn execute(
    args: PushArgs,
    client: &Client,
    _out: &mut Output,
) -> anyhow::Result<()> {
    let file = std::fs::File::open(&args.local_path)
        .map_err(|e| anyhow::anyhow!(go_path_error("open", &args.local_path, &e)))?;
    let permissions = match &args.permissions {
        Some(text) => parse_mode(text, "file")?,
        None => {
            use std::os::unix::fs::PermissionsExt;
            let metadata = file
                .metadata()
                .map_err(|e| anyhow::anyhow!(go_path_error("stat", &args.local_path, &e)))?;
            metadata.permissions().mode() & 0o777
        }
    };
    let options = PushOptions {
        path: args.remote_path,
        make_dirs: args.make_dirs,
        permissions: Some(permissions),
        user_id: args.owner.user_id,
        user: args.owner.user,
        group_id: args.owner.group_id,
        group: args.owner.group,
    };
    client.push(&options, BlockingReader(file)).await?;
    Ok(())
}

/// An octal mode given on the command line (`644` or `0644`).
pub(super) fn parse_mode(text: &str, what: &str) -> anyhow::Result<u32> {
    u32::from_str_radix(text, 8)
        .ok()
        .filter(|mode| *mode <= 0o7777)
        .ok_or_else(|| anyhow::anyhow!("invalid mode for {what}: {text:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_are_octal() {
        assert_eq!(parse_mode("0644", "file").unwrap(), 0o644);
        assert_eq!(parse_mode("755", "file").unwrap(), 0o755);
        assert_eq!(
            parse_mode("9", "directory").unwrap_err().to_string(),
            "invalid mode for directory: \"9\""
        );
    }
}
