//! The owner's side of task submission as a sans-IO state machine: events
//! in, [`Action`]s out, `now` passed in. No tokio, no clock reads, no I/O;
//! the async shell in `cluster::core` moves bytes and timers, and the
//! seeded simulation in `sim` drives it step by step through lost
//! workers, lost nodes and reordered messages.
//!
//! What it owns, per process:
//! - every task submitted and not finished, with its attempt and retry
//!   budget, queued under its scheduling key or pushed to a lease;
//! - per key: the queue, the leases held (each on one worker process, with
//!   the tasks pushed to it in order), the lease requests out, the measured
//!   task length that sizes each lease's pipeline, and a backoff after a
//!   failed request;
//! - the decision, when a worker is lost, to queue its tasks again (within
//!   their budget: `max_retries` counts system failures, as Ray's does) or
//!   to fail them.
//!
//! Guarantees (checked by the simulation for thousands of seeds): each
//! task ends exactly once, with a result taken from the worker it was last
//! pushed to or with an error; a task is pushed at most `max_retries + 1`
//! times; every lease granted is returned or lost with its worker; with no
//! node left, queued work fails instead of waiting forever.
//!
//! It must not depend on tokio, the transport or the runtime: the shell's
//! types come in through [`Shell`].

#[cfg(test)]
mod sim;

use std::collections::VecDeque;
use std::hash::Hash;
use std::time::{Duration, Instant};

use hashbrown::HashMap;
use ray_proto::{NodeId, TaskId};

/// Tasks pushed to one lease before its results come back.
pub(crate) const PIPELINE: usize = 64;
/// The work a lease's pipeline should hold: the owner pushes as many tasks
/// as it takes a worker this long to run (by their measured length), up to
/// [`PIPELINE`]; enough to hide a round trip between results.
pub(crate) const PIPELINE_BUDGET: Duration = Duration::from_millis(1);
/// How long an owner waits before asking again after a lease request
/// failed while it still had other leases.
pub(crate) const LEASE_RETRY: Duration = Duration::from_millis(100);
/// Lease requests of one shape a process has out at once (Ray's
/// `max_pending_lease_requests_per_scheduling_category` is 10).
pub(crate) const MAX_LEASE_REQUESTS: usize = 8;
/// How long an idle lease is kept for more work of its shape.
pub(crate) const LEASE_IDLE: Duration = Duration::from_millis(50);
/// How long a lease may idle while other work of this process waits for
/// a lease: then it goes back at once, since the CPUs it holds may be the
/// ones that work waits for (the warm-up's spread leases held a node's two
/// CPUs for 50 ms while a batch of default tasks waited; measured in
/// docs/perf-log/2026-11-figures-from-code-comments.md).
pub(crate) const LEASE_IDLE_WHILE_OTHERS_WAIT: Duration = Duration::from_millis(1);

/// A task's retries: the attempt it is at and how many system failures
/// it may take.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Budget {
    /// The attempt, from 0 (above 0 if the task already ran).
    pub(crate) attempt: u32,
    /// Retries of system failures ([`RETRY_FOREVER`](crate::options::RETRY_FOREVER)
    /// for no limit).
    pub(crate) max_retries: u32,
}

/// The shell's types the core carries without looking inside.
pub(crate) trait Shell {
    /// A scheduling key: work of one key shares leases.
    type Key: Clone + Eq + Hash;
    /// What the shell needs to push a task again (function, arguments,
    /// the refs they keep alive); handed back when the task ends.
    type Payload;
    /// Why a task failed.
    type Error: Clone;
    /// One worker process (its work stream); equal for the same process.
    type Worker: Clone + Eq;
}

/// A lease granted by a node, with the worker it names.
pub(crate) struct Grant<W> {
    /// The lease.
    pub(crate) lease: TaskId,
    /// The node holding its resources.
    pub(crate) node: NodeId,
    /// The worker process that runs its work.
    pub(crate) worker: W,
}

