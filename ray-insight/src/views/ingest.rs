//! How records become state: the schema dispatch, per-task bookkeeping,
//! and folding finished work into the aggregates.

use std::sync::Arc;

use super::facts::{str_field, task_field, u64_field, Facts, Typed};
use super::gantt::StoredSlice;
use super::logical::{CallKey, Locality};
use super::model::{
    frame_name, id_key, id_of, static_id, CallNames, FifoMap, Id, IdKey, LabelSetId, LaneId, Memo,
    PathId, PathTable,
};
use super::physical::{ActorInfo, ActorUsage, GroupInfo, NodeRegistration, ProcessFields};
use super::task::{LiveTask, OpenWait, Orphan, RecentTask, TaskState};
use super::{CallKind, LogicalNode, SliceState, Views};
use crate::packed::{Packed, RunShape};
use crate::record::{FieldValue, Record, RecordKind};
use crate::sink::Sink;

impl UserSpan {
    /// The task it runs in.
    pub(super) fn task(&self) -> &IdKey {
        &self.task
    }

    /// Its name (the `tracing` span's).
    pub(super) fn name(&self) -> &Id {
        &self.name
    }

    /// When it opened.
    pub(super) fn since(&self) -> u64 {
        self.since
    }

    /// The span it opened inside (the task's run, or another user span).
    pub(super) fn parent_span(&self) -> u64 {
        self.parent_span
    }
}

/// What an open span the engine tracks stands for.
#[derive(Debug, Clone)]
pub(super) enum SpanRole {
    Task(IdKey),
    Wait(IdKey),
    User(Box<UserSpan>),
}

/// A span an application opened inside a task (a `tracing` span such as
/// `reward_fn`): a frame of its own under the task in the flame graph and
/// a slice in the task's Gantt lane.
#[derive(Debug, Clone)]
pub(super) struct UserSpan {
    /// The task it runs in.
    task: IdKey,
    /// The span it is inside: the task's run, or another user span.
    parent_span: u64,
    name: Id,
    path: Option<PathId>,
    lane: Option<LaneId>,
    labels: LabelSetId,
    since: u64,
    /// Time inside its own user spans.
    inner_nanos: u64,
    /// Time blocked in waits opened inside it.
    waiting_nanos: u64,
}

/// What the engine knows of an object from its `object.put`.
#[derive(Debug, Clone)]
pub(super) struct ObjectInfo {
    producer: LogicalNode,
    node_id: Option<Id>,
}

/// The caller of a task, as resolved when the task is first seen.
struct CallerInfo {
    node: LogicalNode,
    path: Option<PathId>,
    labels: LabelSetId,
    lane: Option<LaneId>,
    /// The place is the caller's application span's (see
    /// [`Views::caller_info_in`]), not the caller task's.
    via_span: bool,
}

/// Where work submitted inside an application span goes, kept after the
/// span closed: the task it ran in, and its frame, labels and lane.
#[derive(Debug, Clone)]
pub(super) struct SpanCaller {
    task: IdKey,
    path: Option<PathId>,
    labels: LabelSetId,
    lane: Option<LaneId>,
}

/// `task`'s display and instance names and flame frame, memoized (and
/// borrowed: a clone of each would be an atomic increment and decrement).
fn call_names<'m>(memo: &'m mut Memo, task: &LiveTask) -> &'m CallNames {
    let ids = [
        task.name.as_ref(),
        task.class.as_ref(),
        task.actor_id.as_ref(),
    ];
    memo.names(task.kind, ids, || {
        (task.display_name(), task.instance_name())
    })
}

/// The key finished calls wait under for the opening of the application
/// span they were submitted in (see [`Views::finish_task`]).
fn span_key(span: u64) -> IdKey {
    IdKey::text(format!("user-span:{span}"))
}

/// A loss (`task.lost`) kept for records of its task still to come.
#[derive(Debug, Clone, Copy)]
pub(super) struct EarlyLoss {
    /// The run lost; `None`: the call was given up for good.
    attempt: Option<u64>,
    /// Already counted failed (the call was failed while queued): the lost
    /// run's late start is dropped, not counted again.
    counted: bool,
}

/// How a run ended, as its close record says.
#[derive(Debug, Clone, Copy, Default)]
struct Ended {
    /// The CPU time its thread spent on it (actor runs recorded directly).
    cpu_nanos: Option<u64>,
    /// It returned an error or panicked (an `error` field).
    failed: bool,
}

fn list_field(record: &Record, key: &str) -> Vec<Option<Id>> {
    match record.field(key) {
        None => Vec::new(),
        Some(FieldValue::Str(s)) => s
            .split(',')
            .map(|part| {
                let part = part.trim();
                (!part.is_empty()).then(|| Arc::from(part))
            })
            .collect(),
        Some(other) => vec![Some(id_of(key, other))],
    }
}

/// Parses a packed label list `k1=v1,k2=v2` (entries without `=` or with an
/// empty key are skipped; keys and values are trimmed).
fn parse_labels(packed: &str) -> impl Iterator<Item = (Id, Id)> + '_ {
    packed.split(',').filter_map(|entry| {
        let (key, value) = entry.split_once('=')?;
        let key = key.trim();
        (!key.is_empty()).then(|| (Arc::from(key), Arc::from(value.trim())))
    })
}

fn number_field(record: &Record, key: &str) -> Option<f64> {
    match record.field(key)? {
        FieldValue::U64(v) => Some(*v as f64),
        FieldValue::I64(v) => Some(*v as f64),
        FieldValue::F64(v) => Some(*v),
        FieldValue::U128 { hi, lo } => Some((u128::from(*hi) << 64 | u128::from(*lo)) as f64),
        FieldValue::Str(s) => s.trim().parse().ok(),
        FieldValue::Bool(_) => None,
    }
}

