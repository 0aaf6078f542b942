//! The flame graph: time aggregated by distributed call path.
//!
//! A task's path is its parent task's path plus its own frame (the function
//! name, or `Class[actor].method` for actor calls, naming the instance),
//! rooted at `driver`, e.g.
//! `driver;worker_tree::Worker[actor-1.1].process;worker_tree::Worker[actor-1.7].process`.
//! [`FlameView::by_class`] folds instances into their class
//! (`worker_tree::Worker.process`). Each finished task adds its span
//! duration (total) and the time it spent inside `wait` spans (waiting) to
//! its path; running = total − waiting. Self time is the time the call did
//! not spend waiting on its children: its running time (a caller whose
//! children run in parallel beyond its span, or outlive it, still shows the
//! time it worked itself). Every figure is built with saturating
//! arithmetic: a hostile log cannot overflow it.

use std::collections::BTreeMap;

use hashbrown::HashMap;
use std::fmt::Write as _;
use std::io;

use super::model::{LabelSetId, PathId, PathTable};

#[derive(Debug, Clone, Copy, Default)]
struct FlameStats {
    count: u64,
    total_nanos: u64,
    waiting_nanos: u64,
    /// Time spent inside the spans' own user spans (their child frames).
    inner_nanos: u64,
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
        inner_nanos: u64,
    ) -> bool {
        let full = self.entries.len() >= self.cap;
        let stats = match self.entries.get_mut(&(path, labels)) {
            Some(stats) => stats,
            None if full => return false,
            None => self.entries.entry((path, labels)).or_default(),
        };
        stats.count = stats.count.saturating_add(1);
        stats.total_nanos = stats.total_nanos.saturating_add(total_nanos);
        stats.waiting_nanos = stats
            .waiting_nanos
            .saturating_add(waiting_nanos.min(total_nanos));
        stats.inner_nanos = stats
            .inner_nanos
            .saturating_add(inner_nanos.min(total_nanos));
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
                m.count = m.count.saturating_add(stats.count);
                m.total_nanos = m.total_nanos.saturating_add(stats.total_nanos);
                m.waiting_nanos = m.waiting_nanos.saturating_add(stats.waiting_nanos);
                m.inner_nanos = m.inner_nanos.saturating_add(stats.inner_nanos);
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
                let sum = children.entry(parent).or_default();
                *sum = sum.saturating_add(total);
            }
        }
        let mut frames: Vec<FlameFrame> = merged
            .into_iter()
            .map(|(path, s)| {
                let children_nanos = children.get(&path).copied().unwrap_or(0);
                // An ancestor with no finished span of its own (the
                // driver, a caller still running) did nothing here: its
                // total is its children's, not its running time.
                let running_nanos = if s.count == 0 {
                    0
                } else {
                    s.total_nanos - s.waiting_nanos.min(s.total_nanos)
                };
                FlameFrame {
                    path: paths.render(path),
                    count: s.count,
                    total_nanos: s.total_nanos,
                    // Its user spans are frames of their own.
                    self_nanos: running_nanos.saturating_sub(s.inner_nanos),
                    children_nanos,
                    waiting_nanos: s.waiting_nanos,
                    running_nanos,
                }
            })
            .collect();
        frames.sort_by(|a, b| a.path.cmp(&b.path));
        FlameView { frames }
    }
}

/// `path` with each frame's instance left out: `Class[actor].method`
/// becomes `Class.method`. Only a bracketed id right before the frame's
/// final `.method` is an instance (`[unknown]` and other brackets stay).
pub(crate) fn fold_instances(path: &str) -> String {
    let frames: Vec<String> = path.split(';').map(fold_frame).collect();
    frames.join(";")
}

fn fold_frame(frame: &str) -> String {
    let Some(open) = frame.rfind('[') else {
        return frame.to_string();
    };
    let Some(close) = frame[open..].find(']').map(|c| open + c) else {
        return frame.to_string();
    };
    let rest = &frame[close + 1..];
    if open == 0 || !rest.starts_with('.') || rest.contains(['[', ']']) {
        return frame.to_string();
    }
    format!("{}{rest}", &frame[..open])
}

