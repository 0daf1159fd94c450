//! Starting a command without copying the daemon: `clone(CLONE_VM | CLONE_VFORK)`.
//!
//! # Why
//!
//! `std::process::Command` forks whenever a `pre_exec` hook is set, and cobble sets one
//! for every exec request (a session of its own, and the gate that holds the command until
//! the daemon has recorded it). A fork copies the daemon's page tables, every page either
//! side then writes is copied once more, and the `execve` that follows throws the copy away:
//! together, about a fifth of the daemon's CPU time for an `exec true`, and the main cost of
//! a burst of execs. The child started here shares the daemon's memory instead (as
//! `posix_spawn` does) until it execs, and the calling thread waits meanwhile.
//!
//! # What the child does
//!
//! On a stack of its own, with every signal blocked (the daemon's handlers must not run in
//! it): stdin, stdout and stderr from the given descriptors, a new session if asked, every
//! signal back to its default disposition and the daemon's original descriptor limit (see
//! [`crate::inherit`]), the working directory, the user and group, then the gate (its pid out on one pipe, a byte
//! in on another, as [`crate::reaper::spawn_gated`]), an empty signal mask, and `execve`.
//! It calls nothing that allocates or takes a lock, and nothing that would act on the
//! daemon's other threads (glibc's `setuid` would change every thread's credentials, so the
//! identity is set by raw system calls). Should a step fail, it writes the `errno` to a pipe
//! that `execve` would have closed, and exits with 127.

use std::ffi::{CString, OsString};
use std::io::{self, Read};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use crate::reaper::{self, Spawned};

/// The child's stack: what `execve` and the calls before it need, with room to spare.
const STACK_SIZE: usize = 64 * 1024;

/// A command to start.
#[derive(Debug)]
pub struct Spawn {
    /// The executable, already looked up.
    pub program: PathBuf,
    /// Its arguments, `argv[0]` first.
    pub argv: Vec<OsString>,
    /// Its whole environment.
    pub environment: Vec<(OsString, OsString)>,
    /// The directory it runs in; the daemon's when `None`.
    pub working_dir: Option<PathBuf>,
    /// Its stdin, stdout and stderr (the same descriptor may appear twice).
    pub stdio: [OwnedFd; 3],
    /// The uid and gid it runs as (supplementary groups dropped when the daemon is root);
    /// the daemon's when `None`.
    pub ids: Option<(u32, u32)>,
    /// Whether the child takes `ids` only once its gate has opened, so that `before_exec`
    /// acts on it while it still runs as the daemon's user (see
    /// [`crate::reaper::AfterGate`]); otherwise before it reports its pid.
    pub ids_after_gate: bool,
    /// Whether it leads a session of its own.
    pub new_session: bool,
}

/// Everything the child reads, prepared by the parent as C data.
struct ChildArgs {
    program: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    working_dir: *const libc::c_char,
    stdio: [libc::c_int; 3],
    ids: Option<(libc::uid_t, libc::gid_t)>,
    ids_after_gate: bool,
    drop_groups: bool,
    new_session: bool,
    /// Where the child writes its pid.
    pid_fd: libc::c_int,
    /// Where the child reads the byte that lets it run.
    gate_read_fd: libc::c_int,
    /// The parent's end of the gate, which the child's copy of the descriptors must not hold.
    gate_write_fd: libc::c_int,
    /// Where the child reports a failure's `errno`; closed by a successful `execve`.
    error_fd: libc::c_int,
}

fn c_string(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "nul byte"))
}

