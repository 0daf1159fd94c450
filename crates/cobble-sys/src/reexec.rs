//! Re-executing the daemon in place: the descriptors it keeps across `execve`, the document
//! it hands its successor, and the `execve` itself.
//!
//! # Theory of operation
//!
//! `execve` keeps the process: its pid (PID 1 stays PID 1), its children (the services stay
//! the daemon's, and it reaps them) and every descriptor not marked close-on-exec. Every
//! descriptor cobble opens is close-on-exec, so the daemon clears the flag on exactly those
//! it hands over ([`set_inherited`]) and writes what they are into a document in a memory
//! file ([`handover_file`]), whose number the successor finds in [`HANDOVER_ENV`]. The
//! successor takes the variable out of its environment at once ([`take_handover_env`]),
//! before any thread starts, so that nothing it starts inherits it.
//!
//! [`exec`] prepares everything it needs (the C strings of the program, its arguments and
//! its environment) before it calls `execve`, and changes nothing in the process but the
//! soft descriptor limit, which it gives back its original value for the new program to
//! raise (and remember) itself: when `execve` fails, it raises the limit again and the daemon
//! goes on exactly as it was, and only has to set the flags back.

use std::ffi::{CString, OsString};
use std::io::{self, Read, Seek, Write};
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicPtr, AtomicU8, Ordering};

/// The environment variable that names the handover document's descriptor.
pub const HANDOVER_ENV: &str = "COBBLE_HANDOVER_FD";
/// The environment variable that names a descriptor open on the program that executed this
/// one: what this one executes back into should it fail to take over.
pub const PREVIOUS_IMAGE_ENV: &str = "COBBLE_PREVIOUS_IMAGE_FD";
/// The environment variable that tells a program executed back into why its successor did
/// not take over.
pub const TAKEOVER_FAILED_ENV: &str = "COBBLE_TAKEOVER_FAILED";

/// [`PREVIOUS_IMAGE_ENV`] and [`TAKEOVER_FAILED_ENV`], as [`take_handover_env`] found them.
static TAKEN: std::sync::OnceLock<(Option<RawFd>, Option<String>)> = std::sync::OnceLock::new();

/// The descriptor on the program that executed this one (see [`PREVIOUS_IMAGE_ENV`]).
pub fn previous_image() -> Option<RawFd> {
    TAKEN.get().and_then(|t| t.0)
}

/// Why the program this one executed did not take over, when it executed back into this one
/// (see [`TAKEOVER_FAILED_ENV`]).
pub fn takeover_failure() -> Option<&'static str> {
    TAKEN.get().and_then(|t| t.1.as_deref())
}

/// Sets or clears `FD_CLOEXEC` on `fd`: inherited means kept across `execve`.
pub fn set_inherited(fd: RawFd, inherited: bool) -> io::Result<()> {
    // SAFETY: fcntl(2) with F_GETFD and F_SETFD reads and writes only the descriptor's flags;
    // an invalid descriptor is reported as EBADF.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    let flags = if inherited {
        flags & !libc::FD_CLOEXEC
    } else {
        flags | libc::FD_CLOEXEC
    };
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, flags) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether `fd` is open and kept across `execve`.
pub fn is_inherited(fd: RawFd) -> io::Result<bool> {
    // SAFETY: as in `set_inherited`.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(flags & libc::FD_CLOEXEC == 0)
}

/// A memory file holding `bytes`, positioned at its start, close-on-exec.
pub fn handover_file(bytes: &[u8]) -> io::Result<OwnedFd> {
    let name = c"cobble-handover";
    // SAFETY: memfd_create(2) reads the NUL-terminated name and returns a new descriptor.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just created and is owned by nothing else.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut file = std::fs::File::from(owned);
    file.write_all(bytes)?;
    file.rewind()?;
    Ok(OwnedFd::from(file))
}

/// Reads the whole handover document from `fd`, taking ownership of it, at most `limit`
/// bytes: a longer one is refused.
pub fn read_handover(fd: RawFd, limit: u64) -> io::Result<Vec<u8>> {
    // The descriptor must be one this process was handed open; anything else is refused
    // before it is owned.
    is_inherited(fd)?;
    // SAFETY: the descriptor is open (checked above) and named by the handover variable,
    // which gives it to this program alone.
    let file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    let mut bytes = Vec::new();
    file.take(limit + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("handover document larger than {limit} bytes"),
        ));
    }
    Ok(bytes)
}

