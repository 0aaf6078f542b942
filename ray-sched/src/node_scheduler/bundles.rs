//! The node side of placement groups: bundles reserved on this node (each a
//! private pool for the tasks scheduled into it), and where the bundles of
//! the groups this node submits to live.
//!
//! Reserving a bundle is two-phase across nodes: whoever places the group
//! (the GCS, driving [`PlacementGroups`](crate::PlacementGroups) against its
//! own view) asks each chosen node to *prepare* its bundle, which acquires
//! the bundle's resources from the node's authoritative state or fails; then
//! it *commits* every bundle, or *aborts* the prepared ones. Tasks use a
//! bundle only once it is committed.

use std::collections::{BTreeMap, VecDeque};

use ray_proto::{NodeId, PlacementGroupId};

use crate::resources::ResourceSet;

use super::{Action, FailReason, NodeScheduler, Task};
use crate::policy::SchedulingStrategy;

/// One bundle reserved on this node.
#[derive(Debug)]
pub(super) struct LocalBundle<T> {
    pub(super) total: ResourceSet,
    pub(super) used: ResourceSet,
    pub(super) committed: bool,
    /// Tasks waiting for room in this bundle (or, for "any bundle" tasks,
    /// in any bundle of the group on this node), oldest first.
    pub(super) queue: VecDeque<Task<T>>,
}

impl<T> LocalBundle<T> {
    pub(super) fn fits_now(&self, req: &ResourceSet) -> bool {
        self.committed && req.fits_on_top_of(&self.used, &self.total)
    }
}

/// Bundles on this node, by `(group, index)`, so a group's bundles are a
/// contiguous range.
pub(super) type LocalBundles<T> = BTreeMap<(PlacementGroupId, usize), LocalBundle<T>>;

/// Where the bundles of groups this node submits into are: `(node, bundle
/// resources)` per index, `None` while unknown.
#[derive(Debug, Default)]
pub(super) struct Directory {
    groups: BTreeMap<PlacementGroupId, Vec<Option<(NodeId, ResourceSet)>>>,
}

/// Where a placement-group task should go, as far as the directory knows.
pub(super) enum Route {
    /// The bundle (or a bundle that can hold the task) is on this node.
    Node(NodeId),
    /// No bundle of the group could ever hold the task.
    TooBig,
    /// The group or the bundle's place is not known yet.
    Unknown,
}

impl Directory {
    pub(super) fn place(
        &mut self,
        group: PlacementGroupId,
        index: usize,
        node: NodeId,
        resources: ResourceSet,
    ) {
        let slots = self.groups.entry(group).or_default();
        if slots.len() <= index {
            slots.resize(index + 1, None);
        }
        slots[index] = Some((node, resources));
    }

    pub(super) fn forget_group(&mut self, group: PlacementGroupId) {
        self.groups.remove(&group);
    }

    /// Forgets every bundle location on `node` (it left, or refused).
    pub(super) fn forget_node(&mut self, node: NodeId, group: Option<PlacementGroupId>) {
        let clear = |slots: &mut Vec<Option<(NodeId, ResourceSet)>>| {
            for slot in slots.iter_mut() {
                if slot.as_ref().is_some_and(|(n, _)| *n == node) {
                    *slot = None;
                }
            }
        };
        match group {
            Some(g) => {
                if let Some(slots) = self.groups.get_mut(&g) {
                    clear(slots);
                }
            }
            None => self.groups.values_mut().for_each(clear),
        }
    }

