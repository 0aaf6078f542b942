//! A global allocator that counts the allocations each thread makes, for
//! tests that assert a path allocates nothing (tests run in parallel, so
//! the count is per thread).
//!
//! A test binary that needs it installs it itself (one binary may have
//! only one global allocator, and linking this crate must not change
//! another binary's):
//!
//! ```
//! use ray_test_support::counting_alloc::{allocations_in, Counting};
//!
//! #[global_allocator]
//! static GLOBAL: Counting = Counting;
//!
//! fn main() {
//!     let one = allocations_in(|| drop(std::hint::black_box(vec![1u8; 8])));
//!     assert_eq!(one, 1);
//!     assert_eq!(allocations_in(|| ()), 0);
//! }
//! ```
//!
//! [`allocations_in`] counts only while [`Counting`] is the global
//! allocator; otherwise it sees 0.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// Counts allocations made by the current thread, then allocates with
/// [`System`].
#[derive(Debug)]
pub struct Counting;

thread_local! {
    static ALLOCS: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: forwards every call to `System` unchanged; the counter is a
// thread-local `Cell` that itself never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Allocations (and reallocations) the current thread makes while `f` runs.
pub fn allocations_in(f: impl FnOnce()) -> usize {
    let before = ALLOCS.with(Cell::get);
    f();
    ALLOCS.with(Cell::get) - before
}
