//! Recording for insight, installed by the runtime itself when asked
//! ([`Config::insight`](crate::Config::insight), `RAYRS_INSIGHT`).
//!
//! One process records into one [`InsightLayer`], installed as the global
//! `tracing` subscriber, and one drain thread (`rayrs-insight`) moves its
//! batches every [`PUMP_EVERY`]:
//!
//! - **embedded**: into the process's [`Views`] and, if asked, an event log
//!   file (`ray_insight::log`) that `rayrs insight export --log` reads;
//! - **cluster** (drivers and workers of a job that asked for insight):
//!   encoded, into a bounded queue that a tokio task ships to the head's
//!   collector ([`InsightBatch`](ray_proto::wire::InsightBatch)), which
//!   builds the job's views and log there.
//!
//! Nothing here runs on an instrumented thread except the layer itself (no
//! lock, no I/O). Pool threads hand over their partial batch when they go
//! idle (`crate::hooks::flush`), so a quiet job's last records are not left
//! sitting in a thread's buffer.

#[cfg(feature = "dashboard")]
mod dashboard;
#[cfg(feature = "cluster")]
mod ship;
#[cfg(feature = "cluster")]
pub(crate) use ship::ship_to_head;

use std::collections::VecDeque;
use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use parking_lot::Mutex;
use ray_insight::export::{self, ExportFormat, ViewKind};
use ray_insight::log::{encode_records, Chunk, LogWriter};
use ray_insight::{
    Collector, Drained, FieldValue, InsightConfig, InsightLayer, Record, RecordKind, Sink, Views,
};
use ray_proto::{JobId, WorkerId};
use tracing_subscriber::layer::SubscriberExt;

use crate::error::{Error, Result};
use crate::insight::InsightOptions;

/// How often the drain thread moves recorded batches on.
pub const PUMP_EVERY: Duration = Duration::from_millis(50);

/// Records a pump must move for the next one to come after
/// [`BUSY_PUMP_EVERY`] rather than [`PUMP_EVERY`].
const BUSY_PUMP_RECORDS: usize = 2048;

/// How soon the drain thread pumps again after a busy pump.
const BUSY_PUMP_EVERY: Duration = Duration::from_millis(2);

/// How often a recording runtime samples its resource use.
pub(crate) const SAMPLE_EVERY: Duration = Duration::from_secs(1);

/// Encoded batches waiting to be shipped to the head, at most; beyond it the
/// oldest are dropped (and counted).
const MAX_UNSHIPPED_BATCHES: usize = 256;

/// Records per shipped batch, about: a chunk is shipped once it holds this
/// many, after a whole drained batch (up to a thread's batch size) is added.
/// Keeps each message far below the head's cap on a shipped batch (1 MiB;
/// records encode to tens of bytes), and one that encodes larger is split.
const SHIP_CHUNK_RECORDS: usize = 4096;

/// How long [`Insight::flush`] waits for shipped batches to be acknowledged.
const SHIP_WAIT: Duration = Duration::from_secs(10);

/// The process's recording, once installed.
static RECORDING: OnceLock<Insight> = OnceLock::new();

/// A handle on this process's insight recording: what [`Ray::insight`](crate::Ray::insight)
/// returns when the runtime records.
///
/// Cloning gives another handle on the same recording.
#[derive(Clone)]
pub struct Insight {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Insight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Insight")
            .field("recorded", &self.inner.collector.recorded())
            .field("dropped", &self.dropped())
            .finish_non_exhaustive()
    }
}

struct Inner {
    collector: Collector,
    /// Embedded: the views and the optional log. Guarded together, so a
    /// pump applies a batch to both or neither.
    local: Mutex<Local>,
    /// Cluster: where batches go instead.
    ship: Mutex<Option<Arc<Shipper>>>,
    /// The layer's drop count already reported in the record stream.
    reported_dropped: AtomicU64,
    /// The dashboard this process serves, if asked.
    #[cfg(feature = "dashboard")]
    dashboard: Mutex<Option<ray_dashboard::Dashboard>>,
    /// Held by a pump from drain to delivery: two pumps (the drain thread
    /// and a reader flushing) never deliver batches out of order.
    pumping: Mutex<()>,
}

