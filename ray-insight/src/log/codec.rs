//! The binary encoding of one batch of records: a log frame's payload, and
//! what processes ship to each other.
//!
//! ```text
//! payload   = varint(record count) record*
//! record    = whole | u8 3, submit | u8 4, run | u8 5, close | u8 6, object
//!                                             (the compact shapes, below)
//! whole     = u8 kind                       0 span new, 1 span close, 2 event
//!             varint span, varint parent
//!             name: strref, target: strref
//!             zigzag varint(at_nanos − previous record's at_nanos, wrapping)
//!             varint thread
//!             varint(field count) (key: strref, value)*
//! strref    = varint 0, varint len, UTF-8 bytes    a string new to this batch
//!           | varint n (n ≥ 1)                      the batch's n-th new string
//! value     = u8 0, varint                          U64
//!           | u8 1, zigzag varint                   I64
//!           | u8 2, 8 bytes (IEEE 754 bits, LE)     F64
//!           | u8 3 | u8 4                           Bool false | true
//!           | u8 5, varint hi, varint lo            U128
//!           | u8 6, varint len, UTF-8 bytes         Str
//! ```
//!
//! The compact shapes are the runtime's own records as its threads write
//! them (`crate::packed`), each the same record as the whole one it
//! expands to, in fewer bytes and with no field names:
//!
//! ```text
//! id        = varint hi, varint lo
//! time      = zigzag varint(at_nanos − previous record's at_nanos, wrapping)
//! submit    = varint parent, time, varint thread, u8 has (1 actor, 2 parent task)
//!             id task, [id actor], [id parent_task], varint parent_span,
//!             function: strref
//! run       = varint span, varint parent, time, varint thread,
//!             u8 shape (0 task.run, 1 actor.call, 2 actor.create),
//!             u8 has (2 parent task, 8 closed, 16 cpu),
//!             id task, [id actor: not for task.run], [id parent_task],
//!             varint parent_span, varint node, varint worker, varint attempt,
//!             what: strref, [method: strref, for actor.call],
//!             [zigzag varint(closed_at − at_nanos)], [varint cpu_nanos]
//! close     = varint span, varint parent, time, varint thread,
//!             name: strref, target: strref, u8 0 | u8 1 varint cpu_nanos
//! object    = varint parent, time, varint thread,
//!             u8 has (4 task, 32 get, 64 read as an argument),
//!             id object, [id task], varint bytes, varint node
//! ```
//!
//! Varints are LEB128 (7 bits a byte, least significant first, at most 10
//! bytes). Names, targets and field keys repeat from record to record, so each
//! distinct one is written once per batch and referred to by number after
//! that; times are deltas, since records of a batch are close in time. A
//! batch stands alone: it can be decoded without any other.

use hashbrown::HashMap;

use super::intern::intern;
use super::LogError;
use crate::packed::{
    Batch, Close, Id128, ObjectIo, Packed, Run, RunShape, Submit, CLOSED, HAS_ACTOR, HAS_CPU,
    HAS_PARENT_TASK, HAS_TASK, IS_ARG, IS_GET,
};
use crate::record::{FieldStr, FieldValue, Fields, Record, RecordKind};

/// The fewest bytes a record takes (kind, span, parent, name, target, time,
/// thread, field count: one byte each).
const MIN_RECORD_BYTES: usize = 8;
/// The fewest bytes a field takes (key reference, value tag).
const MIN_FIELD_BYTES: usize = 2;
/// The most records (or fields) reserved for ahead of decoding them.
const MAX_RESERVED: usize = 1024;

const TAG_U64: u8 = 0;
const TAG_I64: u8 = 1;
const TAG_F64: u8 = 2;
const TAG_FALSE: u8 = 3;
const TAG_TRUE: u8 = 4;
const TAG_U128: u8 = 5;
const TAG_STR: u8 = 6;

/// Appends the encoding of `records` (one batch, see the module docs) to `out`.
///
/// [`decode_records`] gives the records back, equal field for field.
pub fn encode_records(records: &[Record], out: &mut Vec<u8>) {
    put_varint(out, records.len() as u64);
    let mut writer = Writer::new(out);
    for record in records {
        writer.record(record);
    }
}

