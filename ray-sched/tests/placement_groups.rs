//! Placement groups: each strategy's placement, infeasible and pending
//! groups placed later, two-phase rollback, removal, bundle pools; and
//! property tests of all-or-nothing reservation, exact accounting, no
//! overcommit and determinism under random cluster histories.

use std::collections::BTreeMap;

use proptest::prelude::*;
use ray_proto::{NodeId, PlacementGroupId, WorkerId};
use ray_sched::{
    ClusterView, PgError, PgState, PlacementGroups, PlacementStrategy, Quantity, ResourceSet, GPU,
};

fn cpus(n: u64) -> ResourceSet {
    ResourceSet::cpu(Quantity::from_units(n))
}

fn pg(seq: u64) -> PlacementGroupId {
    PlacementGroupId::new(WorkerId(1), seq)
}

/// Nodes 1, 2, … with the given CPU counts.
fn view_of(sizes: &[u64]) -> ClusterView {
    let mut v = ClusterView::new();
    for (i, &n) in sizes.iter().enumerate() {
        v.add_node(NodeId(i as u64 + 1), cpus(n), BTreeMap::new());
    }
    v
}

fn used(view: &ClusterView, node: u64) -> ResourceSet {
    view.node(NodeId(node))
        .map(|n| n.resources().used().clone())
        .unwrap_or_default()
}

fn nodes_of(groups: &PlacementGroups, id: PlacementGroupId) -> Vec<Option<NodeId>> {
    let n = groups.bundles(id).map_or(0, <[_]>::len);
    (0..n).map(|i| groups.bundle_node(id, i)).collect()
}

#[test]
fn pack_fills_one_node_before_opening_another() {
    let mut view = view_of(&[3, 3, 3]);
    let mut groups = PlacementGroups::new();
    let state = groups.create(pg(0), vec![cpus(1); 4], PlacementStrategy::Pack, &mut view);
    assert_eq!(state, Ok(PgState::Ready));
    let nodes = nodes_of(&groups, pg(0));
    let on_first = nodes.iter().filter(|n| **n == nodes[0]).count();
    assert_eq!(on_first, 3, "{nodes:?}");
    let distinct: std::collections::BTreeSet<_> = nodes.iter().collect();
    assert_eq!(distinct.len(), 2);
    assert_eq!(used(&view, 1), cpus(3));
}

#[test]
fn spread_uses_distinct_nodes_then_shares_when_it_must() {
    let mut view = view_of(&[2, 2]);
    let mut groups = PlacementGroups::new();
    let state = groups.create(
        pg(0),
        vec![cpus(1); 3],
        PlacementStrategy::Spread,
        &mut view,
    );
    assert_eq!(state, Ok(PgState::Ready));
    let nodes = nodes_of(&groups, pg(0));
    assert_ne!(nodes[0], nodes[1]);
    assert!(nodes.iter().all(Option::is_some));
    let mut total = used(&view, 1);
    total.add_assign(&used(&view, 2));
    assert_eq!(total, cpus(3));
}

#[test]
fn strict_pack_puts_every_bundle_on_one_node() {
    let mut view = view_of(&[2, 4]);
    let mut groups = PlacementGroups::new();
    let state = groups.create(
        pg(0),
        vec![cpus(1); 3],
        PlacementStrategy::StrictPack,
        &mut view,
    );
    assert_eq!(state, Ok(PgState::Ready));
    assert_eq!(nodes_of(&groups, pg(0)), vec![Some(NodeId(2)); 3]);
    assert_eq!(used(&view, 2), cpus(3));
    assert!(used(&view, 1).is_empty());
}

#[test]
fn strict_spread_puts_each_bundle_on_its_own_node() {
    let mut view = view_of(&[4, 4, 4]);
    let mut groups = PlacementGroups::new();
    let state = groups.create(
        pg(0),
        vec![cpus(1); 3],
        PlacementStrategy::StrictSpread,
        &mut view,
    );
    assert_eq!(state, Ok(PgState::Ready));
    assert_eq!(
        nodes_of(&groups, pg(0)),
        vec![Some(NodeId(1)), Some(NodeId(2)), Some(NodeId(3))]
    );
}

