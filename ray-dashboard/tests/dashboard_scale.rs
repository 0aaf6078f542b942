//! The dashboard's HTTP server over a live source at scale: `/api/summary`
//! answers every summarized view of 10,000 actors and 200,000 tasks in a
//! bounded body, `/api/events` carries a view forward with deltas that
//! rebuild the summary exactly, and `/api/flamediff` takes its baseline as
//! a POST body too large for a URL.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ray_dashboard::summary::patch;
use ray_dashboard::{Dashboard, DashboardConfig, SummaryLimits, ViewsSource};
use ray_insight::{FieldValue, Fields, Record, RecordKind, Views};
use serde_json::{Map, Value};

use ray_test_support::http::{get, post, request};
use ray_test_support::workload;
use workload::{feed_all, Shape, CLASSES, FULL};

const TOKEN: &str = "sesame";

/// A live recording of `shape`: views that grow (`accept`) while the
/// dashboard serves them.
fn recording(shape: Shape) -> Arc<ViewsSource> {
    let mut views = Views::default();
    feed_all(shape, &mut views);
    ViewsSource::new("job-1", views, None)
}

fn serve(live: &Arc<ViewsSource>) -> Dashboard {
    Dashboard::start(
        DashboardConfig {
            token: Some(TOKEN.into()),
            ..DashboardConfig::default()
        },
        live.clone(),
    )
    .expect("the dashboard starts")
}

/// 10,000 actors and 200,000 tasks, runtime-shaped (2,000 of them still
/// submitted or running).
fn large() -> Arc<ViewsSource> {
    let started = Instant::now();
    let live = recording(Shape {
        tasks: 200_000,
        ..FULL
    });
    eprintln!("200,000 tasks fed in {:.2?}", started.elapsed());
    live
}

/// 300 actors and 5,000 tasks, runtime-shaped: a job of its own for a test
/// that changes it, or needs no scale.
fn small() -> Arc<ViewsSource> {
    recording(Shape {
        tasks: 5_000,
        actors: 300,
        nodes: 2,
        workers: 4,
        queued: 10,
        running: 40,
        sample_every: 500,
    })
}

/// The largest summary body accepted.
const MAX_SUMMARY_BYTES: usize = 1024 * 1024;

/// `GET /api/summary` for `view` and `extra` parameters: a bounded JSON
/// body for that view.
fn summary(dash: &Dashboard, view: &str, extra: &str) -> Value {
    let started = Instant::now();
    let (status, body) = get(
        dash,
        &format!("/api/summary?token={TOKEN}&job=job-1&view={view}{extra}"),
    );
    assert_eq!(status, 200, "{view}{extra}: {body}");
    eprintln!(
        "summary of {view}{extra}: {} bytes in {:.2?}",
        body.len(),
        started.elapsed()
    );
    assert!(
        body.len() < MAX_SUMMARY_BYTES,
        "{view}{extra}: {} bytes",
        body.len()
    );
    let summary: Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(summary["view"], view);
    // What deltas are keyed by: each array item's key, else its id, distinct.
    let keyed = by_key(&summary);
    for (name, items) in summary.as_object().unwrap() {
        if let Some(items) = items.as_array().filter(|a| !a.is_empty()) {
            assert!(keyed[name].is_object(), "{view}: {name} items without ids");
            assert_eq!(keyed[name].as_object().unwrap().len(), items.len());
        }
    }
    summary
}

fn array<'a>(value: &'a Value, name: &str) -> &'a Vec<Value> {
    value[name]
        .as_array()
        .unwrap_or_else(|| panic!("no array {name}"))
}

