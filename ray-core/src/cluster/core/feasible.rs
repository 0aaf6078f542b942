//! Infeasible work fails at submit, as it does embedded: each process
//! keeps the totals of the cluster's live nodes (from the GCS at start,
//! refreshed every [`REFRESH`]) and refuses a task, actor or placement
//! group no node can ever hold before it is queued.
//!
//! The snapshot may lag a node that just joined by up to [`REFRESH`]; an
//! empty snapshot (not read yet) refuses nothing, and the node daemons
//! still answer infeasible leases themselves.

use std::collections::BTreeMap;

use ray_sched::{LabelSelector, PlacementStrategy, ResourceSet};

use super::*;

/// How often the totals are read again from the GCS.
const REFRESH: Duration = Duration::from_secs(2);

/// The totals of the live nodes, as last read.
#[derive(Default)]
pub(super) struct NodeTotals {
    nodes: Vec<(NodeId, ResourceSet, BTreeMap<String, String>)>,
}

impl NodeTotals {
    /// `Err(Infeasible)` when no node's total holds `request`. Work into a
    /// placement group is checked against its bundle instead, and work
    /// pinned to one node against that node.
    pub(super) fn check(
        &self,
        what: &str,
        request: &ResourceSet,
        strategy: &SchedulingStrategy,
        labels: &LabelSelector,
    ) -> Result<(), Error> {
        if self.nodes.is_empty() || matches!(strategy, SchedulingStrategy::PlacementGroup { .. }) {
            return Ok(());
        }
        let pinned = match strategy {
            SchedulingStrategy::NodeAffinity { node, soft: false } => Some(*node),
            _ => None,
        };
        let allowed = |(id, _, node_labels): &&(NodeId, ResourceSet, BTreeMap<String, String>)| {
            pinned.is_none_or(|p| p == *id) && labels.allows(node_labels)
        };
        if self
            .nodes
            .iter()
            .filter(allowed)
            .any(|(_, total, _)| request.is_subset_of(total))
        {
            return Ok(());
        }
        let labelled = labels.hard.is_empty() || self.nodes.iter().any(|n| allowed(&n));
        // Name the largest node: the one that came closest.
        let largest = self
            .nodes
            .iter()
            .max_by_key(|(_, t, _)| t.get(ray_sched::CPU))
            .map(|(_, t, _)| t.clone())
            .unwrap_or_default();
        Err(Error::Infeasible {
            what: what.to_string(),
            reason: match strategy {
                SchedulingStrategy::NodeAffinity { node, soft: false } => {
                    format!("node {node} can never hold it (or is not alive)")
                }
                _ if !labelled => format!("no live node has the labels {:?}", labels.hard),
                _ => format!(
                    "none of the cluster's {} live nodes can ever hold it",
                    self.nodes.len()
                ),
            },
            request: Box::new(request.clone()),
            total: Box::new(largest),
        })
    }

    /// `Err(Infeasible)` when the live nodes' totals can never hold
    /// group `what`'s `bundles` as `strategy` places them, as embedded: a
    /// bundle no node holds, a strict pack no one node holds, a strict
    /// spread with fewer fitting nodes than bundles (a node each), or
    /// bundles more than all nodes together. (A pack or spread that only
    /// fragments could fail is not caught: it waits, as in Ray.)
    pub(super) fn check_group(
        &self,
        what: &str,
        bundles: &[ResourceSet],
        strategy: PlacementStrategy,
    ) -> Result<(), Error> {
        if self.nodes.is_empty() || bundles.is_empty() {
            return Ok(());
        }
        let totals: Vec<&ResourceSet> = self.nodes.iter().map(|(_, t, _)| t).collect();
        let mut sum = ResourceSet::new();
        for b in bundles {
            sum.add_assign(b);
        }
        let mut all = ResourceSet::new();
        for t in &totals {
            all.add_assign(t);
        }
        let n = totals.len();
        let reason = if let Some(i) = bundles
            .iter()
            .position(|b| !totals.iter().any(|t| b.is_subset_of(t)))
        {
            Some(format!(
                "bundle {i} fits none of the cluster's {n} live nodes"
            ))
        } else if strategy == PlacementStrategy::StrictPack
            && !totals.iter().any(|t| sum.is_subset_of(t))
        {
            Some(format!(
                "STRICT_PACK needs one node to hold all its bundles and none of the cluster's {n} live nodes can"
            ))
        } else if strategy == PlacementStrategy::StrictSpread
            && distinct_fits(bundles, &totals) < bundles.len()
        {
            Some(format!(
                "STRICT_SPREAD needs {} nodes and this cluster has {n} that fit",
                bundles.len()
            ))
        } else if !sum.is_subset_of(&all) {
            Some(format!(
                "its bundles need more than the cluster's {n} live nodes hold together"
            ))
        } else {
            None
        };
        match reason {
            None => Ok(()),
            Some(reason) => Err(Error::Infeasible {
                what: what.to_string(),
                reason,
                request: Box::new(sum),
                total: Box::new(all),
            }),
        }
    }

