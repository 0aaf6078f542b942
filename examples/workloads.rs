//! The workload harness: W1–W7 of WORKLOADS.md, in exactly those shapes,
//! on the embedded runtime or across a real cluster, plus the cluster
//! measurements of issue 4 and the capacity measurements (queue depth,
//! memory, node scaling).
//!
//! `cargo run --release --example workloads -- --mode embedded|cluster [--cpus N] [--nodes N] [--timeout S] [ID ...]`
//!
//! - `embedded`: each workload on a fresh embedded runtime with N CPUs
//!   (default: the machine's cores).
//! - `cluster`: each workload on a fresh `Cluster::local(n)`: n node
//!   processes (the head and n - 1 joined nodes; n is `--nodes`, default 1),
//!   each offering N CPUs (default 2), with this process as the driver;
//!   tasks and actors run in the nodes' worker processes (one per node),
//!   over QUIC on loopback; those workers are started before run 1 (the
//!   time is under `info.worker_warm_up_s`). Tasks go to the driver's
//!   node (the head) and spill to the others when its CPUs are leased; W1
//!   reports under `info.tasks_per_node` where an untimed batch of the
//!   same shape ran. Also takes the extra ids `ready` (`Cluster::local(2)`,
//!   or `--nodes`, start-up), `transfer` (100 MiB from the driver to a
//!   task on another node), `spread` (1,000 actors spread over 2 nodes, or
//!   `--nodes`, one call each) and `scale` (W1 on 1, 2 and 4 nodes: one
//!   line each, `"workload": "scale"`, `"shape": "W1"`, with
//!   `info.throughput_vs_1_node`; `--nodes` does not apply).
//!
//! Capacity ids, in both modes; each of their runs is made in a fresh
//! process (this executable again, with the hidden `--one-run ID`), so
//! that memory freed by an earlier run cannot hide what a run allocates:
//! - `queue`: 1,000,000 no-op tasks submitted while they cannot start
//!   (each takes the result of a gate task that blocks until the driver
//!   releases it; in cluster mode the driver, their owner, holds them),
//!   timed per block of 100,000 submits (`submit_ns_first_100k`,
//!   `submit_ns_last_100k`, their ratio); VmRSS of the driver before and
//!   with all of them queued (`bytes_per_queued_task`); then the gate
//!   opens and all are gotten (`drain`).
//! - `memory`: VmRSS of the idle driver after init (in cluster mode also
//!   of the idle head, a joined node and their worker processes, on
//!   `Cluster::local(2)`, or `--nodes` if more); then 10,000 (embedded) or
//!   1,000 (cluster: in the worker processes) idle actors with no state,
//!   each called once, and the RSS growth per actor (`bytes_per_actor`;
//!   the goal: under 10 KiB per idle in-process actor).
//!
//! No ids runs W1..W7, `queue` and `memory` (and, in cluster mode, the
//! extras). Each workload runs 3 times on one runtime or cluster (the
//! capacity ids: on one each) and prints one JSON line: the headline
//! figure's median, min and max at the top level, every figure under
//! `figures`, and counts that are not measurements under `info`. A run
//! slower than a minute is reported on stderr; sizes never shrink.

use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use ray_core::prelude::*;
use ray_core::{Cluster, Config, LocalClusterConfig};
use serde_json::{json, Value};

#[path = "shapes/big_arg.rs"]
mod big_arg;
#[path = "shapes/capacity.rs"]
mod capacity;
#[path = "shapes/cluster.rs"]
mod cluster;
#[path = "shapes/measure.rs"]
mod measure;
#[path = "shapes/micro.rs"]
mod micro;
#[path = "shapes/tree.rs"]
mod tree;

use measure::{gb_per_second, micros, per_second, Run};

