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
use std::time::Duration;

use ray_proto::wire::{BuildFingerprint, Message};
use ray_proto::{JobId, NodeId};
use ray_sched::{Quantity, ResourceSet};

use super::{control_plane_fingerprint, GcsClient};
use ray_transport::{ClusterCredentials, Endpoint, EndpointConfig, Role};

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
        ]
    }

    fn from_env() -> Result<Self, String> {
        fn var(name: &str) -> Result<String, String> {
            std::env::var(name).map_err(|_| format!("{name} is not set"))
        }
        fn parse<T: std::str::FromStr>(name: &str) -> Result<T, String> {
            var(name)?
                .parse()
                .map_err(|_| format!("{name} is malformed"))
        }
        let mut resources = ResourceSet::new();
        for part in var(VAR_RESOURCES)?.split(',').filter(|p| !p.is_empty()) {
            let (name, raw) = part
                .split_once('=')
                .ok_or_else(|| format!("{VAR_RESOURCES} is malformed"))?;
            let raw: u64 = raw
                .parse()
                .map_err(|_| format!("{VAR_RESOURCES} is malformed"))?;
            resources.set(name, Quantity::from_raw(raw));
        }
        let hash_hex = var(VAR_HASH)?;
        let mut binary_hash = [0u8; 32];
        if hash_hex.len() != 64 {
            return Err(format!("{VAR_HASH} is malformed"));
        }
        for (i, b) in binary_hash.iter_mut().enumerate() {
            *b = u8::from_str_radix(&hash_hex[2 * i..2 * i + 2], 16)
                .map_err(|_| format!("{VAR_HASH} is malformed"))?;
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
            if let Err(msg) = result {
                eprintln!("ray-rs daemon {}: {msg}", std::process::id());
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

fn run_worker() -> Result<(), String> {
    let env = WorkerEnv::from_env()?;
    crate::runtime::tune_allocator();
    // One I/O thread: with two, the QUIC tasks of one round trip hop
    // between them, a wake-up each (measured: see
    // docs/perf-log/2026-11-figures-from-code-comments.md).
    let tokio = crate::runtime::io_runtime(1).map_err(|e| format!("cannot start tokio: {e}"))?;
    tokio.handle().block_on(serve(env))
}

async fn serve(env: WorkerEnv) -> Result<(), String> {
    let creds = ClusterCredentials::load(&env.credentials).map_err(|e| e.to_string())?;
    let mut config = EndpointConfig::new(Role::Worker, control_plane_fingerprint());
    config.node = Some(env.node_id);
    let endpoint = Endpoint::bind(SocketAddr::new(env.bind_ip, 0), &creds, config)
        .map_err(|e| e.to_string())?;
    let my_addr = endpoint.local_addr().map_err(|e| e.to_string())?;
    let gcs = GcsClient::connect(&endpoint, env.gcs, Duration::from_secs(10))
        .await
        .map_err(|e| e.to_string())?;
    let (worker, insight) = gcs
        .register_worker(env.job, env.node_id, my_addr.to_string())
        .await
        .map_err(|e| e.to_string())?;
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
        insight,
    })
    .map_err(|e| e.to_string())?;
    let reply = core
        .ask(
            env.node,
            Message::WorkerReady {
                job: env.job,
                worker,
                address: my_addr.to_string(),
                fingerprint: job_fingerprint(),
                pid: std::process::id(),
            },
        )
        .await
        .map_err(|e| e.to_string())?;
    match reply {
        Message::Ok => {}
        Message::Refused { reason } | Message::Error { reason } => {
            return Err(format!("refused by its node: {reason}"))
        }
        other => return Err(format!("unexpected answer from its node: {other:?}")),
    }
    // Serve until the node daemon goes away, or ends the job (SIGTERM).
    let conn = core
        .connections()
        .get(env.node)
        .await
        .map_err(|e| e.to_string())?;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| format!("cannot handle SIGTERM: {e}"))?;
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
