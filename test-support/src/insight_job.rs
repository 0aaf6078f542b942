//! The small recording job both cluster-insight tests run (ray-core's, on
//! what the head builds; rayrs's, on what `rayrs insight export` prints):
//! 3 parents spread over the nodes, each submitting 4 leaves from its
//! worker process, and 2 actors spread over the nodes, called 5 times each.
//! And [`edge`], which reads a call edge's count out of an exported
//! logical view.
//!
//! The functions and the actor register through `#[remote]` like a user's:
//! a test binary that runs the job finds them in its registry, and so do
//! the worker processes that run that binary.

// `new` is the actor's constructor (`Tally::remote(&ray)`), not a value a
// `Default` could stand for.
#![allow(clippy::new_without_default)]

use std::time::Duration;

use ray_core::prelude::*;
use serde_json::Value;

/// A leaf task: a short sleep, then `x + 1`.
#[remote]
pub fn leaf(x: u64) -> u64 {
    std::thread::sleep(Duration::from_millis(5));
    x + 1
}

/// Submits `n` leaves from inside a task (another process than the driver).
#[remote]
pub fn parent(n: u64) -> u64 {
    let ray = Ray::current().expect("in a task");
    let refs: Vec<_> = (0..n)
        .map(|i| leaf::remote(&ray, i).expect("submit"))
        .collect();
    refs.iter()
        .map(|r| r.get_blocking().expect("leaf result"))
        .sum()
}

/// An actor that adds up what it is given.
#[remote]
pub struct Tally {
    n: u64,
}

#[remote]
impl Tally {
    /// A tally at 0.
    pub fn new() -> Self {
        Tally { n: 0 }
    }

    /// Adds `by`; returns the total.
    pub fn add(&mut self, by: u64) -> u64 {
        self.n += by;
        self.n
    }
}

/// Runs the job on `ray` and checks its results: 3 `parent`s of 4 leaves
/// (spread), then 2 `Tally` actors (spread) called 5 times each. Returns
/// the actors' handles: they live while the caller keeps them.
pub async fn run(ray: &Ray) -> Vec<ActorHandle<Tally>> {
    let parents: Vec<_> = (0..3)
        .map(|_| parent::options().spread().remote(ray, 4).unwrap())
        .collect();
    for p in &parents {
        assert_eq!(p.get().await.unwrap(), 1 + 2 + 3 + 4);
    }
    let tallies: Vec<_> = (0..2)
        .map(|_| Tally::options().spread().remote(ray).unwrap())
        .collect();
    for t in &tallies {
        for _ in 0..5 {
            t.add(1).unwrap().get().await.unwrap();
        }
    }
    tallies
}

/// The count of the call edge whose callee name ends with `to`, from a
/// logical view whose caller key contains `from`.
pub fn edge(logical: &Value, from: &str, to: &str) -> u64 {
    logical["call_edges"]
        .as_array()
        .expect("call_edges")
        .iter()
        .filter(|e| {
            e["from"].as_str().is_some_and(|f| f.contains(from))
                && e["name"].as_str().is_some_and(|n| n.ends_with(to))
        })
        .map(|e| e["count"].as_u64().unwrap_or(0))
        .sum()
}
