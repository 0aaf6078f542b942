//! The physical view: nodes → workers → actors and running tasks, from the
//! `node_id` / `worker_id` fields on spans, with each process's resource use
//! over time from `resource.sample` events.
//!
//! # Resource samples
//!
//! A `resource.sample` event describes one process (its `worker_id`, else its
//! `pid`) on one node (`node_id`). Its per-process fields are
//!
//! - `cpu_percent` (CPU use, 100 = one core busy) and `rss_bytes` (resident
//!   memory): what the process **uses**;
//! - `cpu_used` / `cpu_total`, `gpu_used` / `gpu_total` and `memory_used` /
//!   `memory_total`: what its runtime's admitted tasks and actors
//!   **requested** (hold now) against the node's capacity.
//!
//! Each process keeps its latest values and a ring of its last
//! [`Limits::max_samples_per_process`](super::Limits::max_samples_per_process)
//! samples ([`PhysicalWorker::samples`]); a node sums its processes' latest
//! values into [`PhysicalNode::totals`]. Every other numeric field
//! (`gpu_count`, `gpu_util_percent`, `gpu_mem_used_bytes`,
//! `gpu_mem_total_bytes`, custom ones) is a node value: the latest is kept in
//! [`PhysicalNode::resources`]. Per-process values that are negative or not
//! finite are left out; a sample with no usable value at all is ignored.

use std::collections::{BTreeMap, VecDeque};

use std::sync::Arc;

use serde_json::{json, Value};

use super::model::{FifoMap, Id, IdKey, KeyMap, LabelSetId, LabelSets};
use super::stack::TaskRef;
use super::task::{LiveTask, TaskState};
use super::Limits;

/// A placed placement group: its strategy and the node of each bundle.
#[derive(Debug, Clone)]
pub(crate) struct GroupInfo {
    pub(crate) strategy: Option<Id>,
    pub(crate) bundle_nodes: Vec<Option<Id>>,
}

/// One bundle of a placement group, on the node that holds it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct PhysicalBundle {
    /// The group's id.
    pub group_id: String,
    /// The bundle's index in its group.
    pub bundle: usize,
    /// The group's strategy (`PACK`, `STRICT_SPREAD`, …; `?` when unknown).
    pub strategy: String,
}

/// What the engine knows of an actor's placement.
#[derive(Debug, Clone)]
pub(crate) struct ActorInfo {
    pub(crate) class: Option<Id>,
    pub(crate) node_id: Option<Id>,
    pub(crate) worker_id: Option<Id>,
    pub(crate) labels: LabelSetId,
    /// Only the labels its constructor set itself (`context` inside it):
    /// what every later call of the instance carries.
    pub(crate) ctor_labels: LabelSetId,
    /// What its finished runs (calls and constructor) took.
    pub(crate) usage: ActorUsage,
}

/// What an actor instance's finished runs took, summed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct ActorUsage {
    /// Runs finished: its calls, and its constructor.
    pub runs: u64,
    /// Their running time (wall time not spent waiting on other work), ns.
    pub running_nanos: u64,
    /// The CPU time their threads spent on them, ns; `None` when no run
    /// said (runs recorded through `tracing` rather than directly do not).
    pub cpu_nanos: Option<u64>,
}

impl ActorUsage {
    /// Adds one finished run.
    pub(crate) fn add(&mut self, running_nanos: u64, cpu_nanos: Option<u64>) {
        self.runs = self.runs.saturating_add(1);
        self.running_nanos = self.running_nanos.saturating_add(running_nanos);
        if let Some(cpu) = cpu_nanos {
            self.cpu_nanos = Some(self.cpu_nanos.unwrap_or(0).saturating_add(cpu));
        }
    }
}

/// What the cluster's control store said of a node (a `node.state` record,
/// which the head writes into each job's records when a node registers or
/// dies): a node that ran nothing still shows.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeRegistration {
    /// Whether it is alive (false once declared dead).
    pub alive: bool,
    /// Where its daemon listens.
    pub address: Option<String>,
    /// Why it was declared dead.
    pub death_cause: Option<String>,
    /// Its CPUs, GPUs and memory as registered (schedulable amounts).
    pub cpu_total: Option<f64>,
    /// Its GPUs as registered.
    pub gpu_total: Option<f64>,
    /// Its memory as registered, in bytes.
    pub memory_total: Option<f64>,
}

