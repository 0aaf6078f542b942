//! Per-node object store of ray-rs.
//!
//! ray-store owns the bytes of objects on one node: immutable, 16-byte-aligned
//! [`ObjectBuffer`]s holding rkyv archives, keyed by [`ray_proto::ObjectId`];
//! the node's capacity limit and its accounting; pinning (a buffer handed out
//! keeps its bytes alive after a delete); puts that wait for space; and the
//! memory of large buffers, recycled for the next large object
//! ([`recycle`]). Later
//! it also owns LRU spilling to local disk with restore on demand, and the
//! chunked transfer of objects between nodes.
//!
//! It must not know about tasks, actors, scheduling, ownership or reference
//! counts (those live in ray-core and ray-sched), nor about the network: it
//! depends only on ray-proto for ids. Callers decide *when* an object is
//! deleted; the store only keeps the bytes and the accounting exact.
//!
//! ```
//! use ray_proto::{ObjectId, WorkerId};
//! use ray_store::{ObjectBuffer, ObjectStore, StoreConfig};
//!
//! let store = ObjectStore::new(StoreConfig { capacity_bytes: 1024 });
//! let id = ObjectId::new(WorkerId(1), 2);
//! let bytes = rkyv::to_bytes::<rkyv::rancor::Error>(&42u64).expect("serialize");
//! store.try_put(id, ObjectBuffer::from_aligned(bytes)).expect("fits");
//!
//! let buf = store.get(id).expect("stored");
//! let n = rkyv::access::<rkyv::Archived<u64>, rkyv::rancor::Error>(&buf).expect("valid");
//! assert_eq!(*n, 42);
//! ```

pub mod buffer;
pub mod error;
pub mod recycle;
pub mod store;

pub use buffer::{
    aligned_with_capacity, EncodeBuffer, ObjectBuffer, TooLarge, BUFFER_ALIGNMENT,
    HUGE_PAGE_THRESHOLD, MAX_ENCODED_BYTES,
};
pub use error::StoreError;
pub use recycle::{release_recycled, set_recycle_idle, set_recycle_limit};
pub use store::{ObjectStore, StoreConfig, StoreStats};
