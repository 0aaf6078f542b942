//! The head's event-log writer: the one place the hub's log files are
//! opened, written and flushed, on a blocking thread of the head's runtime,
//! so no tokio worker thread and no lock ever waits on the disk.
//!
//! The hub hands each accepted batch over through a bounded queue, under
//! its lock, in the order it took the batches in: a log holds its job's
//! batches in exactly the order that built the live views, so a replay
//! rebuilds them. Room in the queue is reserved before the hub's lock is
//! taken ([`LogFiles::reserve`]): when the disk falls behind, the request
//! shipping a batch waits (asynchronously), and nothing is dropped.
//!
//! A write that fails (a full disk) is logged once per job
//! (`insight.log_write_failed`, with the path and the OS error); the job's
//! live views keep every record, and a replay stops where its log does.
//!
//! The writer runs in `spawn_blocking` rather than on a thread of its own
//! because a runtime shutting down waits for its blocking tasks: once the
//! hub is gone the queue closes, and the writer writes what is left, flushes
//! and returns before the head's process exits.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, BufWriter};
use std::path::{Path, PathBuf};

use ray_insight::log::{Chunk, LogWriter};
use ray_proto::JobId;
use tokio::sync::{mpsc, oneshot};

/// Batches waiting for the writer, at most; each is at most
/// [`MAX_SHIPPED_BYTES`](super::MAX_SHIPPED_BYTES) encoded.
const QUEUE_DEPTH: usize = 64;

/// The sending side of the writer; cheap to clone.
#[derive(Clone)]
pub(super) struct LogFiles {
    queue: mpsc::Sender<LogOp>,
}

/// What the writer is asked to do.
enum LogOp {
    /// Append `records` to `job`'s log, creating the log first when the
    /// hub has just started keeping the job (`opened`).
    Write {
        job: JobId,
        opened: Option<Opened>,
        records: Chunk,
    },
    /// Flush every log, then answer with the path of `job`'s log (`None`:
    /// it has none): everything queued before is then on disk.
    Written {
        job: JobId,
        reply: oneshot::Sender<Option<PathBuf>>,
    },
}

/// A job the hub has just started keeping.
pub(super) struct Opened {
    /// The wall-clock time of the job's `at_nanos == 0`.
    pub(super) epoch_unix_nanos: u64,
    /// The jobs the hub forgot to make room for it: their logs are closed.
    pub(super) evicted: Vec<JobId>,
}

/// Room for one write in the writer's queue, reserved before the hub's
/// lock is taken, so the write is queued under the lock without waiting.
pub(super) struct LogPermit<'a>(mpsc::Permit<'a, LogOp>);

impl LogPermit<'_> {
    /// Queues `records` for `job`'s log (after creating it, if `opened`).
    pub(super) fn write(self, job: JobId, opened: Option<Opened>, records: Chunk) {
        self.0.send(LogOp::Write {
            job,
            opened,
            records,
        });
    }
}

impl LogFiles {
    /// Starts the writer of the logs under `dir` (`job-<id>.log`) on a
    /// blocking thread of the current runtime.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub(super) fn start(dir: PathBuf) -> Self {
        let (queue, ops) = mpsc::channel(QUEUE_DEPTH);
        tokio::task::spawn_blocking(move || write_logs(&dir, ops));
        Self { queue }
    }

    /// Waits for room for one write; `None` if the writer is gone.
    pub(super) async fn reserve(&self) -> Option<LogPermit<'_>> {
        self.queue.reserve().await.ok().map(LogPermit)
    }

    /// Room for one write if there is some now; `None` if the queue is
    /// full or the writer gone.
    pub(super) fn try_reserve(&self) -> Option<LogPermit<'_>> {
        self.queue.try_reserve().ok().map(LogPermit)
    }

    /// Waits until everything queued so far is written and flushed, and
    /// returns the path of `job`'s log (`None`: it has none, or its
    /// creation failed). Blocks: call it on a blocking thread.
    pub(super) fn written(&self, job: JobId) -> Option<PathBuf> {
        let (reply, answer) = oneshot::channel();
        self.queue
            .blocking_send(LogOp::Written { job, reply })
            .ok()?;
        answer.blocking_recv().ok().flatten()
    }
}

/// One job's open log.
struct JobLog {
    path: PathBuf,
    log: LogWriter<BufWriter<File>>,
    /// Written to since the last flush.
    dirty: bool,
    /// A write failed: said once, not again for every batch.
    failed: bool,
}

impl JobLog {
    fn create(dir: &Path, job: JobId, epoch_unix_nanos: u64) -> Option<Self> {
        // Named as the job is everywhere else (`job-1a`, hexadecimal).
        let path = dir.join(format!("{job}.log"));
        let _ = std::fs::create_dir_all(dir);
        match LogWriter::create(&path, epoch_unix_nanos) {
            Ok(log) => Some(Self {
                path,
                log,
                dirty: true,
                failed: false,
            }),
            Err(e) => {
                tracing::warn!(target: "ray::gcs", path = %path.display(), error = %e, "insight.log_failed");
                None
            }
        }
    }

    fn append(&mut self, job: JobId, records: &mut Chunk) {
        self.dirty = true;
        let written = self.log.append_chunk(records);
        self.check(job, written);
    }

    fn flush(&mut self, job: JobId) {
        if self.dirty {
            self.dirty = false;
            let flushed = self.log.flush();
            self.check(job, flushed);
        }
    }

    fn check(&mut self, job: JobId, result: io::Result<()>) {
        if let Err(e) = result {
            if !self.failed {
                self.failed = true;
                tracing::warn!(target: "ray::gcs", job = %job, path = %self.path.display(), error = %e, "insight.log_write_failed");
            }
        }
    }
}

/// The writer: runs until every [`LogFiles`] is dropped and the queue is
/// empty, flushing whenever it has caught up.
fn write_logs(dir: &Path, mut ops: mpsc::Receiver<LogOp>) {
    let mut logs: BTreeMap<JobId, JobLog> = BTreeMap::new();
    let flush_all = |logs: &mut BTreeMap<JobId, JobLog>| {
        for (job, log) in logs.iter_mut() {
            log.flush(*job);
        }
    };
    while let Some(op) = ops.blocking_recv() {
        match op {
            LogOp::Write {
                job,
                opened,
                mut records,
            } => {
                if let Some(opened) = opened {
                    for old in opened.evicted {
                        if let Some(mut log) = logs.remove(&old) {
                            log.flush(old);
                        }
                    }
                    match JobLog::create(dir, job, opened.epoch_unix_nanos) {
                        Some(log) => logs.insert(job, log),
                        None => logs.remove(&job),
                    };
                }
                if let Some(log) = logs.get_mut(&job) {
                    log.append(job, &mut records);
                }
                if ops.is_empty() {
                    flush_all(&mut logs);
                }
            }
            LogOp::Written { job, reply } => {
                flush_all(&mut logs);
                let _ = reply.send(logs.get(&job).map(|log| log.path.clone()));
            }
        }
    }
    flush_all(&mut logs);
}
