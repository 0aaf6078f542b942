//! An empty `ObjectBuffer` (the value of a task returning `()`) makes no
//! allocation: counted by a global allocator, per thread, in a test binary
//! of its own.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use ray_store::{ObjectBuffer, BUFFER_ALIGNMENT};
use rkyv::util::AlignedVec;

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: every call is passed to `System` unchanged; the count is a
// thread-local `Cell` with a const initializer, which allocates nothing.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
        // SAFETY: the caller's contract for `alloc` is passed on as is.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` above with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

fn allocations() -> usize {
    ALLOCATIONS.with(Cell::get)
}

#[test]
fn an_empty_buffer_allocates_nothing_and_keeps_its_promises() {
    let before = allocations();
    let a = ObjectBuffer::from_aligned(AlignedVec::<BUFFER_ALIGNMENT>::new());
    let b = a.clone();
    let c = ObjectBuffer::copy_from_slice(&[]);
    assert_eq!(allocations(), before, "an empty buffer allocated");
    for buf in [&a, &b, &c] {
        assert_eq!((buf.len(), buf.as_bytes().len()), (0, 0));
        assert_eq!(buf.as_ptr() as usize % BUFFER_ALIGNMENT, 0);
    }
    assert!(a.ptr_eq(&b) && a.ptr_eq(&c));

    // One byte is an allocation of its own, and not "the same memory".
    let one = ObjectBuffer::copy_from_slice(&[1]);
    assert!(allocations() > before);
    assert_eq!(one.as_bytes(), &[1]);
    assert!(!one.ptr_eq(&a));
    // An allocated but empty vector is freed, not kept.
    let mut spare = AlignedVec::<BUFFER_ALIGNMENT>::with_capacity(64);
    spare.extend_from_slice(&[]);
    assert!(ObjectBuffer::from_aligned(spare).is_empty());
}
