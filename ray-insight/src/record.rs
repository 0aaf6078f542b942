//! The compact record: one span opening, one span closing, or one event.
//!
//! A [`Record`] keeps only what the views need: what happened ([`RecordKind`]),
//! which span it belongs to and that span's parent, the callsite's static name and
//! target, when (nanoseconds since the layer's epoch), on which thread, and every
//! field the span or event carried (`task_id`, `object_id`, `bytes`, …) as typed
//! [`FieldValue`]s. Names, targets and field keys are `&'static str` taken from the
//! callsite metadata, so recording them costs no allocation.

use std::cell::RefCell;
use std::fmt::{self, Write as _};

use tracing::field::{Field, Visit};

/// The field that makes a span's opening record stand for its close too:
/// the runtime's own spans (a task's run, an actor call) that close with
/// nothing recorded on their thread in between are written as one
/// [`RecordKind::SpanNew`] carrying `closed_at` (nanoseconds since the
/// epoch, like `at_nanos`) and the close's own fields, instead of an
/// opening and a [`RecordKind::SpanClose`]. See [`Record::closed_at`].
/// Only the runtime's runs (`task.run`, `actor.call`, `actor.create`) are
/// read so, and only with a `u64` value: a field of that name on any other
/// span is the application's own.
pub const CLOSED_AT: &str = "closed_at";

/// The spans whose opening may carry [`CLOSED_AT`].
const FOLDABLE: [&str; 3] = ["task.run", "actor.call", "actor.create"];

/// What a [`Record`] stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RecordKind {
    /// A span was created; its fields are the ones given at creation.
    SpanNew,
    /// A span was closed (its last handle dropped); its fields are the ones
    /// recorded after creation with `Span::record`, if any.
    SpanClose,
    /// An event was emitted; `span` is 0 and `parent` is the enclosing span.
    Event,
}

/// One recorded span opening, span closing or event.
///
/// Span ids are assigned by the layer, not taken from the subscriber: the
/// registry reuses its ids once a span closes, while these stay unique for the
/// life of the process (the recording thread's index in the high bits, a
/// per-thread sequence in the low 40 bits), so an append-only log can key on them.
/// A parent id names the nearest *recorded* ancestor: spans outside the target
/// prefix are skipped, so the records always form a closed tree.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// Span opening, span closing or event.
    pub kind: RecordKind,
    /// The span this record opens or closes; 0 for events.
    pub span: u64,
    /// The nearest recorded ancestor span (for events: the enclosing span); 0 for none.
    pub parent: u64,
    /// The callsite's name (`task.submit`, or `event file.rs:12` for unnamed events).
    pub name: &'static str,
    /// The callsite's target (by default its module path, e.g. `ray_core::task`).
    pub target: &'static str,
    /// Nanoseconds since the layer's epoch (the moment the layer was built).
    pub at_nanos: u64,
    /// A small per-thread index, assigned on a thread's first record, process-wide.
    pub thread: u32,
    /// Every field the span or event recorded, in callsite order.
    pub fields: Fields,
}

impl Record {
    /// An event named `name` under `target` at `at_nanos`, with `fields`,
    /// on no span and thread 0 (what a collector writes itself, such as the
    /// head's `node.state`).
    pub fn event(name: &'static str, target: &'static str, at_nanos: u64, fields: Fields) -> Self {
        Record {
            kind: RecordKind::Event,
            span: 0,
            parent: 0,
            name,
            target,
            at_nanos,
            thread: 0,
            fields,
        }
    }

    /// The value of field `key`, if this record carries it.
    pub fn field(&self, key: &str) -> Option<&FieldValue> {
        self.fields.get(key)
    }

    /// Moves this record's times by `shift` nanoseconds (clamped to
    /// `0..=u64::MAX`): `at_nanos`, and a folded close's [`CLOSED_AT`].
    /// What a collector does to put another process's records on its own
    /// clock.
    pub fn shift_times(&mut self, shift: i128) {
        let shifted = |t: u64| u64::try_from((i128::from(t) + shift).max(0)).unwrap_or(u64::MAX);
        self.at_nanos = shifted(self.at_nanos);
        if self.is_foldable() {
            if let Some(FieldValue::U64(closed)) = self.fields.get_mut(CLOSED_AT) {
                *closed = shifted(*closed);
            }
        }
    }

