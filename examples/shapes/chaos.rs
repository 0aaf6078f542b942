//! The chaos workload of issue 19, shaped after Ray's nightly chaos tests
//! (`release/nightly_tests/chaos_test` in Ray's repository), run while a
//! killer `kill -9`s a random non-head node every few seconds and starts a
//! fresh one:
//!
//! - **tasks**: parent tasks, each submitting child tasks and summing their
//!   results, every one with `max_retries(-1)`; the grand total is checked.
//! - **actors**: reporter actors with `max_restarts(-1)` and
//!   `max_task_retries(-1)`, spread over the nodes, report sequence numbers
//!   to one database actor pinned to the head (never killed); every
//!   (reporter, number) pair must arrive (more than once is allowed: calls
//!   are at-least-once).
//! - **objects**: tasks make objects too large to travel with their result
//!   (kept by their worker until the driver, their owner, takes them), and
//!   other tasks borrow them, passed nested in a list, and check their
//!   bytes; all with `max_retries(-1)`. A value lost with its worker before
//!   the driver took it is made again.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use ray_core::prelude::*;
use ray_core::{Cluster, NodeId};

/// How big one chaos run is.
#[derive(Clone, Copy, Debug)]
pub struct ChaosSize {
    /// Parent tasks.
    pub parents: u64,
    /// Child tasks per parent.
    pub children: u64,
    /// How long a child task sleeps (holding its CPU).
    pub child_ms: u64,
    /// Reporter actors.
    pub reporters: u64,
    /// Sequence numbers each reporter reports.
    pub reports: u64,
    /// Objects made and borrowed.
    pub objects: u64,
    /// Bytes of each.
    pub object_bytes: u64,
}

/// What a run did and whether everything arrived.
#[derive(Debug)]
pub struct ChaosOutcome {
    /// The parents' total was the expected one.
    pub tasks_correct: bool,
    /// (reporter, number) pairs the database never got.
    pub missing_reports: u64,
    /// Every borrower saw its object's bytes.
    pub objects_correct: bool,
    /// Nodes killed (and replaced) during the run.
    pub kills: u32,
    /// How long the workload took.
    pub elapsed: Duration,
}

impl ChaosOutcome {
    /// Every result right and every report in.
    pub fn correct(&self) -> bool {
        self.tasks_correct && self.missing_reports == 0 && self.objects_correct
    }
}

/// A child: sleeps, then returns its number.
#[remote]
pub fn chaos_child(x: u64, ms: u64) -> u64 {
    std::thread::sleep(Duration::from_millis(ms));
    x
}

