//! The views read the runtime's compact shapes as they are
//! ([`Views::apply_packed`]) with the same effect as applying their
//! expansions ([`Views::apply`] of `Batch::unpack_into`'s records): seeded
//! batches of every shape, in any order, give the same views both ways.

use super::*;
use crate::export::{export, ViewKind};
use crate::packed::{Batch, RunInfo, RunKind, SubmitInfo};
use crate::record::{FieldStr, FieldValue, Fields, Record, RecordKind};

/// A small seeded generator (xorshift), so a failing seed replays.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

const FUNCTIONS: [&str; 3] = ["m::f", "m::g", "m::h"];
const CLASSES: [&str; 2] = ["m::Worker", "m::Db"];
const METHODS: [&str; 3] = ["process", "report", "get"];

/// A task id of a small pool (owner in the high word), so records of one
/// task meet: submits, runs, retries, objects it returns.
fn task_id(rng: &mut Rng) -> u128 {
    (7u128 << 64) | u128::from(1 + rng.below(24))
}

fn full(kind: RecordKind, span: u64, parent: u64, name: &'static str, at: u64) -> Record {
    Record {
        kind,
        span,
        parent,
        name,
        target: "app",
        at_nanos: at,
        thread: 0,
        fields: Fields::new(),
    }
}

