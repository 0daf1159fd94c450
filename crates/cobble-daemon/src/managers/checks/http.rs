//! The http probe: success is a GET that answers 2xx.
//!
//! Like Pebble's (a default Go `http.Client`), it follows up to 10 redirects, takes proxies
//! from `HTTP_PROXY`/`HTTPS_PROXY`/`NO_PROXY`, and verifies TLS against the system roots. On
//! a non-2xx answer the error details are the first lines of the first 512 bytes of the body.

use std::collections::BTreeMap;

use cobble_plan::HttpCheck;
use futures_util::future::BoxFuture;

use super::checker::{CheckError, Checker, MAX_ERROR_BYTES, details_from_body};
use crate::http_client::{build_client, is_loopback, root_cause};

/// GETs a URL with the configured headers.
pub(crate) struct HttpChecker {
    name: String,
    url: String,
    headers: BTreeMap<String, String>,
    /// Built on first use, then reused (with its connection pool) for every run.
    client: tokio::sync::OnceCell<Result<reqwest::Client, String>>,
}

impl HttpChecker {
    pub(crate) fn new(name: &str, config: &HttpCheck) -> HttpChecker {
        HttpChecker {
            name: name.to_owned(),
            url: config.url.clone(),
            headers: config.headers.clone(),
            client: tokio::sync::OnceCell::new(),
        }
    }

    async fn get(&self) -> Result<(), CheckError> {
        let url = reqwest::Url::parse(&self.url).map_err(|e| {
            CheckError::new(format!("cannot build request: parse \"{}\": {e}", self.url))
        })?;
        let direct = is_loopback(&url);
        let client = self
            .client
            .get_or_init(|| async move { build_client(direct) })
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
/// 127.0.0.1:1: connect: connection refused`), when that is what `error` is. Only for a
/// direct connection: through a proxy, the failure may be the proxy's.
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
}
