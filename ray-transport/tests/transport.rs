//! The QUIC transport: mutual TLS with a cluster CA, the hello exchange,
//! validated frames, and credentials on disk.
//!
//! Two endpoints on 127.0.0.1 in one process; "raw" clients speak quinn
//! directly to send what a well-behaved endpoint never would.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use proptest::prelude::*;
use quinn::crypto::rustls::QuicClientConfig;
use ray_proto::wire::{
    BinaryFollows, FetchBinary, GcsReply, GcsRequest, GetObject, ObjectFollows, UploadBinary,
    WorkerReply, WorkerRequest,
};
use ray_proto::{NodeId, WorkerId};
use ray_transport::frame::{self, FrameDecoder, DEFAULT_MAX_FRAME_LEN};
use ray_transport::{
    BuildFingerprint, CloseCode, ClusterCa, ClusterCredentials, Connections, Endpoint,
    EndpointConfig, Envelope, FrameError, Message, Role, TransportError, ALPN, PROTOCOL_VERSION,
    SERVER_NAME,
};

const BUILD: BuildFingerprint = BuildFingerprint([0x42; 32]);

fn localhost() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

fn config(role: Role, worker: u64) -> EndpointConfig {
    let mut config = EndpointConfig::new(role, BUILD);
    config.worker = Some(WorkerId(worker));
    config.node = Some(NodeId(1));
    config
}

fn server(creds: &ClusterCredentials) -> (Endpoint, SocketAddr) {
    let endpoint = Endpoint::bind(localhost(), creds, config(Role::Node, 0)).expect("bind server");
    let addr = endpoint.local_addr().expect("local addr");
    (endpoint, addr)
}

fn client(creds: &ClusterCredentials, worker: u64) -> Endpoint {
    Endpoint::bind(localhost(), creds, config(Role::Worker, worker)).expect("bind client")
}

/// Answers every `Ping` on `conn` with a `Pong`, until the connection ends.
fn serve_pings(conn: ray_transport::Connection) {
    tokio::spawn(async move {
        while let Ok(envelope) = conn.recv().await {
            if let Message::Ping { seq } = envelope.body {
                if conn.send(&Message::Pong { seq }.into()).await.is_err() {
                    break;
                }
            }
        }
    });
}

async fn ping(conn: &ray_transport::Connection, seq: u64) {
    conn.send(&Message::Ping { seq }.into())
        .await
        .expect("send ping");
    let answer = conn.recv().await.expect("receive pong");
    assert_eq!(answer.body, Message::Pong { seq });
}

/// A good client connects and is the next connection the server accepts:
/// whatever failed before it was never handed out.
async fn server_still_serves(server: &Endpoint, addr: SocketAddr, creds: &ClusterCredentials) {
    let good = client(creds, 99);
    let (conn, accepted) = tokio::join!(good.connect(addr), server.accept());
    let conn = conn.expect("good client connects");
    let accepted = accepted.expect("server accepts");
    assert_eq!(accepted.peer().worker, Some(WorkerId(99)));
    serve_pings(accepted);
    ping(&conn, 1).await;
}

/// A quinn client outside the transport, with any rustls configuration.
async fn raw_connect(
    crypto: Arc<rustls::ClientConfig>,
    addr: SocketAddr,
) -> Result<quinn::Connection, quinn::ConnectionError> {
    let mut endpoint = quinn::Endpoint::client(localhost()).expect("raw client endpoint");
    let crypto = QuicClientConfig::try_from(crypto).expect("QUIC-capable rustls config");
    endpoint.set_default_client_config(quinn::ClientConfig::new(Arc::new(crypto)));
    endpoint
        .connect(addr, SERVER_NAME)
        .expect("start connecting")
        .await
}

/// Reads one frame from a raw stream.
async fn raw_read(recv: &mut quinn::RecvStream) -> Result<Envelope, String> {
    let mut decoder = FrameDecoder::new(DEFAULT_MAX_FRAME_LEN);
    loop {
        match recv.read(decoder.buf()).await {
            Ok(Some(n)) => {
                if let Some(envelope) = decoder.advance(n).map_err(|e| e.to_string())? {
                    return Ok(envelope);
                }
            }
            Ok(None) => return Err("stream finished".into()),
            Err(e) => return Err(e.to_string()),
        }
    }
}

