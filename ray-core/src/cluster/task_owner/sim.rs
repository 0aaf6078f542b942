//! A seeded simulation of one owner ([`TaskOwner`]) submitting tasks to a
//! cluster of nodes whose worker processes are killed, whose work streams
//! are cut while their workers live on, whose nodes die and are replaced,
//! and whose messages are delayed and reordered (a work stream keeps its
//! order, as a QUIC stream does). Some results leave
//! their value with the worker until the owner takes it, and a worker that
//! dies first loses it: the task must run again. Each seed replays
//! exactly. After every run it checks that each task ended exactly once,
//! with a result from the worker it was last pushed to or an error; that
//! no task ran more often than its budget allows; that errors come only
//! from a spent budget or a refused lease; and that every lease went back.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

use ray_proto::WorkerId;

use super::*;
use crate::cluster::sim_seeds::Rng;
use crate::options::RETRY_FOREVER;

/// The simulation's shell types.
struct Sim;

/// A worker process: its node and its incarnation there.
#[derive(Clone, Copy, PartialEq, Eq, Debug, PartialOrd, Ord)]
struct Worker {
    node: u64,
    incarnation: u64,
}

#[derive(Clone, Debug, PartialEq)]
enum SimError {
    WorkerDied(Worker),
    Refused(&'static str),
}

impl Shell for Sim {
    type Key = u32;
    type Payload = u64;
    type Error = SimError;
    type Worker = Worker;
}

#[derive(Debug)]
enum Ev {
    /// The owner submits task `i` of the plan.
    Submit(usize),
    /// The local node receives a lease request for `key`.
    LeaseRequest { key: u32 },
    /// The owner receives the answer to a lease request.
    LeaseAnswer { key: u32, answer: SimAnswer },
    /// A worker receives a pushed task.
    Push {
        task: TaskId,
        lease: TaskId,
        worker: Worker,
    },
    /// A worker finishes the task at the head of a lease's queue.
    Run { lease: TaskId, worker: Worker },
    /// The owner receives a result; `kept`: its value stays with the
    /// worker until the owner takes it.
    Result {
        task: TaskId,
        worker: Worker,
        kept: bool,
    },
    /// The owner's take of a kept value ends: it has the bytes if the
    /// worker still lives.
    Take { task: TaskId, worker: Worker },
    /// A node receives a returned lease.
    Return { node: u64, lease: TaskId },
    /// The owner learns a worker is gone.
    Lost(Worker),
    /// The killer strikes.
    Kill,
    /// A replacement node joins.
    Join { slots: u32 },
    /// The owner's timer.
    Tick,
}

#[derive(Debug)]
enum SimAnswer {
    Granted {
        lease: TaskId,
        node: u64,
        worker: Worker,
    },
    Failed {
        infeasible: bool,
    },
}

struct Node {
    slots: u32,
    used: u32,
    /// The live worker, if started.
    worker: Option<Worker>,
    /// Leases held here: lease -> (worker, slots, tasks queued on it).
    leases: BTreeMap<TaskId, (Worker, u32, VecDeque<TaskId>)>,
}

struct PlannedTask {
    key: u32,
    max_retries: u32,
}

struct World {
    rng: Rng,
    base: Instant,
    now_ms: u64,
    seq: u64,
    events: BinaryHeap<Reverse<(u64, u64, usize)>>,
    payloads: Vec<Option<Ev>>,
    owner: TaskOwner<Sim>,
    nodes: BTreeMap<u64, Node>,
    next_node: u64,
    next_incarnation: u64,
    next_lease: u64,
    /// Lease requests waiting at the local node for room.
    waiting: VecDeque<u32>,
    /// Workers the owner was told are lost.
    told_lost: Vec<Worker>,
    /// When each worker's stream last delivered (keeps stream order).
    stream_at: BTreeMap<(Worker, bool), u64>,
    plan: Vec<PlannedTask>,
    /// Per task: pushes that reached a live worker's queue... counted at
    /// the owner: every Push action.
    pushes: Vec<u32>,
    /// Per task: how it ended (`Ok(worker)` or the error).
    ended: Vec<Vec<Result<Worker, SimError>>>,
    kills_left: u32,
    /// Submit events that fired.
    submitted: usize,
    /// Slots of each key's tasks.
    key_slots: BTreeMap<u32, u32>,
    ticking: bool,
}

/// Time past which an unfinished task counts as hung (simulated ms).
const HANG_MS: u64 = 600_000;

fn task_id(i: usize) -> TaskId {
    TaskId::new(WorkerId(1), i as u64)
}

fn index(t: TaskId) -> usize {
    t.seq as usize
}

impl World {
    fn new(seed: u64) -> Self {
        let mut rng = Rng::new(seed);
        let mut nodes = BTreeMap::new();
        let n = 2 + rng.below(3);
        for id in 0..n {
            nodes.insert(
                id,
                Node {
                    slots: if id == 0 { 2 } else { 1 + rng.below(4) as u32 },
                    used: 0,
                    worker: None,
                    leases: BTreeMap::new(),
                },
            );
        }
        // Keys 0-2 need 1 slot, key 3 two, key 4 more than any node has.
        let key_slots: BTreeMap<u32, u32> = [(0, 1), (1, 1), (2, 1), (3, 2), (4, 9)].into();
        let tasks = 5 + rng.below(40) as usize;
        let plan: Vec<PlannedTask> = (0..tasks)
            .map(|_| PlannedTask {
                key: if rng.chance(3) {
                    4
                } else {
                    rng.below(4) as u32
                },
                max_retries: match rng.below(5) {
                    0 => 0,
                    1 => 1,
                    2 => 3,
                    3 => 5,
                    _ => RETRY_FOREVER,
                },
            })
            .collect();
        let kills_left = rng.below(6) as u32;
        let mut w = Self {
            rng,
            base: Instant::now(),
            now_ms: 0,
            seq: 0,
            events: BinaryHeap::new(),
            payloads: Vec::new(),
            owner: TaskOwner::default(),
            nodes,
            next_node: n,
            next_incarnation: 1,
            next_lease: 0,
            waiting: VecDeque::new(),
            told_lost: Vec::new(),
            stream_at: BTreeMap::new(),
            pushes: vec![0; tasks],
            ended: vec![Vec::new(); tasks],
            plan,
            kills_left,
            submitted: 0,
            key_slots,
            ticking: false,
        };
        for i in 0..tasks {
            let at = w.rng.below(200);
            w.at(at, Ev::Submit(i));
        }
        for _ in 0..w.kills_left {
            let at = w.rng.below(400);
            w.at(at, Ev::Kill);
        }
        w
    }

