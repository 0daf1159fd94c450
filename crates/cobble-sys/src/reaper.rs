//! The child reaper: one loop that collects every exit in the process.
//!
//! # Theory of operation
//!
//! [`start`] sets `PR_SET_CHILD_SUBREAPER`, so descendants orphaned by their
//! parents (a service's `sh -c 'daemon &'`, a crashed supervisor inside a
//! workload) are re-parented to us rather than to the container's init. Then it
//! runs a `SIGCHLD` listener that, on every signal, calls `wait4(-1, WNOHANG)`
//! until the kernel has nothing left to report. Signals coalesce (ten exits may
//! raise one `SIGCHLD`), so a single signal always means "drain everything",
//! and the loop drains once right after installing the listener so that exits
//! from before it existed are not lost.
//!
//! Each reaped pid is looked up in a registry of `pid -> oneshot::Sender`. A
//! hit delivers the [`ExitStatus`] to whoever [`spawn`]ed it; a miss is an
//! orphan, reaped so it does not linger as a zombie, and counted
//! ([`orphans_reaped`]).
//!
//! # Races this design closes
//!
//! - **Fast exit before registration.** [`spawn`] holds the registry lock
//!   across `Command::spawn` *and* the insert, and the loop holds the same lock
//!   around each `wait4`. A child that exits in the first microsecond stays a
//!   zombie until it is registered, and is then reported normally.
//! - **Exec failure inside `Command::spawn`.** When `exec` fails, std (or
//!   glibc's `posix_spawn`) waits for the failed child itself and panics if
//!   that wait returns `ECHILD`. Because the loop cannot call `wait4` while
//!   a spawn holds the lock, it can never steal that child.
//! - **Real-time signals.** `nix::sys::wait::waitpid` reaps a child killed by
//!   e.g. `SIGRTMIN+6` and *then* fails to convert the signal number, losing the
//!   pid. The loop calls `libc::wait4` and decodes the status itself, so
//!   [`ExitStatus::Signaled`] holds a plain signal number.
//!
//! # Where the loop runs
//!
//! The listener is a tokio task on a small current-thread runtime owned by a
//! dedicated `cobble-reaper` thread, not a task on the caller's runtime. The
//! reaper is process-wide, so it must outlive any one runtime: under
//! `cargo test` every `#[tokio::test]` has its own runtime, and a loop spawned
//! on the first test's runtime would die with it. The exit receivers are
//! runtime-agnostic, so callers on any runtime can await them. [`start`] may
//! therefore be called from anywhere, runtime or not.
//!
//! # Rules for the rest of the process
//!
//! Once the reaper runs, *all* children must be started with [`spawn`]. Do not
//! call `Child::wait`, `Command::status`/`output`, or use `tokio::process`:
//! they would get `ECHILD`, or steal an exit from the loop.

use std::collections::BTreeMap;
use std::io;
use std::process::{ChildStderr, ChildStdin, ChildStdout, Command};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError, mpsc};

use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::oneshot;
use tracing::{debug, warn};

/// How a child ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ExitStatus {
    /// It called `exit` (or returned from `main`) with this code (0..=255).
    Exited(i32),
    /// It was killed by this signal number (which may be a real-time signal
    /// that `nix::sys::signal::Signal` cannot represent).
    Signaled(i32),
}

impl ExitStatus {
    /// The code Pebble reports (`exited quickly with code N`): the exit code,
    /// or `128 + signal` for a signal death, as a shell reports it and as
    /// Pebble's `reapOnce` computes it.
    pub fn code(&self) -> i32 {
        match *self {
            ExitStatus::Exited(code) => code,
            ExitStatus::Signaled(signal) => 128 + signal,
        }
    }

    /// True only for a normal exit with code 0. Pebble decides between
    /// `on-success` and `on-failure` on `code() == 0`, which is the same thing.
    pub fn success(&self) -> bool {
        *self == ExitStatus::Exited(0)
    }

    /// The signal that killed the child, if one did.
    pub fn signal(&self) -> Option<i32> {
        match *self {
            ExitStatus::Exited(_) => None,
            ExitStatus::Signaled(signal) => Some(signal),
        }
    }

