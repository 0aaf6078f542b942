//! The append-only event log: records written as they are drained, read back
//! later (also from a damaged file), and replayed into [`Views`] as they stood
//! at any time t.
//!
//! [`LogWriter`] is a [`Sink`]: put it beside a live [`Views`] with a
//! [`Tee`](crate::Tee) and the same batches build the live views and the log.
//! [`read_log`] (or the streaming [`LogReader`]) gives the records back;
//! [`replay`] (or the [`Replay`] sink) rebuilds the views from them, whole or
//! up to a time.
//!
//! # File format (version 2)
//!
//! All integers are little-endian.
//!
//! ```text
//! header  = "RAYRSLG1"                 8 bytes, the magic
//!           u32 format version         2 (1: payloads of whole records only)
//!           u64 epoch_unix_nanos       wall-clock time (ns since the Unix epoch)
//!                                      of the records' `at_nanos == 0`
//! frame*  = u32 payload length         at most MAX_FRAME_BYTES
//!           u32 CRC-32 of the payload  (IEEE 802.3, as zlib and gzip use)
//!           payload                    one batch of records
//! ```
//!
//! A payload is one batch, encoded as [`encode_records`] documents (varints,
//! strings named once per batch, typed field values). A batch stands alone,
//! so the same encoding ships batches between processes.
//!
//! # Damage
//!
//! A log is appended to while the job runs, so a crash can leave a frame cut
//! short, and disks flip bits. Reading stops at the first frame that is
//! incomplete ([`LogError::Truncated`]) or fails its checksum, its length cap
//! or its decoding ([`LogError::Corrupt`]), keeps every record of the frames
//! before it, and says where it stopped: `offset` is the byte where the bad
//! frame starts (truncating the file there repairs it), `records_read` the
//! records kept. A file that is not a log, of an unknown version, or that
//! cannot be read is an error instead.
//!
//! # Example
//!
//! ```
//! use ray_insight::log::{read_log, replay, LogWriter};
//! use ray_insight::{FieldValue, Limits, Record, RecordKind, Sink};
//!
//! let dir = std::env::temp_dir().join(format!("ray-insight-doc-{}", std::process::id()));
//! std::fs::create_dir_all(&dir)?;
//! let path = dir.join("job.rayrslog");
//! let run = |kind, at_nanos| Record {
//!     kind,
//!     span: 1,
//!     parent: 0,
//!     name: "task.run",
//!     target: "ray_core::task",
//!     at_nanos,
//!     thread: 0,
//!     fields: [("task_id", FieldValue::Str("t1".into())), ("function", FieldValue::Str("f".into()))]
//!         .into_iter()
//!         .collect(),
//! };
//! let mut log = LogWriter::create(&path, 1_700_000_000_000_000_000)?;
//! log.accept(&[run(RecordKind::SpanNew, 1_000)]);
//! log.accept(&[run(RecordKind::SpanClose, 9_000)]);
//! log.flush()?;
//!
//! let contents = read_log(&path)?;
//! assert!(contents.stopped.is_none());
//! assert_eq!(contents.records.len(), 2);
//! // At t = 5 µs the task was still running.
//! let at_5us = replay(&contents.records, Limits::default(), Some(5_000));
//! assert_eq!(at_5us.stats().live_tasks, 1);
//! // It has run for 4 µs then: its stack is drawn up to t.
//! assert_eq!(at_5us.now_nanos(), 5_000);
//! let at_end = replay(&contents.records, Limits::default(), None);
//! assert_eq!(at_end.stats().live_tasks, 0);
//! # std::fs::remove_dir_all(&dir)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod chunk;
mod codec;
mod intern;

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::Path;

pub use chunk::Chunk;
pub(crate) use codec::encode_batch as encode_batch_into;
pub use codec::{decode_records, encode_records};
pub use intern::{
    intern, intern_stats, InternStats, MAX_INTERNED_BYTES, MAX_INTERNED_LEN, MAX_INTERNED_STRINGS,
    NAME_TOO_LONG, TOO_MANY_NAMES,
};

use crate::record::Record;
use crate::sink::{Drained, Sink};
use crate::views::{Limits, Views};

/// The first 8 bytes of every log file.
pub const MAGIC: [u8; 8] = *b"RAYRSLG1";

