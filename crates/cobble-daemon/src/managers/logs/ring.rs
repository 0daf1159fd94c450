//! A bounded in-memory log of one service's output, with followers that miss nothing.
//!
//! Each service keeps the most recent lines of its merged stdout and stderr, bounded in bytes
//! (100 KiB like Pebble), so a chatty service costs a fixed amount of memory however long it
//! runs. Lines longer than Pebble's log parser reads at once are split where Pebble splits
//! them ([`super::lines`]).
//!
//! A service writing as fast as it can produces millions of short lines a second, so the
//! writer's side does no work per line that it can do per read. The lines live in one byte
//! arena per service, exactly as the service wrote them, newlines included: a read's lines are
//! appended with one copy, under one lock, with one timestamp. Beside the arena, eight bytes
//! per line say where each line ends, and one entry per run of lines sharing a time says when
//! they were written. A line becomes a `String` only when someone reads it (`/v1/logs`, a
//! follower, the service status). Real memory follows the accounted cost: a line is charged
//! its length plus [`ENTRY_OVERHEAD`] and occupies its length plus nine bytes.
//!
//! Every line gets a sequence number. A follower (`/v1/logs?follow=true`) is a cursor into
//! the ring: it reads from its sequence number on, so a follower that falls behind is served
//! the lines it has not read yet instead of jumping to the newest. While a follower still
//! needs them, lines beyond the 100 KiB bound are kept, up to [`FOLLOW_RETAIN_BYTES`] per
//! service whatever the number of followers; past that the oldest go anyway and the follower
//! learns exactly how many it lost. The writer never waits for a reader:
//! [`ServiceLog::push_lines`] takes one short lock per read and wakes the followers.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use jiff::Timestamp;
use tokio::sync::Notify;

use super::lines::Split;

/// Bytes of output kept per service.
pub(crate) const MAX_LOG_BYTES: usize = 100 * 1024;
/// Bytes of output a service keeps while a follower has not read them yet.
pub(crate) const FOLLOW_RETAIN_BYTES: usize = 16 * 1024 * 1024;
/// Bookkeeping cost charged per line on top of its length, so many tiny lines are bounded
/// too. About what Pebble's ring spends on the prefix it stores before each line.
const ENTRY_OVERHEAD: usize = 32;
/// Arena capacity above which a mostly empty arena gives memory back (a follower that held
/// lines back has read them or gone).
const SHRINK_ABOVE: usize = 1024 * 1024;

/// One line of service output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LogEntry {
    pub time: Timestamp,
    pub line: String,
}

/// Where a held line ends: the arena offset (counted from the first byte ever appended) just
/// past it and its newline, shifted left, with the low bit set when it has a newline (the
/// pieces of a cut line have none).
#[derive(Debug, Clone, Copy)]
struct LineEnd(u64);

impl LineEnd {
    fn new(after: u64, newline: bool) -> LineEnd {
        LineEnd((after << 1) | u64::from(newline))
    }

    /// Where the next line starts.
    fn after(self) -> u64 {
        self.0 >> 1
    }

    /// Where this line's text ends.
    fn text_end(self) -> u64 {
        self.after() - (self.0 & 1)
    }
}

/// The output buffer of a service, shared between its output reader, the manager and the
/// followers. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub(crate) struct ServiceLog {
    inner: Arc<Mutex<LogBuffer>>,
}

#[derive(Debug, Default)]
struct LogBuffer {
    /// The bytes of the held lines as the service wrote them, each with its newline.
    arena: VecDeque<u8>,
    /// The offset of `arena[0]`, counted from the first byte ever appended: where line
    /// `first_seq` starts.
    arena_start: u64,
    /// Where each held line ends, `ends[0]` being line `first_seq`'s.
    ends: VecDeque<LineEnd>,
    /// Runs of lines written at the same time: the sequence number of each run's first line
    /// and their time, oldest first. The first run may start before `first_seq`.
    times: VecDeque<(u64, Timestamp)>,
    /// The sequence number of the oldest line held.
    first_seq: u64,
    /// Accounted bytes: each line's length plus [`ENTRY_OVERHEAD`].
    bytes: usize,
    /// Whether older output was dropped.
    truncated: bool,
    /// Followers: their id, the next sequence number each will read, and how to wake it.
    followers: Vec<FollowerSlot>,
    next_follower_id: u64,
}

#[derive(Debug)]
struct FollowerSlot {
    id: u64,
    next: u64,
    wake: Arc<Notify>,
}

impl LogBuffer {
    fn end_seq(&self) -> u64 {
        self.first_seq + self.ends.len() as u64
    }

    fn arena_end(&self) -> u64 {
        self.arena_start + self.arena.len() as u64
    }

