//! Distributed reference counting with real processes: refs nested in
//! values pass through several processes, and the owner frees the object
//! (its bytes leave the owner's object store) when the last borrower drops
//! its ref, not when the job ends; until then every borrower can read it.
//! A borrower whose process dies stops counting.

use std::future::Future;
use std::time::{Duration, Instant};

use ray_core::prelude::*;
use ray_core::Cluster;
use ray_test_support::process::gone;

/// Big enough to live in the object store, not inline in the table.
const LEN: usize = 1 << 20;

/// An actor that keeps the refs and actor handles it is given.
#[remote]
struct Keeper {
    kept: Vec<ObjectRef<Vec<u8>>>,
    counters: Vec<ActorHandle<Counter>>,
}

/// An actor to hand around by handle.
#[remote]
struct Counter {
    n: u64,
}

#[remote]
impl Counter {
    fn new() -> Self {
        Counter { n: 0 }
    }
    fn add(&mut self, k: u64) -> u64 {
        self.n += k;
        self.n
    }
    fn pid(&self) -> u32 {
        std::process::id()
    }
}

#[remote]
impl Keeper {
    fn new() -> Self {
        Keeper {
            kept: Vec::new(),
            counters: Vec::new(),
        }
    }

    /// Keeps a handle to a counter (the argument is the handle itself).
    fn keep_counter(&mut self, c: ActorHandle<Counter>) -> usize {
        self.counters.push(c);
        self.counters.len()
    }

    /// Adds 1 through every counter it keeps; the last total.
    fn bump(&self) -> u64 {
        let mut last = 0;
        for c in &self.counters {
            last = c.add(1).unwrap().get_blocking().unwrap();
        }
        last
    }

    /// Keeps `refs` (nested in an argument); how many it holds now.
    fn keep(&mut self, refs: Vec<ObjectRef<Vec<u8>>>) -> usize {
        self.kept.extend(refs);
        self.kept.len()
    }

    /// Keeps `r` (an argument that is a ref itself) in its state.
    fn keep_one(&mut self, r: ObjectRef<Vec<u8>>) -> usize {
        self.kept.push(r);
        self.kept.len()
    }

    /// Hands what it keeps to `other`, nested in a call's argument.
    fn hand_to(&self, other: ActorHandle<Keeper>) -> usize {
        let refs = self.kept.clone();
        other.keep(refs).unwrap().get_blocking().unwrap()
    }

    /// The sum of the bytes of everything it keeps (read from their owners).
    fn sum(&self) -> u64 {
        let sum_of = |r: &ObjectRef<Vec<u8>>| -> u64 {
            r.get_blocking()
                .unwrap()
                .iter()
                .map(|&b| u64::from(b))
                .sum()
        };
        self.kept.iter().map(sum_of).sum()
    }

    /// Drops everything it keeps.
    fn forget(&mut self) -> usize {
        self.kept.clear();
        self.counters.clear();
        0
    }

    /// Puts `len` bytes of `byte` here and hands the ref out in a value:
    /// this process owns the object.
    fn make(&self, len: u64, byte: u8) -> Vec<ObjectRef<Vec<u8>>> {
        let ray = Ray::current().expect("in an actor");
        vec![ray.put_blocking(vec![byte; len as usize]).unwrap()]
    }

    /// `len` bytes of `byte`, as the call's value.
    fn bytes(&self, len: u64, byte: u8) -> Vec<u8> {
        vec![byte; len as usize]
    }

    /// Bytes in this process's object store.
    fn store_bytes(&self) -> u64 {
        Ray::current()
            .expect("in an actor")
            .stats()
            .store_used_bytes
    }

    fn abort(&self) -> u32 {
        std::process::abort()
    }
}

