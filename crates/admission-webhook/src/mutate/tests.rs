//! Table tests of the merge: the cases of Kubeflow's `main_test.go` (with their intent, not
//! their inverted assertion), then every rule of the module docs. Each case runs the whole
//! core (filter, check, apply, patch) and applies the patch to the pod as sent, so what is
//! compared is the pod the API server would store.

use serde_json::{Value, json};

use super::*;

fn pod(value: Value) -> Pod {
    serde_json::from_value(value).unwrap()
}

fn pds(values: Value) -> Vec<PodDefault> {
    serde_json::from_value(values).unwrap()
}

/// A PodDefault in namespace `ns` selecting every pod, with this spec.
fn pd(name: &str, spec: Value) -> Value {
    let mut spec = spec;
    spec.as_object_mut()
        .unwrap()
        .entry("selector")
        .or_insert(json!({}));
    json!({"metadata": {"name": name, "namespace": "ns", "resourceVersion": "1"}, "spec": spec})
}

/// Runs the core on a pod (in namespace `ns`) and returns the patched pod, or the deny
/// message.
fn run(original: Value, list: Value) -> Result<Value, String> {
    let mut typed = pod(original.clone());
    normalize(&mut typed);
    let list = pds(list);
    let matched = filter(&list, &typed)?;
    check(&typed, &matched)?;
    let mut mutated = typed.clone();
    apply(&mut mutated, &matched);
    normalize(&mut mutated);
    let patch = patch(&typed, &mutated);
    let mut patched = original;
    json_patch::patch(&mut patched, &patch).unwrap_or_else(|e| panic!("{e}: {patch:?}"));
    Ok(patched)
}

fn base_pod(spec: Value) -> Value {
    json!({"metadata": {"name": "p", "namespace": "ns"}, "spec": spec})
}

fn marker(name: &str) -> String {
    format!("poddefault.admission.kubeflow.org/poddefault-{name}")
}

// ---- Kubeflow's main_test.go ----------------------------------------------------------

#[test]
fn merge_map_bad_conflicting_annotation() {
    let err = run(
        json!({"metadata": {"name": "p", "namespace": "ns", "annotations": {"foo": "bar"}}, "spec": {"containers": []}}),
        json!([pd("a", json!({"annotations": {"foo": "buz"}}))]),
    )
    .unwrap_err();
    assert_eq!(
        err,
        "conflict occurred while applying poddefaults: a on pod: p err: merging has conflict on foo: \n\"buz\"\ndoes not match\n\"bar\"\n in pod"
    );
}

#[test]
fn merge_map_good() {
    for (existing, defaults, want) in [
        (
            json!({"foo": "bar"}),
            json!({"baz": "bux"}),
            json!({"foo": "bar", "baz": "bux"}),
        ),
        (json!({"foo": "bar"}), json!({}), json!({"foo": "bar"})),
        (
            json!({"foo": "bar"}),
            json!({"foo": "bar"}),
            json!({"foo": "bar"}),
        ),
    ] {
        let existing: BTreeMap<String, String> = serde_json::from_value(existing).unwrap();
        let merged = merge_maps(
            Some(&existing),
            &[&pds(json!([pd("a", json!({"annotations": defaults}))]))[0]],
            |s| &s.annotations,
        );
        assert_eq!(merged.error, None);
        assert_eq!(serde_json::to_value(merged.items).unwrap(), want);
    }
}