/// Every summarized view of 10,000 actors and 200,000 tasks answers 200
/// with less than 1 MiB and what the view says: classes collapsed (one
/// expanded on request), actors listed per worker up to the cap with the
/// totals kept, the stack capped at its limit, the Gantt chart down to its
/// busiest lanes and merged slices; the flame graph, an empty window and a
/// missing token are refused.
#[test]
fn every_summary_of_a_large_job_is_bounded_and_right() {
    let live = large();
    let dash = serve(&live);
    let started = Instant::now();

    let logical = summary(&dash, "logical", "");
    let classes: Vec<&Value> = array(&logical, "nodes")
        .iter()
        .filter(|n| n["kind"] == "class")
        .collect();
    assert_eq!(classes.len(), CLASSES.len());
    let instances: u64 = classes
        .iter()
        .map(|c| c["instances"].as_u64().unwrap())
        .sum();
    assert_eq!(instances, 10_000);
    assert!(array(&logical, "nodes")
        .iter()
        .all(|n| n["kind"] != "actor"));
    assert_eq!(logical["summary"]["actors"], 10_000);
    let expanded = summary(&dash, "logical", &format!("&expand={}", CLASSES[2]));
    let drawn = array(&expanded, "nodes")
        .iter()
        .filter(|n| n["kind"] == "actor")
        .inspect(|n| assert_eq!(n["class"], CLASSES[2]))
        .count();
    assert!(
        drawn > 0 && drawn <= SummaryLimits::default().actor_nodes,
        "{drawn} instances drawn"
    );
    // A label filter narrows it (`=` encoded).
    let rank = summary(&dash, "logical", "&filter=dp_rank%3D3");
    let calls = |v: &Value| -> u64 {
        array(v, "call_edges")
            .iter()
            .map(|e| e["count"].as_u64().unwrap())
            .sum()
    };
    assert!(calls(&rank) > 0 && calls(&rank) < calls(&logical));

    let physical = summary(&dash, "physical", "");
    let nodes = array(&physical, "nodes");
    assert_eq!(nodes.len(), 8);
    let limits = SummaryLimits::default();
    let (mut listed, mut total, mut running) = (0, 0, 0);
    for worker in nodes.iter().flat_map(|n| array(n, "workers")) {
        let actors = array(worker, "actors").len();
        assert!(actors <= limits.actors_per_worker, "{actors} actors listed");
        listed += actors as u64;
        let actors_total = worker["actors_total"].as_u64().unwrap();
        total += actors_total;
        let by_class: u64 = worker["actor_classes"]
            .as_object()
            .unwrap()
            .values()
            .map(|n| n.as_u64().unwrap())
            .sum();
        assert_eq!(by_class, actors_total);
        assert!(array(worker, "running").len() <= limits.actors_per_worker);
        running += worker["running_total"].as_u64().unwrap();
        assert!(array(worker, "samples").len() <= limits.samples);
    }
    assert_eq!(total, 10_000);
    assert_eq!(physical["summary"]["omitted"]["actors"], total - listed);
    assert_eq!(running, 1_800, "every running task is counted");

    let stack = summary(&dash, "stack", "");
    assert_eq!(array(&stack, "tasks").len(), limits.stacks);
    assert_eq!(
        stack["summary"]["omitted"]["tasks"],
        1_800 - limits.stacks as u64
    );

    let gantt = summary(&dash, "gantt", "");
    let events = array(&gantt, "traceEvents");
    let slices = events.iter().filter(|e| e["ph"] == "X").count();
    assert!(
        slices > 0 && slices <= limits.gantt_slices,
        "{slices} slices"
    );
    let flows = events.iter().filter(|e| e["ph"] == "s").count();
    assert!(flows > 0 && flows <= limits.gantt_flows, "{flows} flows");
    let lanes = events
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "thread_name")
        .count();
    let info = &gantt["summary"];
    let all_lanes = info["lanes"].as_u64().unwrap();
    let cap = limits.gantt_lanes as u64;
    assert!(all_lanes > cap, "{all_lanes} lanes: more than the cap");
    assert_eq!(lanes as u64, cap);
    assert_eq!(info["omitted"]["lanes"], all_lanes - cap);
    let now = live.views().now_nanos();
    assert_eq!(info["to_nanos"], now);
    // The last but one millisecond (older slices were evicted).
    let (from, to) = (now - 2_000_000, now - 1_000_000);
    let window = summary(&dash, "gantt", &format!("&from={from}&to={to}"));
    assert_eq!(window["summary"]["from_nanos"], from);
    assert_eq!(window["summary"]["to_nanos"], to);
    let in_window: Vec<&Value> = array(&window, "traceEvents")
        .iter()
        .filter(|e| e["ph"] == "X")
        .collect();
    assert!(!in_window.is_empty());
    assert!(window["summary"]["slices_in_window"].as_u64().unwrap() > 0);
    for e in in_window {
        let start = e["ts"].as_f64().unwrap() * 1e3;
        let end = start + e["dur"].as_f64().unwrap() * 1e3;
        assert!(
            start <= to as f64 + 1.0 && end + 1.0 >= from as f64,
            "{e} is outside the window"
        );
    }
    eprintln!("every summary served in {:.2?}", started.elapsed());

    for (target, want) in [
        (format!("/api/summary?token={TOKEN}&view=flame"), 400),
        (
            format!("/api/summary?token={TOKEN}&view=gantt&from=5&to=5"),
            400,
        ),
        (
            format!("/api/summary?token={TOKEN}&view=gantt&from=9&to=5"),
            400,
        ),
        (
            format!("/api/summary?token={TOKEN}&view=gantt&to=soon"),
            400,
        ),
        (
            format!("/api/summary?token={TOKEN}&view=logical&job=job-9"),
            404,
        ),
        ("/api/summary?view=logical".to_owned(), 401),
        ("/api/summary?token=sesamf&view=logical".to_owned(), 401),
    ] {
        let (status, body) = get(&dash, &target);
        assert_eq!(status, want, "{target}: {body}");
        assert!(!body.trim().is_empty(), "{target} says why");
    }
}

