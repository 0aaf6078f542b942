//! The views engine: builds the five insight views incrementally from
//! [`Record`](crate::Record)s, in bounded memory.
//!
//! [`Views`] consumes records one at a time ([`Views::apply`], or as a
//! [`Sink`](crate::Sink) a [`Collector`](crate::Collector) drains into). It understands the
//! runtime's span and event schema (below), keeps per-task state only while a
//! task is submitted, running or blocked, folds finished work into aggregates,
//! and produces on demand:
//!
//! 1. the **logical** graph ([`LogicalView`]: JSON, DOT),
//! 2. the **flame graph** by distributed call path ([`FlameView`]: folded
//!    stacks and SVG; [`diff_folded`] and [`diff_svg`] compare two runs),
//! 3. the **Gantt** chart ([`GanttView`]: Chrome trace JSON with flow arrows),
//! 4. the **distributed stack** with deadlock detection ([`StackView`]: JSON,
//!    text),
//! 5. the **physical** view ([`PhysicalView`]: JSON).
//!
//! [`Views::snapshot`] gives all of them; [`Views::filter`] gives them
//! restricted to tasks carrying a context label (`dp_rank = 0`), which child
//! tasks inherit from their submitter.
//!
//! # Example
//!
//! ```
//! use ray_insight::views::{FlameMetric, Views};
//! use ray_insight::{FieldValue, Record, RecordKind};
//!
//! let record = |kind, name, at_nanos, fields: &[(&'static str, &str)]| Record {
//!     kind,
//!     span: 1,
//!     parent: 0,
//!     name,
//!     target: "ray_core::task",
//!     at_nanos,
//!     thread: 0,
//!     fields: fields.iter().map(|(k, v)| (*k, FieldValue::Str((*v).into()))).collect(),
//! };
//! let mut views = Views::default();
//! views.apply(&record(RecordKind::SpanNew, "task.run", 0, &[("task_id", "t1"), ("function", "f")]));
//! views.apply(&record(RecordKind::SpanClose, "task.run", 2_000, &[]));
//!
//! let snapshot = views.snapshot();
//! assert_eq!(snapshot.logical().call_edges[0].count, 1);
//! assert_eq!(snapshot.flame().folded(FlameMetric::SelfTime), "driver;f 2\n");
//! ```
//!
//! # Schema
//!
//! Ids may arrive as strings or numbers; an id recorded as numbers and as
//! the string the runtime displays it as (`task-1a.2b`) is the same id.
//!
//! | record | name | fields |
//! |---|---|---|
//! | span | `task.run` | `task_id`, `function`, `attempt`? (0 when absent: the first run), `parent_task`?, `parent_span`?, `node_id`?, `worker_id`? |
//! | span | `actor.call` | `task_id`, `actor_id`, `class`, `method`, `attempt`? (a resend to the actor's next life), `parent_task`?, `parent_span`?, `node_id`?, `worker_id`? |
//! | span | `actor.create` | `actor_id`, `class`, `task_id`? (the creation task: what the constructor's children name as parent), `parent_task`?, `node_id`?, `worker_id`? |
//! | span | `wait` | `task_id`, `objects` (comma-separated), `producers` (comma-separated task ids, same order, entries may be empty) |
//! | event | `task.submit` | `task_id`, `function` or `method`, `parent_task`?, `parent_span`?, `actor_id`? |
//! | event | `task.lost` | `task_id`, `attempt`? (that run was lost with its worker or node: a retry follows; a later attempt's start also ends it), `error`? (without `attempt`: the call failed for good) |
//! | event | `task.scheduled` | `task_id`, `node_id`?, `worker_id`? (placed: an owner pushed it to a worker on a cluster) |
//! | event | `object.put` | `object_id`, `bytes`, `node_id`?, `task_id`? |
//! | event | `object.get` | `object_id`, `bytes`, `task_id`?, `node_id`?, `producer_node`? |
//! | event | `placement_group.placed` | `group_id`, `strategy`?, `bundle_nodes` (comma-separated node ids, by bundle index) |
//! | event | `placement_group.removed` | `group_id` |
//! | event | `insight.dropped` | `count`: records the recording lost before this point (added to [`Stats::lost`]) |
//! | event | `context` | `task_id`?, `labels`? (`k1=v1,k2=v2`), any other field is a label |
//! | event | `resource.sample` | `node_id`, `worker_id`? or `pid`?, `cpu_percent`?, `rss_bytes`?, `cpu_used`?, `cpu_total`?, `gpu_used`?, `gpu_total`?, `memory_used`?, `memory_total`?, other numeric fields (see [`PhysicalView`]) |
//!
//! An absent `parent_task` or `task_id` means the driver, unless the record is
//! nested in a span the engine knows as a task (then that task).
//! `parent_span` names the caller's application span the work was submitted
//! in (a span id of the caller's records): the work is a frame under that
//! span's, once that span is seen (a finished call waits for it like a call
//! waits for an unseen caller); a span of another task than the caller is
//! ignored. A span's
//! close record may carry `error` (the run failed) and, on an actor run,
//! `cpu_nanos`; the engine finds the task by span id. An opening may carry
//! `closed_at` ([`crate::CLOSED_AT`]) instead of a close record: the span
//! closed then, the close's fields on the same record (the runtime writes
//! a run so when nothing was recorded inside it); an actor run recorded so
//! without `cpu_nanos` is counted at its wall time.
//! An event may carry its name as the callsite name (`info!(name: "object.put", …)`)
//! or as its message (`info!(…, "object.put")`). Other names are ignored.
//!
//! Records should arrive in roughly causal order. The collector drains
//! per-thread batches, so a child's records can precede its parent's; the
//! engine then attributes the child to [`LogicalNode::Unknown`] rather than
//! guess.
//!
//! # Memory bound
//!
//! Every table has a cap in [`Limits`]; [`Views::state_entries`] counts the
//! entries held and never exceeds [`Limits::max_entries`] (each entry is a
//! small fixed-size record plus a few short strings; a `wait` holds at most
//! [`Limits::max_objects_per_wait`] object ids, a data edge at most
//! [`Limits::max_consumers_per_edge`] consumer ids, a node at most
//! [`Limits::max_resources_per_node`] resource values; each resource sample
//! a process keeps, at most [`Limits::max_samples_per_process`] of them, is
//! an entry). At the caps:
//!
//! - live state (tasks, open spans, open waits per task, label sets, lanes,
//!   call paths, aggregate entries) **refuses** what does not fit: the record
//!   (or the part of it that needed room) is counted in [`Views::dropped`];
//! - history (recently finished tasks, objects, actors, Gantt slices,
//!   resource nodes and sampled processes) **evicts** its oldest entries,
//!   counted in [`Stats`]; a sampled process's ring of samples drops its
//!   oldest sample for each new one.
//!
//! A task's state is freed when its span closes; a finished task costs only
//! its share of the aggregates (one entry per distinct call edge, call path
//! and label set) plus, until evicted, one recent-task entry and its Gantt
//! slices.
//!
//! Besides the entries, each thread that applies records keeps caches of
//! 4,096 slots each that render a recorded id or name once while it is in
//! use; strings over 64 bytes are not cached, so they hold under 2 MB a
//! thread, whatever the job's size.

