//! AdmissionReview in, AdmissionReview out: the webhook's one endpoint without its
//! transport.
//!
//! Both `admission.k8s.io/v1` and `v1beta1` are read (their request and response fields
//! are the same), and the answer carries the version and kind the request came with and its
//! `uid`. The Go webhook answers without `apiVersion` and `kind`, which the API server only
//! tolerates for v1beta1.
//!
//! The flow is the Go webhook's: a request for anything but `pods` gets a review with no
//! response at all (the API server then fails the call, so `failurePolicy` decides); a pod
//! that is excluded or a mirror pod is allowed untouched; otherwise the PodDefaults of the
//! pod's namespace (the request's namespace when the pod names none) are listed, filtered,
//! checked for conflicts and applied, and the answer carries the JSON Patch.

use std::future::Future;
use std::pin::Pin;

use base64::Engine as _;
use k8s_openapi::api::core::v1::Pod;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::mutate;
use crate::poddefault::PodDefault;

/// Where PodDefaults come from: the API server per request, a cache, or a test table.
pub trait PodDefaults: Send + Sync {
    /// The PodDefaults of one namespace, in the API server's order (by name). The error is
    /// the text a denied pod shows.
    fn list<'a>(
        &'a self,
        namespace: &'a str,
    ) -> Pin<Box<dyn Future<Output = Result<Vec<PodDefault>, String>> + Send + 'a>>;
}

/// The review as the API server sends it.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReviewRequest {
    #[serde(default)]
    pub api_version: Option<String>,
    #[serde(default)]
    pub kind: Option<String>,
    #[serde(default)]
    pub request: Option<AdmissionRequest>,
}

/// The fields of `request` the webhook reads.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionRequest {
    #[serde(default)]
    pub uid: String,
    #[serde(default)]
    pub resource: GroupVersionResource,
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub object: Option<Value>,
}

#[derive(Debug, Default, Deserialize, PartialEq, Eq)]
pub struct GroupVersionResource {
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub version: String,
    #[serde(default)]
    pub resource: String,
}

/// The review the webhook answers with.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ReviewResponse {
    pub api_version: String,
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response: Option<AdmissionResponse>,
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionResponse {
    pub uid: String,
    pub allowed: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Status>,
    /// Base64 of the JSON Patch, as Go encodes a `[]byte`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patch: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patch_type: Option<String>,
}

/// A `metav1.Status` with only a message, as the Go webhook fills it.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub struct Status {
    #[serde(default)]
    pub metadata: serde_json::Map<String, Value>,
    pub message: String,
}

/// What the webhook decided for one pod.
#[derive(Debug, PartialEq)]
pub enum Decision {
    /// Not a pod: no response, as the Go webhook (the API server then fails the call).
    NoResponse,
    /// Allowed; the patch is `None` when nothing changes.
    Allow(Option<json_patch::Patch>),
    /// Denied with this message.
    Deny(String),
}

/// A body that is no AdmissionReview at all: answered with HTTP 400 (the Go webhook
/// panics and drops the connection).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{0}")]
pub struct BadReview(pub String);

/// Reads a review, decides, and builds the answer.
pub async fn review(body: &[u8], source: &dyn PodDefaults) -> Result<ReviewResponse, BadReview> {
    let review: ReviewRequest = serde_json::from_slice(body)
        .map_err(|e| BadReview(format!("cannot decode AdmissionReview: {e}")))?;
    let request = review
        .request
        .ok_or_else(|| BadReview("AdmissionReview has no request".into()))?;
    let decision = decide(&request, source).await;
    Ok(ReviewResponse {
        api_version: review
            .api_version
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| "admission.k8s.io/v1".into()),
        kind: review
            .kind
            .filter(|k| !k.is_empty())
            .unwrap_or_else(|| "AdmissionReview".into()),
        response: response(request.uid, decision),
    })
}

fn response(uid: String, decision: Decision) -> Option<AdmissionResponse> {
    let mut response = AdmissionResponse {
        uid,
        allowed: true,
        status: None,
        patch: None,
        patch_type: None,
    };
    match decision {
        Decision::NoResponse => return None,
        Decision::Allow(None) => {}
        Decision::Allow(Some(patch)) => {
            let bytes = serde_json::to_vec(&patch).expect("a patch serialises");
            response.patch = Some(base64::engine::general_purpose::STANDARD.encode(bytes));
            response.patch_type = Some("JSONPatch".into());
        }
        Decision::Deny(message) => {
            response.allowed = false;
            response.status = Some(Status {
                metadata: Default::default(),
                message,
            });
        }
    }
    Some(response)
}

