//! Bounds on a push's part headers, where multer has none.
//!
//! multer buffers a part's headers until their blank line, however long, and parses at most
//! 32 of them. Go's `mime/multipart` reader, which Pebble uses, takes up to 10 MiB and
//! 10 000 header lines per part and answers `multipart: message too large` past either.
//! [`PartHeaders`] sits between the request body and multer: it follows the body's framing
//! as multer does (the first `--boundary`, then `\r\n--boundary` after each part's data),
//! holds each part's header block itself, within Go's bounds, and hands multer the block
//! once complete. A block of more lines than multer parses reaches it with only the lines
//! cobble reads (`Content-Disposition`, `Content-Type`). The preamble before the first
//! boundary is dropped as it arrives, as Go's reader skips it, where multer would hold it.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::Stream;

/// Go's `maxMIMEHeaderSize`: the bytes of one part's header block.
pub(crate) const MAX_HEADER_BYTES: usize = 10 << 20;

/// Go's `multipartmaxheaders` default: the header lines of one part.
pub(crate) const MAX_HEADER_LINES: usize = 10_000;

/// multer's `MAX_HEADERS`: the most header lines it parses.
const MULTER_HEADERS: usize = 32;

/// A part's headers past Go's bounds.
#[derive(Debug)]
pub(crate) struct MessageTooLarge;

impl std::fmt::Display for MessageTooLarge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("multipart: message too large")
    }
}

impl std::error::Error for MessageTooLarge {}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

enum Scan {
    /// Before the first `--boundary`: dropped.
    Preamble,
    /// A part's data, up to `\r\n--boundary`.
    Data,
    /// After a boundary: `--` ends the body, else padding and CRLF start the headers.
    AfterBoundary { cr: bool },
    /// A part's header block, held until its blank line.
    Headers,
    /// After the closing boundary, or after framing multer refuses: passed on unread.
    Done,
}

/// The request body, with each part's header block bounded as Go bounds it.
pub(crate) struct PartHeaders<S> {
    inner: Pin<Box<S>>,
    /// `--boundary`, then `\r\n--boundary` once the first is found.
    first: Vec<u8>,
    delimiter: Vec<u8>,
    /// The last bytes scanned, so a boundary split between chunks is found.
    tail: Vec<u8>,
    /// The header block so far.
    held: Vec<u8>,
    /// The header lines begun in `held[..counted]`.
    lines: usize,
    counted: usize,
    scan: Scan,
    ready: VecDeque<Bytes>,
    failed: bool,
}

impl<S> PartHeaders<S> {
    pub(crate) fn new(inner: S, boundary: &str) -> Self {
        let first = format!("--{boundary}").into_bytes();
        let delimiter = format!("\r\n--{boundary}").into_bytes();
        PartHeaders {
            inner: Box::pin(inner),
            first,
            delimiter,
            tail: Vec::new(),
            held: Vec::new(),
            lines: 0,
            counted: 0,
            scan: Scan::Preamble,
            ready: VecDeque::new(),
            failed: false,
        }
    }

