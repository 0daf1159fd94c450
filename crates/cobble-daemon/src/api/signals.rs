//! `/v1/signals`: a signal sent to the main process of each named service.

use axum::body::Body;
use axum::extract::State;
use axum::response::Response;
use cobble_client::types::SignalsRequest;

use super::{Admin, ApiError, Shared, json_body, sync};
use crate::go_json::{GoField, GoPayload, GoStruct, GoType, STRING, STRINGS};

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
