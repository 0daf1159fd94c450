//! Why a service is where it is: the supervisor's view joined with the checks that act on it.
//!
//! `GET /v1/services` carries a one-line `reason` (Pebble clients ignore it) and, with
//! `details=true`, the facts behind it; `cobble why` prints them. The service manager knows
//! exits, backoff and waiting paths; the check manager knows which checks are down. This
//! module joins the two without either manager knowing about the other.

use cobble_client::types::{FailingCheck, ServiceDetails as WireDetails, ServiceInfo};
use cobble_plan::Plan;

use crate::checks::{CheckStatus, CheckView};
use crate::services::ServiceStatus;
use crate::state::{format_rfc3339_nano, format_rfc3339_secs};

/// The wire form of each status, with failing checks added to the reason (and, when asked,
/// the details).
pub fn explain(
    statuses: Vec<ServiceStatus>,
    plan: &Plan,
    checks: &[CheckView],
    with_details: bool,
) -> Vec<ServiceInfo> {
    statuses
        .into_iter()
        .map(|status| {
            let failing: Vec<&CheckView> = plan
                .services
                .get(&status.info.name)
                .map(|config| {
                    checks
                        .iter()
                        .filter(|c| c.status == CheckStatus::Down)
                        .filter(|c| config.on_check_failure.contains_key(&c.name))
                        .collect()
                })
                .unwrap_or_default();
            let mut info = status.info;
            if !failing.is_empty() && status.details.is_some() {
                let text = failing
                    .iter()
                    .map(|c| {
                        let since = c
                            .down_since
                            .map(|t| format!(" since {}", format_rfc3339_secs(t)))
                            .unwrap_or_default();
                        let error = c
                            .last_error
                            .as_deref()
                            .map(|e| format!(" ({e})"))
                            .unwrap_or_default();
                        format!("check {} failing{since}{error}", c.name)
                    })
                    .collect::<Vec<_>>()
                    .join("; ");
                info.reason = Some(match info.reason.take() {
                    Some(reason) => format!("{reason}; {text}"),
                    None => text,
                });
            }
            if with_details {
                info.details = status.details.map(|d| WireDetails {
                    last_exit_code: d.last_exit,
                    last_output: d.last_output,
                    start_count: status.start_count,
                    backoff_count: d.backoff_count,
                    backoff_delay: if d.backoff_delay.is_zero() {
                        String::new()
                    } else {
                        cobble_plan::format_duration(
                            i64::try_from(d.backoff_delay.as_nanos()).unwrap_or(i64::MAX),
                        )
                    },
                    backoff_until: d.backoff_until.map(format_rfc3339_nano),
                    waiting_for: d.waiting_for,
                    missing_paths: d.hints,
                    failing_checks: failing
                        .iter()
                        .map(|c| FailingCheck {
                            name: c.name.clone(),
                            failures: c.failures,
                            threshold: c.threshold,
                            down_since: c.down_since.map(format_rfc3339_nano),
                            last_error: c.last_error.clone().unwrap_or_default(),
                            action_count: c.action_count,
                        })
                        .collect(),
                });
            }
            info
        })
        .collect()
}
