//! `wait` with Ray's contract, and timeouts (`get_timeout`, `wait` with a
//! timeout) from every kind of caller: async code, a sync task, an actor
//! method, a plain thread.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ray_core::prelude::*;
use ray_test_support::embedded;

static GATE: AtomicBool = AtomicBool::new(false);

/// Holds its CPU (without blocking in a get) until `GATE` opens.
#[remote]
fn held_until_gate_opens() -> u8 {
    while !GATE.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(1));
    }
    1
}

/// Waits on `pending` (which cannot be ready yet) with timeouts, from a
/// sync task: returns how many were ready and whether `get_timeout` said
/// `Timeout`.
#[remote]
fn time_out_inside_a_sync_task(pending: Vec<ObjectRef<u8>>) -> (u64, bool) {
    let ray = Ray::current().expect("inside a task");
    let (ready, _) = ray
        .wait_blocking(&pending, 1, Some(Duration::from_millis(20)))
        .expect("wait");
    let timed_out = matches!(
        pending[0].get_timeout_blocking(Duration::from_millis(20)),
        Err(Error::Timeout(_))
    );
    (ready.len() as u64, timed_out)
}

#[remote]
struct Waiter;

#[remote]
impl Waiter {
    fn new() -> Self {
        Waiter
    }

    fn time_out(&self, pending: Vec<ObjectRef<u8>>) -> bool {
        matches!(
            pending[0].get_timeout_blocking(Duration::from_millis(20)),
            Err(Error::Timeout(_))
        )
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_returns_at_most_num_returns_ready_refs_in_the_order_given() {
    let ray = embedded::runtime(1.0).await;
    let mut refs = Vec::new();
    for i in 0..4u64 {
        refs.push(ray.put(i).await.unwrap());
    }
    let (ready, not_ready) = ray.wait(&refs, 2, None).await.unwrap();
    assert_eq!(ready, refs[..2].to_vec(), "the first two, not all four");
    assert_eq!(not_ready, refs[2..].to_vec(), "the other ready refs");
    let (ready, not_ready) = ray.wait(&refs, 4, Some(Duration::ZERO)).await.unwrap();
    assert_eq!((ready.len(), not_ready.len()), (4, 0));
    ray.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_takes_refs_of_mixed_types_as_any_refs() {
    let ray = embedded::runtime(1.0).await;
    let number = ray.put(7u64).await.unwrap();
    let text = ray.put(String::from("seven")).await.unwrap();
    let mixed: Vec<AnyRef> = vec![number.into(), (&text).into()];
    let (ready, not_ready) = ray.wait(&mixed, 2, None).await.unwrap();
    assert!(not_ready.is_empty());
    assert_eq!(ready[1].id(), text.id());
    let back: ObjectRef<String> = ready[1].clone().typed();
    assert_eq!(back.get().await.unwrap(), "seven");
    // Read as the wrong type: a typed error, not garbage.
    let wrong: ObjectRef<Vec<u32>> = ready[1].clone().typed();
    assert!(matches!(
        wrong.get().await,
        Err(Error::Serialization { .. })
    ));
    ray.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_refuses_zero_returns_and_a_ref_given_twice() {
    let ray = embedded::runtime(1.0).await;
    let a = ray.put(1u8).await.unwrap();
    let b = ray.put(2u8).await.unwrap();
    for (refs, n) in [(vec![a.clone(), b], 0), (vec![a.clone(), a], 1)] {
        match ray.wait(&refs, n, None).await {
            Err(Error::InvalidArgument(_)) => {}
            other => panic!("wait({n} of {refs:?}) gave {other:?}"),
        }
    }
    ray.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeouts_work_in_sync_tasks_actor_methods_and_plain_threads() {
    // Two CPUs: one held until the gate opens (its result stays pending),
    // one for the task or actor that times out waiting on it.
    let ray = embedded::runtime(2.0).await;
    let pending = held_until_gate_opens::remote(&ray).unwrap();

    let in_task = time_out_inside_a_sync_task::remote(&ray, vec![pending.clone()]).unwrap();
    assert_eq!(in_task.get().await.unwrap(), (0, true));

    let waiter = Waiter::remote(&ray).unwrap();
    let in_actor = waiter.time_out(vec![pending.clone()]).unwrap();
    assert!(in_actor.get().await.unwrap());
    waiter.kill();

    let (r, p) = (ray.clone(), pending.clone());
    let on_thread = std::thread::spawn(move || {
        let waited = r.wait_blocking(std::slice::from_ref(&p), 1, Some(Duration::from_millis(20)));
        let got = p.get_timeout_blocking(Duration::from_millis(20));
        (waited.map(|(ready, _)| ready.len()), got)
    })
    .join()
    .expect("the thread does not panic");
    assert_eq!(on_thread.0.unwrap(), 0);
    assert!(matches!(on_thread.1, Err(Error::Timeout(_))));

    assert!(matches!(
        pending.get_timeout(Duration::from_millis(20)).await,
        Err(Error::Timeout(_))
    ));
    GATE.store(true, Ordering::SeqCst);
    assert_eq!(
        pending.get_timeout(Duration::from_secs(600)).await.unwrap(),
        1
    );
    ray.shutdown();
}
