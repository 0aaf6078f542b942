//! Control messages between ray-rs processes.
//!
//! Every control message travels as an [`Envelope`]: a version number and a
//! [`Message`] body, archived with rkyv. The transport (in ray-core) frames
//! envelopes with a length prefix and validates every received archive with
//! bytecheck before it looks at it, so a malformed or hostile frame is an
//! error, never a panic.
//!
//! This module only defines the types; it knows nothing about sockets,
//! streams or async runtimes.

use std::fmt;

use rkyv::{Archive, Deserialize, Serialize};

pub use core::{
    ErrorKind, ObjectRow, TaskRow, WireArg, WireError, WireNodeUpdate, WireOutcome, WireStrategy,
    WorkItem, WorkResult,
};
pub use gcs::{
    ActorEntry, ActorStatus, JobEntry, Label, NodeEntry, ResourceAmount, WireChannel, WireEvent,
    WorkerEntry,
};
pub use message::{ArchivedMessage, Message, MessageResolver};

mod core;
mod gcs;

/// The largest job binary the GCS stores or serves: 2 GiB.
pub const MAX_BINARY_LEN: u64 = 2 << 30;

/// `labels` in wire form.
pub fn labels_to_wire<'a>(
    labels: impl IntoIterator<Item = (&'a String, &'a String)>,
) -> Vec<Label> {
    labels
        .into_iter()
        .map(|(k, v)| Label {
            key: k.clone(),
            value: v.clone(),
        })
        .collect()
}

impl Message {
    /// The variant's name (`GetNodes`), for errors that name what came back.
    pub fn kind(&self) -> String {
        let debug = format!("{self:?}");
        let end = debug.find([' ', '{', '(']).unwrap_or(debug.len());
        debug[..end].to_owned()
    }
}

/// The version of the control protocol this build speaks.
///
/// Bump it whenever [`Message`] (or anything it contains) changes shape:
/// peers with different versions refuse each other at the handshake.
pub const PROTOCOL_VERSION: u16 = 5;

/// One control message as it travels on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct Envelope {
    /// The [`PROTOCOL_VERSION`] of the sender.
    pub version: u16,
    /// The message itself.
    pub body: Message,
}

impl Envelope {
    /// `body` stamped with this build's [`PROTOCOL_VERSION`].
    pub const fn new(body: Message) -> Self {
        Self {
            version: PROTOCOL_VERSION,
            body,
        }
    }
}

impl From<Message> for Envelope {
    fn from(body: Message) -> Self {
        Self::new(body)
    }
}

/// [`Message`] lives in its own module only to scope one `allow`: rkyv's
/// derived `MessageResolver` has undocumented fields in its struct variants.
#[allow(missing_docs)]
mod message {
    use rkyv::{Archive, Deserialize, Serialize};

    use super::{
        ActorEntry, BuildFingerprint, JobEntry, Label, NodeEntry, ResourceAmount, Role, WireError,
        WireNodeUpdate, WireStrategy, WorkItem, WorkResult, WorkerEntry,
    };
    use crate::{ActorId, JobId, NodeId, ObjectId, PlacementGroupId, TaskId, WorkerId};

    /// The body of a control message.
    ///
    /// The cluster protocol adds its requests and replies here; every addition
    /// bumps [`PROTOCOL_VERSION`](super::PROTOCOL_VERSION).
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

        // GCS requests: each travels on its own request stream and gets one
        // reply there (see ray-core's `transport::rpc`).
        /// A node joins; the GCS picks its id and answers
        /// [`Message::NodeRegistered`].
        RegisterNode {
            /// Where the node's daemon can be reached (`host:port`).
            address: String,
            /// Its total resources.
            resources: Vec<ResourceAmount>,
            /// Its labels, for scheduling constraints.
            labels: Vec<Label>,
        },
        /// A node says it is alive; answered [`Message::Ok`], or
        /// [`Message::Error`] if the GCS already declared it dead.
        Heartbeat {
            /// The node heartbeating.
            node: NodeId,
            /// The version of its load report (grows with every change).
            version: u64,
            /// Resources in use on it now.
            used: Vec<ResourceAmount>,
        },
        /// Asks for the node table; answered [`Message::Nodes`].
        GetNodes,
        /// Asks for the job table; answered [`Message::Jobs`].
        GetJobs,
        /// Asks for the actor table; answered [`Message::Actors`].
        GetActors,
        /// Reads one internal KV entry; answered [`Message::KvValue`].
        KvGet {
            /// The key's namespace.
            namespace: String,
            /// The key.
            key: Vec<u8>,
        },
        /// Writes one internal KV entry; answered [`Message::KvPutDone`].
        KvPut {
            /// The key's namespace.
            namespace: String,
            /// The key.
            key: Vec<u8>,
            /// The value.
            value: Vec<u8>,
            /// Whether an existing value is replaced.
            overwrite: bool,
        },

