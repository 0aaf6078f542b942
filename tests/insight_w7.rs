//! W7 (the worker tree) recorded by the runtime itself (`Config::insight`)
//! on the embedded runtime: the five views agree with what the run
//! measured, and the event log the runtime writes beside them replays to the
//! same views (one test per file: recording installs the process's global
//! subscriber).

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::time::Duration;

use ray_core::insight::InsightOptions;
use ray_insight::export::{export, ExportFormat, ViewKind};
use ray_insight::log::{read_log, replay, LogContents};
use ray_insight::views::{
    CallKind, FlameView, GanttView, LogicalNode, LogicalView, StackView, Stats,
};
use ray_insight::{Limits, Views};

#[path = "../examples/shapes/tree.rs"]
mod tree;

/// How long the recording may take to see every span close after the run.
const SETTLE: Duration = Duration::from_secs(5);

/// The live views as they stood at one moment, with the event log read back
/// at that same moment (the runtime appends to both under one lock, so the
/// log then holds exactly the records the views were given).
struct Live {
    stats: Stats,
    logical: LogicalView,
    flame: FlameView,
    gantt: GanttView,
    stacks: StackView,
    exports: Vec<(ViewKind, String)>,
    log: LogContents,
}

impl Live {
    /// Takes the views of `views` and reads the log at `log_path`.
    fn take(views: &Views, log_path: &Path) -> Self {
        let snap = views.snapshot();
        Self {
            stats: views.stats(),
            logical: snap.logical(),
            flame: snap.flame(),
            gantt: snap.gantt(),
            stacks: snap.stacks(),
            exports: exports(views),
            log: read_log(log_path).expect("the event log reads back"),
        }
    }
}

/// The views the log replay must reproduce, as exports; the Gantt chart is
/// compared apart (its Chrome trace is megabytes).
fn exports(views: &Views) -> Vec<(ViewKind, String)> {
    let snapshot = views.snapshot();
    [
        (ViewKind::Logical, ExportFormat::Json),
        (ViewKind::Flame, ExportFormat::Folded),
        (ViewKind::Stack, ExportFormat::Json),
        (ViewKind::Physical, ExportFormat::Json),
    ]
    .into_iter()
    .map(|(view, format)| (view, export(&snapshot, view, format).expect("exported")))
    .collect()
}

/// Slack allowed on top of the measured wall time for the root call's span
/// (the span and the stopwatch are read on different threads).
const SLACK: Duration = Duration::from_millis(50);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_tree_views_match_the_measured_run() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("insight_w7");
    std::fs::create_dir_all(&dir).expect("temp dir");
    let log_path = dir.join("w7.rayrslog");
    let ray = ray_core::init_with(ray_core::Config {
        num_cpus: Some(2.0),
        insight: Some(InsightOptions {
            log: Some(log_path.clone()),
            ..InsightOptions::default()
        }),
        ..Default::default()
    })
    .await
    .expect("an embedded runtime starts, recording");
    let insight = ray.insight().expect("the runtime records");
    let run = tree::run(&ray, tree::DEFAULT_SEED).await.expect("W7 runs");
    ray.shutdown();
    assert!(
        insight.settle(SETTLE).await,
        "spans still open {SETTLE:?} after the run: {:?}",
        insight.with_views(Views::stats)
    );
    let live = insight
        .with_views(|views| Live::take(views, &log_path))
        .expect("an embedded runtime keeps its views");
    assert_eq!(run.actors, 12);
    assert_eq!(run.calls, 6321);
    // Nothing refused by the views: no cap reached, and no task started
    // under a caller whose own start the views had not seen yet (it would
    // lose its call path, and its whole subtree with it).
    assert_eq!(live.stats.dropped, 0, "{:?}", live.stats);
    assert_eq!(insight.dropped(), 0, "{:?}", live.stats);

    // Logical: the 12 TreeNode instances, and on every process() edge
    // CALLS_PER_CHILD calls per call the caller received.
    let logical = &live.logical;
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
    let root = live
        .flame
        .frames
        .iter()
        .find(|f| {
            let frames: Vec<&str> = f.path.split(';').collect();
            frames.len() == 2 && frames[0] == "driver" && frames[1].ends_with(".process")
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
    let trace: serde_json::Value = serde_json::from_str(&live.gantt.to_chrome_trace().to_string())
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
    assert!(
        live.stacks.deadlocks.is_empty(),
        "{}",
        live.stacks.to_text()
    );

    // The event log written beside the live views replays to the same views.
    let contents = &live.log;
    assert!(contents.stopped.is_none(), "{:?}", contents.stopped);
    // Every record the live views were given is in the log, none lost.
    assert_eq!(
        contents.records.len() as u64,
        live.stats.applied + live.stats.ignored,
        "{:?}",
        live.stats
    );
    let replayed = replay(&contents.records, Limits::default(), None);
    assert_eq!(replayed.stats(), live.stats);
    for ((view, shown), (_, again)) in live.exports.iter().zip(exports(&replayed)) {
        assert_eq!(
            *shown, again,
            "the replayed {view} view differs from the live one"
        );
    }
    // The Chrome trace is a function of the Gantt view: comparing the views
    // proves the traces equal without serializing megabytes twice more.
    assert!(
        replayed.snapshot().gantt() == live.gantt,
        "the replayed Gantt chart differs from the live one"
    );

    // The files the example writes: all eight, none empty but the stack
    // text (nothing is blocked at the end).
    let written = insight.write_views(&dir).expect("the views are written");
    let names: BTreeSet<&str> = written
        .iter()
        .filter_map(|p| p.file_name()?.to_str())
        .collect();
    let expected = [
        "logical.json",
        "logical.dot",
        "flame.folded",
        "flame.svg",
        "gantt.json",
        "stacks.json",
        "stacks.txt",
        "physical.json",
    ];
    assert_eq!(names, BTreeSet::from(expected), "{written:?}");
    for path in &written {
        // Every file says something; the stack text at least its record
        // counts (nothing is blocked after the run).
        let len = std::fs::metadata(path).expect("written").len();
        assert!(len > 0, "{} is empty", path.display());
    }
}
