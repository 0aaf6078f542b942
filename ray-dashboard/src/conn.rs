//! One accepted connection before and beneath hyper: its request head
//! bounded and timed, and its writes timed.
//!
//! hyper parses the request; this module only makes sure it never buffers
//! more than [`MAX_HEAD_BYTES`] of head (hyper would answer an over-long
//! head with 431 or 414, where this server has always answered 400) and
//! that a client that stops reading cannot hold a connection forever.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{sleep, timeout, Sleep};

/// The longest request head read (request line and headers).
pub(crate) const MAX_HEAD_BYTES: usize = 64 * 1024;

/// How long a client may take to send its request head, and then each
/// part of its body.
pub(crate) const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// How long one write may wait for the client to read before the
/// connection is dropped (a browser tab that stopped reading its events).
pub(crate) const WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// The most of a refused request read (and dropped) before closing, so
/// that the answer reaches the client rather than a reset for unread data.
pub(crate) const DISCARD_BYTES: usize = 256 * 1024;

/// A whole plain-text response, for the two answers written without
/// hyper: a bad head (hyper never sees it) and a connection over the cap
/// (hyper is not started for it).
pub(crate) fn plain_response(status: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nCache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Reads `stream` until its request head is whole: `Some` with everything
/// read so far (the head, maybe the start of a body) for hyper to parse;
/// `None` when the client sent nothing, or sent a head that is too long,
/// cut short or too slow (answered 400 here).
pub(crate) async fn read_head(stream: &mut TcpStream) -> Option<Bytes> {
    let mut buffer = BytesMut::with_capacity(4096);
    let mut chunk = [0u8; 8192];
    let whole = timeout(READ_TIMEOUT, async {
        loop {
            let scanned = buffer.len().saturating_sub(3);
            // At most a chunk past the limit is ever held.
            let n = stream.read(&mut chunk).await?;
            buffer.extend_from_slice(&chunk[..n]);
            if let Some(end) = head_end(&buffer, scanned) {
                return Ok::<_, io::Error>(end <= MAX_HEAD_BYTES);
            }
            if n == 0 || buffer.len() > MAX_HEAD_BYTES {
                return Ok(false);
            }
        }
    })
    .await;
    match whole {
        Ok(Ok(true)) => Some(buffer.freeze()),
        _ if buffer.is_empty() => None,
        _ => {
            let why = "the request head is too long or cut short\n";
            refuse(stream, &plain_response("400 Bad Request", why)).await;
            None
        }
    }
}

/// Where the head in `buffer` ends (past its empty line), looking from
/// `from`; lines may end in CRLF or LF, as hyper accepts both.
fn head_end(buffer: &[u8], from: usize) -> Option<usize> {
    let tail = &buffer[from..];
    let crlf = tail.windows(3).position(|w| w == b"\n\r\n").map(|i| i + 3);
    let lf = tail.windows(2).position(|w| w == b"\n\n").map(|i| i + 2);
    match (crlf, lf) {
        (Some(a), Some(b)) => Some(from + a.min(b)),
        (a, b) => a.or(b).map(|end| from + end),
    }
}

/// Answers `stream` with `response` and closes it, reading (and dropping)
/// a little of what the client still sends so that it sees the answer.
pub(crate) async fn refuse(stream: &mut TcpStream, response: &[u8]) {
    let _ = timeout(Duration::from_secs(1), async {
        stream.write_all(response).await?;
        stream.shutdown().await?;
        let mut left = DISCARD_BYTES;
        let mut sink = [0u8; 8192];
        while left > 0 {
            let n = stream.read(&mut sink).await?;
            if n == 0 {
                break;
            }
            left = left.saturating_sub(n);
        }
        Ok::<_, io::Error>(())
    })
    .await;
}

/// A connection as hyper reads and writes it: first the bytes
/// [`read_head`] took, then the socket; a write that waits on the client
/// longer than [`WRITE_TIMEOUT`] fails.
pub(crate) struct Conn {
    read: Bytes,
    stream: TcpStream,
    stalled: Option<Pin<Box<Sleep>>>,
}

impl Conn {
    /// `stream`, after `read` was taken from it.
    pub(crate) fn new(read: Bytes, stream: TcpStream) -> Self {
        Self {
            read,
            stream,
            stalled: None,
        }
    }

    /// `poll` of a write: its result, or `TimedOut` once the write has
    /// waited [`WRITE_TIMEOUT`].
    fn timed<T>(
        &mut self,
        cx: &mut Context<'_>,
        poll: impl FnOnce(Pin<&mut TcpStream>, &mut Context<'_>) -> Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        match poll(Pin::new(&mut self.stream), cx) {
            Poll::Ready(result) => {
                self.stalled = None;
                Poll::Ready(result)
            }
            Poll::Pending => {
                let stalled = self
                    .stalled
                    .get_or_insert_with(|| Box::pin(sleep(WRITE_TIMEOUT)));
                ready!(stalled.as_mut().poll(cx));
                Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the client stopped reading",
                )))
            }
        }
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.read.has_remaining() {
            let n = this.read.len().min(buf.remaining());
            buf.put_slice(&this.read[..n]);
            this.read.advance(n);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().timed(cx, |s, cx| s.poll_write(cx, buf))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.get_mut()
            .timed(cx, |s, cx| s.poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().timed(cx, |s, cx| s.poll_flush(cx))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_ends_at_its_first_empty_line_with_crlf_or_lf() {
        assert_eq!(head_end(b"GET / HTTP/1.1\r\n\r\nbody", 0), Some(18));
        assert_eq!(head_end(b"GET / HTTP/1.1\n\nbody", 0), Some(16));
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nA: b\r\n", 0), None);
        // Scanning from just before the last read finds an end split across reads.
        let head = b"GET / HTTP/1.1\r\n\r\n";
        assert_eq!(head_end(head, head.len() - 4), Some(head.len()));
    }
}
