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
    /// group `what`'s `bundles` as `strategy` places them, as embedded:
    /// ray-sched's planner tries them on empty nodes of these sizes.
    pub(super) fn check_group(
        &self,
        what: &str,
        bundles: &[ResourceSet],
        strategy: PlacementStrategy,
    ) -> Result<(), Error> {
        if self.nodes.is_empty() {
            return Ok(());
        }
        let mut view = ray_sched::ClusterView::new();
        let mut all = ResourceSet::new();
        for (id, total, labels) in &self.nodes {
            view.add_node(*id, total.clone(), labels.clone());
            all.add_assign(total);
        }
        let Some(reason) = ray_sched::never_fits(bundles, strategy, &view) else {
            return Ok(());
        };
        let mut request = ResourceSet::new();
        for b in bundles {
            request.add_assign(b);
        }
        Err(Error::Infeasible {
            what: what.to_string(),
            reason,
            request: Box::new(request),
            total: Box::new(all),
        })
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
            reason(totals.check_group("g", &[cpus(100)], Pack)).ends_with("fits on no node"),
            "node 3, large enough, is dead"
        );
        assert!(
            reason(totals.check_group("g", &[cpus(1), cpus(3)], Spread)).starts_with("bundle 1 ")
        );
        assert!(totals
            .check_group("g", &[cpus(1), cpus(1)], StrictPack)
            .is_ok());
        assert!(
            reason(totals.check_group("g", &[cpus(2), cpus(2)], StrictPack))
                .contains("more than any one node has")
        );
        assert!(totals.check_group("g", &[cpus(2), cpus(2)], Pack).is_ok());
        assert!(totals
            .check_group("g", &[cpus(1), cpus(1)], StrictSpread)
            .is_ok());
        assert_eq!(
            reason(totals.check_group("g", &[cpus(1), cpus(1), cpus(1)], StrictSpread)),
            "it needs 3 distinct nodes that can each hold one of its bundles"
        );
        assert!(
            reason(totals.check_group("g", &[cpus(2), cpus(2), cpus(2)], Spread))
                .contains("do not fit on the cluster's nodes together")
        );
        // Within the sum of the nodes, but not in pieces they hold: 1.5 +
        // 1.5 + 1 CPUs on two 2-CPU nodes.
        let half = |n: f64| ResourceSet::new().with(CPU, Quantity::from_f64(n).unwrap());
        assert!(totals
            .check_group("g", &[half(1.5), half(1.5), half(1.0)], Pack)
            .is_err());
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
