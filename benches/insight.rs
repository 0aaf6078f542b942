//! W8, insight overhead: W1 (20,000 no-op tasks) and W3 (20,000 calls to one
//! actor) with the insight layer off and recording, on an embedded runtime
//! with 2 CPUs; and the layer's cost per recorded event and span.
//!
//! A global subscriber can be set once per process, and the runtime's pool
//! threads see only the global one, so the order is fixed: the OFF variants
//! run first with no subscriber at all, then the layer is installed as the
//! global default (with a thread draining its queue into a counting sink, so
//! batches are consumed rather than dropped), then the ON variants and the
//! per-event micro-benches run.
//!
//! Besides criterion's figures, the bench times each workload itself
//! ([`TIMED_RUNS`] runs, median) right before and right after installing the
//! layer and prints the ON/OFF ratio; the goal is a ratio of at most 1.05.

use std::fmt;
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use criterion::{criterion_group, Criterion, Throughput};
use ray_insight::{
    Collector, FieldStr, FieldValue, InsightConfig, InsightLayer, MemorySink, Record, Sink, Views,
};
use ray_test_support::workload::{feed_all, Shape, BATCH, FULL};
use tracing_subscriber::layer::SubscriberExt;

// Each bench uses only part of the shared shapes.
#[allow(dead_code)]
#[path = "../examples/shapes/micro.rs"]
mod micro;
mod support;

/// Runs of each workload timed by hand for the printed ON/OFF ratio.
const TIMED_RUNS: usize = 7;

/// A sink that counts records and keeps none: the bench measures recording,
/// not what a real sink does with the records.
#[derive(Default)]
struct CountingSink {
    records: u64,
}

impl Sink for CountingSink {
    fn accept(&mut self, batch: &[Record]) {
        self.records += batch.len() as u64;
    }

    /// Counts a drained batch without expanding it.
    fn accept_drained(&mut self, batch: &mut ray_insight::Drained<'_>) {
        self.records += batch.len() as u64;
    }
}

/// A thread that drains the collector every millisecond until stopped.
struct Drainer {
    stop: Arc<AtomicBool>,
    drained: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

impl Drainer {
    fn start(collector: Collector) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let drained = Arc::new(AtomicU64::new(0));
        let thread = std::thread::spawn({
            let (stop, drained) = (Arc::clone(&stop), Arc::clone(&drained));
            move || {
                let mut sink = CountingSink::default();
                while !stop.load(Ordering::Relaxed) {
                    collector.drain_into(&mut sink);
                    drained.store(sink.records, Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(1));
                }
                collector.drain_into(&mut sink);
                drained.store(sink.records, Ordering::Relaxed);
            }
        });
        Self {
            stop,
            drained,
            thread: Some(thread),
        }
    }

    /// Stops the thread; returns how many records it drained.
    fn stop(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            thread.join().expect("the drain thread does not panic");
        }
        self.drained.load(Ordering::Relaxed)
    }
}

/// An id rendered with `Display`, as the runtime's `TaskId`, `NodeId`… are
/// (`task_id = %id`).
struct FakeId(u64);

impl fmt::Display for FakeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:08x}-{}", self.0 >> 20, self.0 & 0xf_ffff)
    }
}

/// Median of `TIMED_RUNS` runs of `f`, after one warm-up run.
fn median_time(mut f: impl FnMut()) -> Duration {
    f();
    let mut times: Vec<Duration> = (0..TIMED_RUNS)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed()
        })
        .collect();
    times.sort();
    times[TIMED_RUNS / 2]
}

