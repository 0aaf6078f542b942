//! W6 (WORKLOADS.md): tasks that each take one large `ObjectRef` argument
//! and return its length, shared by the workload harness and the cluster
//! workload tests.

use ray_core::prelude::*;

/// W6: tasks, each taking the one shared object.
pub const W6_TASKS: usize = 200;
/// W6: size of the shared object.
pub const W6_BYTES: usize = 10 << 20;

/// W6: the task that takes the object as a zero-copy view, the counterpart
/// of Ray handing a task a read-only numpy array.
#[remote]
pub fn byte_len_view(data: ray_core::ArchivedRef<Vec<u8>>) -> u64 {
    data.len() as u64
}

/// W6 variant: the same task deserializing its argument (one copy).
#[remote]
pub fn byte_len(data: Vec<u8>) -> u64 {
    data.len() as u64
}

/// How a W6 task receives its argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArgAccess {
    /// As an `ArchivedRef<Vec<u8>>`: the task reads the stored bytes.
    View,
    /// As a `Vec<u8>`: the task deserializes a copy.
    Deserialized,
}

/// W6, one batch: submits `n` tasks that each take `data`, then gets them
/// all; returns the lengths the tasks saw.
pub async fn batch(
    ray: &Ray,
    data: &ObjectRef<Vec<u8>>,
    n: usize,
    access: ArgAccess,
) -> ray_core::Result<Vec<u64>> {
    let refs = (0..n)
        .map(|_| match access {
            ArgAccess::View => byte_len_view::remote(ray, data),
            ArgAccess::Deserialized => byte_len::remote(ray, data),
        })
        .collect::<ray_core::Result<Vec<_>>>()?;
    ray.get_all(&refs).await
}
