//! The data plane of one cluster process (a driver or a worker): the
//! owner's side of the direct task transport, and the worker's side that
//! runs what owners push.
//!
//! **Owner.** A submitted task waits until the arguments it owns are
//! ready, then queues under its scheduling key (resources and strategy).
//! For a key with queued work the owner asks its local node daemon for
//! leases (one per task beyond the leases held, a few at a time); the
//! daemon grants one on itself or on a node it spilled to, naming a worker
//! of this job there. The owner pushes tasks straight to that worker on one
//! framed stream ([`Link`]) and keeps the lease while work of that shape
//! remains; an idle lease goes back after [`LEASE_IDLE`]. Results come back
//! on the same stream: small values inline, large ones announced and then
//! pulled (taken) from the worker. When a stream is lost its tasks are
//! queued again within their retry budget. What to do when is decided by
//! the sans-IO [`TaskOwner`](crate::cluster::task_owner); `owner.rs` is
//! its shell.
//!
//! **Worker.** Pushed work runs through the process's own runtime (its
//! pool, admission and actor mailboxes), so blocking `get`s, nesting and
//! actor ordering work exactly as embedded. Arguments that are references
//! become borrowed entries of the local object table, filled by fetching
//! from the owner.
//!
//! **Objects crossing processes.** An owner keeps a task's argument refs
//! (top-level and nested in values) until the task's result is back. Refs
//! nested in values that leave a process as results or fetched objects
//! are lent: their owners count the receiver as a borrower first, and the
//! receiver tells them when its entry goes (the borrower protocol of
//! [`ref_counts`](crate::cluster::ref_counts), shell in `lending.rs`). A
//! worker still holding an argument when its task ends registers itself
//! the same way before it answers. Memory comes back when the last
//! borrower drops, not at job end.

mod actors;
mod borrow;
mod feasible;
mod fetch_cache;
mod frees;
mod lending;
mod owner;
mod push;
mod remote;
mod serve;
mod state;
mod wire;

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use hashbrown::HashMap;
use parking_lot::Mutex;
use ray_proto::wire::{
    ActorEntry, ActorStatus, BuildFingerprint, Call, DetachLease, ErrorKind, GetObject,
    LeaseBlocked, LeaseGranted, LeaseInfeasible, ListObjects, ListTasks, Message, NodeReply,
    ObjectFailed, ObjectFollows, ObjectReply, ObjectsFreed, RequestLease, ResourceAmount,
    ReturnLease, WireArg, WireError, WireOutcome, WireStrategy, WorkBatch, WorkDone, WorkItem,
    WorkResult, WorkerDied, WorkerReply, WorkerRequest,
};
use ray_proto::{ActorId, JobId, NodeId, ObjectId, TaskId, WorkerId};
use ray_sched::SchedulingStrategy;
use ray_store::ObjectBuffer;
use tokio::sync::{mpsc, oneshot};

use super::ref_counts::RefCounts;
use super::worker_leases::{LeaseAction, WorkerLeases};
use super::{resources_from_wire, resources_to_wire, GcsClient};
use crate::actor::ActorCell;
use crate::error::{Error, UserError};
use crate::object::Encoded;
use crate::object_ref::{ArgKind, ObjectRef, TaskArg};
use crate::options::{ActorOptions, ResourceRequest};
use crate::ownership::RefHandle;
use crate::placement::Pool;
use crate::registry::{registry, ActorClass, ActorMethod, RemoteFunction};
use crate::runtime::Runtime;
use crate::task::TaskSpec;
use ray_transport::{Connections, Endpoint, Envelope, FrameReader, FrameWriter};

pub(crate) use super::task_owner::LEASE_IDLE;
/// Work items per pushed frame, at most.
const BATCH_ITEMS: usize = 512;
/// Inline value bytes per pushed frame, about (a frame closes once it
/// holds this much): with every item's inline values at most
/// [`MAX_INLINE_MESSAGE_BYTES`](crate::runtime::MAX_INLINE_MESSAGE_BYTES),
/// a frame stays far below the transport's cap (64 MiB), which ends the
/// stream when crossed.
const BATCH_BYTES: usize = 8 << 20;
/// The largest object accepted from a peer (it must fit in memory anyway).
const MAX_OBJECT_LEN: u64 = 1 << 40;

/// What a cluster process needs to know about its job and its node.
pub(crate) struct CoreConfig {
    pub(crate) job: JobId,
    pub(crate) binary_hash: [u8; 32],
    pub(crate) fingerprint: BuildFingerprint,
    /// The node daemon this process asks for leases.
    pub(crate) local_node: SocketAddr,
    /// The address peers reach this process at.
    pub(crate) my_addr: SocketAddr,
}

