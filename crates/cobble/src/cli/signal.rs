//! `signal <SIGNAL> <service>...`: sends a signal to running services.

use clap::Args;
use cobble_client::Client;

use super::Output;

/// Arguments of `signal`.
#[derive(Debug, Args)]
pub(super) struct SignalArgs {
    /// The signal, in upper case, with or without `SIG` (`HUP`, `SIGTERM`).
    #[arg(value_name = "SIGNAL")]
    signal: String,
    /// The services to signal.
    #[arg(required = true, value_name = "service")]
    services: Vec<String>,
}

/// Runs `signal`.
pub(super) async fn execute(
    args: SignalArgs,
    client: &Client,
    _out: &mut Output,
) -> anyhow::Result<()> {
    let signal = signal_name(&args.signal)?;
    client.send_signal(&signal, &args.services).await?;
    Ok(())
}

/// Checks the case and adds the `SIG` prefix, as Pebble's CLI does before asking the daemon.
fn signal_name(given: &str) -> anyhow::Result<String> {
    if given.to_uppercase() != given {
        anyhow::bail!("signal name must be uppercase, for example HUP");
    }
    Ok(if given.starts_with("SIG") {
        given.to_string()
    } else {
        format!("SIG{given}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_is_added_once() {
        assert_eq!(signal_name("HUP").unwrap(), "SIGHUP");
        assert_eq!(signal_name("SIGTERM").unwrap(), "SIGTERM");
    }

    #[test]
    fn lower_case_is_refused() {
        assert_eq!(
            signal_name("hup").unwrap_err().to_string(),
            "signal name must be uppercase, for example HUP"
        );
    }
}
