//! A bounded in-memory log of one service's output, with followers that miss nothing.
//!
//! Each service keeps the most recent lines of its merged stdout and stderr, bounded in bytes
//! (100 KiB like Pebble), so a chatty service costs a fixed amount of memory however long it
//! runs. Lines longer than Pebble's log parser reads at once are split where Pebble splits
//! them ([`LineSplitter`]).
//!
//! Every line gets a sequence number. A follower (`/v1/logs?follow=true`) is a cursor into
//! the ring: it reads from its sequence number on, so a follower that falls behind is served
//! the lines it has not read yet instead of jumping to the newest. While a follower still
//! needs them, lines beyond the 100 KiB bound are kept, up to [`FOLLOW_RETAIN_BYTES`] per
//! service whatever the number of followers; past that the oldest go anyway and the follower
//! learns exactly how many it lost. The writer never waits for a reader: [`ServiceLog::push`]
//! takes one short lock and wakes the followers.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use jiff::Timestamp;
use tokio::sync::Notify;

use crate::logs::persist::PersistTarget;

/// Bytes of output kept per service.
pub const MAX_LOG_BYTES: usize = 100 * 1024;
/// Bytes of output a service keeps while a follower has not read them yet.
pub const FOLLOW_RETAIN_BYTES: usize = 16 * 1024 * 1024;
/// The buffer Pebble's log parser reads with: a line (with its `<time> [<service>] ` prefix
/// and its newline) longer than this comes out in several entries with the same time.
pub const MAX_LINE: usize = 4096;
/// Bookkeeping cost charged per entry, so many tiny lines are bounded too.
const ENTRY_OVERHEAD: usize = 32;

/// One line of service output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogEntry {
    pub time: Timestamp,
    pub line: String,
}

impl LogEntry {
    fn cost(&self) -> usize {
        self.line.len() + ENTRY_OVERHEAD
    }
}

/// The output buffer of a service, shared between its output reader, the manager and the
/// followers. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct ServiceLog {
    inner: Arc<Mutex<LogBuffer>>,
}

#[derive(Debug, Default)]
struct LogBuffer {
    entries: VecDeque<LogEntry>,
    /// The sequence number of `entries[0]`.
    first_seq: u64,
    bytes: usize,
    /// Whether older output was dropped.
    truncated: bool,
    /// Followers: their id, the next sequence number each will read, and how to wake it.
    followers: Vec<FollowerSlot>,
    next_follower_id: u64,
    /// Where lines are also written, for a service with persistent logs.
    persist: Option<PersistTarget>,
}

#[derive(Debug)]
struct FollowerSlot {
    id: u64,
    next: u64,
    wake: Arc<Notify>,
}

impl LogBuffer {
    fn end_seq(&self) -> u64 {
        self.first_seq + self.entries.len() as u64
    }

    /// Drops the oldest lines beyond the bound, keeping (up to the larger bound) those a
    /// follower has not read yet.
    fn evict(&mut self) {
        while self.bytes > MAX_LOG_BYTES {
            let needed = self.followers.iter().any(|f| f.next <= self.first_seq);
            if needed && self.bytes <= FOLLOW_RETAIN_BYTES {
                break;
            }
            let Some(old) = self.entries.pop_front() else {
                break;
            };
            self.bytes -= old.cost();
            self.first_seq += 1;
            self.truncated = true;
        }
    }
}

/// What a follower reads at a time.
#[derive(Debug, Default)]
pub struct Batch {
    /// Lines overwritten before this follower read them, just before `entries`.
    pub lost: u64,
    pub entries: Vec<LogEntry>,
}

/// A reader of a service's log from a sequence number on. Dropping it releases the lines it
/// was holding back.
#[derive(Debug)]
#[must_use]
pub struct Follower {
    log: ServiceLog,
    id: u64,
}

impl Follower {
    /// Takes up to `max` of the lines this follower has not read yet, and how many it lost
    /// before them. Empty when it is up to date.
    pub fn take(&mut self, max: usize) -> Batch {
        let mut buf = self.log.lock();
        let (first, end) = (buf.first_seq, buf.end_seq());
        let Some(slot) = buf.followers.iter_mut().find(|f| f.id == self.id) else {
            return Batch::default();
        };
        let lost = first.saturating_sub(slot.next);
        let from = slot.next.max(first);
        let to = end.min(from.saturating_add(max as u64));
        slot.next = to;
        let start = (from - first) as usize;
        let entries = buf
            .entries
            .range(start..(to - first) as usize)
            .cloned()
            .collect();
        buf.evict();
        Batch { lost, entries }
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        let mut buf = self.log.lock();
        buf.followers.retain(|f| f.id != self.id);
        buf.evict();
    }
}

impl ServiceLog {
    pub fn new() -> ServiceLog {
        ServiceLog::default()
    }

