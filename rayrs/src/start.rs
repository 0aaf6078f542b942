//! `rayrs start`: a head (GCS, node daemon and dashboard) or a joining
//! node, in the foreground until SIGTERM, Ctrl-C, or the GCS going away.

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use ray_core::cluster::{start_node, Head, HeadConfig, NodeConfig, StartError};
use tokio::signal::unix::{signal, SignalKind};

use crate::args::{resolve, StartArgs};
use crate::{layout, query, CliError};

/// Runs the GCS, the head's node daemon and the dashboard.
pub async fn head(args: StartArgs) -> Result<(), CliError> {
    let creds = layout::head_credentials(&args.dir)?;
    let bind = resolve(&format!("{}:{}", args.host, args.port))
        .or_else(|_| resolve(&format!("[{}]:{}", args.host, args.port)))
        .map_err(|_| {
            CliError::usage(format!(
                "--host must be an IP address or host name, got `{}`",
                args.host
            ))
        })?;
    let creds_dir = layout::credentials_dir(&args.dir);
    // Watched and recorded before the address appears, so a `rayrs stop`
    // that finds the address finds this process and stops it cleanly.
    let mut term = sigterm()?;
    let _pid = PidFile::create(&args.dir).await?;
    let head = Head::start(
        HeadConfig {
            bind,
            dir: args.dir.clone(),
            resources: args.resources.clone(),
            labels: args.labels.clone(),
            health_timeout: args.health_timeout,
            timeout: args.timeout,
            dashboard: Some(args.dashboard),
            limits: args.limits,
            policies: args.policies,
        },
        &creds,
    )
    .await
    .map_err(|e| start_failed(e, &args))?;
    let gcs_addr = head.address();
    crate::say!("rayrs: head started");
    crate::say!("  cluster address: {gcs_addr}");
    if let Some(url) = head.dashboard_url() {
        crate::say!("  dashboard:       {url}");
    }
    crate::say!("  credentials:     {}", creds_dir.display());
    crate::say!("  head node:       {}", head.node().node_id());
    crate::say!(
        "join a node:  rayrs start --address {gcs_addr} --credentials {}",
        creds_dir.display()
    );
    crate::say!("stop:         rayrs stop --dir {}", args.dir.display());
    flush();
    tokio::select! {
        _ = term.recv() => Ok(()),
        _ = tokio::signal::ctrl_c() => Ok(()),
        e = head.run() => Err(CliError::failed(format!(
            "{} stopped: {e}", head.node().node_id()
        ))),
    }
}

/// Joins a node to the cluster at `gcs`.
pub async fn join(args: StartArgs, gcs: SocketAddr) -> Result<(), CliError> {
    let creds = layout::load_credentials(args.credentials.as_deref(), &args.dir)?;
    let mut term = sigterm()?;
    let _pid = PidFile::create(&args.dir).await?;
    let daemon = start_node(
        NodeConfig {
            gcs,
            dir: args.dir.clone(),
            credentials_dir: layout::credentials_path(args.credentials.as_deref(), &args.dir),
            resources: args.resources.clone(),
            labels: args.labels.clone(),
            timeout: args.timeout,
            limits: args.limits,
            policies: args.policies,
        },
        &creds,
    )
    .await
    .map_err(|e| start_failed(e, &args))?;
    crate::say!("rayrs: {} joined the cluster at {gcs}", daemon.node_id());
    flush();
    tokio::select! {
        _ = term.recv() => Ok(()),
        _ = tokio::signal::ctrl_c() => Ok(()),
        e = daemon.run() => Err(CliError::failed(format!(
            "{} stopped: {e}", daemon.node_id()
        ))),
    }
}

/// One line for a head or node that did not start; GCS failures say what
/// to do about them.
fn start_failed(e: StartError, args: &StartArgs) -> CliError {
    match e {
        StartError::Gcs(e) => query::describe(e, args.credentials.as_deref(), &args.dir),
        other => CliError::failed(other),
    }
}

fn flush() {
    // Nothing to do if stdout is gone; the process keeps serving.
    let _ = std::io::stdout().flush();
}

/// SIGTERM (what `rayrs stop` sends) ends serving cleanly, as Ctrl-C does.
fn sigterm() -> Result<tokio::signal::unix::Signal, CliError> {
    signal(SignalKind::terminate())
        .map_err(|e| CliError::failed(format!("cannot watch for SIGTERM: {e}")))
}

/// This process's entry in the cluster directory's pid folder, removed
/// when dropped.
struct PidFile(PathBuf);

impl PidFile {
    /// Writes the pid file on a blocking thread: no file I/O on the
    /// runtime's worker threads, which serve the head or node.
    async fn create(dir: &Path) -> Result<Self, CliError> {
        let dir = dir.to_path_buf();
        tokio::task::spawn_blocking(move || Self::write(&dir))
            .await
            .map_err(|e| CliError::failed(format!("cannot write the pid file: {e}")))?
    }

    fn write(dir: &Path) -> Result<Self, CliError> {
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
