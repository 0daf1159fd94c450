//! The test builder, the daemon fixture and bounded polling.

use std::fs;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// The binary under test.
pub(crate) const COBBLE: &str = env!("CARGO_BIN_EXE_cobble");

/// Past this, a daemon that has not opened its socket, or not stopped, is stuck: a bound no
/// loaded machine reaches, not a measure of how fast it starts.
const DAEMON_DEADLINE: Duration = Duration::from_secs(60);

/// Polls `condition` every 20 ms until it holds, failing the test after `timeout`.
pub(crate) fn wait_for(what: &str, timeout: Duration, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A free loopback port (bound, then released).
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("loopback port")
        .local_addr()
        .expect("local address")
        .port()
}

/// Matches `text` against `pattern` line by line; in a pattern line `*` matches any run of
/// characters and `?` exactly one character (ASCII text only).
pub(crate) fn glob_matches(pattern: &str, text: &str) -> bool {
    let patterns: Vec<&str> = pattern.split('\n').collect();
    let lines: Vec<&str> = text.split('\n').collect();
    patterns.len() == lines.len()
        && patterns
            .iter()
            .zip(&lines)
            .all(|(p, l)| line_matches(p.as_bytes(), l.as_bytes()))
}

fn line_matches(pattern: &[u8], line: &[u8]) -> bool {
    match pattern.split_first() {
        None => line.is_empty(),
        Some((b'*', rest)) => (0..=line.len()).any(|skip| line_matches(rest, &line[skip..])),
        Some((b'?', rest)) => !line.is_empty() && line_matches(rest, &line[1..]),
        Some((c, rest)) => line.first() == Some(c) && line_matches(rest, &line[1..]),
    }
}

/// What a stream is expected to hold.
enum Expected {
    Exact(String),
    Glob(String),
    Contains(String),
}

impl Expected {
    fn check(&self, stream: &str, actual: &str) {
        let ok = match self {
            Expected::Exact(e) => e == actual,
            Expected::Glob(p) => glob_matches(p, actual),
            Expected::Contains(c) => actual.contains(c.as_str()),
        };
        let (how, expected) = match self {
            Expected::Exact(e) => ("equal", e),
            Expected::Glob(p) => ("match", p),
            Expected::Contains(c) => ("contain", c),
        };
        assert!(
            ok,
            "{stream} does not {how} the expectation\n--- expected ---\n{expected}\n--- actual ---\n{actual}\n---"
        );
    }
}

/// The result of a finished [`Test`].
pub(crate) struct Output {
    /// Everything the command printed on stdout.
    pub stdout: String,
    /// Everything the command printed on stderr.
    #[allow(dead_code)]
    pub stderr: String,
}

/// One run of `cobble`, with what it must print and how it must exit.
#[must_use]
pub(crate) struct Test {
    /// The executable to run: the binary under test, or a link to it under another name.
    program: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
    /// A `$PEBBLE` with nothing in it, for tests that have no daemon.
    _empty_dir: Option<TempDir>,
    stdout: Option<Expected>,
    stderr: Option<Expected>,
    status: i32,
}

