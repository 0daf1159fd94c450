//! The files API: push streamed from any reader, pull streamed into any writer, list,
//! make-dir and remove.
//!
//! Per-path failures (the daemon answers 200 with an `error` for the path) come back as
//! [`Error::Api`] carrying the path's `kind` (`not-found`, `permission-denied`,
//! `generic-file-error`) and message, with status code 200.

use bytes::{Bytes, BytesMut};
use futures_util::{StreamExt, TryStreamExt, stream};
use http_body_util::{BodyExt, BodyStream, StreamBody};
use hyper::Method;
use hyper::body::Frame;
use serde::Deserialize;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::client::{Client, decode_envelope, with_query};
use crate::error::Error;
use crate::transport::{self, content_type_of};
use crate::types::{
    FileInfo, FileResult, FilesRequest, MakeDirsItem, RemovePathsItem, WriteFilesItem,
    WriteFilesRequest,
};

/// How much of a push's source is read at a time.
const PUSH_CHUNK: usize = 256 * 1024;

/// What [`Client::push`] writes, and how.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PushOptions {
    /// Absolute path of the file on the daemon's side.
    pub path: String,
    /// Create missing parent directories (mode 0755, owned like the file).
    pub make_dirs: bool,
    /// Permission bits; the daemon's default is 0644.
    pub permissions: Option<u32>,
    /// Owner uid.
    pub user_id: Option<u32>,
    /// Owner name.
    pub user: String,
    /// Group gid (only with a user).
    pub group_id: Option<u32>,
    /// Group name (only with a user).
    pub group: String,
}

/// What [`Client::make_dir`] creates, and how.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MakeDirOptions {
    /// Absolute path of the directory.
    pub path: String,
    /// Create missing parents too; an existing directory is then not an error.
    pub make_parents: bool,
    /// Permission bits; the daemon's default is 0755.
    pub permissions: Option<u32>,
    /// Owner uid.
    pub user_id: Option<u32>,
    /// Owner name.
    pub user: String,
    /// Group gid (only with a user).
    pub group_id: Option<u32>,
    /// Group name (only with a user).
    pub group: String,
}

/// The `response` part of a pull.
#[derive(Deserialize)]
struct FilesResponse {
    #[serde(default)]
    result: Option<Vec<FileResult>>,
}

impl Client {
    /// `GET /v1/files?action=list`: the entries of a directory (or the path itself, for a
    /// file or with `itself`), optionally only those whose names match a glob `pattern`.
    /// A missing path is an [`Error::Api`] with status 404.
    pub async fn list_files(
        &self,
        path: &str,
        pattern: Option<&str>,
        itself: bool,
    ) -> Result<Vec<FileInfo>, Error> {
        let mut query = vec![("action", "list"), ("path", path)];
        if let Some(pattern) = pattern.filter(|p| !p.is_empty()) {
            query.push(("pattern", pattern));
        }
        if itself {
            query.push(("itself", "true"));
        }
        let infos: Option<Vec<FileInfo>> = self.get("/v1/files", &query).await?;
        Ok(infos.unwrap_or_default())
    }

    /// `POST /v1/files` `make-dirs` for one directory.
    pub async fn make_dir(&self, options: &MakeDirOptions) -> Result<(), Error> {
        let request = FilesRequest {
            action: "make-dirs".into(),
            dirs: vec![MakeDirsItem {
                path: options.path.clone(),
                make_parents: options.make_parents,
                permissions: options.permissions.map(octal).unwrap_or_default(),
                user_id: options.user_id,
                user: options.user.clone(),
                group_id: options.group_id,
                group: options.group.clone(),
            }],
            paths: Vec::new(),
        };
        let results: Option<Vec<FileResult>> = self.post("/v1/files", &request).await?;
        path_outcome(results, &options.path)
    }

    /// `POST /v1/files` `remove` for one path; `recursive` removes a directory and its
    /// contents, and makes a missing path a success.
    pub async fn remove_path(&self, path: &str, recursive: bool) -> Result<(), Error> {
        let request = FilesRequest {
            action: "remove".into(),
            dirs: Vec::new(),
            paths: vec![RemovePathsItem {
                path: path.into(),
                recursive,
            }],
        };
        let results: Option<Vec<FileResult>> = self.post("/v1/files", &request).await?;
        path_outcome(results, path)
    }

