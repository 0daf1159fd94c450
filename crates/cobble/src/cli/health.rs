//! `health [--level=alive|ready] [--format=text|json|yaml] [check...]`: whether the checks are
//! healthy; exits 1 when they are not.

use std::io::Write;

use clap::Args;
use cobble_client::Client;

use super::structured::{Fields, Format, Value};
use super::{Output, write_all};

/// Arguments of `health`.
#[derive(Debug, Args)]
pub(super) struct HealthArgs {
    /// Output format
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Check level to filter for
    #[arg(long, value_parser = ["alive", "ready"])]
    level: Option<String>,
    /// Only these checks (all when none are given).
    #[arg(value_name = "check")]
    checks: Vec<String>,
}

/// Runs `health`. Only the text format reports "unhealthy" in its exit status; JSON and
/// YAML say it in the output and exit 0, as in Pebble.
pub(super) async fn execute(
    args: HealthArgs,
    client: &Client,
    out: &mut Output,
) -> anyhow::Result<()> {
    let healthy = client
        .health(args.level.as_deref().unwrap_or(""), &args.checks)
        .await?;
    if !args.format.is_text() {
        let value = Fields::new().field("healthy", Value::Bool(healthy)).build();
        return args.format.write(out, &value);
    }
    write_all(out, if healthy { "healthy\n" } else { "unhealthy\n" })?;
    if !healthy {
        // Pebble's exit status for "not healthy"; nothing more to say on stderr.
        out.flush()?;
        std::process::exit(1);
    }
    Ok(())
}
