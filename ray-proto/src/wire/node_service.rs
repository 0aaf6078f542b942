//! The node daemon's service: what owners, workers and other daemons ask a
//! node ([`NodeRequest`], in [`Message::Node`]), and its answers to lease
//! requests ([`NodeReply`], in [`Message::NodeReply`]).
//!
//! Each request travels on its own request stream and gets one reply
//! there. Every request but [`RequestLease`] is answered [`Message::Ok`]
//! or [`Message::Error`] ([`WorkerReady`] may also get
//! [`Message::Refused`]).

// Every reply answers a lease request, and each variant is named after its
// struct: `NodeReply::LeaseGranted(LeaseGranted)`.
#![allow(clippy::enum_variant_names)]

use rkyv::{Archive, Deserialize, Serialize};

use super::call::{calls, service_enum};
use super::{BuildFingerprint, Done, Label, Message, ResourceAmount, WireNodeUpdate, WireStrategy};
use crate::{JobId, NodeId, PlacementGroupId, TaskId, WorkerId};

service_enum! {
    /// A request to a node daemon.
    pub enum NodeRequest in Message::Node {
        /// Asks for a lease.
        RequestLease,
        /// Gives a lease back.
        ReturnLease,
        /// Work under a lease waits or resumes.
        LeaseBlocked,
        /// A lease outlives its job.
        DetachLease,
        /// Reserves a placement-group bundle.
        PrepareBundle,
        /// Makes a prepared bundle usable.
        CommitBundle,
        /// Gives a bundle back.
        ReleaseBundle,
        /// Says where a bundle is.
        BundlePlaced,
        /// Forgets a placement group.
        RemoveGroup,
        /// A started worker reports in.
        WorkerReady,
    }
}

service_enum! {
    replies
    /// A node daemon's answer to [`RequestLease`] (its other requests are
    /// answered with the generic [`Message::Ok`] and [`Message::Error`]).
    pub enum NodeReply in Message::NodeReply {
        /// The lease is granted.
        LeaseGranted,
        /// A spilled lease did not fit.
        LeaseRefused,
        /// No node can ever run it.
        LeaseInfeasible,
    }
}

calls! {
    RequestLease => NodeReply,
    ReturnLease => Done,
    LeaseBlocked => Done,
    DetachLease => Done,
    PrepareBundle => Done,
    CommitBundle => Done,
    ReleaseBundle => Done,
    BundlePlaced => Done,
    RemoveGroup => Done,
    WorkerReady => Done,
}

/// An owner asks for resources and a worker of its job to run work of one
/// shape; answered with a [`NodeReply`], or [`Message::Error`].
#[derive(Debug, Clone, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct RequestLease {
    /// The lease's id, picked by the owner.
    pub lease: TaskId,
    /// The owner's job.
    pub job: JobId,
    /// SHA-256 of the job's binary, which the worker runs.
    pub binary_hash: [u8; 32],
    /// The job's build fingerprint, which its worker must present.
    pub fingerprint: BuildFingerprint,
    /// The resources held while the lease lasts.
    pub resources: Vec<ResourceAmount>,
    /// Where the lease may be placed.
    pub strategy: WireStrategy,
    /// Set when another node forwards (spills) the request: that node.
    pub spilled_from: Option<NodeId>,
    /// Node labels the lease's node must have.
    pub hard_labels: Vec<Label>,
    /// Node labels preferred.
    pub soft_labels: Vec<Label>,
    /// Bytes of the arguments of the work behind the request held by each
    /// node (for the locality strategy; empty otherwise).
    pub arg_bytes: Vec<ArgBytes>,
    /// Where the owner asking listens (`host:port`): the node that grants
    /// the lease tells it there if the lease's worker process exits.
    pub owner: String,
    /// The lease gets a worker process of its own (an isolated actor),
    /// started for it and stopped when it ends, instead of the job's
    /// shared worker on the node.
    pub isolated: bool,
}

/// Bytes of a request's arguments one node holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct ArgBytes {
    /// The node.
    pub node: NodeId,
    /// How many bytes of the arguments it holds.
    pub bytes: u64,
}

/// The owner is done with a lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct ReturnLease {
    /// The lease.
    pub lease: TaskId,
}

/// Work under a lease waits on objects (`blocked`) or resumes: its
/// resources are lent back to the node meanwhile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct LeaseBlocked {
    /// The lease.
    pub lease: TaskId,
    /// Whether its work now waits (true) or resumes (false).
    pub blocked: bool,
}

/// The lease is held by a detached actor: it (and its worker) outlive the
/// job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct DetachLease {
    /// The lease.
    pub lease: TaskId,
}

/// Placement groups, phase two: reserve bundle `index` of `group` on this
/// node (answered [`Message::Ok`], or [`Message::Error`] if it does not
/// fit now).
#[derive(Debug, Clone, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct PrepareBundle {
    /// The placement group.
    pub group: PlacementGroupId,
    /// The bundle's index in the group.
    pub index: u32,
    /// The bundle's resources.
    pub resources: Vec<ResourceAmount>,
}

/// Phase three: the prepared bundle becomes usable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct CommitBundle {
    /// The placement group.
    pub group: PlacementGroupId,
    /// The bundle's index in the group.
    pub index: u32,
}

/// Gives a prepared or committed bundle back (abort or removal).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct ReleaseBundle {
    /// The placement group.
    pub group: PlacementGroupId,
    /// The bundle's index in the group.
    pub index: u32,
}

/// Tells a node where bundle `index` of `group` is, so work into the group
/// submitted there finds it.
#[derive(Debug, Clone, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct BundlePlaced {
    /// The placement group.
    pub group: PlacementGroupId,
    /// The bundle's index in the group.
    pub index: u32,
    /// The node holding the bundle.
    pub node: NodeId,
    /// The bundle's resources.
    pub resources: Vec<ResourceAmount>,
}

/// The group is removed: forget it, fail work waiting for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct RemoveGroup {
    /// The placement group.
    pub group: PlacementGroupId,
}

/// A worker process started by a node daemon reports in; answered
/// [`Message::Ok`], or [`Message::Refused`] if the node did not start a
/// worker of `job` or it was built differently.
#[derive(Debug, Clone, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct WorkerReady {
    /// The job it runs.
    pub job: JobId,
    /// Its id, as the GCS registered it.
    pub worker: WorkerId,
    /// Where it listens (`host:port`).
    pub address: String,
    /// The build fingerprint of the binary it runs.
    pub fingerprint: BuildFingerprint,
    /// Its process id.
    pub pid: u32,
    /// The isolated lease it was started for; `None` for the job's shared
    /// worker.
    pub lease: Option<TaskId>,
}

/// The lease is granted: its work goes to `worker` at `address`.
#[derive(Debug, Clone, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct LeaseGranted {
    /// The lease.
    pub lease: TaskId,
    /// The node it was granted on (not the one asked, if it spilled).
    pub node: NodeId,
    /// The job's worker on that node.
    pub worker: WorkerId,
    /// Where that worker listens.
    pub address: String,
}

/// A spilled lease did not fit; the target's load is attached.
#[derive(Debug, Clone, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct LeaseRefused {
    /// The refusing node's current load.
    pub update: WireNodeUpdate,
}

/// No node of the cluster can run the lease.
#[derive(Debug, Clone, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct LeaseInfeasible {
    /// Why, for a human.
    pub reason: String,
}
