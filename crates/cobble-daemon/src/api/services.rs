//! Services, layers, plan and signals.

use std::collections::BTreeSet;

use axum::body::Body;
use axum::extract::{Query, State};
use axum::response::Response;
use cobble_client::types::{LayersRequest, ServicesAction, SignalsRequest};
use cobble_plan::Layer;

use super::{
    Admin, ApiError, Read, Shared, async_change, json_body, multi_comma_list, sync, sync_sized,
};
use crate::services::changes::ActionError;
use crate::why::ServiceListing;

pub async fn get_services(
    _: Read,
    State(api): State<Shared>,
    Query(query): Query<Vec<(String, String)>>,
) -> Response {
    let names = multi_comma_list(&query, "names");
    let details = query.iter().any(|(k, v)| k == "details" && v == "true");
    let plan = api.plan.plan();
    let started = api.services.statuses(names.clone(), details).await;
    let selected: BTreeSet<&str> = names.iter().map(String::as_str).collect();
    let listing = ServiceListing::new(
        &plan,
        (!names.is_empty()).then_some(&selected),
        &started,
        details,
    );
    // Skip the check snapshot on this hot path unless a check can explain a listed service.
    let checks = if listing.acts_on_checks() {
        api.checks.checks().await
    } else {
        Vec::new()
    };
    let size = listing.size_hint();
    sync_sized(listing.with_checks(&checks), size)
}

pub async fn post_services(
    _: Admin,
    State(api): State<Shared>,
    body: Body,
) -> Result<Response, ApiError> {
    let request: ServicesAction = json_body(body, "cannot decode data from request body").await?;
    match api.actions.act(&request.action, request.services).await {
        Ok(change_id) => {
            if request.action == "replan" {
                // Pebble's replan also starts enabled checks that are not running.
                api.checks.replan().await;
            }
            Ok(async_change(change_id))
        }
        Err(ActionError::NoDefaultServices) => {
            Err(ApiError::bad_request("no default services").with_kind("no-default-services"))
        }
        Err(ActionError::BadRequest(message)) => Err(ApiError::bad_request(message)),
    }
}

pub async fn not_implemented(_: Read) -> ApiError {
    ApiError::bad_request("not implemented")
}

pub async fn not_implemented_admin(_: Admin) -> ApiError {
    ApiError::bad_request("not implemented")
}

pub async fn get_plan(
    _: Admin,
    State(api): State<Shared>,
    Query(query): Query<Vec<(String, String)>>,
) -> Result<Response, ApiError> {
    let format = query
        .iter()
        .find(|(k, _)| k == "format")
        .map_or("", |(_, v)| v.as_str());
    if format != "yaml" {
        return Err(ApiError::bad_request(format!(
            "invalid format \"{format}\""
        )));
    }
    Ok(sync(api.plan.plan().to_yaml()))
}

pub async fn post_layers(
    _: Admin,
    State(api): State<Shared>,
    body: Body,
) -> Result<Response, ApiError> {
    let request: LayersRequest = json_body(body, "cannot decode request body").await?;
    if request.action != "add" {
        return Err(ApiError::bad_request(format!(
            "invalid action \"{}\"",
            request.action
        )));
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
    tracing::info!("Adding layer {}", request.label);
    api.plan
        .add_layer(layer, request.combine, request.inner)
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    Ok(sync(true))
}

pub async fn post_signals(
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