/// An actor placed on a node.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct PhysicalActor {
    /// The actor's id.
    pub actor_id: String,
    /// Its class (`?` when unknown).
    pub class: String,
    /// The context labels it was created under.
    pub labels: Vec<(String, String)>,
    /// What its finished runs took (calls, running and CPU time).
    pub usage: ActorUsage,
}

/// A worker process on a node.
#[derive(Debug, Clone, PartialEq)]
pub struct PhysicalWorker {
    /// The worker id (`unknown` when spans did not say).
    pub worker_id: String,
    /// Actors hosted by this worker.
    pub actors: Vec<PhysicalActor>,
    /// Tasks running or blocked on it now.
    pub running: Vec<TaskRef>,
    /// The context labels of its actors and running tasks, distinct and
    /// sorted (what the page colours a worker by).
    pub labels: Vec<(String, String)>,
    /// Its operating-system process id, when its samples carried one.
    pub pid: Option<u64>,
    /// Its latest CPU use in percent of one core (200: two cores busy).
    pub cpu_percent: Option<f64>,
    /// Its latest resident memory in bytes.
    pub rss_bytes: Option<u64>,
    /// The CPUs its admitted tasks and actors hold (requested), latest.
    pub cpu_used: Option<f64>,
    /// Its last resource samples, oldest first; empty for a process that
    /// sent none.
    pub samples: Vec<ResourcePoint>,
}

/// One resource sample of a process.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ResourcePoint {
    /// When it was taken, in nanoseconds since the recording's epoch.
    pub at_nanos: u64,
    /// CPU use in percent of one core.
    pub cpu_percent: Option<f64>,
    /// Resident memory in bytes.
    pub rss_bytes: Option<u64>,
    /// CPUs held by admitted work (requested) at that time.
    pub cpu_used: Option<f64>,
}

/// A node's resource use: its processes' latest samples summed, requested
/// against capacity, and the GPUs' latest readings.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeTotals {
    /// Processes of the node that sent samples.
    pub processes: usize,
    /// Their latest CPU use summed, in percent of one core.
    pub cpu_percent: f64,
    /// Their latest resident memory summed, in bytes.
    pub rss_bytes: u64,
    /// CPUs held by admitted tasks and actors (requested), summed.
    pub cpu_used: Option<f64>,
    /// The node's CPUs (the largest capacity any of its processes reported:
    /// a cluster driver reports none of the node's).
    pub cpu_total: Option<f64>,
    /// GPUs held by admitted work (requested), summed.
    pub gpu_used: Option<f64>,
    /// The node's GPUs as a schedulable resource.
    pub gpu_total: Option<f64>,
    /// Memory held by admitted work (requested), summed.
    pub memory_used: Option<f64>,
    /// The node's memory as a schedulable resource.
    pub memory_total: Option<f64>,
    /// GPU devices read on the node (`gpu_count`).
    pub gpu_count: Option<f64>,
    /// Their mean utilisation in percent (`gpu_util_percent`).
    pub gpu_util_percent: Option<f64>,
    /// Their memory in use, bytes (`gpu_mem_used_bytes`).
    pub gpu_mem_used_bytes: Option<f64>,
    /// Their memory in all, bytes (`gpu_mem_total_bytes`).
    pub gpu_mem_total_bytes: Option<f64>,
}

/// A node with its workers.
#[derive(Debug, Clone, PartialEq)]
pub struct PhysicalNode {
    /// The node id (`unknown` when spans did not say).
    pub node_id: String,
    /// Tasks running or blocked on this node now (all workers).
    pub running_tasks: usize,
    /// Its workers, sorted by id.
    pub workers: Vec<PhysicalWorker>,
    /// Latest node values of resource samples by name (GPU readings, custom
    /// values; see the module docs).
    pub resources: BTreeMap<String, f64>,
    /// What its processes use and requested (zero processes: no samples).
    pub totals: NodeTotals,
    /// Placement-group bundles reserved on it, sorted.
    pub bundles: Vec<PhysicalBundle>,
    /// What the control store said of it (`None`: nothing, as embedded).
    pub registration: Option<NodeRegistration>,
}

