//! Where records go once recorded: the [`Sink`] trait, the [`Collector`] that
//! feeds sinks from a layer's queue, and [`MemorySink`].

use std::sync::Arc;

use crate::layer;
use crate::packed::Batch;
use crate::queue::Shared;
use crate::record::Record;
use crate::views::Views;

/// A consumer of record batches: a log writer, a view builder, a network shipper.
///
/// Sinks run on the collector's side (whoever calls [`Collector::drain_into`]),
/// never on an instrumented thread, so they may take their time.
pub trait Sink: Send {
    /// Takes in one batch of records, oldest first.
    fn accept(&mut self, batch: &[Record]);

    /// Takes in one batch that the sink may move records out of (leaving
    /// `batch` partly or wholly empty); the collector clears what remains.
    ///
    /// The default forwards to [`Sink::accept`]; sinks that keep records
    /// override it to avoid cloning them.
    fn accept_owned(&mut self, batch: &mut Vec<Record>) {
        self.accept(batch);
    }

    /// Takes in one batch as a drain found it (what
    /// [`Collector::drain_into`] calls): the runtime's records still in
    /// their compact shapes until [`Drained::records`] expands them.
    ///
    /// The default expands them and forwards to [`Sink::accept_owned`];
    /// [`Views`] read the compact shapes as they are, which costs about a
    /// quarter less than expanding them first.
    fn accept_drained(&mut self, batch: &mut Drained<'_>) {
        self.accept_owned(batch.records());
    }
}

/// One batch a drain hands to a sink ([`Sink::accept_drained`]), oldest
/// record first: records as their threads wrote them, expanded into
/// [`Record`]s only when a sink asks for them.
pub struct Drained<'a> {
    /// What is not yet expanded.
    batch: &'a mut Batch,
    /// What is: after [`Drained::records`], every record (less what a sink
    /// moved out).
    records: &'a mut Vec<Record>,
}

impl std::fmt::Debug for Drained<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Drained").field("len", &self.len()).finish()
    }
}

impl<'a> Drained<'a> {
    pub(crate) fn new(batch: &'a mut Batch, records: &'a mut Vec<Record>) -> Self {
        records.clear();
        Drained { batch, records }
    }

    /// How many records it holds.
    pub fn len(&self) -> usize {
        self.batch.len() + self.records.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The newest time its last record names: when it was recorded, or
    /// when its span closed for a run recorded as one record.
    pub fn last_at(&self) -> Option<u64> {
        match self.batch.last_at() {
            Some(at) => Some(at),
            None => self
                .records
                .last()
                .map(|r| r.closed_at().unwrap_or(0).max(r.at_nanos)),
        }
    }

    /// Every record, expanded (once): a sink may move records out.
    pub fn records(&mut self) -> &mut Vec<Record> {
        if !self.batch.is_empty() {
            self.batch.unpack_into(self.records);
        }
        self.records
    }

    /// Moves every record, compact or expanded, after `into`'s. The
    /// records are copied, not the buffers taken: the drained buffer goes
    /// back to a recording thread, which would otherwise allocate (and
    /// fault in) a fresh one.
    pub(crate) fn move_into(&mut self, into: &mut Batch) {
        into.append(self.batch);
        for record in self.records.drain(..) {
            into.push_full(record);
        }
    }

    /// Appends its encoding (one batch, compact shapes as they are, see
    /// [`crate::log::encode_records`]) to `out`.
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        if self.batch.is_empty() {
            crate::log::encode_records(self.records, out);
        } else {
            crate::log::encode_batch_into(self.batch, out);
        }
    }

    /// Applies every record to `views`: the compact shapes as they are,
    /// unless a sink already expanded them.
    pub fn apply_to(&self, views: &mut Views) {
        if self.batch.is_empty() {
            for record in self.records.iter() {
                views.apply(record);
            }
        } else {
            self.batch.visit(|packed| views.apply_packed(packed));
        }
    }
}