impl Views {
    /// Applies one record (see the [module docs](super) for the schema).
    ///
    /// Never panics on malformed input: records missing required fields are
    /// counted as ignored, records that would exceed a cap as dropped.
    pub fn apply(&mut self, record: &Record) {
        self.advance(record.at_nanos);
        let name = record.schema_name();
        let understood = match (record.kind, name) {
            (RecordKind::SpanNew, "task.run") => self.start_run(record, CallKind::Task),
            (RecordKind::SpanNew, "actor.call") => self.start_run(record, CallKind::ActorCall),
            (RecordKind::SpanNew, "actor.create") => self.start_run(record, CallKind::ActorCreate),
            (RecordKind::SpanNew, "wait") => self.begin_wait(record),
            (RecordKind::SpanNew, _) => self.begin_user_span(record),
            (RecordKind::SpanClose, _) => self.close_span(record, record.at_nanos),
            (RecordKind::Event, "task.submit") => {
                let submitted = self.on_submit(record);
                self.then_early_loss(submitted, record)
            }
            (RecordKind::Event, "task.scheduled") => self.on_scheduled(record),
            (RecordKind::Event, "object.put") => self.on_put(record),
            (RecordKind::Event, "object.get") => self.on_get(record),
            (RecordKind::Event, "context") => self.on_context(record),
            (RecordKind::Event, "resource.sample") => self.on_resources(record),
            (RecordKind::Event, "node.state") => self.on_node_state(record),
            (RecordKind::Event, "task.lost") => self.on_lost(record),
            (RecordKind::Event, "insight.dropped") => u64_field(record, "count").is_some_and(|n| {
                self.stats.lost += n;
                true
            }),
            (RecordKind::Event, "placement_group.placed") => self.on_group_placed(record),
            (RecordKind::Event, "placement_group.removed") => str_field(record, "group_id")
                .is_some_and(|g| {
                    self.groups.remove(&g);
                    true
                }),
            _ => false,
        };
        self.count(understood);
    }

    /// Applies one record of a batch as its thread wrote it: a compact
    /// shape is read as it is (see [`super::facts`]), with the same
    /// effect as [`Self::apply`] of its expansion.
    pub(crate) fn apply_packed(&mut self, packed: Packed<'_>) {
        let understood = match packed {
            Packed::Full(record) => return self.apply(record),
            Packed::Submit(submit, thread) => {
                let f = Typed(submit, thread);
                self.advance(submit.at);
                let submitted = self.on_submit(&f);
                self.then_early_loss(submitted, &f)
            }
            Packed::Run(run, thread) => {
                self.advance(run.at);
                let kind = match run.kind {
                    RunShape::Task => CallKind::Task,
                    RunShape::ActorCall => CallKind::ActorCall,
                    RunShape::ActorCreate => CallKind::ActorCreate,
                };
                self.start_run(&Typed(run, thread), kind)
            }
            Packed::Close(close, thread) => {
                self.advance(close.at);
                self.close_span(&Typed(close, thread), close.at)
            }
            Packed::Object(object, thread) => {
                let f = Typed(object, thread);
                self.advance(object.at);
                if object.is_get() {
                    self.on_get(&f)
                } else {
                    self.on_put(&f)
                }
            }
        };
        self.count(understood);
    }

    /// A run's opening: its task starts, a loss that came first applies
    /// (not to a constructor's run), and a run recorded as one record
    /// closes.
    fn start_run(&mut self, record: &impl Facts, kind: CallKind) -> bool {
        let started = self.start_task(record, kind);
        let started = match kind {
            CallKind::ActorCreate => started,
            CallKind::Task | CallKind::ActorCall => self.then_early_loss(started, record),
        };
        self.then_closed(started, record)
    }

    /// Moves the views' time to `at` (if later), and counts the calls
    /// whose caller's records never came once time (any record's) has
    /// passed their wait.
    fn advance(&mut self, at: u64) {
        self.now = self.now.max(at);
        if !self.orphans.is_empty() {
            self.expire_orphans();
        }
    }

    fn count(&mut self, understood: bool) {
        if understood {
            self.stats.applied += 1;
        } else {
            self.stats.ignored += 1;
        }
    }

    /// `understood`, after a run's opening was applied: if the opening
    /// also says when the run closed ([`crate::CLOSED_AT`]: the runtime's
    /// run with nothing recorded inside it), closed now, unless that is
    /// past the horizon (a replay at an earlier time).
    fn then_closed(&mut self, understood: bool, record: &impl Facts) -> bool {
        if let (true, Some(closed)) = (understood, record.closed_at()) {
            if closed <= self.horizon {
                self.now = self.now.max(closed);
                self.close_span(record, closed.max(record.at()));
            }
        }
        understood
    }

    /// Until when closes folded into openings are applied (see
    /// [`Self::then_closed`]); the default is all of them.
    pub(crate) fn set_horizon(&mut self, at_nanos: u64) {
        self.horizon = at_nanos;
    }

    fn drop_record(&mut self) -> bool {
        self.stats.dropped += 1;
        true
    }

    /// The task a record is about: its `task_id` field, else the task whose
    /// span encloses it, else `None` (the driver).
    fn subject_task(&self, record: &impl Facts) -> Option<IdKey> {
        record
            .task_key()
            .or_else(|| self.task_of_span(record.parent()))
    }

    fn task_of_span(&self, span: u64) -> Option<IdKey> {
        match self.spans.get(&span)? {
            SpanRole::Task(id) | SpanRole::Wait(id) => Some(id.clone()),
            SpanRole::User(user) => Some(user.task.clone()),
        }
    }

    fn caller_info(&mut self, parent: Option<&IdKey>) -> CallerInfo {
        let Some(parent) = parent else {
            return CallerInfo {
                node: LogicalNode::Driver,
                path: Some(PathTable::ROOT),
                labels: self.driver_labels,
                lane: None,
                via_span: false,
            };
        };
        // A caller only submitted so far has no place in the call paths:
        // its call waits for its start like a caller not yet seen (its
        // records, from another process, can come after its callee's).
        if let Some(t) = self.tasks.get(parent).filter(|t| t.started_at.is_some()) {
            return CallerInfo {
                node: t.logical_node(),
                path: t.path,
                labels: t.labels,
                lane: t.lane,
                via_span: false,
            };
        }
        if let Some(r) = self.recent.get(parent) {
            return CallerInfo {
                node: r.node.clone(),
                path: r.path,
                labels: r.labels,
                lane: r.lane,
                via_span: false,
            };
        }
        CallerInfo {
            node: LogicalNode::Unknown,
            path: self.paths.child(PathTable::ROOT, &Arc::from("[unknown]")),
            labels: 0,
            lane: None,
            via_span: false,
        }
    }

    /// [`Self::caller_info`], placed under the caller's application span
    /// `span` (0: none) when that span is known, open or recently closed,
    /// and belongs to `parent`: work submitted inside `reward_fn` is a
    /// frame under `reward_fn`, not beside it.
    fn caller_info_in(&mut self, parent: Option<&IdKey>, span: u64) -> CallerInfo {
        let mut caller = self.caller_info(parent);
        let Some(parent) = parent.filter(|_| span != 0 && caller.node != LogicalNode::Unknown)
        else {
            return caller;
        };
        let place = match self.spans.get(&span) {
            Some(SpanRole::User(user)) if &user.task == parent => {
                Some((user.path, user.labels, user.lane))
            }
            _ => self
                .closed_spans
                .get(&span)
                .filter(|c| &c.task == parent)
                .map(|c| (c.path, c.labels, c.lane)),
        };
        if let Some((path, labels, lane)) = place {
            caller.path = path;
            caller.labels = labels;
            caller.lane = lane;
            caller.via_span = true;
        }
        caller
    }

