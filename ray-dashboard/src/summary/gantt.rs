//! The Gantt chart's summary: the busiest lanes of a time window, slices
//! narrower than a pixel column merged, and flow arrows bundled.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde_json::{json, Value};

use ray_insight::views::{GanttFlow, GanttSlice, GanttView};

use super::{SummaryLimits, SummaryParams};

pub(super) fn gantt(
    view: &GanttView,
    now: u64,
    params: &SummaryParams,
    limits: &SummaryLimits,
) -> Value {
    let to = params.to_nanos.unwrap_or(now).max(1);
    let from = params.from_nanos.unwrap_or(0).min(to - 1);
    let overlaps = |s: &GanttSlice| s.start_nanos <= to && s.start_nanos + s.dur_nanos >= from;

    // The busiest lanes in the window.
    let mut busy: HashMap<u32, u64> = HashMap::new();
    for s in view.slices.iter().filter(|s| overlaps(s)) {
        let clipped = (s.start_nanos + s.dur_nanos).min(to) - s.start_nanos.max(from);
        *busy.entry(s.lane).or_default() += clipped.max(1);
    }
    let mut lanes: Vec<(u32, u64)> = busy.into_iter().collect();
    lanes.sort_by_key(|&(lane, t)| (std::cmp::Reverse(t), lane));
    let lane_total = lanes.len();
    lanes.truncate(limits.gantt_lanes);
    let kept: HashSet<u32> = lanes.iter().map(|&(lane, _)| lane).collect();

    // Slices narrower than a column are merged per lane, column and state;
    // while that leaves more than the cap, the columns are widened.
    let visible: Vec<&GanttSlice> = view
        .slices
        .iter()
        .filter(|s| kept.contains(&s.lane) && overlaps(s))
        .collect();
    let in_window = visible.len();
    let mut column = ((to - from) / limits.gantt_columns.max(1)).max(1);
    let mut slices = merge_slices(&visible, from, column);
    while slices.len() > limits.gantt_slices && column < to - from {
        column = column.saturating_mul(2);
        slices = merge_slices(&visible, from, column);
    }
    let slice_count = slices.len();
    if slices.len() > limits.gantt_slices {
        slices.sort_by_key(|s| std::cmp::Reverse(s.dur_nanos));
        slices.truncate(limits.gantt_slices);
    }
    slices.sort_by_key(|s| (s.lane, s.start_nanos));

    let flow_in_window = |f: &&GanttFlow| f.to_nanos >= from && f.from_nanos <= to;
    let flows_in_window = view.flows.iter().filter(flow_in_window).count();
    let flow_column = ((to - from) / limits.gantt_flow_columns.max(1)).max(1);
    let bundles = bundle_flows(
        view.flows
            .iter()
            .filter(flow_in_window)
            .filter(|f| kept.contains(&f.from_lane) && kept.contains(&f.to_lane)),
        from,
        flow_column,
        limits.gantt_flows,
    );
    let calls_of: HashMap<u64, u64> = bundles.iter().map(|(f, n)| (f.id, *n)).collect();
    let flows_shown: u64 = calls_of.values().sum();
    let flows: Vec<GanttFlow> = bundles.into_iter().map(|(f, _)| f).collect();
    let reduced = GanttView {
        lanes: view
            .lanes
            .iter()
            .filter(|l| kept.contains(&l.lane))
            .cloned()
            .collect(),
        slices,
        flows,
    };
    let shown_slices = reduced.slices.len();
    let mut out = reduced.to_chrome_trace();
    for event in out["traceEvents"].as_array_mut().into_iter().flatten() {
        let id = format!(
            "{}|{}|{}|{}|{}|{}|{}",
            event["ph"].as_str().unwrap_or(""),
            event["pid"],
            event["tid"],
            event["cat"].as_str().unwrap_or(""),
            event["ts"],
            event["args"]["task_id"].as_str().unwrap_or(""),
            if event["ph"] == "X" || event["ph"] == "M" {
                event["name"].to_string()
            } else {
                event["id"].to_string()
            },
        );
        event["id"] = match event["ph"].as_str() {
            // Flow events keep their numeric id: it pairs `s` with `f`.
            Some("s" | "f") => event["id"].clone(),
            _ => json!(id),
        };
        if event["ph"] == "s" || event["ph"] == "f" {
            event["key"] = json!(id);
            let calls = event["id"].as_u64().and_then(|id| calls_of.get(&id));
            event["args"] = json!({ "calls": calls.copied().unwrap_or(1) });
        }
    }
    out["summary"] = json!({
        "from_nanos": from,
        "to_nanos": to,
        "column_nanos": column,
        "lanes": lane_total,
        "slices_in_window": in_window,
        "flow_column_nanos": flow_column,
        "flows_in_window": flows_in_window,
        "omitted": {
            "lanes": lane_total - kept.len(),
            "slices_merged": in_window.saturating_sub(slice_count),
            "slices": slice_count - shown_slices,
            "flows": (flows_in_window as u64).saturating_sub(flows_shown),
        },
    });
    out
}

