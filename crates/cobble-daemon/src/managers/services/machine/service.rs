//! The transitions of the service's own process: start (or, while its `requires-checks` do
//! not pass, a wait), spawn, ready, stop, abort, exit, and the timers that a live or ending
//! process runs on (the okay delay, the backoff reset, the kill delay and the give-up). The
//! watchdog's own transitions are in `watchdog`.

use std::time::Duration;

use tokio::time::Instant;

use super::types::{
    AfterExit, ExitAction, FAIL_DELAY, OKAY_DELAY, READY_TIMEOUT, StartOutcome, StopOutcome, Wanted,
};
use super::{Action, GroupSignal, Machine, OneshotState, Phase, Policy, format_secs};

impl Machine {
    /// Spawns again after backoff, waiting or a restart: straight to running, nobody waits
    /// on an okay delay. A file change still pending is moot: the new process reads the
    /// files as they are now (the change that ended a wait for a required path would
    /// otherwise restart the service a moment after it started).
    pub(super) fn respawn(&mut self, actions: &mut Vec<Action>) {
        self.hints.clear();
        self.backoff_check = None;
        self.file_change = None;
        self.spawn_unless_waiting(true, actions);
    }

    /// Spawns the process, or, while some `requires-checks` do not pass or some one-shots of
    /// `after:` hold it back, waits for them. An explicit start (`restart` false, or one that
    /// still waits for its answer) is answered that it waits, unless all that holds it back
    /// are one-shots under way: then the answer waits for their end, and a completion spawns
    /// the service as the start it was asked for.
    pub(super) fn spawn_unless_waiting(&mut self, restart: bool, actions: &mut Vec<Action>) {
        let explicit = !restart || self.start_pending;
        let missing: Vec<String> = self
            .policy
            .requires_checks
            .iter()
            .filter(|check| !self.checks.passing.contains(*check))
            .cloned()
            .collect();
        let oneshots = self.oneshots_holding();
        if missing.is_empty() && oneshots.is_empty() {
            self.waiting_checks.clear();
            self.waiting_oneshots.clear();
            self.start_pending = false;
            self.phase = Phase::Spawning { restart: !explicit };
            actions.push(Action::Spawn);
            return;
        }
        let under_way = missing.is_empty()
            && oneshots
                .iter()
                .all(|(_, state)| *state == OneshotState::Running);
        let mut waiting_for: Vec<String> =
            missing.iter().map(|c| format!("check \"{c}\"")).collect();
        waiting_for.extend(
            oneshots
                .iter()
                .map(|(name, _)| format!("one-shot \"{name}\" to complete")),
        );
        if explicit && under_way {
            self.start_pending = true;
        } else if explicit {
            self.start_pending = false;
            actions.push(Action::StartDone(StartOutcome::Waiting {
                missing: waiting_for.clone(),
            }));
        }
        let names = |list: &[(String, OneshotState)]| -> Vec<String> {
            list.iter().map(|(name, _)| name.clone()).collect()
        };
        if self.phase != Phase::Waiting
            || self.waiting_checks != missing
            || names(&self.waiting_oneshots) != names(&oneshots)
        {
            let what = if oneshots.is_empty() {
                format!("{} to succeed", quoted_checks(&missing))
            } else {
                waiting_for.join(", ")
            };
            actions.push(Action::Log(format!(
                "Service \"{}\" waiting for {what}",
                self.name
            )));
        }
        self.waiting_checks = missing;
        self.waiting_oneshots = oneshots;
        self.phase = Phase::Waiting;
    }

