//! Persistent service logs (cobble extension): the output of services with `persist-logs:
//! true` also goes to `<dir>/<service>.log`, rotated by size, so it outlives the daemon.
//!
//! Lines are written in Pebble's service log layout (`<time> [<service>] <line>`) by one
//! dedicated thread, started with the first service that persists its logs (most daemons
//! have none, and pay nothing for it), from a bounded queue: the service's output reader only appends to
//! memory. When the disk does not keep up and the queue is full, lines are dropped and
//! counted, and the file gets one `(... output truncated: N lines lost ...)` line in their
//! place. A file that would grow past its size limit is rotated first (`svc.log` becomes
//! `svc.log.1`, and so on), keeping a bounded number of old files.
//!
//! [`read_back`] parses the files again, oldest first, for `/v1/logs` when the in-memory
//! ring lacks the older lines (after a daemon restart, or once the ring wrapped).

use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, Once};

use jiff::Timestamp;

use super::ring::LogEntry;
use cobble_client::time::append_utc_millis;

/// Bytes of formatted lines waiting for the writer, across all services.
const QUEUE_BYTES: usize = 4 * 1024 * 1024;

/// Where and how much is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PersistConfig {
    /// The directory of the files (`$PEBBLE/logs` unless `COBBLE_LOGS_DIR` says otherwise).
    pub dir: PathBuf,
    /// Size at which a file is rotated (`COBBLE_LOGS_MAX_BYTES`, 10 MiB by default).
    pub max_bytes: u64,
    /// Rotated files kept besides the current one (`COBBLE_LOGS_KEEP`, 3 by default).
    pub keep: usize,
}

impl PersistConfig {
    /// The configuration for a daemon on `pebble_dir`, from the environment.
    pub(crate) fn from_env(pebble_dir: &Path) -> PersistConfig {
        let number = |key: &str| std::env::var(key).ok().and_then(|v| v.parse::<u64>().ok());
        PersistConfig {
            dir: std::env::var_os("COBBLE_LOGS_DIR")
                .map_or_else(|| pebble_dir.join("logs"), PathBuf::from),
            max_bytes: number("COBBLE_LOGS_MAX_BYTES")
                .unwrap_or(10 * 1024 * 1024)
                .max(1),
            keep: number("COBBLE_LOGS_KEEP").map_or(3, |n| n as usize),
        }
    }

    /// The current file of `service`, or its `k`-th rotated one.
    fn path(&self, service: &str, k: usize) -> PathBuf {
        match k {
            0 => self.dir.join(format!("{service}.log")),
            k => self.dir.join(format!("{service}.log.{k}")),
        }
    }
}

#[derive(Default)]
struct Queue {
    /// Formatted lines per service, and the lines dropped since the last write.
    pending: Vec<(Arc<str>, Vec<u8>, u64)>,
    bytes: usize,
    /// The writer holds a batch it has not written yet.
    writing: bool,
}

struct Shared {
    config: PersistConfig,
    queue: Mutex<Queue>,
    changed: Condvar,
    /// Starts the writer thread, once.
    writer: Once,
}

/// The writer of every persisted service log. Cheap to clone.
#[derive(Clone)]
pub(crate) struct LogFiles {
    shared: Arc<Shared>,
}

/// Where one service's lines go.
#[derive(Clone)]
pub(crate) struct PersistTarget {
    service: Arc<str>,
    files: LogFiles,
}

impl std::fmt::Debug for PersistTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PersistTarget({})", self.service)
    }
}

/// Where a service's lines go on disk, if anywhere: set by the supervisor at each start
/// from the service's `persist-logs`, read by its output reader at each read, so a change
/// applies to the output of a process already running too. Cheap to clone.
#[derive(Clone, Default)]
pub(crate) struct Switch {
    target: Arc<Mutex<Option<PersistTarget>>>,
}

impl Switch {
    /// Writes the lines read from now on to `target` (none: memory only).
    pub(crate) fn set(&self, target: Option<PersistTarget>) {
        *self.target.lock().unwrap_or_else(|e| e.into_inner()) = target;
    }

