//! The bounded tables the views share: label sets, call paths, Gantt lanes,
//! FIFO-evicting maps, and the logical node type.
//!
//! Every table here has a cap fixed at construction; when full it either
//! refuses (interners return `None`) or evicts its oldest entry (`FifoMap`),
//! and the caller counts what was lost.

use std::collections::VecDeque;

use hashbrown::HashMap;
use std::fmt;
use std::hash::Hash;
use std::sync::Arc;

use crate::record::FieldValue;

/// A shared, immutable string: task, actor, object and node ids, and names.
pub(crate) type Id = Arc<str>;

/// An id field as a string: strings are taken as they are; numbers in the
/// runtime's id fields are rendered as the runtime displays those ids
/// (`task_id = (owner, seq)` as `task-<owner>.<seq>` in hex, `node_id = n` as
/// `node-<n>`), so ids recorded as integers and as text compare equal; other
/// numbers are rendered in decimal.
pub(crate) fn id_of(key: &str, value: &FieldValue) -> Id {
    let (code, prefix) = id_prefix(key);
    match value {
        FieldValue::Str(s) => ID_CACHE.with(|c| {
            let mut cache = c.borrow_mut();
            match s.as_static() {
                Some(s) => cache.static_str(s),
                None => cache.string(s),
            }
        }),
        FieldValue::U128 { hi, lo } if !prefix.is_empty() => {
            numbered_id((code, prefix), Some(*hi), *lo)
        }
        FieldValue::U64(v) if !prefix.is_empty() => numbered_id((code, prefix), None, *v),
        other => Arc::from(other.to_string()),
    }
}

/// An actor id's prefix and code (see [`id_prefix`]).
pub(crate) const ACTOR_ID: (u8, &str) = (3, "actor-");
/// A node id's prefix and code.
pub(crate) const NODE_ID: (u8, &str) = (4, "node-");
/// A worker id's prefix and code.
pub(crate) const WORKER_ID: (u8, &str) = (5, "worker-");

/// A runtime id from its numbers (`hi` for a two-part id), rendered after
/// `prefix` as [`id_of`] renders that field's numbers: the same string,
/// from the same cache, without a field to read.
pub(crate) fn numbered_id((code, prefix): (u8, &'static str), hi: Option<u64>, lo: u64) -> Id {
    let key = (code, hi.is_some(), hi.unwrap_or(0), lo);
    ID_CACHE.with(|c| c.borrow_mut().number(key, || hex_id(prefix, hi, lo)))
}

/// An id as a map key, built with no string: a runtime id's numbers, or
/// the string of any other id. A string that is how a runtime id renders
/// (`obj-1a.2b`) is taken as its numbers, so the same id recorded as
/// numbers and as text is one key (as with [`id_of`]).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum IdKey {
    /// Whether it has two parts, and its parts.
    Num(bool, u64, u64),
    /// Any other id.
    Text(Id),
}

/// A numeric key is hashed as one word (its parts folded together: the
/// sequence plus an offset per owner, so one owner's ids made one after
/// another are consecutive words), not as a discriminant, a flag and two
/// words: the views hash ids about ten times a call, and the derived hash
/// was 9 % of their instructions (callgrind, recorded W3). Equal keys hash
/// alike; keys that fold to the same word are told apart by `Eq`. With
/// [`KeyBuild`], consecutive words land in neighbouring buckets.
impl std::hash::Hash for IdKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        match self {
            IdKey::Num(two, hi, lo) => {
                let owner = hi.wrapping_mul(0x9e37_79b9_7f4a_7c15);
                state.write_u64(lo.wrapping_add(owner) ^ (u64::from(*two) << 63));
            }
            IdKey::Text(text) => text.hash(state),
        }
    }
}

/// The hasher of the views' tables: what hashes as one `u64` (a numeric
/// [`IdKey`], a span id) goes to a bucket next to its neighbouring words'
/// (runs of 14, see `KeyHasher::finish`), so ids made one after another
/// (a batch of submits, then their runs, then their gets) touch
/// neighbouring memory instead of a random cache line each; the top 7
/// bits, which the table compares before keys, are mixed from the whole
/// word. Anything else (text ids, tuples) is hashed by
/// hashbrown's default hasher. On a cluster's head, the views' lookups
/// of tasks and recent tasks were a fifth of its samples, nearly all in
/// the first touch of the bucket (recorded cluster W1, `perf record`).
#[derive(Clone, Default)]
pub(crate) struct KeyBuild(hashbrown::DefaultHashBuilder);

impl fmt::Debug for KeyBuild {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("KeyBuild")
    }
}

impl std::hash::BuildHasher for KeyBuild {
    type Hasher = KeyHasher;

    fn build_hasher(&self) -> KeyHasher {
        KeyHasher {
            inner: self.0.build_hasher(),
            word: 0,
            words: 0,
        }
    }
}

/// See [`KeyBuild`].
pub(crate) struct KeyHasher {
    inner: <hashbrown::DefaultHashBuilder as std::hash::BuildHasher>::Hasher,
    /// The first word written, held back from `inner` until a second write.
    word: u64,
    /// Writes so far (saturating; any byte write counts as many).
    words: u8,
}

impl KeyHasher {
    /// The first word goes to the full hasher: the key is more than one.
    fn spill(&mut self) {
        if self.words == 1 {
            std::hash::Hasher::write_u64(&mut self.inner, self.word);
        }
    }
}

