//! The cluster view: every node's resources and labels as one node knows
//! them, with version numbers for gossip.
//!
//! Each node owns the truth about itself and publishes it as a
//! [`NodeUpdate`] with a version that only grows; others apply an update only
//! if it is newer than what they hold. A view may therefore be stale, which
//! is why a node receiving spilled work re-checks it against its own state
//! (see `node_scheduler`).

use std::collections::BTreeMap;
use std::fmt;

use hashbrown::HashMap;
use ray_proto::NodeId;

use crate::node::NodeResources;
use crate::resources::ResourceSet;

/// One node as the view knows it.
#[derive(Clone, Debug)]
pub struct NodeView {
    id: NodeId,
    resources: NodeResources,
    labels: BTreeMap<String, String>,
    version: u64,
    /// `utilization()`, recomputed on every change to `resources`, because
    /// policies read it once per candidate per decision.
    util: u32,
    /// `resources.total().name_mask()`: the total never changes, so a
    /// policy can rule out a node lacking a requested name with one AND.
    mask: u32,
}

impl NodeView {
    /// The node's id.
    pub fn id(&self) -> NodeId {
        self.id
    }

    /// Its total and used resources (as of `version`).
    pub fn resources(&self) -> &NodeResources {
        &self.resources
    }

    /// Its labels (`zone=a`, …).
    pub fn labels(&self) -> &BTreeMap<String, String> {
        &self.labels
    }

    /// The version of the last update applied for it.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// How busy the node is, in 1/10 000: the highest used/total ratio over
    /// the resources it has (Ray's "critical resource utilization").
    ///
    /// O(1): the view keeps it up to date as the node's usage changes.
    pub fn utilization(&self) -> u32 {
        self.util
    }

    /// Whether the node certainly lacks (has zero in total of) some name set
    /// in `req_mask` ([`ResourceSet::name_mask`] of a request): such a node
    /// can never hold the request. `false` does not mean it can.
    #[inline]
    pub(crate) fn lacks_some_name(&self, req_mask: u32) -> bool {
        req_mask & !self.mask != 0
    }

    fn compute_utilization(resources: &NodeResources) -> u32 {
        let used = resources.used();
        let mut worst = 0u64;
        for (name, total) in resources.total().iter() {
            if total.is_zero() {
                continue;
            }
            let u = used.get(name).raw().min(total.raw()) as u128 * 10_000 / total.raw() as u128;
            worst = worst.max(u as u64);
        }
        worst as u32
    }
}

/// A node's state as it publishes it: the gossip message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeUpdate {
    /// The node described.
    pub node: NodeId,
    /// Grows with every change the node makes to itself.
    pub version: u64,
    /// Its used resources at that version.
    pub used: ResourceSet,
}

/// All nodes one scheduler knows, in a deterministic order (by id).
///
/// Besides the id order, the view keeps the nodes ordered by utilization
/// ([`ClusterView::nodes_by_utilization`]), updated on every change, so a
/// policy looking for the least-loaded nodes walks a few entries instead of
/// scanning the cluster.
#[derive(Clone, Debug, Default)]
pub struct ClusterView {
    nodes: Vec<NodeView>,
    index: HashMap<NodeId, usize>,
    /// `(utilization, id)` of every node, least loaded first, ties by id,
    /// mapped to the node's slot in `nodes`, so a walk reaches each node
    /// without a lookup by id.
    by_util: BTreeMap<(u32, NodeId), u32>,
    membership: u64,
}

impl ClusterView {
    /// An empty view.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a node with nothing used. Returns `false` if it is already there.
    pub fn add_node(
        &mut self,
        id: NodeId,
        total: ResourceSet,
        labels: BTreeMap<String, String>,
    ) -> bool {
        if self.index.contains_key(&id) {
            return false;
        }
        let at = self.nodes.partition_point(|n| n.id < id);
        let mask = total.name_mask();
        self.nodes.insert(
            at,
            NodeView {
                id,
                resources: NodeResources::new(total),
                labels,
                version: 0,
                util: 0,
                mask,
            },
        );
        if at + 1 < self.nodes.len() {
            self.shift_slots(at, |slot| slot + 1);
        }
        self.index.insert(id, at);
        self.by_util.insert((0, id), slot32(at));
        self.membership += 1;
        true
    }

    /// A copy holding only the nodes `keep` accepts (for deciding among
    /// the nodes a label selector allows).
    pub fn subset(&self, keep: impl Fn(&NodeView) -> bool) -> ClusterView {
        let mut out = self.clone();
        for node in &self.nodes {
            if !keep(node) {
                out.remove_node(node.id);
            }
        }
        out
    }

    /// Removes a node (it died or left). Returns whether it was there.
    pub fn remove_node(&mut self, id: NodeId) -> bool {
        let Some(at) = self.index.get(&id).copied() else {
            return false;
        };
        let gone = self.nodes.remove(at);
        self.index.remove(&id);
        self.by_util.remove(&(gone.util, id));
        if at < self.nodes.len() {
            self.shift_slots(at + 1, |slot| slot - 1);
        }
        self.membership += 1;
        true
    }

