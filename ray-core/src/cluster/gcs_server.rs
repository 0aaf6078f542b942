//! The GCS service: a [`Gcs`] served over the transport, and its health timer.
//!
//! This file is the async shell; what the service decides is in
//! [`ray_gcs::service`], without I/O. The shell holds the service's clock
//! (the epoch of every `now`) and the notification subscribers wait on. Job binaries travel as raw bytes after their
//! frame on the request's stream (see `transport::bulk`), and uploads are
//! hashed off the state lock.

use super::insight_hub::{self, InsightHub};

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use ray_gcs::{Gcs, GcsConfig, HealthConfig};
use ray_proto::wire::{
    BinaryFollows, BuildFingerprint, Envelope, Events, GcsReply, GcsRequest, GetNodes,
    InsightBatch, JobRegistered, Message, NodeEntry, Nodes, PollEvents, Subscribe, Subscribed,
    WireChannel, WireEvent,
};
use ray_proto::JobId;
use tokio::task::{JoinHandle, JoinSet};

use super::{binary_hash, DEFAULT_HEALTH_TIMEOUT, MAX_BINARY_LEN};
use ray_gcs::service::{self, Action};
use ray_transport::{CloseCode, Connection, Endpoint, IncomingRequest};

/// The service's tables as the shell serves them: with the clock their
/// `now` is read from and the notification woken after every change.
struct State {
    service: service::State,
    /// The epoch of the `now` handed to the service.
    started: tokio::time::Instant,
    /// Woken after every change, for subscribers waiting in a poll.
    changed: Arc<tokio::sync::Notify>,
}

impl State {
    fn new(service: service::State) -> Self {
        Self {
            service,
            started: tokio::time::Instant::now(),
            changed: Arc::default(),
        }
    }

    /// The time since the service started, the clock of the tables.
    fn now(&self) -> Duration {
        self.started.elapsed()
    }
}

impl std::ops::Deref for State {
    type Target = service::State;

    fn deref(&self) -> &service::State {
        &self.service
    }
}

impl std::ops::DerefMut for State {
    fn deref_mut(&mut self) -> &mut service::State {
        &mut self.service
    }
}

/// Settings of a [`GcsServer`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GcsServerConfig {
    /// A node that has not heartbeated for this long is declared dead
    /// (default [`DEFAULT_HEALTH_TIMEOUT`], 10 s). Nodes are told to
    /// heartbeat five times per timeout.
    pub health_timeout: Duration,
    /// Where the insight event log of each job that records goes
    /// (`job-<id>.log`); `None` keeps live views only (no replay at a time).
    pub insight_dir: Option<std::path::PathBuf>,
}

impl Default for GcsServerConfig {
    fn default() -> Self {
        Self {
            health_timeout: DEFAULT_HEALTH_TIMEOUT,
            insight_dir: None,
        }
    }
}

impl GcsServerConfig {
    /// How often nodes heartbeat: a fifth of the timeout, so one or two lost
    /// heartbeats never kill a node.
    pub fn heartbeat_interval(&self) -> Duration {
        (self.health_timeout / 5).max(Duration::from_millis(1))
    }

    /// How often the server checks for silent nodes.
    fn check_interval(&self) -> Duration {
        (self.health_timeout / 10).max(Duration::from_millis(1))
    }
}

/// The GCS service on one [`Endpoint`]: it answers every request of every
/// connection the endpoint accepts, and declares nodes dead when they stop
/// heartbeating.
///
/// Dropping it stops serving and closes the endpoint.
pub struct GcsServer {
    endpoint: Endpoint,
    state: Arc<Mutex<State>>,
    hub: Arc<Mutex<InsightHub>>,
    accept_loop: JoinHandle<()>,
    health_loop: JoinHandle<()>,
    /// Tells the insight hub of node changes.
    nodes_loop: JoinHandle<()>,
}