/// Appends the encoding of `batch` (one batch, see the module docs), its
/// compact shapes as they are, to `out`.
pub(crate) fn encode_batch(batch: &Batch, out: &mut Vec<u8>) {
    put_varint(out, batch.len() as u64);
    let mut writer = Writer::new(out);
    batch.visit(|packed| match packed {
        Packed::Full(record) => writer.record(record),
        Packed::Submit(submit, thread) => writer.submit(submit, thread),
        Packed::Run(run, thread) => writer.run(run, thread),
        Packed::Close(close, thread) => writer.close(close, thread),
        Packed::Object(object, thread) => writer.object(object, thread),
    });
}

/// Writes one batch's records after its count: the string table and the
/// previous record's time are the batch's.
struct Writer<'a, 'o> {
    out: &'o mut Vec<u8>,
    table: HashMap<&'a str, u64>,
    previous_at: u64,
}

impl<'a, 'o> Writer<'a, 'o> {
    fn new(out: &'o mut Vec<u8>) -> Self {
        Writer {
            out,
            table: HashMap::new(),
            previous_at: 0,
        }
    }

    fn time(&mut self, at: u64) {
        put_varint(self.out, zigzag(at.wrapping_sub(self.previous_at) as i64));
        self.previous_at = at;
    }

    fn strref(&mut self, s: &'a str) {
        put_strref(self.out, &mut self.table, s);
    }

    fn id(&mut self, id: Id128) {
        let (hi, lo) = id.parts();
        put_varint(self.out, hi);
        put_varint(self.out, lo);
    }

    fn record(&mut self, record: &'a Record) {
        self.out.push(match record.kind {
            RecordKind::SpanNew => 0,
            RecordKind::SpanClose => 1,
            RecordKind::Event => 2,
        });
        put_varint(self.out, record.span);
        put_varint(self.out, record.parent);
        self.strref(record.name);
        self.strref(record.target);
        self.time(record.at_nanos);
        put_varint(self.out, u64::from(record.thread));
        put_varint(self.out, record.fields.len() as u64);
        for (key, value) in record.fields.iter() {
            self.strref(key);
            put_value(self.out, value);
        }
    }

    /// What every compact shape starts with: its kind, its span (the
    /// shapes that have one), its parent span, time and thread.
    fn head(&mut self, kind: u8, span: Option<u64>, parent: u64, at: u64, thread: u32) {
        self.out.push(kind);
        if let Some(span) = span {
            put_varint(self.out, span);
        }
        put_varint(self.out, parent);
        self.time(at);
        put_varint(self.out, u64::from(thread));
    }

    fn submit(&mut self, s: &Submit, thread: u32) {
        self.head(KIND_SUBMIT, None, s.parent, s.at, thread);
        let has = s.has & (HAS_ACTOR | HAS_PARENT_TASK);
        self.out.push(has);
        self.id(s.task);
        if has & HAS_ACTOR != 0 {
            self.id(s.actor);
        }
        if has & HAS_PARENT_TASK != 0 {
            self.id(s.parent_task);
        }
        put_varint(self.out, s.parent_span);
        self.strref(s.function);
    }

    fn run(&mut self, r: &Run, thread: u32) {
        self.head(KIND_RUN, Some(r.span), r.parent, r.at, thread);
        self.out.push(match r.kind {
            RunShape::Task => 0,
            RunShape::ActorCall => 1,
            RunShape::ActorCreate => 2,
        });
        let has = r.has & (HAS_PARENT_TASK | CLOSED | HAS_CPU);
        self.out.push(has);
        self.id(r.task);
        if r.kind != RunShape::Task {
            self.id(r.actor);
        }
        if has & HAS_PARENT_TASK != 0 {
            self.id(r.parent_task);
        }
        put_varint(self.out, r.parent_span);
        put_varint(self.out, r.node);
        put_varint(self.out, r.worker);
        put_varint(self.out, u64::from(r.attempt));
        self.strref(r.what);
        if r.kind == RunShape::ActorCall {
            self.strref(r.method);
        }
        if has & CLOSED != 0 {
            put_varint(self.out, zigzag(r.closed_at.wrapping_sub(r.at) as i64));
        }
        if has & HAS_CPU != 0 {
            put_varint(self.out, r.cpu_nanos);
        }
    }

