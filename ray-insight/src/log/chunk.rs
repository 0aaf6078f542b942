//! [`Chunk`]: records on their way between processes and into a log,
//! the runtime's own still in their compact shapes.

use super::codec::{decode_batch, encode_batch};
use super::LogError;
use crate::packed::Batch;
use crate::record::Record;
use crate::sink::Drained;
use crate::views::Views;

/// Records in recording order, the runtime's own kept in the compact
/// shapes their threads wrote (see [`encode_records`](super::encode_records)'s
/// format), anything else as whole [`Record`]s: what a process ships to the
/// head and what the head applies to its views and writes to a job's log,
/// without expanding every record into a `Record` and back.
#[derive(Debug, Default)]
pub struct Chunk {
    batch: Batch,
}

impl From<Vec<Record>> for Chunk {
    /// A chunk of whole records.
    fn from(records: Vec<Record>) -> Self {
        let mut chunk = Chunk::new();
        for record in records {
            chunk.push(record);
        }
        chunk
    }
}

impl Chunk {
    /// An empty chunk.
    pub fn new() -> Self {
        Chunk::default()
    }

    /// How many records it holds.
    pub fn len(&self) -> usize {
        self.batch.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.batch.is_empty()
    }

    /// Appends a whole record.
    pub fn push(&mut self, record: Record) {
        self.batch.push_full(record);
    }

    /// Moves every record of `other` after this chunk's, leaving it empty
    /// (an empty chunk takes `other`'s buffers instead of copying them).
    pub fn append(&mut self, other: &mut Chunk) {
        if self.batch.is_empty() {
            std::mem::swap(&mut self.batch, &mut other.batch);
            other.batch.clear();
        } else {
            self.batch.append(&mut other.batch);
        }
    }

    /// Moves every record of `drained` after this chunk's, leaving it
    /// empty (its compact shapes stay compact).
    pub fn take_drained(&mut self, drained: &mut Drained<'_>) {
        drained.move_into(&mut self.batch);
    }

    /// Appends its encoding (one batch, as
    /// [`encode_records`](super::encode_records) documents) to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        encode_batch(&self.batch, out);
    }

    /// Decodes one batch (written by [`Chunk::encode`] or
    /// [`encode_records`](super::encode_records)), keeping compact shapes
    /// compact.
    ///
    /// # Errors
    ///
    /// As [`decode_records`](super::decode_records): never panics, whatever
    /// the bytes.
    pub fn decode(bytes: &[u8]) -> Result<Self, LogError> {
        decode_batch(bytes).map(|batch| Chunk { batch })
    }

    /// Every record, expanded, in order; the chunk is left empty.
    pub fn take_records(&mut self) -> Vec<Record> {
        let mut records = Vec::with_capacity(self.batch.len());
        self.batch.unpack_into(&mut records);
        records
    }

    /// Drops the whole records `keep` says no to (compact shapes are the
    /// runtime's submits, runs and object moves, and are all kept); returns
    /// how many went.
    pub fn retain_records(&mut self, keep: impl FnMut(&Record) -> bool) -> usize {
        self.batch.retain_full(keep)
    }

    /// Puts every record on another process's clock and ids: times moved
    /// by `shift` nanoseconds (clamped to `0..=u64::MAX`, a run's folded
    /// close too), span ids (a record's own and its parent's) through
    /// `span`, thread indexes through `thread`, and the application span a
    /// submit, task run or actor call (not a constructor's run, as before
    /// chunks) names as its caller's (`parent_span`) through
    /// `parent_span(owner, span)`, where `owner` is the high word of the
    /// record's task id (the process that submitted it). A compact
    /// record's `parent_span` of 0 means none: `parent_span` should map no
    /// span to 0.
    pub fn rebase(
        &mut self,
        shift: i128,
        span: impl Fn(u64) -> u64,
        thread: impl Fn(u32) -> u32,
        parent_span: impl Fn(u64, u64) -> u64,
    ) {
        self.batch.rebase(shift, &span, &thread, &parent_span);
    }

    /// Applies every record to `views`, compact shapes as they are.
    pub fn apply_to(&self, views: &mut Views) {
        self.batch.visit(|packed| views.apply_packed(packed));
    }

    /// Empties it, keeping its room.
    pub fn clear(&mut self) {
        self.batch.clear();
    }
}
