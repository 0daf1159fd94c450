//! Replacing a file atomically: write a temporary file beside it, then rename it over it.
//!
//! Every file the daemon replaces goes through here: the state file, the process registry
//! and pushed files. A reader (or the next daemon) sees the old file or the new one, never a
//! mix, and a failed or abandoned write leaves only the old file behind: the temporary file
//! is removed unless the rename happened.
//!
//! Where the kernel and file system allow it, the temporary file has no name while it is
//! written (`O_TMPFILE`), so a daemon killed mid-write leaves nothing behind; only at the
//! commit is it linked as `<dir>/<name>.<random>~` and at once renamed over the target.
//! Elsewhere it is created under that name. Either way the name has the shape Pebble gives
//! its own temporary files, so a leftover after a crash is recognisable:
//! [`remove_leftovers`] clears them from `$PEBBLE` at start-up.
//!
//! A file written anywhere else (a push) can be given a staging directory,
//! [`AtomicFile::create_in`]: `$PEBBLE`. When it is on the target's file system, the
//! temporary file gets its name there and is renamed from there over the target, so what a
//! daemon killed between those two steps leaves is in `$PEBBLE`, where its successor sweeps,
//! not beside a file of the workload's where nobody would.
//!
//! How far the new file must survive is each caller's choice, made explicit with
//! [`Durability`]: the rename alone makes it atomic for other processes; surviving a machine
//! crash also needs the file and its directory flushed.

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use cobble_sys::os_error_text;

/// Chunks smaller than this are gathered into writes of this size; larger ones are written
/// as they are, without a copy.
const WRITE_BUFFER: usize = 64 * 1024;

/// Every this many bytes, a durable write asks the kernel to start writing back what it has,
/// so the disk works while the content is still arriving and the final `fsync` finds little
/// left to do.
const WRITEBACK_WINDOW: u64 = 8 * 1024 * 1024;

/// How many taken temporary names are skipped before giving up.
const NAME_ATTEMPTS: u32 = 10_000;

/// How far a replaced file must survive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Durability {
    /// Only the daemon process: the rename, no `fsync`. Other processes and the next daemon
    /// see the old file or the new one; after a machine crash either may be there, or an
    /// empty file.
    Process,
    /// The machine: the file is flushed to disk before the rename and its directory after
    /// it, so once the write returns the new file survives a power cut.
    Machine,
}