fn insight(c: &mut Criterion) {
    let (rt, ray) = support::runtimes();
    let actor = micro::NoopActor::remote(&ray).expect("actor created");
    let w1 = || {
        rt.block_on(micro::task_batch(&ray, micro::W1_TASKS))
            .expect("batch ran");
    };
    let w3 = || {
        rt.block_on(micro::call_batch(&ray, &actor, micro::W3_CALLS))
            .expect("batch ran");
    };

    // OFF: no subscriber anywhere in the process.
    let mut group = c.benchmark_group("insight");
    support::configure(&mut group);
    group.throughput(Throughput::Elements(micro::W1_TASKS as u64));
    group.bench_function("W1_batch_20000_noop/off", |b| b.iter(w1));
    group.throughput(Throughput::Elements(micro::W3_CALLS as u64));
    group.bench_function("W3_batch_20000_calls/off", |b| b.iter(w3));
    let w1_off = median_time(w1);
    let w3_off = median_time(w3);

    // ON: the layer as the global default, seen by every runtime thread.
    let (layer, collector) = InsightLayer::new(InsightConfig::default());
    // As the runtime installs it: its own records skip `tracing`'s dispatch.
    assert!(layer.record_runtime_directly());
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(layer))
        .expect("no global subscriber was set before");
    let drainer = Drainer::start(collector.clone());
    let w1_on = median_time(w1);
    let w3_on = median_time(w3);
    group.throughput(Throughput::Elements(micro::W1_TASKS as u64));
    group.bench_function("W1_batch_20000_noop/on", |b| b.iter(w1));
    group.throughput(Throughput::Elements(micro::W3_CALLS as u64));
    group.bench_function("W3_batch_20000_calls/on", |b| b.iter(w3));

    // The layer's cost per record on the calling thread.
    group.throughput(Throughput::Elements(1));
    let mut seq = 0u64;
    group.bench_function("event_task_submit_3_fields", |b| {
        b.iter(|| {
            seq += 1;
            tracing::trace!(
                name: "task.submit",
                target: "ray::task",
                task_id = %FakeId(black_box(seq)),
                function = "noop",
                parent_task = None::<FakeId>.map(tracing::field::display)
            );
        })
    });
    group.bench_function("span_task_run_5_fields_new_and_close", |b| {
        b.iter(|| {
            seq += 1;
            let span = tracing::trace_span!(
                target: "ray::task",
                "task.run",
                task_id = %FakeId(black_box(seq)),
                function = "noop",
                attempt = 0u32,
                node_id = %FakeId(1),
                worker_id = %FakeId(2),
            );
            drop(black_box(span));
        })
    });
    // The same shapes with ids as plain integers: what recording costs
    // without formatting a `Display` value into an allocated string.
    group.bench_function("event_task_submit_3_fields_u64_ids", |b| {
        b.iter(|| {
            seq += 1;
            tracing::trace!(
                name: "task.submit",
                target: "ray::task",
                task_id = black_box(seq),
                function = "noop",
                parent_task = None::<u64>
            );
        })
    });
    group.bench_function("span_task_run_5_fields_u64_ids_new_and_close", |b| {
        b.iter(|| {
            seq += 1;
            let span = tracing::trace_span!(
                target: "ray::task",
                "task.run",
                task_id = black_box(seq),
                function = "noop",
                attempt = 0u32,
                node_id = 1u64,
                worker_id = 2u64,
            );
            drop(black_box(span));
        })
    });
    // What the runtime records now: the same records written straight
    // into the thread's buffer (`ray_insight::direct`), ids as integers and
    // names by reference.
    let id = |f: &mut ray_insight::Fields, key: &'static str, v: u64| {
        f.push(key, FieldValue::U128 { hi: 1, lo: v });
    };
    group.bench_function("direct_event_task_submit_3_fields", |b| {
        b.iter(|| {
            seq += 1;
            ray_insight::direct::event("task.submit", "ray::task", |f| {
                id(f, "task_id", black_box(seq));
                f.push("function", FieldValue::Str(FieldStr::from_static("noop")));
                id(f, "parent_task", 7);
            });
        })
    });
    group.bench_function("direct_span_task_run_5_fields_new_and_close", |b| {
        b.iter(|| {
            seq += 1;
            let span = ray_insight::direct::open_span("task.run", "ray::task", |f| {
                id(f, "task_id", black_box(seq));
                f.push("function", FieldValue::Str(FieldStr::from_static("noop")));
                id(f, "parent_task", 7);
                f.push("node_id", FieldValue::U64(1));
                f.push("worker_id", FieldValue::U64(2));
            });
            drop(black_box(span));
        })
    });
    // What the runtime writes today: the compact shapes (`direct::submit`,
    // `direct::object`, `direct::open_run`), one record each (a run's
    // close folds into its opening).
    group.bench_function("direct_packed_task_submit", |b| {
        b.iter(|| {
            seq += 1;
            ray_insight::direct::submit(&ray_insight::direct::SubmitInfo {
                task: u128::from(black_box(seq)),
                function: "noop",
                actor: None,
                parent_task: Some(7),
                parent_span: 0,
            });
        })
    });
    group.bench_function("direct_packed_object_get", |b| {
        b.iter(|| {
            seq += 1;
            ray_insight::direct::object(&ray_insight::direct::ObjectInfo {
                object: u128::from(black_box(seq)),
                bytes: 8,
                task: None,
                node: 1,
                get: Some(false),
            });
        })
    });
    group.bench_function("direct_packed_task_run_open_and_close", |b| {
        b.iter(|| {
            seq += 1;
            let run = ray_insight::direct::open_run(ray_insight::direct::RunInfo {
                kind: ray_insight::direct::RunKind::Task { function: "noop" },
                task: u128::from(black_box(seq)),
                attempt: 0,
                parent_task: Some(7),
                parent_span: 0,
                node: 1,
                worker: 2,
            });
            run.close_run(None, None);
        })
    });
    group.finish();

    InsightLayer::flush_current_thread();
    let drained = drainer.stop();
    println!(
        "insight W8 (hand-timed, median of {TIMED_RUNS}): \
         W1 off {w1_off:?} on {w1_on:?} ratio {:.3}; \
         W3 off {w3_off:?} on {w3_on:?} ratio {:.3}",
        w1_on.as_secs_f64() / w1_off.as_secs_f64(),
        w3_on.as_secs_f64() / w3_off.as_secs_f64(),
    );
    println!(
        "insight W8 records: recorded {} drained {drained} dropped {}",
        collector.recorded(),
        collector.dropped(),
    );
    drop(actor);
    ray.shutdown();
}

