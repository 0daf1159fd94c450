//! Exec's websockets, framed by the daemon itself.
//!
//! # Theory of operation
//!
//! [`handshake`] checks a websocket request and takes its upgrade; the HTTP layer answers
//! with [`switching_protocols`], and once hyper hands over the connection [`Socket::new`]
//! splits it into a [`Reader`] and a [`Writer`] that can be used from different tasks.
//!
//! The framing is RFC 6455's, with [`cobble_client::wire`] for the headers and masks. It
//! is done here, not by a websocket library, for the bytes' sake:
//!
//! - Output goes out without being copied through this process: on the unix socket,
//!   [`Writer::splice`] writes a frame header and then moves the payload from the command's
//!   pipe to the socket inside the kernel. TLS connections (`--https`) and terminals take a
//!   read and a write. (Plain `--http` never carries exec: it grants no more than metrics.)
//! - Input is unmasked where it was read: [`Reader::next`] hands out pieces of a binary
//!   message as they arrive, in the connection's own read buffer, which is never zeroed.
//!
//! The reader answers pings, and answers a close frame with a close, from tasks of their own
//! so that a reader can be dropped at any await (it is cancel-safe). Every frame the daemon
//! sends goes through the one [`Writer`], a frame at a time, and a frame cut short ends the
//! websocket. A client's frames must be masked, and a protocol error closes the websocket
//! with the RFC's status code. The reader reports how the websocket ended: after a close
//! frame, or *abnormally* (the connection dropped or broke the protocol), which on `control`
//! kills the command.

use std::io;
use std::sync::Arc;

use axum::http::{HeaderMap, HeaderValue, Method, Request, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::{Buf, Bytes, BytesMut};
use cobble_client::wire::{self, Header, MAX_HEADER, Opcode};
use hyper::upgrade::{OnUpgrade, Upgraded};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, Interest};
use tokio::net::unix::pipe;
use tokio::net::{UnixStream, unix};

/// Close status codes (RFC 6455, section 7.4.1).
pub(crate) mod close_code {
    pub(crate) const NORMAL: u16 = 1000;
    pub(crate) const PROTOCOL: u16 = 1002;
    pub(crate) const INVALID_DATA: u16 = 1007;
    pub(crate) const TOO_BIG: u16 = 1009;
}

/// The longest text message the daemon takes (exec's commands are a few dozen bytes).
const MAX_TEXT: usize = 64 * 1024;
/// Payloads up to this size go out in one write with their header.
const COALESCE: usize = 4 * 1024;

/// Checks that `request` asks for a websocket, and takes its upgrade with the client's
/// `Sec-WebSocket-Key`; a refusal gives the reason in gorilla/websocket's words.
pub(crate) fn handshake<B>(request: &mut Request<B>) -> Result<(HeaderValue, OnUpgrade), String> {
    const NOT_WEBSOCKET: &str = "websocket: the client is not using the websocket protocol: ";
    let headers = request.headers();
    if !has_token(headers, header::CONNECTION, "upgrade") {
        return Err(format!(
            "{NOT_WEBSOCKET}'upgrade' token not found in 'Connection' header"
        ));
    }
    if !has_token(headers, header::UPGRADE, "websocket") {
        return Err(format!(
            "{NOT_WEBSOCKET}'websocket' token not found in 'Upgrade' header"
        ));
    }
    if request.method() != Method::GET {
        return Err(format!("{NOT_WEBSOCKET}request method is not GET"));
    }
    if !has_token(headers, header::SEC_WEBSOCKET_VERSION, "13") {
        return Err(
            "websocket: unsupported version: 13 not found in 'Sec-Websocket-Version' header".into(),
        );
    }
    let key = headers
        .get(header::SEC_WEBSOCKET_KEY)
        .filter(|key| !key.is_empty())
        .cloned()
        .ok_or_else(|| {
            "websocket: not a websocket handshake: 'Sec-WebSocket-Key' header is missing or blank"
                .to_owned()
        })?;
    let upgrade = request
        .extensions_mut()
        .remove::<OnUpgrade>()
        .ok_or_else(|| "websocket: the connection cannot be upgraded".to_owned())?;
    Ok((key, upgrade))
}

/// Whether a comma-separated header holds `token` (case aside).
fn has_token(headers: &HeaderMap, name: header::HeaderName, token: &str) -> bool {
    headers
        .get_all(name)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case(token))
}

