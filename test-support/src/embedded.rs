//! The embedded runtime most integration tests start from.

use ray_core::{Config, Ray};

/// An embedded runtime whose node has `cpus` CPUs.
pub async fn runtime(cpus: f64) -> Ray {
    ray_core::init_with(Config {
        num_cpus: Some(cpus),
        ..Config::default()
    })
    .await
    .expect("init")
}