/// The cluster side of a [`Runtime`]: see the module docs.
pub(crate) struct ClusterCore {
    rt: OnceLock<Weak<Runtime>>,
    pub(crate) tokio: tokio::runtime::Handle,
    endpoint: Endpoint,
    conns: Connections,
    pub(crate) gcs: GcsClient,
    pub(crate) job: JobId,
    binary_hash: [u8; 32],
    fingerprint: BuildFingerprint,
    my_addr: String,
    local_node: SocketAddr,
    owner: Mutex<OwnerState>,
    links: Mutex<HashMap<SocketAddr, Arc<tokio::sync::OnceCell<Arc<Link>>>>>,
    worker_addrs: Mutex<HashMap<WorkerId, String>>,
    node_addrs: Mutex<HashMap<NodeId, SocketAddr>>,
    /// Large results waiting for their owner to take them (worker side).
    held: Mutex<HashMap<ObjectId, ObjectBuffer>>,
    /// The borrower protocol: objects this process lent and who borrows
    /// them, lends waiting for owners, removals to tell.
    refs: Mutex<RefCounts<Arc<RefHandle>>>,
    /// Objects fetched from their owners, kept for the next borrower.
    fetched: Mutex<FetchCache>,
    /// Objects this process owns that others fetched (at least
    /// [`FREE_NOTICE_MIN`] bytes), and who: told when the object is freed.
    served: Mutex<HashMap<ObjectId, Vec<SocketAddr>>>,
    /// Entries in `served`: releasing an object skips its lock while 0.
    serving: AtomicUsize,
    /// Freed objects not yet told to the processes that fetched them,
    /// per process: one notice carries all of a burst of frees.
    unsent_frees: Mutex<HashMap<SocketAddr, Vec<ObjectId>>>,
    /// What runs here under which lease: the sans-IO
    /// [`WorkerLeases`](crate::cluster::worker_leases), whose notices go
    /// to the local node.
    leases: Mutex<WorkerLeases<Arc<ActorCell>>>,
    /// Handles to remote actors this process holds, by id (a decoded
    /// handle reuses a live one).
    actors: Mutex<HashMap<ActorId, actors::KnownActor>>,
    /// Block and unblock notices for the node, sent in order.
    notices: mpsc::UnboundedSender<(TaskId, bool)>,
    notices_rx: Mutex<Option<mpsc::UnboundedReceiver<(TaskId, bool)>>>,
    /// The totals of the cluster's live nodes, to refuse infeasible work
    /// at submit.
    node_totals: Mutex<feasible::NodeTotals>,
    /// The placement groups this process placed: bundles lost with a node
    /// are reserved again elsewhere.
    pub(in crate::cluster) pgs: Mutex<Vec<Weak<crate::cluster::pg::ClusterPg>>>,
}

impl ClusterCore {
    pub(crate) fn new(
        tokio: tokio::runtime::Handle,
        endpoint: Endpoint,
        gcs: GcsClient,
        config: CoreConfig,
    ) -> Arc<Self> {
        let (notices, notices_rx) = mpsc::unbounded_channel();
        Arc::new(Self {
            rt: OnceLock::new(),
            tokio,
            conns: Connections::new(endpoint.clone()),
            endpoint,
            gcs,
            job: config.job,
            binary_hash: config.binary_hash,
            fingerprint: config.fingerprint,
            my_addr: config.my_addr.to_string(),
            local_node: config.local_node,
            owner: Mutex::new(OwnerState::default()),
            links: Mutex::new(HashMap::new()),
            worker_addrs: Mutex::new(HashMap::new()),
            node_addrs: Mutex::new(HashMap::new()),
            held: Mutex::new(HashMap::new()),
            // Made again for this process's worker id in `attach`.
            refs: Mutex::new(RefCounts::new(WorkerId(0))),
            fetched: Mutex::new(FetchCache::default()),
            served: Mutex::new(HashMap::new()),
            serving: AtomicUsize::new(0),
            unsent_frees: Mutex::new(HashMap::new()),
            leases: Mutex::new(WorkerLeases::default()),
            actors: Mutex::new(HashMap::new()),
            notices,
            notices_rx: Mutex::new(Some(notices_rx)),
            node_totals: Mutex::new(feasible::NodeTotals::default()),
            pgs: Mutex::new(Vec::new()),
        })
    }

