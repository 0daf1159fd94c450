//! `/v1/system-info` and `/v1/health`: open to every client, including `--http` ones.

use axum::extract::{Query, State};
use axum::response::Response;
use serde::Serialize;

use super::{ApiError, Shared, multi_comma_list, sync};
use cobble_client::types::SystemInfo;

pub async fn system_info(State(api): State<Shared>) -> Response {
    sync(SystemInfo {
        boot_id: api.boot_id.clone(),
        http_address: api.http_address.clone().unwrap_or_default(),
        version: crate::VERSION.into(),
    })
}

#[derive(Serialize)]
struct HealthInfo {
    healthy: bool,
}

/// Health of the checks at `level`. The daemon has no checks yet, so it is always healthy;
/// the parameters are still validated like Pebble validates them.
pub async fn health(Query(query): Query<Vec<(String, String)>>) -> Result<Response, ApiError> {
    let level = query
        .iter()
        .find(|(k, _)| k == "level")
        .map_or("", |(_, v)| v.as_str());
    if !matches!(level, "" | "alive" | "ready") {
        return Err(ApiError::bad_request(r#"level must be "alive" or "ready""#));
    }
    let _names = multi_comma_list(&query, "names");
    Ok(sync(HealthInfo { healthy: true }))
}
