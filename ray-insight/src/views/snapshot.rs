//! [`Snapshot`]: the five views built on request, optionally filtered by a
//! context label.

use std::sync::Arc;

use super::gantt::StoredSlice;
use super::ingest::SpanRole;
use super::model::LabelSetId;
use super::{physical, stack};
use super::{
    FlameView, GanttView, LogicalNode, LogicalView, PhysicalView, SliceState, StackView, Views,
};

/// How deep the stack view follows a user span's parents to order it
/// (deeper ones sort as this deep).
const MAX_USER_SPAN_DEPTH: u64 = 64;

/// The five views of a [`Views`] engine, optionally restricted to one context
/// label (see [`Views::filter`]). Each view is built on request from the
/// engine's current state.
#[derive(Debug, Clone)]
pub struct Snapshot<'a> {
    pub(super) views: &'a Views,
    /// For each label set id, whether it passes the filter; `None`: all pass.
    pub(super) mask: Option<Vec<bool>>,
}

impl Snapshot<'_> {
    /// The engine's counters (of all records, whatever the filter): what
    /// every export shows beside its view, so lost and refused records are
    /// never silent.
    pub fn stats(&self) -> super::Stats {
        self.views.stats()
    }

    /// The latest time the engine has seen, nanoseconds into the recording
    /// (see [`Views::now_nanos`]).
    pub fn now_nanos(&self) -> u64 {
        self.views.now_nanos()
    }

    fn keeps(&self, labels: LabelSetId) -> bool {
        self.mask
            .as_ref()
            .is_none_or(|m| m.get(labels as usize).copied().unwrap_or(false))
    }

    /// The logical graph.
    pub fn logical(&self) -> LogicalView {
        let v = self.views;
        let actors = v
            .actors
            .iter()
            .filter(|(_, info)| self.keeps(info.labels))
            .map(|(id, info)| LogicalNode::Actor {
                class: info
                    .class
                    .clone()
                    .unwrap_or_else(|| Arc::from(super::logical::UNKNOWN_CLASS)),
                actor_id: id.clone(),
            });
        let live = v.tasks.values().map(|t| super::logical::LiveCall {
            from: t.caller.clone(),
            to: t.logical_node(),
            name: t.edge_name(),
            kind: t.kind,
            labels: t.labels,
            started: t.started_at.is_some(),
        });
        v.logical.build(&|l| self.keeps(l), actors, live, &v.labels)
    }

    /// The flame graph by call path.
    pub fn flame(&self) -> FlameView {
        self.views
            .flame
            .build(&self.views.paths, &|l| self.keeps(l))
    }

    /// The Gantt chart: finished slices kept, plus live tasks drawn to
    /// [`Views::now_nanos`].
    pub fn gantt(&self) -> GanttView {
        let v = self.views;
        let mut live = Vec::new();
        for (id, task) in &v.tasks {
            let (Some(lane), Some(start)) = (task.lane, task.started_at) else {
                continue;
            };
            let name = task.display_name();
            let dur = v.now.saturating_sub(start);
            live.extend(task.lifecycle_slices(&name, id, lane, start, dur, false));
            for wait in &task.waits {
                live.push(StoredSlice {
                    lane,
                    name: name.clone(),
                    task_id: id.clone(),
                    state: SliceState::Blocked,
                    start: wait.since,
                    dur: v.now.saturating_sub(wait.since),
                    finished: false,
                    detail: Some(Arc::from(wait.objects.join(","))),
                    labels: task.labels,
                    flow_from: None,
                });
            }
        }
        live.sort_by(|a, b| (a.start, &a.task_id).cmp(&(b.start, &b.task_id)));
        v.gantt.build(&v.lanes, live, &|l| self.keeps(l))
    }

    /// The distributed stack of every running or blocked task, and deadlocks.
    pub fn stacks(&self) -> StackView {
        let v = self.views;
        // The user spans open in each task, keyed by when they opened,
        // then how deep they are nested: outermost first even when two
        // opened in the same nanosecond.
        let depth = |mut parent: u64| {
            let mut depth = 0;
            // (Bounded: a hostile log could make a loop of parents.)
            while depth < MAX_USER_SPAN_DEPTH {
                match v.spans.get(&parent) {
                    Some(SpanRole::User(outer)) => {
                        depth += 1;
                        parent = outer.parent_span();
                    }
                    _ => break,
                }
            }
            depth
        };
        let mut user_spans = stack::OpenUserSpans::new();
        for role in v.spans.values() {
            if let SpanRole::User(user) = role {
                user_spans
                    .entry(user.task())
                    .or_default()
                    .push(((user.since(), depth(user.parent_span())), user.name()));
            }
        }
        stack::build(
            &v.tasks,
            &user_spans,
            &v.recent,
            &|l| self.keeps(l),
            &v.labels,
            v.now,
        )
    }

    /// Nodes, workers, actors and running tasks.
    pub fn physical(&self) -> PhysicalView {
        let v = self.views;
        physical::build(
            &v.tasks,
            &v.actors,
            &v.resources,
            &v.groups,
            &|l| self.keeps(l),
            &v.labels,
        )
    }
}
