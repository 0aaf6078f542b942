//! The distributed stack: for each running or blocked task, its chain of
//! ancestors (by `parent_task`, across nodes) and what it waits on; and the
//! wait-for graph's cycles, reported as deadlocks.
//!
//! The wait-for graph has an edge from each blocked task to each task
//! producing an object it waits on (an actor mailbox wait is a wait on the
//! call's return object, produced by the call's task). A producer that is
//! itself blocked continues the chain; a cycle (a strongly connected component
//! with more than one task, or a task waiting on itself) is a deadlock.
//!
//! A producer that is an actor call submitted but not yet started is queued
//! in its actor's mailbox: it waits for the calls that occupy the actor. When
//! every started call of that actor is blocked (none can make progress and
//! free the actor), the queued call continues the chain to each of them. This
//! is what closes the classic actor deadlock: `A.ping` waits on `B.pong`,
//! which waits on `A.echo`, queued behind `A.ping`. The per-actor occupancy is
//! derived from the live tasks when the view is built, so it costs no state.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use hashbrown::HashMap;
use std::fmt::Write as _;

use serde_json::{json, Value};

use super::logical::CallKind;
use super::model::{FifoMap, Id, IdKey, KeyMap, LabelSetId, LabelSets};
use super::task::{LiveTask, RecentTask, TaskState};

/// How far ancestor and wait chains are followed.
const MAX_CHAIN: usize = 256;

/// A task named by id and by what it runs.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct TaskRef {
    /// The task id (`driver` for the driver).
    pub task_id: String,
    /// The function or `Class.method` (`driver`, or `?` when unknown).
    pub name: String,
}

/// One object a blocked task waits on.
#[derive(Debug, Clone, PartialEq)]
pub struct WaitTarget {
    /// The object id.
    pub object_id: String,
    /// The task producing it, if the `wait` span named one.
    pub producer: Option<TaskRef>,
    /// The producer's state, if the engine tracks it (`None`: finished or unknown).
    pub producer_state: Option<TaskState>,
}

/// One running or blocked task, with its distributed stack.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskStack {
    /// The task itself.
    pub task: TaskRef,
    /// Running or blocked.
    pub state: TaskState,
    /// When it started running, in nanoseconds since the epoch.
    pub started_nanos: u64,
    /// Its node, if known.
    pub node_id: Option<String>,
    /// Its worker, if known.
    pub worker_id: Option<String>,
    /// Its context labels.
    pub labels: Vec<(String, String)>,
    /// Its callers, nearest first, ending at `driver` (or at the first
    /// ancestor the engine no longer knows, named `?`).
    pub ancestors: Vec<TaskRef>,
    /// The application's own spans open inside it (`tracing` spans such as
    /// `reward_fn`), outermost first: where in the call it is.
    pub spans: Vec<String>,
    /// What it waits on (empty when running).
    pub waits_on: Vec<WaitTarget>,
    /// Following the first blocked producer repeatedly: the tasks this one
    /// transitively waits for (stops at a running producer or a repeat).
    pub wait_chain: Vec<TaskRef>,
}

/// A cycle in the wait-for graph.
#[derive(Debug, Clone, PartialEq)]
pub struct Deadlock {
    /// The tasks in the cycle, each waiting on the next, the last on the first.
    pub cycle: Vec<TaskRef>,
}

/// Every running or blocked task's stack, and the deadlocks.
#[derive(Debug, Clone, PartialEq)]
pub struct StackView {
    /// Running and blocked tasks, sorted by task id.
    pub tasks: Vec<TaskStack>,
    /// Wait-for cycles, each starting at its smallest task id (the
    /// runtime's ids compared by their numbers, before any other id).
    pub deadlocks: Vec<Deadlock>,
    /// The engine's latest time, in nanoseconds.
    pub now_nanos: u64,
}

fn task_ref(
    id: &IdKey,
    tasks: &KeyMap<IdKey, Box<LiveTask>>,
    recent: &FifoMap<IdKey, RecentTask>,
) -> TaskRef {
    let name = match (tasks.get(id), recent.get(id)) {
        (Some(t), _) => t.instance_name().to_string(),
        (None, Some(r)) => r.name.to_string(),
        (None, None) => "?".to_owned(),
    };
    TaskRef {
        task_id: id.task().to_string(),
        name,
    }
}