/// A batch of `steps` records of every shape, from `seed`.
fn batch(seed: u64, steps: usize) -> Batch {
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let mut b = Batch::with_capacity(steps);
    let mut at = 1_000u64;
    let mut next_span = 0u64;
    // Runs open and not yet closed, and the application spans open.
    let mut open_runs: Vec<u64> = Vec::new();
    let mut user_spans: Vec<u64> = Vec::new();
    for _ in 0..steps {
        // Mostly forward in time; now and then a record from the past
        // (another thread's, joined later).
        at = if rng.chance(10) {
            at.saturating_sub(rng.below(5_000))
        } else {
            at + rng.below(3_000)
        };
        let thread = 1 + rng.below(4) as u32;
        let in_span = |rng: &mut Rng, spans: &[u64]| match spans.len() {
            0 => 0,
            n if rng.chance(60) => spans[rng.below(n as u64) as usize],
            _ => 0,
        };
        match rng.below(100) {
            0..=24 => {
                let actor = rng.chance(50).then(|| u128::from(1 + rng.below(3)));
                let info = SubmitInfo {
                    task: task_id(&mut rng),
                    function: if actor.is_some() {
                        METHODS[rng.below(3) as usize]
                    } else {
                        FUNCTIONS[rng.below(3) as usize]
                    },
                    actor,
                    parent_task: rng.chance(50).then(|| task_id(&mut rng)),
                    parent_span: if rng.chance(20) {
                        in_span(&mut rng, &user_spans).max(rng.below(3))
                    } else {
                        0
                    },
                };
                let parent = in_span(&mut rng, &open_runs);
                b.push_submit(thread, at, parent, &info);
            }
            25..=54 => {
                let actor = u128::from(1 + rng.below(3));
                let class = CLASSES[(actor % 2) as usize];
                let kind = match rng.below(10) {
                    0..=3 => RunKind::Task {
                        function: FUNCTIONS[rng.below(3) as usize],
                    },
                    4..=8 => RunKind::ActorCall {
                        actor,
                        class,
                        method: METHODS[rng.below(3) as usize],
                    },
                    _ => RunKind::ActorCreate { actor, class },
                };
                let info = RunInfo {
                    kind,
                    task: task_id(&mut rng),
                    attempt: if rng.chance(15) {
                        1 + rng.below(2) as u32
                    } else {
                        0
                    },
                    parent_task: rng.chance(50).then(|| task_id(&mut rng)),
                    parent_span: if rng.chance(15) {
                        in_span(&mut rng, &user_spans)
                    } else {
                        0
                    },
                    node: 1 + rng.below(3),
                    worker: 1 + rng.below(3),
                };
                next_span += 1;
                let parent = in_span(&mut rng, &open_runs);
                b.push_run(thread, at, next_span, parent, info);
                if rng.chance(65) {
                    let cpu = rng.chance(50).then(|| rng.below(2_000));
                    assert!(b.fold_close(next_span, at + rng.below(4_000), cpu));
                } else {
                    open_runs.push(next_span);
                }
            }
            55..=64 if !open_runs.is_empty() => {
                let span = open_runs.swap_remove(rng.below(open_runs.len() as u64) as usize);
                let cpu = rng.chance(50).then(|| rng.below(2_000));
                b.push_close(thread, at, span, 0, ("actor.call", "ray::actor"), cpu);
            }
            65..=84 => {
                let get = rng.chance(60);
                let info = crate::packed::ObjectInfo {
                    // Some are tasks' return objects (same numbers).
                    object: task_id(&mut rng),
                    bytes: rng.below(1 << 20),
                    task: rng.chance(70).then(|| task_id(&mut rng)),
                    node: 1 + rng.below(3),
                    get: get.then(|| rng.chance(50)),
                };
                let parent = in_span(&mut rng, &open_runs);
                b.push_object(thread, at, parent, &info);
            }
            85..=89 if !open_runs.is_empty() => {
                // An application span inside a run.
                next_span += 1;
                let parent = in_span(&mut rng, &open_runs).max(open_runs[0]);
                let mut record = full(RecordKind::SpanNew, next_span, parent, "reward_fn", at);
                record.thread = thread;
                b.push_full(record);
                user_spans.push(next_span);
            }
            90..=93 if !user_spans.is_empty() => {
                let span = user_spans.swap_remove(rng.below(user_spans.len() as u64) as usize);
                let mut record = full(RecordKind::SpanClose, span, 0, "reward_fn", at);
                record.thread = thread;
                b.push_full(record);
            }
            94..=96 => {
                // A loss, final or of one attempt.
                let mut record = full(RecordKind::Event, 0, 0, "task.lost", at);
                let (hi, lo) = ((task_id(&mut rng) >> 64) as u64, 1 + rng.below(24));
                record.fields.push("task_id", FieldValue::U128 { hi, lo });
                if rng.chance(60) {
                    record.fields.push("attempt", FieldValue::U64(rng.below(3)));
                }
                b.push_full(record);
            }
            _ => {
                // Labels set inside a run.
                let mut record = full(RecordKind::Event, 0, 0, "context", at);
                record.parent = in_span(&mut rng, &open_runs);
                let rank = ["0", "1", "2"][rng.below(3) as usize];
                record
                    .fields
                    .push("rank", FieldValue::Str(FieldStr::from(rank)));
                b.push_full(record);
            }
        }
    }
    b
}

/// Every view's default export and the counters, as one comparable text.
fn everything(views: &Views) -> String {
    let snapshot = views.snapshot();
    let mut out = format!("{:?}\n", views.stats());
    for view in [
        ViewKind::Logical,
        ViewKind::Physical,
        ViewKind::Stack,
        ViewKind::Flame,
        ViewKind::Gantt,
    ] {
        match export(&snapshot, view, view.default_format()) {
            Ok(text) => out.push_str(&text),
            Err(e) => out.push_str(&format!("{view:?}: {e}")),
        }
        out.push('\n');
    }
    out
}

#[test]
fn compact_shapes_read_as_they_are_give_the_views_of_their_expansions() {
    for seed in 1..=300u64 {
        let steps = 40 + (seed as usize % 7) * 60;
        let mut typed = Views::default();
        batch(seed, steps).visit(|packed| typed.apply_packed(packed));
        let mut expanded = Views::default();
        let mut records = Vec::new();
        batch(seed, steps).unpack_into(&mut records);
        assert_eq!(records.len(), steps);
        for record in &records {
            expanded.apply(record);
        }
        let (a, b) = (everything(&typed), everything(&expanded));
        assert!(
            a == b,
            "seed {seed}: the views differ\ntyped:\n{a}\nexpanded:\n{b}"
        );
        assert!(typed.stats().applied > 0, "seed {seed} applied nothing");
    }
}

