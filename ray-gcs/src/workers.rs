//! The worker table: where each worker process and driver of a job listens.
//!
//! Worker ids are handed out here and never reused, also across recovery:
//! an id names one process for the life of the cluster, so an object or
//! actor id that embeds it (its owner) can never be mistaken for another's.

use std::collections::BTreeMap;

use ray_proto::{JobId, NodeId, WorkerId};

use crate::codec::{key_array, DecodeError, Decoder, Encoder};
use crate::error::GcsError;
use crate::storage::{Storage, Table};
use crate::Gcs;

const ROW_VERSION: u8 = 1;
const NEXT_WORKER_ID_KEY: &[u8] = b"next_worker_id";

/// The first worker id handed out; lower ids are left to embedded runtimes,
/// which pick their own.
const FIRST_WORKER_ID: u64 = 1;

/// What a worker or driver registers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerInfo {
    /// The job whose code it runs.
    pub job: JobId,
    /// The node that started it; `None` for a driver, which runs outside
    /// any node daemon's control.
    pub node: Option<NodeId>,
    /// Where it accepts connections (`host:port`).
    pub address: String,
}

/// A row of the worker table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerRow {
    /// The id the GCS gave it.
    pub id: WorkerId,
    /// What it registered.
    pub info: WorkerInfo,
}

impl WorkerRow {
    fn encode(&self) -> Vec<u8> {
        let mut e = Encoder::new(ROW_VERSION);
        e.u64(self.id.0).u32(self.info.job.0);
        match self.info.node {
            None => e.u8(0),
            Some(node) => e.u8(1).u64(node.0),
        };
        e.str(&self.info.address);
        e.finish()
    }

    fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut d = Decoder::new(bytes, ROW_VERSION)?;
        let id = WorkerId(d.u64()?);
        let job = JobId(d.u32()?);
        let node = match d.u8()? {
            0 => None,
            1 => Some(NodeId(d.u64()?)),
            t => return Err(DecodeError::new(format!("invalid node tag {t}"))),
        };
        let address = d.string()?;
        d.finish()?;
        Ok(Self {
            id,
            info: WorkerInfo { job, node, address },
        })
    }
}

fn worker_key(id: WorkerId) -> [u8; 8] {
    id.0.to_be_bytes()
}

/// The worker rows and the worker id counter.
#[derive(Debug)]
pub(crate) struct WorkerTable {
    rows: BTreeMap<WorkerId, WorkerRow>,
    /// The next id [`Gcs::register_worker`] hands out; above every known id.
    next_id: u64,
}

impl Default for WorkerTable {
    fn default() -> Self {
        Self {
            rows: BTreeMap::new(),
            next_id: FIRST_WORKER_ID,
        }
    }
}

impl WorkerTable {
    /// Rebuilds the table from the `Workers` and `Meta` tables of a storage.
    pub(crate) fn recover(storage: &impl Storage) -> Result<Self, GcsError> {
        let corrupt = |reason: String| GcsError::Corrupt {
            table: Table::Workers,
            reason,
        };
        let mut table = WorkerTable::default();
        for (key, value) in storage.scan(Table::Workers) {
            let id = key_array::<8>(&key)
                .map(|k| WorkerId(u64::from_be_bytes(k)))
                .map_err(|e| corrupt(e.0))?;
            let row = WorkerRow::decode(&value).map_err(|e| corrupt(format!("{id}: {}", e.0)))?;
            if row.id != id {
                return Err(corrupt(format!("row under key {id} is for {}", row.id)));
            }
            table.next_id = table.next_id.max(id.0.saturating_add(1));
            table.rows.insert(id, row);
        }
        for (key, value) in storage.scan(Table::Meta) {
            if key != NEXT_WORKER_ID_KEY {
                continue;
            }
            let next = Decoder::new(&value, ROW_VERSION)
                .and_then(|mut d| {
                    let next = d.u64()?;
                    d.finish()?;
                    Ok(next)
                })
                .map_err(|e| GcsError::Corrupt {
                    table: Table::Meta,
                    reason: format!("next_worker_id: {}", e.0),
                })?;
            table.next_id = table.next_id.max(next);
        }
        Ok(table)
    }
}

