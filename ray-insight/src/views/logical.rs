//! The logical view: who calls whom, and which data flows where.
//!
//! Nodes are the driver, remote functions (by name) and actor instances (by
//! id, grouped by class). Call edges aggregate finished calls (count, total,
//! mean and max duration); data edges aggregate `object.get`s from the
//! object's producer to its consumer (count, bytes, same-node vs cross-node,
//! the distinct consumer tasks up to a cap). Aggregates are keyed by label set
//! as well, so a label filter can pick them apart later.

use std::collections::{BTreeMap, BTreeSet};

use hashbrown::HashMap;
use std::fmt::Write as _;

use serde_json::{json, Value};

use super::model::{Id, IdKey, LabelSetId, LabelSets, LogicalNode};

/// The most distinct label pairs a logical node lists.
const MAX_NODE_LABELS: usize = 32;

/// The class an actor is shown under while no record has named it.
pub(crate) const UNKNOWN_CLASS: &str = "?";

/// What kind of call an edge (or a task) is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CallKind {
    /// A remote function call (`task.run`).
    Task,
    /// An actor method call (`actor.call`).
    ActorCall,
    /// An actor creation (`actor.create`).
    ActorCreate,
}

impl CallKind {
    /// `task`, `actor_call` or `actor_create`.
    pub fn as_str(self) -> &'static str {
        match self {
            CallKind::Task => "task",
            CallKind::ActorCall => "actor_call",
            CallKind::ActorCreate => "actor_create",
        }
    }
}

/// Where a consumer read an object from, relative to where it was produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Locality {
    SameNode,
    CrossNode,
    Unknown,
}

/// What a call edge is keyed by: caller, callee, name, kind and labels.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct CallKey {
    pub(crate) from: LogicalNode,
    pub(crate) to: LogicalNode,
    pub(crate) name: Id,
    pub(crate) kind: CallKind,
    pub(crate) labels: LabelSetId,
}

#[derive(Debug, Clone, Copy, Default)]
struct CallStats {
    count: u64,
    failed: u64,
    total_nanos: u64,
    max_nanos: u64,
    queued: u64,
    running: u64,
}

/// A call submitted and not finished (from the engine's live tasks),
/// counted on its edge when the view is built: hung and queued calls show
/// while they hang.
pub(crate) struct LiveCall {
    pub(crate) from: LogicalNode,
    pub(crate) to: LogicalNode,
    pub(crate) name: Id,
    pub(crate) kind: CallKind,
    pub(crate) labels: LabelSetId,
    /// Started (running or blocked), or still queued.
    pub(crate) started: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct DataKey {
    from: LogicalNode,
    to: LogicalNode,
    labels: LabelSetId,
}

#[derive(Debug, Clone, Default)]
struct DataStats {
    count: u64,
    total_bytes: u64,
    same_node: u64,
    cross_node: u64,
    unknown_locality: u64,
    consumers: Vec<IdKey>,
    consumers_truncated: bool,
}

#[derive(Debug, Clone, Copy, Default)]
struct PutStats {
    count: u64,
    bytes: u64,
}

/// The logical view's aggregates (bounded: at most `max_edges` call edges,
/// `max_edges` data edges, `max_edges` put counters, and `max_consumers`
/// consumer ids per data edge).
#[derive(Debug)]
pub(crate) struct LogicalAgg {
    calls: HashMap<CallKey, CallStats>,
    data: HashMap<DataKey, DataStats>,
    puts: HashMap<(LogicalNode, LabelSetId), PutStats>,
    consumer_entries: usize,
    max_edges: usize,
    max_consumers: usize,
}

impl LogicalAgg {
    pub(crate) fn new(max_edges: usize, max_consumers: usize) -> Self {
        Self {
            calls: HashMap::new(),
            data: HashMap::new(),
            puts: HashMap::new(),
            consumer_entries: 0,
            max_edges,
            max_consumers,
        }
    }

