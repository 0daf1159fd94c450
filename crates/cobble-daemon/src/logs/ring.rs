//! A bounded in-memory log of one service's output, with followers that miss nothing.
//!
//! Each service keeps the most recent lines of its merged stdout and stderr, bounded in bytes
//! (100 KiB like Pebble), so a chatty service costs a fixed amount of memory however long it
//! runs. Lines longer than Pebble's log parser reads at once are split where Pebble splits
//! them ([`LineSplitter`]).
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

use crate::logs::persist::PersistTarget;
use crate::state::append_utc_millis;

/// Bytes of output kept per service.
pub const MAX_LOG_BYTES: usize = 100 * 1024;
/// Bytes of output a service keeps while a follower has not read them yet.
pub const FOLLOW_RETAIN_BYTES: usize = 16 * 1024 * 1024;
/// The buffer Pebble's log parser reads with: a line (with its `<time> [<service>] ` prefix
/// and its newline) longer than this comes out in several entries with the same time.
pub const MAX_LINE: usize = 4096;
/// Bookkeeping cost charged per line on top of its length, so many tiny lines are bounded
/// too. About what Pebble's ring spends on the prefix it stores before each line.
const ENTRY_OVERHEAD: usize = 32;
/// The most bytes read from a service's output at once: a pipe holds 64 KiB, so one read
/// takes all a fast writer has written meanwhile.
pub const READ_BYTES: usize = 64 * 1024;
/// The room a service's first read gets. It doubles each time a read fills it, up to
/// [`READ_BYTES`], so only a service that writes fast holds the full read buffer: a daemon
/// with a hundred quiet services would otherwise keep 6 MiB of buffers it never fills.
const FIRST_READ_BYTES: usize = 4 * 1024;
/// Arena capacity above which a mostly empty arena gives memory back (a follower that held
/// lines back has read them or gone).
const SHRINK_ABOVE: usize = 1024 * 1024;

/// One line of service output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogEntry {
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
pub struct ServiceLog {
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
    /// Where lines are also written, for a service with persistent logs.
    persist: Option<PersistTarget>,
    /// Lines formatted for the persistent log, kept for the next read's.
    formatted: Vec<u8>,
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
            + self.ends.capacity() * std::mem::size_of::<LineEnd>()
            + self.times.capacity() * std::mem::size_of::<(u64, Timestamp)>()
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
    pub fn new() -> ServiceLog {
        ServiceLog::default()
    }

    fn lock(&self) -> MutexGuard<'_, LogBuffer> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends the lines of one read, dropping the oldest lines beyond the bound. The one
    /// place service output enters the log.
    pub fn push_lines(&self, split: &Split<'_>) {
        if split.pieces.is_empty() {
            return;
        }
        let mut guard = self.lock();
        let buf = &mut *guard;
        if let Some(persist) = &buf.persist {
            buf.formatted.clear();
            format_lines(split, persist.service(), &mut buf.formatted);
            persist.lines(&buf.formatted, split.pieces.len() as u64);
            if buf.formatted.capacity() > 4 * READ_BYTES {
                buf.formatted = Vec::new();
            }
        }
        buf.make_room(split.cost());
        buf.append(split);
        buf.evict();
        for follower in &buf.followers {
            // A stored permit when the follower is busy: it looks again before it waits.
            follower.wake.notify_one();
        }
    }