    /// Where the lines of this read go, if anywhere.
    pub(crate) fn target(&self) -> Option<PersistTarget> {
        self.target
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl LogFiles {
    /// The log files of one daemon, written under `config.dir`; the writer thread starts
    /// with the first [`LogFiles::target`].
    pub(crate) fn new(config: PersistConfig) -> LogFiles {
        LogFiles {
            shared: Arc::new(Shared {
                config,
                queue: Mutex::new(Queue::default()),
                changed: Condvar::new(),
                writer: Once::new(),
            }),
        }
    }

    fn start_writer(&self) {
        self.shared.writer.call_once(|| {
            let writer = self.shared.clone();
            if let Err(e) = std::thread::Builder::new()
                .name("cobble-logfiles".into())
                .spawn(move || write_out(&writer))
            {
                tracing::info!("Cannot start the service log file writer: {e}");
            }
        });
    }

    /// Waits until every line queued so far is written, for at most `timeout` (a daemon
    /// about to exit). Returns whether it all went out. Blocking.
    pub(crate) fn flush(&self, timeout: std::time::Duration) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        let shared = &self.shared;
        let mut queue = shared.queue.lock().unwrap_or_else(|e| e.into_inner());
        while queue.bytes > 0 || queue.writing || queue.pending.iter().any(|p| p.2 > 0) {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return false;
            }
            queue = shared
                .changed
                .wait_timeout(queue, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        true
    }

    pub(crate) fn config(&self) -> &PersistConfig {
        &self.shared.config
    }

    /// Where `service`'s lines go.
    pub(crate) fn target(&self, service: &str) -> PersistTarget {
        self.start_writer();
        PersistTarget {
            service: service.into(),
            files: self.clone(),
        }
    }
}

impl PersistTarget {
    /// Queues one line. Never blocks on the disk: a full queue drops the line and counts it.
    #[cfg(test)]
    pub(crate) fn line(&self, time: Timestamp, line: &str) {
        let mut text = Vec::new();
        format_line(&mut text, time, &self.service, line);
        self.lines(&text, 1);
    }

    /// Queues `lines` lines already formatted in the file's layout, each ending in a
    /// newline. Never blocks on the disk: when the queue is full, the lines that do not fit
    /// are dropped and counted.
    pub(crate) fn lines(&self, text: &[u8], lines: u64) {
        let shared = &self.files.shared;
        let mut queue = shared.queue.lock().unwrap_or_else(|e| e.into_inner());
        let room = QUEUE_BYTES.saturating_sub(queue.bytes);
        let (len, fit) = crate::sink::fitting_lines(text, lines, room);
        let was_empty = queue.bytes == 0;
        let index = match queue
            .pending
            .iter()
            .position(|(s, _, _)| **s == *self.service)
        {
            Some(i) => i,
            None => {
                queue.pending.push((self.service.clone(), Vec::new(), 0));
                queue.pending.len() - 1
            }
        };
        let pending = &mut queue.pending[index];
        pending.1.extend_from_slice(&text[..len]);
        pending.2 += lines - fit;
        queue.bytes += len;
        drop(queue);
        if was_empty {
            // Both the writer and a flush may wait on it.
            shared.changed.notify_all();
        }
    }
}

fn format_line(buf: &mut Vec<u8>, time: Timestamp, service: &str, line: &str) {
    append_utc_millis(buf, time);
    buf.extend_from_slice(b" [");
    buf.extend_from_slice(service.as_bytes());
    buf.extend_from_slice(b"] ");
    buf.extend_from_slice(line.as_bytes());
    buf.push(b'\n');
}

/// One open log file.
struct Open {
    file: File,
    size: u64,
}

fn write_out(shared: &Shared) {
    let config = &shared.config;
    let mut open: HashMap<Arc<str>, Open> = HashMap::new();
    loop {
        let batch = {
            let mut queue = shared.queue.lock().unwrap_or_else(|e| e.into_inner());
            while queue
                .pending
                .iter()
                .all(|(_, b, d)| b.is_empty() && *d == 0)
            {
                queue = shared
                    .changed
                    .wait(queue)
                    .unwrap_or_else(|e| e.into_inner());
            }
            queue.bytes = 0;
            queue.writing = true;
            queue
                .pending
                .iter_mut()
                .map(|(s, b, d)| (s.clone(), std::mem::take(b), std::mem::take(d)))
                .collect::<Vec<_>>()
        };
        for (service, mut bytes, dropped) in batch {
            if dropped > 0 {
                // The dropped lines came after what is queued: say so where they were lost.
                let text = crate::logs::lost_message(dropped);
                format_line(&mut bytes, Timestamp::now(), &service, &text);
            }
            if bytes.is_empty() {
                continue;
            }
            if let Err(e) = write_service(config, &mut open, &service, &bytes) {
                tracing::info!("Cannot write log file of service \"{service}\": {e}");
                open.remove(&service);
            }
        }
        shared
            .queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .writing = false;
        shared.changed.notify_all();
    }
}

/// Appends whole lines to `service`'s file, rotating before a line would take it past the
/// size limit.
fn write_service(
    config: &PersistConfig,
    open: &mut HashMap<Arc<str>, Open>,
    service: &Arc<str>,
    mut bytes: &[u8],
) -> std::io::Result<()> {
    while !bytes.is_empty() {
        if !open.contains_key(service) {
            std::fs::create_dir_all(&config.dir)?;
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(config.path(service, 0))?;
            let size = file.metadata()?.len();
            open.insert(service.clone(), Open { file, size });
        }
        let current = open.get_mut(service).expect("opened above");
        let room = config.max_bytes.saturating_sub(current.size) as usize;
        let cut = if bytes.len() <= room {
            bytes.len()
        } else {
            match bytes[..room].iter().rposition(|&b| b == b'\n') {
                Some(i) => i + 1,
                // A line longer than a whole file goes alone into one.
                None if current.size == 0 => bytes
                    .iter()
                    .position(|&b| b == b'\n')
                    .map_or(bytes.len(), |i| i + 1),
                None => 0,
            }
        };
        if cut > 0 {
            current.file.write_all(&bytes[..cut])?;
            current.size += cut as u64;
            bytes = &bytes[cut..];
        }
        if !bytes.is_empty() {
            open.remove(service);
            rotate(config, service)?;
        }
    }
    Ok(())
}

fn rotate(config: &PersistConfig, service: &str) -> std::io::Result<()> {
    if config.keep == 0 {
        return std::fs::remove_file(config.path(service, 0));
    }
    let _ = std::fs::remove_file(config.path(service, config.keep));
    for k in (0..config.keep).rev() {
        match std::fs::rename(config.path(service, k), config.path(service, k + 1)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    Ok(())
}

/// The lines of `service`'s files older than `before` (all of them for `None`), oldest
/// first, at most the last `n` of them. Blocking: files are read whole.
pub(crate) fn read_back(
    config: &PersistConfig,
    service: &str,
    before: Option<Timestamp>,
    n: Option<usize>,
) -> Vec<LogEntry> {
    let mut entries: Vec<LogEntry> = Vec::new();
    for k in (0..=config.keep).rev() {
        let Ok(text) = std::fs::read(config.path(service, k)) else {
            continue;
        };
        let text = String::from_utf8_lossy(&text);
        for raw in text.lines() {
            let Some(entry) = parse_line(raw, service) else {
                continue;
            };
            if before.is_some_and(|b| entry.time >= b) {
                continue;
            }
            entries.push(entry);
        }
        if let Some(n) = n
            && entries.len() > 2 * n + 1024
        {
            entries.drain(..entries.len() - n);
        }
    }
    if let Some(n) = n {
        let excess = entries.len().saturating_sub(n);
        entries.drain(..excess);
    }
    entries
}

/// Parses `<time> [<service>] <line>`.
fn parse_line(raw: &str, service: &str) -> Option<LogEntry> {
    let (time, rest) = raw.split_once(' ')?;
    let rest = rest.strip_prefix('[')?.strip_prefix(service)?;
    let line = rest.strip_prefix("] ")?;
    Some(LogEntry {
        time: time.parse().ok()?,
        line: line.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(dir: &Path, max_bytes: u64, keep: usize) -> PersistConfig {
        PersistConfig {
            dir: dir.join("logs"),
            max_bytes,
            keep,
        }
    }

    #[test]
    fn lines_are_written_rotated_by_size_and_read_back_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let config = config(dir.path(), 1000, 2);
        let files = LogFiles::new(config.clone());
        let target = files.target("svc");
        let t0 = Timestamp::from_second(1_700_000_000).unwrap();
        for i in 0..100 {
            target.line(
                t0 + jiff::SignedDuration::from_millis(i),
                &format!("line {i:03}"),
            );
        }
        // 100 lines of 42 bytes: 23 per file, the oldest rotated away.
        assert!(
            files.flush(std::time::Duration::from_secs(30)),
            "the writer never caught up"
        );
        let entries = read_back(&config, "svc", None, None);
        let names: Vec<String> = (0..=3)
            .filter(|k| config.path("svc", *k).exists())
            .map(|k| config.path("svc", k).display().to_string())
            .collect();
        assert_eq!(names.len(), 3, "{names:?}");
        for k in 0..=2 {
            let len = std::fs::metadata(config.path("svc", k)).unwrap().len();
            assert!(len <= 1000, "file {k} has {len} bytes");
        }
        let numbers: Vec<u32> = entries
            .iter()
            .map(|e| e.line[5..].parse().unwrap())
            .collect();
        assert_eq!(*numbers.last().unwrap(), 99);
        assert!(numbers.windows(2).all(|w| w[1] == w[0] + 1), "{numbers:?}");
        assert!(numbers[0] > 0, "the oldest file was rotated away");
        assert_eq!(
            entries[0].time,
            t0 + jiff::SignedDuration::from_millis(numbers[0].into())
        );

        let older = read_back(
            &config,
            "svc",
            Some(t0 + jiff::SignedDuration::from_millis(90)),
            Some(5),
        );
        let numbers: Vec<&str> = older.iter().map(|e| &e.line[5..]).collect();
        assert_eq!(numbers, ["085", "086", "087", "088", "089"]);
    }
}