    fn lock(&self) -> MutexGuard<'_, LogBuffer> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends one line (without its newline), dropping the oldest lines beyond the bound.
    /// The one place service output enters the log.
    pub fn push(&self, time: Timestamp, line: String) {
        let mut buf = self.lock();
        if let Some(persist) = &buf.persist {
            persist.line(time, &line);
        }
        let entry = LogEntry { time, line };
        buf.bytes += entry.cost();
        buf.entries.push_back(entry);
        buf.evict();
        for follower in &buf.followers {
            // A stored permit when the follower is busy: it looks again before it waits.
            follower.wake.notify_one();
        }
    }

    /// Also writes the lines pushed from now on to `target` (none: memory only).
    pub fn set_persist(&self, target: Option<PersistTarget>) {
        self.lock().persist = target;
    }

    /// The last `n` lines, oldest first.
    pub fn last_lines(&self, n: usize) -> Vec<String> {
        let buf = self.lock();
        let skip = buf.entries.len().saturating_sub(n);
        buf.entries
            .iter()
            .skip(skip)
            .map(|e| e.line.clone())
            .collect()
    }

    /// The last `n` entries (all of them for `None`), oldest first.
    pub fn last_entries(&self, n: Option<usize>) -> Vec<LogEntry> {
        let buf = self.lock();
        let skip = n.map_or(0, |n| buf.entries.len().saturating_sub(n));
        buf.entries.iter().skip(skip).cloned().collect()
    }

    /// The time of the oldest line still held, if any.
    pub fn oldest_time(&self) -> Option<Timestamp> {
        self.lock().entries.front().map(|e| e.time)
    }

    /// A follower that first reads the last `n` lines held now (all of them for `None`),
    /// then every line pushed after; `wake` is notified whenever a line arrives.
    pub fn follow(&self, n: Option<usize>, wake: Arc<Notify>) -> Follower {
        let mut buf = self.lock();
        let end = buf.end_seq();
        let next = match n {
            None => buf.first_seq,
            Some(n) => end.saturating_sub(n as u64).max(buf.first_seq),
        };
        let id = buf.next_follower_id;
        buf.next_follower_id += 1;
        buf.followers.push(FollowerSlot { id, next, wake });
        Follower {
            log: self.clone(),
            id,
        }
    }

    /// Number of bytes currently accounted (for tests and metrics).
    pub fn bytes(&self) -> usize {
        self.lock().bytes
    }

    /// Whether output was dropped to respect the bound.
    pub fn truncated(&self) -> bool {
        self.lock().truncated
    }
}

/// Length of the `2006-01-02T15:04:05.000Z [] ` prefix Pebble stores before each line,
/// without the service name.
const PREFIX_LEN: usize = 28;

/// Splits a stream of bytes into lines, cutting long lines where Pebble's log parser cuts
/// them: the first piece and its stored prefix fill one [`MAX_LINE`] read, and each further
/// piece is one more read (a newline counts towards the read it ends).
#[derive(Debug)]
pub struct LineSplitter {
    partial: Vec<u8>,
    /// Room for the first piece of a line.
    first_cap: usize,
    /// The partial line continues a line already cut.
    continuing: bool,
}

impl Default for LineSplitter {
    fn default() -> Self {
        LineSplitter::for_service("")
    }
}

impl LineSplitter {
    /// The splitter for service `name`'s output.
    pub fn for_service(name: &str) -> LineSplitter {
        LineSplitter {
            partial: Vec::new(),
            first_cap: MAX_LINE.saturating_sub(PREFIX_LEN + name.len()).max(1),
            continuing: false,
        }
    }

    fn cap(&self) -> usize {
        if self.continuing {
            MAX_LINE
        } else {
            self.first_cap
        }
    }

    /// Feeds bytes and calls `emit` for each complete line, with whether it is a further
    /// piece of a line already cut (which keeps the time of the line's first piece).
    pub fn feed(&mut self, mut bytes: &[u8], mut emit: impl FnMut(String, bool)) {
        while !bytes.is_empty() {
            let cap = self.cap();
            let room = cap - self.partial.len();
            match bytes.iter().take(room).position(|&b| b == b'\n') {
                Some(i) => {
                    self.partial.extend_from_slice(&bytes[..i]);
                    emit(self.take(), self.continuing);
                    self.continuing = false;
                    bytes = &bytes[i + 1..];
                }
                None => {
                    let n = room.min(bytes.len());
                    self.partial.extend_from_slice(&bytes[..n]);
                    bytes = &bytes[n..];
                    if self.partial.len() == cap {
                        emit(self.take(), self.continuing);
                        self.continuing = true;
                    }
                }
            }
        }
    }

    /// Emits what is left at end of stream.
    pub fn finish(&mut self, mut emit: impl FnMut(String, bool)) {
        if !self.partial.is_empty() {
            emit(self.take(), self.continuing);
        }
        self.continuing = false;
    }

