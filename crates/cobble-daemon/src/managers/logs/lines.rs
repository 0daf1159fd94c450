//! Cutting a service's output into lines, and formatting them in Pebble's layout.
//!
//! Lines longer than Pebble's log parser reads at once are cut where Pebble cuts them
//! ([`LineSplitter`]). The output is read straight into the splitter's buffer, so a read's
//! lines are slices of one buffer ([`Split`]): the ring, the persisted files, the daemon's
//! stdout and the log targets each take a read's lines at once, with one timestamp.

use jiff::Timestamp;

use cobble_client::time::append_utc_millis;

/// The buffer Pebble's log parser reads with: a line (with its `<time> [<service>] ` prefix
/// and its newline) longer than this comes out in several entries with the same time.
pub(crate) const MAX_LINE: usize = 4096;
/// The most bytes read from a service's output at once: a pipe holds 64 KiB, so one read
/// takes all a fast writer has written meanwhile.
pub(crate) const READ_BYTES: usize = 64 * 1024;
/// The room a service's first read gets. It doubles each time a read fills it, up to
/// [`READ_BYTES`], so only a service that writes fast holds the full read buffer: a daemon
/// with a hundred quiet services would otherwise keep 6 MiB of buffers it never fills.
const FIRST_READ_BYTES: usize = 4 * 1024;

/// Length of the `2006-01-02T15:04:05.000Z [] ` prefix Pebble stores before each line,
/// without the service name.
const PREFIX_LEN: usize = 28;

/// One piece of output: a whole line, or part of a line cut at [`MAX_LINE`].
#[derive(Debug, Clone, Copy)]
pub(super) struct Piece {
    /// Where its text ends in [`Split::bytes`]; it starts where the previous piece's newline
    /// (if any) ends.
    pub(super) end: usize,
    /// Whether a newline ends it (not so for a cut, nor for the end of the stream).
    pub(super) newline: bool,
}

/// The lines that one read of a service's output completed, in the reader's buffer.
#[derive(Debug)]
pub(crate) struct Split<'a> {
    /// The bytes, from the first piece's start.
    pub(super) bytes: &'a [u8],
    pub(super) pieces: &'a [Piece],
    /// How many pieces at the start continue a line whose first piece came in an earlier
    /// read: the pieces of a cut line share its first piece's time, as they do in Pebble.
    pub(super) leading: usize,
    pub(super) leading_time: Timestamp,
    /// The time of the other pieces.
    pub(super) time: Timestamp,
}

impl Split<'_> {
    /// How many lines (pieces) it holds.
    pub(crate) fn len(&self) -> usize {
        self.pieces.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.pieces.is_empty()
    }

    /// The bytes of all the pieces, their newlines included.
    pub(super) fn raw(&self) -> &[u8] {
        let end = self
            .pieces
            .last()
            .map_or(0, |last| last.end + usize::from(last.newline));
        &self.bytes[..end]
    }

    /// Each line's time and bytes (without its newline).
    pub(crate) fn lines(&self) -> impl Iterator<Item = (Timestamp, &[u8])> + '_ {
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
pub(crate) fn format_lines(split: &Split<'_>, service: &str, out: &mut Vec<u8>) {
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
pub(crate) struct LineSplitter {
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
    pub(crate) fn for_service(name: &str) -> LineSplitter {
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
    pub(crate) fn buffer(&mut self) -> &mut [u8] {
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
    pub(crate) fn reads_fill_the_largest_room(&self) -> bool {
        self.room == READ_BYTES
    }

    /// Takes `n` more bytes read into [`LineSplitter::buffer`] at time `now`, and returns the
    /// pieces they complete.
    pub(crate) fn feed(&mut self, n: usize, now: Timestamp) -> Split<'_> {
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

    /// The start of a line read but not finished yet.
    pub(crate) fn unfinished(&self) -> &[u8] {
        &self.work[self.line_start..self.filled]
    }

    /// Emits what is left at end of stream.
    pub(crate) fn finish(&mut self, now: Timestamp) -> Split<'_> {
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
pub(crate) mod tests {
    use std::sync::Arc;

    use tokio::sync::Notify;

    use super::*;
    use crate::logs::ring::ServiceLog;

    fn at(ms: i64) -> Timestamp {
        Timestamp::from_millisecond(1_700_000_000_000 + ms).unwrap()
    }

    /// Reads `bytes` through `splitter` in reads of `chunk` bytes at most, the `k`-th read at
    /// time `at(k)`, into `log`; returns what each read completed.
    pub(crate) fn read_into(
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
}