fn hello(protocol: u16, build: BuildFingerprint) -> Message {
    Message::Hello {
        protocol,
        build_fingerprint: build,
        role: Role::Worker,
        node: None,
        worker: Some(WorkerId(5)),
    }
}

/// The application close code of a connection that ended.
async fn close_code(conn: &quinn::Connection) -> Option<CloseCode> {
    match conn.closed().await {
        quinn::ConnectionError::ApplicationClosed(close) => CloseCode::from_code(close.error_code),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handshake_with_one_cluster_ca_succeeds_and_ping_pong_round_trips() {
    let ca = ClusterCa::generate().expect("CA");
    let server_creds = ca.issue("node-1").expect("issue");
    let client_creds = ca.issue("worker-7").expect("issue");
    let (server, addr) = server(&server_creds);
    let client = client(&client_creds, 7);

    let (conn, accepted) = tokio::join!(client.connect(addr), server.accept());
    let conn = conn.expect("connect");
    let accepted = accepted.expect("accept");

    // Each side learned who the other is from the hello exchange.
    assert_eq!(conn.peer().role, Role::Node);
    assert_eq!(conn.peer().worker, Some(WorkerId(0)));
    assert_eq!(accepted.peer().role, Role::Worker);
    assert_eq!(accepted.peer().worker, Some(WorkerId(7)));
    assert_eq!(accepted.peer().node, Some(NodeId(1)));

    serve_pings(accepted);
    for seq in [0, 1, u64::MAX] {
        ping(&conn, seq).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_with_certificate_from_another_ca_is_refused_at_tls() {
    let ca = ClusterCa::generate().expect("CA");
    let other_ca = ClusterCa::generate().expect("other CA");
    let server_creds = ca.issue("node-1").expect("issue");
    let (server, addr) = server(&server_creds);

    // The intruder trusts the cluster CA, so it accepts the server; only the
    // server's check of the client certificate can stop it.
    let dir = TempDir::new();
    other_ca
        .issue("worker-6")
        .expect("issue")
        .save(dir.path())
        .expect("save");
    ca.issue("unused")
        .expect("issue")
        .save(&dir.path().join("cluster"))
        .expect("save");
    std::fs::copy(dir.path().join("cluster/ca.pem"), dir.path().join("ca.pem")).expect("copy");
    let intruder = ClusterCredentials::load(dir.path()).expect("load");
    assert_eq!(intruder.ca_certificate(), ca.certificate());

    let err = client(&intruder, 6)
        .connect(addr)
        .await
        .expect_err("a certificate from another CA is refused");
    assert!(err.is_tls_rejection(), "not a TLS rejection: {err}");

    server_still_serves(&server, addr, &ca.issue("worker-99").expect("issue")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_with_certificate_from_another_ca_is_refused_at_tls() {
    let ca = ClusterCa::generate().expect("CA");
    let other_ca = ClusterCa::generate().expect("other CA");
    let impostor = other_ca.issue("node-1").expect("issue");
    let (_server, addr) = server(&impostor);

    let err = client(&ca.issue("worker-7").expect("issue"), 7)
        .connect(addr)
        .await
        .expect_err("a server certificate from another CA is refused");
    assert!(err.is_tls_rejection(), "not a TLS rejection: {err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_without_certificate_is_refused_at_tls() {
    let ca = ClusterCa::generate().expect("CA");
    let server_creds = ca.issue("node-1").expect("issue");
    let (server, addr) = server(&server_creds);

    // Trusts the cluster CA, but presents no certificate.
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.certificate().clone()).expect("root");
    let mut crypto = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_protocol_versions(&[&rustls::version::TLS13])
    .expect("TLS 1.3")
    .with_root_certificates(roots)
    .with_no_client_auth();
    crypto.alpn_protocols = vec![ALPN.to_vec()];

    // TLS 1.3 lets the client finish its half before the server has checked
    // it, so the refusal may surface at connect or at the first exchange.
    let error = match raw_connect(Arc::new(crypto), addr).await {
        Err(e) => e,
        Ok(conn) => {
            if let Ok((mut send, mut recv)) = conn.open_bi().await {
                let frame =
                    frame::encode(&hello(PROTOCOL_VERSION, BUILD).into(), 1 << 20).expect("encode");
                let _ = send.write_all(&frame).await;
                let _ = raw_read(&mut recv).await;
            }
            conn.closed().await
        }
    };
    let error = TransportError::Connection {
        peer: addr,
        source: error,
    };
    assert!(error.is_tls_rejection(), "not a TLS rejection: {error}");

    server_still_serves(&server, addr, &ca.issue("worker-99").expect("issue")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protocol_version_mismatch_is_refused_with_a_reason() {
    let ca = ClusterCa::generate().expect("CA");
    let (server, addr) = server(&ca.issue("node-1").expect("issue"));
    let creds = ca.issue("worker-5").expect("issue");

    // A newer peer: its envelopes and its hello both carry another version.
    let newer = Envelope {
        version: PROTOCOL_VERSION + 1,
        body: hello(PROTOCOL_VERSION + 1, BUILD),
    };
    // A peer whose envelope format matches but whose hello says otherwise.
    let confused = Envelope::new(hello(PROTOCOL_VERSION + 1, BUILD));

    for envelope in [newer, confused] {
        let conn = raw_connect(creds.client_config().expect("client config"), addr)
            .await
            .expect("TLS succeeds");
        let (mut send, mut recv) = conn.open_bi().await.expect("open control stream");
        let frame = frame::encode(&envelope, DEFAULT_MAX_FRAME_LEN).expect("encode");
        send.write_all(&frame).await.expect("send hello");

        let answer = raw_read(&mut recv)
            .await
            .expect("an answer before the close");
        let Message::Refused { reason } = answer.body else {
            panic!("expected Refused, got {:?}", answer.body);
        };
        assert!(reason.contains("protocol version"), "reason: {reason}");
        assert_eq!(close_code(&conn).await, Some(CloseCode::Refused));
    }

    server_still_serves(&server, addr, &creds).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn build_fingerprint_mismatch_is_refused_with_a_reason() {
    let ca = ClusterCa::generate().expect("CA");
    let (_server, addr) = server(&ca.issue("node-1").expect("issue"));
    let mut other_build = config(Role::Worker, 3);
    other_build.build_fingerprint = BuildFingerprint([0x17; 32]);
    let client = Endpoint::bind(
        localhost(),
        &ca.issue("worker-3").expect("issue"),
        other_build,
    )
    .expect("bind");

    let err = client.connect(addr).await.expect_err("refused");
    let TransportError::Refused { reason, .. } = &err else {
        panic!("expected Refused, got {err}");
    };
    assert!(reason.contains("build"), "reason: {reason}");
    assert_eq!(err.close_code(), Some(CloseCode::Refused));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_first_frame_closes_that_connection_only() {
    let ca = ClusterCa::generate().expect("CA");
    let (server, addr) = server(&ca.issue("node-1").expect("issue"));
    let creds = ca.issue("worker-5").expect("issue");

    let mut random = vec![0u8; 200];
    let mut x = 0x9e37_79b9_7f4a_7c15_u64;
    for b in &mut random {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    // A plausible length, then garbage.
    let mut garbage = 196u32.to_le_bytes().to_vec();
    garbage.extend(&random[..196]);
    let oversize = (DEFAULT_MAX_FRAME_LEN + 1).to_le_bytes().to_vec();

    for bytes in [random, garbage, oversize] {
        let conn = raw_connect(creds.client_config().expect("client config"), addr)
            .await
            .expect("TLS succeeds");
        let (mut send, _recv) = conn.open_bi().await.expect("open control stream");
        send.write_all(&bytes).await.expect("send");
        assert_eq!(close_code(&conn).await, Some(CloseCode::MalformedFrame));
    }

    server_still_serves(&server, addr, &creds).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_frame_after_handshake_is_a_typed_error_and_closes_the_connection() {
    let ca = ClusterCa::generate().expect("CA");
    let (server, addr) = server(&ca.issue("node-1").expect("issue"));
    let creds = ca.issue("worker-5").expect("issue");

    for bad in [
        [16u32.to_le_bytes().as_slice(), &[0xa5; 16]].concat(),
        (DEFAULT_MAX_FRAME_LEN + 1).to_le_bytes().to_vec(),
    ] {
        // A raw client does the handshake properly, then misbehaves.
        let raw = raw_connect(creds.client_config().expect("client config"), addr)
            .await
            .expect("TLS succeeds");
        let (mut send, mut recv) = raw.open_bi().await.expect("open control stream");
        let frame = frame::encode(
            &hello(PROTOCOL_VERSION, BUILD).into(),
            DEFAULT_MAX_FRAME_LEN,
        )
        .expect("encode");
        send.write_all(&frame).await.expect("send hello");
        let answer = raw_read(&mut recv).await.expect("answer");
        assert!(matches!(answer.body, Message::HelloOk { .. }));
        let accepted = server.accept().await.expect("accepted");

        send.write_all(&bad).await.expect("send garbage");
        let err = accepted
            .recv()
            .await
            .expect_err("a malformed frame is an error");
        assert!(
            matches!(
                err,
                TransportError::Frame {
                    source: FrameError::Invalid(_) | FrameError::TooLarge { .. },
                    ..
                }
            ),
            "unexpected error: {err}"
        );
        assert!(!accepted.is_open());
        assert_eq!(close_code(&raw).await, Some(CloseCode::MalformedFrame));
    }

    server_still_serves(&server, addr, &creds).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_reuses_a_live_connection_and_replaces_a_closed_one() {
    let ca = ClusterCa::generate().expect("CA");
    let (server, addr) = server(&ca.issue("node-1").expect("issue"));
    let server_task = tokio::spawn(async move {
        let mut accepted = 0;
        while let Ok(conn) = server.accept().await {
            accepted += 1;
            serve_pings(conn);
            if accepted == 2 {
                break;
            }
        }
        accepted
    });
    let cache = Connections::new(client(&ca.issue("worker-8").expect("issue"), 8));

    // Concurrent callers share one handshake.
    let (a, b) = tokio::join!(cache.get(addr), cache.get(addr));
    let (a, b) = (a.expect("connect"), b.expect("connect"));
    assert_eq!(a.quic().stable_id(), b.quic().stable_id());
    ping(&a, 1).await;
    let again = cache.get(addr).await.expect("cached");
    assert_eq!(again.quic().stable_id(), a.quic().stable_id());
    assert_eq!(cache.len(), 1);

    a.close(CloseCode::Normal, "done");
    let fresh = cache.get(addr).await.expect("reconnect");
    assert_ne!(fresh.quic().stable_id(), a.quic().stable_id());
    ping(&fresh, 2).await;
    assert_eq!(server_task.await.expect("server task"), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_endpoint_accepts_no_more() {
    let ca = ClusterCa::generate().expect("CA");
    let (server, addr) = server(&ca.issue("node-1").expect("issue"));
    server.close(CloseCode::Normal, "shutting down");
    assert!(matches!(
        server.accept().await,
        Err(TransportError::EndpointClosed)
    ));
    let err = client(&ca.issue("worker-1").expect("issue"), 1)
        .connect(addr)
        .await
        .expect_err("nothing listens");
    assert!(!err.is_tls_rejection(), "{err}");
}

/// A directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Self {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let path = std::env::temp_dir().join(format!(
            "ray-rs-transport-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&path);
        Self(path)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_saved_to_disk_load_and_connect() {
    let dir = TempDir::new();
    let ca_dir = dir.path().join("ca");
    let node_dir = dir.path().join("node");
    let original = ClusterCa::generate().expect("CA");
    original.save(&ca_dir).expect("save CA");
    // A CA read back from disk issues certificates its saved root accepts.
    let ca = ClusterCa::load(&ca_dir).expect("load CA");
    ca.issue("node-1")
        .expect("issue")
        .save(&node_dir)
        .expect("save node");
    let node = ClusterCredentials::load(&node_dir).expect("load node");

    #[cfg(unix)]
    for secret in [ca_dir.join("ca-key.pem"), node_dir.join("key.pem")] {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&secret)
            .expect("stat")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{}", secret.display());
    }

    // The server's certificate comes from the CA read back, the client's
    // from the original: one cluster.
    let (server, addr) = server(&node);
    let client = client(&original.issue("worker-2").expect("issue"), 2);
    let (conn, accepted) = tokio::join!(client.connect(addr), server.accept());
    serve_pings(accepted.expect("accept"));
    ping(&conn.expect("connect"), 3).await;
}

#[test]
fn missing_credential_files_name_the_file() {
    let dir = TempDir::new();
    let err = ClusterCredentials::load(dir.path()).expect_err("nothing there");
    let TransportError::CredentialFile { path, source } = &err else {
        panic!("expected CredentialFile, got {err}");
    };
    assert_eq!(path, &dir.path().join("ca.pem"));
    assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
    assert!(err.to_string().contains("ca.pem"), "message: {err}");

    let err = ClusterCa::load(dir.path()).expect_err("nothing there");
    assert!(
        matches!(err, TransportError::CredentialFile { .. }),
        "{err}"
    );
}

#[test]
fn corrupt_credential_files_are_invalid_credentials() {
    let ca = ClusterCa::generate().expect("CA");
    let creds = ca.issue("node-1").expect("issue");

    // Not PEM at all, and PEM whose certificate bytes are garbage.
    let garbage_pem = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
    for (file, contents) in [
        ("cert.pem", "this is not a certificate"),
        (
            "key.pem",
            "-----BEGIN PRIVATE KEY-----\n!!!\n-----END PRIVATE KEY-----\n",
        ),
        ("key.pem", ""),
        ("ca.pem", garbage_pem),
        ("cert.pem", garbage_pem),
    ] {
        let dir = TempDir::new();
        creds.save(dir.path()).expect("save");
        std::fs::write(dir.path().join(file), contents).expect("corrupt");
        let err = ClusterCredentials::load(dir.path()).expect_err("corrupt file");
        assert!(
            matches!(err, TransportError::InvalidCredentials { .. }),
            "{file}: {err}"
        );
    }

    // A key that belongs to another certificate.
    let dir = TempDir::new();
    creds.save(dir.path()).expect("save");
    let other = TempDir::new();
    ca.issue("node-2")
        .expect("issue")
        .save(other.path())
        .expect("save");
    std::fs::copy(other.path().join("key.pem"), dir.path().join("key.pem")).expect("copy");
    let err = ClusterCredentials::load(dir.path()).expect_err("mismatched key");
    assert!(
        matches!(err, TransportError::InvalidCredentials { .. }),
        "{err}"
    );

    // A CA key saved next to another CA's certificate.
    let dir = TempDir::new();
    ca.save(dir.path()).expect("save");
    let other = TempDir::new();
    ClusterCa::generate()
        .expect("CA")
        .save(other.path())
        .expect("save");
    std::fs::copy(
        other.path().join("ca-key.pem"),
        dir.path().join("ca-key.pem"),
    )
    .expect("copy");
    let err = ClusterCa::load(dir.path()).expect_err("mismatched CA key");
    assert!(
        matches!(err, TransportError::InvalidCredentials { .. }),
        "{err}"
    );
}

fn role() -> impl Strategy<Value = Role> {
    prop_oneof![
        Just(Role::Gcs),
        Just(Role::Node),
        Just(Role::Worker),
        Just(Role::Driver),
        Just(Role::Cli),
    ]
}

fn message() -> impl Strategy<Value = Message> {
    prop_oneof![
        (
            any::<u16>(),
            any::<[u8; 32]>(),
            role(),
            proptest::option::of(any::<u64>()),
            proptest::option::of(any::<u64>()),
        )
            .prop_map(|(protocol, fp, role, node, worker)| Message::Hello {
                protocol,
                build_fingerprint: BuildFingerprint(fp),
                role,
                node: node.map(NodeId),
                worker: worker.map(WorkerId),
            }),
        (
            role(),
            proptest::option::of(any::<u64>()),
            proptest::option::of(any::<u64>())
        )
            .prop_map(|(role, node, worker)| Message::HelloOk {
                role,
                node: node.map(NodeId),
                worker: worker.map(WorkerId),
            }),
        ".{0,200}".prop_map(|reason| Message::Refused { reason }),
        any::<u64>().prop_map(|seq| Message::Ping { seq }),
        any::<u64>().prop_map(|seq| Message::Pong { seq }),
    ]
}

proptest! {
    #[test]
    fn envelope_round_trips_through_a_frame(
        bodies in proptest::collection::vec(message(), 1..8),
        split in any::<prop::sample::Index>(),
    ) {
        let sent: Vec<Envelope> = bodies.into_iter().map(Envelope::new).collect();
        let mut stream = Vec::new();
        for envelope in &sent {
            stream.extend(frame::encode(envelope, DEFAULT_MAX_FRAME_LEN).expect("encode"));
        }
        // Bytes arrive in two reads split anywhere, as a stream may deliver them.
        let (first, second) = stream.split_at(split.index(stream.len() + 1));
        let mut decoder = FrameDecoder::new(DEFAULT_MAX_FRAME_LEN);
        let mut received = Vec::new();
        for mut chunk in [first, second] {
            while let Some(result) = decoder.decode_from(&mut chunk) {
                received.push(result.expect("valid frame"));
            }
        }
        prop_assert_eq!(received, sent);
        prop_assert!(decoder.is_idle());
    }
}

// Raw bytes after a frame on a request stream (transport::bulk).

/// A connected pair: the client's connection and the server's.
async fn connected_pair() -> (
    Endpoint,
    Endpoint,
    ray_transport::Connection,
    ray_transport::Connection,
) {
    let ca = ClusterCa::generate().expect("CA");
    let (server, addr) = server(&ca.issue("node-1").expect("issue"));
    let client = client(&ca.issue("worker-7").expect("issue"), 7);
    let (conn, accepted) = tokio::join!(client.connect(addr), server.accept());
    (
        server,
        client,
        conn.expect("connect"),
        accepted.expect("accept"),
    )
}

/// What a test server does with the payloads of the requests it gets.
#[derive(Clone)]
struct BulkServer {
    /// Sent after `BinaryFollows` / `ObjectFollows`.
    payload: Arc<Vec<u8>>,
    /// The length announced before it (a lie makes a truncated payload).
    announced: u64,
    /// The most an upload may carry.
    max_upload: u64,
    /// Every upload's bytes, or the error reading them.
    uploads: tokio::sync::mpsc::UnboundedSender<Result<Vec<u8>, TransportError>>,
}

/// Serves `conn`'s request streams: `FetchBinary` and `GetObject` get the
/// payload, `UploadBinary` is read and answered `Ok` (or `Error`), `Ping` gets
/// `Pong`.
fn serve_bulk(conn: ray_transport::Connection, server: BulkServer) {
    tokio::spawn(async move {
        while let Ok(mut request) = conn.accept_request().await {
            let server = server.clone();
            tokio::spawn(async move {
                let Ok(envelope) = request.read().await else {
                    return;
                };
                let header = |len| match &envelope.body {
                    Message::Worker(WorkerRequest::GetObject(_)) => Message::from(ObjectFollows {
                        len,
                        refs: Vec::new(),
                    }),
                    _ => Message::from(BinaryFollows { len }),
                };
                match &envelope.body {
                    Message::Gcs(GcsRequest::FetchBinary(_))
                    | Message::Worker(WorkerRequest::GetObject(_)) => {
                        let header = Envelope::new(header(server.announced));
                        let _ = request.respond_with_bytes(&header, &server.payload).await;
                    }
                    Message::Gcs(GcsRequest::UploadBinary(UploadBinary { len, .. })) => {
                        let read = request.read_bytes(*len, server.max_upload).await;
                        let reply = match &read {
                            Ok(_) => Message::Ok,
                            Err(e) => Message::Error {
                                reason: e.to_string(),
                            },
                        };
                        let _ = server.uploads.send(read.map(|b| b.as_slice().to_vec()));
                        let _ = request.respond(&Envelope::new(reply)).await;
                    }
                    Message::Ping { seq } => {
                        let _ = request.respond(&Message::Pong { seq: *seq }.into()).await;
                    }
                    _ => {}
                }
            });
        }
    });
}

/// `len` bytes that differ from any shifted copy of themselves.
fn pattern(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15).to_le_bytes()[7])
        .collect()
}

async fn still_answers(conn: &ray_transport::Connection) {
    let pong = conn
        .request(&Message::Ping { seq: 42 }.into())
        .await
        .expect("the connection still serves requests");
    assert_eq!(pong.body, Message::Pong { seq: 42 });
}

fn bulk_server(
    payload: Vec<u8>,
    max_upload: u64,
) -> (
    BulkServer,
    tokio::sync::mpsc::UnboundedReceiver<Result<Vec<u8>, TransportError>>,
) {
    let (uploads, received) = tokio::sync::mpsc::unbounded_channel();
    let server = BulkServer {
        announced: payload.len() as u64,
        payload: Arc::new(payload),
        max_upload,
        uploads,
    };
    (server, received)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_bytes_round_trip_both_ways_at_0_1_and_20_mib() {
    for len in [0, 1, 20 << 20] {
        let (_server, _client, conn, accepted) = connected_pair().await;
        let data = pattern(len);
        let (server, mut uploads) = bulk_server(data.clone(), u64::MAX);
        serve_bulk(accepted, server);

        let upload = Message::from(UploadBinary {
            hash: [0; 32],
            len: len as u64,
        });
        let reply = conn
            .request_with_bytes(&upload.into(), &data)
            .await
            .expect("upload");
        assert_eq!(reply.body, Message::Ok, "{len} bytes");
        let received = uploads.recv().await.expect("server saw the upload");
        assert!(received.expect("whole upload") == data, "{len} bytes");

        for request in [
            Message::from(FetchBinary { hash: [0; 32] }),
            Message::from(GetObject {
                id: ray_proto::ObjectId::new(WorkerId(7), 1),
                from: WorkerId(8),
                take: false,
            }),
        ] {
            let (reply, payload) = conn
                .request_bulk(&request.into(), len as u64)
                .await
                .expect("download");
            assert!(matches!(
                reply.body,
                Message::GcsReply(GcsReply::BinaryFollows(_))
                    | Message::WorkerReply(WorkerReply::ObjectFollows(_))
            ));
            let payload = payload.expect("bytes follow the header");
            if len > 0 {
                assert_eq!(payload.as_ptr() as usize % 16, 0, "16-aligned");
            }
            assert!(payload.as_slice() == &data[..], "{len} bytes");
        }
        // A reply that announces nothing comes back without a payload.
        let (pong, none) = conn
            .request_bulk(&Message::Ping { seq: 1 }.into(), 0)
            .await
            .expect("ping");
        assert_eq!(
            (pong.body, none.is_none()),
            (Message::Pong { seq: 1 }, true)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payload_ending_early_is_truncated_in_both_directions() {
    let (_server, _client, conn, accepted) = connected_pair().await;
    let (mut server, mut uploads) = bulk_server(pattern(10), u64::MAX);
    server.announced = 1000;
    serve_bulk(accepted, server);

    let err = conn
        .request_bulk(
            &Message::from(FetchBinary { hash: [0; 32] }).into(),
            u64::MAX,
        )
        .await
        .expect_err("10 of 1000 bytes");
    assert!(
        matches!(
            err,
            TransportError::PayloadTruncated {
                got: 10,
                len: 1000,
                ..
            }
        ),
        "{err}"
    );

    let upload = Message::from(UploadBinary {
        hash: [0; 32],
        len: 1000,
    });
    let reply = conn
        .request_with_bytes(&upload.into(), &pattern(10))
        .await
        .expect("the server answers a short upload");
    assert!(matches!(reply.body, Message::Error { .. }), "{reply:?}");
    let seen = uploads.recv().await.expect("server saw the upload");
    assert!(
        matches!(
            seen,
            Err(TransportError::PayloadTruncated {
                got: 10,
                len: 1000,
                ..
            })
        ),
        "{seen:?}"
    );
    still_answers(&conn).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payload_over_the_limit_is_refused_on_its_stream_only() {
    let (_server, _client, conn, accepted) = connected_pair().await;
    let (server, mut uploads) = bulk_server(pattern(1000), 100);
    serve_bulk(accepted, server);

    let err = conn
        .request_bulk(&Message::from(FetchBinary { hash: [0; 32] }).into(), 999)
        .await
        .expect_err("1000 bytes over a limit of 999");
    assert!(
        matches!(
            err,
            TransportError::PayloadTooLarge {
                len: 1000,
                max: 999,
                ..
            }
        ),
        "{err}"
    );
    still_answers(&conn).await;

    // Large enough that the refusal arrives while the client still writes.
    let big = pattern(8 << 20);
    let upload = Message::from(UploadBinary {
        hash: [0; 32],
        len: big.len() as u64,
    });
    let reply = conn
        .request_with_bytes(&upload.into(), &big)
        .await
        .expect("the refusal is an answer");
    assert!(
        matches!(&reply.body, Message::Error { reason } if reason.contains("limit")),
        "{reply:?}"
    );
    let seen = uploads.recv().await.expect("server saw the upload");
    assert!(
        matches!(seen, Err(TransportError::PayloadTooLarge { max: 100, .. })),
        "{seen:?}"
    );
    still_answers(&conn).await;
}

/// Not a check: prints the throughput of one 100 MiB download and upload.
/// `cargo test --release -p ray-core --test transport -- --ignored --nocapture bulk_throughput`
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "a measurement, run by hand in release"]
async fn bulk_throughput_of_100_mib_on_loopback() {
    let len = 100 << 20;
    let (_server, _client, conn, accepted) = connected_pair().await;
    let data = pattern(len);
    let (server, mut uploads) = bulk_server(data.clone(), u64::MAX);
    serve_bulk(accepted, server);
    let mib = len as f64 / f64::from(1 << 20);
    for round in 0..3 {
        let start = std::time::Instant::now();
        let (_, payload) = conn
            .request_bulk(
                &Message::from(FetchBinary { hash: [0; 32] }).into(),
                len as u64,
            )
            .await
            .expect("download");
        let down = start.elapsed();
        assert_eq!(payload.expect("payload").len(), len);

        let start = std::time::Instant::now();
        let upload = Message::from(UploadBinary {
            hash: [0; 32],
            len: len as u64,
        });
        conn.request_with_bytes(&upload.into(), &data)
            .await
            .expect("upload");
        let _ = uploads.recv().await;
        let up = start.elapsed();
        println!(
            "round {round}: download {:.0} MiB/s, upload {:.0} MiB/s",
            mib / down.as_secs_f64(),
            mib / up.as_secs_f64()
        );
    }
}

/// Bytes handed over as shared, not copied.
struct SharedBytes(Arc<Vec<u8>>);

impl AsRef<[u8]> for SharedBytes {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_sent_shared_arrives_whole_and_packets_grow_past_ethernet_size_on_loopback() {
    let (_server, _client, conn, accepted) = connected_pair().await;
    let data = Arc::new(pattern(20 << 20));
    let served = data.clone();
    // The server keeps its connection until the client has read: dropping
    // it would close the connection under the bytes still in flight.
    let serving = tokio::spawn(async move {
        let (mut w, mut r) = accepted.accept_frames().await.expect("a request stream");
        let request = r.recv().await.expect("read").expect("a request");
        assert!(matches!(
            request.body,
            Message::Worker(WorkerRequest::GetObject(_))
        ));
        let head = Envelope::new(Message::from(ObjectFollows {
            len: served.len() as u64,
            refs: Vec::new(),
        }));
        w.send(&head).await.expect("header");
        w.send_shared(SharedBytes(served)).await.expect("payload");
        w.finish();
        accepted
    });
    let request = Message::from(GetObject {
        id: ray_proto::ObjectId::new(WorkerId(7), 1),
        from: WorkerId(8),
        take: false,
    });
    let (reply, payload) = conn
        .request_bulk(&request.into(), u64::MAX)
        .await
        .expect("fetch");
    assert_eq!(
        reply.body,
        Message::from(ObjectFollows {
            len: data.len() as u64,
            refs: Vec::new(),
        })
    );
    let payload = payload.expect("bytes follow the header");
    assert_eq!(payload.as_ptr() as usize % 16, 0, "16-aligned");
    assert!(payload.as_slice() == &data[..], "every byte, in order");
    // Path-MTU discovery climbs past 1,472 bytes (quinn's default cap)
    // because the endpoints accept and probe up to 64 KiB. Both directions
    // carried packets, so each side has probed by now.
    let mtu = conn.quic().stats().path.current_mtu;
    assert!(mtu > 1_500, "packets still {mtu} bytes on loopback");
    drop(serving.await.expect("the server task"));
}
