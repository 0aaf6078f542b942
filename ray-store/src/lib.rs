//! Per-node object store of ray-rs: immutable aligned buffers, capacity, pinning.