impl Test {
    /// A run with an empty temporary `$PEBBLE`, so it can never reach a real daemon.
    pub(crate) fn new() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut test = Test::with_pebble_dir(dir.path());
        test._empty_dir = Some(dir);
        test
    }

    /// A run against the daemon of `daemon`.
    pub(crate) fn daemon(daemon: &Daemon) -> Self {
        Test::with_pebble_dir(&daemon.pebble_dir())
    }

    fn with_pebble_dir(dir: &Path) -> Self {
        Test {
            program: PathBuf::from(COBBLE),
            args: Vec::new(),
            env: vec![("PEBBLE".into(), dir.display().to_string())],
            _empty_dir: None,
            stdout: Some(Expected::Exact(String::new())),
            stderr: Some(Expected::Exact(String::new())),
            status: 0,
        }
    }

    /// The `$PEBBLE` this run uses.
    pub(crate) fn pebble_dir(&self) -> PathBuf {
        PathBuf::from(&self.env[0].1)
    }

    /// Sets an environment variable for the run.
    pub(crate) fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Runs `program` (a link to the binary under test) instead of the binary itself.
    pub(crate) fn program(mut self, program: &Path) -> Self {
        self.program = program.to_path_buf();
        self
    }

    /// Appends arguments.
    pub(crate) fn args(mut self, args: &[&str]) -> Self {
        self.args.extend(args.iter().map(|a| a.to_string()));
        self
    }

    /// Stdout must be exactly `text`.
    pub(crate) fn stdout(mut self, text: &str) -> Self {
        self.stdout = Some(Expected::Exact(text.into()));
        self
    }

    /// Stdout must match `pattern` (see [`glob_matches`]).
    pub(crate) fn stdout_glob(mut self, pattern: &str) -> Self {
        self.stdout = Some(Expected::Glob(pattern.into()));
        self
    }

    /// Stdout must contain `text`.
    pub(crate) fn stdout_contains(mut self, text: &str) -> Self {
        self.stdout = Some(Expected::Contains(text.into()));
        self
    }

    /// Stdout is not checked.
    pub(crate) fn any_stdout(mut self) -> Self {
        self.stdout = None;
        self
    }

    /// Stderr must be exactly `text`.
    pub(crate) fn stderr(mut self, text: &str) -> Self {
        self.stderr = Some(Expected::Exact(text.into()));
        self
    }

    /// Stderr must match `pattern` (see [`glob_matches`]).
    pub(crate) fn stderr_glob(mut self, pattern: &str) -> Self {
        self.stderr = Some(Expected::Glob(pattern.into()));
        self
    }

    /// Stderr must contain `text`.
    pub(crate) fn stderr_contains(mut self, text: &str) -> Self {
        self.stderr = Some(Expected::Contains(text.into()));
        self
    }

    /// The exit status (0 unless set).
    pub(crate) fn status(mut self, status: i32) -> Self {
        self.status = status;
        self
    }

    /// Runs the command and checks everything that was asked for.
    pub(crate) fn run(self) -> Output {
        let mut command = Command::new(&self.program);
        command
            .args(&self.args)
            .env_remove("PEBBLE_SOCKET")
            .env_remove("PEBBLE_BASEURL")
            .env_remove("COLUMNS")
            .env("TZ", "UTC")
            .stdin(Stdio::null());
        for (key, value) in &self.env {
            command.env(key, value);
        }
        let output = command.output().expect("cannot run cobble");
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        if let Some(expected) = &self.stdout {
            expected.check("stdout", &stdout);
        }
        if let Some(expected) = &self.stderr {
            expected.check("stderr", &stderr);
        }
        assert_eq!(
            output.status.code(),
            Some(self.status),
            "exit status of cobble {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
            self.args
        );
        Output { stdout, stderr }
    }
}

/// A `cobble run` on a temporary `$PEBBLE`, stopped when dropped.
pub(crate) struct Daemon {
    root: TempDir,
    /// `$PEBBLE`: `pebble` under `root`, or a directory the test chose
    /// ([`Daemon::start_on`]).
    pebble: PathBuf,
    /// The executable that runs the daemon (see [`Daemon::start_as`]).
    program: PathBuf,
    child: Option<Child>,
}

impl Daemon {
    /// Writes `layers` (file stem, YAML) into `$PEBBLE/layers`, starts `cobble run` with
    /// `args`, and waits until its socket accepts connections.
    pub(crate) fn start(layers: &[(&str, &str)], args: &[&str]) -> Daemon {
        Daemon::start_with_env(layers, args, &[])
    }

