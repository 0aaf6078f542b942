//! What the ingest reads of a record, whether the record is a whole
//! [`Record`] (from `tracing`, a log, another process) or one of the
//! runtime's compact shapes as its thread wrote it ([`Packed`]).
//!
//! The runtime's hot records (submit, run, object put and get) arrive in
//! compact typed shapes. Expanding each into a [`Record`] and then looking
//! its fields up by name cost about a quarter of the ingest (callgrind,
//! recorded W3, docs/perf-log/2026-11-28-typed-ingest.md), so the handlers
//! read records through [`Facts`] and are built for both kinds. A compact
//! shape answers exactly what its expansion's fields would (see
//! `Batch::unpack_into`); `views::packed_tests` checks that both give the
//! same views.

use super::model::{
    id_key, id_of, numbered_id, static_id, Id, IdKey, ACTOR_ID, NODE_ID, WORKER_ID,
};
use super::task::LiveTask;
use crate::packed::{Close, Id128, ObjectIo, Run, RunShape, Submit};
use crate::record::{FieldValue, Record, RecordKind, CLOSED_AT};

/// What the handlers read of a record. Each method answers what the field
/// of that name (in brackets) says; the defaults answer for a record
/// without that field (a compact shape overrides what it carries).
pub(super) trait Facts {
    /// Opening, close or event.
    fn kind(&self) -> RecordKind;
    /// The enclosing recorded span, or 0.
    fn parent(&self) -> u64;
    /// When it was recorded.
    fn at(&self) -> u64;
    /// The recording thread's index.
    fn thread(&self) -> u32;
    /// The span it opens or closes; 0 for events.
    fn span(&self) -> u64 {
        0
    }
    /// `task_id`, as a key.
    fn task_key(&self) -> Option<IdKey> {
        None
    }
    /// `parent_task`, as a key.
    fn parent_task_key(&self) -> Option<IdKey> {
        None
    }
    /// `parent_span`, when not 0.
    fn parent_span(&self) -> Option<u64> {
        None
    }
    /// `attempt`.
    fn attempt(&self) -> Option<u64> {
        None
    }
    /// Whether it names an actor or a method (`actor_id`, `method`): a
    /// submit of an actor call.
    fn names_actor(&self) -> bool {
        false
    }
    /// `actor_id`, rendered.
    fn actor_id(&self) -> Option<Id> {
        None
    }
    /// Takes what it says of its task: name (`function` over `method`),
    /// `attempt`, `class`, `actor_id`, `node_id`, `worker_id`.
    fn fill_task(&self, _task: &mut LiveTask) {}
    /// [`CLOSED_AT`], as a number.
    fn closed_at(&self) -> Option<u64> {
        None
    }
    /// `cpu_nanos`.
    fn cpu_nanos(&self) -> Option<u64> {
        None
    }
    /// Whether it carries an `error`.
    fn failed(&self) -> bool {
        false
    }
    /// `object_id`, as a key.
    fn object_key(&self) -> Option<IdKey> {
        None
    }
    /// `bytes`.
    fn bytes(&self) -> Option<u64> {
        None
    }
    /// `node_id`, rendered.
    fn node_id(&self) -> Option<Id> {
        None
    }
    /// `producer_node`, rendered.
    fn producer_node(&self) -> Option<Id> {
        None
    }
}

pub(super) fn str_field(record: &Record, key: &str) -> Option<Id> {
    record.field(key).map(|value| id_of(key, value))
}

/// A task id field (`task_id`, `parent_task`) as a key: no string built.
pub(super) fn task_field(record: &Record, key: &str) -> Option<IdKey> {
    record.field(key).map(|value| id_key(key, value))
}

pub(super) fn u64_field(record: &Record, key: &str) -> Option<u64> {
    u64_value(record.field(key)?)
}

/// A number, or a string holding one.
pub(super) fn u64_value(value: &FieldValue) -> Option<u64> {
    match value {
        FieldValue::Str(s) => s.trim().parse().ok(),
        other => other.as_u64(),
    }
}

impl Facts for Record {
    fn kind(&self) -> RecordKind {
        self.kind
    }
    fn span(&self) -> u64 {
        self.span
    }
    fn parent(&self) -> u64 {
        self.parent
    }
    fn at(&self) -> u64 {
        self.at_nanos
    }
    fn thread(&self) -> u32 {
        self.thread
    }
    fn task_key(&self) -> Option<IdKey> {
        task_field(self, "task_id")
    }
    fn parent_task_key(&self) -> Option<IdKey> {
        task_field(self, "parent_task")
    }
    fn parent_span(&self) -> Option<u64> {
        u64_field(self, "parent_span").filter(|s| *s != 0)
    }
    fn attempt(&self) -> Option<u64> {
        u64_field(self, "attempt")
    }
    fn names_actor(&self) -> bool {
        self.field("actor_id").is_some() || self.field("method").is_some()
    }
    fn actor_id(&self) -> Option<Id> {
        str_field(self, "actor_id")
    }
    /// In one pass over the fields: the last field of a key counts, as
    /// with [`Record::field`].
    fn fill_task(&self, task: &mut LiveTask) {
        let (mut function, mut method) = (None, None);
        for (key, value) in self.fields.iter() {
            match key {
                "function" => function = Some(value),
                "method" => method = Some(value),
                "attempt" => {
                    if let Some(attempt) = u64_value(value) {
                        task.attempt = attempt;
                    }
                }
                "class" => task.class = Some(id_of(key, value)),
                "actor_id" => task.actor_id = Some(id_of(key, value)),
                "node_id" => task.node_id = Some(id_of(key, value)),
                "worker_id" => task.worker_id = Some(id_of(key, value)),
                _ => {}
            }
        }
        if let Some((key, value)) = function
            .map(|v| ("function", v))
            .or(method.map(|v| ("method", v)))
        {
            task.name = Some(id_of(key, value));
        }
    }
    fn closed_at(&self) -> Option<u64> {
        match self.field(CLOSED_AT) {
            Some(FieldValue::U64(closed)) => Some(*closed),
            _ => None,
        }
    }
    fn cpu_nanos(&self) -> Option<u64> {
        u64_field(self, "cpu_nanos")
    }
    fn failed(&self) -> bool {
        self.field("error").is_some()
    }
    fn object_key(&self) -> Option<IdKey> {
        self.field("object_id").map(|v| id_key("object_id", v))
    }
    fn bytes(&self) -> Option<u64> {
        u64_field(self, "bytes")
    }
    fn node_id(&self) -> Option<Id> {
        str_field(self, "node_id")
    }
    fn producer_node(&self) -> Option<Id> {
        str_field(self, "producer_node")
    }
}

