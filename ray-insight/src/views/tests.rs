//! Tests of the views engine on synthetic record streams.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::*;
use crate::record::{FieldValue, Fields, Record, RecordKind};
use crate::sink::Sink;

/// Builds record streams: spans get fresh ids, times are in microseconds.
#[derive(Default)]
struct Script {
    records: Vec<Record>,
    next_span: u64,
}

fn fields(pairs: &[(&'static str, &str)]) -> Fields {
    Fields::from_strs(pairs)
}

impl Script {
    fn push(&mut self, kind: RecordKind, span: u64, name: &'static str, at_us: u64, f: Fields) {
        self.records.push(Record {
            kind,
            span,
            parent: 0,
            name,
            target: "ray_test",
            at_nanos: at_us * 1_000,
            thread: 0,
            fields: f,
        });
    }

    fn open(&mut self, name: &'static str, at_us: u64, f: &[(&'static str, &str)]) -> u64 {
        self.next_span += 1;
        let span = self.next_span;
        self.push(RecordKind::SpanNew, span, name, at_us, fields(f));
        span
    }

    /// [`Script::open`] inside the span `parent`.
    fn open_in(
        &mut self,
        name: &'static str,
        parent: u64,
        at_us: u64,
        f: &[(&'static str, &str)],
    ) -> u64 {
        let span = self.open(name, at_us, f);
        if let Some(r) = self.records.last_mut() {
            r.parent = parent;
        }
        span
    }

    fn close(&mut self, span: u64, at_us: u64) {
        self.push(RecordKind::SpanClose, span, "closed", at_us, Fields::new());
    }

    fn event(&mut self, name: &'static str, at_us: u64, f: &[(&'static str, &str)]) {
        self.push(RecordKind::Event, 0, name, at_us, fields(f));
    }

    fn views(&self) -> Views {
        let mut views = Views::default();
        views.accept(&self.records);
        views
    }
}

const WORKER: &str = "worker_tree::Worker";
const PROCESS: &str = "worker_tree::Worker.process";

/// W7-like: the driver calls `Worker.process` on parent actor a0 (10..1010 µs),
/// which calls `process` on children a1 and a2 ten times each (40 µs each),
/// blocking on each result; a1 lives on the parent's node, a2 on another.
fn worker_tree() -> Script {
    let mut s = Script::default();
    for (actor, node) in [("a0", "n1"), ("a1", "n1"), ("a2", "n2")] {
        let span = s.open(
            "actor.create",
            0,
            &[("actor_id", actor), ("class", WORKER), ("node_id", node)],
        );
        s.close(span, 5);
    }
    s.event(
        "task.submit",
        8,
        &[("task_id", "t0"), ("method", "process"), ("actor_id", "a0")],
    );
    let root = s.open(
        "actor.call",
        10,
        &[
            ("task_id", "t0"),
            ("actor_id", "a0"),
            ("class", WORKER),
            ("method", "process"),
        ],
    );
    for i in 0..10u64 {
        let base = 20 + i * 90;
        for (j, (actor, node)) in [("a1", "n1"), ("a2", "n2")].into_iter().enumerate() {
            let start = base + 40 * j as u64;
            let task = format!("t{}.{i}", j + 1);
            let object = format!("o{}.{i}", j + 1);
            s.event(
                "task.submit",
                start - 1,
                &[
                    ("task_id", &task),
                    ("method", "process"),
                    ("actor_id", actor),
                    ("parent_task", "t0"),
                ],
            );
            let wait = s.open(
                "wait",
                start,
                &[
                    ("task_id", "t0"),
                    ("objects", &object),
                    ("producers", &task),
                ],
            );
            let call = s.open(
                "actor.call",
                start,
                &[
                    ("task_id", &task),
                    ("actor_id", actor),
                    ("class", WORKER),
                    ("method", "process"),
                    ("parent_task", "t0"),
                ],
            );
            s.event(
                "object.put",
                start + 39,
                &[
                    ("object_id", &object),
                    ("bytes", "100"),
                    ("node_id", node),
                    ("task_id", &task),
                ],
            );
            s.close(call, start + 40);
            s.close(wait, start + 40);
            s.event(
                "object.get",
                start + 40,
                &[
                    ("object_id", &object),
                    ("bytes", "100"),
                    ("task_id", "t0"),
                    ("node_id", "n1"),
                ],
            );
        }
    }
    s.close(root, 1010);
    s
}

fn actor(id: &str) -> LogicalNode {
    LogicalNode::Actor {
        class: WORKER.into(),
        actor_id: id.into(),
    }
}

#[test]
fn worker_tree_logical_edges_count_every_call_and_transfer() {
    let views = worker_tree().views();
    assert_eq!(views.dropped(), 0);
    let logical = views.snapshot().logical();
    let edge = |from: &LogicalNode, to: &LogicalNode, name: &str| {
        logical
            .call_edges
            .iter()
            .find(|e| &e.from == from && &e.to == to && e.name == name)
            .cloned()
            .unwrap_or_else(|| panic!("no edge {from} -> {to} {name}"))
    };
    let root = edge(&LogicalNode::Driver, &actor("a0"), "process");
    assert_eq!((root.count, root.total_nanos), (1, 1_000_000));
    for child in ["a1", "a2"] {
        let e = edge(&actor("a0"), &actor(child), "process");
        assert_eq!(e.count, 10);
        assert_eq!(e.total_nanos, 400_000);
        assert_eq!(e.mean_nanos(), 40_000);
        assert_eq!(e.max_nanos, 40_000);
        assert_eq!(e.kind, CallKind::ActorCall);
        assert_eq!(edge(&LogicalNode::Driver, &actor(child), "new").count, 1);
    }
    assert_eq!(logical.call_edges.len(), 6);
    assert_eq!(logical.classes()[WORKER].len(), 3);

    assert_eq!(logical.data_edges.len(), 2);
    let near = &logical.data_edges[0];
    assert_eq!((&near.from, &near.to), (&actor("a1"), &actor("a0")));
    assert_eq!((near.count, near.total_bytes), (10, 1_000));
    assert_eq!((near.same_node, near.cross_node), (10, 0));
    assert_eq!(near.consumers, vec!["t0".to_owned()]);
    let far = &logical.data_edges[1];
    assert_eq!((far.same_node, far.cross_node), (0, 10));
    let puts: BTreeMap<_, _> = logical
        .nodes
        .iter()
        .map(|n| (n.node.key(), n.puts))
        .collect();
    assert_eq!(puts["actor:a1"], 10);

    let json = logical.to_json();
    assert_eq!(json["call_edges"].as_array().map(Vec::len), Some(6));
    let dot = logical.to_dot();
    assert!(dot.starts_with("digraph logical {"));
    assert!(dot.contains("subgraph cluster_0"));
    assert!(dot.contains("\"actor:a0\" -> \"actor:a1\" [label=\"process x10"));
}

#[test]
fn worker_tree_flame_totals_are_span_sums_and_self_is_running_time() {
    let by_instance = worker_tree().views().snapshot().flame();
    // By instance: the parent a0 calls a1 and a2, ten calls each.
    let a0 = "driver;worker_tree::Worker[a0].process";
    for child in ["a1", "a2"] {
        let path = format!("{a0};worker_tree::Worker[{child}].process");
        let f = by_instance.frame(&path).expect("an instance frame");
        assert_eq!((f.count, f.total_nanos), (10, 400_000), "{path}");
    }
    assert_eq!(by_instance.frame(a0).map(|f| f.self_nanos), Some(200_000));
    let flame = by_instance.by_class();
    let parent_path = format!("driver;{PROCESS}");
    let child_path = format!("driver;{PROCESS};{PROCESS}");
    let parent = flame.frame(&parent_path).expect("parent frame");
    let child = flame.frame(&child_path).expect("child frame");
    assert_eq!((parent.count, parent.total_nanos), (1, 1_000_000));
    assert_eq!((child.count, child.total_nanos), (20, 800_000));
    assert_eq!(parent.children_nanos, 800_000);
    // It waited 800 µs on its children and worked 200 µs itself.
    assert_eq!(parent.self_nanos, 200_000);
    assert_eq!(parent.waiting_nanos, 800_000);
    assert_eq!(parent.running_nanos, 200_000);
    for frame in by_instance.frames.iter().chain(&flame.frames) {
        assert_eq!(frame.self_nanos, frame.running_nanos, "{}", frame.path);
    }
    // The driver ran nothing recorded: no running time of its own, so the
    // running metric's folded lines do not count its children twice.
    let driver = flame.frame("driver").expect("the root");
    assert_eq!((driver.count, driver.running_nanos), (0, 0));
    assert!(!flame
        .folded(FlameMetric::Running)
        .lines()
        .any(|l| l.starts_with("driver ")));
    let creates = flame
        .frame(&format!("driver;{WORKER}.new"))
        .expect("creates");
    assert_eq!((creates.count, creates.total_nanos), (3, 15_000));
    let root = flame.frame("driver").expect("driver root");
    assert_eq!(root.total_nanos, 1_015_000);

    let folded = flame.folded(FlameMetric::SelfTime);
    assert!(folded.contains(&format!("{parent_path} 200\n")));
    assert!(folded.contains(&format!("{child_path} 800\n")));
    let self_sum: u64 = parse_folded(&folded).values().sum();
    assert_eq!(self_sum, 1_015);
    assert!(flame
        .folded(FlameMetric::Waiting)
        .contains(&format!("{parent_path} 800\n")));

    let diff = diff_folded(&folded, &folded.replace(" 800\n", " 900\n"));
    assert!(diff.contains(&format!("{child_path} 800 900\n")));
    assert!(diff.contains(&format!("{parent_path} 200 200\n")));
}

#[test]
fn chrome_trace_slices_are_complete_and_flows_pair_up() {
    let mut script = worker_tree();
    // One call left running, to check live slices too.
    script.open(
        "actor.call",
        1_100,
        &[
            ("task_id", "t9"),
            ("actor_id", "a0"),
            ("class", WORKER),
            ("method", "process"),
        ],
    );
    script.event("object.put", 1_200, &[("object_id", "x"), ("bytes", "1")]);
    let views = script.views();
    let gantt = views.snapshot().gantt();
    assert!(gantt
        .slices
        .iter()
        .any(|s| s.task_id == "t9" && !s.finished));
    let blocked = gantt
        .slices
        .iter()
        .filter(|s| s.state == SliceState::Blocked)
        .count();
    assert_eq!(blocked, 20);

    let trace = gantt.to_chrome_trace();
    let text = serde_json::to_string(&trace).expect("serializes");
    let trace: Value = serde_json::from_str(&text).expect("valid JSON");
    let events = trace["traceEvents"].as_array().expect("traceEvents");
    let mut complete = 0;
    let mut starts = BTreeMap::new();
    let mut finishes = BTreeMap::new();
    for e in events {
        match e["ph"].as_str() {
            Some("X") => {
                complete += 1;
                for key in ["ts", "dur"] {
                    assert!(e[key].as_f64().is_some_and(|v| v >= 0.0), "{e}");
                }
                for key in ["pid", "tid"] {
                    assert!(e[key].as_u64().is_some(), "{e}");
                }
            }
            Some("s") => {
                assert!(starts
                    .insert(e["id"].as_u64().expect("id"), e.clone())
                    .is_none());
            }
            Some("f") => {
                assert_eq!(e["bp"], "e");
                assert!(finishes
                    .insert(e["id"].as_u64().expect("id"), e.clone())
                    .is_none());
            }
            Some("M") => {}
            other => panic!("unexpected phase {other:?}"),
        }
    }
    assert_eq!(complete, gantt.slices.len());
    assert_eq!(starts.len(), 20, "one flow per child call");
    assert_eq!(
        starts.keys().collect::<Vec<_>>(),
        finishes.keys().collect::<Vec<_>>()
    );
    for (id, s) in &starts {
        let f = &finishes[id];
        assert!(s["ts"].as_f64() <= f["ts"].as_f64());
        assert_ne!(s["tid"], f["tid"], "caller and callee lanes differ");
    }
    // Actor calls run on their actor's lane: one lane per actor.
    let lanes: BTreeSet<&str> = gantt.lanes.iter().map(|l| l.name.as_str()).collect();
    assert!(lanes.contains(&*format!("{WORKER} a1")));
}

