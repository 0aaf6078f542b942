//! The dashboard's server-side cost at full scale: one views engine fed
//! 1,000,000 runtime-shaped tasks over 10,000 actors (the generator of
//! `ray_test_support::workload`, the memory test's full-size
//! shape), then, per request, each of the four summaries the browser is
//! sent (`summarize` and its serialization, what `/api/summary` and a view's
//! first `/api/events` message compute) against, for comparison, the full
//! exports the page used to fetch (the logical graph as JSON and the Gantt
//! chart as a Chrome trace), and the building of those two views alone
//! (what both pay before summarizing or exporting).
//!
//! The size of each response is printed once to stderr.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use ray_dashboard::summary::{summarize, SummaryLimits, SummaryParams};
use ray_insight::export::{export, ExportFormat, ViewKind};
use ray_insight::Views;

// The generator is shared with ray-insight's tests; the bench uses only part
// of it.
use ray_test_support::workload::{feed_all, FULL};

/// The summarized views.
const SUMMARIZED: [ViewKind; 4] = [
    ViewKind::Logical,
    ViewKind::Physical,
    ViewKind::Stack,
    ViewKind::Gantt,
];

/// The full exports compared against.
const EXPORTS: [(ViewKind, ExportFormat); 2] = [
    (ViewKind::Logical, ExportFormat::Json),
    (ViewKind::Gantt, ExportFormat::Chrome),
];

/// One summary as the server sends it.
fn summary_text(views: &Views, view: ViewKind) -> String {
    let params = SummaryParams::default();
    summarize(&views.snapshot(), view, &params, &SummaryLimits::default())
        .expect("a summarized view")
        .to_string()
}

fn export_text(views: &Views, view: ViewKind, format: ExportFormat) -> String {
    export(&views.snapshot(), view, format).expect("the view exports")
}

/// Summaries of the four views, the two full exports, and the building of
/// the two views they start from, each timed per request on the full-size
/// engine.
fn dashboard(c: &mut Criterion) {
    let started = Instant::now();
    let mut views = Views::default();
    let records = feed_all(FULL, &mut views);
    eprintln!(
        "dashboard bench: {} tasks, {} actors: {records} records fed in {:.2?}; {:?}",
        FULL.tasks,
        FULL.actors,
        started.elapsed(),
        views.stats()
    );
    for view in SUMMARIZED {
        eprintln!(
            "dashboard bench: summary of {}: {} bytes",
            view.as_str(),
            summary_text(&views, view).len()
        );
    }
    for (view, format) in EXPORTS {
        eprintln!(
            "dashboard bench: full export of {} as {}: {} bytes",
            view.as_str(),
            format.as_str(),
            export_text(&views, view, format).len()
        );
    }

    let mut group = c.benchmark_group("dashboard");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(3));
    for view in SUMMARIZED {
        group.bench_function(format!("summary_{}", view.as_str()), |b| {
            b.iter(|| black_box(summary_text(&views, black_box(view))))
        });
    }
    // What every request of these two pays before summarizing or exporting:
    // building the view from the engine's state.
    group.bench_function("view_build_logical", |b| {
        b.iter(|| black_box(views.snapshot().logical()))
    });
    group.bench_function("view_build_gantt", |b| {
        b.iter(|| black_box(views.snapshot().gantt()))
    });
    for (view, format) in EXPORTS {
        group.bench_function(
            format!("full_export_{}_{}", view.as_str(), format.as_str()),
            |b| b.iter(|| black_box(export_text(&views, black_box(view), format))),
        );
    }
    group.finish();
}

criterion_group!(benches, dashboard);
criterion_main!(benches);
