//! Output streams written without ever blocking the daemon (its stdout and stderr, made in
//! [`crate::daemon_log`]).
//!
//! Juju starts the daemon with `--verbose` and its stdout going into the container's log pipe.
//! When nobody drains that pipe (a stalled log collector), a `write` to it blocks until there is
//! room; done on a runtime worker, that would stop the API, health, checks and supervision with
//! it. So each stream has one [`Sink`]: callers append whole lines to a bounded in-memory
//! queue and return at once, and one dedicated thread per stream writes the queue out, blocking
//! as long as it must. When the queue is full, new lines are dropped and counted; once the
//! writer catches up it reports how many were lost, so a reader of the log knows there is a gap.
//!
//! The bound is in bytes ([`QUEUE_BYTES`]), so a flood of output costs a fixed amount of memory
//! however long the stream stays stalled.
//!
//! A line that is logged very often and is not urgent (the daemon log's line per API request)
//! can be queued as a [`Record`]: its few fields are copied into the queue, and the writer
//! thread turns them into text, so the thread that logs pays neither for the formatting nor
//! for a write. Records are written in their place among the other lines. When only records
//! are waiting, the writer lets them gather for [`LINGER`] first, so that a client polling the
//! daemon costs one write (and one wake-up) per batch rather than per request; any other line,
//! and a flush, ends the wait.

use std::io::Write;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Bytes a stream may hold while its reader is not keeping up.
pub(crate) const QUEUE_BYTES: usize = 256 * 1024;

/// How long records alone wait for more to go out with them.
pub(crate) const LINGER: Duration = Duration::from_millis(10);

/// A line whose text the writer thread builds (see the module notes).
pub(crate) trait Record: Send + 'static {
    /// Appends the record's text, whole lines each ending in a newline.
    fn write(&self, out: &mut Vec<u8>);
    /// About how many bytes [`Record::write`] appends, counted against [`QUEUE_BYTES`].
    fn len_hint(&self) -> usize;
}

/// The record type of a stream that has none.
pub(crate) enum NoRecord {}

impl Record for NoRecord {
    fn write(&self, _: &mut Vec<u8>) {
        match *self {}
    }

    fn len_hint(&self) -> usize {
        match *self {}
    }
}

/// The queue of one stream.
struct Queue<R> {
    /// Whole lines, newline included, waiting to be written.
    pending: Vec<u8>,
    /// Records waiting to be written, each with the length `pending` had when it was
    /// queued: it goes out after those bytes and before the ones queued after it.
    records: Vec<(usize, R)>,
    /// The bytes the records will take, as their hints say.
    record_bytes: usize,
    /// Lines dropped since the last report.
    dropped: u64,
    /// The writer is in the middle of a write (so the stream is not flushed yet).
    writing: bool,
    /// A flush is waiting: records go out without lingering.
    flushing: bool,
}

impl<R> Default for Queue<R> {
    fn default() -> Self {
        Queue {
            pending: Vec::new(),
            records: Vec::new(),
            record_bytes: 0,
            dropped: 0,
            writing: false,
            flushing: false,
        }
    }
}

impl<R> Queue<R> {
    fn is_empty(&self) -> bool {
        self.pending.is_empty() && self.records.is_empty()
    }

    fn queued_bytes(&self) -> usize {
        self.pending.len() + self.record_bytes
    }
}

struct Shared<R> {
    queue: Mutex<Queue<R>>,
    /// Signalled when lines are queued (for the writer) and when a batch is written (for
    /// [`Sink::flush`]).
    changed: Condvar,
}

/// What the writer says, on the stream itself, after it has dropped lines.
type DropNotice = fn(u64) -> Vec<u8>;

/// One output stream written by a dedicated thread. Cheap to clone.
pub(crate) struct Sink<R: Record = NoRecord> {
    shared: Arc<Shared<R>>,
}

impl<R: Record> Clone for Sink<R> {
    fn clone(&self) -> Self {
        Sink {
            shared: self.shared.clone(),
        }
    }
}

