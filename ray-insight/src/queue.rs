//! The bounded queue of full batches between recording threads and the collector.
//!
//! Recording threads hand over a whole batch at a time, so the lock here is
//! taken once per batch, never per record, and is held only to move a `Vec`
//! (or, for a small partial batch, to copy its few records).
//! When the queue is full the batch is dropped and counted: an instrumented
//! thread never waits for the collector to drain. (It can wait, briefly,
//! while the collector hands over the thread's own stale partial batch.)

use std::collections::VecDeque;
use std::mem;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Instant;

use parking_lot::Mutex;

use crate::clock::Clock;
use crate::packed::Batch;
use crate::record::Record;

/// Emptied batch buffers kept for reuse, so steady-state recording does not
/// allocate a fresh batch per hand-off. (Keeping every drained buffer after
/// a burst was tried: a burst outruns the starved collector, so nothing is
/// recycled before it ends, and the kept memory stayed for good; see
/// docs/perf-log/2026-11-28-recording-buffers.md.)
const MAX_SPARE_BATCHES: usize = 64;

/// Preallocation limit for the queue itself; it grows past this on demand.
const MAX_PREALLOCATED_SLOTS: usize = 1024;

/// A thread's partial batch: written by its thread, record by record, under
/// an uncontended lock; shared with the collector so that what a thread
/// wrote before it blocked (a long call, a sleep, a wait in user code) is
/// handed over without it ([`Shared::take_batches`]).
pub(crate) type PartialBatch = Arc<Mutex<Batch>>;

/// A partial batch whose oldest record is this old (nanoseconds) is taken
/// from its thread by the collector (a thread still recording hands it over
/// itself at the same age, at its next record).
pub(crate) const STALE_NANOS: u64 = 100_000_000;

/// The collector looks for stale partial batches at most this often (less
/// than the idle pump's 50 ms, so that no pump skips a due sweep).
const SWEEP_EVERY_NANOS: u64 = 25_000_000;

/// A value on cache lines of its own (two, for the adjacent-line
/// prefetcher): what one thread writes often must not share a line with
/// what recording threads read on every record. (Measured: with the
/// drain's lock beside `layer_gone`, reading that flag was 87 % of a run's
/// close, a cache miss per record.)
#[derive(Debug, Default)]
#[repr(align(128))]
struct Padded<T>(T);

impl<T> std::ops::Deref for Padded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// State shared by one layer, the per-thread buffers that record for it, and
/// its collector. What recording threads read often (`batch_size` on every
/// record, `layer_gone` at each run's close, the clock) is kept apart from
/// what is written often (the queue's lock, the counters, the collector's
/// state).
#[derive(Debug)]
pub(crate) struct Shared {
    queue: Padded<Mutex<Queue>>,
    batch_size: usize,
    max_queued_batches: usize,
    /// Records that reached the queue.
    recorded: Padded<AtomicU64>,
    /// Records discarded: queue full, or no thread buffer to put them in.
    dropped: Padded<AtomicU64>,
    /// Set when the layer is dropped: no more records will come, so thread
    /// buffers for it can be flushed and forgotten.
    layer_gone: AtomicBool,
    /// Wall-clock time of the layer's epoch (`at_nanos == 0`), in
    /// nanoseconds since the Unix epoch.
    epoch_unix_nanos: u64,
    /// The clock of records' `at_nanos`: nanoseconds since the layer's
    /// epoch.
    clock: Clock,
    /// Every thread's partial batch for this layer (gone threads' are
    /// pruned at each sweep).
    partials: Padded<Mutex<Vec<Weak<Mutex<Batch>>>>>,
    /// When the next sweep for stale partial batches may run (`at_nanos`).
    next_sweep: Padded<AtomicU64>,
    /// The records of the batch being drained, expanded: kept between
    /// drains, so draining writes to warm memory.
    unpacked: Padded<Mutex<Vec<Record>>>,
}

#[derive(Debug, Default)]
struct Queue {
    batches: VecDeque<Batch>,
    spare: Vec<Batch>,
}

impl Shared {
    pub(crate) fn new(
        batch_size: usize,
        max_queued_batches: usize,
        epoch: Instant,
        epoch_unix_nanos: u64,
    ) -> Self {
        Self {
            queue: Padded(Mutex::new(Queue {
                batches: VecDeque::with_capacity(max_queued_batches.min(MAX_PREALLOCATED_SLOTS)),
                spare: Vec::new(),
            })),
            batch_size,
            max_queued_batches,
            recorded: Padded(AtomicU64::new(0)),
            dropped: Padded(AtomicU64::new(0)),
            layer_gone: AtomicBool::new(false),
            epoch_unix_nanos,
            clock: Clock::new(epoch),
            partials: Padded(Mutex::new(Vec::new())),
            next_sweep: Padded(AtomicU64::new(0)),
            unpacked: Padded(Mutex::new(Vec::new())),
        }
    }

