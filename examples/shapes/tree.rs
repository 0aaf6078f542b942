//! W7, the worker tree (WORKLOADS.md), shared by `examples/worker_tree.rs`
//! and the workload harness.
//!
//! The root actor sits at depth 0 and leaves at depth [`DEPTH`]. Every
//! actor above the leaves creates 1 or 2 children, chosen by a seeded RNG,
//! so a seed fixes the tree. `process()` submits [`CALLS_PER_CHILD`] calls
//! to each child's `process()` and waits for all of them; a leaf sleeps
//! [`LEAF_SLEEP`] per call. A parent blocked in `get` hands its CPU-pool
//! slot to its children, so sibling subtrees run side by side.

use std::time::{Duration, Instant};

use ray_core::prelude::*;

#[path = "splitmix.rs"]
mod splitmix;

use splitmix::SplitMix64;

/// Depth of the leaves; the root is at depth 0.
pub const DEPTH: u32 = 3;
/// Calls each `process()` makes to each child's `process()`.
pub const CALLS_PER_CHILD: usize = 10;
/// What a leaf's `process()` spends per call.
pub const LEAF_SLEEP: Duration = Duration::from_millis(5);
/// The seed used when none is given.
pub const DEFAULT_SEED: u64 = 42;

/// One actor of the tree.
#[remote]
pub struct TreeNode {
    children: Vec<ActorHandle<TreeNode>>,
}

#[remote]
impl TreeNode {
    /// The actor at `depth` of the tree for `seed`; `restart`: every actor
    /// of the tree restarts when its process dies, and calls lost with it
    /// are sent again (`max_restarts(-1)`, `max_task_retries(-1)`: the
    /// chaos run's W7; the shape is the same).
    fn new(depth: u32, seed: u64, restart: bool) -> Self {
        let mut children = Vec::new();
        if depth < DEPTH {
            let mut rng = SplitMix64::new(seed);
            let n = 1 + rng.next_u64() % 2;
            let ray = Ray::current().expect("a constructor runs inside the runtime");
            for _ in 0..n {
                let child = create(&ray, depth + 1, rng.next_u64(), restart)
                    .expect("the runtime accepts a zero-CPU actor while it runs");
                children.push(child);
            }
        }
        TreeNode { children }
    }

    /// Runs this subtree once; returns the `process()` calls it made,
    /// this one included.
    fn process(&mut self) -> Result<u64, String> {
        if self.children.is_empty() {
            std::thread::sleep(LEAF_SLEEP);
            return Ok(1);
        }
        let mut refs = Vec::with_capacity(self.children.len() * CALLS_PER_CHILD);
        for child in &self.children {
            for _ in 0..CALLS_PER_CHILD {
                refs.push(child.process().map_err(|e| e.to_string())?);
            }
        }
        let mut calls = 1;
        for r in &refs {
            calls += r.get_blocking().map_err(|e| e.to_string())?;
        }
        Ok(calls)
    }

    /// The number of actors in this subtree, this one included.
    fn actors(&self) -> Result<u64, String> {
        let refs = self
            .children
            .iter()
            .map(|c| c.actors())
            .collect::<ray_core::Result<Vec<_>>>()
            .map_err(|e| e.to_string())?;
        let mut n = 1;
        for r in &refs {
            n += r.get_blocking().map_err(|e| e.to_string())?;
        }
        Ok(n)
    }
}

/// What one run of the tree did.
#[derive(Clone, Copy, Debug)]
pub struct TreeRun {
    /// Actors in the tree, the root included.
    pub actors: u64,
    /// `process()` calls made, the driver's call to the root included.
    pub calls: u64,
    /// From creating the root to the root's `process()` result.
    pub seconds: f64,
}

/// Creates a tree actor: restarting, with its calls re-sent, or not.
fn create(
    ray: &Ray,
    depth: u32,
    seed: u64,
    restart: bool,
) -> ray_core::Result<ActorHandle<TreeNode>> {
    match restart {
        true => TreeNode::options()
            .max_restarts(-1)
            .max_task_retries(-1)
            .remote(ray, depth, seed, restart),
        false => TreeNode::remote(ray, depth, seed, restart),
    }
}

/// Builds the tree for `seed`, calls `process()` on the root once and
/// counts what happened.
pub async fn run(ray: &Ray, seed: u64) -> ray_core::Result<TreeRun> {
    run_with(ray, seed, false).await
}

/// [`run`], every actor restarting when its process dies (`restart`).
/// Calls are then at least once: a re-sent call may count twice.
pub async fn run_with(ray: &Ray, seed: u64, restart: bool) -> ray_core::Result<TreeRun> {
    let start = Instant::now();
    let root = create(ray, 0, seed, restart)?;
    let calls = root.process()?.get().await?;
    let seconds = start.elapsed().as_secs_f64();
    let actors = root.actors()?.get().await?;
    Ok(TreeRun {
        actors,
        calls,
        seconds,
    })
}