/// The answer that completes a handshake for the client's `Sec-WebSocket-Key`.
pub(crate) fn switching_protocols(key: &HeaderValue) -> Response {
    let accept = accept_key(key.as_bytes());
    (
        StatusCode::SWITCHING_PROTOCOLS,
        [
            (header::CONNECTION, "Upgrade".to_owned()),
            (header::UPGRADE, "websocket".to_owned()),
            (header::SEC_WEBSOCKET_ACCEPT, accept),
        ],
    )
        .into_response()
}

/// The `Sec-WebSocket-Accept` value for a client's key (RFC 6455, section 4.2.2): the
/// base64 of the SHA-1 of the key and the protocol's GUID. SHA-1 here proves only that the
/// server speaks websocket, so the legacy digest is what the protocol asks for.
fn accept_key(key: &[u8]) -> String {
    use base64::Engine as _;
    const GUID: &[u8] = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
    let mut context = ring::digest::Context::new(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY);
    context.update(key);
    context.update(GUID);
    base64::engine::general_purpose::STANDARD.encode(context.finish())
}

/// An upgraded connection, as its two halves.
pub(crate) struct Socket {
    pub reader: Reader,
    pub writer: Writer,
}

/// The connection a websocket upgrade took over, as the HTTP server hands it on.
pub(crate) enum Connection {
    /// The unix socket itself (which the relay splices on), and the bytes the server had
    /// read ahead of the upgrade.
    Unix {
        stream: UnixStream,
        read_ahead: Bytes,
    },
    /// Any other connection (TLS).
    Other(Upgraded),
}

impl Socket {
    /// Takes over an upgraded connection; `read_chunk` is how much the reader asks of it at
    /// a time.
    pub(crate) fn new(connection: Connection, read_chunk: usize) -> Socket {
        let (read, write, pending) = match connection {
            Connection::Unix { stream, read_ahead } => {
                let (read, write) = stream.into_split();
                (ReadIo::Unix(read), WriteIo::Unix(write), read_ahead)
            }
            Connection::Other(upgraded) => {
                let (read, write) = tokio::io::split(TokioIo::new(upgraded));
                (
                    ReadIo::Other(Box::new(read)),
                    WriteIo::Other(Box::new(write)),
                    Bytes::new(),
                )
            }
        };
        Socket::from_halves(read, write, &pending, read_chunk)
    }

    fn from_halves(read: ReadIo, write: WriteIo, pending: &[u8], read_chunk: usize) -> Socket {
        let writer = Writer {
            side: Arc::new(tokio::sync::Mutex::new(WriteSide {
                io: write,
                closed: false,
            })),
            splices: !matches!(read, ReadIo::Other(_)),
        };
        let mut buf = BytesMut::with_capacity(pending.len());
        buf.extend_from_slice(pending);
        Socket {
            reader: Reader {
                io: read,
                buf,
                chunk: read_chunk,
                consumed: 0,
                frame: None,
                message: None,
                text: Vec::new(),
                control: Vec::new(),
                ended: None,
                writer: writer.clone(),
            },
            writer,
        }
    }
}

/// A connection's receiving half: the unix socket's, or any other's (TLS).
enum ReadIo {
    Unix(unix::OwnedReadHalf),
    Other(Box<dyn AsyncRead + Send + Unpin>),
}

/// A connection's sending half: the unix socket's, which can take spliced bytes, or any
/// other's.
enum WriteIo {
    Unix(unix::OwnedWriteHalf),
    Other(Box<dyn AsyncWrite + Send + Unpin>),
}

impl WriteIo {
    async fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        match self {
            WriteIo::Unix(io) => io.write_all(bytes).await,
            WriteIo::Other(io) => {
                io.write_all(bytes).await?;
                // TLS holds bytes back until flushed.
                io.flush().await
            }
        }
    }

    async fn shutdown(&mut self) -> io::Result<()> {
        match self {
            WriteIo::Unix(io) => io.shutdown().await,
            WriteIo::Other(io) => io.shutdown().await,
        }
    }
}

/// The sending half: whole frames, one at a time. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Writer {
    side: Arc<tokio::sync::Mutex<WriteSide>>,
    /// Whether the connection is the unix socket, which [`Writer::splice`] can fill.
    splices: bool,
}