impl<S: Storage> Gcs<S> {
    /// Registers a worker (or driver) of a running job under a fresh id,
    /// which no worker has had and none will get, also across recovery.
    ///
    /// # Errors
    /// [`GcsError::JobNotFound`] or [`GcsError::JobFinished`] unless `job`
    /// is running.
    ///
    /// # Panics
    /// After 2^64 - 1 worker ids, which no cluster lives to see.
    pub fn register_worker(&mut self, info: WorkerInfo) -> Result<WorkerId, GcsError> {
        match self.job(info.job) {
            None => return Err(GcsError::JobNotFound { job: info.job }),
            Some(job) if !job.is_running() => return Err(GcsError::JobFinished { job: info.job }),
            Some(_) => {}
        }
        let id = WorkerId(self.workers.next_id);
        self.workers.next_id = id.0.checked_add(1).expect("fewer than 2^64 workers");
        let mut e = Encoder::new(ROW_VERSION);
        e.u64(self.workers.next_id);
        self.storage
            .put(Table::Meta, NEXT_WORKER_ID_KEY, &e.finish());
        let row = WorkerRow { id, info };
        self.storage
            .put(Table::Workers, &worker_key(id), &row.encode());
        self.workers.rows.insert(id, row);
        Ok(id)
    }

    /// The row of worker `id`.
    pub fn worker(&self, id: WorkerId) -> Option<&WorkerRow> {
        self.workers.rows.get(&id)
    }

    /// Every registered worker, in id order.
    pub fn workers(&self) -> impl Iterator<Item = &WorkerRow> + '_ {
        self.workers.rows.values()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::fixtures::job;

    fn info(job: u32, node: Option<u64>) -> WorkerInfo {
        WorkerInfo {
            job: JobId(job),
            node: node.map(NodeId),
            address: format!("10.0.0.1:{}", 9000 + job),
        }
    }

    #[test]
    fn worker_ids_are_fresh_and_never_reused_across_recovery() {
        let mut gcs = Gcs::in_memory();
        gcs.add_job(job(1)).unwrap();
        let driver = gcs.register_worker(info(1, None)).unwrap();
        let worker = gcs.register_worker(info(1, Some(2))).unwrap();
        assert_eq!(driver, WorkerId(FIRST_WORKER_ID));
        assert_ne!(driver, worker);
        assert_eq!(gcs.worker(worker).unwrap().info, info(1, Some(2)));

        let mut back = Gcs::recover(gcs.storage().clone(), Duration::ZERO).unwrap();
        assert!(back.workers().eq(gcs.workers()));
        let next = back.register_worker(info(1, Some(3))).unwrap();
        assert!(next > worker, "{next} reuses an id at or below {worker}");
    }

    #[test]
    fn only_a_running_job_registers_workers() {
        let mut gcs = Gcs::in_memory();
        assert_eq!(
            gcs.register_worker(info(4, None)),
            Err(GcsError::JobNotFound { job: JobId(4) })
        );
        gcs.add_job(job(4)).unwrap();
        gcs.finish_job(JobId(4), Duration::from_secs(2)).unwrap();
        assert_eq!(
            gcs.register_worker(info(4, None)),
            Err(GcsError::JobFinished { job: JobId(4) })
        );
        assert_eq!(gcs.workers().count(), 0);
    }

    #[test]
    fn worker_rows_round_trip_and_bad_rows_are_corrupt() {
        for row in [
            WorkerRow {
                id: WorkerId(7),
                info: info(1, None),
            },
            WorkerRow {
                id: WorkerId(u64::MAX),
                info: info(2, Some(5)),
            },
        ] {
            assert_eq!(WorkerRow::decode(&row.encode()).unwrap(), row);
        }

        let mut gcs = Gcs::in_memory();
        gcs.add_job(job(1)).unwrap();
        let id = gcs.register_worker(info(1, None)).unwrap();
        let good = gcs.into_storage();
        let row = good.scan(Table::Workers)[0].1.clone();
        let cases = [
            (
                Table::Workers,
                worker_key(id).to_vec(),
                row[..row.len() - 1].to_vec(),
            ),
            (Table::Workers, worker_key(WorkerId(99)).to_vec(), row),
            (Table::Meta, NEXT_WORKER_ID_KEY.to_vec(), vec![1, 2]),
        ];
        for (table, key, value) in cases {
            let mut storage = good.clone();
            storage.put(table, &key, &value);
            assert!(
                matches!(
                    Gcs::recover(storage, Duration::ZERO),
                    Err(GcsError::Corrupt { table: t, .. }) if t == table
                ),
                "{table} {key:?}"
            );
        }
    }
}
