//! Global Control Store of ray-rs: node, job and actor tables, KV, pub/sub.
