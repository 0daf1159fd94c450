//! Turning a service's configuration into a running process.
//!
//! The process gets its own process group (so stop signals reach its children), the daemon's
//! environment plus the service's, the service's user, group and working directory, and one
//! pipe for both stdout and stderr. A reader task copies that pipe into the service's
//! [`ServiceLog`] and, with `--verbose`, to the daemon's stdout. Exits arrive through the
//! reaper. Errors are worded like Pebble's (Go's `exec` package): clients match on them.

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use cobble_plan::Service;
use cobble_sys::reaper::{self, ExitStatus};
use jiff::Timestamp;
use tokio::io::AsyncReadExt;
use tokio::sync::oneshot;

use super::logbuf::{LineSplitter, ServiceLog};
use crate::state::format_utc_millis;

/// A spawned service process.
pub struct Process {
    pub pid: u32,
    pub exit: oneshot::Receiver<ExitStatus>,
    /// Resolves when the output pipe reached end of file (every writer is gone), so the exit
    /// can be handled with the process's last words already in its log.
    pub output_done: oneshot::Receiver<()>,
}

/// Spawns the service. The error is the text for the start task (`cannot start service: ...`).
pub fn spawn(
    name: &str,
    config: &Service,
    log: &ServiceLog,
    verbose: bool,
) -> Result<Process, String> {
    let (base, extra) = config.parse_command().map_err(|e| e.to_string())?;
    let argv: Vec<String> = base.into_iter().chain(extra).collect();
    let Some(program) = argv.first() else {
        return Err(format!(
            "cannot start service: no command for service \"{name}\""
        ));
    };
    let path = look_path(program).map_err(|e| format!("cannot start service: {e}"))?;

    let mut cmd = Command::new(&path);
    cmd.arg0(program)
        .args(&argv[1..])
        .process_group(0)
        .stdin(Stdio::null());
    if !config.working_dir.is_empty() {
        cmd.current_dir(&config.working_dir);
    }
    let ids = cobble_sys::user::normalize_uid_gid(
        config.user_id,
        &config.user,
        config.group_id,
        &config.group,
    )
    .map_err(|e| e.to_string())?;
    let mut environment = config.environment.clone();
    if let Some((uid, gid)) = ids {
        if uid != cobble_sys::current_uid() || gid != cobble_sys::current_gid() {
            cmd.uid(uid).gid(gid);
        }
        let home_missing = environment.get("HOME").is_none_or(String::is_empty);
        let user_missing = environment.get("USER").is_none_or(String::is_empty);
        if (home_missing || user_missing)
            && let Ok(Some(user)) = cobble_sys::user::user_by_uid(uid)
        {
            if home_missing {
                environment.insert("HOME".into(), user.home.clone());
            }
            if user_missing {
                environment.insert("USER".into(), user.name.clone());
            }
        }
    }
    cmd.envs(&environment);

    let (reader, stdout, stderr) =
        cobble_sys::output::merged_pipe().map_err(|e| format!("cannot start service: {e}"))?;
    cmd.stdout(stdout).stderr(stderr);

    tracing::info!("Service \"{name}\" starting: {}", config.command);
    let spawned = reaper::spawn(&mut cmd).map_err(|e| {
        format!(
            "cannot start service: fork/exec {}: {}",
            path.display(),
            cobble_sys::os_error_text(&e)
        )
    })?;
    // Dropping the command closes the daemon's copies of the pipe's write end, so the reader
    // sees end of file once the service and its children are gone.
    drop(cmd);
    let (done_tx, output_done) = oneshot::channel();
    let copy = copy_output(reader, name.to_owned(), log.clone(), verbose);
    tokio::spawn(async move {
        copy.await;
        let _ = done_tx.send(());
    });
    Ok(Process {
        pid: spawned.pid,
        exit: spawned.exit,
        output_done,
    })
}

/// Finds `program` like Go's `exec.LookPath` with the daemon's `PATH`.
pub(crate) fn look_path(program: &str) -> Result<PathBuf, String> {
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

/// Copies the service's output into its log (and stdout with `--verbose`) until end of file.
async fn copy_output(
    mut reader: tokio::net::unix::pipe::Receiver,
    name: String,
    log: ServiceLog,
    verbose: bool,
) {
    let mut splitter = LineSplitter::default();
    let mut buf = vec![0u8; 16 * 1024];
    let emit = |line: String| {
        let now = Timestamp::now();
        if verbose {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{} [{name}] {line}", format_utc_millis(now));
        }
        log.push(now, line);
    };
    loop {
        match reader.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => splitter.feed(&buf[..n], emit),
        }
    }
    splitter.finish(emit);
}