    /// Whether nothing more will be learnt of application span `span` (0:
    /// none): it is known, open or recently closed (whether or not it is
    /// the caller's).
    fn span_settled(&self, span: u64) -> bool {
        span == 0
            || matches!(self.spans.get(&span), Some(SpanRole::User(_)))
            || self.closed_spans.get(&span).is_some()
    }

    /// The application span a submit or run record names as its caller's
    /// (`parent_span`), or the user span it was recorded in (records that
    /// came through `tracing`), or 0.
    fn parent_span_of(&self, record: &impl Facts) -> u64 {
        if let Some(span) = record.parent_span() {
            return span;
        }
        match self.spans.get(&record.parent()) {
            Some(SpanRole::User(_)) => record.parent(),
            _ => 0,
        }
    }

    /// A new live task from a submit or start record.
    fn new_task(&mut self, kind: CallKind, record: &impl Facts) -> Box<LiveTask> {
        let parent = record
            .parent_task_key()
            .or_else(|| self.task_of_span(record.parent()));
        let parent_span = self.parent_span_of(record);
        let caller = self.caller_info_in(parent.as_ref(), parent_span);
        Box::new(LiveTask {
            kind,
            name: None,
            class: None,
            actor_id: None,
            parent,
            parent_span,
            span_resolved: caller.via_span || self.span_settled(parent_span),
            caller: caller.node,
            caller_path: caller.path,
            caller_lane: caller.lane,
            labels: caller.labels,
            inherited: caller.labels,
            submitted_at: None,
            started_at: None,
            scheduled_at: None,
            node_id: None,
            worker_id: None,
            thread: record.thread(),
            path: None,
            lane: None,
            waits: Vec::new(),
            waited_nanos: 0,
            blocked_nanos: 0,
            failed: false,
            attempt: 0,
            run_span: 0,
            user_spans_open: 0,
            inner_nanos: 0,
        })
    }

    /// A submitted task was placed: on a node (`node_id`), and on a worker
    /// (`worker_id`) when pushed to one. The submit may arrive later (it is
    /// recorded on another thread): the placement then waits for it in a
    /// small table. A placement of a task that already finished splits its
    /// recorded `submitted` slice (see `GanttAgg::place_late`).
    fn on_scheduled(&mut self, record: &Record) -> bool {
        let Some(id) = task_field(record, "task_id") else {
            return false;
        };
        let node = str_field(record, "node_id");
        match self.tasks.get_mut(&id) {
            Some(task) => Self::place(task, record.at_nanos, node),
            None if self.recent.get(&id).is_some() => {
                self.gantt.place_late(&id, record.at_nanos);
            }
            None => {
                if self.pending_placements.insert(id, (record.at_nanos, node)) {
                    self.stats.dropped += 1;
                }
            }
        }
        true
    }

    /// Notes a task's placement unless it already started.
    fn place(task: &mut LiveTask, at_nanos: u64, node: Option<Id>) {
        if task.started_at.is_none() {
            // The first placement counts (pushed to a worker, then perhaps
            // queued again by that worker's own admission).
            task.scheduled_at.get_or_insert(at_nanos);
            if let Some(node) = node {
                task.node_id = Some(node);
            }
        }
    }

    /// A task's placement that arrived before the task itself.
    fn take_placement(&mut self, id: &IdKey, task: &mut LiveTask) {
        if let Some((at, node)) = self.pending_placements.remove(id) {
            Self::place(task, at, node);
        }
    }

    fn on_submit(&mut self, record: &impl Facts) -> bool {
        let Some(id) = record.task_key() else {
            return false;
        };
        // One lookup for a task known here (its submit came before, or it
        // started first); a new task's one more is its insert.
        let started_first = match self.tasks.get_mut(&id) {
            Some(t) if t.submitted_at.is_none() && t.started_at.is_some() => true,
            Some(t) => {
                t.submitted_at.get_or_insert(record.at());
                return true;
            }
            None => false,
        };
        if started_first {
            // It started before its submit record arrived (another
            // thread's or process's records came first): the labels it
            // inherits are its caller's now, at submit, not when it
            // started. Kept if it already labelled itself.
            let span = self.parent_span_of(record);
            let learnt = span != 0 && self.tasks.get(&id).is_some_and(|t| t.parent_span == 0);
            if let Some(mut task) = learnt.then(|| self.tasks.remove(&id)).flatten() {
                // Its run did not say in which of its caller's spans it
                // was submitted; its submit does.
                task.parent_span = span;
                task.span_resolved = false;
                self.resolve_caller(&mut task);
                self.tasks.insert(id.clone(), task);
            }
            let (parent, span) = self
                .tasks
                .get(&id)
                .map_or((None, 0), |t| (t.parent.clone(), t.parent_span));
            let at_submit = self.caller_info_in(parent.as_ref(), span).labels;
            let actor_labels = self.actor_labels_of(&id);
            let labels = self.with_actor_labels(at_submit, actor_labels);
            if let Some(task) = self.tasks.get_mut(&id) {
                task.submitted_at.get_or_insert(record.at());
                if task.labels == task.inherited {
                    task.labels = labels;
                    task.inherited = labels;
                }
            }
            return true;
        }
        if self.recent.get(&id).is_some() || self.orphans.contains(&id) {
            return true; // it already ran: the submit arrived late
        }
        if self.tasks.len() + self.orphans.len() >= self.limits.max_live_tasks {
            return self.drop_record();
        }
        let kind = if record.names_actor() {
            CallKind::ActorCall
        } else {
            CallKind::Task
        };
        let mut task = self.new_task(kind, record);
        self.take_placement(&id, &mut task);
        record.fill_task(&mut task);
        // A submit names the actor but not its class; a queued call is then
        // still named `Class.method` in the stack view.
        if task.class.is_none() {
            if let Some(info) = task.actor_id.as_ref().and_then(|a| self.actors.get(a)) {
                task.class.clone_from(&info.class);
            }
        }
        task.submitted_at = Some(record.at());
        self.tasks.insert(id, task);
        true
    }