/// Two actor calls blocked on each other's result, plus a non-cyclic chain.
fn waits(cyclic: bool) -> Script {
    let mut s = Script::default();
    s.open(
        "actor.call",
        0,
        &[
            ("task_id", "ta"),
            ("actor_id", "A1"),
            ("class", "A"),
            ("method", "f"),
        ],
    );
    s.open(
        "actor.call",
        1,
        &[
            ("task_id", "tb"),
            ("actor_id", "B1"),
            ("class", "B"),
            ("method", "g"),
        ],
    );
    s.open(
        "wait",
        2,
        &[("task_id", "ta"), ("objects", "ret-b"), ("producers", "tb")],
    );
    if cyclic {
        s.open(
            "wait",
            3,
            &[("task_id", "tb"), ("objects", "ret-a"), ("producers", "ta")],
        );
    }
    // tc waits on td (running) and on an object nobody is known to produce.
    s.open(
        "task.run",
        4,
        &[
            ("task_id", "tc"),
            ("function", "m::c"),
            ("parent_task", "ta"),
        ],
    );
    s.open("task.run", 4, &[("task_id", "td"), ("function", "m::d")]);
    s.open(
        "wait",
        5,
        &[
            ("task_id", "tc"),
            ("objects", "od,ox"),
            ("producers", "td,"),
        ],
    );
    s
}

#[test]
fn mutual_waits_are_reported_as_one_deadlock_naming_both_tasks() {
    let stacks = waits(true).views().snapshot().stacks();
    assert_eq!(stacks.deadlocks.len(), 1);
    let cycle: Vec<(&str, &str)> = stacks.deadlocks[0]
        .cycle
        .iter()
        .map(|t| (t.task_id.as_str(), t.name.as_str()))
        .collect();
    assert_eq!(cycle, vec![("ta", "A[A1].f"), ("tb", "B[B1].g")]);
    let text = stacks.to_text();
    assert!(text.contains("DEADLOCK (2 tasks): ta (A[A1].f) -> tb (B[B1].g) -> ta (A[A1].f)"));
    let json = stacks.to_json();
    assert_eq!(json["deadlocks"][0]["cycle"][1]["name"], "B[B1].g");
}

#[test]
fn a_wait_chain_without_a_cycle_reports_no_deadlock() {
    let stacks = waits(false).views().snapshot().stacks();
    assert!(stacks.deadlocks.is_empty());
    let by_id: BTreeMap<&str, &TaskStack> = stacks
        .tasks
        .iter()
        .map(|t| (t.task.task_id.as_str(), t))
        .collect();
    let ta = by_id["ta"];
    assert_eq!(ta.state, TaskState::Blocked);
    assert_eq!(ta.waits_on[0].producer_state, Some(TaskState::Running));
    assert_eq!(
        ta.wait_chain
            .iter()
            .map(|t| t.task_id.as_str())
            .collect::<Vec<_>>(),
        vec!["tb"]
    );
    let tc = by_id["tc"];
    let ancestors: Vec<&str> = tc.ancestors.iter().map(|a| a.task_id.as_str()).collect();
    assert_eq!(ancestors, vec!["ta", "driver"]);
    assert_eq!(tc.waits_on.len(), 2);
    assert_eq!(
        tc.waits_on[0].producer.as_ref().map(|p| p.name.as_str()),
        Some("m::d")
    );
    assert_eq!(tc.waits_on[1].producer, None);
    assert_eq!(by_id["td"].state, TaskState::Running);
    assert!(stacks
        .to_text()
        .contains("waits on od <- td (m::d) [running]"));
}

/// Actor A (one call at a time) runs `ping`, which waits on B's `pong`, which
/// waits on A's `echo`; `echo` was submitted but is queued behind `ping`.
/// With `echo_running`, `echo` has started instead (A allows concurrency),
/// so nothing is stuck for good.
fn actor_ping_pong(echo_running: bool) -> Script {
    let mut s = Script::default();
    let call = |task: &'static str,
                actor: &'static str,
                class: &'static str,
                method: &'static str,
                parent: &'static str| {
        [
            ("task_id", task),
            ("actor_id", actor),
            ("class", class),
            ("method", method),
            ("parent_task", parent),
        ]
    };
    s.event(
        "task.submit",
        0,
        &[("task_id", "tping"), ("method", "ping"), ("actor_id", "A1")],
    );
    s.open("actor.call", 1, &call("tping", "A1", "A", "ping", ""));
    s.event(
        "task.submit",
        2,
        &[
            ("task_id", "tpong"),
            ("method", "pong"),
            ("actor_id", "B1"),
            ("parent_task", "tping"),
        ],
    );
    s.open(
        "wait",
        3,
        &[
            ("task_id", "tping"),
            ("objects", "ret-pong"),
            ("producers", "tpong"),
        ],
    );
    s.open("actor.call", 4, &call("tpong", "B1", "B", "pong", "tping"));
    s.event(
        "task.submit",
        5,
        &[
            ("task_id", "techo"),
            ("method", "echo"),
            ("actor_id", "A1"),
            ("parent_task", "tpong"),
        ],
    );
    s.open(
        "wait",
        6,
        &[
            ("task_id", "tpong"),
            ("objects", "ret-echo"),
            ("producers", "techo"),
        ],
    );
    if echo_running {
        s.open("actor.call", 7, &call("techo", "A1", "A", "echo", "tpong"));
    }
    s
}

#[test]
fn a_call_queued_behind_its_blocked_caller_on_the_same_actor_is_a_deadlock() {
    let stacks = actor_ping_pong(false).views().snapshot().stacks();
    assert_eq!(stacks.deadlocks.len(), 1, "{}", stacks.to_text());
    let cycle: Vec<(&str, &str)> = stacks.deadlocks[0]
        .cycle
        .iter()
        .map(|t| (t.task_id.as_str(), t.name.as_str()))
        .collect();
    assert_eq!(
        cycle,
        vec![
            ("techo", "A[A1].echo"),
            ("tping", "A[A1].ping"),
            ("tpong", "B[B1].pong")
        ]
    );
    assert!(stacks.to_text().contains(
        "DEADLOCK (3 tasks): techo (A[A1].echo) -> tping (A[A1].ping) -> tpong (B[B1].pong) -> techo (A[A1].echo)"
    ));
    // The blocked ping's chain goes through the queued echo back to itself.
    let ping = stacks
        .tasks
        .iter()
        .find(|t| t.task.task_id == "tping")
        .expect("ping is blocked");
    let chain: Vec<&str> = ping.wait_chain.iter().map(|t| t.task_id.as_str()).collect();
    assert_eq!(chain, vec!["tpong", "techo", "tping"]);
}

#[test]
fn a_queued_call_on_an_actor_with_a_running_call_is_no_deadlock() {
    let stacks = actor_ping_pong(true).views().snapshot().stacks();
    assert!(stacks.deadlocks.is_empty(), "{}", stacks.to_text());
    // Queued on A while ping is blocked and nothing else runs there, echo is
    // still submitted-only in the stacks, and ping's chain ends at it running.
    let ping = stacks
        .tasks
        .iter()
        .find(|t| t.task.task_id == "tping")
        .expect("ping is blocked");
    let chain: Vec<&str> = ping.wait_chain.iter().map(|t| t.task_id.as_str()).collect();
    assert_eq!(chain, vec!["tpong", "techo"]);
}

#[test]
fn a_queued_call_on_an_idle_actor_is_no_deadlock() {
    // B's pong waits on a call queued on actor C, which runs nothing yet:
    // the call is about to start, nobody holds C.
    let mut s = Script::default();
    s.open(
        "actor.call",
        0,
        &[
            ("task_id", "tpong"),
            ("actor_id", "B1"),
            ("class", "B"),
            ("method", "pong"),
        ],
    );
    s.event(
        "task.submit",
        1,
        &[("task_id", "tq"), ("method", "q"), ("actor_id", "C1")],
    );
    s.open(
        "wait",
        2,
        &[
            ("task_id", "tpong"),
            ("objects", "ret-q"),
            ("producers", "tq"),
        ],
    );
    let stacks = s.views().snapshot().stacks();
    assert!(stacks.deadlocks.is_empty());
    let pong = &stacks.tasks[0];
    let chain: Vec<&str> = pong.wait_chain.iter().map(|t| t.task_id.as_str()).collect();
    assert_eq!(chain, vec!["tq"]);
}

#[test]
fn packed_context_labels_are_parsed_and_inherited() {
    let mut s = Script::default();
    let t0 = s.open("task.run", 0, &[("task_id", "t0"), ("function", "train")]);
    s.event(
        "context",
        1,
        &[
            ("task_id", "t0"),
            ("labels", "dp_rank=0, stage = a,junk,=x"),
        ],
    );
    let c = s.open(
        "task.run",
        2,
        &[
            ("task_id", "t0.c"),
            ("function", "step"),
            ("parent_task", "t0"),
        ],
    );
    s.close(c, 3);
    s.close(t0, 4);
    let t1 = s.open("task.run", 5, &[("task_id", "t1"), ("function", "train")]);
    s.event("context", 6, &[("task_id", "t1"), ("labels", "dp_rank=1")]);
    s.close(t1, 7);
    let views = s.views();
    let names = |snap: Snapshot<'_>| -> Vec<String> {
        let mut names: Vec<String> = snap
            .logical()
            .call_edges
            .iter()
            .map(|e| e.name.to_string())
            .collect();
        names.sort();
        names
    };
    assert_eq!(names(views.filter("dp_rank", "0")), vec!["step", "train"]);
    assert_eq!(names(views.filter("stage", "a")), vec!["step", "train"]);
    assert_eq!(names(views.filter("dp_rank", "1")), vec!["train"]);
    assert!(names(views.filter("junk", "")).is_empty());
    assert!(names(views.filter("", "x")).is_empty());
    assert!(names(views.filter("labels", "dp_rank=0")).is_empty());
}

/// Two `train` tasks labelled dp_rank 0 and 1, each with a `step` child; the
/// children of the first have finished, those of the second still run.
fn ranks() -> Script {
    let mut s = Script::default();
    for (rank, task, child, node) in [("0", "r0", "r0.c", "n0"), ("1", "r1", "r1.c", "n1")] {
        let span = s.open(
            "task.run",
            0,
            &[
                ("task_id", task),
                ("function", "train"),
                ("node_id", node),
                ("worker_id", "w"),
            ],
        );
        s.event("context", 1, &[("task_id", task), ("dp_rank", rank)]);
        let c = s.open(
            "task.run",
            2,
            &[
                ("task_id", child),
                ("function", "step"),
                ("parent_task", task),
                ("node_id", node),
            ],
        );
        s.close(c, 10);
        s.close(span, 20);
        let live = format!("{child}.live");
        s.open(
            "task.run",
            30,
            &[
                ("task_id", &live),
                ("function", "step"),
                ("parent_task", task),
                ("node_id", node),
            ],
        );
    }
    s
}