    fn now(&self) -> Instant {
        self.base + Duration::from_millis(self.now_ms)
    }

    fn at(&mut self, delay: u64, ev: Ev) {
        self.seq += 1;
        self.payloads.push(Some(ev));
        let id = self.payloads.len() - 1;
        self.events
            .push(Reverse((self.now_ms + delay, self.seq, id)));
    }

    /// A message that may be delayed and overtaken.
    fn send(&mut self, ev: Ev) {
        let d = self.rng.below(6);
        self.at(d, ev);
    }

    /// A message on `worker`'s stream (`to_worker`: pushes, else results):
    /// delayed, never overtaking an earlier one on the same stream.
    fn send_on_stream(&mut self, worker: Worker, to_worker: bool, ev: Ev) {
        let d = self.rng.below(6);
        let last = self
            .stream_at
            .get(&(worker, to_worker))
            .copied()
            .unwrap_or(0);
        let when = (self.now_ms + d).max(last);
        self.stream_at.insert((worker, to_worker), when);
        self.at(when - self.now_ms, ev);
    }

    fn run(mut self) -> Result<(), String> {
        while let Some(Reverse((t, _, id))) = self.events.pop() {
            if t > HANG_MS {
                break;
            }
            self.now_ms = t;
            let ev = self.payloads[id].take().expect("each event once");
            self.step(ev);
            self.drain_actions();
            if self.owner.len() == 0 && self.all_submitted() && !self.ticking {
                // Let idle leases go back, then stop.
                self.ticking = true;
                self.at(LEASE_IDLE.as_millis() as u64 * 2, Ev::Tick);
            }
        }
        self.check()
    }