/// The receiving end of an [`InsightLayer`](crate::InsightLayer): moves the
/// batches the layer queued into sinks and reports what was recorded or lost.
///
/// Records still sitting in a thread's partial batch are not visible here until
/// that thread hands them over (when its batch fills, when it calls
/// [`InsightLayer::flush_current_thread`](crate::InsightLayer::flush_current_thread),
/// or when it exits) or a drain takes the batch once it is 100 ms old (at
/// most every 25 ms). Callers that need the newest records flush the threads
/// they own before draining.
/// Cloning a collector gives another handle to the same queue.
#[derive(Debug, Clone)]
pub struct Collector {
    shared: Arc<Shared>,
}

impl Collector {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        Self { shared }
    }

    /// Moves every queued batch into `sink`, oldest first, and returns how many
    /// records it moved.
    ///
    /// The queue's lock is held only to take the batches, not while the sink
    /// runs, so recording threads are not held up by a slow sink.
    pub fn drain_into(&self, sink: &mut dyn Sink) -> usize {
        let mut moved = 0;
        // The expansion buffer is taken, not locked, while the sink runs:
        // a sink that drains (or panics) leaves no records behind in it.
        let mut records = self.shared.take_unpacked();
        for mut batch in self.shared.take_batches() {
            moved += batch.len();
            // Expanded (if a sink asks) here, on the collector's side: the
            // recording thread wrote the runtime's records in their
            // compact shapes.
            sink.accept_drained(&mut Drained::new(&mut batch, &mut records));
            // Cleared there (or dropped): what a sink only read goes too.
            self.shared.recycle(batch);
        }
        records.clear();
        self.shared.give_back_unpacked(records);
        moved
    }

    /// Hands every thread's partial batch for this layer to the queue,
    /// whatever its age (a thread writing one right now keeps it): before a
    /// process ends, so that a final drain misses nothing recorded.
    pub fn flush_all_threads(&self) {
        self.shared.sweep_all();
    }

    /// Hands this layer's partial batch on the calling thread to the queue.
    ///
    /// Unlike [`InsightLayer::flush_current_thread`](crate::InsightLayer::flush_current_thread)
    /// it leaves other layers' buffers on this thread alone.
    pub fn flush_current_thread(&self) {
        layer::flush_thread_buffer_for(&self.shared);
    }

    /// Total records that reached the queue since the layer was built
    /// (whether or not they have been drained since).
    pub fn recorded(&self) -> u64 {
        self.shared.recorded()
    }

    /// Total records discarded since the layer was built: batches that found
    /// the queue full, and records that found no usable thread buffer (emitted
    /// during thread teardown, or re-entrantly from inside the layer).
    ///
    /// Once every recording thread has flushed, `recorded() + dropped()` is the
    /// number of records the layer captured.
    pub fn dropped(&self) -> u64 {
        self.shared.dropped()
    }

    /// Wall-clock time of the layer's epoch (`Record::at_nanos == 0`), in
    /// nanoseconds since the Unix epoch: what an event log's header stores,
    /// and how records of several processes are put on one time line.
    pub fn epoch_unix_nanos(&self) -> u64 {
        self.shared.epoch_unix_nanos()
    }

    /// How many full batches wait in the queue now.
    pub fn queued_batches(&self) -> usize {
        self.shared.queued_batches()
    }
}

/// A sink that keeps records in memory, up to a cap; used by tests and by the
/// embedded (single-process) mode.
///
/// When full it keeps the oldest records and counts the newer ones it discards.
#[derive(Debug, Clone, Default)]
pub struct MemorySink {
    records: Vec<Record>,
    cap: usize,
    discarded: u64,
}

impl MemorySink {
    /// An empty sink that keeps at most `cap` records.
    pub fn new(cap: usize) -> Self {
        Self {
            records: Vec::new(),
            cap,
            discarded: 0,
        }
    }

    /// The records kept, in arrival order.
    pub fn records(&self) -> &[Record] {
        &self.records
    }

    /// Takes the records kept so far, leaving the sink empty (the discard
    /// count is kept).
    pub fn take_records(&mut self) -> Vec<Record> {
        std::mem::take(&mut self.records)
    }

    /// How many records the sink holds.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether the sink holds no records.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// The most records the sink keeps.
    pub fn cap(&self) -> usize {
        self.cap
    }

    /// How many records arrived after the sink was full and were discarded.
    pub fn discarded(&self) -> u64 {
        self.discarded
    }

    fn room(&self) -> usize {
        self.cap.saturating_sub(self.records.len())
    }
}

