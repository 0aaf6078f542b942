use std::collections::BTreeMap;

use ray_proto::{NodeId, PlacementGroupId, TaskId, WorkerId};

use super::*;
use crate::quantity::Quantity;
use crate::resources::GPU;

fn cpus(x: f64) -> ResourceSet {
    ResourceSet::cpu(Quantity::from_f64(x).unwrap())
}

fn view_of(totals: &[ResourceSet]) -> ClusterView {
    let mut v = ClusterView::new();
    for (i, t) in totals.iter().enumerate() {
        v.add_node(NodeId(i as u64 + 1), t.clone(), BTreeMap::new());
    }
    v
}

fn sched(id: u64, view: &ClusterView) -> NodeScheduler<u64> {
    NodeScheduler::new(NodeId(id), view.clone(), Policies::standard(id))
}

fn task(seq: u64, resources: ResourceSet, strategy: SchedulingStrategy) -> Task<u64> {
    Task::new(TaskId::new(WorkerId(0), seq), resources, strategy, seq)
}

fn actions(s: &mut NodeScheduler<u64>) -> Vec<Action<u64>> {
    std::iter::from_fn(|| s.poll_action()).collect()
}

fn ran(actions: &[Action<u64>]) -> Vec<u64> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Run(t) => Some(t.item),
            _ => None,
        })
        .collect()
}

#[test]
fn local_node_runs_first_then_spills_past_the_threshold() {
    let view = view_of(&[cpus(4.0), cpus(4.0)]);
    let mut a = sched(1, &view);
    a.submit(task(0, cpus(1.0), SchedulingStrategy::Default));
    a.submit(task(1, cpus(1.0), SchedulingStrategy::Default));
    assert_eq!(ran(&actions(&mut a)), [0, 1]);
    // At 50% the hybrid policy spills to the idle node.
    a.submit(task(2, cpus(1.0), SchedulingStrategy::Default));
    match actions(&mut a).as_slice() {
        [Action::Spill { to, task }] => assert_eq!((*to, task.item), (NodeId(2), 2)),
        other => panic!("expected a spill, got {other:?}"),
    }
}

#[test]
fn stale_view_spill_is_refused_and_the_sender_heals_and_places_again() {
    let view = view_of(&[cpus(1.0), cpus(1.0), cpus(1.0)]);
    let mut a = sched(1, &view);
    let mut b = sched(2, &view);
    // b is busy, but a has not heard.
    b.submit(task(10, cpus(1.0), SchedulingStrategy::Default));
    assert_eq!(ran(&actions(&mut b)), [10]);
    a.submit(task(0, cpus(1.0), SchedulingStrategy::Default));
    assert_eq!(ran(&actions(&mut a)), [0]);
    // a is full: it spills one of b and 3 (either looks idle).
    let mut next = task(1, cpus(1.0), SchedulingStrategy::Default);
    let mut spilled_to_b = false;
    for seq in 1..20 {
        a.submit(next);
        let out = actions(&mut a);
        let [Action::Spill { to, task: t }] = <[_; 1]>::try_from(out).expect("one spill") else {
            panic!("expected a spill");
        };
        if to == NodeId(2) {
            b.receive_spill(NodeId(1), t);
            let [Action::Refuse { to, task, update }] =
                <[_; 1]>::try_from(actions(&mut b)).expect("one refusal")
            else {
                panic!("b is full and must refuse");
            };
            assert_eq!(to, NodeId(1));
            a.on_refused(NodeId(2), task, &update);
            // Healed: b looks full now, so the task goes to node 3.
            match actions(&mut a).as_slice() {
                [Action::Spill { to, .. }] => assert_eq!(*to, NodeId(3)),
                other => panic!("expected a spill to node 3, got {other:?}"),
            }
            spilled_to_b = true;
            break;
        }
        // Went to node 3: pretend it is taken back, try another.
        a.spill_failed(to, t);
        let _ = actions(&mut a);
        next = task(seq + 1, cpus(1.0), SchedulingStrategy::Default);
        a.node_added(NodeId(3), cpus(1.0), BTreeMap::new());
    }
    assert!(
        spilled_to_b,
        "the random pick chose the stale node at some point"
    );
}

