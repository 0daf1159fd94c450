//! List: `GET /v1/files?action=list`, file information as Pebble's `fileInfoResult`.

use std::collections::HashMap;
use std::fs::Metadata;
use std::os::unix::fs::{FileTypeExt, MetadataExt};

use cobble_client::types::FileInfo;

use super::{FileError, glob, gopath};
use cobble_client::time::format_rfc3339_secs;

/// Lists `path` (absolute, checked by the caller): the entries of a directory, sorted by
/// name; or, for anything else or with `itself`, the path itself. The path is followed if it
/// is a symlink; entries of a directory are not. A non-empty `pattern` keeps the names that
/// match it with Go's `path.Match`.
pub(crate) fn list(path: &str, pattern: &str, itself: bool) -> Result<Vec<FileInfo>, FileError> {
    let metadata = std::fs::metadata(path).map_err(|e| FileError::path("stat", path, e))?;
    let mut names = OwnerNames::default();
    let mut result = Vec::new();
    if !metadata.is_dir() || itself {
        // As Go does: the name `os.Stat` gives, joined to the path's directory.
        let name = gopath::stat_name(path);
        if matches(pattern, &name)? {
            let full_path = gopath::join(&gopath::dir(path), &name);
            result.push(file_info(full_path, &metadata, &mut names));
        }
        return Ok(result);
    }
    let mut entries: Vec<(String, std::fs::DirEntry)> = std::fs::read_dir(path)
        .map_err(|e| FileError::path("open", path, e))?
        .map(|entry| {
            entry
                .map(|e| (e.file_name().to_string_lossy().into_owned(), e))
                .map_err(|e| FileError::path("readdirent", path, e))
        })
        .collect::<Result<_, _>>()?;
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, entry) in entries {
        if !matches(pattern, &name)? {
            continue;
        }
        let full_path = gopath::join(path, &name);
        // DirEntry::metadata does not follow symlinks (lstat), like Go's DirEntry.Info.
        let metadata = entry
            .metadata()
            .map_err(|e| FileError::path("lstat", full_path.clone(), e))?;
        result.push(file_info(full_path, &metadata, &mut names));
    }
    Ok(result)
}

fn matches(pattern: &str, name: &str) -> Result<bool, FileError> {
    if pattern.is_empty() {
        return Ok(true);
    }
    glob::matches(pattern, name).map_err(|e| FileError::Generic(e.to_string()))
}

/// Pebble's `fileInfoToResult`.
fn file_info(full_path: String, metadata: &Metadata, names: &mut OwnerNames) -> FileInfo {
    let file_type = metadata.file_type();
    let kind = if file_type.is_file() {
        "file"
    } else if file_type.is_dir() {
        "directory"
    } else if file_type.is_symlink() {
        "symlink"
    } else if file_type.is_socket() {
        "socket"
    } else if file_type.is_fifo() {
        "named-pipe"
    } else if file_type.is_block_device() || file_type.is_char_device() {
        "device"
    } else {
        "unknown"
    };
    let modified = jiff::Timestamp::new(metadata.mtime(), metadata.mtime_nsec() as i32)
        .unwrap_or(jiff::Timestamp::UNIX_EPOCH);
    FileInfo {
        name: gopath::base(&full_path),
        path: full_path,
        file_type: kind.into(),
        size: file_type.is_file().then_some(metadata.len()),
        permissions: format!("{:03o}", metadata.mode() & 0o777),
        last_modified: format_rfc3339_secs(modified),
        user_id: Some(metadata.uid()),
        user: names.user(metadata.uid()),
        group_id: Some(metadata.gid()),
        group: names.group(metadata.gid()),
    }
}

/// User and group names looked up once per listing; unknown ids show as empty names.
#[derive(Default)]
struct OwnerNames {
    users: HashMap<u32, String>,
    groups: HashMap<u32, String>,
}

impl OwnerNames {
    fn user(&mut self, uid: u32) -> String {
        self.users
            .entry(uid)
            .or_insert_with(|| {
                cobble_sys::user::user_by_uid(uid)
                    .ok()
                    .flatten()
                    .map(|u| u.name)
                    .unwrap_or_default()
            })
            .clone()
    }

    fn group(&mut self, gid: u32) -> String {
        self.groups
            .entry(gid)
            .or_insert_with(|| {
                cobble_sys::user::group_by_gid(gid)
                    .ok()
                    .flatten()
                    .map(|g| g.name)
                    .unwrap_or_default()
            })
            .clone()
    }
}
