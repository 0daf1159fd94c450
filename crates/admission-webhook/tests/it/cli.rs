//! The command line and the process's exit codes.

use std::process::Command;
use std::time::Duration;

use crate::support::*;

#[test]
fn help_exits_zero_and_unknown_flags_exit_two() {
    for flag in ["-h", "--help", "-help"] {
        let out = Command::new(webhook::BIN).arg(flag).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{flag}");
        let usage = String::from_utf8_lossy(&out.stderr);
        assert!(
            usage.contains("Usage of ") && usage.contains("  -tlsCertFile string"),
            "{usage}"
        );
    }
    // klog's -v is not registered before parsing in the Go webhook either.
    let out = Command::new(webhook::BIN).arg("-v=4").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(
        text.starts_with("flag provided but not defined: -v\nUsage of "),
        "{text}"
    );
}

#[test]
fn a_port_that_cannot_be_bound_exits_non_zero() {
    let scratch = Scratch::new();
    write_pair(&scratch.path("certs"), &scratch.a);
    let taken = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let certs = scratch.path("certs");
    let mut args = cert_args(&certs);
    args[3] = port.clone();
    let mut webhook = Webhook::start(&strs(&args), &[], &scratch.home());
    let status = webhook.wait_exit(STARTUP);
    assert_eq!(status.code(), Some(1));
    webhook.wait_for_log(&format!("listen tcp :{port}: "), STARTUP);
}

#[test]
fn sigterm_ends_it_cleanly_while_it_waits_and_while_it_serves() {
    let scratch = Scratch::new();
    let certs = scratch.path("certs");
    let args = cert_args(&certs);
    for serving in [false, true] {
        if serving {
            write_pair(&certs, &scratch.a);
        }
        let mut webhook = Webhook::start(&strs(&args), &[], &scratch.home());
        if serving {
            webhook.port(STARTUP);
        } else {
            webhook.wait_for_log("waiting for a valid certificate", STARTUP);
        }
        nix_kill(webhook.pid());
        assert_eq!(webhook.wait_exit(Duration::from_secs(10)).code(), Some(0));
    }
}

fn nix_kill(pid: u32) {
    let status = Command::new("kill")
        .arg("-TERM")
        .arg(pid.to_string())
        .status()
        .unwrap();
    assert!(status.success());
}
