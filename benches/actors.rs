//! Criterion benches of actor calls: W3 (a batch of 20,000 calls to one
//! actor's no-op method, then all gotten; and one call round trip), on an
//! embedded runtime with 2 CPUs.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};

// Each bench uses only part of the shared shapes.
#[allow(dead_code)]
#[path = "../examples/shapes/micro.rs"]
mod micro;
mod support;

fn actors(c: &mut Criterion) {
    let (rt, ray) = support::runtimes();
    let actor = micro::NoopActor::remote(&ray).expect("actor created");

    let mut group = c.benchmark_group("actors");
    support::configure(&mut group);
    group.throughput(Throughput::Elements(micro::W3_CALLS as u64));
    group.bench_function("W3_batch_20000_calls", |b| {
        b.iter(|| {
            rt.block_on(micro::call_batch(&ray, &actor, micro::W3_CALLS))
                .expect("batch ran")
        })
    });
    group.throughput(Throughput::Elements(1));
    group.bench_function("W3_round_trip", |b| {
        b.iter(|| {
            rt.block_on(micro::call_round_trip(&actor))
                .expect("round trip ran")
        })
    });
    group.finish();
    drop(actor);
    ray.shutdown();
}

criterion_group!(benches, actors);
criterion_main!(benches);