/// How a lease request ended.
pub(crate) enum Answer<S: Shell> {
    /// Granted, and the worker it names is reachable.
    Granted(Grant<S::Worker>),
    /// Granted, but its worker was gone (or its link was) before work
    /// could be pushed; `lease`, when the grant named one, goes back to
    /// its node (refused there if the node took it back with a dead
    /// worker; a worker that lives on would hold it for good otherwise).
    WorkerGone {
        /// The node and lease granted, if known.
        lease: Option<(NodeId, TaskId)>,
    },
    /// Refused or failed. `infeasible`: no node can ever run the key's
    /// work, so its queue fails at once.
    Failed {
        /// Why.
        error: S::Error,
        /// Whether no node could ever grant it.
        infeasible: bool,
    },
}

/// What the shell must do, in order.
pub(crate) enum Action<S: Shell> {
    /// Ask the local node for a lease for `key`; answer with
    /// [`TaskOwner::answer`].
    RequestLease {
        /// The key.
        key: S::Key,
    },
    /// Push `task` (its [`TaskOwner::payload`]) under `lease` to the
    /// lease's worker ([`TaskOwner::worker_of`]: the worker is not cloned
    /// per task).
    Push {
        /// The task.
        task: TaskId,
        /// Its attempt, from 0.
        attempt: u32,
        /// The lease it runs under.
        lease: TaskId,
        /// Its retries of system failures (the worker retries user errors
        /// within the same count).
        max_retries: u32,
    },
    /// Give lease `lease` back to `node`.
    ReturnLease {
        /// The node holding it.
        node: NodeId,
        /// The lease.
        lease: TaskId,
    },
    /// `task` failed for good; its payload comes back.
    Fail {
        /// The task.
        task: TaskId,
        /// What it carried.
        payload: S::Payload,
        /// Why it failed.
        error: S::Error,
        /// `true` if no node could ever run it (the shell names the task
        /// in the error).
        infeasible: bool,
    },
    /// Call [`TaskOwner::tick`] at `at` (a request backoff ends).
    WakeAt {
        /// When.
        at: Instant,
    },
}

/// A key's slot in [`TaskOwner::slots`]: tasks name their key by it, so
/// the key itself is cloned, hashed and compared once per new key, not
/// once per task.
type KeyId = usize;

/// A task waiting in its key's queue.
struct Queued<S: Shell> {
    task: TaskId,
    payload: S::Payload,
    attempt: u32,
    max_retries: u32,
}

/// A task whose result its worker keeps until the owner takes it (a value
/// too large to travel with the result). Its key is kept whole, not by
/// slot: the key may be released, and its slot reused, while the bytes
/// travel.
struct Taking<S: Shell> {
    key: S::Key,
    spread: bool,
    payload: S::Payload,
    attempt: u32,
    max_retries: u32,
}

/// A task pushed under a lease (of its key) and not answered. Queued
/// tasks live in their key's queue, so the map holds only what is in
/// flight (a backlog of 20,000 tasks in it cost W1 about 10 %).
struct Pushed<S: Shell> {
    key: KeyId,
    lease: TaskId,
    payload: S::Payload,
    attempt: u32,
    max_retries: u32,
}

struct Lease<W> {
    id: TaskId,
    node: NodeId,
    worker: W,
    /// Tasks pushed and not answered, oldest first.
    pushed: VecDeque<TaskId>,
    idle_since: Option<Instant>,
    /// Since when its oldest unanswered task has (about) been running.
    busy_from: Option<Instant>,
}

struct KeyState<S: Shell> {
    key: S::Key,
    /// Spread work takes one lease per task in flight.
    spread: bool,
    queue: VecDeque<Queued<S>>,
    leases: Vec<Lease<S::Worker>>,
    /// Lease requests sent and not answered yet.
    requesting: usize,
    /// A running average of how long one task of this key takes a worker,
    /// in nanoseconds, from the spacing of results (0: unknown).
    task_nanos: u64,
    /// No new request before this (a request failed while other leases
    /// could still run the queue).
    retry_at: Option<Instant>,
}

impl<S: Shell> KeyState<S> {
    fn new(key: S::Key, spread: bool) -> Self {
        Self {
            key,
            spread,
            queue: VecDeque::new(),
            leases: Vec::new(),
            requesting: 0,
            task_nanos: 0,
            retry_at: None,
        }
    }