/// Every node registered with the cluster, or that the engine has seen a
/// running task, an actor or a sample on.
#[derive(Debug, Clone, PartialEq)]
pub struct PhysicalView {
    /// Nodes, sorted by id.
    pub nodes: Vec<PhysicalNode>,
}

const UNKNOWN: &str = "unknown";

/// A process's fields of one `resource.sample` (see the module docs).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct ProcessFields {
    pub(crate) pid: Option<u64>,
    cpu_percent: Option<f64>,
    rss_bytes: Option<u64>,
    cpu_used: Option<f64>,
    cpu_total: Option<f64>,
    gpu_used: Option<f64>,
    gpu_total: Option<f64>,
    memory_used: Option<f64>,
    memory_total: Option<f64>,
}

impl ProcessFields {
    /// No values yet, for the process `pid` (if known).
    pub(crate) fn for_pid(pid: Option<u64>) -> Self {
        Self {
            pid,
            ..Self::default()
        }
    }

    /// Takes `value` if `key` is a per-process field; returns whether it is
    /// one (a negative or non-finite value is then left out).
    pub(crate) fn take(&mut self, key: &str, value: f64) -> bool {
        let slot = match key {
            "cpu_percent" => &mut self.cpu_percent,
            "cpu_used" => &mut self.cpu_used,
            "cpu_total" => &mut self.cpu_total,
            "gpu_used" => &mut self.gpu_used,
            "gpu_total" => &mut self.gpu_total,
            "memory_used" => &mut self.memory_used,
            "memory_total" => &mut self.memory_total,
            "rss_bytes" => {
                if value.is_finite() && value >= 0.0 {
                    // Saturating: a float past u64::MAX becomes u64::MAX.
                    self.rss_bytes = Some(value as u64);
                }
                return true;
            }
            _ => return false,
        };
        if value.is_finite() && value >= 0.0 {
            *slot = Some(value);
        }
        true
    }

    /// Whether no per-process value was taken (the pid alone does not count).
    pub(crate) fn is_empty(&self) -> bool {
        *self
            == ProcessFields {
                pid: self.pid,
                ..ProcessFields::default()
            }
    }

    /// `self` with the values `newer` has replaced.
    fn merged(self, newer: ProcessFields) -> ProcessFields {
        ProcessFields {
            pid: newer.pid.or(self.pid),
            cpu_percent: newer.cpu_percent.or(self.cpu_percent),
            rss_bytes: newer.rss_bytes.or(self.rss_bytes),
            cpu_used: newer.cpu_used.or(self.cpu_used),
            cpu_total: newer.cpu_total.or(self.cpu_total),
            gpu_used: newer.gpu_used.or(self.gpu_used),
            gpu_total: newer.gpu_total.or(self.gpu_total),
            memory_used: newer.memory_used.or(self.memory_used),
            memory_total: newer.memory_total.or(self.memory_total),
        }
    }
}

/// One process's latest values and its ring of recent samples.
#[derive(Debug)]
struct ProcessSamples {
    latest: ProcessFields,
    ring: VecDeque<ResourcePoint>,
}

/// What one `resource.sample` evicted to make room.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Evicted {
    pub(crate) node: bool,
    pub(crate) process: bool,
}

/// The resource samples the engine keeps: latest node values per node, and
/// per (node, process) the latest values plus a bounded ring of samples.
#[derive(Debug)]
pub(crate) struct ResourceTable {
    nodes: FifoMap<Id, BTreeMap<String, f64>>,
    /// What the control store said of each node (`node.state`).
    registered: FifoMap<Id, NodeRegistration>,
    processes: FifoMap<(Id, Id), ProcessSamples>,
    values_per_node: usize,
    samples_per_process: usize,
    /// Samples held in every ring (kept in step with the rings).
    samples: usize,
}

impl ResourceTable {
    pub(crate) fn new(limits: &Limits) -> Self {
        Self {
            nodes: FifoMap::new(limits.max_resource_nodes),
            registered: FifoMap::new(limits.max_resource_nodes),
            processes: FifoMap::new(limits.max_resource_processes),
            values_per_node: limits.max_resources_per_node,
            samples_per_process: limits.max_samples_per_process,
            samples: 0,
        }
    }

    /// Entries held: nodes, registrations, processes, and the samples in
    /// their rings.
    pub(crate) fn entries(&self) -> usize {
        self.nodes.len() + self.registered.len() + self.processes.len() + self.samples
    }