/// Starts `spawn` but lets it exec only once `before_exec` has run with its pid, like
/// [`reaper::spawn_gated`], and registers it with the reaper. Blocks until the command has
/// exec'd (or failed to).
pub fn spawn_gated<F>(spawn: Spawn, before_exec: F) -> io::Result<Spawned>
where
    F: FnOnce(u32) -> io::Result<()> + Send,
{
    reaper::start()?;
    // dup2 onto 0, 1 and 2 must not overwrite a descriptor still to be duplicated.
    if spawn.stdio.iter().any(|fd| fd.as_raw_fd() <= 2) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "stdio descriptors must not be 0, 1 or 2",
        ));
    }
    let program = c_string(spawn.program.as_os_str().as_bytes())?;
    let argv: Vec<CString> = spawn
        .argv
        .iter()
        .map(|a| c_string(a.as_bytes()))
        .collect::<io::Result<_>>()?;
    let environment: Vec<CString> = spawn
        .environment
        .iter()
        .map(|(k, v)| {
            let mut entry = k.as_bytes().to_vec();
            entry.push(b'=');
            entry.extend_from_slice(v.as_bytes());
            c_string(&entry)
        })
        .collect::<io::Result<_>>()?;
    let working_dir = spawn
        .working_dir
        .as_ref()
        .map(|d| c_string(d.as_os_str().as_bytes()))
        .transpose()?;
    let argv_ptrs: Vec<*const libc::c_char> = argv
        .iter()
        .map(|a| a.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect();
    let env_ptrs: Vec<*const libc::c_char> = environment
        .iter()
        .map(|e| e.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect();

    let (pid_read, pid_write) = io::pipe()?;
    let (gate_read, gate_write) = io::pipe()?;
    let (mut error_read, error_write) = io::pipe()?;
    let args = ChildArgs {
        program: program.as_ptr(),
        argv: argv_ptrs.as_ptr(),
        envp: env_ptrs.as_ptr(),
        working_dir: working_dir
            .as_ref()
            .map_or(std::ptr::null(), |d| d.as_ptr()),
        stdio: [
            spawn.stdio[0].as_raw_fd(),
            spawn.stdio[1].as_raw_fd(),
            spawn.stdio[2].as_raw_fd(),
        ],
        ids: spawn
            .ids
            .map(|(uid, gid)| (uid as libc::uid_t, gid as libc::gid_t)),
        ids_after_gate: spawn.ids_after_gate,
        drop_groups: crate::current_uid() == 0,
        new_session: spawn.new_session,
        pid_fd: pid_write.as_raw_fd(),
        gate_read_fd: gate_read.as_raw_fd(),
        gate_write_fd: gate_write.as_raw_fd(),
        error_fd: error_write.as_raw_fd(),
    };

    std::thread::scope(|scope| {
        let gate = scope.spawn(move || reaper::keep_gate(pid_read, gate_write, before_exec));
        let started = reaper::spawn_registered(|| clone_vfork(&args));
        // Whether or not the child reported: the helper must see end of file now.
        drop(pid_write);
        drop(gate_read);
        drop(error_write);
        let refused = gate.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
        let (pid, exit) = started?;
        // The child gave up at its closed gate: what `before_exec` said is why.
        refused?;
        // The child has exec'd (the pipe closed with it) or exited after writing why.
        let mut errno = [0u8; 4];
        match error_read.read(&mut errno)? {
            0 => Ok(Spawned {
                pid,
                exit,
                stdin: None,
                stdout: None,
                stderr: None,
            }),
            _ => Err(io::Error::from_raw_os_error(i32::from_ne_bytes(errno))),
        }
    })
}

/// Starts the child and returns its pid once it has exec'd or exited.
fn clone_vfork(args: &ChildArgs) -> io::Result<u32> {
    let mut stack = vec![0u128; STACK_SIZE / size_of::<u128>()];
    // SAFETY: the stack is live and exclusively the child's until clone returns, which with
    // CLONE_VFORK is after the child has exec'd or exited; the top is 16-byte aligned (u128
    // elements). `args` outlives the call for the same reason. Every signal is blocked in
    // this thread across the clone, so the child starts with all blocked and no handler of
    // the daemon's runs on the shared memory before the child has reset them.
    let pid = unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        let top = stack.as_mut_ptr().add(stack.len()).cast::<libc::c_void>();
        let pid = libc::clone(
            child,
            top,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            (args as *const ChildArgs).cast_mut().cast(),
        );
        let error = io::Error::last_os_error();
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        if pid == -1 {
            return Err(error);
        }
        pid
    };
    drop(stack);
    Ok(u32::try_from(pid).expect("clone returns a positive pid"))
}