mod facts;
mod flame;
mod gantt;
mod ingest;
mod logical;
mod model;
mod physical;
mod snapshot;
mod stack;
mod task;
mod top;

#[cfg(test)]
mod packed_tests;
#[cfg(test)]
mod tests;

pub use flame::{
    diff_folded, diff_svg, parse_folded, FlameFrame, FlameMetric, FlameSvgError, FlameView,
};
pub use gantt::{GanttFlow, GanttLane, GanttSlice, GanttView, SliceState};
pub use logical::{CallEdge, CallKind, DataEdge, LogicalNodeInfo, LogicalView};
pub use model::LogicalNode;
pub use physical::{
    ActorUsage, NodeRegistration, NodeTotals, PhysicalActor, PhysicalBundle, PhysicalNode,
    PhysicalView, PhysicalWorker, ResourcePoint,
};
pub use snapshot::Snapshot;
pub use stack::{Deadlock, StackView, TaskRef, TaskStack, WaitTarget};
pub use task::TaskState;
pub use task::ORPHAN_WAIT_NANOS;
pub use top::{TopData, TopFrame, TopView};

use flame::FlameAgg;
use gantt::GanttAgg;
use ingest::{ObjectInfo, SpanRole};
use logical::LogicalAgg;
use model::{FifoMap, Id, IdKey, KeyMap, LabelSetId, LabelSets, Lanes, Memo, PathTable};
use physical::{ActorInfo, GroupInfo, ResourceTable};
use task::{LiveTask, RecentTask};