#[test]
fn a_context_filter_keeps_one_rank_and_its_children_in_every_view() {
    let views = ranks().views();
    let all = views.snapshot().logical();
    let train = |view: &LogicalView, from: LogicalNode, to: &str| {
        view.call_edges
            .iter()
            .find(|e| e.from == from && e.name == to)
            .map_or(0, |e| e.count)
    };
    assert_eq!(train(&all, LogicalNode::Driver, "train"), 2);
    assert_eq!(
        train(&all, LogicalNode::Function("train".into()), "step"),
        2
    );

    let rank0 = views.filter("dp_rank", "0");
    let logical = rank0.logical();
    assert_eq!(train(&logical, LogicalNode::Driver, "train"), 1);
    assert_eq!(
        train(&logical, LogicalNode::Function("train".into()), "step"),
        1
    );
    let flame = rank0.flame();
    assert_eq!(flame.frame("driver;train;step").map(|f| f.count), Some(1));

    let stacks = rank0.stacks();
    let ids: Vec<&str> = stacks
        .tasks
        .iter()
        .map(|t| t.task.task_id.as_str())
        .collect();
    assert_eq!(ids, vec!["r0.c.live"], "the live child inherited dp_rank=0");
    let gantt = rank0.gantt();
    assert!(gantt.slices.iter().all(|s| s.task_id.starts_with("r0")));
    assert_eq!(gantt.slices.len(), 3);
    let physical = rank0.physical();
    let nodes: Vec<(&str, usize)> = physical
        .nodes
        .iter()
        .map(|n| (n.node_id.as_str(), n.running_tasks))
        .collect();
    assert_eq!(nodes, vec![("n0", 1)]);

    assert!(views.filter("dp_rank", "7").logical().call_edges.is_empty());
}

#[test]
fn physical_view_places_actors_and_running_tasks_on_their_nodes() {
    let mut s = waits(false);
    s.open(
        "actor.create",
        6,
        &[
            ("actor_id", "C1"),
            ("class", "C"),
            ("node_id", "n2"),
            ("worker_id", "w9"),
        ],
    );
    s.open(
        "task.run",
        7,
        &[
            ("task_id", "te"),
            ("function", "m::e"),
            ("node_id", "n2"),
            ("worker_id", "w1"),
        ],
    );
    s.event("resource.sample", 8, &[("node_id", "n2"), ("cpu", "0.5")]);
    let physical = s.views().snapshot().physical();
    let n2 = physical
        .nodes
        .iter()
        .find(|n| n.node_id == "n2")
        .expect("n2");
    assert_eq!(n2.running_tasks, 2, "te and the creation span");
    assert_eq!(n2.resources.get("cpu"), Some(&0.5));
    let w9 = n2.workers.iter().find(|w| w.worker_id == "w9").expect("w9");
    assert_eq!(w9.actors[0].class, "C");
    let unknown = physical
        .nodes
        .iter()
        .find(|n| n.node_id == "unknown")
        .expect("unplaced");
    assert_eq!(unknown.running_tasks, 4);
    assert!(physical.to_json()["nodes"].as_array().is_some());
}

#[test]
fn numeric_ids_are_accepted_and_compared_as_the_runtime_displays_them() {
    let mut views = Views::default();
    let mut f = Fields::new();
    // The runtime records a task id (owner 1, sequence 0x1a) as a u128.
    f.push("task_id", FieldValue::U128 { hi: 1, lo: 0x1a });
    f.push("function", FieldValue::Str("m::f".into()));
    let open = Record {
        kind: RecordKind::SpanNew,
        span: 1,
        parent: 0,
        name: "task.run",
        target: "ray_test",
        at_nanos: 0,
        thread: 3,
        fields: f,
    };
    let mut ctx = Fields::new();
    ctx.push("task_id", FieldValue::Str("task-1.1a".into()));
    ctx.push("stage", FieldValue::U64(2));
    let context = Record {
        kind: RecordKind::Event,
        span: 0,
        name: "context",
        fields: ctx,
        ..open.clone()
    };
    views.apply(&open);
    views.apply(&context);
    let stacks = views.filter("stage", "2").stacks();
    assert_eq!(stacks.tasks[0].task.task_id, "task-1.1a");
    views.apply(&Record {
        kind: RecordKind::SpanClose,
        at_nanos: 5,
        fields: Fields::new(),
        ..open
    });
    assert_eq!(views.stats().live_tasks, 0);
    assert_eq!(views.snapshot().logical().call_edges[0].count, 1);
}

#[test]
fn a_million_finished_tasks_stay_within_the_stated_bound() {
    // 200k keeps the debug-build test fast (the state is flat once the caps
    // fill); the ignored test below feeds the full million.
    finished_tasks_stay_within_the_bound(200_000);
}

#[test]
#[ignore = "slow in debug; run with --release -- --ignored"]
fn a_full_million_finished_tasks_stay_within_the_stated_bound() {
    finished_tasks_stay_within_the_bound(1_000_000);
}

fn finished_tasks_stay_within_the_bound(tasks: u64) {
    let mut views = Views::default();
    let bound = views.limits().max_entries();
    let mut record = |kind, span, name, at_nanos, pairs: &[(&'static str, String)]| {
        let fields = pairs
            .iter()
            .map(|(k, v)| (*k, FieldValue::Str(v.as_str().into())))
            .collect();
        views.apply(&Record {
            kind,
            span,
            parent: 0,
            name,
            target: "ray_test",
            at_nanos,
            thread: (span % 4) as u32,
            fields,
        });
    };
    for i in 0..tasks {
        let task = format!("t{i}");
        let object = format!("o{i}");
        let at = i * 10;
        record(
            RecordKind::Event,
            0,
            "task.submit",
            at,
            &[("task_id", task.clone()), ("function", "m::f".into())],
        );
        record(
            RecordKind::SpanNew,
            i + 1,
            "task.run",
            at + 1,
            &[("task_id", task.clone()), ("function", "m::f".into())],
        );
        record(
            RecordKind::Event,
            0,
            "object.put",
            at + 2,
            &[
                ("object_id", object.clone()),
                ("bytes", "8".into()),
                ("task_id", task),
            ],
        );
        record(RecordKind::SpanClose, i + 1, "task.run", at + 3, &[]);
        record(
            RecordKind::Event,
            0,
            "object.get",
            at + 4,
            &[("object_id", object), ("bytes", "8".into())],
        );
    }
    let stats = views.stats();
    assert_eq!(stats.dropped, 0);
    assert_eq!(
        (stats.live_tasks, stats.live_spans),
        (0, 0),
        "per-task state freed on close"
    );
    assert!(
        stats.state_entries <= bound,
        "{} > {bound}",
        stats.state_entries
    );
    assert!(stats.evicted_objects > 0 && stats.evicted_recent > 0 && stats.evicted_slices > 0);
    let logical = views.snapshot().logical();
    assert_eq!(logical.call_edges[0].count, tasks);
    assert_eq!(logical.data_edges[0].count, tasks);
    assert_eq!(
        views
            .snapshot()
            .flame()
            .frame("driver;m::f")
            .map(|f| f.count),
        Some(tasks)
    );
}

#[test]
fn live_state_caps_refuse_and_count_the_excess() {
    let mut views = Views::new(Limits {
        max_live_tasks: 10,
        ..Limits::default()
    });
    let mut s = Script::default();
    let spans: Vec<u64> = (0..20)
        .map(|i| {
            s.open(
                "task.run",
                i,
                &[("task_id", &format!("t{i}")), ("function", "f")],
            )
        })
        .collect();
    for span in spans {
        s.close(span, 100);
    }
    views.accept(&s.records);
    let stats = views.stats();
    assert_eq!(stats.dropped, 10);
    assert_eq!(stats.ignored, 10, "closes of refused spans");
    assert_eq!(views.snapshot().logical().call_edges[0].count, 10);
    assert_eq!(stats.live_tasks, 0);
}

#[test]
fn views_drain_from_a_collector_as_a_sink() {
    use tracing_subscriber::layer::SubscriberExt;

    let (layer, collector) = crate::InsightLayer::new(crate::InsightConfig::default());
    let subscriber = tracing_subscriber::registry().with(layer);
    tracing::subscriber::with_default(subscriber, || {
        let run = tracing::info_span!(target: "ray_core::task", "task.run", task_id = "t1", function = "m::f");
        let _entered = run.enter();
        tracing::info!(target: "ray_core::object", object_id = "o1", bytes = 64u64, "object.put");
        let child = tracing::info_span!(target: "ray_core::task", "task.run", task_id = 2u64, function = "m::g");
        drop(child);
    });
    crate::InsightLayer::flush_current_thread();
    let mut views = Views::default();
    collector.drain_into(&mut views);
    let logical = views.snapshot().logical();
    let edges: Vec<(String, String)> = logical
        .call_edges
        .iter()
        .map(|e| (e.from.key(), e.to.key()))
        .collect();
    assert_eq!(
        edges,
        vec![
            ("driver".to_owned(), "fn:m::f".to_owned()),
            ("fn:m::f".to_owned(), "fn:m::g".to_owned()),
        ],
        "the child's parent comes from the enclosing span"
    );
    let put = logical
        .nodes
        .iter()
        .find(|n| n.node.key() == "fn:m::f")
        .expect("f");
    assert_eq!((put.puts, put.put_bytes), (1, 64));
}

/// A `resource.sample` event at `at_ms`, its fields typed as the runtime
/// records them.
fn sample(at_ms: u64, pairs: &[(&'static str, FieldValue)]) -> Record {
    let mut fields = Fields::new();
    for (key, value) in pairs {
        fields.push(key, value.clone());
    }
    Record::event(
        "resource.sample",
        "ray::resource",
        at_ms * 1_000_000,
        fields,
    )
}

/// A process sample: node and worker as integers, CPU % and RSS.
fn process_sample(at_ms: u64, node: u64, worker: u64, cpu: f64, rss: u64) -> Record {
    sample(
        at_ms,
        &[
            ("node_id", FieldValue::U64(node)),
            ("worker_id", FieldValue::U64(worker)),
            ("pid", FieldValue::U64(4000 + worker)),
            ("cpu_percent", FieldValue::F64(cpu)),
            ("rss_bytes", FieldValue::U64(rss)),
        ],
    )
}

fn physical_node<'a>(view: &'a PhysicalView, node: &str) -> &'a PhysicalNode {
    view.nodes
        .iter()
        .find(|n| n.node_id == node)
        .unwrap_or_else(|| panic!("{node} in {view:?}"))
}

fn physical_worker<'a>(node: &'a PhysicalNode, worker: &str) -> &'a PhysicalWorker {
    node.workers
        .iter()
        .find(|w| w.worker_id == worker)
        .unwrap_or_else(|| panic!("{worker} in {node:?}"))
}

#[test]
fn a_process_keeps_a_ring_of_its_last_samples() {
    let mut views = Views::new(Limits {
        max_samples_per_process: 5,
        ..Limits::default()
    });
    for i in 0..12 {
        views.apply(&process_sample(i * 10, 1, 2, i as f64, 1_000 + i));
    }
    let physical = views.snapshot().physical();
    let w = physical_worker(physical_node(&physical, "node-1"), "worker-2");
    let times: Vec<u64> = w.samples.iter().map(|p| p.at_nanos / 1_000_000).collect();
    assert_eq!(times, vec![70, 80, 90, 100, 110], "the oldest dropped");
    assert_eq!(w.samples[4].cpu_percent, Some(11.0));
    assert_eq!(
        (w.cpu_percent, w.rss_bytes, w.pid),
        (Some(11.0), Some(1_011), Some(4_002))
    );
    let stats = views.stats();
    assert_eq!((stats.applied, stats.ignored), (12, 0));
    let empty = Views::default().state_entries();
    assert_eq!(
        stats.state_entries - empty,
        1 + 5,
        "one process and its five samples"
    );
    assert!(stats.state_entries <= views.limits().max_entries());
}