    /// Whether this is the opening of a runtime run, which may carry
    /// [`CLOSED_AT`].
    pub(crate) fn is_foldable(&self) -> bool {
        self.kind == RecordKind::SpanNew && FOLDABLE.contains(&self.name)
    }

    /// When the span this record is about closed, if this record says: a
    /// [`RecordKind::SpanClose`] at its own time, or an opening that
    /// carries [`CLOSED_AT`] (a span recorded as one record).
    pub fn closed_at(&self) -> Option<u64> {
        match self.kind {
            RecordKind::SpanClose => Some(self.at_nanos),
            RecordKind::SpanNew if self.is_foldable() => match self.field(CLOSED_AT) {
                Some(FieldValue::U64(closed)) => Some(*closed),
                _ => None,
            },
            RecordKind::SpanNew | RecordKind::Event => None,
        }
    }

    /// The name the views read this record by: its callsite name, except
    /// for an unnamed event (`event file.rs:12`), whose `message` is its
    /// name (`info!("object.put")` names the event `object.put`).
    pub fn schema_name(&self) -> &str {
        // The name is checked first: only unnamed events look for a message.
        if self.kind == RecordKind::Event && self.name.starts_with("event ") {
            if let Some(FieldValue::Str(message)) = self.field("message") {
                return message;
            }
        }
        self.name
    }
}

/// A typed field value, as `tracing` handed it to us.
///
/// `i128`/`u128` values that do not fit 64 bits become [`FieldValue::U128`]
/// (unsigned) or strings (negative); `Debug` values, errors and strings
/// become [`FieldValue::Str`].
#[derive(Debug, Clone, PartialEq)]
pub enum FieldValue {
    /// An unsigned integer (`task_id = 7u64`, `bytes = 4096`).
    U64(u64),
    /// A signed integer.
    I64(i64),
    /// A floating-point number.
    F64(f64),
    /// A boolean.
    Bool(bool),
    /// An unsigned integer wider than 64 bits, as its high and low halves.
    /// The runtime records its two-part ids this way (`task_id` = owner
    /// worker in `hi`, sequence in `lo`), which costs no formatting and no
    /// allocation on the recording thread.
    U128 {
        /// Bits 64..128.
        hi: u64,
        /// Bits 0..64.
        lo: u64,
    },
    /// A string, or the `Debug`/`Display` rendering of any other value.
    Str(FieldStr),
}

/// A field's string: up to [`FieldStr::INLINE`] bytes are kept inline (no
/// allocation, nothing to free on another thread), longer ones on the heap.
///
/// Dereferences to `str`; build one with `FieldStr::from("text")`.
#[derive(Clone)]
pub struct FieldStr(StrRepr);

#[derive(Clone)]
enum StrRepr {
    Inline {
        len: u8,
        bytes: [u8; FieldStr::INLINE],
    },
    Heap(Box<str>),
    Static(&'static str),
}

impl FieldStr {
    /// The longest string kept inline, in bytes.
    pub const INLINE: usize = 22;

    /// The string.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            StrRepr::Inline { len, bytes } => {
                // Built only from a whole `&str` of `len` bytes (`From<&str>`).
                std::str::from_utf8(&bytes[..usize::from(*len)]).unwrap_or_default()
            }
            StrRepr::Heap(s) => s,
            StrRepr::Static(s) => s,
        }
    }

    /// The string, if it lives for the whole program ([`FieldStr::from_static`]).
    pub fn as_static(&self) -> Option<&'static str> {
        match self.0 {
            StrRepr::Static(s) => Some(s),
            _ => None,
        }
    }

    /// A string that lives for the whole program (a function's name): kept
    /// by reference, whatever its length, so recording it allocates nothing.
    pub const fn from_static(s: &'static str) -> Self {
        FieldStr(StrRepr::Static(s))
    }
}

impl From<&str> for FieldStr {
    fn from(s: &str) -> Self {
        if s.len() <= Self::INLINE {
            let mut bytes = [0u8; Self::INLINE];
            bytes[..s.len()].copy_from_slice(s.as_bytes());
            // `s.len() <= 22`, so it fits a `u8`.
            FieldStr(StrRepr::Inline {
                len: s.len() as u8,
                bytes,
            })
        } else {
            FieldStr(StrRepr::Heap(s.into()))
        }
    }
}