    pub(super) fn on_start(&mut self, policy: Policy, again: bool, actions: &mut Vec<Action>) {
        // The configuration is refreshed by every explicit start, even a no-op one.
        self.policy = policy;
        self.client_stopped = false;
        match self.phase {
            Phase::Completed if !again && self.policy.oneshot => {
                actions.push(Action::StartDone(StartOutcome::AlreadyCompleted));
            }
            Phase::Spawning { .. } if self.policy.oneshot => {
                // A run is about to be under way: this start is answered when it ends.
                self.wanted = Wanted::Running;
                self.start_pending = true;
            }
            Phase::Running { .. } if self.oneshot_run => {
                // A run is under way: this start is answered when it ends.
                self.wanted = Wanted::Running;
                self.start_pending = true;
            }
            Phase::Spawning { .. } | Phase::Starting { .. } | Phase::Running { .. } => {
                self.wanted = Wanted::Running;
                actions.push(Action::StartDone(StartOutcome::AlreadyStarted));
            }
            Phase::Terminating { .. } | Phase::Killing { .. } => {
                let state = if matches!(self.phase, Phase::Killing { .. }) {
                    "killing"
                } else {
                    "terminating"
                };
                actions.push(Action::StartDone(StartOutcome::Failed {
                    error: format!("cannot start service while {state}"),
                    with_output: false,
                }));
            }
            Phase::Idle
            | Phase::Backoff { .. }
            | Phase::Stopped
            | Phase::Exited
            | Phase::Completed
            | Phase::Waiting => {
                self.wanted = Wanted::Running;
                self.backoff_num = 0;
                self.backoff_time = Duration::ZERO;
                self.hints.clear();
                self.backoff_check = None;
                self.waiting_for.clear();
                self.file_change = None;
                self.streaks.clear();
                self.held.clear();
                self.start_pending = false;
                self.spawn_unless_waiting(false, actions);
            }
        }
    }

    pub(super) fn on_spawned(&mut self, now: Instant, pid: u32, actions: &mut Vec<Action>) {
        let Phase::Spawning { restart } = self.phase else {
            return;
        };
        self.spawn_error = None;
        if self.client_stopped {
            // Stopped while it was being spawned: stop what came of it.
            let pending = std::mem::take(&mut self.start_pending);
            if !restart || pending {
                actions.push(Action::StartDone(StartOutcome::Failed {
                    error: format!("stopped before the {} okay delay", format_secs(OKAY_DELAY)),
                    with_output: false,
                }));
            }
            self.terminate(now, pid, AfterExit::Stop, actions);
            return;
        }
        self.reset_at = Some(now + self.policy.backoff_limit);
        self.spawned_at = Some(now);
        self.watchdog = self.new_watchdog();
        self.oneshot_run = self.policy.oneshot;
        self.phase = if self.policy.oneshot {
            // A one-shot's start is its whole run: answered when it exits.
            if !restart {
                self.start_pending = true;
            }
            Phase::Running { pid }
        } else if self.policy.notify {
            // Every run, a restart's too, starts when the service says it is ready.
            Phase::Starting {
                pid,
                okay_at: now + READY_TIMEOUT,
                ready_signal: true,
            }
        } else if restart {
            Phase::Running { pid }
        } else {
            Phase::Starting {
                pid,
                okay_at: now + OKAY_DELAY,
                ready_signal: false,
            }
        };
    }

    /// The service said it is ready: a start waiting for that has succeeded.
    pub(super) fn on_ready(&mut self, now: Instant, pid: u32, actions: &mut Vec<Action>) {
        let Phase::Starting {
            pid: current,
            ready_signal: true,
            ..
        } = self.phase
        else {
            return;
        };
        if current != pid {
            return;
        }
        actions.push(Action::Log(format!("Service \"{}\" is ready", self.name)));
        self.phase = Phase::Running { pid };
        self.watch_from(now);
        actions.push(Action::StartDone(StartOutcome::Started));
        // A file change that came while it started is due now that it runs.
        if let Some((at, _)) = &mut self.file_change {
            *at = (*at).min(now);
        }
    }

    pub(super) fn on_spawn_failed(
        &mut self,
        now: Instant,
        error: String,
        actions: &mut Vec<Action>,
    ) {
        let Phase::Spawning { restart } = self.phase else {
            return;
        };
        self.spawn_error = Some(error.clone());
        let pending = std::mem::take(&mut self.start_pending);
        if !restart || pending {
            // The start fails with Pebble's text either way.
            actions.push(Action::StartDone(StartOutcome::Failed {
                error: error.clone(),
                with_output: false,
            }));
        }
        if self.client_stopped {
            self.phase = Phase::Stopped;
            actions.push(Action::StopDone(StopOutcome::Stopped));
        } else if self.policy.on_failure == ExitAction::Restart {
            // Pebble gives up here (or, during a backoff restart, sticks in backoff with no
            // timer); a missing binary or directory may well appear, so keep retrying.
            actions.push(Action::Log(format!(
                "Service \"{}\" cannot be started, will retry: {error}",
                self.name
            )));
            self.back_off(now, "on-failure", actions);
        } else {
            self.phase = Phase::Stopped;
            self.wanted = Wanted::Stopped;
        }
    }

