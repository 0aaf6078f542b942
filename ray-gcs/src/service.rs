//! The GCS service without I/O: one request in, one [`Action`] out.
//!
//! Everything the service decides happens here, against [`State`] and a
//! `now` passed in, so tests drive it step by step. The async shell
//! (ray-core's `cluster/gcs_server.rs`) only moves bytes: it reads
//! requests, performs the [`Action`] (a reply, or raw binary bytes in either
//! direction), hashes uploads off the lock, keeps the clock and wakes
//! subscribers waiting in a long poll after every change. Nothing here
//! knows tokio, quinn or a clock.

use std::sync::Arc;
use std::time::Duration;

use hashbrown::HashMap;
use ray_proto::hex;
use ray_proto::wire::{
    self, ActorDead, ActorEntry, ActorFailed, ActorLocation, ActorNow, ActorStatus, Actors,
    BuildFingerprint, Events, FetchBinary, FinishJob, GcsRequest, GetActors, GetJobs, GetNodes,
    GetWorker, GetWorkers, Heartbeat, JobEntry, JobRegistered, Jobs, KvGet, KvPut, KvPutDone,
    KvValue, LocateActor, LookupActor, Message, NodeEntry, NodeRegistered, Nodes, PollEvents,
    RegisterActor, RegisterJob, RegisterNode, RegisterWorker, ResourceAmount, Subscribe,
    Subscribed, Unsubscribe, UploadBinary, WireChannel, WireEvent, WorkerEntry, WorkerRegistered,
    Workers,
};
use ray_proto::wire::{labels_to_wire, MAX_BINARY_LEN};
use ray_proto::{ActorId, JobId, NodeId, WorkerId};
use ray_sched::wire::{resources_from_wire, resources_to_wire};
use rkyv::util::AlignedVec;

use crate::{
    ActorInfo, ActorState, Channel, Gcs, GcsError, GcsEvent, JobInfo, NodeState, WorkerInfo,
};

/// The binary a job's workers run, as its driver registered it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobBinary {
    /// SHA-256 of the executable.
    pub hash: [u8; 32],
    /// The build fingerprint its processes present in handshakes.
    pub fingerprint: BuildFingerprint,
}

/// A node's last load report.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct NodeLoad {
    version: u64,
    used: Vec<ResourceAmount>,
}

/// Where a registered actor's worker listens.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ActorHome {
    worker: WorkerId,
    address: String,
}

/// The GCS table state, what the tables do not hold, and the clock.
pub struct State {
    /// The tables.
    pub gcs: Gcs,
    next_node: u64,
    heartbeat_interval: Duration,
    /// The binary of every job registered, by job.
    job_binaries: HashMap<JobId, JobBinary>,
    /// The settings each job's driver registered (its workers follow
    /// them); kept after the job ends, as a detached actor's worker may
    /// still start for it.
    job_configs: HashMap<JobId, wire::JobConfig>,
    /// Uploaded job binaries by SHA-256; kept for the life of the service
    /// (a detached actor may outlive its job and need its binary again).
    binaries: HashMap<[u8; 32], Arc<AlignedVec<16>>>,
    /// Each node's last load report; absent before its first.
    loads: HashMap<NodeId, NodeLoad>,
    /// The worker of each registered actor that is not dead.
    actor_homes: HashMap<ActorId, ActorHome>,
    /// Wire subscriptions: one table subscriber per channel followed.
    subs: HashMap<u64, Vec<crate::SubscriberId>>,
    next_sub: u64,
}

impl State {
    /// Empty tables around `gcs`; nodes are told to heartbeat every
    /// `heartbeat_interval`.
    pub fn new(gcs: Gcs, heartbeat_interval: Duration) -> Self {
        Self {
            gcs,
            next_node: 1,
            heartbeat_interval,
            job_binaries: HashMap::new(),
            job_configs: HashMap::new(),
            binaries: HashMap::new(),
            loads: HashMap::new(),
            actor_homes: HashMap::new(),
            subs: HashMap::new(),
            next_sub: 1,
        }
    }

