//! The shell of the borrower protocol ([`RefCounts`]): lends refs nested
//! in values that leave this process, counts the borrowers of objects it
//! owns, tells owners when borrowed entries go, and watches borrowers so
//! a dead one's counts go with it.
//!
//! Lock order: `refs`, then the object table. Holds the state machine
//! gives back are dropped after its lock (a drop can free an object,
//! which comes back here).

use ray_proto::wire::{AddBorrowers, BorrowersAdded, RefsRemoved, RemovedRef, WireRef};

use super::*;
use crate::cluster::ref_counts::RefAction;

/// Tries to reach a borrower whose connection closed before its counts go
/// (a connection can close while its process lives on: an idle timeout, a
/// GCS or network hiccup), waiting [`REACH_BACKOFF`] times the number of
/// failures so far between tries. Its node daemon's `WorkerDied`, when
/// this process holds its lease, clears it at once.
const REACH_TRIES: u32 = 4;
/// See [`REACH_TRIES`].
const REACH_BACKOFF: Duration = Duration::from_millis(250);

impl ClusterCore {
    /// `refs` in wire form if every owner's address is known now.
    pub(super) fn wire_refs_now(&self, refs: &[Arc<RefHandle>]) -> Option<Vec<WireRef>> {
        let me = self.rt()?.worker;
        refs.iter()
            .map(|h| {
                Some(WireRef {
                    id: h.id,
                    owner: self.owner_addr_now(h.id.owner, me)?,
                })
            })
            .collect()
    }

    /// `refs` in wire form, looking owner addresses up as needed.
    pub(super) async fn wire_refs(&self, refs: &[Arc<RefHandle>]) -> Result<Vec<WireRef>, Error> {
        if let Some(w) = self.wire_refs_now(refs) {
            return Ok(w);
        }
        for h in refs {
            self.worker_addr(h.id.owner).await?;
        }
        self.wire_refs_now(refs).ok_or(Error::ShutDown)
    }

    /// Whether lending `refs` needs no owner but this process.
    pub(super) fn lends_at_once(&self, refs: &[Arc<RefHandle>]) -> bool {
        let me = self.rt().map(|rt| rt.worker);
        refs.iter().all(|h| Some(h.id.owner) == me)
    }

    /// Lends `refs`, all owned here, to `to` (see [`lends_at_once`]).
    ///
    /// [`lends_at_once`]: Self::lends_at_once
    pub(super) fn lend_now(self: &Arc<Self>, to: WorkerId, refs: &[Arc<RefHandle>]) {
        let (wait, actions) = self.start_lend(to, refs);
        debug_assert!(wait.is_none(), "lend_now with refs owned elsewhere");
        self.run_ref_actions(actions);
    }

    /// Counts `to` on `refs` in the state machine: the lend to wait for
    /// (refs owned elsewhere) and the actions it asks for.
    fn start_lend(&self, to: WorkerId, refs: &[Arc<RefHandle>]) -> (Option<u64>, Vec<RefAction>) {
        if refs.is_empty() {
            return (None, Vec::new());
        }
        let (drop_now, wait, actions) = {
            let mut rc = self.refs.lock();
            let (d, w) = rc.lend(to, refs.iter().map(|h| (h.id, h.clone())).collect());
            (d, w, drain(&mut rc))
        };
        drop(drop_now);
        (wait, actions)
    }

    /// Lends `refs` to `to` before a value carrying them leaves: returns
    /// once every owner counts `to`, with the ids found gone (their owner
    /// freed them or cannot be reached; they travel as plain ids).
    pub(super) async fn lend(
        self: &Arc<Self>,
        to: WorkerId,
        refs: &[Arc<RefHandle>],
    ) -> Vec<ObjectId> {
        let (wait, actions) = self.start_lend(to, refs);
        let mut registers = Vec::new();
        let mut others = Vec::new();
        for a in actions {
            match a {
                RefAction::Register {
                    owner,
                    borrower,
                    ids,
                    ..
                } => registers.push((owner, borrower, ids)),
                other => others.push(other),
            }
        }
        self.run_ref_actions(others);
        let Some(lend) = wait else {
            return Vec::new();
        };
        let asks = registers
            .into_iter()
            .map(|(owner, borrower, ids)| self.add_borrowers(owner, borrower, ids));
        let mut gone = Vec::new();
        for answer in futures::future::join_all(asks).await {
            gone.extend(answer);
            let holds = self.refs.lock().registered(lend);
            drop(holds);
        }
        gone
    }

    /// Asks `owner` to count `borrower` on `ids`; the ids it did not count.
    async fn add_borrowers(
        &self,
        owner: WorkerId,
        borrower: WorkerId,
        ids: Vec<ObjectId>,
    ) -> Vec<ObjectId> {
        let Ok(addr) = self.worker_addr(owner).await else {
            return ids;
        };
        let request = AddBorrowers {
            borrower,
            ids: ids.clone(),
        };
        match self.ask(addr, request).await {
            Ok(Ok(BorrowersAdded { gone })) => gone,
            // Its owner is gone, and the objects with it.
            _ => ids,
        }
    }

    /// Owner side of [`AddBorrowers`].
    pub(super) fn borrowers_added(
        self: &Arc<Self>,
        borrower: WorkerId,
        ids: &[ObjectId],
    ) -> Vec<ObjectId> {
        let Some(rt) = self.rt() else {
            return ids.to_vec();
        };
        let (gone, drop_now, actions) = {
            let mut rc = self.refs.lock();
            let (g, d) = rc.register(borrower, ids, |id| rt.objects.handle(id));
            (g, d, drain(&mut rc))
        };
        drop(drop_now);
        self.run_ref_actions(actions);
        gone
    }