#[derive(Default)]
struct Local {
    views: Views,
    log: Option<LogWriter<BufWriter<File>>>,
    log_path: Option<PathBuf>,
    /// Pumps that brought records: the dashboard's version of the views.
    version: u64,
}

/// Ships encoded batches of one job to the head (only a cluster process
/// has one).
#[cfg_attr(not(feature = "cluster"), allow(dead_code))]
struct Shipper {
    job: JobId,
    worker: WorkerId,
    epoch_unix_nanos: u64,
    /// Encoded batches and how many records each holds.
    queue: Mutex<VecDeque<(u64, Vec<u8>)>>,
    /// Woken when a batch is queued.
    queued: tokio::sync::Notify,
    /// Woken when the queue empties (for `flush`).
    drained: tokio::sync::Notify,
    /// Records dropped: queue full, or the head refused or was unreachable.
    lost_records: AtomicU64,
    in_flight: AtomicBool,
}

/// Where one pump delivers the batches it drains, one batch at a time (no
/// batch is copied into a pump-wide list first).
struct Deliver<'a> {
    to: To<'a>,
    /// The newest record's time seen so far.
    last_at: u64,
}

enum To<'a> {
    /// Embedded: straight into the views and the log.
    Local(&'a mut Local),
    /// Cluster: gathered into chunks of about [`SHIP_CHUNK_RECORDS`] (a
    /// drained batch is not split), the runtime's records in their compact
    /// shapes, each encoded and queued for shipping.
    Ship { shipper: &'a Shipper, chunk: Chunk },
}

/// Encoded bytes per shipped batch, at most (unless one record alone is
/// larger): half the head's cap on a batch (1 MiB), so records with large
/// fields (an application's spans) split into more batches instead of being
/// refused whole.
const MAX_SHIP_BYTES: usize = 1 << 19;

/// Encodes `chunk` (compact shapes as they are) and queues it for
/// shipping, leaving it empty; one that encodes to more than
/// [`MAX_SHIP_BYTES`] is expanded and shipped as [`ship_chunk`] ships
/// records.
fn ship_packed(shipper: &Shipper, chunk: &mut Chunk) {
    if chunk.is_empty() {
        return;
    }
    // A compact record encodes to a few dozen bytes: room for most
    // chunks without growing (each growth copies what is written).
    let mut bytes = Vec::with_capacity(chunk.len().saturating_mul(48).min(MAX_SHIP_BYTES));
    chunk.encode(&mut bytes);
    if bytes.len() > MAX_SHIP_BYTES && chunk.len() > 1 {
        ship_chunk(shipper, &mut chunk.take_records());
        return;
    }
    let records = chunk.len() as u64;
    chunk.clear();
    queue_shipped(shipper, records, bytes);
}

/// Queues `bytes`, an encoded batch of `records`, for shipping; the oldest
/// queued batch is dropped (and counted lost) when the queue is full.
fn queue_shipped(shipper: &Shipper, records: u64, bytes: Vec<u8>) {
    let mut queue = shipper.queue.lock();
    if queue.len() >= MAX_UNSHIPPED_BATCHES {
        if let Some((lost, _)) = queue.pop_front() {
            shipper.lost_records.fetch_add(lost, Ordering::Relaxed);
        }
    }
    queue.push_back((records, bytes));
}

/// Encodes `chunk` and queues it for shipping, leaving it empty; a chunk
/// that encodes to more than [`MAX_SHIP_BYTES`] is shipped in halves.
fn ship_chunk(shipper: &Shipper, chunk: &mut Vec<Record>) {
    if chunk.is_empty() {
        return;
    }
    let mut bytes = Vec::new();
    encode_records(chunk, &mut bytes);
    if bytes.len() > MAX_SHIP_BYTES && chunk.len() > 1 {
        let mut second = chunk.split_off(chunk.len() / 2);
        ship_chunk(shipper, chunk);
        ship_chunk(shipper, &mut second);
        return;
    }
    let records = chunk.len() as u64;
    chunk.clear();
    queue_shipped(shipper, records, bytes);
}

impl Sink for Deliver<'_> {
    fn accept(&mut self, batch: &[Record]) {
        self.accept_owned(&mut batch.to_vec());
    }

    fn accept_drained(&mut self, batch: &mut Drained<'_>) {
        match &mut self.to {
            // The views read the compact shapes as they are, and the log
            // writes them so.
            To::Local(local) => {
                if let Some(last) = batch.last_at() {
                    self.last_at = self.last_at.max(last);
                }
                let Local { views, log, .. } = &mut **local;
                batch.apply_to(views);
                if let Some(log) = log {
                    log.accept_drained(batch);
                }
            }
            To::Ship { shipper, chunk } => {
                if let Some(last) = batch.last_at() {
                    self.last_at = self.last_at.max(last);
                }
                chunk.take_drained(batch);
                if chunk.len() >= SHIP_CHUNK_RECORDS {
                    ship_packed(shipper, chunk);
                }
            }
        }
    }

    fn accept_owned(&mut self, batch: &mut Vec<Record>) {
        if let Some(last) = batch.last() {
            // A run recorded as one record ends at its close.
            let last_at = last.closed_at().unwrap_or(0).max(last.at_nanos);
            self.last_at = self.last_at.max(last_at);
        }
        match &mut self.to {
            To::Local(local) => {
                let Local { views, log, .. } = &mut **local;
                views.accept(batch);
                if let Some(log) = log {
                    log.accept(batch);
                }
            }
            To::Ship { shipper, chunk } => {
                for record in batch.drain(..) {
                    chunk.push(record);
                    if chunk.len() >= SHIP_CHUNK_RECORDS {
                        ship_packed(shipper, chunk);
                    }
                }
            }
        }
    }
}

