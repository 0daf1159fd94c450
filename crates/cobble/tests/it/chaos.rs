//! Chaos: the daemon SIGKILLed at random moments while clients start, stop and restart
//! services, run commands and push files, then restarted on the same `$PEBBLE`. Whatever
//! instant the kill lands on, the next daemon must find every service process its
//! predecessor started (so none runs twice), every change whose ID a client received must
//! still exist, change IDs must never be given out twice, the state file left by the kill
//! must be valid, and no temporary file may be left behind (in `$PEBBLE` or beside a
//! pushed file, which holds one whole push or none).
//!
//! The rounds run in the normal suite are few enough to stay within a few tens of seconds;
//! `chaos_long` (ignored) runs 100 rounds: `cargo nextest run -p cobble --run-ignored only
//! chaos_long`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::fixture::{Daemon, client, wait_for};

const SERVICES: usize = 20;

/// A small xorshift generator: the rounds need variety, not quality.
struct Random(u64);

impl Random {
    fn seeded() -> Random {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        Random(u64::from(nanos) | 1)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Each service sleeps with a marker argument unique to this test run, so its processes
/// can be counted in `/proc`.
fn marker(tag: u64, i: usize) -> String {
    format!("0.{tag}{i:03}")
}

fn layer(tag: u64) -> String {
    let mut yaml = String::from("services:\n");
    for i in 0..SERVICES {
        yaml.push_str(&format!(
            "  s{i}:\n    override: replace\n    command: sleep 86400 {}\n",
            marker(tag, i)
        ));
    }
    yaml
}

/// Live (not zombie) processes per marker.
fn running(tag: u64) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for (_, marker) in marked(tag) {
        *counts.entry(marker).or_insert(0) += 1;
    }
    counts
}

/// SIGKILLs the marked processes a failed round left behind.
fn kill_marked(tag: u64) {
    for (pid, _) in marked(tag) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

/// Live (not zombie) processes carrying this run's marker, with their markers.
fn marked(tag: u64) -> Vec<(u32, String)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
        let Some(last) = args.iter().rev().find(|a| !a.is_empty()) else {
            continue;
        };
        let last = String::from_utf8_lossy(last);
        if !(0..SERVICES).any(|i| last == marker(tag, i)) {
            continue;
        }
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat
            .rsplit(')')
            .next()
            .and_then(|s| s.trim().chars().next());
        if state.is_some_and(|s| s != 'Z') {
            found.push((pid, last.into_owned()));
        }
    }
    found
}

/// Size of each pushed file; every push writes one byte value throughout.
const PUSH_SIZE: usize = 256 * 1024;

/// Where the traffic pushes its files.
fn push_dir(daemon: &Daemon) -> std::path::PathBuf {
    daemon.scratch().join("pushes")
}

/// A client alternating pushes of one file and short execs until the daemon is gone;
/// returns the change IDs of the execs.
async fn push_and_exec(
    c: cobble_client::Client,
    target: String,
    mut random: Random,
    stop: &std::sync::atomic::AtomicBool,
) -> Vec<u64> {
    let mut ids = Vec::new();
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        if random.below(2) == 0 {
            let fill = b'a' + random.below(26) as u8;
            let options = cobble_client::PushOptions {
                path: target.clone(),
                make_dirs: true,
                ..Default::default()
            };
            let source = std::io::Cursor::new(vec![fill; PUSH_SIZE]);
            if c.push(&options, source).await.is_err() {
                break;
            }
        } else {
            let options = cobble_client::ExecOptions::new(["true"]);
            match c.exec(&options).await {
                Ok(process) => {
                    ids.push(
                        process
                            .change_id()
                            .parse::<u64>()
                            .expect("numeric change ID"),
                    );
                    if process.wait().await.is_err() {
                        break;
                    }
                }
                Err(_) => break,
            }
        }
    }
    ids
}

