//! The bottleneck summary: the call frames (actor instances, functions)
//! with the most self time, the longest waits, the largest data edges and
//! the deadlocks, from one snapshot. What `rayrs insight top` prints.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::snapshot::Snapshot;
use super::{FlameView, LogicalView, StackView};

/// One call frame's total over every path it ends: `Class[actor].method`
/// for an actor instance's method, the function's name for a task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopFrame {
    /// The frame.
    pub frame: String,
    /// Nanoseconds (self time, or time waiting).
    pub nanos: u64,
    /// Finished calls.
    pub calls: u64,
}

/// Data moved from one node of the logical graph to another.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopData {
    /// The producer.
    pub from: String,
    /// The consumer.
    pub to: String,
    /// Bytes got.
    pub bytes: u64,
    /// Gets.
    pub gets: u64,
}

/// The bottleneck summary; see the module docs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopView {
    /// The frames with the most self time (the time calls did not spend
    /// waiting), most first.
    pub self_time: Vec<TopFrame>,
    /// The frames whose calls waited longest (on their children, on
    /// objects), most first.
    pub waits: Vec<TopFrame>,
    /// The largest data edges, most bytes first.
    pub data: Vec<TopData>,
    /// Each deadlock, as its report line.
    pub deadlocks: Vec<String>,
}

impl Snapshot<'_> {
    /// The `n` heaviest of each kind (see [`TopView`]).
    pub fn top(&self, n: usize) -> TopView {
        TopView::from_views(&self.flame(), &self.logical(), &self.stacks(), n)
    }
}

impl TopView {
    /// The `n` heaviest of each kind from views already built of one
    /// snapshot (what [`Snapshot::top`] builds them for): a caller that
    /// has the logical view at hand need not build it twice.
    pub fn from_views(
        flame: &FlameView,
        logical: &LogicalView,
        stacks: &StackView,
        n: usize,
    ) -> TopView {
        let mut by_frame: BTreeMap<String, (u64, u64, u64)> = BTreeMap::new();
        for f in &flame.frames {
            if f.count == 0 {
                continue;
            }
            let last = f.path.rsplit(';').next().unwrap_or(&f.path).to_string();
            let e = by_frame.entry(last).or_default();
            e.0 = e.0.saturating_add(f.self_nanos);
            e.1 = e.1.saturating_add(f.waiting_nanos);
            e.2 = e.2.saturating_add(f.count);
        }
        let heaviest = |pick: fn(&(u64, u64, u64)) -> u64| {
            let mut v: Vec<TopFrame> = by_frame
                .iter()
                .filter(|(_, s)| pick(s) > 0)
                .map(|(frame, s)| TopFrame {
                    frame: frame.clone(),
                    nanos: pick(s),
                    calls: s.2,
                })
                .collect();
            v.sort_by(|a, b| b.nanos.cmp(&a.nanos).then_with(|| a.frame.cmp(&b.frame)));
            v.truncate(n);
            v
        };
        let self_time = heaviest(|s| s.0);
        let waits = heaviest(|s| s.1);
        let mut data: Vec<TopData> = logical
            .data_edges
            .iter()
            .filter(|e| e.total_bytes > 0)
            .map(|e| TopData {
                from: e.from.to_string(),
                to: e.to.to_string(),
                bytes: e.total_bytes,
                gets: e.count,
            })
            .collect();
        data.sort_by(|a, b| {
            b.bytes
                .cmp(&a.bytes)
                .then_with(|| (&a.from, &a.to).cmp(&(&b.from, &b.to)))
        });
        data.truncate(n);
        let deadlocks = stacks
            .deadlocks
            .iter()
            .map(|d| {
                let names: Vec<String> = d
                    .cycle
                    .iter()
                    .map(|t| format!("{} ({})", t.task_id, t.name))
                    .collect();
                format!("{} tasks: {}", d.cycle.len(), names.join(" -> "))
            })
            .collect();
        TopView {
            self_time,
            waits,
            data,
            deadlocks,
        }
    }
}

impl TopView {
    /// The summary as text for a terminal.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let frames = |out: &mut String, title: &str, rows: &[TopFrame]| {
            let _ = writeln!(out, "{title}");
            if rows.is_empty() {
                out.push_str("  (none)\n");
            }
            for r in rows {
                let _ = writeln!(
                    out,
                    "  {:>12}  {:>7} calls  {}",
                    millis(r.nanos),
                    r.calls,
                    r.frame
                );
            }
        };
        frames(
            &mut out,
            "most self time (work the call did itself):",
            &self.self_time,
        );
        frames(
            &mut out,
            "longest waits (on children and objects):",
            &self.waits,
        );
        let _ = writeln!(out, "largest data edges:");
        if self.data.is_empty() {
            out.push_str("  (none)\n");
        }
        for d in &self.data {
            let _ = writeln!(
                out,
                "  {:>12} B  {:>7} gets  {} -> {}",
                d.bytes, d.gets, d.from, d.to
            );
        }
        let _ = writeln!(out, "deadlocks:");
        if self.deadlocks.is_empty() {
            out.push_str("  (none)\n");
        }
        for d in &self.deadlocks {
            let _ = writeln!(out, "  DEADLOCK ({d})");
        }
        out
    }
}

/// Nanoseconds as milliseconds with three decimals.
fn millis(nanos: u64) -> String {
    format!("{}.{:03} ms", nanos / 1_000_000, (nanos / 1_000) % 1_000)
}
