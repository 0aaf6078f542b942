//! Set-up shared by the criterion benches: one tokio runtime and one
//! embedded ray-rs runtime with 2 CPUs, and the group settings.

use std::time::Duration;

use criterion::measurement::WallTime;
use criterion::BenchmarkGroup;

/// A 2-thread tokio runtime and an embedded runtime with 2 CPUs on it.
pub fn runtimes() -> (tokio::runtime::Runtime, ray_core::Ray) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime for the bench");
    let ray = rt
        .block_on(ray_core::init_with(ray_core::Config {
            num_cpus: Some(2.0),
            ..Default::default()
        }))
        .expect("an embedded runtime");
    (rt, ray)
}

/// Few samples over a short time, so the whole suite runs in minutes.
pub fn configure(group: &mut BenchmarkGroup<'_, WallTime>) {
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(3));
}
