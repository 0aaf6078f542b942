//! `ray_core::insight::context` labels the current task, its children inherit
//! the labels, and insight's views filter on them (one test per file: it
//! installs the process's global subscriber).

use ray_test_support::{embedded, recording};

use std::time::{Duration, Instant};

use ray_core::prelude::*;
use ray_insight::views::{LogicalNode, LogicalView};
use ray_insight::{MemorySink, RecordKind, Views};

#[remote]
fn step(x: u64) -> u64 {
    x + 1
}

#[remote]
fn train(rank: u64) -> u64 {
    ray_core::insight::context(&[("dp_rank", &rank.to_string()), ("job", "ctx-test")]);
    let ray = Ray::current().expect("in a task");
    step::remote(&ray, rank).unwrap().get_blocking().unwrap()
}

/// Calls counted on the edge `from -> …name` of the logical graph.
fn calls(view: &LogicalView, from: &dyn Fn(&LogicalNode) -> bool, name: &str) -> u64 {
    view.call_edges
        .iter()
        .filter(|e| from(&e.from) && e.name.ends_with(name))
        .map(|e| e.count)
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_context_label_keeps_its_task_and_children_in_the_filtered_views() {
    // The runtime's records through `tracing` (a program that composed the
    // layer itself): the same views as when it records directly.
    let collector = recording::record_globally_with(false);
    let ray = embedded::runtime(2.0).await;
    assert_eq!(train::remote(&ray, 0).unwrap().get().await.unwrap(), 1);
    assert_eq!(train::remote(&ray, 1).unwrap().get().await.unwrap(), 2);
    let from_driver = |n: &LogicalNode| *n == LogicalNode::Driver;
    let from_train =
        |n: &LogicalNode| matches!(n, LogicalNode::Function(f) if f.ends_with("::train"));
    // A task's span closes just after its result is stored: drain until
    // both `train` calls (and their `step`s) have finished in the records.
    let mut sink = MemorySink::new(100_000);
    let deadline = Instant::now() + Duration::from_secs(10);
    let views = loop {
        collector.drain_into(&mut sink);
        let mut views = Views::default();
        for r in sink.records() {
            views.apply(r);
        }
        let logical = views.snapshot().logical();
        let done = calls(&logical, &from_driver, "::train") == 2
            && calls(&logical, &from_train, "::step") == 2
            && views.stats().live_tasks == 0;
        if done || Instant::now() >= deadline {
            break views;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    ray.shutdown();
    let records = sink.records();

    // The event names the labelled task and packs the labels into one field.
    let train_runs: Vec<u128> = records
        .iter()
        .filter(|r| r.kind == RecordKind::SpanNew && r.name == "task.run")
        .filter(|r| {
            r.field("function")
                .and_then(|f| f.as_str())
                .is_some_and(|f| f.ends_with("::train"))
        })
        .filter_map(|r| r.field("task_id").and_then(|t| t.as_u128()))
        .collect();
    assert_eq!(train_runs.len(), 2);
    let contexts: Vec<(Option<u128>, Option<&str>)> = records
        .iter()
        .filter(|r| r.kind == RecordKind::Event && r.name == "context")
        .map(|r| {
            (
                r.field("task_id").and_then(|t| t.as_u128()),
                r.field("labels").and_then(|l| l.as_str()),
            )
        })
        .collect();
    assert_eq!(contexts.len(), 2, "{contexts:?}");
    for (task, labels) in &contexts {
        assert!(
            task.is_some_and(|t| train_runs.contains(&t)),
            "{contexts:?}"
        );
        assert!(
            labels.is_some_and(|l| l == "dp_rank=0,job=ctx-test" || l == "dp_rank=1,job=ctx-test"),
            "{contexts:?}"
        );
    }

    let all = views.snapshot().logical();
    assert_eq!(
        calls(&all, &from_driver, "::train"),
        2,
        "{:?}",
        all.call_edges
    );
    assert_eq!(calls(&all, &from_train, "::step"), 2);

    // Rank 0 keeps its `train` and the `step` it submitted, nothing of rank 1.
    let rank0 = views.filter("dp_rank", "0");
    let logical = rank0.logical();
    assert_eq!(
        calls(&logical, &from_driver, "::train"),
        1,
        "{:?}",
        logical.call_edges
    );
    assert_eq!(
        calls(&logical, &from_train, "::step"),
        1,
        "{:?}",
        logical.call_edges
    );
    // The flame graph keeps the two call paths of rank 0, once each.
    let flame = rank0.flame();
    let mut paths: Vec<(&str, u64)> = flame
        .frames
        .iter()
        .filter(|f| f.path != "driver")
        .map(|f| (f.path.as_str(), f.count))
        .collect();
    paths.sort();
    assert_eq!(paths.len(), 2, "{paths:?}");
    let train_path = paths
        .iter()
        .find(|(p, _)| p.starts_with("driver;") && p.ends_with("::train"))
        .expect("driver;…::train");
    let step_path = format!("{};", train_path.0);
    assert_eq!(train_path.1, 1);
    assert!(
        paths
            .iter()
            .any(|(p, c)| *c == 1 && p.starts_with(&step_path) && p.ends_with("::step")),
        "{paths:?}"
    );

    // Both ranks share the other label; an unknown rank keeps nothing.
    let job = views.filter("job", "ctx-test").logical();
    assert_eq!(calls(&job, &from_train, "::step"), 2);
    assert!(views.filter("dp_rank", "7").logical().call_edges.is_empty());
}
