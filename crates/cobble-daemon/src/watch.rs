//! Watching paths: the input of `requires-paths`, `on-file-change` and failure hints.
//!
//! The watcher is told the whole set of paths anyone cares about and reports each path whose
//! *fingerprint* changed: it appeared, disappeared, or now names different content (another
//! inode, size, modification or change time). Fingerprints are compared level-wise, so how a
//! file was replaced does not matter: an in-place write, an atomic rename, a delete and
//! re-create, and the symlink swap Kubernetes does for mounted secrets (`..data`) all look the
//! same. Paths whose directories do not exist yet are fine: the watcher watches the nearest
//! existing ancestor and moves down as directories appear.
//!
//! inotify (through `notify`) only says "look now"; a poll every [`POLL_INTERVAL`] catches
//! anything inotify cannot see (network filesystems, exhausted watch limits). Each look stats
//! every watched path once, which stays cheap for thousands of paths.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use notify::{RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::mpsc;

/// How often every watched path is looked at even without an inotify event.
pub const POLL_INTERVAL: Duration = Duration::from_secs(1);

/// What identifies the content a path names right now. `None` when the path does not exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fingerprint {
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i128,
    ctime_ns: i128,
}

fn fingerprint(path: &Path) -> Option<Fingerprint> {
    // Follows symlinks: a swapped link target is a change of the path.
    let m = std::fs::metadata(path).ok()?;
    Some(Fingerprint {
        dev: m.dev(),
        ino: m.ino(),
        size: m.size(),
        mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
        ctime_ns: i128::from(m.ctime()) * 1_000_000_000 + i128::from(m.ctime_nsec()),
    })
}

/// A watched path whose fingerprint changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathEvent {
    pub path: PathBuf,
    /// Whether the path exists now.
    pub exists: bool,
}

/// Handle to the watcher task.
#[derive(Clone)]
pub struct PathWatcher {
    tx: mpsc::UnboundedSender<BTreeSet<PathBuf>>,
}

impl PathWatcher {
    /// Starts the watcher; changes are sent to `events`.
    pub fn spawn(events: mpsc::UnboundedSender<PathEvent>) -> PathWatcher {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(rx, events));
        PathWatcher { tx }
    }

    /// Replaces the set of watched paths. Paths newly watched are reported only when they
    /// change after this call.
    pub fn set(&self, paths: BTreeSet<PathBuf>) {
        let _ = self.tx.send(paths);
    }
}

struct State {
    /// The last fingerprint of each watched path.
    paths: BTreeMap<PathBuf, Option<Fingerprint>>,
    /// Directories with an inotify watch.
    dirs: BTreeSet<PathBuf>,
    watcher: Option<RecommendedWatcher>,
    events: mpsc::UnboundedSender<PathEvent>,
}

async fn run(
    mut requests: mpsc::UnboundedReceiver<BTreeSet<PathBuf>>,
    events: mpsc::UnboundedSender<PathEvent>,
) {
    let (wake_tx, mut wake) = mpsc::unbounded_channel::<()>();
    let watcher = notify::recommended_watcher(move |_event: notify::Result<notify::Event>| {
        let _ = wake_tx.send(());
    });
    if let Err(e) = &watcher {
        tracing::info!("Cannot use inotify, polling watched paths instead: {e}");
    }
    let mut state = State {
        paths: BTreeMap::new(),
        dirs: BTreeSet::new(),
        watcher: watcher.ok(),
        events,
    };
    let mut poll = tokio::time::interval(POLL_INTERVAL);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            request = requests.recv() => match request {
                Some(paths) => state.replace(paths),
                None => return,
            },
            Some(()) = wake.recv() => {
                // Coalesce a burst of inotify events into one look.
                while wake.try_recv().is_ok() {}
                state.look();
            }
            _ = poll.tick(), if !state.paths.is_empty() => state.look(),
        }
    }
}

impl State {
    fn replace(&mut self, paths: BTreeSet<PathBuf>) {
        self.paths.retain(|p, _| paths.contains(p));
        for path in paths {
            self.paths
                .entry(path)
                .or_insert_with_key(|p| fingerprint(p));
        }
        if self.rearm() {
            // Something may have changed before the new watches were armed.
            self.look();
        }
    }

    /// Compares every fingerprint with the last one and reports the differences, then moves
    /// watches to directories that appeared (or away from ones that vanished). A file created
    /// in a new directory before its watch was armed would be missed, so each time the watches
    /// move, the paths are looked at again.
    fn look(&mut self) {
        loop {
            for (path, last) in self.paths.iter_mut() {
                let now = fingerprint(path);
                if now != *last {
                    *last = now;
                    let _ = self.events.send(PathEvent {
                        path: path.clone(),
                        exists: now.is_some(),
                    });
                }
            }
            if !self.rearm() {
                return;
            }
        }
    }

