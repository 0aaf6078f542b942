//! Node-local admission queue: runs a request at once when it fits, queues it
//! otherwise, and hands queued requests out as resources come back.
//!
//! Requests are grouped into *scheduling classes* by identical
//! [`ResourceSet`]; each class is FIFO. When resources are released, the
//! caller drains [`LocalQueue::pop_runnable`], which picks, among the class
//! heads that fit now, the one submitted earliest. A small request may thus
//! pass a big one that does not fit yet, but never an older one of its own
//! class.

use std::collections::VecDeque;

use thiserror::Error;

use crate::node::NodeResources;
use crate::resources::ResourceSet;

/// A request that can never run on this node: it asks for more than the
/// node has in total.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("request {request} can never be satisfied: node total is {total}")]
pub struct Infeasible {
    /// What was asked for.
    pub request: ResourceSet,
    /// What the node has in total.
    pub total: ResourceSet,
}

/// What [`LocalQueue::submit`] decided.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a Run item must be started and an Infeasible one reported"]
pub enum Admission<T> {
    /// The resources are acquired: start the item now, and release the same
    /// [`ResourceSet`] when it finishes.
    Run(T),
    /// The item waits in the queue; [`LocalQueue::pop_runnable`] hands it out
    /// once it fits.
    Queued,
    /// The item can never run here; it is handed back with the reason.
    Infeasible(T, Infeasible),
}

/// One scheduling class: queued items that ask for the same resources.
#[derive(Debug)]
struct Class<T> {
    req: ResourceSet,
    /// Items with their global submission number, oldest first.
    items: VecDeque<(u64, T)>,
}

/// How many times the oldest queued item may be passed over by younger,
/// smaller ones before the queue holds everything else back for it.
pub const MAX_BYPASS: u32 = 16;

/// The admission queue of one node (sans-IO: it never starts anything
/// itself; the caller runs what it hands out).
///
/// Invariant: `submit` and `pop_runnable` never push `used` past `total`;
/// only [`LocalQueue::acquire_forced`] may.
///
/// No starvation: a small request may pass a big one that does not fit yet,
/// but only [`MAX_BYPASS`] times; then nothing else that asks for any of
/// the same resources is admitted until the oldest item fits and runs
/// (running work always finishes and frees its resources, so it does).
/// Requests that share no resource with the oldest cannot delay it and are
/// neither counted nor held back.
#[derive(Debug)]
pub struct LocalQueue<T> {
    node: NodeResources,
    /// Classes in no particular order. Emptied classes are kept and reused,
    /// so a class flipping between empty and one item does not allocate.
    classes: Vec<Class<T>>,
    queued: usize,
    next_seq: u64,
    /// The oldest queued item's number and how often it was passed over.
    bypass: (u64, u32),
}

impl<T> LocalQueue<T> {
    /// An empty queue for a node with `total` resources, none in use.
    pub fn new(total: ResourceSet) -> Self {
        Self {
            node: NodeResources::new(total),
            classes: Vec::new(),
            queued: 0,
            next_seq: 0,
            bypass: (0, 0),
        }
    }

    /// The submission number of the oldest queued item.
    fn oldest(&self) -> Option<u64> {
        self.oldest_class().map(|(seq, _)| seq)
    }

    /// The oldest queued item's number and what it asks for.
    fn oldest_class(&self) -> Option<(u64, &ResourceSet)> {
        self.classes
            .iter()
            .filter_map(|c| c.items.front().map(|&(seq, _)| (seq, &c.req)))
            .min_by_key(|&(seq, _)| seq)
    }

    /// Whether admitting a request for `req` ahead of the oldest queued
    /// item could delay it: they ask for some resource in common. One that
    /// shares none (CPU work while the oldest waits for a GPU) is not a
    /// bypass and is never held back for it.
    fn competes_with_oldest(&self, req: &ResourceSet) -> bool {
        self.oldest_class()
            .is_some_and(|(_, oldest)| req.overlaps(oldest))
    }

