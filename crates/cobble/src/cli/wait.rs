//! What the service actions share: send the action, then follow its change to the end (or
//! print its ID with `--no-wait`).

use clap::Args;
use cobble_client::Client;
use cobble_client::types::ChangeInfo;

use super::{Output, write_all};

/// The flag every service action takes.
#[derive(Debug, Args)]
pub(super) struct WaitArgs {
    /// Do not wait for the operation to finish but just print the change id.
    #[arg(long)]
    pub no_wait: bool,
}

/// Posts a service action and, unless `--no-wait`, waits for its change; a change that ends
/// in error fails with the change's `err` text, as Pebble's CLI does.
pub(super) async fn service_action(
    client: &Client,
    out: &mut Output,
    action: &str,
    names: &[String],
    args: WaitArgs,
) -> anyhow::Result<()> {
    let change_id = client.services_action(action, names).await?;
    if args.no_wait {
        return write_all(out, &format!("{change_id}\n"));
    }
    wait_for_change(client, &change_id).await?;
    Ok(())
}

/// Waits for a change to be ready. The first Ctrl-C aborts the change (and waiting goes on
/// until the abort has played out), as in Pebble.
pub(super) async fn wait_for_change(
    client: &Client,
    change_id: &str,
) -> anyhow::Result<ChangeInfo> {
    let wait = client.wait_change(change_id, None);
    tokio::pin!(wait);
    let mut aborted = false;
    let change = loop {
        tokio::select! {
            change = &mut wait => break change?,
            interrupted = tokio::signal::ctrl_c(), if !aborted => {
                aborted = true;
                if interrupted.is_ok()
                    && let Err(err) = client.abort_change(change_id).await
                {
                    eprintln!("{err}");
                }
            }
        }
    };
    if change.status == "Done" {
        return Ok(change);
    }
    if !change.err.is_empty() {
        anyhow::bail!("{}", change.err);
    }
    anyhow::bail!(
        "change finished in status {:?} with no error message",
        change.status
    )
}
