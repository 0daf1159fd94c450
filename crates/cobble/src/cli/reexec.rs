//! `reexec [--binary PATH]` (cobble's own): re-executes the daemon in place with PATH, or with
//! the binary it was started from as it is on disk now, keeping its process ID, its listeners
//! and its state; prints both versions once the new program has taken over.

use clap::Args;
use cobble_client::Client;

use super::{Output, write_all};

/// Arguments of `reexec`.
#[derive(Debug, Args)]
pub(super) struct ReexecArgs {
    /// The program to re-execute the daemon with (default: the binary the daemon was started
    /// from, as it is on disk now)
    #[arg(long, value_name = "PATH")]
    binary: Option<std::path::PathBuf>,
}

/// Runs `reexec`. A relative PATH is taken from the current directory, as the user means it,
/// not the daemon's.
pub(super) async fn execute(
    args: ReexecArgs,
    client: &Client,
    out: &mut Output,
) -> anyhow::Result<()> {
    let binary = match args.binary {
        Some(path) if path.is_relative() => std::env::current_dir()?.join(path),
        Some(path) => path,
        None => std::path::PathBuf::new(),
    };
    let result = client.reexec(&binary.to_string_lossy()).await?;
    write_all(
        out,
        &format!(
            "Re-executed daemon (pid {}) as {}: cobble {} (was {}).\n",
            result.pid, result.binary, result.new_version, result.old_version
        ),
    )
}
