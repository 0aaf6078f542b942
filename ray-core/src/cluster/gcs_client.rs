//! A typed client of the GCS service.

use std::net::SocketAddr;
use std::time::Duration;

use ray_proto::wire::{ActorEntry, Envelope, JobEntry, Label, Message, NodeEntry, ResourceAmount};
use ray_proto::NodeId;

use super::{message_kind, ClusterError};
use crate::transport::{Connection, Endpoint};

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
        let addr = self.addr;
        let reply = tokio::time::timeout(self.timeout, self.conn.request(&Envelope::new(request)))
            .await
            .map_err(|_| ClusterError::Timeout {
                addr,
                timeout: self.timeout,
            })?
            .map_err(|source| ClusterError::Transport { addr, source })?;
        match reply.body {
            Message::Error { reason } => Err(ClusterError::Refused { reason }),
            body => Ok(body),
        }
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

    /// Tells the GCS `node` is alive.
    ///
    /// # Errors
    ///
    /// [`ClusterError::Refused`] if the GCS declared the node dead or does
    /// not know it; otherwise as [`GcsClient::call`].
    pub async fn heartbeat(&self, node: NodeId) -> Result<(), ClusterError> {
        match self.call(Message::Heartbeat { node }).await? {
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
}

fn unexpected(request: &'static str, reply: &Message) -> ClusterError {
    ClusterError::UnexpectedReply {
        request,
        reply: message_kind(reply),
    }
}
