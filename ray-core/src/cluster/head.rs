//! The head of a cluster, assembled in one place: the GCS service, the
//! head's own node and, when asked, the insight dashboard on the GCS's
//! collector. `rayrs start --head` and [`Cluster::local`](super::Cluster)
//! both start a head through [`Head::start`]; every other node (a joining
//! `rayrs start --address`, or a node of `Cluster::local`) starts through
//! [`start_node`], as the head's own node does.
//!
//! A head and a node keep their files in a cluster directory: the
//! credentials in [`CREDENTIALS_DIR`], the GCS address in [`ADDRESS_FILE`],
//! the dashboard URL in [`DASHBOARD_FILE`], job binaries in `binaries/`,
//! insight event logs in `insight/`.

use std::collections::BTreeMap;
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use ray_dashboard::{Dashboard, DashboardConfig};
use ray_sched::ResourceSet;

use super::{
    control_plane_fingerprint, ClusterError, GcsClient, GcsServer, GcsServerConfig, NodeDaemon,
    NodeService, NodeServiceConfig, NodeSpec,
};
use ray_transport::{ClusterCredentials, Endpoint, EndpointConfig, Role, TransportError};

/// The folder of the cluster directory holding the credentials every
/// process of the cluster uses (copy it to hosts that join).
pub const CREDENTIALS_DIR: &str = "credentials";

/// The file of the cluster directory where a head writes the GCS address
/// once it serves (a line `HOST:PORT`); removed when the head stops.
pub const ADDRESS_FILE: &str = "gcs_address";

/// The file of the cluster directory where a head serving the dashboard
/// writes its URL, access token included (mode 0600); removed when the
/// head stops.
pub const DASHBOARD_FILE: &str = "dashboard_url";

/// How [`Head::start`] sets the head up.
#[derive(Debug, Clone)]
pub struct HeadConfig {
    /// Where the GCS listens (port 0: a free one). On an unspecified IP
    /// (`0.0.0.0`), the head's own node reaches it over loopback.
    pub bind: SocketAddr,
    /// The cluster directory (see the module docs); the credentials are
    /// expected in its [`CREDENTIALS_DIR`], where workers load them from.
    pub dir: PathBuf,
    /// What the head's node offers.
    pub resources: ResourceSet,
    /// The head's node labels.
    pub labels: BTreeMap<String, String>,
    /// A node that has not heartbeated for this long is dead.
    pub health_timeout: Duration,
    /// Bounds each TLS handshake and the head's node connecting to the GCS.
    pub timeout: Duration,
    /// Where to serve the insight dashboard on the GCS's collector; `None`
    /// serves none. `rayrs start --head` serves one;
    /// [`Cluster::local`](super::Cluster::local) does not.
    pub dashboard: Option<SocketAddr>,
    /// What the head's node's workers and binary cache may use.
    pub limits: NodeLimits,
    /// Makes the head's node's scheduler policies.
    pub policies: super::PolicyFactory,
}

/// How [`start_node`] starts a node and joins it to a cluster.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// The GCS address.
    pub gcs: SocketAddr,
    /// The node's cluster directory: job binaries are cached in its
    /// `binaries/`.
    pub dir: PathBuf,
    /// The directory holding the credentials, where workers load them from.
    pub credentials_dir: PathBuf,
    /// What the node offers.
    pub resources: ResourceSet,
    /// The node's labels.
    pub labels: BTreeMap<String, String>,
    /// Bounds each TLS handshake and connecting to the GCS.
    pub timeout: Duration,
    /// What the node's workers and binary cache may use.
    pub limits: NodeLimits,
    /// Makes the node scheduler's policies (see
    /// [`policy_set`](super::policy_set); `ray_sched::Policies::standard`
    /// is Ray's).
    pub policies: super::PolicyFactory,
}

/// What a node's workers and its cache of job binaries may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeLimits {
    /// The object store size of each worker process, in bytes (`None`: the
    /// default of [`Config::object_store_bytes`](crate::Config::object_store_bytes)).
    pub object_store_bytes: Option<u64>,
    /// The node keeps job binaries no running job uses up to this many
    /// bytes in all, evicting the least recently used beyond it (default
    /// 2 GiB).
    pub binary_cache_bytes: u64,
}

impl Default for NodeLimits {
    fn default() -> Self {
        Self {
            object_store_bytes: None,
            binary_cache_bytes: 2 << 30,
        }
    }
}