    /// Decodes a raw `waitpid` status. `None` for stop/continue reports, which
    /// the loop never asks for but handles anyway.
    fn from_wait_status(raw: libc::c_int) -> Option<Self> {
        if libc::WIFEXITED(raw) {
            Some(ExitStatus::Exited(libc::WEXITSTATUS(raw)))
        } else if libc::WIFSIGNALED(raw) {
            Some(ExitStatus::Signaled(libc::WTERMSIG(raw)))
        } else {
            None
        }
    }
}

/// A child started by [`spawn`].
///
/// Dropping it does not kill or detach anything: the child keeps running and
/// is still reaped when it exits; its status is then simply discarded.
#[derive(Debug)]
#[must_use = "the exit receiver is the only way to learn how the child ended"]
pub struct Spawned {
    /// The child's pid. If the caller set `process_group(0)`, this is also the
    /// child's process group id.
    pub pid: u32,
    /// Resolves exactly once, with the child's exit status, after the reaper
    /// has collected it. It yields `RecvError` only if the reaper lost track of
    /// the pid (something else in the process waited for it, which the rules
    /// above forbid); treat that as "exited, status unknown".
    pub exit: oneshot::Receiver<ExitStatus>,
    /// The write end of the child's stdin, if the command asked for
    /// `Stdio::piped()`. Blocking; wrap with
    /// `tokio::net::unix::pipe::Sender::from_owned_fd` for async use.
    pub stdin: Option<ChildStdin>,
    /// The read end of the child's stdout, if piped. Blocking, as above.
    pub stdout: Option<ChildStdout>,
    /// The read end of the child's stderr, if piped. Blocking, as above.
    pub stderr: Option<ChildStderr>,
}

/// Processes started by [`spawn`] that have not been reaped yet, each with the
/// sender that will carry its exit status.
static REGISTRY: Mutex<BTreeMap<libc::pid_t, oneshot::Sender<ExitStatus>>> =
    Mutex::new(BTreeMap::new());

/// Whether [`start`] has completed; also serialises concurrent first calls.
static STARTED: Mutex<bool> = Mutex::new(false);

/// The CPU time of children whose spawner asked for it ([`keep_cpu_time`]): `None` until the
/// child is reaped, then what `wait4` reported for it and its waited-for descendants.
static CPU_TIMES: Mutex<BTreeMap<libc::pid_t, Option<std::time::Duration>>> =
    Mutex::new(BTreeMap::new());

/// Asks the reaper to keep the CPU time (user + system) that `pid`, a child started with
/// [`spawn`], used with the children it waited for, once it is reaped; [`take_cpu_time`]
/// collects it. Call before the child can exit (in a gated spawn's `before_exec`).
pub fn keep_cpu_time(pid: u32) {
    if let Ok(raw) = libc::pid_t::try_from(pid) {
        lock(&CPU_TIMES).insert(raw, None);
    }
}

/// The CPU time kept for `pid` since [`keep_cpu_time`], once it has been reaped, and then
/// forgotten; `None` before (the request stays) or when nobody asked.
pub fn take_cpu_time(pid: u32) -> Option<std::time::Duration> {
    let raw = libc::pid_t::try_from(pid).ok()?;
    let mut times = lock(&CPU_TIMES);
    let time = (*times.get(&raw)?)?;
    times.remove(&raw);
    Some(time)
}

/// Forgets a request of [`keep_cpu_time`] for a child that will not be asked about again.
pub fn forget_cpu_time(pid: u32) {
    if let Ok(raw) = libc::pid_t::try_from(pid) {
        lock(&CPU_TIMES).remove(&raw);
    }
}

/// Exits reaped that no [`spawn`] had registered.
static ORPHANS_REAPED: AtomicU64 = AtomicU64::new(0);

/// The registry's state is a plain map that a panic cannot leave half-updated,
/// so a poisoned lock is safe to keep using (and the reaper must keep going).
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Starts the process-wide reaper: marks this process a child subreaper and
/// starts the `SIGCHLD` loop on its own thread. Returns once the `SIGCHLD`
/// listener is installed.
///
/// Idempotent: later calls return `Ok(())` immediately. A failed call leaves
/// nothing started and may be retried. Needs no tokio runtime (see the module
/// docs for why the loop has its own).
pub fn start() -> io::Result<()> {
    let mut started = lock(&STARTED);
    if *started {
        return Ok(());
    }

    nix::sys::prctl::set_child_subreaper(true).map_err(|errno| {
        let err = io::Error::from(errno);
        io::Error::new(
            err.kind(),
            format!("cannot set child subreaper: {}", crate::os_error_text(&err)),
        )
    })?;

    let (ready_tx, ready_rx) = mpsc::sync_channel(1);
    std::thread::Builder::new()
        .name("cobble-reaper".into())
        .spawn(move || run(ready_tx))?;
    ready_rx
        .recv()
        .map_err(|_| io::Error::other("reaper thread exited during startup"))??;

    *started = true;
    Ok(())
}