    fn start_task(&mut self, record: &impl Facts, kind: CallKind) -> bool {
        let id = match kind {
            // A creation is known by its task id when the span gives one
            // (what its constructor's children name as their parent).
            CallKind::ActorCreate => match (record.task_key(), record.actor_id()) {
                (Some(task), Some(_)) => task,
                (None, Some(actor)) => IdKey::text(format!("actor.create:{actor}")),
                (_, None) => return false,
            },
            _ => record
                .task_key()
                .unwrap_or_else(|| IdKey::text(format!("span:{}", record.span()))),
        };
        if self.spans.len() >= self.limits.max_live_spans {
            return self.drop_record();
        }
        // A later attempt starts while an earlier run of the task still
        // runs here: that run was lost (its owner's `task.lost`, from
        // another process, may come after this start): it ends as failed
        // now, and the loss, when it comes, names a run already ended.
        // (The attempt is read only for a task already running: rare.)
        // One lookup in the common case: the task is taken out first.
        let mut known = self.tasks.remove(&id);
        if known
            .as_ref()
            .is_some_and(|t| t.started_at.is_some() && record.attempt().unwrap_or(0) > t.attempt)
        {
            // Failed where it lies in the table (rare: lookups more).
            if let Some(lost) = known.take() {
                self.tasks.insert(id.clone(), lost);
            }
            self.fail_task(&id, record.at());
            known = self.tasks.remove(&id);
        }
        let mut task = match known {
            Some(task) => task,
            None if self.tasks.len() + self.orphans.len() >= self.limits.max_live_tasks => {
                return self.drop_record()
            }
            None => {
                let mut task = self.new_task(kind, record);
                self.take_placement(&id, &mut task);
                task
            }
        };
        task.kind = kind;
        record.fill_task(&mut task);
        if let (Some(actor), CallKind::ActorCall | CallKind::ActorCreate) = (&task.actor_id, kind) {
            self.note_actor(actor.clone(), &mut task);
        }
        if kind == CallKind::ActorCall {
            // Labels its constructor set stick to the instance: every call
            // carries them.
            let actor = task.actor_id.as_ref().and_then(|a| self.actors.get(a));
            let actor_labels = actor.map_or(0, |a| a.ctor_labels);
            if task.labels == task.inherited {
                task.labels = self.with_actor_labels(task.labels, actor_labels);
                task.inherited = task.labels;
            }
        }
        task.started_at = Some(record.at());
        task.thread = record.thread();
        task.path = task.caller_path.and_then(|p| self.frame_path(p, &task));
        if task.path.is_none() {
            self.stats.dropped += 1;
        }
        task.lane = self.lane_for(&task);
        task.run_span = record.span();
        self.spans.insert(record.span(), SpanRole::Task(id.clone()));
        self.tasks.insert(id.clone(), task);
        self.adopt_orphans(&id);
        true
    }

    /// Sets `task`'s caller, path and inherited labels from its parent, if
    /// the parent is known by now.
    /// The same for a task whose caller is known but whose caller's
    /// application span was not yet ([`LiveTask::span_resolved`]): it moves
    /// under that span's frame once the span is known.
    fn resolve_caller(&mut self, task: &mut LiveTask) {
        let caller = self.caller_info_in(task.parent.as_ref(), task.parent_span);
        task.span_resolved |= caller.via_span || self.span_settled(task.parent_span);
        if task.caller != LogicalNode::Unknown && !caller.via_span {
            return; // nothing learnt
        }
        // Only a caller that has a place in the call paths (started): else
        // the task keeps its `[unknown]` path rather than losing it.
        let (LogicalNode::Driver | LogicalNode::Function(_) | LogicalNode::Actor { .. }, Some(at)) =
            (&caller.node, caller.path)
        else {
            return;
        };
        let path = match task.started_at {
            Some(_) => match self.frame_path(at, task) {
                Some(p) => Some(p),
                None => return,
            },
            None => task.path,
        };
        self.stats.late_callers += 1;
        task.caller = caller.node;
        task.caller_path = caller.path;
        task.caller_lane = caller.lane;
        task.path = path;
        if task.labels == task.inherited {
            let ctor = task
                .actor_id
                .as_ref()
                .filter(|_| task.kind == CallKind::ActorCall)
                .and_then(|a| self.actors.get(a))
                .map_or(0, |a| a.ctor_labels);
            let labels = self.with_actor_labels(caller.labels, ctor);
            task.labels = labels;
            task.inherited = labels;
        }
    }

    /// Records where an actor lives (and fills in what the call did not say).
    fn note_actor(&mut self, actor: Id, task: &mut LiveTask) {
        if let Some(info) = self.actors.get_mut(&actor) {
            if task.class.is_some() {
                info.class.clone_from(&task.class);
            }
            if task.node_id.is_some() {
                info.node_id.clone_from(&task.node_id);
            }
            if task.worker_id.is_some() {
                info.worker_id.clone_from(&task.worker_id);
            }
            if task.class.is_none() {
                task.class.clone_from(&info.class);
            }
            if task.node_id.is_none() {
                task.node_id.clone_from(&info.node_id);
            }
            if task.worker_id.is_none() {
                task.worker_id.clone_from(&info.worker_id);
            }
            return;
        }
        let info = ActorInfo {
            class: task.class.clone(),
            node_id: task.node_id.clone(),
            worker_id: task.worker_id.clone(),
            labels: task.labels,
            ctor_labels: 0,
            usage: ActorUsage::default(),
        };
        if self.actors.insert(actor, info) {
            self.stats.evicted_actors += 1;
        }
    }

    /// The path of `task`'s frame under `at`, its caller's path; `None`
    /// when the path table is full.
    fn frame_path(&mut self, at: PathId, task: &LiveTask) -> Option<PathId> {
        let frame = &call_names(&mut self.memo, task).frame;
        self.paths.child(at, frame)
    }

    fn lane_for(&mut self, task: &LiveTask) -> Option<LaneId> {
        let (is_task, ids, thread) = match task.kind {
            CallKind::Task => (
                true,
                [task.node_id.as_ref(), task.worker_id.as_ref(), None],
                task.thread,
            ),
            CallKind::ActorCall | CallKind::ActorCreate => (
                false,
                [
                    task.node_id.as_ref(),
                    task.class.as_ref(),
                    task.actor_id.as_ref(),
                ],
                0,
            ),
        };
        let Self {
            memo, lanes, stats, ..
        } = self;
        let lane = memo.lane(is_task, ids, thread, || Self::find_lane(lanes, task));
        if lane.is_none() {
            stats.dropped += 1;
        }
        lane
    }

    fn find_lane(lanes: &mut super::model::Lanes, task: &LiveTask) -> Option<LaneId> {
        let (process, name): (Id, String) = match task.kind {
            CallKind::Task => (
                task.node_id.clone().unwrap_or_else(|| Arc::from("local")),
                format!(
                    "{}/thread-{}",
                    task.worker_id.as_deref().unwrap_or("worker"),
                    task.thread
                ),
            ),
            CallKind::ActorCall | CallKind::ActorCreate => (
                task.node_id.clone().unwrap_or_else(|| Arc::from("actors")),
                format!(
                    "{} {}",
                    task.class.as_deref().unwrap_or("?"),
                    task.actor_id.as_deref().unwrap_or("?")
                ),
            ),
        };
        lanes.lane(&process, Arc::from(name))
    }

