//! [`InsightLayer`]: the `tracing_subscriber::Layer` that turns spans and events
//! into [`Record`]s on the instrumented thread.
//!
//! The hot path appends to a buffer owned by the current thread (a
//! `thread_local`, one buffer per layer): no lock, no shared atomic. Only when a
//! buffer holds a full batch does the thread take the shared queue's lock, once,
//! to hand the batch over; when the queue is full the batch is dropped and
//! counted. Nothing here blocks on the collector or does I/O.
//!
//! Span enter/exit are not recorded (they fire on every poll of an instrumented
//! future); span creation and close are.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Instant;

use tracing::span::{Attributes, Id, Record as SpanValues};
use tracing::{Event, Metadata, Subscriber};
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::registry::{LookupSpan, SpanRef};

use crate::queue::Shared;
use crate::record::{FieldCollector, Fields, Record, RecordKind};
use crate::sink::Collector;

/// How an [`InsightLayer`] records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InsightConfig {
    /// Records a thread collects before handing them to the shared queue as one
    /// batch. Values below 1 are treated as 1.
    pub batch_size: usize,
    /// Full batches the shared queue holds before further batches are dropped.
    /// Bounds the queue's memory at about `max_queued_batches * batch_size`
    /// records; 0 drops everything (and counts it).
    pub max_queued_batches: usize,
    /// Only spans and events whose target starts with this are recorded. The
    /// default, `"ray"`, matches every `ray_*` crate's module paths (and any
    /// other target that starts with those three letters).
    pub target_prefix: String,
}

impl Default for InsightConfig {
    fn default() -> Self {
        Self {
            batch_size: 256,
            max_queued_batches: 1024,
            target_prefix: "ray".to_owned(),
        }
    }
}

/// A `tracing_subscriber::Layer` that records span creation, span close and
/// events under a target prefix into bounded per-thread buffers, for a
/// [`Collector`] to drain.
///
/// Compose it with a registry:
/// `tracing_subscriber::registry().with(layer)`. Records reach the collector a
/// batch at a time; a thread's last partial batch arrives when the thread calls
/// [`InsightLayer::flush_current_thread`] or exits.
#[derive(Debug)]
pub struct InsightLayer {
    shared: Arc<Shared>,
    target_prefix: Box<str>,
    epoch: Instant,
}

/// What the layer keeps in a recorded span's registry extensions.
struct RecordedSpan {
    id: u64,
    parent: u64,
    /// Fields recorded with `Span::record` after creation; sent with the close.
    late_fields: Fields,
}

impl InsightLayer {
    /// Builds a layer and the collector that drains it.
    ///
    /// The layer's epoch (`Record::at_nanos == 0`) is the moment of this call.
    pub fn new(config: InsightConfig) -> (InsightLayer, Collector) {
        let shared = Arc::new(Shared::new(
            config.batch_size.max(1),
            config.max_queued_batches,
        ));
        let layer = InsightLayer {
            shared: Arc::clone(&shared),
            target_prefix: config.target_prefix.into_boxed_str(),
            epoch: Instant::now(),
        };
        (layer, Collector::new(shared))
    }

    /// Hands the calling thread's partial batches, for every insight layer that
    /// recorded on it, to their shared queues.
    ///
    /// Call it at the end of a unit of work on a thread you own (and before
    /// draining, for a complete picture); a thread's buffers are also flushed
    /// when it exits. Does nothing if called from inside the layer itself.
    pub fn flush_current_thread() {
        let _ = THREAD_STATE.try_with(|cell| {
            if let Ok(mut state) = cell.try_borrow_mut() {
                for buffer in &mut state.buffers {
                    buffer.flush();
                }
                state.forget_gone_layers();
            }
        });
    }

    fn wants(&self, metadata: &Metadata<'_>) -> bool {
        metadata.target().starts_with(&*self.target_prefix)
    }

