//! Pull: `GET /v1/files?action=read`, a multipart stream of the files and a final response.

use std::fs::File;
use std::io::{self, Read};

use bytes::{Bytes, BytesMut};
use cobble_client::types::{Envelope, FileResult};
use tokio::sync::mpsc;

use super::error::not_absolute;
use super::multipart::MultipartWriter;
use super::{FileError, file_result, gopath};

/// How much of a file is read at a time; one chunk is one body frame.
const CHUNK: usize = 256 * 1024;

/// How many chunks may wait for the client: the memory a pull holds is about this many chunks.
const QUEUED_CHUNKS: usize = 8;

/// A multipart response being produced.
pub(crate) struct ReadStream {
    /// `multipart/form-data; boundary=...`.
    pub content_type: String,
    /// The body, chunk by chunk; it ends when the producer is done (or gave up on an error
    /// the client cannot be told about any more).
    pub chunks: mpsc::Receiver<io::Result<Bytes>>,
}

/// Starts reading `paths` on the blocking pool. Each readable regular file becomes a `files`
/// part named by its path as given; the last part, `response`, is a sync envelope listing every
/// path with its error, if any. The status is 200 whatever happens, as in Pebble: the outcome
/// is only known once the files have been read.
pub(crate) fn read_files(paths: Vec<String>) -> ReadStream {
    let mut writer = MultipartWriter::new();
    let content_type = writer.content_type();
    let (tx, chunks) = mpsc::channel(QUEUED_CHUNKS);
    tokio::task::spawn_blocking(move || {
        let mut results = Vec::with_capacity(paths.len());
        for path in &paths {
            match read_one(path, &mut writer, &tx) {
                Ok(outcome) => results.push(file_result(path, outcome)),
                Err(ClientGone) => return,
            }
        }
        let _ = finish(&mut writer, results, &tx);
    });
    ReadStream {
        content_type,
        chunks,
    }
}

/// The client went away; nothing more can be sent.
struct ClientGone;

fn send(tx: &mpsc::Sender<io::Result<Bytes>>, bytes: Bytes) -> Result<(), ClientGone> {
    tx.blocking_send(Ok(bytes)).map_err(|_| ClientGone)
}

/// Reads one file into its part; the inner result is the path's own outcome.
fn read_one(
    path: &str,
    writer: &mut MultipartWriter,
    tx: &mpsc::Sender<io::Result<Bytes>>,
) -> Result<Result<(), FileError>, ClientGone> {
    let mut file = match open_regular(path) {
        Ok(file) => file,
        Err(e) => return Ok(Err(e)),
    };
    send(tx, writer.form_file("files", path))?;
    // One buffer, reused: once a chunk has been sent, `reserve` reclaims its memory, which
    // spares a fresh allocation (and its page faults) per chunk.
    let mut buf = BytesMut::new();
    loop {
        buf.reserve(CHUNK);
        buf.resize(CHUNK, 0);
        match read_full(&mut file, &mut buf) {
            Ok(0) => return Ok(Ok(())),
            Ok(n) => {
                buf.truncate(n);
                send(tx, buf.split().freeze())?;
            }
            // The part is already started; like Pebble, the error goes into the response part.
            Err(e) => return Ok(Err(FileError::path("read", path, e))),
        }
    }
}

/// Reads until `buf` is full or the file ends; returns how much was read.
fn read_full(file: &mut File, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match file.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

/// Pebble's checks before reading: absolute, exists (following symlinks), a regular file.
fn open_regular(path: &str) -> Result<File, FileError> {
    if !gopath::is_abs(path) {
        return Err(not_absolute(path));
    }
    let metadata = std::fs::metadata(path).map_err(|e| FileError::path("stat", path, e))?;
    if !metadata.is_file() {
        return Err(FileError::Generic(format!(
            "can only read a regular file: {}",
            cobble_plan::go_quote(path)
        )));
    }
    File::open(path).map_err(|e| FileError::path("open", path, e))
}

/// The `response` part (Go's JSON encoder adds a newline) and the closing boundary.
fn finish(
    writer: &mut MultipartWriter,
    results: Vec<FileResult>,
    tx: &mpsc::Sender<io::Result<Bytes>>,
) -> Result<(), ClientGone> {
    let envelope = Envelope {
        kind: "sync".into(),
        status_code: 200,
        status: "OK".into(),
        change: None,
        result: results,
        // A file read's answer is Pebble's own multipart writer, which carries no warnings.
        latest_warning: None,
    };
    let mut json = serde_json::to_vec(&envelope).expect("results serialise");
    json.push(b'\n');
    send(
        tx,
        writer.part(&[
            ("Content-Type", "application/json"),
            ("Content-Disposition", "form-data; name=\"response\""),
        ]),
    )?;
    send(tx, Bytes::from(json))?;
    send(tx, writer.close())
}
