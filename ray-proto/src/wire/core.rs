//! Wire types of jobs, leases and work: what drivers, node daemons and
//! workers say to each other to run tasks, actors and objects.
//!
//! Values travel as the bytes of their rkyv archive (`Vec<u8>`); the
//! receiver copies them into aligned buffers before it reads them. Large
//! values and job binaries do not travel inside frames: a reply frame
//! announces their length and the raw bytes follow on the same stream.

// rkyv's derived resolvers have undocumented fields; the types themselves
// are documented.
#![allow(missing_docs)]

use rkyv::{Archive, Deserialize, Serialize};

use super::ResourceAmount;
use crate::{ActorId, FunctionId, NodeId, ObjectId, PlacementGroupId, TaskId};

/// Where a lease may be placed (ray-sched's `SchedulingStrategy`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Archive, Serialize, Deserialize)]
pub enum WireStrategy {
    /// Hybrid: local first, spill past the load threshold.
    Default,
    /// Least-loaded node first.
    Spread,
    /// On `node`; `soft` lets it go elsewhere when `node` cannot take it.
    NodeAffinity { node: NodeId, soft: bool },
    /// In a bundle of a placement group.
    PlacementGroup {
        group: PlacementGroupId,
        bundle: Option<u32>,
    },
    /// Where most bytes of the arguments are (`RequestLease::arg_bytes`).
    Locality,
}

/// A node's published load: ray-sched's `NodeUpdate`.
#[derive(Debug, Clone, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct WireNodeUpdate {
    pub node: NodeId,
    pub version: u64,
    pub used: Vec<ResourceAmount>,
}

/// A ref nested in a value that crosses a process boundary: the object
/// and its owner's address (`host:port`).
#[derive(Debug, Clone, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct WireRef {
    pub id: ObjectId,
    pub owner: String,
}

/// One argument of a task or actor call.
#[derive(Debug, Clone, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub enum WireArg {
    /// The argument's archive.
    Value(Vec<u8>),
    /// The archive of an argument with refs nested in it. The task's owner
    /// holds them until the result is back; a worker that keeps one past
    /// its task registers with the ref's owner first.
    Nested { bytes: Vec<u8>, refs: Vec<WireRef> },
    /// A reference, resolved by asking its owner at `owner` (`host:port`).
    Ref { id: ObjectId, owner: String },
}

/// Work an owner pushes to a worker on its work stream.
#[derive(Debug, Clone, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub enum WorkItem {
    /// Run a remote function under `lease`.
    Task {
        task: TaskId,
        function: FunctionId,
        args: Vec<WireArg>,
        lease: TaskId,
        /// What the task holds while it runs (the lease's shape).
        resources: Vec<ResourceAmount>,
        attempt: u32,
        /// How many times the worker re-runs it after a user error (see
        /// `retry_exceptions`).
        max_retries: u32,
        /// Whether a panic or an `Err` of the task is retried.
        retry_exceptions: bool,
        /// Else, the type names of the `Err`s retried.
        retry_on: Vec<String>,
        parent: Option<TaskId>,
        /// The caller's span it was submitted in (the caller process's
        /// insight id), or 0: the views put it under that span's frame.
        parent_span: u64,
    },
    /// Construct an actor that holds `lease` for its life. The result of
    /// the creation task (`actor`'s creation object) says whether it worked.
    CreateActor {
        actor: ActorId,
        class: FunctionId,
        args: Vec<WireArg>,
        lease: TaskId,
        /// What the actor holds for its life.
        resources: Vec<ResourceAmount>,
        max_concurrency: u32,
        /// It outlives its job: its worker and lease stay when the job ends.
        detached: bool,
        /// The task that created it (`None`: the driver), for insight.
        creator: Option<TaskId>,
    },
    /// Call a method of an actor living in this worker.
    ActorCall {
        task: TaskId,
        actor: ActorId,
        method: FunctionId,
        args: Vec<WireArg>,
        /// The task that made the call (`None`: the driver), for insight.
        parent: Option<TaskId>,
        /// The caller's span it was made in (the caller process's insight
        /// id), or 0, for insight.
        parent_span: u64,
        /// 0 for the call's first send; n for its n-th resend to a later
        /// life of the actor (`max_task_retries`), for insight.
        attempt: u32,
    },
    /// Stop an actor; its pending calls fail.
    KillActor { actor: ActorId },
}

