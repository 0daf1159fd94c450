//! Starting a command for an exec check or an exec request, and owning its process group.
//!
//! Every command cobble starts for someone else goes through
//! [`OsProcesses::spawn_recorded`]: its process group is recorded under a name before the
//! command may run, so that a daemon killed at any instant leaves nothing its successor
//! cannot find and end, and the record is forgotten again if the launch fails. The
//! supervisor calls it for services from its own executor ([`super::supervise`]); exec
//! checks and exec requests call it through a [`Launcher`], which runs it on the blocking
//! pool, a few jobs at a time, and hands back the command with its [`Group`].
//!
//! A [`Group`] is the command's process group, owned: its owner signals and kills the
//! command through it, and a group let go of before its command has exited (a probe dropped
//! at its timeout, a check stopped mid-run) is killed with everything in it. An owner that
//! goes away while the launch is still under way is no different: the command is killed the
//! moment it has started. Nothing a launcher starts is ever left running unowned.

use std::sync::Arc;

use cobble_sys::process::{self, Signal};
use tokio::sync::{Semaphore, oneshot};

use super::OsProcesses;
use super::launch::{self, Child, Launch, LaunchError, Wiring};

/// Runs blocking jobs a few at a time, in the order they were asked for.
#[derive(Clone)]
pub(crate) struct Jobs(Arc<Semaphore>);

impl Jobs {
    /// Jobs that run at most `permits` at once.
    pub(crate) fn new(permits: usize) -> Jobs {
        Jobs(Arc::new(Semaphore::new(permits)))
    }

    /// Runs `job` on the blocking pool once a permit is free. The job keeps its permit until
    /// it is done, even when the caller stops waiting for it.
    pub(crate) async fn run<R: Send + 'static>(
        &self,
        job: impl FnOnce() -> R + Send + 'static,
    ) -> Result<R, tokio::task::JoinError> {
        // The semaphore is never closed.
        let permit = self
            .0
            .clone()
            .acquire_owned()
            .await
            .expect("job permits stay open");
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            job()
        })
        .await
    }
}

/// Starts commands whose process groups it records first (when it has a registry to record
/// them in) and hands them to their owners. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Launcher {
    /// Where groups are recorded before their commands run; none in daemons that keep no
    /// state.
    processes: Option<Arc<OsProcesses>>,
    /// Where the launches run.
    jobs: Jobs,
}

impl Launcher {
    /// A launcher that runs at most `permits` launches at once and records nothing.
    pub(crate) fn new(permits: usize) -> Launcher {
        Launcher {
            processes: None,
            jobs: Jobs::new(permits),
        }
    }

    /// The same launcher, recording each command's process group in `processes` before the
    /// command runs.
    pub(crate) fn recording(self, processes: Arc<OsProcesses>) -> Launcher {
        Launcher {
            processes: Some(processes),
            ..self
        }
    }

    /// The jobs launches run as, for the owner's other blocking work.
    pub(crate) fn jobs(&self) -> &Jobs {
        &self.jobs
    }

    /// Launches `launch`, wired as `wiring` says, recorded as `name`. If the returned future
    /// is dropped before it is done, a command it started is killed.
    pub(crate) async fn launch(
        &self,
        name: String,
        launch: Launch,
        wiring: Wiring,
    ) -> Result<(Child, Group), LaunchError> {
        let (handover, launched) = oneshot::channel();
        let processes = self.processes.clone();
        let job = {
            let name = name.clone();
            move || {
                if handover.is_closed() {
                    return; // its owner is gone already
                }
                let result = match &processes {
                    Some(processes) => processes
                        .spawn_recorded(&name, None, &launch, wiring, |_| {})
                        .map_err(|abandoned| abandoned.error),
                    None => launch::spawn_wired(&launch, wiring),
                };
                if let Err(Ok(orphan)) = handover.send(result) {
                    kill_group(orphan.pid);
                    if let Some(processes) = processes {
                        processes.forget_recorded(&name, orphan.pid);
                    }
                }
            }
        };
        let jobs = self.jobs.clone();
        // The job runs to its end even if this future is dropped: it hands the command over
        // or, with nobody to take it, kills it.
        tokio::spawn(async move { jobs.run(job).await });
        let child = launched
            .await
            .map_err(|_| LaunchError::Setup("cannot start command: launcher gone".into()))??;
        let group = Group {
            pid: child.pid,
            name,
            owner: self.clone(),
            exited: false,
        };
        Ok((child, group))
    }
}

/// The process group of a command a [`Launcher`] started, owned: killed on drop unless the
/// command has [`exited`](Group::exited).
#[must_use = "a group let go of is killed"]
pub(crate) struct Group {
    pid: u32,
    /// What its record is under.
    name: String,
    owner: Launcher,
    exited: bool,
}

impl Group {
    /// The command's pid, which leads the group.
    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    /// SIGKILLs the whole group, so that what the command started goes with it.
    pub(crate) fn kill(&self) {
        kill_group(self.pid);
    }

