//! The daemon's outgoing HTTP: one way to build a client, shared by the http checks and log
//! forwarding, with Go's defaults (as Pebble's `http.Client` has them) and the words of an
//! error's innermost cause.
//!
//! Building a client reads nothing from the disk. The system's trusted certificates are
//! read once, the first time an `https` URL needs them (as Go reads its system pool once),
//! from `SSL_CERT_FILE` and `SSL_CERT_DIR` when either is set, else from the distribution's
//! usual places. An image without any (chiselled, distroless) still checks and forwards over
//! plain `http`; an `https` connection there fails its certificate check in Go's words,
//! `tls: failed to verify certificate: x509: certificate signed by unknown authority`, and
//! only that connection fails.

use std::path::PathBuf;
use std::sync::{Arc, LazyLock, OnceLock};

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::{CertificateError, DigitallySignedStruct, SignatureScheme};
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};

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

/// The ring provider every TLS connection of the daemon uses.
fn provider() -> Arc<CryptoProvider> {
    static PROVIDER: LazyLock<Arc<CryptoProvider>> =
        LazyLock::new(|| Arc::new(rustls::crypto::ring::default_provider()));
    PROVIDER.clone()
}

/// The certificates `https` connections trust: where they are read from, and, once read,
/// a verifier over them (`None` when there were none).
#[derive(Debug)]
pub(crate) struct TrustedRoots {
    /// Explicit places (tests), or `None` for the system's (`rustls-native-certs`, which
    /// honours `SSL_CERT_FILE` and `SSL_CERT_DIR`).
    paths: Option<(Option<PathBuf>, Option<PathBuf>)>,
    verifier: OnceLock<Option<Arc<WebPkiServerVerifier>>>,
}

impl TrustedRoots {
    /// The system's certificates, shared by every client of the daemon and read at most once.
    pub(crate) fn system() -> Arc<TrustedRoots> {
        static SYSTEM: LazyLock<Arc<TrustedRoots>> = LazyLock::new(|| {
            Arc::new(TrustedRoots {
                paths: None,
                verifier: OnceLock::new(),
            })
        });
        SYSTEM.clone()
    }

    /// The certificates of a PEM file and of the files of a directory, instead of the
    /// system's.
    #[cfg(test)]
    pub(crate) fn at(file: Option<PathBuf>, dir: Option<PathBuf>) -> Arc<TrustedRoots> {
        Arc::new(TrustedRoots {
            paths: Some((file, dir)),
            verifier: OnceLock::new(),
        })
    }

    /// Whether the certificates have been read.
    #[cfg(test)]
    pub(crate) fn is_read(&self) -> bool {
        self.verifier.get().is_some()
    }

    /// Reads the certificates on the blocking pool if they have not been read yet, so that
    /// the TLS handshake of an `https` URL finds them without reading a file on the runtime.
    pub(crate) async fn load(self: &Arc<Self>) {
        if self.verifier.get().is_some() {
            return;
        }
        let roots = self.clone();
        // A panic there leaves them unread; the handshake then reads them itself.
        let _ = tokio::task::spawn_blocking(move || {
            roots.verifier();
        })
        .await;
    }

    /// The verifier over the certificates, reading them first if no one has. Reading blocks:
    /// callers with an `https` URL call [`TrustedRoots::load`] before connecting, so only a
    /// redirect from `http` to `https` can reach this unread, and then reads them in place.
    fn verifier(&self) -> Option<&Arc<WebPkiServerVerifier>> {
        self.verifier.get_or_init(|| self.read()).as_ref()
    }

    fn read(&self) -> Option<Arc<WebPkiServerVerifier>> {
        let found = match &self.paths {
            None => rustls_native_certs::load_native_certs(),
            Some((file, dir)) => {
                rustls_native_certs::load_certs_from_paths(file.as_deref(), dir.as_deref())
            }
        };
        for error in &found.errors {
            tracing::debug!("Cannot read trusted certificates: {error}");
        }
        let mut store = rustls::RootCertStore::empty();
        let (added, ignored) = store.add_parsable_certificates(found.certs);
        tracing::debug!("Trusted certificates: {added} read, {ignored} not usable");
        if store.is_empty() {
            return None;
        }
        WebPkiServerVerifier::builder_with_provider(Arc::new(store), provider())
            .build()
            .inspect_err(|e| tracing::debug!("Cannot use the trusted certificates: {e}"))
            .ok()
    }
}

