//! Exec: starting a command, and its task's websockets.

use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use cobble_client::types::ExecRequest;

use super::{Admin, ApiError, Shared, async_change_with, json_body};
use crate::daemon_log::{self, SecurityEvent};
use crate::exec::{ConnectError, SetupError, ws};
use crate::go_json::{GoField, GoPayload, GoStruct, GoType, INT, STRING, STRINGS};

impl GoPayload for ExecRequest {
    const GO: GoType = GoType::Struct(&GoStruct {
        name: "daemon.execPayload",
        fields: &[
            GoField::new("Command", "command", STRINGS),
            GoField::new("ServiceContext", "service-context", STRING),
            GoField::new("Environment", "environment", GoType::Map(&STRING)),
            GoField::new("WorkingDir", "working-dir", STRING),
            GoField::new("Timeout", "timeout", STRING),
            GoField::new("UserID", "user-id", GoType::Ptr(&INT)),
            GoField::new("User", "user", STRING),
            GoField::new("GroupID", "group-id", GoType::Ptr(&INT)),
            GoField::new("Group", "group", STRING),
            GoField::new("Terminal", "terminal", GoType::Bool),
            GoField::new("Interactive", "interactive", GoType::Bool),
            GoField::new("SplitStderr", "split-stderr", GoType::Bool),
            GoField::new("Width", "width", INT),
            GoField::new("Height", "height", INT),
        ],
    });
}

pub(super) async fn post_exec(
    admin: Admin,
    State(api): State<Shared>,
    body: Body,
) -> Result<Response, ApiError> {
    let request: ExecRequest = json_body(body, "cannot decode request body").await?;
    let program = request.command.first().cloned().unwrap_or_default();
    let started = api
        .exec
        .start(request, api.plan.plan())
        .await
        .map_err(|e| match e {
            SetupError::BadRequest(_) => ApiError::bad_request(e.to_string()),
            SetupError::CannotCall(_) | SetupError::NotRecorded(_) => {
                ApiError::internal(e.to_string())
            }
        })?;
    daemon_log::security(SecurityEvent::Exec {
        user: &admin.user,
        command: &program,
    });
    Ok(async_change_with(started.change_id, started.result))
}

pub(super) async fn get_task_websocket(
    _: Admin,
    State(api): State<Shared>,
    Path((task_id, websocket)): Path<(String, String)>,
    mut request: Request,
) -> Result<Response, ApiError> {
    let claim = match api.exec.connect(&task_id, &websocket) {
        Ok(claim) => claim,
        Err(e) => {
            // A websocket client may show only "bad handshake"; the log says why, in
            // Pebble's words.
            match &e {
                ConnectError::NoTask(_) => tracing::info!("Websocket: {e}"),
                ConnectError::NoWebsocket { websocket, .. } => {
                    tracing::info!("Websocket {task_id}: cannot find {websocket} websocket")
                }
                _ => tracing::info!("Websocket {task_id}: {e}"),
            }
            return match e {
                ConnectError::NoTask(_) | ConnectError::NoWebsocket { .. } => {
                    Err(ApiError::new(StatusCode::NOT_FOUND, e.to_string()))
                }
                ConnectError::NoWebsockets(_) => Err(ApiError::bad_request(e.to_string())),
                ConnectError::AlreadyConnected(_) => Err(ApiError::internal(e.to_string())),
                // Pebble's answers once the change is ready: its error as a 500, or, when
                // it did not fail, nothing at all (an empty 200).
                ConnectError::Finished {
                    error: Some(error), ..
                } => Err(ApiError::internal(error)),
                ConnectError::Finished { error: None, .. } => Ok(StatusCode::OK.into_response()),
            };
        }
    };
    let (key, upgrade) = ws::handshake(&mut request).map_err(|reason| {
        ApiError::bad_request(format!(
            "cannot connect to websocket {}: {reason}",
            cobble_plan::go_quote(&websocket),
        ))
    })?;
    tokio::spawn(async move {
        match upgrade.await {
            Ok(upgraded) => {
                let chunk = claim.read_buffer_size();
                let connection = super::serve::upgraded_connection(upgraded);
                claim.deliver(ws::Socket::new(connection, chunk));
            }
            // The claim, dropped, frees the websocket for another try.
            Err(e) => tracing::debug!("Websocket {task_id}: upgrade failed: {e}"),
        }
    });
    Ok(ws::switching_protocols(&key))
}