impl<R: Record> Sink<R> {
    /// Starts a writer thread for `out`. After a gap, `notice` turns the number of dropped
    /// lines into a line written in the gap's place.
    pub(crate) fn spawn(
        name: &str,
        out: impl Write + Send + 'static,
        notice: fn(u64) -> Vec<u8>,
    ) -> std::io::Result<Sink<R>> {
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue::default()),
            changed: Condvar::new(),
        });
        let writer = shared.clone();
        std::thread::Builder::new()
            .name(format!("cobble-{name}"))
            .spawn(move || write_out(&writer, out, notice))?;
        Ok(Sink { shared })
    }

    /// Queues one line (a newline is added). Never blocks on the stream: if the queue is full
    /// the line is dropped and counted.
    #[cfg(test)]
    pub(crate) fn line(&self, line: &[u8]) {
        self.queue_bytes(line, true);
    }

    /// Queues text that already ends in a newline (a formatted log line).
    pub(crate) fn text(&self, text: &[u8]) {
        self.queue_bytes(text, false);
    }

    /// Queues a record, to be formatted by the writer thread. Never blocks on the stream: if
    /// the queue is full the record is dropped and counted.
    pub(crate) fn record(&self, record: R) {
        let len = record.len_hint();
        let mut queue = lock(&self.shared.queue);
        if queue.queued_bytes() + len > QUEUE_BYTES {
            queue.dropped += 1;
            return;
        }
        let was_empty = queue.is_empty();
        let at = queue.pending.len();
        queue.records.push((at, record));
        queue.record_bytes += len;
        drop(queue);
        if was_empty {
            self.shared.changed.notify_all();
        }
    }

    /// Queues `lines` lines at once, which `write` appends to the queue, each ending in a
    /// newline (the formatted lines of one read of a service's output): they are formatted
    /// where the writer takes them, not copied there. When the queue is full, the lines that
    /// do not fit are dropped and counted, whole.
    pub(crate) fn lines_with(&self, lines: u64, write: impl FnOnce(&mut Vec<u8>)) {
        let mut queue = lock(&self.shared.queue);
        let start = queue.pending.len();
        let used = queue.queued_bytes();
        if used >= QUEUE_BYTES {
            queue.dropped += lines;
            return;
        }
        write(&mut queue.pending);
        if queue.pending.len() - start + used > QUEUE_BYTES {
            let (len, fit) = fitting_lines(&queue.pending[start..], lines, QUEUE_BYTES - used);
            queue.pending.truncate(start + len);
            queue.dropped += lines - fit;
        }
        let queued = queue.pending.len() > start;
        drop(queue);
        // Text ends a linger over records too.
        if start == 0 && queued {
            self.shared.changed.notify_all();
        }
    }

    fn queue_bytes(&self, bytes: &[u8], add_newline: bool) {
        let len = bytes.len() + usize::from(add_newline);
        let mut queue = lock(&self.shared.queue);
        if queue.queued_bytes() + len > QUEUE_BYTES {
            queue.dropped += 1;
            return;
        }
        // Text ends a linger over records too.
        let was_empty = queue.pending.is_empty();
        queue.pending.extend_from_slice(bytes);
        if add_newline {
            queue.pending.push(b'\n');
        }
        drop(queue);
        if was_empty {
            self.shared.changed.notify_all();
        }
    }

    /// Waits until everything queued so far has been written, for at most `timeout` (the
    /// stream may be stalled for good). Returns whether it all went out. Blocking: call it
    /// from the main thread at exit, or from a blocking task.
    pub(crate) fn flush(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut queue = lock(&self.shared.queue);
        if !queue.records.is_empty() {
            queue.flushing = true;
            self.shared.changed.notify_all();
        }
        while !queue.is_empty() || queue.writing {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            queue = self
                .shared
                .changed
                .wait_timeout(queue, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        true
    }

    /// Lines dropped and not yet reported (for tests and metrics).
    #[cfg(test)]
    pub(crate) fn dropped(&self) -> u64 {
        lock(&self.shared.queue).dropped
    }
}

/// How much of `text`, `lines` lines each ending in a newline, fits in `room` bytes as whole
/// lines: its length, and how many lines that is.
pub(crate) fn fitting_lines(text: &[u8], lines: u64, room: usize) -> (usize, u64) {
    if text.len() <= room {
        return (text.len(), lines);
    }
    let len = memchr::memrchr(b'\n', &text[..room]).map_or(0, |i| i + 1);
    (len, memchr::memchr_iter(b'\n', &text[..len]).count() as u64)
}

fn lock<R>(queue: &Mutex<Queue<R>>) -> std::sync::MutexGuard<'_, Queue<R>> {
    queue.lock().unwrap_or_else(|e| e.into_inner())
}

