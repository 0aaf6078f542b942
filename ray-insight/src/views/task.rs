//! Per-task state the engine keeps while a task is submitted, running or
//! blocked, and the small summary it keeps for a while after it finishes.

use super::gantt::{SliceState, StoredSlice};
use std::sync::Arc;

use super::logical::CallKind;
use super::model::{Id, IdKey, LabelSetId, LaneId, LogicalNode, PathId};

/// Where a live task is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TaskState {
    /// Submitted (`task.submit` seen), not yet running.
    Submitted,
    /// Running (its span is open and it is not inside a `wait` span).
    Running,
    /// Blocked inside a `wait` span.
    Blocked,
}

impl TaskState {
    /// `submitted`, `running` or `blocked`.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Submitted => "submitted",
            TaskState::Running => "running",
            TaskState::Blocked => "blocked",
        }
    }
}

/// An open `wait` span of a task.
#[derive(Debug, Clone)]
pub(crate) struct OpenWait {
    pub(crate) span: u64,
    /// The span it was opened in (the task's run, or a user span in it).
    pub(crate) parent: u64,
    pub(crate) since: u64,
    pub(crate) objects: Vec<Id>,
    /// The task producing each object, same order; `None` where unknown.
    pub(crate) producers: Vec<Option<IdKey>>,
}

/// A task the engine is tracking: submitted, running or blocked.
#[derive(Debug, Clone)]
pub(crate) struct LiveTask {
    pub(crate) kind: CallKind,
    /// The function name, or the actor method name.
    pub(crate) name: Option<Id>,
    pub(crate) class: Option<Id>,
    pub(crate) actor_id: Option<Id>,
    /// The submitting task; `None` is the driver.
    pub(crate) parent: Option<IdKey>,
    /// The caller's application span it was submitted in (`parent_span`),
    /// 0 for none.
    pub(crate) parent_span: u64,
    /// Its caller's place (path, lane, labels) is that span's, or it has
    /// none: nothing left to resolve later.
    pub(crate) span_resolved: bool,
    /// The caller's logical node, resolved when the task was first seen.
    pub(crate) caller: LogicalNode,
    /// The caller's call path (`None` if it could not be interned).
    pub(crate) caller_path: Option<PathId>,
    /// The caller's Gantt lane, for the flow arrow.
    pub(crate) caller_lane: Option<LaneId>,
    pub(crate) labels: LabelSetId,
    /// The labels it inherited when it became known (before any context
    /// of its own): replaced by its caller's labels at submit when its
    /// submit record arrives after its start.
    pub(crate) inherited: LabelSetId,
    pub(crate) submitted_at: Option<u64>,
    pub(crate) started_at: Option<u64>,
    /// When it was placed (`task.scheduled`): resources granted or pushed
    /// to a worker; `None` if it started without waiting or nobody said.
    pub(crate) scheduled_at: Option<u64>,
    pub(crate) node_id: Option<Id>,
    pub(crate) worker_id: Option<Id>,
    pub(crate) thread: u32,
    pub(crate) path: Option<PathId>,
    pub(crate) lane: Option<LaneId>,
    pub(crate) waits: Vec<OpenWait>,
    /// Time blocked outside its user spans (its own frame's waiting).
    pub(crate) waited_nanos: u64,
    /// Time blocked anywhere in the call, user spans included.
    pub(crate) blocked_nanos: u64,
    /// It ended in an error (its close record's `error`), or its node died.
    pub(crate) failed: bool,
    /// Which run of the task this is (its run's `attempt`; 0 the first).
    pub(crate) attempt: u64,
    /// The span of its run (0 until it starts).
    pub(crate) run_span: u64,
    /// The application's spans open inside it.
    pub(crate) user_spans_open: u32,
    /// Time spent inside its user spans (`tracing` spans it opened).
    pub(crate) inner_nanos: u64,
}

impl LiveTask {
    pub(crate) fn state(&self) -> TaskState {
        if self.started_at.is_none() {
            TaskState::Submitted
        } else if self.waits.is_empty() {
            TaskState::Running
        } else {
            TaskState::Blocked
        }
    }

