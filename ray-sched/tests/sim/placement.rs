//! Placement groups: the GCS places them in its view with
//! [`PlacementGroups`], then reserves them on the nodes in two phases;
//! their tasks are submitted on the driver once every bundle is committed,
//! and the group is removed when they have all finished.

use super::*;

impl Sim {
    pub(super) fn pg_create(&mut self, pg: u32) {
        if pg as usize == self.pgs.len() {
            let n = 2 + self.rng.below(3);
            let gpu = self.rng.below(4) == 0;
            let bundle = if gpu {
                ResourceSet::cpu(one_unit()).with(GPU, one_unit())
            } else {
                ResourceSet::cpu(Quantity::from_units(2))
            };
            let strategy = [
                PlacementStrategy::Pack,
                PlacementStrategy::Spread,
                PlacementStrategy::StrictPack,
                PlacementStrategy::StrictSpread,
            ][self.rng.below(4)];
            let driver = loop {
                let d = self.random_alive();
                if self.nodes[d.0 as usize].alive {
                    break d;
                }
            };
            self.nodes[driver.0 as usize].pinned = true;
            self.pgs.push(PgSim {
                id: PlacementGroupId::new(WorkerId(1), pg as u64),
                bundles: vec![bundle; n],
                strategy,
                driver,
                phase: PgPhase::Placing,
                attempt: 0,
                nodes: Vec::new(),
                replies: Vec::new(),
                done: 0,
            });
        }
        let p = &self.pgs[pg as usize];
        let state = self
            .groups
            .create(p.id, p.bundles.clone(), p.strategy, &mut self.gcs_view)
            .expect("every group fits the cluster");
        self.trace(50, pg as u64, state as u64);
        if state == PgState::Ready {
            self.pg_prepare(pg);
        }
    }

    pub(super) fn pg_retry_pending(&mut self) {
        for id in self.groups.retry_pending(&mut self.gcs_view) {
            let pg = id.seq as u32;
            if self.pgs[pg as usize].phase == PgPhase::Placing {
                self.pg_prepare(pg);
            }
        }
        if self.outstanding > 0 || self.generated < self.normal_tasks {
            self.push(self.now + 20, Ev::PgRetryPending);
        }
    }

    /// The GCS's manager placed the group in its view: phase two on the
    /// nodes themselves.
    pub(super) fn pg_prepare(&mut self, pg: u32) {
        let p = &mut self.pgs[pg as usize];
        p.phase = PgPhase::Preparing;
        p.attempt += 1;
        p.nodes = (0..p.bundles.len())
            .map(|i| {
                self.groups
                    .bundle_node(p.id, i)
                    .expect("ready group is placed")
            })
            .collect();
        p.replies = vec![None; p.bundles.len()];
        let attempt = p.attempt;
        let nodes = p.nodes.clone();
        for (index, node) in nodes.into_iter().enumerate() {
            let d = self.delay();
            self.push(
                self.now + d,
                Ev::Prepare {
                    node,
                    pg,
                    index,
                    attempt,
                },
            );
        }
    }

    pub(super) fn prepare_reply(&mut self, pg: u32, index: usize, ok: bool, attempt: u32) {
        let p = &mut self.pgs[pg as usize];
        assert_eq!(p.attempt, attempt, "one reservation attempt at a time");
        p.replies[index] = Some(ok);
        if p.replies.iter().any(Option::is_none) {
            return;
        }
        let all_ok = p.replies.iter().all(|r| *r == Some(true));
        let nodes = p.nodes.clone();
        if all_ok {
            p.phase = PgPhase::Committed;
            let held: usize = nodes.iter().map(|_| 1).sum();
            assert_eq!(held, p.bundles.len(), "all bundles prepared before commit");
            for (index, node) in nodes.into_iter().enumerate() {
                let d = self.delay();
                self.push(self.now + d, Ev::Commit { node, pg, index });
            }
            let d = self.delay();
            self.push(self.now + d + 3, Ev::PgReady { pg });
        } else {
            // Abort: give back what was prepared, forget the GCS's plan,
            // and try again later.
            self.report.pg_aborts += 1;
            let replies = p.replies.clone();
            let id = p.id;
            p.phase = PgPhase::Placing;
            for (index, (node, r)) in nodes.into_iter().zip(replies).enumerate() {
                if r == Some(true) {
                    let d = self.delay();
                    self.push(self.now + d, Ev::Release { node, pg, index });
                }
            }
            self.groups
                .remove(id, &mut self.gcs_view)
                .expect("the group is known");
            self.push(self.now + 10, Ev::PgCreate { pg });
        }
    }

    pub(super) fn pg_ready(&mut self, pg: u32) {
        let p = &self.pgs[pg as usize];
        let (driver, id) = (p.driver, p.id);
        let placed: Vec<(usize, NodeId, ResourceSet)> = p
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (i, *n, p.bundles[i].clone()))
            .collect();
        let nb = placed.len();
        let gpu = !p.bundles[0].get(GPU).is_zero();
        for (i, node, res) in placed {
            self.sched(driver).bundle_placed(id, i, node, res);
        }
        for _ in 0..self.cfg.tasks_per_group {
            let t = self.tasks.len();
            let resources = if gpu {
                ResourceSet::cpu(q(0.5)).with(GPU, q(0.5))
            } else {
                ResourceSet::cpu(one_unit())
            };
            let bundle = if self.rng.below(3) == 0 {
                None
            } else {
                Some(self.rng.below(nb))
            };
            let strategy = SchedulingStrategy::PlacementGroup { group: id, bundle };
            self.tasks.push(TaskRec {
                kind: Kind::Group(pg),
                resources: resources.clone(),
                strategy: strategy.clone(),
                runs: 0,
                lost: 0,
                completed: 0,
                running_on: None,
                reported: false,
            });
            self.outstanding += 1;
            self.trace(51, t as u64, driver.0);
            let task = Task::new(
                TaskId::new(WorkerId(0), t as u64),
                resources,
                strategy,
                t as u32,
            );
            self.sched(driver).submit(task);
        }
        self.drain(driver);
    }

    pub(super) fn pg_remove(&mut self, pg: u32) {
        let p = &mut self.pgs[pg as usize];
        p.phase = PgPhase::Removed;
        let (id, nodes, driver) = (p.id, p.nodes.clone(), p.driver);
        self.groups
            .remove(id, &mut self.gcs_view)
            .expect("the group is known");
        for (index, node) in nodes.into_iter().enumerate() {
            let d = self.delay();
            self.push(self.now + d, Ev::Release { node, pg, index });
        }
        let d = self.delay();
        self.push(self.now + d, Ev::PgRemoved { pg });
        let _ = driver;
    }
}