    /// Counts one finished call; `false` when a new edge was needed and the
    /// table is full.
    pub(crate) fn on_call(&mut self, key: CallKey, nanos: u64, failed: bool) -> bool {
        let full = self.calls.len() >= self.max_edges;
        let stats = match self.calls.get_mut(&key) {
            Some(stats) => stats,
            None if full => return false,
            None => self.calls.entry(key).or_default(),
        };
        stats.count += 1;
        stats.failed += u64::from(failed);
        stats.total_nanos = stats.total_nanos.saturating_add(nanos);
        stats.max_nanos = stats.max_nanos.max(nanos);
        true
    }

    /// Counts one `object.put` by `node`.
    pub(crate) fn on_put(&mut self, node: LogicalNode, labels: LabelSetId, bytes: u64) -> bool {
        let full = self.puts.len() >= self.max_edges;
        let stats = match self.puts.get_mut(&(node.clone(), labels)) {
            Some(stats) => stats,
            None if full => return false,
            None => self.puts.entry((node, labels)).or_default(),
        };
        stats.count += 1;
        stats.bytes = stats.bytes.saturating_add(bytes);
        true
    }

    /// Counts one `object.get` of an object produced by `from`, read by task
    /// `consumer` (or the driver) running as `to`.
    pub(crate) fn on_get(
        &mut self,
        from: LogicalNode,
        to: LogicalNode,
        consumer: &IdKey,
        labels: LabelSetId,
        bytes: u64,
        locality: Locality,
    ) -> bool {
        let key = DataKey { from, to, labels };
        let full = self.data.len() >= self.max_edges;
        let stats = match self.data.get_mut(&key) {
            Some(stats) => stats,
            None if full => return false,
            None => self.data.entry(key).or_default(),
        };
        stats.count += 1;
        stats.total_bytes = stats.total_bytes.saturating_add(bytes);
        match locality {
            Locality::SameNode => stats.same_node += 1,
            Locality::CrossNode => stats.cross_node += 1,
            Locality::Unknown => stats.unknown_locality += 1,
        }
        if !stats.consumers.iter().any(|c| c == consumer) {
            if stats.consumers.len() < self.max_consumers {
                stats.consumers.push(consumer.clone());
                self.consumer_entries += 1;
            } else {
                stats.consumers_truncated = true;
            }
        }
        true
    }

    /// Entries held: edges, put counters and consumer ids.
    pub(crate) fn entries(&self) -> usize {
        self.calls.len() + self.data.len() + self.puts.len() + self.consumer_entries
    }

    /// The view over the label sets `keep` accepts; `actors` adds actor
    /// instances known to exist even if no edge touches them yet.
    ///
    /// Nodes are interned once and sorted once; aggregates merge under
    /// their nodes' ranks (hashing integers, not comparing strings), which
    /// keeps a 65,536-edge graph fast to build.
    pub(crate) fn build(
        &self,
        keep: &dyn Fn(LabelSetId) -> bool,
        actors: impl Iterator<Item = LogicalNode>,
        live: impl Iterator<Item = LiveCall>,
        label_sets: &LabelSets,
    ) -> LogicalView {
        let live: Vec<LiveCall> = live.filter(|c| keep(c.labels)).collect();
        // An actor can be named before its class is known (a caller's records
        // may reach the collector before the callee's `actor.create`), so
        // one instance can sit under class `?` in some aggregates and under
        // its real class in others: every node is resolved to the class it
        // is known by anywhere, and aggregates merge under that node.
        let actors: Vec<LogicalNode> = actors.collect();
        fn learn<'a>(known: &mut hashbrown::HashMap<&'a Id, &'a Id>, node: &'a LogicalNode) {
            if let LogicalNode::Actor { class, actor_id } = node {
                if &**class != UNKNOWN_CLASS {
                    known.insert(actor_id, class);
                }
            }
        }
        let mut known: hashbrown::HashMap<&Id, &Id> = hashbrown::HashMap::new();
        for k in self.calls.keys() {
            learn(&mut known, &k.from);
            learn(&mut known, &k.to);
        }
        for k in self.data.keys() {
            learn(&mut known, &k.from);
            learn(&mut known, &k.to);
        }
        for (node, _) in self.puts.keys() {
            learn(&mut known, node);
        }
        for node in &actors {
            learn(&mut known, node);
        }
        for c in &live {
            learn(&mut known, &c.from);
            learn(&mut known, &c.to);
        }
        let resolve = |node: &LogicalNode| match node {
            LogicalNode::Actor { class, actor_id } if &**class == UNKNOWN_CLASS => {
                match known.get(actor_id) {
                    Some(&class) => LogicalNode::Actor {
                        class: class.clone(),
                        actor_id: actor_id.clone(),
                    },
                    None => node.clone(),
                }
            }
            other => other.clone(),
        };

