//! Service context: running a command "as" a service, for exec checks and `POST /v1/exec`.
//!
//! A command with a service context inherits that service's environment, user, group,
//! working directory and `rlimits`, as the service runs them: with its workload applied
//! ([`Plan::service_to_run`]). Whatever the command sets itself wins. Both users of the rule
//! go through [`Plan::merge_service_context`], so they cannot drift apart.
//!
//! Pebble v1.32 leaves the workload out here (its service context reads the service's own
//! fields only), so a command run in the context of a service with a workload runs there as
//! the daemon's user, without the workload's environment. cobble runs it as the service
//! runs, which is what a service context is for.

use std::collections::BTreeMap;

use crate::Plan;
use crate::error::PlanError;

/// The parts of a service that a command run in its context inherits. Empty strings and
/// `None` mean "not set", as in the plan.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ContextOptions {
    /// Environment variables.
    pub environment: BTreeMap<String, String>,
    /// Numeric user.
    pub user_id: Option<u32>,
    /// User name.
    pub user: String,
    /// Numeric group.
    pub group_id: Option<u32>,
    /// Group name.
    pub group: String,
    /// Working directory.
    pub working_dir: String,
    /// The service's `rlimits` (cobble extension): a command run in a service's context is
    /// limited as the service is. Nothing a command asks for sets them.
    pub rlimits: crate::Rlimits,
}

impl crate::Service {
    /// What a command run in this service's context inherits, and what the service's own
    /// command runs with: its environment, identity, working directory and limits.
    pub fn context(&self) -> ContextOptions {
        ContextOptions {
            environment: self.environment.clone(),
            user_id: self.user_id,
            user: self.user.clone(),
            group_id: self.group_id,
            group: self.group.clone(),
            working_dir: self.working_dir.clone(),
            rlimits: self.rlimits.clone(),
        }
    }
}

impl crate::ExecCheck {
    /// What the check's command runs with: once the check is merged with its
    /// `service-context`, the context's fields under the check's own.
    pub fn context(&self) -> ContextOptions {
        ContextOptions {
            environment: self.environment.clone(),
            user_id: self.user_id,
            user: self.user.clone(),
            group_id: self.group_id,
            group: self.group.clone(),
            working_dir: self.working_dir.clone(),
            rlimits: self.rlimits.clone(),
        }
    }
}

impl Plan {
    /// `overrides` on top of service `service`'s context: its environment with the
    /// overrides' variables merged over it, and each identity field or the working directory
    /// taken from the overrides where they set it. With no service name, the overrides alone.
    pub fn merge_service_context(
        &self,
        service: &str,
        overrides: ContextOptions,
    ) -> Result<ContextOptions, PlanError> {
        if service.is_empty() {
            return Ok(overrides);
        }
        let inherited = self
            .service_to_run(service)
            .ok_or_else(|| PlanError::ContextServiceNotFound(service.to_owned()))?
            .context();
        let mut environment = inherited.environment;
        environment.extend(overrides.environment);
        let or = |given: String, inherited: String| {
            if given.is_empty() { inherited } else { given }
        };
        Ok(ContextOptions {
            environment,
            user_id: overrides.user_id.or(inherited.user_id),
            user: or(overrides.user, inherited.user),
            group_id: overrides.group_id.or(inherited.group_id),
            group: or(overrides.group, inherited.group),
            working_dir: or(overrides.working_dir, inherited.working_dir),
            rlimits: inherited.rlimits,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Service;

    fn plan() -> Plan {
        let mut plan = Plan::default();
        plan.services.insert(
            "svc".into(),
            Service {
                name: "svc".into(),
                environment: [("A".to_string(), "1".to_string()), ("B".into(), "2".into())].into(),
                user: "nobody".into(),
                group_id: Some(7),
                working_dir: "/srv".into(),
                rlimits: [(
                    crate::Rlimit::Nofile,
                    crate::RlimitValue::parse("64:128").unwrap(),
                )]
                .into(),
                ..Service::default()
            },
        );
        plan
    }

    #[test]
    fn the_command_overrides_the_service() {
        let merged = plan()
            .merge_service_context(
                "svc",
                ContextOptions {
                    environment: [("B".to_string(), "3".to_string())].into(),
                    working_dir: "/tmp".into(),
                    user_id: Some(1000),
                    ..ContextOptions::default()
                },
            )
            .unwrap();
        assert_eq!(
            merged,
            ContextOptions {
                environment: [("A".to_string(), "1".to_string()), ("B".into(), "3".into())].into(),
                user_id: Some(1000),
                user: "nobody".into(),
                group_id: Some(7),
                group: String::new(),
                working_dir: "/tmp".into(),
                rlimits: [(
                    crate::Rlimit::Nofile,
                    crate::RlimitValue::parse("64:128").unwrap(),
                )]
                .into(),
            }
        );
    }

    #[test]
    fn no_service_means_the_overrides_alone() {
        let overrides = ContextOptions {
            user: "bob".into(),
            ..ContextOptions::default()
        };
        assert_eq!(
            plan().merge_service_context("", overrides.clone()),
            Ok(overrides)
        );
    }

    #[test]
    fn an_unknown_service_is_worded_like_pebble() {
        let error = plan()
            .merge_service_context("nope", ContextOptions::default())
            .unwrap_err();
        assert_eq!(error.to_string(), "context service \"nope\" not found");
    }
}
