//! What the seeded simulations of the cluster's sans-IO cores share:
//! which seeds a run covers, and the replay of one failing seed.

/// Runs `run` for every seed of the run: `RAYRS_SIM_SEEDS` of them, or
/// 2,000 (CI sets 10,000). A seed that fails or panics fails the test,
/// naming the seed to replay.
pub(crate) fn run_seeds(run: impl Fn(u64) -> Result<(), String> + std::panic::RefUnwindSafe) {
    let n = std::env::var("RAYRS_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2_000);
    for seed in 0..n {
        match std::panic::catch_unwind(|| run(seed)) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => panic!("seed {seed}: {e} (replay: RAYRS_SIM_SEED={seed})"),
            Err(_) => panic!("seed {seed} panicked (replay: RAYRS_SIM_SEED={seed})"),
        }
    }
}

/// The seed `RAYRS_SIM_SEED` names, to replay a failure found by
/// [`run_seeds`]; `None` when it is not set.
pub(crate) fn replay_seed() -> Option<u64> {
    std::env::var("RAYRS_SIM_SEED").ok()?.parse().ok()
}