        /// A driver starts a job running `binary_hash`, built as `fingerprint`.
        RegisterJob {
            driver: String,
            driver_address: String,
            binary_hash: [u8; 32],
            fingerprint: BuildFingerprint,
            /// The job records for insight: its workers record too and ship
            /// their records to the head.
            insight: bool,
        },
        /// The job's binary follows on this stream: `len` raw bytes.
        UploadBinary {
            hash: [u8; 32],
            len: u64,
        },
        /// Asks for a job binary; `BinaryFollows` and its bytes come back.
        FetchBinary {
            hash: [u8; 32],
        },
        /// The driver is done: its workers and non-detached actors end.
        FinishJob {
            job: JobId,
        },
        /// A worker process of `job` on `node` listens at `address`.
        RegisterWorker {
            job: JobId,
            node: NodeId,
            address: String,
        },
        /// Where a worker (or driver) listens.
        GetWorker {
            worker: WorkerId,
        },
        /// Asks for every worker and driver of a running job (the state
        /// API asks each of them what it owns); answered [`Message::Workers`].
        GetWorkers,
        /// A process of `job` ships insight records to the head's
        /// collector: `records` as `ray_insight::log::encode_records` wrote
        /// them, times relative to `epoch_unix_nanos`. Answered `Ok`.
        InsightBatch {
            job: JobId,
            /// The sending process (its span ids are unique only within it).
            worker: WorkerId,
            epoch_unix_nanos: u64,
            records: Vec<u8>,
        },
        /// Asks the head for one insight view of `job` (`None`: the latest
        /// job), as `rayrs insight export` names it (`view`, `format`), at
        /// `at_nanos` since the job started (replayed from the head's event
        /// log) or now, optionally filtered on a context label `k=v`.
        /// Answered [`Message::BinaryFollows`] and the text's bytes.
        InsightExport {
            job: Option<JobId>,
            view: String,
            format: String,
            at_nanos: Option<u64>,
            filter: Option<String>,
            /// The flame graph's metric (`self`, `running`, `waiting`;
            /// `None`: self time).
            metric: Option<String>,
        },

        // Node daemon requests.
        /// An owner asks for resources and a worker of its job to run work
        /// of one shape; `spilled_from` is set when another node forwards it.
        RequestLease {
            lease: TaskId,
            job: JobId,
            binary_hash: [u8; 32],
            fingerprint: BuildFingerprint,
            resources: Vec<ResourceAmount>,
            strategy: WireStrategy,
            spilled_from: Option<NodeId>,
        },
        /// The owner is done with a lease.
        ReturnLease {
            lease: TaskId,
        },
        /// Work under a lease waits on objects (`blocked`) or resumes.
        LeaseBlocked {
            lease: TaskId,
            blocked: bool,
        },
        /// The lease is held by a detached actor: it (and its worker)
        /// outlive the job.
        DetachLease {
            lease: TaskId,
        },
        /// Placement groups, phase two: reserve bundle `index` of `group`
        /// on this node (answered `Ok`, or `Error` if it does not fit now).
        PrepareBundle {
            group: PlacementGroupId,
            index: u32,
            resources: Vec<ResourceAmount>,
        },
        /// Phase three: the prepared bundle becomes usable.
        CommitBundle {
            group: PlacementGroupId,
            index: u32,
        },
        /// Gives a prepared or committed bundle back (abort or removal).
        ReleaseBundle {
            group: PlacementGroupId,
            index: u32,
        },
        /// Tells a node where bundle `index` of `group` is, so work into
        /// the group submitted there finds it.
        BundlePlaced {
            group: PlacementGroupId,
            index: u32,
            node: NodeId,
            resources: Vec<ResourceAmount>,
        },
        /// The group is removed: forget it, fail work waiting for it.
        RemoveGroup {
            group: PlacementGroupId,
        },
        /// A worker process started by a node daemon reports in.
        WorkerReady {
            job: JobId,
            worker: WorkerId,
            address: String,
            fingerprint: BuildFingerprint,
            pid: u32,
        },

