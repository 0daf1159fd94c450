//! Benchmarks the `admission-webhook` binary: admission latency over TLS on one kept-alive
//! connection with 10 matching PodDefaults, requests per second with several connections,
//! and resident memory at idle and under load; once with a LIST per admission (the default)
//! and once with `-cache`.
//!
//! The API server is the fake one of the integration tests (HTTPS on loopback), in this
//! process, on a single-threaded runtime together with the clients, so the webhook has as
//! much of the machine as can be left to it. Run it through `scripts/bench-webhook`, which
//! builds the release binary first and prints the machine.
//!
//! Flags (defaults in brackets): --bin PATH [target/release/admission-webhook],
//! --requests N [2000], --warmup N [200], --connections N [4], --load-secs S [10],
//! --poddefaults N [10], --pushes N [20] (runs of the pushed-pair case; 0 skips it), --only-pushes (that case
//! alone).

#[allow(unused_imports)]
#[path = "../tests/it/support/apiserver.rs"]
mod apiserver;
#[allow(dead_code)]
#[path = "../tests/it/support/client.rs"]
mod client;

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use apiserver::FakeApiServer;
use client::Client;

struct Args {
    bin: PathBuf,
    requests: usize,
    warmup: usize,
    connections: usize,
    load_secs: u64,
    poddefaults: usize,
    pushes: usize,
    only_pushes: bool,
}

fn args() -> Args {
    let exe = std::env::current_exe().unwrap();
    // target/release/examples/bench -> target/release/admission-webhook
    let default_bin = exe
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("admission-webhook");
    let mut args = Args {
        bin: default_bin,
        requests: 2000,
        warmup: 200,
        connections: 4,
        load_secs: 10,
        poddefaults: 10,
        pushes: 20,
        only_pushes: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--only-pushes" {
            args.only_pushes = true;
            continue;
        }
        let mut value = || it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--bin" => args.bin = value().into(),
            "--requests" => args.requests = value().parse().unwrap(),
            "--warmup" => args.warmup = value().parse().unwrap(),
            "--connections" => args.connections = value().parse().unwrap(),
            "--load-secs" => args.load_secs = value().parse().unwrap(),
            "--poddefaults" => args.poddefaults = value().parse().unwrap(),
            "--pushes" => args.pushes = value().parse().unwrap(),
            other => panic!("unknown flag {other}"),
        }
    }
    args
}

fn poddefault(i: usize) -> Value {
    json!({
        "metadata": {"name": format!("pd-{i:02}"), "namespace": "user1"},
        "spec": {
            "selector": {"matchLabels": {"app": "nb"}},
            "env": [{"name": format!("VAR_{i}"), "value": format!("value-{i}")}],
            "volumes": [{"name": format!("vol-{i}"), "secret": {"secretName": format!("secret-{i}")}}],
            "volumeMounts": [{"name": format!("vol-{i}"), "mountPath": format!("/mnt/{i}"), "readOnly": true}],
            "annotations": {format!("example.com/a-{i}"): "x"},
            "tolerations": [{"key": format!("t-{i}"), "operator": "Exists"}]
        }
    })
}

fn review(uid: usize) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": uid.to_string(),
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "user1", "operation": "CREATE",
            "object": {
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"generateName": "nb-", "labels": {"app": "nb"}},
                "spec": {
                    "containers": [{"name": "nb", "image": "jupyter", "volumeMounts": [
                        {"name": "kube-api-access-x", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true}]}],
                    "volumes": [{"name": "kube-api-access-x", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}]
                }
            }
        }
    })
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted[rank.min(sorted.len()) - 1]
}

struct Webhook {
    child: Child,
    port: u16,
    /// Until waited for: the port, once it serves...
    serving: Option<std::sync::mpsc::Receiver<u16>>,
    /// ...and every line it logs.
    lines: Option<std::sync::mpsc::Receiver<String>>,
}

impl Drop for Webhook {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_webhook(
    bin: &Path,
    certs: &Path,
    env: &[(String, String)],
    home: &Path,
    cache: bool,
    wait: bool,
) -> Webhook {
    let mut command = Command::new(bin);
    command
        .arg(format!("-tlsCertFile={}", certs.join("cert.pem").display()))
        .arg(format!("-tlsKeyFile={}", certs.join("key.pem").display()))
        .arg("-webhookPort=0")
        .env_clear()
        .env("HOME", home)
        // Only warnings: an info line per admission would be part of what is measured.
        .env("RUST_LOG", "warn,admission_webhook=info")
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if cache {
        command.arg("-cache");
    }
    let mut child = command
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", bin.display()));
    let (tx, rx) = std::sync::mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    let (lines_tx, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut sent = false;
        // Keep draining so the webhook never blocks on a full pipe.
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = lines_tx.send(line.clone());
            if !sent && let Some(rest) = line.split("serving webhooks on ").nth(1) {
                let port: u16 = rest
                    .split_whitespace()
                    .next()
                    .unwrap()
                    .rsplit(':')
                    .next()
                    .unwrap()
                    .parse()
                    .unwrap();
                let _ = tx.send(port);
                sent = true;
            }
        }
    });
    if !wait {
        return Webhook {
            child,
            port: 0,
            serving: Some(rx),
            lines: Some(lines),
        };
    }
    let port = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the webhook did not start serving");
    Webhook {
        child,
        port,
        serving: None,
        lines: None,
    }
}

