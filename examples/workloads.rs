//! The workload harness: W1–W7 of WORKLOADS.md, in exactly those shapes.
//!
//! `cargo run --release --example workloads -- --mode embedded [--cpus N] [W1 W2 ...]`
//!
//! No ids runs W1..W7. Each workload runs 3 times on a fresh embedded
//! runtime and prints one JSON line: the headline figure's median, min and
//! max at the top level, every figure under `figures`, and counts that are
//! not measurements under `info`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use ray_core::prelude::*;
use ray_core::Config;
use serde_json::{json, Value};

#[path = "shapes/micro.rs"]
mod micro;
#[path = "shapes/tree.rs"]
mod tree;

/// Runs per workload; the figures are their median, min and max.
const RUNS: usize = 3;
/// W5: the actor counts, in order.
const W5_ACTORS: [usize; 2] = [50, 1_000];
/// W5: memory per actor is estimated on this step only; the 50 actors'
/// growth is below what RSS pages can resolve.
const W5_MEMORY_STEP: usize = 1_000;
/// W6: tasks, each taking the one shared object.
const W6_TASKS: usize = 200;
/// W6: size of the shared object.
const W6_BYTES: usize = 10 << 20;
/// W4: put+get repetitions per size, in the order of `micro::W4_SIZES`.
const W4_REPS: [usize; 3] = [10_000, 200, 5];
/// W4: `get_archived` repetitions on one existing object.
const W4_ARCHIVED_GETS: usize = 1_000;
const ALL: [&str; 7] = ["W1", "W2", "W3", "W4", "W5", "W6", "W7"];

/// W6: the task that takes the 10 MiB object as a zero-copy view, the
/// counterpart of Ray handing a task a read-only numpy array.
#[remote]
fn byte_len_view(data: ray_core::ArchivedRef<Vec<u8>>) -> u64 {
    data.len() as u64
}

/// W6 variant: the same task deserializing its argument (one 10 MiB copy).
#[remote]
fn byte_len(data: Vec<u8>) -> u64 {
    data.len() as u64
}

/// One figure measured in one run.
struct Measure {
    name: String,
    unit: &'static str,
    value: f64,
}

fn measure(name: impl Into<String>, unit: &'static str, value: f64) -> Measure {
    Measure {
        name: name.into(),
        unit,
        value,
    }
}

/// What one run of a workload produced: figures (the first is the
/// headline) and counts that describe the run rather than measure it.
#[derive(Default)]
struct Run {
    figures: Vec<Measure>,
    info: serde_json::Map<String, Value>,
}

/// Median, min and max of one figure over the runs.
struct Summary {
    median: f64,
    min: f64,
    max: f64,
}

fn summarize(samples: &[f64]) -> Summary {
    let mut s = samples.to_vec();
    s.sort_by(f64::total_cmp);
    Summary {
        median: percentile(&s, 50.0),
        min: s[0],
        max: s[s.len() - 1],
    }
}

/// The nearest-rank `p`-th percentile of sorted, non-empty `sorted`.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn per_second(n: usize, elapsed: Duration) -> f64 {
    n as f64 / elapsed.as_secs_f64()
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

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

fn latency_figures(run: &mut Run, prefix: &str, sorted: &[f64]) {
    run.figures.push(measure(
        format!("{prefix}p50"),
        "us",
        percentile(sorted, 50.0),
    ));
    run.figures.push(measure(
        format!("{prefix}p99"),
        "us",
        percentile(sorted, 99.0),
    ));
}

async fn w1(ray: &Ray) -> anyhow::Result<Run> {
    let start = Instant::now();
    micro::task_batch(ray, micro::W1_TASKS).await?;
    let mut run = Run::default();
    run.figures.push(measure(
        "throughput",
        "tasks/s",
        per_second(micro::W1_TASKS, start.elapsed()),
    ));
    run.info.insert("tasks".into(), json!(micro::W1_TASKS));
    Ok(run)
}

async fn w2(ray: &Ray) -> anyhow::Result<Run> {
    let lat = latencies(micro::W2_ROUND_TRIPS, || micro::task_round_trip(ray)).await?;
    let mut run = Run::default();
    latency_figures(&mut run, "", &lat);
    run.info
        .insert("round_trips".into(), json!(micro::W2_ROUND_TRIPS));
    Ok(run)
}

