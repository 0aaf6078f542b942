//! A job whose executable is another build than its driver's: the node
//! refuses its workers by build fingerprint. The `rayrs` binary links
//! ray-core (so it turns into a worker when a node starts it as one) but
//! registers no remote functions, so it is "another build" at hand.

use std::time::Duration;

use ray_core::prelude::*;
use ray_core::{Cluster, Error};

#[remote]
fn where_am_i(x: u64) -> (u64, u64) {
    std::thread::sleep(Duration::from_millis(20));
    (x, Ray::current().expect("in a task").node_id().0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_of_another_build_is_refused() {
    let cluster = Cluster::local(1).await.expect("cluster starts");
    // The job claims the `rayrs` binary as its executable: its workers
    // start, but report another build fingerprint (no remote functions).
    let config = ray_core::Config {
        executable: Some(env!("CARGO_BIN_EXE_rayrs").into()),
        ..cluster.config()
    };
    let ray = ray_core::init_with(config).await.expect("driver joins");
    let err = where_am_i::remote(&ray, 1)
        .unwrap()
        .get_timeout(Duration::from_secs(60))
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(err, Error::Cluster { .. }) && text.contains("was built as"),
        "expected a fingerprint refusal, got {err:?}"
    );
    ray.shutdown();
}
