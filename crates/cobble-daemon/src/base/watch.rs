//! Watching paths: the input of `requires-paths`, `on-file-change` and failure hints.
//!
//! The watcher is told the whole set of paths anyone cares about. It reports each newly
//! watched path's state once ([`PathEvent::initial`]), so a path that appeared between the
//! moment someone found it missing and the moment the watch was armed is not missed; then it
//! reports each path whose *fingerprint* changed: it appeared, disappeared, or now names different content (another
//! inode, size, modification or change time). Fingerprints are compared level-wise, so how a
//! file was replaced does not matter: an in-place write, an atomic rename, a delete and
//! re-create, and the symlink swap Kubernetes does for mounted secrets (`..data`) all look the
//! same. Paths whose directories do not exist yet are fine: the watcher watches the nearest
//! existing ancestor and moves down as directories appear.
//!
//! inotify (through `notify`) only says "look now"; a poll every [`POLL_INTERVAL`] catches
//! anything inotify cannot see (network filesystems, exhausted watch limits). Each look stats
//! every watched path once, which stays cheap for thousands of paths.
//!
//! Looking means `stat` calls, which can block (a hung network mount), so the watcher is a
//! dedicated thread, not a task on the runtime: nothing it waits for can stall the daemon.
//! The thread (and inotify's own) starts with the first path anyone watches: most daemons
//! watch none, and start-up need not pay for two threads that would only wait.
//!
//! Each event carries the fingerprint it reports, so that whoever acts on the events knows
//! what it last acted on. Handed back as a *baseline* ([`PathWatcher::set_from`]), that
//! makes a path newly watched by another watcher (the daemon's after a re-execution) report
//! as a change what changed since, instead of taking the path as it is now for its start.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use notify::{RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::mpsc;

/// How often every watched path is looked at even without an inotify event.
pub(crate) const POLL_INTERVAL: Duration = Duration::from_secs(1);

/// What identifies the content a path names right now. `None` when the path does not exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Fingerprint {
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

/// A watched path's state: as found when its watch was armed, or after a change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PathEvent {
    pub path: PathBuf,
    /// Whether the path exists now.
    pub exists: bool,
    /// The state found when the path was newly watched, not a change.
    pub initial: bool,
    /// What the path names now (`None` when it does not exist).
    pub fingerprint: Option<Fingerprint>,
}

/// The fingerprint of each path, as someone last saw it.
pub(crate) type Baseline = BTreeMap<PathBuf, Option<Fingerprint>>;

/// Handle to the watcher thread, which starts with the first path to watch.
#[derive(Clone)]
pub(crate) struct PathWatcher {
    thread: Arc<Mutex<Thread>>,
}

/// The watcher thread, or what it will be started with.
enum Thread {
    /// Nothing watched yet: no thread.
    NotStarted(mpsc::UnboundedSender<PathEvent>),
    /// Started: its messages.
    Running(std::sync::mpsc::Sender<Message>),
}

enum Message {
    /// Watch exactly these paths from now on, comparing those newly watched with their
    /// baseline, if they have one; answer once the watches are armed.
    Set(
        BTreeSet<PathBuf>,
        Baseline,
        Option<tokio::sync::oneshot::Sender<()>>,
    ),
    /// inotify saw something in a watched directory.
    Look,
}

impl PathWatcher {
    /// A watcher whose changes are sent to `events`. Its thread starts with the first
    /// non-empty set of paths, and ends once every handle is gone.
    pub(crate) fn spawn(events: mpsc::UnboundedSender<PathEvent>) -> PathWatcher {
        PathWatcher {
            thread: Arc::new(Mutex::new(Thread::NotStarted(events))),
        }
    }

    /// Replaces the set of watched paths. Paths newly watched are reported as they are
    /// ([`PathEvent::initial`]), then when they change after the returned ticket resolves
    /// (callers that do not care may drop it).
    pub(crate) fn set(&self, paths: BTreeSet<PathBuf>) -> tokio::sync::oneshot::Receiver<()> {
        self.set_from(paths, Baseline::new())
    }

