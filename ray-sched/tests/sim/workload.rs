//! What the cluster runs: node shapes, the task mix, nodes joining and
//! leaving.

use super::*;

impl Sim {
    pub(super) fn node_shape(rng: &mut SplitMix64, late: bool) -> ResourceSet {
        let cpus = [8u64, 16, 16, 32, 64][rng.below(5)];
        let mut total = ResourceSet::cpu(Quantity::from_units(cpus));
        if rng.below(10) == 0 {
            total.set(GPU, Quantity::from_units(8));
        }
        if rng.below(20) == 0 {
            total.set(ACCEL, Quantity::from_units(4));
        }
        if late {
            total.set(LATE, Quantity::from_units(2));
        }
        total
    }

    /// A new task, submitted on a random node (or a hot one).
    pub(super) fn arrive(&mut self) {
        let t = self.tasks.len();
        let r = self.rng.below(10_000);
        let one = Quantity::ONE;
        let nodes_now = self.nodes.len();
        let (kind, resources, strategy) = match r {
            0..=4 => (
                Kind::Never,
                if matches!(r, 0 | 2 | 4) {
                    ResourceSet::new().with(NEVER, one)
                } else {
                    ResourceSet::cpu(Quantity::from_units(1_000))
                },
                SchedulingStrategy::Default,
            ),
            5..=9 => (
                Kind::Late,
                ResourceSet::cpu(one).with(LATE, one),
                SchedulingStrategy::Default,
            ),
            10..=309 => (
                Kind::Normal,
                [
                    ResourceSet::cpu(q(0.5)).with(GPU, q(0.5)),
                    ResourceSet::new().with(GPU, q(0.25)),
                ][self.rng.below(2)]
                .clone(),
                SchedulingStrategy::Default,
            ),
            310..=409 => (
                Kind::Normal,
                ResourceSet::cpu(one).with(ACCEL, q(0.5)),
                SchedulingStrategy::Default,
            ),
            410..=909 => (
                Kind::Normal,
                ResourceSet::cpu(one),
                SchedulingStrategy::Spread,
            ),
            910..=1209 => {
                let node = NodeId(self.rng.below(nodes_now) as u64);
                let soft = self.rng.below(2) == 0;
                (
                    Kind::Normal,
                    ResourceSet::cpu(q(0.5)),
                    SchedulingStrategy::NodeAffinity { node, soft },
                )
            }
            1210..=1509 => (
                Kind::Normal,
                ResourceSet::cpu(one),
                SchedulingStrategy::Locality,
            ),
            _ => (
                Kind::Normal,
                ResourceSet::cpu([q(1.0), q(1.0), q(0.5), q(0.25), q(2.0)][self.rng.below(5)]),
                SchedulingStrategy::Default,
            ),
        };
        let mut task = Task::new(
            TaskId::new(WorkerId(0), t as u64),
            resources.clone(),
            strategy.clone(),
            t as u32,
        );
        if strategy == SchedulingStrategy::Locality {
            for _ in 0..1 + self.rng.below(3) {
                let node = NodeId(self.rng.below(nodes_now) as u64);
                task.arg_bytes
                    .push((node, 1 + self.rng.below(1 << 20) as u64));
            }
        }
        self.tasks.push(TaskRec {
            kind,
            resources,
            strategy,
            runs: 0,
            lost: 0,
            completed: 0,
            running_on: None,
            reported: false,
        });
        self.generated += 1;
        self.outstanding += 1;
        let at = if self.rng.below(10) == 0 {
            self.hot[self.rng.below(self.hot.len())]
        } else {
            self.random_alive()
        };
        let at = if self.is_alive(at) {
            at
        } else {
            self.random_alive()
        };
        self.trace(20, t as u64, at.0);
        self.sched(at).submit(task);
        self.drain(at);
    }

    pub(super) fn join(&mut self) {
        let id = NodeId(self.nodes.len() as u64);
        let total = Self::node_shape(&mut self.rng, true);
        self.trace(40, id.0, 0);
        let mut view = self.gcs_view.clone();
        view.add_node(id, total.clone(), BTreeMap::new());
        self.gcs_view.add_node(id, total.clone(), BTreeMap::new());
        self.nodes.push(SimNode {
            sched: NodeScheduler::new(id, view, policies(self.cfg.seed ^ id.0)),
            total: total.clone(),
            alive: true,
            bundles: 0,
            pinned: false,
        });
        for k in 0..self.alive.len() {
            let n = self.alive[k];
            self.sched(n).node_added(id, total.clone(), BTreeMap::new());
            self.drain(n);
        }
        self.alive.push(id);
    }

    pub(super) fn leave(&mut self) {
        // A node holding no bundle, driving no group, not hot.
        let mut pick = None;
        for _ in 0..100 {
            let n = self.random_alive();
            let sn = &self.nodes[n.0 as usize];
            if !sn.pinned && sn.bundles == 0 {
                pick = Some(n);
                break;
            }
        }
        let Some(gone) = pick else { return };
        self.trace(41, gone.0, 0);
        let sn = &mut self.nodes[gone.0 as usize];
        sn.alive = false;
        let queued = sn.sched.drain();
        self.alive.retain(|&n| n != gone);
        let mut lost = Vec::new();
        for (t, rec) in self.tasks.iter_mut().enumerate() {
            if rec.running_on == Some(gone) {
                rec.running_on = None;
                rec.lost += 1;
                lost.push(t);
            }
        }
        self.report.lost_runs += lost.len() as u64;
        self.gcs_view.remove_node(gone);
        let affected = self.groups.on_node_removed(gone, &mut self.gcs_view);
        assert!(affected.is_empty(), "the node leaving held no bundle");
        for k in 0..self.alive.len() {
            let n = self.alive[k];
            self.sched(n).node_removed(gone);
            self.drain(n);
        }
        for task in queued {
            // A task it held as infeasible is placed anew.
            let rec = &mut self.tasks[task.id.seq as usize];
            if rec.reported {
                rec.reported = false;
                self.outstanding += 1;
            }
            self.resubmit(task);
        }
        for t in lost {
            let rec = &self.tasks[t];
            let mut task = Task::new(
                TaskId::new(WorkerId(0), t as u64),
                rec.resources.clone(),
                rec.strategy.clone(),
                t as u32,
            );
            task.arg_bytes.clear();
            self.resubmit(task);
        }
    }
}
