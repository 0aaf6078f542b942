//! Criterion benches of objects: W4 (`put` then `get` of a byte buffer of
//! 1 KiB, 1 MiB and 100 MiB, and `get_archived` of 100 MiB), on an embedded
//! runtime with 2 CPUs. The buffer copy each `put` consumes is made outside
//! the timed part.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};

// Each bench uses only part of the shared shapes.
#[allow(dead_code)]
#[path = "../examples/shapes/micro.rs"]
mod micro;
mod support;

fn objects(c: &mut Criterion) {
    let (rt, ray) = support::runtimes();

    let mut group = c.benchmark_group("objects");
    support::configure(&mut group);
    for (label, len) in micro::W4_SIZES {
        let data = micro::payload(len);
        group.throughput(Throughput::Bytes(len as u64));
        group.bench_function(format!("W4_put_get_{label}"), |b| {
            b.iter_batched(
                || data.clone(),
                |d| rt.block_on(micro::put_get(&ray, d)).expect("put and get"),
                BatchSize::PerIteration,
            )
        });
    }

    let (label, len) = micro::W4_SIZES[2];
    let big = rt.block_on(ray.put(micro::payload(len))).expect("put");
    group.throughput(Throughput::Bytes(len as u64));
    group.bench_function(format!("W4_get_archived_{label}"), |b| {
        b.iter(|| {
            rt.block_on(micro::get_archived(&big))
                .expect("zero-copy view")
                .len()
        })
    });
    group.finish();
    drop(big);
    ray.shutdown();
}

criterion_group!(benches, objects);
criterion_main!(benches);
