//! Tasks a node scheduler could not place yet, grouped into scheduling
//! classes (same resources, same strategy), FIFO within a class, with a
//! bound on how often the oldest one is passed over.

use std::collections::VecDeque;

use crate::policy::SchedulingStrategy;
use crate::resources::ResourceSet;

use super::Task;

/// One scheduling class: waiting tasks that ask for the same resources with
/// the same strategy, oldest first. A class head that cannot be placed means
/// no task behind it can be either, so a retry stops a class at its head.
#[derive(Debug)]
pub(super) struct Class<T> {
    pub(super) resources: ResourceSet,
    pub(super) strategy: SchedulingStrategy,
    /// Tasks with their queue number, oldest (smallest) first.
    pub(super) items: VecDeque<(u64, Task<T>)>,
}

/// The waiting tasks of one node scheduler.
///
/// Queue numbers: a task queued at the back gets the next number of an
/// increasing counter; a task put back at the front (refused by its target,
/// or not admitted) gets the next number of a decreasing counter that stays
/// below every back number, so it counts as older than everything queued
/// normally.
#[derive(Debug)]
pub(super) struct WaitQueue<T> {
    pub(super) classes: Vec<Class<T>>,
    len: usize,
    next_back: u64,
    next_front: u64,
    /// The oldest task's number and how often it was passed over.
    bypass: (u64, u32),
}

const MIDDLE: u64 = 1 << 63;

impl<T> WaitQueue<T> {
    pub(super) fn new() -> Self {
        Self {
            classes: Vec::new(),
            len: 0,
            next_back: MIDDLE,
            next_front: MIDDLE - 1,
            bypass: (0, 0),
        }
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn class_of(&self, resources: &ResourceSet, strategy: &SchedulingStrategy) -> Option<usize> {
        self.classes
            .iter()
            .position(|c| c.resources == *resources && c.strategy == *strategy)
    }

    /// Whether a task of this class is waiting (a newcomer must queue behind
    /// it to keep the class FIFO).
    pub(super) fn class_waiting(&self, task: &Task<T>) -> bool {
        !self.is_empty() && self.class_of(&task.resources, &task.strategy).is_some()
    }

    fn slot(&mut self, task: &Task<T>) -> usize {
        self.class_of(&task.resources, &task.strategy)
            .unwrap_or_else(|| {
                self.classes.push(Class {
                    resources: task.resources.clone(),
                    strategy: task.strategy.clone(),
                    items: VecDeque::new(),
                });
                self.classes.len() - 1
            })
    }

    /// Queues `task` behind everything of its class.
    pub(super) fn push_back(&mut self, task: Task<T>) {
        let seq = self.next_back;
        self.next_back += 1;
        let i = self.slot(&task);
        self.classes[i].items.push_back((seq, task));
        self.len += 1;
    }

    /// Queues `task` ahead of everything queued at the back.
    pub(super) fn push_front(&mut self, task: Task<T>) {
        let seq = self.next_front;
        self.next_front -= 1;
        self.reinsert(seq, task);
    }

    /// Puts back a task popped with its number, keeping its place.
    pub(super) fn reinsert(&mut self, seq: u64, task: Task<T>) {
        let i = self.slot(&task);
        let items = &mut self.classes[i].items;
        let at = items.partition_point(|(s, _)| *s < seq);
        items.insert(at, (seq, task));
        self.len += 1;
    }

    /// The head of class `i` and its number.
    pub(super) fn pop_head(&mut self, i: usize) -> Option<(u64, Task<T>)> {
        let head = self.classes[i].items.pop_front();
        if head.is_some() {
            self.len -= 1;
        }
        head
    }

    /// Class indices ordered by their head's number, oldest first, into
    /// `out` (cleared first).
    pub(super) fn heads_in_order(&self, out: &mut Vec<(u64, usize)>) {
        out.clear();
        out.extend(
            self.classes
                .iter()
                .enumerate()
                .filter_map(|(i, c)| c.items.front().map(|(seq, _)| (*seq, i))),
        );
        out.sort_unstable();
    }

    /// The oldest waiting task and its number.
    pub(super) fn oldest(&self) -> Option<(u64, &Task<T>)> {
        self.classes
            .iter()
            .filter_map(|c| c.items.front().map(|(seq, t)| (*seq, t)))
            .min_by_key(|(seq, _)| *seq)
    }

    /// Counts one pass over the oldest task (number `oldest`); `false` if it
    /// has been passed over [`MAX_BYPASS`](crate::MAX_BYPASS) times already
    /// and the caller must hold the younger task back.
    pub(super) fn note_bypass(&mut self, oldest: u64) -> bool {
        if self.bypass.0 != oldest {
            self.bypass = (oldest, 0);
        }
        if self.bypass.1 >= crate::local_queue::MAX_BYPASS {
            return false;
        }
        self.bypass.1 += 1;
        true
    }

    /// Drops emptied classes (after a retry pass, when no index is held).
    pub(super) fn compact(&mut self) {
        self.classes.retain(|c| !c.items.is_empty());
    }

    /// Every waiting task, oldest first, leaving the queue empty.
    pub(super) fn drain(&mut self) -> Vec<Task<T>> {
        let mut all: Vec<(u64, Task<T>)> = Vec::with_capacity(self.len);
        for class in self.classes.drain(..) {
            all.extend(class.items);
        }
        all.sort_unstable_by_key(|(seq, _)| *seq);
        self.len = 0;
        all.into_iter().map(|(_, t)| t).collect()
    }
}