/// A parent: the sum of its children's numbers.
#[remote]
pub fn chaos_parent(i: u64, children: u64, ms: u64) -> Result<u64, String> {
    let ray = Ray::current().map_err(|e| e.to_string())?;
    let refs = (0..children)
        .map(|j| {
            chaos_child::options()
                .max_retries(-1)
                .remote(&ray, i * children + j, ms)
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    let mut sum = 0;
    for r in &refs {
        sum += r.get_blocking().map_err(|e| e.to_string())?;
    }
    Ok(sum)
}

/// Makes `bytes` bytes, each `seed + index` (mod 251).
#[remote]
pub fn chaos_make(seed: u64, bytes: u64) -> Vec<u8> {
    (0..bytes).map(|i| ((seed + i) % 251) as u8).collect()
}

/// Borrows the object nested in `refs` (made by `chaos_make(seed, _)`) and
/// checks its bytes.
#[remote]
pub fn chaos_borrow(refs: Vec<ObjectRef<Vec<u8>>>, seed: u64) -> Result<bool, String> {
    let mut ok = true;
    for r in &refs {
        let v = r.get_blocking().map_err(|e| e.to_string())?;
        ok &= v
            .iter()
            .enumerate()
            .all(|(i, &b)| b == ((seed + i as u64) % 251) as u8);
    }
    Ok(ok)
}

/// The database the reporters report to.
#[remote]
pub struct ChaosDb {
    seen: BTreeSet<(u64, u64)>,
}

#[remote]
impl ChaosDb {
    fn new() -> Self {
        ChaosDb {
            seen: BTreeSet::new(),
        }
    }
    fn record(&mut self, reporter: u64, seq: u64) {
        self.seen.insert((reporter, seq));
    }
    /// Pairs of `reporters` x `reports` not recorded.
    fn missing(&self, reporters: u64, reports: u64) -> u64 {
        let mut missing = 0;
        for r in 0..reporters {
            for s in 0..reports {
                if !self.seen.contains(&(r, s)) {
                    missing += 1;
                }
            }
        }
        missing
    }
}

/// A reporter: passes each number it is given on to the database.
#[remote]
pub struct Reporter {
    id: u64,
    db: ActorHandle<ChaosDb>,
}

#[remote]
impl Reporter {
    fn new(id: u64, db: ActorHandle<ChaosDb>) -> Self {
        Reporter { id, db }
    }
    fn report(&mut self, seq: u64) -> Result<(), String> {
        self.db
            .record(self.id, seq)
            .map_err(|e| e.to_string())?
            .get_blocking()
            .map_err(|e| e.to_string())
    }
}

/// Runs the workload on `ray` (a driver of `cluster`); with `kill_every`,
/// a random non-head node is killed and replaced that often until it ends.
///
/// # Errors
///
/// A submission refused, or a task or call that failed (with infinite
/// retries, none should).
pub async fn run(
    cluster: &mut Cluster,
    ray: &Ray,
    size: ChaosSize,
    kill_every: Option<Duration>,
) -> Result<ChaosOutcome, String> {
    let started = Instant::now();
    let work = tokio::spawn(workload(ray.clone(), size));
    let ((tasks_correct, missing_reports, objects_correct), kills) =
        with_killer(cluster, kill_every, work).await?;
    Ok(ChaosOutcome {
        tasks_correct,
        objects_correct,
        missing_reports,
        kills,
        elapsed: started.elapsed(),
    })
}

/// Waits for `work` while, with `kill_every`, a random non-head node of
/// `cluster` is killed (SIGKILL) and replaced that often; returns what
/// `work` returned and the number of kills.
///
/// # Errors
///
/// `work`'s error, or a replacement node that did not join.
pub async fn with_killer<T: Send + 'static>(
    cluster: &mut Cluster,
    kill_every: Option<Duration>,
    work: tokio::task::JoinHandle<Result<T, String>>,
) -> Result<(T, u32), String> {
    let mut kills = 0;
    let mut pick = 0x5eed_u64;
    if let Some(every) = kill_every {
        while !work.is_finished() {
            tokio::time::sleep(every).await;
            if work.is_finished() {
                break;
            }
            let live: Vec<usize> = cluster
                .pids()
                .iter()
                .enumerate()
                .skip(1)
                .filter(|(_, p)| p.is_some())
                .map(|(i, _)| i)
                .collect();
            if live.is_empty() {
                break;
            }
            pick = pick
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let victim = live[(pick >> 33) as usize % live.len()];
            cluster.kill_node(victim);
            kills += 1;
            cluster.add_node().await.map_err(|e| e.to_string())?;
        }
    }
    let out = work.await.map_err(|e| e.to_string())??;
    Ok((out, kills))
}

/// The tasks, the reports and the objects; returns whether the total was
/// right, how many reports are missing, and whether every borrower saw
/// its object right.
async fn workload(ray: Ray, size: ChaosSize) -> Result<(bool, u64, bool), String> {
    let e = |e: ray_core::Error| e.to_string();
    let parents = (0..size.parents)
        .map(|i| {
            chaos_parent::options()
                .max_retries(-1)
                .remote(&ray, i, size.children, size.child_ms)
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(e)?;
    let head: NodeId = ray.node_id();
    let db = ChaosDb::options()
        .node_affinity(head, false)
        .remote(&ray)
        .map_err(e)?;
    let reporters = (0..size.reporters)
        .map(|r| {
            Reporter::options()
                .max_restarts(-1)
                .max_task_retries(-1)
                .spread()
                .remote(&ray, r, db.clone())
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(e)?;
    let borrowers = (0..size.objects)
        .map(|i| {
            let made = chaos_make::options()
                .max_retries(-1)
                .remote(&ray, i, size.object_bytes)?;
            chaos_borrow::options()
                .max_retries(-1)
                .remote(&ray, vec![made], i)
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(e)?;
    let mut calls = Vec::new();
    for seq in 0..size.reports {
        for rep in &reporters {
            calls.push(rep.report(seq).map_err(e)?);
        }
    }
    let mut total = 0;
    for p in &parents {
        total += p.get().await.map_err(e)?;
    }
    let n = size.parents * size.children;
    let tasks_correct = total == n * n.saturating_sub(1) / 2;
    for c in &calls {
        c.get().await.map_err(e)?;
    }
    let missing = db
        .missing(size.reporters, size.reports)
        .map_err(e)?
        .get()
        .await
        .map_err(e)?;
    let mut objects_correct = true;
    for b in &borrowers {
        objects_correct &= b.get().await.map_err(e)?;
    }
    Ok((tasks_correct, missing, objects_correct))
}
