//! Services, layers, plan and signals.

use axum::body::Body;
use axum::extract::{Query, State};
use axum::response::Response;
use cobble_client::types::{LayersRequest, ServicesAction, SignalsRequest};
use cobble_plan::Layer;

use super::query::{first, multi_comma_list};
use super::{Admin, ApiError, Read, Shared, async_change, json_body, sync, sync_json};
use crate::go_json::{GoField, GoPayload, GoStruct, GoType, STRING, STRINGS};
use crate::logging::{self, SecurityEvent};
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

pub(super) async fn get_plan(
    _: Admin,
    State(api): State<Shared>,
    Query(query): Query<Vec<(String, String)>>,
) -> Result<Response, ApiError> {
    let format = first(&query, "format");
    if format != "yaml" {
        return Err(ApiError::bad_request(format!(
            "invalid format \"{format}\""
        )));
    }
    Ok(sync(api.plan.plan().to_yaml()))
}

impl GoPayload for LayersRequest {
    const GO: GoType = GoType::Struct(&GoStruct {
        name: "",
        fields: &[
            GoField::new("Action", "action", STRING),
            GoField::new("Combine", "combine", GoType::Bool),
            GoField::new("Inner", "inner", GoType::Bool),
            GoField::new("Label", "label", STRING),
            GoField::new("Format", "format", STRING),
            GoField::new("Layer", "layer", STRING),
        ],
    });
}

pub(super) async fn post_layers(
    admin: Admin,
    State(api): State<Shared>,
    body: Body,
) -> Result<Response, ApiError> {
    let request: LayersRequest = json_body(body, "cannot decode request body").await?;
    // Adding is the only layer action; nothing past this point sees the name.
    if request.action != "add" {
        return Err(ApiError::invalid_action(&request.action));
    }
    if request.label.is_empty() {
        return Err(ApiError::bad_request("label must be set"));
    }
    if request.format != "yaml" {
        return Err(ApiError::bad_request(format!(
            "invalid format \"{}\"",
            request.format
        )));
    }
    let layer = Layer::parse(0, &request.label, &request.layer)
        .map_err(|e| ApiError::bad_request(format!("cannot parse layer YAML: {e}")))?;
    logging::security(SecurityEvent::AddLayer {
        user: &admin.user,
        label: &request.label,
    });
    api.plan
        .add_layer(layer, request.combine, request.inner)
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    Ok(sync(true))
}

impl GoPayload for SignalsRequest {
    const GO: GoType = GoType::Struct(&GoStruct {
        name: "daemon.signalsPayload",
        fields: &[
            GoField::new("Signal", "signal", STRING),
            GoField::new("Services", "services", STRINGS),
        ],
    });
}

pub(super) async fn post_signals(
    _: Admin,
    State(api): State<Shared>,
    body: Body,
) -> Result<Response, ApiError> {
    let request: SignalsRequest = json_body(body, "cannot decode request body").await?;
    if request.services.is_empty() {
        return Err(ApiError::bad_request("must specify one or more services"));
    }
    api.services
        .signal(request.services, request.signal)
        .await
        .map_err(ApiError::internal)?;
    Ok(sync(true))
}
