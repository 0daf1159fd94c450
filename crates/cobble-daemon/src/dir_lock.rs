//! One daemon per `$PEBBLE`.
//!
//! A second daemon on a directory that a live one serves would end the first one's services
//! as leftovers, supervise them alongside it and, when it exits, remove its socket. So the
//! daemon takes an exclusive `flock` on `$PEBBLE/.cobble.lock` before it touches anything
//! else in the directory, and holds it until it exits; the kernel releases it when the
//! process ends, however it ends, so a killed daemon never blocks the next one.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The lock file's name in `$PEBBLE`.
pub const LOCK_FILE: &str = ".cobble.lock";

/// Why the directory could not be locked.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("another daemon is already running on {0}")]
    Held(PathBuf),
    #[error("cannot lock {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
}

/// The held lock; released when dropped (or when the process ends).
#[derive(Debug)]
pub struct DirLock {
    _file: File,
}

/// Takes the lock on `dir` without waiting.
pub fn lock(dir: &Path) -> Result<DirLock, LockError> {
    let path = dir.join(LOCK_FILE);
    let io_err = |source| LockError::Io {
        path: path.clone(),
        source,
    };
    let file = match OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&path)
    {
        Ok(file) => file,
        // A directory the daemon may read but not write (a read-only image, another user's
        // lock file): lock what it can open, the file if it is there, else the directory.
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::PermissionDenied | io::ErrorKind::ReadOnlyFilesystem
            ) =>
        {
            File::open(&path)
                .or_else(|_| File::open(dir))
                .map_err(io_err)?
        }
        Err(e) => return Err(io_err(e)),
    };
    match file.try_lock() {
        Ok(()) => Ok(DirLock { _file: file }),
        Err(std::fs::TryLockError::WouldBlock) => Err(LockError::Held(dir.to_owned())),
        Err(std::fs::TryLockError::Error(e)) => Err(io_err(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_on_the_same_directory_is_refused_until_the_first_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let first = lock(dir.path()).unwrap();
        let err = lock(dir.path()).unwrap_err();
        assert!(matches!(err, LockError::Held(_)), "{err}");
        drop(first);
        lock(dir.path()).unwrap();
    }
}