    /// The name people know it by: the function, `Class.method`, or
    /// `Class.new` for an actor creation.
    /// The slices of this task's life on `lane` once it started at `start`:
    /// submitted (if it waited to start), scheduled (from its placement to
    /// its start, if recorded), then running for `dur`
    /// (`finished`: it has ended; otherwise drawn to now); each slice is
    /// called `name` (its [`LiveTask::display_name`]).
    pub(crate) fn lifecycle_slices(
        &self,
        name: &Id,
        id: &IdKey,
        lane: LaneId,
        start: u64,
        dur: u64,
        finished: bool,
    ) -> impl Iterator<Item = StoredSlice> {
        let name = name.clone();
        let scheduled_at = self.scheduled_at.filter(|&s| s < start);
        let waiting = |state, from: u64, to: u64| StoredSlice {
            lane,
            name: name.clone(),
            task_id: id.clone(),
            state,
            start: from,
            dur: to - from,
            finished: true,
            detail: None,
            labels: self.labels,
            flow_from: None,
        };
        let submitted = self
            .submitted_at
            .filter(|&s| s < scheduled_at.unwrap_or(start))
            .map(|s| waiting(SliceState::Submitted, s, scheduled_at.unwrap_or(start)));
        let scheduled = scheduled_at.map(|s| waiting(SliceState::Scheduled, s, start));
        let running = StoredSlice {
            lane,
            name,
            task_id: id.clone(),
            state: SliceState::Running,
            start,
            dur,
            finished,
            detail: None,
            labels: self.labels,
            flow_from: self
                .caller_lane
                .map(|l| (l, self.submitted_at.unwrap_or(start))),
        };
        submitted
            .into_iter()
            .chain(scheduled)
            .chain(std::iter::once(running))
    }

    pub(crate) fn display_name(&self) -> Id {
        let name = self.name.as_deref().unwrap_or("?");
        match (self.kind, &self.class) {
            (CallKind::Task, _) => self.name.clone().unwrap_or_else(|| Arc::from("?")),
            (CallKind::ActorCall, Some(class)) => {
                // The runtime names methods by path (`m::Class::method`):
                // `m::Class.method`, not `m::Class.m::Class::method`.
                let method = name
                    .strip_prefix(&**class)
                    .and_then(|rest| rest.strip_prefix("::"))
                    .unwrap_or(name);
                Arc::from(format!("{class}.{method}"))
            }
            (CallKind::ActorCall, None) => Arc::from(format!("?.{name}")),
            (CallKind::ActorCreate, class) => {
                Arc::from(format!("{}.new", class.as_deref().unwrap_or("?")))
            }
        }
    }

    /// The frame of this call in the flame graph and stacks: the function,
    /// or for an actor call `Class[actor].method`, naming the instance
    /// (`Class.method` while the actor is not known).
    pub(crate) fn instance_name(&self) -> Id {
        let Some(actor) = &self.actor_id else {
            return self.display_name();
        };
        let class_name = self.display_name();
        match self.kind {
            CallKind::Task => class_name,
            CallKind::ActorCall | CallKind::ActorCreate => {
                // `Class.method` becomes `Class[actor].method` (the class may
                // hold dots of its own path only before its last `.`); an id
                // from a hostile record cannot add brackets of its own.
                let actor: String = actor
                    .chars()
                    .map(|c| match c {
                        '[' => '(',
                        ']' => ')',
                        c => c,
                    })
                    .collect();
                match class_name.rsplit_once('.') {
                    Some((class, method)) => Arc::from(format!("{class}[{actor}].{method}")),
                    None => Arc::from(format!("{class_name}[{actor}]")),
                }
            }
        }
    }

    /// The name on the call edge: the function, or the method (`new` for creations).
    pub(crate) fn edge_name(&self) -> Id {
        match self.kind {
            CallKind::ActorCreate => Arc::from("new"),
            _ => self.name.clone().unwrap_or_else(|| Arc::from("?")),
        }
    }