    /// [`PathWatcher::set`], but a newly watched path that `baseline` has is compared with
    /// that fingerprint: it reports as a change if it differs, as found if not.
    pub(crate) fn set_from(
        &self,
        paths: BTreeSet<PathBuf>,
        mut baseline: Baseline,
    ) -> tokio::sync::oneshot::Receiver<()> {
        baseline.retain(|path, _| paths.contains(path));
        let (armed, ticket) = tokio::sync::oneshot::channel();
        let mut thread = self.thread.lock().unwrap_or_else(|e| e.into_inner());
        let tx = match &*thread {
            Thread::Running(tx) => tx.clone(),
            // Nothing was watched and nothing is: nothing to arm.
            Thread::NotStarted(_) if paths.is_empty() => {
                let _ = armed.send(());
                return ticket;
            }
            Thread::NotStarted(events) => {
                let tx = start(events.clone());
                *thread = Thread::Running(tx.clone());
                tx
            }
        };
        let _ = tx.send(Message::Set(paths, baseline, Some(armed)));
        ticket
    }
}

/// Starts the watcher thread, which sends changes to `events`; returns its messages' sender.
fn start(events: mpsc::UnboundedSender<PathEvent>) -> std::sync::mpsc::Sender<Message> {
    let (tx, rx) = std::sync::mpsc::channel();
    let wake = tx.clone();
    let watcher = notify::recommended_watcher(move |_event: notify::Result<notify::Event>| {
        let _ = wake.send(Message::Look);
    });
    if let Err(e) = &watcher {
        tracing::info!("Cannot use inotify, polling watched paths instead: {e}");
    }
    let state = State {
        paths: BTreeMap::new(),
        dirs: BTreeSet::new(),
        watcher: watcher.ok(),
        events,
    };
    std::thread::Builder::new()
        .name("cobble-watch".into())
        .spawn(move || run(state, rx))
        .expect("cannot start the path watcher thread");
    tx
}

struct State {
    /// The last fingerprint of each watched path.
    paths: BTreeMap<PathBuf, Option<Fingerprint>>,
    /// Directories with an inotify watch.
    dirs: BTreeSet<PathBuf>,
    watcher: Option<RecommendedWatcher>,
    events: mpsc::UnboundedSender<PathEvent>,
}

fn run(mut state: State, messages: std::sync::mpsc::Receiver<Message>) {
    use std::sync::mpsc::RecvTimeoutError;
    let mut next_poll = std::time::Instant::now() + POLL_INTERVAL;
    loop {
        let wait = next_poll.saturating_duration_since(std::time::Instant::now());
        match messages.recv_timeout(wait) {
            Ok(Message::Set(paths, baseline, armed)) => {
                state.replace(paths, baseline);
                if let Some(armed) = armed {
                    let _ = armed.send(());
                }
            }
            Ok(Message::Look) => {
                // Coalesce a burst of inotify events into one look; keep any new path set.
                let mut sets = Vec::new();
                while let Ok(message) = messages.try_recv() {
                    if let Message::Set(paths, baseline, armed) = message {
                        sets.push((paths, baseline, armed));
                    }
                }
                state.look();
                for (paths, baseline, armed) in sets {
                    state.replace(paths, baseline);
                    if let Some(armed) = armed {
                        let _ = armed.send(());
                    }
                }
            }
            Err(RecvTimeoutError::Timeout) => {
                if !state.paths.is_empty() {
                    state.look();
                }
                next_poll = std::time::Instant::now() + POLL_INTERVAL;
            }
            // The inotify callback holds a sender too, so this only happens when both the
            // handles and the inotify watcher are gone.
            Err(RecvTimeoutError::Disconnected) => return,
        }
        if state.events.is_closed() {
            return;
        }
    }
}