impl GcsServer {
    /// Starts serving an empty in-memory GCS on `endpoint`.
    ///
    /// Must be called inside a tokio runtime (it spawns the accept and health
    /// loops).
    pub fn start(endpoint: Endpoint, config: GcsServerConfig) -> Self {
        let gcs = Gcs::with_config(
            ray_gcs::MemoryStorage::new(),
            GcsConfig {
                health: HealthConfig {
                    timeout: config.health_timeout,
                    check_every: Some(config.check_interval()),
                },
                ..GcsConfig::default()
            },
        );
        let state = Arc::new(Mutex::new(State::new(service::State::new(
            gcs,
            config.heartbeat_interval(),
        ))));
        let hub = Arc::new(Mutex::new(InsightHub::new(config.insight_dir.clone())));
        // Subscribed before anything can register, so the hub sees every node.
        let nodes_sub = subscribe_nodes(&state);
        let nodes_loop = tokio::spawn(nodes_loop(state.clone(), hub.clone(), nodes_sub));
        let accept_loop = tokio::spawn(accept_loop(endpoint.clone(), state.clone(), hub.clone()));
        let health_loop = tokio::spawn(health_loop(state.clone(), config.check_interval()));
        Self {
            endpoint,
            state,
            hub,
            accept_loop,
            health_loop,
            nodes_loop,
        }
    }

    /// The address the service listens on.
    ///
    /// # Errors
    ///
    /// The OS error if the socket cannot say.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.endpoint.local_addr()
    }

    /// The head's insight collector as a dashboard source: what
    /// `ray_dashboard::Dashboard::start_on` serves on the head.
    pub fn insight_source(&self) -> Arc<dyn ray_dashboard::Source> {
        Arc::new(super::insight_hub::HubSource(self.hub.clone()))
    }

    /// How many nodes are alive now.
    pub fn alive_nodes(&self) -> usize {
        self.state.lock().gcs.alive_nodes().count()
    }

    /// The SHA-256 of the binary job `job` runs and its build fingerprint,
    /// as its driver registered them; `None` for a job never registered.
    pub fn job_binary(&self, job: JobId) -> Option<([u8; 32], BuildFingerprint)> {
        self.state
            .lock()
            .job_binary(job)
            .map(|b| (b.hash, b.fingerprint))
    }
}

impl Drop for GcsServer {
    fn drop(&mut self) {
        // Aborting the accept loop drops its JoinSet, ending every connection task.
        self.accept_loop.abort();
        self.health_loop.abort();
        self.nodes_loop.abort();
        self.endpoint.close(CloseCode::Normal, "GCS stopping");
    }
}

impl std::fmt::Debug for GcsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GcsServer")
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

/// A subscription to the node table, the hub's (`None` if the service
/// refused one, which it does not).
fn subscribe_nodes(state: &Mutex<State>) -> Option<u64> {
    let mut st = state.lock();
    let now = st.now();
    let subscribe = Subscribe {
        channels: vec![WireChannel::Node],
    };
    match service::handle(&mut st, subscribe.into(), now) {
        Action::Reply(Message::GcsReply(GcsReply::Subscribed(Subscribed { sub }))) => Some(sub),
        _ => None,
    }
}

/// Hands every change of the node table to the insight hub (registrations
/// and deaths become `node.state` records in each job's views). After
/// events were lost to the subscription's bounded queue, the whole table
/// is read again.
async fn nodes_loop(state: Arc<Mutex<State>>, hub: Arc<Mutex<InsightHub>>, sub: Option<u64>) {
    let Some(sub) = sub else {
        return;
    };
    let mut dropped = 0;
    loop {
        let Message::GcsReply(GcsReply::Events(events)) = poll_events(&state, sub, 30_000).await
        else {
            return;
        };
        let rows: Vec<NodeEntry> = if events.dropped > dropped {
            dropped = events.dropped;
            let mut st = state.lock();
            let now = st.now();
            match service::handle(&mut st, GetNodes.into(), now) {
                Action::Reply(Message::GcsReply(GcsReply::Nodes(Nodes { nodes }))) => nodes,
                _ => Vec::new(),
            }
        } else {
            events
                .events
                .into_iter()
                .filter_map(|e| match e {
                    WireEvent::Node(node) => Some(node),
                    _ => None,
                })
                .collect()
        };
        let mut hub = hub.lock();
        for row in &rows {
            hub.node_changed(row);
        }
    }
}