    /// The node to send a task into `group` (bundle `index`, or any) to.
    /// `local` is preferred when it holds a suitable bundle.
    pub(super) fn route(
        &self,
        group: PlacementGroupId,
        index: Option<usize>,
        req: &ResourceSet,
        local: NodeId,
    ) -> Route {
        let Some(slots) = self.groups.get(&group) else {
            return Route::Unknown;
        };
        match index {
            Some(i) => match slots.get(i) {
                Some(Some((node, res))) if req.is_subset_of(res) => Route::Node(*node),
                Some(Some(_)) => Route::TooBig,
                _ => Route::Unknown,
            },
            None => {
                let mut fitting = slots
                    .iter()
                    .flatten()
                    .filter(|(_, res)| req.is_subset_of(res));
                let Some(first) = fitting.next() else {
                    // Only "too big" when every bundle is known.
                    return if slots.iter().all(Option::is_some) {
                        Route::TooBig
                    } else {
                        Route::Unknown
                    };
                };
                let local_one = std::iter::once(first)
                    .chain(fitting)
                    .find(|(n, _)| *n == local);
                Route::Node(local_one.unwrap_or(first).0)
            }
        }
    }
}

/// The placement-group side of a node scheduler: bundles held here, and
/// routing tasks submitted here into groups.
impl<T> NodeScheduler<T> {
    /// Phase two of a placement-group reservation, on the node chosen for
    /// bundle `index`: acquires `resources` from this node's own state.
    /// Returns `false` (nothing held) if they do not fit now. Preparing a
    /// bundle already held here returns `true` and changes nothing.
    pub fn prepare_bundle(
        &mut self,
        group: PlacementGroupId,
        index: usize,
        resources: ResourceSet,
    ) -> bool {
        if self.bundles.contains_key(&(group, index)) {
            return true;
        }
        if !self.view.try_acquire(self.id, &resources) {
            return false;
        }
        self.bundles.insert(
            (group, index),
            LocalBundle {
                total: resources,
                used: ResourceSet::new(),
                committed: false,
                queue: VecDeque::new(),
            },
        );
        true
    }

    /// Phase three: the prepared bundle becomes usable by tasks. Returns
    /// whether it was prepared here.
    pub fn commit_bundle(&mut self, group: PlacementGroupId, index: usize) -> bool {
        let Some(b) = self.bundles.get_mut(&(group, index)) else {
            return false;
        };
        b.committed = true;
        self.dispatch_bundles(group);
        true
    }

    /// Gives a prepared (or committed) bundle's resources back to this
    /// node: the reservation was aborted, or the group removed. Tasks
    /// queued for it are handed back as [`Action::Failed`]; tasks running
    /// in it are the caller's to stop (their `finish` then releases
    /// nothing). Returns whether the bundle was here.
    pub fn release_bundle(&mut self, group: PlacementGroupId, index: usize) -> bool {
        let Some(b) = self.bundles.remove(&(group, index)) else {
            return false;
        };
        self.view.release(self.id, &b.total);
        for task in b.queue {
            self.out.push_back(Action::Failed {
                task,
                reason: FailReason::PlacementGroupRemoved(group),
            });
        }
        self.dispatch(Some(self.id));
        true
    }

    /// Where bundle `index` of `group` is reserved (`node`) and what it
    /// holds, for tasks submitted here into the group. Placement-group
    /// tasks waiting for it are placed.
    pub fn bundle_placed(
        &mut self,
        group: PlacementGroupId,
        index: usize,
        node: NodeId,
        resources: ResourceSet,
    ) {
        self.directory.place(group, index, node, resources);
        if self.pg_waiting.is_empty() {
            return;
        }
        let ours = self.take_pg_waiting(group);
        for task in ours {
            self.place_pg(task);
        }
    }

    /// Takes out the tasks waiting here to learn where `group`'s bundles are.
    fn take_pg_waiting(&mut self, group: PlacementGroupId) -> Vec<Task<T>> {
        let (ours, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.pg_waiting)
            .into_iter()
            .partition(|t| {
                matches!(t.strategy, SchedulingStrategy::PlacementGroup { group: g, .. } if g == group)
            });
        self.pg_waiting = rest;
        ours
    }

    /// The group was removed (the submitter's side): where its bundles are
    /// is forgotten, and its tasks waiting here for a bundle's location are
    /// handed back as [`Action::Failed`]. Bundles reserved on this node are
    /// given back by [`NodeScheduler::release_bundle`], which whoever placed
    /// the group sends to each bundle's node.
    pub fn placement_group_removed(&mut self, group: PlacementGroupId) {
        self.directory.forget_group(group);
        let ours = self.take_pg_waiting(group);
        for task in ours {
            self.out.push_back(Action::Failed {
                task,
                reason: FailReason::PlacementGroupRemoved(group),
            });
        }
    }

