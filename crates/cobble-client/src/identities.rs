//! Identities on the wire: `GET`/`POST /v1/identities`, and the YAML files the CLI and
//! `run --identities` read.
//!
//! The same shape serves requests, responses and files: an access level and one or more
//! authentication types. Fields are optional here because the daemon, not the decoder,
//! words what is missing, as Pebble does.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::client::Client;
use crate::error::Error;

/// One identity: an access level and how its user authenticates.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    /// `untrusted`, `metrics`, `read` or `admin`.
    #[serde(default)]
    pub access: String,
    /// Matched against the peer's uid on the unix socket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local: Option<LocalIdentity>,
    /// HTTP basic authentication; the daemon answers the password as `*****`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub basic: Option<BasicIdentity>,
    /// A client certificate presented over HTTPS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert: Option<CertIdentity>,
}

/// The `local` type: a uid.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LocalIdentity {
    /// The uid; absent is an error the daemon reports.
    #[serde(rename = "user-id")]
    pub user_id: Option<u32>,
}

/// The `basic` type: a sha512-crypt password hash.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BasicIdentity {
    #[serde(default)]
    pub password: String,
}

/// The `cert` type: one PEM-encoded X.509 certificate.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CertIdentity {
    #[serde(default)]
    pub pem: String,
}

/// `POST /v1/identities`: `add`, `update`, `replace` or `remove`. A `null` identity removes
/// it under `replace` and is the only value `remove` takes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdentitiesRequest {
    #[serde(default)]
    pub action: String,
    #[serde(default)]
    pub identities: BTreeMap<String, Option<Identity>>,
}

/// A YAML file of identities, as `run --identities` and the `*-identities --from` commands
/// read it: `identities: {name: identity}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdentitiesFile {
    #[serde(default)]
    pub identities: BTreeMap<String, Option<Identity>>,
}

impl Client {
    /// `GET /v1/identities`: every identity by name, secrets masked.
    pub async fn identities(&self) -> Result<BTreeMap<String, Identity>, Error> {
        self.get("/v1/identities", &[]).await
    }

    /// `POST /v1/identities` with `action` over `identities`.
    pub async fn post_identities(
        &self,
        action: &str,
        identities: BTreeMap<String, Option<Identity>>,
    ) -> Result<(), Error> {
        let body = IdentitiesRequest {
            action: action.to_owned(),
            identities,
        };
        // The daemon sends no `result` at all, as Pebble does.
        let _: Option<serde_json::Value> = self.post("/v1/identities", &body).await?;
        Ok(())
    }
}
