//! ray-transport: the QUIC transport between ray-rs processes.
//!
//! One long-lived QUIC connection (quinn) joins each pair of processes that
//! talk. Both ends authenticate with certificates issued by the cluster's own
//! CA ([`tls`]): nothing unauthenticated is served. On top of TLS, the
//! connecting side opens a bidirectional control stream and sends
//! [`Message::Hello`] with its protocol version and build fingerprint; the
//! acceptor answers [`Message::HelloOk`] or [`Message::Refused`] and closes
//! ([`endpoint`]). Control messages then travel on that stream as
//! length-prefixed rkyv archives, validated on receipt ([`frame`]): a
//! malformed frame closes its connection with [`CloseCode::MalformedFrame`]
//! and a typed error, never a panic. Requests that expect one reply (the
//! GCS service) each open a stream of their own ([`Connection::request`]).
//!
//! This crate is the thin async shell only: it moves [`Envelope`]s and knows
//! nothing of tasks, objects or the GCS. It depends on ray-proto (the wire
//! messages) and must not depend on ray-core or any runtime crate: the
//! cluster code drives it, never the other way round.
//!
//! [`Message::Hello`]: ray_proto::wire::Message::Hello
//! [`Message::HelloOk`]: ray_proto::wire::Message::HelloOk
//! [`Message::Refused`]: ray_proto::wire::Message::Refused

mod bulk;
mod connection;
mod connections;
pub mod endpoint;
pub mod frame;
mod rpc;
mod stream;
pub mod tls;

use std::net::SocketAddr;
use std::path::PathBuf;

pub use connection::{Connection, PeerIdentity};
pub use connections::Connections;
pub use endpoint::{Endpoint, EndpointConfig, TransportConfig};
pub use frame::{FrameDecoder, FrameError, DEFAULT_MAX_FRAME_LEN};
pub use ray_proto::wire::{BuildFingerprint, Envelope, Message, Role, PROTOCOL_VERSION};
pub use rpc::IncomingRequest;
pub use stream::{FrameReader, FrameWriter};
pub use tls::{ClusterCa, ClusterCredentials, ALPN, SERVER_NAME};

/// The application error code a connection is closed with, so the peer
/// learns why.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum CloseCode {
    /// An orderly close: the process is done with the peer.
    Normal = 0,
    /// The handshake refused the peer (protocol version or build mismatch).
    Refused = 1,
    /// The peer sent a frame that failed validation or exceeded the limit.
    MalformedFrame = 2,
    /// The peer sent a well-formed message that was not expected then.
    ProtocolViolation = 3,
    /// The peer did not complete the handshake in time.
    HandshakeTimeout = 4,
}

impl CloseCode {
    /// The close code carried by a QUIC application close, if it is one of ours.
    pub fn from_code(code: quinn::VarInt) -> Option<Self> {
        [
            Self::Normal,
            Self::Refused,
            Self::MalformedFrame,
            Self::ProtocolViolation,
            Self::HandshakeTimeout,
        ]
        .into_iter()
        .find(|c| quinn::VarInt::from(*c) == code)
    }
}

impl From<CloseCode> for quinn::VarInt {
    fn from(code: CloseCode) -> Self {
        quinn::VarInt::from_u32(code as u32)
    }
}

