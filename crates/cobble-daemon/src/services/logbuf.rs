//! A bounded in-memory log of one service's output.
//!
//! Each service keeps the most recent lines of its merged stdout and stderr, bounded in bytes
//! (100 KiB like Pebble), so a chatty service costs a fixed amount of memory however long it
//! runs. Lines longer than [`MAX_LINE`] are split, as Pebble's log parser does.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use jiff::Timestamp;

/// Bytes of output kept per service.
pub const MAX_LOG_BYTES: usize = 100 * 1024;
/// Longest line kept as one entry.
pub const MAX_LINE: usize = 4096;
/// Bookkeeping cost charged per entry, so many tiny lines are bounded too.
const ENTRY_OVERHEAD: usize = 32;

/// One line of service output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogEntry {
    pub time: Timestamp,
    pub line: String,
}

/// The output buffer of a service, shared between its output reader and the manager.
#[derive(Debug, Clone, Default)]
pub struct ServiceLog {
    inner: Arc<Mutex<LogBuffer>>,
}

#[derive(Debug, Default)]
struct LogBuffer {
    entries: VecDeque<LogEntry>,
    bytes: usize,
    /// Whether older output was dropped.
    truncated: bool,
}

impl ServiceLog {
    pub fn new() -> ServiceLog {
        ServiceLog::default()
    }

    /// Appends one line (without its newline), dropping the oldest lines beyond the bound.
    pub fn push(&self, time: Timestamp, line: String) {
        let mut buf = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        buf.bytes += line.len() + ENTRY_OVERHEAD;
        buf.entries.push_back(LogEntry { time, line });
        while buf.bytes > MAX_LOG_BYTES {
            let Some(old) = buf.entries.pop_front() else {
                break;
            };
            buf.bytes -= old.line.len() + ENTRY_OVERHEAD;
            buf.truncated = true;
        }
    }

    /// The last `n` lines, oldest first.
    pub fn last_lines(&self, n: usize) -> Vec<String> {
        let buf = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let skip = buf.entries.len().saturating_sub(n);
        buf.entries
            .iter()
            .skip(skip)
            .map(|e| e.line.clone())
            .collect()
    }

    /// Number of bytes currently accounted (for tests and metrics).
    pub fn bytes(&self) -> usize {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).bytes
    }

    /// Whether output was dropped to respect the bound.
    pub fn truncated(&self) -> bool {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .truncated
    }
}

/// Splits a stream of bytes into lines of at most [`MAX_LINE`] bytes.
#[derive(Debug, Default)]
pub struct LineSplitter {
    partial: Vec<u8>,
}

impl LineSplitter {
    /// Feeds bytes and calls `emit` for each complete line.
    pub fn feed(&mut self, mut bytes: &[u8], mut emit: impl FnMut(String)) {
        while !bytes.is_empty() {
            let room = MAX_LINE - self.partial.len();
            match bytes.iter().take(room).position(|&b| b == b'\n') {
                Some(i) => {
                    self.partial.extend_from_slice(&bytes[..i]);
                    emit(self.take());
                    bytes = &bytes[i + 1..];
                }
                None => {
                    let n = room.min(bytes.len());
                    self.partial.extend_from_slice(&bytes[..n]);
                    bytes = &bytes[n..];
                    if self.partial.len() == MAX_LINE {
                        emit(self.take());
                    }
                }
            }
        }
    }

    /// Emits what is left at end of stream.
    pub fn finish(&mut self, mut emit: impl FnMut(String)) {
        if !self.partial.is_empty() {
            emit(self.take());
        }
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
        s.feed(b"ab", |l| out.push(l));
        s.feed(b"c\nde\n\nf", |l| out.push(l));
        assert_eq!(out, ["abc", "de", ""]);
        s.finish(|l| out.push(l));
        assert_eq!(out.last().unwrap(), "f");

        let mut out = Vec::new();
        let long = vec![b'y'; MAX_LINE * 2 + 10];
        s.feed(&long, |l| out.push(l));
        s.feed(b"\n", |l| out.push(l));
        assert_eq!(
            out.iter().map(String::len).collect::<Vec<_>>(),
            [MAX_LINE, MAX_LINE, 10]
        );
    }
}
