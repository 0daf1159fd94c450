//! `cobble demo`, run twice as a newcomer would: the second run tells the same story.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use crate::fixture::{COBBLE, wait_for};

/// A running demo whose stderr (banner and daemon log) arrives line by line.
struct Demo {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Demo {
    fn start(dir: &std::path::Path) -> Demo {
        let mut child = Command::new(COBBLE)
            .args(["demo", "--dir"])
            .arg(dir)
            .env("PEBBLE", dir.join("not-the-demo"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("cobble demo starts");
        let (tx, lines) = mpsc::channel();
        // The banner and the daemon's log on stderr, the services' output on stdout.
        let streams: [Box<dyn std::io::Read + Send>; 2] = [
            Box::new(child.stdout.take().unwrap()),
            Box::new(child.stderr.take().unwrap()),
        ];
        for stream in streams {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            });
        }
        Demo {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Waits (bounded) for a line containing `text`.
    fn wait_line(&mut self, text: &str) -> String {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(line) = self.seen.iter().find(|l| l.contains(text)) {
                return line.clone();
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => self.seen.push(line),
                Err(_) => panic!("no line with {text:?}; saw:\n{}", self.seen.join("\n")),
            }
        }
    }

    /// Ctrl-C, as the banner says, and the exit status.
    fn interrupt(mut self) -> i32 {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
        let status = self.child.wait().unwrap();
        status.code().unwrap_or(-1)
    }
}

impl Drop for Demo {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_second_demo_starts_clean_and_heals_again() {
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path().join("demo");
    let config = dir.join("config");

    let mut first = Demo::start(&dir);
    first.wait_line("the demo uses its own directory");
    let banner = first.wait_line("echo hello >");
    assert!(banner.contains(&config.display().to_string()), "{banner}");
    first.wait_line("[needs-config] cat:");
    std::fs::write(&config, "hello\n").unwrap();
    first.wait_line("[needs-config] configured, serving");
    assert_eq!(first.interrupt(), 0);
    assert!(
        config.exists(),
        "the first demo's config is still there after Ctrl-C"
    );
    assert!(!dir.join("not-the-demo").exists(), "$PEBBLE was left alone");

    let mut second = Demo::start(&dir);
    second.wait_line("the previous demo's state, logs and config were removed");
    // The story starts over: needs-config fails again until its file appears.
    second.wait_line("[needs-config] cat:");
    assert!(!config.exists());
    let listing = Command::new(COBBLE)
        .args(["changes"])
        .env("PEBBLE", &dir)
        .output()
        .unwrap();
    let changes = String::from_utf8_lossy(&listing.stdout);
    let rows: Vec<&str> = changes.lines().skip(1).filter(|l| !l.is_empty()).collect();
    assert!(
        rows.len() == 1 && rows[0].starts_with("1 ") && rows[0].contains("Autostart"),
        "only this run's autostart change, numbered from 1 again:\n{changes}"
    );
    // needs-config fails after its start, not within it: every service started, and the
    // change the tour lists first ends Done (worker's start, after clock's, may still be
    // under way when needs-config first fails).
    let mut changes = String::new();
    wait_for(
        "the autostart change to end",
        Duration::from_secs(20),
        || {
            let listing = Command::new(COBBLE)
                .args(["changes"])
                .env("PEBBLE", &dir)
                .output()
                .unwrap();
            changes = String::from_utf8_lossy(&listing.stdout).into_owned();
            !changes.contains(" Doing ")
        },
    );
    assert!(
        changes
            .lines()
            .nth(1)
            .unwrap_or_default()
            .starts_with("1    Done "),
        "{changes}"
    );
    assert_eq!(second.interrupt(), 0);
}

#[test]
fn the_demo_refuses_a_directory_that_is_not_a_demos() {
    let scratch = tempfile::tempdir().unwrap();
    std::fs::create_dir(scratch.path().join("layers")).unwrap();
    std::fs::write(scratch.path().join("layers/001-app.yaml"), "services: {}\n").unwrap();
    let output = Command::new(COBBLE)
        .args(["demo", "--dir"])
        .arg(scratch.path())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("is not a demo directory"), "{stderr}");
    assert!(scratch.path().join("layers/001-app.yaml").exists());
}
