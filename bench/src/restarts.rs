//! The restarts group: what a held socket (`sockets:`) buys the clients of a service that is
//! restarted, against the same service binding its own port under cobble and under Pebble.
//!
//! # Theory of operation
//!
//! One small HTTP/1.0 server ([`SERVER`], Python, standard library only) runs as the only
//! service of a fresh daemon in three cases: under cobble with its port held by the daemon
//! (it accepts on fd 3 when `LISTEN_FDS=1` and `LISTEN_PID` is its own pid), under cobble
//! binding the port itself, and, with `--pebble PATH`, under that Pebble binding the port
//! itself (the same layer without `sockets:`, which Pebble refuses). Every case has the same
//! service settings ([`service_layer`]).
//!
//! An open-loop client in the harness opens a new TCP connection to the port every
//! `interval` (5 ms: 200 a second) for the whole series, whatever became of the earlier
//! ones; each sends a `GET`, reads the answer to its end, and is classified: answered (with
//! its latency from the start of the connect to the end of the answer, and the pid of the run
//! that answered), refused (`ECONNREFUSED` at connect) or failed (reset, closed without a
//! whole answer, or no answer within [`REQUEST_TIMEOUT`]). At most [`MAX_IN_FLIGHT`]
//! connections are open at once; a tick that finds that many is counted, not sent.
//!
//! Meanwhile the service is restarted `restarts` times, alternately by the API
//! (`POST /v1/services` `restart`, through `cobble-client`; Pebble speaks the same API) and
//! by `SIGKILL` of its pid (from the pid file the server writes once it is ready to accept).
//! A restart is down from just before the request or the signal until the new run's pid file
//! appears; after it the harness waits for the restart's change (API), an answer from the new
//! run and the service listed `active`, then `settle`, before the next one.
//!
//! A run killed with `SIGKILL` takes the connection it had accepted and not yet answered with
//! it, under any supervisor. The server logs the client port of every connection it accepts
//! (one unbuffered write per accept), so a failed connection that a killed run had accepted
//! is told apart from one that no run accepted (reset with the queue of a listener that
//! closed, or never answered).

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::io::ErrorKind;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::daemon::{Daemon, TOKEN_VAR};
use crate::report::{self, millis};
use crate::stats::Samples;

/// How long the daemon may take to answer its first request.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);
/// A request not answered within this has failed.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// The most connections the client keeps open at once.
const MAX_IN_FLIGHT: usize = 512;
/// How long a restart (or the first start) may take before the harness gives up.
const RESTART_TIMEOUT: Duration = Duration::from_secs(30);
/// Load before the first restart and after the last one.
const LEAD: Duration = Duration::from_secs(1);
/// The pause between readings of the pid file.
const PID_POLL: Duration = Duration::from_millis(1);
/// The service's name in the layer.
const SERVICE: &str = "web";

/// The service: answers every request with `HTTP/1.0 200 OK` and its pid, then closes.
///
/// Arguments: the pid file, the accept log, the port. It accepts on fd 3 when it is passed a
/// socket, and binds `127.0.0.1:PORT` itself (`SO_REUSEADDR`) otherwise; then writes
/// `PID held` or `PID bound` to the pid file (renamed into place, so never read half
/// written). On `SIGTERM` it stops accepting, finishes the request in hand and exits: the
/// loop waits for the listener at most 20 ms at a time and checks the flag the handler sets,
/// so no accepted connection is abandoned.
const SERVER: &str = r#"import os, select, signal, socket, sys

pid_path, accept_log, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
pid = os.getpid()
if os.environ.get('LISTEN_FDS') == '1' and os.environ.get('LISTEN_PID') == str(pid):
    listener, mode = socket.socket(fileno=3), 'held'
else:
    listener, mode = socket.socket(socket.AF_INET, socket.SOCK_STREAM), 'bound'
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(('127.0.0.1', port))
    listener.listen(4096)

stopping = False

def on_term(signum, frame):
    global stopping
    stopping = True