    fn close(&mut self, c: &Close, thread: u32) {
        self.head(KIND_CLOSE, Some(c.span), c.parent, c.at, thread);
        self.strref(c.name);
        self.strref(c.target);
        match c.cpu_nanos {
            Some(cpu) => {
                self.out.push(1);
                put_varint(self.out, cpu);
            }
            None => self.out.push(0),
        }
    }

    fn object(&mut self, o: &ObjectIo, thread: u32) {
        self.head(KIND_OBJECT, None, o.parent, o.at, thread);
        let has = o.has & (HAS_TASK | IS_GET | IS_ARG);
        self.out.push(has);
        self.id(o.object);
        if has & HAS_TASK != 0 {
            self.id(o.task);
        }
        put_varint(self.out, o.bytes);
        put_varint(self.out, o.node);
    }
}

const KIND_SUBMIT: u8 = 3;
const KIND_RUN: u8 = 4;
const KIND_CLOSE: u8 = 5;
const KIND_OBJECT: u8 = 6;

/// Decodes one batch that [`encode_records`] wrote.
///
/// Never panics, whatever the bytes, and allocates only for what it
/// decodes, never for what the bytes merely announce (a lying count is an
/// error, not a reservation): input that is not a whole batch is a [`LogError::Corrupt`]
/// whose `offset` is the byte of `bytes` where decoding failed (and
/// `records_read` 0: a batch decodes whole or not at all). Names, targets and
/// field keys go through [`intern`](super::intern).
pub fn decode_records(bytes: &[u8]) -> Result<Vec<Record>, LogError> {
    let mut batch = decode_batch(bytes)?;
    let mut records = Vec::with_capacity(batch.len());
    batch.unpack_into(&mut records);
    Ok(records)
}

/// Decodes one batch that [`encode_records`] or [`encode_batch`] wrote,
/// keeping the compact shapes as they are; as [`decode_records`]
/// otherwise.
pub(crate) fn decode_batch(bytes: &[u8]) -> Result<Batch, LogError> {
    let mut reader = Reader {
        bytes,
        at: 0,
        table: Vec::new(),
    };
    reader.batch().map_err(|fault| LogError::Corrupt {
        offset: reader.at as u64,
        reason: fault.to_string(),
        records_read: 0,
    })
}

fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn zigzag(value: i64) -> u64 {
    ((value << 1) ^ (value >> 63)) as u64
}

fn unzigzag(value: u64) -> i64 {
    ((value >> 1) as i64) ^ -((value & 1) as i64)
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_varint(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

fn put_strref<'a>(out: &mut Vec<u8>, table: &mut HashMap<&'a str, u64>, s: &'a str) {
    if let Some(&n) = table.get(s) {
        put_varint(out, n);
    } else {
        put_varint(out, 0);
        put_str(out, s);
        let n = table.len() as u64 + 1;
        table.insert(s, n);
    }
}

fn put_value(out: &mut Vec<u8>, value: &FieldValue) {
    match value {
        FieldValue::U64(v) => {
            out.push(TAG_U64);
            put_varint(out, *v);
        }
        FieldValue::I64(v) => {
            out.push(TAG_I64);
            put_varint(out, zigzag(*v));
        }
        FieldValue::F64(v) => {
            out.push(TAG_F64);
            out.extend_from_slice(&v.to_bits().to_le_bytes());
        }
        FieldValue::Bool(false) => out.push(TAG_FALSE),
        FieldValue::Bool(true) => out.push(TAG_TRUE),
        FieldValue::U128 { hi, lo } => {
            out.push(TAG_U128);
            put_varint(out, *hi);
            put_varint(out, *lo);
        }
        FieldValue::Str(s) => {
            out.push(TAG_STR);
            put_str(out, s);
        }
    }
}

/// A cursor over one batch; failures are a [`Fault`], the position is `at`.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
    table: Vec<Entry>,
}

