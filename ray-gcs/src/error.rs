//! The error type of ray-gcs.

use ray_proto::{ActorId, JobId, NodeId};
use thiserror::Error;

use crate::actors::ActorState;
use crate::storage::Table;

/// What went wrong in a GCS operation. Variants carry the ids involved.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum GcsError {
    /// No node with this id was ever registered.
    #[error("node {node} is not registered")]
    NodeNotFound {
        /// The unknown node.
        node: NodeId,
    },
    /// A node with this id is already in the node table (alive or dead); a
    /// restarted node must register under a fresh id.
    #[error("node {node} is already registered")]
    NodeExists {
        /// The node registered twice.
        node: NodeId,
    },
    /// The node was declared dead; it cannot heartbeat or host actors again.
    #[error("node {node} is dead: {cause}")]
    NodeDead {
        /// The dead node.
        node: NodeId,
        /// Why it was declared dead.
        cause: String,
    },
    /// No job with this id was ever added.
    #[error("job {job} is not in the job table")]
    JobNotFound {
        /// The unknown job.
        job: JobId,
    },
    /// A job with this id is already in the job table.
    #[error("job {job} already exists")]
    JobExists {
        /// The job added twice.
        job: JobId,
    },
    /// The job has finished; no new actors can be created for it.
    #[error("job {job} has finished")]
    JobFinished {
        /// The finished job.
        job: JobId,
    },
    /// No actor with this id was ever registered.
    #[error("actor {actor} is not registered")]
    ActorNotFound {
        /// The unknown actor.
        actor: ActorId,
    },
    /// An actor with this id is already registered.
    #[error("actor {actor} is already registered")]
    ActorExists {
        /// The actor registered twice.
        actor: ActorId,
    },
    /// A live actor already holds this name in this namespace.
    #[error("actor name {name:?} is taken in namespace {namespace:?} by {existing}")]
    NameTaken {
        /// The namespace of the name.
        namespace: String,
        /// The requested name.
        name: String,
        /// The live actor that holds it.
        existing: ActorId,
    },
    /// The actor's state cannot move from `from` to `to` (for example, out of
    /// `Dead`, which is final, or a restart attempt out of sequence).
    #[error("actor {actor} cannot go from {from:?} to {to:?}")]
    InvalidActorTransition {
        /// The actor.
        actor: ActorId,
        /// Its current state.
        from: ActorState,
        /// The rejected state.
        to: ActorState,
    },
    /// The actor has used all of its restarts.
    #[error("actor {actor} has used all {max_restarts} of its restarts")]
    RestartsExhausted {
        /// The actor.
        actor: ActorId,
        /// Its restart budget.
        max_restarts: u32,
    },
    /// A row read from storage could not be decoded; the storage is damaged or
    /// was written by an incompatible version.
    #[error("corrupt row in the {table} table: {reason}")]
    Corrupt {
        /// The table holding the row.
        table: Table,
        /// What was wrong with it.
        reason: String,
    },
}
