//! The invariants, checked as the run goes and at its end.

use super::*;

impl Sim {
    /// No node's authoritative `used` ever exceeds its `total` (the
    /// simulation never blocks tasks, so `acquire_forced` is never used).
    pub(super) fn check_node(&self, node: NodeId) {
        let n = &self.nodes[node.0 as usize];
        let own = n.sched.view().node(node).expect("own node in own view");
        assert!(
            own.resources().used().is_subset_of(&n.total),
            "node {node} overcommitted at t={}: used {} of {}",
            self.now,
            own.resources().used(),
            n.total
        );
    }

    pub(super) fn final_checks(&mut self) {
        assert_eq!(
            self.generated, self.normal_tasks,
            "every task was submitted"
        );
        assert_eq!(self.tasks.len(), self.cfg.tasks, "every task exists");
        let mut never = 0;
        for (t, rec) in self.tasks.iter().enumerate() {
            let feasible = self.feasible_at_end(rec);
            assert_eq!(rec.running_on, None, "task {t} still running");
            if rec.completed == 0 {
                assert!(
                    !feasible,
                    "feasible task {t} ({:?}) never ran",
                    rec.strategy
                );
                assert!(
                    rec.reported,
                    "task {t} never ran and was never reported infeasible"
                );
                // It may have run on a node that then left (and became infeasible
                // with it: hard affinity to that node).
                assert_eq!(rec.runs, rec.lost, "task {t} ran but never completed");
                never += 1;
            } else {
                assert_eq!(
                    rec.completed, 1,
                    "task {t} completed {} times",
                    rec.completed
                );
                assert_eq!(rec.runs, 1 + rec.lost, "task {t} ran more than once");
                assert_ne!(rec.kind, Kind::Never, "task {t} can never run");
            }
        }
        self.report.never_ran = never;
        for p in &self.pgs {
            assert_eq!(
                p.phase,
                PgPhase::Removed,
                "group {} removed at the end",
                p.id
            );
        }
        assert!(self.groups.is_empty(), "the GCS holds no group");
        for (i, n) in self.nodes.iter().enumerate() {
            if !n.alive {
                continue;
            }
            let id = NodeId(i as u64);
            assert_eq!(n.bundles, 0, "node {id} still holds a bundle");
            assert_eq!(n.sched.running_len(), 0, "node {id} still runs tasks");
            assert_eq!(
                n.sched.waiting_len(),
                0,
                "node {id} still has waiting tasks"
            );
            let own = n.sched.view().node(id).expect("own node");
            assert!(
                own.resources().used().is_empty(),
                "node {id} leaks {}",
                own.resources().used()
            );
        }
    }

    /// Whether the task could run on the cluster as it ends.
    pub(super) fn feasible_at_end(&self, rec: &TaskRec) -> bool {
        let fits = |n: NodeId| {
            self.is_alive(n) && rec.resources.is_subset_of(&self.nodes[n.0 as usize].total)
        };
        match rec.strategy {
            SchedulingStrategy::NodeAffinity { node, soft: false } => fits(node),
            SchedulingStrategy::PlacementGroup { .. } => true,
            _ => self.alive.iter().any(|&n| fits(n)),
        }
    }
}