#[test]
fn strict_pack_too_big_for_any_node_is_infeasible_at_once_and_placed_when_a_node_joins() {
    let mut view = view_of(&[2, 2]);
    let mut groups = PlacementGroups::new();
    let err = groups
        .create(
            pg(0),
            vec![cpus(2); 2],
            PlacementStrategy::StrictPack,
            &mut view,
        )
        .unwrap_err();
    assert!(
        matches!(err, PgError::Infeasible { group, .. } if group == pg(0)),
        "{err}"
    );
    assert!(err.to_string().contains("2 nodes, total {CPU: 4}"), "{err}");
    assert_eq!(groups.state(pg(0)), Some(PgState::Infeasible));
    assert!(groups.retry_pending(&mut view).is_empty());

    view.add_node(NodeId(9), cpus(4), BTreeMap::new());
    assert_eq!(groups.retry_pending(&mut view), vec![pg(0)]);
    assert_eq!(groups.state(pg(0)), Some(PgState::Ready));
    assert_eq!(nodes_of(&groups, pg(0)), vec![Some(NodeId(9)); 2]);
}

#[test]
fn strict_spread_with_more_bundles_than_nodes_is_infeasible_until_a_node_joins() {
    let mut view = view_of(&[4, 4]);
    let mut groups = PlacementGroups::new();
    let err = groups
        .create(
            pg(0),
            vec![cpus(1); 3],
            PlacementStrategy::StrictSpread,
            &mut view,
        )
        .unwrap_err();
    assert!(
        matches!(err, PgError::Infeasible { bundles: 3, .. }),
        "{err}"
    );
    assert!(used(&view, 1).is_empty() && used(&view, 2).is_empty());

    view.add_node(NodeId(3), cpus(1), BTreeMap::new());
    assert_eq!(groups.retry_pending(&mut view), vec![pg(0)]);
    let mut nodes = nodes_of(&groups, pg(0));
    nodes.sort();
    assert_eq!(
        nodes,
        vec![Some(NodeId(1)), Some(NodeId(2)), Some(NodeId(3))]
    );
}

#[test]
fn pending_group_becomes_ready_when_resources_are_released() {
    let mut view = view_of(&[4]);
    let mut groups = PlacementGroups::new();
    assert!(view.try_acquire(NodeId(1), &cpus(3)));
    let state = groups.create(pg(0), vec![cpus(1); 2], PlacementStrategy::Pack, &mut view);
    assert_eq!(state, Ok(PgState::Pending));
    assert_eq!(used(&view, 1), cpus(3), "a pending group holds nothing");
    assert_eq!(groups.waiting().collect::<Vec<_>>(), vec![pg(0)]);
    assert!(groups.retry_pending(&mut view).is_empty());

    view.release(NodeId(1), &cpus(3));
    assert_eq!(groups.retry_pending(&mut view), vec![pg(0)]);
    assert_eq!(groups.state(pg(0)), Some(PgState::Ready));
    assert_eq!(used(&view, 1), cpus(2));
    assert_eq!(groups.waiting().count(), 0);
}

#[test]
fn retry_places_pending_groups_oldest_first() {
    let mut view = view_of(&[2]);
    let mut groups = PlacementGroups::new();
    assert!(view.try_acquire(NodeId(1), &cpus(2)));
    for seq in [5, 3, 4] {
        let state = groups.create(pg(seq), vec![cpus(1)], PlacementStrategy::Pack, &mut view);
        assert_eq!(state, Ok(PgState::Pending));
    }
    view.release(NodeId(1), &cpus(2));
    assert_eq!(groups.retry_pending(&mut view), vec![pg(5), pg(3)]);
    assert_eq!(groups.state(pg(4)), Some(PgState::Pending));
}

