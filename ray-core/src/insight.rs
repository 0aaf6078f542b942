//! Hooks a program calls so that insight can slice its views: context labels;
//! and periodic resource samples for its physical view.
//!
//! These functions only emit `tracing` events that an insight layer, if
//! installed, records. The runtime installs one itself when asked
//! ([`Config::insight`](crate::Config::insight), `RAYRS_INSIGHT=1` or
//! `RAYRS_INSIGHT_LOG=FILE`); [`Ray::insight`](crate::Ray::insight) then
//! gives the [`Insight`] handle on the views.

use std::path::PathBuf;

#[cfg(feature = "insight")]
pub use crate::recording::{Insight, PUMP_EVERY};

/// Environment variable that turns recording on (`1`, `true`, `on`).
pub const ENV_INSIGHT: &str = "RAYRS_INSIGHT";

/// Environment variable naming an event log file to record into (turns
/// recording on).
pub const ENV_INSIGHT_LOG: &str = "RAYRS_INSIGHT_LOG";

/// Environment variable that serves the dashboard (turns recording on):
/// `1` for a free loopback port, or an address (`127.0.0.1:8265`).
pub const ENV_DASHBOARD: &str = "RAYRS_DASHBOARD";

/// How the runtime records for insight ([`Config::insight`](crate::Config::insight)).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InsightOptions {
    /// Embedded: also append every record to this event log file (created,
    /// or truncated), for `rayrs insight export --log FILE`. On a cluster
    /// the head keeps the job's log.
    pub log: Option<PathBuf>,
    /// Embedded: serve the insight dashboard on this address (`127.0.0.1:0`
    /// picks a free loopback port); its URL, with the access token, is
    /// printed on stderr and given by [`Insight::dashboard_url`]. On a
    /// cluster the head serves it (`rayrs start --head` prints the URL).
    pub dashboard: Option<std::net::SocketAddr>,
}

impl InsightOptions {
    /// What the environment asks for: `RAYRS_INSIGHT_LOG=FILE` (recording
    /// into that log) or `RAYRS_INSIGHT=1`; `None` when neither is set.
    pub fn from_env() -> Option<Self> {
        let log = std::env::var_os(ENV_INSIGHT_LOG)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from);
        let on = std::env::var(ENV_INSIGHT)
            .is_ok_and(|v| matches!(v.trim(), "1" | "true" | "on" | "yes"));
        let dashboard = std::env::var(ENV_DASHBOARD)
            .ok()
            .and_then(|v| match v.trim() {
                "" | "0" | "false" | "off" => None,
                "1" | "true" | "on" | "yes" => {
                    Some(std::net::SocketAddr::from(([127, 0, 0, 1], 0)))
                }
                addr => addr.parse().ok(),
            });
        (on || log.is_some() || dashboard.is_some()).then_some(Self { log, dashboard })
    }
}

/// Labels the current task (or the driver, outside any task) with
/// `key = value` pairs, e.g. `context(&[("dp_rank", "0")])`.
///
/// Tasks and actor calls submitted afterwards from the labelled task inherit
/// its labels, so an insight view filtered on `dp_rank = 0` keeps the task and
/// everything it started. Later calls add labels or override earlier values.
///
/// It emits one `context` event (target `ray::insight`) with the current
/// `task_id` (absent in the driver) and the labels packed into one field,
/// `labels = "k1=v1,k2=v2"`, because `tracing` field names must be static.
/// So a key must not contain `,` or `=`, and a value must not contain `,`;
/// such labels would be split differently when read back. Without a
/// subscriber this does nothing beyond formatting the labels.
///
/// ```
/// // In the driver (no task), or inside a task to label it and its children.
/// ray_core::insight::context(&[("dp_rank", "0"), ("stage", "warmup")]);
/// ```
pub fn context(labels: &[(&str, &str)]) {
    let mut packed = String::new();
    for (i, (key, value)) in labels.iter().enumerate() {
        if i > 0 {
            packed.push(',');
        }
        packed.push_str(key);
        packed.push('=');
        packed.push_str(value);
    }
    tracing::trace!(
        name: "context",
        target: "ray::insight",
        task_id = crate::context::current_trace().map(ray_proto::TaskId::as_u128),
        labels = packed.as_str()
    );
}

/// Samples this process's resource use every `period` and emits it as
/// `resource.sample` events, until the returned guard is dropped or the
/// runtime shuts down.
///
/// A thread named `rayrs-sampler` wakes every `period` (at least 10 ms) and
/// emits one event (target `ray::resource`) with
///
/// - `node_id`, `worker_id` (as the runtime's ids, integers) and `pid`;
/// - what the process **uses**: `cpu_percent` since the previous sample
///   (100 = one core busy) and `rss_bytes`, read from `/proc/self` (absent
///   where there is no readable `/proc`);
/// - what it **requested**: `cpu_used` (CPUs held by the tasks and actors
///   its runtime admitted, placement group reservations included) against
///   `cpu_total` (the node's CPUs), and likewise `gpu_used` / `gpu_total`
///   and `memory_used` / `memory_total` where the node has GPUs or memory
///   as a resource;
/// - the machine's GPUs where `nvidia-smi` exists, read at most once a
///   second (the run goes on beside the sampler, which never waits for it;
///   the reading comes with the first sample after it ends): `gpu_count`,
///   `gpu_util_percent` (mean), `gpu_mem_used_bytes` and
///   `gpu_mem_total_bytes` (summed over devices).
///
/// The insight physical view keeps a bounded history of these per process
/// and sums them per node.
///
/// One sampler runs per runtime: calling this again while a guard is alive
/// returns a guard for the same sampler (its first period stands), and the
/// thread stops when the last guard is dropped. Dropping it waits for the
/// thread to end (at most one reading of `/proc`; a GPU run in flight is
/// killed); no sample is emitted after that. On a runtime already shut down,
/// or if the thread cannot be started, the guard is inert
/// ([`ResourceSampling::is_running`] is false). The thread holds the runtime
/// weakly and never keeps the process alive.
///
/// For example, with a runtime `ray` and an insight layer installed:
///
/// ```text
/// let sampling = ray_core::insight::sample_resources(&ray, Duration::from_millis(500));
/// // … run the workload; the physical view fills with samples …
/// drop(sampling); // stops the sampler
/// ```
#[cfg(feature = "insight")]
pub fn sample_resources(ray: &crate::Ray, period: std::time::Duration) -> ResourceSampling {
    ResourceSampling {
        inner: crate::sampler::start(&ray.rt, period),
    }
}

/// The guard of a runtime's resource sampler (see [`sample_resources`]):
/// sampling stops when the last guard for the runtime is dropped.
#[must_use = "sampling stops when the guard is dropped"]
#[cfg(feature = "insight")]
pub struct ResourceSampling {
    inner: Option<std::sync::Arc<crate::sampler::Sampling>>,
}

#[cfg(feature = "insight")]
impl ResourceSampling {
    /// Whether the sampler thread runs: false for an inert guard, and once
    /// the runtime has shut down (the thread then ends within a period).
    pub fn is_running(&self) -> bool {
        self.inner.as_ref().is_some_and(|s| s.is_running())
    }

    /// The period samples are taken at (`None` for an inert guard).
    pub fn period(&self) -> Option<std::time::Duration> {
        self.inner.as_ref().map(|s| s.period())
    }
}

#[cfg(feature = "insight")]
impl std::fmt::Debug for ResourceSampling {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResourceSampling")
            .field("running", &self.is_running())
            .field("period", &self.period())
            .finish()
    }
}