impl std::hash::Hasher for KeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        self.spill();
        self.words = u8::MAX;
        self.inner.write(bytes);
    }

    fn write_u64(&mut self, x: u64) {
        if self.words == 0 {
            self.word = x;
        } else {
            self.spill();
            self.inner.write_u64(x);
        }
        self.words = self.words.saturating_add(1);
    }

    fn finish(&self) -> u64 {
        if self.words != 1 {
            return self.inner.finish();
        }
        const TOP: u64 = !(u64::MAX >> 7);
        // Runs of 14 consecutive words share one window of 16 buckets, and
        // each run's window is placed at random. Within a run, neighbouring
        // ids touch the same cache lines; unless another run's window
        // overlaps, the window's last two buckets stay empty, so a probe
        // (16 control bytes read from anywhere) sees an empty one and a
        // lookup of a key not there (a finished task, a task put back after
        // it was taken out) stops at its first group. (Windows that do
        // overlap spill into the next group, as random buckets would.)
        // Runs placed one after another (each word its plain bucket) did
        // well until entries stayed behind (tasks whose records were
        // dropped): later ids wrapped around onto those dense regions, and
        // a collector that lagged got 34 % slower (embedded W1; a model of
        // the table: 1 % left behind made it 2.3 times slower than random
        // buckets; random windows stayed as fast as random buckets).
        let word = self.word;
        let run = mix(word / 14);
        let low = (run << 4) | (word % 14);
        (low & !TOP) | (mix(word) & TOP)
    }
}

/// A 64-bit mixer (murmur3's finalizer).
fn mix(x: u64) -> u64 {
    let mut m = x ^ (x >> 33);
    m = m.wrapping_mul(0xff51_afd7_ed55_8ccd);
    m ^= m >> 33;
    m = m.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    m ^ (m >> 33)
}

/// A map with the views' key hasher (see [`KeyBuild`]).
pub(crate) type KeyMap<K, V> = HashMap<K, V, KeyBuild>;

impl IdKey {
    /// The id as a string, its numbers rendered after `prefix` as the
    /// runtime displays them (see [`id_of`]).
    pub(crate) fn render(&self, prefix: &str) -> Id {
        match self {
            IdKey::Num(two, hi, lo) => hex_id(prefix, two.then_some(*hi), *lo),
            IdKey::Text(text) => text.clone(),
        }
    }

    /// A task's id as a string (`task-1a.2b`).
    pub(crate) fn task(&self) -> Id {
        self.render("task-")
    }

    /// A key for an id known only as a string (made up by the views).
    pub(crate) fn text(text: impl Into<Id>) -> Self {
        IdKey::Text(text.into())
    }
}

/// `value` of id field `key` as an [`IdKey`].
pub(crate) fn id_key(key: &str, value: &FieldValue) -> IdKey {
    let (_, prefix) = id_prefix(key);
    match value {
        FieldValue::U128 { hi, lo } if !prefix.is_empty() => IdKey::Num(true, *hi, *lo),
        FieldValue::U64(v) if !prefix.is_empty() => IdKey::Num(false, 0, *v),
        FieldValue::Str(s) if !prefix.is_empty() => match parse_id(prefix, s) {
            Some((hi, lo)) => IdKey::Num(hi.is_some(), hi.unwrap_or(0), lo),
            None => IdKey::Text(id_of(key, value)),
        },
        other => IdKey::Text(id_of(key, other)),
    }
}

/// The numbers of `text` if it is exactly how [`hex_id`] renders an id
/// with `prefix` (lowercase hex, no leading zeros): `(Some(hi), lo)` for
/// two parts.
fn parse_id(prefix: &str, text: &str) -> Option<(Option<u64>, u64)> {
    fn hex(part: &str) -> Option<u64> {
        let canonical = !part.is_empty()
            && part.len() <= 16
            && (part == "0" || !part.starts_with('0'))
            && part.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        canonical
            .then(|| u64::from_str_radix(part, 16).ok())
            .flatten()
    }
    let numbers = text.strip_prefix(prefix)?;
    match numbers.split_once('.') {
        Some((hi, lo)) => Some((Some(hex(hi)?), hex(lo)?)),
        None => Some((None, hex(numbers)?)),
    }
}

/// `s` as an id, from the id cache: built once, however often asked for.
pub(crate) fn static_id(s: &'static str) -> Id {
    ID_CACHE.with(|c| c.borrow_mut().static_str(s))
}

/// The prefix the runtime displays an id field's numbers with (`task-`
/// for `task_id`), or `""` for a field that is not an id, with a small
/// code that names the prefix (the id cache's key).
fn id_prefix(key: &str) -> (u8, &'static str) {
    // Told apart by length and first byte before any string comparison:
    // this runs for every id of every record.
    match (key.len(), key.as_bytes().first()) {
        // Codes 1 and 2 are the many (tasks, objects); see `IdCache::places`.
        (7, Some(b't')) if key == "task_id" => (1, "task-"),
        (11, Some(b'p')) if key == "parent_task" => (1, "task-"),
        (9, Some(b'p')) if key == "producers" => (1, "task-"),
        (9, Some(b'o')) if key == "object_id" => (2, "obj-"),
        (7, Some(b'o')) if key == "objects" => (2, "obj-"),
        (8, Some(b'a')) if key == "actor_id" => ACTOR_ID,
        (7, Some(b'n')) if key == "node_id" => NODE_ID,
        (13, Some(b'p')) if key == "producer_node" => NODE_ID,
        (9, Some(b'w')) if key == "worker_id" => WORKER_ID,
        (8, Some(b'g')) if key == "group_id" => (6, "pg-"),
        _ => (0, ""),
    }
}

