//! Raw bytes after a frame on a request stream.
//!
//! Job binaries (hundreds of MB) and objects (up to GBs) do not travel inside
//! frames: a frame is copied whole into one buffer, validated, and limited
//! to [`DEFAULT_MAX_FRAME_LEN`](super::DEFAULT_MAX_FRAME_LEN). Instead a frame
//! announces a length (`UploadBinary { len }`, `BinaryFollows { len }`,
//! `ObjectFollows { len }`; see
//! [`Message::follows`](ray_proto::wire::Message::follows)) and exactly
//! that many raw bytes follow it on the same stream, after which the sender
//! finishes the stream.
//!
//! The receiver copies the bytes once, from quinn's receive buffers straight
//! into one preallocated 16-aligned buffer (an rkyv archive can be read from
//! it in place). It refuses a length over its limit before allocating, by
//! stopping that stream only; a peer that ends the stream early gives
//! [`TransportError::PayloadTruncated`].
//!
//! Frames and raw bytes share a stream safely because the frame decoder
//! never reads past the frame it is decoding: when a frame is complete, the
//! next byte of the stream is the first raw byte.
//!
//! A sender whose future is dropped mid-payload resets the stream (quinn
//! would otherwise finish it, and the receiver would take a short payload
//! for a whole one only to find it truncated).

use std::net::SocketAddr;

use ray_proto::wire::Envelope;
use rkyv::util::AlignedVec;

use super::connection::{read_error, stream_error, Connection, SendHalf};
use super::frame;
use super::rpc::IncomingRequest;
use super::TransportError;

/// The code a receiver stops a stream with when it refuses its payload.
const PAYLOAD_REFUSED: u32 = 1;

/// The code a sender resets a stream with when it abandons its payload.
const PAYLOAD_ABANDONED: u32 = 2;

impl Connection {
    /// Sends `request` followed by the raw `bytes` on a new stream and waits
    /// for the peer's one reply.
    ///
    /// `request` announces the length (for example
    /// [`UploadBinary`](ray_proto::wire::UploadBinary)); the peer reads the
    /// bytes with [`IncomingRequest::read_bytes`]. If the peer refuses the
    /// payload before it is all sent, its reply (typically
    /// [`Message::Error`](ray_proto::wire::Message::Error)) is still
    /// returned. Cancelling the future resets the stream; the connection
    /// stays usable.
    ///
    /// # Errors
    ///
    /// [`TransportError::Frame`] if `request` exceeds the frame limit or the
    /// reply is malformed (the connection is then closed);
    /// [`TransportError::ControlStreamClosed`] if the peer finished the stream
    /// without replying; otherwise the connection's failure.
    pub async fn request_with_bytes(
        &self,
        request: &Envelope,
        bytes: &[u8],
    ) -> Result<Envelope, TransportError> {
        let addr = self.remote_address();
        let (frame, mut send, mut recv) = self.open_request(request).await?;
        let mut upload = ResetUnlessDone::new(&mut send);
        match upload.write(&frame, bytes).await {
            // Stopped: the peer refused the payload; it still answers why.
            Ok(()) | Err(quinn::WriteError::Stopped(_)) => {}
            Err(e) => return Err(stream_error(addr, e.into())),
        }
        upload.finish();
        recv.read_envelope()
            .await
            .map_err(|failure| read_error(self.quic(), addr, failure))
    }

    /// Sends `request` on a new stream and waits for the peer's one reply,
    /// and for the raw bytes after it when it announces some.
    ///
    /// When the reply announces raw bytes
    /// ([`Message::follows`](ray_proto::wire::Message::follows):
    /// [`BinaryFollows`](ray_proto::wire::BinaryFollows) or
    /// [`ObjectFollows`](ray_proto::wire::ObjectFollows)), exactly `len` raw
    /// bytes are read into one 16-aligned buffer; any other reply comes back
    /// with `None`. Cancelling the future drops the stream; the connection stays usable.
    ///
    /// # Errors
    ///
    /// [`TransportError::PayloadTooLarge`] if the announced length exceeds
    /// `max_len` (the stream is stopped, the connection stays up);
    /// [`TransportError::PayloadTruncated`] if the peer ends the stream
    /// before the payload is whole; otherwise as [`Connection::request`].
    pub async fn request_bulk(
        &self,
        request: &Envelope,
        max_len: u64,
    ) -> Result<(Envelope, Option<AlignedVec<16>>), TransportError> {
        let addr = self.remote_address();
        let mut recv = self.send_request(request).await?;
        let reply = recv
            .read_envelope()
            .await
            .map_err(|failure| read_error(self.quic(), addr, failure))?;
        let Some(len) = reply.body.follows() else {
            return Ok((reply, None));
        };
        let payload = read_payload(recv.stream_mut(), addr, len, max_len).await?;
        Ok((reply, Some(payload)))
    }
}