#[test]
fn infeasible_is_reported_at_once_and_placed_when_a_node_joins() {
    let view = view_of(&[cpus(2.0)]);
    let mut a = sched(1, &view);
    let gpu = ResourceSet::new().with(GPU, Quantity::ONE);
    a.submit(task(0, gpu.clone(), SchedulingStrategy::Default));
    match actions(&mut a).as_slice() {
        [Action::Infeasible { task, report }] => {
            assert_eq!(task.seq, 0);
            assert_eq!(report.request, gpu);
        }
        other => panic!("expected an infeasible report, got {other:?}"),
    }
    assert_eq!(a.infeasible_len(), 1);
    a.node_added(NodeId(2), gpu.clone(), BTreeMap::new());
    match actions(&mut a).as_slice() {
        [Action::Spill { to, task }] => assert_eq!((*to, task.item), (NodeId(2), 0)),
        other => panic!("expected a spill to the new node, got {other:?}"),
    }
    assert_eq!(a.infeasible_len(), 0);
}

#[test]
fn waiting_tasks_of_one_class_run_in_submission_order() {
    let view = view_of(&[cpus(1.0)]);
    let mut a = sched(1, &view);
    for i in 0..5 {
        a.submit(task(i, cpus(1.0), SchedulingStrategy::Default));
    }
    assert_eq!(ran(&actions(&mut a)), [0]);
    for i in 0..4 {
        assert!(a.finish(TaskId::new(WorkerId(0), i)));
        assert_eq!(ran(&actions(&mut a)), [i + 1]);
    }
    assert_eq!(a.waiting_len(), 0);
}

#[test]
fn a_big_task_is_not_starved_by_a_stream_of_small_ones() {
    let view = view_of(&[cpus(2.0)]);
    let mut a = sched(1, &view);
    a.submit(task(0, cpus(1.0), SchedulingStrategy::Default));
    a.submit(task(1, cpus(1.0), SchedulingStrategy::Default));
    a.submit(task(1000, cpus(2.0), SchedulingStrategy::Default));
    assert_eq!(ran(&actions(&mut a)), [0, 1]);
    let mut running = vec![0, 1];
    for (step, next) in (0..100).zip(2..) {
        // One small task finishes, a new one arrives.
        let done = running.remove(0);
        a.finish(TaskId::new(WorkerId(0), done));
        a.submit(task(next, cpus(1.0), SchedulingStrategy::Default));
        let started = ran(&actions(&mut a));
        if started.contains(&1000) {
            assert!(
                step <= crate::MAX_BYPASS as usize + 2,
                "ran after {step} steps"
            );
            return;
        }
        running.extend(started);
    }
    panic!("the big task starved");
}

#[test]
fn work_that_takes_nothing_the_oldest_needs_is_not_held_back_by_it() {
    let view = view_of(&[cpus(1.0), cpus(1.0)]);
    let mut a = sched(1, &view);
    // Both nodes are full (node 2 as far as a knows): the oldest waits.
    a.submit(task(0, cpus(1.0), SchedulingStrategy::Default));
    assert_eq!(ran(&actions(&mut a)), [0]);
    a.view.try_acquire(NodeId(2), &cpus(1.0));
    a.submit(task(1, cpus(1.0), SchedulingStrategy::Spread));
    assert!(actions(&mut a).is_empty(), "the oldest waits for a CPU");
    // Far more resource-free work (actors) than the bypass bound allows:
    // none of it can delay the oldest, so all of it is placed at once.
    let many = 10 * crate::MAX_BYPASS as u64;
    for seq in 2..2 + many {
        a.submit(task(seq, ResourceSet::new(), SchedulingStrategy::Spread));
    }
    let placed = actions(&mut a)
        .iter()
        .filter(|a| matches!(a, Action::Run(_) | Action::Spill { .. }))
        .count();
    assert_eq!(placed as u64, many, "every resource-free task was placed");
    // Work that competes with the oldest for CPUs still counts against
    // the bound: once a CPU frees, the oldest gets it.
    a.finish(TaskId::new(WorkerId(0), 0));
    assert_eq!(ran(&actions(&mut a)), [1]);
}

