//! Joining a cluster: the runtime of a cluster process (a driver or a
//! worker) with its [`ClusterCore`] installed as the runtime's
//! [`Remote`](crate::remote::Remote), and a driver's connection to the GCS
//! (credentials, job registration, the job binary upload).

use std::sync::Arc;
use std::time::Duration;

use ray_gcs::{Gcs, JobInfo, NodeInfo};
use ray_proto::{NodeId, WorkerId};
use ray_sched::{Quantity, ResourceSet, CPU};

use super::{ClusterCore, ClusterRemote};
use crate::error::{Error, Result};
use crate::ray::{insight_options, Config, Ray};
use crate::runtime::{Runtime, Settings};

/// What a cluster process (driver or worker) runs on.
pub(crate) struct ClusterProcess {
    pub(crate) endpoint: ray_transport::Endpoint,
    pub(crate) gcs: crate::cluster::GcsClient,
    pub(crate) worker: WorkerId,
    pub(crate) node: NodeId,
    pub(crate) job: ray_proto::JobId,
    pub(crate) binary_hash: [u8; 32],
    pub(crate) local_node: std::net::SocketAddr,
    pub(crate) my_addr: std::net::SocketAddr,
    /// What this process may run at once (a driver: nothing).
    pub(crate) resources: ResourceSet,
    /// Its job records for insight: ship records to the head.
    pub(crate) insight: bool,
    /// The settings the process runs with: a driver's own [`Config`]
    /// (store size, put timeout, inline limit, namespace), a worker's
    /// from its node and job.
    pub(crate) config: Config,
}

/// Builds the runtime of a cluster process and starts serving peers.
pub(crate) fn start_cluster_process(p: ClusterProcess) -> Result<(Ray, Arc<ClusterCore>)> {
    let handle = tokio::runtime::Handle::current();
    let config = p.config;
    let keep_threads = p.resources.get(CPU).ceil_units().max(1) as usize;
    let mut gcs = Gcs::in_memory();
    let _ = gcs.register_node(
        NodeInfo {
            id: p.node,
            address: p.local_node.to_string(),
            resources: p.resources.clone(),
            labels: Default::default(),
        },
        Duration::ZERO,
    );
    // The process's own table of its actors (the cluster's is the GCS's).
    let _ = gcs.add_job(JobInfo {
        id: p.job,
        driver: std::env::args().next().unwrap_or_default(),
        started_at: Duration::ZERO,
    });
    // No spinning in a cluster process. Its pool's work arrives through
    // its I/O thread, which a spinning pool thread would starve, and its
    // results come back over the network, a round trip far longer than a
    // get's spin (measured: see
    // docs/perf-log/2026-11-figures-from-code-comments.md).
    let (settings, store) = Settings::from_config(&config, Duration::ZERO, Duration::ZERO);
    if p.insight {
        let insight = crate::recording::install(&crate::insight::InsightOptions::default())?;
        crate::recording::ship_to_head(&insight, p.job, p.worker, p.gcs.clone(), &handle);
    }
    let core = crate::cluster::ClusterCore::new(
        handle.clone(),
        p.endpoint,
        p.gcs,
        crate::cluster::CoreConfig {
            job: p.job,
            binary_hash: p.binary_hash,
            fingerprint: crate::cluster::job_fingerprint(),
            local_node: p.local_node,
            my_addr: p.my_addr,
        },
    );
    let rt = Arc::new(Runtime::new(
        p.worker,
        p.node,
        p.job,
        p.resources,
        keep_threads,
        store,
        gcs,
        handle,
        settings,
    ));
    core.attach(&rt);
    let _ = rt.remote.set(Arc::new(ClusterRemote(core.clone())));
    let ray = Ray { rt };
    if p.insight {
        ray.start_sampling();
    }
    Ok((ray, core))
}

/// Joins the cluster at `address` as the driver of a new job.
pub(crate) async fn connect_driver(config: Config, address: String) -> Result<Ray> {
    check_driver_config(&config, &address)?;
    // A driver's cluster I/O runs on one thread of its own, not on the
    // caller's runtime: with two threads the QUIC tasks of one round trip
    // hop between them, a wake-up each (measured: see
    // docs/perf-log/2026-11-figures-from-code-comments.md).
    let io = crate::runtime::io_runtime(1)
        .map_err(|e| Error::InvalidArgument(format!("cannot start tokio: {e}")))?;
    let ray = io
        .handle()
        .spawn(connect_driver_on_io(config, address))
        .await
        .map_err(|e| Error::cluster_from(format!("connecting to the cluster stopped: {e}"), e))??;
    *ray.rt.owned_tokio.lock() = Some(io);
    Ok(ray)
}

