//! `debug`: Pebble's hidden home for debug subcommands. Pebble v1.32.1 registers none, so it
//! does nothing and succeeds.

use clap::Args;

/// What `help debug` says beyond the summary.
pub(super) const LONG_ABOUT: &str = "Holds commands for debugging the daemon. There are none \
    yet (as in Pebble v1.32.1), so it does nothing.";

/// Arguments of `debug`: whatever follows is ignored, as Pebble ignores it.
#[derive(Debug, Args)]
pub(super) struct DebugArgs {
    #[arg(hide = true, num_args = 0.., trailing_var_arg = true, allow_hyphen_values = true)]
    rest: Vec<String>,
}

/// Runs `debug`: nothing to do.
pub(super) fn execute(_: DebugArgs) -> anyhow::Result<()> {
    Ok(())
}
