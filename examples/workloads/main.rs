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
//! `chaos` (cluster mode, only when named): the chaos workload of issue 19
//! (`shapes/chaos.rs`), without and then with a node killed and replaced
//! every 5 s; prints whether every result was right, the kills and the
//! slowdown.
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
//!
//! The harness: `standard.rs` (W1–W7), `extras.rs` (the cluster extras),
//! `capacity_runs.rs` (`queue`, `memory`) and this file (sessions, runs in
//! fresh processes, `scale`, the command line); the shapes they run are in
//! `examples/shapes/`.

use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use ray_core::prelude::*;
use ray_core::{Cluster, Config, LocalClusterConfig};
use serde_json::{json, Value};

#[path = "../shapes/big_arg.rs"]
mod big_arg;
#[path = "../shapes/capacity.rs"]
mod capacity;
#[path = "../shapes/chaos.rs"]
mod chaos;
#[path = "../shapes/cluster.rs"]
mod cluster;
#[path = "../shapes/measure.rs"]
mod measure;
#[path = "../shapes/micro.rs"]
mod micro;
#[path = "../shapes/tree.rs"]
mod tree;

use measure::Run;

mod capacity_runs;
mod extras;
mod standard;

use capacity_runs::{memory, queue};
use extras::{ready, ready_nodes, spread, transfer};
use standard::{w1, w2, w3, w4, w5, w6, w7};

/// Runs per workload; the figures are their median, min and max.
const RUNS: usize = 3;
/// The workloads of WORKLOADS.md, in both modes.
const WORKLOADS: [&str; 7] = ["W1", "W2", "W3", "W4", "W5", "W6", "W7"];
/// The capacity measurements, in both modes; each run in a fresh process.
const CAPACITY: [&str; 2] = ["queue", "memory"];
/// The extra measurements of cluster mode.
const EXTRAS: [&str; 4] = ["ready", "transfer", "spread", "scale"];
/// The chaos workload: cluster mode only, and only when asked for (it
/// kills nodes for a minute or so).
const CHAOS: &str = "chaos";
/// What a `--one-run` process prints before its run's JSON.
const ONE_RUN_MARK: &str = "workloads-one-run: ";
/// A run slower than this is reported on stderr.
const SLOW_RUN: Duration = Duration::from_secs(60);

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

/// `chaos`: the chaos workload (`shapes/chaos.rs`) on `Cluster::local(3)`
/// (`--nodes`, at least 2), once without kills and once while a random
/// non-head node is killed (SIGKILL) and replaced every 5 s; one line with
/// the check, the kills and the slowdown.
async fn chaos_run(opts: &Options) -> anyhow::Result<()> {
    let nodes = opts.nodes.unwrap_or(3).max(2);
    let size = chaos::ChaosSize {
        parents: 40,
        children: 25,
        child_ms: 100,
        reporters: 20,
        reports: 100,
        objects: 200,
        object_bytes: 256 << 10,
    };
    let mut outcomes = Vec::new();
    for kill_every in [None, Some(Duration::from_secs(5))] {
        let (mut cluster, ray) = chaos_cluster(opts, nodes).await?;
        let run = chaos::run(&mut cluster, &ray, size, kill_every);
        let out = tokio::time::timeout(opts.timeout, run)
            .await
            .map_err(|_| anyhow::anyhow!("the chaos run took longer than {:?}", opts.timeout))?
            .map_err(anyhow::Error::msg)?;
        ray.shutdown();
        outcomes.push(out);
    }
    let (calm, chaos) = (&outcomes[0], &outcomes[1]);
    let w7 = w7_chaos(opts, nodes).await?;
    let w7_correct = w7["correct"].as_bool() == Some(true);
    let line = json!({
        "workload": "chaos",
        "mode": "cluster",
        "nodes": nodes,
        "cpus": opts.cpus,
        "correct": calm.correct() && chaos.correct() && w7_correct,
        "tasks_correct": [calm.tasks_correct, chaos.tasks_correct],
        "missing_reports": [calm.missing_reports, chaos.missing_reports],
        "objects_correct": [calm.objects_correct, chaos.objects_correct],
        "kills": chaos.kills,
        "seconds_without_kills": calm.elapsed.as_secs_f64(),
        "seconds_with_kills": chaos.elapsed.as_secs_f64(),
        "slowdown": chaos.elapsed.as_secs_f64() / calm.elapsed.as_secs_f64(),
        "w7": w7,
        "info": {
            "parents": size.parents, "children": size.children, "child_ms": size.child_ms,
            "reporters": size.reporters, "reports": size.reports,
            "objects": size.objects, "object_bytes": size.object_bytes, "kill_every_s": 5,
        },
    });
    println!("{line}");
    Ok(())
}