/// Waits until `check` is true, failing with `what` after a minute.
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(60);
    while !check().await {
        assert!(Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until the driver has freed the object it put when its store held
/// `before` bytes (the store is back below that plus the object) and lends
/// nothing any more.
async fn wait_freed_by_driver(ray: &Ray, before: u64, what: &str) {
    eventually(what, || async {
        ray.stats().store_used_bytes < before + LEN as u64 && ray.stats().lent_objects == 0
    })
    .await;
}

async fn keeper(ray: &Ray) -> ActorHandle<Keeper> {
    // A process of its own for each: three processes in all.
    let k = Keeper::options().isolated(true).remote(ray).unwrap();
    assert_eq!(k.forget().unwrap().get().await.unwrap(), 0);
    k
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_refs_through_three_processes_are_freed_after_the_last_borrower() {
    let cluster = Cluster::local(1).await.expect("cluster starts");
    let ray = cluster.connect().await.expect("driver joins");
    let a = keeper(&ray).await;
    let b = keeper(&ray).await;
    let before = ray.stats().store_used_bytes;
    let x = ray.put(vec![3u8; LEN]).await.unwrap();
    assert!(ray.stats().store_used_bytes >= before + LEN as u64);

    // The driver -> a (nested in an argument, kept in a's state) -> b
    // (nested in a call a makes, kept in b's state).
    assert_eq!(a.keep(vec![x.clone()]).unwrap().get().await.unwrap(), 1);
    assert_eq!(a.hand_to(b.clone()).unwrap().get().await.unwrap(), 1);
    drop(x);
    assert!(ray.stats().lent_objects >= 1, "a and b borrow it");
    let want = 3 * LEN as u64;
    assert_eq!(b.sum().unwrap().get().await.unwrap(), want);

    // One borrower left: still there.
    a.forget().unwrap().get().await.unwrap();
    assert_eq!(b.sum().unwrap().get().await.unwrap(), want);
    assert!(ray.stats().store_used_bytes >= before + LEN as u64);

    // The last one drops it: the owner frees it.
    b.forget().unwrap().get().await.unwrap();
    wait_freed_by_driver(
        &ray,
        before,
        "the owner frees the object after its last borrower",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ref_argument_an_actor_keeps_stays_until_it_drops_it() {
    let cluster = Cluster::local(1).await.expect("cluster starts");
    let ray = cluster.connect().await.expect("driver joins");
    let a = keeper(&ray).await;
    let before = ray.stats().store_used_bytes;
    let x = ray.put(vec![2u8; LEN]).await.unwrap();
    // The driver holds `x` until the call ends; the actor keeps it after.
    assert_eq!(a.keep_one(x.clone()).unwrap().get().await.unwrap(), 1);
    drop(x);
    assert!(ray.stats().lent_objects >= 1, "the actor borrows it");
    assert_eq!(a.sum().unwrap().get().await.unwrap(), 2 * LEN as u64);
    a.forget().unwrap().get().await.unwrap();
    wait_freed_by_driver(&ray, before, "the owner frees the object the actor dropped").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ref_returned_in_a_value_is_freed_by_its_owner_when_the_caller_drops_it() {
    let cluster = Cluster::local(1).await.expect("cluster starts");
    let ray = cluster.connect().await.expect("driver joins");
    let maker = keeper(&ray).await;
    let other = keeper(&ray).await;
    let before = maker.store_bytes().unwrap().get().await.unwrap();
    let made = maker.make(LEN as u64, 5).unwrap().get().await.unwrap();
    let bytes = |k: &ActorHandle<Keeper>| {
        let r = k.store_bytes().unwrap();
        async move { r.get().await.unwrap() }
    };
    assert!(bytes(&maker).await >= before + LEN as u64);
    // The driver passes it on; the other keeper keeps it.
    assert_eq!(other.keep(made.clone()).unwrap().get().await.unwrap(), 1);
    drop(made);
    assert_eq!(other.sum().unwrap().get().await.unwrap(), 5 * LEN as u64);
    assert!(bytes(&maker).await >= before + LEN as u64, "still borrowed");
    other.forget().unwrap().get().await.unwrap();
    eventually(
        "the maker frees what it made once nobody holds it",
        || async { bytes(&maker).await < before + LEN as u64 },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_borrower_that_dies_stops_counting() {
    let cluster = Cluster::local(1).await.expect("cluster starts");
    let ray = cluster.connect().await.expect("driver joins");
    let a = keeper(&ray).await;
    let before = ray.stats().store_used_bytes;
    let x = ray.put(vec![1u8; LEN]).await.unwrap();
    assert_eq!(a.keep(vec![x.clone()]).unwrap().get().await.unwrap(), 1);
    drop(x);
    assert!(ray.stats().lent_objects >= 1);
    let _ = a.abort().unwrap().get().await;
    wait_freed_by_driver(&ray, before, "the owner frees what a dead borrower held").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_actor_whose_handle_went_into_a_value_goes_after_the_last_holder() {
    let cluster = Cluster::local(1).await.expect("cluster starts");
    let ray = cluster.connect().await.expect("driver joins");
    let keeper = keeper(&ray).await;
    // A process of its own: it exits when the actor is killed.
    let c = Counter::options().isolated(true).remote(&ray).unwrap();
    let pid = c.pid().unwrap().get().await.unwrap();
    assert_eq!(c.add(1).unwrap().get().await.unwrap(), 1);
    assert_eq!(
        keeper.keep_counter(c.clone()).unwrap().get().await.unwrap(),
        1
    );
    // The owner's handles are gone; the keeper's keeps it alive.
    drop(c);
    assert_eq!(keeper.bump().unwrap().get().await.unwrap(), 2);
    assert!(
        ray.stats().lent_objects >= 1,
        "the keeper borrows the actor"
    );
    assert_eq!(keeper.bump().unwrap().get().await.unwrap(), 3);
    assert!(!gone(pid));
    // The last handle goes: so does the actor, and its process.
    keeper.forget().unwrap().get().await.unwrap();
    eventually(
        "the actor's process exits after its last handle",
        || async { gone(pid) },
    )
    .await;
    assert_eq!(ray.stats().lent_objects, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_made_before_the_last_handle_of_an_escaped_actor_went_still_runs() {
    let cluster = Cluster::local(1).await.expect("cluster starts");
    let ray = cluster.connect().await.expect("driver joins");
    let keeper = keeper(&ray).await;
    let c = Counter::options().isolated(true).remote(&ray).unwrap();
    let pid = c.pid().unwrap().get().await.unwrap();
    // The handle escapes into a value, whose holder then lets it go.
    assert_eq!(
        keeper.keep_counter(c.clone()).unwrap().get().await.unwrap(),
        1
    );
    keeper.forget().unwrap().get().await.unwrap();
    // As embedded: calls made before the last handle goes still run.
    let r = c.add(5).unwrap();
    drop(c);
    assert_eq!(r.get().await.unwrap(), 5);
    eventually(
        "the actor's process exits after its last handle",
        || async { gone(pid) },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_value_of_a_call_made_before_the_last_handle_went_arrives_whole() {
    let cluster = Cluster::local(1).await.expect("cluster starts");
    let ray = cluster.connect().await.expect("driver joins");
    let k = keeper(&ray).await;
    // Large enough to be taken from the actor's worker after the answer:
    // the actor (and its process) must wait for that too.
    let big = 32 << 20;
    let r = k.bytes(big, 7).unwrap();
    drop(k);
    let v = r.get().await.unwrap();
    assert_eq!(v.len(), big as usize);
    assert!(v.iter().all(|&b| b == 7));
}
