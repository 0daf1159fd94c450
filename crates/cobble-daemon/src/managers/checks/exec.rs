//! The exec probe: success is a command that exits 0.
//!
//! The command runs in a session (and so a process group) of its own with the daemon's
//! environment plus the check's (already merged with its `service-context`), as the
//! configured user and group when they differ from the daemon's, in the configured working
//! directory (the daemon's otherwise), started without a fork of the daemon.
//! Stdout and stderr share one pipe whose last 512 bytes are kept; on failure the details
//! are the last lines of that output. The process is started by the checks' [`Launcher`],
//! which records its group as `check NAME` while it runs and kills the whole group if the
//! probe is dropped (timeout, check stopped).

use std::time::Duration;

use cobble_plan::ExecCheck;
use futures_util::future::BoxFuture;
use tokio::io::AsyncReadExt;

use super::checker::{CheckError, Checker, MAX_ERROR_BYTES, details_from_output};
use crate::process::launch::{Launch, Wiring};
use crate::process::launcher::Launcher;

/// How long to wait for the output pipe to close once the command has exited (descendants
/// may keep it open), as Go's `exec.Cmd.WaitDelay` in Pebble.
const OUTPUT_WAIT: Duration = Duration::from_secs(1);

/// Runs a command.
pub(super) struct ExecChecker {
    name: String,
    config: ExecCheck,
    launcher: Launcher,
}

impl ExecChecker {
    pub(super) fn new(name: &str, config: &ExecCheck, launcher: &Launcher) -> ExecChecker {
        ExecChecker {
            name: name.to_owned(),
            config: config.clone(),
            launcher: launcher.clone(),
        }
    }

    fn launch(&self) -> Result<Launch, CheckError> {
        let argv = cobble_plan::shell_split(&self.config.command)
            .map_err(|e| CheckError::new(format!("cannot parse command: {e}")))?;
        if argv.is_empty() {
            return Err(CheckError::new("cannot parse command: empty command"));
        }
        Ok(Launch::new(argv, self.config.context()))
    }

    async fn run(&self) -> Result<(), CheckError> {
        let launch = self.launch()?;
        // If the probe is dropped from here on (timed out, check stopped), the command is
        // killed, however far it got.
        let (spawned, group) = self
            .launcher
            .launch(format!("check {}", self.name), launch, Wiring::Probe)
            .await
            .map_err(|e| CheckError::new(e.to_string()))?;
        let Some(mut reader) = spawned.output else {
            return Err(CheckError::new("cannot run command: no output pipe"));
        };
        tracing::debug!(
            "Check \"{}\" (exec): running \"{}\" (PID {})",
            self.name,
            self.config.command,
            spawned.pid
        );

        let mut output = LastBytes::default();
        let mut buf = [0u8; 4096];
        let mut exit = spawned.exit;
        let mut eof = false;
        let status = loop {
            tokio::select! {
                status = &mut exit => break status,
                read = reader.read(&mut buf), if !eof => match read {
                    Ok(0) | Err(_) => eof = true,
                    Ok(n) => output.push(&buf[..n]),
                },
            }
        };
        // The exit is in; collect what is still in the pipe, but not forever.
        if !eof {
            let _ = tokio::time::timeout(OUTPUT_WAIT, async {
                loop {
                    match reader.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => output.push(&buf[..n]),
                    }
                }
            })
            .await;
        }
        group.exited();
        // A lost status (never expected) counts as an unknown failure.
        let code = status.map(|s| s.code()).unwrap_or(-1);
        if code == 0 {
            return Ok(());
        }
        Err(CheckError {
            message: format!("exit status {code}"),
            details: details_from_output(&output.text()),
        })
    }
}

impl Checker for ExecChecker {
    fn check(&self) -> BoxFuture<'_, Result<(), CheckError>> {
        Box::pin(self.run())
    }
}

/// The last [`MAX_ERROR_BYTES`] bytes of output.
#[derive(Default)]
struct LastBytes(Vec<u8>);

impl LastBytes {
    fn push(&mut self, bytes: &[u8]) {
        self.0.extend_from_slice(bytes);
        if self.0.len() > MAX_ERROR_BYTES {
            let excess = self.0.len() - MAX_ERROR_BYTES;
            self.0.drain(..excess);
        }
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checks::checker::probe;

    fn launcher() -> Launcher {
        Launcher::new(2)
    }

    fn checker(command: &str) -> ExecChecker {
        ExecChecker::new(
            "chk",
            &ExecCheck {
                command: command.into(),
                ..ExecCheck::default()
            },
            &launcher(),
        )
    }

    #[tokio::test]
    async fn exit_zero_succeeds() {
        assert_eq!(checker("true").check().await, Ok(()));
    }

    #[tokio::test]
    async fn failure_reports_exit_status_and_last_output_lines() {
        let c = checker(
            "/bin/sh -c 'for i in 1 2 3 4 5 6 7; do echo line $i; done; echo oops >&2; exit 3'",
        );
        let error = c.check().await.unwrap_err();
        assert_eq!(error.message, "exit status 3");
        assert_eq!(error.details, "line 4\nline 5\nline 6\nline 7\noops");
    }

    #[tokio::test]
    async fn missing_program_is_worded_like_go() {
        let error = checker("no-such-program-here").check().await.unwrap_err();
        assert_eq!(
            error.message,
            "exec: \"no-such-program-here\": executable file not found in $PATH"
        );
        let error = checker("echo 'unterminated").check().await.unwrap_err();
        assert!(
            error.message.starts_with("cannot parse command: "),
            "{error:?}"
        );
    }

    #[tokio::test]
    async fn environment_and_working_dir_are_applied() {
        let dir = tempfile::tempdir().unwrap();
        let c = ExecChecker::new(
            "chk",
            &ExecCheck {
                command: "/bin/sh -c 'test \"$CHECK_VAR\" = value && test \"$(pwd)\" = \"$WANT\"'"
                    .into(),
                environment: [
                    ("CHECK_VAR".to_string(), "value".to_string()),
                    (
                        "WANT".to_string(),
                        dir.path().canonicalize().unwrap().display().to_string(),
                    ),
                ]
                .into(),
                working_dir: dir.path().display().to_string(),
                ..ExecCheck::default()
            },
            &launcher(),
        );
        assert_eq!(c.check().await, Ok(()));
    }

    #[tokio::test]
    async fn timeout_kills_the_whole_group() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("pid");
        let c = checker(&format!(
            "/bin/sh -c 'sleep 30 & echo $! > {}; wait'",
            pid_file.display()
        ));
        let error = probe(&c, Duration::from_millis(500)).await.unwrap_err();
        assert_eq!(error.message, "check timed out after 500ms");
        let pid: i32 = std::fs::read_to_string(&pid_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // The grandchild is gone (reaped by the reaper as an orphan) within a moment.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while std::path::Path::new(&format!("/proc/{pid}")).exists() {
            assert!(
                std::time::Instant::now() < deadline,
                "sleep survived the timeout"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
