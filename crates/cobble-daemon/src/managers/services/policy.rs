//! The adapter from the plan to the machine: a service's configuration as the lifecycle
//! [`Policy`] its [`super::machine::Machine`] decides by. The machine knows nothing of layers.

use cobble_plan::{FileChangeAction, Plan, Readiness, Service, ServiceAction};

use super::machine::{ExitAction, FileAction, OneshotDep, Policy};

/// The lifecycle policy of a service's configuration; `plan` says which of the services it
/// is ordered after are one-shots.
pub(super) fn policy(config: &Service, plan: &Plan) -> Policy {
    Policy {
        on_success: exit_action(config.on_success),
        on_failure: exit_action(config.on_failure),
        backoff_delay: config.backoff_delay(),
        backoff_factor: config.backoff_factor(),
        backoff_limit: config.backoff_limit(),
        kill_delay: config.kill_delay(),
        on_check_failure: config
            .on_check_failure
            .iter()
            .map(|(check, action)| (check.clone(), exit_action(*action)))
            .collect(),
        on_file_change: config
            .on_file_change
            .iter()
            .filter_map(|(path, action)| {
                let action = match action {
                    FileChangeAction::Restart => FileAction::Restart,
                    FileChangeAction::Signal(signal) => FileAction::Signal(signal.clone()),
                    FileChangeAction::Ignore => return None,
                };
                Some((path.clone(), action))
            })
            .collect(),
        requires_checks: config.requires_checks.clone(),
        start_grace: config.start_grace(),
        notify: config.readiness == Readiness::Notify,
        watchdog: config.watchdog.map(|d| d.as_std()),
        oneshot: config.type_.is_oneshot(),
        after_oneshots: config
            .after
            .iter()
            .filter(|name| {
                plan.services
                    .get(*name)
                    .is_some_and(|s| s.type_.is_oneshot())
            })
            .map(|name| OneshotDep {
                name: name.clone(),
                required: config.requires.contains(name),
            })
            .collect(),
    }
}

fn exit_action(action: ServiceAction) -> ExitAction {
    match action {
        ServiceAction::Unset | ServiceAction::Restart => ExitAction::Restart,
        ServiceAction::Shutdown => ExitAction::Shutdown,
        ServiceAction::SuccessShutdown => ExitAction::SuccessShutdown,
        ServiceAction::FailureShutdown => ExitAction::FailureShutdown,
        ServiceAction::Ignore => ExitAction::Ignore,
    }
}
