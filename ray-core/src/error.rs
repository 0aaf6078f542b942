//! The one error type of the user API.

use std::any::TypeId;
use std::fmt;
use std::sync::Arc;

use ray_proto::{ActorId, ObjectId, TaskId};
use ray_sched::ResourceSet;
use ray_store::{ObjectBuffer, StoreError};

use crate::object::Object;

/// Result of every fallible ray-rs call.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An `ObjectStoreFull`'s message: the store's own, under the prefix
/// `object store full: ` once (a full store's message has it already).
fn store_full_text(e: &StoreError) -> String {
    let text = e.to_string();
    if text.starts_with("object store full") {
        text
    } else {
        format!("object store full: {text}")
    }
}

/// `, node total …` for an infeasible request's message, or nothing when
/// no node's total is known (a node not in the cluster).
fn totals_of(total: &ResourceSet) -> String {
    if total.is_empty() {
        String::new()
    } else {
        format!(", node total {total}")
    }
}

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
    #[error(
        "{what} is infeasible: {reason} (request {request}{})",
        totals_of(total)
    )]
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
    /// The object store had no room for an object within the put timeout
    /// ([`StoreError::Full`]), or the object is larger than the whole store
    /// and never fits ([`StoreError::TooLarge`]).
    #[error("{}", store_full_text(.0))]
    ObjectStoreFull(#[source] StoreError),
    /// The object store already holds an object of this id
    /// ([`StoreError::AlreadyExists`]): objects are immutable and ids are
    /// never reused, so this is a bug in the runtime, not in the caller.
    #[error("cannot store object {object}: {source}")]
    ObjectExists {
        /// The object.
        object: ObjectId,
        /// What the store said.
        source: StoreError,
    },
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
    /// The actor's process died and the actor is being restarted
    /// (`max_restarts`); this call was in flight and is not re-sent (no
    /// `max_task_retries` left). Calls made from now on wait for the
    /// restarted actor.
    #[error("actor {actor} ({class}) is restarting: {cause}")]
    ActorUnavailable {
        /// The actor.
        actor: ActorId,
        /// Its class name.
        class: &'static str,
        /// What happened to its process.
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
    /// The process that owns the object (the one that `put` it or
    /// submitted the task making it) died or cannot be reached, so its
    /// value cannot be had: a borrowed ref outlives its owner. As in Ray,
    /// ownership does not move; keep the owner alive while others use
    /// what it owns (e.g. make objects in the driver or a long-lived
    /// actor).
    #[error("object {object} is lost with its owner {owner}: {cause}")]
    OwnerDied {
        /// The object.
        object: ObjectId,
        /// The worker (or driver) that owned it.
        owner: ray_proto::WorkerId,
        /// What was seen.
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
    /// The worker process running the work exited (a crash, an abort, an
    /// out-of-memory kill, `kill -9`) before the work finished, and the
    /// work's retries (`max_retries`) were used up. Its node saw the exit
    /// and told the owner at once.
    #[error("worker {worker} (pid {pid}) on node {node} died: {status}")]
    WorkerDied {
        /// The worker.
        worker: ray_proto::WorkerId,
        /// Its process id on its node.
        pid: u32,
        /// Its node (alive: only the process ended).
        node: ray_proto::NodeId,
        /// How it ended, as the operating system says: an exit code or a
        /// signal.
        status: String,
    },
    /// The cluster's control plane failed the request (the GCS or a node
    /// daemon is unreachable or refused it).
    ///
    /// `cause` is the whole message, the source's text included (it is what
    /// the error displays); `source` keeps the typed error behind it where
    /// there is one in this process: a [`TransportError`], a
    /// [`ClusterError`] from the GCS client, an [`std::io::Error`], an
    /// address that does not parse. A reason that came over the wire (a
    /// refusal, an error of a remote process) has no source, only its text.
    ///
    /// [`TransportError`]: ray_transport::TransportError
    /// [`ClusterError`]: crate::cluster::ClusterError
    #[error("cluster: {cause}")]
    Cluster {
        /// What went wrong, naming the process involved.
        cause: String,
        /// The typed error behind `cause`, if any
        /// ([`std::error::Error::source`] returns it).
        #[source]
        source: Option<SharedError>,
    },
    /// The runtime was shut down before the work finished.
    #[error("the ray-rs runtime is shut down")]
    ShutDown,
}

impl Error {
    /// [`Error::Cluster`] with no typed source: a reason that is only text.
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))] // used by the cluster code
    pub(crate) fn cluster(cause: impl Into<String>) -> Self {
        Error::Cluster {
            cause: cause.into(),
            source: None,
        }
    }

    /// [`Error::Cluster`] saying `cause` (the whole message) and keeping
    /// `source`, the error it comes from.
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))] // used by the cluster code
    pub(crate) fn cluster_from(
        cause: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Error::Cluster {
            cause: cause.into(),
            source: Some(SharedError::new(source)),
        }
    }

    /// [`Error::Cluster`] saying what `source` says, and keeping it.
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))] // used by the cluster code
    pub(crate) fn cluster_source(source: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self::cluster_from(source.to_string(), source)
    }
}