/// `{prefix}{hi:x}.{lo:x}` (or `{prefix}{lo:x}`), written without the
/// formatting machinery: one allocation, the id's own.
fn hex_id(prefix: &str, hi: Option<u64>, lo: u64) -> Id {
    /// Writes `v` in hex (no leading zeros) at `out[at..]`; returns the end.
    fn put_hex(out: &mut [u8], at: usize, v: u64) -> usize {
        let digits = ((64 - v.leading_zeros() as usize).div_ceil(4)).max(1);
        for (i, slot) in out[at..at + digits].iter_mut().enumerate() {
            *slot = b"0123456789abcdef"[((v >> (4 * (digits - 1 - i))) & 0xf) as usize];
        }
        at + digits
    }
    // A prefix (at most 7 bytes), two 16-digit halves and a dot.
    let mut out = [0u8; 48];
    let prefix = &prefix.as_bytes()[..prefix.len().min(15)];
    out[..prefix.len()].copy_from_slice(prefix);
    let mut end = prefix.len();
    if let Some(hi) = hi {
        end = put_hex(&mut out, end, hi);
        out[end] = b'.';
        end += 1;
    }
    end = put_hex(&mut out, end, lo);
    // Only ASCII was written after a whole prefix; one allocation, the id's.
    Arc::from(std::str::from_utf8(&out[..end]).unwrap_or_default())
}

/// The longest string the id cache keeps (a longer one, from a hostile or
/// unusual record, is built anew each time rather than held).
const MAX_CACHED_STRING: usize = 64;

/// Slots of each of the ingesting thread's id caches.
const ID_CACHE_SLOTS: usize = 4096;

thread_local! {
    /// The ingesting thread's id cache: an id seen again soon (a task's
    /// submit, start and end; an actor's every call) is rendered once.
    static ID_CACHE: std::cell::RefCell<IdCache> = std::cell::RefCell::new(IdCache::default());
}

/// A number id as the cache knows it: its prefix's code, whether it has
/// two parts, and its parts.
type NumberKey = (u8, bool, u64, u64);

/// Memoizes [`id_of`]: rendering an id (formatting, allocating) cost more
/// than the rest of applying a record.
#[derive(Default)]
struct IdCache {
    /// Keyed by the prefix's code (see [`id_prefix`]), whether the id has
    /// two parts, and its parts: integers, cheap to hash and compare.
    numbers: SlotCache<NumberKey, Id>,
    /// The same for nodes, workers, actors and groups, apart from the
    /// flood of task and object ids: an id of these few mostly keeps its
    /// string, and so its address (what [`Memo`] keys on; a slot taken by
    /// another id only costs the memo a miss).
    places: SlotCache<NumberKey, Id>,
    /// The last number of each prefix code: a record's node and worker
    /// (an actor's every call) are found here without touching the slots.
    last: [Option<(NumberKey, Id)>; 8],
    strings: SlotCache<Id, ()>,
    /// Strings that live for the program (function and class names as the
    /// runtime records them), by address and length: no byte is hashed.
    statics: SlotCache<(usize, usize), Id>,
}

impl IdCache {
    fn number(&mut self, key: NumberKey, render: impl FnOnce() -> Id) -> Id {
        let last = &mut self.last[usize::from(key.0) % 8];
        if let Some((k, id)) = last {
            if *k == key {
                return id.clone();
            }
        }
        let table = if key.0 <= 2 {
            &mut self.numbers
        } else {
            &mut self.places
        };
        let id = table
            .get_or_insert_with(&key, ID_CACHE_SLOTS, || (key, render()))
            .1
            .clone();
        *last = Some((key, id.clone()));
        id
    }

    fn static_str(&mut self, s: &'static str) -> Id {
        let key = (s.as_ptr() as usize, s.len());
        self.statics
            .get_or_insert_with(&key, ID_CACHE_SLOTS, || (key, Arc::from(s)))
            .1
            .clone()
    }

    fn string(&mut self, s: &str) -> Id {
        if s.len() > MAX_CACHED_STRING {
            return Arc::from(s);
        }
        self.strings
            .get_or_insert_with(s, ID_CACHE_SLOTS, || (Arc::from(s), ()))
            .0
            .clone()
    }
}

/// A fixed number of slots, each holding the last entry whose key hashed to
/// it: a cache whose memory is its slots (allocated on first use) plus one
/// entry per slot, replaced one at a time, so it never grows past them nor
/// empties at once.
pub(crate) struct SlotCache<K, V> {
    slots: Vec<Option<(K, V)>>,
    hasher: hashbrown::DefaultHashBuilder,
}

impl<K, V> Default for SlotCache<K, V> {
    fn default() -> Self {
        Self {
            slots: Vec::new(),
            hasher: hashbrown::DefaultHashBuilder::default(),
        }
    }
}

impl<K, V> fmt::Debug for SlotCache<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SlotCache")
            .field("slots", &self.slots.len())
            .finish()
    }
}

impl<K, V> SlotCache<K, V> {
    /// The entry for `key` (looked up as `Q`), made by `make` (which gets
    /// the slot) when its slot holds another; `slots` is the cache's size,
    /// fixed at first use.
    pub(crate) fn get_or_insert_with<Q>(
        &mut self,
        key: &Q,
        slots: usize,
        make: impl FnOnce() -> (K, V),
    ) -> &mut (K, V)
    where
        K: std::borrow::Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        use std::hash::BuildHasher;
        if self.slots.is_empty() {
            self.slots.resize_with(slots.max(1), || None);
        }
        let at = (self.hasher.hash_one(key) as usize) % self.slots.len();
        let slot = &mut self.slots[at];
        if !slot.as_ref().is_some_and(|(k, _)| k.borrow() == key) {
            *slot = None;
        }
        slot.get_or_insert_with(make)
    }
}

