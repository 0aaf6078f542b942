//! The Gantt view: one lane per worker thread (`node/worker/thread`) or actor,
//! each task's states as slices, and flow arrows from caller to callee.
//!
//! Finished work is kept as slices in a ring of bounded size (the oldest are
//! evicted and counted); live tasks are drawn up to the engine's latest time.

use std::collections::VecDeque;

use serde_json::{json, Value};

use super::model::{FifoMap, Id, IdKey, LabelSetId, LaneId, Lanes};

/// The state a Gantt slice shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SliceState {
    /// Submitted, waiting to start (drawn on the lane it later ran on).
    Submitted,
    /// Placed (resources granted, or pushed to a worker), not yet started.
    Scheduled,
    /// The task's whole run, from start to finish (blocked slices nest inside).
    Running,
    /// Blocked inside a `wait` span.
    Blocked,
}

impl SliceState {
    /// `submitted`, `running` or `blocked`.
    pub fn as_str(self) -> &'static str {
        match self {
            SliceState::Submitted => "submitted",
            SliceState::Scheduled => "scheduled",
            SliceState::Running => "running",
            SliceState::Blocked => "blocked",
        }
    }
}

/// A slice as stored by the engine.
#[derive(Debug, Clone)]
pub(crate) struct StoredSlice {
    pub(crate) lane: LaneId,
    pub(crate) name: Id,
    pub(crate) task_id: IdKey,
    pub(crate) state: SliceState,
    pub(crate) start: u64,
    pub(crate) dur: u64,
    /// Whether the task or wait has ended (false: drawn to now).
    pub(crate) finished: bool,
    /// Blocked slices: the objects waited on.
    pub(crate) detail: Option<Id>,
    pub(crate) labels: LabelSetId,
    /// Running slices: the caller's lane and the time of the call.
    pub(crate) flow_from: Option<(LaneId, u64)>,
}

/// How many of the latest finished slices a late placement is looked for in.
const LATE_PLACEMENT_SEARCH: usize = 4_096;

/// Finished slices, newest last, at most `cap` stored (a `submitted`
/// slice split by a late placement is stored once and drawn as two).
///
/// Each slice has a sequence number: the n-th slice ever pushed has number
/// n, so a slice still kept is found by subtraction. The latest
/// [`LATE_PLACEMENT_SEARCH`] `submitted` slices are indexed by task: a late
/// placement finds its task's slice without a scan. (On a cluster most
/// placements come late; scanning up to 4,096 slices for each, in the
/// head, was 11 % of all CPU samples of a recorded cluster W3.) A late
/// placement does not
/// insert a slice: it notes where the `submitted` slice splits, and the
/// view draws the two halves. (Inserting one in the middle of the ring
/// moved up to 4,096 slices each time: 25 % of the head's own samples in
/// a recorded cluster W3.)
#[derive(Debug)]
pub(crate) struct GanttAgg {
    slices: VecDeque<StoredSlice>,
    /// In step with `slices`: where a late placement split a `submitted`
    /// slice into submitted and scheduled (0: not split; a split is always
    /// after its slice's start, so never 0).
    splits: VecDeque<u64>,
    /// The sequence number the next pushed slice takes.
    next_seq: u64,
    /// The latest `submitted` slice of each task, by sequence number;
    /// kept only once a placement has come late (on a cluster), so a
    /// process whose placements come in order pays nothing for it.
    submitted: FifoMap<IdKey, u64>,
    indexing: bool,
    cap: usize,
}

impl GanttAgg {
    pub(crate) fn new(cap: usize) -> Self {
        Self {
            slices: VecDeque::new(),
            splits: VecDeque::new(),
            next_seq: 0,
            submitted: FifoMap::new(LATE_PLACEMENT_SEARCH),
            indexing: false,
            cap,
        }
    }

