//! Fault tolerance with real processes: worker processes that abort or are
//! killed with SIGKILL, and a node killed under running work. Tasks are
//! retried within `max_retries` (default 3) and end with their result, or
//! with a typed error naming what died; actors restart within
//! `max_restarts`, and calls lost with them are sent again within
//! `max_task_retries`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ray_core::prelude::*;
use ray_core::{Cluster, Error, NodeId};
use ray_test_support::process::gone;

/// A file no other test uses (the workers share this machine's disk).
fn marker(name: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    std::env::temp_dir().join(format!("rayrs-ft-{name}-{}-{nanos}", std::process::id()))
}

/// Waits until `path` exists (a task wrote it), failing after a minute.
async fn wait_for(path: &Path) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Now, as nanoseconds since the epoch (comparable across processes).
fn epoch_nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// The first run (no marker yet) writes its pid and the time to the marker
/// and aborts its process; a later run returns its own pid.
#[remote]
fn abort_once(marker: String) -> u32 {
    if !Path::new(&marker).exists() {
        let line = format!("{} {}", std::process::id(), epoch_nanos());
        std::fs::write(&marker, line).unwrap();
        std::process::abort();
    }
    std::process::id()
}

/// The pid and time a first run wrote.
fn crashed(marker: &Path) -> (u32, u128) {
    let text = std::fs::read_to_string(marker).unwrap();
    let (pid, at) = text.split_once(' ').unwrap();
    (pid.parse().unwrap(), at.parse().unwrap())
}

/// The first run writes its pid to the marker and sleeps until it is
/// killed; a later run returns the node it ran on.
#[remote]
fn hang_once(marker: String) -> u64 {
    if !Path::new(&marker).exists() {
        std::fs::write(&marker, std::process::id().to_string()).unwrap();
        std::thread::sleep(Duration::from_secs(600));
    }
    Ray::current().expect("in a task").node_id().0
}

/// An actor whose process can be made to die.
#[remote]
struct Tally {
    n: u64,
}

