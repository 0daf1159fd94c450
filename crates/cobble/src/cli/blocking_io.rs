//! Plain files behind tokio's IO traits, read and written in place.
//!
//! `tokio::fs::File` sends every read and write to the blocking pool and copies through its
//! own buffer. The CLI's runtime runs one command and nothing else, so blocking it for the
//! duration of a page-cache read or write costs nothing, and skipping the hand-off and the
//! copy makes `push` and `pull` of large files markedly faster.

use std::io::{Read, Write};
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// An [`AsyncRead`] that reads from `R` synchronously.
pub(super) struct BlockingReader<R>(pub R);

impl<R: Read + Unpin> AsyncRead for BlockingReader<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let n = self.0.read(buf.initialize_unfilled())?;
        buf.advance(n);
        Poll::Ready(Ok(()))
    }
}

/// An [`AsyncWrite`] that writes to `W` synchronously.
pub(super) struct BlockingWriter<W>(pub W);

impl<W: Write + Unpin> AsyncWrite for BlockingWriter<W> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Poll::Ready(self.0.write(buf))
    }

    fn poll_flush(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(self.0.flush())
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.poll_flush(cx)
    }
}
