//! `--https`: the daemon's identity key, its identity certificate, the short-lived TLS
//! certificates it serves, and client certificates.
//!
//! The shape is Pebble's, because Pebble's Go client accepts nothing else:
//!
//! - The **identity key** is an Ed25519 key kept in `$PEBBLE/identity/key.pem` (PKCS#8, the
//!   directory 0700 and the file 0600), generated on the first start with `--https` and
//!   reused after that. Its fingerprint, the base32 (no padding) of the SHA-384 of the raw
//!   public key, is what clients pin.
//! - The **identity certificate**, `$PEBBLE/tls/identity.pem` (the directory 0700, the file
//!   0600), is self-signed with that key: a CA that may sign only leaves (path length 0),
//!   valid for just over ten years, named `<program>-<first 8 fingerprint characters>`. It is
//!   kept while it matches the key, and made anew when the key is not the one it certifies.
//!   A `$PEBBLE` that Pebble used keeps its identity: its key and certificate are read as
//!   they are.
//! - Every handshake presents a **chain of two**: a TLS leaf with a key of its own (Ed25519,
//!   server authentication only, valid for an hour, the same name) signed by the identity
//!   certificate, then the identity certificate. A leaf is made in memory when the first
//!   handshake needs it and replaced once it is within a minute of its end, as Pebble does;
//!   a daemon restart always makes a new one.
//! - **TLS 1.3 only.**
//!
//! Pebble makes the identity certificate at the first handshake; cobble makes it when the
//! daemon starts, so no handshake waits on the disk. If it cannot (a `tls` directory with
//! other permissions, say), the daemon starts anyway, logs why, and each later handshake,
//! which fails meanwhile, tries again in the background, so fixing the directory is enough.
//!
//! There is no certificate authority for clients: a client certificate is trusted because a
//! `cert` identity holds that very certificate. So the handshake takes any one client
//! certificate whose signature proves the client holds its key; [`client_cert`] passes it on,
//! and the access decision matches it against identities and checks that it is a valid
//! self-signed client certificate (`identities::verify_self_signed`); one no identity holds
//! is a peer with no credentials. As in Pebble, a client that presents no certificate, or a
//! chain of more than one, is refused at the handshake: even the open endpoints are served
//! only to a client with exactly one certificate.

use std::fs;
use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use rustls::DistinguishedName;
use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

/// The identity key's directory under `$PEBBLE`, and the file in it.
const IDENTITY_DIR: &str = "identity";
const KEY_FILE: &str = "key.pem";
/// The identity certificate's directory under `$PEBBLE`, and the file in it.
const TLS_DIR: &str = "tls";
const ID_CERT_FILE: &str = "identity.pem";
/// How long an identity certificate is valid: ten leap years, as Pebble makes it.
const ID_CERT_VALIDITY: Duration = Duration::from_secs(10 * 366 * 24 * 3600);
/// How long a TLS leaf is valid.
const LEAF_VALIDITY: Duration = Duration::from_secs(3600);
/// A leaf this close to its end is replaced before the next handshake, so that no handshake
/// races its expiry.
const LEAF_RENEW_WINDOW: Duration = Duration::from_secs(60);

/// Why HTTPS cannot be served.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TlsError {
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
    #[error("cannot create TLS directory: {0}")]
    TlsDir(String),
    #[error("cannot get identity certificate: {0}")]
    IdentityCertificate(String),
}

/// Loads the identity key from `pebble_dir`, generating and saving it on first use.
/// Blocking file IO: call it before the runtime serves, or off its workers.
pub(crate) fn identity_key(pebble_dir: &Path) -> Result<rcgen::KeyPair, TlsError> {
    let dir = pebble_dir.join(IDENTITY_DIR);
    let path = dir.join(KEY_FILE);
    match fs::symlink_metadata(&path) {
        Ok(_) => load_key(&dir, &path),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => generate_key(&dir, &path),
        Err(source) => Err(TlsError::Access { path, source }),
    }
}