#[test]
fn node_totals_sum_the_latest_samples_of_its_workers() {
    let mut views = Views::default();
    let with_requests = |record: Record, used: f64, total: f64| {
        let mut record = record;
        record.fields.push("cpu_used", FieldValue::F64(used));
        record.fields.push("cpu_total", FieldValue::F64(total));
        record
    };
    // Worker 1 sampled twice: only its latest counts.
    views.apply(&with_requests(
        process_sample(0, 1, 1, 90.0, 5_000),
        4.0,
        8.0,
    ));
    views.apply(&with_requests(
        process_sample(10, 1, 1, 50.0, 1_000),
        1.0,
        8.0,
    ));
    views.apply(&with_requests(
        process_sample(12, 1, 2, 30.0, 2_000),
        2.0,
        8.0,
    ));
    // A driver on the node holds none of its CPUs.
    views.apply(&with_requests(process_sample(14, 1, 3, 5.0, 500), 0.0, 0.0));
    views.apply(&sample(
        15,
        &[
            ("node_id", FieldValue::U64(1)),
            ("worker_id", FieldValue::U64(2)),
            ("gpu_count", FieldValue::U64(2)),
            ("gpu_util_percent", FieldValue::F64(43.5)),
            ("gpu_mem_used_bytes", FieldValue::U64(1 << 30)),
            ("gpu_used", FieldValue::F64(1.0)),
            ("gpu_total", FieldValue::F64(2.0)),
        ],
    ));
    let physical = views.snapshot().physical();
    let n1 = physical_node(&physical, "node-1");
    let t = &n1.totals;
    assert_eq!(t.processes, 3);
    assert!((t.cpu_percent - 85.0).abs() < 1e-9, "{t:?}");
    assert_eq!(t.rss_bytes, 3_500);
    assert_eq!((t.cpu_used, t.cpu_total), (Some(3.0), Some(8.0)));
    assert_eq!((t.gpu_used, t.gpu_total), (Some(1.0), Some(2.0)));
    assert_eq!(t.gpu_count, Some(2.0));
    assert_eq!(t.gpu_util_percent, Some(43.5));
    assert_eq!(t.gpu_mem_used_bytes, Some(f64::from(1u32 << 30)));
    assert_eq!(t.gpu_mem_total_bytes, None);
    // Node readings stay in `resources`; per-process values do not.
    assert_eq!(n1.resources.get("gpu_count"), Some(&2.0));
    assert!(!n1.resources.contains_key("cpu_percent"));
    assert!(!n1.resources.contains_key("pid"));
    // The GPU-only sample kept worker 2's CPU values and added a point.
    let w2 = physical_worker(n1, "worker-2");
    assert_eq!((w2.cpu_percent, w2.samples.len()), (Some(30.0), 2));

    let json = physical.to_json();
    let node = &json["nodes"][0];
    assert_eq!(node["totals"]["rss_bytes"], 3_500);
    assert_eq!(node["totals"]["cpu_total"], 8.0);
    let w1 = &node["workers"][0];
    assert_eq!(w1["worker_id"], "worker-1");
    assert_eq!(w1["samples"][1]["t_ms"], 10.0);
    assert_eq!(w1["samples"][1]["cpu_percent"], 50.0);
    assert_eq!(w1["samples"][1]["rss_bytes"], 1_000);
    assert_eq!(w1["samples"][1]["cpu_used"], 1.0);
    assert_eq!(
        w1["actors"],
        Value::Array(Vec::new()),
        "existing fields kept"
    );
}

#[test]
fn samples_of_two_nodes_are_kept_apart() {
    let mut views = Views::default();
    // The same worker id on two nodes is two processes.
    views.apply(&process_sample(0, 1, 7, 10.0, 100));
    views.apply(&process_sample(1, 2, 7, 60.0, 600));
    views.apply(&process_sample(2, 2, 7, 70.0, 700));
    let physical = views.snapshot().physical();
    let (n1, n2) = (
        physical_node(&physical, "node-1"),
        physical_node(&physical, "node-2"),
    );
    assert_eq!((n1.totals.cpu_percent, n1.totals.rss_bytes), (10.0, 100));
    assert_eq!((n2.totals.cpu_percent, n2.totals.rss_bytes), (70.0, 700));
    assert_eq!(physical_worker(n1, "worker-7").samples.len(), 1);
    assert_eq!(physical_worker(n2, "worker-7").samples.len(), 2);
}

#[test]
fn a_sampled_worker_is_the_worker_its_tasks_run_on() {
    let mut views = Views::default();
    let mut f = Fields::new();
    f.push("task_id", FieldValue::Str("t1".into()));
    f.push("function", FieldValue::Str("m::busy".into()));
    f.push("node_id", FieldValue::U64(0xab));
    f.push("worker_id", FieldValue::U64(1));
    views.apply(&Record {
        kind: RecordKind::SpanNew,
        span: 1,
        parent: 0,
        name: "task.run",
        target: "ray::task",
        at_nanos: 0,
        thread: 0,
        fields: f,
    });
    // The sampler may render ids as text; they compare equal.
    views.apply(&sample(
        5,
        &[
            ("node_id", FieldValue::Str("node-ab".into())),
            ("worker_id", FieldValue::Str("worker-1".into())),
            ("cpu_percent", FieldValue::F64(99.0)),
        ],
    ));
    let physical = views.snapshot().physical();
    assert_eq!(physical.nodes.len(), 1, "{physical:?}");
    let w = physical_worker(&physical.nodes[0], "worker-1");
    assert_eq!(w.running.len(), 1);
    assert_eq!(w.cpu_percent, Some(99.0));
}

#[test]
fn a_sample_without_worker_id_is_keyed_by_its_pid() {
    let mut views = Views::default();
    views.apply(&sample(
        0,
        &[
            ("node_id", FieldValue::Str("n1".into())),
            ("pid", FieldValue::U64(321)),
            ("rss_bytes", FieldValue::U64(4096)),
        ],
    ));
    let physical = views.snapshot().physical();
    let w = physical_worker(physical_node(&physical, "n1"), "pid-321");
    assert_eq!(
        (w.pid, w.rss_bytes, w.cpu_percent),
        (Some(321), Some(4096), None)
    );
}

#[test]
fn malformed_resource_samples_are_ignored_without_panicking() {
    let mut views = Views::default();
    let node = || ("node_id", FieldValue::Str("n1".into()));
    let malformed = [
        // No node.
        sample(0, &[("cpu_percent", FieldValue::F64(10.0))]),
        // A node and nothing else.
        sample(1, &[node()]),
        // Values that are not numbers, or not usable.
        sample(
            2,
            &[node(), ("cpu_percent", FieldValue::Str("busy".into()))],
        ),
        sample(3, &[node(), ("cpu_percent", FieldValue::F64(f64::NAN))]),
        sample(4, &[node(), ("rss_bytes", FieldValue::I64(-5))]),
        sample(5, &[node(), ("cpu_used", FieldValue::F64(f64::INFINITY))]),
        sample(6, &[node(), ("gpu_count", FieldValue::Bool(true))]),
        sample(
            7,
            &[
                node(),
                ("worker_id", FieldValue::U64(1)),
                ("pid", FieldValue::Str("x".into())),
            ],
        ),
    ];
    for record in &malformed {
        views.apply(record);
    }
    let stats = views.stats();
    assert_eq!((stats.applied, stats.ignored), (0, malformed.len() as u64));
    assert!(views.snapshot().physical().nodes.is_empty());
    // A sample with one bad and one good value keeps the good one.
    views.apply(&sample(
        8,
        &[
            node(),
            ("cpu_percent", FieldValue::F64(-3.0)),
            ("rss_bytes", FieldValue::U64(10)),
        ],
    ));
    let physical = views.snapshot().physical();
    let w = physical_worker(physical_node(&physical, "n1"), "unknown");
    assert_eq!((w.cpu_percent, w.rss_bytes), (None, Some(10)));
    assert_eq!(views.stats().applied, 1);
}

#[test]
fn sampled_processes_are_evicted_oldest_first_within_the_bound() {
    let limits = Limits {
        max_resource_processes: 3,
        max_samples_per_process: 4,
        ..Limits::default()
    };
    let mut views = Views::new(limits);
    for worker in 0..5 {
        for round in 0..6 {
            views.apply(&process_sample(worker * 10 + round, 1, worker, 1.0, 1));
        }
    }
    let stats = views.stats();
    assert_eq!(stats.evicted_resource_processes, 2);
    assert_eq!(stats.dropped, 0);
    let empty = Views::default().state_entries();
    assert_eq!(stats.state_entries - empty, 3 * (1 + 4), "{stats:?}");
    assert!(stats.state_entries <= views.limits().max_entries());
    let physical = views.snapshot().physical();
    let n1 = physical_node(&physical, "node-1");
    assert_eq!(n1.totals.processes, 3);
    let kept: Vec<(&str, usize)> = n1
        .workers
        .iter()
        .map(|w| (w.worker_id.as_str(), w.samples.len()))
        .collect();
    assert_eq!(
        kept,
        vec![("worker-2", 4), ("worker-3", 4), ("worker-4", 4)]
    );
}

#[test]
fn no_sample_ring_is_kept_at_a_zero_cap() {
    let mut views = Views::new(Limits {
        max_samples_per_process: 0,
        ..Limits::default()
    });
    views.apply(&process_sample(0, 1, 1, 25.0, 100));
    views.apply(&process_sample(1, 1, 1, 35.0, 100));
    let physical = views.snapshot().physical();
    let w = physical_worker(physical_node(&physical, "node-1"), "worker-1");
    assert!(w.samples.is_empty());
    assert_eq!(
        w.cpu_percent,
        Some(35.0),
        "the latest values are still kept"
    );
    let empty = Views::default().state_entries();
    assert_eq!(views.stats().state_entries - empty, 1);
}

#[test]
fn advance_to_draws_live_tasks_up_to_it_and_never_moves_back() {
    let mut s = Script::default();
    let span = s.open(
        "task.run",
        1_000,
        &[("task_id", "t1"), ("function", "shapes::step")],
    );
    let mut views = s.views();
    let running = |views: &Views| {
        let gantt = views.snapshot().gantt();
        let slice = gantt
            .slices
            .iter()
            .find(|s| s.task_id == "t1" && s.state == SliceState::Running)
            .expect("t1's running slice")
            .clone();
        (slice.start_nanos, slice.dur_nanos, slice.finished)
    };
    // Without a later record, the clock stops at the task's start.
    assert_eq!(views.now_nanos(), 1_000_000);
    assert_eq!(running(&views), (1_000_000, 0, false));

    views.advance_to(5_000_000);
    assert_eq!(views.now_nanos(), 5_000_000);
    assert_eq!(running(&views), (1_000_000, 4_000_000, false));
    let stacks = views.snapshot().stacks();
    assert_eq!(stacks.now_nanos, 5_000_000);
    assert!(
        stacks.to_text().contains("for 4.000 ms"),
        "{}",
        stacks.to_text()
    );

    // An earlier time changes nothing.
    let before = views.snapshot().gantt();
    let stats = views.stats();
    views.advance_to(2_000_000);
    assert_eq!(views.now_nanos(), 5_000_000);
    assert_eq!(views.snapshot().gantt(), before);
    assert_eq!(views.stats(), stats);

    // A record after it still moves the clock, and closes the task there.
    s.records.clear();
    s.close(span, 10_000);
    views.accept(&s.records);
    assert_eq!(views.now_nanos(), 10_000_000);
    assert_eq!(running(&views), (1_000_000, 9_000_000, true));
}

#[test]
fn a_task_return_read_without_a_put_is_a_data_edge_from_its_task() {
    let mut s = Script::default();
    let run = s.open(
        "task.run",
        0,
        &[
            ("task_id", "task-1.5"),
            ("function", "m::make"),
            ("node_id", "node-1"),
        ],
    );
    s.close(run, 100);
    // The driver reads the result on another node; nobody recorded a put.
    s.event(
        "object.get",
        200,
        &[
            ("object_id", "obj-1.5"),
            ("bytes", "4096"),
            ("node_id", "node-2"),
        ],
    );
    // An object id that is no task's return stays unknown.
    s.event("object.get", 300, &[("object_id", "x-9"), ("bytes", "1")]);
    // Ids named by hand, not as the runtime renders them: `obj-x` is the
    // return of `task-x`.
    let other = s.open(
        "task.run",
        400,
        &[("task_id", "task-mk"), ("function", "m::other")],
    );
    s.close(other, 500);
    s.event(
        "object.get",
        600,
        &[("object_id", "obj-mk"), ("bytes", "7")],
    );
    let logical = s.views().snapshot().logical();
    let by_hand = logical
        .data_edges
        .iter()
        .find(|e| e.from == LogicalNode::Function("m::other".into()))
        .expect("a data edge from the task named by hand");
    assert_eq!((by_hand.count, by_hand.total_bytes), (1, 7));
    let edge = logical
        .data_edges
        .iter()
        .find(|e| e.from == LogicalNode::Function("m::make".into()))
        .expect("a data edge from the producing function");
    assert_eq!(edge.to, LogicalNode::Driver);
    assert_eq!((edge.count, edge.total_bytes), (1, 4096));
    assert_eq!((edge.same_node, edge.cross_node), (0, 1));
    assert!(logical
        .data_edges
        .iter()
        .any(|e| e.from == LogicalNode::Unknown && e.unknown_locality == 1));
}

