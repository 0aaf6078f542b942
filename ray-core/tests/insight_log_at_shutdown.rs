//! A program that records into an event log and ends right after
//! `shutdown()` keeps its whole log: shutdown moves every thread's records
//! into it before it returns (one test per file: recording is
//! process-wide).

use ray_core::insight::InsightOptions;
use ray_core::prelude::*;
use ray_core::Config;
use ray_insight::RecordKind;

#[remote]
fn double(x: u64) -> u64 {
    x * 2
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_is_whole_as_soon_as_shutdown_returns() {
    let path =
        std::env::temp_dir().join(format!("rayrs-log-at-shutdown-{}.log", std::process::id()));
    let ray = ray_core::init_with(Config {
        num_cpus: Some(2.0),
        insight: Some(InsightOptions {
            log: Some(path.clone()),
            dashboard: None,
        }),
        ..Config::default()
    })
    .await
    .expect("runtime records into the log");
    const TASKS: u64 = 20;
    let refs: Vec<_> = (0..TASKS)
        .map(|i| double::remote(&ray, i).unwrap())
        .collect();
    for (i, r) in refs.into_iter().enumerate() {
        assert_eq!(r.get().await.unwrap(), 2 * i as u64);
    }
    ray.shutdown();
    // No settle, no sleep: what a program's last line sees.
    let log = ray_insight::log::read_log(&path).expect("a whole log");
    assert!(log.stopped.is_none(), "{:?}", log.stopped);
    let runs = log
        .records
        .iter()
        .filter(|r| r.kind == RecordKind::SpanNew && r.name == "task.run")
        .count() as u64;
    assert_eq!(runs, TASKS, "every task's run is in the log");
    let _ = std::fs::remove_file(&path);
}
