//! The CPU pool: threads that run user code.
//!
//! What may run is decided before a job gets here: tasks are admitted by the
//! node's resources (ray-sched), actors hold theirs for life. The pool keeps
//! as many jobs running as the node has CPUs (`keep_threads`), and a job
//! blocked waiting for an object (see [`CpuPool::begin_blocking`]) stops
//! counting, so nested work never starves behind its waiting parents.
//!
//! Ray runs each admitted task and each actor in a process of its own, so a
//! job that holds its thread without using CPU (sleeping, waiting on I/O)
//! must not hold up the others either. A monitor watches the queue: when the
//! oldest job has waited longer than [`STALL`], it raises the running limit
//! by one (up to `max_running`) and starts another thread. The limit falls
//! back when the queue is empty. Short bursts thus run on as many threads as
//! there are CPUs, and only work that really waits makes the pool grow.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

/// A unit of work for the pool.
pub(crate) type Job = Box<dyn FnOnce() + Send + 'static>;

struct State {
    /// Jobs with the time they were queued.
    queue: VecDeque<(Job, Instant)>,
    /// Jobs running and not blocked.
    running: usize,
    /// How many jobs may run now: `keep_threads`, raised by the monitor.
    limit: usize,
    /// Threads waiting for work.
    idle: usize,
    /// Threads alive.
    threads: usize,
    /// Whether one idle thread is spinning for new work (at most one is).
    spinning: bool,
    /// Whether the monitor thread exists.
    monitor: bool,
    /// Whether the monitor sleeps until told that work is queued (when it
    /// is not, it already looks at the queue on a timer).
    monitor_parked: bool,
    shutdown: bool,
}

struct Inner {
    state: Mutex<State>,
    /// `state.queue.len()`, readable without the lock by the spinning thread.
    queued: AtomicUsize,
    /// `state.running`, readable without the lock.
    running: AtomicUsize,
    work: Condvar,
    /// Wakes the monitor when work is queued.
    watch: Condvar,
    max_running: usize,
    keep_threads: usize,
    /// How long an idle thread spins for new work before it sleeps.
    spin: Duration,
    name: String,
}

/// Elastic thread pool.
#[derive(Clone)]
pub(crate) struct CpuPool {
    inner: Arc<Inner>,
}

/// Threads above `keep_threads` exit after this long without work.
const EXCESS_IDLE: Duration = Duration::from_secs(5);

/// How long an idle thread of an embedded runtime spins for new work before it sleeps. A job that arrives
/// meanwhile starts without a futex wake-up, which is most of the latency
/// of a short synchronous task (measured in
/// `docs/perf-log/2026-11-figures-from-code-comments.md`).
pub(crate) const SPIN: Duration = Duration::from_micros(50);

/// How long the oldest queued job may wait before the pool grows.
pub(crate) const STALL: Duration = Duration::from_micros(500);

