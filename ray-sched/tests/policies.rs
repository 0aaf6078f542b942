//! Property tests of the placement policies and of the cluster view's
//! utilization index: a placed request fits where it is placed now,
//! `Infeasible` means no node could ever hold it, `Wait` that one could
//! but none can now, and the same seed gives the same decisions.

use std::collections::BTreeMap;

use proptest::prelude::*;
use ray_proto::NodeId;
use ray_sched::{
    ClusterView, Decision, HybridConfig, HybridPolicy, LocalityPolicy, NodeAffinityPolicy,
    NodeResources, NodeUpdate, Policy, Quantity, Request, ResourceSet, SchedulingStrategy,
    SpreadPolicy, CPU, GPU,
};

/// Amounts in halves: small enough that fits and misfits both happen often.
fn halves(max: u64) -> impl Strategy<Value = Quantity> {
    (0..=max * 2).prop_map(|h| Quantity::from_raw(h * Quantity::SCALE / 2))
}

fn resource_set() -> impl Strategy<Value = ResourceSet> {
    (halves(6), halves(2), prop::option::weighted(0.2, halves(2))).prop_map(|(cpu, gpu, tpu)| {
        let set = ResourceSet::cpu(cpu).with(GPU, gpu);
        match tpu {
            Some(q) => set.with("tpu", q),
            None => set,
        }
    })
}

/// A node: its id (from a small range so views and requests collide), its
/// total, and what is used of it (as acquired, so maybe less).
fn node() -> impl Strategy<Value = (u64, ResourceSet, ResourceSet)> {
    (0..12u64, resource_set(), resource_set())
}

fn view_from(nodes: &[(u64, ResourceSet, ResourceSet)]) -> ClusterView {
    let mut view = ClusterView::new();
    for (id, total, used) in nodes {
        if view.add_node(NodeId(*id), total.clone(), BTreeMap::new()) {
            // Often does not fit: the node then stays emptier.
            view.try_acquire(NodeId(*id), used);
        }
    }
    view
}

fn strategy() -> impl Strategy<Value = SchedulingStrategy> {
    prop_oneof![
        Just(SchedulingStrategy::Default),
        Just(SchedulingStrategy::Spread),
        (0..14u64, any::<bool>()).prop_map(|(node, soft)| SchedulingStrategy::NodeAffinity {
            node: NodeId(node),
            soft
        }),
        Just(SchedulingStrategy::Locality),
    ]
}

fn policy_for(strategy: &SchedulingStrategy, seed: u64) -> Box<dyn Policy> {
    let hybrid = HybridPolicy::new(HybridConfig {
        seed,
        top_k: 3,
        ..HybridConfig::default()
    });
    match strategy {
        SchedulingStrategy::Spread => Box::new(SpreadPolicy::new()),
        SchedulingStrategy::NodeAffinity { .. } => Box::new(NodeAffinityPolicy::new(hybrid)),
        SchedulingStrategy::Locality => Box::new(LocalityPolicy::new(hybrid)),
        _ => Box::new(hybrid),
    }
}