/// Which time a folded-stacks export counts per line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlameMetric {
    /// Self time: what the call did not spend waiting on its children
    /// (its running time); a frame's width is its self time plus its
    /// children's.
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
    /// The time the call did not spend waiting (on its children or
    /// anything else) nor inside its own user spans (`tracing` spans it
    /// opened, frames of their own): `running_nanos` less those; 0 for an
    /// ancestor with no finished span of its own.
    pub self_nanos: u64,
    /// Sum of the direct child paths' totals.
    pub children_nanos: u64,
    /// Time these spans spent inside `wait` spans.
    pub waiting_nanos: u64,
    /// `total_nanos` − `waiting_nanos`; 0 for an ancestor with no finished
    /// span of its own.
    pub running_nanos: u64,
}

/// Time by call path, ready to export as folded stacks.
#[derive(Debug, Clone, PartialEq)]
pub struct FlameView {
    /// Every path, sorted.
    pub frames: Vec<FlameFrame>,
}

impl FlameView {
    /// The same graph with each actor instance folded into its class:
    /// `Class[actor].method` frames become `Class.method`, and paths that
    /// then read the same are added up.
    pub fn by_class(&self) -> FlameView {
        let mut merged: BTreeMap<String, FlameFrame> = BTreeMap::new();
        for f in &self.frames {
            let path = fold_instances(&f.path);
            let m = merged.entry(path.clone()).or_insert_with(|| FlameFrame {
                path,
                count: 0,
                total_nanos: 0,
                self_nanos: 0,
                children_nanos: 0,
                waiting_nanos: 0,
                running_nanos: 0,
            });
            m.count = m.count.saturating_add(f.count);
            m.total_nanos = m.total_nanos.saturating_add(f.total_nanos);
            m.self_nanos = m.self_nanos.saturating_add(f.self_nanos);
            m.children_nanos = m.children_nanos.saturating_add(f.children_nanos);
            m.waiting_nanos = m.waiting_nanos.saturating_add(f.waiting_nanos);
            m.running_nanos = m.running_nanos.saturating_add(f.running_nanos);
        }
        FlameView {
            frames: merged.into_values().collect(),
        }
    }

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

impl FlameMetric {
    /// The metric's name on the command line: `self`, `running` or `waiting`.
    pub fn as_str(self) -> &'static str {
        match self {
            FlameMetric::SelfTime => "self",
            FlameMetric::Running => "running",
            FlameMetric::Waiting => "waiting",
        }
    }

    /// The metric named `name` (see [`FlameMetric::as_str`]), if any.
    pub fn from_name(name: &str) -> Option<Self> {
        [
            FlameMetric::SelfTime,
            FlameMetric::Running,
            FlameMetric::Waiting,
        ]
        .into_iter()
        .find(|m| m.as_str() == name)
    }

    fn title(self) -> &'static str {
        match self {
            FlameMetric::SelfTime => "ray-rs: wall time by distributed call path",
            FlameMetric::Running => "ray-rs: running time by distributed call path (not nested)",
            FlameMetric::Waiting => {
                "ray-rs: time blocked in wait by distributed call path (not nested)"
            }
        }
    }
}

