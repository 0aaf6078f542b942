//! Set-up of the insight tests: the runtime's records, captured.

use ray_insight::{Collector, InsightConfig, InsightLayer};
use tracing_subscriber::layer::SubscriberExt;

/// Installs an `InsightLayer` as this test process's global subscriber
/// (every runtime thread records into it; one such test per file) and
/// returns its collector. Batches of one record: nothing waits in a
/// thread's partial batch. The runtime records directly, as when it
/// installs recording itself.
pub fn record_globally() -> Collector {
    record_globally_with(true)
}

/// [`record_globally`], the runtime recording through `tracing` (`direct`
/// false: what a program that composes the layer itself without
/// [`InsightLayer::record_runtime_directly`] gets) or, as the runtime
/// installs it, directly (`true`).
pub fn record_globally_with(direct: bool) -> Collector {
    let (layer, collector) = InsightLayer::new(InsightConfig {
        batch_size: 1,
        ..InsightConfig::default()
    });
    if direct {
        assert!(layer.record_runtime_directly(), "the process's first layer");
    }
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(layer))
        .expect("the only subscriber of this test process");
    collector
}

/// Drains `collector` into `views` until `done` holds of them or `within`
/// has passed (the caller's assertions then say what was missing); returns
/// whether `done` held.
pub async fn drain_until(
    collector: &Collector,
    views: &mut ray_insight::Views,
    within: std::time::Duration,
    mut done: impl FnMut(&ray_insight::Views) -> bool,
) -> bool {
    let deadline = std::time::Instant::now() + within;
    loop {
        collector.drain_into(views);
        if done(views) {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Drains `collector` into fresh views until their stack view reports a
/// deadlock or `within` has passed; returns the views either way (the
/// caller asserts on what they hold).
pub async fn views_once_deadlocked(
    collector: &Collector,
    within: std::time::Duration,
) -> ray_insight::Views {
    let mut views = ray_insight::Views::default();
    drain_until(collector, &mut views, within, |v| {
        !v.snapshot().stacks().deadlocks.is_empty()
    })
    .await;
    views
}