/// Asks the calling tokio runtime's worker threads to hand over their
/// partial batches: a few tiny tasks per worker, which the scheduler spreads
/// over them (not guaranteed to reach every one; runtimes ray-core builds
/// flush whenever a thread parks anyway).
async fn flush_tokio_workers() {
    let Ok(handle) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let workers = handle.metrics().num_workers().max(1);
    let flushes: Vec<_> = (0..workers * 4)
        .map(|_| {
            handle.spawn(async {
                InsightLayer::flush_current_thread();
                tokio::task::yield_now().await;
                InsightLayer::flush_current_thread();
            })
        })
        .collect();
    for f in flushes {
        let _ = f.await;
    }
}

/// A driver's program as the job selector names it: the file name of its
/// `argv[0]` (`?` when there is none).
#[cfg(feature = "dashboard")]
pub(crate) fn program_name(argv0: &str) -> String {
    Path::new(argv0)
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "?".to_owned())
}

/// The process's recording, if installed.
pub(crate) fn current() -> Option<Insight> {
    RECORDING.get().cloned()
}

/// Installs recording in this process (once; later calls return the same
/// handle), with `options` for an embedded runtime.
///
/// # Errors
///
/// [`Error::InvalidArgument`] when another global `tracing` subscriber is
/// already set (add `ray_insight::InsightLayer` to it instead), or the log
/// file cannot be created.
pub(crate) fn install(options: &InsightOptions) -> Result<Insight> {
    if let Some(existing) = RECORDING.get() {
        if let Some(path) = &options.log {
            existing.open_log(path)?;
        }
        if let Some(addr) = options.dashboard {
            existing.serve_dashboard(addr)?;
        }
        return Ok(existing.clone());
    }
    let (layer, collector) = InsightLayer::new(InsightConfig::default());
    // The runtime's own records skip `tracing`'s dispatch (`crate::trace`).
    layer.record_runtime_directly();
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(layer)).map_err(
        |_| {
            Error::InvalidArgument(
                "insight: a global tracing subscriber is already set; add \
                 ray_insight::InsightLayer to it instead of asking the runtime to record"
                    .into(),
            )
        },
    )?;
    let insight = Insight {
        inner: Arc::new(Inner {
            collector,
            local: Mutex::new(Local::default()),
            ship: Mutex::new(None),
            reported_dropped: AtomicU64::new(0),
            #[cfg(feature = "dashboard")]
            dashboard: Mutex::new(None),
            pumping: Mutex::new(()),
        }),
    };
    // Lost only to a racing install, which then failed to set the subscriber.
    let insight = RECORDING.get_or_init(|| insight).clone();
    if let Some(path) = &options.log {
        insight.open_log(path)?;
    }
    if let Some(addr) = options.dashboard {
        insight.serve_dashboard(addr)?;
    }
    // The runtime hands over a thread's partial batch when it goes idle.
    crate::hooks::set_recorder(InsightLayer::flush_current_thread);
    let pump = Arc::downgrade(&insight.inner);
    std::thread::Builder::new()
        .name("rayrs-insight".into())
        .spawn(move || {
            let mut moved = 0;
            loop {
                // A busy job is drained often, so few batches wait: their
                // buffers go back to the recording threads instead of each
                // hand-off allocating (and faulting in) a fresh one.
                std::thread::sleep(if moved >= BUSY_PUMP_RECORDS {
                    BUSY_PUMP_EVERY
                } else {
                    PUMP_EVERY
                });
                match pump.upgrade() {
                    Some(inner) => moved = inner.pump(),
                    None => return,
                }
            }
        })
        .map_err(|e| Error::InvalidArgument(format!("insight: cannot start its thread: {e}")))?;
    Ok(insight)
}