/// Why a head or a node could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// An endpoint could not be bound (the address is taken, or the
    /// credentials do not make a TLS configuration).
    #[error(transparent)]
    Endpoint(TransportError),
    /// The OS could not say which address an endpoint got.
    #[error("cannot read the {what} address: {source}")]
    LocalAddress {
        /// `GCS` or `node`.
        what: &'static str,
        /// What the OS said.
        source: std::io::Error,
    },
    /// Connecting to the GCS or registering the node failed.
    #[error(transparent)]
    Gcs(#[from] ClusterError),
    /// The dashboard could not listen.
    #[error("cannot serve the insight dashboard on {addr}: {source}")]
    Dashboard {
        /// Where it was to listen.
        addr: SocketAddr,
        /// What the OS said.
        source: std::io::Error,
    },
    /// A file of the cluster directory could not be written.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
}

/// A running head: the GCS, the head's node and, if configured, the
/// dashboard. Must live inside the tokio runtime it was started on.
///
/// Dropping it stops the dashboard and the GCS and removes the files it
/// wrote (the address file only if no newer head has replaced it); the
/// node's tasks end with the runtime.
pub struct Head {
    address: SocketAddr,
    address_file: PathBuf,
    dashboard_file: Option<PathBuf>,
    dashboard: Option<Dashboard>,
    // Held to keep serving; dropped in this order: the GCS, then the
    // head's node.
    _server: GcsServer,
    node: NodeService,
}

impl std::fmt::Debug for Head {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Head")
            .field("address", &self.address)
            .field("node", &self.node.node_id())
            .field("dashboard", &self.dashboard_url())
            .finish_non_exhaustive()
    }
}

impl Head {
    /// Starts the GCS on `config.bind`, the head's node, and the dashboard
    /// if configured; then writes the dashboard URL and, last, the GCS
    /// address to the cluster directory, so a process that finds the
    /// address finds a head that serves. Must be called inside a tokio
    /// runtime.
    ///
    /// # Errors
    ///
    /// [`StartError`] says which part failed. No file is left behind and
    /// the GCS stops; a node that had started keeps its tasks until the
    /// runtime ends (both callers end the process on an error).
    pub async fn start(
        config: HeadConfig,
        credentials: &ClusterCredentials,
    ) -> Result<Head, StartError> {
        let endpoint = bind(Role::Gcs, config.bind, credentials, config.timeout)?;
        let address = endpoint
            .local_addr()
            .map_err(|source| StartError::LocalAddress {
                what: "GCS",
                source,
            })?;
        let server = GcsServer::start(
            endpoint,
            GcsServerConfig {
                health_timeout: config.health_timeout,
                insight_dir: Some(config.dir.join("insight")),
            },
        );
        // The head's own node reaches the GCS over loopback when it listens everywhere.
        let dial = if address.ip().is_unspecified() {
            SocketAddr::new(loopback(address.ip()), address.port())
        } else {
            address
        };
        let node = start_node(
            NodeConfig {
                gcs: dial,
                dir: config.dir.clone(),
                credentials_dir: config.dir.join(CREDENTIALS_DIR),
                resources: config.resources,
                labels: config.labels,
                timeout: config.timeout,
                limits: config.limits,
                policies: config.policies,
            },
            credentials,
        )
        .await?;
        let dashboard = config
            .dashboard
            .map(|bind| {
                Dashboard::start_on(
                    &tokio::runtime::Handle::current(),
                    DashboardConfig {
                        bind,
                        ..Default::default()
                    },
                    server.insight_source(),
                )
                .map_err(|source| StartError::Dashboard { addr: bind, source })
            })
            .transpose()?;
        let mut head = Head {
            address,
            address_file: config.dir.join(ADDRESS_FILE),
            dashboard_file: None,
            dashboard,
            _server: server,
            node,
        };
        if let Some(url) = head.dashboard_url() {
            let path = config.dir.join(DASHBOARD_FILE);
            let text = format!("{url}\n");
            off_runtime(&path, move |path| write_private(path, &text))
                .await
                .map_err(|source| StartError::Write {
                    path: path.clone(),
                    source,
                })?;
            head.dashboard_file = Some(path);
        }
        let text = format!("{address}\n");
        off_runtime(&head.address_file, move |path| {
            write_atomically(path, &text)
        })
        .await
        .map_err(|source| StartError::Write {
            path: head.address_file.clone(),
            source,
        })?;
        Ok(head)
    }