impl IncomingRequest {
    /// Reads the `len` raw bytes that follow the request frame, as its
    /// request announced (for example
    /// [`UploadBinary`](ray_proto::wire::UploadBinary)).
    ///
    /// The request stays answerable: after a refusal, [`IncomingRequest::respond`]
    /// can still tell the peer why.
    ///
    /// # Errors
    ///
    /// [`TransportError::PayloadTooLarge`] if `len` exceeds `max_len` (the
    /// peer's sending side is stopped; nothing is allocated);
    /// [`TransportError::PayloadTruncated`] if the peer ends the stream
    /// early; otherwise the connection's failure.
    pub async fn read_bytes(
        &mut self,
        len: u64,
        max_len: u64,
    ) -> Result<AlignedVec<16>, TransportError> {
        let addr = self.conn.remote_address();
        read_payload(self.recv.stream_mut(), addr, len, max_len).await
    }

    /// Sends the one reply `header`, then the raw `bytes`, and finishes the
    /// stream.
    ///
    /// `header` announces the length (for example
    /// [`BinaryFollows`](ray_proto::wire::BinaryFollows) with `len` =
    /// `bytes.len()`). Dropping the future mid-way resets the
    /// stream, so the peer sees a truncated payload, never a short one.
    ///
    /// # Errors
    ///
    /// [`TransportError::Frame`] if `header` exceeds the frame limit;
    /// otherwise the connection's or stream's failure (a peer that stopped
    /// reading gives [`TransportError::ControlStreamClosed`]).
    pub async fn respond_with_bytes(
        mut self,
        header: &Envelope,
        bytes: &[u8],
    ) -> Result<(), TransportError> {
        let addr = self.conn.remote_address();
        let frame = frame::encode(header, self.conn.max_frame_len())
            .map_err(|source| TransportError::Frame { peer: addr, source })?;
        let mut reply = ResetUnlessDone::new(&mut self.send);
        reply
            .write(&frame, bytes)
            .await
            .map_err(|e| stream_error(addr, e.into()))?;
        reply.finish();
        Ok(())
    }
}

/// Reads exactly `len` raw bytes of `stream` into a new 16-aligned buffer.
async fn read_payload(
    stream: &mut quinn::RecvStream,
    peer: SocketAddr,
    len: u64,
    max_len: u64,
) -> Result<AlignedVec<16>, TransportError> {
    let Some(want) = usize::try_from(len).ok().filter(|_| len <= max_len) else {
        // Only this stream is refused; an error means it is already closed.
        let _ = stream.stop(quinn::VarInt::from_u32(PAYLOAD_REFUSED));
        return Err(TransportError::PayloadTooLarge {
            peer,
            len,
            max: max_len,
        });
    };
    // Huge pages for large payloads: faulting in 4 KiB pages cost more
    // than the copy itself.
    let mut payload = ray_store::aligned_with_capacity(want);
    let truncated = |got: usize| TransportError::PayloadTruncated {
        peer,
        got: got as u64,
        len,
    };
    while payload.len() < want {
        // Ordered chunks are quinn's own receive buffers: the one copy is
        // into `payload`, which never reallocates.
        match stream.read_chunk(want - payload.len(), true).await {
            Ok(Some(chunk)) => payload.extend_from_slice(&chunk.bytes),
            Ok(None) => return Err(truncated(payload.len())),
            Err(quinn::ReadError::ConnectionLost(e)) => {
                return Err(TransportError::from_connection(peer, e))
            }
            Err(_) => return Err(truncated(payload.len())),
        }
    }
    Ok(payload)
}

/// A send half writing a frame and a payload, reset if dropped before
/// [`ResetUnlessDone::finish`] (quinn would finish it, making a short
/// payload look sent).
struct ResetUnlessDone<'a> {
    half: &'a mut SendHalf,
    done: bool,
}

impl<'a> ResetUnlessDone<'a> {
    fn new(half: &'a mut SendHalf) -> Self {
        Self { half, done: false }
    }

    async fn write(&mut self, frame: &[u8], bytes: &[u8]) -> Result<(), quinn::WriteError> {
        self.half.send_frame(frame).await?;
        self.half.stream_mut().write_all(bytes).await
    }

    /// Finishes the stream; an error means the peer already closed it, and
    /// the read of its reply (if any) says so.
    fn finish(mut self) {
        self.done = true;
        let _ = self.half.stream_mut().finish();
    }
}

impl Drop for ResetUnlessDone<'_> {
    fn drop(&mut self) {
        if !self.done {
            let _ = self
                .half
                .stream_mut()
                .reset(quinn::VarInt::from_u32(PAYLOAD_ABANDONED));
        }
    }
}
