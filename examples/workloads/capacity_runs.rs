//! The capacity measurements, in both modes, each run in a fresh process:
//! `queue` (a million tasks queued behind a gate) and `memory` (the idle
//! processes, then idle actors).

use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use ray_core::prelude::*;
use ray_core::Cluster;
use serde_json::{json, Value};

use crate::measure::{self, per_second, Run};
use crate::{capacity, Session};

/// How long a process is left alone before its idle memory is read.
const IDLE_SETTLE: Duration = Duration::from_millis(500);

/// The child processes (workers) of every process in `parents`.
fn children_of(parents: &[u32]) -> anyhow::Result<Vec<u32>> {
    Ok(parents
        .iter()
        .map(|&p| measure::child_pids(p))
        .collect::<anyhow::Result<Vec<_>>>()?
        .concat())
}

/// VmRSS of every process in `pids`, summed; a process that is gone
/// counts as 0.
fn rss_sum(pids: &[u32]) -> u64 {
    pids.iter()
        .map(|&p| measure::vm_rss_bytes(p).unwrap_or(0))
        .sum()
}

/// The cluster's processes other than this driver: node daemons and
/// their worker processes.
fn cluster_processes(c: &Cluster) -> anyhow::Result<Vec<u32>> {
    let mut out = Vec::new();
    for pid in c.pids().into_iter().flatten() {
        out.push(pid);
        out.extend(measure::child_pids(pid)?);
    }
    Ok(out)
}

/// `queue`: [`capacity::QUEUE_TASKS`] no-op tasks submitted while the
/// gate task they all take is blocked, so every one is submitted and
/// waiting; then the gate opens and all are gotten.
pub(crate) async fn queue(session: &Session) -> anyhow::Result<Run> {
    let ray = &session.ray;
    let me = std::process::id();
    let others = match &session.cluster {
        Some(c) => cluster_processes(c)?,
        None => Vec::new(),
    };
    let gate_file = capacity::GateFile::new()?;
    let gate = capacity::gate::remote(ray, gate_file.path())?;
    let others_before = rss_sum(&others);
    let rss_before = measure::vm_rss_bytes(me)?;

    // The refs are part of what a caller holds for queued work: the
    // vector's pages count in the growth as they are filled.
    let mut refs = Vec::with_capacity(capacity::QUEUE_TASKS);
    let mut block_ns = Vec::new();
    for _ in 0..capacity::QUEUE_TASKS / capacity::QUEUE_BLOCK {
        let start = Instant::now();
        for _ in 0..capacity::QUEUE_BLOCK {
            refs.push(capacity::after_gate::remote(ray, &gate)?);
        }
        block_ns.push(start.elapsed().as_secs_f64() * 1e9 / capacity::QUEUE_BLOCK as f64);
    }
    let rss_queued = measure::vm_rss_bytes(me)?;
    let others_queued = rss_sum(&others);
    ensure!(
        !gate.is_ready() && !refs.iter().any(ObjectRef::is_ready),
        "the gate or a queued task finished before the gate was opened"
    );

    gate_file.open()?;
    let start = Instant::now();
    let done = ray.get_all(&refs).await?.len();
    let drain = start.elapsed();
    ensure!(
        done == capacity::QUEUE_TASKS,
        "{done} of {} results",
        capacity::QUEUE_TASKS
    );
    ensure!(gate.get().await? == 1, "the gate returned something else");
    drop(refs);

    let first = block_ns[0];
    let last = block_ns[block_ns.len() - 1];
    let grown = rss_queued.saturating_sub(rss_before);
    let mut run = Run::default();
    run.figure("submit_ns_first_100k", "ns/task", first);
    run.figure("submit_ns_last_100k", "ns/task", last);
    run.figure("submit_last_over_first", "ratio", last / first);
    run.figure(
        "bytes_per_queued_task",
        "bytes",
        grown as f64 / capacity::QUEUE_TASKS as f64,
    );
    run.figure("rss_before", "bytes", rss_before as f64);
    run.figure("rss_queued", "bytes", rss_queued as f64);
    run.figure("drain", "s", drain.as_secs_f64());
    run.figure(
        "drain_throughput",
        "tasks/s",
        per_second(capacity::QUEUE_TASKS, drain),
    );
    if session.cluster.is_some() {
        run.figure(
            "cluster_processes_rss_growth",
            "bytes",
            others_queued as f64 - others_before as f64,
        );
    }
    run.info
        .insert("tasks".into(), json!(capacity::QUEUE_TASKS));
    run.info
        .insert("block".into(), json!(capacity::QUEUE_BLOCK));
    let blocks: Vec<u64> = block_ns.iter().map(|&ns| ns.round() as u64).collect();
    run.info.insert("submit_ns_per_block".into(), json!(blocks));
    run.info.insert(
        "ref_bytes".into(),
        json!(std::mem::size_of::<ObjectRef<()>>()),
    );
    run.info.insert(
        "note".into(),
        json!(format!(
            "every task takes the result of a gate task that blocks (polling a file every ms) until the driver creates the file, so all {} are submitted and waiting for their argument{} when RSS is read; bytes_per_queued_task: growth of this driver's VmRSS from before the first submit to the last, divided by the tasks (includes the driver's Vec of ObjectRefs, ref_bytes each); drain: from opening the gate to the last result",
            capacity::QUEUE_TASKS,
            if session.cluster.is_some() {
                " in the driver (the owner holds a task until its arguments are ready; cluster_processes_rss_growth: node daemons and workers over the same interval)"
            } else {
                ""
            }
        )),
    );
    Ok(run)
}