    /// Ends the wire subscription `sub` (its connection closed).
    pub fn unsubscribe(&mut self, sub: u64) {
        for s in self.subs.remove(&sub).unwrap_or_default() {
            self.gcs.unsubscribe(s);
        }
    }

    /// The binary job `job` registered, if it did.
    pub fn job_binary(&self, job: JobId) -> Option<JobBinary> {
        self.job_binaries.get(&job).copied()
    }
}

/// What the shell does to answer one request.
// Made and consumed once per request, never stored in bulk: boxing the
// reply would cost an allocation per request for nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Action {
    /// Send this reply.
    Reply(Message),
    /// Read the `len` raw bytes that follow the request, hash them off the
    /// lock, then answer with [`store_binary`].
    ReceiveBinary {
        /// The hash the uploader announced.
        hash: [u8; 32],
        /// The bytes announced.
        len: u64,
    },
    /// Answer [`BinaryFollows`](wire::BinaryFollows) and send these bytes.
    SendBinary(Arc<AlignedVec<16>>),
}

/// The answer to one message of a connection: a GCS request is
/// [`handle`]d, a [`Message::Ping`] answered [`Message::Pong`], and any
/// other message (a reply, another service's request) refused with a
/// [`Message::Error`] naming its kind.
pub fn handle_message(state: &mut State, message: Message, now: Duration) -> Action {
    match message {
        Message::Gcs(request) => handle(state, request, now),
        Message::Ping { seq } => Action::Reply(Message::Pong { seq }),
        other => Action::Reply(Message::Error {
            reason: format!("the GCS does not serve {}", other.kind()),
        }),
    }
}