        // Intern every node, then rank them in their sorted order.
        let mut index: hashbrown::HashMap<LogicalNode, u32> = hashbrown::HashMap::new();
        let mut nodes: Vec<LogicalNode> = Vec::new();
        let mut intern = |node: LogicalNode| -> u32 {
            *index.entry(node).or_insert_with_key(|node| {
                nodes.push(node.clone());
                (nodes.len() - 1) as u32
            })
        };
        intern(LogicalNode::Driver);
        let calls_in: Vec<(u32, u32, &CallKey, &CallStats)> = self
            .calls
            .iter()
            .filter(|(k, _)| keep(k.labels))
            .map(|(k, s)| (intern(resolve(&k.from)), intern(resolve(&k.to)), k, s))
            .collect();
        let data_in: Vec<(u32, u32, &DataStats)> = self
            .data
            .iter()
            .filter(|(k, _)| keep(k.labels))
            .map(|(k, s)| (intern(resolve(&k.from)), intern(resolve(&k.to)), s))
            .collect();
        let actors_in: Vec<u32> = actors.iter().map(|a| intern(resolve(a))).collect();
        let live_in: Vec<(u32, u32, &LiveCall)> = live
            .iter()
            .map(|c| (intern(resolve(&c.from)), intern(resolve(&c.to)), c))
            .collect();
        let puts_in: Vec<(u32, LabelSetId, &PutStats)> = self
            .puts
            .iter()
            .filter(|((_, labels), _)| keep(*labels))
            .map(|((node, labels), s)| (intern(resolve(node)), *labels, s))
            .collect();
        let mut order: Vec<u32> = (0..nodes.len() as u32).collect();
        order.sort_unstable_by(|&a, &b| nodes[a as usize].cmp(&nodes[b as usize]));
        let mut rank = vec![0u32; nodes.len()];
        for (r, &i) in order.iter().enumerate() {
            rank[i as usize] = r as u32;
        }

