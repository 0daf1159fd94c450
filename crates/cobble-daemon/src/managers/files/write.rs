//! Push: `POST /v1/files` with a multipart body, each file streamed into an atomic write.

use std::collections::HashMap;
use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use cobble_client::types::{FileResult, WriteFilesItem, WriteFilesRequest};
use futures_util::{Stream, StreamExt};
use tokio::sync::mpsc;

use super::error::not_absolute;
use super::mkdir::{self, MkdirOptions};
use super::multipart::{form_filename, form_name};
use super::part_headers::{MessageTooLarge, PartHeaders};
use super::{FileError, file_result, gopath, parse_permissions, resolve_owner};
use crate::atomic::{AtomicFile, Durability};
use crate::go_json::{GoField, GoPayload, GoStruct, GoType, INT, STRING};

/// Largest `request` (metadata) part accepted.
const MAX_METADATA: usize = 4 * 1024 * 1024;

/// Batches of body chunks that may wait for the disk. With [`BATCH_BYTES`] this bounds what a
/// push holds in memory (a few MiB), whatever the file size.
const QUEUED_BATCHES: usize = 4;

/// While the writer is busy, chunks are gathered into batches of about this size, so the body
/// side and the writer thread hand over (and wake each other) rarely.
const BATCH_BYTES: usize = 1024 * 1024;

impl GoPayload for WriteFilesRequest {
    const GO: GoType = GoType::Struct(&GoStruct {
        name: "",
        fields: &[
            GoField::new("Action", "action", STRING),
            GoField::new(
                "Files",
                "files",
                GoType::Slice(&GoType::Struct(&WRITE_FILES_ITEM)),
            ),
        ],
    });
}

const WRITE_FILES_ITEM: GoStruct = GoStruct {
    name: "daemon.writeFilesItem",
    fields: &[
        GoField::new("Path", "path", STRING),
        GoField::new("MakeDirs", "make-dirs", GoType::Bool),
        GoField::new("Permissions", "permissions", STRING),
        GoField::new("UserID", "user-id", GoType::Ptr(&INT)),
        GoField::new("User", "user", STRING),
        GoField::new("GroupID", "group-id", GoType::Ptr(&INT)),
        GoField::new("Group", "group", STRING),
    ],
};

/// Parses a multipart write request as it streams in and writes each file atomically.
///
/// `on_request` sees the files the request names once its metadata is valid, before anything
/// is written. Returns the per-path results in the order of the metadata, or the message of a
/// 400 when the request itself is malformed (bad metadata, a part with an unknown path, a
/// truncated body). Whatever happens, a file is either fully replaced or left as it was.
pub async fn write_multipart<S, E>(
    body: S,
    boundary: &str,
    staging: Option<&Path>,
    on_request: impl FnOnce(&[WriteFilesItem]) + Send,
) -> Result<Vec<FileResult>, String>
where
    S: Stream<Item = Result<Bytes, E>> + Send + 'static,
    E: Into<Box<dyn std::error::Error + Send + Sync>> + 'static,
{
    let shared = Arc::new(Mutex::new(Box::pin(body)));
    let bounded = PartHeaders::new(SharedStream(shared.clone()), boundary);
    let multipart = multer::Multipart::new(bounded, boundary);
    let outcome = write_parts(multipart, staging, on_request).await;
    // multer stops at the closing boundary, but the client may still be sending the end of
    // the HTTP body (the last chunk of a chunked encoding). Answering and closing now would
    // reset the connection under it, so read the rest first, within limits, as Go's server
    // does after a handler returns.
    if let Ok(body) = Arc::try_unwrap(shared) {
        let mut body = body.into_inner().unwrap_or_else(|e| e.into_inner());
        let mut drained = 0;
        let _ = tokio::time::timeout(DRAIN_TIME, async {
            while let Some(Ok(chunk)) = body.next().await {
                drained += chunk.len();
                if drained > DRAIN_BYTES {
                    break;
                }
            }
        })
        .await;
    }
    outcome
}

/// How much of a body left over after the multipart end (or after an error) is read before
/// answering, and for how long at most.
const DRAIN_BYTES: usize = 256 * 1024;
const DRAIN_TIME: std::time::Duration = std::time::Duration::from_secs(2);

/// The request body, shared between multer (which polls it) and [`write_multipart`] (which
/// drains what multer leaves once multer is gone).
struct SharedStream<S>(Arc<Mutex<Pin<Box<S>>>>);

impl<S: Stream> Stream for SharedStream<S> {
    type Item = S::Item;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<S::Item>> {
        let mut inner = self.0.lock().unwrap_or_else(|e| e.into_inner());
        inner.as_mut().poll_next(cx)
    }
}

