//! `changes [service]`: the daemon's recent changes, oldest first.

use clap::Args;
use cobble_client::types::ChangeInfo;
use cobble_client::{ChangeSelector, Client};

use super::format::tabulate;
use super::structured::{self, Fields, Format, Value};
use super::times::TimeFormatter;
use super::{Output, program_name, write_all};

/// Arguments of `changes`.
#[derive(Debug, Args)]
pub(super) struct ChangesArgs {
    /// Display absolute times (in RFC 3339 format). Otherwise, display relative times up to
    /// 60 days, then YYYY-MM-DD.
    #[arg(long)]
    abs_time: bool,
    /// Output format
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Only changes that concern this service.
    #[arg(value_name = "service")]
    service: Option<String>,
}

/// Runs `changes`.
pub(super) async fn execute(
    args: ChangesArgs,
    client: &Client,
    out: &mut Output,
) -> anyhow::Result<()> {
    let service = args.service.as_deref().unwrap_or_default();
    if !service.is_empty() && service.bytes().all(|b| b.is_ascii_digit()) {
        let program = program_name();
        anyhow::bail!(
            "'{program} changes' command expects a service name, try '{program} tasks {service}'"
        );
    }
    if service == "everything" {
        return write_all(out, "Yes, yes it does.\n");
    }
    let mut changes = client
        .changes(ChangeSelector::All, args.service.as_deref())
        .await?;
    sort_by_spawn_time(&mut changes);
    if !args.format.is_text() {
        let list = changes
            .iter()
            .map(|c| structured::change(c, args.format))
            .collect();
        let value = Fields::new().field("changes", Value::Seq(list)).build();
        return args.format.write(out, &value);
    }
    if changes.is_empty() {
        // Not an error: Pebble says so on stderr and exits 0.
        eprintln!("no changes found");
        return Ok(());
    }
    write_all(out, &table(changes, &TimeFormatter::new(args.abs_time)))
}

/// `ID  Status  Spawn  Ready  Summary`, sorted by spawn time, followed by a blank line.
fn table(mut changes: Vec<ChangeInfo>, times: &TimeFormatter) -> String {
    sort_by_spawn_time(&mut changes);
    let mut rows = vec![vec![
        "ID".to_string(),
        "Status".into(),
        "Spawn".into(),
        "Ready".into(),
        "Summary".into(),
    ]];
    for change in changes {
        rows.push(vec![
            change.id,
            change.status,
            times.format(&change.spawn_time),
            change
                .ready_time
                .as_deref()
                .map_or_else(|| "-".to_string(), |t| times.format(t)),
            change.summary,
        ]);
    }
    let mut text = tabulate(&rows);
    text.push('\n');
    text
}

/// Orders changes by spawn time, the only order the daemon's map-ordered list can be shown in.
pub(super) fn sort_by_spawn_time(changes: &mut [ChangeInfo]) {
    changes.sort_by_key(|c| c.spawn_time.parse::<jiff::Timestamp>().ok());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(id: &str, spawn: &str, ready: Option<&str>, summary: &str) -> ChangeInfo {
        ChangeInfo {
            id: id.into(),
            kind: "start".into(),
            summary: summary.into(),
            status: "Done".into(),
            tasks: vec![],
            ready: ready.is_some(),
            err: String::new(),
            spawn_time: spawn.into(),
            ready_time: ready.map(Into::into),
            data: None,
        }
    }

    #[test]
    fn sorted_table_with_trailing_blank_line() {
        let changes = vec![
            change("2", "2016-04-21T01:02:03Z", None, "Start service \"srv2\""),
            change(
                "10",
                "2015-02-21T01:02:03+01:00",
                Some("2015-02-21T01:02:04+01:00"),
                "Autostart service \"srv1\" and 1 more",
            ),
        ];
        let times = TimeFormatter::at(true, jiff::ZonedDateTime::now());
        assert_eq!(
            table(changes, &times),
            "ID   Status  Spawn                      Ready                      Summary\n\
             10   Done    2015-02-21T01:02:03+01:00  2015-02-21T01:02:04+01:00  Autostart service \"srv1\" and 1 more\n\
             2    Done    2016-04-21T01:02:03Z       -                          Start service \"srv2\"\n\
             \n"
        );
    }
}
