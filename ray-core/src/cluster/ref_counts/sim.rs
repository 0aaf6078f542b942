//! A seeded simulation of several processes passing refs to each other
//! through [`RefCounts`]: values with nested refs (lent before they
//! leave), tasks with top-level ref arguments that the worker may keep
//! past the task (reported in the result and lent again by the task's
//! owner), fetches of borrowed objects, processes killed at random, and
//! every message delayed and reordered. Each seed replays exactly.
//!
//! Holds are explicit tokens: every hold the state machine takes in must
//! come back out, or its object is never freed and the run fails.
//!
//! Checked: an owner never frees an object while a live process holds a
//! ref to it or a message carrying it is on its way (every delivery and
//! fetch looks, and a registration never finds its object gone); after
//! every live process drops its refs, every object is freed and every
//! process's state machine is idle.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashSet};

use super::*;

/// A hold on one object in one process's table.
#[must_use]
#[derive(Debug, PartialEq)]
struct Tok(ObjectId);

/// A process's table entry.
#[derive(Default, Debug)]
struct SimEntry {
    holds: u32,
    /// Registrations held (borrowed entries).
    regs: u32,
}

#[derive(Debug, Clone)]
enum Msg {
    /// A value with nested refs: lent before it left.
    Value { refs: Vec<ObjectId> },
    /// A task with top-level ref arguments, held by its owner `from`.
    Task {
        from: usize,
        task: u64,
        refs: Vec<ObjectId>,
    },
    /// A task's result (the worker registered itself for the arguments
    /// it still holds before sending it).
    Result { task: u64 },
    Register {
        from: usize,
        lend: u64,
        borrower: WorkerId,
        ids: Vec<ObjectId>,
    },
    /// The answer to a registration: the ids that were gone.
    Ack { lend: u64, gone: Vec<ObjectId> },
    /// A task pushed to a process that is gone fails.
    TaskFailed { task: u64 },
    Removed {
        from: usize,
        entries: Vec<(ObjectId, u32)>,
    },
}

#[derive(Debug)]
enum Ev {
    Deliver {
        from: usize,
        to: usize,
        msg: Msg,
    },
    /// A task running at `at` ends.
    TaskEnd {
        at: usize,
        owner: usize,
        task: u64,
        args: Vec<Tok>,
    },
    SendRemovals {
        at: usize,
    },
    BorrowerDied {
        at: usize,
        dead: usize,
    },
}

struct Proc {
    alive: bool,
    rc: RefCounts<Tok>,
    table: BTreeMap<ObjectId, SimEntry>,
    /// The program's own holds.
    user: Vec<Tok>,
    next_seq: u64,
    /// Messages waiting for their refs' owners: the receiver, the message,
    /// and the entries that gain a registration once it goes.
    waiting: BTreeMap<u64, (usize, Msg, Vec<ObjectId>)>,
    /// Tasks this process submitted: worker and argument holds.
    tasks: BTreeMap<u64, (usize, Vec<Tok>)>,
}

struct World {
    rng: ray_sched::SplitMix64,
    procs: Vec<Proc>,
    queue: BinaryHeap<Reverse<(u64, u64)>>,
    events: BTreeMap<u64, Ev>,
    now: u64,
    seq: u64,
    freed: HashSet<ObjectId>,
    next_task: u64,
    ending: bool,
    /// Registrations a sender asked for and died before it could send
    /// their message: (receiver, object). The one leak the protocol
    /// allows (until the receiver dies).
    orphans: Vec<(usize, ObjectId)>,
    /// Objects freed under a worker that kept them from a task whose
    /// owner died (the hold that protected them went with it): their
    /// borrowers may find them gone.
    doomed: HashSet<ObjectId>,
}

fn worker(p: usize) -> WorkerId {
    WorkerId(p as u64 + 1)
}

fn proc_of(w: WorkerId) -> usize {
    (w.0 - 1) as usize
}

impl World {
    fn new(seed: u64) -> Self {
        let mut rng = ray_sched::SplitMix64::new(seed);
        let n = 2 + rng.below(4);
        let procs = (0..n)
            .map(|p| Proc {
                alive: true,
                rc: RefCounts::new(worker(p)),
                table: BTreeMap::new(),
                user: Vec::new(),
                next_seq: 0,
                waiting: BTreeMap::new(),
                tasks: BTreeMap::new(),
            })
            .collect();
        Self {
            rng,
            procs,
            queue: BinaryHeap::new(),
            events: BTreeMap::new(),
            now: 0,
            seq: 0,
            freed: HashSet::new(),
            next_task: 0,
            ending: false,
            orphans: Vec::new(),
            doomed: HashSet::new(),
        }
    }