    /// A task running here started (`true`) or stopped waiting on objects.
    /// The first blocked task of a lease lends the lease's resources back
    /// to its node (so work it waits for can be leased there), the last
    /// one to resume takes them again: nested tasks cannot deadlock a
    /// node whose every CPU is leased to waiting parents.
    pub(crate) fn task_blocked(self: &Arc<Self>, task: TaskId, blocked: bool) {
        let mut st = self.leases.lock();
        st.task_blocked(task, blocked);
        self.lease_actions(st);
    }

    /// Sends what the lease machine asks for: block notices in order (on
    /// the notice loop's channel, under the machine's lock), returned
    /// leases from the I/O runtime.
    pub(super) fn lease_actions(
        self: &Arc<Self>,
        mut st: parking_lot::MutexGuard<'_, WorkerLeases<Arc<ActorCell>>>,
    ) {
        let mut returns = Vec::new();
        while let Some(a) = st.poll() {
            match a {
                LeaseAction::Blocked { lease, blocked } => {
                    let _ = self.notices.send((lease, blocked));
                }
                LeaseAction::Return { lease } => returns.push(lease),
            }
        }
        drop(st);
        for lease in returns {
            let me = self.clone();
            self.tokio.spawn(async move {
                let _ = me.ask(me.local_node, ReturnLease { lease }).await;
            });
        }
    }

    async fn notice_loop(self: Arc<Self>) {
        let Some(mut rx) = self.notices_rx.lock().take() else {
            return;
        };
        while let Some((lease, blocked)) = rx.recv().await {
            let _ = self
                .ask(self.local_node, LeaseBlocked { lease, blocked })
                .await;
        }
    }

    /// Ties the core to its runtime and starts serving peers.
    pub(crate) fn attach(self: &Arc<Self>, rt: &Arc<Runtime>) {
        let _ = self.rt.set(Arc::downgrade(rt));
        *self.refs.lock() = RefCounts::new(rt.worker);
        let me = self.clone();
        self.tokio.spawn(async move { me.accept_loop().await });
        let me = self.clone();
        self.tokio.spawn(async move { me.reap_loop().await });
        let me = self.clone();
        self.tokio.spawn(async move { me.notice_loop().await });
        let me = self.clone();
        self.tokio
            .spawn(async move { me.refresh_node_totals().await });
        let me = self.clone();
        self.tokio
            .spawn(async move { me.follow_node_deaths().await });
    }

    pub(super) fn rt(&self) -> Option<Arc<Runtime>> {
        self.rt.get().and_then(Weak::upgrade)
    }

    /// The connections this process has made.
    pub(crate) fn connections(&self) -> &Connections {
        &self.conns
    }
    /// Sends `request` to `addr` on a stream of its own and waits for its
    /// one reply: `Ok(reply)` typed by the request's [`Call`], or
    /// `Err(message)` with what came back instead (an error, a refusal,
    /// another kind of reply) for the caller to report as it sees fit.
    ///
    /// (Used by placement groups and workers reporting in too.)
    ///
    /// # Errors
    ///
    /// [`Error::Cluster`] if `addr` cannot be reached or the request fails.
    pub(crate) async fn ask<C: Call>(
        &self,
        addr: SocketAddr,
        request: C,
    ) -> Result<Result<C::Reply, Message>, Error> {
        let conn = self
            .conns
            .get(addr)
            .await
            .map_err(|e| Error::cluster_from(format!("cannot reach {addr}: {e}"), e))?;
        let reply = conn
            .request(&Envelope::new(request.into()))
            .await
            .map_err(|e| Error::cluster_from(format!("request to {addr} failed: {e}"), e))?;
        Ok(C::reply(reply.body))
    }

    /// Tells the job's end to the GCS (drivers) and stops serving.
    pub(crate) fn shutdown(&self) {
        self.endpoint
            .close(ray_transport::CloseCode::Normal, "runtime shut down");
    }

    /// Resolves once every connection's close has been sent (a runtime
    /// that owns its I/O threads waits for this before stopping them, so
    /// peers learn of the shutdown at once, not by an idle timeout).
    pub(crate) fn closed(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let endpoint = self.endpoint.clone();
        async move { endpoint.wait_idle().await }
    }
}

pub(crate) use self::actors::{HeldActor, RemoteActor};
use self::fetch_cache::*;
use self::owner::*;
use self::push::*;
pub(crate) use self::remote::ClusterRemote;
use self::wire::*;
pub(crate) use self::wire::{error_from_wire, error_to_wire, strategy_from_wire, strategy_to_wire};
