//! Calls that fail (an error returned, a panic) are counted as failed on
//! their logical edge, beside the ones that succeed; a retried task counts
//! each run (one test per file: it installs the process's global
//! subscriber).

use ray_test_support::{embedded, recording};

use std::time::Duration;

use ray_core::prelude::*;
use ray_insight::views::CallEdge;
use ray_insight::Views;

/// Refuses odd numbers; panics on 13.
#[remote]
fn even(x: u64) -> Result<u64, String> {
    if x == 13 {
        panic!("thirteen");
    }
    if x % 2 == 1 {
        return Err(format!("{x} is odd"));
    }
    Ok(x)
}

/// An actor whose `check` fails for odd numbers.
#[remote]
struct Checker;

#[remote]
impl Checker {
    fn new() -> Self {
        Checker
    }
    fn check(&self, x: u64) -> Result<u64, String> {
        if x % 2 == 1 {
            Err(format!("{x} is odd"))
        } else {
            Ok(x)
        }
    }
}

fn edge<'a>(edges: &'a [CallEdge], name: &str) -> Option<&'a CallEdge> {
    edges.iter().find(|e| e.name.ends_with(name))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_calls_are_counted_on_their_edges() {
    let collector = recording::record_globally();
    let ray = embedded::runtime(2.0).await;
    // 0..10 and 13: five odd ones fail, 13 panics.
    let inputs: Vec<u64> = (0..10).chain([13]).collect();
    let refs: Vec<_> = inputs
        .iter()
        .map(|&x| even::remote(&ray, x).unwrap())
        .collect();
    let mut failed = 0;
    for r in refs {
        failed += u64::from(r.get().await.is_err());
    }
    assert_eq!(failed, 6);
    let checker = Checker::remote(&ray).unwrap();
    for x in 0..4u64 {
        let _ = checker.check(x).unwrap().get().await;
    }
    // A task retried on its error runs twice: one failed run, one finished.
    let retried = even::options()
        .max_retries(1)
        .retry_exceptions(true)
        .remote(&ray, 1)
        .unwrap();
    assert!(retried.get().await.is_err(), "1 is odd every time");

    let mut views = Views::default();
    recording::drain_until(&collector, &mut views, Duration::from_secs(30), |v| {
        let logical = v.snapshot().logical();
        edge(&logical.call_edges, "::even").is_some_and(|e| e.count == 13)
            && edge(&logical.call_edges, "check").is_some_and(|e| e.count == 4)
    })
    .await;
    ray.shutdown();
    let logical = views.snapshot().logical();
    let even = edge(&logical.call_edges, "::even").expect("the even edge");
    assert_eq!((even.count, even.failed), (13, 8), "{even:?}");
    let check = edge(&logical.call_edges, "check").expect("the check edge");
    assert_eq!((check.count, check.failed), (4, 2), "{check:?}");
    assert_eq!((even.running, even.queued), (0, 0));
}
