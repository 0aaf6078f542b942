//! The owner's object table: reference counts, values and waiters.
//!
//! Whoever creates an object (by `put` or by submitting the task that returns
//! it) owns it. The count of live references is the strong count of one
//! `Arc<RefHandle>` per object: every `ObjectRef`, every task argument and
//! every object that contains the ref holds a clone. When the last clone
//! drops, the entry and its bytes are freed.
//!
//! The table maps ids to [`ObjectCell`]s; a handle and the local task or
//! actor call producing the object reach the cell directly. The owner's
//! polls and a local result then never touch a shard, so a submitting
//! thread and the pool threads completing its tasks do not pass the
//! shards' locks back and forth (embedded W1: the table was a third of the
//! profile).
//!
//! Locks here are never held while running user code, waking tasks or
//! dropping handles (a drop can recurse into this table).

use std::hash::{BuildHasherDefault, Hasher};
use std::sync::{Arc, Weak};
use std::task::{Poll, Waker};

use hashbrown::HashMap;
use parking_lot::Mutex;

use ray_proto::ObjectId;
use ray_store::ObjectBuffer;

use crate::error::Error;
use crate::runtime::Runtime;

/// One counted reference to an object. Dropping the last one frees it.
pub(crate) struct RefHandle {
    pub(crate) id: ObjectId,
    pub(crate) rt: Arc<Runtime>,
    /// The object's state, reached without the table: the owner's own
    /// polls and a local task's result touch this cell only, so the
    /// table's shards stay with the thread that registers and frees.
    pub(crate) cell: Arc<ObjectCell>,
}

impl Drop for RefHandle {
    fn drop(&mut self) {
        self.rt.release_object(self.id);
    }
}

impl RefHandle {
    /// The first handle of a new object, with a cell of its own.
    fn with_new_cell(
        rt: &Arc<Runtime>,
        id: ObjectId,
        value: Option<Value>,
        contained: Vec<Arc<RefHandle>>,
    ) -> Arc<Self> {
        Arc::new_cyclic(|weak| RefHandle {
            id,
            rt: rt.clone(),
            cell: Arc::new(ObjectCell::new(value, weak.clone(), contained)),
        })
    }

    /// The value if ready; otherwise registers `waker` and returns `Pending`.
    pub(crate) fn poll(&self, waker: Option<&Waker>) -> Poll<Value> {
        let mut lazy = false;
        let out = self.cell.poll(self.id, waker, &mut lazy);
        if lazy {
            self.fetch();
        }
        out
    }

    /// Whether the object has a value (or failed).
    pub(crate) fn is_ready(&self) -> bool {
        let mut entry = self.cell.0.lock();
        if entry.value.is_some() {
            return true;
        }
        let lazy = std::mem::take(&mut entry.lazy);
        drop(entry);
        if lazy {
            self.fetch();
        }
        false
    }

    /// Starts the fetch of a borrowed object whose fetch waited for
    /// someone to want its value (see [`ObjectCell::set_lazy`]).
    fn fetch(&self) {
        if let Some(remote) = self.rt.remote.get() {
            remote.fetch_borrowed(&self.rt, self.id);
        }
    }

    /// Takes the refs nested in the object's value (their holder keeps
    /// them): from this handle's own cell, which is the table's entry.
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))] // used by the cluster code
    pub(crate) fn take_contained(&self) -> Vec<Arc<RefHandle>> {
        std::mem::take(&mut self.cell.0.lock().contained)
    }

    /// [`fetch`](Self::fetch) if the fetch still waits (once).
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))] // used by the cluster code
    pub(crate) fn fetch_if_lazy(&self) {
        let lazy = std::mem::take(&mut self.cell.0.lock().lazy);
        if lazy {
            self.fetch();
        }
    }

    /// The bytes of its value held in this process (inline or in this
    /// process's store), if it has one here.
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))] // used by the cluster code
    pub(crate) fn local_bytes(&self) -> Option<u64> {
        let inline = match &self.cell.0.lock().value {
            Some(Value::Inline(buf)) => Some(buf.len() as u64),
            Some(Value::Stored) => None,
            _ => return None,
        };
        inline.or_else(|| self.rt.store.get(self.id).map(|b| b.len() as u64))
    }
}

