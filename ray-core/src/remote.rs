//! The seam between the runtime and a cluster it joined.
//!
//! The runtime (object table, admission, pool, actor mailboxes, placement
//! groups on its node) answers everything itself when it runs embedded.
//! A process that joins a cluster installs a [`Remote`] in its runtime
//! (`Runtime::remote`); every decision that differs on a cluster goes
//! through that trait, so the runtime never names a cluster type and
//! compiles without the cluster code (feature `cluster` off). Handles to
//! things living elsewhere in the cluster (an actor, a placement group)
//! are trait objects too: [`RemoteActorRef`], [`RemotePg`].
//!
//! Arrows: the cluster code depends on the runtime and implements these
//! traits; the runtime depends on nothing of the cluster.

use std::any::Any;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use ray_proto::{ActorId, ObjectId, PlacementGroupId, TaskId};
use ray_sched::{PlacementStrategy, ResourceSet, SchedulingStrategy};

use crate::error::Result;
use crate::object_ref::TaskArg;
use crate::options::ActorOptions;
use crate::ownership::RefHandle;
use crate::registry::{ActorClass, ActorMethod};
use crate::runtime::Runtime;
use crate::task::TaskSpec;

/// What a runtime asks of the cluster it joined.
///
/// Every method is called from runtime code, on any thread (pool threads,
/// the caller's tokio runtime, a blocking facade); none may block on the
/// cluster's I/O except [`Remote::find_actor`], which says how it waits.
pub(crate) trait Remote: Send + Sync + 'static {
    /// Fails with `Infeasible` when no live node of the cluster can ever
    /// hold `request` placed by `strategy` (work named `what`).
    fn check_feasible(
        &self,
        what: &str,
        request: &ResourceSet,
        strategy: &SchedulingStrategy,
        labels: &ray_sched::LabelSelector,
    ) -> Result<()>;

    /// Submits `spec` to the cluster; its result completes `spec.task`'s
    /// return object in this process's table, by id.
    fn submit_task(
        &self,
        spec: TaskSpec,
        strategy: &SchedulingStrategy,
        labels: &ray_sched::LabelSelector,
    );

    /// Creates an actor of `class` somewhere in the cluster; its
    /// constructor's outcome arrives with the first call.
    fn spawn_actor(
        &self,
        rt: &Arc<Runtime>,
        class: &'static ActorClass,
        args: Vec<TaskArg>,
        opts: &ActorOptions,
    ) -> Result<Arc<dyn RemoteActorRef>>;

    /// Finds the actor named `name` in `namespace` through the GCS. Blocks
    /// the calling thread until the GCS answers (a pool thread gives its
    /// CPU back meanwhile); from a current-thread tokio runtime it cannot
    /// wait and fails with `InvalidArgument`.
    fn find_actor(
        &self,
        class: &'static ActorClass,
        namespace: &str,
        name: &str,
    ) -> Result<Arc<dyn RemoteActorRef>>;

    /// A handle on actor `id`, which lives in another process (a handle to
    /// it arrived inside a value).
    fn adopt_actor(&self, id: ActorId, class: &'static ActorClass) -> Arc<dyn RemoteActorRef>;

    /// A local entry for object `id`, owned by another process: filled by
    /// fetching it from its owner.
    fn borrow(&self, rt: &Arc<Runtime>, id: ObjectId) -> Arc<RefHandle>;

    /// Starts fetching borrowed object `id`, whose entry was made without
    /// a fetch (someone now wants its value).
    fn fetch_borrowed(&self, rt: &Arc<Runtime>, id: ObjectId);

    /// Object `id` left this process's table: if owned here, processes
    /// that fetched a copy are told; if borrowed, its owner is told of the
    /// `registrations` the entry held.
    fn object_freed(&self, id: ObjectId, registrations: u32);

    /// Task `task` (running here, maybe under a lease) starts (`true`) or
    /// stops (`false`) waiting in a blocking `get` or `wait`.
    fn task_blocked(&self, task: TaskId, blocked: bool);

    /// Objects fetched from their owners, their bytes, and the bytes kept
    /// for later borrowers.
    fn fetch_counts(&self) -> (u64, u64, u64);

    /// Objects this process owns that other processes borrow now.
    fn lent_objects(&self) -> usize;

    /// Creates placement group `id` across the cluster's nodes; it becomes
    /// ready (or fails) as its bundles are reserved. Fails with
    /// `Infeasible` at once when the live nodes can never hold it.
    fn create_placement_group(
        &self,
        id: PlacementGroupId,
        bundles: Vec<ResourceSet>,
        strategy: PlacementStrategy,
    ) -> Result<Arc<dyn RemotePg>>;

    /// Removes a group `create_placement_group` made.
    fn remove_placement_group(&self, pg: &Arc<dyn RemotePg>, why: &str);

    /// The GCS's node table, each node with its load as of its last
    /// heartbeat. The future runs on any executor.
    fn nodes(
        &self,
    ) -> Pin<Box<dyn Future<Output = Result<Vec<crate::NodeState>>> + Send + 'static>>;

    /// Stops the cluster side of this process. The future resolves once
    /// every peer was told (a runtime that owns its I/O threads keeps them
    /// until then).
    fn shutdown(&self) -> Pin<Box<dyn Future<Output = ()> + Send + 'static>>;
}

/// A handle on an actor that lives in another process of the cluster.
pub(crate) trait RemoteActorRef: Send + Sync + 'static {
    /// The actor's id.
    fn id(&self) -> ActorId;

    /// Sends a call of `method`; its result completes `task`'s return
    /// object in this process's table.
    fn call(
        &self,
        rt: &Arc<Runtime>,
        task: TaskId,
        method: &'static ActorMethod,
        args: Vec<TaskArg>,
        parent: Option<TaskId>,
        parent_span: u64,
    );

    /// Kills the actor.
    fn kill(&self);

    /// A handle was serialized into a value that may reach another process:
    /// the actor must outlive this handle. Returns the hold to lend with
    /// the value (the actor's key object), if its handles are counted.
    fn escape(&self) -> Option<Arc<RefHandle>>;
}

/// A placement group placed by this process on the cluster's nodes.
pub(crate) trait RemotePg: Send + Sync + 'static {
    /// The group's id.
    fn id(&self) -> PlacementGroupId;

    /// Number of bundles.
    fn bundle_count(&self) -> usize;

    /// The bundles' resources, by index.
    fn bundles(&self) -> &[ray_sched::ResourceSet];

    /// Why it is gone, once removed (by this process).
    fn removed(&self) -> Option<String>;

    /// `None` while being placed; then ready or why not.
    fn outcome(&self) -> Option<Result<()>>;

    /// Notified whenever the outcome changes.
    fn changed(&self) -> &tokio::sync::Notify;

    /// The concrete group, for the cluster code that made it.
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))] // used by the cluster code
    fn into_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync>;
}
