//! A cgroup per service run, where the daemon can make one: what enforces a service's
//! `resources:`, counts what it uses, tells an OOM kill from any other SIGKILL, and ends
//! every process of the service on stop, double-forked ones included.
//!
//! # Where the cgroups go
//!
//! Under the daemon's own cgroup, in a directory of this daemon's (`cobble-<tag>`, the tag
//! derived from `$PEBBLE`, so two daemons in one cgroup keep apart and a daemon finds what
//! its killed predecessor left), one directory per run of a service
//! (`<service>.<invocation>`). Two layouts are supported:
//!
//! - **cgroup v2** (one hierarchy): the controllers the daemon's cgroup offers
//!   (`cgroup.controllers`) are enabled for its children. The kernel allows that only in a
//!   cgroup without processes of its own, so when the daemon's cgroup has some (the daemon
//!   itself), the daemon first moves into a leaf beside its services (`cobble-<tag>.daemon`),
//!   as a service started by systemd with `Delegate=yes` or a container with a writable
//!   cgroup namespace must. What cannot be enabled is reported, not enforced.
//! - **cgroup v1** (a hierarchy per controller, as in hybrid set-ups where v2 is mounted
//!   without controllers): the `memory`, `pids`, `cpu` and `cpuacct` hierarchies mounted
//!   and writable are used, each under the daemon's own cgroup there.
//!
//! Nothing is created until a service with `resources:` starts: a daemon without them never
//! touches cgroupfs. Everything here blocks (it is file system work): call it on the blocking
//! pool.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use cobble_plan::{CountLimit, MemoryLimit, Resources};
use cobble_sys::process::{self as sys, Signal};

mod retired;

/// The controllers cobble uses, by their v2 names.
const CONTROLLERS: [&str; 3] = ["memory", "pids", "cpu"];

/// The cgroup layout found, and the directory under which services' cgroups go.
#[derive(Debug)]
pub(crate) struct Cgroups {
    layout: Layout,
    /// Why each controller is not available, by name (`memory`, `pids`, `cpu`).
    missing: BTreeMap<&'static str, String>,
    /// Whether the base directories exist and leftovers were swept.
    prepared: Mutex<Option<Result<(), String>>>,
    /// Cgroups of runs that have ended but could not be removed yet (a process was still
    /// leaving), each removed once it empties.
    retired: retired::Retired,
}

#[derive(Debug, Clone)]
enum Layout {
    /// No cgroup can be made: why.
    None(String),
    /// cgroup v2: the daemon's cgroup, and the base directory under it.
    V2 {
        own: PathBuf,
        base: PathBuf,
        daemon_leaf: PathBuf,
    },
    /// cgroup v1: the base directory in each usable hierarchy, by controller.
    V1 {
        bases: BTreeMap<&'static str, PathBuf>,
    },
}

/// The cgroup of one run of a service.
#[derive(Debug, Clone)]
pub(crate) struct ServiceCgroup {
    /// The directories that make it: one on v2, one per hierarchy on v1, by controller (v2
    /// uses the key `""`).
    dirs: BTreeMap<&'static str, PathBuf>,
    v2: bool,
}

impl Cgroups {
    /// Finds the layout from `/proc/self/cgroup` and `/proc/self/mountinfo`; `tag` names
    /// this daemon's directory. Reads files only; creates nothing.
    pub(crate) fn detect(tag: &str) -> Cgroups {
        let read = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
        Cgroups::from_files(
            &read("/proc/self/cgroup"),
            &read("/proc/self/mountinfo"),
            tag,
            |dir| std::fs::read_to_string(dir.join("cgroup.controllers")).ok(),
        )
    }