    /// The bundle here that a task into `group` (bundle `index`, or any)
    /// should use: for any-bundle tasks, one with room now if there is one.
    pub(super) fn local_bundle_for(
        &self,
        group: PlacementGroupId,
        index: Option<usize>,
        req: &ResourceSet,
    ) -> Option<(PlacementGroupId, usize)> {
        match index {
            Some(i) => self
                .bundles
                .get(&(group, i))
                .filter(|b| req.is_subset_of(&b.total))
                .map(|_| (group, i)),
            None => {
                let mut range = self.bundles.range((group, 0)..=(group, usize::MAX));
                let mut first = None;
                for (key, b) in &mut range {
                    if b.fits_now(req) && b.queue.is_empty() {
                        return Some(*key);
                    }
                    if first.is_none() && req.is_subset_of(&b.total) {
                        first = Some(*key);
                    }
                }
                first
            }
        }
    }

    /// Routes a placement-group task: a bundle here, the bundle's node, or
    /// wait for its location.
    pub(super) fn place_pg(&mut self, task: Task<T>) {
        let SchedulingStrategy::PlacementGroup { group, bundle } = task.strategy else {
            unreachable!("only placement-group tasks are routed here");
        };
        if let Some(key) = self.local_bundle_for(group, bundle, &task.resources) {
            return self.bundle_submit(key, task);
        }
        match self
            .directory
            .route(group, bundle, &task.resources, self.id)
        {
            // The directory names this node but the bundle is gone: wait
            // for the group to be placed again.
            Route::Node(node) if node == self.id => self.pg_waiting.push(task),
            Route::Node(node) => self.out.push_back(Action::Spill { to: node, task }),
            Route::TooBig => self.out.push_back(Action::Failed {
                task,
                reason: FailReason::BundleTooSmall { group, bundle },
            }),
            Route::Unknown => self.pg_waiting.push(task),
        }
    }

    /// Runs a task in bundle `key` if it fits now and nothing queues before
    /// it, else queues it there.
    pub(super) fn bundle_submit(&mut self, key: (PlacementGroupId, usize), task: Task<T>) {
        let b = self
            .bundles
            .get_mut(&key)
            .expect("key from local_bundle_for");
        if b.queue.is_empty() && b.fits_now(&task.resources) {
            b.used.add_assign(&task.resources);
            self.start(task, Some(key));
        } else {
            b.queue.push_back(task);
        }
    }

    /// Runs queued tasks of `group`'s bundles here that fit now, FIFO per
    /// bundle queue.
    pub(super) fn dispatch_bundles(&mut self, group: PlacementGroupId) {
        let keys: Vec<(PlacementGroupId, usize)> = self
            .bundles
            .range((group, 0)..=(group, usize::MAX))
            .filter(|(_, b)| !b.queue.is_empty())
            .map(|(k, _)| *k)
            .collect();
        for key in keys {
            while let Some(head) = self.bundles.get(&key).and_then(|b| b.queue.front()) {
                let target = match head.strategy {
                    SchedulingStrategy::PlacementGroup { bundle: None, .. } => self
                        .bundles
                        .range((group, 0)..=(group, usize::MAX))
                        .find(|(_, b)| b.fits_now(&head.resources))
                        .map(|(k, _)| *k),
                    _ => Some(key).filter(|k| self.bundles[k].fits_now(&head.resources)),
                };
                let Some(target) = target else { break };
                let task = self
                    .bundles
                    .get_mut(&key)
                    .and_then(|b| b.queue.pop_front())
                    .expect("head seen above");
                let b = self.bundles.get_mut(&target).expect("target found above");
                b.used.add_assign(&task.resources);
                self.start(task, Some(target));
            }
        }
    }
}
