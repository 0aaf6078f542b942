//! The chaos workload (examples/shapes/chaos.rs) on a real three-node
//! `Cluster::local`, while nodes are killed with SIGKILL and replaced: a
//! short version of `workloads --mode cluster chaos` for CI (two kills).
//! Every task total and every report must be right.

use std::time::Duration;

use ray_core::{Cluster, LocalClusterConfig};

// The harness reads more of the outcome than this test.
#[allow(dead_code)]
#[path = "../examples/shapes/chaos.rs"]
mod chaos;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_and_reporting_actors_finish_right_while_nodes_are_killed() {
    // The local default health timeout (1 s): killed nodes are noticed
    // within it, and busy ones are not taken for dead.
    let mut cluster = Cluster::local_with(3, LocalClusterConfig::default())
        .await
        .expect("cluster starts");
    let ray = cluster.connect().await.expect("driver joins");
    // 120 children of 200 ms on 6 CPUs: at least 4 s, so the killer (every
    // 2 s) strikes at least once however fast the machine is.
    let size = chaos::ChaosSize {
        parents: 12,
        children: 10,
        child_ms: 200,
        reporters: 4,
        reports: 30,
        objects: 40,
        object_bytes: 256 << 10,
    };
    let out = chaos::run(&mut cluster, &ray, size, Some(Duration::from_secs(2)))
        .await
        .expect("the workload ends without an error");
    eprintln!("chaos: {out:?}");
    assert!(out.kills >= 1, "no node was killed: {out:?}");
    assert!(out.tasks_correct, "the tasks' total is wrong: {out:?}");
    assert_eq!(out.missing_reports, 0, "reports lost: {out:?}");
    assert!(out.objects_correct, "a borrower saw wrong bytes: {out:?}");
    ray.shutdown();
}