        // Worker and owner requests.
        /// Work pushed on an owner's work stream.
        WorkBatch {
            items: Vec<WorkItem>,
        },
        /// Results sent back on the work stream.
        WorkDone {
            results: Vec<WorkResult>,
        },
        /// Asks the process holding an object for its bytes; `take` lets it
        /// drop its copy once sent (a worker handing a result to its owner).
        GetObject {
            id: ObjectId,
            take: bool,
        },
        /// An owner freed these objects, which the receiver fetched from it:
        /// the receiver drops the copies it kept for later borrowers.
        /// Answered [`Message::Ok`].
        ObjectsFreed {
            ids: Vec<ObjectId>,
        },
        /// Asks a driver or worker for the tasks it owns that have not
        /// finished (the state API); answered [`Message::Tasks`].
        ListTasks,
        /// Asks a driver or worker for the objects it owns; answered
        /// [`Message::Objects`].
        ListObjects,
        /// Registers a live actor with the GCS (for `get_actor` by name).
        RegisterActor {
            entry: ActorEntry,
            worker: WorkerId,
            address: String,
        },
        /// Subscribes this connection to changes of the GCS tables on
        /// `channels`; answered [`Message::Subscribed`].
        Subscribe {
            channels: Vec<super::WireChannel>,
        },
        /// The subscription's events since the last poll; with none, waits
        /// up to `wait_ms` for one. Answered [`Message::Events`].
        PollEvents {
            sub: u64,
            wait_ms: u32,
        },
        /// Ends a subscription.
        Unsubscribe {
            sub: u64,
        },
        Subscribed {
            sub: u64,
        },
        /// Events in order; `dropped` counts those lost to the bounded
        /// queue since the subscription began (the subscriber then re-reads
        /// the tables).
        Events {
            events: Vec<super::WireEvent>,
            dropped: u64,
        },
        /// Where a live actor is, by id (a handle decoded in another process).
        LocateActor {
            id: ActorId,
        },
        /// Looks up a live named actor.
        LookupActor {
            namespace: String,
            name: String,
        },

        // GCS replies.
        JobRegistered {
            job: JobId,
            worker: WorkerId,
            upload: bool,
        },
        /// `len` raw bytes follow on this stream.
        BinaryFollows {
            len: u64,
        },
        WorkerRegistered {
            worker: WorkerId,
            /// Its job records for insight (see `RegisterJob::insight`).
            insight: bool,
        },
        WorkerInfo {
            address: Option<String>,
        },
        /// The answer to [`Message::GetWorkers`].
        Workers {
            /// Every worker and driver of a running job, by id.
            workers: Vec<WorkerEntry>,
        },
        ActorLocation {
            id: ActorId,
            class_name: String,
            worker: WorkerId,
            address: String,
        },

        // Node daemon replies.
        LeaseGranted {
            lease: TaskId,
            node: NodeId,
            worker: WorkerId,
            address: String,
        },
        /// A spilled lease did not fit; the target's load is attached.
        LeaseRefused {
            update: WireNodeUpdate,
        },
        LeaseInfeasible {
            reason: String,
        },

        // State API replies.
        Tasks {
            tasks: Vec<super::TaskRow>,
        },
        Objects {
            objects: Vec<super::ObjectRow>,
        },

        // Object replies.
        /// `len` raw bytes of the object follow on this stream.
        ObjectFollows {
            len: u64,
        },
        ObjectFailed {
            error: WireError,
        },

