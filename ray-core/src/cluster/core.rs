//! The data plane of one cluster process (a driver or a worker): the
//! owner's side of the direct task transport, and the worker's side that
//! runs what owners push.
//!
//! **Owner.** A submitted task waits until the arguments it owns are
//! ready, then queues under its scheduling key (resources and strategy).
//! For a key with queued work the owner asks its local node daemon for a
//! lease (one at a time per key, so leases ramp up as grants come back);
//! the daemon grants one on itself or on a node it spilled to, naming a
//! worker of this job there. The owner pushes up to [`PIPELINE`] tasks per
//! lease straight to that worker on one framed stream ([`Link`]) and keeps
//! the lease while work of that shape remains; an idle lease goes back
//! after [`LEASE_IDLE`], or after [`LEASE_IDLE_WHILE_OTHERS_WAIT`] when
//! work of another shape waits for a lease. Results come back on the same stream: small values
//! inline, large ones announced and then pulled (taken) from the worker.
//!
//! **Worker.** Pushed work runs through the process's own runtime (its
//! pool, admission and actor mailboxes), so blocking `get`s, nesting and
//! actor ordering work exactly as embedded. Arguments that are references
//! become borrowed entries of the local object table, filled by fetching
//! from the owner.
//!
//! **Objects crossing processes.** An owner keeps a task's argument refs
//! until the task's result is back. Refs nested inside values that cross
//! a process boundary are pinned until the job ends (no distributed
//! borrower counting yet).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use hashbrown::HashMap;
use parking_lot::Mutex;
use ray_proto::wire::{
    ActorEntry, ActorStatus, BuildFingerprint, ErrorKind, Message, ResourceAmount, WireArg,
    WireError, WireOutcome, WireStrategy, WorkItem, WorkResult,
};
use ray_proto::{ActorId, JobId, NodeId, ObjectId, TaskId, WorkerId};
use ray_sched::SchedulingStrategy;
use ray_store::ObjectBuffer;
use tokio::sync::{mpsc, oneshot};

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

/// Tasks pushed to one lease before its results come back.
pub(crate) const PIPELINE: usize = 64;
/// How long an idle lease is kept for more work of its shape.
pub(crate) const LEASE_IDLE: Duration = Duration::from_millis(50);
/// How long a lease may idle while other work of this process waits for
/// a lease: then it goes back at once, since the CPUs it holds may be the
/// ones that work waits for (the warm-up's spread leases held a node's two
/// CPUs for 50 ms while a batch of default tasks waited: cluster W1's
/// first run took 2.5x as long as the next two).
const LEASE_IDLE_WHILE_OTHERS_WAIT: Duration = Duration::from_millis(1);
/// Work items per pushed frame, at most.
const BATCH_ITEMS: usize = 512;
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

/// Where a scheduling key's work goes: same resources, same strategy.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
struct SchedKey {
    resources: Vec<ResourceAmount>,
    strategy: WireStrategy,
}

/// A task waiting for a lease.
struct Queued {
    task: TaskId,
    function: &'static RemoteFunction,
    args: Vec<WireArg>,
    keep: Vec<TaskArg>,
    attempt: u32,
    parent: Option<TaskId>,
}

struct Lease {
    id: TaskId,
    node: NodeId,
    link: Arc<Link>,
    inflight: usize,
    idle_since: Option<Instant>,
}

#[derive(Default)]
struct KeyState {
    queue: VecDeque<Queued>,
    leases: Vec<Lease>,
    requesting: bool,
}

/// Takes out the leases of `ks` idle for at least `min_idle` at `now`
/// into `out` as (node, lease).
fn take_idle(ks: &mut KeyState, now: Instant, min_idle: Duration, out: &mut Vec<(NodeId, TaskId)>) {
    ks.leases.retain(|l| {
        let idle = l.inflight == 0 && l.idle_since.is_some_and(|t| now - t >= min_idle);
        if idle {
            out.push((l.node, l.id));
        }
        !idle
    });
}

enum InflightKind {
    Task { key: SchedKey, lease: TaskId },
    ActorCall,
    ActorCreate(oneshot::Sender<Result<(), Error>>),
}

/// Work pushed and not answered yet.
pub(super) struct Inflight {
    kind: InflightKind,
    pub(super) name: &'static str,
    pub(super) link: SocketAddr,
    pub(super) node: NodeId,
    /// Argument refs kept alive until the result is back.
    _keep: Vec<TaskArg>,
}

#[derive(Default)]
pub(super) struct OwnerState {
    keys: HashMap<SchedKey, KeyState>,
    pub(super) inflight: HashMap<TaskId, Inflight>,
}

impl OwnerState {
    /// Takes out the leases of keys other than `key` that have nothing
    /// queued and have idled for [`LEASE_IDLE_WHILE_OTHERS_WAIT`]: work of
    /// `key` waits for a lease. Returns (node, lease) of each, to return.
    fn take_idle_leases_of_others(&mut self, key: &SchedKey) -> Vec<(NodeId, TaskId)> {
        let mut out = Vec::new();
        let mut now = None;
        for (k, ks) in self.keys.iter_mut() {
            if k == key || !ks.queue.is_empty() || ks.leases.is_empty() {
                continue;
            }
            let now = *now.get_or_insert_with(Instant::now);
            take_idle(ks, now, LEASE_IDLE_WHILE_OTHERS_WAIT, &mut out);
        }
        out
    }

    /// Whether work of a key other than `key` waits for a lease.
    fn others_waiting(&self, key: &SchedKey) -> bool {
        self.keys
            .iter()
            .any(|(k, ks)| k != key && !ks.queue.is_empty())
    }

    /// Tasks queued for a lease: (task, function name, resources asked).
    pub(super) fn queued(&self) -> Vec<(TaskId, &'static str, Vec<ResourceAmount>)> {
        self.keys
            .iter()
            .flat_map(|(k, ks)| {
                ks.queue
                    .iter()
                    .map(|q| (q.task, q.function.name, k.resources.clone()))
            })
            .collect()
    }
}

/// A work stream to one worker process.
pub(crate) struct Link {
    addr: SocketAddr,
    node: NodeId,
    worker: WorkerId,
    tx: mpsc::UnboundedSender<WorkItem>,
    /// Set (before the inflight scan) when the link is lost: work pushed
    /// after that fails at once instead of waiting for an answer.
    dead: std::sync::atomic::AtomicBool,
}

impl Link {
    fn is_dead(&self) -> bool {
        self.dead.load(std::sync::atomic::Ordering::Acquire)
    }
}

