//! `ray_core::insight::sample_resources` samples the process while a task
//! keeps a core busy, insight's physical view keeps the samples per process
//! with the node's requested CPUs, and sampling stops with its guard or the
//! runtime (one test per file: it installs the process's global subscriber).

use ray_test_support::{embedded, recording};

use std::time::{Duration, Instant};

use ray_core::prelude::*;
use ray_insight::views::{PhysicalView, ResourcePoint};
use ray_insight::{Collector, Limits, MemorySink, Record, RecordKind, Views};

const PERIOD: Duration = Duration::from_millis(20);

/// Keeps one core busy for `ms` milliseconds.
#[remote]
fn spin(ms: u64) -> u64 {
    let start = Instant::now();
    let mut x = 0u64;
    while start.elapsed() < Duration::from_millis(ms) {
        x = std::hint::black_box(x.wrapping_add(1));
    }
    x
}

fn drain(collector: &Collector, sink: &mut MemorySink) {
    ray_insight::InsightLayer::flush_current_thread();
    collector.drain_into(sink);
}

fn samples_in(records: &[Record]) -> usize {
    records
        .iter()
        .filter(|r| r.kind == RecordKind::Event && r.name == "resource.sample")
        .count()
}

/// When the `spin` task ran: its `task.run` span's open and close times.
fn spin_window(records: &[Record]) -> Option<(u64, u64)> {
    let open = records.iter().find(|r| {
        r.kind == RecordKind::SpanNew
            && r.name == "task.run"
            && r.field("function")
                .and_then(|f| f.as_str())
                .is_some_and(|f| f.ends_with("::spin"))
    })?;
    // A close record, or the opening itself when the run was one record.
    let close = records
        .iter()
        .filter(|r| r.span == open.span)
        .find_map(Record::closed_at)?;
    Some((open.at_nanos, close))
}

fn has_gpu_sample(records: &[Record]) -> bool {
    records
        .iter()
        .any(|r| r.name == "resource.sample" && r.field("gpu_count").is_some())
}

fn view_of(records: &[Record]) -> PhysicalView {
    // Room for every sample of the test, however long it waited.
    let mut views = Views::new(Limits {
        max_samples_per_process: 100_000,
        ..Limits::default()
    });
    for r in records {
        views.apply(r);
    }
    views.snapshot().physical()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resource_samples_show_a_busy_task_and_stop_with_their_guard() {
    let collector = recording::record_globally();
    // Where GPUs can be read, samples carry them too.
    let gpus = ray_insight::resources::GpuSampler::detect().and_then(|mut g| g.sample());
    let ray = embedded::runtime(2.0).await;
    let sampling = ray_core::insight::sample_resources(&ray, PERIOD);
    assert!(sampling.is_running());
    assert_eq!(sampling.period(), Some(PERIOD));
    // A second request for the same runtime shares the running sampler.
    let again = ray_core::insight::sample_resources(&ray, Duration::from_secs(5));
    assert_eq!(again.period(), Some(PERIOD));
    drop(again);
    assert!(sampling.is_running(), "the first guard still holds it");

    tokio::time::sleep(PERIOD * 3).await;
    spin::remote(&ray, 300).unwrap().get().await.unwrap();
    tokio::time::sleep(PERIOD * 3).await;

    let mut sink = MemorySink::new(100_000);
    drain(&collector, &mut sink);
    // A GPU reading runs beside the sampler and comes with a later sample.
    let deadline = Instant::now() + Duration::from_secs(10);
    while gpus.is_some() && !has_gpu_sample(sink.records()) && Instant::now() < deadline {
        tokio::time::sleep(PERIOD).await;
        drain(&collector, &mut sink);
    }
    let records = sink.records();
    let (started, ended) = spin_window(records).expect("the spin task's span, opened and closed");
    let physical = view_of(records);
    let node_id = ray.node_id().to_string();
    let node = physical
        .nodes
        .iter()
        .find(|n| n.node_id == node_id)
        .unwrap_or_else(|| panic!("{node_id} in {physical:?}"));
    let samples: Vec<ResourcePoint> = node
        .workers
        .iter()
        .flat_map(|w| w.samples.iter().copied())
        .collect();
    assert!(samples.len() >= 5, "{samples:?}");
    let during: Vec<&ResourcePoint> = samples
        .iter()
        .filter(|p| (started..=ended).contains(&p.at_nanos))
        .collect();
    assert!(
        during
            .iter()
            .any(|p| p.cpu_percent.is_some_and(|c| c > 20.0)),
        "a core was busy: {during:?}"
    );
    assert!(
        during.iter().any(|p| p.cpu_used.is_some_and(|c| c >= 1.0)),
        "the task held a CPU: {during:?}"
    );
    assert!(
        samples
            .iter()
            .any(|p| p.rss_bytes.is_some_and(|b| b > 1 << 20)),
        "{samples:?}"
    );
    assert_eq!(node.totals.cpu_total, Some(2.0), "{:?}", node.totals);
    assert_eq!(node.totals.processes, 1, "{:?}", node.totals);
    let worker = node
        .workers
        .iter()
        .find(|w| !w.samples.is_empty())
        .expect("the sampled process");
    assert_eq!(worker.pid, Some(u64::from(std::process::id())));
    assert_eq!(node.totals.cpu_used, Some(0.0), "nothing runs now");
    if let Some(gpus) = gpus {
        assert_eq!(
            node.totals.gpu_count,
            Some(gpus.count() as f64),
            "{:?}",
            node.resources
        );
        assert!(node.totals.gpu_mem_total_bytes.is_some_and(|b| b > 0.0));
    }

    // Dropping the guard stops the thread: nothing arrives after it.
    drop(sampling);
    drain(&collector, &mut sink);
    let at_stop = samples_in(sink.records());
    tokio::time::sleep(PERIOD * 3).await;
    drain(&collector, &mut sink);
    assert_eq!(
        samples_in(sink.records()),
        at_stop,
        "samples after the guard dropped"
    );

    // A fresh sampler stops by itself when the runtime shuts down.
    let sampling = ray_core::insight::sample_resources(&ray, PERIOD);
    assert!(sampling.is_running());
    ray.shutdown();
    let deadline = Instant::now() + Duration::from_secs(5);
    while sampling.is_running() && Instant::now() < deadline {
        tokio::time::sleep(PERIOD / 2).await;
    }
    assert!(!sampling.is_running(), "the sampler ended with the runtime");
    drop(sampling);
    let after_shutdown = ray_core::insight::sample_resources(&ray, PERIOD);
    assert!(!after_shutdown.is_running());
    assert_eq!(after_shutdown.period(), None, "an inert guard");
}