/// Spawns `cmd` and registers its pid with the reaper, under the registry lock
/// so that not even an instant exit can be reaped before registration.
///
/// Starts the reaper first if nobody has (a child spawned without it would
/// never be reported). The command is spawned exactly as configured: callers
/// set the process group, credentials and stdio themselves.
///
/// Keep the lock short: this holds the reaper's lock for the duration of
/// `fork`+`exec`, during which no exits are collected.
///
/// Note that `Command` keeps the `Stdio` values it was given; drop `cmd` after
/// spawning if it holds the write end of a pipe you read until EOF (see
/// [`crate::pipe::merged_pipe`]).
pub fn spawn(cmd: &mut Command) -> io::Result<Spawned> {
    start()?;

    let (tx, rx) = oneshot::channel();
    let mut registry = lock(&REGISTRY);
    let mut child = cmd.spawn()?;
    let pid = child.id();
    let raw_pid = libc::pid_t::try_from(pid).expect("the kernel's pids fit in pid_t");
    if registry.insert(raw_pid, tx).is_some() {
        // The previous owner of this pid was never reaped by us, so someone
        // else waited for it. Its waiter now sees RecvError.
        warn!(pid, "new pid observed while still being tracked");
    }
    drop(registry);

    // std's Child does not wait or kill on drop; we keep only its pipes.
    Ok(Spawned {
        pid,
        exit: rx,
        stdin: child.stdin.take(),
        stdout: child.stdout.take(),
        stderr: child.stderr.take(),
    })
}

/// Registers `pid`, a child this process had before it re-executed itself (`execve` keeps
/// its children, and their exits wait for it as zombies), so that its exit is reported as a
/// [`spawn`]ed child's is. Call before [`start`]: its first drain then reports a child that
/// exited during the swap.
pub fn adopt(pid: u32) -> oneshot::Receiver<ExitStatus> {
    let (tx, rx) = oneshot::channel();
    if let Ok(raw) = libc::pid_t::try_from(pid) {
        lock(&REGISTRY).insert(raw, tx);
    }
    rx
}

/// Starts a child with `launch` (which returns its pid once it has exec'd or exited) and
/// registers it, under the registry lock as [`spawn`] does, for spawners other than
/// `Command` (see [`crate::vspawn`]).
pub(crate) fn spawn_registered(
    launch: impl FnOnce() -> io::Result<u32>,
) -> io::Result<(u32, oneshot::Receiver<ExitStatus>)> {
    start()?;
    let (tx, rx) = oneshot::channel();
    let mut registry = lock(&REGISTRY);
    let pid = launch()?;
    let raw_pid = libc::pid_t::try_from(pid).expect("the kernel's pids fit in pid_t");
    if registry.insert(raw_pid, tx).is_some() {
        warn!(pid, "new pid observed while still being tracked");
    }
    Ok((pid, rx))
}

/// Like [`spawn`], but the child does not exec until `before_exec` has run with its pid.
///
/// This closes the window between fork and "the daemon has written the pid down": a
/// supervisor that records its children in a file (so that its successor can find them after
/// a SIGKILL) records the pid in `before_exec`, and the command only starts once the record
/// exists. If the caller dies before `before_exec` returns, the child sees end of file on its
/// gate and exits without ever running the command.
///
/// The child reports its pid on one pipe and waits on another in a `pre_exec` hook (two
/// `write`/`read` calls, `close`s and `sigaction`s, all async-signal-safe); `before_exec` runs on a
/// helper thread because `Command::spawn` itself only returns once the child has exec'd. Only
/// one child is ever between fork and exec (spawns hold the registry lock), so no other child
/// can hold a copy of the gate's write end.
pub fn spawn_gated<F>(cmd: &mut Command, before_exec: F) -> io::Result<Spawned>
where
    F: FnOnce(u32) -> io::Result<()> + Send,
{
    spawn_gated_then(cmd, AfterGate::default(), before_exec)
}