signal.signal(signal.SIGTERM, on_term)
log = os.open(accept_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
body = b'%d\n' % pid
answer = b'HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n' % len(body) + body
with open(pid_path + '.new', 'w') as f:
    f.write('%d %s\n' % (pid, mode))
os.rename(pid_path + '.new', pid_path)

while not stopping:
    if not select.select([listener], [], [], 0.02)[0] or stopping:
        continue
    try:
        conn, peer = listener.accept()
    except (BlockingIOError, InterruptedError):
        continue
    os.write(log, b'%d %d\n' % (pid, peer[1]))
    try:
        conn.settimeout(5)
        head = b''
        while b'\r\n\r\n' not in head:
            chunk = conn.recv(1024)
            if not chunk:
                break
            head += chunk
        else:
            conn.sendall(answer)
    except OSError:
        pass
    conn.close()
"#;

/// What each connection sends.
const REQUEST: &[u8] = b"GET / HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";

/// What the restarts group runs.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// Restarts per case, alternately by the API and by `SIGKILL` (the API first).
    pub restarts: usize,
    /// Rounds the restarts of each case are split into, one daemon each; the cases take
    /// turns in every round.
    pub rounds: usize,
    /// The time between two connections of the client.
    pub interval: Duration,
    /// The pause after each restart has completed.
    pub settle: Duration,
    /// A Pebble binary for the third case.
    pub pebble: Option<PathBuf>,
    /// The Python that runs the server.
    pub python: String,
    /// The pause between attempts to reach a launching daemon.
    pub poll_launch: Duration,
}

/// Who runs the service, and who holds its port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Setup {
    /// Cobble holds the port and passes it to each run.
    Held,
    /// Under cobble, each run binds the port itself.
    CobbleOwnPort,
    /// Under Pebble, each run binds the port itself.
    PebbleOwnPort,
}

impl Setup {
    /// The mode the server must report in its pid file.
    fn mode(self) -> &'static str {
        match self {
            Setup::Held => "held",
            Setup::CobbleOwnPort | Setup::PebbleOwnPort => "bound",
        }
    }
}

/// How a restart is brought about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RestartBy {
    /// `POST /v1/services` with `restart`: SIGTERM, then a new run.
    Api,
    /// `SIGKILL` of the service's pid; the daemon restarts it after its backoff.
    Kill,
}

impl RestartBy {
    fn label(self) -> &'static str {
        match self {
            RestartBy::Api => "API restart",
            RestartBy::Kill => "kill -9",
        }
    }
}

/// One restart of the series.
#[derive(Debug, Clone)]
struct Restart {
    by: RestartBy,
    /// The run it ended.
    old_pid: u32,
    /// The run it started.
    new_pid: u32,
    /// Just before the request was sent or the signal.
    began: Instant,
    /// When the new run's pid file was seen: it accepts from then on.
    ready: Instant,
}

/// Why a connection was not answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Failure {
    /// Reset by the peer (or a broken pipe on the request).
    Reset,
    /// Closed before a whole `200` answer.
    Incomplete,
    /// No answer within [`REQUEST_TIMEOUT`].
    Timeout,
    /// Any other error.
    Other,
}

/// What became of one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// A whole answer, from the run with this pid.
    Answered(u32),
    /// `ECONNREFUSED` at connect.
    Refused,
    Failed(Failure),
}

/// One connection of the client.
#[derive(Debug, Clone, Copy)]
struct Attempt {
    /// Just before the connect.
    started: Instant,
    /// When the outcome was known.
    ended: Instant,
    /// The client's port, once connected.
    port: Option<u16>,
    outcome: Outcome,
}

/// One daemon's series of restarts under load.
struct Series {
    attempts: Vec<Attempt>,
    restarts: Vec<Restart>,
    /// Ticks at which [`MAX_IN_FLIGHT`] connections were open.
    not_sent: usize,
    /// The client ports each run accepted, by pid.
    accepted: HashMap<u32, HashSet<u16>>,
}

/// What one case measured: its series, one a round.
struct Case {
    label: String,
    series: Vec<Series>,
}

