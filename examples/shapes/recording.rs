//! Records a run for insight (embedded mode): installs an [`InsightLayer`]
//! as the process's global subscriber, drains it into a [`Views`] engine on a
//! background thread while the run goes on, and writes the five views to a
//! folder at the end. Shared by `examples/worker_tree.rs` and
//! `tests/insight_w7.rs`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::Context;
use ray_insight::views::FlameMetric;
use ray_insight::{Collector, InsightConfig, InsightLayer, Views};
use tracing_subscriber::layer::SubscriberExt;

/// How often the background thread drains the layer's queue.
const DRAIN_EVERY: Duration = Duration::from_millis(10);

/// A recording in progress: the layer is installed, a thread drains it.
pub struct Recording {
    stop: Arc<AtomicBool>,
    drainer: JoinHandle<Views>,
}

impl Recording {
    /// Installs the insight layer as the global subscriber and starts the
    /// drainer. Fails if a global subscriber is already set.
    pub fn start() -> anyhow::Result<Self> {
        // One record per batch: runtime threads never sit on a partial batch
        // the drainer cannot see, and the drainer keeps the queue short.
        let (layer, collector) = InsightLayer::new(InsightConfig {
            batch_size: 1,
            max_queued_batches: 1 << 20,
            ..InsightConfig::default()
        });
        tracing::subscriber::set_global_default(tracing_subscriber::registry().with(layer))
            .context("installing the insight layer as the global subscriber")?;
        let stop = Arc::new(AtomicBool::new(false));
        let drainer = {
            let stop = Arc::clone(&stop);
            std::thread::Builder::new()
                .name("insight-drain".into())
                .spawn(move || drain(&collector, &stop))
                .context("starting the insight drain thread")?
        };
        Ok(Self { stop, drainer })
    }

    /// Stops recording once every recorded task and span has closed (or after
    /// `settle`, if some never do) and returns the views built from it.
    pub async fn finish(self, settle: Duration) -> anyhow::Result<Views> {
        InsightLayer::flush_current_thread();
        self.stop.store(true, Ordering::Release);
        let deadline = Instant::now() + settle + Duration::from_secs(1);
        while !self.drainer.is_finished() {
            anyhow::ensure!(
                Instant::now() < deadline,
                "the insight drain thread did not stop"
            );
            tokio::time::sleep(DRAIN_EVERY).await;
        }
        self.drainer
            .join()
            .map_err(|_| anyhow::anyhow!("the insight drain thread panicked"))
    }
}

/// Drains `collector` into a fresh [`Views`] until `stop` is set and nothing
/// is left open, or until 5 s after `stop`.
fn drain(collector: &Collector, stop: &AtomicBool) -> Views {
    let mut views = Views::default();
    let mut stopped_at = None;
    loop {
        collector.drain_into(&mut views);
        if stop.load(Ordering::Acquire) {
            let since = *stopped_at.get_or_insert_with(Instant::now);
            let stats = views.stats();
            let idle = stats.live_tasks == 0 && stats.live_spans == 0;
            if idle || since.elapsed() > Duration::from_secs(5) {
                collector.drain_into(&mut views);
                return views;
            }
        }
        std::thread::sleep(DRAIN_EVERY);
    }
}

/// Writes the five views of `views` into `dir` (created if missing) and
/// returns the files written: `logical.json`, `logical.dot`, `flame.folded`,
/// `gantt.json` (Chrome trace), `stacks.json`, `stacks.txt`, `physical.json`.
pub fn write_views(views: &Views, dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let snap = views.snapshot();
    let logical = snap.logical();
    let stacks = snap.stacks();
    let files = [
        ("logical.json", format!("{:#}\n", logical.to_json())),
        ("logical.dot", logical.to_dot()),
        ("flame.folded", snap.flame().folded(FlameMetric::SelfTime)),
        (
            "gantt.json",
            format!("{}\n", snap.gantt().to_chrome_trace()),
        ),
        ("stacks.json", format!("{:#}\n", stacks.to_json())),
        ("stacks.txt", stacks.to_text()),
        (
            "physical.json",
            format!("{:#}\n", snap.physical().to_json()),
        ),
    ];
    let mut written = Vec::with_capacity(files.len());
    for (name, text) in files {
        let path = dir.join(name);
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}
