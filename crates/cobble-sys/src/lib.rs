//! The one corner of cobble that talks to the kernel directly: child reaping,
//! process groups and signals, the user and group databases, and the pipe that
//! carries a service's output.
//!
//! # Theory of operation
//!
//! cobble runs as PID 1 of a container, or at least as the parent of every
//! workload in it. Two things follow, and both shape this crate.
//!
//! **Every exit is collected in one place.** [`reaper::start`] marks the process
//! a *child subreaper*, so grandchildren whose parents die are re-parented to
//! us instead of to the real init, and then runs a single loop that calls
//! `waitpid(-1, WNOHANG)` whenever `SIGCHLD` arrives. Because that loop reaps
//! *any* child, nobody else in the process may wait for children: not
//! `std::process::Child::wait`, not `Command::output`, not `tokio::process`
//! (each would either steal an exit from the loop or get `ECHILD`). Children are
//! spawned through [`reaper::spawn`], which registers the pid before the loop is
//! allowed to reap it and hands back a one-shot receiver for the exit status.
//! Exits nobody registered (orphans) are reaped and counted so they never
//! accumulate as zombies. This is the design of Pebble's `internals/reaper`.
//!
//! **Identity and signals follow Pebble's observable behaviour.** User and group
//! names are resolved by reading `/etc/passwd` and `/etc/group` directly, as a
//! cgo-less Go binary does, and the error texts match Go's and Pebble's
//! (`user: unknown user bob`, `must specify user, not just group`). Signal names
//! accepted by [`process::parse_signal`] are exactly those Pebble's
//! `/v1/signals` accepts.
//!
//! # Layout
//!
//! - [`reaper`]: the subreaper, the `SIGCHLD` loop and the pid registry.
//! - [`process`]: signalling processes and process groups, signal names, `/proc`.
//! - [`user`]: the passwd/group parser and Pebble's uid/gid normalisation.
//! - [`pipe`]: a service's output pipe (stdout and stderr merged) with an async read end,
//!   and the size, pending bytes and splicing of pipes.
//! - [`fs`]: file system calls std lacks (early writeback for long writes).
//! - [`inherit`]: what the commands the daemon runs inherit from it: every signal at its
//!   default, none blocked, the daemon's original descriptor limit.
//! - [`limits`]: resource limits of another process (`prlimit`), and what a process uses.
//! - [`math`]: the one function of the C maths library cobble calls, in Rust.
//! - [`nss`]: name lookups that a static build keeps to glibc's built-in sources.
//! - [`pty`]: pseudo-terminals and new sessions for exec.
//! - [`notify`]: the sd_notify socket's receiving end, with the kernel's word on the sender.
//! - [`terminal`]: the user's terminal for `cobble exec`: its size, and raw mode.
//! - [`vspawn`]: starting an exec command without copying the daemon's memory.
//! - [`reexec`]: re-executing the daemon in place: descriptors kept across `execve`, the
//!   handover document, `execve` itself.
//! - [`activation`]: systemd's socket activation: listening sockets, and the exec that
//!   passes them at descriptors 3 and on with the command's own pid in its environment.
//!
//! # Unsafe code
//!
//! This is the only cobble crate allowed `unsafe`; every block carries a
//! `// SAFETY:` comment (enforced by `clippy::undocumented_unsafe_blocks`).
//! The code that runs between `fork` and `exec` is in [`pty`] (`setsid` and
//! `ioctl(TIOCSCTTY)`), in [`inherit`] (signal dispositions, the mask, the descriptor
//! limit), in [`reaper::spawn_gated`]'s gate, and in [`vspawn`], whose child shares the
//! daemon's memory and so makes plain system calls only.

#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]
#![warn(missing_docs)]

pub mod activation;
pub mod fs;
pub mod inherit;
pub mod limits;
pub mod math;
pub mod memory;
pub mod notify;
pub mod nss;
pub mod pipe;
pub mod process;
pub mod pty;
pub mod reaper;
pub mod reexec;
pub mod terminal;
pub mod user;
pub mod vspawn;