    fn observe(&mut self, took: Duration) {
        let took = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX).max(1);
        self.task_nanos = if self.task_nanos == 0 {
            took
        } else {
            (self.task_nanos.saturating_mul(7) / 8).saturating_add(took / 8)
        };
    }

    /// How many tasks one lease may have pushed: enough to cover
    /// [`PIPELINE_BUDGET`] of work (short tasks fill the pipeline and hide
    /// the round trip; long ones go one at a time, so a lease granted
    /// later still finds work queued), two while their length is unknown.
    fn depth_for_length(&self) -> usize {
        match self.task_nanos {
            0 => 2,
            n => usize::try_from(PIPELINE_BUDGET.as_nanos() as u64 / n)
                .unwrap_or(PIPELINE)
                .clamp(1, PIPELINE),
        }
    }

    fn backlog(&self) -> usize {
        self.queue.len() + self.leases.iter().map(|l| l.pushed.len()).sum::<usize>()
    }

    /// Nothing queued, held or asked for: the key can go.
    fn is_empty(&self) -> bool {
        self.queue.is_empty() && self.leases.is_empty() && self.requesting == 0
    }

    /// Takes out the leases idle for at least `min_idle` at `now`.
    fn take_idle(&mut self, now: Instant, min_idle: Duration, out: &mut Vec<(NodeId, TaskId)>) {
        self.leases.retain(|l| {
            let idle = l.pushed.is_empty()
                && l.idle_since
                    .is_some_and(|t| now.saturating_duration_since(t) >= min_idle);
            if idle {
                out.push((l.node, l.id));
            }
            !idle
        });
    }
}

/// A fixed-seed hasher: the simulation replays a seed exactly.
type Fixed = foldhash::fast::FixedState;

/// The owner's side of task submission; see the module docs.
pub(crate) struct TaskOwner<S: Shell> {
    /// Tasks pushed and not answered.
    tasks: HashMap<TaskId, Pushed<S>>,
    /// Tasks answered whose value is being taken from their worker.
    taking: HashMap<TaskId, Taking<S>>,
    /// Tasks queued, over all keys.
    queued: usize,
    /// Each key with work, queued, pushed or asked for, by its slot.
    index: HashMap<S::Key, KeyId, Fixed>,
    /// The keys' states; visited in slot order, so the order of actions
    /// depends only on the events.
    slots: Vec<Option<KeyState<S>>>,
    /// Slots free for new keys.
    free: Vec<KeyId>,
    actions: VecDeque<Action<S>>,
    /// Keys whose leases took results since the last [`Self::poll`]: they
    /// are pumped once per batch of results, not once per result.
    dirty: Vec<KeyId>,
    /// The time of the latest event.
    now: Option<Instant>,
}

impl<S: Shell> Default for TaskOwner<S> {
    fn default() -> Self {
        Self {
            tasks: HashMap::new(),
            taking: HashMap::new(),
            queued: 0,
            index: HashMap::default(),
            slots: Vec::new(),
            free: Vec::new(),
            actions: VecDeque::new(),
            dirty: Vec::new(),
            now: None,
        }
    }
}

impl<S: Shell> TaskOwner<S> {
    /// The next thing to do, if any.
    pub(crate) fn poll(&mut self) -> Option<Action<S>> {
        if let (false, Some(now)) = (self.dirty.is_empty(), self.now) {
            for key in std::mem::take(&mut self.dirty) {
                self.pump(key, now);
            }
        }
        self.actions.pop_front()
    }

    fn ks(&mut self, key: KeyId) -> Option<&mut KeyState<S>> {
        self.slots.get_mut(key).and_then(Option::as_mut)
    }

    fn ks_ref(&self, key: KeyId) -> Option<&KeyState<S>> {
        self.slots.get(key).and_then(Option::as_ref)
    }

    /// The slot of `key`, made if it has none.
    fn intern(&mut self, key: &S::Key, spread: bool) -> KeyId {
        if let Some(id) = self.index.get(key) {
            return *id;
        }
        let state = KeyState::new(key.clone(), spread);
        let id = match self.free.pop() {
            Some(id) => {
                self.slots[id] = Some(state);
                id
            }
            None => {
                self.slots.push(Some(state));
                self.slots.len() - 1
            }
        };
        self.index.insert(key.clone(), id);
        id
    }