/// The collector's side: records applied to the views, per record, on a
/// runtime-shaped stream (tasks and actor calls with their submits, runs,
/// gets, puts and waits; see `ray_test_support::workload`) of 20,000 tasks.
fn ingest(c: &mut Criterion) {
    let (records, count) = ingest_stream();
    let batches: Vec<&[Record]> = records.records().chunks(BATCH).collect();
    let mut group = c.benchmark_group("insight");
    support::configure(&mut group);
    group.throughput(Throughput::Elements(count));
    group.bench_function("views_apply_20000_task_stream", |b| {
        b.iter(|| {
            let mut views = Views::default();
            for batch in &batches {
                views.accept(batch);
            }
            black_box(views.stats().applied)
        })
    });
    group.finish();
}

/// The runtime-shaped stream [`ingest`] applies, and its record count.
fn ingest_stream() -> (MemorySink, u64) {
    let shape = Shape {
        tasks: 20_000,
        actors: 100,
        ..FULL
    };
    let mut records = MemorySink::new(usize::MAX);
    let count = feed_all(shape, &mut records);
    (records, count)
}

criterion_group!(benches, insight, ingest);

/// With `RAYRS_BENCH_INGEST_ONCE` set, applies the [`ingest`] stream once
/// and exits: a deterministic run to count the views' cost with
/// `valgrind --tool=callgrind --toggle-collect='*Views*accept*'`, which,
/// unlike timings on a shared VM, compares two builds to the percent.
fn main() {
    if std::env::var_os("RAYRS_BENCH_INGEST_ONCE").is_some() {
        let (records, _) = ingest_stream();
        let mut views = Views::default();
        for batch in records.records().chunks(BATCH) {
            views.accept(batch);
        }
        println!("applied {}", views.stats().applied);
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
