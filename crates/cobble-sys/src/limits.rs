//! What a process may use and what it uses: resource limits set on another process
//! (`prlimit(2)`), and its usage as `/proc` reports it.

use std::io;

/// The `RLIMIT_*` number of a resource, by the lower-case name `prlimit(1)` gives it.
pub fn rlimit_resource(name: &str) -> Option<libc::__rlimit_resource_t> {
    Some(match name {
        "as" => libc::RLIMIT_AS,
        "core" => libc::RLIMIT_CORE,
        "cpu" => libc::RLIMIT_CPU,
        "data" => libc::RLIMIT_DATA,
        "fsize" => libc::RLIMIT_FSIZE,
        "locks" => libc::RLIMIT_LOCKS,
        "memlock" => libc::RLIMIT_MEMLOCK,
        "msgqueue" => libc::RLIMIT_MSGQUEUE,
        "nice" => libc::RLIMIT_NICE,
        "nofile" => libc::RLIMIT_NOFILE,
        "nproc" => libc::RLIMIT_NPROC,
        "rss" => libc::RLIMIT_RSS,
        "rtprio" => libc::RLIMIT_RTPRIO,
        "rttime" => libc::RLIMIT_RTTIME,
        "sigpending" => libc::RLIMIT_SIGPENDING,
        "stack" => libc::RLIMIT_STACK,
        _ => return None,
    })
}

/// Sets limit `name` of process `pid`: `soft` and `hard` as `setrlimit(2)` takes them
/// (`u64::MAX` for no limit); a side that is `None` keeps the process's current value.
/// Raising a hard limit takes `CAP_SYS_RESOURCE`; without it the kernel says `EPERM`.
pub fn set_rlimit(pid: u32, name: &str, soft: Option<u64>, hard: Option<u64>) -> io::Result<()> {
    let (pid, resource) = target(pid, name)?;
    let mut current = libc::rlimit64 {
        rlim_cur: 0,
        rlim_max: 0,
    };
    if soft.is_none() || hard.is_none() {
        // SAFETY: prlimit64 reads nothing through a null new-limit pointer and writes the
        // current limits to a live local.
        if unsafe { libc::prlimit64(pid, resource, std::ptr::null(), &mut current) } == -1 {
            return Err(io::Error::last_os_error());
        }
    }
    let new = libc::rlimit64 {
        rlim_cur: soft.unwrap_or(current.rlim_cur),
        rlim_max: hard.unwrap_or(current.rlim_max),
    };
    // SAFETY: the new limits are a live local, and a null old-limit pointer is allowed.
    if unsafe { libc::prlimit64(pid, resource, &new, std::ptr::null_mut()) } == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Limit `name` of process `pid`, as `(soft, hard)`.
pub fn get_rlimit(pid: u32, name: &str) -> io::Result<(u64, u64)> {
    let (pid, resource) = target(pid, name)?;
    let mut current = libc::rlimit64 {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: as in `set_rlimit`.
    if unsafe { libc::prlimit64(pid, resource, std::ptr::null(), &mut current) } == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok((current.rlim_cur, current.rlim_max))
}

/// The process and the resource of a `prlimit(2)` call.
fn target(pid: u32, name: &str) -> io::Result<(libc::pid_t, libc::__rlimit_resource_t)> {
    let resource = rlimit_resource(name).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("unknown rlimit {name}"),
        )
    })?;
    let pid = libc::pid_t::try_from(pid)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "invalid process id"))?;
    Ok((pid, resource))
}

/// What one process uses, from `/proc/<pid>/stat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ProcUsage {
    /// CPU time in user mode, including that of its waited-for children, in clock ticks
    /// (fields 14 and 16).
    pub user_ticks: u64,
    /// CPU time in kernel mode, likewise (fields 15 and 17).
    pub system_ticks: u64,
    /// Resident pages (field 24).
    pub rss_pages: u64,
    /// Field 3: `Z` for a zombie.
    pub state: char,
}

/// Reads the usage of `pid`; `None` if it does not exist.
pub fn proc_usage(pid: u32) -> Option<ProcUsage> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_proc_usage(&text)
}

fn parse_proc_usage(text: &str) -> Option<ProcUsage> {
    let after_comm = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = after_comm.split_ascii_whitespace().collect();
    let field = |n: usize| -> Option<u64> { fields.get(n - 3)?.parse().ok() };
    Some(ProcUsage {
        user_ticks: field(14)? + field(16)?,
        system_ticks: field(15)? + field(17)?,
        rss_pages: field(24)?,
        state: fields.first()?.chars().next()?,
    })
}

/// The open file descriptors of `pid`; `None` if they cannot be read (it has exited, or
/// belongs to another user).
pub fn open_fds(pid: u32) -> Option<u64> {
    let dir = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?;
    Some(dir.count() as u64)
}

/// Clock ticks per second, the unit of CPU times in `/proc`.
pub fn clock_ticks() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(ticks).ok().filter(|t| *t > 0).unwrap_or(100)
}

/// The size of a page, the unit of resident sizes in `/proc`.
pub fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(size).ok().filter(|s| *s > 0).unwrap_or(4096)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_usage_fields() {
        let text = "4242 (a) b (c)) S 1 4242 4242 0 -1 4194560 100 0 0 0 11 22 33 44 20 0 1 0 \
                    987654 1000 250 18446744073709551615\n";
        assert_eq!(
            parse_proc_usage(text),
            Some(ProcUsage {
                user_ticks: 44,
                system_ticks: 66,
                rss_pages: 250,
                state: 'S',
            })
        );
    }

    #[test]
    fn reads_its_own_usage_and_limits() {
        let me = std::process::id();
        let usage = proc_usage(me).unwrap();
        assert!(usage.rss_pages > 0);
        assert!(open_fds(me).unwrap() >= 3);
        let (soft, hard) = get_rlimit(me, "nofile").unwrap();
        assert!(soft <= hard);
        assert!(rlimit_resource("nofiles").is_none());
    }

    #[test]
    fn sets_a_limit_of_a_child_one_side_at_a_time() {
        // Through the reaper: other tests of this crate run it, and it would take the exit.
        let child = crate::reaper::spawn(std::process::Command::new("sleep").arg("5")).unwrap();
        let pid = child.pid;
        let (_, hard) = get_rlimit(pid, "nofile").unwrap();
        set_rlimit(pid, "nofile", Some(100), None).unwrap();
        assert_eq!(get_rlimit(pid, "nofile").unwrap(), (100, hard));
        set_rlimit(pid, "nofile", Some(50), Some(200)).unwrap();
        assert_eq!(get_rlimit(pid, "nofile").unwrap(), (50, 200));
        let error = set_rlimit(pid, "nofile", Some(300), None).unwrap_err();
        assert_eq!(error.raw_os_error(), Some(libc::EINVAL));
        crate::process::signal_pid(pid, nix::sys::signal::Signal::SIGKILL).unwrap();
        child.exit.blocking_recv().unwrap();
    }
}
