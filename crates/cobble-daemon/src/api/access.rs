//! Who may call what: one decision per request, from the peer and its credentials.
//!
//! Each route states the level it needs by the extractor its handler takes: none for open
//! endpoints, [`Metrics`], [`Read`] or [`Admin`]. The level a request has comes from, in
//! order: a client certificate (HTTPS), HTTP basic auth (not read over HTTPS), the peer's uid
//! (unix socket) matched against `local` identities; and when none of those names an
//! identity, the defaults: root and the daemon's own user are admin, other local users read,
//! anyone else only reaches open endpoints. Over plain HTTP nothing above `metrics` is
//! granted, whoever asks: the connection is not private enough for more.
//!
//! A refusal is answered 401 `login-required` and logged as an `authz_fail` security event.

use std::sync::Arc;

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::header;
use axum::http::request::Parts;
use base64::Engine as _;

use super::{ApiError, Shared};
use crate::identities::{self, Access, Candidate, Credentials};
use crate::logging::{self, SecurityEvent, User};

/// How a connection reached the daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// The unix socket: the peer's uid is known.
    Unix,
    /// `--http`: nothing is known of the peer.
    Http,
    /// `--https`: the peer may have presented a client certificate.
    Https,
}

/// Who is on the other end of a connection.
#[derive(Debug, Clone)]
pub struct Peer {
    /// The peer's uid on the unix socket; `None` over TCP.
    pub uid: Option<u32>,
    pub transport: Transport,
    /// The DER of the client certificate an HTTPS peer presented, if any.
    pub cert: Option<Arc<[u8]>>,
}

impl Peer {
    /// A TCP peer over plain HTTP.
    pub fn http() -> Peer {
        Peer {
            uid: None,
            transport: Transport::Http,
            cert: None,
        }
    }
}

/// Proof that the caller may scrape `/v1/metrics`.
pub struct Metrics;

/// Proof that the caller may use read endpoints.
pub struct Read;

/// Proof that the caller may use admin endpoints.
pub struct Admin {
    /// The admin, for the security events their requests log.
    pub user: User,
}

pub(super) fn peer(parts: &Parts) -> Peer {
    parts
        .extensions
        .get::<ConnectInfo<Peer>>()
        .map_or_else(Peer::http, |c| c.0.clone())
}

/// `Authorization: Basic <base64(user:password)>`, if the request carries one.
fn basic_auth(parts: &Parts) -> Option<(String, String)> {
    let value = parts.headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, encoded) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (user, password) = text.split_once(':')?;
    Some((user.to_owned(), password.to_owned()))
}

/// The access level of the request in `parts`.
pub async fn access_of(parts: &Parts, api: &Shared) -> Option<Access> {
    let peer = peer(parts);
    let creds = Credentials {
        uid: peer.uid,
        // Over HTTPS the certificate is the credential; a password there is not looked at.
        basic: (peer.transport != Transport::Https)
            .then(|| basic_auth(parts))
            .flatten(),
        cert: peer.cert.as_deref().map(<[u8]>::to_vec),
    };
    let named = match api.state.identity_candidate(&creds) {
        Candidate::None => None,
        Candidate::Matched { access, .. } => Some(access),
        Candidate::Password { access, hash, .. } => {
            let password = creds.basic.map(|(_, p)| p).unwrap_or_default();
            let verified =
                tokio::task::spawn_blocking(move || identities::verify_password(&password, &hash))
                    .await
                    .unwrap_or(false);
            verified.then_some(access)
        }
    };
    let access = named.or_else(|| identities::default_access(peer.uid, cobble_sys::current_uid()));
    match peer.transport {
        Transport::Http => access.map(|a| a.min(Access::Metrics)),
        Transport::Unix | Transport::Https => access,
    }
}

/// Grants the request `need`, or logs and answers the refusal.
async fn require(parts: &Parts, api: &Shared, need: Access) -> Result<User, ApiError> {
    match access_of(parts, api).await {
        Some(access) if access >= need => Ok(User(peer(parts).uid)),
        _ => Err(refuse(parts)),
    }
}

/// Logs the refusal of the request in `parts` and makes its answer.
fn refuse(parts: &Parts) -> ApiError {
    logging::security(SecurityEvent::AuthzFail {
        user: User(peer(parts).uid),
        method: parts.method.as_str(),
        path: parts.uri.path(),
    });
    ApiError::unauthorized()
}

/// Proof that the caller may pair: an HTTPS peer while a pairing window is open. Pebble
/// opens such a window only when something inside it asks (nothing in Pebble itself does),
/// so no request is ever let through, from any transport: this type has no values, and
/// `POST /v1/pairing` always gets the refusal Pebble gives, whatever the plan's
/// `pairing: mode:`.
pub enum PairingWindow {}

impl FromRequestParts<Shared> for PairingWindow {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &Shared) -> Result<Self, ApiError> {
        Err(refuse(parts))
    }
}

impl FromRequestParts<Shared> for Metrics {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, api: &Shared) -> Result<Self, ApiError> {
        require(parts, api, Access::Metrics).await.map(|_| Metrics)
    }
}

impl FromRequestParts<Shared> for Read {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, api: &Shared) -> Result<Self, ApiError> {
        require(parts, api, Access::Read).await.map(|_| Read)
    }
}

impl FromRequestParts<Shared> for Admin {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, api: &Shared) -> Result<Self, ApiError> {
        require(parts, api, Access::Admin)
            .await
            .map(|user| Admin { user })
    }
}
