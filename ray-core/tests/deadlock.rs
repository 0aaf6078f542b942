//! A program that really deadlocks — two actors calling each other
//! synchronously — is reported by insight's distributed stack while it hangs,
//! and then ended by shutting the runtime down (one test per file: it installs
//! the process's global subscriber).

use ray_test_support::{embedded, recording};

use std::time::Duration;

use ray_insight::views::Deadlock;

use ray_test_support::deadlock::{Left, Right};

/// The method names of a cycle, without their class and module paths.
fn methods(deadlock: &Deadlock) -> Vec<String> {
    let mut names: Vec<String> = deadlock
        .cycle
        .iter()
        .map(|t| {
            let method = t.name.rsplit(['.', ':']).next().unwrap_or(&t.name);
            method.to_owned()
        })
        .collect();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn actors_calling_each_other_synchronously_are_reported_as_a_deadlock() {
    let collector = recording::record_globally();
    let ray = embedded::runtime(4.0).await;
    let left = Left::remote(&ray).unwrap();
    let right = Right::remote(&ray).unwrap();
    let hung = left.ping(right.clone(), left.clone()).unwrap();

    let views = recording::views_once_deadlocked(&collector, Duration::from_secs(20)).await;
    let stacks = views.snapshot().stacks();
    let found = stacks
        .deadlocks
        .first()
        .map(|d| (d.clone(), stacks.to_text()));
    // End the hung program whatever the outcome: pending gets fail.
    ray.shutdown();
    let (deadlock, report) = found.expect("no deadlock reported within 20 s");
    eprintln!("{report}");
    assert_eq!(methods(&deadlock), vec!["echo", "ping", "pong"], "{report}");
    assert!(report.contains("DEADLOCK (3 tasks)"), "{report}");
    let classes: Vec<bool> = deadlock
        .cycle
        .iter()
        .map(|t| t.name.contains("Left") || t.name.contains("Right"))
        .collect();
    assert_eq!(classes, vec![true; 3], "{report}");
    drop(hung);
}
