//! Who may call what: one decision per request, from the peer and its credentials.
//!
//! Each route states the level it needs by the extractor its handler takes: none for open
//! endpoints, [`Metrics`], [`Read`] or [`Admin`]. Who the caller is comes from, in order: a
//! client certificate (HTTPS), HTTP basic auth (not read over HTTPS), the peer's uid (unix
//! socket) matched against `local` identities; and when none of those names an identity, the
//! defaults: root and the daemon's own user are admin, other local users read, anyone else
//! nobody. Then Pebble's rules decide, by transport: the unix socket and HTTPS grant what the
//! caller's access allows; plain HTTP grants `/v1/metrics` to an identity whose access is
//! exactly `metrics` and nothing else to anyone, so that credentials worth more are never
//! accepted over cleartext.
//!
//! A refusal is answered 401 `login-required`. When the caller is somebody (an identity, or a
//! local user), it is logged as a CRITICAL `authz_fail` security event naming them; an
//! anonymous TCP client's refusal is not logged, as in Pebble. A client certificate that
//! equals a `cert` identity's but does not verify as a self-signed client certificate names
//! nobody, and is logged as a WARN `authz_fail` event.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::header;
use axum::http::request::Parts;
use base64::Engine as _;

use super::{ApiError, Shared};
use crate::daemon_log::{self, SecurityEvent, User};
use crate::identities::{self, Access, Candidate, Credentials};

/// How a connection reached the daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Transport {
    /// The unix socket: the peer's uid is known.
    Unix,
    /// `--http`: nothing is known of the peer.
    Http,
    /// `--https`: the peer may have presented a client certificate.
    Https,
}

impl Transport {
    /// The name Pebble's request log gives it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Transport::Unix => "http+unix",
            Transport::Http => "http",
            Transport::Https => "https",
        }
    }

    /// Whether the transport is private enough for read and admin access: local, or
    /// encrypted.
    fn is_concealed(self) -> bool {
        matches!(self, Transport::Unix | Transport::Https)
    }
}

/// Who is on the other end of a connection.
#[derive(Debug, Clone)]
pub(crate) struct Peer {
    /// The peer's uid on the unix socket; `None` over TCP.
    pub uid: Option<u32>,
    /// The peer's pid on the unix socket, for the debug log.
    pub pid: Option<i32>,
    pub transport: Transport,
    /// The DER of the client certificate an HTTPS peer presented, if it presented one alone.
    pub cert: Option<Arc<[u8]>>,
    /// The peer's address over TCP.
    pub addr: Option<SocketAddr>,
    /// The connection, as a re-execution hands it to the new program, which answers on it;
    /// none over plain HTTP, which grants no admin.
    pub handable: Option<Handable>,
}

/// A client's connection, as a re-execution can hand it to the new program.
#[derive(Debug, Clone)]
pub(crate) enum Handable {
    /// The unix socket's connection, by its descriptor.
    Unix(std::os::fd::RawFd),
    /// An `--https` connection, which the server gives up with its session's keys.
    Tls(crate::tls_handoff::HandableTls),
}

impl Peer {
    /// A TCP peer over plain HTTP.
    pub(crate) fn http(addr: Option<SocketAddr>) -> Peer {
        Peer {
            uid: None,
            pid: None,
            transport: Transport::Http,
            cert: None,
            addr,
            handable: None,
        }
    }
}

/// Proof that the caller may scrape `/v1/metrics`.
pub(crate) struct Metrics;

/// Proof that the caller may use read endpoints.
pub(crate) struct Read;

/// Proof that the caller may use admin endpoints.
pub(crate) struct Admin {
    /// The admin, for the security events their requests log.
    pub user: User,
}

pub(super) fn peer(parts: &Parts) -> Peer {
    parts
        .extensions
        .get::<ConnectInfo<Peer>>()
        .map_or_else(|| Peer::http(None), |c| c.0.clone())
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
    // Pebble takes basic credentials only when either half is set.
    if user.is_empty() && password.is_empty() {
        return None;
    }
    Some((user.to_owned(), password.to_owned()))
}

/// The caller of a request, when it is somebody: who, and with which access.
#[derive(Debug, Clone)]
pub(super) struct Caller {
    pub user: User,
    pub access: Access,
    /// The uid the request is made as, which notices are visible to and owned by: the unix
    /// peer's, unless a basic or certificate identity named the caller (Pebble's
    /// `UserState.UID`: such a caller has none, even on the unix socket).
    pub uid: Option<u32>,
}