/// Runs per workload; the figures are their median, min and max.
const RUNS: usize = 3;
/// W5: memory per actor is estimated on this step only; the 50 actors'
/// growth is below what RSS pages can resolve.
const W5_MEMORY_STEP: usize = 1_000;
/// W4: put+get repetitions per size, in the order of `micro::W4_SIZES`.
const W4_REPS: [usize; 3] = [10_000, 200, 5];
/// W4: `get_archived` repetitions on one existing object.
const W4_ARCHIVED_GETS: usize = 1_000;
/// The workloads of WORKLOADS.md, in both modes.
const WORKLOADS: [&str; 7] = ["W1", "W2", "W3", "W4", "W5", "W6", "W7"];
/// The capacity measurements, in both modes; each run in a fresh process.
const CAPACITY: [&str; 2] = ["queue", "memory"];
/// The extra measurements of cluster mode.
const EXTRAS: [&str; 4] = ["ready", "transfer", "spread", "scale"];
/// How long a process is left alone before its idle memory is read.
const IDLE_SETTLE: Duration = Duration::from_millis(500);
/// What a `--one-run` process prints before its run's JSON.
const ONE_RUN_MARK: &str = "workloads-one-run: ";
/// A run slower than this is reported on stderr.
const SLOW_RUN: Duration = Duration::from_secs(60);

/// Times `n` sequential runs of `op`; returns their latencies in µs, sorted.
async fn latencies<F, Fut>(n: usize, mut op: F) -> anyhow::Result<Vec<f64>>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ray_core::Result<()>>,
{
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let start = Instant::now();
        op().await?;
        out.push(micros(start.elapsed()));
    }
    out.sort_by(f64::total_cmp);
    Ok(out)
}

async fn w1(ray: &Ray) -> anyhow::Result<Run> {
    let start = Instant::now();
    let got = micro::task_batch(ray, micro::W1_TASKS).await?;
    let elapsed = start.elapsed();
    ensure!(
        got == micro::W1_TASKS,
        "{got} of {} results",
        micro::W1_TASKS
    );
    let mut run = Run::default();
    run.figure(
        "throughput",
        "tasks/s",
        per_second(micro::W1_TASKS, elapsed),
    );
    run.info.insert("tasks".into(), json!(micro::W1_TASKS));
    Ok(run)
}

async fn w2(ray: &Ray) -> anyhow::Result<Run> {
    let lat = latencies(micro::W2_ROUND_TRIPS, || micro::task_round_trip(ray)).await?;
    let mut run = Run::default();
    run.latency_figures("", &lat);
    run.info
        .insert("round_trips".into(), json!(micro::W2_ROUND_TRIPS));
    Ok(run)
}

async fn w3(ray: &Ray) -> anyhow::Result<Run> {
    let actor = micro::NoopActor::remote(ray)?;
    micro::call_round_trip(&actor).await?; // the actor is up before timing
    let start = Instant::now();
    let got = micro::call_batch(ray, &actor, micro::W3_CALLS).await?;
    let elapsed = start.elapsed();
    ensure!(
        got == micro::W3_CALLS,
        "{got} of {} results",
        micro::W3_CALLS
    );
    let mut run = Run::default();
    run.figure(
        "throughput",
        "calls/s",
        per_second(micro::W3_CALLS, elapsed),
    );
    let lat = latencies(micro::W3_ROUND_TRIPS, || micro::call_round_trip(&actor)).await?;
    run.latency_figures("round_trip_", &lat);
    run.info.insert("calls".into(), json!(micro::W3_CALLS));
    run.info
        .insert("round_trips".into(), json!(micro::W3_ROUND_TRIPS));
    Ok(run)
}

/// Times `reps` runs of `op` on a fresh copy of `data` each (the copy is
/// made outside the timed part); returns the total time.
async fn time_with_copies<F, Fut>(data: &[u8], reps: usize, mut op: F) -> anyhow::Result<Duration>
where
    F: FnMut(Vec<u8>) -> Fut,
    Fut: std::future::Future<Output = ray_core::Result<usize>>,
{
    let mut total = Duration::ZERO;
    for _ in 0..reps {
        let copy = data.to_vec();
        let start = Instant::now();
        let len = op(copy).await?;
        total += start.elapsed();
        ensure!(
            len == data.len(),
            "got {len} bytes back, put {}",
            data.len()
        );
    }
    Ok(total)
}

