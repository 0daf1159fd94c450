//! `add <label> <layer-path>`: sends a layer file to the daemon.

use clap::Args;
use cobble_client::Client;

use super::format::quote;
use super::{Output, go_path_error, write_all};

/// Arguments of `add`.
#[derive(Debug, Args)]
pub(super) struct AddArgs {
    /// Combine the new layer with an existing layer that has the given label (default is to
    /// append).
    #[arg(long)]
    combine: bool,
    /// Allow appending a new layer inside an existing subdirectory.
    #[arg(long)]
    inner: bool,
    /// The layer's label.
    #[arg(value_name = "label")]
    label: String,
    /// The path of the layer's YAML file.
    #[arg(value_name = "layer-path")]
    layer_path: String,
}

/// Runs `add`.
pub(super) async fn execute(
    args: AddArgs,
    client: &Client,
    out: &mut Output,
) -> anyhow::Result<()> {
    let yaml = std::fs::read_to_string(&args.layer_path)
        .map_err(|e| anyhow::anyhow!(go_path_error("open", &args.layer_path, &e)))?;
    client
        .add_layer(&args.label, &yaml, args.combine, args.inner)
        .await?;
    write_all(
        out,
        &format!(
            "Layer {} added successfully from {}\n",
            quote(&args.label),
            quote(&args.layer_path)
        ),
    )
}
