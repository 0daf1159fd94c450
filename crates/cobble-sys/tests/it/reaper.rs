use std::process::{Command, Stdio};

use cobble_sys::reaper::{self, ExitStatus};

use crate::{exit_of, sh, wait_for};

#[tokio::test]
async fn reports_exit_codes_and_signals() {
    let spawned = reaper::spawn(&mut Command::new("true")).unwrap();
    assert_eq!(exit_of(spawned).await, ExitStatus::Exited(0));

    let spawned = reaper::spawn(&mut sh("exit 3")).unwrap();
    let status = exit_of(spawned).await;
    assert_eq!(status, ExitStatus::Exited(3));
    assert_eq!(status.code(), 3);
    assert!(!status.success());

    let spawned = reaper::spawn(&mut sh("kill -9 $$")).unwrap();
    let status = exit_of(spawned).await;
    assert_eq!(status, ExitStatus::Signaled(9));
    assert_eq!(status.code(), 137);
}

/// nix's waitpid reaps a child killed by a real-time signal and then fails to
/// decode the signal, losing the exit. Pins that we decode it ourselves.
#[tokio::test]
async fn realtime_signal_death_is_reported() {
    let spawned = reaper::spawn(&mut sh("kill -40 $$")).unwrap();
    let status = exit_of(spawned).await;
    assert_eq!(status, ExitStatus::Signaled(40));
    assert_eq!(status.code(), 168);
}

#[tokio::test]
async fn start_is_idempotent_and_needs_no_runtime() {
    reaper::start().unwrap();
    reaper::start().unwrap();
    std::thread::spawn(|| reaper::start().unwrap())
        .join()
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instant_exits_are_never_lost() {
    for _ in 0..100 {
        let spawned = reaper::spawn(&mut Command::new("true")).unwrap();
        assert_eq!(exit_of(spawned).await, ExitStatus::Exited(0));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_spawns_each_get_their_own_status() {
    let mut tasks = Vec::new();
    for worker in 0..8 {
        tasks.push(tokio::spawn(async move {
            let mut waiting = Vec::new();
            for i in 0..25 {
                let code = (worker * 25 + i) % 256;
                let spawned = reaper::spawn(&mut sh(&format!("exit {code}"))).unwrap();
                waiting.push((code, spawned));
            }
            for (code, spawned) in waiting {
                assert_eq!(exit_of(spawned).await, ExitStatus::Exited(code));
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
}

/// When exec fails, std waits for the failed child inside `Command::spawn` and
/// panics if the reaper took it first. Pins that the reaper can't: the spawn
/// holds its lock. `.uid()` forces std's fork/exec path (posix_spawn is used
/// otherwise), and background exits keep the reaper busy meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_failure_is_an_error_not_a_stolen_child() {
    let mut background = Vec::new();
    for _ in 0..50 {
        background.push(reaper::spawn(&mut Command::new("true")).unwrap());
        let mut missing = Command::new("/nonexistent/cobble-test-binary");
        std::os::unix::process::CommandExt::uid(&mut missing, cobble_sys::current_uid());
        let err = reaper::spawn(&mut missing).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
        assert_eq!(cobble_sys::os_error_text(&err), "no such file or directory");
    }
    for spawned in background {
        assert_eq!(exit_of(spawned).await, ExitStatus::Exited(0));
    }
}

#[tokio::test]
async fn dropped_waiter_does_not_disturb_the_reaper() {
    drop(reaper::spawn(&mut Command::new("true")).unwrap());
    let spawned = reaper::spawn(&mut sh("exit 7")).unwrap();
    assert_eq!(exit_of(spawned).await, ExitStatus::Exited(7));
}

#[tokio::test]
async fn piped_stdio_is_handed_back() {
    let mut cmd = sh("echo hello");
    cmd.stdout(Stdio::piped());
    let mut spawned = reaper::spawn(&mut cmd).unwrap();
    let stdout = spawned.stdout.take().expect("stdout was piped");
    let exit = spawned.exit;
    let text = tokio::task::spawn_blocking(move || std::io::read_to_string(stdout))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(text, "hello\n");
    let status = tokio::time::timeout(crate::TIMEOUT, exit)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status, ExitStatus::Exited(0));
}

/// A grandchild whose parent exits is re-parented to us (subreaper), and when
/// it exits it is reaped as an orphan rather than left a zombie.
#[tokio::test]
async fn orphaned_grandchild_is_adopted_and_reaped() {
    let before = reaper::orphans_reaped();
    let mut cmd = sh("sleep 0.3 & echo $!; exit 0");
    cmd.stdout(Stdio::piped());
    let mut spawned = reaper::spawn(&mut cmd).unwrap();
    let stdout = spawned.stdout.take().unwrap();
    let line = tokio::task::spawn_blocking(move || std::io::read_to_string(stdout))
        .await
        .unwrap()
        .unwrap();
    let grandchild: u32 = line.trim().parse().expect("sh printed the grandchild pid");
    assert_eq!(exit_of(spawned).await, ExitStatus::Exited(0));

    // While it runs, the orphan's parent is us, not init.
    let ours = std::process::id();
    if let Some(stat) = cobble_sys::process::proc_stat(grandchild) {
        assert!(stat.ppid == ours || stat.state == 'Z', "{stat:?}");
    }
    // Once it exits it is reaped: not even a zombie remains.
    wait_for("the grandchild to be reaped", || {
        cobble_sys::process::proc_stat(grandchild).is_none()
    })
    .await;
    wait_for("the orphan count to grow", || {
        reaper::orphans_reaped() > before
    })
    .await;
}
