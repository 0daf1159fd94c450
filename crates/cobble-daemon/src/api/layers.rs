//! `/v1/layers`: a layer added to the plan, or combined into the layer of the same label.

use axum::body::Body;
use axum::extract::State;
use axum::response::Response;
use cobble_client::types::LayersRequest;
use cobble_plan::Layer;

use super::{Admin, ApiError, Shared, json_body, sync};
use crate::daemon_log::{self, SecurityEvent};
use crate::go_json::{GoField, GoPayload, GoStruct, GoType, STRING};

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
    daemon_log::security(SecurityEvent::AddLayer {
        user: &admin.user,
        label: &request.label,
    });
    api.plan
        .add_layer(layer, request.combine, request.inner)
        .await
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    Ok(sync(true))
}
