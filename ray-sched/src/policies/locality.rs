//! Locality: go where the arguments are.

use ray_proto::NodeId;

use super::HybridPolicy;
use crate::policy::{Decision, Policy, Request};
use crate::view::ClusterView;

/// Places on the node holding the most bytes of the request's arguments
/// ([`Request::arg_bytes`]), which serves [`SchedulingStrategy::Locality`].
///
/// Among the listed nodes that hold some bytes and can take the request
/// now, the one with the most bytes wins (ties: lowest id). If none of them
/// can (or no bytes are listed), the [`HybridPolicy`] given to
/// [`LocalityPolicy::new`] decides. `arg_bytes` should hold one entry per
/// node; if a node is listed twice, its largest entry counts.
///
/// [`SchedulingStrategy::Locality`]: crate::SchedulingStrategy::Locality
#[derive(Clone, Debug)]
pub struct LocalityPolicy {
    fallback: HybridPolicy,
}

impl LocalityPolicy {
    /// A policy that falls back to `fallback` when no data node has room.
    pub fn new(fallback: HybridPolicy) -> Self {
        Self { fallback }
    }
}

impl Policy for LocalityPolicy {
    fn name(&self) -> &str {
        "locality"
    }

    fn decide(&mut self, req: &Request<'_>, view: &ClusterView) -> Decision {
        let mut best: Option<(u64, NodeId)> = None;
        for &(node, bytes) in req.arg_bytes {
            let better = match best {
                None => bytes > 0,
                Some((best_bytes, best_node)) => {
                    bytes > best_bytes || (bytes == best_bytes && node < best_node)
                }
            };
            if better
                && view
                    .node(node)
                    .is_some_and(|n| n.resources().can_acquire(req.resources))
            {
                best = Some((bytes, node));
            }
        }
        match best {
            Some((_, node)) => Decision::Node(node),
            None => self.fallback.decide(req, view),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policies::test_support::{cpus, load, view_of};
    use crate::policies::HybridConfig;
    use crate::policy::SchedulingStrategy;
    use crate::resources::ResourceSet;

    fn decide(v: &ClusterView, resources: &ResourceSet, arg_bytes: &[(NodeId, u64)]) -> Decision {
        let req = Request {
            resources,
            strategy: &SchedulingStrategy::Locality,
            local: NodeId(1),
            arg_bytes,
        };
        LocalityPolicy::new(HybridPolicy::new(HybridConfig::default())).decide(&req, v)
    }

    #[test]
    fn locality_picks_the_node_holding_the_most_argument_bytes() {
        let v = view_of(4);
        let bytes = [(NodeId(2), 10), (NodeId(3), 500), (NodeId(4), 20)];
        assert_eq!(decide(&v, &cpus(1), &bytes), Decision::Node(NodeId(3)));
    }

    #[test]
    fn locality_breaks_ties_by_lowest_id() {
        let v = view_of(4);
        let bytes = [(NodeId(4), 100), (NodeId(2), 100), (NodeId(3), 100)];
        assert_eq!(decide(&v, &cpus(1), &bytes), Decision::Node(NodeId(2)));
    }

    #[test]
    fn locality_takes_the_next_data_node_when_the_best_is_full() {
        let mut v = view_of(4);
        load(&mut v, 3, 4);
        let bytes = [(NodeId(2), 10), (NodeId(3), 500), (NodeId(4), 20)];
        assert_eq!(decide(&v, &cpus(1), &bytes), Decision::Node(NodeId(4)));
    }

    #[test]
    fn locality_falls_back_to_hybrid_when_no_data_node_has_room() {
        let mut v = view_of(3);
        load(&mut v, 3, 4);
        let bytes = [(NodeId(3), 500), (NodeId(9), 900), (NodeId(2), 0)];
        // Node 1 is local and idle: hybrid keeps it there.
        assert_eq!(decide(&v, &cpus(1), &bytes), Decision::Node(NodeId(1)));
        assert_eq!(decide(&v, &cpus(1), &[]), Decision::Node(NodeId(1)));
    }
}
