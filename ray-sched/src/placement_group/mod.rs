//! Placement groups: sets of resource bundles reserved together, then used
//! as private pools by the tasks and actors scheduled into them.
//!
//! A reservation is two-phase, so a partial one never leaks:
//! 1. [`PlacementGroups::plan`] chooses a node for every bundle against the
//!    [`ClusterView`], acquiring nothing;
//! 2. [`PlacementGroups::prepare`] acquires each bundle's resources on its
//!    node; if one does not fit (the view was stale, or the resources were
//!    taken meanwhile) every bundle prepared before it is given back;
//! 3. [`PlacementGroups::commit`] makes the reservation the group's, or
//!    [`Prepared::abort`] gives it back.
//!
//! [`PlacementGroups::create`] runs the three phases at once; the phases are
//! public for the distributed case, where nodes prepare their own bundles.
//!
//! Once committed, each bundle is a pool of its own: the node's `used` in the
//! view includes the whole bundle, and tasks take from the bundle with
//! [`PlacementGroups::acquire_in_bundle`] without touching the view.
//!
//! ```
//! use std::collections::BTreeMap;
//! use ray_proto::{NodeId, PlacementGroupId, WorkerId};
//! use ray_sched::{ClusterView, PgState, PlacementGroups, PlacementStrategy, Quantity, ResourceSet};
//!
//! let mut view = ClusterView::new();
//! view.add_node(NodeId(1), ResourceSet::cpu(Quantity::from_units(4)), BTreeMap::new());
//! let mut groups = PlacementGroups::new();
//! let pg = PlacementGroupId::new(WorkerId(1), 0);
//! let two = ResourceSet::cpu(Quantity::from_units(2));
//! let state = groups.create(pg, vec![two.clone(), two], PlacementStrategy::StrictPack, &mut view)?;
//! assert_eq!(state, PgState::Ready);
//! assert_eq!(groups.bundle_node(pg, 1), Some(NodeId(1)));
//!
//! let one = ResourceSet::cpu(Quantity::ONE);
//! assert_eq!(groups.acquire_in_bundle(pg, Some(1), &one)?, (1, NodeId(1)));
//! groups.remove(pg, &mut view)?;
//! assert!(view.nodes()[0].resources().used().is_empty());
//! # Ok::<(), ray_sched::PgError>(())
//! ```

mod error;
mod plan;

use std::collections::BTreeMap;

use hashbrown::HashMap;
use ray_proto::{NodeId, PlacementGroupId};

pub use error::PgError;

use crate::resources::ResourceSet;
use crate::view::ClusterView;
use plan::Basis;

/// How a group's bundles are laid out over nodes (Ray's four strategies).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PlacementStrategy {
    /// On as few nodes as possible; more nodes if need be.
    Pack,
    /// On distinct nodes where possible; shared nodes if need be.
    Spread,
    /// All on one node, or not at all.
    StrictPack,
    /// Each on a node of its own, or not at all.
    StrictSpread,
}

/// Where a group stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PgState {
    /// Waiting for resources: some or all bundles are not reserved yet (a
    /// new group, or one that lost bundles with a node). Placed by
    /// [`PlacementGroups::retry_pending`].
    Pending,
    /// Every bundle is reserved on its node.
    Ready,
    /// The cluster as it is can never hold it; looked at again by
    /// [`PlacementGroups::retry_pending`] in case nodes joined.
    Infeasible,
}

/// Phase one's answer: a node for every bundle not yet placed. Made by
/// [`PlacementGroups::plan`]; holds nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use = "a plan does nothing until it is prepared"]
pub struct Plan {
    group: PlacementGroupId,
    placements: Vec<(usize, NodeId)>,
}

impl Plan {
    /// The group planned.
    pub fn group(&self) -> PlacementGroupId {
        self.group
    }

    /// `(bundle index, node)` for each bundle to place, by index.
    pub fn placements(&self) -> &[(usize, NodeId)] {
        &self.placements
    }
}

/// Phase two's result: bundles whose resources are acquired in the view but
/// not yet the group's. Made by [`PlacementGroups::prepare`].
///
/// Dropping it leaks the resources: hand it to [`PlacementGroups::commit`]
/// or [`Prepared::abort`].
#[derive(Debug)]
#[must_use = "prepared resources leak unless committed or aborted"]
pub struct Prepared {
    group: PlacementGroupId,
    /// `(bundle index, node, resources acquired there)`.
    bundles: Vec<(usize, NodeId, ResourceSet)>,
}

