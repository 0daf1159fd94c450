//! `health [--level=alive|ready] [--format=text|json] [check...]`: whether the checks are
//! healthy; exits 1 when they are not.

use std::io::Write;

use clap::{Args, ValueEnum};
use cobble_client::Client;

use super::{Output, write_all};

/// How `health` prints its result.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// `healthy` or `unhealthy`.
    #[default]
    Text,
    /// `{"healthy":true}`.
    Json,
}

/// Arguments of `health`.
#[derive(Debug, Args)]
pub struct HealthArgs {
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Check level to filter for.
    #[arg(long, value_parser = ["alive", "ready"])]
    level: Option<String>,
    /// Only these checks (all when none are given).
    #[arg(value_name = "check")]
    checks: Vec<String>,
}

/// Runs `health`.
pub async fn execute(args: HealthArgs, client: &Client, out: &mut Output) -> anyhow::Result<()> {
    let healthy = client
        .health(args.level.as_deref().unwrap_or(""), &args.checks)
        .await?;
    let text = match args.format {
        Format::Text if healthy => "healthy\n".to_owned(),
        Format::Text => "unhealthy\n".to_owned(),
        Format::Json => format!("{{\"healthy\":{healthy}}}\n"),
    };
    write_all(out, &text)?;
    if !healthy {
        // Pebble's exit status for "not healthy"; nothing more to say on stderr.
        out.flush()?;
        std::process::exit(1);
    }
    Ok(())
}
