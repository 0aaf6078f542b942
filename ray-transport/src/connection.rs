//! One authenticated connection and its control stream.

use std::net::SocketAddr;
use std::sync::Arc;

use ray_proto::wire::{Envelope, Role};
use ray_proto::{NodeId, WorkerId};

use super::frame::{self, FrameDecoder, FrameError};
use super::{CloseCode, TransportError};

/// Who is at the other end, as its handshake said.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PeerIdentity {
    /// What kind of process the peer is.
    pub role: Role,
    /// The peer's node, when it belongs to one.
    pub node: Option<NodeId>,
    /// The peer's worker id, when it is a worker or driver.
    pub worker: Option<WorkerId>,
}

/// A connection to another cluster process that passed mutual TLS and the
/// hello exchange, with its control stream.
///
/// Cloning is cheap and shares the connection. [`Connection::send`] and
/// [`Connection::recv`] are cancel-safe (see each), and a frame is never
/// interleaved with another.
#[derive(Clone)]
pub struct Connection {
    inner: Arc<Inner>,
}

struct Inner {
    quic: quinn::Connection,
    peer: PeerIdentity,
    /// The address at connect time, for errors (quinn's may migrate).
    addr: SocketAddr,
    max_frame_len: u32,
    // Async mutexes: they keep each frame whole on the one stream; what they
    // guard holds its own progress, so a cancelled holder leaves no torn frame.
    send: tokio::sync::Mutex<SendHalf>,
    recv: tokio::sync::Mutex<RecvHalf>,
}

/// The sending half of the control stream and the frame being written.
pub(super) struct SendHalf {
    stream: quinn::SendStream,
    frame: Vec<u8>,
    written: usize,
}

/// The receiving half of the control stream and the frame being read.
pub(super) struct RecvHalf {
    stream: quinn::RecvStream,
    decoder: FrameDecoder,
}

impl SendHalf {
    pub(super) fn new(stream: quinn::SendStream) -> Self {
        Self {
            stream,
            frame: Vec::new(),
            written: 0,
        }
    }

    /// Writes `frame` after finishing any frame a cancelled call left.
    pub(super) async fn send_frame(&mut self, frame: &[u8]) -> Result<(), quinn::WriteError> {
        self.flush().await?;
        self.frame.clear();
        self.frame.extend_from_slice(frame);
        self.flush().await
    }

    /// Writes the rest of the current frame. `SendStream::write` is
    /// cancel-safe and progress is kept in `self`, so this is too.
    async fn flush(&mut self) -> Result<(), quinn::WriteError> {
        while self.written < self.frame.len() {
            self.written += self.stream.write(&self.frame[self.written..]).await?;
        }
        self.frame.clear();
        self.written = 0;
        Ok(())
    }

    pub(super) fn stream_mut(&mut self) -> &mut quinn::SendStream {
        &mut self.stream
    }
}

/// Why reading a frame stopped.
pub(super) enum ReadFailure {
    /// The connection or stream failed.
    Read(quinn::ReadError),
    /// The peer finished the stream between frames.
    Finished,
    /// The bytes were not a valid frame.
    Frame(FrameError),
}

impl RecvHalf {
    pub(super) fn new(stream: quinn::RecvStream, max_frame_len: u32) -> Self {
        Self {
            stream,
            decoder: FrameDecoder::new(max_frame_len),
        }
    }

    /// Reads the next envelope. `RecvStream::read` is cancel-safe and the
    /// partial frame stays in the decoder, so this is too.
    pub(super) async fn read_envelope(&mut self) -> Result<Envelope, ReadFailure> {
        loop {
            match self.stream.read(self.decoder.buf()).await {
                Ok(Some(n)) => {
                    if let Some(envelope) = self.decoder.advance(n).map_err(ReadFailure::Frame)? {
                        return Ok(envelope);
                    }
                }
                Ok(None) => {
                    return Err(match self.decoder.end_of_stream() {
                        Some(e) => ReadFailure::Frame(e),
                        None => ReadFailure::Finished,
                    })
                }
                Err(e) => return Err(ReadFailure::Read(e)),
            }
        }
    }

    /// The stream underneath, for raw bytes that follow a frame.
    ///
    /// The decoder never reads past the frame it is decoding (its
    /// [`FrameDecoder::buf`] is exactly what that frame still needs), so
    /// between frames no byte of the stream is held here: whatever follows
    /// the last frame is still in the stream.
    pub(super) fn stream_mut(&mut self) -> &mut quinn::RecvStream {
        debug_assert!(self.decoder.is_idle(), "raw read inside a frame");
        &mut self.stream
    }
}