/// The answer to one request: the whole of the service's logic, without I/O.
///
/// [`InsightBatch`](wire::InsightBatch) and
/// [`InsightExport`](wire::InsightExport) are the shell's (its insight
/// collector answers them, off the tables); here they are refused.
pub fn handle(state: &mut State, request: GcsRequest, now: Duration) -> Action {
    let reply = match request {
        GcsRequest::UploadBinary(UploadBinary { hash, len }) => return upload(state, hash, len),
        GcsRequest::FetchBinary(FetchBinary { hash }) => {
            return match state.binaries.get(&hash) {
                Some(bytes) => Action::SendBinary(bytes.clone()),
                None => Action::Reply(Message::Error {
                    reason: format!("unknown binary {}", hex(&hash)),
                }),
            }
        }
        GcsRequest::RegisterNode(RegisterNode {
            address,
            resources,
            labels,
        }) => register_node(state, address, &resources, labels, now),
        GcsRequest::Heartbeat(Heartbeat {
            node,
            version,
            used,
        }) => match state.gcs.heartbeat(node, now) {
            Ok(()) => {
                // Each request has its own stream, so reports can overtake
                // each other: keep the newest.
                let load = state.loads.entry(node).or_default();
                let newer = version > load.version;
                if version >= load.version {
                    *load = NodeLoad { version, used };
                }
                if newer {
                    // The other nodes place work by this load: tell them now
                    // rather than at their next full refresh.
                    state.gcs.republish_node(node);
                }
                Message::Ok
            }
            Err(e) => error(e),
        },
        GcsRequest::GetNodes(GetNodes) => Nodes {
            nodes: nodes(state),
        }
        .into(),
        GcsRequest::Subscribe(Subscribe { channels }) => {
            let sub = state.next_sub;
            state.next_sub += 1;
            let ids = channels
                .iter()
                .map(|c| {
                    state.gcs.subscribe(match c {
                        WireChannel::Node => Channel::Node,
                        WireChannel::Actor => Channel::Actor,
                        WireChannel::Job => Channel::Job,
                    })
                })
                .collect();
            state.subs.insert(sub, ids);
            Subscribed { sub }.into()
        }
        GcsRequest::PollEvents(PollEvents { sub, .. }) => {
            let Some(ids) = state.subs.get(&sub).cloned() else {
                return Action::Reply(Message::Error {
                    reason: format!("no subscription {sub}"),
                });
            };
            let mut events = Vec::new();
            let mut dropped = 0;
            for id in ids {
                dropped += state.gcs.dropped(id);
                for e in state.gcs.poll_events(id) {
                    events.push(match e {
                        GcsEvent::Node(row) => WireEvent::Node(node_entry(state, &row)),
                        GcsEvent::Actor(row) => WireEvent::Actor(actor_entry(&row)),
                        GcsEvent::Job(row) => WireEvent::Job(job_entry(state, &row)),
                    });
                }
            }
            Events { events, dropped }.into()
        }
        GcsRequest::Unsubscribe(Unsubscribe { sub }) => {
            state.unsubscribe(sub);
            Message::Ok
        }
        GcsRequest::GetJobs(GetJobs) => {
            let mut jobs: Vec<JobEntry> = state.gcs.jobs().map(|r| job_entry(state, r)).collect();
            jobs.sort_by_key(|j| j.id);
            Jobs { jobs }.into()
        }
        GcsRequest::GetActors(GetActors) => Actors {
            actors: actors(state),
        }
        .into(),
        GcsRequest::KvGet(KvGet { namespace, key }) => KvValue {
            value: state.gcs.kv_get(&namespace, &key).map(<[u8]>::to_vec),
        }
        .into(),
        GcsRequest::KvPut(KvPut {
            namespace,
            key,
            value,
            overwrite,
        }) => KvPutDone {
            written: state.gcs.kv_put(&namespace, &key, value, overwrite),
        }
        .into(),
        GcsRequest::RegisterJob(request) => {
            let config = request.config.clone();
            match register_job(state, request, now) {
                Ok(registered) => {
                    state.job_configs.insert(registered.job, config);
                    registered.into()
                }
                Err(e) => error(e),
            }
        }
        GcsRequest::FinishJob(FinishJob { job }) => match finish_job(state, job, now) {
            Ok(()) => Message::Ok,
            Err(e) => error(e),
        },
        GcsRequest::RegisterWorker(RegisterWorker { job, node, address }) => {
            let info = WorkerInfo {
                job,
                node: Some(node),
                address,
            };
            match state.gcs.register_worker(info) {
                Ok(worker) => {
                    tracing::debug!(target: "ray::gcs", job = %job, node = %node, worker = %worker, "worker.registered");
                    WorkerRegistered {
                        worker,
                        config: state.job_configs.get(&job).cloned().unwrap_or_default(),
                    }
                    .into()
                }
                Err(e) => error(e),
            }
        }
        GcsRequest::GetWorker(GetWorker { worker }) => wire::WorkerInfo {
            address: state.gcs.worker(worker).map(|row| row.info.address.clone()),
        }
        .into(),
        GcsRequest::GetWorkers(GetWorkers) => Workers {
            workers: live_workers(state),
        }
        .into(),
        GcsRequest::RegisterActor(RegisterActor {
            entry,
            worker,
            address,
            max_restarts,
        }) => register_actor(state, entry, worker, address, max_restarts),
        GcsRequest::ActorFailed(ActorFailed { actor, life, cause }) => {
            let seen = state.gcs.actor(actor).and_then(|row| match &row.state {
                // Its node's death already moved it past this life.
                ActorState::Restarting { attempt } if *attempt > life => Some(row.state.clone()),
                ActorState::Dead { .. } => Some(row.state.clone()),
                _ => None,
            });
            let now = match seen {
                Some(now) => Ok(now),
                None => state.gcs.actor_failed(actor, cause),
            };
            match now {
                Ok(now) => {
                    // Not locatable until its next life registers.
                    state.actor_homes.remove(&actor);
                    tracing::info!(target: "ray::gcs", actor = %actor, state = ?now, "actor.failed");
                    ActorNow {
                        status: actor_status(&now),
                    }
                    .into()
                }
                Err(e) => error(e),
            }
        }
        GcsRequest::ActorDead(ActorDead { actor, cause }) => {
            let dead = state.gcs.actor(actor).map(|row| row.state.is_dead());
            match dead {
                None => error(GcsError::ActorNotFound { actor }),
                Some(true) => Message::Ok,
                Some(false) => match state.gcs.set_actor_state(actor, ActorState::Dead { cause }) {
                    Ok(()) => {
                        state.actor_homes.remove(&actor);
                        tracing::info!(target: "ray::gcs", actor = %actor, "actor.dead");
                        Message::Ok
                    }
                    Err(e) => error(e),
                },
            }
        }
        GcsRequest::LookupActor(LookupActor { namespace, name }) => {
            lookup_actor(state, &namespace, &name)
        }
        GcsRequest::LocateActor(LocateActor { id }) => locate_actor(state, id),
        request @ (GcsRequest::InsightBatch(_) | GcsRequest::InsightExport(_)) => Message::Error {
            reason: format!(
                "{} is answered by the head's insight collector, not the GCS tables",
                request.kind()
            ),
        },
    };
    Action::Reply(reply)
}