/// ops/s for small buffers, GB/s (10^9 bytes) of payload for large ones.
fn rate(len: usize, reps: usize, elapsed: Duration) -> (&'static str, f64) {
    if len < 1 << 20 {
        ("ops/s", per_second(reps, elapsed))
    } else {
        ("GB/s", gb_per_second(len * reps, elapsed))
    }
}

async fn w4(ray: &Ray) -> anyhow::Result<Run> {
    let mut run = Run::default();
    for ((label, len), reps) in micro::W4_SIZES.into_iter().zip(W4_REPS) {
        let data = micro::payload(len);
        let t = time_with_copies(&data, reps, |d| micro::put_get(ray, d)).await?;
        let (unit, value) = rate(len, reps, t);
        run.figure(format!("put_get_{label}"), unit, value);
        let t = time_with_copies(&data, reps, |d| micro::put_get_archived(ray, d)).await?;
        let (unit, value) = rate(len, reps, t);
        run.figure(format!("put_get_archived_{label}"), unit, value);

        let r = ray.put(data).await?;
        let start = Instant::now();
        for _ in 0..W4_ARCHIVED_GETS {
            let view = micro::get_archived(&r).await?;
            ensure!(view.len() == len, "archived view has {} bytes", view.len());
        }
        let ns = start.elapsed().as_secs_f64() * 1e9 / W4_ARCHIVED_GETS as f64;
        run.figure(format!("get_archived_{label}"), "ns/op", ns);
    }
    run.info.insert("reps".into(), json!(W4_REPS));
    run.info
        .insert("archived_gets".into(), json!(W4_ARCHIVED_GETS));
    Ok(run)
}

async fn w5(ray: &Ray) -> anyhow::Result<Run> {
    let mut run = Run::default();
    for n in micro::W5_ACTORS {
        let rss_before = measure::tree_rss_bytes()?;
        let start = Instant::now();
        let actors = micro::create_and_call(ray, n).await?;
        run.figure(
            format!("create_and_call_{n}"),
            "s",
            start.elapsed().as_secs_f64(),
        );
        if n == W5_MEMORY_STEP {
            let grown = measure::tree_rss_bytes()?.saturating_sub(rss_before);
            run.figure(
                format!("rss_per_actor_{n}"),
                "bytes (estimate)",
                grown as f64 / n as f64,
            );
        }
        drop(actors);
    }
    run.info.insert(
        "memory_note".into(),
        json!("estimate: RSS growth (/proc/PID/statm of this process and its descendants: in cluster mode the node daemons and workers too) while 1,000 actors are created and alive, divided by 1,000; RSS grows only when the allocator maps new pages, so after earlier workloads or runs it under-reports: run W5 alone for this figure"),
    );
    Ok(run)
}

async fn w6(ray: &Ray) -> anyhow::Result<Run> {
    let data = ray.put(micro::payload(big_arg::W6_BYTES)).await?;
    let mut run = Run::default();
    let view = w6_pass(ray, &data, big_arg::ArgAccess::View).await?;
    run.figure("throughput", "tasks/s", view);
    let copy = w6_pass(ray, &data, big_arg::ArgAccess::Deserialized).await?;
    run.figure("throughput_deserialized", "tasks/s", copy);
    run.info.insert("tasks".into(), json!(big_arg::W6_TASKS));
    run.info
        .insert("arg_bytes".into(), json!(big_arg::W6_BYTES));
    Ok(run)
}

/// One W6 batch, checked; returns tasks/s.
async fn w6_pass(
    ray: &Ray,
    data: &ObjectRef<Vec<u8>>,
    access: big_arg::ArgAccess,
) -> anyhow::Result<f64> {
    let start = Instant::now();
    let lens = big_arg::batch(ray, data, big_arg::W6_TASKS, access).await?;
    let elapsed = start.elapsed();
    ensure!(
        lens.len() == big_arg::W6_TASKS && lens.iter().all(|&l| l == big_arg::W6_BYTES as u64),
        "a task saw the wrong length"
    );
    Ok(per_second(big_arg::W6_TASKS, elapsed))
}

