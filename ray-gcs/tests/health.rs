//! Property: node health follows heartbeats exactly.
//!
//! Random sequences of registrations, heartbeats (some arriving late), clock
//! advances and health checks. A health check must declare dead exactly the
//! alive nodes silent for more than the timeout, not counting the judge's
//! own stalls (checks further apart than two check periods): never one that
//! heartbeated within the timeout, and never leave alive one that did not.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use proptest::prelude::*;
use ray_gcs::{Gcs, GcsConfig, GcsError, HealthConfig, NodeInfo};
use ray_proto::NodeId;
use ray_sched::ResourceSet;

const TIMEOUT: Duration = Duration::from_millis(1_000);
const CHECK_EVERY: Duration = Duration::from_millis(100);

#[derive(Clone, Debug)]
enum Op {
    Register(u64),
    /// A heartbeat from a node, sent `lag_ms` before it is processed.
    Heartbeat {
        node: u64,
        lag_ms: u64,
    },
    Advance(u64),
    Check,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..6u64).prop_map(Op::Register),
        (0..6u64, prop_oneof![Just(0u64), 0..1_500u64])
            .prop_map(|(node, lag_ms)| Op::Heartbeat { node, lag_ms }),
        prop_oneof![0..200u64, 900..1_100u64, 0..3_000u64].prop_map(Op::Advance),
        Just(Op::Check),
    ]
}

fn info(id: u64) -> NodeInfo {
    NodeInfo {
        id: NodeId(id),
        address: format!("n{id}"),
        resources: ResourceSet::new(),
        labels: BTreeMap::new(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn health_checks_kill_exactly_the_silent_nodes(ops in prop::collection::vec(op(), 1..80)) {
        let health = HealthConfig { timeout: TIMEOUT, check_every: Some(CHECK_EVERY) };
        let config = GcsConfig { health, ..GcsConfig::default() };
        let mut gcs = Gcs::with_config(ray_gcs::MemoryStorage::new(), config);
        let mut now = Duration::ZERO;
        // Model: the judge's summed stalls and its last check; the last
        // heartbeat of each alive node with the stalls summed then; the
        // dead nodes.
        let mut stalled = Duration::ZERO;
        let mut last_check: Option<Duration> = None;
        let mut alive: BTreeMap<NodeId, (Duration, Duration)> = BTreeMap::new();
        let mut dead: BTreeSet<NodeId> = BTreeSet::new();

        for op in ops {
            match op {
                Op::Register(n) => {
                    let id = NodeId(n);
                    let known = alive.contains_key(&id) || dead.contains(&id);
                    let res = gcs.register_node(info(n), now);
                    if known {
                        prop_assert_eq!(res, Err(GcsError::NodeExists { node: id }));
                    } else {
                        prop_assert_eq!(res, Ok(()));
                        alive.insert(id, (now, stalled));
                    }
                }
                Op::Heartbeat { node, lag_ms } => {
                    let id = NodeId(node);
                    let at = now.saturating_sub(Duration::from_millis(lag_ms));
                    let res = gcs.heartbeat(id, at);
                    if let Some(last) = alive.get_mut(&id) {
                        prop_assert_eq!(res, Ok(()));
                        if at > last.0 {
                            *last = (at, stalled);
                        }
                    } else if dead.contains(&id) {
                        let is_node_dead = matches!(res, Err(GcsError::NodeDead { .. }));
                        prop_assert!(is_node_dead);
                    } else {
                        prop_assert_eq!(res, Err(GcsError::NodeNotFound { node: id }));
                    }
                }
                Op::Advance(ms) => now += Duration::from_millis(ms),
                Op::Check => {
                    let reported = gcs.check_health(now);
                    if let Some(prev) = last_check {
                        if now - prev > CHECK_EVERY * 2 {
                            stalled += now - prev - CHECK_EVERY;
                        }
                    }
                    last_check = Some(now);
                    let expected: Vec<NodeId> = alive
                        .iter()
                        .filter(|(_, &(last, then))| {
                            (now - last).saturating_sub(stalled - then) > TIMEOUT
                        })
                        .map(|(&id, _)| id)
                        .collect();
                    // Never dead within the timeout, never alive past it.
                    prop_assert_eq!(&reported, &expected);
                    for id in reported {
                        alive.remove(&id);
                        dead.insert(id);
                    }
                }
            }
            // The GCS's view agrees with the model after every step.
            let gcs_alive: Vec<NodeId> = gcs.alive_nodes().map(|r| r.info.id).collect();
            let model_alive: Vec<NodeId> = alive.keys().copied().collect();
            prop_assert_eq!(gcs_alive, model_alive);
            for (&id, &(last, _)) in &alive {
                prop_assert_eq!(gcs.last_heartbeat(id), Some(last));
            }
        }
    }
}