    fn all_submitted(&self) -> bool {
        self.submitted == self.plan.len()
    }

    fn step(&mut self, ev: Ev) {
        let now = self.now();
        match ev {
            Ev::Submit(i) => {
                self.submitted += 1;
                let p = &self.plan[i];
                let (key, max) = (p.key, p.max_retries);
                self.owner.submit(
                    &key,
                    key == 2,
                    task_id(i),
                    i as u64,
                    Budget {
                        attempt: 0,
                        max_retries: max,
                    },
                    now,
                );
                if !self.ticking {
                    self.ticking = true;
                    self.at(25, Ev::Tick);
                }
            }
            Ev::Tick => {
                self.ticking = false;
                self.owner.tick(now);
                if self.owner.len() > 0 || !self.all_submitted() {
                    self.ticking = true;
                    self.at(25, Ev::Tick);
                }
            }
            Ev::LeaseRequest { key } => self.place(key),
            Ev::LeaseAnswer { key, answer } => {
                let answer = match answer {
                    SimAnswer::Granted {
                        lease,
                        node,
                        worker,
                    } if self.told_lost.contains(&worker) => Answer::WorkerGone {
                        lease: Some((NodeId(node), lease)),
                    },
                    SimAnswer::Granted {
                        lease,
                        node,
                        worker,
                    } => Answer::Granted(Grant {
                        lease,
                        node: NodeId(node),
                        worker,
                    }),
                    SimAnswer::Failed { infeasible } => Answer::Failed {
                        error: SimError::Refused(if infeasible { "infeasible" } else { "no node" }),
                        infeasible,
                    },
                };
                self.owner.answer(&key, answer, now);
            }
            Ev::Push {
                task,
                lease,
                worker,
            } => {
                let Some(node) = self.live_worker_node(worker) else {
                    return;
                };
                let Some((_, _, q)) = node.leases.get_mut(&lease) else {
                    // Pushed under a lease already returned: a bug of the core.
                    panic!("task {task:?} pushed under lease {lease:?} not held");
                };
                q.push_back(task);
                if q.len() == 1 {
                    let d = 1 + self.rng.below(20);
                    self.at(d, Ev::Run { lease, worker });
                }
            }
            Ev::Run { lease, worker } => {
                let Some(node) = self.live_worker_node(worker) else {
                    return;
                };
                let Some((_, _, q)) = node.leases.get_mut(&lease) else {
                    return;
                };
                let Some(task) = q.pop_front() else { return };
                let more = !q.is_empty();
                if more {
                    let d = 1 + self.rng.below(20);
                    self.at(d, Ev::Run { lease, worker });
                }
                let kept = self.rng.chance(30);
                self.send_on_stream(worker, false, Ev::Result { task, worker, kept });
            }
            Ev::Result {
                task,
                worker,
                kept: false,
            } => {
                if let Some(i) = self.owner.result(task, &worker, now) {
                    assert_eq!(task_id(i as usize), task, "payload of another task");
                    self.ended[index(task)].push(Ok(worker));
                }
            }
            Ev::Result {
                task,
                worker,
                kept: true,
            } => {
                if self.owner.result_kept(task, &worker, now) {
                    let d = 1 + self.rng.below(30);
                    self.at(d, Ev::Take { task, worker });
                }
            }
            Ev::Take { task, worker } => {
                if self.live_worker_node(worker).is_some() {
                    let i = self.owner.taken(task).expect("a kept result is taken once");
                    assert_eq!(task_id(i as usize), task, "payload of another task");
                    self.ended[index(task)].push(Ok(worker));
                } else {
                    self.owner
                        .take_failed(task, SimError::WorkerDied(worker), now);
                }
            }
            Ev::Return { node, lease } => {
                if let Some(n) = self.nodes.get_mut(&node) {
                    if let Some((_, slots, _)) = n.leases.remove(&lease) {
                        n.used -= slots;
                    }
                }
                self.retry_waiting();
            }
            Ev::Lost(worker) => {
                self.told_lost.push(worker);
                self.owner
                    .worker_lost(&worker, SimError::WorkerDied(worker), now);
            }
            Ev::Kill => self.kill(),
            Ev::Join { slots } => {
                let id = self.next_node;
                self.next_node += 1;
                self.nodes.insert(
                    id,
                    Node {
                        slots,
                        used: 0,
                        worker: None,
                        leases: BTreeMap::new(),
                    },
                );
                self.retry_waiting();
            }
        }
    }