/// Runs the group and returns its Markdown.
pub(crate) async fn run(cobble: &Path, token: &str, settings: &Settings) -> Result<String> {
    ensure!(
        settings.rounds > 0
            && settings.restarts > 0
            && settings.restarts.is_multiple_of(settings.rounds),
        "the restarts must be a positive multiple of the rounds"
    );
    ensure!(!settings.interval.is_zero(), "a positive interval");
    let python = resolve_python(&settings.python)?;
    let settings = &Settings {
        python,
        ..settings.clone()
    };
    let mut setups = vec![(Setup::Held, cobble), (Setup::CobbleOwnPort, cobble)];
    if let Some(pebble) = &settings.pebble {
        setups.push((Setup::PebbleOwnPort, pebble.as_path()));
    }
    let mut cases: Vec<Case> = Vec::new();
    for round in 0..settings.rounds {
        // The cases take turns, in the opposite order every other round, so that what else
        // the machine does over the run weighs on each alike.
        let mut order: Vec<usize> = (0..setups.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for i in order {
            let (setup, binary) = setups[i];
            let (label, series) = run_series(binary, setup, token, settings, round).await?;
            // The first round, in the order of the setups, makes the cases.
            match cases.iter_mut().find(|c| c.label == label) {
                Some(case) => case.series.push(series),
                None => cases.push(Case {
                    label,
                    series: vec![series],
                }),
            }
        }
    }
    Ok(render(&cases, settings))
}

/// The interpreter `python` runs, by its absolute path: a shim on `PATH` (pyenv's is a shell
/// script) would add its own start-up to every restart.
fn resolve_python(python: &str) -> Result<String> {
    let output = std::process::Command::new(python)
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .with_context(|| format!("cannot run {python}"))?;
    ensure!(
        output.status.success(),
        "{python} failed: {}",
        output.status
    );
    let path = String::from_utf8(output.stdout)?.trim().to_string();
    ensure!(!path.is_empty(), "{python} names no executable");
    Ok(path)
}

/// The layer of one case: the server, the same backoff everywhere, and in the held case
/// its socket.
fn service_layer(setup: Setup, command: &str, port: u16, token: &str) -> String {
    let mut yaml = format!(
        "services:\n  {SERVICE}:\n    override: replace\n    command: {command}\n    \
         backoff-delay: 500ms\n    backoff-factor: 1\n    \
         environment:\n      {TOKEN_VAR}: {token}\n"
    );
    if setup == Setup::Held {
        let _ = write!(
            yaml,
            "    sockets:\n      http:\n        listen: 127.0.0.1:{port}\n"
        );
    }
    yaml
}

/// One daemon running the service in `setup`: its first start, then a series of
/// `restarts / rounds` restarts under load. Returns the case's label and the series.
async fn run_series(
    binary: &Path,
    setup: Setup,
    token: &str,
    settings: &Settings,
    round: usize,
) -> Result<(String, Series)> {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.local_addr()?.port()
    };
    let address: SocketAddr = ([127, 0, 0, 1], port).into();
    let mut daemon = Daemon::spawn(binary, None, token)?;
    daemon
        .wait_answer(settings.poll_launch, ANSWER_TIMEOUT)
        .await?;
    let client = daemon.client();
    let label = match setup {
        Setup::Held => "cobble, held socket".to_string(),
        Setup::CobbleOwnPort => "cobble, own port".to_string(),
        // Cobble reports the Pebble version it answers for; Pebble its own.
        Setup::PebbleOwnPort => format!("Pebble {}, own port", client.system_info().await?.version),
    };
    let restarts = settings.restarts / settings.rounds;
    eprintln!(
        "==> restarts: {label}, round {}/{}, {restarts} restarts",
        round + 1,
        settings.rounds
    );

    let script = daemon.dir().join("server.py");
    std::fs::write(&script, SERVER).context("cannot write the server")?;
    let pid_file = daemon.dir().join("server.pid");
    let accept_log = daemon.dir().join("accepts");
    let command = format!(
        "{} {} {} {} {port}",
        settings.python,
        script.display(),
        pid_file.display(),
        accept_log.display()
    );
    client
        .add_layer(
            "restarts",
            &service_layer(setup, &command, port, token),
            false,
            false,
        )
        .await?;
    let names = [SERVICE.to_string()];
    let id = client.start(&names).await?;
    let change = client.wait_change(&id, Some(RESTART_TIMEOUT)).await?;
    ensure!(
        change.status == "Done",
        "start ended {}: {}",
        change.status,
        change.err
    );
    let first_pid = wait_new_pid(&pid_file, None, setup.mode()).await?;
    let answered = request(address).await;
    ensure!(
        answered.outcome == Outcome::Answered(first_pid),
        "the service's first answer: {:?}",
        answered.outcome
    );

    let attempts = Rc::new(RefCell::new(Vec::new()));
    let stop = Rc::new(Cell::new(false));
    let not_sent = Rc::new(Cell::new(0));
    let local = tokio::task::LocalSet::new();
    let restarts = local
        .run_until(async {
            let load = tokio::task::spawn_local(open_loop(
                address,
                settings.interval,
                stop.clone(),
                attempts.clone(),
                not_sent.clone(),
            ));
            let restarts = restart_series(
                &daemon, &pid_file, setup, first_pid, restarts, settings, &attempts,
            )
            .await;
            stop.set(true);
            load.await.context("the client's task")?;
            restarts
        })
        .await?;
    let accepted = read_accept_log(&accept_log)?;
    daemon.stop_clean()?;
    let attempts = attempts.take();
    Ok((
        label,
        Series {
            attempts,
            restarts,
            not_sent: not_sent.get(),
            accepted,
        },
    ))
}