        // GCS replies.
        /// A request succeeded and has nothing to say.
        Ok,
        /// A request failed; `reason` says why, for a human.
        Error {
            /// What went wrong, with the ids involved.
            reason: String,
        },
        /// The answer to [`Message::RegisterNode`].
        NodeRegistered {
            /// The id the GCS gave the node.
            node: NodeId,
            /// How often the node must heartbeat, in milliseconds.
            heartbeat_interval_ms: u64,
        },
        /// The node table.
        Nodes {
            /// Every node, alive or dead, by id.
            nodes: Vec<NodeEntry>,
        },
        /// The job table.
        Jobs {
            /// Every job, by id.
            jobs: Vec<JobEntry>,
        },
        /// The actor table.
        Actors {
            /// Every actor, by id.
            actors: Vec<ActorEntry>,
        },
        /// The answer to [`Message::KvGet`].
        KvValue {
            /// The value, if the key exists.
            value: Option<Vec<u8>>,
        },
        /// The answer to [`Message::KvPut`].
        KvPutDone {
            /// Whether the value was written (false: the key existed and
            /// `overwrite` was off).
            written: bool,
        },
    }
}

/// What kind of process is at one end of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Archive, Serialize, Deserialize)]
pub enum Role {
    /// The head's Global Control Store service.
    Gcs,
    /// A node daemon: scheduler, object store, worker pool of one host.
    Node,
    /// A worker process started by a node daemon.
    Worker,
    /// A driver: the user's program connected to the cluster.
    Driver,
    /// A command-line tool (`rayrs status`, `rayrs list`, …).
    Cli,
}

/// A content hash of the executable a process runs (for example SHA-256).
///
/// Workers run the job's own binary, so the two ends of a connection must be
/// the same build; the handshake compares fingerprints and refuses a mismatch.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Archive, Serialize, Deserialize)]
pub struct BuildFingerprint(pub [u8; 32]);

impl fmt::Debug for BuildFingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Eight bytes are enough for a human to tell two builds apart.
        for b in &self.0[..8] {
            write!(f, "{b:02x}")?;
        }
        f.write_str("…")
    }
}

