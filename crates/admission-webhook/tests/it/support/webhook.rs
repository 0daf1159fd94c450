//! The webhook binary as a child process: started with a clean environment (no kubeconfig
//! or service account but what the test gives it), its log collected line by line so tests
//! can wait for what it says, killed on drop.

use std::io::{BufRead as _, BufReader};
use std::os::fd::OwnedFd;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_admission-webhook");

pub(crate) struct Webhook {
    child: Child,
    log: Arc<(Mutex<Vec<String>>, Condvar)>,
}

impl Webhook {
    /// Starts the webhook with these arguments and extra environment. `home` stands in for
    /// `$HOME`, so no `~/.kube/config` of the machine is read.
    pub(crate) fn start(args: &[&str], env: &[(String, String)], home: &Path) -> Webhook {
        Webhook::spawn(Command::new(BIN), args, env, home, Stdio::null())
    }

    /// Starts the webhook as a service manager passes it a socket: `socket` at descriptor 3,
    /// `LISTEN_FDS=1`, `LISTEN_FDNAMES=name`, and `LISTEN_PID` set to `listen_pid`, or to the
    /// webhook's own pid when `None`. A shell gets the socket as its standard input, copies
    /// it to 3 (a copy without close-on-exec, unlike every descriptor std makes) and execs
    /// the webhook, which keeps the shell's pid (`$$`).
    pub(crate) fn start_with_socket(
        args: &[&str],
        env: &[(String, String)],
        home: &Path,
        socket: OwnedFd,
        name: &str,
        listen_pid: Option<u32>,
    ) -> Webhook {
        let listen_pid = listen_pid.map_or("$$".to_owned(), |pid| pid.to_string());
        let mut command = Command::new("/bin/sh");
        command
            .arg("-c")
            .arg(format!(
                "exec 3<&0 0</dev/null; LISTEN_PID={listen_pid} exec \"$0\" \"$@\""
            ))
            .arg(BIN);
        let env = [
            env,
            &[
                ("LISTEN_FDS".to_owned(), "1".to_owned()),
                ("LISTEN_FDNAMES".to_owned(), name.to_owned()),
            ],
        ]
        .concat();
        Webhook::spawn(command, args, &env, home, Stdio::from(socket))
    }

    fn spawn(
        mut command: Command,
        args: &[&str],
        env: &[(String, String)],
        home: &Path,
        stdin: Stdio,
    ) -> Webhook {
        command
            .args(args)
            .env_clear()
            .env("HOME", home)
            .env("RUST_LOG", "info")
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(stdin)
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = command.spawn().unwrap();
        let log: Arc<(Mutex<Vec<String>>, Condvar)> = Arc::default();
        let stderr = child.stderr.take().unwrap();
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                eprintln!("webhook: {line}");
                sink.0.lock().unwrap().push(line);
                sink.1.notify_all();
            }
        });
        Webhook { child, log }
    }

    /// Waits until a log line contains `needle` and returns it.
    pub(crate) fn wait_for_log(&self, needle: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        let (lines, changed) = &*self.log;
        let mut lines = lines.lock().unwrap();
        loop {
            if let Some(line) = lines.iter().find(|l| l.contains(needle)) {
                return line.clone();
            }
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "no log line with {needle:?} within {timeout:?}; log:\n{}",
                lines.join("\n")
            );
            lines = changed.wait_timeout(lines, left).unwrap().0;
        }
    }

    /// How many log lines contain `needle`.
    pub(crate) fn count_log(&self, needle: &str) -> usize {
        self.log
            .0
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains(needle))
            .count()
    }

    /// The port from "serving webhooks on ADDR", once it is logged.
    pub(crate) fn port(&self, timeout: Duration) -> u16 {
        let line = self.wait_for_log("serving webhooks on ", timeout);
        let address = line.split("serving webhooks on ").nth(1).unwrap();
        let address = address.split_whitespace().next().unwrap();
        address.rsplit(':').next().unwrap().parse().unwrap()
    }

    /// Waits (bounded) for the process to exit.
    pub(crate) fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "the webhook did not exit within {timeout:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub(crate) fn is_running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Webhook {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
