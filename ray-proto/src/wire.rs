//! Control messages between ray-rs processes.
//!
//! Every control message travels as an [`Envelope`]: a version number and a
//! [`Message`] body, archived with rkyv. The transport (in ray-core) frames
//! envelopes with a length prefix and validates every received archive with
//! bytecheck before it looks at it, so a malformed or hostile frame is an
//! error, never a panic.
//!
//! [`Message`] holds the connection's own messages (handshake, ping) and
//! the generic replies [`Message::Ok`] and [`Message::Error`]; everything
//! else belongs to one service, in one enum per service and direction:
//! the GCS ([`GcsRequest`], [`GcsReply`]), node daemons ([`NodeRequest`],
//! [`NodeReply`]) and drivers and workers ([`WorkerRequest`],
//! [`WorkerReply`]). Each request is a struct of its own, and [`Call`] ties
//! it to the type of its reply, so clients get typed answers and servers
//! match only their own service's requests.
//!
//! This module only defines the types; it knows nothing about sockets,
//! streams or async runtimes.

use std::fmt;

use rkyv::{Archive, Deserialize, Serialize};

pub use call::{Call, Done, FromReply};
pub use core::{
    ErrorKind, ObjectRow, TaskRow, WireArg, WireError, WireNodeUpdate, WireOutcome, WireRef,
    WireStrategy, WorkItem, WorkResult,
};
pub use gcs::{
    ActorEntry, ActorStatus, JobBuild, JobEntry, Label, NodeEntry, ResourceAmount, WireChannel,
    WireEvent, WorkerEntry,
};
pub use gcs_service::{
    ActorDead, ActorFailed, ActorLocation, ActorNow, Actors, BinaryFollows, Events, FetchBinary,
    FinishJob, GcsReply, GcsRequest, GetActors, GetJobs, GetNodes, GetWorker, GetWorkers,
    Heartbeat, InsightBatch, InsightExport, JobConfig, JobRegistered, Jobs, KvGet, KvPut,
    KvPutDone, KvValue, LocateActor, LookupActor, NodeRegistered, Nodes, PollEvents, RegisterActor,
    RegisterJob, RegisterNode, RegisterWorker, Subscribe, Subscribed, Unsubscribe, UploadBinary,
    WorkerInfo, WorkerRegistered, Workers,
};
pub use message::{ArchivedMessage, Message, MessageResolver};
pub use node_service::{
    ArgBytes, BundlePlaced, CommitBundle, DetachLease, LeaseBlocked, LeaseGranted, LeaseInfeasible,
    LeaseRefused, NodeReply, NodeRequest, PrepareBundle, ReleaseBundle, RemoveGroup, RequestLease,
    ReturnLease, WorkerReady,
};
pub use worker_service::{
    AddBorrowers, BorrowersAdded, GetObject, ListObjects, ListTasks, ObjectFailed, ObjectFollows,
    ObjectReply, Objects, ObjectsFreed, RefsRemoved, RemovedRef, Tasks, WorkBatch, WorkDone,
    WorkerDied, WorkerReply, WorkerRequest,
};

mod call;
mod core;
mod gcs;
mod gcs_service;
mod message;
mod node_service;
mod worker_service;

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