impl Inner {
    /// Moves what the layer queued on: into the views and log, or to the
    /// shipping queue. Returns how many records it moved.
    fn pump(&self) -> usize {
        let _order = self.pumping.lock();
        let shipper = self.ship.lock().clone();
        let mut local: Option<parking_lot::MutexGuard<'_, Local>> = None;
        let mut deliver = Deliver {
            to: match &shipper {
                Some(shipper) => To::Ship {
                    shipper,
                    chunk: Chunk::new(),
                },
                None => To::Local(local.insert(self.local.lock())),
            },
            last_at: 0,
        };
        let moved = self.collector.drain_into(&mut deliver);
        // Records the layer had to drop are reported in the stream itself,
        // so the views (here or on the head) count them.
        let dropped = self.collector.dropped();
        let reported = self.reported_dropped.swap(dropped, Ordering::Relaxed);
        if dropped > reported {
            let report = Record {
                kind: RecordKind::Event,
                span: 0,
                parent: 0,
                name: "insight.dropped",
                target: "ray::insight",
                at_nanos: deliver.last_at,
                thread: 0,
                fields: [("count", FieldValue::U64(dropped - reported))]
                    .into_iter()
                    .collect(),
            };
            deliver.accept_owned(&mut vec![report]);
        } else if moved == 0 {
            return 0;
        }
        match deliver.to {
            To::Ship { shipper, mut chunk } => {
                ship_packed(shipper, &mut chunk);
                shipper.queued.notify_one();
            }
            To::Local(local) => {
                local.version += 1;
                if let Some(log) = &mut local.log {
                    // A flush per pump bounds what a crash loses to one period.
                    let _ = log.flush();
                }
            }
        }
        moved
    }
}

impl Insight {
    /// Moves everything recorded so far, every thread's partial batch
    /// included, into the views and the event log (flushed to its file),
    /// or to the shipping queue; without waiting on anything. The runtime
    /// calls it at shutdown, so a program that ends right after
    /// `shutdown()` keeps its log whole.
    pub(crate) fn flush_now(&self) {
        InsightLayer::flush_current_thread();
        self.inner.collector.flush_all_threads();
        self.inner.pump();
    }

    /// The dashboard's URL (access token included), when this process
    /// serves one ([`InsightOptions::dashboard`]).
    pub fn dashboard_url(&self) -> Option<String> {
        #[cfg(feature = "dashboard")]
        return self
            .inner
            .dashboard
            .lock()
            .as_ref()
            .map(ray_dashboard::Dashboard::url);
        #[cfg(not(feature = "dashboard"))]
        None
    }

