//! The pure core: which PodDefaults select a pod, whether they conflict, how they merge into
//! it, and the JSON Patch from the pod as sent to the pod as mutated. No IO here.
//!
//! The rules are Kubeflow's Go webhook's, step for step:
//! - every PodDefault in the list must have a valid selector, or the admission is denied;
//! - conflicts are looked for first, across the pod and between the matched PodDefaults,
//!   and any conflict denies the pod with all of them listed;
//! - "identical" is equality of the whole element (Go's `reflect.DeepEqual`), a conflict is
//!   the same key with any difference; identical items are not added twice;
//! - env, envFrom and volumeMounts go into the containers the pod already has (not init
//!   containers, not injected sidecars); command and args only where the container has none,
//!   and never into `istio-proxy`;
//! - each matched PodDefault leaves the annotation
//!   `poddefault.admission.kubeflow.org/poddefault-<name>: <resourceVersion>`.
//!
//! One Go bug is not copied: a sidecar identical to a container the pod already has is
//! judged against that container as it was sent (so it is dropped as a duplicate); Go
//! judges it after its env and mounts were filled in, finds a difference, and empties
//! `spec.containers`.
//!
//! Conflict texts keep Go's wording; the two items are shown as JSON where Go prints its
//! struct syntax (`%#v`).

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::{Container, Pod};
use serde::Serialize;

use crate::aggregate::GoError;
use crate::poddefault::{PodDefault, PodDefaultSpec};
use crate::selector::{self, Selector};

/// Prefix of the annotations the webhook reads and writes.
pub const ANNOTATION_PREFIX: &str = "poddefault.admission.kubeflow.org";
/// A pod with this annotation set to "true" is left alone.
pub const EXCLUDE_ANNOTATION: &str = "poddefault.admission.kubeflow.org/exclude";
/// Static pods mirrored by the kubelet are left alone.
pub const MIRROR_POD_ANNOTATION: &str = "kubernetes.io/config.mirror";
/// The one container whose command and args a PodDefault never sets.
pub const ISTIO_PROXY: &str = "istio-proxy";

/// Whether the pod opts out of mutation (exclude annotation, or a mirror pod).
pub fn is_excluded(pod: &Pod) -> bool {
    pod.metadata.annotations.as_ref().is_some_and(|a| {
        a.get(EXCLUDE_ANNOTATION).is_some_and(|v| v == "true")
            || a.contains_key(MIRROR_POD_ANNOTATION)
    })
}

/// The PodDefaults that select this pod, in list order. Any invalid selector in the list is
/// an error, whether or not it would have matched.
pub fn filter<'a>(list: &'a [PodDefault], pod: &Pod) -> Result<Vec<&'a PodDefault>, String> {
    let empty = BTreeMap::new();
    let labels = pod.metadata.labels.as_ref().unwrap_or(&empty);
    let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
    let mut matched = Vec::new();
    for pd in list {
        let selector = Selector::parse(&pd.spec.selector).map_err(|err| {
            // Go's format string names the selector and the error the other way round.
            format!(
                "label selector conversion failed: {} for selector: {err}",
                selector::go_format(&pd.spec.selector)
            )
        })?;
        if selector.matches(labels) && pd.ns() == namespace {
            matched.push(pd);
        }
    }
    Ok(matched)
}

/// Checks that the PodDefaults can all be applied to the pod. The error is the whole deny
/// message.
pub fn check(pod: &Pod, pds: &[&PodDefault]) -> Result<(), String> {
    let mut errors = Vec::new();
    let spec = pod.spec.clone().unwrap_or_default();
    errors.extend(
        merge_by_key(
            spec.volumes.as_deref().unwrap_or_default(),
            pds,
            |s| &s.volumes,
            |v| &v.name,
            "volumes",
        )
        .error,
    );
    errors.extend(
        merge_by_key(
            spec.tolerations.as_deref().unwrap_or_default(),
            pds,
            |s| &s.tolerations,
            |t| t.key.as_deref().unwrap_or_default(),
            "tolerations",
        )
        .error,
    );
    errors.extend(
        merge_by_key(
            spec.image_pull_secrets.as_deref().unwrap_or_default(),
            pds,
            |s| &s.image_pull_secrets,
            |s| &s.name,
            "imagePullSecret",
        )
        .error,
    );
    for container in &spec.containers {
        let mut container_errors = Vec::new();
        container_errors.extend(env(container, pds).error);
        container_errors.extend(volume_mounts(container, pds).error);
        errors.extend(GoError::aggregate(container_errors));
    }
    errors.extend(merge_maps(pod.metadata.annotations.as_ref(), pds, |s| &s.annotations).error);
    errors.extend(merge_maps(pod.metadata.labels.as_ref(), pds, |s| &s.labels).error);
    errors.extend(
        merge_by_key(
            spec.init_containers.as_deref().unwrap_or_default(),
            pds,
            |s| &s.init_containers,
            |c| &c.name,
            "containers",
        )
        .error,
    );
    errors.extend(
        merge_by_key(
            &spec.containers,
            pds,
            |s| &s.sidecars,
            |c| &c.name,
            "containers",
        )
        .error,
    );

    match GoError::aggregate(errors) {
        None => Ok(()),
        Some(error) => {
            let names: Vec<&str> = pds.iter().map(|pd| pd.name()).collect();
            Err(format!(
                "conflict occurred while applying poddefaults: {} on pod: {} err: {error}",
                names.join(","),
                pod.metadata.name.as_deref().unwrap_or_default()
            ))
        }
    }
}