    /// Sends `signal` to the command alone.
    pub(crate) fn signal(&self, signal: Signal) -> std::io::Result<()> {
        process::signal_pid(self.pid, signal)
    }

    /// The command has exited and its exit status is in: the group is left to whatever is
    /// still in it, never signalled again (its pid may soon be someone else's), and its
    /// record is forgotten.
    pub(crate) fn exited(mut self) {
        self.exited = true;
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        if !self.exited {
            kill_group(self.pid);
        }
        // Forgotten in the background: nothing waits for it, and a daemon killed before it
        // happens only makes its successor check a pid that is gone.
        if let (Some(processes), Ok(runtime)) = (
            self.owner.processes.clone(),
            tokio::runtime::Handle::try_current(),
        ) {
            let (name, pid, jobs) = (
                std::mem::take(&mut self.name),
                self.pid,
                self.owner.jobs.clone(),
            );
            runtime.spawn(async move {
                jobs.run(move || processes.forget_recorded(&name, pid))
                    .await
            });
        }
    }
}

fn kill_group(pid: u32) {
    if let Err(e) = process::signal_group(pid, Signal::SIGKILL) {
        tracing::info!("Cannot kill process group {pid}: {e}");
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::Duration;

    use futures_util::FutureExt;

    use super::*;
    use crate::process::registry::{FILE_NAME, ProcessRegistry};

    fn shell(script: &str) -> Launch {
        Launch::new(
            vec!["/bin/sh".into(), "-c".into(), script.into()],
            Default::default(),
        )
    }

    fn recorded_names(dir: &Path) -> Vec<String> {
        let text = std::fs::read_to_string(dir.join(FILE_NAME)).unwrap_or_default();
        let records: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(text.trim()).unwrap_or_default();
        records.keys().cloned().collect()
    }

    /// Waits until every job queued on `launcher` so far (background forgets included) is
    /// done: its jobs run in the order they were asked for.
    async fn settle(launcher: &Launcher) {
        tokio::task::yield_now().await;
        launcher.jobs().run(|| ()).await.unwrap();
    }

    async fn wait_gone(pid: u32) {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while Path::new(&format!("/proc/{pid}")).exists() {
            assert!(std::time::Instant::now() < deadline, "{pid} survived");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn recording(dir: &Path) -> (Launcher, Arc<OsProcesses>) {
        let processes = Arc::new(OsProcesses::new(ProcessRegistry::new(Some(dir)), None));
        (Launcher::new(1).recording(processes.clone()), processes)
    }

    #[tokio::test]
    async fn a_group_let_go_of_is_killed_and_its_record_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let (launcher, processes) = recording(dir.path());
        let (child, group) = launcher
            .launch("check chk".into(), shell("sleep 30 & wait"), Wiring::Merged)
            .await
            .unwrap();
        // Recorded before it ran.
        assert_eq!(recorded_names(dir.path()), ["check chk"]);
        let pid = group.pid();
        drop(group);
        let status = child.exit.await.unwrap();
        assert_eq!(status.code(), 128 + 9, "killed by SIGKILL: {status:?}");
        wait_gone(pid).await;
        settle(&launcher).await;
        processes.save_registry();
        assert!(recorded_names(dir.path()).is_empty());
    }

    #[tokio::test]
    async fn a_command_that_exited_is_forgotten_and_not_signalled() {
        let dir = tempfile::tempdir().unwrap();
        let (launcher, processes) = recording(dir.path());
        let (child, group) = launcher
            .launch("exec task 1".into(), shell("exit 3"), Wiring::Merged)
            .await
            .unwrap();
        assert_eq!(child.exit.await.unwrap().code(), 3);
        group.exited();
        settle(&launcher).await;
        processes.save_registry();
        assert!(recorded_names(dir.path()).is_empty());
    }

    #[tokio::test]
    async fn a_launch_whose_owner_is_gone_never_runs() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("ran");
        let (launcher, _processes) = recording(dir.path());
        // The only permit is taken: the launch queues behind it.
        let permit = launcher.jobs.0.clone().acquire_owned().await.unwrap();
        let launch = shell(&format!("touch {}", marker.display()));
        let asked = launcher
            .launch("exec task 2".into(), launch, Wiring::Merged)
            .now_or_never();
        assert!(asked.is_none(), "the launch had to wait for its permit");
        tokio::task::yield_now().await;
        drop(permit);
        settle(&launcher).await;
        assert!(!marker.exists(), "a launch nobody waited for ran");
        assert!(recorded_names(dir.path()).is_empty());
    }

    #[tokio::test]
    async fn an_unrecorded_launcher_launches_and_kills_too() {
        let launcher = Launcher::new(1);
        let (child, group) = launcher
            .launch("check chk".into(), shell("sleep 30"), Wiring::Merged)
            .await
            .unwrap();
        group.kill();
        assert_eq!(child.exit.await.unwrap().code(), 128 + 9);
        group.exited();
    }
}
