//! The built-in placement policies, one per [`SchedulingStrategy`] except
//! placement groups.
//!
//! | strategy                                   | policy                  |
//! |--------------------------------------------|-------------------------|
//! | [`SchedulingStrategy::Default`]            | [`HybridPolicy`]        |
//! | [`SchedulingStrategy::Spread`]             | [`SpreadPolicy`]        |
//! | [`SchedulingStrategy::NodeAffinity`]       | [`NodeAffinityPolicy`]  |
//! | [`SchedulingStrategy::Locality`]           | [`LocalityPolicy`]      |
//! | [`SchedulingStrategy::PlacementGroup`]     | the placement-group code|
//!
//! A router keeps one instance of each for the life of a scheduler and
//! picks by `req.strategy`: the policies carry state between decisions (the
//! seeded RNG of the hybrid pick, the round-robin cursor of spread), so
//! making a fresh one per decision would give up both the spreading and
//! the variety of the random pick. [`NodeAffinityPolicy`] and
//! [`LocalityPolicy`] own a [`HybridPolicy`] as their fallback; give it its
//! own seed.
//!
//! Every policy answers the same way when nothing fits now:
//! [`Decision::Wait`] if some node could hold the request once resources
//! free up, [`Decision::Infeasible`] (with [`ClusterView::summary`]) if none
//! ever could. None of them acquires anything: the caller acquires on the
//! chosen node and asks again if that fails.
//!
//! ```
//! use std::collections::BTreeMap;
//! use ray_proto::NodeId;
//! use ray_sched::{
//!     ClusterView, Decision, HybridConfig, HybridPolicy, Policy, Quantity, Request,
//!     ResourceSet, SchedulingStrategy,
//! };
//!
//! let mut view = ClusterView::new();
//! for id in 1..=3 {
//!     view.add_node(NodeId(id), ResourceSet::cpu(Quantity::from_units(4)), BTreeMap::new());
//! }
//! let mut hybrid = HybridPolicy::new(HybridConfig { seed: 7, ..HybridConfig::default() });
//! let one_cpu = ResourceSet::cpu(Quantity::ONE);
//! let req = Request {
//!     resources: &one_cpu,
//!     strategy: &SchedulingStrategy::Default,
//!     local: NodeId(2),
//!     arg_bytes: &[],
//! };
//! // The local node is idle: it takes the task.
//! assert_eq!(hybrid.decide(&req, &view), Decision::Node(NodeId(2)));
//! ```

mod affinity;
mod hybrid;
mod locality;
mod spread;

pub use affinity::NodeAffinityPolicy;
pub use hybrid::{HybridConfig, HybridPolicy};
pub use locality::LocalityPolicy;
pub use spread::SpreadPolicy;

#[cfg(doc)]
use crate::policy::SchedulingStrategy;
use crate::policy::{Decision, InfeasibleReport, Request};
use crate::view::ClusterView;

/// The answer when no node can take `req` now: wait if some node could
/// ever hold it, else report it infeasible.
pub(crate) fn wait_or_infeasible(req: &Request<'_>, view: &ClusterView) -> Decision {
    if view.feasible_somewhere(req.resources) {
        Decision::Wait
    } else {
        infeasible(
            req,
            view,
            format!("no node of {} has {} in total", view.len(), req.resources),
        )
    }
}

/// [`Decision::Infeasible`] for `req`, with the cluster's summary.
pub(crate) fn infeasible(req: &Request<'_>, view: &ClusterView, reason: String) -> Decision {
    Decision::Infeasible(InfeasibleReport {
        request: req.resources.clone(),
        strategy: req.strategy.clone(),
        cluster: view.summary(),
        reason,
    })
}

/// Shared set-up of the policies' unit tests.
#[cfg(test)]
pub(crate) mod test_support {
    use std::collections::BTreeMap;

    use ray_proto::NodeId;

    use crate::quantity::Quantity;
    use crate::resources::ResourceSet;
    use crate::view::ClusterView;

    /// `n` whole CPUs.
    pub fn cpus(n: u64) -> ResourceSet {
        ResourceSet::cpu(Quantity::from_units(n))
    }

    /// A view of nodes `1..=n`, each with 4 CPUs, none used.
    pub fn view_of(n: u64) -> ClusterView {
        let mut v = ClusterView::new();
        for id in 1..=n {
            v.add_node(NodeId(id), cpus(4), BTreeMap::new());
        }
        v
    }

    /// Takes `used` CPUs on `node`.
    pub fn load(v: &mut ClusterView, node: u64, used: u64) {
        assert!(
            v.try_acquire(NodeId(node), &cpus(used)),
            "fits in the test set-up"
        );
    }
}
