//! The control-plane half of a node daemon: register with the GCS, then
//! heartbeat until the GCS or the node goes away.

use std::collections::BTreeMap;
use std::time::Duration;

use ray_proto::NodeId;
use ray_sched::ResourceSet;

use super::{labels_to_wire, resources_to_wire, ClusterError, GcsClient};

/// Heartbeats that may time out in a row before the daemon gives up on the
/// GCS: by then the GCS has declared the node dead anyway.
const MAX_MISSED_HEARTBEATS: u32 = 5;

/// What a node registers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSpec {
    /// Where its daemon can be reached (`host:port`).
    pub address: String,
    /// Its total resources.
    pub resources: ResourceSet,
    /// Its labels, for scheduling constraints.
    pub labels: BTreeMap<String, String>,
}

/// One node, registered with the GCS.
#[derive(Debug, Clone)]
pub struct NodeDaemon {
    node: NodeId,
    client: GcsClient,
    heartbeat_interval: Duration,
}

impl NodeDaemon {
    /// Registers `spec` with the GCS behind `client`.
    ///
    /// # Errors
    ///
    /// What [`GcsClient::register_node`] returns.
    pub async fn register(client: GcsClient, spec: &NodeSpec) -> Result<Self, ClusterError> {
        let (node, heartbeat_interval) = client
            .register_node(
                spec.address.clone(),
                resources_to_wire(&spec.resources),
                labels_to_wire(&spec.labels),
            )
            .await?;
        tracing::info!(target: "ray::node", node = %node, gcs = %client.addr(), "node.registered");
        Ok(Self {
            node,
            client,
            heartbeat_interval,
        })
    }

    /// The GCS client this node registered through.
    pub fn client(&self) -> &GcsClient {
        &self.client
    }

    /// The id the GCS gave this node.
    pub fn node_id(&self) -> NodeId {
        self.node
    }

    /// How often this node heartbeats, as the GCS asked.
    pub fn heartbeat_interval(&self) -> Duration {
        self.heartbeat_interval
    }

    /// Heartbeats every [`NodeDaemon::heartbeat_interval`] until that can no
    /// longer succeed, and returns why: the GCS declared the node dead
    /// ([`ClusterError::Refused`]), the connection failed, or
    /// `MAX_MISSED_HEARTBEATS` heartbeats in a row timed out.
    ///
    /// Cancel-safe: drop the future to stop heartbeating (the GCS then
    /// declares the node dead after its timeout).
    pub async fn run(&self) -> ClusterError {
        let mut ticks = tokio::time::interval(self.heartbeat_interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut missed = 0;
        loop {
            ticks.tick().await;
            match self.client.heartbeat(self.node, 0, Vec::new()).await {
                Ok(()) => missed = 0,
                Err(e @ ClusterError::Timeout { .. }) => {
                    missed += 1;
                    tracing::warn!(target: "ray::node", node = %self.node, error = %e, "node.heartbeat_missed");
                    if missed >= MAX_MISSED_HEARTBEATS {
                        return e;
                    }
                }
                Err(e) => return e,
            }
        }
    }
}
