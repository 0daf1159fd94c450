//! What services use: memory, CPU time, processes and open files, read from `/proc` and the
//! services' cgroups only when someone asks (`cobble why`, `GET /v1/services?details=true`,
//! `GET /v1/metrics`), and at most once a second per service however often they ask. Nothing
//! samples on a timer, so an idle daemon spends nothing on it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::process::{Processes, Usage};

/// The shortest time between two readings of one service.
pub(super) const SAMPLE_INTERVAL: Duration = Duration::from_secs(1);

/// The last reading of each service.
pub(super) struct Accounting {
    processes: Arc<dyn Processes>,
    samples: Mutex<HashMap<String, Sample>>,
}

struct Sample {
    at: Instant,
    /// The main process it was read for: a new one is read anew at once.
    pid: Option<u32>,
    usage: Usage,
}

impl Accounting {
    pub(super) fn new(processes: Arc<dyn Processes>) -> Accounting {
        Accounting {
            processes,
            samples: Mutex::new(HashMap::new()),
        }
    }

    /// The usage of each `(service, main process)`, in order: read again where the last
    /// reading is older than [`SAMPLE_INTERVAL`] or was of another process. Reads `/proc` on
    /// the blocking pool.
    pub(super) async fn usage(self: &Arc<Self>, targets: Vec<(String, Option<u32>)>) -> Vec<Usage> {
        if targets.is_empty() {
            return Vec::new();
        }
        let this = self.clone();
        tokio::task::spawn_blocking(move || this.read(&targets))
            .await
            .unwrap_or_default()
    }

    fn read(&self, targets: &[(String, Option<u32>)]) -> Vec<Usage> {
        let now = Instant::now();
        let mut samples = self.samples.lock().unwrap_or_else(|e| e.into_inner());
        let fresh = |name: &String, pid: &Option<u32>| {
            samples.get(name).is_some_and(|sample| {
                sample.pid == *pid && now.duration_since(sample.at) < SAMPLE_INTERVAL
            })
        };
        let stale: Vec<(String, Option<u32>)> = targets
            .iter()
            .filter(|(name, pid)| !fresh(name, pid))
            .cloned()
            .collect();
        if !stale.is_empty() {
            let read = self.processes.usage(&stale);
            for ((name, pid), usage) in stale.into_iter().zip(read) {
                samples.insert(
                    name,
                    Sample {
                        at: now,
                        pid,
                        usage,
                    },
                );
            }
        }
        targets
            .iter()
            .map(|(name, _)| {
                samples
                    .get(name)
                    .map(|s| s.usage.clone())
                    .unwrap_or_default()
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use cobble_plan::Service;

    use super::*;
    use crate::process::{Escaped, GroupSignal, SpawnError, Spawned};

    /// Processes that only count how often their usage is read.
    #[derive(Default)]
    struct Counting(AtomicU64);

    impl Counting {
        fn usage_reads(&self) -> u64 {
            self.0.load(Ordering::Relaxed)
        }
    }

    impl Processes for Counting {
        fn spawn(&self, _: &str, _: &Service) -> Result<Spawned, SpawnError> {
            unreachable!()
        }
        fn signal_group(&self, _: u32, _: GroupSignal) -> Vec<Escaped> {
            unreachable!()
        }
        fn end_group(&self, _: u32, _: &[Escaped]) {}
        fn signal_remains(&self, _: u32, _: GroupSignal) -> Vec<Escaped> {
            unreachable!()
        }
        fn signal_process(&self, _: u32, _: &str) -> Result<(), String> {
            unreachable!()
        }
        fn forget(&self, _: &str, _: u32) {}
        fn missing(&self, _: Vec<String>) -> Vec<String> {
            Vec::new()
        }
        fn belongs(&self, _: u32, _: cobble_sys::notify::Sender) -> bool {
            false
        }
        fn usage(&self, targets: &[(String, Option<u32>)]) -> Vec<Usage> {
            targets
                .iter()
                .map(|(_, pid)| {
                    let reads = self.0.fetch_add(1, Ordering::Relaxed) + 1;
                    Usage {
                        processes: u64::from(pid.is_some()),
                        memory_bytes: reads,
                        ..Usage::default()
                    }
                })
                .collect()
        }
    }

    #[tokio::test]
    async fn a_service_is_read_at_most_once_a_second_unless_its_process_changes() {
        let processes = Arc::new(Counting::default());
        let accounting = Arc::new(Accounting::new(processes.clone()));
        let target = || vec![("svc".to_owned(), Some(10))];
        let first = accounting.usage(target()).await;
        let again = accounting.usage(target()).await;
        assert_eq!(first, again);
        assert_eq!(processes.usage_reads(), 1);
        accounting.usage(vec![("svc".to_owned(), Some(11))]).await;
        assert_eq!(processes.usage_reads(), 2, "a new process is read at once");
        accounting.usage(vec![("other".to_owned(), None)]).await;
        assert_eq!(processes.usage_reads(), 3);
    }
}
