//! The serving half of a node daemon: leases, worker processes and gossip.
//!
//! Owners ask the daemon of their own node for a lease of some resources
//! ([`RequestLease`](ray_proto::wire::RequestLease)). The daemon's ray-sched [`NodeScheduler`]
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
//! with their daemon (`PR_SET_PDEATHSIG`) and when their job ends. A
//! running job's worker is started as soon as the node hears of the job
//! (prestarted, as Ray does for a driver), so a lease spilled here does not
//! wait for a binary to download and a process to boot.
//!
//! Gossip: every heartbeat carries this node's load to the GCS, and the
//! node table that comes back feeds the scheduler's view of the others.
//! The heartbeat that keeps the node alive runs on a thread of its own
//! (`pulse.rs`), so a busy daemon is never taken for a dead one.

mod binaries;
mod gossip;
mod leases;
mod pulse;
mod workers;

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

use hashbrown::HashMap;
use parking_lot::Mutex;
use ray_proto::wire::Message;
use ray_proto::{JobId, NodeId, TaskId};
use ray_sched::{ClusterView, NodeScheduler, ResourceSet};
use tokio::sync::oneshot;

use super::NodeDaemon;
use leases::Pending;
use ray_transport::{Connections, Endpoint, Envelope, IncomingRequest};
use workers::JobWorker;

/// Where a node daemon keeps things and how its workers find the cluster.
#[derive(Debug, Clone)]
pub struct NodeServiceConfig {
    /// Directory holding the cluster credentials workers load.
    pub credentials_dir: PathBuf,
    /// Directory job binaries are cached in.
    pub cache_dir: PathBuf,
    /// The IP workers bind to.
    pub bind_ip: IpAddr,
    /// What the node's workers and binary cache may use.
    pub limits: crate::cluster::NodeLimits,
    /// Makes the node scheduler's policies.
    pub policies: crate::cluster::PolicyFactory,
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
    /// Leases granted here: their job and owner.
    lease_jobs: Mutex<HashMap<TaskId, leases::Holder>>,
    /// Leases held by detached actors: they outlive their job.
    detached: Mutex<hashbrown::HashSet<TaskId>>,
    jobs: Mutex<HashMap<JobId, Arc<JobWorker>>>,
    /// Worker processes of isolated leases, one each, by lease.
    isolated: Mutex<HashMap<TaskId, (JobId, Arc<JobWorker>)>>,
    /// Jobs seen ending: no worker is prestarted for them.
    ended: Mutex<hashbrown::HashSet<JobId>>,
    /// Jobs whose worker was prestarted here (once each).
    prestarted: Mutex<hashbrown::HashSet<JobId>>,
    /// One fetch of each binary at a time (the others wait and find it
    /// cached).
    fetches: Mutex<HashMap<[u8; 32], Arc<tokio::sync::Mutex<()>>>>,
    node_addrs: Mutex<HashMap<NodeId, SocketAddr>>,
    /// Why the heartbeat thread stopped, once it has: taken by
    /// [`NodeService::run`], woken by `pulse_stopped`.
    pulse: Mutex<Option<super::ClusterError>>,
    pulse_stopped: tokio::sync::Notify,
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
        let policies = (config.policies)(seed);
        let inner = Arc::new(Inner {
            node,
            gcs_addr: daemon.client().addr(),
            daemon,
            conns: Connections::new(endpoint.clone()),
            endpoint,
            config,
            total,
            sched: Mutex::new(NodeScheduler::new(node, view, policies)),
            replies: Mutex::new(HashMap::new()),
            lease_jobs: Mutex::new(HashMap::new()),
            detached: Mutex::new(hashbrown::HashSet::new()),
            jobs: Mutex::new(HashMap::new()),
            isolated: Mutex::new(HashMap::new()),
            ended: Mutex::new(hashbrown::HashSet::new()),
            prestarted: Mutex::new(hashbrown::HashSet::new()),
            fetches: Mutex::new(HashMap::new()),
            node_addrs: Mutex::new(HashMap::new()),
            pulse: Mutex::new(None),
            pulse_stopped: tokio::sync::Notify::new(),
        });
        pulse::start(&inner);
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
        let reply = match env.body {
            Message::Node(request) => self.handle(request).await,
            Message::Ping { seq } => Message::Pong { seq },
            other => Message::Error {
                reason: format!("a node daemon does not serve {}", other.kind()),
            },
        };
        let _ = req.respond(&Envelope::new(reply)).await;
    }
}
