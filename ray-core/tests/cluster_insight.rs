//! Insight on a real cluster: the driver and the worker processes of a job
//! that records ship their records to the head, which builds one set of
//! views for the job (call edges across processes, actors on both nodes,
//! resource samples of the workers) and an event log that replays to the
//! same views. What `rayrs insight export` prints of them is tested in the
//! rayrs crate (`rayrs/tests/cluster_insight.rs`).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use ray_core::prelude::*;
use ray_core::{Cluster, NodeId};
use ray_test_support::insight_job::{self, edge};
use serde_json::Value;

#[path = "support/head_views.rs"]
mod head_views;
use head_views::{edge_field, json, poll_logical, poll_view, recording_driver};

/// Sleeps `ms` milliseconds: a call that is still running when its node dies.
#[remote]
fn sleepy(ms: u64) -> u64 {
    std::thread::sleep(Duration::from_millis(ms));
    ms
}

/// Takes its worker process down with it.
#[remote]
fn crash() -> u64 {
    std::process::abort()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_head_builds_one_jobs_views_from_every_process_and_replays_its_log() {
    let mut cluster = Cluster::local(2).await.expect("cluster starts");
    let ray = recording_driver(&cluster).await;
    let insight = ray.insight().expect("the driver records");

    let tallies = insight_job::run(&ray).await;
    insight.flush().await;
    assert!(
        insight.with_views(|_| ()).is_none(),
        "a cluster driver's views live on the head"
    );

    // Workers ship every 50 ms and sample every second: poll the head.
    let deadline = Instant::now() + Duration::from_secs(30);
    let (logical, physical) = loop {
        let logical = json(
            &cluster
                .insight_export(None, "logical", "json", None, None)
                .await
                .expect("the head exports the logical view"),
        );
        let physical = json(
            &cluster
                .insight_export(None, "physical", "json", None, None)
                .await
                .expect("the head exports the physical view"),
        );
        let sampled = physical["nodes"].as_array().is_some_and(|nodes| {
            nodes.iter().any(|n| {
                n["workers"].as_array().is_some_and(|w| {
                    w.iter()
                        .any(|w| !w["samples"].as_array().is_none_or(Vec::is_empty))
                })
            })
        });
        let done = edge(&logical, "driver", "::parent") == 3
            && edge(&logical, "parent", "::leaf") == 12
            && edge(&logical, "driver", "::add") == 10
            && sampled;
        if done || Instant::now() > deadline {
            break (logical, physical);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // Call edges cross processes: the driver's submits meet the workers' runs
    // under one task id, and the leaves' parent is the task in the worker.
    let edges = &logical["call_edges"];
    assert_eq!(edge(&logical, "driver", "::parent"), 3, "{edges:#}");
    assert_eq!(edge(&logical, "parent", "::leaf"), 12, "{edges:#}");
    assert_eq!(edge(&logical, "driver", "::add"), 10, "{edges:#}");
    // Both actors, on two different nodes, each in a worker process.
    let nodes = physical["nodes"].as_array().expect("nodes");
    let actor_nodes: BTreeSet<&str> = nodes
        .iter()
        .filter(|n| {
            n["workers"].as_array().is_some_and(|w| {
                w.iter()
                    .any(|w| !w["actors"].as_array().is_none_or(Vec::is_empty))
            })
        })
        .filter_map(|n| n["node_id"].as_str())
        .collect();
    assert_eq!(actor_nodes.len(), 2, "{physical:#}");
    assert!(actor_nodes.iter().all(|n| n.starts_with("node-")));
    // Workers' resource samples reach the head.
    let samples: usize = nodes
        .iter()
        .flat_map(|n| n["workers"].as_array().into_iter().flatten())
        .map(|w| w["samples"].as_array().map_or(0, Vec::len))
        .sum();
    assert!(samples > 0, "{physical:#}");

    // The head's log replays to the live views.
    let live = cluster
        .insight_export(None, "logical", "json", None, None)
        .await
        .unwrap();
    let replayed = cluster
        .insight_export(None, "logical", "json", Some(u64::MAX), None)
        .await
        .unwrap();
    // The job still runs: a worker's resource sample can reach the head
    // between the two exports, counted in `records` but drawing nothing
    // in this view. The graph must match; the counts may only have grown.
    let (mut live, mut replayed) = (json(&live), json(&replayed));
    let applied = |v: &Value| v["records"]["applied"].as_u64().expect("applied");
    assert!(
        applied(&replayed) >= applied(&live),
        "{live:#}\n{replayed:#}"
    );
    live.as_object_mut().expect("an object").remove("records");
    replayed
        .as_object_mut()
        .expect("an object")
        .remove("records");
    assert_eq!(live, replayed);
    let log = std::fs::read_dir(cluster.insight_dir())
        .expect("the head keeps an insight directory")
        .filter_map(|e| e.ok())
        .find(|e| e.file_name().to_string_lossy().ends_with(".log"))
        .expect("the job's event log");
    assert!(log.metadata().unwrap().len() > 0);
    // At time 0 of the job nothing had run yet.
    let at_start = json(
        &cluster
            .insight_export(None, "logical", "json", Some(0), None)
            .await
            .unwrap(),
    );
    assert_eq!(edge(&at_start, "parent", "::leaf"), 0);
    // Bad requests get the head's reason, not a hang.
    let err = cluster
        .insight_export(None, "logical", "svg", None, None)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("svg"), "{err}");

    // A node that joins and runs nothing of the job still shows, alive.
    let before: BTreeSet<u64> = ray.nodes().await.unwrap().iter().map(|n| n.id.0).collect();
    let third = cluster.add_node().await.expect("a third node joins");
    let physical = poll_physical(&cluster, |nodes| registered(nodes, true) == 3).await;
    assert_eq!(registered(&physical, true), 3, "{physical:#?}");
    let idle = physical
        .iter()
        .find(|n| n["alive"] == true && n["workers"].as_array().is_none_or(Vec::is_empty))
        .unwrap_or_else(|| panic!("an idle registered node in {physical:#?}"));
    assert_eq!(idle["running_tasks"], 0);

    // A call running there when the node is killed ends as failed, and the
    // node shows dead with the head's reason.
    let new_node = ray
        .nodes()
        .await
        .unwrap()
        .iter()
        .map(|n| n.id.0)
        .find(|id| !before.contains(id))
        .expect("the third node's id");
    // The driver's view of the cluster learns of the node shortly after the
    // head does: until then the pinned call is refused as infeasible.
    let deadline = Instant::now() + Duration::from_secs(30);
    let doomed = loop {
        let submitted = sleepy::options()
            .node_affinity(NodeId(new_node), false)
            .max_retries(0)
            .remote(&ray, 600_000);
        match submitted {
            Ok(doomed) => break doomed,
            Err(e) if Instant::now() < deadline => {
                assert!(matches!(e, ray_core::Error::Infeasible { .. }), "{e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("the third node never became usable: {e}"),
        }
    };
    let logical = poll_logical(&cluster, |l| edge_field(l, "::sleepy", "running") == 1).await;
    assert_eq!(
        edge_field(&logical, "::sleepy", "running"),
        1,
        "{logical:#}"
    );
    cluster.kill_node(third);
    let physical = poll_physical(&cluster, |nodes| registered(nodes, false) == 1).await;
    assert_eq!(registered(&physical, true), 2, "{physical:#?}");
    let dead = physical
        .iter()
        .find(|n| n["alive"] == false)
        .unwrap_or_else(|| panic!("a dead node in {physical:#?}"));
    assert!(
        dead["death_cause"].as_str().is_some_and(|c| !c.is_empty()),
        "{dead:#}"
    );
    assert_eq!(dead["running_tasks"], 0, "{dead:#}");
    let logical = poll_logical(&cluster, |l| edge_field(l, "::sleepy", "failed") == 1).await;
    assert_eq!(edge_field(&logical, "::sleepy", "failed"), 1, "{logical:#}");
    assert_eq!(
        edge_field(&logical, "::sleepy", "running"),
        0,
        "{logical:#}"
    );
    drop(doomed);

    // A call whose worker process dies under it, with no retries left: its
    // owner tells the views, which count it failed (not running forever).
    let crashed = crash::options().max_retries(0).remote(&ray).unwrap();
    let err = crashed.get().await.expect_err("its worker died");
    assert!(matches!(err, ray_core::Error::WorkerDied { .. }), "{err}");
    insight.flush().await;
    let logical = poll_logical(&cluster, |l| edge_field(l, "::crash", "failed") == 1).await;
    assert_eq!(edge_field(&logical, "::crash", "failed"), 1, "{logical:#}");
    assert_eq!(edge_field(&logical, "::crash", "running"), 0, "{logical:#}");
    assert_eq!(edge_field(&logical, "::crash", "queued"), 0, "{logical:#}");
    drop(tallies);
    ray.shutdown();
}

/// The head's physical view's nodes, once `done` holds of them.
async fn poll_physical(cluster: &Cluster, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let nodes = |physical: &Value| physical["nodes"].as_array().cloned().unwrap_or_default();
    nodes(&poll_view(cluster, "physical", |p| done(&nodes(p))).await)
}

/// How many of `nodes` the head registered, alive or dead as `alive` says.
fn registered(nodes: &[Value], alive: bool) -> usize {
    nodes
        .iter()
        .filter(|n| n["alive"].as_bool() == Some(alive))
        .count()
}