/// The version of the control protocol this build speaks.
///
/// Bump it whenever [`Message`] (or anything it contains) changes shape,
/// or what a payload in it means (11: shipped insight batches may hold the
/// runtime's compact record shapes): peers with different versions refuse
/// each other at the handshake.
pub const PROTOCOL_VERSION: u16 = 11;

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
    use std::collections::BTreeSet;

    use super::*;
    use crate::{ActorId, JobId, ObjectId, PlacementGroupId, TaskId};
    use crate::{NodeId, WorkerId};

    fn round_trip(env: &Envelope) -> Envelope {
        let bytes = rkyv::to_bytes::<rkyv::rancor::Error>(env).expect("serialize");
        rkyv::from_bytes::<Envelope, rkyv::rancor::Error>(&bytes).expect("deserialize")
    }

    fn cpu(raw: u64) -> Vec<ResourceAmount> {
        vec![ResourceAmount {
            name: "CPU".into(),
            raw,
        }]
    }

    fn wire_error() -> WireError {
        WireError {
            kind: ErrorKind::TaskPanicked,
            task: Some(TaskId::new(WorkerId(2), 7)),
            actor: None,
            object: None,
            name: "m::f".into(),
            message: "boom".into(),
            type_name: String::new(),
            payload: Vec::new(),
        }
    }

    /// One message of every kind, with fields that are not all defaults.
    fn every_message() -> Vec<Message> {
        let job_config = JobConfig {
            insight: true,
            namespace: "ns".into(),
            max_inline_bytes: 1 << 10,
            put_timeout_ms: 250,
        };
        let group = PlacementGroupId::new(WorkerId(2), 3);
        let lease = TaskId::new(WorkerId(2), 5);
        let actor = ActorEntry {
            id: ActorId::new(WorkerId(1), 2),
            class_name: "Counter".into(),
            name: Some("c".into()),
            namespace: "ns".into(),
            job: JobId(1),
            detached: true,
            status: ActorStatus::Alive { node: NodeId(4) },
        };
        let node = NodeEntry {
            id: NodeId(4),
            address: "127.0.0.1:7000".into(),
            resources: cpu(40_000),
            labels: Vec::new(),
            alive: false,
            death_cause: Some("missed heartbeats".into()),
            used: Vec::new(),
            version: 7,
        };
        let job = JobEntry {
            id: JobId(1),
            driver: "main".into(),
            running: true,
            build: Some(JobBuild {
                binary_hash: [5; 32],
                fingerprint: BuildFingerprint([6; 32]),
            }),
        };
        let location = ActorLocation {
            id: actor.id,
            class_name: "Counter".into(),
            worker: WorkerId(3),
            address: "127.0.0.1:5000".into(),
        };
        vec![
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
            Message::Ok,
            Message::Error {
                reason: "node-4 is dead".into(),
            },
            // GCS requests.
            RegisterNode {
                address: "127.0.0.1:7000".into(),
                resources: cpu(40_000),
                labels: vec![Label {
                    key: "zone".into(),
                    value: "a".into(),
                }],
            }
            .into(),
            Heartbeat {
                node: NodeId(4),
                version: 3,
                used: cpu(10_000),
            }
            .into(),
            GetNodes.into(),
            GetJobs.into(),
            GetActors.into(),
            KvGet {
                namespace: "fn".into(),
                key: b"k".to_vec(),
            }
            .into(),
            KvPut {
                namespace: "fn".into(),
                key: b"k".to_vec(),
                value: vec![1, 2],
                overwrite: true,
            }
            .into(),
            RegisterJob {
                driver: "main".into(),
                driver_address: "127.0.0.1:4000".into(),
                binary_hash: [3; 32],
                fingerprint: BuildFingerprint([4; 32]),
                config: job_config.clone(),
            }
            .into(),
            UploadBinary {
                hash: [3; 32],
                len: 1 << 20,
            }
            .into(),
            FetchBinary { hash: [3; 32] }.into(),
            FinishJob { job: JobId(1) }.into(),
            RegisterWorker {
                job: JobId(1),
                node: NodeId(4),
                address: "127.0.0.1:5000".into(),
            }
            .into(),
            GetWorker {
                worker: WorkerId(3),
            }
            .into(),
            GetWorkers.into(),
            InsightBatch {
                job: JobId(1),
                worker: WorkerId(3),
                epoch_unix_nanos: 1_700_000_000_000_000_000,
                records: vec![0, 1, 2],
            }
            .into(),
            InsightExport {
                job: Some(JobId(1)),
                view: "flame".into(),
                format: "svg".into(),
                at_nanos: Some(5),
                filter: Some("k=v".into()),
                metric: None,
                fold: Some("class".into()),
            }
            .into(),
            RegisterActor {
                entry: actor.clone(),
                worker: WorkerId(3),
                address: "127.0.0.1:5000".into(),
                max_restarts: u32::MAX,
            }
            .into(),
            ActorFailed {
                actor: actor.id,
                life: 1,
                cause: "its worker died".into(),
            }
            .into(),
            ActorDead {
                actor: actor.id,
                cause: "killed through a handle".into(),
            }
            .into(),
            Subscribe {
                channels: vec![WireChannel::Node, WireChannel::Actor, WireChannel::Job],
            }
            .into(),
            PollEvents {
                sub: 2,
                wait_ms: 500,
            }
            .into(),
            Unsubscribe { sub: 2 }.into(),
            LocateActor { id: actor.id }.into(),
            LookupActor {
                namespace: "ns".into(),
                name: "c".into(),
            }
            .into(),
            // GCS replies.
            NodeRegistered {
                node: NodeId(4),
                heartbeat_interval_ms: 2_000,
            }
            .into(),
            Nodes {
                nodes: vec![node.clone()],
            }
            .into(),
            Jobs {
                jobs: vec![job.clone()],
            }
            .into(),
            Actors {
                actors: vec![actor.clone()],
            }
            .into(),
            KvValue { value: None }.into(),
            KvPutDone { written: true }.into(),
            JobRegistered {
                job: JobId(1),
                worker: WorkerId(1),
                upload: true,
            }
            .into(),
            BinaryFollows { len: 1 << 30 }.into(),
            WorkerRegistered {
                worker: WorkerId(3),
                config: job_config.clone(),
            }
            .into(),
            WorkerInfo {
                address: Some("127.0.0.1:5000".into()),
            }
            .into(),
            Workers {
                workers: vec![
                    WorkerEntry {
                        worker: WorkerId(1),
                        job: JobId(1),
                        node: None,
                        address: "127.0.0.1:4000".into(),
                    },
                    WorkerEntry {
                        worker: WorkerId(2),
                        job: JobId(1),
                        node: Some(NodeId(4)),
                        address: "[::1]:5000".into(),
                    },
                ],
            }
            .into(),
            Subscribed { sub: 2 }.into(),
            Events {
                events: vec![
                    WireEvent::Node(node),
                    WireEvent::Actor(actor),
                    WireEvent::Job(job),
                ],
                dropped: 3,
            }
            .into(),
            location.into(),
            ActorNow {
                status: ActorStatus::Restarting { attempt: 2 },
            }
            .into(),
            // Node daemon requests.
            RequestLease {
                lease,
                job: JobId(1),
                binary_hash: [3; 32],
                fingerprint: BuildFingerprint([4; 32]),
                resources: cpu(10_000),
                strategy: WireStrategy::NodeAffinity {
                    node: NodeId(2),
                    soft: true,
                },
                spilled_from: Some(NodeId(1)),
                hard_labels: vec![Label {
                    key: "zone".into(),
                    value: "a".into(),
                }],
                soft_labels: Vec::new(),
                arg_bytes: vec![ArgBytes {
                    node: NodeId(2),
                    bytes: 1 << 20,
                }],
                owner: "127.0.0.1:6000".into(),
                isolated: true,
            }
            .into(),
            ReturnLease { lease }.into(),
            LeaseBlocked {
                lease,
                blocked: true,
            }
            .into(),
            DetachLease { lease }.into(),
            PrepareBundle {
                group,
                index: 1,
                resources: cpu(10_000),
            }
            .into(),
            CommitBundle { group, index: 1 }.into(),
            ReleaseBundle { group, index: 1 }.into(),
            BundlePlaced {
                group,
                index: 1,
                node: NodeId(2),
                resources: cpu(10_000),
            }
            .into(),
            RemoveGroup { group }.into(),
            WorkerReady {
                job: JobId(1),
                worker: WorkerId(3),
                address: "127.0.0.1:5000".into(),
                fingerprint: BuildFingerprint([4; 32]),
                pid: 4242,
                lease: Some(lease),
            }
            .into(),
            // Node daemon replies.
            LeaseGranted {
                lease,
                node: NodeId(2),
                worker: WorkerId(3),
                address: "127.0.0.1:5000".into(),
            }
            .into(),
            LeaseRefused {
                update: WireNodeUpdate {
                    node: NodeId(3),
                    version: 9,
                    used: Vec::new(),
                },
            }
            .into(),
            LeaseInfeasible {
                reason: "no node has 9 GPUs".into(),
            }
            .into(),
            // Worker requests.
            WorkBatch {
                items: vec![
                    WorkItem::Task {
                        task: TaskId::new(WorkerId(2), 6),
                        function: crate::FunctionId(99),
                        args: vec![
                            WireArg::Value(vec![1, 2, 3]),
                            WireArg::Nested {
                                bytes: vec![4, 5],
                                refs: vec![WireRef {
                                    id: ObjectId::new(WorkerId(3), 2),
                                    owner: "127.0.0.1:10".into(),
                                }],
                            },
                            WireArg::Ref {
                                id: ObjectId::new(WorkerId(2), 1),
                                owner: "127.0.0.1:9".into(),
                            },
                        ],
                        lease,
                        resources: Vec::new(),
                        attempt: 0,
                        max_retries: 3,
                        retry_exceptions: true,
                        retry_on: vec!["my::Error".into()],
                        parent: None,
                        parent_span: 3,
                    },
                    WorkItem::KillActor {
                        actor: ActorId::new(WorkerId(2), 8),
                    },
                ],
            }
            .into(),
            GetObject {
                id: ObjectId::new(WorkerId(2), 7),
                from: WorkerId(4),
                take: true,
            }
            .into(),
            AddBorrowers {
                borrower: WorkerId(4),
                ids: vec![ObjectId::new(WorkerId(2), 7)],
            }
            .into(),
            RefsRemoved {
                borrower: WorkerId(4),
                refs: vec![RemovedRef {
                    id: ObjectId::new(WorkerId(2), 7),
                    count: 3,
                }],
            }
            .into(),
            ObjectsFreed {
                ids: vec![ObjectId::new(WorkerId(2), 7)],
            }
            .into(),
            ListTasks.into(),
            ListObjects.into(),
            WorkerDied {
                worker: WorkerId(5),
                node: NodeId(2),
                pid: 4242,
                status: "signal: 9 (SIGKILL)".into(),
            }
            .into(),
            // Worker replies.
            WorkDone {
                results: vec![
                    WorkResult {
                        task: TaskId::new(WorkerId(2), 6),
                        outcome: WireOutcome::Stored { len: 1 << 30 },
                        refs: vec![WireRef {
                            id: ObjectId::new(WorkerId(5), 1),
                            owner: "127.0.0.1:11".into(),
                        }],
                    },
                    WorkResult {
                        task: TaskId::new(WorkerId(2), 7),
                        outcome: WireOutcome::Failed(wire_error()),
                        refs: Vec::new(),
                    },
                ],
            }
            .into(),
            ObjectFollows {
                len: 1 << 20,
                refs: Vec::new(),
            }
            .into(),
            BorrowersAdded {
                gone: vec![ObjectId::new(WorkerId(2), 7)],
            }
            .into(),
            ObjectFailed {
                error: wire_error(),
            }
            .into(),
            Tasks {
                tasks: vec![TaskRow {
                    task: TaskId::new(WorkerId(2), 6),
                    name: "m::f".into(),
                    state: "RUNNING".into(),
                    node: Some(NodeId(4)),
                    resources: Vec::new(),
                }],
            }
            .into(),
            Objects {
                objects: vec![ObjectRow {
                    object: ObjectId::new(WorkerId(2), 7),
                    state: "STORED".into(),
                    bytes: Some(1 << 20),
                }],
            }
            .into(),
        ]
    }

    #[test]
    fn every_message_round_trips_through_rkyv() {
        let messages = every_message();
        let connection = ["Hello", "HelloOk", "Refused", "Ping", "Pong", "Ok", "Error"];
        let every_kind: BTreeSet<&str> = connection
            .iter()
            .chain(GcsRequest::KINDS)
            .chain(GcsReply::KINDS)
            .chain(NodeRequest::KINDS)
            .chain(NodeReply::KINDS)
            .chain(WorkerRequest::KINDS)
            .chain(WorkerReply::KINDS)
            .copied()
            .collect();
        let covered: BTreeSet<&str> = messages.iter().map(Message::kind).collect();
        assert_eq!(covered, every_kind, "the test must cover every message");
        for body in messages {
            let env = Envelope::new(body);
            assert_eq!(round_trip(&env), env);
        }
    }

    #[test]
    fn kind_names_the_request_or_reply_not_its_service() {
        assert_eq!(Message::from(GetNodes).kind(), "GetNodes");
        assert_eq!(Message::from(Subscribed { sub: 1 }).kind(), "Subscribed");
        assert_eq!(
            Message::from(ReturnLease {
                lease: TaskId::new(WorkerId(1), 1)
            })
            .kind(),
            "ReturnLease"
        );
        assert_eq!(Message::from(ListTasks).kind(), "ListTasks");
        assert_eq!(Message::Error { reason: "x".into() }.kind(), "Error");
    }

    #[test]
    fn a_call_takes_its_own_reply_and_returns_any_other_message_as_err() {
        let nodes = Message::from(Nodes { nodes: Vec::new() });
        assert_eq!(
            GetNodes::reply(nodes.clone()),
            Ok(Nodes { nodes: Vec::new() })
        );
        // A reply of the wrong type, of the same service or another.
        let jobs = Message::from(Jobs { jobs: Vec::new() });
        assert_eq!(GetNodes::reply(jobs.clone()), Err(jobs));
        let tasks = Message::from(Tasks { tasks: Vec::new() });
        assert_eq!(GetNodes::reply(tasks.clone()), Err(tasks));
        // `Done` is `Ok`, and only `Ok`.
        assert_eq!(Heartbeat::reply(Message::Ok), Ok(Done));
        let refused = Message::Error {
            reason: "node-4 is dead".into(),
        };
        assert_eq!(Heartbeat::reply(refused.clone()), Err(refused));
        assert_eq!(Heartbeat::reply(nodes.clone()), Err(nodes));
        // Calls with several normal answers take each of them.
        let failed = ObjectFailed {
            error: wire_error(),
        };
        assert_eq!(
            GetObject::reply(failed.clone().into()),
            Ok(ObjectReply::Failed(failed))
        );
        let infeasible = LeaseInfeasible { reason: "x".into() };
        assert_eq!(
            RequestLease::reply(infeasible.clone().into()),
            Ok(NodeReply::LeaseInfeasible(infeasible))
        );
        assert_eq!(RequestLease::reply(Message::Ok), Err(Message::Ok));
    }

    #[test]
    fn only_announcing_replies_say_that_bytes_follow() {
        assert_eq!(Message::from(BinaryFollows { len: 9 }).follows(), Some(9));
        let follows = ObjectFollows {
            len: 0,
            refs: Vec::new(),
        };
        assert_eq!(Message::from(follows).follows(), Some(0));
        assert_eq!(
            Message::from(UploadBinary {
                hash: [0; 32],
                len: 9
            })
            .follows(),
            None
        );
        assert_eq!(Message::Ok.follows(), None);
    }

    #[test]
    fn fingerprint_prints_a_short_hex_prefix() {
        let mut bytes = [0u8; 32];
        bytes[0] = 0xab;
        bytes[7] = 0x01;
        assert_eq!(BuildFingerprint(bytes).to_string(), "ab00000000000001…");
    }
}