    pub(super) fn on_stop(&mut self, now: Instant, actions: &mut Vec<Action>) {
        // A start that waits for a one-shot's run which a check or a file change is
        // restarting: the stop ends it. (Spawning, waiting and running answer it below.)
        if self.start_pending
            && !matches!(
                self.phase,
                Phase::Spawning { .. } | Phase::Waiting | Phase::Running { .. }
            )
        {
            self.start_pending = false;
            actions.push(Action::StartDone(StartOutcome::Failed {
                error: "stopped before it completed".into(),
                with_output: false,
            }));
        }
        self.wanted = Wanted::Stopped;
        self.client_stopped = true;
        self.file_change = None;
        self.streaks.clear();
        self.held.clear();
        match self.phase {
            Phase::Idle => actions.push(Action::StopDone(StopOutcome::NeverStarted)),
            Phase::Terminating { .. } | Phase::Killing { .. } => {
                // A restart in progress becomes a plain stop, but the request does not wait.
                self.after_exit = AfterExit::Stop;
                actions.push(Action::StopDone(StopOutcome::AlreadyStopping));
            }
            Phase::Stopped => actions.push(Action::StopDone(StopOutcome::AlreadyStopped)),
            Phase::Completed => {
                // The completion is forgotten: autostart and replan run it again.
                self.phase = Phase::Stopped;
                self.completion = None;
                actions.push(Action::StopDone(StopOutcome::HadExited));
            }
            Phase::Exited => {
                self.phase = Phase::Stopped;
                actions.push(Action::StopDone(StopOutcome::HadExited));
            }
            Phase::Backoff { .. } => {
                self.phase = Phase::Stopped;
                self.hints.clear();
                self.backoff_check = None;
                actions.push(Action::Log(format!(
                    "Service \"{}\" stopped while waiting for backoff",
                    self.name
                )));
                actions.push(Action::StopDone(StopOutcome::Stopped));
            }
            Phase::Waiting => {
                if std::mem::take(&mut self.start_pending) {
                    actions.push(Action::StartDone(StartOutcome::Failed {
                        error: "stopped while waiting for the one-shots it is ordered after".into(),
                        with_output: false,
                    }));
                }
                self.phase = Phase::Stopped;
                self.waiting_for.clear();
                self.waiting_checks.clear();
                self.waiting_oneshots.clear();
                actions.push(Action::StopDone(StopOutcome::Stopped));
            }
            Phase::Spawning { .. } => {
                // The spawn is under way; its outcome meets the stop (see `on_spawned`), and
                // the stop request is answered then.
            }
            Phase::Starting { pid, .. } | Phase::Running { pid } => {
                if let Phase::Starting { ready_signal, .. } = self.phase {
                    let error = if ready_signal {
                        "stopped before it said it was ready".to_owned()
                    } else {
                        format!("stopped before the {} okay delay", format_secs(OKAY_DELAY))
                    };
                    actions.push(Action::StartDone(StartOutcome::Failed {
                        error,
                        with_output: false,
                    }));
                } else if std::mem::take(&mut self.start_pending) {
                    actions.push(Action::StartDone(StartOutcome::Failed {
                        error: "stopped before it completed".into(),
                        with_output: false,
                    }));
                }
                self.terminate(now, pid, AfterExit::Stop, actions);
            }
        }
    }

    pub(super) fn on_abort_start(&mut self, actions: &mut Vec<Action>) {
        if self.start_pending && self.phase == Phase::Waiting {
            self.start_pending = false;
            self.phase = Phase::Stopped;
            self.wanted = Wanted::Stopped;
            self.client_stopped = true;
            self.waiting_checks.clear();
            self.waiting_oneshots.clear();
            actions.push(Action::StartDone(StartOutcome::Failed {
                error: "start aborted while waiting".into(),
                with_output: false,
            }));
            return;
        }
        // A start being carried out: a daemon within its okay delay, or a one-shot's run.
        let starting = match self.phase {
            Phase::Starting { pid, .. } => Some(pid),
            Phase::Running { pid } if self.start_pending => Some(pid),
            _ => None,
        };
        if let Some(pid) = starting {
            self.start_pending = false;
            self.phase = Phase::Stopped;
            self.wanted = Wanted::Stopped;
            self.client_stopped = true;
            actions.push(Action::Signal {
                pid,
                signal: GroupSignal::Kill,
            });
            actions.push(Action::StartDone(StartOutcome::Failed {
                error: "start aborted, sent SIGKILL to process".into(),
                with_output: false,
            }));
        }
    }