#[test]
fn apply_pod_defaults_on_pod() {
    let cases = [
        (
            "Add Annotations",
            json!({"metadata": {"annotations": {"foo": "bar"}}}),
            json!({"annotations": {"baz": "bux"}, "serviceAccountName": "some-service-account", "automountServiceAccountToken": true}),
            json!({
                "metadata": {"annotations": {"foo": "bar", "baz": "bux", marker(""): ""}},
                "spec": {"containers": [], "serviceAccountName": "some-service-account", "automountServiceAccountToken": true}
            }),
        ),
        (
            "Same k/v",
            json!({"metadata": {"annotations": {"foo": "bar"}}}),
            json!({"annotations": {"foo": "bar"}}),
            json!({"metadata": {"annotations": {"foo": "bar", marker(""): ""}}, "spec": {"containers": []}}),
        ),
        (
            "Add tolerations",
            json!({"metadata": {}, "spec": {"containers": [], "tolerations": [{"key": "oldToleration", "operator": "Exists", "effect": "NoSchedule"}]}}),
            json!({"tolerations": [{"key": "newToleration", "operator": "Equal", "value": "foo", "effect": "NoSchedule"}]}),
            json!({"metadata": {"annotations": {marker(""): ""}}, "spec": {"containers": [], "tolerations": [
                {"key": "oldToleration", "operator": "Exists", "effect": "NoSchedule"},
                {"key": "newToleration", "operator": "Equal", "value": "foo", "effect": "NoSchedule"}
            ]}}),
        ),
        (
            "Add init containers",
            json!({"metadata": {}, "spec": {"containers": []}}),
            json!({"initContainers": [{"command": ["cmd1"], "args": ["arg1", "arg2"], "image": "nginx", "name": "test initcontainer and sidecar"}]}),
            json!({"metadata": {"annotations": {marker(""): ""}}, "spec": {"containers": [], "initContainers": [
                {"command": ["cmd1"], "args": ["arg1", "arg2"], "image": "nginx", "name": "test initcontainer and sidecar"}
            ]}}),
        ),
    ];
    for (name, mut input, spec, want) in cases {
        // Go's cases use an unnamed PodDefault in no namespace and call apply directly.
        if input["spec"].is_null() {
            input["spec"] = json!({"containers": []});
        }
        let list = pds(json!([{"metadata": {}, "spec": spec}]));
        let matched: Vec<&PodDefault> = list.iter().collect();
        let mut typed = pod(input.clone());
        normalize(&mut typed);
        check(&typed, &matched).unwrap_or_else(|e| panic!("{name}: {e}"));
        let mut mutated = typed.clone();
        apply(&mut mutated, &matched);
        normalize(&mut mutated);
        let mut patched = input;
        json_patch::patch(&mut patched, &patch(&typed, &mutated)).unwrap();
        assert_eq!(patched, want, "{name}");
    }
}

#[test]
fn set_command_and_args_golden() {
    let list = pds(json!([pd(
        "test-pod-default",
        json!({"command": ["cmd1"], "args": ["arg1", "arg2"]})
    )]));
    let matched: Vec<&PodDefault> = list.iter().collect();
    let mut empty: Container = serde_json::from_value(json!({"name": "c"})).unwrap();
    set_command_and_args(&mut empty, &matched);
    assert_eq!(empty.command, Some(vec!["cmd1".to_owned()]));
    assert_eq!(empty.args, Some(vec!["arg1".to_owned(), "arg2".to_owned()]));

    let mut set: Container =
        serde_json::from_value(json!({"name": "c", "command": ["cmd2"], "args": ["arg3", "arg4"]}))
            .unwrap();
    set_command_and_args(&mut set, &matched);
    assert_eq!(set.command, Some(vec!["cmd2".to_owned()]));
    assert_eq!(set.args, Some(vec!["arg3".to_owned(), "arg4".to_owned()]));
}

// ---- every rule ------------------------------------------------------------------------