/// [`LEAD`] of load, the restarts one after another, [`LEAD`] more.
async fn restart_series(
    daemon: &Daemon,
    pid_file: &Path,
    setup: Setup,
    first_pid: u32,
    count: usize,
    settings: &Settings,
    attempts: &RefCell<Vec<Attempt>>,
) -> Result<Vec<Restart>> {
    let client = daemon.client();
    let names = [SERVICE.to_string()];
    let mut restarts = Vec::with_capacity(count);
    let mut pid = first_pid;
    tokio::time::sleep(LEAD).await;
    for i in 0..count {
        let by = if i % 2 == 0 {
            RestartBy::Api
        } else {
            RestartBy::Kill
        };
        let began = Instant::now();
        let change = match by {
            RestartBy::Api => Some(client.restart(&names).await?),
            RestartBy::Kill => {
                kill(Pid::from_raw(pid as i32), Signal::SIGKILL)
                    .with_context(|| format!("cannot kill {pid}"))?;
                None
            }
        };
        let new_pid = wait_new_pid(pid_file, Some(pid), setup.mode()).await?;
        let ready = Instant::now();
        if let Some(id) = change {
            let change = client.wait_change(&id, Some(RESTART_TIMEOUT)).await?;
            ensure!(
                change.status == "Done",
                "restart ended {}: {}",
                change.status,
                change.err
            );
        }
        bounded("an answer from the new run and the service active", async {
            loop {
                let answered = attempts
                    .borrow()
                    .iter()
                    .any(|a| a.outcome == Outcome::Answered(new_pid));
                if answered
                    && client
                        .services(&names)
                        .await?
                        .first()
                        .is_some_and(|s| s.current == "active")
                {
                    return Ok(());
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await?;
        restarts.push(Restart {
            by,
            old_pid: pid,
            new_pid,
            began,
            ready,
        });
        pid = new_pid;
        tokio::time::sleep(settings.settle).await;
    }
    tokio::time::sleep(LEAD).await;
    Ok(restarts)
}

/// Runs `work` for at most [`RESTART_TIMEOUT`].
async fn bounded(what: &str, work: impl Future<Output = Result<()>>) -> Result<()> {
    tokio::time::timeout(RESTART_TIMEOUT, work)
        .await
        .with_context(|| format!("no {what} within {RESTART_TIMEOUT:?}"))?
}

/// Reads the pid file until it names a run other than `old` (any run when `None`) that
/// reports `mode`; returns its pid.
async fn wait_new_pid(pid_file: &Path, old: Option<u32>, mode: &str) -> Result<u32> {
    let started = Instant::now();
    loop {
        if let Ok(text) = std::fs::read_to_string(pid_file)
            && let Some((pid, its_mode)) = text.trim().split_once(' ')
            && let Ok(pid) = pid.parse::<u32>()
            && Some(pid) != old
        {
            ensure!(
                its_mode == mode,
                "the service's socket is {its_mode}, expected {mode}"
            );
            return Ok(pid);
        }
        if started.elapsed() > RESTART_TIMEOUT {
            bail!("no new run of the service within {RESTART_TIMEOUT:?}");
        }
        tokio::time::sleep(PID_POLL).await;
    }
}

/// Opens a connection every `interval` until `stop`, each in a task of its own, and records
/// what became of it; then waits for the last ones.
async fn open_loop(
    address: SocketAddr,
    interval: Duration,
    stop: Rc<Cell<bool>>,
    attempts: Rc<RefCell<Vec<Attempt>>>,
    not_sent: Rc<Cell<usize>>,
) {
    let in_flight = Rc::new(Cell::new(0usize));
    // An open loop: each connection has its slot on a fixed schedule; a late tick (the
    // harness's thread was busy) is sent at once rather than skipped.
    let mut next = tokio::time::Instant::now();
    while !stop.get() {
        tokio::time::sleep_until(next).await;
        next += interval;
        if in_flight.get() >= MAX_IN_FLIGHT {
            not_sent.set(not_sent.get() + 1);
            continue;
        }
        in_flight.set(in_flight.get() + 1);
        let (attempts, in_flight) = (attempts.clone(), in_flight.clone());
        tokio::task::spawn_local(async move {
            let attempt = request(address).await;
            attempts.borrow_mut().push(attempt);
            in_flight.set(in_flight.get() - 1);
        });
    }
    // Every request ends within its timeout.
    while in_flight.get() > 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// One request on a new connection.
async fn request(address: SocketAddr) -> Attempt {
    let started = Instant::now();
    let mut port = None;
    let result = tokio::time::timeout(REQUEST_TIMEOUT, async {
        let mut stream = TcpStream::connect(address).await.map_err(|e| (true, e))?;
        port = stream.local_addr().ok().map(|a| a.port());
        stream.write_all(REQUEST).await.map_err(|e| (false, e))?;
        let mut answer = Vec::with_capacity(128);
        stream
            .read_to_end(&mut answer)
            .await
            .map_err(|e| (false, e))?;
        Ok::<_, (bool, std::io::Error)>(answer)
    })
    .await;
    let outcome = match result {
        Err(_) => Outcome::Failed(Failure::Timeout),
        Ok(Err((true, e))) if e.kind() == ErrorKind::ConnectionRefused => Outcome::Refused,
        Ok(Err((_, e)))
            if matches!(
                e.kind(),
                ErrorKind::ConnectionReset | ErrorKind::BrokenPipe | ErrorKind::ConnectionAborted
            ) =>
        {
            Outcome::Failed(Failure::Reset)
        }
        Ok(Err(_)) => Outcome::Failed(Failure::Other),
        Ok(Ok(answer)) => match answering_pid(&answer) {
            Some(pid) => Outcome::Answered(pid),
            None => Outcome::Failed(Failure::Incomplete),
        },
    };
    Attempt {
        started,
        ended: Instant::now(),
        port,
        outcome,
    }
}

/// The pid in a whole `200` answer of [`SERVER`]; `None` for anything else.
fn answering_pid(answer: &[u8]) -> Option<u32> {
    let text = std::str::from_utf8(answer).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    let mut lines = head.split("\r\n");
    if lines.next()? != "HTTP/1.0 200 OK" {
        return None;
    }
    let length: usize = lines
        .find_map(|line| line.strip_prefix("Content-Length: "))?
        .parse()
        .ok()?;
    if body.len() != length {
        return None;
    }
    body.trim_end().parse().ok()
}

/// The accept log: `PID PORT` a line.
fn read_accept_log(path: &Path) -> Result<HashMap<u32, HashSet<u16>>> {
    let text = std::fs::read_to_string(path).context("cannot read the accept log")?;
    let mut accepted: HashMap<u32, HashSet<u16>> = HashMap::new();
    for line in text.lines() {
        let parsed = line
            .split_once(' ')
            .and_then(|(pid, port)| Some((pid.parse().ok()?, port.parse().ok()?)));
        let (pid, port) = parsed.with_context(|| format!("bad accept log line {line:?}"))?;
        accepted.entry(pid).or_default().insert(port);
    }
    Ok(accepted)
}

/// What a case's connections came to, overall or around one kind of restart.
#[derive(Default)]
struct Tally {
    restarts: usize,
    connections: usize,
    answered: usize,
    refused: usize,
    failed: usize,
    /// Failed connections that a run had accepted and was then killed.
    lost_with_killed_run: usize,
    /// Failed connections that no run accepted.
    never_accepted: usize,
    /// Answered connections: from the connect to the end of the answer.
    latency: Samples,
    /// Answered connections that started while the service was down.
    latency_down: Samples,
    /// From each restart's request or signal until the new run was ready.
    down: Samples,
    /// For each restart, from the first to the last error the client saw (a refusal, a reset,
    /// a close or a timeout), plus one interval: how long a client kept getting errors.
    errors_for: Duration,
    /// The kinds of failure, for the notes.
    failures: HashMap<&'static str, usize>,
}

impl Case {
    /// Counts the connections of every series after restarts of kind `by` (all of them
    /// when `None`).
    fn tally(&self, by: Option<RestartBy>, interval: Duration) -> Tally {
        let mut tally = Tally::default();
        for series in &self.series {
            series.count(&mut tally, by, interval);
        }
        tally
    }

    /// Ticks not sent because [`MAX_IN_FLIGHT`] connections were open.
    fn not_sent(&self) -> usize {
        self.series.iter().map(|s| s.not_sent).sum()
    }
}

impl Series {
    /// The restart whose time an attempt's outcome falls in: the last one begun before the
    /// client knew it. (A connection a killed run took with it started before the kill;
    /// the client learns of it at the kill.)
    fn restart_of(&self, attempt: &Attempt) -> Option<&Restart> {
        self.restarts
            .iter()
            .rev()
            .find(|r| r.began <= attempt.ended)
    }

    /// The runs that accepted the attempt's connection: those that logged its client port
    /// and could have held it, from the restart that began them (the first run: from the
    /// start) to the end of the restart that ended them (the last: to the end). A client
    /// port comes round again over a series, never within one run's few seconds.
    fn accepted_by(&self, attempt: &Attempt) -> Vec<u32> {
        let Some(port) = attempt.port else {
            return Vec::new();
        };
        self.accepted
            .iter()
            .filter(|(pid, ports)| {
                let began = self.restarts.iter().find(|r| r.new_pid == **pid);
                let ended = self.restarts.iter().find(|r| r.old_pid == **pid);
                ports.contains(&port)
                    && began.is_none_or(|r| r.began <= attempt.ended)
                    && ended.is_none_or(|r| attempt.started <= r.ready)
            })
            .map(|(&pid, _)| pid)
            .collect()
    }

    /// Adds the connections after restarts of kind `by` (all of them when `None`) to
    /// `tally`.
    fn count(&self, tally: &mut Tally, by: Option<RestartBy>, interval: Duration) {
        tally.restarts += self
            .restarts
            .iter()
            .filter(|r| by.is_none_or(|by| r.by == by))
            .count();
        for restart in self
            .restarts
            .iter()
            .filter(|r| by.is_none_or(|b| r.by == b))
        {
            tally.down.push(restart.ready - restart.began);
        }
        let mut unanswered: HashMap<Instant, (Instant, Instant)> = HashMap::new();
        for attempt in &self.attempts {
            let restart = self.restart_of(attempt);
            if by.is_some() && restart.map(|r| r.by) != by {
                continue;
            }
            tally.connections += 1;
            let during_down = self
                .restarts
                .iter()
                .any(|r| r.began <= attempt.started && attempt.started <= r.ready);
            match attempt.outcome {
                Outcome::Answered(_) => {
                    tally.answered += 1;
                    let took = attempt.ended - attempt.started;
                    tally.latency.push(took);
                    if during_down {
                        tally.latency_down.push(took);
                    }
                    continue;
                }
                Outcome::Refused => tally.refused += 1,
                Outcome::Failed(failure) => {
                    tally.failed += 1;
                    *tally
                        .failures
                        .entry(match failure {
                            Failure::Reset => "reset",
                            Failure::Incomplete => "closed without a whole answer",
                            Failure::Timeout => "no answer in time",
                            Failure::Other => "other error",
                        })
                        .or_default() += 1;
                    let accepted_by = self.accepted_by(attempt);
                    let killed = self
                        .restarts
                        .iter()
                        .any(|r| r.by == RestartBy::Kill && accepted_by.contains(&r.old_pid));
                    if killed {
                        tally.lost_with_killed_run += 1;
                    } else if accepted_by.is_empty() {
                        tally.never_accepted += 1;
                    }
                }
            }
            if let Some(restart) = restart {
                let span = unanswered
                    .entry(restart.began)
                    .or_insert((attempt.ended, attempt.ended));
                span.0 = span.0.min(attempt.ended);
                span.1 = span.1.max(attempt.ended);
            }
        }
        tally.errors_for += unanswered
            .values()
            .map(|(first, last)| *last - *first + interval)
            .sum::<Duration>();
    }
}

/// The group's tables and notes.
fn render(cases: &[Case], settings: &Settings) -> String {
    let per_round = settings.restarts / settings.rounds;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} restarts per case ({} by the API's `restart`, {} by `kill -9`, alternating), in {} \
         rounds of one daemon per case, the cases taking turns (reversed every other round); a \
         new connection every {} ms ({:.0}/s) throughout; service settings in every case: \
         `backoff-delay: 500ms`, `backoff-factor: 1`.\n",
        settings.restarts,
        settings.rounds * per_round.div_ceil(2),
        settings.rounds * (per_round / 2),
        settings.rounds,
        settings.interval.as_millis(),
        1.0 / settings.interval.as_secs_f64(),
    );
    let ms = |d: Duration| millis(d);
    let mut rows = Vec::new();
    for case in cases {
        let t = case.tally(None, settings.interval);
        rows.push(vec![
            case.label.clone(),
            t.connections.to_string(),
            t.answered.to_string(),
            t.refused.to_string(),
            t.failed.to_string(),
            t.lost_with_killed_run.to_string(),
            ms(t.latency.median()),
            ms(t.latency.p99()),
            ms(t.latency.max()),
            t.latency_down.len().to_string(),
            ms(t.latency_down.median()),
            ms(t.latency_down.p99()),
            ms(t.latency_down.max()),
            ms(t.down.values().iter().sum()),
            ms(t.errors_for),
        ]);
    }
    out.push_str(&report::plain_table(
        &[
            "Case",
            "connections",
            "answered",
            "refused",
            "failed",
            "of which lost with a killed run",
            "latency p50",
            "p99",
            "max",
            "answered, started while down",
            "p50",
            "p99",
            "max",
            "service down, total",
            "client saw errors for",
        ],
        &rows,
    ));
    out.push('\n');

    let mut rows = Vec::new();
    for case in cases {
        for by in [RestartBy::Api, RestartBy::Kill] {
            let t = case.tally(Some(by), settings.interval);
            rows.push(vec![
                case.label.clone(),
                by.label().to_string(),
                t.restarts.to_string(),
                ms(t.down.median()),
                ms(t.down.max()),
                t.connections.to_string(),
                t.refused.to_string(),
                t.failed.to_string(),
                t.lost_with_killed_run.to_string(),
                t.never_accepted.to_string(),
                t.latency_down.len().to_string(),
                ms(t.latency_down.median()),
                ms(t.latency_down.p99()),
                ms(t.errors_for),
            ]);
        }
    }
    out.push_str(&report::plain_table(
        &[
            "Case",
            "restarted by",
            "restarts",
            "down per restart, median",
            "max",
            "connections",
            "refused",
            "failed",
            "lost with a killed run",
            "never accepted",
            "answered, started while down",
            "p50",
            "p99",
            "client saw errors for",
        ],
        &rows,
    ));
    out.push('\n');
    for case in cases {
        let t = case.tally(None, settings.interval);
        let mut failures: Vec<_> = t.failures.iter().collect();
        failures.sort();
        let failures = if failures.is_empty() {
            "none".to_string()
        } else {
            failures
                .iter()
                .map(|(what, n)| format!("{n} {what}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let _ = writeln!(
            out,
            "- {}: failures: {failures}; {} ticks not sent ({MAX_IN_FLIGHT} connections open).",
            case.label,
            case.not_sent()
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_whole_answer_names_its_run() {
        let whole =
            b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 6\r\n\r\n12345\n";
        assert_eq!(answering_pid(whole), Some(12345));
        assert_eq!(answering_pid(&whole[..whole.len() - 2]), None);
        assert_eq!(answering_pid(b""), None);
        assert_eq!(
            answering_pid(b"HTTP/1.0 500 Oops\r\nContent-Length: 2\r\n\r\n1\n"),
            None
        );
    }

    #[test]
    fn only_the_held_case_names_a_socket() {
        let held = service_layer(Setup::Held, "python3 s.py", 8080, "t");
        assert!(held.ends_with("    sockets:\n      http:\n        listen: 127.0.0.1:8080\n"));
        let own = service_layer(Setup::PebbleOwnPort, "python3 s.py", 8080, "t");
        assert!(!own.contains("sockets"));
        assert_eq!(
            held.replace(
                "    sockets:\n      http:\n        listen: 127.0.0.1:8080\n",
                ""
            ),
            own
        );
    }
}
