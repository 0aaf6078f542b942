//! Actors on the embedded runtime.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use ray_core::prelude::*;

use ray_core::Error;
use ray_test_support::embedded;

#[remote]
struct Counter {
    n: u64,
    log: Vec<u64>,
}

#[remote]
impl Counter {
    fn new(start: u64) -> Self {
        Counter {
            n: start,
            log: Vec::new(),
        }
    }

    fn incr(&mut self, by: u64) -> u64 {
        self.n += by;
        self.log.push(by);
        self.n
    }

    fn value(&self) -> u64 {
        self.n
    }

    fn log(&self) -> Vec<u64> {
        self.log.clone()
    }

    async fn slow_value(&self, ms: u64) -> u64 {
        tokio::time::sleep(Duration::from_millis(ms)).await;
        self.n
    }

    fn fail(&self) -> Result<u64, String> {
        Err("counter says no".into())
    }

    fn explode(&mut self) -> u64 {
        panic!("counter exploded")
    }
}

static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);
static MAX_IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);

/// Calls the actor behind a handle passed as an argument.
#[remote]
fn add_through(c: ActorHandle<Counter>, by: u64) -> u64 {
    c.incr(by).unwrap().get_blocking().unwrap()
}

#[remote]
struct Sleeper;

#[remote]
impl Sleeper {
    fn new() -> Self {
        Sleeper
    }

    fn nap(&self, ms: u64) -> u64 {
        let now = IN_FLIGHT.fetch_add(1, Ordering::SeqCst) + 1;
        MAX_IN_FLIGHT.fetch_max(now, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(ms));
        IN_FLIGHT.fetch_sub(1, Ordering::SeqCst);
        ms
    }
}

#[remote]
struct Broken;

#[remote]
impl Broken {
    fn new(fail: bool) -> Self {
        if fail {
            panic!("constructor refused");
        }
        Broken
    }

    fn ping(&self) -> u8 {
        1
    }
}

/// An actor that creates a child actor and calls it, from inside a call.
#[remote]
struct Parent {
    child: Option<ActorHandle<Counter>>,
}

#[remote]
impl Parent {
    fn new() -> Self {
        Parent { child: None }
    }