#[test]
fn the_charm_integration_poddefault() {
    // The founding charm's `access-ml-pipeline`, on a pod that already has its
    // service-account volume and mount (the ServiceAccount admission plugin runs first).
    let sa_volume = json!({"name": "kube-api-access-x", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}});
    let sa_mount = json!({"name": "kube-api-access-x", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true});
    let original = json!({
        "metadata": {"generateName": "nb-", "namespace": "ns", "labels": {"access-ml-pipeline": "true"}},
        "spec": {"containers": [{"name": "nb", "image": "jupyter", "volumeMounts": [sa_mount]}], "volumes": [sa_volume]}
    });
    let token_volume = json!({"name": "volume-kf-pipeline-token", "projected": {"sources": [{"serviceAccountToken": {"audience": "pipelines.kubeflow.org", "expirationSeconds": 7200, "path": "token"}}]}});
    let token_mount = json!({"name": "volume-kf-pipeline-token", "mountPath": "/var/run/secrets/kubeflow/pipelines", "readOnly": true});
    let env = json!({"name": "KF_PIPELINES_SA_TOKEN_PATH", "value": "/var/run/secrets/kubeflow/pipelines/token"});
    let list = json!([{
        "metadata": {"name": "access-ml-pipeline", "namespace": "ns", "resourceVersion": "12345"},
        "spec": {
            "desc": "Allow access to Kubeflow Pipelines",
            "selector": {"matchLabels": {"access-ml-pipeline": "true"}},
            "volumes": [token_volume], "volumeMounts": [token_mount], "env": [env]
        }
    }]);
    let patched = run(original, list).unwrap();
    assert_eq!(
        patched,
        json!({
            "metadata": {"generateName": "nb-", "namespace": "ns", "labels": {"access-ml-pipeline": "true"},
                         "annotations": {marker("access-ml-pipeline"): "12345"}},
            "spec": {
                "containers": [{"name": "nb", "image": "jupyter", "volumeMounts": [sa_mount, token_mount], "env": [env]}],
                "volumes": [sa_volume, token_volume]
            }
        })
    );
}

#[test]
fn env_is_added_to_existing_containers_deduplicated_and_conflicts_deny() {
    let original = base_pod(json!({"containers": [
        {"name": "a", "env": [{"name": "X", "value": "1"}]},
        {"name": "istio-proxy"}
    ]}));
    let list = json!([
        pd(
            "p1",
            json!({"env": [{"name": "X", "value": "1"}, {"name": "Y", "value": "2"}]})
        ),
        pd(
            "p2",
            json!({"env": [{"name": "Y", "value": "2"}], "sidecars": [{"name": "side"}], "initContainers": [{"name": "init"}]})
        ),
    ]);
    let patched = run(original.clone(), list).unwrap();
    let containers = &patched["spec"]["containers"];
    assert_eq!(
        containers[0]["env"],
        json!([{"name": "X", "value": "1"}, {"name": "Y", "value": "2"}])
    );
    // istio-proxy gets env too (only command and args skip it).
    assert_eq!(
        containers[1]["env"],
        json!([{"name": "X", "value": "1"}, {"name": "Y", "value": "2"}])
    );
    // Injected sidecars and init containers get nothing.
    assert_eq!(containers[2], json!({"name": "side"}));
    assert_eq!(patched["spec"]["initContainers"], json!([{"name": "init"}]));

    // With the pod: the message names each PodDefault; identical texts appear once.
    let err = run(
        original.clone(),
        json!([pd("p1", json!({"env": [{"name": "X", "value": "2"}]}))]),
    )
    .unwrap_err();
    assert_eq!(
        err,
        "conflict occurred while applying poddefaults: p1 on pod: p err: merging env for p1 has a conflict on X: \n{\"name\":\"X\",\"value\":\"2\"}\ndoes not match\n{\"name\":\"X\",\"value\":\"1\"}\n in container"
    );
    // Between PodDefaults.
    let err = run(
        base_pod(json!({"containers": [{"name": "a"}]})),
        json!([
            pd("p1", json!({"env": [{"name": "Z", "value": "1"}]})),
            pd("p2", json!({"env": [{"name": "Z", "value": "2"}]}))
        ]),
    )
    .unwrap_err();
    assert!(err.starts_with("conflict occurred while applying poddefaults: p1,p2 on pod: p err: merging env for p2 has a conflict on Z"), "{err}");
}

#[test]
fn env_from_is_appended_even_when_identical() {
    let source = json!({"configMapRef": {"name": "cm"}});
    let patched = run(
        base_pod(json!({"containers": [{"name": "a", "envFrom": [source]}]})),
        json!([
            pd("p1", json!({"envFrom": [source]})),
            pd("p2", json!({"envFrom": [source]}))
        ]),
    )
    .unwrap();
    assert_eq!(
        patched["spec"]["containers"][0]["envFrom"],
        json!([source, source, source])
    );
}