/// A step of an atomic write that failed, worded like Go's `*fs.PathError` and
/// `*os.LinkError` so that the files API can pass it on as Pebble would.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AtomicError {
    /// `<op> <path>: <errno text>`.
    #[error("{op} {}: {}", path.display(), os_error_text(source))]
    Path {
        /// What failed: `open`, `chmod`, `write`, `chown` or `sync`.
        op: &'static str,
        /// The temporary file or the directory.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// `rename <old> <new>: <errno text>`.
    #[error("rename {} {}: {}", old.display(), new.display(), os_error_text(source))]
    Rename {
        /// The temporary file.
        old: PathBuf,
        /// The target.
        new: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
}

/// `rename(2)` as Go's `os.Rename` does it: a target that is a directory is refused with
/// `EEXIST` ("file exists") before the kernel is asked, which would say `EISDIR`.
fn go_rename(old: &Path, new: &Path) -> io::Result<()> {
    const EEXIST: i32 = 17;
    if std::fs::symlink_metadata(new).is_ok_and(|m| m.is_dir()) {
        std::fs::symlink_metadata(old)?;
        return Err(io::Error::from_raw_os_error(EEXIST));
    }
    std::fs::rename(old, new)
}

impl AtomicError {
    pub(crate) fn path(op: &'static str, path: &Path, source: io::Error) -> AtomicError {
        AtomicError::Path {
            op,
            path: path.to_owned(),
            source,
        }
    }
}

/// Replaces `target` with `bytes` (mode `mode`, whatever the umask).
pub(crate) fn write_atomic(
    target: &Path,
    bytes: &[u8],
    mode: u32,
    durability: Durability,
) -> Result<(), AtomicError> {
    let mut file = AtomicFile::create(target, mode, durability)?;
    file.write(bytes)?;
    file.commit()
}

/// A file written under a temporary name beside its target and renamed over it on
/// [`AtomicFile::commit`]. Dropped without a commit, it removes the temporary file.
#[must_use = "nothing replaces the target until the file is committed"]
pub(crate) struct AtomicFile {
    /// The open temporary file, until the commit.
    file: Option<BufWriter<File>>,
    /// The temporary file's path: its name on disk, or the name it gets at the commit when it
    /// has none yet.
    temp: PathBuf,
    /// Whether the temporary file has a name on disk (which a drop must remove).
    named: bool,
    /// The file to replace.
    target: PathBuf,
    durability: Durability,
    /// Bytes given to [`AtomicFile::write`] so far.
    written: u64,
    /// Up to where writeback has been started.
    writeback_started: u64,
    /// Whether the rename happened (and the temporary file is gone).
    renamed: bool,
}

impl AtomicFile {
    /// Creates `<dir>/<name>.<random>~` beside `target` with mode `mode` (set with `fchmod`,
    /// so the umask does not apply).
    pub(crate) fn create(
        target: &Path,
        mode: u32,
        durability: Durability,
    ) -> Result<AtomicFile, AtomicError> {
        AtomicFile::create_in(target, mode, durability, None)
    }

    /// [`AtomicFile::create`], with the temporary file named in `staging` rather than
    /// beside the target when `staging` is on the target's file system (see the module's
    /// notes).
    pub(crate) fn create_in(
        target: &Path,
        mode: u32,
        durability: Durability,
        staging: Option<&Path>,
    ) -> Result<AtomicFile, AtomicError> {
        let staging = staging.filter(|staging| same_file_system(staging, &parent_of(target)));
        AtomicFile::create_with(
            target,
            mode,
            durability,
            cobble_sys::fs::can_link_anonymous(),
            staging,
        )
    }

    /// [`AtomicFile::create`], with or without trying a nameless temporary file first, and
    /// with the temporary file named in `staging` or beside the target.
    fn create_with(
        target: &Path,
        mode: u32,
        durability: Durability,
        try_anonymous: bool,
        staging: Option<&Path>,
    ) -> Result<AtomicFile, AtomicError> {
        let Some(name) = target.file_name() else {
            // `/`, `..` and the like name a directory, never a file to replace.
            let source = io::Error::new(io::ErrorKind::IsADirectory, "is a directory");
            return Err(AtomicError::path("open", target, source));
        };
        let mut prefix = name.to_owned();
        prefix.push(".");
        let temp_for = |prefix: &std::ffi::OsStr| {
            let mut temp_name = prefix.to_owned();
            temp_name.push(format!("{}~", cobble_client::random::random_u64() as u32));
            match staging {
                Some(staging) => staging.join(temp_name),
                None => target.with_file_name(temp_name),
            }
        };
        let parent = parent_of(target);
        let dir = parent.as_path();
        let anonymous = if try_anonymous {
            match cobble_sys::fs::open_anonymous(dir, 0o600) {
                Ok(file) => Some(file),
                Err(e) if cobble_sys::fs::anonymous_unsupported(&e) => None,
                Err(e) => {
                    return Err(AtomicError::path(
                        "open",
                        &beside(target, &temp_for(&prefix)),
                        e,
                    ));
                }
            }
        } else {
            None
        };
        let (file, temp, named) = match anonymous {
            Some(file) => (file, temp_for(&prefix), false),
            None => {
                let mut attempts = 0;
                loop {
                    let temp = temp_for(&prefix);
                    match OpenOptions::new()
                        .read(true)
                        .write(true)
                        .create_new(true)
                        .mode(0o600)
                        .open(&temp)
                    {
                        Ok(file) => break (file, temp, true),
                        Err(e)
                            if e.kind() == io::ErrorKind::AlreadyExists
                                && attempts < NAME_ATTEMPTS =>
                        {
                            attempts += 1;
                        }
                        Err(e) => return Err(AtomicError::path("open", &beside(target, &temp), e)),
                    }
                }
            }
        };
        let mut atomic = AtomicFile {
            file: None,
            temp,
            named,
            target: target.to_owned(),
            durability,
            written: 0,
            writeback_started: 0,
            renamed: false,
        };
        file.set_permissions(std::fs::Permissions::from_mode(mode))
            .map_err(|e| AtomicError::path("chmod", &atomic.shown(), e))?;
        atomic.file = Some(BufWriter::with_capacity(WRITE_BUFFER, file));
        Ok(atomic)
    }

    /// The temporary file's path (the name it will have, while it has none).
    #[cfg(test)]
    pub(crate) fn temp_path(&self) -> &Path {
        &self.temp
    }

    /// Appends to the temporary file.
    pub(crate) fn write(&mut self, bytes: &[u8]) -> Result<(), AtomicError> {
        let shown = || beside(&self.target, &self.temp);
        let file = self.file.as_mut().expect("open until committed");
        file.write_all(bytes)
            .map_err(|e| AtomicError::path("write", &shown(), e))?;
        self.written += bytes.len() as u64;
        if self.durability == Durability::Machine {
            let in_kernel = self.written - file.buffer().len() as u64;
            if in_kernel - self.writeback_started >= WRITEBACK_WINDOW {
                // Only a hint: a failure here shows up in the final fsync if it matters.
                let _ = cobble_sys::fs::start_writeback(
                    file.get_ref(),
                    self.writeback_started,
                    in_kernel - self.writeback_started,
                );
                self.writeback_started = in_kernel;
            }
        }
        Ok(())
    }

    /// Gives the temporary file an owner (before the commit, so the target never has the
    /// wrong one).
    pub(crate) fn set_owner(&self, uid: u32, gid: u32) -> Result<(), AtomicError> {
        let file = self.file.as_ref().expect("open until committed");
        std::os::unix::fs::fchown(file.get_ref(), Some(uid), Some(gid))
            .map_err(|e| AtomicError::path("chown", &self.shown(), e))
    }

    /// Renames the temporary file over the target; for [`Durability::Machine`], flushes it
    /// to disk first and flushes the directory after.
    pub(crate) fn commit(mut self) -> Result<(), AtomicError> {
        let writer = self.file.take().expect("open until committed");
        let file = writer
            .into_inner()
            .map_err(|e| AtomicError::path("write", &self.shown(), e.into_error()))?;
        let dir = match self.durability {
            Durability::Process => None,
            Durability::Machine => {
                // Opened before the rename, so a directory that cannot be flushed fails the
                // write while the old file is still in place.
                // The target's: where the new name is once renamed.
                let dir_path = parent_of(&self.target);
                let dir_path = dir_path.as_path();
                let dir =
                    File::open(dir_path).map_err(|e| AtomicError::path("open", dir_path, e))?;
                file.sync_all()
                    .map_err(|e| AtomicError::path("sync", &self.shown(), e))?;
                Some((dir, dir_path.to_owned()))
            }
        };
        if !self.named {
            self.link(&file)?;
        }
        drop(file);
        go_rename(&self.temp, &self.target).map_err(|e| AtomicError::Rename {
            old: self.shown(),
            new: self.target.clone(),
            source: e,
        })?;
        self.renamed = true;
        match dir {
            Some((dir, dir_path)) => dir
                .sync_all()
                .map_err(|e| AtomicError::path("sync", &dir_path, e)),
            None => Ok(()),
        }
    }
}

impl AtomicFile {
    /// The temporary file as errors name it: beside the target, where Pebble keeps its own,
    /// whether or not it was staged elsewhere, so that clients matching Pebble's words
    /// (`rename /etc/app.conf.123~ /etc/app.conf: file exists`) see them.
    fn shown(&self) -> PathBuf {
        beside(&self.target, &self.temp)
    }

    /// Gives the nameless temporary file its name, another one if that is taken.
    fn link(&mut self, file: &File) -> Result<(), AtomicError> {
        let mut attempts = 0;
        loop {
            match cobble_sys::fs::link_anonymous(file, &self.temp) {
                Ok(()) => {
                    self.named = true;
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && attempts < NAME_ATTEMPTS => {
                    attempts += 1;
                    let mut temp_name = self.target.file_name().unwrap_or_default().to_owned();
                    temp_name.push(format!(".{}~", cobble_client::random::random_u64() as u32));
                    self.temp = self.temp.with_file_name(temp_name);
                }
                Err(e) => return Err(AtomicError::path("link", &self.shown(), e)),
            }
        }
    }
}

/// `temp`'s name beside `target`.
fn beside(target: &Path, temp: &Path) -> PathBuf {
    target.with_file_name(temp.file_name().unwrap_or_default())
}

/// The directory `target` is in (`.` for a bare name).
fn parent_of(target: &Path) -> PathBuf {
    match target.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_owned(),
        _ => PathBuf::from("."),
    }
}

/// Whether `a` and `b` are directories on one file system (a rename between them works).
fn same_file_system(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev(),
        _ => false,
    }
}

