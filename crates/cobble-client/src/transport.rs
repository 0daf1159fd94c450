//! One HTTP/1.1 exchange per connection, over a unix socket or TCP.
//!
//! A fresh connection per request is what ops does; it keeps the client free of pooling state
//! and means a daemon restart between two calls is invisible.

use std::path::PathBuf;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{ACCEPT, CONTENT_TYPE, HOST, USER_AGENT};
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpStream, UnixStream};

use crate::error::{DialTarget, Error};

/// The daemon's address, resolved from a [`crate::ClientConfig`].
#[derive(Debug, Clone)]
pub(crate) enum Endpoint {
    Unix(PathBuf),
    Tcp {
        /// `host:port`, also sent as the `Host` header.
        authority: String,
        /// A path prefix from the base URL, without a trailing slash (usually empty).
        prefix: String,
    },
}

impl Endpoint {
    pub(crate) fn from_config(config: &crate::ClientConfig) -> Result<Self, Error> {
        let Some(base_url) = &config.base_url else {
            return Ok(Endpoint::Unix(config.socket.clone()));
        };
        let rest = base_url.strip_prefix("http://").ok_or_else(|| {
            Error::Config(format!(
                "cannot use base URL {base_url:?}: only http:// URLs are supported"
            ))
        })?;
        let (authority, prefix) = match rest.find('/') {
            Some(at) => (&rest[..at], rest[at..].trim_end_matches('/')),
            None => (rest, ""),
        };
        if authority.is_empty() {
            return Err(Error::Config(format!(
                "cannot use base URL {base_url:?}: no host"
            )));
        }
        let authority = if authority
            .rsplit_once(':')
            .is_some_and(|(_, port)| !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()))
        {
            authority.to_string()
        } else {
            format!("{authority}:80")
        };
        Ok(Endpoint::Tcp {
            authority,
            prefix: prefix.to_string(),
        })
    }

    /// The full URL of a request, as Go prints it in errors.
    fn url(&self, path_and_query: &str) -> String {
        match self {
            Endpoint::Unix(_) => format!("http://localhost{path_and_query}"),
            Endpoint::Tcp { authority, prefix } => {
                format!("http://{authority}{prefix}{path_and_query}")
            }
        }
    }
}

/// A response whose envelope has not been looked at yet.
#[derive(Debug, Clone)]
pub struct RawResponse {
    /// The HTTP status code.
    pub status_code: u16,
    /// The `Content-Type` header, if any.
    pub content_type: Option<String>,
    /// The whole body.
    pub body: Vec<u8>,
}

/// Sends one request on a new connection and reads the whole response.
pub(crate) async fn send(
    endpoint: &Endpoint,
    method: Method,
    path_and_query: &str,
    body: Option<Vec<u8>>,
) -> Result<RawResponse, Error> {
    // Go's url.Error spelling: `Get "http://localhost/v1/..."`.
    let request_label = format!(
        "{} {:?}",
        go_method_name(&method),
        endpoint.url(path_and_query)
    );
    match endpoint {
        Endpoint::Unix(path) => {
            let stream = UnixStream::connect(path)
                .await
                .map_err(|e| Error::dial(request_label.clone(), &DialTarget::Unix(path), e))?;
            exchange(
                stream,
                "localhost",
                method,
                path_and_query,
                body,
                request_label,
            )
            .await
        }
        Endpoint::Tcp { authority, prefix } => {
            let stream = TcpStream::connect(authority.as_str())
                .await
                .map_err(|e| Error::dial(request_label.clone(), &DialTarget::Tcp(authority), e))?;
            let full_path = format!("{prefix}{path_and_query}");
            exchange(stream, authority, method, &full_path, body, request_label).await
        }
    }
}

