//! Cgroups of runs that have ended but still held a process when they were retired (one
//! killed at the stop, still on its way out): each is removed as soon as it empties, not at
//! the next start of a service.
//!
//! A thread of its own, started when there is one to wait for and ended when there is none,
//! waits for them. On cgroup v2 it waits for the kernel's word: `cgroup.events` changes
//! (an inotify modify event) when its `populated` line does, and the thread then tries the
//! removal again, and again every [`WATCHED_RECHECK`] in case an event went unseen. On v1,
//! which has no such file, or where the watch cannot be set, it tries again after 10 ms,
//! then at doubling intervals up to [`POLLED_RECHECK_MAX`], for [`POLLED_FOR`]; one still
//! populated then (a process that ignores SIGKILL in an uninterruptible sleep) is left to
//! the sweep at the next cgroup's creation and to the daemon's exit, so that nothing polls
//! for ever.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use notify::{RecommendedWatcher, RecursiveMode, Watcher};

use super::{ServiceCgroup, lock};

/// How often a cgroup whose `cgroup.events` is watched is tried again without an event.
const WATCHED_RECHECK: Duration = Duration::from_secs(30);
/// The first and the longest interval between tries of a cgroup that is not watched.
const POLLED_RECHECK_FIRST: Duration = Duration::from_millis(10);
const POLLED_RECHECK_MAX: Duration = Duration::from_secs(1);
/// How long a cgroup that is not watched is tried again before it is left to the sweep.
const POLLED_FOR: Duration = Duration::from_secs(300);

/// The retired cgroups, shared with the thread that waits for them to empty.
#[derive(Debug, Default)]
pub(super) struct Retired {
    state: Arc<Mutex<State>>,
}

#[derive(Debug, Default)]
struct State {
    /// The cgroups not removed yet, with when each was retired.
    cgroups: Vec<(ServiceCgroup, Instant)>,
    /// Wakes the waiting thread, while one runs.
    wake: Option<mpsc::Sender<()>>,
}

impl Retired {
    /// Keeps `cgroup`, which could not be removed, until it empties.
    pub(super) fn add(&self, cgroup: ServiceCgroup) {
        let mut state = lock(&self.state);
        state.cgroups.push((cgroup, Instant::now()));
        if let Some(wake) = &state.wake
            && wake.send(()).is_ok()
        {
            return;
        }
        let (wake, woken) = mpsc::channel();
        let shared = self.state.clone();
        let thread = std::thread::Builder::new()
            .name("cobble-cgroups".into())
            .spawn({
                let wake = wake.clone();
                move || wait_for_empty(&shared, &wake, &woken)
            });
        match thread {
            Ok(_) => state.wake = Some(wake),
            Err(e) => tracing::info!(
                "Cannot start the thread that removes ended services' cgroups: {e}; they go at the next start"
            ),
        }
    }

    /// Removes those that have emptied; the rest stay.
    pub(super) fn sweep(&self) {
        lock(&self.state)
            .cgroups
            .retain(|(cgroup, _)| !cgroup.remove());
    }
}

/// The waiting thread: removes each retired cgroup once it is empty, and ends when none is
/// left to wait for.
fn wait_for_empty(state: &Mutex<State>, wake: &mpsc::Sender<()>, woken: &mpsc::Receiver<()>) {
    let watcher = {
        let wake = wake.clone();
        notify::recommended_watcher(move |_: notify::Result<notify::Event>| {
            let _ = wake.send(());
        })
    };
    let mut watcher: Option<RecommendedWatcher> = watcher.ok();
    // The `cgroup.events` files watched.
    let mut watched: BTreeSet<PathBuf> = BTreeSet::new();
    let mut polled_pause = POLLED_RECHECK_FIRST;
    loop {
        let (newly_watched, polled) = {
            let mut state = lock(state);
            state.cgroups.retain(|(cgroup, _)| !cgroup.remove());
            let events: BTreeSet<PathBuf> = state
                .cgroups
                .iter()
                .filter_map(|(cgroup, _)| cgroup.events_file())
                .collect();
            for gone in watched.difference(&events) {
                if let Some(watcher) = watcher.as_mut() {
                    let _ = watcher.unwatch(gone);
                }
            }
            watched.retain(|file| events.contains(file));
            let mut newly_watched = false;
            for file in events.difference(&watched.clone()) {
                if let Some(watcher) = watcher.as_mut()
                    && watcher.watch(file, RecursiveMode::NonRecursive).is_ok()
                {
                    watched.insert(file.clone());
                    newly_watched = true;
                }
            }
            let now = Instant::now();
            let polled = state.cgroups.iter().any(|(cgroup, since)| {
                now.duration_since(*since) < POLLED_FOR
                    && cgroup
                        .events_file()
                        .is_none_or(|file| !watched.contains(&file))
            });
            if watched.is_empty() && !polled {
                // Nothing left to wait for: the rest, if any, is the sweep's.
                state.wake = None;
                return;
            }
            (newly_watched, polled)
        };
        if newly_watched {
            // It may have emptied before its watch was set: look again first.
            continue;
        }
        let pause = if polled {
            let pause = polled_pause;
            polled_pause = (polled_pause * 2).min(POLLED_RECHECK_MAX);
            pause
        } else {
            WATCHED_RECHECK
        };
        match woken.recv_timeout(pause) {
            Ok(()) => {
                // Coalesce a burst of events; a new retirement starts the intervals over.
                while woken.try_recv().is_ok() {}
                polled_pause = POLLED_RECHECK_FIRST;
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
        }
    }
}
