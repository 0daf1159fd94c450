//! The bounded queue between the output readers of services and one target's sender.
//!
//! Output readers push without ever waiting: the queue is bounded in entries and bytes, and
//! when a receiver is down or slow the oldest entries make room for the newest, each one
//! counted as dropped. Recent output is what an operator looking at a recovered receiver
//! wants to see, and the count says how much is missing.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use jiff::Timestamp;
use tokio::sync::Notify;

/// Entries one target may hold while its receiver is not taking them.
pub(crate) const MAX_QUEUED_ENTRIES: usize = 10_000;
/// Bytes of messages one target may hold (on top of a fixed cost per entry).
pub(crate) const MAX_QUEUED_BYTES: usize = 4 * 1024 * 1024;
/// What an entry costs besides its message, so many tiny lines are bounded too.
const ENTRY_OVERHEAD: usize = 64;
/// Entries sent in one request, and the count that sends a batch before its second is up.
pub(crate) const BATCH_ENTRIES: usize = 100;

/// Labels of one service at one target, after `$ENV` expansion.
pub(crate) type Labels = BTreeMap<String, String>;

/// One line of service output on its way to a target.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub time: Timestamp,
    pub service: Arc<str>,
    pub message: String,
    /// The labels in force when the line was written: a plan change that alters them does
    /// not relabel lines already queued.
    pub labels: Arc<Labels>,
}

impl Entry {
    fn cost(&self) -> usize {
        self.message.len() + ENTRY_OVERHEAD
    }
}

#[derive(Default)]
struct Pending {
    entries: VecDeque<Entry>,
    bytes: usize,
}

/// One target's queue and its counters. Shared by the readers that push and the sender.
#[derive(Default)]
pub(crate) struct TargetQueue {
    pending: Mutex<Pending>,
    /// Wakes the sender: on the first entry of a batch and when a batch is full.
    pub(super) wake: Notify,
    /// Entries that will never reach the receiver: pushed out of a full queue, refused by
    /// the receiver, or still queued when the target was removed.
    dropped: AtomicU64,
    /// Entries the receiver accepted.
    sent: AtomicU64,
}

impl TargetQueue {
    /// Queues one entry; never waits. The oldest entries go when the queue is full.
    pub(crate) fn push(&self, entry: Entry) {
        let mut dropped = 0;
        let len = {
            let mut pending = lock(&self.pending);
            pending.bytes += entry.cost();
            pending.entries.push_back(entry);
            while pending.entries.len() > MAX_QUEUED_ENTRIES || pending.bytes > MAX_QUEUED_BYTES {
                let Some(old) = pending.entries.pop_front() else {
                    break;
                };
                pending.bytes -= old.cost();
                dropped += 1;
            }
            pending.entries.len()
        };
        if dropped > 0 {
            self.dropped.fetch_add(dropped, Ordering::Relaxed);
        }
        if len == 1 || len == BATCH_ENTRIES {
            self.wake.notify_one();
        }
    }

    /// Puts `batch`, taken earlier and not delivered, back before what is queued, within
    /// the bounds (the oldest go first, counted).
    pub(crate) fn put_back(&self, batch: Vec<Entry>) {
        if batch.is_empty() {
            return;
        }
        let mut dropped = 0;
        {
            let mut pending = lock(&self.pending);
            for entry in batch.into_iter().rev() {
                pending.bytes += entry.cost();
                pending.entries.push_front(entry);
            }
            while pending.entries.len() > MAX_QUEUED_ENTRIES || pending.bytes > MAX_QUEUED_BYTES {
                let Some(old) = pending.entries.pop_front() else {
                    break;
                };
                pending.bytes -= old.cost();
                dropped += 1;
            }
        }
        if dropped > 0 {
            self.dropped.fetch_add(dropped, Ordering::Relaxed);
        }
        self.wake.notify_one();
    }

    /// A copy of what is queued, oldest first.
    pub(crate) fn snapshot(&self) -> Vec<Entry> {
        lock(&self.pending).entries.iter().cloned().collect()
    }

