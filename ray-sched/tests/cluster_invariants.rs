//! Property tests of the bottom-up scheduler on small clusters: a few
//! [`NodeScheduler`]s driven directly by random event sequences (submit,
//! finish, deliver a message in any order, gossip, a node joining).
//!
//! - No node's own `used` ever exceeds its `total`.
//! - Once everything running finishes and views catch up, every feasible
//!   task has run exactly once, and nothing feasible is left waiting;
//!   infeasible ones were reported.
//! - The same inputs give the same decisions.

use std::collections::BTreeMap;

use proptest::prelude::*;
use ray_proto::{NodeId, TaskId, WorkerId};
use ray_sched::{
    Action, ClusterView, NodeScheduler, NodeUpdate, Policies, Quantity, ResourceSet,
    SchedulingStrategy, Task, GPU,
};

const LATE: &str = "late";

fn q(x: f64) -> Quantity {
    Quantity::from_f64(x).expect("valid constant")
}

/// The request shapes tasks draw from; the last two fit no node of the
/// starting cluster (one fits the node that may join).
fn shapes() -> Vec<ResourceSet> {
    vec![
        ResourceSet::cpu(q(1.0)),
        ResourceSet::cpu(q(0.5)),
        ResourceSet::cpu(q(2.0)),
        ResourceSet::cpu(q(0.5)).with(GPU, q(0.5)),
        ResourceSet::new().with(GPU, q(1.0)),
        ResourceSet::cpu(q(1.0)).with(LATE, q(1.0)),
        ResourceSet::cpu(q(100.0)),
    ]
}

#[derive(Clone, Debug)]
enum Op {
    Submit {
        node: usize,
        shape: usize,
        strategy: u8,
        target: usize,
        soft: bool,
    },
    Finish(usize),
    Deliver(usize),
    Gossip {
        from: usize,
        to: usize,
    },
    Join,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..8usize, 0..7usize, 0..4u8, 0..9usize, any::<bool>()).prop_map(
            |(node, shape, strategy, target, soft)| Op::Submit { node, shape, strategy, target, soft }
        ),
        3 => (0..64usize).prop_map(Op::Finish),
        4 => (0..64usize).prop_map(Op::Deliver),
        2 => (0..8usize, 0..8usize).prop_map(|(from, to)| Op::Gossip { from, to }),
        1 => Just(Op::Join),
    ]
}

#[derive(Debug)]
enum Msg {
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
    Gossip {
        to: NodeId,
        update: NodeUpdate,
    },
}

struct Cluster {
    nodes: Vec<(NodeScheduler<u32>, ResourceSet)>,
    msgs: Vec<Msg>,
    running: Vec<(NodeId, u32)>,
    /// Per task: (resources, strategy, runs, reported infeasible).
    tasks: Vec<(ResourceSet, SchedulingStrategy, u32, bool)>,
    joined: bool,
    /// Every decision, in order: what the property "same inputs, same
    /// decisions" compares.
    trace: Vec<(u8, u64, u64)>,
}

impl Cluster {
    fn new(totals: &[(u64, bool)], seed: u64) -> Self {
        let mut view = ClusterView::new();
        let totals: Vec<ResourceSet> = totals
            .iter()
            .map(|&(cpus, gpu)| {
                let mut t = ResourceSet::cpu(Quantity::from_units(cpus));
                if gpu {
                    t.set(GPU, Quantity::ONE);
                }
                t
            })
            .collect();
        for (i, t) in totals.iter().enumerate() {
            view.add_node(NodeId(i as u64), t.clone(), BTreeMap::new());
        }
        let nodes = totals
            .into_iter()
            .enumerate()
            .map(|(i, t)| {
                let id = NodeId(i as u64);
                (
                    NodeScheduler::new(id, view.clone(), Policies::standard(seed ^ i as u64)),
                    t,
                )
            })
            .collect();
        Self {
            nodes,
            msgs: Vec::new(),
            running: Vec::new(),
            tasks: Vec::new(),
            joined: false,
            trace: Vec::new(),
        }
    }