/// The format version this build writes. It reads this one and every
/// version from [`OLDEST_FORMAT_VERSION`] on: version 2 added the runtime's
/// compact record shapes to payloads (version 1 payloads hold whole
/// records only, which version 2 reads as they are).
pub const FORMAT_VERSION: u32 = 2;

/// The oldest format version this build reads.
pub const OLDEST_FORMAT_VERSION: u32 = 1;

/// The length of the file header (magic, version, epoch), in bytes.
pub const HEADER_BYTES: u64 = 20;

/// The length of a frame's header (payload length, CRC-32), in bytes.
pub const FRAME_HEADER_BYTES: u64 = 8;

/// The longest payload a frame may have, in bytes; a longer announced length
/// is corruption, not a request to allocate.
pub const MAX_FRAME_BYTES: usize = 64 << 20;

/// Scratch capacity a [`LogWriter`] keeps between frames; a larger buffer is let go.
const MAX_KEPT_SCRATCH: usize = 1 << 20;

/// Why a log (or a batch) could not be read, or could be read only in part.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// The file does not start with [`MAGIC`].
    #[error("not a ray-rs insight log (it does not start with RAYRSLG1)")]
    NotALog,
    /// The file is a log of a format version this build does not read.
    #[error(
        "log format version {version} is not supported (this build reads versions \
         {OLDEST_FORMAT_VERSION} to {FORMAT_VERSION})"
    )]
    UnsupportedVersion {
        /// The version the file announces.
        version: u32,
    },
    /// The log ends inside a frame (or inside its header).
    #[error(
        "the log is truncated: an incomplete frame at byte {offset}, after {records_read} records"
    )]
    Truncated {
        /// Where the incomplete frame starts: the length of the readable prefix.
        offset: u64,
        /// Records read from the frames before it.
        records_read: u64,
    },
    /// A frame fails its length cap, its checksum or its decoding.
    #[error("the log is corrupt at byte {offset} ({reason}), after {records_read} records")]
    Corrupt {
        /// Where the bad frame starts (for [`decode_records`]: the byte of
        /// its input where decoding failed).
        offset: u64,
        /// What is wrong with it.
        reason: String,
        /// Records read from the frames before it (0 from [`decode_records`]).
        records_read: u64,
    },
    /// Reading failed.
    #[error("cannot read the log: {0}")]
    Io(#[from] io::Error),
}

impl LogError {
    /// Whether this is damage that stops reading part-way ([`LogError::Truncated`]
    /// or [`LogError::Corrupt`]), after which the records before it are still good.
    pub fn is_damage(&self) -> bool {
        matches!(self, LogError::Truncated { .. } | LogError::Corrupt { .. })
    }
}

/// Writes batches of records to a log (see the [module docs](self) for the format).
///
/// As a [`Sink`] it never panics and never gives up: a batch that fails to
/// write (disk full) is counted in [`LogWriter::failed_batches`], its error
/// kept in [`LogWriter::last_error`], and the next batch is tried again. A
/// write that failed part-way can leave a partial frame, where readers will
/// stop. `accept` does not flush: call [`LogWriter::flush`] (after each
/// [`Collector::drain_into`](crate::Collector::drain_into), say) to bound what a
/// crash loses; with a buffered writer, a write error may surface only then.
#[derive(Debug)]
pub struct LogWriter<W: Write> {
    out: W,
    frame: Vec<u8>,
    epoch_unix_nanos: u64,
    records_written: u64,
    failed_batches: u64,
    last_error: Option<io::Error>,
}

impl LogWriter<BufWriter<File>> {
    /// Creates the file at `path` (truncating an existing one) and writes the
    /// header; `epoch_unix_nanos` is the wall-clock time of `at_nanos == 0`.
    pub fn create(path: impl AsRef<Path>, epoch_unix_nanos: u64) -> io::Result<Self> {
        Self::new(BufWriter::new(File::create(path)?), epoch_unix_nanos)
    }
}

impl<W: Write> LogWriter<W> {
    /// Writes the header to `out` and returns a writer that appends frames to it;
    /// `epoch_unix_nanos` is the wall-clock time of `at_nanos == 0`.
    pub fn new(mut out: W, epoch_unix_nanos: u64) -> io::Result<Self> {
        let mut header = Vec::with_capacity(HEADER_BYTES as usize);
        header.extend_from_slice(&MAGIC);
        header.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        header.extend_from_slice(&epoch_unix_nanos.to_le_bytes());
        out.write_all(&header)?;
        Ok(Self {
            out,
            frame: Vec::new(),
            epoch_unix_nanos,
            records_written: 0,
            failed_batches: 0,
            last_error: None,
        })
    }