async fn w7(ray: &Ray) -> anyhow::Result<Run> {
    let t = tree::run(ray, tree::DEFAULT_SEED).await?;
    let mut run = Run::default();
    run.figure("end_to_end", "s", t.seconds);
    run.info.insert("seed".into(), json!(tree::DEFAULT_SEED));
    run.info.insert("depth".into(), json!(tree::DEPTH));
    run.info.insert("actors".into(), json!(t.actors));
    run.info.insert("calls".into(), json!(t.calls));
    Ok(run)
}

/// `ready`: one fresh `Cluster::local(n)` (n: `--nodes`, default 2) from
/// nothing to tasks on every node. The headline is `Cluster::local(n)`
/// returning (every node registered and known to the others).
async fn ready(opts: &Options) -> anyhow::Result<Run> {
    let n = ready_nodes(opts);
    let start = Instant::now();
    let c = Cluster::local_with(n, opts.cluster_config()).await?;
    let up = start.elapsed();
    let ray = c.connect().await?;
    let connected = start.elapsed();
    let nodes = cluster::nodes_reached(&ray, n).await?;
    let first_tasks = start.elapsed();
    ensure!(
        nodes.len() == n,
        "spread tasks reached nodes {nodes:?} of {n}"
    );
    ray.shutdown();
    drop(c);
    let mut run = Run::default();
    run.figure(format!("local_{n}_ready"), "s", up.as_secs_f64());
    run.figure("connected", "s", connected.as_secs_f64());
    let on_all = if n == 2 {
        "first_tasks_on_both_nodes".to_string()
    } else {
        format!("first_tasks_on_all_{n}_nodes")
    };
    run.figure(on_all, "s", first_tasks.as_secs_f64());
    run.info.insert(
        "note".into(),
        json!(format!("seconds from calling Cluster::local({n}): until it returns; until a driver has joined; until spread tasks have answered from every node (this starts the job's worker process on each node)")),
    );
    Ok(run)
}

/// Nodes `ready` starts.
fn ready_nodes(opts: &Options) -> usize {
    opts.nodes.unwrap_or(2)
}

/// `transfer`: a 100 MiB object put by the driver and read in place
/// (summed) by a task pinned to another node (the second, on 2 nodes);
/// the worker there is started, and has fetched one small object, before
/// timing.
async fn transfer(ray: &Ray) -> anyhow::Result<Run> {
    let far = cluster::other_node(ray)
        .await?
        .context("spread tasks reached no node but the driver's")?;
    let small = ray.put(micro::payload(1 << 10)).await?;
    cluster::sum_on(ray, &small, far).await?;

    let data = micro::payload(cluster::TRANSFER_BYTES);
    let want = cluster::sum_bytes(&data);
    let start = Instant::now();
    let obj = ray.put(data).await?;
    let put = start.elapsed();
    let got = cluster::sum_on(ray, &obj, far).await?;
    let total = start.elapsed();
    ensure!(got == want, "the far task summed {got}, expected {want}");
    let moved = total - put;
    let mut run = Run::default();
    run.figure(
        "transfer",
        "GB/s",
        gb_per_second(cluster::TRANSFER_BYTES, moved),
    );
    run.figure("transfer_seconds", "s", moved.as_secs_f64());
    run.figure(
        "put_and_transfer",
        "GB/s",
        gb_per_second(cluster::TRANSFER_BYTES, total),
    );
    run.info
        .insert("bytes".into(), json!(cluster::TRANSFER_BYTES));
    run.info.insert("far_node".into(), json!(far.0));
    run.info.insert(
        "note".into(),
        json!("transfer: from submitting the task (object already put on the driver) to its result, the far task summing every byte in place; put_and_transfer includes the put"),
    );
    Ok(run)
}