    /// Scans a chunk, queueing what multer may read.
    fn feed(&mut self, mut chunk: Bytes) -> Result<(), MessageTooLarge> {
        while !chunk.is_empty() {
            match &mut self.scan {
                Scan::Done => {
                    self.ready.push_back(chunk);
                    return Ok(());
                }
                Scan::Preamble | Scan::Data => {
                    let preamble = matches!(self.scan, Scan::Preamble);
                    let needle = if preamble {
                        &self.first
                    } else {
                        &self.delimiter
                    };
                    match find_end(&self.tail, &chunk, needle) {
                        Some(end) => {
                            if preamble {
                                self.ready.push_back(Bytes::from(needle.clone()));
                            } else {
                                self.ready.push_back(chunk.slice(..end));
                            }
                            chunk = chunk.slice(end..);
                            self.tail.clear();
                            self.scan = Scan::AfterBoundary { cr: false };
                        }
                        None => {
                            let keep = needle.len() - 1;
                            self.tail
                                .extend_from_slice(&chunk[chunk.len().saturating_sub(keep)..]);
                            let extra = self.tail.len().saturating_sub(keep);
                            self.tail.drain(..extra);
                            if !preamble {
                                self.ready.push_back(chunk);
                            }
                            return Ok(());
                        }
                    }
                }
                Scan::AfterBoundary { cr } => {
                    let mut next = None;
                    let mut at = 0;
                    for (i, &b) in chunk.iter().enumerate() {
                        at = i + 1;
                        match b {
                            b'-' if !*cr && i == 0 => next = Some(Scan::Done),
                            b' ' | b'\t' if !*cr => continue,
                            b'\r' if !*cr => {
                                *cr = true;
                                continue;
                            }
                            b'\n' if *cr => next = Some(Scan::Headers),
                            _ => next = Some(Scan::Done),
                        }
                        break;
                    }
                    self.ready.push_back(chunk.slice(..at));
                    chunk = chunk.slice(at..);
                    if let Some(next) = next {
                        self.scan = next;
                    }
                }
                Scan::Headers => {
                    let from = self.held.len().saturating_sub(3);
                    self.held.extend_from_slice(&chunk);
                    let Some(at) = memchr::memmem::find(&self.held[from..], b"\r\n\r\n") else {
                        self.count_lines(self.held.len());
                        if self.held.len() > MAX_HEADER_BYTES || self.lines > MAX_HEADER_LINES {
                            return Err(MessageTooLarge);
                        }
                        return Ok(());
                    };
                    let end = from + at + 4;
                    self.count_lines(end);
                    if end > MAX_HEADER_BYTES || self.lines > MAX_HEADER_LINES {
                        return Err(MessageTooLarge);
                    }
                    self.ready.push_back(for_multer(&self.held[..end]));
                    chunk = Bytes::from(self.held.split_off(end));
                    self.held = Vec::new();
                    self.lines = 0;
                    self.counted = 0;
                    self.scan = Scan::Data;
                }
            }
        }
        Ok(())
    }
}

impl<S> PartHeaders<S> {
    /// Counts the header lines begun in `held[..to]` that are not counted yet.
    fn count_lines(&mut self, to: usize) {
        let from = self.counted.saturating_sub(1);
        if to > from {
            let start = usize::from(self.counted > 0);
            self.lines += header_lines_after(&self.held[from..to], start);
            self.counted = to;
        }
    }
}

/// The header lines begun in `text[start..]`, where a line begins after a newline (or at
/// the very start when `start` is 0).
fn header_lines_after(text: &[u8], start: usize) -> usize {
    (start..text.len())
        .filter(|&i| (i == 0 || text[i - 1] == b'\n') && !matches!(text[i], b' ' | b'\t' | b'\r'))
        .count()
}

/// Where `needle` ends in `chunk`, counting a match that starts in `tail` (the bytes before).
fn find_end(tail: &[u8], chunk: &[u8], needle: &[u8]) -> Option<usize> {
    if !tail.is_empty() {
        let mut joined = tail.to_vec();
        joined.extend_from_slice(&chunk[..chunk.len().min(needle.len() - 1)]);
        if let Some(at) = memchr::memmem::find(&joined, needle) {
            return Some(at + needle.len() - tail.len());
        }
    }
    memchr::memmem::find(chunk, needle).map(|at| at + needle.len())
}

/// The header lines begun in `text` (a folded line's continuations count with it).
fn header_lines(text: &[u8]) -> usize {
    text.split(|&b| b == b'\n')
        .filter(|line| !line.is_empty() && !matches!(line[0], b' ' | b'\t' | b'\r'))
        .count()
}

/// A header block as multer can parse it: unchanged within its 32 lines, else only the lines
/// (and their continuations) cobble reads.
fn for_multer(block: &[u8]) -> Bytes {
    if header_lines(block) <= MULTER_HEADERS {
        return Bytes::copy_from_slice(block);
    }
    let mut out = Vec::new();
    let mut kept = 0;
    let mut keep = false;
    for line in block[..block.len() - 2].split_inclusive(|&b| b == b'\n') {
        if !matches!(line[0], b' ' | b'\t') {
            let name = line.split(|&b| b == b':').next().unwrap_or_default();
            let name = name.trim_ascii();
            keep = kept < MULTER_HEADERS
                && (name.eq_ignore_ascii_case(b"content-disposition")
                    || name.eq_ignore_ascii_case(b"content-type"));
            if keep {
                kept += 1;
            }
        }
        if keep {
            out.extend_from_slice(line);
        }
    }
    out.extend_from_slice(b"\r\n");
    Bytes::from(out)
}