    /// Keeps what the control store said of `node` (replacing what it said
    /// before); true if the oldest node's registration was evicted for it.
    pub(crate) fn register(&mut self, node: Id, registration: NodeRegistration) -> bool {
        if let Some(existing) = self.registered.get_mut(&node) {
            *existing = registration;
            return false;
        }
        self.registered.insert(node, registration)
    }

    /// Keeps one sample taken `at`: `values` as the node's latest, and
    /// `fields` (unless empty) as process `process` (`unknown` when `None`).
    pub(crate) fn record(
        &mut self,
        node: Id,
        process: Option<Id>,
        fields: ProcessFields,
        values: &[(&str, f64)],
        at: u64,
    ) -> Evicted {
        let mut evicted = Evicted::default();
        if !values.is_empty() {
            evicted.node = self.record_values(&node, values);
        }
        if !fields.is_empty() {
            let process = process.unwrap_or_else(|| Arc::from(UNKNOWN));
            evicted.process = self.record_process((node, process), fields, at);
        }
        evicted
    }

    fn record_values(&mut self, node: &Id, values: &[(&str, f64)]) -> bool {
        let cap = self.values_per_node;
        if let Some(existing) = self.nodes.get_mut(node) {
            for &(key, value) in values {
                if existing.len() < cap || existing.contains_key(key) {
                    existing.insert(key.to_owned(), value);
                }
            }
            return false;
        }
        let fresh = values
            .iter()
            .take(cap)
            .map(|&(key, value)| (key.to_owned(), value))
            .collect();
        self.nodes.insert(node.clone(), fresh)
    }

    fn record_process(&mut self, key: (Id, Id), fields: ProcessFields, at: u64) -> bool {
        let point = ResourcePoint {
            at_nanos: at,
            cpu_percent: fields.cpu_percent,
            rss_bytes: fields.rss_bytes,
            cpu_used: fields.cpu_used,
        };
        let cap = self.samples_per_process;
        if let Some(process) = self.processes.get_mut(&key) {
            process.latest = process.latest.merged(fields);
            if cap > 0 {
                if process.ring.len() >= cap {
                    process.ring.pop_front();
                    self.samples -= 1;
                }
                process.ring.push_back(point);
                self.samples += 1;
            }
            return false;
        }
        let mut ring = VecDeque::with_capacity(cap.min(16));
        if cap > 0 {
            ring.push_back(point);
        }
        let added = ring.len();
        let evicted = self.processes.insert(
            key,
            ProcessSamples {
                latest: fields,
                ring,
            },
        );
        if evicted {
            // FifoMap does not say what it evicted: recount the rings.
            self.samples = self.processes.iter().map(|(_, p)| p.ring.len()).sum();
        } else {
            self.samples += added;
        }
        evicted
    }
}

/// The most distinct label pairs a worker lists.
const MAX_WORKER_LABELS: usize = 64;

/// Adds `pairs` to a worker's sorted, distinct labels, up to the cap.
fn add_labels(labels: &mut Vec<(String, String)>, pairs: &[(String, String)]) {
    for pair in pairs {
        if let Err(at) = labels.binary_search(pair) {
            if labels.len() < MAX_WORKER_LABELS {
                labels.insert(at, pair.clone());
            }
        }
    }
}

