//! The job table: one row per driver program, from start to finish.

use std::collections::BTreeMap;
use std::time::Duration;

use ray_proto::{ActorId, JobId};

use crate::codec::{key_array, DecodeError, Decoder, Encoder};
use crate::error::GcsError;
use crate::pubsub::{Channel, GcsEvent};
use crate::storage::{Storage, Table};
use crate::Gcs;

const ROW_VERSION: u8 = 1;
const NEXT_JOB_ID_KEY: &[u8] = b"next_job_id";

/// What a driver tells the GCS when its job starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobInfo {
    /// The job's id, usually from [`Gcs::next_job_id`].
    pub id: JobId,
    /// Who runs the job: the driver's address or program name.
    pub driver: String,
    /// When the job started, on the caller's clock.
    pub started_at: Duration,
}

/// Where a job is in its life.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JobState {
    /// The driver is connected.
    Running,
    /// The driver finished or disconnected.
    Finished {
        /// When, on the caller's clock.
        at: Duration,
    },
}

/// A row of the job table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobRow {
    /// What the driver registered.
    pub info: JobInfo,
    /// Running or finished.
    pub state: JobState,
}

impl JobRow {
    /// Whether the job is still running.
    pub fn is_running(&self) -> bool {
        self.state == JobState::Running
    }

    fn encode(&self) -> Vec<u8> {
        let mut e = Encoder::new(ROW_VERSION);
        e.u32(self.info.id.0)
            .str(&self.info.driver)
            .duration(self.info.started_at);
        match self.state {
            JobState::Running => e.u8(0),
            JobState::Finished { at } => e.u8(1).duration(at),
        };
        e.finish()
    }

    fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut d = Decoder::new(bytes, ROW_VERSION)?;
        let info = JobInfo {
            id: JobId(d.u32()?),
            driver: d.string()?,
            started_at: d.duration()?,
        };
        let state = match d.u8()? {
            0 => JobState::Running,
            1 => JobState::Finished { at: d.duration()? },
            t => return Err(DecodeError::new(format!("invalid job state tag {t}"))),
        };
        d.finish()?;
        Ok(Self { info, state })
    }
}

fn job_key(id: JobId) -> [u8; 4] {
    id.0.to_be_bytes()
}

/// The job rows and the job id counter.
#[derive(Debug, Default)]
pub(crate) struct JobTable {
    rows: BTreeMap<JobId, JobRow>,
    /// The next id [`Gcs::next_job_id`] hands out; above every known job id.
    next_id: u32,
}

impl JobTable {
    /// Rebuilds the table from the `Jobs` and `Meta` tables of a storage.
    pub(crate) fn recover(storage: &impl Storage) -> Result<Self, GcsError> {
        let corrupt = |reason: String| GcsError::Corrupt {
            table: Table::Jobs,
            reason,
        };
        let mut table = JobTable::default();
        for (key, value) in storage.scan(Table::Jobs) {
            let id = key_array::<4>(&key)
                .map(|k| JobId(u32::from_be_bytes(k)))
                .map_err(|e| corrupt(e.0))?;
            let row = JobRow::decode(&value).map_err(|e| corrupt(format!("{id}: {}", e.0)))?;
            if row.info.id != id {
                return Err(corrupt(format!(
                    "row under key {id} is for {}",
                    row.info.id
                )));
            }
            table.next_id = table.next_id.max(id.0.saturating_add(1));
            table.rows.insert(id, row);
        }
        for (key, value) in storage.scan(Table::Meta) {
            if key != NEXT_JOB_ID_KEY {
                continue;
            }
            let next = Decoder::new(&value, ROW_VERSION)
                .and_then(|mut d| {
                    let next = d.u32()?;
                    d.finish()?;
                    Ok(next)
                })
                .map_err(|e| GcsError::Corrupt {
                    table: Table::Meta,
                    reason: format!("next_job_id: {}", e.0),
                })?;
            table.next_id = table.next_id.max(next);
        }
        Ok(table)
    }
}

impl<S: Storage> Gcs<S> {
    /// Hands out a job id no job has used, also across recovery.
    ///
    /// # Panics
    /// After 2^32 - 1 job ids, which no cluster lives to see.
    pub fn next_job_id(&mut self) -> JobId {
        let id = JobId(self.jobs.next_id);
        self.jobs.next_id = id.0.checked_add(1).expect("fewer than 2^32 jobs");
        let mut e = Encoder::new(ROW_VERSION);
        e.u32(self.jobs.next_id);
        self.storage.put(Table::Meta, NEXT_JOB_ID_KEY, &e.finish());
        id
    }