#[test]
fn prepare_failure_rolls_back_every_prepared_bundle() {
    let mut view = view_of(&[2, 2, 2]);
    let mut groups = PlacementGroups::new();
    // Register the group as pending by creating it while the cluster is full.
    for n in 1..=3 {
        assert!(view.try_acquire(NodeId(n), &cpus(2)));
    }
    let state = groups.create(
        pg(0),
        vec![cpus(1); 3],
        PlacementStrategy::StrictSpread,
        &mut view,
    );
    assert_eq!(state, Ok(PgState::Pending));
    for n in 1..=3 {
        view.release(NodeId(n), &cpus(2));
    }

    let plan = groups.plan(pg(0), &view).unwrap().expect("fits now");
    assert_eq!(plan.placements().len(), 3);
    // Someone else takes the last planned node's room between plan and prepare.
    let (_, last) = plan.placements()[2];
    assert!(view.try_acquire(last, &cpus(2)));
    let err = groups.prepare(plan, &mut view).unwrap_err();
    assert_eq!(
        err,
        PgError::PrepareFailed {
            group: pg(0),
            bundle: 2,
            node: last
        }
    );
    for n in 1..=3 {
        let expected = if NodeId(n) == last {
            cpus(2)
        } else {
            ResourceSet::new()
        };
        assert_eq!(used(&view, n), expected, "node {n}");
    }
    assert_eq!(groups.state(pg(0)), Some(PgState::Pending));
    assert!(nodes_of(&groups, pg(0)).iter().all(Option::is_none));
}

#[test]
fn plan_prepare_commit_places_a_group_and_abort_gives_it_back() {
    let mut view = view_of(&[1, 1]);
    let mut groups = PlacementGroups::new();
    assert!(view.try_acquire(NodeId(1), &cpus(1)));
    let state = groups.create(
        pg(0),
        vec![cpus(1); 2],
        PlacementStrategy::Spread,
        &mut view,
    );
    assert_eq!(state, Ok(PgState::Pending));
    view.release(NodeId(1), &cpus(1));

    let plan = groups.plan(pg(0), &view).unwrap().expect("fits now");
    let prepared = groups.prepare(plan.clone(), &mut view).unwrap();
    assert_eq!(prepared.placements().count(), 2);
    prepared.abort(&mut view);
    assert!(used(&view, 1).is_empty() && used(&view, 2).is_empty());

    let prepared = groups.prepare(plan, &mut view).unwrap();
    assert_eq!(groups.commit(prepared, &mut view), Ok(PgState::Ready));
    assert_eq!(used(&view, 1), cpus(1));
    assert_eq!(used(&view, 2), cpus(1));
}

#[test]
fn commit_after_remove_gives_the_reservation_back() {
    let mut view = view_of(&[4]);
    let mut groups = PlacementGroups::new();
    assert!(view.try_acquire(NodeId(1), &cpus(4)));
    let _ = groups.create(pg(0), vec![cpus(1)], PlacementStrategy::Pack, &mut view);
    view.release(NodeId(1), &cpus(4));
    let plan = groups.plan(pg(0), &view).unwrap().expect("fits now");
    let prepared = groups.prepare(plan, &mut view).unwrap();
    groups.remove(pg(0), &mut view).unwrap();
    assert_eq!(
        groups.commit(prepared, &mut view),
        Err(PgError::UnknownGroup { group: pg(0) })
    );
    assert!(used(&view, 1).is_empty());
}

#[test]
fn remove_frees_exactly_what_was_reserved() {
    let mut view = view_of(&[4, 4]);
    let gpu_node = NodeId(3);
    view.add_node(gpu_node, cpus(4).with(GPU, Quantity::ONE), BTreeMap::new());
    let mut groups = PlacementGroups::new();
    assert!(view.try_acquire(NodeId(1), &cpus(1)));
    let half_gpu = cpus(1).with(GPU, Quantity::from_raw(5_000));
    let bundles = vec![cpus(2), half_gpu.clone()];
    let state = groups.create(pg(0), bundles, PlacementStrategy::Pack, &mut view);
    assert_eq!(state, Ok(PgState::Ready));
    let before: Vec<_> = (1..=3).map(|n| used(&view, n)).collect();
    assert_ne!(
        before,
        vec![cpus(1), ResourceSet::new(), ResourceSet::new()]
    );

    // A task still holds part of a bundle: removal frees the bundle anyway.
    let (i, _) = groups.acquire_in_bundle(pg(0), None, &cpus(1)).unwrap();
    groups.remove(pg(0), &mut view).unwrap();
    assert_eq!(
        used(&view, 1),
        cpus(1),
        "only the direct acquisition is left"
    );
    assert!(used(&view, 2).is_empty() && used(&view, 3).is_empty());
    assert!(!groups.release_in_bundle(pg(0), i, &cpus(1)), "a no-op now");
    assert!(used(&view, 1) == cpus(1));
    assert_eq!(groups.state(pg(0)), None);
    assert_eq!(
        groups.remove(pg(0), &mut view),
        Err(PgError::UnknownGroup { group: pg(0) })
    );
}

