//! Insight on a real cluster, across nodes: an actor on one node calls an
//! actor on the other 10,000 times, and the head's views attribute every
//! call to its caller (no `unknown` caller, no record dropped or lost).

// `new` is each actor's constructor, not a value a `Default` could stand for.
#![allow(clippy::new_without_default)]

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use ray_core::prelude::*;
use ray_core::Cluster;
use ray_test_support::insight_job::edge;
use serde_json::Value;

#[path = "support/head_views.rs"]
mod head_views;
use head_views::{json, recording_driver};

/// Calls from `Relay` to `Sink`, in all.
const CALLS: u64 = 10_000;

/// Calls a relay keeps in flight at once.
const WINDOW: u64 = 500;

/// Adds up what it is given.
#[remote]
pub struct Sink {
    n: u64,
}

#[remote]
impl Sink {
    /// A sink at 0.
    pub fn new() -> Self {
        Sink { n: 0 }
    }

    /// Adds `by`; returns the total.
    pub fn add(&mut self, by: u64) -> u64 {
        self.n += by;
        self.n
    }
}

/// Calls a sink (on another node) from its own worker process.
#[remote]
pub struct Relay {
    sink: ActorHandle<Sink>,
}

#[remote]
impl Relay {
    /// A relay to `sink`.
    pub fn new(sink: ActorHandle<Sink>) -> Self {
        Relay { sink }
    }

    /// Makes `calls` calls to the sink, `WINDOW` at a time; returns the
    /// sink's total after the last.
    pub fn relay(&self, calls: u64) -> u64 {
        let mut total = 0;
        let mut left = calls;
        while left > 0 {
            let now = left.min(WINDOW);
            let refs: Vec<_> = (0..now)
                .map(|_| self.sink.add(1).expect("submit to the sink"))
                .collect();
            for r in refs {
                total = total.max(r.get_blocking().expect("the sink answers"));
            }
            left -= now;
        }
        total
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_cross_node_calls_all_reach_the_views_with_their_caller() {
    let cluster = Cluster::local(2).await.expect("cluster starts");
    let ray = recording_driver(&cluster).await;
    let insight = ray.insight().expect("the driver records");
    let sink = Sink::options().spread().remote(&ray).unwrap();
    let relay = Relay::options()
        .spread()
        .remote(&ray, sink.clone())
        .unwrap();
    assert_eq!(relay.relay(CALLS).unwrap().get().await.unwrap(), CALLS);
    insight.flush().await;
    // The logical view names an actor by its id, as insight renders it.
    let relay_node = {
        let v = relay.id().as_u128();
        format!("actor:actor-{:x}.{:x}", v >> 64, v as u64)
    };

    let export = |view: &'static str, format: &'static str| {
        let cluster = &cluster;
        async move {
            cluster
                .insight_export(None, view, format, None, None)
                .await
                .expect("the head exports")
        }
    };
    // Workers ship every 50 ms: poll the head until every call is there.
    let deadline = Instant::now() + Duration::from_secs(60);
    let logical = loop {
        let logical = json(&export("logical", "json").await);
        if edge(&logical, &relay_node, "::add") >= CALLS || Instant::now() > deadline {
            break logical;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let edges = &logical["call_edges"];
    let records = &logical["records"];
    assert_eq!(
        edge(&logical, &relay_node, "::add"),
        CALLS,
        "{edges:#}\n{records:#}"
    );
    let unknown: Vec<&Value> = edges
        .as_array()
        .expect("call_edges")
        .iter()
        .filter(|e| e["from"].as_str().is_some_and(|f| f.contains("unknown")))
        .collect();
    assert!(
        unknown.is_empty(),
        "calls with an unknown caller: {unknown:#?}"
    );
    for counter in ["dropped", "lost"] {
        assert_eq!(records[counter].as_u64(), Some(0), "{records:#}");
    }

    // The two actors ran on two nodes: the calls crossed between them.
    let physical = json(&export("physical", "json").await);
    let actor_nodes: BTreeSet<&str> = physical["nodes"]
        .as_array()
        .expect("nodes")
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

    // The flame graph has every call under the relay's instance.
    let folded = export("flame", "folded").await;
    assert!(!folded.contains("[unknown]"), "{folded}");
    let under_relay: u64 = folded
        .lines()
        .filter(|l| l.contains("Relay[") && l.contains("Sink[") && l.contains(".add"))
        .count() as u64;
    assert!(under_relay > 0, "{folded}");
    drop((relay, sink));
    ray.shutdown();
}
