//! What the node tells the GCS and learns from it: reports of this node's
//! load (the heartbeat that keeps it alive is `pulse.rs`'s), the node table that feeds the scheduler's view of the
//! others, and the GCS's node and job events (joins, deaths, job ends).

use std::time::Duration;

use ray_proto::wire::{WireChannel, WireEvent};
use ray_proto::{JobId, TaskId};

use super::NodeService;

/// How soon a change of this node's load reaches the GCS, at most.
const LOAD_REPORT: Duration = Duration::from_millis(100);
use crate::cluster::{resources_from_wire, resources_to_wire, ClusterError};

impl NodeService {
    /// Follows node and job changes published by the GCS, so joins,
    /// deaths and job ends reach the scheduler at once (the heartbeat
    /// loop's full refresh is the fallback). Runs until the node stops.
    pub(super) async fn follow_events(self) {
        let client = self.inner.daemon.client().clone();
        loop {
            let sub = match client
                .subscribe(vec![WireChannel::Node, WireChannel::Job])
                .await
            {
                Ok(sub) => sub,
                Err(_) => {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            };
            let mut seen_dropped = 0;
            loop {
                match client.poll_events(sub, Duration::from_secs(1)).await {
                    Ok((events, dropped)) => {
                        if dropped > seen_dropped {
                            // Lost some: the tables themselves are the truth.
                            seen_dropped = dropped;
                            if let Ok(nodes) = client.nodes().await {
                                self.apply_nodes(nodes);
                            }
                        }
                        let mut nodes = Vec::new();
                        for e in events {
                            match e {
                                WireEvent::Node(n) => nodes.push(n),
                                WireEvent::Job(j) if !j.running => self.end_job(j.id),
                                WireEvent::Job(j) => self.prestart(j.id, j.build),
                                _ => {}
                            }
                        }
                        if !nodes.is_empty() {
                            self.apply_nodes(nodes);
                        }
                    }
                    Err(ClusterError::Timeout { .. }) => {}
                    Err(_) => break,
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Reports this node's load and refreshes the view of the other nodes
    /// and of running jobs, while the heartbeat thread keeps the node
    /// alive; returns why the node must stop (the GCS declared it dead or
    /// cannot be reached). Cancel-safe.
    ///
    /// A change of load is reported within 100 ms, not at the next
    /// heartbeat: the GCS passes it on to the other nodes at once, so they
    /// spill work here as soon as resources free up (Ray's raylets sync
    /// their resource views every 100 ms too).
    pub async fn run(&self) -> ClusterError {
        let stopped = async {
            loop {
                // The permit `notify_one` leaves is taken with the error in
                // one poll: a cancelled `run` loses neither.
                if let Some(why) = self.inner.pulse.lock().take() {
                    return why;
                }
                self.inner.pulse_stopped.notified().await;
            }
        };
        tokio::select! {
            why = stopped => why,
            why = self.gossip() => why,
        }
    }

    /// Load reports and refreshes; see [`NodeService::run`].
    async fn gossip(&self) -> ClusterError {
        let inner = &self.inner;
        let client = inner.daemon.client().clone();
        let heartbeat = inner.daemon.heartbeat_interval();
        let mut ticks = tokio::time::interval(heartbeat.min(LOAD_REPORT));
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut reported = None;
        let mut last_full = None::<tokio::time::Instant>;
        loop {
            let now = ticks.tick().await;
            let update = inner.sched.lock().local_update();
            if reported != Some(update.version) {
                // Liveness is the heartbeat thread's: a late answer here
                // is only a late load report.
                match client
                    .heartbeat(inner.node, update.version, resources_to_wire(&update.used))
                    .await
                {
                    Ok(()) => reported = Some(update.version),
                    Err(ClusterError::Timeout { .. }) => {}
                    Err(e) => return e,
                }
            }
            if last_full.is_some_and(|t| now - t < heartbeat) {
                continue;
            }
            last_full = Some(now);
            if let Ok(nodes) = client.nodes().await {
                self.apply_nodes(nodes);
            }
            if let Ok(jobs) = client.jobs().await {
                for j in jobs {
                    match j.running {
                        true => self.prestart(j.id, j.build),
                        false => self.end_job(j.id),
                    }
                }
            }
        }
    }

    pub(super) fn apply_nodes(&self, nodes: Vec<ray_proto::wire::NodeEntry>) {
        let inner = &self.inner;
        {
            let mut sched = inner.sched.lock();
            let mut addrs = inner.node_addrs.lock();
            for n in nodes {
                if n.id == inner.node {
                    continue;
                }
                let known = sched.view().node(n.id).is_some();
                if !n.alive {
                    if known {
                        sched.node_removed(n.id);
                    }
                    addrs.remove(&n.id);
                    continue;
                }
                if let Ok(a) = n.address.parse() {
                    addrs.insert(n.id, a);
                }
                if !known {
                    let labels = crate::cluster::entry_labels(&n);
                    sched.node_added(n.id, resources_from_wire(&n.resources), labels);
                }
                if let Some(update) = crate::cluster::entry_update(&n) {
                    sched.apply_gossip(&update);
                }
            }
        }
        self.drain();
    }

    /// The job ended: its worker goes, and its leases with it.
    fn end_job(&self, job: JobId) {
        let inner = &self.inner;
        inner.ended.lock().insert(job);
        // Isolated workers of the job go with it, but for detached actors'.
        let own: Vec<TaskId> = {
            // Lock order: `isolated` before `lease_jobs` and `detached`.
            let isolated = inner.isolated.lock();
            let detached = inner.detached.lock();
            isolated
                .iter()
                .filter(|(l, (j, _))| *j == job && !detached.contains(*l))
                .map(|(l, _)| *l)
                .collect()
        };
        for lease in own {
            self.drop_isolated(lease);
            self.release_lease(lease);
        }
        // Detached actors in the shared worker keep it (isolated ones have
        // processes of their own).
        let keep = {
            let isolated = inner.isolated.lock();
            let lj = inner.lease_jobs.lock();
            let detached = inner.detached.lock();
            lj.iter()
                .any(|(l, h)| h.job == job && detached.contains(l) && !isolated.contains_key(l))
        };
        if keep {
            // Detached actors live in this worker: it stays, and so do
            // their leases; the job's other leases go.
            self.release_job_leases(job, false);
            return;
        }
        let Some(w) = inner.jobs.lock().remove(&job) else {
            return;
        };
        w.stop();
        self.release_job_leases(job, true);
    }
}