#[test]
fn remove_drops_a_pending_group() {
    let mut view = view_of(&[1]);
    let mut groups = PlacementGroups::new();
    assert!(view.try_acquire(NodeId(1), &cpus(1)));
    let _ = groups.create(pg(0), vec![cpus(1)], PlacementStrategy::Pack, &mut view);
    groups.remove(pg(0), &mut view).unwrap();
    view.release(NodeId(1), &cpus(1));
    assert!(groups.retry_pending(&mut view).is_empty());
    assert!(used(&view, 1).is_empty());
    assert!(groups.is_empty());
}

#[test]
fn acquire_and_release_inside_a_bundle_never_exceed_the_bundle() {
    let mut view = view_of(&[8, 8]);
    let mut groups = PlacementGroups::new();
    let bundles = vec![cpus(2), cpus(1)];
    let _ = groups.create(pg(0), bundles, PlacementStrategy::StrictSpread, &mut view);
    let half = ResourceSet::cpu(Quantity::from_raw(5_000));
    let view_before: Vec<_> = (1..=2).map(|n| used(&view, n)).collect();

    for _ in 0..4 {
        assert!(matches!(
            groups.acquire_in_bundle(pg(0), Some(0), &half),
            Ok((0, _))
        ));
    }
    assert_eq!(
        groups.acquire_in_bundle(pg(0), Some(0), &half),
        Err(PgError::BundleBusy {
            group: pg(0),
            index: Some(0),
            request: half.clone()
        })
    );
    assert_eq!(groups.bundle_in_use(pg(0), 0), Some(&cpus(2)));
    // Any bundle: bundle 0 is full, bundle 1 takes it.
    assert!(matches!(
        groups.acquire_in_bundle(pg(0), None, &half),
        Ok((1, _))
    ));
    assert!(matches!(
        groups.acquire_in_bundle(pg(0), Some(1), &cpus(2)),
        Err(PgError::BundleInfeasible { index: Some(1), .. })
    ));
    assert!(matches!(
        groups.acquire_in_bundle(pg(0), None, &cpus(3)),
        Err(PgError::BundleInfeasible { index: None, .. })
    ));
    assert!(matches!(
        groups.acquire_in_bundle(pg(0), Some(2), &half),
        Err(PgError::NoSuchBundle {
            index: 2,
            bundles: 2,
            ..
        })
    ));
    assert!(groups.release_in_bundle(pg(0), 0, &half));
    assert!(matches!(
        groups.acquire_in_bundle(pg(0), None, &half),
        Ok((0, _))
    ));
    // Tasks inside bundles never touch the node's accounting in the view.
    assert_eq!(
        (1..=2).map(|n| used(&view, n)).collect::<Vec<_>>(),
        view_before
    );
}

#[test]
fn acquire_in_a_pending_group_is_not_ready() {
    let mut view = view_of(&[1]);
    let mut groups = PlacementGroups::new();
    assert!(view.try_acquire(NodeId(1), &cpus(1)));
    let _ = groups.create(pg(0), vec![cpus(1)], PlacementStrategy::Pack, &mut view);
    assert_eq!(
        groups.acquire_in_bundle(pg(0), Some(0), &cpus(1)),
        Err(PgError::NotReady { group: pg(0) })
    );
    assert_eq!(
        groups.acquire_in_bundle(pg(9), None, &cpus(1)),
        Err(PgError::UnknownGroup { group: pg(9) })
    );
}

#[test]
fn empty_bundle_list_or_empty_bundle_is_invalid() {
    let mut view = view_of(&[1]);
    let mut groups = PlacementGroups::new();
    let err = groups.create(pg(0), vec![], PlacementStrategy::Pack, &mut view);
    assert!(matches!(err, Err(PgError::InvalidArgument { .. })));
    let err = groups.create(
        pg(0),
        vec![cpus(1), ResourceSet::new()],
        PlacementStrategy::Pack,
        &mut view,
    );
    assert!(
        matches!(&err, Err(PgError::InvalidArgument { reason, .. }) if reason.contains("bundle 1"))
    );
    assert!(groups.is_empty());
    assert_eq!(
        groups.create(pg(0), vec![cpus(1)], PlacementStrategy::Pack, &mut view),
        Ok(PgState::Ready)
    );
    assert_eq!(
        groups.create(pg(0), vec![cpus(1)], PlacementStrategy::Pack, &mut view),
        Err(PgError::AlreadyExists { group: pg(0) })
    );
}

