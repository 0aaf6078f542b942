//! Insight on a real cluster: a task running in a worker process opens an
//! application span and submits tasks inside it; the head's flame graph has
//! them under that span, whichever process's records reach the head first
//! (the span id travels with the work and is made cluster-wide with the
//! submitting process's id). A file of its own: recording is process-wide.

use std::time::Duration;

use ray_core::prelude::*;
use ray_core::Cluster;

#[path = "support/head_views.rs"]
mod head_views;
use head_views::recording_driver;

#[remote]
fn leaf(x: u64) -> u64 {
    std::thread::sleep(Duration::from_millis(1));
    x + 1
}

/// Submits three leaves inside `reward_fn` and one after it.
#[remote]
async fn outer() -> u64 {
    let ray = Ray::current().expect("inside a task");
    let inside: Vec<_> = {
        let _reward = tracing::info_span!("reward_fn").entered();
        (0..3).map(|i| leaf::remote(&ray, i).unwrap()).collect()
    };
    let outside = leaf::remote(&ray, 10).unwrap();
    let mut sum = outside.get().await.unwrap();
    for r in inside {
        sum += r.get().await.unwrap();
    }
    sum
}

/// The folded flame graph's paths (each line is `path value`).
fn paths(folded: &str) -> Vec<&str> {
    folded
        .lines()
        .filter_map(|l| l.rsplit_once(' ').map(|(path, _)| path))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_submitted_in_a_user_span_in_a_worker_are_under_that_span_at_the_head() {
    let cluster = Cluster::local(1).await.expect("cluster starts");
    let ray = recording_driver(&cluster).await;
    let insight = ray.insight().expect("the driver records");
    let total = outer::remote(&ray).unwrap().get().await.unwrap();
    assert_eq!(total, 11 + 1 + 2 + 3);
    insight.flush().await;

    let under = "cluster_insight_user_spans::outer;reward_fn;cluster_insight_user_spans::leaf";
    let beside = "cluster_insight_user_spans::outer;cluster_insight_user_spans::leaf";
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let folded = loop {
        let folded = cluster
            .insight_export(None, "flame", "folded", None, None)
            .await
            .expect("the head exports the flame graph");
        let found = paths(&folded);
        let done =
            found.iter().any(|p| p.ends_with(under)) && found.iter().any(|p| p.ends_with(beside));
        if done || std::time::Instant::now() > deadline {
            break folded;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let found = paths(&folded);
    assert!(found.iter().any(|p| p.ends_with(under)), "{folded}");
    assert!(found.iter().any(|p| p.ends_with(beside)), "{folded}");
    assert!(!folded.contains("[unknown]"), "{folded}");
    ray.shutdown();
}