impl From<String> for FieldStr {
    fn from(s: String) -> Self {
        if s.len() <= Self::INLINE {
            Self::from(s.as_str())
        } else {
            FieldStr(StrRepr::Heap(s.into_boxed_str()))
        }
    }
}

impl std::ops::Deref for FieldStr {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl PartialEq for FieldStr {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl fmt::Debug for FieldStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for FieldStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self.as_str(), f)
    }
}

impl FieldValue {
    /// The value as a `u64`, if it is a non-negative integer.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            FieldValue::U64(v) => Some(v),
            FieldValue::U128 { hi: 0, lo } => Some(lo),
            FieldValue::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// The value as an `i64`, if it is an integer that fits.
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            FieldValue::I64(v) => Some(v),
            FieldValue::U64(v) => i64::try_from(v).ok(),
            _ => None,
        }
    }

    /// The value as an `f64`, if it is a floating-point number.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            FieldValue::F64(v) => Some(v),
            _ => None,
        }
    }

    /// The value as a `bool`, if it is one.
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            FieldValue::Bool(v) => Some(v),
            _ => None,
        }
    }

    /// The value as a string slice, if it is a [`FieldValue::Str`].
    pub fn as_str(&self) -> Option<&str> {
        match self {
            FieldValue::Str(v) => Some(v.as_str()),
            _ => None,
        }
    }

    /// The value as a `u128`, if it is a non-negative integer.
    pub fn as_u128(&self) -> Option<u128> {
        match *self {
            FieldValue::U128 { hi, lo } => Some((u128::from(hi) << 64) | u128::from(lo)),
            _ => self.as_u64().map(u128::from),
        }
    }
}

impl fmt::Display for FieldValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FieldValue::U64(v) => v.fmt(f),
            FieldValue::I64(v) => v.fmt(f),
            FieldValue::F64(v) => v.fmt(f),
            FieldValue::Bool(v) => v.fmt(f),
            FieldValue::U128 { hi, lo } => ((u128::from(*hi) << 64) | u128::from(*lo)).fmt(f),
            FieldValue::Str(v) => v.fmt(f),
        }
    }
}