/// A server-sent events stream, read one message at a time (its chunked
/// transfer encoding undone).
struct Events {
    stream: TcpStream,
    buffer: String,
    /// Bytes read but not yet decoded (a chunk not yet whole).
    raw: Vec<u8>,
    chunked: bool,
}

impl Events {
    fn open(dash: &Dashboard, query: &str) -> Self {
        let mut stream = TcpStream::connect(dash.local_addr()).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        write!(stream, "GET /api/events?{query} HTTP/1.1\r\n\r\n").unwrap();
        let mut events = Self {
            stream,
            buffer: String::new(),
            raw: Vec::new(),
            chunked: false,
        };
        let head = events.until("\r\n\r\n");
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert!(head.contains("text/event-stream"), "{head}");
        if head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked")
        {
            events.chunked = true;
            events.raw = std::mem::take(&mut events.buffer).into_bytes();
            events.dechunk();
        }
        events
    }

    /// Everything up to the next `end`, which is consumed.
    fn until(&mut self, end: &str) -> String {
        let mut chunk = [0u8; 64 * 1024];
        loop {
            if let Some(at) = self.buffer.find(end) {
                let text = self.buffer[..at].to_owned();
                self.buffer.drain(..at + end.len());
                return text;
            }
            let n = self.stream.read(&mut chunk).expect("events keep coming");
            assert!(n > 0, "the stream ended: {}", self.buffer);
            if self.chunked {
                self.raw.extend_from_slice(&chunk[..n]);
                self.dechunk();
            } else {
                self.buffer.push_str(&String::from_utf8_lossy(&chunk[..n]));
            }
        }
    }

    /// Moves every whole chunk read so far into `buffer`.
    fn dechunk(&mut self) {
        while let Some(line) = self.raw.windows(2).position(|w| w == b"\r\n") {
            let size = std::str::from_utf8(&self.raw[..line])
                .ok()
                .and_then(|s| usize::from_str_radix(s.trim(), 16).ok())
                .expect("a chunk size");
            let (start, end) = (line + 2, line + 2 + size);
            if self.raw.len() < end + 2 {
                return;
            }
            let data = String::from_utf8_lossy(&self.raw[start..end]).into_owned();
            self.buffer.push_str(&data);
            self.raw.drain(..end + 2);
        }
    }

    /// The next message's JSON.
    fn next(&mut self) -> Value {
        let message = self.until("\n\n");
        let data = message.strip_prefix("data: ").expect("a data line");
        serde_json::from_str(data).expect("JSON")
    }
}

/// A summary with each keyed array turned into a map by key (`key`, else
/// `id`), so that two summaries compare equal whatever their items' order.
fn by_key(summary: &Value) -> Value {
    let mut out = Map::new();
    for (name, value) in summary.as_object().expect("an object") {
        let value = match value.as_array() {
            Some(items) if items.iter().all(|i| i.get("key").or(i.get("id")).is_some()) => {
                let map: Map<String, Value> = items
                    .iter()
                    .map(|i| {
                        let key = i.get("key").or(i.get("id")).unwrap();
                        (key.to_string(), i.clone())
                    })
                    .collect();
                assert_eq!(map.len(), items.len(), "{name}: keys are distinct");
                Value::Object(map)
            }
            _ => value.clone(),
        };
        out.insert(name.clone(), value);
    }
    Value::Object(out)
}

