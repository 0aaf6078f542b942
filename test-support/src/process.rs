//! Looking at the processes a test started (Linux `/proc`).

/// Whether process `pid` has exited: it is gone, or a zombie waiting for
/// its parent to reap it.
pub fn gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}
