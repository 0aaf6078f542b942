//! The one error type of the user API.

use std::fmt;
use std::sync::Arc;

use ray_proto::{ActorId, ObjectId, TaskId};
use ray_sched::ResourceSet;
use ray_store::{ObjectBuffer, StoreError};

use crate::object::Object;

/// Result of every fallible ray-rs call.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in ray-rs, with the ids involved.
///
/// `Error` is `Clone` because one failed object may be read by many callers.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The remote function or actor method panicked; the runtime kept going.
    #[error("task {task} ({function}) panicked: {message}")]
    TaskPanicked {
        /// The task (or actor call) that panicked.
        task: TaskId,
        /// Fully qualified name of the function or method.
        function: &'static str,
        /// The panic payload, when it was a string.
        message: String,
    },
    /// The remote function returned `Err(e)`; `error` carries `e` typed.
    #[error("task {task} ({function}) failed: {error}")]
    TaskFailed {
        /// The task (or actor call) that failed.
        task: TaskId,
        /// Fully qualified name of the function or method.
        function: &'static str,
        /// The user's error value.
        error: UserError,
    },
    /// The request can never be satisfied by this node or cluster.
    #[error("{what} is infeasible: {reason} (request {request}, node total {total})")]
    Infeasible {
        /// What was being scheduled (a function or actor class name).
        what: String,
        /// Why it can never be placed.
        reason: String,
        /// The resources asked for.
        request: Box<ResourceSet>,
        /// The resources the node has in total.
        total: Box<ResourceSet>,
    },
    /// The object store had no room for an object within the put timeout.
    #[error("object store full: {0}")]
    ObjectStoreFull(StoreError),
    /// The actor is dead: its constructor failed, it was killed, or the runtime stopped.
    #[error("actor {actor} ({class}) died: {cause}")]
    ActorDied {
        /// The actor.
        actor: ActorId,
        /// Its class name.
        class: &'static str,
        /// Why it died.
        cause: String,
    },
    /// No live actor has this name in this namespace.
    #[error("no actor named {name:?} in namespace {namespace:?}")]
    ActorNotFound {
        /// The namespace searched.
        namespace: String,
        /// The name asked for.
        name: String,
    },
    /// The actor exists but is of another class than the handle type asked for.
    #[error("actor {name:?} is a {actual}, not a {expected}")]
    ActorClassMismatch {
        /// The name asked for.
        name: String,
        /// The class of the handle type.
        expected: &'static str,
        /// The class of the live actor.
        actual: &'static str,
    },
    /// An actor name is already used in the namespace.
    #[error("actor name {name:?} is taken in namespace {namespace:?} by {existing}")]
    NameTaken {
        /// The namespace.
        namespace: String,
        /// The name.
        name: String,
        /// The live actor holding it.
        existing: ActorId,
    },
    /// A value could not be encoded or decoded.
    #[error("cannot {op} {what}: {message}")]
    Serialization {
        /// `encode` or `decode`.
        op: &'static str,
        /// What was being (de)serialized.
        what: String,
        /// The codec's message.
        message: String,
    },
    /// An object is gone: its value was lost.
    #[error("object {object} was lost: {cause}")]
    ObjectLost {
        /// The object.
        object: ObjectId,
        /// Why.
        cause: String,
    },
    /// The placement group was removed (or could not be kept) before the
    /// work scheduled into it ran.
    #[error("placement group {group} is gone: {cause}")]
    PlacementGroupRemoved {
        /// The group.
        group: ray_proto::PlacementGroupId,
        /// Why it is gone.
        cause: String,
    },
    /// A `get` with a timeout did not see the object in time.
    #[error("timed out after {0:?} waiting for an object")]
    Timeout(std::time::Duration),
    /// An argument or option was invalid.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// This call needs to run inside a task or actor, or the runtime is gone.
    #[error("no ray-rs runtime here: {0}")]
    NoRuntime(&'static str),
    /// The node (or its worker process) running the work died or became
    /// unreachable before the work finished.
    #[error("node {node} died: {cause}")]
    NodeDied {
        /// The node.
        node: ray_proto::NodeId,
        /// What was seen: the connection loss, the GCS's verdict.
        cause: String,
    },
    /// The cluster's control plane failed the request (the GCS or a node
    /// daemon is unreachable or refused it).
    #[error("cluster: {cause}")]
    Cluster {
        /// What went wrong, naming the process involved.
        cause: String,
    },
    /// The runtime was shut down before the work finished.
    #[error("the ray-rs runtime is shut down")]
    ShutDown,
}

/// A user error value returned by a remote function as `Err(e)`.
///
/// Its message is `e`'s `Display`; [`UserError::downcast`] recovers `e` itself.
#[derive(Clone)]
pub struct UserError {
    type_name: &'static str,
    message: Arc<str>,
    payload: ObjectBuffer,
}

impl UserError {
    pub(crate) fn new(type_name: &'static str, message: String, payload: ObjectBuffer) -> Self {
        Self {
            type_name,
            message: message.into(),
            payload,
        }
    }

    /// Rust type name of the error value.
    pub fn type_name(&self) -> &'static str {
        self.type_name
    }

    /// The archive of the error value.
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))] // used by the cluster code
    pub(crate) fn payload(&self) -> &ObjectBuffer {
        &self.payload
    }

    /// The error's `Display` text.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The error value, if it is an `E`.
    pub fn downcast<E: Object>(&self) -> Option<E> {
        if std::any::type_name::<E>() != self.type_name {
            return None;
        }
        crate::object::decode_plain::<E>(self.payload.as_bytes()).ok()
    }
}

impl fmt::Debug for UserError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({})", self.type_name, self.message)
    }
}

impl fmt::Display for UserError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.message)
    }
}

impl From<StoreError> for Error {
    fn from(e: StoreError) -> Self {
        Error::ObjectStoreFull(e)
    }
}