#[remote]
impl Tally {
    fn new(start: u64) -> Self {
        Tally { n: start }
    }
    fn add(&mut self, k: u64) -> u64 {
        self.n += k;
        self.n
    }
    fn pid(&self) -> u32 {
        std::process::id()
    }
    fn node(&self) -> u64 {
        Ray::current().expect("in an actor").node_id().0
    }
    /// Aborts the process the first time (no marker yet), else returns
    /// the process id.
    fn abort_once(&self, marker: String) -> u32 {
        if !Path::new(&marker).exists() {
            std::fs::write(&marker, "x").unwrap();
            std::process::abort();
        }
        std::process::id()
    }
    /// Aborts its process.
    fn abort(&self) -> u32 {
        std::process::abort()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_actor_restarts_afresh_under_its_name_until_its_restarts_are_used_up() {
    let cluster = Cluster::local(1).await.expect("cluster starts");
    let ray = cluster.connect().await.expect("driver joins");
    let a = Tally::options()
        .name("phoenix")
        .max_restarts(1)
        .remote(&ray, 100)
        .unwrap();
    assert_eq!(a.add(5).unwrap().get().await.unwrap(), 105);
    let first = a.pid().unwrap().get().await.unwrap();
    // The call that kills it was in flight and is not sent again.
    let err = a.abort().unwrap().get().await.unwrap_err();
    assert!(matches!(err, Error::ActorUnavailable { .. }), "{err:?}");
    // Its next life: constructor run again with the same arguments.
    let restarted = Instant::now();
    assert_eq!(a.add(1).unwrap().get().await.unwrap(), 101);
    eprintln!(
        "ActorUnavailable to the next life's first answer: {:?}",
        restarted.elapsed()
    );
    assert_ne!(a.pid().unwrap().get().await.unwrap(), first);
    let found = ray.get_actor::<Tally>("phoenix").expect("still named");
    assert_eq!(found.add(1).unwrap().get().await.unwrap(), 102);
    // Its one restart is used: the next death is final.
    let _ = a.abort().unwrap().get().await.unwrap_err();
    let err = a.add(1).unwrap().get().await.unwrap_err();
    match &err {
        Error::ActorDied { cause, .. } => {
            assert!(cause.contains("restarts are used up"), "{cause}")
        }
        other => panic!("expected ActorDied, got {other:?}"),
    }
    ray.shutdown();
}

/// Calls through a handle from the actor's name, made from a task.
#[remote]
fn add_by_name(name: String, k: u64) -> Result<u64, String> {
    let ray = Ray::current().map_err(|e| e.to_string())?;
    let found = ray.get_actor::<Tally>(&name).map_err(|e| e.to_string())?;
    found
        .add(k)
        .map_err(|e| e.to_string())?
        .get_blocking()
        .map_err(|e| e.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handles_found_by_name_follow_the_actor_to_its_next_life() {
    let cluster = Cluster::local(2).await.expect("cluster starts");
    let ray = cluster.connect().await.expect("driver joins");
    let a = Tally::options()
        .name("wanderer")
        .max_restarts(-1)
        .remote(&ray, 10)
        .unwrap();
    // Registered once it lives.
    assert_eq!(a.add(0).unwrap().get().await.unwrap(), 10);
    let found = ray.get_actor::<Tally>("wanderer").expect("found by name");
    assert_eq!(found.add(1).unwrap().get().await.unwrap(), 11);
    // A handle held in another process (a task's), found by name too.
    let far = add_by_name::remote(&ray, "wanderer".to_string(), 1).unwrap();
    assert_eq!(far.get().await.unwrap(), 12);
    let first = a.pid().unwrap().get().await.unwrap();
    let _ = a.abort().unwrap().get().await.unwrap_err();
    // The borrowed handle finds the next life (state afresh: 10 + 5).
    assert_eq!(found.add(5).unwrap().get().await.unwrap(), 15);
    assert_ne!(found.pid().unwrap().get().await.unwrap(), first);
    let far = add_by_name::remote(&ray, "wanderer".to_string(), 1).unwrap();
    assert_eq!(far.get().await.unwrap(), 16);
    ray.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_in_flight_when_its_actor_dies_is_sent_to_its_next_life() {
    let cluster = Cluster::local(1).await.expect("cluster starts");
    let ray = cluster.connect().await.expect("driver joins");
    let a = Tally::options()
        .max_restarts(-1)
        .max_task_retries(-1)
        .remote(&ray, 0)
        .unwrap();
    let first = a.pid().unwrap().get().await.unwrap();
    let m = marker("actor-retry");
    let again = a.abort_once(m.display().to_string()).unwrap();
    let after = a.add(7).unwrap();
    let pid = again.get().await.expect("re-sent to the next life");
    assert_ne!(pid, first);
    assert_eq!(
        after.get().await.unwrap(),
        7,
        "later calls run after it, afresh"
    );
    let _ = std::fs::remove_file(&m);
    ray.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_actor_on_a_killed_node_restarts_on_another() {
    let mut cluster = Cluster::local(2).await.expect("cluster starts");
    let ray = cluster.connect().await.expect("driver joins");
    let a = Tally::options()
        .node_affinity(NodeId(2), true)
        .max_restarts(1)
        .max_task_retries(1)
        .remote(&ray, 1)
        .unwrap();
    assert_eq!(a.node().unwrap().get().await.unwrap(), 2);
    let killed = Instant::now();
    cluster.kill_node(1);
    // Pushed to the dead node before its death is known, the call is sent
    // again to the next life, on node 1.
    assert_eq!(a.add(1).unwrap().get().await.unwrap(), 2);
    eprintln!(
        "node killed to actor restarted and call done: {:?}",
        killed.elapsed()
    );
    assert_eq!(a.node().unwrap().get().await.unwrap(), 1);
    ray.shutdown();
}

/// An actor whose first constructor run writes the marker and hangs (its
/// node is to be killed under it); a later run returns at once.
#[remote]
struct SlowStart {
    pid: u32,
}

#[remote]
impl SlowStart {
    fn new(marker: String) -> Self {
        if !Path::new(&marker).exists() {
            std::fs::write(&marker, std::process::id().to_string()).unwrap();
            std::thread::sleep(Duration::from_secs(600));
        }
        SlowStart {
            pid: std::process::id(),
        }
    }
    /// Its node and the process its constructor ran in.
    fn home(&self) -> (u64, u32) {
        (Ray::current().expect("in an actor").node_id().0, self.pid)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_actor_whose_node_dies_during_its_first_creation_is_created_elsewhere() {
    let mut cluster = Cluster::local(2).await.expect("cluster starts");
    let ray = cluster.connect().await.expect("driver joins");
    let m = marker("first-creation");
    let a = SlowStart::options()
        .node_affinity(NodeId(2), true)
        .max_restarts(1)
        .remote(&ray, m.display().to_string())
        .unwrap();
    // The constructor runs on node 2; its node dies before it returns.
    wait_for(&m).await;
    cluster.kill_node(1);
    // The call waited for the actor to live: it reaches the next life,
    // made on the node left, in another process.
    let first: u32 = std::fs::read_to_string(&m).unwrap().parse().unwrap();
    let (node, pid) = a.home().unwrap().get().await.unwrap();
    assert_eq!(node, 1);
    assert_ne!(pid, first);
    let _ = std::fs::remove_file(&m);
    ray.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_whose_worker_aborts_runs_again_and_returns() {
    let cluster = Cluster::local(1).await.expect("cluster starts");
    let ray = cluster.connect().await.expect("driver joins");
    let m = marker("abort");
    // Default retries: the abort is a system failure, retried.
    let r = abort_once::remote(&ray, m.display().to_string()).unwrap();
    let pid = r.get().await.expect("the retry returns");
    assert_ne!(pid, crashed(&m).0, "the retry ran in a new worker process");
    let _ = std::fs::remove_file(&m);
    ray.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_retries_a_dead_worker_is_a_typed_error_naming_its_process() {
    let cluster = Cluster::local(1).await.expect("cluster starts");
    let ray = cluster.connect().await.expect("driver joins");
    let m = marker("no-retry");
    let err = abort_once::options()
        .max_retries(0)
        .remote(&ray, m.display().to_string())
        .unwrap()
        .get()
        .await
        .unwrap_err();
    let seen = epoch_nanos();
    let (crashed, at) = crashed(&m);
    // WorkerDied comes from the node that reaped the process, not from a
    // connection timing out (that would be NodeDied).
    match &err {
        Error::WorkerDied { pid, status, .. } => {
            assert_eq!(*pid, crashed);
            assert!(
                status.contains("SIGABRT") || status.contains("signal"),
                "{status}"
            );
        }
        other => panic!("expected WorkerDied, got {other:?}"),
    }
    eprintln!(
        "abort to WorkerDied: {:.1} ms",
        seen.saturating_sub(at) as f64 / 1e6
    );
    // The node starts a new worker for what comes next.
    let again = abort_once::remote(&ray, m.display().to_string()).unwrap();
    assert_ne!(again.get().await.unwrap(), crashed);
    let _ = std::fs::remove_file(&m);
    ray.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_with_sigkill_has_its_task_retried() {
    let cluster = Cluster::local(1).await.expect("cluster starts");
    let ray = cluster.connect().await.expect("driver joins");
    let m = marker("sigkill");
    let r = hang_once::remote(&ray, m.display().to_string()).unwrap();
    wait_for(&m).await;
    let pid: i32 = std::fs::read_to_string(&m).unwrap().parse().unwrap();
    let status = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    assert_eq!(r.get().await.expect("the retry returns"), 1);
    let _ = std::fs::remove_file(&m);
    ray.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_on_a_killed_node_runs_again_on_another() {
    let mut cluster = Cluster::local(2).await.expect("cluster starts");
    let ray = cluster.connect().await.expect("driver joins");
    let m = marker("node");
    // Preferably on node 2 (the second process); anywhere once it is gone.
    let r = hang_once::options()
        .node_affinity(NodeId(2), true)
        .remote(&ray, m.display().to_string())
        .unwrap();
    wait_for(&m).await;
    let killed = Instant::now();
    cluster.kill_node(1);
    let node = r.get().await.expect("the retry returns");
    eprintln!(
        "node killed to task retried and done: {:?}",
        killed.elapsed()
    );
    assert_eq!(node, 1, "run again on the node left");
    let _ = std::fs::remove_file(&m);
    ray.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_counts_below_minus_one_are_refused_in_both_modes() {
    let embedded = ray_core::init().await.unwrap();
    let cluster = Cluster::local(1).await.expect("cluster starts");
    let on_cluster = cluster.connect().await.expect("driver joins");
    for ray in [&embedded, &on_cluster] {
        let err = abort_once::options()
            .max_retries(-2)
            .remote(ray, String::new())
            .unwrap_err();
        assert!(
            matches!(&err, Error::InvalidArgument(m) if m.contains("max_retries")),
            "{err:?}"
        );
        for err in [
            Tally::options().max_restarts(-5).remote(ray, 0).err(),
            Tally::options().max_task_retries(-2).remote(ray, 0).err(),
        ] {
            assert!(
                matches!(&err, Some(Error::InvalidArgument(m)) if m.contains("-1 (no limit)")),
                "{err:?}"
            );
        }
    }
    embedded.shutdown();
    on_cluster.shutdown();
}

/// Spins its thread for `ms` milliseconds; returns the node it ran on.
#[remote]
fn spin(ms: u64) -> u64 {
    let until = Instant::now() + Duration::from_millis(ms);
    let mut x = 0u64;
    while Instant::now() < until {
        x = std::hint::black_box(x.wrapping_add(1));
    }
    Ray::current().expect("in a task").node_id().0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_nodes_are_not_declared_dead() {
    // Health timeout 1 s (the local default). Every core is kept busy for
    // four of them: user tasks fill every CPU of both nodes, and threads
    // of this process spin beside them.
    let cluster = Cluster::local(2).await.expect("cluster starts");
    let ray = cluster.connect().await.expect("driver joins");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let spinners: Vec<_> = (0..2)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            })
        })
        .collect();
    // Twice the cluster's CPUs: two rounds of 2 s each. No retries, so a
    // node declared dead under them fails its tasks.
    let refs: Vec<_> = (0..8)
        .map(|_| spin::options().max_retries(0).remote(&ray, 2_000).unwrap())
        .collect();
    let mut ran_on = std::collections::BTreeSet::new();
    for r in refs {
        ran_on.insert(r.get().await.expect("no node was taken for dead"));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for s in spinners {
        s.join().unwrap();
    }
    let nodes = ray.nodes().await.unwrap();
    assert_eq!(nodes.len(), 2);
    for n in &nodes {
        assert!(n.alive, "{n:?}");
    }
    assert_eq!(ran_on.len(), 2, "both nodes were busy: {ran_on:?}");
    ray.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_node_is_declared_dead_and_exits_when_resumed() {
    let mut cluster = Cluster::local(2).await.expect("cluster starts");
    let ray = cluster.connect().await.expect("driver joins");
    let m = marker("pause");
    let r = hang_once::options()
        .node_affinity(NodeId(2), true)
        .remote(&ray, m.display().to_string())
        .unwrap();
    wait_for(&m).await;
    let paused = Instant::now();
    // SIGSTOP the node and its workers: no connection closes, they just
    // fall silent.
    cluster.pause_node(1);
    let node = r.get().await.expect("the retry returns");
    eprintln!(
        "node paused to task retried and done: {:?}",
        paused.elapsed()
    );
    assert_eq!(node, 1, "run again on the node left");
    let nodes = ray.nodes().await.unwrap();
    let two = nodes.iter().find(|n| n.id == NodeId(2)).unwrap();
    assert!(!two.alive);
    assert!(
        two.death_cause
            .as_deref()
            .is_some_and(|c| c.contains("no heartbeat")),
        "{two:?}"
    );
    // Resumed, it hears it is dead and exits rather than serve on.
    cluster.resume_node(1);
    let status = cluster
        .wait_node_exit(1, Duration::from_secs(30))
        .await
        .expect("the resumed node exits");
    assert!(!status.success(), "{status}");
    // Work goes on without it.
    assert_eq!(spin::remote(&ray, 1).unwrap().get().await.unwrap(), 1);
    let _ = std::fs::remove_file(&m);
    ray.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_head_does_not_take_its_nodes_for_dead() {
    let cluster = Cluster::local(2).await.expect("cluster starts");
    let ray = cluster.connect().await.expect("driver joins");
    // The head (the GCS, with node 1) stops for three health timeouts;
    // node 2's heartbeats wait unread in its socket meanwhile.
    cluster.pause_node(0);
    tokio::time::sleep(Duration::from_secs(3)).await;
    cluster.resume_node(0);
    // Two more health timeouts, for any wrong verdict to be reached.
    tokio::time::sleep(Duration::from_secs(2)).await;
    for n in ray.nodes().await.unwrap() {
        assert!(n.alive, "the GCS's own stall is no node's silence: {n:?}");
    }
    let refs: Vec<_> = (0..8).map(|_| spin::remote(&ray, 300).unwrap()).collect();
    let mut on = std::collections::BTreeSet::new();
    for r in refs {
        on.insert(r.get().await.unwrap());
    }
    assert_eq!(on.len(), 2, "both nodes still take work: {on:?}");
    ray.shutdown();
}

/// Counts its runs in the file `counter` (a byte per run); returns `n`
/// bytes of 7, too many to travel with the result.
#[remote]
fn big_counted(counter: String, n: usize) -> Vec<u8> {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&counter)
        .unwrap();
    f.write_all(b"x").unwrap();
    vec![7; n]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_value_lost_with_its_worker_before_its_owner_took_it_is_made_again() {
    // The worker keeps a large value until its owner takes it; this one
    // aborts when asked for it, while the file exists.
    let take = marker("take");
    let config = ray_core::LocalClusterConfig {
        env: vec![(
            ray_core::cluster::testing::ABORT_ON_TAKE.into(),
            take.display().to_string(),
        )],
        ..Default::default()
    };
    let cluster = Cluster::local_with(1, config)
        .await
        .expect("cluster starts");
    let ray = cluster.connect().await.expect("driver joins");
    let n = 1 << 20;
    std::fs::write(&take, "armed").unwrap();
    let runs = marker("runs");
    let r = big_counted::remote(&ray, runs.display().to_string(), n).unwrap();
    let v = r.get().await.expect("made again");
    assert!(v.len() == n && v.iter().all(|&b| b == 7));
    assert!(!take.exists(), "the first take aborted its worker");
    assert_eq!(
        std::fs::read(&runs).unwrap().len(),
        2,
        "run again after the loss"
    );
    // With no retries left, the loss is the worker's death, typed.
    std::fs::write(&take, "armed").unwrap();
    let err = big_counted::options()
        .max_retries(0)
        .remote(&ray, runs.display().to_string(), n)
        .unwrap()
        .get()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::WorkerDied { .. }), "{err:?}");
    let _ = std::fs::remove_file(&runs);
    ray.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bundles_on_a_dead_node_are_reserved_again_and_their_work_proceeds() {
    use ray_core::{Bundle, PlacementStrategy};
    let config = ray_core::LocalClusterConfig {
        node_labels: (0..3)
            .map(|i| [("index".to_string(), i.to_string())].into())
            .collect(),
        ..Default::default()
    };
    let mut cluster = Cluster::local_with(3, config)
        .await
        .expect("cluster starts");
    let ray = cluster.connect().await.expect("driver joins");
    let pg = ray
        .placement_group(
            vec![Bundle::new().num_cpus(1.0), Bundle::new().num_cpus(1.0)],
            PlacementStrategy::StrictSpread,
        )
        .unwrap();
    pg.ready().await.expect("two bundles on two nodes");
    let in_bundle = |i: usize| {
        spin::options()
            .placement_group(&pg, Some(i))
            .remote(&ray, 1)
            .unwrap()
    };
    let homes = [
        in_bundle(0).get().await.unwrap(),
        in_bundle(1).get().await.unwrap(),
    ];
    // Kill the home of a bundle that is not on the head (node 1, the GCS),
    // found by the label its process was started with.
    let lost = usize::from(homes[0] == 1);
    let victim = homes[lost];
    let index: usize = ray
        .nodes()
        .await
        .unwrap()
        .into_iter()
        .find(|n| n.id == NodeId(victim))
        .and_then(|n| n.labels.get("index").and_then(|i| i.parse().ok()))
        .expect("every node has its index label");
    cluster.kill_node(index);
    // Work for the lost bundle waits for its new home, then runs there:
    // a live node, and not the other bundle's (STRICT_SPREAD still holds).
    let moved = in_bundle(lost)
        .get_timeout(Duration::from_secs(60))
        .await
        .expect("the bundle's work runs on its new node");
    assert_ne!(moved, victim);
    assert_ne!(moved, homes[1 - lost], "STRICT_SPREAD kept: {homes:?}");
    assert_eq!(in_bundle(1 - lost).get().await.unwrap(), homes[1 - lost]);
    ray.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_isolated_actors_crash_takes_only_it() {
    let cluster = Cluster::local(1).await.expect("cluster starts");
    let ray = cluster.connect().await.expect("driver joins");
    let a = Tally::remote(&ray, 0).unwrap();
    let b = Tally::remote(&ray, 100).unwrap();
    let alone = Tally::options().isolated(true).remote(&ray, 0).unwrap();
    let again = Tally::options()
        .isolated(true)
        .max_restarts(1)
        .remote(&ray, 0)
        .unwrap();
    let shared = a.pid().unwrap().get().await.unwrap();
    assert_eq!(b.pid().unwrap().get().await.unwrap(), shared);
    let own = alone.pid().unwrap().get().await.unwrap();
    let own2 = again.pid().unwrap().get().await.unwrap();
    assert!(
        own != shared && own2 != shared && own != own2,
        "a process each"
    );

    // The isolated actor's crash takes only it.
    let err = alone.abort().unwrap().get().await.unwrap_err();
    assert!(matches!(err, Error::ActorDied { .. }), "{err:?}");
    assert_eq!(a.add(1).unwrap().get().await.unwrap(), 1);
    assert_eq!(b.add(1).unwrap().get().await.unwrap(), 101);
    assert_eq!(a.pid().unwrap().get().await.unwrap(), shared);
    // One with restarts comes back in a process of its own again.
    let _ = again.abort().unwrap().get().await;
    let next = again.pid().unwrap().get().await.unwrap();
    assert!(next != shared && next != own2);

    // Dropped, an isolated actor's process is stopped, not leaked.
    drop(again);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !gone(next) {
        assert!(Instant::now() < deadline, "process {next} still runs");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A crash of the shared process takes every actor in it.
    let _ = a.abort().unwrap().get().await;
    let err = b.add(1).unwrap().get().await.unwrap_err();
    assert!(matches!(err, Error::ActorDied { .. }), "{err:?}");
    ray.shutdown();
}

/// An actor that owns what it puts.
#[remote]
struct Maker {
    made: u64,
}

#[remote]
impl Maker {
    fn new() -> Self {
        Maker { made: 0 }
    }
    /// Puts `v` and hands out the ref: this actor's process owns it.
    fn make(&mut self, v: u64) -> ObjectRef<u64> {
        self.made += 1;
        Ray::current()
            .expect("in an actor")
            .put_blocking(v)
            .unwrap()
    }
    fn abort(&self) -> u32 {
        std::process::abort()
    }
}

/// Reads the refs nested in `refs` here; says how each went: its value,
/// or `owner-died <owner>` when its owner is gone.
#[remote]
fn read_borrowed(refs: Vec<ObjectRef<u64>>) -> Vec<String> {
    refs.iter()
        .map(|r| match r.get_blocking() {
            Ok(v) => v.to_string(),
            Err(Error::OwnerDied { owner, object, .. }) if object == r.id() => {
                format!("owner-died {owner}")
            }
            Err(e) => format!("other: {e:?}"),
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ref_outliving_its_owner_is_owner_died_naming_it() {
    let cluster = Cluster::local(1).await.expect("cluster starts");
    let ray = cluster.connect().await.expect("driver joins");
    // The maker has a process of its own: it can die alone.
    let maker = Maker::options().isolated(true).remote(&ray).unwrap();
    let made: ObjectRef<u64> = maker.make(8).unwrap().get().await.unwrap();
    let owner = made.id().owner;
    // The driver got a copy with the ref; the worker process has none.
    assert_eq!(made.get().await.unwrap(), 8);
    let _ = maker.abort().unwrap().get().await;
    // A process that borrows it now finds its owner gone (a process that
    // fetched it before keeps its copy).
    let after = read_borrowed::remote(&ray, vec![made.clone()])
        .unwrap()
        .get()
        .await
        .unwrap();
    assert_eq!(after, vec![format!("owner-died {owner}")]);
    ray.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_actor_whose_handles_are_dropped_finishes_sent_calls_then_goes() {
    let cluster = Cluster::local(1).await.expect("cluster starts");
    let ray = cluster.connect().await.expect("driver joins");
    let a = Tally::options().isolated(true).remote(&ray, 0).unwrap();
    let pid = a.pid().unwrap().get().await.unwrap();
    let r = a.add(5).unwrap();
    drop(a);
    // As embedded: a call made before the last handle went still runs.
    assert_eq!(r.get().await.unwrap(), 5);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !gone(pid) {
        assert!(Instant::now() < deadline, "process {pid} still runs");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    ray.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_detached_actor_restarts_after_its_owners_handles_are_gone() {
    let cluster = Cluster::local(1).await.expect("cluster starts");
    let ray = cluster.connect().await.expect("driver joins");
    let a = Tally::options()
        .name("lasting")
        .detached(true)
        .isolated(true)
        .max_restarts(1)
        .remote(&ray, 10)
        .unwrap();
    let first = a.pid().unwrap().get().await.unwrap();
    drop(a);
    // Its owner still watches it: killed from outside, it comes back.
    let status = std::process::Command::new("kill")
        .args(["-9", &first.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let found = ray.get_actor::<Tally>("lasting").expect("still named");
    let deadline = Instant::now() + Duration::from_secs(30);
    let next = loop {
        // Calls in flight at the death fail; the next life answers.
        if let Ok(pid) = found.pid().unwrap().get().await {
            if pid != first {
                break pid;
            }
        }
        assert!(Instant::now() < deadline, "no next life");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_ne!(next, first);
    assert_eq!(found.add(1).unwrap().get().await.unwrap(), 11);
    ray.shutdown();
}

/// An actor whose constructor writes its pid to `started`, then waits for
/// the test to write `gate`.
#[remote]
struct Gated;

#[remote]
impl Gated {
    fn new(started: String, gate: String) -> Self {
        std::fs::write(&started, std::process::id().to_string()).unwrap();
        while !Path::new(&gate).exists() {
            std::thread::sleep(Duration::from_millis(20));
        }
        Gated
    }
    fn pid(&self) -> u32 {
        std::process::id()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_actor_killed_while_its_constructor_runs_fails_calls_at_once_and_is_killed_once_made() {
    let cluster = Cluster::local(1).await.expect("cluster starts");
    let ray = cluster.connect().await.expect("driver joins");
    let (started, gate) = (marker("gated-started"), marker("gated-gate"));
    let a = Gated::options()
        .isolated(true)
        .remote(
            &ray,
            started.display().to_string(),
            gate.display().to_string(),
        )
        .unwrap();
    wait_for(&started).await;
    let pid: u32 = std::fs::read_to_string(&started).unwrap().parse().unwrap();
    a.kill();
    // The constructor still waits for the gate: the call fails without
    // waiting for the creation to end (it would hang here if it did).
    let r = a.pid().unwrap();
    let out = tokio::time::timeout(Duration::from_secs(60), r.get())
        .await
        .expect("a call after the kill fails while the constructor still runs");
    match out {
        Err(Error::ActorDied { cause, .. }) => assert!(cause.contains("killed"), "{cause}"),
        other => panic!("expected ActorDied, got {other:?}"),
    }
    assert!(!gone(pid), "the constructor still runs");
    // The life made after the kill is killed too: its process exits.
    std::fs::write(&gate, "").unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !gone(pid) {
        assert!(
            Instant::now() < deadline,
            "the actor made after its kill lives on"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = std::fs::remove_file(&started);
    let _ = std::fs::remove_file(&gate);
    ray.shutdown();
}
