//! Phase one of a reservation: choosing a node for every bundle not yet
//! placed. Pure: it reads the view and acquires nothing.
//!
//! The choice is greedy and deterministic. Bundles go biggest first (ties by
//! index); among the nodes a bundle may use, the least utilized one that
//! fits wins, ties going to the lowest node id.
//! - `Pack`: a node the group already uses if the bundle fits there, else a
//!   new node, so one node fills before the next is opened.
//! - `Spread`: a node the group does not use yet if one fits, else any.
//! - `StrictPack`: the one node that fits the sum of the bundles.
//! - `StrictSpread`: only nodes the group does not use yet.

use std::cmp::Reverse;

use ray_proto::NodeId;

use super::PlacementStrategy;
use crate::resources::ResourceSet;
use crate::view::ClusterView;

/// What the planner counts as already used on each node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Basis {
    /// What the view says is in use now: "can it be placed now?".
    Current,
    /// Nothing but the group's own placed bundles: "could it ever be placed
    /// on nodes of these sizes?".
    Empty,
}

/// Chooses a node for every bundle whose `placed` entry is `None`.
///
/// Returns `(bundle index, node)` in index order, or `None` when the bundles
/// do not fit under `basis`. `placed` holds the nodes of bundles already
/// reserved (after a node loss only some are); they count for the strategy
/// (Pack prefers their nodes, StrictSpread avoids them).
pub(super) fn plan(
    bundles: &[ResourceSet],
    placed: &[Option<NodeId>],
    strategy: PlacementStrategy,
    view: &ClusterView,
    basis: Basis,
) -> Option<Vec<(usize, NodeId)>> {
    let mut scratch = Scratch::new(view, basis);
    for (res, node) in bundles.iter().zip(placed) {
        let Some(pos) = node.and_then(|n| scratch.position(n)) else {
            continue;
        };
        if basis == Basis::Empty {
            // Under `Current` the view already counts it.
            scratch.take(pos, res);
        } else {
            scratch.mark_used(pos);
        }
    }
    let mut order: Vec<usize> = (0..bundles.len())
        .filter(|&i| placed[i].is_none())
        .collect();
    order.sort_by_key(|&i| (Reverse(size(&bundles[i])), i));
    let mut out = Vec::with_capacity(order.len());
    match strategy {
        PlacementStrategy::StrictPack => {
            if scratch.used_nodes.len() > 1 {
                return None;
            }
            let mut sum = ResourceSet::new();
            for &i in &order {
                sum.add_assign(&bundles[i]);
            }
            let only = scratch.used_nodes.first().copied();
            let pos = scratch.best(&sum, |p| only.is_none_or(|o| o == p))?;
            let node = scratch.id(pos);
            out.extend(order.iter().map(|&i| (i, node)));
        }
        PlacementStrategy::Pack => {
            for &i in &order {
                let res = &bundles[i];
                let reuse = scratch
                    .used_nodes
                    .iter()
                    .copied()
                    .find(|&p| scratch.fits(p, res));
                let pos = match reuse {
                    Some(p) => p,
                    None => scratch.best(res, |_| true)?,
                };
                scratch.take(pos, res);
                out.push((i, scratch.id(pos)));
            }
        }
        PlacementStrategy::Spread | PlacementStrategy::StrictSpread => {
            let strict = strategy == PlacementStrategy::StrictSpread;
            for &i in &order {
                let res = &bundles[i];
                let fresh = scratch.best(res, |p| !scratch.used_nodes.contains(&p));
                let pos = match fresh {
                    Some(p) => p,
                    None if strict => return None,
                    None => scratch.best(res, |_| true)?,
                };
                scratch.take(pos, res);
                out.push((i, scratch.id(pos)));
            }
        }
    }
    out.sort_unstable_by_key(|&(i, _)| i);
    Some(out)
}

/// A bundle's weight for ordering: the sum of its raw amounts.
fn size(res: &ResourceSet) -> u128 {
    res.iter().map(|(_, q)| u128::from(q.raw())).sum()
}

/// The planner's notes on top of the view: what it has tentatively placed.
struct Scratch<'v> {
    view: &'v ClusterView,
    basis: Basis,
    /// Tentative extra usage per node position (few entries: one per node
    /// the group uses).
    extra: Vec<(usize, ResourceSet)>,
    /// Node positions the group uses, in the order it started using them.
    used_nodes: Vec<usize>,
}

impl<'v> Scratch<'v> {
    fn new(view: &'v ClusterView, basis: Basis) -> Self {
        Self {
            view,
            basis,
            extra: Vec::new(),
            used_nodes: Vec::new(),
        }
    }

    fn position(&self, node: NodeId) -> Option<usize> {
        self.view
            .nodes()
            .binary_search_by_key(&node, |n| n.id())
            .ok()
    }

    fn id(&self, pos: usize) -> NodeId {
        self.view.nodes()[pos].id()
    }

    fn mark_used(&mut self, pos: usize) {
        if !self.used_nodes.contains(&pos) {
            self.used_nodes.push(pos);
        }
    }