    fn apply(&mut self, op: &Op) {
        let n = self.nodes.len();
        match *op {
            Op::Submit {
                node,
                shape,
                strategy,
                target,
                soft,
            } => {
                let node = node % n;
                let resources = shapes()[shape].clone();
                let target = NodeId((target % (n + 1)) as u64);
                let strategy = match strategy {
                    0 => SchedulingStrategy::Default,
                    1 => SchedulingStrategy::Spread,
                    2 => SchedulingStrategy::NodeAffinity { node: target, soft },
                    _ => SchedulingStrategy::Locality,
                };
                let t = self.tasks.len() as u32;
                self.tasks
                    .push((resources.clone(), strategy.clone(), 0, false));
                let mut task =
                    Task::new(TaskId::new(WorkerId(0), t as u64), resources, strategy, t);
                if matches!(task.strategy, SchedulingStrategy::Locality) {
                    task.arg_bytes.push((target, 1_000));
                }
                self.nodes[node].0.submit(task);
                self.drain(node);
            }
            Op::Finish(pick) => {
                if self.running.is_empty() {
                    return;
                }
                let (node, t) = self.running.remove(pick % self.running.len());
                self.trace.push((1, t as u64, node.0));
                let i = node.0 as usize;
                assert!(self.nodes[i].0.finish(TaskId::new(WorkerId(0), t as u64)));
                self.drain(i);
            }
            Op::Deliver(pick) => {
                if self.msgs.is_empty() {
                    return;
                }
                let msg = self.msgs.remove(pick % self.msgs.len());
                self.deliver(msg);
            }
            Op::Gossip { from, to } => {
                let (from, to) = (from % n, to % n);
                let update = self.nodes[from].0.local_update();
                self.msgs.push(Msg::Gossip {
                    to: NodeId(to as u64),
                    update,
                });
            }
            Op::Join => {
                if self.joined {
                    return;
                }
                self.joined = true;
                let id = NodeId(n as u64);
                let total = ResourceSet::cpu(Quantity::from_units(2)).with(LATE, Quantity::ONE);
                let mut view = self.nodes[0].0.view().clone();
                view.add_node(id, total.clone(), BTreeMap::new());
                self.nodes.push((
                    NodeScheduler::new(id, view, Policies::standard(99)),
                    total.clone(),
                ));
                for i in 0..n {
                    self.nodes[i]
                        .0
                        .node_added(id, total.clone(), BTreeMap::new());
                    self.drain(i);
                }
            }
        }
    }

    fn deliver(&mut self, msg: Msg) {
        match msg {
            Msg::Spill { from, to, task } => {
                self.trace.push((2, task.id.seq, to.0));
                self.nodes[to.0 as usize].0.receive_spill(from, task);
                self.drain(to.0 as usize);
            }
            Msg::Refuse {
                from,
                to,
                task,
                update,
            } => {
                self.trace.push((3, task.id.seq, to.0));
                self.nodes[to.0 as usize].0.on_refused(from, task, &update);
                self.drain(to.0 as usize);
            }
            Msg::Gossip { to, update } => {
                self.nodes[to.0 as usize].0.apply_gossip(&update);
                self.drain(to.0 as usize);
            }
        }
    }