/// Takes ownership of a descriptor the predecessor handed over, after checking that it is
/// open, and marks it close-on-exec again, so that nothing this program starts inherits it.
pub fn adopt(fd: RawFd) -> io::Result<OwnedFd> {
    set_inherited(fd, false)?;
    // SAFETY: the descriptor is open (the call above would have failed with EBADF) and the
    // handover document, which this program alone reads, gives it to the caller.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Takes [`HANDOVER_ENV`] out of the environment and returns the descriptor it named; takes
/// [`PREVIOUS_IMAGE_ENV`] and [`TAKEOVER_FAILED_ENV`] out too, for [`previous_image`] and
/// [`takeover_failure`].
///
/// Call it first thing in `main`, before any thread starts: changing the environment while
/// another thread may read it is undefined behaviour.
pub fn take_handover_env() -> Option<RawFd> {
    let take = |name: &str| {
        let value = std::env::var_os(name)?;
        // SAFETY: the caller guarantees that no other thread runs yet.
        unsafe { std::env::remove_var(name) };
        value.into_string().ok()
    };
    let fd = |value: Option<String>| value?.parse().ok().filter(|fd: &RawFd| *fd >= 0);
    let handover = fd(take(HANDOVER_ENV));
    let previous = fd(take(PREVIOUS_IMAGE_ENV));
    let failed = take(TAKEOVER_FAILED_ENV);
    let _ = TAKEN.set((previous.filter(|_| handover.is_some()), failed));
    handover
}

/// Copies of the descriptors a program was handed (every descriptor above stderr kept across
/// `execve`), close-on-exec, which keep what they are open whatever the program does with
/// the originals: so that it can hand them on, as it got them, to the program it executes
/// back into when it fails to take over.
#[derive(Debug)]
pub struct Reserve {
    copies: Vec<(RawFd, OwnedFd)>,
}

impl Reserve {
    /// Copies every inherited descriptor but those of `except`.
    pub fn take(except: &[RawFd]) -> io::Result<Reserve> {
        let mut copies = Vec::new();
        for entry in std::fs::read_dir("/proc/self/fd")? {
            let Some(fd) = entry?
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<RawFd>().ok())
            else {
                continue;
            };
            if fd <= 2 || except.contains(&fd) || !is_inherited(fd).unwrap_or(false) {
                continue;
            }
            // SAFETY: fcntl(2) with F_DUPFD_CLOEXEC makes a new descriptor, owned here.
            let copy = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
            if copy < 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: `copy` was just made and is owned by nothing else.
            copies.push((fd, unsafe { OwnedFd::from_raw_fd(copy) }));
        }
        Ok(Reserve { copies })
    }

    /// Puts every copy back under its original number, kept across `execve` (replacing
    /// whatever the number names now).
    pub fn restore(&self) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        for (fd, copy) in &self.copies {
            // SAFETY: dup2(2) makes `fd` name what `copy` names; the flag it clears is the
            // close-on-exec one, as wanted.
            if unsafe { libc::dup2(copy.as_raw_fd(), *fd) } < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    }

    /// Moves `fd`'s offset back to the start (the handover document's, once read).
    pub fn rewind(fd: RawFd) -> io::Result<()> {
        // SAFETY: lseek(2) moves the offset of an open file; an invalid one is EBADF.
        if unsafe { libc::lseek(fd, 0, libc::SEEK_SET) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

impl Reserve {
    /// Each copy's original number and its own: what [`arm_crash_fallback`] puts back.
    fn numbers(&self) -> Vec<(RawFd, RawFd)> {
        use std::os::fd::AsRawFd;
        self.copies
            .iter()
            .map(|(fd, copy)| (*fd, copy.as_raw_fd()))
            .collect()
    }
}

/// The signals a crash ends a program with: a bad memory access, an illegal instruction, an
/// arithmetic fault, an abort (a Rust stack overflow, a panic while panicking).
const CRASH_SIGNALS: [(libc::c_int, &str); 5] = [
    (libc::SIGSEGV, "SIGSEGV"),
    (libc::SIGBUS, "SIGBUS"),
    (libc::SIGILL, "SIGILL"),
    (libc::SIGFPE, "SIGFPE"),
    (libc::SIGABRT, "SIGABRT"),
];

/// Everything the crash handler needs, made before it can run: a signal handler may not
/// allocate, lock or read the environment.
struct CrashFallback {
    /// The process that armed it: a child between its fork and its exec (a service being
    /// spawned) inherits the handler, and must not execute the old daemon.
    pid: libc::pid_t,
    image: RawFd,
    document: RawFd,
    /// (original number, copy) of each handed-over descriptor.
    descriptors: Vec<(RawFd, RawFd)>,
    argv: Vec<*const libc::c_char>,
    /// For each crash signal, the environment that names it in [`TAKEOVER_FAILED_ENV`].
    envp: Vec<(libc::c_int, Vec<*const libc::c_char>)>,
    /// The mask the program executed back into starts with: the stop signals blocked, as
    /// [`exec`] leaves them.
    mask: libc::sigset_t,
    /// The actions the crash signals had before, put back when disarmed.
    previous: Vec<(libc::c_int, libc::sigaction)>,
    /// What the pointers point into.
    _strings: Vec<CString>,
}

/// The [`CrashFallback`] armed, or null. Never freed: a handler may hold it.
static CRASH: AtomicPtr<CrashFallback> = AtomicPtr::new(std::ptr::null_mut());

/// Where the crash fallback stands: [`DISARMED`], [`ARMED`] or [`FALLING_BACK`].
static CRASH_STATE: AtomicU8 = AtomicU8::new(DISARMED);
const DISARMED: u8 = 0;
const ARMED: u8 = 1;
/// A thread is executing the previous program (a crash handler, or the panic path of
/// [`hold_crashes`]): a crash in another thread waits for that `execve`, which ends it.
const FALLING_BACK: u8 = 2;

/// Makes a crash by signal (see [`CRASH_SIGNALS`]) of a program that has not taken over yet
/// execute back into its predecessor, as a panic does: `image` is the predecessor's program
/// (see [`previous_image`]), run with `args` and `env` and [`TAKEOVER_FAILED_ENV`] saying
/// "it crashed with" the signal, and `document` the handover, rewound, with every
/// descriptor of `reserve` put back first (so `image` and `reserve` must stay open until
/// [`disarm_crash_fallback`]). A crash once it is disarmed, or one whose `execve` fails,
/// ends the program as before. A program arms it once.
///
/// The handler runs on the thread's alternate signal stack, which Rust gives every thread
/// it starts, so that a stack overflow reaches it too, with every signal blocked.
pub fn arm_crash_fallback(
    image: RawFd,
    document: RawFd,
    reserve: &Reserve,
    args: &[OsString],
    env: &[(OsString, OsString)],
) -> io::Result<()> {
    if !CRASH.load(Ordering::SeqCst).is_null() {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            "the crash fallback is armed already",
        ));
    }
    let invalid = || {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "argument or environment holds a NUL byte",
        )
    };
    let mut strings = Vec::new();
    let mut pointer = |bytes: Vec<u8>| -> io::Result<*const libc::c_char> {
        let string = CString::new(bytes).map_err(|_| invalid())?;
        // The string's heap buffer does not move when the CString does.
        let pointer = string.as_ptr();
        strings.push(string);
        Ok(pointer)
    };
    let mut argv = args
        .iter()
        .map(|a| pointer(a.as_bytes().to_vec()))
        .collect::<io::Result<Vec<_>>>()?;
    argv.push(std::ptr::null());
    let entry = |k: &std::ffi::OsStr, v: &[u8]| {
        let mut entry = k.as_bytes().to_vec();
        entry.push(b'=');
        entry.extend_from_slice(v);
        entry
    };
    let mut base = Vec::new();
    for (k, v) in env.iter().filter(|(k, _)| k != TAKEOVER_FAILED_ENV) {
        base.push(pointer(entry(k, v.as_bytes()))?);
    }
    let mut envp = Vec::new();
    for (signal, name) in CRASH_SIGNALS {
        let why = format!("it crashed with {name}");
        let mut one = base.clone();
        one.push(pointer(entry(
            TAKEOVER_FAILED_ENV.as_ref(),
            why.as_bytes(),
        ))?);
        one.push(std::ptr::null());
        envp.push((signal, one));
    }
    let mask = *crate::inherit::stop_signals().as_ref();
    let mut fallback = Box::new(CrashFallback {
        pid: std::process::id() as libc::pid_t,
        image,
        document,
        descriptors: reserve.numbers(),
        argv,
        envp,
        mask,
        previous: Vec::new(),
        _strings: strings,
    });
    for (signal, _) in CRASH_SIGNALS {
        // SAFETY: a zeroed sigaction is a valid value to fill in; sigaction(2) reads `action`
        // and writes `previous`, both on this stack.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_crash as *const () as libc::sighandler_t;
            action.sa_flags = libc::SA_ONSTACK;
            libc::sigfillset(&mut action.sa_mask);
            let mut previous: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(signal, &action, &mut previous) != 0 {
                let error = io::Error::last_os_error();
                restore_actions(&fallback.previous);
                return Err(error);
            }
            fallback.previous.push((signal, previous));
        }
    }
    CRASH.store(Box::into_raw(fallback), Ordering::SeqCst);
    CRASH_STATE.store(ARMED, Ordering::SeqCst);
    Ok(())
}