    fn live_worker_node(&mut self, worker: Worker) -> Option<&mut Node> {
        self.nodes
            .get_mut(&worker.node)
            .filter(|n| n.worker == Some(worker))
    }

    /// The local node (0) places a lease request: on a node with room
    /// (its own first), else it waits for room; infeasible if no node
    /// could ever hold it.
    fn place(&mut self, key: u32) {
        let need = self.key_slots[&key];
        if need > 4 {
            self.send(Ev::LeaseAnswer {
                key,
                answer: SimAnswer::Failed { infeasible: true },
            });
            return;
        }
        let spill = self.rng.chance(50);
        let mut fits: Vec<u64> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.slots - n.used >= need)
            .map(|(id, _)| *id)
            .collect();
        if spill && fits.len() > 1 {
            fits.remove(0);
        }
        let Some(&node) = fits.first() else {
            if self.rng.chance(5) {
                // A refusal that is not infeasibility (a node went away
                // while the request was forwarded).
                self.send(Ev::LeaseAnswer {
                    key,
                    answer: SimAnswer::Failed { infeasible: false },
                });
            } else {
                self.waiting.push_back(key);
            }
            return;
        };
        let n = self.nodes.get_mut(&node).expect("listed");
        let worker = *n.worker.get_or_insert_with(|| {
            self.next_incarnation += 1;
            Worker {
                node,
                incarnation: self.next_incarnation,
            }
        });
        self.next_lease += 1;
        let lease = TaskId::new(WorkerId(2), self.next_lease);
        n.used += need;
        n.leases.insert(lease, (worker, need, VecDeque::new()));
        self.send(Ev::LeaseAnswer {
            key,
            answer: SimAnswer::Granted {
                lease,
                node,
                worker,
            },
        });
    }

    fn retry_waiting(&mut self) {
        let waiting = std::mem::take(&mut self.waiting);
        for key in waiting {
            self.place(key);
        }
    }

    /// Kills a worker process, or a whole node (never node 0, the
    /// owner's): its leases go; the owner hears of it later, once.
    fn kill(&mut self) {
        let whole_node = self.rng.chance(40);
        let ids: Vec<u64> = self.nodes.keys().copied().collect();
        let id = ids[self.rng.below(ids.len() as u64) as usize];
        let node_dies = whole_node && id != 0;
        let cut = !whole_node && self.rng.chance(30);
        let Some(n) = self.nodes.get_mut(&id) else {
            return;
        };
        let worker = n.worker.take();
        if cut {
            // Only the owner's work stream to the worker ends (a frame
            // refused, a reset): the worker lives on and its node still
            // holds its leases, which only the owner's returns free. The
            // owner's next link to it is a new one (a new incarnation
            // here); nothing more comes on the old one.
            if let Some(w) = worker {
                let d = 1 + self.rng.below(30);
                self.at(d, Ev::Lost(w));
            }
            return;
        }
        n.leases.clear();
        n.used = 0;
        if node_dies {
            let slots = n.slots;
            self.nodes.remove(&id);
            let d = 10 + self.rng.below(100);
            self.at(d, Ev::Join { slots });
        }
        if let Some(w) = worker {
            let d = 1 + self.rng.below(30);
            self.at(d, Ev::Lost(w));
        }
        self.retry_waiting();
    }

