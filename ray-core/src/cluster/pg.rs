//! Placement groups on a cluster, coordinated by their owner.
//!
//! The owner plans the group with ray-sched's `PlacementGroups` over a view
//! of the cluster built from the GCS's node table (totals and reported
//! load), then reserves it in two phases on the chosen node daemons:
//! `PrepareBundle` on each (a node that cannot hold its bundle now fails
//! the attempt, and every prepared bundle is released), then
//! `CommitBundle`, then `BundlePlaced` to every node so work submitted
//! anywhere into the group finds its bundles. A group that does not fit
//! now is retried until it does or is removed. Removal forgets the group
//! on every node, releases its bundles and kills the owner's actors in it.
//!
//! Bundles on a node that dies are reserved again elsewhere, the same two
//! phases over the live nodes (as Ray's GCS reschedules them): STRICT_PACK
//! bundles go beside the group's surviving ones, STRICT_SPREAD ones to
//! nodes holding none of the group. Work waiting on such a bundle waits in
//! the node schedulers until its new home is announced (`BundlePlaced`),
//! then proceeds; work that was running there failed with the node and is
//! retried as any other.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use ray_proto::wire::{
    BundlePlaced, Call, CommitBundle, Done, NodeEntry, PrepareBundle, ReleaseBundle, RemoveGroup,
};
use ray_proto::{NodeId, PlacementGroupId};
use ray_sched::{ClusterView, PgError, PgState, PlacementGroups, PlacementStrategy, ResourceSet};
use tokio::sync::Notify;

use super::core::{ClusterCore, HeldActor, RemoteActor};
use super::{entry_labels, entry_update, resources_from_wire, resources_to_wire};
use crate::error::{Error, Result};

/// How long a group that does not fit waits before it is tried again.
const RETRY: Duration = Duration::from_millis(100);

/// A placement group this process placed on the cluster.
pub(crate) struct ClusterPg {
    pub(crate) id: PlacementGroupId,
    bundles: Vec<ResourceSet>,
    strategy: PlacementStrategy,
    outcome: Mutex<Option<Result<()>>>,
    pub(crate) changed: Notify,
    /// `(bundle, node)` once reserved.
    placed: Mutex<Vec<(usize, NodeId)>>,
    removed: AtomicBool,
    /// One re-reservation at a time: node deaths may be reported twice, or
    /// two nodes die at once; each pass reads what the last one placed.
    replacing: tokio::sync::Mutex<()>,
    /// Actors created into the group: they die with it.
    actors: Mutex<Vec<Weak<RemoteActor>>>,
}

impl ClusterPg {
    /// `None` while being placed; then ready or why not.
    pub(crate) fn outcome(&self) -> Option<Result<()>> {
        self.outcome.lock().clone()
    }

    /// Number of bundles.
    pub(crate) fn bundle_count(&self) -> usize {
        self.bundles.len()
    }

    /// The bundles' resources, by index.
    pub(crate) fn bundles(&self) -> &[ResourceSet] {
        &self.bundles
    }

    /// Why it is gone, once removed.
    pub(crate) fn removed(&self) -> Option<String> {
        if !self.removed.load(Ordering::Acquire) {
            return None;
        }
        match self.outcome() {
            Some(Err(Error::PlacementGroupRemoved { cause, .. })) => Some(cause),
            _ => Some("removed".into()),
        }
    }

    /// Remembers an actor created into the group.
    pub(crate) fn adopt_actor(&self, actor: &Arc<HeldActor>) {
        // The state, not the handles: an actor whose handles escaped
        // outlives them, and dies with its group all the same.
        self.actors.lock().push(Arc::downgrade(&actor.actor));
    }

    fn settle(&self, outcome: Result<()>) {
        let mut o = self.outcome.lock();
        if o.is_none() || outcome.is_err() {
            *o = Some(outcome);
        }
        drop(o);
        self.changed.notify_waiters();
    }
}

impl ClusterCore {
    /// Starts placing a group of `bundles` laid out by `strategy`.
    pub(crate) fn create_pg(
        self: &Arc<Self>,
        id: PlacementGroupId,
        bundles: Vec<ResourceSet>,
        strategy: PlacementStrategy,
    ) -> Arc<ClusterPg> {
        let pg = Arc::new(ClusterPg {
            id,
            bundles,
            strategy,
            outcome: Mutex::new(None),
            changed: Notify::new(),
            placed: Mutex::new(Vec::new()),
            removed: AtomicBool::new(false),
            replacing: tokio::sync::Mutex::new(()),
            actors: Mutex::new(Vec::new()),
        });
        {
            let mut pgs = self.pgs.lock();
            pgs.retain(|p| p.strong_count() > 0);
            pgs.push(Arc::downgrade(&pg));
        }
        let me = self.clone();
        let placing = pg.clone();
        self.tokio.spawn(async move { me.place_pg(placing).await });
        pg
    }

    /// Why group `id`, made by this process, is gone, if it was removed.
    pub(in crate::cluster) fn pg_removed(&self, id: PlacementGroupId) -> Option<String> {
        self.pgs
            .lock()
            .iter()
            .filter_map(Weak::upgrade)
            .find(|pg| pg.id == id)
            .and_then(|pg| pg.removed())
    }

