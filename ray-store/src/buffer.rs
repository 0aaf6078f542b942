//! [`ObjectBuffer`]: the immutable, 16-byte-aligned bytes of one object.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use rkyv::util::AlignedVec;

/// Alignment, in bytes, of the first byte of every [`ObjectBuffer`].
///
/// rkyv archives of the types ray-rs sends need at most 16-byte alignment,
/// so a buffer can be accessed in place without copying.
pub const BUFFER_ALIGNMENT: usize = 16;

/// Capacity from which [`aligned_with_capacity`] asks the kernel to back a
/// buffer with transparent huge pages.
///
/// glibc serves every allocation above 32 MiB (the most its mmap
/// threshold rises to) from a mapping of its own, returned to the kernel
/// when freed, so the advice never outlives the buffer. Below that the
/// memory may come from the malloc arena, where the advice would stay on
/// and hand huge pages to whatever small allocations reuse it.
pub const HUGE_PAGE_THRESHOLD: usize = 32 << 20;

/// The size of a transparent huge page on x86-64 and of the extents
/// advised: only whole, aligned ones can become huge pages.
const HUGE_PAGE: usize = 2 << 20;

/// An empty 16-aligned vector with room for `capacity` bytes, for the bytes
/// of an object about to be written (received from another node, or
/// encoded).
///
/// From [`HUGE_PAGE_THRESHOLD`] on, Linux is asked (`MADV_HUGEPAGE`) to back
/// its whole, aligned 2 MiB extents with huge pages: writing a fresh
/// 100 MiB buffer then takes about 50 page faults instead of 25,600, which
/// were a large share of a transfer's CPU time (figures in
/// `docs/perf-log/2026-11-figures-from-code-comments.md`). Where huge pages are off, the advice is ignored and nothing
/// changes.
///
/// From the same size on, a buffer freed earlier is reused when one fits
/// (see [`crate::recycle`]): its pages are already there.
pub fn aligned_with_capacity(capacity: usize) -> AlignedVec<BUFFER_ALIGNMENT> {
    if let Some(v) = crate::recycle::take(capacity) {
        return v;
    }
    let mut v = AlignedVec::with_capacity(capacity);
    if capacity >= HUGE_PAGE_THRESHOLD {
        advise_huge_pages(v.as_mut_ptr(), capacity);
    }
    v
}

/// The rkyv writer objects are encoded into: a 16-aligned growing buffer
/// that, once it passes [`HUGE_PAGE_THRESHOLD`], moves into memory from
/// [`aligned_with_capacity`] (huge pages where Linux offers them).
///
/// rkyv's own `AlignedVec` writer grows by `realloc`, so a large value was
/// written into 4 KiB pages: encoding 100 MiB faulted 25,600 of them, most
/// of the time of a 100 MiB `put` on this project's VM.
///
/// It holds at most [`MAX_ENCODED_BYTES`]: a write past that fails with
/// [`TooLarge`] (rkyv's relative pointers are 32-bit, and a larger archive
/// would make rkyv panic while it resolves one).
pub struct EncodeBuffer(AlignedVec<BUFFER_ALIGNMENT>, usize);

/// The most bytes one object's encoding may take: rkyv's relative
/// pointers are signed 32-bit offsets, so an archive stays below 2 GiB.
pub const MAX_ENCODED_BYTES: usize = i32::MAX as usize;

/// An encoding would pass [`MAX_ENCODED_BYTES`] (or a smaller limit a test
/// set): the value is too large for one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TooLarge {
    /// Bytes the encoding needed at least when it stopped.
    pub needed: usize,
    /// The limit.
    pub limit: usize,
}

impl fmt::Display for TooLarge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the encoded value needs at least {} bytes, over the limit of {} bytes for one \
             object (rkyv's 32-bit relative pointers); split it into several objects",
            self.needed, self.limit
        )
    }
}

impl std::error::Error for TooLarge {}

impl Default for EncodeBuffer {
    fn default() -> Self {
        Self(AlignedVec::new(), MAX_ENCODED_BYTES)
    }
}

