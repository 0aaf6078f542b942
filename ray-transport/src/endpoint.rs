//! A QUIC endpoint that accepts and opens authenticated connections.
//!
//! Every endpoint both serves and connects, with the same
//! [`ClusterCredentials`]. A connection is handed out only after mutual TLS
//! and the hello exchange on its control stream:
//!
//! 1. the connecting side opens a bidirectional stream and sends
//!    [`Message::Hello`] (protocol version, build fingerprint, who it is);
//! 2. the accepting side answers [`Message::HelloOk`] (who it is), or
//!    [`Message::Refused`] with a reason and then closes with
//!    [`CloseCode::Refused`] when the versions or builds differ.
//!
//! That stream stays open as the connection's control stream.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use ray_proto::wire::{BuildFingerprint, Envelope, Message, Role, PROTOCOL_VERSION};
use ray_proto::{NodeId, WorkerId};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::connection::{
    read_error, stream_error, Connection, PeerIdentity, ReadFailure, RecvHalf, SendHalf,
};
use super::frame::{self, FrameError, DEFAULT_MAX_FRAME_LEN};
use super::tls::{ClusterCredentials, SERVER_NAME};
use super::{CloseCode, TransportError};

/// QUIC tuning. The defaults suit a datacenter or loopback; quinn's own
/// defaults suit 100 Mbps with a 100 ms round trip and would cap one
/// stream's throughput far below what a local link carries.
#[derive(Debug, Clone)]
pub struct TransportConfig {
    /// Bytes one stream may have in flight towards us (default 16 MiB),
    /// at most the socket's receive buffer (see `socket_buffer`).
    pub stream_receive_window: u32,
    /// Bytes all streams of a connection may have in flight towards us
    /// (default 64 MiB), at most the socket's receive buffer.
    pub receive_window: u32,
    /// Bytes we may have in flight towards the peer, all streams together
    /// (default 64 MiB).
    pub send_window: u64,
    /// How often to send a keep-alive on an idle connection (default 2 s);
    /// `None` lets an idle connection time out.
    pub keep_alive_interval: Option<Duration>,
    /// A connection that hears nothing for this long is dead (default 10 s).
    pub idle_timeout: Duration,
    /// Time allowed for the TLS handshake and the hello exchange together
    /// (default 10 s).
    pub handshake_timeout: Duration,
    /// The round-trip estimate before any is measured (default 10 ms;
    /// quinn assumes 333 ms, which slows recovery of a lost first packet).
    pub initial_rtt: Duration,
    /// Streams the peer may open towards us at once, each direction
    /// (default 1024).
    pub max_concurrent_streams: u32,
    /// The largest control frame accepted or sent (default
    /// [`DEFAULT_MAX_FRAME_LEN`]).
    pub max_frame_len: u32,
    /// The largest UDP payload this endpoint accepts, and the top of the
    /// path-MTU search (default 65,527, the most quinn allows; IPv4 carries
    /// at most 65,507). Packets start at QUIC's safe 1,200 bytes and grow
    /// only as far as probes get through: about 1,450 on Ethernet, 8,950
    /// with jumbo frames, 65,495 on loopback. quinn's defaults (accept
    /// 1,472, search up to 1,452) kept every packet near 1.4 KiB even on
    /// links that carry 64 KiB.
    ///
    /// quinn reserves address space for receiving in proportion: this
    /// times 2,048 (64 GRO segments × 32 datagrams per batch), 128 MiB at
    /// the default. It is zeroed lazily and only the pages datagrams land
    /// in become resident: an idle cluster worker measured 9.1 MB of RSS
    /// (`workloads --mode cluster --one-run memory`).
    pub max_udp_payload: u16,
    /// Whether to hand the kernel batches of equal packets in one call
    /// (UDP GSO; default off). On Linux 6.x loopback quinn's probes for
    /// larger packets failed under GSO, pinning packets at 1,200 bytes
    /// (figures in `docs/perf-log/2026-11-figures-from-code-comments.md`).
    /// Once packets have grown past a few KiB a batch saves
    /// little; on a 1,500-byte network, where packets stay near 1.4 KiB,
    /// it saves system calls and is worth turning on.
    pub segmentation_offload: bool,
    /// Kernel send and receive buffer asked for on the UDP socket, in bytes
    /// (default 4 MiB). Linux caps it at `net.core.rmem_max` /
    /// `wmem_max`, 208 KiB on a stock kernel, which holds only three
    /// 64 KiB packets: raise those sysctls on hosts that move large
    /// objects (the figures in README.md were taken with 4 MiB). A capped
    /// buffer is reported at debug level.
    ///
    /// The receive windows above are capped at the buffer the kernel
    /// grants: a sender given more credit than the socket holds fills it
    /// while the reading thread is busy, and the kernel drops the rest
    /// (100 MiB transfers on loopback with 16/64 MiB windows over a 4 MiB
    /// buffer lost 248–574 datagrams per run of `workloads --mode cluster
    /// transfer`, each loss halving the congestion window; none once
    /// capped). This is TCP's rule too (the window advertised never exceeds
    /// the receive buffer); on a stock kernel it means 208 KiB windows,
    /// one more reason to raise `net.core.rmem_max`.
    pub socket_buffer: usize,
    /// Bytes a new connection may have in flight before its first
    /// acknowledgement (congestion control's initial window; default
    /// 1 MiB). With quinn's 12,000 bytes, sized for 1,200-byte packets on
    /// the internet, the first 100 MiB on a fresh loopback connection took
    /// 135–253 ms against 94–120 ms (three runs each); cubic still backs
    /// off on loss.
    pub initial_window: u64,
}

