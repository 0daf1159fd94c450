//! `GET /v1/metrics`: service and check metrics in the OpenMetrics text format Pebble writes,
//! and cobble's log forwarding counters, rendered in one place.
//!
//! Each sample is written as its own family, `# HELP`, `# TYPE`, the sample, then an empty
//! line, in Pebble's order: every service this daemon has started (sorted; one never started
//! is not listed) with whether it is active and its start count, then every check (sorted)
//! with whether it is up (left out while the check is inactive) and its lifetime success and
//! failure counts, followed by cobble's count of failure-action firings. Then what each
//! started service uses (memory, CPU time, processes, open files: read on demand, at most
//! once a second, see `services::accounting`). Last come the counters of each log target:
//! lines sent, dropped and queued.

use std::fmt::Write;

use cobble_plan::Plan;

use crate::checks::{CheckManager, CheckStatus, CheckView};
use crate::layers::PlanManager;
use crate::logs::forward::{LogForwarder, TargetStats};
use crate::process::Usage;
use crate::services::machine::Status;
use crate::services::scheduler::{ScheduleStatuses, Scheduler};
use crate::services::{ServiceManager, ServiceStatus};

/// The `/v1/metrics` body, from what the managers report now.
pub(crate) async fn current(
    plan: &PlanManager,
    services: &ServiceManager,
    schedules: &Scheduler,
    checks: &CheckManager,
    forward: &LogForwarder,
) -> String {
    let plan = plan.plan();
    let started = services.statuses(Vec::new(), false).await;
    let usage = services.usage(&started).await;
    let checks = checks.checks().await;
    let schedules = schedules.statuses_for(&plan).await;
    render(
        &plan,
        &started,
        &usage,
        &checks,
        &schedules,
        &forward.stats(),
    )
}

/// The kind of a metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MetricType {
    /// A monotonic count.
    Counter,
    /// A value that goes up and down.
    Gauge,
}

impl MetricType {
    fn as_str(self) -> &'static str {
        match self {
            MetricType::Counter => "counter",
            MetricType::Gauge => "gauge",
        }
    }
}

/// Appends one metric family with a single sample.
fn write_metric(
    out: &mut String,
    name: &str,
    kind: MetricType,
    help: &str,
    labels: &[(&str, &str)],
    value: impl std::fmt::Display,
) {
    if !help.is_empty() {
        let _ = writeln!(out, "# HELP {name} {help}");
    }
    let _ = writeln!(out, "# TYPE {name} {}", kind.as_str());
    out.push_str(name);
    if !labels.is_empty() {
        out.push('{');
        for (i, (key, value)) in labels.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let _ = write!(out, "{key}=\"{}\"", escape_label(value));
        }
        out.push('}');
    }
    let _ = writeln!(out, " {value}");
    out.push('\n');
}

/// Escapes a label value as Go's `%q` does for the characters that can occur in names.
fn escape_label(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c => out.push(c),
        }
    }
    out
}

