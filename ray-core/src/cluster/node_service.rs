//! The serving half of a node daemon: leases, worker processes and gossip.
//!
//! Owners ask the daemon of their own node for a lease of some resources
//! ([`Message::RequestLease`]). The daemon's ray-sched [`NodeScheduler`]
//! decides bottom-up: run here (the lease is granted, naming this node's
//! worker process of the job, started on first use), spill to another node
//! (the request is forwarded there; a stale view gets refused with the
//! target's fresh load and is placed again), wait for resources, or
//! infeasible. A lease holds its resources until the owner returns it.
//!
//! Workers run the job's own executable: the daemon fetches it from the GCS
//! once (by content hash), caches it in its directory and starts it with
//! an environment that makes the ray-rs runtime serve instead of running
//! `main` (see [`super::worker`]). A worker reports in with its build
//! fingerprint and is refused if it differs from the job's. Workers die
//! with their daemon (`PR_SET_PDEATHSIG`) and when their job ends.
//!
//! Gossip: every heartbeat carries this node's load to the GCS, and the
//! node table that comes back feeds the scheduler's view of the others.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use hashbrown::HashMap;
use parking_lot::Mutex;
use ray_proto::wire::{BuildFingerprint, Message, WireChannel, WireEvent, WireNodeUpdate};
use ray_proto::{JobId, NodeId, TaskId, WorkerId};
use ray_sched::{Action, ClusterView, NodeScheduler, NodeUpdate, Policies, ResourceSet, Task};
use tokio::sync::oneshot;

use super::core::{strategy_from_wire, strategy_to_wire};
use super::worker::{WorkerEnv, WorkerStartError};
use super::{resources_from_wire, resources_to_wire, ClusterError, NodeDaemon};
use ray_transport::{Connections, Endpoint, Envelope, IncomingRequest};

/// How long a started worker has to report in.
const WORKER_START_TIMEOUT: Duration = Duration::from_secs(60);

/// Where a node daemon keeps things and how its workers find the cluster.
#[derive(Debug, Clone)]
pub struct NodeServiceConfig {
    /// Directory holding the cluster credentials workers load.
    pub credentials_dir: PathBuf,
    /// Directory job binaries are cached in.
    pub cache_dir: PathBuf,
    /// The IP workers bind to.
    pub bind_ip: IpAddr,
}

/// A lease request waiting in the scheduler.
struct Pending {
    job: JobId,
    binary_hash: [u8; 32],
    fingerprint: BuildFingerprint,
}

/// A started worker's id and address, or why it did not start.
type Started = Result<(WorkerId, String), WorkerStartError>;

/// The worker process of one job on this node.
#[derive(Default)]
struct JobWorker {
    started: tokio::sync::OnceCell<Started>,
    ready: Mutex<Option<oneshot::Sender<Started>>>,
    expected: Mutex<Option<BuildFingerprint>>,
    pid: Mutex<Option<u32>>,
    /// Tells the worker's waiter to stop it (SIGTERM, then SIGKILL).
    stop: Mutex<Option<oneshot::Sender<()>>>,
}

impl JobWorker {
    /// Stops the worker process, if it was started: see [`STOP_GRACE`].
    fn stop(&self) {
        if let Some(stop) = self.stop.lock().take() {
            let _ = stop.send(());
        }
    }
}

struct Inner {
    node: NodeId,
    daemon: NodeDaemon,
    gcs_addr: SocketAddr,
    endpoint: Endpoint,
    conns: Connections,
    config: NodeServiceConfig,
    total: ResourceSet,
    sched: Mutex<NodeScheduler<Pending>>,
    replies: Mutex<HashMap<TaskId, oneshot::Sender<Message>>>,
    lease_jobs: Mutex<HashMap<TaskId, JobId>>,
    /// Leases held by detached actors: they outlive their job.
    detached: Mutex<hashbrown::HashSet<TaskId>>,
    jobs: Mutex<HashMap<JobId, Arc<JobWorker>>>,
    node_addrs: Mutex<HashMap<NodeId, SocketAddr>>,
}

/// A node daemon serving leases; see the module docs.
#[derive(Clone)]
pub struct NodeService {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for NodeService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeService")
            .field("node", &self.inner.node)
            .finish_non_exhaustive()
    }
}

