//! A seeded simulation of one worker process's leases ([`WorkerLeases`]):
//! pushed tasks start under a few leases, block and resume (sometimes
//! twice in a row, sometimes ending while still blocked), end; actors are
//! hosted under leases of their own and go, some twice. The node's view
//! is rebuilt from the machine's notices alone and compared with the
//! truth after every step.

use std::collections::BTreeMap;

use ray_proto::WorkerId;

use super::*;
use crate::cluster::sim_seeds::Rng;

fn id(n: u64) -> TaskId {
    TaskId::new(WorkerId(3), n)
}

fn run(seed: u64) -> Result<(), String> {
    let mut rng = Rng::new(seed);
    let mut m: WorkerLeases<u64> = WorkerLeases::default();
    let leases: Vec<TaskId> = (0..1 + rng.below(4)).map(|i| id(1_000 + i)).collect();
    // The truth: task -> (lease, blocked); actor -> lease.
    let mut tasks: BTreeMap<TaskId, (TaskId, bool)> = BTreeMap::new();
    let mut actors: BTreeMap<ActorId, TaskId> = BTreeMap::new();
    // The node's view, from the notices.
    let mut node_blocked: BTreeMap<TaskId, bool> = BTreeMap::new();
    let mut returned: BTreeMap<TaskId, u32> = BTreeMap::new();
    let mut actor_leases: BTreeMap<TaskId, ActorId> = BTreeMap::new();
    let mut next = 0u64;
    let steps = 20 + rng.below(150);
    for step in 0..steps + 200 {
        let winding_down = step >= steps;
        match rng.below(8) {
            0 | 1 if !winding_down => {
                let t = id(next);
                next += 1;
                let lease = leases[rng.below(leases.len() as u64) as usize];
                m.task_started(t, lease);
                tasks.insert(t, (lease, false));
            }
            2 | 3 if !tasks.is_empty() && !winding_down => {
                let keys: Vec<TaskId> = tasks.keys().copied().collect();
                let t = keys[rng.below(keys.len() as u64) as usize];
                let blocked = rng.below(2) == 0;
                m.task_blocked(t, blocked);
                tasks.get_mut(&t).expect("live task").1 = blocked;
            }
            4 if !winding_down => {
                // A notice for a task not running here (an actor call) is
                // ignored.
                m.task_blocked(id(900_000 + next), true);
            }
            5 if !winding_down => {
                let a = ActorId::new(WorkerId(9), next);
                let lease = id(500_000 + next);
                next += 1;
                if m.actor_hosted(a, lease, next).is_some() {
                    return Err(format!("{a} hosted twice"));
                }
                actors.insert(a, lease);
                actor_leases.insert(lease, a);
            }
            6 if !actors.is_empty() || rng.below(4) == 0 => {
                let keys: Vec<ActorId> = actors.keys().copied().collect();
                let a = if keys.is_empty() || rng.below(5) == 0 {
                    // One never hosted here, or one already gone.
                    ActorId::new(WorkerId(9), rng.below(next + 1))
                } else {
                    keys[rng.below(keys.len() as u64) as usize]
                };
                let was = actors.remove(&a).is_some();
                if m.actor_gone(a).is_some() != was {
                    return Err(format!("actor_gone({a}) disagrees: hosted {was}"));
                }
            }
            _ if !tasks.is_empty() => {
                let keys: Vec<TaskId> = tasks.keys().copied().collect();
                let t = keys[rng.below(keys.len() as u64) as usize];
                m.task_ended(t);
                tasks.remove(&t);
            }
            _ => {}
        }
        while let Some(a) = m.poll() {
            match a {
                LeaseAction::Blocked { lease, blocked } => {
                    let was = node_blocked.get(&lease).copied().unwrap_or(false);
                    if was == blocked {
                        return Err(format!("{lease}: notice {blocked} repeated"));
                    }
                    node_blocked.insert(lease, blocked);
                }
                LeaseAction::Return { lease } => {
                    if !actor_leases.contains_key(&lease) {
                        return Err(format!("{lease} returned, not an actor's"));
                    }
                    *returned.entry(lease).or_default() += 1;
                }
            }
        }
        for &lease in &leases {
            let truth = tasks.values().any(|&(l, b)| l == lease && b);
            let seen = node_blocked.get(&lease).copied().unwrap_or(false);
            if truth != seen {
                return Err(format!(
                    "step {step}: {lease} blocked {truth}, the node thinks {seen}"
                ));
            }
        }
        for (lease, a) in &actor_leases {
            let n = returned.get(lease).copied().unwrap_or(0);
            let want = u32::from(!actors.contains_key(a));
            if n != want {
                return Err(format!("{lease} of {a} returned {n} times, want {want}"));
            }
        }
    }
    // Everything ends: every lease ends unblocked.
    for t in tasks.keys().copied().collect::<Vec<_>>() {
        m.task_ended(t);
    }
    while let Some(a) = m.poll() {
        if let LeaseAction::Blocked { lease, blocked } = a {
            node_blocked.insert(lease, blocked);
        }
    }
    if let Some((lease, _)) = node_blocked.iter().find(|(_, b)| **b) {
        return Err(format!("{lease} left blocked after its tasks ended"));
    }
    if m.len().0 != 0 {
        return Err("tasks left running".into());
    }
    if !m.blocked_tasks.is_empty() || !m.blocked.is_empty() {
        return Err("blocked tasks or leases left after every task ended".into());
    }
    Ok(())
}

#[test]
fn the_node_hears_a_lease_blocked_exactly_while_a_task_of_it_is_and_leases_go_back_once() {
    crate::cluster::sim_seeds::run_seeds(run);
}

/// Replays one seed (`RAYRS_SIM_SEED`), for a failure found above.
#[test]
fn replay_one_seed() {
    if let Some(seed) = crate::cluster::sim_seeds::replay_seed() {
        run(seed).unwrap();
    }
}
