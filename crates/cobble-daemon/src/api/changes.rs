//! Changes: list, get, abort and wait.

use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use cobble_client::types::ChangeAction;
use cobble_plan::duration::{format_duration, parse_duration};

use super::query::first;
use super::{Admin, ApiError, Read, Shared, json_body, sync};
use crate::go_json::{GoField, GoPayload, GoStruct, GoType, STRING};
use crate::state::{Select, StateError};

pub(super) async fn get_changes(
    _: Read,
    State(api): State<Shared>,
    Query(query): Query<Vec<(String, String)>>,
) -> Result<Response, ApiError> {
    let select = match first(&query, "select") {
        "" | "in-progress" => Select::InProgress,
        "all" => Select::All,
        "ready" => Select::Ready,
        _ => {
            return Err(ApiError::bad_request(
                "select should be one of: all,in-progress,ready",
            ));
        }
    };
    let for_service = Some(first(&query, "for")).filter(|s| !s.is_empty());
    Ok(sync(api.state.list_changes(select, for_service).await))
}

fn not_found(e: StateError) -> ApiError {
    ApiError::not_found(e.to_string())
}

pub(super) async fn get_change(
    _: Read,
    State(api): State<Shared>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let change = api.state.get_change(&id).await.map_err(not_found)?;
    Ok(sync(change))
}

impl GoPayload for ChangeAction {
    const GO: GoType = GoType::Struct(&GoStruct {
        name: "",
        fields: &[GoField::new("Action", "action", STRING)],
    });
}

pub(super) async fn post_change(
    _: Admin,
    State(api): State<Shared>,
    Path(id): Path<String>,
    body: Body,
) -> Result<Response, ApiError> {
    let change = api.state.get_change(&id).await.map_err(not_found)?;
    let request: ChangeAction = json_body(body, "cannot decode data from request body").await?;
    // Aborting is the only change action; nothing past this point sees the name.
    if request.action != "abort" {
        return Err(ApiError::invalid_action(&request.action));
    }
    let numeric: u64 = change.id.parse().expect("IDs are numeric");
    match api.state.abort_change(numeric).await {
        Ok(info) => Ok(sync(info)),
        Err(StateError::NothingPending(_)) => Err(ApiError::bad_request(format!(
            "cannot abort change {id} with nothing pending"
        ))),
        Err(e @ StateError::NotRecorded(_)) => Err(ApiError::internal(e.to_string())),
        Err(e) => Err(not_found(e)),
    }
}

pub(super) async fn wait_change(
    _: Read,
    State(api): State<Shared>,
    Path(id): Path<String>,
    Query(query): Query<Vec<(String, String)>>,
) -> Result<Response, ApiError> {
    let change = api.state.get_change(&id).await.map_err(not_found)?;
    let numeric: u64 = change.id.parse().expect("IDs are numeric");
    let raw_timeout = first(&query, "timeout");
    let timeout_nanos = if raw_timeout.is_empty() {
        0
    } else {
        parse_duration(raw_timeout)
            .map_err(|e| ApiError::bad_request(format!("invalid timeout: {e}")))?
    };
    // Without this, a negative timeout would mean none at all: a wait that never ends.
    if timeout_nanos < 0 {
        return Err(ApiError::bad_request(format!(
            "invalid timeout: duration {} is negative",
            cobble_plan::go_quote(raw_timeout)
        )));
    }
    let ready = api.state.wait_ready(numeric);
    if timeout_nanos > 0 {
        let timeout = Duration::from_nanos(timeout_nanos as u64);
        if tokio::time::timeout(timeout, ready).await.is_err() {
            return Err(ApiError::new(
                StatusCode::GATEWAY_TIMEOUT,
                format!(
                    "timed out waiting for change after {}",
                    format_duration(timeout_nanos)
                ),
            ));
        }
    } else {
        ready.await;
    }
    let change = api.state.get_change(&id).await.map_err(not_found)?;
    Ok(sync(change))
}
