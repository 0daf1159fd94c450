//! The multipart reader behind `POST /v1/files`, fed bodies built from the input.
//!
//! The `request` (metadata) part is always one this target writes, naming files inside a
//! fresh temporary directory, so no input can make the reader write anywhere else; what
//! follows it (file parts, their headers and contents, the boundaries, the chunking, the end)
//! is generated and then possibly damaged byte by byte.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use arbitrary::Unstructured;
use bytes::Bytes;
use cobble_client::types::FileResult;
use futures_util::stream::{self, Stream, StreamExt};

/// What the reader may read after the closing boundary (`DRAIN_BYTES` in the reader), and
/// the metadata limit (`MAX_METADATA`): the limits this target holds it to.
const DRAIN_LIMIT: usize = 256 * 1024;
const METADATA_LIMIT: usize = 4 * 1024 * 1024;

/// What the reader may take beyond those limits as read-ahead.
const READ_AHEAD_LIMIT: usize = 1024 * 1024;

/// Size of each chunk of an endless tail.
const JUNK_CHUNK: usize = 16 * 1024;

/// A reader that takes longer than this on an in-memory body is hung.
const HANG: Duration = Duration::from_secs(20);

fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime")
    })
}

/// Where inputs write: one directory per process, in memory when `/dev/shm` exists.
fn scratch() -> &'static Path {
    static SCRATCH: OnceLock<tempfile::TempDir> = OnceLock::new();
    SCRATCH
        .get_or_init(|| {
            let shm = Path::new("/dev/shm");
            let mut builder = tempfile::Builder::new();
            builder.prefix("cobble-fuzz-multipart.");
            if shm.is_dir() {
                builder.tempdir_in(shm)
            } else {
                builder.tempdir()
            }
            .expect("a scratch directory")
        })
        .path()
}

/// One planned file of a push.
struct Planned {
    path: String,
    content: Vec<u8>,
    make_dirs: bool,
    permissions: &'static str,
}

/// How the body ends.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Tail {
    /// The body ends where it ends.
    Finite,
    /// After the closing boundary, junk that never ends: the reader must stop reading.
    Endless,
    /// The metadata part never ends: refused once over its limit.
    EndlessMetadata,
}

