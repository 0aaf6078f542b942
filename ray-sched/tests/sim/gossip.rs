//! How views spread: nodes gossip to random peers and report to the GCS,
//! which answers waiting work with nodes that fit it.

use super::*;

impl Sim {
    pub(super) fn gossip_from(&mut self, from: NodeId) {
        let mut updates = Vec::with_capacity(1 + self.cfg.gossip_fanout);
        let own = self.sched(from).local_update();
        let demands: Vec<ResourceSet> = self
            .sched(from)
            .waiting_demands()
            .take(4)
            .cloned()
            .collect();
        let d = self.delay();
        self.push(
            self.now + d,
            Ev::GcsGossip {
                from,
                update: own.clone(),
                demands,
            },
        );
        updates.push(own);
        // Besides its own state, what it knows of some of the least-loaded
        // nodes (spare capacity is what others need to hear about) and of
        // random nodes, alternately.
        for k in 0..self.cfg.gossip_fanout {
            let len = self.nodes[from.0 as usize].sched.view().len();
            let pick = if k % 2 == 0 {
                self.rng.below(64.min(len))
            } else {
                self.rng.below(len)
            };
            let view = self.nodes[from.0 as usize].sched.view();
            let id = if k % 2 == 0 {
                view.nodes_by_utilization().nth(pick).map(|n| n.id())
            } else {
                Some(view.nodes()[pick].id())
            };
            if let Some(u) = id
                .filter(|&id| id != from)
                .and_then(|id| view.update_for(id))
            {
                updates.push(u);
            }
        }
        let to = self.random_alive();
        if to != from {
            let d = self.delay();
            self.push(self.now + d, Ev::Gossip { to, updates });
        }
    }

    /// The GCS answers a node's waiting demands with its (fresher) view of
    /// a few of the least-loaded nodes that fit each, as Ray's GCS uses the
    /// load by shape that raylets report.
    pub(super) fn answer_demands(&mut self, to: NodeId, demands: &[ResourceSet]) {
        let mut updates = Vec::new();
        for demand in demands {
            updates.extend(
                self.gcs_view
                    .nodes_by_utilization()
                    .filter(|n| n.id() != to && n.resources().can_acquire(demand))
                    .take(4)
                    .filter_map(|n| self.gcs_view.update_for(n.id())),
            );
        }
        if !updates.is_empty() {
            let d = self.delay();
            self.push(self.now + d, Ev::Gossip { to, updates });
        }
    }
}
