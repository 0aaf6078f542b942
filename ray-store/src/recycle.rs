//! Large buffers kept after their object is freed, for the next large
//! object: the memory of a 100 MiB object is written at the speed of a
//! copy, not of the kernel handing out (and zeroing) fresh pages.
//!
//! Every buffer of [`HUGE_PAGE_THRESHOLD`] bytes or more (the receive
//! buffer of an object fetched from another node, the encode buffer of a
//! large `put`) is a mapping of its own, given back to the kernel when
//! freed. The next one is faulted in again, and each fault zeroes a page:
//! a profile of `workloads --mode cluster transfer` on this project's VM
//! had the receiving I/O thread spend 63% of its time in `clear_page_erms`
//! under the copy into the receive buffer, and the VM's first touch of
//! fresh memory is slow and uneven (the same transfer ran at 0.3 or 1.1
//! GB/s by run).
//!
//! The recycler keeps freed large buffers, up to a limit in bytes
//! ([`set_recycle_limit`], default [`DEFAULT_RECYCLE_LIMIT`]), most
//! recent first; [`aligned_with_capacity`](crate::aligned_with_capacity)
//! reuses one that is large enough and at most twice the size asked for.
//! Kept buffers are resident memory the process holds while idle;
//! [`release_recycled`] gives them all back, and a limit of 0 turns the
//! recycler off.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use rkyv::util::AlignedVec;

use crate::buffer::{BUFFER_ALIGNMENT, HUGE_PAGE_THRESHOLD};

/// Bytes of freed large buffers a process keeps by default: 256 MiB, two
/// 100 MiB objects with their encoding's spare room.
pub const DEFAULT_RECYCLE_LIMIT: usize = 256 << 20;

static LIMIT: AtomicUsize = AtomicUsize::new(DEFAULT_RECYCLE_LIMIT);

static KEPT: Mutex<Kept> = Mutex::new(Kept {
    buffers: Vec::new(),
    bytes: 0,
});

/// The buffers kept, oldest first, and their capacities summed.
struct Kept {
    buffers: Vec<AlignedVec<BUFFER_ALIGNMENT>>,
    bytes: usize,
}

impl Kept {
    fn remove(&mut self, i: usize) -> AlignedVec<BUFFER_ALIGNMENT> {
        let v = self.buffers.remove(i);
        self.bytes -= v.capacity();
        v
    }
}

fn kept() -> std::sync::MutexGuard<'static, Kept> {
    // A panic while the lock was held cannot leave `Kept` inconsistent
    // (each update is a push or remove with its byte count).
    KEPT.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Sets how many bytes of freed large buffers this process keeps for
/// reuse; buffers beyond the new limit are freed at once. 0 keeps none.
pub fn set_recycle_limit(bytes: usize) {
    LIMIT.store(bytes, Ordering::Relaxed);
    let freed = {
        let mut k = kept();
        let mut freed = Vec::new();
        while k.bytes > bytes {
            freed.push(k.remove(0));
        }
        freed
    };
    drop(freed);
}

/// The limit [`set_recycle_limit`] set (default [`DEFAULT_RECYCLE_LIMIT`]).
pub fn recycle_limit() -> usize {
    LIMIT.load(Ordering::Relaxed)
}

/// Bytes of freed large buffers kept now.
pub fn recycled_bytes() -> usize {
    kept().bytes
}

/// Frees every kept buffer (their memory goes back to the kernel).
pub fn release_recycled() {
    let freed = {
        let mut k = kept();
        k.bytes = 0;
        std::mem::take(&mut k.buffers)
    };
    drop(freed);
}

/// An empty kept buffer with room for `capacity` bytes and at most twice
/// that, the most recently kept of the smallest fitting size.
pub(crate) fn take(capacity: usize) -> Option<AlignedVec<BUFFER_ALIGNMENT>> {
    if capacity < HUGE_PAGE_THRESHOLD {
        return None;
    }
    let most = capacity.saturating_mul(2);
    let mut k = kept();
    let best = k
        .buffers
        .iter()
        .enumerate()
        .rev()
        .filter(|(_, v)| (capacity..=most).contains(&v.capacity()))
        .min_by_key(|(_, v)| v.capacity())
        .map(|(i, _)| i)?;
    Some(k.remove(best))
}

/// Keeps `v` for reuse if it is large and fits under the limit (freeing
/// the oldest kept buffers to make room); otherwise frees it.
pub(crate) fn give(mut v: AlignedVec<BUFFER_ALIGNMENT>) {
    let cap = v.capacity();
    let limit = recycle_limit();
    if cap < HUGE_PAGE_THRESHOLD || cap > limit {
        return;
    }
    v.clear();
    // Freed after the lock is released: unmapping 100 MiB takes a while.
    let mut freed = Vec::new();
    {
        let mut k = kept();
        while k.bytes + cap > limit {
            freed.push(k.remove(0));
        }
        k.bytes += cap;
        k.buffers.push(v);
    }
    drop(freed);
}