/// `memory`: idle processes' VmRSS, then the growth per idle actor.
pub(crate) async fn memory(session: &Session) -> anyhow::Result<Run> {
    let ray = &session.ray;
    tokio::time::sleep(IDLE_SETTLE).await;
    let me = std::process::id();
    let driver_idle = measure::vm_rss_bytes(me)?;
    let mut run = Run::default();
    let Some(c) = &session.cluster else {
        let n = capacity::EMBEDDED_ACTORS;
        let (actors, per_node) = capacity::idle_actors(ray, n).await?;
        ensure!(
            per_node.values().sum::<usize>() == n,
            "{per_node:?} of {n} actors answered"
        );
        tokio::time::sleep(IDLE_SETTLE).await;
        let driver_after = measure::vm_rss_bytes(me)?;
        drop(actors);
        let per_actor = driver_after.saturating_sub(driver_idle) as f64 / n as f64;
        run.figure("bytes_per_actor", "bytes", per_actor);
        run.figure("driver_idle_rss", "bytes", driver_idle as f64);
        run.figure("driver_rss_with_actors", "bytes", driver_after as f64);
        run.info.insert("actors".into(), json!(n));
        run.info.insert(
            "goal_bytes_per_actor".into(),
            json!(capacity::ACTOR_GOAL_BYTES),
        );
        run.info.insert(
            "meets_goal".into(),
            json!(per_actor < capacity::ACTOR_GOAL_BYTES),
        );
        run.info.insert(
            "note".into(),
            json!("VmRSS of this process (driver and runtime: the actors live here) idle after init, then with the actors alive and idle (each created with no state and called once); bytes_per_actor: the growth divided by the actors; goal of the issue: under 10 KiB per idle in-process actor"),
        );
        return Ok(run);
    };

    let pids = c.pids();
    let head = pids[0].context("the head is running")?;
    let node = pids
        .get(1)
        .copied()
        .flatten()
        .context("memory needs a joined node: Cluster::local(2) or more")?;
    let head_workers = measure::child_pids(head)?;
    let node_workers = measure::child_pids(node)?;
    let daemons: Vec<u32> = pids.iter().flatten().copied().collect();
    let workers_before = children_of(&daemons)?;
    let head_idle = measure::vm_rss_bytes(head)?;
    let node_idle = measure::vm_rss_bytes(node)?;
    let head_worker_idle = rss_sum(&head_workers);
    let node_worker_idle = rss_sum(&node_workers);
    let daemons_idle = rss_sum(&daemons);
    let workers_idle = rss_sum(&workers_before);

    let n = capacity::CLUSTER_ACTORS;
    let (actors, per_node) = capacity::idle_actors(ray, n).await?;
    ensure!(
        per_node.values().sum::<usize>() == n,
        "{per_node:?} of {n} actors answered"
    );
    tokio::time::sleep(IDLE_SETTLE).await;
    let workers_after = children_of(&daemons)?;
    let driver_after = measure::vm_rss_bytes(me)?;
    let daemons_after = rss_sum(&daemons);
    let workers_grown = rss_sum(&workers_after) as f64 - workers_idle as f64;
    drop(actors);

    run.figure("bytes_per_actor", "bytes", workers_grown / n as f64);
    run.figure(
        "driver_bytes_per_actor",
        "bytes",
        (driver_after as f64 - driver_idle as f64) / n as f64,
    );
    run.figure(
        "daemons_bytes_per_actor",
        "bytes",
        (daemons_after as f64 - daemons_idle as f64) / n as f64,
    );
    run.figure("driver_idle_rss", "bytes", driver_idle as f64);
    run.figure("head_idle_rss", "bytes", head_idle as f64);
    run.figure("node_idle_rss", "bytes", node_idle as f64);
    if !head_workers.is_empty() {
        run.figure("head_worker_idle_rss", "bytes", head_worker_idle as f64);
    }
    if !node_workers.is_empty() {
        run.figure("worker_idle_rss", "bytes", node_worker_idle as f64);
    }
    let per_node: serde_json::Map<String, Value> = per_node
        .into_iter()
        .map(|(n, c)| (n.to_string(), json!(c)))
        .collect();
    run.info.insert("actors".into(), json!(n));
    run.info.insert("actors_per_node".into(), per_node.into());
    run.info.insert(
        "processes".into(),
        json!({
            "driver": me,
            "head": head,
            "node": node,
            "head_workers": head_workers,
            "node_workers": node_workers,
            "workers_before": workers_before.len(),
            "workers_after": workers_after.len(),
        }),
    );
    run.info.insert(
        "goal_bytes_per_actor".into(),
        json!(capacity::ACTOR_GOAL_BYTES),
    );
    run.info.insert(
        "meets_goal".into(),
        json!(workers_grown / (n as f64) < capacity::ACTOR_GOAL_BYTES),
    );
    run.info.insert(
        "note".into(),
        json!("VmRSS after the cluster is up, each node's worker process started and everything idle: this driver, the head (GCS and node daemon), a joined node daemon, the worker process of the head (head_worker_idle_rss) and of the joined node (worker_idle_rss); then actors with no state, default placement, each called once: they live in-process in the worker processes (actors_per_node), so bytes_per_actor is the growth of every worker process (including any started meanwhile: workers_before/after) divided by the actors; driver_ and daemons_bytes_per_actor: growth of the driver (handles) and of the node daemons. Goal of the issue: under 10 KiB per idle in-process actor"),
    );
    Ok(run)
}