        // Call edges merged over label sets, under ranked nodes.
        let mut ran_under: Vec<BTreeSet<LabelSetId>> = vec![BTreeSet::new(); nodes.len()];
        let mut touched = vec![false; nodes.len()];
        touched[rank[0] as usize] = true; // the driver
        let mut calls: hashbrown::HashMap<(u32, u32, &Id, CallKind), CallStats> =
            hashbrown::HashMap::new();
        for (from, to, key, stats) in calls_in {
            let (from, to) = (rank[from as usize], rank[to as usize]);
            touched[from as usize] = true;
            touched[to as usize] = true;
            if key.labels != 0 {
                ran_under[to as usize].insert(key.labels);
            }
            let merged = calls.entry((from, to, &key.name, key.kind)).or_default();
            merged.count = merged.count.saturating_add(stats.count);
            merged.failed = merged.failed.saturating_add(stats.failed);
            merged.total_nanos = merged.total_nanos.saturating_add(stats.total_nanos);
            merged.max_nanos = merged.max_nanos.max(stats.max_nanos);
        }
        for (from, to, c) in live_in {
            let (from, to) = (rank[from as usize], rank[to as usize]);
            touched[from as usize] = true;
            touched[to as usize] = true;
            if c.labels != 0 {
                ran_under[to as usize].insert(c.labels);
            }
            let merged = calls.entry((from, to, &c.name, c.kind)).or_default();
            if c.started {
                merged.running = merged.running.saturating_add(1);
            } else {
                merged.queued = merged.queued.saturating_add(1);
            }
        }
        let mut data: hashbrown::HashMap<(u32, u32), DataStats> = hashbrown::HashMap::new();
        for (from, to, stats) in data_in {
            let (from, to) = (rank[from as usize], rank[to as usize]);
            touched[from as usize] = true;
            touched[to as usize] = true;
            let merged = data.entry((from, to)).or_default();
            merged.count += stats.count;
            merged.total_bytes = merged.total_bytes.saturating_add(stats.total_bytes);
            merged.same_node += stats.same_node;
            merged.cross_node += stats.cross_node;
            merged.unknown_locality += stats.unknown_locality;
            merged.consumers_truncated |= stats.consumers_truncated;
            merged.consumers.extend(stats.consumers.iter().cloned());
        }
        for a in actors_in {
            touched[rank[a as usize] as usize] = true;
        }
        let mut puts = vec![(0u64, 0u64); nodes.len()];
        for (node, labels, stats) in puts_in {
            let r = rank[node as usize] as usize;
            touched[r] = true;
            if labels != 0 {
                ran_under[r].insert(labels);
            }
            puts[r].0 += stats.count;
            puts[r].1 = puts[r].1.saturating_add(stats.bytes);
        }

        let by_rank = |r: u32| nodes[order[r as usize] as usize].clone();
        let mut calls: Vec<_> = calls.into_iter().collect();
        calls.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let mut data: Vec<_> = data.into_iter().collect();
        data.sort_unstable_by_key(|(key, _)| *key);
        LogicalView {
            nodes: (0..nodes.len())
                .filter(|&r| touched[r])
                .map(|r| {
                    let pairs: BTreeSet<(String, String)> = ran_under[r]
                        .iter()
                        .flat_map(|&s| label_sets.pairs(s))
                        .collect();
                    LogicalNodeInfo {
                        node: by_rank(r as u32),
                        puts: puts[r].0,
                        put_bytes: puts[r].1,
                        labels: pairs.into_iter().take(MAX_NODE_LABELS).collect(),
                    }
                })
                .collect(),
            call_edges: calls
                .into_iter()
                .map(|((from, to, name, kind), s)| CallEdge {
                    from: by_rank(from),
                    to: by_rank(to),
                    name: name.to_string(),
                    kind,
                    count: s.count,
                    failed: s.failed,
                    total_nanos: s.total_nanos,
                    max_nanos: s.max_nanos,
                    running: s.running,
                    queued: s.queued,
                })
                .collect(),
            data_edges: data
                .into_iter()
                .map(|((from, to), s)| {
                    let mut consumers: Vec<String> =
                        s.consumers.iter().map(|c| c.task().to_string()).collect();
                    consumers.sort_unstable();
                    consumers.dedup();
                    DataEdge {
                        from: by_rank(from),
                        to: by_rank(to),
                        count: s.count,
                        total_bytes: s.total_bytes,
                        same_node: s.same_node,
                        cross_node: s.cross_node,
                        unknown_locality: s.unknown_locality,
                        consumers,
                        consumers_truncated: s.consumers_truncated,
                    }
                })
                .collect(),
        }
    }
}

