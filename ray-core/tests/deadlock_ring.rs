//! A deadlock ring of three instances of one class: the distributed stack
//! names each frame's instance, so the report shows three distinct actors,
//! and the logical view shows the hung and queued calls while they hang
//! (one test per file: it installs the process's global subscriber).

use ray_test_support::{embedded, recording};

use std::time::Duration;

use ray_core::prelude::*;
use ray_core::ActorId;

/// Calls the next actor of the ring synchronously; the call that comes
/// back to the first actor finds it busy waiting: a deadlock.
#[remote]
struct Hop;

#[remote]
impl Hop {
    fn new() -> Self {
        Hop
    }
    fn hop(&self, ring: Vec<ActorHandle<Hop>>, i: u64) -> u64 {
        let next = &ring[(i as usize + 1) % ring.len()];
        next.hop(ring.clone(), i + 1)
            .unwrap()
            .get_blocking()
            .unwrap_or(0)
            + 1
    }
}

/// The insight id of an actor (as its records name it).
fn insight_id(id: ActorId) -> String {
    let v = id.as_u128();
    format!("actor-{:x}.{:x}", v >> 64, v as u64)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ring_of_three_instances_of_one_class_names_three_instances() {
    let collector = recording::record_globally();
    let ray = embedded::runtime(4.0).await;
    let ring: Vec<ActorHandle<Hop>> = (0..3).map(|_| Hop::remote(&ray).unwrap()).collect();
    let hung = ring[0].hop(ring.clone(), 0).unwrap();

    let views = recording::views_once_deadlocked(&collector, Duration::from_secs(20)).await;
    let stacks = views.snapshot().stacks();
    let found = stacks
        .deadlocks
        .first()
        .map(|d| (d.clone(), stacks.to_text(), views.snapshot().logical()));
    ray.shutdown();
    let (deadlock, report, logical) = found.expect("no deadlock reported within 20 s");
    // The logical view shows the hung calls while they hang: three hops
    // started (blocked) and the fourth queued; none finished.
    let hops = logical
        .call_edges
        .iter()
        .filter(|e| e.name.ends_with("hop"));
    let (running, queued, finished) = hops.fold((0, 0, 0), |(r, q, f), e| {
        (r + e.running, q + e.queued, f + e.count)
    });
    assert_eq!(
        (running, queued, finished),
        (3, 1, 0),
        "{:?}",
        logical.call_edges
    );
    // Four calls: three hops, and the fourth queued behind the first.
    assert_eq!(deadlock.cycle.len(), 4, "{report}");
    let mut named: Vec<String> = ring
        .iter()
        .map(|h| insight_id(h.id()))
        .filter(|id| {
            deadlock
                .cycle
                .iter()
                .any(|t| t.name.contains(&format!("[{id}].hop")))
        })
        .collect();
    named.dedup();
    assert_eq!(named.len(), 3, "three distinct instances in: {report}");
    drop(hung);
}