/// Verifies a server's certificate in Go's order (`x509.Certificate.Verify`): the leaf's
/// validity period, then the host name, then the chain to [`TrustedRoots`], read when first
/// needed. With no roots at all, every certificate is signed by an unknown authority; a
/// certificate for another name says so first, as Go's does.
#[derive(Debug)]
struct RootsVerifier {
    roots: Arc<TrustedRoots>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for RootsVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        leaf_is_current(end_entity, now)?;
        let parsed = rustls::server::ParsedCertificate::try_from(end_entity)?;
        rustls::client::verify_server_name(&parsed, server_name)?;
        match self.roots.verifier() {
            Some(verifier) => verifier.verify_server_cert(
                end_entity,
                intermediates,
                server_name,
                ocsp_response,
                now,
            ),
            None => Err(rustls::Error::InvalidCertificate(
                CertificateError::UnknownIssuer,
            )),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// Go's first test of a server certificate: now is within the leaf's validity period.
fn leaf_is_current(leaf: &CertificateDer<'_>, now: UnixTime) -> Result<(), rustls::Error> {
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(leaf) else {
        // Unparsable: the chain's verification says why.
        return Ok(());
    };
    let at = |t: x509_parser::time::ASN1Time| {
        UnixTime::since_unix_epoch(std::time::Duration::from_secs(
            u64::try_from(t.timestamp()).unwrap_or(0),
        ))
    };
    let validity = cert.validity();
    let (not_before, not_after) = (at(validity.not_before), at(validity.not_after));
    if now.as_secs() < not_before.as_secs() {
        return Err(rustls::Error::InvalidCertificate(
            CertificateError::NotValidYetContext {
                time: now,
                not_before,
            },
        ));
    }
    if now.as_secs() > not_after.as_secs() {
        return Err(rustls::Error::InvalidCertificate(
            CertificateError::ExpiredContext {
                time: now,
                not_after,
            },
        ));
    }
    Ok(())
}

/// A client with Go's defaults: 10 redirects, TLS verified against `roots`, and proxies
/// from the environment unless the URL is on this machine (`direct`). Reads no file.
pub(crate) fn build_client(
    direct: bool,
    roots: &Arc<TrustedRoots>,
) -> Result<reqwest::Client, String> {
    let provider = provider();
    let mut tls = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(RootsVerifier {
            roots: roots.clone(),
            provider,
        }))
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    let mut builder = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::limited(10))
        .tls_backend_preconfigured(tls);
    if direct {
        builder = builder.no_proxy();
    }
    builder.build().map_err(|e| root_cause(&e))
}

/// Whether a URL will need the trusted certificates (its scheme is `https`).
pub(crate) fn is_https(url: &str) -> bool {
    url.get(..8)
        .is_some_and(|scheme| scheme.eq_ignore_ascii_case("https://"))
}

/// The innermost cause of an error, which is where the useful words are
/// (`connection refused` rather than `error sending request`); a failed certificate check
/// in Go's words.
pub(crate) fn root_cause(error: &(dyn std::error::Error + 'static)) -> String {
    let mut current = error;
    loop {
        if let Some(text) = tls_error(current).and_then(go_tls_text) {
            return text;
        }
        match current.source() {
            Some(source) => current = source,
            None => break,
        }
    }
    match current.downcast_ref::<std::io::Error>() {
        Some(io) => cobble_sys::os_error_text(io),
        None => current.to_string(),
    }
}

/// The rustls error `error` is or carries (an I/O error wraps the handshake's, and may
/// itself be wrapped in another, whose `source` skips both).
fn tls_error<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    let mut current: &(dyn std::error::Error + 'static) = error;
    // Bounded: a wrapper chain is a handful deep.
    for _ in 0..8 {
        if let Some(tls) = current.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        current = current.downcast_ref::<std::io::Error>()?.get_ref()?;
    }
    None
}

/// Go's words for a server certificate that failed its check (`crypto/tls` and
/// `crypto/x509`); `None` for other TLS errors, which keep rustls's.
fn go_tls_text(error: &rustls::Error) -> Option<String> {
    let rustls::Error::InvalidCertificate(error) = error else {
        return None;
    };
    let time = |t: &UnixTime| {
        i64::try_from(t.as_secs())
            .ok()
            .and_then(|s| jiff::Timestamp::from_second(s).ok())
            .map_or_else(|| t.as_secs().to_string(), |t| t.to_string())
    };
    let x509 = match error {
        CertificateError::UnknownIssuer => "certificate signed by unknown authority".to_owned(),
        CertificateError::ExpiredContext {
            time: now,
            not_after,
        } => format!(
            "certificate has expired or is not yet valid: current time {} is after {}",
            time(now),
            time(not_after)
        ),
        CertificateError::NotValidYetContext {
            time: now,
            not_before,
        } => format!(
            "certificate has expired or is not yet valid: current time {} is before {}",
            time(now),
            time(not_before)
        ),
        CertificateError::NotValidForNameContext {
            expected,
            presented,
        } => {
            let host = expected.to_str();
            let wants_ip = matches!(expected, ServerName::IpAddress(_));
            // webpki names the certificate's names `DnsName("a.example")` and
            // `IpAddress(10.0.0.1)`; Go lists those of the host's kind only.
            let valid: Vec<&str> = presented
                .iter()
                .filter_map(|name| {
                    if let Some(ip) = name.strip_prefix("IpAddress(") {
                        return wants_ip.then(|| ip.trim_end_matches(')'));
                    }
                    let dns = name.strip_prefix("DnsName(\"")?.strip_suffix("\")")?;
                    (!wants_ip).then_some(dns)
                })
                .collect();
            match (valid.is_empty(), wants_ip) {
                (true, true) => format!(
                    "cannot validate certificate for {host} because it doesn't contain any IP SANs"
                ),
                (true, false) => {
                    format!("certificate is not valid for any names, but wanted to match {host}")
                }
                (false, _) => format!("certificate is valid for {}, not {host}", valid.join(", ")),
            }
        }
        _ => return None,
    };
    Some(format!("tls: failed to verify certificate: x509: {x509}"))
}