    /// Applies `shift` to every slot at or after `from` in both indexes
    /// (the nodes there moved by one). Callers skip it when no node moved
    /// (a node added or removed at the end, the common case of ids that
    /// only grow).
    fn shift_slots(&mut self, from: usize, shift: impl Fn(usize) -> usize) {
        for slot in self.index.values_mut() {
            if *slot >= from {
                *slot = shift(*slot);
            }
        }
        let from = slot32(from);
        for slot in self.by_util.values_mut() {
            if *slot >= from {
                *slot = slot32(shift(*slot as usize));
            }
        }
    }

    /// Grows whenever a node joins or leaves.
    pub fn membership_version(&self) -> u64 {
        self.membership
    }

    /// The node with this id.
    pub fn node(&self, id: NodeId) -> Option<&NodeView> {
        self.index.get(&id).map(|&i| &self.nodes[i])
    }

    /// Every node, ordered by id.
    pub fn nodes(&self) -> &[NodeView] {
        &self.nodes
    }

    /// Every node, least utilized first ([`NodeView::utilization`]), ties by
    /// id. Each step is one step of an ordered index, so walking the first
    /// few nodes is cheap whatever the cluster's size.
    pub fn nodes_by_utilization(&self) -> impl Iterator<Item = &NodeView> + '_ {
        let nodes = &self.nodes[..];
        self.by_util.values().map(move |&at| &nodes[at as usize])
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether there are no nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Applies `change` to `id`'s resources and keeps its version, cached
    /// utilization and place in `by_util` in step. `change` returns whether
    /// it changed anything. Returns `None` for an unknown node.
    fn change_node(
        &mut self,
        id: NodeId,
        change: impl FnOnce(&mut NodeView) -> bool,
    ) -> Option<bool> {
        let &at = self.index.get(&id)?;
        let n = &mut self.nodes[at];
        if !change(n) {
            return Some(false);
        }
        let util = NodeView::compute_utilization(&n.resources);
        if util != n.util {
            self.by_util.remove(&(n.util, id));
            self.by_util.insert((util, id), slot32(at));
            n.util = util;
        }
        Some(true)
    }

    /// Takes `req` on `node` if it fits there now. `false` if it does not or
    /// the node is unknown.
    pub fn try_acquire(&mut self, node: NodeId, req: &ResourceSet) -> bool {
        self.change_node(node, |n| {
            let ok = n.resources.try_acquire(req);
            if ok {
                n.version += 1;
            }
            ok
        })
        .unwrap_or(false)
    }

    /// Takes `req` on `node` without checking (a task resuming after a
    /// blocking wait). Unknown nodes are ignored.
    pub fn acquire_forced(&mut self, node: NodeId, req: &ResourceSet) {
        self.change_node(node, |n| {
            n.resources.acquire_forced(req);
            n.version += 1;
            true
        });
    }

    /// Gives `req` back on `node`. Unknown nodes are ignored.
    pub fn release(&mut self, node: NodeId, req: &ResourceSet) {
        self.change_node(node, |n| {
            n.resources.release(req);
            n.version += 1;
            true
        });
    }

    /// What `node` would publish about itself now.
    pub fn update_for(&self, node: NodeId) -> Option<NodeUpdate> {
        self.node(node).map(|n| NodeUpdate {
            node,
            version: n.version,
            used: n.resources.used().clone(),
        })
    }

    /// Applies gossip about a node if it is newer than what the view holds.
    /// Returns whether anything changed.
    pub fn apply_update(&mut self, update: &NodeUpdate) -> bool {
        self.change_node(update.node, |n| {
            if update.version <= n.version {
                return false;
            }
            let mut resources = NodeResources::new(n.resources.total().clone());
            resources.acquire_forced(&update.used);
            n.resources = resources;
            n.version = update.version;
            true
        })
        .unwrap_or(false)
    }

    /// Whether some node could ever hold `req` (ignoring what is in use).
    pub fn feasible_somewhere(&self, req: &ResourceSet) -> bool {
        self.nodes.iter().any(|n| n.resources.is_feasible(req))
    }

    /// Totals of the cluster, for messages.
    pub fn summary(&self) -> ClusterSummary {
        let mut total = ResourceSet::new();
        let mut available = ResourceSet::new();
        for n in &self.nodes {
            total.add_assign(n.resources.total());
            available.add_assign(&n.resources.available());
        }
        ClusterSummary {
            nodes: self.nodes.len(),
            total,
            available,
        }
    }
}

/// A slot in `ClusterView::nodes` as stored in its ordered index.
fn slot32(slot: usize) -> u32 {
    u32::try_from(slot).expect("fewer than 2^32 nodes")
}

/// The cluster in one line: node count, total and available resources.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterSummary {
    /// Number of nodes.
    pub nodes: usize,
    /// Sum of every node's total.
    pub total: ResourceSet,
    /// Sum of what is free.
    pub available: ResourceSet,
}

