//! Deterministic simulation of the bottom-up scheduler on a large cluster:
//! 1,000 nodes and 1,000,000 tasks by default, with stale gossiped views,
//! spills and refusals, placement groups, and nodes joining and leaving.
//!
//! The seed is printed; set `RAY_SIM_SEED` to replay one. Run with
//! `--nocapture` to see the figures of a run.

mod sim;

use std::time::Instant;

use sim::{Config, Sim};

const DEFAULT_SEED: u64 = 0x5eed_0003;

fn seed() -> u64 {
    match std::env::var("RAY_SIM_SEED") {
        Ok(s) => s
            .parse()
            .unwrap_or_else(|_| panic!("RAY_SIM_SEED must be a u64, got {s:?}")),
        Err(_) => DEFAULT_SEED,
    }
}

fn env_usize(name: &str) -> Option<usize> {
    let s = std::env::var(name).ok()?;
    Some(
        s.parse()
            .unwrap_or_else(|_| panic!("{name} must be a number, got {s:?}")),
    )
}

#[test]
fn thousand_nodes_million_tasks_keep_every_invariant() {
    let seed = seed();
    println!("simulation seed: {seed} (set RAY_SIM_SEED to replay)");
    let mut cfg = Config::full(seed);
    // For experiments only: the test's scale is 1,000 nodes, 1,000,000 tasks.
    if let Some(n) = env_usize("RAY_SIM_NODES") {
        cfg.nodes = n;
    }
    if let Some(t) = env_usize("RAY_SIM_TASKS") {
        cfg.tasks = t;
        cfg.groups = cfg.groups.min(t / 5_000).max(1);
    }
    let started = Instant::now();
    let report = Sim::new(cfg.clone()).run();
    println!("{report:#?}\nwall time: {:?}", started.elapsed());
    assert_eq!(report.completed + report.never_ran, cfg.tasks as u64);
    assert!(
        report.spills > 0 && report.refusals > 0,
        "views were stale enough to refuse"
    );
    assert!(
        report.late_runs > 0,
        "tasks infeasible before a join ran after it"
    );
    assert!(report.never_ran > 0, "tasks no node can run were reported");
}

#[test]
fn same_seed_gives_the_same_trace() {
    let seed = seed();
    println!("simulation seed: {seed} (set RAY_SIM_SEED to replay)");
    let cfg = Config::replay(seed);
    let first = Sim::new(cfg.clone()).run();
    let second = Sim::new(cfg.clone()).run();
    assert_eq!(
        first, second,
        "the same seed gives the same trace (seed {seed})"
    );
    let other = Sim::new(Config::replay(seed ^ 1)).run();
    assert_ne!(
        first.trace_hash, other.trace_hash,
        "another seed, another trace"
    );
}
