//! Global Control Store of ray-rs: node, job, actor and worker tables, the
//! internal KV, and pub/sub of table changes, as a sans-IO state machine.
//!
//! ray-gcs owns the cluster's metadata and the rules that keep it consistent:
//! node health (heartbeats, timeouts, death), the job lifecycle, the actor
//! state machine (named and namespaced actors, detached actors, restart
//! budgets, actors dying with their job or node), and recovery of all of it
//! from a [`Storage`] after a restart. [`Gcs`] is the whole of it: calls go
//! in, tables change, rows are written through to storage, and events queue
//! up for subscribers to poll.
//!
//! [`service`] is the GCS service's request logic on top of the tables:
//! `handle(state, request, now) -> Action`, one wire request in, one reply
//! (or raw bytes to move) out; ray-core's GCS server is the async shell
//! that serves it over QUIC.
//!
//! It must not know about I/O, threads or clocks: there is no tokio, quinn or
//! `Instant::now` here, and time comes in as a `now: Duration` since an epoch
//! the caller picks. It must not know about ray-core (the runtime drives it,
//! in-process behind a mutex or inside the GCS service) nor about object
//! bytes, which live in the object store. Resource amounts are ray-sched's
//! [`ResourceSet`](ray_sched::ResourceSet), stored but never interpreted.
//!
//! ```
//! use std::collections::BTreeMap;
//! use std::time::Duration;
//! use ray_gcs::{Channel, Gcs, GcsEvent, NodeInfo};
//! use ray_proto::NodeId;
//! use ray_sched::{Quantity, ResourceSet};
//!
//! let mut gcs = Gcs::in_memory();
//! let watcher = gcs.subscribe(Channel::Node);
//! let node = NodeInfo {
//!     id: NodeId(1),
//!     address: "10.0.0.1:7000".into(),
//!     resources: ResourceSet::cpu(Quantity::from_units(8)),
//!     labels: BTreeMap::new(),
//! };
//! gcs.register_node(node, Duration::ZERO)?;
//! gcs.heartbeat(NodeId(1), Duration::from_secs(5))?;
//! assert!(gcs.check_health(Duration::from_secs(15)).is_empty());
//! assert_eq!(gcs.check_health(Duration::from_secs(16)), vec![NodeId(1)]);
//!
//! let events = gcs.poll_events(watcher);
//! assert!(matches!(&events[..], [GcsEvent::Node(up), GcsEvent::Node(down)]
//!     if up.is_alive() && !down.is_alive()));
//! # Ok::<(), ray_gcs::GcsError>(())
//! ```

mod actors;
mod codec;
mod error;
#[cfg(test)]
mod fixtures;
mod gcs;
mod jobs;
mod kv;
mod nodes;
mod pubsub;
pub mod service;
mod storage;
mod workers;

pub use actors::{ActorInfo, ActorRow, ActorState};
pub use error::GcsError;
pub use gcs::{Gcs, GcsConfig};
pub use jobs::{JobInfo, JobRow, JobState};
pub use nodes::{HealthConfig, NodeInfo, NodeRow, NodeState};
pub use pubsub::{Channel, GcsEvent, SubscriberId};
pub use storage::{MemoryStorage, Storage, Table};
pub use workers::{WorkerInfo, WorkerRow};