    /// Appends `records` as one frame (an empty batch writes nothing).
    ///
    /// A batch whose encoding exceeds [`MAX_FRAME_BYTES`] is split over
    /// several frames; a single record that does not fit a frame alone is
    /// refused with [`io::ErrorKind::InvalidInput`] (the rest of its batch is
    /// still written).
    pub fn append(&mut self, records: &[Record]) -> io::Result<()> {
        if records.is_empty() {
            return Ok(());
        }
        self.frame.clear();
        self.frame
            .extend_from_slice(&[0; FRAME_HEADER_BYTES as usize]);
        encode_records(records, &mut self.frame);
        let payload_len = self.frame.len() - FRAME_HEADER_BYTES as usize;
        if payload_len > MAX_FRAME_BYTES {
            if records.len() == 1 {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "a record of {payload_len} bytes does not fit a log frame \
                         (at most {MAX_FRAME_BYTES})"
                    ),
                ));
            }
            let (first, second) = records.split_at(records.len() / 2);
            let first = self.append(first);
            let second = self.append(second);
            return first.and(second);
        }
        self.write_frame()?;
        self.records_written += records.len() as u64;
        Ok(())
    }

    /// Appends `chunk` as one frame, its compact shapes as they are (an
    /// empty chunk writes nothing). A chunk whose encoding exceeds
    /// [`MAX_FRAME_BYTES`] is expanded and written as
    /// [`LogWriter::append`] writes records (split over frames).
    pub fn append_chunk(&mut self, chunk: &mut Chunk) -> io::Result<()> {
        if chunk.is_empty() {
            return Ok(());
        }
        if self.write_compact(chunk.len(), |out| chunk.encode(out))? {
            return Ok(());
        }
        let records = chunk.take_records();
        self.append(&records)
    }

    /// Writes the `records` records `encode` writes as one frame, compact
    /// shapes as they are; `Ok(false)` (nothing written) when they take
    /// more than [`MAX_FRAME_BYTES`], for the caller to write expanded.
    fn write_compact(
        &mut self,
        records: usize,
        encode: impl FnOnce(&mut Vec<u8>),
    ) -> io::Result<bool> {
        self.frame.clear();
        self.frame
            .extend_from_slice(&[0; FRAME_HEADER_BYTES as usize]);
        encode(&mut self.frame);
        if self.frame.len() - FRAME_HEADER_BYTES as usize > MAX_FRAME_BYTES {
            return Ok(false);
        }
        self.write_frame()?;
        self.records_written += records as u64;
        Ok(true)
    }

    /// Fills in the frame's header (its payload is in `frame` after
    /// [`FRAME_HEADER_BYTES`], at most [`MAX_FRAME_BYTES`]) and writes it.
    fn write_frame(&mut self) -> io::Result<()> {
        let payload_len = self.frame.len() - FRAME_HEADER_BYTES as usize;
        let crc = crc32(&self.frame[FRAME_HEADER_BYTES as usize..]);
        // `payload_len <= MAX_FRAME_BYTES`, which fits a u32.
        self.frame[..4].copy_from_slice(&(payload_len as u32).to_le_bytes());
        self.frame[4..8].copy_from_slice(&crc.to_le_bytes());
        let written = self.out.write_all(&self.frame);
        if self.frame.capacity() > MAX_KEPT_SCRATCH {
            self.frame = Vec::new();
        }
        written
    }

    /// Flushes the underlying writer.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// The wall-clock time of `at_nanos == 0`, in nanoseconds since the Unix epoch.
    pub fn epoch_unix_nanos(&self) -> u64 {
        self.epoch_unix_nanos
    }

    /// Records handed to the underlying writer so far.
    pub fn records_written(&self) -> u64 {
        self.records_written
    }

    /// Batches that [`Sink::accept`] failed to write.
    pub fn failed_batches(&self) -> u64 {
        self.failed_batches
    }

    /// The error of the latest batch that [`Sink::accept`] failed to write.
    pub fn last_error(&self) -> Option<&io::Error> {
        self.last_error.as_ref()
    }

    /// The underlying writer.
    pub fn get_ref(&self) -> &W {
        &self.out
    }

    /// The underlying writer, unflushed.
    pub fn into_inner(self) -> W {
        self.out
    }
}

