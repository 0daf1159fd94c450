//! The plan: layers combined in order, then validated as a whole.

use std::borrow::Cow;
use std::collections::BTreeMap;

use crate::check::LOG_TARGET_TYPES;
use crate::error::PlanError;
use crate::service::{Override, Readiness, Startup, command_string};
use crate::sockets::ListenAddress;
use crate::workload::{PairingMode, Workload, combine_workloads};
use crate::{Check, Layer, LogTarget, Service};

/// The label of the layer that `pebble run --args` adds.
pub const SERVICE_ARGS_LABEL: &str = "pebble-service-args";

/// The combined configuration: every layer, and the services, checks and log targets that
/// result from applying them in order.
///
/// A plan is a value: operations that change it ([`Plan::add_layer`]) return a new plan and
/// leave the old one untouched, so a failed request never leaves a half-applied plan behind.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Plan {
    /// The layers, sorted by order.
    pub layers: Vec<Layer>,
    /// The combined services.
    pub services: BTreeMap<String, Service>,
    /// The combined checks (timeouts above the period already lowered to the period).
    pub checks: BTreeMap<String, Check>,
    /// The combined log targets.
    pub log_targets: BTreeMap<String, LogTarget>,
    /// The combined `workloads:` section. Fixed once the daemon has loaded its layers.
    pub workloads: BTreeMap<String, Workload>,
    /// The combined `pairing: mode:`.
    pub pairing: PairingMode,
    /// Log targets that can never deliver, and why (see `crate::log_target`): Pebble accepts
    /// them and fails only when it sends, so cobble accepts them too, but sends them nothing.
    pub log_target_problems: BTreeMap<String, String>,
    /// Per service, what in its configuration cannot work as written although Pebble accepts
    /// it (a `startup` other than `enabled` or `disabled`, logs for a target in
    /// [`Plan::log_target_problems`]), joined with `; `. Empty for nearly every plan, so the
    /// services listing pays one emptiness check for it.
    pub notes: BTreeMap<String, String>,
}

/// The three kinds of entry share one combine rule; this lets it be written once.
trait Entry: Clone {
    const KIND: &'static str;
    fn override_(&self) -> Override;
    fn merge_from(&mut self, other: &Self);
}

impl Entry for Service {
    const KIND: &'static str = "service";
    fn override_(&self) -> Override {
        self.override_
    }
    fn merge_from(&mut self, other: &Self) {
        self.merge(other);
    }
}

impl Entry for Check {
    const KIND: &'static str = "check";
    fn override_(&self) -> Override {
        self.override_
    }
    fn merge_from(&mut self, other: &Self) {
        self.merge(other);
    }
}

impl Entry for LogTarget {
    const KIND: &'static str = "log target";
    fn override_(&self) -> Override {
        self.override_
    }
    fn merge_from(&mut self, other: &Self) {
        self.merge(other);
    }
}

/// Applies one layer's entries of one kind: `replace` (or `merge` of something new) inserts a
/// copy, `merge` of an existing entry merges into it, a missing `override` is an error.
fn apply<T: Entry>(
    layer: &str,
    combined: &mut BTreeMap<String, T>,
    entries: &BTreeMap<String, T>,
) -> Result<(), PlanError> {
    for (name, entry) in entries {
        match entry.override_() {
            Override::Merge if combined.contains_key(name) => {
                if let Some(existing) = combined.get_mut(name) {
                    existing.merge_from(entry);
                }
            }
            Override::Merge | Override::Replace => {
                combined.insert(name.clone(), entry.clone());
            }
            Override::Invalid => {
                return Err(PlanError::InvalidOverride {
                    layer: layer.to_owned(),
                    kind: T::KIND,
                    name: name.clone(),
                });
            }
            Override::Unknown => {
                return Err(PlanError::MissingOverride {
                    layer: layer.to_owned(),
                    kind: T::KIND,
                    name: name.clone(),
                });
            }
        }
    }
    Ok(())
}

