//! What the browser receives: each view summarized on the server to a size
//! that stays fast to send and draw however large the job, and the keyed
//! deltas that carry a live view forward without resending it.
//!
//! A summary has the shape of the view's JSON export (the Chrome trace for
//! the Gantt chart), narrowed by [`SummaryLimits`]:
//!
//! - **logical**: above [`SummaryLimits::actor_nodes`] actor instances, each
//!   class is drawn as one node (`kind: "class"`, with its `instances`) and
//!   its edges are summed into it; `expand=CLASS` shows that class's busiest
//!   instances one by one instead. Call and data edges beyond their caps are
//!   left out busiest-first kept, and the node list follows the kept edges.
//! - **physical**: at most [`SummaryLimits::actors_per_worker`] actors and
//!   running tasks listed per worker, with the totals and a per-class count
//!   of every actor; the last [`SummaryLimits::samples`] resource samples.
//! - **stack**: at most [`SummaryLimits::stacks`] tasks, those in a deadlock
//!   first, then the blocked ones, then the oldest.
//! - **gantt**: the time window asked for (`from`/`to`, default everything),
//!   the [`SummaryLimits::gantt_lanes`] busiest lanes, and slices narrower
//!   than a pixel column (1/[`SummaryLimits::gantt_columns`] of the window)
//!   merged per lane, column and state into one slice that says how many
//!   it stands for; at most [`SummaryLimits::gantt_slices`] slices. Flow
//!   arrows are bundled: one per caller lane, callee lane and column of
//!   the window (1/[`SummaryLimits::gantt_flow_columns`] of it) stands for
//!   the calls between those lanes in it (`args.calls` of its `s` and `f`
//!   events); at most [`SummaryLimits::gantt_flows`] bundles, the largest.
//!
//! With `top` ([`SummaryParams::top`]), the logical summary also carries
//! the bottleneck summary of `rayrs insight top`
//! ([`Snapshot::top`](ray_insight::views::Snapshot::top)) as
//! `bottlenecks`: `self_time` and `waits` (`{frame, nanos, calls}`, the
//! frames naming actor instances), `data` (`{from, to, from_key, to_key,
//! bytes, gets}`) and `deadlocks` (one line each).
//!
//! Every summary says what it left out under `summary` (`"omitted"`
//! counts), and every item of its arrays has an `id`, so that [`diff`]
//! can send only what changed and [`patch`] (mirrored in the page's
//! JavaScript) can apply it.
//!
//! Why here and not in ray-insight: this is pure computation over
//! ray-insight's views (no I/O, no clock), but its output is a contract
//! with the page — [`patch`] is mirrored in `assets/app.js`, and the limits
//! are what the page can draw — so it changes with the page, in this
//! crate. ray-insight keeps the format-neutral exports, and the arrow
//! points one way: ray-dashboard reads ray-insight's views.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde_json::{json, Map, Value};

use ray_insight::export::ViewKind;
use ray_insight::views::{CallKind, LogicalNode, LogicalView, Snapshot, TopView};

mod bottlenecks;
mod gantt;

/// How much of each view a summary keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SummaryLimits {
    /// Actor instances drawn one by one in the logical graph; above it,
    /// classes are collapsed into one node each.
    pub actor_nodes: usize,
    /// Call edges in the logical graph (the busiest).
    pub call_edges: usize,
    /// Data edges in the logical graph (the busiest).
    pub data_edges: usize,
    /// Nodes in the logical graph besides those the kept edges touch.
    pub loose_nodes: usize,
    /// Workers listed in the physical view, over all nodes (the busiest:
    /// most actors and running tasks).
    pub workers: usize,
    /// Actors, and running tasks, listed per worker in the physical view.
    pub actors_per_worker: usize,
    /// Resource samples kept per process in the physical view (the last).
    pub samples: usize,
    /// Task stacks in the stack view.
    pub stacks: usize,
    /// Lanes in the Gantt chart (the busiest in the window).
    pub gantt_lanes: usize,
    /// Pixel columns the Gantt window is divided into for merging.
    pub gantt_columns: u64,
    /// Slices in the Gantt chart, after merging.
    pub gantt_slices: usize,
    /// Flow arrows (bundles) in the Gantt chart.
    pub gantt_flows: usize,
    /// Columns the Gantt window is divided into for bundling flow arrows.
    pub gantt_flow_columns: u64,
}

