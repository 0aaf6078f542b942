//! The node's cache of job binaries: each fetched from the GCS once, kept
//! under its SHA-256 in the node's directory.

use std::path::PathBuf;

use super::NodeService;

impl NodeService {
    /// The job binary with this hash, fetched from the GCS once.
    pub(super) async fn cached_binary(&self, hash: [u8; 32]) -> Result<PathBuf, String> {
        let dir = &self.inner.config.cache_dir;
        let path = dir.join(crate::cluster::hex(&hash));
        if path.exists() {
            return Ok(path);
        }
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let bytes = self
            .inner
            .daemon
            .client()
            .fetch_binary(hash)
            .await
            .map_err(|e| {
                format!(
                    "cannot fetch job binary {}: {e}",
                    crate::cluster::hex(&hash)
                )
            })?;
        let tmp = dir.join(format!(
            "{}.{}.tmp",
            crate::cluster::hex(&hash),
            std::process::id()
        ));
        std::fs::write(&tmp, bytes.as_slice())
            .map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755))
                .map_err(|e| format!("cannot make {} executable: {e}", tmp.display()))?;
        }
        std::fs::rename(&tmp, &path)
            .map_err(|e| format!("cannot move {} into place: {e}", path.display()))?;
        Ok(path)
    }
}
