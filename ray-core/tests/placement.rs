//! Placement groups on the embedded runtime.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ray_core::prelude::*;
use ray_core::{Bundle, Error, PlacementStrategy};

use ray_test_support::embedded;

#[remote]
fn cpus_left_in_bundle_task(ms: u64) -> u64 {
    std::thread::sleep(Duration::from_millis(ms));
    ms
}

static STARTED: AtomicBool = AtomicBool::new(false);

#[remote]
fn signal_then_sleep(ms: u64) -> u64 {
    STARTED.store(true, Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(ms));
    ms
}

#[remote]
struct Holder;

#[remote]
impl Holder {
    fn new() -> Self {
        Holder
    }

    fn ping(&self) -> u8 {
        1
    }
}

/// A ready group of one 1-CPU bundle.
async fn one_cpu_group(ray: &Ray) -> ray_core::PlacementGroup {
    let pg = ray
        .placement_group(vec![Bundle::new().num_cpus(1.0)], PlacementStrategy::Pack)
        .unwrap();
    pg.ready().await.unwrap();
    pg
}

fn cpu(ray: &Ray) -> f64 {
    ray.stats().available.get("CPU").to_f64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_reserves_from_the_node_and_tasks_run_inside_its_bundles() {
    let ray = embedded::runtime(4.0).await;
    let pg = ray
        .placement_group(
            vec![Bundle::new().num_cpus(1.0), Bundle::new().num_cpus(2.0)],
            PlacementStrategy::Pack,
        )
        .unwrap();
    pg.ready().await.unwrap();
    assert!(pg.is_ready());
    assert_eq!(cpu(&ray), 1.0, "3 of 4 CPUs reserved by the group");
    // Work in the bundles does not touch the node's remaining CPU.
    let a = cpus_left_in_bundle_task::options()
        .placement_group(&pg, Some(1))
        .num_cpus(2.0)
        .remote(&ray, 10)
        .unwrap();
    let b = cpus_left_in_bundle_task::options()
        .placement_group(&pg, None)
        .remote(&ray, 10)
        .unwrap();
    assert_eq!(cpu(&ray), 1.0);
    assert_eq!((a.get().await.unwrap(), b.get().await.unwrap()), (10, 10));
    let h = Holder::options()
        .placement_group(&pg, Some(0))
        .num_cpus(1.0)
        .remote(&ray)
        .unwrap();
    assert_eq!(h.ping().unwrap().get().await.unwrap(), 1);
    pg.remove(&ray);
    assert_eq!(cpu(&ray), 4.0, "removal gives the reservation back");
    ray.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn impossible_groups_and_requests_fail_at_once() {
    let ray = embedded::runtime(2.0).await;
    let spread = ray.placement_group(
        vec![Bundle::new().num_cpus(1.0), Bundle::new().num_cpus(1.0)],
        PlacementStrategy::StrictSpread,
    );
    assert!(
        matches!(&spread, Err(Error::Infeasible { reason, .. }) if reason.contains("STRICT_SPREAD")),
        "{spread:?}"
    );
    let too_big = ray.placement_group(
        vec![Bundle::new().num_cpus(3.0)],
        PlacementStrategy::StrictPack,
    );
    assert!(
        matches!(too_big, Err(Error::Infeasible { .. })),
        "{too_big:?}"
    );
    assert!(matches!(
        ray.placement_group(vec![], PlacementStrategy::Pack),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        ray.placement_group(vec![Bundle::new()], PlacementStrategy::Pack),
        Err(Error::InvalidArgument(_))
    ));
    let pg = one_cpu_group(&ray).await;
    let err = cpus_left_in_bundle_task::options()
        .placement_group(&pg, Some(0))
        .num_cpus(2.0)
        .remote(&ray, 1)
        .unwrap_err();
    assert!(matches!(err, Error::Infeasible { .. }), "{err:?}");
    let err = cpus_left_in_bundle_task::options()
        .placement_group(&pg, Some(5))
        .remote(&ray, 1)
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
    ray.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_waits_for_resources_and_work_queued_in_it_waits_too() {
    let ray = embedded::runtime(2.0).await;
    let hog = Holder::options().num_cpus(2.0).remote(&ray).unwrap();
    hog.ping().unwrap().get().await.unwrap();
    let pg = ray
        .placement_group(
            vec![Bundle::new().num_cpus(2.0)],
            PlacementStrategy::StrictPack,
        )
        .unwrap();
    let queued = cpus_left_in_bundle_task::options()
        .placement_group(&pg, Some(0))
        .remote(&ray, 1)
        .unwrap();
    let (ready, _) = ray
        .wait(
            std::slice::from_ref(&queued),
            1,
            Some(Duration::from_millis(50)),
        )
        .await
        .unwrap();
    assert!(
        ready.is_empty(),
        "nothing runs before the group is reserved"
    );
    assert!(!pg.is_ready());
    hog.kill();
    pg.ready().await.unwrap();
    assert_eq!(queued.get().await.unwrap(), 1);
    ray.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_a_group_fails_work_still_waiting_in_it() {
    let ray = embedded::runtime(2.0).await;
    let pg = one_cpu_group(&ray).await;
    let running = signal_then_sleep::options()
        .placement_group(&pg, Some(0))
        .remote(&ray, 200)
        .unwrap();
    let waiting = cpus_left_in_bundle_task::options()
        .placement_group(&pg, Some(0))
        .remote(&ray, 1)
        .unwrap();
    while !STARTED.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    pg.remove(&ray);
    assert!(matches!(
        waiting.get().await,
        Err(Error::PlacementGroupRemoved { .. })
    ));
    // The running task finishes; its release into the removed bundle is ignored.
    assert_eq!(running.get().await.unwrap(), 200);
    assert_eq!(cpu(&ray), 2.0);
    assert!(matches!(
        pg.ready().await,
        Err(Error::PlacementGroupRemoved { .. })
    ));
    ray.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_a_group_kills_the_actors_living_in_it() {
    let ray = embedded::runtime(2.0).await;
    let pg = one_cpu_group(&ray).await;
    let h = Holder::options()
        .placement_group(&pg, Some(0))
        .num_cpus(1.0)
        .remote(&ray)
        .unwrap();
    assert_eq!(h.ping().unwrap().get().await.unwrap(), 1);
    pg.remove(&ray);
    let err = h.ping().unwrap().get().await.unwrap_err();
    assert!(
        matches!(&err, Error::ActorDied { cause, .. } if cause.contains("placement group")),
        "{err:?}"
    );
    assert_eq!(cpu(&ray), 2.0);
    ray.shutdown();
}

static CHAIN_GATE: AtomicBool = AtomicBool::new(false);

/// Returns once `CHAIN_GATE` opens.
#[remote]
fn chain_gate() -> u64 {
    while !CHAIN_GATE.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(1));
    }
    0
}

#[remote]
fn chain_link(prev: u64) -> u64 {
    prev + 1
}

/// Work waiting for its argument is admitted by the thread whose
/// completion of that argument wakes it. When admission fails at once (its
/// group is gone), that completes the next link's argument in turn: a long
/// chain must fail link by link on that thread, not one nested call per
/// link (100,000 of those overflow a pool thread's stack).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_chain_waiting_in_a_removed_group_fails_link_by_link() {
    const LINKS: usize = 100_000;
    let ray = embedded::runtime(2.0).await;
    let pg = one_cpu_group(&ray).await;
    let gate = chain_gate::remote(&ray).unwrap();
    let mut last = gate.clone();
    for _ in 0..LINKS {
        last = chain_link::options()
            .placement_group(&pg, Some(0))
            .remote(&ray, &last)
            .unwrap();
    }
    assert!(!last.is_ready(), "the chain waits for the gate");
    pg.remove(&ray);
    CHAIN_GATE.store(true, Ordering::SeqCst);
    assert_eq!(gate.get().await.unwrap(), 0);
    let err = tokio::time::timeout(Duration::from_secs(60), last.get())
        .await
        .expect("the chain's last link fails within a minute")
        .unwrap_err();
    assert!(
        matches!(err, Error::PlacementGroupRemoved { .. }),
        "{err:?}"
    );
    ray.shutdown();
}