    /// `POST /v1/files` multipart: writes everything `source` yields to `options.path`,
    /// streaming it (chunked transfer encoding) without holding it in memory.
    pub async fn push<R>(&self, options: &PushOptions, source: R) -> Result<(), Error>
    where
        R: AsyncRead + Send + Unpin + 'static,
    {
        let boundary = random_boundary();
        let metadata = WriteFilesRequest {
            action: "write".into(),
            files: vec![WriteFilesItem {
                path: options.path.clone(),
                make_dirs: options.make_dirs,
                permissions: options.permissions.map(octal).unwrap_or_default(),
                user_id: options.user_id,
                user: options.user.clone(),
                group_id: options.group_id,
                group: options.group.clone(),
            }],
        };
        let metadata = serde_json::to_string(&metadata)
            .map_err(|e| Error::Protocol(format!("cannot encode request: {e}")))?;
        let escaped = options.path.replace('\\', "\\\\").replace('"', "\\\"");
        let head = Bytes::from(format!(
            "--{boundary}\r\nContent-Type: application/json\r\n\
             Content-Disposition: form-data; name=\"request\"\r\n\r\n{metadata}\r\n\
             --{boundary}\r\nContent-Type: application/octet-stream\r\n\
             Content-Disposition: form-data; name=\"files\"; filename=\"{escaped}\"\r\n\r\n"
        ));
        let tail = Bytes::from(format!("\r\n--{boundary}--\r\n"));
        // One buffer, reused: once hyper has sent a chunk, `reserve` reclaims its memory.
        let content = stream::unfold(Some((source, BytesMut::new())), |state| async move {
            let (mut reader, mut buf) = state?;
            buf.reserve(PUSH_CHUNK);
            match reader.read_buf(&mut buf).await {
                Ok(0) => None,
                Ok(_) => Some((Ok(buf.split().freeze()), Some((reader, buf)))),
                Err(e) => Some((Err(e), None)),
            }
        });
        let frames = stream::once(async { Ok(head) })
            .chain(content)
            .chain(stream::once(async { Ok(tail) }))
            .map_ok(Frame::data);
        let content_type = format!("multipart/form-data; boundary=\"{boundary}\"");
        let streamed = transport::send_streaming(
            self.endpoint(),
            Method::POST,
            "/v1/files",
            "application/json",
            Some(&content_type),
            StreamBody::new(frames),
        )
        .await?;
        let status = streamed.response.status().as_u16();
        let body = streamed
            .response
            .into_body()
            .collect()
            .await
            .map_err(|e| Error::broken(streamed.request_label, e))?
            .to_bytes();
        let response = decode_envelope(status, &body)?;
        let results: Option<Vec<FileResult>> = serde_json::from_value(response.result)
            .map_err(|e| Error::Protocol(format!("cannot unmarshal: {e}")))?;
        path_outcome(results, &options.path)
    }

