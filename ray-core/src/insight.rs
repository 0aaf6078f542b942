//! Hooks a program calls so that insight can slice its views: context labels;
//! and periodic resource samples for its physical view.
//!
//! These functions only emit `tracing` events that an insight layer, if
//! installed, records. The runtime installs one itself when asked
//! ([`Config::insight`](crate::Config::insight), `RAYRS_INSIGHT=1` or
//! `RAYRS_INSIGHT_LOG=FILE`); [`Ray::insight`](crate::Ray::insight) then
//! gives the [`Insight`] handle on the views.

pub use crate::recording::{Insight, InsightOptions, ENV_INSIGHT, ENV_INSIGHT_LOG, PUMP_EVERY};

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
pub fn sample_resources(ray: &crate::Ray, period: std::time::Duration) -> ResourceSampling {
    ResourceSampling {
        inner: crate::sampler::start(&ray.rt, period),
    }
}

/// The guard of a runtime's resource sampler (see [`sample_resources`]):
/// sampling stops when the last guard for the runtime is dropped.
#[must_use = "sampling stops when the guard is dropped"]
pub struct ResourceSampling {
    inner: Option<std::sync::Arc<crate::sampler::Sampling>>,
}

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

impl std::fmt::Debug for ResourceSampling {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResourceSampling")
            .field("running", &self.is_running())
            .field("period", &self.period())
            .finish()
    }
}