    /// `node` died: each live group with bundles there has them reserved
    /// again on the live nodes.
    pub(in crate::cluster) fn pg_node_died(self: &Arc<Self>, node: NodeId) {
        let hit: Vec<Arc<ClusterPg>> = self
            .pgs
            .lock()
            .iter()
            .filter_map(Weak::upgrade)
            .filter(|pg| !pg.removed.load(Ordering::Acquire))
            .filter(|pg| pg.placed.lock().iter().any(|&(_, n)| n == node))
            .collect();
        for pg in hit {
            let me = self.clone();
            self.tokio
                .spawn(async move { me.replace_lost(pg, node).await });
        }
    }

    /// Reserves the bundles `pg` lost with `dead` elsewhere, trying until
    /// that works or the group is removed (a group that cannot fit now,
    /// e.g. STRICT_SPREAD with too few nodes left, waits for nodes).
    async fn replace_lost(self: Arc<Self>, pg: Arc<ClusterPg>, dead: NodeId) {
        let mut wait = RETRY;
        loop {
            let one_at_a_time = pg.replacing.lock().await;
            if pg.removed.load(Ordering::Acquire) {
                return;
            }
            let attempt = self.try_replace(&pg, dead).await;
            drop(one_at_a_time);
            match attempt {
                Ok(true) => return,
                Ok(false) => {}
                Err(e) => {
                    tracing::debug!(target: "ray::cluster", group = %pg.id, error = %e, "pg.replace_failed");
                    wait = (wait * 2).min(Duration::from_secs(2));
                }
            }
            tokio::time::sleep(wait).await;
        }
    }

    /// One attempt of [`Self::replace_lost`]: `Ok(true)` when no bundle of
    /// the group is left on `dead`.
    async fn try_replace(self: &Arc<Self>, pg: &Arc<ClusterPg>, dead: NodeId) -> Result<bool> {
        let placed = pg.placed.lock().clone();
        let lost: Vec<usize> = placed
            .iter()
            .filter(|&&(_, n)| n == dead)
            .map(|&(i, _)| i)
            .collect();
        if lost.is_empty() {
            return Ok(true);
        }
        let kept: Vec<NodeId> = placed
            .iter()
            .filter(|&&(_, n)| n != dead)
            .map(|&(_, n)| n)
            .collect();
        let (alive, mut view) = self.live_view().await?;
        // The strategy holds across old and new bundles.
        let allowed = |id: NodeId| match pg.strategy {
            PlacementStrategy::StrictPack => kept.first().is_none_or(|&k| k == id),
            PlacementStrategy::StrictSpread => !kept.contains(&id),
            _ => true,
        };
        for n in &alive {
            if n.id == dead || !allowed(n.id) {
                view.remove_node(n.id);
            }
        }
        let bundles: Vec<ResourceSet> = lost.iter().map(|&i| pg.bundles[i].clone()).collect();
        let mut planner = PlacementGroups::new();
        match planner.create(pg.id, bundles, pg.strategy, &mut view) {
            Ok(PgState::Ready) => {}
            Ok(_) => return Ok(false),
            Err(e) => return Err(Error::cluster(e.to_string())),
        }
        let placements: Vec<(usize, NodeId)> = lost
            .iter()
            .enumerate()
            .filter_map(|(j, &i)| planner.bundle_node(pg.id, j).map(|n| (i, n)))
            .collect();
        if !self.reserve(pg, &placements).await {
            return Ok(false);
        }
        if pg.removed.load(Ordering::Acquire) {
            // Removed meanwhile: its removal did not know of these.
            self.release(pg.id, &placements).await;
            return Ok(true);
        }
        {
            let mut now = pg.placed.lock();
            now.retain(|&(i, _)| !lost.contains(&i));
            now.extend(placements.iter().copied());
        }
        tracing::info!(target: "ray::cluster", group = %pg.id, bundles = placements.len(), from = %dead, "pg.bundles_replaced");
        self.announce(pg, &placements, &alive).await;
        Ok(true)
    }

    async fn place_pg(self: Arc<Self>, pg: Arc<ClusterPg>) {
        loop {
            if pg.removed.load(Ordering::Acquire) {
                return;
            }
            match self.try_place(&pg).await {
                Ok(true) => {
                    if pg.removed.load(Ordering::Acquire) {
                        // Removed while reserving: give it all back.
                        self.release_placed(&pg).await;
                        return;
                    }
                    pg.settle(Ok(()));
                    return;
                }
                Ok(false) => tokio::time::sleep(RETRY).await,
                Err(e) => {
                    pg.settle(Err(e));
                    return;
                }
            }
        }
    }

