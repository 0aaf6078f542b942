//! Criterion benches of tasks: W1 (a batch of 20,000 no-op tasks submitted,
//! then all gotten) and W2 (one `get(noop::remote())` round trip), on an
//! embedded runtime with 2 CPUs.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};

// Each bench uses only part of the shared shapes.
#[allow(dead_code)]
#[path = "../examples/shapes/micro.rs"]
mod micro;
mod support;

fn tasks(c: &mut Criterion) {
    let (rt, ray) = support::runtimes();

    let mut group = c.benchmark_group("tasks");
    support::configure(&mut group);
    group.throughput(Throughput::Elements(micro::W1_TASKS as u64));
    group.bench_function("W1_batch_20000_noop", |b| {
        b.iter(|| {
            rt.block_on(micro::task_batch(&ray, micro::W1_TASKS))
                .expect("batch ran")
        })
    });
    group.throughput(Throughput::Elements(1));
    group.bench_function("W2_round_trip", |b| {
        b.iter(|| {
            rt.block_on(micro::task_round_trip(&ray))
                .expect("round trip ran")
        })
    });
    group.finish();
    ray.shutdown();
}

criterion_group!(benches, tasks);
criterion_main!(benches);
