//! The dashboard's summaries (`ray_dashboard::summary`) against the
//! full views they narrow: the logical graph keeps every node and call count
//! while it is small and collapses actor classes when it is large, the Gantt
//! chart merges narrow slices without losing count of them and keeps the
//! busiest lanes of the window asked for and bundles its flow arrows, and
//! the stack view puts deadlocks first within its cap.

use std::collections::{BTreeMap, BTreeSet};

use ray_dashboard::summary::{summarize, SummaryLimits, SummaryParams};
use ray_insight::export::{export, ExportFormat, ViewKind};
use ray_insight::{FieldValue, Fields, Limits, Record, RecordKind, Sink, Views};
use serde_json::Value;

/// Builds record streams: spans get fresh ids, times are in nanoseconds.
#[derive(Default)]
struct Script {
    records: Vec<Record>,
    next_span: u64,
}

impl Script {
    fn push(
        &mut self,
        kind: RecordKind,
        span: u64,
        name: &'static str,
        at: u64,
        thread: u32,
        f: &[(&'static str, &str)],
    ) {
        let fields: Fields = f
            .iter()
            .map(|(k, v)| (*k, FieldValue::Str((*v).into())))
            .collect();
        self.records.push(Record {
            kind,
            span,
            parent: 0,
            name,
            target: "ray_test",
            at_nanos: at,
            thread,
            fields,
        });
    }

    /// Opens a span on `thread`; returns its id.
    fn open(
        &mut self,
        name: &'static str,
        at: u64,
        thread: u32,
        f: &[(&'static str, &str)],
    ) -> u64 {
        self.next_span += 1;
        let span = self.next_span;
        self.push(RecordKind::SpanNew, span, name, at, thread, f);
        span
    }

    fn close(&mut self, span: u64, at: u64) {
        self.push(RecordKind::SpanClose, span, "closed", at, 0, &[]);
    }

    fn event(&mut self, name: &'static str, at: u64, f: &[(&'static str, &str)]) {
        self.push(RecordKind::Event, 0, name, at, 0, f);
    }

    /// A finished actor creation.
    fn create(&mut self, actor: &str, class: &str, at: u64) {
        let span = self.open(
            "actor.create",
            at,
            0,
            &[("actor_id", actor), ("class", class)],
        );
        self.close(span, at + 1);
    }

    /// A finished call of `actor`'s `method`, by `parent` (`None`: the driver).
    fn call(
        &mut self,
        task: &str,
        actor: &str,
        class: &str,
        method: &str,
        parent: Option<&str>,
        at: u64,
    ) {
        let mut f = vec![
            ("task_id", task),
            ("actor_id", actor),
            ("class", class),
            ("method", method),
        ];
        if let Some(parent) = parent {
            f.push(("parent_task", parent));
        }
        let span = self.open("actor.call", at, 0, &f);
        self.close(span, at + 100);
    }

    fn views(&self, limits: Limits) -> Views {
        let mut views = Views::new(limits);
        views.accept(&self.records);
        views
    }
}

fn summary(views: &Views, view: ViewKind, params: &SummaryParams, limits: &SummaryLimits) -> Value {
    summarize(&views.snapshot(), view, params, limits).expect("the view has a summary")
}

fn full(views: &Views, view: ViewKind, format: ExportFormat) -> (Value, usize) {
    let text = export(&views.snapshot(), view, format).expect("the view exports");
    (serde_json::from_str(&text).expect("JSON"), text.len())
}

/// Every item of every top-level array of `summary` that is an object has
/// an `id` (or, for flow events, a `key`), distinct within its array: what
/// `diff` keys deltas by.
fn assert_keyed(summary: &Value) {
    for (name, value) in summary.as_object().expect("an object") {
        let Some(items) = value.as_array() else {
            continue;
        };
        let mut keys = BTreeSet::new();
        for item in items {
            assert!(item.is_object(), "{name}: {item}");
            let key = item
                .get("key")
                .or_else(|| item.get("id"))
                .filter(|k| !k.is_null())
                .unwrap_or_else(|| panic!("{name} item without an id: {item}"));
            assert!(keys.insert(key.to_string()), "{name}: id {key} twice");
        }
    }
}

/// `(from, to, name, kind)` to count, for every call edge of a logical JSON.
fn call_counts(logical: &Value) -> BTreeMap<(String, String, String, String), u64> {
    let mut out = BTreeMap::new();
    for e in logical["call_edges"].as_array().unwrap() {
        let key =
            [&e["from"], &e["to"], &e["name"], &e["kind"]].map(|v| v.as_str().unwrap().to_owned());
        let [from, to, name, kind] = key;
        *out.entry((from, to, name, kind)).or_default() += e["count"].as_u64().unwrap();
    }
    out
}

fn ids(items: &Value) -> BTreeSet<String> {
    items
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["id"].as_str().unwrap().to_owned())
        .collect()
}

const A: &str = "m::ClassA";
const B: &str = "m::ClassB";

/// A few actors, functions and data: the summary is the full graph (same
/// nodes, same call and data edges with the same counts), with ids on every
/// array item and nothing said to be left out.
#[test]
fn a_small_logical_graph_is_summarized_whole() {
    let mut s = Script::default();
    for (i, actor) in ["a0", "a1", "a2"].into_iter().enumerate() {
        s.create(actor, if i < 2 { A } else { B }, 10 * i as u64);
    }
    let root = s.open(
        "task.run",
        100,
        1,
        &[("task_id", "t0"), ("function", "m::root")],
    );
    for i in 0..5u64 {
        let task = format!("c{i}");
        let actor = ["a0", "a1", "a2"][i as usize % 3];
        let class = if actor == "a2" { B } else { A };
        s.call(&task, actor, class, "step", Some("t0"), 200 + i * 1_000);
        let object = format!("o{i}");
        s.event(
            "object.put",
            250 + i * 1_000,
            &[("object_id", &object), ("bytes", "64"), ("task_id", &task)],
        );
        s.event(
            "object.get",
            400 + i * 1_000,
            &[("object_id", &object), ("bytes", "64"), ("task_id", "t0")],
        );
    }
    s.call("d0", "a0", A, "report", None, 9_000);
    s.close(root, 10_000);
    let views = s.views(Limits::default());
    assert_eq!(views.stats().ignored, 0);

    let limits = SummaryLimits::default();
    let sum = summary(
        &views,
        ViewKind::Logical,
        &SummaryParams::default(),
        &limits,
    );
    let (whole, _) = full(&views, ViewKind::Logical, ExportFormat::Json);
    assert_keyed(&sum);
    assert_eq!(sum["view"], "logical");
    assert_eq!(ids(&sum["nodes"]), ids(&whole["nodes"]));
    assert_eq!(
        sum["nodes"].as_array().unwrap().len(),
        5,
        "the driver, m::root and 3 actors: {}",
        sum["nodes"]
    );
    assert_eq!(call_counts(&sum), call_counts(&whole));
    assert_eq!(
        call_counts(&sum).len(),
        3 + 1 + 3 + 1,
        "3 creations, root, 3 step edges, report"
    );
    let data = |v: &Value| -> BTreeMap<(String, String), u64> {
        v["data_edges"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                let end = |k: &str| e[k].as_str().unwrap().to_owned();
                ((end("from"), end("to")), e["count"].as_u64().unwrap())
            })
            .collect()
    };
    assert_eq!(data(&sum), data(&whole));
    assert_eq!(data(&sum).len(), 3);
    assert_eq!(sum["summary"]["collapsed_classes"], 0);
    assert_eq!(
        sum["summary"]["omitted"],
        serde_json::json!({"call_edges": 0, "data_edges": 0, "nodes": 0})
    );
    for class in sum["classes"].as_array().unwrap() {
        assert_eq!(class["collapsed"], false);
        assert_eq!(
            class["actors"].as_array().unwrap().len() as u64,
            class["instances"].as_u64().unwrap()
        );
    }
}

