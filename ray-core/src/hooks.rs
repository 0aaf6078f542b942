//! Hooks the runtime calls where a recorder of its events must act: a
//! thread about to go idle or block hands over what it recorded.
//!
//! The runtime knows nothing of insight: a recorder installs itself here
//! ([`set_recorder`]) and the runtime calls [`flush`] at those points and
//! asks [`recording`] before doing extra work for it. Without a recorder,
//! each costs one atomic load and a branch.

use std::sync::OnceLock;

/// Hands the calling thread's recorded events to the recorder; set once a
/// recorder is installed.
static FLUSH: OnceLock<fn()> = OnceLock::new();

/// Installs the recorder's per-thread flush; from now on [`recording`] is
/// true. The first recorder stays (a process records at most once).
#[cfg_attr(not(feature = "insight"), allow(dead_code))] // called by the recorder
pub(crate) fn set_recorder(flush: fn()) {
    let _ = FLUSH.set(flush);
}

/// Whether this process records its events.
#[inline]
pub(crate) fn recording() -> bool {
    FLUSH.get().is_some()
}

/// Hands the calling thread's recorded events over, if the process
/// records: a pool thread about to sleep, a task about to block, a parked
/// I/O thread.
#[inline]
pub(crate) fn flush() {
    if let Some(flush) = FLUSH.get() {
        flush();
    }
}
