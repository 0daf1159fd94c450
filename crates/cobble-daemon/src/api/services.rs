//! `/v1/services`: the services listed, and started, stopped, restarted, replanned or
//! autostarted.

use axum::body::Body;
use axum::extract::{Query, State};
use axum::response::Response;
use cobble_client::types::ServicesAction;

use super::query::{first, multi_comma_list};
use super::{Admin, ApiError, Read, Shared, async_change, json_body, sync_json};
use crate::go_json::{GoField, GoPayload, GoStruct, GoType, STRING, STRINGS};
use crate::services::changes::{ActionError, ServiceChange};

pub(super) async fn get_services(
    _: Read,
    State(api): State<Shared>,
    Query(query): Query<Vec<(String, String)>>,
) -> Response {
    let names = multi_comma_list(&query, "names");
    let details = first(&query, "details") == "true";
    crate::listing::current(
        &api.plan,
        &api.services,
        &api.schedules,
        &api.checks,
        names,
        details,
        |listing| sync_json(|out| listing.write_json(out), listing.size_hint()),
    )
    .await
}

impl GoPayload for ServicesAction {
    const GO: GoType = GoType::Struct(&GoStruct {
        name: "",
        fields: &[
            GoField::new("Action", "action", STRING),
            GoField::new("Services", "services", STRINGS),
        ],
    });
}

pub(super) async fn post_services(
    _: Admin,
    State(api): State<Shared>,
    body: Body,
) -> Result<Response, ApiError> {
    let request: ServicesAction = json_body(body, "cannot decode data from request body").await?;
    let Some(action) = ServiceChange::from_name(&request.action) else {
        // Pebble asks for names before it looks at the action.
        return Err(if request.services.is_empty() {
            ApiError::bad_request(ActionError::NoServices(request.action).to_string())
        } else {
            ApiError::invalid_action(&request.action)
        });
    };
    // The change is on disk before it is carried out or its ID answered.
    match api.service_changes.act(action, request.services).await {
        Ok(change_id) => Ok(async_change(change_id)),
        Err(e @ ActionError::NoDefaultServices) => {
            Err(ApiError::bad_request(e.to_string()).with_kind("no-default-services"))
        }
        Err(e @ ActionError::NotRecorded(_)) => Err(ApiError::internal(e.to_string())),
        Err(e) => Err(ApiError::bad_request(e.to_string())),
    }
}

pub(super) async fn not_implemented(_: Read) -> ApiError {
    ApiError::bad_request("not implemented")
}

pub(super) async fn not_implemented_admin(_: Admin) -> ApiError {
    ApiError::bad_request("not implemented")
}