/// The fields of one record: `(key, value)` pairs in the order they were recorded.
///
/// Small by design (a span carries a handful of ids), so lookup is a linear
/// scan. The first [`Fields::INLINE`] fields live inside the record itself:
/// recording a runtime span allocates nothing for its fields, and the
/// collector frees nothing that another thread allocated.
#[derive(Clone)]
pub struct Fields {
    len: u8,
    inline: [(&'static str, FieldValue); Fields::INLINE],
    spill: Vec<(&'static str, FieldValue)>,
}

/// The value an unused inline slot holds.
const EMPTY_SLOT: (&str, FieldValue) = ("", FieldValue::Bool(false));

impl Default for Fields {
    fn default() -> Self {
        Self {
            len: 0,
            inline: [EMPTY_SLOT; Fields::INLINE],
            spill: Vec::new(),
        }
    }
}

impl Fields {
    /// How many fields are kept without a heap allocation.
    pub const INLINE: usize = 7;

    /// Fields whose values are all strings, in order (what hand-made
    /// records in tests and examples carry).
    pub fn from_strs(pairs: &[(&'static str, &str)]) -> Self {
        pairs
            .iter()
            .map(|(key, value)| (*key, FieldValue::Str((*value).into())))
            .collect()
    }

    /// An empty field list.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty field list; `capacity` beyond [`Fields::INLINE`] is reserved
    /// on the heap.
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            spill: Vec::with_capacity(capacity.saturating_sub(Self::INLINE)),
            ..Self::default()
        }
    }

    /// Appends a field; an earlier field with the same key is kept as well.
    pub fn push(&mut self, key: &'static str, value: FieldValue) {
        let len = usize::from(self.len);
        if len < Self::INLINE {
            self.inline[len] = (key, value);
            self.len += 1;
        } else {
            self.spill.push((key, value));
        }
    }

    fn slots(&self) -> impl DoubleEndedIterator<Item = &(&'static str, FieldValue)> + '_ {
        self.inline[..usize::from(self.len)]
            .iter()
            .chain(self.spill.iter())
    }

    /// The value of the last field named `key`, if any.
    pub fn get(&self, key: &str) -> Option<&FieldValue> {
        // Keys are callsite literals, usually the very string asked for:
        // the address decides most lookups without comparing bytes.
        let same = |k: &str| {
            k.len() == key.len()
                && (std::ptr::eq(k.as_ptr(), key.as_ptr())
                    || (k.as_bytes().first() == key.as_bytes().first() && k == key))
        };
        self.slots().rev().find(|(k, _)| same(k)).map(|(_, v)| v)
    }

    /// The last field named `key`, to change, if any.
    pub fn get_mut(&mut self, key: &str) -> Option<&mut FieldValue> {
        let len = usize::from(self.len);
        self.inline[..len]
            .iter_mut()
            .chain(self.spill.iter_mut())
            .rev()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v)
    }

    /// The fields in recording order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, &FieldValue)> + '_ {
        self.slots().map(|(k, v)| (*k, v))
    }

    /// How many fields there are.
    pub fn len(&self) -> usize {
        usize::from(self.len) + self.spill.len()
    }

    /// Whether there are no fields.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends every field of `other`, leaving it empty.
    pub fn append(&mut self, other: &mut Fields) {
        for (key, value) in std::mem::take(other).into_iter_owned() {
            self.push(key, value);
        }
    }

    fn into_iter_owned(self) -> impl Iterator<Item = (&'static str, FieldValue)> {
        let len = usize::from(self.len);
        self.inline.into_iter().take(len).chain(self.spill)
    }
}

impl PartialEq for Fields {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.slots().eq(other.slots())
    }
}

impl fmt::Debug for Fields {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl FromIterator<(&'static str, FieldValue)> for Fields {
    fn from_iter<I: IntoIterator<Item = (&'static str, FieldValue)>>(iter: I) -> Self {
        let mut fields = Fields::new();
        for (key, value) in iter {
            fields.push(key, value);
        }
        fields
    }
}

/// Collects `tracing` field values into [`Fields`].
pub(crate) struct FieldCollector<'a>(pub(crate) &'a mut Fields);

impl Visit for FieldCollector<'_> {
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.push(field.name(), FieldValue::F64(value));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.push(field.name(), FieldValue::I64(value));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.push(field.name(), FieldValue::U64(value));
    }

    fn record_i128(&mut self, field: &Field, value: i128) {
        let value = match i64::try_from(value) {
            Ok(v) => FieldValue::I64(v),
            Err(_) => FieldValue::Str(value.to_string().into()),
        };
        self.0.push(field.name(), value);
    }

    fn record_u128(&mut self, field: &Field, value: u128) {
        let value = FieldValue::U128 {
            hi: (value >> 64) as u64,
            lo: value as u64,
        };
        self.0.push(field.name(), value);
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.push(field.name(), FieldValue::Bool(value));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.push(field.name(), FieldValue::Str(value.into()));
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.0.push(
            field.name(),
            FieldValue::Str(render(format_args!("{value}"))),
        );
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        // `%id` fields (the runtime's ids) arrive here too, as `DisplayValue`.
        self.0.push(
            field.name(),
            FieldValue::Str(render(format_args!("{value:?}"))),
        );
    }
}

/// Scratch capacity kept between renderings; a larger buffer is let go.
const MAX_SCRATCH_BYTES: usize = 4096;

thread_local! {
    /// Per-thread buffer that field values are formatted into.
    static SCRATCH: RefCell<String> = const { RefCell::new(String::new()) };
}

/// Formats `args` into an exactly sized string.
///
/// `format!` grows its `String` from zero (8, 16, 32… bytes: several
/// allocations for a 20-character id) and the conversion to `Box<str>` then
/// shrinks it again; formatting into a reused per-thread buffer and copying
/// once costs a single allocation. Falls back to `format!` when re-entered (a
/// `Debug` impl that itself records a field) or during thread teardown.
fn render(args: fmt::Arguments<'_>) -> FieldStr {
    SCRATCH
        .try_with(|cell| {
            let mut scratch = cell.try_borrow_mut().ok()?;
            scratch.clear();
            // Writing to a `String` fails only if a `Display` impl reports
            // an error; keep what was written, as `format!` would panic.
            let _ = scratch.write_fmt(args);
            let rendered = FieldStr::from(scratch.as_str());
            if scratch.capacity() > MAX_SCRATCH_BYTES {
                *scratch = String::new();
            }
            Some(rendered)
        })
        .ok()
        .flatten()
        .unwrap_or_else(|| FieldStr::from(fmt::format(args)))
}