    /// Frees `key`'s slot if nothing is left under it.
    fn release_if_empty(&mut self, key: KeyId) {
        if self.ks_ref(key).is_some_and(KeyState::is_empty) {
            if let Some(ks) = self.slots[key].take() {
                self.index.remove(&ks.key);
                self.free.push(key);
            }
        }
    }

    /// What pushed `task` carries, while it is not answered.
    pub(crate) fn payload(&self, task: TaskId) -> Option<&S::Payload> {
        self.tasks.get(&task).map(|t| &t.payload)
    }

    /// The worker pushed `task` went to, while it is not answered.
    pub(crate) fn worker_of(&self, task: TaskId) -> Option<&S::Worker> {
        let t = self.tasks.get(&task)?;
        let ks = self.ks_ref(t.key)?;
        ks.leases
            .iter()
            .find(|l| l.id == t.lease)
            .map(|l| &l.worker)
    }

    /// The key pushed `task` was submitted under, while it is not answered.
    pub(crate) fn key_of(&self, task: TaskId) -> Option<&S::Key> {
        let t = self.tasks.get(&task)?;
        self.ks_ref(t.key).map(|ks| &ks.key)
    }

    /// The payload of the task at the head of `key`'s queue (the next
    /// one a lease asked for now would run).
    pub(crate) fn next_payload(&self, key: &S::Key) -> Option<&S::Payload> {
        let ks = self.ks_ref(*self.index.get(key)?)?;
        ks.queue.front().map(|q| &q.payload)
    }

    /// Every unfinished task: its key, payload, and the node it was pushed
    /// to (`None` while queued, and while its value is being taken: its
    /// lease may be gone by then).
    pub(crate) fn tasks(
        &self,
    ) -> impl Iterator<Item = (TaskId, &S::Key, &S::Payload, Option<NodeId>)> {
        let queued = self.slots.iter().flatten().flat_map(|ks| {
            ks.queue
                .iter()
                .map(move |q| (q.task, &ks.key, &q.payload, None))
        });
        let pushed = self.tasks.iter().filter_map(|(id, t)| {
            let ks = self.ks_ref(t.key)?;
            let node = ks.leases.iter().find(|l| l.id == t.lease).map(|l| l.node);
            Some((*id, &ks.key, &t.payload, node))
        });
        let taking = self
            .taking
            .iter()
            .map(|(id, t)| (*id, &t.key, &t.payload, None));
        queued.chain(pushed).chain(taking)
    }

    /// Unfinished tasks.
    pub(crate) fn len(&self) -> usize {
        self.tasks.len() + self.taking.len() + self.queued
    }

    /// A task whose arguments are ready: queued under `key` (`spread`:
    /// the key's strategy places every task on its own), with its retry
    /// `budget`.
    pub(crate) fn submit(
        &mut self,
        key: &S::Key,
        spread: bool,
        task: TaskId,
        payload: S::Payload,
        budget: Budget,
        now: Instant,
    ) {
        let id = self.intern(key, spread);
        if let Some(ks) = self.ks(id) {
            ks.queue.push_back(Queued {
                task,
                payload,
                attempt: budget.attempt,
                max_retries: budget.max_retries,
            });
            self.queued += 1;
        }
        self.pump(id, now);
    }