pub(crate) fn build(
    tasks: &KeyMap<IdKey, Box<LiveTask>>,
    actors: &FifoMap<Id, ActorInfo>,
    resources: &ResourceTable,
    groups: &FifoMap<Id, GroupInfo>,
    keep: &dyn Fn(LabelSetId) -> bool,
    label_sets: &LabelSets,
) -> PhysicalView {
    type Workers = BTreeMap<String, PhysicalWorker>;
    let mut nodes: BTreeMap<String, (usize, Workers)> = BTreeMap::new();
    fn worker<'a>(
        nodes: &'a mut BTreeMap<String, (usize, Workers)>,
        node: Option<&Id>,
        worker: Option<&Id>,
    ) -> (&'a mut usize, &'a mut PhysicalWorker) {
        let node = node.map_or(UNKNOWN, |n| &**n).to_owned();
        let worker_id = worker.map_or(UNKNOWN, |w| &**w).to_owned();
        let (count, workers) = nodes.entry(node).or_default();
        let w = workers
            .entry(worker_id.clone())
            .or_insert_with(|| PhysicalWorker {
                worker_id,
                actors: Vec::new(),
                running: Vec::new(),
                labels: Vec::new(),
                pid: None,
                cpu_percent: None,
                rss_bytes: None,
                cpu_used: None,
                samples: Vec::new(),
            });
        (count, w)
    }
    for (actor_id, info) in actors.iter() {
        if !keep(info.labels) {
            continue;
        }
        let (_, w) = worker(&mut nodes, info.node_id.as_ref(), info.worker_id.as_ref());
        let labels = label_sets.pairs(info.labels);
        add_labels(&mut w.labels, &labels);
        w.actors.push(PhysicalActor {
            actor_id: actor_id.to_string(),
            class: info.class.as_deref().unwrap_or("?").to_owned(),
            labels,
            usage: info.usage,
        });
    }
    for (id, task) in tasks {
        if task.state() == TaskState::Submitted || !keep(task.labels) {
            continue;
        }
        let (count, w) = worker(&mut nodes, task.node_id.as_ref(), task.worker_id.as_ref());
        *count += 1;
        add_labels(&mut w.labels, &label_sets.pairs(task.labels));
        w.running.push(TaskRef {
            task_id: id.task().to_string(),
            name: task.display_name().to_string(),
        });
    }
    // Resource samples are not labelled: sampled processes and nodes show in
    // filtered views too.
    let mut totals: BTreeMap<String, NodeTotals> = BTreeMap::new();
    for ((node, process), samples) in resources.processes.iter() {
        let latest = samples.latest;
        let (_, w) = worker(&mut nodes, Some(node), Some(process));
        w.pid = latest.pid;
        w.cpu_percent = latest.cpu_percent;
        w.rss_bytes = latest.rss_bytes;
        w.cpu_used = latest.cpu_used;
        w.samples = samples.ring.iter().copied().collect();
        let t = totals.entry(node.to_string()).or_default();
        t.processes += 1;
        t.cpu_percent += latest.cpu_percent.unwrap_or(0.0);
        t.rss_bytes = t.rss_bytes.saturating_add(latest.rss_bytes.unwrap_or(0));
        t.cpu_used = add(t.cpu_used, latest.cpu_used);
        t.gpu_used = add(t.gpu_used, latest.gpu_used);
        t.cpu_total = max(t.cpu_total, latest.cpu_total);
        t.gpu_total = max(t.gpu_total, latest.gpu_total);
        t.memory_used = add(t.memory_used, latest.memory_used);
        t.memory_total = max(t.memory_total, latest.memory_total);
    }
    // Every node with values or a registration shows, idle or not.
    let known = resources.nodes.iter().map(|(node, _)| node);
    for node in known.chain(resources.registered.iter().map(|(node, _)| node)) {
        nodes.entry(node.to_string()).or_default();
    }
    // Placement groups are not labelled either.
    let mut bundles: BTreeMap<String, Vec<PhysicalBundle>> = BTreeMap::new();
    for (group_id, group) in groups.iter() {
        for (bundle, node) in group.bundle_nodes.iter().enumerate() {
            let node = node.as_deref().unwrap_or(UNKNOWN).to_owned();
            nodes.entry(node.clone()).or_default();
            bundles.entry(node).or_default().push(PhysicalBundle {
                group_id: group_id.to_string(),
                bundle,
                strategy: group.strategy.as_deref().unwrap_or("?").to_owned(),
            });
        }
    }
    PhysicalView {
        nodes: nodes
            .into_iter()
            .map(|(node_id, (running_tasks, workers))| {
                let key: Id = Arc::from(node_id.as_str());
                let registration = resources.registered.get(&key).cloned();
                let resources = resources.nodes.get(&key).cloned().unwrap_or_default();
                let mut totals = totals.remove(&node_id).unwrap_or_default();
                let value = |key: &str| resources.get(key).copied();
                totals.gpu_count = value("gpu_count");
                totals.gpu_util_percent = value("gpu_util_percent");
                totals.gpu_mem_used_bytes = value("gpu_mem_used_bytes");
                totals.gpu_mem_total_bytes = value("gpu_mem_total_bytes");
                let mut node_bundles = bundles.remove(&node_id).unwrap_or_default();
                node_bundles.sort();
                if let Some(r) = &registration {
                    // The registered capacity is the node's own word.
                    totals.cpu_total = r.cpu_total.or(totals.cpu_total);
                    totals.gpu_total = r.gpu_total.or(totals.gpu_total);
                    totals.memory_total = r.memory_total.or(totals.memory_total);
                }
                PhysicalNode {
                    registration,
                    bundles: node_bundles,
                    node_id,
                    running_tasks,
                    workers: workers
                        .into_values()
                        .map(|mut w| {
                            w.actors.sort();
                            w.running.sort();
                            w
                        })
                        .collect(),
                    resources,
                    totals,
                }
            })
            .collect(),
    }
}