    fn drain_actions(&mut self) {
        while let Some(a) = self.owner.poll() {
            match a {
                Action::RequestLease { key } => self.send(Ev::LeaseRequest { key }),
                Action::Push {
                    task,
                    attempt,
                    lease,
                    max_retries,
                } => {
                    let budget = self.plan[index(task)].max_retries;
                    assert_eq!(max_retries, budget, "the push carries the task's budget");
                    let worker = *self
                        .owner
                        .worker_of(task)
                        .expect("pushed to a lease's worker");
                    let i = index(task);
                    self.pushes[i] += 1;
                    assert_eq!(attempt + 1, self.pushes[i], "attempt numbers count pushes");
                    assert!(
                        !self.told_lost.contains(&worker),
                        "pushed to a worker the owner knows is lost"
                    );
                    self.send_on_stream(
                        worker,
                        true,
                        Ev::Push {
                            task,
                            lease,
                            worker,
                        },
                    );
                }
                Action::ReturnLease { node, lease } => self.send(Ev::Return {
                    node: node.0,
                    lease,
                }),
                Action::Fail {
                    task,
                    payload,
                    error,
                    ..
                } => {
                    assert_eq!(task_id(payload as usize), task);
                    self.ended[index(task)].push(Err(error));
                }
                Action::WakeAt { at } => {
                    let d = at.saturating_duration_since(self.now()).as_millis() as u64;
                    self.at(d, Ev::Tick);
                }
            }
        }
    }

    fn check(&self) -> Result<(), String> {
        for (i, p) in self.plan.iter().enumerate() {
            let ends = &self.ended[i];
            if ends.len() != 1 {
                return Err(format!(
                    "task {i} (key {}) ended {} times: {ends:?}",
                    p.key,
                    ends.len()
                ));
            }
            let pushes = self.pushes[i];
            if p.max_retries != RETRY_FOREVER && pushes > p.max_retries + 1 {
                return Err(format!(
                    "task {i} pushed {pushes} times, budget {}",
                    p.max_retries
                ));
            }
            match &ends[0] {
                Err(SimError::WorkerDied(_)) if pushes != p.max_retries + 1 => {
                    return Err(format!(
                        "task {i} failed after {pushes} pushes with budget {}",
                        p.max_retries
                    ));
                }
                Err(SimError::Refused("infeasible")) if p.key != 4 => {
                    return Err(format!("feasible task {i} failed as infeasible"));
                }
                Ok(_) if p.key == 4 => return Err(format!("infeasible task {i} ran")),
                _ => {}
            }
        }
        for (id, n) in &self.nodes {
            if n.used != 0 || !n.leases.is_empty() {
                return Err(format!("node {id} still has {} leases out", n.leases.len()));
            }
        }
        if self.owner.len() != 0 {
            return Err(format!("{} tasks left in the owner", self.owner.len()));
        }
        Ok(())
    }
}

#[test]
fn every_task_ends_once_within_its_budget_and_every_lease_goes_back() {
    crate::cluster::sim_seeds::run_seeds(|seed| World::new(seed).run());
}

/// Replays one seed (`RAYRS_SIM_SEED`), for a failure found above.
#[test]
fn replay_one_seed() {
    if let Some(seed) = crate::cluster::sim_seeds::replay_seed() {
        World::new(seed).run().unwrap();
    }
}