#[test]
fn a_scheduled_task_shows_submitted_then_scheduled_then_running() {
    let mut s = Script::default();
    s.event(
        "task.submit",
        10,
        &[("task_id", "t1"), ("function", "m::f")],
    );
    s.event(
        "task.scheduled",
        30,
        &[("task_id", "t1"), ("node_id", "node-2")],
    );
    // A second placement (the worker's own queue) does not move it.
    s.event("task.scheduled", 35, &[("task_id", "t1")]);
    let run = s.open("task.run", 50, &[("task_id", "t1"), ("function", "m::f")]);
    s.close(run, 90);
    // A placement that arrives before its task's submit (another thread
    // recorded it) waits for the task.
    s.event("task.scheduled", 120, &[("task_id", "t2")]);
    s.event(
        "task.submit",
        110,
        &[("task_id", "t2"), ("function", "m::g")],
    );
    let run2 = s.open("task.run", 130, &[("task_id", "t2"), ("function", "m::g")]);
    s.close(run2, 140);
    let views = s.views();
    assert_eq!(views.stats().ignored, 0);
    let gantt = views.snapshot().gantt();
    let t2: Vec<SliceState> = gantt
        .slices
        .iter()
        .filter(|s| s.task_id == "t2")
        .map(|s| s.state)
        .collect();
    assert_eq!(
        t2,
        [
            SliceState::Submitted,
            SliceState::Scheduled,
            SliceState::Running
        ]
    );
    let states: Vec<(SliceState, u64, u64)> = gantt
        .slices
        .iter()
        .filter(|s| s.task_id == "t1")
        .map(|s| (s.state, s.start_nanos / 1_000, s.dur_nanos / 1_000))
        .collect();
    assert_eq!(
        states,
        [
            (SliceState::Submitted, 10, 20),
            (SliceState::Scheduled, 30, 20),
            (SliceState::Running, 50, 40)
        ]
    );
    let trace = gantt.to_chrome_trace().to_string();
    assert!(trace.contains("scheduled m::f"), "{trace}");
}

#[test]
fn records_lost_before_the_views_show_in_every_export_that_has_room() {
    let mut s = Script::default();
    let run = s.open("task.run", 0, &[("task_id", "t1"), ("function", "m::f")]);
    s.close(run, 10);
    s.event("insight.dropped", 20, &[("count", "5")]);
    s.event("insight.dropped", 30, &[("count", "2")]);
    let views = s.views();
    assert_eq!(views.stats().lost, 7);
    let snap = views.snapshot();
    use crate::export::{export, ExportFormat, ViewKind};
    let json: Value = serde_json::from_str(
        &export(&snap, ViewKind::Logical, ExportFormat::Json).expect("logical json"),
    )
    .expect("valid JSON");
    assert_eq!(json["records"]["lost"], 7);
    assert_eq!(json["records"]["applied"], 4);
    let trace: Value = serde_json::from_str(
        &export(&snap, ViewKind::Gantt, ExportFormat::Chrome).expect("chrome trace"),
    )
    .expect("valid JSON");
    assert_eq!(trace["otherData"]["lost"], 7);
    let text = export(&snap, ViewKind::Stack, ExportFormat::Text).expect("stack text");
    assert!(
        text.starts_with("records: 4 applied, 0 dropped at caps, 7 lost"),
        "{text}"
    );
    let dot = export(&snap, ViewKind::Logical, ExportFormat::Dot).expect("dot");
    assert!(dot.starts_with("// records:"), "{dot}");
}

/// On a cluster a callee's records can reach the collector before its
/// caller's: the child's call edge is counted while its caller actor is
/// known only from a submit (no class yet). Once the caller's class is
/// known, the view shows the caller once, under its class.
#[test]
fn an_actor_named_before_its_class_is_shown_once_under_its_class() {
    let mut s = Script::default();
    s.event(
        "task.submit",
        1,
        &[("task_id", "t0"), ("method", "process"), ("actor_id", "a0")],
    );
    let child = s.open(
        "actor.call",
        2,
        &[
            ("task_id", "t1"),
            ("actor_id", "a1"),
            ("class", WORKER),
            ("method", "process"),
            ("parent_task", "t0"),
        ],
    );
    s.close(child, 3);
    // The caller's own records arrive afterwards.
    let create = s.open(
        "actor.create",
        4,
        &[("actor_id", "a0"), ("class", WORKER), ("node_id", "n1")],
    );
    s.close(create, 5);
    let root = s.open(
        "actor.call",
        6,
        &[
            ("task_id", "t0"),
            ("actor_id", "a0"),
            ("class", WORKER),
            ("method", "process"),
        ],
    );
    s.close(root, 7);
    let view = s.views().snapshot().logical();
    let classes = view.classes();
    assert_eq!(
        classes.keys().collect::<Vec<_>>(),
        vec![WORKER],
        "no actor left under class ?: {classes:?}"
    );
    assert_eq!(classes[WORKER].len(), 2, "a0 and a1 once each: {classes:?}");
    let edge = view
        .call_edges
        .iter()
        .find(|e| e.to == actor("a1"))
        .expect("the a0 -> a1 edge");
    assert_eq!(edge.from, actor("a0"));
    assert_eq!(edge.count, 1);
}

