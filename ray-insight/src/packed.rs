//! A batch as its recording thread fills it: the runtime's own records in
//! compact typed form, anything else as a whole [`Record`].
//!
//! A [`Record`] is a few hundred bytes (its inline fields are sized for
//! any span). The runtime's records are a handful of shapes whose fields
//! are known: a submit, a run (opened, and usually closed in the same
//! record), a run's close, an object's put or get. Written in those shapes
//! they take a fifth to two fifths of the bytes, and bytes are what a burst
//! costs its threads: a batch waits in memory until the collector runs, so
//! each batch is fresh memory the thread faults in as it writes
//! (docs/perf-log/2026-11-28-recording-buffers.md). A sink that wants
//! records has each compact one expanded into the [`Record`] it stands for
//! ([`Batch::unpack_into`]); the views read the shapes as they are
//! (`views/facts.rs`), and a cluster ships and logs them compact
//! (`log::Chunk`), each with the same meaning as its expansion.
//!
//! Each shape has a list of its own, and the batch's `order` says which
//! list each record came from: a record costs its own size and eight bytes
//! of order, not the size of the largest shape.

use crate::record::{FieldStr, FieldValue, Fields, Record, RecordKind, CLOSED_AT};

/// Which list a batch's record sits in, and the thread that wrote it
/// (batches of several threads are joined when small).
#[derive(Debug, Clone, Copy)]
struct Entry {
    shape: Shape,
    thread: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    Full,
    Submit,
    Run,
    Close,
    Object,
}

/// A 128-bit id kept as two words (a `u128` would align the whole record
/// to 16 bytes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Id128 {
    hi: u64,
    lo: u64,
}

impl Id128 {
    fn new(value: u128) -> Self {
        Id128 {
            hi: (value >> 64) as u64,
            lo: value as u64,
        }
    }

    fn value(self) -> FieldValue {
        FieldValue::U128 {
            hi: self.hi,
            lo: self.lo,
        }
    }

    /// Its high and low words.
    pub(crate) fn parts(self) -> (u64, u64) {
        (self.hi, self.lo)
    }

    /// The id of high word `hi` and low word `lo`.
    pub(crate) fn from_parts(hi: u64, lo: u64) -> Self {
        Id128 { hi, lo }
    }
}

/// `task.submit`: a task of `function`, or (with an actor) a call of that
/// method. (Optional ids are flagged in `has`, not `Option`s: each of
/// those would take 24 bytes.)
#[derive(Debug, Clone, Copy)]
pub(crate) struct Submit {
    pub(crate) at: u64,
    pub(crate) parent: u64,
    pub(crate) task: Id128,
    pub(crate) actor: Id128,
    pub(crate) parent_task: Id128,
    pub(crate) parent_span: u64,
    pub(crate) function: &'static str,
    pub(crate) has: u8,
}

/// Bits of the `has` bytes.
pub(crate) const HAS_ACTOR: u8 = 1;
pub(crate) const HAS_PARENT_TASK: u8 = 2;
pub(crate) const HAS_TASK: u8 = 4;
pub(crate) const CLOSED: u8 = 8;
pub(crate) const HAS_CPU: u8 = 16;
pub(crate) const IS_GET: u8 = 32;
pub(crate) const IS_ARG: u8 = 64;

fn flag(on: bool, bit: u8) -> u8 {
    if on {
        bit
    } else {
        0
    }
}

/// The id, if `has` has `bit`.
fn flagged(has: u8, bit: u8, id: Id128) -> Option<Id128> {
    (has & bit != 0).then_some(id)
}

/// What a run is: a task's, an actor call's or an actor's constructor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunKind {
    /// `task.run` of `function`.
    Task {
        /// The task's function.
        function: &'static str,
    },
    /// `actor.call` of `method` on an actor of `class`.
    ActorCall {
        /// The actor's id.
        actor: u128,
        /// The actor's class.
        class: &'static str,
        /// The method called.
        method: &'static str,
    },
    /// `actor.create`: the constructor of an actor of `class`.
    ActorCreate {
        /// The actor's id.
        actor: u128,
        /// The actor's class.
        class: &'static str,
    },
}