/// Reads the `request` part, then each `files` part into its file.
async fn write_parts(
    mut multipart: multer::Multipart<'static>,
    staging: Option<&Path>,
    on_request: impl FnOnce(&[WriteFilesItem]),
) -> Result<Vec<FileResult>, String> {
    let mut field = match multipart.next_field().await {
        Ok(Some(field)) => field,
        // A body that ends before its first boundary: Go's `NextPart` finds no part.
        Ok(None) | Err(multer::Error::IncompleteStream) => {
            return Err("cannot read request metadata: multipart: NextPart: EOF".into());
        }
        Err(e) => return Err(format!("cannot read request metadata: {}", multer_text(&e))),
    };
    let name = form_name(content_disposition(&field));
    if name != "request" {
        return Err(format!(
            "metadata field name must be \"request\", got {}",
            cobble_plan::go_quote(&name)
        ));
    }
    let mut metadata = Vec::new();
    loop {
        match field.chunk().await {
            Ok(Some(chunk)) if metadata.len() + chunk.len() <= MAX_METADATA => {
                metadata.extend_from_slice(&chunk)
            }
            Ok(Some(_)) => return Err("cannot decode request metadata: too large".into()),
            Ok(None) => break,
            Err(e) => return Err(format!("cannot read request metadata: {}", multer_text(&e))),
        }
    }
    drop(field);
    // Like Go's json.Decoder: the first JSON value counts, whatever follows it.
    let request: WriteFilesRequest = crate::go_json::decode(&metadata)
        .map_err(|e| format!("cannot decode request metadata: {e}"))?;
    if request.action != "write" {
        return Err(format!(
            "multipart action must be \"write\", got {}",
            cobble_plan::go_quote(&request.action)
        ));
    }
    if request.files.is_empty() {
        return Err("must specify one or more files".into());
    }
    on_request(&request.files);
    let items: HashMap<&str, &WriteFilesItem> = request
        .files
        .iter()
        .map(|item| (item.path.as_str(), item))
        .collect();

    let mut outcomes: HashMap<String, Result<(), FileError>> = HashMap::new();
    // Whether the body ended inside the last part.
    let mut cut_short = false;
    for index in 0.. {
        let mut field = match multipart.next_field().await {
            Ok(Some(field)) => field,
            Ok(None) => break,
            Err(e) => {
                let ended = matches!(
                    e,
                    multer::Error::IncompleteStream
                        | multer::Error::IncompleteFieldData { .. }
                        | multer::Error::IncompleteHeaders
                );
                match (ended, cut_short) {
                    // Go's `NextPart` after a part cut short finds the end where the next
                    // boundary should be.
                    (true, true) => {
                        return Err(format!(
                            "cannot read file part {index}: multipart: NextPart: EOF"
                        ));
                    }
                    // A body that ends after a boundary, or in a part's headers, has no
                    // more parts for Go's reader.
                    (true, false) => break,
                    (false, _) => {
                        return Err(format!(
                            "cannot read file part {index}: {}",
                            multer_text(&e)
                        ));
                    }
                }
            }
        };
        let name = form_name(content_disposition(&field));
        if name != "files" {
            return Err(format!(
                "field name must be \"files\", got {}",
                cobble_plan::go_quote(&name)
            ));
        }
        let path = form_filename(content_disposition(&field));
        let Some(item) = items.get(path.as_str()) else {
            return Err(format!(
                "no metadata for path {}",
                cobble_plan::go_quote(&path)
            ));
        };
        tracing::debug!("Pushing file {path}");
        let (outcome, ended) = write_file((*item).clone(), staging, &mut field).await;
        cut_short = ended;
        outcomes.insert(path, outcome);
    }

    Ok(request
        .files
        .iter()
        .map(|item| {
            let outcome = outcomes.remove(&item.path).unwrap_or_else(|| {
                Err(FileError::Generic(format!(
                    "no file content for path {}",
                    cobble_plan::go_quote(&item.path)
                )))
            });
            file_result(&item.path, outcome)
        })
        .collect())
}

fn content_disposition<'a>(field: &'a multer::Field<'_>) -> Option<&'a str> {
    field
        .headers()
        .get("content-disposition")
        .and_then(|v| v.to_str().ok())
}

/// A multer error in Go's words where Go's reader has an equivalent.
fn multer_text(err: &multer::Error) -> String {
    match err {
        multer::Error::IncompleteStream
        | multer::Error::IncompleteFieldData { .. }
        | multer::Error::IncompleteHeaders => "unexpected EOF".into(),
        multer::Error::StreamReadFailed(e) if e.is::<MessageTooLarge>() => e.to_string(),
        other => {
            let text = other.to_string();
            let mut chars = text.chars();
            match chars.next() {
                Some(first) => first.to_lowercase().chain(chars).collect(),
                None => text,
            }
        }
    }
}

