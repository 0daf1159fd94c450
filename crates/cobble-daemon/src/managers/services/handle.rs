//! The handle to the supervisor: [`ServiceManager`], the cheap handle that sends the actor
//! its requests ([`super::messages`]) and awaits each answer on a oneshot channel (a "ticket"
//! resolved once the actor has processed the request).

use std::sync::Arc;

use cobble_plan::Plan;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use super::accounting::Accounting;
use super::machine::{StartOutcome, StopOutcome};
use super::messages::{Request, StartReply};
use super::{ServiceStatus, actor};
use crate::checks::CheckSignals;
use crate::logs::ServiceLog;
use crate::logs::capture::Destinations;
use crate::process::{Processes, Usage};

/// Handle to the service manager actor. Cheap to clone.
#[derive(Clone)]
pub(crate) struct ServiceManager {
    tx: mpsc::UnboundedSender<Request>,
    /// What the services use, read beside the actor (it is `/proc` work).
    accounting: Arc<Accounting>,
    /// The processes' side, for what it knows of a service beside the actor (its sockets).
    processes: Arc<dyn Processes>,
}

/// The manager's error when its task has gone (the daemon is shutting down).
const GONE: &str = "service manager is not running";

impl ServiceManager {
    /// Starts the actor. `shutdown` receives the exit code when a service's action asks the
    /// daemon to stop; `checks` is what the check manager publishes of the checks; `output`
    /// says where service output goes besides each service's ring (the persisted files, the
    /// daemon's stdout under `--verbose`, the log targets). The handle to the actor's task
    /// lets the daemon notice if it ever ends.
    pub(crate) fn spawn(
        plan: watch::Receiver<Arc<Plan>>,
        checks: watch::Receiver<Arc<CheckSignals>>,
        processes: Arc<dyn Processes>,
        output: Destinations,
        shutdown: mpsc::UnboundedSender<i32>,
    ) -> (ServiceManager, JoinHandle<()>) {
        let accounting = Arc::new(Accounting::new(processes.clone()));
        let (tx, task) = actor::spawn(plan, checks, processes.clone(), output, shutdown);
        (
            ServiceManager {
                tx,
                accounting,
                processes,
            },
            task,
        )
    }

    /// What each of `statuses` uses, read at most once a second per service (see
    /// [`super::accounting`]).
    pub(crate) async fn usage(&self, statuses: &[ServiceStatus]) -> Vec<Usage> {
        let targets = statuses.iter().map(|s| (s.name.clone(), s.pid)).collect();
        self.accounting.usage(targets).await
    }

    /// The statuses, each with what the processes' side knows filled into its details: what
    /// it uses, and the sockets held for it.
    pub(crate) async fn with_process_details(
        &self,
        mut statuses: Vec<ServiceStatus>,
    ) -> Vec<ServiceStatus> {
        let usage = self.usage(&statuses).await;
        // The holder's lock is held while a socket is bound (a unix socket's owner may be
        // looked up): read it on the blocking pool.
        let names: Vec<String> = statuses.iter().map(|s| s.name.clone()).collect();
        let processes = self.processes.clone();
        let sockets = tokio::task::spawn_blocking(move || {
            names
                .iter()
                .map(|name| processes.held_sockets(name))
                .collect::<Vec<_>>()
        })
        .await
        .unwrap_or_default();
        for ((status, usage), sockets) in statuses
            .iter_mut()
            .zip(usage)
            .zip(sockets.into_iter().chain(std::iter::repeat_with(Vec::new)))
        {
            if let Some(details) = status.details.as_mut() {
                details.usage = Some(usage);
                details.sockets = sockets;
            }
        }
        statuses
    }

    /// Sends the request `make` builds around a reply channel and waits for the answer;
    /// `None` once the actor has gone.
    async fn call<T>(&self, make: impl FnOnce(oneshot::Sender<T>) -> Request) -> Option<T> {
        let (reply, rx) = oneshot::channel();
        let _ = self.tx.send(make(reply));
        rx.await.ok()
    }

    /// Starts a service and resolves once its start succeeded (the okay delay passed, or a
    /// one-shot completed) or failed. `again` (a client's start or restart) runs a completed
    /// one-shot again; autostart and replan leave it completed.
    pub(crate) async fn start(&self, name: &str, again: bool) -> StartReply {
        let name = name.to_owned();
        self.call(|reply| Request::Start { name, again, reply })
            .await
            .unwrap_or(StartReply {
                outcome: StartOutcome::Failed {
                    error: GONE.into(),
                    with_output: false,
                },
                output: Vec::new(),
            })
    }

    /// Stops a service and resolves once it stopped (or the stop failed).
    pub(crate) async fn stop(&self, name: &str) -> StopOutcome {
        let name = name.to_owned();
        self.call(|reply| Request::Stop { name, reply })
            .await
            .unwrap_or(StopOutcome::Failed(GONE.into()))
    }

    /// Says that a change is about to start these one-shots (`expect`), or that it has asked
    /// for them or given up on them (see [`Request::Expect`]).
    pub(crate) fn expect(&self, names: Vec<String>, expect: bool) {
        if !names.is_empty() {
            let _ = self.tx.send(Request::Expect { names, expect });
        }
    }

    /// Kills a service whose start is being aborted.
    pub(crate) fn abort_start(&self, name: &str) {
        let _ = self.tx.send(Request::AbortStart { name: name.into() });
    }