    fn below(&mut self, n: usize) -> usize {
        self.rng.below(n.max(1))
    }

    fn at(&mut self, delay: u64, ev: Ev) {
        self.seq += 1;
        self.queue.push(Reverse((self.now + delay, self.seq)));
        self.events.insert(self.seq, ev);
    }

    fn send(&mut self, from: usize, to: usize, msg: Msg) {
        let delay = 1 + self.below(50) as u64;
        self.at(delay, Ev::Deliver { from, to, msg });
    }

    /// A new hold on `id` in `p`'s table (the entry must be there).
    fn hold(&mut self, p: usize, id: ObjectId) -> Tok {
        self.procs[p]
            .table
            .get_mut(&id)
            .expect("a hold on an entry that is gone")
            .holds += 1;
        Tok(id)
    }

    /// A hold on `id` in `p`, making a borrowed entry if there is none.
    fn hold_borrowed(&mut self, p: usize, id: ObjectId, regs: u32) -> Result<Tok, String> {
        let owner = proc_of(id.owner);
        if self.procs[owner].alive && self.freed.contains(&id) && !self.doomed.contains(&id) {
            return Err(format!(
                "process {p} got {id:?}, which its live owner {owner} freed"
            ));
        }
        let e = self.procs[p].table.entry(id).or_default();
        e.holds += 1;
        e.regs += regs;
        Ok(Tok(id))
    }

    fn release(&mut self, p: usize, tok: Tok) {
        let id = tok.0;
        if !self.procs[p].alive {
            return;
        }
        let e = self.procs[p].table.get_mut(&id).expect("released twice");
        e.holds -= 1;
        if e.holds > 0 {
            return;
        }
        let e = self.procs[p].table.remove(&id).expect("entry");
        if id.owner == worker(p) {
            self.freed.insert(id);
        } else if self.procs[p].rc.released(id, e.regs) {
            let d = self.below(10) as u64;
            self.at(d, Ev::SendRemovals { at: p });
        }
    }

    fn release_all(&mut self, p: usize, toks: Vec<Tok>) {
        for t in toks {
            self.release(p, t);
        }
    }

    /// Runs what `p`'s state machine asked for.
    fn actions(&mut self, p: usize) {
        while let Some(a) = self.procs[p].rc.poll_action() {
            match a {
                RefAction::Register {
                    lend,
                    owner,
                    borrower,
                    ids,
                } => self.send(
                    p,
                    proc_of(owner),
                    Msg::Register {
                        from: p,
                        lend,
                        borrower,
                        ids,
                    },
                ),
                RefAction::Watch(w) => {
                    let dead = proc_of(w);
                    if !self.procs[dead].alive {
                        let d = 1 + self.below(30) as u64;
                        self.at(d, Ev::BorrowerDied { at: p, dead });
                    }
                }
            }
        }
    }

    /// Refs `p`'s program holds, a few of them picked at random.
    fn pick_refs(&mut self, p: usize) -> Vec<ObjectId> {
        let n = self.procs[p].user.len();
        if n == 0 {
            return Vec::new();
        }
        let k = 1 + self.below(3);
        (0..k)
            .map(|_| {
                let i = self.below(n);
                self.procs[p].user[i].0
            })
            .collect()
    }

    fn other(&mut self, p: usize) -> usize {
        let n = self.procs.len();
        (p + 1 + self.below(n - 1)) % n
    }