#[test]
fn volume_mounts_conflict_by_name_and_by_path() {
    let original = base_pod(
        json!({"containers": [{"name": "a", "volumeMounts": [{"name": "v", "mountPath": "/v"}]}]}),
    );
    let by_name = run(
        original.clone(),
        json!([pd(
            "p",
            json!({"volumeMounts": [{"name": "v", "mountPath": "/other"}]})
        )]),
    )
    .unwrap_err();
    assert!(
        by_name.contains("merging volume mounts for p has a conflict on v: "),
        "{by_name}"
    );
    let by_path = run(
        original.clone(),
        json!([pd(
            "p",
            json!({"volumeMounts": [{"name": "w", "mountPath": "/v"}]})
        )]),
    )
    .unwrap_err();
    assert!(
        by_path.contains("merging volume mounts for p has a conflict on mount path /v: "),
        "{by_path}"
    );
    let same = run(
        original.clone(),
        json!([pd(
            "p",
            json!({"volumeMounts": [{"name": "v", "mountPath": "/v"}]})
        )]),
    )
    .unwrap();
    assert_eq!(
        same["spec"]["containers"][0]["volumeMounts"],
        json!([{"name": "v", "mountPath": "/v"}])
    );
}

#[test]
fn pod_level_lists_merge_by_key() {
    let original = base_pod(json!({
        "containers": [{"name": "a"}],
        "volumes": [{"name": "v", "emptyDir": {}}],
        "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}],
        "imagePullSecrets": [{"name": "s"}]
    }));
    let added = run(
        original.clone(),
        json!([pd("p", json!({
            "volumes": [{"name": "v", "emptyDir": {}}, {"name": "w", "emptyDir": {}}],
            "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}, {"key": "g", "operator": "Exists"}],
            "imagePullSecrets": [{"name": "s"}, {"name": "t"}]
        }))]),
    )
    .unwrap();
    assert_eq!(
        added["spec"]["volumes"],
        json!([{"name": "v", "emptyDir": {}}, {"name": "w", "emptyDir": {}}])
    );
    assert_eq!(
        added["spec"]["tolerations"][1],
        json!({"key": "g", "operator": "Exists"})
    );
    assert_eq!(
        added["spec"]["imagePullSecrets"],
        json!([{"name": "s"}, {"name": "t"}])
    );

    for (spec, text) in [
        (
            json!({"volumes": [{"name": "v", "hostPath": {"path": "/x"}}]}),
            "merging volumes for p has a conflict on v: ",
        ),
        // Keyed by key alone: another effect for the same key cannot be added.
        (
            json!({"tolerations": [{"key": "k", "operator": "Exists", "effect": "NoExecute"}]}),
            "merging tolerations for p has a conflict on k: ",
        ),
        (
            json!({"labels": {}, "initContainers": [], "imagePullSecrets": [{"name": "s"}], "sidecars": [{"name": "a", "image": "x"}]}),
            "merging containers for p has a conflict on a: ",
        ),
    ] {
        let err = run(original.clone(), json!([pd("p", spec)])).unwrap_err();
        assert!(err.contains(text), "{err}");
    }
}

#[test]
fn an_identical_sidecar_is_dropped_and_the_containers_stay() {
    // Go empties spec.containers here; cobble's webhook keeps them.
    let container = json!({"name": "a", "image": "busybox"});
    let patched = run(
        base_pod(json!({"containers": [container]})),
        json!([pd(
            "p",
            json!({"sidecars": [container], "env": [{"name": "E", "value": "1"}]})
        )]),
    )
    .unwrap();
    assert_eq!(
        patched["spec"]["containers"],
        json!([{"name": "a", "image": "busybox", "env": [{"name": "E", "value": "1"}]}])
    );
}