/// One node of the logical graph, with the data it put.
#[derive(Debug, Clone, PartialEq)]
pub struct LogicalNodeInfo {
    /// The driver, a function or an actor instance.
    pub node: LogicalNode,
    /// How many objects it put (`object.put`).
    pub puts: u64,
    /// How many bytes it put.
    pub put_bytes: u64,
    /// The context labels its calls ran under (and its puts), distinct and
    /// sorted, at most 32 pairs.
    pub labels: Vec<(String, String)>,
}

/// Finished calls from one caller to one callee (function, or actor method).
#[derive(Debug, Clone, PartialEq)]
pub struct CallEdge {
    /// The calling node (the caller task's node, or the driver).
    pub from: LogicalNode,
    /// The called node.
    pub to: LogicalNode,
    /// The function name, or the actor method name (`new` for creations).
    pub name: String,
    /// Task, actor call or actor creation.
    pub kind: CallKind,
    /// Finished runs, failed ones included: a call retried (after an error
    /// it retries on, or a lost worker) counts each run.
    pub count: u64,
    /// Of those, the runs that failed: an error or a panic, a worker or
    /// node that died under it, or a call given up for good.
    pub failed: u64,
    /// Sum of their span durations, in nanoseconds.
    pub total_nanos: u64,
    /// Calls started and not finished (running or blocked) when the view
    /// was built.
    pub running: u64,
    /// Calls submitted and not started (queued) when the view was built.
    pub queued: u64,
    /// The longest one, in nanoseconds.
    pub max_nanos: u64,
}

impl CallEdge {
    /// Mean duration in nanoseconds (0 for no calls).
    pub fn mean_nanos(&self) -> u64 {
        self.total_nanos.checked_div(self.count).unwrap_or(0)
    }
}

/// Objects produced by one node and read by another.
#[derive(Debug, Clone, PartialEq)]
pub struct DataEdge {
    /// The producer (who put the object), or [`LogicalNode::Unknown`].
    pub from: LogicalNode,
    /// The consumer (who got it).
    pub to: LogicalNode,
    /// Gets counted.
    pub count: u64,
    /// Bytes read, summed over gets.
    pub total_bytes: u64,
    /// Gets on the producer's node.
    pub same_node: u64,
    /// Gets from another node.
    pub cross_node: u64,
    /// Gets where either node was not known.
    pub unknown_locality: u64,
    /// Every distinct consumer task id (`driver` for the driver), sorted,
    /// up to the per-edge cap.
    pub consumers: Vec<String>,
    /// Whether more consumers were seen than the cap keeps.
    pub consumers_truncated: bool,
}

/// The logical graph: nodes, call edges and data edges.
#[derive(Debug, Clone, PartialEq)]
pub struct LogicalView {
    /// Every node that appears in an edge, put data, or is a known actor; the
    /// driver always.
    pub nodes: Vec<LogicalNodeInfo>,
    /// Call edges, sorted by (from, to, name).
    pub call_edges: Vec<CallEdge>,
    /// Data edges, sorted by (from, to).
    pub data_edges: Vec<DataEdge>,
}

fn node_json(info: &LogicalNodeInfo) -> Value {
    let (kind, name, class, actor_id) = match &info.node {
        LogicalNode::Driver => ("driver", "driver".to_owned(), None, None),
        LogicalNode::Function(name) => ("function", name.to_string(), None, None),
        LogicalNode::Actor { class, actor_id } => (
            "actor",
            info.node.to_string(),
            Some(class.to_string()),
            Some(actor_id.to_string()),
        ),
        LogicalNode::Unknown => ("unknown", "unknown".to_owned(), None, None),
    };
    json!({
        "id": info.node.key(),
        "kind": kind,
        "name": name,
        "class": class,
        "actor_id": actor_id,
        "puts": info.puts,
        "put_bytes": info.put_bytes,
        "labels": info.labels,
    })
}

fn dot_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