/// Combines layers in the given order into one layer (Pebble's `CombineLayers`). The result
/// takes its summary and description from the last layer. Nothing is validated here.
pub(crate) fn combine_layers(layers: &[Layer]) -> Result<Layer, PlanError> {
    let mut combined = Layer::default();
    if let Some(last) = layers.last() {
        combined.summary.clone_from(&last.summary);
        combined.description.clone_from(&last.description);
    }
    // Pebble combines its extension sections, over every layer, before the built-in ones.
    for layer in layers {
        combine_workloads(&mut combined.workloads, &layer.workloads)?;
        if layer.pairing != PairingMode::Unset {
            combined.pairing = layer.pairing;
        }
    }
    for layer in layers {
        apply(&layer.label, &mut combined.services, &layer.services)?;
        apply(&layer.label, &mut combined.checks, &layer.checks)?;
        apply(&layer.label, &mut combined.log_targets, &layer.log_targets)?;
    }
    Ok(combined)
}

impl Layer {
    /// Combines layers in the given order into one, without validating the result: what
    /// `POST /v1/layers` with `combine` does to a label that exists. The result's label and
    /// order are left empty.
    pub fn combine(layers: &[Layer]) -> Result<Layer, PlanError> {
        combine_layers(layers)
    }
}

impl Plan {
    /// Combines `layers` (sorted by order first) and validates the result.
    pub fn from_layers(mut layers: Vec<Layer>) -> Result<Plan, PlanError> {
        layers.sort_by_key(|layer| layer.order);
        let combined = combine_layers(&layers)?;
        let mut plan = Plan {
            layers,
            services: combined.services,
            checks: combined.checks,
            log_targets: combined.log_targets,
            workloads: combined.workloads,
            pairing: combined.pairing,
            log_target_problems: BTreeMap::new(),
            notes: BTreeMap::new(),
        };
        for check in plan.checks.values_mut() {
            // A timeout longer than the period is the period in effect; Pebble stores the
            // lowered value, so it is what the plan shows.
            let period = check.period.unwrap_or(crate::GoDuration::from_std(
                crate::check::DEFAULT_CHECK_PERIOD,
            ));
            if let Some(timeout) = &mut check.timeout
                && *timeout > period
            {
                *timeout = period;
            }
        }
        plan.validate()?;
        plan.find_problems();
        Ok(plan)
    }

    /// Fills in [`Plan::log_target_problems`] and [`Plan::notes`].
    fn find_problems(&mut self) {
        self.log_target_problems = self
            .log_targets
            .iter()
            .filter_map(|(name, target)| {
                crate::log_target::problem(target).map(|problem| (name.clone(), problem))
            })
            .collect();
        let mut notes = BTreeMap::<String, Vec<String>>::new();
        for (name, service) in &self.services {
            if let Startup::Other(text) = &service.startup {
                notes.entry(name.clone()).or_default().push(format!(
                    "startup {} is neither \"enabled\" nor \"disabled\": not started automatically",
                    crate::go_quote(text)
                ));
            }
        }
        for (target, problem) in &self.log_target_problems {
            let config = &self.log_targets[target];
            for (name, service) in &self.services {
                if service.logs_to(config) {
                    notes.entry(name.clone()).or_default().push(format!(
                        "logs not forwarded to {}: {problem}",
                        crate::go_quote(target)
                    ));
                }
            }
        }
        self.notes = notes
            .into_iter()
            .map(|(name, notes)| (name, notes.join("; ")))
            .collect();
    }