impl Default for SummaryLimits {
    fn default() -> Self {
        Self {
            actor_nodes: 200,
            call_edges: 600,
            data_edges: 600,
            loose_nodes: 200,
            // An actor is ~90 bytes and a sample ~70: 64 workers with 32
            // actors, 60 samples and their running tasks each come to ~600 KB.
            workers: 64,
            actors_per_worker: 32,
            samples: 60,
            stacks: 500,
            gantt_lanes: 200,
            gantt_columns: 2_000,
            // An X event is ~270 bytes and a flow ~240 (its two events), so
            // the chart stays well under 1 MiB.
            gantt_slices: 2_000,
            gantt_flows: 400,
            gantt_flow_columns: 100,
        }
    }
}

/// What a summary request narrows down, beyond the view's own query.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SummaryParams {
    /// Logical: the class whose instances are drawn one by one.
    pub expand: Option<String>,
    /// Gantt: the window's start, nanoseconds into the recording.
    pub from_nanos: Option<u64>,
    /// Gantt: the window's end (default: now).
    pub to_nanos: Option<u64>,
    /// Logical: with the bottleneck summary, this many of each kind (see
    /// the module docs); `None`: without it.
    pub top: Option<usize>,
}

/// Why a view has no summary.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SummaryError {
    /// The flame graph is not summarized here: its SVG is pruned by width
    /// when drawn.
    #[error("the flame graph has no summary: ask for its svg")]
    Flame,
}

/// `view` of `snapshot`, summarized (see the module docs).
///
/// # Errors
///
/// The flame graph, which has no summary here (its SVG is pruned by width
/// when drawn).
pub fn summarize(
    snapshot: &Snapshot<'_>,
    view: ViewKind,
    params: &SummaryParams,
    limits: &SummaryLimits,
) -> Result<Value, SummaryError> {
    let mut out = match view {
        ViewKind::Logical => {
            let view = snapshot.logical();
            let mut out = logical(&view, params, limits);
            if let Some(n) = params.top {
                // The graph just built serves the summary too.
                let top = TopView::from_views(&snapshot.flame(), &view, &snapshot.stacks(), n);
                out["bottlenecks"] = bottlenecks::to_json(&top, &view);
            }
            out
        }
        ViewKind::Physical => physical(snapshot.physical().to_json(), limits),
        ViewKind::Stack => stack(snapshot.stacks().to_json(), limits),
        ViewKind::Gantt => gantt::gantt(&snapshot.gantt(), snapshot.now_nanos(), params, limits),
        ViewKind::Flame => return Err(SummaryError::Flame),
    };
    let stats = snapshot.stats();
    out["records"] = json!({
        "applied": stats.applied,
        "ignored": stats.ignored,
        "dropped": stats.dropped,
        "lost": stats.lost,
        "unmatched": stats.unmatched,
    });
    out["view"] = json!(view.as_str());
    Ok(out)
}

// ===== logical =====

/// How a node of the full graph is drawn in the summary.
fn shown_node(node: &LogicalNode, collapsed: &HashSet<&str>, kept: &HashSet<&str>) -> String {
    match node {
        LogicalNode::Actor { class, actor_id }
            if collapsed.contains(&**class) && !kept.contains(&**actor_id) =>
        {
            format!("class:{class}")
        }
        other => other.key(),
    }
}