/// Everything a run's opening says: what runs, which task it is, its
/// caller, and where.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunInfo {
    /// Task, actor call or constructor.
    pub kind: RunKind,
    /// The task's id (an actor call's and a constructor's too).
    pub task: u128,
    /// Which send of the task this is (0: the first; recorded above 0).
    pub attempt: u32,
    /// The task that submitted it, if any (the driver's have none).
    pub parent_task: Option<u128>,
    /// The submitter's application span it was submitted in, or 0.
    pub parent_span: u64,
    /// The node it runs on.
    pub node: u64,
    /// The worker it runs in.
    pub worker: u64,
}

/// A run's opening (`task.run`, `actor.call`, `actor.create`), and its
/// close when nothing was recorded on its thread in between.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Run {
    pub(crate) at: u64,
    pub(crate) span: u64,
    pub(crate) parent: u64,
    pub(crate) task: Id128,
    pub(crate) actor: Id128,
    pub(crate) parent_task: Id128,
    pub(crate) parent_span: u64,
    pub(crate) node: u64,
    pub(crate) worker: u64,
    /// The function, or the actor's class.
    pub(crate) what: &'static str,
    /// The method called ("" for a task or a constructor).
    pub(crate) method: &'static str,
    /// When it closed, if that is folded in here (`CLOSED`).
    pub(crate) closed_at: u64,
    /// The CPU time its close reported (`HAS_CPU`).
    pub(crate) cpu_nanos: u64,
    pub(crate) attempt: u32,
    pub(crate) kind: RunShape,
    pub(crate) has: u8,
}

/// Which run a [`Run`] opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RunShape {
    /// `task.run`.
    Task,
    /// `actor.call`.
    ActorCall,
    /// `actor.create`.
    ActorCreate,
}

/// A run's close as a record of its own (something was recorded inside
/// the run), with the CPU time it reports.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Close {
    pub(crate) at: u64,
    pub(crate) span: u64,
    pub(crate) parent: u64,
    pub(crate) name: &'static str,
    pub(crate) target: &'static str,
    pub(crate) cpu_nanos: Option<u64>,
}

/// `object.put` or `object.get` (read as a task's argument or not).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ObjectIo {
    pub(crate) at: u64,
    pub(crate) parent: u64,
    pub(crate) object: Id128,
    pub(crate) task: Id128,
    pub(crate) bytes: u64,
    pub(crate) node: u64,
    pub(crate) has: u8,
}

/// What the runtime records of an object's put or get.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObjectInfo {
    /// The object.
    pub object: u128,
    /// Its size in bytes.
    pub bytes: u64,
    /// The task that put or read it (none: the driver outside a task).
    pub task: Option<u128>,
    /// The node it moved on.
    pub node: u64,
    /// `None` for a put; for a get, whether it read a task's argument.
    pub get: Option<bool>,
}

/// What the runtime records of a submit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubmitInfo {
    /// The task submitted.
    pub task: u128,
    /// The function, or for an actor call the method.
    pub function: &'static str,
    /// The actor called, if this is an actor call.
    pub actor: Option<u128>,
    /// The task that submitted it, if any.
    pub parent_task: Option<u128>,
    /// The submitter's application span it was submitted in, or 0.
    pub parent_span: u64,
}

/// One thread's batch of records, or several small ones joined, in
/// recording order.
#[derive(Debug, Default)]
pub(crate) struct Batch {
    /// The records a list is given room for when first used.
    room: usize,
    order: Vec<Entry>,
    /// When its oldest record was written (meaningful only when not empty).
    first_at: u64,
    full: Vec<Record>,
    submits: Vec<Submit>,
    runs: Vec<Run>,
    closes: Vec<Close>,
    objects: Vec<ObjectIo>,
}

impl Batch {
    /// An empty batch with room for `records` records. Each shape's list
    /// gets that room when first used: a thread that only submits never
    /// allocates a list of runs. (An allocation touches the memory past
    /// its end, so an unused list would still fault a page in.)
    pub(crate) fn with_capacity(records: usize) -> Self {
        Batch {
            room: records,
            order: Vec::with_capacity(records),
            ..Batch::default()
        }
    }