use std::io;
use std::path::PathBuf;

/// Errors from this crate. Messages are lowercase and, where a client can see
/// them, worded as Pebble (or the Go standard library under it) words them.
#[derive(Debug, thiserror::Error)]
pub enum SysError {
    /// No passwd entry has this name (Go's `user.UnknownUserError`).
    #[error("user: unknown user {0}")]
    UnknownUser(String),
    /// No passwd entry has this uid (Go's `user.UnknownUserIdError`).
    #[error("user: unknown userid {0}")]
    UnknownUserId(u32),
    /// No group entry has this name (Go's `user.UnknownGroupError`).
    #[error("group: unknown group {0}")]
    UnknownGroup(String),
    /// No group entry has this gid (Go's `user.UnknownGroupIdError`).
    #[error("group: unknown groupid {0}")]
    UnknownGroupId(u32),
    /// Both `user` and `user-id` were given and they disagree.
    #[error("user {name:?} UID ({actual}) does not match user-id ({given})")]
    UserIdMismatch {
        /// The `user` name from the plan.
        name: String,
        /// The uid the passwd file gives that name.
        actual: u32,
        /// The `user-id` from the plan.
        given: u32,
    },
    /// Both `group` and `group-id` were given and they disagree.
    #[error("group {name:?} GID ({actual}) does not match group-id ({given})")]
    GroupIdMismatch {
        /// The `group` name from the plan.
        name: String,
        /// The gid the group file gives that name.
        actual: u32,
        /// The `group-id` from the plan.
        given: u32,
    },
    /// A group (name or id) was given without any user.
    #[error("must specify user, not just group")]
    GroupWithoutUser,
    /// Not one of the names Pebble's `/v1/signals` accepts.
    #[error("invalid signal name {0:?}")]
    InvalidSignal(String),
    /// Reading a system file failed for a reason other than its absence.
    /// Displayed like Go's `*fs.PathError`: `open /etc/passwd: permission denied`.
    #[error("{op} {}: {}", path.display(), os_error_text(source))]
    Io {
        /// What was being done (`open`, `read`).
        op: &'static str,
        /// The file involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
}

/// The real uid of the daemon process.
pub fn current_uid() -> u32 {
    nix::unistd::getuid().as_raw()
}

/// The real gid of the daemon process.
pub fn current_gid() -> u32 {
    nix::unistd::getgid().as_raw()
}

/// The effective uid of the daemon process (what access checks use).
pub fn current_euid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

/// Formats an error the way Go formats a `syscall.Errno`: the C library's
/// message with its first letter lowercased (`no such file or directory`).
/// Errors that carry no OS error code are formatted with `Display`.
///
/// Pebble's messages embed errno text (`cannot start service: fork/exec
/// /bin/x: no such file or directory`), and Rust's `Display` for OS errors adds
/// a capital letter and an `(os error 2)` suffix that clients don't expect.
pub fn os_error_text(err: &io::Error) -> String {
    let Some(code) = err.raw_os_error() else {
        return err.to_string();
    };
    let desc = nix::errno::Errno::from_raw(code).desc();
    let mut chars = desc.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => format!("errno {code}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn os_error_text_matches_go_errno_strings() {
        let cases = [
            (libc::ENOENT, "no such file or directory"),
            (libc::EACCES, "permission denied"),
            (libc::ESRCH, "no such process"),
            (libc::ENOEXEC, "exec format error"),
        ];
        for (code, want) in cases {
            assert_eq!(os_error_text(&io::Error::from_raw_os_error(code)), want);
        }
        assert_eq!(os_error_text(&io::Error::other("plain")), "plain");
    }

    #[test]
    fn io_error_displays_like_go_path_error() {
        let err = SysError::Io {
            op: "open",
            path: "/etc/passwd".into(),
            source: io::Error::from_raw_os_error(libc::EACCES),
        };
        assert_eq!(err.to_string(), "open /etc/passwd: permission denied");
    }
}