    /// Like [`Daemon::start`], with extra environment variables for the daemon.
    pub(crate) fn start_with_env(
        layers: &[(&str, &str)],
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Daemon {
        Daemon::start_as(Path::new(COBBLE), layers, args, env)
    }

    /// Like [`Daemon::start_with_env`], running `program`: a link to the binary under test
    /// under another name (an image that ships it as `pebble`).
    pub(crate) fn start_as(
        program: &Path,
        layers: &[(&str, &str)],
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Daemon {
        let mut daemon = Daemon::prepare(layers);
        daemon.program = program.to_path_buf();
        daemon.launch(args, env);
        daemon
    }

    /// Like [`Daemon::start`], with `$PEBBLE` at `pebble_dir` (on a file system the test
    /// controls, say); the daemon's log stays in a temporary directory of its own.
    pub(crate) fn start_on(pebble_dir: &Path, layers: &[(&str, &str)], args: &[&str]) -> Daemon {
        let mut daemon = Daemon::prepare_at(layers, Some(pebble_dir.to_path_buf()));
        daemon.launch(args, &[]);
        daemon
    }

    /// Like [`Daemon::start`], on a `$PEBBLE` that already holds `files` (name, content),
    /// as a predecessor left them.
    pub(crate) fn start_with_files(
        files: &[(&str, &[u8])],
        layers: &[(&str, &str)],
        args: &[&str],
    ) -> Daemon {
        let mut daemon = Daemon::prepare(layers);
        for (name, content) in files {
            fs::write(daemon.pebble_dir().join(name), content).expect("state file");
        }
        daemon.launch(args, &[]);
        daemon
    }

    /// A temporary `$PEBBLE` with `layers` in it, and no daemon yet.
    fn prepare(layers: &[(&str, &str)]) -> Daemon {
        Daemon::prepare_at(layers, None)
    }

    fn prepare_at(layers: &[(&str, &str)], pebble: Option<PathBuf>) -> Daemon {
        let root = tempfile::tempdir().expect("temp dir");
        let pebble_dir = pebble.unwrap_or_else(|| root.path().join("pebble"));
        fs::create_dir_all(pebble_dir.join("layers")).expect("layers dir");
        for (stem, yaml) in layers {
            fs::write(pebble_dir.join("layers").join(format!("{stem}.yaml")), yaml)
                .expect("layer file");
        }
        Daemon {
            root,
            pebble: pebble_dir,
            program: PathBuf::from(COBBLE),
            child: None,
        }
    }

    /// Like [`Daemon::start_with_env`], with the daemon's stdout going to `stdout` instead of
    /// its log (a pipe the test holds, say).
    pub(crate) fn start_with_stdout(
        layers: &[(&str, &str)],
        args: &[&str],
        env: &[(&str, &str)],
        stdout: impl Into<Stdio>,
    ) -> Daemon {
        let mut daemon = Daemon::prepare(layers);
        daemon.launch_with(args, env, Some(stdout.into()));
        daemon
    }

    fn launch(&mut self, args: &[&str], env: &[(&str, &str)]) {
        self.launch_with(args, env, None);
    }

    /// Starts `cobble run` on this daemon's directory, with its stdout going to `stdout` or to
    /// its log, and waits until it listens.
    fn launch_with(&mut self, args: &[&str], env: &[(&str, &str)], stdout: Option<Stdio>) {
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.root.path().join("daemon.log"))
            .expect("log file");
        let child = Command::new(&self.program)
            .arg("run")
            .args(args)
            .env("PEBBLE", self.pebble_dir())
            .env("TZ", "UTC")
            .env_remove("PEBBLE_SOCKET")
            .env_remove("PEBBLE_VERBOSE")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(stdout.unwrap_or_else(|| log.try_clone().expect("log file").into()))
            .stderr(log)
            .spawn()
            .expect("cannot start cobble run");
        self.child = Some(child);
        self.wait_until_listening();
    }

    /// Starts a new daemon on the same `$PEBBLE` (after [`Daemon::stop`]).
    pub(crate) fn restart(&mut self, args: &[&str]) {
        assert!(self.child.is_none(), "stop the daemon before restarting it");
        self.launch(args, &[]);
    }

    /// The daemon's pid.
    pub(crate) fn pid(&self) -> u32 {
        self.child.as_ref().expect("daemon running").id()
    }

    /// Waits for the daemon to exit by itself and returns its exit code.
    pub(crate) fn wait_exit(&mut self, timeout: Duration) -> Option<i32> {
        let child = self.child.as_mut()?;
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                self.child = None;
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// A daemon with these layers that does not autostart anything.
    pub(crate) fn hold(layers: &[(&str, &str)]) -> Daemon {
        Daemon::start(layers, &["--hold"])
    }

    fn wait_until_listening(&mut self) {
        let socket = self.pebble_dir().join(".pebble.socket");
        let deadline = Instant::now() + DAEMON_DEADLINE;
        loop {
            if UnixStream::connect(&socket).is_ok() {
                return;
            }
            let child = self.child.as_mut().expect("daemon child");
            if let Some(status) = child.try_wait().expect("try_wait") {
                panic!(
                    "daemon exited with {status} before listening:\n{}",
                    self.log()
                );
            }
            assert!(
                Instant::now() < deadline,
                "daemon did not open {} in time:\n{}",
                socket.display(),
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `$PEBBLE` of this daemon.
    pub(crate) fn pebble_dir(&self) -> PathBuf {
        self.pebble.clone()
    }

    /// A scratch directory next to `$PEBBLE`, for layer files to `add`.
    pub(crate) fn scratch(&self) -> &Path {
        self.root.path()
    }

    /// What the daemon printed so far.
    pub(crate) fn log(&self) -> String {
        fs::read_to_string(self.root.path().join("daemon.log")).unwrap_or_default()
    }

    /// Waits until the daemon's log holds `text`. The daemon writes its log from a thread
    /// of its own, so a line can land just after the event that caused it is visible
    /// through the API.
    pub(crate) fn wait_log(&self, text: &str) {
        let deadline = Instant::now() + DAEMON_DEADLINE;
        while !self.log().contains(text) {
            assert!(
                Instant::now() < deadline,
                "the daemon log never said {text:?}:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills the daemon with SIGKILL, as a crash would, leaving its services running.
    pub(crate) fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops the daemon with SIGTERM and returns its exit code (`None` if it had to be
    /// killed).
    pub(crate) fn stop(&mut self) -> Option<i32> {
        let mut child = self.child.take()?;
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + DAEMON_DEADLINE;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        None
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop();
    }
}

#[test]
fn glob_matching() {
    assert!(glob_matches("a * c\nx", "a b b c\nx"));
    assert!(glob_matches("*", ""));
    assert!(!glob_matches("a*c", "a\nc"));
    assert!(!glob_matches("a", "a\n"));
    assert!(glob_matches("a?c", "abc"));
    assert!(!glob_matches("a?c", "ac"));
}

/// A client of `daemon`'s socket.
pub(crate) fn client(daemon: &Daemon) -> cobble_client::Client {
    let socket = daemon.pebble_dir().join(".pebble.socket");
    cobble_client::Client::new(cobble_client::ClientConfig::socket(socket)).expect("client")
}

/// A runtime for one client call from a synchronous test.
pub(crate) fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// The status of one service.
pub(crate) fn service(daemon: &Daemon, name: &str) -> cobble_client::types::ServiceInfo {
    rt().block_on(client(daemon).services(&[name.to_owned()]))
        .expect("services")
        .remove(0)
}

/// Sends one request to `daemon`'s socket; returns the status code and the body.
pub(crate) fn raw(
    daemon: &Daemon,
    method: cobble_client::Method,
    path: &str,
    body: Option<&str>,
) -> (u16, String) {
    let response = rt()
        .block_on(client(daemon).raw_request(method, path, body.map(|b| b.as_bytes().to_vec())))
        .expect("request");
    (
        response.status_code,
        String::from_utf8_lossy(&response.body).into_owned(),
    )
}

/// Runs a service action and waits (bounded) for its change.
pub(crate) fn act(
    daemon: &Daemon,
    action: &str,
    names: &[&str],
) -> cobble_client::types::ChangeInfo {
    let c = client(daemon);
    let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
    rt().block_on(async {
        let id = c.services_action(action, &names).await.expect("action");
        c.wait_change(&id, Some(Duration::from_secs(30)))
            .await
            .expect("wait")
    })
}

/// The lines of a file the test's services write to (none if it does not exist yet).
pub(crate) fn lines(path: &Path) -> Vec<String> {
    fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Seconds since the epoch, the last field of each line (as `date +%s.%N` writes them).
pub(crate) fn times(path: &Path) -> Vec<f64> {
    lines(path)
        .iter()
        .filter_map(|l| l.split_whitespace().last()?.parse().ok())
        .collect()
}

/// Whether process `pid` has a file open in `dir` (named or not: a file opened with
/// `O_TMPFILE` shows as `<dir>/#<inode> (deleted)`).
pub(crate) fn has_file_open_in(pid: u32, dir: &Path) -> bool {
    let Ok(fds) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.filter_map(Result::ok)
        .any(|fd| fs::read_link(fd.path()).is_ok_and(|target| target.parent() == Some(dir)))
}

/// What `GET /v1/services?details=true` says of service `name`.
pub(crate) fn details_of(d: &Daemon, name: &str) -> cobble_client::types::ServiceDetails {
    let (status, body) = raw(
        d,
        cobble_client::Method::GET,
        &format!("/v1/services?names={name}&details=true"),
        None,
    );
    assert_eq!(status, 200, "{body}");
    let body: serde_json::Value = serde_json::from_str(&body).unwrap();
    let info: cobble_client::types::ServiceInfo =
        serde_json::from_value(body["result"][0].clone()).unwrap();
    info.details.unwrap_or_default()
}

/// Check `name` as the daemon reports it.
pub(crate) fn check(d: &Daemon, name: &str) -> cobble_client::types::CheckInfo {
    rt().block_on(client(d).checks("", &[name.to_owned()]))
        .unwrap()
        .remove(0)
}

/// Waits until check `name` has run `runs` more times with the same result as it has now
/// (successes while it is up, failures while it is down): what was to follow from its
/// results had that long to happen.
pub(crate) fn wait_check_runs(d: &Daemon, name: &str, runs: u64) {
    let now = check(d, name);
    let count = |c: &cobble_client::types::CheckInfo| {
        if now.status == "up" {
            c.successes.unwrap_or(0)
        } else {
            c.failures
        }
    };
    let target = count(&now) + runs;
    wait_for(
        &format!("{runs} more runs of check {name}"),
        Duration::from_secs(60),
        || {
            let c = check(d, name);
            c.status == now.status && count(&c) >= target
        },
    );
}

/// Whether process `pid` runs: it exists and is not a zombie waiting for whoever inherited
/// it.
pub(crate) fn running(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

/// The pid a service wrote to `marker` (its `$$`), once it has.
pub(crate) fn main_pid(marker: &Path) -> u32 {
    let mut pid = 0;
    wait_for("the service's pid", Duration::from_secs(10), || {
        pid = fs::read_to_string(marker)
            .ok()
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(0);
        pid != 0
    });
    pid
}
