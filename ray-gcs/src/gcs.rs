//! The [`Gcs`] itself: the tables, their storage and the subscribers.

use std::time::Duration;

use crate::actors::ActorTable;
use crate::error::GcsError;
use crate::jobs::JobTable;
use crate::kv::KvTable;
use crate::nodes::{HealthConfig, NodeTable};
use crate::pubsub::{Channel, GcsEvent, PubSub, SubscriberId};
use crate::storage::{MemoryStorage, Storage};
use crate::workers::WorkerTable;

/// Settings of a [`Gcs`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GcsConfig {
    /// How node health is judged.
    pub health: HealthConfig,
    /// How many events a subscriber's queue holds before the oldest are dropped.
    pub subscriber_queue_capacity: usize,
}

impl Default for GcsConfig {
    /// A 10 s heartbeat timeout and 10 000 queued events per subscriber.
    fn default() -> Self {
        Self {
            health: HealthConfig::default(),
            subscriber_queue_capacity: 10_000,
        }
    }
}

/// The Global Control Store: node, job and actor tables, the internal KV, and
/// pub/sub of their changes, written through to a [`Storage`].
///
/// Every method runs to completion without I/O or waiting; time comes in as
/// `now`, a [`Duration`] since an epoch the caller picks (the process start,
/// say) and keeps for the life of this value.
///
/// ```
/// use std::time::Duration;
/// use ray_gcs::{Gcs, JobInfo};
///
/// let mut gcs = Gcs::in_memory();
/// let id = gcs.next_job_id();
/// gcs.add_job(JobInfo { id, driver: "main".into(), started_at: Duration::ZERO })?;
///
/// // After a restart, the same storage gives back the same tables.
/// let back = Gcs::recover(gcs.storage().clone(), Duration::from_secs(60))?;
/// assert_eq!(back.job(id), gcs.job(id));
/// # Ok::<(), ray_gcs::GcsError>(())
/// ```
#[derive(Debug)]
pub struct Gcs<S: Storage = MemoryStorage> {
    pub(crate) config: GcsConfig,
    pub(crate) storage: S,
    pub(crate) nodes: NodeTable,
    pub(crate) jobs: JobTable,
    pub(crate) actors: ActorTable,
    pub(crate) kv: KvTable,
    pub(crate) workers: WorkerTable,
    pub(crate) pubsub: PubSub,
}

impl Gcs<MemoryStorage> {
    /// An empty GCS in memory, with the default config.
    pub fn in_memory() -> Self {
        Self::new(MemoryStorage::new())
    }
}

impl<S: Storage> Gcs<S> {
    /// An empty GCS writing to `storage`, with the default config.
    ///
    /// `storage` should be empty: rows already in it are neither read nor
    /// removed. Use [`Gcs::recover`] to start from what a storage holds.
    pub fn new(storage: S) -> Self {
        Self::with_config(storage, GcsConfig::default())
    }

    /// An empty GCS writing to `storage` (which should be empty), with `config`.
    pub fn with_config(storage: S, config: GcsConfig) -> Self {
        Self {
            config,
            storage,
            nodes: NodeTable::default(),
            jobs: JobTable::default(),
            actors: ActorTable::default(),
            kv: KvTable::default(),
            workers: WorkerTable::default(),
            pubsub: PubSub::new(config.subscriber_queue_capacity),
        }
    }

    /// Rebuilds a GCS from the rows in `storage`, with the default config.
    ///
    /// Alive nodes count as having heartbeated at `now` (the stored rows do
    /// not carry heartbeat times), so each gets a full timeout to report in.
    /// Subscriptions are not recovered: subscribers subscribe again.
    ///
    /// # Errors
    /// [`GcsError::Corrupt`] if a row cannot be decoded or contradicts another.
    pub fn recover(storage: S, now: Duration) -> Result<Self, GcsError> {
        Self::recover_with_config(storage, GcsConfig::default(), now)
    }

