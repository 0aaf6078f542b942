//! [`StoreError`]: what can go wrong when storing an object.

use ray_proto::ObjectId;

/// Why the object store refused an object.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum StoreError {
    /// The object does not fit in the space left now; it would fit once other
    /// objects are deleted (or spilled).
    #[error(
        "object store full: cannot fit {id} ({requested} bytes); {used} of {capacity} bytes used"
    )]
    Full {
        /// The object that did not fit.
        id: ObjectId,
        /// Its size in bytes.
        requested: u64,
        /// Bytes in use when it was refused.
        used: u64,
        /// The store's capacity in bytes.
        capacity: u64,
    },
    /// The object is larger than the store's whole capacity and can never fit.
    #[error("object {id} is too large for the object store: {size} bytes exceed the capacity of {capacity} bytes")]
    TooLarge {
        /// The object that can never fit.
        id: ObjectId,
        /// Its size in bytes.
        size: u64,
        /// The store's capacity in bytes.
        capacity: u64,
    },
    /// An object with this id is already stored; objects are immutable, so
    /// it is never overwritten.
    #[error("object {id} already exists in the object store (objects are immutable)")]
    AlreadyExists {
        /// The id that is already present.
        id: ObjectId,
    },
}

impl StoreError {
    /// The object the error is about.
    pub fn object_id(&self) -> ObjectId {
        match self {
            StoreError::Full { id, .. }
            | StoreError::TooLarge { id, .. }
            | StoreError::AlreadyExists { id } => *id,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ray_proto::WorkerId;

    #[test]
    fn full_message_names_object_and_sizes() {
        let err = StoreError::Full {
            id: ObjectId::new(WorkerId(1), 2),
            requested: 10,
            used: 95,
            capacity: 100,
        };
        let id = ObjectId::new(WorkerId(1), 2);
        assert_eq!(
            err.to_string(),
            format!("object store full: cannot fit {id} (10 bytes); 95 of 100 bytes used")
        );
        assert_eq!(err.object_id(), id);
    }
}