    /// Replaces the snapshot with the live nodes of `entries`.
    pub(super) fn set(&mut self, entries: &[ray_proto::wire::NodeEntry]) {
        self.nodes = entries
            .iter()
            .filter(|n| n.alive)
            .map(|n| {
                let labels = n.labels.iter().map(|l| (l.key.clone(), l.value.clone()));
                (n.id, resources_from_wire(&n.resources), labels.collect())
            })
            .collect();
    }
}

/// How many of `bundles` can each have a node of its own among `totals`
/// (a maximum matching, by augmenting paths: groups are small).
fn distinct_fits(bundles: &[ResourceSet], totals: &[&ResourceSet]) -> usize {
    fn assign(
        b: usize,
        bundles: &[ResourceSet],
        totals: &[&ResourceSet],
        owner: &mut [Option<usize>],
        seen: &mut [bool],
    ) -> bool {
        for t in 0..totals.len() {
            if seen[t] || !bundles[b].is_subset_of(totals[t]) {
                continue;
            }
            seen[t] = true;
            let free = match owner[t] {
                None => true,
                Some(other) => assign(other, bundles, totals, owner, seen),
            };
            if free {
                owner[t] = Some(b);
                return true;
            }
        }
        false
    }
    let mut owner = vec![None; totals.len()];
    (0..bundles.len())
        .filter(|&b| {
            assign(
                b,
                bundles,
                totals,
                &mut owner,
                &mut vec![false; totals.len()],
            )
        })
        .count()
}

impl ClusterCore {
    /// Fails at once if no live node can ever hold `request`.
    pub(crate) fn check_feasible(
        &self,
        what: &str,
        request: &ResourceSet,
        strategy: &SchedulingStrategy,
        labels: &LabelSelector,
    ) -> Result<(), Error> {
        self.node_totals
            .lock()
            .check(what, request, strategy, labels)
    }

    /// Fails at once if the live nodes can never hold group `what`.
    pub(crate) fn check_group_feasible(
        &self,
        what: &str,
        bundles: &[ResourceSet],
        strategy: PlacementStrategy,
    ) -> Result<(), Error> {
        self.node_totals.lock().check_group(what, bundles, strategy)
    }

    /// Sets the node totals from a node table just read.
    pub(crate) fn set_node_totals(&self, entries: &[ray_proto::wire::NodeEntry]) {
        self.node_totals.lock().set(entries);
    }

