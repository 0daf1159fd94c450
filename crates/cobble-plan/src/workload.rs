//! The two top-level sections beyond services, checks and log targets: `workloads:` and
//! `pairing:`.
//!
//! Pebble adds these through its plan extensions, so they follow rules of their own rather
//! than those of the built-in entries:
//!
//! - A workload is the user, group and environment that services naming it in their
//!   `workload:` field run with. Its `override` is checked when layers are combined (with its
//!   own wording), not when a layer is parsed. The section cannot change once the daemon has
//!   loaded its layers: a layer added later may repeat it, but any difference in the
//!   combined section is refused ([`PlanError::ImmutableSection`]).
//! - `pairing:` holds one field, `mode`; the last layer that sets it wins. It may change at
//!   any time.

use std::collections::BTreeMap;

use crate::error::PlanError;
use crate::service::{merge_map, merge_option, merge_string};

/// One entry of the `workloads:` section.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Workload {
    /// The key under `workloads:`.
    pub name: String,
    /// `merge` or `replace`, as written: Pebble checks it only when layers are combined, and
    /// keeps it in the combined plan (which prints it).
    pub override_: String,
    /// Environment variables for the services that run in this workload; a service's own
    /// `environment` is applied over it.
    pub environment: BTreeMap<String, String>,
    /// Numeric user.
    pub user_id: Option<u32>,
    /// User name.
    pub user: String,
    /// Numeric group.
    pub group_id: Option<u32>,
    /// Group name.
    pub group: String,
}

impl Workload {
    /// Applies a `merge` entry: set fields win, the environment merges per variable. The
    /// existing entry keeps its `override`.
    fn merge(&mut self, other: &Workload) {
        merge_map(&mut self.environment, &other.environment);
        merge_option(&mut self.user_id, other.user_id);
        merge_string(&mut self.user, &other.user);
        merge_option(&mut self.group_id, other.group_id);
        merge_string(&mut self.group, &other.group);
    }

    /// Whether a user is given (by name or number).
    pub(crate) fn has_user(&self) -> bool {
        self.user_id.is_some() || !self.user.is_empty()
    }

    /// Whether a group is given (by name or number).
    pub(crate) fn has_group(&self) -> bool {
        self.group_id.is_some() || !self.group.is_empty()
    }
}

/// Combines one layer's workloads into `combined`, with Pebble's words for a missing or
/// unknown `override`.
pub(crate) fn combine_workloads(
    combined: &mut BTreeMap<String, Workload>,
    layer: &BTreeMap<String, Workload>,
) -> Result<(), PlanError> {
    for (name, workload) in layer {
        match workload.override_.as_str() {
            "merge" if combined.contains_key(name) => {
                if let Some(existing) = combined.get_mut(name) {
                    existing.merge(workload);
                }
            }
            "merge" | "replace" => {
                combined.insert(name.clone(), workload.clone());
            }
            "" => return Err(PlanError::WorkloadWithoutOverride { name: name.clone() }),
            other => {
                return Err(PlanError::WorkloadInvalidOverride {
                    name: name.clone(),
                    value: other.to_owned(),
                });
            }
        }
    }
    Ok(())
}

/// `pairing: mode:`, which decides whether HTTPS clients may pair with the daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum PairingMode {
    /// Not given in any layer: the same as disabled, but not printed in the plan.
    #[default]
    Unset,
    /// No client can pair.
    Disabled,
    /// One client can pair, once.
    Single,
    /// Any number of clients can pair.
    Multiple,
}

impl PairingMode {
    /// The YAML spelling (`""` when unset).
    pub fn as_str(self) -> &'static str {
        match self {
            PairingMode::Unset => "",
            PairingMode::Disabled => "disabled",
            PairingMode::Single => "single",
            PairingMode::Multiple => "multiple",
        }
    }

    pub(crate) fn parse(text: &str) -> Option<PairingMode> {
        Some(match text {
            "" => PairingMode::Unset,
            "disabled" => PairingMode::Disabled,
            "single" => PairingMode::Single,
            "multiple" => PairingMode::Multiple,
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workload(override_: &str, user: &str, env: &[(&str, &str)]) -> Workload {
        Workload {
            name: "w".into(),
            override_: override_.into(),
            user: user.into(),
            environment: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Workload::default()
        }
    }

    #[test]
    fn merge_keeps_the_first_override_and_merges_the_environment() {
        let mut combined = BTreeMap::new();
        let first = [("w".to_string(), workload("replace", "alice", &[("A", "1")]))].into();
        let second = [(
            "w".to_string(),
            Workload {
                group_id: Some(7),
                ..workload("merge", "", &[("A", "2"), ("B", "3")])
            },
        )]
        .into();
        combine_workloads(&mut combined, &first).unwrap();
        combine_workloads(&mut combined, &second).unwrap();
        let w = &combined["w"];
        assert_eq!(w.override_, "replace");
        assert_eq!(w.user, "alice");
        assert_eq!(w.group_id, Some(7));
        assert_eq!(w.environment["A"], "2");
        assert_eq!(w.environment["B"], "3");
        // A replace starts over.
        let third = [("w".to_string(), workload("replace", "", &[]))].into();
        combine_workloads(&mut combined, &third).unwrap();
        assert_eq!(combined["w"], workload("replace", "", &[]));
    }

    #[test]
    fn a_bad_override_is_worded_like_pebble() {
        let mut combined = BTreeMap::new();
        let missing = [("w".to_string(), workload("", "", &[]))].into();
        assert_eq!(
            combine_workloads(&mut combined, &missing)
                .unwrap_err()
                .to_string(),
            "workload \"w\": must define an \"override\" policy"
        );
        let bogus = [("w".to_string(), workload("bogus", "", &[]))].into();
        assert_eq!(
            combine_workloads(&mut combined, &bogus)
                .unwrap_err()
                .to_string(),
            "workload \"w\": has an invalid \"override\" policy: \"bogus\""
        );
    }
}
