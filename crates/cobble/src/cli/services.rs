//! `services [service...]`: the status table of the plan's services.

use clap::Args;
use cobble_client::Client;
use cobble_client::types::ServiceInfo;

use super::format::tabulate;
use super::structured::{Fields, Format, Value, go_time};
use super::times::TimeFormatter;
use super::{Output, write_all};

/// Arguments of `services`.
#[derive(Debug, Args)]
pub(super) struct ServicesArgs {
    /// Display absolute times (in RFC 3339 format). Otherwise, display relative times up to
    /// 60 days, then YYYY-MM-DD.
    #[arg(long)]
    abs_time: bool,
    /// Output format
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Only these services (all when none are given).
    #[arg(value_name = "service")]
    services: Vec<String>,
}

/// Runs `services`.
pub(super) async fn execute(
    args: ServicesArgs,
    client: &Client,
    out: &mut Output,
) -> anyhow::Result<()> {
    let services = client.services(&args.services).await?;
    if !args.format.is_text() {
        return args.format.write(out, &structured(&services));
    }
    if services.is_empty() {
        // Not an error, and nothing on stdout: Pebble says it on stderr and exits 0.
        if args.services.is_empty() {
            eprintln!("Plan has no services.");
        } else {
            eprintln!("No matching services.");
        }
        return Ok(());
    }
    write_all(out, &table(&services, &TimeFormatter::new(args.abs_time)))
}

/// `{"services": {name: service}}`, each as the Go client's `ServiceInfo`, with cobble's
/// `reason` after Pebble's fields when there is one.
fn structured(services: &[ServiceInfo]) -> Value {
    let mut by_name: Vec<(String, Value)> = services
        .iter()
        .map(|service| {
            let value = Fields::new()
                .str("name", &service.name)
                .str("startup", &service.startup)
                .str("current", &service.current)
                .some(
                    "current-since",
                    service
                        .current_since
                        .as_deref()
                        .map(|t| Value::Time(go_time(t))),
                )
                .some(
                    "scheduled",
                    service
                        .scheduled
                        .as_deref()
                        .map(|t| Value::Time(go_time(t))),
                )
                .some(
                    "reason",
                    service.reason.as_deref().map(|r| Value::Str(r.to_owned())),
                )
                .build();
            (service.name.clone(), value)
        })
        .collect();
    by_name.sort_by(|a, b| a.0.cmp(&b.0));
    Fields::new().field("services", Value::Map(by_name)).build()
}

/// The text table: `Service  Startup  Current  Since`, `-` for a service never started.
/// When a listed service has a schedule, a `Scheduled` column gives each one's next run (`-`
/// for the others), in the format of `Since`. When cobble has something to say about why a
/// service is not simply running, a `Notes` column carries it (`cobble why` says more).
/// Without either, the table is exactly Pebble's.
fn table(services: &[ServiceInfo], times: &TimeFormatter) -> String {
    let notes = services.iter().any(|s| s.reason.is_some());
    let scheduled = services.iter().any(|s| s.scheduled.is_some());
    let mut header = vec![
        "Service".to_string(),
        "Startup".into(),
        "Current".into(),
        "Since".into(),
    ];
    if scheduled {
        header.push("Scheduled".into());
    }
    if notes {
        header.push("Notes".into());
    }
    let mut rows = vec![header];
    for service in services {
        let since = service
            .current_since
            .as_deref()
            .map_or_else(|| "-".to_string(), |t| times.format(t));
        let mut row = vec![
            service.name.clone(),
            service.startup.clone(),
            service.current.clone(),
            since,
        ];
        if scheduled {
            row.push(
                service
                    .scheduled
                    .as_deref()
                    .map_or_else(|| "-".to_string(), |t| times.format(t)),
            );
        }
        if notes {
            row.push(service.reason.clone().unwrap_or_else(|| "-".into()));
        }
        rows.push(row);
    }
    tabulate(&rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(name: &str, startup: &str, current: &str, since: Option<&str>) -> ServiceInfo {
        ServiceInfo {
            name: name.into(),
            startup: startup.into(),
            current: current.into(),
            current_since: since.map(Into::into),
            scheduled: None,
            reason: None,
            details: None,
        }
    }

    #[test]
    fn table_with_absolute_times() {
        let services = [
            service(
                "srv1",
                "enabled",
                "active",
                Some("2024-06-28T02:20:03.346+00:00"),
            ),
            service("srv2", "disabled", "inactive", None),
        ];
        let times = TimeFormatter::at(true, jiff::ZonedDateTime::now());
        assert_eq!(
            table(&services, &times),
            "Service  Startup   Current   Since\n\
             srv1     enabled   active    2024-06-28T02:20:03Z\n\
             srv2     disabled  inactive  -\n"
        );
    }

    #[test]
    fn a_scheduled_column_only_when_a_listed_service_has_a_schedule() {
        let mut job = service("job", "disabled", "inactive", None);
        job.scheduled = Some("2024-06-28T02:21:00+00:00".into());
        let services = [
            job,
            service(
                "web",
                "enabled",
                "active",
                Some("2024-06-28T02:20:03.346+00:00"),
            ),
        ];
        let times = TimeFormatter::at(true, jiff::ZonedDateTime::now());
        assert_eq!(
            table(&services, &times),
            "Service  Startup   Current   Since                 Scheduled\n\
             job      disabled  inactive  -                     2024-06-28T02:21:00Z\n\
             web      enabled   active    2024-06-28T02:20:03Z  -\n"
        );
        // Relative, as Since is.
        let now = "2024-06-28T02:20:30+00:00[UTC]".parse().unwrap();
        let relative = table(&services, &TimeFormatter::at(false, now));
        assert!(relative.contains("Scheduled"), "{relative}");
        assert!(!relative.contains("2024-06-28T02:21:00Z"), "{relative}");
        assert!(!table(&services[1..], &times).contains("Scheduled"));
    }
}