impl Prepared {
    /// The group prepared.
    pub fn group(&self) -> PlacementGroupId {
        self.group
    }

    /// `(bundle index, node)` for each prepared bundle, by index.
    pub fn placements(&self) -> impl Iterator<Item = (usize, NodeId)> + '_ {
        self.bundles.iter().map(|(i, n, _)| (*i, *n))
    }

    /// Gives every prepared bundle's resources back to its node in `view`.
    pub fn abort(self, view: &mut ClusterView) {
        for (_, node, res) in &self.bundles {
            view.release(*node, res);
        }
    }
}

#[derive(Debug)]
struct Group {
    /// Creation order: pending groups are retried oldest first.
    seq: u64,
    strategy: PlacementStrategy,
    bundles: Vec<ResourceSet>,
    /// The node holding each bundle's reservation; `None` until reserved.
    nodes: Vec<Option<NodeId>>,
    /// What tasks hold inside each bundle.
    in_use: Vec<ResourceSet>,
    state: PgState,
}

/// Every placement group one scheduler knows: their bundles, where those
/// are reserved, and what runs inside them.
///
/// Sans-IO and deterministic: the same calls on the same views give the same
/// placements.
#[derive(Debug, Default)]
pub struct PlacementGroups {
    groups: HashMap<PlacementGroupId, Group>,
    /// Pending and infeasible groups by creation order.
    waiting: BTreeMap<u64, PlacementGroupId>,
    next_seq: u64,
}