/// The child, between clone and exec: see the module documentation for what it may call.
extern "C" fn child(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the parent's `ChildArgs`, alive and unchanged until this child execs
    // or exits (the parent is suspended meanwhile).
    let args = unsafe { &*arg.cast::<ChildArgs>() };
    // SAFETY: only async-signal-safe system calls on descriptors and pointers the parent
    // prepared; `errno` is the suspended parent thread's, which nothing else reads meanwhile.
    unsafe {
        let errno = setup_and_exec(args);
        let bytes = errno.to_ne_bytes();
        libc::write(args.error_fd, bytes.as_ptr().cast(), bytes.len());
        libc::_exit(127)
    }
}

/// Returns only on failure, with the `errno`.
///
/// # Safety
///
/// Call only in the child of [`clone_vfork`], with the arguments it prepared.
unsafe fn setup_and_exec(args: &ChildArgs) -> libc::c_int {
    let errno = || {
        io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO)
    };
    // SAFETY: (for the whole body) the calls below are plain system calls on descriptors the
    // child owns a copy of and on the parent's prepared C strings and arrays, as the caller
    // guarantees.
    unsafe {
        libc::close(args.gate_write_fd);
        for (target, &fd) in args.stdio.iter().enumerate() {
            if libc::dup2(fd, target as libc::c_int) == -1 {
                return errno();
            }
        }
        if args.new_session && libc::setsid() == -1 {
            return errno();
        }
        // Until exec, a handler of the daemon's would run in the daemon's memory: a SIGTERM
        // from a daemon ending leftovers, sent while this child waits at its gate, would be
        // taken for one sent to this daemon. Ignored signals are reset too, since exec would
        // keep them (see `crate::inherit`).
        crate::inherit::reset_dispositions();
        crate::inherit::restore_nofile();
        if !args.working_dir.is_null() && libc::chdir(args.working_dir) == -1 {
            return errno();
        }
        if !args.ids_after_gate
            && let Err(error) = take_ids(args)
        {
            return error;
        }
        let pid = (libc::syscall(libc::SYS_getpid) as libc::pid_t).to_ne_bytes();
        if libc::write(args.pid_fd, pid.as_ptr().cast(), pid.len()) != pid.len() as isize {
            return errno();
        }
        libc::close(args.pid_fd);
        let mut byte = 0u8;
        loop {
            let n = libc::read(args.gate_read_fd, (&raw mut byte).cast(), 1);
            if n == 1 {
                break;
            }
            if n == -1 && errno() == libc::EINTR {
                continue;
            }
            // The parent gave up before recording the child: never run.
            return libc::ECANCELED;
        }
        libc::close(args.gate_read_fd);
        if args.ids_after_gate
            && let Err(error) = take_ids(args)
        {
            return error;
        }
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::pthread_sigmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
        libc::execve(args.program, args.argv, args.envp);
        errno()
    }
}

