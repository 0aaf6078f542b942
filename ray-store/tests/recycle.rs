//! The recycler of large buffers (`ray_store::recycle`), in a process of
//! its own: its state is process-wide, so no other test may free large
//! buffers beside these.

use std::time::{Duration, Instant};

use ray_store::recycle::{
    recycle_limit, recycled_bytes, DEFAULT_RECYCLE_IDLE, DEFAULT_RECYCLE_LIMIT,
};
use ray_store::{
    aligned_with_capacity, release_recycled, set_recycle_idle, set_recycle_limit, EncodeBuffer,
    ObjectBuffer, HUGE_PAGE_THRESHOLD,
};

const MIB: usize = 1 << 20;

/// A filled object of `len` bytes, in memory from `aligned_with_capacity`.
fn object(len: usize, fill: u8) -> ObjectBuffer {
    let mut v = aligned_with_capacity(len);
    v.resize(len, fill);
    ObjectBuffer::from_aligned(v)
}

#[test]
fn freed_large_buffers_are_reused_within_the_limit_and_small_ones_never() {
    assert_eq!(recycle_limit(), DEFAULT_RECYCLE_LIMIT);

    // A freed large object's memory comes back, empty, for the next one.
    let first = object(40 * MIB, 7);
    let addr = first.as_ptr();
    drop(first);
    assert!(recycled_bytes() >= 40 * MIB);
    let mut again = aligned_with_capacity(40 * MIB);
    assert_eq!(again.as_ptr(), addr, "the freed buffer was not reused");
    assert!(again.is_empty() && again.capacity() >= 40 * MIB);
    assert_eq!(recycled_bytes(), 0);
    // Its old bytes are not visible: it is written afresh.
    again.resize(40 * MIB, 9);
    let again = ObjectBuffer::from_aligned(again);
    assert!(again.iter().all(|&b| b == 9));
    drop(again);

    // A kept buffer more than twice the size asked for is left alone;
    // small requests and small buffers never touch the recycler.
    let small = aligned_with_capacity(HUGE_PAGE_THRESHOLD / 2);
    assert!(small.capacity() < 2 * HUGE_PAGE_THRESHOLD);
    assert_eq!(recycled_bytes(), 40 * MIB);
    drop(ObjectBuffer::from_aligned(small));
    assert_eq!(recycled_bytes(), 40 * MIB);
    let mut big = aligned_with_capacity(90 * MIB);
    assert_ne!(big.as_ptr(), addr);
    assert_eq!(recycled_bytes(), 40 * MIB, "a 40 MiB buffer served 90 MiB");
    big.resize(90 * MIB, 3);
    drop(ObjectBuffer::from_aligned(big));
    assert_eq!(recycled_bytes(), 130 * MIB);

    // Over the limit the oldest go first; a buffer over the limit is freed.
    set_recycle_limit(100 * MIB);
    assert_eq!(recycled_bytes(), 90 * MIB, "the older 40 MiB stayed");
    // 60 MiB fits the kept 90 MiB (at most twice as large): reused.
    drop(object(60 * MIB, 1));
    assert_eq!(recycled_bytes(), 90 * MIB);
    // 40 MiB does not: fresh memory, kept in place of the older 90 MiB.
    drop(object(40 * MIB, 1));
    assert_eq!(recycled_bytes(), 40 * MIB, "the 90 MiB was not evicted");
    drop(object(120 * MIB, 1));
    assert_eq!(
        recycled_bytes(),
        40 * MIB,
        "a buffer over the limit was kept"
    );

    release_recycled();
    assert_eq!(recycled_bytes(), 0);
    set_recycle_limit(0);
    drop(object(40 * MIB, 1));
    assert_eq!(recycled_bytes(), 0, "kept with the recycler off");
    set_recycle_limit(DEFAULT_RECYCLE_LIMIT);

    // A kept buffer left unused is freed after the idle time, by a thread
    // of the recycler's own (10 s by default: nothing went above).
    set_recycle_idle(Duration::from_millis(50));
    drop(object(40 * MIB, 1));
    assert_eq!(recycled_bytes(), 40 * MIB);
    let deadline = Instant::now() + Duration::from_secs(10);
    while recycled_bytes() > 0 {
        assert!(Instant::now() < deadline, "an unused buffer was kept 10 s");
        std::thread::sleep(Duration::from_millis(10));
    }
    // The thread comes back for the next kept buffer.
    drop(object(40 * MIB, 1));
    while recycled_bytes() > 0 {
        assert!(Instant::now() < deadline, "the second buffer was kept");
        std::thread::sleep(Duration::from_millis(10));
    }
    set_recycle_idle(DEFAULT_RECYCLE_IDLE);

    // One test function: `cargo test` runs the tests of a file on threads
    // of one process, and the recycler is process-wide.
    a_large_encode_reuses_a_freed_buffer_and_keeps_every_byte();
}

fn a_large_encode_reuses_a_freed_buffer_and_keeps_every_byte() {
    use rkyv::ser::Writer;
    let value: Vec<u8> = (0..50 * MIB).map(|i| (i % 253) as u8).collect();
    let encode = || {
        let mut w = EncodeBuffer::new();
        Writer::<rkyv::rancor::Error>::write(&mut w, &value).unwrap();
        w.into_buffer()
    };
    let first = encode();
    let addr = first.as_ptr();
    assert!(first[..] == value[..]);
    drop(first);
    let second = encode();
    assert_eq!(second.as_ptr(), addr, "the second encode got fresh memory");
    assert!(second[..] == value[..]);
}
