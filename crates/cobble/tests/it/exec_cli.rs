//! The `exec` and `enter exec` commands end to end: a real daemon runs the command; output,
//! input, exit codes, errors, forwarded signals, and terminal mode under a real pty.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::AsFd;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cobble_sys::pty::{self, WindowSize};
use nix::sys::signal::{Signal, kill};
use nix::sys::termios::{LocalFlags, tcgetattr};
use nix::unistd::Pid;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::fixture::{COBBLE, Daemon, Test};

/// How long a command under test may take to produce what the test waits for.
const DEADLINE: Duration = Duration::from_secs(20);

fn exec(daemon: &Daemon, args: &[&str]) -> Test {
    Test::daemon(daemon).args(&["exec"]).args(args)
}

/// `cobble exec ...` against `daemon`, with the given standard streams.
fn spawn(daemon: &Daemon, args: &[&str], stdin: Stdio, stdout: Stdio) -> Child {
    Command::new(COBBLE)
        .arg("exec")
        .args(args)
        .env("PEBBLE", daemon.pebble_dir())
        .env_remove("PEBBLE_SOCKET")
        .stdin(stdin)
        .stdout(stdout)
        .stderr(Stdio::piped())
        .spawn()
        .expect("cannot run cobble exec")
}

/// Waits (bounded) for `child` to exit and returns its exit code.
fn exit_code(child: &mut Child) -> Option<i32> {
    let deadline = Instant::now() + DEADLINE;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code();
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            panic!("cobble exec did not exit in time");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn output_errors_and_exit_code_are_the_commands() {
    let daemon = Daemon::hold(&[]);
    exec(
        &daemon,
        &["--", "sh", "-c", "echo out; echo err >&2; exit 3"],
    )
    .stdout("out\n")
    .stderr("err\n")
    .status(3)
    .run();
    exec(&daemon, &["true"]).run();
}

#[test]
fn working_dir_and_environment_flags_reach_the_command() {
    let daemon = Daemon::hold(&[]);
    exec(
        &daemon,
        &[
            "-w",
            "/tmp",
            "--env",
            "A=1",
            "--env",
            "B",
            "sh",
            "-c",
            "echo \"$A[$B]\"; pwd",
        ],
    )
    .stdout("1[]\n/tmp\n")
    .run();
}

#[test]
fn input_is_piped_to_the_command_and_ended() {
    let daemon = Daemon::hold(&[]);
    let mut child = spawn(&daemon, &["cat"], Stdio::piped(), Stdio::piped());
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"hello\nworld\n").unwrap();
    drop(stdin);
    let output = child.wait_with_output().unwrap();
    assert_eq!(String::from_utf8_lossy(&output.stdout), "hello\nworld\n");
    assert_eq!(output.status.code(), Some(0));
}

#[test]
fn a_missing_program_is_the_daemons_error() {
    let daemon = Daemon::hold(&[]);
    exec(&daemon, &["no-such-program-here"])
        .stderr("error: cannot find executable \"no-such-program-here\"\n")
        .status(1)
        .run();
}

#[test]
fn a_timed_out_command_fails_with_its_change() {
    let daemon = Daemon::hold(&[]);
    exec(&daemon, &["--timeout", "100ms", "sleep", "10"])
        .stderr_glob(
            "error: cannot perform the following tasks:\n\
             - * (timed out after 100ms: context deadline exceeded)\n",
        )
        .status(1)
        .run();
}

/// Ctrl-C on a terminal that is not raw (or `kill -INT`) reaches the command, not `exec`.
#[test]
fn interrupt_is_forwarded_to_the_command() {
    let daemon = Daemon::hold(&[]);
    let script = "trap 'echo got INT; exit 7' INT; echo ready; while :; do sleep 0.05; done";
    let mut child = spawn(
        &daemon,
        &["--", "sh", "-c", script],
        Stdio::null(),
        Stdio::piped(),
    );
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert_eq!(line, "ready\n");
    kill(Pid::from_raw(child.id() as i32), Signal::SIGINT).unwrap();
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).unwrap();
    assert_eq!(rest, "got INT\n");
    assert_eq!(exit_code(&mut child), Some(7));
}

#[test]
fn enter_exec_runs_the_command_against_its_own_daemon() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("layers")).unwrap();
    Test::new()
        .env("PEBBLE", dir.path().to_str().unwrap())
        .args(&[
            "enter",
            "exec",
            "--",
            "sh",
            "-c",
            "echo hi; echo oops >&2; exit 5",
        ])
        .stdout("hi\n")
        .stderr("oops\n")
        .status(5)
        .run();
    assert!(
        !dir.path().join(".pebble.socket").exists(),
        "the daemon stopped"
    );
}

/// With `--run` the default services are up before the command runs; without it they are
/// not started at all.
#[test]
fn enter_run_exec_starts_the_default_services_first() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("marker");
    let layer = format!(
        "services:\n  svc:\n    override: replace\n    startup: enabled\n    \
         command: sh -c 'echo up > {}; exec sleep 1000'\n",
        marker.display()
    );
    std::fs::create_dir_all(dir.path().join("layers")).unwrap();
    std::fs::write(dir.path().join("layers/001-base.yaml"), layer).unwrap();
    let enter = || Test::new().env("PEBBLE", dir.path().to_str().unwrap());
    let marker = marker.to_str().unwrap();

    enter()
        .args(&[
            "enter",
            "exec",
            "--",
            "sh",
            "-c",
            &format!("test ! -e {marker}"),
        ])
        .run();
    enter()
        .args(&["enter", "--run", "exec", "cat", marker])
        .stdout("up\n")
        .run();
}

