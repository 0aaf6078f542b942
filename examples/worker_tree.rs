//! W7, the worker tree: actors that create actors and block on them.
//!
//! A root actor of depth 3 where each actor makes 1 or 2 children (fixed by
//! `--seed`, default 42); `process()` calls each child's `process()` 10 times
//! and waits, and leaves sleep 5 ms per call. Parents blocked in `get` hand
//! their CPU-pool slot over, so the tree cannot deadlock the pool and sibling
//! subtrees run in parallel.
//!
//! In embedded mode the run is recorded for insight: an `InsightLayer` is the
//! global subscriber from the start, and at exit the five views are written
//! to `target/insight/worker_tree/` (or `--insight-dir DIR`) and their paths
//! printed. In cluster mode (`RAY_ADDRESS` set) recording is skipped.
//!
//! `cargo run --release --example worker_tree -- [--seed N] [--cpus N] [--insight-dir DIR]`

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use ray_core::Config;

#[path = "shapes/recording.rs"]
mod recording;
#[path = "shapes/tree.rs"]
mod tree;

/// Where the views go unless `--insight-dir` says otherwise.
const DEFAULT_INSIGHT_DIR: &str = "target/insight/worker_tree";

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut seed = tree::DEFAULT_SEED;
    let mut cpus = None;
    let mut insight_dir = PathBuf::from(DEFAULT_INSIGHT_DIR);
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let value = args
            .next()
            .with_context(|| format!("{arg} needs a value"))?;
        match arg.as_str() {
            "--seed" => seed = value.parse().with_context(|| format!("--seed {value}"))?,
            "--cpus" => cpus = Some(value.parse().with_context(|| format!("--cpus {value}"))?),
            "--insight-dir" => insight_dir = PathBuf::from(value),
            other => bail!(
                "unknown argument {other}; \
                 usage: worker_tree [--seed N] [--cpus N] [--insight-dir DIR]"
            ),
        }
    }
    let cluster = std::env::var("RAY_ADDRESS").is_ok_and(|a| !a.is_empty());
    let recording = if cluster {
        eprintln!("insight: cluster mode (RAY_ADDRESS set), not recording");
        None
    } else {
        Some(recording::Recording::start()?)
    };
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
    if let Some(recording) = recording {
        let views = recording.finish(Duration::from_secs(5)).await?;
        for path in recording::write_views(&views, &insight_dir)? {
            println!("insight: {}", path.display());
        }
    }
    Ok(())
}