/// Utilization computed from scratch, as `NodeView::utilization` defines it.
fn utilization_of(resources: &NodeResources) -> u32 {
    resources
        .total()
        .iter()
        .map(|(name, total)| {
            let used = resources.used().get(name).raw().min(total.raw());
            (used as u128 * 10_000 / total.raw() as u128) as u32
        })
        .max()
        .unwrap_or(0)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn decisions_place_only_where_it_fits_now_and_tell_wait_from_infeasible(
        nodes in prop::collection::vec(node(), 0..10),
        requests in prop::collection::vec(
            (resource_set(), strategy(), 0..14u64, prop::collection::vec((0..14u64, 0..1_000u64), 0..4)),
            1..8,
        ),
        seed in any::<u64>(),
    ) {
        let view = view_from(&nodes);
        for (resources, strategy, local, arg_bytes) in &requests {
            let arg_bytes: Vec<_> = arg_bytes.iter().map(|&(n, b)| (NodeId(n), b)).collect();
            let req = Request {
                resources,
                strategy,
                local: NodeId(*local),
                arg_bytes: &arg_bytes,
            };
            let decision = policy_for(strategy, seed).decide(&req, &view);
            let fits_now = view.nodes().iter().any(|n| n.resources().can_acquire(resources));
            let feasible = view.nodes().iter().any(|n| n.resources().is_feasible(resources));
            match strategy {
                SchedulingStrategy::NodeAffinity { node, soft: false } => {
                    let target = view.node(*node).map(|n| n.resources());
                    let expected = match target {
                        Some(t) if t.can_acquire(resources) => Decision::Node(*node),
                        Some(t) if t.is_feasible(resources) => Decision::Wait,
                        _ => {
                            prop_assert!(matches!(decision, Decision::Infeasible(_)), "{decision:?}");
                            continue;
                        }
                    };
                    prop_assert_eq!(decision, expected);
                }
                _ => match decision {
                    Decision::Node(n) => {
                        let node = view.node(n);
                        prop_assert!(node.is_some(), "placed on unknown {n:?}");
                        prop_assert!(node.is_some_and(|n| n.resources().can_acquire(resources)));
                    }
                    // Nothing that fits somewhere now is left waiting.
                    Decision::Wait => prop_assert!(feasible && !fits_now),
                    Decision::Infeasible(report) => {
                        prop_assert!(!feasible);
                        prop_assert_eq!(&report.request, resources);
                        prop_assert_eq!(report.cluster, view.summary());
                    }
                },
            }
        }
    }

    #[test]
    fn the_same_seed_and_inputs_give_the_same_decisions(
        nodes in prop::collection::vec(node(), 1..10),
        requests in prop::collection::vec((resource_set(), strategy(), 0..14u64), 1..40),
        seed in any::<u64>(),
    ) {
        let run = || {
            let mut view = view_from(&nodes);
            let mut policies: Vec<(SchedulingStrategy, Box<dyn Policy>)> = Vec::new();
            let mut decisions = Vec::new();
            for (resources, strategy, local) in &requests {
                let at = match policies.iter().position(|(s, _)| s == strategy) {
                    Some(at) => at,
                    None => {
                        policies.push((strategy.clone(), policy_for(strategy, seed)));
                        policies.len() - 1
                    }
                };
                let req = Request { resources, strategy, local: NodeId(*local), arg_bytes: &[] };
                let decision = policies[at].1.decide(&req, &view);
                if let Decision::Node(n) = decision {
                    assert!(view.try_acquire(n, resources), "a placed request fits");
                }
                decisions.push(decision);
            }
            decisions
        };
        prop_assert_eq!(run(), run());
    }

    #[test]
    fn utilization_index_agrees_with_a_full_scan_after_any_changes(
        ops in prop::collection::vec((0..6u8, 0..8u64, resource_set(), 0..4u64), 0..60),
    ) {
        let mut view = ClusterView::new();
        for (op, id, set, version_step) in ops {
            let node = NodeId(id);
            match op {
                0 => {
                    view.add_node(node, set.with(CPU, Quantity::from_units(4)), BTreeMap::new());
                }
                1 => {
                    view.remove_node(node);
                }
                2 => {
                    view.try_acquire(node, &set);
                }
                3 => view.acquire_forced(node, &set),
                4 => view.release(node, &set),
                _ => {
                    let version = view.node(node).map_or(0, |n| n.version()) + version_step;
                    view.apply_update(&NodeUpdate { node, version, used: set });
                }
            }
            let mut expected: Vec<(u32, NodeId)> = view
                .nodes()
                .iter()
                .map(|n| (utilization_of(n.resources()), n.id()))
                .collect();
            expected.sort_unstable();
            let indexed: Vec<(u32, NodeId)> = view
                .nodes_by_utilization()
                .map(|n| (n.utilization(), n.id()))
                .collect();
            prop_assert_eq!(indexed, expected);
        }
    }
}
