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

/// A connection to the daemon, whichever transport it uses.
pub(crate) trait Connection: AsyncRead + AsyncWrite + Unpin + Send {}

impl<T: AsyncRead + AsyncWrite + Unpin + Send> Connection for T {}

/// Opens a connection for something other than one HTTP exchange (a websocket).
async fn dial(endpoint: &Endpoint, path: &str) -> Result<Box<dyn Connection>, Error> {
    let label = format!("Get {:?}", endpoint.url(path));
    match endpoint {
        Endpoint::Unix(socket) => {
            let stream = UnixStream::connect(socket)
                .await
                .map_err(|e| Error::dial(label, &DialTarget::Unix(socket), e))?;
            Ok(Box::new(stream))
        }
        Endpoint::Tcp { authority, .. } => {
            let stream = TcpStream::connect(authority.as_str())
                .await
                .map_err(|e| Error::dial(label, &DialTarget::Tcp(authority), e))?;
            Ok(Box::new(stream))
        }
    }
}

/// The most a websocket handshake's answer may take before its body.
const MAX_HANDSHAKE_HEAD: usize = 64 * 1024;

/// Opens the websocket at `path`: the connection once the daemon has switched protocols, with
/// whatever it sent past its answer. On a refusal, the reason is the daemon's own message when
/// it answered with an error envelope.
pub(crate) async fn upgrade(
    endpoint: &Endpoint,
    path: &str,
) -> Result<(Box<dyn Connection>, bytes::BytesMut), String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio_tungstenite::tungstenite::handshake::{client::generate_key, derive_accept_key};

    let mut connection = dial(endpoint, path).await.map_err(|e| e.to_string())?;
    let (host, target) = match endpoint {
        Endpoint::Unix(_) => ("localhost", path.to_owned()),
        Endpoint::Tcp { authority, prefix } => (authority.as_str(), format!("{prefix}{path}")),
    };
    let key = generate_key();
    let request = format!(
        "GET {target} HTTP/1.1\r\nHost: {host}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: {key}\r\n\r\n"
    );
    let io = |e: std::io::Error| e.to_string();
    connection.write_all(request.as_bytes()).await.map_err(io)?;
    let mut buf = bytes::BytesMut::with_capacity(4096);
    let head_len = loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        if buf.len() > MAX_HANDSHAKE_HEAD {
            return Err("websocket: bad handshake (answer too long)".into());
        }
        if connection.read_buf(&mut buf).await.map_err(io)? == 0 {
            return Err("websocket: bad handshake (connection closed)".into());
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_len]).into_owned();
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .and_then(|line| line.split(' ').nth(1))
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| "websocket: bad handshake (malformed answer)".to_owned())?;
    let header = |name: &str| {
        head.split("\r\n").skip(1).find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.trim()
                .eq_ignore_ascii_case(name)
                .then(|| value.trim().to_owned())
        })
    };
    let _ = buf.split_to(head_len);
    if status == 101 {
        if header("Sec-WebSocket-Accept") != Some(derive_accept_key(key.as_bytes())) {
            return Err("websocket: bad handshake (wrong Sec-WebSocket-Accept)".into());
        }
        return Ok((connection, buf));
    }
    // An error: read its body for the daemon's message.
    let length = header("Content-Length").and_then(|len| len.parse::<usize>().ok());
    while length.is_none_or(|len| buf.len() < len) && buf.len() <= MAX_HANDSHAKE_HEAD {
        match connection.read_buf(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
    }
    let message = crate::client::decode_envelope(status, &buf)
        .err()
        .and_then(|e| match e {
            Error::Api { message, .. } => Some(message),
            _ => None,
        });
    Err(message.unwrap_or_else(|| format!("websocket: bad handshake (HTTP {status})")))
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
    let content_type = body.is_some().then_some("application/json");
    let body = Full::new(Bytes::from(body.unwrap_or_default()));
    let streamed = send_streaming(
        endpoint,
        method,
        path_and_query,
        "application/json",
        content_type,
        body,
    )
    .await?;
    let status_code = streamed.response.status().as_u16();
    let content_type = content_type_of(&streamed.response);
    let body = streamed
        .response
        .into_body()
        .collect()
        .await
        .map_err(|e| Error::broken(streamed.request_label, e))?
        .to_bytes()
        .to_vec();
    Ok(RawResponse {
        status_code,
        content_type,
        body,
    })
}

/// A response whose body has not been read yet.
pub(crate) struct StreamedResponse {
    /// The response head and its body, to be read frame by frame.
    pub response: hyper::Response<hyper::body::Incoming>,
    /// The request, Go style, for errors while reading the body.
    pub request_label: String,
}

/// The `Content-Type` header of a response, if it has a readable one.
pub(crate) fn content_type_of<B>(response: &hyper::Response<B>) -> Option<String> {
    response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// Sends one request with any body (streamed as it is produced) on a new connection, and
/// returns as soon as the response head has arrived.
pub(crate) async fn send_streaming<B>(
    endpoint: &Endpoint,
    method: Method,
    path_and_query: &str,
    accept: &str,
    content_type: Option<&str>,
    body: B,
) -> Result<StreamedResponse, Error>
where
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    // Go's url.Error spelling: `Get "http://localhost/v1/..."`.
    let request_label = format!(
        "{} {:?}",
        go_method_name(&method),
        endpoint.url(path_and_query)
    );
    let head = RequestHead {
        method,
        accept,
        content_type,
        request_label: &request_label,
    };
    let response = match endpoint {
        Endpoint::Unix(path) => {
            let stream = UnixStream::connect(path)
                .await
                .map_err(|e| Error::dial(request_label.clone(), &DialTarget::Unix(path), e))?;
            exchange(stream, "localhost", path_and_query, head, body).await?
        }
        Endpoint::Tcp { authority, prefix } => {
            let stream = TcpStream::connect(authority.as_str())
                .await
                .map_err(|e| Error::dial(request_label.clone(), &DialTarget::Tcp(authority), e))?;
            let full_path = format!("{prefix}{path_and_query}");
            exchange(stream, authority, &full_path, head, body).await?
        }
    };
    Ok(StreamedResponse {
        response,
        request_label,
    })
}

/// What a request says about itself besides its path and body.
struct RequestHead<'a> {
    method: Method,
    accept: &'a str,
    content_type: Option<&'a str>,
    request_label: &'a str,
}

async fn exchange<S, B>(
    stream: S,
    host: &str,
    path_and_query: &str,
    head: RequestHead<'_>,
    body: B,
) -> Result<hyper::Response<hyper::body::Incoming>, Error>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| Error::broken(head.request_label.to_string(), e))?;
    // The connection future drives the socket; it ends when the exchange is over.
    tokio::spawn(async move {
        let _ = connection.await;
    });

    let mut builder = Request::builder()
        .method(head.method)
        .uri(path_and_query)
        .header(HOST, host)
        .header(ACCEPT, head.accept)
        .header(USER_AGENT, concat!("cobble/", env!("CARGO_PKG_VERSION")));
    if let Some(content_type) = head.content_type {
        builder = builder.header(CONTENT_TYPE, content_type);
    }
    let request = builder
        .body(body)
        .map_err(|e| Error::Protocol(format!("cannot build request: {e}")))?;

    sender
        .send_request(request)
        .await
        .map_err(|e| Error::broken(head.request_label.to_string(), e))
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