    /// A lease request for `key` was answered.
    pub(crate) fn answer(&mut self, key: &S::Key, answer: Answer<S>, now: Instant) {
        let Some(id) = self.index.get(key).copied() else {
            match answer {
                Answer::Granted(g) => self.actions.push_back(Action::ReturnLease {
                    node: g.node,
                    lease: g.lease,
                }),
                Answer::WorkerGone {
                    lease: Some((node, lease)),
                } => self.actions.push_back(Action::ReturnLease { node, lease }),
                _ => {}
            }
            return;
        };
        let others_waiting = self.others_waiting(id);
        let Some(ks) = self.ks(id) else { return };
        ks.requesting = ks.requesting.saturating_sub(1);
        match answer {
            Answer::Granted(g)
                if ks.queue.is_empty() && (others_waiting || !ks.leases.is_empty()) =>
            {
                // Granted after this key's work ran out, while other work
                // waits for a lease or another lease of this key is there
                // for what comes next: its CPUs go back at once.
                self.actions.push_back(Action::ReturnLease {
                    node: g.node,
                    lease: g.lease,
                });
            }
            Answer::Granted(g) => ks.leases.push(Lease {
                id: g.lease,
                node: g.node,
                worker: g.worker,
                pushed: VecDeque::new(),
                idle_since: Some(now),
                busy_from: None,
            }),
            Answer::WorkerGone { lease } => {
                if let Some((node, lease)) = lease {
                    self.actions.push_back(Action::ReturnLease { node, lease });
                }
            }
            // Other leases held or on their way can still run the queue:
            // only infeasible work, or the last hope failing, fails it.
            // New requests wait a little (no hot loop against a node that
            // keeps refusing).
            Answer::Failed {
                infeasible: false, ..
            } if !ks.leases.is_empty() || ks.requesting > 0 => {
                let at = now + LEASE_RETRY;
                ks.retry_at = Some(at);
                self.actions.push_back(Action::WakeAt { at });
            }
            Answer::Failed { error, infeasible } => {
                let queue = std::mem::take(&mut ks.queue);
                self.queued -= queue.len();
                for q in queue {
                    self.actions.push_back(Action::Fail {
                        task: q.task,
                        payload: q.payload,
                        error: error.clone(),
                        infeasible,
                    });
                }
            }
        }
        self.pump(id, now);
    }

    /// A result of `task` came from `worker`. Returns the task's payload
    /// if the result counts: the task was pushed to that worker and is
    /// not finished. A late or repeated result returns `None`.
    pub(crate) fn result(
        &mut self,
        task: TaskId,
        worker: &S::Worker,
        now: Instant,
    ) -> Option<S::Payload> {
        self.answered(task, worker, now).map(|t| t.payload)
    }

    /// Takes `task` out of its lease if its answer from `worker` counts.
    fn answered(&mut self, task: TaskId, worker: &S::Worker, now: Instant) -> Option<Pushed<S>> {
        let t = self.tasks.get(&task)?;
        let lease = t.lease;
        let ks = self.ks_ref(t.key)?;
        if !ks
            .leases
            .iter()
            .any(|l| l.id == lease && l.worker == *worker)
        {
            // Not from the worker it went to last (a lost one's late answer).
            return None;
        }
        let t = self.tasks.remove(&task)?;
        self.now = Some(now);
        let mut pump = false;
        if let Some(ks) = self.ks(t.key) {
            if let Some(l) = ks.leases.iter_mut().find(|l| l.id == lease) {
                if let Some(i) = l.pushed.iter().position(|id| *id == task) {
                    l.pushed.remove(i);
                }
                let took = l.busy_from.map(|t| now.saturating_duration_since(t));
                l.busy_from = (!l.pushed.is_empty()).then_some(now);
                if l.pushed.is_empty() {
                    l.idle_since = Some(now);
                }
                if let Some(took) = took {
                    ks.observe(took);
                }
            }
            pump = !ks.queue.is_empty();
        }
        if pump && !self.dirty.contains(&t.key) {
            self.dirty.push(t.key);
        }
        Some(t)
    }

    /// A result of `task` came from `worker`, but its value stays with the
    /// worker until the owner takes it. Returns whether the result counts
    /// (as for [`Self::result`]); if it does, the task waits for
    /// [`Self::taken`] or [`Self::take_failed`], and its lease is free for
    /// more work meanwhile.
    pub(crate) fn result_kept(&mut self, task: TaskId, worker: &S::Worker, now: Instant) -> bool {
        let Some(t) = self.answered(task, worker, now) else {
            return false;
        };
        let Some(ks) = self.ks_ref(t.key) else {
            return false;
        };
        let taking = Taking {
            key: ks.key.clone(),
            spread: ks.spread,
            payload: t.payload,
            attempt: t.attempt,
            max_retries: t.max_retries,
        };
        self.taking.insert(task, taking);
        true
    }