impl NodeService {
    /// Serves leases on `endpoint` (the one `daemon` registered the
    /// address of) for the node `daemon` registered with `total` resources.
    pub fn start(
        daemon: NodeDaemon,
        endpoint: Endpoint,
        total: ResourceSet,
        labels: BTreeMap<String, String>,
        config: NodeServiceConfig,
    ) -> Self {
        let node = daemon.node_id();
        let mut view = ClusterView::new();
        view.add_node(node, total.clone(), labels);
        let seed = node.0 ^ 0x5eed_0000;
        let inner = Arc::new(Inner {
            node,
            gcs_addr: daemon.client().addr(),
            daemon,
            conns: Connections::new(endpoint.clone()),
            endpoint,
            config,
            total,
            sched: Mutex::new(NodeScheduler::new(node, view, Policies::standard(seed))),
            replies: Mutex::new(HashMap::new()),
            lease_jobs: Mutex::new(HashMap::new()),
            detached: Mutex::new(hashbrown::HashSet::new()),
            jobs: Mutex::new(HashMap::new()),
            node_addrs: Mutex::new(HashMap::new()),
        });
        let me = Self { inner };
        let accept = me.clone();
        tokio::spawn(async move { accept.accept_loop().await });
        let follow = me.clone();
        tokio::spawn(async move { follow.follow_events().await });
        me
    }

    /// This node's id.
    pub fn node_id(&self) -> NodeId {
        self.inner.node
    }