/// Whether `name` has the shape of a temporary file of [`AtomicFile`]: `<name>.<digits>~`.
pub(crate) fn is_temp_name(name: &str) -> bool {
    let Some(stem) = name.strip_suffix('~') else {
        return false;
    };
    match stem.rsplit_once('.') {
        Some((base, digits)) => {
            !base.is_empty() && !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
        }
        None => false,
    }
}

/// Removes the temporary files a killed daemon left in `dir` (not below it); returns their
/// names. Only the holder of the directory's lock may call this: another daemon's writes
/// in progress look the same.
pub(crate) fn remove_leftovers(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut removed = Vec::new();
    for entry in entries.filter_map(Result::ok) {
        let name = entry.file_name().to_string_lossy().into_owned();
        if is_temp_name(&name)
            && entry.file_type().is_ok_and(|t| t.is_file())
            && std::fs::remove_file(entry.path()).is_ok()
        {
            removed.push(name);
        }
    }
    removed.sort();
    removed
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        if self.named && !self.renamed {
            self.file.take();
            let _ = std::fs::remove_file(&self.temp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn replaces_the_target_with_the_mode_asked_for() {
        for durability in [Durability::Process, Durability::Machine] {
            let dir = tempfile::tempdir().unwrap();
            let target = dir.path().join("t");
            std::fs::write(&target, "old").unwrap();
            write_atomic(&target, b"new", 0o640, durability).unwrap();
            assert_eq!(std::fs::read_to_string(&target).unwrap(), "new");
            let mode = std::fs::metadata(&target).unwrap().permissions().mode();
            assert_eq!(mode & 0o7777, 0o640, "{durability:?}");
            assert_eq!(entries(dir.path()), ["t"], "{durability:?}");
        }
    }

    #[test]
    fn dropped_without_commit_leaves_the_old_file_only() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("t");
        std::fs::write(&target, "old").unwrap();
        let mut file = AtomicFile::create(&target, 0o600, Durability::Machine).unwrap();
        file.write(b"partial").unwrap();
        drop(file);
        assert_eq!(entries(dir.path()), ["t"]);
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "old");
    }

    #[test]
    fn a_failed_rename_removes_the_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("d");
        std::fs::create_dir(&target).unwrap();
        std::fs::write(target.join("inside"), "").unwrap();
        let err = write_atomic(&target, b"x", 0o600, Durability::Process).unwrap_err();
        assert!(matches!(err, AtomicError::Rename { .. }), "{err}");
        assert_eq!(entries(dir.path()), ["d"]);
    }

    #[test]
    fn temp_name_has_pebble_shape() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("name.txt");
        let file = AtomicFile::create(&target, 0o644, Durability::Process).unwrap();
        assert_eq!(file.temp_path().parent(), Some(dir.path()));
        let base = file.temp_path().file_name().unwrap().to_str().unwrap();
        assert!(
            base.starts_with("name.txt.") && base.ends_with('~'),
            "{base}"
        );
        assert!(
            base["name.txt.".len()..base.len() - 1]
                .bytes()
                .all(|b| b.is_ascii_digit())
        );
    }

    #[test]
    fn an_unfinished_file_has_no_name_where_the_kernel_allows() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("t");
        let mut file = AtomicFile::create(&target, 0o600, Durability::Process).unwrap();
        file.write(b"partial").unwrap();
        if cobble_sys::fs::can_link_anonymous()
            && cobble_sys::fs::open_anonymous(dir.path(), 0o600).is_ok()
        {
            assert!(entries(dir.path()).is_empty());
        }
        file.commit().unwrap();
        assert_eq!(entries(dir.path()), ["t"]);
    }

    #[test]
    fn without_nameless_files_the_named_temporary_file_is_committed_or_removed() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("t");
        std::fs::write(&target, "old").unwrap();
        let mut file =
            AtomicFile::create_with(&target, 0o600, Durability::Machine, false, None).unwrap();
        file.write(b"partial").unwrap();
        assert_eq!(entries(dir.path()).len(), 2);
        drop(file);
        assert_eq!(entries(dir.path()), ["t"]);
        let mut file =
            AtomicFile::create_with(&target, 0o640, Durability::Machine, false, None).unwrap();
        file.write(b"new").unwrap();
        file.commit().unwrap();
        assert_eq!(entries(dir.path()), ["t"]);
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "new");
    }

    #[test]
    fn leftovers_are_recognised_by_their_shape_only() {
        let dir = tempfile::tempdir().unwrap();
        for name in [
            ".pebble.state.123~",
            ".cobble-processes.4294967295~",
            "a.b.7~",
            "notes~",
            "x.~",
            ".5~",
            "keep.txt",
            "y.12a~",
        ] {
            std::fs::write(dir.path().join(name), "").unwrap();
        }
        std::fs::create_dir(dir.path().join("d.1~")).unwrap();
        let removed = remove_leftovers(dir.path());
        assert_eq!(
            removed,
            [
                ".cobble-processes.4294967295~",
                ".pebble.state.123~",
                "a.b.7~"
            ]
        );
        assert_eq!(
            entries(dir.path()),
            [".5~", "d.1~", "keep.txt", "notes~", "x.~", "y.12a~"]
        );
    }

    #[test]
    fn errors_read_like_go_errors() {
        let err = write_atomic(
            Path::new("/nonexistent-dir/f"),
            b"x",
            0o600,
            Durability::Process,
        )
        .unwrap_err();
        let text = err.to_string();
        assert!(
            text.starts_with("open /nonexistent-dir/f.")
                && text.ends_with("~: no such file or directory"),
            "{text}"
        );
    }

    #[test]
    fn a_staged_temporary_file_is_named_in_the_staging_directory_and_renamed_from_there() {
        let root = tempfile::tempdir().unwrap();
        let staging = root.path().join("pebble");
        let work = root.path().join("etc");
        std::fs::create_dir(&staging).unwrap();
        std::fs::create_dir(&work).unwrap();
        let target = work.join("app.conf");
        std::fs::write(&target, "old").unwrap();
        for anonymous in [false, true] {
            let mut file = AtomicFile::create_with(
                &target,
                0o644,
                Durability::Machine,
                anonymous && cobble_sys::fs::can_link_anonymous(),
                Some(&staging),
            )
            .unwrap();
            assert_eq!(file.temp_path().parent(), Some(staging.as_path()));
            file.write(b"new").unwrap();
            file.commit().unwrap();
            assert_eq!(std::fs::read_to_string(&target).unwrap(), "new");
            assert_eq!(std::fs::read_dir(&staging).unwrap().count(), 0);
            assert_eq!(std::fs::read_dir(&work).unwrap().count(), 1);
            std::fs::write(&target, "old").unwrap();
        }
        // A failed rename is worded as Pebble words it, with the name beside the target, and
        // leaves nothing in the staging directory.
        let dir = work.join("dir");
        std::fs::create_dir(&dir).unwrap();
        let mut file =
            AtomicFile::create_in(&dir, 0o644, Durability::Process, Some(&staging)).unwrap();
        file.write(b"new").unwrap();
        let err = file.commit().unwrap_err().to_string();
        let prefix = format!("rename {}.", dir.display());
        let suffix = format!("~ {}: file exists", dir.display());
        assert!(err.starts_with(&prefix) && err.ends_with(&suffix), "{err}");
        assert_eq!(std::fs::read_dir(&staging).unwrap().count(), 0);
        // A staging directory elsewhere, or none, leaves the file beside its target.
        let file = AtomicFile::create_in(
            &target,
            0o644,
            Durability::Process,
            Some(Path::new("/nonexistent")),
        )
        .unwrap();
        assert_eq!(file.temp_path().parent(), Some(work.as_path()));
    }
}