    pub(super) fn on_exited(
        &mut self,
        now: Instant,
        pid: u32,
        code: i32,
        actions: &mut Vec<Action>,
    ) {
        if self.pid() != Some(pid) {
            return; // a stale exit, e.g. after an aborted start
        }
        self.last_exit = Some(code);
        let ran_for = self.spawned_at.map(|at| now.saturating_duration_since(at));
        if self
            .exit_cause
            .as_ref()
            .is_some_and(|(killed, _)| *killed != pid)
        {
            self.exit_cause = None;
        }
        self.reset_at = None;
        self.spawned_at = None;
        let oneshot_run = std::mem::take(&mut self.oneshot_run);
        self.watchdog = None;
        // A hold is for a running process; the checks act again on what comes next.
        self.held.clear();
        match self.phase {
            // A one-shot's run, even if a start since has made the service a daemon.
            Phase::Running { .. } if oneshot_run => {
                self.oneshot_exited(now, pid, code, ran_for.unwrap_or_default(), actions);
            }
            Phase::Starting { .. } | Phase::Running { .. } => {
                let (action, on_type) = self.exit_action(code);
                if matches!(self.phase, Phase::Starting { .. }) {
                    actions.push(Action::StartDone(StartOutcome::Failed {
                        error: format!(
                            "service start attempt: exited quickly with {}, will {}",
                            self.exit_text(code),
                            action.as_str()
                        ),
                        with_output: true,
                    }));
                }
                actions.push(Action::Log(format!(
                    "Service \"{}\" stopped unexpectedly with {}",
                    self.name,
                    self.exit_text(code)
                )));
                // The service is its main process: what it leaves behind goes with it.
                actions.push(Action::EndRemains {
                    pid,
                    kill_delay: self.policy.kill_delay,
                });
                self.apply_exit_action(now, code != 0, action, on_type, actions);
            }
            Phase::Terminating { .. } | Phase::Killing { .. } => {
                actions.push(Action::EndGroup { pid });
                match std::mem::replace(&mut self.after_exit, AfterExit::Stop) {
                    AfterExit::CheckRestart(check) => {
                        actions.push(Action::Log(format!(
                            "Service \"{}\" exited after check failure, restarting",
                            self.name
                        )));
                        self.back_off_for_check(now, check, actions);
                    }
                    AfterExit::Respawn => {
                        actions.push(Action::Log(format!(
                            "Service \"{}\" exited after a file change, restarting",
                            self.name
                        )));
                        self.respawn(actions);
                    }
                    AfterExit::Failed => {
                        let action = self.policy.on_failure;
                        self.apply_exit_action(now, code != 0, action, "on-failure", actions);
                    }
                    AfterExit::Watchdog => {
                        actions.push(Action::Log(format!(
                            "Service \"{}\" ended after its watchdog failure with code {code}",
                            self.name
                        )));
                        // Whatever the code: the watchdog decided that it failed.
                        let action = self.policy.on_failure;
                        self.apply_exit_action(now, true, action, "on-failure", actions);
                    }
                    AfterExit::Stop => {
                        actions.push(Action::Log(format!("Service \"{}\" stopped", self.name)));
                        self.phase = Phase::Stopped;
                        actions.push(Action::StopDone(StopOutcome::Stopped));
                    }
                }
            }
            _ => {}
        }
    }

    /// The kernel, not a signal anyone sent, killed the process `pid`: its exit follows.
    pub(super) fn on_killed_by(&mut self, pid: u32, cause: String) {
        if self.pid() == Some(pid) {
            self.exit_cause = Some((pid, cause));
        }
    }

    /// `code N`, with the cause when the kernel killed the process.
    pub(super) fn exit_text(&self, code: i32) -> String {
        match self.last_exit_cause() {
            Some(cause) => format!("code {code} ({cause})"),
            None => format!("code {code}"),
        }
    }

    fn exit_action(&self, code: i32) -> (ExitAction, &'static str) {
        if code == 0 {
            (self.policy.on_success, "on-success")
        } else {
            (self.policy.on_failure, "on-failure")
        }
    }

