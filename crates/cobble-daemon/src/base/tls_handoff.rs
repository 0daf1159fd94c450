//! Handing an `--https` connection to another program: how the re-execution's answer reaches
//! a client that asked over `--https`.
//!
//! A TLS session lives in the memory of the program that made its handshake (its keys, and
//! how many records each side has sent), and `execve` ends that memory. So the connection of
//! a client that asks for a re-execution over `--https` is taken out of the HTTP server just
//! before the exec ([`HandableTls::surrender`]): what rustls had queued for it is written out,
//! and the session's sending key, IV and next record number are extracted ([`Sealer`]). They
//! go, with the socket, in the handover document, which is a memory file and never reaches a
//! disk. The program that then answers (the new one, or the old one should it take over
//! again) seals its answer into TLS 1.3 `application_data` records with them and ends the
//! session with a `close_notify` alert, as rustls would have. Only the sending half goes
//! over: nothing more is read from the client, whose connection closes with the answer.
//!
//! The HTTPS server speaks TLS 1.3 only, with the three AEADs of ring's provider; a session
//! of anything else cannot be handed over, and the re-execution is refused.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use ring::aead;
use rustls::ConnectionTrafficSecrets;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;

/// The largest plaintext of one TLS record (RFC 8446, 5.1).
const MAX_FRAGMENT: usize = 1 << 14;
/// TLS 1.3's outer record type, and the inner types this writer seals.
const APPLICATION_DATA: u8 = 23;
const ALERT: u8 = 21;
/// An AEAD's tag, the same 16 bytes for each of the three.
const TAG_LEN: usize = 16;
/// How long writing out what rustls had queued, or the answer, may wait on a client that
/// does not read.
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// The AEAD of a TLS 1.3 session, by its name in the handover.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum Aead {
    Aes128Gcm,
    Aes256Gcm,
    Chacha20Poly1305,
}

impl Aead {
    fn algorithm(self) -> &'static aead::Algorithm {
        match self {
            Aead::Aes128Gcm => &aead::AES_128_GCM,
            Aead::Aes256Gcm => &aead::AES_256_GCM,
            Aead::Chacha20Poly1305 => &aead::CHACHA20_POLY1305,
        }
    }
}

/// The sending half of a TLS 1.3 session, out of rustls: enough to seal records the peer
/// reads as the session's next ones.
///
/// Whoever holds one holds the session's key: it is never logged (its `Debug` shows the
/// AEAD and the record number only) and its key is overwritten when it is dropped.
#[derive(Clone, Serialize, Deserialize)]
pub(crate) struct Sealer {
    aead: Aead,
    key: Vec<u8>,
    iv: [u8; aead::NONCE_LEN],
    /// The number of the next record sent.
    seq: u64,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sealer")
            .field("aead", &self.aead)
            .field("seq", &self.seq)
            .finish_non_exhaustive()
    }
}

impl Drop for Sealer {
    fn drop(&mut self) {
        self.key.iter_mut().for_each(|b| *b = 0);
        std::hint::black_box(&self.key);
    }
}

impl Sealer {
    /// The sending half rustls extracted: the next record's number and the traffic secrets.
    fn from_secrets((seq, secrets): (u64, ConnectionTrafficSecrets)) -> Result<Sealer, String> {
        let (aead, key, iv) = match secrets {
            ConnectionTrafficSecrets::Aes128Gcm { key, iv } => (Aead::Aes128Gcm, key, iv),
            ConnectionTrafficSecrets::Aes256Gcm { key, iv } => (Aead::Aes256Gcm, key, iv),
            ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } => {
                (Aead::Chacha20Poly1305, key, iv)
            }
            _ => return Err("the session's cipher cannot be handed over".to_owned()),
        };
        let iv = <[u8; aead::NONCE_LEN]>::try_from(iv.as_ref())
            .map_err(|_| "the session's IV is not 12 bytes".to_owned())?;
        Ok(Sealer {
            aead,
            key: key.as_ref().to_vec(),
            iv,
            seq,
        })
    }

    /// `data` as the session's next `application_data` records, then its `close_notify`.
    pub(crate) fn seal_and_close(&mut self, data: &[u8]) -> Result<Vec<u8>, String> {
        let key = aead::UnboundKey::new(self.aead.algorithm(), &self.key)
            .map_err(|_| "the session's key does not fit its cipher".to_owned())?;
        let key = aead::LessSafeKey::new(key);
        let mut out = Vec::with_capacity(data.len() + 64);
        for fragment in data.chunks(MAX_FRAGMENT) {
            self.record(&key, APPLICATION_DATA, fragment, &mut out)?;
        }
        // A warning-level `close_notify`: the answer is whole.
        self.record(&key, ALERT, &[1, 0], &mut out)?;
        Ok(out)
    }

    /// Appends one record: `fragment` and its inner type sealed under the next record's
    /// nonce, behind a header that says `application_data`, as every TLS 1.3 record's does
    /// (RFC 8446, 5.2).
    fn record(
        &mut self,
        key: &aead::LessSafeKey,
        inner_type: u8,
        fragment: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), String> {
        let sealed_len = u16::try_from(fragment.len() + 1 + TAG_LEN)
            .map_err(|_| "a record too long".to_owned())?;
        let [len_hi, len_lo] = sealed_len.to_be_bytes();
        let header = [APPLICATION_DATA, 3, 3, len_hi, len_lo];
        let mut nonce = self.iv;
        for (n, s) in nonce[aead::NONCE_LEN - 8..]
            .iter_mut()
            .zip(self.seq.to_be_bytes())
        {
            *n ^= s;
        }
        let mut body = Vec::with_capacity(usize::from(sealed_len));
        body.extend_from_slice(fragment);
        body.push(inner_type);
        key.seal_in_place_append_tag(
            aead::Nonce::assume_unique_for_key(nonce),
            aead::Aad::from(header),
            &mut body,
        )
        .map_err(|_| "cannot seal a record".to_owned())?;
        self.seq = self
            .seq
            .checked_add(1)
            .ok_or_else(|| "the session has no record numbers left".to_owned())?;
        out.extend_from_slice(&header);
        out.extend_from_slice(&body);
        Ok(())
    }
}