/// Two clients sending service actions as fast as the daemon answers, and one pushing files
/// and running commands, until it is gone; returns the change IDs they were given.
fn traffic(daemon: &Daemon, seed: u64, stop: &std::sync::atomic::AtomicBool) -> Vec<u64> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let clients: Vec<_> = (0..2).map(|_| client(daemon)).collect();
    rt.block_on(async {
        let tasks = clients.into_iter().enumerate().map(|(n, c)| {
            let mut random = Random(seed.wrapping_add(n as u64 * 7919) | 1);
            async move {
                let mut ids = Vec::new();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let action = ["start", "stop", "restart"][random.below(3) as usize];
                    let names: Vec<String> = (0..1 + random.below(4))
                        .map(|_| format!("s{}", random.below(SERVICES as u64)))
                        .collect();
                    match c.services_action(action, &names).await {
                        Ok(id) => ids.push(id.parse::<u64>().expect("numeric change ID")),
                        Err(_) => break,
                    }
                }
                ids
            }
        });
        let target = push_dir(daemon).join("file").display().to_string();
        let io = push_and_exec(client(daemon), target, Random(seed | 1), stop);
        let (services, io) =
            futures_util::future::join(futures_util::future::join_all(tasks), io).await;
        services.into_iter().flatten().chain(io).collect()
    })
}

/// The state a SIGKILL left: the state file present once a change ID was given out, and
/// with its journal (read as the next daemon reads them) valid and remembering every ID given.
fn check_state_file(daemon: &Daemon, ids: &[u64]) -> Result<(), String> {
    let path = daemon.pebble_dir().join(".pebble.state");
    if let Err(e) = std::fs::metadata(&path) {
        if ids.is_empty() {
            return Ok(());
        }
        return Err(format!(
            "no state file after {} acknowledged changes: {e}",
            ids.len()
        ));
    }
    let state = cobble_daemon::load_state(&path).map_err(|e| format!("state not loadable: {e}"))?;
    let last = state.last_change_id;
    match ids.iter().max() {
        Some(&highest) if highest > last => Err(format!(
            "state's last change ID {last} is below {highest}, already given out"
        )),
        _ => Ok(()),
    }
}

/// What may be in `$PEBBLE` and beside the pushed file: anything else is a leftover.
fn leftovers(daemon: &Daemon) -> Vec<String> {
    let known = [
        ".pebble.state",
        ".pebble.state.journal",
        ".pebble.socket",
        ".cobble-processes",
        ".cobble.lock",
        "layers",
    ];
    let mut found = Vec::new();
    for (dir, allowed) in [
        (daemon.pebble_dir(), &known[..]),
        (push_dir(daemon), &["file"][..]),
    ] {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !allowed.contains(&name.as_str()) {
                found.push(dir.join(name).display().to_string());
            }
        }
    }
    // The pushed file is one whole push or absent.
    if let Ok(content) = std::fs::read(push_dir(daemon).join("file"))
        && (content.len() != PUSH_SIZE || content.iter().any(|&b| b != content[0]))
    {
        found.push(format!("a torn pushed file of {} bytes", content.len()));
    }
    found
}