/// `PEBBLE_VERBOSE=1` (which `enter exec` accepts, unlike `-v`) shows the daemon's log.
#[test]
fn enter_exec_with_pebble_verbose_logs() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("layers")).unwrap();
    Test::new()
        .env("PEBBLE", dir.path().to_str().unwrap())
        .env("PEBBLE_VERBOSE", "1")
        .args(&["enter", "exec", "echo", "hello world"])
        .stdout("hello world\n")
        .stderr_contains("[pebble] Started daemon.\n")
        .run();
}

/// What a pty's master has received so far, filled by a reader task.
#[derive(Clone, Default)]
struct Screen(Arc<Mutex<Vec<u8>>>);

impl Screen {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }

    /// Waits (bounded) until what has arrived after byte `from` contains `needle`; returns
    /// the position just past it.
    async fn wait_for(&self, from: usize, needle: &str) -> usize {
        let deadline = Instant::now() + DEADLINE;
        loop {
            let text = self.text();
            if let Some(at) = text.get(from..).and_then(|t| t.find(needle)) {
                return from + at + needle.len();
            }
            assert!(
                Instant::now() < deadline,
                "no {needle:?} on the terminal; it shows:\n{text}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// `cobble exec -t /bin/sh` on a real terminal: the remote shell's prompt, its idea of the
/// window size after the local terminal is resized, Ctrl-C interrupting the command it runs,
/// Ctrl-D ending it with status 0, and the local terminal back in its old mode.
#[test]
fn terminal_mode_under_a_real_pty() {
    let daemon = Daemon::hold(&[]);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let terminal = pty::open(
            WindowSize {
                width: 80,
                height: 25,
            },
            None,
        )
        .unwrap();
        let mut command = Command::new(COBBLE);
        command
            .args(["exec", "-t", "--env", "PS1=cobble-test$ ", "/bin/sh"])
            .env("PEBBLE", daemon.pebble_dir())
            .env("TERM", "dumb")
            .env_remove("PEBBLE_SOCKET");
        pty::attach(&mut command, &terminal.slave).unwrap();
        let mut child = command.spawn().expect("cannot run cobble exec");
        let local = terminal.slave;
        let master = Arc::new(terminal.master);

        let screen = Screen::default();
        let reader = {
            let screen = screen.clone();
            let master = master.clone();
            tokio::spawn(async move {
                let mut buffer = [0u8; 4096];
                while let Ok(n) = (&*master).read(&mut buffer).await {
                    if n == 0 {
                        break;
                    }
                    screen.0.lock().unwrap().extend_from_slice(&buffer[..n]);
                }
            })
        };

        let mut seen = screen.wait_for(0, "cobble-test$ ").await;
        let raw = tcgetattr(local.as_fd()).unwrap().local_flags;
        assert!(
            !raw.intersects(LocalFlags::ICANON | LocalFlags::ECHO),
            "the local terminal is raw while the command runs"
        );

        master
            .resize(WindowSize {
                width: 100,
                height: 33,
            })
            .unwrap();
        // The resize travels on the control websocket and the keys on stdio: ask until the
        // remote terminal has the new size.
        let deadline = Instant::now() + DEADLINE;
        loop {
            assert!(
                Instant::now() < deadline,
                "the remote terminal never got the new size"
            );
            (&*master).write_all(b"stty size\r").await.unwrap();
            let end = screen.wait_for(seen, "cobble-test$ ").await;
            let answer = screen.text()[seen..end].to_string();
            seen = end;
            if answer.contains("33 100") {
                break;
            }
            assert!(
                answer.contains("25 80"),
                "stty size answered neither size: {answer:?}"
            );
        }

        // Ctrl-C is a byte in raw mode; the remote terminal turns it into SIGINT for the
        // command in its foreground, and the shell reports the command killed by it.
        (&*master)
            .write_all(b"sh -c 'echo ar\"\"med; exec sleep 100'\r")
            .await
            .unwrap();
        seen = screen.wait_for(seen, "armed").await;
        (&*master).write_all(&[0x03]).await.unwrap();
        seen = screen.wait_for(seen, "cobble-test$ ").await;
        (&*master).write_all(b"echo status-$?\r").await.unwrap();
        seen = screen.wait_for(seen, "status-130").await;
        screen.wait_for(seen, "cobble-test$ ").await;

        (&*master).write_all(&[0x04]).await.unwrap();
        let code = tokio::task::spawn_blocking(move || exit_code(&mut child))
            .await
            .unwrap();
        assert_eq!(code, Some(0), "the terminal showed:\n{}", screen.text());
        let restored = tcgetattr(local.as_fd()).unwrap().local_flags;
        assert!(
            restored.contains(LocalFlags::ICANON | LocalFlags::ECHO),
            "the local terminal is back in its old mode"
        );
        drop(local);
        reader.abort();
    });
}