    /// Service `name` as it runs: with its workload, if it names one, applied. The process
    /// gets the workload's user and group and its environment, with the service's own
    /// environment over it. Commands run in the service's context (exec checks,
    /// `POST /v1/exec` with `service-context`) inherit the same, and a replan compares this
    /// form, so a service whose workload changed is restarted. Borrowed, without a copy, for
    /// a service without a workload.
    pub fn service_to_run(&self, name: &str) -> Option<Cow<'_, Service>> {
        let service = self.services.get(name)?;
        let Some(workload) = self.workloads.get(&service.workload) else {
            return Some(Cow::Borrowed(service));
        };
        let mut environment = workload.environment.clone();
        environment.extend(
            service
                .environment
                .iter()
                .map(|(k, v)| (k.clone(), v.clone())),
        );
        Some(Cow::Owned(Service {
            environment,
            user_id: workload.user_id,
            user: workload.user.clone(),
            group_id: workload.group_id,
            group: workload.group.clone(),
            ..service.clone()
        }))
    }

    /// Returns a new plan with `layer` added, as `POST /v1/layers` does.
    ///
    /// - A label already present is an error unless `combine` is set, in which case the new
    ///   layer is merged into the existing one, which keeps its place.
    /// - Otherwise the layer is appended with the next free thousand as its order. A label
    ///   `dir/name` whose `dir` already has layers goes after them, which is an insertion
    ///   (allowed only with `inner`) unless they are the last layers.
    ///
    /// The reserved `pebble-` label prefix is enforced by [`Layer::parse`], so layers the
    /// daemon builds itself ([`service_args_layer`]) can be added here.
    pub fn add_layer(
        &self,
        mut layer: Layer,
        combine: bool,
        inner: bool,
    ) -> Result<Plan, PlanError> {
        let existing = self.layers.iter().position(|l| l.label == layer.label);
        let mut layers = self.layers.clone();
        match existing {
            Some(index) if combine => {
                let found = &layers[index];
                let mut combined = combine_layers(&[found.clone(), layer])?;
                combined.order = found.order;
                combined.label.clone_from(&found.label);
                layers[index] = combined;
            }
            Some(_) => {
                return Err(PlanError::LayerExists { label: layer.label });
            }
            None => {
                let (index, order) = self.append_position(&layer.label);
                if index != layers.len() && !inner {
                    return Err(PlanError::InnerRequired);
                }
                layer.order = order;
                layers.insert(index, layer);
            }
        }
        let plan = Plan::from_layers(layers)?;
        // Pebble's workloads section is immutable: the layers loaded at start-up fix it.
        if plan.workloads != self.workloads {
            return Err(PlanError::ImmutableSection {
                section: "workloads",
            });
        }
        Ok(plan)
    }

    /// Where a new label goes: after the last layer of its sub-directory if that exists,
    /// otherwise at the end with the next thousand (plus one inside a new sub-directory).
    fn append_position(&self, label: &str) -> (usize, u64) {
        let Some(last) = self.layers.last() else {
            return (0, 1000);
        };
        let (dir, has_dir) = match label.split_once('/') {
            Some((dir, _)) => (dir, true),
            None => (label, false),
        };
        let same_dir = self.layers.iter().rposition(|l| {
            let existing_dir = l.label.split_once('/').map_or(l.label.as_str(), |(d, _)| d);
            existing_dir == dir
        });
        if let Some(index) = same_dir {
            return (index + 1, self.layers[index].order + 1);
        }
        let order = (last.order / 1000 + 1) * 1000 + u64::from(has_dir);
        (self.layers.len(), order)
    }

    /// Services with `startup: enabled`, sorted by name: what autostart starts.
    pub fn default_services(&self) -> Vec<String> {
        self.services
            .values()
            .filter(|service| service.is_enabled())
            .map(|service| service.name.clone())
            .collect()
    }

    /// Whole-plan checks (Pebble's `Plan.Validate`), run after every combine.
    fn validate(&self) -> Result<(), PlanError> {
        for (name, service) in &self.services {
            if service.command.is_empty() {
                return Err(PlanError::MissingCommand {
                    service: name.clone(),
                });
            }
            if let Some(check) = service
                .requires_checks
                .iter()
                .find(|check| !self.checks.contains_key(*check))
            {
                return Err(PlanError::UnknownRequiredCheck {
                    service: name.clone(),
                    check: check.clone(),
                });
            }
        }
        self.validate_held_sockets()?;
        for (name, service) in &self.services {
            if service.watchdog.is_some() && service.readiness != Readiness::Notify {
                return Err(PlanError::WatchdogWithoutNotify {
                    service: name.clone(),
                });
            }
            if service.type_.is_oneshot() && service.readiness == Readiness::Notify {
                return Err(PlanError::OneshotWithNotify {
                    service: name.clone(),
                });
            }
        }
        for (name, check) in &self.checks {
            let missing = |kind, field| PlanError::MissingCheckField {
                check: name.clone(),
                kind,
                field,
            };
            if check.http.as_ref().is_some_and(|http| http.url.is_empty()) {
                return Err(missing("http", "url"));
            }
            if check.tcp.as_ref().is_some_and(|tcp| tcp.port == 0) {
                return Err(missing("tcp", "port"));
            }
            if let Some(exec) = &check.exec {
                if exec.command.is_empty() {
                    return Err(missing("exec", "command"));
                }
                if !exec.service_context.is_empty()
                    && !self.services.contains_key(&exec.service_context)
                {
                    return Err(PlanError::UnknownServiceContext {
                        check: name.clone(),
                        service: exec.service_context.clone(),
                    });
                }
            }
            let types = [
                check.http.is_some(),
                check.tcp.is_some(),
                check.exec.is_some(),
            ];
            if types.iter().filter(|&&present| present).count() != 1 {
                return Err(PlanError::CheckTypeCount {
                    check: name.clone(),
                });
            }
        }
        for (name, target) in &self.log_targets {
            if !LOG_TARGET_TYPES.contains(&target.type_.as_str()) {
                return Err(PlanError::MissingLogTargetType {
                    target: name.clone(),
                });
            }
            for entry in &target.services {
                let service = entry.strip_prefix('-').unwrap_or(entry);
                if service != "all" && !self.services.contains_key(service) {
                    return Err(PlanError::UnknownLogTargetService {
                        target: name.clone(),
                        service: service.to_owned(),
                    });
                }
            }
            if target.location.is_empty() {
                return Err(PlanError::MissingLogTargetLocation {
                    target: name.clone(),
                });
            }
        }
        // Unknown `requires` and before/after cycles both surface from ordering everything.
        let all: Vec<String> = self.services.keys().cloned().collect();
        self.start_order(&all)?;
        self.validate_workloads()
    }

    /// The sockets extension's checks of the whole plan: every held socket has an address
    /// (a `merge` layer may have left it to an earlier one), and no two of them overlap.
    fn validate_held_sockets(&self) -> Result<(), PlanError> {
        let mut bound: Vec<(&str, &str, ListenAddress)> = Vec::new();
        for (service, config) in &self.services {
            for (socket, held) in &config.sockets {
                let address = held.address().map_err(|reason| PlanError::InvalidSocket {
                    service: service.clone(),
                    socket: socket.clone(),
                    field: "listen",
                    value: held.listen.clone(),
                    reason,
                })?;
                if let Some((other_service, other_socket, _)) =
                    bound.iter().find(|(_, _, other)| other.overlaps(&address))
                {
                    return Err(PlanError::SocketAddressTwice {
                        service: service.clone(),
                        socket: socket.clone(),
                        address: held.listen.clone(),
                        other_service: (*other_service).to_owned(),
                        other_socket: (*other_socket).to_owned(),
                    });
                }
                bound.push((service, socket, address));
            }
        }
        Ok(())
    }

    /// The workloads extension's checks of the whole plan: each service's workload exists
    /// and the service has no user or group of its own; each workload's user and group can
    /// work together. Whether the named users and groups exist is for the daemon to find out
    /// (this crate reads no user database).
    fn validate_workloads(&self) -> Result<(), PlanError> {
        for (name, service) in &self.services {
            if service.workload.is_empty() {
                continue;
            }
            if !self.workloads.contains_key(&service.workload) {
                return Err(PlanError::UndefinedWorkload {
                    workload: service.workload.clone(),
                    service: name.clone(),
                });
            }
            if service.user_id.is_some() || !service.user.is_empty() {
                return Err(PlanError::WorkloadWithUser {
                    service: name.clone(),
                });
            }
            if service.group_id.is_some() || !service.group.is_empty() {
                return Err(PlanError::WorkloadWithGroup {
                    service: name.clone(),
                });
            }
        }
        for (name, workload) in &self.workloads {
            if workload.has_group() && !workload.has_user() {
                return Err(PlanError::WorkloadUserGroup {
                    name: name.clone(),
                    reason: "must specify user, not just group".into(),
                });
            }
        }
        Ok(())
    }
}

/// Builds the layer `pebble run --args` adds: for each named service, a `merge` entry whose
/// command is the current base command with `args` as its new default arguments.
pub fn service_args_layer(
    plan: &Plan,
    args: &BTreeMap<String, Vec<String>>,
) -> Result<Layer, PlanError> {
    let mut layer = Layer {
        label: SERVICE_ARGS_LABEL.to_owned(),
        ..Layer::default()
    };
    for (name, service_args) in args {
        let service = plan
            .services
            .get(name)
            .ok_or_else(|| PlanError::ServiceArgsUnknownService { name: name.clone() })?;
        let (base, _) = service.parse_command()?;
        layer.services.insert(
            name.clone(),
            Service {
                name: name.clone(),
                override_: Override::Merge,
                command: command_string(&base, service_args),
                ..Service::default()
            },
        );
    }
    Ok(layer)
}
