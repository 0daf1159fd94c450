//! The daemon's outgoing HTTP: one way to build a client, shared by the http checks and log
//! forwarding, with Go's defaults (as Pebble's `http.Client` has them) and the words of an
//! error's innermost cause.

use std::sync::Once;

/// Whether a URL's host is this machine, which Go's proxy rules never send through a proxy.
pub(crate) fn is_loopback(url: &reqwest::Url) -> bool {
    let Some(host) = url.host_str() else {
        return false;
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// A client with Go's defaults: 10 redirects, system roots, and proxies from the
/// environment unless the URL is on this machine (`direct`).
pub(crate) fn build_client(direct: bool) -> Result<reqwest::Client, String> {
    static PROVIDER: Once = Once::new();
    PROVIDER.call_once(|| {
        // Fails only if a provider is already installed, which is just as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
    let builder = || {
        let builder = reqwest::Client::builder().redirect(reqwest::redirect::Policy::limited(10));
        if direct { builder.no_proxy() } else { builder }
    };
    builder().build().or_else(|e| {
        // A system with no CA certificates (a minimal image): plain HTTP still works, as
        // with Pebble, whose Go client reads the roots only for a TLS handshake; a TLS
        // server's certificate then verifies against none and is refused.
        builder()
            .tls_certs_only([])
            .build()
            .map_err(|_| root_cause(&e))
    })
}

/// The innermost cause of an error, which is where the useful words are
/// (`connection refused` rather than `error sending request`).
pub(crate) fn root_cause(error: &(dyn std::error::Error + 'static)) -> String {
    let mut current = error;
    while let Some(source) = current.source() {
        current = source;
    }
    match current.downcast_ref::<std::io::Error>() {
        Some(io) => cobble_sys::os_error_text(io),
        None => current.to_string(),
    }
}
