//! The lease server on ray-sched's
//! [`NodeScheduler`](ray_sched::NodeScheduler): requests decided bottom-up
//! (run here, spill to another node, wait, infeasible), placement-group
//! bundles, and the scheduler's actions carried out.

use ray_proto::wire::labels_to_wire;
use ray_proto::wire::{
    BuildFingerprint, BundlePlaced, Call, CommitBundle, DetachLease, LeaseBlocked, LeaseGranted,
    LeaseInfeasible, LeaseRefused, Message, NodeReply, NodeRequest, PrepareBundle, ReleaseBundle,
    RemoveGroup, RequestLease, ReturnLease, WireNodeUpdate, WorkerReady,
};
use std::sync::Arc;

use ray_proto::{JobId, NodeId, TaskId};
use ray_sched::{Action, FailReason, NodeUpdate, Task};
use tokio::sync::oneshot;

use super::NodeService;
use crate::cluster::core::{strategy_from_wire, strategy_to_wire};
use crate::cluster::{resources_from_wire, resources_to_wire};
use ray_transport::Envelope;

/// A lease request waiting in the scheduler.
pub(super) struct Pending {
    job: JobId,
    binary_hash: [u8; 32],
    fingerprint: BuildFingerprint,
    owner: String,
    /// The lease gets a worker process of its own.
    isolated: bool,
}

/// Who holds a lease granted here.
pub(super) struct Holder {
    pub(super) job: JobId,
    /// Where its owner listens: told if the lease's worker exits.
    pub(super) owner: String,
}

impl NodeService {
    /// Gives back lease `lease` (its isolated worker exited).
    pub(super) fn release_lease(&self, lease: TaskId) {
        let inner = &self.inner;
        inner.lease_jobs.lock().remove(&lease);
        inner.detached.lock().remove(&lease);
        inner.sched.lock().finish(lease);
        self.drain();
    }

    /// Gives back the job's leases on its shared worker; those of
    /// detached actors too only when `all` (their worker is gone).
    /// Isolated leases have workers of their own and stay.
    pub(super) fn release_job_leases(&self, job: JobId, all: bool) {
        let inner = &self.inner;
        let leases: Vec<TaskId> = {
            let isolated = inner.isolated.lock();
            let mut lj = inner.lease_jobs.lock();
            let mut detached = inner.detached.lock();
            let ids: Vec<TaskId> = lj
                .iter()
                .filter(|(l, h)| {
                    h.job == job && !isolated.contains_key(*l) && (all || !detached.contains(*l))
                })
                .map(|(l, _)| *l)
                .collect();
            for l in &ids {
                detached.remove(l);
            }
            for l in &ids {
                lj.remove(l);
            }
            ids
        };
        {
            let mut sched = inner.sched.lock();
            for l in leases {
                sched.finish(l);
            }
        }
        self.drain();
    }

