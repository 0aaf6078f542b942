//! Criterion bench of the QUIC transport's object path: one `GetObject`
//! request answered with `ObjectFollows` and the raw bytes
//! (`request_bulk` on one side, `accept_frames` and `send_shared` on the
//! other), the way a worker fetches an
//! argument from its owner, for 1 MiB and 100 MiB. The two endpoints are
//! on 127.0.0.1, each on its own 1-thread tokio runtime, as two processes
//! of a two-node cluster on one 2-core machine would be.
//!
//! `RAYRS_TRANSPORT_PROFILE=N` skips criterion and fetches 100 MiB N times
//! (for `perf record`), printing GB/s.

// `criterion_group!` generates an undocumented public function.
#![allow(missing_docs)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use ray_proto::wire::{GetObject, ObjectFollows};
use ray_proto::{ObjectId, WorkerId};
use ray_transport::{
    BuildFingerprint, ClusterCa, Connection, Endpoint, EndpointConfig, Envelope, Message, Role,
};

const SIZES: [(&str, usize); 2] = [("1MiB", 1 << 20), ("100MiB", 100 << 20)];

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a tokio runtime for the bench")
}

/// A served endpoint holding `payload` and a client connected to it; the
/// runtimes and endpoints must outlive the connection.
struct Pair {
    server_rt: tokio::runtime::Runtime,
    client_rt: tokio::runtime::Runtime,
    _server: Endpoint,
    _client: Endpoint,
    conn: Connection,
}

/// An endpoint on 127.0.0.1 with credentials for `name` from `ca`, bound
/// on `rt`.
fn bind(rt: &tokio::runtime::Runtime, ca: &ClusterCa, name: &str) -> Endpoint {
    let creds = ca.issue(name).expect("credentials");
    let config = EndpointConfig::new(Role::Worker, BuildFingerprint([7; 32]));
    rt.block_on(async { Endpoint::bind(SocketAddr::from(([127, 0, 0, 1], 0)), &creds, config) })
        .expect("bind an endpoint")
}

fn pair(payload: Arc<Vec<u8>>) -> Pair {
    let ca = ClusterCa::generate().expect("a cluster CA");
    let server_rt = runtime();
    let client_rt = runtime();
    let server = bind(&server_rt, &ca, "node-1");
    let addr = server.local_addr().expect("server address");
    let serving = server.clone();
    server_rt.spawn(async move {
        while let Ok(conn) = serving.accept().await {
            let payload = payload.clone();
            tokio::spawn(serve(conn, payload));
        }
    });
    let client = bind(&client_rt, &ca, "worker-1");
    let conn = client_rt
        .block_on(client.connect(addr))
        .expect("connect to the server");
    Pair {
        server_rt,
        client_rt,
        _server: server,
        _client: client,
        conn,
    }
}

/// The served bytes, shared with quinn while in flight.
#[derive(Clone)]
struct Shared(Arc<Vec<u8>>);

impl AsRef<[u8]> for Shared {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

/// Serves `conn`'s streams the way a cluster process serves its peers: a
/// `GetObject` gets `ObjectFollows`, then the shared bytes; a stream that
/// starts with a `Ping` (a link, like an owner's pushed work) gets a `Pong`
/// for each ping at once.
async fn serve(conn: Connection, payload: Arc<Vec<u8>>) {
    while let Ok((mut w, mut r)) = conn.accept_frames().await {
        let payload = Shared(payload.clone());
        tokio::spawn(async move {
            let mut next = r.recv().await;
            while let Ok(Some(envelope)) = next {
                match envelope.body {
                    Message::Ping { seq } => {
                        if w.send(&Message::Pong { seq }.into()).await.is_err() {
                            return;
                        }
                    }
                    _ => {
                        let head = Envelope::new(Message::from(ObjectFollows {
                            len: payload.0.len() as u64,
                            refs: Vec::new(),
                        }));
                        if w.send(&head).await.is_ok() {
                            let _ = w.send_shared(payload).await;
                        }
                        w.finish();
                        return;
                    }
                }
                next = r.recv().await;
            }
        });
    }
}

/// Fetches the served payload once; its length.
async fn fetch(conn: &Connection) -> usize {
    let id = ObjectId::new(WorkerId(1), 1);
    let request = Envelope::new(Message::from(GetObject {
        id,
        from: WorkerId(1),
        take: false,
    }));
    let (_, bytes) = conn
        .request_bulk(&request, u64::MAX)
        .await
        .expect("fetch the payload");
    bytes.expect("a payload follows").len()
}

fn transport(c: &mut Criterion) {
    if let Some(n) = std::env::var("RAYRS_TRANSPORT_PROFILE")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    {
        let len = SIZES[1].1;
        let p = pair(Arc::new(vec![7u8; len]));
        for _ in 0..n {
            let start = Instant::now();
            let got = p.client_rt.block_on(fetch(&p.conn));
            assert_eq!(got, len);
            let secs = start.elapsed().as_secs_f64();
            println!(
                "100 MiB in {:.1} ms: {:.2} GB/s",
                secs * 1e3,
                len as f64 / secs / 1e9
            );
        }
        drop(p.server_rt);
        return;
    }
    let mut group = c.benchmark_group("transport");
    // Few samples over a short time, as the root package's benches take.
    group
        .sample_size(10)
        .measurement_time(std::time::Duration::from_secs(3));
    {
        // One frame each way on a long-lived stream between the two
        // runtimes: the floor under a cluster task's round trip.
        let p = pair(Arc::new(Vec::new()));
        let (mut w, mut r) = p
            .client_rt
            .block_on(p.conn.open_frames())
            .expect("open a stream");
        // The same from a task on the client's runtime thread: no hand-off
        // between the caller's thread and the runtime's, so only QUIC,
        // the kernel and the two runtimes' wake-ups remain.
        let (w2, r2) = p
            .client_rt
            .block_on(p.conn.open_frames())
            .expect("open a stream");
        let link = Arc::new(tokio::sync::Mutex::new((w2, r2)));
        group.bench_function("ping_pong_round_trip_in_runtime", |b| {
            b.iter_custom(|iters| {
                let link = link.clone();
                let task = p.client_rt.spawn(async move {
                    let mut guard = link.lock().await;
                    let (w, r) = &mut *guard;
                    let start = Instant::now();
                    for seq in 0..iters {
                        w.send(&Message::Ping { seq }.into()).await.expect("ping");
                        let pong = r.recv().await.expect("pong").expect("a frame");
                        assert_eq!(pong.body, Message::Pong { seq });
                    }
                    start.elapsed()
                });
                p.client_rt.block_on(task).expect("the ping task")
            })
        });
        let mut seq = 0;
        group.bench_function("ping_pong_round_trip", |b| {
            b.iter(|| {
                seq += 1;
                p.client_rt.block_on(async {
                    w.send(&Message::Ping { seq }.into()).await.expect("ping");
                    let pong = r.recv().await.expect("pong").expect("a frame");
                    assert_eq!(pong.body, Message::Pong { seq });
                })
            })
        });
    }
    for (label, len) in SIZES {
        let p = pair(Arc::new(vec![7u8; len]));
        group.throughput(Throughput::Bytes(len as u64));
        group.bench_function(format!("get_object_{label}"), |b| {
            b.iter(|| assert_eq!(p.client_rt.block_on(fetch(&p.conn)), len))
        });
    }
    group.finish();
}

criterion_group!(benches, transport);
criterion_main!(benches);
