//! Sans-IO scheduler of ray-rs.
//!
//! ray-sched owns the scheduling *decisions* of the system:
//! - the resource model: exact fixed-point amounts ([`Quantity`]) and named
//!   sets of them ([`ResourceSet`]: CPU, GPU, memory, custom names);
//! - the accounting of one node ([`NodeResources`]: total, used, available);
//! - node-local admission ([`LocalQueue`]): run now, queue by scheduling
//!   class, dispatch as resources come back, report infeasible requests at
//!   once;
//! - the cluster view ([`ClusterView`]: every node's resources and labels,
//!   versioned [`NodeUpdate`]s for gossip, an index by utilization) and the
//!   placement policies behind the [`Policy`] trait ([`HybridPolicy`],
//!   [`SpreadPolicy`], [`NodeAffinityPolicy`], [`LocalityPolicy`], or your
//!   own), chosen per request by [`SchedulingStrategy`];
//! - the bottom-up scheduler of one node ([`NodeScheduler`]): decides first
//!   for work submitted there, spills over a gossiped (possibly stale)
//!   [`ClusterView`], refuses spills its own state cannot take, and keeps
//!   waiting and infeasible work until it can be placed;
//! - placement groups ([`PlacementGroups`]): bundles reserved all or nothing
//!   (plan, prepare, commit) with Ray's PACK, SPREAD, STRICT_PACK and
//!   STRICT_SPREAD, then used by tasks as private pools.
//!
//! It is a pure library: the same inputs give the same decisions. It must not
//! know about I/O, tokio, threads or clocks (time and randomness come in as
//! parameters), object bytes, or any ray-core type; the runtime calls it and
//! carries out what it decides. Items in queues are opaque `T`s chosen by the
//! caller.
//!
//! ```
//! use ray_sched::{Admission, LocalQueue, Quantity, ResourceSet, GPU};
//!
//! let total = ResourceSet::cpu(Quantity::from_units(2)).with(GPU, Quantity::ONE);
//! let mut queue = LocalQueue::new(total);
//! let half_gpu = ResourceSet::cpu(Quantity::ONE).with(GPU, Quantity::from_f64(0.5)?);
//! assert!(matches!(queue.submit(half_gpu.clone(), "a"), Admission::Run("a")));
//! assert!(matches!(queue.submit(half_gpu.clone(), "b"), Admission::Run("b")));
//! assert!(matches!(queue.submit(half_gpu.clone(), "c"), Admission::Queued));
//!
//! queue.release(&half_gpu); // "a" finished
//! assert_eq!(queue.pop_runnable(), Some((half_gpu, "c")));
//! # Ok::<(), ray_sched::SchedError>(())
//! ```

mod error;
mod labels;
mod local_queue;
mod node;
mod node_scheduler;
mod placement_group;
pub mod policies;
mod policy;
mod quantity;
mod resources;
mod rng;
mod view;
pub mod wire;

pub use error::SchedError;
pub use labels::LabelSelector;
pub use local_queue::{Admission, Infeasible, LocalQueue, MAX_BYPASS};
pub use node::NodeResources;
pub use node_scheduler::{Action, BoxedPolicy, FailReason, NodeScheduler, Policies, Task};
pub use placement_group::{
    never_fits, PgError, PgState, PlacementGroups, PlacementStrategy, Plan, Prepared,
};
pub use policies::{HybridConfig, HybridPolicy, LocalityPolicy, NodeAffinityPolicy, SpreadPolicy};
pub use policy::{Decision, InfeasibleReport, Policy, Request, SchedulingStrategy};
pub use quantity::{Quantity, MAX_UNITS};
pub use resources::{ResourceIter, ResourceSet, CPU, GPU, MEMORY};
pub use rng::SplitMix64;
pub use view::{ClusterSummary, ClusterView, NodeUpdate, NodeView};