    /// The value of a task answered by [`Self::result_kept`] is here: the
    /// task ends, and its payload comes back.
    pub(crate) fn taken(&mut self, task: TaskId) -> Option<S::Payload> {
        self.taking.remove(&task).map(|t| t.payload)
    }

    /// The value of a task answered by [`Self::result_kept`] could not be
    /// taken (its worker died with it): the task runs again within its
    /// retry budget (its lineage: the value is made again the way it was
    /// made), else fails with `error`.
    pub(crate) fn take_failed(&mut self, task: TaskId, error: S::Error, now: Instant) {
        let Some(t) = self.taking.remove(&task) else {
            return;
        };
        if t.attempt >= t.max_retries {
            self.actions.push_back(Action::Fail {
                task,
                payload: t.payload,
                error,
                infeasible: false,
            });
            return;
        }
        let id = self.intern(&t.key, t.spread);
        if let Some(ks) = self.ks(id) {
            ks.queue.push_front(Queued {
                task,
                payload: t.payload,
                attempt: t.attempt + 1,
                max_retries: t.max_retries,
            });
            self.queued += 1;
        }
        self.pump(id, now);
    }

    /// `worker` is gone (its process exited, its node died, its link was
    /// cut): its leases go, and each task pushed to it is queued again
    /// within its retry budget, else fails with `error`.
    ///
    /// Its leases are also returned to their nodes. A node that saw the
    /// worker die has released them already and refuses the return; but
    /// when only the work stream ended (the worker lives on), a lease not
    /// returned would hold its node's resources for good, and every retry
    /// on a fresh lease would take more, until nothing could run.
    pub(crate) fn worker_lost(&mut self, worker: &S::Worker, error: S::Error, now: Instant) {
        let mut lost: Vec<(KeyId, VecDeque<TaskId>)> = Vec::new();
        let mut returned = Vec::new();
        for (id, slot) in self.slots.iter_mut().enumerate() {
            let Some(ks) = slot else { continue };
            let before = ks.leases.len();
            let mut pushed = VecDeque::new();
            ks.leases.retain_mut(|l| {
                if l.worker == *worker {
                    pushed.extend(l.pushed.drain(..));
                    returned.push((l.node, l.id));
                    false
                } else {
                    true
                }
            });
            if before != ks.leases.len() || !ks.queue.is_empty() {
                lost.push((id, pushed));
            }
        }
        for (node, lease) in returned {
            self.actions.push_back(Action::ReturnLease { node, lease });
        }
        for (key, pushed) in lost {
            // Oldest first at the queue's head, in the order they were sent.
            for task in pushed.into_iter().rev() {
                let Some(t) = self.tasks.remove(&task) else {
                    continue;
                };
                if t.attempt < t.max_retries {
                    let again = Queued {
                        task,
                        payload: t.payload,
                        attempt: t.attempt + 1,
                        max_retries: t.max_retries,
                    };
                    if let Some(ks) = self.ks(key) {
                        ks.queue.push_front(again);
                        self.queued += 1;
                    }
                } else {
                    self.actions.push_back(Action::Fail {
                        task,
                        payload: t.payload,
                        error: error.clone(),
                        infeasible: false,
                    });
                }
            }
            self.pump(key, now);
        }
    }

    /// Time passed: leases idle for [`LEASE_IDLE`] go back, and keys whose
    /// request backoff ended ask again.
    pub(crate) fn tick(&mut self, now: Instant) {
        let mut expired = Vec::new();
        let mut wake = Vec::new();
        for (id, slot) in self.slots.iter_mut().enumerate() {
            let Some(ks) = slot else { continue };
            if ks.queue.is_empty() {
                ks.take_idle(now, LEASE_IDLE, &mut expired);
            } else if ks.retry_at.is_some_and(|t| now >= t) {
                wake.push(id);
            }
        }
        for (node, lease) in expired {
            self.actions.push_back(Action::ReturnLease { node, lease });
        }
        for key in wake {
            self.pump(key, now);
        }
        for key in 0..self.slots.len() {
            self.release_if_empty(key);
        }
    }

