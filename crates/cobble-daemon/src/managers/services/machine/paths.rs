//! What paths mean to a service: the `requires-paths` it waits for, the paths its failure
//! output named as missing, and its `on-file-change` paths, whose changes are coalesced over
//! [`FILE_CHANGE_DEBOUNCE`] into one restart or signal.

use tokio::time::Instant;

use super::types::{AfterExit, FILE_CHANGE_DEBOUNCE, StartOutcome, StopOutcome, Wanted};
use super::{Action, Event, FileAction, Machine, Phase};

impl Machine {
    /// Every path the service cares about now: the `requires-paths` it waits for, the paths
    /// its failure output named while it backs off, and its `on-file-change` paths while it
    /// is wanted running.
    pub(crate) fn watched_paths(&self) -> impl Iterator<Item = &str> {
        let waiting = self.waiting_for.iter();
        let hints = self
            .hints
            .iter()
            .filter(|_| matches!(self.phase, Phase::Backoff { .. }));
        let files = self
            .policy
            .on_file_change
            .keys()
            .filter(|_| self.wanted == Wanted::Running);
        waiting.chain(hints).chain(files).map(String::as_str)
    }

    /// What the watcher's report on a path means for this service, as events to feed it:
    /// `initial` is the state found when the path was newly watched (which can end a wait,
    /// but is no change of the file), otherwise it changed.
    pub(crate) fn path_events(&self, path: &str, exists: bool, initial: bool) -> Vec<Event> {
        let mut events = Vec::new();
        if exists && self.phase == Phase::Waiting && self.waiting_for.iter().any(|p| p == path) {
            events.push(Event::PathAppeared(path.to_owned()));
        }
        if exists
            && matches!(self.phase, Phase::Backoff { .. })
            && self.hints.iter().any(|p| p == path)
        {
            events.push(Event::RetryNow);
        }
        if let Some(action) = self.policy.on_file_change.get(path).filter(|_| !initial) {
            events.push(Event::FileChanged(action.clone()));
        }
        events
    }

    pub(super) fn on_paths_missing(&mut self, missing: Vec<String>, actions: &mut Vec<Action>) {
        let Phase::Spawning { restart } = self.phase else {
            return;
        };
        // A start that waited for a one-shot's run is answered here too.
        let pending = std::mem::take(&mut self.start_pending);
        let explicit = !restart || pending;
        if self.client_stopped {
            if explicit {
                actions.push(Action::StartDone(StartOutcome::Waiting { missing }));
            }
            self.phase = Phase::Stopped;
            actions.push(Action::StopDone(StopOutcome::Stopped));
            return;
        }
        if explicit {
            actions.push(Action::StartDone(StartOutcome::Waiting {
                missing: missing.clone(),
            }));
        }
        actions.push(Action::Log(format!(
            "Service \"{}\" waiting for {}",
            self.name,
            missing.join(", ")
        )));
        self.waiting_for = missing;
        self.phase = Phase::Waiting;
    }

    /// A `requires-paths` path exists now: the last one ends the wait.
    pub(super) fn on_path_appeared(&mut self, path: String, actions: &mut Vec<Action>) {
        if self.phase == Phase::Waiting {
            self.waiting_for.retain(|p| *p != path);
            if self.waiting_for.is_empty() {
                // The spawn checks every required path again.
                self.respawn(actions);
            }
        }
    }

    /// The failure output named these missing paths: their appearance ends the backoff.
    pub(super) fn on_missing_named(&mut self, paths: Vec<String>, actions: &mut Vec<Action>) {
        if matches!(self.phase, Phase::Backoff { .. }) && !paths.is_empty() {
            actions.push(Action::Log(format!(
                "Service \"{}\" will retry as soon as {} exists",
                self.name,
                paths.join(", ")
            )));
            self.hints = paths;
        }
    }

    /// A path the failure output named appeared: the backoff ends now.
    pub(super) fn on_retry_now(&mut self, actions: &mut Vec<Action>) {
        if matches!(self.phase, Phase::Backoff { .. }) {
            actions.push(Action::Log(format!(
                "Service \"{}\" retrying now: a path it was missing appeared",
                self.name
            )));
            self.respawn(actions);
        }
    }

    pub(super) fn on_file_changed(&mut self, now: Instant, action: FileAction) {
        // A process being spawned has not read its files yet: it will see this change.
        if self.wanted != Wanted::Running || matches!(self.phase, Phase::Spawning { .. }) {
            return;
        }
        self.file_change = match self.file_change.take() {
            None => Some((now + FILE_CHANGE_DEBOUNCE, action)),
            // Within the window a restart covers a signal, never the other way round.
            Some((at, pending)) => {
                let action = if pending == FileAction::Restart {
                    pending
                } else {
                    action
                };
                Some((at, action))
            }
        };
    }

    pub(super) fn on_file_change_due(&mut self, now: Instant, actions: &mut Vec<Action>) {
        let Some((at, action)) = self.file_change.clone() else {
            return;
        };
        if now < at {
            return;
        }
        match (&action, self.phase) {
            // Let a start finish its okay delay first; its waiters expect an outcome.
            (_, Phase::Starting { okay_at, .. }) => {
                self.file_change = Some((okay_at, action));
                return;
            }
            (FileAction::Restart, Phase::Running { pid }) => {
                actions.push(Action::Log(format!(
                    "Service \"{}\" on-file-change action is \"restart\", terminating process before restarting",
                    self.name
                )));
                self.terminate(now, pid, AfterExit::Respawn, actions);
            }
            (FileAction::Restart, Phase::Backoff { .. }) => self.respawn(actions),
            (FileAction::Signal(signal), Phase::Running { pid }) => {
                actions.push(Action::SignalProcess {
                    pid,
                    signal: signal.clone(),
                });
            }
            _ => {}
        }
        self.file_change = None;
    }
}

#[cfg(test)]
mod tests;
