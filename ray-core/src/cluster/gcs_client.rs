//! A typed client of the GCS service.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use ray_proto::wire::{
    ActorEntry, BuildFingerprint, Envelope, JobEntry, Label, Message, NodeEntry, ResourceAmount,
    WireChannel, WireEvent, WorkerEntry,
};
use ray_proto::{ActorId, JobId, NodeId, WorkerId};
use rkyv::util::AlignedVec;

use super::{message_kind, ClusterError};
use ray_transport::{Connection, Endpoint, TransportError};

pub use ray_proto::wire::MAX_BINARY_LEN;

/// The largest insight export the head sends: 1 GiB.
const MAX_EXPORT_LEN: u64 = 1 << 30;

/// The slowest a binary may move before its transfer times out, in bytes
/// per second: 300 MB gets about 36 s on top of the request timeout.
const MIN_TRANSFER_RATE: u64 = 8 << 20;

/// The SHA-256 of `bytes`: the name of a job binary in the GCS.
pub fn binary_hash(bytes: &[u8]) -> [u8; 32] {
    let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
    let mut hash = [0; 32];
    hash.copy_from_slice(digest.as_ref());
    hash
}

/// Where a named actor lives, as [`GcsClient::lookup_actor`] finds it.
#[derive(Debug, Clone, PartialEq, Eq)]
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

/// A connection to the GCS with one method per request.
///
/// Every call is bounded by the client's timeout, so an unreachable or
/// stuck GCS gives [`ClusterError::Timeout`], never a hang. Cloning is cheap
/// and shares the connection.
#[derive(Debug, Clone)]
pub struct GcsClient {
    conn: Connection,
    addr: SocketAddr,
    timeout: Duration,
}

impl GcsClient {
    /// Connects `endpoint` to the GCS at `addr`; the handshake and every later
    /// request must each finish within `timeout`.
    ///
    /// # Errors
    ///
    /// [`ClusterError::Transport`] if the connection fails (TLS rejection,
    /// refused handshake, unreachable), [`ClusterError::Timeout`] if it does
    /// not finish in time.
    pub async fn connect(
        endpoint: &Endpoint,
        addr: SocketAddr,
        timeout: Duration,
    ) -> Result<Self, ClusterError> {
        let conn = tokio::time::timeout(timeout, endpoint.connect(addr))
            .await
            .map_err(|_| ClusterError::Timeout { addr, timeout })?
            .map_err(|source| ClusterError::Transport { addr, source })?;
        Ok(Self {
            conn,
            addr,
            timeout,
        })
    }

    /// The GCS address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The connection underneath.
    pub fn connection(&self) -> &Connection {
        &self.conn
    }

    /// Sends `request` and returns the reply, turning [`Message::Error`] into
    /// [`ClusterError::Refused`].
    ///
    /// # Errors
    ///
    /// [`ClusterError::Transport`], [`ClusterError::Timeout`] or
    /// [`ClusterError::Refused`].
    pub async fn call(&self, request: Message) -> Result<Message, ClusterError> {
        let request = Envelope::new(request);
        let reply = self
            .within(self.timeout, self.conn.request(&request))
            .await?;
        refused(reply)
    }

    /// `transfer` bounded by `timeout`, with its errors typed.
    async fn within<T>(
        &self,
        timeout: Duration,
        transfer: impl Future<Output = Result<T, TransportError>>,
    ) -> Result<T, ClusterError> {
        let addr = self.addr;
        tokio::time::timeout(timeout, transfer)
            .await
            .map_err(|_| ClusterError::Timeout { addr, timeout })?
            .map_err(|source| ClusterError::Transport { addr, source })
    }

    /// The time allowed for a request moving `len` raw bytes.
    fn transfer_timeout(&self, len: u64) -> Duration {
        self.timeout + Duration::from_secs(len / MIN_TRANSFER_RATE)
    }

    /// Registers a node; returns its id and how often it must heartbeat.
    ///
    /// # Errors
    ///
    /// As [`GcsClient::call`], or [`ClusterError::UnexpectedReply`].
    pub async fn register_node(
        &self,
        address: String,
        resources: Vec<ResourceAmount>,
        labels: Vec<Label>,
    ) -> Result<(NodeId, Duration), ClusterError> {
        match self
            .call(Message::RegisterNode {
                address,
                resources,
                labels,
            })
            .await?
        {
            Message::NodeRegistered {
                node,
                heartbeat_interval_ms,
            } => Ok((node, Duration::from_millis(heartbeat_interval_ms))),
            other => Err(unexpected("RegisterNode", &other)),
        }
    }

