//! Worker processes: how a job's own executable becomes a worker.
//!
//! A node daemon starts the job binary with `RAYRS_WORKER_*` variables set.
//! A constructor registered in `.init_array` (it runs before `main`, in
//! every binary linking ray-core: examples, integration tests, user
//! programs alike) sees them and runs the worker instead of `main`: it
//! binds an endpoint, registers with the GCS, builds a runtime sized by
//! the node's resources, reports to its daemon with this build's
//! fingerprint, serves pushed work, and exits when its daemon goes away.
//! The registry it serves from is link-section data (linkme), complete
//! before any constructor runs.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ray_proto::wire::{BuildFingerprint, Done, Message, WorkerReady};
use ray_proto::{JobId, NodeId, TaskId, WorkerId};
use ray_sched::{Quantity, ResourceSet};

use super::{control_plane_fingerprint, ClusterError, GcsClient, StartError};
use crate::error::Error;
use ray_transport::{ClusterCredentials, Endpoint, EndpointConfig, Role, TransportError};

/// How long a worker that is told to stop spends shipping its last insight
/// records (its node's grace period is longer).
const LAST_SHIP: Duration = Duration::from_secs(1);

const VAR_JOB: &str = "RAYRS_WORKER_JOB";
const VAR_GCS: &str = "RAYRS_WORKER_GCS";
const VAR_NODE: &str = "RAYRS_WORKER_NODE";
const VAR_NODE_ID: &str = "RAYRS_WORKER_NODE_ID";
const VAR_CREDENTIALS: &str = "RAYRS_WORKER_CREDENTIALS";
const VAR_RESOURCES: &str = "RAYRS_WORKER_RESOURCES";
const VAR_HASH: &str = "RAYRS_WORKER_BINARY";
const VAR_BIND: &str = "RAYRS_WORKER_BIND";
/// The object store size of the worker, in bytes (empty: the default).
const VAR_STORE: &str = "RAYRS_WORKER_OBJECT_STORE_BYTES";
/// The isolated lease a worker was started for (`owner:seq`, hex), if any.
const VAR_LEASE: &str = "RAYRS_WORKER_LEASE";

