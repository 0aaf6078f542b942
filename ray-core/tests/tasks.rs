//! Tasks, objects and errors on the embedded runtime.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use ray_core::prelude::*;

use ray_core::{Config, Error};
use ray_test_support::embedded;

#[remote]
fn add(a: Vec<f64>, b: Vec<f64>) -> Vec<f64> {
    a.iter().zip(&b).map(|(x, y)| x + y).collect()
}

#[remote]
fn noop() {}

#[remote]
async fn async_double(x: u64) -> u64 {
    tokio::time::sleep(Duration::from_millis(1)).await;
    x * 2
}

#[remote]
fn boom(msg: String) -> u64 {
    panic!("{msg}")
}

#[remote]
fn checked_div(a: u64, b: u64) -> Result<u64, String> {
    a.checked_div(b)
        .ok_or_else(|| format!("cannot divide {a} by zero"))
}

#[remote]
fn sum_nested(refs: Vec<ObjectRef<u64>>) -> u64 {
    refs.iter()
        .map(|r| r.get_blocking().expect("nested ref readable"))
        .sum()
}

/// Fans out `n` children and waits for them: needs the parent's CPU back.
#[remote]
fn fan_out(depth: u32, n: u32) -> u64 {
    if depth == 0 {
        return 1;
    }
    let ray = Ray::current().expect("inside a task");
    let kids: Vec<_> = (0..n)
        .map(|_| fan_out::remote(&ray, depth - 1, n).expect("submit child"))
        .collect();
    kids.iter()
        .map(|k| k.get_blocking().expect("child result"))
        .sum()
}

static FLAKY_CALLS: AtomicU32 = AtomicU32::new(0);