impl<W: Write + Send> Sink for LogWriter<W> {
    fn accept(&mut self, batch: &[Record]) {
        let written = self.append(batch);
        self.note(written);
    }

    /// Writes the batch compact (the runtime's shapes as they are), or
    /// expanded when it is over a frame.
    fn accept_drained(&mut self, batch: &mut Drained<'_>) {
        if batch.is_empty() {
            return;
        }
        let written = match self.write_compact(batch.len(), |out| batch.encode(out)) {
            Ok(true) => Ok(()),
            Ok(false) => self.append(batch.records()),
            Err(e) => Err(e),
        };
        self.note(written);
    }
}

impl<W: Write> LogWriter<W> {
    /// Counts a batch that failed to be written.
    fn note(&mut self, written: io::Result<()>) {
        if let Err(e) = written {
            self.failed_batches += 1;
            self.last_error = Some(e);
        }
    }
}

/// Reads a log frame by frame from any reader (see the [module docs](self)).
#[derive(Debug)]
pub struct LogReader<R: Read> {
    inner: R,
    epoch_unix_nanos: u64,
    offset: u64,
    records_read: u64,
    payload: Vec<u8>,
    done: bool,
}

impl<R: Read> LogReader<R> {
    /// Reads the header.
    ///
    /// Errors: [`LogError::NotALog`] when the input does not start with
    /// [`MAGIC`], [`LogError::UnsupportedVersion`], [`LogError::Truncated`]
    /// when it ends inside the header, [`LogError::Io`].
    pub fn new(mut inner: R) -> Result<Self, LogError> {
        let mut header = [0u8; HEADER_BYTES as usize];
        let got = read_up_to(&mut inner, &mut header)?;
        if got < MAGIC.len() || header[..MAGIC.len()] != MAGIC {
            return Err(LogError::NotALog);
        }
        if got >= 12 {
            let version = u32::from_le_bytes([header[8], header[9], header[10], header[11]]);
            if !(OLDEST_FORMAT_VERSION..=FORMAT_VERSION).contains(&version) {
                return Err(LogError::UnsupportedVersion { version });
            }
        }
        if got < header.len() {
            return Err(LogError::Truncated {
                offset: 0,
                records_read: 0,
            });
        }
        let mut epoch = [0u8; 8];
        epoch.copy_from_slice(&header[12..20]);
        Ok(Self {
            inner,
            epoch_unix_nanos: u64::from_le_bytes(epoch),
            offset: HEADER_BYTES,
            records_read: 0,
            payload: Vec::new(),
            done: false,
        })
    }

    /// The wall-clock time of `at_nanos == 0`, from the header.
    pub fn epoch_unix_nanos(&self) -> u64 {
        self.epoch_unix_nanos
    }

    /// Bytes read so far: the end of the last whole frame.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Records read so far.
    pub fn records_read(&self) -> u64 {
        self.records_read
    }

    /// The next frame's records; `Ok(None)` at the end of the log.
    ///
    /// Damage ([`LogError::Truncated`], [`LogError::Corrupt`]) ends the log:
    /// later calls return `Ok(None)`.
    pub fn next_batch(&mut self) -> Result<Option<Vec<Record>>, LogError> {
        if self.done {
            return Ok(None);
        }
        let batch = self.read_frame();
        if !matches!(batch, Ok(Some(_))) {
            self.done = true;
        }
        batch
    }

    fn read_frame(&mut self) -> Result<Option<Vec<Record>>, LogError> {
        let at = self.offset;
        let truncated = LogError::Truncated {
            offset: at,
            records_read: self.records_read,
        };
        let mut head = [0u8; FRAME_HEADER_BYTES as usize];
        match read_up_to(&mut self.inner, &mut head)? {
            0 => return Ok(None),
            n if n < head.len() => return Err(truncated),
            _ => {}
        }
        let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
        let crc = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
        let corrupt = |reason: String| LogError::Corrupt {
            offset: at,
            reason,
            records_read: self.records_read,
        };
        if len as usize > MAX_FRAME_BYTES {
            return Err(corrupt(format!(
                "a frame of {len} bytes, over the {MAX_FRAME_BYTES}-byte cap"
            )));
        }
        self.payload.clear();
        // `take` + `read_to_end` grows the buffer as bytes arrive: a corrupt
        // length costs no more than the bytes actually there.
        (&mut self.inner)
            .take(u64::from(len))
            .read_to_end(&mut self.payload)?;
        if self.payload.len() < len as usize {
            return Err(truncated);
        }
        let actual = crc32(&self.payload);
        if actual != crc {
            return Err(corrupt(format!(
                "checksum {actual:08x}, the frame says {crc:08x}"
            )));
        }
        let records = decode_records(&self.payload).map_err(|e| match e {
            LogError::Corrupt { offset, reason, .. } => {
                corrupt(format!("payload byte {offset}: {reason}"))
            }
            other => other,
        })?;
        if self.payload.capacity() > MAX_KEPT_SCRATCH {
            self.payload = Vec::new();
        }
        self.offset += FRAME_HEADER_BYTES + u64::from(len);
        self.records_read += records.len() as u64;
        Ok(Some(records))
    }