struct WriteSide {
    io: WriteIo,
    /// A close frame has gone out: nothing may follow it.
    closed: bool,
}

fn closed() -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, "websocket closed")
}

impl Writer {
    /// Sends a binary frame.
    pub(crate) async fn binary(&self, payload: &[u8]) -> io::Result<()> {
        self.frame(Opcode::Binary, payload).await
    }

    /// Sends a text frame.
    pub(crate) async fn text(&self, text: &str) -> io::Result<()> {
        self.frame(Opcode::Text, text.as_bytes()).await
    }

    /// Sends a close frame with `code` (unless one went out already) and ends the sending
    /// direction of the connection.
    pub(crate) async fn close(&self, code: u16) -> io::Result<()> {
        let mut side = self.side.lock().await;
        if side.closed {
            return Ok(());
        }
        side.closed = true;
        let mut frame = [0u8; MAX_HEADER + 2];
        let used = Header::server(Opcode::Close, 2)
            .encode((&mut frame[..MAX_HEADER]).try_into().expect("header room"));
        frame[used..used + 2].copy_from_slice(&code.to_be_bytes());
        side.io.write_all(&frame[..used + 2]).await?;
        side.io.shutdown().await
    }

    async fn frame(&self, opcode: Opcode, payload: &[u8]) -> io::Result<()> {
        let mut side = self.side.lock().await;
        if side.closed {
            return Err(closed());
        }
        // Until the frame is whole: one cut short (its future dropped) ends the websocket,
        // since nothing after it could be read as frames.
        side.closed = true;
        let mut header = [0u8; MAX_HEADER];
        let used = Header::server(opcode, payload.len()).encode(&mut header);
        if payload.len() <= COALESCE {
            let mut frame = [0u8; MAX_HEADER + COALESCE];
            frame[..used].copy_from_slice(&header[..used]);
            frame[used..used + payload.len()].copy_from_slice(payload);
            side.io.write_all(&frame[..used + payload.len()]).await?;
        } else {
            side.io.write_all(&header[..used]).await?;
            side.io.write_all(payload).await?;
        }
        side.closed = false;
        Ok(())
    }

    /// Whether [`Writer::splice`] works on this connection.
    pub(crate) fn splices(&self) -> bool {
        self.splices
    }

    /// Sends the next `len` bytes of `pipe` as a binary frame, moved from the pipe to the
    /// socket by the kernel. The caller must be the pipe's only reader and know that `len`
    /// bytes wait in it ([`cobble_sys::pipe::pending_bytes`]): the header promises them.
    pub(crate) async fn splice(&self, pipe: &pipe::Receiver, len: usize) -> io::Result<()> {
        if !self.splices {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "this connection cannot take spliced bytes",
            ));
        }
        let mut side = self.side.lock().await;
        if side.closed {
            return Err(closed());
        }
        side.closed = true;
        let mut header = [0u8; MAX_HEADER];
        let used = Header::server(Opcode::Binary, len).encode(&mut header);
        side.io.write_all(&header[..used]).await?;
        let mut left = len;
        while left > 0 {
            let moved = match &side.io {
                WriteIo::Unix(io) => splice_some(io.as_ref(), pipe, left).await?,
                WriteIo::Other(_) => unreachable!("checked above: the unix socket only"),
            };
            if moved == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the pipe ended before the bytes it held were sent",
                ));
            }
            left -= moved;
        }
        side.closed = false;
        Ok(())
    }
}

/// How long an answer to a ping or a close may take to go out.
const REPLY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Sends an answer from a task of its own, so that the reader can be dropped at any await
/// without cutting a frame short.
fn reply(send: impl Future<Output = io::Result<()>> + Send + 'static) {
    tokio::spawn(async move {
        let _ = tokio::time::timeout(REPLY_TIMEOUT, send).await;
    });
}

/// Moves up to `len` bytes from `pipe` to `socket` once the socket takes some.
async fn splice_some(socket: &UnixStream, pipe: &pipe::Receiver, len: usize) -> io::Result<usize> {
    loop {
        socket.writable().await?;
        match socket.try_io(Interest::WRITABLE, || {
            cobble_sys::pipe::splice(pipe, socket, len)
        }) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            moved => return moved,
        }
    }
}