/// `spread`: 1,000 actors created with `.spread()` over the `n` nodes (2
/// unless `--nodes` asks for more), each called once; every node's worker
/// process is up before timing.
async fn spread(ray: &Ray, n: usize) -> anyhow::Result<Run> {
    let nodes = cluster::nodes_reached(ray, n).await?;
    ensure!(
        nodes.len() == n,
        "spread tasks reached nodes {nodes:?} of {n}"
    );
    let start = Instant::now();
    let (actors, per_node) = cluster::spread_actors(ray, cluster::SPREAD_ACTORS).await?;
    let elapsed = start.elapsed();
    let answered: usize = per_node.values().sum();
    ensure!(
        answered == cluster::SPREAD_ACTORS && per_node.len() == n,
        "{answered} actors answered, per node {per_node:?}"
    );
    drop(actors);
    let mut run = Run::default();
    run.figure(
        format!("create_and_call_{}", cluster::SPREAD_ACTORS),
        "s",
        elapsed.as_secs_f64(),
    );
    let per_node: serde_json::Map<String, Value> = per_node
        .into_iter()
        .map(|(n, c)| (n.to_string(), json!(c)))
        .collect();
    run.info.insert("actors_per_node".into(), per_node.into());
    Ok(run)
}

/// VmRSS of every process in `pids`, summed; a process that is gone
/// counts as 0.
/// The child processes (workers) of every process in `parents`.
fn children_of(parents: &[u32]) -> anyhow::Result<Vec<u32>> {
    Ok(parents
        .iter()
        .map(|&p| measure::child_pids(p))
        .collect::<anyhow::Result<Vec<_>>>()?
        .concat())
}

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
async fn queue(session: &Session) -> anyhow::Result<Run> {
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
async fn memory(session: &Session) -> anyhow::Result<Run> {
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

/// Where the workloads run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Embedded,
    Cluster,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Embedded => "embedded",
            Mode::Cluster => "cluster",
        }
    }
}

/// Command-line settings.
struct Options {
    mode: Mode,
    /// CPUs of the embedded runtime, or of each cluster node.
    cpus: f64,
    /// Node processes of the cluster (`--nodes`); `None`: each workload's
    /// default.
    nodes: Option<usize>,
    /// The most one run may take before the harness gives up.
    timeout: Duration,
    workloads: Vec<String>,
    /// `--one-run`: this process makes one run of the one workload and
    /// prints it after [`ONE_RUN_MARK`].
    one_run: bool,
}

impl Options {
    fn cluster_config(&self) -> LocalClusterConfig {
        LocalClusterConfig {
            cpus_per_node: self.cpus,
            ..LocalClusterConfig::default()
        }
    }
}

/// The runtime one workload's runs share: an embedded one, or a driver
/// joined to a local cluster of `nodes` node processes.
struct Session {
    ray: Ray,
    nodes: usize,
    /// From nothing to a joined driver.
    start_seconds: f64,
    /// Starting the job's worker processes (cluster mode).
    warm_up_seconds: f64,
    // Dropped after `ray` shuts down: the cluster's processes die with it.
    cluster: Option<Cluster>,
}

impl Session {
    async fn open(opts: &Options, nodes: usize) -> anyhow::Result<Session> {
        let start = Instant::now();
        let (ray, cluster) = match opts.mode {
            Mode::Embedded => {
                let ray = ray_core::init_with(Config {
                    num_cpus: Some(opts.cpus),
                    ..Config::default()
                })
                .await?;
                (ray, None)
            }
            Mode::Cluster => {
                let c = Cluster::local_with(nodes, opts.cluster_config())
                    .await
                    .with_context(|| format!("start a local cluster of {nodes} node(s)"))?;
                let ray = c.connect().await.context("join the local cluster")?;
                (ray, Some(c))
            }
        };
        let start_seconds = start.elapsed().as_secs_f64();
        // The job's worker process on each node starts on first use; start
        // them now so that run 1 measures what runs 2 and 3 do. `ready`
        // reports this start-up.
        let warm = Instant::now();
        if cluster.is_some() {
            let reached = cluster::nodes_reached(&ray, nodes).await?;
            ensure!(
                reached.len() == nodes,
                "warm-up tasks reached nodes {reached:?} of {nodes}"
            );
        }
        Ok(Session {
            ray,
            nodes: if cluster.is_some() { nodes } else { 0 },
            start_seconds,
            warm_up_seconds: warm.elapsed().as_secs_f64(),
            cluster,
        })
    }