    /// Where line `seq` (a held one, or the next to come) starts.
    fn start_of(&self, seq: u64) -> u64 {
        match seq.checked_sub(self.first_seq + 1) {
            Some(before) => self.ends[before as usize].after(),
            None => self.arena_start,
        }
    }

    /// Appends the lines of one read.
    fn append(&mut self, split: &Split<'_>) {
        let base = self.arena_end();
        let first = self.end_seq();
        self.arena.extend(split.raw());
        let mut start = 0;
        let mut text = 0;
        for piece in split.pieces {
            let after = piece.end + usize::from(piece.newline);
            self.ends
                .push_back(LineEnd::new(base + after as u64, piece.newline));
            text += piece.end - start;
            start = after;
        }
        self.bytes += text + ENTRY_OVERHEAD * split.pieces.len();
        let runs = [
            (first, split.leading_time, split.leading),
            (
                first + split.leading as u64,
                split.time,
                split.pieces.len() - split.leading,
            ),
        ];
        for (seq, time, count) in runs {
            if count > 0 && self.times.back().is_none_or(|&(_, last)| last != time) {
                self.times.push_back((seq, time));
            }
        }
    }

    /// Drops the oldest lines beyond the bound, keeping (up to the larger bound) those a
    /// follower has not read yet.
    fn evict(&mut self) {
        self.make_room(0);
    }

    /// Drops the oldest lines that `incoming` more accounted bytes would take beyond the
    /// bound. Done before a read's lines are appended too, so the arena never holds the lines
    /// that are about to go beside the new ones: a busy service's arena stays within the
    /// bound's size, not the bound's plus a read's.
    fn make_room(&mut self, incoming: usize) {
        let hold = self.followers.iter().map(|f| f.next).min();
        let mut start = self.arena_start;
        while self.bytes + incoming > MAX_LOG_BYTES {
            let needed = hold.is_some_and(|next| next <= self.first_seq);
            if needed && self.bytes + incoming <= FOLLOW_RETAIN_BYTES {
                break;
            }
            let Some(end) = self.ends.pop_front() else {
                break;
            };
            self.bytes -= (end.text_end() - start) as usize + ENTRY_OVERHEAD;
            start = end.after();
            self.first_seq += 1;
            self.truncated = true;
        }
        if start == self.arena_start {
            return;
        }
        self.arena.drain(..(start - self.arena_start) as usize);
        self.arena_start = start;
        while self
            .times
            .get(1)
            .is_some_and(|&(seq, _)| seq <= self.first_seq)
        {
            self.times.pop_front();
        }
        if self.arena.capacity() > SHRINK_ABOVE && self.arena.len() < self.arena.capacity() / 4 {
            self.arena.shrink_to(self.arena.len() * 2);
            self.ends.shrink_to(self.ends.len() * 2);
        }
    }

    /// The held lines from `from` to `to` (sequence numbers, `to` excluded).
    fn entries(&self, from: u64, to: u64) -> Vec<LogEntry> {
        let mut out = Vec::with_capacity(to.saturating_sub(from) as usize);
        if from >= to {
            return out;
        }
        let mut run = self.times.partition_point(|&(seq, _)| seq <= from) - 1;
        let mut start = self.start_of(from);
        let skip = (from - self.first_seq) as usize;
        for (seq, end) in (from..to).zip(self.ends.range(skip..)) {
            while self.times.get(run + 1).is_some_and(|&(s, _)| s <= seq) {
                run += 1;
            }
            out.push(LogEntry {
                time: self.times[run].1,
                line: lossy(self.slice(start, end.text_end())),
            });
            start = end.after();
        }
        out
    }

    /// The arena's bytes between two offsets.
    fn slice(&self, start: u64, end: u64) -> Cow<'_, [u8]> {
        let from = (start - self.arena_start) as usize;
        let to = (end - self.arena_start) as usize;
        let (head, tail) = self.arena.as_slices();
        if to <= head.len() {
            Cow::Borrowed(&head[from..to])
        } else if from >= head.len() {
            Cow::Borrowed(&tail[from - head.len()..to - head.len()])
        } else {
            let mut joined = Vec::with_capacity(to - from);
            joined.extend_from_slice(&head[from..]);
            joined.extend_from_slice(&tail[..to - head.len()]);
            Cow::Owned(joined)
        }
    }

    /// Bytes of memory the lines take, capacity included (for tests).
    #[cfg(test)]
    fn memory(&self) -> usize {
        self.arena.capacity()
            + self.ends.capacity() * size_of::<LineEnd>()
            + self.times.capacity() * size_of::<(u64, Timestamp)>()
    }
}

/// Service output as text, invalid UTF-8 replaced as Pebble's clients see it.
fn lossy(bytes: Cow<'_, [u8]>) -> String {
    match bytes {
        Cow::Borrowed(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        Cow::Owned(bytes) => String::from_utf8(bytes)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()),
    }
}

