//! Request/response over a connection: one bidirectional stream per request.
//!
//! The requester opens a fresh stream, writes one request frame and finishes
//! its side; the responder reads that frame, writes one reply frame and
//! finishes. A stream per request (rather than ids correlated on the control
//! stream) means a slow reply never holds up another (no head-of-line
//! blocking), needs no bookkeeping to match replies, and a cancelled request
//! only resets its own stream. QUIC streams cost a few bytes to open, so this
//! is cheap enough for control traffic.
//!
//! Frames on request streams are validated like control frames: a malformed
//! one closes the connection with [`CloseCode::MalformedFrame`](super::CloseCode).

use ray_proto::wire::Envelope;

use super::connection::{read_error, stream_error, Connection, RecvHalf, SendHalf};
use super::frame;
use super::TransportError;

impl Connection {
    /// Sends `request` on a new stream and waits for the peer's one reply.
    ///
    /// Cancelling the future resets the request's stream; the connection
    /// stays usable.
    ///
    /// # Errors
    ///
    /// [`TransportError::Frame`] if `request` exceeds the frame limit or the
    /// reply is malformed (the connection is then closed);
    /// [`TransportError::ControlStreamClosed`] if the peer finished the stream
    /// without replying; otherwise the connection's failure.
    pub async fn request(&self, request: &Envelope) -> Result<Envelope, TransportError> {
        let mut recv = self.send_request(request).await?;
        recv.read_envelope()
            .await
            .map_err(|failure| read_error(self.quic(), self.remote_address(), failure))
    }

    /// Opens a stream, writes `request` as its one frame and finishes our
    /// side; returns the receiving half for the reply.
    pub(super) async fn send_request(
        &self,
        request: &Envelope,
    ) -> Result<RecvHalf, TransportError> {
        let addr = self.remote_address();
        let (frame, mut send, recv) = self.open_request(request).await?;
        send.send_frame(&frame)
            .await
            .map_err(|e| stream_error(addr, e.into()))?;
        // Finishing only fails if the stream is already closed; the read
        // of the reply then reports why.
        let _ = send.stream_mut().finish();
        Ok(recv)
    }

    /// `request` framed (checked against the frame limit before anything
    /// is opened) and a new stream to send it on.
    pub(super) async fn open_request(
        &self,
        request: &Envelope,
    ) -> Result<(Vec<u8>, SendHalf, RecvHalf), TransportError> {
        let addr = self.remote_address();
        let frame = frame::encode(request, self.max_frame_len())
            .map_err(|source| TransportError::Frame { peer: addr, source })?;
        let (send, recv) = self
            .quic()
            .open_bi()
            .await
            .map_err(|source| TransportError::from_connection(addr, source))?;
        Ok((
            frame,
            SendHalf::new(send),
            RecvHalf::new(recv, self.max_frame_len()),
        ))
    }

    /// Waits for the peer to open its next request stream.
    ///
    /// Read the request with [`IncomingRequest::read`] and answer with
    /// [`IncomingRequest::respond`], typically in a task of its own so one
    /// slow request does not delay accepting the next. Cancel-safe.
    ///
    /// # Errors
    ///
    /// The connection's failure once it is closed.
    pub async fn accept_request(&self) -> Result<IncomingRequest, TransportError> {
        let (send, recv) = self
            .quic()
            .accept_bi()
            .await
            .map_err(|source| TransportError::from_connection(self.remote_address(), source))?;
        Ok(IncomingRequest {
            conn: self.clone(),
            send: SendHalf::new(send),
            recv: RecvHalf::new(recv, self.max_frame_len()),
        })
    }
}

/// A request stream the peer opened, waiting to be read and answered.
pub struct IncomingRequest {
    pub(super) conn: Connection,
    pub(super) send: SendHalf,
    pub(super) recv: RecvHalf,
}

impl IncomingRequest {
    /// Reads the request.
    ///
    /// # Errors
    ///
    /// [`TransportError::Frame`] for a malformed frame, after closing the
    /// connection; [`TransportError::ControlStreamClosed`] if the peer
    /// finished the stream without a request; otherwise the connection's
    /// failure.
    pub async fn read(&mut self) -> Result<Envelope, TransportError> {
        self.recv
            .read_envelope()
            .await
            .map_err(|failure| read_error(self.conn.quic(), self.conn.remote_address(), failure))
    }

    /// Sends the one reply and finishes the stream.
    ///
    /// # Errors
    ///
    /// [`TransportError::Frame`] if `reply` exceeds the frame limit;
    /// otherwise the connection's or stream's failure.
    pub async fn respond(mut self, reply: &Envelope) -> Result<(), TransportError> {
        let addr = self.conn.remote_address();
        let frame = frame::encode(reply, self.conn.max_frame_len())
            .map_err(|source| TransportError::Frame { peer: addr, source })?;
        self.send
            .send_frame(&frame)
            .await
            .map_err(|e| stream_error(addr, e.into()))?;
        self.send
            .stream_mut()
            .finish()
            .map_err(|_| TransportError::ControlStreamClosed { peer: addr })
    }
}

impl std::fmt::Debug for IncomingRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IncomingRequest")
            .field("peer", &self.conn.remote_address())
            .finish_non_exhaustive()
    }
}
