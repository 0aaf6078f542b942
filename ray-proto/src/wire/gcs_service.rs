//! The GCS service: what drivers, workers, node daemons and tools ask the
//! head's Global Control Store ([`GcsRequest`], in [`Message::Gcs`]), and
//! what it answers ([`GcsReply`], in [`Message::GcsReply`]).
//!
//! Each request travels on its own request stream and gets one reply there
//! (see ray-transport's `Connection::request`); the table at the end of this
//! file says which ([`Call`](super::Call)). Refusals come back as
//! [`Message::Error`].

use rkyv::{Archive, Deserialize, Serialize};

use super::call::{calls, service_enum};
use super::{
    ActorEntry, ActorStatus, BuildFingerprint, Done, JobEntry, Label, Message, NodeEntry,
    ResourceAmount, WireChannel, WireEvent, WorkerEntry,
};
use crate::{ActorId, JobId, NodeId, WorkerId};

service_enum! {
    /// A request to the GCS.
    pub enum GcsRequest in Message::Gcs {
        /// A node joins.
        RegisterNode,
        /// A node says it is alive.
        Heartbeat,
        /// Asks for the node table.
        GetNodes,
        /// Asks for the job table.
        GetJobs,
        /// Asks for the actor table.
        GetActors,
        /// Reads one internal KV entry.
        KvGet,
        /// Writes one internal KV entry.
        KvPut,
        /// A driver starts a job.
        RegisterJob,
        /// A job's binary follows.
        UploadBinary,
        /// Asks for a job binary.
        FetchBinary,
        /// A driver is done.
        FinishJob,
        /// A worker process reports its address.
        RegisterWorker,
        /// Asks where a worker listens.
        GetWorker,
        /// Asks for the workers and drivers of running jobs.
        GetWorkers,
        /// Ships insight records to the head's collector.
        InsightBatch,
        /// Asks for an insight view.
        InsightExport,
        /// Registers an actor.
        RegisterActor,
        /// Subscribes to table changes.
        Subscribe,
        /// Polls a subscription.
        PollEvents,
        /// Ends a subscription.
        Unsubscribe,
        /// Asks where an actor is, by id.
        LocateActor,
        /// Asks where a named actor is.
        LookupActor,
        /// An actor's owner saw its worker die.
        ActorFailed,
        /// An actor was killed, or its owner let it go: dead for good.
        ActorDead,
    }
}

service_enum! {
    replies
    /// A reply of the GCS (besides the generic [`Message::Ok`] and
    /// [`Message::Error`]).
    pub enum GcsReply in Message::GcsReply {
        /// A node's id and heartbeat interval.
        NodeRegistered,
        /// The node table.
        Nodes,
        /// The job table.
        Jobs,
        /// The actor table.
        Actors,
        /// One internal KV value.
        KvValue,
        /// Whether a KV write happened.
        KvPutDone,
        /// A new job's ids.
        JobRegistered,
        /// Raw bytes follow.
        BinaryFollows,
        /// A new worker's id.
        WorkerRegistered,
        /// Where a worker listens.
        WorkerInfo,
        /// The workers and drivers of running jobs.
        Workers,
        /// A new subscription.
        Subscribed,
        /// A subscription's events.
        Events,
        /// Where an actor is.
        ActorLocation,
        /// An actor's state now.
        ActorNow,
    }
}

calls! {
    RegisterNode => NodeRegistered,
    Heartbeat => Done,
    GetNodes => Nodes,
    GetJobs => Jobs,
    GetActors => Actors,
    KvGet => KvValue,
    KvPut => KvPutDone,
    RegisterJob => JobRegistered,
    UploadBinary => Done,
    FetchBinary => BinaryFollows,
    FinishJob => Done,
    RegisterWorker => WorkerRegistered,
    GetWorker => WorkerInfo,
    GetWorkers => Workers,
    InsightBatch => Done,
    InsightExport => BinaryFollows,
    RegisterActor => Done,
    Subscribe => Subscribed,
    PollEvents => Events,
    Unsubscribe => Done,
    LocateActor => ActorLocation,
    LookupActor => ActorLocation,
    ActorFailed => ActorNow,
    ActorDead => Done,
}

