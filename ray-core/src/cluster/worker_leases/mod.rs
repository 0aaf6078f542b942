//! The worker's side of leases as a sans-IO state machine: what runs here
//! under which lease, and what the node must hear of it. Events in,
//! [`LeaseAction`]s out; no tokio, no clock, no I/O. The shell in
//! `cluster::core::serve` (and `ClusterCore::task_blocked`) runs the work
//! through the process's runtime and sends what the machine asks for.
//!
//! What it owns, per worker process:
//! - each pushed task running here, with the lease it runs under;
//! - per lease, the tasks blocked right now in a `get` or `wait`: the
//!   first to block lends the lease's resources back to the node, the last
//!   to resume (or to end while blocked) takes them again, so nested tasks
//!   cannot deadlock a node whose every CPU is leased to waiting parents;
//! - each actor hosted here, with its lease (and the shell's handle on
//!   it): when the actor goes (killed, failed to start), its lease goes
//!   back to the node, once.
//!
//! Guarantees (checked by the simulation for thousands of seeds): the node
//! hears a lease blocked exactly while at least one of its tasks is
//! blocked, in alternating notices that start with "blocked"; every lease
//! ends unblocked once its tasks end; each hosted actor's lease is given
//! back exactly once, and only a hosted actor's.
//!
//! It must not depend on tokio, the transport or the runtime: the actor
//! handle is a type parameter it carries without looking inside.

#[cfg(test)]
mod sim;

use std::collections::VecDeque;

use hashbrown::{HashMap, HashSet};
use ray_proto::{ActorId, TaskId};

/// What the shell must tell the node, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LeaseAction {
    /// The lease's work is blocked (`true`: lend its resources back) or
    /// runs again (`false`: take them).
    Blocked {
        /// The lease.
        lease: TaskId,
        /// Blocked or running again.
        blocked: bool,
    },
    /// The lease's actor went: give the lease back.
    Return {
        /// The lease.
        lease: TaskId,
    },
}

/// Leases of one worker process; see the module docs. `A`: the shell's
/// handle on a hosted actor.
pub(crate) struct WorkerLeases<A> {
    /// Pushed tasks running here (by their local id) and their lease.
    running: HashMap<TaskId, TaskId>,
    /// Tasks blocked now.
    blocked_tasks: HashSet<TaskId>,
    /// Per lease with blocked tasks, how many.
    blocked: HashMap<TaskId, u32>,
    /// Actors hosted here: their lease and the shell's handle.
    hosted: HashMap<ActorId, (TaskId, A)>,
    actions: VecDeque<LeaseAction>,
}

impl<A> Default for WorkerLeases<A> {
    fn default() -> Self {
        Self {
            running: HashMap::new(),
            blocked_tasks: HashSet::new(),
            blocked: HashMap::new(),
            hosted: HashMap::new(),
            actions: VecDeque::new(),
        }
    }
}

impl<A> WorkerLeases<A> {
    /// The next thing to tell the node, if any.
    pub(crate) fn poll(&mut self) -> Option<LeaseAction> {
        self.actions.pop_front()
    }

    /// Pushed task `task` (its local id) starts here under `lease`.
    pub(crate) fn task_started(&mut self, task: TaskId, lease: TaskId) {
        self.running.insert(task, lease);
    }

    /// Task `task` ended (a task still marked blocked resumes first).
    pub(crate) fn task_ended(&mut self, task: TaskId) {
        if !self.blocked_tasks.is_empty() {
            self.task_blocked(task, false);
        }
        self.running.remove(&task);
    }

    /// Task `task` blocked in a `get` or `wait` (`true`) or resumed. Only
    /// pushed tasks count (an actor's lease is not lent back); a repeated
    /// notice changes nothing.
    pub(crate) fn task_blocked(&mut self, task: TaskId, blocked: bool) {
        let Some(&lease) = self.running.get(&task) else {
            return;
        };
        let changed = if blocked {
            self.blocked_tasks.insert(task)
        } else {
            self.blocked_tasks.remove(&task)
        };
        if !changed {
            return;
        }
        let n = self.blocked.entry(lease).or_insert(0);
        let notice = if blocked {
            *n += 1;
            *n == 1
        } else {
            *n = n.saturating_sub(1);
            *n == 0
        };
        if *n == 0 {
            self.blocked.remove(&lease);
        }
        if notice {
            self.actions
                .push_back(LeaseAction::Blocked { lease, blocked });
        }
    }

    /// Actor `actor` lives here under `lease`, with the shell's handle.
    /// Returns the handle it replaces, if any, for the shell to drop
    /// outside its lock.
    #[must_use]
    pub(crate) fn actor_hosted(&mut self, actor: ActorId, lease: TaskId, handle: A) -> Option<A> {
        let (old, replaced) = self.hosted.insert(actor, (lease, handle))?;
        if old != lease {
            // (An owner never creates one actor twice in one process; a
            // lease replaced is not leaked all the same.)
            self.actions.push_back(LeaseAction::Return { lease: old });
        }
        Some(replaced)
    }

    /// The handle of hosted actor `actor`, if it lives here.
    pub(crate) fn actor(&self, actor: ActorId) -> Option<&A> {
        self.hosted.get(&actor).map(|(_, a)| a)
    }

    /// Actor `actor` went (killed, or failed to start): its lease goes
    /// back. Returns its handle if it was hosted here.
    pub(crate) fn actor_gone(&mut self, actor: ActorId) -> Option<A> {
        let (lease, handle) = self.hosted.remove(&actor)?;
        self.actions.push_back(LeaseAction::Return { lease });
        Some(handle)
    }

    /// How many pushed tasks run here and actors live here.
    #[cfg(test)]
    pub(crate) fn len(&self) -> (usize, usize) {
        (self.running.len(), self.hosted.len())
    }
}