    /// The answer to one request of the node's service.
    pub(super) async fn handle(&self, request: NodeRequest) -> Message {
        let inner = &self.inner;
        match request {
            NodeRequest::RequestLease(RequestLease {
                lease,
                job,
                binary_hash,
                fingerprint,
                resources,
                strategy,
                spilled_from,
                hard_labels,
                soft_labels,
                arg_bytes,
                owner,
                isolated,
            }) => {
                let (tx, rx) = oneshot::channel();
                inner.replies.lock().insert(lease, tx);
                let mut task = Task::new(
                    lease,
                    resources_from_wire(&resources),
                    strategy_from_wire(&strategy),
                    Pending {
                        job,
                        binary_hash,
                        fingerprint,
                        owner,
                        isolated,
                    },
                );
                task.arg_bytes = arg_bytes.iter().map(|a| (a.node, a.bytes)).collect();
                task.labels = ray_sched::LabelSelector {
                    hard: labels_from_wire(hard_labels),
                    soft: labels_from_wire(soft_labels),
                };
                {
                    let mut sched = inner.sched.lock();
                    match spilled_from {
                        None => sched.submit(task),
                        Some(from) => sched.receive_spill(from, task),
                    }
                }
                self.drain();
                rx.await.unwrap_or(Message::Error {
                    reason: format!("{} dropped the lease request", inner.node),
                })
            }
            NodeRequest::ReturnLease(ReturnLease { lease }) => {
                inner.lease_jobs.lock().remove(&lease);
                let own = inner.isolated.lock().remove(&lease);
                if let Some((_, w)) = own {
                    // Its worker served this lease alone.
                    w.stop();
                }
                inner.detached.lock().remove(&lease);
                let found = inner.sched.lock().finish(lease);
                self.drain();
                if found {
                    Message::Ok
                } else {
                    Message::Error {
                        reason: format!("{lease} is not a lease of {}", inner.node),
                    }
                }
            }
            NodeRequest::PrepareBundle(PrepareBundle {
                group,
                index,
                resources,
            }) => {
                let ok = inner.sched.lock().prepare_bundle(
                    group,
                    index as usize,
                    resources_from_wire(&resources),
                );
                self.drain();
                ok_or_error(ok, || {
                    format!("bundle {index} of {group} does not fit {} now", inner.node)
                })
            }
            NodeRequest::CommitBundle(CommitBundle { group, index }) => {
                let ok = inner.sched.lock().commit_bundle(group, index as usize);
                self.drain();
                ok_or_error(ok, || {
                    format!(
                        "bundle {index} of {group} is not prepared on {}",
                        inner.node
                    )
                })
            }
            NodeRequest::ReleaseBundle(ReleaseBundle { group, index }) => {
                inner.sched.lock().release_bundle(group, index as usize);
                self.drain();
                Message::Ok
            }
            NodeRequest::BundlePlaced(BundlePlaced {
                group,
                index,
                node,
                resources,
            }) => {
                inner.sched.lock().bundle_placed(
                    group,
                    index as usize,
                    node,
                    resources_from_wire(&resources),
                );
                self.drain();
                Message::Ok
            }
            NodeRequest::RemoveGroup(RemoveGroup { group }) => {
                inner.sched.lock().placement_group_removed(group);
                self.drain();
                Message::Ok
            }
            NodeRequest::DetachLease(DetachLease { lease }) => {
                if inner.lease_jobs.lock().contains_key(&lease) {
                    inner.detached.lock().insert(lease);
                    Message::Ok
                } else {
                    Message::Error {
                        reason: format!("{lease} is not a lease of {}", inner.node),
                    }
                }
            }
            NodeRequest::LeaseBlocked(LeaseBlocked { lease, blocked }) => {
                {
                    let mut sched = inner.sched.lock();
                    if blocked {
                        sched.block(lease);
                    } else {
                        sched.unblock(lease);
                    }
                }
                self.drain();
                Message::Ok
            }
            NodeRequest::WorkerReady(WorkerReady {
                job,
                worker,
                address,
                fingerprint,
                pid,
                lease,
            }) => self.worker_ready(job, worker, address, fingerprint, pid, lease),
        }
    }

    /// Carries out what the scheduler decided.
    pub(super) fn drain(&self) {
        loop {
            let action = self.inner.sched.lock().poll_action();
            let Some(action) = action else { return };
            match action {
                Action::Run(task) => self.grant(task),
                Action::Spill { to, task } => {
                    let me = self.clone();
                    tokio::spawn(async move { me.forward(to, task).await });
                }
                Action::Refuse { task, update, .. } => {
                    let refused = LeaseRefused {
                        update: WireNodeUpdate {
                            node: update.node,
                            version: update.version,
                            used: resources_to_wire(&update.used),
                        },
                    };
                    self.reply(task.id, refused.into());
                }
                Action::Infeasible { task, report } => {
                    // A node may have joined since the last gossip: look
                    // again (the scheduler re-places kept work on a join),
                    // and answer infeasible only if it still is.
                    let me = self.clone();
                    tokio::spawn(async move {
                        if let Ok(nodes) = me.inner.daemon.client().nodes().await {
                            me.apply_nodes(nodes);
                        }
                        let infeasible = LeaseInfeasible {
                            reason: report.reason,
                        };
                        me.reply(task, infeasible.into());
                    });
                }
                Action::Failed { task, reason } => {
                    let reason = match reason {
                        FailReason::PlacementGroupRemoved(group) => {
                            format!("placement group {group} was removed")
                        }
                        FailReason::BundleTooSmall {
                            group,
                            bundle: Some(bundle),
                        } => format!("bundle {bundle} of {group} can never hold it"),
                        FailReason::BundleTooSmall {
                            group,
                            bundle: None,
                        } => format!("no bundle of {group} can ever hold it"),
                    };
                    self.reply(task.id, Message::Error { reason });
                }
            }
        }
    }