/// Why a process that ray-core runs in place of `main` — a job's worker,
/// or a daemon of [`Cluster::local`](super::Cluster::local) — stopped with
/// an error (printed on its stderr).
#[derive(Debug, thiserror::Error)]
pub(crate) enum ProcessError {
    /// An environment variable its starter sets is missing.
    #[error("{0} is not set")]
    Unset(&'static str),
    /// An environment variable its starter sets does not parse.
    #[error("{0} is malformed")]
    Malformed(&'static str),
    /// The daemon's CPU count is not a quantity.
    #[error("{}: {source}", super::local::VAR_CPUS)]
    Cpus {
        /// Why it is not.
        source: ray_sched::SchedError,
    },
    /// Its tokio runtime did not start.
    #[error("cannot start tokio: {0}")]
    Tokio(#[source] std::io::Error),
    /// Credentials, the endpoint or a connection failed.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// The OS could not say which address the endpoint got.
    #[error(transparent)]
    LocalAddress(std::io::Error),
    /// The GCS could not be reached, refused, or declared the node dead.
    #[error(transparent)]
    Gcs(#[from] ClusterError),
    /// The worker's runtime failed.
    #[error(transparent)]
    Runtime(#[from] Error),
    /// The head or node did not start.
    #[error(transparent)]
    Start(#[from] StartError),
    /// The worker's node daemon refused it (a job binary of another build).
    #[error("refused by its node: {reason}")]
    Refused {
        /// The node's reason.
        reason: String,
    },
    /// The worker's node daemon answered something else than a verdict.
    #[error("unexpected answer from its node: {0:?}")]
    Unexpected(Box<Message>),
    /// SIGTERM could not be watched for.
    #[error("cannot handle SIGTERM: {0}")]
    Signal(#[source] std::io::Error),
}

/// Why a node daemon has no worker for a job: it could not start one, or
/// the one it started is gone or of another build. `Clone`, as every lease
/// waiting on the worker gets the same answer (I/O and GCS errors shared).
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum WorkerStartError {
    /// The job binary's cache directory could not be made.
    #[error("cannot create {}: {source}", dir.display())]
    CacheDir {
        /// The directory.
        dir: PathBuf,
        /// What the OS said.
        source: Arc<std::io::Error>,
    },
    /// The GCS did not hand out the job binary.
    #[error("cannot fetch job binary {}: {source}", super::hex(hash))]
    Fetch {
        /// The binary's SHA-256.
        hash: [u8; 32],
        /// What the GCS client said.
        source: Arc<ClusterError>,
    },
    /// The job binary could not be written to a temporary file.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// The temporary file.
        path: PathBuf,
        /// What the OS said.
        source: Arc<std::io::Error>,
    },
    /// The job binary could not be made executable.
    #[error("cannot make {} executable: {source}", path.display())]
    MakeExecutable {
        /// The temporary file.
        path: PathBuf,
        /// What the OS said.
        source: Arc<std::io::Error>,
    },
    /// The job binary could not be renamed to its place in the cache.
    #[error("cannot move {} into place: {source}", path.display())]
    MoveIntoPlace {
        /// Its place in the cache.
        path: PathBuf,
        /// What the OS said.
        source: Arc<std::io::Error>,
    },
    /// The OS could not say which address the node's endpoint has.
    /// The binary cache's file task (on a blocking thread) failed.
    #[error("the binary cache's file task failed: {0}")]
    FileTask(#[source] Arc<tokio::task::JoinError>),
    #[error("cannot read the node address: {0}")]
    NodeAddress(#[source] Arc<std::io::Error>),
    /// The worker process did not start.
    #[error("cannot start worker {}: {source}", path.display())]
    Spawn {
        /// The job binary.
        path: PathBuf,
        /// What the OS said.
        source: Arc<std::io::Error>,
    },
    /// The worker exited before it reported in.
    #[error("worker of {job} (pid {pid}) exited: {status:?}")]
    Exited {
        /// The job.
        job: JobId,
        /// The worker's process id.
        pid: u32,
        /// How it ended, as the OS told.
        status: Result<std::process::ExitStatus, Arc<std::io::Error>>,
    },
    /// The worker's waiter is gone (the node is stopping).
    #[error("worker of {job} went away before reporting in")]
    WentAway {
        /// The job.
        job: JobId,
    },
    /// The worker did not report in within the start timeout.
    #[error("worker of {job} did not report in within {after:?}")]
    Timeout {
        /// The job.
        job: JobId,
        /// How long the node waited.
        after: Duration,
    },
    /// The worker reported in with another build's fingerprint than the
    /// job's (the driver and the job binary differ).
    #[error(
        "worker {worker} (pid {pid}) was built as {built}, but {job} was built as {}",
        expected.map_or("unknown".to_string(), |f| f.to_string())
    )]
    OtherBuild {
        /// The worker.
        worker: WorkerId,
        /// Its process id.
        pid: u32,
        /// Its fingerprint.
        built: BuildFingerprint,
        /// The job.
        job: JobId,
        /// The job's fingerprint, if the node knew it.
        expected: Option<BuildFingerprint>,
    },
}

/// What a worker process is told by its node daemon.
#[derive(Debug, Clone)]
pub(crate) struct WorkerEnv {
    pub(crate) gcs: SocketAddr,
    pub(crate) node: SocketAddr,
    pub(crate) node_id: NodeId,
    pub(crate) job: JobId,
    pub(crate) credentials: PathBuf,
    pub(crate) resources: ResourceSet,
    pub(crate) binary_hash: [u8; 32],
    pub(crate) bind_ip: IpAddr,
    /// The object store size of the node's workers (`None`: the default).
    pub(crate) object_store_bytes: Option<u64>,
    /// The isolated lease this worker serves alone; `None` for the job's
    /// shared worker.
    pub(crate) lease: Option<TaskId>,
}

impl WorkerEnv {
    /// The environment variables that carry `self`.
    pub(crate) fn to_vars(&self) -> Vec<(&'static str, String)> {
        let resources: Vec<String> = self
            .resources
            .iter()
            .map(|(n, q)| format!("{n}={}", q.raw()))
            .collect();
        vec![
            (VAR_JOB, self.job.0.to_string()),
            (VAR_GCS, self.gcs.to_string()),
            (VAR_NODE, self.node.to_string()),
            (VAR_NODE_ID, self.node_id.0.to_string()),
            (VAR_CREDENTIALS, self.credentials.display().to_string()),
            (VAR_RESOURCES, resources.join(",")),
            (VAR_HASH, crate::cluster::hex(&self.binary_hash)),
            (VAR_BIND, self.bind_ip.to_string()),
            (
                VAR_STORE,
                self.object_store_bytes
                    .map(|b| b.to_string())
                    .unwrap_or_default(),
            ),
            (
                VAR_LEASE,
                self.lease
                    .map(|l| format!("{:x}:{:x}", l.owner.0, l.seq))
                    .unwrap_or_default(),
            ),
        ]
    }

    fn from_env() -> Result<Self, ProcessError> {
        fn var(name: &'static str) -> Result<String, ProcessError> {
            std::env::var(name).map_err(|_| ProcessError::Unset(name))
        }
        fn parse<T: std::str::FromStr>(name: &'static str) -> Result<T, ProcessError> {
            var(name)?
                .parse()
                .map_err(|_| ProcessError::Malformed(name))
        }
        let mut resources = ResourceSet::new();
        for part in var(VAR_RESOURCES)?.split(',').filter(|p| !p.is_empty()) {
            let (name, raw) = part
                .split_once('=')
                .ok_or(ProcessError::Malformed(VAR_RESOURCES))?;
            let raw: u64 = raw
                .parse()
                .map_err(|_| ProcessError::Malformed(VAR_RESOURCES))?;
            resources.set(name, Quantity::from_raw(raw));
        }
        let hash_hex = var(VAR_HASH)?;
        let mut binary_hash = [0u8; 32];
        if hash_hex.len() != 64 {
            return Err(ProcessError::Malformed(VAR_HASH));
        }
        for (i, b) in binary_hash.iter_mut().enumerate() {
            *b = u8::from_str_radix(&hash_hex[2 * i..2 * i + 2], 16)
                .map_err(|_| ProcessError::Malformed(VAR_HASH))?;
        }
        Ok(Self {
            gcs: parse(VAR_GCS)?,
            node: parse(VAR_NODE)?,
            node_id: NodeId(parse(VAR_NODE_ID)?),
            job: JobId(parse(VAR_JOB)?),
            credentials: PathBuf::from(var(VAR_CREDENTIALS)?),
            resources,
            binary_hash,
            bind_ip: parse(VAR_BIND)?,
            lease: match std::env::var(VAR_LEASE) {
                Ok(v) if !v.is_empty() => {
                    let bad = || ProcessError::Malformed(VAR_LEASE);
                    let (owner, seq) = v.split_once(':').ok_or_else(bad)?;
                    let owner = u64::from_str_radix(owner, 16).map_err(|_| bad())?;
                    let seq = u64::from_str_radix(seq, 16).map_err(|_| bad())?;
                    Some(TaskId::new(WorkerId(owner), seq))
                }
                _ => None,
            },
            object_store_bytes: match std::env::var(VAR_STORE) {
                Ok(v) if !v.is_empty() => {
                    Some(v.parse().map_err(|_| ProcessError::Malformed(VAR_STORE))?)
                }
                _ => None,
            },
        })
    }
}

/// The fingerprint of this build as a job: what its registry holds (every
/// remote function, class and method, by id and name) and the ray-rs
/// version. Two builds that agree on it run each other's tasks.
pub(crate) fn job_fingerprint() -> BuildFingerprint {
    let reg = crate::registry::registry();
    let mut text = format!("ray-rs {}\n", env!("CARGO_PKG_VERSION"));
    for f in reg.functions() {
        text.push_str(&format!("f {} {}\n", f.id.0, f.name));
    }
    for c in reg.actor_classes() {
        text.push_str(&format!("c {} {}\n", c.id.0, c.name));
        for m in reg.methods_of(c.id) {
            text.push_str(&format!("m {} {}\n", m.id.0, m.name));
        }
    }
    BuildFingerprint(super::binary_hash(text.as_bytes()))
}

/// Runs before `main` in every binary linking ray-core: becomes a worker
/// when a node daemon started this process as one.
extern "C" fn worker_entry() {
    if std::env::var_os(VAR_JOB).is_none() {
        if let Some(result) = super::local::daemon_from_env() {
            // A daemon only ever stops for a reason (the GCS declared its
            // node dead, or is gone): say it, and exit with a failure.
            if let Err(msg) = result {
                eprintln!("ray-rs daemon {}: {msg}", std::process::id());
                std::process::exit(1);
            }
            std::process::exit(0);
        }
        return;
    }
    let code = match run_worker() {
        Ok(()) => 0,
        Err(msg) => {
            eprintln!("ray-rs worker {}: {msg}", std::process::id());
            2
        }
    };
    std::process::exit(code);
}

// `.init_array` entries run before `main`; ray-core's own is the hook above.
#[used]
#[cfg_attr(target_os = "linux", link_section = ".init_array")]
#[cfg_attr(target_os = "macos", link_section = "__DATA,__mod_init_func")]
static WORKER_ENTRY: extern "C" fn() = worker_entry;

fn run_worker() -> Result<(), ProcessError> {
    let env = WorkerEnv::from_env()?;
    crate::runtime::tune_allocator();
    // One I/O thread: with two, the QUIC tasks of one round trip hop
    // between them, a wake-up each (measured: see
    // docs/perf-log/2026-11-figures-from-code-comments.md).
    let tokio = crate::runtime::io_runtime(1).map_err(ProcessError::Tokio)?;
    tokio.handle().block_on(serve(env))
}

async fn serve(env: WorkerEnv) -> Result<(), ProcessError> {
    let creds = ClusterCredentials::load(&env.credentials)?;
    let mut config = EndpointConfig::new(Role::Worker, control_plane_fingerprint());
    config.node = Some(env.node_id);
    let endpoint = Endpoint::bind(SocketAddr::new(env.bind_ip, 0), &creds, config)?;
    let my_addr = endpoint.local_addr().map_err(ProcessError::LocalAddress)?;
    let gcs = GcsClient::connect(&endpoint, env.gcs, Duration::from_secs(10)).await?;
    let (worker, job_config) = gcs
        .register_worker(env.job, env.node_id, my_addr.to_string())
        .await?;
    // The driver's settings, which every process of its job follows; the
    // store's size is the node's.
    let mut config = crate::Config {
        namespace: job_config.namespace,
        // A result larger than this goes back by reference: inline it
        // would travel in a work frame, capped by the transport.
        max_inline_bytes: usize::try_from(job_config.max_inline_bytes)
            .unwrap_or(usize::MAX)
            .min(crate::runtime::MAX_INLINE_MESSAGE_BYTES),
        put_timeout: Duration::from_millis(job_config.put_timeout_ms),
        ..crate::Config::default()
    };
    if let Some(bytes) = env.object_store_bytes {
        config.object_store_bytes = bytes;
    }
    let (ray, core) = super::join::start_cluster_process(super::join::ClusterProcess {
        endpoint,
        gcs,
        worker,
        node: env.node_id,
        job: env.job,
        binary_hash: env.binary_hash,
        local_node: env.node,
        my_addr,
        resources: env.resources.clone(),
        insight: job_config.insight,
        config,
    })?;
    if let Ok(nodes) = core.gcs.nodes().await {
        core.set_node_totals(&nodes);
    }
    let reply = core
        .ask(
            env.node,
            WorkerReady {
                job: env.job,
                worker,
                address: my_addr.to_string(),
                fingerprint: job_fingerprint(),
                pid: std::process::id(),
                lease: env.lease,
            },
        )
        .await?;
    match reply {
        Ok(Done) => {}
        Err(Message::Refused { reason } | Message::Error { reason }) => {
            return Err(ProcessError::Refused { reason })
        }
        Err(other) => return Err(ProcessError::Unexpected(Box::new(other))),
    }
    // Serve until the node daemon goes away, or ends the job (SIGTERM).
    let conn = core.connections().get(env.node).await?;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(ProcessError::Signal)?;
    let why = tokio::select! {
        why = conn.closed() => why.to_string(),
        _ = term.recv() => "its job ended (SIGTERM)".to_string(),
    };
    tracing::info!(target: "ray::worker", %why, "worker.exit");
    // The job's last records still reach the head (its node kills this
    // process for good after a grace period).
    if let Some(insight) = ray.insight() {
        let _ = tokio::time::timeout(LAST_SHIP, insight.flush()).await;
    }
    ray.shutdown();
    Ok(())
}