fn driver_ref() -> TaskRef {
    TaskRef {
        task_id: "driver".to_owned(),
        name: "driver".to_owned(),
    }
}

/// The wait-for graph: blocked tasks → the producers they wait on that are
/// themselves in the graph, and queued actor calls → the blocked calls that
/// occupy their actor (see the module docs). Successors sorted, deduplicated.
fn wait_for_graph(tasks: &KeyMap<IdKey, Box<LiveTask>>) -> BTreeMap<IdKey, Vec<IdKey>> {
    // Per actor: its started calls, and whether all of them are blocked.
    let mut occupants: HashMap<&Id, (Vec<&IdKey>, bool)> = HashMap::new();
    for (id, task) in tasks {
        let (CallKind::ActorCall, Some(actor)) = (task.kind, &task.actor_id) else {
            continue;
        };
        let state = task.state();
        if state == TaskState::Submitted {
            continue;
        }
        let entry = occupants.entry(actor).or_insert_with(|| (Vec::new(), true));
        entry.0.push(id);
        entry.1 &= state == TaskState::Blocked;
    }
    // A queued call waits on its actor's calls only while none of them runs.
    let queued_on = |task: &LiveTask| -> Option<&Vec<&IdKey>> {
        if task.state() != TaskState::Submitted || task.kind != CallKind::ActorCall {
            return None;
        }
        match occupants.get(task.actor_id.as_ref()?) {
            Some((calls, true)) => Some(calls),
            _ => None,
        }
    };
    let in_graph = |id: &IdKey| {
        tasks
            .get(id)
            .is_some_and(|t| t.state() == TaskState::Blocked || queued_on(t).is_some())
    };
    let mut graph = BTreeMap::new();
    for (id, task) in tasks {
        let mut next: Vec<IdKey> = if task.state() == TaskState::Blocked {
            task.waits
                .iter()
                .flat_map(|w| w.producers.iter().flatten())
                .filter(|p| in_graph(p))
                .cloned()
                .collect()
        } else if let Some(calls) = queued_on(task) {
            calls.iter().map(|c| (*c).clone()).collect()
        } else {
            continue;
        };
        next.sort();
        next.dedup();
        graph.insert(id.clone(), next);
    }
    graph
}

