//! The http probe: success is a GET that answers 2xx.
//!
//! Like Pebble's (a default Go `http.Client`), it follows up to 10 redirects, takes proxies
//! from `HTTP_PROXY`/`HTTPS_PROXY`/`NO_PROXY`, and verifies TLS against the system roots,
//! read the first time an `https` check runs: a plain `http` check needs none, and an
//! `https` check in an image without any fails alone, its certificate signed by an unknown
//! authority. On a non-2xx answer the error details are the first lines of the first 512
//! bytes of the body.

use std::collections::BTreeMap;
use std::sync::Arc;

use cobble_plan::HttpCheck;
use futures_util::future::BoxFuture;

use super::checker::{CheckError, Checker, MAX_ERROR_BYTES, details_from_body};
use crate::http_client::{TrustedRoots, build_client, is_https, is_loopback, root_cause};

/// GETs a URL with the configured headers.
pub(crate) struct HttpChecker {
    name: String,
    url: String,
    headers: BTreeMap<String, String>,
    /// The certificates an `https` URL is verified against.
    roots: Arc<TrustedRoots>,
    /// Built on first use, then reused (with its connection pool) for every run.
    client: tokio::sync::OnceCell<Result<reqwest::Client, String>>,
}

impl HttpChecker {
    pub(crate) fn new(name: &str, config: &HttpCheck) -> HttpChecker {
        HttpChecker::with_roots(name, config, TrustedRoots::system())
    }

    /// A checker that trusts `roots` rather than the system's certificates.
    pub(crate) fn with_roots(
        name: &str,
        config: &HttpCheck,
        roots: Arc<TrustedRoots>,
    ) -> HttpChecker {
        HttpChecker {
            name: name.to_owned(),
            url: config.url.clone(),
            headers: config.headers.clone(),
            roots,
            client: tokio::sync::OnceCell::new(),
        }
    }

    async fn get(&self) -> Result<(), CheckError> {
        let url = reqwest::Url::parse(&self.url).map_err(|e| {
            CheckError::new(format!("cannot build request: parse \"{}\": {e}", self.url))
        })?;
        let direct = is_loopback(&url);
        if is_https(url.as_str()) {
            self.roots.load().await;
        }
        let client = self
            .client
            .get_or_init(|| async move { build_client(direct, &self.roots) })
            .await
            .as_ref()
            .map_err(|e| CheckError::new(format!("cannot build client: {e}")))?;
        tracing::debug!(
            "Check \"{}\" (http): requesting \"{}\"",
            self.name,
            self.url
        );
        let mut request = client.get(url);
        for (key, value) in &self.headers {
            request = request.header(key.as_str(), value.as_str());
        }
        let mut response = request.send().await.map_err(|e| {
            let cause = direct
                .then(|| dial_error(&self.url, &e))
                .flatten()
                .unwrap_or_else(|| root_cause(&e));
            CheckError::new(format!("Get \"{}\": {cause}", self.url))
        })?;
        let status = response.status();
        if status.is_success() {
            return Ok(());
        }
        let mut body = Vec::new();
        let details = loop {
            if body.len() >= MAX_ERROR_BYTES {
                break None;
            }
            match response.chunk().await {
                Ok(Some(chunk)) => body.extend_from_slice(&chunk),
                Ok(None) => break None,
                Err(e) => break Some(format!("cannot read response: {}", root_cause(&e))),
            }
        };
        body.truncate(MAX_ERROR_BYTES);
        let details = details.unwrap_or_else(|| details_from_body(&String::from_utf8_lossy(&body)));
        Err(CheckError {
            message: format!("non-2xx status code {}", status.as_u16()),
            details,
        })
    }
}

