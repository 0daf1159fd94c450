use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::process::{Command, Stdio};

use tokio::io::AsyncReadExt;

use cobble_sys::pipe::merged_pipe;
use cobble_sys::reaper::{self, ExitStatus};

use crate::{TIMEOUT, exit_of, sh};

/// Reads `script`'s merged output to EOF.
async fn merged_output_of(script: &str) -> String {
    let (mut reader, stdout, stderr) = merged_pipe().unwrap();
    let mut cmd = sh(script);
    cmd.stdin(Stdio::null()).stdout(stdout).stderr(stderr);
    let spawned = reaper::spawn(&mut cmd).unwrap();
    // The Command holds copies of the write end; without this, no EOF.
    drop(cmd);
    let mut text = String::new();
    tokio::time::timeout(TIMEOUT, reader.read_to_string(&mut text))
        .await
        .expect("EOF within the timeout")
        .unwrap();
    assert_eq!(exit_of(spawned).await, ExitStatus::Exited(0));
    text
}

#[tokio::test]
async fn stdout_and_stderr_arrive_in_write_order() {
    let text = merged_output_of("echo out1; echo err1 >&2; echo out2; echo err2 >&2").await;
    assert_eq!(text, "out1\nerr1\nout2\nerr2\n");
}

#[tokio::test]
async fn long_interleaved_output_keeps_its_order() {
    let script = "i=0; while [ $i -lt 2000 ]; do echo o$i; echo e$i >&2; i=$((i+1)); done";
    let text = merged_output_of(script).await;
    let want: String = (0..2000).map(|i| format!("o{i}\ne{i}\n")).collect();
    assert_eq!(text, want);
}

/// The pipe is close-on-exec, so the child gets it only as fds 1 and 2. Were
/// the read end or a spare write end inherited, a descendant could hold it and
/// delay EOF. (Other fds the host leaks into every process are ignored.)
#[tokio::test]
async fn only_stdout_and_stderr_reach_the_child() {
    let (mut reader, stdout, stderr) = merged_pipe().unwrap();
    let pipe_inode = std::fs::metadata(format!("/proc/self/fd/{}", reader.as_raw_fd()))
        .unwrap()
        .ino();
    let mut cmd = Command::new("ls");
    cmd.args(["-l", "/proc/self/fd"]);
    cmd.stdin(Stdio::null()).stdout(stdout).stderr(stderr);
    let spawned = reaper::spawn(&mut cmd).unwrap();
    drop(cmd);
    let mut listing = String::new();
    tokio::time::timeout(TIMEOUT, reader.read_to_string(&mut listing))
        .await
        .unwrap()
        .unwrap();
    exit_of(spawned).await;

    let needle = format!("pipe:[{pipe_inode}]");
    let mut fds: Vec<&str> = listing
        .lines()
        .filter(|line| line.ends_with(&needle))
        .filter_map(|line| line.split(" -> ").next()?.rsplit(' ').next())
        .collect();
    fds.sort_unstable();
    assert_eq!(fds, ["1", "2"], "{listing}");
}
