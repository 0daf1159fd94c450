//! File system calls std does not offer.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

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
    fn writeback_of_a_written_range_succeeds() {
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(&[7u8; 64 * 1024]).unwrap();
        start_writeback(&file, 0, 64 * 1024).unwrap();
        file.sync_all().unwrap();
    }
}
