//! Every view in the formats it supports, chosen by name: what
//! `rayrs insight export --view V --format F` prints.
//!
//! | view | formats (the first is the default) |
//! |---|---|
//! | `logical` | `json`, `dot` (Graphviz) |
//! | `physical` | `json` |
//! | `stack` | `text`, `json` |
//! | `flame` | `folded` (inferno / `flamegraph.pl` input), `svg` |
//! | `gantt` | `chrome`, `json` (both the Chrome trace JSON that Perfetto and `chrome://tracing` open) |
//!
//! The flame graph counts one [`FlameMetric`] per path, in microseconds:
//! `self` (the default: self wall time, so nested frames add up to their
//! caller's total — the usual flame graph), `running` or `waiting` (each
//! path's own time, not nested). JSON is pretty-printed, except the Gantt
//! chart's (traces are large); every text ends with a newline.
//!
//! ```
//! use ray_insight::export::{export, ExportFormat, ViewKind};
//! use ray_insight::Views;
//!
//! let views = Views::default();
//! let dot = export(&views.snapshot(), ViewKind::Logical, ExportFormat::Dot)?;
//! // A comment line with the record counts, then the graph.
//! assert!(dot.starts_with("// records: 0 applied") && dot.contains("\ndigraph"));
//! let err = export(&views.snapshot(), ViewKind::Physical, ExportFormat::Dot).unwrap_err();
//! assert_eq!(err.to_string(), "the physical view cannot be exported as dot: choose json");
//! # Ok::<(), ray_insight::export::ExportError>(())
//! ```

use std::fmt;
use std::str::FromStr;

use crate::views::{FlameMetric, FlameSvgError, Snapshot};

/// One of the five views.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ViewKind {
    /// The logical graph: who called whom, and the data between them.
    Logical,
    /// Nodes, workers, actors and running tasks.
    Physical,
    /// The distributed stack of every running or blocked task, and deadlocks.
    Stack,
    /// Time by distributed call path.
    Flame,
    /// Every task on a timeline.
    Gantt,
}

/// An export format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExportFormat {
    /// JSON.
    Json,
    /// Graphviz DOT.
    Dot,
    /// Folded stacks: `path value` per line.
    Folded,
    /// An SVG image.
    Svg,
    /// Chrome trace JSON.
    Chrome,
    /// Plain text for a terminal.
    Text,
}

impl ViewKind {
    /// Every view, in the order the docs list them.
    pub const ALL: [ViewKind; 5] = [
        ViewKind::Logical,
        ViewKind::Physical,
        ViewKind::Stack,
        ViewKind::Flame,
        ViewKind::Gantt,
    ];

    /// The view's name: `logical`, `physical`, `stack`, `flame` or `gantt`.
    pub fn as_str(self) -> &'static str {
        match self {
            ViewKind::Logical => "logical",
            ViewKind::Physical => "physical",
            ViewKind::Stack => "stack",
            ViewKind::Flame => "flame",
            ViewKind::Gantt => "gantt",
        }
    }

    /// The formats this view exports to; the first is its default.
    pub fn formats(self) -> &'static [ExportFormat] {
        match self {
            ViewKind::Logical => &[ExportFormat::Json, ExportFormat::Dot],
            ViewKind::Physical => &[ExportFormat::Json],
            ViewKind::Stack => &[ExportFormat::Text, ExportFormat::Json],
            ViewKind::Flame => &[ExportFormat::Folded, ExportFormat::Svg],
            ViewKind::Gantt => &[ExportFormat::Chrome, ExportFormat::Json],
        }
    }

    /// The format used when none is asked for.
    pub fn default_format(self) -> ExportFormat {
        self.formats()[0]
    }

    /// Whether this view exports to `format`.
    pub fn supports(self, format: ExportFormat) -> bool {
        self.formats().contains(&format)
    }

    /// `format` if this view exports to it, else [`ExportError::Unsupported`].
    pub fn check(self, format: ExportFormat) -> Result<ExportFormat, ExportError> {
        if self.supports(format) {
            Ok(format)
        } else {
            Err(ExportError::Unsupported { view: self, format })
        }
    }
}