/// An error kept as the typed source of an [`Error`], shared by its clones
/// (most sources, `std::io::Error` among them, are not `Clone`).
///
/// It dereferences to the error itself, so [`std::error::Error::source`]
/// of an [`Error`] returns that error and `downcast_ref` finds its type:
///
/// ```
/// # use std::error::Error as _;
/// # let err = ray_core::Error::Cluster {
/// #     cause: "cannot read this executable: gone".into(),
/// #     source: Some(ray_core::SharedError::new(std::io::Error::other("gone"))),
/// # };
/// let io = err.source().and_then(|s| s.downcast_ref::<std::io::Error>());
/// assert!(io.is_some());
/// ```
// Not `std::error::Error` itself, on purpose: thiserror then reaches the
// error through `Deref`, and `source()` hands out the error, not this box.
#[derive(Clone)]
pub struct SharedError(Arc<dyn std::error::Error + Send + Sync + 'static>);

impl SharedError {
    /// Keeps `error`.
    pub fn new(error: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self(Arc::new(error))
    }
}

impl std::ops::Deref for SharedError {
    type Target = dyn std::error::Error + Send + Sync + 'static;

    fn deref(&self) -> &Self::Target {
        &*self.0
    }
}

impl fmt::Debug for SharedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for SharedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&*self.0, f)
    }
}

/// A user error value returned by a remote function as `Err(e)`.
///
/// Its message is `e`'s `Display`; [`UserError::downcast`] recovers `e` itself.
#[derive(Clone)]
pub struct UserError {
    type_name: &'static str,
    /// `e`'s type, when `e` was returned in this process; `None` when the
    /// error crossed the wire, where only its type name travels.
    type_id: Option<TypeId>,
    message: Arc<str>,
    payload: ObjectBuffer,
}

impl UserError {
    /// The error `E` a task of this process returned: `message` is its
    /// `Display`, `payload` its archive.
    pub(crate) fn of<E: Object>(message: String, payload: ObjectBuffer) -> Self {
        Self {
            type_name: std::any::type_name::<E>(),
            type_id: Some(TypeId::of::<E>()),
            message: message.into(),
            payload,
        }
    }