/// What a gated child does once its gate has opened, just before it execs: what has to wait
/// until `before_exec` has acted on the child while it still runs as the daemon's user (a
/// process of another user's limits can be set only with `CAP_SYS_RESOURCE`, which a
/// container seldom has). Leave the command's own `uid`, `gid` and `current_dir` unset when
/// these are given: they would apply before the gate.
#[derive(Debug, Default)]
pub struct AfterGate {
    /// The uid and gid to switch to (supplementary groups dropped when the child is root,
    /// as `Command::uid` drops them).
    pub ids: Option<(u32, u32)>,
    /// Then the directory to change to.
    pub working_dir: Option<std::ffi::CString>,
    /// Then the child execs this image itself, instead of the command's program: for a
    /// command that is passed descriptors or its own pid (see [`crate::activation`]).
    pub exec: Option<crate::activation::ExecImage>,
}

/// [`spawn_gated`], with `after` done by the child once its gate has opened.
pub fn spawn_gated_then<F>(
    cmd: &mut Command,
    after: AfterGate,
    before_exec: F,
) -> io::Result<Spawned>
where
    F: FnOnce(u32) -> io::Result<()> + Send,
{
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;

    let mut after = after;
    start()?;
    let (pid_read, pid_write) = io::pipe()?;
    let (gate_read, gate_write) = io::pipe()?;
    let pid_fd = pid_write.as_raw_fd();
    let gate_read_fd = gate_read.as_raw_fd();
    let gate_write_fd = gate_write.as_raw_fd();
    // SAFETY: the hook runs in the child between fork and exec, where only
    // async-signal-safe calls are allowed: close(2), getpid(2), sigaction(2),
    // pthread_sigmask(3), setrlimit(2), write(2), read(2), setgid(2), setgroups(2), setuid(2),
    // chdir(2), and the fcntl(2), dup2(2), getpid(2) and execve(2) of an `ExecImage` are (SIGRTMAX reads a constant in glibc and musl; the child has one thread,
    // so glibc's set*id broadcast to other threads has no one to reach);
    // nothing allocates or takes a lock (an io::Error from a raw code does not allocate).
    // The fds are the child's inherited copies of pipes the parent keeps open until
    // `Command::spawn` returns.
    unsafe {
        cmd.pre_exec(move || {
            // The child's own copy of the write end would keep its gate open forever.
            libc::close(gate_write_fd);
            // Until exec the child has the daemon's signal handlers, which would swallow
            // a SIGTERM from a daemon ending it as a leftover; and exec would keep the
            // signals the daemon inherited as ignored: every signal to its default, none
            // blocked, the original descriptor limit (see `crate::inherit`).
            crate::inherit::reset_in_child();
            let pid = libc::getpid().to_ne_bytes();
            if libc::write(pid_fd, pid.as_ptr().cast(), pid.len()) != pid.len() as isize {
                return Err(io::Error::last_os_error());
            }
            libc::close(pid_fd);
            let mut byte = 0u8;
            loop {
                let n = libc::read(gate_read_fd, (&raw mut byte).cast(), 1);
                if n == 1 {
                    libc::close(gate_read_fd);
                    if let Some((uid, gid)) = after.ids {
                        if libc::setgid(gid) == -1 {
                            return Err(io::Error::last_os_error());
                        }
                        if libc::getuid() == 0 && libc::setgroups(0, std::ptr::null()) == -1 {
                            return Err(io::Error::last_os_error());
                        }
                        if libc::setuid(uid) == -1 {
                            return Err(io::Error::last_os_error());
                        }
                    }
                    if let Some(dir) = &after.working_dir
                        && libc::chdir(dir.as_ptr()) == -1
                    {
                        return Err(io::Error::last_os_error());
                    }
                    if let Some(image) = &mut after.exec {
                        // Returns only if the exec failed.
                        return Err(image.exec_in_child());
                    }
                    return Ok(());
                }
                if n == -1 && io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                // The parent is gone (or gave up) before recording us: never run.
                return Err(io::Error::from_raw_os_error(libc::ECANCELED));
            }
        });
    }
    std::thread::scope(|scope| {
        let gate = scope.spawn(move || keep_gate(pid_read, gate_write, before_exec));
        let spawned = spawn(cmd);
        // Whether or not the child reported: the helper must see end of file now.
        drop(pid_write);
        drop(gate_read);
        let refused = gate.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
        // The child gave up at its closed gate: what `before_exec` said is why.
        match refused {
            Err(error) => Err(error),
            Ok(()) => spawned,
        }
    })
}