    /// One attempt: `Ok(true)` reserved, `Ok(false)` not now.
    async fn try_place(self: &Arc<Self>, pg: &Arc<ClusterPg>) -> Result<bool> {
        let (alive, mut view) = self.live_view().await?;
        let mut planner = PlacementGroups::new();
        match planner.create(pg.id, pg.bundles.clone(), pg.strategy, &mut view) {
            Ok(PgState::Ready) => {}
            Ok(_) => return Ok(false),
            Err(PgError::Infeasible {
                reason, cluster, ..
            }) => {
                let mut total = ResourceSet::new();
                for b in &pg.bundles {
                    total.add_assign(b);
                }
                return Err(Error::Infeasible {
                    what: pg.id.to_string(),
                    reason,
                    request: Box::new(total),
                    total: Box::new(cluster.total),
                });
            }
            Err(e) => return Err(Error::InvalidArgument(e.to_string())),
        }
        let placements: Vec<(usize, NodeId)> = (0..pg.bundles.len())
            .filter_map(|i| planner.bundle_node(pg.id, i).map(|n| (i, n)))
            .collect();
        if !self.reserve(pg, &placements).await {
            return Ok(false);
        }
        *pg.placed.lock() = placements.clone();
        let mut by_index = placements.clone();
        by_index.sort_unstable();
        let nodes: Vec<NodeId> = by_index.into_iter().map(|(_, node)| node).collect();
        crate::placement::trace_group_placed(pg.id, pg.strategy, &nodes);
        self.announce(pg, &placements, &alive).await;
        Ok(true)
    }

    /// The live nodes, and a scheduling view of them (totals and reported
    /// load).
    async fn live_view(&self) -> Result<(Vec<NodeEntry>, ClusterView)> {
        let nodes = self.gcs.nodes().await.map_err(Error::cluster_source)?;
        let alive: Vec<_> = nodes.into_iter().filter(|n| n.alive).collect();
        let mut view = ClusterView::new();
        for n in &alive {
            view.add_node(n.id, resources_from_wire(&n.resources), entry_labels(n));
            if let Some(update) = entry_update(n) {
                view.apply_update(&update);
            }
        }
        Ok((alive, view))
    }

    /// Reserves `placements` of `pg` on their nodes in two phases, all or
    /// nothing: `false` (and nothing held) if a node refused.
    async fn reserve(&self, pg: &ClusterPg, placements: &[(usize, NodeId)]) -> bool {
        let mut prepared = Vec::new();
        for &(i, node) in placements {
            let request = PrepareBundle {
                group: pg.id,
                index: i as u32,
                resources: resources_to_wire(&pg.bundles[i]),
            };
            if self.ask_node(node, request).await {
                prepared.push((i, node));
            } else {
                self.release(pg.id, &prepared).await;
                return false;
            }
        }
        for &(i, node) in placements {
            let commit = CommitBundle {
                group: pg.id,
                index: i as u32,
            };
            if !self.ask_node(node, commit).await {
                self.release(pg.id, placements).await;
                return false;
            }
        }
        true
    }

    /// Tells every node in `alive` where `placements` of `pg` are.
    async fn announce(&self, pg: &ClusterPg, placements: &[(usize, NodeId)], alive: &[NodeEntry]) {
        for n in alive {
            for &(i, node) in placements {
                let placed = BundlePlaced {
                    group: pg.id,
                    index: i as u32,
                    node,
                    resources: resources_to_wire(&pg.bundles[i]),
                };
                self.ask_node(n.id, placed).await;
            }
        }
    }

    /// Sends `request` to node `node`'s daemon; true if it answered `Ok`.
    async fn ask_node<C: Call<Reply = Done>>(&self, node: NodeId, request: C) -> bool {
        match self.node_addr(node).await {
            Ok(addr) => matches!(self.ask(addr, request).await, Ok(Ok(Done))),
            Err(_) => false,
        }
    }

    async fn release(&self, group: PlacementGroupId, bundles: &[(usize, NodeId)]) {
        for &(i, node) in bundles {
            let release = ReleaseBundle {
                group,
                index: i as u32,
            };
            self.ask_node(node, release).await;
        }
    }

    async fn release_placed(&self, pg: &ClusterPg) {
        let placed = std::mem::take(&mut *pg.placed.lock());
        self.release(pg.id, &placed).await;
    }

    /// Removes the group: every node forgets it, its bundles go back, its
    /// actors die, and waiting on it fails.
    pub(crate) fn remove_pg(self: &Arc<Self>, pg: &Arc<ClusterPg>, why: &str) {
        if pg.removed.swap(true, Ordering::AcqRel) {
            return;
        }
        crate::placement::trace_group_removed(pg.id);
        pg.settle(Err(Error::PlacementGroupRemoved {
            group: pg.id,
            cause: why.to_string(),
        }));
        for a in pg.actors.lock().drain(..).filter_map(|a| a.upgrade()) {
            // As embedded: the cause names the group, not a kill.
            a.kill_because(format!("its placement group {} is gone: {why}", pg.id));
        }
        let me = self.clone();
        let pg = pg.clone();
        self.tokio.spawn(async move {
            if let Ok(nodes) = me.gcs.nodes().await {
                for n in nodes.into_iter().filter(|n| n.alive) {
                    me.ask_node(n.id, RemoveGroup { group: pg.id }).await;
                }
            }
            me.release_placed(&pg).await;
        });
    }
}