    /// Without the `dashboard` feature there is no dashboard to serve:
    /// asking for one is an error rather than a silent no-op.
    #[cfg(not(feature = "dashboard"))]
    fn serve_dashboard(&self, addr: std::net::SocketAddr) -> Result<()> {
        Err(Error::InvalidArgument(format!(
            "insight: cannot serve the dashboard on {addr}: this build of ray-core has no \
             dashboard (its `dashboard` feature is off)"
        )))
    }

    fn open_log(&self, path: &Path) -> Result<()> {
        let writer =
            LogWriter::create(path, self.inner.collector.epoch_unix_nanos()).map_err(|e| {
                Error::InvalidArgument(format!(
                    "insight: cannot create the event log {}: {e}",
                    path.display()
                ))
            })?;
        let mut local = self.inner.local.lock();
        if let Some(old) = &mut local.log {
            let _ = old.flush();
        }
        local.log = Some(writer);
        local.log_path = Some(path.to_owned());
        Ok(())
    }

    /// Hands over the calling thread's records and moves everything
    /// recorded so far on: into the views and log (embedded), or to the
    /// head (cluster), waiting up to 10 s for the head to acknowledge.
    ///
    /// Records still in another busy thread's partial batch are not
    /// included; pool threads hand theirs over whenever they go idle.
    pub async fn flush(&self) {
        InsightLayer::flush_current_thread();
        flush_tokio_workers().await;
        self.inner.pump();
        let shipper = self.inner.ship.lock().clone();
        if let Some(shipper) = shipper {
            let deadline = tokio::time::Instant::now() + SHIP_WAIT;
            loop {
                let drained = shipper.drained.notified();
                tokio::pin!(drained);
                drained.as_mut().enable();
                if shipper.queue.lock().is_empty() && !shipper.in_flight.load(Ordering::Acquire) {
                    return;
                }
                shipper.queued.notify_one();
                if tokio::time::timeout_at(deadline, drained).await.is_err() {
                    return;
                }
            }
        }
    }

