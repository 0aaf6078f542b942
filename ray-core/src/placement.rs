//! Placement groups on the embedded node, and the resource pools work is
//! admitted into (the node's, or a bundle's).
//!
//! A group reserves the sum of its bundles from the node in one admission,
//! so the reservation is all or nothing. Once reserved, each bundle is a
//! pool of its own: an admission queue (ray-sched `LocalQueue`) whose total
//! is the bundle, into which tasks and actors scheduled into the bundle are
//! admitted. Removing the group gives the reservation back to the node and
//! fails what still waits in its bundles.

use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use ray_proto::PlacementGroupId;
use ray_sched::{Admission, LocalQueue, PlacementStrategy, ResourceSet};

use crate::actor::ActorCell;
use crate::error::{Error, Result};
use crate::options::{ResourceOptions, ResourceRequest};
use crate::runtime::{Dispatch, Runtime};

/// Where a task or actor takes its resources from.
#[derive(Clone)]
pub(crate) enum Pool {
    /// The node's own resources.
    Node,
    /// A bundle of a placement group.
    Bundle(Arc<PgCell>, usize),
}

/// One bundle's resources, built like task options:
/// `Bundle::new().num_cpus(1.0).num_gpus(0.5)`.
#[derive(Clone, Debug)]
pub struct Bundle(ResourceRequest);

impl Bundle {
    /// An empty bundle.
    pub fn new() -> Self {
        Bundle(ResourceRequest::empty())
    }
}

impl Default for Bundle {
    fn default() -> Self {
        Self::new()
    }
}

impl ResourceOptions for Bundle {
    fn resource_request(&mut self) -> &mut ResourceRequest {
        &mut self.0
    }
}

enum PgState {
    /// Waiting for the node to have the whole reservation; work scheduled
    /// into it meanwhile waits here.
    Pending(Vec<(usize, ResourceSet, Dispatch)>),
    /// Reserved: one admission queue per bundle.
    Ready(Vec<LocalQueue<Dispatch>>),
    /// Removed, or could not be created; the reason.
    Gone(String),
}

/// The shared state of one placement group.
pub(crate) struct PgCell {
    pub(crate) id: PlacementGroupId,
    /// How its bundles are laid out (all on this node, embedded).
    strategy: PlacementStrategy,
    bundles: Vec<ResourceSet>,
    /// The sum of the bundles: what the node reserves.
    pub(crate) total: ResourceSet,
    state: Mutex<PgState>,
    changed: tokio::sync::Notify,
    /// Actors living in the group's bundles: they die with it.
    actors: Mutex<Vec<Weak<ActorCell>>>,
}

/// The bundle of group `id` (bundles `bundles`) a request goes to: the
/// one asked for, or the first that could ever hold it. The same checks,
/// and errors, embedded and on a cluster: a bundle that does not exist is
/// `InvalidArgument`, one that can never hold the request `Infeasible`.
pub(crate) fn choose_bundle(
    id: PlacementGroupId,
    bundles: &[ResourceSet],
    bundle: Option<usize>,
    req: &ResourceSet,
) -> Result<usize> {
    let fits = |i: usize| req.is_subset_of(&bundles[i]);
    match bundle {
        Some(i) if i >= bundles.len() => Err(Error::InvalidArgument(format!(
            "{id} has {} bundles; there is no bundle {i}",
            bundles.len()
        ))),
        Some(i) if fits(i) => Ok(i),
        Some(i) => Err(Error::Infeasible {
            what: format!("bundle {i} of {id}"),
            reason: "the bundle can never hold it".into(),
            request: Box::new(req.clone()),
            total: Box::new(bundles[i].clone()),
        }),
        None => (0..bundles.len()).find(|&i| fits(i)).ok_or_else(|| {
            let mut total = ResourceSet::new();
            for b in bundles {
                total.add_assign(b);
            }
            Error::Infeasible {
                what: format!("{id}"),
                reason: "no bundle of the group can ever hold it".into(),
                request: Box::new(req.clone()),
                total: Box::new(total),
            }
        }),
    }
}

impl PgCell {
    fn gone_error(&self, why: &str) -> Error {
        Error::PlacementGroupRemoved {
            group: self.id,
            cause: why.to_string(),
        }
    }

