//! AdmissionReviews over TLS against the fake API server, the way the API server sends them.

use std::time::Duration;

use serde_json::json;

use crate::support::*;

/// A webhook on its pair A, talking to `api` as a pod would (service account).
async fn in_cluster_webhook(
    scratch: &Scratch,
    api: &FakeApiServer,
    extra: &[&str],
) -> (Webhook, u16) {
    let certs = scratch.path("certs");
    write_pair(&certs, &scratch.a);
    let env = api.write_service_account(&scratch.path("serviceaccount"));
    let mut args = cert_args(&certs);
    args.extend(extra.iter().map(|s| s.to_string()));
    let webhook = Webhook::start(&strs(&args), &env, &scratch.home());
    let port = webhook.port(STARTUP);
    (webhook, port)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1_and_v1beta1_reviews_over_tls_on_one_kept_alive_connection() {
    let scratch = Scratch::new();
    let api = FakeApiServer::start().await;
    api.put(access_ml_pipeline());
    let (_webhook, port) = in_cluster_webhook(&scratch, &api, &[]).await;
    let mut client = Client::connect_when_ready(port, &scratch.ca.pem, STARTUP).await;
    assert_eq!(client.peer, scratch.a.der);

    let pod = notebook_pod();
    for (version, uid) in [("v1", "uid-1"), ("v1beta1", "uid-2")] {
        let answer = client.review(&review(version, uid, &pod)).await;
        assert_eq!(answer["apiVersion"], format!("admission.k8s.io/{version}"));
        assert_eq!(answer["kind"], "AdmissionReview");
        assert_eq!(answer["response"]["uid"], uid);
        let after = outcome(&pod, &answer).unwrap();
        let container = &after["spec"]["containers"][0];
        assert_eq!(
            container["env"],
            json!([{"name": "KF_PIPELINES_SA_TOKEN_PATH", "value": "/var/run/secrets/kubeflow/pipelines/token"}])
        );
        assert_eq!(
            container["volumeMounts"][1]["name"],
            "volume-kf-pipeline-token"
        );
        assert_eq!(
            after["spec"]["volumes"][1]["name"],
            "volume-kf-pipeline-token"
        );
        let rv = after["metadata"]["annotations"]["poddefault.admission.kubeflow.org/poddefault-access-ml-pipeline"]
            .as_str()
            .unwrap();
        assert!(!rv.is_empty());
    }
    // One LIST per admission, as the Go webhook.
    assert_eq!(api.lists(), 2);

    // The other paths, on the same connection.
    let (status, body) = client.request("GET", "/healthz", "", vec![]).await;
    assert_eq!((status.as_u16(), &body[..]), (200, &b"ok"[..]));
    let (status, _) = client.request("GET", "/readyz", "", vec![]).await;
    assert_eq!(status.as_u16(), 200);
    let (status, body) = client.request("GET", "/other", "", vec![]).await;
    assert_eq!(
        (status.as_u16(), &body[..]),
        (404, &b"404 page not found\n"[..])
    );
    let body = serde_json::to_vec(&review("v1", "u", &pod)).unwrap();
    let (status, _) = client
        .request(
            "POST",
            "/apply-poddefault",
            "application/json; charset=utf-8",
            body,
        )
        .await;
    assert_eq!(status.as_u16(), 415);
    let (status, _) = client
        .request(
            "POST",
            "/apply-poddefault",
            "application/json",
            b"{".to_vec(),
        )
        .await;
    assert_eq!(status.as_u16(), 400);
    // Still usable after the errors.
    let answer = client.review(&review("v1", "uid-3", &pod)).await;
    assert!(outcome(&pod, &answer).is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_server_that_fails_or_is_down_denies_one_request_and_the_next_succeeds() {
    let scratch = Scratch::new();
    let mut api = FakeApiServer::start().await;
    api.put(access_ml_pipeline());
    let (mut webhook, port) = in_cluster_webhook(&scratch, &api, &[]).await;
    let pod = notebook_pod();
    let mut client = Client::connect_when_ready(port, &scratch.ca.pem, STARTUP).await;
    assert!(outcome(&pod, &client.review(&review("v1", "1", &pod)).await).is_ok());

    api.fail_with_500(true);
    let denied = outcome(&pod, &client.review(&review("v1", "2", &pod)).await).unwrap_err();
    assert_eq!(denied, "etcdserver: request timed out");
    api.fail_with_500(false);
    assert!(outcome(&pod, &client.review(&review("v1", "3", &pod)).await).is_ok());

    api.stop().await;
    let denied = outcome(&pod, &client.review(&review("v1", "4", &pod)).await).unwrap_err();
    assert!(!denied.is_empty());
    api.restart().await;
    // The pooled connection died with the server; the next request uses a new one.
    let back = outcome(&pod, &client.review(&review("v1", "5", &pod)).await);
    assert!(back.is_ok(), "{back:?}");
    assert!(webhook.is_running());
    assert_eq!(webhook.count_log("error fetching poddefaults"), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_any_configuration_admissions_are_denied_and_it_keeps_running() {
    let scratch = Scratch::new();
    let certs = scratch.path("certs");
    write_pair(&certs, &scratch.a);
    let mut webhook = Webhook::start(&strs(&cert_args(&certs)), &[], &scratch.home());
    let port = webhook.port(STARTUP);
    let mut client = Client::connect_when_ready(port, &scratch.ca.pem, STARTUP).await;
    let pod = notebook_pod();
    for uid in ["1", "2"] {
        let denied = outcome(&pod, &client.review(&review("v1", uid, &pod)).await).unwrap_err();
        assert!(
            denied.starts_with("cannot find a Kubernetes configuration: not running in a cluster"),
            "{denied}"
        );
    }
    assert!(webhook.is_running());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubeconfig_precedence_is_controller_runtimes() {
    let scratch = Scratch::new();
    let right = FakeApiServer::start().await;
    right.put(access_ml_pipeline());
    let wrong = FakeApiServer::start().await; // has no PodDefaults
    let certs = scratch.path("certs");
    write_pair(&certs, &scratch.a);
    let right_kubeconfig = scratch.path("right.yaml");
    right.write_kubeconfig(&right_kubeconfig);
    let wrong_kubeconfig = scratch.path("wrong.yaml");
    wrong.write_kubeconfig(&wrong_kubeconfig);
    let in_cluster_right = right.write_service_account(&scratch.path("sa-right"));
    let in_cluster_wrong = wrong.write_service_account(&scratch.path("sa-wrong"));
    let kubeconfig_env =
        |path: &std::path::Path| vec![("KUBECONFIG".to_owned(), path.display().to_string())];
    let home_config = |api: &FakeApiServer| {
        let home = scratch.path(&format!("home-{}", api.addr.port()));
        std::fs::create_dir_all(home.join(".kube")).unwrap();
        api.write_kubeconfig(&home.join(".kube/config"));
        home
    };

    type Case<'a> = (
        &'a str,
        Vec<String>,
        Vec<(String, String)>,
        std::path::PathBuf,
    );
    let cases: Vec<Case<'_>> = vec![
        (
            "the flag beats KUBECONFIG and the service account",
            vec![format!("-kubeconfig={}", right_kubeconfig.display())],
            [kubeconfig_env(&wrong_kubeconfig), in_cluster_wrong.clone()].concat(),
            home_config(&wrong),
        ),
        (
            "KUBECONFIG beats the service account",
            vec![],
            [kubeconfig_env(&right_kubeconfig), in_cluster_wrong.clone()].concat(),
            home_config(&wrong),
        ),
        (
            "the service account beats ~/.kube/config",
            vec![],
            in_cluster_right.clone(),
            home_config(&wrong),
        ),
        (
            "~/.kube/config comes last",
            vec![],
            vec![],
            home_config(&right),
        ),
    ];
    let pod = notebook_pod();
    for (name, extra, env, home) in cases {
        let mut args = cert_args(&certs);
        args.extend(extra);
        let webhook = Webhook::start(&strs(&args), &env, &home);
        let port = webhook.port(STARTUP);
        let mut client = Client::connect_when_ready(port, &scratch.ca.pem, STARTUP).await;
        let after = outcome(&pod, &client.review(&review("v1", "1", &pod)).await)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(
            after["metadata"]["annotations"].is_object(),
            "{name}: the right server was not asked"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_cache_poddefaults_come_from_a_watch() {
    let scratch = Scratch::new();
    let api = FakeApiServer::start().await;
    api.put(access_ml_pipeline());
    let (_webhook, port) = in_cluster_webhook(&scratch, &api, &["-cache"]).await;
    let mut client = Client::connect_when_ready(port, &scratch.ca.pem, STARTUP).await;
    let pod = notebook_pod();
    let after = outcome(&pod, &client.review(&review("v1", "1", &pod)).await).unwrap();
    assert_eq!(
        after["spec"]["volumes"][1]["name"],
        "volume-kf-pipeline-token"
    );
    let (status, _) = client.request("GET", "/readyz", "", vec![]).await;
    assert_eq!(status.as_u16(), 200);

    // A PodDefault created later arrives through the watch, not through a LIST per pod.
    api.put(
        json!({"metadata": {"name": "zz-extra", "namespace": "user1"},
                   "spec": {"selector": {}, "labels": {"extra": "yes"}}}),
    );
    let deadline = std::time::Instant::now() + STARTUP;
    loop {
        let after = outcome(&pod, &client.review(&review("v1", "2", &pod)).await).unwrap();
        if after["metadata"]["labels"]["extra"] == "yes" {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the new PodDefault never arrived"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(api.lists(), 1, "one initial LIST, then the watch");
    assert!(api.watches() >= 1);
}