/// The caps that bound a [`Views`] engine's memory (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Tasks submitted, running or blocked at once; more are refused.
    pub max_live_tasks: usize,
    /// Open `task.run` / `actor.call` / `actor.create` / `wait` spans at once.
    pub max_live_spans: usize,
    /// Open `wait` spans per task.
    pub max_waits_per_task: usize,
    /// Object ids kept per `wait` (the rest are left out of the stack view).
    pub max_objects_per_wait: usize,
    /// Finished tasks remembered for late children and consumers (oldest evicted).
    pub max_recent_tasks: usize,
    /// Objects remembered from `object.put` (oldest evicted).
    pub max_objects: usize,
    /// Actors remembered (oldest evicted).
    pub max_actors: usize,
    /// Distinct call edges × label sets; and, separately, data edges and put counters.
    pub max_edges: usize,
    /// Distinct consumer task ids kept per data edge.
    pub max_consumers_per_edge: usize,
    /// Distinct call paths.
    pub max_paths: usize,
    /// Distinct (call path, label set) flame entries.
    pub max_flame_entries: usize,
    /// Finished Gantt slices kept (oldest evicted); a submitted slice split
    /// by a placement that arrived after its task ended counts once.
    pub max_gantt_slices: usize,
    /// Distinct context label sets.
    pub max_label_sets: usize,
    /// Gantt lanes; and, separately, Gantt process groups (nodes).
    pub max_lanes: usize,
    /// Nodes with resource samples (oldest evicted).
    pub max_resource_nodes: usize,
    /// Resource values kept per node.
    pub max_resources_per_node: usize,
    /// Sampled processes (node, worker) with a resource history (oldest evicted).
    pub max_resource_processes: usize,
    /// Resource samples kept per process (a ring: the oldest is dropped).
    pub max_samples_per_process: usize,
    /// Placement groups placed (oldest evicted), each with at most
    /// [`Limits::max_bundles_per_group`] bundles' nodes.
    pub max_placement_groups: usize,
    /// Bundles whose node a placement group keeps.
    pub max_bundles_per_group: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_live_tasks: 65_536,
            max_live_spans: 131_072,
            max_waits_per_task: 8,
            max_objects_per_wait: 64,
            max_recent_tasks: 16_384,
            max_objects: 65_536,
            max_actors: 65_536,
            // 10,000 actors called from a few places each fit.
            max_edges: 65_536,
            max_consumers_per_edge: 16,
            max_paths: 65_536,
            max_flame_entries: 65_536,
            max_gantt_slices: 65_536,
            max_label_sets: 4_096,
            // One per actor: 10,000 actors and their workers' threads fit.
            max_lanes: 16_384,
            max_resource_nodes: 4_096,
            max_resources_per_node: 32,
            max_resource_processes: 1_024,
            max_samples_per_process: 120,
            max_placement_groups: 4_096,
            max_bundles_per_group: 64,
        }
    }
}

impl Limits {
    /// The most entries [`Views::state_entries`] can report under these caps.
    pub fn max_entries(&self) -> usize {
        self.max_live_tasks
            + self.max_live_spans
            + self.max_recent_tasks
            + self.max_objects
            + self.max_actors
            + 3 * self.max_edges
            + self.max_edges * self.max_consumers_per_edge
            + self.max_paths.max(1)
            + self.max_flame_entries
            + self.max_gantt_slices
            + self.max_label_sets.max(1)
            + 2 * self.max_lanes.max(1)
            + self.max_resource_nodes
            + self.max_resource_processes * (1 + self.max_samples_per_process)
            + self.max_placement_groups
            // Placements and losses that came before their task, and
            // application spans that closed.
            + 3 * self.max_recent_tasks
    }
}

