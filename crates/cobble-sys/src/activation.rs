//! Socket activation as systemd does it: listening sockets a service manager holds for its
//! services, and the exec that passes them.
//!
//! # Theory of operation
//!
//! A service that accepts passed sockets reads them as `sd_listen_fds(3)` does: `LISTEN_FDS`
//! descriptors from 3 on, named by `LISTEN_FDNAMES`, meant for it only when `LISTEN_PID` is its
//! own pid. That pid exists only once the child is forked, and the environment a
//! `std::process::Command` execs with is built before the fork, so a command that gets
//! sockets, or any variable holding its own pid, is exec'd by the child itself: an
//! [`ExecImage`], prepared whole in the parent (program, arguments, environment with a
//! fixed-width slot for each pid variable, descriptors to pass), is finished in the child with
//! nothing but async-signal-safe calls: `getpid`, `fcntl`, `dup2` and `execve`, and digits
//! written into memory the parent allocated.
//!
//! The sockets themselves are bound here too ([`listen_tcp`], [`listen_any_tcp`],
//! [`listen_unix`]): close-on-exec, so that only the copies an [`ExecImage`] places at 3 and on
//! reach a command, with `SO_REUSEADDR` so that a socket can be bound again while connections
//! of an earlier one linger in `TIME_WAIT`.

use std::ffi::{CString, OsString};
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::FileTypeExt;
use std::path::Path;

use nix::sys::socket::{self, AddressFamily, Backlog, SockFlag, SockType, UnixAddr};

/// The first descriptor a passed socket gets (`SD_LISTEN_FDS_START`).
pub const LISTEN_FDS_START: RawFd = 3;

/// A listen backlog: `n`, within what the kernel allows, or the kernel's limit
/// (`net.core.somaxconn`) when `None`.
fn backlog(n: Option<u32>) -> Backlog {
    match n {
        None => Backlog::MAXALLOWABLE,
        Some(n) => Backlog::new(i32::try_from(n).unwrap_or(i32::MAX).min(libc::SOMAXCONN))
            .unwrap_or(Backlog::MAXALLOWABLE),
    }
}

/// A TCP socket listening on `address`. Bound by std (close-on-exec, `SO_REUSEADDR`), then
/// given its backlog.
pub fn listen_tcp(address: SocketAddr, queue: Option<u32>) -> io::Result<OwnedFd> {
    let fd = OwnedFd::from(std::net::TcpListener::bind(address)?);
    socket::listen(&fd, backlog(queue))?;
    Ok(fd)
}

/// A TCP socket listening on `port` of every interface: `[::]`, which takes IPv4 too unless
/// the host says otherwise (`net.ipv6.bindv6only`), as systemd binds `ListenStream=PORT`;
/// `0.0.0.0` where the host has no IPv6.
pub fn listen_any_tcp(port: u16, queue: Option<u32>) -> io::Result<OwnedFd> {
    let any = SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, port, 0, 0));
    match listen_tcp(any, queue) {
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::EAFNOSUPPORT | libc::EADDRNOTAVAIL)
            ) =>
        {
            listen_tcp(
                SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port)),
                queue,
            )
        }
        other => other,
    }
}

/// A unix stream socket listening at `path`. A socket file already there (left by an earlier
/// daemon or a crashed service) is replaced; anything else there is an error
/// (`EADDRINUSE`), never removed.
pub fn listen_unix(path: &Path, queue: Option<u32>) -> io::Result<OwnedFd> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => std::fs::remove_file(path)?,
        Ok(_) => return Err(io::Error::from_raw_os_error(libc::EADDRINUSE)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let fd = socket::socket(
        AddressFamily::Unix,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    socket::bind(fd.as_raw_fd(), &UnixAddr::new(path)?)?;
    socket::listen(&fd, backlog(queue))?;
    Ok(fd)
}

/// Gives a listening socket a new backlog (`listen(2)` again, which the kernel allows).
pub fn set_backlog(fd: impl AsFd, queue: Option<u32>) -> io::Result<()> {
    socket::listen(&fd, backlog(queue))?;
    Ok(())
}

/// Everything a child needs to exec a command with passed descriptors and pid variables,
/// prepared in the parent so that the child only writes digits and calls the kernel. See
/// the module documentation.
pub struct ExecImage {
    /// The program's path.
    program: CString,
    /// Keeps the strings `argv` points into.
    _arguments: Vec<CString>,
    argv: Vec<*const libc::c_char>,
    /// The environment's `KEY=VALUE` strings, NUL-terminated. Pid slots have room for the
    /// longest pid after their `=`.
    environment: Vec<Vec<u8>>,
    envp: Vec<*const libc::c_char>,
    /// Indexes into `environment` of the variables whose value is the child's pid, and
    /// where each value starts.
    pid_slots: Vec<(usize, usize)>,
    /// The descriptors to pass, in order: the first becomes 3.
    fds: Vec<RawFd>,
    /// Room for the descriptors' temporary copies, made in the child.
    scratch: Vec<RawFd>,
}

impl std::fmt::Debug for ExecImage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecImage")
            .field("program", &self.program)
            .field("fds", &self.fds)
            .finish_non_exhaustive()
    }
}