/// The page shows context labels where a person looks for them: on a
/// logical node (the labels its calls ran under), on each stack, and on the
/// physical view's workers (what it colours them by).
#[test]
fn context_labels_are_shown_on_nodes_stacks_and_workers() {
    let views = ranks().views();
    let snap = views.snapshot();
    let rank = |r: &str| vec![("dp_rank".to_owned(), r.to_owned())];
    let both = vec![
        ("dp_rank".to_owned(), "0".to_owned()),
        ("dp_rank".to_owned(), "1".to_owned()),
    ];
    let logical = snap.logical();
    let step = logical
        .nodes
        .iter()
        .find(|n| n.node == LogicalNode::Function("step".into()))
        .expect("the step node");
    assert_eq!(step.labels, both, "step ran under both ranks");
    let stacks = snap.stacks();
    for t in &stacks.tasks {
        let want = if t.task.task_id.starts_with("r0") {
            "0"
        } else {
            "1"
        };
        assert_eq!(t.labels, rank(want), "{}", t.task.task_id);
    }
    let physical = snap.physical();
    for (node, want) in [("n0", "0"), ("n1", "1")] {
        let n = physical
            .nodes
            .iter()
            .find(|n| n.node_id == node)
            .expect(node);
        let labels: Vec<_> = n.workers.iter().flat_map(|w| w.labels.clone()).collect();
        assert_eq!(labels, rank(want), "the worker on {node}");
    }
    let json = physical.to_json().to_string();
    assert!(json.contains(r#""labels":[["dp_rank","0"]]"#), "{json}");
}

/// On a cluster the owner's `task.scheduled` can reach the engine after the
/// worker's records of the whole run: the finished task's submitted slice is
/// then split at the placement, as if it had arrived in order.
#[test]
fn a_placement_arriving_after_its_task_finished_still_shows() {
    let mut s = Script::default();
    s.event(
        "task.submit",
        1,
        &[("task_id", "t1"), ("function", "m::leaf")],
    );
    let run = s.open(
        "task.run",
        5,
        &[
            ("task_id", "t1"),
            ("function", "m::leaf"),
            ("node_id", "n2"),
        ],
    );
    s.close(run, 8);
    s.event("task.scheduled", 3, &[("task_id", "t1"), ("node_id", "n2")]);
    let gantt = s.views().snapshot().gantt();
    let spans: Vec<(SliceState, u64, u64)> = gantt
        .slices
        .iter()
        .filter(|s| s.task_id == "t1")
        .map(|s| (s.state, s.start_nanos / 1_000, s.dur_nanos / 1_000))
        .collect();
    assert!(spans.contains(&(SliceState::Submitted, 1, 2)), "{spans:?}");
    assert!(spans.contains(&(SliceState::Scheduled, 3, 2)), "{spans:?}");
    assert!(spans.contains(&(SliceState::Running, 5, 3)), "{spans:?}");
}

#[test]
fn hung_and_queued_calls_are_edges_of_the_logical_view_while_they_hang() {
    let logical = actor_ping_pong(false).views().snapshot().logical();
    let edge = |to: &str, name: &str| {
        logical
            .call_edges
            .iter()
            .find(|e| {
                e.name == name
                    && matches!(&e.to, LogicalNode::Actor { actor_id, .. } if &**actor_id == to)
            })
            .map(|e| (e.count, e.running, e.queued))
    };
    // ping and pong started and block; echo, the call that closes the
    // cycle, is queued. None has finished.
    assert_eq!(
        edge("A1", "ping"),
        Some((0, 1, 0)),
        "{:?}",
        logical.call_edges
    );
    assert_eq!(edge("B1", "pong"), Some((0, 1, 0)));
    assert_eq!(edge("A1", "echo"), Some((0, 0, 1)));
    let dot = logical.to_dot();
    assert!(dot.contains("echo x0 mean 0.000ms, 1 queued"), "{dot}");
    assert!(logical.to_json()["call_edges"][0]["running"]
        .as_u64()
        .is_some());
}

#[test]
fn a_call_whose_caller_records_arrive_after_its_start_is_attributed_to_the_caller() {
    // Node 2's records (the call) reach the head before node 1's (its caller).
    let mut s = Script::default();
    let call = s.open(
        "actor.call",
        20,
        &[
            ("task_id", "tc"),
            ("actor_id", "B1"),
            ("class", "B"),
            ("method", "work"),
            ("parent_task", "tp"),
        ],
    );
    let parent = s.open(
        "actor.call",
        10,
        &[
            ("task_id", "tp"),
            ("actor_id", "A1"),
            ("class", "A"),
            ("method", "run"),
        ],
    );
    s.close(call, 30);
    s.close(parent, 40);
    let views = s.views();
    let snap = views.snapshot();
    let logical = snap.logical();
    assert!(
        logical
            .call_edges
            .iter()
            .all(|e| e.from != LogicalNode::Unknown),
        "{:?}",
        logical.call_edges
    );
    let from_a = logical
        .call_edges
        .iter()
        .find(|e| e.name == "work")
        .map(|e| e.from.clone());
    assert!(
        matches!(&from_a, Some(LogicalNode::Actor { actor_id, .. }) if &**actor_id == "A1"),
        "{from_a:?}"
    );
    let flame = snap.flame();
    assert_eq!(
        flame.frame("driver;A[A1].run;B[B1].work").map(|f| f.count),
        Some(1),
        "{:?}",
        flame.frames
    );
    assert_eq!(views.stats().late_callers, 1);
}

#[test]
fn a_call_that_finishes_before_its_callers_records_arrive_waits_for_them() {
    // Node 2's records (the whole call) reach the head before node 1's.
    let mut s = Script::default();
    let call = s.open(
        "actor.call",
        20,
        &[
            ("task_id", "tc"),
            ("actor_id", "B1"),
            ("class", "B"),
            ("method", "work"),
            ("parent_task", "tp"),
        ],
    );
    s.close(call, 30);
    let mut views = s.views();
    // Not counted yet, and not under `unknown`.
    assert_eq!(views.stats().waiting_for_caller, 1);
    assert!(views.snapshot().logical().call_edges.is_empty());
    let mut later = Script {
        next_span: 100,
        ..Script::default()
    };
    let parent = later.open(
        "actor.call",
        10,
        &[
            ("task_id", "tp"),
            ("actor_id", "A1"),
            ("class", "A"),
            ("method", "run"),
        ],
    );
    later.close(parent, 40);
    views.accept(&later.records);
    let snap = views.snapshot();
    assert_eq!(views.stats().waiting_for_caller, 0);
    assert!(
        snap.logical()
            .call_edges
            .iter()
            .all(|e| e.from != LogicalNode::Unknown),
        "{:?}",
        snap.logical().call_edges
    );
    assert_eq!(
        snap.flame()
            .frame("driver;A[A1].run;B[B1].work")
            .map(|f| f.count),
        Some(1),
        "{:?}",
        snap.flame().frames
    );
}

#[test]
fn a_call_whose_caller_never_shows_is_counted_as_unknown_after_the_wait() {
    let mut s = Script::default();
    let call = s.open(
        "task.run",
        20,
        &[
            ("task_id", "tc"),
            ("function", "m::f"),
            ("parent_task", "gone"),
        ],
    );
    s.close(call, 30);
    let mut views = s.views();
    assert_eq!(views.stats().waiting_for_caller, 1);
    // Record time passes: any later record.
    let mut later = Script::default();
    later.event(
        "resource.sample",
        30 + super::ORPHAN_WAIT_NANOS / 1_000,
        &[("node_id", "n1"), ("worker_id", "w1")],
    );
    views.accept(&later.records);
    assert_eq!(views.stats().waiting_for_caller, 0);
    let logical = views.snapshot().logical();
    assert!(
        logical
            .call_edges
            .iter()
            .any(|e| e.from == LogicalNode::Unknown && e.count == 1),
        "{:?}",
        logical.call_edges
    );
}

#[test]
fn a_wait_inside_a_user_span_is_that_spans_waiting_not_the_tasks() {
    // A task of 10 µs; its `reward_fn` span of 8 µs blocks 6 µs in a get.
    let mut s = Script::default();
    let run = s.open("task.run", 0, &[("task_id", "t1"), ("function", "m::f")]);
    let reward = s.open_in("reward_fn", run, 1, &[]);
    let wait = s.open_in("wait", reward, 2, &[("objects", "o1")]);
    s.close(wait, 8);
    s.close(reward, 9);
    s.close(run, 10);
    let views = s.views();
    let flame = views.snapshot().flame();
    let task = flame.frame("driver;m::f").expect("the task's frame");
    let span = flame
        .frame("driver;m::f;reward_fn")
        .expect("the span's frame");
    assert_eq!(
        (task.total_nanos, task.waiting_nanos, task.self_nanos),
        (10_000, 0, 2_000),
        "{task:?}"
    );
    assert_eq!(
        (span.total_nanos, span.waiting_nanos, span.self_nanos),
        (8_000, 6_000, 2_000),
        "{span:?}"
    );
}

#[test]
fn a_filter_on_several_labels_keeps_the_tasks_with_all_of_them() {
    let mut s = Script::default();
    for (task, b) in [("t1", "2"), ("t2", "3")] {
        let span = s.open("task.run", 1, &[("task_id", task), ("function", "m::f")]);
        s.event(
            "context",
            2,
            &[("task_id", task), ("labels", &format!("a=1,b={b}"))],
        );
        s.close(span, 3);
    }
    let views = s.views();
    let count =
        |snap: Snapshot<'_>| -> u64 { snap.logical().call_edges.iter().map(|e| e.count).sum() };
    assert_eq!(count(views.filter_all(&[("a", "1")])), 2);
    assert_eq!(count(views.filter_all(&[("a", "1"), ("b", "2")])), 1);
    assert_eq!(count(views.filter_all(&[("a", "1"), ("b", "4")])), 0);
    assert_eq!(count(views.filter_all::<&str, &str>(&[])), 2);
}

#[test]
fn top_names_the_instances_with_the_most_self_time_the_longest_waits_and_deadlocks() {
    let views = worker_tree().views();
    let top = views.snapshot().top(3);
    let frames: Vec<(&str, u64)> = top
        .self_time
        .iter()
        .map(|f| (f.frame.as_str(), f.nanos))
        .collect();
    assert_eq!(
        frames,
        vec![
            ("worker_tree::Worker[a1].process", 400_000),
            ("worker_tree::Worker[a2].process", 400_000),
            ("worker_tree::Worker[a0].process", 200_000),
        ]
    );
    assert_eq!(top.waits[0].frame, "worker_tree::Worker[a0].process");
    assert_eq!(top.waits[0].nanos, 800_000);
    assert!(top.deadlocks.is_empty());
    let text = top.to_text();
    assert!(
        text.contains("0.400 ms       10 calls  worker_tree::Worker[a1].process"),
        "{text}"
    );
    assert!(text.contains("deadlocks:\n  (none)"), "{text}");
    let hung = actor_ping_pong(false).views().snapshot().top(3);
    assert_eq!(hung.deadlocks.len(), 1);
    assert!(
        hung.to_text().contains("DEADLOCK (3 tasks: "),
        "{}",
        hung.to_text()
    );
}

#[test]
fn a_call_carries_its_callers_labels_and_only_its_constructors_own_labels() {
    let mut s = Script::default();
    s.event("context", 0, &[("labels", "phase=train")]);
    for (task, actor, ctor) in [("c1", "A1", None), ("c2", "A2", Some("rank=3"))] {
        let span = s.open(
            "actor.create",
            1,
            &[("task_id", task), ("actor_id", actor), ("class", "A")],
        );
        if let Some(labels) = ctor {
            s.event("context", 2, &[("task_id", task), ("labels", labels)]);
        }
        s.close(span, 3);
    }
    s.event("context", 4, &[("labels", "phase=eval")]);
    for (task, actor) in [("t1", "A1"), ("t2", "A2")] {
        s.event(
            "task.submit",
            5,
            &[("task_id", task), ("method", "step"), ("actor_id", actor)],
        );
        let span = s.open(
            "actor.call",
            6,
            &[
                ("task_id", task),
                ("actor_id", actor),
                ("class", "A"),
                ("method", "step"),
            ],
        );
        s.close(span, 7);
    }
    let views = s.views();
    let steps = |snap: Snapshot<'_>| -> u64 {
        snap.logical()
            .call_edges
            .iter()
            .filter(|e| e.name == "step")
            .map(|e| e.count)
            .sum()
    };
    // Both calls were made under phase=eval, whatever the phase at creation.
    assert_eq!(steps(views.filter("phase", "eval")), 2);
    assert_eq!(steps(views.filter("phase", "train")), 0);
    // A2's constructor labelled itself rank=3: its call carries that too.
    assert_eq!(
        steps(views.filter_all(&[("phase", "eval"), ("rank", "3")])),
        1
    );
}

#[test]
fn folding_instances_keeps_other_brackets_and_diffs_compare_classes() {
    use super::flame::fold_instances;
    assert_eq!(
        fold_instances("driver;m::A[actor-1.2].run;f"),
        "driver;m::A.run;f"
    );
    assert_eq!(fold_instances("driver;[unknown];f"), "driver;[unknown];f");
    assert_eq!(fold_instances("driver;x[a;b].m"), "driver;x[a;b].m");
    let diff = diff_folded("driver;A[a1].run 5\n", "driver;A[b7].run 7\n");
    assert_eq!(diff, "driver;A.run 5 7\n");
}

/// The call edge whose name ends with `name`.
fn call_edge<'a>(logical: &'a LogicalView, name: &str) -> &'a CallEdge {
    logical
        .call_edges
        .iter()
        .find(|e| e.name.ends_with(name))
        .unwrap_or_else(|| panic!("{name} in {:?}", logical.call_edges))
}

/// A `node.state` record, as the head writes it when a node registers or dies.
fn node_state(at_ms: u64, node: u64, alive: bool, cause: Option<&str>) -> Record {
    let mut fields = Fields::new();
    fields.push("node_id", FieldValue::U64(node));
    fields.push("alive", FieldValue::Bool(alive));
    fields.push("address", FieldValue::Str("10.0.0.7:4100".into()));
    if let Some(cause) = cause {
        fields.push("death_cause", FieldValue::Str(cause.into()));
    }
    fields.push("cpu_total", FieldValue::F64(8.0));
    Record::event("node.state", "ray::node", at_ms * 1_000_000, fields)
}

#[test]
fn a_registered_node_that_ran_nothing_shows_and_its_death_is_kept() {
    let mut views = Views::default();
    views.accept(&[process_sample(1, 1, 10, 50.0, 1 << 20)]);
    views.accept(&[node_state(2, 2, true, None)]);
    let id_of_2 = {
        let physical = views.snapshot().physical();
        assert_eq!(physical.nodes.len(), 2, "{physical:?}");
        let idle = physical
            .nodes
            .iter()
            .find(|n| n.registration.is_some())
            .expect("the registered node");
        assert!(idle.workers.is_empty() && idle.running_tasks == 0);
        assert_eq!(idle.totals.cpu_total, Some(8.0), "its registered CPUs");
        let json = physical.to_json();
        let shown = json["nodes"]
            .as_array()
            .and_then(|nodes| nodes.iter().find(|n| n["node_id"] == idle.node_id.as_str()))
            .cloned()
            .expect("in the JSON");
        assert_eq!(shown["alive"], true);
        assert_eq!(shown["address"], "10.0.0.7:4100");
        idle.node_id.clone()
    };
    views.accept(&[node_state(3, 2, false, Some("no heartbeat for 1.0s"))]);
    let physical = views.snapshot().physical();
    let dead = physical_node(&physical, &id_of_2);
    let registration = dead.registration.as_ref().expect("still registered");
    assert!(!registration.alive);
    assert_eq!(
        registration.death_cause.as_deref(),
        Some("no heartbeat for 1.0s")
    );
    // A node the records never name has no registration: nothing is made up.
    let sampled = physical
        .nodes
        .iter()
        .find(|n| n.node_id != id_of_2)
        .expect("the sampled node");
    assert!(sampled.registration.is_none());
}

#[test]
fn an_actor_sums_its_runs_running_time_and_cpu_time() {
    let mut s = Script::default();
    let place = [("node_id", "n1"), ("worker_id", "w1")];
    let open = |s: &mut Script, name: &'static str, task: &str, at: u64| {
        let mut f = vec![("task_id", task), ("actor_id", "A1"), ("class", "C")];
        if name == "actor.call" {
            f.push(("method", "m"));
        }
        f.extend(place);
        s.open(name, at, &f)
    };
    let ctor = open(&mut s, "actor.create", "c0", 0);
    s.close(ctor, 10);
    // A call of 100 µs that waits 60 µs of it on a get.
    let call = open(&mut s, "actor.call", "t1", 20);
    let wait = s.open_in("wait", call, 30, &[("task_id", "t1"), ("object_ids", "o1")]);
    s.close(wait, 90);
    s.close(call, 120);
    // What the runtime's close records carry: the thread's CPU time.
    let cpu = [7_000u64, 25_000];
    let closes = s
        .records
        .iter_mut()
        .filter(|r| r.kind == RecordKind::SpanClose && (r.span == ctor || r.span == call));
    for (record, cpu) in closes.zip(cpu) {
        record.fields.push("cpu_nanos", FieldValue::U64(cpu));
    }
    let physical = s.views().snapshot().physical();
    let worker = physical_worker(physical_node(&physical, "n1"), "w1");
    let usage = worker.actors[0].usage;
    assert_eq!(usage.runs, 2, "the constructor and the call");
    assert_eq!(
        usage.running_nanos,
        10_000 + 40_000,
        "wall time less the wait"
    );
    assert_eq!(usage.cpu_nanos, Some(32_000));
    let json = physical.to_json();
    let actor = &json["nodes"][0]["workers"][0]["actors"][0];
    assert_eq!(actor["runs"], 2);
    assert_eq!(actor["cpu_ms"], 0.032);
}

