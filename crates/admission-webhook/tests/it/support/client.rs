//! A TLS client for the webhook that trusts one CA, keeps its connection alive, and can tell
//! which certificate the server presented.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::Value;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

pub(crate) struct Client {
    sender: SendRequest<Full<Bytes>>,
    /// The end-entity certificate of this connection.
    pub peer: Vec<u8>,
}

fn connector(ca_pem: &str) -> TlsConnector {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::pem::PemObject::pem_slice_iter(ca_pem.as_bytes()) {
        let cert: CertificateDer<'static> = cert.unwrap();
        roots.add(cert).unwrap();
    }
    let config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    TlsConnector::from(Arc::new(config))
}

impl Client {
    pub(crate) async fn connect(port: u16, ca_pem: &str) -> std::io::Result<Client> {
        let tcp = TcpStream::connect(("127.0.0.1", port)).await?;
        Client::handshake(tcp, ca_pem).await
    }

    /// TLS, then HTTP/1.1, over a connection already made.
    pub(crate) async fn handshake(tcp: TcpStream, ca_pem: &str) -> std::io::Result<Client> {
        let tls = connector(ca_pem)
            .connect(ServerName::try_from("localhost").unwrap(), tcp)
            .await?;
        let peer = tls.get_ref().1.peer_certificates().unwrap()[0].to_vec();
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(std::io::Error::other)?;
        tokio::spawn(connection);
        Ok(Client { sender, peer })
    }

    /// Connects, retrying until the webhook listens (bounded).
    pub(crate) async fn connect_when_ready(port: u16, ca_pem: &str, timeout: Duration) -> Client {
        let deadline = Instant::now() + timeout;
        loop {
            match Client::connect(port, ca_pem).await {
                Ok(client) => return client,
                Err(err) if Instant::now() < deadline => {
                    let _ = err;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(err) => panic!("the webhook did not serve within {timeout:?}: {err}"),
            }
        }
    }

    pub(crate) async fn request(
        &mut self,
        method: &str,
        path: &str,
        content_type: &str,
        body: Vec<u8>,
    ) -> (StatusCode, Bytes) {
        let request = Request::builder()
            .method(method)
            .uri(path)
            .header("host", "localhost")
            .header("content-type", content_type)
            .body(Full::new(Bytes::from(body)))
            .unwrap();
        self.sender.ready().await.unwrap();
        let response = self.sender.send_request(request).await.unwrap();
        let status = response.status();
        (
            status,
            response.into_body().collect().await.unwrap().to_bytes(),
        )
    }

    /// POSTs an AdmissionReview and returns the parsed answer.
    pub(crate) async fn review(&mut self, review: &Value) -> Value {
        let (status, body) = self
            .request(
                "POST",
                "/apply-poddefault",
                "application/json",
                serde_json::to_vec(review).unwrap(),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
        serde_json::from_slice(&body).unwrap()
    }
}

/// The certificate a fresh handshake gets, or None if none can be made.
pub(crate) async fn presented_cert(port: u16, ca_pem: &str) -> Option<Vec<u8>> {
    Client::connect(port, ca_pem).await.ok().map(|c| c.peer)
}
