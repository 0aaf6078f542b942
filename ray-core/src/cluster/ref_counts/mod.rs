//! Distributed reference counting, the borrower protocol, as a sans-IO
//! state machine: events in, holds and [`RefAction`]s out. No tokio, no
//! clock, no I/O; the shell in `cluster::core` moves the messages, and the
//! seeded simulation in `sim` drives many processes through it with
//! process deaths and reordered messages.
//!
//! **The rule.** A ref that leaves a process inside a value (an argument,
//! a result, a fetched object) is *lent*: before the message leaves, the
//! object's owner counts the receiver as a borrower. The sender keeps its
//! own hold on the object until that count is in place, so the object
//! cannot be freed while the message is on its way:
//! - refs the sender owns are counted at once, in this state machine
//!   ([`RefCounts::lend`] returns no wait);
//! - refs owned elsewhere are registered with their owner first
//!   ([`RefAction::Register`]); the message waits for the answer
//!   ([`RefCounts::registered`]), the common case (a driver passing its own
//!   refs) never does.
//!
//! The receiver keeps one *registration* per lent ref in its table entry
//! for the object. When its last local hold goes, it tells the owner how
//! many registrations it dropped ([`RefCounts::released`], sent in bursts
//! as [`RefAction`]-free batches from [`RefCounts::take_removals`]).
//!
//! A ref passed as a top-level argument is held by the task's owner until
//! the result is back. If the worker still holds it when the task ends (an
//! actor kept it in its state), the worker lends it to itself: it
//! registers with the ref's owner and sends the result only once that is
//! answered. Every registration is thus in place before anything can
//! remove it, and a count never goes below zero.
//!
//! **The owner** keeps, per object lent, each borrower's count and one hold
//! (the *pin*) while any count is positive. A borrower whose process is
//! gone ([`RefCounts::borrower_died`], after a [`RefAction::Watch`]) loses
//! its counts; later registrations for it are ignored. A message a process
//! sends to the owner itself counts the owner as a borrower until it
//! arrives ([`RefCounts::received_own`]).
//!
//! Guarantees (the simulation checks them for thousands of seeds): no
//! object is freed while a live process holds a ref to it or a message
//! carrying it is on its way; when every program drops its refs, every
//! count reaches zero and every object is freed.
//!
//! It must not depend on tokio, the transport or the runtime: holds come
//! in as the opaque `H` (an `Arc<RefHandle>` in the shell).

#[cfg(test)]
mod sim;

use hashbrown::hash_map::Entry;
use hashbrown::{HashMap, HashSet};
use ray_proto::{ObjectId, WorkerId};

/// What the shell does for the state machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RefAction {
    /// Ask `owner` to count `borrower` once more on each of `ids`, then call
    /// [`RefCounts::registered`] with `lend` (also when `owner` cannot be
    /// reached: its objects are gone with it).
    Register {
        lend: u64,
        owner: WorkerId,
        borrower: WorkerId,
        ids: Vec<ObjectId>,
    },
    /// Call [`RefCounts::borrower_died`] once `borrower`'s process is gone.
    Watch(WorkerId),
}

/// One object this process owns and lent out.
struct Lent<H> {
    /// A hold on the object while some borrower's count is positive.
    pin: Option<H>,
    /// Each borrower's registrations (this process itself: messages to it
    /// on their way).
    counts: Vec<(WorkerId, i64)>,
}

/// A message waiting for owners to register its receiver.
struct Waiting<H> {
    /// Owners that have not answered.
    owners: usize,
    /// The sender's holds on the refs, kept until every owner answered.
    holds: Vec<H>,
}

/// The borrower protocol of one process: see the module docs.
pub(crate) struct RefCounts<H> {
    me: WorkerId,
    lent: HashMap<ObjectId, Lent<H>>,
    /// The objects each borrower holds counts on (to clear a dead one's).
    by_borrower: HashMap<WorkerId, HashSet<ObjectId>>,
    /// Borrowers a [`RefAction::Watch`] is out for (until they die: a
    /// registration arriving after its borrower's death is counted and
    /// watched again, which clears it).
    watched: HashSet<WorkerId>,
    /// Removals of counts never made (a peer's mistake, or a bug): ignored,
    /// and counted for the simulation to check.
    #[cfg(test)]
    pub(crate) anomalies: u64,
    waiting: HashMap<u64, Waiting<H>>,
    next_lend: u64,
    /// Registrations dropped here, per owner, not yet told.
    removals: HashMap<WorkerId, Vec<(ObjectId, u32)>>,
    actions: Vec<RefAction>,
}

