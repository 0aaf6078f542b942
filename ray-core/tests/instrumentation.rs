//! What the runtime records for insight: exact ids on every span and event
//! (one test per file: it installs the process's global subscriber).

use ray_test_support::{embedded, recording};

use ray_core::prelude::*;
use ray_insight::{InsightLayer, MemorySink, Record, RecordKind};

/// Set by the test once the parent is seen blocked on its leaf: the leaf
/// finishes only then, so the parent's `get` surely blocks (a leaf that
/// finished before the parent's `get` left no wait to record, once in CI).
static RELEASE_LEAF: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

#[remote]
fn leaf(x: u64) -> u64 {
    while !RELEASE_LEAF.load(std::sync::atomic::Ordering::Acquire) {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    x + 1
}

#[remote]
fn parent(x: u64) -> u64 {
    let ray = Ray::current().expect("in a task");
    leaf::remote(&ray, x).unwrap().get_blocking().unwrap()
}

#[remote]
fn length(v: Vec<u8>) -> u64 {
    v.len() as u64
}

#[remote]
struct Acc {
    n: u64,
}

#[remote]
impl Acc {
    fn new() -> Self {
        Acc { n: 0 }
    }
    fn add(&mut self, x: u64) -> u64 {
        self.n += x;
        self.n
    }
}

fn str_field<'a>(r: &'a Record, key: &str) -> Option<&'a str> {
    r.field(key).and_then(|v| v.as_str())
}

/// An id field: the runtime records ids as integers (owner, sequence).
fn id_field(r: &Record, key: &str) -> Option<u128> {
    r.field(key).and_then(|v| v.as_u128())
}