impl EncodeBuffer {
    /// An empty buffer; small values stay in an ordinary allocation.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty buffer that holds at most `limit` bytes (at most
    /// [`MAX_ENCODED_BYTES`]).
    pub fn with_limit(limit: usize) -> Self {
        Self(AlignedVec::new(), limit.min(MAX_ENCODED_BYTES))
    }

    /// The bytes written so far, as an object's buffer (no copy).
    pub fn into_buffer(self) -> ObjectBuffer {
        ObjectBuffer::from_aligned(self.0)
    }

    /// Bytes written so far.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether nothing was written.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Bytes it can hold before it grows again.
    pub fn capacity(&self) -> usize {
        self.0.capacity()
    }

    /// Makes room for `more` bytes; past the threshold in memory advised
    /// for huge pages, with an eighth to spare (rkyv writes a value's
    /// large parts first and its small root last) and at least doubling.
    fn reserve(&mut self, more: usize) {
        let need = self.0.len().saturating_add(more);
        if need <= self.0.capacity() || need < HUGE_PAGE_THRESHOLD {
            return;
        }
        let cap = need
            .saturating_add(need / 8)
            .max(self.0.capacity().saturating_mul(2))
            .next_multiple_of(HUGE_PAGE);
        let mut grown = aligned_with_capacity(cap);
        grown.extend_from_slice(&self.0);
        crate::recycle::give(std::mem::replace(&mut self.0, grown));
    }
}

impl rkyv::ser::Positional for EncodeBuffer {
    fn pos(&self) -> usize {
        self.0.len()
    }
}

impl<E: rkyv::rancor::Source> rkyv::ser::Writer<E> for EncodeBuffer {
    fn write(&mut self, bytes: &[u8]) -> Result<(), E> {
        let needed = self.0.len().saturating_add(bytes.len());
        if needed > self.1 {
            return Err(E::new(TooLarge {
                needed,
                limit: self.1,
            }));
        }
        self.reserve(bytes.len());
        self.0.extend_from_slice(bytes);
        Ok(())
    }
}

#[cfg(target_os = "linux")]
fn advise_huge_pages(ptr: *mut u8, len: usize) {
    let start = (ptr as usize).next_multiple_of(HUGE_PAGE);
    let end = (ptr as usize + len) / HUGE_PAGE * HUGE_PAGE;
    if end > start {
        // SAFETY: [start, end) lies inside the allocation of `len` bytes at
        // `ptr`, which the caller owns. MADV_HUGEPAGE is advice: it changes
        // neither the contents nor the validity of the mapping. It fails
        // (EINVAL) where huge pages are unsupported, which leaves the buffer
        // as it was, so the result is ignored.
        unsafe {
            libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn advise_huge_pages(_ptr: *mut u8, _len: usize) {}

/// An empty slice whose address is 16-aligned.
///
/// An empty `AlignedVec` holds a dangling pointer with alignment 1, so empty
/// buffers hand out this slice instead to keep the alignment promise.
#[repr(align(16))]
struct AlignedEmpty([u8; 0]);

static EMPTY: AlignedEmpty = AlignedEmpty([]);

/// The immutable bytes of one object, starting at a 16-byte-aligned address.
///
/// Cloning is cheap (a reference count) and every clone shares the same
/// memory. A clone *pins* the bytes: they stay valid for as long as it is
/// held, even after the object is deleted from the store.
///
/// When the last clone is dropped, a large buffer goes to the
/// [recycler](crate::recycle) for the next large object. An empty buffer
/// (the value of a task returning `()`) holds no allocation at all.
#[derive(Clone)]
pub struct ObjectBuffer(Option<Arc<Backing>>);

/// The memory of an [`ObjectBuffer`], never empty; recycled when freed.
struct Backing(AlignedVec<BUFFER_ALIGNMENT>);

impl Drop for Backing {
    fn drop(&mut self) {
        crate::recycle::give(std::mem::replace(&mut self.0, AlignedVec::new()));
    }
}

impl ObjectBuffer {
    /// Wraps `v` without copying its bytes (an rkyv serializer's output).
    ///
    /// An empty `v` is freed (or recycled) and the buffer holds no
    /// allocation: a no-op task's `()` result used to cost a `malloc` on
    /// the thread that ran it and a `free` on the thread that dropped the
    /// result, where the two contended for glibc's arena lock (embedded W1
    /// profile).
    pub fn from_aligned(v: AlignedVec<BUFFER_ALIGNMENT>) -> Self {
        if v.is_empty() {
            crate::recycle::give(v);
            return Self(None);
        }
        Self(Some(Arc::new(Backing(v))))
    }

    /// Copies `bytes` into newly allocated, 16-aligned memory.
    pub fn copy_from_slice(bytes: &[u8]) -> Self {
        let mut v = aligned_with_capacity(bytes.len());
        v.extend_from_slice(bytes);
        Self::from_aligned(v)
    }

    /// The object's bytes; the slice starts at a 16-aligned address, even when
    /// empty.
    pub fn as_bytes(&self) -> &[u8] {
        match &self.0 {
            Some(backing) => backing.0.as_slice(),
            None => &EMPTY.0,
        }
    }

    /// Number of bytes in the object.
    pub fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |backing| backing.0.len())
    }

    /// Whether the object holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether `self` and `other` share the same memory (one is a clone of the
    /// other), as opposed to merely holding equal bytes.
    ///
    /// Two empty buffers hold no memory and count as sharing it.
    pub fn ptr_eq(&self, other: &ObjectBuffer) -> bool {
        match (&self.0, &other.0) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        }
    }
}

