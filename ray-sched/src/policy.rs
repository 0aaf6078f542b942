//! What a placement decision takes and gives, and the trait every policy
//! implements.

use std::fmt;

use ray_proto::{NodeId, PlacementGroupId};

use crate::resources::ResourceSet;
use crate::view::{ClusterSummary, ClusterView};

/// How a task or actor wants to be placed, chosen per call.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum SchedulingStrategy {
    /// Ray's hybrid policy: the local node until it is busy past a threshold,
    /// then the least-loaded feasible node (a seeded pick among the top k).
    #[default]
    Default,
    /// Spread over nodes, round-robin among those that fit.
    Spread,
    /// A given node; if `soft`, another node when that one cannot take it.
    NodeAffinity {
        /// The node wanted.
        node: NodeId,
        /// Whether another node will do when it cannot.
        soft: bool,
    },
    /// The node holding the most bytes of the request's arguments.
    Locality,
    /// Inside a placement group's bundle (`None`: any bundle that fits).
    PlacementGroup {
        /// The group.
        group: PlacementGroupId,
        /// The bundle index, or any.
        bundle: Option<usize>,
    },
}

/// One request to place: what it needs and how it wants to be placed.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    /// Resources needed.
    pub resources: &'a ResourceSet,
    /// How to place it.
    pub strategy: &'a SchedulingStrategy,
    /// The node deciding (where the request was submitted).
    pub local: NodeId,
    /// Bytes of the request's arguments held by each node (for locality).
    pub arg_bytes: &'a [(NodeId, u64)],
}

/// Why a request can never be placed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InfeasibleReport {
    /// The resources asked for.
    pub request: ResourceSet,
    /// The strategy it asked with.
    pub strategy: SchedulingStrategy,
    /// What the cluster has.
    pub cluster: ClusterSummary,
    /// Why, in words.
    pub reason: String,
}

impl fmt::Display for InfeasibleReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "request {} ({:?}) can never be placed: {}; cluster: {}",
            self.request, self.strategy, self.reason, self.cluster
        )
    }
}

impl std::error::Error for InfeasibleReport {}

/// A policy's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Place it on this node (the caller acquires the resources there).
    Node(NodeId),
    /// It fits somewhere in principle, but nowhere now: keep it queued.
    Wait,
    /// No node could ever take it (as the cluster is now).
    Infeasible(InfeasibleReport),
}

/// A placement policy: pure, deterministic given its own seeded state.
///
/// Implement this to plug in your own policy. `decide` must not acquire
/// anything: the caller acquires on the chosen node and, if that fails
/// (the view was stale), asks again.
pub trait Policy {
    /// A short name for messages and stats.
    fn name(&self) -> &str;

    /// Where `req` should go given `view`.
    fn decide(&mut self, req: &Request<'_>, view: &ClusterView) -> Decision;
}