impl LogicalView {
    /// Actor classes with the ids of their instances, sorted.
    pub fn classes(&self) -> BTreeMap<String, BTreeSet<String>> {
        let mut classes: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for info in &self.nodes {
            if let LogicalNode::Actor { class, actor_id } = &info.node {
                classes
                    .entry(class.to_string())
                    .or_default()
                    .insert(actor_id.to_string());
            }
        }
        classes
    }

    /// The view as JSON: `nodes`, `classes`, `call_edges`, `data_edges`.
    pub fn to_json(&self) -> Value {
        json!({
            "nodes": self.nodes.iter().map(node_json).collect::<Vec<_>>(),
            "classes": self.classes().into_iter().map(|(class, actors)| json!({
                "class": class,
                "actors": actors.into_iter().collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "call_edges": self.call_edges.iter().map(|e| json!({
                "from": e.from.key(),
                "to": e.to.key(),
                "name": e.name,
                "kind": e.kind.as_str(),
                "count": e.count,
                "failed": e.failed,
                "running": e.running,
                "queued": e.queued,
                "total_nanos": e.total_nanos,
                "mean_nanos": e.mean_nanos(),
                "max_nanos": e.max_nanos,
            })).collect::<Vec<_>>(),
            "data_edges": self.data_edges.iter().map(|e| json!({
                "from": e.from.key(),
                "to": e.to.key(),
                "count": e.count,
                "total_bytes": e.total_bytes,
                "same_node": e.same_node,
                "cross_node": e.cross_node,
                "unknown_locality": e.unknown_locality,
                "consumers": e.consumers,
                "consumers_truncated": e.consumers_truncated,
            })).collect::<Vec<_>>(),
        })
    }

    /// The view as Graphviz DOT: actor instances drawn inside one cluster per
    /// class, call edges solid (labelled `name ×count, mean`), data edges
    /// dashed (labelled `×gets, bytes`).
    pub fn to_dot(&self) -> String {
        let mut out =
            String::from("digraph logical {\n  rankdir=LR;\n  node [fontname=\"Helvetica\"];\n");
        for info in &self.nodes {
            let shape = match info.node {
                LogicalNode::Driver => "house",
                LogicalNode::Function(_) => "ellipse",
                LogicalNode::Actor { .. } => continue,
                LogicalNode::Unknown => "plaintext",
            };
            let _ = writeln!(
                out,
                "  {} [shape={shape}, label={}];",
                dot_quote(&info.node.key()),
                dot_quote(&info.node.to_string())
            );
        }
        for (i, (class, actors)) in self.classes().into_iter().enumerate() {
            let _ = writeln!(
                out,
                "  subgraph cluster_{i} {{\n    label={};",
                dot_quote(&class)
            );
            for actor in actors {
                let _ = writeln!(
                    out,
                    "    {} [shape=box, label={}];",
                    dot_quote(&format!("actor:{actor}")),
                    dot_quote(&actor)
                );
            }
            out.push_str("  }\n");
        }
        for e in &self.call_edges {
            let mut label = format!(
                "{} x{} mean {:.3}ms",
                e.name,
                e.count,
                e.mean_nanos() as f64 / 1e6
            );
            if e.failed > 0 {
                let _ = write!(label, ", {} failed", e.failed);
            }
            if e.running > 0 {
                let _ = write!(label, ", {} running", e.running);
            }
            if e.queued > 0 {
                let _ = write!(label, ", {} queued", e.queued);
            }
            let _ = writeln!(
                out,
                "  {} -> {} [label={}];",
                dot_quote(&e.from.key()),
                dot_quote(&e.to.key()),
                dot_quote(&label)
            );
        }
        for e in &self.data_edges {
            let label = format!("{} gets, {} B", e.count, e.total_bytes);
            let _ = writeln!(
                out,
                "  {} -> {} [style=dashed, label={}];",
                dot_quote(&e.from.key()),
                dot_quote(&e.to.key()),
                dot_quote(&label)
            );
        }
        out.push_str("}\n");
        out
    }
}
