//! The flame graph finds the slow actor instances of a tree of workers of
//! one class (one test per file: it installs the process's global
//! subscriber).

use ray_test_support::{embedded, recording};

use std::time::Duration;

use ray_core::prelude::*;
use ray_core::ActorId;
use ray_insight::views::FlameView;
use ray_insight::Views;

/// A worker that works `own_ms` per call, then has each child work.
#[remote]
struct Worker {
    own_ms: u64,
    children: Vec<ActorHandle<Worker>>,
}

#[remote]
impl Worker {
    fn new(own_ms: u64, children: Vec<ActorHandle<Worker>>) -> Self {
        Worker { own_ms, children }
    }
    fn process(&self) -> u64 {
        std::thread::sleep(Duration::from_millis(self.own_ms));
        let calls: Vec<_> = self.children.iter().map(|c| c.process().unwrap()).collect();
        1 + calls
            .into_iter()
            .map(|c| c.get_blocking().unwrap())
            .sum::<u64>()
    }
}

/// The insight id of an actor (as its records name it).
fn insight_id(id: ActorId) -> String {
    let v = id.as_u128();
    format!("actor-{:x}.{:x}", v >> 64, v as u64)
}

/// The self time of every frame whose last frame is instance `actor`'s.
fn self_of(flame: &FlameView, actor: &str) -> u64 {
    flame
        .frames
        .iter()
        .filter(|f| {
            f.path
                .rsplit(';')
                .next()
                .is_some_and(|last| last.contains(&format!("[{actor}]")))
        })
        .map(|f| f.self_nanos)
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_heaviest_self_frames_are_the_slow_instances_not_their_healthy_sibling() {
    let collector = recording::record_globally();
    let ray = embedded::runtime(4.0).await;
    // Three workers of one class under a root: two slow, one healthy.
    // The slow ones' own time is large against what a loaded 2-core
    // machine adds to the root's (a thread descheduled between its gets
    // counts as its own time: 40 ms a call once measured 51 ms of root
    // self time against 203 ms for a slow child, under CI's load).
    let own = [150, 2, 150];
    let workers: Vec<ActorHandle<Worker>> = own
        .iter()
        .map(|&ms| Worker::remote(&ray, ms, Vec::new()).unwrap())
        .collect();
    let root = Worker::remote(&ray, 1, workers.clone()).unwrap();
    const ROUNDS: u64 = 4;
    for _ in 0..ROUNDS {
        assert_eq!(root.process().unwrap().get().await.unwrap(), 4);
    }
    let mut views = Views::default();
    recording::drain_until(&collector, &mut views, Duration::from_secs(30), |v| {
        let flame = v.snapshot().flame();
        let calls: u64 = flame
            .frames
            .iter()
            .filter(|f| f.path.ends_with(".process"))
            .map(|f| f.count)
            .sum();
        calls == ROUNDS * 4
    })
    .await;
    ray.shutdown();
    let flame = views.snapshot().flame();
    let ids: Vec<String> = workers.iter().map(|w| insight_id(w.id())).collect();
    // Every call is a frame of its instance, under the root's.
    let root_id = insight_id(root.id());
    for id in &ids {
        let path = format!("driver;{0}[{root_id}].process;{0}[{id}].process", class());
        let frame = flame.frame(&path).unwrap_or_else(|| {
            let paths: Vec<&str> = flame.frames.iter().map(|f| f.path.as_str()).collect();
            panic!("no frame {path} in {paths:?}")
        });
        assert_eq!(frame.count, ROUNDS, "{path}");
    }
    // The two heaviest self frames of the class are the slow instances.
    let mut by_self: Vec<(u64, &str)> = ids
        .iter()
        .chain(std::iter::once(&root_id))
        .map(|id| (self_of(&flame, id), id.as_str()))
        .collect();
    by_self.sort_unstable_by(|a, b| b.cmp(a));
    let top: Vec<&str> = by_self[..2].iter().map(|(_, id)| *id).collect();
    assert!(top.contains(&ids[0].as_str()), "{by_self:?}");
    assert!(top.contains(&ids[2].as_str()), "{by_self:?}");
    assert!(!top.contains(&ids[1].as_str()), "{by_self:?}");
    // The root worked about 1 ms a call and waited for its children: its
    // self time is far below a slow child's (600 ms in all), though its
    // total is above.
    let slow = self_of(&flame, &ids[0]);
    assert!(
        self_of(&flame, &root_id) < slow / 4,
        "root {} vs slow {slow}; every frame: {:?}",
        self_of(&flame, &root_id),
        flame
            .frames
            .iter()
            .map(|f| (&f.path, f.count, f.self_nanos))
            .collect::<Vec<_>>()
    );
    // Folded into the class, the three children are one frame.
    let by_class = flame.by_class();
    let folded = format!("driver;{0}.process;{0}.process", class());
    assert_eq!(
        by_class.frame(&folded).map(|f| f.count),
        Some(ROUNDS * 3),
        "{folded}"
    );
}

/// The class's name as the runtime records it.
fn class() -> String {
    format!("{}::Worker", module_path!())
}