    /// The bundle a request goes to: the one asked for, or the first that
    /// could ever hold it.
    pub(crate) fn choose_bundle(&self, bundle: Option<usize>, req: &ResourceSet) -> Result<usize> {
        choose_bundle(self.id, &self.bundles, bundle, req)
    }

    /// Admits work into bundle `i`: returns it if it may run now.
    pub(crate) fn admit(
        &self,
        rt: &Arc<Runtime>,
        i: usize,
        req: ResourceSet,
        d: Dispatch,
    ) -> Option<Dispatch> {
        let mut state = self.state.lock();
        let admission = match &mut *state {
            PgState::Pending(waiting) => {
                waiting.push((i, req, d));
                return None;
            }
            PgState::Ready(queues) => queues[i].submit(req, d),
            PgState::Gone(why) => {
                let err = self.gone_error(why);
                drop(state);
                rt.fail_dispatch(d, err);
                return None;
            }
        };
        drop(state);
        match admission {
            Admission::Run(d) => Some(d),
            Admission::Queued => None,
            Admission::Infeasible(d, inf) => {
                rt.fail_dispatch(
                    d,
                    Error::Infeasible {
                        what: format!("bundle {i} of {}", self.id),
                        reason: "the bundle can never hold it".into(),
                        request: Box::new(inf.request),
                        total: Box::new(inf.total),
                    },
                );
                None
            }
        }
    }

    /// Gives `req` back to bundle `i`; returns what now fits there.
    pub(crate) fn release(&self, i: usize, req: &ResourceSet) -> Vec<Dispatch> {
        let mut ready = Vec::new();
        if let PgState::Ready(queues) = &mut *self.state.lock() {
            queues[i].release(req);
            while let Some((_, d)) = queues[i].pop_runnable() {
                ready.push(d);
            }
        }
        ready
    }

    /// Takes `req` back in bundle `i` after a blocking wait.
    pub(crate) fn acquire_forced(&self, i: usize, req: &ResourceSet) {
        if let PgState::Ready(queues) = &mut *self.state.lock() {
            queues[i].acquire_forced(req);
        }
    }

    /// The node reserved the group: open the bundles and admit what waited.
    pub(crate) fn reserved(self: &Arc<Self>, rt: &Arc<Runtime>) {
        let waiting = {
            let mut state = self.state.lock();
            match &*state {
                PgState::Pending(_) => {}
                PgState::Ready(_) => return,
                PgState::Gone(_) => {
                    // Removed while waiting for the node: give it straight back.
                    drop(state);
                    rt.release_resources(&self.total);
                    return;
                }
            }
            let queues = self
                .bundles
                .iter()
                .map(|b| LocalQueue::new(b.clone()))
                .collect();
            match std::mem::replace(&mut *state, PgState::Ready(queues)) {
                PgState::Pending(waiting) => waiting,
                _ => Vec::new(),
            }
        };
        self.changed.notify_waiters();
        trace_group_placed(self.id, self.strategy, &vec![rt.node; self.bundles.len()]);
        for (i, req, d) in waiting {
            if let Some(d) = self.admit(rt, i, req, d) {
                rt.run_dispatch(d);
            }
        }
    }

    /// The group is gone: the reservation returns to the node and whatever
    /// still waits in it fails. Work already running finishes; its releases
    /// into the removed bundles are ignored.
    pub(crate) fn remove(&self, rt: &Arc<Runtime>, why: &str) {
        let previous = std::mem::replace(&mut *self.state.lock(), PgState::Gone(why.to_string()));
        self.changed.notify_waiters();
        let waiting: Vec<Dispatch> = match previous {
            PgState::Gone(_) => return,
            PgState::Pending(waiting) => waiting.into_iter().map(|(_, _, d)| d).collect(),
            PgState::Ready(queues) => {
                trace_group_removed(self.id);
                rt.release_resources(&self.total);
                queues
                    .into_iter()
                    .flat_map(|mut q| q.drain_queued())
                    .map(|(_, d)| d)
                    .collect()
            }
        };
        for d in waiting {
            rt.fail_dispatch(d, self.gone_error(why));
        }
        // Ray kills a group's actors with it: their resources went back to
        // the node above, so they must not keep running on them.
        let actors: Vec<_> = std::mem::take(&mut *self.actors.lock())
            .into_iter()
            .filter_map(|a| a.upgrade())
            .collect();
        for actor in &actors {
            actor.fail(format!("its placement group {} is gone: {why}", self.id));
        }
        drop(actors);
        rt.pgs.lock().remove(&self.id);
    }