impl WireArg {
    /// Bytes of value it carries inline (a reference carries none).
    pub fn inline_bytes(&self) -> usize {
        match self {
            WireArg::Value(bytes) | WireArg::Nested { bytes, .. } => bytes.len(),
            WireArg::Ref { .. } => 0,
        }
    }
}

impl WorkItem {
    /// Bytes of argument values it carries inline: what a work stream
    /// weighs to keep its frames small.
    pub fn inline_bytes(&self) -> usize {
        match self {
            WorkItem::Task { args, .. }
            | WorkItem::CreateActor { args, .. }
            | WorkItem::ActorCall { args, .. } => args.iter().map(WireArg::inline_bytes).sum(),
            WorkItem::KillActor { .. } => 0,
        }
    }
}

/// Which [`WireError`] it is, so the receiver rebuilds the typed error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub enum ErrorKind {
    TaskPanicked,
    TaskFailed,
    ActorDied,
    ObjectLost,
    OwnerDied,
    Serialization,
    ObjectStoreFull,
    ShutDown,
    Other,
}

/// An error that crossed a process boundary.
#[derive(Debug, Clone, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct WireError {
    pub kind: ErrorKind,
    /// The task or actor call involved, if any.
    pub task: Option<TaskId>,
    /// The actor involved, if any.
    pub actor: Option<ActorId>,
    /// The object involved, if any.
    pub object: Option<ObjectId>,
    /// The function, method or class name.
    pub name: String,
    /// The error's text.
    pub message: String,
    /// For `TaskFailed`: the user error's type name and archive.
    pub type_name: String,
    pub payload: Vec<u8>,
}

/// How a piece of work ended.
#[derive(Debug, Clone, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub enum WireOutcome {
    /// The value's archive, small enough to travel inline.
    Value(Vec<u8>),
    /// A large value of `len` bytes, kept by the worker until the owner
    /// takes it ([`super::GetObject`] with `take`).
    Stored { len: u64 },
    /// It failed.
    Failed(WireError),
}

/// The end of one [`WorkItem`] (for `KillActor` none is sent).
#[derive(Debug, Clone, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct WorkResult {
    /// The task, actor call or actor creation task.
    pub task: TaskId,
    pub outcome: WireOutcome,
    /// Refs nested in the value, each already counted by its owner with
    /// the receiver as a borrower.
    pub refs: Vec<WireRef>,
}

impl WorkResult {
    /// Bytes it carries inline, about: its value, or its error's message
    /// and payload, and its nested refs.
    pub fn inline_bytes(&self) -> usize {
        let outcome = match &self.outcome {
            WireOutcome::Value(bytes) => bytes.len(),
            WireOutcome::Stored { .. } => 0,
            WireOutcome::Failed(e) => e.message.len() + e.payload.len(),
        };
        outcome + self.refs.len() * std::mem::size_of::<WireRef>()
    }
}

/// A task its owner has not seen finish (the state API's `list tasks`).
#[derive(Debug, Clone, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct TaskRow {
    pub task: TaskId,
    /// The function or `Class::method`.
    pub name: String,
    /// `QUEUED` (waiting for a lease) or `RUNNING` (pushed to a worker).
    pub state: String,
    /// Where it was pushed, when it was.
    pub node: Option<NodeId>,
    pub resources: Vec<ResourceAmount>,
}

/// An object its owner holds (the state API's `list objects`).
#[derive(Debug, Clone, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct ObjectRow {
    pub object: ObjectId,
    /// `PENDING`, `INLINE`, `STORED` or `FAILED`.
    pub state: String,
    /// The value's size in bytes, once known.
    pub bytes: Option<u64>,
}
