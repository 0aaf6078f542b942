//! [`Message`]: the body of every control message.

// rkyv's derived `MessageResolver` has undocumented fields in its struct
// variants; the enum itself is documented.
#![allow(missing_docs)]

use rkyv::{Archive, Deserialize, Serialize};

use super::{
    BinaryFollows, BuildFingerprint, GcsReply, GcsRequest, NodeReply, NodeRequest, ObjectFollows,
    Role, WorkerReply, WorkerRequest,
};
use crate::{NodeId, WorkerId};

/// The body of a control message: the connection's own messages, the
/// generic replies, and one variant per service and direction.
///
/// A request's reply type is its [`Call`](super::Call). A service adds its
/// requests and replies to its own enum; every change of shape bumps
/// [`PROTOCOL_VERSION`](super::PROTOCOL_VERSION).
#[derive(Debug, Clone, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub enum Message {
    /// First message on a new connection, from the side that connected.
    Hello {
        /// The sender's [`PROTOCOL_VERSION`](super::PROTOCOL_VERSION).
        protocol: u16,
        /// The sender's build: peers must run the same build.
        build_fingerprint: BuildFingerprint,
        /// What kind of process the sender is.
        role: Role,
        /// The sender's node, when it belongs to one.
        node: Option<NodeId>,
        /// The sender's worker id, when it is a worker or driver.
        worker: Option<WorkerId>,
    },
    /// The accepting side's answer to an acceptable [`Message::Hello`],
    /// saying who it is.
    HelloOk {
        /// What kind of process the acceptor is.
        role: Role,
        /// The acceptor's node, when it belongs to one.
        node: Option<NodeId>,
        /// The acceptor's worker id, when it is a worker or driver.
        worker: Option<WorkerId>,
    },
    /// The accepting side refuses the connection; it closes right after.
    /// (A node daemon also refuses a [`WorkerReady`](super::WorkerReady)
    /// with it.)
    Refused {
        /// Why, for a human: which versions or fingerprints differed.
        reason: String,
    },
    /// A liveness probe; the peer answers [`Message::Pong`] with the same `seq`.
    Ping {
        /// Echoed in the answer.
        seq: u64,
    },
    /// The answer to [`Message::Ping`].
    Pong {
        /// The `seq` of the ping answered.
        seq: u64,
    },
    /// A request succeeded and has nothing to say (the reply of every call
    /// whose reply is [`Done`](super::Done)).
    Ok,
    /// A request failed; `reason` says why, for a human.
    Error {
        /// What went wrong, with the ids involved.
        reason: String,
    },
    /// A request to the GCS.
    Gcs(GcsRequest),
    /// A reply of the GCS.
    GcsReply(GcsReply),
    /// A request to a node daemon.
    Node(NodeRequest),
    /// A node daemon's answer to a lease request.
    NodeReply(NodeReply),
    /// A request to a driver or worker process.
    Worker(WorkerRequest),
    /// A reply of a driver or worker process.
    WorkerReply(WorkerReply),
}

impl Message {
    /// The name of the request or reply (`GetNodes`, not `Gcs`), for
    /// errors that name what came back.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Hello { .. } => "Hello",
            Self::HelloOk { .. } => "HelloOk",
            Self::Refused { .. } => "Refused",
            Self::Ping { .. } => "Ping",
            Self::Pong { .. } => "Pong",
            Self::Ok => "Ok",
            Self::Error { .. } => "Error",
            Self::Gcs(m) => m.kind(),
            Self::GcsReply(m) => m.kind(),
            Self::Node(m) => m.kind(),
            Self::NodeReply(m) => m.kind(),
            Self::Worker(m) => m.kind(),
            Self::WorkerReply(m) => m.kind(),
        }
    }

    /// How many raw bytes follow this message on its stream, when it
    /// announces some ([`BinaryFollows`], [`ObjectFollows`]).
    pub fn follows(&self) -> Option<u64> {
        match self {
            Self::GcsReply(GcsReply::BinaryFollows(BinaryFollows { len }))
            | Self::WorkerReply(WorkerReply::ObjectFollows(ObjectFollows { len, .. })) => {
                Some(*len)
            }
            _ => None,
        }
    }
}
