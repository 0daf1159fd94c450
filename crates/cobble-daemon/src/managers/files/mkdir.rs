//! Make-dirs: `POST /v1/files` `{"action":"make-dirs"}`, and the parents of a push.

use std::fs::File;
use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::sync::Mutex;

use cobble_client::types::{FileResult, MakeDirsItem};

use super::error::not_absolute;
use super::{FileError, file_result, gopath, parse_permissions, resolve_owner};

/// Linux errno values Pebble reports for paths that are in the way.
const ENOTDIR: i32 = 20;
const EEXIST: i32 = 17;

/// Serialises directory creation: two requests creating `/a/b` and `/a/c` must not both
/// decide to create `/a` (each through the same `/a.mkdir-new`).
static MKDIR_LOCK: Mutex<()> = Mutex::new(());

/// How [`mkdir`] behaves.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct MkdirOptions {
    /// Create missing parents, with the same mode and owner.
    pub make_parents: bool,
    /// An existing directory is not an error.
    pub exist_ok: bool,
    /// `(uid, gid)` for every directory created; `None` leaves the daemon's own.
    pub owner: Option<(u32, u32)>,
}

/// Handles a make-dirs request: one result per directory, in order.
pub(crate) fn make_dirs(items: &[MakeDirsItem]) -> Vec<FileResult> {
    items
        .iter()
        .map(|item| file_result(&item.path, make_dir(item)))
        .collect()
}

fn make_dir(item: &MakeDirsItem) -> Result<(), FileError> {
    if !gopath::is_abs(&item.path) {
        return Err(not_absolute(&item.path));
    }
    let perm = parse_permissions(&item.permissions, 0o755)?;
    let owner = resolve_owner(item.user_id, &item.user, item.group_id, &item.group)?;
    let options = MkdirOptions {
        make_parents: item.make_parents,
        exist_ok: item.make_parents,
        owner,
    };
    mkdir(&item.path, perm, &options)
}

/// Creates the directory `path` with mode `perm` (chmod'ed explicitly, so the umask does not
/// apply). An existing directory is left exactly as it is (mode and owner included) when
/// `exist_ok`, and is an error (`mkdir /x: file exists`) otherwise; an existing non-directory
/// is always an error (`mkdir /x: not a directory`).
pub(crate) fn mkdir(path: &str, perm: u32, options: &MkdirOptions) -> Result<(), FileError> {
    let _guard = MKDIR_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let path = gopath::clean(path);
    if let Ok(metadata) = std::fs::metadata(&path) {
        if !metadata.is_dir() {
            return Err(errno("mkdir", &path, ENOTDIR));
        }
        if options.exist_ok {
            return Ok(());
        }
        return Err(errno("mkdir", &path, EEXIST));
    }
    mkdir_all(&path, perm, options)
}

fn errno(op: &'static str, path: &str, code: i32) -> FileError {
    FileError::path(op, path, io::Error::from_raw_os_error(code))
}

fn mkdir_all(path: &str, perm: u32, options: &MkdirOptions) -> Result<(), FileError> {
    if let Ok(metadata) = std::fs::metadata(path) {
        if metadata.is_dir() {
            return Ok(());
        }
        return Err(errno("mkdir", path, ENOTDIR));
    }
    if options.make_parents {
        let parent = gopath::dir(path);
        if parent != "/" {
            mkdir_all(&parent, perm, options)?;
        }
    }
    mkdir_one(path, perm, options)
}

/// Creates one directory under `<path>.mkdir-new`, gives it its owner, renames it into place,
/// sets its mode and flushes the parent, so the directory appears complete or not at all.
fn mkdir_one(path: &str, perm: u32, options: &MkdirOptions) -> Result<(), FileError> {
    let candidate = format!("{path}.mkdir-new");
    match std::fs::DirBuilder::new().mode(perm).create(&candidate) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(FileError::path("mkdir", candidate, e)),
    }
    if let Some((uid, gid)) = options.owner {
        std::os::unix::fs::chown(&candidate, Some(uid), Some(gid))
            .map_err(|e| FileError::path("chown", candidate.clone(), e))?;
    }
    std::fs::rename(&candidate, path).map_err(|e| FileError::Rename {
        old: candidate.clone(),
        new: path.to_string(),
        source: e,
    })?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(perm))
        .map_err(|e| FileError::path("chmod", path, e))?;
    let parent = gopath::dir(path);
    let dir = File::open(&parent).map_err(|e| FileError::path("open", parent.clone(), e))?;
    dir.sync_all()
        .map_err(|e| FileError::path("sync", parent, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn item(path: &str, make_parents: bool, permissions: &str) -> MakeDirsItem {
        MakeDirsItem {
            path: path.into(),
            make_parents,
            permissions: permissions.into(),
            ..Default::default()
        }
    }

    fn mode(path: &std::path::Path) -> u32 {
        std::fs::metadata(path).unwrap().mode() & 0o7777
    }

    #[test]
    fn parents_get_the_leaf_mode_and_existing_dirs_are_untouched() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
        let leaf = dir.path().join("a/b/c");
        let results = make_dirs(&[item(&leaf.display().to_string(), true, "700")]);
        assert_eq!(results[0].error, None);
        assert_eq!(mode(&leaf), 0o700);
        assert_eq!(mode(&dir.path().join("a")), 0o700);
        assert_eq!(mode(dir.path()), 0o711);
        // Again: fine with make-parents, and nothing changes.
        let results = make_dirs(&[item(&leaf.display().to_string(), true, "755")]);
        assert_eq!(results[0].error, None);
        assert_eq!(mode(&leaf), 0o700);
    }

    #[test]
    fn errors_read_like_pebble() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().display().to_string();
        std::fs::write(dir.path().join("file"), "").unwrap();
        let cases = [
            (
                item(&format!("{root}/missing/x"), false, ""),
                format!("mkdir {root}/missing/x.mkdir-new: no such file or directory"),
                "not-found",
            ),
            (
                item(&root, false, ""),
                format!("mkdir {root}: file exists"),
                "generic-file-error",
            ),
            (
                item(&format!("{root}/file/x"), false, ""),
                format!("mkdir {root}/file/x.mkdir-new: not a directory"),
                "generic-file-error",
            ),
            (
                item(&format!("{root}/file/x/y"), true, ""),
                format!("mkdir {root}/file: not a directory"),
                "generic-file-error",
            ),
            (
                item("rel", false, ""),
                "paths must be absolute, got \"rel\"".to_string(),
                "generic-file-error",
            ),
            (
                item(&format!("{root}/p"), false, "1000"),
                "permissions must be a 3-digit octal string, got \"1000\"".to_string(),
                "generic-file-error",
            ),
        ];
        for (request, message, kind) in cases {
            let result = make_dirs(std::slice::from_ref(&request));
            let error = result[0].error.as_ref().expect("an error");
            assert_eq!(error.message, message);
            assert_eq!(error.kind, kind);
        }
        assert!(!dir.path().join("p").exists());
    }
}