    /// [`Gcs::recover`] with `config`.
    ///
    /// # Errors
    /// As [`Gcs::recover`].
    pub fn recover_with_config(
        storage: S,
        config: GcsConfig,
        now: Duration,
    ) -> Result<Self, GcsError> {
        let nodes = NodeTable::recover(&storage, now)?;
        let jobs = JobTable::recover(&storage)?;
        let actors = ActorTable::recover(&storage)?;
        let kv = KvTable::recover(&storage)?;
        let workers = WorkerTable::recover(&storage)?;
        Ok(Self {
            config,
            storage,
            nodes,
            jobs,
            actors,
            kv,
            workers,
            pubsub: PubSub::new(config.subscriber_queue_capacity),
        })
    }

    /// The settings this GCS runs with.
    pub fn config(&self) -> &GcsConfig {
        &self.config
    }

    /// The storage the tables are written to.
    pub fn storage(&self) -> &S {
        &self.storage
    }

    /// Gives the storage back, dropping the in-memory tables.
    pub fn into_storage(self) -> S {
        self.storage
    }

    /// Starts following `channel`: from now on every change on it is queued
    /// for the returned subscriber.
    pub fn subscribe(&mut self, channel: Channel) -> SubscriberId {
        self.pubsub.subscribe(channel)
    }

    /// Stops a subscription and drops its queue; returns whether it existed.
    pub fn unsubscribe(&mut self, sub: SubscriberId) -> bool {
        self.pubsub.unsubscribe(sub)
    }

    /// Takes the events queued for `sub`, oldest first; empty for an unknown
    /// subscriber.
    pub fn poll_events(&mut self, sub: SubscriberId) -> Vec<GcsEvent> {
        self.pubsub.poll(sub)
    }

    /// How many events `sub` has lost to its full queue since it subscribed
    /// (0 for an unknown subscriber). When it grows, re-read the tables.
    pub fn dropped(&self, sub: SubscriberId) -> u64 {
        self.pubsub.dropped(sub)
    }
}

#[cfg(test)]
mod tests {
    use ray_proto::{JobId, NodeId};

    use super::*;
    use crate::fixtures::{actor, actor_id, job, named, node};
    use crate::{ActorRow, ActorState, JobRow, NodeRow, Table};

    /// A GCS with something in every table and every kind of state.
    fn populated() -> Gcs {
        let mut gcs = Gcs::in_memory();
        for id in 1..=3 {
            gcs.register_node(node(id), Duration::from_secs(id))
                .unwrap();
        }
        gcs.mark_node_dead(NodeId(3), "drained").unwrap();
        gcs.next_job_id();
        gcs.add_job(job(1)).unwrap();
        gcs.add_job(job(2)).unwrap();
        gcs.register_actor(named(actor(1, 1), "ns", "alive"))
            .unwrap();
        gcs.set_actor_state(actor_id(1), ActorState::Alive { node: NodeId(1) })
            .unwrap();
        let mut restarting = named(actor(2, 2), "ns", "restarting");
        restarting.max_restarts = 4;
        restarting.detached = true;
        gcs.register_actor(restarting).unwrap();
        gcs.actor_failed(actor_id(2), "oops").unwrap();
        gcs.register_actor(named(actor(3, 2), "ns", "dead"))
            .unwrap();
        gcs.finish_job(JobId(2), Duration::from_secs(30)).unwrap();
        gcs.kv_put("fn", b"f1", b"code".to_vec(), false);
        gcs.kv_put("env", b"", Vec::new(), false);
        gcs
    }

    /// Every table's rows, for comparing two GCSs.
    #[derive(Debug, PartialEq)]
    struct Snapshot {
        nodes: Vec<NodeRow>,
        jobs: Vec<JobRow>,
        actors: Vec<ActorRow>,
        kv: Vec<(String, Vec<u8>, Vec<u8>)>,
    }

    fn snapshot(gcs: &Gcs) -> Snapshot {
        Snapshot {
            nodes: gcs.nodes().cloned().collect(),
            jobs: gcs.jobs().cloned().collect(),
            actors: gcs.actors().cloned().collect(),
            kv: gcs
                .kv_entries()
                .map(|(ns, k, v)| (ns.to_owned(), k.to_vec(), v.to_vec()))
                .collect(),
        }
    }

