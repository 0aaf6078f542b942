//! The store's accounting against a model: random puts and deletes never
//! exceed the capacity, and `used_bytes` is always the sum of live sizes.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use ray_proto::{ObjectId, WorkerId};
use ray_store::{ObjectBuffer, ObjectStore, StoreConfig, StoreError, StoreStats};

#[derive(Debug, Clone)]
enum Op {
    Put { seq: u64, len: usize },
    Delete { seq: u64 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..16u64, 0..400usize).prop_map(|(seq, len)| Op::Put { seq, len }),
        2 => (0..16u64).prop_map(|seq| Op::Delete { seq }),
    ]
}

fn oid(seq: u64) -> ObjectId {
    ObjectId::new(WorkerId(9), seq)
}

proptest! {
    #[test]
    fn random_puts_and_deletes_keep_accounting_exact(
        capacity in 0..1_000u64,
        ops in proptest::collection::vec(op(), 0..200),
    ) {
        let store = ObjectStore::new(StoreConfig { capacity_bytes: capacity });
        let mut live: HashMap<u64, usize> = HashMap::new();
        for op in ops {
            match op {
                Op::Put { seq, len } => {
                    let used: u64 = live.values().map(|&l| l as u64).sum();
                    let expected = if len as u64 > capacity {
                        Err(StoreError::TooLarge { id: oid(seq), size: len as u64, capacity })
                    } else if live.contains_key(&seq) {
                        Err(StoreError::AlreadyExists { id: oid(seq) })
                    } else if used + len as u64 > capacity {
                        Err(StoreError::Full { id: oid(seq), requested: len as u64, used, capacity })
                    } else {
                        Ok(())
                    };
                    let buf = ObjectBuffer::copy_from_slice(&vec![seq as u8; len]);
                    prop_assert_eq!(store.try_put(oid(seq), buf), expected.clone());
                    if expected.is_ok() {
                        live.insert(seq, len);
                    }
                }
                Op::Delete { seq } => {
                    prop_assert_eq!(store.delete(oid(seq)), live.remove(&seq).is_some());
                }
            }
            let stats = store.stats();
            prop_assert!(stats.used_bytes <= capacity);
            prop_assert_eq!(stats, StoreStats {
                used_bytes: live.values().map(|&l| l as u64).sum(),
                capacity_bytes: capacity,
                num_objects: live.len(),
            });
            for (&seq, &len) in &live {
                let buf = store.get(oid(seq)).expect("live object is stored");
                prop_assert_eq!(buf.len(), len);
                prop_assert!(buf.iter().all(|&b| b == seq as u8));
            }
        }
        for seq in live.keys() {
            prop_assert!(store.delete(oid(*seq)));
        }
        prop_assert_eq!(store.stats().used_bytes, 0);
        prop_assert_eq!(store.stats().num_objects, 0);
    }
}

/// Tasks on several worker threads put (waiting for space) and delete their
/// own objects; the accounting must stay within capacity and end at zero.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_puts_and_deletes_keep_accounting_exact() {
    const CAPACITY: u64 = 1_000;
    const TASKS: u64 = 8;
    const ROUNDS: u64 = 200;
    let store = Arc::new(ObjectStore::new(StoreConfig {
        capacity_bytes: CAPACITY,
    }));

    let done = Arc::new(AtomicBool::new(false));
    let monitor = tokio::spawn({
        let store = store.clone();
        let done = done.clone();
        async move {
            let mut max_used = 0;
            while !done.load(Ordering::Acquire) {
                let stats = store.stats();
                assert!(stats.used_bytes <= CAPACITY, "{stats:?}");
                max_used = max_used.max(stats.used_bytes);
                tokio::task::yield_now().await;
            }
            max_used
        }
    });

    let tasks: Vec<_> = (0..TASKS)
        .map(|task| {
            let store = store.clone();
            tokio::spawn(async move {
                // A per-task LCG: deterministic sizes without a dependency.
                let mut x = task.wrapping_mul(6364136223846793005).wrapping_add(1);
                let mut kept = Vec::new();
                for round in 0..ROUNDS {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let len = 1 + (x >> 33) % 300;
                    let id = ObjectId::new(WorkerId(task), round);
                    // A task holds nothing while it waits, so some holder
                    // always deletes and every put eventually fits.
                    store
                        .put(
                            id,
                            ObjectBuffer::copy_from_slice(&vec![task as u8; len as usize]),
                            Duration::from_secs(60),
                        )
                        .await
                        .expect("space is freed by the other tasks");
                    tokio::task::yield_now().await;
                    let pinned = store.get(id).expect("own object is stored");
                    assert!(store.delete(id));
                    assert!(pinned.iter().all(|&b| b == task as u8));
                    // Every tenth object stays, briefly, to mix in other ids.
                    if round % 10 == 0
                        && store
                            .try_put(
                                ObjectId::new(WorkerId(task), ROUNDS + round),
                                ObjectBuffer::copy_from_slice(&[1; 7]),
                            )
                            .is_ok()
                    {
                        kept.push(ObjectId::new(WorkerId(task), ROUNDS + round));
                    }
                    if kept.len() > 2 {
                        assert!(store.delete(kept.remove(0)));
                    }
                }
                kept
            })
        })
        .collect();

    let mut kept = Vec::new();
    for t in tasks {
        kept.extend(t.await.expect("task panicked"));
    }
    let stats = store.stats();
    assert_eq!(stats.num_objects, kept.len());
    assert_eq!(stats.used_bytes, 7 * kept.len() as u64);
    for id in kept {
        assert!(store.delete(id));
    }
    assert_eq!(store.stats().used_bytes, 0);
    assert_eq!(store.stats().num_objects, 0);
    done.store(true, Ordering::Release);
    let max_used = monitor.await.expect("monitor panicked");
    assert!(max_used > 0, "the monitor saw the store in use");
}