/// The whole `/v1/metrics` body. `services` are the services this daemon has started; those
/// still in the plan are listed. `usage` is what each of `services` uses, in the same order
/// (none when empty). `forwarding` are the counts of the plan's log targets.
pub(crate) fn render(
    plan: &Plan,
    services: &[ServiceStatus],
    usage: &[Usage],
    checks: &[CheckView],
    schedules: &ScheduleStatuses,
    forwarding: &[TargetStats],
) -> String {
    let mut out = String::new();
    let mut services: Vec<(&ServiceStatus, Option<&Usage>)> = services
        .iter()
        .enumerate()
        .filter(|(_, s)| plan.services.contains_key(&s.name))
        .map(|(i, s)| (s, usage.get(i)))
        .collect();
    services.sort_by(|a, b| a.0.name.cmp(&b.0.name));
    for &(service, _) in &services {
        let labels = [("service", service.name.as_str())];
        write_metric(
            &mut out,
            "pebble_service_active",
            MetricType::Gauge,
            "Whether the service is currently active (1) or not (0)",
            &labels,
            i64::from(service.current == Status::Active),
        );
        write_metric(
            &mut out,
            "pebble_service_start_count",
            MetricType::Counter,
            "Number of times the service has started",
            &labels,
            i64::try_from(service.start_count).unwrap_or(i64::MAX),
        );
    }
    let mut checks: Vec<&CheckView> = checks.iter().collect();
    checks.sort_by(|a, b| a.name.cmp(&b.name));
    for check in checks {
        let labels = [("check", check.name.as_str())];
        if check.status != CheckStatus::Inactive {
            write_metric(
                &mut out,
                "pebble_check_up",
                MetricType::Gauge,
                "Whether the health check is up (1) or not (0)",
                &labels,
                i64::from(check.status == CheckStatus::Up),
            );
        }
        write_metric(
            &mut out,
            "pebble_check_success_count",
            MetricType::Counter,
            "Number of times the check has succeeded",
            &labels,
            i64::try_from(check.success_count).unwrap_or(i64::MAX),
        );
        write_metric(
            &mut out,
            "pebble_check_failure_count",
            MetricType::Counter,
            "Number of times the check has failed",
            &labels,
            i64::try_from(check.failure_count).unwrap_or(i64::MAX),
        );
        // cobble extension: every firing of the failure action, including re-firings.
        write_metric(
            &mut out,
            "cobble_check_action_count",
            MetricType::Counter,
            "Number of times the check's failure action has fired",
            &labels,
            i64::try_from(check.action_count).unwrap_or(i64::MAX),
        );
    }
    for (service, usage) in services {
        if let Some(usage) = usage {
            write_usage(&mut out, &service.name, usage);
        }
    }
    write_schedules(&mut out, plan, schedules);
    write_forwarding(&mut out, forwarding);
    out
}

/// Appends the runs the schedule of each scheduled service in the plan started, and the due
/// times it skipped because a run was still going (cobble extension).
fn write_schedules(out: &mut String, plan: &Plan, schedules: &ScheduleStatuses) {
    let count = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    // By name, as the plan and the statuses are.
    for (name, status) in schedules.iter() {
        if !plan.services.contains_key(name) {
            continue;
        }
        let labels = [("service", name.as_str())];
        write_metric(
            out,
            "cobble_service_scheduled_runs_total",
            MetricType::Counter,
            "Number of times the service's schedule has started it since the daemon started",
            &labels,
            count(status.runs),
        );
        write_metric(
            out,
            "cobble_service_scheduled_skips_total",
            MetricType::Counter,
            "Number of the service's scheduled runs skipped because the run before was still going",
            &labels,
            count(status.skips),
        );
    }
}

/// Appends what one service uses (cobble extension).
fn write_usage(out: &mut String, service: &str, usage: &Usage) {
    let labels = [("service", service)];
    write_metric(
        out,
        "cobble_service_memory_bytes",
        MetricType::Gauge,
        "Resident memory of the service's processes, in bytes",
        &labels,
        usage.memory_bytes,
    );
    write_metric(
        out,
        "cobble_service_cpu_seconds_total",
        MetricType::Counter,
        "CPU time (user and system) of the service's processes since the daemon started, in seconds",
        &labels,
        format_seconds(usage.cpu),
    );
    write_metric(
        out,
        "cobble_service_processes",
        MetricType::Gauge,
        "Number of the service's processes",
        &labels,
        usage.processes,
    );
    write_metric(
        out,
        "cobble_service_open_fds",
        MetricType::Gauge,
        "Open file descriptors of the service's processes",
        &labels,
        usage.open_fds,
    );
}

/// Seconds with up to microseconds, without trailing zeros (`1.5`, `0`, `12.000001`).
fn format_seconds(time: std::time::Duration) -> String {
    let micros = time.as_micros();
    let (seconds, fraction) = (micros / 1_000_000, micros % 1_000_000);
    if fraction == 0 {
        return seconds.to_string();
    }
    let text = format!("{seconds}.{fraction:06}");
    text.trim_end_matches('0').to_owned()
}

