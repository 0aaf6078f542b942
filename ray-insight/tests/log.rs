//! The event log end to end: records written through `LogWriter` (also as a
//! sink beside live views), read back from whole, truncated and corrupt
//! files, and replayed at a time t.

use std::path::PathBuf;

use ray_insight::export::{export, ExportFormat, ViewKind};
use ray_insight::log::{
    read_log, replay, LogContents, LogError, LogReader, LogWriter, Replay, FRAME_HEADER_BYTES,
    HEADER_BYTES,
};
use ray_insight::{FieldValue, Limits, Record, RecordKind, Sink, Tee, Views};

const EPOCH: u64 = 1_750_000_000_123_456_789;

/// A file path in this test binary's temp dir, fresh for each test.
fn temp_path(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("ray-insight-log");
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join(name);
    let _ = std::fs::remove_file(&path);
    path
}

fn record(
    kind: RecordKind,
    span: u64,
    name: &'static str,
    at_us: u64,
    fields: &[(&'static str, &str)],
) -> Record {
    Record {
        kind,
        span,
        parent: 0,
        name,
        target: "ray_core::task",
        at_nanos: at_us * 1_000,
        thread: 1,
        fields: fields
            .iter()
            .map(|(k, v)| (*k, FieldValue::Str((*v).into())))
            .collect(),
    }
}

/// A small job, as three batches: the driver runs `shapes::train` (0..10 ms),
/// which runs `shapes::step` twice (1..3 ms and 4..9 ms), waiting on the
/// second from 5 ms to 9 ms; an object is put and got in between.
fn job() -> Vec<Vec<Record>> {
    use RecordKind::*;
    vec![
        vec![
            record(
                Event,
                0,
                "task.submit",
                0,
                &[("task_id", "t1"), ("function", "shapes::train")],
            ),
            record(
                SpanNew,
                1,
                "task.run",
                0,
                &[("task_id", "t1"), ("function", "shapes::train")],
            ),
            record(
                SpanNew,
                2,
                "task.run",
                1_000,
                &[
                    ("task_id", "t2"),
                    ("function", "shapes::step"),
                    ("parent_task", "t1"),
                ],
            ),
        ],
        vec![
            record(SpanClose, 2, "task.run", 3_000, &[]),
            record(
                Event,
                0,
                "object.put",
                3_000,
                &[("object_id", "o1"), ("task_id", "t2")],
            ),
            record(
                SpanNew,
                3,
                "task.run",
                4_000,
                &[
                    ("task_id", "t3"),
                    ("function", "shapes::step"),
                    ("parent_task", "t1"),
                ],
            ),
            record(
                SpanNew,
                4,
                "wait",
                5_000,
                &[("task_id", "t1"), ("objects", "o2"), ("producers", "t3")],
            ),
        ],
        vec![
            record(SpanClose, 3, "task.run", 9_000, &[]),
            record(SpanClose, 4, "wait", 9_000, &[]),
            record(
                Event,
                0,
                "object.get",
                9_000,
                &[("object_id", "o1"), ("task_id", "t1")],
            ),
            record(SpanClose, 1, "task.run", 10_000, &[]),
        ],
    ]
}

/// The log of `job()` in memory, and the byte offsets where its frames end.
fn job_log() -> (Vec<u8>, Vec<u64>) {
    let mut writer = LogWriter::new(Vec::new(), EPOCH).expect("in memory");
    let mut ends = Vec::new();
    for batch in job() {
        writer.append(&batch).expect("in memory");
        ends.push(writer.get_ref().len() as u64);
    }
    (writer.into_inner(), ends)
}

/// What `read_log` reads from `bytes`, without a file.
fn read_bytes(bytes: &[u8]) -> Result<LogContents, LogError> {
    let mut reader = LogReader::new(bytes)?;
    let mut records = Vec::new();
    let stopped = loop {
        match reader.next_batch() {
            Ok(Some(batch)) => records.extend(batch),
            Ok(None) => break None,
            Err(e) if e.is_damage() => break Some(e),
            Err(e) => return Err(e),
        }
    };
    Ok(LogContents {
        epoch_unix_nanos: reader.epoch_unix_nanos(),
        records,
        stopped,
    })
}

fn all_records() -> Vec<Record> {
    job().concat()
}

#[test]
fn a_written_log_reads_back_every_record_and_the_epoch() {
    let path = temp_path("whole.rayrslog");
    let mut writer = LogWriter::create(&path, EPOCH).expect("created");
    for batch in job() {
        writer.accept(&batch);
    }
    writer.accept(&[]);
    writer.flush().expect("flushed");
    assert_eq!(writer.failed_batches(), 0);
    assert_eq!(writer.records_written(), all_records().len() as u64);
    let contents = read_log(&path).expect("a log");
    assert!(contents.stopped.is_none(), "{:?}", contents.stopped);
    assert_eq!(contents.epoch_unix_nanos, EPOCH);
    assert_eq!(contents.records, all_records());
}

#[test]
fn a_log_cut_at_any_byte_keeps_the_records_of_its_whole_frames() {
    let (log, ends) = job_log();
    let batches = job();
    for cut in 0..=log.len() {
        let result = read_bytes(&log[..cut]);
        if (cut as u64) < HEADER_BYTES {
            assert!(
                result.is_err(),
                "cut at {cut}: a header cut short is no log"
            );
            continue;
        }
        let contents = result.unwrap_or_else(|e| panic!("cut at {cut}: {e}"));
        let whole = ends.iter().filter(|&&end| end <= cut as u64).count();
        let expected: Vec<Record> = batches[..whole].concat();
        assert_eq!(contents.records, expected, "cut at {cut}");
        let boundary = cut as u64 == HEADER_BYTES || ends.contains(&(cut as u64));
        match contents.stopped {
            None => assert!(boundary, "cut at {cut} inside a frame read cleanly"),
            Some(LogError::Truncated {
                offset,
                records_read,
            }) => {
                assert!(
                    !boundary,
                    "cut at {cut} on a frame boundary is not truncated"
                );
                let frame_start = if whole == 0 {
                    HEADER_BYTES
                } else {
                    ends[whole - 1]
                };
                assert_eq!(offset, frame_start, "cut at {cut}");
                assert_eq!(records_read, expected.len() as u64, "cut at {cut}");
            }
            Some(other) => panic!("cut at {cut}: {other}"),
        }
    }
}

#[test]
fn a_flipped_payload_byte_stops_reading_at_its_frame_and_keeps_the_prefix() {
    let (log, ends) = job_log();
    // A byte in the second frame's payload.
    let at = (ends[0] + FRAME_HEADER_BYTES + 3) as usize;
    let mut damaged = log.clone();
    damaged[at] ^= 0x40;
    let path = temp_path("flipped.rayrslog");
    std::fs::write(&path, &damaged).expect("written");
    let contents = read_log(&path).expect("still a log");
    assert_eq!(contents.records, job()[0]);
    match contents.stopped {
        Some(LogError::Corrupt {
            offset,
            records_read,
            ref reason,
        }) => {
            assert_eq!(offset, ends[0]);
            assert_eq!(records_read, job()[0].len() as u64);
            assert!(reason.contains("checksum"), "{reason}");
        }
        ref other => panic!("{other:?}"),
    }
    let message = contents.stopped.expect("stopped").to_string();
    assert!(message.contains(&format!("byte {}", ends[0])), "{message}");
}

#[test]
fn a_file_that_is_not_a_log_is_an_error() {
    let path = temp_path("not-a-log.txt");
    std::fs::write(&path, "driver;f 10\ndriver;g 20\n").expect("written");
    assert!(matches!(read_log(&path), Err(LogError::NotALog)));
    assert!(matches!(
        read_log(temp_path("missing.rayrslog")),
        Err(LogError::Io(_))
    ));
}

/// Views filtered as `--at` filters them, and compared by their exports.
fn exports(views: &Views) -> Vec<String> {
    let snapshot = views.snapshot();
    [
        (ViewKind::Logical, ExportFormat::Json),
        (ViewKind::Flame, ExportFormat::Folded),
        (ViewKind::Stack, ExportFormat::Json),
        (ViewKind::Physical, ExportFormat::Json),
        (ViewKind::Gantt, ExportFormat::Chrome),
    ]
    .into_iter()
    .map(|(view, format)| export(&snapshot, view, format).expect("exports"))
    .collect()
}

#[test]
fn a_log_written_beside_live_views_replays_to_the_same_views() {
    let mut live = Views::default();
    let mut log = LogWriter::new(Vec::new(), EPOCH).expect("in memory");
    for batch in job() {
        let mut tee = Tee::new().with(&mut live).with(&mut log);
        let mut owned = batch.clone();
        tee.accept_owned(&mut owned);
    }
    let contents = read_bytes(&log.into_inner()).expect("a log");
    assert_eq!(contents.records, all_records());
    let replayed = replay(&contents.records, Limits::default(), None);
    assert_eq!(exports(&replayed), exports(&live));
    assert_eq!(replayed.stats(), live.stats());
}

#[test]
fn replay_at_a_time_shows_the_tasks_running_then() {
    let records = all_records();
    // At 6 ms: train runs and waits on the second step, which runs.
    let at_6ms = replay(&records, Limits::default(), Some(6_000_000));
    let stacks = at_6ms.snapshot().stacks();
    assert_eq!(at_6ms.stats().live_tasks, 2, "{:?}", at_6ms.stats());
    let text = stacks.to_text();
    assert!(text.contains("shapes::train"), "{text}");
    assert!(text.contains("shapes::step"), "{text}");
    // Only the first step had finished: one call of it in the flame graph.
    let flame = at_6ms.snapshot().flame();
    let step = flame
        .frame("driver;shapes::train;shapes::step")
        .expect("the finished step");
    assert_eq!(step.count, 1);
    assert_eq!(step.total_nanos, 2_000_000);
    assert!(flame
        .frame("driver;shapes::train")
        .is_none_or(|f| f.count == 0));
    // After the end, nothing runs and both steps are counted.
    let end = replay(&records, Limits::default(), None);
    assert_eq!(end.stats().live_tasks, 0);
    assert!(end.snapshot().stacks().to_text().is_empty());
    let flame = end.snapshot().flame();
    assert_eq!(
        flame
            .frame("driver;shapes::train;shapes::step")
            .map(|f| f.count),
        Some(2)
    );
    // Before the first record: nothing at all.
    let mut before = Replay::new(Limits::default(), Some(0));
    before.accept(&records[2..]);
    assert_eq!(before.skipped(), records.len() as u64 - 2);
    assert_eq!(before.views().stats().applied, 0);
}

#[test]
fn a_streaming_reader_hands_frames_to_a_sink_and_reports_damage() {
    let (log, ends) = job_log();
    let cut = &log[..(ends[1] + 5) as usize];
    let mut reader = LogReader::new(cut).expect("a log");
    let mut replay = Replay::new(Limits::default(), None);
    let stopped = reader.read_into(&mut replay).expect("readable");
    assert!(matches!(stopped, Some(LogError::Truncated { offset, .. }) if offset == ends[1]));
    assert_eq!(
        reader.records_read(),
        (job()[0].len() + job()[1].len()) as u64
    );
    assert_eq!(reader.offset(), ends[1]);
    assert_eq!(replay.views().stats().live_tasks, 2);
}

/// The running slice of task `task_id` in `views`' Gantt chart.
fn running_slice(views: &Views, task_id: &str) -> ray_insight::views::GanttSlice {
    views
        .snapshot()
        .gantt()
        .slices
        .into_iter()
        .find(|s| s.task_id == task_id && s.state == ray_insight::views::SliceState::Running)
        .unwrap_or_else(|| panic!("a running slice of {task_id}"))
}

#[test]
fn replay_at_a_time_draws_running_tasks_up_to_that_time() {
    use RecordKind::*;
    // One task, running from 1 ms to 10 ms; no record between the two.
    let records = [
        record(
            SpanNew,
            1,
            "task.run",
            1_000,
            &[("task_id", "t1"), ("function", "shapes::step")],
        ),
        record(SpanClose, 1, "task.run", 10_000, &[]),
    ];
    for at_5ms in [replay(&records, Limits::default(), Some(5_000_000)), {
        let mut sink = Replay::new(Limits::default(), Some(5_000_000));
        sink.accept(&records);
        assert_eq!(sink.skipped(), 1);
        sink.into_views()
    }] {
        assert_eq!(at_5ms.stats().live_tasks, 1);
        assert_eq!(at_5ms.now_nanos(), 5_000_000);
        // Drawn from its start to 5 ms (4 ms), not to its last record (0 ms).
        let slice = running_slice(&at_5ms, "t1");
        assert!(!slice.finished);
        assert_eq!(slice.start_nanos, 1_000_000);
        assert_eq!(slice.start_nanos + slice.dur_nanos, 5_000_000);
        let stacks = at_5ms.snapshot().stacks();
        assert_eq!(stacks.now_nanos, 5_000_000);
        assert_eq!(stacks.tasks[0].started_nanos, 1_000_000);
        let text = stacks.to_text();
        assert!(text.contains("[running for 4.000 ms]"), "{text}");
    }
    // Replayed whole, the task finished at 10 ms.
    let end = replay(&records, Limits::default(), None);
    let slice = running_slice(&end, "t1");
    assert!(slice.finished);
    assert_eq!(slice.dur_nanos, 9_000_000);
    assert_eq!(end.now_nanos(), 10_000_000);
}