    fn others_waiting(&self, key: KeyId) -> bool {
        self.slots
            .iter()
            .enumerate()
            .any(|(id, ks)| id != key && ks.as_ref().is_some_and(|ks| !ks.queue.is_empty()))
    }

    /// Pushes queued work of `key` onto its leases; asks for more leases
    /// while queued work exceeds the leases held and asked for.
    fn pump(&mut self, key: KeyId, now: Instant) {
        let Some(ks) = self.slots.get_mut(key).and_then(Option::as_mut) else {
            return;
        };
        let backlog = ks.backlog();
        // Ask for a lease per task beyond the leases held, a few at a time:
        // the node grants them locally while it has room and spills the
        // rest to nodes with free resources, so a backlog spreads over the
        // cluster instead of queueing on one lease.
        if ks.retry_at.is_some_and(|t| now >= t) {
            ks.retry_at = None;
        }
        if !ks.queue.is_empty() && ks.retry_at.is_none() {
            let want = backlog
                .saturating_sub(ks.leases.len())
                .min(MAX_LEASE_REQUESTS);
            let requests = want.saturating_sub(ks.requesting);
            ks.requesting += requests;
            for _ in 0..requests {
                self.actions.push_back(Action::RequestLease {
                    key: ks.key.clone(),
                });
            }
        }
        // Spread work takes one lease per task in flight, so every task is
        // placed by the policy. Other work shares the backlog among the
        // leases held and those asked for: a lease on its way gets its share
        // rather than finding it all pushed to the first one. A deep
        // backlog still fills every pipeline.
        let depth = if ks.spread {
            1
        } else {
            let slots = (ks.leases.len() + ks.requesting).max(1);
            backlog
                .div_ceil(slots)
                .min(ks.depth_for_length())
                .clamp(1, PIPELINE)
        };
        while !ks.queue.is_empty() {
            let Some(lease) = ks
                .leases
                .iter_mut()
                .filter(|l| l.pushed.len() < depth)
                .min_by_key(|l| l.pushed.len())
            else {
                break;
            };
            let Some(q) = ks.queue.pop_front() else {
                break;
            };
            self.queued -= 1;
            if lease.pushed.is_empty() {
                lease.busy_from = Some(now);
            }
            lease.pushed.push_back(q.task);
            lease.idle_since = None;
            self.actions.push_back(Action::Push {
                task: q.task,
                attempt: q.attempt,
                lease: lease.id,
                max_retries: q.max_retries,
            });
            self.tasks.insert(
                q.task,
                Pushed {
                    key,
                    lease: lease.id,
                    payload: q.payload,
                    attempt: q.attempt,
                    max_retries: q.max_retries,
                },
            );
        }
        let waiting = !ks.queue.is_empty();
        if !waiting {
            self.release_if_empty(key);
            return;
        }
        // Work waits for a lease: leases of other keys that idle go back at
        // once, since their CPUs may be the ones it waits for.
        let mut out = Vec::new();
        for (id, slot) in self.slots.iter_mut().enumerate() {
            let Some(ks) = slot else { continue };
            if id != key && ks.queue.is_empty() && !ks.leases.is_empty() {
                ks.take_idle(now, LEASE_IDLE_WHILE_OTHERS_WAIT, &mut out);
            }
        }
        for (node, lease) in out {
            self.actions.push_back(Action::ReturnLease { node, lease });
        }
    }
}

/// Bytes the core keeps per task in flight or being taken (its lineage:
/// how to make its value again), beyond what the payload points to.
#[cfg(test)]
pub(crate) fn entry_bytes<S: Shell>() -> usize {
    std::mem::size_of::<Pushed<S>>().max(std::mem::size_of::<Taking<S>>())
}

#[cfg(test)]
mod tests {
    use ray_proto::WorkerId;

    use super::*;

    struct T;

    impl Shell for T {
        type Key = u32;
        type Payload = ();
        type Error = ();
        type Worker = u32;
    }

    fn id(seq: u64) -> TaskId {
        TaskId::new(WorkerId(1), seq)
    }

