//! Files: the logic behind `/v1/files` (pull, push, list, make-dirs, remove).
//!
//! # Theory of operation
//!
//! Pebble's files API is a thin layer over the file system, and clients match on its exact
//! error kinds and Go-style messages (`stat /x: no such file or directory`), so this module
//! reproduces Go's `os`, `path` and `mime/multipart` behaviour where it is observable, and
//! nothing else. There is no state and no actor: every operation is a function of its request,
//! run on tokio's blocking pool, because file system calls block.
//!
//! - **Errors** ([`FileError`]) carry the operation and path the way Go's `*PathError` does,
//!   and map to the three kinds clients see: `not-found` (ENOENT), `permission-denied`
//!   (EACCES, EPERM) and `generic-file-error` (everything else, including ENOTDIR).
//! - **Reads** ([`read::read_files`]) stream a multipart body byte-compatible with Go's
//!   writer: one `files` part per readable file, then a `response` part with per-path errors.
//!   A blocking task reads the files in large chunks into a small bounded channel, so a pull
//!   holds at most a few chunks in memory whatever the file size.
//! - **Writes** ([`write::write_multipart`]) parse the request with multer as it arrives and
//!   hand each file's chunks, through a bounded channel, to a blocking task that writes a
//!   temporary file in the target's directory (`<base>.<random>~`, mode set with `fchmod` so
//!   the umask does not apply), `fchown`s it, `fsync`s it, renames it over the target and
//!   `fsync`s the directory. Writeback is started every few MiB as the body arrives
//!   (`sync_file_range`), so the disk works in parallel and the final `fsync` is short. A reader therefore sees the old or the new file, never a mix; an
//!   error, a truncated body or a client that goes away drops the channel, and the writer
//!   removes its temporary file, leaving the old content in place.
//! - **Directories** ([`mkdir::make_dirs`]) are created under a temporary name
//!   (`<path>.mkdir-new`), given their owner, renamed into place, chmod'ed explicitly (so the
//!   umask does not apply) and their parent `fsync`ed; missing parents get the same mode and
//!   owner. A process-wide lock keeps two requests from racing on a shared parent.
//! - **Listing** ([`list::list`]) follows a symlink named by the request but not symlinks
//!   inside a listed directory, and filters names with Go's `path.Match` ([`glob`]).
//!
//! # Layout
//!
//! - [`error`]: [`FileError`] and its kinds.
//! - [`gopath`]: Go's `path` package functions that shape observable paths.
//! - [`glob`]: Go's `path.Match`.
//! - [`multipart`]: the multipart writer and the `Content-Type`/`Content-Disposition` parser.
//! - [`part_headers`]: Go's bounds on a push's part headers, which multer lacks.
//! - [`read`], [`list`], [`write`](mod@write), [`mkdir`], [`remove`]: one operation each.

pub(crate) mod error;
pub(crate) mod glob;
pub(crate) mod gopath;
pub(crate) mod list;
pub(crate) mod mkdir;
pub(crate) mod multipart;
pub(crate) mod part_headers;
pub(crate) mod read;
pub(crate) mod remove;
pub(crate) mod write;

pub(crate) use error::{ErrorKind, FileError};

use cobble_client::types::{ErrorResult, FileResult};

/// The result entry of one path: its error, if any, as `{"message","kind"}`.
pub(crate) fn file_result(path: &str, outcome: Result<(), FileError>) -> FileResult {
    FileResult {
        path: path.to_string(),
        error: outcome.err().map(|e| ErrorResult {
            message: e.to_string(),
            kind: e.kind().as_str().to_string(),
            value: None,
        }),
    }
}

/// Pebble's `permissions` field: empty means `default`; otherwise exactly three octal digits.
pub(crate) fn parse_permissions(text: &str, default: u32) -> Result<u32, FileError> {
    if text.is_empty() {
        return Ok(default);
    }
    let valid = text.len() == 3 && text.bytes().all(|b| (b'0'..=b'7').contains(&b));
    if !valid {
        return Err(FileError::Generic(format!(
            "permissions must be a 3-digit octal string, got {}",
            cobble_plan::go_quote(text)
        )));
    }
    Ok(u32::from_str_radix(text, 8).expect("three octal digits"))
}

/// Pebble's `NormalizeUidGid` for a file request, with its error wording.
pub(crate) fn resolve_owner(
    user_id: Option<u32>,
    user: &str,
    group_id: Option<u32>,
    group: &str,
) -> Result<Option<(u32, u32)>, FileError> {
    cobble_sys::user::normalize_uid_gid(user_id, user, group_id, group)
        .map_err(|e| FileError::Generic(format!("cannot look up user and group: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permissions_must_be_three_octal_digits() {
        assert_eq!(parse_permissions("", 0o644).unwrap(), 0o644);
        assert_eq!(parse_permissions("600", 0o644).unwrap(), 0o600);
        assert_eq!(parse_permissions("777", 0o644).unwrap(), 0o777);
        for bad in ["1000", "-01", "0644", "8", "64", "abc", "78 "] {
            let err = parse_permissions(bad, 0o644).unwrap_err();
            assert_eq!(
                err.to_string(),
                format!("permissions must be a 3-digit octal string, got \"{bad}\"")
            );
            assert_eq!(err.kind(), ErrorKind::Generic);
        }
    }

    #[test]
    fn group_without_user_is_a_lookup_error() {
        let err = resolve_owner(None, "", Some(0), "").unwrap_err();
        assert_eq!(
            err.to_string(),
            "cannot look up user and group: must specify user, not just group"
        );
    }
}