/// The reply to an upload whose bytes hash to `actual`: stores them if they
/// are what the uploader announced as `announced`.
pub fn store_binary(
    state: &mut State,
    announced: [u8; 32],
    actual: [u8; 32],
    bytes: Arc<AlignedVec<16>>,
) -> Message {
    if announced != actual {
        return Message::Error {
            reason: format!(
                "binary announced as {} hashes to {}",
                hex(&announced),
                hex(&actual)
            ),
        };
    }
    tracing::info!(target: "ray::gcs", hash = %hex(&actual), len = bytes.len(), "binary.stored");
    // A concurrent upload of the same binary may have won: same bytes.
    state.binaries.entry(actual).or_insert(bytes);
    Message::Ok
}

/// Finishes job `job` because the connection its driver registered it on
/// closed; a job already finished stays as it is.
pub fn driver_gone(state: &mut State, job: JobId, now: Duration) {
    match finish_job(state, job, now) {
        Ok(()) => tracing::info!(target: "ray::gcs", job = %job, "job.driver_gone"),
        Err(e) => tracing::warn!(target: "ray::gcs", job = %job, error = %e, "job.driver_gone"),
    }
}

fn upload(state: &State, hash: [u8; 32], len: u64) -> Action {
    if len > MAX_BINARY_LEN {
        return Action::Reply(Message::Error {
            reason: format!(
                "binary {} of {len} bytes exceeds the limit of {MAX_BINARY_LEN} bytes",
                hex(&hash)
            ),
        });
    }
    if state.binaries.contains_key(&hash) {
        // Someone uploaded it meanwhile; the shell drops the stream unread.
        return Action::Reply(Message::Ok);
    }
    Action::ReceiveBinary { hash, len }
}

fn register_node(
    state: &mut State,
    address: String,
    resources: &[ResourceAmount],
    labels: Vec<ray_proto::wire::Label>,
    now: Duration,
) -> Message {
    let id = NodeId(state.next_node);
    let info = crate::NodeInfo {
        id,
        address,
        resources: resources_from_wire(resources),
        labels: labels.into_iter().map(|l| (l.key, l.value)).collect(),
    };
    match state.gcs.register_node(info, now) {
        Ok(()) => {
            state.next_node += 1;
            tracing::info!(target: "ray::gcs", node = %id, "node.registered");
            NodeRegistered {
                node: id,
                heartbeat_interval_ms: state.heartbeat_interval.as_millis() as u64,
            }
            .into()
        }
        Err(e) => error(e),
    }
}

fn node_entry(state: &State, row: &crate::NodeRow) -> NodeEntry {
    let load = state.loads.get(&row.info.id);
    NodeEntry {
        id: row.info.id,
        address: row.info.address.clone(),
        resources: resources_to_wire(&row.info.resources),
        labels: labels_to_wire(&row.info.labels),
        alive: row.is_alive(),
        death_cause: match &row.state {
            NodeState::Alive => None,
            NodeState::Dead { cause } => Some(cause.clone()),
        },
        used: load.map(|l| l.used.clone()).unwrap_or_default(),
        version: load.map_or(0, |l| l.version),
    }
}

fn job_entry(state: &State, row: &crate::JobRow) -> JobEntry {
    JobEntry {
        id: row.info.id,
        driver: row.info.driver.clone(),
        running: row.is_running(),
        build: state.job_binary(row.info.id).map(|b| wire::JobBuild {
            binary_hash: b.hash,
            fingerprint: b.fingerprint,
        }),
    }
}