    /// Tells the GCS `node` is alive and what it has in use: `used`, in
    /// its report number `version` (which grows with every change; the GCS
    /// keeps the highest it has seen).
    ///
    /// # Errors
    ///
    /// [`ClusterError::Refused`] if the GCS declared the node dead or does
    /// not know it; otherwise as [`GcsClient::call`].
    pub async fn heartbeat(
        &self,
        node: NodeId,
        version: u64,
        used: Vec<ResourceAmount>,
    ) -> Result<(), ClusterError> {
        let request = Message::Heartbeat {
            node,
            version,
            used,
        };
        match self.call(request).await? {
            Message::Ok => Ok(()),
            other => Err(unexpected("Heartbeat", &other)),
        }
    }

    /// The node table, by id.
    ///
    /// # Errors
    ///
    /// As [`GcsClient::call`], or [`ClusterError::UnexpectedReply`].
    pub async fn nodes(&self) -> Result<Vec<NodeEntry>, ClusterError> {
        match self.call(Message::GetNodes).await? {
            Message::Nodes { nodes } => Ok(nodes),
            other => Err(unexpected("GetNodes", &other)),
        }
    }

    /// The job table, by id.
    ///
    /// # Errors
    ///
    /// As [`GcsClient::call`], or [`ClusterError::UnexpectedReply`].
    pub async fn jobs(&self) -> Result<Vec<JobEntry>, ClusterError> {
        match self.call(Message::GetJobs).await? {
            Message::Jobs { jobs } => Ok(jobs),
            other => Err(unexpected("GetJobs", &other)),
        }
    }

    /// The actor table, by id.
    ///
    /// # Errors
    ///
    /// As [`GcsClient::call`], or [`ClusterError::UnexpectedReply`].
    pub async fn actors(&self) -> Result<Vec<ActorEntry>, ClusterError> {
        match self.call(Message::GetActors).await? {
            Message::Actors { actors } => Ok(actors),
            other => Err(unexpected("GetActors", &other)),
        }
    }

    /// The value of `key` in `namespace` of the internal KV, if any.
    ///
    /// # Errors
    ///
    /// As [`GcsClient::call`], or [`ClusterError::UnexpectedReply`].
    pub async fn kv_get(
        &self,
        namespace: &str,
        key: &[u8],
    ) -> Result<Option<Vec<u8>>, ClusterError> {
        let request = Message::KvGet {
            namespace: namespace.to_owned(),
            key: key.to_vec(),
        };
        match self.call(request).await? {
            Message::KvValue { value } => Ok(value),
            other => Err(unexpected("KvGet", &other)),
        }
    }

    /// Writes `key` in `namespace`; returns whether it was written (false if
    /// it existed and `overwrite` is off).
    ///
    /// # Errors
    ///
    /// As [`GcsClient::call`], or [`ClusterError::UnexpectedReply`].
    pub async fn kv_put(
        &self,
        namespace: &str,
        key: &[u8],
        value: Vec<u8>,
        overwrite: bool,
    ) -> Result<bool, ClusterError> {
        let request = Message::KvPut {
            namespace: namespace.to_owned(),
            key: key.to_vec(),
            value,
            overwrite,
        };
        match self.call(request).await? {
            Message::KvPutDone { written } => Ok(written),
            other => Err(unexpected("KvPut", &other)),
        }
    }

    /// Starts a job for the driver `driver` (a program name, for humans)
    /// listening at `driver_address`, whose workers run the binary with
    /// SHA-256 `binary_hash` built as `fingerprint`.
    ///
    /// Returns the job's id, the driver's worker id, and whether the GCS
    /// lacks the binary (then [`GcsClient::upload_binary`] it before any
    /// worker needs it). The job finishes with [`GcsClient::finish_job`], or
    /// by itself when this client's connection closes.
    ///
    /// # Errors
    ///
    /// As [`GcsClient::call`], or [`ClusterError::UnexpectedReply`].
    pub async fn register_job(
        &self,
        driver: String,
        driver_address: String,
        binary_hash: [u8; 32],
        fingerprint: BuildFingerprint,
        insight: bool,
    ) -> Result<(JobId, WorkerId, bool), ClusterError> {
        let request = Message::RegisterJob {
            driver,
            driver_address,
            binary_hash,
            fingerprint,
            insight,
        };
        match self.call(request).await? {
            Message::JobRegistered {
                job,
                worker,
                upload,
            } => Ok((job, worker, upload)),
            other => Err(unexpected("RegisterJob", &other)),
        }
    }

    /// Uploads a job binary whose SHA-256 is `hash` (see [`binary_hash`]).
    ///
    /// The bytes travel raw after the request frame; the time allowed grows
    /// with their size. Uploading a binary the GCS already has is cheap: it
    /// answers before reading it.
    ///
    /// # Errors
    ///
    /// [`ClusterError::Refused`] if the content does not hash to `hash` or
    /// exceeds [`MAX_BINARY_LEN`]; otherwise as [`GcsClient::call`].
    pub async fn upload_binary(&self, hash: [u8; 32], bytes: &[u8]) -> Result<(), ClusterError> {
        let len = bytes.len() as u64;
        let request = Envelope::new(Message::UploadBinary { hash, len });
        let reply = self
            .within(
                self.transfer_timeout(len),
                self.conn.request_with_bytes(&request, bytes),
            )
            .await?;
        match refused(reply)? {
            Message::Ok => Ok(()),
            other => Err(unexpected("UploadBinary", &other)),
        }
    }

