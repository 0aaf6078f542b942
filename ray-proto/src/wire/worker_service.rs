//! The service a driver or worker process serves to its peers: pushed work
//! on a work stream, objects for borrowers, and the state API
//! ([`WorkerRequest`], in [`Message::Worker`]; [`WorkerReply`], in
//! [`Message::WorkerReply`]).
//!
//! A stream's first frame says what it is. A [`WorkBatch`] opens a work
//! stream: more batches follow on it, and [`WorkDone`] frames come back as
//! results are ready. Every other request gets one reply.

use rkyv::{Archive, Deserialize, Serialize};

use super::call::{calls, service_enum};
use super::WireRef;
use super::{Done, FromReply, Message, ObjectRow, TaskRow, WireError, WorkItem, WorkResult};
use crate::{NodeId, ObjectId, WorkerId};

service_enum! {
    /// A request to a driver or worker process.
    pub enum WorkerRequest in Message::Worker {
        /// Work pushed on a work stream.
        WorkBatch,
        /// Asks for an object's bytes.
        GetObject,
        /// The owner freed objects the receiver fetched.
        ObjectsFreed,
        /// Asks for the tasks the process owns.
        ListTasks,
        /// Asks for the objects the process owns.
        ListObjects,
        /// A worker process the receiver pushed work to has exited.
        WorkerDied,
        /// Count a process as a borrower of objects the receiver owns.
        AddBorrowers,
        /// A borrower dropped its registrations on objects the receiver owns.
        RefsRemoved,
    }
}

service_enum! {
    replies
    /// A reply of a driver or worker process (besides the generic
    /// [`Message::Ok`] and [`Message::Error`]).
    pub enum WorkerReply in Message::WorkerReply {
        /// Results of pushed work.
        WorkDone,
        /// An object's bytes follow.
        ObjectFollows,
        /// An object cannot be had.
        ObjectFailed,
        /// The tasks the process owns.
        Tasks,
        /// The objects the process owns.
        Objects,
        /// The answer to [`AddBorrowers`].
        BorrowersAdded,
    }
}

// `WorkBatch` is not a call: its replies are the `WorkDone` frames of its
// work stream, as many as there are results.
calls! {
    GetObject => ObjectReply,
    ObjectsFreed => Done,
    ListTasks => Tasks,
    ListObjects => Objects,
    WorkerDied => Done,
    AddBorrowers => BorrowersAdded,
    RefsRemoved => Done,
}

/// Work pushed on an owner's work stream.
#[derive(Debug, Clone, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct WorkBatch {
    /// The work, in the order it is to start.
    pub items: Vec<WorkItem>,
}

/// Asks the process holding an object for its bytes; answered with an
/// [`ObjectReply`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct GetObject {
    /// The object.
    pub id: ObjectId,
    /// The process asking: refs nested in the object are lent to it.
    pub from: WorkerId,
    /// Whether the holder may drop its copy once sent (a worker handing a
    /// result to its owner).
    pub take: bool,
}

/// An owner freed these objects, which the receiver fetched from it: the
/// receiver drops the copies it kept for later borrowers. Answered
/// [`Message::Ok`].
#[derive(Debug, Clone, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct ObjectsFreed {
    /// The objects freed.
    pub ids: Vec<ObjectId>,
}

/// Asks a driver or worker for the tasks it owns that have not finished
/// (the state API); answered [`Tasks`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct ListTasks;

/// Asks a driver or worker for the objects it owns; answered [`Objects`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct ListObjects;

/// The node daemon that started a worker process saw it exit, and tells
/// each process that holds a lease on it at once (its work streams would
/// notice only when their connection times out). Answered [`Message::Ok`].
#[derive(Debug, Clone, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct WorkerDied {
    /// The worker.
    pub worker: WorkerId,
    /// Its node.
    pub node: NodeId,
    /// Its process id.
    pub pid: u32,
    /// How it ended, as the operating system says (an exit code or a
    /// signal).
    pub status: String,
}

/// Results sent back on a work stream.
#[derive(Debug, Clone, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct WorkDone {
    /// The outcomes, each naming its task.
    pub results: Vec<WorkResult>,
}

/// `len` raw bytes of the object follow on this stream.
#[derive(Debug, Clone, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct ObjectFollows {
    /// How many raw bytes follow.
    pub len: u64,
    /// Refs nested in the object, each already counted by its owner with
    /// the asking process as a borrower.
    pub refs: Vec<WireRef>,
}

/// Asks the owner of `ids` to count `borrower` once more on each (a value
/// carrying them is about to reach it); answered [`BorrowersAdded`].
#[derive(Debug, Clone, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct AddBorrowers {
    /// The process the value goes to.
    pub borrower: WorkerId,
    /// The objects it carries (an id twice is counted twice).
    pub ids: Vec<ObjectId>,
}

/// The answer to [`AddBorrowers`].
#[derive(Debug, Clone, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct BorrowersAdded {
    /// The objects that were already freed (not counted).
    pub gone: Vec<ObjectId>,
}

/// One borrowed object's registrations dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct RemovedRef {
    /// The object.
    pub id: ObjectId,
    /// How many registrations the borrower held.
    pub count: u32,
}

/// `borrower` holds no ref to these objects any more; answered
/// [`Message::Ok`].
#[derive(Debug, Clone, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct RefsRemoved {
    /// The process that held them.
    pub borrower: WorkerId,
    /// The objects and how many registrations each had.
    pub refs: Vec<RemovedRef>,
}

/// The object asked for cannot be had.
#[derive(Debug, Clone, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct ObjectFailed {
    /// Why: the error a `get` of it raises.
    pub error: WireError,
}

/// The answer to [`ListTasks`].
#[derive(Debug, Clone, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct Tasks {
    /// The unfinished tasks the process owns.
    pub tasks: Vec<TaskRow>,
}

/// The answer to [`ListObjects`].
#[derive(Debug, Clone, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct Objects {
    /// The objects the process owns.
    pub objects: Vec<ObjectRow>,
}

/// The answer to [`GetObject`]: the bytes follow, or why they cannot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ObjectReply {
    /// The object's bytes follow the reply.
    Follows(ObjectFollows),
    /// The object cannot be had.
    Failed(ObjectFailed),
}

impl From<ObjectReply> for Message {
    fn from(reply: ObjectReply) -> Self {
        match reply {
            ObjectReply::Follows(follows) => follows.into(),
            ObjectReply::Failed(failed) => failed.into(),
        }
    }
}

impl FromReply for ObjectReply {
    fn from_message(message: Message) -> Result<Self, Message> {
        match message {
            Message::WorkerReply(WorkerReply::ObjectFollows(follows)) => Ok(Self::Follows(follows)),
            Message::WorkerReply(WorkerReply::ObjectFailed(failed)) => Ok(Self::Failed(failed)),
            other => Err(other),
        }
    }
}
