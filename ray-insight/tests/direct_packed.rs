//! The runtime's compact records (`direct::submit`, `direct::object`,
//! `direct::open_run`): written in their compact shapes, they reach sinks
//! as the same [`Record`]s, in the thread's order, with a run's close
//! folded into its opening when nothing came in between.
//!
//! Its own test binary: the direct target is process-wide.

use ray_insight::direct::{self, ObjectInfo, RunInfo, RunKind, SubmitInfo};
use ray_insight::{FieldValue, InsightConfig, InsightLayer, MemorySink, Record, RecordKind};

fn u(record: &Record, key: &str) -> Option<u128> {
    record.field(key).and_then(FieldValue::as_u128)
}

fn s<'a>(record: &'a Record, key: &str) -> Option<&'a str> {
    record.field(key).and_then(FieldValue::as_str)
}

fn run(kind: RunKind, task: u128) -> RunInfo {
    RunInfo {
        kind,
        task,
        attempt: 0,
        parent_task: None,
        parent_span: 0,
        node: 1,
        worker: 2,
    }
}

#[test]
fn compact_records_arrive_as_records_in_order() {
    let (layer, collector) = InsightLayer::new(InsightConfig::default());
    // Off: nothing is written, and the run's guard is inert.
    direct::submit(&SubmitInfo {
        task: 1,
        function: "off",
        actor: None,
        parent_task: None,
        parent_span: 0,
    });
    drop(direct::open_run(run(RunKind::Task { function: "off" }, 1)));
    assert!(layer.record_runtime_directly());

    direct::submit(&SubmitInfo {
        task: (7 << 64) | 3,
        function: "m",
        actor: Some(9),
        parent_task: Some(5),
        parent_span: 11,
    });
    // A call with nothing inside: one record, with the CPU time when it
    // was read (not counted at its wall time).
    let call = direct::open_run(RunInfo {
        attempt: 2,
        parent_task: Some(5),
        ..run(
            RunKind::ActorCall {
                actor: 9,
                class: "Worker",
                method: "m",
            },
            (7 << 64) | 3,
        )
    });
    let call_id = call.id();
    call.close_run(Some((40, false)), None);
    // A short call counted at its wall time: one record, no CPU field.
    direct::open_run(run(
        RunKind::ActorCreate {
            actor: 9,
            class: "Worker",
        },
        4,
    ))
    .close_run(Some((5, true)), None);
    // A task with a get inside: its close is a record of its own, and the
    // get hangs under it.
    let task = direct::open_run(run(RunKind::Task { function: "f" }, 6));
    let task_id = task.id();
    direct::object(&ObjectInfo {
        object: 12,
        bytes: 64,
        task: Some(6),
        node: 1,
        get: Some(true),
    });
    task.close_run(None, None);
    // A failed run: its close says why.
    direct::open_run(run(RunKind::Task { function: "g" }, 8))
        .close_run(Some((3, true)), Some("boom".into()));
    // Dropped without a close: closed with nothing to say.
    drop(direct::open_run(run(RunKind::Task { function: "h" }, 10)));
    direct::object(&ObjectInfo {
        object: 13,
        bytes: 8,
        task: None,
        node: 1,
        get: None,
    });

    drop(layer);
    assert!(!direct::enabled());
    let mut sink = MemorySink::new(64);
    collector.drain_into(&mut sink);
    let records = sink.records();
    let names: Vec<(RecordKind, &str)> = records.iter().map(|r| (r.kind, r.name)).collect();
    use RecordKind::{Event, SpanClose, SpanNew};
    assert_eq!(
        names,
        [
            (Event, "task.submit"),
            (SpanNew, "actor.call"),
            (SpanNew, "actor.create"),
            (SpanNew, "task.run"),
            (Event, "object.get"),
            (SpanClose, "task.run"),
            (SpanNew, "task.run"),
            (SpanClose, "task.run"),
            (SpanNew, "task.run"),
            (Event, "object.put"),
        ],
        "{records:#?}"
    );
    assert_eq!(collector.recorded(), 10);
    assert!(
        records.windows(2).all(|w| w[0].at_nanos <= w[1].at_nanos),
        "one thread's stamps never go back"
    );
    assert_eq!(collector.dropped(), 0);

    let submit = &records[0];
    assert_eq!(u(submit, "task_id"), Some((7 << 64) | 3));
    assert_eq!(s(submit, "method"), Some("m"));
    assert_eq!(submit.field("function"), None, "a call names its method");
    assert_eq!(u(submit, "actor_id"), Some(9));
    assert_eq!(u(submit, "parent_task"), Some(5));
    assert_eq!(u(submit, "parent_span"), Some(11));

    let call = &records[1];
    assert_eq!(call.span, call_id);
    assert_eq!(
        (s(call, "class"), s(call, "method")),
        (Some("Worker"), Some("m"))
    );
    assert_eq!(u(call, "attempt"), Some(2));
    assert_eq!(u(call, "cpu_nanos"), Some(40));
    assert_eq!(
        (u(call, "node_id"), u(call, "worker_id")),
        (Some(1), Some(2))
    );
    assert!(call.closed_at().is_some_and(|t| t >= call.at_nanos));

    let create = &records[2];
    assert_eq!(create.field("cpu_nanos"), None, "counted at its wall time");
    assert_eq!(create.field("method"), None);
    assert!(create.closed_at().is_some());

    let (task, get, close) = (&records[3], &records[4], &records[5]);
    assert_eq!(task.span, task_id);
    assert_eq!(task.closed_at(), None, "a record came inside");
    assert_eq!(get.parent, task_id, "the get hangs under the run");
    assert_eq!(get.field("arg"), Some(&FieldValue::Bool(true)));
    assert_eq!((u(get, "object_id"), u(get, "bytes")), (Some(12), Some(64)));
    assert_eq!(close.span, task_id);

    let failed = &records[7];
    assert_eq!(s(failed, "error"), Some("boom"));
    assert_eq!(u(failed, "cpu_nanos"), Some(3));
    assert_eq!(records[6].closed_at(), None);

    assert!(records[8].closed_at().is_some(), "a dropped run closes");
    let put = &records[9];
    assert_eq!(put.parent, 0, "no run is open");
    assert_eq!((put.field("task_id"), put.field("arg")), (None, None));
}