/// The Go webhook's `mutatePods`.
pub async fn decide(request: &AdmissionRequest, source: &dyn PodDefaults) -> Decision {
    let pods = GroupVersionResource {
        group: String::new(),
        version: "v1".into(),
        resource: "pods".into(),
    };
    if request.resource != pods {
        tracing::error!("expect resource to be {{ v1 pods}}");
        return Decision::NoResponse;
    }
    let mut pod: Pod = match serde_json::from_value(request.object.clone().unwrap_or(Value::Null)) {
        Ok(pod) => pod,
        Err(err) => {
            let message = format!("cannot decode the pod: {err}");
            tracing::error!("{message}");
            return Decision::Deny(message);
        }
    };
    if pod
        .metadata
        .namespace
        .as_deref()
        .unwrap_or_default()
        .is_empty()
    {
        pod.metadata.namespace = request.namespace.clone();
    }
    mutate::normalize(&mut pod);
    if mutate::is_excluded(&pod) {
        return Decision::Allow(None);
    }
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let list = match source.list(&namespace).await {
        Ok(list) => list,
        Err(message) => {
            tracing::error!("error fetching poddefaults: {message}");
            return Decision::Deny(message);
        }
    };
    decide_with(pod, &list)
}

/// The rest of `mutatePods`, once the PodDefaults are known.
pub fn decide_with(pod: Pod, list: &[PodDefault]) -> Decision {
    let name = pod.metadata.name.clone().unwrap_or_default();
    if list.is_empty() {
        return Decision::Allow(None);
    }
    let matched = match mutate::filter(list, &pod) {
        Ok(matched) => matched,
        Err(message) => {
            tracing::error!("filtering pod defaults failed: {message}");
            return Decision::Deny(message);
        }
    };
    if matched.is_empty() {
        return Decision::Allow(None);
    }
    if let Err(message) = mutate::check(&pod, &matched) {
        tracing::warn!("{message}");
        return Decision::Deny(message);
    }
    let mut mutated = pod.clone();
    mutate::apply(&mut mutated, &matched);
    mutate::normalize(&mut mutated);
    let names: Vec<&str> = matched.iter().map(|pd| pd.name()).collect();
    tracing::info!(
        "applied poddefaults: {} successfully on pod: {name:?}",
        names.join(",")
    );
    let patch = mutate::patch(&pod, &mutated);
    Decision::Allow((!patch.0.is_empty()).then_some(patch))
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use serde_json::json;

    use super::*;

    /// A fixed answer per call, and the namespaces asked for.
    struct Table {
        answer: Result<Vec<PodDefault>, String>,
        asked: Mutex<Vec<String>>,
    }

    impl Table {
        fn new(answer: Result<Value, &str>) -> Table {
            Table {
                answer: answer
                    .map(|v| serde_json::from_value(v).unwrap())
                    .map_err(str::to_owned),
                asked: Mutex::default(),
            }
        }
    }

    impl PodDefaults for Table {
        fn list<'a>(
            &'a self,
            namespace: &'a str,
        ) -> Pin<Box<dyn Future<Output = Result<Vec<PodDefault>, String>> + Send + 'a>> {
            self.asked.lock().unwrap().push(namespace.to_owned());
            Box::pin(std::future::ready(self.answer.clone()))
        }
    }

    fn request(version: &str, resource: &str, pod: Value) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "apiVersion": format!("admission.k8s.io/{version}"),
            "kind": "AdmissionReview",
            "request": {
                "uid": "5b1c-uid",
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": resource},
                "namespace": "user1",
                "operation": "CREATE",
                "object": pod,
            }
        }))
        .unwrap()
    }

    fn one_poddefault() -> Value {
        json!([{"metadata": {"name": "env", "namespace": "user1", "resourceVersion": "9"},
                "spec": {"selector": {}, "env": [{"name": "A", "value": "1"}]}}])
    }

    fn patched(pod: &Value, answer: &ReviewResponse) -> Value {
        let response = answer.response.as_ref().unwrap();
        assert!(response.allowed);
        assert_eq!(response.patch_type.as_deref(), Some("JSONPatch"));
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(response.patch.as_ref().unwrap())
            .unwrap();
        let patch: json_patch::Patch = serde_json::from_slice(&bytes).unwrap();
        let mut pod = pod.clone();
        json_patch::patch(&mut pod, &patch).unwrap();
        pod
    }

    #[tokio::test]
    async fn both_versions_are_answered_in_their_own_version_with_the_uid() {
        let pod =
            json!({"metadata": {"generateName": "nb-"}, "spec": {"containers": [{"name": "nb"}]}});
        for version in ["v1", "v1beta1"] {
            let source = Table::new(Ok(one_poddefault()));
            let answer = review(&request(version, "pods", pod.clone()), &source)
                .await
                .unwrap();
            assert_eq!(answer.api_version, format!("admission.k8s.io/{version}"));
            assert_eq!(answer.kind, "AdmissionReview");
            assert_eq!(answer.response.as_ref().unwrap().uid, "5b1c-uid");
            // No namespace in the pod: the request's is used.
            assert_eq!(*source.asked.lock().unwrap(), ["user1"]);
            let after = patched(&pod, &answer);
            assert_eq!(
                after["spec"]["containers"][0]["env"],
                json!([{"name": "A", "value": "1"}])
            );
            assert_eq!(
                after["metadata"]["annotations"],
                json!({"poddefault.admission.kubeflow.org/poddefault-env": "9"})
            );
        }
    }

    #[tokio::test]
    async fn other_resources_get_no_response() {
        let source = Table::new(Ok(one_poddefault()));
        let answer = review(&request("v1", "services", json!({})), &source)
            .await
            .unwrap();
        assert_eq!(answer.response, None);
        assert_eq!(
            serde_json::to_value(&answer).unwrap(),
            json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"})
        );
        assert!(source.asked.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn excluded_pods_are_allowed_without_asking() {
        let source = Table::new(Err("unreachable"));
        let pod = json!({"metadata": {"annotations": {"poddefault.admission.kubeflow.org/exclude": "true"}}, "spec": {"containers": []}});
        let answer = review(&request("v1", "pods", pod), &source).await.unwrap();
        let response = answer.response.unwrap();
        assert!(response.allowed);
        assert_eq!(response.patch, None);
        assert!(source.asked.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_list_error_denies_with_its_text() {
        let source = Table::new(Err("poddefaults.kubeflow.org is forbidden"));
        let pod = json!({"metadata": {"namespace": "own"}, "spec": {"containers": []}});
        let answer = review(&request("v1", "pods", pod), &source).await.unwrap();
        assert_eq!(*source.asked.lock().unwrap(), ["own"]);
        assert_eq!(
            serde_json::to_value(answer.response.unwrap()).unwrap(),
            json!({"uid": "5b1c-uid", "allowed": false,
                   "status": {"metadata": {}, "message": "poddefaults.kubeflow.org is forbidden"}})
        );
    }

    #[tokio::test]
    async fn nothing_to_do_is_allowed_without_a_patch() {
        for list in [
            json!([]),
            json!([{"metadata": {"name": "x", "namespace": "user1"}, "spec": {"selector": {"matchLabels": {"a": "b"}}}}]),
        ] {
            let source = Table::new(Ok(list));
            let answer = review(
                &request("v1", "pods", json!({"spec": {"containers": []}})),
                &source,
            )
            .await
            .unwrap();
            let response = answer.response.unwrap();
            assert!(response.allowed);
            assert_eq!(response.patch, None);
        }
    }

    #[tokio::test]
    async fn garbage_is_a_bad_request_and_a_bad_pod_is_denied() {
        let source = Table::new(Ok(json!([])));
        assert!(review(b"not json", &source).await.is_err());
        assert_eq!(
            review(
                br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#,
                &source
            )
            .await,
            Err(BadReview("AdmissionReview has no request".into()))
        );
        let answer = review(&request("v1", "pods", json!({"spec": "nope"})), &source)
            .await
            .unwrap();
        let response = answer.response.unwrap();
        assert!(!response.allowed);
        assert!(
            response
                .status
                .unwrap()
                .message
                .starts_with("cannot decode the pod: ")
        );
    }
}
