//! `rayrs start`: a head (GCS and node daemon) or a joining node, in the
//! foreground until SIGTERM, Ctrl-C, or the GCS going away.

use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};

use ray_core::cluster::{
    control_plane_fingerprint, GcsClient, GcsServer, GcsServerConfig, NodeDaemon, NodeService,
    NodeServiceConfig, NodeSpec,
};
use ray_core::transport::{ClusterCredentials, Endpoint, EndpointConfig, Role};
use tokio::signal::unix::{signal, SignalKind};

use crate::args::{resolve, StartArgs};
use crate::{layout, query, CliError};

/// Runs the GCS and the head's node daemon.
pub async fn head(args: StartArgs) -> Result<(), CliError> {
    let creds = layout::head_credentials(&args.dir)?;
    let bind = resolve(&format!("{}:{}", args.host, args.port))
        .or_else(|_| resolve(&format!("[{}]:{}", args.host, args.port)))?;
    let endpoint = bind_endpoint(Role::Gcs, bind, &creds, &args)?;
    let gcs_addr = endpoint
        .local_addr()
        .map_err(|e| CliError::failed(format!("cannot read the GCS address: {e}")))?;
    let server = GcsServer::start(
        endpoint,
        GcsServerConfig {
            health_timeout: args.health_timeout,
            insight_dir: Some(args.dir.join("insight")),
        },
    );
    // The head's own node reaches the GCS over loopback when it listens everywhere.
    let dial = if gcs_addr.ip().is_unspecified() {
        SocketAddr::new(loopback(gcs_addr.ip()), gcs_addr.port())
    } else {
        gcs_addr
    };
    let creds_dir = layout::credentials_dir(&args.dir);
    let daemon = start_node(&args, &creds, &creds_dir, dial).await?;
    let address_file = layout::address_file(&args.dir);
    std::fs::write(&address_file, format!("{gcs_addr}\n"))
        .map_err(|e| CliError::failed(format!("cannot write {}: {e}", address_file.display())))?;
    let _pid = PidFile::create(&args.dir)?;
    let dashboard = ray_dashboard::Dashboard::start_on(
        &tokio::runtime::Handle::current(),
        ray_dashboard::DashboardConfig {
            bind: args.dashboard,
            ..Default::default()
        },
        server.insight_source(),
    )
    .map_err(|e| {
        CliError::failed(format!(
            "cannot serve the insight dashboard on {}: {e}",
            args.dashboard
        ))
    })?;
    let dashboard_file = layout::dashboard_file(&args.dir);
    write_private(&dashboard_file, &format!("{}\n", dashboard.url()))
        .map_err(|e| CliError::failed(format!("cannot write {}: {e}", dashboard_file.display())))?;
    println!("rayrs: head started");
    println!("  cluster address: {gcs_addr}");
    println!("  dashboard:       {}", dashboard.url());
    println!("  credentials:     {}", creds_dir.display());
    println!("  head node:       {}", daemon.node_id());
    println!(
        "join a node:  rayrs start --address {gcs_addr} --credentials {}",
        creds_dir.display()
    );
    println!("stop:         rayrs stop --dir {}", args.dir.display());
    flush();
    let result = until_stopped(&daemon).await;
    drop(dashboard);
    let _ = std::fs::remove_file(&dashboard_file);
    drop(server);
    // Only remove the address if a newer head did not replace it.
    if std::fs::read_to_string(&address_file).is_ok_and(|a| a.trim() == gcs_addr.to_string()) {
        let _ = std::fs::remove_file(&address_file);
    }
    result
}

/// Joins a node to the cluster at `gcs`.
pub async fn join(args: StartArgs, gcs: SocketAddr) -> Result<(), CliError> {
    let creds = layout::load_credentials(args.credentials.as_deref(), &args.dir)?;
    let creds_dir = layout::credentials_path(args.credentials.as_deref(), &args.dir);
    let daemon = start_node(&args, &creds, &creds_dir, gcs).await?;
    let _pid = PidFile::create(&args.dir)?;
    println!("rayrs: {} joined the cluster at {gcs}", daemon.node_id());
    flush();
    until_stopped(&daemon).await
}