/// A node of the logical graph: who calls, who is called, who puts and gets data.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LogicalNode {
    /// The driver (the program that submitted the first tasks).
    Driver,
    /// A remote function, by name (e.g. `worker_tree::process`).
    Function(Arc<str>),
    /// One actor instance, by id, inside its class.
    Actor {
        /// The actor's class (e.g. `worker_tree::Worker`).
        class: Arc<str>,
        /// The actor's id.
        actor_id: Arc<str>,
    },
    /// A caller or producer the engine no longer knows (its state was evicted
    /// or never recorded).
    Unknown,
}

impl LogicalNode {
    /// A stable key for exports: `driver`, `fn:NAME`, `actor:ID`, `unknown`.
    pub fn key(&self) -> String {
        match self {
            LogicalNode::Driver => "driver".to_owned(),
            LogicalNode::Function(name) => format!("fn:{name}"),
            LogicalNode::Actor { actor_id, .. } => format!("actor:{actor_id}"),
            LogicalNode::Unknown => "unknown".to_owned(),
        }
    }
}

impl fmt::Display for LogicalNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LogicalNode::Driver => f.write_str("driver"),
            LogicalNode::Function(name) => f.write_str(name),
            LogicalNode::Actor { class, actor_id } => write!(f, "{class}({actor_id})"),
            LogicalNode::Unknown => f.write_str("unknown"),
        }
    }
}

/// Index of an interned label set; 0 is the empty set.
pub(crate) type LabelSetId = u32;

/// One label set: `(key, value)` pairs sorted by key, keys unique.
pub(crate) type LabelSet = Arc<[(Id, Id)]>;

/// Interned context label sets (`dp_rank=0, stage=2`), so per-task state and
/// aggregates carry a `u32` instead of a map.
#[derive(Debug)]
pub(crate) struct LabelSets {
    sets: Vec<LabelSet>,
    index: HashMap<LabelSet, LabelSetId>,
    cap: usize,
}

impl LabelSets {
    pub(crate) fn new(cap: usize) -> Self {
        let empty: LabelSet = Arc::from(Vec::new());
        let mut index = HashMap::new();
        index.insert(Arc::clone(&empty), 0);
        Self {
            sets: vec![empty],
            index,
            cap: cap.max(1),
        }
    }

    pub(crate) fn get(&self, id: LabelSetId) -> &[(Id, Id)] {
        self.sets.get(id as usize).map_or(&[], |s| &s[..])
    }

    /// The set `id` as owned `(key, value)` pairs, for a view.
    pub(crate) fn pairs(&self, id: LabelSetId) -> Vec<(String, String)> {
        self.get(id)
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// The set `base` with `add` merged over it (later values win), or `None`
    /// when a new set is needed and the table is full.
    pub(crate) fn merge(&mut self, base: LabelSetId, add: &[(Id, Id)]) -> Option<LabelSetId> {
        let mut merged: Vec<(Id, Id)> = self.get(base).to_vec();
        for (key, value) in add {
            match merged.binary_search_by(|(k, _)| k.cmp(key)) {
                Ok(i) => merged[i].1 = Arc::clone(value),
                Err(i) => merged.insert(i, (Arc::clone(key), Arc::clone(value))),
            }
        }
        let merged: LabelSet = Arc::from(merged);
        if let Some(&id) = self.index.get(&merged) {
            return Some(id);
        }
        if self.sets.len() >= self.cap {
            return None;
        }
        let id = LabelSetId::try_from(self.sets.len()).ok()?;
        self.sets.push(Arc::clone(&merged));
        self.index.insert(merged, id);
        Some(id)
    }

    /// For each set id, whether the set holds `key = value`.
    pub(crate) fn matching(&self, key: &str, value: &str) -> Vec<bool> {
        self.sets
            .iter()
            .map(|set| set.iter().any(|(k, v)| &**k == key && &**v == value))
            .collect()
    }

    pub(crate) fn len(&self) -> usize {
        self.sets.len()
    }
}

/// Index of an interned call path; 0 is the root (`driver`).
pub(crate) type PathId = u32;

/// Interned call paths as a trie: each path is its parent path plus one frame.
#[derive(Debug)]
pub(crate) struct PathTable {
    nodes: Vec<(Option<PathId>, Id)>,
    index: HashMap<(PathId, Id), PathId>,
    cap: usize,
}

impl PathTable {
    pub(crate) const ROOT: PathId = 0;

    pub(crate) fn new(cap: usize) -> Self {
        Self {
            nodes: vec![(None, Arc::from("driver"))],
            index: HashMap::new(),
            cap: cap.max(1),
        }
    }

    /// The path `parent;frame`, or `None` when it is new and the table is full.
    pub(crate) fn child(&mut self, parent: PathId, frame: &Id) -> Option<PathId> {
        if let Some(&id) = self.index.get(&(parent, Arc::clone(frame))) {
            return Some(id);
        }
        if self.nodes.len() >= self.cap {
            return None;
        }
        let id = PathId::try_from(self.nodes.len()).ok()?;
        self.nodes.push((Some(parent), Arc::clone(frame)));
        self.index.insert((parent, Arc::clone(frame)), id);
        Some(id)
    }

