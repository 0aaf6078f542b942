//! The cluster measurements beyond W1–W7 (issue 4), shared by the workload
//! harness (`--mode cluster`) and the cluster workload tests: an object
//! moved between two nodes, and actors spread over the nodes.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use ray_core::prelude::*;
use ray_core::{ArchivedRef, NodeId};

/// The object moved between two nodes.
pub const TRANSFER_BYTES: usize = 100 << 20;
/// Actors created across the nodes with `.spread()`.
pub const SPREAD_ACTORS: usize = 1_000;
/// Spread probe tasks per round used to find the nodes of a cluster.
const PROBES: usize = 16;
/// Rounds of probes before giving up on reaching more nodes.
const PROBE_ROUNDS: usize = 5;
/// How long a probe holds its lease: spread places leases, and an idle
/// lease takes the next task, so instant probes all land on one node.
const PROBE_HOLD: Duration = Duration::from_millis(20);

/// The node the task runs on, after holding its lease for [`PROBE_HOLD`].
#[remote]
pub fn node_of_task() -> u64 {
    std::thread::sleep(PROBE_HOLD);
    Ray::current()
        .expect("a task runs inside the runtime")
        .node_id()
        .0
}

/// Sums the bytes of `data` where they are stored: the far side of a
/// transfer reads every byte without copying them again.
#[remote]
pub fn byte_sum(data: ArchivedRef<Vec<u8>>) -> u64 {
    sum_bytes(&data)
}

/// The sum of `bytes`, each as a number: what [`byte_sum`] returns.
pub fn sum_bytes(bytes: &[u8]) -> u64 {
    bytes.iter().map(|&b| u64::from(b)).sum()
}

/// An actor that says where it lives.
#[remote]
pub struct Spot;

#[remote]
impl Spot {
    fn new() -> Self {
        Spot
    }

    fn node(&self) -> u64 {
        Ray::current()
            .expect("an actor runs inside the runtime")
            .node_id()
            .0
    }
}

/// The nodes that spread probe tasks reached, in rounds until `want`
/// nodes answered or the rounds ran out. This also starts the job's worker
/// process on each node reached.
pub async fn nodes_reached(ray: &Ray, want: usize) -> ray_core::Result<BTreeSet<u64>> {
    let mut nodes = BTreeSet::new();
    for _ in 0..PROBE_ROUNDS {
        let refs = (0..PROBES)
            .map(|_| node_of_task::options().spread().remote(ray))
            .collect::<ray_core::Result<Vec<_>>>()?;
        nodes.extend(ray.get_all(&refs).await?);
        if nodes.len() >= want {
            break;
        }
    }
    Ok(nodes)
}

/// A node other than the driver's (the highest id: nodes are numbered in
/// start order), or `None` when spread probes reached no other.
pub async fn other_node(ray: &Ray) -> ray_core::Result<Option<NodeId>> {
    let mine = ray.node_id().0;
    Ok(nodes_reached(ray, 2)
        .await?
        .into_iter()
        .filter(|&n| n != mine)
        .max()
        .map(NodeId))
}

/// Runs [`byte_sum`] of `data` on `node` (hard affinity) and returns it:
/// the bytes travel from their owner to that node first.
pub async fn sum_on(ray: &Ray, data: &ObjectRef<Vec<u8>>, node: NodeId) -> ray_core::Result<u64> {
    byte_sum::options()
        .node_affinity(node, false)
        .remote(ray, data)?
        .get()
        .await
}

/// Creates `n` [`Spot`] actors with `.spread()`, calls each once and waits
/// for every answer; returns the actors, still alive, and how many
/// answered from each node.
pub async fn spread_actors(
    ray: &Ray,
    n: usize,
) -> ray_core::Result<(Vec<ActorHandle<Spot>>, BTreeMap<u64, usize>)> {
    let actors = (0..n)
        .map(|_| Spot::options().spread().remote(ray))
        .collect::<ray_core::Result<Vec<_>>>()?;
    let per_node = spots_per_node(ray, &actors).await?;
    Ok((actors, per_node))
}

/// Calls every one of `actors` once (so each is constructed) and counts how
/// many answered from each node.
pub async fn spots_per_node(
    ray: &Ray,
    actors: &[ActorHandle<Spot>],
) -> ray_core::Result<BTreeMap<u64, usize>> {
    let calls = actors
        .iter()
        .map(|a| a.node())
        .collect::<ray_core::Result<Vec<_>>>()?;
    let mut per_node = BTreeMap::new();
    for node in ray.get_all(&calls).await? {
        *per_node.entry(node).or_insert(0) += 1;
    }
    Ok(per_node)
}