    /// How many records it holds.
    pub(crate) fn len(&self) -> usize {
        self.order.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// When its oldest record was written, if it holds any.
    pub(crate) fn first_at(&self) -> Option<u64> {
        (!self.order.is_empty()).then_some(self.first_at)
    }

    /// How many records its order list takes without growing: a recycled
    /// buffer below a whole batch is not worth keeping.
    pub(crate) fn capacity(&self) -> usize {
        self.order.capacity()
    }

    /// Gives each list still without room `records` of it when first used.
    pub(crate) fn set_room(&mut self, records: usize) {
        self.room = records;
    }

    fn note(&mut self, shape: Shape, thread: u32, at: u64) {
        if self.order.is_empty() {
            self.first_at = at;
        }
        self.order.push(Entry { shape, thread });
    }

    /// `list`, given the batch's room when it has none yet.
    fn roomy<T>(list: &mut Vec<T>, room: usize) -> &mut Vec<T> {
        if list.capacity() == 0 {
            list.reserve_exact(room);
        }
        list
    }

    /// Appends a whole record, and returns it (to fill in place: moving a
    /// record costs as much as writing it).
    pub(crate) fn push_full(&mut self, record: Record) -> &mut Record {
        self.note(Shape::Full, record.thread, record.at_nanos);
        Self::roomy(&mut self.full, self.room).push(record);
        let last = self.full.len() - 1;
        &mut self.full[last]
    }

    /// The last record, if it is a whole one (to fold a close into).
    pub(crate) fn last_full_mut(&mut self) -> Option<&mut Record> {
        match self.order.last() {
            Some(Entry {
                shape: Shape::Full, ..
            }) => self.full.last_mut(),
            _ => None,
        }
    }

    /// Appends a submit as it is.
    pub(crate) fn push_submit_shape(&mut self, thread: u32, submit: Submit) {
        self.note(Shape::Submit, thread, submit.at);
        Self::roomy(&mut self.submits, self.room).push(submit);
    }

    /// Appends a run's opening as it is.
    pub(crate) fn push_run_shape(&mut self, thread: u32, run: Run) {
        self.note(Shape::Run, thread, run.at);
        Self::roomy(&mut self.runs, self.room).push(run);
    }

    /// Appends a run's close as it is.
    pub(crate) fn push_close_shape(&mut self, thread: u32, close: Close) {
        self.note(Shape::Close, thread, close.at);
        Self::roomy(&mut self.closes, self.room).push(close);
    }

    /// Appends an object's put or get as it is.
    pub(crate) fn push_object_shape(&mut self, thread: u32, object: ObjectIo) {
        self.note(Shape::Object, thread, object.at);
        Self::roomy(&mut self.objects, self.room).push(object);
    }

    pub(crate) fn push_submit(&mut self, thread: u32, at: u64, parent: u64, info: &SubmitInfo) {
        self.push_submit_shape(
            thread,
            Submit {
                at,
                parent,
                task: Id128::new(info.task),
                actor: Id128::new(info.actor.unwrap_or(0)),
                parent_task: Id128::new(info.parent_task.unwrap_or(0)),
                parent_span: info.parent_span,
                function: info.function,
                has: flag(info.actor.is_some(), HAS_ACTOR)
                    | flag(info.parent_task.is_some(), HAS_PARENT_TASK),
            },
        );
    }

    pub(crate) fn push_run(&mut self, thread: u32, at: u64, span: u64, parent: u64, info: RunInfo) {
        let (actor, what, method) = match info.kind {
            RunKind::Task { function } => (0, function, ""),
            RunKind::ActorCall {
                actor,
                class,
                method,
            } => (actor, class, method),
            RunKind::ActorCreate { actor, class } => (actor, class, ""),
        };
        self.push_run_shape(
            thread,
            Run {
                at,
                span,
                parent,
                task: Id128::new(info.task),
                actor: Id128::new(actor),
                parent_task: Id128::new(info.parent_task.unwrap_or(0)),
                parent_span: info.parent_span,
                node: info.node,
                worker: info.worker,
                what,
                method,
                closed_at: 0,
                cpu_nanos: 0,
                attempt: info.attempt,
                kind: info.kind.shape(),
                has: flag(info.parent_task.is_some(), HAS_PARENT_TASK),
            },
        );
    }

    /// Folds the close of run `span` at `at` into its opening, when that is
    /// the batch's last record; false (nothing changed) otherwise.
    pub(crate) fn fold_close(&mut self, span: u64, at: u64, cpu_nanos: Option<u64>) -> bool {
        let last_is_run = matches!(
            self.order.last(),
            Some(Entry {
                shape: Shape::Run,
                ..
            })
        );
        match self.runs.last_mut() {
            Some(run) if last_is_run && run.span == span && run.has & CLOSED == 0 => {
                run.closed_at = at;
                run.cpu_nanos = cpu_nanos.unwrap_or(0);
                run.has |= CLOSED | flag(cpu_nanos.is_some(), HAS_CPU);
                true
            }
            _ => false,
        }
    }

    /// A run's close as a record of its own.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn push_close(
        &mut self,
        thread: u32,
        at: u64,
        span: u64,
        parent: u64,
        (name, target): (&'static str, &'static str),
        cpu_nanos: Option<u64>,
    ) {
        self.push_close_shape(
            thread,
            Close {
                at,
                span,
                parent,
                name,
                target,
                cpu_nanos,
            },
        );
    }