impl<S, E> Stream for PartHeaders<S>
where
    S: Stream<Item = Result<Bytes, E>>,
    E: Into<BoxError>,
{
    type Item = Result<Bytes, BoxError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if let Some(chunk) = this.ready.pop_front() {
                return Poll::Ready(Some(Ok(chunk)));
            }
            if this.failed {
                return Poll::Ready(None);
            }
            match this.inner.as_mut().poll_next(cx) {
                Poll::Ready(Some(Ok(chunk))) => {
                    if let Err(e) = this.feed(chunk) {
                        this.failed = true;
                        this.ready.clear();
                        this.held = Vec::new();
                        return Poll::Ready(Some(Err(Box::new(e))));
                    }
                }
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e.into()))),
                Poll::Ready(None) => {
                    // A body cut in a part's headers: multer sees what there was of them.
                    if !this.held.is_empty() {
                        let held = std::mem::take(&mut this.held);
                        return Poll::Ready(Some(Ok(Bytes::from(held))));
                    }
                    return Poll::Ready(None);
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use futures_util::StreamExt;

    use super::*;

    /// The bytes multer would read from `body` split into chunks of `size`.
    fn through(body: &[u8], size: usize) -> Result<Vec<u8>, String> {
        let chunks: Vec<Result<Bytes, std::io::Error>> = body
            .chunks(size)
            .map(|c| Ok(Bytes::copy_from_slice(c)))
            .collect();
        let mut stream = PartHeaders::new(futures_util::stream::iter(chunks), "bound");
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(async {
                let mut out = Vec::new();
                while let Some(chunk) = stream.next().await {
                    out.extend_from_slice(&chunk.map_err(|e| e.to_string())?);
                }
                Ok(out)
            })
    }

    #[test]
    fn framing_passes_unchanged_but_the_preamble() {
        let body = b"preamble\r\n--bound\r\nA: b\r\n\r\ndata --bound\r\n--bound  \r\nC: d\r\n\r\n\r\n--bound--\r\nepilogue";
        for size in [1, 2, 3, 7, 1000] {
            assert_eq!(
                through(body, size).unwrap(),
                &body[10..],
                "chunks of {size}"
            );
        }
    }

    #[test]
    fn header_blocks_past_gos_bounds_are_refused() {
        let mut body = b"--bound\r\nX: ".to_vec();
        body.resize(MAX_HEADER_BYTES + 100, b'a');
        assert_eq!(
            through(&body, 64 * 1024).unwrap_err(),
            "multipart: message too large"
        );
        let lines = |n: usize| {
            let mut body = b"--bound\r\n".to_vec();
            for i in 0..n {
                body.extend_from_slice(format!("X-{i}: y\r\n").as_bytes());
            }
            body.extend_from_slice(b"\r\ndata\r\n--bound--\r\n");
            body
        };
        assert!(through(&lines(MAX_HEADER_LINES), 4096).is_ok());
        assert_eq!(
            through(&lines(MAX_HEADER_LINES + 1), 4096).unwrap_err(),
            "multipart: message too large"
        );
    }

    #[test]
    fn blocks_of_many_lines_keep_what_cobble_reads() {
        let mut body = b"--bound\r\n".to_vec();
        for i in 0..40 {
            body.extend_from_slice(format!("X-{i}: y\r\n").as_bytes());
        }
        body.extend_from_slice(b"content-disposition: form-data;\r\n name=\"files\"\r\nX: z\r\n\r\ndata\r\n--bound--\r\n");
        assert_eq!(
            String::from_utf8(through(&body, 5).unwrap()).unwrap(),
            "--bound\r\ncontent-disposition: form-data;\r\n name=\"files\"\r\n\r\ndata\r\n--bound--\r\n"
        );
    }
}
