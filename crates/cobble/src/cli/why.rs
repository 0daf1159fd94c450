//! `why <service>`: everything cobble knows about why a service is where it is.
//!
//! It reads `GET /v1/services?details=true` (the supervisor's facts and the checks acting on
//! the service) and, when the caller may read the plan, the service's backoff settings to
//! show the delays between retries. A service with a `schedule:` gets its next run, its last
//! run and how it went, and the runs skipped because one was still going.

use clap::Args;
use cobble_client::Client;
use cobble_client::types::{HeldSocketDetails, ScheduleDetails, ServiceInfo, WatchdogDetails};
use cobble_plan::{Layer, Plan};

use super::format::tabulate;
use super::times::TimeFormatter;
use super::{Output, write_all};

/// Arguments of `why`.
#[derive(Debug, Args)]
pub(super) struct WhyArgs {
    /// Display absolute times (in RFC 3339 format).
    #[arg(long)]
    abs_time: bool,
    /// The service to explain.
    #[arg(value_name = "service")]
    service: String,
}

/// Runs `why`.
pub(super) async fn execute(
    args: WhyArgs,
    client: &Client,
    out: &mut Output,
) -> anyhow::Result<()> {
    let query = [("names", args.service.as_str()), ("details", "true")];
    let services: Vec<ServiceInfo> = client.get("/v1/services", &query).await?;
    let Some(service) = services.into_iter().next() else {
        anyhow::bail!("cannot find service {:?} in plan", args.service);
    };
    // The backoff delays need the plan, which only admins may read; without it, say less.
    let backoff = match client.plan_yaml().await {
        Ok(yaml) => backoff_delays(&yaml, &args.service),
        Err(_) => None,
    };
    let text = explain(&service, backoff, &TimeFormatter::new(args.abs_time));
    write_all(out, &text)
}

/// The backoff delays of `service` (first, then each factor step up to the limit).
fn backoff_delays(plan_yaml: &str, service: &str) -> Option<String> {
    let layer = Layer::parse(0, "plan", plan_yaml).ok()?;
    let plan = Plan::from_layers(vec![layer]).ok()?;
    let config = plan.services.get(service)?;
    let limit = config.backoff_limit();
    let mut delay = config.backoff_delay();
    let mut steps = Vec::new();
    while delay < limit && steps.len() < 12 {
        steps.push(go(delay));
        delay = delay.mul_f64(config.backoff_factor()).min(limit);
    }
    steps.push(format!("{} (limit)", go(limit)));
    Some(format!(
        "{}; reset after running for {}",
        steps.join(", "),
        go(limit)
    ))
}