/// Writes `contents` to `path` as `push(make_dirs=True)` does: the missing directories,
/// then a temporary file beside the target, renamed over it.
fn push(path: &Path, contents: &str) {
    let dir = path.parent().unwrap();
    std::fs::create_dir_all(dir).unwrap();
    let temporary = dir.join(format!(
        ".{}~push",
        path.file_name().unwrap().to_str().unwrap()
    ));
    std::fs::write(&temporary, contents).unwrap();
    std::fs::rename(&temporary, path).unwrap();
}

/// The charm's flow, `runs` times: the webhook starts before `etc/webhook/certs` exists,
/// then `key.pem` and `cert.pem` are pushed into it in that order; the time from the second
/// push to the first answered AdmissionReview (connections tried every millisecond). With
/// `busy`, the ancestor watched meanwhile is busy as `/etc` is: a file read every 2 ms and
/// another created and removed every 20 ms.
async fn measure_push(args: &Args, api: &FakeApiServer, busy: bool) -> Vec<Duration> {
    let mut times = Vec::new();
    for run in 0..args.pushes {
        let scratch = tempfile::tempdir().unwrap();
        let ca = apiserver::Ca::new("bench-ca");
        let leaf = ca.leaf();
        std::fs::create_dir_all(scratch.path().join("etc")).unwrap();
        let certs = scratch.path().join("etc/webhook/certs");
        let env = api.write_service_account(&scratch.path().join("sa"));
        let webhook = start_webhook(&args.bin, &certs, &env, scratch.path(), false, false);
        let stop = Arc::new(AtomicBool::new(false));
        let noise = busy.then(|| {
            let (stop, etc) = (stop.clone(), scratch.path().join("etc"));
            std::thread::spawn(move || {
                std::fs::write(etc.join("ld.so.cache"), "cache").unwrap();
                for round in 0u64.. {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let _ = std::fs::read(etc.join("ld.so.cache"));
                    if round.is_multiple_of(10) {
                        let _ = std::fs::write(etc.join("mtab.tmp"), "x");
                        let _ = std::fs::remove_file(etc.join("mtab.tmp"));
                    }
                    std::thread::sleep(Duration::from_millis(2));
                }
            })
        });
        let lines = webhook.lines.as_ref().unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while !lines
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .expect("the webhook did not say it waits for its certificates")
            .contains("waiting for a valid certificate")
        {}
        push(&certs.join("key.pem"), &leaf.key_pem);
        push(&certs.join("cert.pem"), &leaf.cert_pem);
        let pushed = Instant::now();
        let port = loop {
            match webhook.serving.as_ref().unwrap().try_recv() {
                Ok(port) => break port,
                Err(_) if pushed.elapsed() < Duration::from_secs(30) => {
                    tokio::time::sleep(Duration::from_millis(1)).await
                }
                Err(_) => panic!("run {run}: not serving 30 s after the push"),
            }
        };
        let mut client = loop {
            match Client::connect(port, &ca.pem).await {
                Ok(client) => break client,
                Err(_) if pushed.elapsed() < Duration::from_secs(30) => {
                    tokio::time::sleep(Duration::from_millis(1)).await
                }
                Err(err) => panic!("run {run}: cannot connect: {err}"),
            }
        };
        let answer = client.review(&review(run)).await;
        let elapsed = pushed.elapsed();
        stop.store(true, Ordering::Relaxed);
        if let Some(noise) = noise {
            noise.join().unwrap();
        }
        assert_eq!(answer["response"]["allowed"], true, "{answer}");
        times.push(elapsed);
    }
    times.sort();
    times
}

struct Row {
    mode: &'static str,
    median: Duration,
    p99: Duration,
    max: Duration,
    rps: f64,
    rss_idle: u64,
    rss_load: u64,
    rss_after: u64,
    lists: u64,
}

