//! W7, the worker tree: actors that create actors and block on them.
//!
//! A root actor of depth 3 where each actor makes 1 or 2 children (fixed by
//! `--seed`, default 42); `process()` calls each child's `process()` 10 times
//! and waits, and leaves sleep 5 ms per call. Parents blocked in `get` hand
//! their CPU-pool slot over, so the tree cannot deadlock the pool and sibling
//! subtrees run in parallel.
//!
//! The run is recorded for insight (`Config::insight`). Embedded, the event
//! log goes to `target/insight/worker_tree/events.log` and at exit the five
//! views are written next to it (or under `--insight-dir DIR`) and their
//! paths printed; `rayrs insight export --log …/events.log` reads the log
//! again. On a cluster (`RAY_ADDRESS` set) every process ships its records
//! to the head: `rayrs insight export --address …` shows the views.
//!
//! `RAYRS_DASHBOARD=1` also serves the insight dashboard (its URL is
//! printed); `--hold` keeps the process, and the dashboard, up after the
//! run until Ctrl-C.
//!
//! `cargo run --release --example worker_tree -- [--seed N] [--cpus N] [--insight-dir DIR] [--hold]`

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use ray_core::insight::InsightOptions;
use ray_core::Config;

#[path = "shapes/tree.rs"]
mod tree;

/// Where the views go unless `--insight-dir` says otherwise.
const DEFAULT_INSIGHT_DIR: &str = "target/insight/worker_tree";

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut seed = tree::DEFAULT_SEED;
    let mut cpus = None;
    let mut insight_dir = PathBuf::from(DEFAULT_INSIGHT_DIR);
    let mut hold = false;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        if arg == "--hold" {
            hold = true;
            continue;
        }
        let value = args
            .next()
            .with_context(|| format!("{arg} needs a value"))?;
        match arg.as_str() {
            "--seed" => seed = value.parse().with_context(|| format!("--seed {value}"))?,
            "--cpus" => cpus = Some(value.parse().with_context(|| format!("--cpus {value}"))?),
            "--insight-dir" => insight_dir = PathBuf::from(value),
            other => bail!(
                "unknown argument {other}; \
                 usage: worker_tree [--seed N] [--cpus N] [--insight-dir DIR] [--hold]"
            ),
        }
    }
    let cluster = std::env::var("RAY_ADDRESS").is_ok_and(|a| !a.is_empty());
    let log = (!cluster).then(|| insight_dir.join("events.log"));
    if let Some(dir) = log.as_ref().and_then(|l| l.parent()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let ray = ray_core::init_with(Config {
        num_cpus: cpus,
        // RAYRS_DASHBOARD=1 serves the dashboard too (its URL is printed).
        insight: Some(InsightOptions {
            log: log.clone(),
            ..InsightOptions::from_env().unwrap_or_default()
        }),
        ..Config::default()
    })
    .await?;
    let insight = ray.insight().context("the runtime records")?;
    let run = tree::run(&ray, seed).await?;
    let total_cpus = ray.stats().total.get("CPU").to_f64();
    println!(
        "worker tree: depth {}, seed {seed}, {total_cpus} CPUs",
        tree::DEPTH
    );
    println!("actors created: {}", run.actors);
    println!("process() calls: {}", run.calls);
    println!("elapsed: {:.3} s", run.seconds);
    if !insight.settle(Duration::from_secs(5)).await {
        eprintln!("insight: some spans were still open after 5 s");
    }
    if let Some(top) = insight.top(3) {
        print!("{top}");
    }
    for path in insight.write_views(&insight_dir)? {
        println!("insight: {}", path.display());
    }
    match log {
        Some(log) => println!("insight: {} (event log)", log.display()),
        None => println!("insight: on the head (rayrs insight export --address ...)"),
    }
    if hold {
        // Keep serving the dashboard (RAYRS_DASHBOARD) until interrupted.
        match insight.dashboard_url() {
            Some(url) => println!("insight: dashboard {url} (Ctrl-C to stop)"),
            None => {
                println!("insight: holding (set RAYRS_DASHBOARD=1 for a dashboard); Ctrl-C to stop")
            }
        }
        tokio::signal::ctrl_c()
            .await
            .context("waiting for Ctrl-C")?;
    }
    ray.shutdown();
    Ok(())
}
