//! The shapes of workloads W1–W5 (WORKLOADS.md), shared by the workload
//! harness (`examples/workloads/`), the criterion benches and the
//! cluster workload tests (`tests/cluster_workloads.rs`), so all of them
//! run exactly the same thing.

use ray_core::prelude::*;
use ray_core::ArchivedRef;

/// W1: no-op tasks submitted without waiting, then all gotten.
pub const W1_TASKS: usize = 20_000;
/// W2: sequential `get(noop::remote())` round trips.
pub const W2_ROUND_TRIPS: usize = 2_000;
/// W3: actor calls submitted without waiting, then all gotten.
pub const W3_CALLS: usize = 20_000;
/// W3: sequential actor call round trips.
pub const W3_ROUND_TRIPS: usize = 2_000;
/// W5: the actor counts, in order.
pub const W5_ACTORS: [usize; 2] = [50, 1_000];
/// W4: the byte-buffer sizes put and gotten.
pub const W4_SIZES: [(&str, usize); 3] =
    [("1KiB", 1 << 10), ("1MiB", 1 << 20), ("100MiB", 100 << 20)];

/// The no-op task of W1 and W2.
#[remote]
pub fn noop() {}

/// The actor with a no-op method of W3 (and W5).
#[remote]
pub struct NoopActor;

#[remote]
impl NoopActor {
    fn new() -> Self {
        NoopActor
    }

    fn noop(&self) {}
}

/// W1, one batch: submits `n` no-op tasks, then gets them all; returns
/// how many results came back.
pub async fn task_batch(ray: &Ray, n: usize) -> ray_core::Result<usize> {
    let refs = (0..n)
        .map(|_| noop::remote(ray))
        .collect::<ray_core::Result<Vec<_>>>()?;
    Ok(ray.get_all(&refs).await?.len())
}

/// W2, one round trip: submits a no-op task and waits for it.
pub async fn task_round_trip(ray: &Ray) -> ray_core::Result<()> {
    noop::remote(ray)?.get().await
}

/// W3, one batch: submits `n` calls to `actor`, then gets them all;
/// returns how many results came back.
pub async fn call_batch(
    ray: &Ray,
    actor: &ActorHandle<NoopActor>,
    n: usize,
) -> ray_core::Result<usize> {
    let refs = (0..n)
        .map(|_| actor.noop())
        .collect::<ray_core::Result<Vec<_>>>()?;
    Ok(ray.get_all(&refs).await?.len())
}

/// W3, one round trip: calls `actor` and waits for the result.
pub async fn call_round_trip(actor: &ActorHandle<NoopActor>) -> ray_core::Result<()> {
    actor.noop()?.get().await
}

/// A byte buffer of `len` bytes with a non-trivial pattern.
pub fn payload(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8).collect()
}

/// W4: puts `data`, gets a deserialized copy back; returns its length.
pub async fn put_get(ray: &Ray, data: Vec<u8>) -> ray_core::Result<usize> {
    let r = ray.put(data).await?;
    Ok(r.get().await?.len())
}

/// W4: puts `data`, gets a zero-copy view back; returns its length.
pub async fn put_get_archived(ray: &Ray, data: Vec<u8>) -> ray_core::Result<usize> {
    let r = ray.put(data).await?;
    Ok(r.get_archived().await?.len())
}

/// W4: a zero-copy view of an object that already exists.
pub async fn get_archived(r: &ObjectRef<Vec<u8>>) -> ray_core::Result<ArchivedRef<Vec<u8>>> {
    r.get_archived().await
}

/// W5, one step: creates `n` [`NoopActor`]s, calls each once and waits for
/// every answer; returns the actors, still alive.
pub async fn create_and_call(ray: &Ray, n: usize) -> ray_core::Result<Vec<ActorHandle<NoopActor>>> {
    let actors = (0..n)
        .map(|_| NoopActor::remote(ray))
        .collect::<ray_core::Result<Vec<_>>>()?;
    let calls = actors
        .iter()
        .map(|a| a.noop())
        .collect::<ray_core::Result<Vec<_>>>()?;
    ray.get_all(&calls).await?;
    Ok(actors)
}