impl CpuPool {
    /// A pool running `keep_threads` jobs at once, growing up to
    /// `max_running` while jobs stall, whose idle threads spin for `spin`
    /// before they sleep.
    pub(crate) fn new(max_running: usize, keep_threads: usize, spin: Duration, name: &str) -> Self {
        let keep_threads = keep_threads.max(1);
        Self {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    queue: VecDeque::new(),
                    running: 0,
                    limit: keep_threads,
                    idle: 0,
                    threads: 0,
                    spinning: false,
                    monitor: false,
                    monitor_parked: false,
                    shutdown: false,
                }),
                queued: AtomicUsize::new(0),
                running: AtomicUsize::new(0),
                work: Condvar::new(),
                watch: Condvar::new(),
                max_running: max_running.max(keep_threads),
                keep_threads,
                spin,
                name: name.to_string(),
            }),
        }
    }

    /// Queues a job. Returns it back if the pool is shut down.
    pub(crate) fn execute(&self, job: Job) -> Result<(), Job> {
        let mut st = self.inner.state.lock();
        if st.shutdown {
            return Err(job);
        }
        st.queue.push_back((job, Instant::now()));
        self.inner.queued.store(st.queue.len(), Ordering::Release);
        wake_or_spawn(&self.inner, &mut st);
        if !st.monitor {
            st.monitor = true;
            let inner = self.inner.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("{}-monitor", self.inner.name))
                .spawn(move || monitor_loop(inner));
            if spawned.is_err() {
                st.monitor = false;
                tracing::warn!(target: "ray::pool", "could not spawn the pool monitor");
            }
        } else {
            nudge_monitor(&self.inner, &mut st);
        }
        Ok(())
    }

    /// The current job waits on something outside the pool: free its slot.
    pub(crate) fn begin_blocking(&self) {
        let mut st = self.inner.state.lock();
        st.running = st.running.saturating_sub(1);
        self.inner.running.store(st.running, Ordering::Relaxed);
        wake_or_spawn(&self.inner, &mut st);
    }

    /// The current job resumes; it takes a slot back even if that overcommits.
    pub(crate) fn end_blocking(&self) {
        let mut st = self.inner.state.lock();
        st.running += 1;
        self.inner.running.store(st.running, Ordering::Relaxed);
        nudge_monitor(&self.inner, &mut st);
    }

    /// Whether fewer jobs run than the node has CPUs, so a caller may spin
    /// on one briefly without taking a core from running work. A hint: read
    /// without the lock.
    pub(crate) fn has_idle_core(&self) -> bool {
        self.inner.running.load(Ordering::Relaxed) < self.inner.keep_threads
    }

    /// Stops taking jobs; returns those still queued. Running jobs finish.
    pub(crate) fn shutdown(&self) -> Vec<Job> {
        let mut st = self.inner.state.lock();
        st.shutdown = true;
        let left = st.queue.drain(..).map(|(job, _)| job).collect();
        self.inner.queued.store(0, Ordering::Release);
        self.inner.work.notify_all();
        self.inner.watch.notify_all();
        left
    }

    /// Number of threads alive (for tests and stats).
    #[cfg(test)]
    pub(crate) fn threads(&self) -> usize {
        self.inner.state.lock().threads
    }
}

/// Wakes an idle thread or starts one if a job waits and a slot is free.
fn wake_or_spawn(inner: &Arc<Inner>, st: &mut State) {
    if st.running >= st.limit || st.queue.is_empty() || st.spinning {
        // Either no slot, nothing to do, or a spinning thread will take it.
        return;
    }
    if st.idle > 0 {
        inner.work.notify_one();
    } else {
        st.threads += 1;
        let worker = inner.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("{}-{}", inner.name, st.threads))
            .stack_size(8 << 20)
            .spawn(move || worker_loop(worker));
        if spawned.is_err() {
            // Out of threads: the queued work runs when a slot frees.
            st.threads -= 1;
            tracing::warn!(target: "ray::pool", "could not spawn a pool thread");
        }
    }
}

/// Wakes the parked monitor when a job waits with every slot taken. Called
/// wherever a slot is taken (a job queued, a job started, a blocked job
/// resumed): a job queued while a slot still looked free, then taken by
/// another job before any thread started it, left the monitor parked and
/// the job waiting behind jobs that sleep (a new user's actor with
/// `max_concurrency(8)` ran its sleeping calls two at a time, in about a
/// third of the runs).
fn nudge_monitor(inner: &Inner, st: &mut State) {
    if st.monitor_parked && st.running >= st.limit && !st.queue.is_empty() {
        st.monitor_parked = false;
        inner.watch.notify_one();
    }
}

/// Grows the running limit while the oldest queued job waits too long.
fn monitor_loop(inner: Arc<Inner>) {
    let mut st = inner.state.lock();
    while !st.shutdown {
        let Some(waited) = st.queue.front().map(|(_, at)| at.elapsed()) else {
            st.monitor_parked = true;
            inner.watch.wait(&mut st);
            st.monitor_parked = false;
            continue;
        };
        if waited < STALL {
            inner.watch.wait_for(&mut st, STALL - waited);
            continue;
        }
        if st.running >= st.limit && st.limit < inner.max_running {
            st.limit += 1;
        }
        wake_or_spawn(&inner, &mut st);
        inner.watch.wait_for(&mut st, STALL);
    }
}