/// An actor hosted by this worker process.
struct Hosted {
    cell: Arc<ActorCell>,
    lease: TaskId,
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
    pub(super) owner: Mutex<OwnerState>,
    links: Mutex<HashMap<SocketAddr, Arc<tokio::sync::OnceCell<Arc<Link>>>>>,
    worker_addrs: Mutex<HashMap<WorkerId, String>>,
    node_addrs: Mutex<HashMap<NodeId, SocketAddr>>,
    /// Large results waiting for their owner to take them (worker side).
    held: Mutex<HashMap<ObjectId, ObjectBuffer>>,
    /// Refs that crossed a process boundary inside values.
    pinned: Mutex<Vec<Arc<RefHandle>>>,
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
    hosted: Mutex<HashMap<ActorId, Hosted>>,
    /// Handles to remote actors this process holds, by id (a decoded
    /// handle reuses a live one).
    actors: Mutex<HashMap<ActorId, Weak<RemoteActor>>>,
    /// Pushed tasks running here: local task id -> the lease they run under.
    lease_of: Mutex<HashMap<TaskId, TaskId>>,
    /// Tasks of each lease blocked in a `get` or `wait` right now.
    blocked: Mutex<HashMap<TaskId, u32>>,
    /// Block and unblock notices for the node, sent in order.
    notices: mpsc::UnboundedSender<(TaskId, bool)>,
    notices_rx: Mutex<Option<mpsc::UnboundedReceiver<(TaskId, bool)>>>,
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
            pinned: Mutex::new(Vec::new()),
            fetched: Mutex::new(FetchCache::default()),
            served: Mutex::new(HashMap::new()),
            serving: AtomicUsize::new(0),
            unsent_frees: Mutex::new(HashMap::new()),
            hosted: Mutex::new(HashMap::new()),
            actors: Mutex::new(HashMap::new()),
            lease_of: Mutex::new(HashMap::new()),
            blocked: Mutex::new(HashMap::new()),
            notices,
            notices_rx: Mutex::new(Some(notices_rx)),
        })
    }

    /// A task running here started (`true`) or stopped waiting on objects.
    /// The first blocked task of a lease lends the lease's resources back
    /// to its node (so work it waits for can be leased there), the last
    /// one to resume takes them again: nested tasks cannot deadlock a
    /// node whose every CPU is leased to waiting parents.
    pub(crate) fn task_blocked(&self, task: TaskId, blocked: bool) {
        let Some(lease) = self.lease_of.lock().get(&task).copied() else {
            return;
        };
        let notify = {
            let mut b = self.blocked.lock();
            let n = b.entry(lease).or_insert(0);
            if blocked {
                *n += 1;
                *n == 1
            } else {
                *n = n.saturating_sub(1);
                let last = *n == 0;
                if last {
                    b.remove(&lease);
                }
                last
            }
        };
        if notify {
            let _ = self.notices.send((lease, blocked));
        }
    }

    async fn notice_loop(self: Arc<Self>) {
        let Some(mut rx) = self.notices_rx.lock().take() else {
            return;
        };
        while let Some((lease, blocked)) = rx.recv().await {
            let _ = self
                .ask(self.local_node, Message::LeaseBlocked { lease, blocked })
                .await;
        }
    }

    /// Ties the core to its runtime and starts serving peers.
    pub(crate) fn attach(self: &Arc<Self>, rt: &Arc<Runtime>) {
        let _ = self.rt.set(Arc::downgrade(rt));
        let me = self.clone();
        self.tokio.spawn(async move { me.accept_loop().await });
        let me = self.clone();
        self.tokio.spawn(async move { me.reap_loop().await });
        let me = self.clone();
        self.tokio.spawn(async move { me.notice_loop().await });
    }

    pub(super) fn rt(&self) -> Option<Arc<Runtime>> {
        self.rt.get().and_then(Weak::upgrade)
    }

    /// The connections this process has made.
    pub(crate) fn connections(&self) -> &Connections {
        &self.conns
    }

    // ---------------------------------------------------------------
    // Owner: tasks
    // ---------------------------------------------------------------

    /// Submits a task to the cluster; its result completes `spec.task`'s
    /// return object in this process's table.
    pub(crate) fn submit_task(self: &Arc<Self>, spec: TaskSpec, strategy: &SchedulingStrategy) {
        let key = SchedKey {
            resources: resources_to_wire(&spec.resources),
            strategy: strategy_to_wire(strategy),
        };
        let deps = crate::task::pending_deps(&spec.args);
        if deps.is_empty() {
            self.queue_with_args(key, spec);
            return;
        }
        let me = self.clone();
        crate::task::when_ready(deps, move || me.queue_with_args(key, spec));
    }

    /// Queues `spec` with its arguments (all there by now) in wire form.
    /// Refs whose owners' addresses are not known yet wait for a lookup
    /// on the runtime first.
    fn queue_with_args(self: &Arc<Self>, key: SchedKey, spec: TaskSpec) {
        if let Some(args) = self.wire_args_now(&spec.args) {
            self.queue(key, spec, args);
            return;
        }
        let me = self.clone();
        self.tokio.spawn(async move {
            match me.wire_args(&spec.args).await {
                Ok(args) => me.queue(key, spec, args),
                Err(e) => {
                    if let Some(rt) = me.rt() {
                        rt.complete_object(spec.task.return_object(), Err(e));
                    }
                }
            }
        });
    }

    fn queue(self: &Arc<Self>, key: SchedKey, spec: TaskSpec, args: Vec<WireArg>) {
        let q = Queued {
            task: spec.task,
            function: spec.function,
            args,
            keep: spec.args,
            attempt: spec.attempt,
            parent: spec.parent,
        };
        self.owner
            .lock()
            .keys
            .entry(key.clone())
            .or_default()
            .queue
            .push_back(q);
        self.pump(&key);
    }

    /// Pushes queued work of `key` onto its leases; asks for a lease if
    /// work remains and none is being asked for.
    fn pump(self: &Arc<Self>, key: &SchedKey) {
        let mut request = false;
        let mut give_back = Vec::new();
        {
            let mut st = self.owner.lock();
            let OwnerState { keys, inflight } = &mut *st;
            let Some(ks) = keys.get_mut(key) else { return };
            // Spread work takes one lease per task in flight, so every task
            // is placed by the policy (a deep pipeline would put a burst on
            // the first node that granted a lease).
            let depth = if key.strategy == WireStrategy::Spread {
                1
            } else {
                PIPELINE
            };
            while !ks.queue.is_empty() {
                let Some(lease) = ks
                    .leases
                    .iter_mut()
                    .filter(|l| l.inflight < depth && !l.link.is_dead())
                    .min_by_key(|l| l.inflight)
                else {
                    break;
                };
                let Some(q) = ks.queue.pop_front() else { break };
                lease.inflight += 1;
                lease.idle_since = None;
                let item = WorkItem::Task {
                    task: q.task,
                    function: q.function.id,
                    args: q.args,
                    lease: lease.id,
                    resources: key.resources.clone(),
                    attempt: q.attempt,
                    parent: q.parent,
                };
                inflight.insert(
                    q.task,
                    Inflight {
                        kind: InflightKind::Task {
                            key: key.clone(),
                            lease: lease.id,
                        },
                        name: q.function.name,
                        link: lease.link.addr,
                        node: lease.node,
                        _keep: q.keep,
                    },
                );
                // A closed link fails its inflight work when its reader ends.
                let _ = lease.link.tx.send(item);
            }
            let waiting = !ks.queue.is_empty();
            if waiting && !ks.requesting {
                ks.requesting = true;
                request = true;
            }
            if !waiting && ks.leases.is_empty() && !ks.requesting {
                keys.remove(key);
            }
            if waiting {
                give_back = st.take_idle_leases_of_others(key);
            }
        }
        for (node, lease) in give_back {
            self.return_lease(node, lease);
        }
        if request {
            let me = self.clone();
            let key = key.clone();
            self.tokio.spawn(async move { me.request_lease(key).await });
        }
    }

    async fn request_lease(self: Arc<Self>, key: SchedKey) {
        let result = self.lease(&key.resources, &key.strategy).await;
        let failed = {
            let mut st = self.owner.lock();
            let others_waiting = st.others_waiting(&key);
            let Some(ks) = st.keys.get_mut(&key) else {
                drop(st);
                if let Ok((lease, node, _)) = result {
                    self.return_lease(node, lease);
                }
                return;
            };
            ks.requesting = false;
            match result {
                Ok((id, node, _)) if ks.queue.is_empty() && others_waiting => {
                    // Granted after this key's work ran out, while other
                    // work waits for a lease: its CPUs go back at once.
                    drop(st);
                    self.return_lease(node, id);
                    None
                }
                Ok((id, node, link)) => {
                    ks.leases.push(Lease {
                        id,
                        node,
                        link,
                        inflight: 0,
                        idle_since: Some(Instant::now()),
                    });
                    None
                }
                Err(e) => Some((std::mem::take(&mut ks.queue), e)),
            }
        };
        if let Some((queue, err)) = failed {
            if let Some(rt) = self.rt() {
                for q in queue {
                    let e = match &err {
                        Error::Infeasible {
                            reason,
                            request,
                            total,
                            ..
                        } => Error::Infeasible {
                            what: q.function.name.to_string(),
                            reason: reason.clone(),
                            request: request.clone(),
                            total: total.clone(),
                        },
                        e => e.clone(),
                    };
                    rt.complete_object(q.task.return_object(), Err(e));
                }
            }
        }
        self.pump(&key);
    }

    /// Asks the local node daemon for a lease; returns it with the link to
    /// the worker it names.
    async fn lease(
        self: &Arc<Self>,
        resources: &[ResourceAmount],
        strategy: &WireStrategy,
    ) -> Result<(TaskId, NodeId, Arc<Link>), Error> {
        let rt = self.rt().ok_or(Error::ShutDown)?;
        let lease = rt.new_task_id();
        let request = Message::RequestLease {
            lease,
            job: self.job,
            binary_hash: self.binary_hash,
            fingerprint: self.fingerprint,
            resources: resources.to_vec(),
            strategy: strategy.clone(),
            spilled_from: None,
        };
        let reply = self.ask(self.local_node, request).await?;
        match reply {
            Message::LeaseGranted {
                lease,
                node,
                address,
                worker,
            } => {
                let addr = parse_addr(&address)?;
                match self.link(addr, node, worker).await {
                    Ok(link) => Ok((lease, node, link)),
                    Err(e) => {
                        self.return_lease(node, lease);
                        Err(e)
                    }
                }
            }
            Message::LeaseInfeasible { reason } => Err(Error::Infeasible {
                what: String::new(),
                reason,
                request: Box::new(resources_from_wire(resources)),
                total: Box::new(ray_sched::ResourceSet::new()),
            }),
            Message::Error { reason } => Err(Error::Cluster {
                cause: format!("lease refused: {reason}"),
            }),
            other => Err(Error::Cluster {
                cause: format!("unexpected answer to a lease request: {other:?}"),
            }),
        }
    }

    /// Sends `request` to `addr` on a stream of its own; one reply.
    ///
    /// (Used by placement groups too.)
    pub(crate) async fn ask(&self, addr: SocketAddr, request: Message) -> Result<Message, Error> {
        let conn = self.conns.get(addr).await.map_err(|e| Error::Cluster {
            cause: format!("cannot reach {addr}: {e}"),
        })?;
        let reply = conn
            .request(&Envelope::new(request))
            .await
            .map_err(|e| Error::Cluster {
                cause: format!("request to {addr} failed: {e}"),
            })?;
        Ok(reply.body)
    }

    fn return_lease(self: &Arc<Self>, node: NodeId, lease: TaskId) {
        let me = self.clone();
        self.tokio.spawn(async move {
            if let Ok(addr) = me.node_addr(node).await {
                let _ = me.ask(addr, Message::ReturnLease { lease }).await;
            }
        });
    }

    /// Returns leases idle for longer than [`LEASE_IDLE`].
    async fn reap_loop(self: Arc<Self>) {
        let mut tick = tokio::time::interval(LEASE_IDLE / 2);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if self.rt().is_none() {
                return;
            }
            let now = Instant::now();
            let mut expired = Vec::new();
            {
                let mut st = self.owner.lock();
                st.keys.retain(|_, ks| {
                    if ks.queue.is_empty() {
                        take_idle(ks, now, LEASE_IDLE, &mut expired);
                    }
                    !(ks.queue.is_empty() && ks.leases.is_empty() && !ks.requesting)
                });
            }
            for (node, lease) in expired {
                self.return_lease(node, lease);
            }
        }
    }

    pub(super) async fn node_addr(&self, node: NodeId) -> Result<SocketAddr, Error> {
        if let Some(a) = self.node_addrs.lock().get(&node) {
            return Ok(*a);
        }
        let nodes = self.gcs.nodes().await.map_err(|e| Error::Cluster {
            cause: e.to_string(),
        })?;
        let mut map = self.node_addrs.lock();
        for n in nodes {
            if let Ok(a) = n.address.parse() {
                map.insert(n.id, a);
            }
        }
        map.get(&node).copied().ok_or(Error::NodeDied {
            node,
            cause: "not in the node table".into(),
        })
    }

    // ---------------------------------------------------------------
    // Owner: links and results
    // ---------------------------------------------------------------

    /// The work stream to the worker at `addr`, opened on first use.
    async fn link(
        self: &Arc<Self>,
        addr: SocketAddr,
        node: NodeId,
        worker: WorkerId,
    ) -> Result<Arc<Link>, Error> {
        let cell = self.links.lock().entry(addr).or_default().clone();
        let me = self.clone();
        cell.get_or_try_init(|| async move {
            let conn = me.conns.get(addr).await.map_err(|e| Error::NodeDied {
                node,
                cause: format!("cannot reach its worker at {addr}: {e}"),
            })?;
            let (writer, reader) = conn.open_frames().await.map_err(|e| Error::NodeDied {
                node,
                cause: format!("cannot open a work stream to {addr}: {e}"),
            })?;
            let (tx, rx) = mpsc::unbounded_channel();
            let link = Arc::new(Link {
                addr,
                node,
                worker,
                tx,
                dead: false.into(),
            });
            me.tokio.spawn(write_loop(writer, rx));
            let me2 = me.clone();
            let watched = link.clone();
            me.tokio
                .spawn(async move { me2.read_results(watched, reader).await });
            Ok(link)
        })
        .await
        .cloned()
    }

    async fn read_results(self: Arc<Self>, link: Arc<Link>, mut reader: FrameReader) {
        let addr = link.addr;
        let cause = loop {
            match reader.recv().await {
                Ok(Some(env)) => match env.body {
                    Message::WorkDone { results } => self.on_results(addr, results),
                    other => break format!("unexpected message on a work stream: {other:?}"),
                },
                Ok(None) => break "the worker closed its work stream".to_string(),
                Err(e) => break format!("its worker at {addr} is unreachable: {e}"),
            }
        };
        self.link_died(&link, cause);
    }

    fn on_results(self: &Arc<Self>, addr: SocketAddr, results: Vec<WorkResult>) {
        let Some(rt) = self.rt() else { return };
        let mut touched: Vec<SchedKey> = Vec::new();
        let mut done = Vec::with_capacity(results.len());
        {
            let mut st = self.owner.lock();
            let OwnerState { keys, inflight } = &mut *st;
            for r in results {
                let Some(f) = inflight.remove(&r.task) else {
                    continue;
                };
                if let InflightKind::Task { key, lease } = &f.kind {
                    if let Some(ks) = keys.get_mut(key) {
                        if let Some(l) = ks.leases.iter_mut().find(|l| l.id == *lease) {
                            l.inflight -= 1;
                            if l.inflight == 0 {
                                l.idle_since = Some(Instant::now());
                            }
                        }
                        if !ks.queue.is_empty() && !touched.contains(key) {
                            touched.push(key.clone());
                        }
                    }
                }
                done.push((r, f));
            }
        }
        for key in &touched {
            self.pump(key);
        }
        for (r, f) in done {
            match r.outcome {
                WireOutcome::Value(bytes) => {
                    let buf = ObjectBuffer::from_aligned(aligned(&bytes));
                    self.finish(&rt, r.task, f, Ok(buf));
                }
                WireOutcome::Failed(e) => {
                    let err = error_from_wire(e, f.name);
                    self.finish(&rt, r.task, f, Err(err));
                }
                WireOutcome::Stored { .. } => {
                    let me = self.clone();
                    let rt = rt.clone();
                    self.tokio.spawn(async move {
                        let out = me.fetch(addr, r.task.return_object(), true).await;
                        me.finish(&rt, r.task, f, out);
                    });
                }
            }
        }
    }

    fn finish(
        &self,
        rt: &Arc<Runtime>,
        task: TaskId,
        f: Inflight,
        out: Result<ObjectBuffer, Error>,
    ) {
        match f.kind {
            InflightKind::ActorCreate(done) => {
                let _ = done.send(out.map(|_| ()));
            }
            _ => {
                let out = out.map(|buf| Encoded {
                    buf,
                    nested: Vec::new(),
                });
                rt.complete_object(task.return_object(), out);
            }
        }
    }

    /// Everything pushed on the link to `addr` fails: its worker or node died.
    fn link_died(self: &Arc<Self>, link: &Link, cause: String) {
        let (addr, node) = (link.addr, link.node);
        link.dead.store(true, std::sync::atomic::Ordering::Release);
        self.links.lock().remove(&addr);
        let failed: Vec<(TaskId, Inflight)> = {
            let mut st = self.owner.lock();
            let OwnerState { keys, inflight } = &mut *st;
            for ks in keys.values_mut() {
                ks.leases.retain(|l| l.link.addr != addr);
            }
            let ids: Vec<TaskId> = inflight
                .iter()
                .filter(|(_, f)| f.link == addr)
                .map(|(id, _)| *id)
                .collect();
            ids.into_iter()
                .filter_map(|id| inflight.remove(&id).map(|f| (id, f)))
                .collect()
        };
        if failed.is_empty() {
            return;
        }
        tracing::warn!(target: "ray::cluster", node = %node, %addr, cause = %cause, failed = failed.len(), "worker.lost");
        if let Some(rt) = self.rt() {
            for (task, f) in failed {
                let err = Error::NodeDied {
                    node: f.node,
                    cause: cause.clone(),
                };
                self.finish(&rt, task, f, Err(err));
            }
        }
    }

    /// Pushes one item on `link`, registered as inflight first; if the
    /// link is already lost the item fails at once. The check and the
    /// insert happen under the owner lock that `link_died` scans under, so
    /// every item is answered by its worker or failed exactly once.
    fn push(self: &Arc<Self>, link: &Link, task: TaskId, f: Inflight, item: WorkItem) -> bool {
        let mut st = self.owner.lock();
        if link.is_dead() {
            drop(st);
            if let Some(rt) = self.rt() {
                let err = Error::NodeDied {
                    node: link.node,
                    cause: format!("its worker at {} is gone", link.addr),
                };
                self.finish(&rt, task, f, Err(err));
            }
            return false;
        }
        st.inflight.insert(task, f);
        if matches!(item, WorkItem::Task { .. } | WorkItem::ActorCall { .. }) {
            tracing::trace!(
                name: "task.scheduled",
                target: "ray::task",
                task_id = task.as_u128(),
                node_id = link.node.0,
                worker_id = link.worker.0
            );
        }
        // Sent under the lock: items keep their order on the link.
        let _ = link.tx.send(item);
        true
    }

    // ---------------------------------------------------------------
    // Objects
    // ---------------------------------------------------------------

    /// Fetches object `id` from the process at `addr`.
    async fn fetch(
        &self,
        addr: SocketAddr,
        id: ObjectId,
        take: bool,
    ) -> Result<ObjectBuffer, Error> {
        let lost = |cause: String| Error::ObjectLost { object: id, cause };
        let conn = self
            .conns
            .get(addr)
            .await
            .map_err(|e| lost(format!("its holder at {addr} is unreachable: {e}")))?;
        let request = Envelope::new(Message::GetObject { id, take });
        let (reply, bytes) = conn
            .request_bulk(&request, MAX_OBJECT_LEN)
            .await
            .map_err(|e| lost(format!("transfer from {addr} failed: {e}")))?;
        match (reply.body, bytes) {
            (Message::ObjectFollows { .. }, Some(bytes)) => Ok(ObjectBuffer::from_aligned(bytes)),
            (Message::ObjectFailed { error }, _) => Err(error_from_wire(error, "")),
            (other, _) => Err(lost(format!("{addr} answered {other:?}"))),
        }
    }

    /// A counted ref to `id`, owned by another process: a borrowed entry of
    /// the local table, filled by fetching the value from its owner.
    pub(crate) fn borrow(
        self: &Arc<Self>,
        rt: &Arc<Runtime>,
        id: ObjectId,
        owner: Option<String>,
    ) -> Arc<RefHandle> {
        let (handle, created) = rt.objects.get_or_insert_pending(rt, id);
        if created {
            // Known even when the copy is kept here: a ref passed on to
            // another process names its owner's address.
            if let Some(o) = &owner {
                self.worker_addrs.lock().insert(id.owner, o.clone());
            }
            let kept = self.fetched.lock().get(id);
            if let Some(buf) = kept {
                rt.complete_object(
                    id,
                    Ok(Encoded {
                        buf,
                        nested: Vec::new(),
                    }),
                );
                return handle;
            }
            let me = self.clone();
            let rt = rt.clone();
            self.tokio.spawn(async move {
                let out = match me.worker_addr(id.owner).await {
                    Ok(addr) => me.fetch(addr, id, false).await,
                    Err(e) => Err(e),
                };
                if let Ok(buf) = &out {
                    me.fetched.lock().record(id, buf.clone());
                }
                rt.complete_object(
                    id,
                    out.map(|buf| Encoded {
                        buf,
                        nested: Vec::new(),
                    }),
                );
            });
        }
        handle
    }

    async fn worker_addr(&self, worker: WorkerId) -> Result<SocketAddr, Error> {
        let known = self.worker_addrs.lock().get(&worker).cloned();
        let addr = match known {
            Some(a) => a,
            None => {
                let a = self
                    .gcs
                    .get_worker(worker)
                    .await
                    .map_err(|e| Error::Cluster {
                        cause: e.to_string(),
                    })?
                    .ok_or_else(|| Error::Cluster {
                        cause: format!("{worker} is not in the worker table"),
                    })?;
                self.worker_addrs.lock().insert(worker, a.clone());
                a
            }
        };
        parse_addr(&addr)
    }

    fn owner_addr_now(&self, owner: WorkerId, me: WorkerId) -> Option<String> {
        if owner == me {
            Some(self.my_addr.clone())
        } else {
            self.worker_addrs.lock().get(&owner).cloned()
        }
    }

    /// `args` in wire form if every owner address is known now.
    fn wire_args_now(&self, args: &[TaskArg]) -> Option<Vec<WireArg>> {
        let rt = self.rt()?;
        let mut out = Vec::with_capacity(args.len());
        for a in args {
            out.push(match &a.0 {
                ArgKind::Value(buf, nested) => {
                    self.pin(nested);
                    WireArg::Value(buf.as_bytes().to_vec())
                }
                ArgKind::Ref(h) => WireArg::Ref {
                    id: h.id,
                    owner: self.owner_addr_now(h.id.owner, rt.worker)?,
                },
            });
        }
        Some(out)
    }

    /// `args` in wire form, looking up owner addresses as needed.
    async fn wire_args(&self, args: &[TaskArg]) -> Result<Vec<WireArg>, Error> {
        if let Some(a) = self.wire_args_now(args) {
            return Ok(a);
        }
        for a in args {
            if let ArgKind::Ref(h) = &a.0 {
                self.worker_addr(h.id.owner).await?;
            }
        }
        self.wire_args_now(args).ok_or(Error::ShutDown)
    }

    fn pin(&self, refs: &[Arc<RefHandle>]) {
        if !refs.is_empty() {
            self.pinned.lock().extend(refs.iter().cloned());
        }
    }

    // ---------------------------------------------------------------
    // Owner: actors
    // ---------------------------------------------------------------

    /// Creates an actor somewhere in the cluster; calls queue until it lives.
    pub(crate) fn spawn_actor(
        self: &Arc<Self>,
        rt: &Arc<Runtime>,
        class: &'static ActorClass,
        args: Vec<TaskArg>,
        opts: &ActorOptions,
    ) -> crate::Result<Arc<RemoteActor>> {
        let resources = resources_to_wire(opts.validate()?);
        let strategy = strategy_to_wire(&opts.resources.strategy);
        let id = ActorId::new(rt.worker, rt.next_seq());
        let (tx, rx) = mpsc::unbounded_channel();
        let actor = Arc::new(RemoteActor::new(id, class, tx));
        remember_actor(&mut self.actors.lock(), &actor);
        if let Some(crate::placement::PlacementGroup {
            inner: crate::placement::PgInner::Cluster(pg, _),
        }) = &opts.resources.group
        {
            pg.adopt_actor(&actor);
        }
        let max_concurrency = opts.max_concurrency as u32;
        let entry = ActorEntry {
            id,
            class_name: class.name.to_string(),
            name: opts.name.clone(),
            namespace: opts
                .namespace
                .clone()
                .unwrap_or_else(|| rt.settings.namespace.clone()),
            job: self.job,
            detached: opts.detached,
            status: ActorStatus::PendingCreation,
        };
        let launch = ActorLaunch {
            args,
            resources,
            strategy,
            max_concurrency,
            detached: opts.detached,
            creator: crate::context::current_trace(),
        };
        crate::context::before_child_submit();
        let me = self.clone();
        let shared = actor.clone();
        self.tokio
            .spawn(async move { me.run_actor(shared, rx, launch, entry).await });
        Ok(actor)
    }

    async fn run_actor(
        self: Arc<Self>,
        actor: Arc<RemoteActor>,
        rx: mpsc::UnboundedReceiver<ActorMsg>,
        launch: ActorLaunch,
        entry: ActorEntry,
    ) {
        let detached = launch.detached;
        let mut created = self.create_actor(&actor, launch).await;
        if let Ok(link) = &created {
            // The GCS's actor table: `rayrs list actors`, and names.
            let entry = ActorEntry {
                status: ActorStatus::Alive { node: link.node },
                ..entry
            };
            let registered = self
                .gcs
                .register_actor(entry, link.worker, link.addr.to_string())
                .await;
            if let Err(e) = registered {
                let _ = link.tx.send(WorkItem::KillActor { actor: actor.id });
                created = Err(Error::ActorDied {
                    actor: actor.id,
                    class: actor.class.name,
                    cause: format!("the GCS refused to register it: {e}"),
                });
            }
        }
        let link = match created {
            Ok(link) => link,
            Err(e) => {
                let cause = match e {
                    Error::ActorDied { cause, .. } => cause,
                    e => e.to_string(),
                };
                self.fail_calls(&actor, rx, cause).await;
                return;
            }
        };
        // A detached actor is not killed when this process's handles go.
        self.forward_calls(&actor, rx, &link, !detached).await;
    }

    /// Forwards `actor`'s calls, in order, to its worker on `link` until
    /// every handle is gone; an `owned` actor is then killed (a handle
    /// found by name is not the owner's and leaves it alive).
    async fn forward_calls(
        self: &Arc<Self>,
        actor: &Arc<RemoteActor>,
        mut rx: mpsc::UnboundedReceiver<ActorMsg>,
        link: &Arc<Link>,
        owned: bool,
    ) {
        while let Some(msg) = rx.recv().await {
            match msg {
                ActorMsg::Call {
                    task,
                    method,
                    args,
                    parent,
                } => {
                    let wire = match self.wire_args(&args).await {
                        Ok(w) => w,
                        Err(e) => {
                            if let Some(rt) = self.rt() {
                                rt.complete_object(task.return_object(), Err(e));
                            }
                            continue;
                        }
                    };
                    let f = Inflight {
                        kind: InflightKind::ActorCall,
                        name: method.name,
                        link: link.addr,
                        node: link.node,
                        _keep: args,
                    };
                    let item = WorkItem::ActorCall {
                        task,
                        actor: actor.id,
                        method: method.id,
                        args: wire,
                        parent,
                    };
                    if !self.push(link, task, f, item) {
                        actor.set_dead(format!(
                            "its node {} (worker at {}) is gone",
                            link.node, link.addr
                        ));
                    }
                }
                ActorMsg::Kill => {
                    let _ = link.tx.send(WorkItem::KillActor { actor: actor.id });
                    actor.set_dead("killed by its owner".into());
                }
            }
        }
        if owned && !actor.escaped.load(std::sync::atomic::Ordering::Acquire) {
            // Every handle is gone: the actor goes too.
            let _ = link.tx.send(WorkItem::KillActor { actor: actor.id });
        }
    }

    /// A handle to actor `id` of `class` (decoded from a value): this
    /// process's own handle if it has one, else one that finds the actor
    /// in the GCS (retrying while it is being created) and then forwards
    /// calls; calls made meanwhile wait in order.
    pub(crate) fn adopt_actor(
        self: &Arc<Self>,
        id: ActorId,
        class: &'static ActorClass,
    ) -> Arc<RemoteActor> {
        let mut actors = self.actors.lock();
        if let Some(a) = actors.get(&id).and_then(Weak::upgrade) {
            return a;
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let actor = Arc::new(RemoteActor::new(id, class, tx));
        remember_actor(&mut actors, &actor);
        drop(actors);
        let me = self.clone();
        let shared = actor.clone();
        self.tokio.spawn(async move {
            match me.locate(id, class).await {
                Ok(link) => me.forward_calls(&shared, rx, &link, false).await,
                Err(e) => me.fail_calls(&shared, rx, e.to_string()).await,
            }
        });
        actor
    }

    async fn locate(
        self: &Arc<Self>,
        id: ActorId,
        class: &'static ActorClass,
    ) -> Result<Arc<Link>, Error> {
        let deadline = Instant::now() + Duration::from_secs(30);
        let loc = loop {
            match self.gcs.locate_actor(id).await {
                Ok(loc) => break loc,
                Err(super::ClusterError::Refused { reason }) => {
                    if Instant::now() > deadline {
                        return Err(Error::ActorDied {
                            actor: id,
                            class: class.name,
                            cause: reason,
                        });
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(e) => {
                    return Err(Error::Cluster {
                        cause: e.to_string(),
                    })
                }
            }
        };
        if loc.class_name != class.name {
            return Err(Error::ActorClassMismatch {
                name: id.to_string(),
                expected: class.name,
                actual: intern(&loc.class_name),
            });
        }
        let node = self
            .actor_node(loc.id)
            .await
            .ok_or_else(|| Error::ActorDied {
                actor: id,
                class: class.name,
                cause: format!("its worker {} is no longer alive", loc.worker),
            })?;
        self.link(parse_addr(&loc.address)?, node, loc.worker).await
    }

    /// The node a live actor runs on, from the GCS's actor table.
    async fn actor_node(&self, actor: ActorId) -> Option<NodeId> {
        self.gcs
            .actors()
            .await
            .ok()?
            .into_iter()
            .find(|a| a.id == actor)
            .and_then(|a| match a.status {
                ActorStatus::Alive { node } => Some(node),
                _ => None,
            })
    }

    /// Fails every call to `actor` until all its handles are gone.
    async fn fail_calls(
        &self,
        actor: &RemoteActor,
        mut rx: mpsc::UnboundedReceiver<ActorMsg>,
        cause: String,
    ) {
        actor.set_dead(cause.clone());
        let rt = self.rt();
        while let Some(msg) = rx.recv().await {
            if let (ActorMsg::Call { task, .. }, Some(rt)) = (msg, &rt) {
                rt.complete_object(task.return_object(), Err(actor.died(&cause)));
            }
        }
    }

    /// A handle to the live actor named `name` in `namespace`, found in
    /// the GCS; calls go straight to the worker hosting it.
    pub(crate) async fn find_actor(
        self: &Arc<Self>,
        class: &'static ActorClass,
        namespace: &str,
        name: &str,
    ) -> Result<Arc<RemoteActor>, Error> {
        let loc = self
            .gcs
            .lookup_actor(namespace, name)
            .await
            .map_err(|e| match e {
                super::ClusterError::Refused { .. } => Error::ActorNotFound {
                    namespace: namespace.to_string(),
                    name: name.to_string(),
                },
                e => Error::Cluster {
                    cause: e.to_string(),
                },
            })?;
        if loc.class_name != class.name {
            return Err(Error::ActorClassMismatch {
                name: name.to_string(),
                expected: class.name,
                actual: intern(&loc.class_name),
            });
        }
        let addr = parse_addr(&loc.address)?;
        let node = self
            .actor_node(loc.id)
            .await
            .ok_or_else(|| Error::ActorDied {
                actor: loc.id,
                class: class.name,
                cause: format!("its worker {} is no longer alive", loc.worker),
            })?;
        let link = self.link(addr, node, loc.worker).await?;
        let (tx, rx) = mpsc::unbounded_channel();
        let actor = Arc::new(RemoteActor::new(loc.id, class, tx));
        let me = self.clone();
        let shared = actor.clone();
        self.tokio.spawn(async move {
            me.forward_calls(&shared, rx, &link, false).await;
        });
        Ok(actor)
    }

    async fn create_actor(
        self: &Arc<Self>,
        actor: &Arc<RemoteActor>,
        launch: ActorLaunch,
    ) -> Result<Arc<Link>, Error> {
        let ActorLaunch {
            args,
            resources,
            strategy,
            max_concurrency,
            detached,
            creator,
        } = launch;
        self.rt().ok_or(Error::ShutDown)?;
        for d in crate::task::pending_deps(&args) {
            let _ = d.buffer().await;
        }
        let wire = self.wire_args(&args).await?;
        let (lease, node, link) = self.lease(&resources, &strategy).await?;
        let (done_tx, done_rx) = oneshot::channel();
        let task = TaskId::new(actor.id.owner, actor.id.seq);
        let f = Inflight {
            kind: InflightKind::ActorCreate(done_tx),
            name: actor.class.name,
            link: link.addr,
            node,
            _keep: args,
        };
        let item = WorkItem::CreateActor {
            actor: actor.id,
            class: actor.class.id,
            args: wire,
            lease,
            resources,
            max_concurrency,
            detached,
            creator,
        };
        self.push(&link, task, f, item);
        match done_rx.await {
            Ok(Ok(())) => Ok(link),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(Error::ShutDown),
        }
    }

    // ---------------------------------------------------------------
    // Serving peers (owners pushing work, borrowers fetching objects)
    // ---------------------------------------------------------------

    async fn accept_loop(self: Arc<Self>) {
        while let Ok(conn) = self.endpoint.accept().await {
            let me = self.clone();
            let peer = conn.remote_address();
            self.tokio.spawn(async move {
                while let Ok((w, r)) = conn.accept_frames().await {
                    let me = me.clone();
                    me.tokio
                        .clone()
                        .spawn(async move { me.serve_stream(w, r, peer).await });
                }
            });
        }
    }

    async fn serve_stream(
        self: Arc<Self>,
        mut w: FrameWriter,
        mut r: FrameReader,
        peer: SocketAddr,
    ) {
        let Ok(Some(first)) = r.recv().await else {
            return;
        };
        match first.body {
            Message::GetObject { id, take } => self.serve_object(w, id, take, peer).await,
            Message::ObjectsFreed { ids } => {
                let forgotten = self.fetched.lock().forget(&ids);
                drop(forgotten);
                let _ = w.send(&Envelope::new(Message::Ok)).await;
                w.finish();
            }
            Message::WorkBatch { items } => {
                let (tx, rx) = mpsc::unbounded_channel();
                let writer = self.tokio.spawn(result_loop(w, rx));
                for item in items {
                    self.execute(item, &tx);
                }
                while let Ok(Some(env)) = r.recv().await {
                    match env.body {
                        Message::WorkBatch { items } => {
                            for item in items {
                                self.execute(item, &tx);
                            }
                        }
                        _ => break,
                    }
                }
                drop(tx);
                let _ = writer.await;
            }
            Message::Ping { seq } => {
                let _ = w.send(&Envelope::new(Message::Pong { seq })).await;
                w.finish();
            }
            msg @ (Message::ListTasks | Message::ListObjects) => {
                let reply = super::state::answer(&self, msg);
                let _ = w.send(&Envelope::new(reply)).await;
                w.finish();
            }
            _ => {
                let reply = Message::Error {
                    reason: "a data-plane stream must start with GetObject or WorkBatch".into(),
                };
                let _ = w.send(&Envelope::new(reply)).await;
                w.finish();
            }
        }
    }

    async fn serve_object(
        self: Arc<Self>,
        mut w: FrameWriter,
        id: ObjectId,
        take: bool,
        peer: SocketAddr,
    ) {
        let held = if take {
            self.held.lock().remove(&id)
        } else {
            self.held.lock().get(&id).cloned()
        };
        let out = match held {
            Some(buf) => Ok(buf),
            None => match self.rt().and_then(|rt| rt.objects.handle(id)) {
                Some(h) => ObjectRef::<()>::from_handle(h).buffer().await,
                None => Err(Error::ObjectLost {
                    object: id,
                    cause: "no reference to it remains at its owner".into(),
                }),
            },
        };
        match out {
            Ok(buf) => {
                // Noted before sending: the peer's copy exists from now on.
                if !take && buf.len() >= FREE_NOTICE_MIN {
                    self.note_served(id, peer);
                }
                let head = Message::ObjectFollows {
                    len: buf.len() as u64,
                };
                if w.send(&Envelope::new(head)).await.is_ok() {
                    let _ = w.send_shared(buf).await;
                }
            }
            Err(e) => {
                let _ = w
                    .send(&Envelope::new(Message::ObjectFailed {
                        error: error_to_wire(&e),
                    }))
                    .await;
            }
        }
        w.finish();
    }

    /// Runs one pushed work item through this process's runtime.
    fn execute(self: &Arc<Self>, item: WorkItem, results: &mpsc::UnboundedSender<WorkResult>) {
        let Some(rt) = self.rt() else { return };
        let fail = |task: TaskId, e: Error| {
            let _ = results.send(WorkResult {
                task,
                outcome: WireOutcome::Failed(error_to_wire(&e)),
            });
        };
        match item {
            WorkItem::Task {
                task,
                function,
                args,
                lease,
                resources,
                attempt,
                parent,
            } => {
                let Some(f) = registry().function(function) else {
                    return fail(task, missing(function.0, "remote function"));
                };
                let args = self.args_from_wire(&rt, args);
                let local = rt.new_task_id();
                let handle = match rt.pending_return(local) {
                    Ok(h) => h,
                    Err(e) => return fail(task, e),
                };
                self.lease_of.lock().insert(local, lease);
                rt.enqueue_task(TaskSpec {
                    task: local,
                    function: f,
                    args,
                    resources: resources_from_wire(&resources),
                    pool: Pool::Node,
                    max_retries: 0,
                    retry_exceptions: false,
                    attempt,
                    parent,
                    trace: Some(task),
                    ret: Some(handle.cell.clone()),
                });
                self.forward(handle, task, results.clone());
            }
            WorkItem::CreateActor {
                actor,
                class,
                args,
                lease,
                resources,
                max_concurrency,
                detached,
                creator,
            } => {
                let creation = TaskId::new(actor.owner, actor.seq);
                if detached {
                    // Before the creation is answered: by the time the
                    // owner can end its job, the node keeps this worker.
                    let me = self.clone();
                    self.tokio.spawn(async move {
                        let _ = me.ask(me.local_node, Message::DetachLease { lease }).await;
                    });
                }
                let Some(cls) = registry().actor_class(class) else {
                    return fail(creation, missing(class.0, "actor class"));
                };
                let args = self.args_from_wire(&rt, args);
                let opts = ActorOptions {
                    resources: ResourceRequest::from_set(resources_from_wire(&resources)),
                    max_concurrency: max_concurrency.max(1) as usize,
                    ..ActorOptions::default()
                };
                match crate::actor::spawn_actor_as(&rt, actor, cls, args, opts, creator) {
                    Ok((cell, created)) => {
                        self.hosted.lock().insert(actor, Hosted { cell, lease });
                        let results = results.clone();
                        let me = self.clone();
                        self.tokio.spawn(async move {
                            let outcome = match created.await {
                                Ok(Ok(())) => WireOutcome::Value(Vec::new()),
                                Ok(Err(cause)) => {
                                    me.drop_hosted(actor);
                                    WireOutcome::Failed(error_to_wire(&Error::ActorDied {
                                        actor,
                                        class: cls.name,
                                        cause,
                                    }))
                                }
                                Err(_) => WireOutcome::Failed(error_to_wire(&Error::ShutDown)),
                            };
                            let _ = results.send(WorkResult {
                                task: creation,
                                outcome,
                            });
                        });
                    }
                    Err(e) => fail(creation, e),
                }
            }
            WorkItem::ActorCall {
                task,
                actor,
                method,
                args,
                parent,
            } => {
                let Some(m) = registry().actor_method(method) else {
                    return fail(task, missing(method.0, "actor method"));
                };
                let cell = self.hosted.lock().get(&actor).map(|h| h.cell.clone());
                let Some(cell) = cell else {
                    return fail(
                        task,
                        Error::ActorDied {
                            actor,
                            class: "",
                            cause: "it does not live on this worker (dead or killed)".into(),
                        },
                    );
                };
                let args = self.args_from_wire(&rt, args);
                match cell.call_pushed(m, args, task, parent) {
                    Ok(handle) => self.forward(handle, task, results.clone()),
                    Err(e) => fail(task, e),
                }
            }
            WorkItem::KillActor { actor } => {
                if let Some(cell) = self.drop_hosted(actor) {
                    cell.fail("killed by its owner".into());
                }
            }
        }
    }

    /// Forgets a hosted actor and gives its lease back to the node.
    fn drop_hosted(self: &Arc<Self>, actor: ActorId) -> Option<Arc<ActorCell>> {
        let h = self.hosted.lock().remove(&actor)?;
        let me = self.clone();
        let lease = h.lease;
        self.tokio.spawn(async move {
            let _ = me.ask(me.local_node, Message::ReturnLease { lease }).await;
        });
        Some(h.cell)
    }

    /// Sends the local result of pushed work back to its owner as `task`.
    fn forward(
        self: &Arc<Self>,
        handle: Arc<RefHandle>,
        task: TaskId,
        results: mpsc::UnboundedSender<WorkResult>,
    ) {
        Forward::start(ForwardState {
            core: self.clone(),
            handle,
            task,
            results,
        });
    }

    /// The outcome of a pushed task whose local return object `handle`
    /// completed with `out`, sent to its owner.
    fn finish_forward(&self, f: ForwardState, out: Result<ObjectBuffer, Error>) {
        let ForwardState {
            handle,
            task,
            results,
            ..
        } = f;
        let Some(rt) = self.rt() else { return };
        let local = handle.id;
        self.lease_of
            .lock()
            .remove(&TaskId::new(local.owner, local.seq));
        self.pin(&rt.objects.take_contained(local));
        let outcome = match out {
            Ok(buf) if buf.len() <= rt.settings.max_inline_bytes => {
                WireOutcome::Value(buf.as_bytes().to_vec())
            }
            Ok(buf) => {
                let len = buf.len() as u64;
                self.held.lock().insert(task.return_object(), buf);
                WireOutcome::Stored { len }
            }
            Err(e) => WireOutcome::Failed(error_to_wire(&e)),
        };
        let _ = results.send(WorkResult { task, outcome });
    }

    fn args_from_wire(self: &Arc<Self>, rt: &Arc<Runtime>, args: Vec<WireArg>) -> Vec<TaskArg> {
        args.into_iter()
            .map(|a| match a {
                WireArg::Value(bytes) => TaskArg(ArgKind::Value(
                    ObjectBuffer::from_aligned(aligned(&bytes)),
                    Vec::new(),
                )),
                WireArg::Ref { id, owner } => {
                    let h = if id.owner == rt.worker {
                        rt.objects
                            .handle(id)
                            .unwrap_or_else(|| self.borrow(rt, id, Some(owner)))
                    } else {
                        self.borrow(rt, id, Some(owner))
                    };
                    TaskArg(ArgKind::Ref(h))
                }
            })
            .collect()
    }

    /// Objects fetched from other processes so far, their bytes, and the
    /// bytes of fetched objects kept now.
    pub(crate) fn fetch_counts(&self) -> (u64, u64, u64) {
        let cache = self.fetched.lock();
        (cache.fetches, cache.fetched_bytes, cache.bytes as u64)
    }

    /// Remembers that `peer` fetched `id`, when this process owns it.
    fn note_served(&self, id: ObjectId, peer: SocketAddr) {
        if self.rt().is_none_or(|rt| rt.worker != id.owner) {
            return;
        }
        let mut served = self.served.lock();
        let peers = served.entry(id).or_insert_with(|| {
            self.serving.fetch_add(1, Ordering::Relaxed);
            Vec::new()
        });
        if !peers.contains(&peer) {
            peers.push(peer);
        }
    }

    /// This process freed `id`: the processes that fetched it drop the
    /// copies they kept. Notices go from the I/O runtime, one per process
    /// for all the frees queued by the time it sends.
    pub(crate) fn object_freed(self: &Arc<Self>, id: ObjectId) {
        if self.serving.load(Ordering::Relaxed) == 0 {
            return;
        }
        let Some(peers) = self.served.lock().remove(&id) else {
            return;
        };
        self.serving.fetch_sub(1, Ordering::Relaxed);
        let start_sender = {
            let mut unsent = self.unsent_frees.lock();
            let idle = unsent.is_empty();
            for peer in peers {
                unsent.entry(peer).or_default().push(id);
            }
            idle
        };
        if start_sender {
            let me = self.clone();
            self.tokio.spawn(async move { me.send_frees().await });
        }
    }

    /// Sends the queued free notices until none are left.
    async fn send_frees(self: Arc<Self>) {
        loop {
            let batch: Vec<(SocketAddr, Vec<ObjectId>)> = {
                let mut unsent = self.unsent_frees.lock();
                if unsent.is_empty() {
                    // Emptied under the lock: the next free starts a sender.
                    return;
                }
                unsent.drain().collect()
            };
            for (peer, ids) in batch {
                let notice = Envelope::new(Message::ObjectsFreed { ids });
                // A peer gone or unreachable has no copy left to drop.
                if let Ok(conn) = self.conns.get(peer).await {
                    let _ = conn.request(&notice).await;
                }
            }
        }
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

/// The most bytes of fetched objects a process keeps for later borrowers.
const FETCH_CACHE_BYTES: usize = 256 << 20;

/// Objects at least this large that another process fetched are tracked
/// by their owner, which tells that process when it frees them
/// ([`Message::ObjectsFreed`]); smaller copies just age out of its
/// [`FetchCache`].
const FREE_NOTICE_MIN: usize = 64 << 10;

/// Objects this process fetched from their owners, oldest evicted first
/// once they pass [`FETCH_CACHE_BYTES`].
///
/// A borrowed entry lives only while some task here holds its ref, so
/// without this a worker fetched the same 10 MiB argument again for every
/// batch of tasks pushed to it (W6: four fetches of one object per run).
/// Objects never change, so a kept copy stays right. Like a secondary copy
/// in Ray's object store it goes when its owner frees the object (for
/// copies of [`FREE_NOTICE_MIN`] bytes or more; smaller ones may outlive
/// it within the byte bound): a 100 MiB argument no longer holds 100 MiB
/// in every worker that read it until newer fetches push it out, and its
/// memory is reused for the next large object (`ray_store::recycle`).
struct FetchCache {
    /// The most bytes kept.
    cap: usize,
    objects: HashMap<ObjectId, ObjectBuffer>,
    order: VecDeque<ObjectId>,
    bytes: usize,
    /// Objects fetched, and their bytes, for [`crate::RuntimeStats`].
    fetches: u64,
    fetched_bytes: u64,
}

impl Default for FetchCache {
    fn default() -> Self {
        Self::with_cap(FETCH_CACHE_BYTES)
    }
}

impl FetchCache {
    fn with_cap(cap: usize) -> Self {
        Self {
            cap,
            objects: HashMap::new(),
            order: VecDeque::new(),
            bytes: 0,
            fetches: 0,
            fetched_bytes: 0,
        }
    }

    fn get(&self, id: ObjectId) -> Option<ObjectBuffer> {
        self.objects.get(&id).cloned()
    }

    /// Drops the kept copies of `ids` (their owner freed them); returns
    /// them so the caller frees the memory outside its lock.
    fn forget(&mut self, ids: &[ObjectId]) -> Vec<ObjectBuffer> {
        let gone: Vec<ObjectBuffer> = ids
            .iter()
            .filter_map(|id| self.objects.remove(id))
            .collect();
        self.bytes -= gone.iter().map(|b| b.len()).sum::<usize>();
        // `order` keeps forgotten ids until they reach its front; compact it
        // when they outnumber the live ones.
        if self.order.len() > 2 * self.objects.len() + 16 {
            let objects = &self.objects;
            self.order.retain(|id| objects.contains_key(id));
        }
        gone
    }

    /// Counts a fetch of `id` and keeps its bytes (evicting the oldest).
    fn record(&mut self, id: ObjectId, buf: ObjectBuffer) {
        self.fetches += 1;
        self.fetched_bytes += buf.len() as u64;
        if buf.len() > self.cap {
            return;
        }
        self.bytes += buf.len();
        if let Some(old) = self.objects.insert(id, buf) {
            self.bytes -= old.len();
        } else {
            self.order.push_back(id);
        }
        while self.bytes > self.cap {
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            if let Some(gone) = self.objects.remove(&oldest) {
                self.bytes -= gone.len();
            }
        }
    }
}

/// What forwarding one pushed task's outcome needs.
struct ForwardState {
    core: Arc<ClusterCore>,
    /// The task's local return object (holding it keeps the entry).
    handle: Arc<RefHandle>,
    /// The owner's id of the task.
    task: TaskId,
    results: mpsc::UnboundedSender<WorkResult>,
}

/// Forwards a pushed task's outcome from the thread that completes its
/// return object: the object table wakes this waker, which sends the
/// result on. A tokio task per pushed task cost a spawn and a cross-thread
/// wake-up each, and its first poll spun up to 10 µs on the I/O thread
/// (the driver's get spin) for every task.
struct Forward(Mutex<Option<ForwardState>>);

impl Forward {
    fn start(state: ForwardState) {
        Arc::new(Forward(Mutex::new(Some(state)))).try_finish();
    }

    /// Finishes if the object is ready, else waits for the next wake.
    fn try_finish(self: Arc<Self>) {
        let mut slot = self.0.lock();
        let Some(state) = slot.as_ref() else {
            // Already forwarded (a duplicate wake).
            return;
        };
        let rt = state.handle.rt.clone();
        let id = state.handle.id;
        let waker = std::task::Waker::from(self.clone());
        // The table wakes its waiters after releasing its lock, so holding
        // this slot's lock across `poll` cannot deadlock with `complete`.
        match state.handle.poll(Some(&waker)) {
            std::task::Poll::Pending => {}
            std::task::Poll::Ready(value) => {
                let Some(state) = slot.take() else { return };
                drop(slot);
                let out = rt.read_value(id, value);
                state.core.clone().finish_forward(state, out);
            }
        }
    }
}

impl std::task::Wake for Forward {
    fn wake(self: Arc<Self>) {
        self.try_finish();
    }
}

/// Messages to a remote actor's task.
/// What creating an actor on some worker needs, besides the actor.
struct ActorLaunch {
    args: Vec<TaskArg>,
    resources: Vec<ResourceAmount>,
    strategy: WireStrategy,
    max_concurrency: u32,
    detached: bool,
    /// The creating task (`None`: the driver), for insight.
    creator: Option<TaskId>,
}

pub(crate) enum ActorMsg {
    Call {
        task: TaskId,
        method: &'static ActorMethod,
        args: Vec<TaskArg>,
        /// The calling task (`None`: the driver), for insight.
        parent: Option<TaskId>,
    },
    Kill,
}

/// The owner's handle on an actor living in another process.
pub(crate) struct RemoteActor {
    pub(crate) id: ActorId,
    pub(crate) class: &'static ActorClass,
    tx: mpsc::UnboundedSender<ActorMsg>,
    dead: Mutex<Option<String>>,
    /// A handle was serialized into a value that may reach another
    /// process: the actor then lives until its job ends, not until this
    /// process drops its handles (no distributed handle counting yet).
    escaped: std::sync::atomic::AtomicBool,
}

impl RemoteActor {
    fn new(id: ActorId, class: &'static ActorClass, tx: mpsc::UnboundedSender<ActorMsg>) -> Self {
        Self {
            id,
            class,
            tx,
            dead: Mutex::new(None),
            escaped: false.into(),
        }
    }

    /// Marks the actor as reachable from elsewhere (see `escaped`).
    pub(crate) fn escape(&self) {
        self.escaped
            .store(true, std::sync::atomic::Ordering::Release);
    }

    fn died(&self, cause: &str) -> Error {
        Error::ActorDied {
            actor: self.id,
            class: self.class.name,
            cause: cause.to_string(),
        }
    }

    fn set_dead(&self, cause: String) {
        self.dead.lock().get_or_insert(cause);
    }

    /// Queues a call; its result completes `task`'s return object.
    pub(crate) fn call(
        &self,
        rt: &Arc<Runtime>,
        task: TaskId,
        method: &'static ActorMethod,
        args: Vec<TaskArg>,
        parent: Option<TaskId>,
    ) {
        let dead = self.dead.lock().clone();
        if let Some(cause) = dead {
            rt.complete_object(task.return_object(), Err(self.died(&cause)));
            return;
        }
        if let Err(mpsc::error::SendError(ActorMsg::Call { task, .. })) =
            self.tx.send(ActorMsg::Call {
                task,
                method,
                args,
                parent,
            })
        {
            rt.complete_object(task.return_object(), Err(self.died("its owner stopped")));
        }
    }

    /// Kills the actor.
    pub(crate) fn kill(&self) {
        let _ = self.tx.send(ActorMsg::Kill);
    }
}

/// Records a handle in the by-id map; entries whose handles are all gone
/// are swept whenever the map doubles, so it stays proportional to the
/// live handles.
fn remember_actor(actors: &mut HashMap<ActorId, Weak<RemoteActor>>, actor: &Arc<RemoteActor>) {
    if actors.len() >= 64 && actors.len().is_power_of_two() {
        actors.retain(|_, a| a.strong_count() > 0);
    }
    actors.insert(actor.id, Arc::downgrade(actor));
}

async fn write_loop(mut w: FrameWriter, mut rx: mpsc::UnboundedReceiver<WorkItem>) {
    while let Some(first) = rx.recv().await {
        let mut items = vec![first];
        while items.len() < BATCH_ITEMS {
            match rx.try_recv() {
                Ok(i) => items.push(i),
                Err(_) => break,
            }
        }
        if w.send(&Envelope::new(Message::WorkBatch { items }))
            .await
            .is_err()
        {
            return;
        }
    }
    w.finish();
}

async fn result_loop(mut w: FrameWriter, mut rx: mpsc::UnboundedReceiver<WorkResult>) {
    while let Some(first) = rx.recv().await {
        let mut results = vec![first];
        while results.len() < BATCH_ITEMS {
            match rx.try_recv() {
                Ok(r) => results.push(r),
                Err(_) => break,
            }
        }
        if w.send(&Envelope::new(Message::WorkDone { results }))
            .await
            .is_err()
        {
            return;
        }
    }
    w.finish();
}

fn aligned(bytes: &[u8]) -> rkyv::util::AlignedVec<16> {
    let mut v = rkyv::util::AlignedVec::<16>::with_capacity(bytes.len());
    v.extend_from_slice(bytes);
    v
}

fn parse_addr(s: &str) -> Result<SocketAddr, Error> {
    s.parse().map_err(|_| Error::Cluster {
        cause: format!("bad peer address {s:?}"),
    })
}

fn missing(id: u64, what: &str) -> Error {
    Error::Cluster {
        cause: format!(
            "{what} {id:016x} is not in this worker's binary (the job binary and the driver differ)"
        ),
    }
}

/// `strategy` in wire form.
pub(crate) fn strategy_to_wire(strategy: &SchedulingStrategy) -> WireStrategy {
    match strategy {
        SchedulingStrategy::Default => WireStrategy::Default,
        SchedulingStrategy::Spread => WireStrategy::Spread,
        SchedulingStrategy::NodeAffinity { node, soft } => WireStrategy::NodeAffinity {
            node: *node,
            soft: *soft,
        },
        SchedulingStrategy::PlacementGroup { group, bundle } => WireStrategy::PlacementGroup {
            group: *group,
            bundle: bundle.map(|b| b as u32),
        },
        #[allow(unreachable_patterns)]
        _ => WireStrategy::Default,
    }
}

/// The scheduling strategy a wire form describes.
pub(crate) fn strategy_from_wire(strategy: &WireStrategy) -> SchedulingStrategy {
    match strategy {
        WireStrategy::Default => SchedulingStrategy::Default,
        WireStrategy::Spread => SchedulingStrategy::Spread,
        WireStrategy::NodeAffinity { node, soft } => SchedulingStrategy::NodeAffinity {
            node: *node,
            soft: *soft,
        },
        WireStrategy::PlacementGroup { group, bundle } => SchedulingStrategy::PlacementGroup {
            group: *group,
            bundle: bundle.map(|b| b as usize),
        },
    }
}

/// `e` in wire form.
pub(crate) fn error_to_wire(e: &Error) -> WireError {
    let mut w = WireError {
        kind: ErrorKind::Other,
        task: None,
        actor: None,
        object: None,
        name: String::new(),
        message: e.to_string(),
        type_name: String::new(),
        payload: Vec::new(),
    };
    match e {
        Error::TaskPanicked {
            task,
            function,
            message,
        } => {
            w.kind = ErrorKind::TaskPanicked;
            w.task = Some(*task);
            w.name = function.to_string();
            w.message = message.clone();
        }
        Error::TaskFailed {
            task,
            function,
            error,
        } => {
            w.kind = ErrorKind::TaskFailed;
            w.task = Some(*task);
            w.name = function.to_string();
            w.message = error.message().to_string();
            w.type_name = error.type_name().to_string();
            w.payload = error.payload().as_bytes().to_vec();
        }
        Error::ActorDied {
            actor,
            class,
            cause,
        } => {
            w.kind = ErrorKind::ActorDied;
            w.actor = Some(*actor);
            w.name = class.to_string();
            w.message = cause.clone();
        }
        Error::ObjectLost { object, cause } => {
            w.kind = ErrorKind::ObjectLost;
            w.object = Some(*object);
            w.message = cause.clone();
        }
        Error::ShutDown => w.kind = ErrorKind::ShutDown,
        _ => {}
    }
    w
}

/// The typed error a wire form describes; `name` is the function, method
/// or class the receiver knows the work by.
pub(crate) fn error_from_wire(w: WireError, name: &'static str) -> Error {
    let name = if name.is_empty() {
        intern(&w.name)
    } else {
        name
    };
    match (w.kind, w.task, w.actor, w.object) {
        (ErrorKind::TaskPanicked, Some(task), ..) => Error::TaskPanicked {
            task,
            function: name,
            message: w.message,
        },
        (ErrorKind::TaskFailed, Some(task), ..) => Error::TaskFailed {
            task,
            function: name,
            error: UserError::new(
                intern(&w.type_name),
                w.message,
                ObjectBuffer::from_aligned(aligned(&w.payload)),
            ),
        },
        (ErrorKind::ActorDied, _, Some(actor), _) => Error::ActorDied {
            actor,
            class: intern(&w.name),
            cause: w.message,
        },
        (ErrorKind::ObjectLost, _, _, Some(object)) => Error::ObjectLost {
            object,
            cause: w.message,
        },
        (ErrorKind::ShutDown, ..) => Error::ShutDown,
        _ => Error::Cluster { cause: w.message },
    }
}

/// A `'static` copy of a name that crossed the wire; each distinct name is
/// leaked once (names are function, class and type names: few).
fn intern(s: &str) -> &'static str {
    static NAMES: OnceLock<Mutex<hashbrown::HashSet<&'static str>>> = OnceLock::new();
    let mut names = NAMES.get_or_init(Default::default).lock();
    if let Some(n) = names.get(s) {
        return n;
    }
    let n: &'static str = Box::leak(s.to_owned().into_boxed_str());
    names.insert(n);
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    fn never(
        _: &[ObjectBuffer],
    ) -> Result<crate::registry::Returned, crate::registry::InvokeError> {
        unreachable!("the lease tests queue work but never run it")
    }

    static QUEUED_FN: RemoteFunction = RemoteFunction {
        id: ray_proto::FunctionId(1),
        name: "queued",
        invoke: never,
    };

    fn key(strategy: WireStrategy) -> SchedKey {
        SchedKey {
            resources: Vec::new(),
            strategy,
        }
    }

    fn lease(seq: u64, inflight: usize, idle_for: Option<Duration>) -> Lease {
        let (tx, _) = mpsc::unbounded_channel();
        Lease {
            id: TaskId::new(WorkerId(1), seq),
            node: NodeId(7),
            link: Arc::new(Link {
                addr: "127.0.0.1:1".parse().unwrap(),
                node: NodeId(7),
                worker: WorkerId(2),
                tx,
                dead: false.into(),
            }),
            inflight,
            idle_since: idle_for.map(|d| Instant::now() - d),
        }
    }

    #[test]
    fn idle_leases_of_other_shapes_go_back_while_work_waits_for_a_lease() {
        let spread = key(WireStrategy::Spread);
        let default = key(WireStrategy::Default);
        let mut st = OwnerState::default();
        st.keys.insert(
            spread.clone(),
            KeyState {
                leases: vec![
                    lease(1, 0, Some(Duration::from_millis(20))),
                    lease(2, 1, None),
                    lease(3, 0, Some(Duration::ZERO)),
                ],
                ..KeyState::default()
            },
        );
        assert!(!st.others_waiting(&spread), "nothing is queued yet");
        assert!(
            st.take_idle_leases_of_others(&spread).is_empty(),
            "a key never gives back its own leases this way"
        );
        st.keys
            .entry(default.clone())
            .or_default()
            .queue
            .push_back(Queued {
                task: TaskId::new(WorkerId(1), 10),
                function: &QUEUED_FN,
                args: Vec::new(),
                keep: Vec::new(),
                attempt: 0,
                parent: None,
            });
        assert!(st.others_waiting(&spread), "default work waits");
        assert!(!st.others_waiting(&default), "only its own work waits");
        let back = st.take_idle_leases_of_others(&default);
        assert_eq!(
            back,
            vec![(NodeId(7), TaskId::new(WorkerId(1), 1))],
            "only the lease idle for more than {LEASE_IDLE_WHILE_OTHERS_WAIT:?} goes back"
        );
        let kept: Vec<u64> = st.keys[&spread].leases.iter().map(|l| l.id.seq).collect();
        assert_eq!(kept, vec![2, 3], "the busy and the just-idled lease stay");
        // A key with work of its own queued keeps its idle leases.
        st.keys
            .get_mut(&spread)
            .unwrap()
            .leases
            .push(lease(4, 0, Some(Duration::from_millis(20))));
        st.keys.get_mut(&spread).unwrap().queue.push_back(Queued {
            task: TaskId::new(WorkerId(1), 11),
            function: &QUEUED_FN,
            args: Vec::new(),
            keep: Vec::new(),
            attempt: 0,
            parent: None,
        });
        assert!(st.take_idle_leases_of_others(&default).is_empty());
    }

    fn buf(len: usize, fill: u8) -> ObjectBuffer {
        ObjectBuffer::copy_from_slice(&vec![fill; len])
    }

    #[test]
    fn the_fetch_cache_keeps_the_newest_objects_within_its_bytes_and_counts_every_fetch() {
        let id = |seq| ObjectId::new(WorkerId(9), seq);
        let mut cache = FetchCache::with_cap(100);
        cache.record(id(1), buf(40, 1));
        cache.record(id(2), buf(40, 2));
        assert_eq!(cache.get(id(1)).expect("kept").as_bytes(), &[1u8; 40][..]);
        // A third passes the cap: the oldest goes, the newest two stay.
        cache.record(id(3), buf(40, 3));
        assert!(cache.get(id(1)).is_none());
        assert!(cache.get(id(2)).is_some() && cache.get(id(3)).is_some());
        assert_eq!(cache.bytes, 80);
        // Larger than the whole cache: counted, not kept, nothing evicted.
        cache.record(id(4), buf(101, 4));
        assert!(cache.get(id(4)).is_none());
        assert_eq!(cache.bytes, 80);
        // The same object again replaces its copy without double counting.
        cache.record(id(3), buf(40, 3));
        assert_eq!((cache.bytes, cache.order.len()), (80, 2));
        assert_eq!((cache.fetches, cache.fetched_bytes), (5, 261));
    }
}