impl Default for TransportConfig {
    fn default() -> Self {
        Self {
            stream_receive_window: 16 << 20,
            receive_window: 64 << 20,
            send_window: 64 << 20,
            keep_alive_interval: Some(Duration::from_secs(2)),
            idle_timeout: Duration::from_secs(10),
            handshake_timeout: Duration::from_secs(10),
            initial_rtt: Duration::from_millis(10),
            max_concurrent_streams: 1024,
            max_frame_len: DEFAULT_MAX_FRAME_LEN,
            max_udp_payload: 65_527,
            segmentation_offload: false,
            socket_buffer: 4 << 20,
            initial_window: 1 << 20,
        }
    }
}

impl TransportConfig {
    /// The receive windows, each capped at `granted` bytes of socket
    /// receive buffer (no cap when the kernel did not say).
    fn receive_windows(&self, granted: usize) -> (u32, u32) {
        let cap = u32::try_from(granted).unwrap_or(u32::MAX);
        let cap = if cap == 0 { u32::MAX } else { cap };
        (
            self.stream_receive_window.min(cap),
            self.receive_window.min(cap),
        )
    }

    /// quinn's transport settings, for a socket granted `granted` bytes of
    /// receive buffer.
    fn to_quinn(&self, granted: usize) -> Result<quinn::TransportConfig, TransportError> {
        let idle = quinn::IdleTimeout::try_from(self.idle_timeout)
            .map_err(|e| TransportError::InvalidConfig(format!("idle_timeout: {e}")))?;
        let (stream_window, window) = self.receive_windows(granted);
        let mut t = quinn::TransportConfig::default();
        t.stream_receive_window(quinn::VarInt::from_u32(stream_window))
            .receive_window(quinn::VarInt::from_u32(window))
            .send_window(self.send_window)
            .keep_alive_interval(self.keep_alive_interval)
            .max_idle_timeout(Some(idle))
            .initial_rtt(self.initial_rtt)
            .max_concurrent_bidi_streams(quinn::VarInt::from_u32(self.max_concurrent_streams))
            .max_concurrent_uni_streams(quinn::VarInt::from_u32(self.max_concurrent_streams))
            .enable_segmentation_offload(self.segmentation_offload);
        let mut mtu = quinn::MtuDiscoveryConfig::default();
        mtu.upper_bound(self.max_udp_payload);
        t.mtu_discovery_config(Some(mtu));
        let mut cubic = quinn::congestion::CubicConfig::default();
        cubic.initial_window(self.initial_window);
        t.congestion_controller_factory(Arc::new(cubic));
        Ok(t)
    }