    /// Owner side of [`RefsRemoved`].
    pub(super) fn refs_removed(&self, borrower: WorkerId, refs: &[RemovedRef]) {
        let entries: Vec<(ObjectId, u32)> = refs.iter().map(|r| (r.id, r.count)).collect();
        let drop_now = self.refs.lock().removed(borrower, &entries);
        drop(drop_now);
    }

    /// Refs that arrived inside a value: local handles on them. `lent`:
    /// the sender lent them (a result, a fetched object), so each carries
    /// one registration with its owner; else (an argument) the task's
    /// owner holds them while the task runs. An object owned here that is
    /// gone is left out (decoding it says so).
    pub(super) fn receive_refs(
        self: &Arc<Self>,
        rt: &Arc<Runtime>,
        refs: Vec<WireRef>,
        lent: bool,
    ) -> Vec<Arc<RefHandle>> {
        let mut out = Vec::with_capacity(refs.len());
        for WireRef { id, owner } in refs {
            if id.owner == rt.worker {
                let Some(h) = rt.objects.handle(id) else {
                    continue;
                };
                if lent {
                    let pin = self.refs.lock().received_own(id);
                    drop(pin);
                }
                out.push(h);
            } else {
                // Fetched when someone wants its value.
                let h = self.borrow_as(rt, id, Some(owner), true);
                if lent {
                    h.cell.add_registrations(1);
                }
                out.push(h);
            }
        }
        out
    }

    /// Which of a task's borrowed arguments (`ids`) this process still
    /// holds, unregistered, now that the task is done (an actor kept
    /// them). Another task's argument counts too: the check cannot tell
    /// whose hold it is, so it may register once too often. An entry
    /// registered already is counted for as long as it lives.
    pub(super) fn kept_unregistered(&self, rt: &Runtime, ids: &[ObjectId]) -> Vec<Arc<RefHandle>> {
        ids.iter()
            .filter_map(|&id| rt.objects.handle(id))
            .filter(|h| h.cell.registrations() == 0)
            .collect()
    }

    /// Registers this process with the owners of `kept` (see
    /// [`kept_unregistered`](Self::kept_unregistered)), since the task's
    /// owner lets its hold go when the result arrives.
    pub(super) async fn keep_borrowed(self: &Arc<Self>, kept: Vec<Arc<RefHandle>>) {
        let Some(rt) = self.rt() else { return };
        let gone = self.lend(rt.worker, &kept).await;
        for h in &kept {
            if !gone.contains(&h.id) {
                h.cell.add_registrations(1);
            }
        }
    }

    /// A borrowed entry went with `registrations`: its owner is told (in
    /// bursts, from the I/O runtime).
    pub(super) fn borrow_released(self: &Arc<Self>, id: ObjectId, registrations: u32) {
        if self.refs.lock().released(id, registrations) {
            let me = self.clone();
            self.tokio.spawn(async move { me.send_removals().await });
        }
    }

    async fn send_removals(self: Arc<Self>) {
        let Some(me) = self.rt().map(|rt| rt.worker) else {
            return;
        };
        loop {
            let batch = self.refs.lock().take_removals();
            if batch.is_empty() {
                return;
            }
            for (owner, entries) in batch {
                let refs = entries
                    .into_iter()
                    .map(|(id, count)| RemovedRef { id, count })
                    .collect();
                // An owner gone has nothing left to count.
                if let Ok(addr) = self.worker_addr(owner).await {
                    let _ = self.ask(addr, RefsRemoved { borrower: me, refs }).await;
                }
            }
        }
    }

    fn run_ref_actions(self: &Arc<Self>, actions: Vec<RefAction>) {
        for a in actions {
            match a {
                RefAction::Watch(borrower) => {
                    let me = self.clone();
                    self.tokio
                        .spawn(async move { me.watch_borrower(borrower).await });
                }
                RefAction::Register {
                    lend,
                    owner,
                    borrower,
                    ids,
                } => {
                    // Only `lend` makes these, and it runs them itself.
                    debug_assert!(
                        false,
                        "a registration left to run: {lend} {owner} {borrower} {ids:?}"
                    );
                }
            }
        }
    }

    /// Waits until `borrower`'s process cannot be reached (after
    /// [`REACH_TRIES`] tries), then drops its counts.
    async fn watch_borrower(self: Arc<Self>, borrower: WorkerId) {
        let mut failures = 0;
        loop {
            let conn = match self.worker_addr(borrower).await {
                Ok(addr) => self.conns.get(addr).await.ok(),
                Err(_) => None,
            };
            match conn {
                Some(conn) => {
                    failures = 0;
                    let _ = conn.closed().await;
                    if self.rt().is_none() {
                        return;
                    }
                }
                None => {
                    failures += 1;
                    if failures >= REACH_TRIES {
                        break;
                    }
                }
            }
            tokio::time::sleep(REACH_BACKOFF * failures.max(1)).await;
        }
        let drop_now = self.refs.lock().borrower_died(borrower);
        drop(drop_now);
    }

    /// Objects this process owns that other processes borrow now.
    pub(crate) fn lent_objects(&self) -> usize {
        self.refs.lock().lent_objects()
    }
}

/// The state machine's pending actions.
fn drain(rc: &mut RefCounts<Arc<RefHandle>>) -> Vec<RefAction> {
    std::iter::from_fn(|| rc.poll_action()).collect()
}
