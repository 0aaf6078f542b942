//! W7 (the worker tree) recorded by insight on the embedded runtime: the five
//! views agree with what the run measured (one test per file: it installs the
//! process's global subscriber).

use std::collections::HashMap;
use std::time::Duration;

use ray_insight::views::{CallKind, LogicalNode};

#[path = "../examples/shapes/recording.rs"]
mod recording;
#[path = "../examples/shapes/tree.rs"]
mod tree;

/// Slack allowed on top of the measured wall time for the root call's span
/// (the span and the stopwatch are read on different threads).
const SLACK: Duration = Duration::from_millis(50);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_tree_views_match_the_measured_run() {
    let recording = recording::Recording::start().expect("no other subscriber in this process");
    let ray = ray_core::init_with(ray_core::Config {
        num_cpus: Some(2.0),
        ..Default::default()
    })
    .await
    .expect("an embedded runtime starts");
    let run = tree::run(&ray, tree::DEFAULT_SEED).await.expect("W7 runs");
    ray.shutdown();
    let views = recording
        .finish(Duration::from_secs(5))
        .await
        .expect("the recording stops");
    assert_eq!(run.actors, 12);
    assert_eq!(run.calls, 6321);
    assert_eq!(views.dropped(), 0, "{:?}", views.stats());
    let snap = views.snapshot();

    // Logical: the 12 TreeNode instances, and on every process() edge
    // CALLS_PER_CHILD calls per call the caller received.
    let logical = snap.logical();
    let is_tree_node = |class: &str| class.ends_with("::tree::TreeNode");
    let actors: Vec<&str> = logical
        .nodes
        .iter()
        .filter_map(|n| match &n.node {
            LogicalNode::Actor { class, actor_id } if is_tree_node(class) => Some(&**actor_id),
            _ => None,
        })
        .collect();
    assert_eq!(actors.len(), 12, "{actors:?}");
    let process: Vec<_> = logical
        .call_edges
        .iter()
        .filter(|e| e.kind == CallKind::ActorCall && e.name.ends_with("::process"))
        .collect();
    let calls_into: HashMap<&LogicalNode, u64> = process.iter().fold(HashMap::new(), |mut m, e| {
        *m.entry(&e.to).or_default() += e.count;
        m
    });
    let root_edge = process
        .iter()
        .find(|e| e.from == LogicalNode::Driver)
        .expect("the driver called the root's process()");
    assert_eq!(root_edge.count, 1);
    let per_child = tree::CALLS_PER_CHILD as u64;
    for edge in &process {
        if edge.from == LogicalNode::Driver {
            continue;
        }
        assert!(
            matches!(&edge.from, LogicalNode::Actor { class, .. } if is_tree_node(class)),
            "a process() call from outside the tree: {edge:?}"
        );
        let parent_calls = calls_into.get(&edge.from).copied().unwrap_or(0);
        assert_eq!(
            edge.count,
            per_child * parent_calls,
            "{} -> {}: {parent_calls} calls into the parent",
            edge.from,
            edge.to
        );
        if edge.from == root_edge.to {
            assert_eq!(edge.count, per_child, "root -> child {}", edge.to);
        }
    }
    // 11 parent -> child edges, and every call the run counted.
    assert_eq!(process.len(), 12, "{process:?}");
    assert_eq!(process.iter().map(|e| e.count).sum::<u64>(), run.calls);
    // Creations: the driver creates the root only; every other actor is
    // created by its parent (the creator travels on `actor.create`).
    let created_by_driver: u64 = logical
        .call_edges
        .iter()
        .filter(|e| e.kind == CallKind::ActorCreate && e.from == LogicalNode::Driver)
        .map(|e| e.count)
        .sum();
    assert_eq!(created_by_driver, 1, "{:?}", logical.call_edges);

    // Flame: the root process() path's total is the run's end-to-end time.
    let flame = snap.flame();
    let root = flame
        .frames
        .iter()
        .find(|f| {
            let frames: Vec<&str> = f.path.split(';').collect();
            frames.len() == 2 && frames[0] == "driver" && frames[1].ends_with("::process")
        })
        .expect("a driver;…process frame");
    assert_eq!(root.count, 1);
    let wall = Duration::from_secs_f64(run.seconds);
    let total = Duration::from_nanos(root.total_nanos);
    assert!(
        total.as_secs_f64() >= 0.9 * wall.as_secs_f64() && total <= wall + SLACK,
        "root process() {total:?} vs measured {wall:?}"
    );

    // Gantt: the Chrome trace parses, and every complete event is placed.
    let trace: serde_json::Value =
        serde_json::from_str(&snap.gantt().to_chrome_trace().to_string())
            .expect("the Chrome trace is JSON");
    let events = trace["traceEvents"]
        .as_array()
        .expect("a traceEvents array");
    let complete: Vec<_> = events.iter().filter(|e| e["ph"] == "X").collect();
    assert!(
        complete.len() as u64 >= run.calls,
        "{} X events",
        complete.len()
    );
    for event in complete {
        for key in ["ts", "dur", "pid", "tid"] {
            assert!(event[key].is_number(), "{key} missing in {event}");
        }
    }

    // Stacks: nothing left blocked, no deadlock.
    let stacks = snap.stacks();
    assert!(stacks.deadlocks.is_empty(), "{}", stacks.to_text());

    // The files the example writes: all seven, none empty but the stack text
    // (nothing is blocked at the end).
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("insight_w7");
    let written = recording::write_views(&views, &dir).expect("the views are written");
    assert_eq!(written.len(), 7);
    for path in written {
        let len = std::fs::metadata(&path).expect("written").len();
        assert!(
            len > 0 || path.ends_with("stacks.txt"),
            "{} is empty",
            path.display()
        );
    }
}
