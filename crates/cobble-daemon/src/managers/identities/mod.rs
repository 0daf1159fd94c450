//! Named identities and the access levels they grant.
//!
//! An identity pairs an [`Access`] level with one or more ways to recognise its user: a uid
//! on the unix socket (`local`), an HTTP basic-auth password checked against a sha512-crypt
//! hash (`basic`), or a client certificate presented over HTTPS (`cert`). They live in the
//! state file, so they survive restarts, and are managed through `/v1/identities` with
//! Pebble's four actions and Pebble's wording of every refusal.
//!
//! This module is pure: parsing the wire form, validating a set of changes against the
//! identities that exist, and deciding which identity a request's credentials name. The
//! password check is deliberately slow (thousands of hash rounds), so the caller runs it
//! off the async workers ([`verify_password`]).

use std::collections::BTreeMap;
use std::fmt;

use cobble_client::identities as wire;
use serde::{Deserialize, Serialize};

/// What an identity may do, from least to most.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Access {
    /// Open endpoints only, as if no identity matched.
    Untrusted,
    /// Open endpoints and `/v1/metrics`.
    Metrics,
    /// Everything that only reads.
    Read,
    /// Everything.
    Admin,
}

impl Access {
    pub fn as_str(self) -> &'static str {
        match self {
            Access::Untrusted => "untrusted",
            Access::Metrics => "metrics",
            Access::Read => "read",
            Access::Admin => "admin",
        }
    }

    fn parse(value: &str) -> Result<Access, String> {
        match value {
            "admin" => Ok(Access::Admin),
            "read" => Ok(Access::Read),
            "metrics" => Ok(Access::Metrics),
            "untrusted" => Ok(Access::Untrusted),
            "" => Err(
                r#"access value must be specified ("admin", "read", "metrics", or "untrusted")"#
                    .into(),
            ),
            other => Err(format!(
                r#"invalid access value {}, must be "admin", "read", "metrics", or "untrusted""#,
                cobble_plan::go_quote(other)
            )),
        }
    }
}

impl fmt::Display for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One identity as the daemon keeps it (and as the state file holds it, secrets included).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    pub access: Access,
    /// The uid a `local` identity matches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local: Option<u32>,
    /// The sha512-crypt hash a `basic` identity's password is checked against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub basic: Option<String>,
    /// The DER of the certificate a `cert` identity's client presents.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "der_as_pem")]
    pub cert: Option<Vec<u8>>,
}

/// The mask Pebble answers in place of a password hash or a certificate.
const MASKED: &str = "*****";

impl Identity {
    /// Reads the wire form of identity `name`, checking it in the order Pebble's API does:
    /// the local user ID, the certificate, then the name, the access and the password.
    pub fn from_wire(name: &str, identity: &wire::Identity) -> Result<Identity, String> {
        let local = match &identity.local {
            Some(local) => Some(
                local
                    .user_id
                    .ok_or_else(|| "local identity must specify user-id".to_owned())?,
            ),
            None => None,
        };
        let cert = match &identity.cert {
            Some(cert) => Some(parse_cert_pem(&cert.pem)?),
            None => None,
        };
        if !valid_name(name) {
            // Pebble's API names the identity "" here: it formats a field not yet set.
            return Err(format!("identity name \"\" invalid: {NAME_RULE}"));
        }
        let access = Access::parse(&identity.access)?;
        let basic = match &identity.basic {
            Some(basic) if basic.password.is_empty() => {
                return Err("basic identity must specify password (hashed)".into());
            }
            Some(basic) => Some(basic.password.clone()),
            None => None,
        };
        if local.is_none() && basic.is_none() && cert.is_none() {
            return Err(
                r#"identity must have at least one type ("local", "basic", or "cert")"#.into(),
            );
        }
        Ok(Identity {
            access,
            local,
            basic,
            cert,
        })
    }

    /// The wire form answered by `GET /v1/identities`: the password hash masked; the
    /// certificate, which is public, in full.
    pub fn to_wire(&self) -> wire::Identity {
        wire::Identity {
            access: self.access.as_str().into(),
            local: self
                .local
                .map(|uid| wire::LocalIdentity { user_id: Some(uid) }),
            basic: self.basic.as_ref().map(|_| wire::BasicIdentity {
                password: MASKED.into(),
            }),
            // A certificate is public, but Pebble masks it like a password, so clients see
            // the same in both places.
            cert: self
                .cert
                .as_ref()
                .map(|_| wire::CertIdentity { pem: MASKED.into() }),
        }
    }
}

