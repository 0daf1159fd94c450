//! The probe trait, the error a failed probe reports, and building probes from the plan.

use std::sync::Arc;
use std::time::Duration;

use cobble_plan::{Check, ContextOptions, Plan};

use crate::process::launcher::Launcher;
use futures_util::future::BoxFuture;

use super::{exec, http, tcp};

/// Most bytes of output or body kept for a failure's details.
pub(super) const MAX_ERROR_BYTES: usize = 512;
/// Most lines of output or body shown in a failure's details.
pub(super) const MAX_ERROR_LINES: usize = 5;

/// Why a probe failed: a one-line message and optional details (the first lines of an HTTP
/// body, the last lines of a command's output).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CheckError {
    /// `non-2xx status code 500`, `exit status 1`, `check timed out after 3s`, ...
    pub message: String,
    /// Extra lines, possibly empty.
    pub details: String,
}

impl CheckError {
    /// An error without details.
    pub(crate) fn new(message: impl Into<String>) -> CheckError {
        CheckError {
            message: message.into(),
            details: String::new(),
        }
    }

    /// The probe did not finish within the check's timeout.
    pub(crate) fn timed_out(timeout: Duration) -> CheckError {
        let nanos = i64::try_from(timeout.as_nanos()).unwrap_or(i64::MAX);
        CheckError::new(format!(
            "check timed out after {}",
            cobble_plan::format_duration(nanos)
        ))
    }

    /// The text of a task-log entry and of `refresh`'s `error`: `message; details`.
    pub(crate) fn log_text(&self) -> String {
        if self.details.is_empty() {
            self.message.clone()
        } else {
            format!("{}; {}", self.message, self.details)
        }
    }
}

impl std::fmt::Display for CheckError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// One kind of probe. `check` runs it once; the caller bounds it with the check's timeout
/// and may drop the future at any point (probes clean up after themselves on drop).
pub(crate) trait Checker: Send + Sync {
    /// Runs the probe once.
    fn check(&self) -> BoxFuture<'_, Result<(), CheckError>>;
}

/// Runs `checker` once within `timeout`.
pub(super) async fn probe(checker: &dyn Checker, timeout: Duration) -> Result<(), CheckError> {
    match tokio::time::timeout(timeout, checker.check()).await {
        Ok(result) => result,
        Err(_) => Err(CheckError::timed_out(timeout)),
    }
}

/// Builds the probe for a check whose service context has already been merged; an exec
/// probe starts its command through `launcher`.
pub(super) fn build(config: &Check, launcher: &Launcher) -> Arc<dyn Checker> {
    if let Some(http) = &config.http {
        Arc::new(http::HttpChecker::new(&config.name, http))
    } else if let Some(tcp) = &config.tcp {
        Arc::new(tcp::TcpChecker::new(tcp))
    } else if let Some(exec) = &config.exec {
        Arc::new(exec::ExecChecker::new(&config.name, exec, launcher))
    } else {
        // Plan validation guarantees exactly one type; fail every run rather than panic.
        Arc::new(Invalid)
    }
}

/// `HTTP`, `TCP` or `exec`, as in change summaries.
pub(super) fn type_name(config: &Check) -> &'static str {
    if config.http.is_some() {
        "HTTP"
    } else if config.tcp.is_some() {
        "TCP"
    } else if config.exec.is_some() {
        "exec"
    } else {
        "<unknown>"
    }
}

/// The check as it will run: for an exec check with `service-context`, the service's
/// environment, user, group, working directory and `rlimits`, overridden by the check's own fields.
pub(super) fn merge_service_context(plan: &Plan, config: &Check) -> Check {
    let mut merged = config.clone();
    let Some(exec) = merged.exec.as_mut() else {
        return merged;
    };
    // A layer cannot give a check limits: they come from its context service alone.
    let overrides = ContextOptions {
        rlimits: Default::default(),
        ..exec.context()
    };
    // Plan validation guarantees the service exists; were it gone, the check's own fields
    // are all there is.
    let context = plan
        .merge_service_context(&exec.service_context, overrides.clone())
        .unwrap_or(overrides);
    exec.environment = context.environment;
    exec.user_id = context.user_id;
    exec.user = context.user;
    exec.group_id = context.group_id;
    exec.group = context.group;
    exec.working_dir = context.working_dir;
    exec.rlimits = context.rlimits;
    merged
}

/// A failed response's error details: the first [`MAX_ERROR_LINES`] lines of its body,
/// marking a cut with `(...)`.
pub(super) fn details_from_body(text: &str) -> String {
    let lines: Vec<&str> = text.trim().split('\n').collect();
    if lines.len() > MAX_ERROR_LINES {
        let mut kept = lines[..MAX_ERROR_LINES].to_vec();
        kept.push("(...)");
        kept.join("\n")
    } else {
        lines.join("\n")
    }
}

/// A failed command's error details: the last [`MAX_ERROR_LINES`] lines of its output.
pub(super) fn details_from_output(text: &str) -> String {
    let trimmed = text.trim_end_matches('\n');
    if trimmed.is_empty() {
        return String::new();
    }
    let lines: Vec<&str> = trimmed.split('\n').collect();
    let start = lines.len().saturating_sub(MAX_ERROR_LINES);
    lines[start..].join("\n")
}

struct Invalid;

impl Checker for Invalid {
    fn check(&self) -> BoxFuture<'_, Result<(), CheckError>> {
        Box::pin(async { Err(CheckError::new("invalid check configuration")) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cobble_plan::{ExecCheck, Service};

    #[test]
    fn timeout_message_uses_go_durations() {
        assert_eq!(
            CheckError::timed_out(Duration::from_millis(25)).message,
            "check timed out after 25ms"
        );
        assert_eq!(
            CheckError::timed_out(Duration::from_secs(3)).message,
            "check timed out after 3s"
        );
    }

    #[test]
    fn body_and_output_lines_are_cut_like_pebble() {
        assert_eq!(details_from_body("  a\nb\n"), "a\nb");
        assert_eq!(
            details_from_body("1\n2\n3\n4\n5\n6\n7"),
            "1\n2\n3\n4\n5\n(...)"
        );
        assert_eq!(
            details_from_output("1\n2\n3\n4\n5\n6\n7\n"),
            "3\n4\n5\n6\n7"
        );
        assert_eq!(details_from_output(""), "");
    }

    #[test]
    fn service_context_is_overridden_by_the_check() {
        let mut plan = Plan::default();
        plan.services.insert(
            "svc".into(),
            Service {
                name: "svc".into(),
                environment: [("A".to_string(), "1".to_string()), ("B".into(), "2".into())].into(),
                user: "nobody".into(),
                group_id: Some(7),
                working_dir: "/srv".into(),
                ..Service::default()
            },
        );
        let check = Check {
            name: "c".into(),
            exec: Some(ExecCheck {
                command: "true".into(),
                service_context: "svc".into(),
                environment: [("B".to_string(), "3".to_string())].into(),
                working_dir: "/tmp".into(),
                ..ExecCheck::default()
            }),
            ..Check::default()
        };
        let merged = merge_service_context(&plan, &check);
        let exec = merged.exec.unwrap();
        assert_eq!(exec.environment["A"], "1");
        assert_eq!(exec.environment["B"], "3");
        assert_eq!(exec.user, "nobody");
        assert_eq!(exec.group_id, Some(7));
        assert_eq!(exec.working_dir, "/tmp");
    }
}
