//! Properties of recovery: whatever a GCS did, a GCS recovered from its
//! storage has the same tables; and no bytes in storage make recovery panic.

use std::collections::BTreeMap;
use std::time::Duration;

use proptest::prelude::*;
use ray_gcs::{ActorInfo, ActorState, Gcs, JobInfo, MemoryStorage, NodeInfo, Storage, Table};
use ray_proto::{ActorId, JobId, NodeId, WorkerId};
use ray_sched::{Quantity, ResourceSet};

#[derive(Clone, Debug)]
enum Op {
    RegisterNode(u64, u64),
    KillNode(u64),
    AddJob(u32),
    FinishJob(u32),
    RegisterActor {
        seq: u64,
        job: u32,
        name: Option<u8>,
        detached: bool,
        max_restarts: u32,
    },
    PlaceActor(u64, u64),
    FailActor(u64),
    KillActor(u64),
    KvPut(u8, Vec<u8>, Vec<u8>, bool),
    KvDel(u8, Vec<u8>),
}

fn op() -> impl Strategy<Value = Op> {
    let key = prop::collection::vec(0..4u8, 0..3);
    prop_oneof![
        (0..4u64, 0..10_000u64).prop_map(|(n, cpu)| Op::RegisterNode(n, cpu)),
        (0..4u64).prop_map(Op::KillNode),
        (0..3u32).prop_map(Op::AddJob),
        (0..3u32).prop_map(Op::FinishJob),
        (
            0..6u64,
            0..3u32,
            prop::option::of(0..3u8),
            any::<bool>(),
            0..3u32
        )
            .prop_map(
                |(seq, job, name, detached, max_restarts)| Op::RegisterActor {
                    seq,
                    job,
                    name,
                    detached,
                    max_restarts
                }
            ),
        (0..6u64, 0..4u64).prop_map(|(a, n)| Op::PlaceActor(a, n)),
        (0..6u64).prop_map(Op::FailActor),
        (0..6u64).prop_map(Op::KillActor),
        (
            0..2u8,
            key.clone(),
            prop::collection::vec(any::<u8>(), 0..4),
            any::<bool>()
        )
            .prop_map(|(ns, k, v, o)| Op::KvPut(ns, k, v, o)),
        (0..2u8, key).prop_map(|(ns, k)| Op::KvDel(ns, k)),
    ]
}

fn actor(seq: u64) -> ActorId {
    ActorId::new(WorkerId(1), seq)
}

/// Applies `op`, ignoring refusals: only the resulting tables matter here.
fn apply(gcs: &mut Gcs, op: Op, now: Duration) {
    match op {
        Op::RegisterNode(n, cpu) => {
            let info = NodeInfo {
                id: NodeId(n),
                address: format!("n{n}"),
                resources: ResourceSet::cpu(Quantity::from_raw(cpu)).with("x", Quantity::ONE),
                labels: BTreeMap::from([("k".to_owned(), n.to_string())]),
            };
            let _ = gcs.register_node(info, now);
        }
        Op::KillNode(n) => {
            let _ = gcs.mark_node_dead(NodeId(n), "killed");
        }
        Op::AddJob(j) => {
            let _ = gcs.add_job(JobInfo {
                id: JobId(j),
                driver: "d".into(),
                started_at: now,
            });
        }
        Op::FinishJob(j) => {
            let _ = gcs.finish_job(JobId(j), now);
        }
        Op::RegisterActor {
            seq,
            job,
            name,
            detached,
            max_restarts,
        } => {
            let _ = gcs.register_actor(ActorInfo {
                id: actor(seq),
                class_name: "A".into(),
                name: name.map(|n| format!("a{n}")),
                namespace: "ns".into(),
                job: JobId(job),
                detached,
                max_restarts,
            });
        }
        Op::PlaceActor(a, n) => {
            let _ = gcs.set_actor_state(actor(a), ActorState::Alive { node: NodeId(n) });
        }
        Op::FailActor(a) => {
            let _ = gcs.actor_failed(actor(a), "failed");
        }
        Op::KillActor(a) => {
            let _ = gcs.set_actor_state(
                actor(a),
                ActorState::Dead {
                    cause: "killed".into(),
                },
            );
        }
        Op::KvPut(ns, k, v, overwrite) => {
            gcs.kv_put(&ns.to_string(), &k, v, overwrite);
        }
        Op::KvDel(ns, k) => {
            gcs.kv_del(&ns.to_string(), &k);
        }
    }
}

fn table(table: u8) -> Table {
    Table::ALL[usize::from(table) % Table::ALL.len()]
}

proptest! {
    #[test]
    fn recovered_gcs_has_the_same_tables(ops in prop::collection::vec(op(), 0..60)) {
        let mut gcs = Gcs::in_memory();
        for (i, op) in ops.into_iter().enumerate() {
            apply(&mut gcs, op, Duration::from_millis(i as u64));
        }
        let back = Gcs::recover(gcs.storage().clone(), Duration::from_secs(1)).unwrap();
        prop_assert!(back.nodes().eq(gcs.nodes()));
        prop_assert!(back.jobs().eq(gcs.jobs()));
        prop_assert!(back.actors().eq(gcs.actors()));
        prop_assert!(back.kv_entries().eq(gcs.kv_entries()));
        for row in gcs.actors() {
            if let Some(name) = &row.info.name {
                prop_assert_eq!(
                    back.named_actor(&row.info.namespace, name),
                    gcs.named_actor(&row.info.namespace, name)
                );
            }
        }
    }

    #[test]
    fn arbitrary_storage_bytes_never_panic_recovery(
        rows in prop::collection::vec(
            (any::<u8>(), prop::collection::vec(any::<u8>(), 0..20), prop::collection::vec(any::<u8>(), 0..80)),
            0..8,
        )
    ) {
        let mut storage = MemoryStorage::new();
        for (t, key, value) in rows {
            storage.put(table(t), &key, &value);
        }
        // Ok or Err(Corrupt), whichever: reaching here without a panic is the point.
        let _ = Gcs::recover(storage, Duration::ZERO);
    }

    #[test]
    fn flipped_bytes_in_real_rows_never_panic_recovery(
        ops in prop::collection::vec(op(), 1..30),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<prop::sample::Index>(), any::<u8>()), 1..4),
    ) {
        let mut gcs = Gcs::in_memory();
        for op in ops {
            apply(&mut gcs, op, Duration::ZERO);
        }
        let mut storage = gcs.into_storage();
        let rows: Vec<(Table, Vec<u8>, Vec<u8>)> = Table::ALL
            .iter()
            .flat_map(|&t| storage.scan(t).into_iter().map(move |(k, v)| (t, k, v)))
            .collect();
        if rows.is_empty() {
            return Ok(());
        }
        for (row, byte, value) in flips {
            let (t, key, mut v) = row.get(&rows).clone();
            if v.is_empty() {
                continue;
            }
            let i = byte.index(v.len());
            v[i] ^= value;
            storage.put(t, &key, &v);
        }
        let _ = Gcs::recover(storage, Duration::ZERO);
    }
}
