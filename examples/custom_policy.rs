//! A user-defined placement policy plugged in through `ray_sched::Policy`.
//!
//! `ZonePackPolicy` keeps work in one zone and packs it tightly: among the
//! nodes that can take a request now, it prefers those labelled
//! `zone=<preferred>`, and among those the one with the least CPU left
//! after placing it (best fit), so whole nodes stay free for big requests.
//! It is driven side by side with the built-in hybrid and spread policies,
//! all as `Box<dyn Policy>`, on a small cluster view built here; each
//! decision is acquired on the view so later decisions see it.
//!
//! `cargo run --release --example custom_policy`

use std::collections::BTreeMap;

use anyhow::{bail, Context};
use ray_core::NodeId;
use ray_sched::{
    ClusterView, Decision, HybridConfig, HybridPolicy, NodeView, Policy, Quantity, Request,
    ResourceSet, SchedulingStrategy, SpreadPolicy, CPU, GPU,
};

/// Best fit inside a preferred zone, then best fit anywhere.
struct ZonePackPolicy {
    zone: String,
}

impl ZonePackPolicy {
    /// CPU the node would have left after taking `req` (smaller packs
    /// tighter).
    fn cpu_left_after(node: &NodeView, req: &ResourceSet) -> u64 {
        let r = node.resources();
        r.total()
            .get(CPU)
            .raw()
            .saturating_sub(r.used().get(CPU).raw())
            .saturating_sub(req.get(CPU).raw())
    }
}

impl Policy for ZonePackPolicy {
    fn name(&self) -> &str {
        "zone-pack"
    }

    fn decide(&mut self, req: &Request<'_>, view: &ClusterView) -> Decision {
        let best = view
            .nodes()
            .iter()
            .filter(|n| n.resources().can_acquire(req.resources))
            .min_by_key(|n| {
                let out_of_zone = n.labels().get("zone") != Some(&self.zone);
                (out_of_zone, Self::cpu_left_after(n, req.resources), n.id())
            });
        match best {
            Some(node) => Decision::Node(node.id()),
            // Nothing fits now. A real policy would tell Wait from
            // Infeasible the way the built-in ones do; this one keeps the
            // example short by asking the view.
            None if view.feasible_somewhere(req.resources) => Decision::Wait,
            None => Decision::Infeasible(ray_sched::InfeasibleReport {
                request: req.resources.clone(),
                strategy: req.strategy.clone(),
                cluster: view.summary(),
                reason: "no node has that much in total".into(),
            }),
        }
    }
}

/// Four nodes in two zones: two small, one big, one with a GPU.
fn cluster() -> anyhow::Result<ClusterView> {
    let mut view = ClusterView::new();
    let nodes = [
        (1, 4, 0, "a"),
        (2, 8, 0, "a"),
        (3, 4, 0, "b"),
        (4, 8, 1, "b"),
    ];
    for (id, cpus, gpus, zone) in nodes {
        let total =
            ResourceSet::cpu(Quantity::from_units(cpus)).with(GPU, Quantity::from_units(gpus));
        let labels = BTreeMap::from([("zone".to_string(), zone.to_string())]);
        if !view.add_node(NodeId(id), total, labels) {
            bail!("node {id} listed twice");
        }
    }
    Ok(view)
}

fn main() -> anyhow::Result<()> {
    let requests = [
        ResourceSet::cpu(Quantity::from_units(2)),
        ResourceSet::cpu(Quantity::from_units(3)),
        ResourceSet::cpu(Quantity::from_f64(0.5)?),
        ResourceSet::cpu(Quantity::from_units(1)).with(GPU, Quantity::from_f64(0.5)?),
        ResourceSet::cpu(Quantity::from_units(4)),
        ResourceSet::cpu(Quantity::from_units(6)),
        ResourceSet::cpu(Quantity::from_units(8)),
        ResourceSet::new().with("tpu", Quantity::ONE),
    ];
    let policies: Vec<Box<dyn Policy>> = vec![
        Box::new(ZonePackPolicy { zone: "a".into() }),
        Box::new(HybridPolicy::new(HybridConfig {
            seed: 42,
            ..HybridConfig::default()
        })),
        Box::new(SpreadPolicy::new()),
    ];
    for mut policy in policies {
        println!("== {} ==", policy.name());
        let mut view = cluster()?;
        for resources in &requests {
            let req = Request {
                resources,
                strategy: &SchedulingStrategy::Default,
                local: NodeId(1),
                arg_bytes: &[],
            };
            let decision = policy.decide(&req, &view);
            let asked = resources.to_string();
            match &decision {
                Decision::Node(node) => {
                    // Policies only decide; the caller acquires.
                    let placed = view.try_acquire(*node, resources);
                    placed
                        .then_some(())
                        .context("a policy chose a node without room")?;
                    let n = view.node(*node).context("the chosen node is in the view")?;
                    println!(
                        "{asked:<22} -> {node} (zone {}, now {}% busy)",
                        n.labels().get("zone").map_or("?", String::as_str),
                        n.utilization() / 100
                    );
                }
                Decision::Wait => println!("{asked:<22} -> wait"),
                Decision::Infeasible(report) => {
                    println!("{asked:<22} -> infeasible: {}", report.reason)
                }
            }
        }
    }
    Ok(())
}