/// Where a ready object's value is.
#[derive(Clone)]
pub(crate) enum Value {
    /// Small value kept in the owner's table.
    Inline(ObjectBuffer),
    /// Large value in the node's object store.
    Stored,
    /// The task producing it failed (boxed: an `Error` is 80 bytes, and
    /// every entry of the table carries room for a `Value`).
    Failed(Box<Error>),
}

struct Entry {
    /// `None` while the producing task has not finished.
    value: Option<Value>,
    handle: Weak<RefHandle>,
    /// Refs nested in the value: kept alive as long as this object.
    contained: Vec<Arc<RefHandle>>,
    waiters: Waiters,
    /// Taken out of the table: a late value is refused.
    removed: bool,
    /// A borrowed object's registrations with its owner (see
    /// `cluster::ref_counts`), told to the owner when the entry goes.
    registrations: u32,
    /// Its fetch waits for its first reader (see [`ObjectCell::set_lazy`]).
    lazy: bool,
}

/// One object's state. The table maps ids to cells; every handle of the
/// object and the task producing it hold the same cell. Lock order: a
/// table shard, then a cell.
pub(crate) struct ObjectCell(Mutex<Entry>);

impl ObjectCell {
    fn new(value: Option<Value>, handle: Weak<RefHandle>, contained: Vec<Arc<RefHandle>>) -> Self {
        Self(Mutex::new(Entry {
            value,
            handle,
            contained,
            waiters: Waiters::None,
            removed: false,
            registrations: 0,
            lazy: false,
        }))
    }

    /// Marks this pending borrowed entry's fetch as left for its first
    /// reader: a ref that arrived nested in a value is fetched when
    /// someone polls it or asks whether it is ready, so refs passed
    /// through a process, or never read, cost no transfer.
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))] // used by the cluster code
    pub(crate) fn set_lazy(&self) {
        self.0.lock().lazy = true;
    }

    /// Adds `n` registrations with the owner to this borrowed entry.
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))] // used by the cluster code
    pub(crate) fn add_registrations(&self, n: u32) {
        self.0.lock().registrations += n;
    }

    /// Whether someone waits for the value.
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))] // used by the cluster code
    pub(crate) fn has_waiters(&self) -> bool {
        !self.0.lock().waiters.is_empty()
    }

    /// This borrowed entry's registrations with the owner.
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))] // used by the cluster code
    pub(crate) fn registrations(&self) -> u32 {
        self.0.lock().registrations
    }

    /// Handles on the refs nested in the value.
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))] // used by the cluster code
    pub(crate) fn contained(&self) -> Vec<Arc<RefHandle>> {
        self.0.lock().contained.clone()
    }

    /// The value if ready, else `Pending` with `waker` registered; `lazy`
    /// is set when this poll is the one to start a waiting fetch.
    fn poll(&self, id: ObjectId, waker: Option<&Waker>, lazy: &mut bool) -> Poll<Value> {
        let mut entry = self.0.lock();
        if let Some(v) = &entry.value {
            return Poll::Ready(v.clone());
        }
        *lazy = std::mem::take(&mut entry.lazy);
        if entry.removed {
            return Poll::Ready(Value::Failed(Box::new(Error::ObjectLost {
                object: id,
                cause: "no reference to it remains".into(),
            })));
        }
        if let Some(w) = waker {
            entry.waiters.register(w);
        }
        Poll::Pending
    }

    /// Sets the value of a pending object and wakes its waiters; `false`
    /// when it was not taken (see [`ObjectTable::complete`]).
    pub(crate) fn complete(&self, value: Value, contained: Vec<Arc<RefHandle>>) -> bool {
        let (waiters, before) = {
            let mut entry = self.0.lock();
            if entry.removed || entry.value.is_some() {
                // Freed, or already failed by shutdown: keep that, and let
                // the caller free whatever it stored for this late value.
                drop(entry);
                drop(contained);
                return false;
            }
            entry.value = Some(value);
            let before = std::mem::replace(&mut entry.contained, contained);
            (std::mem::take(&mut entry.waiters), before)
        };
        // Handles are dropped outside the lock (a drop frees through the table).
        drop(before);
        waiters.wake_all();
        true
    }
}

/// How many of an object's latest waiters a new registration is compared
/// with (see [`Waiters::register`]).
const DEDUP_WINDOW: usize = 8;