    fn to_quinn_endpoint(&self) -> Result<quinn::EndpointConfig, TransportError> {
        let mut e = quinn::EndpointConfig::default();
        e.max_udp_payload_size(self.max_udp_payload)
            .map_err(|e| TransportError::InvalidConfig(format!("max_udp_payload: {e}")))?;
        Ok(e)
    }

    /// Binds the UDP socket and asks for its buffers; returns it with the
    /// receive buffer granted (0 if the kernel does not say). A refused
    /// buffer size is not an error: the socket works with the kernel's
    /// default.
    fn bind_socket(
        &self,
        addr: SocketAddr,
    ) -> Result<(std::net::UdpSocket, usize), TransportError> {
        let socket = std::net::UdpSocket::bind(addr)
            .map_err(|source| TransportError::Bind { addr, source })?;
        let state = quinn::udp::UdpSocketState::new((&socket).into())
            .map_err(|source| TransportError::Bind { addr, source })?;
        let _ = state.set_recv_buffer_size((&socket).into(), self.socket_buffer);
        let _ = state.set_send_buffer_size((&socket).into(), self.socket_buffer);
        // Linux reports twice what it grants (its own overhead counted).
        let granted = state.recv_buffer_size((&socket).into()).unwrap_or(0) / 2;
        if granted < self.socket_buffer {
            tracing::debug!(
                target: "ray::transport",
                asked = self.socket_buffer,
                granted,
                "UDP receive buffer capped by net.core.rmem_max"
            );
        }
        Ok((socket, granted))
    }
}

/// Who this endpoint is, and how it talks.
#[derive(Debug, Clone)]
pub struct EndpointConfig {
    /// What kind of process this is.
    pub role: Role,
    /// This process's node, when it belongs to one.
    pub node: Option<NodeId>,
    /// This process's worker id, when it is a worker or driver.
    pub worker: Option<WorkerId>,
    /// This build's fingerprint; peers with another one are refused.
    pub build_fingerprint: BuildFingerprint,
    /// QUIC tuning.
    pub transport: TransportConfig,
}

impl EndpointConfig {
    /// A configuration with no node or worker id and default tuning.
    pub fn new(role: Role, build_fingerprint: BuildFingerprint) -> Self {
        Self {
            role,
            node: None,
            worker: None,
            build_fingerprint,
            transport: TransportConfig::default(),
        }
    }

    fn identity(&self) -> PeerIdentity {
        PeerIdentity {
            role: self.role,
            node: self.node,
            worker: self.worker,
        }
    }
}

/// Connections that passed the handshake, waiting for [`Endpoint::accept`].
const ACCEPT_QUEUE: usize = 64;

/// A QUIC endpoint on one UDP socket: it accepts connections from cluster
/// peers and opens connections to them.
///
/// Cloning is cheap and shares the endpoint. When the last clone is dropped
/// the endpoint stops accepting; connections already made stay up.
#[derive(Clone)]
pub struct Endpoint {
    inner: Arc<Inner>,
}

struct Inner {
    quic: quinn::Endpoint,
    config: Arc<EndpointConfig>,
    accepted: tokio::sync::Mutex<mpsc::Receiver<Connection>>,
    accept_loop: tokio::task::JoinHandle<()>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Aborting the loop drops its JoinSet, which aborts handshakes in flight.
        self.accept_loop.abort();
    }
}

