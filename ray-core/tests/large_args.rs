//! Arguments and errors of any size: the same calls, with values larger
//! than a cluster's work frame (64 MiB), several large ones in one task,
//! many actor calls each with a medium one, and an error too large to
//! send whole, end the same way embedded and on a two-node
//! `Cluster::local`. On a cluster large arguments travel as objects the
//! caller owns; one in a work frame used to end the stream with a false
//! `NodeDied`, and every retry then held one more CPU until nothing ran.

use std::time::{Duration, Instant};

use ray_core::prelude::*;
use ray_core::{Cluster, Config};

/// A value's length and the sum of its bytes.
#[remote]
fn digest(v: Vec<u8>) -> (u64, u64) {
    (v.len() as u64, v.iter().map(|&b| u64::from(b)).sum())
}

/// The total length of four values.
#[remote]
fn four(a: Vec<u8>, b: Vec<u8>, c: Vec<u8>, d: Vec<u8>) -> u64 {
    [a, b, c, d].iter().map(|v| v.len() as u64).sum()
}

/// Fails with an error message of `n` bytes.
#[remote]
fn refuse(n: u64) -> Result<u64, String> {
    Err("x".repeat(n as usize))
}

/// Holds the bytes it was made with and given since.
#[remote]
struct Keeper {
    held: u64,
}

#[remote]
impl Keeper {
    fn new(seed: Vec<u8>) -> Self {
        Keeper {
            held: seed.len() as u64,
        }
    }

    fn take(&mut self, v: Vec<u8>) -> u64 {
        self.held += v.len() as u64;
        self.held
    }
}

/// `n` bytes of a pattern, and their sum.
fn pattern(n: usize) -> (Vec<u8>, u64) {
    let v: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
    let sum = v.iter().map(|&b| u64::from(b)).sum();
    (v, sum)
}

const WAIT: Duration = Duration::from_secs(120);

/// Each step's outcome, as text to compare across modes.
async fn tour(ray: &Ray) -> Vec<(&'static str, String)> {
    let mut steps = Vec::new();
    let big = 70 << 20;
    let (value, sum) = pattern(big);

    let got = digest::options()
        .max_retries(0)
        .remote(ray, value.clone())
        .unwrap()
        .get_timeout(WAIT)
        .await;
    assert_eq!(got.as_ref().ok(), Some(&(big as u64, sum)), "{got:?}");
    steps.push(("a 70 MiB argument, no retry", format!("{got:?}")));

    // 24 MiB in four values: over the 16 MiB a message carries inline,
    // so the largest move out.
    let part = 6 << 20;
    let got = four::remote(
        ray,
        vec![1u8; part],
        vec![2u8; part],
        vec![3u8; part],
        vec![4u8; part],
    )
    .unwrap()
    .get_timeout(WAIT)
    .await;
    steps.push(("four 6 MiB arguments", format!("{got:?}")));

    // 300 actor calls, each with a 400 KiB value that stays inline, sent
    // at once to one worker: 120 MiB queued on one work stream, more than
    // a frame holds, so the pushes must be cut into frames by bytes.
    let each = 400 << 10;
    let counter = Keeper::remote(ray, Vec::new()).unwrap();
    let refs: Vec<_> = (0..300u32)
        .map(|i| counter.take(vec![(i % 7) as u8; each]).unwrap())
        .collect();
    let mut all = Vec::new();
    for (i, r) in refs.into_iter().enumerate() {
        all.push(
            r.get_timeout(WAIT)
                .await
                .map(|n| n == (i as u64 + 1) * each as u64),
        );
    }
    steps.push(("300 actor calls of 400 KiB each", format!("{all:?}")));

    let keeper = Keeper::remote(ray, value.clone()).unwrap();
    let got = keeper.take(value).unwrap().get_timeout(WAIT).await;
    steps.push((
        "an actor made and called with 70 MiB each",
        format!("{got:?}"),
    ));

    // An error of 70 MiB: too large for a message, it arrives cut (on a
    // cluster) but typed, and the stream it came on goes on.
    let got = refuse::options()
        .max_retries(0)
        .remote(ray, big as u64)
        .unwrap()
        .get_timeout(WAIT)
        .await;
    let kind = match got {
        Err(Error::TaskFailed { .. }) => "TaskFailed".to_string(),
        other => format!("{other:?}"),
    };
    steps.push(("a 70 MiB error", kind));

    let got = digest::remote(ray, vec![5u8; 10])
        .unwrap()
        .get_timeout(WAIT)
        .await;
    steps.push(("a small task after them", format!("{got:?}")));
    steps
}

/// Results up to 1 MiB stay inline.
fn config() -> Config {
    Config {
        max_inline_bytes: 1 << 20,
        ..Config::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_arguments_work_the_same_embedded_and_on_a_cluster() {
    let embedded = ray_core::init_with(Config {
        num_cpus: Some(2.0),
        ..config()
    })
    .await
    .unwrap();
    let expected = tour(&embedded).await;
    embedded.shutdown();

    let cluster = Cluster::local(2).await.expect("cluster starts");
    let ray = ray_core::init_with(Config {
        address: Some(cluster.address()),
        credentials: Some(cluster.credentials()),
        ..config()
    })
    .await
    .expect("driver joins");
    let got = tour(&ray).await;
    for ((name, want), (_, got)) in expected.iter().zip(&got) {
        assert!(!want.contains("Err"), "{name}: embedded {want}");
        assert_eq!(want, got, "{name}");
    }

    // Every CPU goes back: no lease is left held by work that failed or
    // moved (an idle lease returns after a second or so).
    let total = ray.cluster_resources().await.unwrap().get("CPU");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let available = ray.available_resources().await.unwrap().get("CPU");
        if available == total {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "CPUs still held a minute on: {available:?} of {total:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    ray.shutdown();
    drop(cluster);
}
