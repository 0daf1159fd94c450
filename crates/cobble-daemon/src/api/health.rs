//! `/v1/health`: whether the checks of a level, or the named ones, are up.
//!
//! It is open (it is what Kubernetes probes over `--http`) and reads only the check
//! manager's published snapshot, so it answers at once however busy the rest of the daemon is.

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use cobble_client::types::HealthInfo;

use super::checks::level;
use super::query::multi_comma_list;
use super::{ApiError, Shared, sync_with_status};

pub(super) async fn health(
    State(api): State<Shared>,
    Query(query): Query<Vec<(String, String)>>,
) -> Result<Response, ApiError> {
    let level = level(&query)?;
    let names = multi_comma_list(&query, "names");
    let healthy = api.checks.healthy(level, &names);
    let status = if healthy {
        StatusCode::OK
    } else {
        StatusCode::BAD_GATEWAY
    };
    Ok(sync_with_status(status, HealthInfo { healthy }))
}