    /// Keeps `slice`; returns whether an older slice was evicted (or this one
    /// refused, when the cap is 0).
    pub(crate) fn push(&mut self, slice: StoredSlice) -> bool {
        if self.cap == 0 {
            return true;
        }
        let evicted = self.slices.len() >= self.cap;
        if evicted {
            self.slices.pop_front();
            self.splits.pop_front();
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        if self.indexing && slice.state == SliceState::Submitted {
            self.submitted.insert(slice.task_id.clone(), seq);
        }
        self.slices.push_back(slice);
        self.splits.push_back(0);
        evicted
    }

    /// Slices kept, counting a split one once.
    pub(crate) fn len(&self) -> usize {
        self.slices.len()
    }

    /// A placement (`task.scheduled`) that reached the engine after its task
    /// had finished (on a cluster the owner's records can arrive after the
    /// worker's): the task's finished `submitted` slice, if among the latest
    /// [`LATE_PLACEMENT_SEARCH`], is split at `at` into submitted and
    /// scheduled. Whether it was found.
    pub(crate) fn place_late(&mut self, task_id: &IdKey, at: u64) -> bool {
        if !self.indexing {
            // The first late placement: index the latest submitted slices,
            // and every one from now on.
            self.indexing = true;
            let first = self.first_seq();
            let from = self.slices.len().saturating_sub(LATE_PLACEMENT_SEARCH);
            for (i, slice) in self.slices.iter().enumerate().skip(from) {
                if slice.state == SliceState::Submitted {
                    self.submitted
                        .insert(slice.task_id.clone(), first + i as u64);
                }
            }
        }
        let Some(&seq) = self.submitted.get(task_id) else {
            return false;
        };
        // Gone from the ring (evicted), or not the slice asked for: as if
        // not found.
        let Some(i) = seq
            .checked_sub(self.first_seq())
            .and_then(|i| usize::try_from(i).ok())
            .filter(|&i| i < self.slices.len())
        else {
            return false;
        };
        let submitted = &self.slices[i];
        let fits = submitted.state == SliceState::Submitted
            && self.splits[i] == 0
            && submitted.task_id == *task_id
            && submitted.start < at
            && at < submitted.start.saturating_add(submitted.dur);
        if !fits {
            return false;
        }
        self.submitted.remove(task_id);
        self.splits[i] = at;
        true
    }

    /// The sequence number of the oldest slice kept.
    fn first_seq(&self) -> u64 {
        self.next_seq - self.slices.len() as u64
    }

    /// The kept slices as drawn: a split `submitted` slice as its two
    /// halves, submitted then scheduled.
    fn drawn(&self) -> impl Iterator<Item = std::borrow::Cow<'_, StoredSlice>> {
        use std::borrow::Cow;
        self.slices
            .iter()
            .zip(&self.splits)
            .flat_map(|(slice, &split)| {
                if split == 0 {
                    return [Some(Cow::Borrowed(slice)), None];
                }
                let end = slice.start.saturating_add(slice.dur);
                let mut submitted = slice.clone();
                submitted.dur = split - slice.start;
                let mut scheduled = slice.clone();
                scheduled.state = SliceState::Scheduled;
                scheduled.start = split;
                scheduled.dur = end - split;
                [Some(Cow::Owned(submitted)), Some(Cow::Owned(scheduled))]
            })
            .flatten()
    }