impl ExportFormat {
    /// Every format.
    pub const ALL: [ExportFormat; 6] = [
        ExportFormat::Json,
        ExportFormat::Dot,
        ExportFormat::Folded,
        ExportFormat::Svg,
        ExportFormat::Chrome,
        ExportFormat::Text,
    ];

    /// The format's name: `json`, `dot`, `folded`, `svg`, `chrome` or `text`.
    pub fn as_str(self) -> &'static str {
        match self {
            ExportFormat::Json => "json",
            ExportFormat::Dot => "dot",
            ExportFormat::Folded => "folded",
            ExportFormat::Svg => "svg",
            ExportFormat::Chrome => "chrome",
            ExportFormat::Text => "text",
        }
    }
}

impl fmt::Display for ViewKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for ExportFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ViewKind {
    type Err = ExportError;

    /// Parses a view's name (see [`ViewKind::as_str`]).
    fn from_str(name: &str) -> Result<Self, ExportError> {
        ViewKind::ALL
            .into_iter()
            .find(|v| v.as_str() == name)
            .ok_or_else(|| ExportError::UnknownView {
                name: name.to_owned(),
            })
    }
}

impl FromStr for ExportFormat {
    type Err = ExportError;

    /// Parses a format's name (see [`ExportFormat::as_str`]).
    fn from_str(name: &str) -> Result<Self, ExportError> {
        ExportFormat::ALL
            .into_iter()
            .find(|f| f.as_str() == name)
            .ok_or_else(|| ExportError::UnknownFormat {
                name: name.to_owned(),
            })
    }
}

/// The flame metric named `name`: `self`, `running` or `waiting`.
pub fn parse_metric(name: &str) -> Result<FlameMetric, ExportError> {
    FlameMetric::from_name(name).ok_or_else(|| ExportError::UnknownMetric {
        name: name.to_owned(),
    })
}

/// Why a view could not be exported.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// No view has this name.
    #[error("unknown view `{name}`: choose logical, physical, stack, flame or gantt")]
    UnknownView {
        /// The name given.
        name: String,
    },
    /// No format has this name.
    #[error("unknown format `{name}`: choose json, dot, folded, svg, chrome or text")]
    UnknownFormat {
        /// The name given.
        name: String,
    },
    /// No flame metric has this name.
    #[error("unknown flame metric `{name}`: choose self, running or waiting")]
    UnknownMetric {
        /// The name given.
        name: String,
    },
    /// The view does not export to the format.
    #[error("the {view} view cannot be exported as {format}: choose {}", names(.view.formats()))]
    Unsupported {
        /// The view asked for.
        view: ViewKind,
        /// The format asked for.
        format: ExportFormat,
    },
    /// The flame graph could not be drawn.
    #[error(transparent)]
    Svg(#[from] FlameSvgError),
}