fn logical(view: &LogicalView, params: &SummaryParams, limits: &SummaryLimits) -> Value {
    let classes = view.classes();
    let total_actors: usize = classes.values().map(|a| a.len()).sum();
    // Calls into and out of each actor: who is busiest, when a class is expanded.
    let mut traffic: HashMap<&str, u64> = HashMap::new();
    for e in &view.call_edges {
        for node in [&e.from, &e.to] {
            if let LogicalNode::Actor { actor_id, .. } = node {
                *traffic.entry(&**actor_id).or_default() += e.count;
            }
        }
    }
    let mut collapsed: HashSet<&str> = HashSet::new();
    let mut kept: HashSet<&str> = HashSet::new();
    if total_actors > limits.actor_nodes {
        collapsed.extend(classes.keys().map(String::as_str));
        if let Some(class) = params.expand.as_deref() {
            if let Some(actors) = classes.get(class) {
                let mut busiest: Vec<&str> = actors.iter().map(String::as_str).collect();
                busiest.sort_by_key(|a| std::cmp::Reverse(traffic.get(a).copied().unwrap_or(0)));
                kept.extend(busiest.into_iter().take(limits.actor_nodes));
                if actors.len() <= limits.actor_nodes {
                    collapsed.remove(class);
                }
            }
        }
    }
    let show = |node: &LogicalNode| shown_node(node, &collapsed, &kept);

    // Call edges, summed under the shown nodes: (from, to, name, kind) to
    // (count, total, max).
    type Shown<'a> = (String, String, &'a str, CallKind);
    let mut calls: BTreeMap<Shown<'_>, (u64, u64, u64)> = BTreeMap::new();
    for e in &view.call_edges {
        let c = calls
            .entry((show(&e.from), show(&e.to), e.name.as_str(), e.kind))
            .or_default();
        c.0 += e.count;
        c.1 = c.1.saturating_add(e.total_nanos);
        c.2 = c.2.max(e.max_nanos);
    }
    let call_total = calls.len();
    let mut calls: Vec<_> = calls.into_iter().collect();
    calls.sort_by_key(|(_, (count, ..))| std::cmp::Reverse(*count));
    calls.truncate(limits.call_edges);

    // Data edges, likewise.
    #[derive(Default)]
    struct Data {
        count: u64,
        bytes: u64,
        same: u64,
        cross: u64,
        unknown: u64,
        consumers: Vec<String>,
        truncated: bool,
    }
    const CONSUMERS: usize = 16;
    let mut data: BTreeMap<(String, String), Data> = BTreeMap::new();
    for e in &view.data_edges {
        let d = data.entry((show(&e.from), show(&e.to))).or_default();
        d.count += e.count;
        d.bytes = d.bytes.saturating_add(e.total_bytes);
        d.same += e.same_node;
        d.cross += e.cross_node;
        d.unknown += e.unknown_locality;
        d.truncated |= e.consumers_truncated;
        for c in &e.consumers {
            if d.consumers.len() >= CONSUMERS {
                d.truncated = true;
                break;
            }
            if !d.consumers.contains(c) {
                d.consumers.push(c.clone());
            }
        }
    }
    let data_total = data.len();
    let mut data: Vec<_> = data.into_iter().collect();
    data.sort_by_key(|(_, d)| std::cmp::Reverse(d.count));
    data.truncate(limits.data_edges);

    // Nodes: every one a kept edge touches, the driver, then others up to a cap.
    #[derive(Default)]
    struct Node {
        json: Option<Value>,
        instances: usize,
        puts: u64,
        put_bytes: u64,
        labels: std::collections::BTreeSet<(String, String)>,
    }
    let mut nodes: BTreeMap<String, Node> = BTreeMap::new();
    for info in &view.nodes {
        let id = show(&info.node);
        let node = nodes.entry(id.clone()).or_default();
        node.puts += info.puts;
        node.put_bytes = node.put_bytes.saturating_add(info.put_bytes);
        node.labels.extend(info.labels.iter().cloned());
        if id.starts_with("class:") {
            node.instances += 1;
            if let LogicalNode::Actor { class, .. } = &info.node {
                node.json.get_or_insert_with(|| {
                    json!({"id": id, "kind": "class", "name": class.to_string(),
                           "class": class.to_string(), "actor_id": null})
                });
            }
        } else {
            node.json.get_or_insert_with(|| node_json(&info.node));
        }
    }
    let mut wanted: HashSet<String> = HashSet::from(["driver".to_owned()]);
    for ((from, to, ..), _) in &calls {
        wanted.insert(from.clone());
        wanted.insert(to.clone());
    }
    for ((from, to), _) in &data {
        wanted.insert(from.clone());
        wanted.insert(to.clone());
    }
    let node_total = nodes.len();
    let mut loose = 0;
    let nodes: Vec<Value> = nodes
        .into_iter()
        .filter(|(id, _)| {
            wanted.contains(id) || {
                loose += 1;
                loose <= limits.loose_nodes
            }
        })
        .filter_map(|(_, n)| {
            let mut json = n.json?;
            json["puts"] = json!(n.puts);
            json["put_bytes"] = json!(n.put_bytes);
            json["labels"] = json!(n.labels.into_iter().take(32).collect::<Vec<_>>());
            if json["kind"] == "class" {
                json["instances"] = json!(n.instances);
                json["name"] = json!(format!(
                    "{} ×{}",
                    json["class"].as_str().unwrap_or("?"),
                    n.instances
                ));
            }
            Some(json)
        })
        .collect();
    let shown_nodes = nodes.len();

    let classes_json: Vec<Value> = classes
        .iter()
        .map(|(class, actors)| {
            let listed: Vec<&String> = actors
                .iter()
                .filter(|a| !collapsed.contains(class.as_str()) || kept.contains(a.as_str()))
                .collect();
            json!({
                "id": class,
                "class": class,
                "instances": actors.len(),
                "collapsed": collapsed.contains(class.as_str()),
                "actors": listed,
            })
        })
        .collect();
    json!({
        "nodes": nodes,
        "classes": classes_json,
        "call_edges": calls.into_iter().map(|((from, to, name, kind), (count, total, max))| json!({
            "id": format!("{from}|{to}|{name}|{}", kind.as_str()),
            "from": from, "to": to, "name": name, "kind": kind.as_str(),
            "count": count, "total_nanos": total,
            "mean_nanos": total.checked_div(count).unwrap_or(0), "max_nanos": max,
        })).collect::<Vec<_>>(),
        "data_edges": data.into_iter().map(|((from, to), d)| json!({
            "id": format!("{from}|{to}"),
            "from": from, "to": to, "count": d.count, "total_bytes": d.bytes,
            "same_node": d.same, "cross_node": d.cross, "unknown_locality": d.unknown,
            "consumers": d.consumers, "consumers_truncated": d.truncated,
        })).collect::<Vec<_>>(),
        "summary": {
            "actors": total_actors,
            "collapsed_classes": collapsed.len(),
            "expanded": params.expand,
            "omitted": {
                "call_edges": call_total.saturating_sub(limits.call_edges),
                "data_edges": data_total.saturating_sub(limits.data_edges),
                "nodes": node_total - shown_nodes,
            },
        },
    })
}

