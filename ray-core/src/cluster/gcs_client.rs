//! A typed client of the GCS service.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use ray_proto::wire::{
    ActorDead, ActorEntry, ActorFailed, BinaryFollows, BuildFingerprint, Call, Done, Envelope,
    Events, FetchBinary, FinishJob, GetActors, GetJobs, GetNodes, GetWorker, GetWorkers, Heartbeat,
    InsightBatch, InsightExport, JobConfig, JobEntry, JobRegistered, KvGet, KvPut, Label,
    LocateActor, LookupActor, Message, NodeEntry, NodeRegistered, PollEvents, RegisterActor,
    RegisterJob, RegisterNode, RegisterWorker, ResourceAmount, Subscribe, UploadBinary,
    WireChannel, WireEvent, WorkerEntry, WorkerRegistered,
};
use ray_proto::{ActorId, JobId, NodeId, WorkerId};
use rkyv::util::AlignedVec;

use super::ClusterError;
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

/// Where a live actor is, as [`GcsClient::lookup_actor`] and
/// [`GcsClient::locate_actor`] find it.
pub use ray_proto::wire::ActorLocation;

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

    /// Sends `request` and returns its reply, typed by its [`Call`].
    ///
    /// # Errors
    ///
    /// [`ClusterError::Transport`], [`ClusterError::Timeout`],
    /// [`ClusterError::Refused`] for a [`Message::Error`], or
    /// [`ClusterError::UnexpectedReply`] for a reply of another kind.
    pub async fn call<C: Call>(&self, request: C) -> Result<C::Reply, ClusterError> {
        let request: Message = request.into();
        let kind = request.kind();
        let reply = self
            .within(self.timeout, self.conn.request(&Envelope::new(request)))
            .await?;
        reply_to::<C>(kind, reply.body)
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
    /// As [`GcsClient::call`].
    pub async fn register_node(
        &self,
        address: String,
        resources: Vec<ResourceAmount>,
        labels: Vec<Label>,
    ) -> Result<(NodeId, Duration), ClusterError> {
        let NodeRegistered {
            node,
            heartbeat_interval_ms,
        } = self
            .call(RegisterNode {
                address,
                resources,
                labels,
            })
            .await?;
        Ok((node, Duration::from_millis(heartbeat_interval_ms)))
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
        let Done = self
            .call(Heartbeat {
                node,
                version,
                used,
            })
            .await?;
        Ok(())
    }

    /// The node table, by id.
    ///
    /// # Errors
    ///
    /// As [`GcsClient::call`].
    pub async fn nodes(&self) -> Result<Vec<NodeEntry>, ClusterError> {
        Ok(self.call(GetNodes).await?.nodes)
    }

    /// The job table, by id.
    ///
    /// # Errors
    ///
    /// As [`GcsClient::call`].
    pub async fn jobs(&self) -> Result<Vec<JobEntry>, ClusterError> {
        Ok(self.call(GetJobs).await?.jobs)
    }

    /// The actor table, by id.
    ///
    /// # Errors
    ///
    /// As [`GcsClient::call`].
    pub async fn actors(&self) -> Result<Vec<ActorEntry>, ClusterError> {
        Ok(self.call(GetActors).await?.actors)
    }

    /// The value of `key` in `namespace` of the internal KV, if any.
    ///
    /// # Errors
    ///
    /// As [`GcsClient::call`].
    pub async fn kv_get(
        &self,
        namespace: &str,
        key: &[u8],
    ) -> Result<Option<Vec<u8>>, ClusterError> {
        let request = KvGet {
            namespace: namespace.to_owned(),
            key: key.to_vec(),
        };
        Ok(self.call(request).await?.value)
    }

    /// Writes `key` in `namespace`; returns whether it was written (false if
    /// it existed and `overwrite` is off).
    ///
    /// # Errors
    ///
    /// As [`GcsClient::call`].
    pub async fn kv_put(
        &self,
        namespace: &str,
        key: &[u8],
        value: Vec<u8>,
        overwrite: bool,
    ) -> Result<bool, ClusterError> {
        let request = KvPut {
            namespace: namespace.to_owned(),
            key: key.to_vec(),
            value,
            overwrite,
        };
        Ok(self.call(request).await?.written)
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
    /// As [`GcsClient::call`].
    pub async fn register_job(
        &self,
        driver: String,
        driver_address: String,
        binary_hash: [u8; 32],
        fingerprint: BuildFingerprint,
        config: JobConfig,
    ) -> Result<(JobId, WorkerId, bool), ClusterError> {
        let request = RegisterJob {
            driver,
            driver_address,
            binary_hash,
            fingerprint,
            config,
        };
        let JobRegistered {
            job,
            worker,
            upload,
        } = self.call(request).await?;
        Ok((job, worker, upload))
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
        let request = Message::from(UploadBinary { hash, len });
        let kind = request.kind();
        let reply = self
            .within(
                self.transfer_timeout(len),
                self.conn.request_with_bytes(&Envelope::new(request), bytes),
            )
            .await?;
        let Done = reply_to::<UploadBinary>(kind, reply.body)?;
        Ok(())
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
    /// [`GcsClient::call`].
    pub async fn fetch_binary(&self, hash: [u8; 32]) -> Result<AlignedVec<16>, ClusterError> {
        self.request_bulk(FetchBinary { hash }, MAX_BINARY_LEN)
            .await
    }

    /// Ships one batch of insight records of `job` to the head's collector
    /// (`records` encoded by `ray_insight::log::Chunk::encode`, times
    /// relative to `epoch_unix_nanos`).
    ///
    /// # Errors
    ///
    /// As [`GcsClient::call`].
    pub async fn insight_batch(
        &self,
        job: JobId,
        worker: WorkerId,
        epoch_unix_nanos: u64,
        records: Vec<u8>,
    ) -> Result<(), ClusterError> {
        let Done = self
            .call(InsightBatch {
                job,
                worker,
                epoch_unix_nanos,
                records,
            })
            .await?;
        Ok(())
    }

    /// One insight view as text, built by the head (see [`InsightExport`]).
    ///
    /// # Errors
    ///
    /// [`ClusterError::Refused`] with the head's reason (unknown job, view
    /// or format; no event log for `at_nanos`); otherwise as
    /// [`GcsClient::call`].
    pub async fn insight_export(&self, request: InsightExport) -> Result<String, ClusterError> {
        let bytes = self.request_bulk(request, MAX_EXPORT_LEN).await?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// Sends `request`, whose reply announces raw bytes, and reads them (at
    /// most `max_len`), in the time allowed for `max_len` bytes.
    async fn request_bulk<C>(
        &self,
        request: C,
        max_len: u64,
    ) -> Result<AlignedVec<16>, ClusterError>
    where
        C: Call<Reply = BinaryFollows>,
    {
        let request: Message = request.into();
        let kind = request.kind();
        let (reply, bytes) = self
            .within(
                self.transfer_timeout(max_len),
                self.conn.request_bulk(&Envelope::new(request), max_len),
            )
            .await?;
        let BinaryFollows { .. } = reply_to::<C>(kind, reply.body)?;
        // The transport reads the bytes of every reply that announces some.
        bytes.ok_or(ClusterError::UnexpectedReply {
            request: kind,
            reply: "BinaryFollows".to_owned(),
        })
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
        let Done = self.call(FinishJob { job }).await?;
        Ok(())
    }

    /// Registers a worker process of `job` started on `node`, listening at
    /// `address`; returns its id, which no other worker or driver ever gets,
    /// and whether its job records for insight.
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
    ) -> Result<(WorkerId, JobConfig), ClusterError> {
        let WorkerRegistered { worker, config } =
            self.call(RegisterWorker { job, node, address }).await?;
        Ok((worker, config))
    }

    /// Where worker (or driver) `worker` listens; `None` if the GCS never
    /// registered it.
    ///
    /// # Errors
    ///
    /// As [`GcsClient::call`].
    pub async fn get_worker(&self, worker: WorkerId) -> Result<Option<String>, ClusterError> {
        Ok(self.call(GetWorker { worker }).await?.address)
    }

    /// Every worker and driver of a running job, by id, except workers on
    /// nodes the GCS declared dead: the processes that may own tasks and
    /// objects. A listed process may still have exited since it registered.
    ///
    /// # Errors
    ///
    /// As [`GcsClient::call`].
    pub async fn workers(&self) -> Result<Vec<WorkerEntry>, ClusterError> {
        Ok(self.call(GetWorkers).await?.workers)
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
        max_restarts: u32,
    ) -> Result<(), ClusterError> {
        let Done = self
            .call(RegisterActor {
                entry,
                worker,
                address,
                max_restarts,
            })
            .await?;
        Ok(())
    }

    /// Reports that life `life` (0: the first) of actor `actor` ended with
    /// its worker; returns its state now:
    /// `Restarting` (register its next life with
    /// [`GcsClient::register_actor`], status `Alive`) or `Dead`.
    ///
    /// # Errors
    ///
    /// [`ClusterError::Refused`] for an unknown actor; otherwise as
    /// [`GcsClient::call`].
    pub async fn actor_failed(
        &self,
        actor: ActorId,
        life: u32,
        cause: String,
    ) -> Result<ray_proto::wire::ActorStatus, ClusterError> {
        Ok(self.call(ActorFailed { actor, life, cause }).await?.status)
    }

    /// Reports actor `actor` dead for good with `cause` (killed through a
    /// handle, let go by its owner, or its creation failed): its row is
    /// marked dead and its name freed.
    ///
    /// # Errors
    ///
    /// [`ClusterError::Refused`] for an actor the GCS never registered;
    /// otherwise as [`GcsClient::call`].
    pub async fn actor_dead(&self, actor: ActorId, cause: String) -> Result<(), ClusterError> {
        let Done = self.call(ActorDead { actor, cause }).await?;
        Ok(())
    }

    /// Subscribes to changes of the GCS tables on `channels`; the
    /// subscription ends with this client's connection.
    ///
    /// # Errors
    ///
    /// What [`GcsClient::call`] returns.
    pub async fn subscribe(&self, channels: Vec<WireChannel>) -> Result<u64, ClusterError> {
        Ok(self.call(Subscribe { channels }).await?.sub)
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
        let Events { events, dropped } = self.call(PollEvents { sub, wait_ms }).await?;
        Ok((events, dropped))
    }

    /// Where the live actor `id` is.
    ///
    /// # Errors
    ///
    /// [`ClusterError::Refused`] if it is not registered or dead; otherwise
    /// what [`GcsClient::call`] returns.
    pub async fn locate_actor(&self, id: ActorId) -> Result<ActorLocation, ClusterError> {
        self.call(LocateActor { id }).await
    }

    /// Where the live actor named `name` in `namespace` is.
    ///
    /// # Errors
    ///
    /// [`ClusterError::Refused`] with "no actor named …" if there is none;
    /// otherwise as [`GcsClient::call`].
    pub async fn lookup_actor(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<ActorLocation, ClusterError> {
        self.call(LookupActor {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        })
        .await
    }
}

/// `reply` as the answer to a `C` request of kind `request`:
/// [`ClusterError::Refused`] for [`Message::Error`],
/// [`ClusterError::UnexpectedReply`] for a reply of another kind.
fn reply_to<C: Call>(request: &'static str, reply: Message) -> Result<C::Reply, ClusterError> {
    C::reply(reply).map_err(|other| match other {
        Message::Error { reason } => ClusterError::Refused { reason },
        other => ClusterError::UnexpectedReply {
            request,
            reply: other.kind().to_owned(),
        },
    })
}