impl PlacementGroups {
    /// No groups.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a group and tries to reserve it at once (plan, prepare,
    /// commit against `view`).
    ///
    /// Returns [`PgState::Ready`] when every bundle is reserved, or
    /// [`PgState::Pending`] when the group fits the cluster but not what is
    /// free now: it stays queued for [`PlacementGroups::retry_pending`].
    ///
    /// # Errors
    /// - [`PgError::InvalidArgument`]: no bundles, or an empty bundle; nothing
    ///   is registered.
    /// - [`PgError::AlreadyExists`]: `id` is taken.
    /// - [`PgError::Infeasible`]: no node set of this cluster could ever hold
    ///   it. The group is still kept (state [`PgState::Infeasible`]) and
    ///   re-checked by `retry_pending`, since nodes may join; `remove` it to
    ///   give up.
    pub fn create(
        &mut self,
        id: PlacementGroupId,
        bundles: Vec<ResourceSet>,
        strategy: PlacementStrategy,
        view: &mut ClusterView,
    ) -> Result<PgState, PgError> {
        if self.groups.contains_key(&id) {
            return Err(PgError::AlreadyExists { group: id });
        }
        let invalid = |reason: String| PgError::InvalidArgument { group: id, reason };
        if bundles.is_empty() {
            return Err(invalid("it has no bundles".into()));
        }
        if let Some(i) = bundles.iter().position(ResourceSet::is_empty) {
            return Err(invalid(format!("bundle {i} asks for no resources")));
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        let n = bundles.len();
        self.groups.insert(
            id,
            Group {
                seq,
                strategy,
                bundles,
                nodes: vec![None; n],
                in_use: vec![ResourceSet::new(); n],
                state: PgState::Pending,
            },
        );
        self.waiting.insert(seq, id);
        self.try_place(id, view)
    }

    /// Tries to reserve every pending or infeasible group, oldest first,
    /// after resources were freed or nodes joined. Returns the groups that
    /// became [`PgState::Ready`], in that order.
    ///
    /// A group that does not fit now is passed over, so a later, smaller one
    /// may be placed before it. A group's state is updated to `Pending` or
    /// `Infeasible` as the cluster now allows.
    pub fn retry_pending(&mut self, view: &mut ClusterView) -> Vec<PlacementGroupId> {
        let waiting: Vec<PlacementGroupId> = self.waiting.values().copied().collect();
        waiting
            .into_iter()
            .filter(|&id| matches!(self.try_place(id, view), Ok(PgState::Ready)))
            .collect()
    }

    /// Phase one: chooses a node for every bundle of `id` not yet reserved,
    /// against `view`, acquiring nothing.
    ///
    /// `Ok(None)` when the group fits the cluster but not what is free now.
    /// A plan for a group that is already Ready has no placements.
    ///
    /// # Errors
    /// [`PgError::UnknownGroup`]; [`PgError::Infeasible`] when no node set of
    /// this cluster could ever hold the group.
    pub fn plan(&self, id: PlacementGroupId, view: &ClusterView) -> Result<Option<Plan>, PgError> {
        let g = self.group(id)?;
        if let Some(placements) = plan::plan(&g.bundles, &g.nodes, g.strategy, view, Basis::Current)
        {
            return Ok(Some(Plan {
                group: id,
                placements,
            }));
        }
        if plan::plan(&g.bundles, &g.nodes, g.strategy, view, Basis::Empty).is_some() {
            return Ok(None);
        }
        Err(PgError::Infeasible {
            group: id,
            strategy: g.strategy,
            bundles: g.bundles.len(),
            reason: reason(&g.bundles, &g.nodes, g.strategy, view),
            cluster: Box::new(view.summary()),
        })
    }

    /// Phase two: acquires every planned bundle's resources on its node in
    /// `view`, all or nothing.
    ///
    /// # Errors
    /// - [`PgError::UnknownGroup`]; [`PgError::StalePlan`] if a planned
    ///   bundle was reserved meanwhile.
    /// - [`PgError::PrepareFailed`] when a bundle no longer fits its node:
    ///   every bundle acquired before it has been given back.
    pub fn prepare(&self, plan: Plan, view: &mut ClusterView) -> Result<Prepared, PgError> {
        let g = self.group(plan.group)?;
        let stale = plan
            .placements
            .iter()
            .any(|&(i, _)| g.nodes.get(i).is_none_or(Option::is_some));
        if stale {
            return Err(PgError::StalePlan { group: plan.group });
        }
        let mut prepared = Prepared {
            group: plan.group,
            bundles: Vec::with_capacity(plan.placements.len()),
        };
        for (i, node) in plan.placements {
            let res = &g.bundles[i];
            if !view.try_acquire(node, res) {
                prepared.abort(view);
                return Err(PgError::PrepareFailed {
                    group: plan.group,
                    bundle: i,
                    node,
                });
            }
            prepared.bundles.push((i, node, res.clone()));
        }
        Ok(prepared)
    }

    /// Phase three: the prepared bundles become the group's reservations.
    /// Returns the group's state: [`PgState::Ready`] once every bundle is
    /// reserved.
    ///
    /// # Errors
    /// [`PgError::UnknownGroup`] (the group was removed meanwhile) or
    /// [`PgError::StalePlan`] (a bundle was reserved meanwhile, or a node of
    /// the reservation left `view`): the reservation is aborted, nothing is
    /// held.
    pub fn commit(
        &mut self,
        prepared: Prepared,
        view: &mut ClusterView,
    ) -> Result<PgState, PgError> {
        let id = prepared.group;
        let Some(g) = self.groups.get_mut(&id) else {
            prepared.abort(view);
            return Err(PgError::UnknownGroup { group: id });
        };
        let stale = prepared.bundles.iter().any(|(i, node, _)| {
            g.nodes.get(*i).is_none_or(Option::is_some) || view.node(*node).is_none()
        });
        if stale {
            prepared.abort(view);
            return Err(PgError::StalePlan { group: id });
        }
        for (i, node, _) in prepared.bundles {
            g.nodes[i] = Some(node);
        }
        if g.nodes.iter().all(Option::is_some) {
            g.state = PgState::Ready;
            self.waiting.remove(&g.seq);
        }
        Ok(g.state)
    }

    /// Plan, prepare, commit; records Pending or Infeasible when it cannot.
    fn try_place(
        &mut self,
        id: PlacementGroupId,
        view: &mut ClusterView,
    ) -> Result<PgState, PgError> {
        let outcome = match self.plan(id, view) {
            Ok(Some(plan)) => match self.prepare(plan, view) {
                Ok(prepared) => return self.commit(prepared, view),
                // Cannot happen with one view mutated only by us, but the
                // answer would be: try again later.
                Err(PgError::PrepareFailed { .. }) => Ok(PgState::Pending),
                Err(e) => Err(e),
            },
            Ok(None) => Ok(PgState::Pending),
            Err(e) => Err(e),
        };
        if let Some(g) = self.groups.get_mut(&id) {
            match &outcome {
                Ok(state) => g.state = *state,
                Err(PgError::Infeasible { .. }) => g.state = PgState::Infeasible,
                Err(_) => {}
            }
        }
        outcome
    }

    /// Removes a group: every reserved bundle's resources go back to its
    /// node in `view`, and a pending group leaves the queue.
    ///
    /// This frees the whole bundles even if tasks still hold resources in
    /// them (the runtime kills those); their later
    /// [`PlacementGroups::release_in_bundle`] calls are no-ops.
    ///
    /// # Errors
    /// [`PgError::UnknownGroup`].
    pub fn remove(&mut self, id: PlacementGroupId, view: &mut ClusterView) -> Result<(), PgError> {
        let g = self
            .groups
            .remove(&id)
            .ok_or(PgError::UnknownGroup { group: id })?;
        self.waiting.remove(&g.seq);
        for (res, node) in g.bundles.iter().zip(&g.nodes) {
            if let Some(node) = node {
                view.release(*node, res);
            }
        }
        Ok(())
    }

    /// A node left: every bundle reserved on it is lost and its group goes
    /// back to [`PgState::Pending`] (bundles on other nodes stay reserved,
    /// as in Ray). Returns the affected groups, oldest first; call
    /// [`PlacementGroups::retry_pending`] to place them again.
    ///
    /// Call it after removing the node from `view`; if the node is still
    /// there, the lost bundles' resources are given back to it. Work that ran
    /// in a lost bundle is gone with the node: its releases are no-ops.
    pub fn on_node_removed(
        &mut self,
        node: NodeId,
        view: &mut ClusterView,
    ) -> Vec<PlacementGroupId> {
        let mut affected = Vec::new();
        for (id, g) in &mut self.groups {
            let mut hit = false;
            for i in 0..g.bundles.len() {
                if g.nodes[i] == Some(node) {
                    g.nodes[i] = None;
                    g.in_use[i] = ResourceSet::new();
                    view.release(node, &g.bundles[i]);
                    hit = true;
                }
            }
            if hit {
                g.state = PgState::Pending;
                self.waiting.insert(g.seq, *id);
                affected.push((g.seq, *id));
            }
        }
        affected.sort_unstable();
        affected.into_iter().map(|(_, id)| id).collect()
    }

    /// Takes `req` from a bundle's own reservation, for a task or actor
    /// scheduled into the group. `index: None` takes the first reserved
    /// bundle it fits in now. Returns the bundle index and its node.
    ///
    /// # Errors
    /// - [`PgError::UnknownGroup`], [`PgError::NoSuchBundle`].
    /// - [`PgError::BundleInfeasible`]: `req` is larger than the bundle (than
    ///   every bundle, for `None`); it never fits.
    /// - [`PgError::NotReady`]: the bundle (every bundle that could hold
    ///   `req`) is not reserved yet; retry once the group is placed.
    /// - [`PgError::BundleBusy`]: it fits the bundle but not what is free in
    ///   it now; retry after a release.
    pub fn acquire_in_bundle(
        &mut self,
        id: PlacementGroupId,
        index: Option<usize>,
        req: &ResourceSet,
    ) -> Result<(usize, NodeId), PgError> {
        let g = self
            .groups
            .get_mut(&id)
            .ok_or(PgError::UnknownGroup { group: id })?;
        let busy = || PgError::BundleBusy {
            group: id,
            index,
            request: req.clone(),
        };
        let infeasible = || PgError::BundleInfeasible {
            group: id,
            index,
            request: req.clone(),
        };
        match index {
            Some(i) => {
                let bundle = g.bundles.get(i).ok_or(PgError::NoSuchBundle {
                    group: id,
                    index: i,
                    bundles: g.bundles.len(),
                })?;
                if !req.is_subset_of(bundle) {
                    return Err(infeasible());
                }
                let node = g.nodes[i].ok_or(PgError::NotReady { group: id })?;
                if !req.fits_on_top_of(&g.in_use[i], bundle) {
                    return Err(busy());
                }
                g.in_use[i].add_assign(req);
                Ok((i, node))
            }
            None => {
                let mut some_could = false;
                let mut some_placed = false;
                for i in 0..g.bundles.len() {
                    if !req.is_subset_of(&g.bundles[i]) {
                        continue;
                    }
                    some_could = true;
                    let Some(node) = g.nodes[i] else { continue };
                    some_placed = true;
                    if req.fits_on_top_of(&g.in_use[i], &g.bundles[i]) {
                        g.in_use[i].add_assign(req);
                        return Ok((i, node));
                    }
                }
                Err(match (some_could, some_placed) {
                    (false, _) => infeasible(),
                    (true, false) => PgError::NotReady { group: id },
                    (true, true) => busy(),
                })
            }
        }
    }

    /// Gives back `req`, taken by [`PlacementGroups::acquire_in_bundle`]
    /// from bundle `index`. Returns whether anything was released: `false`
    /// (a no-op) when the group was removed, the index is out of range, or
    /// the bundle was lost with its node since.
    pub fn release_in_bundle(
        &mut self,
        id: PlacementGroupId,
        index: usize,
        req: &ResourceSet,
    ) -> bool {
        let Some(g) = self.groups.get_mut(&id) else {
            return false;
        };
        match (g.in_use.get_mut(index), g.nodes.get(index)) {
            (Some(in_use), Some(Some(_))) => {
                in_use.sub_saturating(req);
                true
            }
            _ => false,
        }
    }

    /// The state of a group; `None` if unknown (never created or removed).
    pub fn state(&self, id: PlacementGroupId) -> Option<PgState> {
        self.groups.get(&id).map(|g| g.state)
    }

    /// The strategy a group was created with.
    pub fn strategy(&self, id: PlacementGroupId) -> Option<PlacementStrategy> {
        self.groups.get(&id).map(|g| g.strategy)
    }

    /// The node holding bundle `index` of a group; `None` if the group or
    /// bundle is unknown or not reserved.
    pub fn bundle_node(&self, id: PlacementGroupId, index: usize) -> Option<NodeId> {
        self.groups.get(&id)?.nodes.get(index).copied().flatten()
    }

    /// A group's bundles, in index order.
    pub fn bundles(&self, id: PlacementGroupId) -> Option<&[ResourceSet]> {
        self.groups.get(&id).map(|g| g.bundles.as_slice())
    }

    /// What tasks hold inside bundle `index` now.
    pub fn bundle_in_use(&self, id: PlacementGroupId, index: usize) -> Option<&ResourceSet> {
        self.groups.get(&id)?.in_use.get(index)
    }

    /// Pending and infeasible groups, oldest first.
    pub fn waiting(&self) -> impl Iterator<Item = PlacementGroupId> + '_ {
        self.waiting.values().copied()
    }