async fn w3(ray: &Ray) -> anyhow::Result<Run> {
    let actor = micro::NoopActor::remote(ray)?;
    micro::call_round_trip(&actor).await?; // the actor is up before timing
    let start = Instant::now();
    micro::call_batch(ray, &actor, micro::W3_CALLS).await?;
    let mut run = Run::default();
    run.figures.push(measure(
        "throughput",
        "calls/s",
        per_second(micro::W3_CALLS, start.elapsed()),
    ));
    let lat = latencies(micro::W3_ROUND_TRIPS, || micro::call_round_trip(&actor)).await?;
    latency_figures(&mut run, "round_trip_", &lat);
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
        anyhow::ensure!(
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
        ("GB/s", (len * reps) as f64 / elapsed.as_secs_f64() / 1e9)
    }
}

async fn w4(ray: &Ray) -> anyhow::Result<Run> {
    let mut run = Run::default();
    for ((label, len), reps) in micro::W4_SIZES.into_iter().zip(W4_REPS) {
        let data = micro::payload(len);
        let t = time_with_copies(&data, reps, |d| micro::put_get(ray, d)).await?;
        let (unit, value) = rate(len, reps, t);
        run.figures
            .push(measure(format!("put_get_{label}"), unit, value));
        let t = time_with_copies(&data, reps, |d| micro::put_get_archived(ray, d)).await?;
        let (unit, value) = rate(len, reps, t);
        run.figures
            .push(measure(format!("put_get_archived_{label}"), unit, value));

        let r = ray.put(data).await?;
        let start = Instant::now();
        for _ in 0..W4_ARCHIVED_GETS {
            let view = micro::get_archived(&r).await?;
            anyhow::ensure!(view.len() == len, "archived view has {} bytes", view.len());
        }
        let ns = start.elapsed().as_secs_f64() * 1e9 / W4_ARCHIVED_GETS as f64;
        run.figures
            .push(measure(format!("get_archived_{label}"), "ns/op", ns));
    }
    run.info.insert("reps".into(), json!(W4_REPS));
    run.info
        .insert("archived_gets".into(), json!(W4_ARCHIVED_GETS));
    Ok(run)
}

/// Resident set size of this process, from /proc/self/statm.
fn rss_bytes() -> anyhow::Result<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").context("read /proc/self/statm")?;
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .context("statm has a resident field")?
        .parse()
        .context("statm resident field")?;
    Ok(pages * 4096)
}

async fn w5(ray: &Ray) -> anyhow::Result<Run> {
    let mut run = Run::default();
    for n in W5_ACTORS {
        let rss_before = rss_bytes()?;
        let start = Instant::now();
        let actors = (0..n)
            .map(|_| micro::NoopActor::remote(ray))
            .collect::<ray_core::Result<Vec<_>>>()?;
        let calls = actors
            .iter()
            .map(|a| a.noop())
            .collect::<ray_core::Result<Vec<_>>>()?;
        ray.get_all(&calls).await?;
        run.figures.push(measure(
            format!("create_and_call_{n}"),
            "s",
            start.elapsed().as_secs_f64(),
        ));
        if n == W5_MEMORY_STEP {
            let grown = rss_bytes()?.saturating_sub(rss_before);
            run.figures.push(measure(
                format!("rss_per_actor_{n}"),
                "bytes (estimate)",
                grown as f64 / n as f64,
            ));
        }
    }
    run.info.insert(
        "memory_note".into(),
        json!("estimate: RSS growth (/proc/self/statm) while 1,000 actors are created and alive, divided by 1,000; RSS grows only when the allocator maps new pages, so after earlier workloads or runs it under-reports: run W5 alone for this figure"),
    );
    Ok(run)
}

async fn w6(ray: &Ray) -> anyhow::Result<Run> {
    let data = ray.put(micro::payload(W6_BYTES)).await?;
    let mut run = Run::default();
    let view = w6_pass(ray, || byte_len_view::remote(ray, &data)).await?;
    run.figures.push(measure("throughput", "tasks/s", view));
    let copy = w6_pass(ray, || byte_len::remote(ray, &data)).await?;
    run.figures
        .push(measure("throughput_deserialized", "tasks/s", copy));
    run.info.insert("tasks".into(), json!(W6_TASKS));
    run.info.insert("arg_bytes".into(), json!(W6_BYTES));
    Ok(run)
}

