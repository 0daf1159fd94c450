//! `/v1/files`: pull, list, push, make-dirs and remove. Transport only; the logic is in
//! [`crate::files`].

use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use cobble_client::types::{FilesRequest, WriteFilesItem};
use cobble_plan::go_quote;
use futures_util::StreamExt;

use super::query::{all, first};
use super::{Admin, ApiError, Shared, json_body, sync};
use crate::daemon_log::{self, SecurityEvent};
use crate::files::{self, ErrorKind, FileError, gopath, multipart};
use crate::go_json::{GoField, GoPayload, GoStruct, GoType, INT, STRING};

/// The shortest multipart boundary Pebble takes (it sets no longest: Go's reader has none).
const MIN_BOUNDARY: usize = 32;

pub(super) async fn get_files(
    admin: Admin,
    headers: HeaderMap,
    Query(query): Query<Vec<(String, String)>>,
) -> Result<Response, ApiError> {
    match first(&query, "action") {
        "read" => {
            let paths = all(&query, "path");
            if paths.is_empty() {
                return Err(ApiError::bad_request("must specify one or more paths"));
            }
            let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
            if accept != Some("multipart/form-data") {
                return Err(ApiError::bad_request("must accept multipart/form-data"));
            }
            for path in &paths {
                daemon_log::security(SecurityEvent::PullFile {
                    user: &admin.user,
                    path,
                });
            }
            let read = files::read::read_files(paths);
            let stream = futures_util::stream::unfold(read.chunks, |mut rx| async move {
                rx.recv().await.map(|chunk| (chunk, rx))
            });
            let mut response = Body::from_stream(stream).into_response();
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_str(&read.content_type).expect("boundary is hex"),
            );
            Ok(response)
        }
        "list" => {
            let path = first(&query, "path").to_string();
            if path.is_empty() {
                return Err(ApiError::bad_request("must specify path"));
            }
            let pattern = first(&query, "pattern").to_string();
            let itself = first(&query, "itself");
            if !matches!(itself, "true" | "false" | "") {
                return Err(ApiError::bad_request(
                    "itself parameter must be \"true\" or \"false\"",
                ));
            }
            if !gopath::is_abs(&path) {
                return Err(ApiError::bad_request(format!(
                    "path must be absolute, got {}",
                    go_quote(&path)
                )));
            }
            let itself = itself == "true";
            let listed =
                tokio::task::spawn_blocking(move || files::list::list(&path, &pattern, itself))
                    .await
                    .map_err(|e| ApiError::internal(e.to_string()))?;
            listed.map(sync).map_err(list_error)
        }
        other => Err(ApiError::invalid_action(other)),
    }
}

/// A listing error is the whole response, with a status that follows its kind.
fn list_error(err: FileError) -> ApiError {
    let kind = err.kind();
    let status = match kind {
        ErrorKind::NotFound => StatusCode::NOT_FOUND,
        ErrorKind::PermissionDenied => StatusCode::FORBIDDEN,
        ErrorKind::Generic => StatusCode::BAD_REQUEST,
    };
    ApiError::new(status, err.to_string()).with_kind(kind.as_str())
}

impl GoPayload for FilesRequest {
    const GO: GoType = GoType::Struct(&GoStruct {
        name: "",
        fields: &[
            GoField::new("Action", "action", STRING),
            GoField::new(
                "Dirs",
                "dirs",
                GoType::Slice(&GoType::Struct(&MAKE_DIRS_ITEM)),
            ),
            GoField::new(
                "Paths",
                "paths",
                GoType::Slice(&GoType::Struct(&REMOVE_PATHS_ITEM)),
            ),
        ],
    });
}

const MAKE_DIRS_ITEM: GoStruct = GoStruct {
    name: "daemon.makeDirsItem",
    fields: &[
        GoField::new("Path", "path", STRING),
        GoField::new("MakeParents", "make-parents", GoType::Bool),
        GoField::new("Permissions", "permissions", STRING),
        GoField::new("UserID", "user-id", GoType::Ptr(&INT)),
        GoField::new("User", "user", STRING),
        GoField::new("GroupID", "group-id", GoType::Ptr(&INT)),
        GoField::new("Group", "group", STRING),
    ],
};

const REMOVE_PATHS_ITEM: GoStruct = GoStruct {
    name: "daemon.removePathsItem",
    fields: &[
        GoField::new("Path", "path", STRING),
        GoField::new("Recursive", "recursive", GoType::Bool),
    ],
};

pub(super) async fn post_files(
    admin: Admin,
    State(api): State<Shared>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .unwrap_or_default();
    let Some((media_type, params)) = multipart::parse_media_type(&content_type) else {
        return Err(ApiError::bad_request(format!(
            "invalid Content-Type {}",
            go_quote(&content_type)
        )));
    };
    match media_type.as_str() {
        "multipart/form-data" => {
            let boundary = multipart::param(&params, "boundary").unwrap_or_default();
            if boundary.len() < MIN_BOUNDARY {
                return Err(ApiError::bad_request(format!(
                    "invalid boundary {}",
                    go_quote(boundary)
                )));
            }
            let stream = body
                .into_data_stream()
                .map(|r| r.map_err(axum::Error::into_inner));
            let audit = |files: &[WriteFilesItem]| {
                for file in files {
                    daemon_log::security(SecurityEvent::PushFile {
                        user: &admin.user,
                        path: &file.path,
                    });
                }
            };
            files::write::write_multipart(stream, boundary, Some(&api.pebble_dir), audit)
                .await
                .map(sync)
                .map_err(ApiError::bad_request)
        }
        "application/json" => {
            let request: FilesRequest = json_body(body, "cannot decode request body").await?;
            let results = match request.action.as_str() {
                "make-dirs" => {
                    tokio::task::spawn_blocking(move || files::mkdir::make_dirs(&request.dirs))
                        .await
                }
                "remove" => {
                    tokio::task::spawn_blocking(move || files::remove::remove_paths(&request.paths))
                        .await
                }
                "write" => {
                    return Err(ApiError::bad_request(
                        "must use multipart with \"write\" action",
                    ));
                }
                other => return Err(ApiError::invalid_action(other)),
            };
            results
                .map(sync)
                .map_err(|e| ApiError::internal(e.to_string()))
        }
        other => Err(ApiError::bad_request(format!(
            "invalid media type {}",
            go_quote(other)
        ))),
    }
}
