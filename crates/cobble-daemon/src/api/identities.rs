//! `GET /v1/identities` (read) and `POST /v1/identities` (admin).

use std::collections::BTreeMap;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use cobble_client::identities::{IdentitiesRequest, Identity as WireIdentity};
use serde::Serialize;

use super::{Admin, ApiError, Read, Shared, json_body, sync};
use crate::daemon_log::{self, SecurityEvent, User};
use crate::go_json::{GoField, GoPayload, GoStruct, GoType, STRING, UINT32};
use crate::identities::{self, Action, Identity};
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
    log_request(&admin.user, action, &changes);
    // Who may do what must not silently revert after a crash: on disk before the answer,
    // and not changed at all when the disk refuses the write.
    api.state
        .change_identities_recorded(action, changes)
        .await
        .map_err(|e| match e {
            IdentitiesError::Request(e) => ApiError::bad_request(e.to_string()),
            e @ IdentitiesError::NotRecorded(_) => ApiError::internal(e.to_string()),
        })?;
    Ok(sync_without_result())
}

/// Logs the security events of an identities request as Pebble does: what the request asks
/// for, named by its action, before it is applied (so also when it is then refused). `add`
/// creates, `update` updates, `remove` deletes, and `replace` updates every identity it
/// gives (whether or not it existed) and deletes every one it gives as `null`. The daemon's
/// `--identities` are logged so too, as Pebble's `run` sends them to its own daemon.
pub(crate) fn log_request(
    user: &User,
    action: Action,
    changes: &BTreeMap<String, Option<Identity>>,
) {
    for event in requested_events(user, action, changes) {
        daemon_log::security(event);
    }
}

fn requested_events<'a>(
    user: &'a User,
    action: Action,
    changes: &'a BTreeMap<String, Option<Identity>>,
) -> Vec<SecurityEvent<'a>> {
    changes
        .iter()
        .map(|(name, identity)| match (action, identity) {
            (Action::Add, Some(identity)) => SecurityEvent::UserCreated {
                user,
                name,
                access: identity.access.as_str(),
            },
            (Action::Update | Action::Replace, Some(identity)) => SecurityEvent::UserUpdated {
                user,
                name,
                access: identity.access.as_str(),
            },
            (_, _) => SecurityEvent::UserDeleted { user, name },
        })
        .collect()
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

#[cfg(test)]
mod tests {
    use jiff::Timestamp;

    use super::*;
    use crate::identities::Access;

    fn descriptions(action: Action, changes: &[(&str, Option<Access>)]) -> Vec<String> {
        let changes: BTreeMap<String, Option<Identity>> = changes
            .iter()
            .map(|(name, access)| {
                let identity = access.map(|access| Identity {
                    access,
                    local: Some(1000),
                    basic: None,
                    cert: None,
                });
                ((*name).to_owned(), identity)
            })
            .collect();
        let user = User::uid(Some(0));
        requested_events(&user, action, &changes)
            .iter()
            .map(|event| {
                let message = daemon_log::security_message(Timestamp::UNIX_EPOCH, event);
                let value: serde_json::Value = serde_json::from_str(&message).unwrap();
                format!("{} {}", value["event"], value["description"])
            })
            .collect()
    }

    #[test]
    fn a_request_is_logged_by_what_its_action_asks_for() {
        assert_eq!(
            descriptions(Action::Add, &[("alice", Some(Access::Admin))]),
            [r#""user_created:0,alice,admin" "Creating admin user alice""#]
        );
        assert_eq!(
            descriptions(Action::Update, &[("alice", Some(Access::Read))]),
            [r#""user_updated:0,alice,read" "Updating read user alice""#]
        );
        assert_eq!(
            descriptions(Action::Remove, &[("bob", None)]),
            [r#""user_deleted:0,bob" "Deleting user bob""#]
        );
    }

    #[test]
    fn replace_updates_every_identity_it_gives_new_or_not_and_deletes_the_nulls() {
        assert_eq!(
            descriptions(
                Action::Replace,
                &[("alice", Some(Access::Admin)), ("bob", None)]
            ),
            [
                r#""user_updated:0,alice,admin" "Updating admin user alice""#,
                r#""user_deleted:0,bob" "Deleting user bob""#,
            ]
        );
    }
}