/// 6,000 actors of class A and 4,000 of class B, created by the driver and
/// called by it and by a function (actor `i` is called `1 + i % 7` times by
/// the driver, and once by the function).
fn ten_thousand_actors() -> Views {
    let mut s = Script::default();
    let class = |i: usize| if i < 6_000 { A } else { B };
    for i in 0..10_000 {
        s.create(&format!("a{i}"), class(i), i as u64);
    }
    let fan = s.open(
        "task.run",
        20_000,
        1,
        &[("task_id", "f0"), ("function", "m::fan")],
    );
    let mut at = 30_000;
    for i in 0..10_000 {
        let actor = format!("a{i}");
        s.call(
            &format!("f0.{i}"),
            &actor,
            class(i),
            "m::step",
            Some("f0"),
            at,
        );
        for k in 0..1 + i % 7 {
            s.call(
                &format!("d{i}.{k}"),
                &actor,
                class(i),
                "m::poll",
                None,
                at + 1,
            );
        }
        at += 200;
    }
    s.close(fan, at);
    let views = s.views(Limits::default());
    let stats = views.stats();
    assert_eq!(
        (stats.ignored, stats.dropped, stats.unmatched),
        (0, 0, 0),
        "{stats:?}"
    );
    views
}

/// Calls into each class in a logical JSON, summed: edges into `class:C`
/// nodes and into the instances of C.
fn calls_into_classes(
    logical: &Value,
    class_of: &BTreeMap<String, String>,
) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for e in logical["call_edges"].as_array().unwrap() {
        let to = e["to"].as_str().unwrap();
        let class = match to.strip_prefix("class:") {
            Some(class) => class.to_owned(),
            None => match class_of.get(to) {
                Some(class) => class.clone(),
                None => continue,
            },
        };
        *out.entry(class).or_default() += e["count"].as_u64().unwrap();
    }
    out
}