/// A node as the logical export writes it.
fn node_json(node: &LogicalNode) -> Value {
    let (kind, class, actor_id) = match node {
        LogicalNode::Driver => ("driver", None, None),
        LogicalNode::Function(_) => ("function", None, None),
        LogicalNode::Actor { class, actor_id } => {
            ("actor", Some(class.to_string()), Some(actor_id.to_string()))
        }
        LogicalNode::Unknown => ("unknown", None, None),
    };
    json!({"id": node.key(), "kind": kind, "name": node.to_string(), "class": class, "actor_id": actor_id})
}

// ===== physical =====

fn physical(mut view: Value, limits: &SummaryLimits) -> Value {
    let mut omitted_actors = 0usize;
    let mut omitted_running = 0usize;
    for node in view["nodes"].as_array_mut().into_iter().flatten() {
        node["id"] = node["node_id"].clone();
        for worker in node["workers"].as_array_mut().into_iter().flatten() {
            worker["id"] = worker["worker_id"].clone();
            let mut classes: BTreeMap<String, usize> = BTreeMap::new();
            let mut actors_total = 0;
            if let Some(actors) = worker["actors"].as_array_mut() {
                for a in actors.iter() {
                    *classes
                        .entry(a["class"].as_str().unwrap_or("?").to_owned())
                        .or_default() += 1;
                }
                // The busiest first (CPU time, then running time), so the
                // ones listed are the ones to look at.
                let busy = |a: &Value| {
                    (
                        a["cpu_ms"].as_f64().unwrap_or(0.0),
                        a["running_ms"].as_f64().unwrap_or(0.0),
                    )
                };
                actors.sort_by(|a, b| {
                    let (a, b) = (busy(a), busy(b));
                    b.0.total_cmp(&a.0).then(b.1.total_cmp(&a.1))
                });
                actors_total = actors.len();
                omitted_actors += actors.len().saturating_sub(limits.actors_per_worker);
                actors.truncate(limits.actors_per_worker);
            }
            worker["actors_total"] = json!(actors_total);
            worker["actor_classes"] = json!(classes);
            let mut running_total = 0;
            if let Some(running) = worker["running"].as_array_mut() {
                running_total = running.len();
                omitted_running += running.len().saturating_sub(limits.actors_per_worker);
                running.truncate(limits.actors_per_worker);
            }
            worker["running_total"] = json!(running_total);
            if let Some(samples) = worker["samples"].as_array_mut() {
                let extra = samples.len().saturating_sub(limits.samples);
                samples.drain(..extra);
            }
        }
        for (i, bundle) in node["bundles"]
            .as_array_mut()
            .into_iter()
            .flatten()
            .enumerate()
        {
            bundle["id"] = json!(format!(
                "{}#{}",
                bundle["group_id"].as_str().unwrap_or("?"),
                bundle["bundle"].as_u64().unwrap_or(i as u64)
            ));
        }
    }
    // The busiest workers over all nodes; each node says how many it has.
    let mut weights: Vec<(usize, usize, u64)> = Vec::new();
    for (n, node) in view["nodes"].as_array().into_iter().flatten().enumerate() {
        for (w, worker) in node["workers"].as_array().into_iter().flatten().enumerate() {
            let weight = worker["actors_total"].as_u64().unwrap_or(0)
                + worker["running_total"].as_u64().unwrap_or(0);
            weights.push((n, w, weight));
        }
    }
    weights.sort_by_key(|&(n, w, weight)| (std::cmp::Reverse(weight), n, w));
    let omitted_workers = weights.len().saturating_sub(limits.workers);
    let listed: HashSet<(usize, usize)> = weights
        .into_iter()
        .take(limits.workers)
        .map(|(n, w, _)| (n, w))
        .collect();
    for (n, node) in view["nodes"]
        .as_array_mut()
        .into_iter()
        .flatten()
        .enumerate()
    {
        if let Some(workers) = node["workers"].as_array_mut() {
            let total = workers.len();
            let mut w = 0;
            workers.retain(|_| {
                w += 1;
                listed.contains(&(n, w - 1))
            });
            node["workers_total"] = json!(total);
        }
    }
    view["summary"] = json!({"omitted": {
        "actors": omitted_actors, "running": omitted_running, "workers": omitted_workers,
    }});
    view
}

