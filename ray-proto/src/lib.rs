//! Ids shared by every ray-rs crate.
//!
//! This crate owns the identity types of the system: jobs, nodes, workers,
//! tasks, objects, actors and remote functions. They are small `Copy`
//! newtypes with an rkyv archive form so they can travel on the wire.
//!
//! It also holds the control messages processes exchange ([`wire`]): their
//! types and archive form, not how they travel.
//!
//! It must not depend on any runtime (no tokio, no quinn) and must not know
//! about scheduling, storage or the user API: everything else depends on it.

use std::fmt;

use rkyv::{Archive, Deserialize, Serialize};

pub mod wire;

macro_rules! id_newtype {
    ($(#[$doc:meta])* $name:ident($inner:ty), $prefix:literal) => {
        $(#[$doc])*
        #[derive(
            Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Archive, Serialize, Deserialize,
        )]
        #[rkyv(derive(PartialEq, Eq, Hash, Debug))]
        pub struct $name(pub $inner);

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($prefix, "{:x}"), self.0)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(self, f)
            }
        }
    };
}

id_newtype!(
    /// A job: one driver program connected to the cluster.
    JobId(u32),
    "job-"
);
id_newtype!(
    /// A node: one host's scheduler, object store and workers.
    NodeId(u64),
    "node-"
);
id_newtype!(
    /// A worker: a process (or, embedded, the driver itself) that owns objects.
    WorkerId(u64),
    "worker-"
);
id_newtype!(
    /// A remote function or actor method, stable across processes running the
    /// same binary: a hash of module path, name and signature.
    FunctionId(u64),
    "fn-"
);

/// Declares an id that is unique because its owner hands out the sequence
/// numbers: `(owner worker, sequence)`.
macro_rules! owned_id {
    ($(#[$doc:meta])* $name:ident, $prefix:literal) => {
        $(#[$doc])*
        #[derive(
            Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Archive, Serialize, Deserialize,
        )]
        #[rkyv(derive(PartialEq, Eq, Hash, Debug))]
        pub struct $name {
            /// The worker that created this id and owns what it names.
            pub owner: WorkerId,
            /// The owner's sequence number for it.
            pub seq: u64,
        }

        impl $name {
            /// The id `seq` of `owner`.
            pub const fn new(owner: WorkerId, seq: u64) -> Self {
                Self { owner, seq }
            }

            /// The id as one integer: owner in the high 64 bits, sequence in
            /// the low 64 (how insight records it, without formatting).
            pub const fn as_u128(self) -> u128 {
                ((self.owner.0 as u128) << 64) | self.seq as u128
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($prefix, "{:x}.{:x}"), self.owner.0, self.seq)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(self, f)
            }
        }
    };
}

owned_id!(
    /// A task (or actor call) submitted by its owner.
    TaskId,
    "task-"
);
owned_id!(
    /// An immutable object. A task's return object shares the task's numbers,
    /// because tasks and `put`s draw from one sequence per owner.
    ObjectId,
    "obj-"
);
owned_id!(
    /// An actor instance, owned by the worker that created it.
    ActorId,
    "actor-"
);
owned_id!(
    /// A placement group: a set of resource bundles reserved together.
    PlacementGroupId,
    "pg-"
);

impl TaskId {
    /// The id of the object holding this task's return value.
    pub const fn return_object(self) -> ObjectId {
        ObjectId::new(self.owner, self.seq)
    }
}

impl ObjectId {
    /// The task that produces this object, if it is a task return.
    pub const fn producing_task(self) -> TaskId {
        TaskId::new(self.owner, self.seq)
    }
}

/// Stable 64-bit FNV-1a hash, usable in constants.
///
/// Remote function ids are computed with it at compile time, so two processes
/// running the same binary agree on them.
pub const fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < bytes.len() {
        hash ^= bytes[i] as u64;
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        i += 1;
    }
    hash
}

/// `bytes` in lowercase hex (binary hashes in paths, variables and errors).
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_return_object_round_trips_to_task() {
        let t = TaskId::new(WorkerId(7), 42);
        assert_eq!(t.return_object().producing_task(), t);
        assert_eq!(format!("{}", t.return_object()), "obj-7.2a");
    }

    #[test]
    fn fnv_is_stable_and_distinguishes_inputs() {
        // Reference values of FNV-1a 64.
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_ne!(fnv1a64(b"m::f(u64)"), fnv1a64(b"m::f(u32)"));
    }

    #[test]
    fn ids_round_trip_through_rkyv() {
        let id = ObjectId::new(WorkerId(3), 9);
        let bytes = rkyv::to_bytes::<rkyv::rancor::Error>(&id).expect("serialize");
        let back: ObjectId =
            rkyv::from_bytes::<ObjectId, rkyv::rancor::Error>(&bytes).expect("deserialize");
        assert_eq!(back, id);
    }
}
