//! `rayrs insight export --address` against a real cluster: the head
//! builds a recording job's views from the records every process shipped,
//! and the binary prints them (the head's side is tested in ray-core's
//! `cluster_insight.rs`).

use std::time::{Duration, Instant};

use ray_core::insight::InsightOptions;
use ray_core::{Cluster, Config};
use ray_test_support::insight_job::{self, edge};
use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rayrs_insight_export_prints_the_heads_views_of_a_cluster_job() {
    let cluster = Cluster::local(2).await.expect("cluster starts");
    let ray = ray_core::init_with(Config {
        insight: Some(InsightOptions::default()),
        ..cluster.config()
    })
    .await
    .expect("driver joins, recording");
    let insight = ray.insight().expect("the driver records");

    let tallies = insight_job::run(&ray).await;
    insight.flush().await;

    // Processes ship every 50 ms, an I/O thread's records when it parks:
    // wait until the head has every call and the owners' placements.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = cluster
            .insight_export(None, "logical", "json", None, None)
            .await
            .expect("the head exports the logical view");
        let logical: Value = serde_json::from_str(&text).expect("JSON");
        let gantt = cluster
            .insight_export(None, "gantt", "chrome", None, None)
            .await
            .expect("the head exports the Gantt view");
        if edge(&logical, "driver", "::parent") == 3
            && edge(&logical, "parent", "::leaf") == 12
            && edge(&logical, "driver", "::add") == 10
            && gantt.contains("\"scheduled ")
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the head never had every call and placement: {logical:#}\n{gantt}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // `rayrs insight export` asks the same head: the flame graph's paths
    // run from the driver through a parent (in one worker) to its leaves.
    let rayrs = |args: &[&str]| {
        let creds = cluster.credentials();
        let address = cluster.address();
        let mut all = vec!["insight", "export", "--address", &address];
        all.extend(["--credentials", creds.to_str().expect("utf-8 path")]);
        all.extend(args);
        std::process::Command::new(env!("CARGO_BIN_EXE_rayrs"))
            .args(&all)
            .output()
            .expect("rayrs runs")
    };
    let flame = rayrs(&["--view", "flame", "--format", "folded"]);
    let folded = String::from_utf8_lossy(&flame.stdout);
    assert!(
        flame.status.success(),
        "{}",
        String::from_utf8_lossy(&flame.stderr)
    );
    assert!(
        folded
            .lines()
            .any(|l| l.starts_with("driver;") && l.contains("::parent;") && l.contains("::leaf ")),
        "{folded}"
    );
    // By instance by default; `--fold class` folds the actor's instance
    // into its class, on the head.
    assert!(folded.contains("Tally[actor-"), "{folded}");
    let by_class = rayrs(&["--view", "flame", "--fold", "class"]);
    let by_class = String::from_utf8_lossy(&by_class.stdout);
    assert!(
        by_class.contains("Tally.add") && !by_class.contains("[actor-"),
        "{by_class}"
    );
    // Pushed work shows its placement: submitted, scheduled (pushed to a
    // worker), then running.
    let gantt = rayrs(&["--view", "gantt"]);
    let trace = String::from_utf8_lossy(&gantt.stdout);
    assert!(gantt.status.success());
    assert!(
        trace.contains("\"scheduled "),
        "no scheduled slice in {trace}"
    );
    let missing = rayrs(&["--view", "logical", "--job", "999"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("no insight records"),
        "{}",
        String::from_utf8_lossy(&missing.stderr)
    );
    drop(tallies);
    ray.shutdown();
}
