//! Deadlines that work on any thread: a tokio worker, a CPU-pool thread
//! running a sync task, or a plain thread blocked in `futures::executor`.
//!
//! `get_timeout` and `wait` with a timeout are called from all of those, and
//! most of them have no tokio reactor (tokio's timer panics there, "there is
//! no reactor running"). So timeouts in the user API use this instead: one
//! process-wide thread keeps the pending deadlines in a heap and wakes each
//! future's waker when its time comes. A deadline that is never polled
//! costs nothing; one dropped before it fires is forgotten (its waker at
//! once, its heap slot when it comes due or when forgotten slots outnumber
//! live ones).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// The timer thread's state.
#[derive(Default)]
struct Wheel {
    /// Pending deadlines, soonest first, by entry id.
    heap: BinaryHeap<Reverse<(Instant, u64)>>,
    /// The waker of each pending entry; an id missing here was cancelled.
    wakers: HashMap<u64, Waker>,
    next_id: u64,
}

struct Timer {
    wheel: Mutex<Wheel>,
    changed: Condvar,
}

/// The process's timer, started on first use.
fn timer() -> &'static Arc<Timer> {
    static TIMER: OnceLock<Arc<Timer>> = OnceLock::new();
    TIMER.get_or_init(|| {
        let timer = Arc::new(Timer {
            wheel: Mutex::new(Wheel::default()),
            changed: Condvar::new(),
        });
        let t = timer.clone();
        std::thread::Builder::new()
            .name("ray-timer".into())
            .spawn(move || run(&t))
            .expect("the OS lets a process start one more thread");
        timer
    })
}

/// The timer thread: wakes every entry whose deadline has passed, then
/// sleeps until the next one or a new entry.
fn run(timer: &Timer) {
    let mut due = Vec::new();
    let mut wheel = timer.wheel.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        let now = Instant::now();
        while let Some(&Reverse((at, id))) = wheel.heap.peek() {
            if at > now {
                break;
            }
            wheel.heap.pop();
            if let Some(waker) = wheel.wakers.remove(&id) {
                due.push(waker);
            }
        }
        if !due.is_empty() {
            // Woken (and dropped) without the lock: a waker may drop a task
            // whose future holds a `Sleep`, whose drop takes the lock.
            drop(wheel);
            due.drain(..).for_each(Waker::wake);
            wheel = timer.wheel.lock().unwrap_or_else(|e| e.into_inner());
            continue;
        }
        wheel = match wheel.heap.peek() {
            Some(&Reverse((at, _))) => {
                let wait = at.saturating_duration_since(now);
                timer
                    .changed
                    .wait_timeout(wheel, wait)
                    .unwrap_or_else(|e| e.into_inner())
                    .0
            }
            None => timer.changed.wait(wheel).unwrap_or_else(|e| e.into_inner()),
        };
    }
}

/// A future that resolves at `deadline`, polled on any executor.
pub(crate) struct Sleep {
    deadline: Instant,
    /// The timer entry, once registered.
    entry: Option<u64>,
}

impl Sleep {
    /// Resolves `after` from now (at once for zero).
    pub(crate) fn new(after: Duration) -> Self {
        Self {
            deadline: Instant::now().checked_add(after).unwrap_or_else(far_future),
            entry: None,
        }
    }
}

/// A deadline no program reaches (for a timeout too large to add).
fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(100 * 365 * 24 * 3600)
}

