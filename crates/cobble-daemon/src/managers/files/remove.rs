//! Remove: `POST /v1/files` `{"action":"remove"}`.

use std::io;

use cobble_client::types::{FileResult, RemovePathsItem};

use super::error::not_absolute;
use super::{FileError, file_result, gopath};

const ENOTDIR: i32 = 20;
const EINVAL: i32 = 22;

/// Handles a remove request: one result per path, in order.
pub(crate) fn remove_paths(items: &[RemovePathsItem]) -> Vec<FileResult> {
    items
        .iter()
        .map(|item| file_result(&item.path, remove_path(&item.path, item.recursive)))
        .collect()
}

fn remove_path(path: &str, recursive: bool) -> Result<(), FileError> {
    if !gopath::is_abs(path) {
        return Err(not_absolute(path));
    }
    if recursive {
        remove_all(path)
    } else {
        remove(path)
    }
}

/// Go's `os.Remove`: unlink, else rmdir; of the two errors, the one that is not rmdir's
/// ENOTDIR (so a non-empty directory reads `directory not empty`).
fn remove(path: &str) -> Result<(), FileError> {
    let unlink_error = match std::fs::remove_file(path) {
        Ok(()) => return Ok(()),
        Err(e) => e,
    };
    let rmdir_error = match std::fs::remove_dir(path) {
        Ok(()) => return Ok(()),
        Err(e) => e,
    };
    let error = if rmdir_error.raw_os_error() != Some(ENOTDIR) {
        rmdir_error
    } else {
        unlink_error
    };
    Err(FileError::path("remove", path, error))
}

/// Go's `os.RemoveAll`: everything at and below `path`; a missing path is success.
fn remove_all(path: &str) -> Result<(), FileError> {
    if path == "." || path.ends_with("/.") {
        return Err(FileError::path(
            "RemoveAll",
            path,
            io::Error::from_raw_os_error(EINVAL),
        ));
    }
    let metadata = match std::fs::symlink_metadata(path) {
        Ok(metadata) => metadata,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(FileError::path("unlinkat", path, e)),
    };
    let outcome = if metadata.is_dir() {
        std::fs::remove_dir_all(path)
    } else {
        std::fs::remove_file(path)
    };
    match outcome {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(FileError::path("unlinkat", path, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn remove_one(path: &str, recursive: bool) -> Option<(String, String)> {
        remove_paths(&[RemovePathsItem {
            path: path.into(),
            recursive,
        }])
        .remove(0)
        .error
        .map(|e| (e.message, e.kind))
    }

    #[test]
    fn remove_semantics_match_pebble() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().display().to_string();
        std::fs::create_dir_all(dir.path().join("full/sub")).unwrap();
        std::fs::write(dir.path().join("full/sub/f"), "x").unwrap();
        std::fs::create_dir(dir.path().join("empty")).unwrap();
        std::fs::write(dir.path().join("file"), "x").unwrap();

        assert_eq!(remove_one(&format!("{root}/file"), false), None);
        assert_eq!(remove_one(&format!("{root}/empty"), false), None);
        assert_eq!(
            remove_one(&format!("{root}/full"), false),
            Some((
                format!("remove {root}/full: directory not empty"),
                "generic-file-error".into()
            ))
        );
        assert_eq!(
            remove_one(&format!("{root}/nope"), false),
            Some((
                format!("remove {root}/nope: no such file or directory"),
                "not-found".into()
            ))
        );
        assert_eq!(remove_one(&format!("{root}/full"), true), None);
        assert!(!dir.path().join("full").exists());
        assert_eq!(remove_one(&format!("{root}/nope/deeper"), true), None);
        assert_eq!(
            remove_one("relative", true),
            Some((
                "paths must be absolute, got \"relative\"".into(),
                "generic-file-error".into()
            ))
        );
    }
}
