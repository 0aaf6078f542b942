//! A program that really deadlocks across two node processes — two actors,
//! spread over the nodes, calling each other synchronously — is reported by
//! the head's distributed stack view, built from the records both worker
//! processes and the driver shipped; the program is then ended.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use ray_core::insight::InsightOptions;
use ray_core::prelude::*;
use ray_core::{Cluster, Config};
use serde_json::Value;

use ray_test_support::deadlock::{Left, Right};

/// The method names of the first reported cycle, sorted, without paths.
fn cycle_methods(stacks: &Value) -> Option<Vec<String>> {
    let cycle = stacks["deadlocks"].as_array()?.first()?["cycle"].as_array()?;
    let mut names: Vec<String> = cycle
        .iter()
        .filter_map(|t| t["name"].as_str())
        .map(|n| n.rsplit(['.', ':']).next().unwrap_or(n).to_owned())
        .collect();
    names.sort();
    Some(names)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadlock_between_actors_on_two_nodes_is_reported_by_the_head() {
    let cluster = Cluster::local(2).await.expect("cluster starts");
    let ray = ray_core::init_with(Config {
        insight: Some(InsightOptions::default()),
        ..cluster.config()
    })
    .await
    .expect("driver joins, recording");
    let left = Left::options().spread().remote(&ray).unwrap();
    let right = Right::options().spread().remote(&ray).unwrap();
    let nodes: BTreeSet<u64> = [
        left.node().unwrap().get().await.unwrap(),
        right.node().unwrap().get().await.unwrap(),
    ]
    .into();
    let hung = left.ping(right.clone(), left.clone()).unwrap();

    let deadline = Instant::now() + Duration::from_secs(30);
    let (methods, report) = loop {
        let stacks: Value = serde_json::from_str(
            &cluster
                .insight_export(None, "stack", "json", None, None)
                .await
                .expect("the head exports the stack view"),
        )
        .expect("JSON");
        if let Some(methods) = cycle_methods(&stacks) {
            let text = cluster
                .insight_export(None, "stack", "text", None, None)
                .await
                .expect("the head exports the stack view as text");
            break (methods, text);
        }
        assert!(
            Instant::now() < deadline,
            "no deadlock reported within 30 s: {stacks:#}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    eprintln!("{report}");
    // The program is ended: its pending calls fail with the runtime.
    ray.shutdown();
    drop(hung);
    assert_eq!(methods, ["echo", "ping", "pong"], "{report}");
    assert!(report.contains("DEADLOCK (3 tasks)"), "{report}");
    // The blocked calls ran in worker processes of both nodes (when spread
    // placed the actors apart), and the report names where.
    if nodes.len() == 2 {
        for node in &nodes {
            assert!(report.contains(&format!("node=node-{node:x}")), "{report}");
        }
    }
}
