//! The capacity shapes of the workload harness (`examples/workloads/`):
//! a deep queue of tasks that cannot start yet (`queue`), idle actors
//! whose memory is measured (`memory`), and W1's tasks saying where they
//! ran when the cluster has more than one node (`scale`, `--nodes`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{ensure, Context};
use ray_core::prelude::*;

use super::cluster::{spots_per_node, Spot};

/// `queue`: tasks submitted while they cannot start.
pub const QUEUE_TASKS: usize = 1_000_000;
/// `queue`: submits timed together; the first and the last block are
/// compared.
pub const QUEUE_BLOCK: usize = 100_000;
/// `memory`: idle actors created in embedded mode (all in this process).
pub const EMBEDDED_ACTORS: usize = 10_000;
/// `memory`: idle actors created in cluster mode (in the worker processes).
pub const CLUSTER_ACTORS: usize = 1_000;
/// `memory`: the goal of the issue, bytes per idle in-process actor.
pub const ACTOR_GOAL_BYTES: f64 = 10.0 * 1024.0;
/// `scale`: the cluster sizes W1 runs on.
pub const SCALE_NODES: [usize; 3] = [1, 2, 4];
/// How often the gate task looks for its file.
const GATE_POLL: Duration = Duration::from_millis(1);

/// `queue`: the task every queued task waits for. It blocks until the file
/// at `path` exists (the driver creates it to release the queue; the local
/// cluster's processes share this machine's filesystem), then returns 1.
#[remote]
pub fn gate(path: String) -> u8 {
    while !Path::new(&path).exists() {
        std::thread::sleep(GATE_POLL);
    }
    1
}

/// `queue`: the queued no-op; it takes the gate's result, so it cannot
/// start before the gate returns.
#[remote]
pub fn after_gate(_gate: u8) {}

/// W1's no-op task, except that it returns the node it ran on: used on
/// an untimed batch to see how W1's tasks spread over the nodes.
#[remote]
pub fn noop_where() -> u64 {
    Ray::current()
        .expect("a task runs inside the runtime")
        .node_id()
        .0
}

/// Submits `n` [`noop_where`] tasks the way W1 submits its no-ops (all,
/// then get all); returns how many ran on each node.
pub async fn tasks_per_node(ray: &Ray, n: usize) -> ray_core::Result<BTreeMap<u64, usize>> {
    let refs = (0..n)
        .map(|_| noop_where::remote(ray))
        .collect::<ray_core::Result<Vec<_>>>()?;
    let mut per_node = BTreeMap::new();
    for node in ray.get_all(&refs).await? {
        *per_node.entry(node).or_insert(0) += 1;
    }
    Ok(per_node)
}

/// `memory`: creates `n` [`Spot`] (stateless) actors with default options, calls each
/// once (so every one is constructed) and waits for every answer; returns
/// the actors, alive and idle, and how many live on each node.
pub async fn idle_actors(
    ray: &Ray,
    n: usize,
) -> ray_core::Result<(Vec<ActorHandle<Spot>>, BTreeMap<u64, usize>)> {
    let actors = (0..n)
        .map(|_| Spot::remote(ray))
        .collect::<ray_core::Result<Vec<_>>>()?;
    let per_node = spots_per_node(ray, &actors).await?;
    Ok((actors, per_node))
}

/// The file that releases a [`gate`] task once created; removed on drop.
pub struct GateFile {
    path: PathBuf,
}

impl GateFile {
    /// A gate file path unique to this process and call, not yet created.
    ///
    /// # Errors
    ///
    /// When a file is already there and cannot be removed.
    pub fn new() -> anyhow::Result<GateFile> {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let path = std::env::temp_dir().join(format!(
            "rayrs-queue-gate-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        if path.exists() {
            std::fs::remove_file(&path).with_context(|| format!("remove {}", path.display()))?;
        }
        Ok(GateFile { path })
    }

    /// The path a [`gate`] task waits for.
    pub fn path(&self) -> String {
        self.path.to_string_lossy().into_owned()
    }

    /// Creates the file: the gate task returns within [`GATE_POLL`].
    ///
    /// # Errors
    ///
    /// When it cannot be written.
    pub fn open(&self) -> anyhow::Result<()> {
        std::fs::write(&self.path, b"open")
            .with_context(|| format!("write {}", self.path.display()))?;
        ensure!(self.path.exists(), "{} vanished", self.path.display());
        Ok(())
    }
}

impl Drop for GateFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}