/// Submits W6_TASKS tasks with `submit`, gets them all, returns tasks/s.
async fn w6_pass(
    ray: &Ray,
    submit: impl Fn() -> ray_core::Result<ObjectRef<u64>>,
) -> anyhow::Result<f64> {
    let start = Instant::now();
    let refs = (0..W6_TASKS)
        .map(|_| submit())
        .collect::<ray_core::Result<Vec<_>>>()?;
    let lens = ray.get_all(&refs).await?;
    let elapsed = start.elapsed();
    anyhow::ensure!(
        lens.iter().all(|&l| l == W6_BYTES as u64),
        "a task saw the wrong length"
    );
    Ok(per_second(W6_TASKS, elapsed))
}

async fn w7(ray: &Ray) -> anyhow::Result<Run> {
    let t = tree::run(ray, tree::DEFAULT_SEED).await?;
    let mut run = Run::default();
    run.figures.push(measure("end_to_end", "s", t.seconds));
    run.info.insert("seed".into(), json!(tree::DEFAULT_SEED));
    run.info.insert("depth".into(), json!(tree::DEPTH));
    run.info.insert("actors".into(), json!(t.actors));
    run.info.insert("calls".into(), json!(t.calls));
    Ok(run)
}

async fn run_once(id: &str, ray: &Ray) -> anyhow::Result<Run> {
    match id {
        "W1" => w1(ray).await,
        "W2" => w2(ray).await,
        "W3" => w3(ray).await,
        "W4" => w4(ray).await,
        "W5" => w5(ray).await,
        "W6" => w6(ray).await,
        "W7" => w7(ray).await,
        other => bail!("unknown workload {other}"),
    }
}

/// Runs workload `id` [`RUNS`] times on a fresh runtime; returns its JSON line.
async fn run_workload(id: &str, cpus: f64) -> anyhow::Result<Value> {
    let ray = ray_core::init_with(Config {
        num_cpus: Some(cpus),
        ..Config::default()
    })
    .await?;
    let mut samples: BTreeMap<String, (&'static str, Vec<f64>)> = BTreeMap::new();
    let mut order = Vec::new();
    let mut info = serde_json::Map::new();
    for _ in 0..RUNS {
        let run = run_once(id, &ray)
            .await
            .with_context(|| format!("workload {id}"))?;
        for m in run.figures {
            if !samples.contains_key(&m.name) {
                order.push(m.name.clone());
            }
            samples
                .entry(m.name)
                .or_insert((m.unit, Vec::new()))
                .1
                .push(m.value);
        }
        info = run.info;
    }
    ray.shutdown();

    let mut figures = serde_json::Map::new();
    for name in &order {
        let (unit, values) = &samples[name];
        let s = summarize(values);
        figures.insert(
            name.clone(),
            json!({"median": s.median, "min": s.min, "max": s.max, "unit": unit}),
        );
    }
    let headline = order.first().context("a workload measures something")?;
    let mut line = json!({
        "workload": id,
        "mode": "embedded",
        "cpus": cpus,
        "runs": RUNS,
        "figure": headline,
    });
    let obj = line
        .as_object_mut()
        .context("json! of an object is an object")?;
    for key in ["median", "min", "max", "unit"] {
        obj.insert(key.into(), figures[headline][key].clone());
    }
    obj.insert("figures".into(), Value::Object(figures));
    obj.insert("info".into(), Value::Object(info));
    Ok(line)
}

/// Command-line settings.
struct Args {
    cpus: f64,
    workloads: Vec<String>,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut mode = "embedded".to_string();
    let mut cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let mut workloads = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--mode" => mode = args.next().context("--mode needs embedded or cluster")?,
            "--cpus" => {
                let v = args.next().context("--cpus needs a number")?;
                cpus = v.parse().with_context(|| format!("--cpus {v}"))?;
            }
            id if ALL.contains(&id) => workloads.push(id.to_string()),
            other => bail!(
                "unknown argument {other}; usage: workloads --mode embedded|cluster [--cpus N] [W1 .. W7]"
            ),
        }
    }
    match mode.as_str() {
        "embedded" => {}
        "cluster" => {
            eprintln!("error: --mode cluster is not implemented yet: cluster mode arrives with the cluster issue");
            std::process::exit(2);
        }
        other => bail!("unknown mode {other}: embedded or cluster"),
    }
    if workloads.is_empty() {
        workloads = ALL.iter().map(|s| s.to_string()).collect();
    }
    Ok(Args { cpus, workloads })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
    for id in &args.workloads {
        let line = run_workload(id, args.cpus).await?;
        println!("{line}");
    }
    Ok(())
}