    /// Downloads the job binary whose SHA-256 is `hash`, into a 16-aligned
    /// buffer.
    ///
    /// The time allowed is that of the largest binary the GCS stores; a GCS
    /// that goes away still fails the call at once.
    ///
    /// # Errors
    ///
    /// [`ClusterError::Refused`] if the GCS does not have it; otherwise as
    /// [`GcsClient::call`], or [`ClusterError::UnexpectedReply`].
    pub async fn fetch_binary(&self, hash: [u8; 32]) -> Result<AlignedVec<16>, ClusterError> {
        let request = Envelope::new(Message::FetchBinary { hash });
        let (reply, bytes) = self
            .within(
                self.transfer_timeout(MAX_BINARY_LEN),
                self.conn.request_bulk(&request, MAX_BINARY_LEN),
            )
            .await?;
        match (refused(reply)?, bytes) {
            (Message::BinaryFollows { .. }, Some(bytes)) => Ok(bytes),
            (other, _) => Err(unexpected("FetchBinary", &other)),
        }
    }

    /// Ships one batch of insight records of `job` to the head's collector
    /// (`records` encoded by `ray_insight::log::encode_records`, times
    /// relative to `epoch_unix_nanos`).
    ///
    /// # Errors
    ///
    /// As [`GcsClient::call`], or [`ClusterError::UnexpectedReply`].
    pub async fn insight_batch(
        &self,
        job: JobId,
        worker: WorkerId,
        epoch_unix_nanos: u64,
        records: Vec<u8>,
    ) -> Result<(), ClusterError> {
        let request = Message::InsightBatch {
            job,
            worker,
            epoch_unix_nanos,
            records,
        };
        match self.call(request).await? {
            Message::Ok => Ok(()),
            other => Err(unexpected("InsightBatch", &other)),
        }
    }

    /// One insight view as text, built by the head (see
    /// [`Message::InsightExport`]).
    ///
    /// # Errors
    ///
    /// [`ClusterError::Refused`] with the head's reason (unknown job, view
    /// or format; no event log for `at_nanos`); otherwise as
    /// [`GcsClient::call`].
    pub async fn insight_export(
        &self,
        job: Option<JobId>,
        view: String,
        format: String,
        at_nanos: Option<u64>,
        filter: Option<String>,
        metric: Option<String>,
    ) -> Result<String, ClusterError> {
        let request = Envelope::new(Message::InsightExport {
            job,
            view,
            format,
            at_nanos,
            filter,
            metric,
        });
        let (reply, bytes) = self
            .within(
                self.transfer_timeout(MAX_EXPORT_LEN),
                self.conn.request_bulk(&request, MAX_EXPORT_LEN),
            )
            .await?;
        match (refused(reply)?, bytes) {
            (Message::BinaryFollows { .. }, Some(bytes)) => {
                Ok(String::from_utf8_lossy(&bytes).into_owned())
            }
            (other, _) => Err(unexpected("InsightExport", &other)),
        }
    }

    /// Marks `job` finished: its non-detached actors die, and node daemons
    /// see it not running in [`GcsClient::jobs`]. Finishing it again does
    /// nothing.
    ///
    /// # Errors
    ///
    /// [`ClusterError::Refused`] for an unknown job; otherwise as
    /// [`GcsClient::call`].
    pub async fn finish_job(&self, job: JobId) -> Result<(), ClusterError> {
        match self.call(Message::FinishJob { job }).await? {
            Message::Ok => Ok(()),
            other => Err(unexpected("FinishJob", &other)),
        }
    }

    /// Registers a worker process of `job` started on `node`, listening at
    /// `address`; returns its id, which no other worker or driver ever gets.
    ///
    /// # Errors
    ///
    /// [`ClusterError::Refused`] unless `job` is running; otherwise as
    /// [`GcsClient::call`].
    pub async fn register_worker(
        &self,
        job: JobId,
        node: NodeId,
        address: String,
    ) -> Result<(WorkerId, bool), ClusterError> {
        match self
            .call(Message::RegisterWorker { job, node, address })
            .await?
        {
            Message::WorkerRegistered { worker, insight } => Ok((worker, insight)),
            other => Err(unexpected("RegisterWorker", &other)),
        }
    }