/// Applies the PodDefaults to the pod. Call [`check`] first: items that conflict are
/// skipped here, not reported.
pub fn apply(pod: &mut Pod, pds: &[&PodDefault]) {
    if pds.is_empty() {
        return;
    }
    let spec = pod.spec.get_or_insert_with(Default::default);
    // Sidecars are judged against the containers as they were sent (see the module docs).
    let sidecars = merge_by_key(&spec.containers, pds, |s| &s.sidecars, |c| &c.name, "");
    let added_sidecars = sidecars.items[spec.containers.len()..].to_vec();

    spec.volumes = non_empty(
        merge_by_key(
            spec.volumes.as_deref().unwrap_or_default(),
            pds,
            |s| &s.volumes,
            |v| &v.name,
            "",
        )
        .items,
    );
    spec.tolerations = non_empty(
        merge_by_key(
            spec.tolerations.as_deref().unwrap_or_default(),
            pds,
            |s| &s.tolerations,
            |t| t.key.as_deref().unwrap_or_default(),
            "",
        )
        .items,
    );
    spec.image_pull_secrets = non_empty(
        merge_by_key(
            spec.image_pull_secrets.as_deref().unwrap_or_default(),
            pds,
            |s| &s.image_pull_secrets,
            |s| &s.name,
            "",
        )
        .items,
    );
    for pd in pds {
        if let Some(automount) = pd.spec.automount_service_account_token {
            spec.automount_service_account_token = Some(automount);
        }
        if !pd.spec.service_account_name.is_empty() {
            spec.service_account_name = Some(pd.spec.service_account_name.clone());
        }
    }
    for container in &mut spec.containers {
        container.env = non_empty(env(container, pds).items);
        container.volume_mounts = non_empty(volume_mounts(container, pds).items);
        let mut env_from = container.env_from.take().unwrap_or_default();
        for pd in pds {
            env_from.extend(pd.spec.env_from.iter().cloned());
        }
        container.env_from = non_empty(env_from);
        set_command_and_args(container, pds);
    }
    spec.init_containers = non_empty(
        merge_by_key(
            spec.init_containers.as_deref().unwrap_or_default(),
            pds,
            |s| &s.init_containers,
            |c| &c.name,
            "",
        )
        .items,
    );
    spec.containers.extend(added_sidecars);

    let metadata = &mut pod.metadata;
    let mut annotations = merge_maps(metadata.annotations.as_ref(), pds, |s| &s.annotations).items;
    metadata.labels = Some(merge_maps(metadata.labels.as_ref(), pds, |s| &s.labels).items);
    for pd in pds {
        annotations.insert(
            format!("{ANNOTATION_PREFIX}/poddefault-{}", pd.name()),
            pd.rv().to_owned(),
        );
    }
    metadata.annotations = Some(annotations);
}

/// Sets command and args where the container has none, from the first PodDefault that has
/// them; never on the istio sidecar.
pub fn set_command_and_args(container: &mut Container, pds: &[&PodDefault]) {
    if container.name == ISTIO_PROXY {
        return;
    }
    for pd in pds {
        if container.command.is_none() && pd.spec.command.is_some() {
            container.command = pd.spec.command.clone();
        }
        if container.args.is_none() && pd.spec.args.is_some() {
            container.args = pd.spec.args.clone();
        }
    }
}

/// The JSON Patch that turns `original` into `mutated`, both as this webhook serialises
/// them. Call [`normalize`] on both first.
pub fn patch(original: &Pod, mutated: &Pod) -> json_patch::Patch {
    let before = serde_json::to_value(original).expect("a pod serialises");
    let after = serde_json::to_value(mutated).expect("a pod serialises");
    json_patch::diff(&before, &after)
}

/// Turns every empty list or map the merge reads or writes into "absent".
///
/// The API server sends pods without empty lists and maps (Go's `omitempty`), and the
/// patch is applied to its copy, so the diff must not see an empty list on one side and
/// nothing on the other: an `add` of `[]` is noise, and a `remove` of a member the API
/// server's copy does not have fails the whole patch. Fields the merge never touches are
/// left as they are on both sides and so never show up in the diff.
pub fn normalize(pod: &mut Pod) {
    fn clear<T: IsEmpty>(field: &mut Option<T>) {
        if field.as_ref().is_some_and(IsEmpty::is_empty) {
            *field = None;
        }
    }
    clear(&mut pod.metadata.annotations);
    clear(&mut pod.metadata.labels);
    if let Some(spec) = &mut pod.spec {
        clear(&mut spec.volumes);
        clear(&mut spec.tolerations);
        clear(&mut spec.image_pull_secrets);
        clear(&mut spec.init_containers);
        for container in &mut spec.containers {
            clear(&mut container.env);
            clear(&mut container.env_from);
            clear(&mut container.volume_mounts);
            clear(&mut container.command);
            clear(&mut container.args);
        }
    }
}

