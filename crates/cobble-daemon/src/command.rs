//! Launching the commands cobble runs for others: services and exec checks.
//!
//! Both get the same treatment: the program found like Go's `exec.LookPath` (clients match on
//! its error text), their own process group (so a stop or a timeout reaches their children),
//! stdin from `/dev/null`, the daemon's environment plus their own, their user, group and
//! working directory, and one pipe carrying both stdout and stderr in the order they were
//! written. Exits arrive through the reaper.
//!
//! [`spawn`] blocks (it looks up users, stats `PATH` entries and forks): call it from a
//! blocking task, never on a runtime worker.

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use cobble_sys::reaper::{self, ExitStatus};
use tokio::net::unix::pipe;
use tokio::sync::oneshot;

/// What to run, and as whom.
#[derive(Debug, Clone, Default)]
pub struct Launch {
    /// Program and arguments; the program is looked up in the daemon's `PATH` unless it has
    /// a slash.
    pub argv: Vec<String>,
    /// Added to the daemon's environment.
    pub environment: BTreeMap<String, String>,
    /// Working directory; the daemon's when empty.
    pub working_dir: String,
    /// `user-id` / `user` / `group-id` / `group`, validated as Pebble validates them.
    pub user_id: Option<u32>,
    pub user: String,
    pub group_id: Option<u32>,
    pub group: String,
    /// Set `HOME` and `USER` from the target user when the environment does not (services).
    pub user_environment: bool,
}

/// A launched command.
pub struct Child {
    pub pid: u32,
    /// Resolves with the exit status.
    pub exit: oneshot::Receiver<ExitStatus>,
    /// The read end of its merged stdout and stderr. End of file comes once every process
    /// holding the write end (the command and any descendant it passed it to) is gone.
    pub output: pipe::Receiver,
}

/// Why a command could not be launched, worded like Go's `os/exec` where clients see it.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("empty command")]
    Empty,
    /// `exec: "x": executable file not found in $PATH`.
    #[error("{0}")]
    NotFound(String),
    /// The user or group is unknown or inconsistent.
    #[error("{0}")]
    User(String),
    #[error("cannot create pipe: {0}")]
    Pipe(std::io::Error),
    /// `fork/exec /path: no such file or directory`, and the like.
    #[error("fork/exec {}: {}", .path.display(), cobble_sys::os_error_text(.error))]
    Fork {
        path: PathBuf,
        error: std::io::Error,
    },
}

/// Launches `launch`. Blocking; needs a tokio runtime context for the output pipe (a
/// blocking task has one).
pub fn spawn(launch: &Launch) -> Result<Child, LaunchError> {
    let program = launch.argv.first().ok_or(LaunchError::Empty)?;
    let path = look_path(program).map_err(LaunchError::NotFound)?;
    let mut cmd = Command::new(&path);
    cmd.arg0(program)
        .args(&launch.argv[1..])
        .process_group(0)
        .stdin(Stdio::null());
    if !launch.working_dir.is_empty() {
        cmd.current_dir(&launch.working_dir);
    }
    let ids = cobble_sys::user::normalize_uid_gid(
        launch.user_id,
        &launch.user,
        launch.group_id,
        &launch.group,
    )
    .map_err(|e| LaunchError::User(e.to_string()))?;
    let mut environment = launch.environment.clone();
    if let Some((uid, gid)) = ids {
        if uid != cobble_sys::current_uid() || gid != cobble_sys::current_gid() {
            cmd.uid(uid).gid(gid);
        }
        if launch.user_environment {
            add_user_environment(&mut environment, uid);
        }
    }
    cmd.envs(&environment);

    let (output, stdout, stderr) = cobble_sys::output::merged_pipe().map_err(LaunchError::Pipe)?;
    cmd.stdout(stdout).stderr(stderr);
    let spawned = reaper::spawn(&mut cmd).map_err(|error| LaunchError::Fork {
        path: path.clone(),
        error,
    })?;
    // The command holds the daemon's copies of the pipe's write end: drop it, or the reader
    // never sees end of file.
    drop(cmd);
    Ok(Child {
        pid: spawned.pid,
        exit: spawned.exit,
        output,
    })
}

/// `HOME` and `USER` of user `uid`, where the environment leaves them unset or empty.
fn add_user_environment(environment: &mut BTreeMap<String, String>, uid: u32) {
    let home_missing = environment.get("HOME").is_none_or(String::is_empty);
    let user_missing = environment.get("USER").is_none_or(String::is_empty);
    if !(home_missing || user_missing) {
        return;
    }
    if let Ok(Some(user)) = cobble_sys::user::user_by_uid(uid) {
        if home_missing {
            environment.insert("HOME".into(), user.home);
        }
        if user_missing {
            environment.insert("USER".into(), user.name);
        }
    }
}

/// Finds `program` like Go's `exec.LookPath` with the daemon's `PATH`.
pub fn look_path(program: &str) -> Result<PathBuf, String> {
    if program.contains('/') {
        return Ok(PathBuf::from(program));
    }
    let not_found = || format!("exec: \"{program}\": executable file not found in $PATH");
    let path_var = std::env::var_os("PATH").ok_or_else(not_found)?;
    std::env::split_paths(&path_var)
        .map(|dir| {
            if dir.as_os_str().is_empty() {
                Path::new(".").join(program)
            } else {
                dir.join(program)
            }
        })
        .find(|candidate| is_executable(candidate))
        .ok_or_else(not_found)
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}