/// The wakers waiting for an object's value. Most objects have one (a
/// `get`, or the cluster's forwarder of a call's result), kept inline so
/// that registering it allocates nothing (the first push of a `Vec` cost a
/// worker about 270 instructions an actor call, in callgrind).
#[derive(Default)]
enum Waiters {
    #[default]
    None,
    One(Waker),
    Many(Vec<Waker>),
}

impl Waiters {
    fn is_empty(&self) -> bool {
        match self {
            Waiters::None => true,
            Waiters::One(_) => false,
            Waiters::Many(v) => v.is_empty(),
        }
    }

    /// Adds `w` unless it is among the latest few: a future polled again
    /// usually registered last, so looking at the latest few keeps this
    /// O(1) when a million queued tasks wait on one object (a full scan
    /// made queueing quadratic). A duplicate only costs a wake.
    fn register(&mut self, w: &Waker) {
        *self = match std::mem::take(self) {
            Waiters::None => Waiters::One(w.clone()),
            Waiters::One(first) if first.will_wake(w) => Waiters::One(first),
            Waiters::One(first) => Waiters::Many(vec![first, w.clone()]),
            Waiters::Many(mut v) => {
                if !v.iter().rev().take(DEDUP_WINDOW).any(|x| x.will_wake(w)) {
                    v.push(w.clone());
                }
                Waiters::Many(v)
            }
        };
    }

    /// Wakes every waiter.
    fn wake_all(self) {
        match self {
            Waiters::None => {}
            Waiters::One(w) => w.wake(),
            Waiters::Many(v) => v.into_iter().for_each(Waker::wake),
        }
    }
}

const SHARDS: usize = 16;

/// Each shard's share of the ids, in thousandths of the smallest:
/// 1000·2^(i/16), rounded. A hash map pauses to move every entry when it
/// doubles; with even shares all shards doubled inside the same few
/// thousand inserts, and a long run of submits slowed down at each
/// doubling (see `docs/perf-log/2026-11-figures-from-code-comments.md`).
/// Shares spread evenly between 1 and
/// 2 make the shards reach their thresholds at table sizes spread evenly
/// over each doubling, so every stretch of inserts pays about the same.
const SHARD_WEIGHTS: [u32; SHARDS] = [
    1000, 1044, 1091, 1139, 1189, 1242, 1297, 1354, 1414, 1477, 1542, 1610, 1682, 1756, 1834, 1915,
];

/// The shard of each value of an id's hash byte, in proportion to
/// [`SHARD_WEIGHTS`].
const SHARD_OF: [u8; 256] = shard_table();

/// Consecutive ids of one owner that share a shard (see [`IdHasher`]).
const SHARD_RUN: u32 = 6;

