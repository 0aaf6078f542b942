//! Spread: round-robin over the nodes that fit.

use ray_proto::NodeId;

use super::wait_or_infeasible;
use crate::policy::{Decision, Policy, Request};
use crate::view::ClusterView;

/// Round-robin over the nodes that can take the request now, which serves
/// [`SchedulingStrategy::Spread`].
///
/// Each decision starts at the first node (in id order) after the one it
/// picked last, wrapping around, and takes the first that fits now; nodes
/// that join or leave in between do not upset the cycle. Nothing fits now:
/// [`Decision::Wait`] or [`Decision::Infeasible`] as in every policy.
///
/// [`SchedulingStrategy::Spread`]: crate::SchedulingStrategy::Spread
#[derive(Clone, Debug, Default)]
pub struct SpreadPolicy {
    last: Option<NodeId>,
}

impl SpreadPolicy {
    /// A policy that starts with the lowest node id.
    pub fn new() -> Self {
        Self::default()
    }
}

impl Policy for SpreadPolicy {
    fn name(&self) -> &str {
        "spread"
    }

    fn decide(&mut self, req: &Request<'_>, view: &ClusterView) -> Decision {
        let nodes = view.nodes();
        let start = self
            .last
            .map_or(0, |last| nodes.partition_point(|n| n.id() <= last));
        let (wrapped, rest) = nodes.split_at(start);
        let pick = rest
            .iter()
            .chain(wrapped)
            .find(|n| n.resources().can_acquire(req.resources));
        match pick {
            Some(node) => {
                self.last = Some(node.id());
                Decision::Node(node.id())
            }
            None => wait_or_infeasible(req, view),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::policies::test_support::{cpus, load, view_of};
    use crate::policy::SchedulingStrategy;
    use crate::resources::ResourceSet;

    fn request(resources: &ResourceSet) -> Request<'_> {
        Request {
            resources,
            strategy: &SchedulingStrategy::Spread,
            local: NodeId(1),
            arg_bytes: &[],
        }
    }

    fn picks(p: &mut SpreadPolicy, v: &ClusterView, req: &ResourceSet, n: usize) -> Vec<u64> {
        (0..n)
            .map(|_| match p.decide(&request(req), v) {
                Decision::Node(id) => id.0,
                other => panic!("expected a node, got {other:?}"),
            })
            .collect()
    }

    #[test]
    fn spread_cycles_through_the_nodes() {
        let v = view_of(3);
        let mut p = SpreadPolicy::new();
        assert_eq!(picks(&mut p, &v, &cpus(1), 7), [1, 2, 3, 1, 2, 3, 1]);
    }

    #[test]
    fn spread_skips_nodes_that_cannot_take_it_now() {
        let mut v = view_of(4);
        load(&mut v, 2, 4);
        let mut p = SpreadPolicy::new();
        assert_eq!(picks(&mut p, &v, &cpus(1), 5), [1, 3, 4, 1, 3]);
    }

    #[test]
    fn spread_continues_after_the_last_pick_when_nodes_join_and_leave() {
        let mut v = view_of(4);
        let mut p = SpreadPolicy::new();
        assert_eq!(picks(&mut p, &v, &cpus(1), 2), [1, 2]);
        v.remove_node(NodeId(2));
        v.add_node(NodeId(5), cpus(4), BTreeMap::new());
        assert_eq!(picks(&mut p, &v, &cpus(1), 4), [3, 4, 5, 1]);
    }

    #[test]
    fn spread_waits_or_reports_infeasible_when_nothing_fits() {
        let mut v = view_of(2);
        load(&mut v, 1, 4);
        load(&mut v, 2, 4);
        let mut p = SpreadPolicy::new();
        assert_eq!(p.decide(&request(&cpus(1)), &v), Decision::Wait);
        assert!(matches!(
            p.decide(&request(&cpus(5)), &v),
            Decision::Infeasible(_)
        ));
    }
}