    fn take(&mut self, pos: usize, res: &ResourceSet) {
        self.mark_used(pos);
        match self.extra.iter_mut().find(|(p, _)| *p == pos) {
            Some((_, extra)) => extra.add_assign(res),
            None => self.extra.push((pos, res.clone())),
        }
    }

    fn extra(&self, pos: usize) -> Option<&ResourceSet> {
        self.extra.iter().find(|(p, _)| *p == pos).map(|(_, e)| e)
    }

    /// What the planner counts as used on the node at `pos`, when that is
    /// not simply the view's own number (`None`: use the view's).
    fn used_with_extra(&self, pos: usize) -> Option<ResourceSet> {
        let node = self.view.nodes()[pos].resources();
        match (self.basis, self.extra(pos)) {
            (Basis::Current, None) => None,
            (Basis::Current, Some(e)) => {
                let mut used = node.used().clone();
                used.add_assign(e);
                Some(used)
            }
            (Basis::Empty, e) => Some(e.cloned().unwrap_or_default()),
        }
    }

    fn fits(&self, pos: usize, req: &ResourceSet) -> bool {
        let node = self.view.nodes()[pos].resources();
        match self.used_with_extra(pos) {
            None => node.can_acquire(req),
            Some(used) => req.fits_on_top_of(&used, node.total()),
        }
    }

    /// Used/total of the busiest resource, in 1/10 000 (as
    /// [`NodeView::utilization`](crate::NodeView::utilization)).
    fn utilization(&self, pos: usize) -> u32 {
        let view_node = &self.view.nodes()[pos];
        let Some(used) = self.used_with_extra(pos) else {
            return view_node.utilization();
        };
        let mut worst = 0u128;
        for (name, total) in view_node.resources().total().iter() {
            let total = u128::from(total.raw());
            let u = u128::from(used.get(name).raw()).min(total) * 10_000 / total;
            worst = worst.max(u);
        }
        // At most 10 000.
        worst as u32
    }

    /// The least utilized node (lowest id on ties) that `keep` allows and
    /// `req` fits on.
    fn best(&self, req: &ResourceSet, keep: impl Fn(usize) -> bool) -> Option<usize> {
        let mut best: Option<(u32, usize)> = None;
        for pos in 0..self.view.len() {
            if !keep(pos) || !self.fits(pos, req) {
                continue;
            }
            let u = self.utilization(pos);
            if u == 0 {
                // Nothing later can beat an idle node: ties go to the lowest id.
                return Some(pos);
            }
            if best.is_none_or(|(bu, _)| u < bu) {
                best = Some((u, pos));
            }
        }
        best.map(|(_, pos)| pos)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::quantity::Quantity;

    fn cpus(n: u64) -> ResourceSet {
        ResourceSet::cpu(Quantity::from_units(n))
    }

    fn view(sizes: &[u64]) -> ClusterView {
        let mut v = ClusterView::new();
        for (i, &n) in sizes.iter().enumerate() {
            v.add_node(NodeId(i as u64 + 1), cpus(n), BTreeMap::new());
        }
        v
    }

    #[test]
    fn biggest_bundle_is_placed_first() {
        // Index order would put 1 CPU on node 1 (4 CPUs) and leave 3 CPUs
        // nowhere to go under StrictSpread; biggest-first places both.
        let v = view(&[4, 2]);
        let bundles = [cpus(1), cpus(3)];
        let got = plan(
            &bundles,
            &[None, None],
            PlacementStrategy::StrictSpread,
            &v,
            Basis::Current,
        );
        assert_eq!(got, Some(vec![(0, NodeId(2)), (1, NodeId(1))]));
    }

    #[test]
    fn empty_basis_ignores_usage_but_counts_own_placed_bundles() {
        let mut v = view(&[2]);
        assert!(v.try_acquire(NodeId(1), &cpus(2)));
        let bundles = [cpus(1), cpus(1)];
        let pack = PlacementStrategy::Pack;
        assert_eq!(
            plan(&bundles, &[None, None], pack, &v, Basis::Current),
            None
        );
        assert!(plan(&bundles, &[None, None], pack, &v, Basis::Empty).is_some());
        let bigger = [cpus(2), cpus(1)];
        assert_eq!(
            plan(&bigger, &[Some(NodeId(1)), None], pack, &v, Basis::Empty),
            None
        );
    }

    #[test]
    fn placed_bundles_steer_pack_and_strict_spread() {
        let v = view(&[4, 4, 4]);
        let bundles = [cpus(1), cpus(1)];
        let placed = [Some(NodeId(3)), None];
        let pack = plan(
            &bundles,
            &placed,
            PlacementStrategy::Pack,
            &v,
            Basis::Current,
        );
        assert_eq!(pack, Some(vec![(1, NodeId(3))]));
        let spread = plan(
            &bundles,
            &placed,
            PlacementStrategy::StrictSpread,
            &v,
            Basis::Current,
        );
        assert_eq!(spread, Some(vec![(1, NodeId(1))]));
    }
}