/// Strongly connected components (iterative Tarjan), each sorted.
fn components(graph: &BTreeMap<IdKey, Vec<IdKey>>) -> Vec<Vec<IdKey>> {
    let ids: Vec<&IdKey> = graph.keys().collect();
    let index_of: HashMap<&IdKey, usize> = ids.iter().enumerate().map(|(i, id)| (*id, i)).collect();
    let succ: Vec<Vec<usize>> = ids
        .iter()
        .map(|id| {
            graph[*id]
                .iter()
                .filter_map(|s| index_of.get(s).copied())
                .collect()
        })
        .collect();
    let n = ids.len();
    let mut index = vec![usize::MAX; n];
    let mut low = vec![0; n];
    let mut on_stack = vec![false; n];
    let mut stack = Vec::new();
    let mut next_index = 0;
    let mut out = Vec::new();
    for root in 0..n {
        if index[root] != usize::MAX {
            continue;
        }
        let mut work: Vec<(usize, usize)> = vec![(root, 0)];
        index[root] = next_index;
        low[root] = next_index;
        next_index += 1;
        stack.push(root);
        on_stack[root] = true;
        while let Some(&(v, child)) = work.last() {
            if let Some(&w) = succ[v].get(child) {
                if let Some(top) = work.last_mut() {
                    top.1 += 1;
                }
                if index[w] == usize::MAX {
                    index[w] = next_index;
                    low[w] = next_index;
                    next_index += 1;
                    stack.push(w);
                    on_stack[w] = true;
                    work.push((w, 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(index[w]);
                }
            } else {
                work.pop();
                if let Some(&(parent, _)) = work.last() {
                    low[parent] = low[parent].min(low[v]);
                }
                if low[v] == index[v] {
                    let mut component = Vec::new();
                    while let Some(w) = stack.pop() {
                        on_stack[w] = false;
                        component.push(ids[w].clone());
                        if w == v {
                            break;
                        }
                    }
                    component.sort();
                    out.push(component);
                }
            }
        }
    }
    out
}

/// One cycle through `component`, starting at its smallest id (shortest by BFS).
fn cycle_in(component: &[IdKey], graph: &BTreeMap<IdKey, Vec<IdKey>>) -> Vec<IdKey> {
    let members: BTreeSet<&IdKey> = component.iter().collect();
    let start = &component[0];
    let mut prev: HashMap<&IdKey, &IdKey> = HashMap::new();
    let mut queue = VecDeque::from([start]);
    while let Some(v) = queue.pop_front() {
        for w in &graph[v] {
            if w == start {
                let mut cycle = vec![v.clone()];
                let mut at = v;
                while let Some(p) = prev.get(at) {
                    cycle.push((*p).clone());
                    at = p;
                }
                cycle.reverse();
                return cycle;
            }
            if members.contains(w) && !prev.contains_key(w) {
                prev.insert(w, v);
                queue.push_back(w);
            }
        }
    }
    component.to_vec()
}

/// The user spans open in each task, each keyed by when it opened and its
/// nesting depth (the order the stack lists them in).
pub(crate) type OpenUserSpans<'a> = HashMap<&'a IdKey, Vec<((u64, u64), &'a Id)>>;

pub(crate) fn build(
    tasks: &KeyMap<IdKey, Box<LiveTask>>,
    user_spans: &OpenUserSpans<'_>,
    recent: &FifoMap<IdKey, RecentTask>,
    keep: &dyn Fn(LabelSetId) -> bool,
    label_sets: &LabelSets,
    now: u64,
) -> StackView {
    let graph = wait_for_graph(tasks);
    let mut deadlocks = Vec::new();
    for component in components(&graph) {
        let cyclic = component.len() > 1 || graph[&component[0]].contains(&component[0]);
        if !cyclic {
            continue;
        }
        if !component
            .iter()
            .any(|id| tasks.get(id).is_some_and(|t| keep(t.labels)))
        {
            continue;
        }
        deadlocks.push(Deadlock {
            cycle: cycle_in(&component, &graph)
                .iter()
                .map(|id| task_ref(id, tasks, recent))
                .collect(),
        });
    }
    deadlocks.sort_by(|a, b| a.cycle.cmp(&b.cycle));

    let mut stacks = Vec::new();
    for (id, task) in tasks {
        let state = task.state();
        if state == TaskState::Submitted || !keep(task.labels) {
            continue;
        }
        let mut ancestors = Vec::new();
        let mut parent = task.parent.clone();
        loop {
            let Some(p) = parent else {
                ancestors.push(driver_ref());
                break;
            };
            if ancestors.len() >= MAX_CHAIN {
                break;
            }
            ancestors.push(task_ref(&p, tasks, recent));
            parent = match (tasks.get(&p), recent.get(&p)) {
                (Some(t), _) => t.parent.clone(),
                (None, Some(r)) => r.parent.clone(),
                (None, None) => break,
            };
        }
        let waits_on = task
            .waits
            .iter()
            .flat_map(|w| w.objects.iter().zip(w.producers.iter()))
            .map(|(object, producer)| WaitTarget {
                object_id: object.to_string(),
                producer: producer.as_ref().map(|p| task_ref(p, tasks, recent)),
                producer_state: producer
                    .as_ref()
                    .and_then(|p| tasks.get(p))
                    .map(|t| t.state()),
            })
            .collect();
        let mut wait_chain = Vec::new();
        let mut seen = BTreeSet::from([id.clone()]);
        let mut at = id.clone();
        while wait_chain.len() < MAX_CHAIN {
            let Some(t) = tasks.get(&at) else { break };
            // A blocked task waits on its first producer; a queued actor call
            // on the first call occupying its actor.
            let next = match t.state() {
                TaskState::Blocked => t
                    .waits
                    .iter()
                    .flat_map(|w| w.producers.iter().flatten())
                    .next(),
                _ => graph.get(&at).and_then(|n| n.first()),
            };
            let Some(next) = next else { break };
            wait_chain.push(task_ref(next, tasks, recent));
            if !graph.contains_key(next) || !seen.insert(next.clone()) {
                break;
            }
            at = next.clone();
        }
        stacks.push(TaskStack {
            task: task_ref(id, tasks, recent),
            state,
            started_nanos: task.started_at.unwrap_or(0),
            node_id: task.node_id.as_ref().map(|n| n.to_string()),
            worker_id: task.worker_id.as_ref().map(|w| w.to_string()),
            labels: label_sets.pairs(task.labels),
            ancestors,
            spans: user_spans.get(id).map_or_else(Vec::new, |open| {
                let mut open = open.clone();
                open.sort();
                open.into_iter().map(|(_, name)| name.to_string()).collect()
            }),
            waits_on,
            wait_chain,
        });
    }
    stacks.sort_by(|a, b| a.task.task_id.cmp(&b.task.task_id));
    StackView {
        tasks: stacks,
        deadlocks,
        now_nanos: now,
    }
}

fn ref_json(r: &TaskRef) -> Value {
    json!({ "task_id": r.task_id, "name": r.name })
}

fn ref_text(r: &TaskRef) -> String {
    format!("{} ({})", r.task_id, r.name)
}

impl StackView {
    /// The view as JSON: `tasks` (each with `ancestors`, `spans`,
    /// `waits_on`, `wait_chain`) and `deadlocks` (each a `cycle` of tasks).
    pub fn to_json(&self) -> Value {
        json!({
            "now_nanos": self.now_nanos,
            "tasks": self.tasks.iter().map(|t| json!({
                "task_id": t.task.task_id,
                "name": t.task.name,
                "state": t.state.as_str(),
                "started_nanos": t.started_nanos,
                "node_id": t.node_id,
                "worker_id": t.worker_id,
                "labels": t.labels,
                "ancestors": t.ancestors.iter().map(ref_json).collect::<Vec<_>>(),
                "spans": t.spans,
                "waits_on": t.waits_on.iter().map(|w| json!({
                    "object_id": w.object_id,
                    "producer": w.producer.as_ref().map(ref_json),
                    "producer_state": w.producer_state.map(TaskState::as_str),
                })).collect::<Vec<_>>(),
                "wait_chain": t.wait_chain.iter().map(ref_json).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "deadlocks": self.deadlocks.iter().map(|d| json!({
                "cycle": d.cycle.iter().map(ref_json).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        })
    }

    /// A text rendering, one block per task (innermost frame first, like a
    /// thread dump), then one `DEADLOCK` line per cycle.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        for t in &self.tasks {
            let _ = write!(
                out,
                "{} [{} for {:.3} ms]",
                ref_text(&t.task),
                t.state.as_str(),
                self.now_nanos.saturating_sub(t.started_nanos) as f64 / 1e6
            );
            if let Some(node) = &t.node_id {
                let _ = write!(out, " node={node}");
            }
            if let Some(worker) = &t.worker_id {
                let _ = write!(out, " worker={worker}");
            }
            out.push('\n');
            // Innermost first, like the rest of the block.
            for span in t.spans.iter().rev() {
                let _ = writeln!(out, "    in {span}");
            }
            for w in &t.waits_on {
                let _ = write!(out, "    waits on {}", w.object_id);
                if let Some(p) = &w.producer {
                    let state = w
                        .producer_state
                        .map_or("finished/unknown", TaskState::as_str);
                    let _ = write!(out, " <- {} [{state}]", ref_text(p));
                }
                out.push('\n');
            }
            for a in &t.ancestors {
                let _ = writeln!(out, "    called from {}", ref_text(a));
            }
        }
        for d in &self.deadlocks {
            let mut names: Vec<String> = d.cycle.iter().map(ref_text).collect();
            if let Some(first) = names.first().cloned() {
                names.push(first);
            }
            let _ = writeln!(
                out,
                "DEADLOCK ({} tasks): {}",
                d.cycle.len(),
                names.join(" -> ")
            );
        }
        out
    }
}