impl fmt::Display for BuildFingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{NodeId, WorkerId};

    fn round_trip(env: &Envelope) -> Envelope {
        let bytes = rkyv::to_bytes::<rkyv::rancor::Error>(env).expect("serialize");
        rkyv::from_bytes::<Envelope, rkyv::rancor::Error>(&bytes).expect("deserialize")
    }

    #[test]
    fn every_message_round_trips_through_rkyv() {
        let messages = [
            Message::Hello {
                protocol: PROTOCOL_VERSION,
                build_fingerprint: BuildFingerprint([7; 32]),
                role: Role::Worker,
                node: Some(NodeId(3)),
                worker: Some(WorkerId(9)),
            },
            Message::HelloOk {
                role: Role::Gcs,
                node: None,
                worker: None,
            },
            Message::Refused {
                reason: "protocol 2, expected 1".into(),
            },
            Message::Ping { seq: u64::MAX },
            Message::Pong { seq: 0 },
            Message::RegisterNode {
                address: "127.0.0.1:7000".into(),
                resources: vec![ResourceAmount {
                    name: "CPU".into(),
                    raw: 40_000,
                }],
                labels: vec![Label {
                    key: "zone".into(),
                    value: "a".into(),
                }],
            },
            Message::Heartbeat {
                node: NodeId(4),
                version: 3,
                used: Vec::new(),
            },
            Message::GetNodes,
            Message::GetJobs,
            Message::GetActors,
            Message::KvGet {
                namespace: "fn".into(),
                key: b"k".to_vec(),
            },
            Message::KvPut {
                namespace: "fn".into(),
                key: b"k".to_vec(),
                value: vec![1, 2],
                overwrite: true,
            },
            Message::Ok,
            Message::Error {
                reason: "node-4 is dead".into(),
            },
            Message::NodeRegistered {
                node: NodeId(4),
                heartbeat_interval_ms: 2_000,
            },
            Message::Nodes {
                nodes: vec![NodeEntry {
                    id: NodeId(4),
                    address: "127.0.0.1:7000".into(),
                    resources: Vec::new(),
                    labels: Vec::new(),
                    alive: false,
                    death_cause: Some("missed heartbeats".into()),
                    used: Vec::new(),
                    version: 7,
                }],
            },
            Message::Jobs {
                jobs: vec![JobEntry {
                    id: crate::JobId(1),
                    driver: "main".into(),
                    running: true,
                }],
            },
            Message::Actors {
                actors: vec![ActorEntry {
                    id: crate::ActorId::new(WorkerId(1), 2),
                    class_name: "Counter".into(),
                    name: Some("c".into()),
                    namespace: "ns".into(),
                    job: crate::JobId(1),
                    detached: true,
                    status: ActorStatus::Alive { node: NodeId(4) },
                }],
            },
            Message::KvValue { value: None },
            Message::KvPutDone { written: true },
            Message::GetWorker {
                worker: WorkerId(3),
            },
            Message::WorkerInfo {
                address: Some("127.0.0.1:5000".into()),
            },
            Message::GetWorkers,
            Message::Workers {
                workers: vec![
                    WorkerEntry {
                        worker: WorkerId(1),
                        job: crate::JobId(1),
                        node: None,
                        address: "127.0.0.1:4000".into(),
                    },
                    WorkerEntry {
                        worker: WorkerId(2),
                        job: crate::JobId(1),
                        node: Some(NodeId(4)),
                        address: "[::1]:5000".into(),
                    },
                ],
            },
            Message::ListTasks,
            Message::ListObjects,
            Message::Tasks {
                tasks: vec![TaskRow {
                    task: crate::TaskId::new(WorkerId(2), 6),
                    name: "m::f".into(),
                    state: "RUNNING".into(),
                    node: Some(NodeId(4)),
                    resources: Vec::new(),
                }],
            },
            Message::Objects {
                objects: vec![ObjectRow {
                    object: crate::ObjectId::new(WorkerId(2), 7),
                    state: "STORED".into(),
                    bytes: Some(1 << 20),
                }],
            },
            Message::RequestLease {
                lease: crate::TaskId::new(WorkerId(2), 5),
                job: crate::JobId(1),
                binary_hash: [3; 32],
                fingerprint: BuildFingerprint([4; 32]),
                resources: vec![ResourceAmount {
                    name: "CPU".into(),
                    raw: 10_000,
                }],
                strategy: WireStrategy::NodeAffinity {
                    node: NodeId(2),
                    soft: true,
                },
                spilled_from: Some(NodeId(1)),
            },
            Message::WorkBatch {
                items: vec![
                    WorkItem::Task {
                        task: crate::TaskId::new(WorkerId(2), 6),
                        function: crate::FunctionId(99),
                        args: vec![
                            WireArg::Value(vec![1, 2, 3]),
                            WireArg::Ref {
                                id: crate::ObjectId::new(WorkerId(2), 1),
                                owner: "127.0.0.1:9".into(),
                            },
                        ],
                        lease: crate::TaskId::new(WorkerId(2), 5),
                        resources: Vec::new(),
                        attempt: 0,
                        max_retries: 3,
                        retry_exceptions: true,
                        parent: None,
                    },
                    WorkItem::KillActor {
                        actor: crate::ActorId::new(WorkerId(2), 8),
                    },
                ],
            },
            Message::WorkDone {
                results: vec![
                    WorkResult {
                        task: crate::TaskId::new(WorkerId(2), 6),
                        outcome: WireOutcome::Stored { len: 1 << 30 },
                    },
                    WorkResult {
                        task: crate::TaskId::new(WorkerId(2), 7),
                        outcome: WireOutcome::Failed(WireError {
                            kind: ErrorKind::TaskPanicked,
                            task: Some(crate::TaskId::new(WorkerId(2), 7)),
                            actor: None,
                            object: None,
                            name: "m::f".into(),
                            message: "boom".into(),
                            type_name: String::new(),
                            payload: Vec::new(),
                        }),
                    },
                ],
            },
            Message::LeaseRefused {
                update: WireNodeUpdate {
                    node: NodeId(3),
                    version: 9,
                    used: Vec::new(),
                },
            },
        ];
        for body in messages {
            let env = Envelope::new(body);
            assert_eq!(round_trip(&env), env);
        }
    }

    #[test]
    fn fingerprint_prints_a_short_hex_prefix() {
        let mut bytes = [0u8; 32];
        bytes[0] = 0xab;
        bytes[7] = 0x01;
        assert_eq!(BuildFingerprint(bytes).to_string(), "ab00000000000001…");
    }
}