/// What a follower reads at a time.
#[derive(Debug, Default)]
pub(crate) struct Batch {
    /// Lines overwritten before this follower read them, just before `entries`.
    pub lost: u64,
    pub entries: Vec<LogEntry>,
}

/// A reader of a service's log from a sequence number on. Dropping it releases the lines it
/// was holding back.
#[derive(Debug)]
#[must_use]
pub(crate) struct Follower {
    log: ServiceLog,
    id: u64,
}

impl Follower {
    /// Takes up to `max` of the lines this follower has not read yet, and how many it lost
    /// before them. Empty when it is up to date.
    pub(crate) fn take(&mut self, max: usize) -> Batch {
        let mut buf = self.log.lock();
        let (first, end) = (buf.first_seq, buf.end_seq());
        let Some(slot) = buf.followers.iter_mut().find(|f| f.id == self.id) else {
            return Batch::default();
        };
        let lost = first.saturating_sub(slot.next);
        let from = slot.next.max(first);
        let to = end.min(from.saturating_add(max as u64));
        slot.next = to;
        let entries = buf.entries(from, to);
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
    pub(crate) fn new() -> ServiceLog {
        ServiceLog::default()
    }

    fn lock(&self) -> MutexGuard<'_, LogBuffer> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends the lines of one read, dropping the oldest lines beyond the bound. The one
    /// place service output enters the log.
    pub(crate) fn push_lines(&self, split: &Split<'_>) {
        if split.pieces.is_empty() {
            return;
        }
        let mut buf = self.lock();
        buf.make_room(cost(split));
        buf.append(split);
        buf.evict();
        for follower in &buf.followers {
            // A stored permit when the follower is busy: it looks again before it waits.
            follower.wake.notify_one();
        }
    }

    /// Appends one line (without its newline) written at `time`: for what the daemon says
    /// in a service's log (an OOM kill), and for tests.
    pub(crate) fn push(&self, time: Timestamp, line: String) {
        let mut raw = line.into_bytes();
        let pieces = [super::lines::Piece {
            end: raw.len(),
            newline: true,
        }];
        raw.push(b'\n');
        self.push_lines(&Split {
            bytes: &raw,
            pieces: &pieces,
            leading: 0,
            leading_time: time,
            time,
        });
    }

    /// The last `n` lines, oldest first.
    pub(crate) fn last_lines(&self, n: usize) -> Vec<String> {
        self.last_entries(Some(n))
            .into_iter()
            .map(|e| e.line)
            .collect()
    }

    /// The last `n` entries (all of them for `None`), oldest first.
    pub(crate) fn last_entries(&self, n: Option<usize>) -> Vec<LogEntry> {
        let buf = self.lock();
        let end = buf.end_seq();
        let from = n.map_or(buf.first_seq, |n| {
            end.saturating_sub(n as u64).max(buf.first_seq)
        });
        buf.entries(from, end)
    }

    /// The time of the oldest line still held, if any.
    pub(crate) fn oldest_time(&self) -> Option<Timestamp> {
        let buf = self.lock();
        if buf.ends.is_empty() {
            return None;
        }
        buf.times.front().map(|&(_, time)| time)
    }

    /// A follower that first reads the last `n` lines held now (all of them for `None`),
    /// then every line pushed after; `wake` is notified whenever lines arrive.
    pub(crate) fn follow(&self, n: Option<usize>, wake: Arc<Notify>) -> Follower {
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
    #[cfg(test)]
    pub(crate) fn bytes(&self) -> usize {
        self.lock().bytes
    }

    /// Whether output was dropped to respect the bound.
    #[cfg(test)]
    pub(crate) fn truncated(&self) -> bool {
        self.lock().truncated
    }
}

/// What the lines of `split` are accounted in the log.
fn cost(split: &Split<'_>) -> usize {
    let newlines = split.pieces.iter().filter(|p| p.newline).count();
    split.raw().len() - newlines + ENTRY_OVERHEAD * split.pieces.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logs::lines::tests::read_into;
    use crate::logs::lines::{LineSplitter, READ_BYTES};

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

    /// The log against a model holding one `String` per line, evicting by the same rule:
    /// lines of every length, so the arena wraps around at all sorts of offsets.
    #[test]
    fn the_ring_keeps_exactly_the_lines_a_model_keeps_across_wraparounds() {
        let log = ServiceLog::new();
        let mut model: VecDeque<String> = VecDeque::new();
        let mut model_bytes = 0;
        let mut splitter = LineSplitter::for_service("m");
        for round in 0..400u32 {
            let mut bytes = Vec::new();
            let mut lines = Vec::new();
            for i in 0..(round % 37 + 1) {
                let len = ((round * 31 + i * 17) % 300) as usize;
                let line: String = (0..len)
                    .map(|k| (b'a' + ((k as u32 + round) % 26) as u8) as char)
                    .collect();
                bytes.extend_from_slice(line.as_bytes());
                bytes.push(b'\n');
                lines.push(line);
            }
            read_into(&mut splitter, &log, &bytes, READ_BYTES, false);
            for line in lines {
                model_bytes += line.len() + ENTRY_OVERHEAD;
                model.push_back(line);
                while model_bytes > MAX_LOG_BYTES {
                    model_bytes -= model.pop_front().unwrap().len() + ENTRY_OVERHEAD;
                }
            }
            assert_eq!(log.bytes(), model_bytes);
            if round % 10 == 0 || round > 390 {
                assert_eq!(log.last_lines(usize::MAX), Vec::from(model.clone()));
                assert_eq!(
                    log.last_lines(3),
                    Vec::from(model.clone()).split_off(model.len().saturating_sub(3))
                );
            }
        }
        assert!(log.truncated());
        let buf = log.lock();
        assert_eq!(buf.arena_end() - buf.arena_start, buf.arena.len() as u64);
        assert_eq!(buf.start_of(buf.first_seq), buf.arena_start);
        assert!(
            buf.memory() < 2 * MAX_LOG_BYTES + 64 * 1024,
            "{}",
            buf.memory()
        );
    }

    #[test]
    fn a_busy_services_arena_stays_within_the_bounds_size() {
        let log = ServiceLog::new();
        let mut splitter = LineSplitter::default();
        let line = format!("{}\n", "x".repeat(99));
        let bytes = line.repeat(100_000);
        read_into(&mut splitter, &log, bytes.as_bytes(), READ_BYTES, false);
        let buf = log.lock();
        assert!(buf.bytes <= MAX_LOG_BYTES);
        // Lines about to go are dropped before a read's lines come in, not after.
        assert!(
            buf.arena.capacity() <= 128 * 1024,
            "{}",
            buf.arena.capacity()
        );
    }

    #[test]
    fn real_memory_of_retained_short_lines_stays_within_their_accounted_cost() {
        let log = ServiceLog::new();
        let follower = log.follow(Some(0), Arc::new(Notify::new()));
        let mut splitter = LineSplitter::default();
        // `seq`-like output held back by a follower that does not read: 2 million lines.
        let mut bytes = Vec::new();
        for i in 0..2_000_000u32 {
            bytes.extend_from_slice(format!("{i:07}\n").as_bytes());
        }
        read_into(&mut splitter, &log, &bytes, READ_BYTES, false);
        let (memory, accounted, lines) = {
            let buf = log.lock();
            (buf.memory(), buf.bytes, buf.ends.len())
        };
        assert!(accounted <= FOLLOW_RETAIN_BYTES);
        assert!(
            memory <= accounted,
            "{memory} bytes for {accounted} accounted"
        );
        assert!(memory / lines <= 32, "{} bytes per line", memory / lines);
        // Once the follower is gone the arena gives its memory back.
        drop(follower);
        assert!(log.bytes() <= MAX_LOG_BYTES);
        assert!(log.lock().memory() < 4 * MAX_LOG_BYTES);
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

    #[test]
    fn reads_of_many_lines_lose_and_serve_lines_exactly_like_single_pushes() {
        // The same retention rule when lines come a read at a time: a follower that reads
        // now and then sees every line in order or counted as lost, none twice.
        let log = ServiceLog::new();
        let mut follower = log.follow(Some(0), Arc::new(Notify::new()));
        let mut splitter = LineSplitter::default();
        let (mut next, mut lost, mut got) = (0u32, 0u64, 0u64);
        for round in 0..60 {
            let mut bytes = Vec::new();
            for _ in 0..100_000 {
                bytes.extend_from_slice(format!("{next:07}\n").as_bytes());
                next += 1;
            }
            read_into(&mut splitter, &log, &bytes, READ_BYTES, false);
            if round % 7 == 6 {
                let mut expect = None;
                loop {
                    let batch = follower.take(50_000);
                    if batch.lost == 0 && batch.entries.is_empty() {
                        break;
                    }
                    lost += batch.lost;
                    got += batch.entries.len() as u64;
                    let seen = numbers(&batch);
                    if let (Some(expect), Some(first)) = (expect, seen.first()) {
                        assert_eq!(*first as u64, expect + batch.lost);
                    }
                    assert!(seen.windows(2).all(|w| w[1] == w[0] + 1));
                    expect = seen.last().map(|&n| n as u64 + 1);
                }
            }
        }
        loop {
            let batch = follower.take(50_000);
            if batch.lost == 0 && batch.entries.is_empty() {
                break;
            }
            lost += batch.lost;
            got += batch.entries.len() as u64;
        }
        assert!(lost > 0);
        assert_eq!(lost + got, u64::from(next));
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