    /// Appends one line (without its newline) written at `time`.
    pub fn push(&self, time: Timestamp, line: String) {
        let mut raw = line.into_bytes();
        let pieces = [Piece {
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

    /// Also writes the lines pushed from now on to `target` (none: memory only).
    pub fn set_persist(&self, target: Option<PersistTarget>) {
        self.lock().persist = target;
    }

    /// The last `n` lines, oldest first.
    pub fn last_lines(&self, n: usize) -> Vec<String> {
        self.last_entries(Some(n))
            .into_iter()
            .map(|e| e.line)
            .collect()
    }

    /// The last `n` entries (all of them for `None`), oldest first.
    pub fn last_entries(&self, n: Option<usize>) -> Vec<LogEntry> {
        let buf = self.lock();
        let end = buf.end_seq();
        let from = n.map_or(buf.first_seq, |n| {
            end.saturating_sub(n as u64).max(buf.first_seq)
        });
        buf.entries(from, end)
    }

    /// The time of the oldest line still held, if any.
    pub fn oldest_time(&self) -> Option<Timestamp> {
        let buf = self.lock();
        if buf.ends.is_empty() {
            return None;
        }
        buf.times.front().map(|&(_, time)| time)
    }

    /// A follower that first reads the last `n` lines held now (all of them for `None`),
    /// then every line pushed after; `wake` is notified whenever lines arrive.
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

/// One piece of output: a whole line, or part of a line cut at [`MAX_LINE`].
#[derive(Debug, Clone, Copy)]
struct Piece {
    /// Where its text ends in [`Split::bytes`]; it starts where the previous piece's newline
    /// (if any) ends.
    end: usize,
    /// Whether a newline ends it (not so for a cut, nor for the end of the stream).
    newline: bool,
}

/// The lines that one read of a service's output completed, in the reader's buffer.
#[derive(Debug)]
pub struct Split<'a> {
    /// The bytes, from the first piece's start.
    bytes: &'a [u8],
    pieces: &'a [Piece],
    /// How many pieces at the start continue a line whose first piece came in an earlier
    /// read: the pieces of a cut line share its first piece's time, as they do in Pebble.
    leading: usize,
    leading_time: Timestamp,
    /// The time of the other pieces.
    time: Timestamp,
}

impl Split<'_> {
    /// How many lines (pieces) it holds.
    pub fn len(&self) -> usize {
        self.pieces.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pieces.is_empty()
    }

    /// What its lines are accounted in the log.
    fn cost(&self) -> usize {
        let newlines = self.pieces.iter().filter(|p| p.newline).count();
        self.raw().len() - newlines + ENTRY_OVERHEAD * self.pieces.len()
    }

    /// The bytes of all the pieces, their newlines included.
    fn raw(&self) -> &[u8] {
        let end = self
            .pieces
            .last()
            .map_or(0, |last| last.end + usize::from(last.newline));
        &self.bytes[..end]
    }

    /// Each line's time and bytes (without its newline).
    pub fn lines(&self) -> impl Iterator<Item = (Timestamp, &[u8])> + '_ {
        let mut start = 0;
        self.pieces.iter().enumerate().map(move |(i, piece)| {
            let text = &self.bytes[start..piece.end];
            start = piece.end + usize::from(piece.newline);
            let time = if i < self.leading {
                self.leading_time
            } else {
                self.time
            };
            (time, text)
        })
    }
}

/// Appends the lines of `split` in Pebble's service log layout, `<time> [<service>] <line>`
/// and a newline each, with invalid UTF-8 replaced as in the log itself. The prefix is
/// formatted once per time, not once per line.
pub fn format_lines(split: &Split<'_>, service: &str, out: &mut Vec<u8>) {
    let raw = split.raw();
    let ascii = raw.is_ascii();
    let mut prefix = Vec::with_capacity(PREFIX_LEN + service.len());
    let mut prefix_time = None;
    out.reserve(raw.len() + split.pieces.len() * (PREFIX_LEN + service.len() + 1));
    let mut start = 0;
    for (i, piece) in split.pieces.iter().enumerate() {
        let time = if i < split.leading {
            split.leading_time
        } else {
            split.time
        };
        if prefix_time != Some(time) {
            prefix.clear();
            append_utc_millis(&mut prefix, time);
            prefix.extend_from_slice(b" [");
            prefix.extend_from_slice(service.as_bytes());
            prefix.extend_from_slice(b"] ");
            prefix_time = Some(time);
        }
        out.extend_from_slice(&prefix);
        let after = piece.end + usize::from(piece.newline);
        if ascii && piece.newline {
            // The line and its newline, as the service wrote them.
            out.extend_from_slice(&raw[start..after]);
        } else {
            out.extend_from_slice(String::from_utf8_lossy(&raw[start..piece.end]).as_bytes());
            out.push(b'\n');
        }
        start = after;
    }
}

/// Splits a stream of bytes into lines, cutting long lines where Pebble's log parser cuts
/// them: the first piece and its stored prefix fill one [`MAX_LINE`] read, and each further
/// piece is one more read (a newline counts towards the read it ends).
///
/// The stream is read straight into the splitter's buffer ([`LineSplitter::buffer`]), after
/// the start of a line the previous read left unfinished, so each read's lines are slices of
/// one buffer: nothing is copied per line.
#[derive(Debug)]
pub struct LineSplitter {
    /// Read bytes; `work[line_start..filled]` is the line not finished yet.
    work: Vec<u8>,
    line_start: usize,
    filled: usize,
    /// The room the next read gets.
    room: usize,
    pieces: Pieces,
}

/// The pieces a read completes, and what cutting them depends on.
#[derive(Debug)]
struct Pieces {
    /// Room for the first piece of a line.
    first_cap: usize,
    /// The unfinished line continues a line already cut.
    continuing: bool,
    /// The time of the first piece of the line being cut.
    line_time: Timestamp,
    /// Where the pieces are counted from in the buffer.
    from: usize,
    /// The time of the read.
    now: Timestamp,
    /// Pieces at the start of `found` that continue a line begun in an earlier read, and
    /// that line's time.
    leading: usize,
    leading_time: Timestamp,
    found: Vec<Piece>,
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
            work: Vec::new(),
            line_start: 0,
            filled: 0,
            room: FIRST_READ_BYTES,
            pieces: Pieces {
                first_cap: MAX_LINE.saturating_sub(PREFIX_LEN + name.len()).max(1),
                continuing: false,
                line_time: Timestamp::UNIX_EPOCH,
                from: 0,
                now: Timestamp::UNIX_EPOCH,
                leading: 0,
                leading_time: Timestamp::UNIX_EPOCH,
                found: Vec::new(),
            },
        }
    }

    /// Where the next read goes: room after the unfinished line, from
    /// [`FIRST_READ_BYTES`] up to [`READ_BYTES`] as the service's reads fill it.
    pub fn buffer(&mut self) -> &mut [u8] {
        if self.line_start > 0 {
            self.work.copy_within(self.line_start..self.filled, 0);
            self.filled -= self.line_start;
            self.line_start = 0;
        }
        let want = self.filled + self.room;
        if self.work.len() < want {
            self.work.resize(want, 0);
        }
        &mut self.work[self.filled..]
    }

    /// Whether the service's reads have filled every room they were given, up to the largest
    /// ([`READ_BYTES`]): the service writes fast.
    pub fn reads_fill_the_largest_room(&self) -> bool {
        self.room == READ_BYTES
    }

    /// Takes `n` more bytes read into [`LineSplitter::buffer`] at time `now`, and returns the
    /// pieces they complete.
    pub fn feed(&mut self, n: usize, now: Timestamp) -> Split<'_> {
        // `buffer` offered everything after `filled`: a read that took it all filled its room.
        if n == self.work.len() - self.filled && self.room < READ_BYTES {
            self.room = (self.room * 2).min(READ_BYTES);
        }
        let from = self.line_start;
        let scan = self.filled;
        self.filled += n;
        let end = self.filled;
        let pieces = &mut self.pieces;
        pieces.start(from, now);
        let mut line_start = from;
        for newline in memchr::memchr_iter(b'\n', &self.work[scan..end]) {
            let newline = scan + newline;
            pieces.cut(&mut line_start, newline);
            pieces.emit(newline, true);
            line_start = newline + 1;
        }
        pieces.cut(&mut line_start, end);
        self.line_start = line_start;
        self.pieces.split(&self.work[from..end])
    }

    /// Emits what is left at end of stream.
    pub fn finish(&mut self, now: Timestamp) -> Split<'_> {
        let from = self.line_start;
        self.pieces.start(from, now);
        if self.filled > from {
            self.pieces.emit(self.filled, false);
        }
        self.pieces.continuing = false;
        self.line_start = self.filled;
        self.pieces.split(&self.work[from..self.filled])
    }
}

