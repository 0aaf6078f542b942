//! The node's cache of job binaries: each fetched from the GCS once, kept
//! under its SHA-256 in the node's directory.
//!
//! The files are read and written on tokio's blocking threads (a binary is
//! hundreds of MB), never on the daemon's worker threads.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::NodeService;
use crate::cluster::worker::WorkerStartError;

impl NodeService {
    /// The job binary with this hash, fetched from the GCS once.
    pub(super) async fn cached_binary(&self, hash: [u8; 32]) -> Result<PathBuf, WorkerStartError> {
        let dir = self.inner.config.cache_dir.clone();
        let name = crate::cluster::hex(&hash);
        let path = dir.join(&name);
        let cached = {
            let (dir, path) = (dir.clone(), path.clone());
            off_runtime(move || {
                if path.exists() {
                    return Ok(true);
                }
                std::fs::create_dir_all(&dir).map_err(|e| WorkerStartError::CacheDir {
                    dir: dir.clone(),
                    source: Arc::new(e),
                })?;
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
            .map_err(|e| WorkerStartError::Fetch {
                hash,
                source: Arc::new(e),
            })?;
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
fn install(tmp: &Path, path: &Path, bytes: &[u8]) -> Result<(), WorkerStartError> {
    std::fs::write(tmp, bytes).map_err(|e| WorkerStartError::Write {
        path: tmp.to_path_buf(),
        source: Arc::new(e),
    })?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(tmp, std::fs::Permissions::from_mode(0o755)).map_err(|e| {
            WorkerStartError::MakeExecutable {
                path: tmp.to_path_buf(),
                source: Arc::new(e),
            }
        })?;
    }
    std::fs::rename(tmp, path).map_err(|e| WorkerStartError::MoveIntoPlace {
        path: path.to_path_buf(),
        source: Arc::new(e),
    })
}

/// Runs file work `f` on a blocking thread of the runtime.
async fn off_runtime<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, WorkerStartError> + Send + 'static,
) -> Result<T, WorkerStartError> {
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|e| Err(WorkerStartError::FileTask(Arc::new(e))))
}
