//! Chaos: the daemon SIGKILLed at random moments while clients start, stop and restart
//! services, then restarted on the same `$PEBBLE`. Whatever instant the kill lands on, the
//! next daemon must find every service process its predecessor started (so none runs
//! twice), every change whose ID a client received must still exist, and change IDs must
//! never be given out twice.
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

/// Two clients sending service actions as fast as the daemon answers, until it is gone;
/// returns the change IDs they were given.
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
        futures_util::future::join_all(tasks)
            .await
            .into_iter()
            .flatten()
            .collect()
    })
}

/// Runs `rounds` kill-restart rounds; returns the change IDs clients received per round.
fn chaos(rounds: usize, mut check: impl FnMut(&Daemon, &[u64])) {
    let tag = u64::from(std::process::id()) * 1000 + Random::seeded().below(1000);
    let yaml = layer(tag);
    let mut daemon = Daemon::start(&[("001-chaos", &yaml)], &[]);
    let mut random = Random::seeded();
    let mut twins = Vec::new();
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
        daemon.restart(&[]);
        // A child the killed daemon forked but that has not exec'd yet still holds its
        // listening socket for a moment, which can fool the fixture's connect: wait for
        // the new daemon itself.
        wait_for("the restarted daemon", Duration::from_secs(15), || {
            daemon.log().matches("Started daemon.").count() == round + 2
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
        check(&daemon, &ids);
    }
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