impl Future for Sleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if Instant::now() >= self.deadline {
            return Poll::Ready(());
        }
        let timer = timer();
        let mut wheel = timer.wheel.lock().unwrap_or_else(|e| e.into_inner());
        match self.entry {
            Some(id) if wheel.wakers.contains_key(&id) => {
                let old = wheel.wakers.insert(id, cx.waker().clone());
                // The replaced waker is dropped without the lock.
                drop(wheel);
                drop(old);
            }
            // Fired between the clock read above and the lock: it is due.
            Some(_) => return Poll::Ready(()),
            None => {
                let id = wheel.next_id;
                wheel.next_id += 1;
                let soonest = wheel
                    .heap
                    .peek()
                    .is_none_or(|Reverse((at, _))| self.deadline < *at);
                wheel.heap.push(Reverse((self.deadline, id)));
                wheel.wakers.insert(id, cx.waker().clone());
                drop(wheel);
                self.entry = Some(id);
                if soonest {
                    timer.changed.notify_one();
                }
            }
        }
        Poll::Pending
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        if let Some(id) = self.entry {
            // Forget the waker; its heap slot is skipped when it comes due,
            // or dropped sooner once forgotten slots outnumber live ones (a
            // long timeout that resolved early must not stay for its whole
            // length).
            let mut wheel = timer().wheel.lock().unwrap_or_else(|e| e.into_inner());
            let waker = wheel.wakers.remove(&id);
            if wheel.heap.len() > 64 && wheel.heap.len() > 2 * wheel.wakers.len() {
                let Wheel { heap, wakers, .. } = &mut *wheel;
                heap.retain(|Reverse((_, id))| wakers.contains_key(id));
            }
            drop(wheel);
            drop(waker);
        }
    }
}

/// `future`, or `None` if `after` passes first. The future is polled before
/// the clock is looked at, so a ready future wins even with a zero timeout.
pub(crate) async fn timeout<F: Future>(after: Duration, future: F) -> Option<F::Output> {
    let mut future = std::pin::pin!(future);
    let mut sleep = Sleep::new(after);
    std::future::poll_fn(|cx| {
        if let Poll::Ready(out) = future.as_mut().poll(cx) {
            return Poll::Ready(Some(out));
        }
        Pin::new(&mut sleep).poll(cx).map(|()| None)
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sleep_resolves_on_a_thread_without_any_async_runtime() {
        let start = Instant::now();
        futures::executor::block_on(Sleep::new(Duration::from_millis(20)));
        assert!(start.elapsed() >= Duration::from_millis(20));
    }

    #[test]
    fn a_pending_future_times_out_and_a_ready_one_wins_even_at_zero() {
        let never = std::future::pending::<u8>();
        assert_eq!(
            futures::executor::block_on(timeout(Duration::from_millis(10), never)),
            None
        );
        let ready = std::future::ready(7u8);
        assert_eq!(
            futures::executor::block_on(timeout(Duration::ZERO, ready)),
            Some(7)
        );
    }

    #[test]
    fn an_earlier_deadline_registered_later_still_fires_first() {
        // An hour-long sleep registers first; a short one after it must not
        // wait for it: the timer thread is told of the new soonest deadline.
        let mut long = Box::pin(Sleep::new(Duration::from_secs(3600)));
        let waker = futures::task::noop_waker();
        assert!(long
            .as_mut()
            .poll(&mut Context::from_waker(&waker))
            .is_pending());
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            futures::executor::block_on(Sleep::new(Duration::from_millis(10)));
            let _ = done.send(());
        });
        // Without the notice the short sleep would end with the long one,
        // in an hour; a minute is beyond any scheduling delay.
        assert!(
            finished.recv_timeout(Duration::from_secs(60)).is_ok(),
            "a 10 ms sleep did not end: it waited behind the hour-long one"
        );
    }

    #[test]
    fn slots_of_dropped_long_sleeps_do_not_pile_up() {
        let waker = futures::task::noop_waker();
        for _ in 0..1_000 {
            let mut sleep = Box::pin(Sleep::new(Duration::from_secs(3600)));
            assert!(sleep
                .as_mut()
                .poll(&mut Context::from_waker(&waker))
                .is_pending());
        }
        let wheel = timer().wheel.lock().unwrap();
        // Other tests' sleeps may be live meanwhile: a bound, not a count.
        assert!(
            wheel.heap.len() <= 64 + 2 * wheel.wakers.len(),
            "{} slots for {} live sleeps",
            wheel.heap.len(),
            wheel.wakers.len()
        );
    }

    #[test]
    fn a_dropped_sleep_leaves_no_waker_behind() {
        let mut sleep = Box::pin(Sleep::new(Duration::from_secs(3600)));
        let waker = futures::task::noop_waker();
        assert!(sleep
            .as_mut()
            .poll(&mut Context::from_waker(&waker))
            .is_pending());
        let id = sleep.entry.expect("registered on first poll");
        drop(sleep);
        let wheel = timer().wheel.lock().unwrap();
        assert!(!wheel.wakers.contains_key(&id));
    }
}
