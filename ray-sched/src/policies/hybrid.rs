//! Ray's default policy: stay local while the local node is not busy, else
//! spill to one of the least-loaded nodes.

use ray_proto::NodeId;

use super::wait_or_infeasible;
use crate::policy::{Decision, Policy, Request};
use crate::rng::SplitMix64;
use crate::view::ClusterView;

/// Settings of a [`HybridPolicy`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HybridConfig {
    /// Utilization, in 1/10 000 like [`NodeView::utilization`], below which
    /// the local node keeps work for itself. Ray's default is 0.5 (`5_000`).
    /// A node exactly at the threshold counts as busy.
    ///
    /// [`NodeView::utilization`]: crate::NodeView::utilization
    pub spread_threshold: u32,
    /// How many of the least-loaded nodes that fit the random pick chooses
    /// among when spilling; 0 counts as 1. Ray uses 20% of the nodes; a
    /// small fixed number keeps the decision O(k) and still spreads a burst
    /// of spills over several nodes before the view catches up.
    pub top_k: usize,
    /// Seed of the random pick: the same seed and inputs give the same
    /// decisions.
    pub seed: u64,
}

impl HybridConfig {
    /// Ray's default threshold: 0.5.
    pub const DEFAULT_SPREAD_THRESHOLD: u32 = 5_000;
    /// The default `top_k`.
    pub const DEFAULT_TOP_K: usize = 5;
}

impl Default for HybridConfig {
    /// Threshold 0.5, top 5, seed 0.
    fn default() -> Self {
        Self {
            spread_threshold: Self::DEFAULT_SPREAD_THRESHOLD,
            top_k: Self::DEFAULT_TOP_K,
            seed: 0,
        }
    }
}

/// Ray's hybrid policy, which serves [`SchedulingStrategy::Default`].
///
/// 1. The local node ([`Request::local`]) takes the request if its
///    utilization is below [`HybridConfig::spread_threshold`] and the
///    request fits there now. This is O(1).
/// 2. Otherwise, among the nodes that can take it now, the `top_k` least
///    utilized (ties by id) are collected and one is picked with the seeded
///    RNG. The view keeps its nodes ordered by utilization, so this walks
///    from the least loaded node and stops after `top_k` fits: O(k log n)
///    when the least-loaded nodes fit. A request only a few nodes can hold
///    (a GPU on a mostly-CPU cluster) walks further, up to every node.
/// 3. If no node can take it now: [`Decision::Wait`] if some node could
///    ever hold it, [`Decision::Infeasible`] if none could.
///
/// The strategy in the request is not looked at (it is copied into an
/// infeasible report), so other policies use this one as their fallback.
///
/// [`SchedulingStrategy::Default`]: crate::SchedulingStrategy::Default
#[derive(Clone, Debug)]
pub struct HybridPolicy {
    config: HybridConfig,
    rng: SplitMix64,
    /// Candidates of the current decision, kept to avoid an allocation per
    /// decision.
    candidates: Vec<NodeId>,
}

impl HybridPolicy {
    /// A policy with `config`, its RNG seeded from `config.seed`.
    pub fn new(config: HybridConfig) -> Self {
        let rng = SplitMix64::new(config.seed);
        let candidates = Vec::with_capacity(config.top_k.max(1));
        Self {
            config,
            rng,
            candidates,
        }
    }

    /// The settings it was made with.
    pub fn config(&self) -> &HybridConfig {
        &self.config
    }

    /// Step 2 and 3 of the policy: a pick among the least-loaded nodes that
    /// can take `req` now, ignoring the local preference.
    pub fn spill(&mut self, req: &Request<'_>, view: &ClusterView) -> Decision {
        let k = self.config.top_k.max(1);
        self.candidates.clear();
        // A node lacking one of the requested names can never take it: skip
        // it with one AND instead of a full `can_acquire`.
        let req_mask = req.resources.name_mask();
        for node in view.nodes_by_utilization() {
            if !node.lacks_some_name(req_mask) && node.resources().can_acquire(req.resources) {
                self.candidates.push(node.id());
                if self.candidates.len() == k {
                    break;
                }
            }
        }
        match self.candidates.len() {
            0 => wait_or_infeasible(req, view),
            1 => Decision::Node(self.candidates[0]),
            n => Decision::Node(self.candidates[self.rng.below(n)]),
        }
    }
}

impl Policy for HybridPolicy {
    fn name(&self) -> &str {
        "hybrid"
    }

