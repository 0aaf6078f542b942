//! The policies one node scheduler decides with, one per strategy.

use crate::policies::{
    HybridConfig, HybridPolicy, LocalityPolicy, NodeAffinityPolicy, SpreadPolicy,
};
use crate::policy::{Policy, SchedulingStrategy};
use crate::rng::SplitMix64;

/// A boxed policy a [`NodeScheduler`](super::NodeScheduler) can own and
/// move between threads.
pub type BoxedPolicy = Box<dyn Policy + Send>;

/// The policy a [`NodeScheduler`](super::NodeScheduler) uses for each
/// [`SchedulingStrategy`]. Placement-group tasks are not decided by a policy:
/// they go to the node holding their bundle.
///
/// Each policy keeps its own state for the scheduler's life (the seeded
/// RNG of the hybrid pick, the spread cursor), so the same seed and inputs
/// give the same decisions.
pub struct Policies {
    default: BoxedPolicy,
    spread: BoxedPolicy,
    affinity: BoxedPolicy,
    locality: BoxedPolicy,
}

impl Policies {
    /// The built-in policies: [`HybridPolicy`] (Ray's defaults) for
    /// `Default`, [`SpreadPolicy`], [`NodeAffinityPolicy`] and
    /// [`LocalityPolicy`] (each with a hybrid fallback), every RNG seeded
    /// from `seed`.
    pub fn standard(seed: u64) -> Self {
        Self::with_hybrid(HybridConfig {
            seed,
            ..HybridConfig::default()
        })
    }

    /// The built-in policies as [`Policies::standard`], with every hybrid
    /// policy (the default one and the fallbacks) set up by `config`; each
    /// RNG gets its own seed drawn from `config.seed`.
    pub fn with_hybrid(config: HybridConfig) -> Self {
        let mut seeds = SplitMix64::new(config.seed);
        let mut hybrid = || {
            HybridPolicy::new(HybridConfig {
                seed: seeds.next_u64(),
                ..config.clone()
            })
        };
        Self {
            default: Box::new(hybrid()),
            spread: Box::new(SpreadPolicy::new()),
            affinity: Box::new(NodeAffinityPolicy::new(hybrid())),
            locality: Box::new(LocalityPolicy::new(hybrid())),
        }
    }

    /// Replaces the policy of [`SchedulingStrategy::Default`] (plug in your
    /// own here).
    #[must_use]
    pub fn with_default(mut self, policy: BoxedPolicy) -> Self {
        self.default = policy;
        self
    }

    /// Replaces the policy of [`SchedulingStrategy::Spread`].
    #[must_use]
    pub fn with_spread(mut self, policy: BoxedPolicy) -> Self {
        self.spread = policy;
        self
    }

    /// Replaces the policy of [`SchedulingStrategy::NodeAffinity`].
    #[must_use]
    pub fn with_node_affinity(mut self, policy: BoxedPolicy) -> Self {
        self.affinity = policy;
        self
    }

    /// Replaces the policy of [`SchedulingStrategy::Locality`].
    #[must_use]
    pub fn with_locality(mut self, policy: BoxedPolicy) -> Self {
        self.locality = policy;
        self
    }

    /// The policy that decides `strategy`. Placement-group tasks never get
    /// here; they are routed to their bundle's node.
    pub(super) fn for_strategy(&mut self, strategy: &SchedulingStrategy) -> &mut BoxedPolicy {
        match strategy {
            SchedulingStrategy::Default | SchedulingStrategy::PlacementGroup { .. } => {
                &mut self.default
            }
            SchedulingStrategy::Spread => &mut self.spread,
            SchedulingStrategy::NodeAffinity { .. } => &mut self.affinity,
            SchedulingStrategy::Locality => &mut self.locality,
        }
    }
}

impl std::fmt::Debug for Policies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Policies")
            .field("default", &self.default.name())
            .field("spread", &self.spread.name())
            .field("affinity", &self.affinity.name())
            .field("locality", &self.locality.name())
            .finish()
    }
}
