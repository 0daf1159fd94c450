use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use cobble_sys::pty::{self, WindowSize};
use cobble_sys::reaper::{self, ExitStatus};

use crate::{TIMEOUT, exit_of, sh};

const SIZE: WindowSize = WindowSize {
    width: 100,
    height: 30,
};

/// Reads the master until `want` shows up (a terminal echoes and translates newlines, so the
/// output is searched rather than compared).
async fn read_until(master: &mut pty::Master, text: &mut String, want: &str) {
    let mut buf = [0u8; 4096];
    tokio::time::timeout(TIMEOUT, async {
        while !text.contains(want) {
            let n = master.read(&mut buf).await.unwrap();
            assert!(n > 0, "terminal closed before {want:?}; got {text:?}");
            text.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no {want:?} within {TIMEOUT:?}; got {text:?}"));
}

#[tokio::test]
async fn a_command_on_the_slave_has_a_controlling_terminal_of_the_given_size() {
    let pty::Pty { mut master, slave } = pty::open(SIZE, None).unwrap();
    let mut cmd =
        sh("stty size; test -t 0 && echo tty-in; (: < /dev/tty) 2>/dev/null && echo ctty");
    pty::attach(&mut cmd, &slave).unwrap();
    let spawned = reaper::spawn(&mut cmd).unwrap();
    drop(cmd);
    drop(slave);
    let mut text = String::new();
    read_until(&mut master, &mut text, "30 100").await;
    read_until(&mut master, &mut text, "tty-in").await;
    read_until(&mut master, &mut text, "ctty").await;
    // Once the command is gone, reading the master ends instead of failing.
    let mut rest = Vec::new();
    tokio::time::timeout(TIMEOUT, master.read_to_end(&mut rest))
        .await
        .expect("end of file")
        .unwrap();
    assert_eq!(exit_of(spawned).await, ExitStatus::Exited(0));
}

#[tokio::test]
async fn resize_is_seen_by_the_command_and_eof_ends_its_input() {
    let pty::Pty { mut master, slave } = pty::open(SIZE, None).unwrap();
    // Reports the size after each line of input, until end of input.
    let mut cmd = sh("while read line; do echo \"got $line\"; stty size; done; echo done");
    pty::attach(&mut cmd, &slave).unwrap();
    let spawned = reaper::spawn(&mut cmd).unwrap();
    drop(cmd);
    drop(slave);
    let mut text = String::new();
    master.write_all(b"one\n").await.unwrap();
    read_until(&mut master, &mut text, "30 100").await;
    let size = WindowSize {
        width: 132,
        height: 43,
    };
    master.resize(size).unwrap();
    assert_eq!(master.size().unwrap(), size);
    master.write_all(b"two\n").await.unwrap();
    read_until(&mut master, &mut text, "43 132").await;
    let eof = master.eof_byte().unwrap();
    assert_eq!(eof, 4, "Ctrl-D");
    master.write_all(&[eof]).await.unwrap();
    read_until(&mut master, &mut text, "done").await;
    assert_eq!(exit_of(spawned).await, ExitStatus::Exited(0));
}

#[tokio::test]
async fn a_new_session_leaves_the_daemons_group_and_session() {
    let mut cmd = sh("sleep 30");
    cmd.stdin(std::process::Stdio::null());
    pty::new_session(&mut cmd);
    let spawned = reaper::spawn(&mut cmd).unwrap();
    let stat = cobble_sys::process::proc_stat(spawned.pid).unwrap();
    assert_eq!(stat.pgrp, spawned.pid, "leads its own group");
    cobble_sys::process::signal_group(spawned.pid, cobble_sys::process::Signal::SIGKILL).unwrap();
    let status = tokio::time::timeout(Duration::from_secs(20), spawned.exit)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status, ExitStatus::Signaled(9));
}

#[tokio::test]
async fn shared_references_relay_input_and_output_at_once() {
    let pty::Pty { master, slave } = pty::open(SIZE, None).unwrap();
    let mut cmd = sh("read line; echo \"got $line\"");
    pty::attach(&mut cmd, &slave).unwrap();
    let spawned = reaper::spawn(&mut cmd).unwrap();
    drop(cmd);
    drop(slave);
    // One task reads while another writes, both through `&Master`.
    let reader = async {
        let mut text = Vec::new();
        (&master).read_to_end(&mut text).await.unwrap();
        String::from_utf8_lossy(&text).into_owned()
    };
    let writer = async { (&master).write_all(b"hello\n").await.unwrap() };
    let (text, ()) = tokio::time::timeout(TIMEOUT, async { tokio::join!(reader, writer) })
        .await
        .expect("the command ends");
    assert!(text.contains("got hello"), "{text:?}");
    assert_eq!(exit_of(spawned).await, ExitStatus::Exited(0));
}