#[test]
fn failed_calls_are_counted_and_a_dead_node_fails_the_calls_it_held() {
    let mut s = Script::default();
    let on = |node: &'static str| [("node_id", node), ("worker_id", "w")];
    // `f` fails once and succeeds once on n1.
    for (task, at, error) in [("t1", 0, Some("boom")), ("t2", 10, None)] {
        let mut f = vec![("task_id", task), ("function", "m::f")];
        f.extend(on("n1"));
        let span = s.open("task.run", at, &f);
        s.close(span, at + 5);
        if let Some(error) = error {
            if let Some(r) = s.records.last_mut() {
                r.fields.push("error", FieldValue::Str(error.into()));
            }
        }
    }
    // On n2: an actor, a call of it running (with a wait and a user span
    // open), another queued in its mailbox, and a task running.
    let ctor = s.open(
        "actor.create",
        20,
        &[
            ("task_id", "c"),
            ("actor_id", "A"),
            ("class", "C"),
            ("node_id", "n2"),
        ],
    );
    s.close(ctor, 21);
    let call = s.open(
        "actor.call",
        30,
        &[
            ("task_id", "a1"),
            ("actor_id", "A"),
            ("class", "C"),
            ("method", "m"),
            ("node_id", "n2"),
        ],
    );
    s.open_in("wait", call, 31, &[("task_id", "a1"), ("object_ids", "o9")]);
    s.event(
        "task.submit",
        32,
        &[
            ("task_id", "a2"),
            ("actor_id", "A"),
            ("class", "C"),
            ("method", "m"),
        ],
    );
    let mut g = vec![("task_id", "t3"), ("function", "m::g")];
    g.extend(on("n2"));
    s.open("task.run", 33, &g);
    let mut views = s.views();
    let before = views.snapshot().logical();
    let running: u64 = before.call_edges.iter().map(|e| e.running + e.queued).sum();
    assert_eq!(running, 3, "{:?}", before.call_edges);
    let mut dead = Fields::new();
    dead.push("node_id", FieldValue::Str("n2".into()));
    dead.push("alive", FieldValue::Bool(false));
    views.accept(&[Record::event("node.state", "ray::node", 40_000, dead)]);
    let logical = views.snapshot().logical();
    let edge = |name: &str| call_edge(&logical, name);
    assert_eq!((edge("f").count, edge("f").failed), (2, 1));
    assert_eq!(
        (edge("g").count, edge("g").failed, edge("g").running),
        (1, 1, 0)
    );
    let m = edge("m");
    assert_eq!(
        (m.count, m.failed, m.running, m.queued),
        (2, 2, 0, 0),
        "{m:?}"
    );
    assert_eq!(views.stats().live_tasks, 0);
    assert_eq!(
        views.stats().live_spans,
        0,
        "the lost calls' spans are forgotten"
    );
    assert!(views.snapshot().stacks().tasks.is_empty());
    let json = logical.to_json();
    assert!(json["call_edges"]
        .as_array()
        .is_some_and(|edges| edges.iter().any(|e| e["failed"] == 2)));
}

/// A `task.lost` event of `task` at `at_us` µs, naming `attempt`.
fn lost_record(at_us: u64, task: &str, attempt: Option<u64>) -> Record {
    let mut fields = Fields::new();
    fields.push("task_id", FieldValue::Str(task.into()));
    if let Some(attempt) = attempt {
        fields.push("attempt", FieldValue::U64(attempt));
    }
    Record::event("task.lost", "ray::task", at_us * 1_000, fields)
}

#[test]
fn an_actor_calls_resend_counts_its_lost_run_failed_whichever_record_comes_first() {
    let call = |s: &mut Script, at: u64, attempt: Option<&str>| {
        let mut fields = vec![
            ("task_id", "c1"),
            ("actor_id", "a1"),
            ("class", "m::Phoenix"),
            ("method", "die_once"),
        ];
        if let Some(attempt) = attempt {
            fields.push(("attempt", attempt));
        }
        let span = s.open("actor.call", at, &fields);
        s.close(span, at + 5);
    };
    // The loss first: the first send was only queued (its start died with
    // its process), then the resend runs.
    let mut s = Script::default();
    s.event(
        "task.submit",
        0,
        &[
            ("task_id", "c1"),
            ("actor_id", "a1"),
            ("method", "die_once"),
        ],
    );
    let mut first = s.views();
    first.accept(&[lost_record(10, "c1", Some(0))]);
    let mut resend = Script {
        next_span: 100,
        ..Script::default()
    };
    call(&mut resend, 20, Some("1"));
    first.accept(&resend.records);
    // The resend's start first: the first send's run was seen running, its
    // loss (from the owner's process) comes after the resend started.
    let mut s = Script::default();
    s.event(
        "task.submit",
        0,
        &[
            ("task_id", "c1"),
            ("actor_id", "a1"),
            ("method", "die_once"),
        ],
    );
    s.open(
        "actor.call",
        5,
        &[
            ("task_id", "c1"),
            ("actor_id", "a1"),
            ("class", "m::Phoenix"),
            ("method", "die_once"),
        ],
    );
    let mut second = s.views();
    let mut resend = Script {
        next_span: 100,
        ..Script::default()
    };
    call(&mut resend, 20, Some("1"));
    second.accept(&resend.records);
    second.accept(&[lost_record(30, "c1", Some(0))]);
    for (order, views) in [("loss first", &first), ("resend first", &second)] {
        let logical = views.snapshot().logical();
        let e = call_edge(&logical, "die_once");
        assert_eq!(
            (e.count, e.failed, e.running, e.queued),
            (2, 1, 0, 0),
            "{order}: {e:?}"
        );
        assert_eq!(views.stats().live_tasks, 0, "{order}");
    }
}

#[test]
fn a_lost_run_fails_only_the_attempt_it_names() {
    let lost = lost_record;
    let mut s = Script::default();
    s.event("task.submit", 0, &[("task_id", "t1"), ("function", "m::f")]);
    s.event("task.submit", 0, &[("task_id", "t2"), ("function", "m::f")]);
    // t2's retry (attempt 1) already runs when the loss of attempt 0 comes.
    s.open(
        "task.run",
        5,
        &[("task_id", "t2"), ("function", "m::f"), ("attempt", "1")],
    );
    let mut views = s.views();
    views.accept(&[lost(10, "t2", Some(0)), lost(11, "t1", None)]);
    // Losses that come before their task (from the owner's process, ahead
    // of the submitter's or the worker's records): t3 given up for good
    // before its submit arrives; t4's attempt 0 lost before its run starts.
    views.accept(&[lost(12, "t3", None), lost(13, "t4", Some(0))]);
    let mut late = Script::default();
    late.event(
        "task.submit",
        14,
        &[("task_id", "t3"), ("function", "m::f")],
    );
    late.event(
        "task.submit",
        14,
        &[("task_id", "t4"), ("function", "m::f")],
    );
    late.open("task.run", 15, &[("task_id", "t4"), ("function", "m::f")]);
    views.accept(&late.records);
    let logical = views.snapshot().logical();
    let f = call_edge(&logical, "f");
    assert_eq!(
        (f.count, f.failed),
        (3, 3),
        "t1, t3 and t4's attempt 0: {f:?}"
    );
    assert_eq!(f.running, 1, "t2's retry still runs: {f:?}");
    assert_eq!(views.stats().live_tasks, 1);

    // t5 is lost (attempt 0) while only submitted: failed once. Its lost
    // run's start, shipped before its worker died, comes later: dropped,
    // not counted again, not left running. Its retry runs as usual.
    let mut t5 = Script::default();
    t5.event(
        "task.submit",
        20,
        &[("task_id", "t5"), ("function", "m::f")],
    );
    views.accept(&t5.records);
    views.accept(&[lost(21, "t5", Some(0))]);
    let mut late = Script {
        next_span: 100,
        ..Script::default()
    };
    late.open("task.run", 22, &[("task_id", "t5"), ("function", "m::f")]);
    let retry = late.open(
        "task.run",
        23,
        &[("task_id", "t5"), ("function", "m::f"), ("attempt", "1")],
    );
    late.close(retry, 24);
    views.accept(&late.records);
    let logical = views.snapshot().logical();
    let f = call_edge(&logical, "f");
    assert_eq!(
        (f.count, f.failed),
        (5, 4),
        "t5: one failed run, one finished: {f:?}"
    );
    assert_eq!(views.stats().live_tasks, 1, "only t2's retry");
}

#[test]
fn the_stack_lists_nested_user_spans_outermost_first_even_when_they_opened_together() {
    let mut s = Script::default();
    let run = s.open(
        "task.run",
        0,
        &[("task_id", "t1"), ("function", "m::score")],
    );
    // Opened in one nanosecond, the inner span's name first in order.
    let outer = s.open_in("zeta", run, 10, &[]);
    let middle = s.open_in("beta", outer, 10, &[]);
    s.open_in("alpha", middle, 10, &[]);
    let stacks = s.views().snapshot().stacks();
    assert_eq!(stacks.tasks[0].spans, ["zeta", "beta", "alpha"]);
}

#[test]
fn a_loop_of_user_span_parents_from_a_hostile_log_still_builds_the_stack() {
    let mut s = Script::default();
    let run = s.open(
        "task.run",
        0,
        &[("task_id", "t1"), ("function", "m::score")],
    );
    let a = s.open_in("a", run, 10, &[]);
    let b = s.open_in("b", a, 11, &[]);
    // `a` closes and its id comes back as a span inside `b`: `b`'s parent
    // is now its own child.
    s.close(a, 12);
    s.next_span = a - 1;
    assert_eq!(s.open_in("c", b, 13, &[]), a);
    let stacks = s.views().snapshot().stacks();
    assert_eq!(stacks.tasks[0].spans, ["b", "c"]);
}

#[test]
fn the_stack_names_the_user_spans_a_task_is_in() {
    let mut s = Script::default();
    let run = s.open(
        "task.run",
        0,
        &[("task_id", "t1"), ("function", "m::score")],
    );
    let reward = s.open_in("reward_fn", run, 10, &[]);
    let tokenize = s.open_in("tokenize", reward, 20, &[]);
    s.open_in(
        "wait",
        tokenize,
        30,
        &[("task_id", "t1"), ("object_ids", "o1")],
    );
    // A finished span of another task leaves nothing behind.
    let other = s.open("task.run", 0, &[("task_id", "t2"), ("function", "m::g")]);
    let done = s.open_in("prepare", other, 5, &[]);
    s.close(done, 6);
    let stacks = s.views().snapshot().stacks();
    let t1 = stacks
        .tasks
        .iter()
        .find(|t| t.task.task_id == "t1")
        .expect("t1");
    assert_eq!(t1.spans, ["reward_fn", "tokenize"]);
    assert_eq!(t1.state, TaskState::Blocked);
    let t2 = stacks
        .tasks
        .iter()
        .find(|t| t.task.task_id == "t2")
        .expect("t2");
    assert!(t2.spans.is_empty(), "{t2:?}");
    let text = stacks.to_text();
    let inner = text.find("in tokenize").expect("tokenize in the text");
    let outer = text.find("in reward_fn").expect("reward_fn in the text");
    assert!(inner < outer, "innermost first: {text}");
    assert_eq!(
        stacks.to_json()["tasks"][0]["spans"],
        serde_json::json!(["reward_fn", "tokenize"])
    );
}

/// `records` as the runtime writes them: a span's close folded into its
/// opening when that is the record right before it ([`crate::CLOSED_AT`]),
/// and an actor run's `cpu_nanos` left out when it is its wall time.
fn folded_runs(records: &[Record]) -> Vec<Record> {
    let mut out: Vec<Record> = Vec::new();
    for record in records {
        let run = ["task.run", "actor.call", "actor.create"];
        let open = out.last_mut().filter(|o| {
            o.kind == RecordKind::SpanNew && o.span == record.span && run.contains(&o.name)
        });
        match (record.kind, open) {
            (RecordKind::SpanClose, Some(open)) => {
                let wall = record.at_nanos - open.at_nanos;
                for (key, value) in record.fields.iter() {
                    if !(key == "cpu_nanos" && value.as_u64() == Some(wall)) {
                        open.fields.push(key, value.clone());
                    }
                }
                open.fields
                    .push(crate::CLOSED_AT, FieldValue::U64(record.at_nanos));
            }
            _ => out.push(record.clone()),
        }
    }
    out
}