/// Reads one PEM certificate, with nothing after it, that parses as X.509.
fn parse_cert_pem(text: &str) -> Result<Vec<u8>, String> {
    const NO_PEM: &str = "cert identity must include a PEM-encoded certificate";
    let block = pem::parse(text).map_err(|_| NO_PEM.to_owned())?;
    // What follows the first block's END line must be nothing at all.
    let end = text
        .find("-----END ")
        .and_then(|at| {
            text[at..]
                .find('\n')
                .map(|nl| at + nl + 1)
                .or(Some(text.len()))
        })
        .unwrap_or(text.len());
    if !text[end..].is_empty() {
        return Err("cert identity cannot have extra data after the PEM block".into());
    }
    let der = block.into_contents();
    let cert = rustls_pki_types::CertificateDer::from(der.as_slice());
    go_x509::check(&der)
        .map_err(str::to_owned)
        .and_then(|()| webpki::EndEntityCert::try_from(&cert).map_err(|e| go_x509::webpki_text(&e)))
        .map_err(|e| format!("cannot parse certificate from cert identity: {e}"))?;
    Ok(der)
}

pub(crate) fn der_to_pem(der: &[u8]) -> String {
    let block = pem::Pem::new("CERTIFICATE", der.to_vec());
    pem::encode_config(
        &block,
        pem::EncodeConfig::new().set_line_ending(pem::LineEnding::LF),
    )
}

/// The state file keeps certificates as PEM, readable by anyone who looks.
mod der_as_pem {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub(super) fn serialize<S: Serializer>(der: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        der.as_deref().map(super::der_to_pem).serialize(s)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Vec<u8>>, D::Error> {
        let text = Option::<String>::deserialize(d)?;
        text.map(|t| {
            pem::parse(&t)
                .map(|b| b.into_contents())
                .map_err(serde::de::Error::custom)
        })
        .transpose()
    }
}

/// The four ways `POST /v1/identities` changes identities.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// New names only.
    Add,
    /// Existing names only.
    Update,
    /// Any name; `null` removes.
    Replace,
    /// Existing names, each `null`.
    Remove,
}

impl Action {
    pub fn parse(value: &str) -> Result<Action, String> {
        match value {
            "add" => Ok(Action::Add),
            "update" => Ok(Action::Update),
            "replace" => Ok(Action::Replace),
            "remove" => Ok(Action::Remove),
            other => Err(format!(
                r#"invalid action {}, must be "add", "update", "replace", or "remove""#,
                cobble_plan::go_quote(other)
            )),
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Action::Add => "add",
            Action::Update => "update",
            Action::Replace => "replace",
            Action::Remove => "remove",
        }
    }
}

/// A request's identities, decoded and checked for its action: every value present for
/// `add` and `update`, every value `null` for `remove`.
pub(crate) fn decode_request(
    action: Action,
    identities: &BTreeMap<String, Option<wire::Identity>>,
) -> Result<BTreeMap<String, Option<Identity>>, RequestError> {
    fit_action(action, decode_identities(identities)?)
}

/// Reads each identity of a request (null for none), as Pebble does before it looks at the
/// action: `invalid identity for "name": why`, the first in name order.
pub(crate) fn decode_identities(
    identities: &BTreeMap<String, Option<wire::Identity>>,
) -> Result<BTreeMap<String, Option<Identity>>, RequestError> {
    let mut decoded = BTreeMap::new();
    for (name, identity) in identities {
        let identity = identity
            .as_ref()
            .map(|identity| Identity::from_wire(name, identity))
            .transpose()
            .map_err(|why| {
                RequestError::Invalid(format!(
                    "invalid identity for {}: {why}",
                    cobble_plan::go_quote(name)
                ))
            })?;
        decoded.insert(name.clone(), identity);
    }
    Ok(decoded)
}

/// Checks that decoded identities fit `action`: null only to remove, and only then.
pub(crate) fn fit_action(
    action: Action,
    decoded: BTreeMap<String, Option<Identity>>,
) -> Result<BTreeMap<String, Option<Identity>>, RequestError> {
    for (name, identity) in &decoded {
        let quoted = cobble_plan::go_quote(name);
        match (action, identity) {
            (Action::Add | Action::Update, None) => {
                return Err(RequestError::Invalid(format!(
                    "identity value for {quoted} must not be null for {} operation",
                    action.as_str()
                )));
            }
            (Action::Remove, Some(_)) => {
                return Err(RequestError::Invalid(format!(
                    "identity value for {quoted} must be null for {} operation",
                    action.as_str()
                )));
            }
            _ => {}
        }
    }
    Ok(decoded)
}