impl Endpoint {
    /// Binds a UDP socket on `addr` (port 0 picks one) and starts accepting.
    ///
    /// Must be called inside a tokio runtime.
    ///
    /// # Errors
    ///
    /// [`TransportError::NoRuntime`] outside a runtime,
    /// [`TransportError::TlsConfig`] or [`TransportError::InvalidConfig`]
    /// for unusable credentials or tuning, [`TransportError::Bind`] if the
    /// socket cannot be bound.
    pub fn bind(
        addr: SocketAddr,
        credentials: &ClusterCredentials,
        config: EndpointConfig,
    ) -> Result<Self, TransportError> {
        let runtime =
            tokio::runtime::Handle::try_current().map_err(|_| TransportError::NoRuntime)?;
        let (socket, granted) = config.transport.bind_socket(addr)?;
        let transport = Arc::new(config.transport.to_quinn(granted)?);

        let server_crypto = QuicServerConfig::try_from(credentials.server_config()?)
            .map_err(|e| TransportError::TlsConfig(e.to_string()))?;
        let mut server = quinn::ServerConfig::with_crypto(Arc::new(server_crypto));
        server.transport_config(transport.clone());

        let client_crypto = QuicClientConfig::try_from(credentials.client_config()?)
            .map_err(|e| TransportError::TlsConfig(e.to_string()))?;
        let mut client = quinn::ClientConfig::new(Arc::new(client_crypto));
        client.transport_config(transport);

        // The endpoint runs on the current runtime (checked above).
        let mut quic = quinn::Endpoint::new(
            config.transport.to_quinn_endpoint()?,
            Some(server),
            socket,
            Arc::new(quinn::TokioRuntime),
        )
        .map_err(|source| TransportError::Bind { addr, source })?;
        quic.set_default_client_config(client);

        let config = Arc::new(config);
        let (tx, rx) = mpsc::channel(ACCEPT_QUEUE);
        let accept_loop = runtime.spawn(accept_loop(quic.clone(), config.clone(), tx));
        Ok(Self {
            inner: Arc::new(Inner {
                quic,
                config,
                accepted: tokio::sync::Mutex::new(rx),
                accept_loop,
            }),
        })
    }

    /// The address the socket is bound to.
    ///
    /// # Errors
    ///
    /// The OS error if the socket cannot say.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.inner.quic.local_addr()
    }

    /// The configuration this endpoint was bound with.
    pub fn config(&self) -> &EndpointConfig {
        &self.inner.config
    }

    /// Connects to the endpoint at `addr`: mutual TLS, then the hello exchange.
    ///
    /// Each call makes a new connection; [`super::Connections`] reuses them.
    /// Cancelling the future drops the half-made connection.
    ///
    /// # Errors
    ///
    /// [`TransportError::Connection`] if TLS fails (check
    /// [`TransportError::is_tls_rejection`]) or the peer is unreachable,
    /// [`TransportError::Refused`] with the peer's reason,
    /// [`TransportError::HandshakeTimeout`], or [`TransportError::Frame`] /
    /// [`TransportError::ProtocolViolation`] if the peer's answer is bad.
    pub async fn connect(&self, addr: SocketAddr) -> Result<Connection, TransportError> {
        let config = &self.inner.config;
        let deadline = Instant::now() + config.transport.handshake_timeout;
        let connecting = self
            .inner
            .quic
            .connect(addr, SERVER_NAME)
            .map_err(|source| TransportError::Connect { peer: addr, source })?;
        let quic = tokio::time::timeout_at(deadline, connecting)
            .await
            .map_err(|_| TransportError::HandshakeTimeout { peer: addr })?
            .map_err(|source| TransportError::from_connection(addr, source))?;
        match tokio::time::timeout_at(deadline, client_hello(&quic, config)).await {
            Ok(result) => result,
            Err(_) => {
                quic.close(CloseCode::HandshakeTimeout.into(), b"no answer to hello");
                Err(TransportError::HandshakeTimeout { peer: addr })
            }
        }
    }

    /// The next connection that passed the handshake.
    ///
    /// Handshakes run concurrently in the background, so a slow or hostile
    /// peer delays no one else; connections that fail TLS or the hello
    /// exchange are dropped (and logged at debug level), never returned.
    /// Cancel-safe.
    ///
    /// # Errors
    ///
    /// [`TransportError::EndpointClosed`] once the endpoint is closed.
    pub async fn accept(&self) -> Result<Connection, TransportError> {
        self.inner
            .accepted
            .lock()
            .await
            .recv()
            .await
            .ok_or(TransportError::EndpointClosed)
    }

    /// Closes every connection with `code` and stops accepting.
    pub fn close(&self, code: CloseCode, reason: &str) {
        self.inner.quic.close(code.into(), reason.as_bytes());
    }

    /// Waits until every connection is closed and its close is sent.
    pub async fn wait_idle(&self) {
        self.inner.quic.wait_idle().await;
    }
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("local_addr", &self.local_addr().ok())
            .field("role", &self.inner.config.role)
            .finish_non_exhaustive()
    }
}