fn worker_loop(inner: Arc<Inner>) {
    let mut st = inner.state.lock();
    loop {
        if st.shutdown {
            break;
        }
        if st.running < st.limit {
            if let Some((job, _)) = st.queue.pop_front() {
                inner.queued.store(st.queue.len(), Ordering::Release);
                st.running += 1;
                inner.running.store(st.running, Ordering::Relaxed);
                // More waits: hand it on now, for `execute` may have skipped
                // the wake-up because this thread was spinning; or, every
                // slot taken now, to the monitor.
                wake_or_spawn(&inner, &mut st);
                nudge_monitor(&inner, &mut st);
                drop(st);
                job();
                st = inner.state.lock();
                st.running -= 1;
                inner.running.store(st.running, Ordering::Relaxed);
                continue;
            }
            // Nothing waits: the pool need not stay grown.
            st.limit = inner.keep_threads;
        }
        // Out of work: what this thread spends from here on (spinning,
        // handing records over) is no actor call's.
        crate::trace::thread_idles();
        if !st.spinning && st.running < st.limit && !inner.spin.is_zero() {
            st.spinning = true;
            drop(st);
            let deadline = Instant::now() + inner.spin;
            while inner.queued.load(Ordering::Acquire) == 0 && Instant::now() < deadline {
                std::hint::spin_loop();
            }
            st = inner.state.lock();
            st.spinning = false;
            if !st.queue.is_empty() || st.shutdown {
                continue;
            }
        }
        if crate::hooks::recording() {
            // About to sleep: hand insight this thread's partial batch
            // first (outside the pool's lock), or a quiet job's last
            // records would wait in it.
            drop(st);
            crate::hooks::flush();
            st = inner.state.lock();
            if (!st.queue.is_empty() && st.running < st.limit) || st.shutdown {
                continue;
            }
        }
        st.idle += 1;
        let excess = st.threads > inner.keep_threads;
        let timed_out = if excess {
            inner.work.wait_for(&mut st, EXCESS_IDLE).timed_out()
        } else {
            inner.work.wait(&mut st);
            false
        };
        st.idle -= 1;
        if timed_out && st.queue.is_empty() && st.threads > inner.keep_threads {
            break;
        }
    }
    st.threads -= 1;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc;

    #[test]
    fn jobs_that_sleep_make_the_pool_grow_after_every_pause() {
        // Three jobs queued at once on 2 threads, each waiting until all
        // three run (as sleeping actor calls hold their threads): the
        // third must get a thread of its own, in every round, the queue
        // emptying (and the monitor parking) between rounds. (The race
        // `nudge_monitor` closes does not show here, where the grown
        // threads linger between rounds; `tests/actors.rs`'s
        // `max_concurrency_calls_that_hold_their_threads_all_run_at_once_every_time`
        // catches it.)
        let pool = CpuPool::new(2, 8, SPIN, "t");
        for round in 0..30 {
            let running = Arc::new(AtomicUsize::new(0));
            let (tx, rx) = mpsc::channel::<bool>();
            for _ in 0..3 {
                let (running, tx) = (running.clone(), tx.clone());
                assert!(pool
                    .execute(Box::new(move || {
                        running.fetch_add(1, Ordering::SeqCst);
                        let deadline = Instant::now() + Duration::from_secs(20);
                        while running.load(Ordering::SeqCst) < 3 && Instant::now() < deadline {
                            std::thread::sleep(Duration::from_millis(1));
                        }
                        tx.send(running.load(Ordering::SeqCst) >= 3)
                            .expect("receiver alive");
                    }))
                    .is_ok());
            }
            for _ in 0..3 {
                let all = rx.recv_timeout(Duration::from_secs(60)).expect("job ended");
                assert!(all, "round {round}: the third job never got a thread");
            }
        }
        pool.shutdown();
    }

    #[test]
    fn runs_every_job() {
        let pool = CpuPool::new(2, 2, SPIN, "t");
        let n = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = mpsc::channel();
        for _ in 0..1000 {
            let n = n.clone();
            let tx = tx.clone();
            assert!(pool
                .execute(Box::new(move || {
                    n.fetch_add(1, Ordering::SeqCst);
                    tx.send(()).expect("receiver alive");
                }))
                .is_ok());
        }
        for _ in 0..1000 {
            rx.recv_timeout(Duration::from_secs(10)).expect("job ran");
        }
        assert_eq!(n.load(Ordering::SeqCst), 1000);
        pool.shutdown();
    }

    #[test]
    fn a_pool_that_never_spins_wakes_a_sleeping_thread_for_each_burst() {
        // A cluster process's pool: idle threads sleep at once, so every
        // job after a pause needs the wake-up, not a spinner.
        let pool = CpuPool::new(2, 2, Duration::ZERO, "t");
        let (tx, rx) = mpsc::channel::<usize>();
        for burst in 0..20 {
            for i in 0..10 {
                let tx = tx.clone();
                assert!(pool
                    .execute(Box::new(move || tx
                        .send(burst * 10 + i)
                        .expect("test alive")))
                    .is_ok());
            }
            let mut got: Vec<usize> = (0..10)
                .map(|_| rx.recv_timeout(Duration::from_secs(10)).expect("job ran"))
                .collect();
            got.sort_unstable();
            assert_eq!(got, (burst * 10..burst * 10 + 10).collect::<Vec<_>>());
            // Long enough for both threads to go to sleep.
            std::thread::sleep(Duration::from_millis(2));
        }
        pool.shutdown();
    }

    #[test]
    fn blocked_job_gives_its_slot_to_queued_work() {
        // One slot: the first job waits for the second; without handing its
        // slot over this would never finish.
        let pool = CpuPool::new(1, 1, SPIN, "t");
        let (tx, rx) = mpsc::channel::<()>();
        let (done_tx, done_rx) = mpsc::channel::<()>();
        let p2 = pool.clone();
        pool.execute(Box::new(move || {
            p2.begin_blocking();
            rx.recv().expect("second job signals");
            p2.end_blocking();
            done_tx.send(()).expect("test alive");
        }))
        .ok()
        .expect("pool open");
        pool.execute(Box::new(move || tx.send(()).expect("first job waits")))
            .ok()
            .expect("pool open");
        done_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("blocked job resumed after the queued one ran");
        assert!(pool.threads() >= 2);
        pool.shutdown();
    }

    #[test]
    fn a_job_holding_its_thread_without_blocking_does_not_starve_the_queue() {
        // One slot, held by a job that waits on a plain channel (not an
        // object, so it never calls begin_blocking). Only the monitor's
        // growth lets the second job run and answer it.
        let pool = CpuPool::new(8, 1, SPIN, "t");
        let (tx, rx) = mpsc::channel::<()>();
        let (done_tx, done_rx) = mpsc::channel::<bool>();
        pool.execute(Box::new(move || {
            let answered = rx.recv_timeout(Duration::from_secs(20)).is_ok();
            done_tx.send(answered).expect("test alive");
        }))
        .ok()
        .expect("pool open");
        pool.execute(Box::new(move || tx.send(()).expect("first job waits")))
            .ok()
            .expect("pool open");
        let answered = done_rx.recv().expect("first job finished");
        assert!(
            answered,
            "the queued job ran while the first held its thread"
        );
        pool.shutdown();
    }

    #[test]
    fn jobs_queued_while_a_thread_spins_all_start_without_waiting_on_each_other() {
        // Each job waits (on a plain channel, not an object) for the next
        // one to start: with a lost wake-up the chain would stall until the
        // monitor grows the pool, and with `max_running` 2 it cannot grow.
        for _ in 0..20 {
            let pool = CpuPool::new(2, 2, SPIN, "t");
            // Let one thread exist and spin.
            let (warm_tx, warm_rx) = mpsc::channel::<()>();
            pool.execute(Box::new(move || warm_tx.send(()).expect("test alive")))
                .ok()
                .expect("pool open");
            warm_rx.recv().expect("warm-up ran");
            let (a_tx, a_rx) = mpsc::channel::<()>();
            let (done_tx, done_rx) = mpsc::channel::<bool>();
            pool.execute(Box::new(move || {
                let answered = a_rx.recv_timeout(Duration::from_secs(20)).is_ok();
                done_tx.send(answered).expect("test alive");
            }))
            .ok()
            .expect("pool open");
            pool.execute(Box::new(move || a_tx.send(()).expect("first job waits")))
                .ok()
                .expect("pool open");
            assert!(
                done_rx.recv().expect("first job finished"),
                "second job ran while the first waited"
            );
            pool.shutdown();
        }
    }

    #[test]
    fn shutdown_returns_queued_jobs_and_refuses_new_ones() {
        let pool = CpuPool::new(1, 1, SPIN, "t");
        let (tx, rx) = mpsc::channel::<()>();
        let (started_tx, started_rx) = mpsc::channel::<()>();
        pool.execute(Box::new(move || {
            started_tx.send(()).expect("test alive");
            let _ = rx.recv();
        }))
        .ok()
        .expect("pool open");
        started_rx.recv().expect("first job started");
        pool.execute(Box::new(|| {})).ok().expect("pool open");
        let left = pool.shutdown();
        assert_eq!(left.len(), 1);
        assert!(pool.execute(Box::new(|| {})).is_err());
        drop(tx);
    }
}
