//! `version [--client]` (and the global `--version`): client and server versions.

use clap::Args;
use cobble_client::Client;

use super::format::tabulate;
use super::{CLIENT_VERSION, Output, write_all};

/// Arguments of `version`.
#[derive(Debug, Args)]
pub struct VersionArgs {
    /// Only display the client version.
    #[arg(long)]
    pub client: bool,
}

/// Prints `client  <version>` and `server  <version>`; the server is `-` when the daemon
/// cannot be asked, which is not an error.
pub async fn print_versions(client: &Client, out: &mut Output) -> anyhow::Result<()> {
    let server = client
        .system_info()
        .await
        .map_or_else(|_| "-".to_string(), |info| info.version);
    let rows = [
        vec!["client".to_string(), CLIENT_VERSION.to_string()],
        vec!["server".to_string(), server],
    ];
    write_all(out, &tabulate(&rows))
}

/// `version --client`: the client version alone, without contacting the daemon.
pub fn print_client_only() -> anyhow::Result<()> {
    let mut out = std::io::stdout();
    write_all(&mut out, &format!("{CLIENT_VERSION}\n"))
}
