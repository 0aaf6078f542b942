//! What the seeded simulations of the cluster's sans-IO cores share:
//! which seeds a run covers, the replay of one failing seed, and their
//! source of picks.

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

/// A simulation's picks, from ray-sched's seeded SplitMix64: a seed
/// replays exactly.
pub(crate) struct Rng(ray_sched::SplitMix64);

impl Rng {
    /// Picks for `seed`.
    pub(crate) fn new(seed: u64) -> Self {
        Self(ray_sched::SplitMix64::new(seed))
    }

    /// A number below `n` (0 when `n` is 0).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.0.below(usize::try_from(n).unwrap_or(usize::MAX)) as u64
    }

    /// `true` with `percent` % chance.
    pub(crate) fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}