/// A crash from now on ends the program, as before [`arm_crash_fallback`]: the crash
/// signals' earlier actions are put back.
pub fn disarm_crash_fallback() {
    CRASH_STATE.store(DISARMED, Ordering::SeqCst);
    let armed = CRASH.load(Ordering::SeqCst);
    if armed.is_null() {
        return;
    }
    // SAFETY: made by Box::into_raw in `arm_crash_fallback` and never freed.
    let fallback = unsafe { &*armed };
    restore_actions(&fallback.previous);
}

/// For a thread about to execute the previous program itself (after a panic): a crash in
/// another thread meanwhile waits for that `execve` instead of ending the process. Should
/// the `execve` fail, [`disarm_crash_fallback`] lets crashes end the program again.
pub fn hold_crashes() {
    let _ = CRASH_STATE.compare_exchange(ARMED, FALLING_BACK, Ordering::SeqCst, Ordering::SeqCst);
}

fn restore_actions(previous: &[(libc::c_int, libc::sigaction)]) {
    for (signal, action) in previous {
        // SAFETY: puts back an action sigaction(2) itself returned.
        unsafe {
            libc::sigaction(*signal, action, std::ptr::null_mut());
        }
    }
}

/// The crash handler: executes back into the predecessor (see [`arm_crash_fallback`]),
/// waits for another thread doing so, or, when not armed, in a child of the daemon, or when
/// the `execve` fails, dies of the signal as the program would have.
extern "C" fn on_crash(signal: libc::c_int) {
    let armed = CRASH.load(Ordering::SeqCst);
    // SAFETY: getpid(2) is async-signal-safe; `armed` was made by Box::into_raw and is never
    // freed.
    let ours = !armed.is_null() && unsafe { libc::getpid() == (*armed).pid };
    if ours {
        match CRASH_STATE.compare_exchange(ARMED, FALLING_BACK, Ordering::SeqCst, Ordering::SeqCst)
        {
            // SAFETY: as above; every call is async-signal-safe: dup2, lseek, setrlimit,
            // pthread_sigmask and execveat, on what was prepared beforehand.
            Ok(_) => unsafe {
                let fallback = &*armed;
                for (fd, copy) in &fallback.descriptors {
                    libc::dup2(*copy, *fd);
                }
                libc::lseek(fallback.document, 0, libc::SEEK_SET);
                crate::inherit::restore_nofile();
                libc::pthread_sigmask(libc::SIG_SETMASK, &fallback.mask, std::ptr::null_mut());
                if let Some((_, envp)) = fallback.envp.iter().find(|(s, _)| *s == signal) {
                    libc::syscall(
                        libc::SYS_execveat,
                        fallback.image,
                        c"".as_ptr(),
                        fallback.argv.as_ptr(),
                        envp.as_ptr(),
                        libc::AT_EMPTY_PATH,
                    );
                }
            },
            // Another thread is executing the previous program, which ends this one.
            Err(FALLING_BACK) => loop {
                // SAFETY: pause(2) is async-signal-safe; every signal is blocked here.
                unsafe {
                    libc::pause();
                }
            },
            Err(_) => {}
        }
    }
    // SAFETY: signal(2) and raise(3) are async-signal-safe; with the default action back,
    // the signal ends the process (as the handler returns, the signal blocked until then).
    unsafe {
        libc::signal(signal, libc::SIG_DFL);
        libc::raise(signal);
    }
}

