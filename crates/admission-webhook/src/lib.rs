//! A drop-in for Kubeflow's PodDefault admission webhook (the Go program in
//! `components/admission-webhook`), built so that it cannot get stuck.
//!
//! It takes the same flags and answers `POST /apply-poddefault` exactly as the Go webhook
//! decides (which PodDefaults select a pod, which conflicts deny it, how they merge, the
//! JSON Patch), but where the Go program dies it waits: missing or broken certificate
//! files are watched until a valid pair appears, a changed pair is reloaded in place, and
//! an API server error denies the one admission it spoiled and nothing more.
//!
//! # Layout
//! - [`flags`]: the command line, parsed as Go's `flag` package parses it.
//! - [`poddefault`], [`selector`], [`mutate`]: the pure core (the PodDefault type, label
//!   selectors, and matching, conflicts, merge and patch).
//! - [`review`]: AdmissionReview v1 and v1beta1 in, AdmissionReview out.
//! - [`cluster`]: the API server: configuration, LIST per admission, or a watch-fed cache.
//! - [`certs`]: the certificate watcher and the TLS certificate resolver.
//! - [`server`]: the HTTPS listener and its three paths.
//! - [`activation`]: a listening socket passed by a service manager, used instead of
//!   binding `-webhookPort`.
//! - [`run`]: puts them together; `main` only parses flags and sets up logging.
#![forbid(unsafe_code)]

pub mod activation;
pub mod aggregate;
pub mod certs;
pub mod cluster;
pub mod flags;
pub mod mutate;
pub mod poddefault;
pub mod review;
pub mod selector;
pub mod server;

use std::sync::Arc;

use tokio::signal::unix::{SignalKind, signal};

/// Runs the webhook until SIGTERM or SIGINT (`Ok`), or until it cannot listen (`Err`, the
/// message to print). It accepts on `passed` when a service manager passed a socket (see
/// [`activation`]), else on `-webhookPort`, bound once the certificate loads; either way it
/// accepts nothing before.
pub async fn run(
    options: flags::Options,
    passed: Option<activation::PassedListener>,
) -> Result<(), String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    // kube's client builds its TLS from the process default; make it ring as well.
    let _ = rustls::crypto::ring::default_provider().install_default();

    // A passed socket already listens: until the certificate loads, connections wait in its
    // backlog, unaccepted, as they do while the service manager restarts us.
    let listen = match passed {
        Some(passed) => {
            let what = format!("the passed socket {:?} (fd {})", passed.name, passed.fd);
            let listener = passed
                .listener
                .set_nonblocking(true)
                .and_then(|()| tokio::net::TcpListener::from_std(passed.listener))
                .map_err(|e| format!("cannot use {what}: {e}"))?;
            Listen::Passed(listener)
        }
        None => Listen::Port(
            u16::try_from(options.webhook_port)
                .map_err(|_| format!("listen tcp :{}: invalid port", options.webhook_port))?,
        ),
    };
    let current = Arc::new(certs::CurrentCert::default());
    let (generation_tx, mut generation) = tokio::sync::watch::channel(0u64);
    certs::spawn_watcher(
        options.tls_cert_file.clone(),
        options.tls_key_file.clone(),
        certs::poll_interval(),
        current.clone(),
        provider.clone(),
        generation_tx,
    )
    .map_err(|e| format!("cannot start the certificate watcher: {e}"))?;
    let source = cluster::source(options.kubeconfig.clone(), options.cache);

    let mut terminate =
        signal(SignalKind::terminate()).map_err(|e| format!("cannot handle SIGTERM: {e}"))?;
    let mut interrupt =
        signal(SignalKind::interrupt()).map_err(|e| format!("cannot handle SIGINT: {e}"))?;
    let stop = async move {
        tokio::select! {
            _ = terminate.recv() => {}
            _ = interrupt.recv() => {}
        }
    };
    tokio::pin!(stop);

    tokio::select! {
        _ = generation.wait_for(|g| *g > 0) => {}
        _ = &mut stop => return Ok(()),
    }
    let listener = match listen {
        Listen::Passed(listener) => listener,
        Listen::Port(port) => server::bind(port)
            .await
            .map_err(|e| format!("listen tcp :{port}: {e}"))?,
    };
    let address = listener
        .local_addr()
        .map_err(|e| format!("cannot read the listening address: {e}"))?;
    let tls =
        server::tls_config(current, provider).map_err(|e| format!("cannot set up TLS: {e}"))?;
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
    tracing::info!(
        "serving webhooks on {address} ({})",
        if options.cache {
            "PodDefaults from a watch-fed cache"
        } else {
            "PodDefaults listed for every admission"
        }
    );
    let webhook = Arc::new(server::Webhook { source });
    server::serve(listener, acceptor, webhook, stop).await;
    Ok(())
}

/// Where the webhook accepts.
enum Listen {
    /// The socket a service manager passed, listening already.
    Passed(tokio::net::TcpListener),
    /// `:PORT` on every interface, bound once the certificate loads.
    Port(u16),
}