/// A task id as the runtime displays it (`task-<owner>.<seq>`, hex).
fn task_text(id: u128) -> String {
    format!("task-{:x}.{:x}", id >> 64, id as u64)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_actor_calls_objects_and_waits_carry_their_ids() {
    let collector = recording::record_globally();
    let ray = embedded::runtime(2.0).await;
    let mut sink = MemorySink::new(100_000);
    let parent_call = parent::remote(&ray, 1).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        collector.drain_into(&mut sink);
        let blocked = sink.records().iter().any(|r| {
            r.kind == RecordKind::SpanNew && r.name == "wait" && r.field("task_id").is_some()
        });
        if blocked {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the parent never blocked on its leaf"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    RELEASE_LEAF.store(true, std::sync::atomic::Ordering::Release);
    assert_eq!(parent_call.get().await.unwrap(), 2);
    let acc = Acc::remote(&ray).unwrap();
    assert_eq!(acc.add(5).unwrap().get().await.unwrap(), 5);
    let obj = ray.put(vec![7u8; 4096]).await.unwrap();
    assert_eq!(obj.get().await.unwrap().len(), 4096);
    // The same object as a task's argument: resolving it is a get too.
    assert_eq!(
        length::remote(&ray, &obj).unwrap().get().await.unwrap(),
        4096
    );
    // A placement group of two bundles: placed, then removed with the runtime.
    let pg = ray
        .placement_group(
            vec![
                ray_core::Bundle::new().num_cpus(0.5),
                ray_core::Bundle::new().num_cpus(0.5),
            ],
            ray_core::PlacementStrategy::Spread,
        )
        .unwrap();
    pg.ready().await.unwrap();
    ray.shutdown();
    InsightLayer::flush_current_thread();
    // A span closes just after its result is visible: drain until the
    // three task runs (parent, leaf, length) and the actor call have
    // closed (or give up after 10 s). Counting them together let the
    // three runs stand for all four, and the call's edge was missing once.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        collector.drain_into(&mut sink);
        let closed = |name: &str| {
            sink.records()
                .iter()
                .filter(|r| r.closed_at().is_some() && r.name == name)
                .count()
        };
        let all = closed("task.run") >= 3 && closed("actor.call") >= 1;
        if all || std::time::Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let records = sink.records();

    let named = |kind: RecordKind, name: &str| -> Vec<&Record> {
        records
            .iter()
            .filter(|r| r.kind == kind && r.name == name)
            .collect()
    };
    // The parent task's run, and the child submitted from inside it.
    let runs = named(RecordKind::SpanNew, "task.run");
    let parent_run = runs
        .iter()
        .find(|r| str_field(r, "function").is_some_and(|f| f.ends_with("::parent")))
        .expect("the parent task ran");
    let parent_id = id_field(parent_run, "task_id").unwrap();
    assert!(id_field(parent_run, "node_id").is_some());
    let child_submit = named(RecordKind::Event, "task.submit")
        .into_iter()
        .find(|r| str_field(r, "function").is_some_and(|f| f.ends_with("::leaf")))
        .expect("the child was submitted");
    assert_eq!(id_field(child_submit, "parent_task"), Some(parent_id));
    let child_run = runs
        .iter()
        .find(|r| str_field(r, "function").is_some_and(|f| f.ends_with("::leaf")))
        .expect("the child ran");
    assert_eq!(id_field(child_run, "parent_task"), Some(parent_id));
    let child_id = id_field(child_run, "task_id").unwrap();
    // The parent blocked on the child's result: a wait span names both.
    let wait = named(RecordKind::SpanNew, "wait")
        .into_iter()
        .find(|r| id_field(r, "task_id") == Some(parent_id))
        .expect("the parent's wait was recorded");
    assert_eq!(
        str_field(wait, "producers"),
        Some(task_text(child_id).as_str())
    );
    // The actor call names its actor, class and method.
    let call = named(RecordKind::SpanNew, "actor.call")
        .into_iter()
        .find(|r| str_field(r, "method").is_some_and(|m| m.ends_with("::add")))
        .expect("the actor call ran");
    assert!(str_field(call, "class").is_some_and(|c| c.ends_with("::Acc")));
    assert!(id_field(call, "actor_id").is_some());
    // Put and get of the same object, with its size.
    let put = named(RecordKind::Event, "object.put")
        .into_iter()
        .find(|r| {
            r.field("bytes")
                .and_then(|b| b.as_u64())
                .is_some_and(|b| b >= 4096)
        })
        .expect("the put was recorded");
    let object = id_field(put, "object_id").unwrap();
    assert!(named(RecordKind::Event, "object.get")
        .iter()
        .any(|r| id_field(r, "object_id") == Some(object)));
    let length_run = runs
        .iter()
        .find(|r| str_field(r, "function").is_some_and(|f| f.ends_with("::length")))
        .expect("the length task ran");
    let as_arg = named(RecordKind::Event, "object.get")
        .into_iter()
        .find(|r| r.field("arg").and_then(|a| a.as_bool()) == Some(true))
        .expect("argument resolution recorded a get");
    assert_eq!(id_field(as_arg, "object_id"), Some(object));
    assert_eq!(id_field(as_arg, "task_id"), id_field(length_run, "task_id"));
    assert_eq!(
        as_arg.field("bytes").and_then(|b| b.as_u64()),
        put.field("bytes").and_then(|b| b.as_u64())
    );

    // The same records build the views: a parent -> leaf call edge, the
    // driver's call of the actor method, no deadlock.
    let mut views = ray_insight::Views::default();
    for r in records {
        views.apply(r);
    }
    let snap = views.snapshot();
    let logical = snap.logical();
    let edge = |to: &str| {
        logical
            .call_edges
            .iter()
            .find(|e| e.name.ends_with(to))
            .map(|e| e.count)
    };
    assert_eq!(edge("::leaf"), Some(1), "{:?}", logical.call_edges);
    assert_eq!(edge("::parent"), Some(1));
    assert!(logical.call_edges.iter().any(|e| e.name.ends_with("add")));
    assert!(snap.stacks().deadlocks.is_empty());
    assert_eq!(views.dropped(), 0);

    // The group's bundles show on the node until the runtime removes it.
    let placed = named(RecordKind::Event, "placement_group.placed");
    assert_eq!(placed.len(), 1);
    assert_eq!(
        str_field(placed[0], "bundle_nodes").map(|n| n.split(',').count()),
        Some(2)
    );
    let removed_at = records
        .iter()
        .position(|r| r.name == "placement_group.removed")
        .expect("the shutdown removed the group");
    let mut before = ray_insight::Views::default();
    for r in &records[..removed_at] {
        before.apply(r);
    }
    let physical = before.snapshot().physical();
    let bundles: Vec<(usize, &str)> = physical
        .nodes
        .iter()
        .flat_map(|n| n.bundles.iter())
        .map(|b| (b.bundle, b.strategy.as_str()))
        .collect();
    assert_eq!(bundles, [(0, "Spread"), (1, "Spread")]);
    assert!(physical
        .nodes
        .iter()
        .all(|n| n.bundles.is_empty() || n.node_id.starts_with("node-")));
    assert!(snap.physical().nodes.iter().all(|n| n.bundles.is_empty()));
}
