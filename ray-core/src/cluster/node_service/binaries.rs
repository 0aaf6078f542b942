//! The node's cache of job binaries: each fetched from the GCS once, kept
//! under its SHA-256 in the node's directory.
//!
//! The files are read and written on tokio's blocking threads (a binary is
//! hundreds of MB), never on the daemon's worker threads.

use std::path::{Path, PathBuf};

use super::NodeService;

impl NodeService {
    /// The job binary with this hash, fetched from the GCS once.
    pub(super) async fn cached_binary(&self, hash: [u8; 32]) -> Result<PathBuf, String> {
        let dir = self.inner.config.cache_dir.clone();
        let name = crate::cluster::hex(&hash);
        let path = dir.join(&name);
        let cached = {
            let (dir, path) = (dir.clone(), path.clone());
            off_runtime(move || {
                if path.exists() {
                    return Ok(true);
                }
                std::fs::create_dir_all(&dir)
                    .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
                Ok(false)
            })
            .await?
        };
        if cached {
            return Ok(path);
        }
        let bytes = self
            .inner
            .daemon
            .client()
            .fetch_binary(hash)
            .await
            .map_err(|e| format!("cannot fetch job binary {name}: {e}"))?;
        let tmp = dir.join(format!("{name}.{}.tmp", std::process::id()));
        off_runtime(move || {
            install(&tmp, &path, bytes.as_slice())?;
            Ok(path)
        })
        .await
    }
}

/// Writes `bytes` to `tmp`, makes it executable and renames it to `path`,
/// so a binary in the cache is always whole.
fn install(tmp: &Path, path: &Path, bytes: &[u8]) -> Result<(), String> {
    std::fs::write(tmp, bytes).map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(tmp, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| format!("cannot make {} executable: {e}", tmp.display()))?;
    }
    std::fs::rename(tmp, path)
        .map_err(|e| format!("cannot move {} into place: {e}", path.display()))
}

/// Runs file work `f` on a blocking thread of the runtime.
async fn off_runtime<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|e| Err(format!("the binary cache's file task failed: {e}")))
}
