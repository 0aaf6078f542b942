//! The runtime's direct records (`ray_insight::direct`): written into the
//! layer's buffers beside what `tracing` brings, with parents that nest.
//!
//! Its own test binary: the direct target is process-wide.

use ray_insight::{
    direct, FieldValue, Fields, InsightConfig, InsightLayer, MemorySink, Record, RecordKind,
};
use tracing_subscriber::layer::SubscriberExt;

fn find<'a>(records: &'a [Record], kind: RecordKind, name: &str) -> &'a Record {
    records
        .iter()
        .find(|r| r.kind == kind && r.name == name)
        .unwrap_or_else(|| panic!("no {kind:?} {name} in {records:#?}"))
}

#[test]
fn direct_records_nest_with_tracing_ones_and_stop_with_their_layer() {
    let (layer, collector) = InsightLayer::new(InsightConfig::default());
    assert!(!direct::enabled());
    // Off: nothing is recorded and the span guard is inert.
    drop(direct::open_span("task.run", "ray::task", |_| {}));
    assert!(layer.record_runtime_directly());
    assert!(direct::enabled());
    // One target per process.
    let (other, _other_collector) = InsightLayer::new(InsightConfig::default());
    assert!(!other.record_runtime_directly());
    drop(other);
    assert!(
        direct::enabled(),
        "dropping another layer leaves the target"
    );

    let subscriber = tracing_subscriber::registry().with(layer);
    tracing::subscriber::with_default(subscriber, || {
        let run = direct::open_span("task.run", "ray::task", |f| {
            f.push("task_id", FieldValue::U64(7));
        });
        direct::event("object.get", "ray::object", |f| {
            f.push("bytes", FieldValue::U64(5));
        });
        {
            // A user's span inside the task: recorded through `tracing`.
            let user = tracing::info_span!(target: "ray_user", "reward_fn");
            let _entered = user.enter();
            tracing::info!(target: "ray_user", "inside");
        }
        drop(run);
        direct::event("object.put", "ray::object", |_| {});
        // Nothing recorded inside: the close is folded into the opening.
        let quick = direct::open_span("actor.call", "ray::actor", |f| {
            f.push("task_id", FieldValue::U64(8));
        });
        quick.close_with(|f, one_record| f.push("folded", FieldValue::Bool(one_record)));
        // A record inside: the close is a record of its own.
        let slow = direct::open_span("task.run", "ray::task", |f| {
            f.push("task_id", FieldValue::U64(9));
        });
        direct::event("object.get", "ray::object", |_| {});
        slow.close_with(|f, one_record| f.push("folded", FieldValue::Bool(one_record)));
        // An opening whose inline fields are full: `closed_at` would spill
        // to the heap, so the close stays a record of its own.
        let full = direct::open_span("actor.call", "ray::actor", |f| {
            for key in ["task_id", "a", "b", "c", "d", "e", "g"] {
                f.push(key, FieldValue::U64(10));
            }
        });
        full.close_with(|f, one_record| f.push("folded", FieldValue::Bool(one_record)));
        // A span that is not a run is never folded: the views read
        // `closed_at` only on runs, so a folded close would be lost.
        let other = direct::open_span("custom.step", "ray::custom", |_| {});
        other.close_with(|f, one_record| f.push("folded", FieldValue::Bool(one_record)));
    });
    // The layer is gone with its subscriber: direct recording stops.
    assert!(!direct::enabled());
    InsightLayer::flush_current_thread();
    let mut sink = MemorySink::new(64);
    collector.drain_into(&mut sink);
    let records = sink.records();
    assert_eq!(records.len(), 15, "{records:#?}");
    let custom = find(records, RecordKind::SpanClose, "custom.step");
    assert_eq!(custom.field("folded"), Some(&FieldValue::Bool(false)));

    let run = find(records, RecordKind::SpanNew, "task.run");
    assert_ne!(run.span, 0);
    assert_eq!(run.parent, 0);
    assert_eq!(run.field("task_id"), Some(&FieldValue::U64(7)));
    let get = find(records, RecordKind::Event, "object.get");
    assert_eq!(get.parent, run.span);
    assert_eq!(get.field("bytes"), Some(&FieldValue::U64(5)));
    let user = find(records, RecordKind::SpanNew, "reward_fn");
    assert_eq!(user.parent, run.span, "a user span hangs under the task");
    let inside = records
        .iter()
        .find(|r| r.kind == RecordKind::Event && r.target == "ray_user")
        .expect("the user's event");
    assert_eq!(inside.parent, user.span);
    let closed = records
        .iter()
        .position(|r| r.kind == RecordKind::SpanClose && r.span == run.span)
        .expect("the run closes");
    assert!(records[closed].at_nanos >= run.at_nanos);
    // After the run closed, an event has no enclosing span.
    let put = find(records, RecordKind::Event, "object.put");
    assert_eq!(put.parent, 0);
    assert!(
        records.iter().position(|r| r.name == "object.put") > Some(closed),
        "records keep the thread's order"
    );

    let quick = find(records, RecordKind::SpanNew, "actor.call");
    assert_eq!(quick.field("task_id"), Some(&FieldValue::U64(8)));
    assert_eq!(quick.field("folded"), Some(&FieldValue::Bool(true)));
    let closed_at = quick.closed_at().expect("one record for the call");
    assert!(closed_at >= quick.at_nanos);
    assert!(!records
        .iter()
        .any(|r| r.kind == RecordKind::SpanClose && r.span == quick.span));
    // The run with a record inside, and the one whose opening was full:
    // each closes with a record of its own, told it was not folded.
    for (task, why) in [(9, "a record came inside it"), (10, "no room inline")] {
        let open = records
            .iter()
            .find(|r| r.field("task_id") == Some(&FieldValue::U64(task)))
            .expect("the run's opening");
        assert_eq!(open.closed_at(), None, "{why}");
        let close = records
            .iter()
            .find(|r| r.kind == RecordKind::SpanClose && r.span == open.span)
            .expect("its own close record");
        assert_eq!(
            close.field("folded"),
            Some(&FieldValue::Bool(false)),
            "{why}"
        );
        if task == 10 {
            assert_eq!(open.fields.len(), Fields::INLINE);
        }
    }
}
