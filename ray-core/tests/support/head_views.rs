//! Reading a local cluster's head views from a test: a recording driver,
//! the head's exported views polled until they show what a test waits
//! for, and a call edge's figures. Shared by the cluster insight tests
//! (each uses some of it).

#![allow(dead_code)]

use std::time::{Duration, Instant};

use ray_core::insight::InsightOptions;
use ray_core::{Cluster, Config, Ray};
use serde_json::Value;

/// A driver joined to `cluster`, recording for insight.
pub(crate) async fn recording_driver(cluster: &Cluster) -> Ray {
    ray_core::init_with(Config {
        insight: Some(InsightOptions::default()),
        ..cluster.config()
    })
    .await
    .expect("driver joins, recording")
}

/// `text` as JSON (what the head exports is valid JSON).
pub(crate) fn json(text: &str) -> Value {
    serde_json::from_str(text).expect("the head exports valid JSON")
}

/// Field `field` of the call edge whose name ends with `name` (0 if none).
pub(crate) fn edge_field(logical: &Value, name: &str, field: &str) -> u64 {
    logical["call_edges"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["name"].as_str().is_some_and(|n| n.ends_with(name)))
        .filter_map(|e| e[field].as_u64())
        .sum()
}

/// The head's `view` (JSON), once `done` holds of it (or after 30 s, for
/// the caller's assertion to say what is missing).
pub(crate) async fn poll_view(
    cluster: &Cluster,
    view: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let exported = json(
            &cluster
                .insight_export(None, view, "json", None, None)
                .await
                .expect("the head exports the view"),
        );
        if done(&exported) || Instant::now() > deadline {
            return exported;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The head's logical view, once `done` holds of it.
pub(crate) async fn poll_logical(cluster: &Cluster, done: impl Fn(&Value) -> bool) -> Value {
    poll_view(cluster, "logical", done).await
}