    fn decide(&mut self, req: &Request<'_>, view: &ClusterView) -> Decision {
        if let Some(local) = view.node(req.local) {
            if local.utilization() < self.config.spread_threshold
                && local.resources().can_acquire(req.resources)
            {
                return Decision::Node(req.local);
            }
        }
        self.spill(req, view)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::policies::test_support::{cpus, load, view_of};
    use crate::policy::SchedulingStrategy;
    use crate::quantity::Quantity;
    use crate::resources::{ResourceSet, GPU};

    fn request<'a>(resources: &'a ResourceSet, local: u64) -> Request<'a> {
        Request {
            resources,
            strategy: &SchedulingStrategy::Default,
            local: NodeId(local),
            arg_bytes: &[],
        }
    }

    fn hybrid(seed: u64) -> HybridPolicy {
        HybridPolicy::new(HybridConfig {
            seed,
            ..HybridConfig::default()
        })
    }

    #[test]
    fn hybrid_prefers_the_local_node_below_the_threshold() {
        let mut v = view_of(4);
        load(&mut v, 3, 1); // 25%: below 50%
        let one = cpus(1);
        let mut p = hybrid(1);
        for _ in 0..20 {
            assert_eq!(p.decide(&request(&one, 3), &v), Decision::Node(NodeId(3)));
        }
    }

    #[test]
    fn hybrid_spills_to_the_least_loaded_node_at_or_above_the_threshold() {
        let mut v = view_of(4);
        load(&mut v, 1, 2); // 50%: at the threshold counts as busy
        load(&mut v, 2, 3);
        load(&mut v, 3, 1);
        load(&mut v, 4, 2);
        let one = cpus(1);
        let mut p = HybridPolicy::new(HybridConfig {
            top_k: 1,
            ..HybridConfig::default()
        });
        assert_eq!(p.decide(&request(&one, 1), &v), Decision::Node(NodeId(3)));
    }

    #[test]
    fn hybrid_spills_when_the_local_node_is_idle_but_too_small() {
        let mut v = view_of(2);
        v.add_node(NodeId(9), cpus(1), BTreeMap::new());
        load(&mut v, 2, 1);
        let two = cpus(2);
        let mut p = HybridPolicy::new(HybridConfig {
            top_k: 1,
            ..HybridConfig::default()
        });
        // Node 9 is idle but holds 1 CPU; node 1 is the least loaded that fits.
        assert_eq!(p.decide(&request(&two, 9), &v), Decision::Node(NodeId(1)));
    }

    #[test]
    fn hybrid_picks_among_the_top_k_least_loaded_only() {
        let mut v = view_of(10);
        for node in 4..=10 {
            load(&mut v, node, 2);
        }
        load(&mut v, 10, 1); // local, busy
        let one = cpus(1);
        let mut p = HybridPolicy::new(HybridConfig {
            top_k: 3,
            seed: 42,
            ..HybridConfig::default()
        });
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..200 {
            match p.decide(&request(&one, 10), &v) {
                Decision::Node(n) => seen.insert(n),
                other => panic!("expected a node, got {other:?}"),
            };
        }
        assert_eq!(
            seen.into_iter().collect::<Vec<_>>(),
            [NodeId(1), NodeId(2), NodeId(3)]
        );
    }

    #[test]
    fn hybrid_never_picks_a_node_that_cannot_take_the_request_now() {
        let mut v = view_of(20); // CPU-only, idle: the least loaded
        let gpu_node = ResourceSet::cpu(Quantity::from_units(4)).with(GPU, Quantity::ONE);
        v.add_node(NodeId(30), gpu_node.clone(), BTreeMap::new());
        v.add_node(NodeId(31), gpu_node, BTreeMap::new());
        load(&mut v, 30, 3);
        load(&mut v, 31, 2);
        let gpu = ResourceSet::new().with(GPU, Quantity::ONE);
        let mut p = hybrid(9);
        for local in [1, 30] {
            for _ in 0..50 {
                let d = p.decide(&request(&gpu, local), &v);
                assert!(
                    matches!(d, Decision::Node(NodeId(30 | 31))),
                    "{d:?} from {local}"
                );
            }
        }
        assert!(v.try_acquire(NodeId(30), &gpu));
        assert!(v.try_acquire(NodeId(31), &gpu));
        assert_eq!(p.decide(&request(&gpu, 1), &v), Decision::Wait);
    }

    #[test]
    fn hybrid_is_deterministic_for_a_seed() {
        let mut v = view_of(50);
        load(&mut v, 1, 3);
        let one = cpus(1);
        let run = |seed| {
            let mut p = hybrid(seed);
            (0..100)
                .map(|_| p.decide(&request(&one, 1), &v))
                .collect::<Vec<_>>()
        };
        assert_eq!(run(5), run(5));
        assert_ne!(run(5), run(6), "different seeds pick differently");
    }

    #[test]
    fn hybrid_waits_when_busy_and_reports_infeasible_when_nothing_could_fit() {
        let mut v = view_of(2);
        load(&mut v, 1, 4);
        load(&mut v, 2, 4);
        let mut p = hybrid(0);
        assert_eq!(p.decide(&request(&cpus(1), 1), &v), Decision::Wait);
        let gpu = ResourceSet::new().with(GPU, Quantity::ONE);
        let Decision::Infeasible(report) = p.decide(&request(&gpu, 1), &v) else {
            panic!("a GPU fits nowhere");
        };
        assert_eq!(report.request, gpu);
        assert_eq!(report.cluster, v.summary());
        assert_eq!(
            report.to_string(),
            "request {GPU: 1} (Default) can never be placed: no node of 2 has {GPU: 1} \
             in total; cluster: 2 nodes, total {CPU: 8}, available {}"
        );
    }

    #[test]
    fn hybrid_on_an_empty_view_is_infeasible() {
        let v = ClusterView::new();
        let one = cpus(1);
        assert!(matches!(
            hybrid(0).decide(&request(&one, 1), &v),
            Decision::Infeasible(_)
        ));
    }
}
