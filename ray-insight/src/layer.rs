//! [`InsightLayer`]: the `tracing_subscriber::Layer` that turns spans and events
//! into [`Record`]s on the instrumented thread.
//!
//! The hot path appends to the current thread's partial batch (one per
//! layer, reached through a `thread_local`) under that batch's own lock,
//! which only the collector ever also takes, and only for a batch left
//! stale (see [`crate::queue::PartialBatch`]): uncontended but for that.
//! Only when a batch is full does the thread take the shared queue's lock,
//! once, to hand it over; when the queue is full the batch is dropped and
//! counted. Nothing here does I/O; the longest a thread can wait is while
//! the collector hands over its stale batch.
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

use crate::packed::Batch;
use crate::queue::{PartialBatch, Shared, STALE_NANOS};
use crate::record::{FieldCollector, FieldValue, Fields, Record, RecordKind, CLOSED_AT};
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
    /// Also record spans of other targets opened inside a recorded span
    /// (an application's own `tracing` spans inside a task or actor call,
    /// such as `reward_fn`): the views show them as frames under the call.
    /// Their events are not recorded.
    pub user_spans: bool,
}

impl Default for InsightConfig {
    fn default() -> Self {
        Self {
            batch_size: 256,
            max_queued_batches: 1024,
            target_prefix: "ray".to_owned(),
            user_spans: true,
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
/// [`InsightLayer::flush_current_thread`] or exits, or when the collector
/// takes it once it is 100 ms old (a thread blocked in a long call).
#[derive(Debug)]
pub struct InsightLayer {
    shared: Arc<Shared>,
    target_prefix: Box<str>,
    user_spans: bool,
}

/// What [`InsightLayer::record_in_place`] appends: an opening gets a fresh
/// span id, a close names the span it closes.
#[derive(Clone, Copy)]
pub(crate) enum Kind {
    SpanNew,
    SpanClose(u64),
    /// A direct span's close: folded into its opening record (see
    /// [`CLOSED_AT`]) when that is still the last record of the thread's
    /// batch, else a close record of its own.
    DirectClose(u64),
    Event,
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
        let epoch = Instant::now();
        let epoch_unix_nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        let shared = Arc::new(Shared::new(
            config.batch_size.max(1),
            config.max_queued_batches,
            epoch,
            epoch_unix_nanos,
        ));
        let layer = InsightLayer {
            shared: Arc::clone(&shared),
            target_prefix: config.target_prefix.into_boxed_str(),
            user_spans: config.user_spans,
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

    fn record_in_place(
        &self,
        kind: Kind,
        parent: u64,
        metadata: &'static Metadata<'static>,
        fill: impl FnOnce(&mut Fields),
    ) -> Option<u64> {
        append(
            &self.shared,
            kind,
            parent,
            (metadata.name(), metadata.target()),
            fill,
        )
    }

    /// Makes this layer the target of the runtime's direct records
    /// ([`crate::direct`]): from now on [`crate::direct::enabled`] is true
    /// and the runtime writes its own records into this layer's buffers
    /// without going through `tracing`. One layer per process can ever be
    /// the target (the runtime installs one, once); returns false (and
    /// changes nothing) for any other layer, even after the target is gone.
    pub fn record_runtime_directly(&self) -> bool {
        crate::direct::install(Arc::clone(&self.shared))
    }
}

/// Appends a record stamped now to this thread's buffer for the layer
/// sharing `shared`, built in place: `fill` writes its fields straight into
/// the buffered record (a record is a few hundred bytes; moving it through
/// the call chain cost more than the rest of recording). For span openings
/// it first gets a fresh span id. Returns the span id given (0 for other
/// kinds), or `None` when the record had to be dropped.
///
/// `fill` runs while this thread's buffers are borrowed: a field whose
/// `Debug` impl itself emits a tracing event gets that inner event dropped
/// (and counted), never a panic or a deadlock.
pub(crate) fn append(
    shared: &Arc<Shared>,
    kind: Kind,
    parent: u64,
    names: (&'static str, &'static str),
    fill: impl FnOnce(&mut Fields),
) -> Option<u64> {
    append_merging(shared, kind, parent, names, |fields, _| fill(fields))
}

/// [`append`], with `fill` told whether a [`Kind::DirectClose`] was folded
/// into its opening record (`true`) or is a close record of its own.
pub(crate) fn append_merging(
    shared: &Arc<Shared>,
    kind: Kind,
    parent: u64,
    (name, target): (&'static str, &'static str),
    fill: impl FnOnce(&mut Fields, bool),
) -> Option<u64> {
    let op = match kind {
        Kind::SpanNew => SpanOp::Fresh,
        // A direct span leaves this thread's stack in the same visit.
        Kind::DirectClose(span) => SpanOp::Close(span),
        Kind::SpanClose(_) | Kind::Event => SpanOp::None,
    };
    append_packed(shared, op, |batch, stamp| {
        let (kind, span, folds) = match kind {
            Kind::SpanNew => (RecordKind::SpanNew, stamp.span, false),
            Kind::SpanClose(span) => (RecordKind::SpanClose, span, false),
            Kind::DirectClose(span) => (RecordKind::SpanClose, span, true),
            Kind::Event => (RecordKind::Event, 0, false),
        };
        // A direct close with nothing recorded on this thread since its
        // span opened (the opening is the batch's last record): one record
        // stands for both, when `closed_at` still fits its inline fields
        // (a close's own fields may not: an error, or the CPU time of a run
        // of 50 µs or more), and only for the spans the views read
        // `closed_at` on (a run's).
        let open = batch.last_full_mut().filter(|r| {
            folds && r.span == span && r.is_foldable() && r.fields.len() < Fields::INLINE
        });
        if let Some(open) = open {
            fill(&mut open.fields, true);
            open.fields.push(CLOSED_AT, FieldValue::U64(stamp.at));
            return span;
        }
        let record = batch.push_full(Record {
            kind,
            span,
            parent,
            name,
            target,
            at_nanos: stamp.at,
            thread: stamp.thread,
            fields: Fields::new(),
        });
        fill(&mut record.fields, false);
        span
    })
}

/// Who writes a record, and when: what [`append_packed`] hands its writer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stamp {
    /// The recording thread's index.
    pub(crate) thread: u32,
    /// Now, in nanoseconds since the layer's epoch.
    pub(crate) at: u64,
    /// A fresh span id, for [`SpanOp::Open`] and [`SpanOp::Fresh`] (else 0).
    pub(crate) span: u64,
    /// The innermost direct span open on this thread before this record
    /// (its parent, unless it closes a span).
    pub(crate) parent: u64,
}

/// What a record does to this thread's stack of open direct spans.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SpanOp {
    /// Nothing (an event, a `tracing` span's close).
    None,
    /// A span opening that is not a direct one (a `tracing` span): it gets
    /// a fresh id, and the stack is left alone.
    Fresh,
    /// Opens a direct span: it gets a fresh id and goes on the stack.
    Open,
    /// Closes span `id`: it comes off the stack.
    Close(u64),
}

/// Runs `write` on this thread's batch for the layer sharing `shared`,
/// stamped now, then hands the batch over if it is due; `op` updates the
/// thread's stack of open direct spans in the same visit of its state
/// (one thread-local access per record). `None` (and the record counted
/// dropped) when the thread has no usable buffer: during its teardown, or
/// re-entered from inside `write` (a field's `Debug` that itself records).
pub(crate) fn append_packed<R>(
    shared: &Arc<Shared>,
    op: SpanOp,
    write: impl FnOnce(&mut Batch, Stamp) -> R,
) -> Option<R> {
    let now = shared.now();
    let appended = THREAD_STATE.try_with(|cell| {
        let mut state = cell.try_borrow_mut().ok()?;
        let parent = state.open.last().copied().unwrap_or(0);
        let span = match op {
            SpanOp::Open => {
                let span = state.next_span_id();
                state.open.push(span);
                span
            }
            SpanOp::Fresh => state.next_span_id(),
            SpanOp::Close(span) => {
                state.close_direct(span);
                0
            }
            SpanOp::None => 0,
        };
        let thread = state.index;
        let buffer = state.buffer_for(shared);
        // A thread's stamps never go back (the clock may step a little
        // when its rate is measured again: see `clock.rs`).
        let at = now.max(buffer.last_at);
        buffer.last_at = at;
        let stamp = Stamp {
            thread,
            at,
            span,
            parent,
        };
        let mut batch = buffer.records.lock();
        let written = write(&mut batch, stamp);
        flush_if_due(shared, &mut batch, at);
        Some(written)
    });
    let written = appended.ok().flatten();
    if written.is_none() {
        shared.count_dropped(1);
    }
    written
}

impl Drop for InsightLayer {
    fn drop(&mut self) {
        crate::direct::uninstall(&self.shared);
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

/// `parent`, or when no recorded `tracing` span encloses the record (0),
/// the runtime's innermost direct span open on this thread: a span or event
/// inside a task then hangs under the task's run.
fn or_direct(parent: u64) -> u64 {
    if parent != 0 || !crate::direct::enabled() {
        return parent;
    }
    current_direct_span()
}

/// The innermost direct span open on this thread, or 0.
pub(crate) fn current_direct_span() -> u64 {
    THREAD_STATE
        .try_with(|cell| {
            cell.try_borrow()
                .ok()
                .and_then(|state| state.open.last().copied())
        })
        .ok()
        .flatten()
        .unwrap_or(0)
}

/// Notes a direct span opened (`open`) or closed on this thread.
pub(crate) fn track_direct_span(span: u64, open: bool) {
    let _ = THREAD_STATE.try_with(|cell| {
        if let Ok(mut state) = cell.try_borrow_mut() {
            if open {
                state.open.push(span);
            } else {
                state.close_direct(span);
            }
        }
    });
}

/// The innermost application span this layer recorded that is entered on
/// this thread, or 0: what a task submitted here runs under in the views.
pub(crate) fn current_user_span() -> u64 {
    THREAD_STATE
        .try_with(|cell| {
            cell.try_borrow()
                .ok()
                .and_then(|state| state.entered.last().copied())
        })
        .ok()
        .flatten()
        .unwrap_or(0)
}

/// The most application spans kept as entered on one thread; past it the
/// outermost is forgotten (a guard held across an `.await` may exit on
/// another thread and leave its entry here).
const MAX_ENTERED: usize = 64;

/// How many application spans are entered on this thread (see
/// [`truncate_entered`]).
pub(crate) fn entered_depth() -> usize {
    THREAD_STATE
        .try_with(|cell| cell.try_borrow().map_or(0, |state| state.entered.len()))
        .unwrap_or(0)
}

/// Forgets the spans entered on this thread past the first `depth`: what a
/// task left entered when it ended (a guard that exited elsewhere).
pub(crate) fn truncate_entered(depth: usize) {
    let _ = THREAD_STATE.try_with(|cell| {
        if let Ok(mut state) = cell.try_borrow_mut() {
            state.entered.truncate(depth);
        }
    });
}

/// Notes a recorded application span entered (`entered`) or exited on this
/// thread. An exit takes out the innermost entry of that span, so spans
/// exited out of order still leave the right ones.
fn track_entered(span: u64, entered: bool) {
    let _ = THREAD_STATE.try_with(|cell| {
        if let Ok(mut state) = cell.try_borrow_mut() {
            if entered {
                if state.entered.len() >= MAX_ENTERED {
                    state.entered.remove(0);
                }
                state.entered.push(span);
            } else if let Some(at) = state.entered.iter().rposition(|s| *s == span) {
                state.entered.remove(at);
            }
        }
    });
}

/// The id this layer recorded `id` under, if it is an application span
/// (the runtime's own, under `ray::` targets, are not tracked as entered).
fn recorded_user_span<S>(id: &Id, ctx: &Context<'_, S>) -> Option<u64>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    let span = ctx.span(id)?;
    if span.metadata().target().starts_with("ray::") {
        return None;
    }
    let recorded = span.extensions().get::<RecordedSpan>()?.id;
    Some(recorded)
}

impl<S> Layer<S> for InsightLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let metadata = attrs.metadata();
        let wanted = self.wants(metadata);
        if !wanted && !self.user_spans {
            return;
        }
        let Some(span) = ctx.span(id) else {
            return;
        };
        let parent = or_direct(nearest_recorded(span.parent()));
        if !wanted && parent == 0 {
            // Another target's span outside any recorded one.
            return;
        }
        let recorded = self.record_in_place(Kind::SpanNew, parent, metadata, |fields| {
            attrs.record(&mut FieldCollector(fields));
        });
        if let Some(span_id) = recorded {
            span.extensions_mut().insert(RecordedSpan {
                id: span_id,
                parent,
                late_fields: Fields::new(),
            });
        }
    }

    fn on_enter(&self, id: &Id, ctx: Context<'_, S>) {
        if let Some(span) = recorded_user_span(id, &ctx) {
            track_entered(span, true);
        }
    }

    fn on_exit(&self, id: &Id, ctx: Context<'_, S>) {
        if let Some(span) = recorded_user_span(id, &ctx) {
            track_entered(span, false);
        }
    }

    fn on_record(&self, id: &Id, values: &SpanValues<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else {
            return;
        };
        // A user span's later fields are not kept: the views read none,
        // and a value recorded in a loop would grow without bound.
        if span.extensions().get::<RecordedSpan>().is_none() || !self.wants(span.metadata()) {
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
        let parent = or_direct(nearest_recorded(ctx.event_span(event)));
        self.record_in_place(Kind::Event, parent, metadata, |fields| {
            event.record(&mut FieldCollector(fields));
        });
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else {
            return;
        };
        let Some(recorded) = span.extensions_mut().remove::<RecordedSpan>() else {
            return;
        };
        let metadata = span.metadata();
        let RecordedSpan {
            id,
            parent,
            late_fields,
        } = recorded;
        self.record_in_place(Kind::SpanClose(id), parent, metadata, |fields| {
            *fields = late_fields;
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
    /// The runtime's direct spans open on this thread, innermost last.
    open: Vec<u64>,
    /// The application's recorded spans entered on this thread, innermost
    /// last (see [`current_user_span`]).
    entered: Vec<u64>,
}

impl ThreadState {
    fn new() -> Self {
        Self {
            index: NEXT_THREAD_INDEX.fetch_add(1, Ordering::Relaxed),
            next_span_seq: 0,
            buffers: Vec::new(),
            open: Vec::new(),
            entered: Vec::new(),
        }
    }

    /// Takes direct span `span` off the stack of open ones.
    fn close_direct(&mut self, span: u64) {
        if let Some(at) = self.open.iter().rposition(|s| *s == span) {
            self.open.remove(at);
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

    /// This thread's buffer for the layer sharing `shared`, made on first use.
    fn buffer_for(&mut self, shared: &Arc<Shared>) -> &mut ThreadBuffer {
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
                    records: shared.new_partial(),
                    last_at: 0,
                });
                self.buffers.len() - 1
            }
        };
        &mut self.buffers[position]
    }

    fn forget_gone_layers(&mut self) {
        // Dropping a buffer flushes whatever it still holds.
        self.buffers.retain(|b| !b.shared.layer_gone());
    }
}

/// One thread's partial batch for one layer.
struct ThreadBuffer {
    shared: Arc<Shared>,
    /// Shared with the collector, which takes it when the thread leaves it
    /// stale (see [`PartialBatch`]).
    records: PartialBatch,
    /// The thread's last stamp for this layer.
    last_at: u64,
}

impl ThreadBuffer {
    fn flush(&mut self) {
        self.shared.hand_off(&mut self.records.lock());
    }
}

/// Hands `records` over when the batch is full, or when its oldest record
/// has waited long (so a thread that records rarely is not hours behind);
/// `now` is the newest record's time.
fn flush_if_due(shared: &Shared, records: &mut Batch, now: u64) {
    let oldest = records.first_at().unwrap_or(now);
    if records.len() >= shared.batch_size() || now.saturating_sub(oldest) >= STALE_NANOS {
        shared.hand_off(records);
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
            open: Vec::new(),
            entered: Vec::new(),
        };
        let mut b = ThreadState {
            index: 1,
            next_span_seq: 0,
            buffers: Vec::new(),
            open: Vec::new(),
            entered: Vec::new(),
        };
        let (a0, a1, b0) = (a.next_span_id(), a.next_span_id(), b.next_span_id());
        assert!(a0 != 0 && b0 != 0);
        assert_ne!(a0, a1);
        assert_ne!(a0, b0);
    }

    #[test]
    fn entered_spans_are_bounded_and_a_task_end_forgets_what_it_left() {
        std::thread::spawn(|| {
            for span in 1..=70 {
                track_entered(span, true);
            }
            // The outermost were forgotten past the bound.
            assert_eq!(entered_depth(), MAX_ENTERED);
            assert_eq!(current_user_span(), 70);
            track_entered(70, false);
            assert_eq!(current_user_span(), 69);
            // A span exited on another thread stays: the task's end cuts
            // back to what was entered when it started.
            truncate_entered(3);
            assert_eq!(entered_depth(), 3);
            assert_eq!(current_user_span(), 9);
            truncate_entered(0);
            assert_eq!(current_user_span(), 0);
        })
        .join()
        .unwrap();
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