    /// The logical node this task runs as.
    pub(crate) fn logical_node(&self) -> LogicalNode {
        match self.kind {
            CallKind::Task => LogicalNode::Function(self.edge_name()),
            CallKind::ActorCall | CallKind::ActorCreate => LogicalNode::Actor {
                class: self
                    .class
                    .clone()
                    .unwrap_or_else(|| Arc::from(super::logical::UNKNOWN_CLASS)),
                actor_id: self.actor_id.clone().unwrap_or_else(|| Arc::from("?")),
            },
        }
    }
}

/// What the engine remembers of a finished task, so late children and data
/// consumers can still be attributed to it.
#[derive(Debug, Clone)]
pub(crate) struct RecentTask {
    pub(crate) name: Id,
    pub(crate) parent: Option<IdKey>,
    pub(crate) node: LogicalNode,
    pub(crate) path: Option<PathId>,
    pub(crate) labels: LabelSetId,
    pub(crate) lane: Option<LaneId>,
    /// The node it ran on, if its spans said.
    pub(crate) node_id: Option<Id>,
}

/// How long (in record time) a finished call whose caller's records have
/// not arrived waits for them before it is counted under the `unknown`
/// caller: records of one job come from several processes, each shipping
/// on its own, so a callee's records can reach the views first.
pub const ORPHAN_WAIT_NANOS: u64 = 2_000_000_000;

/// A finished call waiting for its caller's records.
#[derive(Debug)]
pub(crate) struct Orphan {
    pub(crate) id: IdKey,
    pub(crate) task: Box<LiveTask>,
    pub(crate) at: u64,
    /// Its place in [`Orphans`]' order, set when parked.
    pub(crate) seq: u64,
}

/// Finished calls waiting for their callers, by caller (see
/// [`ORPHAN_WAIT_NANOS`]).
#[derive(Debug, Default)]
pub(crate) struct Orphans {
    by_parent: hashbrown::HashMap<IdKey, std::collections::VecDeque<Orphan>>,
    /// `(finished at, caller, seq)` per waiting call, oldest first; entries
    /// of calls already adopted are skipped when met (their `seq` is no
    /// longer at the front of their caller's list).
    order: std::collections::VecDeque<(u64, IdKey, u64)>,
    /// The waiting calls' own ids: a late record of one (its submit) is
    /// not taken for a new task.
    ids: hashbrown::HashSet<IdKey>,
    len: usize,
    next_seq: u64,
}

impl Orphans {
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether the call `id` waits here.
    pub(crate) fn contains(&self, id: &IdKey) -> bool {
        self.ids.contains(id)
    }

    pub(crate) fn park(&mut self, parent: IdKey, mut orphan: Orphan) {
        self.ids.insert(orphan.id.clone());
        orphan.seq = self.next_seq;
        self.next_seq += 1;
        self.order
            .push_back((orphan.at, parent.clone(), orphan.seq));
        self.by_parent.entry(parent).or_default().push_back(orphan);
        self.len += 1;
    }

    /// Every call waiting for `parent`, oldest first.
    pub(crate) fn adopt(&mut self, parent: &IdKey) -> std::collections::VecDeque<Orphan> {
        if self.len == 0 {
            // Every task's start asks: almost always, nobody waits.
            return std::collections::VecDeque::new();
        }
        let orphans = self.by_parent.remove(parent).unwrap_or_default();
        self.len -= orphans.len();
        for o in &orphans {
            self.ids.remove(&o.id);
        }
        if self.len == 0 {
            self.order.clear();
        }
        orphans
    }

    /// The oldest waiting call if it finished at or before `before`.
    pub(crate) fn pop_expired(&mut self, before: u64) -> Option<Orphan> {
        while let Some((at, parent, seq)) = self.order.front() {
            if *at > before {
                return None;
            }
            let (parent, seq) = (parent.clone(), *seq);
            self.order.pop_front();
            let Some(list) = self.by_parent.get_mut(&parent) else {
                continue; // adopted already
            };
            // Each caller's list is in parking order, so a call still
            // waiting is at its front; any other `seq` was adopted.
            if list.front().is_none_or(|o| o.seq != seq) {
                continue;
            }
            let Some(orphan) = list.pop_front() else {
                continue;
            };
            if list.is_empty() {
                self.by_parent.remove(&parent);
            }
            self.len -= 1;
            self.ids.remove(&orphan.id);
            return Some(orphan);
        }
        None
    }
}
