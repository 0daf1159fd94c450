//! `/v1/system-info`: open to every client, including `--http` ones (`/v1/health` lives with
//! the checks).

use axum::extract::State;
use axum::response::Response;

use super::{Shared, sync};
use cobble_client::types::SystemInfo;

pub(super) async fn system_info(State(api): State<Shared>) -> Response {
    sync(SystemInfo {
        boot_id: api.boot_id.clone(),
        http_address: api.http_address.clone().unwrap_or_default(),
        https_address: api.https_address.clone().unwrap_or_default(),
        version: cobble_client::PEBBLE_VERSION.into(),
        cobble_version: crate::VERSION.into(),
    })
}