    /// Statuses of the services this daemon has started among `names` (all of them when
    /// `names` is empty), sorted by name; with the details behind `cobble why` if `details`.
    /// A service of the plan that is not listed was never started: it is `inactive`.
    pub(crate) async fn statuses(&self, names: Vec<String>, details: bool) -> Vec<ServiceStatus> {
        self.call(|reply| Request::Statuses {
            names,
            details,
            reply,
        })
        .await
        .unwrap_or_default()
    }

    /// Sends `signal` (a name such as `SIGHUP`) to each service's main process.
    pub(crate) async fn signal(&self, names: Vec<String>, signal: String) -> Result<(), String> {
        self.call(|reply| Request::Signal {
            names,
            signal,
            reply,
        })
        .await
        .unwrap_or_else(|| Err(GONE.into()))
    }

    /// Services started by this daemon whose configuration in the plan has changed since.
    pub(crate) async fn outdated(&self) -> Vec<String> {
        self.call(|reply| Request::Outdated { reply })
            .await
            .unwrap_or_default()
    }

    /// The output logs of the services among `names` that this daemon has started, sorted
    /// by name; names of services never started are left out, as Pebble leaves them out.
    pub(crate) async fn logs(&self, names: Vec<String>) -> Vec<(String, ServiceLog)> {
        self.call(|reply| Request::Logs { names, reply })
            .await
            .unwrap_or_default()
    }

    /// Gives each service in `logs` the lines its output log had under the daemon that
    /// re-executed into this one (see [`Request::Carry`]); returns once they are there.
    pub(crate) async fn carry_logs(&self, logs: Vec<(String, Vec<crate::logs::ring::LogEntry>)>) {
        self.call(|reply| Request::Carry { logs, reply }).await;
    }

    /// Hands every service started over for a re-execution: the actor stops acting on them.
    /// When one cannot be handed over (see [`Request::TakeOver`] for `endings`), or a
    /// service's process is still being spawned after `wait` (a spawn takes moments, unless
    /// something it waits for hangs), says why, having changed nothing.
    pub(crate) async fn take_over(
        &self,
        endings: bool,
        wait: std::time::Duration,
    ) -> Result<super::messages::TakenOver, Vec<String>> {
        let (reply, mut rx) = oneshot::channel();
        let _ = self.tx.send(Request::TakeOver { endings, reply });
        match tokio::time::timeout(wait, &mut rx).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Err(vec!["the service manager has stopped".to_owned()]),
            // Given up: closed, the actor hands nothing over (and takes back what it handed
            // over as it closed); an answer sent before that is taken.
            Err(_) => {
                rx.close();
                if let Ok(answer) = rx.try_recv() {
                    return answer;
                }
                let seconds = wait.as_secs();
                let mut why: Vec<String> = self
                    .call(|reply| Request::Spawning { reply })
                    .await
                    .unwrap_or_default()
                    .iter()
                    .map(|name| {
                        let name = cobble_plan::go_quote(name);
                        format!("service {name} is still being spawned after {seconds}s")
                    })
                    .collect();
                if why.is_empty() {
                    why.push(format!(
                        "the services were not ready to be handed over after {seconds}s"
                    ));
                }
                Err(why)
            }
        }
    }

    /// Stops the notify sockets' readers for a re-execution (see [`Request::PauseNotify`]);
    /// returns once each has stopped and the actor has handled what they read, or fails if
    /// that takes longer than `wait`.
    pub(crate) async fn pause_notify(&self, wait: std::time::Duration) -> Result<(), String> {
        let paused = self
            .call(|reply| Request::PauseNotify { reply })
            .await
            .ok_or_else(|| "the service manager has stopped".to_owned())?;
        let settled = tokio::time::timeout(wait, async {
            for reader in paused {
                let _ = reader.task.await;
                let _ = reader.in_flight.acquire_many(reader.messages).await;
            }
        })
        .await;
        settled.map_err(|_| "a notify socket's messages are still being handled".to_owned())
    }

    /// Starts the notify sockets' readers a [`ServiceManager::pause_notify`] stopped again.
    pub(crate) fn resume_notify(&self) {
        let _ = self.tx.send(Request::ResumeNotify);
    }

    /// Follows again the services of a [`ServiceManager::take_over`] whose re-execution did
    /// not happen.
    pub(crate) fn resume(&self, services: Vec<(String, Option<crate::logs::capture::Detached>)>) {
        let _ = self.tx.send(Request::Resume { services });
    }

    /// Follows the running services a predecessor handed over, acting on what changed since
    /// in the paths they watch, as `paths` says the predecessor last saw them; returns the
    /// starts and stops they were in the middle of, each answered once it ends.
    pub(crate) async fn adopt(
        &self,
        services: Vec<super::messages::Adoption>,
        paths: crate::watch::Baseline,
    ) -> Vec<(String, super::messages::InFlight)> {
        self.call(|reply| Request::Adopt {
            services,
            paths,
            reply,
        })
        .await
        .unwrap_or_default()
    }

    /// Services that are starting, running or backing off.
    pub(crate) async fn active(&self) -> Vec<String> {
        self.call(|reply| Request::Active { reply })
            .await
            .unwrap_or_default()
    }

    /// Resolves once the actor has taken a request of its own: `true` while it is alive and
    /// takes requests, `false` once it has ended. An actor that is blocked never resolves it.
    pub(crate) async fn ping(&self) -> bool {
        self.call(|reply| Request::Ping { reply }).await.is_some()
    }

    /// Blocks the actor for good, as a bug could (for the tests of what watches it).
    #[cfg(test)]
    pub(crate) fn wedge(&self) {
        let _ = self.tx.send(Request::Wedge);
    }
}