    pub(crate) fn parent(&self, id: PathId) -> Option<PathId> {
        self.nodes.get(id as usize).and_then(|(p, _)| *p)
    }

    /// The path as folded-stack text: frames joined by `;`, root first.
    pub(crate) fn render(&self, id: PathId) -> String {
        let mut frames = Vec::new();
        let mut at = Some(id);
        while let Some(i) = at {
            let Some((parent, frame)) = self.nodes.get(i as usize) else {
                break;
            };
            frames.push(&**frame);
            at = *parent;
        }
        frames.reverse();
        frames.join(";")
    }

    pub(crate) fn len(&self) -> usize {
        self.nodes.len()
    }
}

/// A frame name made safe for folded stacks (no `;`, no whitespace).
pub(crate) fn frame_name(name: &str) -> Id {
    if name.contains(|c: char| c == ';' || c.is_whitespace()) {
        Arc::from(
            name.chars()
                .map(|c| match c {
                    ';' => ':',
                    c if c.is_whitespace() => '_',
                    c => c,
                })
                .collect::<String>(),
        )
    } else {
        Arc::from(name)
    }
}

/// An id's address (0 for none): what the [`Memo`] keys on. Equal
/// addresses are one string; the memo holds the ids of each key it keeps
/// (its *pins*), so an address it keys on cannot be reused by another
/// string while the entry lives. Two equal strings at two addresses are
/// two entries with equal values: a miss, never a wrong answer.
fn addr(id: Option<&Id>) -> usize {
    id.map_or(0, |id| Arc::as_ptr(id).cast::<u8>() as usize)
}

/// What a call's names are built from: its kind, and its name, class and
/// actor by address (see [`addr`]).
type NameKey = (super::CallKind, usize, usize, usize);

/// What a Gantt lane is built from: a task's node, worker and thread, or an
/// actor call's node, class and actor (ids by address).
type LaneKey = (bool, usize, usize, usize, u32);

/// The ids a memo entry's key names by address, kept alive with it.
type Pins = [Option<Id>; 3];

/// What a call is called, built once per kind, name, class and actor.
#[derive(Debug, Clone)]
pub(crate) struct CallNames {
    /// `function` or `Class.method` (Gantt slices).
    pub(crate) display: Id,
    /// `Class[actor].method` (stack view).
    pub(crate) instance: Id,
    /// Its flame frame.
    pub(crate) frame: Id,
}

/// Slots of each [`Memo`] table.
const MEMO_SLOTS: usize = 4096;

/// Names and lanes the views already built, by what they were built from:
/// every call of one actor method (every task of one function on one
/// thread) has the same instance name, flame frame and lane, and building
/// them (formatting, allocating) cost more than the rest of applying a
/// record. A pure cache of fixed size ([`SlotCache`]), keyed by the ids'
/// addresses: a lookup hashes four integers and takes no reference.
#[derive(Debug, Default)]
pub(crate) struct Memo {
    names: SlotCache<NameKey, (Pins, CallNames)>,
    lanes: SlotCache<LaneKey, (Pins, Option<LaneId>)>,
}

impl Memo {
    /// The names of a call of `kind` named `name` (`class`, `actor`),
    /// built by `build` (display name, instance name) the first time.
    pub(crate) fn names(
        &mut self,
        kind: super::CallKind,
        [name, class, actor]: [Option<&Id>; 3],
        build: impl FnOnce() -> (Id, Id),
    ) -> &CallNames {
        let key = (kind, addr(name), addr(class), addr(actor));
        let (_, (_, names)) = self.names.get_or_insert_with(&key, MEMO_SLOTS, || {
            let (display, instance) = build();
            let frame = frame_name(&instance);
            let pins = [name.cloned(), class.cloned(), actor.cloned()];
            let names = CallNames {
                display,
                instance,
                frame,
            };
            (key, (pins, names))
        });
        names
    }

    /// The lane of a task (`task` true: `ids` are its node and worker, on
    /// `thread`) or of an actor's calls (its node, class and actor), found
    /// by `find` the first time (lanes are never evicted, so a lane once
    /// given stays right; a refusal is not kept).
    pub(crate) fn lane(
        &mut self,
        task: bool,
        ids: [Option<&Id>; 3],
        thread: u32,
        find: impl FnOnce() -> Option<LaneId>,
    ) -> Option<LaneId> {
        let key = (task, addr(ids[0]), addr(ids[1]), addr(ids[2]), thread);
        let (_, (_, lane)) = self.lanes.get_or_insert_with(&key, MEMO_SLOTS, || {
            (key, (ids.map(|id| id.cloned()), None))
        });
        if lane.is_none() {
            *lane = find();
        }
        *lane
    }
}

/// Index of an interned Gantt lane (also its Chrome trace `tid`).
pub(crate) type LaneId = u32;

/// Gantt lanes: one per (process, lane name), processes numbered as they appear.
#[derive(Debug)]
pub(crate) struct Lanes {
    processes: Vec<Id>,
    process_index: HashMap<Id, u32>,
    lanes: Vec<(u32, Id)>,
    index: HashMap<(u32, Id), LaneId>,
    cap: usize,
}

impl Lanes {
    pub(crate) fn new(cap: usize) -> Self {
        Self {
            processes: Vec::new(),
            process_index: HashMap::new(),
            lanes: Vec::new(),
            index: HashMap::new(),
            cap: cap.max(1),
        }
    }

