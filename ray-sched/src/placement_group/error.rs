//! What can go wrong with a placement group.

use ray_proto::{NodeId, PlacementGroupId};
use thiserror::Error;

use super::PlacementStrategy;
use crate::resources::ResourceSet;
use crate::view::ClusterSummary;

/// What went wrong in a placement-group operation; every variant names the
/// group involved.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum PgError {
    /// The group was described wrongly: no bundles, or an empty bundle.
    #[error("invalid placement group {group}: {reason}")]
    InvalidArgument {
        /// The group.
        group: PlacementGroupId,
        /// What is wrong, in words.
        reason: String,
    },
    /// A group with this id is already known.
    #[error("placement group {group} already exists")]
    AlreadyExists {
        /// The group.
        group: PlacementGroupId,
    },
    /// No group with this id is known (never created, or removed).
    #[error("unknown placement group {group}")]
    UnknownGroup {
        /// The group.
        group: PlacementGroupId,
    },
    /// No node of the cluster as it is could ever hold the group, whatever
    /// is freed. The group is kept and looked at again by
    /// [`PlacementGroups::retry_pending`](super::PlacementGroups::retry_pending),
    /// since nodes may join.
    #[error(
        "placement group {group} ({strategy:?}, {bundles} bundles) can never be placed: \
         {reason}; cluster: {cluster}"
    )]
    Infeasible {
        /// The group.
        group: PlacementGroupId,
        /// Its strategy.
        strategy: PlacementStrategy,
        /// Its number of bundles.
        bundles: usize,
        /// Why, in words.
        reason: String,
        /// What the cluster has (boxed: it is large and errors are moved
        /// around in `Result`s on hot paths).
        cluster: Box<ClusterSummary>,
    },
    /// The bundle (or, for "any bundle", every bundle that could hold the
    /// request) is not reserved yet: the group is pending.
    #[error("placement group {group} is not placed yet")]
    NotReady {
        /// The group.
        group: PlacementGroupId,
    },
    /// A bundle index past the end of the group.
    #[error("placement group {group} has {bundles} bundles, no bundle {index}")]
    NoSuchBundle {
        /// The group.
        group: PlacementGroupId,
        /// The index asked for.
        index: usize,
        /// How many bundles the group has.
        bundles: usize,
    },
    /// The request is larger than the bundle (or than every bundle, for
    /// `index: None`): it can never run inside it.
    #[error("request {request} can never fit in bundle {index:?} of placement group {group}")]
    BundleInfeasible {
        /// The group.
        group: PlacementGroupId,
        /// The bundle asked for; `None` for any.
        index: Option<usize>,
        /// What was asked for.
        request: ResourceSet,
    },
    /// The request fits the bundle but not what is free in it now: wait for
    /// a [`release_in_bundle`](super::PlacementGroups::release_in_bundle).
    #[error("bundle {index:?} of placement group {group} has no room for {request} now")]
    BundleBusy {
        /// The group.
        group: PlacementGroupId,
        /// The bundle asked for; `None` for any.
        index: Option<usize>,
        /// What was asked for.
        request: ResourceSet,
    },
    /// Phase two failed: a bundle no longer fit on its planned node (the
    /// view was stale, or something else took the resources). Every bundle
    /// prepared before it was rolled back; nothing is held.
    #[error(
        "placement group {group}: bundle {bundle} no longer fits on {node}; \
         the reservation was rolled back"
    )]
    PrepareFailed {
        /// The group.
        group: PlacementGroupId,
        /// The bundle that did not fit.
        bundle: usize,
        /// The node it was planned on.
        node: NodeId,
    },
    /// A plan or prepared reservation no longer matches the group (a bundle
    /// it covers was placed meanwhile, or its node left). Nothing is held.
    #[error("placement group {group} changed since it was planned; plan again")]
    StalePlan {
        /// The group.
        group: PlacementGroupId,
    },
}