    /// The view over finished slices plus `live` ones, for the label sets
    /// `keep` accepts.
    pub(crate) fn build(
        &self,
        lanes: &Lanes,
        live: Vec<StoredSlice>,
        keep: &dyn Fn(LabelSetId) -> bool,
    ) -> GanttView {
        let mut slices = Vec::new();
        let mut flows = Vec::new();
        for s in self
            .drawn()
            .chain(live.into_iter().map(std::borrow::Cow::Owned))
        {
            if !keep(s.labels) {
                continue;
            }
            if let Some((from_lane, at)) = s.flow_from {
                flows.push(GanttFlow {
                    id: flows.len() as u64 + 1,
                    from_lane,
                    from_nanos: at.min(s.start),
                    to_lane: s.lane,
                    to_nanos: s.start,
                });
            }
            slices.push(GanttSlice {
                lane: s.lane,
                name: s.name.to_string(),
                task_id: s.task_id.task().to_string(),
                state: s.state,
                start_nanos: s.start,
                dur_nanos: s.dur,
                finished: s.finished,
                detail: s.detail.as_ref().map(|d| d.to_string()),
            });
        }
        let used: std::collections::BTreeSet<LaneId> = slices
            .iter()
            .map(|s| s.lane)
            .chain(flows.iter().map(|f| f.from_lane))
            .collect();
        GanttView {
            lanes: lanes
                .iter()
                .filter(|(id, ..)| used.contains(id))
                .map(|(lane, pid, process, name)| GanttLane {
                    lane,
                    pid,
                    process: process.to_owned(),
                    name: name.to_owned(),
                })
                .collect(),
            slices,
            flows,
        }
    }
}

/// One lane: a worker thread or an actor, inside its node's process group.
#[derive(Debug, Clone, PartialEq)]
pub struct GanttLane {
    /// The lane's id (the Chrome trace `tid`).
    pub lane: u32,
    /// The process group's id (the Chrome trace `pid`), one per node.
    pub pid: u32,
    /// The process group's name: the node id, or `local` / `actors`.
    pub process: String,
    /// The lane's name: `worker/thread-N`, or `Class actor_id`.
    pub name: String,
}

/// One slice of a lane.
#[derive(Debug, Clone, PartialEq)]
pub struct GanttSlice {
    /// The lane it is drawn on.
    pub lane: u32,
    /// The task's name (function, or `Class.method`).
    pub name: String,
    /// The task's id.
    pub task_id: String,
    /// Submitted, running or blocked.
    pub state: SliceState,
    /// Start, in nanoseconds since the recording's epoch.
    pub start_nanos: u64,
    /// Duration, in nanoseconds (to the engine's latest time if not finished).
    pub dur_nanos: u64,
    /// Whether it ended (false: still going).
    pub finished: bool,
    /// For blocked slices: the objects waited on, comma-separated.
    pub detail: Option<String>,
}

/// A causality arrow from a caller's lane (at the call) to its callee's
/// running slice (at its start).
#[derive(Debug, Clone, PartialEq)]
pub struct GanttFlow {
    /// The id shared by the Chrome trace `s` and `f` events (1-based).
    pub id: u64,
    /// The caller's lane.
    pub from_lane: u32,
    /// When the call was made (submit time, or the callee's start).
    pub from_nanos: u64,
    /// The callee's lane.
    pub to_lane: u32,
    /// When the callee started.
    pub to_nanos: u64,
}

/// Lanes, slices and flow arrows.
#[derive(Debug, Clone, PartialEq)]
pub struct GanttView {
    /// Lanes with at least one slice or flow, by lane id.
    pub lanes: Vec<GanttLane>,
    /// Slices, finished ones first (oldest first), then live ones.
    pub slices: Vec<GanttSlice>,
    /// Caller → callee arrows.
    pub flows: Vec<GanttFlow>,
}

fn micros(nanos: u64) -> f64 {
    nanos as f64 / 1_000.0
}