impl Sink for MemorySink {
    fn accept(&mut self, batch: &[Record]) {
        let keep = batch.len().min(self.room());
        self.records.extend_from_slice(&batch[..keep]);
        self.discarded += (batch.len() - keep) as u64;
    }

    fn accept_owned(&mut self, batch: &mut Vec<Record>) {
        let keep = batch.len().min(self.room());
        self.discarded += (batch.len() - keep) as u64;
        self.records.extend(batch.drain(..keep));
    }
}

/// A sink that hands each batch to several sinks, in order: live [`Views`](crate::Views)
/// and a [`LogWriter`](crate::log::LogWriter) fed from one drain, say.
///
/// Borrows its sinks, so the caller keeps them (and reads them) afterwards.
/// An owned batch is cloned for every sink but the last, which may move the
/// records out.
///
/// ```
/// use ray_insight::{MemorySink, Sink, Tee};
///
/// let (mut a, mut b) = (MemorySink::new(10), MemorySink::new(10));
/// Tee::new().with(&mut a).with(&mut b).accept(&[]);
/// assert_eq!(a.len() + b.len(), 0);
/// ```
#[derive(Default)]
pub struct Tee<'a> {
    sinks: Vec<&'a mut dyn Sink>,
}

impl<'a> Tee<'a> {
    /// A tee with no sinks yet.
    pub fn new() -> Self {
        Self { sinks: Vec::new() }
    }

    /// This tee with `sink` added last.
    pub fn with(mut self, sink: &'a mut dyn Sink) -> Self {
        self.sinks.push(sink);
        self
    }

    /// Adds `sink` last.
    pub fn push(&mut self, sink: &'a mut dyn Sink) {
        self.sinks.push(sink);
    }

    /// How many sinks batches go to.
    pub fn len(&self) -> usize {
        self.sinks.len()
    }

    /// Whether batches go nowhere.
    pub fn is_empty(&self) -> bool {
        self.sinks.is_empty()
    }
}

impl std::fmt::Debug for Tee<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tee")
            .field("sinks", &self.sinks.len())
            .finish()
    }
}

impl Sink for Tee<'_> {
    fn accept(&mut self, batch: &[Record]) {
        for sink in &mut self.sinks {
            sink.accept(batch);
        }
    }

    fn accept_owned(&mut self, batch: &mut Vec<Record>) {
        if let Some((last, first)) = self.sinks.split_last_mut() {
            for sink in first {
                sink.accept(batch);
            }
            last.accept_owned(batch);
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn records(n: usize) -> Vec<Record> {
        crate::record::test_records(n)
    }

    #[test]
    fn memory_sink_keeps_the_oldest_records_and_counts_the_rest() {
        let mut sink = MemorySink::new(3);
        sink.accept(&records(2));
        sink.accept_owned(&mut records(2));
        assert_eq!(sink.len(), 3);
        assert_eq!(sink.discarded(), 1);
        let kept: Vec<u64> = sink.records().iter().map(|r| r.at_nanos).collect();
        assert_eq!(kept, vec![0, 1, 0]);
    }

    #[test]
    fn tee_hands_every_batch_to_every_sink() {
        let (mut a, mut b) = (MemorySink::new(100), MemorySink::new(100));
        let mut tee = Tee::new().with(&mut a).with(&mut b);
        tee.accept(&records(2));
        tee.accept_owned(&mut records(3));
        assert_eq!(tee.len(), 2);
        drop(tee);
        assert_eq!(a.records(), b.records());
        assert_eq!(a.len(), 5);
    }

    proptest! {
        #[test]
        fn memory_sink_never_exceeds_its_cap_and_loses_nothing_uncounted(
            cap in 0usize..64,
            batches in proptest::collection::vec((0usize..32, any::<bool>()), 0..16),
        ) {
            let mut sink = MemorySink::new(cap);
            let mut offered = 0u64;
            for (n, owned) in batches {
                offered += n as u64;
                if owned {
                    sink.accept_owned(&mut records(n));
                } else {
                    sink.accept(&records(n));
                }
                prop_assert!(sink.len() <= cap);
            }
            prop_assert_eq!(sink.len() as u64 + sink.discarded(), offered);
        }
    }
}