#[test]
fn a_drained_batch_reaches_views_typed_and_other_sinks_expanded() {
    use crate::sink::{Drained, MemorySink, Sink};
    let mut records = Vec::new();
    let mut b = batch(7, 200);
    let len = b.len();
    let mut typed = Views::default();
    {
        let mut drained = Drained::new(&mut b, &mut records);
        assert_eq!(drained.len(), len);
        typed.accept_drained(&mut drained);
        // Still whole for the next sink, expanded now.
        let mut memory = MemorySink::new(usize::MAX);
        memory.accept_drained(&mut drained);
        assert_eq!(memory.len(), len);
    }
    let mut expanded = Views::default();
    let mut again = Vec::new();
    batch(7, 200).unpack_into(&mut again);
    expanded.accept(&again);
    assert_eq!(everything(&typed), everything(&expanded));
}

/// A shipped batch keeps its compact shapes: encoded and decoded, it
/// expands to the records the original expands to, and it is smaller than
/// those records encoded whole.
#[test]
fn compact_shapes_survive_the_codec_and_take_fewer_bytes() {
    use crate::log::{decode_records, encode_records, Chunk};
    for seed in 1..=200u64 {
        let steps = 20 + (seed as usize % 9) * 40;
        let mut want = Vec::new();
        batch(seed, steps).unpack_into(&mut want);
        let (mut compact, mut whole) = (Vec::new(), Vec::new());
        crate::log::encode_batch_into(&batch(seed, steps), &mut compact);
        encode_records(&want, &mut whole);
        assert!(compact.len() < whole.len(), "seed {seed}");
        assert_eq!(
            decode_records(&compact).expect("decodes"),
            want,
            "seed {seed}"
        );
        let mut chunk = Chunk::decode(&compact).expect("decodes");
        assert_eq!(chunk.len(), steps);
        assert_eq!(chunk.take_records(), want, "seed {seed}");
    }
}

/// Whatever the bytes, decoding a batch of compact shapes cut short or with
/// a byte changed is an error or a batch, never a panic.
#[test]
fn damaged_compact_batches_decode_to_an_error_or_a_batch() {
    use crate::log::Chunk;
    let mut bytes = Vec::new();
    crate::log::encode_batch_into(&batch(11, 120), &mut bytes);
    for cut in 0..bytes.len() {
        assert!(Chunk::decode(&bytes[..cut]).is_err(), "cut at {cut}");
    }
    let mut rng = Rng(99);
    for _ in 0..2_000 {
        let mut damaged = bytes.clone();
        let at = rng.below(damaged.len() as u64) as usize;
        damaged[at] = rng.next() as u8;
        if let Ok(mut chunk) = Chunk::decode(&damaged) {
            let _ = chunk.take_records();
        }
    }
}

/// The head's rebasing of a shipped chunk does to every compact shape what
/// it does to that shape's expansion: times shifted, span ids, parents and
/// threads mapped, and a submit's or call's `parent_span` mapped by its
/// task's owner.
#[test]
fn a_rebased_chunk_expands_to_the_rebased_records() {
    use crate::log::Chunk;
    let span = |s: u64| if s == 0 { 0 } else { s.wrapping_mul(31) ^ 5 };
    let thread = |t: u32| t + 100;
    // Never 0 for a span (0 is "none"), as the head's ids.
    let parent_span = |owner: u64, s: u64| (s ^ (owner << 1)).max(1);
    for (seed, shift) in [(1u64, 5_000i128), (2, -1_500), (3, -1 << 70), (4, 0)] {
        let mut want = Vec::new();
        batch(seed, 300).unpack_into(&mut want);
        for r in &mut want {
            r.shift_times(shift);
            r.span = span(r.span);
            r.parent = span(r.parent);
            r.thread = thread(r.thread);
            if matches!(r.name, "task.submit" | "task.run" | "actor.call") {
                let owner = match r.field("task_id") {
                    Some(FieldValue::U128 { hi, .. }) => *hi,
                    _ => continue,
                };
                if let Some(FieldValue::U64(s)) = r.fields.get_mut("parent_span") {
                    *s = parent_span(owner, *s);
                }
            }
        }
        let mut bytes = Vec::new();
        crate::log::encode_batch_into(&batch(seed, 300), &mut bytes);
        let mut chunk = Chunk::decode(&bytes).expect("decodes");
        chunk.rebase(shift, span, thread, parent_span);
        let got = chunk.take_records();
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g, w, "seed {seed}, shift {shift}, record {i}");
        }
        assert_eq!(got.len(), want.len());
    }
}

