//! `GET /v1/identities` (read) and `POST /v1/identities` (admin).

use std::collections::BTreeMap;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use cobble_client::identities::{IdentitiesRequest, Identity as WireIdentity};
use serde::Serialize;

use super::{Admin, ApiError, Read, Shared, json_body, sync};
use crate::daemon_log::{self, SecurityEvent};
use crate::go_json::{GoField, GoPayload, GoStruct, GoType, STRING, UINT32};
use crate::identities::{self, Action};
use crate::state::IdentitiesError;

pub(super) async fn get_identities(_: Read, State(api): State<Shared>) -> Response {
    let identities: BTreeMap<String, WireIdentity> = api
        .state
        .identities()
        .iter()
        .map(|(name, identity)| (name.clone(), identity.to_wire()))
        .collect();
    sync(identities)
}

impl GoPayload for IdentitiesRequest {
    const GO: GoType = GoType::Struct(&GoStruct {
        name: "",
        fields: &[
            GoField::new("Action", "action", STRING),
            GoField::new(
                "Identities",
                "identities",
                GoType::Map(&GoType::Ptr(&GoType::Struct(&API_IDENTITY))),
            ),
        ],
    });
}

/// Pebble's `apiIdentity`: an identity as the API reads it.
const API_IDENTITY: GoStruct = GoStruct {
    name: "daemon.apiIdentity",
    fields: &[
        GoField::new("Access", "access", GoType::Str("identities.Access")),
        GoField::omitempty(
            "Local",
            "local",
            GoType::Ptr(&GoType::Struct(&GoStruct {
                name: "daemon.apiLocalIdentity",
                fields: &[GoField::new("UserID", "user-id", GoType::Ptr(&UINT32))],
            })),
        ),
        GoField::omitempty(
            "Basic",
            "basic",
            GoType::Ptr(&GoType::Struct(&GoStruct {
                name: "daemon.apiBasicIdentity",
                fields: &[GoField::new("Password", "password", STRING)],
            })),
        ),
        GoField::omitempty(
            "Cert",
            "cert",
            GoType::Ptr(&GoType::Struct(&GoStruct {
                name: "daemon.apiCertIdentity",
                fields: &[GoField::new("PEM", "pem", STRING)],
            })),
        ),
    ],
};

pub(super) async fn post_identities(
    admin: Admin,
    State(api): State<Shared>,
    body: Body,
) -> Result<Response, ApiError> {
    let request: IdentitiesRequest = json_body(body, "cannot decode request body").await?;
    // Pebble reads every identity before it looks at the action.
    let decoded = identities::decode_identities(&request.identities)
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let action = Action::parse(&request.action).map_err(ApiError::bad_request)?;
    let changes = identities::fit_action(action, decoded)
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    // Who may do what must not silently revert after a crash: on disk before the answer,
    // and not changed at all when the disk refuses the write.
    let applied = api
        .state
        .change_identities_recorded(action, changes)
        .await
        .map_err(|e| match e {
            IdentitiesError::Request(e) => ApiError::bad_request(e.to_string()),
            e @ IdentitiesError::NotRecorded(_) => ApiError::internal(e.to_string()),
        })?;
    for (name, access) in &applied.created {
        daemon_log::security(SecurityEvent::UserCreated {
            user: &admin.user,
            name,
            access: access.as_str(),
        });
    }
    for (name, access) in &applied.updated {
        daemon_log::security(SecurityEvent::UserUpdated {
            user: &admin.user,
            name,
            access: access.as_str(),
        });
    }
    for name in &applied.deleted {
        daemon_log::security(SecurityEvent::UserDeleted {
            user: &admin.user,
            name,
        });
    }
    Ok(sync_without_result())
}

/// Pebble answers these requests with a sync envelope that has no `result` at all.
fn sync_without_result() -> Response {
    #[derive(Serialize)]
    struct Empty {
        #[serde(rename = "type")]
        kind: &'static str,
        #[serde(rename = "status-code")]
        status_code: u16,
        status: &'static str,
        #[serde(rename = "latest-warning", skip_serializing_if = "Option::is_none")]
        latest_warning: Option<String>,
    }
    let body = serde_json::to_vec(&Empty {
        kind: "sync",
        status_code: 200,
        status: "OK",
        latest_warning: super::latest_warning("sync"),
    })
    .expect("a fixed envelope serialises");
    let mut response = (StatusCode::OK, body).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}
