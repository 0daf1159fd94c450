//! `logs [<service>...]`: service output, in Pebble's layout or as JSON lines.

use std::io::Write;

use clap::Args;
use cobble_client::types::{LogEntry, LogEntryRef};
use cobble_client::{Client, LogsOptions};

use super::Output;

/// Arguments of `logs`.
#[derive(Debug, Args)]
pub(super) struct LogsArgs {
    /// Follow (tail) logs for given services until Ctrl-C is pressed. If no services are
    /// specified, show logs from all services running when the command starts.
    #[arg(short = 'f', long = "follow")]
    follow: bool,
    /// Output format: "text" (default) or "json" (JSON lines).
    #[arg(long, value_name = "format", default_value = "")]
    format: String,
    /// Number of logs to show (before following); defaults to 30. If 'all', show all
    /// buffered logs.
    #[arg(short = 'n', value_name = "n", default_value = "")]
    n: String,
    /// The services whose logs to show (all of them by default).
    #[arg(value_name = "service")]
    services: Vec<String>,
}

#[derive(Clone, Copy)]
enum Format {
    Text,
    Json,
}

/// Runs `logs`.
pub(super) async fn execute(
    args: LogsArgs,
    client: &Client,
    out: &mut Output,
) -> anyhow::Result<()> {
    let n = parse_n(&args.n)?;
    let format = match args.format.as_str() {
        "" | "text" => Format::Text,
        "json" => Format::Json,
        other => anyhow::bail!(
            "invalid output format (expected \"json\" or \"text\", not {})",
            super::format::quote(other)
        ),
    };
    let options = LogsOptions {
        services: args.services,
        n,
        follow: args.follow,
    };
    let follow = args.follow;
    let mut line = String::new();
    let write = |entry: LogEntry| -> anyhow::Result<()> {
        line.clear();
        match format {
            Format::Text => {
                line.push_str(&text_time(&entry.time));
                line.push_str(" [");
                line.push_str(&entry.service);
                line.push_str("] ");
                line.push_str(&entry.message);
            }
            Format::Json => {
                let json = serde_json::to_string(&LogEntryRef {
                    time: &entry.time,
                    service: &entry.service,
                    message: &entry.message,
                })?;
                line.push_str(&json);
            }
        }
        line.push('\n');
        out.write_all(line.as_bytes())?;
        if follow {
            out.flush()?;
        }
        Ok(())
    };
    if follow {
        // Ctrl-C ends a follow quietly, as it does Pebble's.
        tokio::select! {
            result = client.logs(&options, write) => result,
            _ = tokio::signal::ctrl_c() => Ok(()),
        }
    } else {
        client.logs(&options, write).await
    }
}

/// `-n`: a count, or `all`; 30 when unset, following or not, as Pebble's CLI asks.
fn parse_n(text: &str) -> anyhow::Result<Option<i64>> {
    match text {
        "" => Ok(Some(30)),
        "all" => Ok(Some(-1)),
        _ => match text.parse::<i64>() {
            Ok(n) if n >= 0 => Ok(Some(n)),
            _ => anyhow::bail!(
                "expected n to be a non-negative integer or \"all\", not {}",
                super::format::quote(text)
            ),
        },
    }
}

/// The line's time with exactly three fractional digits (`2021-04-23T01:28:52.660Z`), as
/// Pebble prints it; a time that does not parse is printed as it came.
fn text_time(wire: &str) -> String {
    let Ok(time) = wire.parse::<jiff::Timestamp>() else {
        return wire.to_owned();
    };
    cobble_client::time::format_utc_millis(time)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn n_is_a_count_or_all() {
        assert_eq!(parse_n("").unwrap(), Some(30));
        assert_eq!(parse_n("all").unwrap(), Some(-1));
        assert_eq!(parse_n("0").unwrap(), Some(0));
        assert_eq!(parse_n("12").unwrap(), Some(12));
        assert_eq!(
            parse_n("-1").unwrap_err().to_string(),
            "expected n to be a non-negative integer or \"all\", not \"-1\""
        );
        assert!(parse_n("x").is_err());
    }

    #[test]
    fn text_times_have_three_fractional_digits() {
        assert_eq!(
            text_time("2021-04-23T01:28:52.66Z"),
            "2021-04-23T01:28:52.660Z"
        );
        assert_eq!(
            text_time("2021-04-23T01:28:52Z"),
            "2021-04-23T01:28:52.000Z"
        );
    }
}