/// An `--https` connection as the HTTP server serves it, which a re-execution can take out
/// of the server ([`HandableTls::surrender`]) while a request on it waits for its answer.
/// Clones share the connection. Once it is surrendered, reading and writing fail, and the
/// server drops the connection.
#[derive(Clone)]
pub(crate) struct HandableTls {
    stream: Arc<Mutex<Option<TlsStream<TcpStream>>>>,
}

impl std::fmt::Debug for HandableTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HandableTls").finish_non_exhaustive()
    }
}

/// A connection taken out of the server: its socket, blocking, and its session's sending
/// half.
#[derive(Debug)]
pub(crate) struct Surrendered {
    pub socket: std::net::TcpStream,
    pub sealer: Sealer,
}

impl HandableTls {
    pub(crate) fn new(stream: TlsStream<TcpStream>) -> HandableTls {
        HandableTls {
            stream: Arc::new(Mutex::new(Some(stream))),
        }
    }

    /// Takes the connection out of the server: writes out the records rustls had queued
    /// (blocking, up to [`WRITE_TIMEOUT`]) and extracts its session's sending half. Whatever
    /// the outcome, the server has lost the connection.
    pub(crate) fn surrender(&self) -> Result<Surrendered, String> {
        let stream = self
            .stream
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
            .ok_or_else(|| "the connection has been taken already".to_owned())?;
        let (tcp, mut session) = stream.into_inner();
        let mut socket = tcp.into_std().map_err(|e| e.to_string())?;
        socket.set_nonblocking(false).map_err(|e| e.to_string())?;
        socket
            .set_write_timeout(Some(WRITE_TIMEOUT))
            .map_err(|e| e.to_string())?;
        while session.wants_write() {
            session.write_tls(&mut socket).map_err(|e| e.to_string())?;
        }
        let secrets = session
            .dangerous_extract_secrets()
            .map_err(|e| e.to_string())?;
        let sealer = Sealer::from_secrets(secrets.tx)?;
        Ok(Surrendered { socket, sealer })
    }

    /// Calls `f` on the connection, or fails if it has been surrendered.
    fn with<T>(
        &self,
        f: impl FnOnce(Pin<&mut TlsStream<TcpStream>>) -> Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        let mut stream = self.stream.lock().unwrap_or_else(PoisonError::into_inner);
        match stream.as_mut() {
            Some(stream) => f(Pin::new(stream)),
            None => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::NotConnected,
                "the connection was handed over",
            ))),
        }
    }
}

impl AsyncRead for HandableTls {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.with(|s| s.poll_read(cx, buf))
    }
}

impl AsyncWrite for HandableTls {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.with(|s| s.poll_write(cx, buf))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.with(|s| s.poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.with(|s| s.poll_flush(cx))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.with(|s| s.poll_shutdown(cx))
    }
}

