//! The cluster side of the runtime's seam ([`crate::remote`]): a
//! [`ClusterCore`] answering what the runtime asks of a cluster, and the
//! cluster's actor and placement-group handles behind the runtime's traits.

use std::future::Future;
use std::pin::Pin;

use ray_proto::PlacementGroupId;
use ray_sched::{PlacementStrategy, ResourceSet};

use super::*;
use crate::cluster::ClusterPg;
use crate::remote::{Remote, RemoteActorRef, RemotePg};

/// The [`Remote`] a cluster process installs in its runtime.
pub(crate) struct ClusterRemote(pub(crate) Arc<ClusterCore>);

impl Remote for ClusterRemote {
    fn check_feasible(
        &self,
        what: &str,
        request: &ResourceSet,
        strategy: &SchedulingStrategy,
        labels: &ray_sched::LabelSelector,
    ) -> crate::Result<()> {
        self.0.check_feasible(what, request, strategy, labels)
    }

    fn submit_task(
        &self,
        spec: TaskSpec,
        strategy: &SchedulingStrategy,
        labels: &ray_sched::LabelSelector,
    ) {
        self.0.submit_task(spec, strategy, labels);
    }

    fn spawn_actor(
        &self,
        rt: &Arc<Runtime>,
        class: &'static ActorClass,
        args: Vec<TaskArg>,
        opts: &ActorOptions,
    ) -> crate::Result<Arc<dyn RemoteActorRef>> {
        let actor: Arc<dyn RemoteActorRef> = self.0.spawn_actor(rt, class, args, opts)?;
        Ok(actor)
    }

    fn find_actor(
        &self,
        class: &'static ActorClass,
        namespace: &str,
        name: &str,
    ) -> crate::Result<Arc<dyn RemoteActorRef>> {
        let find = self.0.find_actor(class, namespace, name);
        let actor: Arc<dyn RemoteActorRef> = block_on_cluster(&self.0.tokio, find)??;
        Ok(actor)
    }

    fn adopt_actor(&self, id: ActorId, class: &'static ActorClass) -> Arc<dyn RemoteActorRef> {
        self.0.adopt_actor(id, class)
    }

    fn borrow(&self, rt: &Arc<Runtime>, id: ObjectId) -> Arc<RefHandle> {
        self.0.borrow(rt, id, None)
    }

    fn fetch_borrowed(&self, rt: &Arc<Runtime>, id: ObjectId) {
        self.0.start_fetch(rt, id);
    }

    fn object_freed(&self, id: ObjectId, registrations: u32) {
        self.0.object_freed(id, registrations);
    }

    fn task_blocked(&self, task: TaskId, blocked: bool) {
        self.0.task_blocked(task, blocked);
    }

    fn nodes(&self) -> Pin<Box<dyn Future<Output = crate::Result<Vec<crate::NodeState>>> + Send>> {
        // The GCS client lives on the cluster's I/O runtime: ask there, so
        // the caller may be on any executor or thread.
        let gcs = self.0.gcs.clone();
        let asked = self.0.tokio.spawn(async move { gcs.nodes().await });
        Box::pin(async move {
            let nodes = asked
                .await
                .map_err(|e| {
                    Error::cluster_from(format!("asking the GCS for nodes stopped: {e}"), e)
                })?
                .map_err(Error::cluster_source)?;
            Ok(nodes.into_iter().map(node_state).collect())
        })
    }

    fn fetch_counts(&self) -> (u64, u64, u64) {
        self.0.fetch_counts()
    }

    fn lent_objects(&self) -> usize {
        self.0.lent_objects()
    }

    fn create_placement_group(
        &self,
        id: PlacementGroupId,
        bundles: Vec<ResourceSet>,
        strategy: PlacementStrategy,
    ) -> crate::Result<Arc<dyn RemotePg>> {
        self.0
            .check_group_feasible(&format!("{id} ({strategy:?})"), &bundles, strategy)?;
        Ok(self.0.create_pg(id, bundles, strategy))
    }

    fn remove_placement_group(&self, pg: &Arc<dyn RemotePg>, why: &str) {
        if let Ok(pg) = pg.clone().into_any().downcast::<ClusterPg>() {
            self.0.remove_pg(&pg, why);
        }
    }

    fn shutdown(&self) -> Pin<Box<dyn Future<Output = ()> + Send + 'static>> {
        self.0.shutdown();
        Box::pin(self.0.closed())
    }
}

impl RemoteActorRef for HeldActor {
    fn id(&self) -> ActorId {
        self.actor.id
    }

    fn call(
        &self,
        rt: &Arc<Runtime>,
        task: TaskId,
        method: &'static ActorMethod,
        args: Vec<TaskArg>,
        parent: Option<TaskId>,
        parent_span: u64,
    ) {
        HeldActor::call(self, rt, task, method, args, parent, parent_span);
    }

    fn kill(&self) {
        HeldActor::kill(self);
    }

    fn escape(&self) -> Option<Arc<RefHandle>> {
        self.actor.escape();
        self.key.clone()
    }
}

impl RemotePg for ClusterPg {
    fn id(&self) -> PlacementGroupId {
        self.id
    }

    fn bundles(&self) -> &[ray_sched::ResourceSet] {
        ClusterPg::bundles(self)
    }

    fn removed(&self) -> Option<String> {
        ClusterPg::removed(self)
    }

    fn bundle_count(&self) -> usize {
        ClusterPg::bundle_count(self)
    }

    fn outcome(&self) -> Option<crate::Result<()>> {
        ClusterPg::outcome(self)
    }

    fn changed(&self) -> &tokio::sync::Notify {
        &self.changed
    }

    fn into_any(self: Arc<Self>) -> Arc<dyn std::any::Any + Send + Sync> {
        self
    }
}

/// Runs `f` to completion on the cluster's tokio runtime from sync code:
/// directly on a thread outside any runtime (pool threads, the blocking
/// facade), through `block_in_place` on a multi-thread runtime's worker.
/// A current-thread runtime cannot wait for its own I/O: that is an error.
pub(super) fn block_on_cluster<F: std::future::Future>(
    tokio: &tokio::runtime::Handle,
    f: F,
) -> crate::Result<F::Output> {
    match tokio::runtime::Handle::try_current() {
        Err(_) => {
            let _guard = crate::context::begin_blocking(&[]);
            Ok(tokio.block_on(f))
        }
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            Ok(tokio::task::block_in_place(|| tokio.block_on(f)))
        }
        Ok(_) => Err(Error::InvalidArgument(
            "get_actor and creating a named actor on a cluster wait for the GCS: call them \
             from a multi-thread tokio runtime or outside one"
                .into(),
        )),
    }
}

/// A node table entry as the user API reports it.
fn node_state(entry: ray_proto::wire::NodeEntry) -> crate::NodeState {
    let total = ray_sched::wire::resources_from_wire(&entry.resources);
    let available = if entry.alive {
        let mut free = total.clone();
        free.sub_saturating(&ray_sched::wire::resources_from_wire(&entry.used));
        free
    } else {
        ResourceSet::new()
    };
    crate::NodeState {
        id: entry.id,
        address: entry.address,
        alive: entry.alive,
        death_cause: entry.death_cause,
        total,
        available,
        labels: entry.labels.into_iter().map(|l| (l.key, l.value)).collect(),
    }
}
