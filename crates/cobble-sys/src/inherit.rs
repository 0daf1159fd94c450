//! What the daemon's own start leaves to the commands it runs, and what it must not.
//!
//! # Theory of operation
//!
//! A process inherits from whoever started it more than its environment: signals it was
//! told to ignore, a signal mask, resource limits. The daemon is started by all sorts of
//! things (a container runtime, systemd, `nohup`, a shell script that traps `HUP`), and its
//! services should not depend on which. So, as systemd does for its units, every command
//! the daemon runs (services, exec checks, exec requests) starts with:
//!
//! - **every signal at its default disposition.** `exec` resets caught signals but keeps
//!   ignored ones: a daemon started under `nohup` would pass `SIGHUP` ignored to every
//!   service, and a shell service can then not even `trap` it (POSIX: a signal ignored on
//!   entry to a non-interactive shell cannot be trapped), so `on-file-change: SIGHUP` or
//!   `cobble signal HUP` would silently do nothing;
//! - **an empty signal mask**, which `exec` keeps too;
//! - **the descriptor limit the daemon was started with.** The daemon raises its own soft
//!   `RLIMIT_NOFILE` to the hard limit ([`prepare_daemon`]): it holds a descriptor per
//!   connection, and a soft limit of 1024 (the usual default, kept low for programs that
//!   use `select`) is too few for a listener under load. Go's runtime does the same for
//!   every Go program since Go 1.19, Pebble included, and since Go 1.21 gives a child the
//!   original soft limit back; so does the daemon, so services see the limit they would
//!   see under Pebble.
//!
//! The daemon also clears its own signal mask when it starts: a daemon started with
//! `SIGTERM` or `SIGCHLD` blocked would never hear its stop signal or its children's exits.
//! (Go unblocks the signals a program asks to be told of; the daemon asks for those.)
//! Dispositions it leaves alone: it installs the handlers it needs.
//!
//! `reset_in_child` is what runs between `fork` (or `clone`) and `exec`, so it makes plain
//! system calls only and reads the saved limit from atomics.

use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Whether [`prepare_daemon`] raised the soft descriptor limit, and so children must get
/// [`ORIGINAL_NOFILE`] back.
static RAISED_NOFILE: AtomicBool = AtomicBool::new(false);
/// The soft and hard `RLIMIT_NOFILE` the daemon was started with.
static ORIGINAL_NOFILE: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];

/// What [`prepare_daemon`] did to the descriptor limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NofileLimit {
    /// The soft limit the daemon was started with.
    pub original: u64,
    /// The soft limit it runs with now.
    pub current: u64,
}

/// Prepares the daemon's own process before any thread starts: clears the signal mask of
/// the calling thread (threads started later inherit it) and raises the soft
/// `RLIMIT_NOFILE` to the hard limit, remembering the original for the daemon's children.
pub fn prepare_daemon() -> io::Result<NofileLimit> {
    use nix::sys::signal::{SigSet, SigmaskHow, pthread_sigmask};
    pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None)?;
    raise_nofile()
}

/// The stop signals (`SIGTERM`, `SIGINT`, `SIGQUIT`), which a re-executing daemon keeps
/// blocked across `execve` until its new program catches them: one that arrives meanwhile
/// waits, pending, instead of ending the process with its default action.
pub fn stop_signals() -> nix::sys::signal::SigSet {
    use nix::sys::signal::{SigSet, Signal};
    let mut set = SigSet::empty();
    for signal in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGQUIT] {
        set.add(signal);
    }
    set
}

/// [`prepare_daemon`] for a program a daemon re-executed into: the stop signals stay
/// blocked (see [`stop_signals`]) until [`unblock_stop_signals`], once the daemon catches
/// them.
pub fn prepare_reexecuted_daemon() -> io::Result<NofileLimit> {
    use nix::sys::signal::{SigmaskHow, pthread_sigmask};
    pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&stop_signals()), None)?;
    raise_nofile()
}

/// Unblocks the stop signals in the calling thread; one pending since the re-execution is
/// delivered now, to the handler the daemon has installed.
pub fn unblock_stop_signals() {
    use nix::sys::signal::{SigmaskHow, pthread_sigmask};
    let _ = pthread_sigmask(SigmaskHow::SIG_UNBLOCK, Some(&stop_signals()), None);
}