/// Refuses the `Config` fields that describe a node, which a driver joining
/// a cluster does not offer (as Ray refuses `num_cpus` with an address):
/// the cluster's nodes offer resources and labels, set by `rayrs start`.
fn check_driver_config(config: &Config, address: &str) -> Result<()> {
    let node_fields = [
        ("num_cpus", config.num_cpus.is_some()),
        ("num_gpus", config.num_gpus.is_some()),
        ("memory_bytes", config.memory_bytes.is_some()),
        ("resources", !config.resources.is_empty()),
        ("labels", !config.labels.is_empty()),
    ];
    match node_fields.iter().find(|(_, set)| *set) {
        Some((field, _)) => Err(Error::InvalidArgument(format!(
            "Config::{field} does not apply when joining the cluster at {address}: its nodes \
             offer the resources and labels (rayrs start --num-cpus, --num-gpus, --memory, \
             --resources, --labels); leave it unset"
        ))),
        None => Ok(()),
    }
}

/// [`connect_driver`] on the driver's own I/O runtime.
async fn connect_driver_on_io(config: Config, address: String) -> Result<Ray> {
    use std::net::ToSocketAddrs;
    if config.tune_allocator {
        crate::runtime::tune_allocator();
    }
    let gcs_addr = address
        .to_socket_addrs()
        .map_err(|e| Error::cluster_from(format!("bad cluster address {address:?}: {e}"), e))?
        .next()
        .ok_or_else(|| {
            Error::cluster(format!("cluster address {address:?} resolves to nothing"))
        })?;
    let creds_dir = config
        .credentials
        .clone()
        .or_else(|| std::env::var_os("RAY_CREDENTIALS").map(Into::into))
        .unwrap_or_else(|| {
            std::env::var_os("RAYRS_DIR")
                .map(std::path::PathBuf::from)
                .unwrap_or_else(|| "/tmp/rayrs".into())
                .join("credentials")
        });
    let creds = ray_transport::ClusterCredentials::load(&creds_dir).map_err(|e| {
        Error::cluster_from(
            format!(
                "cannot load cluster credentials from {}: {e}",
                creds_dir.display()
            ),
            e,
        )
    })?;
    let ip: std::net::IpAddr = if gcs_addr.ip().is_loopback() {
        gcs_addr.ip()
    } else if gcs_addr.is_ipv4() {
        std::net::Ipv4Addr::UNSPECIFIED.into()
    } else {
        std::net::Ipv6Addr::UNSPECIFIED.into()
    };
    let endpoint = ray_transport::Endpoint::bind(
        std::net::SocketAddr::new(ip, 0),
        &creds,
        ray_transport::EndpointConfig::new(
            ray_proto::wire::Role::Driver,
            crate::cluster::control_plane_fingerprint(),
        ),
    )
    .map_err(Error::cluster_source)?;
    let gcs = crate::cluster::GcsClient::connect(&endpoint, gcs_addr, Duration::from_secs(10))
        .await
        .map_err(Error::cluster_source)?;
    let local = endpoint
        .local_addr()
        .map_err(|e| Error::cluster_from(format!("cannot read the driver address: {e}"), e))?;
    let my_addr = match gcs.connection().quic().local_ip() {
        Some(ip) if local.ip().is_unspecified() => std::net::SocketAddr::new(ip, local.port()),
        _ => local,
    };
    let exe = match config.executable.clone() {
        Some(exe) => exe,
        None => std::env::current_exe()
            .map_err(|e| Error::cluster_from(format!("cannot find this executable: {e}"), e))?,
    };
    let binary = tokio::task::spawn_blocking(move || std::fs::read(&exe).map(|b| (exe, b)))
        .await
        .map_err(Error::cluster_source)?
        .map_err(|e| Error::cluster_from(format!("cannot read this executable: {e}"), e))?;
    let (exe, bytes) = binary;
    let hash = crate::cluster::binary_hash(&bytes);
    let driver = exe.display().to_string();
    let insight = insight_options(&config.insight);
    if let Some(log) = insight.as_ref().and_then(|o| o.log.as_ref()) {
        // On a cluster the head keeps the job's log: say so rather than
        // leave the file unwritten without a word.
        eprintln!(
            "ray-rs insight: on a cluster the head keeps the job's event log \
             (<head dir>/insight/job-N.log, `rayrs insight export --dir`); {} is not written",
            log.display()
        );
    }
    let (job, worker, upload) = gcs
        .register_job(
            driver,
            my_addr.to_string(),
            hash,
            crate::cluster::job_fingerprint(),
            ray_proto::wire::JobConfig {
                insight: insight.is_some(),
                namespace: config.namespace.clone(),
                max_inline_bytes: config.max_inline_bytes as u64,
                put_timeout_ms: u64::try_from(config.put_timeout.as_millis()).unwrap_or(u64::MAX),
            },
        )
        .await
        .map_err(Error::cluster_source)?;
    if upload {
        gcs.upload_binary(hash, &bytes)
            .await
            .map_err(|e| Error::cluster_from(format!("cannot upload the job binary: {e}"), e))?;
    }
    drop(bytes);
    let nodes = gcs.nodes().await.map_err(Error::cluster_source)?;
    let mut alive: Vec<_> = nodes.iter().filter(|n| n.alive).cloned().collect();
    alive.sort_by_key(|n| {
        (
            n.address.parse::<std::net::SocketAddr>().map(|a| a.ip()) != Ok(my_addr.ip()),
            n.id,
        )
    });
    let local_node = alive
        .first()
        .ok_or_else(|| Error::cluster(format!("the cluster at {gcs_addr} has no live node")))?;
    let local_addr = local_node.address.parse().map_err(|e| {
        Error::cluster_from(format!("bad node address {:?}", local_node.address), e)
    })?;
    let (ray, core) = start_cluster_process(ClusterProcess {
        endpoint,
        gcs,
        worker,
        node: local_node.id,
        job,
        binary_hash: hash,
        local_node: local_addr,
        my_addr,
        resources: ResourceSet::new().with(CPU, Quantity::ZERO),
        // The log, if any, is the head's: a driver ships its records.
        insight: insight.is_some(),
        config,
    })?;
    core.set_node_totals(&nodes);
    Ok(ray)
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use ray_transport::TransportError;

    use super::*;

    #[test]
    fn a_driver_config_that_describes_a_node_is_refused_naming_the_field() {
        assert!(check_driver_config(&Config::default(), "h:1").is_ok());
        let cases = [
            Config {
                num_cpus: Some(2.0),
                ..Config::default()
            },
            Config {
                num_gpus: Some(1.0),
                ..Config::default()
            },
            Config {
                labels: [("zone".to_string(), "a".to_string())].into(),
                ..Config::default()
            },
        ];
        for (config, field) in cases.iter().zip(["num_cpus", "num_gpus", "labels"]) {
            match check_driver_config(config, "h:1") {
                Err(Error::InvalidArgument(msg)) => assert!(msg.contains(field), "{msg}"),
                other => panic!("{field}: {other:?}"),
            }
        }
    }

    #[tokio::test]
    async fn missing_credentials_keep_the_transport_error() {
        let dir = std::env::temp_dir().join(format!("rayrs-no-credentials-{}", std::process::id()));
        let config = Config {
            credentials: Some(dir.clone()),
            tune_allocator: false,
            ..Config::default()
        };
        let err = connect_driver(config, "127.0.0.1:1".into())
            .await
            .err()
            .expect("there are no credentials");
        let text = err.to_string();
        assert!(
            text.starts_with(&format!(
                "cluster: cannot load cluster credentials from {}: ",
                dir.display()
            )),
            "{text}"
        );
        let source = err
            .source()
            .and_then(|s| s.downcast_ref::<TransportError>());
        assert!(
            matches!(source, Some(TransportError::CredentialFile { .. })),
            "{err:?}"
        );
    }

    #[tokio::test]
    async fn an_address_that_does_not_resolve_keeps_the_resolver_error() {
        let config = Config {
            tune_allocator: false,
            ..Config::default()
        };
        let err = connect_driver(config, "no port here".into())
            .await
            .err()
            .expect("the address does not parse");
        assert!(
            err.to_string()
                .starts_with("cluster: bad cluster address \"no port here\": "),
            "{err}"
        );
        assert!(err.source().unwrap().is::<std::io::Error>(), "{err:?}");
    }
}