    /// The address the GCS listens on: the cluster's address (an
    /// unspecified IP when bound to every interface).
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// The head's own node.
    pub fn node(&self) -> &NodeService {
        &self.node
    }

    /// The dashboard's URL, access token included; `None` without one.
    pub fn dashboard_url(&self) -> Option<String> {
        self.dashboard.as_ref().map(Dashboard::url)
    }

    /// Serves until the head's node can no longer heartbeat (the GCS went
    /// away or declared it dead), and says why. Cancel-safe: dropping the
    /// future stops nothing.
    pub async fn run(&self) -> ClusterError {
        self.node.run().await
    }
}

impl Drop for Head {
    fn drop(&mut self) {
        drop(self.dashboard.take());
        if let Some(path) = &self.dashboard_file {
            let _ = std::fs::remove_file(path);
        }
        // Only remove the address if a newer head did not replace it.
        if std::fs::read_to_string(&self.address_file)
            .is_ok_and(|a| a.trim() == self.address.to_string())
        {
            let _ = std::fs::remove_file(&self.address_file);
        }
    }
}

/// Starts a node: binds its endpoint (on loopback when the GCS is on
/// loopback, else on every interface), registers it with the GCS at
/// `config.gcs` under the address the GCS connection shows, and serves
/// leases. Must be called inside a tokio runtime.
///
/// # Errors
///
/// [`StartError::Gcs`] when the GCS cannot be reached, refuses the
/// credentials or the registration; [`StartError::Endpoint`] when no
/// endpoint can be bound.
pub async fn start_node(
    config: NodeConfig,
    credentials: &ClusterCredentials,
) -> Result<NodeService, StartError> {
    let gcs = config.gcs;
    let ip = if gcs.ip().is_loopback() {
        loopback(gcs.ip())
    } else if gcs.is_ipv4() {
        IpAddr::V4(Ipv4Addr::UNSPECIFIED)
    } else {
        IpAddr::V6(Ipv6Addr::UNSPECIFIED)
    };
    let endpoint = bind(
        Role::Node,
        SocketAddr::new(ip, 0),
        credentials,
        config.timeout,
    )?;
    let client = GcsClient::connect(&endpoint, gcs, config.timeout).await?;
    let local = endpoint
        .local_addr()
        .map_err(|source| StartError::LocalAddress {
            what: "node",
            source,
        })?;
    let advertised = match client.connection().quic().local_ip() {
        Some(ip) if local.ip().is_unspecified() => SocketAddr::new(ip, local.port()),
        _ => local,
    };
    let spec = NodeSpec {
        address: advertised.to_string(),
        resources: config.resources.clone(),
        labels: config.labels.clone(),
    };
    let daemon = NodeDaemon::register(client, &spec).await?;
    // Workers get these paths: absolute, whatever directory they start in.
    let absolute = |p: PathBuf| std::path::absolute(&p).unwrap_or(p);
    Ok(NodeService::start(
        daemon,
        endpoint,
        config.resources,
        config.labels,
        NodeServiceConfig {
            credentials_dir: absolute(config.credentials_dir),
            cache_dir: absolute(config.dir.join("binaries")),
            bind_ip: advertised.ip(),
            limits: config.limits,
            policies: config.policies,
        },
    ))
}

fn bind(
    role: Role,
    addr: SocketAddr,
    credentials: &ClusterCredentials,
    timeout: Duration,
) -> Result<Endpoint, StartError> {
    let mut config = EndpointConfig::new(role, control_plane_fingerprint());
    config.transport.handshake_timeout = timeout;
    Endpoint::bind(addr, credentials, config).map_err(StartError::Endpoint)
}

fn loopback(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::LOCALHOST),
    }
}

/// Runs `write` on `path` on a blocking thread of the runtime: file I/O
/// stays off the head's worker threads.
async fn off_runtime(
    path: &Path,
    write: impl FnOnce(&Path) -> std::io::Result<()> + Send + 'static,
) -> std::io::Result<()> {
    let path = path.to_path_buf();
    tokio::task::spawn_blocking(move || write(&path))
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(e)))
}

/// Writes `text` to a file only its owner can read (it holds a token).
fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(text.as_bytes())
}

/// Writes `text` through a temporary file and a rename, so a reader never
/// sees part of it.
fn write_atomically(path: &Path, text: &str) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
}