    /// Follows node and job changes published by the GCS, so joins,
    /// deaths and job ends reach the scheduler at once (the heartbeat
    /// loop's full refresh is the fallback). Runs until the node stops.
    async fn follow_events(self) {
        let client = self.inner.daemon.client().clone();
        loop {
            let sub = match client
                .subscribe(vec![WireChannel::Node, WireChannel::Job])
                .await
            {
                Ok(sub) => sub,
                Err(_) => {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            };
            let mut seen_dropped = 0;
            loop {
                match client.poll_events(sub, Duration::from_secs(1)).await {
                    Ok((events, dropped)) => {
                        if dropped > seen_dropped {
                            // Lost some: the tables themselves are the truth.
                            seen_dropped = dropped;
                            if let Ok(nodes) = client.nodes().await {
                                self.apply_nodes(nodes);
                            }
                        }
                        let mut nodes = Vec::new();
                        for e in events {
                            match e {
                                WireEvent::Node(n) => nodes.push(n),
                                WireEvent::Job(j) if !j.running => self.end_job(j.id),
                                _ => {}
                            }
                        }
                        if !nodes.is_empty() {
                            self.apply_nodes(nodes);
                        }
                    }
                    Err(ClusterError::Timeout { .. }) => {}
                    Err(_) => break,
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Heartbeats (carrying this node's load) and refreshes the view of
    /// the other nodes and of running jobs, until that can no longer
    /// succeed; returns why. Cancel-safe.
    pub async fn run(&self) -> ClusterError {
        let inner = &self.inner;
        let client = inner.daemon.client().clone();
        let mut ticks = tokio::time::interval(inner.daemon.heartbeat_interval());
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut missed = 0;
        loop {
            ticks.tick().await;
            let update = inner.sched.lock().local_update();
            match client
                .heartbeat(inner.node, update.version, resources_to_wire(&update.used))
                .await
            {
                Ok(()) => missed = 0,
                Err(e @ ClusterError::Timeout { .. }) => {
                    missed += 1;
                    if missed >= 5 {
                        return e;
                    }
                    continue;
                }
                Err(e) => return e,
            }
            if let Ok(nodes) = client.nodes().await {
                self.apply_nodes(nodes);
            }
            if let Ok(jobs) = client.jobs().await {
                for j in jobs.into_iter().filter(|j| !j.running) {
                    self.end_job(j.id);
                }
            }
        }
    }

    fn apply_nodes(&self, nodes: Vec<ray_proto::wire::NodeEntry>) {
        let inner = &self.inner;
        {
            let mut sched = inner.sched.lock();
            let mut addrs = inner.node_addrs.lock();
            for n in nodes {
                if n.id == inner.node {
                    continue;
                }
                let known = sched.view().node(n.id).is_some();
                if !n.alive {
                    if known {
                        sched.node_removed(n.id);
                    }
                    addrs.remove(&n.id);
                    continue;
                }
                if let Ok(a) = n.address.parse() {
                    addrs.insert(n.id, a);
                }
                if !known {
                    let labels = n.labels.iter().map(|l| (l.key.clone(), l.value.clone()));
                    sched.node_added(n.id, resources_from_wire(&n.resources), labels.collect());
                }
                if n.version > 0 {
                    sched.apply_gossip(&NodeUpdate {
                        node: n.id,
                        version: n.version,
                        used: resources_from_wire(&n.used),
                    });
                }
            }
        }
        self.drain();
    }

    /// The job ended: its worker goes, and its leases with it.
    fn end_job(&self, job: JobId) {
        let inner = &self.inner;
        let keep = {
            let lj = inner.lease_jobs.lock();
            let detached = inner.detached.lock();
            lj.iter().any(|(l, j)| *j == job && detached.contains(l))
        };
        if keep {
            // Detached actors live in this worker: it stays, and so do
            // their leases; the job's other leases go.
            self.release_job_leases(job, false);
            return;
        }
        let Some(w) = inner.jobs.lock().remove(&job) else {
            return;
        };
        w.stop();
        self.release_job_leases(job, true);
    }

    /// Gives back the job's leases; those of detached actors too only
    /// when `all` (their worker is gone).
    fn release_job_leases(&self, job: JobId, all: bool) {
        let inner = &self.inner;
        let leases: Vec<TaskId> = {
            let mut lj = inner.lease_jobs.lock();
            let mut detached = inner.detached.lock();
            let ids: Vec<TaskId> = lj
                .iter()
                .filter(|(l, j)| **j == job && (all || !detached.contains(*l)))
                .map(|(l, _)| *l)
                .collect();
            for l in &ids {
                detached.remove(l);
            }
            for l in &ids {
                lj.remove(l);
            }
            ids
        };
        {
            let mut sched = inner.sched.lock();
            for l in leases {
                sched.finish(l);
            }
        }
        self.drain();
    }

    async fn accept_loop(self) {
        while let Ok(conn) = self.inner.endpoint.accept().await {
            let me = self.clone();
            tokio::spawn(async move {
                while let Ok(req) = conn.accept_request().await {
                    let me = me.clone();
                    tokio::spawn(async move { me.serve(req).await });
                }
            });
        }
    }

    async fn serve(self, mut req: IncomingRequest) {
        let Ok(env) = req.read().await else { return };
        let reply = self.handle(env.body).await;
        let _ = req.respond(&Envelope::new(reply)).await;
    }

    async fn handle(&self, msg: Message) -> Message {
        let inner = &self.inner;
        match msg {
            Message::RequestLease {
                lease,
                job,
                binary_hash,
                fingerprint,
                resources,
                strategy,
                spilled_from,
            } => {
                let (tx, rx) = oneshot::channel();
                inner.replies.lock().insert(lease, tx);
                let task = Task::new(
                    lease,
                    resources_from_wire(&resources),
                    strategy_from_wire(&strategy),
                    Pending {
                        job,
                        binary_hash,
                        fingerprint,
                    },
                );
                {
                    let mut sched = inner.sched.lock();
                    match spilled_from {
                        None => sched.submit(task),
                        Some(from) => sched.receive_spill(from, task),
                    }
                }
                self.drain();
                rx.await.unwrap_or(Message::Error {
                    reason: format!("{} dropped the lease request", inner.node),
                })
            }
            Message::ReturnLease { lease } => {
                inner.lease_jobs.lock().remove(&lease);
                inner.detached.lock().remove(&lease);
                let found = inner.sched.lock().finish(lease);
                self.drain();
                if found {
                    Message::Ok
                } else {
                    Message::Error {
                        reason: format!("{lease} is not a lease of {}", inner.node),
                    }
                }
            }
            Message::PrepareBundle {
                group,
                index,
                resources,
            } => {
                let ok = inner.sched.lock().prepare_bundle(
                    group,
                    index as usize,
                    resources_from_wire(&resources),
                );
                self.drain();
                if ok {
                    Message::Ok
                } else {
                    Message::Error {
                        reason: format!(
                            "bundle {index} of {group} does not fit {} now",
                            inner.node
                        ),
                    }
                }
            }
            Message::CommitBundle { group, index } => {
                let ok = inner.sched.lock().commit_bundle(group, index as usize);
                self.drain();
                if ok {
                    Message::Ok
                } else {
                    Message::Error {
                        reason: format!(
                            "bundle {index} of {group} is not prepared on {}",
                            inner.node
                        ),
                    }
                }
            }
            Message::ReleaseBundle { group, index } => {
                inner.sched.lock().release_bundle(group, index as usize);
                self.drain();
                Message::Ok
            }
            Message::BundlePlaced {
                group,
                index,
                node,
                resources,
            } => {
                inner.sched.lock().bundle_placed(
                    group,
                    index as usize,
                    node,
                    resources_from_wire(&resources),
                );
                self.drain();
                Message::Ok
            }
            Message::RemoveGroup { group } => {
                inner.sched.lock().placement_group_removed(group);
                self.drain();
                Message::Ok
            }
            Message::DetachLease { lease } => {
                if inner.lease_jobs.lock().contains_key(&lease) {
                    inner.detached.lock().insert(lease);
                    Message::Ok
                } else {
                    Message::Error {
                        reason: format!("{lease} is not a lease of {}", inner.node),
                    }
                }
            }
            Message::LeaseBlocked { lease, blocked } => {
                {
                    let mut sched = inner.sched.lock();
                    if blocked {
                        sched.block(lease);
                    } else {
                        sched.unblock(lease);
                    }
                }
                self.drain();
                Message::Ok
            }
            Message::WorkerReady {
                job,
                worker,
                address,
                fingerprint,
                pid,
            } => {
                let w = inner.jobs.lock().get(&job).cloned();
                let Some(w) = w else {
                    return Message::Refused {
                        reason: format!("{} runs no worker of {job}", inner.node),
                    };
                };
                let expected = *w.expected.lock();
                let tx = w.ready.lock().take();
                if expected != Some(fingerprint) {
                    let err = WorkerStartError::OtherBuild {
                        worker,
                        pid,
                        built: fingerprint,
                        job,
                        expected,
                    };
                    let reason = err.to_string();
                    if let Some(tx) = tx {
                        let _ = tx.send(Err(err));
                    }
                    return Message::Refused { reason };
                }
                match tx {
                    Some(tx) => {
                        let _ = tx.send(Ok((worker, address)));
                        Message::Ok
                    }
                    None => Message::Refused {
                        reason: format!("{job} already has a worker on {}", inner.node),
                    },
                }
            }
            Message::Ping { seq } => Message::Pong { seq },
            other => Message::Error {
                reason: format!(
                    "a node daemon does not serve {}",
                    super::message_kind(&other)
                ),
            },
        }
    }

    /// Carries out what the scheduler decided.
    fn drain(&self) {
        loop {
            let action = self.inner.sched.lock().poll_action();
            let Some(action) = action else { return };
            match action {
                Action::Run(task) => self.grant(task),
                Action::Spill { to, task } => {
                    let me = self.clone();
                    tokio::spawn(async move { me.forward(to, task).await });
                }
                Action::Refuse { task, update, .. } => {
                    self.reply(
                        task.id,
                        Message::LeaseRefused {
                            update: WireNodeUpdate {
                                node: update.node,
                                version: update.version,
                                used: resources_to_wire(&update.used),
                            },
                        },
                    );
                }
                Action::Infeasible { task, report } => {
                    // A node may have joined since the last gossip: look
                    // again (the scheduler re-places kept work on a join),
                    // and answer infeasible only if it still is.
                    let me = self.clone();
                    tokio::spawn(async move {
                        if let Ok(nodes) = me.inner.daemon.client().nodes().await {
                            me.apply_nodes(nodes);
                        }
                        me.reply(
                            task,
                            Message::LeaseInfeasible {
                                reason: report.reason,
                            },
                        );
                    });
                }
                Action::Failed { task, reason } => {
                    self.reply(
                        task.id,
                        Message::Error {
                            reason: format!("{reason:?}"),
                        },
                    );
                }
            }
        }
    }

    fn reply(&self, lease: TaskId, msg: Message) -> bool {
        match self.inner.replies.lock().remove(&lease) {
            Some(tx) => tx.send(msg).is_ok(),
            None => false,
        }
    }

    /// The scheduler placed a lease here: start (or reuse) the job's worker.
    fn grant(&self, task: Task<Pending>) {
        let inner = &self.inner;
        if !inner.replies.lock().contains_key(&task.id) {
            // Its owner was told it is infeasible, or gave up: nobody holds it.
            inner.sched.lock().finish(task.id);
            return self.drain();
        }
        inner.lease_jobs.lock().insert(task.id, task.item.job);
        let me = self.clone();
        tokio::spawn(async move {
            let p = &task.item;
            match me.worker_for(p.job, p.binary_hash, p.fingerprint).await {
                Ok((worker, address)) => {
                    let granted = Message::LeaseGranted {
                        lease: task.id,
                        node: me.inner.node,
                        worker,
                        address,
                    };
                    if !me.reply(task.id, granted) {
                        me.inner.lease_jobs.lock().remove(&task.id);
                        me.inner.sched.lock().finish(task.id);
                        me.drain();
                    }
                }
                Err(e) => {
                    me.inner.lease_jobs.lock().remove(&task.id);
                    me.inner.sched.lock().finish(task.id);
                    me.drain();
                    let reason = e.to_string();
                    me.reply(task.id, Message::Error { reason });
                }
            }
        });
    }

    async fn forward(&self, to: NodeId, task: Task<Pending>) {
        let inner = &self.inner;
        let addr = inner.node_addrs.lock().get(&to).copied();
        let reply = match addr {
            Some(addr) => match inner.conns.get(addr).await {
                Ok(conn) => {
                    let p = &task.item;
                    let request = Message::RequestLease {
                        lease: task.id,
                        job: p.job,
                        binary_hash: p.binary_hash,
                        fingerprint: p.fingerprint,
                        resources: resources_to_wire(&task.resources),
                        strategy: strategy_to_wire(&task.strategy),
                        spilled_from: Some(inner.node),
                    };
                    conn.request(&Envelope::new(request)).await.ok()
                }
                Err(_) => None,
            },
            None => None,
        };
        match reply.map(|e| e.body) {
            Some(granted @ Message::LeaseGranted { .. }) => {
                self.reply(task.id, granted);
            }
            Some(Message::LeaseRefused { update }) => {
                let update = NodeUpdate {
                    node: update.node,
                    version: update.version,
                    used: resources_from_wire(&update.used),
                };
                inner.sched.lock().on_refused(to, task, &update);
                self.drain();
            }
            Some(other @ (Message::LeaseInfeasible { .. } | Message::Error { .. })) => {
                self.reply(task.id, other);
            }
            _ => {
                inner.sched.lock().spill_failed(to, task);
                self.drain();
            }
        }
    }

    /// The worker of `job` here, started on first use.
    async fn worker_for(
        &self,
        job: JobId,
        binary_hash: [u8; 32],
        fingerprint: BuildFingerprint,
    ) -> Started {
        let w = self.inner.jobs.lock().entry(job).or_default().clone();
        w.started
            .get_or_init(|| self.start_worker(job, binary_hash, fingerprint, w.clone()))
            .await
            .clone()
    }

    async fn start_worker(
        &self,
        job: JobId,
        binary_hash: [u8; 32],
        fingerprint: BuildFingerprint,
        w: Arc<JobWorker>,
    ) -> Started {
        let inner = &self.inner;
        let path = self.cached_binary(binary_hash).await?;
        let (tx, rx) = oneshot::channel();
        *w.ready.lock() = Some(tx);
        *w.expected.lock() = Some(fingerprint);
        let node_addr = inner
            .endpoint
            .local_addr()
            .map_err(|e| WorkerStartError::NodeAddress(Arc::new(e)))?;
        let node_addr = if node_addr.ip().is_unspecified() {
            SocketAddr::new(inner.config.bind_ip, node_addr.port())
        } else {
            node_addr
        };
        let env = WorkerEnv {
            gcs: inner.gcs_addr,
            node: node_addr,
            node_id: inner.node,
            job,
            credentials: inner.config.credentials_dir.clone(),
            resources: inner.total.clone(),
            binary_hash,
            bind_ip: inner.config.bind_ip,
        };
        let mut cmd = tokio::process::Command::new(&path);
        for (k, _) in std::env::vars_os() {
            // A worker is not a daemon, whatever started its daemon.
            if k.to_string_lossy().starts_with("RAYRS_DAEMON") {
                cmd.env_remove(k);
            }
        }
        cmd.envs(env.to_vars())
            .stdin(std::process::Stdio::null())
            .kill_on_drop(false);
        super::local::die_with_parent(cmd.as_std_mut());
        let mut child = cmd.spawn().map_err(|e| WorkerStartError::Spawn {
            path: path.clone(),
            source: Arc::new(e),
        })?;
        let pid = child.id().unwrap_or(0);
        *w.pid.lock() = Some(pid);
        tracing::info!(target: "ray::node", node = %inner.node, job = %job, pid, "worker.started");
        let me = self.clone();
        let watched = w.clone();
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        *w.stop.lock() = Some(stop_tx);
        tokio::spawn(async move {
            let status = tokio::select! {
                status = child.wait() => status,
                Ok(()) = stop_rx => {
                    // Not reaped yet, so the pid is still this worker's.
                    if let Some(pid) = child.id() {
                        let _ = std::process::Command::new("kill")
                            .args(["-TERM", &pid.to_string()])
                            .stderr(std::process::Stdio::null())
                            .status();
                    }
                    match tokio::time::timeout(STOP_GRACE, child.wait()).await {
                        Ok(status) => status,
                        Err(_) => {
                            let _ = child.start_kill();
                            child.wait().await
                        }
                    }
                }
            };
            tracing::info!(target: "ray::node", job = %job, pid, ?status, "worker.exited");
            let current = me.inner.jobs.lock().get(&job).cloned();
            if current.is_some_and(|c| Arc::ptr_eq(&c, &watched)) {
                me.inner.jobs.lock().remove(&job);
            }
            if let Some(tx) = watched.ready.lock().take() {
                let status = status.map_err(Arc::new);
                let _ = tx.send(Err(WorkerStartError::Exited { job, pid, status }));
            }
            me.release_job_leases(job, true);
        });
        match tokio::time::timeout(WORKER_START_TIMEOUT, rx).await {
            Ok(Ok(r)) => r,
            Ok(Err(_)) => Err(WorkerStartError::WentAway { job }),
            Err(_) => {
                w.stop();
                Err(WorkerStartError::Timeout {
                    job,
                    after: WORKER_START_TIMEOUT,
                })
            }
        }
    }

    /// The job binary with this hash, fetched from the GCS once.
    async fn cached_binary(&self, hash: [u8; 32]) -> Result<PathBuf, WorkerStartError> {
        let dir = &self.inner.config.cache_dir;
        let path = dir.join(crate::cluster::hex(&hash));
        if path.exists() {
            return Ok(path);
        }
        std::fs::create_dir_all(dir).map_err(|e| WorkerStartError::CacheDir {
            dir: dir.clone(),
            source: Arc::new(e),
        })?;
        let bytes = self
            .inner
            .daemon
            .client()
            .fetch_binary(hash)
            .await
            .map_err(|e| WorkerStartError::Fetch {
                hash,
                source: Arc::new(e),
            })?;
        let tmp = dir.join(format!(
            "{}.{}.tmp",
            crate::cluster::hex(&hash),
            std::process::id()
        ));
        std::fs::write(&tmp, bytes.as_slice()).map_err(|e| WorkerStartError::Write {
            path: tmp.clone(),
            source: Arc::new(e),
        })?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).map_err(
                |e| WorkerStartError::MakeExecutable {
                    path: tmp.clone(),
                    source: Arc::new(e),
                },
            )?;
        }
        std::fs::rename(&tmp, &path).map_err(|e| WorkerStartError::MoveIntoPlace {
            path: path.clone(),
            source: Arc::new(e),
        })?;
        Ok(path)
    }
}

/// How long a worker told to stop (SIGTERM) has before SIGKILL: it ships
/// its last insight records meanwhile.
const STOP_GRACE: Duration = Duration::from_secs(2);
