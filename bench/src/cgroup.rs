//! A cgroup v2 child per measured daemon, so the harness can read `memory.current`: what the
//! kernel charges the daemon (and the services it starts) for, page tables, socket buffers and
//! the page cache of files it writes included, which `/proc/PID/status` does not show.
//!
//! The daemon enters its cgroup before it execs (see [`crate::daemon::Daemon::spawn`]), so
//! every page it ever touches is charged there: a process moved in later would leave its
//! earlier charges behind. Each daemon gets a fresh cgroup, so no charge of an earlier daemon
//! (page cache it left behind) is counted against the next.
//!
//! Where that is not possible (no cgroup v2 at `/sys/fs/cgroup`, no memory controller for
//! children, no permission), [`probe`] says why and the harness goes on without the figure.

use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

/// Where cgroup v2 is expected.
const ROOT: &str = "/sys/fs/cgroup";

/// How long to wait for the last processes of a daemon to leave its cgroup before giving up
/// on removing it.
const REMOVE_TIMEOUT: Duration = Duration::from_secs(2);

/// Where the harness can make memory-accounted cgroups. `Err` says, in a few words, why it
/// cannot.
///
/// The candidates are the harness's own cgroup and then its ancestors: the first that already
/// gives its children the memory controller and lets the harness create a directory. As a
/// last resort the harness tries to enable the controller in its own cgroup, which cgroup v2
/// refuses while that cgroup holds processes (the root excepted), as it usually does.
pub(crate) fn probe() -> std::result::Result<PathBuf, String> {
    let root = Path::new(ROOT);
    if !root.join("cgroup.controllers").exists() {
        return Err(format!("cgroup v2 is not mounted at {ROOT}"));
    }
    let own = fs::read_to_string("/proc/self/cgroup")
        .map_err(|e| format!("cannot read /proc/self/cgroup: {e}"))?;
    let relative = own
        .lines()
        .find_map(|line| line.strip_prefix("0::"))
        .ok_or("the harness is in no cgroup v2")?;
    let own = root.join(relative.trim_start_matches('/'));
    let gives_memory = |path: &Path| {
        fs::read_to_string(path.join("cgroup.subtree_control"))
            .is_ok_and(|s| s.split_whitespace().any(|c| c == "memory"))
    };
    let writable = |path: &Path| {
        let probe = path.join(format!("cobble-bench-probe-{}", std::process::id()));
        fs::create_dir(&probe).is_ok() && fs::remove_dir(&probe).is_ok()
    };
    if let Some(parent) = own
        .ancestors()
        .take_while(|p| p.starts_with(root))
        .find(|p| gives_memory(p) && writable(p))
    {
        return Ok(parent.to_path_buf());
    }
    fs::write(own.join("cgroup.subtree_control"), "+memory").map_err(|e| {
        format!(
            "no cgroup at or above {} gives its children the memory controller, and enabling \
             it there failed: {e}",
            own.display()
        )
    })?;
    Ok(own)
}

/// One child cgroup; removed when dropped.
#[derive(Debug)]
pub(crate) struct Cgroup {
    path: PathBuf,
}

impl Cgroup {
    /// Creates `parent/name`.
    pub(crate) fn create(parent: &Path, name: &str) -> Result<Cgroup> {
        let path = parent.join(name);
        fs::create_dir(&path).with_context(|| format!("cannot create {}", path.display()))?;
        let cgroup = Cgroup { path };
        cgroup.current()?;
        Ok(cgroup)
    }

    /// The directory; a process enters by writing its PID to `cgroup.procs` in it.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// `memory.current`, in bytes.
    pub(crate) fn current(&self) -> Result<u64> {
        let file = self.path.join("memory.current");
        fs::read_to_string(&file)
            .with_context(|| format!("cannot read {}", file.display()))?
            .trim()
            .parse()
            .with_context(|| format!("malformed {}", file.display()))
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        // Killed services may take a moment to be reaped and leave; until then the kernel
        // refuses to remove the cgroup.
        let started = Instant::now();
        loop {
            match fs::remove_dir(&self.path) {
                Ok(()) => return,
                Err(e) if e.kind() == ErrorKind::NotFound => return,
                Err(e) if started.elapsed() > REMOVE_TIMEOUT => {
                    eprintln!("warning: cannot remove {}: {e}", self.path.display());
                    return;
                }
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    }
}