async fn accept_loop(endpoint: Endpoint, state: Arc<Mutex<State>>, hub: Arc<Mutex<InsightHub>>) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            conn = endpoint.accept() => {
                let Ok(conn) = conn else { break };
                connections.spawn(serve_connection(conn, state.clone(), hub.clone()));
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// Answers the requests of one connection, each in a task of its own, until
/// it closes; then finishes the jobs that were registered on it (their
/// driver exited or was killed).
async fn serve_connection(conn: Connection, state: Arc<Mutex<State>>, hub: Arc<Mutex<InsightHub>>) {
    let registered: Arc<Mutex<Vec<JobId>>> = Arc::default();
    let subs: Arc<Mutex<Vec<u64>>> = Arc::default();
    let mut requests = JoinSet::new();
    loop {
        tokio::select! {
            request = conn.accept_request() => {
                match request {
                    Ok(request) => {
                        requests.spawn(serve_request(
                            request,
                            state.clone(),
                            hub.clone(),
                            registered.clone(),
                            subs.clone(),
                        ));
                    }
                    Err(e) => {
                        tracing::debug!(target: "ray::gcs", peer = %conn.remote_address(), error = %e, "gcs.connection_closed");
                        break;
                    }
                }
            }
            Some(_) = requests.join_next(), if !requests.is_empty() => {}
        }
    }
    // After this no request of the connection can register another job.
    requests.shutdown().await;
    for sub in std::mem::take(&mut *subs.lock()) {
        state.lock().unsubscribe(sub);
    }
    let jobs = std::mem::take(&mut *registered.lock());
    if !jobs.is_empty() {
        let mut state = state.lock();
        let now = state.now();
        for job in jobs {
            service::driver_gone(&mut state, job, now);
        }
        state.changed.notify_waiters();
    }
}

/// Reads one request, performs what [`service::handle_message`] decides, and
/// records a job registered here in `registered`.
async fn serve_request(
    mut request: IncomingRequest,
    state: Arc<Mutex<State>>,
    hub: Arc<Mutex<InsightHub>>,
    registered: Arc<Mutex<Vec<JobId>>>,
    subs: Arc<Mutex<Vec<u64>>>,
) {
    let envelope = match request.read().await {
        Ok(envelope) => envelope,
        Err(e) => {
            tracing::debug!(target: "ray::gcs", error = %e, "gcs.bad_request");
            return;
        }
    };
    let body = match envelope.body {
        Message::Gcs(GcsRequest::PollEvents(PollEvents { sub, wait_ms })) => {
            let reply = poll_events(&state, sub, wait_ms).await;
            if let Err(e) = request.respond(&Envelope::new(reply)).await {
                tracing::debug!(target: "ray::gcs", error = %e, "gcs.reply_failed");
            }
            return;
        }
        Message::Gcs(insight @ (GcsRequest::InsightBatch(_) | GcsRequest::InsightExport(_))) => {
            return serve_insight(request, insight, hub).await;
        }
        body => body,
    };
    let subscribed = matches!(body, Message::Gcs(GcsRequest::Subscribe(_)));
    let driver = match &body {
        Message::Gcs(GcsRequest::RegisterJob(r)) => Some(r.driver.clone()),
        _ => None,
    };
    let action = {
        let mut state = state.lock();
        let now = state.now();
        let action = service::handle_message(&mut state, body, now);
        // Recorded under the state lock, with no await since the job was
        // added: an aborted request either did both or neither.
        match &action {
            Action::Reply(Message::GcsReply(GcsReply::JobRegistered(JobRegistered {
                job,
                ..
            }))) => {
                registered.lock().push(*job);
                hub.lock()
                    .job_registered(*job, driver.as_deref().unwrap_or("?"));
            }
            Action::Reply(Message::GcsReply(GcsReply::Subscribed(Subscribed { sub })))
                if subscribed =>
            {
                subs.lock().push(*sub)
            }
            _ => {}
        }
        state.changed.notify_waiters();
        action
    };
    let sent = match action {
        Action::Reply(reply) => request.respond(&Envelope::new(reply)).await,
        Action::SendBinary(bytes) => {
            let header = Envelope::new(
                BinaryFollows {
                    len: bytes.len() as u64,
                }
                .into(),
            );
            request.respond_with_bytes(&header, &bytes).await
        }
        Action::ReceiveBinary { hash, len } => {
            let reply = receive_binary(&mut request, &state, hash, len).await;
            request.respond(&Envelope::new(reply)).await
        }
    };
    if let Err(e) = sent {
        tracing::debug!(target: "ray::gcs", error = %e, "gcs.reply_failed");
    }
}

/// Answers the insight requests, off the GCS state lock: a shipped batch
/// goes into its job's views and is queued for its log's writer; an export
/// is built on a blocking thread (a replay reads the job's log).
async fn serve_insight(request: IncomingRequest, body: GcsRequest, hub: Arc<Mutex<InsightHub>>) {
    let sent = match body {
        GcsRequest::InsightBatch(InsightBatch {
            job,
            worker,
            epoch_unix_nanos,
            records,
        }) => {
            let reply =
                match insight_hub::accept_shipped(&hub, job, worker, epoch_unix_nanos, &records)
                    .await
                {
                    Ok(()) => Message::Ok,
                    Err(e) => Message::Error {
                        reason: e.to_string(),
                    },
                };
            request.respond(&Envelope::new(reply)).await
        }
        GcsRequest::InsightExport(export) => {
            let built = tokio::task::spawn_blocking(move || insight_hub::export(&hub, &export))
                .await
                .unwrap_or_else(|e| Err(super::insight_hub::HubError::Stopped(e)));
            match built {
                Ok(text) => {
                    let header = Envelope::new(
                        BinaryFollows {
                            len: text.len() as u64,
                        }
                        .into(),
                    );
                    request.respond_with_bytes(&header, text.as_bytes()).await
                }
                Err(e) => {
                    let reason = e.to_string();
                    request
                        .respond(&Envelope::new(Message::Error { reason }))
                        .await
                }
            }
        }
        _ => return,
    };
    if let Err(e) = sent {
        tracing::debug!(target: "ray::gcs", error = %e, "gcs.reply_failed");
    }
}

/// Answers a poll: the subscription's events, waiting up to `wait_ms`
/// (at most 30 s) for the first one.
async fn poll_events(state: &Mutex<State>, sub: u64, wait_ms: u32) -> Message {
    let deadline =
        tokio::time::Instant::now() + Duration::from_millis(u64::from(wait_ms.min(30_000)));
    loop {
        let (reply, changed) = {
            let mut st = state.lock();
            let now = st.now();
            let poll = PollEvents { sub, wait_ms }.into();
            let reply = match service::handle(&mut st, poll, now) {
                Action::Reply(reply) => reply,
                other => Message::Error {
                    reason: format!("unexpected action for a poll: {other:?}"),
                },
            };
            (reply, st.changed.clone())
        };
        let empty = matches!(
            &reply,
            Message::GcsReply(GcsReply::Events(Events { events, .. })) if events.is_empty()
        );
        if !empty || tokio::time::Instant::now() >= deadline {
            return reply;
        }
        // A change between the poll above and this wait is not missed:
        // `notified()` is created before checking again.
        let notified = changed.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let again = {
            let mut st = state.lock();
            let now = st.now();
            service::handle(&mut st, PollEvents { sub, wait_ms }.into(), now)
        };
        if let Action::Reply(reply @ Message::GcsReply(GcsReply::Events(Events { .. }))) = again {
            if matches!(
                &reply,
                Message::GcsReply(GcsReply::Events(Events { events, .. })) if !events.is_empty()
            ) {
                return reply;
            }
        }
        let _ = tokio::time::timeout_at(deadline, notified).await;
    }
}

/// Reads an uploaded binary, hashes it on a blocking thread (hundreds of MB
/// take a while), and stores it if the hash matches.
async fn receive_binary(
    request: &mut IncomingRequest,
    state: &Mutex<State>,
    hash: [u8; 32],
    len: u64,
) -> Message {
    let bytes = match request.read_bytes(len, MAX_BINARY_LEN).await {
        Ok(bytes) => Arc::new(bytes),
        Err(e) => {
            return Message::Error {
                reason: format!("binary upload failed: {e}"),
            }
        }
    };
    let hashed = bytes.clone();
    let actual = match tokio::task::spawn_blocking(move || binary_hash(&hashed)).await {
        Ok(actual) => actual,
        Err(e) => {
            return Message::Error {
                reason: format!("hashing the binary failed: {e}"),
            }
        }
    };
    service::store_binary(&mut state.lock(), hash, actual, bytes)
}

async fn health_loop(state: Arc<Mutex<State>>, every: Duration) {
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let dead = {
            let mut state = state.lock();
            let now = state.now();
            let dead = state.gcs.check_health(now);
            if !dead.is_empty() {
                state.changed.notify_waiters();
            }
            dead
        };
        for node in dead {
            tracing::warn!(target: "ray::gcs", node = %node, "node.dead");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use ray_proto::wire::Role;

    use super::*;
    use crate::cluster::{control_plane_fingerprint, ClusterError, GcsClient};
    use ray_transport::{ClusterCa, ClusterCredentials, EndpointConfig};

    fn endpoint(creds: &ClusterCredentials, role: Role) -> Endpoint {
        let config = EndpointConfig::new(role, control_plane_fingerprint());
        Endpoint::bind(SocketAddr::from(([127, 0, 0, 1], 0)), creds, config).expect("bind")
    }

    async fn client(creds: &ClusterCredentials, addr: SocketAddr) -> GcsClient {
        GcsClient::connect(&endpoint(creds, Role::Driver), addr, Duration::from_secs(5))
            .await
            .expect("connect")
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn binary_uploaded_by_a_driver_is_fetched_by_another_and_its_job_ends_with_its_connection(
    ) {
        let ca = ClusterCa::generate().expect("CA");
        let creds = ca.issue("test").expect("issue");
        let server = GcsServer::start(endpoint(&creds, Role::Gcs), GcsServerConfig::default());
        let addr = server.local_addr().expect("addr");
        let driver = client(&creds, addr).await;
        let node = client(&creds, addr).await;

        let binary: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        let hash = binary_hash(&binary);
        let fingerprint = BuildFingerprint([5; 32]);
        let (job, _, upload) = driver
            .register_job(
                "main".into(),
                "127.0.0.1:1".into(),
                hash,
                fingerprint,
                ray_proto::wire::JobConfig::default(),
            )
            .await
            .expect("register job");
        assert!(upload);
        assert_eq!(server.job_binary(job), Some((hash, fingerprint)));

        let wrong = driver.upload_binary(hash, &binary[1..]).await;
        assert!(
            matches!(&wrong, Err(ClusterError::Refused { reason }) if reason.contains("hashes to")),
            "{wrong:?}"
        );
        assert!(matches!(
            node.fetch_binary(hash).await,
            Err(ClusterError::Refused { .. })
        ));
        driver.upload_binary(hash, &binary).await.expect("upload");
        let fetched = node.fetch_binary(hash).await.expect("fetch");
        assert!(fetched.as_slice() == &binary[..]);

        assert!(node.jobs().await.expect("jobs")[0].running);
        driver.connection().close(CloseCode::Normal, "driver exits");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while node.jobs().await.expect("jobs")[0].running {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the job outlived its driver's connection"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}