#[test]
fn service_account_last_wins_command_first_wins() {
    let patched = run(
        base_pod(json!({"containers": [{"name": "a"}, {"name": "b", "args": ["keep"]}, {"name": "istio-proxy"}]})),
        json!([
            pd("p1", json!({"serviceAccountName": "one", "automountServiceAccountToken": true, "command": ["first"]})),
            pd("p2", json!({"serviceAccountName": "two", "command": ["second"], "args": ["x"]})),
            pd("p3", json!({"automountServiceAccountToken": false})),
        ]),
    )
    .unwrap();
    let spec = &patched["spec"];
    assert_eq!(spec["serviceAccountName"], "two");
    assert_eq!(spec["automountServiceAccountToken"], false);
    assert_eq!(
        spec["containers"][0],
        json!({"name": "a", "command": ["first"], "args": ["x"]})
    );
    assert_eq!(
        spec["containers"][1],
        json!({"name": "b", "command": ["first"], "args": ["keep"]})
    );
    assert_eq!(spec["containers"][2], json!({"name": "istio-proxy"}));
}

#[test]
fn labels_and_markers() {
    let patched = run(
        json!({"metadata": {"name": "p", "namespace": "ns", "labels": {"app": "x"}}, "spec": {"containers": [{"name": "a"}]}}),
        json!([
            pd("b", json!({"labels": {"team": "ml"}})),
            // Labels added by a PodDefault do not make another one match (one pass).
            pd("c", json!({"selector": {"matchLabels": {"team": "ml"}}, "labels": {"never": "applied"}})),
        ]),
    )
    .unwrap();
    assert_eq!(
        patched["metadata"]["labels"],
        json!({"app": "x", "team": "ml"})
    );
    assert_eq!(
        patched["metadata"]["annotations"],
        json!({marker("b"): "1"})
    );
}

#[test]
fn filtering() {
    let mut list = json!([
        pd("match", json!({"selector": {"matchLabels": {"app": "x"}}})),
        pd(
            "other-labels",
            json!({"selector": {"matchLabels": {"app": "y"}}})
        ),
        pd("other-namespace", json!({})),
    ]);
    list[2]["metadata"]["namespace"] = json!("elsewhere");
    let list = pds(list);
    let p = pod(
        json!({"metadata": {"namespace": "ns", "labels": {"app": "x"}}, "spec": {"containers": []}}),
    );
    let names: Vec<&str> = filter(&list, &p)
        .unwrap()
        .iter()
        .map(|pd| pd.name())
        .collect();
    assert_eq!(names, ["match"]);

    // One invalid selector anywhere in the namespace denies every pod.
    let list = pds(json!([
        pd(
            "bad",
            json!({"selector": {"matchExpressions": [{"key": "k", "operator": "In"}]}})
        ),
        pd("good", json!({}))
    ]));
    assert_eq!(
        filter(&list, &p).unwrap_err(),
        "label selector conversion failed: {map[] [{k In []}]} for selector: values: Invalid value: []string(nil): for 'in', 'notin' operators, values set can't be empty"
    );
}

#[test]
fn excluded_and_mirror_pods() {
    let excluded = pod(
        json!({"metadata": {"annotations": {"poddefault.admission.kubeflow.org/exclude": "true"}}}),
    );
    assert!(is_excluded(&excluded));
    let not = pod(
        json!({"metadata": {"annotations": {"poddefault.admission.kubeflow.org/exclude": "false"}}}),
    );
    assert!(!is_excluded(&not));
    let mirror = pod(json!({"metadata": {"annotations": {"kubernetes.io/config.mirror": "abc"}}}));
    assert!(is_excluded(&mirror));
}

#[test]
fn unknown_fields_never_reach_the_patch() {
    // A field these types do not know is dropped from both sides of the diff, so the patch
    // does not remove it from the API server's copy.
    let original = base_pod(
        json!({"containers": [{"name": "a", "futureField": {"x": 1}}], "futurePodField": true}),
    );
    let patched = run(
        original,
        json!([pd("p", json!({"env": [{"name": "E", "value": "1"}]}))]),
    )
    .unwrap();
    assert_eq!(patched["spec"]["futurePodField"], true);
    assert_eq!(
        patched["spec"]["containers"][0]["futureField"],
        json!({"x": 1})
    );
}