    /// Adds a running job.
    ///
    /// # Errors
    /// [`GcsError::JobExists`] if the id is already in the table.
    pub fn add_job(&mut self, info: JobInfo) -> Result<(), GcsError> {
        let id = info.id;
        if self.jobs.rows.contains_key(&id) {
            return Err(GcsError::JobExists { job: id });
        }
        // Ids given by the caller must not be handed out again.
        self.jobs.next_id = self.jobs.next_id.max(id.0.saturating_add(1));
        self.jobs.rows.insert(
            id,
            JobRow {
                info,
                state: JobState::Running,
            },
        );
        self.write_job(id);
        Ok(())
    }

    /// Marks a job finished at `now` and kills its actors that are neither
    /// detached nor already dead (they become `Dead` with cause "job … finished"
    /// and release their names); returns those actors in id order. Finishing a
    /// finished job changes nothing and returns no actors.
    ///
    /// # Errors
    /// [`GcsError::JobNotFound`] if the job was never added.
    pub fn finish_job(&mut self, id: JobId, now: Duration) -> Result<Vec<ActorId>, GcsError> {
        let row = self
            .jobs
            .rows
            .get_mut(&id)
            .ok_or(GcsError::JobNotFound { job: id })?;
        if !row.is_running() {
            return Ok(Vec::new());
        }
        row.state = JobState::Finished { at: now };
        self.write_job(id);
        Ok(self.on_job_finished(id))
    }

    /// The row of job `id`.
    pub fn job(&self, id: JobId) -> Option<&JobRow> {
        self.jobs.rows.get(&id)
    }

    /// Every job, running or finished, in id order.
    pub fn jobs(&self) -> impl Iterator<Item = &JobRow> + '_ {
        self.jobs.rows.values()
    }

    fn write_job(&mut self, id: JobId) {
        let row = self.jobs.rows.get(&id).expect("caller just wrote the row");
        self.storage.put(Table::Jobs, &job_key(id), &row.encode());
        if self.pubsub.wants(Channel::Job) {
            self.pubsub.publish(GcsEvent::Job(row.clone()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(id: u32) -> JobInfo {
        JobInfo {
            id: JobId(id),
            driver: format!("driver-{id}"),
            started_at: Duration::from_secs(u64::from(id)),
        }
    }

    #[test]
    fn next_job_id_never_repeats_and_skips_added_ids() {
        let mut gcs = Gcs::in_memory();
        assert_eq!(gcs.next_job_id(), JobId(0));
        gcs.add_job(job(5)).unwrap();
        assert_eq!(gcs.next_job_id(), JobId(6));
        assert_eq!(gcs.next_job_id(), JobId(7));
    }

    #[test]
    fn next_job_id_survives_recovery_even_without_job_rows() {
        let mut gcs = Gcs::in_memory();
        gcs.next_job_id();
        gcs.next_job_id();
        let mut back = Gcs::recover(gcs.storage().clone(), Duration::ZERO).unwrap();
        assert_eq!(back.next_job_id(), JobId(2));
    }

    #[test]
    fn adding_a_job_twice_is_an_error() {
        let mut gcs = Gcs::in_memory();
        gcs.add_job(job(1)).unwrap();
        assert_eq!(
            gcs.add_job(job(1)),
            Err(GcsError::JobExists { job: JobId(1) })
        );
    }

    #[test]
    fn finish_job_records_the_end_time_once() {
        let mut gcs = Gcs::in_memory();
        gcs.add_job(job(1)).unwrap();
        assert!(gcs.job(JobId(1)).unwrap().is_running());
        gcs.finish_job(JobId(1), Duration::from_secs(9)).unwrap();
        gcs.finish_job(JobId(1), Duration::from_secs(20)).unwrap();
        assert_eq!(
            gcs.job(JobId(1)).unwrap().state,
            JobState::Finished {
                at: Duration::from_secs(9)
            }
        );
        assert_eq!(
            gcs.finish_job(JobId(2), Duration::ZERO),
            Err(GcsError::JobNotFound { job: JobId(2) })
        );
    }

    #[test]
    fn job_rows_round_trip_through_their_encoding() {
        let running = JobRow {
            info: job(3),
            state: JobState::Running,
        };
        let finished = JobRow {
            info: job(4),
            state: JobState::Finished {
                at: Duration::from_millis(1500),
            },
        };
        for row in [running, finished] {
            assert_eq!(JobRow::decode(&row.encode()).unwrap(), row);
        }
    }
}