/// Counters of what the engine did with the records it was given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Records understood and applied (possibly in part).
    pub applied: u64,
    /// Records with names outside the schema, closes of spans the engine does
    /// not track, or records missing a required field.
    pub ignored: u64,
    /// Records refused, wholly or in part, because a cap was reached
    /// (the same as [`Views::dropped`]).
    pub dropped: u64,
    /// Records lost before they reached the engine: dropped by the
    /// recording layer (its queue was full), as `insight.dropped` events
    /// report them.
    pub lost: u64,
    /// Records naming a task the engine does not track (a wait or context on
    /// a task never seen, or already evicted).
    pub unmatched: u64,
    /// Calls whose caller was unknown when they started (its records came
    /// later, from another process) and was found when they finished or
    /// once the caller's records arrived.
    pub late_callers: u64,
    /// Finished calls waiting now for their caller's records (counted in
    /// the views once those arrive, or as the `unknown` caller's after
    /// [`ORPHAN_WAIT_NANOS`] of record time or when too many wait).
    pub waiting_for_caller: usize,
    /// Recently finished tasks evicted.
    pub evicted_recent: u64,
    /// Objects evicted (later gets of them have an unknown producer).
    pub evicted_objects: u64,
    /// Actors evicted.
    pub evicted_actors: u64,
    /// Gantt slices evicted.
    pub evicted_slices: u64,
    /// Resource nodes evicted.
    pub evicted_resource_nodes: u64,
    /// Sampled processes evicted, with their resource history.
    pub evicted_resource_processes: u64,
    /// Placement groups evicted.
    pub evicted_groups: u64,
    /// Tasks live now (submitted, running or blocked).
    pub live_tasks: usize,
    /// Spans open now.
    pub live_spans: usize,
    /// Entries held now (see [`Views::state_entries`]).
    pub state_entries: usize,
}

/// The views engine: consumes [`Record`](crate::Record)s, keeps bounded state, and produces
/// the five views (see the module docs).
#[derive(Debug)]
pub struct Views {
    limits: Limits,
    now: u64,
    /// Closes folded into opening records ([`crate::CLOSED_AT`]) after this
    /// time are not applied: a replay at t shows such a span still open.
    horizon: u64,
    tasks: KeyMap<IdKey, Box<LiveTask>>,
    spans: KeyMap<u64, SpanRole>,
    recent: FifoMap<IdKey, RecentTask>,
    objects: FifoMap<IdKey, ObjectInfo>,
    actors: FifoMap<Id, ActorInfo>,
    resources: ResourceTable,
    groups: FifoMap<Id, GroupInfo>,
    /// Placements (`task.scheduled`) that arrived before their task: `(at,
    /// node)` by task id; as many as recent tasks are kept (oldest evicted).
    pending_placements: FifoMap<IdKey, (u64, Option<Id>)>,
    /// Losses (`task.lost`) that arrived before the run they name (from
    /// another process): the attempt lost, `None` for a call given up for
    /// good; as many as recent tasks are kept (oldest evicted).
    lost_early: FifoMap<IdKey, ingest::EarlyLoss>,
    /// Application spans that closed, by span id, for the work submitted
    /// inside them that starts or finishes later; as many as recent tasks
    /// are kept (oldest evicted).
    closed_spans: FifoMap<u64, ingest::SpanCaller>,
    labels: LabelSets,
    driver_labels: LabelSetId,
    paths: PathTable,
    lanes: Lanes,
    memo: Memo,
    /// Finished calls waiting for their caller's records.
    orphans: task::Orphans,
    logical: LogicalAgg,
    flame: FlameAgg,
    gantt: GanttAgg,
    stats: Stats,
}

impl Default for Views {
    fn default() -> Self {
        Self::new(Limits::default())
    }
}

