//! The physical view: nodes → workers → actors and running tasks, from the
//! `node_id` / `worker_id` fields on spans.
//!
//! Resource hook: `resource.sample` events (`node_id` plus numeric fields such
//! as `cpu`, `mem_bytes`, `gpu_mem_bytes`) set each node's latest values in
//! [`PhysicalNode::resources`]. The runtime does not emit them yet; when it
//! does, nothing here changes (history and colouring come with the dashboard).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde_json::{json, Value};

use super::model::{FifoMap, Id, LabelSetId};
use super::stack::TaskRef;
use super::task::{LiveTask, TaskState};

/// What the engine knows of an actor's placement.
#[derive(Debug, Clone)]
pub(crate) struct ActorInfo {
    pub(crate) class: Option<Id>,
    pub(crate) node_id: Option<Id>,
    pub(crate) worker_id: Option<Id>,
    pub(crate) labels: LabelSetId,
}

/// An actor placed on a node.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct PhysicalActor {
    /// The actor's id.
    pub actor_id: String,
    /// Its class (`?` when unknown).
    pub class: String,
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
    /// Latest resource sample values by name (see the module docs).
    pub resources: BTreeMap<String, f64>,
}

/// Every node the engine has seen a running task, an actor or a sample on.
#[derive(Debug, Clone, PartialEq)]
pub struct PhysicalView {
    /// Nodes, sorted by id.
    pub nodes: Vec<PhysicalNode>,
}

const UNKNOWN: &str = "unknown";

pub(crate) fn build(
    tasks: &HashMap<Id, LiveTask>,
    actors: &FifoMap<Id, ActorInfo>,
    resources: &FifoMap<Id, BTreeMap<String, f64>>,
    keep: &dyn Fn(LabelSetId) -> bool,
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
            });
        (count, w)
    }
    for (actor_id, info) in actors.iter() {
        if !keep(info.labels) {
            continue;
        }
        let (_, w) = worker(&mut nodes, info.node_id.as_ref(), info.worker_id.as_ref());
        w.actors.push(PhysicalActor {
            actor_id: actor_id.to_string(),
            class: info.class.as_deref().unwrap_or("?").to_owned(),
        });
    }
    for (id, task) in tasks {
        if task.state() == TaskState::Submitted || !keep(task.labels) {
            continue;
        }
        let (count, w) = worker(&mut nodes, task.node_id.as_ref(), task.worker_id.as_ref());
        *count += 1;
        w.running.push(TaskRef {
            task_id: id.to_string(),
            name: task.display_name().to_string(),
        });
    }
    for (node, _) in resources.iter() {
        nodes.entry(node.to_string()).or_default();
    }
    PhysicalView {
        nodes: nodes
            .into_iter()
            .map(|(node_id, (running_tasks, workers))| PhysicalNode {
                resources: resources
                    .get(&Arc::from(node_id.as_str()))
                    .cloned()
                    .unwrap_or_default(),
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
            })
            .collect(),
    }
}

impl PhysicalView {
    /// The view as JSON: `nodes`, each with `running_tasks`, `resources` and
    /// `workers` (each with `actors` and `running`).
    pub fn to_json(&self) -> Value {
        json!({
            "nodes": self.nodes.iter().map(|n| json!({
                "node_id": n.node_id,
                "running_tasks": n.running_tasks,
                "resources": n.resources,
                "workers": n.workers.iter().map(|w| json!({
                    "worker_id": w.worker_id,
                    "actors": w.actors.iter().map(|a| json!({
                        "actor_id": a.actor_id, "class": a.class,
                    })).collect::<Vec<_>>(),
                    "running": w.running.iter().map(|t| json!({
                        "task_id": t.task_id, "name": t.name,
                    })).collect::<Vec<_>>(),
                })).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        })
    }
}