    fn spawn_and_call(&mut self, times: u64) -> u64 {
        let ray = Ray::current().expect("inside an actor");
        let child = Counter::remote(&ray, 0).expect("spawn child");
        let mut last = 0;
        for _ in 0..times {
            last = child.incr(1).expect("call").get_blocking().expect("result");
        }
        self.child = Some(child);
        last
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_run_one_at_a_time_in_submission_order() {
    let ray = embedded::runtime(2.0).await;
    let c = Counter::remote(&ray, 10).unwrap();
    let refs: Vec<_> = (1..=100).map(|i| c.incr(i).unwrap()).collect();
    let last = refs.last().unwrap().get().await.unwrap();
    assert_eq!(last, 10 + (1..=100).sum::<u64>());
    assert_eq!(
        c.log().unwrap().get().await.unwrap(),
        (1..=100).collect::<Vec<u64>>()
    );
    // Each call saw the state left by the one before.
    let mut expect = 10;
    for (i, r) in refs.iter().enumerate() {
        expect += i as u64 + 1;
        assert_eq!(r.get().await.unwrap(), expect);
    }
    ray.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_methods_and_user_errors_and_panics() {
    let ray = embedded::runtime(2.0).await;
    let c = Counter::remote(&ray, 3).unwrap();
    assert_eq!(c.slow_value(5).unwrap().get().await.unwrap(), 3);
    let err = c.fail().unwrap().get().await.unwrap_err();
    assert!(
        matches!(&err, Error::TaskFailed { error, .. } if error.message() == "counter says no"),
        "{err:?}"
    );
    let err = c.explode().unwrap().get().await.unwrap_err();
    assert!(
        matches!(&err, Error::TaskPanicked { message, function, .. }
        if message == "counter exploded" && function.ends_with("Counter::explode")),
        "{err:?}"
    );
    // The actor survives a panicking call.
    assert_eq!(c.incr(1).unwrap().get().await.unwrap(), 4);
    ray.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_concurrency_lets_shared_calls_overlap() {
    let ray = embedded::runtime(4.0).await;
    MAX_IN_FLIGHT.store(0, Ordering::SeqCst);
    let s = Sleeper::options().max_concurrency(4).remote(&ray).unwrap();
    let refs: Vec<_> = (0..8).map(|_| s.nap(30).unwrap()).collect();
    for r in refs {
        r.get().await.unwrap();
    }
    assert!(MAX_IN_FLIGHT.load(Ordering::SeqCst) > 1, "calls overlapped");
    assert!(
        MAX_IN_FLIGHT.load(Ordering::SeqCst) <= 4,
        "never above max_concurrency"
    );

    MAX_IN_FLIGHT.store(0, Ordering::SeqCst);
    let serial = Sleeper::remote(&ray).unwrap();
    let refs: Vec<_> = (0..4).map(|_| serial.nap(10).unwrap()).collect();
    for r in refs {
        r.get().await.unwrap();
    }
    assert_eq!(
        MAX_IN_FLIGHT.load(Ordering::SeqCst),
        1,
        "default is one call at a time"
    );
    ray.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_constructor_makes_calls_fail_with_actor_died() {
    let ray = embedded::runtime(2.0).await;
    let b = Broken::remote(&ray, true).unwrap();
    let err = b.ping().unwrap().get().await.unwrap_err();
    assert!(
        matches!(&err, Error::ActorDied { cause, .. } if cause.contains("constructor refused")),
        "{err:?}"
    );
    let ok = Broken::remote(&ray, false).unwrap();
    assert_eq!(ok.ping().unwrap().get().await.unwrap(), 1);
    ray.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn named_actors_are_found_by_name_and_names_are_unique() {
    let ray = embedded::runtime(2.0).await;
    let c = Counter::options().name("tally").remote(&ray, 1).unwrap();
    c.incr(1).unwrap().get().await.unwrap();
    let again: ActorHandle<Counter> = ray.get_actor("tally").unwrap();
    assert_eq!(again.value().unwrap().get().await.unwrap(), 2);
    let taken = Counter::options()
        .name("tally")
        .remote(&ray, 0)
        .unwrap_err();
    assert!(matches!(taken, Error::NameTaken { .. }), "{taken:?}");
    // Same name in another namespace is fine.
    Counter::options()
        .name("tally")
        .namespace("other")
        .remote(&ray, 0)
        .unwrap();
    assert!(matches!(
        ray.get_actor::<Counter>("nobody"),
        Err(Error::ActorNotFound { .. })
    ));
    assert!(matches!(
        ray.get_actor::<Sleeper>("tally"),
        Err(Error::ActorClassMismatch { .. })
    ));
    // A killed actor frees its name.
    again.kill();
    assert!(matches!(
        c.value().unwrap().get().await,
        Err(Error::ActorDied { .. })
    ));
    Counter::options().name("tally").remote(&ray, 0).unwrap();
    ray.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn actor_resources_are_held_for_life_and_infeasible_fails_fast() {
    let ray = embedded::runtime(2.0).await;
    let err = Counter::options()
        .num_gpus(1.0)
        .remote(&ray, 0)
        .unwrap_err();
    assert!(matches!(err, Error::Infeasible { .. }), "{err:?}");
    let c = Counter::options().num_cpus(1.5).remote(&ray, 0).unwrap();
    c.incr(1).unwrap().get().await.unwrap();
    assert_eq!(ray.stats().available.get("CPU").to_f64(), 0.5);
    drop(c);
    // Dropping the last handle ends the actor and returns its CPUs.
    let mut returned = false;
    for _ in 0..100 {
        if ray.stats().available.get("CPU").to_f64() == 2.0 {
            returned = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(returned, "resources came back: {:?}", ray.stats().available);
    ray.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_actor_whose_handle_is_inside_a_value_lives_until_the_value_goes() {
    let ray = embedded::runtime(2.0).await;
    let c = Counter::options().num_cpus(1.0).remote(&ray, 0).unwrap();
    c.incr(1).unwrap().get().await.unwrap();
    let boxed = ray.put(vec![c.clone()]).await.unwrap();
    drop(c);
    // Only the value holds it now: it lives, found through the value.
    let handles: Vec<ActorHandle<Counter>> = boxed.get().await.unwrap();
    assert_eq!(handles[0].incr(1).unwrap().get().await.unwrap(), 2);
    drop(handles);
    assert_eq!(ray.stats().available.get("CPU").to_f64(), 1.0);
    // The value gone too: the actor ends and its CPU comes back (as on a
    // cluster, where such handles are counted across processes).
    drop(boxed);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while ray.stats().available.get("CPU").to_f64() != 2.0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the actor's CPU never came back: {:?}",
            ray.stats().available
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    ray.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn actors_create_actors_and_block_on_them_without_deadlock() {
    let ray = embedded::runtime(1.0).await;
    let p = Parent::remote(&ray).unwrap();
    let r = p.spawn_and_call(5).unwrap();
    assert_eq!(r.get_timeout(Duration::from_secs(30)).await.unwrap(), 5);
    ray.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_kills_actors() {
    let ray = embedded::runtime(2.0).await;
    let c = Counter::options().name("x").remote(&ray, 0).unwrap();
    c.incr(1).unwrap().get().await.unwrap();
    ray.shutdown();
    assert!(matches!(c.incr(1), Err(Error::ShutDown)));
}

#[test]
fn registry_lists_actor_classes_and_methods() {
    let reg = ray_core::registry::registry();
    let class = reg
        .actor_classes()
        .into_iter()
        .find(|c| c.name == "actors::Counter")
        .expect("Counter registered");
    let methods: Vec<&str> = reg.methods_of(class.id).iter().map(|m| m.name).collect();
    assert_eq!(
        methods,
        [
            "actors::Counter::explode",
            "actors::Counter::fail",
            "actors::Counter::incr",
            "actors::Counter::log",
            "actors::Counter::slow_value",
            "actors::Counter::value",
        ]
    );
}

#[remote]
struct Account {
    balance: u64,
}

#[remote]
impl Account {
    fn open(initial: u64) -> Result<Self, String> {
        if initial == 0 {
            Err("an account needs a deposit".into())
        } else {
            Ok(Account { balance: initial })
        }
    }

    fn balance(&self) -> u64 {
        self.balance
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn constructor_returning_err_kills_the_actor_with_the_message() {
    let ray = embedded::runtime(2.0).await;
    let ok = Account::remote(&ray, 5).unwrap();
    assert_eq!(ok.balance().unwrap().get().await.unwrap(), 5);
    let bad = Account::remote(&ray, 0).unwrap();
    let err = bad.balance().unwrap().get().await.unwrap_err();
    assert!(
        matches!(&err, Error::ActorDied { cause, .. } if cause.contains("an account needs a deposit")),
        "{err:?}"
    );
    ray.shutdown();
}

#[remote]
struct Quitter;

#[remote]
impl Quitter {
    fn new() -> Self {
        Quitter
    }

    /// Ray's `exit_actor` pattern: a method kills its own actor.
    fn quit(&mut self, name: String) -> u8 {
        let ray = Ray::current().expect("inside an actor");
        ray.get_actor::<Quitter>(&name).expect("named").kill();
        7
    }
}

#[remote]
fn slow_value(ms: u64) -> u64 {
    std::thread::sleep(Duration::from_millis(ms));
    ms
}

#[remote]
struct NeedsArg {
    v: u64,
}

#[remote]
impl NeedsArg {
    fn new(v: u64) -> Self {
        NeedsArg { v }
    }

    fn v(&self) -> u64 {
        self.v
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_method_can_kill_its_own_actor() {
    let ray = embedded::runtime(2.0).await;
    let q = Quitter::options().name("q").remote(&ray).unwrap();
    let r = q.quit("q").unwrap();
    assert_eq!(r.get_timeout(Duration::from_secs(20)).await.unwrap(), 7);
    assert!(matches!(
        q.quit("q").unwrap().get().await,
        Err(Error::ActorDied { .. })
    ));
    ray.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_an_actor_still_waiting_for_resources_never_holds_them() {
    let ray = embedded::runtime(1.0).await;
    let a = Counter::options().num_cpus(1.0).remote(&ray, 0).unwrap();
    a.incr(1).unwrap().get().await.unwrap();
    let b = Counter::options().num_cpus(1.0).remote(&ray, 0).unwrap();
    b.kill();
    a.kill();
    // b's creation is admitted now; it must give the CPU straight back.
    let t = slow_value::remote(&ray, 1).unwrap();
    assert_eq!(t.get_timeout(Duration::from_secs(20)).await.unwrap(), 1);
    assert!(matches!(
        b.value().unwrap().get().await,
        Err(Error::ActorDied { .. })
    ));
    let mut back = false;
    for _ in 0..200 {
        if ray.stats().available.get("CPU").to_f64() == 1.0 {
            back = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(back, "CPU returned: {:?}", ray.stats().available);
    drop(b);
    ray.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_actor_waiting_for_its_constructor_argument_holds_no_resources() {
    // One CPU: the argument's producer needs it, so the actor must not take
    // it while it waits for the argument.
    let ray = embedded::runtime(1.0).await;
    let x = slow_value::remote(&ray, 20).unwrap();
    let actor = NeedsArg::options().num_cpus(1.0).remote(&ray, &x).unwrap();
    let v = actor.v().unwrap();
    assert_eq!(v.get_timeout(Duration::from_secs(20)).await.unwrap(), 20);
    ray.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_stops_unnamed_actors_too() {
    let ray = embedded::runtime(2.0).await;
    let c = Counter::remote(&ray, 0).unwrap();
    c.incr(1).unwrap().get().await.unwrap();
    ray.shutdown();
    assert!(matches!(c.incr(1), Err(Error::ShutDown)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handle_passed_to_a_task_reaches_the_same_actor_and_keeps_it_alive() {
    let ray = embedded::runtime(2.0).await;
    let c = Counter::remote(&ray, 1).unwrap();
    let r = add_through::remote(&ray, c.clone(), 10u64).unwrap();
    assert_eq!(r.get().await.unwrap(), 11);
    // The handle inside a stored value keeps the actor alive after every
    // handle of the caller is dropped.
    let boxed = ray.put(c.clone()).await.unwrap();
    drop(c);
    let again = add_through::remote(&ray, &boxed, 1u64).unwrap();
    assert_eq!(again.get().await.unwrap(), 12);
    ray.shutdown();
}

/// Calls of each round met so far (a round's calls wait for each other).
static MET: [AtomicUsize; 16] = [const { AtomicUsize::new(0) }; 16];

#[remote]
struct Meeting;

#[remote]
impl Meeting {
    fn new() -> Self {
        Meeting
    }

    /// Holds its thread (as a sleep does) until `n` calls of `round` are
    /// running at once, or 20 s pass; says whether they all met.
    fn meet(&self, round: usize, n: usize) -> bool {
        MET[round].fetch_add(1, Ordering::SeqCst);
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while MET[round].load(Ordering::SeqCst) < n && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        MET[round].load(Ordering::SeqCst) >= n
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_concurrency_calls_that_hold_their_threads_all_run_at_once_every_time() {
    // 2 CPUs, 4 calls that each hold a thread until all 4 run: the pool
    // must grow past its 2 threads, in every round (it stayed at 2, and
    // the calls ran two by two, in about half the rounds before).
    let ray = embedded::runtime(2.0).await;
    let actor = Meeting::options().max_concurrency(4).remote(&ray).unwrap();
    for round in 0..MET.len() {
        let calls: Vec<_> = (0..4).map(|_| actor.meet(round, 4).unwrap()).collect();
        for c in calls {
            assert!(
                c.get().await.unwrap(),
                "round {round}: not all 4 calls ran at once"
            );
        }
    }
    ray.shutdown();
}