impl State {
    fn replace(&mut self, paths: BTreeSet<PathBuf>, baseline: Baseline) {
        self.paths.retain(|p, _| paths.contains(p));
        for path in paths {
            if self.paths.contains_key(&path) {
                continue;
            }
            let now = fingerprint(&path);
            let _ = self.events.send(PathEvent {
                path: path.clone(),
                exists: now.is_some(),
                initial: baseline.get(&path).is_none_or(|then| *then == now),
                fingerprint: now,
            });
            self.paths.insert(path, now);
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
                        initial: false,
                        fingerprint: now,
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

    /// The next event, as the tests compare it: without its fingerprint, whose values are
    /// the file system's (the tests of baselines look at it whole).
    async fn next_event(rx: &mut mpsc::UnboundedReceiver<PathEvent>) -> PathEvent {
        said(next_whole(rx).await)
    }

    async fn next_whole(rx: &mut mpsc::UnboundedReceiver<PathEvent>) -> PathEvent {
        tokio::time::timeout(DEADLINE, rx.recv())
            .await
            .expect("an event in time")
            .expect("watcher alive")
    }

    fn said(event: PathEvent) -> PathEvent {
        PathEvent {
            fingerprint: None,
            ..event
        }
    }

    fn change(path: &Path, exists: bool) -> PathEvent {
        PathEvent {
            path: path.to_owned(),
            exists,
            initial: false,
            fingerprint: None,
        }
    }

    fn found(path: &Path, exists: bool) -> PathEvent {
        PathEvent {
            initial: true,
            ..change(path, exists)
        }
    }

    /// Watches exactly `paths` and returns what the watcher said about them when it armed
    /// (and anything earlier changes reported): once the ticket resolves, all of it is in the
    /// channel.
    async fn watch(
        watcher: &PathWatcher,
        rx: &mut mpsc::UnboundedReceiver<PathEvent>,
        paths: &[&Path],
    ) -> Vec<PathEvent> {
        watch_from(watcher, rx, paths, Baseline::new())
            .await
            .into_iter()
            .map(said)
            .collect()
    }

    /// [`watch`] from `baseline`, the events whole.
    async fn watch_from(
        watcher: &PathWatcher,
        rx: &mut mpsc::UnboundedReceiver<PathEvent>,
        paths: &[&Path],
        baseline: Baseline,
    ) -> Vec<PathEvent> {
        let set = paths.iter().map(|p| p.to_path_buf()).collect();
        watcher.set_from(set, baseline).await.unwrap();
        let mut events = Vec::new();
        while let Ok(event) = rx.try_recv() {
            events.push(event);
        }
        events
    }

    /// Re-arms `path` from a fresh baseline and discards what earlier changes reported: a
    /// single write can show up as two changes (truncate, then write).
    async fn settle(
        watcher: &PathWatcher,
        rx: &mut mpsc::UnboundedReceiver<PathEvent>,
        path: &Path,
    ) {
        watch(watcher, rx, &[]).await;
        watch(watcher, rx, &[path]).await;
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
    async fn a_newly_watched_path_is_reported_as_it_is() {
        let (dir, watcher, mut rx) = setup();
        let there = dir.path().join("there");
        let missing = dir.path().join("missing");
        fs::write(&there, "x").unwrap();
        let initial = watch(&watcher, &mut rx, &[&there, &missing]).await;
        assert_eq!(initial, [found(&missing, false), found(&there, true)]);
        // Watched already: not reported again when the set is given anew.
        assert!(
            watch(&watcher, &mut rx, &[&there, &missing])
                .await
                .is_empty()
        );
    }

    #[tokio::test]
    async fn each_event_carries_the_fingerprint_it_reports() {
        let (dir, watcher, mut rx) = setup();
        let path = dir.path().join("cert.pem");
        let [event] = &watch_from(&watcher, &mut rx, &[&path], Baseline::new()).await[..] else {
            panic!("one event");
        };
        assert_eq!(event.fingerprint, None);
        // Renamed into place: one change (a write in place can be seen half done).
        let tmp = dir.path().join(".cert.tmp");
        fs::write(&tmp, "one").unwrap();
        fs::rename(&tmp, &path).unwrap();
        let event = next_whole(&mut rx).await;
        assert!(event.exists);
        assert_eq!(event.fingerprint, fingerprint(&path));
        assert!(event.fingerprint.is_some());
    }

    /// What another watcher saw last: a path that changed since reports as a change, one
    /// that did not as found, and one the baseline lacks as found.
    #[tokio::test]
    async fn a_path_newly_watched_from_a_baseline_reports_what_changed_since() {
        let (dir, watcher, mut rx) = setup();
        let [same, changed, appeared, gone, unknown] =
            ["same", "changed", "appeared", "gone", "unknown"].map(|n| dir.path().join(n));
        for path in [&same, &changed, &gone, &unknown] {
            fs::write(path, "before").unwrap();
        }
        let baseline: Baseline = [&same, &changed, &appeared, &gone]
            .into_iter()
            .map(|p| (p.clone(), fingerprint(p)))
            .collect();
        // Another size: a different fingerprint, whatever the clock's granularity.
        fs::write(&changed, "after, longer").unwrap();
        fs::write(&appeared, "new").unwrap();
        fs::remove_file(&gone).unwrap();
        let events = watch_from(
            &watcher,
            &mut rx,
            &[&same, &changed, &appeared, &gone, &unknown],
            baseline.clone(),
        )
        .await;
        assert_eq!(
            events.into_iter().map(said).collect::<Vec<_>>(),
            [
                change(&appeared, true),
                change(&changed, true),
                change(&gone, false),
                found(&same, true),
                found(&unknown, true),
            ]
        );
        // Watched already: a baseline given again is not compared again.
        assert!(
            watch_from(&watcher, &mut rx, &[&changed], baseline)
                .await
                .is_empty()
        );
    }

    #[tokio::test]
    async fn a_path_in_directories_that_do_not_exist_yet() {
        let (dir, watcher, mut rx) = setup();
        let path = dir.path().join("a/b/c/cert.pem");
        watch(&watcher, &mut rx, &[&path]).await;
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&path, "cert").unwrap();
        assert_eq!(next_event(&mut rx).await, change(&path, true));
    }

    #[tokio::test]
    async fn in_place_write_rename_delete_and_recreate() {
        let (dir, watcher, mut rx) = setup();
        let path = dir.path().join("cert.pem");
        fs::write(&path, "one").unwrap();
        watch(&watcher, &mut rx, &[&path]).await;

        fs::write(&path, "two, longer").unwrap();
        assert_eq!(
            next_event(&mut rx).await,
            change(&path, true),
            "in-place write"
        );
        settle(&watcher, &mut rx, &path).await;

        let tmp = dir.path().join(".cert.tmp");
        fs::write(&tmp, "three").unwrap();
        fs::rename(&tmp, &path).unwrap();
        assert_eq!(
            next_event(&mut rx).await,
            change(&path, true),
            "atomic rename"
        );
        settle(&watcher, &mut rx, &path).await;

        fs::remove_file(&path).unwrap();
        assert_eq!(next_event(&mut rx).await, change(&path, false), "delete");
        settle(&watcher, &mut rx, &path).await;

        fs::write(&path, "four").unwrap();
        assert_eq!(next_event(&mut rx).await, change(&path, true), "re-create");
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
        watch(&watcher, &mut rx, &[&path]).await;

        fs::create_dir(root.join("..v2")).unwrap();
        fs::write(root.join("..v2/cert.pem"), "v2").unwrap();
        std::os::unix::fs::symlink("..v2", root.join("..data_tmp")).unwrap();
        fs::rename(root.join("..data_tmp"), root.join("..data")).unwrap();
        assert_eq!(next_event(&mut rx).await, change(&path, true));
    }

    #[tokio::test]
    async fn unwatched_paths_are_not_reported() {
        let (dir, watcher, mut rx) = setup();
        let watched = dir.path().join("watched");
        watch(&watcher, &mut rx, &[&watched]).await;
        fs::write(dir.path().join("other"), "x").unwrap();
        fs::write(&watched, "x").unwrap();
        assert_eq!(next_event(&mut rx).await.path, watched);
        watch(&watcher, &mut rx, &[]).await;
        fs::write(&watched, "changed").unwrap();
        // Watch something else and change it: its event must be the next one, with nothing
        // about the unwatched path before it (events leave the watcher in order).
        let marker = dir.path().join("marker");
        watch(&watcher, &mut rx, &[&marker]).await;
        fs::write(&marker, "x").unwrap();
        assert_eq!(next_event(&mut rx).await, change(&marker, true));
    }
}