/// What the reader found next.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Event<'a> {
    /// A piece of a binary message, unmasked; `last` when it ends the message.
    Data { bytes: &'a [u8], last: bool },
    /// A whole text message.
    Text(String),
    /// The websocket is over: after a close frame, or `abnormal`ly (the connection dropped
    /// or the client broke the protocol).
    Closed { abnormal: bool },
}

/// The frame being read.
struct Frame {
    opcode: Opcode,
    fin: bool,
    key: [u8; 4],
    /// Payload bytes unmasked so far, and still to come.
    offset: u64,
    left: u64,
}

/// The receiving half.
pub(crate) struct Reader {
    io: ReadIo,
    /// Read from the connection, not yet handed out; starts with what hyper read past the
    /// handshake.
    buf: BytesMut,
    chunk: usize,
    /// Bytes at the front of `buf` that the last [`Event::Data`] lent out.
    consumed: usize,
    frame: Option<Frame>,
    /// The data message in progress (text or binary), which continuation frames continue.
    message: Option<Opcode>,
    text: Vec<u8>,
    control: Vec<u8>,
    /// How the websocket ended, once it has.
    ended: Option<bool>,
    writer: Writer,
}

impl Reader {
    /// The next thing the client sent. Once [`Event::Closed`] has come, it comes again.
    pub(crate) async fn next(&mut self) -> Event<'_> {
        self.buf.advance(std::mem::take(&mut self.consumed));
        if let Some(abnormal) = self.ended {
            return Event::Closed { abnormal };
        }
        loop {
            let Some(left) = self.frame.as_ref().map(|frame| frame.left) else {
                match Header::parse(&self.buf) {
                    Ok(Some((header, used))) => {
                        self.buf.advance(used);
                        if let Err(code) = self.begin(header) {
                            return self.fail(code);
                        }
                    }
                    Ok(None) => {
                        if !self.fill().await {
                            return self.end(true);
                        }
                    }
                    Err(_) => return self.fail(close_code::PROTOCOL),
                }
                continue;
            };
            if left > 0 && self.buf.is_empty() {
                if !self.fill().await {
                    return self.end(true);
                }
                continue;
            }
            let frame = self.frame.as_mut().expect("a frame in progress");
            let n = self
                .buf
                .len()
                .min(usize::try_from(frame.left).unwrap_or(usize::MAX));
            wire::apply_mask(&mut self.buf[..n], frame.key, frame.offset);
            frame.offset += n as u64;
            frame.left -= n as u64;
            let (opcode, fin, done) = (frame.opcode, frame.fin, frame.left == 0);
            if done {
                self.frame = None;
                if fin && !opcode.is_control() {
                    self.message = None;
                }
            }
            match opcode {
                Opcode::Binary => {
                    self.consumed = n;
                    return Event::Data {
                        bytes: &self.buf[..n],
                        last: done && fin,
                    };
                }
                Opcode::Text => {
                    if self.text.len() + n > MAX_TEXT {
                        return self.fail(close_code::TOO_BIG);
                    }
                    self.text.extend_from_slice(&self.buf[..n]);
                    self.buf.advance(n);
                    if done && fin {
                        match String::from_utf8(std::mem::take(&mut self.text)) {
                            Ok(text) => return Event::Text(text),
                            Err(_) => return self.fail(close_code::INVALID_DATA),
                        }
                    }
                }
                Opcode::Close | Opcode::Ping | Opcode::Pong => {
                    self.control.extend_from_slice(&self.buf[..n]);
                    self.buf.advance(n);
                    if done && let Some(event) = self.control_frame(opcode) {
                        return event;
                    }
                }
                Opcode::Continuation => unreachable!("continuations take their message's opcode"),
            }
        }
    }

    /// Starts reading a frame; the close code if the client may not send it.
    fn begin(&mut self, header: Header) -> Result<(), u16> {
        let key = header.mask.ok_or(close_code::PROTOCOL)?;
        let opcode = match header.opcode {
            Opcode::Continuation => self.message.ok_or(close_code::PROTOCOL)?,
            Opcode::Text | Opcode::Binary if self.message.is_some() => {
                return Err(close_code::PROTOCOL);
            }
            opcode @ (Opcode::Text | Opcode::Binary) => {
                self.message = Some(opcode);
                opcode
            }
            control => {
                self.control.clear();
                control
            }
        };
        self.frame = Some(Frame {
            opcode,
            fin: header.fin,
            key,
            offset: 0,
            left: header.len,
        });
        Ok(())
    }

    /// Acts on a whole control frame: answers a ping, and a close with a close.
    fn control_frame(&mut self, opcode: Opcode) -> Option<Event<'static>> {
        match opcode {
            Opcode::Ping => {
                let payload = std::mem::take(&mut self.control);
                let writer = self.writer.clone();
                reply(async move { writer.frame(Opcode::Pong, &payload).await });
                None
            }
            Opcode::Close => {
                // Echo the client's code; a close without one is answered with a plain close.
                let code = match *self.control {
                    [high, low, ..] => u16::from_be_bytes([high, low]),
                    _ => close_code::NORMAL,
                };
                let writer = self.writer.clone();
                reply(async move { writer.close(code).await });
                Some(self.end(false))
            }
            _ => None,
        }
    }

    /// Closes the websocket over a protocol error.
    fn fail(&mut self, code: u16) -> Event<'static> {
        let writer = self.writer.clone();
        reply(async move { writer.close(code).await });
        self.end(true)
    }

    fn end(&mut self, abnormal: bool) -> Event<'static> {
        self.ended = Some(abnormal);
        self.buf = BytesMut::new();
        Event::Closed { abnormal }
    }

    /// Reads more from the connection, into memory that is not zeroed first; false at its
    /// end or on an error.
    async fn fill(&mut self) -> bool {
        self.buf.reserve(self.chunk);
        let read = match &mut self.io {
            ReadIo::Unix(io) => io.read_buf(&mut self.buf).await,
            ReadIo::Other(io) => io.read_buf(&mut self.buf).await,
        };
        matches!(read, Ok(n) if n > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_accept_key_is_the_one_in_rfc_6455() {
        assert_eq!(
            accept_key(b"dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }

    const KEY: [u8; 4] = [0xA1, 0x5E, 0x07, 0x3C];

    /// A socket on one end of a unix socket pair, and the client's end.
    fn pair(read_chunk: usize) -> (Socket, UnixStream) {
        let (daemon, client) = UnixStream::pair().unwrap();
        let (read, write) = daemon.into_split();
        let socket = Socket::from_halves(ReadIo::Unix(read), WriteIo::Unix(write), &[], read_chunk);
        (socket, client)
    }

    /// A client's frame: masked.
    fn client_frame(fin: bool, opcode: Opcode, payload: &[u8]) -> Vec<u8> {
        let mut header = [0u8; MAX_HEADER];
        let used = Header {
            fin,
            opcode,
            mask: Some(KEY),
            len: payload.len() as u64,
        }
        .encode(&mut header);
        let mut frame = header[..used].to_vec();
        let mut masked = payload.to_vec();
        wire::apply_mask(&mut masked, KEY, 0);
        frame.extend_from_slice(&masked);
        frame
    }

    /// The next frame the daemon sent: its header and payload.
    async fn server_frame(client: &mut UnixStream) -> (Header, Vec<u8>) {
        let mut buf = Vec::new();
        loop {
            if let Some((header, used)) = Header::parse(&buf).unwrap() {
                let mut payload = buf[used..].to_vec();
                let len = header.len as usize;
                let mut byte = [0u8; 1];
                while payload.len() < len {
                    client.read_exact(&mut byte).await.unwrap();
                    payload.push(byte[0]);
                }
                assert_eq!(header.mask, None, "a server's frames are not masked");
                return (header, payload);
            }
            let mut byte = [0u8; 1];
            client.read_exact(&mut byte).await.unwrap();
            buf.push(byte[0]);
        }
    }

    #[tokio::test]
    async fn a_fragmented_text_message_is_whole_and_a_ping_between_its_fragments_is_answered() {
        let (mut socket, mut client) = pair(4096);
        let mut frames = client_frame(false, Opcode::Text, br#"{"comm"#);
        frames.extend(client_frame(true, Opcode::Ping, b"hi"));
        frames.extend(client_frame(true, Opcode::Continuation, br#"and":"end"}"#));
        client.write_all(&frames).await.unwrap();
        assert_eq!(
            socket.reader.next().await,
            Event::Text(r#"{"command":"end"}"#.into())
        );
        let (header, payload) = server_frame(&mut client).await;
        assert_eq!(
            (header.opcode, payload.as_slice()),
            (Opcode::Pong, &b"hi"[..])
        );
    }

    #[tokio::test]
    async fn binary_messages_arrive_unmasked_in_pieces_as_they_are_read() {
        let (mut socket, mut client) = pair(4096);
        let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        let mut frames = client_frame(false, Opcode::Binary, &data[..60_000]);
        frames.extend(client_frame(true, Opcode::Continuation, &data[60_000..]));
        frames.extend(client_frame(true, Opcode::Binary, b""));
        let writer = tokio::spawn(async move {
            client.write_all(&frames).await.unwrap();
            client
        });
        let mut got = Vec::new();
        let mut pieces = 0;
        loop {
            match socket.reader.next().await {
                Event::Data { bytes, last } => {
                    got.extend_from_slice(bytes);
                    pieces += 1;
                    if last {
                        break;
                    }
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(got, data);
        assert!(pieces > 2, "read in {pieces} pieces of at most a read each");
        // An empty message is a message too.
        assert_eq!(
            socket.reader.next().await,
            Event::Data {
                bytes: b"",
                last: true
            }
        );
        drop(writer.await.unwrap());
        assert_eq!(
            socket.reader.next().await,
            Event::Closed { abnormal: true },
            "the connection dropped without a close frame"
        );
    }

    #[tokio::test]
    async fn a_close_is_answered_with_its_code_and_ends_the_websocket_normally() {
        let (mut socket, mut client) = pair(4096);
        client
            .write_all(&client_frame(true, Opcode::Close, &4000u16.to_be_bytes()))
            .await
            .unwrap();
        assert_eq!(
            socket.reader.next().await,
            Event::Closed { abnormal: false }
        );
        assert_eq!(
            socket.reader.next().await,
            Event::Closed { abnormal: false }
        );
        let (header, payload) = server_frame(&mut client).await;
        assert_eq!(
            (header.opcode, payload),
            (Opcode::Close, 4000u16.to_be_bytes().to_vec())
        );
        // Nothing follows a close.
        let mut rest = Vec::new();
        client.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty());
        assert!(socket.writer.text("late").await.is_err());
    }

    #[tokio::test]
    async fn protocol_errors_close_the_websocket_with_the_rfcs_codes() {
        let mut unmasked = [0u8; MAX_HEADER];
        let used = Header::server(Opcode::Binary, 0).encode(&mut unmasked);
        let cases: [(Vec<u8>, u16); 4] = [
            (unmasked[..used].to_vec(), close_code::PROTOCOL),
            (
                client_frame(true, Opcode::Continuation, b"x"),
                close_code::PROTOCOL,
            ),
            (
                client_frame(true, Opcode::Text, &[0xFF, 0xFE]),
                close_code::INVALID_DATA,
            ),
            (
                client_frame(true, Opcode::Text, &vec![b'a'; MAX_TEXT + 1]),
                close_code::TOO_BIG,
            ),
        ];
        for (frame, code) in cases {
            let (mut socket, mut client) = pair(4096);
            let writer = tokio::spawn(async move {
                let _ = client.write_all(&frame).await;
                client
            });
            assert_eq!(socket.reader.next().await, Event::Closed { abnormal: true });
            let mut client = writer.await.unwrap();
            let (header, payload) = server_frame(&mut client).await;
            assert_eq!(
                (header.opcode, payload),
                (Opcode::Close, code.to_be_bytes().to_vec())
            );
        }
    }

    #[tokio::test]
    async fn spliced_output_arrives_whole_in_binary_frames() {
        let (socket, mut client) = pair(4096);
        assert!(socket.writer.splices());
        let (reader, mut writer) = io::pipe().unwrap();
        let output: Vec<u8> = (0..200_000u32).map(|i| (i % 253) as u8).collect();
        let feed = output.clone();
        let feeder = std::thread::spawn(move || {
            use std::io::Write;
            writer.write_all(&feed).unwrap();
        });
        let pipe = pipe::Receiver::from_owned_fd(reader.into()).unwrap();
        let mut got = Vec::new();
        let sender = socket.writer.clone();
        let reading = tokio::spawn(async move {
            let mut frames = Vec::new();
            while frames
                .iter()
                .map(|(_, p): &(Header, Vec<u8>)| p.len())
                .sum::<usize>()
                < 200_000
            {
                frames.push(server_frame(&mut client).await);
            }
            frames
        });
        let mut sent = 0;
        while sent < output.len() {
            pipe.readable().await.unwrap();
            let pending = cobble_sys::pipe::pending_bytes(&pipe).unwrap();
            if pending > 0 {
                sender.splice(&pipe, pending).await.unwrap();
                sent += pending;
            } else {
                // Readiness left from bytes already sent: clear it.
                let _ = pipe.try_io(|| Err::<(), _>(io::Error::from(io::ErrorKind::WouldBlock)));
            }
        }
        feeder.join().unwrap();
        for (header, payload) in reading.await.unwrap() {
            assert_eq!((header.fin, header.opcode), (true, Opcode::Binary));
            got.extend(payload);
        }
        assert_eq!(got, output);
    }

    #[test]
    fn handshakes_that_are_not_websockets_are_refused_in_gorillas_words() {
        let request = |connection: &str, version: &str, key: &str| {
            Request::builder()
                .uri("/v1/tasks/1/websocket/stdio")
                .header(header::CONNECTION, connection)
                .header(header::UPGRADE, "websocket")
                .header(header::SEC_WEBSOCKET_VERSION, version)
                .header(header::SEC_WEBSOCKET_KEY, key)
                .body(())
                .unwrap()
        };
        let refused = |mut request: Request<()>| handshake(&mut request).unwrap_err();
        assert_eq!(
            refused(request("keep-alive", "13", "k")),
            "websocket: the client is not using the websocket protocol: 'upgrade' token not found in 'Connection' header"
        );
        assert!(refused(request("keep-alive, Upgrade", "8", "k")).contains("unsupported version"));
        assert!(refused(request("Upgrade", "13", "")).contains("'Sec-WebSocket-Key'"));
        // Everything in order, but no connection to take over (as a request made up here).
        assert_eq!(
            refused(request("Upgrade", "13", "dGhlIHNhbXBsZSBub25jZQ==")),
            "websocket: the connection cannot be upgraded"
        );
        let response = switching_protocols(&HeaderValue::from_static("dGhlIHNhbXBsZSBub25jZQ=="));
        assert_eq!(response.status(), StatusCode::SWITCHING_PROTOCOLS);
        // The RFC's own example.
        assert_eq!(
            response.headers()[header::SEC_WEBSOCKET_ACCEPT],
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }

    #[tokio::test]
    async fn connections_that_cannot_splice_carry_frames_both_ways() {
        let (daemon, mut client) = tokio::io::duplex(1 << 16);
        let (read, write) = tokio::io::split(daemon);
        let mut socket = Socket::from_halves(
            ReadIo::Other(Box::new(read)),
            WriteIo::Other(Box::new(write)),
            &[],
            4096,
        );
        assert!(!socket.writer.splices());
        let (pipe_reader, _pipe_writer) = io::pipe().unwrap();
        let pipe = pipe::Receiver::from_owned_fd(pipe_reader.into()).unwrap();
        let refused = socket.writer.splice(&pipe, 1).await.unwrap_err();
        assert_eq!(refused.kind(), io::ErrorKind::Unsupported);

        let output = vec![b'o'; 10_000];
        socket.writer.binary(&output).await.unwrap();
        socket.writer.text("end").await.unwrap();
        let mut frames = client_frame(true, Opcode::Binary, b"input");
        frames.extend(client_frame(
            true,
            Opcode::Close,
            &close_code::NORMAL.to_be_bytes(),
        ));
        client.write_all(&frames).await.unwrap();
        assert_eq!(
            socket.reader.next().await,
            Event::Data {
                bytes: b"input",
                last: true
            }
        );
        assert_eq!(
            socket.reader.next().await,
            Event::Closed { abnormal: false }
        );
        let mut wire = Vec::new();
        client.read_to_end(&mut wire).await.unwrap();
        let mut at = 0;
        let mut seen = Vec::new();
        while at < wire.len() {
            let (header, used) = Header::parse(&wire[at..]).unwrap().unwrap();
            seen.push((header.opcode, header.len));
            at += used + header.len as usize;
        }
        assert_eq!(
            seen,
            [
                (Opcode::Binary, 10_000),
                (Opcode::Text, 3),
                (Opcode::Close, 2)
            ]
        );
    }
}
