//! The runtime clones a `ResourceSet` per submitted task and runs
//! submit/release millions of times a second: these paths must not touch the
//! allocator for CPU/GPU/memory-only requests.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use ray_sched::{Admission, LocalQueue, Quantity, ResourceSet, GPU, MEMORY};

use ray_test_support::counting_alloc::{allocations_in, Counting};

#[global_allocator]
static GLOBAL: Counting = Counting;

fn builtin_request() -> ResourceSet {
    ResourceSet::cpu(Quantity::ONE)
        .with(GPU, Quantity::from_raw(2_500))
        .with(MEMORY, Quantity::from_units(1 << 20))
}

#[test]
fn clone_eq_and_hash_of_builtin_resources_do_not_allocate() {
    let req = builtin_request();
    let n = allocations_in(|| {
        for _ in 0..1_000 {
            let copy = req.clone();
            assert_eq!(copy, req);
            let mut h = DefaultHasher::new();
            copy.hash(&mut h);
            std::hint::black_box(h.finish());
        }
    });
    assert_eq!(n, 0);
}

#[test]
fn submit_run_release_cycle_does_not_allocate() {
    let total = ResourceSet::cpu(Quantity::from_units(8))
        .with(GPU, Quantity::ONE)
        .with(MEMORY, Quantity::from_units(1 << 30));
    let mut queue = LocalQueue::new(total);
    let req = builtin_request();
    let n = allocations_in(|| {
        for i in 0..1_000u32 {
            let Admission::Run(_) = queue.submit(req.clone(), i) else {
                panic!("fits on an idle node");
            };
            queue.release(&req);
        }
    });
    assert_eq!(n, 0);
}

#[test]
fn steady_queue_and_pop_does_not_allocate_once_warm() {
    let mut queue = LocalQueue::new(ResourceSet::cpu(Quantity::ONE));
    let req = ResourceSet::cpu(Quantity::ONE);
    assert!(matches!(queue.submit(req.clone(), 0u32), Admission::Run(0)));
    // Warm-up: the class and its deque are created once and then kept.
    assert_eq!(queue.submit(req.clone(), 1), Admission::Queued);
    queue.release(&req);
    assert_eq!(queue.pop_runnable(), Some((req.clone(), 1)));
    let n = allocations_in(|| {
        for i in 2..1_002u32 {
            assert_eq!(queue.submit(req.clone(), i), Admission::Queued);
            queue.release(&req);
            let (got, item) = queue.pop_runnable().expect("fits after release");
            assert_eq!(item, i);
            std::hint::black_box(got);
        }
    });
    assert_eq!(n, 0);
}
