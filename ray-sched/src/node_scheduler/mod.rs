//! The per-node, bottom-up scheduler: each node decides first for the work
//! submitted to it, and spills to other nodes using a gossiped, possibly
//! stale, view of them.
//!
//! Sans-IO: a [`NodeScheduler`] takes events (a task submitted, spilled
//! here, refused by its target, finished; gossip; nodes joining and
//! leaving; bundle reservations) and queues [`Action`]s for its driver,
//! which drains them with [`NodeScheduler::poll_action`] and carries them
//! out (start a task, send a message). It never reads a clock, never does
//! I/O, and draws randomness only from seeded policies.
//!
//! The protocol, as a node daemon (or the simulation test) drives it:
//! 1. [`NodeScheduler::submit`]: the policy of the task's strategy decides
//!    over this node's [`ClusterView`]. Here: the resources are acquired
//!    and [`Action::Run`] comes out. Elsewhere: [`Action::Spill`] comes
//!    out (the hybrid policy's random pick among the least-loaded nodes
//!    keeps a burst from piling onto one node before gossip catches up).
//!    Nowhere
//!    now: the task waits (a task with hard affinity to another node is
//!    sent there to wait, since only that node can run it). Nowhere ever:
//!    [`Action::Infeasible`] is
//!    reported at once and the task is kept, to be looked at again when a
//!    node joins.
//! 2. The target's [`NodeScheduler::receive_spill`] re-checks against its
//!    own, authoritative state: it runs the task or, if the sender's view
//!    was stale, answers [`Action::Refuse`] with its current
//!    [`NodeUpdate`].
//! 3. The sender's [`NodeScheduler::on_refused`] heals its view with that
//!    update and places the task again.
//! 4. [`NodeScheduler::finish`] gives the resources back and retries the
//!    waiting tasks that could use them.
//!
//! Waiting tasks are grouped by scheduling class (same resources and
//! strategy), FIFO within a class. A retry stops at a class head that
//! cannot be placed (the rest of the class cannot either). No starvation:
//! younger tasks that ask for a resource the oldest waiting task also asks
//! for may be placed on nodes it could use only
//! [`MAX_BYPASS`](crate::MAX_BYPASS) times while it waits; after that they
//! are held back there until it is placed. Tasks sharing no resource with
//! it (actors asking for nothing, CPU work while it waits for a GPU) cannot
//! delay it and are never held back. Spills received from other nodes are
//! not held back: their senders' queues keep their own order.

mod bundles;
mod policies;
mod task;
mod wait_queue;

use std::collections::{BTreeMap, VecDeque};

use hashbrown::HashMap;
use ray_proto::{NodeId, PlacementGroupId, TaskId};

use crate::policy::{Decision, InfeasibleReport, Request, SchedulingStrategy};
use crate::resources::ResourceSet;
use crate::view::{ClusterView, NodeUpdate};

use bundles::{Directory, LocalBundles};
pub use policies::{BoxedPolicy, Policies};
pub use task::{Action, FailReason, Task};
use wait_queue::WaitQueue;

/// A task running on this node.
#[derive(Debug)]
struct Running {
    resources: ResourceSet,
    /// The bundle it runs in, if any.
    bundle: Option<(PlacementGroupId, usize)>,
    /// It gave its resources back while blocked.
    blocked: bool,
}

/// What one placement attempt came to.
enum Outcome<T> {
    Placed,
    /// Nowhere now (or held back for an older task).
    Wait(Task<T>),
    Infeasible(Task<T>, InfeasibleReport),
}

/// The bottom-up scheduler of one node (see the module docs for the
/// protocol).
///
/// Its own node's entry in the view is the truth about this node: every
/// acquire and release on it goes through the view, whose version numbers
/// then make [`NodeScheduler::local_update`] the gossip message. Other
/// nodes' entries are as last gossiped (or as a refusal reported them).
///
/// Invariant: this node's `used` never exceeds its `total`, except after
/// [`NodeScheduler::unblock`] (a task resuming after it lent its resources
/// while blocked).
pub struct NodeScheduler<T> {
    id: NodeId,
    view: ClusterView,
    policies: Policies,
    waiting: WaitQueue<T>,
    /// Reported infeasible, oldest first; looked at again when nodes join.
    infeasible: Vec<Task<T>>,
    running: HashMap<TaskId, Running>,
    bundles: LocalBundles<T>,
    directory: Directory,
    /// Placement-group tasks whose bundle's node is not known yet.
    pg_waiting: Vec<Task<T>>,
    out: VecDeque<Action<T>>,
    /// Reused by retries so they do not allocate.
    scratch: Vec<(u64, usize)>,
    /// Some task was held back for the oldest waiting one; when that one is
    /// placed, everything waiting is retried (not just what the node that
    /// changed could take).
    held_back: bool,
}