    /// The actions out, as short words.
    fn drain(o: &mut TaskOwner<T>) -> Vec<String> {
        let mut out = Vec::new();
        while let Some(a) = o.poll() {
            out.push(match a {
                Action::RequestLease { key } => format!("request {key}"),
                Action::Push { task, .. } => {
                    format!("push {} to {}", task.seq, o.worker_of(task).unwrap())
                }
                Action::ReturnLease { lease, .. } => format!("return {}", lease.seq),
                Action::Fail { task, .. } => format!("fail {}", task.seq),
                Action::WakeAt { .. } => "wake".into(),
            });
        }
        out
    }

    const ONCE: Budget = Budget {
        attempt: 0,
        max_retries: 0,
    };

    #[test]
    fn idle_leases_of_other_keys_go_back_while_work_waits_for_a_lease() {
        let t0 = Instant::now();
        let mut o = TaskOwner::<T>::default();
        o.submit(&1, false, id(1), (), ONCE, t0);
        assert_eq!(drain(&mut o), ["request 1"]);
        let grant = Grant {
            lease: id(100),
            node: NodeId(7),
            worker: 9,
        };
        o.answer(&1, Answer::Granted(grant), t0);
        assert_eq!(drain(&mut o), ["push 1 to 9"]);
        assert_eq!(
            o.result(id(1), &8, t0),
            None,
            "not from the worker it went to"
        );
        assert_eq!(o.result(id(1), &9, t0), Some(()));
        assert_eq!(o.result(id(1), &9, t0), None, "a result counts once");
        // Work of key 2 at once: key 1's lease has not idled for
        // LEASE_IDLE_WHILE_OTHERS_WAIT and stays.
        o.submit(&2, false, id(2), (), ONCE, t0);
        assert_eq!(drain(&mut o), ["request 2"]);
        // More work of key 2 later: now the idle lease goes back.
        let later = t0 + LEASE_IDLE_WHILE_OTHERS_WAIT;
        o.submit(&2, false, id(3), (), ONCE, later);
        assert_eq!(drain(&mut o), ["request 2", "return 100"]);
    }

    #[test]
    fn a_lost_worker_s_tasks_run_again_within_their_budget() {
        let t0 = Instant::now();
        let mut o = TaskOwner::<T>::default();
        let twice = Budget {
            attempt: 0,
            max_retries: 1,
        };
        o.submit(&1, false, id(1), (), twice, t0);
        o.submit(&1, false, id(2), (), ONCE, t0);
        o.submit(&1, false, id(3), (), twice, t0);
        assert_eq!(drain(&mut o), ["request 1", "request 1", "request 1"]);
        let grant = |lease, worker| {
            Answer::Granted(Grant {
                lease: id(lease),
                node: NodeId(7),
                worker,
            })
        };
        // The backlog is shared among the leases: one task each.
        o.answer(&1, grant(100, 9), t0);
        assert_eq!(drain(&mut o), ["push 1 to 9"]);
        o.answer(&1, grant(101, 9), t0);
        assert_eq!(drain(&mut o), ["push 2 to 9"]);
        o.answer(&1, grant(102, 11), t0);
        assert_eq!(drain(&mut o), ["push 3 to 11"]);
        o.worker_lost(&9, (), t0);
        // Its two leases go back (its node refuses a return of a lease it
        // released with a dead worker; a live one frees it). Task 2 had no
        // retry left; task 1 queues again and asks for a lease.
        assert_eq!(
            drain(&mut o),
            ["return 100", "return 101", "fail 2", "request 1"]
        );
        o.answer(&1, grant(103, 10), t0);
        assert_eq!(drain(&mut o), ["push 1 to 10"]);
        assert_eq!(
            o.result(id(1), &9, t0),
            None,
            "the lost worker's late answer"
        );
        o.worker_lost(&10, (), t0);
        assert_eq!(
            drain(&mut o),
            ["return 103", "fail 1"],
            "its budget is spent"
        );
        o.worker_lost(&11, (), t0);
        assert_eq!(
            drain(&mut o),
            ["return 102", "request 1"],
            "task 3's first retry"
        );
        o.answer(&1, grant(104, 12), t0);
        assert_eq!(drain(&mut o), ["push 3 to 12"]);
        assert_eq!(o.result(id(3), &12, t0), Some(()));
        assert_eq!(o.len(), 0);
    }
}
