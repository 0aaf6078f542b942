//! Tasks, actors and objects across real node processes on loopback
//! (`Cluster::local`), and what happens when a node is killed.

use std::collections::BTreeSet;
use std::time::Duration;

use ray_core::prelude::*;
use ray_core::{Cluster, Error, NodeId};

#[remote]
fn where_am_i(x: u64) -> (u64, u64) {
    std::thread::sleep(Duration::from_millis(20));
    (x, Ray::current().expect("in a task").node_id().0)
}

#[remote]
fn checksum(v: Vec<u8>) -> u64 {
    v.iter().map(|&b| u64::from(b)).sum()
}

#[remote]
fn make_bytes(n: u64) -> Vec<u8> {
    (0..n).map(|i| (i % 251) as u8).collect()
}

/// Puts `n` bytes in the worker's own store and returns only the ref: the
/// worker owns the object, the caller borrows it.
#[remote]
fn put_inside(n: u64) -> ObjectRef<Vec<u8>> {
    let ray = Ray::current().expect("in a task");
    let bytes: Vec<u8> = (0..n).map(|i| (i % 241) as u8).collect();
    ray.put_blocking(bytes).expect("put in the worker")
}

/// Objects and bytes this worker process has fetched from others so far.
#[remote]
fn fetched_here() -> (u64, u64) {
    let stats = Ray::current().expect("in a task").stats();
    (stats.fetched_objects, stats.fetched_bytes)
}

#[remote]
fn boom(msg: String) -> u64 {
    panic!("{msg}")
}

#[remote]
fn fan_out(n: u64) -> u64 {
    let ray = Ray::current().expect("in a task");
    let refs: Vec<_> = (0..n)
        .map(|i| where_am_i::remote(&ray, i).expect("submit"))
        .collect();
    refs.iter()
        .map(|r| r.get_blocking().expect("child result").0)
        .sum()
}

/// Finds the named counter from inside a task (another process) and adds.
#[remote]
fn bump_named(name: String, by: u64) -> u64 {
    let ray = Ray::current().expect("in a task");
    let c = ray.get_actor::<Counter>(&name).expect("named actor found");
    c.incr(by).unwrap().get_blocking().unwrap()
}

/// Calls the actor behind a handle passed as an argument.
#[remote]
fn bump_handle(c: ActorHandle<Counter>, by: u64) -> u64 {
    c.incr(by).unwrap().get_blocking().unwrap()
}

#[remote]
struct Counter {
    n: u64,
}

#[remote]
impl Counter {
    fn new(start: u64) -> Self {
        Counter { n: start }
    }
    fn incr(&mut self, by: u64) -> u64 {
        self.n += by;
        self.n
    }
    fn node(&self) -> u64 {
        Ray::current().expect("in an actor").node_id().0
    }
}

/// Sums objects handed to it, and says how many bytes of what its worker
/// process fetched are kept there.
#[remote]
struct Reader {
    reads: u64,
}

