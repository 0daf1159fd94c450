//! `--https` as Pebble's Go client (`client/client.go` of v1.32) sees it.
//!
//! That client turns off the usual certificate checks and runs its own on every handshake:
//! the server must present exactly two certificates, a TLS leaf and the server's identity
//! certificate; with a pinned fingerprint, the base32 of the SHA-384 of the identity
//! certificate's raw Ed25519 public key must match it; with a pinned identity certificate,
//! the leaf must verify against that certificate as the only root; with
//! `TLSServerInsecure`, nothing more. The server allows TLS 1.3 only. This test checks the
//! same things, computed here independently of the daemon, so CI (which has no Go) catches
//! any drift; the Go client itself was run against the same daemon by hand.

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::{Arc, Mutex};

use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime};

use crate::fixture::{Daemon, free_port};

/// What the Go client is told to trust.
enum Trust {
    /// `TLSServerFingerprint`.
    Fingerprint(String),
    /// `TLSServerIDCert`.
    IdCert(CertificateDer<'static>),
    /// `TLSServerInsecure`.
    Insecure,
}

/// `verifyConnection` of Pebble's Go client, on the chain the server presented.
fn go_client_verify(chain: &[CertificateDer<'_>], trust: &Trust) -> Result<(), String> {
    if chain.len() != 2 {
        return Err(format!(
            "cannot find identity certificate: expected 2 certificates, got {}",
            chain.len()
        ));
    }
    match trust {
        Trust::Fingerprint(pinned) => {
            let key = ed25519_public_key(&chain[1]).ok_or(
                "cannot obtain identity fingerprint: certificate must use Ed25519 public key",
            )?;
            if fingerprint(&key) == *pinned {
                Ok(())
            } else {
                Err("server fingerprint mismatch".into())
            }
        }
        Trust::IdCert(root) => {
            let anchor = webpki::anchor_from_trusted_cert(root).map_err(|e| e.to_string())?;
            let leaf = webpki::EndEntityCert::try_from(&chain[0]).map_err(|e| e.to_string())?;
            leaf.verify_for_usage(
                webpki::ALL_VERIFICATION_ALGS,
                &[anchor],
                &[],
                UnixTime::now(),
                webpki::KeyUsage::server_auth(),
                None,
                None,
            )
            .map(|_| ())
            .map_err(|e| e.to_string())
        }
        Trust::Insecure => Ok(()),
    }
}

/// The raw 32-byte Ed25519 key of a certificate, if that is its key type.
fn ed25519_public_key(cert: &CertificateDer<'_>) -> Option<Vec<u8>> {
    use x509_parser::prelude::{FromDer, X509Certificate};
    let (_, parsed) = X509Certificate::from_der(cert.as_ref()).ok()?;
    let spki = parsed.public_key();
    (spki.algorithm.algorithm.to_id_string() == "1.3.101.112")
        .then(|| spki.subject_public_key.data.to_vec())
}

/// Pebble's identity fingerprint: base32, no padding, of SHA-384 of the raw public key.
fn fingerprint(public_key: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA384, public_key);
    data_encoding::BASE32_NOPAD.encode(digest.as_ref())
}

/// Takes whatever the server presents, keeping it for the test to judge (the Go client sets
/// `InsecureSkipVerify` and judges in `VerifyConnection`).
#[derive(Debug)]
struct Recorder {
    provider: Arc<rustls::crypto::CryptoProvider>,
    chain: Mutex<Vec<CertificateDer<'static>>>,
}

impl rustls::client::danger::ServerCertVerifier for Recorder {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        let mut chain = vec![end_entity.clone().into_owned()];
        chain.extend(intermediates.iter().map(|c| c.clone().into_owned()));
        *self.chain.lock().unwrap() = chain;
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
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
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// One handshake as the Go client makes it (with an ephemeral client certificate, which that
/// client always sends), then `GET /v1/system-info` on it. Returns the chain, the protocol
/// version and the HTTP status line; or the handshake's error.
fn handshake(
    port: u16,
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> Result<
    (
        Vec<CertificateDer<'static>>,
        rustls::ProtocolVersion,
        String,
    ),
    String,
> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let recorder = Arc::new(Recorder {
        provider: provider.clone(),
        chain: Mutex::new(Vec::new()),
    });
    let client_key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let client_cert = params.self_signed(&client_key).unwrap();
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(recorder.clone())
        .with_client_auth_cert(
            vec![client_cert.der().clone()],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(client_key.serialize_der())),
        )
        .unwrap();
    let mut tcp = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut conn =
        rustls::ClientConnection::new(Arc::new(config), ServerName::try_from("localhost").unwrap())
            .unwrap();
    let mut tls = rustls::Stream::new(&mut conn, &mut tcp);
    tls.write_all(b"GET /v1/system-info HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .map_err(|e| e.to_string())?;
    let mut answer = String::new();
    let _ = tls.read_to_string(&mut answer);
    let version = conn.protocol_version().ok_or("no protocol version")?;
    let chain = recorder.chain.lock().unwrap().clone();
    let status = answer.lines().next().unwrap_or_default().to_owned();
    Ok((chain, version, status))
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

fn pem_der(path: &Path) -> CertificateDer<'static> {
    use rustls_pki_types::pem::PemObject;
    CertificateDer::from_pem_file(path).unwrap()
}

#[test]
fn https_serves_the_identity_chain_pebbles_go_client_requires() {
    let port = free_port();
    let https = format!("127.0.0.1:{port}");
    let args = ["--hold", "--https", https.as_str()];
    let mut daemon = Daemon::start(&[], &args);
    let dir = daemon.pebble_dir();
    let key_path = dir.join("identity/key.pem");
    let id_path = dir.join("tls/identity.pem");
    // Pebble's files and modes.
    assert_eq!(mode(&dir.join("identity")), 0o700);
    assert_eq!(mode(&key_path), 0o600);
    assert_eq!(mode(&dir.join("tls")), 0o700);
    assert_eq!(mode(&id_path), 0o600);
    let identity = pem_der(&id_path);
    let key = rcgen::KeyPair::from_pem(&std::fs::read_to_string(&key_path).unwrap()).unwrap();
    let pinned = fingerprint(key.public_key_raw());

    let (chain, version, status) = handshake(port, &[&rustls::version::TLS13]).unwrap();
    assert_eq!(version, rustls::ProtocolVersion::TLSv1_3);
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert_eq!(chain.len(), 2, "a leaf and the identity certificate");
    assert_eq!(chain[1], identity, "the second is $PEBBLE/tls/identity.pem");
    // Every way the Go client can be told to trust the server works...
    for trust in [
        Trust::Fingerprint(pinned.clone()),
        Trust::IdCert(identity.clone()),
        Trust::Insecure,
    ] {
        go_client_verify(&chain, &trust).unwrap();
    }
    // ... and means something.
    assert_eq!(
        go_client_verify(&chain, &Trust::Fingerprint("NOT".into())),
        Err("server fingerprint mismatch".into())
    );
    let other_key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
    let other = rcgen::CertificateParams::new(Vec::<String>::new())
        .unwrap()
        .self_signed(&other_key)
        .unwrap();
    assert!(go_client_verify(&chain, &Trust::IdCert(other.der().clone())).is_err());
    assert!(go_client_verify(&chain[..1], &Trust::Insecure).is_err());

    // The shapes Pebble gives them: an Ed25519 CA that signs leaves only, valid for ten
    // years, and an Ed25519 leaf of its own key, for server authentication, valid an hour.
    use x509_parser::prelude::{FromDer, X509Certificate};
    let (_, id) = X509Certificate::from_der(identity.as_ref()).unwrap();
    let (_, leaf) = X509Certificate::from_der(chain[0].as_ref()).unwrap();
    let constraints = id.basic_constraints().unwrap().unwrap().value;
    assert!(constraints.ca && constraints.path_len_constraint == Some(0));
    let usage = id.key_usage().unwrap().unwrap().value;
    assert!(usage.key_cert_sign() && usage.crl_sign() && !usage.digital_signature());
    let years = id.validity().not_after.timestamp() - id.validity().not_before.timestamp();
    assert_eq!(years, 10 * 366 * 24 * 3600);
    assert_eq!(id.subject().as_raw(), id.issuer().as_raw(), "self-signed");
    assert_eq!(leaf.issuer().as_raw(), id.subject().as_raw());
    let hour = leaf.validity().not_after.timestamp() - leaf.validity().not_before.timestamp();
    assert_eq!(hour, 3600);
    assert!(!leaf.basic_constraints().unwrap().unwrap().value.ca);
    assert!(
        leaf.extended_key_usage()
            .unwrap()
            .unwrap()
            .value
            .server_auth
    );
    assert!(leaf.key_usage().unwrap().unwrap().value.digital_signature());
    let leaf_key = ed25519_public_key(&chain[0]).expect("an Ed25519 leaf");
    assert_ne!(
        leaf_key,
        key.public_key_raw(),
        "the leaf has a key of its own"
    );
    let name = id.subject().iter_common_name().next().unwrap();
    assert!(
        name.as_str()
            .unwrap()
            .ends_with(&format!("-{}", &pinned[..8])),
        "{name:?}"
    );
    // The leaf is kept for its hour, not made per handshake.
    let (again, _, _) = handshake(port, &[&rustls::version::TLS13]).unwrap();
    assert_eq!(again[0], chain[0]);

    // TLS 1.2 is refused.
    assert!(handshake(port, &[&rustls::version::TLS12]).is_err());

    // A restart keeps the identity, and makes a new leaf.
    daemon.stop();
    daemon.restart(&args);
    assert_eq!(pem_der(&id_path), identity);
    let (after, _, _) = handshake(port, &[&rustls::version::TLS13]).unwrap();
    assert_eq!(after[1], identity);
    assert_ne!(after[0], chain[0]);
    go_client_verify(&after, &Trust::Fingerprint(pinned.clone())).unwrap();

    // An identity certificate of another key is replaced by one of this key.
    daemon.stop();
    std::fs::write(&id_path, other.pem()).unwrap();
    daemon.restart(&args);
    let replaced = pem_der(&id_path);
    assert_ne!(replaced, other.der().clone());
    let (chain, _, _) = handshake(port, &[&rustls::version::TLS13]).unwrap();
    assert_eq!(chain[1], replaced);
    go_client_verify(&chain, &Trust::Fingerprint(pinned)).unwrap();
}

/// A `tls` directory others may read makes Pebble fail every handshake until it is fixed;
/// cobble starts all the same and serves HTTPS as soon as the directory is right again.
#[test]
fn https_with_a_bad_tls_directory_starts_and_recovers_when_it_is_fixed() {
    let port = free_port();
    let https = format!("127.0.0.1:{port}");
    let args = ["--hold", "--https", https.as_str()];
    let mut daemon = Daemon::start(&[], &args);
    let tls_dir = daemon.pebble_dir().join("tls");
    daemon.stop();
    std::fs::set_permissions(&tls_dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    daemon.restart(&args);
    daemon.wait_log("Cannot serve HTTPS yet: cannot create TLS directory: expected permission 0o700 (got 0o755)");
    // The unix socket serves meanwhile; HTTPS handshakes fail.
    crate::fixture::Test::daemon(&daemon)
        .args(&["services"])
        .stderr("Plan has no services.\n")
        .run();
    assert!(handshake(port, &[&rustls::version::TLS13]).is_err());
    std::fs::set_permissions(&tls_dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    crate::fixture::wait_for(
        "HTTPS to come up",
        std::time::Duration::from_secs(10),
        || handshake(port, &[&rustls::version::TLS13]).is_ok_and(|(chain, _, _)| chain.len() == 2),
    );
}