    /// Closes `record`'s span at `at`: a close record, or an opening
    /// that says it closed (then an actor run without `cpu_nanos` was
    /// counted at its wall time, the record's own span).
    fn close_span(&mut self, record: &impl Facts, at: u64) -> bool {
        match self.spans.remove(&record.span()) {
            Some(SpanRole::Task(id)) => {
                let one_record = record.kind() == RecordKind::SpanNew;
                let ended = Ended {
                    cpu_nanos: record
                        .cpu_nanos()
                        .or_else(|| one_record.then(|| at.saturating_sub(record.at()))),
                    failed: record.failed(),
                };
                self.finish_task(&id, at, ended);
                true
            }
            Some(SpanRole::Wait(id)) => {
                self.end_wait(&id, record.span(), at);
                true
            }
            Some(SpanRole::User(user)) => {
                self.end_user_span(record.span(), *user, at);
                true
            }
            None => false,
        }
    }

    /// A run ended at `at`, as `ended` says.
    fn finish_task(&mut self, id: &IdKey, at: u64, ended: Ended) {
        let Some(mut task) = self.tasks.remove(id) else {
            return;
        };
        task.failed |= ended.failed;

        if (task.caller == LogicalNode::Unknown && task.parent.is_some()) || !task.span_resolved {
            // Its caller (or the caller's span it was submitted in) was not
            // known when it started (the caller's records, from another
            // process, came later): look again now that more have arrived.
            self.resolve_caller(&mut task);
        }
        for wait in std::mem::take(&mut task.waits) {
            self.spans.remove(&wait.span);
            self.record_wait_end(id, &mut task, wait, at);
        }
        if let Some(actor) = task
            .actor_id
            .as_ref()
            .filter(|_| task.kind != CallKind::Task)
        {
            if let Some(info) = self.actors.get_mut(actor) {
                let start = task.started_at.unwrap_or(at);
                let running = at.saturating_sub(start).saturating_sub(task.blocked_nanos);
                info.usage.add(running, ended.cpu_nanos);
            }
        }
        let room = self.tasks.len() + self.orphans.len() < self.limits.max_live_tasks;
        // Still unknown: wait for the caller's records (bounded with the
        // live tasks), rather than count it under `unknown`; or for the
        // opening of the caller's span it was submitted in.
        let wait_for = match &task.parent {
            Some(parent) if room && task.caller == LogicalNode::Unknown => Some(parent.clone()),
            Some(_) if room && !task.span_resolved => Some(span_key(task.parent_span)),
            _ => None,
        };
        match wait_for {
            Some(key) => self.orphans.park(
                key,
                Orphan {
                    id: id.clone(),
                    task,
                    at,
                    seq: 0,
                },
            ),
            None => self.fold_finished(id, task, at),
        }
        self.expire_orphans();
    }

    /// Counts the finished calls that waited for `parent`, now started.
    fn adopt_orphans(&mut self, parent: &IdKey) {
        for mut orphan in self.orphans.adopt(parent) {
            self.resolve_caller(&mut orphan.task);
            if orphan.task.span_resolved {
                self.fold_finished(&orphan.id, orphan.task, orphan.at);
            } else {
                // Its caller is known now, not yet the caller's span it
                // was submitted in: it waits on for that (its finish time
                // still bounds the wait).
                self.orphans.park(span_key(orphan.task.parent_span), orphan);
            }
        }
    }

    /// Counts, under whatever caller they have, the calls that waited
    /// longer than [`ORPHAN_WAIT_NANOS`] of record time.
    pub(super) fn expire_orphans(&mut self) {
        let before = self.now.saturating_sub(super::ORPHAN_WAIT_NANOS);
        while let Some(orphan) = self.orphans.pop_expired(before) {
            self.fold_finished(&orphan.id, orphan.task, orphan.at);
        }
    }

    /// Folds a finished call into the logical, flame and Gantt aggregates
    /// and remembers it.
    fn fold_finished(&mut self, id: &IdKey, task: Box<LiveTask>, at: u64) {
        let start = task.started_at.unwrap_or(at);
        let nanos = at.saturating_sub(start);
        let Self {
            memo,
            gantt,
            stats,
            logical,
            flame,
            recent,
            ..
        } = self;
        // Borrowed from the memo, and the task's own ids moved, not
        // cloned: every clone and drop of a name is an atomic operation.
        let names = call_names(memo, &task);
        if let Some(lane) = task.lane {
            for slice in task.lifecycle_slices(&names.display, id, lane, start, nanos, true) {
                if gantt.push(slice) {
                    stats.evicted_slices += 1;
                }
            }
        }
        if let Some(path) = task.path {
            if !flame.on_finish(
                path,
                task.labels,
                nanos,
                task.waited_nanos,
                task.inner_nanos,
            ) {
                stats.dropped += 1;
            }
        }
        // The stack view names instances (`Class[actor].method`).
        let name = names.instance.clone();
        let node = task.logical_node();
        let edge = task.edge_name();
        let LiveTask {
            caller,
            parent,
            node_id,
            path,
            labels,
            lane,
            kind,
            failed,
            ..
        } = *task;
        let key = CallKey {
            from: caller,
            to: node.clone(),
            name: edge,
            kind,
            labels,
        };
        if !logical.on_call(key, nanos, failed) {
            stats.dropped += 1;
        }
        let recent_task = RecentTask {
            name,
            parent,
            node,
            path,
            labels,
            lane,
            node_id,
        };
        if recent.insert(id.clone(), recent_task) {
            stats.evicted_recent += 1;
        }
    }

    fn push_slice(&mut self, slice: StoredSlice) {
        if self.gantt.push(slice) {
            self.stats.evicted_slices += 1;
        }
    }