/// The writer thread: takes the whole queue at once, writes it, reports drops, repeats.
fn write_out<R: Record>(shared: &Shared<R>, mut out: impl Write, notice: DropNotice) {
    let mut batch = Vec::new();
    let mut text = Vec::new();
    let mut records = Vec::new();
    loop {
        let dropped = {
            let mut queue = lock(&shared.queue);
            while queue.is_empty() && queue.dropped == 0 {
                queue = shared
                    .changed
                    .wait(queue)
                    .unwrap_or_else(|e| e.into_inner());
            }
            // Records alone may wait a little for company; text and flushes cut it short.
            if queue.pending.is_empty() && !queue.records.is_empty() && !queue.flushing {
                let deadline = Instant::now() + LINGER;
                while queue.pending.is_empty() && !queue.flushing {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        break;
                    }
                    queue = shared
                        .changed
                        .wait_timeout(queue, left)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
            }
            std::mem::swap(&mut text, &mut queue.pending);
            std::mem::swap(&mut records, &mut queue.records);
            queue.record_bytes = 0;
            queue.flushing = false;
            queue.writing = true;
            std::mem::take(&mut queue.dropped)
        };
        if records.is_empty() {
            // Text alone is written as it was queued, without a copy.
            std::mem::swap(&mut batch, &mut text);
        } else {
            // Each record goes where it was queued among the text.
            let mut written = 0;
            for (at, record) in records.drain(..) {
                batch.extend_from_slice(&text[written..at]);
                written = at;
                record.write(&mut batch);
            }
            batch.extend_from_slice(&text[written..]);
            text.clear();
        }
        if text.capacity() > QUEUE_BYTES {
            text.shrink_to(QUEUE_BYTES);
        }
        // The dropped lines came after what is in the batch; say so where they were lost.
        if dropped > 0 {
            batch.extend_from_slice(&notice(dropped));
        }
        // A stream that is closed for good (EPIPE) is not retried; the lines are gone.
        let _ = out.write_all(&batch).and_then(|()| out.flush());
        batch.clear();
        if batch.capacity() > QUEUE_BYTES {
            batch.shrink_to(QUEUE_BYTES);
        }
        lock(&shared.queue).writing = false;
        shared.changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn notice(n: u64) -> Vec<u8> {
        format!("dropped {n}\n").into_bytes()
    }

    #[test]
    fn lines_go_out_in_order() {
        let (mut reader, writer) = std::io::pipe().unwrap();
        let sink: Sink = Sink::spawn("test", writer, notice).unwrap();
        for i in 0..1000 {
            sink.line(format!("line {i}").as_bytes());
        }
        assert!(sink.flush(Duration::from_secs(10)));
        drop(sink);
        let mut out = vec![0u8; 1_000_000];
        let mut got = String::new();
        while !got.ends_with("line 999\n") {
            let n = reader.read(&mut out).unwrap();
            got.push_str(std::str::from_utf8(&out[..n]).unwrap());
        }
        let lines: Vec<&str> = got.lines().collect();
        assert_eq!(lines.len(), 1000);
        assert_eq!(lines[10], "line 10");
    }

    /// A record whose text is its number.
    struct Numbered(u32);

    impl Record for Numbered {
        fn write(&self, out: &mut Vec<u8>) {
            out.extend_from_slice(format!("record {}\n", self.0).as_bytes());
        }

        fn len_hint(&self) -> usize {
            16
        }
    }

    /// Reads `reader` until the text read ends with `end`.
    fn read_until(reader: &mut std::io::PipeReader, end: &str) -> String {
        let mut got = String::new();
        let mut buf = vec![0u8; 1 << 16];
        while !got.ends_with(end) {
            let n = reader.read(&mut buf).unwrap();
            assert!(n > 0, "the stream closed after {got:?}");
            got.push_str(std::str::from_utf8(&buf[..n]).unwrap());
        }
        got
    }

    #[test]
    fn records_go_out_in_their_place_among_lines() {
        let (mut reader, writer) = std::io::pipe().unwrap();
        let sink: Sink<Numbered> = Sink::spawn("test", writer, notice).unwrap();
        sink.line(b"a");
        sink.record(Numbered(1));
        sink.record(Numbered(2));
        sink.text(b"b\n");
        sink.record(Numbered(3));
        assert!(sink.flush(Duration::from_secs(10)));
        assert_eq!(
            read_until(&mut reader, "record 3\n"),
            "a\nrecord 1\nrecord 2\nb\nrecord 3\n"
        );
    }

    #[test]
    fn records_alone_go_out_by_themselves_after_the_linger() {
        let (mut reader, writer) = std::io::pipe().unwrap();
        let sink: Sink<Numbered> = Sink::spawn("test", writer, notice).unwrap();
        let start = Instant::now();
        for i in 0..100 {
            sink.record(Numbered(i));
        }
        // Nobody flushes: the writer ends its wait on its own.
        let got = read_until(&mut reader, "record 99\n");
        assert!(
            start.elapsed() >= LINGER,
            "written before the linger was over"
        );
        assert_eq!(got.lines().count(), 100);
    }

    #[test]
    fn a_full_queue_drops_records_and_counts_them() {
        let (mut reader, writer) = std::io::pipe().unwrap();
        let sink: Sink<Numbered> = Sink::spawn("test", writer, notice).unwrap();
        // Far more than the queue holds (by their hints), faster than the pipe is read.
        let total = 4 * QUEUE_BYTES as u64 / 16;
        for i in 0..total {
            sink.record(Numbered(i as u32));
        }
        let (mut delivered, mut dropped) = (0u64, 0u64);
        let mut text = String::new();
        let mut buf = vec![0u8; 1 << 16];
        while delivered + dropped < total {
            let n = reader.read(&mut buf).unwrap();
            text.push_str(std::str::from_utf8(&buf[..n]).unwrap());
            while let Some(end) = text.find('\n') {
                let line: String = text.drain(..=end).collect();
                match line.trim_end().strip_prefix("dropped ") {
                    Some(n) => dropped += n.parse::<u64>().unwrap(),
                    None => delivered += 1,
                }
            }
        }
        assert_eq!(delivered + dropped, total);
        assert!(dropped > 0, "nothing was dropped");
    }

    #[test]
    fn a_batch_of_lines_is_queued_whole_or_up_to_the_last_line_that_fits() {
        let text = b"one\ntwo\nthree\n";
        assert_eq!(fitting_lines(text, 3, 100), (14, 3));
        assert_eq!(fitting_lines(text, 3, 14), (14, 3));
        assert_eq!(fitting_lines(text, 3, 13), (8, 2));
        assert_eq!(fitting_lines(text, 3, 8), (8, 2));
        assert_eq!(fitting_lines(text, 3, 7), (4, 1));
        assert_eq!(fitting_lines(text, 3, 3), (0, 0));
        assert_eq!(fitting_lines(text, 3, 0), (0, 0));
    }

    #[test]
    fn batches_on_a_stalled_stream_count_every_line_they_drop() {
        let (mut reader, writer) = std::io::pipe().unwrap();
        let sink: Sink = Sink::spawn("test", writer, notice).unwrap();
        let mut batch = Vec::new();
        for _ in 0..100 {
            batch.extend_from_slice(&[b'x'; 999]);
            batch.push(b'\n');
        }
        for _ in 0..100 {
            sink.lines_with(100, |queue| queue.extend_from_slice(&batch));
        }
        assert!(lock(&sink.shared.queue).pending.len() <= QUEUE_BYTES);
        let (delivered, dropped) = drain_counting(&mut reader, 10_000, 1000);
        assert_eq!(delivered + dropped, 10_000);
        assert!(dropped > 5_000, "dropped {dropped}");
    }

    /// Reads `reader` until `total` lines are accounted for, each either delivered (and
    /// `line_len` bytes long with its newline) or counted in a `dropped N` notice; returns
    /// both counts.
    fn drain_counting(reader: &mut std::io::PipeReader, total: u64, line_len: usize) -> (u64, u64) {
        let (mut delivered, mut dropped) = (0u64, 0u64);
        let mut text = String::new();
        let mut buf = vec![0u8; 1 << 16];
        while delivered + dropped < total {
            let n = reader.read(&mut buf).unwrap();
            text.push_str(std::str::from_utf8(&buf[..n]).unwrap());
            while let Some(end) = text.find('\n') {
                let line: String = text.drain(..=end).collect();
                match line.trim_end().strip_prefix("dropped ") {
                    Some(n) => dropped += n.parse::<u64>().unwrap(),
                    None => {
                        assert_eq!(line.len(), line_len);
                        delivered += 1;
                    }
                }
            }
        }
        (delivered, dropped)
    }

    #[test]
    fn a_stalled_stream_never_blocks_the_caller_bounds_memory_and_counts_every_loss() {
        // A pipe nobody reads: the writer thread blocks once the pipe is full.
        let (mut reader, writer) = std::io::pipe().unwrap();
        let sink: Sink = Sink::spawn("test", writer, notice).unwrap();
        let line = vec![b'x'; 1000];
        // Far more than the pipe and the queue hold together; returns without blocking.
        for _ in 0..10_000 {
            sink.line(&line);
        }
        assert!(!sink.flush(Duration::from_millis(50)), "nothing is reading");
        assert!(lock(&sink.shared.queue).pending.len() <= QUEUE_BYTES);

        // Drain the pipe: every line either arrives or is counted in a notice where it was
        // lost.
        let (delivered, dropped) = drain_counting(&mut reader, 10_000, 1001);
        assert_eq!(delivered + dropped, 10_000);
        assert!(dropped > 5_000, "dropped {dropped}");
        assert!(sink.flush(Duration::from_secs(10)));
        assert_eq!(sink.dropped(), 0);
    }
}
