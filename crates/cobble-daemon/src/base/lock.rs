//! One daemon per `$PEBBLE`.
//!
//! A second daemon on a directory that a live one serves would end the first one's services
//! as leftovers, supervise them alongside it and, when it exits, remove its socket. So the
//! daemon takes an exclusive `flock` on `$PEBBLE/.cobble.lock` before it touches anything
//! else in the directory, and holds it until it exits; the kernel releases it when the
//! process ends, however it ends, so a killed daemon never blocks the next one.
//!
//! Not quite at once, though: a child forked by the daemon shares the lock until it execs or
//! exits, and a child waiting to be recorded (see `spawn_gated`) exits only once it sees its
//! killed parent's end of the gate close. A daemon restarted right after a SIGKILL would
//! otherwise find the lock held for those few moments and refuse to run, so it waits a short
//! grace for the holder to go before it says another daemon is running.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

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

impl DirLock {
    /// The lock file's descriptor: the lock belongs to its open file, which a re-execution
    /// keeps open across `execve`, so the new program holds the lock without taking it again.
    pub(crate) fn fd(&self) -> std::os::fd::RawFd {
        std::os::fd::AsRawFd::as_raw_fd(&self._file)
    }

    /// The lock a re-executed daemon was handed, as its predecessor held it.
    pub(crate) fn adopt(fd: std::os::fd::OwnedFd) -> DirLock {
        DirLock {
            _file: File::from(fd),
        }
    }
}

/// How long a daemon waits for the lock's holder to go before it gives up.
pub(crate) const GRACE: Duration = Duration::from_secs(2);

/// Takes the lock on `dir`, waiting up to `grace` for a holder to release it. Blocking.
pub fn lock(dir: &Path, grace: Duration) -> Result<DirLock, LockError> {
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
        Err(std::fs::TryLockError::WouldBlock) => wait_for(file, grace)
            .map_err(io_err)?
            .map(|file| DirLock { _file: file })
            .ok_or_else(|| LockError::Held(dir.to_owned())),
        Err(std::fs::TryLockError::Error(e)) => Err(io_err(e)),
    }
}

/// Waits up to `grace` for the lock on `file`; `None` if it is still held then. The wait is
/// a blocking `flock` on a thread of its own: if it gets the lock after the deadline, nobody
/// receives the file and dropping it releases the lock again.
fn wait_for(file: File, grace: Duration) -> io::Result<Option<File>> {
    let (tx, rx) = mpsc::sync_channel(1);
    std::thread::Builder::new()
        .name("cobble-lock".into())
        .spawn(move || {
            let _ = tx.send(file.lock().map(|()| file));
        })?;
    match rx.recv_timeout(grace) {
        Ok(locked) => locked.map(Some),
        Err(_) => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_on_the_same_directory_is_refused_until_the_first_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let first = lock(dir.path(), Duration::ZERO).unwrap();
        let err = lock(dir.path(), Duration::from_millis(20)).unwrap_err();
        assert!(matches!(err, LockError::Held(_)), "{err}");
        drop(first);
        // The refused wait, had it got the lock late, gave it back.
        lock(dir.path(), GRACE).unwrap();
    }

    #[test]
    fn a_holder_that_goes_within_the_grace_is_waited_for() {
        let dir = tempfile::tempdir().unwrap();
        let first = lock(dir.path(), Duration::ZERO).unwrap();
        let path = dir.path().to_owned();
        let second = std::thread::spawn(move || lock(&path, Duration::from_secs(60)));
        drop(first);
        second
            .join()
            .unwrap()
            .expect("the lock once its holder went");
    }
}