#[test]
fn node_loss_sends_its_groups_back_to_pending_and_retry_replaces_the_lost_bundles() {
    let mut view = view_of(&[2, 2, 2]);
    let mut groups = PlacementGroups::new();
    let _ = groups.create(
        pg(0),
        vec![cpus(1); 2],
        PlacementStrategy::StrictSpread,
        &mut view,
    );
    let _ = groups.create(pg(1), vec![cpus(1)], PlacementStrategy::Pack, &mut view);
    let lost = groups.bundle_node(pg(0), 0).expect("placed");
    let kept = groups.bundle_node(pg(0), 1).expect("placed");
    let (task_bundle, _) = groups.acquire_in_bundle(pg(0), Some(1), &cpus(1)).unwrap();

    view.remove_node(lost);
    let affected = groups.on_node_removed(lost, &mut view);
    assert!(affected.contains(&pg(0)));
    assert_eq!(groups.state(pg(0)), Some(PgState::Pending));
    assert_eq!(groups.bundle_node(pg(0), 0), None);
    assert_eq!(groups.bundle_node(pg(0), 1), Some(kept), "survivors stay");

    assert!(groups.retry_pending(&mut view).contains(&pg(0)));
    let new = groups.bundle_node(pg(0), 0).expect("placed again");
    assert_ne!(new, kept, "still strictly spread");
    assert!(groups.release_in_bundle(pg(0), task_bundle, &cpus(1)));
}

// ---- property tests ---------------------------------------------------------

#[derive(Clone, Debug)]
enum Op {
    Create {
        bundles: Vec<(u64, u64)>,
        strategy: PlacementStrategy,
    },
    Remove(usize),
    AddNode(u64, u64),
    RemoveNode(usize),
    Retry,
    AcquireDirect(usize, u64),
    ReleaseDirect(usize),
    AcquireInBundle(usize, Option<usize>, u64),
    ReleaseInBundle(usize),
}

