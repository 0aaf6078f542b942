//! An empty `ObjectBuffer` (the value of a task returning `()`) makes no
//! allocation: counted by a global allocator, per thread, in a test binary
//! of its own.

use ray_store::{ObjectBuffer, BUFFER_ALIGNMENT};
use rkyv::util::AlignedVec;

use ray_test_support::counting_alloc::{allocations_in, Counting};

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn an_empty_buffer_allocates_nothing_and_keeps_its_promises() {
    let mut empties = None;
    let allocated = allocations_in(|| {
        let a = ObjectBuffer::from_aligned(AlignedVec::<BUFFER_ALIGNMENT>::new());
        let b = a.clone();
        let c = ObjectBuffer::copy_from_slice(&[]);
        empties = Some([a, b, c]);
    });
    assert_eq!(allocated, 0, "an empty buffer allocated");
    let [a, b, c] = empties.expect("set by the closure");
    for buf in [&a, &b, &c] {
        assert_eq!((buf.len(), buf.as_bytes().len()), (0, 0));
        assert_eq!(buf.as_ptr() as usize % BUFFER_ALIGNMENT, 0);
    }
    assert!(a.ptr_eq(&b) && a.ptr_eq(&c));

    // One byte is an allocation of its own, and not "the same memory".
    let mut one = None;
    assert!(allocations_in(|| one = Some(ObjectBuffer::copy_from_slice(&[1]))) > 0);
    let one = one.expect("set by the closure");
    assert_eq!(one.as_bytes(), &[1]);
    assert!(!one.ptr_eq(&a));
    // An allocated but empty vector makes an empty buffer too.
    let spare = AlignedVec::<BUFFER_ALIGNMENT>::with_capacity(64);
    assert!(ObjectBuffer::from_aligned(spare).is_empty());
}