    /// A new thread's partial batch, known to the collector.
    pub(crate) fn new_partial(&self) -> PartialBatch {
        let partial = Arc::new(Mutex::new(Batch::with_capacity(self.batch_size)));
        self.partials.lock().push(Arc::downgrade(&partial));
        partial
    }

    /// Hands over the partial batches whose oldest record is older than
    /// [`STALE_NANOS`], from threads that have not recorded since (they
    /// would have handed it over themselves). A batch its thread is writing
    /// to right now is left to it. Runs at most every 25 ms.
    fn sweep_stale(&self) {
        let now = self.now();
        if now < self.next_sweep.load(Ordering::Relaxed) {
            return;
        }
        self.next_sweep
            .store(now.saturating_add(SWEEP_EVERY_NANOS), Ordering::Relaxed);
        self.sweep_older_than(now, STALE_NANOS);
    }

    /// Hands over every thread's partial batch, whatever its age (those
    /// of threads writing right now excepted): what a process does before
    /// it ends, so nothing recorded stays behind in a thread's buffer.
    pub(crate) fn sweep_all(&self) {
        let now = self.now();
        self.sweep_older_than(now, 0);
    }

    /// Hands over the partial batches whose oldest record is at least
    /// `age` nanoseconds older than `now`.
    fn sweep_older_than(&self, now: u64, age: u64) {
        let partials: Vec<PartialBatch> = {
            let mut all = self.partials.lock();
            all.retain(|p| p.strong_count() > 0);
            all.iter().filter_map(Weak::upgrade).collect()
        };
        for partial in partials {
            if let Some(mut records) = partial.try_lock() {
                let stale = records
                    .first_at()
                    .is_some_and(|at| now.saturating_sub(at) >= age);
                if stale {
                    self.hand_off(&mut records);
                }
            }
        }
    }

    /// Now on the records' clock: nanoseconds since the layer's epoch.
    #[inline]
    pub(crate) fn now(&self) -> u64 {
        self.clock.now()
    }

    /// Wall-clock time of the layer's epoch, in nanoseconds since the Unix epoch.
    pub(crate) fn epoch_unix_nanos(&self) -> u64 {
        self.epoch_unix_nanos
    }

    pub(crate) fn batch_size(&self) -> usize {
        self.batch_size
    }

    /// Moves the records of `batch` into the queue, or drops and counts them
    /// when the queue is full. Leaves `batch` empty and ready for reuse.
    ///
    /// A full batch is queued whole (its buffer swapped for a spare one). A
    /// small one (a thread handing over what it has before it sleeps, often
    /// a few records) is moved into the newest queued batch when that has
    /// room, else into a spare buffer, and the thread keeps its own buffer:
    /// a thread that flushes often then allocates nothing, where swapping
    /// would hand it a fresh buffer of a whole batch each time.
    pub(crate) fn hand_off(&self, batch: &mut Batch) {
        if batch.is_empty() {
            return;
        }
        let len = batch.len();
        let small = len <= self.batch_size / 4;
        let accepted = {
            let mut queue = self.queue.lock();
            let queue = &mut *queue;
            let joined = small
                && queue.batches.back_mut().is_some_and(|last| {
                    let room = last.len() + len <= self.batch_size;
                    if room {
                        last.append(batch);
                    }
                    room
                });
            if joined {
                true
            } else if queue.batches.len() < self.max_queued_batches {
                // With no spare, a full batch's thread gets its new buffer
                // allocated outside the lock (below).
                let fresh = queue.spare.pop().unwrap_or_default();
                if small {
                    let mut fresh = fresh;
                    fresh.append(batch);
                    queue.batches.push_back(fresh);
                } else {
                    queue.batches.push_back(mem::replace(batch, fresh));
                }
                true
            } else {
                false
            }
        };
        if accepted {
            self.recorded.fetch_add(len as u64, Ordering::Relaxed);
            if !small && batch.capacity() < self.batch_size {
                // Allocate outside the lock when no spare buffer was available.
                *batch = Batch::with_capacity(self.batch_size);
            }
        } else {
            // Clearing frees the records' field strings; done outside the lock.
            batch.clear();
            self.dropped.fetch_add(len as u64, Ordering::Relaxed);
        }
    }

    /// Counts `n` records that never got into a batch.
    pub(crate) fn count_dropped(&self, n: u64) {
        self.dropped.fetch_add(n, Ordering::Relaxed);
    }

    /// Takes every queued batch, oldest first, after queueing the stale
    /// partial batches of threads that stopped recording.
    pub(crate) fn take_batches(&self) -> VecDeque<Batch> {
        self.sweep_stale();
        mem::take(&mut self.queue.lock().batches)
    }

    /// The buffer a drain expands batches into (empty when another drain
    /// has it); give it back with [`Shared::give_back_unpacked`].
    pub(crate) fn take_unpacked(&self) -> Vec<Record> {
        mem::take(&mut *self.unpacked.lock())
    }