    /// A span of another name opened inside a task (or inside such a
    /// span): the application's own, a frame under the task. One with no
    /// recorded parent is not understood (counted as ignored).
    fn begin_user_span(&mut self, record: &Record) -> bool {
        let (task, path, labels, lane) = match self.spans.get(&record.parent) {
            Some(SpanRole::Task(id)) => match self.tasks.get(id) {
                Some(t) => (id.clone(), t.path, t.labels, t.lane),
                None => return false,
            },
            Some(SpanRole::User(user)) => (user.task.clone(), user.path, user.labels, user.lane),
            Some(SpanRole::Wait(_)) | None => return false,
        };
        if self.spans.len() >= self.limits.max_live_spans {
            return self.drop_record();
        }
        // Its own labels (`labels = "k=v,…"`) add to the task's, for it.
        let own: Vec<(Id, Id)> = match record.field("labels") {
            Some(FieldValue::Str(packed)) => parse_labels(packed).collect(),
            _ => Vec::new(),
        };
        let labels = if own.is_empty() {
            labels
        } else {
            match self.labels.merge(labels, &own) {
                Some(merged) => merged,
                None => return self.drop_record(),
            }
        };
        let name = frame_name(record.name);
        let child = path.and_then(|p| self.paths.child(p, &name));
        if child.is_none() {
            self.stats.dropped += 1;
        }
        if let Some(t) = self.tasks.get_mut(&task) {
            t.user_spans_open = t.user_spans_open.saturating_add(1);
        }
        self.spans.insert(
            record.span,
            SpanRole::User(Box::new(UserSpan {
                task,
                parent_span: record.parent,
                name,
                path: child,
                lane,
                labels,
                since: record.at_nanos,
                inner_nanos: 0,
                waiting_nanos: 0,
            })),
        );
        if !self.orphans.is_empty() {
            // Calls submitted inside it that finished before it was seen.
            self.adopt_orphans(&span_key(record.span));
        }
        true
    }

    fn end_user_span(&mut self, span: u64, user: UserSpan, at: u64) {
        // Work submitted inside it may start (or be seen) after it closed.
        self.closed_spans.insert(
            span,
            SpanCaller {
                task: user.task.clone(),
                path: user.path,
                labels: user.labels,
                lane: user.lane,
            },
        );
        if let Some(t) = self.tasks.get_mut(&user.task) {
            t.user_spans_open = t.user_spans_open.saturating_sub(1);
        }
        let nanos = at.saturating_sub(user.since);
        if let Some(path) = user.path {
            if !self.flame.on_finish(
                path,
                user.labels,
                nanos,
                user.waiting_nanos,
                user.inner_nanos,
            ) {
                self.stats.dropped += 1;
            }
        }
        if let Some(lane) = user.lane {
            self.push_slice(StoredSlice {
                lane,
                name: user.name,
                task_id: user.task.clone(),
                state: SliceState::Running,
                start: user.since,
                dur: nanos,
                finished: true,
                detail: None,
                labels: user.labels,
                flow_from: None,
            });
        }
        // Its time is a child frame's, not its parent's own.
        match self.spans.get_mut(&user.parent_span) {
            Some(SpanRole::User(parent)) => {
                parent.inner_nanos = parent.inner_nanos.saturating_add(nanos);
            }
            Some(SpanRole::Task(_)) => {
                if let Some(task) = self.tasks.get_mut(&user.task) {
                    task.inner_nanos = task.inner_nanos.saturating_add(nanos);
                }
            }
            Some(SpanRole::Wait(_)) | None => {}
        }
    }

    fn begin_wait(&mut self, record: &Record) -> bool {
        let Some(id) = self.subject_task(record) else {
            self.stats.unmatched += 1;
            return false;
        };
        if self.spans.len() >= self.limits.max_live_spans {
            return self.drop_record();
        }
        let max_waits = self.limits.max_waits_per_task;
        let max_objects = self.limits.max_objects_per_wait;
        let Some(task) = self.tasks.get_mut(&id) else {
            self.stats.unmatched += 1;
            return false;
        };
        if task.waits.len() >= max_waits {
            return self.drop_record();
        }
        let mut objects = Vec::new();
        let mut producers = Vec::new();
        let listed = list_field(record, "producers");
        for (i, object) in list_field(record, "objects").into_iter().enumerate() {
            if let Some(object) = object {
                objects.push(object);
                producers.push(
                    listed
                        .get(i)
                        .cloned()
                        .flatten()
                        .map(|p| id_key("producers", &FieldValue::Str(crate::FieldStr::from(&*p)))),
                );
            }
        }
        let truncated = objects.len() > max_objects;
        objects.truncate(max_objects);
        producers.truncate(max_objects);
        task.waits.push(OpenWait {
            span: record.span,
            parent: record.parent,
            since: record.at_nanos,
            objects,
            producers,
        });
        self.spans.insert(record.span, SpanRole::Wait(id));
        if truncated {
            self.stats.dropped += 1;
        }
        true
    }

    fn end_wait(&mut self, id: &IdKey, span: u64, at: u64) {
        let Some(mut task) = self.tasks.remove(id) else {
            return;
        };
        if let Some(i) = task.waits.iter().position(|w| w.span == span) {
            let wait = task.waits.remove(i);
            self.record_wait_end(id, &mut task, wait, at);
        }
        self.tasks.insert(id.clone(), task);
    }

    fn record_wait_end(&mut self, id: &IdKey, task: &mut LiveTask, wait: OpenWait, at: u64) {
        let nanos = at.saturating_sub(wait.since);
        task.blocked_nanos = task.blocked_nanos.saturating_add(nanos);
        match self.spans.get_mut(&wait.parent) {
            // Inside a user span: that frame waited (its time is already
            // left out of the task's own).
            Some(SpanRole::User(user)) => {
                user.waiting_nanos = user.waiting_nanos.saturating_add(nanos);
            }
            _ => task.waited_nanos = task.waited_nanos.saturating_add(nanos),
        }
        if let Some(lane) = task.lane {
            self.push_slice(StoredSlice {
                lane,
                name: task.display_name(),
                task_id: id.clone(),
                state: SliceState::Blocked,
                start: wait.since,
                dur: nanos,
                finished: true,
                detail: Some(Arc::from(wait.objects.join(","))),
                labels: task.labels,
                flow_from: None,
            });
        }
    }

    /// The logical node and labels of a task, live or recent; the driver for `None`.
    fn node_and_labels(&self, task: Option<&IdKey>) -> Option<(LogicalNode, LabelSetId)> {
        let Some(id) = task else {
            return Some((LogicalNode::Driver, self.driver_labels));
        };
        if let Some(t) = self.tasks.get(id) {
            return Some((t.logical_node(), t.labels));
        }
        self.recent.get(id).map(|r| (r.node.clone(), r.labels))
    }

    fn on_put(&mut self, record: &impl Facts) -> bool {
        let Some(object) = record.object_key() else {
            return false;
        };
        let bytes = record.bytes().unwrap_or(0);
        let task = self.subject_task(record);
        let (producer, labels) = self
            .node_and_labels(task.as_ref())
            .unwrap_or((LogicalNode::Unknown, 0));
        let node_id = record.node_id().or_else(|| {
            task.as_ref()
                .and_then(|t| self.tasks.get(t))
                .and_then(|t| t.node_id.clone())
        });
        if !self.logical.on_put(producer.clone(), labels, bytes) {
            self.stats.dropped += 1;
        }
        if self
            .objects
            .insert(object, ObjectInfo { producer, node_id })
        {
            self.stats.evicted_objects += 1;
        }
        true
    }

