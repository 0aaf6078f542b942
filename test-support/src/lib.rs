//! Test helpers shared by the crates of the ray-rs workspace, for their
//! integration tests, benches and examples' tests only (`publish = false`;
//! nothing in a library depends on it).
//!
//! Each module that needs a crate of the workspace sits behind a feature
//! named after it, so a crate's tests build only what they use:
//! [`counting_alloc`] and [`process`] need nothing; `embedded` and `deadlock` need
//! ray-core, `insight_job` ray-core and serde_json, `recording` and
//! `workload` ray-insight, `http` ray-dashboard.

pub mod counting_alloc;
#[cfg(feature = "deadlock")]
pub mod deadlock;
#[cfg(feature = "embedded")]
pub mod embedded;
#[cfg(feature = "http")]
pub mod http;
#[cfg(feature = "insight_job")]
pub mod insight_job;
pub mod process;
#[cfg(feature = "recording")]
pub mod recording;
#[cfg(feature = "workload")]
pub mod workload;
