//! Insight on a real cluster, one actor call sent again to its actor's
//! next life: the head's views count the lost run failed and the resend
//! finished. (A file of its own: recording is process-wide, and two
//! recording drivers in one test process would mix their records.)

use std::time::{Duration, Instant};

use ray_core::prelude::*;
use ray_core::Cluster;

#[path = "support/head_views.rs"]
mod head_views;
use head_views::{edge_field, poll_logical, recording_driver};

/// An actor whose first call aborts its process when told to (`go`
/// exists), leaving `marker`; the call's resend to its next life returns.
#[remote]
struct Phoenix;

#[remote]
impl Phoenix {
    fn new() -> Self {
        Phoenix
    }
    fn die_once(&self, marker: String, go: String) -> u32 {
        if !std::path::Path::new(&marker).exists() {
            std::fs::write(&marker, "x").unwrap();
            while !std::path::Path::new(&go).exists() {
                std::thread::sleep(Duration::from_millis(10));
            }
            std::process::abort();
        }
        std::process::id()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_actor_call_resent_to_the_next_life_counts_its_lost_run_failed_and_its_resend_finished()
{
    let cluster = Cluster::local(1).await.expect("cluster starts");
    let ray = recording_driver(&cluster).await;
    let insight = ray.insight().expect("the driver records");
    let a = Phoenix::options()
        .max_restarts(1)
        .max_task_retries(1)
        .remote(&ray)
        .unwrap();
    let dir = std::env::temp_dir();
    let tag = format!("{}-{:?}", std::process::id(), Instant::now());
    let marker = dir.join(format!("rayrs-phoenix-marker-{tag}"));
    let go = dir.join(format!("rayrs-phoenix-go-{tag}"));
    let call = a
        .die_once(marker.display().to_string(), go.display().to_string())
        .unwrap();
    insight.flush().await;
    // The first run is seen running before its process dies under it.
    let logical = poll_logical(&cluster, |l| edge_field(l, "die_once", "running") == 1).await;
    assert_eq!(
        edge_field(&logical, "die_once", "running"),
        1,
        "{logical:#}"
    );
    std::fs::write(&go, "go").unwrap();
    call.get().await.expect("resent to the actor's next life");
    insight.flush().await;
    let logical = poll_logical(&cluster, |l| edge_field(l, "die_once", "count") == 2).await;
    assert_eq!(edge_field(&logical, "die_once", "count"), 2, "{logical:#}");
    assert_eq!(edge_field(&logical, "die_once", "failed"), 1, "{logical:#}");
    assert_eq!(
        edge_field(&logical, "die_once", "running"),
        0,
        "{logical:#}"
    );
    for f in [&marker, &go] {
        let _ = std::fs::remove_file(f);
    }
    ray.shutdown();
}