/// A fresh local cluster of `nodes` for a chaos run, and its driver.
async fn chaos_cluster(opts: &Options, nodes: usize) -> anyhow::Result<(Cluster, Ray)> {
    let config = LocalClusterConfig {
        cpus_per_node: opts.cpus,
        ..LocalClusterConfig::default()
    };
    let cluster = Cluster::local_with(nodes, config).await?;
    let ray = cluster.connect().await?;
    Ok((cluster, ray))
}

/// W7 under the killer: the worker tree (every actor restarting, calls
/// re-sent) run round after round for [`W7_CHAOS_ROUNDS`] seeds while a
/// non-head node is killed and replaced every 5 s, against the same seeds
/// without kills. Each round must count the same actors as its calm run
/// and at least as many calls (a re-sent call may count twice).
async fn w7_chaos(opts: &Options, nodes: usize) -> anyhow::Result<serde_json::Value> {
    let mut runs: Vec<(Vec<tree::TreeRun>, u32, f64)> = Vec::new();
    for kill_every in [None, Some(Duration::from_secs(5))] {
        let (mut cluster, ray) = chaos_cluster(opts, nodes).await?;
        let started = Instant::now();
        let driver = ray.clone();
        let work = tokio::spawn(async move {
            let mut rounds = Vec::new();
            for seed in 0..W7_CHAOS_ROUNDS {
                let run = tree::run_with(&driver, seed, true)
                    .await
                    .map_err(|e| format!("W7 round {seed}: {e}"))?;
                rounds.push(run);
            }
            Ok::<_, String>(rounds)
        });
        let run = chaos::with_killer(&mut cluster, kill_every, work);
        let (rounds, kills) = tokio::time::timeout(opts.timeout, run)
            .await
            .map_err(|_| {
                anyhow::anyhow!("W7 under the killer took longer than {:?}", opts.timeout)
            })?
            .map_err(anyhow::Error::msg)?;
        ray.shutdown();
        runs.push((rounds, kills, started.elapsed().as_secs_f64()));
    }
    let (calm, chaos) = (&runs[0], &runs[1]);
    let correct = calm
        .0
        .iter()
        .zip(&chaos.0)
        .all(|(c, k)| c.actors == k.actors && k.calls >= c.calls);
    Ok(json!({
        "correct": correct,
        "rounds": W7_CHAOS_ROUNDS,
        "kills": chaos.1,
        "actors": calm.0.iter().map(|r| r.actors).sum::<u64>(),
        "calls": [calm.0.iter().map(|r| r.calls).sum::<u64>(), chaos.0.iter().map(|r| r.calls).sum::<u64>()],
        "seconds_without_kills": calm.2,
        "seconds_with_kills": chaos.2,
    }))
}

/// Seeds (rounds) of W7 under the killer.
const W7_CHAOS_ROUNDS: u64 = 8;

const USAGE: &str = "usage: workloads --mode embedded|cluster [--cpus N] [--nodes N] [--timeout S] [W1 .. W7] [queue memory] [ready transfer spread scale] [chaos]
  --cpus N     CPUs of the embedded runtime, or of each cluster node
  --nodes N    cluster mode: node processes (default 1; transfer, spread and memory use at least 2; ready 2; scale ignores it)
  --timeout S  the most one run may take (default 600)
  no ids: W1..W7, queue, memory (and in cluster mode ready transfer spread scale; chaos only when named)";

fn parse_args() -> anyhow::Result<Options> {
    let mut mode = Mode::Embedded;
    let mut cpus = None;
    let mut nodes = None;
    let mut timeout = Duration::from_secs(600);
    let mut workloads = Vec::new();
    let mut one_run = false;
    let mut args = std::env::args().skip(1);
    let known = |id: &str| {
        WORKLOADS.contains(&id) || CAPACITY.contains(&id) || EXTRAS.contains(&id) || id == CHAOS
    };
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
    if mode == Mode::Embedded
        && workloads
            .iter()
            .any(|w| EXTRAS.contains(&w.as_str()) || w == CHAOS)
    {
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
        if id == CHAOS {
            chaos_run(&opts).await?;
            continue;
        }
        let line = run_workload(id, id, &opts, nodes_for(id, &opts)).await?;
        println!("{line}");
    }
    Ok(())
}