    /// What follows an exit that `failed` (a non-zero code, or a failure cobble found).
    pub(super) fn apply_exit_action(
        &mut self,
        now: Instant,
        failed: bool,
        action: ExitAction,
        on_type: &str,
        actions: &mut Vec<Action>,
    ) {
        let name = &self.name;
        let action_name = action.as_str();
        let exit_code = match action {
            ExitAction::Restart => {
                self.back_off(now, on_type, actions);
                return;
            }
            ExitAction::Ignore => {
                actions.push(Action::Log(format!(
                    "Service \"{name}\" {on_type} action is \"{action_name}\", not doing anything further"
                )));
                self.phase = if failed {
                    Phase::Exited
                } else {
                    Phase::Stopped
                };
                self.wanted = Wanted::Stopped;
                return;
            }
            ExitAction::Shutdown if !failed => 0,
            ExitAction::Shutdown | ExitAction::FailureShutdown => 10,
            ExitAction::SuccessShutdown => 0,
        };
        let kind = if exit_code == 0 { "success" } else { "failure" };
        actions.push(Action::Log(format!(
            "Service \"{name}\" {on_type} action is \"{action_name}\", triggering {kind} shutdown"
        )));
        self.phase = Phase::Exited;
        self.wanted = Wanted::Stopped;
        actions.push(Action::Shutdown(exit_code));
    }

    /// Applies the milestones a live process has passed by `now`, whatever the event: a
    /// process past its okay delay has started, one that ran for the backoff limit has reset
    /// its backoff. Their ticks may come late (a busy executor) or after the event that
    /// needs them: an exit at 1.5 s is the exit of a started service even if the 1 s tick
    /// has not been handled yet.
    pub(super) fn catch_up(&mut self, now: Instant, actions: &mut Vec<Action>) {
        if let Phase::Starting {
            pid,
            okay_at,
            ready_signal,
        } = self.phase
            && now >= okay_at
        {
            if ready_signal {
                // Never said it was ready: a failed start, ended like a stop and then
                // handled as a failure.
                let error = format!(
                    "service did not say it was ready (READY=1) within {}",
                    format_secs(READY_TIMEOUT)
                );
                actions.push(Action::Log(format!("Service \"{}\" {error}", self.name)));
                actions.push(Action::StartDone(StartOutcome::Failed {
                    error,
                    with_output: true,
                }));
                self.terminate(now, pid, AfterExit::Failed, actions);
            } else {
                self.phase = Phase::Running { pid };
                actions.push(Action::StartDone(StartOutcome::Started));
            }
        }
        if matches!(self.phase, Phase::Running { .. }) && self.reset_at.is_some_and(|at| now >= at)
        {
            // Running for the whole backoff limit: the next failure starts from scratch.
            self.reset_at = None;
            self.backoff_num = 0;
            self.backoff_time = Duration::ZERO;
        }
    }

    pub(super) fn on_tick(&mut self, now: Instant, actions: &mut Vec<Action>) {
        match self.phase {
            Phase::Terminating { pid, kill_at } if now >= kill_at => {
                actions.push(Action::Signal {
                    pid,
                    signal: GroupSignal::Kill,
                });
                self.phase = Phase::Killing {
                    pid,
                    give_up_at: now + FAIL_DELAY,
                };
            }
            Phase::Killing { pid, give_up_at } if now >= give_up_at => {
                actions.push(Action::Log(format!(
                    "Service \"{}\" still running after SIGTERM and SIGKILL",
                    self.name
                )));
                actions.push(Action::EndGroup { pid });
                if self.after_exit == AfterExit::Stop {
                    self.phase = Phase::Stopped;
                    actions.push(Action::StopDone(StopOutcome::Failed(
                        "process still running after SIGTERM and SIGKILL".into(),
                    )));
                } else {
                    // Still wanted running: keep trying rather than end up stopped.
                    self.after_exit = AfterExit::Stop;
                    self.back_off(now, "restart", actions);
                }
            }
            Phase::Backoff { until } if now >= until => self.respawn(actions),
            Phase::Running { pid } => self.on_watchdog_due(now, pid, actions),
            _ => {}
        }
    }
}

/// `"a"`, `"a" and "b"`, `"a", "b" and "c"`, with "check" or "checks" before them.
fn quoted_checks(checks: &[String]) -> String {
    let quoted: Vec<String> = checks.iter().map(|c| format!("\"{c}\"")).collect();
    match quoted.as_slice() {
        [one] => format!("check {one}"),
        [rest @ .., last] => format!("checks {} and {last}", rest.join(", ")),
        [] => "no check".into(),
    }
}

#[cfg(test)]
mod tests;