// SAFETY: the raw pointers point into heap buffers this struct owns (`_arguments`,
// `environment`), which never move or change length after construction; nothing else holds
// them, so sending or sharing the struct between threads cannot race on them. The child
// writes through them only in its own copy of the memory, after fork.
unsafe impl Send for ExecImage {}
// SAFETY: as for `Send`; `&ExecImage` offers no way to write.
unsafe impl Sync for ExecImage {}

/// Digits in the longest pid (`pid_max` is at most 2^22 on Linux; `u32::MAX` has 10).
const PID_DIGITS: usize = 10;

impl ExecImage {
    /// Prepares an exec of `program` (a path) with `argv` (its first element the name the
    /// command sees) and `environment`, where each of `pid_variables` is set to the child's
    /// own pid and `fds` are passed from 3 on, in order. The descriptors stay the caller's:
    /// they must stay open until the spawn returns.
    pub fn new(
        program: &Path,
        argv: &[OsString],
        environment: Vec<(OsString, OsString)>,
        pid_variables: &[&str],
        fds: Vec<RawFd>,
    ) -> io::Result<ExecImage> {
        let c_string =
            |bytes: Vec<u8>| CString::new(bytes).map_err(|_| io::ErrorKind::InvalidInput);
        let program = c_string(program.as_os_str().to_owned().into_vec())?;
        let arguments = argv
            .iter()
            .map(|a| c_string(a.clone().into_vec()))
            .collect::<Result<Vec<_>, _>>()?;
        let mut entries: Vec<Vec<u8>> = Vec::new();
        for (key, value) in environment {
            if pid_variables
                .iter()
                .any(|v| key.as_encoded_bytes() == v.as_bytes())
            {
                continue;
            }
            let mut entry = key.into_vec();
            entry.push(b'=');
            entry.extend(value.into_vec());
            if entry.contains(&0) {
                return Err(io::ErrorKind::InvalidInput.into());
            }
            entry.push(0);
            entries.push(entry);
        }
        let mut pid_slots = Vec::new();
        for name in pid_variables {
            let mut entry = format!("{name}=").into_bytes();
            let start = entry.len();
            entry.resize(start + PID_DIGITS + 1, 0);
            pid_slots.push((entries.len(), start));
            entries.push(entry);
        }
        let mut argv: Vec<*const libc::c_char> = arguments.iter().map(|a| a.as_ptr()).collect();
        argv.push(std::ptr::null());
        let mut envp: Vec<*const libc::c_char> =
            entries.iter().map(|e| e.as_ptr().cast()).collect();
        envp.push(std::ptr::null());
        Ok(ExecImage {
            program,
            _arguments: arguments,
            argv,
            environment: entries,
            envp,
            pid_slots,
            scratch: vec![-1; fds.len()],
            fds,
        })
    }

    /// In the child, between fork and exec: places the descriptors at 3 and on, writes the
    /// pid into its slots and execs. Returns only on failure, with the error.
    ///
    /// # Safety
    ///
    /// Call only in a forked child, which owns its copy of the image's memory.
    pub(crate) unsafe fn exec_in_child(&mut self) -> io::Error {
        let last = || io::Error::last_os_error();
        // Copies above the target range first, so that placing one never overwrites another
        // still to be placed; the copies are close-on-exec, the placed ones are not (dup2
        // clears the flag).
        let count = self.fds.len() as RawFd;
        for (i, &fd) in self.fds.iter().enumerate() {
            // SAFETY: fcntl(F_DUPFD_CLOEXEC) is async-signal-safe and only duplicates `fd`.
            let copy = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, LISTEN_FDS_START + count) };
            if copy == -1 {
                return last();
            }
            self.scratch[i] = copy;
        }
        for (i, &copy) in self.scratch.iter().enumerate() {
            // SAFETY: dup2 is async-signal-safe; the target is a descriptor number of the
            // child's own table.
            if unsafe { libc::dup2(copy, LISTEN_FDS_START + i as RawFd) } == -1 {
                return last();
            }
        }
        // SAFETY: getpid is async-signal-safe.
        let pid = unsafe { libc::getpid() };
        for &(entry, start) in &self.pid_slots {
            write_decimal(&mut self.environment[entry][start..], pid.unsigned_abs());
        }
        // SAFETY: execve is async-signal-safe; the program, argv and envp are NUL-terminated
        // strings and null-terminated arrays of pointers into buffers the image owns.
        unsafe {
            libc::execve(
                self.program.as_ptr(),
                self.argv.as_ptr(),
                self.envp.as_ptr(),
            )
        };
        last()
    }
}

/// Writes `n` in decimal at the start of `out`, then a NUL; `out` has room for 10 digits and
/// the NUL. Allocates nothing.
fn write_decimal(out: &mut [u8], mut n: u32) {
    let mut digits = [0u8; PID_DIGITS];
    let mut len = 0;
    loop {
        digits[len] = b'0' + (n % 10) as u8;
        len += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for i in 0..len {
        out[i] = digits[len - 1 - i];
    }
    out[len] = 0;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_are_written_in_place_with_their_terminator() {
        let mut slot = [b'x'; PID_DIGITS + 1];
        write_decimal(&mut slot, 4_194_304);
        assert_eq!(&slot[..8], b"4194304\0");
        write_decimal(&mut slot, 0);
        assert_eq!(&slot[..2], b"0\0");
        write_decimal(&mut slot, u32::MAX);
        assert_eq!(&slot, b"4294967295\0");
    }
}