// ===== stack =====

fn stack(mut view: Value, limits: &SummaryLimits) -> Value {
    let in_cycle: HashSet<String> = view["deadlocks"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|d| d["cycle"].as_array().into_iter().flatten())
        .filter_map(|t| t["task_id"].as_str().map(str::to_owned))
        .collect();
    for (i, d) in view["deadlocks"]
        .as_array_mut()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let ids: Vec<&str> = d["cycle"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| t["task_id"].as_str())
            .collect();
        let id = if ids.is_empty() {
            format!("deadlock-{i}")
        } else {
            ids.join(">")
        };
        d["id"] = json!(id);
    }
    let mut omitted = 0;
    if let Some(tasks) = view["tasks"].as_array_mut() {
        for t in tasks.iter_mut() {
            t["id"] = t["task_id"].clone();
        }
        // Deadlocked first, then blocked, then the oldest.
        tasks.sort_by_key(|t| {
            let id = t["task_id"].as_str().unwrap_or("");
            let blocked = t["waits_on"].as_array().is_some_and(|w| !w.is_empty());
            (
                !in_cycle.contains(id),
                !blocked,
                t["started_nanos"].as_u64().unwrap_or(0),
            )
        });
        omitted = tasks.len().saturating_sub(limits.stacks);
        tasks.truncate(limits.stacks);
    }
    view["summary"] = json!({"omitted": {"tasks": omitted}});
    view
}

// ===== deltas =====