/// The parent's side of a gated spawn, on a thread of its own while the child starts: waits
/// for the pid the child writes to `pid_read`, hands it to `before_exec`, then opens the gate
/// the child waits at. At end of file (the child died, or was never started), or when
/// `before_exec` fails, the gate closes unopened, and a child still waiting at it exits
/// without running; the failure is returned.
pub(crate) fn keep_gate(
    mut pid_read: io::PipeReader,
    gate_write: io::PipeWriter,
    before_exec: impl FnOnce(u32) -> io::Result<()>,
) -> io::Result<()> {
    use std::io::{Read, Write};
    let mut pid = [0u8; 4];
    if pid_read.read_exact(&mut pid).is_ok() {
        before_exec(u32::from_ne_bytes(pid))?;
        let _ = (&gate_write).write_all(&[1]);
    }
    Ok(())
}

/// Leaves out of `pids` every child started with [`spawn`] that has not been reaped yet.
///
/// Such a pid still names the process [`spawn`] started: the kernel gives a pid to no other
/// process until its owner has been waited for, and only the reaper waits. So a caller that
/// looks for orphans among its children can skip these without reading `/proc`. List the
/// children first and call this after, so that a pid left out was this process's own child
/// all along (or died and was reused for a newer one).
pub fn without_awaited(mut pids: Vec<u32>) -> Vec<u32> {
    let registry = lock(&REGISTRY);
    pids.retain(|&pid| libc::pid_t::try_from(pid).map_or(true, |raw| !registry.contains_key(&raw)));
    pids
}

/// How many exited processes the reaper has collected that [`spawn`] had not
/// registered (orphans re-parented to us, or children started by other means).
pub fn orphans_reaped() -> u64 {
    ORPHANS_REAPED.load(Ordering::Relaxed)
}

/// The reaper thread: a current-thread runtime whose only task is the loop.
fn run(ready: mpsc::SyncSender<io::Result<()>>) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            let _ = ready.send(Err(err));
            return;
        }
    };
    runtime.block_on(async move {
        let mut sigchld = match signal(SignalKind::child()) {
            Ok(stream) => stream,
            Err(err) => {
                let _ = ready.send(Err(err));
                return;
            }
        };
        let _ = ready.send(Ok(()));
        debug!("reaper started, waiting for SIGCHLD");
        loop {
            // Drain before the first wait: children that exited before the
            // listener existed raised a SIGCHLD that nobody saw.
            reap_pending();
            if sigchld.recv().await.is_none() {
                warn!("reaper stopped: SIGCHLD stream ended");
                return;
            }
        }
    });
}