    /// Adds the session's start-up times to `info`.
    fn describe(&self, info: &mut serde_json::Map<String, Value>) {
        info.insert("runtime_start_s".into(), json!(self.start_seconds));
        if self.nodes > 0 {
            info.insert("worker_warm_up_s".into(), json!(self.warm_up_seconds));
        }
    }
}

async fn run_once(id: &str, session: Option<&Session>, opts: &Options) -> anyhow::Result<Run> {
    if id == "ready" {
        return ready(opts).await;
    }
    let session = session.context("this workload needs a runtime")?;
    let ray = &session.ray;
    match id {
        "W1" => w1(ray).await,
        "W2" => w2(ray).await,
        "W3" => w3(ray).await,
        "W4" => w4(ray).await,
        "W5" => w5(ray).await,
        "W6" => w6(ray).await,
        "W7" => w7(ray).await,
        "queue" => queue(session).await,
        "memory" => memory(session).await,
        "transfer" => transfer(ray).await,
        "spread" => spread(ray, session.nodes).await,
        other => bail!("unknown workload {other}"),
    }
}

/// Node processes workload `id` runs on in cluster mode (`--nodes`, where
/// the workload can use that many); 0: it starts its own clusters.
fn nodes_for(id: &str, opts: &Options) -> usize {
    match id {
        "ready" => 0,
        "transfer" | "spread" => opts.nodes.unwrap_or(2).max(2),
        "memory" if opts.mode == Mode::Cluster => opts.nodes.unwrap_or(2).max(2),
        _ => opts.nodes.unwrap_or(1),
    }
}

/// One run of `id` in a fresh process: this executable again with
/// `--one-run`; returns the run it printed.
async fn run_in_fresh_process(id: &str, opts: &Options, nodes: usize) -> anyhow::Result<Run> {
    use std::io::BufRead;
    let exe = std::env::current_exe().context("find this executable")?;
    let mut cmd = std::process::Command::new(exe);
    cmd.args(["--mode", opts.mode.name()])
        .args(["--cpus", &opts.cpus.to_string()])
        .args(["--timeout", &opts.timeout.as_secs().to_string()])
        .args(["--one-run", id])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped());
    if opts.mode == Mode::Cluster {
        cmd.args(["--nodes", &nodes.to_string()]);
    }
    let mut child = cmd.spawn().context("start a --one-run process")?;
    let stdout = child.stdout.take().context("the child's stdout")?;
    // Read until the marked line: node processes the child starts share
    // its stdout and may keep it open a moment after the child exits.
    let reader = tokio::task::spawn_blocking(move || -> Option<String> {
        std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .find_map(|l| l.strip_prefix(ONE_RUN_MARK).map(str::to_owned))
    });
    // The run's own limit, plus time to start a cluster.
    let deadline = Instant::now() + opts.timeout + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = child.try_wait().context("wait for the --one-run process")? {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "the --one-run process of {id} took longer than {:?}",
                opts.timeout
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    ensure!(
        status.success(),
        "the --one-run process of {id} failed: {status}"
    );
    let line = reader
        .await
        .context("read the --one-run process's output")?
        .context("the --one-run process printed no run")?;
    let value: Value = serde_json::from_str(&line).context("parse the --one-run output")?;
    Run::from_json(&value)
}

