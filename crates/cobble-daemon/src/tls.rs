//! `--https`: the daemon's identity key, its server certificate, and client certificates.
//!
//! The identity key is an Ed25519 key kept in `$PEBBLE/identity/key.pem` (PKCS#8, the
//! directory 0700 and the file 0600), generated on the first start with `--https` and reused
//! after that, so clients that pinned the daemon keep recognising it. The server certificate
//! is self-signed with that key and made anew at every start.
//!
//! There is no certificate authority: a client certificate is trusted because a `cert`
//! identity holds that very certificate. So the handshake accepts any client certificate whose
//! signature proves the client holds its key; [`client_cert`] passes it on, and the access
//! decision matches it against identities and checks that it is a valid self-signed client
//! certificate (`identities::verify_self_signed`). Anything else is a peer with no
//! credentials.

use std::fs;
use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::DistinguishedName;
use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};

/// The identity key's directory under `$PEBBLE`, and the file in it.
const IDENTITY_DIR: &str = "identity";
const KEY_FILE: &str = "key.pem";

/// Why HTTPS cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot access key file {path:?}: {source}")]
    Access {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot create identity directory: {0}")]
    CreateDir(std::io::Error),
    #[error("cannot save identity key: {0}")]
    Save(std::io::Error),
    #[error("cannot load identity key: {0}")]
    Load(String),
    #[error("cannot generate identity key: {0}")]
    Generate(rcgen::Error),
    #[error("cannot create server certificate: {0}")]
    Certificate(String),
}

/// Loads the identity key from `pebble_dir`, generating and saving it on first use.
/// Blocking file IO: call it before the runtime serves, or off its workers.
pub fn identity_key(pebble_dir: &Path) -> Result<rcgen::KeyPair, TlsError> {
    let dir = pebble_dir.join(IDENTITY_DIR);
    let path = dir.join(KEY_FILE);
    match fs::symlink_metadata(&path) {
        Ok(_) => load_key(&dir, &path),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => generate_key(&dir, &path),
        Err(source) => Err(TlsError::Access { path, source }),
    }
}

fn expect_mode(path: &Path, mode: u32) -> Result<(), TlsError> {
    let meta = fs::metadata(path).map_err(|e| TlsError::Load(e.to_string()))?;
    let actual = meta.permissions().mode() & 0o777;
    if actual != mode {
        return Err(TlsError::Load(format!(
            "expected permission 0o{mode:o} (got 0o{actual:o}) for {path:?}"
        )));
    }
    Ok(())
}

fn load_key(dir: &Path, path: &Path) -> Result<rcgen::KeyPair, TlsError> {
    // A key others can read is no proof of identity; refuse it rather than serve with it.
    expect_mode(dir, 0o700)?;
    expect_mode(path, 0o600)?;
    let text = fs::read_to_string(path).map_err(|e| TlsError::Load(e.to_string()))?;
    let key = rcgen::KeyPair::from_pem(&text).map_err(|e| TlsError::Load(e.to_string()))?;
    if !key.is_compatible(&rcgen::PKCS_ED25519) {
        return Err(TlsError::Load("ed25519 type private key expected".into()));
    }
    Ok(key)
}

fn generate_key(dir: &Path, path: &Path) -> Result<rcgen::KeyPair, TlsError> {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).map_err(TlsError::Generate)?;
    let text = pkcs8_v1_pem(&key)?;
    match fs::create_dir(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(TlsError::CreateDir(e)),
    }
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700)).map_err(TlsError::CreateDir)?;
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(TlsError::Save)?;
    file.write_all(text.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(TlsError::Save)?;
    Ok(key)
}

/// The key as `openssl genpkey -algorithm Ed25519` writes it: a version 1 PKCS#8 document
/// (the seed alone), which OpenSSL and Go both read. ring makes version 2 documents (seed and
/// public key), which some of them do not.
fn pkcs8_v1_pem(key: &rcgen::KeyPair) -> Result<String, TlsError> {
    /// SEQUENCE { INTEGER 0, SEQUENCE { OID 1.3.101.112 }, OCTET STRING { OCTET STRING (32) } }
    const V1_PREFIX: [u8; 16] = [
        0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04,
        0x20,
    ];
    /// Where ring's version 2 document holds the seed: after the same header with version 1.
    const V2_SEED: std::ops::Range<usize> = 16..48;
    let v2 = key.serialize_der();
    let seed = v2
        .get(V2_SEED)
        .filter(|_| {
            v2.first() == Some(&0x30)
                && v2.get(2..5) == Some(&[0x02, 0x01, 0x01][..])
                && v2.get(5..16) == Some(&V1_PREFIX[5..16])
        })
        .ok_or_else(|| TlsError::Load("unexpected ed25519 key encoding".into()))?;
    let mut der = V1_PREFIX.to_vec();
    der.extend_from_slice(seed);
    Ok(pem::encode_config(
        &pem::Pem::new("PRIVATE KEY", der),
        pem::EncodeConfig::new().set_line_ending(pem::LineEnding::LF),
    ))
}

/// The TLS configuration of the `--https` listener: TLS 1.2 and 1.3 on ring, a fresh
/// self-signed certificate under the identity key, client certificates optional.
pub fn server_config(key: &rcgen::KeyPair) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let cert_err = |e: &dyn std::fmt::Display| TlsError::Certificate(e.to_string());
    let mut params =
        rcgen::CertificateParams::new(vec!["localhost".to_owned()]).map_err(|e| cert_err(&e))?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "cobble");
    let cert = params.self_signed(key).map_err(|e| cert_err(&e))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = Arc::new(AnyClientCert {
        algorithms: provider.signature_verification_algorithms,
    });
    let key_der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| cert_err(&e))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(vec![cert.der().clone()], key_der)
        .map_err(|e| cert_err(&e))?;
    Ok(Arc::new(config))
}

/// Accepts any client certificate at the handshake (the signature over the handshake still
/// proves the client holds its key); trust is decided against identities afterwards.
#[derive(Debug)]
struct AnyClientCert {
    algorithms: WebPkiSupportedAlgorithms,
}

impl ClientCertVerifier for AnyClientCert {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// The client certificate of a handshake, when the client presented exactly one (Pebble
/// takes no chains from clients). Whether an identity trusts it is decided per request.
pub fn client_cert(chain: Option<&[CertificateDer<'_>]>) -> Option<Arc<[u8]>> {
    match chain? {
        [cert] => Some(Arc::from(cert.as_ref())),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_file_is_a_version_1_document_of_the_same_key() {
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
        let text = pkcs8_v1_pem(&key).unwrap();
        let der = pem::parse(&text).unwrap().into_contents();
        // Version 0 (that is, PKCS#8 v1), and nothing after the 32-byte seed.
        assert_eq!(&der[..5], &[0x30, 0x2e, 0x02, 0x01, 0x00]);
        assert_eq!(der.len(), 48);
        let loaded = rcgen::KeyPair::from_pem(&text).unwrap();
        assert_eq!(loaded.public_key_raw(), key.public_key_raw());
    }

    #[test]
    fn a_key_is_made_once_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let first = identity_key(dir.path()).unwrap();
        let again = identity_key(dir.path()).unwrap();
        assert_eq!(first.public_key_raw(), again.public_key_raw());
        // A key others may read is refused.
        let path = dir.path().join("identity/key.pem");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        let err = identity_key(dir.path()).err().unwrap().to_string();
        assert!(
            err.contains("expected permission 0o600 (got 0o644)"),
            "{err}"
        );
    }
}