impl From<AlignedVec<BUFFER_ALIGNMENT>> for ObjectBuffer {
    fn from(v: AlignedVec<BUFFER_ALIGNMENT>) -> Self {
        Self::from_aligned(v)
    }
}

impl fmt::Debug for ObjectBuffer {
    /// Prints the length only: object bytes can be large and are rarely text.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ObjectBuffer")
            .field("len", &self.len())
            .finish()
    }
}

impl AsRef<[u8]> for ObjectBuffer {
    fn as_ref(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl Deref for ObjectBuffer {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        self.as_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_aligned(bytes: &[u8]) -> bool {
        (bytes.as_ptr() as usize) & (BUFFER_ALIGNMENT - 1) == 0
    }

    #[test]
    fn copy_from_slice_is_16_aligned_for_every_length() {
        for len in 0..100 {
            let data: Vec<u8> = (0..len).map(|i| i as u8).collect();
            // Copy from an odd offset so the source itself is misaligned.
            let mut padded = vec![0u8; 1];
            padded.extend_from_slice(&data);
            let buf = ObjectBuffer::copy_from_slice(&padded[1..]);
            assert!(is_aligned(buf.as_bytes()), "len {len}");
            assert_eq!(buf.as_bytes(), &data[..]);
            assert_eq!(buf.len(), len);
        }
    }

    #[test]
    fn buffers_sized_ahead_hold_every_byte_written_below_and_above_the_huge_page_threshold() {
        for len in [
            0,
            1,
            4095,
            HUGE_PAGE_THRESHOLD - 1,
            HUGE_PAGE_THRESHOLD + 4097,
        ] {
            let mut v = aligned_with_capacity(len);
            assert!(v.is_empty() && v.capacity() >= len, "len {len}");
            let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            let before = v.as_ptr();
            v.extend_from_slice(&data);
            assert_eq!(v.as_ptr(), before, "len {len}: no reallocation");
            let buf = ObjectBuffer::from_aligned(v);
            assert!(is_aligned(buf.as_bytes()), "len {len}");
            assert!(buf.as_bytes() == &data[..], "len {len}");
        }
    }

    #[test]
    fn an_encode_buffer_keeps_every_byte_and_grows_past_the_threshold_once_for_one_large_write() {
        use rkyv::ser::Writer;
        let mut w = EncodeBuffer::new();
        Writer::<rkyv::rancor::Error>::write(&mut w, b"head").unwrap();
        let big: Vec<u8> = (0..HUGE_PAGE_THRESHOLD * 3 / 2)
            .map(|i| (i % 241) as u8)
            .collect();
        Writer::<rkyv::rancor::Error>::write(&mut w, &big).unwrap();
        let cap = w.capacity();
        assert!(
            cap >= 4 + big.len() && cap.is_multiple_of(HUGE_PAGE),
            "capacity {cap}"
        );
        // The small root rkyv writes last fits in the spare eighth.
        Writer::<rkyv::rancor::Error>::write(&mut w, &[9u8; 64]).unwrap();
        assert_eq!(
            w.capacity(),
            cap,
            "a small write after a large one moved the buffer"
        );
        assert_eq!(w.len(), 4 + big.len() + 64);
        let buf = w.into_buffer();
        assert!(is_aligned(buf.as_bytes()));
        assert_eq!(&buf.as_bytes()[..4], b"head");
        assert!(buf.as_bytes()[4..4 + big.len()] == big[..]);
        assert!(buf.as_bytes()[4 + big.len()..].iter().all(|&b| b == 9));
    }

    #[test]
    fn a_value_past_the_limit_is_an_error_not_a_panic() {
        let value: Vec<u8> = vec![7; 1000];
        let err = rkyv::api::high::to_bytes_in::<_, rkyv::rancor::Error>(
            &value,
            EncodeBuffer::with_limit(512),
        )
        .err()
        .expect("over the limit");
        assert!(
            err.to_string().contains("over the limit of 512 bytes"),
            "{err}"
        );
        // At the limit it still encodes.
        let w = rkyv::api::high::to_bytes_in::<_, rkyv::rancor::Error>(
            &value,
            EncodeBuffer::with_limit(4096),
        )
        .expect("within the limit");
        assert!(w.len() <= 4096);
    }

    #[test]
    fn small_values_encode_into_an_ordinary_buffer_and_survive_rkyv() {
        let value: Vec<u64> = (0..1000).collect();
        let w = rkyv::api::high::to_bytes_in::<_, rkyv::rancor::Error>(&value, EncodeBuffer::new())
            .unwrap();
        assert!(w.capacity() < HUGE_PAGE_THRESHOLD);
        let buf = w.into_buffer();
        let back = rkyv::from_bytes::<Vec<u64>, rkyv::rancor::Error>(buf.as_bytes()).unwrap();
        assert_eq!(back, value);
    }

    #[test]
    fn empty_buffers_are_16_aligned() {
        let from_slice = ObjectBuffer::copy_from_slice(&[]);
        let from_new = ObjectBuffer::from_aligned(AlignedVec::new());
        let from_cap = ObjectBuffer::from_aligned(AlignedVec::with_capacity(64));
        for buf in [from_slice, from_new, from_cap] {
            assert!(buf.is_empty());
            assert_eq!(buf.len(), 0);
            assert!(is_aligned(buf.as_bytes()));
            assert!(is_aligned(&buf));
        }
    }

    #[test]
    fn from_aligned_keeps_the_allocation_without_copying() {
        let mut v = AlignedVec::<BUFFER_ALIGNMENT>::new();
        v.extend_from_slice(b"hello object");
        let before = v.as_ptr();
        let buf = ObjectBuffer::from_aligned(v);
        assert_eq!(buf.as_bytes().as_ptr(), before);
        assert!(is_aligned(buf.as_bytes()));
        assert_eq!(&*buf, b"hello object");
    }

    #[test]
    fn rkyv_archive_is_readable_in_place() {
        let id = ray_proto::ObjectId::new(ray_proto::WorkerId(4), 11);
        let bytes = rkyv::to_bytes::<rkyv::rancor::Error>(&id).expect("serialize");
        let buf = ObjectBuffer::from_aligned(bytes);
        let back: ray_proto::ObjectId =
            rkyv::from_bytes::<_, rkyv::rancor::Error>(&buf).expect("deserialize");
        assert_eq!(back, id);
    }

    #[test]
    fn clones_share_memory_and_equal_copies_do_not() {
        let a = ObjectBuffer::copy_from_slice(b"abc");
        let b = a.clone();
        let c = ObjectBuffer::copy_from_slice(b"abc");
        assert!(a.ptr_eq(&b));
        assert!(!a.ptr_eq(&c));
        assert_eq!(a.as_ref(), c.as_ref());
    }

    #[test]
    fn debug_prints_length_not_bytes() {
        let buf = ObjectBuffer::copy_from_slice(&[7u8; 300]);
        assert_eq!(format!("{buf:?}"), "ObjectBuffer { len: 300 }");
    }
}
