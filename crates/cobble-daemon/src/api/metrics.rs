//! `/v1/metrics`: Pebble's metric families in OpenMetrics text, with cobble's accounting of
//! each service after them.

use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::{Metrics, Shared};

/// OpenMetrics text, with the content type Go's server sniffs for it.
pub(super) async fn get_metrics(_: Metrics, State(api): State<Shared>) -> Response {
    let body = crate::metrics::current(
        &api.plan,
        &api.services,
        &api.schedules,
        &api.checks,
        &api.forward,
    )
    .await;
    let mut response = (StatusCode::OK, body).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}
