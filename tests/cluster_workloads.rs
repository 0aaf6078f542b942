//! The workload shapes W1–W7 of WORKLOADS.md (smaller sizes where the
//! full ones only measure) and the cluster extras, run across a real
//! two-node `Cluster::local(2)`, with every result checked.
//!
//! The node daemons and workers are this test binary started again; one
//! cluster serves several workloads to keep start-ups few.

use std::collections::BTreeSet;

use ray_core::prelude::*;
use ray_core::Cluster;

// Each test uses only part of the shared shapes.
#[allow(dead_code)]
#[path = "../examples/shapes/big_arg.rs"]
mod big_arg;
#[allow(dead_code)]
#[path = "../examples/shapes/cluster.rs"]
mod cluster;
#[allow(dead_code)]
#[path = "../examples/shapes/micro.rs"]
mod micro;
#[allow(dead_code)]
#[path = "../examples/shapes/tree.rs"]
mod tree;

/// W1 here: tasks per batch (WORKLOADS.md: 20,000).
const TASKS: usize = 2_000;
/// W2 and W3 here: sequential round trips (WORKLOADS.md: 2,000).
const ROUND_TRIPS: usize = 200;
/// W1 here: tasks whose results are summed.
const SUMMED_TASKS: u64 = 500;
/// W4 here: the sizes put and gotten. The 100 MiB of WORKLOADS.md never
/// leaves the driver in W4, and byte loops over it in a debug build take
/// most of a minute; the second test moves 16 MiB between nodes instead.
const W4_SIZES: [(&str, usize); 2] = [micro::W4_SIZES[0], micro::W4_SIZES[1]];
/// W6 here: tasks taking the 10 MiB object (WORKLOADS.md: 200).
const BIG_ARG_TASKS: usize = 8;

/// A W1-shaped task whose results can be summed.
#[remote]
fn square(x: u64) -> u64 {
    x * x
}

/// Where a task ran and the value it was given.
#[remote]
fn placed(x: u64) -> (u64, u64) {
    (x, Ray::current().expect("in a task").node_id().0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workloads_w1_to_w7_return_checked_results_on_a_two_node_cluster() {
    let c = Cluster::local(2).await.expect("cluster starts");
    let ray = c.connect().await.expect("driver joins");

    // W1: a batch submitted without waiting, then all gotten; the same
    // shape with values, summed.
    assert_eq!(micro::task_batch(&ray, TASKS).await.unwrap(), TASKS);
    let refs: Vec<_> = (0..SUMMED_TASKS)
        .map(|i| square::remote(&ray, i).unwrap())
        .collect();
    let sum: u64 = ray.get_all(&refs).await.unwrap().into_iter().sum();
    let n = SUMMED_TASKS;
    assert_eq!(sum, (n - 1) * n * (2 * n - 1) / 6);

    // W2: sequential round trips.
    for _ in 0..ROUND_TRIPS {
        micro::task_round_trip(&ray).await.unwrap();
    }

    // W3: a batch of actor calls, then sequential ones.
    let actor = micro::NoopActor::remote(&ray).unwrap();
    assert_eq!(micro::call_batch(&ray, &actor, TASKS).await.unwrap(), TASKS);
    for _ in 0..ROUND_TRIPS {
        micro::call_round_trip(&actor).await.unwrap();
    }
    drop(actor);

    // W4: copied and zero-copy; the bytes come back intact.
    for (label, len) in W4_SIZES {
        let data = micro::payload(len);
        assert_eq!(
            micro::put_get(&ray, data.clone()).await.unwrap(),
            len,
            "{label}"
        );
        assert_eq!(
            micro::put_get_archived(&ray, data.clone()).await.unwrap(),
            len,
            "{label}"
        );
        let r = ray.put(data.clone()).await.unwrap();
        let view = micro::get_archived(&r).await.unwrap();
        assert!(view.as_slice() == data.as_slice(), "{label}: view differs");
        assert!(r.get().await.unwrap() == data, "{label}: copy differs");
    }

    // W5: 50 and then 1,000 actors, one call each.
    for n in micro::W5_ACTORS {
        let actors = micro::create_and_call(&ray, n).await.unwrap();
        assert_eq!(actors.len(), n);
    }

    // W6: tasks taking one 10 MiB object, as a view and as a copy.
    let data = ray.put(micro::payload(big_arg::W6_BYTES)).await.unwrap();
    for access in [big_arg::ArgAccess::View, big_arg::ArgAccess::Deserialized] {
        let lens = big_arg::batch(&ray, &data, BIG_ARG_TASKS, access)
            .await
            .unwrap();
        assert_eq!(
            lens,
            vec![big_arg::W6_BYTES as u64; BIG_ARG_TASKS],
            "{access:?}"
        );
    }
    drop(data);

    // W7: the worker tree of seed 42, full size.
    let run = tree::run(&ray, tree::DEFAULT_SEED).await.unwrap();
    assert_eq!(run.actors, 12);
    assert_eq!(run.calls, 6_321);

    ray.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_and_spread_actors_reach_the_second_node() {
    let c = Cluster::local(2).await.expect("cluster starts");
    let ray = c.connect().await.expect("driver joins");

    let nodes = cluster::nodes_reached(&ray, 2).await.unwrap();
    assert_eq!(nodes.len(), 2, "spread probes reached {nodes:?}");
    let far = cluster::other_node(&ray)
        .await
        .unwrap()
        .expect("a second node");
    assert_ne!(far, ray.node_id());

    // Tasks pinned to the far node run there.
    let refs: Vec<_> = (0..20)
        .map(|i| {
            placed::options()
                .node_affinity(far, false)
                .remote(&ray, i)
                .unwrap()
        })
        .collect();
    for (i, r) in refs.iter().enumerate() {
        assert_eq!(r.get().await.unwrap(), (i as u64, far.0));
    }

    // The transfer shape: a large object put by the driver, summed in
    // place by a task on the far node.
    let data = micro::payload(16 << 20);
    let want = cluster::sum_bytes(&data);
    let obj = ray.put(data).await.unwrap();
    assert_eq!(cluster::sum_on(&ray, &obj, far).await.unwrap(), want);

    // The spread-actors shape: every actor answers, from both nodes.
    let (actors, per_node) = cluster::spread_actors(&ray, 200).await.unwrap();
    assert_eq!(actors.len(), 200);
    assert_eq!(per_node.values().sum::<usize>(), 200);
    let used: BTreeSet<u64> = per_node.keys().copied().collect();
    assert_eq!(used, nodes, "actors per node: {per_node:?}");

    ray.shutdown();
}
