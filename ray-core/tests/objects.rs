//! Objects: put/get, zero-copy views, reference counting, store capacity.

use std::time::{Duration, Instant};

use ray_core::prelude::*;
use ray_core::{Config, Error};

#[remote]
fn len_of(bytes: Vec<u8>) -> u64 {
    bytes.len() as u64
}

#[remote]
fn make_big(n: u64) -> Vec<u8> {
    vec![7u8; n as usize]
}

async fn with_store(bytes: u64, put_timeout: Duration) -> Ray {
    ray_core::init_with(Config {
        num_cpus: Some(2.0),
        object_store_bytes: bytes,
        put_timeout,
        ..Config::default()
    })
    .await
    .expect("init")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_get_round_trips_values() {
    let ray = with_store(1 << 30, Duration::from_secs(1)).await;
    let s = ray.put("hello".to_string()).await.unwrap();
    assert_eq!(s.get().await.unwrap(), "hello");
    let v = ray
        .put(vec![(1u32, "a".to_string()), (2, "b".to_string())])
        .await
        .unwrap();
    assert_eq!(v.get().await.unwrap()[1].1, "b");
    ray.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_archived_is_a_zero_copy_view_of_the_stored_bytes() {
    let ray = with_store(1 << 30, Duration::from_secs(1)).await;
    let big = ray.put(vec![3u8; 8 << 20]).await.unwrap();
    let a = big.get_archived().await.unwrap();
    let b = big.get_archived().await.unwrap();
    assert_eq!(a.len(), 8 << 20);
    assert_eq!(a[12345], 3);
    // Both views point into the same stored buffer: nothing was copied.
    assert_eq!(a.as_ptr(), b.as_ptr());
    assert_eq!(a.bytes().as_ptr(), b.bytes().as_ptr());
    ray.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_last_ref_frees_store_memory() {
    let ray = with_store(1 << 30, Duration::from_secs(1)).await;
    let before = ray.stats().store_used_bytes;
    let r = ray.put(vec![1u8; 32 << 20]).await.unwrap();
    let r2 = r.clone();
    let used = ray.stats().store_used_bytes;
    assert!(used >= before + (32 << 20), "stored: {used}");
    // A task holding the ref as an argument keeps it alive while queued.
    let n = len_of::remote(&ray, &r).unwrap();
    drop(r);
    assert!(
        ray.stats().store_used_bytes >= 32 << 20,
        "a clone is still alive"
    );
    assert_eq!(n.get().await.unwrap(), 32 << 20);
    drop(r2);
    drop(n);
    let stats = ray.stats();
    assert_eq!(stats.store_used_bytes, before, "memory came back");
    assert_eq!(stats.objects, 0);
    // Task returns that are large land in the store and are freed the same way.
    let big = make_big::remote(&ray, 1 << 20).unwrap();
    assert_eq!(big.get().await.unwrap().len(), 1 << 20);
    assert!(ray.stats().store_used_bytes > 0);
    drop(big);
    assert_eq!(ray.stats().store_used_bytes, 0);
    ray.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_waits_for_space_then_succeeds_when_memory_is_freed() {
    let ray = with_store(24 << 20, Duration::from_secs(10)).await;
    let first = ray.put(vec![0u8; 16 << 20]).await.unwrap();
    let ray2 = ray.clone();
    let waiter = tokio::spawn(async move { ray2.put(vec![1u8; 16 << 20]).await.map(|r| r.id()) });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!waiter.is_finished(), "second put waits for space");
    drop(first);
    let id = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("put finished after the free")
        .unwrap()
        .unwrap();
    assert_ne!(id.seq, 0);
    ray.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_into_a_full_store_times_out_with_object_store_full() {
    let ray = with_store(24 << 20, Duration::from_millis(100)).await;
    let _held = ray.put(vec![0u8; 16 << 20]).await.unwrap();
    let start = Instant::now();
    let err = ray.put(vec![1u8; 16 << 20]).await.unwrap_err();
    assert!(matches!(err, Error::ObjectStoreFull(_)), "{err:?}");
    assert!(start.elapsed() >= Duration::from_millis(100));
    assert!(err.to_string().contains("object store full"), "{err}");
    // Too large for the whole store fails at once.
    let err = ray.put(vec![1u8; 32 << 20]).await.unwrap_err();
    assert!(matches!(err, Error::ObjectStoreFull(_)), "{err:?}");
    // The store still works.
    let small = ray.put(vec![2u8; 1 << 20]).await.unwrap();
    assert_eq!(small.get().await.unwrap().len(), 1 << 20);
    ray.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_tasks_leave_no_objects_behind() {
    let ray = with_store(1 << 30, Duration::from_secs(1)).await;
    let refs: Vec<_> = (0..2000)
        .map(|i| len_of::remote(&ray, vec![0u8; i % 64]).unwrap())
        .collect();
    for (i, r) in refs.iter().enumerate() {
        assert_eq!(r.get().await.unwrap(), (i % 64) as u64);
    }
    drop(refs);
    assert_eq!(ray.stats().objects, 0);
    ray.shutdown();
}

#[remote]
fn archived_len(bytes: ray_core::ArchivedRef<Vec<u8>>) -> u64 {
    bytes.len() as u64
}

#[remote]
fn first_byte_addr(bytes: ray_core::ArchivedRef<Vec<u8>>) -> u64 {
    bytes.as_ptr() as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn archived_ref_parameters_read_the_stored_object_without_copying() {
    let ray = with_store(1 << 30, Duration::from_secs(1)).await;
    let big = ray.put(vec![9u8; 4 << 20]).await.unwrap();
    assert_eq!(
        archived_len::remote(&ray, &big)
            .unwrap()
            .get()
            .await
            .unwrap(),
        4 << 20
    );
    // The task saw the very bytes the driver's view sees.
    let view = big.get_archived().await.unwrap();
    let addr = first_byte_addr::remote(&ray, &big)
        .unwrap()
        .get()
        .await
        .unwrap();
    assert_eq!(addr, view.as_ptr() as u64);
    // A plain value works too: it is encoded once and viewed in place.
    assert_eq!(
        archived_len::remote(&ray, vec![1u8, 2, 3])
            .unwrap()
            .get()
            .await
            .unwrap(),
        3
    );
    ray.shutdown();
}

/// Opened by the test once every waiting task is submitted.
static GATE_OPEN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

#[remote]
fn gated_seven() -> u64 {
    while !GATE_OPEN.load(std::sync::atomic::Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(1));
    }
    7
}

#[remote]
fn plus_one(x: u64) -> u64 {
    x + 1
}

/// Many tasks queued on one pending object (each registers to be woken
/// when it is ready) all run once it is: none is lost, whatever the number
/// of waiters on that object, and a get on it from the driver is woken too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_task_queued_on_one_pending_object_runs_when_it_is_ready() {
    let ray = with_store(1 << 30, Duration::from_secs(1)).await;
    let gate = gated_seven::remote(&ray).unwrap();
    let waiting: Vec<_> = (0..20_000)
        .map(|_| plus_one::remote(&ray, &gate).unwrap())
        .collect();
    assert!(!gate.is_ready(), "the gate is still closed");
    assert!(
        waiting.iter().all(|r| !r.is_ready()),
        "all are waiting on it"
    );
    GATE_OPEN.store(true, std::sync::atomic::Ordering::Release);
    let results = ray.get_all(&waiting).await.expect("all ran");
    assert_eq!(results.len(), 20_000);
    assert!(results.iter().all(|&r| r == 8));
    assert_eq!(gate.get().await.unwrap(), 7);
    ray.shutdown();
}

/// Opened by the test once the ref to `gated_big`'s result is dropped.
static BIG_GATE_OPEN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
/// Set by `gated_big` once it runs.
static BIG_STARTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

#[remote]
fn gated_big(n: u64) -> Vec<u8> {
    BIG_STARTED.store(true, std::sync::atomic::Ordering::Release);
    while !BIG_GATE_OPEN.load(std::sync::atomic::Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(1));
    }
    vec![3u8; n as usize]
}

/// A task whose every ref was dropped while it ran still finishes, and its
/// result, large enough for the store, is freed as it lands: nothing is
/// left in the table or the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_nobody_references_any_more_is_freed_when_it_lands() {
    let ray = with_store(1 << 30, Duration::from_secs(1)).await;
    let big = gated_big::remote(&ray, 4 << 20).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !BIG_STARTED.load(std::sync::atomic::Ordering::Acquire) {
        assert!(Instant::now() < deadline, "the task never started");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    drop(big);
    assert_eq!(ray.stats().objects, 0, "the entry went with its last ref");
    BIG_GATE_OPEN.store(true, std::sync::atomic::Ordering::Release);
    // The task gives its CPU back just before its value lands; the value
    // lands within microseconds, so 50 ms later a kept one would show.
    while ray.stats().available != ray.stats().total {
        assert!(Instant::now() < deadline, "the task never finished");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    // The pool thread stored the value, found nobody wants it, deleted it.
    let stats = ray.stats();
    assert_eq!(
        stats.store_used_bytes, 0,
        "the unreferenced result was kept"
    );
    assert_eq!(stats.objects, 0);
    // A later task's result is stored and read as usual.
    let again = make_big::remote(&ray, 2 << 20).unwrap();
    assert_eq!(again.get().await.unwrap().len(), 2 << 20);
    assert_eq!(ray.stats().objects, 1);
    ray.shutdown();
}

/// Takes 0-4 ms by `i`, so producers finish in a mixed order while
/// consumers are still being submitted.
#[remote]
fn slow_value(i: u64) -> u64 {
    std::thread::sleep(Duration::from_millis(i % 5));
    i
}

#[remote]
fn sum_of_three(a: u64, b: u64, c: u64) -> u64 {
    a + b + c
}

/// Work waiting on several pending arguments is woken by whichever thread
/// completes each, while other threads register more waiters: every
/// consumer runs and sees its three values, in whatever order they land.
/// A lost wake-up leaves a consumer waiting forever (the timeout fails).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_waiting_on_several_pending_arguments_all_run_whatever_order_they_land_in() {
    const PRODUCERS: u64 = 64;
    const CONSUMERS: u64 = 2_000;
    let ray = ray_core::init_with(Config {
        num_cpus: Some(4.0),
        ..Config::default()
    })
    .await
    .expect("init");
    let produced: Vec<ObjectRef<u64>> = (0..PRODUCERS)
        .map(|i| slow_value::remote(&ray, i).unwrap())
        .collect();
    let pick = |i: u64, k: u64| ((i * k) % PRODUCERS) as usize;
    let consumers: Vec<ObjectRef<u64>> = (0..CONSUMERS)
        .map(|i| {
            sum_of_three::remote(
                &ray,
                &produced[pick(i, 7)],
                &produced[pick(i, 13)],
                &produced[pick(i, 29)],
            )
            .unwrap()
        })
        .collect();
    let sums = tokio::time::timeout(Duration::from_secs(60), ray.get_all(&consumers))
        .await
        .expect("every consumer ran within a minute (none was left waiting)")
        .unwrap();
    for (i, sum) in (0..CONSUMERS).zip(sums) {
        let want = (pick(i, 7) + pick(i, 13) + pick(i, 29)) as u64;
        assert_eq!(sum, want, "consumer {i}");
    }
    ray.shutdown();
}
