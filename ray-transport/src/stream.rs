//! Framed QUIC streams beyond one request and one reply: long-lived work
//! streams (an owner pushing tasks to a worker, results coming back) and
//! object transfers (the server side: a header frame, then the object's raw
//! bytes, which `Connection::request_bulk` reads).
//!
//! Frames are the same length-prefixed, validated rkyv envelopes as on the
//! control stream ([`super::frame`]); raw bytes after a header frame are
//! written as they are.

use std::net::SocketAddr;

use ray_proto::wire::Envelope;

use super::connection::{read_error, stream_error, ReadFailure};
use super::frame::{self, FrameDecoder};
use super::{Connection, TransportError};

/// The sending side of a framed stream.
pub struct FrameWriter {
    stream: quinn::SendStream,
    peer: SocketAddr,
    max_frame_len: u32,
    /// The room the next frame's buffer starts with: a little over the
    /// last frame's size, at most [`MAX_SIZE_HINT`].
    size_hint: usize,
}

/// The most a [`FrameWriter`] sets aside for a frame before writing it (a
/// larger frame grows its buffer as it is written).
const MAX_SIZE_HINT: usize = 64 << 10;

/// The receiving side of a framed stream.
pub struct FrameReader {
    stream: quinn::RecvStream,
    decoder: FrameDecoder,
    quic: quinn::Connection,
    peer: SocketAddr,
}

impl Connection {
    /// Opens a bidirectional framed stream to the peer.
    ///
    /// # Errors
    ///
    /// The connection's failure.
    pub async fn open_frames(&self) -> Result<(FrameWriter, FrameReader), TransportError> {
        let (send, recv) = self
            .quic()
            .open_bi()
            .await
            .map_err(|source| TransportError::from_connection(self.remote_address(), source))?;
        Ok(self.wrap(send, recv))
    }

    /// Waits for the peer to open its next bidirectional stream.
    ///
    /// # Errors
    ///
    /// The connection's failure once it is closed.
    pub async fn accept_frames(&self) -> Result<(FrameWriter, FrameReader), TransportError> {
        let (send, recv) = self
            .quic()
            .accept_bi()
            .await
            .map_err(|source| TransportError::from_connection(self.remote_address(), source))?;
        Ok(self.wrap(send, recv))
    }

    fn wrap(&self, send: quinn::SendStream, recv: quinn::RecvStream) -> (FrameWriter, FrameReader) {
        let peer = self.remote_address();
        (
            FrameWriter {
                stream: send,
                peer,
                max_frame_len: self.max_frame_len(),
                size_hint: 0,
            },
            FrameReader {
                stream: recv,
                decoder: FrameDecoder::new(self.max_frame_len()),
                quic: self.quic().clone(),
                peer,
            },
        )
    }
}

impl FrameWriter {
    /// Sends one frame.
    ///
    /// # Errors
    ///
    /// [`TransportError::Frame`] if it exceeds the frame limit; otherwise
    /// the stream's or connection's failure.
    pub async fn send(&mut self, envelope: &Envelope) -> Result<(), TransportError> {
        let frame = frame::encode_sized(envelope, self.max_frame_len, self.size_hint).map_err(
            |source| TransportError::Frame {
                peer: self.peer,
                source,
            },
        )?;
        let archived = frame.len() - frame::LEN_PREFIX;
        self.size_hint = archived.saturating_add(archived / 4).min(MAX_SIZE_HINT);
        // Handed to quinn as it is: writing a slice would copy it into
        // quinn's send buffer first.
        self.stream
            .write_chunk(bytes::Bytes::from(frame))
            .await
            .map_err(|e| stream_error(self.peer, e.into()))
    }

    /// Sends raw bytes (after a header frame that announced them).
    ///
    /// # Errors
    ///
    /// The stream's or connection's failure.
    pub async fn send_raw(&mut self, bytes: &[u8]) -> Result<(), TransportError> {
        self.stream
            .write_all(bytes)
            .await
            .map_err(|e| stream_error(self.peer, e.into()))
    }

    /// Sends `bytes` without copying them: quinn keeps a reference to them
    /// until the peer acknowledged every packet (an object's buffer is
    /// shared, not copied, while it is in flight).
    ///
    /// A 100 MiB object copied into quinn's send buffer cost a fresh 64 MiB
    /// allocation per window, faulted in page by page.
    ///
    /// # Errors
    ///
    /// The stream's or connection's failure.
    pub async fn send_shared<B>(&mut self, bytes: B) -> Result<(), TransportError>
    where
        B: AsRef<[u8]> + Send + 'static,
    {
        self.stream
            .write_chunk(bytes::Bytes::from_owner(bytes))
            .await
            .map_err(|e| stream_error(self.peer, e.into()))
    }

    /// Ends the stream; the peer reads its end after what was sent.
    pub fn finish(&mut self) {
        // Only fails when the stream is already closed; the peer then
        // learns that from its own reads.
        let _ = self.stream.finish();
    }
}

impl FrameReader {
    /// The next frame, or `None` when the peer finished the stream
    /// between frames.
    ///
    /// # Errors
    ///
    /// [`TransportError::Frame`] for a malformed frame (the connection is
    /// then closed) or one cut short; otherwise the stream's failure.
    pub async fn recv(&mut self) -> Result<Option<Envelope>, TransportError> {
        loop {
            match self.stream.read(self.decoder.buf()).await {
                Ok(Some(n)) => match self.decoder.advance(n) {
                    Ok(Some(envelope)) => return Ok(Some(envelope)),
                    Ok(None) => {}
                    Err(e) => return Err(read_error(&self.quic, self.peer, ReadFailure::Frame(e))),
                },
                Ok(None) => {
                    return match self.decoder.end_of_stream() {
                        Some(e) => Err(read_error(&self.quic, self.peer, ReadFailure::Frame(e))),
                        None => Ok(None),
                    }
                }
                Err(e) => return Err(read_error(&self.quic, self.peer, ReadFailure::Read(e))),
            }
        }
    }
}

impl std::fmt::Debug for FrameWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrameWriter")
            .field("peer", &self.peer)
            .finish()
    }
}

impl std::fmt::Debug for FrameReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrameReader")
            .field("peer", &self.peer)
            .finish()
    }
}