trait IsEmpty {
    fn is_empty(&self) -> bool;
}

impl<T> IsEmpty for Vec<T> {
    fn is_empty(&self) -> bool {
        Vec::is_empty(self)
    }
}

impl<K, V> IsEmpty for BTreeMap<K, V> {
    fn is_empty(&self) -> bool {
        BTreeMap::is_empty(self)
    }
}

fn non_empty<T>(items: Vec<T>) -> Option<Vec<T>> {
    (!items.is_empty()).then_some(items)
}

/// The result of one merge: the merged list, and the conflicts found on the way.
struct Merged<T> {
    items: T,
    error: Option<GoError>,
}

fn env(
    container: &Container,
    pds: &[&PodDefault],
) -> Merged<Vec<k8s_openapi::api::core::v1::EnvVar>> {
    merge_by_key(
        container.env.as_deref().unwrap_or_default(),
        pds,
        |s| &s.env,
        |e| &e.name,
        "env",
    )
}

/// Volume mounts are keyed twice, by name and by mount path, each checked on its own.
fn volume_mounts(
    container: &Container,
    pds: &[&PodDefault],
) -> Merged<Vec<k8s_openapi::api::core::v1::VolumeMount>> {
    let existing = container.volume_mounts.as_deref().unwrap_or_default();
    let mut by_name: HashMap<&str, _> = existing.iter().map(|m| (m.name.as_str(), m)).collect();
    let mut by_path: HashMap<&str, _> = existing
        .iter()
        .map(|m| (m.mount_path.as_str(), m))
        .collect();
    let mut merged = existing.to_vec();
    let mut errors = Vec::new();
    for pd in pds {
        for mount in &pd.spec.volume_mounts {
            match by_name.get(mount.name.as_str()) {
                None => {
                    by_name.insert(&mount.name, mount);
                    merged.push(mount.clone());
                }
                Some(found) if *found != mount => {
                    errors.push(conflict("volume mounts", pd, &mount.name, mount, *found))
                }
                Some(_) => {}
            }
            match by_path.get(mount.mount_path.as_str()) {
                None => {
                    by_path.insert(&mount.mount_path, mount);
                }
                Some(found) if *found != mount => errors.push(conflict(
                    "volume mounts",
                    pd,
                    &format!("mount path {}", mount.mount_path),
                    mount,
                    *found,
                )),
                Some(_) => {}
            }
        }
    }
    Merged {
        items: merged,
        error: GoError::aggregate(errors),
    }
}

/// The merge shared by env, volumes, tolerations, image pull secrets and containers: append
/// what is new by key, drop what is identical, report what differs.
fn merge_by_key<T: Clone + PartialEq + Serialize>(
    existing: &[T],
    pds: &[&PodDefault],
    items: impl Fn(&PodDefaultSpec) -> &Vec<T>,
    key: impl for<'x> Fn(&'x T) -> &'x str,
    what: &str,
) -> Merged<Vec<T>> {
    let mut seen: HashMap<&str, &T> = existing.iter().map(|item| (key(item), item)).collect();
    let mut merged = existing.to_vec();
    let mut errors = Vec::new();
    for pd in pds {
        for item in items(&pd.spec) {
            match seen.get(key(item)) {
                None => {
                    seen.insert(key(item), item);
                    merged.push(item.clone());
                }
                Some(found) if *found != item => {
                    errors.push(conflict(what, pd, key(item), item, *found))
                }
                Some(_) => {}
            }
        }
    }
    Merged {
        items: merged,
        error: GoError::aggregate(errors),
    }
}

/// Annotations or labels: a key with another value is a conflict.
fn merge_maps(
    existing: Option<&BTreeMap<String, String>>,
    pds: &[&PodDefault],
    items: impl Fn(&PodDefaultSpec) -> &BTreeMap<String, String>,
) -> Merged<BTreeMap<String, String>> {
    let mut merged = existing.cloned().unwrap_or_default();
    let mut errors = Vec::new();
    for pd in pds {
        for (key, value) in items(&pd.spec) {
            match merged.get(key) {
                None => {
                    merged.insert(key.clone(), value.clone());
                }
                Some(old) if old != value => errors.push(GoError::Message(format!(
                    "merging has conflict on {key}: \n{value:?}\ndoes not match\n{old:?}\n in pod"
                ))),
                Some(_) => {}
            }
        }
    }
    Merged {
        items: merged,
        error: GoError::aggregate(errors),
    }
}

fn conflict<T: Serialize>(what: &str, pd: &PodDefault, key: &str, new: &T, found: &T) -> GoError {
    let show = |v: &T| serde_json::to_string(v).unwrap_or_default();
    GoError::Message(format!(
        "merging {what} for {} has a conflict on {key}: \n{}\ndoes not match\n{}\n in container",
        pd.name(),
        show(new),
        show(found)
    ))
}

#[cfg(test)]
mod tests;