    /// The lane `name` in process `process`, or `None` when the table is full.
    pub(crate) fn lane(&mut self, process: &Id, name: Id) -> Option<LaneId> {
        let pid = match self.process_index.get(process) {
            Some(&pid) => pid,
            None => {
                if self.processes.len() >= self.cap {
                    return None;
                }
                let pid = u32::try_from(self.processes.len()).ok()?;
                self.processes.push(Arc::clone(process));
                self.process_index.insert(Arc::clone(process), pid);
                pid
            }
        };
        if let Some(&id) = self.index.get(&(pid, Arc::clone(&name))) {
            return Some(id);
        }
        if self.lanes.len() >= self.cap {
            return None;
        }
        let id = LaneId::try_from(self.lanes.len()).ok()?;
        self.lanes.push((pid, Arc::clone(&name)));
        self.index.insert((pid, name), id);
        Some(id)
    }

    /// `(pid, process name, lane name)` for every lane, by lane id.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (LaneId, u32, &str, &str)> + '_ {
        self.lanes.iter().enumerate().map(|(i, (pid, name))| {
            let process = self.processes.get(*pid as usize).map_or("", |p| &**p);
            (i as LaneId, *pid, process, &**name)
        })
    }

    pub(crate) fn len(&self) -> usize {
        self.lanes.len() + self.processes.len()
    }
}

/// A map that keeps at most `cap` keys and evicts the oldest inserted key to
/// make room; updating an existing key does not refresh its age.
///
/// The entries live in a ring in insertion order, and the index maps a key
/// to its entry's sequence number (its push count). Evicting the oldest
/// entry pops the ring's front and leaves its index entry behind, stale (its
/// sequence is before the ring's first), rather than looking the key up:
/// the oldest key's bucket is the coldest memory of the table, and that
/// lookup was the views' largest single cost (a tenth of the collector's
/// samples, recorded W3, `perf record`). Stale index entries are swept in
/// one pass once the index holds twice the cap, so it stays within that.
#[derive(Debug)]
pub(crate) struct FifoMap<K, V> {
    index: KeyMap<K, u64>,
    /// `ring[i]` holds the entry of sequence `first + i`; `None`: removed.
    ring: VecDeque<Option<(K, V)>>,
    first: u64,
    live: usize,
    cap: usize,
}

impl<K: Clone + Eq + Hash, V> FifoMap<K, V> {
    pub(crate) fn new(cap: usize) -> Self {
        Self {
            index: KeyMap::default(),
            ring: VecDeque::new(),
            first: 0,
            live: 0,
            cap,
        }
    }

    /// The ring position of `key`'s live entry.
    fn position(&self, key: &K) -> Option<usize> {
        let seq = *self.index.get(key)?;
        let at = usize::try_from(seq.checked_sub(self.first)?).ok()?;
        self.ring.get(at)?.as_ref().map(|_| at)
    }

    /// Pops removed entries off the ring's front.
    fn pop_removed(&mut self) {
        while let Some(None) = self.ring.front() {
            self.ring.pop_front();
            self.first += 1;
        }
    }

    /// Inserts or replaces; returns whether an older entry was evicted.
    pub(crate) fn insert(&mut self, key: K, value: V) -> bool {
        if self.cap == 0 {
            return true;
        }
        if let Some(at) = self.position(&key) {
            if let Some((_, slot)) = &mut self.ring[at] {
                *slot = value;
            }
            return false;
        }
        let mut evicted = false;
        while self.live >= self.cap {
            match self.ring.pop_front() {
                Some(entry) => {
                    self.first += 1;
                    if entry.is_some() {
                        self.live -= 1;
                        evicted = true;
                    }
                }
                None => break,
            }
        }
        self.pop_removed();
        let seq = self.first + self.ring.len() as u64;
        self.ring.push_back(Some((key.clone(), value)));
        self.live += 1;
        self.index.insert(key, seq);
        if self.index.len() > self.bound() {
            self.sweep();
        }
        if self.ring.len() > self.bound() {
            self.compact();
        }
        evicted
    }

    /// The most index entries or ring places it keeps before sweeping or
    /// compacting: twice the cap.
    fn bound(&self) -> usize {
        self.cap.max(8).saturating_mul(2)
    }

    /// Drops the index entries of evicted keys: those before the ring's
    /// first (a removed key's entry went with it). It reads the index
    /// alone: probing the ring for every live entry was a random read each.
    fn sweep(&mut self) {
        let first = self.first;
        self.index.retain(|_, seq| *seq >= first);
    }

    pub(crate) fn get(&self, key: &K) -> Option<&V> {
        let at = self.position(key)?;
        self.ring[at].as_ref().map(|(_, v)| v)
    }