/// A compact shape and the thread that wrote it.
pub(super) struct Typed<'a, T>(pub(super) &'a T, pub(super) u32);

/// A two-part runtime id as a key (what [`id_key`] makes of its field).
fn key(id: Id128) -> IdKey {
    let (hi, lo) = id.parts();
    IdKey::Num(true, hi, lo)
}

fn actor(id: Id128) -> Id {
    let (hi, lo) = id.parts();
    numbered_id(ACTOR_ID, Some(hi), lo)
}

/// The shape's own time, enclosing span and thread.
macro_rules! shape_facts {
    ($shape:ty, $kind:expr, { $($own:item)* }) => {
        impl Facts for Typed<'_, $shape> {
            fn kind(&self) -> RecordKind {
                $kind
            }
            fn at(&self) -> u64 {
                self.0.at
            }
            fn parent(&self) -> u64 {
                self.0.parent
            }
            fn thread(&self) -> u32 {
                self.1
            }
            $($own)*
        }
    };
}

shape_facts!(Submit, RecordKind::Event, {
    fn task_key(&self) -> Option<IdKey> {
        Some(key(self.0.task))
    }
    fn parent_task_key(&self) -> Option<IdKey> {
        self.0.parent_task().map(key)
    }
    fn parent_span(&self) -> Option<u64> {
        self.0.parent_span()
    }
    fn names_actor(&self) -> bool {
        self.0.actor().is_some()
    }
    fn actor_id(&self) -> Option<Id> {
        self.0.actor().map(actor)
    }
    fn fill_task(&self, task: &mut LiveTask) {
        if let Some(id) = self.0.actor() {
            task.actor_id = Some(actor(id));
        }
        task.name = Some(static_id(self.0.function));
    }
});

shape_facts!(Run, RecordKind::SpanNew, {
    fn span(&self) -> u64 {
        self.0.span
    }
    fn task_key(&self) -> Option<IdKey> {
        Some(key(self.0.task))
    }
    fn parent_task_key(&self) -> Option<IdKey> {
        self.0.parent_task().map(key)
    }
    fn parent_span(&self) -> Option<u64> {
        self.0.parent_span()
    }
    fn attempt(&self) -> Option<u64> {
        self.0.attempt()
    }
    fn names_actor(&self) -> bool {
        self.0.actor().is_some()
    }
    fn actor_id(&self) -> Option<Id> {
        self.0.actor().map(actor)
    }
    fn fill_task(&self, task: &mut LiveTask) {
        let run = self.0;
        match run.kind {
            RunShape::Task => task.name = Some(static_id(run.what)),
            RunShape::ActorCall | RunShape::ActorCreate => {
                task.class = Some(static_id(run.what));
            }
        }
        if let Some(method) = run.method() {
            task.name = Some(static_id(method));
        }
        if let Some(id) = run.actor() {
            task.actor_id = Some(actor(id));
        }
        if let Some(attempt) = run.attempt() {
            task.attempt = attempt;
        }
        task.node_id = Some(numbered_id(NODE_ID, None, run.node));
        task.worker_id = Some(numbered_id(WORKER_ID, None, run.worker));
    }
    fn closed_at(&self) -> Option<u64> {
        self.0.closed_at()
    }
    fn cpu_nanos(&self) -> Option<u64> {
        self.0.cpu_nanos()
    }
    fn node_id(&self) -> Option<Id> {
        Some(numbered_id(NODE_ID, None, self.0.node))
    }
});

shape_facts!(Close, RecordKind::SpanClose, {
    fn span(&self) -> u64 {
        self.0.span
    }
    fn cpu_nanos(&self) -> Option<u64> {
        self.0.cpu_nanos
    }
});

shape_facts!(ObjectIo, RecordKind::Event, {
    fn task_key(&self) -> Option<IdKey> {
        self.0.task().map(key)
    }
    fn object_key(&self) -> Option<IdKey> {
        Some(key(self.0.object))
    }
    fn bytes(&self) -> Option<u64> {
        Some(self.0.bytes)
    }
    fn node_id(&self) -> Option<Id> {
        Some(numbered_id(NODE_ID, None, self.0.node))
    }
});