impl<H> RefCounts<H> {
    /// The protocol state of the process `me`.
    pub(crate) fn new(me: WorkerId) -> Self {
        Self {
            me,
            lent: HashMap::new(),
            by_borrower: HashMap::new(),
            watched: HashSet::new(),
            #[cfg(test)]
            anomalies: 0,
            waiting: HashMap::new(),
            next_lend: 0,
            removals: HashMap::new(),
            actions: Vec::new(),
        }
    }

    /// A message carrying `refs` (one hold each) is about to leave for
    /// `to`. Returns the holds to drop now, and `Some(lend)` when the
    /// message must wait for [`registered`](Self::registered)`(lend)`
    /// (refs owned elsewhere; their holds are kept until then).
    pub(crate) fn lend(&mut self, to: WorkerId, refs: Vec<(ObjectId, H)>) -> (Vec<H>, Option<u64>) {
        let mut drop_now = Vec::new();
        let mut foreign: Vec<(WorkerId, Vec<ObjectId>)> = Vec::new();
        let mut kept = Vec::new();
        for (id, hold) in refs {
            if id.owner == self.me {
                if let Some(h) = self.count(id, to, 1, Some(hold)) {
                    drop_now.push(h);
                }
            } else {
                match foreign.iter_mut().find(|(o, _)| *o == id.owner) {
                    Some((_, ids)) => ids.push(id),
                    None => foreign.push((id.owner, vec![id])),
                }
                kept.push(hold);
            }
        }
        if foreign.is_empty() {
            return (drop_now, None);
        }
        let lend = self.next_lend;
        self.next_lend += 1;
        self.waiting.insert(
            lend,
            Waiting {
                owners: foreign.len(),
                holds: kept,
            },
        );
        for (owner, ids) in foreign {
            self.actions.push(RefAction::Register {
                lend,
                owner,
                borrower: to,
                ids,
            });
        }
        (drop_now, Some(lend))
    }

    /// One owner answered a [`RefAction::Register`] of `lend` (or cannot
    /// be reached). `Some(holds)` once every owner has: the message may
    /// go, and the sender's holds with it.
    pub(crate) fn registered(&mut self, lend: u64) -> Option<Vec<H>> {
        let w = self.waiting.get_mut(&lend)?;
        w.owners = w.owners.saturating_sub(1);
        if w.owners > 0 {
            return None;
        }
        self.waiting.remove(&lend).map(|w| w.holds)
    }

    /// Owner side of [`RefAction::Register`]: counts `borrower` once more
    /// on each of `ids`. `pin` makes a hold on an object this process owns,
    /// `None` if it is gone. Returns the ids that are gone and the holds to
    /// drop.
    pub(crate) fn register(
        &mut self,
        borrower: WorkerId,
        ids: &[ObjectId],
        mut pin: impl FnMut(ObjectId) -> Option<H>,
    ) -> (Vec<ObjectId>, Vec<H>) {
        let mut gone = Vec::new();
        let mut drop_now = Vec::new();
        for &id in ids {
            if id.owner != self.me {
                // Not this process's to count (a misrouted request).
                gone.push(id);
                continue;
            }
            let pinned = self.lent.get(&id).is_some_and(|l| l.pin.is_some());
            let hold = match pinned {
                true => None,
                false => match pin(id) {
                    Some(h) => Some(h),
                    None => {
                        gone.push(id);
                        continue;
                    }
                },
            };
            drop_now.extend(self.count(id, borrower, 1, hold));
        }
        (gone, drop_now)
    }

    /// Owner side: `borrower` dropped `entries` (object, registrations).
    /// Returns the holds to drop.
    pub(crate) fn removed(&mut self, borrower: WorkerId, entries: &[(ObjectId, u32)]) -> Vec<H> {
        let mut out = Vec::new();
        for &(id, n) in entries {
            if id.owner == self.me {
                out.extend(self.count(id, borrower, -i64::from(n), None));
            }
        }
        out
    }

    /// A message carrying `id`, which this process owns, arrived here (the
    /// receiver already holds it): the count for it on the way goes.
    pub(crate) fn received_own(&mut self, id: ObjectId) -> Option<H> {
        let me = self.me;
        self.count(id, me, -1, None)
    }

    /// Owner side: `borrower`'s process is gone, and its counts with it.
    /// Returns the holds to drop.
    pub(crate) fn borrower_died(&mut self, borrower: WorkerId) -> Vec<H> {
        if borrower == self.me {
            return Vec::new();
        }
        self.watched.remove(&borrower);
        let Some(ids) = self.by_borrower.remove(&borrower) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for id in ids {
            let Some(l) = self.lent.get_mut(&id) else {
                continue;
            };
            l.counts.retain(|(b, _)| *b != borrower);
            out.extend(self.settle(id));
        }
        out
    }