/// A node joins; the GCS picks its id and answers [`NodeRegistered`].
#[derive(Debug, Clone, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct RegisterNode {
    /// Where the node's daemon can be reached (`host:port`).
    pub address: String,
    /// Its total resources.
    pub resources: Vec<ResourceAmount>,
    /// Its labels, for scheduling constraints.
    pub labels: Vec<Label>,
}

/// A node says it is alive; answered [`Message::Ok`], or [`Message::Error`]
/// if the GCS already declared it dead.
#[derive(Debug, Clone, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct Heartbeat {
    /// The node heartbeating.
    pub node: NodeId,
    /// The version of its load report (grows with every change).
    pub version: u64,
    /// Resources in use on it now.
    pub used: Vec<ResourceAmount>,
}

/// Asks for the node table; answered [`Nodes`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct GetNodes;

/// Asks for the job table; answered [`Jobs`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct GetJobs;

/// Asks for the actor table; answered [`Actors`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct GetActors;

/// Reads one internal KV entry; answered [`KvValue`].
#[derive(Debug, Clone, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct KvGet {
    /// The key's namespace.
    pub namespace: String,
    /// The key.
    pub key: Vec<u8>,
}

/// Writes one internal KV entry; answered [`KvPutDone`].
#[derive(Debug, Clone, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct KvPut {
    /// The key's namespace.
    pub namespace: String,
    /// The key.
    pub key: Vec<u8>,
    /// The value.
    pub value: Vec<u8>,
    /// Whether an existing value is replaced.
    pub overwrite: bool,
}

/// A driver starts a job running the binary `binary_hash`, built as
/// `fingerprint`; answered [`JobRegistered`].
#[derive(Debug, Clone, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct RegisterJob {
    /// The driver program's name, for humans.
    pub driver: String,
    /// Where the driver listens (`host:port`), for its workers and the
    /// state API.
    pub driver_address: String,
    /// SHA-256 of the executable the job's workers run.
    pub binary_hash: [u8; 32],
    /// The build fingerprint the job's processes present in handshakes.
    pub fingerprint: BuildFingerprint,
    /// What every process of the job runs with.
    pub config: JobConfig,
}

/// The settings of a job that every process of it shares: the driver's
/// `Config`, as its workers must follow it.
#[derive(Debug, Clone, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct JobConfig {
    /// The job records for insight: its workers record too and ship
    /// their records to the head.
    pub insight: bool,
    /// The namespace of actor names.
    pub namespace: String,
    /// Values up to this size stay in their owner's table instead of the
    /// object store.
    pub max_inline_bytes: u64,
    /// How long a `put` waits for store space, in milliseconds.
    pub put_timeout_ms: u64,
}

impl Default for JobConfig {
    /// The settings of `Config::default()`.
    fn default() -> Self {
        Self {
            insight: false,
            namespace: "default".into(),
            max_inline_bytes: 100 << 10,
            put_timeout_ms: 10_000,
        }
    }
}

/// The job's binary follows on this stream: `len` raw bytes. Answered
/// [`Message::Ok`] once stored (or at once if the GCS has it already), or
/// [`Message::Error`] if it is too large or does not hash to `hash`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct UploadBinary {
    /// The SHA-256 the uploader announces for the bytes.
    pub hash: [u8; 32],
    /// How many raw bytes follow the request.
    pub len: u64,
}

/// Asks for a job binary; [`BinaryFollows`] and its bytes come back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct FetchBinary {
    /// The SHA-256 of the binary wanted.
    pub hash: [u8; 32],
}

/// The driver is done: its workers and non-detached actors end. Answered
/// [`Message::Ok`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct FinishJob {
    /// The job that ends.
    pub job: JobId,
}