impl TlsError {
    /// The message without the prefix of the step it failed in.
    fn detail(self) -> String {
        match self {
            TlsError::Load(message) => message,
            other => other.to_string(),
        }
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

/// The identity certificate of `key`: `$PEBBLE/tls/identity.pem` if it certifies that key,
/// otherwise a new one, saved there. Blocking file IO: call it off the runtime's workers.
pub(crate) fn identity_certificate(
    pebble_dir: &Path,
    key: &rcgen::KeyPair,
) -> Result<CertificateDer<'static>, TlsError> {
    let dir = pebble_dir.join(TLS_DIR);
    match fs::symlink_metadata(&dir) {
        Ok(_) => expect_mode(&dir, 0o700).map_err(|e| TlsError::TlsDir(e.detail()))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            fs::DirBuilder::new()
                .mode(0o700)
                .create(&dir)
                .map_err(|e| TlsError::TlsDir(e.to_string()))?;
            // The mode given to mkdir is narrowed by the umask; this one is not.
            fs::set_permissions(&dir, fs::Permissions::from_mode(0o700))
                .map_err(|e| TlsError::TlsDir(e.to_string()))?;
        }
        Err(e) => return Err(TlsError::TlsDir(e.to_string())),
    }
    let path = dir.join(ID_CERT_FILE);
    let failed = |e: String| TlsError::IdentityCertificate(e);
    match fs::symlink_metadata(&path) {
        Ok(_) => {
            let cert = load_identity_certificate(&path).map_err(failed)?;
            if certifies(&cert, key) {
                return Ok(cert);
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(failed(e.to_string())),
    }
    let cert = new_identity_certificate(key)?;
    save_identity_certificate(&path, &cert).map_err(|e| failed(e.to_string()))?;
    Ok(cert)
}

/// One `CERTIFICATE` block and nothing else, from a file only its owner may read.
fn load_identity_certificate(path: &Path) -> Result<CertificateDer<'static>, String> {
    expect_mode(path, 0o600).map_err(|e| e.detail())?;
    let text = fs::read(path).map_err(|e| e.to_string())?;
    let missing = || format!("missing 'CERTIFICATE' block in {path:?}");
    let mut blocks = pem::parse_many(&text).map_err(|_| missing())?.into_iter();
    let block = blocks
        .next()
        .filter(|b| b.tag() == "CERTIFICATE")
        .ok_or_else(missing)?;
    if blocks.next().is_some() {
        return Err(format!(
            "unexpected bytes after 'CERTIFICATE' block in {path:?}"
        ));
    }
    let der = CertificateDer::from(block.into_contents());
    use x509_parser::prelude::{FromDer, X509Certificate};
    X509Certificate::from_der(der.as_ref()).map_err(|e| e.to_string())?;
    Ok(der)
}

/// Whether `cert` holds the public half of `key`.
fn certifies(cert: &CertificateDer<'_>, key: &rcgen::KeyPair) -> bool {
    use x509_parser::prelude::{FromDer, X509Certificate};
    X509Certificate::from_der(cert.as_ref()).is_ok_and(|(_, parsed)| {
        parsed.public_key().subject_public_key.data.as_ref() == key.public_key_raw()
    })
}

fn save_identity_certificate(path: &Path, cert: &CertificateDer<'_>) -> std::io::Result<()> {
    let text = pem::encode_config(
        &pem::Pem::new("CERTIFICATE", cert.to_vec()),
        pem::EncodeConfig::new().set_line_ending(pem::LineEnding::LF),
    );
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(text.as_bytes())?;
    file.sync_all()
}

/// The identity's fingerprint, as Pebble's identity key and its Go client compute it: the
/// base32 (standard alphabet, no padding) of the SHA-384 of the raw Ed25519 public key.
pub(crate) fn fingerprint(public_key: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA384, public_key);
    base32(digest.as_ref())
}

/// RFC 4648 base32 without padding.
fn base32(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    let mut out = String::with_capacity(bytes.len().div_ceil(5) * 8);
    let (mut buffer, mut bits) = (0u32, 0u32);
    for &byte in bytes {
        buffer = (buffer << 8) | u32::from(byte);
        bits += 8;
        while bits >= 5 {
            bits -= 5;
            out.push(char::from(ALPHABET[((buffer >> bits) & 31) as usize]));
        }
    }
    if bits > 0 {
        out.push(char::from(ALPHABET[((buffer << (5 - bits)) & 31) as usize]));
    }
    out
}