/// A compact record whose name the interner refuses (longer than it keeps)
/// decodes to its whole record with the name as it was, not a placeholder.
#[test]
fn a_name_the_interner_refuses_keeps_its_text() {
    use crate::log::{decode_records, Chunk, MAX_INTERNED_LEN};
    let long: &'static str = Box::leak("m::Worker<".repeat(MAX_INTERNED_LEN / 8).into_boxed_str());
    let mut b = Batch::with_capacity(4);
    b.push_submit(
        1,
        10,
        0,
        &SubmitInfo {
            task: (7 << 64) | 1,
            function: long,
            actor: Some(3),
            parent_task: None,
            parent_span: 0,
        },
    );
    b.push_run(
        1,
        11,
        1,
        0,
        RunInfo {
            kind: RunKind::ActorCall {
                actor: 3,
                class: long,
                method: "process",
            },
            task: (7 << 64) | 1,
            attempt: 0,
            parent_task: None,
            parent_span: 0,
            node: 1,
            worker: 2,
        },
    );
    assert!(b.fold_close(1, 20, Some(5)));
    let mut want = Vec::new();
    let mut bytes = Vec::new();
    crate::log::encode_batch_into(&b, &mut bytes);
    b.unpack_into(&mut want);
    let got = decode_records(&bytes).expect("decodes");
    assert_eq!(got, want);
    assert_eq!(
        got[0].field("method").and_then(FieldValue::as_str),
        Some(long)
    );
    assert_eq!(
        got[1].field("class").and_then(FieldValue::as_str),
        Some(long)
    );
    let mut chunk = Chunk::decode(&bytes).expect("decodes");
    let mut views = Views::default();
    chunk.apply_to(&mut views);
    assert_eq!(chunk.take_records(), want);
    assert_eq!(views.stats().applied, 2);
}

/// An event log written from drained batches keeps the compact shapes
/// (fewer bytes) and reads back as their expansions.
#[test]
fn a_log_written_from_drained_batches_reads_back_as_the_records() {
    use crate::log::{LogReader, LogWriter};
    use crate::sink::{Drained, Sink};
    let mut want = Vec::new();
    let (mut compact, mut whole) = (
        LogWriter::new(Vec::new(), 3).expect("header"),
        LogWriter::new(Vec::new(), 3).expect("header"),
    );
    for seed in 1..=5u64 {
        let mut records = Vec::new();
        let mut b = batch(seed, 200);
        compact.accept_drained(&mut Drained::new(&mut b, &mut records));
        let mut expanded = Vec::new();
        batch(seed, 200).unpack_into(&mut expanded);
        whole.accept(&expanded);
        want.extend(expanded);
    }
    assert_eq!(compact.failed_batches(), 0);
    assert_eq!(compact.records_written(), 1_000);
    let (compact, whole) = (compact.into_inner(), whole.into_inner());
    assert!(
        compact.len() < whole.len(),
        "{} vs {}",
        compact.len(),
        whole.len()
    );
    let mut reader = LogReader::new(&compact[..]).expect("a log");
    let mut read = Vec::new();
    while let Some(batch) = reader.next_batch().expect("whole") {
        read.extend(batch);
    }
    assert_eq!(read, want);
}