/// Writes `data`, sealed by `sealer`, on `socket` and closes the session and the sending
/// half; then waits (up to a second) for the client to close its half, so that what it may
/// still send does not make the kernel reset the connection before it has read the answer.
pub(crate) fn answer(
    socket: &std::net::TcpStream,
    sealer: &mut Sealer,
    data: &[u8],
) -> io::Result<()> {
    use std::io::{Read, Write};
    let records = sealer.seal_and_close(data).map_err(io::Error::other)?;
    socket.set_nonblocking(false)?;
    socket.set_write_timeout(Some(WRITE_TIMEOUT))?;
    let written = (&*socket).write_all(&records);
    let _ = socket.shutdown(std::net::Shutdown::Write);
    let _ = socket.set_read_timeout(Some(Duration::from_secs(1)));
    let mut sink = [0u8; 4096];
    let mut drained = 0usize;
    while let Ok(n @ 1..) = (&*socket).read(&mut sink) {
        drained += n;
        if drained > 1 << 20 {
            break;
        }
    }
    written
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::sync::Arc;

    use rustls::Connection;
    use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};

    use super::*;

    /// A TLS 1.3 server that allows secret extraction and a client that trusts it, both
    /// offering only `suite`, their handshake done.
    fn pair(suite: rustls::SupportedCipherSuite) -> (Connection, Connection) {
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let provider = || {
            Arc::new(rustls::crypto::CryptoProvider {
                cipher_suites: vec![suite],
                ..rustls::crypto::ring::default_provider()
            })
        };
        let mut server = rustls::ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert.der().clone()], der)
            .unwrap();
        server.enable_secret_extraction = true;
        let mut roots = rustls::RootCertStore::empty();
        roots.add(cert.der().clone()).unwrap();
        let client = rustls::ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let mut server =
            Connection::Server(rustls::ServerConnection::new(Arc::new(server)).unwrap());
        let mut client = Connection::Client(
            rustls::ClientConnection::new(
                Arc::new(client),
                ServerName::try_from("localhost").unwrap(),
            )
            .unwrap(),
        );
        while server.is_handshaking() || client.is_handshaking() {
            transfer(&mut client, &mut server);
            transfer(&mut server, &mut client);
        }
        (server, client)
    }

    /// Moves what `from` has to send into `to`, returning what `to` reads of it.
    fn transfer(from: &mut Connection, to: &mut Connection) -> Vec<u8> {
        let mut wire = Vec::new();
        while from.wants_write() {
            from.write_tls(&mut wire).unwrap();
        }
        receive(to, &wire).unwrap().0
    }

    /// Has `to` read `wire`: returns the plaintext it read, and whether the session was
    /// closed with `close_notify`.
    fn receive(to: &mut Connection, wire: &[u8]) -> Result<(Vec<u8>, bool), rustls::Error> {
        let mut rest = wire;
        let mut plain = Vec::new();
        let mut closed = false;
        while !rest.is_empty() {
            to.read_tls(&mut rest).unwrap();
            to.process_new_packets()?;
            let mut buf = [0u8; 4096];
            loop {
                match to.reader().read(&mut buf) {
                    Ok(0) => {
                        closed = true;
                        break;
                    }
                    Ok(n) => plain.extend_from_slice(&buf[..n]),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) => panic!("{e}"),
                }
            }
        }
        Ok((plain, closed))
    }

    /// For each AEAD: after a handshake and an exchange through rustls (so the record
    /// numbers are past the session tickets and an answer), what the sealer writes with the
    /// extracted half is read by rustls's client as the session's next records, whole and in
    /// order, and ends it cleanly.
    #[test]
    fn sealed_records_are_read_by_rustls_as_the_sessions_next_ones() {
        let suites = [
            rustls::crypto::ring::cipher_suite::TLS13_AES_128_GCM_SHA256,
            rustls::crypto::ring::cipher_suite::TLS13_AES_256_GCM_SHA384,
            rustls::crypto::ring::cipher_suite::TLS13_CHACHA20_POLY1305_SHA256,
        ];
        for suite in suites {
            let (mut server, mut client) = pair(suite);
            client
                .writer()
                .write_all(b"GET / HTTP/1.1\r\n\r\n")
                .unwrap();
            transfer(&mut client, &mut server);
            server.writer().write_all(b"first answer").unwrap();
            assert_eq!(transfer(&mut server, &mut client), b"first answer");

            let secrets = server.dangerous_extract_secrets().unwrap();
            let mut sealer = Sealer::from_secrets(secrets.tx).unwrap();
            // Through the handover document and back, as the new program reads it.
            let json = serde_json::to_string(&sealer).unwrap();
            sealer = serde_json::from_str(&json).unwrap();
            // More than one record's worth.
            let answer: Vec<u8> = (0..40_000u32).map(|i| (i % 251) as u8).collect();
            let wire = sealer.seal_and_close(&answer).unwrap();
            let (read, closed) = receive(&mut client, &wire).unwrap();
            assert_eq!(read, answer, "{suite:?}");
            assert!(closed, "{suite:?}: ended by close_notify");
        }
    }

    #[test]
    fn a_record_sealed_with_the_wrong_number_is_refused() {
        let (server, mut client) =
            pair(rustls::crypto::ring::cipher_suite::TLS13_AES_128_GCM_SHA256);
        let secrets = server.dangerous_extract_secrets().unwrap();
        let mut sealer = Sealer::from_secrets(secrets.tx).unwrap();
        sealer.seq += 1;
        let wire = sealer.seal_and_close(b"answer").unwrap();
        assert!(receive(&mut client, &wire).is_err());
    }

    #[test]
    fn the_key_is_not_shown() {
        let sealer = Sealer {
            aead: Aead::Aes128Gcm,
            key: vec![0xAB; 16],
            iv: [7; 12],
            seq: 3,
        };
        let shown = format!("{sealer:?}");
        assert!(!shown.contains("171") && !shown.contains("AB") && shown.contains("seq: 3"));
    }
}