#[remote]
impl Reader {
    fn new() -> Self {
        Reader { reads: 0 }
    }
    fn sum(&mut self, v: Vec<u8>) -> u64 {
        self.reads += 1;
        v.iter().map(|&b| u64::from(b)).sum()
    }
    fn kept(&self) -> u64 {
        Ray::current()
            .expect("in an actor")
            .stats()
            .fetch_cache_bytes
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fetched_copy_is_dropped_when_its_owner_frees_the_object() {
    let cluster = Cluster::local(1).await.expect("cluster starts");
    let ray = cluster.connect().await.expect("driver joins");
    let reader = Reader::remote(&ray).unwrap();

    // Three objects of 1 MiB, read by the actor's worker.
    let mut objects = Vec::new();
    for k in 0..3u64 {
        let data: Vec<u8> = (0..(1u64 << 20)).map(|i| ((i + k) % 239) as u8).collect();
        let want: u64 = data.iter().map(|&b| u64::from(b)).sum();
        let obj = ray.put(data).await.unwrap();
        assert_eq!(reader.sum(&obj).unwrap().get().await.unwrap(), want);
        objects.push(obj);
    }
    // The calls are over; the worker keeps its copies while the driver
    // holds the objects (a second reader there would not fetch them again).
    let kept = reader.kept().unwrap().get().await.unwrap();
    assert!(kept >= 3 << 20, "kept {kept} bytes after the reads");

    // The driver lets go of all three at once: its notices make the worker
    // drop every copy.
    drop(objects);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let kept = reader.kept().unwrap().get().await.unwrap();
        if kept < 1 << 20 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the worker still keeps {kept} bytes 10 s after the owner freed the object"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    ray.shutdown();
    drop(cluster);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_actors_and_objects_cross_two_node_processes() {
    let cluster = Cluster::local(2).await.expect("cluster starts");
    let ray = cluster.connect().await.expect("driver joins");

    // Spread tasks land on both nodes and return the right values. A node
    // spreads over the nodes its view knows: on a loaded machine the head's
    // view may learn of the other node after the first batch, so batches
    // go until both ran some (within 30 s).
    let mut nodes = BTreeSet::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while nodes.len() < 2 && std::time::Instant::now() < deadline {
        let refs: Vec<_> = (0..16)
            .map(|i| where_am_i::options().spread().remote(&ray, i).unwrap())
            .collect();
        for (i, r) in refs.iter().enumerate() {
            let (x, node) = r.get().await.expect("task result");
            assert_eq!(x, i as u64);
            nodes.insert(node);
        }
    }
    assert_eq!(nodes.len(), 2, "spread tasks ran on {nodes:?}");
    let other = *nodes.iter().max().unwrap();

    // A large object put by the driver is pulled by a task on the other
    // node; a large result comes back.
    let data: Vec<u8> = (0..(8u64 << 20)).map(|i| (i % 251) as u8).collect();
    let expected: u64 = data.iter().map(|&b| u64::from(b)).sum();
    let obj = ray.put(data).await.unwrap();
    let far = checksum::options()
        .node_affinity(NodeId(other), false)
        .remote(&ray, &obj)
        .unwrap();
    assert_eq!(far.get().await.unwrap(), expected);
    // Read again on that node after the first task let go of it: served
    // from the copy the worker kept, not fetched a second time.
    let fetched = || {
        fetched_here::options()
            .node_affinity(NodeId(other), false)
            .remote(&ray)
            .unwrap()
    };
    let before = fetched().get().await.unwrap();
    assert!(before.0 >= 1 && before.1 >= 8 << 20, "{before:?}");
    let again = checksum::options()
        .node_affinity(NodeId(other), false)
        .remote(&ray, &obj)
        .unwrap();
    assert_eq!(again.get().await.unwrap(), expected);
    assert_eq!(fetched().get().await.unwrap(), before, "fetched again");
    let big = make_bytes::options()
        .node_affinity(NodeId(other), false)
        .remote(&ray, 3u64 << 20)
        .unwrap();
    let bytes = big.get().await.unwrap();
    assert_eq!(bytes.len(), 3 << 20);
    assert_eq!(bytes[1000], (1000 % 251) as u8);
    // A ref produced on one node, consumed by a task on the other.
    let chained = checksum::remote(&ray, &big).unwrap();
    let want: u64 = bytes.iter().map(|&b| u64::from(b)).sum();
    assert_eq!(chained.get().await.unwrap(), want);

    // Nested tasks: a worker is an owner too.
    assert_eq!(fan_out::remote(&ray, 10).unwrap().get().await.unwrap(), 45);
    // A ref returned inside a result stays alive at its owner (the worker)
    // after the task ends, small and large, and the driver reads it.
    for n in [100u64, 2 << 20] {
        let inner = put_inside::options()
            .node_affinity(NodeId(other), false)
            .remote(&ray, n)
            .unwrap()
            .get()
            .await
            .expect("the returned ref");
        let got = inner.get().await.expect("the object the worker put");
        assert_eq!(got.len() as u64, n);
        assert!(got.iter().enumerate().all(|(i, &b)| b == (i % 241) as u8));
    }

    // More waiting parents than the cluster has CPUs, each on a lease of
    // its own (spread): a blocked parent lends its lease back to its node,
    // so the children still get leases and run.
    let parents: Vec<_> = (0..6)
        .map(|_| fan_out::options().spread().remote(&ray, 5).unwrap())
        .collect();
    for p in &parents {
        assert_eq!(p.get_timeout(Duration::from_secs(30)).await.unwrap(), 10);
    }

    // Errors keep their type across processes.
    let err = boom::remote(&ray, "kaboom")
        .unwrap()
        .get()
        .await
        .unwrap_err();
    match err {
        Error::TaskPanicked {
            function, message, ..
        } => {
            assert!(function.ends_with("boom"), "{function}");
            assert!(message.contains("kaboom"), "{message}");
        }
        e => panic!("expected TaskPanicked, got {e:?}"),
    }

    // An actor on the other node keeps its calls in order.
    let c = Counter::options()
        .node_affinity(NodeId(other), false)
        .remote(&ray, 10)
        .unwrap();
    let calls: Vec<_> = (0..100).map(|_| c.incr(1).unwrap()).collect();
    for (i, r) in calls.iter().enumerate() {
        assert_eq!(r.get().await.unwrap(), 11 + i as u64);
    }
    assert_eq!(c.node().unwrap().get().await.unwrap(), other);

    // A named actor is found through the GCS, by the driver and by a task
    // in a worker process; all handles reach the same state.
    let named = Counter::options().name("tally").remote(&ray, 100).unwrap();
    assert_eq!(named.incr(1).unwrap().get().await.unwrap(), 101);
    let found = ray.get_actor::<Counter>("tally").expect("found by name");
    assert_eq!(found.incr(1).unwrap().get().await.unwrap(), 102);
    let from_task = bump_named::remote(&ray, "tally", 10u64).unwrap();
    assert_eq!(from_task.get().await.unwrap(), 112);
    // A handle passed to a task on the other node reaches the same actor,
    // even one created just before (it is found once registered).
    let fresh = Counter::remote(&ray, 1000).unwrap();
    let far_call = bump_handle::options()
        .node_affinity(NodeId(other), false)
        .remote(&ray, fresh.clone(), 5u64)
        .unwrap();
    assert_eq!(far_call.get().await.unwrap(), 1005);
    assert_eq!(fresh.incr(1).unwrap().get().await.unwrap(), 1006);
    assert!(matches!(
        ray.get_actor::<Counter>("nobody"),
        Err(Error::ActorNotFound { .. })
    ));
    ray.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_a_node_fails_its_work_with_a_typed_error() {
    let mut cluster = Cluster::local(2).await.expect("cluster starts");
    let ray = cluster.connect().await.expect("driver joins");
    let c = Counter::options().spread().remote(&ray, 0).unwrap();
    let node = c.node().unwrap().get().await.unwrap();
    // Find the process of the actor's node: node ids follow start order.
    let victim = if node == 1 { 0 } else { 1 };
    if victim == 0 {
        // The head holds the GCS too; place on the second node instead.
        drop(c);
        return killing_second_node(cluster, ray).await;
    }
    cluster.kill_node(victim);
    let started = std::time::Instant::now();
    let err = c
        .incr(1)
        .unwrap()
        .get_timeout(Duration::from_secs(60))
        .await
        .unwrap_err();
    // An actor with no restarts is dead for good: `ActorDied`, naming
    // its node's death as the cause.
    let died = format!("node node-{node} died");
    assert!(
        matches!(&err, Error::ActorDied { cause, .. } if cause.contains(&died)),
        "expected ActorDied for node {node}, got {err:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(30));
    ray.shutdown();
}

async fn killing_second_node(mut cluster: Cluster, ray: Ray) {
    let c = Counter::options()
        .node_affinity(NodeId(2), false)
        .remote(&ray, 0)
        .unwrap();
    assert_eq!(c.node().unwrap().get().await.unwrap(), 2);
    cluster.kill_node(1);
    let err = c
        .incr(1)
        .unwrap()
        .get_timeout(Duration::from_secs(60))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::ActorDied { cause, .. } if cause.contains("node node-2 died")),
        "expected ActorDied for node-2, got {err:?}"
    );
    ray.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_detached_actor_outlives_its_driver_and_a_plain_one_does_not() {
    let cluster = Cluster::local(1).await.expect("cluster starts");
    let first = cluster.connect().await.expect("first driver joins");
    let keeper = Counter::options()
        .name("keeper")
        .detached(true)
        .remote(&first, 40)
        .unwrap();
    let plain = Counter::options().name("plain").remote(&first, 0).unwrap();
    assert_eq!(keeper.incr(2).unwrap().get().await.unwrap(), 42);
    assert_eq!(plain.incr(1).unwrap().get().await.unwrap(), 1);
    first.shutdown();
    drop((keeper, plain));

    // A new job finds the detached actor, state intact; the plain one died
    // with the first job.
    let second = cluster.connect().await.expect("second driver joins");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        match second.get_actor::<Counter>("plain") {
            // Its name released, or still listed with its worker stopped.
            Err(Error::ActorNotFound { .. } | Error::ActorDied { .. }) => break,
            Ok(_) if std::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            other => panic!("the plain actor should be gone, got {other:?}"),
        }
    }
    let found = second
        .get_actor::<Counter>("keeper")
        .expect("detached actor found");
    assert_eq!(found.incr(1).unwrap().get().await.unwrap(), 43);
    second.shutdown();
}

/// A driver's I/O runs on a thread of its own; shutting it down must still
/// tell the cluster at once: the job ends (its named actor goes) within
/// 3 s, not after the 10 s idle timeout a silent driver would leave. It
/// does not tell the 200 ms grace for the closes apart from an immediate
/// stop: on loopback the close usually goes out first either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_that_shuts_down_ends_its_job_at_once() {
    let cluster = Cluster::local(1).await.expect("cluster starts");
    let first = cluster.connect().await.expect("first driver joins");
    let plain = Counter::options().name("short").remote(&first, 0).unwrap();
    assert_eq!(plain.incr(1).unwrap().get().await.unwrap(), 1);
    let second = cluster.connect().await.expect("second driver joins");
    assert!(second.get_actor::<Counter>("short").is_ok());
    let stopped = std::time::Instant::now();
    first.shutdown();
    loop {
        match second.get_actor::<Counter>("short") {
            // Gone: its name released, or still listed with its worker
            // already stopped (the job's end reaches both, in either order).
            Err(Error::ActorNotFound { .. } | Error::ActorDied { .. }) => break,
            Ok(_) if stopped.elapsed() < Duration::from_secs(3) => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            other => panic!(
                "the first job's actor should be gone within 3 s of its driver's shutdown, \
                 got {other:?} after {:?}",
                stopped.elapsed()
            ),
        }
    }
    drop(plain);
    second.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn placement_groups_reserve_bundles_across_nodes() {
    use ray_core::{Bundle, PlacementStrategy};
    let cluster = Cluster::local(2).await.expect("cluster starts");
    let ray = cluster.connect().await.expect("driver joins");
    let bundle = || Bundle::new().num_cpus(1.0);
    let pg = ray
        .placement_group(vec![bundle(), bundle()], PlacementStrategy::StrictSpread)
        .unwrap();
    pg.ready().await.expect("two bundles on two nodes");
    let mut nodes = BTreeSet::new();
    for i in 0..2 {
        let r = where_am_i::options()
            .placement_group(&pg, Some(i))
            .remote(&ray, i as u64)
            .unwrap();
        nodes.insert(r.get().await.unwrap().1);
    }
    assert_eq!(
        nodes.len(),
        2,
        "STRICT_SPREAD bundles share a node: {nodes:?}"
    );
    let a = Counter::options()
        .placement_group(&pg, Some(1))
        .remote(&ray, 7)
        .unwrap();
    assert_eq!(a.incr(1).unwrap().get().await.unwrap(), 8);

    // More STRICT_SPREAD bundles than nodes: never placeable, refused at
    // creation as embedded (work into it used to wait forever).
    let Err(err) = ray.placement_group(
        vec![bundle(), bundle(), bundle()],
        PlacementStrategy::StrictSpread,
    ) else {
        panic!("a strict spread over 3 of 2 nodes was accepted");
    };
    assert!(matches!(err, Error::Infeasible { .. }), "{err:?}");

    // Removal kills the group's actors and frees its bundles: a group of
    // the whole cluster fits afterwards.
    pg.remove(&ray);
    let err = a
        .incr(1)
        .unwrap()
        .get_timeout(Duration::from_secs(30))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::ActorDied { .. }), "{err:?}");
    let whole = ray
        .placement_group(
            vec![Bundle::new().num_cpus(2.0), Bundle::new().num_cpus(2.0)],
            PlacementStrategy::Spread,
        )
        .unwrap();
    tokio::time::timeout(Duration::from_secs(30), whole.ready())
        .await
        .expect("the freed bundles are reserved again in time")
        .unwrap();
    ray.shutdown();
}