    /// An error that came from another process, known by its type name.
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))] // used by the cluster code
    pub(crate) fn from_wire(
        type_name: &'static str,
        message: String,
        payload: ObjectBuffer,
    ) -> Self {
        Self {
            type_name,
            type_id: None,
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
    ///
    /// An error returned in this process is an `E` when its [`TypeId`] is
    /// `E`'s. One that crossed the wire carries only its type name
    /// ([`std::any::type_name`]), so there it is an `E` when the names
    /// agree: every process of a job runs the same binary (the worker's
    /// build fingerprint is checked), where a name stands for one type.
    /// Either way the archive must then decode as an `E`.
    pub fn downcast<E: Object>(&self) -> Option<E> {
        let same = match self.type_id {
            Some(id) => id == TypeId::of::<E>(),
            None => std::any::type_name::<E>() == self.type_name,
        };
        if !same {
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

/// Each store error as what it is: no room is [`Error::ObjectStoreFull`]
/// (now or ever), an id stored twice is [`Error::ObjectExists`]; both keep
/// the store's error.
impl From<StoreError> for Error {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Full { .. } | StoreError::TooLarge { .. } => Error::ObjectStoreFull(e),
            StoreError::AlreadyExists { id } => Error::ObjectExists {
                object: id,
                source: e,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use ray_proto::WorkerId;

    use super::*;

    #[test]
    fn a_cluster_error_keeps_its_source_and_its_text() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        let err = Error::cluster_from(format!("cannot read this executable: {io}"), io);
        assert_eq!(
            err.to_string(),
            "cluster: cannot read this executable: no such file"
        );
        let source = err.source().expect("the I/O error is the source");
        let io = source.downcast_ref::<std::io::Error>().expect("typed");
        assert_eq!(io.kind(), std::io::ErrorKind::NotFound);
        // Clones share it.
        let copy = err.clone();
        assert!(copy.source().unwrap().is::<std::io::Error>());
        // A reason that is only text has none.
        assert!(Error::cluster("lease refused: no").source().is_none());
    }

    #[test]
    fn store_errors_map_to_what_they_are() {
        let id = ObjectId::new(WorkerId(1), 2);
        let full = StoreError::Full {
            id,
            requested: 10,
            used: 95,
            capacity: 100,
        };
        let err = Error::from(full.clone());
        assert!(
            matches!(&err, Error::ObjectStoreFull(e) if *e == full),
            "{err:?}"
        );
        let too_large = StoreError::TooLarge {
            id,
            size: 200,
            capacity: 100,
        };
        let err = Error::from(too_large.clone());
        assert!(
            matches!(&err, Error::ObjectStoreFull(e) if *e == too_large),
            "{err:?}"
        );
        assert!(err.to_string().starts_with("object store full: "), "{err}");
        assert!(err.source().unwrap().is::<StoreError>());
        let exists = StoreError::AlreadyExists { id };
        let err = Error::from(exists.clone());
        assert!(
            matches!(&err, Error::ObjectExists { object, .. } if *object == id),
            "{err:?}"
        );
        let source = err.source().and_then(|s| s.downcast_ref::<StoreError>());
        assert_eq!(source, Some(&exists));
    }

    fn user_error<E: Object + fmt::Display>(e: &E) -> UserError {
        let buf = crate::object::encode(e, "error").expect("encodes").buf;
        UserError::of::<E>(e.to_string(), buf)
    }

    #[test]
    fn downcast_in_process_tells_apart_two_types_of_one_name() {
        // Items of two blocks of one function: two types that
        // `std::any::type_name` names alike.
        let (first, first_name) = {
            #[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Debug, PartialEq)]
            struct Oops(u32);
            impl fmt::Display for Oops {
                fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    write!(f, "oops {}", self.0)
                }
            }
            let e = user_error(&Oops(7));
            assert_eq!(e.downcast::<Oops>(), Some(Oops(7)));
            (e, std::any::type_name::<Oops>())
        };
        {
            #[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Debug, PartialEq)]
            struct Oops(u32);
            assert_eq!(std::any::type_name::<Oops>(), first_name);
            assert_eq!(first.type_name(), first_name);
            // In process, the type decides, not the name.
            assert_eq!(first.downcast::<Oops>(), None);
            assert_eq!(first.downcast::<u32>(), None);
            // Over the wire only the name is known: it decides.
            let wired = UserError::from_wire(
                first.type_name(),
                first.message().to_owned(),
                first.payload().clone(),
            );
            assert_eq!(wired.downcast::<Oops>(), Some(Oops(7)));
            assert_eq!(wired.downcast::<u32>(), None);
        }
    }
}