impl fmt::Display for ClusterSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} nodes, total {}, available {}",
            self.nodes, self.total, self.available
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quantity::Quantity;

    fn cpus(n: u64) -> ResourceSet {
        ResourceSet::cpu(Quantity::from_units(n))
    }

    #[test]
    fn nodes_are_kept_in_id_order_and_found_by_id() {
        let mut v = ClusterView::new();
        assert!(v.add_node(NodeId(3), cpus(1), BTreeMap::new()));
        assert!(v.add_node(NodeId(1), cpus(2), BTreeMap::new()));
        assert!(!v.add_node(NodeId(1), cpus(9), BTreeMap::new()));
        let ids: Vec<_> = v.nodes().iter().map(|n| n.id()).collect();
        assert_eq!(ids, [NodeId(1), NodeId(3)]);
        assert_eq!(
            v.node(NodeId(3)).map(|n| n.resources().total().clone()),
            Some(cpus(1))
        );
        assert!(v.remove_node(NodeId(1)));
        assert!(v.node(NodeId(1)).is_none());
        assert_eq!(v.node(NodeId(3)).map(|n| n.id()), Some(NodeId(3)));
    }

    #[test]
    fn stale_updates_are_ignored_and_newer_ones_replace_usage() {
        let mut owner = ClusterView::new();
        let mut peer = ClusterView::new();
        for v in [&mut owner, &mut peer] {
            v.add_node(NodeId(1), cpus(4), BTreeMap::new());
        }
        assert!(owner.try_acquire(NodeId(1), &cpus(3)));
        let newer = owner.update_for(NodeId(1)).expect("node known");
        owner.release(NodeId(1), &cpus(3));
        let newest = owner.update_for(NodeId(1)).expect("node known");
        assert!(peer.apply_update(&newest));
        assert!(!peer.apply_update(&newer), "older version does not win");
        assert_eq!(
            peer.node(NodeId(1)).map(|n| n.resources().used().clone()),
            Some(ResourceSet::new())
        );
    }

    #[test]
    fn utilization_is_the_busiest_resource() {
        let mut v = ClusterView::new();
        let total = cpus(4).with(crate::GPU, Quantity::from_units(2));
        v.add_node(NodeId(1), total, BTreeMap::new());
        assert!(v.try_acquire(
            NodeId(1),
            &cpus(1).with(crate::GPU, Quantity::from_units(1))
        ));
        assert_eq!(v.node(NodeId(1)).map(NodeView::utilization), Some(5_000));
    }

    #[test]
    fn nodes_by_utilization_follows_every_change_least_loaded_first() {
        let mut v = ClusterView::new();
        for id in 1..=3 {
            v.add_node(NodeId(id), cpus(4), BTreeMap::new());
        }
        let order = |v: &ClusterView| {
            v.nodes_by_utilization()
                .map(|n| (n.utilization(), n.id().0))
                .collect::<Vec<_>>()
        };
        assert_eq!(order(&v), [(0, 1), (0, 2), (0, 3)]);
        assert!(v.try_acquire(NodeId(1), &cpus(2)));
        v.acquire_forced(NodeId(2), &cpus(1));
        assert_eq!(order(&v), [(0, 3), (2_500, 2), (5_000, 1)]);
        v.release(NodeId(1), &cpus(2));
        let update = NodeUpdate {
            node: NodeId(3),
            version: 9,
            used: cpus(4),
        };
        assert!(v.apply_update(&update));
        v.remove_node(NodeId(2));
        assert_eq!(order(&v), [(0, 1), (10_000, 3)]);
        // A node joining between others moves them in the id order; the
        // utilization order still reaches the right nodes.
        v.add_node(NodeId(2), cpus(2), BTreeMap::new());
        assert!(v.try_acquire(NodeId(2), &cpus(1)));
        assert_eq!(order(&v), [(0, 1), (5_000, 2), (10_000, 3)]);
        v.add_node(NodeId(0), cpus(1), BTreeMap::new());
        assert!(v.remove_node(NodeId(1)));
        assert_eq!(order(&v), [(0, 0), (5_000, 2), (10_000, 3)]);
        for n in v.nodes() {
            assert_eq!(v.node(n.id()).map(NodeView::id), Some(n.id()));
        }
    }

    #[test]
    fn summary_adds_up_nodes() {
        let mut v = ClusterView::new();
        v.add_node(NodeId(1), cpus(2), BTreeMap::new());
        v.add_node(NodeId(2), cpus(3), BTreeMap::new());
        assert!(v.try_acquire(NodeId(2), &cpus(1)));
        let s = v.summary();
        assert_eq!(
            (s.nodes, s.total.clone(), s.available.clone()),
            (2, cpus(5), cpus(4))
        );
        assert_eq!(s.to_string(), "2 nodes, total {CPU: 5}, available {CPU: 4}");
        assert!(v.feasible_somewhere(&cpus(3)));
        assert!(!v.feasible_somewhere(&cpus(4)));
    }
}