    fn reply(&self, lease: TaskId, msg: Message) -> bool {
        match self.inner.replies.lock().remove(&lease) {
            Some(tx) => tx.send(msg).is_ok(),
            None => false,
        }
    }

    /// The scheduler placed a lease here: start (or reuse) the job's worker.
    fn grant(&self, task: Task<Pending>) {
        let inner = &self.inner;
        if !inner.replies.lock().contains_key(&task.id) {
            // Its owner was told it is infeasible, or gave up: nobody holds it.
            inner.sched.lock().finish(task.id);
            return self.drain();
        }
        if task.item.isolated {
            // Marked isolated before it is a lease of the job: the shared
            // worker's exit never releases it.
            inner
                .isolated
                .lock()
                .insert(task.id, (task.item.job, Arc::default()));
        }
        inner.lease_jobs.lock().insert(
            task.id,
            Holder {
                job: task.item.job,
                owner: task.item.owner.clone(),
            },
        );
        let me = self.clone();
        tokio::spawn(async move {
            let p = &task.item;
            let started = if p.isolated {
                me.isolated_worker(task.id, p.job, p.binary_hash, p.fingerprint)
                    .await
            } else {
                me.worker_for(p.job, p.binary_hash, p.fingerprint).await
            };
            match started {
                Ok((worker, address)) => {
                    let granted = LeaseGranted {
                        lease: task.id,
                        node: me.inner.node,
                        worker,
                        address,
                    };
                    if !me.reply(task.id, granted.into()) {
                        me.drop_isolated(task.id);
                        me.inner.lease_jobs.lock().remove(&task.id);
                        me.inner.sched.lock().finish(task.id);
                        me.drain();
                    }
                }
                Err(e) => {
                    me.drop_isolated(task.id);
                    me.inner.lease_jobs.lock().remove(&task.id);
                    me.inner.sched.lock().finish(task.id);
                    me.drain();
                    let reason = e.to_string();
                    me.reply(task.id, Message::Error { reason });
                }
            }
        });
    }

    async fn forward(&self, to: NodeId, task: Task<Pending>) {
        let inner = &self.inner;
        let addr = inner.node_addrs.lock().get(&to).copied();
        let reply = match addr {
            Some(addr) => match inner.conns.get(addr).await {
                Ok(conn) => {
                    let p = &task.item;
                    let request = RequestLease {
                        lease: task.id,
                        job: p.job,
                        binary_hash: p.binary_hash,
                        fingerprint: p.fingerprint,
                        resources: resources_to_wire(&task.resources),
                        strategy: strategy_to_wire(&task.strategy),
                        spilled_from: Some(inner.node),
                        hard_labels: labels_to_wire(&task.labels.hard),
                        soft_labels: labels_to_wire(&task.labels.soft),
                        arg_bytes: task
                            .arg_bytes
                            .iter()
                            .map(|&(node, bytes)| ray_proto::wire::ArgBytes { node, bytes })
                            .collect(),
                        owner: p.owner.clone(),
                        isolated: p.isolated,
                    };
                    conn.request(&Envelope::new(request.into())).await.ok()
                }
                Err(_) => None,
            },
            None => None,
        };
        match reply.map(|e| e.body).map(RequestLease::reply) {
            Some(Ok(granted @ NodeReply::LeaseGranted(_))) => {
                self.reply(task.id, granted.into());
            }
            Some(Ok(NodeReply::LeaseRefused(LeaseRefused { update }))) => {
                let update = NodeUpdate {
                    node: update.node,
                    version: update.version,
                    used: resources_from_wire(&update.used),
                };
                inner.sched.lock().on_refused(to, task, &update);
                self.drain();
            }
            Some(Ok(infeasible @ NodeReply::LeaseInfeasible(_))) => {
                self.reply(task.id, infeasible.into());
            }
            Some(Err(error @ Message::Error { .. })) => {
                self.reply(task.id, error);
            }
            _ => {
                inner.sched.lock().spill_failed(to, task);
                self.drain();
            }
        }
    }
}

/// `Ok`, or an `Error` saying `why`.
fn ok_or_error(ok: bool, why: impl FnOnce() -> String) -> Message {
    if ok {
        Message::Ok
    } else {
        Message::Error { reason: why() }
    }
}

/// Labels from wire form.
fn labels_from_wire(
    labels: Vec<ray_proto::wire::Label>,
) -> std::collections::BTreeMap<String, String> {
    labels.into_iter().map(|l| (l.key, l.value)).collect()
}