    /// Records an actor that lives in one of the bundles.
    pub(crate) fn adopt_actor(&self, actor: &Arc<ActorCell>) {
        let mut actors = self.actors.lock();
        actors.retain(|a| a.strong_count() > 0);
        actors.push(Arc::downgrade(actor));
    }

    /// `Some(Ok)` once ready, `Some(Err)` once gone, `None` while pending.
    fn outcome(&self) -> Option<Result<()>> {
        match &*self.state.lock() {
            PgState::Pending(_) => None,
            PgState::Ready(_) => Some(Ok(())),
            PgState::Gone(why) => Some(Err(self.gone_error(why))),
        }
    }
}

/// A handle to a placement group: bundles of resources reserved together.
///
/// Schedule work into it with `.placement_group(&pg, Some(index))` on task
/// or actor options. The group lives until [`remove`](Self::remove)d or the
/// runtime shuts down, whatever happens to its handles.
#[derive(Clone)]
pub struct PlacementGroup {
    pub(crate) inner: PgInner,
}

/// Where a group lives.
#[derive(Clone)]
pub(crate) enum PgInner {
    /// On the embedded node.
    Local(Arc<PgCell>),
    /// On a cluster, placed by this process.
    Cluster(Arc<dyn crate::remote::RemotePg>, Arc<Runtime>),
}

impl std::fmt::Debug for PlacementGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "PlacementGroup({}, {} bundles)",
            self.id(),
            self.bundle_count()
        )
    }
}

impl PlacementGroup {
    /// The group's id.
    pub fn id(&self) -> PlacementGroupId {
        match &self.inner {
            PgInner::Local(cell) => cell.id,
            PgInner::Cluster(pg, _) => pg.id(),
        }
    }

    /// Number of bundles.
    pub fn bundle_count(&self) -> usize {
        match &self.inner {
            PgInner::Local(cell) => cell.bundles.len(),
            PgInner::Cluster(pg, _) => pg.bundle_count(),
        }
    }

    /// On a cluster, what an embedded group checks when work goes into it:
    /// `Err` for a bundle that does not exist or can never hold `req` (at
    /// submit, as embedded); `Ok(Some(error))` once the group was removed
    /// or could not be placed (the work fails with it, as embedded); else
    /// `Ok(None)`. An embedded group checks on admission itself.
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))] // used by the cluster code
    pub(crate) fn check_cluster_work(
        &self,
        bundle: Option<usize>,
        req: &ResourceSet,
    ) -> Result<Option<Error>> {
        let PgInner::Cluster(pg, _) = &self.inner else {
            return Ok(None);
        };
        choose_bundle(pg.id(), pg.bundles(), bundle, req)?;
        if let Some(cause) = pg.removed() {
            return Ok(Some(Error::PlacementGroupRemoved {
                group: pg.id(),
                cause,
            }));
        }
        // A group that failed (the cluster could not place it) fails the
        // work sent into it, rather than leaving it to wait for bundles
        // that will never be reserved.
        Ok(match pg.outcome() {
            Some(Err(e)) => Some(e),
            _ => None,
        })
    }

    fn outcome(&self) -> Option<Result<()>> {
        match &self.inner {
            PgInner::Local(cell) => cell.outcome(),
            PgInner::Cluster(pg, _) => pg.outcome(),
        }
    }

    fn changed(&self) -> &tokio::sync::Notify {
        match &self.inner {
            PgInner::Local(cell) => &cell.changed,
            PgInner::Cluster(pg, _) => pg.changed(),
        }
    }

    /// Waits until every bundle is reserved. Fails with
    /// [`Error::PlacementGroupRemoved`] if the group is removed first.
    pub async fn ready(&self) -> Result<()> {
        loop {
            let changed = self.changed().notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if let Some(outcome) = self.outcome() {
                return outcome;
            }
            changed.await;
        }
    }

    /// Whether every bundle is reserved now.
    pub fn is_ready(&self) -> bool {
        matches!(self.outcome(), Some(Ok(())))
    }

    /// Removes the group: its resources return to the node, and work waiting
    /// to run in it fails with [`Error::PlacementGroupRemoved`].
    pub fn remove(&self, ray: &crate::Ray) {
        match &self.inner {
            PgInner::Local(cell) => cell.remove(&ray.rt, "removed by its owner"),
            PgInner::Cluster(pg, rt) => {
                if let Some(remote) = rt.remote.get() {
                    remote.remove_placement_group(pg, "removed by its owner");
                }
            }
        }
    }
}

