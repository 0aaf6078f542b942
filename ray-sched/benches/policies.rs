//! Decisions per second of the placement policies on a 1,000-node view.
//!
//! - `hybrid/spill`: the local node is busy past the threshold, so every
//!   decision walks the utilization index for the top k.
//! - `hybrid/mixed`: requests come from every node in turn; about half of
//!   them are below the threshold and stay local, the rest spill.
//! - `hybrid/place_release`: a decision plus the acquire on the chosen node
//!   and a release elsewhere, so the view's index is updated twice per
//!   decision (the cost a scheduler actually pays).
//! - `spread`, `locality`: the other policies on the same view.
//!
//! Each iteration is one batch of `BATCH` decisions; criterion reports
//! elements (decisions) per second.

use std::collections::BTreeMap;
use std::hint::black_box;

use criterion::{criterion_main, Criterion, Throughput};
use ray_proto::NodeId;
use ray_sched::{
    ClusterView, Decision, HybridConfig, HybridPolicy, LocalityPolicy, Policy, Quantity, Request,
    ResourceSet, SchedulingStrategy, SplitMix64, SpreadPolicy, GPU,
};

const NODES: u64 = 1_000;
const BATCH: u64 = 1_000;

/// 1,000 nodes of 16 CPUs (every tenth also has 4 GPUs), loaded 0–15 CPUs
/// at random from a fixed seed; node 0 is loaded to 12/16 (75%).
fn cluster() -> ClusterView {
    let mut rng = SplitMix64::new(1);
    let mut view = ClusterView::new();
    for id in 0..NODES {
        let mut total = ResourceSet::cpu(Quantity::from_units(16));
        if id % 10 == 0 {
            total = total.with(GPU, Quantity::from_units(4));
        }
        view.add_node(NodeId(id), total, BTreeMap::new());
        let load = if id == 0 { 12 } else { rng.below(16) as u64 };
        assert!(view.try_acquire(NodeId(id), &ResourceSet::cpu(Quantity::from_units(load))));
    }
    view
}

fn request<'a>(
    resources: &'a ResourceSet,
    strategy: &'a SchedulingStrategy,
    local: u64,
) -> Request<'a> {
    Request {
        resources,
        strategy,
        local: NodeId(local),
        arg_bytes: &[],
    }
}

fn hybrid(c: &mut Criterion) {
    let view = cluster();
    let one = ResourceSet::cpu(Quantity::ONE);
    let default = SchedulingStrategy::Default;
    let mut group = c.benchmark_group("hybrid");
    group.throughput(Throughput::Elements(BATCH));

    let mut policy = HybridPolicy::new(HybridConfig::default());
    group.bench_function("spill", |b| {
        b.iter(|| {
            for _ in 0..BATCH {
                black_box(policy.decide(&request(&one, &default, 0), black_box(&view)));
            }
        })
    });

    let locals: Vec<u64> = (0..BATCH).map(|i| i * 7 % NODES).collect();
    let below = locals
        .iter()
        .filter(|&&n| {
            view.node(NodeId(n))
                .is_some_and(|n| n.utilization() < 5_000)
        })
        .count();
    eprintln!("hybrid/mixed: {below} of {BATCH} requests come from a node below the threshold");
    group.bench_function("mixed", |b| {
        b.iter(|| {
            for &local in &locals {
                black_box(policy.decide(&request(&one, &default, local), black_box(&view)));
            }
        })
    });

    let mut view = view;
    let mut placed: Vec<NodeId> = Vec::with_capacity(BATCH as usize);
    group.bench_function("place_release", |b| {
        b.iter(|| {
            for &local in &locals {
                if let Decision::Node(n) = policy.decide(&request(&one, &default, local), &view) {
                    assert!(view.try_acquire(n, &one));
                    placed.push(n);
                }
            }
            for n in placed.drain(..) {
                view.release(n, &one);
            }
        })
    });
    group.finish();
}

fn others(c: &mut Criterion) {
    let view = cluster();
    let one = ResourceSet::cpu(Quantity::ONE);
    let mut group = c.benchmark_group("others");
    group.throughput(Throughput::Elements(BATCH));

    let spread = SchedulingStrategy::Spread;
    let mut policy = SpreadPolicy::new();
    group.bench_function("spread", |b| {
        b.iter(|| {
            for _ in 0..BATCH {
                black_box(policy.decide(&request(&one, &spread, 0), black_box(&view)));
            }
        })
    });

    let locality = SchedulingStrategy::Locality;
    let arg_bytes = [
        (NodeId(3), 1 << 20),
        (NodeId(500), 4 << 20),
        (NodeId(999), 2 << 20),
    ];
    let mut policy = LocalityPolicy::new(HybridPolicy::new(HybridConfig::default()));
    group.bench_function("locality", |b| {
        b.iter(|| {
            for _ in 0..BATCH {
                let req = Request {
                    arg_bytes: &arg_bytes,
                    ..request(&one, &locality, 0)
                };
                black_box(policy.decide(&req, black_box(&view)));
            }
        })
    });
    group.finish();
}

// Private, so the undocumented `pub fn` that `criterion_group!` generates
// does not trip `missing_docs`.
mod group {
    criterion::criterion_group!(benches, super::hybrid, super::others);
}
criterion_main!(group::benches);