/// The shard holding `id`: runs of 2^[`SHARD_RUN`] consecutive ids share
/// one, picked by a mixed hash of the run.
fn shard_index(id: ObjectId) -> usize {
    let run = id.seq >> SHARD_RUN;
    let mixed = (run ^ id.owner.0.rotate_left(32)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    SHARD_OF[(mixed >> 56) as usize] as usize
}

/// A shard's map.
type IdMap<V> = HashMap<ObjectId, V, BuildHasherDefault<IdHasher>>;

/// Hashes an [`ObjectId`] so that consecutive ids of one owner land in
/// consecutive buckets.
///
/// The map's bucket is the hash's low bits, so ids made one after another
/// (a batch of submits, then its frees) touch neighbouring memory instead
/// of a random cache line each (embedded W1: the table's inserts and
/// removes were mostly cache misses on their buckets). The top 7 bits,
/// which the map compares before keys, are mixed from the whole id.
#[derive(Default)]
pub(crate) struct IdHasher {
    words: [u64; 2],
    n: usize,
}

impl Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        // Not used by `ObjectId`'s derived `Hash` (two `u64`s); correct for
        // anything else, only without the locality.
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    fn write_u64(&mut self, x: u64) {
        // `ObjectId` hashes its owner, then its sequence number.
        let i = self.n.min(1);
        self.words[i] = self.words[i].rotate_left(23) ^ x;
        self.n += 1;
    }

    fn finish(&self) -> u64 {
        const TOP: u64 = !(u64::MAX >> 7);
        let [owner, seq] = self.words;
        let low = seq.wrapping_add(owner.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let mut mixed = low ^ (low >> 33);
        mixed = mixed.wrapping_mul(0xff51_afd7_ed55_8ccd);
        mixed ^= mixed >> 29;
        mixed = mixed.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        (low & !TOP) | (mixed & TOP)
    }
}

const fn shard_table() -> [u8; 256] {
    let mut total = 0;
    let mut i = 0;
    while i < SHARDS {
        total += SHARD_WEIGHTS[i];
        i += 1;
    }
    let mut table = [0u8; 256];
    let mut b = 0;
    let mut shard = 0;
    let mut upto = SHARD_WEIGHTS[0];
    while b < 256 {
        // Byte b covers [b, b+1)/256 of the range; it goes to the shard
        // whose cumulative share its midpoint falls under.
        while ((2 * b as u32 + 1) * total) >= 512 * upto && shard + 1 < SHARDS {
            shard += 1;
            upto += SHARD_WEIGHTS[shard];
        }
        table[b] = shard as u8;
        b += 1;
    }
    table
}

/// All objects this worker owns.
pub(crate) struct ObjectTable {
    shards: [Mutex<IdMap<Arc<ObjectCell>>>; SHARDS],
}

/// What [`ObjectTable::remove`] took out, to be cleaned up without a lock.
pub(crate) struct Removed {
    /// The entry's registrations with the object's owner.
    pub(crate) registrations: u32,
    _value: Option<Value>,
    _contained: Vec<Arc<RefHandle>>,
    _waiters: Waiters,
}

impl ObjectTable {
    pub(crate) fn new() -> Self {
        Self {
            shards: std::array::from_fn(|_| Mutex::new(IdMap::default())),
        }
    }

    fn shard(&self, id: ObjectId) -> &Mutex<IdMap<Arc<ObjectCell>>> {
        &self.shards[shard_index(id)]
    }

    /// Registers an object and returns its first reference.
    pub(crate) fn insert(
        &self,
        rt: &Arc<Runtime>,
        id: ObjectId,
        value: Option<Value>,
        contained: Vec<Arc<RefHandle>>,
    ) -> Arc<RefHandle> {
        let handle = RefHandle::with_new_cell(rt, id, value, contained);
        let old = self.shard(id).lock().insert(id, handle.cell.clone());
        // Ids are never reused while registered; dropped outside the lock.
        drop(old);
        handle
    }

    /// Sets the value of a pending object and wakes its waiters.
    ///
    /// Returns `false` when the value was not taken — nobody references the
    /// object any more, or it already has a value (failed at shutdown) — and
    /// the caller then frees whatever it stored for it.
    pub(crate) fn complete(
        &self,
        id: ObjectId,
        value: Value,
        contained: Vec<Arc<RefHandle>>,
    ) -> bool {
        // Completed outside the shard's lock: waking waiters and dropping
        // replaced handles must not run under it (a drop frees through the
        // table).
        let cell = self.shard(id).lock().get(&id).cloned();
        match cell {
            Some(cell) => cell.complete(value, contained),
            None => {
                drop(contained);
                false
            }
        }
    }

    /// Whether the table holds a live (not freed) entry for `id` that has
    /// its value already: stored bytes of `id` are then that value's.
    pub(crate) fn has_value(&self, id: ObjectId) -> bool {
        let cell = self.shard(id).lock().get(&id).cloned();
        cell.is_some_and(|cell| {
            let entry = cell.0.lock();
            !entry.removed && entry.value.is_some()
        })
    }

    /// A counted ref to `id`, registering it as pending if it is not in
    /// the table; `true` when it was registered now (a borrowed object the
    /// caller must fetch).
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))] // used by the cluster code
    pub(crate) fn get_or_insert_pending(
        &self,
        rt: &Arc<Runtime>,
        id: ObjectId,
    ) -> (Arc<RefHandle>, bool) {
        let mut shard = self.shard(id).lock();
        let Some(cell) = shard.get(&id) else {
            let handle = RefHandle::with_new_cell(rt, id, None, Vec::new());
            shard.insert(id, handle.cell.clone());
            return (handle, true);
        };
        let mut entry = cell.0.lock();
        if let Some(h) = entry.handle.upgrade() {
            return (h, false);
        }
        // The last handle is dropping (its removal comes later and must not
        // take this one, see `remove`): the cell gets a new handle and keeps
        // what it has — its value (stored bytes stay in the store) or its
        // fetch in flight, which completes whichever cell holds the id. A
        // failed value is dropped and fetched anew.
        let handle = Arc::new(RefHandle {
            id,
            rt: rt.clone(),
            cell: cell.clone(),
        });
        entry.handle = Arc::downgrade(&handle);
        let failed = matches!(entry.value, Some(Value::Failed(_)));
        let old = if failed { entry.value.take() } else { None };
        drop(entry);
        drop(shard);
        drop(old);
        (handle, failed)
    }

    /// A new counted reference to a live object (used when a ref is decoded).
    pub(crate) fn handle(&self, id: ObjectId) -> Option<Arc<RefHandle>> {
        self.shard(id)
            .lock()
            .get(&id)
            .and_then(|c| c.0.lock().handle.upgrade())
    }

    /// Removes the object. The caller drops the result outside any lock.
    ///
    /// `free_stored` runs under the entry's lock when its value is in the
    /// object store, so the bytes go before anyone can register the id
    /// again (a borrowed object fetched anew stores under the same id).
    pub(crate) fn remove(
        &self,
        id: ObjectId,
        free_stored: impl FnOnce(ObjectId),
    ) -> Option<Removed> {
        let mut shard = self.shard(id).lock();
        let cell = shard.get(&id)?;
        let mut entry = cell.0.lock();
        if entry.handle.strong_count() > 0 {
            // Re-registered after its last handle went (a borrowed object
            // fetched again): the entry stays.
            return None;
        }
        entry.removed = true;
        let value = entry.value.take();
        if matches!(value, Some(Value::Stored)) {
            free_stored(id);
        }
        let removed = Removed {
            registrations: entry.registrations,
            _value: value,
            _contained: std::mem::take(&mut entry.contained),
            _waiters: std::mem::take(&mut entry.waiters),
        };
        drop(entry);
        let cell = shard.remove(&id);
        drop(shard);
        drop(cell);
        Some(removed)
    }

    /// Fails every pending object with `err` (shutdown).
    pub(crate) fn fail_pending(&self, err: &Error) {
        for shard in &self.shards {
            let mut wake = Vec::new();
            {
                let shard = shard.lock();
                for cell in shard.values() {
                    let mut entry = cell.0.lock();
                    if entry.value.is_none() {
                        entry.value = Some(Value::Failed(Box::new(err.clone())));
                        wake.push(std::mem::take(&mut entry.waiters));
                    }
                }
            }
            wake.into_iter().for_each(Waiters::wake_all);
        }
    }

    /// Every object and its value, if it has one (the state API).
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))] // used by the cluster code
    pub(crate) fn snapshot(&self) -> Vec<(ObjectId, Option<Value>)> {
        let mut out = Vec::new();
        for shard in &self.shards {
            let shard = shard.lock();
            out.extend(shard.iter().map(|(id, c)| (*id, c.0.lock().value.clone())));
        }
        out
    }

    /// Number of live objects.
    pub(crate) fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ray_proto::WorkerId;

    #[test]
    fn shards_take_shares_in_proportion_to_their_weights() {
        let total: u32 = SHARD_WEIGHTS.iter().sum();
        let mut counts = [0u32; SHARDS];
        let n = 1u64 << 20;
        for seq in 0..n {
            counts[shard_index(ObjectId::new(WorkerId(5), seq))] += 1;
        }
        for (i, &c) in counts.iter().enumerate() {
            let want = n as f64 * f64::from(SHARD_WEIGHTS[i]) / f64::from(total);
            let off = (f64::from(c) - want).abs() / want;
            // 256 hash bytes over 16 shards: rounding alone is up to ~5%.
            assert!(off < 0.08, "shard {i}: {c} ids, expected ~{want:.0}");
        }
        assert!(counts[SHARDS - 1] > counts[0] * 3 / 2, "{counts:?}");
    }

    #[test]
    fn consecutive_ids_hash_to_consecutive_buckets_with_mixed_tags() {
        use std::hash::BuildHasher;
        let build = BuildHasherDefault::<IdHasher>::default();
        let hashes: Vec<u64> = (1000..1064)
            .map(|seq| build.hash_one(ObjectId::new(WorkerId(7), seq)))
            .collect();
        for pair in hashes.windows(2) {
            // The bucket index (low bits) steps by one.
            assert_eq!(pair[1].wrapping_sub(pair[0]) & 0x3f, 1, "{pair:x?}");
        }
        // The tags (top 7 bits) differ across a run, not all alike.
        let tags: std::collections::HashSet<u64> = hashes.iter().map(|h| h >> 57).collect();
        assert!(tags.len() > 32, "{} distinct tags in 64 ids", tags.len());
        // Another owner's ids start elsewhere.
        let other = build.hash_one(ObjectId::new(WorkerId(8), 1000));
        assert_ne!(other & 0xffff, hashes[0] & 0xffff);
    }

    #[test]
    fn runs_of_consecutive_ids_share_a_shard() {
        let shard_of = |seq| shard_index(ObjectId::new(WorkerId(3), seq));
        let run = 1u64 << SHARD_RUN;
        for start in (0..64 * run).step_by(run as usize) {
            assert!((start..start + run).all(|seq| shard_of(seq) == shard_of(start)));
        }
    }

    /// The point of the uneven shares: the shards' maps double at
    /// different table sizes, not all within a few thousand inserts.
    #[test]
    fn the_shards_double_at_table_sizes_spread_over_each_doubling() {
        let mut maps: Vec<IdMap<()>> = (0..SHARDS).map(|_| IdMap::default()).collect();
        let (from, to) = (1u64 << 17, 1u64 << 18);
        let mut grew_at = Vec::new();
        for seq in 0..to {
            let id = ObjectId::new(WorkerId(9), seq);
            let m = &mut maps[shard_index(id)];
            let cap = m.capacity();
            m.insert(id, ());
            if m.capacity() != cap && seq >= from {
                grew_at.push(seq);
            }
        }
        assert!(
            grew_at.len() >= SHARDS - 2,
            "only {} doublings: {grew_at:?}",
            grew_at.len()
        );
        // In any eighth of the doubling period at most a few shards grow
        // (with even shares all sixteen grew within ~2% of it).
        let window = (to - from) / 8;
        let worst = grew_at
            .iter()
            .map(|&a| {
                grew_at
                    .iter()
                    .filter(|&&b| b >= a && b < a + window)
                    .count()
            })
            .max()
            .unwrap_or(0);
        assert!(
            worst <= 4,
            "{worst} shards doubled within {window} inserts: {grew_at:?}"
        );
    }

    /// A waker that counts its wakes.
    struct Counter(std::sync::atomic::AtomicUsize);

    impl std::task::Wake for Counter {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    fn counter() -> (Arc<Counter>, Waker) {
        let c = Arc::new(Counter(0.into()));
        (c.clone(), Waker::from(c))
    }

    #[test]
    fn waiters_keep_one_inline_and_wake_every_distinct_one_once() {
        let (a, wa) = counter();
        let (b, wb) = counter();
        let mut w = Waiters::default();
        assert!(w.is_empty());
        w.register(&wa);
        w.register(&wa.clone());
        assert!(
            matches!(w, Waiters::One(_)),
            "a second poll of one future adds nothing"
        );
        w.register(&wb);
        w.register(&wa);
        assert!(matches!(&w, Waiters::Many(v) if v.len() == 2));
        assert!(!w.is_empty());
        std::mem::take(&mut w).wake_all();
        assert!(w.is_empty());
        let woken = |c: &Counter| c.0.load(std::sync::atomic::Ordering::Relaxed);
        assert_eq!((woken(&a), woken(&b)), (1, 1));
        // Past the dedup window a repeat registers again (one spare wake).
        let many: Vec<_> = (0..DEDUP_WINDOW).map(|_| counter()).collect();
        w.register(&wa);
        for (_, wk) in &many {
            w.register(wk);
        }
        w.register(&wa);
        assert!(matches!(&w, Waiters::Many(v) if v.len() == DEDUP_WINDOW + 2));
        w.wake_all();
        assert_eq!(woken(&a), 3);
        assert!(many.iter().all(|(c, _)| woken(c) == 1));
    }
}