    fn take(&mut self) -> String {
        let bytes = std::mem::take(&mut self.partial);
        String::from_utf8(bytes)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_in_bytes_and_keeps_the_newest() {
        let log = ServiceLog::new();
        for i in 0..10_000 {
            log.push(Timestamp::now(), format!("line {i:05} {}", "x".repeat(50)));
        }
        assert!(log.bytes() <= MAX_LOG_BYTES);
        assert!(log.truncated());
        let last = log.last_lines(2);
        assert!(last[0].starts_with("line 09998"));
        assert!(last[1].starts_with("line 09999"));
    }

    #[test]
    fn splitter_handles_partial_and_long_lines() {
        let mut s = LineSplitter::default();
        let mut out = Vec::new();
        s.feed(b"ab", |l, _| out.push(l));
        s.feed(b"c\nde\n\nf", |l, _| out.push(l));
        assert_eq!(out, ["abc", "de", ""]);
        s.finish(|l, _| out.push(l));
        assert_eq!(out.last().unwrap(), "f");
    }

    #[test]
    fn long_lines_are_cut_where_pebbles_parser_cuts_them() {
        // Service "svc": the first read holds the 31-byte prefix and 4065 bytes of the line.
        let first = MAX_LINE - PREFIX_LEN - 3;
        let mut s = LineSplitter::for_service("svc");
        let mut out = Vec::new();
        let long = vec![b'y'; first + MAX_LINE + 10];
        s.feed(&long, |l, _| out.push(l));
        s.feed(b"\n", |l, _| out.push(l));
        assert_eq!(
            out.iter().map(String::len).collect::<Vec<_>>(),
            [first, MAX_LINE, 10]
        );
        // A piece that fills its read exactly leaves the newline to a read of its own.
        let mut out = Vec::new();
        s.feed(&vec![b'z'; first], |l, _| out.push(l));
        s.feed(b"\nnext\n", |l, _| out.push(l));
        assert_eq!(
            out.iter().map(String::len).collect::<Vec<_>>(),
            [first, 0, 4]
        );
        // One byte less and the newline fits.
        let mut out = Vec::new();
        s.feed(&vec![b'z'; first - 1], |l, _| out.push(l));
        s.feed(b"\n", |l, _| out.push(l));
        assert_eq!(out.iter().map(String::len).collect::<Vec<_>>(), [first - 1]);
    }

    fn numbered(log: &ServiceLog, range: std::ops::Range<u32>) {
        for i in range {
            log.push(Timestamp::now(), format!("{i:07}"));
        }
    }

    fn numbers(batch: &Batch) -> Vec<u32> {
        batch
            .entries
            .iter()
            .map(|e| e.line.parse().unwrap())
            .collect()
    }

    #[test]
    fn a_follower_that_falls_behind_is_served_from_the_ring() {
        let log = ServiceLog::new();
        numbered(&log, 0..10);
        let mut follower = log.follow(Some(3), Arc::new(Notify::new()));
        // Far more than the 100 KiB ring holds on its own.
        numbered(&log, 10..50_000);
        let mut seen = Vec::new();
        loop {
            let batch = follower.take(1000);
            assert_eq!(batch.lost, 0);
            if batch.entries.is_empty() {
                break;
            }
            seen.extend(numbers(&batch));
        }
        assert_eq!(seen, (7..50_000).collect::<Vec<_>>());
        // Once read, the lines beyond the bound go.
        assert!(log.bytes() <= MAX_LOG_BYTES);
        drop(follower);
        numbered(&log, 50_000..50_001);
        assert!(log.bytes() <= MAX_LOG_BYTES);
    }

    #[test]
    fn past_the_retention_bound_a_follower_learns_exactly_how_many_it_lost() {
        let log = ServiceLog::new();
        let mut follower = log.follow(Some(0), Arc::new(Notify::new()));
        let total = 2 * FOLLOW_RETAIN_BYTES / (7 + ENTRY_OVERHEAD);
        numbered(&log, 0..total as u32);
        assert!(log.bytes() <= FOLLOW_RETAIN_BYTES);
        let (mut lost, mut got) = (0u64, 0u64);
        let mut last = None;
        loop {
            let batch = follower.take(10_000);
            if batch.lost == 0 && batch.entries.is_empty() {
                break;
            }
            lost += batch.lost;
            got += batch.entries.len() as u64;
            last = batch.entries.last().map(|e| e.line.clone());
        }
        assert!(lost > 0);
        assert_eq!(lost + got, total as u64);
        assert_eq!(last.unwrap(), format!("{:07}", total - 1));
    }

    #[tokio::test]
    async fn a_push_wakes_the_follower() {
        let log = ServiceLog::new();
        let wake = Arc::new(Notify::new());
        let mut follower = log.follow(Some(0), wake.clone());
        assert!(follower.take(10).entries.is_empty());
        log.push(Timestamp::now(), "hello".into());
        wake.notified().await;
        assert_eq!(follower.take(10).entries[0].line, "hello");
    }
}
