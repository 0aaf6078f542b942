//! W1–W7 of WORKLOADS.md, in exactly those shapes, on whatever runtime
//! the session holds (embedded or a cluster's driver).

use std::time::{Duration, Instant};

use anyhow::ensure;
use ray_core::prelude::*;
use serde_json::json;

use crate::measure::{gb_per_second, micros, per_second, Run};
use crate::{big_arg, measure, micro, tree};

/// W5: memory per actor is estimated on this step only; the 50 actors'
/// growth is below what RSS pages can resolve.
const W5_MEMORY_STEP: usize = 1_000;
/// W4: put+get repetitions per size, in the order of `micro::W4_SIZES`.
const W4_REPS: [usize; 3] = [10_000, 200, 5];
/// W4: `get_archived` repetitions on one existing object.
const W4_ARCHIVED_GETS: usize = 1_000;

/// Times `n` sequential runs of `op`; returns their latencies in µs, sorted.
async fn latencies<F, Fut>(n: usize, mut op: F) -> anyhow::Result<Vec<f64>>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ray_core::Result<()>>,
{
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let start = Instant::now();
        op().await?;
        out.push(micros(start.elapsed()));
    }
    out.sort_by(f64::total_cmp);
    Ok(out)
}

pub(crate) async fn w1(ray: &Ray) -> anyhow::Result<Run> {
    let start = Instant::now();
    let got = micro::task_batch(ray, micro::W1_TASKS).await?;
    let elapsed = start.elapsed();
    ensure!(
        got == micro::W1_TASKS,
        "{got} of {} results",
        micro::W1_TASKS
    );
    let mut run = Run::default();
    run.figure(
        "throughput",
        "tasks/s",
        per_second(micro::W1_TASKS, elapsed),
    );
    run.info.insert("tasks".into(), json!(micro::W1_TASKS));
    Ok(run)
}

pub(crate) async fn w2(ray: &Ray) -> anyhow::Result<Run> {
    let lat = latencies(micro::W2_ROUND_TRIPS, || micro::task_round_trip(ray)).await?;
    let mut run = Run::default();
    run.latency_figures("", &lat);
    run.info
        .insert("round_trips".into(), json!(micro::W2_ROUND_TRIPS));
    Ok(run)
}

pub(crate) async fn w3(ray: &Ray) -> anyhow::Result<Run> {
    let actor = micro::NoopActor::remote(ray)?;
    micro::call_round_trip(&actor).await?; // the actor is up before timing
    let start = Instant::now();
    let got = micro::call_batch(ray, &actor, micro::W3_CALLS).await?;
    let elapsed = start.elapsed();
    ensure!(
        got == micro::W3_CALLS,
        "{got} of {} results",
        micro::W3_CALLS
    );
    let mut run = Run::default();
    run.figure(
        "throughput",
        "calls/s",
        per_second(micro::W3_CALLS, elapsed),
    );
    let lat = latencies(micro::W3_ROUND_TRIPS, || micro::call_round_trip(&actor)).await?;
    run.latency_figures("round_trip_", &lat);
    run.info.insert("calls".into(), json!(micro::W3_CALLS));
    run.info
        .insert("round_trips".into(), json!(micro::W3_ROUND_TRIPS));
    Ok(run)
}

/// Times `reps` runs of `op` on a fresh copy of `data` each (the copy is
/// made outside the timed part); returns the total time.
async fn time_with_copies<F, Fut>(data: &[u8], reps: usize, mut op: F) -> anyhow::Result<Duration>
where
    F: FnMut(Vec<u8>) -> Fut,
    Fut: std::future::Future<Output = ray_core::Result<usize>>,
{
    let mut total = Duration::ZERO;
    for _ in 0..reps {
        let copy = data.to_vec();
        let start = Instant::now();
        let len = op(copy).await?;
        total += start.elapsed();
        ensure!(
            len == data.len(),
            "got {len} bytes back, put {}",
            data.len()
        );
    }
    Ok(total)
}

/// ops/s for small buffers, GB/s (10^9 bytes) of payload for large ones.
fn rate(len: usize, reps: usize, elapsed: Duration) -> (&'static str, f64) {
    if len < 1 << 20 {
        ("ops/s", per_second(reps, elapsed))
    } else {
        ("GB/s", gb_per_second(len * reps, elapsed))
    }
}