    /// Reads the node table every [`REFRESH`] while the runtime lives.
    pub(super) async fn refresh_node_totals(self: Arc<Self>) {
        let mut ticks = tokio::time::interval(REFRESH);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            if self.rt().is_none_or(|rt| rt.is_shut_down()) {
                return;
            }
            if let Ok(nodes) = self.gcs.nodes().await {
                self.set_node_totals(&nodes);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ray_proto::wire::NodeEntry;
    use ray_sched::{Quantity, CPU};

    fn node(id: u64, cpus: u64, alive: bool) -> NodeEntry {
        NodeEntry {
            id: NodeId(id),
            address: format!("127.0.0.1:{id}"),
            resources: resources_to_wire(&ResourceSet::new().with(CPU, Quantity::from_units(cpus))),
            labels: Vec::new(),
            alive,
            death_cause: None,
            used: Vec::new(),
            version: 1,
        }
    }

    impl NodeTotals {
        fn check_any(
            &self,
            what: &str,
            request: &ResourceSet,
            strategy: &SchedulingStrategy,
        ) -> Result<(), Error> {
            self.check(what, request, strategy, &LabelSelector::default())
        }
    }

    #[test]
    fn work_no_live_node_can_hold_is_infeasible_and_the_rest_is_not() {
        let mut totals = NodeTotals::default();
        let want = |cpus| ResourceSet::new().with(CPU, Quantity::from_units(cpus));
        let hybrid = SchedulingStrategy::default();
        // Nothing read yet: nothing refused.
        assert!(totals.check_any("f", &want(100), &hybrid).is_ok());
        totals.set(&[node(1, 2, true), node(2, 4, true), node(3, 64, false)]);
        assert!(totals.check_any("f", &want(4), &hybrid).is_ok());
        match totals.check_any("f", &want(8), &hybrid) {
            Err(Error::Infeasible { what, total, .. }) => {
                assert_eq!(what, "f");
                assert_eq!(
                    total.get(CPU),
                    Quantity::from_units(4),
                    "the largest live node"
                );
            }
            other => panic!("{other:?}"),
        }
        let pinned = |node, soft| SchedulingStrategy::NodeAffinity {
            node: NodeId(node),
            soft,
        };
        assert!(totals.check_any("f", &want(4), &pinned(1, false)).is_err());
        assert!(totals.check_any("f", &want(4), &pinned(1, true)).is_ok());
        assert!(
            totals.check_any("f", &want(1), &pinned(3, false)).is_err(),
            "node 3 is dead"
        );
    }

    #[test]
    fn groups_the_live_nodes_can_never_hold_are_infeasible_and_the_rest_are_not() {
        use PlacementStrategy::{Pack, Spread, StrictPack, StrictSpread};
        let mut totals = NodeTotals::default();
        let cpus = |n| ResourceSet::new().with(CPU, Quantity::from_units(n));
        let reason = |r: Result<(), Error>| match r {
            Err(Error::Infeasible { reason, .. }) => reason,
            other => panic!("{other:?}"),
        };
        // Nothing read yet: nothing refused.
        assert!(totals.check_group("g", &[cpus(100)], Pack).is_ok());
        totals.set(&[node(1, 2, true), node(2, 2, true), node(3, 64, false)]);
        assert!(
            reason(totals.check_group("g", &[cpus(100)], Pack)).starts_with("bundle 0 fits none")
        );
        assert!(reason(totals.check_group("g", &[cpus(1), cpus(3)], Spread))
            .starts_with("bundle 1 fits none"));
        assert!(totals
            .check_group("g", &[cpus(1), cpus(1)], StrictPack)
            .is_ok());
        assert!(
            reason(totals.check_group("g", &[cpus(2), cpus(2)], StrictPack))
                .starts_with("STRICT_PACK")
        );
        assert!(totals.check_group("g", &[cpus(2), cpus(2)], Pack).is_ok());
        assert!(totals
            .check_group("g", &[cpus(1), cpus(1)], StrictSpread)
            .is_ok());
        assert_eq!(
            reason(totals.check_group("g", &[cpus(1), cpus(1), cpus(1)], StrictSpread)),
            "STRICT_SPREAD needs 3 nodes and this cluster has 2 that fit"
        );
        assert!(
            reason(totals.check_group("g", &[cpus(2), cpus(2), cpus(2)], Spread))
                .starts_with("its bundles need more")
        );
        // A node each, where only some nodes fit some bundles: 2 CPUs must
        // take the large node, so the small bundle takes the small one.
        totals.set(&[node(1, 4, true), node(2, 1, true)]);
        assert!(totals
            .check_group("g", &[cpus(1), cpus(2)], StrictSpread)
            .is_ok());
        assert!(totals
            .check_group("g", &[cpus(2), cpus(2)], StrictSpread)
            .is_err());
    }
}