/// Reaps every child that has exited, delivering each status to its waiter.
/// Returns when `wait4` reports nothing left (0) or no children (`ECHILD`).
fn reap_pending() {
    loop {
        // Held around wait4 so a spawn in progress (which holds it) cannot
        // lose its child to us before registering it.
        let mut registry = lock(&REGISTRY);
        let mut raw_status: libc::c_int = 0;
        // SAFETY: an all-zero rusage is a valid value of the plain C struct.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: wait4 has no memory-safety preconditions beyond valid pointers
        // for the status and the usage, which point at live locals; WNOHANG keeps
        // it from blocking while we hold the lock.
        let pid = unsafe { libc::wait4(-1, &mut raw_status, libc::WNOHANG, &mut usage) };
        if pid == 0 {
            return;
        }
        if pid < 0 {
            let err = io::Error::last_os_error();
            match err.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::ECHILD) => return,
                _ => {
                    warn!("cannot wait for child process: {err}");
                    return;
                }
            }
        }
        let Some(status) = ExitStatus::from_wait_status(raw_status) else {
            continue;
        };
        let waiter = registry.remove(&pid);
        drop(registry);
        if let Some(kept) = lock(&CPU_TIMES).get_mut(&pid) {
            let time = |t: libc::timeval| {
                std::time::Duration::new(
                    u64::try_from(t.tv_sec).unwrap_or(0),
                    u32::try_from(t.tv_usec).unwrap_or(0) * 1000,
                )
            };
            *kept = Some(time(usage.ru_utime) + time(usage.ru_stime));
        }

        match waiter {
            Some(waiter) => {
                debug!(pid, code = status.code(), "reaped child");
                // The receiver may be gone (the caller stopped caring).
                let _ = waiter.send(status);
            }
            None => {
                ORPHANS_REAPED.fetch_add(1, Ordering::Relaxed);
                debug!(pid, code = status.code(), "reaped orphan");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gated_child_runs_only_after_before_exec() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("ran");
        let mut cmd = Command::new("/bin/sh");
        cmd.arg("-c").arg(format!("echo > {}", marker.display()));
        let me = std::fs::read_link("/proc/self/exe").unwrap();
        let mut seen = None;
        let spawned = spawn_gated(&mut cmd, |pid| {
            // Still a fork of this process: the command has not started.
            seen = Some((pid, std::fs::read_link(format!("/proc/{pid}/exe")).ok()));
            Ok(())
        })
        .unwrap();
        let (pid, exe) = seen.expect("before_exec ran");
        assert_eq!(pid, spawned.pid);
        assert_eq!(exe.as_deref(), Some(me.as_path()));
        let status = spawned.exit.blocking_recv().unwrap();
        assert!(status.success());
        assert!(marker.exists());
    }

    #[test]
    fn a_failed_before_exec_keeps_the_command_from_running_and_says_why() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("ran");
        let mut cmd = Command::new("/bin/sh");
        cmd.arg("-c").arg(format!("echo > {}", marker.display()));
        let error =
            spawn_gated(&mut cmd, |_| Err(io::Error::from_raw_os_error(libc::EPERM))).unwrap_err();
        assert_eq!(error.raw_os_error(), Some(libc::EPERM));
        assert!(!marker.exists());
    }

    #[test]
    fn the_cpu_time_of_a_child_is_kept_when_asked_for() {
        // A shell that burns CPU in a child it waits for: the time counts as the shell's.
        let mut cmd = Command::new("/bin/sh");
        cmd.arg("-c")
            .arg("sh -c 'i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done'");
        let spawned = spawn_gated(&mut cmd, |pid| {
            keep_cpu_time(pid);
            Ok(())
        })
        .unwrap();
        assert_eq!(take_cpu_time(spawned.pid), None, "not reaped yet");
        let pid = spawned.pid;
        spawned.exit.blocking_recv().unwrap();
        let time = take_cpu_time(pid).expect("kept at reaping");
        assert!(time > std::time::Duration::ZERO, "{time:?}");
        assert_eq!(take_cpu_time(pid), None, "taken once");
    }

    #[test]
    fn a_child_is_awaited_until_reaped() {
        let mut cmd = Command::new("cat");
        cmd.stdin(std::process::Stdio::piped());
        let mut spawned = spawn(&mut cmd).unwrap();
        let other = spawned.pid + 1_000_000;
        assert_eq!(without_awaited(vec![spawned.pid, other]), vec![other]);
        // End of input: cat exits, and its pid is no longer vouched for once reaped.
        drop(spawned.stdin.take());
        let status = spawned.exit.blocking_recv().unwrap();
        assert!(status.success());
        assert_eq!(
            without_awaited(vec![spawned.pid, other]),
            vec![spawned.pid, other]
        );
    }

    #[test]
    fn code_is_exit_code_or_128_plus_signal() {
        assert_eq!(ExitStatus::Exited(3).code(), 3);
        assert_eq!(ExitStatus::Signaled(9).code(), 137);
        assert_eq!(ExitStatus::Signaled(15).code(), 143);
        assert!(ExitStatus::Exited(0).success());
        assert!(!ExitStatus::Exited(1).success());
        assert!(!ExitStatus::Signaled(0).success());
        assert_eq!(ExitStatus::Signaled(40).signal(), Some(40));
        assert_eq!(ExitStatus::Exited(0).signal(), None);
    }

    #[test]
    fn decodes_raw_wait_statuses() {
        // Linux encoding: exit code in bits 8..16, terminating signal in 0..7,
        // 0x80 the core-dump flag, 0x7f in the low byte means stopped.
        assert_eq!(
            ExitStatus::from_wait_status(3 << 8),
            Some(ExitStatus::Exited(3))
        );
        assert_eq!(
            ExitStatus::from_wait_status(9),
            Some(ExitStatus::Signaled(9))
        );
        assert_eq!(
            ExitStatus::from_wait_status(0x80 | 11),
            Some(ExitStatus::Signaled(11))
        );
        assert_eq!(
            ExitStatus::from_wait_status(40),
            Some(ExitStatus::Signaled(40))
        );
        assert_eq!(ExitStatus::from_wait_status((19 << 8) | 0x7f), None);
    }
}