    /// Where worker (or driver) `worker` listens; `None` if the GCS never
    /// registered it.
    ///
    /// # Errors
    ///
    /// As [`GcsClient::call`], or [`ClusterError::UnexpectedReply`].
    pub async fn get_worker(&self, worker: WorkerId) -> Result<Option<String>, ClusterError> {
        match self.call(Message::GetWorker { worker }).await? {
            Message::WorkerInfo { address } => Ok(address),
            other => Err(unexpected("GetWorker", &other)),
        }
    }

    /// Every worker and driver of a running job, by id, except workers on
    /// nodes the GCS declared dead: the processes that may own tasks and
    /// objects. A listed process may still have exited since it registered.
    ///
    /// # Errors
    ///
    /// As [`GcsClient::call`], or [`ClusterError::UnexpectedReply`].
    pub async fn workers(&self) -> Result<Vec<WorkerEntry>, ClusterError> {
        match self.call(Message::GetWorkers).await? {
            Message::Workers { workers } => Ok(workers),
            other => Err(unexpected("GetWorkers", &other)),
        }
    }

    /// Registers an actor, pending or alive, hosted by `worker` at
    /// `address`; a named one can then be found with
    /// [`GcsClient::lookup_actor`] until it or its job ends.
    ///
    /// # Errors
    ///
    /// [`ClusterError::Refused`] if the name is taken in its namespace (the
    /// reason names the holder), its job is not running, its id is taken,
    /// or its node is dead; otherwise as [`GcsClient::call`].
    pub async fn register_actor(
        &self,
        entry: ActorEntry,
        worker: WorkerId,
        address: String,
    ) -> Result<(), ClusterError> {
        let request = Message::RegisterActor {
            entry,
            worker,
            address,
        };
        match self.call(request).await? {
            Message::Ok => Ok(()),
            other => Err(unexpected("RegisterActor", &other)),
        }
    }

    /// The live actor named `name` in `namespace`, and where it is.
    ///
    /// # Errors
    ///
    /// [`ClusterError::Refused`] with "no actor named …" if there is none;
    /// otherwise as [`GcsClient::call`].
    /// Subscribes to changes of the GCS tables on `channels`; the
    /// subscription ends with this client's connection.
    ///
    /// # Errors
    ///
    /// What [`GcsClient::call`] returns.
    pub async fn subscribe(&self, channels: Vec<WireChannel>) -> Result<u64, ClusterError> {
        match self.call(Message::Subscribe { channels }).await? {
            Message::Subscribed { sub } => Ok(sub),
            other => Err(unexpected("Subscribe", &other)),
        }
    }

    /// The events of subscription `sub` since the last poll, waiting up to
    /// `wait` (keep it under this client's timeout) for the first; with
    /// the count of events lost to the bounded queue so far.
    ///
    /// # Errors
    ///
    /// [`ClusterError::Refused`] for an unknown subscription; otherwise
    /// what [`GcsClient::call`] returns.
    pub async fn poll_events(
        &self,
        sub: u64,
        wait: Duration,
    ) -> Result<(Vec<WireEvent>, u64), ClusterError> {
        let wait_ms = u32::try_from(wait.as_millis()).unwrap_or(u32::MAX);
        match self.call(Message::PollEvents { sub, wait_ms }).await? {
            Message::Events { events, dropped } => Ok((events, dropped)),
            other => Err(unexpected("PollEvents", &other)),
        }
    }

    /// Where the live actor `id` is.
    ///
    /// # Errors
    ///
    /// [`ClusterError::Refused`] if it is not registered or dead; otherwise
    /// what [`GcsClient::call`] returns.
    pub async fn locate_actor(&self, id: ActorId) -> Result<ActorLocation, ClusterError> {
        match self.call(Message::LocateActor { id }).await? {
            Message::ActorLocation {
                id,
                class_name,
                worker,
                address,
            } => Ok(ActorLocation {
                id,
                class_name,
                worker,
                address,
            }),
            other => Err(unexpected("LocateActor", &other)),
        }
    }

    /// Where the live actor named `name` in `namespace` is.
    pub async fn lookup_actor(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<ActorLocation, ClusterError> {
        let request = Message::LookupActor {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        };
        match self.call(request).await? {
            Message::ActorLocation {
                id,
                class_name,
                worker,
                address,
            } => Ok(ActorLocation {
                id,
                class_name,
                worker,
                address,
            }),
            other => Err(unexpected("LookupActor", &other)),
        }
    }
}

/// The reply's body, or [`ClusterError::Refused`] for [`Message::Error`].
fn refused(reply: Envelope) -> Result<Message, ClusterError> {
    match reply.body {
        Message::Error { reason } => Err(ClusterError::Refused { reason }),
        body => Ok(body),
    }
}

fn unexpected(request: &'static str, reply: &Message) -> ClusterError {
    ClusterError::UnexpectedReply {
        request,
        reply: message_kind(reply),
    }
}