/// What the body side tells the blocking writer.
enum Chunk {
    Data(Vec<Bytes>),
    /// The part ended cleanly: make the file permanent.
    Commit,
}

/// Streams one `files` part into [`write_blocking`] on the blocking pool. Also says whether
/// the body ended inside the part.
async fn write_file(
    item: WriteFilesItem,
    staging: Option<&Path>,
    field: &mut multer::Field<'_>,
) -> (Result<(), FileError>, bool) {
    let (tx, rx) = mpsc::channel(QUEUED_BATCHES);
    let staging = staging.map(Path::to_owned);
    let writer = tokio::task::spawn_blocking(move || write_blocking(&item, staging.as_deref(), rx));
    let mut body_error = None;
    let mut batch = Vec::new();
    let mut batch_len = 0;
    loop {
        match field.chunk().await {
            Ok(Some(chunk)) => {
                batch_len += chunk.len();
                batch.push(chunk);
                // Hand over a full batch, or anything at all when the writer is idle.
                let writer_idle = tx.capacity() == tx.max_capacity();
                if batch_len >= BATCH_BYTES || writer_idle {
                    batch_len = 0;
                    let full = std::mem::take(&mut batch);
                    if tx.send(Chunk::Data(full)).await.is_err() {
                        break; // The writer failed; its error is the outcome.
                    }
                }
            }
            Ok(None) => {
                if !batch.is_empty() && tx.send(Chunk::Data(batch)).await.is_err() {
                    break;
                }
                let _ = tx.send(Chunk::Commit).await;
                break;
            }
            Err(e) => {
                body_error = Some(multer_text(&e));
                break;
            }
        }
    }
    // Without a commit, the writer removes its temporary file when the channel closes.
    drop(tx);
    let outcome = writer
        .await
        .unwrap_or_else(|e| Err(FileError::Generic(format!("cannot write file: {e}"))));
    let cut_short = body_error.is_some();
    let outcome = match (outcome, body_error) {
        (Err(FileError::Interrupted), Some(text)) => Err(FileError::Generic(text)),
        (outcome, _) => outcome,
    };
    (outcome, cut_short)
}