/// Runs workload `id` [`RUNS`] times on one fresh runtime or cluster of
/// `nodes` node processes (the capacity ids: each run in a fresh process);
/// returns its JSON line, named `label`.
async fn run_workload(
    id: &str,
    label: &str,
    opts: &Options,
    nodes: usize,
) -> anyhow::Result<Value> {
    let fresh = CAPACITY.contains(&id);
    let session = if nodes == 0 || fresh {
        None
    } else {
        Some(Session::open(opts, nodes).await?)
    };
    let mut samples = measure::Samples::default();
    for i in 1..=RUNS {
        let start = Instant::now();
        let run = if fresh {
            run_in_fresh_process(id, opts, nodes).await
        } else {
            tokio::time::timeout(opts.timeout, run_once(id, session.as_ref(), opts))
                .await
                .map_err(|_| anyhow::anyhow!("run {i} took longer than {:?}", opts.timeout))
                .and_then(|r| r)
        }
        .with_context(|| format!("workload {id} ({} mode)", opts.mode.name()))?;
        let took = start.elapsed();
        if took > SLOW_RUN {
            eprintln!(
                "note: {id} run {i} in {} mode took {:.1} s (over {} s); its size is as WORKLOADS.md defines, unchanged",
                opts.mode.name(),
                took.as_secs_f64(),
                SLOW_RUN.as_secs()
            );
        }
        samples.add(run);
    }
    if fresh {
        samples.info("fresh_process_per_run", json!(true));
    }
    if let Some(s) = &session {
        let mut info = serde_json::Map::new();
        s.describe(&mut info);
        for (k, v) in info {
            samples.info(&k, v);
        }
        if id == "W1" && s.nodes > 0 {
            let per_node = capacity::tasks_per_node(&s.ray, micro::W1_TASKS).await?;
            let per_node: serde_json::Map<String, Value> = per_node
                .into_iter()
                .map(|(n, c)| (n.to_string(), json!(c)))
                .collect();
            samples.info("tasks_per_node", per_node.into());
            samples.info(
                "tasks_per_node_note",
                json!("W1's no-ops return nothing, so where they run is seen on an untimed batch after the runs, of the same size and submitted the same way, whose tasks return their node id (nodes numbered in start order; the head is the first)"),
            );
        }
        s.ray.shutdown();
    }
    drop(session);

    let mut line = serde_json::Map::new();
    line.insert("workload".into(), json!(label));
    if label != id {
        line.insert("shape".into(), json!(id));
    }
    line.insert("mode".into(), json!(opts.mode.name()));
    line.insert("cpus".into(), json!(opts.cpus));
    if opts.mode == Mode::Cluster {
        let nodes = if nodes == 0 { ready_nodes(opts) } else { nodes };
        line.insert("nodes".into(), json!(nodes));
    }
    line.insert("runs".into(), json!(RUNS));
    samples.into_line(line)
}

/// `--one-run ID`: one run of `id` in this process, printed as JSON after
/// [`ONE_RUN_MARK`].
async fn one_run(id: &str, opts: &Options) -> anyhow::Result<()> {
    let nodes = nodes_for(id, opts);
    let session = if nodes == 0 {
        None
    } else {
        Some(Session::open(opts, nodes).await?)
    };
    let mut run = tokio::time::timeout(opts.timeout, run_once(id, session.as_ref(), opts))
        .await
        .map_err(|_| anyhow::anyhow!("the run took longer than {:?}", opts.timeout))??;
    if let Some(s) = &session {
        s.describe(&mut run.info);
        s.ray.shutdown();
    }
    drop(session);
    println!("{ONE_RUN_MARK}{}", run.to_json());
    Ok(())
}

/// `scale`: W1 on each of [`capacity::SCALE_NODES`] cluster sizes; one
/// line each, with its throughput relative to the first size's.
async fn scale(opts: &Options) -> anyhow::Result<()> {
    let mut base = None;
    for n in capacity::SCALE_NODES {
        let mut line = run_workload("W1", "scale", opts, n).await?;
        let median = line["median"].as_f64().context("W1 has a median")?;
        let base = *base.get_or_insert(median);
        line["info"]["throughput_vs_1_node"] = json!(median / base);
        println!("{line}");
    }
    Ok(())
}