/// Appends the forwarding counters of every target in the plan (cobble extension).
fn write_forwarding(out: &mut String, stats: &[TargetStats]) {
    let count = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    for target in stats {
        let labels = [("target", target.name.as_str())];
        write_metric(
            out,
            "cobble_log_forward_sent_total",
            MetricType::Counter,
            "Number of log lines the target's receiver accepted",
            &labels,
            count(target.sent),
        );
        write_metric(
            out,
            "cobble_log_forward_dropped_total",
            MetricType::Counter,
            "Number of log lines that will never reach the target (queue full, refused, or unsent at removal)",
            &labels,
            count(target.dropped),
        );
        write_metric(
            out,
            "cobble_log_forward_queued",
            MetricType::Gauge,
            "Number of log lines waiting to be sent to the target",
            &labels,
            count(target.queued),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cobble_plan::{CheckLevel, Service};

    fn service(name: &str, current: Status, start_count: u64) -> ServiceStatus {
        ServiceStatus {
            name: name.into(),
            current,
            since: Some("2024-01-01T00:00:00Z".into()),
            reason: None,
            start_count,
            pid: None,
            details: None,
        }
    }

    fn plan(names: &[&str]) -> Plan {
        let mut plan = Plan::default();
        for name in names {
            plan.services.insert((*name).into(), Service::default());
        }
        plan
    }

    fn check(name: &str, status: CheckStatus, ok: u64, failed: u64) -> CheckView {
        CheckView {
            name: name.into(),
            level: CheckLevel::Unset,
            startup_enabled: true,
            status,
            successes: 0,
            failures: 0,
            threshold: 3,
            change_id: None,
            prev_change_id: None,
            success_count: ok,
            failure_count: failed,
            action_count: if status == CheckStatus::Down { 2 } else { 0 },
            last_error: None,
            down_since: None,
            last_success: None,
            generation: 0,
        }
    }

    #[test]
    fn renders_pebbles_families_in_order() {
        let body = render(
            &plan(&["db", "never", "web"]),
            &[
                service("web", Status::Active, 3),
                service("gone", Status::Active, 1),
                service("db", Status::Backoff, 2),
            ],
            &[],
            &[
                check("z-off", CheckStatus::Inactive, 0, 0),
                check("a-down", CheckStatus::Down, 4, 5),
            ],
            &ScheduleStatuses::default(),
            &[],
        );
        let expected = "\
# HELP pebble_service_active Whether the service is currently active (1) or not (0)
# TYPE pebble_service_active gauge
pebble_service_active{service=\"db\"} 0

# HELP pebble_service_start_count Number of times the service has started
# TYPE pebble_service_start_count counter
pebble_service_start_count{service=\"db\"} 2

# HELP pebble_service_active Whether the service is currently active (1) or not (0)
# TYPE pebble_service_active gauge
pebble_service_active{service=\"web\"} 1

# HELP pebble_service_start_count Number of times the service has started
# TYPE pebble_service_start_count counter
pebble_service_start_count{service=\"web\"} 3

# HELP pebble_check_up Whether the health check is up (1) or not (0)
# TYPE pebble_check_up gauge
pebble_check_up{check=\"a-down\"} 0

# HELP pebble_check_success_count Number of times the check has succeeded
# TYPE pebble_check_success_count counter
pebble_check_success_count{check=\"a-down\"} 4

# HELP pebble_check_failure_count Number of times the check has failed
# TYPE pebble_check_failure_count counter
pebble_check_failure_count{check=\"a-down\"} 5

# HELP cobble_check_action_count Number of times the check's failure action has fired
# TYPE cobble_check_action_count counter
cobble_check_action_count{check=\"a-down\"} 2

# HELP pebble_check_success_count Number of times the check has succeeded
# TYPE pebble_check_success_count counter
pebble_check_success_count{check=\"z-off\"} 0

# HELP pebble_check_failure_count Number of times the check has failed
# TYPE pebble_check_failure_count counter
pebble_check_failure_count{check=\"z-off\"} 0

# HELP cobble_check_action_count Number of times the check's failure action has fired
# TYPE cobble_check_action_count counter
cobble_check_action_count{check=\"z-off\"} 0

";
        assert_eq!(body, expected);
    }

    #[test]
    fn the_log_targets_counters_come_last() {
        let scheduled = |runs, skips| crate::services::scheduler::ScheduleStatus {
            schedule: "00:00-24:00/1440".into(),
            next: None,
            last_run: None,
            last_skip: None,
            skips,
            runs,
        };
        // A status of a service the plan no longer has is left out.
        let schedules: ScheduleStatuses = std::sync::Arc::new(
            [
                ("gone".to_owned(), scheduled(9, 9)),
                ("web".to_owned(), scheduled(3, 1)),
            ]
            .into_iter()
            .collect(),
        );
        let body = render(
            &plan(&["web"]),
            &[service("web", Status::Active, 1)],
            &[Usage {
                memory_bytes: 4096,
                cpu: std::time::Duration::from_millis(1500),
                processes: 2,
                open_fds: 9,
                ..Usage::default()
            }],
            &[],
            &schedules,
            &[TargetStats {
                name: "loki".into(),
                sent: 7,
                dropped: 2,
                queued: 1,
            }],
        );
        let families: Vec<&str> = body
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .collect();
        assert_eq!(
            families,
            [
                "pebble_service_active gauge",
                "pebble_service_start_count counter",
                "cobble_service_memory_bytes gauge",
                "cobble_service_cpu_seconds_total counter",
                "cobble_service_processes gauge",
                "cobble_service_open_fds gauge",
                "cobble_service_scheduled_runs_total counter",
                "cobble_service_scheduled_skips_total counter",
                "cobble_log_forward_sent_total counter",
                "cobble_log_forward_dropped_total counter",
                "cobble_log_forward_queued gauge",
            ]
        );
        assert!(body.contains("cobble_service_memory_bytes{service=\"web\"} 4096\n"));
        assert!(body.contains("cobble_service_cpu_seconds_total{service=\"web\"} 1.5\n"));
        assert!(body.contains("cobble_service_processes{service=\"web\"} 2\n"));
        assert!(body.contains("cobble_service_open_fds{service=\"web\"} 9\n"));
        assert!(body.contains("cobble_service_scheduled_runs_total{service=\"web\"} 3\n"));
        assert!(body.contains("cobble_service_scheduled_skips_total{service=\"web\"} 1\n"));
        assert!(!body.contains("gone"), "{body}");
        assert!(body.contains("cobble_log_forward_sent_total{target=\"loki\"} 7\n"));
        assert!(body.contains("cobble_log_forward_dropped_total{target=\"loki\"} 2\n"));
        assert!(body.contains("cobble_log_forward_queued{target=\"loki\"} 1\n"));
    }

    #[test]
    fn seconds_are_written_without_trailing_zeros() {
        use std::time::Duration;
        assert_eq!(format_seconds(Duration::ZERO), "0");
        assert_eq!(format_seconds(Duration::from_secs(3)), "3");
        assert_eq!(format_seconds(Duration::from_millis(1500)), "1.5");
        assert_eq!(
            format_seconds(Duration::from_micros(12_000_001)),
            "12.000001"
        );
    }

    #[test]
    fn label_values_are_quoted() {
        let mut out = String::new();
        write_metric(&mut out, "m", MetricType::Gauge, "", &[("k", "a\"b\\c")], 1);
        assert_eq!(out, "# TYPE m gauge\nm{k=\"a\\\"b\\\\c\"} 1\n\n");
    }
}
