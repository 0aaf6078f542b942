//! Large buffers kept after their object is freed, for the next large
//! object: the memory of a 100 MiB object is written at the speed of a
//! copy, not of the kernel handing out (and zeroing) fresh pages.
//!
//! Every buffer of [`HUGE_PAGE_THRESHOLD`] bytes or more (the receive
//! buffer of an object fetched from another node, the encode buffer of a
//! large `put`) is a mapping of its own, given back to the kernel when
//! freed. The next one is faulted in again, and each fault zeroes a page:
//! a profile of `workloads --mode cluster transfer` had the receiving I/O
//! thread spend most of its time zeroing pages under the copy into the
//! receive buffer, and a VM's first touch of fresh memory is slow and
//! uneven (figures in `docs/perf-log/2026-11-figures-from-code-comments.md`).
//!
//! The recycler keeps freed large buffers, up to a limit in bytes
//! ([`set_recycle_limit`], default [`DEFAULT_RECYCLE_LIMIT`]), most
//! recent first; [`aligned_with_capacity`](crate::aligned_with_capacity)
//! reuses one that is large enough and at most twice the size asked for.
//! Kept buffers are resident memory: one unused for
//! [`DEFAULT_RECYCLE_IDLE`] ([`set_recycle_idle`]) is freed by a thread
//! that exists only while buffers are kept, so an idle process gives the
//! memory back; [`release_recycled`] gives them all back at once, and a
//! limit of 0 turns the recycler off.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use rkyv::util::AlignedVec;

use crate::buffer::{BUFFER_ALIGNMENT, HUGE_PAGE_THRESHOLD};

/// Bytes of freed large buffers a process keeps by default: 256 MiB, two
/// 100 MiB objects with their encoding's spare room.
pub const DEFAULT_RECYCLE_LIMIT: usize = 256 << 20;

/// How long a kept buffer may go unused before it is freed by default.
pub const DEFAULT_RECYCLE_IDLE: Duration = Duration::from_secs(10);

static LIMIT: AtomicUsize = AtomicUsize::new(DEFAULT_RECYCLE_LIMIT);

/// [`set_recycle_idle`], in microseconds.
static IDLE_US: AtomicU64 = AtomicU64::new(DEFAULT_RECYCLE_IDLE.as_micros() as u64);

/// Wakes the freeing thread early (the idle time changed).
static WAKE_TRIMMER: Condvar = Condvar::new();

static KEPT: Mutex<Kept> = Mutex::new(Kept {
    buffers: Vec::new(),
    bytes: 0,
    trimmer: false,
});

/// The buffers kept, oldest first, with when each was kept, and their
/// capacities summed.
struct Kept {
    buffers: Vec<(AlignedVec<BUFFER_ALIGNMENT>, Instant)>,
    bytes: usize,
    /// Whether the thread freeing unused buffers is running.
    trimmer: bool,
}

impl Kept {
    fn remove(&mut self, i: usize) -> AlignedVec<BUFFER_ALIGNMENT> {
        let (v, _) = self.buffers.remove(i);
        self.bytes -= v.capacity();
        v
    }
}

/// Sets how long a kept buffer may go unused before it is freed (default
/// [`DEFAULT_RECYCLE_IDLE`]); buffers already kept longer are freed now.
pub fn set_recycle_idle(idle: Duration) {
    let us = u64::try_from(idle.as_micros()).unwrap_or(u64::MAX);
    // Under the lock the freeing thread looks under: it either reads the
    // new time before it waits, or is waiting and wakes.
    let _kept = kept();
    IDLE_US.store(us, Ordering::Relaxed);
    WAKE_TRIMMER.notify_all();
}

fn recycle_idle() -> Duration {
    Duration::from_micros(IDLE_US.load(Ordering::Relaxed))
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
        .filter(|(_, (v, _))| (capacity..=most).contains(&v.capacity()))
        .min_by_key(|(_, (v, _))| v.capacity())
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
    let start_trimmer = {
        let mut k = kept();
        while k.bytes + cap > limit {
            freed.push(k.remove(0));
        }
        k.bytes += cap;
        k.buffers.push((v, Instant::now()));
        !std::mem::replace(&mut k.trimmer, true)
    };
    drop(freed);
    if start_trimmer {
        let spawned = std::thread::Builder::new()
            .name("ray-recycle".into())
            .spawn(trim_loop);
        if spawned.is_err() {
            // Kept buffers then go only by the limit or `release_recycled`.
            kept().trimmer = false;
        }
    }
}

/// Frees kept buffers once unused for [`recycle_idle`]; exits when none
/// are left (the next kept buffer starts it again).
fn trim_loop() {
    let mut k = kept();
    loop {
        let idle = recycle_idle();
        let now = Instant::now();
        let mut freed = Vec::new();
        while k
            .buffers
            .first()
            .is_some_and(|(_, at)| now.duration_since(*at) >= idle)
        {
            freed.push(k.remove(0));
        }
        let next = match k.buffers.first() {
            Some((_, oldest)) => idle.saturating_sub(now.duration_since(*oldest)),
            None => {
                k.trimmer = false;
                drop(k);
                drop(freed);
                return;
            }
        };
        if !freed.is_empty() {
            // Unmapped outside the lock, then a fresh look.
            drop(k);
            drop(freed);
            k = kept();
            continue;
        }
        // At least a millisecond: a zero idle time must not spin.
        k = WAKE_TRIMMER
            .wait_timeout(k, next.max(Duration::from_millis(1)))
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .0;
    }
}
