//! `version [--client] [--format=text|json|yaml]` (and the global `--version`): the client's
//! and the server's versions.
//!
//! The versions Pebble's lines give are the Pebble release cobble implements
//! ([`PEBBLE_VERSION`]), so that scripts comparing them with Pebble releases keep working;
//! cobble's own version follows on a line of its own in text, after Pebble's two. JSON and
//! YAML are exactly Pebble's object (`client`, and `server` when it answered): a script
//! comparing the object or validating it against a schema sees no other key. cobble's own
//! version is in the text form and in `system-info`'s `cobble-version`.

use clap::Args;
use cobble_client::{COBBLE_VERSION, Client, PEBBLE_VERSION};

use super::format::tabulate;
use super::structured::{Fields, Format};
use super::{Output, write_all};

/// Arguments of `version`.
#[derive(Debug, Args)]
pub(super) struct VersionArgs {
    /// Output format
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// Only display the client version
    #[arg(long)]
    pub client: bool,
}

/// Runs `version`. In text, the server is `-` when the daemon cannot be asked, which is not
/// an error; in JSON and YAML it is left out, and the error follows the output, as in Pebble.
pub(super) async fn execute(
    args: VersionArgs,
    client: &Client,
    out: &mut Output,
) -> anyhow::Result<()> {
    let info = client.system_info().await;
    let (server, server_cobble) = match &info {
        Ok(info) => (
            Some(info.version.as_str()),
            Some(info.cobble_version.as_str()),
        ),
        Err(_) => (None, None),
    };
    if args.format.is_text() {
        let mut cobble = COBBLE_VERSION.to_owned();
        if let Some(theirs) = server_cobble.filter(|v| !v.is_empty() && *v != COBBLE_VERSION) {
            cobble.push_str(&format!(" (server {theirs})"));
        }
        let rows = [
            vec!["client".to_string(), PEBBLE_VERSION.to_string()],
            vec!["server".to_string(), server.unwrap_or("-").to_string()],
            vec!["cobble".to_string(), cobble],
        ];
        return write_all(out, &tabulate(&rows));
    }
    let value = Fields::new()
        .str("client", PEBBLE_VERSION)
        .str_omitempty("server", server.unwrap_or_default())
        .build();
    args.format.write(out, &value)?;
    info.map(drop).map_err(Into::into)
}

/// `version --client` and the global `--version`: the client's version alone, without
/// contacting the daemon (`{"client": ...}` in JSON and YAML, as Pebble prints it).
pub(super) fn print_client_only(format: Format) -> anyhow::Result<()> {
    let mut out = std::io::BufWriter::new(std::io::stdout());
    if format.is_text() {
        write_all(&mut out, &format!("{PEBBLE_VERSION}\n"))?;
    } else {
        let value = Fields::new().str("client", PEBBLE_VERSION).build();
        format.write(&mut out, &value)?;
    }
    std::io::Write::flush(&mut out)?;
    Ok(())
}
