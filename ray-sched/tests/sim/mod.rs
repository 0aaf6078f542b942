//! A deterministic discrete-event simulation of a cluster of
//! [`NodeScheduler`]s: message delays, gossip that leaves views stale,
//! nodes joining and leaving, placement groups reserved two-phase by a
//! GCS, and random task durations. Everything random comes from one seed.
//!
//! Events sit in a priority queue ordered by `(time, seq)`; the payloads live
//! in a slab so the heap only moves small keys.

mod checks;
mod config;
mod gossip;
mod placement;
mod workload;

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

pub use config::{Config, Report};
use ray_proto::{NodeId, PlacementGroupId, TaskId, WorkerId};

use ray_sched::{
    Action, ClusterView, HybridConfig, NodeScheduler, NodeUpdate, PgState, PlacementGroups,
    PlacementStrategy, Policies, Quantity, ResourceSet, SchedulingStrategy, SplitMix64, Task, GPU,
};

/// Custom resource some nodes have.
const ACCEL: &str = "accel";
/// Custom resource only nodes that join mid-run have.
const LATE: &str = "late_accel";
/// Custom resource no node ever has.
const NEVER: &str = "never_there";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Normal,
    /// Asks for what no node ever has.
    Never,
    /// Asks for what only nodes joining mid-run have.
    Late,
    /// Scheduled into placement group `.0`.
    Group(u32),
}

#[derive(Debug)]
struct TaskRec {
    kind: Kind,
    resources: ResourceSet,
    strategy: SchedulingStrategy,
    runs: u32,
    lost: u32,
    completed: u32,
    running_on: Option<NodeId>,
    reported: bool,
}