fn add(sum: Option<f64>, value: Option<f64>) -> Option<f64> {
    match (sum, value) {
        (Some(a), Some(b)) => Some(a + b),
        (a, b) => a.or(b),
    }
}

fn max(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

impl PhysicalView {
    /// The view as JSON: `nodes`, each with `alive`, `address` and
    /// `death_cause` (from its registration; `null` when none was recorded),
    /// `running_tasks`, `resources`,
    /// `totals` (the fields of [`NodeTotals`]; `null` where unknown) and
    /// `workers`, each with `actors` (with `runs`, `running_ms` and
    /// `cpu_ms`: what their finished runs took), `running`, its latest `pid`,
    /// `cpu_percent`, `rss_bytes` and `cpu_used`, and `samples`
    /// (`[{"t_ms", "cpu_percent", "rss_bytes", "cpu_used"}]`, oldest first,
    /// `t_ms` in milliseconds since the recording's epoch).
    pub fn to_json(&self) -> Value {
        json!({
            "nodes": self.nodes.iter().map(|n| json!({
                "node_id": n.node_id,
                "alive": n.registration.as_ref().map(|r| r.alive),
                "address": n.registration.as_ref().and_then(|r| r.address.clone()),
                "death_cause": n.registration.as_ref().and_then(|r| r.death_cause.clone()),
                "running_tasks": n.running_tasks,
                "resources": n.resources,
                "totals": totals_json(&n.totals),
                "bundles": n.bundles.iter().map(|b| json!({
                    "group_id": b.group_id, "bundle": b.bundle, "strategy": b.strategy,
                })).collect::<Vec<_>>(),
                "workers": n.workers.iter().map(|w| json!({
                    "worker_id": w.worker_id,
                    "actors": w.actors.iter().map(|a| json!({
                        "actor_id": a.actor_id, "class": a.class, "labels": a.labels,
                        "runs": a.usage.runs,
                        "running_ms": a.usage.running_nanos as f64 / 1e6,
                        "cpu_ms": a.usage.cpu_nanos.map(|c| c as f64 / 1e6),
                    })).collect::<Vec<_>>(),
                    "labels": w.labels,
                    "running": w.running.iter().map(|t| json!({
                        "task_id": t.task_id, "name": t.name,
                    })).collect::<Vec<_>>(),
                    "pid": w.pid,
                    "cpu_percent": w.cpu_percent,
                    "rss_bytes": w.rss_bytes,
                    "cpu_used": w.cpu_used,
                    "samples": w.samples.iter().map(|p| json!({
                        "t_ms": p.at_nanos as f64 / 1e6,
                        "cpu_percent": p.cpu_percent,
                        "rss_bytes": p.rss_bytes,
                        "cpu_used": p.cpu_used,
                    })).collect::<Vec<_>>(),
                })).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        })
    }
}

fn totals_json(t: &NodeTotals) -> Value {
    json!({
        "processes": t.processes,
        "cpu_percent": t.cpu_percent,
        "rss_bytes": t.rss_bytes,
        "cpu_used": t.cpu_used,
        "cpu_total": t.cpu_total,
        "gpu_used": t.gpu_used,
        "gpu_total": t.gpu_total,
        "memory_used": t.memory_used,
        "memory_total": t.memory_total,
        "gpu_count": t.gpu_count,
        "gpu_util_percent": t.gpu_util_percent,
        "gpu_mem_used_bytes": t.gpu_mem_used_bytes,
        "gpu_mem_total_bytes": t.gpu_mem_total_bytes,
    })
}