/// A string of the batch's table: interned, or refused by the interner
/// (over its bounds) and kept as it is beside the placeholder it got.
enum Entry {
    Interned(&'static str),
    Refused(&'static str, Box<str>),
}

/// A compact record's name (a function, class or method): interned, or
/// the interner refused it and the record is kept whole, with the name as
/// an owned field value.
enum Name {
    Interned(&'static str),
    Owned(Box<str>),
}

impl Name {
    /// The name a compact shape can hold, if it is one.
    fn interned(&self) -> Option<&'static str> {
        match self {
            Name::Interned(s) => Some(s),
            Name::Owned(_) => None,
        }
    }

    /// Sets field `key` of `record` to this name, owned.
    fn patch(self, record: &mut Record, key: &str) {
        if let (Name::Owned(name), Some(value)) = (self, record.fields.get_mut(key)) {
            *value = FieldValue::Str(FieldStr::from(&*name));
        }
    }
}

/// What is wrong with a batch where decoding stopped: the `reason` of
/// [`LogError::Corrupt`].
#[derive(Debug, thiserror::Error)]
enum Fault {
    /// More records announced than the bytes left can hold.
    #[error("{count} records announced, {left} bytes left")]
    Records { count: u64, left: usize },
    /// More fields announced than the bytes left can hold.
    #[error("{count} fields announced, {left} bytes left")]
    Fields { count: u64, left: usize },
    /// Bytes after the last record.
    #[error("{0} bytes after the last record")]
    Trailing(usize),
    /// A record kind this build does not know.
    #[error("unknown record kind {0}")]
    Kind(u8),
    /// A compact run's shape this build does not know.
    #[error("unknown run shape {0}")]
    Shape(u8),
    /// A compact record's flags with bits its shape does not have.
    #[error("unknown flags {0:#x}")]
    Flags(u8),
    /// An attempt number over 32 bits.
    #[error("attempt beyond 32 bits")]
    Attempt,
    /// A field value tag this build does not know.
    #[error("unknown field value tag {0}")]
    Tag(u8),
    /// A thread index over 32 bits.
    #[error("thread index beyond 32 bits")]
    Thread,
    /// The bytes end inside a record.
    #[error("the batch ends inside a record")]
    Ended,
    /// More bytes announced than are left.
    #[error("{len} bytes announced, {left} left")]
    Bytes { len: usize, left: usize },
    /// A varint over 64 bits.
    #[error("varint overflows 64 bits")]
    Overflow,
    /// A varint of more than 10 bytes.
    #[error("varint longer than 10 bytes")]
    TooLong,
    /// A string length beyond the address space.
    #[error("string of {0} bytes")]
    StringLength(u64),
    /// A string that is not UTF-8.
    #[error("string not UTF-8: {0}")]
    Utf8(#[source] std::str::Utf8Error),
    /// A reference to a name the batch has not defined.
    #[error("reference to name {name}, only {known} in this batch")]
    Name { name: u64, known: usize },
}

type Decoded<T> = Result<T, Fault>;

impl Reader<'_> {
    fn remaining(&self) -> usize {
        self.bytes.len() - self.at
    }

    fn batch(&mut self) -> Decoded<Batch> {
        let count = self.varint()?;
        // Every record takes at least MIN_RECORD_BYTES: a larger count is a
        // lie, refused before it sizes an allocation.
        if count > (self.remaining() / MIN_RECORD_BYTES) as u64 {
            return Err(Fault::Records {
                count,
                left: self.remaining(),
            });
        }
        // A record takes a few hundred bytes in memory against at least 8
        // in a batch: reserve for what is decoded, not what is announced.
        // The room reserved is for the records decoded, not announced: the
        // order list gets at most MAX_RESERVED, each shape's list (given
        // its room only when a record of it comes) a quarter of that.
        let mut batch = Batch::with_capacity((count as usize).min(MAX_RESERVED));
        batch.set_room((count as usize).min(MAX_RESERVED / 4));
        let mut previous_at = 0u64;
        for _ in 0..count {
            previous_at = match self.byte()? {
                KIND_SUBMIT => self.submit(&mut batch, previous_at)?,
                KIND_RUN => self.run(&mut batch, previous_at)?,
                KIND_CLOSE => self.close(&mut batch, previous_at)?,
                KIND_OBJECT => self.object(&mut batch, previous_at)?,
                kind => {
                    let record = self.record(kind, previous_at)?;
                    let at = record.at_nanos;
                    batch.push_full(record);
                    at
                }
            };
        }
        if self.remaining() != 0 {
            return Err(Fault::Trailing(self.remaining()));
        }
        Ok(batch)
    }

    fn time(&mut self, previous_at: u64) -> Decoded<u64> {
        Ok(previous_at.wrapping_add(unzigzag(self.varint()?) as u64))
    }

    fn thread(&mut self) -> Decoded<u32> {
        u32::try_from(self.varint()?).map_err(|_| Fault::Thread)
    }

    fn id(&mut self) -> Decoded<Id128> {
        Ok(Id128::from_parts(self.varint()?, self.varint()?))
    }

    /// The id if `has` says it is there, else the zero id.
    fn id_if(&mut self, present: bool) -> Decoded<Id128> {
        if present {
            self.id()
        } else {
            Ok(Id128::default())
        }
    }

    /// A flags byte with no bits but `allowed`.
    fn flags(&mut self, allowed: u8) -> Decoded<u8> {
        match self.byte()? {
            has if has & !allowed == 0 => Ok(has),
            other => Err(Fault::Flags(other)),
        }
    }

    /// A compact shape's parent span, time and thread (after its span, for
    /// the shapes that have one).
    fn head(&mut self, previous_at: u64) -> Decoded<(u64, u64, u32)> {
        let parent = self.varint()?;
        let at = self.time(previous_at)?;
        Ok((parent, at, self.thread()?))
    }

    fn submit(&mut self, batch: &mut Batch, previous_at: u64) -> Decoded<u64> {
        let (parent, at, thread) = self.head(previous_at)?;
        let has = self.flags(HAS_ACTOR | HAS_PARENT_TASK)?;
        let task = self.id()?;
        let actor = self.id_if(has & HAS_ACTOR != 0)?;
        let parent_task = self.id_if(has & HAS_PARENT_TASK != 0)?;
        let parent_span = self.varint()?;
        let function = self.name()?;
        let submit = Submit {
            at,
            parent,
            task,
            actor,
            parent_task,
            parent_span,
            function: function.interned().unwrap_or(""),
            has,
        };
        match function {
            Name::Interned(_) => batch.push_submit_shape(thread, submit),
            owned => {
                let mut record = submit.record(thread);
                let key = if has & HAS_ACTOR != 0 {
                    "method"
                } else {
                    "function"
                };
                owned.patch(&mut record, key);
                batch.push_full(record);
            }
        }
        Ok(at)
    }

    fn run(&mut self, batch: &mut Batch, previous_at: u64) -> Decoded<u64> {
        let span = self.varint()?;
        let (parent, at, thread) = self.head(previous_at)?;
        let kind = match self.byte()? {
            0 => RunShape::Task,
            1 => RunShape::ActorCall,
            2 => RunShape::ActorCreate,
            other => return Err(Fault::Shape(other)),
        };
        let has = self.flags(HAS_PARENT_TASK | CLOSED | HAS_CPU)?;
        let task = self.id()?;
        let actor = self.id_if(kind != RunShape::Task)?;
        let parent_task = self.id_if(has & HAS_PARENT_TASK != 0)?;
        let parent_span = self.varint()?;
        let node = self.varint()?;
        let worker = self.varint()?;
        let attempt = u32::try_from(self.varint()?).map_err(|_| Fault::Attempt)?;
        let what = self.name()?;
        let method = match kind {
            RunShape::ActorCall => self.name()?,
            RunShape::Task | RunShape::ActorCreate => Name::Interned(""),
        };
        let closed_at = match has & CLOSED {
            0 => 0,
            _ => at.wrapping_add(unzigzag(self.varint()?) as u64),
        };
        let cpu_nanos = match has & HAS_CPU {
            0 => 0,
            _ => self.varint()?,
        };
        let run = Run {
            at,
            span,
            parent,
            task,
            actor,
            parent_task,
            parent_span,
            node,
            worker,
            what: what.interned().unwrap_or(""),
            method: method.interned().unwrap_or(""),
            closed_at,
            cpu_nanos,
            attempt,
            kind,
            has,
        };
        if what.interned().is_some() && method.interned().is_some() {
            batch.push_run_shape(thread, run);
        } else {
            let mut record = run.record(thread);
            let what_key = if kind == RunShape::Task {
                "function"
            } else {
                "class"
            };
            what.patch(&mut record, what_key);
            method.patch(&mut record, "method");
            batch.push_full(record);
        }
        Ok(at)
    }

    fn close(&mut self, batch: &mut Batch, previous_at: u64) -> Decoded<u64> {
        let span = self.varint()?;
        let (parent, at, thread) = self.head(previous_at)?;
        let name = self.strref()?;
        let target = self.strref()?;
        let cpu_nanos = match self.byte()? {
            0 => None,
            1 => Some(self.varint()?),
            other => return Err(Fault::Flags(other)),
        };
        batch.push_close(thread, at, span, parent, (name, target), cpu_nanos);
        Ok(at)
    }

    fn object(&mut self, batch: &mut Batch, previous_at: u64) -> Decoded<u64> {
        let (parent, at, thread) = self.head(previous_at)?;
        let has = self.flags(HAS_TASK | IS_GET | IS_ARG)?;
        let object = self.id()?;
        let task = self.id_if(has & HAS_TASK != 0)?;
        let bytes = self.varint()?;
        let node = self.varint()?;
        batch.push_object_shape(
            thread,
            ObjectIo {
                at,
                parent,
                object,
                task,
                bytes,
                node,
                has,
            },
        );
        Ok(at)
    }

    fn record(&mut self, kind: u8, previous_at: u64) -> Decoded<Record> {
        let kind = match kind {
            0 => RecordKind::SpanNew,
            1 => RecordKind::SpanClose,
            2 => RecordKind::Event,
            other => return Err(Fault::Kind(other)),
        };
        let span = self.varint()?;
        let parent = self.varint()?;
        let name = self.strref()?;
        let target = self.strref()?;
        let at_nanos = self.time(previous_at)?;
        let thread = self.thread()?;
        let count = self.varint()?;
        if count > (self.remaining() / MIN_FIELD_BYTES) as u64 {
            return Err(Fault::Fields {
                count,
                left: self.remaining(),
            });
        }
        let mut fields = Fields::with_capacity((count as usize).min(MAX_RESERVED));
        for _ in 0..count {
            let key = self.strref()?;
            let value = self.value()?;
            fields.push(key, value);
        }
        Ok(Record {
            kind,
            span,
            parent,
            name,
            target,
            at_nanos,
            thread,
            fields,
        })
    }

    fn value(&mut self) -> Decoded<FieldValue> {
        Ok(match self.byte()? {
            TAG_U64 => FieldValue::U64(self.varint()?),
            TAG_I64 => FieldValue::I64(unzigzag(self.varint()?)),
            TAG_F64 => {
                let bits = self.take(8)?;
                let mut le = [0u8; 8];
                le.copy_from_slice(bits);
                FieldValue::F64(f64::from_bits(u64::from_le_bytes(le)))
            }
            TAG_FALSE => FieldValue::Bool(false),
            TAG_TRUE => FieldValue::Bool(true),
            TAG_U128 => FieldValue::U128 {
                hi: self.varint()?,
                lo: self.varint()?,
            },
            TAG_STR => FieldValue::Str(FieldStr::from(self.str()?)),
            other => return Err(Fault::Tag(other)),
        })
    }

    fn byte(&mut self) -> Decoded<u8> {
        let byte = *self.bytes.get(self.at).ok_or(Fault::Ended)?;
        self.at += 1;
        Ok(byte)
    }

    fn take(&mut self, len: usize) -> Decoded<&[u8]> {
        if len > self.remaining() {
            return Err(Fault::Bytes {
                len,
                left: self.remaining(),
            });
        }
        let bytes = &self.bytes[self.at..self.at + len];
        self.at += len;
        Ok(bytes)
    }

    fn varint(&mut self) -> Decoded<u64> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = self.byte()?;
            let bits = u64::from(byte & 0x7f);
            // The tenth byte holds bit 63 only.
            if shift == 63 && bits > 1 {
                return Err(Fault::Overflow);
            }
            value |= bits << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(Fault::TooLong)
    }

    fn str(&mut self) -> Decoded<&str> {
        let len = self.varint()?;
        let len = usize::try_from(len).map_err(|_| Fault::StringLength(len))?;
        let bytes = self.take(len)?;
        std::str::from_utf8(bytes).map_err(Fault::Utf8)
    }

    fn strref(&mut self) -> Decoded<&'static str> {
        Ok(match self.entry()? {
            Entry::Interned(s) | Entry::Refused(s, _) => s,
        })
    }