    pub(crate) fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        let at = self.position(key)?;
        self.ring[at].as_mut().map(|(_, v)| v)
    }

    /// Removes `key`. Its place in the ring is left empty and popped once
    /// it is the oldest; when empty places make the ring longer than twice
    /// the cap (checked here and on insert), it is rebuilt without them.
    pub(crate) fn remove(&mut self, key: &K) -> Option<V> {
        let at = self.position(key)?;
        self.index.remove(key);
        let (_, value) = self.ring[at].take()?;
        self.live -= 1;
        self.pop_removed();
        if self.ring.len() > self.bound() {
            self.compact();
        }
        Some(value)
    }

    /// Rebuilds the ring without its empty places, renumbering the entries.
    fn compact(&mut self) {
        let first = self.first + self.ring.len() as u64;
        let ring: VecDeque<Option<(K, V)>> = self.ring.drain(..).filter(Option::is_some).collect();
        self.index.clear();
        for (i, (key, _)) in ring.iter().flatten().enumerate() {
            self.index.insert(key.clone(), first + i as u64);
        }
        self.first = first;
        self.ring = ring;
    }

    /// The entries, oldest first.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&K, &V)> + '_ {
        self.ring.iter().flatten().map(|(k, v)| (k, v))
    }

    pub(crate) fn len(&self) -> usize {
        self.live
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_key_hasher_keeps_one_owners_ids_together_and_mixes_the_rest() {
        use std::hash::BuildHasher;
        let build = KeyBuild::default();
        let h = |k: &IdKey| build.hash_one(k);
        let run: Vec<u64> = (500..564).map(|seq| h(&IdKey::Num(true, 9, seq))).collect();
        // Ids go in runs of 14 to one window of 16 buckets, one bucket
        // after another, its last two left empty; each run's window is
        // elsewhere (below the tag bits).
        let window = |h: u64| (h & (u64::MAX >> 7)) >> 4;
        for pair in run.windows(2) {
            if window(pair[0]) == window(pair[1]) {
                assert_eq!(pair[1] & 0xf, (pair[0] & 0xf) + 1, "{pair:x?}");
            }
        }
        assert!(run.iter().all(|h| h & 0xf < 14));
        let windows: std::collections::HashSet<u64> = run.iter().map(|&h| window(h)).collect();
        assert!(
            (5..=6).contains(&windows.len()),
            "{} windows",
            windows.len()
        );
        let mut sorted: Vec<u64> = windows.into_iter().collect();
        sorted.sort_unstable();
        assert!(
            sorted.windows(2).all(|w| w[1] - w[0] > 1),
            "runs placed side by side"
        );
        // The tags (top 7 bits) are mixed, not alike.
        let tags: std::collections::HashSet<u64> = run.iter().map(|x| x >> 57).collect();
        assert!(tags.len() > 32, "{} tags in 64 ids", tags.len());
        // Another owner's same sequence goes elsewhere.
        assert_ne!(window(h(&IdKey::Num(true, 10, 500))), window(run[0]));
        // Equal keys hash alike, whatever their kind: a text key by its
        // text, not its allocation.
        let text = IdKey::Text(Arc::from("driver"));
        assert_eq!(h(&text), h(&IdKey::Text(Arc::from(String::from("driver")))));
        assert_eq!(h(&IdKey::Num(false, 0, 7)), h(&IdKey::Num(false, 0, 7)));
        // Text and tuples go to the full hasher: neighbouring strings
        // scatter over the low bits.
        let lows: std::collections::HashSet<u64> = (0..64)
            .map(|i| h(&IdKey::Text(Arc::from(format!("name-{i}").as_str()))) & 0xff)
            .collect();
        assert!(
            lows.len() > 32,
            "{} buckets of 256 for 64 names",
            lows.len()
        );
        let pair = (Arc::<str>::from("a"), Arc::<str>::from("b"));
        let same = (
            Arc::<str>::from("a".to_string()),
            Arc::<str>::from("b".to_string()),
        );
        assert_eq!(build.hash_one(&pair), build.hash_one(&same));
        // A key of several writes hashes all of them, the first word too
        // (it is held back until the second arrives).
        let firsts: std::collections::HashSet<u64> =
            (0..64u64).map(|a| build.hash_one((a, 7u64))).collect();
        assert_eq!(firsts.len(), 64, "the first of two words is lost");
        assert_ne!(build.hash_one(("x", 5u64)), build.hash_one(5u64));
        assert_ne!(build.hash_one((5u64, "x")), build.hash_one((6u64, "x")));
    }

    #[test]
    fn an_id_key_is_one_key_for_an_id_as_numbers_and_as_its_rendering() {
        let numbers = FieldValue::U128 { hi: 0x1a, lo: 0x2b };
        let text = FieldValue::Str("obj-1a.2b".into());
        assert_eq!(id_key("object_id", &numbers), id_key("object_id", &text));
        assert_eq!(id_key("object_id", &numbers), IdKey::Num(true, 0x1a, 0x2b));
        // Not a rendering: leading zeros, upper case, another prefix, junk.
        for other in [
            "obj-01a.2b",
            "obj-1A.2b",
            "task-1a.2b",
            "obj-1a.",
            "obj-x",
            "obj-1a.2b.3",
        ] {
            let key = id_key("object_id", &FieldValue::Str(other.into()));
            assert_eq!(key, IdKey::Text(Arc::from(other)), "{other}");
        }
        assert_eq!(
            id_key("object_id", &FieldValue::Str("obj-0".into())),
            IdKey::Num(false, 0, 0)
        );
        assert_eq!(
            id_key("object_id", &FieldValue::U64(0)),
            IdKey::Num(false, 0, 0)
        );
        // 17 hex digits do not fit a part.
        let long = FieldValue::Str("obj-10000000000000000".into());
        assert!(matches!(id_key("object_id", &long), IdKey::Text(_)));
    }

    #[test]
    fn ids_are_rendered_in_hex_as_the_runtime_displays_them() {
        use super::{id_of, FieldValue};
        for (hi, lo) in [(0, 0), (1, 0xf), (0xabc, 1 << 40), (u64::MAX, u64::MAX)] {
            let id = id_of("task_id", &FieldValue::U128 { hi, lo });
            assert_eq!(&*id, format!("task-{hi:x}.{lo:x}"));
            // Again: from the cache, equal.
            assert_eq!(id_of("task_id", &FieldValue::U128 { hi, lo }), id);
        }
        assert_eq!(&*id_of("node_id", &FieldValue::U64(0)), "node-0");
        assert_eq!(&*id_of("worker_id", &FieldValue::U64(0x1f)), "worker-1f");
        assert_eq!(&*id_of("bytes", &FieldValue::U64(31)), "31");
        assert_eq!(&*id_of("class", &FieldValue::Str("m::C".into())), "m::C");
    }

    use super::*;

    #[test]
    fn removing_keeps_the_eviction_order_bounded_and_evicts_the_oldest_left() {
        let mut map = FifoMap::new(4);
        for round in 0..100u32 {
            map.insert(round, round);
            assert_eq!(map.remove(&round), Some(round));
        }
        assert!(map.ring.len() <= 16, "{}", map.ring.len());
        assert!(map.index.len() <= 16, "{}", map.index.len());
        for k in 0..5u32 {
            map.insert(1000 + k, k);
        }
        assert_eq!(map.len(), 4);
        assert!(map.get(&1000).is_none(), "the oldest key went first");
        assert!(map.get(&1004).is_some());
        assert_eq!(map.remove(&7), None);
    }

    #[test]
    fn label_merge_overrides_and_interns() {
        let mut sets = LabelSets::new(8);
        let a = sets
            .merge(0, &[(Arc::from("dp_rank"), Arc::from("0"))])
            .expect("room");
        let b = sets
            .merge(a, &[(Arc::from("dp_rank"), Arc::from("1"))])
            .expect("room");
        let again = sets
            .merge(0, &[(Arc::from("dp_rank"), Arc::from("1"))])
            .expect("room");
        assert_eq!(b, again);
        assert_ne!(a, b);
        assert_eq!(sets.matching("dp_rank", "0"), vec![false, true, false]);
    }

    proptest::proptest! {
        /// Against a plain model (a list of pairs in insertion order): the
        /// same answers to every get, insert, update and remove, the same
        /// evictions, the same entries oldest first, and an index and ring
        /// within twice the cap.
        #[test]
        fn fifo_map_behaves_as_an_insertion_ordered_list(
            cap in 0usize..6,
            ops in proptest::collection::vec((0u8..4, 0u32..10, 0u32..100), 0..300),
        ) {
            let mut map = FifoMap::new(cap);
            let mut model: Vec<(u32, u32)> = Vec::new();
            for (op, key, value) in ops {
                match op {
                    0 => {
                        let evicted = if cap == 0 {
                            true
                        } else if let Some(slot) = model.iter_mut().find(|(k, _)| *k == key) {
                            slot.1 = value;
                            false
                        } else {
                            let full = model.len() >= cap;
                            if full {
                                model.remove(0);
                            }
                            model.push((key, value));
                            full
                        };
                        proptest::prop_assert_eq!(map.insert(key, value), evicted);
                    }
                    1 => {
                        let want = model.iter().position(|(k, _)| *k == key).map(|i| model.remove(i).1);
                        proptest::prop_assert_eq!(map.remove(&key), want);
                    }
                    2 => {
                        if let Some(v) = map.get_mut(&key) {
                            *v += 1;
                        }
                        if let Some(slot) = model.iter_mut().find(|(k, _)| *k == key) {
                            slot.1 += 1;
                        }
                    }
                    _ => {
                        let want = model.iter().find(|(k, _)| *k == key).map(|(_, v)| v);
                        proptest::prop_assert_eq!(map.get(&key), want);
                    }
                }
                proptest::prop_assert_eq!(map.len(), model.len());
                let entries: Vec<(u32, u32)> = map.iter().map(|(k, v)| (*k, *v)).collect();
                proptest::prop_assert_eq!(&entries, &model);
                // An index entry at or after the ring's first names its
                // live slot (only evicted keys' entries go stale, and they
                // are before the first: what the sweep relies on).
                for (k, &seq) in map.index.iter().filter(|(_, &seq)| seq >= map.first) {
                    let slot = usize::try_from(seq - map.first).ok().and_then(|at| map.ring.get(at));
                    proptest::prop_assert!(
                        matches!(slot, Some(Some((key, _))) if key == k),
                        "index entry {} -> {} names no live slot", k, seq
                    );
                }
                proptest::prop_assert!(map.index.len() <= 2 * cap.max(8));
                proptest::prop_assert!(map.ring.len() <= 2 * cap.max(8));
            }
        }
    }

    #[test]
    fn fifo_map_evicts_the_oldest_key() {
        let mut map = FifoMap::new(2);
        assert!(!map.insert(1, "a"));
        assert!(!map.insert(2, "b"));
        assert!(!map.insert(2, "b2"));
        assert!(map.insert(3, "c"));
        assert_eq!(map.get(&1), None);
        assert_eq!(map.get(&2), Some(&"b2"));
        assert_eq!(map.len(), 2);
    }

    #[test]
    fn paths_render_root_first_and_refuse_when_full() {
        let mut paths = PathTable::new(3);
        let a = paths.child(PathTable::ROOT, &Arc::from("f")).expect("room");
        let b = paths.child(a, &Arc::from("g")).expect("room");
        assert_eq!(paths.render(b), "driver;f;g");
        assert_eq!(paths.child(b, &Arc::from("h")), None);
        assert_eq!(paths.parent(b), Some(a));
    }
}
