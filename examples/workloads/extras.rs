//! The extra measurements of cluster mode (issue 4): `ready` (start-up),
//! `transfer` (100 MiB to another node) and `spread` (1,000 actors over the
//! nodes); `scale` is in `main.rs`, since it runs W1 per cluster size.

use std::time::Instant;

use anyhow::{ensure, Context};
use ray_core::prelude::*;
use ray_core::Cluster;
use serde_json::{json, Value};

use crate::measure::{gb_per_second, Run};
use crate::{cluster, micro, Options};

/// `ready`: one fresh `Cluster::local(n)` (n: `--nodes`, default 2) from
/// nothing to tasks on every node. The headline is `Cluster::local(n)`
/// returning (every node registered and known to the others).
pub(crate) async fn ready(opts: &Options) -> anyhow::Result<Run> {
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
pub(crate) fn ready_nodes(opts: &Options) -> usize {
    opts.nodes.unwrap_or(2)
}

/// `transfer`: a 100 MiB object put by the driver and read in place
/// (summed) by a task pinned to another node (the second, on 2 nodes);
/// the worker there is started, and has fetched one small object, before
/// timing.
pub(crate) async fn transfer(ray: &Ray) -> anyhow::Result<Run> {
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
pub(crate) async fn spread(ray: &Ray, n: usize) -> anyhow::Result<Run> {
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
