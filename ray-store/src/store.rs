//! [`ObjectStore`]: the per-node map from [`ObjectId`] to [`ObjectBuffer`],
//! with a capacity limit and puts that wait for space.

use std::fmt;
use std::pin::pin;
use std::time::Duration;

use hashbrown::HashMap;
use parking_lot::Mutex;
use ray_proto::ObjectId;
use tokio::sync::Notify;

use crate::buffer::ObjectBuffer;
use crate::error::StoreError;

/// How an [`ObjectStore`] is sized.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreConfig {
    /// Most bytes of live objects the store holds at once.
    ///
    /// Only live (not deleted) objects count: bytes still pinned by buffers
    /// handed out before a delete are not counted, so actual memory use can
    /// exceed this by the size of deleted-but-pinned objects.
    pub capacity_bytes: u64,
}

impl StoreConfig {
    /// The default capacity, 1 GiB: large enough for typical task results,
    /// small enough not to surprise a laptop. Nodes should size the store from
    /// their memory (Ray uses 30% of RAM) and set `capacity_bytes` explicitly.
    pub const DEFAULT_CAPACITY_BYTES: u64 = 1 << 30;
}

impl Default for StoreConfig {
    /// A store of [`StoreConfig::DEFAULT_CAPACITY_BYTES`] (1 GiB).
    fn default() -> Self {
        Self {
            capacity_bytes: Self::DEFAULT_CAPACITY_BYTES,
        }
    }
}

/// A snapshot of an [`ObjectStore`]'s accounting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreStats {
    /// Sum of the sizes of the live objects.
    pub used_bytes: u64,
    /// The store's capacity in bytes.
    pub capacity_bytes: u64,
    /// Number of live objects.
    pub num_objects: usize,
}

/// What the lock guards: the objects and the bytes they account for.
///
/// Invariant: `used_bytes` is the sum of `objects`' lengths and never exceeds
/// the store's capacity.
#[derive(Default)]
struct State {
    objects: HashMap<ObjectId, ObjectBuffer>,
    used_bytes: u64,
}

/// The per-node object store: immutable buffers keyed by [`ObjectId`], with a
/// capacity limit.
///
/// Thread-safe; every method takes `&self`, so share it behind an `Arc`. The
/// internal lock is held only for map updates: never across an `.await`, never
/// for I/O, never while copying bytes.
pub struct ObjectStore {
    capacity_bytes: u64,
    state: Mutex<State>,
    /// Signalled (to every waiter) whenever a delete frees capacity.
    space_freed: Notify,
}

impl ObjectStore {
    /// An empty store of `cfg.capacity_bytes`.
    pub fn new(cfg: StoreConfig) -> Self {
        Self {
            capacity_bytes: cfg.capacity_bytes,
            state: Mutex::new(State::default()),
            space_freed: Notify::new(),
        }
    }

    /// Stores `buf` under `id` if it fits now.
    ///
    /// # Errors
    /// - [`StoreError::TooLarge`] if `buf` is larger than the whole capacity;
    /// - [`StoreError::AlreadyExists`] if `id` is stored (objects are
    ///   immutable; the stored object is left as it was);
    /// - [`StoreError::Full`] if it does not fit in the space left now.
    pub fn try_put(&self, id: ObjectId, buf: ObjectBuffer) -> Result<(), StoreError> {
        self.check_size(id, &buf)?;
        self.try_insert(id, &buf)
    }

    /// Stores `buf` under `id`, waiting up to `timeout` for deletes to free
    /// enough space.
    ///
    /// An object that fits now is stored without touching the timer; a zero
    /// `timeout` makes one attempt, like [`ObjectStore::try_put`]. Waiting puts
    /// are all woken by each delete and retry; they are not served in FIFO
    /// order, so under a steady stream of small puts a large one may time out.
    ///
    /// Cancellation-safe: nothing is reserved while waiting, so dropping the
    /// future leaves the store exactly as if the put had never been made.
    ///
    /// # Errors
    /// - [`StoreError::TooLarge`] at once if `buf` can never fit;
    /// - [`StoreError::AlreadyExists`] if `id` is (or, while waiting, becomes)
    ///   stored;
    /// - [`StoreError::Full`] if it still does not fit after `timeout`; the
    ///   accounting is then unchanged.
    ///
    /// # Panics
    /// If it has to wait outside a Tokio runtime with the time driver enabled.
    pub async fn put(
        &self,
        id: ObjectId,
        buf: ObjectBuffer,
        timeout: Duration,
    ) -> Result<(), StoreError> {
        self.check_size(id, &buf)?;
        let mut last_full = match self.try_insert(id, &buf) {
            Err(full @ StoreError::Full { .. }) => full,
            done => return done,
        };
        let wait_for_space = async {
            loop {
                // Register before retrying so that a delete between the retry
                // and the `.await` still wakes us: no lost wake-ups.
                let mut freed = pin!(self.space_freed.notified());
                freed.as_mut().enable();
                match self.try_insert(id, &buf) {
                    Err(full @ StoreError::Full { .. }) => last_full = full,
                    done => return done,
                }
                freed.await;
            }
        };
        let waited = tokio::time::timeout(timeout, wait_for_space).await;
        match waited {
            Ok(done) => done,
            Err(_elapsed) => Err(last_full),
        }
    }

