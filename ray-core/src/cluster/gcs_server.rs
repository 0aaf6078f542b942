//! The GCS service: a [`Gcs`] served over the transport, and its health timer.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use ray_gcs::{ActorState, Gcs, GcsConfig, HealthConfig, NodeInfo, NodeState};
use ray_proto::wire::{ActorEntry, ActorStatus, Envelope, JobEntry, Message, NodeEntry};
use ray_proto::NodeId;
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

use super::DEFAULT_HEALTH_TIMEOUT;
use super::{labels_to_wire, message_kind, resources_from_wire, resources_to_wire};
use crate::transport::{CloseCode, Connection, Endpoint, IncomingRequest};

/// Settings of a [`GcsServer`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GcsServerConfig {
    /// A node that has not heartbeated for this long is declared dead
    /// (default [`DEFAULT_HEALTH_TIMEOUT`], 10 s). Nodes are told to
    /// heartbeat five times per timeout.
    pub health_timeout: Duration,
}

impl Default for GcsServerConfig {
    fn default() -> Self {
        Self {
            health_timeout: DEFAULT_HEALTH_TIMEOUT,
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

/// The GCS table state and the clock it is read against.
struct State {
    gcs: Gcs,
    next_node: u64,
    heartbeat_interval: Duration,
    /// The epoch of the `now` handed to [`Gcs`].
    started: Instant,
}

impl State {
    fn now(&self) -> Duration {
        self.started.elapsed()
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
    accept_loop: JoinHandle<()>,
    health_loop: JoinHandle<()>,
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
                },
                ..GcsConfig::default()
            },
        );
        let state = Arc::new(Mutex::new(State {
            gcs,
            next_node: 1,
            heartbeat_interval: config.heartbeat_interval(),
            started: Instant::now(),
        }));
        let accept_loop = tokio::spawn(accept_loop(endpoint.clone(), state.clone()));
        let health_loop = tokio::spawn(health_loop(state.clone(), config.check_interval()));
        Self {
            endpoint,
            state,
            accept_loop,
            health_loop,
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

    /// How many nodes are alive now.
    pub fn alive_nodes(&self) -> usize {
        self.state.lock().gcs.alive_nodes().count()
    }
}

impl Drop for GcsServer {
    fn drop(&mut self) {
        // Aborting the accept loop drops its JoinSet, ending every connection task.
        self.accept_loop.abort();
        self.health_loop.abort();
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

async fn accept_loop(endpoint: Endpoint, state: Arc<Mutex<State>>) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            conn = endpoint.accept() => {
                let Ok(conn) = conn else { break };
                connections.spawn(serve_connection(conn, state.clone()));
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// Answers the requests of one connection, each in a task of its own, until
/// it closes.
async fn serve_connection(conn: Connection, state: Arc<Mutex<State>>) {
    let mut requests = JoinSet::new();
    loop {
        tokio::select! {
            request = conn.accept_request() => {
                match request {
                    Ok(request) => {
                        requests.spawn(serve_request(request, state.clone()));
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
}

async fn serve_request(mut request: IncomingRequest, state: Arc<Mutex<State>>) {
    let reply = match request.read().await {
        Ok(envelope) => {
            let mut state = state.lock();
            let now = state.now();
            handle(&mut state, envelope.body, now)
        }
        Err(e) => {
            tracing::debug!(target: "ray::gcs", error = %e, "gcs.bad_request");
            return;
        }
    };
    if let Err(e) = request.respond(&Envelope::new(reply)).await {
        tracing::debug!(target: "ray::gcs", error = %e, "gcs.reply_failed");
    }
}

async fn health_loop(state: Arc<Mutex<State>>, every: Duration) {
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let dead = {
            let mut state = state.lock();
            let now = state.now();
            state.gcs.check_health(now)
        };
        for node in dead {
            tracing::warn!(target: "ray::gcs", node = %node, "node.dead");
        }
    }
}

/// The reply to one request: the whole of the service's logic, without I/O.
fn handle(state: &mut State, request: Message, now: Duration) -> Message {
    let gcs = &mut state.gcs;
    match request {
        Message::RegisterNode {
            address,
            resources,
            labels,
        } => {
            let id = NodeId(state.next_node);
            let info = NodeInfo {
                id,
                address,
                resources: resources_from_wire(&resources),
                labels: labels.into_iter().map(|l| (l.key, l.value)).collect(),
            };
            match gcs.register_node(info, now) {
                Ok(()) => {
                    state.next_node += 1;
                    tracing::info!(target: "ray::gcs", node = %id, "node.registered");
                    Message::NodeRegistered {
                        node: id,
                        heartbeat_interval_ms: state.heartbeat_interval.as_millis() as u64,
                    }
                }
                Err(e) => error(e),
            }
        }
        Message::Heartbeat { node } => match gcs.heartbeat(node, now) {
            Ok(()) => Message::Ok,
            Err(e) => error(e),
        },
        Message::GetNodes => {
            let mut nodes: Vec<NodeEntry> = gcs
                .nodes()
                .map(|row| NodeEntry {
                    id: row.info.id,
                    address: row.info.address.clone(),
                    resources: resources_to_wire(&row.info.resources),
                    labels: labels_to_wire(&row.info.labels),
                    alive: row.is_alive(),
                    death_cause: match &row.state {
                        NodeState::Alive => None,
                        NodeState::Dead { cause } => Some(cause.clone()),
                    },
                })
                .collect();
            nodes.sort_by_key(|n| n.id);
            Message::Nodes { nodes }
        }
        Message::GetJobs => {
            let mut jobs: Vec<JobEntry> = gcs
                .jobs()
                .map(|row| JobEntry {
                    id: row.info.id,
                    driver: row.info.driver.clone(),
                    running: row.is_running(),
                })
                .collect();
            jobs.sort_by_key(|j| j.id);
            Message::Jobs { jobs }
        }
        Message::GetActors => {
            let mut actors: Vec<ActorEntry> = gcs
                .actors()
                .map(|row| ActorEntry {
                    id: row.info.id,
                    class_name: row.info.class_name.clone(),
                    name: row.info.name.clone(),
                    namespace: row.info.namespace.clone(),
                    job: row.info.job,
                    status: match &row.state {
                        ActorState::PendingCreation => ActorStatus::PendingCreation,
                        ActorState::Alive { node } => ActorStatus::Alive { node: *node },
                        ActorState::Restarting { attempt } => {
                            ActorStatus::Restarting { attempt: *attempt }
                        }
                        ActorState::Dead { cause } => ActorStatus::Dead {
                            cause: cause.clone(),
                        },
                    },
                })
                .collect();
            actors.sort_by_key(|a| a.id);
            Message::Actors { actors }
        }
        Message::KvGet { namespace, key } => Message::KvValue {
            value: gcs.kv_get(&namespace, &key).map(<[u8]>::to_vec),
        },
        Message::KvPut {
            namespace,
            key,
            value,
            overwrite,
        } => Message::KvPutDone {
            written: gcs.kv_put(&namespace, &key, value, overwrite),
        },
        Message::Ping { seq } => Message::Pong { seq },
        other => Message::Error {
            reason: format!("the GCS does not serve {}", message_kind(&other)),
        },
    }
}

fn error(e: ray_gcs::GcsError) -> Message {
    Message::Error {
        reason: e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use ray_proto::wire::ResourceAmount;

    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn state(timeout: Duration) -> State {
        let config = GcsServerConfig {
            health_timeout: timeout,
        };
        State {
            gcs: Gcs::with_config(
                ray_gcs::MemoryStorage::new(),
                GcsConfig {
                    health: HealthConfig { timeout },
                    ..GcsConfig::default()
                },
            ),
            next_node: 1,
            heartbeat_interval: config.heartbeat_interval(),
            started: Instant::now(),
        }
    }

    fn register(state: &mut State, now: Duration) -> NodeId {
        let reply = handle(
            state,
            Message::RegisterNode {
                address: "127.0.0.1:1".into(),
                resources: vec![ResourceAmount {
                    name: "CPU".into(),
                    raw: 20_000,
                }],
                labels: labels_to_wire(&labels(&[("zone", "a")])),
            },
            now,
        );
        match reply {
            Message::NodeRegistered {
                node,
                heartbeat_interval_ms,
            } => {
                assert_eq!(heartbeat_interval_ms, 200);
                node
            }
            other => panic!("{other:?}"),
        }
    }

    fn nodes(state: &mut State) -> Vec<NodeEntry> {
        match handle(state, Message::GetNodes, Duration::ZERO) {
            Message::Nodes { nodes } => nodes,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn registered_nodes_get_fresh_ids_and_are_listed() {
        let mut s = state(Duration::from_secs(1));
        assert_eq!(register(&mut s, Duration::ZERO), NodeId(1));
        assert_eq!(register(&mut s, Duration::ZERO), NodeId(2));
        let listed = nodes(&mut s);
        assert_eq!(listed.len(), 2);
        assert!(listed.iter().all(|n| n.alive && n.labels.len() == 1));
        assert_eq!(listed[0].resources[0].raw, 20_000);
    }

    #[test]
    fn silent_node_is_dead_and_its_heartbeat_is_refused() {
        let mut s = state(Duration::from_secs(1));
        let quiet = register(&mut s, Duration::ZERO);
        let chatty = register(&mut s, Duration::ZERO);
        let hb = |s: &mut State, node, at| handle(s, Message::Heartbeat { node }, at);
        assert_eq!(hb(&mut s, chatty, Duration::from_millis(800)), Message::Ok);
        assert_eq!(s.gcs.check_health(Duration::from_millis(1500)), vec![quiet]);
        let listed = nodes(&mut s);
        assert!(!listed[0].alive && listed[0].death_cause.is_some());
        assert!(listed[1].alive);
        assert!(matches!(
            hb(&mut s, quiet, Duration::from_millis(1600)),
            Message::Error { .. }
        ));
    }

    #[test]
    fn kv_put_then_get_and_unknown_requests_are_errors() {
        let mut s = state(Duration::from_secs(1));
        let put = Message::KvPut {
            namespace: "ns".into(),
            key: b"k".to_vec(),
            value: b"v".to_vec(),
            overwrite: false,
        };
        assert_eq!(
            handle(&mut s, put.clone(), Duration::ZERO),
            Message::KvPutDone { written: true }
        );
        assert_eq!(
            handle(&mut s, put, Duration::ZERO),
            Message::KvPutDone { written: false }
        );
        let get = Message::KvGet {
            namespace: "ns".into(),
            key: b"k".to_vec(),
        };
        assert_eq!(
            handle(&mut s, get, Duration::ZERO),
            Message::KvValue {
                value: Some(b"v".to_vec())
            }
        );
        assert!(matches!(
            handle(&mut s, Message::Ok, Duration::ZERO),
            Message::Error { reason } if reason.contains("Ok")
        ));
    }
}