    /// Borrower side: this process's table entry for `id`, owned by
    /// `owner`, went with `n` registrations. Returns `true` when no
    /// removals were waiting to be told (start a sender).
    pub(crate) fn released(&mut self, id: ObjectId, n: u32) -> bool {
        if n == 0 || id.owner == self.me {
            return false;
        }
        let idle = self.removals.is_empty();
        self.removals.entry(id.owner).or_default().push((id, n));
        idle
    }

    /// The removals to tell, per owner (the sender calls this until it is
    /// empty).
    pub(crate) fn take_removals(&mut self) -> Vec<(WorkerId, Vec<(ObjectId, u32)>)> {
        self.removals.drain().collect()
    }

    /// The next thing for the shell to do.
    pub(crate) fn poll_action(&mut self) -> Option<RefAction> {
        self.actions.pop()
    }

    /// Objects this process lent and still counts borrowers of.
    pub(crate) fn lent_objects(&self) -> usize {
        self.lent.len()
    }

    /// Whether nothing is lent, waiting or untold.
    #[cfg(test)]
    pub(crate) fn is_idle(&self) -> bool {
        self.lent.is_empty() && self.waiting.is_empty() && self.removals.is_empty()
    }

    /// `borrower`'s count on `id`.
    #[cfg(test)]
    pub(crate) fn count_of(&self, id: ObjectId, borrower: WorkerId) -> i64 {
        let counts = self.lent.get(&id).map(|l| l.counts.as_slice());
        counts
            .and_then(|c| c.iter().find(|(b, _)| *b == borrower))
            .map_or(0, |&(_, n)| n)
    }

    /// The counts of each object lent, for a failing simulation's report.
    #[cfg(test)]
    pub(crate) fn describe(&self) -> String {
        let mut v: Vec<String> = self
            .lent
            .iter()
            .map(|(id, l)| format!("{id}: pinned {} {:?}", l.pin.is_some(), l.counts))
            .collect();
        v.sort();
        format!("lent [{}], waiting {}", v.join("; "), self.waiting.len())
    }

    /// Adds `delta` to `borrower`'s count on `id`; `hold` is a hold on it
    /// for the pin. Returns a hold to drop: `hold` if the pin is already
    /// there, or the pin if no count is positive any more.
    fn count(
        &mut self,
        id: ObjectId,
        borrower: WorkerId,
        delta: i64,
        hold: Option<H>,
    ) -> Option<H> {
        let known = self
            .lent
            .get(&id)
            .and_then(|l| l.counts.iter().find(|(b, _)| *b == borrower))
            .map_or(0, |&(_, n)| n);
        if delta < 0 && known < -delta {
            // More removed than counted: every registration is answered
            // before anything can remove it, so only a peer's mistake gets
            // here. Ignored beyond the count (which never goes below 0).
            #[cfg(test)]
            {
                self.anomalies += 1;
            }
            if known == 0 {
                return hold;
            }
        }
        let delta = delta.max(-known);
        let l = self.lent.entry(id).or_insert_with(|| Lent {
            pin: None,
            counts: Vec::new(),
        });
        let mut spare = hold;
        if l.pin.is_none() && delta > 0 {
            l.pin = spare.take();
        }
        match l.counts.iter_mut().find(|(b, _)| *b == borrower) {
            Some((_, n)) => *n += delta,
            None => {
                l.counts.push((borrower, delta));
                if borrower != self.me {
                    match self.by_borrower.entry(borrower) {
                        Entry::Occupied(mut o) => {
                            o.get_mut().insert(id);
                        }
                        Entry::Vacant(v) => {
                            v.insert(HashSet::from_iter([id]));
                            if self.watched.insert(borrower) {
                                self.actions.push(RefAction::Watch(borrower));
                            }
                        }
                    }
                }
            }
        }
        if let Some(pos) = l.counts.iter().position(|&(_, n)| n == 0) {
            let (b, _) = l.counts.swap_remove(pos);
            if let Some(ids) = self.by_borrower.get_mut(&b) {
                ids.remove(&id);
                if ids.is_empty() {
                    self.by_borrower.remove(&b);
                }
            }
        }
        match spare {
            Some(h) => Some(h),
            None => self.settle(id),
        }
    }