/// Go's words for a connection to an address given as an IP that failed (`dial tcp
/// 127.0.0.1:1: connect: connection refused`), when that is what `error` is: a system
/// call's error (not the TLS handshake's, which fails after the connection is made). Only
/// for a direct connection: through a proxy, the failure may be the proxy's.
fn dial_error(url: &str, error: &reqwest::Error) -> Option<String> {
    if !error.is_connect() {
        return None;
    }
    let url = reqwest::Url::parse(url).ok()?;
    let host = url.host_str()?;
    let ip: std::net::IpAddr = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
        .parse()
        .ok()?;
    let port = url.port_or_known_default()?;
    let mut current: &(dyn std::error::Error + 'static) = error;
    while let Some(source) = current.source() {
        current = source;
    }
    let io = current.downcast_ref::<std::io::Error>()?;
    io.raw_os_error()?;
    Some(format!(
        "dial tcp {}: connect: {}",
        std::net::SocketAddr::new(ip, port),
        cobble_sys::os_error_text(io)
    ))
}

impl Checker for HttpChecker {
    fn check(&self) -> BoxFuture<'_, Result<(), CheckError>> {
        Box::pin(self.get())
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::TcpListener;
    use std::sync::mpsc;

    use super::*;

    /// A one-request-at-a-time HTTP server on loopback that answers every request with
    /// `response` and reports each request's head.
    fn serve(responses: Vec<String>) -> (String, mpsc::Receiver<String>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for response in responses {
                let Ok((mut stream, _)) = listener.accept() else {
                    return;
                };
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if stream.read(&mut byte).unwrap_or(0) == 0 {
                        break;
                    }
                    head.push(byte[0]);
                }
                let _ = tx.send(String::from_utf8_lossy(&head).into_owned());
                let _ = stream.write_all(response.as_bytes());
            }
        });
        (base, rx)
    }

    fn reply(status: &str, extra_headers: &str, body: &str) -> String {
        format!(
            "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n{extra_headers}\r\n{body}",
            body.len()
        )
    }

    fn checker(url: &str, headers: &[(&str, &str)]) -> HttpChecker {
        HttpChecker::new(
            "chk",
            &HttpCheck {
                url: url.into(),
                headers: headers
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            },
        )
    }

    #[tokio::test]
    async fn two_hundred_succeeds_and_headers_are_sent() {
        let (base, heads) = serve(vec![reply("204 No Content", "", "")]);
        let c = checker(&format!("{base}/ok"), &[("X-Probe", "yes")]);
        assert_eq!(c.check().await, Ok(()));
        let head = heads.recv().unwrap();
        assert!(head.starts_with("GET /ok HTTP/1.1\r\n"), "{head}");
        assert!(head.to_ascii_lowercase().contains("x-probe: yes"), "{head}");
    }

    #[tokio::test]
    async fn non_2xx_reports_the_status_and_first_lines_of_the_body() {
        let body = "line 1\nline 2\nline 3\nline 4\nline 5\nline 6\n";
        let (base, _heads) = serve(vec![reply("500 Internal Server Error", "", body)]);
        let error = checker(&base, &[]).check().await.unwrap_err();
        assert_eq!(error.message, "non-2xx status code 500");
        assert_eq!(
            error.details,
            "line 1\nline 2\nline 3\nline 4\nline 5\n(...)"
        );
    }

    #[tokio::test]
    async fn redirects_are_followed() {
        let (target, _t) = serve(vec![reply("200 OK", "", "fine")]);
        let (base, _heads) = serve(vec![reply(
            "302 Found",
            &format!("Location: {target}/there\r\n"),
            "",
        )]);
        assert_eq!(checker(&base, &[]).check().await, Ok(()));
    }

    #[tokio::test]
    async fn refused_connection_names_the_url() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        drop(listener);
        let error = checker(&url, &[]).check().await.unwrap_err();
        let address = url.trim_start_matches("http://").trim_end_matches('/');
        assert_eq!(
            error.message,
            format!("Get \"{url}\": dial tcp {address}: connect: connection refused")
        );
    }

    #[tokio::test]
    async fn refused_connection_to_an_ipv6_address_is_worded_as_go_words_it() {
        let Ok(listener) = TcpListener::bind("[::1]:0") else {
            eprintln!("skipped: this machine has no IPv6 loopback");
            return;
        };
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let url = format!("http://[::1]:{port}/health");
        let error = checker(&url, &[]).check().await.unwrap_err();
        assert_eq!(
            error.message,
            format!("Get \"{url}\": dial tcp [::1]:{port}: connect: connection refused")
        );
    }

    /// Trusted certificates from places that do not exist, as in an image without any.
    fn no_roots(dir: &std::path::Path) -> Arc<TrustedRoots> {
        TrustedRoots::at(Some(dir.join("no-bundle.pem")), Some(dir.join("no-certs")))
    }

    fn checker_trusting(url: &str, roots: Arc<TrustedRoots>) -> HttpChecker {
        HttpChecker::with_roots(
            "chk",
            &HttpCheck {
                url: url.into(),
                headers: BTreeMap::new(),
            },
            roots,
        )
    }

    /// A certificate authority and an HTTPS server on loopback whose certificate it signed
    /// for `names`, answering every request 200. Returns the port and the authority's PEM.
    async fn serve_tls(names: &[&str]) -> (u16, String) {
        serve_tls_until(names, None).await
    }

    /// [`serve_tls`] with a certificate that expired on `expired` (year, month, day).
    async fn serve_tls_until(names: &[&str], expired: Option<(i32, u8, u8)>) -> (u16, String) {
        use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(rcgen::DnType::CommonName, "test authority");
        let issuer = CertifiedIssuer::self_signed(ca, KeyPair::generate().unwrap()).unwrap();
        let key = KeyPair::generate().unwrap();
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = CertificateParams::new(names).unwrap();
        if let Some((year, month, day)) = expired {
            params.not_before = rcgen::date_time_ymd(year - 1, month, day);
            params.not_after = rcgen::date_time_ymd(year, month, day);
        }
        let leaf = params.signed_by(&key, &issuer).unwrap();
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf.der().clone()],
            rustls_pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )
        .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            while let Ok((stream, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    // A client that refuses the certificate ends the handshake here.
                    let Ok(mut tls) = acceptor.accept(stream).await else {
                        return;
                    };
                    let mut head = Vec::new();
                    let mut buf = [0u8; 1024];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match tls.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    let reply = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
                    let _ = tls.write_all(reply.as_bytes()).await;
                    let _ = tls.shutdown().await;
                });
            }
        });
        (port, issuer.pem())
    }

    /// The message of a check of `url` trusting `roots`, which must fail.
    async fn failure(url: &str, roots: Arc<TrustedRoots>) -> String {
        checker_trusting(url, roots)
            .check()
            .await
            .unwrap_err()
            .message
    }

    /// Go's words for a server certificate that failed verification.
    fn unverified(url: &str, why: &str) -> String {
        format!("Get \"{url}\": tls: failed to verify certificate: x509: {why}")
    }

    #[tokio::test]
    async fn an_http_check_needs_no_trusted_certificates() {
        let dir = tempfile::tempdir().unwrap();
        let roots = no_roots(dir.path());
        let (base, _heads) = serve(vec![reply("200 OK", "", "fine")]);
        let c = checker_trusting(&format!("{base}/"), roots.clone());
        assert_eq!(c.check().await, Ok(()));
        assert!(
            !roots.is_read(),
            "an http check read the trusted certificates"
        );
    }

    #[tokio::test]
    async fn an_https_check_without_trusted_certificates_fails_in_gos_words() {
        let dir = tempfile::tempdir().unwrap();
        let (port, _ca) = serve_tls(&["127.0.0.1"]).await;
        let url = format!("https://127.0.0.1:{port}/");
        assert_eq!(
            failure(&url, no_roots(dir.path())).await,
            unverified(&url, "certificate signed by unknown authority")
        );
        // The failure is this check's alone: a plain http check with the same roots passes.
        let (base, _heads) = serve(vec![reply("200 OK", "", "")]);
        let roots = no_roots(dir.path());
        assert_eq!(checker_trusting(&base, roots).check().await, Ok(()));
    }

    #[tokio::test]
    async fn an_https_check_trusts_the_certificates_it_finds() {
        let dir = tempfile::tempdir().unwrap();
        let (port, ca) = serve_tls(&["127.0.0.1"]).await;
        let certs = dir.path().join("certs");
        std::fs::create_dir(&certs).unwrap();
        std::fs::write(certs.join("test-authority.pem"), ca).unwrap();
        let roots = TrustedRoots::at(None, Some(certs));
        let c = checker_trusting(&format!("https://127.0.0.1:{port}/"), roots.clone());
        assert_eq!(c.check().await, Ok(()));
        assert!(roots.is_read());
    }

    #[tokio::test]
    async fn a_certificate_for_other_names_fails_in_gos_words() {
        let dir = tempfile::tempdir().unwrap();
        let bundle = dir.path().join("bundle.pem");
        let (port, ca) = serve_tls(&["localhost", "web.example"]).await;
        std::fs::write(&bundle, ca).unwrap();
        let url = format!("https://127.0.0.1:{port}/");
        assert_eq!(
            failure(&url, TrustedRoots::at(Some(bundle.clone()), None)).await,
            unverified(
                &url,
                "cannot validate certificate for 127.0.0.1 because it doesn't contain any IP SANs"
            )
        );
        let (port, ca) = serve_tls(&["127.0.0.1", "web.example"]).await;
        std::fs::write(&bundle, ca).unwrap();
        let url = format!("https://localhost:{port}/");
        assert_eq!(
            failure(&url, TrustedRoots::at(Some(bundle), None)).await,
            unverified(&url, "certificate is valid for web.example, not localhost")
        );
    }

    #[tokio::test]
    async fn the_name_and_the_dates_are_checked_before_the_authority_as_go_does() {
        let dir = tempfile::tempdir().unwrap();
        // No roots at all, and a certificate for another name: Go names the name.
        let (port, _ca) = serve_tls(&["localhost"]).await;
        let url = format!("https://127.0.0.1:{port}/");
        assert_eq!(
            failure(&url, no_roots(dir.path())).await,
            unverified(
                &url,
                "cannot validate certificate for 127.0.0.1 because it doesn't contain any IP SANs"
            )
        );
        // An expired certificate, whoever signed it: Go gives the dates.
        let (port, _ca) = serve_tls_until(&["127.0.0.1"], Some((2020, 1, 2))).await;
        let url = format!("https://127.0.0.1:{port}/");
        let message = failure(&url, no_roots(dir.path())).await;
        let prefix = unverified(
            &url,
            "certificate has expired or is not yet valid: current time ",
        );
        let rest = message.strip_prefix(&prefix).unwrap_or_else(|| {
            panic!("{message}");
        });
        let (now, not_after) = rest.split_once(" is after ").expect(rest);
        assert_eq!(not_after, "2020-01-02T00:00:00Z");
        assert!(
            now.parse::<jiff::Timestamp>().is_ok() && now.ends_with('Z'),
            "{now}"
        );
    }
}