    /// Hands every remaining frame to `sink`, in log order.
    ///
    /// Returns `Ok(None)` at a clean end, `Ok(Some(damage))` when the log
    /// stopped at a truncated or corrupt frame (everything before it was
    /// handed over), and `Err` when reading failed otherwise.
    pub fn read_into(&mut self, sink: &mut dyn Sink) -> Result<Option<LogError>, LogError> {
        loop {
            match self.next_batch() {
                Ok(Some(mut batch)) => sink.accept_owned(&mut batch),
                Ok(None) => return Ok(None),
                Err(e) if e.is_damage() => return Ok(Some(e)),
                Err(e) => return Err(e),
            }
        }
    }
}

/// Reads into `buf` until it is full or the input ends; returns the bytes read.
fn read_up_to(reader: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match reader.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

/// Everything [`read_log`] could read.
#[derive(Debug)]
pub struct LogContents {
    /// The wall-clock time of `at_nanos == 0`, in nanoseconds since the Unix epoch.
    pub epoch_unix_nanos: u64,
    /// The records of every whole frame, in log order.
    pub records: Vec<Record>,
    /// Where and why reading stopped early ([`LogError::Truncated`] or
    /// [`LogError::Corrupt`]); `None` when the whole log was read.
    pub stopped: Option<LogError>,
}

/// Reads the log at `path`: every record of its whole frames, and the damage
/// that stopped reading early, if any (see the [module docs](self)).
///
/// Errors: the file cannot be opened or read, is not a log, or is of an
/// unsupported version (see [`LogReader::new`]).
pub fn read_log(path: impl AsRef<Path>) -> Result<LogContents, LogError> {
    let mut reader = LogReader::new(BufReader::new(File::open(path)?))?;
    let mut records = Collect(Vec::new());
    let stopped = reader.read_into(&mut records)?;
    Ok(LogContents {
        epoch_unix_nanos: reader.epoch_unix_nanos(),
        records: records.0,
        stopped,
    })
}

/// A sink keeping every record, for [`read_log`].
struct Collect(Vec<Record>);

impl Sink for Collect {
    fn accept(&mut self, batch: &[Record]) {
        self.0.extend_from_slice(batch);
    }

    fn accept_owned(&mut self, batch: &mut Vec<Record>) {
        self.0.append(batch);
    }
}

/// A [`Sink`] that rebuilds [`Views`] from a log's records as they stood at a
/// time: it applies, in arrival order, the records at or before `at_nanos`
/// (all of them for `None`) and skips the rest.
///
/// Records are not sorted by time in a log (threads hand over their batches
/// at different moments), so a later record can still be at or before t:
/// every record is looked at. Tasks running at t stay running in the views,
/// drawn up to t itself (the views' clock starts at t, see
/// [`Views::advance_to`]), not only up to the last record before it.
#[derive(Debug)]
pub struct Replay {
    views: Views,
    at_nanos: Option<u64>,
    skipped: u64,
}

impl Replay {
    /// An empty replay into a fresh [`Views`] with `limits`, of the records
    /// at or before `at_nanos` (`None`: all of them).
    pub fn new(limits: Limits, at_nanos: Option<u64>) -> Self {
        let mut views = Views::new(limits);
        // Set the clock to t now rather than at the end: records applied
        // later are all at or before t, so they never move it past t, and
        // `views()` shows the views as of t at every point of the replay.
        if let Some(t) = at_nanos {
            views.advance_to(t);
            views.set_horizon(t);
        }
        Self {
            views,
            at_nanos,
            skipped: 0,
        }
    }

    /// The views built so far.
    pub fn views(&self) -> &Views {
        &self.views
    }

    /// The views built.
    pub fn into_views(self) -> Views {
        self.views
    }

    /// Records skipped because they came after `at_nanos`.
    pub fn skipped(&self) -> u64 {
        self.skipped
    }
}

impl Sink for Replay {
    fn accept(&mut self, batch: &[Record]) {
        for record in batch {
            if self.at_nanos.is_none_or(|t| record.at_nanos <= t) {
                self.views.apply(record);
            } else {
                self.skipped += 1;
            }
        }
    }
}

/// The views of `records` as they stood at `at_nanos` (nanoseconds since the
/// log's epoch; `None`: after every record), built under `limits`: the
/// records at or before it applied in log order, tasks still running at
/// `at_nanos` drawn up to it (see [`Replay`]).
pub fn replay(records: &[Record], limits: Limits, at_nanos: Option<u64>) -> Views {
    let mut replay = Replay::new(limits, at_nanos);
    replay.accept(records);
    replay.into_views()
}

/// The CRC-32 of `bytes` (IEEE 802.3, as zlib and gzip compute it), with
/// the CPU's carry-less multiply where it has one: a byte-at-a-time table
/// was 7 % of a head's CPU while it logged a recorded cluster W3
/// (`perf annotate` of `LogWriter::append`).
fn crc32(bytes: &[u8]) -> u32 {
    crc32fast::hash(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32_matches_the_standard_check_value() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32(b""), 0);
    }

    #[test]
    fn a_short_or_foreign_header_is_not_a_log() {
        assert!(matches!(
            LogReader::new(&b"RAYRS"[..]),
            Err(LogError::NotALog)
        ));
        assert!(matches!(
            LogReader::new(&b"PK\x03\x04 a zip file, say"[..]),
            Err(LogError::NotALog)
        ));
        let mut v3 = MAGIC.to_vec();
        v3.extend_from_slice(&3u32.to_le_bytes());
        assert!(matches!(
            LogReader::new(&v3[..]),
            Err(LogError::UnsupportedVersion { version: 3 })
        ));
        let mut cut = MAGIC.to_vec();
        cut.extend_from_slice(&1u32.to_le_bytes());
        assert!(matches!(
            LogReader::new(&cut[..]),
            Err(LogError::Truncated { offset: 0, .. })
        ));
    }

    #[test]
    fn a_version_1_log_reads_as_it_did() {
        // Version 1 payloads hold whole records only, as `append` writes.
        let mut log = Vec::new();
        let mut writer = LogWriter::new(&mut log, 5).expect("header");
        let record = Record::event("user.event", "app", 9, crate::Fields::new());
        writer
            .append(std::slice::from_ref(&record))
            .expect("append");
        log[8..12].copy_from_slice(&1u32.to_le_bytes());
        let mut reader = LogReader::new(&log[..]).expect("a version 1 log");
        assert_eq!(reader.epoch_unix_nanos(), 5);
        assert_eq!(reader.next_batch().expect("a frame"), Some(vec![record]));
        assert_eq!(reader.next_batch().expect("the end"), None);
    }

    #[test]
    fn an_announced_length_over_the_cap_is_corrupt() {
        let mut log = Vec::new();
        LogWriter::new(&mut log, 0).expect("header");
        log.extend_from_slice(&u32::MAX.to_le_bytes());
        log.extend_from_slice(&0u32.to_le_bytes());
        let mut reader = LogReader::new(&log[..]).expect("a log");
        let err = reader.next_batch().expect_err("over the cap");
        assert!(
            matches!(
                err,
                LogError::Corrupt {
                    offset: HEADER_BYTES,
                    ..
                }
            ),
            "{err}"
        );
        assert!(matches!(reader.next_batch(), Ok(None)));
    }

    /// A writer that fails every write.
    struct Full;

    impl Write for Full {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::Error::other("no space left on device"))
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_failing_disk_is_counted_not_a_panic() {
        let mut writer = LogWriter {
            out: Full,
            frame: Vec::new(),
            epoch_unix_nanos: 0,
            records_written: 0,
            failed_batches: 0,
            last_error: None,
        };
        let records = crate::record::test_records(3);
        writer.accept(&records);
        writer.accept(&records);
        writer.accept(&[]);
        assert_eq!(writer.failed_batches(), 2);
        assert_eq!(writer.records_written(), 0);
        assert!(writer
            .last_error()
            .is_some_and(|e| e.to_string().contains("no space")));
    }
}
