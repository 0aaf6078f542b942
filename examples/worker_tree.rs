//! W7, the worker tree: actors that create actors and block on them.
//!
//! A root actor of depth 3 where each actor makes 1 or 2 children (fixed by
//! `--seed`, default 42); `process()` calls each child's `process()` 10 times
//! and waits, and leaves sleep 5 ms per call. Parents blocked in `get` hand
//! their CPU-pool slot over, so the tree cannot deadlock the pool and sibling
//! subtrees run in parallel.
//!
//! `cargo run --release --example worker_tree -- [--seed N] [--cpus N]`

use anyhow::{bail, Context};
use ray_core::Config;

#[path = "shapes/tree.rs"]
mod tree;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut seed = tree::DEFAULT_SEED;
    let mut cpus = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let value = args
            .next()
            .with_context(|| format!("{arg} needs a value"))?;
        match arg.as_str() {
            "--seed" => seed = value.parse().with_context(|| format!("--seed {value}"))?,
            "--cpus" => cpus = Some(value.parse().with_context(|| format!("--cpus {value}"))?),
            other => bail!("unknown argument {other}; usage: worker_tree [--seed N] [--cpus N]"),
        }
    }
    let ray = ray_core::init_with(Config {
        num_cpus: cpus,
        ..Config::default()
    })
    .await?;
    let run = tree::run(&ray, seed).await?;
    let total_cpus = ray.stats().total.get("CPU").to_f64();
    println!(
        "worker tree: depth {}, seed {seed}, {total_cpus} CPUs",
        tree::DEPTH
    );
    println!("actors created: {}", run.actors);
    println!("process() calls: {}", run.calls);
    println!("elapsed: {:.3} s", run.seconds);
    ray.shutdown();
    Ok(())
}
