//! Insight layer of ray-rs: records what the runtime does, from its `tracing`
//! spans and events, for the five insight views.
//!
//! # What this crate owns
//!
//! Now: the recording foundation.
//! - [`InsightLayer`], a `tracing_subscriber::Layer` that turns span creation,
//!   span close and events under a target prefix (default `"ray"`) into compact
//!   [`Record`]s. Each thread appends to its own bounded buffer; full batches go
//!   to a bounded shared queue; when that is full, batches are dropped and
//!   counted. The instrumented thread never blocks and never does I/O.
//! - [`direct`]: the runtime's own records written straight into the
//!   layer's per-thread buffers, skipping `tracing`'s dispatch, once a layer
//!   is made their target ([`InsightLayer::record_runtime_directly`]); its
//!   submits, runs and object moves in compact typed shapes that the
//!   collector expands into [`Record`]s, stamped by a clock that reads the
//!   CPU's time-stamp counter where the kernel keeps time with it.
//! - [`Collector`], which drains queued batches into a [`Sink`], and
//!   [`MemorySink`], the in-memory sink used by tests and the embedded mode.
//!
//! - [`views`]: the [`Views`] engine, a [`Sink`] that builds the five insight
//!   views incrementally from records, in bounded memory ([`Limits`]):
//!   logical graph (JSON, DOT), flame graph by distributed call path (folded
//!   stacks and their diff), Gantt chart (Chrome trace JSON with flow arrows),
//!   distributed stack with deadlock detection (JSON, text), and physical view
//!   (JSON); every view can be filtered by an inherited context label. It is
//!   pure: records in, views out, no clock, no threads, no I/O.
//! - [`resources`]: reading a process's CPU and resident memory (`/proc`) and
//!   the machine's GPUs (`nvidia-smi`), for the runtime's resource samples.
//!
//! - [`log`]: the append-only event log. [`LogWriter`](log::LogWriter) is a
//!   [`Sink`] (beside live views through a [`Tee`]) that appends batches as
//!   checksummed frames; [`read_log`](log::read_log) reads them back, keeping
//!   the readable prefix of a truncated or corrupt file; [`replay`](log::replay)
//!   rebuilds the views as they stood at any time t. Its batch encoding
//!   ([`encode_records`](log::encode_records)) also ships records between
//!   processes.
//! - [`export`]: every view in the formats it supports, by name (what the
//!   `rayrs insight` command prints), including flame graph SVGs and
//!   differential flame graphs drawn with `inferno`.
//!
//! The browser dashboard that serves these views is `ray-dashboard`, a crate
//! above this one.
//!
//! # What it must not know about
//!
//! ray-insight depends on `tracing` (and `serde_json` and `inferno` for the
//! view exports) only: no async runtime, no sockets, no HTTP. It knows no
//! runtime types (no ray-core, ray-proto, scheduler or store types); it reads
//! span and event names and their fields (`task_id`, `object_id`, `bytes`, …).
//! The runtime reaches it only through [`direct`] and the layer, and only
//! when its `insight` feature is on; without it, it emits `tracing` spans.
//!
//! # Example
//!
//! ```
//! use ray_insight::{InsightConfig, InsightLayer, MemorySink};
//! use tracing_subscriber::layer::SubscriberExt;
//!
//! let (layer, collector) = InsightLayer::new(InsightConfig::default());
//! let subscriber = tracing_subscriber::registry().with(layer);
//! tracing::subscriber::with_default(subscriber, || {
//!     let span = tracing::info_span!(target: "ray_core::task", "task.run", task_id = 7u64);
//!     let _entered = span.enter();
//!     tracing::info!(target: "ray_core::object", object_id = 3u64, bytes = 4096u64, "object.put");
//! });
//! InsightLayer::flush_current_thread();
//!
//! let mut sink = MemorySink::new(1024);
//! collector.drain_into(&mut sink);
//! assert_eq!(sink.len(), 3); // span new, event, span close
//! assert_eq!(sink.records()[0].field("task_id").and_then(|v| v.as_u64()), Some(7));
//! ```

mod clock;
pub mod direct;
pub mod export;
mod layer;
pub mod log;
mod packed;
mod queue;
mod record;
pub mod resources;
mod sink;
pub mod views;

pub use layer::{InsightConfig, InsightLayer};
pub use record::{FieldStr, FieldValue, Fields, Record, RecordKind, CLOSED_AT};
pub use sink::{Collector, Drained, MemorySink, Sink, Tee};
pub use views::{Limits, Snapshot, Views};
