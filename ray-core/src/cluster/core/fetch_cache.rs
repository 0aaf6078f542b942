//! The fetch cache: objects this process fetched from their owners, kept
//! (newest first, within a byte bound) for the next borrower.

use super::*;

/// The most bytes of fetched objects a process keeps for later borrowers.
pub(super) const FETCH_CACHE_BYTES: usize = 256 << 20;

/// Objects at least this large that another process fetched are tracked
/// by their owner, which tells that process when it frees them
/// ([`ObjectsFreed`](ray_proto::wire::ObjectsFreed)); smaller copies just
/// age out of its [`FetchCache`].
pub(super) const FREE_NOTICE_MIN: usize = 64 << 10;

/// Objects this process fetched from their owners, oldest evicted first
/// once they pass [`FETCH_CACHE_BYTES`].
///
/// A borrowed entry lives only while some task here holds its ref, so
/// without this a worker fetched the same 10 MiB argument again for every
/// batch of tasks pushed to it (W6: four fetches of one object per run).
/// Objects never change, so a kept copy stays right. Like a secondary copy
/// in Ray's object store it goes when its owner frees the object (for
/// copies of [`FREE_NOTICE_MIN`] bytes or more; smaller ones may outlive
/// it within the byte bound): a 100 MiB argument no longer holds 100 MiB
/// in every worker that read it until newer fetches push it out, and its
/// memory is reused for the next large object (`ray_store::recycle`).
pub(super) struct FetchCache {
    /// The most bytes kept.
    pub(super) cap: usize,
    pub(super) objects: HashMap<ObjectId, ObjectBuffer>,
    pub(super) order: VecDeque<ObjectId>,
    pub(super) bytes: usize,
    /// Objects fetched, and their bytes, for [`crate::RuntimeStats`].
    pub(super) fetches: u64,
    pub(super) fetched_bytes: u64,
}

impl Default for FetchCache {
    fn default() -> Self {
        Self::with_cap(FETCH_CACHE_BYTES)
    }
}

impl FetchCache {
    pub(super) fn with_cap(cap: usize) -> Self {
        Self {
            cap,
            objects: HashMap::new(),
            order: VecDeque::new(),
            bytes: 0,
            fetches: 0,
            fetched_bytes: 0,
        }
    }

    pub(super) fn get(&self, id: ObjectId) -> Option<ObjectBuffer> {
        self.objects.get(&id).cloned()
    }

    /// Drops the kept copies of `ids` (their owner freed them); returns
    /// them so the caller frees the memory outside its lock.
    pub(super) fn forget(&mut self, ids: &[ObjectId]) -> Vec<ObjectBuffer> {
        let gone: Vec<ObjectBuffer> = ids
            .iter()
            .filter_map(|id| self.objects.remove(id))
            .collect();
        self.bytes -= gone.iter().map(|b| b.len()).sum::<usize>();
        // `order` keeps forgotten ids until they reach its front; compact it
        // when they outnumber the live ones.
        if self.order.len() > 2 * self.objects.len() + 16 {
            let objects = &self.objects;
            self.order.retain(|id| objects.contains_key(id));
        }
        gone
    }

    /// Counts a fetch of `id` and keeps its bytes (evicting the oldest).
    pub(super) fn record(&mut self, id: ObjectId, buf: ObjectBuffer) {
        self.fetches += 1;
        self.fetched_bytes += buf.len() as u64;
        if buf.len() > self.cap {
            return;
        }
        self.bytes += buf.len();
        if let Some(old) = self.objects.insert(id, buf) {
            self.bytes -= old.len();
        } else {
            self.order.push_back(id);
        }
        while self.bytes > self.cap {
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            if let Some(gone) = self.objects.remove(&oldest) {
                self.bytes -= gone.len();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buf(len: usize, fill: u8) -> ObjectBuffer {
        ObjectBuffer::copy_from_slice(&vec![fill; len])
    }

    #[test]
    fn the_fetch_cache_keeps_the_newest_objects_within_its_bytes_and_counts_every_fetch() {
        let id = |seq| ObjectId::new(WorkerId(9), seq);
        let mut cache = FetchCache::with_cap(100);
        cache.record(id(1), buf(40, 1));
        cache.record(id(2), buf(40, 2));
        assert_eq!(cache.get(id(1)).expect("kept").as_bytes(), &[1u8; 40][..]);
        // A third passes the cap: the oldest goes, the newest two stay.
        cache.record(id(3), buf(40, 3));
        assert!(cache.get(id(1)).is_none());
        assert!(cache.get(id(2)).is_some() && cache.get(id(3)).is_some());
        assert_eq!(cache.bytes, 80);
        // Larger than the whole cache: counted, not kept, nothing evicted.
        cache.record(id(4), buf(101, 4));
        assert!(cache.get(id(4)).is_none());
        assert_eq!(cache.bytes, 80);
        // The same object again replaces its copy without double counting.
        cache.record(id(3), buf(40, 3));
        assert_eq!((cache.bytes, cache.order.len()), (80, 2));
        assert_eq!((cache.fetches, cache.fetched_bytes), (5, 261));
    }
}
