//! The flame graph: time aggregated by distributed call path.
//!
//! A task's path is its parent task's path plus its own frame (the function
//! name, or `Class.method` for actor calls), rooted at `driver`, e.g.
//! `driver;worker_tree::Worker.process;worker_tree::Worker.process`. Each
//! finished task adds its span duration (total) and the time it spent inside
//! `wait` spans (waiting) to its path; running = total − waiting. Self time is
//! total minus the totals of the direct child paths, clamped at 0 (children
//! that outlive their caller, or run in parallel beyond its span, make the
//! children's sum exceed the caller's total).

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

use super::model::{LabelSetId, PathId, PathTable};

#[derive(Debug, Clone, Copy, Default)]
struct FlameStats {
    count: u64,
    total_nanos: u64,
    waiting_nanos: u64,
}

/// The flame graph's aggregates: at most `cap` (path, label set) entries.
#[derive(Debug)]
pub(crate) struct FlameAgg {
    entries: HashMap<(PathId, LabelSetId), FlameStats>,
    cap: usize,
}

impl FlameAgg {
    pub(crate) fn new(cap: usize) -> Self {
        Self {
            entries: HashMap::new(),
            cap,
        }
    }

    /// Adds one finished span at `path`; `false` when a new entry was needed
    /// and the table is full.
    pub(crate) fn on_finish(
        &mut self,
        path: PathId,
        labels: LabelSetId,
        total_nanos: u64,
        waiting_nanos: u64,
    ) -> bool {
        let full = self.entries.len() >= self.cap;
        let stats = match self.entries.get_mut(&(path, labels)) {
            Some(stats) => stats,
            None if full => return false,
            None => self.entries.entry((path, labels)).or_default(),
        };
        stats.count += 1;
        stats.total_nanos = stats.total_nanos.saturating_add(total_nanos);
        stats.waiting_nanos = stats
            .waiting_nanos
            .saturating_add(waiting_nanos.min(total_nanos));
        true
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// The view over the label sets `keep` accepts. Ancestors of recorded
    /// paths that have no finished span of their own (the driver, callers
    /// still running) appear with count 0 and total = their children's sum.
    pub(crate) fn build(&self, paths: &PathTable, keep: &dyn Fn(LabelSetId) -> bool) -> FlameView {
        let mut merged: HashMap<PathId, FlameStats> = HashMap::new();
        for ((path, labels), stats) in &self.entries {
            if keep(*labels) {
                let m = merged.entry(*path).or_default();
                m.count += stats.count;
                m.total_nanos = m.total_nanos.saturating_add(stats.total_nanos);
                m.waiting_nanos = m.waiting_nanos.saturating_add(stats.waiting_nanos);
            }
        }
        // Make every ancestor present, so children sums have a place to go.
        let recorded: Vec<PathId> = merged.keys().copied().collect();
        for path in recorded {
            let mut at = paths.parent(path);
            while let Some(p) = at {
                if merged.contains_key(&p) {
                    break;
                }
                merged.insert(p, FlameStats::default());
                at = paths.parent(p);
            }
        }
        // Children sums, deepest first so synthesized ancestors get totals.
        let mut order: Vec<(usize, PathId)> = merged
            .keys()
            .map(|&p| {
                let mut depth = 0;
                let mut at = paths.parent(p);
                while let Some(q) = at {
                    depth += 1;
                    at = paths.parent(q);
                }
                (depth, p)
            })
            .collect();
        order.sort_unstable_by(|a, b| b.cmp(a));
        let mut children: HashMap<PathId, u64> = HashMap::new();
        for (_, path) in order {
            let kids = children.get(&path).copied().unwrap_or(0);
            let stats = merged
                .get_mut(&path)
                .expect("every ordered path is in merged");
            if stats.count == 0 {
                stats.total_nanos = kids;
            }
            let total = stats.total_nanos;
            if let Some(parent) = paths.parent(path) {
                *children.entry(parent).or_default() += total;
            }
        }
        let mut frames: Vec<FlameFrame> = merged
            .into_iter()
            .map(|(path, s)| {
                let children_nanos = children.get(&path).copied().unwrap_or(0);
                FlameFrame {
                    path: paths.render(path),
                    count: s.count,
                    total_nanos: s.total_nanos,
                    self_nanos: s.total_nanos.saturating_sub(children_nanos),
                    children_nanos,
                    waiting_nanos: s.waiting_nanos,
                    running_nanos: s.total_nanos - s.waiting_nanos.min(s.total_nanos),
                }
            })
            .collect();
        frames.sort_by(|a, b| a.path.cmp(&b.path));
        FlameView { frames }
    }
}

/// Which time a folded-stacks export counts per line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlameMetric {
    /// Self wall time (total − children), so nested frames add up to the
    /// caller's total: the usual flame graph.
    SelfTime,
    /// Each frame's own running time (total − waiting), not nested.
    Running,
    /// Each frame's own time blocked in `wait` spans, not nested.
    Waiting,
}