/// Runs `rounds` kill-restart rounds; returns the change IDs clients received per round.
fn chaos(rounds: usize, mut check: impl FnMut(&Daemon, &[u64])) {
    let tag = u64::from(std::process::id()) * 1000 + Random::seeded().below(1000);
    let yaml = layer(tag);
    let mut daemon = Daemon::start(&[("001-chaos", &yaml)], &[]);
    let mut random = Random::seeded();
    let (mut twins, mut broken_state, mut left_behind) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        let stop = std::sync::atomic::AtomicBool::new(false);
        // The kill lands anywhere from right after the first requests to well into the
        // traffic.
        let delay = Duration::from_millis(random.below(300));
        let seed = random.below(u64::MAX);
        let ids = std::thread::scope(|scope| {
            let clients = scope.spawn(|| traffic(&daemon, seed, &stop));
            let started = Instant::now();
            while started.elapsed() < delay {
                std::thread::sleep(Duration::from_millis(5));
            }
            let pid = nix::unistd::Pid::from_raw(daemon.pid() as i32);
            nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL).unwrap();
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            clients.join().unwrap()
        });
        daemon.kill();
        if let Err(e) = check_state_file(&daemon, &ids) {
            broken_state.push((round, e));
        }
        // The killed daemon said all it will: its log writer died with it, so a line it
        // had queued (even its "Started daemon.", when the kill came early on a loaded
        // machine) is lost, and only lines from here on are the new daemon's.
        let said = daemon.log().matches("Started daemon.").count();
        daemon.restart(&[]);
        // A child the killed daemon forked but that has not exec'd yet still holds its
        // listening socket for a moment, which can fool the fixture's connect: wait for
        // the new daemon itself.
        wait_for("the restarted daemon", Duration::from_secs(60), || {
            daemon.log().matches("Started daemon.").count() > said
        });
        // The new daemon has ended what its predecessor recorded before listening, and
        // started nothing: any service process still running was never recorded.
        let left: Vec<_> = running(tag).into_iter().collect();
        if !left.is_empty() {
            let detail: Vec<String> = marked(tag)
                .into_iter()
                .map(|(pid, m)| {
                    let stat =
                        std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
                    format!("{pid} {m} {stat}")
                })
                .collect();
            twins.push((round, left, detail));
            kill_marked(tag);
        }
        // A write the new daemon makes may show its temporary file for a moment where the
        // file system cannot keep it nameless: only what stays counts.
        let mut left = leftovers(&daemon);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !left.is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
            left = leftovers(&daemon);
        }
        if !left.is_empty() {
            left_behind.push((round, left));
        }
        check(&daemon, &ids);
    }
    assert!(
        broken_state.is_empty(),
        "state files a SIGKILL left, by round: {broken_state:?}"
    );
    assert!(
        left_behind.is_empty(),
        "left behind after a restart, by round: {left_behind:?}"
    );
    assert!(
        twins.is_empty(),
        "service processes the restarted daemon could not find, by round: {twins:?}\n{}",
        daemon.log()
    );
}

#[test]
fn no_service_process_escapes_a_sigkilled_daemon() {
    chaos(15, |_, _| {});
}

/// Every change ID a client was given exists after the restart, and the next one is above
/// every ID ever given out.
fn check_ids(highest: &mut u64, lost: &mut Vec<u64>, daemon: &Daemon, ids: &[u64]) {
    let c = client(daemon);
    let rt = crate::fixture::rt();
    for id in ids {
        if rt.block_on(c.change(&id.to_string())).is_err() {
            lost.push(*id);
        }
    }
    *highest = ids.iter().copied().fold(*highest, u64::max);
    let next: u64 = rt
        .block_on(c.services_action("stop", &["s0".to_owned()]))
        .unwrap_or_else(|e| panic!("stop: {e}\n{}", daemon.log()))
        .parse()
        .unwrap();
    assert!(
        next > *highest,
        "change ID {next} given again after a restart (highest given: {highest})"
    );
    *highest = next;
}

#[test]
fn acknowledged_changes_survive_sigkill() {
    let (mut highest, mut lost) = (0, Vec::new());
    chaos(15, |daemon, ids| {
        check_ids(&mut highest, &mut lost, daemon, ids)
    });
    assert!(lost.is_empty(), "acknowledged changes lost: {lost:?}");
}

#[test]
#[ignore = "long: 100 kill-restart rounds"]
fn chaos_long() {
    let (mut highest, mut lost) = (0, Vec::new());
    chaos(100, |daemon, ids| {
        check_ids(&mut highest, &mut lost, daemon, ids)
    });
    assert!(
        lost.is_empty(),
        "acknowledged changes lost: {} {lost:?}",
        lost.len()
    );
}