    /// Takes up to `max` of the oldest entries.
    pub(crate) fn take(&self, max: usize) -> Vec<Entry> {
        let mut pending = lock(&self.pending);
        let n = max.min(pending.entries.len());
        let batch: Vec<Entry> = pending.entries.drain(..n).collect();
        pending.bytes -= batch.iter().map(Entry::cost).sum::<usize>();
        batch
    }

    /// Entries waiting.
    pub(crate) fn len(&self) -> usize {
        lock(&self.pending).entries.len()
    }

    /// Whether nothing is waiting.
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Counts `n` entries as lost.
    pub(crate) fn count_dropped(&self, n: usize) {
        self.dropped.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Counts `n` entries as delivered.
    pub(crate) fn count_sent(&self, n: usize) {
        self.sent.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Counts on from what a predecessor counted (a re-execution).
    pub(crate) fn count_on_from(&self, sent: u64, dropped: u64) {
        self.sent.fetch_add(sent, Ordering::Relaxed);
        self.dropped.fetch_add(dropped, Ordering::Relaxed);
    }

    /// Entries lost so far.
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Entries delivered so far.
    pub(crate) fn sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }
}

fn lock(pending: &Mutex<Pending>) -> std::sync::MutexGuard<'_, Pending> {
    pending.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(message: String) -> Entry {
        Entry {
            time: Timestamp::UNIX_EPOCH,
            service: "svc".into(),
            message,
            labels: Arc::default(),
        }
    }

    #[test]
    fn a_full_queue_keeps_the_newest_and_counts_every_loss() {
        let queue = TargetQueue::default();
        let total = MAX_QUEUED_ENTRIES + 2_500;
        for i in 0..total {
            queue.push(entry(format!("line {i}")));
        }
        assert_eq!(queue.len(), MAX_QUEUED_ENTRIES);
        assert_eq!(queue.dropped(), 2_500);
        let first = queue.take(BATCH_ENTRIES);
        assert_eq!(first[0].message, "line 2500");
        assert_eq!(first.len(), BATCH_ENTRIES);
        assert_eq!(queue.len(), MAX_QUEUED_ENTRIES - BATCH_ENTRIES);
    }

    #[test]
    fn a_batch_put_back_goes_first_in_its_order_within_the_bounds() {
        let queue = TargetQueue::default();
        for i in 0..5 {
            queue.push(entry(format!("line {i}")));
        }
        let batch = queue.take(3);
        queue.push(entry("line 5".into()));
        queue.put_back(batch);
        let messages = |entries: Vec<Entry>| -> Vec<String> {
            entries.into_iter().map(|e| e.message).collect()
        };
        let expected: Vec<String> = (0..6).map(|i| format!("line {i}")).collect();
        assert_eq!(
            messages(queue.snapshot()),
            expected,
            "a copy, the queue unchanged"
        );
        assert_eq!(messages(queue.take(usize::MAX)), expected);
        // Put back into a full queue, the oldest go, counted.
        for i in 0..MAX_QUEUED_ENTRIES {
            queue.push(entry(format!("new {i}")));
        }
        queue.put_back(vec![entry("old".into())]);
        assert_eq!(queue.len(), MAX_QUEUED_ENTRIES);
        assert_eq!(queue.dropped(), 1);
        assert_eq!(queue.take(1)[0].message, "new 0");
    }

    #[test]
    fn bytes_are_bounded_too() {
        let queue = TargetQueue::default();
        let big = "x".repeat(64 * 1024);
        for _ in 0..200 {
            queue.push(entry(big.clone()));
        }
        let held = queue.len();
        assert!(held * big.len() <= MAX_QUEUED_BYTES, "{held} entries held");
        assert_eq!(queue.dropped() as usize + held, 200);
        assert_eq!(
            lock(&queue.pending).bytes,
            held * (big.len() + ENTRY_OVERHEAD)
        );
    }
}