    /// The directory to watch for each path: its parent, or the nearest existing ancestor.
    fn wanted_dirs(&self) -> BTreeSet<PathBuf> {
        self.paths
            .keys()
            .filter_map(|p| p.ancestors().skip(1).find(|a| a.is_dir()))
            .map(Path::to_path_buf)
            .collect()
    }

    /// Points the inotify watches at the wanted directories; returns whether they changed.
    fn rearm(&mut self) -> bool {
        let wanted = self.wanted_dirs();
        if wanted == self.dirs {
            return false;
        }
        if let Some(watcher) = self.watcher.as_mut() {
            for gone in self.dirs.difference(&wanted) {
                let _ = watcher.unwatch(gone);
            }
            for new in wanted.difference(&self.dirs) {
                if let Err(e) = watcher.watch(new, RecursiveMode::NonRecursive) {
                    tracing::debug!("Cannot watch {}: {e}; polling it", new.display());
                }
            }
        }
        self.dirs = wanted;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    const DEADLINE: Duration = Duration::from_secs(5);

    async fn next_event(rx: &mut mpsc::UnboundedReceiver<PathEvent>) -> PathEvent {
        tokio::time::timeout(DEADLINE, rx.recv())
            .await
            .expect("an event in time")
            .expect("watcher alive")
    }

    fn setup() -> (
        tempfile::TempDir,
        PathWatcher,
        mpsc::UnboundedReceiver<PathEvent>,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let (tx, rx) = mpsc::unbounded_channel();
        (dir, PathWatcher::spawn(tx), rx)
    }

    #[tokio::test]
    async fn a_path_in_directories_that_do_not_exist_yet() {
        let (dir, watcher, mut rx) = setup();
        let path = dir.path().join("a/b/c/cert.pem");
        watcher.set([path.clone()].into());
        tokio::time::sleep(Duration::from_millis(50)).await;
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&path, "cert").unwrap();
        let event = next_event(&mut rx).await;
        assert_eq!(event, PathEvent { path, exists: true });
    }

    #[tokio::test]
    async fn in_place_write_rename_delete_and_recreate() {
        let (dir, watcher, mut rx) = setup();
        let path = dir.path().join("cert.pem");
        fs::write(&path, "one").unwrap();
        watcher.set([path.clone()].into());
        tokio::time::sleep(Duration::from_millis(50)).await;

        fs::write(&path, "two, longer").unwrap();
        assert!(next_event(&mut rx).await.exists, "in-place write");

        let tmp = dir.path().join(".cert.tmp");
        fs::write(&tmp, "three").unwrap();
        fs::rename(&tmp, &path).unwrap();
        assert!(next_event(&mut rx).await.exists, "atomic rename");

        fs::remove_file(&path).unwrap();
        assert!(!next_event(&mut rx).await.exists, "delete");

        fs::write(&path, "four").unwrap();
        assert!(next_event(&mut rx).await.exists, "re-create");
    }

    #[tokio::test]
    async fn kubernetes_style_symlink_swap() {
        let (dir, watcher, mut rx) = setup();
        let root = dir.path();
        // certs/cert.pem -> ..data/cert.pem, ..data -> ..v1
        fs::create_dir(root.join("..v1")).unwrap();
        fs::write(root.join("..v1/cert.pem"), "v1").unwrap();
        std::os::unix::fs::symlink("..v1", root.join("..data")).unwrap();
        std::os::unix::fs::symlink("..data/cert.pem", root.join("cert.pem")).unwrap();
        let path = root.join("cert.pem");
        watcher.set([path.clone()].into());
        tokio::time::sleep(Duration::from_millis(50)).await;

        fs::create_dir(root.join("..v2")).unwrap();
        fs::write(root.join("..v2/cert.pem"), "v2").unwrap();
        std::os::unix::fs::symlink("..v2", root.join("..data_tmp")).unwrap();
        fs::rename(root.join("..data_tmp"), root.join("..data")).unwrap();
        let event = next_event(&mut rx).await;
        assert_eq!(event, PathEvent { path, exists: true });
    }

    #[tokio::test]
    async fn unwatched_paths_are_not_reported() {
        let (dir, watcher, mut rx) = setup();
        let watched = dir.path().join("watched");
        watcher.set([watched.clone()].into());
        tokio::time::sleep(Duration::from_millis(50)).await;
        fs::write(dir.path().join("other"), "x").unwrap();
        fs::write(&watched, "x").unwrap();
        assert_eq!(next_event(&mut rx).await.path, watched);
        watcher.set(BTreeSet::new());
        tokio::time::sleep(Duration::from_millis(50)).await;
        fs::write(&watched, "changed").unwrap();
        let quiet = tokio::time::timeout(POLL_INTERVAL * 2, rx.recv()).await;
        assert!(quiet.is_err(), "no event after unwatching: {quiet:?}");
    }
}