impl<T> std::fmt::Debug for NodeScheduler<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeScheduler")
            .field("id", &self.id)
            .field("nodes", &self.view.len())
            .field("running", &self.running.len())
            .field("waiting", &self.waiting.len())
            .field("infeasible", &self.infeasible.len())
            .field("policies", &self.policies)
            .finish_non_exhaustive()
    }
}

/// Whether the task `oldest` could ever use node `node` (so placing younger
/// work there passes it over).
fn could_use<T>(oldest: &Task<T>, node: NodeId, view: &ClusterView) -> bool {
    if let SchedulingStrategy::NodeAffinity {
        node: want,
        soft: false,
    } = oldest.strategy
    {
        if want != node {
            return false;
        }
    }
    view.node(node)
        .is_some_and(|n| n.resources().is_feasible(&oldest.resources))
}

impl<T> NodeScheduler<T> {
    /// The scheduler of node `id`, starting from `view` (which must hold
    /// `id`: its entry becomes the truth about this node) and deciding with
    /// `policies`.
    ///
    /// # Panics
    /// If `view` does not hold `id`.
    pub fn new(id: NodeId, view: ClusterView, policies: Policies) -> Self {
        assert!(
            view.node(id).is_some(),
            "the view must hold the scheduler's own node {id}"
        );
        Self {
            id,
            view,
            policies,
            waiting: WaitQueue::new(),
            infeasible: Vec::new(),
            running: HashMap::new(),
            bundles: BTreeMap::new(),
            directory: Directory::default(),
            pg_waiting: Vec::new(),
            out: VecDeque::new(),
            scratch: Vec::new(),
            held_back: false,
        }
    }

    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.id
    }

    /// The cluster as this node sees it.
    pub fn view(&self) -> &ClusterView {
        &self.view
    }

    /// The next action to carry out, oldest first; `None` when there is
    /// none. Drain it after every call.
    pub fn poll_action(&mut self) -> Option<Action<T>> {
        self.out.pop_front()
    }

    /// Number of tasks running here (in the node's pool or in bundles).
    pub fn running_len(&self) -> usize {
        self.running.len()
    }

    /// Number of tasks waiting to be placed (including placement-group
    /// tasks waiting for their bundle's location or room).
    pub fn waiting_len(&self) -> usize {
        self.waiting.len()
            + self.pg_waiting.len()
            + self.bundles.values().map(|b| b.queue.len()).sum::<usize>()
    }

    /// The resource shapes of the waiting tasks, one per scheduling class
    /// (in no particular order).
    ///
    /// For load reporting: a node daemon sends them with its update to the
    /// GCS (as Ray reports "resource load by shape"), which can answer with
    /// fresh updates of nodes that fit them, so a node whose view went stale
    /// learns where its waiting work can go.
    pub fn waiting_demands(&self) -> impl Iterator<Item = &ResourceSet> + '_ {
        self.waiting
            .classes
            .iter()
            .filter(|c| !c.items.is_empty())
            .map(|c| &c.resources)
    }

    /// Number of tasks reported infeasible and kept.
    pub fn infeasible_len(&self) -> usize {
        self.infeasible.len()
    }

    /// Whether `task` is running here.
    pub fn is_running(&self, task: TaskId) -> bool {
        self.running.contains_key(&task)
    }

    /// This node's state as gossip: send it to peers, who
    /// [`apply_gossip`](NodeScheduler::apply_gossip) it.
    pub fn local_update(&self) -> NodeUpdate {
        self.view
            .update_for(self.id)
            .expect("the scheduler's own node stays in its view")
    }

    /// Offers a task submitted on this node. See the module docs for what
    /// comes out.
    pub fn submit(&mut self, task: Task<T>) {
        if matches!(task.strategy, SchedulingStrategy::PlacementGroup { .. }) {
            return self.place_pg(task);
        }
        if self.waiting.class_waiting(&task) {
            // FIFO within the class: an older one of its kind waits.
            return self.waiting.push_back(task);
        }
        match self.try_place(task, None) {
            Outcome::Placed => {}
            Outcome::Wait(task) => self.waiting.push_back(task),
            Outcome::Infeasible(task, report) => self.report_infeasible(task, report),
        }
    }

    /// A task spilled here by `from`. Runs it if it fits this node's own
    /// state now, else refuses it back to `from` with this node's update.
    /// Tasks only this node may run wait here instead: a hard affinity to
    /// this node is queued like a local submission, a placement-group task
    /// in its bundle (and refused if the bundle is not here).
    pub fn receive_spill(&mut self, from: NodeId, task: Task<T>) {
        if let SchedulingStrategy::NodeAffinity { node, soft: false } = task.strategy {
            if node == self.id {
                // Nowhere else could run it: it waits here if it must.
                return self.submit(task);
            }
        }
        if let SchedulingStrategy::PlacementGroup { group, bundle } = task.strategy {
            if let Some(key) = self.local_bundle_for(group, bundle, &task.resources) {
                return self.bundle_submit(key, task);
            }
        } else if self.view.try_acquire(self.id, &task.resources) {
            return self.start(task, None);
        }
        let update = self.local_update();
        self.out.push_back(Action::Refuse {
            to: from,
            task,
            update,
        });
    }

    /// `from` refused a task this node spilled to it, with its `update`.
    /// The view heals and the task is placed again, ahead of younger
    /// waiting work.
    pub fn on_refused(&mut self, from: NodeId, task: Task<T>, update: &NodeUpdate) {
        if let SchedulingStrategy::PlacementGroup { group, .. } = task.strategy {
            self.directory.forget_node(from, Some(group));
        }
        // An update that is not newer than our copy means we already know
        // a state at least as recent as the refusal.
        self.view.apply_update(update);
        self.replace(task);
    }

    /// A spill to `to` could not be delivered (it left or is unreachable):
    /// the task is placed again and `to` counts as full until gossip says
    /// otherwise. A task with hard affinity to `to` waits here instead (it
    /// is reported infeasible once [`node_removed`](Self::node_removed)
    /// says `to` left).
    ///
    /// If `to` was removed already (its failure came back after its
    /// removal), nothing would wake such a task again: it is placed again
    /// at once, which reports it infeasible.
    pub fn spill_failed(&mut self, to: NodeId, task: Task<T>) {
        self.directory.forget_node(to, None);
        self.mark_full(to);
        if task.strategy
            == (SchedulingStrategy::NodeAffinity {
                node: to,
                soft: false,
            })
            && self.view.node(to).is_some()
        {
            // Only `to` can run it: sending it back there at once would
            // bounce again. It waits until `to` is heard from or removed.
            return self.waiting.push_front(task);
        }
        self.replace(task);
    }

    /// The task ended: its resources go back (to its bundle, for a
    /// placement-group task) and waiting work that could use them is
    /// retried. Returns `false` if `task` was not running here.
    pub fn finish(&mut self, task: TaskId) -> bool {
        let Some(r) = self.running.remove(&task) else {
            return false;
        };
        match r.bundle {
            Some(key) => {
                if !r.blocked {
                    if let Some(b) = self.bundles.get_mut(&key) {
                        b.used.sub_saturating(&r.resources);
                    }
                }
                self.dispatch_bundles(key.0);
            }
            None => {
                if !r.blocked {
                    self.view.release(self.id, &r.resources);
                }
                self.dispatch(Some(self.id));
            }
        }
        true
    }

    /// The running `task` blocks (waits on `get`): it lends its resources
    /// back, and waiting work may use them. Returns whether it was running
    /// and not blocked already.
    pub fn block(&mut self, task: TaskId) -> bool {
        let Some(r) = self.running.get_mut(&task) else {
            return false;
        };
        if r.blocked {
            return false;
        }
        r.blocked = true;
        match r.bundle {
            Some(key) => {
                if let Some(b) = self.bundles.get_mut(&key) {
                    b.used.sub_saturating(&r.resources);
                }
                self.dispatch_bundles(key.0);
            }
            None => {
                self.view.release(self.id, &r.resources);
                self.dispatch(Some(self.id));
            }
        }
        true
    }

    /// The blocked `task` resumes: it takes its resources back without
    /// waiting, so `used` may exceed `total` until something finishes (the
    /// one documented exception to "never overcommitted"). Returns whether
    /// it was blocked.
    pub fn unblock(&mut self, task: TaskId) -> bool {
        let Some(r) = self.running.get_mut(&task) else {
            return false;
        };
        if !r.blocked {
            return false;
        }
        r.blocked = false;
        match r.bundle {
            Some(key) => {
                if let Some(b) = self.bundles.get_mut(&key) {
                    b.used.add_assign(&r.resources);
                }
            }
            None => self.view.acquire_forced(self.id, &r.resources),
        }
        true
    }

    /// Gossip about another node. Applied if newer than what the view
    /// holds; then waiting work that the node could now take is retried.
    /// Updates about this node itself are ignored (its own state is the
    /// truth).
    pub fn apply_gossip(&mut self, update: &NodeUpdate) {
        if update.node != self.id && self.view.apply_update(update) {
            self.dispatch(Some(update.node));
        }
    }

    /// A node joined. Tasks reported infeasible are looked at again (some
    /// may now be placed), then every waiting task.
    pub fn node_added(&mut self, id: NodeId, total: ResourceSet, labels: BTreeMap<String, String>) {
        if !self.view.add_node(id, total, labels) {
            return;
        }
        let infeasible = std::mem::take(&mut self.infeasible);
        for task in infeasible {
            match self.try_place(task, Some(0)) {
                Outcome::Placed => {}
                Outcome::Wait(task) => self.waiting.push_front(task),
                Outcome::Infeasible(task, _) => self.infeasible.push(task),
            }
        }
        self.dispatch(None);
    }

    /// A node left. Waiting tasks only it could run are reported infeasible
    /// now; bundles it held are forgotten (their tasks wait for the group to
    /// be placed again). Tasks that ran there are the caller's business.
    /// This node's own id is ignored.
    pub fn node_removed(&mut self, id: NodeId) {
        if id == self.id || !self.view.remove_node(id) {
            return;
        }
        self.directory.forget_node(id, None);
        self.dispatch(None);
    }

    /// Hands back every task not running (waiting, infeasible, queued for a
    /// bundle), oldest first within each kind, for a node shutting down.
    pub fn drain(&mut self) -> Vec<Task<T>> {
        let mut all = self.waiting.drain();
        all.append(&mut self.infeasible);
        all.append(&mut self.pg_waiting);
        for b in self.bundles.values_mut() {
            all.extend(b.queue.drain(..));
        }
        all
    }

    // --- placement -------------------------------------------------------

    /// Asks the strategy's policy and carries out a `Node` answer. `seq` is
    /// the task's queue number if it came from the wait queue (`Some(0)`:
    /// counts as older than anything waiting), `None` for a newcomer.
    fn try_place(&mut self, task: Task<T>, seq: Option<u64>) -> Outcome<T> {
        let decision = {
            let req = Request {
                resources: &task.resources,
                strategy: &task.strategy,
                local: self.id,
                arg_bytes: &task.arg_bytes,
            };
            let policy = self.policies.for_strategy(&task.strategy);
            if task.labels.is_empty() {
                policy.decide(&req, &self.view)
            } else {
                // The policy decides among the nodes the labels allow: the
                // preferred ones first, the others if none can take it now.
                let allowed = self.view.subset(|n| task.labels.allows(n.labels()));
                let preferred = (!task.labels.soft.is_empty())
                    .then(|| allowed.subset(|n| task.labels.prefers(n.labels())))
                    .map(|view| policy.decide(&req, &view));
                match preferred {
                    Some(Decision::Node(node)) => Decision::Node(node),
                    _ => policy.decide(&req, &allowed),
                }
            }
        };
        match decision {
            Decision::Node(node) => {
                if !self.admits(seq, node, &task.resources) {
                    return Outcome::Wait(task);
                }
                self.assign(node, task)
            }
            Decision::Wait => {
                // Only one node can ever run it: queue it there rather than
                // here, so it starts as soon as that node has room instead of
                // when gossip says so.
                if let SchedulingStrategy::NodeAffinity { node, soft: false } = task.strategy {
                    if node != self.id && self.view.node(node).is_some() {
                        self.out.push_back(Action::Spill { to: node, task });
                        return Outcome::Placed;
                    }
                }
                Outcome::Wait(task)
            }
            Decision::Infeasible(report) => Outcome::Infeasible(task, report),
        }
    }

    /// Whether a task with queue number `seq` asking for `resources` may go
    /// to `node` while older work waits (the bypass bound). A task that
    /// takes nothing the oldest asks for (an actor holding no resources, a
    /// CPU task while the oldest waits for a custom resource) cannot delay
    /// it and is not counted: 1,000 actors created with spread stalled
    /// behind one waiting 1-CPU task until gossip placed it.
    fn admits(&mut self, seq: Option<u64>, node: NodeId, resources: &ResourceSet) -> bool {
        let Some((oldest_seq, oldest)) = self.waiting.oldest() else {
            return true;
        };
        if seq.is_some_and(|s| s <= oldest_seq)
            || !could_use(oldest, node, &self.view)
            || !resources.overlaps(&oldest.resources)
        {
            return true;
        }
        let admitted = self.waiting.note_bypass(oldest_seq);
        self.held_back |= !admitted;
        admitted
    }

    fn assign(&mut self, node: NodeId, task: Task<T>) -> Outcome<T> {
        if node == self.id {
            if !self.view.try_acquire(self.id, &task.resources) {
                // Only a custom policy can name a local node that does not fit.
                return Outcome::Wait(task);
            }
            self.start(task, None);
            return Outcome::Placed;
        }
        if self.view.node(node).is_none() {
            return Outcome::Wait(task);
        }
        // No reservation in our copy of the target: `ClusterView` has no
        // unversioned overlay, and acquiring there would bump our copy's
        // version past the target's own, so its real updates would be
        // ignored until it caught up. The hybrid policy's random pick among
        // the least-loaded nodes spreads a burst instead, and a refusal
        // brings the target's true state back.
        self.out.push_back(Action::Spill { to: node, task });
        Outcome::Placed
    }

    fn start(&mut self, task: Task<T>, bundle: Option<(PlacementGroupId, usize)>) {
        self.running.insert(
            task.id,
            Running {
                resources: task.resources.clone(),
                bundle,
                blocked: false,
            },
        );
        self.out.push_back(Action::Run(task));
    }

    fn report_infeasible(&mut self, task: Task<T>, report: InfeasibleReport) {
        self.out.push_back(Action::Infeasible {
            task: task.id,
            report,
        });
        self.infeasible.push(task);
    }

    /// Places a task handed back (refused, undeliverable) ahead of younger
    /// waiting work.
    fn replace(&mut self, task: Task<T>) {
        if matches!(task.strategy, SchedulingStrategy::PlacementGroup { .. }) {
            return self.place_pg(task);
        }
        match self.try_place(task, Some(0)) {
            Outcome::Placed => {}
            Outcome::Wait(task) => self.waiting.push_front(task),
            Outcome::Infeasible(task, report) => self.report_infeasible(task, report),
        }
    }

    /// Makes `node` look full in the view until newer gossip arrives.
    fn mark_full(&mut self, node: NodeId) {
        if node == self.id {
            return;
        }
        if let Some(n) = self.view.node(node) {
            let available = n.resources().available();
            if !available.is_empty() {
                self.view.acquire_forced(node, &available);
            }
        }
    }

    /// Retries waiting tasks, oldest class head first. With `hint`, only
    /// classes whose head fits on that node now (it is the one whose state
    /// changed) are tried: a head that had to wait can only be placed now
    /// if some node gained room.
    fn dispatch(&mut self, hint: Option<NodeId>) {
        if self.waiting.is_empty() {
            return;
        }
        let oldest_before = self.waiting.oldest().map(|(seq, _)| seq);
        if hint.is_none() {
            self.held_back = false;
        }
        let mut order = std::mem::take(&mut self.scratch);
        self.waiting.heads_in_order(&mut order);
        for &(_, class) in &order {
            while let Some((_, head)) = self.waiting.classes[class].items.front() {
                if let Some(h) = hint {
                    let useful = self
                        .view
                        .node(h)
                        .is_some_and(|n| n.resources().can_acquire(&head.resources));
                    if !useful {
                        break;
                    }
                }
                let (seq, task) = self.waiting.pop_head(class).expect("head seen above");
                match self.try_place(task, Some(seq)) {
                    Outcome::Placed => {}
                    Outcome::Wait(task) => {
                        self.waiting.reinsert(seq, task);
                        break;
                    }
                    Outcome::Infeasible(task, report) => self.report_infeasible(task, report),
                }
            }
        }
        self.waiting.compact();
        self.scratch = order;
        if self.held_back && self.waiting.oldest().map(|(seq, _)| seq) != oldest_before {
            // The task others were held back for is placed: retry them all.
            // The oldest changes at most once per waiting task, so this ends.
            self.dispatch(None);
        }
    }
}

#[cfg(test)]
mod tests;