    pub(crate) fn push_object(&mut self, thread: u32, at: u64, parent: u64, info: &ObjectInfo) {
        self.push_object_shape(
            thread,
            ObjectIo {
                at,
                parent,
                object: Id128::new(info.object),
                task: Id128::new(info.task.unwrap_or(0)),
                bytes: info.bytes,
                node: info.node,
                has: flag(info.task.is_some(), HAS_TASK)
                    | flag(info.get.is_some(), IS_GET)
                    | flag(info.get == Some(true), IS_ARG),
            },
        );
    }

    /// Moves every record of `other` after this batch's, leaving it empty.
    pub(crate) fn append(&mut self, other: &mut Batch) {
        if self.order.is_empty() {
            self.first_at = other.first_at;
        }
        self.order.append(&mut other.order);
        self.full.append(&mut other.full);
        self.submits.append(&mut other.submits);
        self.runs.append(&mut other.runs);
        self.closes.append(&mut other.closes);
        self.objects.append(&mut other.objects);
    }

    /// Drops the whole records `keep` says no to; returns how many went.
    pub(crate) fn retain_full(&mut self, mut keep: impl FnMut(&Record) -> bool) -> usize {
        let kept: Vec<bool> = self.full.iter().map(&mut keep).collect();
        let dropped = kept.iter().filter(|k| !**k).count();
        if dropped == 0 {
            return 0;
        }
        let mut kept_iter = kept.iter();
        self.order.retain(|entry| match entry.shape {
            Shape::Full => kept_iter.next().copied().unwrap_or(true),
            _ => true,
        });
        let mut kept_iter = kept.iter();
        self.full
            .retain(|_| kept_iter.next().copied().unwrap_or(true));
        dropped
    }