/// `a`, `a or b`, `a, b or c`.
fn names(formats: &[ExportFormat]) -> String {
    let names: Vec<&str> = formats.iter().map(|f| f.as_str()).collect();
    match names.split_last() {
        Some((last, [])) => (*last).to_owned(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

/// How the flame graph names actor calls: by instance, as the views record
/// them (`Class[actor-1.7].method`, the default), or folded into their
/// class (`Class.method`, the instances' times added up: see
/// [`FlameView::by_class`](crate::views::FlameView::by_class)).
///
/// `--fold` of `rayrs insight export`, `fold=` of the dashboard.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum FlameFold {
    /// A frame per actor instance.
    #[default]
    Instance,
    /// A frame per actor class.
    Class,
}

impl FlameFold {
    /// The fold's name: `instance` or `class`.
    pub fn as_str(self) -> &'static str {
        match self {
            FlameFold::Instance => "instance",
            FlameFold::Class => "class",
        }
    }

    /// The fold named `name` (see [`FlameFold::as_str`]), if any.
    pub fn from_name(name: &str) -> Option<Self> {
        [FlameFold::Instance, FlameFold::Class]
            .into_iter()
            .find(|f| f.as_str() == name)
    }
}

/// `view` of `snapshot` as `format`, the flame graph by self time.
///
/// Errors: [`ExportError::Unsupported`] for a pair the [module table](self)
/// does not list; [`ExportError::Svg`] when a flame graph SVG has nothing to draw.
pub fn export(
    snapshot: &Snapshot<'_>,
    view: ViewKind,
    format: ExportFormat,
) -> Result<String, ExportError> {
    export_with_metric(snapshot, view, format, FlameMetric::SelfTime)
}

/// [`export`], with the flame graph counting `metric` (other views ignore it).
pub fn export_with_metric(
    snapshot: &Snapshot<'_>,
    view: ViewKind,
    format: ExportFormat,
    metric: FlameMetric,
) -> Result<String, ExportError> {
    export_with(snapshot, view, format, metric, FlameFold::Instance)
}

/// [`export_with_metric`], with the flame graph's instances folded as
/// `fold` says (other views ignore it).
pub fn export_with(
    snapshot: &Snapshot<'_>,
    view: ViewKind,
    format: ExportFormat,
    metric: FlameMetric,
    fold: FlameFold,
) -> Result<String, ExportError> {
    view.check(format)?;
    let flame = || match fold {
        FlameFold::Instance => snapshot.flame(),
        FlameFold::Class => snapshot.flame().by_class(),
    };
    let stats = snapshot.stats();
    // What was lost or refused on the way shows beside every view that has
    // room for it: a `records` object in JSON (`otherData` in a Chrome
    // trace), a comment in DOT, a first line in the stack text. (Folded
    // stacks and SVG have no place for it.)
    let counts = serde_json::json!({
        "applied": stats.applied,
        "ignored": stats.ignored,
        "dropped": stats.dropped,
        "lost": stats.lost,
        "unmatched": stats.unmatched,
    });
    let with_counts = |mut json: serde_json::Value, key: &str| {
        if let Some(object) = json.as_object_mut() {
            object.insert(key.to_owned(), counts.clone());
        }
        json
    };
    let summary = format!(
        "records: {} applied, {} dropped at caps, {} lost before the views",
        stats.applied, stats.dropped, stats.lost
    );
    let pretty = |json: serde_json::Value| format!("{:#}\n", with_counts(json, "records"));
    Ok(match (view, format) {
        (ViewKind::Logical, ExportFormat::Json) => pretty(snapshot.logical().to_json()),
        (ViewKind::Logical, _) => format!("// {summary}\n{}", snapshot.logical().to_dot()),
        (ViewKind::Physical, _) => pretty(snapshot.physical().to_json()),
        (ViewKind::Stack, ExportFormat::Json) => pretty(snapshot.stacks().to_json()),
        (ViewKind::Stack, _) => format!("{summary}\n{}", snapshot.stacks().to_text()),
        (ViewKind::Flame, ExportFormat::Svg) => flame().svg(metric)?,
        (ViewKind::Flame, _) => flame().folded(metric),
        (ViewKind::Gantt, _) => format!(
            "{}\n",
            with_counts(snapshot.gantt().to_chrome_trace(), "otherData")
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{FieldValue, Record, RecordKind};
    use crate::views::Views;

    /// A driver task `shapes::train` (0..3 ms) that calls `shapes::step`
    /// (1..2 ms), labelled `rank = 0`.
    fn views() -> Views {
        let record = |kind, span, name, at_us: u64, fields: &[(&'static str, &str)]| Record {
            kind,
            span,
            parent: 0,
            name,
            target: "ray_core::task",
            at_nanos: at_us * 1_000,
            thread: 0,
            fields: fields
                .iter()
                .map(|(k, v)| (*k, FieldValue::Str((*v).into())))
                .collect(),
        };
        let mut views = Views::default();
        for r in [
            record(
                RecordKind::SpanNew,
                1,
                "task.run",
                0,
                &[("task_id", "t1"), ("function", "shapes::train")],
            ),
            record(
                RecordKind::Event,
                0,
                "context",
                10,
                &[("task_id", "t1"), ("rank", "0")],
            ),
            record(
                RecordKind::SpanNew,
                2,
                "task.run",
                1_000,
                &[
                    ("task_id", "t2"),
                    ("function", "shapes::step"),
                    ("parent_task", "t1"),
                ],
            ),
            record(RecordKind::SpanClose, 2, "task.run", 2_000, &[]),
            record(RecordKind::SpanClose, 1, "task.run", 3_000, &[]),
        ] {
            views.apply(&r);
        }
        views
    }

    #[test]
    fn every_supported_pair_exports_and_every_other_pair_is_refused() {
        let views = views();
        let snapshot = views.snapshot();
        let mut exported = 0;
        for view in ViewKind::ALL {
            for format in ExportFormat::ALL {
                let out = export(&snapshot, view, format);
                if !view.supports(format) {
                    let err = out.expect_err("unsupported");
                    assert!(matches!(err, ExportError::Unsupported { .. }), "{err}");
                    assert!(err.to_string().contains(view.default_format().as_str()));
                    continue;
                }
                exported += 1;
                let text = out.unwrap_or_else(|e| panic!("{view} as {format}: {e}"));
                // Nothing is blocked: the stack text is empty.
                let empty_stack = view == ViewKind::Stack && format == ExportFormat::Text;
                assert!(
                    text.ends_with('\n') || format == ExportFormat::Svg || empty_stack,
                    "{view} {format}"
                );
                match format {
                    ExportFormat::Json | ExportFormat::Chrome => {
                        serde_json::from_str::<serde_json::Value>(&text)
                            .unwrap_or_else(|e| panic!("{view} as {format} is not JSON: {e}"));
                    }
                    ExportFormat::Dot => assert!(
                        text.starts_with("// records:") && text.contains("\ndigraph"),
                        "{text}"
                    ),
                    ExportFormat::Folded => {
                        assert_eq!(
                            text,
                            "driver;shapes::train 3000\ndriver;shapes::train;shapes::step 1000\n"
                        )
                    }
                    ExportFormat::Svg => {
                        assert!(text.contains("<svg") && text.contains("shapes::step"))
                    }
                    ExportFormat::Text => {}
                }
            }
        }
        assert_eq!(exported, 9);
        let logical = export(&snapshot, ViewKind::Logical, ExportFormat::Json).expect("json");
        assert!(logical.contains("shapes::step"), "{logical}");
        let gantt = export(&snapshot, ViewKind::Gantt, ExportFormat::Json).expect("json");
        assert_eq!(
            gantt,
            export(&snapshot, ViewKind::Gantt, ExportFormat::Chrome).expect("chrome")
        );
    }

    #[test]
    fn the_metric_and_the_filter_change_the_flame_graph() {
        let views = views();
        let running = export_with_metric(
            &views.snapshot(),
            ViewKind::Flame,
            ExportFormat::Folded,
            FlameMetric::Running,
        )
        .expect("folded");
        // Not nested: each line is the frame's own running time; the
        // driver ran nothing recorded, so it has no line (a flame graph
        // tool gives it its children's width).
        assert_eq!(
            running,
            "driver;shapes::train 3000\ndriver;shapes::train;shapes::step 1000\n"
        );
        let none = export(
            &views.filter("rank", "1"),
            ViewKind::Flame,
            ExportFormat::Folded,
        )
        .expect("folded");
        assert_eq!(none, "");
        let err = export(
            &views.filter("rank", "1"),
            ViewKind::Flame,
            ExportFormat::Svg,
        )
        .expect_err("nothing to draw");
        assert!(
            matches!(err, ExportError::Svg(FlameSvgError::Empty)),
            "{err}"
        );
    }

    #[test]
    fn names_parse_and_unknown_names_say_what_to_choose() {
        for view in ViewKind::ALL {
            assert_eq!(view.as_str().parse::<ViewKind>().ok(), Some(view));
        }
        for format in ExportFormat::ALL {
            assert_eq!(format.as_str().parse::<ExportFormat>().ok(), Some(format));
        }
        let err = "flames".parse::<ViewKind>().expect_err("no such view");
        assert!(err.to_string().contains("choose logical"), "{err}");
        let err = "png".parse::<ExportFormat>().expect_err("no such format");
        assert!(err.to_string().contains("`png`"), "{err}");
        assert_eq!(parse_metric("waiting").ok(), Some(FlameMetric::Waiting));
        assert!(parse_metric("total").is_err());
        let err = ViewKind::Flame
            .check(ExportFormat::Json)
            .expect_err("no json");
        assert_eq!(
            err.to_string(),
            "the flame view cannot be exported as json: choose folded or svg"
        );
    }
}