/// The key of an array item for [`diff`]: its `key` if it has one (flow
/// events, whose `id` pairs two events), else its `id`.
fn item_key(item: &Value) -> Option<String> {
    // As the page's `itemKey`: a null `key` or `id` is none.
    let present = |name| item.get(name).filter(|v| !v.is_null());
    let key = present("key").or_else(|| present("id"))?;
    Some(match key {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    })
}

/// What changed from `old` to `new`, two summaries of one view: for each
/// array of keyed items, the keys removed and the items added or changed;
/// for every other top-level field, its new value if it changed. `None`
/// when nothing changed.
///
/// The delta is `{"arrays": {NAME: {"remove": [KEY], "upsert": [ITEM]}},
/// "fields": {NAME: VALUE}}` (a field removed is sent as `null`), or
/// `{"replace": NEW}` when `new` is not an object or a field of it became
/// `null`; [`patch`] applies it.
pub fn diff(old: &Value, new: &Value) -> Option<Value> {
    let replace = || json!({"replace": new});
    let (Some(old), Some(new)) = (old.as_object(), new.as_object()) else {
        return (old != new).then(replace);
    };
    let mut arrays = Map::new();
    let mut fields = Map::new();
    for (name, value) in new {
        let before = old.get(name);
        if before == Some(value) {
            continue;
        }
        match (before.and_then(Value::as_array), value.as_array()) {
            (Some(a), Some(b)) if keyed(a) && keyed(b) => {
                let old_items: HashMap<String, &Value> =
                    a.iter().filter_map(|i| Some((item_key(i)?, i))).collect();
                let new_keys: HashSet<String> = b.iter().filter_map(item_key).collect();
                let remove: Vec<&String> = old_items
                    .keys()
                    .filter(|k| !new_keys.contains(*k))
                    .collect();
                let upsert: Vec<&Value> = b
                    .iter()
                    .filter(|i| item_key(i).and_then(|k| old_items.get(&k).copied()) != Some(*i))
                    .collect();
                arrays.insert(name.clone(), json!({"remove": remove, "upsert": upsert}));
            }
            // A field's `null` says "removed" in a delta: a field that
            // becomes null is sent with the whole summary instead.
            _ if value.is_null() => return Some(replace()),
            _ => {
                fields.insert(name.clone(), value.clone());
            }
        }
    }
    for name in old.keys().filter(|k| !new.contains_key(*k)) {
        fields.insert(name.clone(), Value::Null);
    }
    (!arrays.is_empty() || !fields.is_empty()).then(|| json!({"arrays": arrays, "fields": fields}))
}

/// Whether every item of `items` has a key, and no two the same (an array
/// that is not keyed so is sent whole).
fn keyed(items: &[Value]) -> bool {
    let mut seen = HashSet::with_capacity(items.len());
    items
        .iter()
        .all(|i| item_key(i).is_some_and(|k| seen.insert(k)))
}

/// Applies a [`diff`] to `old`, giving the newer summary (array order: kept
/// items where they were, new ones at the end).
pub fn patch(old: &mut Value, delta: &Value) {
    if let Some(new) = delta.get("replace") {
        *old = new.clone();
        return;
    }
    let Some(target) = old.as_object_mut() else {
        return;
    };
    for (name, value) in delta["fields"].as_object().into_iter().flatten() {
        if value.is_null() {
            target.remove(name);
        } else {
            target.insert(name.clone(), value.clone());
        }
    }
    for (name, change) in delta["arrays"].as_object().into_iter().flatten() {
        let items = target
            .entry(name.clone())
            .or_insert_with(|| Value::Array(Vec::new()));
        let Some(items) = items.as_array_mut() else {
            continue;
        };
        let removed: HashSet<&str> = change["remove"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        items.retain(|i| item_key(i).is_none_or(|k| !removed.contains(k.as_str())));
        let mut at: HashMap<String, usize> = items
            .iter()
            .enumerate()
            .filter_map(|(n, i)| Some((item_key(i)?, n)))
            .collect();
        for item in change["upsert"].as_array().into_iter().flatten() {
            match item_key(item).and_then(|k| at.get(&k).copied()) {
                Some(n) => items[n] = item.clone(),
                None => {
                    if let Some(k) = item_key(item) {
                        at.insert(k, items.len());
                    }
                    items.push(item.clone());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