    /// Number of groups known, in any state.
    pub fn len(&self) -> usize {
        self.groups.len()
    }

    /// Whether no group is known.
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    fn group(&self, id: PlacementGroupId) -> Result<&Group, PgError> {
        self.groups
            .get(&id)
            .ok_or(PgError::UnknownGroup { group: id })
    }
}

/// Why a group of `bundles` placed by `strategy` can never be held by the
/// nodes of `view` (at their totals, whatever is in use now), in words;
/// `None` when some placement exists. What a process that is not the
/// group's planner (a cluster's driver, at creation) checks with the
/// node totals it knows.
pub fn never_fits(
    bundles: &[ResourceSet],
    strategy: PlacementStrategy,
    view: &ClusterView,
) -> Option<String> {
    let placed = vec![None; bundles.len()];
    match plan::plan(bundles, &placed, strategy, view, Basis::Empty) {
        Some(_) => None,
        None => Some(reason(bundles, &placed, strategy, view)),
    }
}

/// Why `bundles` (those not `placed` yet) can never be placed by
/// `strategy` on `view`, in words.
fn reason(
    bundles: &[ResourceSet],
    placed: &[Option<NodeId>],
    strategy: PlacementStrategy,
    view: &ClusterView,
) -> String {
    let unplaced = || (0..bundles.len()).filter(|&i| placed[i].is_none());
    if let Some(i) = unplaced().find(|&i| !view.feasible_somewhere(&bundles[i])) {
        return format!("bundle {i} {} fits on no node", bundles[i]);
    }
    match strategy {
        PlacementStrategy::StrictPack => {
            let mut sum = ResourceSet::new();
            for i in unplaced() {
                sum.add_assign(&bundles[i]);
            }
            format!("its bundles together need {sum}, more than any one node has")
        }
        PlacementStrategy::StrictSpread => format!(
            "it needs {} distinct nodes that can each hold one of its bundles",
            bundles.len()
        ),
        PlacementStrategy::Pack | PlacementStrategy::Spread => {
            "its bundles do not fit on the cluster's nodes together".into()
        }
    }
}