/// `slices` with those shorter than `column` merged per lane, column (from
/// `from`) and state into one slice that says how many it stands for (a
/// slice alone in its cell keeps its task id).
fn merge_slices(slices: &[&GanttSlice], from: u64, column: u64) -> Vec<GanttSlice> {
    // By (lane, column, state): the merged slice, how many it stands for,
    // and the first one's task id.
    type Merged = (GanttSlice, u64, String);
    let mut out = Vec::new();
    let mut merged: BTreeMap<(u32, u64, &'static str), Merged> = BTreeMap::new();
    for &s in slices {
        if s.dur_nanos >= column {
            out.push(s.clone());
            continue;
        }
        let col = s.start_nanos.saturating_sub(from) / column;
        let (m, n, _) = merged
            .entry((s.lane, col, s.state.as_str()))
            .or_insert_with(|| {
                let mut first = s.clone();
                let task_id = std::mem::take(&mut first.task_id);
                (first, 0, task_id)
            });
        let end = (m.start_nanos + m.dur_nanos).max(s.start_nanos + s.dur_nanos);
        m.start_nanos = m.start_nanos.min(s.start_nanos);
        m.dur_nanos = end - m.start_nanos;
        m.finished &= s.finished;
        *n += 1;
    }
    for (m, n, task_id) in merged.into_values() {
        let mut m = m;
        if n > 1 {
            m.detail = Some(format!("{n} slices merged"));
            m.name = format!("{n} × {}", m.name);
        } else {
            m.task_id = task_id;
        }
        out.push(m);
    }
    out
}

/// Flow arrows bundled: one per caller lane, callee lane and column of the
/// window (`column` nanoseconds from `from`, by the time of the call)
/// stands for every call between those two lanes in that column, drawn as
/// the earliest of them. A burst of calls (a tree of actors starting up)
/// is then a few arrows that say how many calls they carry, and the
/// `cap` bundles kept (the largest) spread over the whole window rather
/// than the first calls of it. In time order, each with its call count.
fn bundle_flows<'a>(
    flows: impl Iterator<Item = &'a GanttFlow>,
    from: u64,
    column: u64,
    cap: usize,
) -> Vec<(GanttFlow, u64)> {
    let mut bundles: BTreeMap<(u32, u32, u64), (&GanttFlow, u64)> = BTreeMap::new();
    for f in flows {
        let col = f.from_nanos.saturating_sub(from) / column.max(1);
        let (first, n) = bundles
            .entry((f.from_lane, f.to_lane, col))
            .or_insert((f, 0));
        if (f.from_nanos, f.id) < (first.from_nanos, first.id) {
            *first = f;
        }
        *n = n.saturating_add(1);
    }
    let mut kept: Vec<(GanttFlow, u64)> =
        bundles.into_values().map(|(f, n)| (f.clone(), n)).collect();
    kept.sort_by_key(|(f, n)| (std::cmp::Reverse(*n), f.from_nanos, f.id));
    kept.truncate(cap);
    kept.sort_by_key(|(f, _)| (f.from_nanos, f.id));
    kept
}