pub(crate) async fn w4(ray: &Ray) -> anyhow::Result<Run> {
    let mut run = Run::default();
    for ((label, len), reps) in micro::W4_SIZES.into_iter().zip(W4_REPS) {
        let data = micro::payload(len);
        let t = time_with_copies(&data, reps, |d| micro::put_get(ray, d)).await?;
        let (unit, value) = rate(len, reps, t);
        run.figure(format!("put_get_{label}"), unit, value);
        let t = time_with_copies(&data, reps, |d| micro::put_get_archived(ray, d)).await?;
        let (unit, value) = rate(len, reps, t);
        run.figure(format!("put_get_archived_{label}"), unit, value);

        let r = ray.put(data).await?;
        let start = Instant::now();
        for _ in 0..W4_ARCHIVED_GETS {
            let view = micro::get_archived(&r).await?;
            ensure!(view.len() == len, "archived view has {} bytes", view.len());
        }
        let ns = start.elapsed().as_secs_f64() * 1e9 / W4_ARCHIVED_GETS as f64;
        run.figure(format!("get_archived_{label}"), "ns/op", ns);
    }
    run.info.insert("reps".into(), json!(W4_REPS));
    run.info
        .insert("archived_gets".into(), json!(W4_ARCHIVED_GETS));
    Ok(run)
}

pub(crate) async fn w5(ray: &Ray) -> anyhow::Result<Run> {
    let mut run = Run::default();
    for n in micro::W5_ACTORS {
        let rss_before = measure::tree_rss_bytes()?;
        let start = Instant::now();
        let actors = micro::create_and_call(ray, n).await?;
        run.figure(
            format!("create_and_call_{n}"),
            "s",
            start.elapsed().as_secs_f64(),
        );
        if n == W5_MEMORY_STEP {
            let grown = measure::tree_rss_bytes()?.saturating_sub(rss_before);
            run.figure(
                format!("rss_per_actor_{n}"),
                "bytes (estimate)",
                grown as f64 / n as f64,
            );
        }
        drop(actors);
    }
    run.info.insert(
        "memory_note".into(),
        json!("estimate: RSS growth (/proc/PID/statm of this process and its descendants: in cluster mode the node daemons and workers too) while 1,000 actors are created and alive, divided by 1,000; RSS grows only when the allocator maps new pages, so after earlier workloads or runs it under-reports: run W5 alone for this figure"),
    );
    Ok(run)
}

pub(crate) async fn w6(ray: &Ray) -> anyhow::Result<Run> {
    let data = ray.put(micro::payload(big_arg::W6_BYTES)).await?;
    let mut run = Run::default();
    let view = w6_pass(ray, &data, big_arg::ArgAccess::View).await?;
    run.figure("throughput", "tasks/s", view);
    let copy = w6_pass(ray, &data, big_arg::ArgAccess::Deserialized).await?;
    run.figure("throughput_deserialized", "tasks/s", copy);
    run.info.insert("tasks".into(), json!(big_arg::W6_TASKS));
    run.info
        .insert("arg_bytes".into(), json!(big_arg::W6_BYTES));
    Ok(run)
}

/// One W6 batch, checked; returns tasks/s.
async fn w6_pass(
    ray: &Ray,
    data: &ObjectRef<Vec<u8>>,
    access: big_arg::ArgAccess,
) -> anyhow::Result<f64> {
    let start = Instant::now();
    let lens = big_arg::batch(ray, data, big_arg::W6_TASKS, access).await?;
    let elapsed = start.elapsed();
    ensure!(
        lens.len() == big_arg::W6_TASKS && lens.iter().all(|&l| l == big_arg::W6_BYTES as u64),
        "a task saw the wrong length"
    );
    Ok(per_second(big_arg::W6_TASKS, elapsed))
}

pub(crate) async fn w7(ray: &Ray) -> anyhow::Result<Run> {
    let t = tree::run(ray, tree::DEFAULT_SEED).await?;
    let mut run = Run::default();
    run.figure("end_to_end", "s", t.seconds);
    run.info.insert("seed".into(), json!(tree::DEFAULT_SEED));
    run.info.insert("depth".into(), json!(tree::DEPTH));
    run.info.insert("actors".into(), json!(t.actors));
    run.info.insert("calls".into(), json!(t.calls));
    Ok(run)
}
