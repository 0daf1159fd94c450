//! The certificate watcher seen from outside: the webhook waits for missing files, serves
//! once they are written, follows rotations, and keeps its pair when a new one is broken.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::support::*;

/// Polls fresh handshakes until the webhook presents `want` (bounded).
async fn wait_for_cert(port: u16, ca: &str, want: &[u8], what: &str) {
    let deadline = Instant::now() + STARTUP;
    loop {
        if presented_cert(port, ca).await.as_deref() == Some(want) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: the new certificate was not served within {STARTUP:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn it_waits_for_missing_certificates_and_serves_once_they_are_written() {
    let scratch = Scratch::new();
    // Not even the directory exists yet, as before the charm's push(make_dirs=True).
    let certs = scratch.path("etc/webhook/certs");
    let mut webhook = Webhook::start(&strs(&cert_args(&certs)), &[], &scratch.home());
    webhook.wait_for_log("waiting for a valid certificate and key", STARTUP);
    assert!(webhook.is_running());
    assert_eq!(
        webhook.count_log("serving webhooks on"),
        0,
        "no listener without a certificate"
    );

    write_pair(&certs, &scratch.a);
    let written = Instant::now();
    let port = webhook.port(STARTUP);
    let client = Client::connect(port, &scratch.ca.pem).await.unwrap();
    // How soon is the machine's speed: that the write's own events load the pair, with no
    // poll to wait for, is a_pair_pushed_as_the_charm_pushes_it_is_loaded_from_the_push_events.
    eprintln!(
        "served {:?} after the certificates were written",
        written.elapsed()
    );
    assert_eq!(client.peer, scratch.a.der);
    assert_eq!(
        webhook.count_log("waiting for a valid certificate and key"),
        1,
        "logged once"
    );
}

/// Writes `contents` to `path` as Pebble's and cobble's `push(make_dirs=True)` do: the
/// missing directories first, then a temporary file beside the target, renamed over it.
fn push(path: &Path, contents: &str) {
    let dir = path.parent().unwrap();
    std::fs::create_dir_all(dir).unwrap();
    let name = path.file_name().unwrap().to_str().unwrap();
    let temporary = dir.join(format!(".{name}~push"));
    std::fs::write(&temporary, contents).unwrap();
    std::fs::rename(&temporary, path).unwrap();
}

/// The charm's flow: `/etc/webhook/certs` does not exist when the webhook starts, then
/// `key.pem` and `cert.pem` are pushed with `make_dirs=True`, in that order. The directory
/// watched meanwhile is a busy ancestor (as `/etc` is: every program that starts opens
/// `/etc/ld.so.cache`, and files come and go there), which must neither hold the load back
/// nor be needed for it. The poll is an hour, so only the events of the push can load the
/// pair within the wait: the first AdmissionReview is answered from them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pair_pushed_as_the_charm_pushes_it_is_loaded_from_the_push_events() {
    let scratch = Scratch::new();
    let api = FakeApiServer::start().await;
    api.put(access_ml_pipeline());
    let etc = scratch.path("etc");
    std::fs::create_dir_all(&etc).unwrap();
    let certs = etc.join("webhook/certs");
    let mut env = api.write_service_account(&scratch.path("serviceaccount"));
    env.push(("ADMISSION_WEBHOOK_CERT_POLL_SECONDS".into(), "3600".into()));
    let webhook = Webhook::start(&strs(&cert_args(&certs)), &env, &scratch.home());
    webhook.wait_for_log("waiting for a valid certificate and key", STARTUP);

    // The busy ancestor: opens and reads of one file, and another file created and removed,
    // without a pause of more than a few milliseconds, until the first answer.
    let stop = Arc::new(AtomicBool::new(false));
    let (started_tx, started) = std::sync::mpsc::channel();
    let busy = {
        let stop = stop.clone();
        let etc = etc.clone();
        std::thread::spawn(move || {
            std::fs::write(etc.join("ld.so.cache"), "cache").unwrap();
            let mut rounds = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let _ = std::fs::read(etc.join("ld.so.cache"));
                if rounds.is_multiple_of(10) {
                    let _ = std::fs::write(etc.join("mtab.tmp"), "x");
                    let _ = std::fs::remove_file(etc.join("mtab.tmp"));
                }
                rounds += 1;
                if rounds == 10 {
                    let _ = started_tx.send(());
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            rounds
        })
    };
    // The noise is under way before the push.
    started.recv().unwrap();

    push(&certs.join("key.pem"), &scratch.a.key_pem);
    push(&certs.join("cert.pem"), &scratch.a.cert_pem);

    // STARTUP (10 s) is far below the hour-long poll: only an event-driven load passes.
    let mut client =
        Client::connect_when_ready(webhook.port(STARTUP), &scratch.ca.pem, STARTUP).await;
    let pod = notebook_pod();
    let answer = client.review(&review("v1", "first", &pod)).await;
    stop.store(true, Ordering::Relaxed);
    let rounds = busy.join().unwrap();
    assert!(rounds > 0, "the ancestor was busy");
    assert_eq!(client.peer, scratch.a.der);
    assert_eq!(answer["response"]["uid"], "first");
    let after = outcome(&pod, &answer).unwrap();
    assert_eq!(
        after["spec"]["containers"][0]["env"][0]["name"],
        "KF_PIPELINES_SA_TOKEN_PATH"
    );
    assert_eq!(webhook.count_log("loaded certificate"), 1);
    // The half pair (the key alone) was not a new problem worth a line: the cert was missing
    // before and after it.
    assert_eq!(
        webhook.count_log("waiting for a valid certificate and key"),
        1
    );
}

#[derive(Clone, Copy, Debug)]
enum Rotation {
    AtomicRename,
    InPlace,
    DataSymlinkSwap,
}

async fn rotate(rotation: Rotation) {
    let scratch = Scratch::new();
    let base = scratch.path("certs");
    std::fs::create_dir_all(&base).unwrap();
    if let Rotation::DataSymlinkSwap = rotation {
        // The kubelet's layout: cert.pem -> ..data/cert.pem, ..data -> ..v1
        write_pair(&base.join("..v1"), &scratch.a);
        std::os::unix::fs::symlink("..v1", base.join("..data")).unwrap();
        std::os::unix::fs::symlink("..data/cert.pem", base.join("cert.pem")).unwrap();
        std::os::unix::fs::symlink("..data/key.pem", base.join("key.pem")).unwrap();
    } else {
        write_pair(&base, &scratch.a);
    }
    let webhook = Webhook::start(&strs(&cert_args(&base)), &[], &scratch.home());
    let port = webhook.port(STARTUP);
    wait_for_cert(port, &scratch.ca.pem, &scratch.a.der, "first pair").await;

    match rotation {
        Rotation::AtomicRename => {
            for (name, content) in [
                ("cert.pem", &scratch.b.cert_pem),
                ("key.pem", &scratch.b.key_pem),
            ] {
                let tmp = base.join(format!(".{name}.tmp"));
                std::fs::write(&tmp, content).unwrap();
                std::fs::rename(&tmp, base.join(name)).unwrap();
            }
        }
        Rotation::InPlace => {
            // The certificate first, the key a moment later: a mismatched pair in between.
            std::fs::write(base.join("cert.pem"), &scratch.b.cert_pem).unwrap();
            webhook.wait_for_log("keeping the previous certificate", STARTUP);
            assert_eq!(
                presented_cert(port, &scratch.ca.pem).await.unwrap(),
                scratch.a.der
            );
            std::fs::write(base.join("key.pem"), &scratch.b.key_pem).unwrap();
        }
        Rotation::DataSymlinkSwap => {
            write_pair(&base.join("..v2"), &scratch.b);
            std::os::unix::fs::symlink("..v2", base.join("..data_tmp")).unwrap();
            std::fs::rename(base.join("..data_tmp"), base.join("..data")).unwrap();
        }
    }
    wait_for_cert(
        port,
        &scratch.ca.pem,
        &scratch.b.der,
        &format!("{rotation:?}"),
    )
    .await;
    webhook.wait_for_log("reloaded certificate", STARTUP);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_by_atomic_rename_serves_the_new_pair() {
    rotate(Rotation::AtomicRename).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_by_writing_in_place_serves_the_new_pair() {
    rotate(Rotation::InPlace).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_by_the_kubelets_data_symlink_swap_serves_the_new_pair() {
    rotate(Rotation::DataSymlinkSwap).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_new_pair_keeps_the_old_one_serving() {
    let scratch = Scratch::new();
    let base = scratch.path("certs");
    write_pair(&base, &scratch.a);
    let mut webhook = Webhook::start(&strs(&cert_args(&base)), &[], &scratch.home());
    let port = webhook.port(STARTUP);
    wait_for_cert(port, &scratch.ca.pem, &scratch.a.der, "first pair").await;

    type Breakage<'a> = &'a dyn Fn(&Path);
    let cases: [(&str, Breakage<'_>); 3] = [
        ("garbage certificate", &|dir| {
            std::fs::write(dir.join("cert.pem"), "not a certificate").unwrap()
        }),
        ("a key that is not the certificate's", &|dir| {
            std::fs::write(dir.join("cert.pem"), &scratch.a.cert_pem).unwrap();
            std::fs::write(dir.join("key.pem"), &scratch.b.key_pem).unwrap();
        }),
        ("a missing key", &|dir| {
            std::fs::remove_file(dir.join("key.pem")).unwrap()
        }),
    ];
    for (i, (name, breakage)) in cases.iter().enumerate() {
        breakage(&base);
        let deadline = Instant::now() + STARTUP;
        while webhook.count_log("keeping the previous certificate") <= i {
            assert!(
                Instant::now() < deadline,
                "{name}: the broken pair was not noticed"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(
            presented_cert(port, &scratch.ca.pem).await.as_deref(),
            Some(&scratch.a.der[..]),
            "{name}"
        );
        assert!(webhook.is_running(), "{name}");
    }
    // And a good pair again is taken.
    write_pair(&base, &scratch.b);
    wait_for_cert(
        port,
        &scratch.ca.pem,
        &scratch.b.der,
        "good pair after broken ones",
    )
    .await;
}