/// Opens the program this process runs, close-on-exec: the very file its image was loaded
/// from, which [`exec_image`] executes again even once it is deleted or replaced on disk.
pub fn open_own_image() -> io::Result<OwnedFd> {
    std::fs::File::open("/proc/self/exe").map(OwnedFd::from)
}

/// What [`exec`] and [`exec_image`] execute.
enum Program<'a> {
    Path(&'a Path),
    /// An open file, executed with `execveat(fd, "", ..., AT_EMPTY_PATH)`.
    Image(RawFd),
}

/// Replaces the program of this process with `program`, run with `args` (its `argv`, the
/// first one included) and `env`. Returns only when `execve` fails, with its error; the
/// process is then unchanged.
pub fn exec(program: &Path, args: &[OsString], env: &[(OsString, OsString)]) -> io::Error {
    exec_program(Program::Path(program), args, env)
}

/// [`exec`] of the executable open as `image` (see [`open_own_image`]). The file must be a
/// binary, not a script: a script's interpreter could not open a close-on-exec descriptor.
pub fn exec_image(image: RawFd, args: &[OsString], env: &[(OsString, OsString)]) -> io::Error {
    exec_program(Program::Image(image), args, env)
}

fn exec_program(
    program: Program<'_>,
    args: &[OsString],
    env: &[(OsString, OsString)],
) -> io::Error {
    let cstring = |bytes: &[u8]| {
        CString::new(bytes).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "argument or environment holds a NUL byte",
            )
        })
    };
    let image = match program {
        Program::Image(fd) => Some(fd),
        Program::Path(_) => None,
    };
    let prepared = (|| {
        let program = match program {
            Program::Path(path) => cstring(path.as_os_str().as_bytes())?,
            Program::Image(_) => CString::default(),
        };
        let args = args
            .iter()
            .map(|a| cstring(a.as_bytes()))
            .collect::<io::Result<Vec<_>>>()?;
        let env = env
            .iter()
            .map(|(k, v)| {
                let mut entry = k.as_bytes().to_vec();
                entry.push(b'=');
                entry.extend_from_slice(v.as_bytes());
                cstring(&entry)
            })
            .collect::<io::Result<Vec<_>>>()?;
        Ok::<_, io::Error>((program, args, env))
    })();
    let (program, args, env) = match prepared {
        Ok(prepared) => prepared,
        Err(e) => return e,
    };
    let mut argv: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    let mut envp: Vec<*const libc::c_char> = env.iter().map(|e| e.as_ptr()).collect();
    envp.push(std::ptr::null());
    // The new program starts with the descriptor limit the daemon was started with, and
    // raises it itself, remembering that one for its children.
    crate::inherit::restore_nofile();
    // A stop signal that arrives from the exec until the new program catches it stays
    // pending rather than ending the process (execve resets the handlers, and keeps the
    // calling thread's mask and what is pending).
    use nix::sys::signal::{SigSet, SigmaskHow, pthread_sigmask};
    let mut old_mask = SigSet::empty();
    let blocked = pthread_sigmask(
        SigmaskHow::SIG_BLOCK,
        Some(&crate::inherit::stop_signals()),
        Some(&mut old_mask),
    );
    // SAFETY: every pointer is to a NUL-terminated string that lives until the call returns,
    // and both arrays end with a null pointer. On success the call does not return.
    match image {
        // SAFETY: as above; the empty path names the open file itself (AT_EMPTY_PATH). The
        // system call, not the C library's wrapper, which some C libraries lack.
        Some(fd) => unsafe {
            libc::syscall(
                libc::SYS_execveat,
                fd,
                program.as_ptr(),
                argv.as_ptr(),
                envp.as_ptr(),
                libc::AT_EMPTY_PATH,
            )
        },
        // SAFETY: as above.
        None => unsafe { libc::execve(program.as_ptr(), argv.as_ptr(), envp.as_ptr()) as _ },
    };
    let error = io::Error::last_os_error();
    if blocked.is_ok() {
        let _ = pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&old_mask), None);
    }
    let _ = crate::inherit::raise_nofile();
    error
}