#[test]
fn hard_affinity_waits_at_its_target_node() {
    let view = view_of(&[cpus(1.0), cpus(1.0)]);
    let mut a = sched(1, &view);
    let mut b = sched(2, &view);
    b.submit(task(10, cpus(1.0), SchedulingStrategy::Default));
    let _ = actions(&mut b);
    let affinity = SchedulingStrategy::NodeAffinity {
        node: NodeId(2),
        soft: false,
    };
    a.submit(task(0, cpus(1.0), affinity));
    let [Action::Spill { to, task }] = <[_; 1]>::try_from(actions(&mut a)).expect("one spill")
    else {
        panic!("spilled to its node");
    };
    assert_eq!(to, NodeId(2));
    b.receive_spill(NodeId(1), task);
    assert!(
        actions(&mut b).is_empty(),
        "it waits at node 2, not refused"
    );
    b.finish(TaskId::new(WorkerId(0), 10));
    assert_eq!(ran(&actions(&mut b)), [0]);
}

#[test]
fn a_hard_affinity_spill_that_fails_after_its_node_was_removed_is_infeasible_not_lost() {
    // The spill to node 2 is out when node 2 is declared dead; its
    // failure comes back after the removal. Nothing would ever wake a task
    // waiting for node 2 again: it must be reported infeasible now.
    let view = view_of(&[cpus(1.0), cpus(1.0)]);
    let mut a = sched(1, &view);
    let affinity = SchedulingStrategy::NodeAffinity {
        node: NodeId(2),
        soft: false,
    };
    a.submit(task(0, cpus(1.0), affinity.clone()));
    let [Action::Spill { to, task: spilled }] =
        <[_; 1]>::try_from(actions(&mut a)).expect("one spill")
    else {
        panic!("spilled to its node");
    };
    a.node_removed(NodeId(2));
    let _ = actions(&mut a);
    a.spill_failed(to, spilled);
    match actions(&mut a).as_slice() {
        [Action::Infeasible { task, report }] => {
            assert_eq!(task.seq, 0);
            assert!(report.reason.contains("not in the cluster"), "{report:?}");
        }
        other => panic!("expected an infeasible report, got {other:?}"),
    }
    // Before the removal, the same failure waits for the node instead.
    a.node_added(NodeId(2), cpus(1.0), BTreeMap::new());
    let _ = actions(&mut a);
    a.submit(task(1, cpus(1.0), affinity));
    let [Action::Spill { to, task: spilled }] =
        <[_; 1]>::try_from(actions(&mut a)).expect("one spill")
    else {
        panic!("spilled to its node");
    };
    a.spill_failed(to, spilled);
    assert!(actions(&mut a).is_empty(), "it waits for node 2");
    a.node_removed(NodeId(2));
    assert!(
        matches!(actions(&mut a).as_slice(), [Action::Infeasible { .. }]),
        "and is infeasible once node 2 is removed"
    );
}