    /// One random step of a live process's program.
    fn program_step(&mut self, p: usize) -> Result<(), String> {
        match self.below(100) {
            0..=19 => {
                let seq = self.procs[p].next_seq;
                self.procs[p].next_seq += 1;
                let id = ObjectId::new(worker(p), seq);
                self.procs[p].table.insert(id, SimEntry::default());
                let t = self.hold(p, id);
                self.procs[p].user.push(t);
            }
            20..=44 => {
                let refs = self.pick_refs(p);
                if refs.is_empty() {
                    return Ok(());
                }
                let q = self.other(p);
                let holds: Vec<_> = refs.iter().map(|&id| (id, self.hold(p, id))).collect();
                let (drop_now, wait) = self.procs[p].rc.lend(worker(q), holds);
                let msg = Msg::Value { refs };
                match wait {
                    Some(lend) => {
                        self.procs[p].waiting.insert(lend, (q, msg, Vec::new()));
                    }
                    None => self.send(p, q, msg),
                }
                self.release_all(p, drop_now);
                self.actions(p);
            }
            45..=59 => {
                let refs = self.pick_refs(p);
                if refs.is_empty() {
                    return Ok(());
                }
                let q = self.other(p);
                let task = self.next_task;
                self.next_task += 1;
                let holds = refs.iter().map(|&id| self.hold(p, id)).collect();
                self.procs[p].tasks.insert(task, (q, holds));
                self.send(
                    p,
                    q,
                    Msg::Task {
                        from: p,
                        task,
                        refs,
                    },
                );
            }
            60..=89 => {
                let n = self.procs[p].user.len();
                if n > 0 {
                    let i = self.below(n);
                    let t = self.procs[p].user.swap_remove(i);
                    self.release(p, t);
                }
            }
            _ => {
                // A fetch of a borrowed object: its live owner still has it.
                let borrowed: Vec<ObjectId> = self.procs[p]
                    .table
                    .keys()
                    .filter(|id| id.owner != worker(p))
                    .copied()
                    .collect();
                if !borrowed.is_empty() {
                    let id = borrowed[self.below(borrowed.len())];
                    let owner = proc_of(id.owner);
                    let freed = !self.procs[owner].table.contains_key(&id);
                    if self.procs[owner].alive && freed && !self.doomed.contains(&id) {
                        return Err(format!(
                            "process {p} fetched {id:?}: its live owner {owner} freed it"
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    fn deliver(&mut self, to: usize, msg: Msg) -> Result<(), String> {
        if !self.procs[to].alive {
            // Lost with its receiver; a registration's sender hears the
            // owner is unreachable.
            match msg {
                // (The sender's own transport says so.)
                Msg::Register { from, lend, .. } => self.send(
                    from,
                    from,
                    Msg::Ack {
                        lend,
                        gone: Vec::new(),
                    },
                ),
                Msg::Task { from, task, .. } => self.send(from, from, Msg::TaskFailed { task }),
                _ => {}
            }
            return Ok(());
        }
        match msg {
            Msg::Value { refs, .. } => {
                for id in refs {
                    if id.owner == worker(to) {
                        if !self.procs[to].table.contains_key(&id) {
                            if self.doomed.contains(&id) {
                                // Lost, as the receiver's `get` would say.
                                continue;
                            }
                            return Err(format!("process {to} got back its own {id:?}, freed"));
                        }
                        let t = self.hold(to, id);
                        self.procs[to].user.push(t);
                        if let Some(t) = self.procs[to].rc.received_own(id) {
                            self.release(to, t);
                        }
                    } else {
                        let t = self.hold_borrowed(to, id, 1)?;
                        self.procs[to].user.push(t);
                    }
                }
            }
            Msg::Task { from, task, refs } => {
                let mut args = Vec::new();
                for id in refs {
                    let own = id.owner == worker(to);
                    if own && !self.procs[to].table.contains_key(&id) && self.doomed.contains(&id) {
                        continue;
                    }
                    args.push(match own {
                        true => self.hold(to, id),
                        false => self.hold_borrowed(to, id, 0)?,
                    });
                }
                let d = 1 + self.below(40) as u64;
                self.at(
                    d,
                    Ev::TaskEnd {
                        at: to,
                        owner: from,
                        task,
                        args,
                    },
                );
            }
            Msg::Result { task } => {
                if let Some((_, holds)) = self.procs[to].tasks.remove(&task) {
                    self.release_all(to, holds);
                }
            }
            Msg::Register {
                from,
                lend,
                borrower,
                ids,
            } => {
                let Proc { rc, table, .. } = &mut self.procs[to];
                let (gone, drop_now) = rc.register(borrower, &ids, |id| {
                    let e = table.get_mut(&id)?;
                    e.holds += 1;
                    Some(Tok(id))
                });
                // A sender that died meanwhile sends nothing: its holds went
                // with it, and no message carries the ids. A worker keeping
                // an argument of a task whose owner died has lost the hold
                // that kept it.
                let task_owner_died = match self.procs[from].waiting.get(&lend) {
                    Some((q, Msg::Result { .. }, _)) => !self.procs[*q].alive,
                    _ => false,
                };
                if task_owner_died {
                    self.doomed.extend(gone.iter().copied());
                }
                let unexpected: Vec<_> =
                    gone.iter().filter(|id| !self.doomed.contains(id)).collect();
                if !unexpected.is_empty() && self.procs[from].alive {
                    return Err(format!(
                        "process {to} freed {unexpected:?} while process {from} lent it on"
                    ));
                }
                self.release_all(to, drop_now);
                self.actions(to);
                self.send(to, from, Msg::Ack { lend, gone });
            }
            Msg::Ack { lend, gone } => {
                // Gone ids travel as plain ids: no registration comes with them.
                if let Some((_, msg, regs)) = self.procs[to].waiting.get_mut(&lend) {
                    regs.retain(|id| !gone.contains(id));
                    if let Msg::Value { refs, .. } = msg {
                        refs.retain(|id| !gone.contains(id));
                    }
                }
                if let Some(holds) = self.procs[to].rc.registered(lend) {
                    let (q, msg, regs) = self.procs[to].waiting.remove(&lend).expect("lend");
                    for id in regs {
                        self.procs[to].table.get_mut(&id).expect("held").regs += 1;
                    }
                    self.send(to, q, msg);
                    self.release_all(to, holds);
                }
            }
            Msg::TaskFailed { task } => {
                if let Some((_, holds)) = self.procs[to].tasks.remove(&task) {
                    self.release_all(to, holds);
                }
            }
            Msg::Removed { from, entries } => {
                let drop_now = self.procs[to].rc.removed(worker(from), &entries);
                self.release_all(to, drop_now);
            }
        }
        Ok(())
    }

    fn handle(&mut self, ev: Ev) -> Result<(), String> {
        match ev {
            Ev::Deliver { from, to, msg } => {
                // What a killed process had not got out is lost with it (a
                // request to it still ends: with an error).
                if self.procs[from].alive || matches!(msg, Msg::Ack { .. }) {
                    self.deliver(to, msg)?;
                } else if let Msg::Value { refs, .. } = msg {
                    let foreign = refs.into_iter().filter(|id| id.owner != worker(from));
                    self.orphans.extend(foreign.map(|id| (to, id)));
                }
            }
            Ev::TaskEnd {
                at,
                owner,
                task,
                args,
            } => {
                if !self.procs[at].alive {
                    return Ok(());
                }
                let ids: Vec<ObjectId> = args.iter().map(|t| t.0).collect();
                for t in args {
                    // An actor keeps some of its arguments in its state.
                    if !self.ending && self.below(3) == 0 {
                        self.procs[at].user.push(t);
                    } else {
                        self.release(at, t);
                    }
                }
                // Arguments it still holds: it registers itself with their
                // owners before the result goes.
                let mut still = Vec::new();
                for id in ids {
                    let foreign = id.owner != worker(at);
                    if foreign && !still.contains(&id) && self.procs[at].table.contains_key(&id) {
                        still.push(id);
                    }
                }
                let result = Msg::Result { task };
                if still.is_empty() {
                    self.send(at, owner, result);
                    return Ok(());
                }
                let holds = still.iter().map(|&id| (id, self.hold(at, id))).collect();
                let (drop_now, wait) = self.procs[at].rc.lend(worker(at), holds);
                let lend = wait.expect("foreign refs wait for their owners");
                self.release_all(at, drop_now);
                self.procs[at].waiting.insert(lend, (owner, result, still));
                self.actions(at);
            }
            Ev::SendRemovals { at } => {
                if !self.procs[at].alive {
                    return Ok(());
                }
                for (owner, entries) in self.procs[at].rc.take_removals() {
                    self.send(at, proc_of(owner), Msg::Removed { from: at, entries });
                }
            }
            Ev::BorrowerDied { at, dead } => {
                if !self.procs[at].alive {
                    return Ok(());
                }
                let drop_now = self.procs[at].rc.borrower_died(worker(dead));
                self.release_all(at, drop_now);
                // Tasks pushed to it end (failed); their argument holds go.
                let lost: Vec<u64> = self.procs[at]
                    .tasks
                    .iter()
                    .filter(|(_, (w, _))| *w == dead)
                    .map(|(t, _)| *t)
                    .collect();
                for t in lost {
                    let (_, holds) = self.procs[at].tasks.remove(&t).expect("task");
                    self.release_all(at, holds);
                }
            }
        }
        Ok(())
    }

    fn kill(&mut self, p: usize) {
        self.procs[p].alive = false;
        // Its tasks' workers may keep their arguments, unregistered: the
        // holds that protected them are gone.
        let args = self.procs[p]
            .tasks
            .values()
            .flat_map(|(_, h)| h.iter().map(|t| t.0));
        self.doomed.extend(args);
        for (_, (q, msg, _)) in std::mem::take(&mut self.procs[p].waiting) {
            if let Msg::Value { refs, .. } = msg {
                let foreign = refs.into_iter().filter(|id| id.owner != worker(p));
                self.orphans.extend(foreign.map(|id| (q, id)));
            }
        }
        for at in 0..self.procs.len() {
            if at != p && self.procs[at].alive {
                let d = 1 + self.below(60) as u64;
                self.at(d, Ev::BorrowerDied { at, dead: p });
            }
        }
    }

    fn step(&mut self) -> Result<bool, String> {
        let Some(Reverse((t, seq))) = self.queue.pop() else {
            return Ok(false);
        };
        self.now = t;
        let ev = self.events.remove(&seq).expect("event");
        if std::env::var_os("RAYRS_SIM_TRACE").is_some() {
            eprintln!("{t} {ev:?}");
        }
        self.handle(ev)?;
        Ok(true)
    }

    fn run(mut self) -> Result<(), String> {
        let steps = 200 + self.below(400);
        let deaths = self.below(3).min(self.procs.len() - 1);
        let mut killed = 0;
        for _ in 0..steps {
            let live: Vec<usize> = (0..self.procs.len())
                .filter(|&p| self.procs[p].alive)
                .collect();
            let p = live[self.below(live.len())];
            if killed < deaths && live.len() > 1 && self.below(150) == 0 {
                self.kill(p);
                killed += 1;
                continue;
            }
            if std::env::var_os("RAYRS_SIM_TRACE").is_some() {
                eprintln!("{} program step of {p}", self.now);
            }
            self.program_step(p)?;
            for _ in 0..self.below(4) {
                if !self.step()? {
                    break;
                }
            }
        }
        // Every live program drops its refs; the protocol runs dry.
        // (Values still on their way are dropped as they arrive.)
        self.ending = true;
        loop {
            let mut dropped = false;
            for p in 0..self.procs.len() {
                if self.procs[p].alive && !self.procs[p].user.is_empty() {
                    let user = std::mem::take(&mut self.procs[p].user);
                    self.release_all(p, user);
                    dropped = true;
                }
            }
            while self.step()? {}
            if !dropped {
                break;
            }
        }
        // The registrations orphaned by a dying sender are cleared by hand.
        for (q, id) in std::mem::take(&mut self.orphans) {
            let o = proc_of(id.owner);
            if self.procs[o].alive && self.procs[o].rc.count_of(id, worker(q)) > 0 {
                let drop_now = self.procs[o].rc.removed(worker(q), &[(id, 1)]);
                self.release_all(o, drop_now);
            }
        }
        while self.step()? {}
        let summary: Vec<String> = self
            .procs
            .iter()
            .map(|p| {
                format!(
                    "alive {} table {:?} {} tasks {:?} waiting {:?}",
                    p.alive,
                    p.table,
                    p.rc.describe(),
                    p.tasks,
                    p.waiting
                )
            })
            .collect();
        for (p, proc) in self.procs.iter().enumerate().filter(|(_, p)| p.alive) {
            if !proc.table.is_empty() {
                eprintln!("{summary:#?}");
                return Err(format!(
                    "process {p} still has {:?} after every program dropped its refs; {}",
                    proc.table,
                    proc.rc.describe()
                ));
            }
            if proc.rc.anomalies > 0 {
                return Err(format!("process {p} saw removals of counts never made"));
            }
            if !proc.rc.is_idle() || !proc.tasks.is_empty() || !proc.waiting.is_empty() {
                return Err(format!("process {p}'s protocol is not idle at the end"));
            }
        }
        Ok(())
    }
}

#[test]
fn no_object_is_freed_while_borrowed_and_every_count_reaches_zero() {
    crate::cluster::sim_seeds::run_seeds(|seed| World::new(seed).run());
}

/// Replays one seed (`RAYRS_SIM_SEED`), for a failure found above.
#[test]
fn replay_one_seed() {
    if let Some(seed) = crate::cluster::sim_seeds::replay_seed() {
        World::new(seed).run().unwrap();
    }
}