pub(crate) fn raise_nofile() -> io::Result<NofileLimit> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit(2) writes the struct it is given, which lives on this stack.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let (soft, hard) = (limit.rlim_cur, limit.rlim_max);
    if soft >= hard {
        return Ok(NofileLimit {
            original: soft,
            current: soft,
        });
    }
    let raised = libc::rlimit {
        rlim_cur: hard,
        rlim_max: hard,
    };
    // SAFETY: setrlimit(2) reads the struct it is given; raising the soft limit up to the
    // hard one is always allowed.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
        return Err(io::Error::last_os_error());
    }
    ORIGINAL_NOFILE[0].store(soft, Ordering::Relaxed);
    ORIGINAL_NOFILE[1].store(hard, Ordering::Relaxed);
    RAISED_NOFILE.store(true, Ordering::Release);
    Ok(NofileLimit {
        original: soft,
        current: hard,
    })
}

/// Makes `cmd` start as described in the module documentation: every signal at its default,
/// none blocked, the daemon's original descriptor limit. The hook makes std fork rather than
/// `posix_spawn`, which is what every spawn of a command with a user, group or session of
/// its own does anyway.
pub fn on_exec(cmd: &mut Command) {
    // SAFETY: the hook runs in the child between fork and exec and makes only
    // async-signal-safe system calls (see `reset_in_child`).
    unsafe {
        cmd.pre_exec(|| {
            reset_in_child();
            Ok(())
        });
    }
}

/// Every signal to its default disposition, an empty signal mask, the original descriptor
/// limit.
///
/// # Safety
///
/// Call only in a child between `fork` (or `clone`) and `exec`: it discards every signal
/// handler of the process (of the child's copy of the handler table, which a `clone`
/// without `CLONE_SIGHAND` has of its own), the C library's own included.
pub(crate) unsafe fn reset_in_child() {
    // SAFETY: as the caller guarantees.
    unsafe { reset_dispositions() };
    // SAFETY: sigemptyset and pthread_sigmask on a local set are async-signal-safe.
    unsafe {
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::pthread_sigmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
    }
    restore_nofile();
}

/// Every signal but `SIGKILL` and `SIGSTOP` (which cannot change) to `SIG_DFL`: caught ones,
/// which would run the daemon's handlers until exec, and ignored ones, which exec would keep.
///
/// The system call is made directly, not through the C library's `sigaction`, which
/// refuses to touch the two signals glibc keeps for itself (32 and 33). Those matter too:
/// glibc's `posix_spawn` leaves them ignored in every program it starts, so a daemon started
/// by such a program (any Rust or C program spawning it) has them ignored, and exec would
/// pass that on.
///
/// # Safety
///
/// As [`reset_in_child`]: the C library's handlers go too, so the process must exec (or
/// exit) without using what they serve (thread cancellation, `setuid` across threads).
pub(crate) unsafe fn reset_dispositions() {
    // The kernel's `struct sigaction` all zero: SIG_DFL, no flags, no restorer, an empty
    // mask, whatever the architecture's field order. 32 bytes cover every layout.
    let default = [0u64; 4];
    // The kernel's signal set size, in bytes.
    const SIGSET_BYTES: libc::c_long = 8;
    for sig in 1..=libc::SIGRTMAX() {
        if sig == libc::SIGKILL || sig == libc::SIGSTOP {
            continue;
        }
        // SAFETY: rt_sigaction(2) is a plain system call that reads the struct it is
        // given, which lives on this stack; SIGRTMAX reads a constant of the C library.
        unsafe {
            libc::syscall(
                libc::SYS_rt_sigaction,
                libc::c_long::from(sig),
                default.as_ptr(),
                std::ptr::null_mut::<libc::c_void>(),
                SIGSET_BYTES,
            );
        }
    }
}

/// Gives the process the soft descriptor limit the daemon was started with, if the daemon
/// raised its own.
pub(crate) fn restore_nofile() {
    if !RAISED_NOFILE.load(Ordering::Acquire) {
        return;
    }
    let limit = libc::rlimit {
        rlim_cur: ORIGINAL_NOFILE[0].load(Ordering::Relaxed),
        rlim_max: ORIGINAL_NOFILE[1].load(Ordering::Relaxed),
    };
    // SAFETY: setrlimit(2) on a local struct is a plain system call; lowering the soft limit
    // is always allowed.
    unsafe {
        libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
    }
}