    /// Puts every record on another clock and ids (see
    /// [`crate::log::Chunk::rebase`]).
    pub(crate) fn rebase(
        &mut self,
        shift: i128,
        span: &dyn Fn(u64) -> u64,
        thread: &dyn Fn(u32) -> u32,
        parent_span: &dyn Fn(u64, u64) -> u64,
    ) {
        let shifted = |t: u64| u64::try_from((i128::from(t) + shift).max(0)).unwrap_or(u64::MAX);
        self.first_at = shifted(self.first_at);
        for entry in &mut self.order {
            entry.thread = thread(entry.thread);
        }
        for r in &mut self.full {
            r.shift_times(shift);
            r.span = span(r.span);
            r.parent = span(r.parent);
            r.thread = thread(r.thread);
            // Only these carry a caller's span: other records are spared
            // the field scans.
            if matches!(r.name, "task.submit" | "task.run" | "actor.call") {
                if let Some(FieldValue::U128 { hi: owner, .. }) = r.field("task_id") {
                    let owner = *owner;
                    if let Some(FieldValue::U64(s)) = r.fields.get_mut("parent_span") {
                        *s = parent_span(owner, *s);
                    }
                }
            }
        }
        for s in &mut self.submits {
            s.at = shifted(s.at);
            s.parent = span(s.parent);
            if s.parent_span != 0 {
                s.parent_span = parent_span(s.task.hi, s.parent_span);
            }
        }
        for r in &mut self.runs {
            r.at = shifted(r.at);
            if r.has & CLOSED != 0 {
                r.closed_at = shifted(r.closed_at);
            }
            r.span = span(r.span);
            r.parent = span(r.parent);
            if r.parent_span != 0 && r.kind != RunShape::ActorCreate {
                r.parent_span = parent_span(r.task.hi, r.parent_span);
            }
        }
        for c in &mut self.closes {
            c.at = shifted(c.at);
            c.span = span(c.span);
            c.parent = span(c.parent);
        }
        for o in &mut self.objects {
            o.at = shifted(o.at);
            o.parent = span(o.parent);
        }
    }

    /// Empties it, keeping its buffers.
    pub(crate) fn clear(&mut self) {
        self.order.clear();
        self.full.clear();
        self.submits.clear();
        self.runs.clear();
        self.closes.clear();
        self.objects.clear();
    }

    /// Hands every record to `visit` in recording order, as written: a
    /// whole record, or a compact shape with its thread (what a sink that
    /// reads the shapes themselves takes instead of [`Self::unpack_into`]).
    pub(crate) fn visit<'a>(&'a self, mut visit: impl FnMut(Packed<'a>)) {
        let (mut full, mut submits, mut runs, mut closes, mut objects) = (
            self.full.iter(),
            self.submits.iter(),
            self.runs.iter(),
            self.closes.iter(),
            self.objects.iter(),
        );
        for entry in &self.order {
            let t = entry.thread;
            let packed = match entry.shape {
                Shape::Full => full.next().map(Packed::Full),
                Shape::Submit => submits.next().map(|s| Packed::Submit(s, t)),
                Shape::Run => runs.next().map(|r| Packed::Run(r, t)),
                Shape::Close => closes.next().map(|c| Packed::Close(c, t)),
                Shape::Object => objects.next().map(|o| Packed::Object(o, t)),
            };
            // Every entry has its record (they are pushed together).
            if let Some(packed) = packed {
                visit(packed);
            }
        }
    }

    /// The newest time a record of the batch names: its last record's, or
    /// that record's close when it is a run closed in the same record.
    pub(crate) fn last_at(&self) -> Option<u64> {
        let last = self.order.last()?;
        let at = match last.shape {
            Shape::Full => self
                .full
                .last()
                .map(|r| r.closed_at().unwrap_or(0).max(r.at_nanos)),
            Shape::Submit => self.submits.last().map(|s| s.at),
            Shape::Run => self
                .runs
                .last()
                .map(|r| r.closed_at().unwrap_or(0).max(r.at)),
            Shape::Close => self.closes.last().map(|c| c.at),
            Shape::Object => self.objects.last().map(|o| o.at),
        };
        at
    }

    /// Appends every record, expanded to a [`Record`], to `out` in
    /// recording order, and empties the batch (keeping its buffers).
    pub(crate) fn unpack_into(&mut self, out: &mut Vec<Record>) {
        out.reserve(self.order.len());
        let mut full = self.full.drain(..);
        let (mut submits, mut runs, mut closes, mut objects) = (
            self.submits.iter(),
            self.runs.iter(),
            self.closes.iter(),
            self.objects.iter(),
        );
        for entry in &self.order {
            let record = match entry.shape {
                Shape::Full => full.next(),
                Shape::Submit => submits.next().map(|s| s.record(entry.thread)),
                Shape::Run => runs.next().map(|r| r.record(entry.thread)),
                Shape::Close => closes.next().map(|c| c.record(entry.thread)),
                Shape::Object => objects.next().map(|o| o.record(entry.thread)),
            };
            // Every entry has its record (they are pushed together).
            if let Some(record) = record {
                out.push(record);
            }
        }
        drop(full);
        self.clear();
    }
}