/// Everything that can go wrong in the transport, with the peer or file involved.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TransportError {
    /// A credential file is missing or cannot be read or written.
    #[error("credential file {}: {source}", path.display())]
    CredentialFile {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// A credential file holds no valid PEM section of the kind expected, or
    /// its certificate and key do not belong together.
    #[error("invalid credentials in {}: {reason}", path.display())]
    InvalidCredentials {
        /// The file (or directory) at fault.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A certificate or key could not be generated or signed.
    #[error("cannot generate certificate: {0}")]
    Certificate(#[from] rcgen::Error),
    /// rustls or quinn rejected the TLS configuration built from credentials.
    #[error("TLS configuration rejected: {0}")]
    TlsConfig(String),
    /// A [`TransportConfig`] value is out of the range QUIC allows.
    #[error("invalid transport configuration: {0}")]
    InvalidConfig(String),
    /// An endpoint was created outside a tokio runtime.
    #[error("the transport needs a tokio runtime")]
    NoRuntime,
    /// The UDP socket could not be bound.
    #[error("cannot bind {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// What the OS said.
        source: std::io::Error,
    },
    /// quinn could not start a connection (bad address, endpoint stopping).
    #[error("cannot connect to {peer}: {source}")]
    Connect {
        /// The address dialled.
        peer: SocketAddr,
        /// quinn's reason.
        source: quinn::ConnectError,
    },
    /// The connection failed or was closed: TLS rejected a certificate, the
    /// peer went away or timed out, or it closed with a [`CloseCode`].
    #[error("connection with {peer} failed: {source}")]
    Connection {
        /// The peer's address.
        peer: SocketAddr,
        /// quinn's reason; a TLS rejection is a `TransportError` with a
        /// crypto error code, a peer's close an `ApplicationClosed`.
        source: quinn::ConnectionError,
    },
    /// The peer refused the handshake; `reason` says why.
    #[error("{peer} refused the connection: {reason}")]
    Refused {
        /// The peer's address.
        peer: SocketAddr,
        /// The peer's reason (version or build mismatch).
        reason: String,
    },
    /// A frame failed validation, exceeded the size limit or could not be
    /// encoded. A received bad frame has closed the connection.
    #[error("bad frame on the connection with {peer}: {source}")]
    Frame {
        /// The peer's address.
        peer: SocketAddr,
        /// What was wrong with it.
        source: FrameError,
    },
    /// The peer sent a valid message that the protocol does not allow here.
    #[error("protocol violation by {peer}: {reason}")]
    ProtocolViolation {
        /// The peer's address.
        peer: SocketAddr,
        /// What it sent.
        reason: String,
    },
    /// The TLS handshake or the hello exchange did not finish in time.
    #[error("handshake with {peer} timed out")]
    HandshakeTimeout {
        /// The peer's address.
        peer: SocketAddr,
    },
    /// The peer finished or reset the control stream while the connection
    /// stayed up.
    #[error("{peer} closed the control stream")]
    ControlStreamClosed {
        /// The peer's address.
        peer: SocketAddr,
    },
    /// A raw payload was announced longer than the receiver accepts; only
    /// its stream was refused, the connection stays up.
    #[error("{peer} announced a payload of {len} bytes, over the limit of {max} bytes")]
    PayloadTooLarge {
        /// The peer's address.
        peer: SocketAddr,
        /// The length announced.
        len: u64,
        /// The limit in force.
        max: u64,
    },
    /// The peer finished or reset a stream before the raw payload it
    /// announced was whole.
    #[error("{peer} ended a {len}-byte payload after {got} bytes")]
    PayloadTruncated {
        /// The peer's address.
        peer: SocketAddr,
        /// Bytes that arrived.
        got: u64,
        /// Bytes announced.
        len: u64,
    },
    /// The endpoint was closed; it accepts and connects no more.
    #[error("the endpoint is closed")]
    EndpointClosed,
}

impl TransportError {
    /// The error for a connection that ended with `source`, recognising a
    /// peer's refusal.
    fn from_connection(peer: SocketAddr, source: quinn::ConnectionError) -> Self {
        if let quinn::ConnectionError::ApplicationClosed(close) = &source {
            if CloseCode::from_code(close.error_code) == Some(CloseCode::Refused) {
                return Self::Refused {
                    peer,
                    reason: String::from_utf8_lossy(&close.reason).into_owned(),
                };
            }
        }
        Self::Connection { peer, source }
    }

    /// True when TLS refused the handshake: a certificate not issued by the
    /// cluster CA, or none at all.
    pub fn is_tls_rejection(&self) -> bool {
        match self {
            Self::Connection { source, .. } => match source {
                quinn::ConnectionError::TransportError(e) => is_tls_alert(e.code),
                quinn::ConnectionError::ConnectionClosed(close) => is_tls_alert(close.error_code),
                _ => false,
            },
            _ => false,
        }
    }

    /// The [`CloseCode`] the peer closed the connection with, if it did.
    pub fn close_code(&self) -> Option<CloseCode> {
        match self {
            Self::Refused { .. } => Some(CloseCode::Refused),
            Self::Connection {
                source: quinn::ConnectionError::ApplicationClosed(close),
                ..
            } => CloseCode::from_code(close.error_code),
            _ => None,
        }
    }
}

/// QUIC carries TLS alerts as transport error codes `0x100..=0x1ff` (RFC 9001 §4.8).
fn is_tls_alert(code: quinn::TransportErrorCode) -> bool {
    (0x100..=0x1ff).contains(&u64::from(code))
}