    /// `GET /v1/files?action=read`: streams the file at `path` into `target` and returns the
    /// number of bytes written. On error, `target` may hold part of the file.
    pub async fn pull<W>(&self, path: &str, target: &mut W) -> Result<u64, Error>
    where
        W: AsyncWrite + Unpin,
    {
        let path_and_query = with_query("/v1/files", &[("action", "read"), ("path", path)]);
        let streamed = transport::send_streaming(
            self.endpoint(),
            Method::GET,
            &path_and_query,
            "multipart/form-data",
            None,
            http_body_util::Empty::<Bytes>::new(),
        )
        .await?;
        let label = streamed.request_label;
        let status = streamed.response.status().as_u16();
        let content_type = content_type_of(&streamed.response).unwrap_or_default();
        let boundary = multer::parse_boundary(&content_type).ok();
        let (Some(boundary), 200) = (boundary, status) else {
            // Not a multipart answer: an error envelope (or a broken daemon).
            let body = streamed
                .response
                .into_body()
                .collect()
                .await
                .map_err(|e| Error::broken(label, e))?
                .to_bytes();
            decode_envelope(status, &body)?;
            return Err(Error::Protocol(format!(
                "expected multipart/form-data response, got {content_type:?}"
            )));
        };
        let body = BodyStream::new(streamed.response.into_body())
            .try_filter_map(|frame| async move { Ok(frame.into_data().ok()) });
        let mut multipart = multer::Multipart::new(body, boundary);
        let broken = |e: multer::Error| Error::Protocol(format!("cannot read multipart: {e}"));
        let mut written: Option<u64> = None;
        let mut response: Option<FilesResponse> = None;
        while let Some(mut field) = multipart.next_field().await.map_err(broken)? {
            match field.name() {
                Some("files") => {
                    if field.file_name() != Some(path) || written.is_some() {
                        return Err(Error::Protocol(format!(
                            "path not expected: {:?}",
                            field.file_name().unwrap_or_default()
                        )));
                    }
                    let mut count = 0u64;
                    while let Some(chunk) = field.chunk().await.map_err(broken)? {
                        target.write_all(&chunk).await.map_err(|e| {
                            Error::Protocol(format!("cannot write pulled file: {e}"))
                        })?;
                        count += chunk.len() as u64;
                    }
                    written = Some(count);
                }
                Some("response") => {
                    let bytes = field.bytes().await.map_err(broken)?;
                    response = Some(serde_json::from_slice(&bytes).map_err(|e| {
                        Error::Protocol(format!("cannot decode response part: {e}"))
                    })?);
                }
                other => {
                    return Err(Error::Protocol(format!(
                        "unexpected name in multipart response: {:?}",
                        other.unwrap_or_default()
                    )));
                }
            }
        }
        target
            .flush()
            .await
            .map_err(|e| Error::Protocol(format!("cannot write pulled file: {e}")))?;
        let response = response
            .ok_or_else(|| Error::Protocol("no \"response\" field in multipart body".into()))?;
        path_outcome(response.result, path)?;
        written.ok_or_else(|| Error::Protocol("no file content in multipart response".into()))
    }
}

/// The outcome for `path` in a list of per-path results.
fn path_outcome(results: Option<Vec<FileResult>>, path: &str) -> Result<(), Error> {
    let result = results
        .unwrap_or_default()
        .into_iter()
        .find(|r| r.path == path)
        .ok_or_else(|| Error::Protocol(format!("path not found in response: {path:?}")))?;
    match result.error {
        None => Ok(()),
        Some(error) => Err(Error::Api {
            status_code: 200,
            kind: error.kind,
            message: error.message,
            value: error.value,
        }),
    }
}

/// Permission bits as Pebble wants them: `%03o`.
fn octal(mode: u32) -> String {
    format!("{mode:03o}")
}

/// 32 random hex characters, as ops makes its push boundaries.
fn random_boundary() -> String {
    let mut out = String::with_capacity(32);
    for _ in 0..2 {
        out.push_str(&format!("{:016x}", crate::random::random_u64()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::ErrorResult;

    #[test]
    fn per_path_errors_become_api_errors() {
        let results = vec![FileResult {
            path: "/x".into(),
            error: Some(ErrorResult {
                message: "stat /x: no such file or directory".into(),
                kind: "not-found".into(),
                value: None,
            }),
        }];
        let err = path_outcome(Some(results), "/x").unwrap_err();
        assert_eq!(err.api_kind(), Some("not-found"));
        assert_eq!(err.to_string(), "stat /x: no such file or directory");
        assert!(matches!(path_outcome(None, "/x"), Err(Error::Protocol(_))));
    }

    #[test]
    fn boundaries_are_32_hex_characters() {
        let boundary = random_boundary();
        assert_eq!(boundary.len(), 32);
        assert!(boundary.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(octal(0o644), "644");
        assert_eq!(octal(0o7), "007");
        assert_eq!(
            with_query("/v1/files", &[("path", "/a b/&c")]),
            "/v1/files?path=/a%20b/%26c"
        );
    }
}
