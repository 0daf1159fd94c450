//! Fixtures shared by the integration tests.

#![allow(dead_code)]

pub(crate) mod apiserver;
pub(crate) mod client;
pub(crate) mod webhook;

use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine as _;
use serde_json::{Value, json};

pub(crate) use apiserver::{Ca, FakeApiServer, Leaf};
pub(crate) use client::{Client, presented_cert};
pub(crate) use webhook::Webhook;

/// Generous bounds for a busy 2-core machine; tests wait on events up to these.
pub(crate) const STARTUP: Duration = Duration::from_secs(10);

/// A scratch directory with the webhook's CA and two leaf pairs.
pub(crate) struct Scratch {
    pub dir: tempfile::TempDir,
    pub ca: Ca,
    pub a: Leaf,
    pub b: Leaf,
}

impl Scratch {
    pub(crate) fn new() -> Scratch {
        let ca = Ca::new("webhook-test-ca");
        let a = ca.leaf();
        let b = ca.leaf();
        Scratch {
            dir: tempfile::tempdir().unwrap(),
            ca,
            a,
            b,
        }
    }

    pub(crate) fn path(&self, relative: &str) -> PathBuf {
        self.dir.path().join(relative)
    }

    pub(crate) fn home(&self) -> PathBuf {
        let home = self.path("home");
        std::fs::create_dir_all(&home).unwrap();
        home
    }
}

/// Writes a pair to `dir/cert.pem` and `dir/key.pem` (creating `dir`).
pub(crate) fn write_pair(dir: &Path, leaf: &Leaf) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("key.pem"), &leaf.key_pem).unwrap();
    std::fs::write(dir.join("cert.pem"), &leaf.cert_pem).unwrap();
}

/// The flags that point the webhook at `dir`'s pair on an ephemeral port.
pub(crate) fn cert_args(dir: &Path) -> Vec<String> {
    vec![
        format!("-tlsCertFile={}", dir.join("cert.pem").display()),
        format!("--tlsKeyFile={}", dir.join("key.pem").display()),
        "-webhookPort".into(),
        "0".into(),
    ]
}

pub(crate) fn strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

/// An AdmissionReview for a pod CREATE in namespace `user1`.
pub(crate) fn review(version: &str, uid: &str, pod: &Value) -> Value {
    json!({
        "apiVersion": format!("admission.k8s.io/{version}"),
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "name": "",
            "namespace": "user1",
            "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:kube-system:statefulset-controller"},
            "object": pod,
            "oldObject": null,
            "dryRun": false,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}
        }
    })
}

/// A notebook pod as the API server sends it, after the ServiceAccount plugin.
pub(crate) fn notebook_pod() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "nb-0", "labels": {"access-ml-pipeline": "true"}},
        "spec": {
            "containers": [{"name": "nb", "image": "jupyter", "volumeMounts": [
                {"name": "kube-api-access-x", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true}
            ]}],
            "volumes": [{"name": "kube-api-access-x", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}]
        }
    })
}

/// The charm's integration PodDefault, in `user1`.
pub(crate) fn access_ml_pipeline() -> Value {
    json!({
        "metadata": {"name": "access-ml-pipeline", "namespace": "user1"},
        "spec": {
            "desc": "Allow access to Kubeflow Pipelines",
            "selector": {"matchLabels": {"access-ml-pipeline": "true"}},
            "env": [{"name": "KF_PIPELINES_SA_TOKEN_PATH", "value": "/var/run/secrets/kubeflow/pipelines/token"}],
            "volumes": [{"name": "volume-kf-pipeline-token", "projected": {"sources": [{"serviceAccountToken": {"audience": "pipelines.kubeflow.org", "expirationSeconds": 7200, "path": "token"}}]}}],
            "volumeMounts": [{"name": "volume-kf-pipeline-token", "mountPath": "/var/run/secrets/kubeflow/pipelines", "readOnly": true}]
        }
    })
}

/// The pod after the answer's patch, or the deny message.
pub(crate) fn outcome(pod: &Value, answer: &Value) -> Result<Value, String> {
    let response = &answer["response"];
    if response["allowed"] != json!(true) {
        return Err(response["status"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned());
    }
    let mut pod = pod.clone();
    if let Some(patch) = response["patch"].as_str() {
        assert_eq!(response["patchType"], "JSONPatch");
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(patch)
            .unwrap();
        let patch: json_patch::Patch = serde_json::from_slice(&bytes).unwrap();
        json_patch::patch(&mut pod, &patch).unwrap();
    }
    Ok(pod)
}