impl Pieces {
    fn start(&mut self, from: usize, now: Timestamp) {
        self.found.clear();
        self.from = from;
        self.now = now;
        self.leading = 0;
        self.leading_time = self.line_time;
    }

    fn split<'a>(&'a self, bytes: &'a [u8]) -> Split<'a> {
        Split {
            bytes,
            pieces: &self.found,
            leading: self.leading,
            leading_time: self.leading_time,
            time: self.now,
        }
    }

    /// Cuts the line starting at `line_start` into pieces while what it has before `to` is
    /// longer than its piece's room.
    fn cut(&mut self, line_start: &mut usize, to: usize) {
        loop {
            let cap = if self.continuing {
                MAX_LINE
            } else {
                self.first_cap
            };
            if to - *line_start < cap {
                return;
            }
            *line_start += cap;
            self.emit(*line_start, false);
        }
    }

    /// One more piece, ending at `end` in the buffer.
    fn emit(&mut self, end: usize, newline: bool) {
        if !self.continuing {
            self.line_time = self.now;
        } else if self.found.len() == self.leading {
            self.leading += 1;
        }
        self.found.push(Piece {
            end: end - self.from,
            newline,
        });
        self.continuing = !newline;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: i64) -> Timestamp {
        Timestamp::from_millisecond(1_700_000_000_000 + ms).unwrap()
    }