/// `n` plain event records, for tests of the queue and sinks.
#[cfg(test)]
pub(crate) fn test_records(n: usize) -> Vec<Record> {
    (0..n)
        .map(|i| Record {
            kind: RecordKind::Event,
            span: 0,
            parent: 0,
            name: "e",
            target: "ray_test",
            at_nanos: i as u64,
            thread: 0,
            fields: Fields::new(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_lookup_returns_the_last_value_for_a_key() {
        let mut fields = Fields::new();
        fields.push("task_id", FieldValue::U64(1));
        fields.push("task_id", FieldValue::U64(2));
        assert_eq!(fields.get("task_id"), Some(&FieldValue::U64(2)));
        assert_eq!(fields.get("object_id"), None);
        assert_eq!(fields.len(), 2);
    }

    #[test]
    fn fields_beyond_the_inline_slots_spill_and_keep_their_order() {
        let keys = ["a", "b", "c", "d", "e", "f", "g", "h", "i"];
        let fields: Fields = keys
            .iter()
            .zip(0u64..)
            .map(|(k, v)| (*k, FieldValue::U64(v)))
            .collect();
        assert_eq!(fields.len(), keys.len());
        let seen: Vec<&str> = fields.iter().map(|(k, _)| k).collect();
        assert_eq!(seen, keys);
        assert_eq!(fields.get("i"), Some(&FieldValue::U64(8)));
        let mut more = Fields::new();
        more.push("z", FieldValue::Bool(true));
        let mut all = fields.clone();
        all.append(&mut more);
        assert!(more.is_empty());
        assert_eq!(all.len(), keys.len() + 1);
        assert_ne!(all, fields);
    }

    #[test]
    fn shifting_a_folded_run_moves_its_close_too() {
        let mut run = Record {
            kind: RecordKind::SpanNew,
            span: 1,
            parent: 0,
            name: "task.run",
            target: "ray::task",
            at_nanos: 1_000,
            thread: 0,
            fields: Fields::from_iter([(CLOSED_AT, FieldValue::U64(4_000))]),
        };
        assert_eq!(run.closed_at(), Some(4_000));
        run.shift_times(500);
        assert_eq!((run.at_nanos, run.closed_at()), (1_500, Some(4_500)));
        run.shift_times(-2_000);
        assert_eq!(
            (run.at_nanos, run.closed_at()),
            (0, Some(2_500)),
            "clamped at 0"
        );
        let mut close = Record {
            kind: RecordKind::SpanClose,
            ..run.clone()
        };
        close.shift_times(100);
        assert_eq!(
            close.closed_at(),
            Some(100),
            "a close record closes at its time"
        );
    }

    #[test]
    fn short_strings_stay_inline_and_long_ones_round_trip() {
        let short = FieldStr::from("task-1.1a");
        assert!(matches!(short.0, StrRepr::Inline { .. }));
        assert_eq!(&*short, "task-1.1a");
        let long = "x".repeat(FieldStr::INLINE + 1);
        let heap = FieldStr::from(long.as_str());
        assert!(matches!(heap.0, StrRepr::Heap(_)));
        assert_eq!(heap.as_str(), long);
        assert_eq!(FieldStr::from(String::from("héllo")).as_str(), "héllo");
        assert_eq!(
            FieldValue::U128 { hi: 1, lo: 2 }.as_u128(),
            Some((1 << 64) | 2)
        );
        assert_eq!(FieldValue::U128 { hi: 0, lo: 9 }.as_u64(), Some(9));
    }

    #[test]
    fn integer_accessors_convert_only_when_the_value_fits() {
        assert_eq!(FieldValue::I64(5).as_u64(), Some(5));
        assert_eq!(FieldValue::I64(-5).as_u64(), None);
        assert_eq!(FieldValue::U64(u64::MAX).as_i64(), None);
        assert_eq!(FieldValue::Str("x".into()).as_str(), Some("x"));
        assert_eq!(FieldValue::Bool(true).to_string(), "true");
    }
}
