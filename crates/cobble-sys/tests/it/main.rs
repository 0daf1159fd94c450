//! Integration tests for cobble-sys: real processes, real pipes, real files.
//!
//! The reaper is process-wide. Under cargo-nextest each test is its own
//! process; under `cargo test` they share one process and one reaper, so no
//! test here may wait for children by other means, and counters such as
//! `orphans_reaped` are only compared as "grew by at least".

mod inherit;
mod pipe;
mod process;
mod pty;
mod reaper;
mod user;

use std::path::PathBuf;
use std::time::Duration;

use cobble_sys::reaper::{ExitStatus, Spawned};

/// Generous: the machine is small and shared.
const TIMEOUT: Duration = Duration::from_secs(20);

/// Waits (bounded) for a spawned child's exit status.
async fn exit_of(spawned: Spawned) -> ExitStatus {
    let pid = spawned.pid;
    tokio::time::timeout(TIMEOUT, spawned.exit)
        .await
        .unwrap_or_else(|_| panic!("pid {pid} not reported within {TIMEOUT:?}"))
        .unwrap_or_else(|_| panic!("reaper dropped the waiter for pid {pid}"))
}

/// Polls `condition` every 10 ms until it holds, panicking after [`TIMEOUT`].
async fn wait_for(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    while !condition() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A `sh -c script` command.
fn sh(script: &str) -> std::process::Command {
    let mut cmd = std::process::Command::new("sh");
    cmd.args(["-c", script]);
    cmd
}

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/it/fixtures")
        .join(name)
}

/// Pids of all processes currently in process group `pgid`.
fn group_members(pgid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| cobble_sys::process::proc_stat(pid).is_some_and(|stat| stat.pgrp == pgid))
        .collect()
}