    fn now_nanos(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// A record stamped now; `span` and `thread` are filled by `append`.
    fn record(
        &self,
        kind: RecordKind,
        parent: u64,
        metadata: &'static Metadata<'static>,
        fields: Fields,
    ) -> Record {
        Record {
            kind,
            span: 0,
            parent,
            name: metadata.name(),
            target: metadata.target(),
            at_nanos: self.now_nanos(),
            thread: 0,
            fields,
        }
    }

    /// Appends `record` to this thread's buffer for this layer; for span
    /// openings, first gives it a fresh span id. Returns the span id given, or
    /// `None` when the record had to be dropped.
    fn append(&self, mut record: Record) -> Option<u64> {
        let appended = THREAD_STATE.try_with(|cell| {
            // A failed borrow means we were re-entered (a field's `Debug` impl
            // emitted an event while we held the buffer): drop, don't panic.
            let mut state = cell.try_borrow_mut().ok()?;
            record.thread = state.index;
            if record.kind == RecordKind::SpanNew {
                record.span = state.next_span_id();
            }
            let span = record.span;
            state.push(&self.shared, record);
            Some(span)
        });
        let span = appended.ok().flatten();
        if span.is_none() {
            self.shared.count_dropped(1);
        }
        span
    }
}

impl Drop for InsightLayer {
    fn drop(&mut self) {
        self.shared.mark_layer_gone();
        flush_thread_buffer_for(&self.shared);
    }
}

/// The nearest span, starting at `span` and walking up, that this layer recorded.
fn nearest_recorded<S>(mut span: Option<SpanRef<'_, S>>) -> u64
where
    S: for<'a> LookupSpan<'a>,
{
    while let Some(current) = span {
        if let Some(recorded) = current.extensions().get::<RecordedSpan>() {
            return recorded.id;
        }
        span = current.parent();
    }
    0
}

impl<S> Layer<S> for InsightLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let metadata = attrs.metadata();
        if !self.wants(metadata) {
            return;
        }
        let Some(span) = ctx.span(id) else {
            return;
        };
        let parent = nearest_recorded(span.parent());
        // Visit fields before touching the thread buffer or the extensions:
        // a `Debug` impl may itself emit tracing events.
        let mut fields = Fields::with_capacity(metadata.fields().len());
        attrs.record(&mut FieldCollector(&mut fields));
        let record = self.record(RecordKind::SpanNew, parent, metadata, fields);
        if let Some(span_id) = self.append(record) {
            span.extensions_mut().insert(RecordedSpan {
                id: span_id,
                parent,
                late_fields: Fields::new(),
            });
        }
    }

    fn on_record(&self, id: &Id, values: &SpanValues<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else {
            return;
        };
        if span.extensions().get::<RecordedSpan>().is_none() {
            return;
        }
        let mut fields = Fields::new();
        values.record(&mut FieldCollector(&mut fields));
        if let Some(recorded) = span.extensions_mut().get_mut::<RecordedSpan>() {
            recorded.late_fields.append(&mut fields);
        };
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let metadata = event.metadata();
        if !self.wants(metadata) {
            return;
        }
        let parent = nearest_recorded(ctx.event_span(event));
        let mut fields = Fields::with_capacity(metadata.fields().len());
        event.record(&mut FieldCollector(&mut fields));
        self.append(self.record(RecordKind::Event, parent, metadata, fields));
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else {
            return;
        };
        let Some(recorded) = span.extensions_mut().remove::<RecordedSpan>() else {
            return;
        };
        let metadata = span.metadata();
        self.append(Record {
            kind: RecordKind::SpanClose,
            span: recorded.id,
            parent: recorded.parent,
            name: metadata.name(),
            target: metadata.target(),
            at_nanos: self.now_nanos(),
            thread: 0,
            fields: recorded.late_fields,
        });
    }
}

/// Hands the calling thread's partial batch for one layer to its queue.
pub(crate) fn flush_thread_buffer_for(shared: &Arc<Shared>) {
    let _ = THREAD_STATE.try_with(|cell| {
        if let Ok(mut state) = cell.try_borrow_mut() {
            if let Some(buffer) = state
                .buffers
                .iter_mut()
                .find(|b| Arc::ptr_eq(&b.shared, shared))
            {
                buffer.flush();
            }
            state.forget_gone_layers();
        }
    });
}