fn strategy() -> impl Strategy<Value = PlacementStrategy> {
    prop_oneof![
        Just(PlacementStrategy::Pack),
        Just(PlacementStrategy::Spread),
        Just(PlacementStrategy::StrictPack),
        Just(PlacementStrategy::StrictSpread),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    // Amounts are in halves of a unit (raw 5 000).
    let bundle = (0u64..5, 0u64..3).prop_filter("non-empty", |(c, g)| c + g > 0);
    prop_oneof![
        4 => (prop::collection::vec(bundle, 1..5), strategy())
            .prop_map(|(bundles, strategy)| Op::Create { bundles, strategy }),
        2 => any::<usize>().prop_map(Op::Remove),
        1 => (2u64..9, 0u64..3).prop_map(|(c, g)| Op::AddNode(c, g)),
        1 => any::<usize>().prop_map(Op::RemoveNode),
        2 => Just(Op::Retry),
        2 => (any::<usize>(), 1u64..4).prop_map(|(n, c)| Op::AcquireDirect(n, c)),
        2 => any::<usize>().prop_map(Op::ReleaseDirect),
        2 => (any::<usize>(), prop::option::of(0usize..4), 1u64..3)
            .prop_map(|(g, i, c)| Op::AcquireInBundle(g, i, c)),
        1 => any::<usize>().prop_map(Op::ReleaseInBundle),
    ]
}

fn halves(cpu: u64, gpu: u64) -> ResourceSet {
    ResourceSet::cpu(Quantity::from_raw(cpu * 5_000)).with(GPU, Quantity::from_raw(gpu * 5_000))
}

/// The test's side of the world: what it acquired itself, which groups it
/// made, what it runs inside bundles.
struct World {
    view: ClusterView,
    groups: PlacementGroups,
    ids: Vec<PlacementGroupId>,
    direct: Vec<(NodeId, ResourceSet)>,
    in_bundles: Vec<(PlacementGroupId, usize, ResourceSet)>,
    next_node: u64,
    next_group: u64,
}

/// Every group's bundle nodes and state, by id: what determinism compares.
type Snapshot = BTreeMap<PlacementGroupId, (Option<PgState>, Vec<Option<NodeId>>)>;

impl World {
    fn new(nodes: &[(u64, u64)]) -> Self {
        let mut w = World {
            view: ClusterView::new(),
            groups: PlacementGroups::new(),
            ids: Vec::new(),
            direct: Vec::new(),
            in_bundles: Vec::new(),
            next_node: 1,
            next_group: 0,
        };
        for &(c, g) in nodes {
            w.add_node(c, g);
        }
        w
    }

    fn add_node(&mut self, cpu: u64, gpu: u64) {
        let id = NodeId(self.next_node);
        self.next_node += 1;
        self.view
            .add_node(id, halves(cpu * 2, gpu * 2), BTreeMap::new());
    }

    fn snapshot(&self) -> Snapshot {
        self.ids
            .iter()
            .map(|&id| (id, (self.groups.state(id), nodes_of(&self.groups, id))))
            .collect()
    }

    fn apply(&mut self, op: &Op) -> Result<(), TestCaseError> {
        let before = self.snapshot();
        match op {
            Op::Create { bundles, strategy } => {
                let id = PlacementGroupId::new(WorkerId(7), self.next_group);
                self.next_group += 1;
                let bundles: Vec<_> = bundles.iter().map(|&(c, g)| halves(c, g)).collect();
                let result = self.groups.create(id, bundles, *strategy, &mut self.view);
                self.ids.push(id);
                let nodes = nodes_of(&self.groups, id);
                match result {
                    Ok(PgState::Ready) => prop_assert!(nodes.iter().all(Option::is_some)),
                    Ok(PgState::Pending) | Err(PgError::Infeasible { .. }) => {
                        prop_assert!(nodes.iter().all(Option::is_none), "partial: {nodes:?}")
                    }
                    other => prop_assert!(false, "unexpected {other:?}"),
                }
            }
            Op::Remove(k) if !self.ids.is_empty() => {
                let id = self.ids.remove(k % self.ids.len());
                prop_assert!(self.groups.remove(id, &mut self.view).is_ok());
                self.in_bundles.retain(|(g, _, _)| *g != id);
            }
            Op::AddNode(c, g) => self.add_node(*c, *g),
            Op::RemoveNode(k) if !self.view.is_empty() => {
                let node = self.view.nodes()[k % self.view.len()].id();
                self.view.remove_node(node);
                self.direct.retain(|(n, _)| *n != node);
                let affected = self.groups.on_node_removed(node, &mut self.view);
                let groups = &self.groups;
                // Work inside lost bundles died with the node.
                self.in_bundles
                    .retain(|(g, i, _)| groups.bundle_node(*g, *i).is_some());
                for id in affected {
                    prop_assert_eq!(self.groups.state(id), Some(PgState::Pending));
                }
            }
            Op::Retry => {
                let placed = self.groups.retry_pending(&mut self.view);
                for id in placed {
                    prop_assert_eq!(self.groups.state(id), Some(PgState::Ready));
                }
                // All or nothing: a group not made Ready kept exactly the
                // bundles it had.
                for (id, (state, nodes)) in &before {
                    if self.groups.state(*id) != Some(PgState::Ready) {
                        prop_assert_eq!(&nodes_of(&self.groups, *id), nodes);
                        prop_assert_ne!(*state, Some(PgState::Ready));
                    }
                }
            }
            Op::AcquireDirect(k, c) if !self.view.is_empty() => {
                let node = self.view.nodes()[k % self.view.len()].id();
                let req = halves(*c, 0);
                if self.view.try_acquire(node, &req) {
                    self.direct.push((node, req));
                }
            }
            Op::ReleaseDirect(k) if !self.direct.is_empty() => {
                let (node, req) = self.direct.swap_remove(k % self.direct.len());
                self.view.release(node, &req);
            }
            Op::AcquireInBundle(k, index, c) if !self.ids.is_empty() => {
                let id = self.ids[k % self.ids.len()];
                let req = halves(*c, 0);
                if let Ok((i, node)) = self.groups.acquire_in_bundle(id, *index, &req) {
                    prop_assert_eq!(self.groups.bundle_node(id, i), Some(node));
                    self.in_bundles.push((id, i, req));
                }
            }
            Op::ReleaseInBundle(k) if !self.in_bundles.is_empty() => {
                let (id, i, req) = self.in_bundles.swap_remove(k % self.in_bundles.len());
                prop_assert!(self.groups.release_in_bundle(id, i, &req));
            }
            _ => {}
        }
        self.check()
    }

    /// The invariants that hold after every operation.
    fn check(&self) -> Result<(), TestCaseError> {
        let mut expected: BTreeMap<NodeId, ResourceSet> = BTreeMap::new();
        for (node, req) in &self.direct {
            expected.entry(*node).or_default().add_assign(req);
        }
        for &id in &self.ids {
            let bundles = self.groups.bundles(id).expect("live group");
            let nodes = nodes_of(&self.groups, id);
            let state = self.groups.state(id).expect("live group");
            // (a) Ready means every bundle is reserved; new groups hold all
            // or nothing (checked in `apply`); survivors of a node loss are
            // reserved on live nodes.
            if state == PgState::Ready {
                prop_assert!(nodes.iter().all(Option::is_some), "{id}: {nodes:?}");
                let placed: Vec<NodeId> = nodes.iter().flatten().copied().collect();
                match self.groups.strategy(id).expect("live group") {
                    PlacementStrategy::StrictPack => {
                        prop_assert!(placed.iter().all(|n| *n == placed[0]))
                    }
                    PlacementStrategy::StrictSpread => {
                        let distinct: std::collections::BTreeSet<_> = placed.iter().collect();
                        prop_assert_eq!(distinct.len(), placed.len());
                    }
                    _ => {}
                }
            }
            for (i, (res, node)) in bundles.iter().zip(&nodes).enumerate() {
                if let Some(node) = node {
                    prop_assert!(self.view.node(*node).is_some(), "{id} on dead {node}");
                    expected.entry(*node).or_default().add_assign(res);
                    let in_use = self.groups.bundle_in_use(id, i).expect("bundle");
                    prop_assert!(in_use.is_subset_of(res), "bundle {i} of {id} overcommitted");
                }
            }
        }
        for n in self.view.nodes() {
            let used = n.resources().used();
            // (b) exact accounting.
            let want = expected.remove(&n.id()).unwrap_or_default();
            prop_assert_eq!(used, &want, "node {}", n.id());
            // (c) no overcommit.
            prop_assert!(
                used.is_subset_of(n.resources().total()),
                "node {} overcommitted",
                n.id()
            );
        }
        prop_assert!(
            expected.is_empty(),
            "reservations on unknown nodes: {expected:?}"
        );
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn groups_are_all_or_nothing_accounted_exactly_and_never_overcommit(
        nodes in prop::collection::vec((1u64..6, 0u64..3), 0..6),
        ops in prop::collection::vec(op(), 1..80),
    ) {
        let mut world = World::new(&nodes);
        world.check()?;
        for op in &ops {
            world.apply(op)?;
        }
    }

    #[test]
    fn same_inputs_give_the_same_placements(
        nodes in prop::collection::vec((1u64..6, 0u64..3), 0..6),
        ops in prop::collection::vec(op(), 1..60),
    ) {
        let mut a = World::new(&nodes);
        let mut b = World::new(&nodes);
        for op in &ops {
            a.apply(op)?;
            b.apply(op)?;
            prop_assert_eq!(a.snapshot(), b.snapshot());
        }
    }

    #[test]
    fn every_feasible_group_is_placed_once_the_cluster_is_empty(
        nodes in prop::collection::vec((1u64..6, 0u64..3), 1..6),
        ops in prop::collection::vec(op(), 1..60),
    ) {
        let mut world = World::new(&nodes);
        for op in &ops {
            world.apply(op)?;
        }
        // Free everything not held by a group, then drop all but one group at
        // a time: a group that is not infeasible must be placeable alone.
        for (node, req) in std::mem::take(&mut world.direct) {
            world.view.release(node, &req);
        }
        while let Some(id) = world.ids.pop() {
            for other in std::mem::take(&mut world.ids) {
                world.groups.remove(other, &mut world.view).expect("live");
            }
            world.groups.retry_pending(&mut world.view);
            let state = world.groups.state(id).expect("live");
            prop_assert_ne!(state, PgState::Pending, "{} feasible but never placed", id);
            world.groups.remove(id, &mut world.view).expect("live");
        }
    }
}