/// Records that group `id`'s bundles are reserved, bundle `i` on `nodes[i]`
/// (insight's physical view).
pub(crate) fn trace_group_placed(
    id: ray_proto::PlacementGroupId,
    strategy: PlacementStrategy,
    nodes: &[ray_proto::NodeId],
) {
    if tracing::enabled!(target: "ray::placement", tracing::Level::TRACE) {
        let nodes: Vec<String> = nodes.iter().map(ToString::to_string).collect();
        tracing::trace!(
            name: "placement_group.placed",
            target: "ray::placement",
            group_id = id.as_u128(),
            strategy = ?strategy,
            bundle_nodes = nodes.join(",").as_str()
        );
    }
}

/// Records that group `id` released its bundles.
pub(crate) fn trace_group_removed(id: ray_proto::PlacementGroupId) {
    tracing::trace!(
        name: "placement_group.removed",
        target: "ray::placement",
        group_id = id.as_u128()
    );
}

/// Creates a group on the embedded node (see [`crate::Ray::placement_group`]).
pub(crate) fn create(
    rt: &Arc<Runtime>,
    bundles: Vec<Bundle>,
    strategy: PlacementStrategy,
) -> Result<PlacementGroup> {
    rt.check_running()?;
    let sets = bundle_sets(&bundles)?;
    if let Some(remote) = rt.remote.get() {
        let id = PlacementGroupId::new(rt.worker, rt.next_seq());
        let pg = remote.create_placement_group(id, sets, strategy)?;
        return Ok(PlacementGroup {
            inner: PgInner::Cluster(pg, rt.clone()),
        });
    }
    let mut total = ResourceSet::new();
    for s in &sets {
        total.add_assign(s);
    }
    let id = PlacementGroupId::new(rt.worker, rt.next_seq());
    let node_total = rt.node_total.clone();
    let reason = if strategy == PlacementStrategy::StrictSpread && sets.len() > 1 {
        Some(format!(
            "STRICT_SPREAD needs {} nodes and this cluster has one",
            sets.len()
        ))
    } else if !total.is_subset_of(&node_total) {
        Some("the node can never hold all its bundles".to_string())
    } else {
        None
    };
    if let Some(reason) = reason {
        return Err(Error::Infeasible {
            what: format!("{id} ({strategy:?})"),
            reason,
            request: Box::new(total),
            total: Box::new(node_total),
        });
    }
    let cell = Arc::new(PgCell {
        id,
        strategy,
        bundles: sets,
        total: total.clone(),
        state: Mutex::new(PgState::Pending(Vec::new())),
        changed: tokio::sync::Notify::new(),
        actors: Mutex::new(Vec::new()),
    });
    rt.pgs.lock().insert(id, cell.clone());
    rt.admit_dispatch(total, Dispatch::ReservePg(cell.clone()));
    Ok(PlacementGroup {
        inner: PgInner::Local(cell),
    })
}

/// The resource sets of `bundles`, checked: at least one, none empty.
fn bundle_sets(bundles: &[Bundle]) -> Result<Vec<ResourceSet>> {
    if bundles.is_empty() {
        return Err(Error::InvalidArgument(
            "a placement group needs at least one bundle".into(),
        ));
    }
    let mut sets = Vec::with_capacity(bundles.len());
    for (i, b) in bundles.iter().enumerate() {
        let set = b.0.checked()?;
        if set.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "bundle {i} asks for nothing"
            )));
        }
        sets.push(set.clone());
    }
    Ok(sets)
}