/// `<program>-<first 8 characters of the fingerprint>`, the name of both certificates: the
/// program as it was invoked (`pebble` through Pebble's name), at most 55 ASCII bytes so
/// that the name fits the 64 bytes a common name may have.
fn certificate_name(key: &rcgen::KeyPair) -> rcgen::DistinguishedName {
    let invoked = std::env::args_os().next();
    let program = invoked
        .as_deref()
        .map(Path::new)
        .and_then(Path::file_name)
        .and_then(|n| n.to_str())
        .filter(|n| {
            !n.is_empty()
                && n.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        })
        .unwrap_or("cobble");
    let fingerprint = fingerprint(key.public_key_raw());
    let name = format!(
        "{}-{}",
        &program[..program.len().min(55)],
        &fingerprint[..8]
    );
    let mut dn = rcgen::DistinguishedName::new();
    // Go writes a name of these characters as a PrintableString; so does this.
    let value = rcgen::string::PrintableString::try_from(name.clone()).map_or(
        rcgen::DnValue::Utf8String(name),
        rcgen::DnValue::PrintableString,
    );
    dn.push(rcgen::DnType::CommonName, value);
    dn
}

/// A random positive serial number of up to 128 bits, as Go's `rand.Int(2^128)` gives.
fn serial_number() -> Result<rcgen::SerialNumber, TlsError> {
    use ring::rand::SecureRandom as _;
    let mut bytes = [0u8; 16];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| TlsError::Certificate("cannot generate serial number".into()))?;
    Ok(rcgen::SerialNumber::from_slice(&bytes))
}

fn new_identity_certificate(key: &rcgen::KeyPair) -> Result<CertificateDer<'static>, TlsError> {
    let cert_err = |e: rcgen::Error| TlsError::IdentityCertificate(e.to_string());
    let now = SystemTime::now();
    let mut params = rcgen::CertificateParams::default();
    params.serial_number = Some(serial_number()?);
    params.distinguished_name = certificate_name(key);
    params.not_before = time::OffsetDateTime::from(now);
    params.not_after = time::OffsetDateTime::from(now + ID_CERT_VALIDITY);
    params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::CrlSign,
    ];
    // It signs leaves only.
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Constrained(0));
    Ok(params.self_signed(key).map_err(cert_err)?.der().clone())
}

/// A TLS leaf for `now`, with a key of its own, signed by the identity; the chain it is
/// served with; and when it must be replaced.
fn new_leaf(
    key: &rcgen::KeyPair,
    identity: &CertificateDer<'static>,
    provider: &CryptoProvider,
    now: SystemTime,
) -> Result<Leaf, TlsError> {
    let cert_err = |e: &dyn std::fmt::Display| TlsError::Certificate(e.to_string());
    let leaf_key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).map_err(|e| cert_err(&e))?;
    let issuer = rcgen::Issuer::from_ca_cert_der(identity, key).map_err(|e| cert_err(&e))?;
    let mut params = rcgen::CertificateParams::default();
    params.serial_number = Some(serial_number()?);
    params.distinguished_name = certificate_name(key);
    params.not_before = time::OffsetDateTime::from(now);
    let not_after = now + LEAF_VALIDITY;
    params.not_after = time::OffsetDateTime::from(not_after);
    params.key_usages = vec![rcgen::KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    params.is_ca = rcgen::IsCa::ExplicitNoCa;
    let cert = params
        .signed_by(&leaf_key, &issuer)
        .map_err(|e| cert_err(&e))?;
    let signing_key = provider
        .key_provider
        .load_private_key(PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
            leaf_key.serialize_der(),
        )))
        .map_err(|e| cert_err(&e))?;
    Ok(Leaf {
        certified: Arc::new(CertifiedKey::new(
            vec![cert.der().clone(), identity.clone()],
            signing_key,
        )),
        not_before: now,
        renew_at: not_after - LEAF_RENEW_WINDOW,
    })
}

/// The leaf being served.
#[derive(Debug, Clone)]
struct Leaf {
    certified: Arc<CertifiedKey>,
    not_before: SystemTime,
    renew_at: SystemTime,
}

impl Leaf {
    fn serves(&self, now: SystemTime) -> bool {
        self.not_before <= now && now < self.renew_at
    }
}

/// What the resolver has: the identity certificate once it could be had, and the leaf.
#[derive(Debug, Default)]
struct Served {
    identity: Option<CertificateDer<'static>>,
    leaf: Option<Leaf>,
}

/// Picks the chain for each handshake, making a new leaf when the one served nears its end.
/// Making one is CPU work only (a key and a signature); the one blocking step, getting the
/// identity certificate when the daemon could not at start, runs in the background.
#[derive(Debug)]
struct ServerIdentity {
    inner: Arc<IdentityState>,
}

