//! Node affinity: a named node, hard or soft.

use super::{infeasible, HybridPolicy};
use crate::policy::{Decision, Policy, Request, SchedulingStrategy};
use crate::view::ClusterView;

/// Places on the node named by [`SchedulingStrategy::NodeAffinity`].
///
/// | the named node…                         | hard                       | soft     |
/// |-----------------------------------------|----------------------------|----------|
/// | can take the request now                | that node                  | that node|
/// | could hold it, but is busy              | [`Decision::Wait`]         | fallback |
/// | is unknown (dead) or too small for it   | [`Decision::Infeasible`]   | fallback |
///
/// The fallback is the [`HybridPolicy`] given to [`NodeAffinityPolicy::new`];
/// a request with any other strategy goes straight to it.
#[derive(Clone, Debug)]
pub struct NodeAffinityPolicy {
    fallback: HybridPolicy,
}

impl NodeAffinityPolicy {
    /// A policy that falls back to `fallback` for soft affinity.
    pub fn new(fallback: HybridPolicy) -> Self {
        Self { fallback }
    }
}

impl Policy for NodeAffinityPolicy {
    fn name(&self) -> &str {
        "node_affinity"
    }

    fn decide(&mut self, req: &Request<'_>, view: &ClusterView) -> Decision {
        let SchedulingStrategy::NodeAffinity { node, soft } = *req.strategy else {
            return self.fallback.decide(req, view);
        };
        let Some(target) = view.node(node) else {
            return if soft {
                self.fallback.decide(req, view)
            } else {
                infeasible(req, view, format!("node {node} is not in the cluster"))
            };
        };
        let resources = target.resources();
        if resources.can_acquire(req.resources) {
            Decision::Node(node)
        } else if soft {
            self.fallback.decide(req, view)
        } else if resources.is_feasible(req.resources) {
            Decision::Wait
        } else {
            infeasible(
                req,
                view,
                format!("node {node} has only {} in total", resources.total()),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use ray_proto::NodeId;

    use super::*;
    use crate::policies::test_support::{cpus, load, view_of};
    use crate::policies::HybridConfig;
    use crate::resources::ResourceSet;

    fn decide(v: &ClusterView, resources: &ResourceSet, node: u64, soft: bool) -> Decision {
        let strategy = SchedulingStrategy::NodeAffinity {
            node: NodeId(node),
            soft,
        };
        let req = Request {
            resources,
            strategy: &strategy,
            local: NodeId(1),
            arg_bytes: &[],
        };
        NodeAffinityPolicy::new(HybridPolicy::new(HybridConfig::default())).decide(&req, v)
    }

    #[test]
    fn affinity_places_on_the_named_node_when_it_fits_even_if_busy() {
        let mut v = view_of(3);
        load(&mut v, 3, 3); // past the hybrid threshold, still room for one
        for soft in [false, true] {
            assert_eq!(decide(&v, &cpus(1), 3, soft), Decision::Node(NodeId(3)));
        }
    }

    #[test]
    fn hard_affinity_waits_for_a_busy_node_and_soft_falls_back() {
        let mut v = view_of(3);
        load(&mut v, 3, 4);
        assert_eq!(decide(&v, &cpus(1), 3, false), Decision::Wait);
        assert_eq!(decide(&v, &cpus(1), 3, true), Decision::Node(NodeId(1)));
    }

    #[test]
    fn hard_affinity_to_an_unknown_or_too_small_node_is_infeasible_and_soft_falls_back() {
        let v = view_of(3);
        let Decision::Infeasible(report) = decide(&v, &cpus(1), 7, false) else {
            panic!("node 7 is not in the view");
        };
        assert_eq!(report.reason, "node node-7 is not in the cluster");
        let Decision::Infeasible(report) = decide(&v, &cpus(5), 2, false) else {
            panic!("node 2 has 4 CPUs");
        };
        assert_eq!(report.reason, "node node-2 has only {CPU: 4} in total");
        assert_eq!(decide(&v, &cpus(1), 7, true), Decision::Node(NodeId(1)));
        assert!(matches!(
            decide(&v, &cpus(5), 2, true),
            Decision::Infeasible(_)
        ));
    }
}