    #[test]
    fn recover_rebuilds_tables_from_storage() {
        let gcs = populated();
        let back = Gcs::recover(gcs.storage().clone(), Duration::from_secs(100)).unwrap();
        assert_eq!(snapshot(&back), snapshot(&gcs));
        assert_eq!(back.named_actor("ns", "alive"), Some(actor_id(1)));
        assert_eq!(back.named_actor("ns", "restarting"), Some(actor_id(2)));
        assert_eq!(back.named_actor("ns", "dead"), None);
        assert_eq!(back.restart_count(actor_id(2)), Some(1));
    }

    #[test]
    fn recovered_gcs_keeps_enforcing_the_rules() {
        let gcs = populated();
        let mut back = Gcs::recover(gcs.into_storage(), Duration::from_secs(100)).unwrap();
        assert!(matches!(
            back.register_actor(named(actor(9, 1), "ns", "alive")),
            Err(GcsError::NameTaken { .. })
        ));
        back.register_actor(named(actor(9, 1), "ns", "dead"))
            .unwrap();
        assert!(matches!(
            back.register_node(node(3), Duration::ZERO),
            Err(GcsError::NodeExists { .. })
        ));
        assert_eq!(back.next_job_id(), JobId(3));
        // Its writes go to the same storage, so it recovers in turn.
        let again = Gcs::recover(back.storage().clone(), Duration::ZERO).unwrap();
        assert_eq!(snapshot(&again), snapshot(&back));
    }

    #[test]
    fn corrupt_storage_row_is_an_error_not_a_panic() {
        let good = populated().into_storage();
        let node_row = good.scan(Table::Nodes)[0].clone();
        let actor_row = good.scan(Table::Actors)[0].clone();
        let cases: Vec<(Table, Vec<u8>, Vec<u8>)> = vec![
            (Table::Nodes, node_row.0.clone(), b"garbage".to_vec()),
            (
                Table::Nodes,
                node_row.0.clone(),
                node_row.1[..node_row.1.len() - 1].to_vec(),
            ),
            (Table::Nodes, node_row.0[..3].to_vec(), node_row.1.clone()),
            // A valid row under another node's key.
            (
                Table::Nodes,
                99u64.to_be_bytes().to_vec(),
                node_row.1.clone(),
            ),
            (Table::Jobs, vec![0, 0, 0, 1], Vec::new()),
            (
                Table::Actors,
                actor_row.0.clone(),
                [&actor_row.1[..], &[0]].concat(),
            ),
            (Table::Meta, b"next_job_id".to_vec(), vec![1, 2]),
            (Table::Kv, Vec::new(), Vec::new()),
        ];
        for (table, key, value) in cases {
            let mut storage = good.clone();
            storage.put(table, &key, &value);
            match Gcs::recover(storage, Duration::ZERO) {
                Err(GcsError::Corrupt { table: t, reason }) => {
                    assert_eq!(t, table, "{reason}");
                    assert!(!reason.is_empty());
                }
                other => panic!("{table} row {key:?} → {value:?} gave {other:?}"),
            }
        }
    }

    #[test]
    fn two_live_actors_with_one_name_in_storage_are_corrupt() {
        let mut gcs = Gcs::in_memory();
        gcs.add_job(job(1)).unwrap();
        gcs.register_actor(named(actor(1, 1), "ns", "x")).unwrap();
        gcs.register_actor(named(actor(2, 1), "ns", "y")).unwrap();
        // Rewrite actor 2's row as if it had been registered under "x" too.
        let mut other = Gcs::in_memory();
        other.add_job(job(1)).unwrap();
        other.register_actor(named(actor(2, 1), "ns", "x")).unwrap();
        let mut storage = gcs.into_storage();
        for (key, value) in other.storage().scan(Table::Actors) {
            storage.put(Table::Actors, &key, &value);
        }
        let err = Gcs::recover(storage, Duration::ZERO).unwrap_err();
        assert!(
            matches!(
                err,
                GcsError::Corrupt {
                    table: Table::Actors,
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn recover_from_empty_storage_is_an_empty_gcs() {
        let gcs = Gcs::recover(MemoryStorage::new(), Duration::ZERO).unwrap();
        assert_eq!(
            gcs.nodes().count() + gcs.jobs().count() + gcs.actors().count(),
            0
        );
        assert_eq!(gcs.kv_entries().count(), 0);
    }
}
