//! Context labels set three ways — inside every call, once in an actor's
//! constructor, and from the driver before each rank's calls — each keep
//! exactly that rank's work when the views are filtered on the rank (one
//! test per file: it installs the process's global subscriber).

use ray_test_support::{embedded, recording};

use std::time::Duration;

use ray_core::prelude::*;
use ray_insight::views::LogicalNode;
use ray_insight::Views;

const RANKS: u64 = 4;
const CALLS: u64 = 3;

/// Labels every call itself.
#[remote]
struct EachCall {
    rank: u64,
}

#[remote]
impl EachCall {
    fn new(rank: u64) -> Self {
        EachCall { rank }
    }
    fn step(&self) -> u64 {
        ray_core::insight::context(&[("way", "each"), ("rank", &self.rank.to_string())]);
        self.rank
    }
}

/// Labels itself once, in its constructor.
#[remote]
struct InCtor {
    rank: u64,
}

#[remote]
impl InCtor {
    fn new(rank: u64) -> Self {
        ray_core::insight::context(&[("way", "ctor"), ("rank", &rank.to_string())]);
        InCtor { rank }
    }
    fn step(&self) -> u64 {
        self.rank
    }
}

/// Labelled by the driver before its calls.
#[remote]
fn driver_step(rank: u64) -> u64 {
    rank
}

/// The calls each rank made, per way, as the filtered logical view counts
/// them: (way, rank) -> finished calls to `step`/`driver_step`.
fn steps(views: &Views, way: &str, rank: u64) -> Vec<(String, u64)> {
    let filtered = views.filter("rank", &rank.to_string());
    let logical = filtered.logical();
    let mut out: Vec<(String, u64)> = logical
        .call_edges
        .iter()
        .filter(|e| e.name.ends_with("step"))
        .filter(|e| match way {
            "each" => {
                matches!(&e.to, LogicalNode::Actor { class, .. } if class.ends_with("EachCall"))
            }
            "ctor" => {
                matches!(&e.to, LogicalNode::Actor { class, .. } if class.ends_with("InCtor"))
            }
            _ => matches!(&e.to, LogicalNode::Function(f) if f.ends_with("driver_step")),
        })
        .map(|e| (e.to.to_string(), e.count))
        .collect();
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn labels_set_in_calls_in_constructors_and_from_the_driver_filter_to_one_rank() {
    let collector = recording::record_globally();
    let ray = embedded::runtime(2.0).await;
    let mut each = Vec::new();
    let mut ctor = Vec::new();
    for rank in 0..RANKS {
        each.push(
            EachCall::options()
                .num_cpus(0.0)
                .remote(&ray, rank)
                .unwrap(),
        );
        ctor.push(InCtor::options().num_cpus(0.0).remote(&ray, rank).unwrap());
    }
    let mut pending = Vec::new();
    for _ in 0..CALLS {
        for rank in 0..RANKS as usize {
            pending.push(each[rank].step().unwrap());
            pending.push(ctor[rank].step().unwrap());
        }
    }
    for rank in 0..RANKS {
        ray_core::insight::context(&[("way", "driver"), ("rank", &rank.to_string())]);
        for _ in 0..CALLS {
            pending.push(driver_step::remote(&ray, rank).unwrap());
        }
    }
    for p in pending {
        p.get().await.unwrap();
    }
    let mut views = Views::default();
    recording::drain_until(&collector, &mut views, Duration::from_secs(30), |v| {
        let finished: u64 = v
            .snapshot()
            .logical()
            .call_edges
            .iter()
            .filter(|e| e.name.ends_with("step"))
            .map(|e| e.count)
            .sum();
        finished == 3 * RANKS * CALLS
    })
    .await;
    ray.shutdown();
    for rank in 0..RANKS {
        // In every call, and in the constructor: exactly that rank's actor,
        // with all its calls.
        let e = steps(&views, "each", rank);
        assert_eq!(e.len(), 1, "rank {rank}, each call: {e:?}");
        assert_eq!(e[0].1, CALLS, "rank {rank}, each call: {e:?}");
        let c = steps(&views, "ctor", rank);
        assert_eq!(c.len(), 1, "rank {rank}, constructor: {c:?}");
        assert_eq!(c[0].1, CALLS, "rank {rank}, constructor: {c:?}");
        // From the driver: that rank's calls, no other's.
        let d = steps(&views, "driver", rank);
        assert_eq!(d.len(), 1, "rank {rank}, from the driver: {d:?}");
        assert_eq!(d[0].1, CALLS, "rank {rank}, from the driver: {d:?}");
    }
}