    /// Counts one pass over the oldest item; `false` if it has been passed
    /// over too often already (the caller must not admit anything else).
    fn note_bypass(&mut self) -> bool {
        let Some(oldest) = self.oldest() else {
            return true;
        };
        if self.bypass.0 != oldest {
            self.bypass = (oldest, 0);
        }
        if self.bypass.1 >= MAX_BYPASS {
            return false;
        }
        self.bypass.1 += 1;
        true
    }

    /// The node's accounting: total, used, available.
    pub fn resources(&self) -> &NodeResources {
        &self.node
    }

    /// Offers `item`, which needs `req`, to the node.
    ///
    /// - `req` exceeds the node's total: [`Admission::Infeasible`] at once.
    /// - it fits now and no item of its class waits: resources are acquired,
    ///   [`Admission::Run`].
    /// - otherwise [`Admission::Queued`].
    pub fn submit(&mut self, req: ResourceSet, item: T) -> Admission<T> {
        if !self.node.is_feasible(&req) {
            let total = self.node.total().clone();
            return Admission::Infeasible(
                item,
                Infeasible {
                    request: req,
                    total,
                },
            );
        }
        let class = if self.queued == 0 {
            None
        } else {
            self.classes.iter().position(|c| c.req == req)
        };
        let class_waiting = class.is_some_and(|i| !self.classes[i].items.is_empty());
        if !class_waiting
            && self.node.can_acquire(&req)
            && (self.queued == 0 || !self.competes_with_oldest(&req) || self.note_bypass())
        {
            self.node.acquire_forced(&req); // checked by can_acquire
            return Admission::Run(item);
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        self.queued += 1;
        let i = class.unwrap_or_else(|| self.class_slot(req));
        self.classes[i].items.push_back((seq, item));
        Admission::Queued
    }

    /// Gives `req` back to the node. Does not dispatch: call
    /// [`LocalQueue::pop_runnable`] in a loop afterwards.
    pub fn release(&mut self, req: &ResourceSet) {
        self.node.release(req);
    }

    /// Takes `req` without checking, for a task resuming after it gave its
    /// resources back while blocked; `used` may exceed `total` until
    /// released.
    pub fn acquire_forced(&mut self, req: &ResourceSet) {
        self.node.acquire_forced(req);
    }

    /// The oldest queued item whose class head fits now and is not held
    /// back for the oldest item of all, with its resources already
    /// acquired; `None` when nothing queued may run.
    pub fn pop_runnable(&mut self) -> Option<(ResourceSet, T)> {
        let (oldest, oldest_req) = self.oldest_class()?;
        // The oldest has waited long enough: what competes with it waits.
        let held = self.bypass.0 == oldest && self.bypass.1 >= MAX_BYPASS;
        let mut best: Option<(usize, u64, bool)> = None;
        for (i, class) in self.classes.iter().enumerate() {
            let Some(&(seq, _)) = class.items.front() else {
                continue;
            };
            let competes = seq != oldest && class.req.overlaps(oldest_req);
            if (held && competes) || best.is_some_and(|(_, best_seq, _)| seq >= best_seq) {
                continue;
            }
            if self.node.can_acquire(&class.req) {
                best = Some((i, seq, competes));
            }
        }
        let (i, _, competes) = best?;
        if competes && !self.note_bypass() {
            return None;
        }
        let class = &mut self.classes[i];
        let (_, item) = class.items.pop_front().expect("chosen class has a head");
        self.node.acquire_forced(&class.req); // checked by can_acquire above
        self.queued -= 1;
        Some((class.req.clone(), item))
    }

    /// Number of items waiting.
    pub fn queued_len(&self) -> usize {
        self.queued
    }

    /// Hands back every queued item, oldest first, leaving the queue empty
    /// (for shutdown). Resources in use are untouched.
    pub fn drain_queued(&mut self) -> Vec<(ResourceSet, T)> {
        let mut all: Vec<(u64, ResourceSet, T)> = Vec::with_capacity(self.queued);
        for class in self.classes.drain(..) {
            let req = class.req;
            all.extend(
                class
                    .items
                    .into_iter()
                    .map(|(seq, item)| (seq, req.clone(), item)),
            );
        }
        all.sort_unstable_by_key(|(seq, _, _)| *seq);
        self.queued = 0;
        all.into_iter().map(|(_, req, item)| (req, item)).collect()
    }

    /// Index of a class for `req`, known to be absent or empty: an existing
    /// one for `req`, else a reused empty one, else a new one.
    fn class_slot(&mut self, req: ResourceSet) -> usize {
        if let Some(i) = self.classes.iter().position(|c| c.req == req) {
            return i;
        }
        if let Some(i) = self.classes.iter().position(|c| c.items.is_empty()) {
            self.classes[i].req = req;
            return i;
        }
        self.classes.push(Class {
            req,
            items: VecDeque::new(),
        });
        self.classes.len() - 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quantity::Quantity;
    use crate::resources::GPU;

    fn cpus(x: f64) -> ResourceSet {
        ResourceSet::cpu(Quantity::from_f64(x).unwrap())
    }

    fn run<T: std::fmt::Debug>(a: Admission<T>) -> T {
        match a {
            Admission::Run(t) => t,
            other => panic!("expected Run, got {other:?}"),
        }
    }

    #[test]
    fn fits_and_nothing_queued_runs_at_once() {
        let mut q = LocalQueue::new(cpus(2.0));
        assert_eq!(run(q.submit(cpus(1.0), 'a')), 'a');
        assert_eq!(run(q.submit(cpus(1.0), 'b')), 'b');
        assert_eq!(q.submit(cpus(1.0), 'c'), Admission::Queued);
        assert_eq!(q.resources().used(), &cpus(2.0));
        assert_eq!(q.queued_len(), 1);
    }

    #[test]
    fn infeasible_is_reported_at_once_with_request_and_total() {
        let mut q = LocalQueue::new(cpus(2.0));
        let Admission::Infeasible(item, why) = q.submit(cpus(4.0), 7) else {
            panic!("expected Infeasible");
        };
        assert_eq!(item, 7);
        assert_eq!(
            why.to_string(),
            "request {CPU: 4} can never be satisfied: node total is {CPU: 2}"
        );
        assert_eq!(q.queued_len(), 0);
        assert!(q.resources().used().is_empty());
        let gpu = ResourceSet::new().with(GPU, Quantity::ONE);
        assert!(matches!(q.submit(gpu, 8), Admission::Infeasible(8, _)));
    }

    #[test]
    fn items_of_one_class_run_in_submission_order() {
        let mut q = LocalQueue::new(cpus(1.0));
        run(q.submit(cpus(1.0), 0));
        for i in 1..=5 {
            assert_eq!(q.submit(cpus(1.0), i), Admission::Queued);
        }
        for i in 1..=5 {
            q.release(&cpus(1.0));
            assert_eq!(q.pop_runnable(), Some((cpus(1.0), i)));
            assert_eq!(q.pop_runnable(), None);
        }
        assert_eq!(q.queued_len(), 0);
    }

    #[test]
    fn submit_queues_behind_a_waiting_item_of_its_class_even_if_it_fits() {
        let mut q = LocalQueue::new(cpus(2.0));
        run(q.submit(cpus(2.0), "hold"));
        assert_eq!(q.submit(cpus(1.0), "first"), Admission::Queued);
        // Release without draining: the class head still waits, so the
        // newcomer of the same class must not jump it.
        q.release(&cpus(2.0));
        assert_eq!(q.submit(cpus(1.0), "second"), Admission::Queued);
        assert_eq!(q.pop_runnable(), Some((cpus(1.0), "first")));
        assert_eq!(q.pop_runnable(), Some((cpus(1.0), "second")));
    }

    #[test]
    fn older_class_head_goes_first_when_both_fit() {
        let mut q = LocalQueue::new(cpus(4.0));
        run(q.submit(cpus(4.0), "hold"));
        assert_eq!(q.submit(cpus(2.0), "big"), Admission::Queued);
        assert_eq!(q.submit(cpus(1.0), "small"), Admission::Queued);
        q.release(&cpus(4.0));
        assert_eq!(q.pop_runnable(), Some((cpus(2.0), "big")));
        assert_eq!(q.pop_runnable(), Some((cpus(1.0), "small")));
    }

    #[test]
    fn small_request_passes_a_big_one_that_does_not_fit_yet() {
        let mut q = LocalQueue::new(cpus(4.0));
        run(q.submit(cpus(3.0), "hold"));
        assert_eq!(q.submit(cpus(2.0), "big"), Admission::Queued);
        // A new class that fits runs at once, past the waiting big one.
        assert_eq!(run(q.submit(cpus(1.0), "small")), "small");
        assert_eq!(q.pop_runnable(), None);
        q.release(&cpus(1.0));
        assert_eq!(q.pop_runnable(), None);
        q.release(&cpus(3.0));
        assert_eq!(q.pop_runnable(), Some((cpus(2.0), "big")));
    }

    #[test]
    fn a_big_request_is_not_starved_by_a_stream_of_small_ones() {
        // Two CPUs kept busy by 1-CPU tasks that keep arriving: the 2-CPU
        // request needs both free at once, which small ones never allow
        // unless the queue holds them back.
        let mut q = LocalQueue::new(cpus(2.0));
        run(q.submit(cpus(1.0), 0));
        run(q.submit(cpus(1.0), 1));
        assert_eq!(q.submit(cpus(2.0), 1000), Admission::Queued);
        let mut ran_big_after = None;
        for step in 0..100 {
            // One small task finishes, a new one arrives.
            q.release(&cpus(1.0));
            match q.submit(cpus(1.0), step + 2) {
                Admission::Run(_) => {}
                Admission::Queued => {}
                Admission::Infeasible(..) => panic!("feasible"),
            }
            while let Some((req, item)) = q.pop_runnable() {
                if item == 1000 {
                    ran_big_after = Some(step);
                    q.release(&req);
                }
            }
            if ran_big_after.is_some() {
                break;
            }
        }
        let step = ran_big_after.expect("the big request ran");
        assert!(step <= MAX_BYPASS as usize + 2, "ran after {step} steps");
        assert!(q.resources().used().is_subset_of(q.resources().total()));
    }

    #[test]
    fn work_sharing_no_resource_with_the_oldest_is_never_held_back_for_it() {
        // One GPU, busy; a GPU request waits. CPU-only work cannot delay
        // it, so any amount of it runs past it, from submit and from the
        // queue alike.
        let gpu = ResourceSet::new().with(GPU, Quantity::from_f64(1.0).unwrap());
        let mut q = LocalQueue::new(cpus(1.0).with(GPU, Quantity::from_f64(1.0).unwrap()));
        run(q.submit(gpu.clone(), 0));
        assert_eq!(q.submit(gpu.clone(), 1), Admission::Queued);
        let many = 10 * MAX_BYPASS as usize;
        for item in 2..2 + many {
            match q.submit(cpus(1.0), item) {
                Admission::Run(_) => {}
                other => panic!("CPU work {item} was not admitted: {other:?}"),
            }
            // The next waits for the CPU, then comes out of the queue.
            assert_eq!(q.submit(cpus(1.0), 10_000 + item), Admission::Queued);
            q.release(&cpus(1.0));
            assert_eq!(q.pop_runnable(), Some((cpus(1.0), 10_000 + item)));
            q.release(&cpus(1.0));
        }
        // Once the GPU frees, the oldest runs.
        q.release(&gpu);
        assert_eq!(q.pop_runnable(), Some((gpu, 1)));
    }

    #[test]
    fn work_held_back_for_the_oldest_does_not_hold_back_work_that_does_not_compete() {
        let one_gpu = || ResourceSet::new().with(GPU, Quantity::from_f64(1.0).unwrap());
        let mut q = LocalQueue::new(cpus(2.0).with(GPU, Quantity::from_f64(1.0).unwrap()));
        run(q.submit(cpus(1.0), 0));
        run(q.submit(cpus(1.0), 1));
        assert_eq!(q.submit(cpus(2.0), 1000), Admission::Queued);
        // 1-CPU work passes the 2-CPU request as often as allowed ...
        for k in 0..MAX_BYPASS as usize {
            q.release(&cpus(1.0));
            run(q.submit(cpus(1.0), 100 + k));
        }
        // ... then waits for it, although a CPU is free.
        q.release(&cpus(1.0));
        assert_eq!(q.submit(cpus(1.0), 200), Admission::Queued);
        assert_eq!(q.pop_runnable(), None, "1-CPU work is held back");
        // GPU work does not compete with it: it runs, from submit and from
        // the queue, even behind the older held-back 1-CPU item.
        run(q.submit(one_gpu(), 300));
        assert_eq!(q.submit(one_gpu(), 301), Admission::Queued);
        q.release(&one_gpu());
        assert_eq!(q.pop_runnable(), Some((one_gpu(), 301)));
        // The 2-CPU request runs first once it fits, then the held-back one.
        q.release(&cpus(1.0));
        assert_eq!(q.pop_runnable(), Some((cpus(2.0), 1000)));
        q.release(&cpus(2.0));
        assert_eq!(q.pop_runnable(), Some((cpus(1.0), 200)));
    }

    #[test]
    fn acquire_forced_blocks_dispatch_until_released() {
        let mut q = LocalQueue::new(cpus(1.0));
        run(q.submit(cpus(1.0), "a"));
        q.release(&cpus(1.0)); // "a" blocks in get() and lends its CPU
        run(q.submit(cpus(1.0), "b"));
        q.acquire_forced(&cpus(1.0)); // "a" resumes
        assert_eq!(q.resources().used(), &cpus(2.0));
        assert_eq!(q.submit(cpus(1.0), "c"), Admission::Queued);
        q.release(&cpus(1.0));
        assert_eq!(q.pop_runnable(), None);
        q.release(&cpus(1.0));
        assert_eq!(q.pop_runnable(), Some((cpus(1.0), "c")));
    }

    #[test]
    fn drain_queued_hands_back_everything_oldest_first() {
        let mut q = LocalQueue::new(cpus(1.0));
        run(q.submit(cpus(1.0), 0));
        assert_eq!(q.submit(cpus(0.5), 1), Admission::Queued);
        assert_eq!(q.submit(cpus(1.0), 2), Admission::Queued);
        assert_eq!(q.submit(cpus(0.5), 3), Admission::Queued);
        let drained = q.drain_queued();
        assert_eq!(
            drained,
            vec![(cpus(0.5), 1), (cpus(1.0), 2), (cpus(0.5), 3)]
        );
        assert_eq!(q.queued_len(), 0);
        assert_eq!(q.pop_runnable(), None);
        assert_eq!(q.resources().used(), &cpus(1.0));
    }

    #[test]
    fn emptied_class_slots_are_reused_for_new_classes() {
        let mut q = LocalQueue::new(cpus(1.0));
        run(q.submit(cpus(1.0), 0));
        for (i, amount) in [0.25, 0.5, 0.75, 1.0].into_iter().enumerate() {
            assert_eq!(q.submit(cpus(amount), i), Admission::Queued);
            q.release(&cpus(1.0));
            let (req, item) = q.pop_runnable().expect("fits after release");
            assert_eq!((req.clone(), item), (cpus(amount), i));
            q.release(&req);
            run(q.submit(cpus(1.0), 99));
        }
        assert_eq!(q.classes.len(), 1);
    }
}