    /// The object stored under `id`, if any.
    ///
    /// The returned buffer pins the bytes: they stay valid while it is held,
    /// even if the object is deleted meanwhile (deleting frees the capacity at
    /// once, the memory when the last pin is dropped).
    pub fn get(&self, id: ObjectId) -> Option<ObjectBuffer> {
        self.state.lock().objects.get(&id).cloned()
    }

    /// Whether an object is stored under `id`.
    pub fn contains(&self, id: ObjectId) -> bool {
        self.state.lock().objects.contains_key(&id)
    }

    /// Removes the object stored under `id`; returns whether there was one.
    ///
    /// Its bytes leave the capacity accounting at once and waiting puts are
    /// woken; buffers already handed out by [`ObjectStore::get`] stay valid.
    pub fn delete(&self, id: ObjectId) -> bool {
        let removed = {
            let mut state = self.state.lock();
            let removed = state.objects.remove(&id);
            if let Some(buf) = &removed {
                state.used_bytes -= byte_len(buf);
            }
            removed
        };
        // Dropped outside the lock: the last pin frees memory, which can be slow.
        match removed {
            Some(_buf) => {
                self.space_freed.notify_waiters();
                true
            }
            None => false,
        }
    }

    /// A snapshot of the accounting.
    pub fn stats(&self) -> StoreStats {
        let state = self.state.lock();
        StoreStats {
            used_bytes: state.used_bytes,
            capacity_bytes: self.capacity_bytes,
            num_objects: state.objects.len(),
        }
    }

    /// The store's capacity in bytes.
    pub fn capacity_bytes(&self) -> u64 {
        self.capacity_bytes
    }

    fn check_size(&self, id: ObjectId, buf: &ObjectBuffer) -> Result<(), StoreError> {
        let size = byte_len(buf);
        if size > self.capacity_bytes {
            return Err(StoreError::TooLarge {
                id,
                size,
                capacity: self.capacity_bytes,
            });
        }
        Ok(())
    }

    /// Inserts a clone of `buf` if `id` is absent and it fits now.
    fn try_insert(&self, id: ObjectId, buf: &ObjectBuffer) -> Result<(), StoreError> {
        let size = byte_len(buf);
        let mut state = self.state.lock();
        let state = &mut *state;
        let hashbrown::hash_map::Entry::Vacant(slot) = state.objects.entry(id) else {
            return Err(StoreError::AlreadyExists { id });
        };
        // `used_bytes <= capacity_bytes` always holds, so this cannot underflow.
        if size > self.capacity_bytes - state.used_bytes {
            return Err(StoreError::Full {
                id,
                requested: size,
                used: state.used_bytes,
                capacity: self.capacity_bytes,
            });
        }
        slot.insert(buf.clone());
        state.used_bytes += size;
        Ok(())
    }
}

impl fmt::Debug for ObjectStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ObjectStore")
            .field("stats", &self.stats())
            .finish()
    }
}