#[derive(Debug)]
struct IdentityState {
    pebble_dir: PathBuf,
    key: rcgen::KeyPair,
    provider: Arc<CryptoProvider>,
    served: RwLock<Served>,
    /// Whether a background attempt at the identity certificate is under way.
    retrying: AtomicBool,
    /// When the last attempt began, and how it failed: clients retry a failed handshake
    /// within milliseconds, so attempts are spaced by [`IDENTITY_RETRY`] and the same
    /// failure is logged once.
    last_attempt: std::sync::Mutex<(Option<std::time::Instant>, String)>,
}

/// The least time between two attempts at the identity certificate.
const IDENTITY_RETRY: Duration = Duration::from_secs(1);

impl ResolvesServerCert for ServerIdentity {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let state = &self.inner;
        let now = SystemTime::now();
        {
            let served = state.served.read().unwrap_or_else(|e| e.into_inner());
            if let Some(leaf) = served.leaf.as_ref().filter(|l| l.serves(now)) {
                return Some(leaf.certified.clone());
            }
        }
        let mut served = state.served.write().unwrap_or_else(|e| e.into_inner());
        if let Some(leaf) = served.leaf.as_ref().filter(|l| l.serves(now)) {
            return Some(leaf.certified.clone());
        }
        let Some(identity) = served.identity.clone() else {
            drop(served);
            self.retry_identity();
            return None;
        };
        match new_leaf(&state.key, &identity, &state.provider, now) {
            Ok(leaf) => {
                let certified = leaf.certified.clone();
                served.leaf = Some(leaf);
                Some(certified)
            }
            Err(e) => {
                tracing::warn!("Cannot create TLS certificate: {e}");
                None
            }
        }
    }
}

impl ServerIdentity {
    /// Tries again, in the background, to get the identity certificate.
    fn retry_identity(&self) {
        let state = self.inner.clone();
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if state.retrying.swap(true, Ordering::AcqRel) {
            return;
        }
        let now = std::time::Instant::now();
        {
            let mut last = state.last_attempt.lock().unwrap_or_else(|e| e.into_inner());
            if last
                .0
                .is_some_and(|at| now.duration_since(at) < IDENTITY_RETRY)
            {
                state.retrying.store(false, Ordering::Release);
                return;
            }
            last.0 = Some(now);
        }
        runtime.spawn_blocking(move || {
            let result = identity_certificate(&state.pebble_dir, &state.key);
            let mut last = state.last_attempt.lock().unwrap_or_else(|e| e.into_inner());
            match result {
                Ok(cert) => {
                    tracing::info!("Serving HTTPS with the identity certificate now");
                    state
                        .served
                        .write()
                        .unwrap_or_else(|e| e.into_inner())
                        .identity = Some(cert);
                    last.1.clear();
                }
                Err(e) => {
                    let error = e.to_string();
                    if last.1 != error {
                        tracing::warn!("Cannot serve HTTPS yet: {error}");
                        last.1 = error;
                    }
                }
            }
            drop(last);
            state.retrying.store(false, Ordering::Release);
        });
    }
}

/// The TLS configuration of the `--https` listener: TLS 1.3 only, on ring; the chain of a
/// fresh leaf and `identity` (the daemon's identity certificate from
/// [`identity_certificate`]; if that failed, the failure is logged and later handshakes try
/// again); exactly one client certificate required.
pub(crate) fn server_config(
    pebble_dir: &Path,
    key: rcgen::KeyPair,
    identity: Result<CertificateDer<'static>, TlsError>,
) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let (identity, last_error) = match identity {
        Ok(cert) => (Some(cert), String::new()),
        Err(e) => {
            tracing::warn!("Cannot serve HTTPS yet: {e}");
            (None, e.to_string())
        }
    };
    let cert_err = |e: &dyn std::fmt::Display| TlsError::Certificate(e.to_string());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = Arc::new(AnyClientCert {
        algorithms: provider.signature_verification_algorithms,
    });
    let resolver = Arc::new(ServerIdentity {
        inner: Arc::new(IdentityState {
            pebble_dir: pebble_dir.to_owned(),
            key,
            provider: provider.clone(),
            served: RwLock::new(Served {
                identity,
                leaf: None,
            }),
            retrying: AtomicBool::new(false),
            last_attempt: std::sync::Mutex::new((Some(std::time::Instant::now()), last_error)),
        }),
    });
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| cert_err(&e))?
        .with_client_cert_verifier(verifier)
        .with_cert_resolver(resolver);
    // So that a re-execution asked over HTTPS can be answered by the new program (see
    // `tls_handoff`); nothing else extracts a session's keys.
    config.enable_secret_extraction = true;
    Ok(Arc::new(config))
}