/// Switches to the child's uid and gid, if it has them; the `errno` of a failure.
///
/// # Safety
///
/// Call only in the child of [`clone_vfork`], with the arguments it prepared.
unsafe fn take_ids(args: &ChildArgs) -> Result<(), libc::c_int> {
    let errno = || {
        io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO)
    };
    if let Some((uid, gid)) = args.ids {
        // SAFETY: plain system calls with integer arguments and a null list, as the caller
        // guarantees it runs in the child.
        unsafe {
            if libc::syscall(libc::SYS_setgid, gid) == -1 {
                return Err(errno());
            }
            if args.drop_groups
                && libc::syscall(libc::SYS_setgroups, 0, std::ptr::null::<libc::gid_t>()) == -1
            {
                return Err(errno());
            }
            if libc::syscall(libc::SYS_setuid, uid) == -1 {
                return Err(errno());
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pipe whose write end a child gets as stdout and stderr, and the read end.
    fn output() -> (io::PipeReader, [OwnedFd; 2]) {
        let (reader, writer) = io::pipe().unwrap();
        let writer = OwnedFd::from(writer);
        let copy = writer.try_clone().unwrap();
        (reader, [writer, copy])
    }

    fn sh(script: &str) -> Spawn {
        let (stdin, _) = io::pipe().unwrap();
        let (_, [stdout, stderr]) = output();
        Spawn {
            program: "/bin/sh".into(),
            argv: vec!["sh".into(), "-c".into(), script.into()],
            environment: vec![("GREETING".into(), "hello".into())],
            working_dir: Some("/tmp".into()),
            stdio: [stdin.into(), stdout, stderr],
            ids: None,
            ids_after_gate: false,
            new_session: true,
        }
    }

    #[test]
    fn a_command_runs_with_its_stdio_environment_directory_and_session_after_before_exec() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("recorded");
        let (mut stdout, [out, err]) = output();
        let mut spawn = sh(&format!(
            "test -e {} || exit 9; echo \"$GREETING from $(pwd)\"; \
             read -r _ _ _ _ _ sid _ < /proc/$$/stat; [ \"$sid\" = $$ ] && echo leader; \
             echo oops >&2; env | grep -c ^ ",
            marker.display()
        ));
        spawn.stdio[1] = out;
        spawn.stdio[2] = err;
        let me = std::fs::read_link("/proc/self/exe").unwrap();
        let mut seen = None;
        let spawned = spawn_gated(spawn, |pid| {
            // The child has not exec'd yet: it still runs this program.
            seen = Some((pid, std::fs::read_link(format!("/proc/{pid}/exe")).ok()));
            std::fs::write(&marker, "").unwrap();
            Ok(())
        })
        .unwrap();
        let (pid, exe) = seen.expect("before_exec ran");
        assert_eq!(pid, spawned.pid);
        assert_eq!(exe.as_deref(), Some(me.as_path()));
        let mut text = String::new();
        stdout.read_to_string(&mut text).unwrap();
        assert_eq!(spawned.exit.blocking_recv().unwrap().code(), 0, "{text}");
        // The environment is exactly the one given (sh adds PWD, SHLVL and _ of its own).
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[..3], ["hello from /tmp", "leader", "oops"], "{text}");
        let variables: usize = lines[3].parse().unwrap();
        assert!(variables <= 4, "{text}");
    }

    #[test]
    fn the_command_starts_with_no_signal_blocked_and_sigpipe_not_ignored() {
        // The test harness ignores SIGPIPE, as the daemon does; the command must not. The
        // shell execs grep, which reads its own status: a shell that forked it instead would
        // block every signal around its wait, and grep would read that.
        let (mut stdout, [out, err]) = output();
        let mut spawn = sh("exec grep -E '^Sig(Ign|Blk)' /proc/self/status");
        spawn.stdio[1] = out;
        spawn.stdio[2] = err;
        let spawned = spawn_gated(spawn, |_| Ok(())).unwrap();
        let mut text = String::new();
        stdout.read_to_string(&mut text).unwrap();
        assert!(spawned.exit.blocking_recv().unwrap().success());
        let mask = |name: &str| {
            let line = text.lines().find(|l| l.starts_with(name)).unwrap();
            u64::from_str_radix(line.split_whitespace().nth(1).unwrap(), 16).unwrap()
        };
        assert_eq!(mask("SigBlk:"), 0, "{text}");
        let sigpipe = 1 << (libc::SIGPIPE - 1);
        assert_eq!(mask("SigIgn:") & sigpipe, 0, "{text}");
    }

    #[test]
    fn failures_before_exec_are_reported_with_their_errno() {
        let mut spawn = sh("true");
        spawn.program = "/no/such/program".into();
        let err = spawn_gated(spawn, |_| Ok(())).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOENT));

        let mut spawn = sh("true");
        spawn.working_dir = Some("/no/such/dir".into());
        let mut recorded = false;
        let err = spawn_gated(spawn, |_| {
            recorded = true;
            Ok(())
        })
        .unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOENT));
        assert!(!recorded, "a child that cannot run is not reported");
    }
}