/// A finished call of `m::late` by the driver, and an object it put: what
/// arrives while the page is open.
fn late_records(at: u64) -> Vec<Record> {
    let record = |kind, span, name, fields: &[(&'static str, &str)]| Record {
        kind,
        span,
        parent: 0,
        name,
        target: "ray::task",
        at_nanos: at,
        thread: 7,
        fields: fields
            .iter()
            .map(|(k, v)| (*k, FieldValue::Str((*v).into())))
            .collect::<Fields>(),
    };
    vec![
        record(
            RecordKind::SpanNew,
            u64::MAX - 1,
            "task.run",
            &[("task_id", "late-1"), ("function", "m::late")],
        ),
        record(
            RecordKind::Event,
            0,
            "object.put",
            &[
                ("object_id", "late-o"),
                ("bytes", "10"),
                ("task_id", "late-1"),
            ],
        ),
        record(RecordKind::SpanClose, u64::MAX - 1, "task.run", &[]),
    ]
}

/// The events of the logical view: the summary once (`full`), nothing
/// while nothing arrives, then, once records arrive and the version moves,
/// a `delta` that patched onto the first summary gives exactly what
/// `/api/summary` answers now.
#[test]
fn events_carry_the_summary_forward_with_deltas() {
    let live = small();
    let dash = serve(&live);
    let query = format!("token={TOKEN}&job=job-1&view=logical");
    let mut events = Events::open(&dash, &query);
    let first = events.next();
    assert_eq!(first["stats"]["version"], 1);
    let mut shown = first["full"].clone();
    assert_eq!(shown["view"], "logical");
    assert_eq!(shown["summary"]["actors"], 300);
    // Nothing arrived: the counters only.
    let second = events.next();
    assert!(
        second.get("full").is_none() && second.get("delta").is_none(),
        "{second}"
    );

    let now = live.views().now_nanos();
    live.accept(&late_records(now + 1_000));
    let deadline = Instant::now() + Duration::from_secs(10);
    let delta = loop {
        assert!(Instant::now() < deadline, "no delta within 10 s");
        let message = events.next();
        assert!(message.get("full").is_none(), "{message}");
        if let Some(delta) = message.get("delta") {
            assert_eq!(message["stats"]["version"], 2);
            break delta.clone();
        }
    };
    // Only what changed: the new node and edge, not the whole graph.
    let upserted: usize = delta["arrays"]
        .as_object()
        .unwrap()
        .values()
        .map(|a| a["upsert"].as_array().unwrap().len())
        .sum();
    assert!(upserted <= 4, "{upserted} items sent: {delta}");
    patch(&mut shown, &delta);
    let (status, now) = get(&dash, &format!("/api/summary?{query}"));
    assert_eq!(status, 200);
    let now: Value = serde_json::from_str(&now).unwrap();
    assert!(array(&now, "nodes").iter().any(|n| n["id"] == "fn:m::late"));
    assert_eq!(by_key(&shown), by_key(&now));
}

/// A flame graph baseline of more than 64 KiB, too long for a URL, is
/// POSTed whole and diffed (the SVG is the one its last line changes); the
/// same baseline in a GET is refused, a body over the cap or cut short is
/// refused, and POST anywhere else is 405.
#[test]
fn a_large_flame_baseline_is_posted() {
    let live = small();
    let dash = serve(&live);
    let (status, now) = get(
        &dash,
        &format!("/api/view?token={TOKEN}&view=flame&format=folded"),
    );
    assert_eq!(status, 200);
    let first = now.lines().next().expect("a path").to_owned();
    let (path, _) = first.rsplit_once(' ').unwrap();
    // Paths of another run, then, last, a path of this one ten times longer.
    let mut baseline = String::new();
    for i in 0.. {
        if baseline.len() > 100 * 1024 {
            break;
        }
        baseline.push_str(&format!(
            "driver;old::stage_{i};old::kernel_{i} {}\n",
            1 + i
        ));
    }
    let cut = baseline.clone();
    baseline.push_str(&format!("{path} 1000000000\n"));
    let target = format!("/api/flamediff?token={TOKEN}&job=job-1");
    let (status, svg) = post(&dash, &target, baseline.as_bytes());
    assert_eq!(status, 200, "{svg}");
    assert!(svg.contains("<svg"));
    let whole = ray_insight::views::diff_svg(&baseline, &now).unwrap();
    let without_last = ray_insight::views::diff_svg(&cut, &now).unwrap();
    assert_ne!(whole, without_last, "the last line matters");
    assert_eq!(svg, whole, "the whole body was read");

    // In a URL, the baseline is bounded by the request head's size: the
    // server answers 400 without reading the rest, so the client may see
    // its connection reset before it reads the answer.
    let mut stream = TcpStream::connect(dash.local_addr()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let _ = write!(
        stream,
        "GET {target}&before={} HTTP/1.1\r\n\r\n",
        baseline.replace(' ', "+")
    );
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response);
    let response = String::from_utf8_lossy(&response);
    assert!(
        response.is_empty() || response.starts_with("HTTP/1.1 400"),
        "{response}"
    );
    let (status, body) = request(
        &dash,
        format!("POST {target} HTTP/1.1\r\nContent-Length: 17000000\r\n\r\n"),
    );
    assert_eq!(status, 400, "{body}");
    // Cut short: the client says more than it sends, then stops sending.
    let mut stream = TcpStream::connect(dash.local_addr()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    write!(
        stream,
        "POST {target} HTTP/1.1\r\nContent-Length: 1000\r\n\r\ndriver 1\n"
    )
    .unwrap();
    stream.shutdown(std::net::Shutdown::Write).unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    assert!(response.starts_with("HTTP/1.1 400"), "{response}");

    for elsewhere in ["/api/summary?view=logical&", "/api/view?view=flame&", "/?"] {
        let (status, _) = post(&dash, &format!("{elsewhere}token={TOKEN}"), b"x");
        assert_eq!(status, 405, "POST {elsewhere}");
    }
    let (status, _) = post(&dash, "/api/flamediff", baseline.as_bytes());
    assert_eq!(status, 401);
}