fn actor_entry(row: &crate::ActorRow) -> ActorEntry {
    ActorEntry {
        id: row.info.id,
        class_name: row.info.class_name.clone(),
        name: row.info.name.clone(),
        namespace: row.info.namespace.clone(),
        job: row.info.job,
        detached: row.info.detached,
        status: actor_status(&row.state),
    }
}

fn actor_status(state: &ActorState) -> ActorStatus {
    match state {
        ActorState::PendingCreation => ActorStatus::PendingCreation,
        ActorState::Alive { node } => ActorStatus::Alive { node: *node },
        ActorState::Restarting { attempt } => ActorStatus::Restarting { attempt: *attempt },
        ActorState::Dead { cause } => ActorStatus::Dead {
            cause: cause.clone(),
        },
    }
}

fn nodes(state: &State) -> Vec<NodeEntry> {
    let mut nodes: Vec<NodeEntry> = state
        .gcs
        .nodes()
        .map(|row| node_entry(state, row))
        .collect();
    nodes.sort_by_key(|n| n.id);
    nodes
}

fn actors(state: &State) -> Vec<ActorEntry> {
    let mut actors: Vec<ActorEntry> = state.gcs.actors().map(actor_entry).collect();
    actors.sort_by_key(|a| a.id);
    actors
}

/// The workers and drivers that may still own tasks and objects: those of
/// running jobs, except workers on nodes declared dead (they died with
/// their node, and asking them would only time out). By worker id.
fn live_workers(state: &State) -> Vec<WorkerEntry> {
    let gcs = &state.gcs;
    let mut workers: Vec<WorkerEntry> = gcs
        .workers()
        .filter(|row| gcs.job(row.info.job).is_some_and(|job| job.is_running()))
        .filter(|row| {
            row.info
                .node
                .is_none_or(|node| gcs.node(node).is_some_and(|n| n.is_alive()))
        })
        .map(|row| WorkerEntry {
            worker: row.id,
            job: row.info.job,
            node: row.info.node,
            address: row.info.address.clone(),
        })
        .collect();
    workers.sort_by_key(|w| w.worker);
    workers
}

fn register_job(
    state: &mut State,
    request: RegisterJob,
    now: Duration,
) -> Result<JobRegistered, crate::GcsError> {
    let RegisterJob {
        driver,
        driver_address,
        binary_hash,
        fingerprint,
        config: _,
    } = request;
    let job = state.gcs.next_job_id();
    let info = JobInfo {
        id: job,
        driver,
        started_at: now,
    };
    state.gcs.add_job(info)?;
    let driver_info = WorkerInfo {
        job,
        node: None,
        address: driver_address,
    };
    let worker = state.gcs.register_worker(driver_info)?;
    state.job_binaries.insert(
        job,
        JobBinary {
            hash: binary_hash,
            fingerprint,
        },
    );
    let upload = !state.binaries.contains_key(&binary_hash);
    tracing::info!(target: "ray::gcs", job = %job, worker = %worker, binary = %hex(&binary_hash), upload, "job.registered");
    Ok(JobRegistered {
        job,
        worker,
        upload,
    })
}

fn finish_job(state: &mut State, job: JobId, now: Duration) -> Result<(), crate::GcsError> {
    let killed = state.gcs.finish_job(job, now)?;
    for actor in killed {
        state.actor_homes.remove(&actor);
    }
    tracing::info!(target: "ray::gcs", job = %job, "job.finished");
    Ok(())
}

