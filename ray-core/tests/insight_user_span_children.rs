//! Work submitted inside an application's own `tracing` span is a frame
//! under that span in the flame graph, not beside it: a task's children,
//! and its actor calls, whether they start while the span is open or after
//! it closed (one test per file: it installs the process's global
//! subscriber).

use ray_test_support::{embedded, recording};

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ray_core::prelude::*;
use ray_insight::views::FlameFrame;
use ray_insight::Views;

/// Set by `outer` once its `reward_fn` span closed: lets `gate` return.
static SPAN_CLOSED: AtomicBool = AtomicBool::new(false);

#[remote]
fn leaf(x: u64) -> u64 {
    x + 1
}

/// Returns once `outer`'s span closed: a task taking its result as an
/// argument can start only then.
#[remote]
fn gate() -> u64 {
    while !SPAN_CLOSED.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(2));
    }
    0
}

#[remote]
struct Scorer;

#[remote]
impl Scorer {
    fn new() -> Self {
        Scorer
    }
    fn grade(&self, x: u64) -> u64 {
        x * 10
    }
}

/// Inside `reward_fn`: two `leaf` tasks, one `grade` call, and a `leaf`
/// that waits for `gate`, so it starts after the span closed. Outside it:
/// one more `leaf`.
#[remote]
async fn outer(scorer: ActorHandle<Scorer>) -> u64 {
    let ray = Ray::current().expect("inside a task");
    let (inside, graded, late) = {
        let _reward = tracing::info_span!("reward_fn").entered();
        let inside: Vec<_> = (0..2).map(|i| leaf::remote(&ray, i).unwrap()).collect();
        let graded = scorer.grade(3).unwrap();
        let opened = gate::remote(&ray).unwrap();
        let late = leaf::remote(&ray, opened).unwrap();
        (inside, graded, late)
    };
    SPAN_CLOSED.store(true, Ordering::Release);
    let outside = leaf::remote(&ray, 100).unwrap();
    let mut sum = 0;
    for r in inside {
        sum += r.get().await.unwrap();
    }
    sum + graded.get().await.unwrap() + late.get().await.unwrap() + outside.get().await.unwrap()
}

fn count(frames: &[FlameFrame], path: &str) -> u64 {
    frames
        .iter()
        .filter(|f| f.path == path)
        .map(|f| f.count)
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_submitted_inside_a_user_span_is_a_frame_under_that_span() {
    let collector = recording::record_globally();
    let ray = embedded::runtime(4.0).await;
    let scorer = Scorer::remote(&ray).unwrap();
    let total = outer::remote(&ray, scorer).unwrap().get().await.unwrap();
    // leaf(0) + leaf(1) + grade(3) + leaf(0) + leaf(100)
    assert_eq!(total, 1 + 2 + 30 + 1 + 101);

    let outer_path = "driver;insight_user_span_children::outer";
    let reward = format!("{outer_path};reward_fn");
    let leaf_in = format!("{reward};insight_user_span_children::leaf");
    let leaf_out = format!("{outer_path};insight_user_span_children::leaf");
    let mut views = Views::default();
    recording::drain_until(&collector, &mut views, Duration::from_secs(30), |v| {
        let flame = v.snapshot().flame();
        count(&flame.frames, &leaf_in) == 3
            && count(&flame.frames, &leaf_out) == 1
            && count(&flame.frames, &reward) == 1
    })
    .await;
    let flame = views.snapshot().flame();
    let paths: Vec<&str> = flame.frames.iter().map(|f| f.path.as_str()).collect();
    // The two leaves started in the span and the one started after it
    // closed are under it; the one submitted after it is beside it.
    assert_eq!(count(&flame.frames, &leaf_in), 3, "{paths:#?}");
    assert_eq!(count(&flame.frames, &leaf_out), 1, "{paths:#?}");
    assert_eq!(count(&flame.frames, &reward), 1, "{paths:#?}");
    // The actor call made in the span is under it too (named by instance).
    let graded: Vec<&&str> = paths
        .iter()
        .filter(|p| {
            p.starts_with(&format!("{reward};insight_user_span_children::Scorer["))
                && p.ends_with("].grade")
        })
        .collect();
    assert_eq!(graded.len(), 1, "{paths:#?}");
    // `gate` was submitted in the span as well.
    assert_eq!(
        count(
            &flame.frames,
            &format!("{reward};insight_user_span_children::gate")
        ),
        1,
        "{paths:#?}"
    );
    assert!(!paths.iter().any(|p| p.contains("[unknown]")), "{paths:#?}");
    assert_eq!(views.stats().ignored, 0, "{:?}", views.stats());
}
