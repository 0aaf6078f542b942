//! The rows the GCS sends in its replies, in wire form.
//!
//! They mirror ray-gcs's table rows without depending on it: ray-proto sits
//! below every crate. Resource amounts travel as raw fixed-point numbers
//! (ray-sched's `Quantity::raw`, 1/10 000 of a unit) so nothing is rounded.

// rkyv's derived resolvers have undocumented fields; the types themselves
// are documented.
#![allow(missing_docs)]

use rkyv::{Archive, Deserialize, Serialize};

use crate::{ActorId, JobId, NodeId, WorkerId};

/// An amount of one named resource.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Archive, Serialize, Deserialize)]
pub struct ResourceAmount {
    /// The resource (`CPU`, `GPU`, `memory`, or a custom name).
    pub name: String,
    /// The amount in 1/10 000ths of a unit.
    pub raw: u64,
}

/// One `key=value` label of a node.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Archive, Serialize, Deserialize)]
pub struct Label {
    /// The label's name.
    pub key: String,
    /// Its value.
    pub value: String,
}

/// A row of the node table.
#[derive(Debug, Clone, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct NodeEntry {
    /// The node.
    pub id: NodeId,
    /// Where its daemon can be reached.
    pub address: String,
    /// Its total resources.
    pub resources: Vec<ResourceAmount>,
    /// Its labels.
    pub labels: Vec<Label>,
    /// Whether it is alive.
    pub alive: bool,
    /// Why it was declared dead, if it was.
    pub death_cause: Option<String>,
    /// Resources in use, as the node last reported them.
    pub used: Vec<ResourceAmount>,
    /// The version of that report (grows with every change on the node).
    pub version: u64,
}

/// A row of the job table.
#[derive(Debug, Clone, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct JobEntry {
    /// The job.
    pub id: JobId,
    /// The driver program that registered it.
    pub driver: String,
    /// Whether its driver is still connected.
    pub running: bool,
    /// The build its workers run, if the GCS knows it (jobs registered
    /// before a GCS restart have none): nodes start a running job's worker
    /// ahead of its first lease, as Ray prestarts workers for a driver.
    pub build: Option<JobBuild>,
}

/// The executable a job's workers run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct JobBuild {
    /// SHA-256 of the executable (fetched from the GCS by that hash).
    pub binary_hash: [u8; 32],
    /// The build fingerprint its processes present in handshakes.
    pub fingerprint: super::BuildFingerprint,
}

/// Where an actor is in its life.
#[derive(Debug, Clone, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub enum ActorStatus {
    /// Registered, not yet placed and started.
    PendingCreation,
    /// Running on `node`.
    Alive {
        /// The node hosting it.
        node: NodeId,
    },
    /// Being restarted; this is restart number `attempt`.
    Restarting {
        /// The restart number, from 1.
        attempt: u32,
    },
    /// Gone for good.
    Dead {
        /// Why it died.
        cause: String,
    },
}

/// What a GCS subscriber follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub enum WireChannel {
    Node,
    Actor,
    Job,
}

/// One change to a GCS table: the row as it is after the change.
#[derive(Debug, Clone, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub enum WireEvent {
    Node(NodeEntry),
    Actor(ActorEntry),
    Job(JobEntry),
}

/// A row of the actor table.
#[derive(Debug, Clone, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct ActorEntry {
    /// The actor.
    pub id: ActorId,
    /// Its type's name.
    pub class_name: String,
    /// Its name, if it has one.
    pub name: Option<String>,
    /// The namespace its name lives in.
    pub namespace: String,
    /// The job that created it.
    pub job: JobId,
    /// It outlives its job (until killed).
    pub detached: bool,
    /// Its state.
    pub status: ActorStatus,
}

/// A row of the worker table: a worker process or a driver, and where it
/// listens.
#[derive(Debug, Clone, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct WorkerEntry {
    /// The worker (or driver).
    pub worker: WorkerId,
    /// The job whose code it runs.
    pub job: JobId,
    /// The node that started it; `None` for a driver.
    pub node: Option<NodeId>,
    /// Where it accepts connections (`host:port`).
    pub address: String,
}
