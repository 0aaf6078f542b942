//! Fault injection for tests with real processes: faults that happen in a
//! window too narrow to hit from outside with a signal. Each is off unless
//! its environment variable is set in the processes concerned (a local
//! cluster passes [`LocalClusterConfig::env`](crate::LocalClusterConfig::env)
//! to its nodes and their workers).

use std::path::Path;

/// Names a file: a worker asked to hand over a task's value that it kept
/// for its owner, while that file exists, removes the file and aborts, as
/// if it died between reporting the result and the owner taking it. (The
/// file makes it happen once per file.)
pub const ABORT_ON_TAKE: &str = "RAYRS_TESTING_ABORT_ON_TAKE";

/// Aborts this process if [`ABORT_ON_TAKE`] names a file that exists
/// (removing it first).
/// Read once: a take of a large value is on the object path, and the
/// environment does not change under a running worker.
pub(crate) fn maybe_abort_on_take() {
    static PATH: std::sync::OnceLock<Option<std::ffi::OsString>> = std::sync::OnceLock::new();
    let Some(path) = PATH.get_or_init(|| std::env::var_os(ABORT_ON_TAKE)) else {
        return;
    };
    if std::fs::remove_file(Path::new(path)).is_ok() {
        std::process::abort();
    }
}