    /// A compact record's name: [`Name::Owned`] where the interner
    /// refused it (over its bounds: a long generic name, or a head that has
    /// seen very many), instead of its placeholder.
    fn name(&mut self) -> Decoded<Name> {
        Ok(match self.entry()? {
            Entry::Interned(s) => Name::Interned(s),
            Entry::Refused(_, raw) => Name::Owned(raw.clone()),
        })
    }

    fn entry(&mut self) -> Decoded<&Entry> {
        match self.varint()? {
            0 => {
                let raw = self.str()?;
                let s = intern(raw);
                let refused = s != raw;
                let entry = if refused {
                    Entry::Refused(s, raw.into())
                } else {
                    Entry::Interned(s)
                };
                self.table.push(entry);
                Ok(&self.table[self.table.len() - 1])
            }
            n => {
                let known = self.table.len();
                usize::try_from(n - 1)
                    .ok()
                    .and_then(|i| self.table.get(i))
                    .ok_or(Fault::Name { name: n, known })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn record(kind: RecordKind, at_nanos: u64, fields: Fields) -> Record {
        Record {
            kind,
            span: (1 << 45) | 3,
            parent: 7,
            name: "task.run",
            target: "ray_core::task",
            at_nanos,
            thread: 2,
            fields,
        }
    }

    fn round_trip(records: &[Record]) -> Vec<Record> {
        let mut bytes = Vec::new();
        encode_records(records, &mut bytes);
        decode_records(&bytes).expect("an encoded batch decodes")
    }

    #[test]
    fn every_field_value_variant_and_many_fields_round_trip() {
        let long = "ü".repeat(FieldStr::INLINE);
        let fields: Fields = [
            ("u", FieldValue::U64(u64::MAX)),
            ("i", FieldValue::I64(i64::MIN)),
            ("f", FieldValue::F64(-1.5e300)),
            ("t", FieldValue::Bool(true)),
            ("b", FieldValue::Bool(false)),
            (
                "w",
                FieldValue::U128 {
                    hi: 1,
                    lo: u64::MAX,
                },
            ),
            ("s", FieldValue::Str("short".into())),
            ("l", FieldValue::Str(long.as_str().into())),
            ("e", FieldValue::Str("".into())),
            ("u", FieldValue::U64(0)),
        ]
        .into_iter()
        .collect();
        assert!(fields.len() > Fields::INLINE);
        let records = vec![
            record(RecordKind::SpanNew, 5_000_000_000, fields),
            record(RecordKind::Event, 17, Fields::new()),
            record(RecordKind::SpanClose, u64::MAX, Fields::new()),
        ];
        assert_eq!(round_trip(&records), records);
    }

    #[test]
    fn repeated_names_are_written_once_per_batch() {
        let one = vec![record(RecordKind::Event, 0, Fields::new())];
        let many: Vec<Record> = (0..100)
            .map(|i| record(RecordKind::Event, i, Fields::new()))
            .collect();
        let (mut a, mut b) = (Vec::new(), Vec::new());
        encode_records(&one, &mut a);
        encode_records(&many, &mut b);
        // Each later record costs 14 bytes (a 7-byte span id, one byte for
        // each other part), not its names again.
        assert_eq!(b.len() - a.len(), 99 * 14, "{} vs {}", b.len(), a.len());
        assert_eq!(decode_records(&b).expect("decodes"), many);
    }

    #[test]
    fn a_lying_record_count_is_corrupt_not_an_allocation() {
        let mut bytes = Vec::new();
        put_varint(&mut bytes, u64::MAX);
        let err = decode_records(&bytes).expect_err("no records follow");
        assert!(
            matches!(err, LogError::Corrupt { ref reason, .. } if reason.contains("announced")),
            "{err}"
        );
    }

    #[test]
    fn trailing_bytes_and_bad_references_are_corrupt() {
        let mut bytes = Vec::new();
        encode_records(&[record(RecordKind::Event, 1, Fields::new())], &mut bytes);
        let mut trailing = bytes.clone();
        trailing.push(0);
        assert!(decode_records(&trailing).is_err());
        // count 1, kind 2, span 0, parent 0, name: reference 5 of none.
        let bad_ref = [1, 2, 0, 0, 5, 0, 0, 0, 0];
        let err = decode_records(&bad_ref).expect_err("no name 5");
        assert!(matches!(err, LogError::Corrupt { offset: 5, .. }), "{err}");
    }

    fn value() -> impl Strategy<Value = FieldValue> {
        prop_oneof![
            any::<u64>().prop_map(FieldValue::U64),
            any::<i64>().prop_map(FieldValue::I64),
            any::<u64>().prop_map(|bits| FieldValue::F64(f64::from_bits(bits))),
            any::<bool>().prop_map(FieldValue::Bool),
            (any::<u64>(), any::<u64>()).prop_map(|(hi, lo)| FieldValue::U128 { hi, lo }),
            ".{0,40}".prop_map(|s| FieldValue::Str(s.into())),
        ]
    }

    const KEYS: [&str; 5] = ["task_id", "object_id", "bytes", "message", "ключ"];

    fn any_record() -> impl Strategy<Value = Record> {
        (
            0u8..3,
            any::<u64>(),
            any::<u64>(),
            "[a-z.]{0,12}",
            any::<u64>(),
            any::<u32>(),
            proptest::collection::vec((0usize..KEYS.len(), value()), 0..12),
        )
            .prop_map(
                |(kind, span, parent, name, at_nanos, thread, fields)| Record {
                    kind: [
                        RecordKind::SpanNew,
                        RecordKind::SpanClose,
                        RecordKind::Event,
                    ][usize::from(kind)],
                    span,
                    parent,
                    name: intern(&name),
                    target: "ray_core::prop",
                    at_nanos,
                    thread,
                    fields: fields.into_iter().map(|(k, v)| (KEYS[k], v)).collect(),
                },
            )
    }

    /// Equality that treats NaNs with the same bits as equal.
    fn same(a: &[Record], b: &[Record]) -> bool {
        let bits = |r: &Record| -> Vec<(&str, String)> {
            r.fields
                .iter()
                .map(|(k, v)| match v {
                    FieldValue::F64(f) => (k, format!("f64:{:x}", f.to_bits())),
                    other => (k, format!("{other:?}")),
                })
                .collect()
        };
        a.len() == b.len()
            && a.iter().zip(b).all(|(x, y)| {
                (
                    x.kind, x.span, x.parent, x.name, x.target, x.at_nanos, x.thread,
                ) == (
                    y.kind, y.span, y.parent, y.name, y.target, y.at_nanos, y.thread,
                ) && bits(x) == bits(y)
            })
    }

    proptest! {
        #[test]
        fn any_batch_round_trips(records in proptest::collection::vec(any_record(), 0..20)) {
            let decoded = round_trip(&records);
            prop_assert!(same(&decoded, &records), "{decoded:?} != {records:?}");
        }

        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = decode_records(&bytes);
        }

        #[test]
        fn a_damaged_batch_never_panics(
            records in proptest::collection::vec(any_record(), 1..6),
            at in any::<proptest::sample::Index>(),
            byte in any::<u8>(),
            cut in any::<bool>(),
        ) {
            let mut bytes = Vec::new();
            encode_records(&records, &mut bytes);
            let i = at.index(bytes.len());
            if cut {
                bytes.truncate(i);
                prop_assert!(decode_records(&bytes).is_err());
            } else {
                bytes[i] = byte;
                let _ = decode_records(&bytes);
            }
        }
    }
}