fn go(d: std::time::Duration) -> String {
    cobble_plan::format_duration(i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

/// `52.3 MiB memory, 1.25s CPU, 2 processes, 14 open files`.
fn describe_usage(usage: &cobble_client::types::ServiceUsage) -> String {
    let plural = |n: u64, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    format!(
        "{} memory, {} CPU, {}, {}",
        bytes(usage.memory_bytes),
        go(std::time::Duration::from_millis(
            (usage.cpu_seconds.max(0.0) * 1000.0).round() as u64
        )),
        plural(usage.processes, "process", "processes"),
        plural(usage.open_fds, "open file", "open files"),
    )
}

/// `every 30s, last ping <time>, fails at <time> without one`, or what stands instead.
fn describe_watchdog(watchdog: &WatchdogDetails, times: &TimeFormatter) -> String {
    if watchdog.interval == "0s" {
        return "turned off for this run by the service (WATCHDOG_USEC=0)".into();
    }
    let mut text = format!("every {}", watchdog.interval);
    match &watchdog.last_ping {
        Some(ping) => text.push_str(&format!(", last ping {}", times.format(ping))),
        None if watchdog.deadline.is_some() => text.push_str(", no ping since it was ready"),
        None => {}
    }
    if let Some(deadline) = &watchdog.deadline {
        text.push_str(&format!(
            ", fails at {} without one",
            times.format(deadline)
        ));
    }
    text
}

/// `https on 0.0.0.0:4443, held`, what keeps it from being held, and the `tcp` checks that
/// cannot tell whether the service answers on it.
fn describe_socket(socket: &HeldSocketDetails) -> String {
    let mut text = format!("{} on {}", socket.name, socket.listen);
    if socket.error.is_empty() {
        text.push_str(", held");
    } else {
        text.push_str(&format!(", not held: {}", socket.error));
    }
    if !socket.probed_by.is_empty() {
        let checks: Vec<String> = socket
            .probed_by
            .iter()
            .map(|c| format!("\"{c}\""))
            .collect();
        text.push_str(&format!(
            "; tcp check {} succeeds while the service is down (the kernel accepts for it): \
             an http or exec check, or a watchdog, tells whether it answers",
            checks.join(", ")
        ));
    }
    text
}

/// A size in the largest binary unit that keeps it above one, one decimal.
fn bytes(n: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < units.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{value:.1} {}", units[unit])
    }
}

/// `every ... ; next run <time>` and the rest of what a scheduled service's rows say.
fn describe_schedule(
    schedule: &ScheduleDetails,
    times: &TimeFormatter,
) -> Vec<(&'static str, String)> {
    let mut rows = Vec::new();
    let next = schedule.next_run.as_deref().map_or_else(
        || "no next run".to_owned(),
        |t| format!("next run {}", times.format(t)),
    );
    rows.push(("Schedule", format!("{}, {next}", schedule.schedule)));
    match &schedule.last_run {
        None => rows.push(("Last run", "none since the daemon started".into())),
        Some(at) => {
            let change = if schedule.last_change_id.is_empty() {
                String::new()
            } else {
                format!(" (change {})", schedule.last_change_id)
            };
            let outcome = match schedule.last_outcome.as_str() {
                "error" => format!("error: {}", schedule.last_error),
                other => other.to_owned(),
            };
            rows.push((
                "Last run",
                format!("{}{change}, {outcome}", times.format(at)),
            ));
        }
    }
    if let Some(skip) = &schedule.last_skip {
        let runs = if schedule.skips == 1 { "run" } else { "runs" };
        rows.push((
            "Skipped",
            format!(
                "{} {runs} while the one before was still going, the last due {}",
                schedule.skips,
                times.format(skip)
            ),
        ));
    }
    rows
}

fn explain(service: &ServiceInfo, backoff: Option<String>, times: &TimeFormatter) -> String {
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut row = |label: &str, value: String| rows.push(vec![format!("{label}:"), value]);
    row("Service", service.name.clone());
    let since = service
        .current_since
        .as_deref()
        .map(|t| format!(" since {}", times.format(t)))
        .unwrap_or_default();
    row("Current", format!("{}{since}", service.current));
    row("Startup", service.startup.clone());
    row(
        "Why",
        service
            .reason
            .clone()
            .unwrap_or_else(|| match service.current.as_str() {
                "active" => "running".into(),
                _ if service.current_since.is_none() && service.scheduled.is_some() => {
                    "not run yet: it waits for its schedule".into()
                }
                _ if service.current_since.is_none() => "never started by this daemon".into(),
                _ => "-".into(),
            }),
    );
    let mut output = Vec::new();
    if let Some(d) = &service.details {
        row("Starts", d.start_count.to_string());
        if let Some(code) = d.last_exit_code {
            let cause = if d.last_exit_cause.is_empty() {
                String::new()
            } else {
                format!(" ({})", d.last_exit_cause)
            };
            row("Last exit", format!("code {code}{cause}"));
        }
        if let Some(usage) = &d.usage {
            row("Uses", describe_usage(usage));
            if !usage.cgroup.is_empty() {
                let charged = usage
                    .cgroup_memory_bytes
                    .map(|b| format!(" ({} charged)", bytes(b)))
                    .unwrap_or_default();
                row("Cgroup", format!("{}{charged}", usage.cgroup));
            }
        }
        if let Some(watchdog) = &d.watchdog {
            row("Watchdog", describe_watchdog(watchdog, times));
        }
        for socket in &d.sockets {
            row("Socket", describe_socket(socket));
        }
        if !d.resources_not_enforced.is_empty() {
            row("Resources", d.resources_not_enforced.clone());
        }
        if d.backoff_count > 0 {
            let until = d
                .backoff_until
                .as_deref()
                .map(|t| format!(", next start {}", times.format(t)))
                .unwrap_or_default();
            row(
                "Backoff",
                format!(
                    "{} so far, current delay {}{until}",
                    d.backoff_count, d.backoff_delay
                ),
            );
        }
        if !d.waiting_for.is_empty() {
            row("Waiting for", d.waiting_for.join(", "));
        }
        for oneshot in &d.waiting_for_oneshots {
            row(
                "Waiting for",
                format!("one-shot {} to complete ({})", oneshot.name, oneshot.state),
            );
        }
        if let Some(done) = &d.last_completion {
            row(
                "Completed",
                format!(
                    "exit code {} at {}, ran for {}",
                    done.exit_code,
                    times.format(&done.at),
                    done.ran_for
                ),
            );
        }
        if !d.waiting_for_checks.is_empty() {
            let noun = if d.waiting_for_checks.len() == 1 {
                "check"
            } else {
                "checks"
            };
            row(
                "Waiting for",
                format!("{noun} {} to succeed", d.waiting_for_checks.join(", ")),
            );
        }
        if let Some(until) = &d.start_grace_until {
            row("Start grace", format!("until {}", times.format(until)));
        }
        for held in &d.held_actions {
            row(
                "Held action",
                format!("check {} until {}", held.check, times.format(&held.until)),
            );
        }
        for streak in &d.check_restarts {
            row(
                "Check restarts",
                format!(
                    "{} by check {} while it stays down, next not before {}",
                    streak.restarts,
                    streak.check,
                    times.format(&streak.next_after)
                ),
            );
        }
        if !d.missing_paths.is_empty() {
            row(
                "Retry when",
                format!("{} exists", d.missing_paths.join(", ")),
            );
        }
        for check in &d.failing_checks {
            let since = check
                .down_since
                .as_deref()
                .map(|t| format!(" since {}", times.format(t)))
                .unwrap_or_default();
            row(
                "Failing check",
                format!(
                    "{} down{since}, {}/{} failures, action fired {} times: {}",
                    check.name,
                    check.failures,
                    check.threshold,
                    check.action_count,
                    check.last_error
                ),
            );
        }
        if let Some(schedule) = &d.schedule {
            for (label, value) in describe_schedule(schedule, times) {
                row(label, value);
            }
        }
        output = d.last_output.clone();
    }
    if let Some(backoff) = backoff {
        row("Backoff steps", backoff);
    }
    let mut text = tabulate(&rows);
    if !output.is_empty() {
        text.push_str("Last output:\n");
        for line in output {
            text.push_str("    ");
            text.push_str(&line);
            text.push('\n');
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use cobble_client::types::{
        CheckRestarts, Completion, FailingCheck, HeldAction, ServiceDetails, WaitingOneshot,
    };

    #[test]
    fn explains_backoff_checks_and_output() {
        let service = ServiceInfo {
            name: "webhook".into(),
            startup: "enabled".into(),
            current: "backoff".into(),
            scheduled: None,
            current_since: Some("2026-01-02T03:04:05Z".into()),
            reason: Some("backing off after exit code 255".into()),
            details: Some(ServiceDetails {
                last_exit_code: Some(255),
                last_output: vec!["Error: open /certs/cert.pem: no such file or directory".into()],
                start_count: 4,
                backoff_count: 3,
                backoff_delay: "2s".into(),
                backoff_until: Some("2026-01-02T03:04:07Z".into()),
                waiting_for: Vec::new(),
                missing_paths: vec!["/certs/cert.pem".into()],
                failing_checks: vec![FailingCheck {
                    name: "up".into(),
                    failures: 6,
                    threshold: 3,
                    down_since: Some("2026-01-02T03:03:00Z".into()),
                    last_error: "dial tcp 127.0.0.1:8443: connection refused".into(),
                    action_count: 2,
                }],
                ..ServiceDetails::default()
            }),
        };
        let text = explain(
            &service,
            Some("500ms, 1s (limit)".into()),
            &TimeFormatter::new(true),
        );
        assert_eq!(
            text,
            "\
Service:        webhook
Current:        backoff since 2026-01-02T03:04:05Z
Startup:        enabled
Why:            backing off after exit code 255
Starts:         4
Last exit:      code 255
Backoff:        3 so far, current delay 2s, next start 2026-01-02T03:04:07Z
Retry when:     /certs/cert.pem exists
Failing check:  up down since 2026-01-02T03:03:00Z, 6/3 failures, action fired 2 times: dial tcp 127.0.0.1:8443: connection refused
Backoff steps:  500ms, 1s (limit)
Last output:
    Error: open /certs/cert.pem: no such file or directory
"
        );
    }

    #[test]
    fn explains_a_completed_oneshot_and_a_service_waiting_for_a_failed_one() {
        let completed = ServiceInfo {
            name: "setup".into(),
            startup: "enabled".into(),
            current: "inactive".into(),
            current_since: Some("2026-01-02T03:04:05Z".into()),
            reason: Some("completed".into()),
            scheduled: None,
            details: Some(ServiceDetails {
                start_count: 1,
                last_exit_code: Some(0),
                last_completion: Some(Completion {
                    exit_code: 0,
                    at: "2026-01-02T03:04:05Z".into(),
                    ran_for: "1.5s".into(),
                }),
                ..ServiceDetails::default()
            }),
        };
        assert_eq!(
            explain(&completed, None, &TimeFormatter::new(true)),
            "\
Service:    setup
Current:    inactive since 2026-01-02T03:04:05Z
Startup:    enabled
Why:        completed
Starts:     1
Last exit:  code 0
Completed:  exit code 0 at 2026-01-02T03:04:05Z, ran for 1.5s
"
        );
        let waiting = ServiceInfo {
            name: "lldpd".into(),
            startup: "enabled".into(),
            current: "waiting".into(),
            current_since: Some("2026-01-02T03:04:05Z".into()),
            reason: Some(
                "waiting for one-shot \"setup\" to complete (failed: exited with code 3)".into(),
            ),
            scheduled: None,
            details: Some(ServiceDetails {
                waiting_for_oneshots: vec![WaitingOneshot {
                    name: "setup".into(),
                    state: "failed: exited with code 3".into(),
                }],
                ..ServiceDetails::default()
            }),
        };
        assert_eq!(
            explain(&waiting, None, &TimeFormatter::new(true)),
            "\
Service:      lldpd
Current:      waiting since 2026-01-02T03:04:05Z
Startup:      enabled
Why:          waiting for one-shot \"setup\" to complete (failed: exited with code 3)
Starts:       0
Waiting for:  one-shot setup to complete (failed: exited with code 3)
"
        );
    }

    #[test]
    fn explains_waiting_checks_the_start_grace_and_check_restarts() {
        let waiting = ServiceInfo {
            name: "app".into(),
            startup: "enabled".into(),
            current: "waiting".into(),
            scheduled: None,
            current_since: Some("2026-01-02T03:04:05Z".into()),
            reason: Some("waiting for check db-ready to succeed".into()),
            details: Some(ServiceDetails {
                waiting_for_checks: vec!["db-ready".into()],
                ..ServiceDetails::default()
            }),
        };
        assert_eq!(
            explain(&waiting, None, &TimeFormatter::new(true)),
            "\
Service:      app
Current:      waiting since 2026-01-02T03:04:05Z
Startup:      enabled
Why:          waiting for check db-ready to succeed
Starts:       0
Waiting for:  check db-ready to succeed
"
        );
        let running = ServiceInfo {
            name: "slow".into(),
            startup: "enabled".into(),
            current: "active".into(),
            scheduled: None,
            current_since: Some("2026-01-02T03:04:05Z".into()),
            reason: None,
            details: Some(ServiceDetails {
                start_count: 3,
                start_grace_until: Some("2026-01-02T03:04:35Z".into()),
                held_actions: vec![HeldAction {
                    check: "up".into(),
                    until: "2026-01-02T03:04:35Z".into(),
                }],
                check_restarts: vec![CheckRestarts {
                    check: "up".into(),
                    restarts: 2,
                    next_after: "2026-01-02T03:04:09Z".into(),
                }],
                ..ServiceDetails::default()
            }),
        };
        assert_eq!(
            explain(&running, None, &TimeFormatter::new(true)),
            "\
Service:         slow
Current:         active since 2026-01-02T03:04:05Z
Startup:         enabled
Why:             running
Starts:          3
Start grace:     until 2026-01-02T03:04:35Z
Held action:     check up until 2026-01-02T03:04:35Z
Check restarts:  2 by check up while it stays down, next not before 2026-01-02T03:04:09Z
"
        );
    }

    #[test]
    fn explains_an_oom_kill_what_it_uses_and_what_is_not_enforced() {
        let service = ServiceInfo {
            name: "leaky".into(),
            startup: "enabled".into(),
            current: "backoff".into(),
            scheduled: None,
            current_since: Some("2026-01-02T03:04:05Z".into()),
            reason: Some(
                "backing off after exit code 137 (killed by the OOM killer at memory-max 64M)"
                    .into(),
            ),
            details: Some(ServiceDetails {
                last_exit_code: Some(137),
                last_exit_cause: "killed by the OOM killer at memory-max 64M".into(),
                start_count: 1,
                usage: Some(cobble_client::types::ServiceUsage {
                    memory_bytes: 52 * 1024 * 1024 + 300 * 1024,
                    cpu_seconds: 1.25,
                    processes: 2,
                    open_fds: 1,
                    cgroup_memory_bytes: Some(60 * 1024 * 1024),
                    cgroup: "/sys/fs/cgroup/memory/cobble-1/leaky.1".into(),
                }),
                resources_not_enforced:
                    "pids-max not enforced: no cgroup v1 pids hierarchy is mounted".into(),
                ..ServiceDetails::default()
            }),
        };
        let text = explain(&service, None, &TimeFormatter::new(true));
        assert_eq!(
            text,
            "\
Service:    leaky
Current:    backoff since 2026-01-02T03:04:05Z
Startup:    enabled
Why:        backing off after exit code 137 (killed by the OOM killer at memory-max 64M)
Starts:     1
Last exit:  code 137 (killed by the OOM killer at memory-max 64M)
Uses:       52.3 MiB memory, 1.25s CPU, 2 processes, 1 open file
Cgroup:     /sys/fs/cgroup/memory/cobble-1/leaky.1 (60.0 MiB charged)
Resources:  pids-max not enforced: no cgroup v1 pids hierarchy is mounted
"
        );
    }

    #[test]
    fn explains_a_watchdog_and_the_timeout_that_ended_the_last_run() {
        let cause = "watchdog timeout after 30s, last ping 31.2s ago";
        let service = ServiceInfo {
            name: "api".into(),
            startup: "enabled".into(),
            current: "active".into(),
            scheduled: None,
            current_since: Some("2026-01-02T03:04:05Z".into()),
            reason: None,
            details: Some(ServiceDetails {
                last_exit_code: Some(134),
                last_exit_cause: cause.into(),
                start_count: 2,
                watchdog: Some(WatchdogDetails {
                    interval: "30s".into(),
                    last_ping: Some("2026-01-02T03:04:20Z".into()),
                    deadline: Some("2026-01-02T03:04:50Z".into()),
                }),
                ..ServiceDetails::default()
            }),
        };
        assert_eq!(
            explain(&service, None, &TimeFormatter::new(true)),
            format!(
                "\
Service:    api
Current:    active since 2026-01-02T03:04:05Z
Startup:    enabled
Why:        running
Starts:     2
Last exit:  code 134 ({cause})
Watchdog:   every 30s, last ping 2026-01-02T03:04:20Z, fails at 2026-01-02T03:04:50Z without one
"
            )
        );
        let held = HeldSocketDetails {
            name: "https".into(),
            listen: "0.0.0.0:4443".into(),
            error: String::new(),
            probed_by: vec!["up".into()],
        };
        assert_eq!(
            describe_socket(&held),
            "https on 0.0.0.0:4443, held; tcp check \"up\" succeeds while the service is \
             down (the kernel accepts for it): an http or exec check, or a watchdog, tells \
             whether it answers"
        );
        let refused = HeldSocketDetails {
            name: "admin".into(),
            listen: "127.0.0.1:80".into(),
            error: "cannot listen on 127.0.0.1:80 for socket \"admin\": permission denied".into(),
            probed_by: Vec::new(),
        };
        assert_eq!(
            describe_socket(&refused),
            "admin on 127.0.0.1:80, not held: cannot listen on 127.0.0.1:80 for socket \"admin\": permission denied"
        );
        let off = WatchdogDetails {
            interval: "0s".into(),
            ..WatchdogDetails::default()
        };
        let times = TimeFormatter::new(true);
        assert_eq!(
            describe_watchdog(&off, &times),
            "turned off for this run by the service (WATCHDOG_USEC=0)"
        );
        let silent = WatchdogDetails {
            interval: "1s".into(),
            last_ping: None,
            deadline: Some("2026-01-02T03:04:50Z".into()),
        };
        assert_eq!(
            describe_watchdog(&silent, &times),
            "every 1s, no ping since it was ready, fails at 2026-01-02T03:04:50Z without one"
        );
        let between_runs = WatchdogDetails {
            interval: "1s".into(),
            ..WatchdogDetails::default()
        };
        assert_eq!(describe_watchdog(&between_runs, &times), "every 1s");
    }

    #[test]
    fn backoff_delays_from_the_plan() {
        let yaml = "services:\n    s:\n        override: replace\n        command: x\n        backoff-delay: 500ms\n        backoff-limit: 5s\n";
        assert_eq!(
            backoff_delays(yaml, "s").unwrap(),
            "500ms, 1s, 2s, 4s, 5s (limit); reset after running for 5s"
        );
        assert_eq!(backoff_delays(yaml, "other"), None);
    }

    #[test]
    fn explains_a_schedule_its_last_run_and_its_skips() {
        let service = ServiceInfo {
            name: "cleanup".into(),
            startup: "disabled".into(),
            current: "inactive".into(),
            current_since: None,
            scheduled: Some("2026-01-02T03:05:00Z".into()),
            reason: None,
            details: Some(ServiceDetails {
                schedule: Some(ScheduleDetails {
                    schedule: "00:00-24:00/1440".into(),
                    next_run: Some("2026-01-02T03:05:00Z".into()),
                    ..ScheduleDetails::default()
                }),
                ..ServiceDetails::default()
            }),
        };
        let times = TimeFormatter::new(true);
        assert_eq!(
            explain(&service, None, &times),
            "\
Service:   cleanup
Current:   inactive
Startup:   disabled
Why:       not run yet: it waits for its schedule
Starts:    0
Schedule:  00:00-24:00/1440, next run 2026-01-02T03:05:00Z
Last run:  none since the daemon started
"
        );
        let mut ran = service.clone();
        ran.current = "active".into();
        ran.current_since = Some("2026-01-02T03:04:00Z".into());
        let details = ran.details.as_mut().unwrap();
        details.start_count = 1;
        details.schedule = Some(ScheduleDetails {
            schedule: "00:00-24:00/1440".into(),
            next_run: Some("2026-01-02T03:06:00Z".into()),
            last_run: Some("2026-01-02T03:04:00Z".into()),
            last_change_id: "12".into(),
            last_outcome: "done".into(),
            last_error: String::new(),
            last_skip: Some("2026-01-02T03:05:00Z".into()),
            skips: 1,
        });
        let text = explain(
            &ran,
            Some("1s (limit); reset after running for 1s".into()),
            &times,
        );
        assert!(
            text.contains("Last run:       2026-01-02T03:04:00Z (change 12), done\n"),
            "{text}"
        );
        assert!(
            text.contains(
                "Skipped:        1 run while the one before was still going, the last due 2026-01-02T03:05:00Z\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("Backoff steps:  1s (limit); reset after running for 1s\n"),
            "{text}"
        );
        let details = ran.details.as_mut().unwrap();
        let schedule = details.schedule.as_mut().unwrap();
        schedule.last_outcome = "error".into();
        schedule.last_error =
            "cannot perform the following tasks:\n- Start service \"cleanup\" (exited)".into();
        let text = explain(&ran, None, &times);
        assert!(
            text.contains("(change 12), error: cannot perform the following tasks:"),
            "{text}"
        );
    }
}