    fn on_get(&mut self, record: &impl Facts) -> bool {
        let Some(object) = record.object_key() else {
            return false;
        };
        let bytes = record.bytes().unwrap_or(0);
        let task = self.subject_task(record);
        let (consumer, labels) = self
            .node_and_labels(task.as_ref())
            .unwrap_or((LogicalNode::Unknown, 0));
        let (producer, put_node) = match self.objects.get(&object) {
            Some(o) => (o.producer.clone(), o.node_id.clone()),
            None => self.return_producer(&object),
        };
        let producer_node = record.producer_node().or(put_node);
        let consumer_node = record.node_id().or_else(|| {
            task.as_ref()
                .and_then(|t| self.tasks.get(t))
                .and_then(|t| t.node_id.clone())
        });
        let locality = match (producer_node, consumer_node) {
            (Some(a), Some(b)) if a == b => Locality::SameNode,
            (Some(_), Some(_)) => Locality::CrossNode,
            _ => Locality::Unknown,
        };
        let consumer_id = task.unwrap_or_else(|| IdKey::Text(static_id("driver")));
        if !self
            .logical
            .on_get(producer, consumer, &consumer_id, labels, bytes, locality)
        {
            self.stats.dropped += 1;
        }
        true
    }

    /// A placement group's bundles were reserved on their nodes.
    fn on_group_placed(&mut self, record: &Record) -> bool {
        let Some(group) = str_field(record, "group_id") else {
            return false;
        };
        let mut bundle_nodes = list_field(record, "bundle_nodes");
        if bundle_nodes.len() > self.limits.max_bundles_per_group {
            bundle_nodes.truncate(self.limits.max_bundles_per_group);
            self.stats.dropped += 1;
        }
        let info = GroupInfo {
            strategy: str_field(record, "strategy"),
            bundle_nodes,
        };
        if self.groups.insert(group, info) {
            self.stats.evicted_groups += 1;
        }
        true
    }

    /// The producer of an object nobody `put`: a task's return object
    /// (`obj-<owner>.<seq>` is the result of `task-<owner>.<seq>`), as the
    /// task's caller-graph node and the node it ran on, when the task is
    /// still known.
    fn return_producer(&self, object: &IdKey) -> (LogicalNode, Option<Id>) {
        let task = match object {
            IdKey::Num(..) => object.clone(),
            // Named by hand (`obj-x`): the task of the same name (`task-x`).
            IdKey::Text(text) => match text.strip_prefix("obj-") {
                Some(rest) => IdKey::text(format!("task-{rest}")),
                None => return (LogicalNode::Unknown, None),
            },
        };
        // One lookup each: a live task, else a recent one.
        match self.tasks.get(&task) {
            Some(live) => (live.logical_node(), live.node_id.clone()),
            None => match self.recent.get(&task) {
                Some(r) => (r.node.clone(), r.node_id.clone()),
                None => (LogicalNode::Unknown, None),
            },
        }
    }

    fn on_context(&mut self, record: &Record) -> bool {
        let mut labels: Vec<(Id, Id)> = Vec::new();
        for (key, value) in record.fields.iter() {
            match (key, value) {
                ("task_id" | "message", _) => {}
                // `tracing` field names are static, so a runtime emits
                // dynamic labels packed into one `labels = "k1=v1,k2=v2"`.
                ("labels", FieldValue::Str(packed)) => labels.extend(parse_labels(packed)),
                _ => labels.push((Arc::from(key), id_of(key, value))),
            }
        }
        let task = self.subject_task(record);
        let base = match &task {
            None => self.driver_labels,
            Some(id) => match self.tasks.get(id) {
                Some(t) => t.labels,
                None => {
                    self.stats.unmatched += 1;
                    return false;
                }
            },
        };
        let Some(merged) = self.labels.merge(base, &labels) else {
            return self.drop_record();
        };
        match task.and_then(|id| self.tasks.get_mut(&id)) {
            Some(t) => {
                t.labels = merged;
                // In a constructor: the labels are the instance's, for its
                // later calls (and the physical view).
                if let (CallKind::ActorCreate, Some(actor)) = (t.kind, t.actor_id.clone()) {
                    let own = self.actors.get(&actor).map(|info| info.ctor_labels);
                    if let Some(own) = own {
                        let own = self.labels.merge(own, &labels).unwrap_or(own);
                        if let Some(info) = self.actors.get_mut(&actor) {
                            info.labels = merged;
                            info.ctor_labels = own;
                        }
                    }
                }
            }
            None => self.driver_labels = merged,
        }
        true
    }

    /// The labels the constructor of the actor that call `id` goes to set
    /// (0 for none, or for a task).
    fn actor_labels_of(&self, id: &IdKey) -> LabelSetId {
        let Some(t) = self.tasks.get(id) else {
            return 0;
        };
        if t.kind != CallKind::ActorCall {
            return 0;
        }
        t.actor_id
            .as_ref()
            .and_then(|a| self.actors.get(a))
            .map_or(0, |a| a.ctor_labels)
    }

    /// `base` with an actor instance's labels merged over it.
    fn with_actor_labels(&mut self, base: LabelSetId, actor: LabelSetId) -> LabelSetId {
        if actor == 0 || actor == base {
            return base;
        }
        let add: Vec<(Id, Id)> = self.labels.get(actor).to_vec();
        self.labels.merge(base, &add).unwrap_or(base)
    }

    /// A `resource.sample`: per-process values into the process's ring,
    /// other numeric values as the node's latest (see [`super::physical`]).
    fn on_resources(&mut self, record: &Record) -> bool {
        let Some(node) = str_field(record, "node_id") else {
            return false;
        };
        let mut fields = ProcessFields::for_pid(u64_field(record, "pid"));
        let mut values: Vec<(&str, f64)> = Vec::new();
        for (key, _) in record.fields.iter() {
            if matches!(key, "node_id" | "worker_id" | "pid" | "message") {
                continue;
            }
            let Some(value) = number_field(record, key) else {
                continue;
            };
            if !fields.take(key, value) && value.is_finite() {
                values.push((key, value));
            }
        }
        if fields.is_empty() && values.is_empty() {
            return false;
        }
        let process = str_field(record, "worker_id")
            .or_else(|| fields.pid.map(|pid| Arc::from(format!("pid-{pid}"))));
        let evicted = self
            .resources
            .record(node, process, fields, &values, record.at_nanos);
        self.stats.evicted_resource_nodes += u64::from(evicted.node);
        self.stats.evicted_resource_processes += u64::from(evicted.process);
        true
    }