/// Source of per-thread indexes, in the order threads first record.
static NEXT_THREAD_INDEX: AtomicU32 = AtomicU32::new(0);

/// Bits of a span id taken by the per-thread sequence.
const SPAN_SEQ_BITS: u32 = 40;
/// Distinct thread tags that fit above the sequence (tag 0 is never used, so
/// no span id is 0).
const THREAD_TAGS: u64 = (1 << (64 - SPAN_SEQ_BITS)) - 1;

thread_local! {
    static THREAD_STATE: RefCell<ThreadState> = RefCell::new(ThreadState::new());
}

/// Everything one thread keeps for recording.
struct ThreadState {
    index: u32,
    next_span_seq: u64,
    /// One buffer per layer that recorded on this thread; almost always one.
    buffers: Vec<ThreadBuffer>,
}

impl ThreadState {
    fn new() -> Self {
        Self {
            index: NEXT_THREAD_INDEX.fetch_add(1, Ordering::Relaxed),
            next_span_seq: 0,
            buffers: Vec::new(),
        }
    }

    /// A span id unique in the process: thread tag above a per-thread sequence.
    /// (Unique unless more than 2^24 - 1 threads ever record, or one thread
    /// opens 2^40 spans.)
    fn next_span_id(&mut self) -> u64 {
        let tag = u64::from(self.index) % THREAD_TAGS + 1;
        let seq = self.next_span_seq & ((1 << SPAN_SEQ_BITS) - 1);
        self.next_span_seq += 1;
        (tag << SPAN_SEQ_BITS) | seq
    }

    fn push(&mut self, shared: &Arc<Shared>, record: Record) {
        let position = match self
            .buffers
            .iter()
            .position(|b| Arc::ptr_eq(&b.shared, shared))
        {
            Some(position) => position,
            None => {
                // A layer new to this thread: a good moment to let go of
                // buffers whose layers are gone.
                self.forget_gone_layers();
                self.buffers.push(ThreadBuffer {
                    shared: Arc::clone(shared),
                    records: Vec::with_capacity(shared.batch_size()),
                });
                self.buffers.len() - 1
            }
        };
        let buffer = &mut self.buffers[position];
        buffer.records.push(record);
        if buffer.records.len() >= buffer.shared.batch_size() {
            buffer.flush();
        }
    }

    fn forget_gone_layers(&mut self) {
        // Dropping a buffer flushes whatever it still holds.
        self.buffers.retain(|b| !b.shared.layer_gone());
    }
}

/// One thread's partial batch for one layer.
struct ThreadBuffer {
    shared: Arc<Shared>,
    records: Vec<Record>,
}

impl ThreadBuffer {
    fn flush(&mut self) {
        self.shared.hand_off(&mut self.records);
    }
}

impl Drop for ThreadBuffer {
    /// Runs when the thread exits (or the layer is gone): the partial batch
    /// still reaches the collector.
    fn drop(&mut self) {
        self.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn span_ids_are_nonzero_and_distinct_per_thread_tag() {
        let mut a = ThreadState {
            index: 0,
            next_span_seq: 0,
            buffers: Vec::new(),
        };
        let mut b = ThreadState {
            index: 1,
            next_span_seq: 0,
            buffers: Vec::new(),
        };
        let (a0, a1, b0) = (a.next_span_id(), a.next_span_id(), b.next_span_id());
        assert!(a0 != 0 && b0 != 0);
        assert_ne!(a0, a1);
        assert_ne!(a0, b0);
    }

    #[test]
    fn zero_batch_size_is_treated_as_one() {
        let (layer, collector) = InsightLayer::new(InsightConfig {
            batch_size: 0,
            ..InsightConfig::default()
        });
        assert_eq!(layer.shared.batch_size(), 1);
        assert_eq!(collector.recorded(), 0);
    }
}
