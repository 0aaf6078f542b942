//! The bottleneck summary of `rayrs insight top`, as the logical summary's
//! `bottlenecks` field: the first panel a person opening the dashboard
//! reads.

use std::collections::HashMap;

use serde_json::{json, Value};

use ray_insight::views::{LogicalView, TopFrame, TopView};

/// `top` as JSON; `logical` (the same snapshot's graph) gives the data
/// edges' ends their node keys, so that the page can point at them.
pub(super) fn to_json(top: &TopView, logical: &LogicalView) -> Value {
    let wanted: Vec<&str> = top
        .data
        .iter()
        .flat_map(|d| [d.from.as_str(), d.to.as_str()])
        .collect();
    let key_of: HashMap<String, String> = logical
        .nodes
        .iter()
        .map(|n| (n.node.to_string(), n.node.key()))
        .filter(|(name, _)| wanted.contains(&name.as_str()))
        .collect();
    let frames = |rows: &[TopFrame]| -> Vec<Value> {
        rows.iter()
            .map(|f| json!({"frame": f.frame, "nanos": f.nanos, "calls": f.calls}))
            .collect()
    };
    json!({
        "self_time": frames(&top.self_time),
        "waits": frames(&top.waits),
        "data": top.data.iter().map(|d| json!({
            "from": d.from, "to": d.to,
            "from_key": key_of.get(&d.from), "to_key": key_of.get(&d.to),
            "bytes": d.bytes, "gets": d.gets,
        })).collect::<Vec<_>>(),
        "deadlocks": top.deadlocks,
    })
}