#[test]
fn placement_group_tasks_run_in_their_bundle_once_committed() {
    let view = view_of(&[cpus(4.0), cpus(4.0)]);
    let mut driver = sched(1, &view);
    let mut holder = sched(2, &view);
    let pg = PlacementGroupId::new(WorkerId(1), 0);
    assert!(holder.prepare_bundle(pg, 0, cpus(2.0)));
    assert!(!holder.prepare_bundle(pg, 1, cpus(3.0)), "only 2 CPUs left");
    driver.bundle_placed(pg, 0, NodeId(2), cpus(2.0));
    let strategy = SchedulingStrategy::PlacementGroup {
        group: pg,
        bundle: Some(0),
    };
    for i in 0..3 {
        driver.submit(task(i, cpus(1.0), strategy.clone()));
    }
    for a in actions(&mut driver) {
        let Action::Spill { to, task } = a else {
            panic!("group tasks go to the bundle's node");
        };
        assert_eq!(to, NodeId(2));
        holder.receive_spill(NodeId(1), task);
    }
    assert!(ran(&actions(&mut holder)).is_empty(), "not committed yet");
    assert!(holder.commit_bundle(pg, 0));
    assert_eq!(ran(&actions(&mut holder)), [0, 1]);
    // The node's own pool is untouched by tasks inside the bundle.
    let used = holder
        .view()
        .node(NodeId(2))
        .unwrap()
        .resources()
        .used()
        .clone();
    assert_eq!(used, cpus(2.0));
    holder.finish(TaskId::new(WorkerId(0), 0));
    assert_eq!(ran(&actions(&mut holder)), [2]);
    holder.finish(TaskId::new(WorkerId(0), 1));
    holder.finish(TaskId::new(WorkerId(0), 2));
    assert!(holder.release_bundle(pg, 0));
    assert!(holder
        .view()
        .node(NodeId(2))
        .unwrap()
        .resources()
        .used()
        .is_empty());
}

#[test]
fn gossip_is_versioned_and_ignores_updates_about_self() {
    let view = view_of(&[cpus(2.0), cpus(2.0)]);
    let mut a = sched(1, &view);
    let mut b = sched(2, &view);
    b.submit(task(0, cpus(2.0), SchedulingStrategy::Default));
    let _ = actions(&mut b);
    let update = b.local_update();
    a.apply_gossip(&update);
    let seen = a.view().node(NodeId(2)).unwrap();
    assert_eq!(seen.version(), update.version);
    assert_eq!(seen.resources().used(), &cpus(2.0));
    // A stale copy of a's own state does not overwrite the truth.
    let mut fake = a.local_update();
    fake.version += 100;
    fake.used = cpus(2.0);
    a.apply_gossip(&fake);
    assert!(a
        .view()
        .node(NodeId(1))
        .unwrap()
        .resources()
        .used()
        .is_empty());
}

#[test]
fn label_selectors_confine_and_rank_the_nodes_a_task_may_use() {
    let zone = |z: &str| BTreeMap::from([("zone".to_string(), z.to_string())]);
    let mut view = ClusterView::new();
    view.add_node(NodeId(1), cpus(4.0), zone("a"));
    view.add_node(NodeId(2), cpus(4.0), zone("b"));
    view.add_node(NodeId(3), cpus(4.0), zone("c"));
    let mut s = sched(1, &view);
    let labelled = |seq, hard: &str, soft: &str| {
        let mut t = task(seq, cpus(1.0), SchedulingStrategy::Default);
        if !hard.is_empty() {
            t.labels.hard = zone(hard);
        }
        if !soft.is_empty() {
            t.labels.soft = zone(soft);
        }
        t
    };
    // Hard: only zone b may run it, though the local node is idle.
    s.submit(labelled(0, "b", ""));
    match actions(&mut s).as_slice() {
        [Action::Spill { to, .. }] => assert_eq!(*to, NodeId(2)),
        other => panic!("expected a spill to zone b, got {other:?}"),
    }
    // Soft: zone c is preferred over the idle local node.
    s.submit(labelled(1, "", "c"));
    match actions(&mut s).as_slice() {
        [Action::Spill { to, .. }] => assert_eq!(*to, NodeId(3)),
        other => panic!("expected a spill to zone c, got {other:?}"),
    }
    // Soft on a zone nobody has: any node will do (here the local one).
    s.submit(labelled(2, "", "z"));
    assert_eq!(ran(&actions(&mut s)), [2]);
    // Hard on a zone nobody has: never placeable.
    s.submit(labelled(3, "z", ""));
    assert!(
        actions(&mut s)
            .iter()
            .any(|a| matches!(a, Action::Infeasible { .. })),
        "a hard selector no node matches is infeasible"
    );
}