    /// [`Insight::flush`] until every task the views saw has finished (its
    /// run span closed), or `timeout` passes: for a complete picture after
    /// a run (a span closes just after its result is visible). An
    /// application's own span left open (kept in an actor's state) does not
    /// hold it up. Returns whether it settled. On a cluster process it is
    /// one flush.
    pub async fn settle(&self, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            self.flush().await;
            let open = self.with_views(|views| views.stats().live_tasks);
            match open {
                None | Some(0) => return true,
                Some(_) if tokio::time::Instant::now() >= deadline => return false,
                Some(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
    }

    /// Runs `f` on this process's views, after moving what was recorded so
    /// far into them. `None` on a cluster process: the head builds the
    /// job's views (`rayrs insight export --address`).
    pub fn with_views<R>(&self, f: impl FnOnce(&Views) -> R) -> Option<R> {
        InsightLayer::flush_current_thread();
        self.inner.pump();
        if self.inner.ship.lock().is_some() {
            return None;
        }
        let local = self.inner.local.lock();
        Some(f(&local.views))
    }

    /// One view as text, as `rayrs insight export` writes it
    /// (`view`: logical, physical, stack, flame, gantt; `format`: json,
    /// dot, folded, svg, chrome, text), optionally filtered on a context
    /// label `(key, value)`. `None` on a cluster process (see [`Insight::with_views`]).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an unknown view or format, or a
    /// format the view does not have.
    pub fn export(
        &self,
        view: &str,
        format: &str,
        filter: Option<(&str, &str)>,
    ) -> Result<Option<String>> {
        let bad = |e: String| Error::InvalidArgument(format!("insight export: {e}"));
        let view: ViewKind = view.parse().map_err(|e| bad(format!("{e}")))?;
        let format: ExportFormat = format.parse().map_err(|e| bad(format!("{e}")))?;
        self.with_views(|views| {
            let snapshot = match filter {
                Some((k, v)) => views.filter(k, v),
                None => views.snapshot(),
            };
            export::export(&snapshot, view, format).map_err(|e| bad(e.to_string()))
        })
        .transpose()
    }

    /// The bottleneck summary as text, as `rayrs insight top` prints it:
    /// the `rows` actor instances and functions with the most self time,
    /// the longest waits, the largest data edges, and deadlocks. `None` on
    /// a cluster process (see [`Insight::with_views`]).
    pub fn top(&self, rows: usize) -> Option<String> {
        self.with_views(|views| views.snapshot().top(rows).to_text())
    }

    /// Writes the five views to `dir` (created if missing) and returns the
    /// files written: `logical.json`, `logical.dot`, `flame.folded`,
    /// `flame.svg`, `gantt.json` (Chrome trace), `stacks.json`,
    /// `stacks.txt`, `physical.json`. Nothing on a cluster process.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] naming the file that could not be written.
    pub fn write_views(&self, dir: &Path) -> Result<Vec<PathBuf>> {
        const FILES: [(&str, &str, &str); 8] = [
            ("logical", "json", "logical.json"),
            ("logical", "dot", "logical.dot"),
            ("flame", "folded", "flame.folded"),
            ("flame", "svg", "flame.svg"),
            ("gantt", "chrome", "gantt.json"),
            ("stack", "json", "stacks.json"),
            ("stack", "text", "stacks.txt"),
            ("physical", "json", "physical.json"),
        ];
        let io = |path: &Path, e: std::io::Error| {
            Error::InvalidArgument(format!("insight: cannot write {}: {e}", path.display()))
        };
        std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
        let mut written = Vec::new();
        for (view, format, file) in FILES {
            let Some(text) = self.export(view, format, None)? else {
                return Ok(written);
            };
            let path = dir.join(file);
            std::fs::write(&path, text).map_err(|e| io(&path, e))?;
            written.push(path);
        }
        Ok(written)
    }

    /// Records lost so far: by the layer (its queue was full), by the views
    /// (a cap refused them), and batches the head never acknowledged.
    pub fn dropped(&self) -> u64 {
        let views = self.inner.local.lock().views.dropped();
        let shipped = self
            .inner
            .ship
            .lock()
            .as_ref()
            .map_or(0, |s| s.lost_records.load(Ordering::Relaxed));
        self.inner.collector.dropped() + views + shipped
    }

    /// Records that reached the layer's queue so far.
    pub fn recorded(&self) -> u64 {
        self.inner.collector.recorded()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunk_of_large_records_ships_in_batches_under_the_byte_cap() {
        let shipper = Shipper {
            job: JobId(1),
            worker: WorkerId(1),
            epoch_unix_nanos: 0,
            queue: Mutex::new(VecDeque::new()),
            queued: tokio::sync::Notify::new(),
            drained: tokio::sync::Notify::new(),
            lost_records: AtomicU64::new(0),
            in_flight: AtomicBool::new(false),
        };
        let big = "x".repeat(20_000);
        let mut chunk: Vec<Record> = (0..100u64)
            .map(|i| Record {
                kind: RecordKind::Event,
                span: 0,
                parent: 0,
                name: "user",
                target: "app",
                at_nanos: i,
                thread: 0,
                fields: [("payload", FieldValue::Str(big.as_str().into()))]
                    .into_iter()
                    .collect(),
            })
            .collect();
        ship_chunk(&shipper, &mut chunk);
        assert!(chunk.is_empty());
        let queue = shipper.queue.lock();
        assert!(queue.len() >= 4, "2 MB in batches of at most 512 KiB");
        let mut times = Vec::new();
        for (records, bytes) in queue.iter() {
            assert!(bytes.len() <= MAX_SHIP_BYTES);
            let decoded = ray_insight::log::decode_records(bytes).expect("decodes");
            assert_eq!(decoded.len() as u64, *records);
            times.extend(decoded.iter().map(|r| r.at_nanos));
        }
        // Every record, once, in order.
        assert_eq!(times, (0..100).collect::<Vec<_>>());
    }
}
