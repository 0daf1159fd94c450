//! [`FileError`]: file system failures worded like Go's errors, with Pebble's error kinds.

use std::io;

use cobble_sys::os_error_text;

/// The `kind` of a per-path error, as clients see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ErrorKind {
    /// The path (or a parent) does not exist: `not-found`, HTTP 404 when listing.
    NotFound,
    /// EACCES or EPERM: `permission-denied`, HTTP 403 when listing.
    PermissionDenied,
    /// Anything else: `generic-file-error`, HTTP 400 when listing.
    Generic,
}

impl ErrorKind {
    /// The wire name of the kind.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ErrorKind::NotFound => "not-found",
            ErrorKind::PermissionDenied => "permission-denied",
            ErrorKind::Generic => "generic-file-error",
        }
    }
}

/// A failed file operation. `Display` is the message clients see.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FileError {
    /// Go's `*fs.PathError`: `<op> <path>: <errno text>`.
    #[error("{op} {path}: {}", os_error_text(source))]
    Path {
        /// The system call or Go function that failed (`open`, `stat`, `mkdir`, ...).
        op: &'static str,
        /// The path it was given.
        path: String,
        /// The underlying error.
        source: io::Error,
    },
    /// Go's `*os.LinkError` for a rename: `rename <old> <new>: <errno text>`.
    #[error("rename {old} {new}: {}", os_error_text(source))]
    Rename {
        /// The temporary name.
        old: String,
        /// The target.
        new: String,
        /// The underlying error.
        source: io::Error,
    },
    /// An error wrapped with context (Go's `fmt.Errorf("...: %w")`); the kind is the inner one.
    #[error("{context}: {source}")]
    Context {
        /// What was being done, such as `cannot create directory`.
        context: &'static str,
        /// What went wrong.
        source: Box<FileError>,
    },
    /// A failure with no errno behind it (validation, a broken request body).
    #[error("{0}")]
    Generic(String),
    /// The request body ended (or broke) before a file's content did.
    #[error("unexpected EOF")]
    Interrupted,
}

impl FileError {
    /// A [`FileError::Path`].
    pub(crate) fn path(op: &'static str, path: impl Into<String>, source: io::Error) -> FileError {
        FileError::Path {
            op,
            path: path.into(),
            source,
        }
    }

    /// Wraps `self` with `context`, keeping its kind.
    pub(crate) fn context(self, context: &'static str) -> FileError {
        FileError::Context {
            context,
            source: Box::new(self),
        }
    }

    /// The kind clients see, decided like Go's `errors.Is(err, os.ErrNotExist)` and
    /// `errors.Is(err, os.ErrPermission)`.
    pub(crate) fn kind(&self) -> ErrorKind {
        match self {
            FileError::Path { source, .. } | FileError::Rename { source, .. } => {
                match source.kind() {
                    io::ErrorKind::NotFound => ErrorKind::NotFound,
                    io::ErrorKind::PermissionDenied => ErrorKind::PermissionDenied,
                    _ => ErrorKind::Generic,
                }
            }
            FileError::Context { source, .. } => source.kind(),
            FileError::Generic(_) | FileError::Interrupted => ErrorKind::Generic,
        }
    }
}

impl From<crate::atomic::AtomicError> for FileError {
    fn from(err: crate::atomic::AtomicError) -> FileError {
        use crate::atomic::AtomicError;
        match err {
            AtomicError::Path { op, path, source } => FileError::Path {
                op,
                path: path.display().to_string(),
                source,
            },
            AtomicError::Rename { old, new, source } => FileError::Rename {
                old: old.display().to_string(),
                new: new.display().to_string(),
                source,
            },
        }
    }
}

/// The message of an absolute-path check that failed.
pub(crate) fn not_absolute(path: &str) -> FileError {
    FileError::Generic(format!(
        "paths must be absolute, got {}",
        cobble_plan::go_quote(path)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errno(code: i32) -> io::Error {
        io::Error::from_raw_os_error(code)
    }

    #[test]
    fn path_errors_read_like_go() {
        let err = FileError::path("stat", "/x", errno(libc_enoent()));
        assert_eq!(err.to_string(), "stat /x: no such file or directory");
        assert_eq!(err.kind(), ErrorKind::NotFound);
    }

    #[test]
    fn kinds_follow_errno() {
        let eacces = FileError::path("open", "/x", errno(13));
        assert_eq!(eacces.kind(), ErrorKind::PermissionDenied);
        assert_eq!(eacces.to_string(), "open /x: permission denied");
        let eperm = FileError::path("chown", "/x", errno(1));
        assert_eq!(eperm.kind(), ErrorKind::PermissionDenied);
        let enotdir = FileError::path("open", "/f/x", errno(20));
        assert_eq!(enotdir.kind(), ErrorKind::Generic);
        assert_eq!(enotdir.to_string(), "open /f/x: not a directory");
        let enotempty = FileError::path("remove", "/d", errno(39));
        assert_eq!(enotempty.to_string(), "remove /d: directory not empty");
    }

    #[test]
    fn context_keeps_the_inner_kind() {
        let err = FileError::path("mkdir", "/a/b.mkdir-new", errno(libc_enoent()))
            .context("cannot create directory");
        assert_eq!(
            err.to_string(),
            "cannot create directory: mkdir /a/b.mkdir-new: no such file or directory"
        );
        assert_eq!(err.kind(), ErrorKind::NotFound);
    }

    #[test]
    fn rename_reads_like_a_go_link_error() {
        let err = FileError::Rename {
            old: "/d.1~".into(),
            new: "/d".into(),
            source: errno(21),
        };
        assert_eq!(err.to_string(), "rename /d.1~ /d: is a directory");
    }

    fn libc_enoent() -> i32 {
        2
    }
}