    /// The tag of the daemon whose state directory is `pebble_dir`.
    pub(crate) fn tag_for(pebble_dir: &Path) -> String {
        // FNV-1a: stable across builds and runs, which a std hasher is not.
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in pebble_dir.as_os_str().as_encoded_bytes() {
            hash ^= u64::from(*byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
        format!("{:08x}", hash as u32)
    }

    /// [`Cgroups::detect`] on given file contents; `controllers_of` reads a v2 directory's
    /// `cgroup.controllers`.
    pub(crate) fn from_files(
        proc_cgroup: &str,
        mountinfo: &str,
        tag: &str,
        controllers_of: impl Fn(&Path) -> Option<String>,
    ) -> Cgroups {
        let mounts = parse_mounts(mountinfo);
        let mut missing = BTreeMap::new();
        // v1 first: where controllers are bound to v1 hierarchies, v2 has none of them.
        let mut bases = BTreeMap::new();
        for controller in ["memory", "pids", "cpu", "cpuacct"] {
            let own = proc_cgroup.lines().find_map(|line| {
                let mut parts = line.splitn(3, ':');
                let (_, list, path) = (parts.next()?, parts.next()?, parts.next()?);
                list.split(',').any(|c| c == controller).then_some(path)
            });
            let mount = mounts
                .iter()
                .find(|m| !m.v2 && m.options.split(',').any(|o| o == controller));
            if let (Some(own), Some(mount)) = (own, mount) {
                let dir = under(&mount.point, relative(own, &mount.root));
                bases.insert(controller, dir.join(format!("cobble-{tag}")));
            }
        }
        let layout = if !bases.is_empty() {
            for controller in CONTROLLERS {
                if !bases.contains_key(controller) {
                    missing.insert(
                        controller,
                        format!("no cgroup v1 {controller} hierarchy is mounted"),
                    );
                }
            }
            Layout::V1 { bases }
        } else {
            let own = proc_cgroup
                .lines()
                .find_map(|line| line.strip_prefix("0::"));
            match (own, mounts.iter().find(|m| m.v2)) {
                (Some(own), Some(mount)) => {
                    let dir = under(&mount.point, relative(own, &mount.root));
                    let offered = controllers_of(&dir).unwrap_or_default();
                    for controller in CONTROLLERS {
                        if !offered.split_whitespace().any(|c| c == controller) {
                            missing.insert(
                                controller,
                                format!(
                                    "the {controller} controller is not delegated to {}",
                                    dir.display()
                                ),
                            );
                        }
                    }
                    Layout::V2 {
                        base: dir.join(format!("cobble-{tag}")),
                        daemon_leaf: dir.join(format!("cobble-{tag}.daemon")),
                        own: dir,
                    }
                }
                _ => Layout::None("no cgroup file system is mounted".into()),
            }
        };
        if let Layout::None(why) = &layout {
            for controller in CONTROLLERS {
                missing.insert(controller, why.clone());
            }
        }
        Cgroups {
            layout,
            missing,
            prepared: Mutex::new(None),
            retired: retired::Retired::default(),
        }
    }

    /// What of `resources` cannot be enforced here, with why, as one line; `None` when all of
    /// it can (so far as is known before a cgroup is made).
    pub(crate) fn unenforced(&self, resources: &Resources) -> Option<String> {
        let mut lines = Vec::new();
        let mut check = |set: bool, field: &str, controller: &str| {
            if set && let Some(why) = self.missing.get(controller) {
                lines.push(format!("{field} not enforced: {why}"));
            }
        };
        check(resources.memory_max.is_some(), "memory-max", "memory");
        check(resources.memory_high.is_some(), "memory-high", "memory");
        check(resources.pids_max.is_some(), "pids-max", "pids");
        check(resources.cpu_max.is_some(), "cpu-max", "cpu");
        if !resources.is_empty()
            && let Some(Err(why)) = &*lock(&self.prepared)
        {
            return Some(format!("resources not enforced: {why}"));
        }
        (!lines.is_empty()).then(|| lines.join("; "))
    }

    /// Makes the cgroup of a run of service `name` (`invocation` tells runs apart) and sets
    /// `resources` on it. `Ok(None)` when no cgroup can be had here (then
    /// [`Cgroups::unenforced`] says why); an error when one was made but a limit could not
    /// be set, which fails the start.
    pub(crate) fn create(
        &self,
        name: &str,
        invocation: &str,
        resources: &Resources,
    ) -> Result<Option<ServiceCgroup>, String> {
        self.sweep();
        if self.prepare().is_err() {
            return Ok(None);
        }
        let Some(cgroup) = self.of_run(name, invocation) else {
            return Ok(None);
        };
        for dir in cgroup.dirs.values() {
            if let Err(e) = std::fs::create_dir(dir)
                && e.kind() != io::ErrorKind::AlreadyExists
            {
                cgroup.remove();
                return Err(format!(
                    "cannot create cgroup {}: {}",
                    dir.display(),
                    os(&e)
                ));
            }
        }
        if let Err(e) = cgroup.set_limits(resources) {
            cgroup.remove();
            return Err(e);
        }
        Ok(Some(cgroup))
    }

    /// The cgroup a re-executed daemon's predecessor made for the run `invocation` of
    /// service `name`, found by its path, if it is still there. Finding one makes the base
    /// directories this daemon's as they are: they are not swept as a killed predecessor's
    /// would be, which would end the run.
    pub(crate) fn adopt(&self, name: &str, invocation: &str) -> Option<ServiceCgroup> {
        let cgroup = self.of_run(name, invocation)?;
        if !cgroup.dirs.values().all(|dir| dir.is_dir()) {
            return None;
        }
        lock(&self.prepared).get_or_insert(Ok(()));
        Some(cgroup)
    }

    /// Where the cgroup of the run `invocation` of service `name` goes (nothing is created);
    /// `None` without cgroups.
    fn of_run(&self, name: &str, invocation: &str) -> Option<ServiceCgroup> {
        let leaf = format!("{}.{invocation}", escape_name(name));
        let (dirs, v2) = match &self.layout {
            Layout::None(_) => return None,
            Layout::V2 { base, .. } => (BTreeMap::from([("", base.join(&leaf))]), true),
            Layout::V1 { bases } => (
                bases
                    .iter()
                    .map(|(controller, base)| (*controller, base.join(&leaf)))
                    .collect(),
                false,
            ),
        };
        Some(ServiceCgroup { dirs, v2 })
    }

    /// Creates the base directories once, removing what a killed predecessor left in them.
    fn prepare(&self) -> Result<(), String> {
        let mut prepared = lock(&self.prepared);
        if let Some(result) = &*prepared {
            return result.clone();
        }
        let result = match &self.layout {
            Layout::None(why) => Err(why.clone()),
            Layout::V2 {
                own,
                base,
                daemon_leaf,
            } => prepare_v2(own, base, daemon_leaf, &self.missing),
            Layout::V1 { bases } => bases.values().try_for_each(|base| prepare_dir(base)),
        };
        if let Err(why) = &result {
            tracing::warn!("Cannot use cgroups for services' resources: {why}");
        }
        *prepared = Some(result.clone());
        result
    }

    /// Retires the cgroup of a run that has ended: removed now if it is empty, else as soon
    /// as it empties (see [`retired`]).
    pub(crate) fn retire(&self, cgroup: ServiceCgroup) {
        if !cgroup.remove() {
            self.retired.add(cgroup);
        }
    }

    /// Removes the retired cgroups that have emptied since.
    fn sweep(&self) {
        self.retired.sweep();
    }

    /// Ends every process left in the daemon's cgroups and removes them, for a daemon on its
    /// way out. Does nothing if none was ever made.
    pub(crate) fn remove_all(&self) {
        if !matches!(&*lock(&self.prepared), Some(Ok(()))) {
            return;
        }
        let bases: Vec<PathBuf> = match &self.layout {
            Layout::None(_) => Vec::new(),
            Layout::V2 { base, .. } => vec![base.clone()],
            Layout::V1 { bases } => bases.values().cloned().collect(),
        };
        for base in bases {
            empty_dir(&base);
            let _ = std::fs::remove_dir(&base);
        }
    }
}

impl ServiceCgroup {
    /// Moves process `pid` into this cgroup (in every hierarchy).
    pub(crate) fn attach(&self, pid: u32) -> io::Result<()> {
        for dir in self.dirs.values() {
            std::fs::write(dir.join("cgroup.procs"), pid.to_string())?;
        }
        Ok(())
    }

    /// The processes in it.
    pub(crate) fn procs(&self) -> Vec<u32> {
        let dir = self.tracking_dir();
        std::fs::read_to_string(dir.join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }

    /// The OOM killer's kills in it since it was made.
    pub(crate) fn oom_kills(&self) -> u64 {
        let (dir, file) = match self.memory_dir() {
            Some(dir) if self.v2 => (dir, "memory.events"),
            Some(dir) => (dir, "memory.oom_control"),
            None => return 0,
        };
        let text = std::fs::read_to_string(dir.join(file)).unwrap_or_default();
        keyed(&text, "oom_kill").unwrap_or(0)
    }

    /// Memory charged to it (what `memory-max` limits: resident memory and page cache).
    pub(crate) fn memory_bytes(&self) -> Option<u64> {
        let dir = self.memory_dir()?;
        let file = if self.v2 {
            "memory.current"
        } else {
            "memory.usage_in_bytes"
        };
        std::fs::read_to_string(dir.join(file))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// CPU time used in it, by every process that was ever in it.
    pub(crate) fn cpu_time(&self) -> Option<Duration> {
        if self.v2 {
            let text = std::fs::read_to_string(self.dirs.get("")?.join("cpu.stat")).ok()?;
            return keyed(&text, "usage_usec").map(Duration::from_micros);
        }
        let dir = self.dirs.get("cpuacct")?;
        let text = std::fs::read_to_string(dir.join("cpuacct.usage")).ok()?;
        text.trim().parse().ok().map(Duration::from_nanos)
    }

    /// SIGKILLs every process in it (`cgroup.kill` where the kernel has it, which also takes
    /// processes forking at that moment; otherwise each process, a few rounds).
    pub(crate) fn kill_all(&self) {
        if self.v2
            && let Some(dir) = self.dirs.get("")
            && std::fs::write(dir.join("cgroup.kill"), "1").is_ok()
        {
            return;
        }
        for _ in 0..5 {
            let procs = self.procs();
            if procs.is_empty() {
                return;
            }
            for pid in procs {
                let _ = sys::signal_pid(pid, Signal::SIGKILL);
            }
        }
    }

    /// Removes it; `false` while a process is still in it.
    pub(crate) fn remove(&self) -> bool {
        let mut gone = true;
        for dir in self.dirs.values() {
            match std::fs::remove_dir(dir) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(_) => gone = false,
            }
        }
        gone
    }

    /// The file whose modification says that it emptied, on cgroup v2.
    fn events_file(&self) -> Option<PathBuf> {
        Some(self.dirs.get("").filter(|_| self.v2)?.join("cgroup.events"))
    }

    /// A directory of it, for messages.
    pub(crate) fn path(&self) -> &Path {
        self.tracking_dir()
    }

    fn tracking_dir(&self) -> &Path {
        ["", "pids", "memory", "cpu", "cpuacct"]
            .iter()
            .find_map(|c| self.dirs.get(c))
            .map(PathBuf::as_path)
            .unwrap_or(Path::new("/nonexistent"))
    }

    fn memory_dir(&self) -> Option<&Path> {
        let key = if self.v2 { "" } else { "memory" };
        self.dirs.get(key).map(PathBuf::as_path)
    }

    fn set_limits(&self, r: &Resources) -> Result<(), String> {
        let write = |controller: &str, file: &str, value: String| -> Result<(), String> {
            let key = if self.v2 { "" } else { controller };
            let Some(dir) = self.dirs.get(key) else {
                return Ok(()); // not available: reported by `unenforced`
            };
            let path = dir.join(file);
            if self.v2 && !path.exists() {
                return Ok(()); // the controller is not enabled: reported by `unenforced`
            }
            std::fs::write(&path, &value)
                .map_err(|e| format!("cannot set {} to {value}: {}", path.display(), os(&e)))
        };
        let memory = |m: MemoryLimit, max_text: &str| match m {
            MemoryLimit::Bytes(b) => b.to_string(),
            MemoryLimit::Max => max_text.to_owned(),
        };
        let unlimited = if self.v2 { "max" } else { "-1" };
        for (limit, v2_file, v1_file) in [
            (r.memory_max, "memory.max", "memory.limit_in_bytes"),
            (r.memory_high, "memory.high", "memory.soft_limit_in_bytes"),
        ] {
            if let Some(m) = limit {
                let file = if self.v2 { v2_file } else { v1_file };
                write("memory", file, memory(m, unlimited))?;
            }
        }
        if let Some(p) = r.pids_max {
            let value = match p {
                CountLimit::Count(n) => n.to_string(),
                CountLimit::Max => "max".into(),
            };
            write("pids", "pids.max", value)?;
        }
        if let Some(c) = r.cpu_max {
            if self.v2 {
                let quota = c.quota_us.map_or("max".into(), |q| q.to_string());
                write("cpu", "cpu.max", format!("{quota} {}", c.period_us))?;
            } else {
                write("cpu", "cpu.cfs_period_us", c.period_us.to_string())?;
                let quota = c.quota_us.map_or("-1".into(), |q| q.to_string());
                write("cpu", "cpu.cfs_quota_us", quota)?;
            }
        }
        Ok(())
    }
}

/// One cgroup mount of `/proc/self/mountinfo`.
#[derive(Debug)]
struct Mount {
    root: String,
    point: PathBuf,
    v2: bool,
    options: String,
}

fn parse_mounts(mountinfo: &str) -> Vec<Mount> {
    mountinfo
        .lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let fields: Vec<&str> = left.split(' ').collect();
            let mut right = right.split(' ');
            let fstype = right.next()?;
            let options = right.nth(1).unwrap_or_default();
            let v2 = match fstype {
                "cgroup2" => true,
                "cgroup" => false,
                _ => return None,
            };
            Some(Mount {
                root: unescape(fields.get(3)?),
                point: PathBuf::from(unescape(fields.get(4)?)),
                v2,
                options: options.to_owned(),
            })
        })
        .collect()
}

/// `/proc/self/mountinfo` escapes spaces and a few other bytes as octal.
fn unescape(field: &str) -> String {
    let mut out = String::with_capacity(field.len());
    let mut rest = field;
    while let Some(at) = rest.find('\\') {
        out.push_str(&rest[..at]);
        let code = rest.get(at + 1..at + 4);
        match code.and_then(|c| u8::from_str_radix(c, 8).ok()) {
            Some(byte) => {
                out.push(char::from(byte));
                rest = &rest[at + 4..];
            }
            None => {
                out.push('\\');
                rest = &rest[at + 1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// `dir` joined with `relative`, without the trailing slash an empty one would add.
fn under(dir: &Path, relative: &str) -> PathBuf {
    if relative.is_empty() {
        dir.to_owned()
    } else {
        dir.join(relative)
    }
}

/// The daemon's cgroup path relative to a mount of the hierarchy whose root is `root`.
fn relative<'a>(own: &'a str, root: &str) -> &'a str {
    let rest = if root == "/" {
        own
    } else {
        own.strip_prefix(root).unwrap_or(own)
    };
    rest.trim_start_matches('/')
}

/// A service name as a directory name: bytes outside `[A-Za-z0-9_-]` as `%XX`, and a dot
/// never first.
fn escape_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for byte in name.bytes() {
        if byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-' {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

fn prepare_dir(base: &Path) -> Result<(), String> {
    match std::fs::create_dir(base) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            // A killed predecessor's: end what is left in it.
            empty_dir(base);
            Ok(())
        }
        Err(e) => Err(format!(
            "cannot create cgroup {}: {}",
            base.display(),
            os(&e)
        )),
    }
}

fn prepare_v2(
    own: &Path,
    base: &Path,
    daemon_leaf: &Path,
    missing: &BTreeMap<&'static str, String>,
) -> Result<(), String> {
    prepare_dir(base)?;
    let wanted: Vec<String> = CONTROLLERS
        .iter()
        .filter(|c| !missing.contains_key(*c))
        .map(|c| format!("+{c}"))
        .collect();
    if wanted.is_empty() {
        return Ok(());
    }
    let enable = |dir: &Path| std::fs::write(dir.join("cgroup.subtree_control"), wanted.join(" "));
    if let Err(e) = enable(own) {
        if e.kind() != io::ErrorKind::ResourceBusy {
            return Err(format!(
                "cannot enable controllers in {}: {}",
                own.display(),
                os(&e)
            ));
        }
        // The daemon's cgroup has processes: the daemon, and the services it started before
        // (those without `resources:`). They move to a leaf of their own, the daemon first;
        // a process forked meanwhile is moved by the next round.
        let _ = std::fs::create_dir(daemon_leaf);
        std::fs::write(
            daemon_leaf.join("cgroup.procs"),
            std::process::id().to_string(),
        )
        .map_err(|e| {
            format!(
                "cannot move the daemon to {}: {}",
                daemon_leaf.display(),
                os(&e)
            )
        })?;
        let mut enabled = enable(own);
        for _ in 0..5 {
            if enabled.is_ok() {
                break;
            }
            let procs = std::fs::read_to_string(own.join("cgroup.procs")).unwrap_or_default();
            for pid in procs.lines() {
                // A process that has exited meanwhile is gone from the list anyway.
                let _ = std::fs::write(daemon_leaf.join("cgroup.procs"), pid.trim());
            }
            enabled = enable(own);
        }
        enabled
            .map_err(|e| format!("cannot enable controllers in {}: {}", own.display(), os(&e)))?;
    }
    enable(base).map_err(|e| {
        format!(
            "cannot enable controllers in {}: {}",
            base.display(),
            os(&e)
        )
    })
}

/// Kills what is in the cgroups under `base` and removes them.
fn empty_dir(base: &Path) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for entry in entries.flatten() {
        if !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let dir = entry.path();
        let v2 = dir.join("cgroup.kill").exists() || dir.join("cgroup.type").exists();
        let cgroup = ServiceCgroup {
            dirs: BTreeMap::from([(if v2 { "" } else { "pids" }, dir)]),
            v2,
        };
        cgroup.kill_all();
        for _ in 0..50 {
            if cgroup.remove() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// The value of `key` in a `key value` file (`memory.events`, `cpu.stat`).
fn keyed(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (k, v) = line.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

fn os(error: &io::Error) -> String {
    cobble_sys::os_error_text(error)
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID_CGROUP: &str =
        "9:name=systemd:/\n8:pids:/\n4:memory:/process_api/abc\n2:cpuacct:/\n1:cpu:/\n0::/\n";
    const HYBRID_MOUNTS: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
38 31 0:35 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    #[test]
    fn finds_each_v1_hierarchy_under_the_daemons_own_cgroup() {
        let cgroups = Cgroups::from_files(HYBRID_CGROUP, HYBRID_MOUNTS, "t1", |_| None);
        let Layout::V1 { bases } = &cgroups.layout else {
            panic!("{:?}", cgroups.layout)
        };
        assert_eq!(
            bases["memory"],
            Path::new("/sys/fs/cgroup/memory/process_api/abc/cobble-t1")
        );
        assert_eq!(bases["pids"], Path::new("/sys/fs/cgroup/pids/cobble-t1"));
        assert_eq!(bases["cpu"], Path::new("/sys/fs/cgroup/cpu/cobble-t1"));
        assert_eq!(
            bases["cpuacct"],
            Path::new("/sys/fs/cgroup/cpuacct/cobble-t1")
        );
        assert!(cgroups.missing.is_empty());
    }

    #[test]
    fn a_combined_v1_mount_and_a_namespaced_root_are_followed() {
        let cgroup = "5:cpu,cpuacct:/kube/pod1\n4:memory:/kube/pod1\n";
        let mounts = "\
32 31 0:29 /kube/pod1 /sys/fs/cgroup/cpu,cpuacct ro - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 /kube/pod1 /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
";
        let cgroups = Cgroups::from_files(cgroup, mounts, "t", |_| None);
        let Layout::V1 { bases } = &cgroups.layout else {
            panic!()
        };
        assert_eq!(
            bases["cpu"],
            Path::new("/sys/fs/cgroup/cpu,cpuacct/cobble-t")
        );
        assert_eq!(bases["memory"], Path::new("/sys/fs/cgroup/memory/cobble-t"));
        let r = resources("pids-max", "10");
        assert_eq!(
            cgroups.unenforced(&r).as_deref(),
            Some("pids-max not enforced: no cgroup v1 pids hierarchy is mounted")
        );
        assert_eq!(cgroups.unenforced(&resources("memory-max", "1M")), None);
    }

    #[test]
    fn v2_uses_what_the_daemons_cgroup_delegates() {
        let cgroup = "0::/system.slice/app.service\n";
        let mounts = "40 31 0:37 / /sys/fs/cgroup rw,relatime - cgroup2 cgroup2 rw\n";
        let cgroups = Cgroups::from_files(cgroup, mounts, "t", |dir| {
            assert_eq!(dir, Path::new("/sys/fs/cgroup/system.slice/app.service"));
            Some("cpuset cpu io memory\n".into())
        });
        let Layout::V2 { base, .. } = &cgroups.layout else {
            panic!()
        };
        assert_eq!(
            base,
            Path::new("/sys/fs/cgroup/system.slice/app.service/cobble-t")
        );
        assert_eq!(
            cgroups.unenforced(&resources("pids-max", "10")).as_deref(),
            Some(
                "pids-max not enforced: the pids controller is not delegated to /sys/fs/cgroup/system.slice/app.service"
            )
        );
        assert_eq!(cgroups.unenforced(&resources("cpu-max", "0.5")), None);
    }

    #[test]
    fn without_a_cgroup_mount_nothing_is_enforced_and_it_says_so() {
        let cgroups = Cgroups::from_files("0::/\n", "", "t", |_| None);
        assert_eq!(
            cgroups
                .unenforced(&resources("memory-max", "64M"))
                .as_deref(),
            Some("memory-max not enforced: no cgroup file system is mounted")
        );
        assert_eq!(cgroups.unenforced(&Resources::default()), None);
        assert!(
            cgroups
                .create("svc", "1", &resources("memory-max", "64M"))
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn a_hierarchy_that_cannot_be_written_leaves_the_service_unlimited_and_says_why() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("gone");
        let mounts = format!(
            "35 31 0:32 / {} rw - cgroup cgroup rw,memory\n",
            missing.display()
        );
        let cgroups = Cgroups::from_files("4:memory:/\n", &mounts, "t", |_| None);
        let r = resources("memory-max", "64M");
        assert!(cgroups.create("svc", "1", &r).unwrap().is_none());
        let why = cgroups.unenforced(&r).unwrap();
        assert!(
            why.starts_with(&format!(
                "resources not enforced: cannot create cgroup {}/cobble-t: no such file or directory",
                missing.display()
            )),
            "{why}"
        );
    }

    #[test]
    fn limits_are_written_in_each_layouts_files() {
        let dir = tempfile::tempdir().unwrap();
        let mut r = resources("memory-max", "64M");
        r.parse_field("memory-high", "48M").unwrap();
        r.parse_field("pids-max", "max").unwrap();
        r.parse_field("cpu-max", "0.5").unwrap();
        let v1: BTreeMap<&'static str, PathBuf> = ["memory", "pids", "cpu", "cpuacct"]
            .into_iter()
            .map(|c| (c, dir.path().join(c)))
            .collect();
        for d in v1.values() {
            std::fs::create_dir(d).unwrap();
        }
        let cgroup = ServiceCgroup {
            dirs: v1.clone(),
            v2: false,
        };
        cgroup.set_limits(&r).unwrap();
        let read = |p: PathBuf| std::fs::read_to_string(p).unwrap();
        assert_eq!(read(v1["memory"].join("memory.limit_in_bytes")), "67108864");
        assert_eq!(
            read(v1["memory"].join("memory.soft_limit_in_bytes")),
            "50331648"
        );
        assert_eq!(read(v1["pids"].join("pids.max")), "max");
        assert_eq!(read(v1["cpu"].join("cpu.cfs_period_us")), "100000");
        assert_eq!(read(v1["cpu"].join("cpu.cfs_quota_us")), "50000");

        let v2 = dir.path().join("v2");
        std::fs::create_dir(&v2).unwrap();
        for file in ["memory.max", "memory.high", "pids.max", "cpu.max"] {
            std::fs::write(v2.join(file), "").unwrap();
        }
        let cgroup = ServiceCgroup {
            dirs: BTreeMap::from([("", v2.clone())]),
            v2: true,
        };
        cgroup.set_limits(&r).unwrap();
        assert_eq!(read(v2.join("memory.max")), "67108864");
        assert_eq!(read(v2.join("memory.high")), "50331648");
        assert_eq!(read(v2.join("pids.max")), "max");
        assert_eq!(read(v2.join("cpu.max")), "50000 100000");
        std::fs::write(
            v2.join("memory.events"),
            "low 0\nhigh 3\nmax 7\noom 1\noom_kill 1\noom_group_kill 0\n",
        )
        .unwrap();
        assert_eq!(cgroup.oom_kills(), 1);
        std::fs::write(
            v2.join("cpu.stat"),
            "usage_usec 1500000\nuser_usec 1000000\n",
        )
        .unwrap();
        assert_eq!(cgroup.cpu_time(), Some(Duration::from_millis(1500)));
    }

    #[test]
    fn names_become_safe_directory_names() {
        assert_eq!(escape_name("web-1_a"), "web-1_a");
        assert_eq!(escape_name("a/b c.."), "a%2Fb%20c%2E%2E");
        assert_eq!(unescape("/sys/fs/cgroup/a\\040b"), "/sys/fs/cgroup/a b");
        assert_eq!(relative("/kube/pod1/x", "/kube/pod1"), "x");
        assert_eq!(relative("/a/b", "/"), "a/b");
        assert_eq!(
            Cgroups::tag_for(Path::new("/var/lib/pebble/default")).len(),
            8
        );
    }

    /// Waits for `condition` up to `deadline`: the longest a retired cgroup may take to go
    /// once it is empty (a re-check at most a second apart, or an event).
    fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !condition() {
            assert!(
                std::time::Instant::now() < deadline,
                "timed out waiting for {what}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn a_retired_cgroup_that_was_still_busy_goes_once_it_empties_without_a_next_start() {
        // A directory with a file in it cannot be removed, as a populated cgroup cannot; and
        // a v1 cgroup has no event to wait for.
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("svc.1");
        std::fs::create_dir(&run).unwrap();
        std::fs::write(run.join("busy"), "").unwrap();
        let cgroups = Cgroups::from_files("0::/\n", "", "t", |_| None);
        cgroups.retire(ServiceCgroup {
            dirs: BTreeMap::from([("pids", run.clone())]),
            v2: false,
        });
        assert!(run.exists());
        std::fs::remove_file(run.join("busy")).unwrap();
        wait_until("the retired cgroup to go", || !run.exists());
    }

    #[test]
    fn on_cgroup_v2_a_retired_cgroup_goes_when_its_last_process_exits() {
        let read = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
        let mounts = parse_mounts(&read("/proc/self/mountinfo"));
        let proc_cgroup = read("/proc/self/cgroup");
        let own = proc_cgroup.lines().find_map(|l| l.strip_prefix("0::"));
        let (Some(mount), Some(own)) = (mounts.iter().find(|m| m.v2), own) else {
            eprintln!("skipped: no cgroup v2 hierarchy is mounted here");
            return;
        };
        let dir = under(&mount.point, relative(own, &mount.root))
            .join(format!("cobble-test-{}", std::process::id()));
        if let Err(e) = std::fs::create_dir(&dir) {
            eprintln!("skipped: cannot create {}: {e}", dir.display());
            return;
        }
        let mut child = std::process::Command::new("sleep")
            .arg("1000")
            .spawn()
            .unwrap();
        let cgroup = ServiceCgroup {
            dirs: BTreeMap::from([("", dir.clone())]),
            v2: true,
        };
        if let Err(e) = cgroup.attach(child.id()) {
            let _ = child.kill();
            let _ = child.wait();
            let _ = std::fs::remove_dir(&dir);
            eprintln!("skipped: cannot move a process into {}: {e}", dir.display());
            return;
        }
        let cgroups = Cgroups::from_files("0::/\n", "", "t", |_| None);
        cgroups.retire(cgroup);
        assert!(dir.exists(), "populated: not removed");
        child.kill().unwrap();
        child.wait().unwrap();
        // Well within WATCHED_RECHECK: the kernel's event, not the re-check, removes it.
        wait_until("the retired cgroup to go", || !dir.exists());
    }

    fn resources(field: &str, value: &str) -> Resources {
        let mut r = Resources::default();
        r.parse_field(field, value).unwrap();
        r
    }
}
