//! Capturing a service's output: the reader of its pipe, which hands every read to each of
//! its destinations ([`Outputs`], made from the daemon's [`Destinations`]): the persisted file, the daemon's stdout under
//! `--verbose`, the log targets that want it, and the ring.

use jiff::Timestamp;
use tokio::net::unix::pipe;

use crate::logs::forward::{ServiceTap, Tap};
use crate::logs::lines::{LineSplitter, Split, format_lines};
use crate::logs::persist;
use crate::logs::ring::ServiceLog;
use crate::sink::Sink;

/// Where the output of every service may go: the daemon's own destinations, handed to the
/// supervisor as values, so two daemons in one process share none of them.
#[derive(Clone, Default)]
pub(crate) struct Destinations {
    /// The persisted log files (none: no service's output is written to disk).
    pub files: Option<persist::LogFiles>,
    /// The daemon's stdout, under `--verbose`.
    pub stdout: Option<&'static Sink>,
    /// The log targets.
    pub forward: Tap,
}

impl Destinations {
    /// The file `service`'s lines go to, for a service with persistent logs.
    pub(crate) fn file(&self, service: &str, persist_logs: bool) -> Option<persist::PersistTarget> {
        match persist_logs {
            true => self.files.as_ref().map(|files| files.target(service)),
            false => None,
        }
    }

    /// The outputs of one run of `service`, whose ring is `log` and file `file`.
    pub(crate) fn outputs(&self, service: &str, log: ServiceLog, file: persist::Switch) -> Outputs {
        Outputs {
            log,
            file,
            stdout: self.stdout,
            forward: self.forward.service(service),
        }
    }
}

/// Where one service's output goes. Every destination is memory or a bounded queue, so
/// none of them can block the reader.
pub(crate) struct Outputs {
    /// Its ring, read by `/v1/logs`, the service status and failed starts.
    pub log: ServiceLog,
    /// Its persisted file, for a service with `persist-logs: true`.
    pub file: persist::Switch,
    /// The daemon's stdout, under `--verbose`.
    pub stdout: Option<&'static Sink>,
    /// The log targets that want this service.
    pub forward: ServiceTap,
}

/// A pipe whose reader stopped before its end, for a re-execution: the pipe, and the start
/// of a line read from it but not finished yet.
#[derive(Debug)]
pub(crate) struct Detached {
    pub reader: pipe::Receiver,
    pub unfinished: Vec<u8>,
}

/// Copies a service's output to its [`Outputs`] until end of file. The work is done per
/// read, not per line, wherever it can be: the ring takes a read's lines at once under one
/// short lock, and they are formatted for stdout straight into its queue, and for the file
/// once per read, outside the ring's lock.
///
/// `unfinished` is the start of a line an earlier reader of the pipe left (see [`Detached`]).
/// Once `detach` is cancelled, the reader stops between reads and hands the pipe back with
/// the line it has not finished: what it read is in the log, what it did not is still in the
/// pipe, so the next reader goes on from there and every line is logged once.
pub(crate) async fn copy_output(
    reader: pipe::Receiver,
    name: String,
    outputs: Outputs,
    unfinished: Vec<u8>,
    detach: tokio_util::sync::CancellationToken,
) -> Option<Detached> {
    let Outputs {
        log,
        file,
        stdout,
        mut forward,
    } = outputs;
    let mut splitter = LineSplitter::for_service(&name);
    let mut grown = false;
    // Lines formatted for the file, kept for the next read's.
    let mut formatted = Vec::new();
    let mut deliver = |split: &Split<'_>| {
        if split.is_empty() {
            return;
        }
        if let Some(target) = file.target() {
            formatted.clear();
            format_lines(split, &name, &mut formatted);
            target.lines(&formatted, split.len() as u64);
            if formatted.capacity() > 4 * crate::logs::lines::READ_BYTES {
                formatted = Vec::new();
            }
        }
        if let Some(stdout) = stdout {
            stdout.lines_with(split.len() as u64, |queue| {
                format_lines(split, &name, queue);
            });
        }
        if forward.wanted() {
            for (time, text) in split.lines() {
                forward.line(time, &String::from_utf8_lossy(text));
            }
        }
        log.push_lines(split);
    };
    if !unfinished.is_empty() {
        let room = splitter.buffer();
        let n = unfinished.len().min(room.len());
        room[..n].copy_from_slice(&unfinished[..n]);
        deliver(&splitter.feed(n, Timestamp::now()));
    }
    'service: loop {
        tokio::select! {
            readable = reader.readable() => if readable.is_err() { break },
            // Every byte read is delivered; what is not read yet stays in the pipe for the
            // next reader.
            () = detach.cancelled() => {
                return Some(Detached {
                    reader,
                    unfinished: splitter.unfinished().to_vec(),
                });
            }
        }
        // Read until the pipe is empty, not only until a read comes back short (what
        // `AsyncRead` does). A service that writes fast is usually in the middle of a write
        // when a read finds less than it asked for, and its next pages arrive while the lines
        // just read are stored. A reader that goes on reading is awake when they do, so the
        // service rarely has to wake it, and waking a reader on another CPU costs the service
        // more than a read costs the daemon.
        loop {
            // Each read counts against the task's budget, as an `AsyncRead` read does, so a
            // service that never lets its pipe empty still shares the thread.
            tokio::task::consume_budget().await;
            let n = match reader.try_read(splitter.buffer()) {
                Ok(0) => break 'service,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue 'service,
                Err(_) => break 'service,
            };
            // The lines of one read arrived together: one clock reading serves them all.
            deliver(&splitter.feed(n, Timestamp::now()));
            if !grown && splitter.reads_fill_the_largest_room() {
                // A fast service gets a larger pipe, so that it writes on while the daemon
                // stores what it read instead of waiting for the pipe to empty. Where the
                // kernel refuses, the default pipe works, only slower.
                let _ = cobble_sys::pipe::set_pipe_size(&reader, FAST_PIPE_BYTES);
                grown = true;
            }
        }
    }
    deliver(&splitter.finish(Timestamp::now()));
    None
}