/// Ten thousand actors: each class is one `class:` node that knows its
/// instances, every call into a class is still counted, and the summary is
/// a few kilobytes where the full graph is megabytes; expanding class A
/// draws its busiest instances one by one, at most `actor_nodes`, while B
/// stays collapsed.
#[test]
fn ten_thousand_actors_collapse_into_their_classes() {
    let views = ten_thousand_actors();
    let limits = SummaryLimits::default();
    let (whole, whole_bytes) = full(&views, ViewKind::Logical, ExportFormat::Json);
    let class_of: BTreeMap<String, String> = whole["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["kind"] == "actor")
        .map(|n| {
            (
                n["id"].as_str().unwrap().to_owned(),
                n["class"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(class_of.len(), 10_000);
    let whole_into = calls_into_classes(&whole, &class_of);
    // Creations (by the driver), one call from m::fan, 1 + i % 7 from the driver.
    let polls: u64 = (0..6_000u64).map(|i| 1 + i % 7).sum();
    assert_eq!(whole_into[A], 6_000 + 6_000 + polls);

    let sum = summary(
        &views,
        ViewKind::Logical,
        &SummaryParams::default(),
        &limits,
    );
    let text = sum.to_string();
    eprintln!(
        "logical, 10,000 actors: summary {} bytes, full export {whole_bytes} bytes",
        text.len()
    );
    assert!(text.len() < 64 * 1024, "{} bytes", text.len());
    assert_keyed(&sum);
    let nodes = sum["nodes"].as_array().unwrap();
    assert!(
        nodes.iter().all(|n| n["kind"] != "actor"),
        "no instance is drawn"
    );
    let instances = |sum: &Value, class: &str| {
        sum["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["id"] == format!("class:{class}"))
            .unwrap_or_else(|| panic!("no node class:{class}"))["instances"]
            .as_u64()
            .unwrap()
    };
    assert_eq!(instances(&sum, A), 6_000);
    assert_eq!(instances(&sum, B), 4_000);
    assert_eq!(
        ids(&sum["nodes"]),
        BTreeSet::from(
            ["driver", "fn:m::fan", "class:m::ClassA", "class:m::ClassB"].map(String::from)
        )
    );
    assert_eq!(calls_into_classes(&sum, &class_of), whole_into);
    assert_eq!(sum["summary"]["actors"], 10_000);
    assert_eq!(sum["summary"]["collapsed_classes"], 2);
    for class in sum["classes"].as_array().unwrap() {
        assert_eq!(class["collapsed"], true);
        assert!(class["actors"].as_array().unwrap().is_empty());
    }

    // Expanding A.
    let params = SummaryParams {
        expand: Some(A.to_owned()),
        ..SummaryParams::default()
    };
    let expanded = summary(&views, ViewKind::Logical, &params, &limits);
    let text = expanded.to_string();
    eprintln!(
        "logical, 10,000 actors, class A expanded: summary {} bytes",
        text.len()
    );
    assert!(text.len() < 256 * 1024, "{} bytes", text.len());
    assert_keyed(&expanded);
    let drawn: BTreeSet<String> = expanded["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["kind"] == "actor")
        .map(|n| {
            assert_eq!(n["class"], A, "only A's instances are drawn: {n}");
            n["id"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(drawn.len(), limits.actor_nodes);
    assert_eq!(instances(&expanded, A), 6_000 - limits.actor_nodes as u64);
    assert_eq!(instances(&expanded, B), 4_000);
    // 200 instances with three edges each (new, m::step, m::poll), two
    // class nodes with three each and driver -> m::fan: 607 edges, 7 over
    // the cap, the least busy left out.
    assert_eq!(expanded["summary"]["omitted"]["call_edges"], 7);
    let kept_min = expanded["call_edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["count"].as_u64().unwrap())
        .min()
        .unwrap();
    let into = calls_into_classes(&expanded, &class_of);
    let lost = whole_into[A] - into[A];
    assert!(
        lost <= 7 * kept_min,
        "{lost} calls left out, the least kept edge has {kept_min}"
    );
    assert_eq!(into[B], whole_into[B]);
    // With room for every edge, every call into each class is counted.
    let roomy = SummaryLimits {
        call_edges: 1_000,
        ..SummaryLimits::default()
    };
    let all = summary(&views, ViewKind::Logical, &params, &roomy);
    assert_eq!(all["summary"]["omitted"]["call_edges"], 0);
    assert_eq!(calls_into_classes(&all, &class_of), whole_into);
    // The drawn instances are the busiest (calls in and out).
    let mut traffic: BTreeMap<&str, u64> = BTreeMap::new();
    for e in whole["call_edges"].as_array().unwrap() {
        for end in [&e["from"], &e["to"]] {
            if class_of.get(end.as_str().unwrap()).map(String::as_str) == Some(A) {
                *traffic.entry(end.as_str().unwrap()).or_default() += e["count"].as_u64().unwrap();
            }
        }
    }
    let least_drawn = drawn.iter().map(|a| traffic[a.as_str()]).min().unwrap();
    let most_left = traffic
        .iter()
        .filter(|(a, _)| !drawn.contains(**a))
        .map(|(_, t)| *t)
        .max()
        .unwrap();
    assert!(
        least_drawn >= most_left,
        "drawn {least_drawn} < left out {most_left}"
    );
    let class = |name: &str| {
        expanded["classes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["class"] == name)
            .unwrap()
            .clone()
    };
    let (a, b) = (class(A), class(B));
    assert_eq!(a["instances"], 6_000);
    let listed: BTreeSet<String> = a["actors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| format!("actor:{}", x.as_str().unwrap()))
        .collect();
    assert_eq!(listed, drawn);
    assert_eq!(
        (
            b["collapsed"].clone(),
            b["actors"].as_array().unwrap().len()
        ),
        (Value::Bool(true), 0)
    );
    assert_eq!(expanded["summary"]["expanded"], A);
}

/// 100,000 short tasks on four lanes (threads 0 to 3): on thread `n`, one
/// runs for `200 * (n + 1)` ns every 1,000 ns. Lane 4 has ten long tasks
/// and one short one alone in its pixel column.
fn many_short_tasks() -> Views {
    let mut s = Script::default();
    for i in 0..100_000u64 {
        let thread = (i % 4) as u32;
        let at = (i / 4) * 1_000;
        let task = format!("t{i}");
        let span = s.open(
            "task.run",
            at,
            thread,
            &[("task_id", &task), ("function", "m::tiny")],
        );
        s.close(span, at + 200 * (u64::from(thread) + 1));
    }
    for i in 0..10u64 {
        let at = 1_000_000 + i * 2_000_000;
        let span = s.open(
            "task.run",
            at,
            4,
            &[("task_id", &format!("long{i}")), ("function", "m::long")],
        );
        s.close(span, at + 100_000);
    }
    let span = s.open(
        "task.run",
        24_500_000,
        4,
        &[("task_id", "lonely"), ("function", "m::tiny")],
    );
    s.close(span, 24_500_100);
    let views = s.views(Limits {
        max_gantt_slices: 200_000,
        ..Limits::default()
    });
    assert_eq!(views.stats().evicted_slices, 0);
    views
}

/// How many slices an X event of a summary stands for: `N` for `N × name`.
fn stands_for(event: &Value) -> u64 {
    let name = event["name"].as_str().unwrap();
    match name.split_once(" × ") {
        Some((n, _)) => {
            let n: u64 = n.parse().unwrap();
            assert_eq!(
                event["args"]["objects"],
                format!("{n} slices merged"),
                "{event}"
            );
            assert!(n > 1, "{event}");
            n
        }
        None => {
            assert!(
                !event["args"]["task_id"].as_str().unwrap().is_empty(),
                "a slice standing for itself keeps its task: {event}"
            );
            1
        }
    }
}

fn x_events(summary: &Value) -> Vec<&Value> {
    summary["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "X")
        .collect()
}

/// The slices of the full view overlapping `[from, to]`.
fn slices_overlapping(views: &Views, from: u64, to: u64) -> usize {
    views
        .snapshot()
        .gantt()
        .slices
        .iter()
        .filter(|s| s.start_nanos <= to && s.start_nanos + s.dur_nanos >= from)
        .count()
}

/// 100,011 slices on five lanes: with room for them, the merged ones say
/// how many they stand for and all add up to the slices in the window; a
/// window keeps only what overlaps it; a lane cap keeps the busiest lanes;
/// under the default slice cap, at most `gantt_slices` events (the longest)
/// in well under 1 MiB, the rest said to be left out.
#[test]
fn many_short_slices_are_merged_without_losing_count() {
    let views = many_short_tasks();
    // Room for every merged slice: 5 lanes, 2,000 columns.
    let limits = SummaryLimits {
        gantt_slices: 20_000,
        ..SummaryLimits::default()
    };
    let sum = summary(&views, ViewKind::Gantt, &SummaryParams::default(), &limits);
    assert_keyed(&sum);
    let events = x_events(&sum);
    let merged_total = events.len();
    assert!(merged_total < 100_011 / 4, "{merged_total} events: merged");
    let info = &sum["summary"];
    assert_eq!(info["slices_in_window"], 100_011);
    assert_eq!(info["omitted"]["slices"], 0);
    assert_eq!(info["lanes"], 5);
    assert_eq!(info["omitted"]["lanes"], 0);
    assert_eq!(events.iter().map(|e| stands_for(e)).sum::<u64>(), 100_011);
    assert_eq!(
        info["omitted"]["slices_merged"].as_u64().unwrap(),
        100_011 - merged_total as u64
    );
    // The long tasks and the lonely one stand for themselves.
    let lane4 = &events
        .iter()
        .find(|e| e["args"]["task_id"] == "lonely")
        .expect("the lonely slice keeps its task id")["tid"];
    let alone: BTreeSet<&str> = events
        .iter()
        .filter(|e| &e["tid"] == lane4)
        .map(|e| e["args"]["task_id"].as_str().unwrap())
        .collect();
    assert_eq!(alone.len(), 11, "{alone:?}");

    // The default cap: the columns widen until the merged slices fit, and
    // every slice is still accounted for.
    let default = SummaryLimits::default();
    let capped = summary(&views, ViewKind::Gantt, &SummaryParams::default(), &default);
    let text = capped.to_string();
    eprintln!(
        "gantt, 100,011 slices: summary {} bytes ({} bytes with room for all {merged_total} merged slices)",
        text.len(),
        sum.to_string().len()
    );
    assert!(text.len() < 1024 * 1024, "{} bytes", text.len());
    assert_keyed(&capped);
    let kept = x_events(&capped);
    assert!(merged_total > default.gantt_slices);
    assert!(kept.len() <= default.gantt_slices, "{} slices", kept.len());
    assert_eq!(kept.iter().map(|e| stands_for(e)).sum::<u64>(), 100_011);
    let omitted = &capped["summary"]["omitted"];
    assert_eq!(omitted["slices"], 0);
    assert_eq!(
        omitted["slices_merged"].as_u64().unwrap(),
        100_011 - kept.len() as u64
    );
    assert!(
        capped["summary"]["column_nanos"].as_u64() > info["column_nanos"].as_u64(),
        "the columns were widened"
    );

    // A window of one millisecond.
    let (from, to) = (5_000_000, 6_000_000);
    let params = SummaryParams {
        from_nanos: Some(from),
        to_nanos: Some(to),
        ..SummaryParams::default()
    };
    let window = summary(&views, ViewKind::Gantt, &params, &limits);
    assert_keyed(&window);
    let info = &window["summary"];
    assert_eq!(
        (info["from_nanos"].as_u64(), info["to_nanos"].as_u64()),
        (Some(from), Some(to))
    );
    assert_eq!(info["column_nanos"], (to - from) / limits.gantt_columns);
    assert_eq!(info["omitted"]["slices"], 0);
    let in_window = slices_overlapping(&views, from, to) as u64;
    assert!(in_window > 3_000 && in_window < 5_000, "{in_window}");
    assert_eq!(info["slices_in_window"], in_window);
    let events = x_events(&window);
    assert_eq!(events.iter().map(|e| stands_for(e)).sum::<u64>(), in_window);
    for e in &events {
        let start = (e["ts"].as_f64().unwrap() * 1_000.0).round() as u64;
        let end = start + (e["dur"].as_f64().unwrap() * 1_000.0).round() as u64;
        assert!(start <= to && end >= from, "{e} outside [{from}, {to}]");
    }

    // Two lanes: the two busiest (threads 3 and 2).
    let two = SummaryLimits {
        gantt_lanes: 2,
        ..limits.clone()
    };
    let busiest = summary(&views, ViewKind::Gantt, &SummaryParams::default(), &two);
    let lanes: BTreeSet<&str> = busiest["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "thread_name")
        .map(|e| e["args"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        lanes,
        BTreeSet::from(["worker/thread-2", "worker/thread-3"])
    );
    let info = &busiest["summary"];
    assert_eq!(
        (info["lanes"].as_u64(), info["omitted"]["lanes"].as_u64()),
        (Some(5), Some(3))
    );
    assert_eq!(info["slices_in_window"], 50_000);
    let events = x_events(&busiest);
    let tids: BTreeSet<u64> = busiest["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "thread_name")
        .map(|e| e["tid"].as_u64().unwrap())
        .collect();
    assert!(events
        .iter()
        .all(|e| tids.contains(&e["tid"].as_u64().unwrap())));
    assert_eq!(events.iter().map(|e| stands_for(e)).sum::<u64>(), 50_000);
}

/// The `s` events of a Gantt summary: (id, calls it stands for, ts).
fn flow_starts(summary: &Value) -> Vec<(u64, u64, f64)> {
    let events = summary["traceEvents"].as_array().unwrap();
    let starts: Vec<(u64, u64, f64)> = events
        .iter()
        .filter(|e| e["ph"] == "s")
        .map(|e| {
            let calls = e["args"]["calls"]
                .as_u64()
                .expect("a bundle counts its calls");
            (e["id"].as_u64().unwrap(), calls, e["ts"].as_f64().unwrap())
        })
        .collect();
    // Each bundle is an `s` and an `f` event sharing its id and count.
    for (id, calls, _) in &starts {
        let end = events
            .iter()
            .find(|e| e["ph"] == "f" && e["id"] == *id)
            .expect("a bundle's end");
        assert_eq!(end["args"]["calls"], *calls);
    }
    starts
}

/// A burst of 1,000 calls from the driver's lane to an actor's at the
/// start, then 10 calls spread over 100 ms: the burst is one arrow that
/// says it carries 1,000 calls, and the later calls keep theirs (the first
/// calls no longer take every arrow); under a cap of 5 arrows the largest
/// bundles are kept and the calls of the others are said to be left out.
#[test]
fn a_burst_of_calls_is_one_arrow_and_later_calls_keep_theirs() {
    let mut s = Script::default();
    let driver = s.open(
        "task.run",
        0,
        0,
        &[("task_id", "drv"), ("function", "m::main")],
    );
    s.create("w1", A, 100);
    for i in 0..1_000u64 {
        s.call(
            &format!("b{i}"),
            "w1",
            A,
            "burst",
            Some("drv"),
            1_000 + i * 200,
        );
    }
    for i in 0..10u64 {
        let at = 10_000_000 + i * 8_000_000;
        s.call(&format!("l{i}"), "w1", A, "late", Some("drv"), at);
    }
    s.close(driver, 100_000_000);
    let views = s.views(Limits::default());

    let sum = summary(
        &views,
        ViewKind::Gantt,
        &SummaryParams::default(),
        &SummaryLimits::default(),
    );
    assert_keyed(&sum);
    let starts = flow_starts(&sum);
    assert_eq!(starts.len(), 11, "{starts:?}");
    let burst: Vec<_> = starts.iter().filter(|(_, calls, _)| *calls > 1).collect();
    assert_eq!(burst.len(), 1, "{starts:?}");
    assert_eq!(burst[0].1, 1_000);
    // Drawn at the burst's first call.
    assert!((burst[0].2 - 1.0).abs() < 0.5, "{burst:?}");
    assert!(starts.iter().filter(|(_, _, ts)| *ts >= 10_000.0).count() == 10);
    let info = &sum["summary"];
    assert_eq!(info["flows_in_window"], 1_010);
    assert_eq!(info["omitted"]["flows"], 0);

    let capped = SummaryLimits {
        gantt_flows: 5,
        ..SummaryLimits::default()
    };
    let sum = summary(&views, ViewKind::Gantt, &SummaryParams::default(), &capped);
    let starts = flow_starts(&sum);
    assert_eq!(starts.len(), 5);
    assert_eq!(starts.iter().map(|(_, calls, _)| calls).sum::<u64>(), 1_004);
    assert_eq!(sum["summary"]["omitted"]["flows"], 6);
}

/// 100 running tasks started first, then 600 blocked ones, then two actor
/// calls waiting on each other: the stack summary lists the deadlocked two
/// first, then blocked tasks oldest first, and says how many it left out.
#[test]
fn deadlocked_tasks_come_first_in_a_capped_stack() {
    let mut s = Script::default();
    for i in 0..100 {
        s.open(
            "task.run",
            i,
            0,
            &[("task_id", &format!("r{i}")), ("function", "m::spin")],
        );
    }
    for i in 0..600u64 {
        let task = format!("b{i}");
        s.open(
            "task.run",
            1_000 + i,
            0,
            &[("task_id", &task), ("function", "m::block")],
        );
        s.open(
            "wait",
            2_000 + i,
            0,
            &[
                ("task_id", &task),
                ("objects", &format!("o{i}")),
                ("producers", ""),
            ],
        );
    }
    s.open(
        "actor.call",
        5_000,
        0,
        &[
            ("task_id", "da"),
            ("actor_id", "A1"),
            ("class", "A"),
            ("method", "f"),
        ],
    );
    s.open(
        "actor.call",
        5_000,
        0,
        &[
            ("task_id", "db"),
            ("actor_id", "B1"),
            ("class", "B"),
            ("method", "g"),
        ],
    );
    s.open(
        "wait",
        5_001,
        0,
        &[("task_id", "da"), ("objects", "ret-b"), ("producers", "db")],
    );
    s.open(
        "wait",
        5_002,
        0,
        &[("task_id", "db"), ("objects", "ret-a"), ("producers", "da")],
    );
    let views = s.views(Limits::default());
    let (whole, _) = full(&views, ViewKind::Stack, ExportFormat::Json);
    assert_eq!(whole["tasks"].as_array().unwrap().len(), 702);

    let limits = SummaryLimits::default();
    let sum = summary(&views, ViewKind::Stack, &SummaryParams::default(), &limits);
    assert_keyed(&sum);
    let tasks = sum["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), limits.stacks);
    assert_eq!(
        sum["summary"]["omitted"]["tasks"],
        702 - limits.stacks as u64
    );
    let first: BTreeSet<&str> = tasks[..2]
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    assert_eq!(first, BTreeSet::from(["da", "db"]));
    let rest: Vec<&str> = tasks[2..]
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    let oldest_blocked: Vec<String> = (0..limits.stacks - 2).map(|i| format!("b{i}")).collect();
    assert_eq!(rest, oldest_blocked);
    assert_eq!(sum["deadlocks"].as_array().unwrap().len(), 1);
    let cycle = sum["deadlocks"][0]["id"].as_str().unwrap();
    assert!(cycle == "da>db" || cycle == "db>da", "{cycle}");
}
