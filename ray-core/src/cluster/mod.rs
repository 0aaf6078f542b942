//! The cluster's control plane over the QUIC transport: the GCS service, its
//! client, the node daemons, and the owner and worker sides of task
//! execution.
//!
//! [`Head`] puts a GCS, the head's node and the dashboard together, once,
//! for both the `rayrs` binary and [`Cluster::local`]; [`start_node`]
//! starts any other node; [`GcsClient`] is the typed way to ask the GCS
//! things. Their parts are public but hidden from these docs:
//! `GcsServer` serves a [`ray_gcs::Gcs`] to cluster processes and declares
//! nodes dead when their heartbeats stop, `NodeDaemon` registers one node
//! and keeps it alive, and [`NodeService`] serves that node's leases.
//!
//! Every request travels on a stream of its own and gets exactly one reply
//! ([`Connection::request`](ray_transport::Connection::request)).
//!
//! On top of it, the owner and worker sides of task execution
//! (`core.rs`) and placement groups (`pg.rs`).

mod actor_owner;
mod core;
mod gcs_client;
mod gcs_server;
mod head;
mod insight_hub;
mod join;
mod local;
mod node_daemon;
mod node_service;
mod pg;
mod policy_sets;
mod ref_counts;
#[cfg(test)]
mod sim_seeds;
mod task_owner;
pub mod testing;
mod worker;
mod worker_leases;

use std::net::SocketAddr;
use std::time::Duration;

pub use gcs_client::{binary_hash, ActorLocation, GcsClient, MAX_BINARY_LEN};
// The head's and nodes' parts: `Head` and `start_node` put them together.
// Public for tests and tools that assemble them differently; hidden from
// the docs, as they are not meant for users.
#[doc(hidden)]
pub use gcs_server::{GcsServer, GcsServerConfig};
pub use head::{
    start_node, Head, HeadConfig, NodeConfig, NodeLimits, StartError, ADDRESS_FILE,
    CREDENTIALS_DIR, DASHBOARD_FILE,
};
#[doc(hidden)]
pub use node_daemon::{NodeDaemon, NodeSpec};
pub use policy_sets::{policy_set, policy_set_names, PolicyFactory, PolicySet, POLICY_SETS};
/// What a custom policy set is made of (from ray-sched).
pub use ray_sched::{ClusterView, Decision, Policies, Policy, Request};

pub(crate) use self::core::{ClusterCore, ClusterRemote, CoreConfig};
pub(crate) use join::connect_driver;
pub use local::{Cluster, LocalClusterConfig};
pub use node_service::NodeService;
#[doc(hidden)]
pub use node_service::NodeServiceConfig;
pub(crate) use pg::ClusterPg;
pub(crate) use worker::job_fingerprint;

use ray_proto::wire::BuildFingerprint;

use ray_transport::TransportError;

/// The default time after which a node that has not heartbeated is dead.
pub const DEFAULT_HEALTH_TIMEOUT: Duration = Duration::from_secs(10);

/// The fingerprint control-plane processes (`rayrs`, the GCS, node daemons)
/// exchange in the handshake: this crate's version and the wire protocol.
///
/// Workers, which run a job's own binary, will be checked against a hash of
/// that binary instead; the control plane only needs to agree on messages.
pub fn control_plane_fingerprint() -> BuildFingerprint {
    let id = concat!("ray-rs control plane ", env!("CARGO_PKG_VERSION"));
    let mut bytes = [0u8; 32];
    let h1 = ray_proto::fnv1a64(id.as_bytes());
    let h2 = ray_proto::fnv1a64(&ray_proto::wire::PROTOCOL_VERSION.to_le_bytes());
    bytes[..8].copy_from_slice(&h1.to_le_bytes());
    bytes[8..16].copy_from_slice(&h2.to_le_bytes());
    BuildFingerprint(bytes)
}

/// Everything that can go wrong talking to the GCS.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClusterError {
    /// The connection could not be made or failed.
    #[error("GCS at {addr}: {source}")]
    Transport {
        /// The GCS address.
        addr: SocketAddr,
        /// What the transport said.
        source: TransportError,
    },
    /// The GCS did not answer in time.
    #[error("GCS at {addr} did not answer within {timeout:?}")]
    Timeout {
        /// The GCS address.
        addr: SocketAddr,
        /// How long we waited.
        timeout: Duration,
    },
    /// The GCS refused the request; `reason` says why.
    #[error("GCS refused the request: {reason}")]
    Refused {
        /// The GCS's reason.
        reason: String,
    },
    /// The GCS answered with a message that does not answer the request
    /// (a reply of another kind than the request's [`Call`](ray_proto::wire::Call)).
    #[error("GCS answered {reply} to {request}")]
    UnexpectedReply {
        /// The request's kind.
        request: &'static str,
        /// What came back, for a human.
        reply: String,
    },
    /// This process could not do its own part of talking to the GCS
    /// (start the heartbeat's thread or runtime).
    #[error("{what}: {source}")]
    Local {
        /// What could not be done.
        what: &'static str,
        /// What the OS said.
        source: std::io::Error,
    },
}

pub use ray_proto::wire::labels_to_wire;
pub use ray_sched::wire::{resources_from_wire, resources_to_wire};

/// A node table entry's labels, as ray-sched takes them.
pub(crate) fn entry_labels(
    n: &ray_proto::wire::NodeEntry,
) -> std::collections::BTreeMap<String, String> {
    n.labels
        .iter()
        .map(|l| (l.key.clone(), l.value.clone()))
        .collect()
}

/// A node table entry's last load report, if it made one.
pub(crate) fn entry_update(n: &ray_proto::wire::NodeEntry) -> Option<ray_sched::NodeUpdate> {
    (n.version > 0).then(|| ray_sched::NodeUpdate {
        node: n.id,
        version: n.version,
        used: resources_from_wire(&n.used),
    })
}

pub(crate) use ray_proto::hex;

#[cfg(test)]
mod tests {
    use ray_proto::wire::{GetNodes, Message};

    #[test]
    fn message_kind_is_the_variant_name() {
        assert_eq!(Message::from(GetNodes).kind(), "GetNodes");
        assert_eq!(Message::Error { reason: "x".into() }.kind(), "Error");
    }
}