/// The caller of the request in `parts`: the identity its credentials name, else the local
/// user's default access; `None` for an anonymous TCP client.
pub(super) async fn caller_of(parts: &Parts, api: &Shared) -> Option<Caller> {
    let peer = peer(parts);
    let creds = Credentials {
        uid: peer.uid,
        // Over HTTPS the certificate is the credential; a password there is not looked at.
        basic: (peer.transport != Transport::Https)
            .then(|| basic_auth(parts))
            .flatten(),
        cert: peer.cert.as_deref().map(<[u8]>::to_vec),
    };
    // The identity named, and the uid the request then has.
    let named = match api.state.identity_candidate(&creds) {
        Candidate::None => None,
        Candidate::Matched { name, access } => match &creds.cert {
            // Certificate identities can be added by hand: the one presented must also be a
            // self-signed client certificate in its own right.
            Some(cert) => match identities::verify_self_signed(cert, jiff::ZonedDateTime::now()) {
                Ok(()) => Some((name, access, None)),
                Err(error) => {
                    daemon_log::security(SecurityEvent::CertificateNotVerified {
                        name: &name,
                        error: &error,
                    });
                    None
                }
            },
            // Matched by the peer's uid: a `local` identity.
            None => Some((name, access, peer.uid)),
        },
        Candidate::Password { name, access, hash } => {
            let password = creds.basic.map(|(_, p)| p).unwrap_or_default();
            let verified =
                tokio::task::spawn_blocking(move || identities::verify_password(&password, &hash))
                    .await
                    .unwrap_or(false);
            verified.then_some((name, access, None))
        }
    };
    if let Some((name, access, uid)) = named {
        return Some(Caller {
            user: User::named(name),
            access,
            uid,
        });
    }
    let access = identities::default_access(peer.uid, cobble_sys::current_uid())?;
    Some(Caller {
        user: User::uid(peer.uid),
        access,
        uid: peer.uid,
    })
}

/// Whether `access` over `transport` may use an endpoint that needs `need` (Pebble's
/// `MetricsAccess`, `UserAccess` and `AdminAccess`).
pub(super) fn allowed(need: Access, transport: Transport, access: Access) -> bool {
    match need {
        Access::Untrusted => true,
        Access::Metrics if transport == Transport::Http => access == Access::Metrics,
        _ if !transport.is_concealed() => false,
        Access::Metrics => access >= Access::Metrics,
        Access::Read => access >= Access::Read,
        Access::Admin => access == Access::Admin,
    }
}

/// Grants the request `need`, or logs and answers the refusal.
async fn require(parts: &Parts, api: &Shared, need: Access) -> Result<User, ApiError> {
    let transport = peer(parts).transport;
    match caller_of(parts, api).await {
        Some(caller) if allowed(need, transport, caller.access) => Ok(caller.user),
        caller => Err(refuse(parts, caller.as_ref())),
    }
}

/// Logs the refusal of the request in `parts`, when somebody known made it (as Pebble logs
/// `authz_fail` only for a known user), and makes its answer.
fn refuse(parts: &Parts, caller: Option<&Caller>) -> ApiError {
    if let Some(caller) = caller {
        daemon_log::security(SecurityEvent::AuthzFail {
            user: &caller.user,
            path: parts.uri.path(),
        });
    }
    ApiError::unauthorized()
}

/// Proof that the caller may pair: an HTTPS peer while a pairing window is open. Pebble
/// opens such a window only when something inside it asks (nothing in Pebble itself does),
/// so no request is ever let through, from any transport: this type has no values, and
/// `POST /v1/pairing` always gets the refusal Pebble gives, whatever the plan's
/// `pairing: mode:`.
pub(super) enum PairingWindow {}

impl FromRequestParts<Shared> for PairingWindow {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, api: &Shared) -> Result<Self, ApiError> {
        let caller = caller_of(parts, api).await;
        Err(refuse(parts, caller.as_ref()))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_transport_decides_as_pebble_does() {
        use Access::*;
        use Transport::*;
        // (need, transport, access) -> allowed
        let table = [
            (Metrics, Http, Metrics, true),
            (Metrics, Http, Read, false),
            (Metrics, Http, Admin, false),
            (Metrics, Http, Untrusted, false),
            (Read, Http, Admin, false),
            (Admin, Http, Admin, false),
            (Untrusted, Http, Untrusted, true),
            (Metrics, Unix, Metrics, true),
            (Metrics, Unix, Read, true),
            (Metrics, Https, Admin, true),
            (Metrics, Unix, Untrusted, false),
            (Read, Unix, Metrics, false),
            (Read, Unix, Read, true),
            (Read, Https, Admin, true),
            (Admin, Unix, Read, false),
            (Admin, Https, Admin, true),
            (Admin, Unix, Untrusted, false),
        ];
        for (need, transport, access, expected) in table {
            assert_eq!(
                allowed(need, transport, access),
                expected,
                "{need:?} over {transport:?} with {access:?}"
            );
        }
    }
}