async fn accept_loop(
    quic: quinn::Endpoint,
    config: Arc<EndpointConfig>,
    accepted: mpsc::Sender<Connection>,
) {
    let mut handshakes = JoinSet::new();
    loop {
        tokio::select! {
            incoming = quic.accept() => {
                let Some(incoming) = incoming else { break };
                let config = config.clone();
                let accepted = accepted.clone();
                handshakes.spawn(async move {
                    let peer = incoming.remote_address();
                    match server_handshake(incoming, &config).await {
                        Ok(conn) => {
                            tracing::debug!(target: "ray::transport", peer = %peer, role = ?conn.peer().role, "connection.accepted");
                            // An error means no one accepts any more: the endpoint is gone.
                            let _ = accepted.send(conn).await;
                        }
                        Err(e) => {
                            tracing::debug!(target: "ray::transport", peer = %peer, error = %e, "connection.refused");
                        }
                    }
                });
            }
            Some(_) = handshakes.join_next(), if !handshakes.is_empty() => {}
        }
    }
}

/// The accepting side of the handshake.
async fn server_handshake(
    incoming: quinn::Incoming,
    config: &EndpointConfig,
) -> Result<Connection, TransportError> {
    let peer = incoming.remote_address();
    let deadline = Instant::now() + config.transport.handshake_timeout;
    let quic = tokio::time::timeout_at(deadline, incoming)
        .await
        .map_err(|_| TransportError::HandshakeTimeout { peer })?
        .map_err(|source| TransportError::Connection { peer, source })?;
    match tokio::time::timeout_at(deadline, server_hello(&quic, config, deadline)).await {
        Ok(result) => result,
        Err(_) => {
            quic.close(CloseCode::HandshakeTimeout.into(), b"no hello in time");
            Err(TransportError::HandshakeTimeout { peer })
        }
    }
}

async fn server_hello(
    quic: &quinn::Connection,
    config: &EndpointConfig,
    deadline: Instant,
) -> Result<Connection, TransportError> {
    let peer = quic.remote_address();
    let max_frame_len = config.transport.max_frame_len;
    let (send, recv) = quic
        .accept_bi()
        .await
        .map_err(|source| TransportError::from_connection(peer, source))?;
    let mut send = SendHalf::new(send);
    let mut recv = RecvHalf::new(recv, max_frame_len);

    let hello = match recv.read_envelope().await {
        Ok(envelope) => envelope,
        Err(ReadFailure::Frame(FrameError::VersionMismatch { got, expected })) => {
            let reason = format!("protocol version {got}, this peer speaks {expected}");
            return Err(refuse(quic, &mut send, reason, max_frame_len, deadline).await);
        }
        Err(failure) => return Err(read_error(quic, peer, failure)),
    };
    let Message::Hello {
        protocol,
        build_fingerprint,
        role,
        node,
        worker,
    } = hello.body
    else {
        let reason = format!("expected Hello, got {:?}", hello.body);
        quic.close(CloseCode::ProtocolViolation.into(), reason.as_bytes());
        return Err(TransportError::ProtocolViolation { peer, reason });
    };
    if protocol != PROTOCOL_VERSION {
        let reason = format!("protocol version {protocol}, this peer speaks {PROTOCOL_VERSION}");
        return Err(refuse(quic, &mut send, reason, max_frame_len, deadline).await);
    }
    if build_fingerprint != config.build_fingerprint {
        let reason = format!(
            "build {build_fingerprint}, this peer runs build {}",
            config.build_fingerprint
        );
        return Err(refuse(quic, &mut send, reason, max_frame_len, deadline).await);
    }

    let ours = config.identity();
    let ok = Envelope::new(Message::HelloOk {
        role: ours.role,
        node: ours.node,
        worker: ours.worker,
    });
    let frame = frame::encode(&ok, max_frame_len)
        .map_err(|source| TransportError::Frame { peer, source })?;
    send.send_frame(&frame)
        .await
        .map_err(|e| stream_error(peer, e.into()))?;
    let identity = PeerIdentity { role, node, worker };
    Ok(Connection::new(
        quic.clone(),
        identity,
        send,
        recv,
        max_frame_len,
    ))
}