impl GanttView {
    /// The view as Chrome trace JSON (`{"traceEvents": [...]}`), for Perfetto
    /// or `chrome://tracing`: `M` events name processes (nodes) and threads
    /// (lanes); each slice is a complete event (`ph: "X"`, `ts`/`dur` in µs);
    /// each flow is an `s` event on the caller's lane and an `f` event
    /// (`bp: "e"`) on the callee's, sharing an `id`.
    pub fn to_chrome_trace(&self) -> Value {
        let pid_of = |lane: u32| {
            self.lanes
                .iter()
                .find(|l| l.lane == lane)
                .map_or(0, |l| l.pid)
        };
        let mut events = Vec::new();
        let mut named_pids = std::collections::BTreeSet::new();
        for lane in &self.lanes {
            if named_pids.insert(lane.pid) {
                events.push(json!({
                    "ph": "M", "name": "process_name", "pid": lane.pid, "tid": 0,
                    "args": { "name": lane.process },
                }));
            }
            events.push(json!({
                "ph": "M", "name": "thread_name", "pid": lane.pid, "tid": lane.lane,
                "args": { "name": lane.name },
            }));
        }
        for s in &self.slices {
            let mut args = json!({
                "task_id": s.task_id,
                "state": s.state.as_str(),
                "finished": s.finished,
            });
            if let Some(detail) = &s.detail {
                args["objects"] = json!(detail);
            }
            let name = match s.state {
                SliceState::Running => s.name.clone(),
                SliceState::Submitted => format!("submitted {}", s.name),
                SliceState::Scheduled => format!("scheduled {}", s.name),
                SliceState::Blocked => format!("wait {}", s.name),
            };
            events.push(json!({
                "ph": "X",
                "name": name,
                "cat": s.state.as_str(),
                "pid": pid_of(s.lane),
                "tid": s.lane,
                "ts": micros(s.start_nanos),
                "dur": micros(s.dur_nanos),
                "args": args,
            }));
        }
        for f in &self.flows {
            events.push(json!({
                "ph": "s", "name": "call", "cat": "call", "id": f.id,
                "pid": pid_of(f.from_lane), "tid": f.from_lane, "ts": micros(f.from_nanos),
            }));
            events.push(json!({
                "ph": "f", "bp": "e", "name": "call", "cat": "call", "id": f.id,
                "pid": pid_of(f.to_lane), "tid": f.to_lane, "ts": micros(f.to_nanos),
            }));
        }
        json!({ "traceEvents": events, "displayTimeUnit": "ms" })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slice(task: u64, state: SliceState, start: u64, dur: u64) -> StoredSlice {
        StoredSlice {
            lane: 0,
            name: "f".into(),
            task_id: IdKey::Num(true, 1, task),
            state,
            start,
            dur,
            finished: true,
            detail: None,
            labels: 0,
            flow_from: None,
        }
    }

    /// Late placements are found by their task's index, among splits made
    /// before them and evictions at the front, and only in a slice they
    /// fall inside.
    #[test]
    fn late_placements_split_the_right_slice_after_other_splits_and_evictions() {
        let mut gantt = GanttAgg::new(64);
        for task in 0..40 {
            let t = task * 100;
            gantt.push(slice(task, SliceState::Submitted, t, 50));
            gantt.push(slice(task, SliceState::Running, t + 50, 20));
        }
        // 80 pushed into 64: tasks 0..8 are gone.
        assert!(!gantt.place_late(&IdKey::Num(true, 1, 3), 310));
        // Out of order, each split in the middle of the ring.
        for task in [30u64, 12, 39, 20, 13] {
            let t = task * 100;
            assert!(
                gantt.place_late(&IdKey::Num(true, 1, task), t + 10),
                "{task}"
            );
            // Once only.
            assert!(!gantt.place_late(&IdKey::Num(true, 1, task), t + 20));
        }
        // Outside the submitted slice: not a late placement of it.
        assert!(!gantt.place_late(&IdKey::Num(true, 1, 25), 2_560));
        let of = |task: u64| -> Vec<(SliceState, u64, u64)> {
            gantt
                .drawn()
                .filter(|s| s.task_id == IdKey::Num(true, 1, task))
                .map(|s| (s.state, s.start, s.dur))
                .collect()
        };
        assert_eq!(
            of(12),
            [
                (SliceState::Submitted, 1_200, 10),
                (SliceState::Scheduled, 1_210, 40),
                (SliceState::Running, 1_250, 20)
            ]
        );
        assert_eq!(of(25).len(), 2, "unsplit");
        assert_eq!(gantt.slices.len(), 64);
        assert_eq!(gantt.splits.len(), 64);
        assert_eq!(gantt.splits.iter().filter(|&&at| at != 0).count(), 5);
        assert_eq!(gantt.drawn().count(), 69);
    }
}
