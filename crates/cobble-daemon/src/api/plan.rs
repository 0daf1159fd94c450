//! `/v1/plan`: the combined plan, as YAML.

use axum::extract::{Query, State};
use axum::response::Response;

use super::query::first;
use super::{Admin, ApiError, Shared, sync};

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