/// A worker process of `job` on `node` listens at `address`; answered
/// [`WorkerRegistered`].
#[derive(Debug, Clone, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct RegisterWorker {
    /// The job the worker runs.
    pub job: JobId,
    /// The node that started it.
    pub node: NodeId,
    /// Where it listens (`host:port`).
    pub address: String,
}

/// Asks where a worker (or driver) listens; answered [`WorkerInfo`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct GetWorker {
    /// The worker asked about.
    pub worker: WorkerId,
}

/// Asks for every worker and driver of a running job (the state API asks
/// each of them what it owns); answered [`Workers`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct GetWorkers;

/// A process of `job` ships insight records to the head's collector;
/// answered [`Message::Ok`].
#[derive(Debug, Clone, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct InsightBatch {
    /// The job recording.
    pub job: JobId,
    /// The sending process (its span ids are unique only within it).
    pub worker: WorkerId,
    /// The sender's recording epoch: record times are relative to it.
    pub epoch_unix_nanos: u64,
    /// The records, as `ray_insight::log::Chunk::encode` (or
    /// `encode_records`) wrote them.
    pub records: Vec<u8>,
}

/// Asks the head for one insight view, as `rayrs insight export` names it;
/// answered [`BinaryFollows`] and the text's bytes.
#[derive(Debug, Clone, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct InsightExport {
    /// The job (`None`: the latest job).
    pub job: Option<JobId>,
    /// The view's name.
    pub view: String,
    /// The output format's name.
    pub format: String,
    /// The time since the job started to show the view at, replayed from
    /// the head's event log (`None`: now).
    pub at_nanos: Option<u64>,
    /// A context label `k=v` the view is filtered on.
    pub filter: Option<String>,
    /// The flame graph's metric (`self`, `running`, `waiting`; `None`:
    /// self time).
    pub metric: Option<String>,
    /// How the flame graph names actor calls (`instance`, `class`; `None`:
    /// by instance).
    pub fold: Option<String>,
}

/// Registers a live (or pending) actor with the GCS, for `get_actor` by
/// name and for handles decoded elsewhere; answered [`Message::Ok`].
#[derive(Debug, Clone, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct RegisterActor {
    /// The actor's row. `Alive` for an actor the GCS has `Restarting`
    /// records where its new life runs.
    pub entry: ActorEntry,
    /// The worker hosting it.
    pub worker: WorkerId,
    /// Where that worker listens.
    pub address: String,
    /// How many times it may be restarted (`u32::MAX`: forever).
    pub max_restarts: u32,
}

/// An actor's owner saw the worker hosting it die: the GCS moves it to its
/// next restart if it has one left, else to dead with `cause`, and answers
/// [`ActorNow`].
#[derive(Debug, Clone, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct ActorFailed {
    /// The actor.
    pub actor: ActorId,
    /// The life that failed: 0 for the first, `n` after `n` restarts. A
    /// failure the GCS already saw (its node's death moved the actor on)
    /// is not counted twice.
    pub life: u32,
    /// What happened to its worker.
    pub cause: String,
}

/// An actor is dead for good, whatever restarts it had left: killed
/// through a handle, or let go by its owner (every handle gone), or its
/// creation failed. The GCS marks its row dead with `cause` (freeing its
/// name) unless it is dead already, and answers [`Message::Ok`].
#[derive(Debug, Clone, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct ActorDead {
    /// The actor.
    pub actor: ActorId,
    /// Why it is dead.
    pub cause: String,
}

/// The answer to [`ActorFailed`]: the actor's state now.
#[derive(Debug, Clone, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct ActorNow {
    /// Its state (`Restarting` or `Dead`).
    pub status: ActorStatus,
}

/// Subscribes this connection to changes of the GCS tables on `channels`;
/// answered [`Subscribed`].
#[derive(Debug, Clone, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct Subscribe {
    /// The tables followed.
    pub channels: Vec<WireChannel>,
}