/// Answers `Refused`, waits (until `deadline`) for the peer to have it, and
/// closes with [`CloseCode::Refused`]; the reason also rides on the close.
async fn refuse(
    quic: &quinn::Connection,
    send: &mut SendHalf,
    reason: String,
    max_frame_len: u32,
    deadline: Instant,
) -> TransportError {
    let peer = quic.remote_address();
    let refused = Envelope::new(Message::Refused {
        reason: reason.clone(),
    });
    if let Ok(frame) = frame::encode(&refused, max_frame_len) {
        if send.send_frame(&frame).await.is_ok() && send.stream_mut().finish().is_ok() {
            // quinn drops unsent stream data on close: wait for the ack (or
            // for the peer to close first, having read it).
            let _ = tokio::time::timeout_at(deadline, send.stream_mut().stopped()).await;
        }
    }
    quic.close(CloseCode::Refused.into(), reason.as_bytes());
    TransportError::Refused { peer, reason }
}

/// The connecting side of the hello exchange.
async fn client_hello(
    quic: &quinn::Connection,
    config: &EndpointConfig,
) -> Result<Connection, TransportError> {
    let peer = quic.remote_address();
    let max_frame_len = config.transport.max_frame_len;
    let (send, recv) = quic
        .open_bi()
        .await
        .map_err(|source| TransportError::from_connection(peer, source))?;
    let mut send = SendHalf::new(send);
    let mut recv = RecvHalf::new(recv, max_frame_len);

    let hello = Envelope::new(Message::Hello {
        protocol: PROTOCOL_VERSION,
        build_fingerprint: config.build_fingerprint,
        role: config.role,
        node: config.node,
        worker: config.worker,
    });
    let frame = frame::encode(&hello, max_frame_len)
        .map_err(|source| TransportError::Frame { peer, source })?;
    send.send_frame(&frame)
        .await
        .map_err(|e| stream_error(peer, e.into()))?;

    let answer = match recv.read_envelope().await {
        Ok(answer) => answer,
        // A peer of another version answers in its own format.
        Err(ReadFailure::Frame(FrameError::VersionMismatch { got, expected })) => {
            let reason = format!("peer speaks protocol version {got}, this build {expected}");
            quic.close(CloseCode::Refused.into(), reason.as_bytes());
            return Err(TransportError::Refused { peer, reason });
        }
        Err(failure) => return Err(read_error(quic, peer, failure)),
    };
    match answer.body {
        Message::HelloOk { role, node, worker } => Ok(Connection::new(
            quic.clone(),
            PeerIdentity { role, node, worker },
            send,
            recv,
            max_frame_len,
        )),
        Message::Refused { reason } => {
            quic.close(CloseCode::Refused.into(), reason.as_bytes());
            Err(TransportError::Refused { peer, reason })
        }
        other => {
            let reason = format!("expected HelloOk or Refused, got {other:?}");
            quic.close(CloseCode::ProtocolViolation.into(), reason.as_bytes());
            Err(TransportError::ProtocolViolation { peer, reason })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::TransportConfig;

    #[test]
    fn receive_windows_never_exceed_the_granted_socket_buffer() {
        let t = TransportConfig::default();
        assert_eq!(t.receive_windows(4 << 20), (4 << 20, 4 << 20));
        // A buffer larger than the windows leaves them as configured.
        assert_eq!(
            t.receive_windows(1 << 30),
            (t.stream_receive_window, t.receive_window)
        );
        // The kernel did not say: no cap.
        assert_eq!(
            t.receive_windows(0),
            (t.stream_receive_window, t.receive_window)
        );
        let small = TransportConfig {
            stream_receive_window: 1 << 20,
            ..TransportConfig::default()
        };
        assert_eq!(small.receive_windows(2 << 20), (1 << 20, 2 << 20));
    }
}