fn register_actor(
    state: &mut State,
    entry: ActorEntry,
    worker: WorkerId,
    address: String,
    max_restarts: u32,
) -> Message {
    let (restarting, reserved) = state.gcs.actor(entry.id).map_or((false, false), |row| {
        (
            matches!(row.state, ActorState::Restarting { .. }),
            row.state == ActorState::PendingCreation,
        )
    });
    if let (true, ActorStatus::Alive { node }) = (restarting || reserved, &entry.status) {
        // The next life of a restarted actor, or the first life of one
        // registered pending when it was created (its name held since):
        // same id, name and row.
        return match state
            .gcs
            .set_actor_state(entry.id, ActorState::Alive { node: *node })
        {
            Ok(()) => {
                state
                    .actor_homes
                    .insert(entry.id, ActorHome { worker, address });
                if restarting {
                    tracing::info!(target: "ray::gcs", actor = %entry.id, worker = %worker, "actor.restarted");
                } else {
                    tracing::debug!(target: "ray::gcs", actor = %entry.id, worker = %worker, "actor.registered");
                }
                Message::Ok
            }
            Err(e) if reserved => {
                // Its node is gone: dead on arrival, and its name is free.
                let cause = e.to_string();
                let _ = state.gcs.set_actor_state(
                    entry.id,
                    ActorState::Dead {
                        cause: cause.clone(),
                    },
                );
                Message::Error { reason: cause }
            }
            Err(e) => error(e),
        };
    }
    let node = match entry.status {
        ActorStatus::PendingCreation => None,
        ActorStatus::Alive { node } => Some(node),
        ActorStatus::Restarting { .. } | ActorStatus::Dead { .. } => {
            return Message::Error {
                reason: format!(
                    "actor {} can only be registered pending or alive, not {:?}",
                    entry.id, entry.status
                ),
            }
        }
    };
    let id = entry.id;
    let info = ActorInfo {
        id,
        class_name: entry.class_name,
        name: entry.name,
        namespace: entry.namespace,
        job: entry.job,
        detached: entry.detached,
        max_restarts,
    };
    if let Err(e) = state.gcs.register_actor(info) {
        return error(e);
    }
    let Some(node) = node else {
        // Registered pending, at its creation: its name is held from now
        // on; where it lives comes with its registration as alive.
        tracing::debug!(target: "ray::gcs", actor = %id, "actor.reserved");
        return Message::Ok;
    };
    if let Err(e) = state.gcs.set_actor_state(id, ActorState::Alive { node }) {
        // Its node is gone: the actor is dead on arrival and frees its name.
        let cause = e.to_string();
        let _ = state.gcs.set_actor_state(
            id,
            ActorState::Dead {
                cause: cause.clone(),
            },
        );
        return Message::Error { reason: cause };
    }
    state.actor_homes.insert(id, ActorHome { worker, address });
    tracing::debug!(target: "ray::gcs", actor = %id, worker = %worker, "actor.registered");
    Message::Ok
}

/// Where actor `id` lives, if it is registered and (when `live_only`) not
/// dead.
fn actor_location(state: &State, id: ray_proto::ActorId, live_only: bool) -> Option<Message> {
    let row = state.gcs.actor(id)?;
    if live_only && row.state.is_dead() {
        return None;
    }
    let home = state.actor_homes.get(&id)?;
    Some(Message::from(ActorLocation {
        id,
        class_name: row.info.class_name.clone(),
        worker: home.worker,
        address: home.address.clone(),
    }))
}

fn lookup_actor(state: &State, namespace: &str, name: &str) -> Message {
    let found = state
        .gcs
        .named_actor(namespace, name)
        .and_then(|id| actor_location(state, id, false));
    found.unwrap_or_else(|| Message::Error {
        reason: format!("no actor named {name:?} in namespace {namespace:?}"),
    })
}

fn locate_actor(state: &State, id: ray_proto::ActorId) -> Message {
    if let Some(ActorState::Dead { cause }) = state.gcs.actor(id).map(|row| &row.state) {
        return Message::Error {
            reason: format!("{id} {DEAD_MARK}{cause}"),
        };
    }
    actor_location(state, id, true).unwrap_or_else(|| Message::Error {
        reason: format!("{id} is not a live registered actor"),
    })
}

/// What a refused [`LocateActor`] says after the actor's id when the actor
/// is dead for good (not restarting, not yet registered): the cause follows.
pub const DEAD_MARK: &str = "is dead: ";

fn error(e: crate::GcsError) -> Message {
    Message::Error {
        reason: e.to_string(),
    }
}

#[cfg(test)]
mod tests;