    /// Keeps `records`' buffer (emptied) for the next drain.
    pub(crate) fn give_back_unpacked(&self, mut records: Vec<Record>) {
        records.clear();
        let mut kept = self.unpacked.lock();
        if records.capacity() > kept.capacity() {
            *kept = records;
        }
    }

    /// Returns an emptied batch buffer for reuse by recording threads. One
    /// that cannot hold a whole batch is freed instead: a thread handed it
    /// would grow it into fresh memory (and fault its pages in) anyway.
    pub(crate) fn recycle(&self, mut batch: Batch) {
        if batch.capacity() < self.batch_size {
            return;
        }
        batch.clear();
        // A buffer built by joining small hand-offs gives its lists a
        // whole batch's room too, when a thread first uses them.
        batch.set_room(self.batch_size);
        let mut queue = self.queue.lock();
        if queue.spare.len() < MAX_SPARE_BATCHES.min(self.max_queued_batches) {
            queue.spare.push(batch);
        }
    }

    #[cfg(test)]
    fn spares(&self) -> usize {
        self.queue.lock().spare.len()
    }

    pub(crate) fn queued_batches(&self) -> usize {
        self.queue.lock().batches.len()
    }

    pub(crate) fn recorded(&self) -> u64 {
        self.recorded.load(Ordering::Relaxed)
    }

    pub(crate) fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    pub(crate) fn mark_layer_gone(&self) {
        self.layer_gone.store(true, Ordering::Release);
    }

    pub(crate) fn layer_gone(&self) -> bool {
        self.layer_gone.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(n: usize) -> Batch {
        let mut batch = Batch::default();
        for record in crate::record::test_records(n) {
            batch.push_full(record);
        }
        batch
    }

    #[test]
    fn full_queue_drops_and_counts_the_whole_batch() {
        let shared = Shared::new(4, 1, Instant::now(), 0);
        let mut first = batch(4);
        shared.hand_off(&mut first);
        let mut second = batch(3);
        shared.hand_off(&mut second);
        assert!(first.is_empty() && second.is_empty());
        assert_eq!(shared.recorded(), 4);
        assert_eq!(shared.dropped(), 3);
        assert_eq!(shared.queued_batches(), 1);
    }

    #[test]
    fn spares_are_bounded_and_only_whole_batch_buffers_are_kept() {
        let shared = Shared::new(4, 200, Instant::now(), 0);
        for _ in 0..100 {
            shared.hand_off(&mut batch(4));
        }
        for drained in shared.take_batches() {
            shared.recycle(drained);
        }
        assert_eq!(shared.spares(), MAX_SPARE_BATCHES);
        // A buffer that cannot hold a whole batch is not kept.
        let fresh = Shared::new(4, 200, Instant::now(), 0);
        fresh.recycle(Batch::with_capacity(2));
        assert_eq!(fresh.spares(), 0);
        fresh.recycle(Batch::with_capacity(4));
        assert_eq!(fresh.spares(), 1);
    }

    #[test]
    fn recycled_buffers_are_reused_by_the_next_hand_off() {
        let shared = Shared::new(4, 2, Instant::now(), 0);
        let mut b = batch(4);
        shared.hand_off(&mut b);
        for drained in shared.take_batches() {
            shared.recycle(drained);
        }
        let mut again = batch(2);
        shared.hand_off(&mut again);
        // The replacement came from the spare list: it has the old capacity.
        assert!(again.capacity() >= 4);
        assert_eq!(shared.recorded(), 6);
    }

    #[test]
    fn small_batches_join_the_newest_batch_and_keep_their_order() {
        let shared = Shared::new(8, 1, Instant::now(), 0);
        let mut first = batch(2);
        let capacity = first.capacity();
        shared.hand_off(&mut first);
        // The thread keeps its own buffer.
        assert!(first.is_empty());
        assert_eq!(first.capacity(), capacity);
        let mut second = Batch::default();
        for (i, mut r) in crate::record::test_records(2).into_iter().enumerate() {
            r.at_nanos = 10 + i as u64;
            second.push_full(r);
        }
        shared.hand_off(&mut second);
        // Both fit the one queued batch, though the queue holds one batch.
        assert_eq!(shared.queued_batches(), 1);
        assert_eq!(shared.recorded(), 4);
        assert_eq!(shared.dropped(), 0);
        let mut records = Vec::new();
        for mut batch in shared.take_batches() {
            batch.unpack_into(&mut records);
        }
        let times: Vec<u64> = records.iter().map(|r| r.at_nanos).collect();
        assert_eq!(times, [0, 1, 10, 11]);
        // A full queue with no room in its newest batch drops.
        let mut big = batch(8);
        shared.hand_off(&mut big);
        let mut more = batch(2);
        shared.hand_off(&mut more);
        assert_eq!(shared.dropped(), 2);
    }
}
