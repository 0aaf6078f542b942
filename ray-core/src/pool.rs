//! The CPU pool: threads that run user code.
//!
//! What may run is decided before a job gets here: tasks are admitted by the
//! node's resources (ray-sched), actors hold theirs for life. So the pool runs
//! every job it is given at once, as Ray runs each admitted task and each
//! actor in a process of its own — up to `max_running`, a safety cap against
//! runaway thread creation. A job blocked waiting for an object (see
//! [`CpuPool::begin_blocking`]) stops counting against the cap, so nested
//! work can never starve behind its waiting parents. Threads are reused;
//! idle ones beyond `keep_threads` exit after a while.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

/// A unit of work for the pool.
pub(crate) type Job = Box<dyn FnOnce() + Send + 'static>;

struct State {
    queue: VecDeque<Job>,
    /// Jobs running and not blocked.
    running: usize,
    /// Threads waiting for work.
    idle: usize,
    /// Threads alive.
    threads: usize,
    /// Whether one idle thread is spinning for new work (at most one is).
    spinning: bool,
    shutdown: bool,
}

struct Inner {
    state: Mutex<State>,
    /// `state.queue.len()`, readable without the lock by the spinning thread.
    queued: AtomicUsize,
    work: Condvar,
    max_running: usize,
    keep_threads: usize,
    name: String,
}

/// Elastic thread pool.
#[derive(Clone)]
pub(crate) struct CpuPool {
    inner: Arc<Inner>,
}

/// Threads above `keep_threads` exit after this long without work.
const EXCESS_IDLE: Duration = Duration::from_secs(5);

/// How long an idle thread spins for new work before it sleeps. A job that
/// arrives meanwhile starts without a futex wake-up, which is most of the
/// latency of a short synchronous task.
const SPIN: Duration = Duration::from_micros(50);

impl CpuPool {
    /// A pool running at most `max_running` unblocked jobs at once and
    /// keeping up to `keep_threads` idle threads.
    pub(crate) fn new(max_running: usize, keep_threads: usize, name: &str) -> Self {
        Self {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    queue: VecDeque::new(),
                    running: 0,
                    idle: 0,
                    threads: 0,
                    spinning: false,
                    shutdown: false,
                }),
                queued: AtomicUsize::new(0),
                work: Condvar::new(),
                max_running: max_running.max(1),
                keep_threads: keep_threads.max(1),
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
        st.queue.push_back(job);
        self.inner.queued.store(st.queue.len(), Ordering::Release);
        self.wake_or_spawn(&mut st);
        Ok(())
    }

    /// Makes sure someone picks up queued work if a slot is free.
    fn wake_or_spawn(&self, st: &mut State) {
        if st.running >= self.inner.max_running || st.queue.is_empty() || st.spinning {
            // Either no slot, nothing to do, or a spinning thread will take it.
            return;
        }
        if st.idle > 0 {
            self.inner.work.notify_one();
        } else {
            st.threads += 1;
            let inner = self.inner.clone();
            let name = format!("{}-{}", self.inner.name, st.threads);
            let spawned = std::thread::Builder::new()
                .name(name)
                .stack_size(8 << 20)
                .spawn(move || worker_loop(inner));
            if spawned.is_err() {
                // Out of threads: the queued work runs when a slot frees.
                st.threads -= 1;
                tracing::warn!(target: "ray::pool", "could not spawn a pool thread");
            }
        }
    }

    /// The current job waits on something outside the pool: free its slot.
    pub(crate) fn begin_blocking(&self) {
        let mut st = self.inner.state.lock();
        st.running = st.running.saturating_sub(1);
        self.wake_or_spawn(&mut st);
    }

    /// The current job resumes; it takes a slot back even if that overcommits.
    pub(crate) fn end_blocking(&self) {
        self.inner.state.lock().running += 1;
    }

    /// Stops taking jobs; returns those still queued. Running jobs finish.
    pub(crate) fn shutdown(&self) -> Vec<Job> {
        let mut st = self.inner.state.lock();
        st.shutdown = true;
        let left = st.queue.drain(..).collect();
        self.inner.queued.store(0, Ordering::Release);
        self.inner.work.notify_all();
        left
    }

    /// Number of threads alive (for tests and stats).
    #[cfg(test)]
    pub(crate) fn threads(&self) -> usize {
        self.inner.state.lock().threads
    }
}

fn worker_loop(inner: Arc<Inner>) {
    let mut st = inner.state.lock();
    loop {
        if st.shutdown {
            break;
        }
        if st.running < inner.max_running {
            if let Some(job) = st.queue.pop_front() {
                inner.queued.store(st.queue.len(), Ordering::Release);
                st.running += 1;
                drop(st);
                job();
                st = inner.state.lock();
                st.running -= 1;
                continue;
            }
        }
        if !st.spinning && st.running < inner.max_running {
            st.spinning = true;
            drop(st);
            let deadline = Instant::now() + SPIN;
            while inner.queued.load(Ordering::Acquire) == 0 && Instant::now() < deadline {
                std::hint::spin_loop();
            }
            st = inner.state.lock();
            st.spinning = false;
            if !st.queue.is_empty() || st.shutdown {
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
    fn runs_every_job() {
        let pool = CpuPool::new(2, 2, "t");
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
    fn blocked_job_gives_its_slot_to_queued_work() {
        // One slot: the first job waits for the second; without handing its
        // slot over this would never finish.
        let pool = CpuPool::new(1, 1, "t");
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
    fn shutdown_returns_queued_jobs_and_refuses_new_ones() {
        let pool = CpuPool::new(1, 1, "t");
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