/// Every view of `views` as text, to compare two engines.
fn all_views(views: &Views) -> Vec<String> {
    let snapshot = views.snapshot();
    vec![
        snapshot.logical().to_json().to_string(),
        snapshot.flame().folded(FlameMetric::Running),
        snapshot.flame().folded(FlameMetric::SelfTime),
        snapshot.gantt().to_chrome_trace().to_string(),
        snapshot.stacks().to_json().to_string(),
        snapshot.physical().to_json().to_string(),
    ]
}

#[test]
fn a_run_recorded_as_one_record_is_its_opening_and_its_close() {
    let mut s = Script::default();
    let place = [("node_id", "n1"), ("worker_id", "w1")];
    let with_place = |f: &[(&'static str, &'static str)]| {
        let mut f = f.to_vec();
        f.extend(place);
        f
    };
    let t1 = s.open(
        "task.run",
        0,
        &with_place(&[("task_id", "t1"), ("function", "m::f")]),
    );
    s.close(t1, 50);
    let actor = [("actor_id", "A1"), ("class", "C")];
    let mut ctor = vec![("task_id", "c0")];
    ctor.extend(actor);
    let c0 = s.open("actor.create", 60, &with_place(&ctor));
    s.close(c0, 70);
    let mut call = vec![("task_id", "t2"), ("method", "m")];
    call.extend(actor);
    let t2 = s.open("actor.call", 80, &with_place(&call));
    s.close(t2, 120);
    // The runtime's CPU times: the constructor's read from the clock, the
    // call's its wall time (left out when folded).
    for (span, cpu) in [(c0, 4_000u64), (t2, 40_000)] {
        if let Some(close) = s
            .records
            .iter_mut()
            .find(|r| r.kind == RecordKind::SpanClose && r.span == span)
        {
            close.fields.push("cpu_nanos", FieldValue::U64(cpu));
        }
    }
    // A run with a wait inside: its close stays a record of its own.
    let t3 = s.open(
        "task.run",
        130,
        &with_place(&[("task_id", "t3"), ("function", "m::g")]),
    );
    let wait = s.open_in("wait", t3, 140, &[("task_id", "t3"), ("objects", "o1")]);
    s.close(wait, 150);
    s.close(t3, 200);

    let folded = folded_runs(&s.records);
    assert_eq!(
        folded.len(),
        s.records.len() - 3,
        "three runs folded, not the wait"
    );
    let closing = folded.iter().filter(|r| r.closed_at().is_some()).count();
    assert_eq!(closing, 5, "3 folded runs, the wait's and t3's closes");
    let cpu_left = folded
        .iter()
        .filter(|r| r.field("cpu_nanos").is_some())
        .count();
    assert_eq!(cpu_left, 1, "the call's wall-time CPU was left out");

    let mut apart = Views::default();
    apart.accept(&s.records);
    let mut together = Views::default();
    together.accept(&folded);
    assert_eq!(all_views(&apart), all_views(&together));
    let physical = together.snapshot().physical();
    let usage = physical_worker(physical_node(&physical, "n1"), "w1").actors[0].usage;
    assert_eq!(usage.cpu_nanos, Some(44_000), "clock and wall time");

    // A replay before a folded run's close shows it running, as the
    // records apart do.
    for at_us in [100, 170, 300] {
        let at = Some(at_us * 1_000);
        let apart = crate::log::replay(&s.records, Limits::default(), at);
        let together = crate::log::replay(&folded, Limits::default(), at);
        assert_eq!(all_views(&apart), all_views(&together), "at {at_us} µs");
    }
    let at_100 = crate::log::replay(&folded, Limits::default(), Some(100_000));
    let running: Vec<String> = at_100
        .snapshot()
        .stacks()
        .tasks
        .iter()
        .map(|t| t.task.task_id.clone())
        .collect();
    assert_eq!(running, ["t2"], "the call is running at 100 µs");

    // A field of that name on an application's span is its own: the span
    // stays open until its close.
    let mut user = Script::default();
    let t = user.open(
        "task.run",
        0,
        &with_place(&[("task_id", "t9"), ("function", "m::h")]),
    );
    let settle = user.open_in("settle", t, 10, &[]);
    if let Some(r) = user.records.last_mut() {
        r.fields = Fields::from_iter([(crate::CLOSED_AT, FieldValue::U64(20_000))]);
    }
    assert_eq!(user.records[1].closed_at(), None);
    let stacks = user.views().snapshot().stacks();
    assert_eq!(stacks.tasks[0].spans, ["settle"], "still open");
    user.close(settle, 40);
    user.close(t, 50);
    let flame = user.views().snapshot().flame().folded(FlameMetric::Running);
    assert!(flame.contains("driver;m::h;settle 30"), "{flame}");
}

#[test]
fn a_call_whose_caller_is_only_submitted_waits_for_the_callers_start() {
    // Records of three processes: the driver's submit of `relay`, then the
    // callee's whole run (one record) from another node, and only then
    // `relay`'s own run from a third.
    let mut s = Script::default();
    s.event(
        "task.submit",
        0,
        &[("task_id", "r1"), ("function", "m::relay")],
    );
    let add = s.open(
        "task.run",
        20,
        &[
            ("task_id", "a1"),
            ("function", "m::add"),
            ("parent_task", "r1"),
        ],
    );
    s.close(add, 30);
    let folded = folded_runs(&s.records);
    let mut views = Views::default();
    views.accept(&folded);
    let mut relay = Script {
        next_span: 100,
        ..Script::default()
    };
    let run = relay.open(
        "task.run",
        10,
        &[("task_id", "r1"), ("function", "m::relay")],
    );
    relay.close(run, 40);
    views.accept(&relay.records);
    let flame = views.snapshot().flame().folded(FlameMetric::Running);
    assert!(flame.contains("driver;m::relay;m::add 10"), "{flame}");
    assert!(!flame.contains("unknown"), "{flame}");
    assert_eq!(views.stats().dropped, 0);
}

/// The flame frames' paths, for an assertion's message.
fn frame_paths(views: &Views) -> Vec<String> {
    views
        .snapshot()
        .flame()
        .frames
        .iter()
        .map(|f| f.path.clone())
        .collect()
}

/// Opens the run of t2 (`m::g`), a child of t1, at `at_us`; it names the
/// caller's span it was submitted in when `span` is given.
fn child_run(s: &mut Script, at_us: u64, span: Option<&str>) -> u64 {
    let mut f = vec![
        ("task_id", "t2"),
        ("function", "m::g"),
        ("parent_task", "t1"),
    ];
    if let Some(span) = span {
        f.push(("parent_span", span));
    }
    s.open("task.run", at_us, &f)
}

/// t2's submit at `at_us`, inside t1's span `span`.
fn child_submit(s: &mut Script, at_us: u64, span: &str) {
    s.event(
        "task.submit",
        at_us,
        &[
            ("task_id", "t2"),
            ("function", "m::g"),
            ("parent_task", "t1"),
            ("parent_span", span),
        ],
    );
}

/// t2 is a frame under t1's `reward_fn`, once, and not beside it.
fn assert_child_under_span(views: &Views) {
    let flame = views.snapshot().flame();
    let under = flame.frame("driver;m::f;reward_fn;m::g");
    assert_eq!(under.map(|f| f.count), Some(1), "{:#?}", frame_paths(views));
    assert!(
        frame_paths(views)
            .iter()
            .all(|p| !p.contains("[unknown]") && p != "driver;m::f;m::g"),
        "{:#?}",
        frame_paths(views)
    );
}

#[test]
fn a_child_submitted_in_a_user_span_that_starts_after_the_span_closed_is_under_it() {
    let mut s = Script::default();
    let run = s.open("task.run", 0, &[("task_id", "t1"), ("function", "m::f")]);
    let reward = s.open_in("reward_fn", run, 1, &[]);
    let span = reward.to_string();
    child_submit(&mut s, 2, &span);
    s.close(reward, 3);
    let child = child_run(&mut s, 4, Some(&span));
    s.close(child, 5);
    s.close(run, 6);
    assert_child_under_span(&s.views());
}

#[test]
fn a_child_whose_records_come_before_its_callers_span_waits_for_that_span() {
    // Another process's records first: the child's run (span 1), then its
    // caller's run (2) and the caller's `reward_fn` span (3) it was
    // submitted in.
    let mut s = Script::default();
    let child = child_run(&mut s, 4, Some("3"));
    s.close(child, 5);
    let run = s.open("task.run", 0, &[("task_id", "t1"), ("function", "m::f")]);
    let reward = s.open_in("reward_fn", run, 1, &[]);
    assert_eq!(reward, 3);
    s.close(reward, 6);
    s.close(run, 7);
    assert_child_under_span(&s.views());
}

#[test]
fn a_childs_span_learnt_from_its_late_submit_moves_it_under_the_span() {
    // The child's run says only its caller task; its submit, applied
    // after the run started, says the span.
    let mut s = Script::default();
    let run = s.open("task.run", 0, &[("task_id", "t1"), ("function", "m::f")]);
    let reward = s.open_in("reward_fn", run, 1, &[]);
    let child = child_run(&mut s, 3, None);
    child_submit(&mut s, 2, &reward.to_string());
    s.close(child, 4);
    s.close(reward, 5);
    s.close(run, 6);
    assert_child_under_span(&s.views());
}

#[test]
fn a_parent_span_of_another_task_is_not_taken() {
    // A hostile or stale `parent_span` naming a span of a task that is not
    // the caller: the child stays under its caller task.
    let mut s = Script::default();
    let other = s.open("task.run", 0, &[("task_id", "t9"), ("function", "m::h")]);
    let foreign = s.open_in("reward_fn", other, 1, &[]);
    let run = s.open("task.run", 2, &[("task_id", "t1"), ("function", "m::f")]);
    let child = child_run(&mut s, 3, Some(&foreign.to_string()));
    s.close(child, 4);
    s.close(run, 5);
    s.close(foreign, 6);
    s.close(other, 7);
    let views = s.views();
    let flame = views.snapshot().flame();
    assert_eq!(
        flame.frame("driver;m::f;m::g").map(|f| f.count),
        Some(1),
        "{:#?}",
        frame_paths(&views)
    );
}

#[test]
fn a_late_submit_of_a_call_waiting_for_its_callers_span_is_not_a_new_task() {
    // The child finished and waits for the caller's span 99, which never
    // comes; its submit arrives meanwhile: it ran already, nothing stays
    // queued in the stack view.
    let mut s = Script::default();
    let run = s.open("task.run", 0, &[("task_id", "t1"), ("function", "m::f")]);
    let child = s.open(
        "task.run",
        2,
        &[
            ("task_id", "t2"),
            ("function", "m::g"),
            ("parent_task", "t1"),
            ("parent_span", "99"),
        ],
    );
    s.close(child, 3);
    s.event(
        "task.submit",
        1,
        &[
            ("task_id", "t2"),
            ("function", "m::g"),
            ("parent_task", "t1"),
            ("parent_span", "99"),
        ],
    );
    s.close(run, 4);
    let views = s.views();
    let logical = views.snapshot().logical();
    let queued: u64 = logical
        .call_edges
        .iter()
        .map(|e| e.queued + e.running)
        .sum();
    assert_eq!(queued, 0, "{:#?}", logical.call_edges);
    let stacks = views.snapshot().stacks();
    assert!(
        stacks.tasks.iter().all(|t| !t.task.name.ends_with("m::g")),
        "{stacks:#?}"
    );
}
