//! What a node scheduler is given (a [`Task`]) and what it asks its driver
//! to do ([`Action`]).

use ray_proto::{NodeId, PlacementGroupId, TaskId};

use crate::labels::LabelSelector;
use crate::policy::{InfeasibleReport, SchedulingStrategy};
use crate::resources::ResourceSet;
use crate::view::NodeUpdate;

#[cfg(doc)]
use super::NodeScheduler;

/// One unit of work to place: what it needs, how it wants to be placed,
/// where its arguments are, and the caller's opaque item.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Task<T> {
    /// The task's id; unique among the tasks a scheduler holds.
    pub id: TaskId,
    /// Resources it holds while it runs.
    pub resources: ResourceSet,
    /// How it wants to be placed.
    pub strategy: SchedulingStrategy,
    /// Bytes of its arguments held by each node (for locality).
    pub arg_bytes: Vec<(NodeId, u64)>,
    /// The node labels it needs and prefers.
    pub labels: LabelSelector,
    /// The caller's payload, handed back in actions.
    pub item: T,
}

impl<T> Task<T> {
    /// A task with no argument locations.
    pub fn new(id: TaskId, resources: ResourceSet, strategy: SchedulingStrategy, item: T) -> Self {
        Self {
            id,
            resources,
            strategy,
            arg_bytes: Vec::new(),
            labels: LabelSelector::default(),
            item,
        }
    }
}

/// Why a task was given up rather than kept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FailReason {
    /// Its placement group was removed.
    PlacementGroupRemoved(PlacementGroupId),
    /// It asks for more than its bundle (every bundle of the group, for
    /// any-bundle tasks) holds, so it can never run inside it.
    BundleTooSmall {
        /// The group.
        group: PlacementGroupId,
        /// The bundle asked for; `None` for any.
        bundle: Option<usize>,
    },
}

/// What a [`NodeScheduler`] asks its driver to do.
#[derive(Debug)]
#[must_use = "an action must be carried out"]
pub enum Action<T> {
    /// Start the task on this node: its resources are acquired. Call
    /// [`NodeScheduler::finish`] with its id when it ends.
    Run(Task<T>),
    /// Send the task to `to`, whose [`NodeScheduler::receive_spill`] takes
    /// it. If `to` cannot be reached (it left), hand it back with
    /// [`NodeScheduler::spill_failed`].
    Spill {
        /// The target node.
        to: NodeId,
        /// The task.
        task: Task<T>,
    },
    /// Hand a spilled task back to its sender `to`, whose
    /// [`NodeScheduler::on_refused`] takes it with `update`.
    Refuse {
        /// The node that spilled it here.
        to: NodeId,
        /// The task.
        task: Task<T>,
        /// This node's current state, so the sender's view heals.
        update: NodeUpdate,
    },
    /// No node of the cluster could ever run the task. Reported once; the
    /// scheduler keeps the task and places it (a later `Run` or `Spill`) if
    /// a node that can joins.
    Infeasible {
        /// The task.
        task: TaskId,
        /// What it asked for, what the cluster has, and why.
        report: InfeasibleReport,
    },
    /// The task can never run and is handed back.
    Failed {
        /// The task.
        task: Task<T>,
        /// Why.
        reason: FailReason,
    },
}