/// Accepts any single client certificate at the handshake (the signature over the handshake
/// still proves the client holds its key); trust is decided against identities afterwards.
/// No certificate, or a chain, ends the handshake, as Pebble's `VerifyConnection` does.
#[derive(Debug)]
struct AnyClientCert {
    algorithms: WebPkiSupportedAlgorithms,
}

impl ClientCertVerifier for AnyClientCert {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    /// A client without a certificate is refused with TLS's `certificate_required` alert.
    fn client_auth_mandatory(&self) -> bool {
        true
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        if intermediates.is_empty() {
            Ok(ClientCertVerified::assertion())
        } else {
            // Pebble's refusal ("expected one client certificate, received N") reaches the
            // client as a `bad_certificate` alert, which is the alert rustls sends for this
            // error.
            tracing::debug!(
                "Refusing a TLS client: expected one client certificate, received {}",
                intermediates.len() + 1
            );
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::BadEncoding,
            ))
        }
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

/// The client certificate of a handshake: the handshake admits only clients that presented
/// exactly one. Whether an identity trusts it is decided per request.
pub(crate) fn client_cert(chain: Option<&[CertificateDer<'_>]>) -> Option<Arc<[u8]>> {
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
    fn the_fingerprint_is_the_one_pebbles_go_client_computes() {
        // An identity key Pebble v1.32.1 generated, and the fingerprint its Go client
        // printed for the server using it.
        let public_key = [
            0x5d, 0x99, 0x97, 0x5b, 0xe4, 0xb0, 0x0e, 0x32, 0xf6, 0x4b, 0x9d, 0x5e, 0xf8, 0x8b,
            0x5b, 0xcc, 0xb5, 0xbf, 0xb5, 0xed, 0x42, 0x71, 0xfd, 0x99, 0x16, 0xdb, 0x10, 0x52,
            0x7a, 0x04, 0x14, 0x4b,
        ];
        assert_eq!(
            fingerprint(&public_key),
            "FPP5F23ERNTE3QDESZMZ5PKNCUY5K5GF22IUHGJHTRAPJ4ATFQF6WEF3KZYPX7ODNWH7IUVNLU5Y4"
        );
        assert_eq!(base32(b"foobar"), "MZXW6YTBOI");
        assert_eq!(base32(b"f"), "MY");
    }

    #[test]
    fn a_leaf_is_replaced_a_minute_before_its_hour_is_up() {
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
        let identity = new_identity_certificate(&key).unwrap();
        let provider = rustls::crypto::ring::default_provider();
        let now = SystemTime::now();
        let leaf = new_leaf(&key, &identity, &provider, now).unwrap();
        assert_eq!(leaf.certified.cert.len(), 2);
        assert_eq!(leaf.certified.cert[1], identity);
        assert!(leaf.serves(now));
        assert!(leaf.serves(now + Duration::from_secs(3539)));
        assert!(!leaf.serves(now + Duration::from_secs(3540)));
        assert!(!leaf.serves(now - Duration::from_secs(1)));
    }

    #[test]
    fn the_identity_certificate_is_kept_while_it_matches_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let key = identity_key(dir.path()).unwrap();
        let first = identity_certificate(dir.path(), &key).unwrap();
        assert_eq!(identity_certificate(dir.path(), &key).unwrap(), first);
        let other = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
        let replaced = identity_certificate(dir.path(), &other).unwrap();
        assert_ne!(replaced, first);
        assert!(certifies(&replaced, &other));
        // A file others may read is not used.
        let path = dir.path().join("tls/identity.pem");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        let err = identity_certificate(dir.path(), &other)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with(
                "cannot get identity certificate: expected permission 0o600 (got 0o644)"
            ),
            "{err}"
        );
        fs::write(&path, "junk").unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
        let err = identity_certificate(dir.path(), &other)
            .unwrap_err()
            .to_string();
        assert!(err.contains("missing 'CERTIFICATE' block"), "{err}");
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