/// The pipe of a service whose reads fill [`LineSplitter`]'s largest room (the default is
/// 64 KiB).
const FAST_PIPE_BYTES: usize = 256 * 1024;

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::Arc;

    use tokio::sync::Notify;

    use super::*;

    /// Feeds `writes` to [`copy_output`] through a real pipe, each write landing whole in
    /// an empty pipe (so each is exactly one read), and returns the pipe's size at the end.
    async fn pipe_size_after(writes: &[usize]) -> usize {
        let (reader, mut writer) = std::io::pipe().unwrap();
        let reader = pipe::Receiver::from_owned_fd(reader.into()).unwrap();
        let log = ServiceLog::new();
        let wake = Arc::new(Notify::new());
        let mut follower = log.follow(Some(0), wake.clone());
        let copy = tokio::spawn(copy_output(
            reader,
            "svc".into(),
            Outputs {
                log: log.clone(),
                file: persist::Switch::default(),
                stdout: None,
                forward: Tap::default().service("svc"),
            },
            Vec::new(),
            tokio_util::sync::CancellationToken::new(),
        ));
        for &bytes in writes {
            let line = b"x".repeat(99);
            let mut chunk: Vec<u8> = line
                .iter()
                .copied()
                .chain([b'\n'])
                .cycle()
                .take(bytes)
                .collect();
            *chunk.last_mut().unwrap() = b'\n';
            writer.write_all(&chunk).unwrap();
            // The next write waits until the reader has taken this one's last line.
            let mut seen = 0;
            while seen < chunk.iter().filter(|&&b| b == b'\n').count() {
                let notified = wake.notified();
                let batch = follower.take(usize::MAX);
                if batch.entries.is_empty() {
                    notified.await;
                }
                seen += batch.entries.len();
            }
        }
        let size = cobble_sys::pipe::pipe_size(&writer).unwrap();
        drop(writer);
        copy.await.unwrap();
        size
    }

    #[tokio::test]
    async fn a_service_whose_reads_fill_the_largest_room_gets_a_larger_pipe() {
        // Each read fills its room: 4 KiB, then 8, 16, 32 and 64.
        let fast = pipe_size_after(&[4096, 8192, 16384, 32768, 65536]).await;
        assert_eq!(fast, FAST_PIPE_BYTES);
    }

    #[tokio::test]
    async fn a_service_that_writes_little_at_a_time_keeps_the_default_pipe() {
        let default = {
            let (reader, _writer) = std::io::pipe().unwrap();
            cobble_sys::pipe::pipe_size(&reader).unwrap()
        };
        // Every read fills its room but the last, which stops the room growing at 32 KiB.
        let slow = pipe_size_after(&[4096, 8192, 16384, 30000, 100, 100]).await;
        assert_eq!(slow, default);
    }
}
