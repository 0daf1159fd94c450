//! File system calls std does not offer.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Opens a new file in `dir` that has no name (`O_TMPFILE`): until [`link_anonymous`] gives
/// it one, it vanishes with its last descriptor, even when the process is killed. Fails with
/// `EOPNOTSUPP`, `EISDIR` or `EINVAL` where the kernel or file system cannot do this.
pub fn open_anonymous(dir: &Path, mode: u32) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .mode(mode)
        .custom_flags(libc::O_TMPFILE)
        .open(dir)
}

/// Whether an [`open_anonymous`] error means only that such files are not supported here.
pub fn anonymous_unsupported(err: &io::Error) -> bool {
    matches!(
        err.raw_os_error(),
        Some(libc::EOPNOTSUPP | libc::EISDIR | libc::EINVAL)
    )
}

/// Whether [`link_anonymous`] can work: it goes through `/proc/self/fd`, so that it needs no
/// privilege (`AT_EMPTY_PATH` would need `CAP_DAC_READ_SEARCH`).
pub fn can_link_anonymous() -> bool {
    Path::new("/proc/self/fd").is_dir()
}

/// Gives a file opened with [`open_anonymous`] the name `path` (which must not exist, and
/// must be in the directory it was opened in).
pub fn link_anonymous(file: &File, path: &Path) -> io::Result<()> {
    let proc_path = format!("/proc/self/fd/{}", file.as_raw_fd());
    nix::unistd::linkat(
        nix::fcntl::AT_FDCWD,
        proc_path.as_str(),
        nix::fcntl::AT_FDCWD,
        path,
        nix::fcntl::AtFlags::AT_SYMLINK_FOLLOW,
    )
    .map_err(io::Error::from)
}

/// Asks the kernel to start writing `len` bytes of `file` from `offset` back to disk, without
/// waiting (`sync_file_range(SYNC_FILE_RANGE_WRITE)`). A long write that does this as it goes
/// overlaps the disk's work with its own, so its final `fsync` has little left to do. It is
/// only a hint: durability still needs `fsync`.
pub fn start_writeback(file: &File, offset: u64, len: u64) -> io::Result<()> {
    let (Ok(offset), Ok(len)) = (i64::try_from(offset), i64::try_from(len)) else {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    };
    // SAFETY: sync_file_range only reads its integer arguments; the descriptor is open for
    // as long as `file` is borrowed, and a bad range is reported as an error, not UB.
    let rc = unsafe {
        libc::sync_file_range(file.as_raw_fd(), offset, len, libc::SYNC_FILE_RANGE_WRITE)
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn an_anonymous_file_is_invisible_until_linked() {
        let dir = tempfile::tempdir().unwrap();
        let mut file = match open_anonymous(dir.path(), 0o600) {
            Ok(file) => file,
            Err(e) if anonymous_unsupported(&e) => return,
            Err(e) => panic!("{e}"),
        };
        file.write_all(b"content").unwrap();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        let path = dir.path().join("named");
        link_anonymous(&file, &path).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"content");
        let err = link_anonymous(&file, &path).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AlreadyExists);
    }

    #[test]
    fn writeback_of_a_written_range_succeeds() {
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(&[7u8; 64 * 1024]).unwrap();
        start_writeback(&file, 0, 64 * 1024).unwrap();
        file.sync_all().unwrap();
    }
}
