//! The physical view gives each actor instance the CPU time its calls took
//! (the thread's CPU clock over each call), beside their running time: an
//! actor that computes is told apart from one that sleeps for as long, with
//! both in one worker process (one test per file: it installs the process's
//! global subscriber).

use ray_test_support::{embedded, recording};

use std::time::Duration;

use ray_core::prelude::*;
use ray_core::ActorId;
use ray_insight::views::{ActorUsage, PhysicalView};
use ray_insight::Views;

/// Computes (`crunch`) or sleeps (`nap`) on each call.
#[remote]
struct Job {
    calls: u64,
}

#[remote]
impl Job {
    fn new() -> Self {
        Job { calls: 0 }
    }
    /// A fixed amount of arithmetic: its CPU time does not depend on how
    /// busy the machine is.
    fn crunch(&mut self, rounds: u64) -> u64 {
        self.calls += 1;
        let mut x = self.calls;
        for i in 0..rounds {
            x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(i));
        }
        x
    }
    fn nap(&mut self, ms: u64) -> u64 {
        self.calls += 1;
        std::thread::sleep(Duration::from_millis(ms));
        self.calls
    }
}

/// The insight id of an actor (as its records name it).
fn insight_id(id: ActorId) -> String {
    let v = id.as_u128();
    format!("actor-{:x}.{:x}", v >> 64, v as u64)
}

fn usage_of(physical: &PhysicalView, actor: &str) -> Option<ActorUsage> {
    physical
        .nodes
        .iter()
        .flat_map(|n| &n.workers)
        .flat_map(|w| &w.actors)
        .find(|a| a.actor_id == actor)
        .map(|a| a.usage)
}

/// Checks that an actor that slept ran at least `running_nanos` and used
/// under a quarter of it in CPU (sleeping is running without CPU); its CPU.
fn slept(usage: ActorUsage, running_nanos: u64, who: &str) -> u64 {
    let cpu = usage
        .cpu_nanos
        .expect("calls recorded directly carry CPU time");
    assert!(
        usage.running_nanos >= running_nanos,
        "{who} slept {running_nanos} ns at least: {usage:?}"
    );
    assert!(
        cpu < usage.running_nanos / 4,
        "{who}'s sleep is running without CPU: {usage:?}"
    );
    cpu
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_actor_that_computes_shows_cpu_time_and_one_that_sleeps_does_not() {
    let collector = recording::record_globally();
    let ray = embedded::runtime(2.0).await;
    let cruncher = Job::remote(&ray).unwrap();
    let sleeper = Job::remote(&ray).unwrap();
    const CALLS: u64 = 5;
    for _ in 0..CALLS {
        let a = cruncher.crunch(5_000_000).unwrap();
        let b = sleeper.nap(40).unwrap();
        a.get().await.unwrap();
        b.get().await.unwrap();
    }
    // Many short calls on one actor between another's naps: what the pool
    // threads spend between jobs, and the short calls' time, is not the
    // naps'.
    let ticker = Job::remote(&ray).unwrap();
    let napper = Job::remote(&ray).unwrap();
    const ROUNDS: u64 = 20;
    // Drained as it goes: the test's layer queues one record per batch.
    let mut views = Views::default();
    for _ in 0..ROUNDS {
        collector.drain_into(&mut views);
        // One at a time: the pool thread runs out of work after each.
        for _ in 0..200 {
            ticker.crunch(10).unwrap().get().await.unwrap();
        }
        napper.nap(2).unwrap().get().await.unwrap();
    }
    let (crunch_id, nap_id) = (insight_id(cruncher.id()), insight_id(sleeper.id()));
    let napper_id = insight_id(napper.id());
    recording::drain_until(&collector, &mut views, Duration::from_secs(30), |v| {
        let physical = v.snapshot().physical();
        [&crunch_id, &nap_id]
            .iter()
            .all(|id| usage_of(&physical, id).is_some_and(|u| u.runs == CALLS + 1))
            && usage_of(&physical, &napper_id).is_some_and(|u| u.runs == ROUNDS + 1)
    })
    .await;
    ray.shutdown();
    let physical = views.snapshot().physical();
    let crunch = usage_of(&physical, &crunch_id).expect("the cruncher");
    let nap = usage_of(&physical, &nap_id).expect("the sleeper");
    assert_eq!(crunch.runs, CALLS + 1, "its calls and its constructor");
    assert_eq!(nap.runs, CALLS + 1);
    let crunch_cpu = crunch
        .cpu_nanos
        .expect("calls recorded directly carry CPU time");
    // Both ran a while; only one computed.
    let nap_cpu = slept(nap, CALLS * 40_000_000, "the sleeper");
    assert!(
        crunch_cpu > 10 * nap_cpu,
        "the cruncher's CPU time dwarfs the sleeper's: {crunch:?} vs {nap:?}"
    );
    // A call is never counted at more CPU than its wall time (5 ms of
    // slack: the views time a run by its records, the runtime by its clock).
    assert!(crunch_cpu <= crunch.running_nanos + 5_000_000, "{crunch:?}");
    // The ticks' and the idle pool's CPU is not the naps'.
    let napper = usage_of(&physical, &napper_id).expect("the napper");
    slept(napper, ROUNDS * 2_000_000, "the napper");
    // Both live in this one process: the per-process CPU % could not tell
    // them apart.
    let json = physical.to_json();
    let actors: Vec<&serde_json::Value> = json["nodes"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|n| n["workers"].as_array().into_iter().flatten())
        .flat_map(|w| w["actors"].as_array().into_iter().flatten())
        .collect();
    let cpu_ms = |id: &str| {
        actors
            .iter()
            .find(|a| a["actor_id"] == id)
            .and_then(|a| a["cpu_ms"].as_f64())
            .expect("cpu_ms in the JSON")
    };
    assert!(cpu_ms(&crunch_id) > cpu_ms(&nap_id));
}