#[derive(Debug)]
enum Ev {
    Tick,
    Spill {
        from: NodeId,
        to: NodeId,
        task: Task<u32>,
    },
    Refuse {
        from: NodeId,
        to: NodeId,
        task: Task<u32>,
        update: NodeUpdate,
    },
    Finish {
        node: NodeId,
        task: u32,
    },
    Gossip {
        to: NodeId,
        updates: Vec<NodeUpdate>,
    },
    /// A node's own update to the GCS, with the shapes of its waiting work.
    GcsGossip {
        from: NodeId,
        update: NodeUpdate,
        demands: Vec<ResourceSet>,
    },
    Join,
    Leave,
    PgCreate {
        pg: u32,
    },
    PgRetryPending,
    Prepare {
        node: NodeId,
        pg: u32,
        index: usize,
        attempt: u32,
    },
    PrepareReply {
        pg: u32,
        index: usize,
        ok: bool,
        attempt: u32,
    },
    Commit {
        node: NodeId,
        pg: u32,
        index: usize,
    },
    Release {
        node: NodeId,
        pg: u32,
        index: usize,
    },
    PgReady {
        pg: u32,
    },
    PgRemoved {
        pg: u32,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PgPhase {
    /// Waiting in the GCS's manager for room in its view.
    Placing,
    /// Node-side prepares sent, replies being collected.
    Preparing,
    /// Every bundle committed on its node.
    Committed,
    /// Removed after its tasks finished.
    Removed,
}

#[derive(Debug)]
struct PgSim {
    id: PlacementGroupId,
    bundles: Vec<ResourceSet>,
    strategy: PlacementStrategy,
    driver: NodeId,
    phase: PgPhase,
    attempt: u32,
    nodes: Vec<NodeId>,
    replies: Vec<Option<bool>>,
    done: usize,
}

struct SimNode {
    sched: NodeScheduler<u32>,
    total: ResourceSet,
    alive: bool,
    /// Bundles prepared here and not released (ledger for the checks).
    bundles: usize,
    /// Drives a live placement group, or takes a hot share of submissions:
    /// never chosen to leave.
    pinned: bool,
}

/// The simulated cluster.
pub struct Sim {
    cfg: Config,
    rng: SplitMix64,
    now: u64,
    seq: u64,
    heap: BinaryHeap<Reverse<(u64, u64, u32)>>,
    slab: Vec<Option<Ev>>,
    free: Vec<u32>,
    nodes: Vec<SimNode>,
    alive: Vec<NodeId>,
    hot: Vec<NodeId>,
    tasks: Vec<TaskRec>,
    generated: usize,
    normal_tasks: usize,
    /// Tasks neither completed nor held as infeasible.
    outstanding: usize,
    gcs_view: ClusterView,
    groups: PlacementGroups,
    pgs: Vec<PgSim>,
    report: Report,
}

fn q(x: f64) -> Quantity {
    Quantity::from_f64(x).expect("constants are valid quantities")
}

fn mix(h: u64, x: u64) -> u64 {
    (h ^ x).wrapping_mul(0x0000_0100_0000_01b3).rotate_left(5)
}

impl Sim {
    /// Builds the cluster and schedules the first events.
    pub fn new(cfg: Config) -> Self {
        let mut rng = SplitMix64::new(cfg.seed);
        let mut view = ClusterView::new();
        let mut totals = Vec::with_capacity(cfg.nodes);
        for i in 0..cfg.nodes {
            let total = Self::node_shape(&mut rng, false);
            view.add_node(NodeId(i as u64), total.clone(), BTreeMap::new());
            totals.push(total);
        }
        let nodes = totals
            .into_iter()
            .enumerate()
            .map(|(i, total)| SimNode {
                sched: NodeScheduler::new(
                    NodeId(i as u64),
                    view.clone(),
                    policies(cfg.seed ^ (i as u64).wrapping_mul(0x9e37_79b9)),
                ),
                total,
                alive: true,
                bundles: 0,
                pinned: false,
            })
            .collect();
        let pg_tasks = cfg.groups * cfg.tasks_per_group;
        assert!(pg_tasks <= cfg.tasks, "more group tasks than tasks");
        let mut sim = Self {
            normal_tasks: cfg.tasks - pg_tasks,
            rng,
            now: 0,
            seq: 0,
            heap: BinaryHeap::new(),
            slab: Vec::new(),
            free: Vec::new(),
            nodes,
            alive: (0..cfg.nodes as u64).map(NodeId).collect(),
            hot: Vec::new(),
            tasks: Vec::with_capacity(cfg.tasks),
            generated: 0,
            outstanding: 0,
            gcs_view: view,
            groups: PlacementGroups::new(),
            pgs: Vec::new(),
            report: Report {
                trace_hash: 0xcbf2_9ce4_8422_2325,
                events: 0,
                ticks: 0,
                completed: 0,
                spills: 0,
                refusals: 0,
                infeasible_reports: 0,
                late_runs: 0,
                never_ran: 0,
                lost_runs: 0,
                gossip_updates: 0,
                pg_aborts: 0,
            },
            cfg,
        };
        // A few hot nodes take a share of all submissions, so they must spill.
        for _ in 0..10.min(sim.cfg.nodes) {
            let n = NodeId(sim.rng.below(sim.cfg.nodes) as u64);
            sim.nodes[n.0 as usize].pinned = true;
            sim.hot.push(n);
        }
        let arrival_ticks = (sim.normal_tasks / sim.cfg.arrivals_per_tick.max(1)) as u64 + 1;
        sim.push(1, Ev::Tick);
        for k in 0..sim.cfg.joins as u64 {
            let at = arrival_ticks * (k + 1) / (sim.cfg.joins as u64 + 1);
            sim.push(at.max(2), Ev::Join);
        }
        for k in 0..sim.cfg.leaves as u64 {
            let at = arrival_ticks * (2 * k + 1) / (2 * sim.cfg.leaves as u64 + 2);
            sim.push(at.max(2), Ev::Leave);
        }
        for pg in 0..sim.cfg.groups as u32 {
            let at = 1 + arrival_ticks * pg as u64 / sim.cfg.groups as u64;
            sim.push(at, Ev::PgCreate { pg });
        }
        sim.push(50, Ev::PgRetryPending);
        sim
    }

    fn push(&mut self, at: u64, ev: Ev) {
        let slot = match self.free.pop() {
            Some(s) => {
                self.slab[s as usize] = Some(ev);
                s
            }
            None => {
                self.slab.push(Some(ev));
                (self.slab.len() - 1) as u32
            }
        };
        self.heap.push(Reverse((at, self.seq, slot)));
        self.seq += 1;
    }

    fn delay(&mut self) -> u64 {
        1 + self.rng.below(3) as u64
    }

    fn trace(&mut self, kind: u64, a: u64, b: u64) {
        let h = mix(self.report.trace_hash, self.now);
        let h = mix(h, kind);
        let h = mix(h, a);
        self.report.trace_hash = mix(h, b);
    }

    fn sched(&mut self, node: NodeId) -> &mut NodeScheduler<u32> {
        &mut self.nodes[node.0 as usize].sched
    }

    fn is_alive(&self, node: NodeId) -> bool {
        self.nodes.get(node.0 as usize).is_some_and(|n| n.alive)
    }

    fn random_alive(&mut self) -> NodeId {
        self.alive[self.rng.below(self.alive.len())]
    }

    /// Runs to the end and checks every invariant; panics on a violation.
    pub fn run(mut self) -> Report {
        while let Some(Reverse((at, _, slot))) = self.heap.pop() {
            self.now = at;
            let ev = self.slab[slot as usize]
                .take()
                .expect("queued events are present");
            self.free.push(slot);
            self.report.events += 1;
            self.handle(ev);
        }
        self.report.ticks = self.now;
        self.final_checks();
        self.report
    }

    fn handle(&mut self, ev: Ev) {
        match ev {
            Ev::Tick => self.tick(),
            Ev::Spill { from, to, task } => {
                self.trace(1, task.id.seq, to.0);
                if self.is_alive(to) {
                    self.sched(to).receive_spill(from, task);
                    self.drain(to);
                } else if self.is_alive(from) {
                    self.sched(from).spill_failed(to, task);
                    self.drain(from);
                } else {
                    self.resubmit(task);
                }
            }
            Ev::Refuse {
                from,
                to,
                task,
                update,
            } => {
                self.trace(2, task.id.seq, from.0);
                self.report.refusals += 1;
                if self.is_alive(to) {
                    self.sched(to).on_refused(from, task, &update);
                    self.drain(to);
                } else {
                    self.resubmit(task);
                }
            }
            Ev::Finish { node, task } => self.finish(node, task),
            Ev::Gossip { to, updates } => {
                if self.is_alive(to) {
                    for u in &updates {
                        self.nodes[to.0 as usize].sched.apply_gossip(u);
                    }
                    self.report.gossip_updates += updates.len() as u64;
                    self.drain(to);
                }
            }
            Ev::GcsGossip {
                from,
                update,
                demands,
            } => {
                self.gcs_view.apply_update(&update);
                if !demands.is_empty() {
                    self.answer_demands(from, &demands);
                }
            }
            Ev::Join => self.join(),
            Ev::Leave => self.leave(),
            Ev::PgCreate { pg } => self.pg_create(pg),
            Ev::PgRetryPending => self.pg_retry_pending(),
            Ev::Prepare {
                node,
                pg,
                index,
                attempt,
            } => {
                let res = self.pgs[pg as usize].bundles[index].clone();
                let id = self.pgs[pg as usize].id;
                let ok = self.is_alive(node) && self.sched(node).prepare_bundle(id, index, res);
                if ok {
                    self.nodes[node.0 as usize].bundles += 1;
                    self.check_node(node);
                }
                self.trace(3, pg as u64, ok as u64);
                let d = self.delay();
                self.push(
                    self.now + d,
                    Ev::PrepareReply {
                        pg,
                        index,
                        ok,
                        attempt,
                    },
                );
            }
            Ev::PrepareReply {
                pg,
                index,
                ok,
                attempt,
            } => self.prepare_reply(pg, index, ok, attempt),
            Ev::Commit { node, pg, index } => {
                let id = self.pgs[pg as usize].id;
                assert!(
                    self.sched(node).commit_bundle(id, index),
                    "prepared bundle is there"
                );
                self.drain(node);
            }
            Ev::Release { node, pg, index } => {
                let id = self.pgs[pg as usize].id;
                if self.sched(node).release_bundle(id, index) {
                    self.nodes[node.0 as usize].bundles -= 1;
                }
                self.drain(node);
            }
            Ev::PgReady { pg } => self.pg_ready(pg),
            Ev::PgRemoved { pg } => {
                let (driver, id) = (self.pgs[pg as usize].driver, self.pgs[pg as usize].id);
                self.sched(driver).placement_group_removed(id);
                self.drain(driver);
                self.nodes[driver.0 as usize].pinned = self.hot.contains(&driver)
                    || self
                        .pgs
                        .iter()
                        .any(|p| p.driver == driver && p.phase != PgPhase::Removed);
            }
        }
    }

    /// Carries out every action `node` queued, then checks it.
    fn drain(&mut self, node: NodeId) {
        while let Some(action) = self.sched(node).poll_action() {
            match action {
                Action::Run(task) => {
                    let t = task.id.seq as usize;
                    self.trace(10, t as u64, node.0);
                    let rec = &mut self.tasks[t];
                    assert_eq!(rec.running_on, None, "task {t} runs twice at once");
                    assert_ne!(rec.kind, Kind::Never, "task {t} can never run, yet ran");
                    if let Kind::Group(pg) = rec.kind {
                        assert_eq!(
                            self.pgs[pg as usize].phase,
                            PgPhase::Committed,
                            "task {t} ran in group {pg} before every bundle was committed"
                        );
                    }
                    rec.runs += 1;
                    rec.running_on = Some(node);
                    if rec.reported {
                        rec.reported = false;
                        self.outstanding += 1;
                        if rec.kind == Kind::Late {
                            self.report.late_runs += 1;
                        }
                    }
                    let d = 5 + self.rng.below(36) as u64;
                    self.push(
                        self.now + d,
                        Ev::Finish {
                            node,
                            task: t as u32,
                        },
                    );
                }
                Action::Spill { to, task } => {
                    self.trace(11, task.id.seq, to.0);
                    self.report.spills += 1;
                    let rec = &mut self.tasks[task.id.seq as usize];
                    if rec.reported {
                        rec.reported = false;
                        self.outstanding += 1;
                        if rec.kind == Kind::Late {
                            self.report.late_runs += 1;
                        }
                    }
                    let d = self.delay();
                    self.push(
                        self.now + d,
                        Ev::Spill {
                            from: node,
                            to,
                            task,
                        },
                    );
                }
                Action::Refuse { to, task, update } => {
                    self.trace(12, task.id.seq, to.0);
                    let d = self.delay();
                    self.push(
                        self.now + d,
                        Ev::Refuse {
                            from: node,
                            to,
                            task,
                            update,
                        },
                    );
                }
                Action::Infeasible { task, report } => {
                    self.trace(13, task.seq, node.0);
                    self.report.infeasible_reports += 1;
                    let rec = &mut self.tasks[task.seq as usize];
                    assert_eq!(
                        report.request, rec.resources,
                        "the report names the request"
                    );
                    assert!(!rec.reported, "task {} reported twice", task.seq);
                    rec.reported = true;
                    self.outstanding -= 1;
                }
                Action::Failed { task, reason } => {
                    panic!("task {} failed: {reason:?}", task.id.seq)
                }
            }
        }
        self.check_node(node);
    }

    fn tick(&mut self) {
        // Arrivals.
        let n = self
            .cfg
            .arrivals_per_tick
            .min(self.normal_tasks - self.generated);
        for _ in 0..n {
            self.arrive();
        }
        // Gossip: each live node every `gossip_every` ticks, by phase.
        let every = self.cfg.gossip_every;
        let phase = ((every - self.now % every) % every) as usize;
        let mut i = phase;
        while i < self.nodes.len() {
            if self.nodes[i].alive {
                self.gossip_from(NodeId(i as u64));
            }
            i += every as usize;
        }
        if self.outstanding > 0 || self.generated < self.normal_tasks {
            self.push(self.now + 1, Ev::Tick);
        }
    }

    fn finish(&mut self, node: NodeId, t: u32) {
        let rec = &mut self.tasks[t as usize];
        if rec.running_on != Some(node) || !self.nodes[node.0 as usize].alive {
            return; // lost with its node, and submitted again
        }
        rec.running_on = None;
        rec.completed += 1;
        let kind = rec.kind;
        self.outstanding -= 1;
        self.report.completed += 1;
        self.trace(30, t as u64, node.0);
        assert!(self.sched(node).finish(TaskId::new(WorkerId(0), t as u64)));
        self.drain(node);
        if let Kind::Group(pg) = kind {
            let p = &mut self.pgs[pg as usize];
            p.done += 1;
            if p.done == self.cfg.tasks_per_group {
                self.pg_remove(pg);
            }
        }
    }

    /// A task handed back by a node that left, or whose sender left.
    fn resubmit(&mut self, task: Task<u32>) {
        let at = match self.tasks[task.id.seq as usize].kind {
            Kind::Group(pg) => self.pgs[pg as usize].driver,
            _ => self.random_alive(),
        };
        self.trace(21, task.id.seq, at.0);
        self.sched(at).submit(task);
        self.drain(at);
    }
}

/// The hybrid policy as Ray sizes it for a big cluster: a random pick among
/// more of the least-loaded nodes, so nodes spilling at once with the same
/// stale view do not herd onto the same few.
fn policies(seed: u64) -> Policies {
    Policies::with_hybrid(HybridConfig {
        seed,
        top_k: 8,
        ..HybridConfig::default()
    })
}

fn one_unit() -> Quantity {
    Quantity::ONE
}