/// The time on the monotonic clock (`CLOCK_MONOTONIC`), which an `execve` keeps: what a
/// handover is stamped with, so that the new program can tell how long the swap took.
pub fn monotonic_now() -> std::time::Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    if rc != 0 {
        return std::time::Duration::ZERO;
    }
    std::time::Duration::new(
        u64::try_from(ts.tv_sec).unwrap_or(0),
        u32::try_from(ts.tv_nsec).unwrap_or(0),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn the_inherited_flag_follows_what_is_set() {
        let file = handover_file(b"{}").unwrap();
        let fd = file.as_raw_fd();
        assert!(!is_inherited(fd).unwrap(), "created close-on-exec");
        set_inherited(fd, true).unwrap();
        assert!(is_inherited(fd).unwrap());
        set_inherited(fd, false).unwrap();
        assert!(!is_inherited(fd).unwrap());
        assert!(set_inherited(-1, true).is_err());
    }

    #[test]
    fn a_handover_file_reads_back_whole_and_within_its_bound() {
        let file = handover_file(b"{\"format\":1}").unwrap();
        let fd = std::os::fd::IntoRawFd::into_raw_fd(file);
        assert_eq!(read_handover(fd, 64).unwrap(), b"{\"format\":1}");
        let file = handover_file(&[b'x'; 100]).unwrap();
        let fd = std::os::fd::IntoRawFd::into_raw_fd(file);
        assert_eq!(
            read_handover(fd, 99).unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
    }

    #[test]
    fn the_monotonic_clock_runs_on() {
        let before = monotonic_now();
        assert!(before > std::time::Duration::ZERO);
        assert!(monotonic_now() >= before);
    }

    #[test]
    fn a_failed_exec_returns_its_error() {
        let missing = Path::new("/nonexistent/cobble");
        let e = exec(missing, &[OsString::from("cobble")], &[]);
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        let e = exec(Path::new("/bin/sh\0x"), &[], &[]);
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn a_reserve_gives_back_descriptors_closed_since() {
        let file = handover_file(b"kept").unwrap();
        let fd = std::os::fd::IntoRawFd::into_raw_fd(file);
        set_inherited(fd, true).unwrap();
        let reserve = Reserve::take(&[]).unwrap();
        assert!(reserve.copies.iter().any(|(original, _)| *original == fd));
        // The original read to its end, then closed.
        assert_eq!(read_handover(fd, 64).unwrap(), b"kept");
        assert!(is_inherited(fd).is_err(), "closed");
        reserve.restore().unwrap();
        assert!(is_inherited(fd).unwrap(), "back, kept across execve");
        Reserve::rewind(fd).unwrap();
        assert_eq!(read_handover(fd, 64).unwrap(), b"kept");
    }

    #[test]
    fn a_failed_exec_of_an_image_returns_its_error() {
        let image = open_own_image().unwrap();
        assert!(
            !is_inherited(image.as_raw_fd()).unwrap(),
            "opened close-on-exec"
        );
        // A memory file holding no program: the kernel refuses its format.
        let text = handover_file(b"not a program").unwrap();
        let e = exec_image(text.as_raw_fd(), &[OsString::from("x")], &[]);
        assert!(
            matches!(e.raw_os_error(), Some(libc::ENOEXEC | libc::EACCES)),
            "{e}"
        );
        let e = exec_image(-1, &[OsString::from("x")], &[]);
        assert_eq!(e.raw_os_error(), Some(libc::EBADF));
    }
}