/// A buffer's size in the `u64` the accounting uses (lossless: `usize` is at
/// most 64 bits on every target Rust supports).
fn byte_len(buf: &ObjectBuffer) -> u64 {
    buf.len() as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use ray_proto::WorkerId;
    use std::future::Future;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::task::{Context, Poll, Wake, Waker};

    fn oid(seq: u64) -> ObjectId {
        ObjectId::new(WorkerId(1), seq)
    }

    fn bytes(len: usize) -> ObjectBuffer {
        ObjectBuffer::copy_from_slice(&vec![0xAB; len])
    }

    fn store(capacity_bytes: u64) -> ObjectStore {
        ObjectStore::new(StoreConfig { capacity_bytes })
    }

    /// A waker that records whether it was woken.
    #[derive(Default)]
    struct Flag(AtomicBool);

    impl Wake for Flag {
        fn wake(self: Arc<Self>) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    #[test]
    fn default_capacity_is_one_gib() {
        assert_eq!(StoreConfig::default().capacity_bytes, 1 << 30);
    }

    #[test]
    fn get_returns_the_stored_buffer_without_copying() {
        let s = store(100);
        let buf = bytes(10);
        s.try_put(oid(1), buf.clone()).expect("fits");
        let got = s.get(oid(1)).expect("stored");
        assert!(got.ptr_eq(&buf));
        assert!(s.contains(oid(1)));
        assert!(!s.contains(oid(2)));
        assert!(s.get(oid(2)).is_none());
        assert_eq!(
            s.stats(),
            StoreStats {
                used_bytes: 10,
                capacity_bytes: 100,
                num_objects: 1
            }
        );
    }

    #[test]
    fn try_put_of_existing_id_returns_already_exists_and_keeps_the_original() {
        let s = store(100);
        let first = bytes(10);
        s.try_put(oid(1), first.clone()).expect("fits");
        assert_eq!(
            s.try_put(oid(1), bytes(20)),
            Err(StoreError::AlreadyExists { id: oid(1) })
        );
        assert!(s.get(oid(1)).expect("stored").ptr_eq(&first));
        assert_eq!(s.stats().used_bytes, 10);
    }

    #[test]
    fn try_put_beyond_free_space_returns_full() {
        let s = store(100);
        s.try_put(oid(1), bytes(80)).expect("fits");
        assert_eq!(
            s.try_put(oid(2), bytes(21)),
            Err(StoreError::Full {
                id: oid(2),
                requested: 21,
                used: 80,
                capacity: 100
            })
        );
        s.try_put(oid(3), bytes(20))
            .expect("exactly fills the store");
        assert_eq!(s.stats().used_bytes, 100);
    }

    #[test]
    fn object_larger_than_capacity_is_too_large_even_in_an_empty_store() {
        let s = store(100);
        assert_eq!(
            s.try_put(oid(1), bytes(101)),
            Err(StoreError::TooLarge {
                id: oid(1),
                size: 101,
                capacity: 100
            })
        );
        assert_eq!(s.stats().num_objects, 0);
    }

    #[test]
    fn empty_objects_fit_in_a_full_store() {
        let s = store(0);
        s.try_put(oid(1), bytes(0)).expect("zero bytes always fit");
        assert_eq!(s.stats().num_objects, 1);
        assert_eq!(s.stats().used_bytes, 0);
    }

    #[test]
    fn pinned_buffer_stays_readable_after_delete() {
        let s = store(100);
        s.try_put(oid(1), ObjectBuffer::copy_from_slice(b"still here"))
            .expect("fits");
        let pinned = s.get(oid(1)).expect("stored");
        assert!(s.delete(oid(1)));
        assert_eq!(s.stats().used_bytes, 0);
        assert!(s.get(oid(1)).is_none());
        assert_eq!(&*pinned, b"still here");
    }

    #[test]
    fn delete_of_missing_id_returns_false() {
        let s = store(100);
        assert!(!s.delete(oid(1)));
        s.try_put(oid(1), bytes(5)).expect("fits");
        assert!(s.delete(oid(1)));
        assert!(!s.delete(oid(1)));
    }

    #[test]
    fn put_that_fits_completes_on_first_poll_without_a_runtime() {
        let s = store(100);
        let mut cx = Context::from_waker(Waker::noop());
        let fut = pin!(s.put(oid(1), bytes(10), Duration::from_secs(3600)));
        assert_eq!(fut.poll(&mut cx), Poll::Ready(Ok(())));
        assert!(s.contains(oid(1)));
    }

    #[test]
    fn put_of_too_large_object_fails_at_once() {
        let s = store(100);
        let mut cx = Context::from_waker(Waker::noop());
        let fut = pin!(s.put(oid(1), bytes(101), Duration::from_secs(3600)));
        assert_eq!(
            fut.poll(&mut cx),
            Poll::Ready(Err(StoreError::TooLarge {
                id: oid(1),
                size: 101,
                capacity: 100
            }))
        );
    }

    #[test]
    fn put_of_existing_id_fails_at_once_with_already_exists() {
        let s = store(100);
        s.try_put(oid(1), bytes(90)).expect("fits");
        let mut cx = Context::from_waker(Waker::noop());
        // Would not fit either: AlreadyExists wins, and nothing waits.
        let fut = pin!(s.put(oid(1), bytes(50), Duration::from_secs(3600)));
        assert_eq!(
            fut.poll(&mut cx),
            Poll::Ready(Err(StoreError::AlreadyExists { id: oid(1) }))
        );
    }

    #[tokio::test]
    async fn delete_wakes_a_waiting_put_which_then_succeeds() {
        let s = store(100);
        s.try_put(oid(1), bytes(80)).expect("fits");
        let flag = Arc::new(Flag::default());
        let waker = Waker::from(flag.clone());
        let mut cx = Context::from_waker(&waker);
        let mut fut = pin!(s.put(oid(2), bytes(50), Duration::from_secs(3600)));
        assert!(fut.as_mut().poll(&mut cx).is_pending());
        assert!(!flag.0.load(Ordering::SeqCst));

        assert!(s.delete(oid(1)));
        assert!(flag.0.load(Ordering::SeqCst), "delete must wake the put");
        assert_eq!(fut.as_mut().poll(&mut cx), Poll::Ready(Ok(())));
        assert_eq!(s.stats().used_bytes, 50);
    }

    #[tokio::test(start_paused = true)]
    async fn put_waits_for_space_and_succeeds_after_delete() {
        let s = Arc::new(store(100));
        s.try_put(oid(1), bytes(80)).expect("fits");
        let waiting = tokio::spawn({
            let s = s.clone();
            async move { s.put(oid(2), bytes(50), Duration::from_secs(60)).await }
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!waiting.is_finished());
        assert!(!s.contains(oid(2)));

        assert!(s.delete(oid(1)));
        assert_eq!(waiting.await.expect("task"), Ok(()));
        assert!(s.contains(oid(2)));
        assert_eq!(s.stats().used_bytes, 50);
    }

    #[tokio::test(start_paused = true)]
    async fn put_times_out_with_full_and_leaves_used_bytes_unchanged() {
        let s = store(100);
        s.try_put(oid(1), bytes(80)).expect("fits");
        let before = s.stats();
        let res = s.put(oid(2), bytes(50), Duration::from_secs(5)).await;
        assert_eq!(
            res,
            Err(StoreError::Full {
                id: oid(2),
                requested: 50,
                used: 80,
                capacity: 100
            })
        );
        assert_eq!(s.stats(), before);
        assert!(!s.contains(oid(2)));
    }

    #[tokio::test(start_paused = true)]
    async fn put_with_zero_timeout_tries_exactly_once() {
        let s = store(100);
        assert_eq!(s.put(oid(1), bytes(80), Duration::ZERO).await, Ok(()));
        assert!(matches!(
            s.put(oid(2), bytes(50), Duration::ZERO).await,
            Err(StoreError::Full { .. })
        ));
    }

    #[tokio::test]
    async fn dropping_a_waiting_put_leaves_no_reservation_behind() {
        let s = store(100);
        s.try_put(oid(1), bytes(80)).expect("fits");
        let before = s.stats();
        {
            let mut cx = Context::from_waker(Waker::noop());
            let fut = pin!(s.put(oid(2), bytes(50), Duration::from_secs(3600)));
            assert!(fut.poll(&mut cx).is_pending());
        }
        assert_eq!(s.stats(), before);
        assert!(s.delete(oid(1)));
        // The whole capacity is free again: the dropped put held none of it.
        s.try_put(oid(3), bytes(100)).expect("fits");
        assert!(!s.contains(oid(2)));
    }

    #[tokio::test(start_paused = true)]
    async fn one_delete_wakes_every_waiting_put_that_now_fits() {
        let s = Arc::new(store(100));
        s.try_put(oid(1), bytes(100)).expect("fits");
        let waiters: Vec<_> = (2..=4)
            .map(|seq| {
                let s = s.clone();
                tokio::spawn(
                    async move { s.put(oid(seq), bytes(30), Duration::from_secs(60)).await },
                )
            })
            .collect();
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(s.delete(oid(1)));
        for w in waiters {
            assert_eq!(w.await.expect("task"), Ok(()));
        }
        assert_eq!(s.stats().used_bytes, 90);
        assert_eq!(s.stats().num_objects, 3);
    }

    #[tokio::test(start_paused = true)]
    async fn waiting_put_returns_already_exists_if_the_id_is_stored_meanwhile() {
        let s = Arc::new(store(100));
        s.try_put(oid(1), bytes(80)).expect("fits");
        let waiting = tokio::spawn({
            let s = s.clone();
            async move { s.put(oid(2), bytes(50), Duration::from_secs(60)).await }
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        s.try_put(oid(2), bytes(10)).expect("fits");
        assert!(s.delete(oid(1)));
        assert_eq!(
            waiting.await.expect("task"),
            Err(StoreError::AlreadyExists { id: oid(2) })
        );
        assert_eq!(s.stats().used_bytes, 10);
    }
}