/// One record of a [`Batch`] as its thread wrote it (see [`Batch::visit`]).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Packed<'a> {
    /// A whole record.
    Full(&'a Record),
    /// A submit, and the thread that wrote it.
    Submit(&'a Submit, u32),
    /// A run's opening (perhaps closed in the same record), and its thread.
    Run(&'a Run, u32),
    /// A run's close of its own, and its thread.
    Close(&'a Close, u32),
    /// An object's put or get, and its thread.
    Object(&'a ObjectIo, u32),
}

/// What a sink reads of the compact shapes beyond their fields (which the
/// crate reads as they are): the facts their flags say, as
/// [`Batch::unpack_into`] writes them as fields (`actor_id`,
/// `parent_task`, …), without a [`Record`] in between.
impl Submit {
    /// The actor called (`actor_id`), for an actor call.
    pub(crate) fn actor(&self) -> Option<Id128> {
        flagged(self.has, HAS_ACTOR, self.actor)
    }
    /// The submitting task (`parent_task`), if any.
    pub(crate) fn parent_task(&self) -> Option<Id128> {
        flagged(self.has, HAS_PARENT_TASK, self.parent_task)
    }
    /// The submitter's application span (`parent_span`), if not 0.
    pub(crate) fn parent_span(&self) -> Option<u64> {
        (self.parent_span != 0).then_some(self.parent_span)
    }
}

impl Run {
    /// Its actor (`actor_id`), for an actor call or a constructor.
    pub(crate) fn actor(&self) -> Option<Id128> {
        (self.kind != RunShape::Task).then_some(self.actor)
    }
    /// An actor call's method.
    pub(crate) fn method(&self) -> Option<&'static str> {
        (self.kind == RunShape::ActorCall).then_some(self.method)
    }
    /// Which send of the task it is (`attempt`), if not the first (a
    /// constructor's is not recorded).
    pub(crate) fn attempt(&self) -> Option<u64> {
        (self.attempt > 0 && self.kind != RunShape::ActorCreate).then_some(u64::from(self.attempt))
    }
    /// The submitting task (`parent_task`), if any.
    pub(crate) fn parent_task(&self) -> Option<Id128> {
        flagged(self.has, HAS_PARENT_TASK, self.parent_task)
    }
    /// The submitter's application span (`parent_span`), if not 0.
    pub(crate) fn parent_span(&self) -> Option<u64> {
        (self.parent_span != 0).then_some(self.parent_span)
    }
    /// When it closed ([`CLOSED_AT`]), if that is folded in.
    pub(crate) fn closed_at(&self) -> Option<u64> {
        (self.has & CLOSED != 0).then_some(self.closed_at)
    }
    /// The CPU time its close reported (`cpu_nanos`).
    pub(crate) fn cpu_nanos(&self) -> Option<u64> {
        (self.has & HAS_CPU != 0).then_some(self.cpu_nanos)
    }
}

impl ObjectIo {
    /// The task that put or read it (`task_id`), if any.
    pub(crate) fn task(&self) -> Option<Id128> {
        flagged(self.has, HAS_TASK, self.task)
    }
    /// Whether it is a get (`object.get`) rather than a put.
    pub(crate) fn is_get(&self) -> bool {
        self.has & IS_GET != 0
    }
}

/// The whole record a compact one stands for.
fn expanded(
    kind: RecordKind,
    (span, parent): (u64, u64),
    (name, target): (&'static str, &'static str),
    (at_nanos, thread): (u64, u32),
    fields: Fields,
) -> Record {
    Record {
        kind,
        span,
        parent,
        name,
        target,
        at_nanos,
        thread,
        fields,
    }
}

fn name(fields: &mut Fields, key: &'static str, value: &'static str) {
    fields.push(key, FieldValue::Str(FieldStr::from_static(value)));
}

fn caller(fields: &mut Fields, parent_task: Option<Id128>, parent_span: u64) {
    if let Some(parent) = parent_task {
        fields.push("parent_task", parent.value());
    }
    if parent_span != 0 {
        fields.push("parent_span", FieldValue::U64(parent_span));
    }
}

impl Submit {
    /// The whole record it stands for.
    pub(crate) fn record(&self, thread: u32) -> Record {
        let mut fields = Fields::new();
        fields.push("task_id", self.task.value());
        match flagged(self.has, HAS_ACTOR, self.actor) {
            Some(actor) => {
                name(&mut fields, "method", self.function);
                fields.push("actor_id", actor.value());
            }
            None => name(&mut fields, "function", self.function),
        }
        caller(
            &mut fields,
            flagged(self.has, HAS_PARENT_TASK, self.parent_task),
            self.parent_span,
        );
        expanded(
            RecordKind::Event,
            (0, self.parent),
            ("task.submit", "ray::task"),
            (self.at, thread),
            fields,
        )
    }
}

impl RunInfo {
    /// The name and target of the span it opens.
    pub(crate) fn names(&self) -> (&'static str, &'static str) {
        self.kind.shape().names()
    }
}

impl RunKind {
    fn shape(&self) -> RunShape {
        match self {
            RunKind::Task { .. } => RunShape::Task,
            RunKind::ActorCall { .. } => RunShape::ActorCall,
            RunKind::ActorCreate { .. } => RunShape::ActorCreate,
        }
    }
}

impl RunShape {
    fn names(self) -> (&'static str, &'static str) {
        match self {
            RunShape::Task => ("task.run", "ray::task"),
            RunShape::ActorCall => ("actor.call", "ray::actor"),
            RunShape::ActorCreate => ("actor.create", "ray::actor"),
        }
    }
}

impl Run {
    /// The whole record it stands for.
    pub(crate) fn record(&self, thread: u32) -> Record {
        let mut fields = Fields::new();
        fields.push("task_id", self.task.value());
        let attempt = |fields: &mut Fields| {
            if self.attempt > 0 {
                fields.push("attempt", FieldValue::U64(u64::from(self.attempt)));
            }
        };
        match self.kind {
            RunShape::Task => {
                name(&mut fields, "function", self.what);
                attempt(&mut fields);
            }
            RunShape::ActorCall => {
                fields.push("actor_id", self.actor.value());
                name(&mut fields, "class", self.what);
                name(&mut fields, "method", self.method);
                attempt(&mut fields);
            }
            RunShape::ActorCreate => {
                fields.push("actor_id", self.actor.value());
                name(&mut fields, "class", self.what);
            }
        }
        caller(
            &mut fields,
            flagged(self.has, HAS_PARENT_TASK, self.parent_task),
            self.parent_span,
        );
        fields.push("node_id", FieldValue::U64(self.node));
        fields.push("worker_id", FieldValue::U64(self.worker));
        if self.has & HAS_CPU != 0 {
            fields.push("cpu_nanos", FieldValue::U64(self.cpu_nanos));
        }
        if self.has & CLOSED != 0 {
            fields.push(CLOSED_AT, FieldValue::U64(self.closed_at));
        }
        expanded(
            RecordKind::SpanNew,
            (self.span, self.parent),
            self.kind.names(),
            (self.at, thread),
            fields,
        )
    }
}

impl Close {
    fn record(&self, thread: u32) -> Record {
        let mut fields = Fields::new();
        if let Some(cpu) = self.cpu_nanos {
            fields.push("cpu_nanos", FieldValue::U64(cpu));
        }
        expanded(
            RecordKind::SpanClose,
            (self.span, self.parent),
            (self.name, self.target),
            (self.at, thread),
            fields,
        )
    }
}

impl ObjectIo {
    fn record(&self, thread: u32) -> Record {
        let mut fields = Fields::new();
        fields.push("object_id", self.object.value());
        fields.push("bytes", FieldValue::U64(self.bytes));
        if let Some(task) = flagged(self.has, HAS_TASK, self.task) {
            fields.push("task_id", task.value());
        }
        fields.push("node_id", FieldValue::U64(self.node));
        if self.has & IS_GET != 0 {
            fields.push("arg", FieldValue::Bool(self.has & IS_ARG != 0));
        }
        let name = if self.has & IS_GET != 0 {
            "object.get"
        } else {
            "object.put"
        };
        expanded(
            RecordKind::Event,
            (0, self.parent),
            (name, "ray::object"),
            (self.at, thread),
            fields,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compact_records_are_small() {
        // What a burst writes per record (the point of this module).
        assert!(std::mem::size_of::<Submit>() <= 96);
        assert!(std::mem::size_of::<ObjectIo>() <= 72);
        assert!(std::mem::size_of::<Run>() <= 160);
        assert!(std::mem::size_of::<Record>() >= 2 * std::mem::size_of::<Submit>());
    }

    #[test]
    fn a_mixed_batch_unpacks_in_recording_order() {
        let mut batch = Batch::with_capacity(4);
        let info = SubmitInfo {
            task: (7 << 64) | 1,
            function: "f",
            actor: None,
            parent_task: None,
            parent_span: 0,
        };
        batch.push_submit(3, 10, 0, &info);
        batch.push_full(Record::event("user", "ray_app", 11, Fields::new()));
        let run = RunInfo {
            kind: RunKind::ActorCall {
                actor: 5,
                class: "C",
                method: "m",
            },
            task: 9,
            attempt: 2,
            parent_task: Some(1),
            parent_span: 4,
            node: 1,
            worker: 2,
        };
        batch.push_run(3, 12, 100, 0, run);
        assert!(batch.fold_close(100, 15, Some(3)));
        assert!(!batch.fold_close(100, 16, None), "already closed");
        batch.push_object(
            3,
            17,
            0,
            &ObjectInfo {
                object: 6,
                bytes: 8,
                task: None,
                node: 1,
                get: Some(true),
            },
        );
        assert!(!batch.fold_close(100, 18, None), "not the last record");
        batch.push_close(3, 18, 101, 0, ("task.run", "ray::task"), Some(9));
        assert_eq!(batch.first_at(), Some(10));
        let mut out = Vec::new();
        batch.unpack_into(&mut out);
        assert!(batch.is_empty());
        let names: Vec<&str> = out.iter().map(|r| r.name).collect();
        assert_eq!(
            names,
            [
                "task.submit",
                "user",
                "actor.call",
                "object.get",
                "task.run"
            ]
        );
        assert_eq!(
            out[0].field("task_id").and_then(FieldValue::as_u128),
            Some((7 << 64) | 1)
        );
        assert_eq!(
            out[0].field("function").and_then(FieldValue::as_str),
            Some("f")
        );
        assert_eq!(out[0].thread, 3);
        let call = &out[2];
        assert_eq!(call.span, 100);
        assert_eq!(call.closed_at(), Some(15));
        for (key, value) in [
            ("attempt", 2),
            ("parent_task", 1),
            ("parent_span", 4),
            ("cpu_nanos", 3),
            ("worker_id", 2),
        ] {
            assert_eq!(
                call.field(key).and_then(FieldValue::as_u64),
                Some(value),
                "{key}"
            );
        }
        assert_eq!(call.field("class").and_then(FieldValue::as_str), Some("C"));
        assert_eq!(out[3].field("arg"), Some(&FieldValue::Bool(true)));
        assert_eq!(out[4].kind, RecordKind::SpanClose);
        assert_eq!(out[4].field("cpu_nanos"), Some(&FieldValue::U64(9)));
    }

    #[test]
    fn joined_batches_keep_both_orders() {
        let mut a = Batch::with_capacity(2);
        a.push_full(Record::event("a", "ray", 5, Fields::new()));
        let mut b = Batch::with_capacity(2);
        b.push_close(1, 7, 2, 0, ("task.run", "ray::task"), None);
        b.push_full(Record::event("b", "ray", 8, Fields::new()));
        a.append(&mut b);
        assert!(b.is_empty());
        let mut out = Vec::new();
        a.unpack_into(&mut out);
        let names: Vec<&str> = out.iter().map(|r| r.name).collect();
        assert_eq!(names, ["a", "task.run", "b"]);
    }
}