const USAGE: &str = "usage: workloads --mode embedded|cluster [--cpus N] [--nodes N] [--timeout S] [W1 .. W7] [queue memory] [ready transfer spread scale]
  --cpus N     CPUs of the embedded runtime, or of each cluster node
  --nodes N    cluster mode: node processes (default 1; transfer, spread and memory use at least 2; ready 2; scale ignores it)
  --timeout S  the most one run may take (default 600)
  no ids: W1..W7, queue, memory (and in cluster mode ready transfer spread scale)";

fn parse_args() -> anyhow::Result<Options> {
    let mut mode = Mode::Embedded;
    let mut cpus = None;
    let mut nodes = None;
    let mut timeout = Duration::from_secs(600);
    let mut workloads = Vec::new();
    let mut one_run = false;
    let mut args = std::env::args().skip(1);
    let known =
        |id: &str| WORKLOADS.contains(&id) || CAPACITY.contains(&id) || EXTRAS.contains(&id);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--mode" => {
                mode = match args.next().as_deref() {
                    Some("embedded") => Mode::Embedded,
                    Some("cluster") => Mode::Cluster,
                    other => bail!(
                        "--mode {}: embedded or cluster; {USAGE}",
                        other.unwrap_or("(missing)")
                    ),
                }
            }
            "--cpus" => {
                let v = args.next().context("--cpus needs a number")?;
                cpus = Some(v.parse().with_context(|| format!("--cpus {v}"))?);
            }
            "--nodes" => {
                let v = args.next().context("--nodes needs a number")?;
                let n: usize = v.parse().with_context(|| format!("--nodes {v}"))?;
                ensure!(n >= 1, "--nodes {n}: a cluster has at least one node");
                nodes = Some(n);
            }
            "--timeout" => {
                let v = args.next().context("--timeout needs seconds")?;
                timeout = Duration::from_secs(v.parse().with_context(|| format!("--timeout {v}"))?);
            }
            "--one-run" => {
                let id = args.next().context("--one-run needs a workload id")?;
                ensure!(known(&id), "--one-run {id}: unknown workload");
                one_run = true;
                workloads.push(id);
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            id if known(id) => workloads.push(id.to_string()),
            other => bail!("unknown argument {other}; {USAGE}"),
        }
    }
    if mode == Mode::Embedded && workloads.iter().any(|w| EXTRAS.contains(&w.as_str())) {
        bail!("{EXTRAS:?} measure a cluster: use --mode cluster");
    }
    if mode == Mode::Embedded && nodes.is_some() {
        bail!("--nodes is for --mode cluster");
    }
    ensure!(
        !one_run || workloads.len() == 1,
        "--one-run takes exactly one workload"
    );
    if workloads.is_empty() {
        workloads = WORKLOADS
            .iter()
            .chain(&CAPACITY)
            .map(|s| s.to_string())
            .collect();
        if mode == Mode::Cluster {
            workloads.extend(EXTRAS.iter().map(|s| s.to_string()));
        }
    }
    let cpus = cpus.unwrap_or_else(|| match mode {
        Mode::Embedded => std::thread::available_parallelism().map_or(1, |n| n.get()) as f64,
        Mode::Cluster => LocalClusterConfig::default().cpus_per_node,
    });
    Ok(Options {
        mode,
        cpus,
        nodes,
        timeout,
        workloads,
        one_run,
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let opts = parse_args()?;
    if opts.one_run {
        return one_run(&opts.workloads[0], &opts).await;
    }
    for id in &opts.workloads {
        if id == "scale" {
            scale(&opts).await?;
            continue;
        }
        let line = run_workload(id, id, &opts, nodes_for(id, &opts)).await?;
        println!("{line}");
    }
    Ok(())
}