    fn drain(&mut self, i: usize) {
        let id = NodeId(i as u64);
        while let Some(action) = self.nodes[i].0.poll_action() {
            match action {
                Action::Run(task) => {
                    let t = task.id.seq as usize;
                    self.trace.push((10, t as u64, id.0));
                    self.tasks[t].2 += 1;
                    assert_eq!(self.tasks[t].2, 1, "task {t} ran twice");
                    self.running.push((id, t as u32));
                }
                Action::Spill { to, task } => {
                    self.trace.push((11, task.id.seq, to.0));
                    self.msgs.push(Msg::Spill { from: id, to, task });
                }
                Action::Refuse { to, task, update } => {
                    self.trace.push((12, task.id.seq, to.0));
                    self.msgs.push(Msg::Refuse {
                        from: id,
                        to,
                        task,
                        update,
                    });
                }
                Action::Infeasible { task, report } => {
                    self.trace.push((13, task.seq, id.0));
                    let rec = &mut self.tasks[task.seq as usize];
                    assert_eq!(report.request, rec.0);
                    rec.3 = true;
                }
                Action::Failed { task, reason } => {
                    panic!("task {} failed: {reason:?}", task.id.seq)
                }
            }
        }
        // (a) never overcommitted.
        let (sched, total) = &self.nodes[i];
        let own = sched.view().node(id).expect("own node");
        assert!(
            own.resources().used().is_subset_of(total),
            "node {id} overcommitted: {} of {total}",
            own.resources().used()
        );
    }

    /// Finishes everything, delivers every message and lets every node
    /// hear from every other, until nothing moves.
    fn settle(&mut self) {
        for _round in 0..1_000 {
            let mut moved = false;
            while !self.msgs.is_empty() {
                let msg = self.msgs.remove(0);
                self.deliver(msg);
                moved = true;
            }
            while let Some((node, t)) = self.running.pop() {
                assert!(self.nodes[node.0 as usize]
                    .0
                    .finish(TaskId::new(WorkerId(0), t as u64)));
                self.drain(node.0 as usize);
                moved = true;
            }
            let n = self.nodes.len();
            for from in 0..n {
                let update = self.nodes[from].0.local_update();
                for to in 0..n {
                    if to != from {
                        self.nodes[to].0.apply_gossip(&update);
                        self.drain(to);
                    }
                }
            }
            if !moved && self.msgs.is_empty() && self.running.is_empty() {
                return;
            }
        }
        panic!("the cluster never settled");
    }

    fn feasible(&self, resources: &ResourceSet, strategy: &SchedulingStrategy) -> bool {
        match strategy {
            SchedulingStrategy::NodeAffinity { node, soft: false } => self
                .nodes
                .get(node.0 as usize)
                .is_some_and(|(_, t)| resources.is_subset_of(t)),
            _ => self.nodes.iter().any(|(_, t)| resources.is_subset_of(t)),
        }
    }
}

fn run(totals: &[(u64, bool)], ops: &[Op], seed: u64) -> Cluster {
    let mut c = Cluster::new(totals, seed);
    for op in ops {
        c.apply(op);
    }
    c
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn no_node_is_ever_overcommitted_and_every_feasible_task_runs_once(
        totals in prop::collection::vec((1..5u64, any::<bool>()), 2..=8),
        ops in prop::collection::vec(op(), 1..200),
        seed in any::<u64>(),
    ) {
        let mut c = run(&totals, &ops, seed);
        c.settle();
        for (t, (resources, strategy, runs, reported)) in c.tasks.iter().enumerate() {
            if c.feasible(resources, strategy) {
                prop_assert_eq!(*runs, 1, "feasible task {} {} {:?} ran {} times", t, resources, strategy, runs);
            } else {
                prop_assert_eq!(*runs, 0);
                prop_assert!(*reported, "infeasible task {} was never reported", t);
            }
        }
        for (sched, _) in &c.nodes {
            prop_assert_eq!(sched.running_len(), 0);
            prop_assert_eq!(sched.waiting_len(), 0, "{:?} still has waiting work", sched);
            let own = sched.view().node(sched.id()).expect("own node");
            prop_assert!(own.resources().used().is_empty());
        }
    }

    #[test]
    fn the_same_seed_and_inputs_give_the_same_decisions(
        totals in prop::collection::vec((1..5u64, any::<bool>()), 2..=8),
        ops in prop::collection::vec(op(), 1..200),
        seed in any::<u64>(),
    ) {
        let mut a = run(&totals, &ops, seed);
        let mut b = run(&totals, &ops, seed);
        a.settle();
        b.settle();
        prop_assert_eq!(&a.trace, &b.trace);
    }
}