/// The multipart reader: never hangs, never reads past its limits (the metadata limit, and a
/// bounded drain after the closing boundary), leaves no temporary file behind whatever the
/// body, and on an intact body writes every file with exactly its part's content.
pub fn multipart(u: &mut Unstructured<'_>) -> arbitrary::Result<()> {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    let dir = scratch().join(COUNTER.fetch_add(1, Ordering::Relaxed).to_string());
    std::fs::create_dir(&dir).expect("an input directory");
    let outcome = run(u, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    outcome
}

fn run(u: &mut Unstructured<'_>, dir: &Path) -> arbitrary::Result<()> {
    let boundary = gen_boundary(u)?;
    let mut planned = Vec::new();
    for i in 0..u.int_in_range(0..=3)? {
        let (path, make_dirs) = match u.int_in_range(0..=9)? {
            0 => (format!("{}/sub/deeper/f{i}", dir.display()), true),
            1 => (format!("{}/missing/f{i}", dir.display()), false),
            2 => ("relative/f".to_owned(), false),
            3 => (dir.display().to_string(), false),
            _ => (format!("{}/f{i}", dir.display()), false),
        };
        let len = u.int_in_range(0..=4096)?;
        let content = u.bytes(len.min(u.len()))?.to_vec();
        let permissions = *u.choose(&["", "644", "0600", "755", "999", "abc", "1777"])?;
        planned.push(Planned {
            path,
            content,
            make_dirs,
            permissions,
        });
    }
    let action = if u.ratio(1, 20)? { "read" } else { "write" };
    let files: Vec<_> = planned
        .iter()
        .map(|p| {
            serde_json::json!({
                "path": p.path,
                "make-dirs": p.make_dirs,
                "permissions": p.permissions,
            })
        })
        .collect();
    let metadata = serde_json::json!({"action": action, "files": files}).to_string();

    let tail = match u.int_in_range(0..=15)? {
        0 => Tail::EndlessMetadata,
        1..=3 => Tail::Endless,
        _ => Tail::Finite,
    };

    let mut head = Vec::new();
    if u.ratio(1, 8)? {
        head.extend_from_slice(b"preamble text\r\n");
    }
    head.extend_from_slice(format!("--{boundary}\r\n").as_bytes());
    head.extend_from_slice(b"Content-Disposition: form-data; name=\"request\"\r\n\r\n");
    if tail == Tail::EndlessMetadata {
        let consumed = read(head, &boundary, true, u)?.1;
        assert!(
            // The refusal is answered after a bounded drain, like any early answer.
            consumed <= METADATA_LIMIT + DRAIN_LIMIT + READ_AHEAD_LIMIT + 4096,
            "read {consumed} bytes of a metadata part that never ends"
        );
        return Ok(());
    }
    head.extend_from_slice(metadata.as_bytes());
    let metadata_end = head.len();

    // The file parts, in order or shuffled, some left out, some twice.
    let mut order: Vec<usize> = (0..planned.len()).collect();
    if u.ratio(1, 6)? && !order.is_empty() {
        let i = u.choose_index(order.len())?;
        order.remove(i);
    }
    if u.ratio(1, 6)? && order.len() > 1 {
        order.swap(0, 1);
    }
    if u.ratio(1, 10)? && !order.is_empty() {
        order.push(order[0]);
    }
    let mut body = head;
    let mut misnamed = false;
    for &i in &order {
        let p = &planned[i];
        body.extend_from_slice(format!("\r\n--{boundary}\r\n").as_bytes());
        let name = if u.ratio(1, 30)? {
            misnamed = true;
            "other"
        } else {
            "files"
        };
        body.extend_from_slice(
            format!(
                "Content-Disposition: form-data; name=\"{name}\"; filename=\"{}\"\r\n",
                p.path
            )
            .as_bytes(),
        );
        // Header lines around and past the 32 multer parses alone.
        if u.ratio(1, 8)? {
            for j in 0..u.int_in_range(1..=40)? {
                body.extend_from_slice(format!("X-Extra-{j}: v\r\n").as_bytes());
            }
        }
        if u.arbitrary()? {
            body.extend_from_slice(b"Content-Type: application/octet-stream\r\n");
        }
        body.extend_from_slice(b"\r\n");
        body.extend_from_slice(&p.content);
    }
    let closed = tail == Tail::Endless || !u.ratio(1, 10)?;
    if closed {
        body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    }
    if tail == Tail::Finite && u.ratio(1, 8)? {
        let len = u.int_in_range(0..=300_000)?;
        body.resize(body.len() + len, b'x');
    }

    // Damage after the metadata: flipped, inserted and removed bytes.
    let mut damaged = false;
    if tail == Tail::Finite && u.ratio(1, 3)? {
        for _ in 0..u.int_in_range(1..=8)? {
            if body.len() <= metadata_end {
                break;
            }
            let at = u.int_in_range(metadata_end..=body.len() - 1)?;
            match u.int_in_range(0..=2)? {
                0 => body[at] = u.arbitrary()?,
                1 => body.insert(at, u.arbitrary()?),
                _ => {
                    body.remove(at);
                }
            }
            damaged = true;
        }
    }

    let body_len = body.len();
    let (outcome, consumed) = read(body, &boundary, tail == Tail::Endless, u)?;
    if tail == Tail::Endless {
        assert!(
            // The drain stops on the chunk that crosses its limit. Before it, multer reads
            // ahead past the closing boundary, one chunk per poll, and how many polls that
            // takes depends on timing (5 chunks on a loaded machine, up to 26 on an idle
            // one): bounded, not exact. What must never happen is reading on for as long
            // as the client sends.
            consumed <= body_len + DRAIN_LIMIT + READ_AHEAD_LIMIT,
            "read {consumed} bytes of a {body_len}-byte body followed by junk"
        );
    }

    // Nothing but the named files (and the directories made for them) is left.
    let named: Vec<PathBuf> = planned.iter().map(|p| PathBuf::from(&p.path)).collect();
    for entry in walk(dir) {
        let is_dir = entry.is_dir();
        let expected = named
            .iter()
            .any(|n| n == &entry || (is_dir && n.starts_with(&entry)));
        assert!(expected, "left behind: {}", entry.display());
    }

    // On an intact body, each file holds exactly its part's content, or is absent with an
    // error that says why.
    let intact = !damaged && !misnamed && closed && action == "write" && !planned.is_empty();
    let unique = {
        let mut seen = order.clone();
        seen.sort_unstable();
        seen.dedup();
        seen.len() == order.len() && seen.len() == planned.len()
    };
    if intact && unique && !order.is_empty() {
        let results = outcome.unwrap_or_else(|e| panic!("an intact body was refused: {e}"));
        assert_eq!(results.len(), planned.len());
        let by_path: BTreeMap<&str, &FileResult> =
            results.iter().map(|r| (r.path.as_str(), r)).collect();
        for p in &planned {
            let result = by_path[p.path.as_str()];
            match &result.error {
                None => {
                    let written = std::fs::read(&p.path).expect("a pushed file");
                    assert!(written == p.content, "{} differs from its part", p.path);
                }
                Some(error) => {
                    let path = Path::new(&p.path);
                    if path.is_file() {
                        panic!("{} failed ({}) but was written", p.path, error.message);
                    }
                }
            }
        }
    }
    Ok(())
}

/// A boundary: usually valid (1 to 70 characters of RFC 2046's set), sometimes not.
fn gen_boundary(u: &mut Unstructured<'_>) -> arbitrary::Result<String> {
    const BCHARS: &[u8] =
        b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ'()+_,-./:=? ";
    let len = u.int_in_range(1..=70)?;
    let mut out = String::new();
    for _ in 0..len {
        out.push(char::from(*u.choose(BCHARS)?));
    }
    // A boundary may not end in a space.
    let mut out = out.trim_end().to_owned();
    if out.is_empty() {
        out.push('b');
    }
    Ok(out)
}

/// Feeds `body` (in generated chunks, then endless junk if asked) to the reader; returns its
/// outcome and how many bytes it pulled.
fn read(
    body: Vec<u8>,
    boundary: &str,
    endless: bool,
    u: &mut Unstructured<'_>,
) -> arbitrary::Result<(Result<Vec<FileResult>, String>, usize)> {
    let mut chunks = Vec::new();
    let mut rest = Bytes::from(body);
    while !rest.is_empty() {
        let size = if u.ratio(1, 4)? {
            u.int_in_range(1..=64)?
        } else {
            u.int_in_range(1..=65536)?
        };
        chunks.push(rest.split_to(size.min(rest.len())));
    }
    let junk = Bytes::from(vec![b'x'; JUNK_CHUNK]);
    let tail: std::pin::Pin<Box<dyn Stream<Item = Bytes> + Send>> = if endless {
        Box::pin(stream::repeat(junk))
    } else {
        Box::pin(stream::empty())
    };
    // Like a request body from a socket, the body arrives through a one-chunk channel filled
    // by a sender polled alongside the reader (as hyper's connection task fills a request's
    // body): a chunk becomes ready only between two polls of the reader, never when the
    // reader polls again within one poll. (multer reads for as long as its stream is ready,
    // so a body that is always ready is never parsed; and multer refuses a body that turns
    // ready, to its end, on such an immediate second poll while it looks for the first
    // boundary, which no connection does.)
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Bytes>(1);
    let send = async move {
        let mut source = stream::iter(chunks).chain(tail);
        while let Some(chunk) = source.next().await {
            if tx.send(chunk).await.is_err() {
                break; // The reader is done with the body.
            }
        }
    };
    let consumed = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = consumed.clone();
    let body = stream::poll_fn(move |cx| rx.poll_recv(cx)).map(move |chunk| {
        counted.fetch_add(chunk.len(), Ordering::Relaxed);
        Ok::<_, std::io::Error>(chunk)
    });
    let reader = cobble_daemon::write_multipart(body, boundary, None, |_| {});
    let outcome = crate::watchdog::guard("the multipart reader", HANG, || {
        runtime().block_on(async { futures_util::future::join(reader, send).await.0 })
    });
    Ok((outcome, consumed.load(Ordering::Relaxed)))
}

/// Every path under `dir` (not `dir` itself).
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path.clone());
            }
            out.push(path);
        }
    }
    out
}