/// Why a request's identities were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// Identities that do not fit the action or the identities that exist.
    #[error("{0}")]
    Invalid(String),
}

/// What an applied request did, name by name, for the security log.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Applied {
    pub created: Vec<(String, Access)>,
    pub updated: Vec<(String, Access)>,
    pub deleted: Vec<String>,
}

/// What Pebble says a valid identity name is.
const NAME_RULE: &str = "must start with an alphabetic character and only contain alphanumeric \
                         characters, underscore, and hyphen";

fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Applies `changes` to `current` under `action`, or leaves it untouched and says why.
pub(crate) fn apply(
    current: &mut BTreeMap<String, Identity>,
    action: Action,
    changes: BTreeMap<String, Option<Identity>>,
) -> Result<Applied, RequestError> {
    let invalid = RequestError::Invalid;
    for (name, identity) in &changes {
        if identity.is_some() && !valid_name(name) {
            let quoted = cobble_plan::go_quote(name);
            return Err(invalid(format!(
                "identity {quoted} invalid: identity name {quoted} invalid: {NAME_RULE}"
            )));
        }
    }
    let listed = |names: Vec<&String>| {
        names
            .into_iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join(", ")
    };
    match action {
        Action::Add => {
            let existing: Vec<&String> = changes
                .keys()
                .filter(|n| current.contains_key(*n))
                .collect();
            if !existing.is_empty() {
                return Err(invalid(format!(
                    "identities already exist: {}",
                    listed(existing)
                )));
            }
        }
        Action::Update | Action::Remove => {
            let missing: Vec<&String> = changes
                .keys()
                .filter(|n| !current.contains_key(*n))
                .collect();
            if !missing.is_empty() {
                return Err(invalid(format!(
                    "identities do not exist: {}",
                    listed(missing)
                )));
            }
        }
        Action::Replace => {}
    }
    let mut next = current.clone();
    let mut applied = Applied::default();
    for (name, identity) in changes {
        match identity {
            Some(identity) => {
                let access = identity.access;
                match next.insert(name.clone(), identity) {
                    Some(_) => applied.updated.push((name, access)),
                    None => applied.created.push((name, access)),
                }
            }
            None => {
                if next.remove(&name).is_some() {
                    applied.deleted.push(name);
                }
            }
        }
    }
    unique_user_ids(&next).map_err(invalid)?;
    *current = next;
    Ok(applied)
}

/// Two identities may not claim one uid: the lookup would be ambiguous.
fn unique_user_ids(identities: &BTreeMap<String, Identity>) -> Result<(), String> {
    let mut by_uid: BTreeMap<u32, Vec<&str>> = BTreeMap::new();
    for (name, identity) in identities {
        if let Some(uid) = identity.local {
            by_uid.entry(uid).or_default().push(name);
        }
    }
    match by_uid.iter().find(|(_, names)| names.len() > 1) {
        Some((uid, names)) => Err(format!(
            "cannot have multiple identities with user ID {uid} ({})",
            names.join(", ")
        )),
        None => Ok(()),
    }
}

/// What a request presents to prove who it is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Credentials {
    /// The peer's uid, on the unix socket only.
    pub uid: Option<u32>,
    /// HTTP basic auth `(username, password)`, if the request carries any.
    pub basic: Option<(String, String)>,
    /// The DER of the client certificate of an HTTPS connection.
    pub cert: Option<Vec<u8>>,
}

/// The identity that credentials name, before any password is checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Candidate {
    /// No identity matches (the uid defaults then apply).
    None,
    /// This identity matches outright.
    Matched { name: String, access: Access },
    /// This identity matches if the password verifies against the hash.
    Password {
        name: String,
        access: Access,
        hash: String,
    },
}