    /// Drops `id`'s pin once no count is positive, and its entry once no
    /// count is left.
    fn settle(&mut self, id: ObjectId) -> Option<H> {
        let Entry::Occupied(mut o) = self.lent.entry(id) else {
            return None;
        };
        let l = o.get_mut();
        if l.counts.iter().any(|&(_, n)| n > 0) {
            return None;
        }
        let pin = l.pin.take();
        if l.counts.is_empty() {
            o.remove();
        }
        pin
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(owner: u64, seq: u64) -> ObjectId {
        ObjectId {
            owner: WorkerId(owner),
            seq,
        }
    }

    #[test]
    fn an_owned_ref_is_pinned_until_its_borrower_removes_it() {
        let mut rc = RefCounts::new(WorkerId(1));
        let x = id(1, 1);
        let (drop_now, wait) = rc.lend(WorkerId(2), vec![(x, "hold-a")]);
        assert!(drop_now.is_empty() && wait.is_none());
        assert_eq!(rc.poll_action(), Some(RefAction::Watch(WorkerId(2))));
        // A second lend keeps the one pin and gives the spare hold back.
        let (drop_now, _) = rc.lend(WorkerId(2), vec![(x, "hold-b")]);
        assert_eq!(drop_now, vec!["hold-b"]);
        assert!(rc.removed(WorkerId(2), &[(x, 1)]).is_empty());
        assert_eq!(rc.removed(WorkerId(2), &[(x, 1)]), vec!["hold-a"]);
        assert!(rc.is_idle());
    }

    #[test]
    fn a_worker_lending_to_itself_registers_with_the_owner() {
        let mut rc = RefCounts::new(WorkerId(2));
        let x = id(1, 1);
        let (drop_now, wait) = rc.lend(WorkerId(2), vec![(x, "arg")]);
        assert!(drop_now.is_empty());
        assert_eq!(
            rc.poll_action(),
            Some(RefAction::Register {
                lend: wait.unwrap(),
                owner: WorkerId(1),
                borrower: WorkerId(2),
                ids: vec![x],
            })
        );
        assert_eq!(rc.registered(wait.unwrap()), Some(vec!["arg"]));
        // Its table entry went with one registration: the owner is told.
        assert!(rc.released(x, 1));
        assert_eq!(rc.take_removals(), vec![(WorkerId(1), vec![(x, 1)])]);
        assert!(rc.is_idle());
    }

    #[test]
    fn a_foreign_ref_waits_for_every_owner_and_a_dead_borrower_is_cleared() {
        let mut rc = RefCounts::<&str>::new(WorkerId(1));
        let (drop_now, wait) = rc.lend(WorkerId(9), vec![(id(2, 1), "a"), (id(3, 1), "b")]);
        assert!(drop_now.is_empty());
        let lend = wait.unwrap();
        assert!(matches!(rc.poll_action(), Some(RefAction::Register { .. })));
        assert!(matches!(rc.poll_action(), Some(RefAction::Register { .. })));
        assert_eq!(rc.registered(lend), None);
        assert_eq!(rc.registered(lend), Some(vec!["a", "b"]));

        let x = id(1, 5);
        let _ = rc.register(WorkerId(4), &[x], |_| Some("pin"));
        assert_eq!(rc.poll_action(), Some(RefAction::Watch(WorkerId(4))));
        assert_eq!(rc.borrower_died(WorkerId(4)), vec!["pin"]);
        // A late registration for the dead borrower is counted and watched
        // again: the new watch clears it.
        let (_, drop_now) = rc.register(WorkerId(4), &[x], |_| Some("late"));
        assert!(drop_now.is_empty());
        assert_eq!(rc.poll_action(), Some(RefAction::Watch(WorkerId(4))));
        assert_eq!(rc.borrower_died(WorkerId(4)), vec!["late"]);
        assert!(rc.is_idle());
    }

    #[test]
    fn bad_peer_input_is_refused_or_ignored() {
        let mut rc = RefCounts::<&str>::new(WorkerId(1));
        // Not this process's object.
        let (gone, drop_now) = rc.register(WorkerId(2), &[id(3, 1)], |_| Some("x"));
        assert_eq!((gone, drop_now), (vec![id(3, 1)], vec![]));
        // Removals never counted, or more than counted.
        assert!(rc.removed(WorkerId(2), &[(id(1, 1), 5)]).is_empty());
        let _ = rc.register(WorkerId(2), &[id(1, 2)], |_| Some("pin"));
        assert_eq!(rc.removed(WorkerId(2), &[(id(1, 2), 9)]), vec!["pin"]);
        assert_eq!(rc.anomalies, 2);
        assert!(rc.is_idle());
    }
}