/// The subscription's events since the last poll; with none, waits up to
/// `wait_ms` for one. Answered [`Events`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct PollEvents {
    /// The subscription, as [`Subscribed`] named it.
    pub sub: u64,
    /// How long to wait for a first event, in milliseconds.
    pub wait_ms: u32,
}

/// Ends a subscription; answered [`Message::Ok`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct Unsubscribe {
    /// The subscription.
    pub sub: u64,
}

/// Where a live actor is, by id (a handle decoded in another process);
/// answered [`ActorLocation`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct LocateActor {
    /// The actor.
    pub id: ActorId,
}

/// Looks up a live named actor; answered [`ActorLocation`].
#[derive(Debug, Clone, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct LookupActor {
    /// The name's namespace.
    pub namespace: String,
    /// The actor's name.
    pub name: String,
}

/// The answer to [`RegisterNode`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct NodeRegistered {
    /// The id the GCS gave the node.
    pub node: NodeId,
    /// How often the node must heartbeat, in milliseconds.
    pub heartbeat_interval_ms: u64,
}

/// The node table: the answer to [`GetNodes`].
#[derive(Debug, Clone, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct Nodes {
    /// Every node, alive or dead, by id.
    pub nodes: Vec<NodeEntry>,
}

/// The job table: the answer to [`GetJobs`].
#[derive(Debug, Clone, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct Jobs {
    /// Every job, by id.
    pub jobs: Vec<JobEntry>,
}

/// The actor table: the answer to [`GetActors`].
#[derive(Debug, Clone, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct Actors {
    /// Every actor, by id.
    pub actors: Vec<ActorEntry>,
}

/// The answer to [`KvGet`].
#[derive(Debug, Clone, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct KvValue {
    /// The value, if the key exists.
    pub value: Option<Vec<u8>>,
}

/// The answer to [`KvPut`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct KvPutDone {
    /// Whether the value was written (false: the key existed and
    /// `overwrite` was off).
    pub written: bool,
}

/// The answer to [`RegisterJob`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct JobRegistered {
    /// The new job's id.
    pub job: JobId,
    /// The driver's worker id.
    pub worker: WorkerId,
    /// Whether the GCS lacks the job's binary: the driver uploads it
    /// ([`UploadBinary`]) before any worker needs it.
    pub upload: bool,
}

/// `len` raw bytes follow on this stream: a job binary (the answer to
/// [`FetchBinary`]) or an insight export's text (to [`InsightExport`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct BinaryFollows {
    /// How many raw bytes follow.
    pub len: u64,
}

/// The answer to [`RegisterWorker`].
#[derive(Debug, Clone, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct WorkerRegistered {
    /// The id the GCS gave the worker.
    pub worker: WorkerId,
    /// Its job's settings (see [`RegisterJob::config`]).
    pub config: JobConfig,
}

/// The answer to [`GetWorker`].
#[derive(Debug, Clone, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct WorkerInfo {
    /// Where the worker listens; `None` if the GCS never registered it.
    pub address: Option<String>,
}

/// The answer to [`GetWorkers`].
#[derive(Debug, Clone, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct Workers {
    /// Every worker and driver of a running job, by id.
    pub workers: Vec<WorkerEntry>,
}

/// The answer to [`Subscribe`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct Subscribed {
    /// The new subscription, for [`PollEvents`].
    pub sub: u64,
}

/// The answer to [`PollEvents`]: events in order.
#[derive(Debug, Clone, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct Events {
    /// The changes since the last poll, oldest first.
    pub events: Vec<WireEvent>,
    /// How many events were lost to the bounded queue since the
    /// subscription began (the subscriber then re-reads the tables).
    pub dropped: u64,
}

/// Where a live actor is: the answer to [`LocateActor`] and
/// [`LookupActor`].
#[derive(Debug, Clone, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct ActorLocation {
    /// The actor.
    pub id: ActorId,
    /// Its type's name.
    pub class_name: String,
    /// The worker hosting it.
    pub worker: WorkerId,
    /// Where that worker listens.
    pub address: String,
}