/// Finds the identity credentials name. A client certificate takes precedence, then basic
/// auth (which the client chose for this very request), then the uid; credentials of a kind
/// that match nothing name nobody, whatever else the request carries.
pub(crate) fn candidate(identities: &BTreeMap<String, Identity>, creds: &Credentials) -> Candidate {
    if let Some(cert) = &creds.cert {
        return identities
            .iter()
            .find(|(_, id)| id.cert.as_deref() == Some(cert.as_slice()))
            .map_or(Candidate::None, |(name, id)| Candidate::Matched {
                name: name.clone(),
                access: id.access,
            });
    }
    if let Some((user, _)) = &creds.basic {
        return match identities.get(user) {
            Some(Identity {
                access,
                basic: Some(hash),
                ..
            }) => Candidate::Password {
                name: user.clone(),
                access: *access,
                hash: hash.clone(),
            },
            _ => Candidate::None,
        };
    }
    if let Some(uid) = creds.uid {
        return identities
            .iter()
            .find(|(_, id)| id.local == Some(uid))
            .map_or(Candidate::None, |(name, id)| Candidate::Matched {
                name: name.clone(),
                access: id.access,
            });
    }
    Candidate::None
}

/// Whether `password` hashes to `hash` under sha512-crypt (`$6$...`). Slow by design: call
/// it off the async workers.
pub(crate) fn verify_password(password: &str, hash: &str) -> bool {
    use sha_crypt::PasswordVerifier;
    hash.starts_with("$6$")
        && sha_crypt::ShaCrypt::default()
            .verify_password(password.as_bytes(), hash)
            .is_ok()
}

/// Checks a client certificate the way Pebble does once it equals a `cert` identity's: as
/// a self-signed root of its own (so neither an issuer nor CA constraints matter) that is
/// valid at `now` and usable for client authentication. The error is Go's `x509` wording,
/// which Pebble puts in its security event.
pub(crate) fn verify_self_signed(der: &[u8], now: jiff::ZonedDateTime) -> Result<(), String> {
    use x509_parser::prelude::{FromDer, X509Certificate};
    /// Extensions Go's parser understands; any other marked critical fails verification.
    const HANDLED: &[&str] = &[
        "2.5.29.14",
        "2.5.29.15",
        "2.5.29.17",
        "2.5.29.19",
        "2.5.29.30",
        "2.5.29.31",
        "2.5.29.32",
        "2.5.29.33",
        "2.5.29.35",
        "2.5.29.36",
        "2.5.29.37",
        "2.5.29.54",
        "1.3.6.1.5.5.7.1.1",
    ];
    let (_, cert) =
        X509Certificate::from_der(der).map_err(|_| "x509: malformed certificate".to_owned())?;
    if cert
        .extensions()
        .iter()
        .any(|ext| ext.critical && !HANDLED.contains(&ext.oid.to_id_string().as_str()))
    {
        return Err("x509: unhandled critical extension".into());
    }
    let validity = cert.validity();
    let utc = |seconds: i64| {
        jiff::Timestamp::from_second(seconds)
            .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
            .unwrap_or_default()
    };
    let local = || {
        if now.offset() == jiff::tz::Offset::UTC {
            now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
        } else {
            now.strftime("%Y-%m-%dT%H:%M:%S%:z").to_string()
        }
    };
    let at = |seconds: i64| jiff::Timestamp::from_second(seconds).unwrap_or(jiff::Timestamp::MAX);
    let (not_before, not_after) = (
        validity.not_before.timestamp(),
        validity.not_after.timestamp(),
    );
    if now.timestamp() < at(not_before) {
        return Err(format!(
            "x509: certificate has expired or is not yet valid: current time {} is before {}",
            local(),
            utc(not_before)
        ));
    }
    if now.timestamp() > at(not_after) {
        return Err(format!(
            "x509: certificate has expired or is not yet valid: current time {} is after {}",
            local(),
            utc(not_after)
        ));
    }
    if let Ok(Some(usage)) = cert.extended_key_usage() {
        let usage = usage.value;
        let listed = usage.any
            || usage.server_auth
            || usage.client_auth
            || usage.code_signing
            || usage.email_protection
            || usage.time_stamping
            || usage.ocsp_signing
            || !usage.other.is_empty();
        if listed && !usage.any && !usage.client_auth {
            return Err("x509: certificate specifies an incompatible key usage".into());
        }
    }
    Ok(())
}

/// The access of a peer no identity names: root and the daemon's own user administer,
/// other local users read, and a peer without a uid (TCP) gets nothing.
pub(crate) fn default_access(uid: Option<u32>, daemon_uid: u32) -> Option<Access> {
    match uid {
        Some(uid) if uid == 0 || uid == daemon_uid => Some(Access::Admin),
        Some(_) => Some(Access::Read),
        None => None,
    }
}

mod go_x509;
#[cfg(test)]
mod tests;
