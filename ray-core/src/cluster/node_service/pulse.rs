//! The node's liveness heartbeat, on a thread of its own.
//!
//! A busy node is not a dead node. The daemon's runtime moves leases,
//! binaries and objects, and on a loaded machine it may fall behind; if
//! the heartbeat that keeps the node alive in the GCS's eyes waited behind
//! that work, a slow node would be declared dead and its work rerun
//! elsewhere. So the heartbeat has an OS thread, a single-threaded runtime
//! and a QUIC connection of its own, and shares nothing with the daemon's
//! runtime but a read of the node's load: it waits only for the OS to
//! schedule its thread. (The GCS, for its part, does not
//! count its own stalls as a node's silence: see
//! [`ray_gcs::HealthConfig`].)

use std::sync::{Arc, Weak};
use std::time::Duration;

use ray_proto::wire::Role;
use ray_transport::{ClusterCredentials, Endpoint, EndpointConfig};

use super::Inner;
use crate::cluster::{control_plane_fingerprint, resources_to_wire, ClusterError, GcsClient};

/// Heartbeats that may time out in a row before the node gives up on the
/// GCS: by then the GCS has declared the node dead anyway.
const MAX_MISSED: u32 = 5;

/// Starts the heartbeat thread for the node behind `inner`. If
/// heartbeating stops (the GCS declared the node dead, or cannot be
/// reached), why is left in `Inner::pulse` for [`super::NodeService::run`];
/// if the node stops first, nothing is.
pub(super) fn start(inner: &Arc<Inner>) {
    let weak = Arc::downgrade(inner);
    let stopped = |node: &Weak<Inner>, why: ClusterError| {
        if let Some(inner) = node.upgrade() {
            *inner.pulse.lock() = Some(why);
            inner.pulse_stopped.notify_one();
        }
    };
    let thread_node = weak.clone();
    let spawned = std::thread::Builder::new()
        .name("ray-heartbeat".into())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build();
            let why = match runtime {
                Ok(runtime) => runtime.block_on(beat(thread_node.clone())),
                Err(e) => Some(ClusterError::Local {
                    what: "heartbeat runtime",
                    source: e,
                }),
            };
            if let Some(why) = why {
                stopped(&thread_node, why);
            }
        });
    if let Err(e) = spawned {
        let why = ClusterError::Local {
            what: "heartbeat thread",
            source: e,
        };
        stopped(&weak, why);
    }
}

/// Heartbeats until the node is dropped (`None`) or heartbeating cannot
/// succeed any more (why).
async fn beat(node: Weak<Inner>) -> Option<ClusterError> {
    let (client, id, every) = {
        let inner = node.upgrade()?;
        let every = inner.daemon.heartbeat_interval();
        let client = match connect(&inner, every * MAX_MISSED).await {
            Ok(client) => client,
            Err(e) => return Some(e),
        };
        (client, inner.node, every)
    };
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut missed = 0;
    loop {
        ticks.tick().await;
        let update = node.upgrade()?.sched.lock().local_update();
        match client
            .heartbeat(id, update.version, resources_to_wire(&update.used))
            .await
        {
            Ok(()) => missed = 0,
            Err(e @ ClusterError::Timeout { .. }) => {
                missed += 1;
                tracing::warn!(target: "ray::node", node = %id, error = %e, "node.heartbeat_missed");
                if missed >= MAX_MISSED {
                    return Some(e);
                }
            }
            Err(e) => return Some(e),
        }
    }
}

/// A GCS connection of the heartbeat's own, on this thread's runtime.
async fn connect(inner: &Inner, timeout: Duration) -> Result<GcsClient, ClusterError> {
    let gcs = inner.gcs_addr;
    let creds = ClusterCredentials::load(&inner.config.credentials_dir)
        .map_err(|source| ClusterError::Transport { addr: gcs, source })?;
    let mut config = EndpointConfig::new(Role::Node, control_plane_fingerprint());
    config.node = Some(inner.node);
    config.transport.handshake_timeout = timeout;
    let bind = std::net::SocketAddr::new(inner.config.bind_ip, 0);
    let endpoint = Endpoint::bind(bind, &creds, config)
        .map_err(|source| ClusterError::Transport { addr: gcs, source })?;
    GcsClient::connect(&endpoint, gcs, timeout).await
}