    /// `node.state`: what the control store says of a node (registered,
    /// or declared dead), so the physical view shows it idle or dead.
    fn on_node_state(&mut self, record: &Record) -> bool {
        let Some(node) = str_field(record, "node_id") else {
            return false;
        };
        let text = |key: &str| {
            record
                .field(key)
                .and_then(FieldValue::as_str)
                .map(str::to_owned)
        };
        let amount = |key: &str| number_field(record, key).filter(|v| v.is_finite() && *v >= 0.0);
        let registration = NodeRegistration {
            alive: record
                .field("alive")
                .and_then(FieldValue::as_bool)
                .unwrap_or(true),
            address: text("address"),
            death_cause: text("death_cause"),
            cpu_total: amount("cpu_total"),
            gpu_total: amount("gpu_total"),
            memory_total: amount("memory_total"),
        };
        let dead = !registration.alive;
        if self.resources.register(node.clone(), registration) {
            self.stats.evicted_resource_nodes += 1;
        }
        if dead {
            self.fail_calls_on(&node, record.at_nanos);
        }
        true
    }

    /// Node `node` died at `at`: the calls running there, and those queued
    /// for actors that lived there, end as failed (their own records will
    /// not come). A call the runtime retries elsewhere starts again.
    fn fail_calls_on(&mut self, node: &Id, at: u64) {
        let on_node = |task: &LiveTask, actors: &FifoMap<Id, ActorInfo>| {
            let placed = match (&task.node_id, task.state()) {
                (Some(n), TaskState::Running | TaskState::Blocked) => Some(n),
                (_, TaskState::Submitted) => task
                    .actor_id
                    .as_ref()
                    .and_then(|a| actors.get(a))
                    .and_then(|a| a.node_id.as_ref()),
                _ => None,
            };
            placed == Some(node)
        };
        let lost: Vec<IdKey> = self
            .tasks
            .iter()
            .filter(|(_, task)| on_node(task, &self.actors))
            .map(|(id, _)| id.clone())
            .collect();
        // Their user spans in one pass (not one per call).
        let mut with_user_spans: hashbrown::HashSet<IdKey> = hashbrown::HashSet::new();
        for id in &lost {
            if let Some(task) = self.tasks.get_mut(id) {
                if task.user_spans_open > 0 {
                    task.user_spans_open = 0;
                    with_user_spans.insert(id.clone());
                }
            }
        }
        if !with_user_spans.is_empty() {
            self.spans.retain(
                |_, role| !matches!(role, SpanRole::User(user) if with_user_spans.contains(&user.task)),
            );
        }
        for id in lost {
            self.fail_task(&id, at);
        }
    }

    /// `task.lost`: the owner of a call says a run of it was lost (its
    /// worker or node died: `attempt` is the run lost, and a retry follows)
    /// or that it failed for good (no `attempt`). Its live run, if it is
    /// that one, ends as failed; a retry's run, already started, is not.
    fn on_lost(&mut self, record: &Record) -> bool {
        let Some(id) = task_field(record, "task_id") else {
            return false;
        };
        let attempt = u64_field(record, "attempt");
        match self.tasks.get(&id) {
            Some(task)
                if task.state() == TaskState::Submitted
                    || attempt.is_none_or(|a| a == task.attempt) =>
            {
                let submitted = task.state() == TaskState::Submitted;
                self.fail_task(&id, record.at_nanos);
                if submitted && attempt.is_some() {
                    // The lost run's start may still come (shipped by its
                    // worker before it died): dropped when it does.
                    self.lost_early.insert(
                        id,
                        EarlyLoss {
                            attempt,
                            counted: true,
                        },
                    );
                }
            }
            // A retry already runs: the loss is of a run the views never saw.
            Some(_) => {}
            // Its run (or submit) has not arrived: the loss waits for it.
            // (The oldest waiting loss makes room: its task never came.)
            None => {
                self.lost_early.insert(
                    id,
                    EarlyLoss {
                        attempt,
                        counted: false,
                    },
                );
            }
        }
        true
    }

    /// `understood`, after a submit or a run's start was applied (and so
    /// understood): a loss of its task that came first ends it now.
    fn then_early_loss(&mut self, understood: bool, record: &impl Facts) -> bool {
        if understood && self.lost_early.len() > 0 {
            self.apply_early_loss(record);
        }
        understood
    }

    /// A final loss ends any run of the task; a lost attempt, only that
    /// run (dropped if it was counted while queued).
    fn apply_early_loss(&mut self, record: &impl Facts) {
        let Some(id) = record.task_key() else {
            return;
        };
        let Some(lost) = self.lost_early.get(&id).copied() else {
            return;
        };
        let starting = record.kind() == RecordKind::SpanNew;
        let attempt = record.attempt().unwrap_or(0);
        match lost.attempt {
            Some(a) if starting && a == attempt && lost.counted => {
                // Counted when it was failed while queued.
                self.lost_early.remove(&id);
                self.discard_task(&id);
            }
            None => {
                self.lost_early.remove(&id);
                self.fail_task(&id, record.at());
            }
            Some(a) if starting && a == attempt => {
                self.lost_early.remove(&id);
                self.fail_task(&id, record.at());
            }
            // A later run started: the lost one will not come any more.
            Some(a) if starting && attempt > a => {
                self.lost_early.remove(&id);
            }
            Some(_) => {}
        }
    }

    /// Forgets live task `id` without counting it anywhere (a run already
    /// counted as failed whose start came late).
    fn discard_task(&mut self, id: &IdKey) {
        if let Some(task) = self.tasks.remove(id) {
            self.spans.remove(&task.run_span);
        }
    }

    /// Ends live task `id` at `at` as failed, forgetting its open spans
    /// (their closes will never come): its run's directly, its waits'
    /// with the task, its user spans (rare) by a scan.
    fn fail_task(&mut self, id: &IdKey, at: u64) {
        let Some(task) = self.tasks.get(id) else {
            return;
        };
        let (run_span, user_spans) = (task.run_span, task.user_spans_open);
        if run_span != 0 {
            self.spans.remove(&run_span);
        }
        if user_spans > 0 {
            self.spans
                .retain(|_, role| !matches!(role, SpanRole::User(user) if &user.task == id));
        }
        self.finish_task(
            id,
            at,
            Ended {
                cpu_nanos: None,
                failed: true,
            },
        );
    }
}

impl Sink for Views {
    fn accept(&mut self, batch: &[Record]) {
        for record in batch {
            self.apply(record);
        }
    }

    fn accept_drained(&mut self, batch: &mut crate::sink::Drained<'_>) {
        batch.apply_to(self);
    }
}