/// Pebble's `writeFile`, fed from a channel: checks, parents, then an atomic write.
fn write_blocking(
    item: &WriteFilesItem,
    staging: Option<&Path>,
    mut rx: mpsc::Receiver<Chunk>,
) -> Result<(), FileError> {
    if !gopath::is_abs(&item.path) {
        return Err(not_absolute(&item.path));
    }
    let owner = resolve_owner(item.user_id, &item.user, item.group_id, &item.group)?;
    if item.make_dirs {
        let options = MkdirOptions {
            make_parents: true,
            exist_ok: true,
            owner,
        };
        mkdir::mkdir(&gopath::dir(&item.path), 0o755, &options)
            .map_err(|e| e.context("cannot create directory"))?;
    }
    let perm = parse_permissions(&item.permissions, 0o644)?;
    let base = gopath::base(&item.path);
    if base.contains('*') {
        // Go's temporary-file pattern cannot hold a '*', so Pebble refuses such names.
        return Err(FileError::Generic(format!(
            "cannot create tempfile for filename containing '*': {}",
            cobble_plan::go_quote(&base)
        )));
    }
    let mut file =
        AtomicFile::create_in(Path::new(&item.path), perm, Durability::Machine, staging)?;
    while let Some(chunk) = rx.blocking_recv() {
        match chunk {
            Chunk::Data(batch) => {
                for bytes in batch {
                    file.write(&bytes)?;
                }
            }
            Chunk::Commit => {
                if let Some((uid, gid)) = owner {
                    file.set_owner(uid, gid)?;
                }
                return Ok(file.commit()?);
            }
        }
    }
    Err(FileError::Interrupted)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn stream_of(body: &'static [u8]) -> impl Stream<Item = Result<Bytes, std::io::Error>> {
        // Small frames, so parts straddle frame boundaries.
        futures_util::stream::iter(
            body.chunks(7)
                .map(|c| Ok(Bytes::copy_from_slice(c)))
                .collect::<Vec<_>>(),
        )
    }

    fn leftovers(dir: &Path) -> Vec<String> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with('~'))
            .collect()
    }

    const BOUNDARY: &str = "0123456789abcdef0123456789abcdef";

    fn body(path: &str, content: &str, tail: &str) -> &'static [u8] {
        let text = format!(
            "--{BOUNDARY}\r\nContent-Type: application/json\r\nContent-Disposition: form-data; name=\"request\"\r\n\r\n\
             {{\"action\":\"write\",\"files\":[{{\"path\":\"{path}\"}}]}}\r\n--{BOUNDARY}\r\n\
             Content-Type: application/octet-stream\r\nContent-Disposition: form-data; name=\"files\"; filename=\"{path}\"\r\n\r\n\
             {content}{tail}"
        );
        Box::leak(text.into_bytes().into_boxed_slice())
    }

    #[tokio::test]
    async fn writes_a_file_with_default_mode() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f").display().to_string();
        let results = write_multipart(
            stream_of(body(&path, "hello", &format!("\r\n--{BOUNDARY}--\r\n"))),
            BOUNDARY,
            None,
            |_| {},
        )
        .await
        .unwrap();
        assert_eq!(results, vec![file_result(&path, Ok(()))]);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "hello");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o7777, 0o644);
        assert!(leftovers(dir.path()).is_empty());
    }

    #[tokio::test]
    async fn truncated_body_keeps_the_old_file_and_no_temp() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f").display().to_string();
        std::fs::write(&path, "old").unwrap();
        let err = write_multipart(
            stream_of(body(&path, "new content", "")),
            BOUNDARY,
            None,
            |_| {},
        )
        .await
        .unwrap_err();
        assert_eq!(err, "cannot read file part 1: multipart: NextPart: EOF");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "old");
        assert!(leftovers(dir.path()).is_empty());
    }

    #[tokio::test]
    async fn a_body_that_ends_after_a_boundary_or_in_headers_has_no_more_parts() {
        // As Go's reader: a complete part stands, and a part whose headers the body cuts
        // is no part at all.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f").display().to_string();
        let ended_after_boundary = body(&path, "new", &format!("\r\n--{BOUNDARY}\r\n"));
        let results = write_multipart(stream_of(ended_after_boundary), BOUNDARY, None, |_| {})
            .await
            .unwrap();
        assert_eq!(results[0].error, None);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new");

        let meta = format!(
            "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"request\"\r\n\r\n\
             {{\"action\":\"write\",\"files\":[{{\"path\":\"{path}2\"}}]}}\r\n--{BOUNDARY}\r\n"
        );
        for cut in [meta.clone(), format!("{meta}Content-Disposition: form-da")] {
            let cut: &'static [u8] = Box::leak(cut.into_bytes().into_boxed_slice());
            let results = write_multipart(stream_of(cut), BOUNDARY, None, |_| {})
                .await
                .unwrap();
            let error = results[0].error.as_ref().unwrap();
            assert_eq!(
                error.message,
                format!("no file content for path \"{path}2\"")
            );
        }
    }

    #[tokio::test]
    async fn unknown_path_fails_the_request() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f").display().to_string();
        let text = String::from_utf8(body(&path, "x", &format!("\r\n--{BOUNDARY}--\r\n")).to_vec())
            .unwrap()
            .replace(&format!("filename=\"{path}\""), "filename=\"/other\"");
        let body: &'static [u8] = Box::leak(text.into_bytes().into_boxed_slice());
        let err = write_multipart(stream_of(body), BOUNDARY, None, |_| {})
            .await
            .unwrap_err();
        assert_eq!(err, "no metadata for path \"/other\"");
        assert!(!Path::new(&path).exists());
    }

    #[tokio::test]
    async fn missing_request_part_is_rejected() {
        let text = format!(
            "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"files\"; filename=\"/x\"\r\n\r\nx\r\n--{BOUNDARY}--\r\n"
        );
        let body: &'static [u8] = Box::leak(text.into_bytes().into_boxed_slice());
        let err = write_multipart(stream_of(body), BOUNDARY, None, |_| {})
            .await
            .unwrap_err();
        assert_eq!(
            err,
            "metadata field name must be \"request\", got \"files\""
        );
    }

    #[tokio::test]
    async fn path_in_metadata_without_content_is_a_per_path_error() {
        let text = format!(
            "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"request\"\r\n\r\n\
             {{\"action\":\"write\",\"files\":[{{\"path\":\"/nowhere/x\"}}]}}\r\n--{BOUNDARY}--\r\n"
        );
        let body: &'static [u8] = Box::leak(text.into_bytes().into_boxed_slice());
        let results = write_multipart(stream_of(body), BOUNDARY, None, |_| {})
            .await
            .unwrap();
        let error = results[0].error.as_ref().unwrap();
        assert_eq!(error.message, "no file content for path \"/nowhere/x\"");
        assert_eq!(error.kind, "generic-file-error");
    }
}