async fn measure(args: &Args, api: &FakeApiServer, cache: bool) -> Row {
    let scratch = tempfile::tempdir().unwrap();
    let ca = apiserver::Ca::new("bench-ca");
    let leaf = ca.leaf();
    let certs = scratch.path().join("certs");
    std::fs::create_dir_all(&certs).unwrap();
    std::fs::write(certs.join("cert.pem"), &leaf.cert_pem).unwrap();
    std::fs::write(certs.join("key.pem"), &leaf.key_pem).unwrap();
    let env = api.write_service_account(&scratch.path().join("sa"));
    let home = scratch.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let webhook = start_webhook(&args.bin, &certs, &env, &home, cache, true);
    let pid = webhook.child.id();

    let mut client = Client::connect(webhook.port, &ca.pem).await.unwrap();
    // Check the answer once: all PodDefaults applied.
    let answer = client.review(&review(0)).await;
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
    assert!(answer["response"]["patch"].is_string(), "{answer}");
    for i in 0..args.warmup {
        client.review(&review(i)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rss_idle = rss_kib(pid);
    let lists_before = api.lists();

    let mut latencies = Vec::with_capacity(args.requests);
    for i in 0..args.requests {
        let body = review(i);
        let start = Instant::now();
        let answer = client.review(&body).await;
        latencies.push(start.elapsed());
        debug_assert_eq!(answer["response"]["allowed"], true);
    }
    let lists = api.lists() - lists_before;
    latencies.sort();

    // Throughput: several kept-alive connections for a fixed time.
    let done = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..args.connections {
        let mut client = Client::connect(webhook.port, &ca.pem).await.unwrap();
        let (done, count) = (done.clone(), count.clone());
        tasks.push(tokio::spawn(async move {
            let mut i = 0;
            while !done.load(Ordering::Relaxed) {
                client.review(&review(i)).await;
                count.fetch_add(1, Ordering::Relaxed);
                i += 1;
            }
        }));
    }
    let start = Instant::now();
    let mut rss_load = 0;
    while start.elapsed() < Duration::from_secs(args.load_secs) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        rss_load = rss_load.max(rss_kib(pid));
    }
    done.store(true, Ordering::Relaxed);
    let elapsed = start.elapsed();
    for task in tasks {
        task.await.unwrap();
    }
    let rps = count.load(Ordering::Relaxed) as f64 / elapsed.as_secs_f64();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rss_after = rss_kib(pid);

    Row {
        mode: if cache {
            "-cache (watch-fed)"
        } else {
            "LIST per admission"
        },
        median: percentile(&latencies, 50.0),
        p99: percentile(&latencies, 99.0),
        max: *latencies.last().unwrap(),
        rps,
        rss_idle,
        rss_load,
        rss_after,
        lists,
    }
}

fn main() {
    let args = args();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let api = FakeApiServer::start().await;
        for i in 0..args.poddefaults {
            api.put(poddefault(i));
        }
        let mut rows = Vec::new();
        for cache in [false, true].into_iter().filter(|_| !args.only_pushes) {
            eprintln!("==> {}", if cache { "-cache" } else { "LIST per admission" });
            rows.push(measure(&args, &api, cache).await);
        }
        let ms = |d: Duration| format!("{:.2} ms", d.as_secs_f64() * 1000.0);
        let mib = |kib: u64| format!("{:.1} MiB", kib as f64 / 1024.0);
        println!(
            "Binary: {} ({:.1} MiB). {} matching PodDefaults; {} sequential admissions on one kept-alive TLS connection after {} warm-up ones; then {} connections for {} s.\n",
            args.bin.display(),
            std::fs::metadata(&args.bin).map(|m| m.len()).unwrap_or(0) as f64 / 1048576.0,
            args.poddefaults,
            args.requests,
            args.warmup,
            args.connections,
            args.load_secs
        );
        if !rows.is_empty() {
        println!("| PodDefaults from | median | p99 | max | LISTs in the series | requests/s ({} conns) | RSS idle | RSS under load (max) | RSS after load |", args.connections);
        println!("|---|---|---|---|---|---|---|---|---|");
        for row in rows {
            println!(
                "| {} | {} | {} | {} | {} | {:.0} | {} | {} | {} |",
                row.mode,
                ms(row.median),
                ms(row.p99),
                ms(row.max),
                row.lists,
                row.rps,
                mib(row.rss_idle),
                mib(row.rss_load),
                mib(row.rss_after)
            );
        }
        }
        if args.pushes > 0 {
            println!(
                "\nFirst answer after the pair is pushed ({} runs each: the directory absent at start, key.pem then cert.pem, each a temporary file renamed; from the second push to the first answered AdmissionReview):\n",
                args.pushes
            );
            println!("| watched ancestor | min | median | p90 | max |");
            println!("|---|---|---|---|---|");
            for busy in [false, true] {
                eprintln!("==> the pair pushed as the charm pushes it{}", if busy { ", busy ancestor" } else { "" });
                let times = measure_push(&args, &api, busy).await;
                println!(
                    "| {} | {} | {} | {} | {} |",
                    if busy { "busy (a read every 2 ms)" } else { "quiet" },
                    ms(times[0]),
                    ms(percentile(&times, 50.0)),
                    ms(percentile(&times, 90.0)),
                    ms(times[times.len() - 1])
                );
            }
        }
    });
}