#[remote]
fn flaky(fail_times: u32) -> u32 {
    let n = FLAKY_CALLS.fetch_add(1, Ordering::SeqCst);
    if n < fail_times {
        panic!("failure {n}");
    }
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_runs_with_values_and_refs_as_arguments() {
    let ray = embedded::runtime(2.0).await;
    let x = ray.put(vec![1.0, 2.0, 3.0]).await.unwrap();
    let s = add::remote(&ray, x.clone(), vec![10.0, 10.0, 10.0]).unwrap();
    assert_eq!(s.get().await.unwrap(), vec![11.0, 12.0, 13.0]);
    // A task's result passed on by reference before it is ready.
    let t = add::remote(&ray, &s, &x).unwrap();
    assert_eq!(t.get().await.unwrap(), vec![12.0, 14.0, 16.0]);
    ray.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_remote_functions_run() {
    let ray = embedded::runtime(2.0).await;
    let refs: Vec<_> = (0..10)
        .map(|i| async_double::remote(&ray, i).unwrap())
        .collect();
    let got = ray.get_all(&refs).await.unwrap();
    assert_eq!(got, (0..10).map(|i| i * 2).collect::<Vec<u64>>());
    ray.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn panic_becomes_typed_error_naming_the_function_and_runtime_keeps_working() {
    let ray = embedded::runtime(2.0).await;
    let r = boom::remote(&ray, "kaput".to_string()).unwrap();
    match r.get().await {
        Err(Error::TaskPanicked {
            function, message, ..
        }) => {
            assert!(function.ends_with("::boom"), "{function}");
            assert_eq!(message, "kaput");
        }
        other => panic!("expected TaskPanicked, got {other:?}"),
    }
    let ok = add::remote(&ray, vec![1.0], vec![2.0]).unwrap();
    assert_eq!(ok.get().await.unwrap(), vec![3.0]);
    ray.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_error_reaches_the_caller_typed() {
    let ray = embedded::runtime(2.0).await;
    assert_eq!(
        checked_div::remote(&ray, 9, 3)
            .unwrap()
            .get()
            .await
            .unwrap(),
        3
    );
    let err = checked_div::remote(&ray, 9, 0)
        .unwrap()
        .get()
        .await
        .unwrap_err();
    let Error::TaskFailed { error, .. } = err else {
        panic!("expected TaskFailed, got {err:?}");
    };
    assert_eq!(error.message(), "cannot divide 9 by zero");
    assert_eq!(
        error.downcast::<String>().as_deref(),
        Some("cannot divide 9 by zero")
    );
    assert_eq!(error.downcast::<u64>(), None);
    ray.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn infeasible_request_fails_fast() {
    let ray = embedded::runtime(2.0).await;
    let err = noop::options().num_cpus(3.0).remote(&ray).unwrap_err();
    assert!(matches!(err, Error::Infeasible { .. }), "{err:?}");
    assert!(err.to_string().contains("CPU: 3"), "{err}");
    let err = noop::options()
        .resource("tpu", 1.0)
        .remote(&ray)
        .unwrap_err();
    assert!(matches!(err, Error::Infeasible { .. }), "{err:?}");
    let err = noop::options().num_cpus(-1.0).remote(&ray).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
    ray.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fractional_cpus_are_accepted_and_run() {
    let ray = embedded::runtime(2.0).await;
    let refs: Vec<_> = (0..8)
        .map(|_| noop::options().num_cpus(0.25).remote(&ray).unwrap())
        .collect();
    for r in refs {
        r.get().await.unwrap();
    }
    assert_eq!(ray.stats().available, ray.stats().total);
    ray.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_tasks_blocked_in_get_do_not_deadlock_the_pool() {
    // 1 CPU: every parent must give its CPU back while it waits.
    let ray = embedded::runtime(1.0).await;
    let r = fan_out::remote(&ray, 3, 3).unwrap();
    assert_eq!(r.get_timeout(Duration::from_secs(60)).await.unwrap(), 27);
    let stats = ray.stats();
    assert_eq!(stats.available, stats.total, "all CPU returned");
    ray.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_refs_travel_by_reference_and_stay_alive() {
    let ray = embedded::runtime(2.0).await;
    let a = ray.put(5u64).await.unwrap();
    let b = ray.put(7u64).await.unwrap();
    let list = ray.put(vec![a.clone(), b.clone()]).await.unwrap();
    drop((a, b));
    // The inner objects live on because `list` contains them.
    let total = sum_nested::remote(&ray, list.clone()).unwrap();
    assert_eq!(total.get().await.unwrap(), 12);
    let inner: Vec<ObjectRef<u64>> = list.get().await.unwrap();
    assert_eq!(inner[1].get().await.unwrap(), 7);
    drop(inner);
    drop(total);
    drop(list);
    assert_eq!(ray.stats().objects, 0, "every object freed");
    ray.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_rerun_a_failing_task_when_asked() {
    let ray = embedded::runtime(2.0).await;
    FLAKY_CALLS.store(0, Ordering::SeqCst);
    let r = flaky::options()
        .max_retries(2)
        .retry_exceptions(true)
        .remote(&ray, 2)
        .unwrap();
    assert_eq!(r.get().await.unwrap(), 2);
    FLAKY_CALLS.store(0, Ordering::SeqCst);
    let r = flaky::options()
        .max_retries(1)
        .retry_exceptions(true)
        .remote(&ray, 5)
        .unwrap();
    assert!(matches!(r.get().await, Err(Error::TaskPanicked { .. })));
    assert_eq!(
        FLAKY_CALLS.load(Ordering::SeqCst),
        2,
        "one run and one retry"
    );
    ray.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_returns_ready_and_not_ready_in_order() {
    let ray = embedded::runtime(2.0).await;
    let fast = ray.put(1u64).await.unwrap();
    let slow = async_double::remote(&ray, 21).unwrap();
    let (ready, not_ready) = ray
        .wait(
            &[fast.clone(), slow.clone()],
            1,
            Some(Duration::from_secs(5)),
        )
        .await
        .unwrap();
    assert!(ready.contains(&fast));
    assert_eq!(ready.len() + not_ready.len(), 2);
    let (ready, not_ready) = ray.wait(&[fast, slow], 2, None).await.unwrap();
    assert_eq!(ready.len(), 2);
    assert!(not_ready.is_empty());
    assert!(ray.wait::<ObjectRef<u64>>(&[], 1, None).await.is_err());
    ray.shutdown();
}

static GATE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Holds its CPU (without blocking in a get) until `GATE` opens.
#[remote]
fn hold_until_gate_opens() -> u8 {
    while !GATE.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(1));
    }
    1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_times_out_with_partial_results() {
    // One CPU, held until the gate opens: `blocked` cannot run during the wait.
    let ray = embedded::runtime(1.0).await;
    let holder = hold_until_gate_opens::remote(&ray).unwrap();
    let blocked = async_double::remote(&ray, 1).unwrap();
    let ready_now = ray.put(3u64).await.unwrap();
    let (ready, not_ready) = ray
        .wait(
            &[ready_now.clone(), blocked.clone()],
            2,
            Some(Duration::from_millis(20)),
        )
        .await
        .unwrap();
    assert_eq!(ready, vec![ready_now]);
    assert_eq!(not_ready, vec![blocked.clone()]);
    GATE.store(true, Ordering::SeqCst);
    assert_eq!(holder.get().await.unwrap(), 1);
    assert_eq!(blocked.get().await.unwrap(), 2);
    ray.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_fails_pending_gets_instead_of_hanging() {
    let ray = embedded::runtime(1.0).await;
    let refs: Vec<_> = (0..50)
        .map(|i| async_double::remote(&ray, i).unwrap())
        .collect();
    ray.shutdown();
    let mut shut = 0;
    for r in &refs {
        match r.get_timeout(Duration::from_secs(10)).await {
            Ok(_) => {}
            Err(Error::ShutDown) => shut += 1,
            Err(e) => panic!("unexpected {e:?}"),
        }
    }
    assert!(shut > 0, "queued tasks were failed");
    assert!(matches!(noop::remote(&ray), Err(Error::ShutDown)));
}

#[test]
fn blocking_facade_runs_tasks_without_async() {
    let ray = ray_core::init_blocking(Config {
        num_cpus: Some(2.0),
        ..Config::default()
    })
    .unwrap();
    let x = ray.put_blocking(vec![1.0, 1.0]).unwrap();
    let s = add::remote(&ray, &x, &x).unwrap();
    assert_eq!(s.get_blocking().unwrap(), vec![2.0, 2.0]);
    ray.shutdown();
}

#[test]
fn registry_lists_every_remote_function_under_stable_ids() {
    let reg = ray_core::registry::registry();
    let names: Vec<&str> = reg.functions().iter().map(|f| f.name).collect();
    for want in [
        "tasks::add",
        "tasks::noop",
        "tasks::boom",
        "tasks::checked_div",
        "tasks::fan_out",
    ] {
        assert!(names.contains(&want), "{want} missing from {names:?}");
    }
    assert!(reg.duplicates().is_empty());
    let add = reg
        .functions()
        .into_iter()
        .find(|f| f.name == "tasks::add")
        .unwrap();
    let expected = ray_core::FunctionId(ray_core::__private::fnv1a64(
        b"tasks::add(Vec < f64 >, Vec < f64 >) -> Vec < f64 >",
    ));
    assert_eq!(add.id, expected, "id = hash of path, name and signature");
    assert!(std::ptr::eq(reg.function(add.id).unwrap(), add));
}

#[tokio::test]
async fn works_on_a_current_thread_tokio_runtime() {
    let ray = embedded::runtime(2.0).await;
    let x = ray.put(vec![1.0]).await.unwrap();
    assert_eq!(
        add::remote(&ray, &x, &x).unwrap().get().await.unwrap(),
        vec![2.0]
    );
    // Timers inside async remote functions are driven by the driver's runtime.
    assert_eq!(
        async_double::remote(&ray, 4).unwrap().get().await.unwrap(),
        8
    );
    ray.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduling_strategies_place_on_the_one_embedded_node() {
    let ray = embedded::runtime(2.0).await;
    let here = ray.node_id();
    let spread = noop::options().spread().remote(&ray).unwrap();
    let pinned = noop::options()
        .node_affinity(here, false)
        .remote(&ray)
        .unwrap();
    let elsewhere_soft = noop::options()
        .node_affinity(ray_core::NodeId(here.0 + 7), true)
        .remote(&ray)
        .unwrap();
    for r in [spread, pinned, elsewhere_soft] {
        r.get().await.unwrap();
    }
    let err = noop::options()
        .node_affinity(ray_core::NodeId(here.0 + 7), false)
        .remote(&ray)
        .unwrap_err();
    assert!(
        matches!(&err, Error::Infeasible { reason, .. } if reason.contains("hard affinity")),
        "{err:?}"
    );
    ray.shutdown();
}

/// The ids a task sees of itself.
#[remote]
fn who_am_i() -> (u64, bool, bool) {
    let ray = Ray::current().expect("inside a task");
    let ctx = ray.runtime_context();
    (ctx.node.0, ctx.task.is_some(), ctx.actor.is_some())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_from_code_reports_the_node_its_resources_and_the_caller() {
    let ray = ray_core::init_with(Config {
        num_cpus: Some(2.0),
        num_gpus: Some(1.0),
        memory_bytes: Some(1 << 30),
        ..Config::default()
    })
    .await
    .unwrap();
    let nodes = ray.nodes().await.unwrap();
    assert_eq!(nodes.len(), 1);
    assert!(nodes[0].alive);
    assert_eq!(nodes[0].id, ray.node_id());
    let total = ray.cluster_resources().await.unwrap();
    assert_eq!(total.get("CPU").to_f64(), 2.0);
    assert_eq!(total.get("GPU").to_f64(), 1.0);
    assert_eq!(total.get("memory").to_f64(), (1u64 << 30) as f64);
    assert_eq!(ray.available_resources().await.unwrap(), total);
    // A task asking for the GPU and half the memory now fits.
    let on_gpu = who_am_i::options()
        .num_gpus(1.0)
        .memory(1 << 29)
        .remote(&ray)
        .unwrap();
    assert_eq!(on_gpu.get().await.unwrap(), (ray.node_id().0, true, false));
    let driver = ray.runtime_context();
    assert_eq!((driver.task, driver.actor), (None, None));
    assert_eq!(driver.node, ray.node_id());
    ray.shutdown();
}