/// The typed error for a failed read, closing the connection when the peer
/// sent a bad frame.
pub(super) fn read_error(
    quic: &quinn::Connection,
    addr: SocketAddr,
    failure: ReadFailure,
) -> TransportError {
    match failure {
        ReadFailure::Frame(source) => {
            tracing::debug!(target: "ray::transport", peer = %addr, error = %source, "connection.malformed_frame");
            quic.close(
                CloseCode::MalformedFrame.into(),
                source.to_string().as_bytes(),
            );
            TransportError::Frame { peer: addr, source }
        }
        ReadFailure::Finished => TransportError::ControlStreamClosed { peer: addr },
        ReadFailure::Read(e) => stream_error(addr, e.into()),
    }
}

/// What quinn's stream errors mean for the control stream.
pub(super) enum StreamFailure {
    Connection(quinn::ConnectionError),
    Stream,
}

impl From<quinn::ReadError> for StreamFailure {
    fn from(e: quinn::ReadError) -> Self {
        match e {
            quinn::ReadError::ConnectionLost(e) => Self::Connection(e),
            _ => Self::Stream,
        }
    }
}

impl From<quinn::WriteError> for StreamFailure {
    fn from(e: quinn::WriteError) -> Self {
        match e {
            quinn::WriteError::ConnectionLost(e) => Self::Connection(e),
            _ => Self::Stream,
        }
    }
}

pub(super) fn stream_error(addr: SocketAddr, failure: StreamFailure) -> TransportError {
    match failure {
        StreamFailure::Connection(e) => TransportError::from_connection(addr, e),
        StreamFailure::Stream => TransportError::ControlStreamClosed { peer: addr },
    }
}

impl Connection {
    pub(super) fn new(
        quic: quinn::Connection,
        peer: PeerIdentity,
        send: SendHalf,
        recv: RecvHalf,
        max_frame_len: u32,
    ) -> Self {
        let addr = quic.remote_address();
        Self {
            inner: Arc::new(Inner {
                quic,
                peer,
                addr,
                max_frame_len,
                send: tokio::sync::Mutex::new(send),
                recv: tokio::sync::Mutex::new(recv),
            }),
        }
    }

    /// Who the peer said it is in the handshake.
    pub fn peer(&self) -> PeerIdentity {
        self.inner.peer
    }

    /// The largest frame this connection sends or accepts.
    pub(super) fn max_frame_len(&self) -> u32 {
        self.inner.max_frame_len
    }

    /// The peer's address when the connection was made.
    pub fn remote_address(&self) -> SocketAddr {
        self.inner.addr
    }

    /// Sends one control message.
    ///
    /// Cancel-safe in this sense: a cancelled `send` has written nothing or
    /// part of its frame, and the next `send` completes that frame first, so
    /// the stream never carries a torn frame.
    ///
    /// # Errors
    ///
    /// [`TransportError::Frame`] if `envelope` exceeds the frame limit (the
    /// connection stays up); otherwise the connection's failure, for example
    /// [`TransportError::Connection`] once it is closed.
    pub async fn send(&self, envelope: &Envelope) -> Result<(), TransportError> {
        let addr = self.inner.addr;
        let frame = frame::encode(envelope, self.inner.max_frame_len)
            .map_err(|source| TransportError::Frame { peer: addr, source })?;
        let mut half = self.inner.send.lock().await;
        half.send_frame(&frame)
            .await
            .map_err(|e| stream_error(addr, e.into()))
    }

    /// Receives the next control message.
    ///
    /// Cancel-safe: a cancelled `recv` loses no bytes, and the next one
    /// resumes the same frame. Concurrent callers each get different messages.
    ///
    /// # Errors
    ///
    /// [`TransportError::Frame`] for a malformed or oversize frame, after
    /// closing the connection with [`CloseCode::MalformedFrame`];
    /// [`TransportError::ControlStreamClosed`] if the peer finished the
    /// stream; otherwise the connection's failure.
    pub async fn recv(&self) -> Result<Envelope, TransportError> {
        let mut half = self.inner.recv.lock().await;
        half.read_envelope()
            .await
            .map_err(|failure| read_error(&self.inner.quic, self.inner.addr, failure))
    }

    /// Closes the connection with `code`; pending sends and receives fail.
    pub fn close(&self, code: CloseCode, reason: &str) {
        self.inner.quic.close(code.into(), reason.as_bytes());
    }

    /// Waits until the connection is closed, by either side, and says why.
    pub async fn closed(&self) -> TransportError {
        let e = self.inner.quic.closed().await;
        TransportError::from_connection(self.inner.addr, e)
    }

    /// True while the connection is neither closed nor failed.
    pub fn is_open(&self) -> bool {
        self.inner.quic.close_reason().is_none()
    }

    /// The quinn connection underneath, for streams beyond the control
    /// stream (large objects move on their own streams).
    pub fn quic(&self) -> &quinn::Connection {
        &self.inner.quic
    }
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("peer", &self.inner.peer)
            .field("addr", &self.inner.addr)
            .field("open", &self.is_open())
            .finish()
    }
}