/// Why a flame graph SVG could not be drawn.
#[derive(Debug, thiserror::Error)]
pub enum FlameSvgError {
    /// No call path has any time (at this metric, or after, for a diff): an
    /// empty picture, which inferno refuses to draw.
    #[error("nothing to draw: no call path has any time")]
    Empty,
    /// inferno failed to draw it.
    #[error("drawing the flame graph failed: {0}")]
    Render(#[from] io::Error),
}

impl FlameView {
    /// The flame graph as an SVG image (interactive: click to zoom, search),
    /// drawn by `inferno` from [`FlameView::folded`]; widths in microseconds.
    ///
    /// Colours are derived from frame names, so the same run draws the same
    /// picture. Errors: [`FlameSvgError::Empty`] when no path has at least a
    /// microsecond at `metric`.
    pub fn svg(&self, metric: FlameMetric) -> Result<String, FlameSvgError> {
        draw(&self.folded(metric), metric.title(), None)
    }
}

/// A differential flame graph of two folded-stacks texts, as an SVG image
/// drawn by `inferno`: frames are as wide as in `after_folded`, red where
/// they grew since `before_folded`, blue where they shrank (paths only in
/// `before_folded` have no width). Malformed lines are skipped (see
/// [`parse_folded`]).
///
/// Errors: [`FlameSvgError::Empty`] when `after_folded` has no time.
pub fn diff_svg(before_folded: &str, after_folded: &str) -> Result<String, FlameSvgError> {
    draw(
        &diff_folded(before_folded, after_folded),
        "ray-rs: differential flame graph",
        Some("width: after; red: grew since before, blue: shrank"),
    )
}

/// Draws folded lines (`path count` or `path before after`) with inferno.
fn draw(folded: &str, title: &str, subtitle: Option<&str>) -> Result<String, FlameSvgError> {
    // inferno sizes frames by the last count of each line; without any
    // positive one it draws an error picture and fails.
    let has_time = folded.lines().any(|line| {
        line.rsplit_once(' ')
            .and_then(|(_, count)| count.parse::<u64>().ok())
            .is_some_and(|count| count > 0)
    });
    if !has_time {
        return Err(FlameSvgError::Empty);
    }
    let mut options = inferno::flamegraph::Options::default();
    // Colours from a hash of the frame name, not a random pick.
    options.deterministic = true;
    options.title = title.to_owned();
    options.subtitle = subtitle.map(str::to_owned);
    options.count_name = "µs".to_owned();
    let mut svg = Vec::new();
    inferno::flamegraph::from_lines(&mut options, folded.lines(), &mut svg)?;
    String::from_utf8(svg)
        .map_err(|e| FlameSvgError::Render(io::Error::new(io::ErrorKind::InvalidData, e)))
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
///
/// Actor instances are folded into their classes first (`Class[actor].method`
/// reads `Class.method`): two runs' actors have different ids.
pub fn diff_folded(before: &str, after: &str) -> String {
    let by_class = |text: &str| {
        let mut out: BTreeMap<String, u64> = BTreeMap::new();
        for (path, value) in parse_folded(text) {
            let slot = out.entry(fold_instances(&path)).or_default();
            *slot = slot.saturating_add(value);
        }
        out
    };
    let before = by_class(before);
    let after = by_class(after);
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
    fn the_svg_names_every_frame_and_an_empty_graph_is_refused() {
        let frame = |path: &str, self_nanos: u64| FlameFrame {
            path: path.to_owned(),
            count: 1,
            total_nanos: self_nanos,
            self_nanos,
            children_nanos: 0,
            waiting_nanos: 0,
            running_nanos: self_nanos,
        };
        let view = FlameView {
            frames: vec![
                frame("driver;shapes::train_step", 3_000_000),
                frame("driver;shapes::train_step;shapes::all_reduce", 1_000_000),
            ],
        };
        let svg = view.svg(FlameMetric::SelfTime).expect("drawn");
        assert!(svg.contains("<svg"), "{svg}");
        assert!(svg.contains("shapes::train_step"));
        assert!(svg.contains("shapes::all_reduce"));
        assert_eq!(view.svg(FlameMetric::SelfTime).expect("drawn"), svg);
        assert!(matches!(
            view.svg(FlameMetric::Waiting),
            Err(FlameSvgError::Empty)
        ));
    }

    #[test]
    fn the_diff_svg_shows_grown_and_shrunk_paths() {
        let before = "driver;load 500\ndriver;train 1000\n";
        let after = "driver;load 100\ndriver;train 2000\ndriver;eval 300\n";
        let svg = diff_svg(before, after).expect("drawn");
        assert!(svg.contains("<svg"));
        for name in ["load", "train", "eval"] {
            assert!(svg.contains(name), "{name} missing");
        }
        // Widths are the after counts; each tooltip carries the change.
        let title = |name: &str| {
            let start = svg
                .find(&format!("<title>{name} ("))
                .unwrap_or_else(|| panic!("no frame {name}"));
            let end = start + svg[start..].find("</title>").expect("a closed title");
            svg[start..end].to_owned()
        };
        assert!(
            title("train").starts_with("<title>train (2,000 µs"),
            "{}",
            title("train")
        );
        assert!(title("train").contains("; +"), "{}", title("train"));
        assert!(title("load").contains("; -"), "{}", title("load"));
        assert!(title("eval").contains("; +"), "{}", title("eval"));
        assert!(matches!(diff_svg(after, ""), Err(FlameSvgError::Empty)));
    }

    #[test]
    fn metrics_are_named_as_on_the_command_line() {
        for metric in [
            FlameMetric::SelfTime,
            FlameMetric::Running,
            FlameMetric::Waiting,
        ] {
            assert_eq!(FlameMetric::from_name(metric.as_str()), Some(metric));
        }
        assert_eq!(FlameMetric::from_name("total"), None);
    }

    #[test]
    fn malformed_folded_lines_are_skipped() {
        let parsed = parse_folded("no-value\ndriver;f x\ndriver;f 4\n");
        assert_eq!(parsed.len(), 1);
        assert_eq!(parsed["driver;f"], 4);
    }
}
