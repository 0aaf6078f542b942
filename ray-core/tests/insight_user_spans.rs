//! An application's own `tracing` spans inside a task show in the flame
//! graph and the Gantt chart as frames under the task (one test per file:
//! it installs the process's global subscriber).

use ray_test_support::{embedded, recording};

use std::time::Duration;

use ray_core::prelude::*;
use ray_insight::views::{FlameFrame, SliceState};
use ray_insight::Views;

/// Scores a sample: a `reward_fn` span (labelled `phase=rl`) with a nested
/// `tokenize` span, beside work of its own.
#[remote]
fn score(sample: u64) -> u64 {
    std::thread::sleep(Duration::from_millis(2));
    let reward = tracing::info_span!("reward_fn", labels = "phase=rl");
    let _in_reward = reward.enter();
    std::thread::sleep(Duration::from_millis(3));
    let tokens = {
        let _in_tokenize = tracing::info_span!("tokenize").entered();
        std::thread::sleep(Duration::from_millis(2));
        sample * 2
    };
    tokens + 1
}

/// Set by the test to let `stuck` return.
static RELEASE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Opens a `load` span and stays in it until the test releases it.
#[remote]
fn stuck() -> u64 {
    let _in_load = tracing::info_span!("load").entered();
    while !RELEASE.load(std::sync::atomic::Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(5));
    }
    7
}

fn frame<'a>(frames: &'a [FlameFrame], suffix: &str) -> &'a FlameFrame {
    frames
        .iter()
        .find(|f| f.path.ends_with(suffix))
        .unwrap_or_else(|| panic!("no frame ending {suffix} in {frames:#?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_span_inside_a_task_is_a_frame_under_it_in_flame_and_gantt() {
    let collector = recording::record_globally();
    let ray = embedded::runtime(2.0).await;
    const TASKS: u64 = 4;
    let refs: Vec<_> = (0..TASKS)
        .map(|i| score::remote(&ray, i).unwrap())
        .collect();
    for (i, r) in refs.into_iter().enumerate() {
        assert_eq!(r.get().await.unwrap(), i as u64 * 2 + 1);
    }
    let mut views = Views::default();
    recording::drain_until(&collector, &mut views, Duration::from_secs(30), |v| {
        let flame = v.snapshot().flame();
        let done = |suffix: &str| {
            flame
                .frames
                .iter()
                .any(|f| f.path.ends_with(suffix) && f.count == TASKS)
        };
        done("score") && done("score;reward_fn;tokenize")
    })
    .await;

    let flame = views.snapshot().flame();
    let task = frame(&flame.frames, "score");
    let reward = frame(&flame.frames, "score;reward_fn");
    let tokenize = frame(&flame.frames, "score;reward_fn;tokenize");
    assert_eq!(task.path, "driver;insight_user_spans::score");
    for f in [task, reward, tokenize] {
        assert_eq!(f.count, TASKS, "{f:?}");
    }
    // Each frame's own time leaves out its user spans' time, so the graph
    // adds up: nothing here waited.
    assert_eq!(task.self_nanos, task.total_nanos - reward.total_nanos);
    assert_eq!(reward.self_nanos, reward.total_nanos - tokenize.total_nanos);
    assert_eq!(tokenize.self_nanos, tokenize.total_nanos);
    assert!(tokenize.total_nanos >= TASKS * 2_000_000, "{tokenize:?}");
    assert!(reward.total_nanos >= tokenize.total_nanos + TASKS * 3_000_000);
    assert!(task.total_nanos >= reward.total_nanos + TASKS * 2_000_000);

    // In the Gantt chart: each span is a slice in its task's lane, inside
    // the task's running slice.
    let gantt = views.snapshot().gantt();
    let runs: Vec<_> = gantt
        .slices
        .iter()
        .filter(|s| s.state == SliceState::Running && s.name.ends_with("score"))
        .collect();
    assert_eq!(runs.len() as u64, TASKS);
    for name in ["reward_fn", "tokenize"] {
        let spans: Vec<_> = gantt.slices.iter().filter(|s| s.name == name).collect();
        assert_eq!(spans.len() as u64, TASKS, "{name}");
        for span in spans {
            let run = runs
                .iter()
                .find(|r| r.task_id == span.task_id)
                .unwrap_or_else(|| panic!("{name} has no task run: {span:?}"));
            assert_eq!(span.lane, run.lane);
            assert!(span.start_nanos >= run.start_nanos);
            assert!(span.start_nanos + span.dur_nanos <= run.start_nanos + run.dur_nanos);
        }
    }

    // The span's own labels hold for it (and what runs inside it).
    let rl = views.filter("phase", "rl").flame();
    assert!(rl
        .frames
        .iter()
        .any(|f| f.path.ends_with("score;reward_fn") && f.count == TASKS));
    assert!(
        rl.frames
            .iter()
            .all(|f| f.count == 0 || f.path.contains("reward_fn")),
        "only the labelled span's frames: {:#?}",
        rl.frames
    );
    assert_eq!(views.stats().ignored, 0, "{:?}", views.stats());

    // A task that stays inside its span: the stack view says where it is,
    // while it is there (its thread records nothing more meanwhile).
    let held = stuck::remote(&ray).unwrap();
    recording::drain_until(&collector, &mut views, Duration::from_secs(30), |v| {
        v.snapshot()
            .stacks()
            .tasks
            .iter()
            .any(|t| t.task.name.ends_with("stuck") && t.spans == ["load"])
    })
    .await;
    let stacks = views.snapshot().stacks();
    let task = stacks
        .tasks
        .iter()
        .find(|t| t.task.name.ends_with("stuck"))
        .unwrap_or_else(|| panic!("the stuck task in {stacks:#?}"));
    assert_eq!(task.spans, ["load"]);
    RELEASE.store(true, std::sync::atomic::Ordering::Release);
    assert_eq!(held.get().await.unwrap(), 7);
}
