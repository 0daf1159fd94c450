//! `okay [--warnings]`: acknowledge the notices `notices` and the warnings `warnings` listed,
//! so that they list only newer ones; with `--warnings`, the warnings alone.

use clap::Args;

use super::notices::{
    CliState, NOTICES_LAST_LISTED, NOTICES_LAST_OKAYED, WARNINGS_LAST_LISTED, WARNINGS_LAST_OKAYED,
    socket_path,
};
use super::program_name;

/// Arguments of `okay`.
#[derive(Debug, Args)]
pub(super) struct OkayArgs {
    /// Only acknowledge warnings, not other notices
    #[arg(long)]
    warnings: bool,
}

/// Runs `okay`: no request, only the client-side bookkeeping. Having nothing to acknowledge
/// is an error, in Pebble's words.
pub(super) fn execute(args: OkayArgs) -> anyhow::Result<()> {
    let mut state = CliState::load(&socket_path())?;
    let okayed_warnings = match state.time(WARNINGS_LAST_LISTED) {
        Some(listed) => {
            state.set(WARNINGS_LAST_OKAYED, &listed);
            true
        }
        None => false,
    };
    let okayed_notices = match state.time(NOTICES_LAST_LISTED).filter(|_| !args.warnings) {
        Some(listed) => {
            state.set(NOTICES_LAST_OKAYED, &listed);
            true
        }
        None => false,
    };
    state.touch();
    state
        .save()
        .map_err(|e| anyhow::anyhow!("cannot save CLI state: {e}"))?;
    let program = program_name();
    if args.warnings && !okayed_warnings {
        anyhow::bail!("no warnings have been listed; try '{program} warnings'");
    }
    if !args.warnings && !okayed_notices && !okayed_warnings {
        anyhow::bail!(
            "no notices or warnings have been listed; try '{program} notices' or '{program} warnings'"
        );
    }
    Ok(())
}
