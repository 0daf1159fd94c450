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

/// The environment variable that names the handover document's descriptor.
pub const HANDOVER_ENV: &str = "COBBLE_HANDOVER_FD";

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

/// Takes [`HANDOVER_ENV`] out of the environment and returns the descriptor it named.
///
/// Call it first thing in `main`, before any thread starts: changing the environment while
/// another thread may read it is undefined behaviour.
pub fn take_handover_env() -> Option<RawFd> {
    let value = std::env::var_os(HANDOVER_ENV)?;
    // SAFETY: the caller guarantees that no other thread runs yet.
    unsafe { std::env::remove_var(HANDOVER_ENV) };
    value.to_str()?.parse().ok().filter(|fd| *fd >= 0)
}

/// Replaces the program of this process with `program`, run with `args` (its `argv`, the
/// first one included) and `env`. Returns only when `execve` fails, with its error; the
/// process is then unchanged.
pub fn exec(program: &Path, args: &[OsString], env: &[(OsString, OsString)]) -> io::Error {
    let cstring = |bytes: &[u8]| {
        CString::new(bytes).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "argument or environment holds a NUL byte",
            )
        })
    };
    let prepared = (|| {
        let program = cstring(program.as_os_str().as_bytes())?;
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
    unsafe { libc::execve(program.as_ptr(), argv.as_ptr(), envp.as_ptr()) };
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
}
