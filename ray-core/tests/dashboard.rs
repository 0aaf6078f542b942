//! An embedded runtime asked for a dashboard (`InsightOptions::dashboard`)
//! serves its live views over HTTP on loopback, behind its token (one test
//! per file: recording installs the process's global subscriber).

use std::time::{Duration, Instant};

use ray_core::insight::InsightOptions;
use ray_core::prelude::*;
use ray_core::Config;
use serde_json::Value;

use ray_test_support::http::get_url as get;

#[remote]
fn leaf(x: u64) -> u64 {
    x * 2
}

#[remote]
fn fan(n: u64) -> u64 {
    let ray = Ray::current().expect("in a task");
    let refs: Vec<_> = (0..n).map(|i| leaf::remote(&ray, i).unwrap()).collect();
    refs.iter().map(|r| r.get_blocking().unwrap()).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_embedded_runtime_serves_its_live_views_behind_its_token() {
    let ray = ray_core::init_with(Config {
        num_cpus: Some(2.0),
        insight: Some(InsightOptions {
            dashboard: Some(std::net::SocketAddr::from(([127, 0, 0, 1], 0))),
            ..InsightOptions::default()
        }),
        ..Config::default()
    })
    .await
    .expect("runtime starts, recording and serving");
    let insight = ray.insight().expect("recording");
    let url = insight.dashboard_url().expect("a dashboard URL");
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    let token = url
        .split("token=")
        .nth(1)
        .expect("the URL carries the token");

    assert_eq!(fan::remote(&ray, 5).unwrap().get().await.unwrap(), 20);
    assert!(insight.settle(Duration::from_secs(5)).await);

    // Without the token: refused.
    assert_eq!(get(&url, "/api/view?view=logical&format=json").0, 401);
    assert_eq!(get(&url, "/").0, 401);
    // With it: the page, and the live logical view with the fan -> leaf edge.
    let (status, page) = get(&url, &format!("/?token={token}"));
    assert_eq!(status, 200);
    assert!(page.contains(token));
    let deadline = Instant::now() + Duration::from_secs(10);
    let edges = loop {
        let (status, body) = get(
            &url,
            &format!("/api/view?token={token}&view=logical&format=json"),
        );
        assert_eq!(status, 200, "{body}");
        let logical: Value = serde_json::from_str(&body).expect("JSON");
        let leaf_calls: u64 = logical["call_edges"]
            .as_array()
            .expect("call_edges")
            .iter()
            .filter(|e| e["name"].as_str().is_some_and(|n| n.ends_with("::leaf")))
            .map(|e| e["count"].as_u64().unwrap_or(0))
            .sum();
        if leaf_calls == 5 || Instant::now() > deadline {
            break leaf_calls;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(edges, 5);
    let (status, stats) = get(&url, &format!("/api/stats?token={token}"));
    assert_eq!(status, 200);
    let stats: Value = serde_json::from_str(&stats).unwrap();
    assert!(stats["version"].as_u64().unwrap() > 0, "{stats}");
    assert_eq!(stats["job"], "embedded");
    // No event log was asked for: no replay at a time, said plainly.
    let (status, body) = get(&url, &format!("/api/view?token={token}&view=stack&at=1000"));
    assert_eq!(status, 404);
    assert!(body.contains("no event log"), "{body}");
    ray.shutdown();
}