    /// Reads `bytes` through `splitter` in reads of `chunk` bytes at most, the `k`-th read at
    /// time `at(k)`, into `log`; returns what each read completed.
    fn read_into(
        splitter: &mut LineSplitter,
        log: &ServiceLog,
        bytes: &[u8],
        chunk: usize,
        finish: bool,
    ) -> Vec<(Timestamp, String)> {
        let mut out = Vec::new();
        let collect = |split: &Split<'_>, out: &mut Vec<(Timestamp, String)>| {
            for (time, text) in split.lines() {
                out.push((time, String::from_utf8_lossy(text).into_owned()));
            }
            log.push_lines(split);
        };
        for (k, mut piece) in bytes.chunks(chunk.clamp(1, READ_BYTES)).enumerate() {
            // A read gets no more than the splitter's room, as a pipe read would.
            while !piece.is_empty() {
                let room = splitter.buffer();
                let n = piece.len().min(room.len());
                room[..n].copy_from_slice(&piece[..n]);
                piece = &piece[n..];
                let split = splitter.feed(n, at(k as i64));
                collect(&split, &mut out);
            }
        }
        if finish {
            let split = splitter.finish(at(1_000_000));
            collect(&split, &mut out);
        }
        out
    }

    fn texts(lines: &[(Timestamp, String)]) -> Vec<&str> {
        lines.iter().map(|(_, text)| text.as_str()).collect()
    }

    /// The cutting rule spelled out one byte at a time: the reference the splitter must
    /// agree with.
    fn reference_pieces(name: &str, bytes: &[u8]) -> Vec<Vec<u8>> {
        let first_cap = MAX_LINE - PREFIX_LEN - name.len();
        let (mut out, mut line, mut continuing) = (Vec::new(), Vec::new(), false);
        for &b in bytes {
            if b == b'\n' {
                out.push(std::mem::take(&mut line));
                continuing = false;
                continue;
            }
            line.push(b);
            if line.len() == if continuing { MAX_LINE } else { first_cap } {
                out.push(std::mem::take(&mut line));
                continuing = true;
            }
        }
        if !line.is_empty() {
            out.push(line);
        }
        out
    }

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
        let (mut s, log) = (LineSplitter::default(), ServiceLog::new());
        let mut out = read_into(&mut s, &log, b"ab", 64, false);
        assert!(out.is_empty());
        out.extend(read_into(&mut s, &log, b"c\nde\n\nf", 64, false));
        assert_eq!(texts(&out), ["abc", "de", ""]);
        out.extend(read_into(&mut s, &log, b"", 64, true));
        assert_eq!(texts(&out).last().unwrap(), &"f");
        assert_eq!(log.last_lines(10), ["abc", "de", "", "f"]);
    }

    #[test]
    fn long_lines_are_cut_where_pebbles_parser_cuts_them() {
        // Service "svc": the first read holds the 31-byte prefix and 4065 bytes of the line.
        let first = MAX_LINE - PREFIX_LEN - 3;
        let (mut s, log) = (LineSplitter::for_service("svc"), ServiceLog::new());
        let lens =
            |out: Vec<(Timestamp, String)>| out.iter().map(|l| l.1.len()).collect::<Vec<_>>();
        let mut out = read_into(
            &mut s,
            &log,
            &vec![b'y'; first + MAX_LINE + 10],
            5000,
            false,
        );
        out.extend(read_into(&mut s, &log, b"\n", 1, false));
        assert_eq!(lens(out), [first, MAX_LINE, 10]);
        // A piece that fills its read exactly leaves the newline to a read of its own.
        let mut out = read_into(&mut s, &log, &vec![b'z'; first], 100, false);
        out.extend(read_into(&mut s, &log, b"\nnext\n", 100, false));
        assert_eq!(lens(out), [first, 0, 4]);
        // One byte less and the newline fits.
        let mut out = read_into(&mut s, &log, &vec![b'z'; first - 1], 7, false);
        out.extend(read_into(&mut s, &log, b"\n", 1, false));
        assert_eq!(lens(out), [first - 1]);
    }

    #[test]
    fn the_pieces_of_a_line_cut_across_reads_keep_its_first_pieces_time() {
        let (mut s, log) = (LineSplitter::for_service("svc"), ServiceLog::new());
        // Read 0 ends a short line and starts a long one; 1000-byte reads finish it, and the
        // last read also holds a line of its own. A piece's time is that of the read that
        // completes it, and the further pieces of a cut line keep their first piece's.
        let mut bytes = b"short\n".to_vec();
        bytes.extend(std::iter::repeat_n(b'L', 3 * MAX_LINE));
        bytes.extend_from_slice(b"\nafter\n");
        let out = read_into(&mut s, &log, &bytes, 1000, false);
        let first = MAX_LINE - PREFIX_LEN - 3;
        let lens: Vec<usize> = out.iter().map(|l| l.1.len()).collect();
        assert_eq!(lens, [5, first, MAX_LINE, MAX_LINE, 31, 5]);
        let last_read = (bytes.len() as i64 - 1) / 1000;
        let first_done = (6 + first as i64) / 1000;
        let want: Vec<Timestamp> = [0, first_done, first_done, first_done, first_done, last_read]
            .into_iter()
            .map(at)
            .collect();
        assert_eq!(out.iter().map(|l| l.0).collect::<Vec<_>>(), want);
        // The log holds the same lines with the same times.
        let held: Vec<(Timestamp, String)> = log
            .last_entries(None)
            .into_iter()
            .map(|e| (e.time, e.line))
            .collect();
        assert_eq!(held, out);
    }

    #[test]
    fn any_chunking_gives_the_pieces_of_the_reference_rule() {
        use proptest::prelude::*;
        // Short lines, long ones, and lines within a byte of where a piece is cut.
        let first_cap = MAX_LINE - PREFIX_LEN - 3;
        let line = prop_oneof![
            3 => proptest::collection::vec(b'a'..=b'z', 0..40),
            1 => (4000usize..9000).prop_map(|n| vec![b'q'; n]),
            1 => (0usize..3, 0usize..3)
                .prop_map(move |(k, d)| vec![b'e'; first_cap + k * MAX_LINE + d - 1]),
        ];
        let stream = proptest::collection::vec((line, any::<bool>()), 0..40).prop_map(|lines| {
            let mut bytes = Vec::new();
            for (line, newline) in lines {
                bytes.extend(line);
                if newline {
                    bytes.push(b'\n');
                }
            }
            bytes
        });
        proptest!(ProptestConfig::with_cases(200), |(bytes in stream, chunk in 1usize..5000)| {
            let (mut s, log) = (LineSplitter::for_service("svc"), ServiceLog::new());
            // A follower keeps every line in the log for the comparison.
            let _follower = log.follow(None, Arc::new(Notify::new()));
            let out = read_into(&mut s, &log, &bytes, chunk, true);
            let want: Vec<String> = reference_pieces("svc", &bytes)
                .into_iter()
                .map(|p| String::from_utf8(p).unwrap())
                .collect();
            prop_assert_eq!(texts(&out), want.iter().map(String::as_str).collect::<Vec<_>>());
            prop_assert_eq!(log.last_lines(usize::MAX), want);
        });
    }

    #[test]
    fn the_read_room_grows_only_for_a_service_whose_reads_fill_it() {
        let mut s = LineSplitter::default();
        for k in 0..100 {
            let room = s.buffer();
            room[..6].copy_from_slice(b"quiet\n");
            let _ = s.feed(6, at(k));
        }
        assert_eq!(
            s.buffer().len(),
            FIRST_READ_BYTES,
            "a quiet service keeps its first room"
        );
        let mut rooms = Vec::new();
        for k in 0..8 {
            let room = s.buffer();
            let n = room.len();
            rooms.push(n);
            room.fill(b'x');
            room[n - 1] = b'\n';
            let _ = s.feed(n, at(k));
        }
        assert_eq!(
            rooms,
            [4, 8, 16, 32, 64, 64, 64, 64].map(|kib| kib * 1024),
            "each read that fills its room doubles it, up to READ_BYTES"
        );
    }

    #[test]
    fn a_character_cut_in_two_is_replaced_in_both_pieces() {
        let (mut s, log) = (LineSplitter::default(), ServiceLog::new());
        let first = MAX_LINE - PREFIX_LEN;
        let mut bytes = vec![b'a'; first - 1];
        bytes.extend("é\n".as_bytes());
        let out = read_into(&mut s, &log, &bytes, 100, false);
        assert_eq!(out.len(), 2);
        assert!(out[0].1.ends_with('\u{FFFD}'));
        assert_eq!(out[1].1, "\u{FFFD}");
        let mut formatted = Vec::new();
        s.buffer()[..bytes.len()].copy_from_slice(&bytes);
        format_lines(&s.feed(bytes.len(), at(0)), "svc", &mut formatted);
        let text = String::from_utf8(formatted).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2);
        assert!(lines[0].starts_with("2023-11-14T22:13:20.000Z [svc] aaa"));
        assert!(lines[0].ends_with('\u{FFFD}'));
        assert_eq!(lines[1], "2023-11-14T22:13:20.000Z [svc] \u{FFFD}");
        assert_eq!(log.last_lines(2), [out[0].1.clone(), out[1].1.clone()]);
    }

    #[test]
    fn formatted_lines_carry_their_own_times_and_end_in_one_newline_each() {
        let mut s = LineSplitter::for_service("svc");
        let first = MAX_LINE - PREFIX_LEN - 3;
        let mut formatted = Vec::new();
        // Read 0 cuts a long line; read 1 ends it and holds two more lines.
        let long = vec![b'a'; first + 5];
        s.buffer()[..long.len()].copy_from_slice(&long);
        format_lines(&s.feed(long.len(), at(0)), "svc", &mut formatted);
        s.buffer()[..7].copy_from_slice(b"bc\nd\n\nx");
        format_lines(&s.feed(7, at(1)), "svc", &mut formatted);
        format_lines(&s.finish(at(2)), "svc", &mut formatted);
        let text = String::from_utf8(formatted).unwrap();
        let want = [
            format!("2023-11-14T22:13:20.000Z [svc] {}", "a".repeat(first)),
            "2023-11-14T22:13:20.000Z [svc] aaaaabc".to_owned(),
            "2023-11-14T22:13:20.001Z [svc] d".to_owned(),
            "2023-11-14T22:13:20.001Z [svc] ".to_owned(),
            "2023-11-14T22:13:20.002Z [svc] x".to_owned(),
        ];
        assert_eq!(text, want.join("\n") + "\n");
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
