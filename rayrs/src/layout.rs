//! Where `rayrs` keeps its files under the cluster directory (the head
//! itself writes the address and dashboard files: see
//! [`ray_core::cluster::Head`]).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use ray_core::cluster::{ADDRESS_FILE, CREDENTIALS_DIR};
use ray_transport::{ClusterCa, ClusterCredentials};

use crate::CliError;

/// The cluster CA (certificate and key): stays on the head.
pub fn ca_dir(dir: &Path) -> PathBuf {
    dir.join("ca")
}

/// The credentials every process of the cluster uses; copy it to join hosts.
pub fn credentials_dir(dir: &Path) -> PathBuf {
    dir.join(CREDENTIALS_DIR)
}

/// The GCS address the head wrote.
pub fn address_file(dir: &Path) -> PathBuf {
    dir.join(ADDRESS_FILE)
}

/// One file per process `rayrs start` runs on this host, named by pid.
pub fn pid_dir(dir: &Path) -> PathBuf {
    dir.join("pids")
}

/// The head's CA and credentials: the ones already in `dir`, or new ones.
///
/// Reusing them lets nodes keep their credentials across head restarts.
pub fn head_credentials(dir: &Path) -> Result<ClusterCredentials, CliError> {
    let ca_dir = ca_dir(dir);
    let creds_dir = credentials_dir(dir);
    if ca_dir.exists() {
        let ca =
            ClusterCa::load(&ca_dir).map_err(|e| CliError::failed(format!("cluster CA: {e}")))?;
        if let Ok(creds) = ClusterCredentials::load(&creds_dir) {
            if creds.ca_certificate() == ca.certificate() {
                return Ok(creds);
            }
        }
        return issue(&ca, &creds_dir);
    }
    let ca = ClusterCa::generate().map_err(CliError::failed)?;
    ca.save(&ca_dir)
        .map_err(|e| CliError::failed(format!("cannot write the cluster CA: {e}")))?;
    issue(&ca, &creds_dir)
}

fn issue(ca: &ClusterCa, dir: &Path) -> Result<ClusterCredentials, CliError> {
    let creds = ca.issue("ray-rs-cluster").map_err(CliError::failed)?;
    creds
        .save(dir)
        .map_err(|e| CliError::failed(format!("cannot write credentials: {e}")))?;
    Ok(creds)
}

/// Loads credentials from `path` (a credentials directory, or a file in
/// one), or from the cluster directory's when `path` is `None`.
/// The credentials directory `--credentials` (a directory or a file in
/// it) names, else the cluster directory's.
pub fn credentials_path(path: Option<&Path>, dir: &Path) -> PathBuf {
    match path {
        Some(p) if p.is_file() => p.parent().unwrap_or(Path::new(".")).to_owned(),
        Some(p) => p.to_owned(),
        None => credentials_dir(dir),
    }
}

pub fn load_credentials(path: Option<&Path>, dir: &Path) -> Result<ClusterCredentials, CliError> {
    let path = credentials_path(path, dir);
    if !path.exists() {
        return Err(CliError::failed(format!(
            "no credentials at {} (pass --credentials DIR: the head's credentials directory)",
            path.display()
        )));
    }
    ClusterCredentials::load(&path).map_err(|e| CliError::failed(format!("bad credentials: {e}")))
}

/// The GCS address: `address` if given, else the one the head wrote in `dir`.
pub fn gcs_address(address: Option<SocketAddr>, dir: &Path) -> Result<SocketAddr, CliError> {
    if let Some(addr) = address {
        return Ok(addr);
    }
    let file = address_file(dir);
    let text = std::fs::read_to_string(&file).map_err(|_| {
        CliError::failed(format!(
            "no cluster address: pass --address HOST:PORT or start a head with --dir {}",
            dir.display()
        ))
    })?;
    text.trim()
        .parse()
        .map_err(|_| CliError::failed(format!("{} holds no address", file.display())))
}