/// Writes `text` to a file only its owner can read (it holds a token).
fn write_private(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(text.as_bytes())
}

fn flush() {
    // Nothing to do if stdout is gone; the process keeps serving.
    let _ = std::io::stdout().flush();
}

fn loopback(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::LOCALHOST),
    }
}

fn bind_endpoint(
    role: Role,
    addr: SocketAddr,
    creds: &ClusterCredentials,
    args: &StartArgs,
) -> Result<Endpoint, CliError> {
    let mut config = EndpointConfig::new(role, control_plane_fingerprint());
    config.transport.handshake_timeout = args.timeout;
    Endpoint::bind(addr, creds, config).map_err(CliError::failed)
}

/// Binds a node endpoint, registers the node with the GCS at `gcs`.
async fn start_node(
    args: &StartArgs,
    creds: &ClusterCredentials,
    creds_dir: &Path,
    gcs: SocketAddr,
) -> Result<NodeService, CliError> {
    let ip = if gcs.ip().is_loopback() {
        loopback(gcs.ip())
    } else if gcs.is_ipv4() {
        IpAddr::V4(Ipv4Addr::UNSPECIFIED)
    } else {
        IpAddr::V6(Ipv6Addr::UNSPECIFIED)
    };
    let endpoint = bind_endpoint(Role::Node, SocketAddr::new(ip, 0), creds, args)?;
    let client = GcsClient::connect(&endpoint, gcs, args.timeout)
        .await
        .map_err(|e| query::describe(e, args.credentials.as_deref(), &args.dir))?;
    let local = endpoint
        .local_addr()
        .map_err(|e| CliError::failed(format!("cannot read the node address: {e}")))?;
    let advertised = match client.connection().quic().local_ip() {
        Some(ip) if local.ip().is_unspecified() => SocketAddr::new(ip, local.port()),
        _ => local,
    };
    let spec = NodeSpec {
        address: advertised.to_string(),
        resources: args.resources.clone(),
        labels: args.labels.clone(),
    };
    let daemon = NodeDaemon::register(client, &spec)
        .await
        .map_err(|e| query::describe(e, args.credentials.as_deref(), &args.dir))?;
    let creds_dir = std::path::absolute(creds_dir).unwrap_or_else(|_| creds_dir.to_owned());
    let cache_dir = std::path::absolute(args.dir.join("binaries"))
        .unwrap_or_else(|_| args.dir.join("binaries"));
    Ok(NodeService::start(
        daemon,
        endpoint,
        args.resources.clone(),
        args.labels.clone(),
        NodeServiceConfig {
            credentials_dir: creds_dir,
            cache_dir,
            bind_ip: advertised.ip(),
        },
    ))
}

/// Serves until SIGTERM or Ctrl-C (a clean exit) or until the node can no
/// longer heartbeat (an error).
async fn until_stopped(daemon: &NodeService) -> Result<(), CliError> {
    let mut term = signal(SignalKind::terminate())
        .map_err(|e| CliError::failed(format!("cannot watch for SIGTERM: {e}")))?;
    tokio::select! {
        _ = term.recv() => Ok(()),
        _ = tokio::signal::ctrl_c() => Ok(()),
        e = daemon.run() => Err(CliError::failed(format!(
            "{} stopped: {e}", daemon.node_id()
        ))),
    }
}

/// This process's entry in the cluster directory's pid folder, removed
/// when dropped.
struct PidFile(PathBuf);

impl PidFile {
    fn create(dir: &Path) -> Result<Self, CliError> {
        let pids = layout::pid_dir(dir);
        std::fs::create_dir_all(&pids)
            .map_err(|e| CliError::failed(format!("cannot create {}: {e}", pids.display())))?;
        let path = pids.join(std::process::id().to_string());
        std::fs::write(&path, format!("{}\n", std::process::id()))
            .map_err(|e| CliError::failed(format!("cannot write {}: {e}", path.display())))?;
        Ok(Self(path))
    }
}

impl Drop for PidFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
