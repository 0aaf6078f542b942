//! The node's cache of job binaries: each fetched from the GCS once, kept
//! under its SHA-256 in the node's directory. Builds no running job uses
//! are evicted, least recently used first, once the cache holds more than
//! [`NodeLimits::binary_cache_bytes`](crate::cluster::NodeLimits).
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
        let one_at_a_time = self.inner.fetches.lock().entry(hash).or_default().clone();
        let _fetching = one_at_a_time.lock().await;
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
            // Used now: the last to go when the cache is trimmed.
            let touched = path.clone();
            let _ = off_runtime(move || {
                // Read-only: a binary being run cannot be opened for writing.
                let _ = std::fs::File::open(&touched)
                    .and_then(|f| f.set_modified(std::time::SystemTime::now()));
                Ok(())
            })
            .await;
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
        let installed = off_runtime(move || {
            install(&tmp, &path, bytes.as_slice())?;
            Ok(path)
        })
        .await?;
        self.trim_cache(hash).await;
        Ok(installed)
    }

    /// Evicts cached builds no running job uses (`also_keep` is about to
    /// run) while the cache is over its cap. Failures only leave files.
    async fn trim_cache(&self, also_keep: [u8; 32]) {
        let mut keep: Vec<String> = self
            .inner
            .jobs
            .lock()
            .values()
            .filter_map(|w| *w.binary.lock())
            .map(|h| crate::cluster::hex(&h))
            .collect();
        keep.extend(
            self.inner
                .isolated
                .lock()
                .values()
                .filter_map(|(_, w)| *w.binary.lock())
                .map(|h| crate::cluster::hex(&h)),
        );
        keep.push(crate::cluster::hex(&also_keep));
        let dir = self.inner.config.cache_dir.clone();
        let cap = self.inner.config.limits.binary_cache_bytes;
        let _ = off_runtime(move || {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                return Ok(());
            };
            let files: Vec<Cached> = entries
                .filter_map(|e| e.ok())
                .filter_map(|e| {
                    let name = e.file_name().into_string().ok()?;
                    let meta = e.metadata().ok()?;
                    (meta.is_file() && !name.ends_with(".tmp")).then(|| Cached {
                        used: meta.modified().unwrap_or(std::time::UNIX_EPOCH),
                        bytes: meta.len(),
                        name,
                    })
                })
                .collect();
            for name in evictions(files, &keep, cap) {
                match std::fs::remove_file(dir.join(&name)) {
                    Ok(()) => tracing::info!(target: "ray::node", binary = %name, "binary.evicted"),
                    Err(e) => {
                        tracing::warn!(target: "ray::node", binary = %name, error = %e, "binary.evict_failed")
                    }
                }
            }
            Ok(())
        })
        .await;
    }
}

/// A job binary in the cache.
#[derive(Debug, Clone)]
struct Cached {
    name: String,
    bytes: u64,
    used: std::time::SystemTime,
}

/// Which cached binaries to delete so the cache holds at most `cap` bytes:
/// the least recently used first, never one named in `keep` (a running
/// job's). The kept ones may exceed `cap` on their own.
fn evictions(mut files: Vec<Cached>, keep: &[String], cap: u64) -> Vec<String> {
    let mut total: u64 = files.iter().map(|f| f.bytes).sum();
    files.sort_by_key(|f| f.used);
    let mut out = Vec::new();
    for f in files {
        if total <= cap {
            break;
        }
        if keep.contains(&f.name) {
            continue;
        }
        total -= f.bytes;
        out.push(f.name);
    }
    out
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

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    fn cached(name: &str, bytes: u64, used_secs: u64) -> Cached {
        Cached {
            name: name.into(),
            bytes,
            used: UNIX_EPOCH + Duration::from_secs(used_secs),
        }
    }

    #[test]
    fn the_least_recently_used_builds_go_first_and_running_ones_never() {
        let files = vec![
            cached("new", 300, 30),
            cached("oldest", 300, 10),
            cached("running", 300, 5),
            cached("old", 300, 20),
        ];
        // 1200 bytes, cap 700: "running" is the oldest but in use.
        let gone = evictions(files.clone(), &["running".into()], 700);
        assert_eq!(gone, ["oldest", "old"]);
        assert!(
            evictions(files.clone(), &[], 1200).is_empty(),
            "under the cap"
        );
        // Everything in use: nothing goes, even over the cap.
        let all: Vec<String> = files.iter().map(|f| f.name.clone()).collect();
        assert!(evictions(files, &all, 0).is_empty());
    }
}