async fn exchange<S>(
    stream: S,
    host: &str,
    method: Method,
    path_and_query: &str,
    body: Option<Vec<u8>>,
    request_label: String,
) -> Result<RawResponse, Error>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| Error::broken(request_label.clone(), e))?;
    // The connection future drives the socket; it ends when the exchange is over.
    tokio::spawn(async move {
        let _ = connection.await;
    });

    let mut builder = Request::builder()
        .method(method)
        .uri(path_and_query)
        .header(HOST, host)
        .header(ACCEPT, "application/json")
        .header(USER_AGENT, concat!("cobble/", env!("CARGO_PKG_VERSION")));
    if body.is_some() {
        builder = builder.header(CONTENT_TYPE, "application/json");
    }
    let request = builder
        .body(Full::new(Bytes::from(body.unwrap_or_default())))
        .map_err(|e| Error::Protocol(format!("cannot build request: {e}")))?;

    let response = sender
        .send_request(request)
        .await
        .map_err(|e| Error::broken(request_label.clone(), e))?;
    let status_code = response.status().as_u16();
    let content_type = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| Error::broken(request_label, e))?
        .to_bytes()
        .to_vec();
    Ok(RawResponse {
        status_code,
        content_type,
        body,
    })
}

/// Go's `url.Error` operation name: the method with only its first letter in upper case.
fn go_method_name(method: &Method) -> String {
    let name = method.as_str();
    let mut out = String::with_capacity(name.len());
    for (i, c) in name.chars().enumerate() {
        if i == 0 {
            out.push(c.to_ascii_uppercase());
        } else {
            out.push(c.to_ascii_lowercase());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ClientConfig;

    fn tcp(url: &str) -> Result<Endpoint, Error> {
        Endpoint::from_config(&ClientConfig {
            socket: PathBuf::new(),
            base_url: Some(url.into()),
        })
    }

    #[test]
    fn base_url_with_port_and_prefix() {
        let Endpoint::Tcp { authority, prefix } = tcp("http://127.0.0.1:4000/api/").unwrap() else {
            panic!("expected tcp");
        };
        assert_eq!(authority, "127.0.0.1:4000");
        assert_eq!(prefix, "/api");
    }

    #[test]
    fn base_url_without_port_uses_80() {
        let Endpoint::Tcp { authority, .. } = tcp("http://example.test").unwrap() else {
            panic!("expected tcp");
        };
        assert_eq!(authority, "example.test:80");
    }

    #[test]
    fn https_is_refused() {
        assert!(matches!(tcp("https://x:1"), Err(Error::Config(_))));
    }

    #[test]
    fn method_names_like_go() {
        assert_eq!(go_method_name(&Method::GET), "Get");
        assert_eq!(go_method_name(&Method::POST), "Post");
    }

    /// Serves one canned response on a unix socket and hands back the request head it read.
    async fn serve_once(
        listener: tokio::net::UnixListener,
        response: &'static str,
    ) -> tokio::task::JoinHandle<String> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = stream.read(&mut buf).await.unwrap();
                assert!(n > 0, "client closed early");
                head.extend_from_slice(&buf[..n]);
            }
            stream.write_all(response.as_bytes()).await.unwrap();
            stream.shutdown().await.unwrap();
            String::from_utf8(head).unwrap()
        })
    }

    #[tokio::test]
    async fn unix_request_sends_host_localhost_and_decodes() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join(".pebble.socket");
        let listener = tokio::net::UnixListener::bind(&socket).unwrap();
        let body = r#"{"type":"sync","status-code":200,"status":"OK","result":{"boot-id":"x","version":"v9"}}"#;
        let response: &'static str = Box::leak(
            format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .into_boxed_str(),
        );
        let server = serve_once(listener, response).await;

        let client = crate::Client::new(ClientConfig::socket(&socket)).unwrap();
        let info = client.system_info().await.unwrap();
        assert_eq!(info.version, "v9");

        let head = server.await.unwrap().to_ascii_lowercase();
        assert!(
            head.starts_with("get /v1/system-info http/1.1\r\n"),
            "{head}"
        );
        assert!(head.contains("\r\nhost: localhost\r\n"), "{head}");
    }

    #[tokio::test]
    async fn missing_socket_is_a_connection_error() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("nope.socket");
        let client = crate::Client::new(ClientConfig::socket(&socket)).unwrap();
        let err = client.services(&[]).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "cannot communicate with server: Get \"http://localhost/v1/services?names=\": socket {:?} not found",
                socket.display().to_string()
            )
        );
    }
}