impl Views {
    /// An engine with the given caps.
    pub fn new(limits: Limits) -> Self {
        Self {
            now: 0,
            horizon: u64::MAX,
            tasks: KeyMap::default(),
            spans: KeyMap::default(),
            recent: FifoMap::new(limits.max_recent_tasks),
            objects: FifoMap::new(limits.max_objects),
            actors: FifoMap::new(limits.max_actors),
            resources: ResourceTable::new(&limits),
            groups: FifoMap::new(limits.max_placement_groups),
            pending_placements: FifoMap::new(limits.max_recent_tasks),
            lost_early: FifoMap::new(limits.max_recent_tasks),
            closed_spans: FifoMap::new(limits.max_recent_tasks),
            labels: LabelSets::new(limits.max_label_sets),
            driver_labels: 0,
            paths: PathTable::new(limits.max_paths),
            lanes: Lanes::new(limits.max_lanes),
            memo: Memo::default(),
            orphans: task::Orphans::default(),
            logical: LogicalAgg::new(limits.max_edges, limits.max_consumers_per_edge),
            flame: FlameAgg::new(limits.max_flame_entries),
            gantt: GanttAgg::new(limits.max_gantt_slices),
            stats: Stats::default(),
            limits,
        }
    }

    /// The caps this engine runs under.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Records refused (wholly or in part) because a cap was reached.
    pub fn dropped(&self) -> u64 {
        self.stats.dropped
    }

    /// The engine's clock: the latest record time seen (or a later time
    /// given to [`Views::advance_to`]), in nanoseconds since the recording's
    /// epoch; live tasks are drawn up to it.
    pub fn now_nanos(&self) -> u64 {
        self.now
    }

    /// Moves the engine's clock ([`Views::now_nanos`]) forward to `at_nanos`,
    /// never back: live tasks and waits are then drawn up to it (their Gantt
    /// slices and the stack view's durations), as they stood at that time
    /// even if no record came then. A replay at time t calls it with t.
    pub fn advance_to(&mut self, at_nanos: u64) {
        self.now = self.now.max(at_nanos);
        self.expire_orphans();
    }

    /// Entries held in every table (live tasks, open spans, remembered tasks,
    /// objects and actors, aggregate entries, call paths, Gantt slices, label
    /// sets, lanes, resource nodes, sampled processes and their samples); at
    /// most [`Limits::max_entries`].
    pub fn state_entries(&self) -> usize {
        self.tasks.len()
            + self.spans.len()
            + self.recent.len()
            + self.objects.len()
            + self.actors.len()
            + self.logical.entries()
            + self.paths.len()
            + self.flame.len()
            + self.gantt.len()
            + self.labels.len()
            + self.lanes.len()
            + self.resources.entries()
            + self.groups.len()
            + self.pending_placements.len()
            + self.lost_early.len()
            + self.closed_spans.len()
            + self.orphans.len()
    }

    /// The counters, with the live sizes filled in.
    pub fn stats(&self) -> Stats {
        Stats {
            live_tasks: self.tasks.len(),
            live_spans: self.spans.len(),
            waiting_for_caller: self.orphans.len(),
            state_entries: self.state_entries(),
            ..self.stats.clone()
        }
    }

    /// All five views, unfiltered.
    pub fn snapshot(&self) -> Snapshot<'_> {
        Snapshot {
            views: self,
            mask: None,
        }
    }

    /// All five views restricted to tasks (and their aggregates) whose context
    /// labels include `key = value`, directly or inherited from a submitter.
    pub fn filter(&self, key: &str, value: &str) -> Snapshot<'_> {
        Snapshot {
            views: self,
            mask: Some(self.labels.matching(key, value)),
        }
    }

    /// All five views restricted to tasks whose labels include every
    /// `key = value` of `labels` (no labels: every task).
    pub fn filter_all<K: AsRef<str>, V: AsRef<str>>(&self, labels: &[(K, V)]) -> Snapshot<'_> {
        let mut mask: Option<Vec<bool>> = None;
        for (key, value) in labels {
            let one = self.labels.matching(key.as_ref(), value.as_ref());
            mask = Some(match mask {
                None => one,
                Some(m) => m.iter().zip(one).map(|(a, b)| *a && b).collect(),
            });
        }
        Snapshot { views: self, mask }
    }
}
