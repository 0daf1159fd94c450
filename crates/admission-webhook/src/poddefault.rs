//! The `PodDefault` custom resource (`kubeflow.org/v1alpha1`, namespaced, plural
//! `poddefaults`), typed the way the Go webhook decodes it.
//!
//! Lists whose absence and emptiness mean the same thing to the merge are plain `Vec`s and
//! maps; `command`, `args` and `automountServiceAccountToken` keep `Option` because the merge
//! tells "not set" from "set to empty" for them, as Go tells nil from an empty slice. JSON
//! `null` reads as "not set" everywhere, as in Go.

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::{
    Container, EnvFromSource, EnvVar, LocalObjectReference, Toleration, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use serde::{Deserialize, Deserializer, Serialize};

/// One PodDefault as the API server returns it.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
pub struct PodDefault {
    /// Name, namespace and resourceVersion are what the webhook reads.
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default, deserialize_with = "nullable")]
    pub spec: PodDefaultSpec,
}

/// What a PodDefault injects into the pods its selector matches.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodDefaultSpec {
    /// A value, not a pointer, in Go: an absent or empty selector matches every pod.
    #[serde(default, deserialize_with = "nullable")]
    pub selector: LabelSelector,
    /// Shown by the notebook UI; never applied.
    #[serde(default, deserialize_with = "nullable")]
    pub desc: String,
    #[serde(default, deserialize_with = "nullable")]
    pub service_account_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub automount_service_account_token: Option<bool>,
    #[serde(default, deserialize_with = "nullable")]
    pub env: Vec<EnvVar>,
    #[serde(default, deserialize_with = "nullable")]
    pub env_from: Vec<EnvFromSource>,
    #[serde(default, deserialize_with = "nullable")]
    pub volumes: Vec<Volume>,
    #[serde(default, deserialize_with = "nullable")]
    pub volume_mounts: Vec<VolumeMount>,
    #[serde(default, deserialize_with = "nullable")]
    pub annotations: BTreeMap<String, String>,
    #[serde(default, deserialize_with = "nullable")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, deserialize_with = "nullable")]
    pub tolerations: Vec<Toleration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Vec<String>>,
    #[serde(default, deserialize_with = "nullable")]
    pub image_pull_secrets: Vec<LocalObjectReference>,
    #[serde(default, deserialize_with = "nullable")]
    pub init_containers: Vec<Container>,
    #[serde(default, deserialize_with = "nullable")]
    pub sidecars: Vec<Container>,
}

/// Reads `null` as the type's empty value, as Go's decoder leaves a nil slice or map.
fn nullable<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

impl PodDefault {
    /// The name, or "" when unset (as Go's `GetName`).
    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }

    /// The namespace, or "".
    pub fn ns(&self) -> &str {
        self.metadata.namespace.as_deref().unwrap_or_default()
    }

    /// The resourceVersion, or "": the value of the marker annotation.
    pub fn rv(&self) -> &str {
        self.metadata
            .resource_version
            .as_deref()
            .unwrap_or_default()
    }
}

impl kube::Resource for PodDefault {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        "PodDefault".into()
    }

    fn group(_: &()) -> Cow<'_, str> {
        "kubeflow.org".into()
    }

    fn version(_: &()) -> Cow<'_, str> {
        "v1alpha1".into()
    }

    fn plural(_: &()) -> Cow<'_, str> {
        "poddefaults".into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nulls_and_absent_fields_read_as_empty() {
        let pd: PodDefault = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "a", "namespace": "ns", "resourceVersion": "7"},
            "spec": {"selector": null, "env": null, "command": null, "args": []}
        }))
        .unwrap();
        assert_eq!(pd.name(), "a");
        assert_eq!(pd.rv(), "7");
        assert_eq!(pd.ns(), "ns");
        assert_eq!(pd.spec.selector, LabelSelector::default());
        assert!(pd.spec.env.is_empty());
        assert_eq!(pd.spec.command, None);
        assert_eq!(pd.spec.args, Some(vec![]));
    }
}
