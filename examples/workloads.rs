//! The workload harness: W1–W7 of WORKLOADS.md, in exactly those shapes,
//! on the embedded runtime or across a real cluster, plus the cluster
//! measurements of issue 4.
//!
//! `cargo run --release --example workloads -- --mode embedded|cluster [--cpus N] [--timeout S] [ID ...]`
//!
//! - `embedded`: each workload on a fresh embedded runtime with N CPUs
//!   (default: the machine's cores).
//! - `cluster`: each workload on a fresh `Cluster::local(1)`, one node
//!   process (the head) offering N CPUs (default 2), with this process as
//!   the driver; tasks and actors run in that node's worker process, over
//!   QUIC on loopback; that worker is started before run 1 (the time is
//!   under `info.worker_warm_up_s`). Also takes the extra ids `ready` (`Cluster::local(2)`
//!   start-up), `transfer` (100 MiB from the driver to a task on the second
//!   node) and `spread` (1,000 actors spread over 2 nodes, one call each).
//!
//! No ids runs W1..W7 (and, in cluster mode, the extras). Each workload
//! runs 3 times on one runtime or cluster and prints one JSON line: the
//! headline figure's median, min and max at the top level, every figure
//! under `figures`, and counts that are not measurements under `info`.
//! A run slower than a minute is reported on stderr; sizes never shrink.

use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use ray_core::prelude::*;
use ray_core::{Cluster, Config, LocalClusterConfig};
use serde_json::{json, Value};

#[path = "shapes/big_arg.rs"]
mod big_arg;
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
/// The extra measurements of cluster mode.
const EXTRAS: [&str; 3] = ["ready", "transfer", "spread"];
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

/// `ready`: one fresh `Cluster::local(2)` from nothing to tasks on both
/// nodes. The headline is `Cluster::local(2)` returning (every node
/// registered and known to the others).
async fn ready(opts: &Options) -> anyhow::Result<Run> {
    let start = Instant::now();
    let c = Cluster::local_with(2, opts.cluster_config()).await?;
    let up = start.elapsed();
    let ray = c.connect().await?;
    let connected = start.elapsed();
    let nodes = cluster::nodes_reached(&ray, 2).await?;
    let first_tasks = start.elapsed();
    ensure!(nodes.len() == 2, "spread tasks reached nodes {nodes:?}");
    ray.shutdown();
    drop(c);
    let mut run = Run::default();
    run.figure("local_2_ready", "s", up.as_secs_f64());
    run.figure("connected", "s", connected.as_secs_f64());
    run.figure("first_tasks_on_both_nodes", "s", first_tasks.as_secs_f64());
    run.info.insert(
        "note".into(),
        json!("seconds from calling Cluster::local(2): until it returns; until a driver has joined; until spread tasks have answered from both nodes (this starts the job's worker process on each node)"),
    );
    Ok(run)
}

/// `transfer`: a 100 MiB object put by the driver and read in place
/// (summed) by a task pinned to the second node; the worker there is
/// started, and has fetched one small object, before timing.
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

/// `spread`: 1,000 actors created with `.spread()` over 2 nodes, each
/// called once; every node's worker process is up before timing.
async fn spread(ray: &Ray) -> anyhow::Result<Run> {
    let nodes = cluster::nodes_reached(ray, 2).await?;
    ensure!(nodes.len() == 2, "spread tasks reached nodes {nodes:?}");
    let start = Instant::now();
    let (actors, per_node) = cluster::spread_actors(ray, cluster::SPREAD_ACTORS).await?;
    let elapsed = start.elapsed();
    let answered: usize = per_node.values().sum();
    ensure!(
        answered == cluster::SPREAD_ACTORS && per_node.len() == 2,
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
    /// The most one run may take before the harness gives up.
    timeout: Duration,
    workloads: Vec<String>,
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
    _cluster: Option<Cluster>,
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
            _cluster: cluster,
        })
    }
}

async fn run_once(id: &str, session: Option<&Session>, opts: &Options) -> anyhow::Result<Run> {
    if id == "ready" {
        return ready(opts).await;
    }
    let ray = &session.context("this workload needs a runtime")?.ray;
    match id {
        "W1" => w1(ray).await,
        "W2" => w2(ray).await,
        "W3" => w3(ray).await,
        "W4" => w4(ray).await,
        "W5" => w5(ray).await,
        "W6" => w6(ray).await,
        "W7" => w7(ray).await,
        "transfer" => transfer(ray).await,
        "spread" => spread(ray).await,
        other => bail!("unknown workload {other}"),
    }
}

/// Node processes workload `id` runs on in cluster mode; 0: it starts its
/// own clusters.
fn nodes_for(id: &str) -> usize {
    match id {
        "ready" => 0,
        "transfer" | "spread" => 2,
        _ => 1,
    }
}

/// Runs workload `id` [`RUNS`] times on one fresh runtime or cluster;
/// returns its JSON line.
async fn run_workload(id: &str, opts: &Options) -> anyhow::Result<Value> {
    let nodes = nodes_for(id);
    let session = if nodes == 0 {
        None
    } else {
        Some(Session::open(opts, nodes).await?)
    };
    let mut samples = measure::Samples::default();
    for i in 1..=RUNS {
        let start = Instant::now();
        let run = tokio::time::timeout(opts.timeout, run_once(id, session.as_ref(), opts))
            .await
            .map_err(|_| anyhow::anyhow!("run {i} took longer than {:?}", opts.timeout))
            .and_then(|r| r)
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
    if let Some(s) = &session {
        samples.info("runtime_start_s", json!(s.start_seconds));
        if s.nodes > 0 {
            samples.info("worker_warm_up_s", json!(s.warm_up_seconds));
        }
        s.ray.shutdown();
    }
    let nodes = session.as_ref().map_or(2, |s| s.nodes);
    drop(session);

    let mut line = serde_json::Map::new();
    line.insert("workload".into(), json!(id));
    line.insert("mode".into(), json!(opts.mode.name()));
    line.insert("cpus".into(), json!(opts.cpus));
    if opts.mode == Mode::Cluster {
        line.insert("nodes".into(), json!(nodes));
    }
    line.insert("runs".into(), json!(RUNS));
    samples.into_line(line)
}

const USAGE: &str =
    "usage: workloads --mode embedded|cluster [--cpus N] [--timeout S] [W1 .. W7] [ready transfer spread]";

fn parse_args() -> anyhow::Result<Options> {
    let mut mode = Mode::Embedded;
    let mut cpus = None;
    let mut timeout = Duration::from_secs(600);
    let mut workloads = Vec::new();
    let mut args = std::env::args().skip(1);
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
            "--timeout" => {
                let v = args.next().context("--timeout needs seconds")?;
                timeout = Duration::from_secs(v.parse().with_context(|| format!("--timeout {v}"))?);
            }
            id if WORKLOADS.contains(&id) || EXTRAS.contains(&id) => workloads.push(id.to_string()),
            other => bail!("unknown argument {other}; {USAGE}"),
        }
    }
    if mode == Mode::Embedded && workloads.iter().any(|w| EXTRAS.contains(&w.as_str())) {
        bail!("{EXTRAS:?} measure a cluster: use --mode cluster");
    }
    if workloads.is_empty() {
        workloads = WORKLOADS.iter().map(|s| s.to_string()).collect();
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
        timeout,
        workloads,
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let opts = parse_args()?;
    for id in &opts.workloads {
        let line = run_workload(id, &opts).await?;
        println!("{line}");
    }
    Ok(())
}