/// One call path's aggregated time.
#[derive(Debug, Clone, PartialEq)]
pub struct FlameFrame {
    /// Frames joined by `;`, root (`driver`) first.
    pub path: String,
    /// Finished spans at this path (0 for an ancestor with none finished).
    pub count: u64,
    /// Sum of their durations, in nanoseconds.
    pub total_nanos: u64,
    /// `total_nanos` − `children_nanos`, clamped at 0.
    pub self_nanos: u64,
    /// Sum of the direct child paths' totals.
    pub children_nanos: u64,
    /// Time these spans spent inside `wait` spans.
    pub waiting_nanos: u64,
    /// `total_nanos` − `waiting_nanos`.
    pub running_nanos: u64,
}

/// Time by call path, ready to export as folded stacks.
#[derive(Debug, Clone, PartialEq)]
pub struct FlameView {
    /// Every path, sorted.
    pub frames: Vec<FlameFrame>,
}

impl FlameView {
    /// The frame at `path`, if any.
    pub fn frame(&self, path: &str) -> Option<&FlameFrame> {
        self.frames
            .binary_search_by(|f| f.path.as_str().cmp(path))
            .ok()
            .map(|i| &self.frames[i])
    }

    /// Folded stacks (`path value` per line, value in microseconds, sorted by
    /// path), as `inferno`/`flamegraph.pl` read them; lines with value 0 are
    /// left out.
    pub fn folded(&self, metric: FlameMetric) -> String {
        let mut out = String::new();
        for frame in &self.frames {
            let nanos = match metric {
                FlameMetric::SelfTime => frame.self_nanos,
                FlameMetric::Running => frame.running_nanos,
                FlameMetric::Waiting => frame.waiting_nanos,
            };
            let micros = nanos / 1_000;
            if micros > 0 {
                let _ = writeln!(out, "{} {micros}", frame.path);
            }
        }
        out
    }
}

/// Parses folded stacks (`path value` per line; the value after the last
/// space), summing repeated paths; malformed lines are skipped.
pub fn parse_folded(text: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let line = line.trim_end();
        let Some((path, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(value) = value.parse::<u64>() else {
            continue;
        };
        let slot: &mut u64 = out.entry(path.to_owned()).or_default();
        *slot = slot.saturating_add(value);
    }
    out
}

/// The difference of two folded-stacks texts in the folded-diff format that
/// `inferno-diff-folded` / `difffolded.pl` produce: one `path before after`
/// line per path present in either, sorted by path (0 where a path is absent).
pub fn diff_folded(before: &str, after: &str) -> String {
    let before = parse_folded(before);
    let after = parse_folded(after);
    let mut paths: Vec<&String> = before.keys().chain(after.keys()).collect();
    paths.sort();
    paths.dedup();
    let mut out = String::new();
    for path in paths {
        let a = before.get(path).copied().unwrap_or(0);
        let b = after.get(path).copied().unwrap_or(0);
        let _ = writeln!(out, "{path} {a} {b}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diff_lists_every_path_with_before_and_after() {
        let before = "driver;f 10\ndriver;f;g 5\n";
        let after = "driver;f 12\ndriver;h 3\ndriver;f 1\n";
        assert_eq!(
            diff_folded(before, after),
            "driver;f 10 13\ndriver;f;g 5 0\ndriver;h 0 3\n"
        );
    }

    #[test]
    fn malformed_folded_lines_are_skipped() {
        let parsed = parse_folded("no-value\ndriver;f x\ndriver;f 4\n");
        assert_eq!(parsed.len(), 1);
        assert_eq!(parsed["driver;f"], 4);
    }
}
